"""The recording proxy of --trace: passes each request to the configured endpoint, hands the
answer back as it comes, and records each model call, its reply rebuilt from its events."""

from __future__ import annotations

import bisect
import http.client
import itertools
import json
import re
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                with proxy._busy:
                    proxy._handling += 1
                try:
                    self.forward()
                finally:
                    with proxy._busy:
                        proxy._handling -= 1
                        proxy._busy.notify_all()

            def forward(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.turn = proxy.take_turn()  # where its call goes on the page: the order sent
                target = proxy.target(self.path)
                if target is None:
                    return self.refuse(400, "the request-target must be a path starting with '/'")
                upstream = proxy.connect()
                try:
                    try:
                        upstream.putrequest(self.command, target, skip_accept_encoding=True)
                        for key, value in self.headers.items():
                            if key.lower() not in HOP_BY_HOP:
                                upstream.putheader(key, value)
                        upstream.putheader("Content-Length", str(len(raw)))
                        upstream.putheader("Connection", "close")  # its end is the answer's end
                        upstream.endheaders(raw)
                        request = self.parse(raw)  # while the upstream works on its answer
                        del raw  # (a long history is held once, not once per copy)
                        answer = upstream.getresponse()  # a 3xx is an answer like any: not followed
                    except (OSError, http.client.HTTPException) as error:  # refused, DNS, TLS...
                        reason = f"cannot reach {proxy.upstream}: {error}"
                        return self.refuse(502, reason, "api_error")
                    body = self.relay(answer)
                finally:
                    upstream.close()
                if body is not None and answer.status == 200 and request is not None:
                    self.record(request, answer, body)

            def parse(self, raw: bytes) -> dict | None:
                """The request to record (a model call), its messages shared with earlier calls."""
                if self.path.split("?")[0] != "/v1/messages":
                    return None
                try:
                    return proxy.kept.parse(raw)
                except ValueError:  # not JSON: the upstream will say so; nothing to record
                    return None

            def relay(self, answer) -> bytes | None:
                """Send the upstream's answer on as it came: status, headers, body, each block as
                it arrives (a chunked body with its chunks as sent). Returns the body as relayed,
                or None if the answer broke off (the client then sees it break off too)."""
                self.send_response_only(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                sized = answer.length is not None and not answer.chunked
                self.send_header(*("Content-Length", str(answer.length)) if sized
                                 else ("Transfer-Encoding", "chunked"))
                blocks = []
                try:
                    self.end_headers()
                    if answer.chunked:  # passed on as it comes, chunks as sent, to its last chunk
                        while block := answer.fp.read1(65536):
                            self.wfile.write(block)
                            blocks.append(block)
                            if block.endswith(b"0\r\n\r\n") and chunked_whole(b"".join(blocks)):
                                break  # (the upstream should close now; it need not be waited for)
                        body = b"".join(blocks)
                        if not chunked_whole(body):
                            raise ConnectionError("the upstream closed in the middle of its answer")
                        return body
                    while block := answer.read1(65536):
                        self.wfile.write(block if sized else b"%x\r\n%s\r\n" % (len(block), block))
                        blocks.append(block)
                    if not sized:
                        self.wfile.write(b"0\r\n\r\n")
                    return b"".join(blocks)
                except (OSError, http.client.HTTPException) as error:  # upstream or client gone
                    self.close_connection = True  # so the client sees the answer end too soon
                    proxy.note(f"an answer that broke off ({error or type(error).__name__})")
                    return None

            def record(self, request: dict, answer, body: bytes) -> None:
                kind = answer.getheader("Content-Type") or ""
                try:
                    reply = rebuild(dechunk(body) if answer.chunked else body, kind)
                    if not isinstance(reply, dict) or not isinstance(reply.get("content"), list):
                        raise ValueError("no content")
                except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                    preview = body[:80].decode("utf-8", "replace")
                    return proxy.note(f"a 200 answer that is not a Messages API reply "
                                      f"({kind or 'no Content-Type'}): {preview!r}")
                with proxy._lock:
                    at = bisect.bisect(proxy._turns, self.turn)  # after the calls sent before it
                    proxy._turns.insert(at, self.turn)
                    proxy.calls.insert(at, {"request": request, "reply": reply, "at": time.time()})

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

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # one line, not a traceback
                error = sys.exc_info()[1]
                proxy.note(f"the proxy failed on a request: {type(error).__name__}: {error}")

        self._server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def take_turn(self) -> int:
        with self._lock:
            return next(self._sent)

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


def chunked_whole(data: bytes) -> bool:
    """Whether a body in the chunked transfer coding arrived whole: its last chunk and trailers."""
    try:
        return dechunk(data, whole=True) is not None
    except ValueError:  # not chunked framing at all
        return False


def dechunk(data: bytes, whole: bool = False) -> bytes | None:
    """The body carried by a chunked transfer coding (RFC 9112, 7.1), as far as it arrived;
    with `whole`, None unless the last chunk (size 0) and the end of its trailers are there."""
    parts, at = [], 0
    while (end := data.find(b"\r\n", at)) >= 0:
        size = int(data[at:end].split(b";")[0].strip() or b"0", 16)  # extensions are ignored
        if size == 0:  # the last chunk; with `whole`, its (empty) trailer section must end too
            return b"".join(parts) if not whole or data.find(b"\r\n\r\n", end) >= 0 else None
        parts.append(data[end + 2:end + 2 + size])
        at = end + 2 + size + 2
    return None if whole else b"".join(parts)


SSE_LINE_END = re.compile(r"\r\n|\r|\n")


def read_sse(text: str):
    """The events of a server-sent event stream, as (event type, data), parsed by the spec (HTML
    Living Standard, "Interpreting an event stream"): lines end in CRLF, LF or CR; a line that
    starts with ":" is a comment; "field: value" loses at most one space after the colon (and a
    line without a colon is a field with an empty value); the data lines of an event are joined
    by "\n"; a blank line dispatches the event, and an event cut off before one is dropped."""
    kind, data = "", []
    for line in SSE_LINE_END.split(text.removeprefix("\ufeff")):
        if not line:
            if data:
                yield kind or "message", "\n".join(data)
            kind, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            kind = value
        # "id", "retry" and fields the spec does not know change nothing here


def is_event_stream(text: str, content_type: str | None) -> bool:
    if content_type:
        return content_type.split(";")[0].strip().lower() == "text/event-stream"
    first = text.lstrip("\ufeff \t\r\n")  # no header: by its first line (JSON starts with "{")
    return first.startswith((":", "event", "data", "id", "retry"))


DELTAS = {"text_delta": ("text", "text"), "input_json_delta": ("input", "partial_json")}


def rebuild(body: bytes, content_type: str | None = None) -> dict:
    """The message a reply carried: plain JSON, or accumulated from its server-sent events."""
    text = body.decode("utf-8", "replace")
    if not is_event_stream(text, content_type):
        return json.loads(text)
    message: dict = {"content": []}
    pieces: dict = {}  # (index, "text" or "input") -> the pieces of that block, joined at the end
    for kind, data in read_sse(text):
        try:
            event = json.loads(data)
        except ValueError:
            continue  # not JSON (a keep-alive, say): nothing of the message
        if not isinstance(event, dict):
            continue
        kind = event.get("type", kind)
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = {"content": [], **event["message"]}
        elif kind == "content_block_start":
            message["content"].append(event.get("content_block") or {})
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            delta, index = event["delta"], event.get("index")
            field, key = DELTAS.get(delta.get("type"), ("", ""))
            if field and isinstance(delta.get(key), str):
                pieces.setdefault((index, field), []).append(delta[key])
        elif kind == "message_delta":
            message.update({k: v for k, v in (event.get("delta") or {}).items() if v is not None})
            message["usage"] = {**(message.get("usage") or {}), **(event.get("usage") or {})}
        elif kind == "error":
            message["error"] = event.get("error")  # the stream ended with an error
    for (index, field), parts in pieces.items():
        if not isinstance(index, int) or not 0 <= index < len(message["content"]):
            continue  # a delta for a block that never started
        block, joined = message["content"][index], "".join(parts)
        if field == "text":
            block["text"] = str(block.get("text") or "") + joined
            continue
        try:
            block["input"] = json.loads(joined)
        except ValueError:
            block["input"] = {"(cut off)": joined}
    return message
