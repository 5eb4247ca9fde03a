"""StandIn: the local Messages API on 127.0.0.1 - JSON or server-sent events, faults on demand."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .cache import CacheLedger
from .protocol import Interner, ScriptedModel, _compact, estimate_tokens, validate_request
from .replies import Policy, _next_id, make_message

STREAM_PIECE = 24  # characters per streamed delta


# -- The HTTP server ----------------------------------------------------------------
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
MALFORMED = {"html": (b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"),
             "truncated": (b'{"id": "msg_x", "type": "message", "content": [{"type": "te',
                           "application/json"),
             "no_content": (b'{"id": "msg_x", "type": "message", "role": "assistant"}',
                            "application/json")}
STREAM_FAULTS = ("stream_error", "stream_drop", "stream_stall")
MID_STREAM_ERROR = {"type": "error", "error": {"type": "overloaded_error",
                                               "message": "Overloaded (injected mid-stream)"}}


class StandIn:
    """The local Messages API. Use as a context manager, or start()/stop().

    requests:  every parsed request body, in arrival order (valid or not)
    rejected:  (body, message) for every request answered with 400
    calls:     one record per answered /v1/messages request (request, reply, when), for traces
    fail_next(fault, times): answer the next `times` requests with a fault (see the header)
    """

    def __init__(self, policy: Policy | None = None, cache: CacheLedger | None = None):
        self.policy: Policy = policy or ScriptedModel([])
        self.cache = cache or CacheLedger()
        self.requests: list = []
        self.rejected: list = []
        self.calls: list = []
        self.kept = Interner()  # the calls' requests share their messages
        self._faults: deque = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.stalled = threading.Event()  # "stream_stall": set once a stream stops mid-way ...
        self.release = threading.Event()  # ... and it goes on (or drops) when this is set

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, fault, times: int = 1) -> None:
        with self._lock:
            self._faults.extend([fault] * times)

    def start(self) -> "StandIn":
        self._server = StandInServer(self)
        # stop() waits up to one poll interval: short, as the tests start one stand-in each
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> "StandIn":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def handle(self, path: str, headers: dict, raw: bytes) -> tuple[int, dict, str | None]:
        """(status, JSON reply, fault to apply while sending it)."""
        route = path.split("?", 1)[0]
        if route not in ("/v1/messages", "/v1/messages/count_tokens"):
            return (*_error(404, f"no route {route}"), None)
        lowered = {k.lower(): v for k, v in headers.items()}
        if not lowered.get("x-api-key") and \
                not lowered.get("authorization", "").startswith("Bearer "):
            return (*_error(401, "missing credentials: send X-Api-Key or Authorization: Bearer"),
                    None)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            return (*_error(400, "request body is not valid JSON"), None)
        with self._lock:
            self.requests.append(body)
            counting = route.endswith("count_tokens")
            fault = self._faults.popleft() if self._faults and not counting else None
        if isinstance(fault, int):
            return (*_error(fault, f"injected {fault} for testing"), None)
        if route.endswith("count_tokens"):
            problem = validate_request({"max_tokens": 1, **body}) if isinstance(body, dict) \
                else "bad body"
            if problem:
                return (*_error(400, problem), None)
            return 200, {"input_tokens": estimate_tokens(body)}, None
        problem = validate_request(body)
        if problem:
            with self._lock:
                self.rejected.append((body, problem))
            return (*_error(400, problem), None)
        try:
            turn = self.policy(body)
        except Exception as error:  # a broken script is a test bug: say so loudly
            return (*_error(500, f"scripted model failed: {type(error).__name__}: {error}"), None)
        message = make_message(body, turn, self.cache.usage(body))
        with self._lock:
            self.calls.append({"request": self.kept.request(body), "reply": message,
                               "at": time.time()})
        return 200, message, fault


class StandInServer(ThreadingHTTPServer):
    """The HTTP server on a free port of 127.0.0.1; its handlers reach the stand-in through it."""

    daemon_threads = True  # a request still being answered does not hold up the exit

    def __init__(self, stand_in: StandIn):
        self.stand_in = stand_in
        super().__init__(("127.0.0.1", 0), StandInHandler)

    def handle_error(self, request, client_address):
        """A client that went away (killed, Ctrl-C) while it was answered: nothing to report.
        Anything else is a fault of the stand-in, and keeps its traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipe, ConnectionReset...
            super().handle_error(request, client_address)


