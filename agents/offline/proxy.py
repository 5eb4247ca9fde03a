"""The recording proxy of --trace: passes each request to the configured endpoint, hands the
answer back as it comes, and records each model call, its reply rebuilt from its events."""

from __future__ import annotations

import bisect
import contextlib
import http.client
import itertools
import json
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .answers import chunked_whole, dechunk, rebuild
from .protocol import Interner


# Headers of one connection, not passed on (the proxy sets its own).
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade", "content-length", "host",
              "accept-encoding", "proxy-connection"}


class ForwardingProxy:
    """Passes /v1/... requests on to `upstream` unchanged (streams stream through as they arrive)
    and records each answered call as {"request", "reply", "at"}, the reply rebuilt from its events.

    The credentials in a request go to the configured upstream and nowhere else: the host comes
    only from `upstream`, the request's target only adds a path to it (a target that does not
    start with "/" is refused), and a redirect is never followed: the 3xx goes back to the client
    as it came."""

    def __init__(self, upstream: str):
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username \
                or parts.password or parts.query or parts.fragment:
            raise ValueError(f"ANTHROPIC_BASE_URL must be a plain http(s) URL, like "
                             f"https://api.anthropic.com, not {upstream!r}")
        self.upstream, self.calls, self._lock = upstream.rstrip("/"), [], threading.Lock()
        self._parts, self.kept = parts, Interner()  # the calls' requests share their messages
        self._busy, self._handling = threading.Condition(), 0  # requests being relayed or recorded
        self.notes: list[str] = []  # answers that were not recorded, and why
        self._turns: list[int] = []  # for each recorded call, when its request came (in order)
        self._sent = itertools.count()

    def connect(self) -> http.client.HTTPConnection:
        """A connection to the upstream's host, and no other: nothing in a request can change it."""
        if self._parts.scheme == "https":
            return http.client.HTTPSConnection(self._parts.hostname, self._parts.port, timeout=600,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self._parts.hostname, self._parts.port, timeout=600)

    def target(self, path: str) -> str | None:
        """The request-target upstream: the upstream's path, then the request's; None if refused."""
        if not path.startswith("/") or any(not 33 <= ord(c) <= 126 for c in path):
            return None
        return self._parts.path.rstrip("/") + path

    def __enter__(self) -> "ForwardingProxy":
        self._server = ProxyServer(self)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @contextlib.contextmanager
    def handling(self):
        """Counts a request as being relayed or recorded while inside (settle() waits for 0)."""
        with self._busy:
            self._handling += 1
        try:
            yield
        finally:
            with self._busy:
                self._handling -= 1
                self._busy.notify_all()

    def take_turn(self) -> int:
        with self._lock:
            return next(self._sent)

    def add_call(self, turn: int, call: dict) -> None:
        """Record a call where its request was sent, after the calls sent before it (their
        answers may end in any order)."""
        with self._lock:
            at = bisect.bisect(self._turns, turn)
            self._turns.insert(at, turn)
            self.calls.insert(at, call)

    def note(self, problem: str) -> None:
        """Something the page will not show (an answer not recorded): told once, at the end."""
        with self._lock:
            self.notes.append(problem)

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until no request is being relayed or recorded (a reply is recorded just after the
        client has it all); False if one still is after `timeout` seconds."""
        with self._busy:
            return self._busy.wait_for(lambda: self._handling == 0, timeout)

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


class ProxyServer(ThreadingHTTPServer):
    """The proxy's HTTP server on a free port of 127.0.0.1; its handlers reach the proxy
    through it."""

    daemon_threads = True

    def __init__(self, proxy: ForwardingProxy):
        self.proxy = proxy
        super().__init__(("127.0.0.1", 0), ProxyHandler)

    def handle_error(self, request, client_address):  # one line, not a traceback
        error = sys.exc_info()[1]
        self.proxy.note(f"the proxy failed on a request: {type(error).__name__}: {error}")


class ProxyHandler(BaseHTTPRequestHandler):
    """One request: passed on upstream, its answer relayed back, and a model call recorded."""

    protocol_version = "HTTP/1.1"

    @property
    def proxy(self) -> ForwardingProxy:
        return self.server.proxy

    def do_POST(self):
        with self.proxy.handling():
            self.forward()

    def forward(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.turn = self.proxy.take_turn()  # where its call goes on the page: the order sent
        target = self.proxy.target(self.path)
        if target is None:
            return self.refuse(400, "the request-target must be a path starting with '/'")
        upstream = self.proxy.connect()
        try:
            try:
                self.send_upstream(upstream, target, raw)
                request = self.parse(raw)  # while the upstream works on its answer
                del raw  # (a long history is held once, not once per copy)
                answer = upstream.getresponse()  # a 3xx is an answer like any: not followed
            except (OSError, http.client.HTTPException) as error:  # refused, DNS, TLS...
                reason = f"cannot reach {self.proxy.upstream}: {error}"
                return self.refuse(502, reason, "api_error")
            body = self.relay(answer)
        finally:
            upstream.close()
        if body is not None and answer.status == 200 and request is not None:
            self.record(request, answer, body)

    def send_upstream(self, upstream: http.client.HTTPConnection, target: str, raw: bytes):
        """The request as it came, but for the headers of this one connection."""
        upstream.putrequest(self.command, target, skip_accept_encoding=True)
        for key, value in self.headers.items():
            if key.lower() not in HOP_BY_HOP:
                upstream.putheader(key, value)
        upstream.putheader("Content-Length", str(len(raw)))
        upstream.putheader("Connection", "close")  # its end is the answer's end
        upstream.endheaders(raw)

    def parse(self, raw: bytes) -> dict | None:
        """The request to record (a model call), its messages shared with earlier calls."""
        if self.path.split("?")[0] != "/v1/messages":
            return None
        try:
            return self.proxy.kept.parse(raw)
        except ValueError:  # not JSON: the upstream will say so; nothing to record
            return None

    def relay(self, answer) -> bytes | None:
        """Send the upstream's answer on as it came: status, headers, body, each block as it
        arrives (a chunked body with its chunks as sent). Returns the body as relayed, or None
        if the answer broke off (the client then sees it break off too)."""
        self.send_response_only(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        sized = answer.length is not None and not answer.chunked
        self.send_header(*("Content-Length", str(answer.length)) if sized
                         else ("Transfer-Encoding", "chunked"))
        try:
            self.end_headers()
            if answer.chunked:
                return self.relay_chunks(answer)
            return self.relay_blocks(answer, sized)
        except (OSError, http.client.HTTPException) as error:  # upstream or client gone
            self.close_connection = True  # so the client sees the answer end too soon
            self.proxy.note(f"an answer that broke off ({error or type(error).__name__})")
            return None

    def relay_chunks(self, answer) -> bytes:
        """A chunked body, passed on as it comes, chunks as sent, to its last chunk."""
        blocks = []
        while block := answer.fp.read1(65536):
            self.wfile.write(block)
            blocks.append(block)
            if block.endswith(b"0\r\n\r\n") and chunked_whole(b"".join(blocks)):
                break  # (the upstream should close now; it need not be waited for)
        body = b"".join(blocks)
        if not chunked_whole(body):
            raise ConnectionError("the upstream closed in the middle of its answer")
        return body

    def relay_blocks(self, answer, sized: bool) -> bytes:
        """A body of known length passed on as it is; one that ends when the upstream closes,
        passed on chunked (each block read as one chunk)."""
        blocks = []
        while block := answer.read1(65536):
            self.wfile.write(block if sized else b"%x\r\n%s\r\n" % (len(block), block))
            blocks.append(block)
        body = b"".join(blocks)
        if sized and answer.length:  # read1 ends quietly when the upstream closes too soon:
            raise http.client.IncompleteRead(body, answer.length)  # what it announced is missing
        if not sized:
            self.wfile.write(b"0\r\n\r\n")
        return body

    def record(self, request: dict, answer, body: bytes) -> None:
        kind = answer.getheader("Content-Type") or ""
        try:
            reply = rebuild(dechunk(body) if answer.chunked else body, kind)
            if not isinstance(reply, dict) or not isinstance(reply.get("content"), list):
                raise ValueError("no content")
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            preview = body[:80].decode("utf-8", "replace")
            return self.proxy.note(f"a 200 answer that is not a Messages API reply "
                                   f"({kind or 'no Content-Type'}): {preview!r}")
        self.proxy.add_call(self.turn, {"request": request, "reply": reply, "at": time.time()})

    def refuse(self, status: int, message: str, kind="invalid_request_error") -> None:
        error = {"type": kind, "message": f"--trace proxy: {message}"}
        data = json.dumps({"type": "error", "error": error}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass
