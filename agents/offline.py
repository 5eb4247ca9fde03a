"""offline.py - a local stand-in for the Anthropic Messages API, with a scripted model.

Why it exists: every step of this course must run - and every test must pass -
without an API key and without the internet. Instead of faking the SDK, we run a
real HTTP server on 127.0.0.1 that speaks the Messages API closely enough that
the official `anthropic` SDK talks to it unchanged. The steps never know.

    step script --(anthropic SDK, HTTP)--> StandIn on 127.0.0.1:<port>
                                              |  1. check auth header
                                              |  2. validate the request like the real API (400 if not)
                                              |  3. ask the scripted model (a policy) for the next turn
                                              v
                                           JSON reply in the real response shape

A policy is any function `policy(request: dict) -> list` that looks at the
request body (system prompt, messages, tools) and returns the content blocks of
the next assistant turn: strings become text blocks, `tool_use(name, input)`
becomes a tool call. The stop reason follows from the blocks. Replies are
deterministic, so demos and tests are repeatable.

Token count: `usage.input_tokens` (and /v1/messages/count_tokens) is
    ceil(len(json.dumps([system, messages, tools])) / 4)
one token per four characters of the compact JSON of what the model would read.
Crude, but deterministic and proportional to the request's size, which is what
context-size logic needs to be tested.

The offline demo: `run_demo(script_path)` runs a step's real REPL in a fresh
temporary folder with the scripted user lines of `agents/demos/<step>.py`.
"""

from __future__ import annotations

import builtins
import importlib.util
import itertools
import json
import math
import os
import re
import runpy
import tempfile
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

Policy = Callable[[dict], list]

# -- Building replies -------------------------------------------------------------
_ids = itertools.count(1)
_ids_lock = threading.Lock()


def _next_id(prefix: str) -> str:
    with _ids_lock:
        return f"{prefix}_offline_{next(_ids):06d}"


def tool_use(name: str, tool_input: dict | None = None) -> dict:
    """A tool call for a policy's reply; the server gives it a unique id."""
    return {"type": "tool_use", "name": name, "input": dict(tool_input or {})}


def estimate_tokens(body: dict) -> int:
    """The stand-in's documented token count: one token per 4 characters of JSON."""
    seen = [body.get("system", ""), body.get("messages", []), body.get("tools", [])]
    return math.ceil(len(json.dumps(seen, ensure_ascii=False, separators=(",", ":"))) / 4)


def make_message(body: dict, blocks: list) -> dict:
    """Wrap a policy's blocks in the real Messages API response shape."""
    content = []
    for block in blocks:
        if isinstance(block, str):
            block = {"type": "text", "text": block}
        if block["type"] == "tool_use":
            block = {"type": "tool_use", "id": block.get("id") or _next_id("toolu"),
                     "name": block["name"], "input": block.get("input", {})}
        content.append(block)
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": _next_id("msg"), "type": "message", "role": "assistant",
        "model": body.get("model", ""), "content": content,
        "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": estimate_tokens(body),
                  "output_tokens": math.ceil(len(json.dumps(content)) / 4)},
    }


# -- Reading a request (helpers for policies) -----------------------------------------
def blocks_of(message: dict) -> list:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def system_text(request: dict) -> str:
    system = request.get("system") or ""
    return system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)


def is_prompt(message: dict) -> bool:
    """A user message that carries the user's words, not only tool results."""
    return message["role"] == "user" and any(b.get("type") == "text" for b in blocks_of(message))


def last_user_text(request: dict) -> str:
    """The text of the latest user message that has any text."""
    for message in reversed(request["messages"]):
        if is_prompt(message):
            return "\n".join(b["text"] for b in blocks_of(message) if b.get("type") == "text")
    return ""


def latest_results(request: dict) -> list:
    """The tool_result blocks of the last message (empty when it holds none)."""
    return [b for b in blocks_of(request["messages"][-1]) if b.get("type") == "tool_result"]


def result_text(result: dict) -> str:
    content = result.get("content", "")
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


def steps_since_prompt(request: dict) -> int:
    """How many assistant turns the model has taken since the user last spoke."""
    steps = 0
    for message in reversed(request["messages"]):
        if is_prompt(message):
            break
        steps += message["role"] == "assistant"
    return steps


class ScriptedModel:
    """A policy that plays a fixed list of turns in order (for tests).

    Each turn is a list of blocks, or a callable `turn(request) -> list`.
    After the script runs out it answers with a plain text turn.
    """

    def __init__(self, turns: list):
        self.turns = deque(turns)
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> list:
        with self.lock:
            turn = self.turns.popleft() if self.turns else ["(the scripted model has nothing more to say)"]
        return turn(request) if callable(turn) else turn