class StandInHandler(BaseHTTPRequestHandler):
    """One HTTP request: StandIn.handle decides the answer; this sends it, as JSON or as a
    stream of server-sent events, with the fault it was asked for."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out apart; don't stall them

    def do_POST(self):
        stand_in = self.server.stand_in
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, reply, fault = stand_in.handle(self.path, dict(self.headers), raw)
        if fault in MALFORMED:
            return self.send(200, *MALFORMED[fault])
        if status == 200 and _is_message(reply) and stand_in.requests[-1].get("stream"):
            return self.stream(reply, fault)
        plain = _without_wire(reply) if isinstance(reply, dict) else reply
        self.send(status, json.dumps(plain).encode(), "application/json")

    def send(self, status: int, data: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", _next_id("req"))
        if status in (429, 500, 529):
            self.send_header("retry-after-ms", "20")  # keep SDK retries quick
        self.end_headers()
        self.wfile.write(data)

    def stream(self, message: dict, fault: str | None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", _next_id("req"))
        self.end_headers()
        try:
            self.send_events(message, fault)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away mid-stream (Ctrl-C): nothing more to send

    def send_events(self, message: dict, fault: str | None) -> None:
        for number, (kind, data) in enumerate(sse_events(message)):
            if fault in STREAM_FAULTS and number == 4:  # after the first piece of content
                if fault == "stream_drop":
                    self.close_connection = True
                    return  # no closing chunk: the client sees the body end too soon
                if fault == "stream_stall":
                    self.stall()  # then the stream goes on as planned
                else:
                    kind, data = "error", MID_STREAM_ERROR
                fault = None
            self.chunk(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
            if kind == "error":
                break
        self.chunk(b"")

    def stall(self) -> None:
        """Stop mid-stream until the test says to go on (or 30 seconds pass)."""
        self.server.stand_in.stalled.set()
        self.server.stand_in.release.wait(30)

    def chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, *args):  # keep the console for the conversation
        pass


def _is_message(reply) -> bool:
    return isinstance(reply, dict) and reply.get("type") == "message"


def _without_wire(reply: dict) -> dict:
    """The reply as sent: "wire" only tells the stream how to misbehave."""
    return {k: v for k, v in reply.items() if k != "wire"}


def _error(status: int, message: str) -> tuple[int, dict]:
    kind = ERROR_TYPES.get(status, "api_error")
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def sse_events(message: dict):
    """The server-sent events that stream `message`, in the API's order."""
    usage = message.get("usage")
    start_usage = None if usage is None else \
        {**usage, "output_tokens": usage["output_tokens"] and 1}
    yield "message_start", {"type": "message_start", "message": {
        **_without_wire(message), "content": [], "stop_reason": None,
        "stop_details": None, **({} if usage is None else {"usage": start_usage})}}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            start, text = {**block, "input": {}}, _compact(block["input"])
            delta = "input_json_delta"
            cut = message["stop_reason"] == "max_tokens" and index == len(message["content"]) - 1
            text = text[:len(text) // 2] if cut else text  # cut off in the middle of its input
            pieces = [text] if not isinstance(block["input"], dict) else None  # relayed whole
        elif block["type"] != "text":  # a block type this harness may not know: sent whole
            start, text, delta, pieces = block, "", None, []
        else:
            start, text, delta = {"type": "text", "text": ""}, block["text"], "text_delta"
            pieces = None
        yield "content_block_start", {"type": "content_block_start", "index": index,
                                      "content_block": start}
        if pieces is None:
            pieces = [text[at:at + STREAM_PIECE] for at in range(0, len(text), STREAM_PIECE)]
        for piece in pieces:
            payload = {"type": delta, "partial_json": piece} if delta == "input_json_delta" else \
                {"type": delta, "text": piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": payload}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    if message.get("wire") == "no_stop":
        return  # the stream ends cleanly, but before it says why the message stopped
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None,
                                      "stop_details": message.get("stop_details")},
                            "usage": {"output_tokens": (usage or {}).get("output_tokens")}}
    yield "message_stop", {"type": "message_stop"}