# -- Validating a request like the real API --------------------------------------------
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def validate_request(body: dict) -> str | None:
    """Return the error message the real API would give, or None if the request is valid."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    for check in (_check_top_level, _check_tools, _check_messages, _check_tool_pairing):
        error = check(body)
        if error:
            return error
    return None


def _check_top_level(body: dict) -> str | None:
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required (a non-empty string)"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: must be a positive integer"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "messages: at least one message is required"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: must be a string or a list of text blocks"
    return None


def _check_tools(body: dict) -> str | None:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        return "tools: must be a list"
    names = set()
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            return f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        if name in names:
            return f"tools: Tool names must be unique ({name!r} appears twice)"
        names.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{i}.input_schema: must be a JSON schema with type 'object'"
    uses_tools = any(b.get("type") in ("tool_use", "tool_result")
                     for m in body["messages"] if isinstance(m, dict) for b in _safe_blocks(m))
    if uses_tools and not tools:
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


def _safe_blocks(message: dict) -> list:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _check_messages(body: dict) -> str | None:
    messages = body["messages"]
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        error = _check_content(f"messages.{i}", message)
        if error:
            return error
    if messages[0]["role"] != "user":
        return "messages.0: the first message must use the `user` role"
    if messages[-1]["role"] != "user":
        return "messages: the final message must have the `user` role (assistant prefill is not supported here)"
    return None


def _check_content(where: str, message: dict) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return None if content.strip() else f"{where}: text content must be non-empty"
    if not isinstance(content, list) or not content:
        return f"{where}: content must be a non-empty string or a non-empty list of blocks"
    allowed = {"user": {"text", "image", "document", "tool_result"},
               "assistant": {"text", "tool_use", "thinking", "redacted_thinking"}}[message["role"]]
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed:
            return f"{where}.content.{j}: block type {kind!r} is not allowed in a {message['role']} message"
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"].strip()):
            return f"{where}.content.{j}.text: text content blocks must contain non-whitespace text"
        if kind == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("input"), dict)
                                       and isinstance(block.get("name"), str)):
            return f"{where}.content.{j}: tool_use needs a string id, a name and an object input"
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            return f"{where}.content.{j}.tool_use_id: Field required"
        if kind == "tool_result" and not isinstance(block.get("content", ""), (str, list)):
            return f"{where}.content.{j}.content: must be a string or a list of content blocks"
    return None


def _check_tool_pairing(body: dict) -> str | None:
    messages = body["messages"]
    seen_ids: set = set()
    for i, message in enumerate(messages):
        blocks = blocks_of(message)
        if message["role"] == "assistant":
            ids = [b["id"] for b in blocks if b["type"] == "tool_use"]
            duplicate = next((x for x in ids if x in seen_ids or ids.count(x) > 1), None)
            if duplicate:
                return f"messages.{i}: `tool_use` ids must be unique (found {duplicate!r} twice)"
            seen_ids.update(ids)
            if not ids:
                continue
            following = messages[i + 1] if i + 1 < len(messages) else None
            answered = [b["tool_use_id"] for b in blocks_of(following) if b.get("type") == "tool_result"] \
                if following and following["role"] == "user" else []
            missing = [x for x in ids if x not in answered]
            if missing:
                return (f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                        f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                        f"corresponding `tool_result` block in the next message.")
        else:
            kinds = [b["type"] for b in blocks]
            if "tool_result" not in kinds:
                continue
            first_other = next((k for k, kind in enumerate(kinds) if kind != "tool_result"), len(kinds))
            if "tool_result" in kinds[first_other:]:
                return f"messages.{i}: `tool_result` blocks must come first in the user message, before any other content"
            before = messages[i - 1] if i > 0 else None
            offered = [b["id"] for b in blocks_of(before) if b.get("type") == "tool_use"] \
                if before and before["role"] == "assistant" else []
            answered = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            for tool_use_id in answered:
                if tool_use_id not in offered:
                    return (f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{tool_use_id}. Each `tool_result` block must have a corresponding "
                            f"`tool_use` block in the previous message.")
                if answered.count(tool_use_id) > 1:
                    return f"messages.{i}.content: more than one `tool_result` for `tool_use_id` {tool_use_id}"
    return None


# -- The HTTP server ----------------------------------------------------------------
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


class StandIn:
    """The local Messages API. Use as a context manager, or start()/stop().

    requests:  every parsed request body, in arrival order (valid or not)
    rejected:  (body, message) for every request answered with 400
    fail_next(status, times): answer the next `times` requests with that HTTP error
    """

    def __init__(self, policy: Policy | None = None):
        self.policy: Policy = policy or ScriptedModel([])
        self.requests: list = []
        self.rejected: list = []
        self._faults: deque = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, status: int, times: int = 1) -> None:
        with self._lock:
            self._faults.extend([status] * times)

    def start(self) -> "StandIn":
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as two writes; don't stall the second

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                status, reply = stand_in.handle(self.path, dict(self.headers), raw)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", _next_id("req"))
                if status in (429, 500, 529):
                    self.send_header("retry-after-ms", "20")  # keep SDK retries quick
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep the console for the conversation
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> "StandIn":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def handle(self, path: str, headers: dict, raw: bytes) -> tuple[int, dict]:
        route = path.split("?", 1)[0]
        if route not in ("/v1/messages", "/v1/messages/count_tokens"):
            return _error(404, f"no route {route}")
        lowered = {k.lower(): v for k, v in headers.items()}
        if not lowered.get("x-api-key") and not lowered.get("authorization", "").startswith("Bearer "):
            return _error(401, "missing credentials: send X-Api-Key or Authorization: Bearer")
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            return _error(400, "request body is not valid JSON")
        with self._lock:
            self.requests.append(body)
            fault = self._faults.popleft() if self._faults else None
        if fault:
            return _error(fault, f"injected {fault} for testing")
        if route.endswith("count_tokens"):
            problem = validate_request({"max_tokens": 1, **body}) if isinstance(body, dict) else "bad body"
            return _error(400, problem) if problem else (200, {"input_tokens": estimate_tokens(body)})
        problem = validate_request(body)
        if problem:
            with self._lock:
                self.rejected.append((body, problem))
            return _error(400, problem)
        try:
            blocks = self.policy(body)
        except Exception as error:  # a broken script is a test bug: say so loudly
            return _error(500, f"scripted model failed: {type(error).__name__}: {error}")
        return 200, make_message(body, blocks)


def _error(status: int, message: str) -> tuple[int, dict]:
    kind = ERROR_TYPES.get(status, "api_error")
    return status, {"type": "error", "error": {"type": kind, "message": message}}


# -- The offline demo ------------------------------------------------------------------
BANNER = """\
======================================================================
 OFFLINE DEMO - no ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN is set
 (or --demo was given). The model is SCRIPTED: agents/demos/{name}.py,
 served by agents/offline.py at {url}. The tools really run,
 in a temporary folder: {workdir}
 To use a real model: copy .env.example to .env, set ANTHROPIC_API_KEY,
 and run this script again.
======================================================================"""


def load_demo(script: Path):
    path = script.parent / "demos" / f"{script.stem}.py"
    spec = importlib.util.spec_from_file_location(f"demo_{script.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scripted_input(lines: list[str]) -> Callable[[str], str]:
    """Stand in for input(): type the demo's lines, echoing them like a terminal would."""
    pending = deque(lines)

    def fake_input(prompt: str = "") -> str:
        if not pending:
            raise EOFError
        line = pending.popleft()
        print(f"{prompt}{line}", flush=True)
        return line

    return fake_input


def run_demo(script_path: str) -> int:
    """Run a step's REPL against the scripted model in a temporary folder. Returns an exit code."""
    script = Path(script_path).resolve()
    demo = load_demo(script)
    started = time.monotonic()
    saved_env, saved_cwd, saved_input = dict(os.environ), os.getcwd(), builtins.input
    with tempfile.TemporaryDirectory(prefix=f"{script.stem}-demo-") as tmp, StandIn(demo.policy) as server:
        workdir = Path(tmp).resolve()
        print(BANNER.format(name=script.stem, url=server.url, workdir=workdir), flush=True)
        try:
            os.chdir(workdir)
            os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)
            os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="offline-demo")
            if hasattr(demo, "setup"):
                demo.setup(workdir)
            # Run the script again as a fresh module inside the temp folder, so its
            # WORKDIR, client and state all point at the demo's world.
            namespace = runpy.run_path(str(script), run_name="offline_demo")
            builtins.input = scripted_input(list(demo.PROMPTS))
            namespace["repl"]()
            if hasattr(demo, "finish"):
                demo.finish(namespace, workdir)
        finally:
            builtins.input = saved_input
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
    seconds = time.monotonic() - started
    print(f"[offline demo] {len(server.requests)} model calls in {seconds:.1f}s; "
          f"{len(server.rejected)} rejected by the validator. The temporary folder is removed.")
    for _, problem in server.rejected:
        print(f"[offline demo] rejected: {problem}")
    return 1 if server.rejected else 0
