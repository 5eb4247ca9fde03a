"""offline.py - a local stand-in for the Anthropic Messages API, with a scripted model.

Why it exists: every step of this course must run - and every test must pass -
without an API key and without the internet. Instead of faking the SDK, we run a
real HTTP server on 127.0.0.1 that speaks the Messages API closely enough that
the official `anthropic` SDK talks to it unchanged. The steps never know.

    step script --(anthropic SDK, HTTP)--> StandIn on 127.0.0.1:<port>
                                              |  1. check the auth header
                                              |  2. validate the request like the real API (400 if not)
                                              |  3. ask the scripted model (a policy) for the next turn
                                              v
                                           JSON, or server-sent events when the request streams

Read in this order: the header (the rules it follows), StandIn.handle, then
validate_request; the demo runner and the trace page come last.

Policies. A policy is a function `policy(request: dict)` that looks at the request
(system prompt, messages, tools) and returns the next assistant turn: a list of
blocks (strings become text blocks, `tool_use(name, input)` a tool call), the stop
reason following from the blocks; or `reply(blocks, stop_reason, stop_details)` for
the replies a real model also sends: empty (`reply([])`), "refusal", "pause_turn",
"max_tokens" (a trailing tool_use is then cut off in the middle of its input) and
"model_context_window_exceeded".

Quirks. `QUIRKS[name](tool_use(...))` is the reply that real models and Anthropic-compatible
endpoints are known to send instead of a clean one, streamed or not: whitespace_text,
whitespace_only, empty_text (text a request may not carry), duplicate_ids, reused_id ("call_0"
every turn), odd_id ("functions.bash:0"), string_input / list_input / null_input (input that is
not an object), missing_name, empty_name, tool_use_without_call (stop_reason "tool_use" and no
call), call_under_end_turn, unknown_stop_reason, no_stop (the stream ends after the last block,
before message_delta: no stop reason at all), null_usage, no_usage (the SDK cannot accumulate a
stream without usage: it raises), unknown_block (a server_tool_use block). Stored as it came,
each but the last five makes the next request invalid; the validator then answers 400 as the
real API does.

Tokens. The request is cut into the units the API caches, in its order: each tool
definition, the system prompt, then every content block of every message.

    total tokens = ceil(len(json.dumps([system, messages, tools])) / 4)

one token per four characters of the compact JSON of what the model reads. Crude,
but deterministic and proportional to the request's size. /v1/messages/count_tokens
answers the same number.

Prompt caching (automatic: a top-level `cache_control: {"type": "ephemeral"}`).
The breakpoint is the last unit. The stand-in remembers, per model, every prefix
that ended at a breakpoint of an earlier request, for CACHE_TTL seconds after its
last use (a hit renews it, like the real 5-minute cache). For a new request:

    cache_read_input_tokens      the longest remembered prefix it repeats exactly
    cache_creation_input_tokens  the rest, up to the breakpoint (now remembered too)
    input_tokens                 the rest: what the units do not cover (the JSON around them)

where a prefix of units weighs floor(its characters / 4) tokens, and the three add
up to the total above. A prefix under CACHE_MIN_TOKENS (1,024, like most models)
is not cached: everything is input_tokens. Without cache_control nothing is cached.
Simplified on purpose: the real API looks back at most 20 blocks from a breakpoint
for an earlier entry; this one looks back any distance.

Streaming (`"stream": true`): the real event sequence - message_start, ping, then
per block content_block_start, content_block_delta (text_delta / input_json_delta,
in small pieces), content_block_stop, then message_delta (stop reason, usage) and
message_stop - so `client.messages.stream(...)` works unchanged.

Faults, for tests (`fail_next(fault, times)`): an HTTP status (429, 500, 529: sent
with a short retry-after so the SDK's retries stay fast; more than its retries and
the error reaches the caller); "stream_error" (an error event after the first
piece of text) and "stream_drop" (the connection closes mid-stream); and malformed
200 replies from a broken "compatible" endpoint: "html", "truncated", "no_content".

The offline demo: `run(script, argv)` is what a step calls with no credentials (or
with --demo, or --trace): it runs the step's real REPL in a fresh temporary folder
with the scripted user lines of `agents/demos/<step>.py`. With --trace FILE.html
the run is written as one self-contained page; with a real key, --trace records
through a forwarding proxy to the real endpoint instead.
"""

from __future__ import annotations

import builtins
import hashlib
import http.client
import importlib.util
import itertools
import json
import math
import os
import re
import runpy
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

Policy = Callable[[dict], "list | Reply"]
CACHE_TTL = 300.0  # seconds an unused cache entry lives (the real default is 5 minutes)
CACHE_MIN_TOKENS = 1024  # shorter prefixes are not cached
STREAM_PIECE = 24  # characters per streamed delta

# -- Building replies -------------------------------------------------------------
_ids = itertools.count(1)
_ids_lock = threading.Lock()


def _next_id(prefix: str) -> str:
    with _ids_lock:
        return f"{prefix}_offline_{next(_ids):06d}"


def tool_use(name: str, tool_input: dict | None = None) -> dict:
    """A tool call for a policy's reply; the server gives it a unique id."""
    return {"type": "tool_use", "name": name, "input": dict(tool_input or {})}


@dataclass
class Reply:
    """A turn with an explicit stop reason (see the header); plain lists derive theirs.
    `wire` names a quirk of how the reply is sent (see QUIRKS): "no_stop", "null_usage", "no_usage"."""
    content: list
    stop_reason: str | None = None
    stop_details: dict | None = None
    wire: str | None = None


def reply(content: list, stop_reason: str | None = None, stop_details: dict | None = None) -> Reply:
    return Reply(list(content), stop_reason, stop_details)


# -- The quirks real endpoints send ------------------------------------------------------
# Replies that real models and Anthropic-compatible endpoints are known to send, which a naive
# harness stores as they are - and then every later request is rejected. Each entry takes the
# tool call the policy meant (`tool_use(...)`) and returns the reply as such an endpoint sends it,
# streamed or not. Tool blocks that carry an "id" are sent exactly as given.
def _raw_call(call: dict, **changes) -> dict:
    block = {"type": "tool_use", "id": _next_id("toolu"), "name": call["name"], "input": call["input"]}
    block.update(changes)
    return {k: v for k, v in block.items() if v is not _MISSING}


_MISSING = object()
QUIRKS: dict[str, Callable[[dict], Reply]] = {
    "whitespace_text": lambda call: Reply(["\n\n", _raw_call(call)]),  # text before a call
    "whitespace_only": lambda call: Reply([" "], "end_turn"),  # nothing but a blank
    "empty_text": lambda call: Reply(["", _raw_call(call)]),
    "duplicate_ids": lambda call: Reply([_raw_call(call, id="call_0"), _raw_call(call, id="call_0")]),
    "reused_id": lambda call: Reply([_raw_call(call, id="call_0")]),  # every turn counts from 0
    "odd_id": lambda call: Reply([_raw_call(call, id="functions.bash:0")]),
    "string_input": lambda call: Reply([_raw_call(call, input=json.dumps(call["input"]))]),
    "list_input": lambda call: Reply([_raw_call(call, input=list(call["input"].values()))]),
    "null_input": lambda call: Reply([_raw_call(call, input=None)]),
    "missing_name": lambda call: Reply([_raw_call(call, name=_MISSING)]),
    "empty_name": lambda call: Reply([_raw_call(call, name="")]),
    "tool_use_without_call": lambda call: Reply(["Let me check."], "tool_use"),
    "call_under_end_turn": lambda call: Reply([_raw_call(call)], "end_turn"),
    "unknown_stop_reason": lambda call: Reply([_raw_call(call)], "something_new"),
    "no_stop": lambda call: Reply([_raw_call(call)], wire="no_stop"),  # ends before message_delta
    "null_usage": lambda call: Reply([_raw_call(call)], wire="null_usage"),
    "no_usage": lambda call: Reply([_raw_call(call)], wire="no_usage"),
    "unknown_block": lambda call: Reply([{"type": "server_tool_use", "id": "srvtoolu_1",
                                          "name": "web_search", "input": {"query": "x"}},
                                         _raw_call(call)]),
}


def estimate_tokens(body: dict) -> int:
    """The stand-in's documented token count: one token per 4 characters of JSON."""
    seen = [body.get("system", ""), body.get("messages", []), body.get("tools", [])]
    return math.ceil(len(_compact(seen)) / 4)


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def make_message(body: dict, turn, usage: dict | None = None) -> dict:
    """Wrap a policy's turn in the real Messages API response shape."""
    turn = turn if isinstance(turn, Reply) else Reply(list(turn))
    content = []
    for block in turn.content:
        if isinstance(block, str):
            block = {"type": "text", "text": block}
        if block["type"] == "tool_use" and "id" not in block:  # a block with an id is sent as given
            block = {"type": "tool_use", "id": _next_id("toolu"),
                     "name": block["name"], "input": block.get("input", {})}
        content.append(block)
    stop = turn.stop_reason or ("tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn")
    message = {
        "id": _next_id("msg"), "type": "message", "role": "assistant",
        "model": body.get("model", ""), "content": content,
        "stop_reason": None if turn.wire == "no_stop" else stop, "stop_sequence": None,
        "usage": {**(usage or {"input_tokens": estimate_tokens(body)}),
                  "output_tokens": math.ceil(len(json.dumps(content)) / 4) or 1},
    }
    if turn.wire == "null_usage":
        message["usage"] = dict.fromkeys(message["usage"])
    if turn.wire == "no_usage":
        del message["usage"]
    if turn.wire == "no_stop":
        message["wire"] = "no_stop"  # sse_events stops after the last block; dropped from plain JSON
    if turn.stop_details:
        message["stop_details"] = turn.stop_details
    return message


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
    return content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content)


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

    Each turn is a list of blocks, a Reply, or a callable `turn(request)`.
    After the script runs out it answers with a plain text turn.
    """

    def __init__(self, turns: list):
        self.turns = deque(turns)
        self.lock = threading.Lock()

    def __call__(self, request: dict):
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
    cache = body.get("cache_control")
    if cache is not None and (not isinstance(cache, dict) or cache.get("type") != "ephemeral"):
        return "cache_control: Input tag does not match the expected tag 'ephemeral'"
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
        if kind == "text" and block.get("text") == "":
            return f"{where}.content.{j}.text: text content blocks must be non-empty"
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"].strip()):
            return f"{where}.content.{j}.text: text content blocks must contain non-whitespace text"
        if kind == "tool_use":
            error = _check_tool_use(f"{where}.content.{j}", block)
            if error:
                return error
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            return f"{where}.content.{j}.tool_use_id: Field required"
        if kind == "tool_result" and block.get("is_error") and not result_text(block).strip():
            return f"{where}.content.{j}.content: an error tool_result must have non-empty content"
        if kind == "tool_result":
            inner = block.get("content", "")
            if not isinstance(inner, (str, list)) or isinstance(inner, list) and any(
                    not isinstance(b, dict) or b.get("type") not in ("text", "image", "document")
                    or b["type"] == "text" and not str(b.get("text", "")).strip() for b in inner):
                return f"{where}.content.{j}.content: must be a string or a list of blocks (non-empty text, images)"
    return None


TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _check_tool_use(where: str, block: dict) -> str | None:
    if not isinstance(block.get("id"), str) or not TOOL_USE_ID.match(block["id"]):
        return f"{where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    if not isinstance(block.get("name"), str) or not block["name"]:
        return f"{where}.name: Field required (a non-empty string)"
    if not isinstance(block.get("input"), dict):
        return f"{where}.input: Input should be a valid dictionary"
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


# -- Prompt caching: the ledger of remembered prefixes ----------------------------------
def cache_units(body: dict) -> list[tuple[str, int]]:
    """The request as the API caches it: tools, then system, then every message block, each as
    (what identifies it, how many characters it weighs). A block is identified with its role but
    weighs only its own JSON, so the units never add up to more than the request's estimate."""
    units = [(text, len(text)) for text in map(_compact, body.get("tools") or [])]
    if body.get("system"):
        units.append((_compact(body["system"]), len(_compact(body["system"]))))
    for message in body["messages"]:
        units += [(f"{message['role']}:{text}", len(text)) for text in map(_compact, blocks_of(message))]
    return units


class CacheLedger:
    """Which prefixes are cached, and until when; see the header for the rules."""

    def __init__(self, ttl: float = CACHE_TTL, min_tokens: int = CACHE_MIN_TOKENS, clock=time.monotonic):
        self.ttl, self.min_tokens, self.clock = ttl, min_tokens, clock
        self.expires: dict[str, float] = {}  # prefix hash -> when it is forgotten
        self.lock = threading.Lock()

    def usage(self, body: dict) -> dict:
        total = estimate_tokens(body)
        if not isinstance(body.get("cache_control"), dict):
            return {"input_tokens": total, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        digest, prefixes, chars = hashlib.sha256(str(body["model"]).encode()), [], 0
        for unit, weight in cache_units(body):
            digest.update(unit.encode("utf-8", "replace"))
            chars += weight
            prefixes.append((digest.hexdigest(), chars // 4))
        key, upto = prefixes[-1]  # the breakpoint: the last unit
        if upto < self.min_tokens:
            return {"input_tokens": total, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        now = self.clock()
        with self.lock:
            read = next((tokens for prefix, tokens in reversed(prefixes)
                         if self.expires.get(prefix, -1.0) > now), 0)
            for prefix, tokens in prefixes:
                if tokens == read and prefix in self.expires:
                    self.expires[prefix] = now + self.ttl  # a hit renews the entry
            self.expires[key] = now + self.ttl
        return {"input_tokens": total - upto, "cache_creation_input_tokens": upto - read,
                "cache_read_input_tokens": read}


# -- Recording calls: each message kept once ---------------------------------------------
class Interner:
    """One copy of each distinct JSON value it is shown. Each request of a session repeats the
    whole history; recorded through an Interner, a call's request refers to the copies kept for
    the calls before it, so a recording grows with the conversation, not with calls x history."""

    def __init__(self):
        self.kept: dict[bytes, object] = {}  # digest of the compact JSON -> the copy kept
        self.lock = threading.Lock()

    def keep(self, value):
        key = hashlib.sha256(_compact(value).encode("utf-8", "surrogatepass")).digest()
        with self.lock:
            return self.kept.setdefault(key, value)

    def request(self, body):
        """The request with its messages, system prompt and tools replaced by the kept copies."""
        if not isinstance(body, dict):
            return body
        shared = {k: self.keep(body[k]) for k in ("system", "tools") if k in body}
        if isinstance(body.get("messages"), list):
            shared["messages"] = [self.keep(m) for m in body["messages"]]
        return {**body, **shared}

    def parse(self, raw: bytes):
        """json.loads(raw) as a request, each message swapped for its kept copy as soon as it is
        parsed, so a long history is never held twice."""
        def hook(value: dict):
            return self.keep(value) if "role" in value and "content" in value else value
        return self.request(json.loads(raw, object_hook=hook))


# -- The HTTP server ----------------------------------------------------------------
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
MALFORMED = {"html": (b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"),
             "truncated": (b'{"id": "msg_x", "type": "message", "content": [{"type": "te', "application/json"),
             "no_content": (b'{"id": "msg_x", "type": "message", "role": "assistant"}', "application/json")}
STREAM_FAULTS = ("stream_error", "stream_drop", "stream_stall")


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
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes; don't stall them

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, reply, fault = stand_in.handle(self.path, dict(self.headers), raw)
                if fault in MALFORMED:
                    return self.send(200, *MALFORMED[fault])
                if status == 200 and isinstance(reply, dict) and reply.get("type") == "message" \
                        and stand_in.requests[-1].get("stream"):
                    return self.stream(reply, fault)
                plain = {k: v for k, v in reply.items() if k != "wire"} if isinstance(reply, dict) else reply
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
                        if fault == "stream_stall":
                            stand_in.stalled.set()
                            stand_in.release.wait(30)
                            fault = None
                        elif fault == "stream_drop":
                            self.close_connection = True
                            return  # no closing chunk: the client sees the body end too soon
                        else:
                            kind, data = "error", {"type": "error", "error": {
                                "type": "overloaded_error", "message": "Overloaded (injected mid-stream)"}}
                    self.chunk(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
                    if kind == "error":
                        break
                self.chunk(b"")

            def chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

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

    def handle(self, path: str, headers: dict, raw: bytes) -> tuple[int, dict, str | None]:
        """(status, JSON reply, fault to apply while sending it)."""
        route = path.split("?", 1)[0]
        if route not in ("/v1/messages", "/v1/messages/count_tokens"):
            return (*_error(404, f"no route {route}"), None)
        lowered = {k.lower(): v for k, v in headers.items()}
        if not lowered.get("x-api-key") and not lowered.get("authorization", "").startswith("Bearer "):
            return (*_error(401, "missing credentials: send X-Api-Key or Authorization: Bearer"), None)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            return (*_error(400, "request body is not valid JSON"), None)
        with self._lock:
            self.requests.append(body)
            fault = self._faults.popleft() if self._faults and not route.endswith("count_tokens") else None
        if isinstance(fault, int):
            return (*_error(fault, f"injected {fault} for testing"), None)
        if route.endswith("count_tokens"):
            problem = validate_request({"max_tokens": 1, **body}) if isinstance(body, dict) else "bad body"
            return (*_error(400, problem), None) if problem else (200, {"input_tokens": estimate_tokens(body)}, None)
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


def _error(status: int, message: str) -> tuple[int, dict]:
    kind = ERROR_TYPES.get(status, "api_error")
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def sse_events(message: dict):
    """The server-sent events that stream `message`, in the API's order."""
    usage = message.get("usage")
    start_usage = None if usage is None else {**usage, "output_tokens": usage["output_tokens"] and 1}
    yield "message_start", {"type": "message_start", "message": {
        **{k: v for k, v in message.items() if k != "wire"}, "content": [], "stop_reason": None,
        "stop_details": None, **({} if usage is None else {"usage": start_usage})}}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            start, text, delta = {**block, "input": {}}, _compact(block["input"]), "input_json_delta"
            cut = message["stop_reason"] == "max_tokens" and index == len(message["content"]) - 1
            text = text[:len(text) // 2] if cut else text  # cut off in the middle of its input
            pieces = [text] if not isinstance(block["input"], dict) else None  # relayed whole
        elif block["type"] != "text":  # a block type this harness may not know: sent whole
            start, text, delta, pieces = block, "", None, []
        else:
            start, text, delta = {"type": "text", "text": ""}, block["text"], "text_delta"
            pieces = None
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        if pieces is None:
            pieces = [text[at:at + STREAM_PIECE] for at in range(0, len(text), STREAM_PIECE)]
        for piece in pieces:
            payload = {"type": delta, "partial_json": piece} if delta == "input_json_delta" else \
                {"type": delta, "text": piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    if message.get("wire") == "no_stop":
        return  # the stream ends cleanly, but before it says why the message stopped
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None,
                                      "stop_details": message.get("stop_details")},
                            "usage": {"output_tokens": (usage or {}).get("output_tokens")}}
    yield "message_stop", {"type": "message_stop"}


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


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value after `flag` in argv, or None; a flag without a value is a usage error."""
    if flag not in argv:
        return None
    at = argv.index(flag) + 1
    if at >= len(argv) or argv[at].startswith("--"):
        raise SystemExit(f"{flag} needs a value, e.g. {flag} run.html")
    return argv[at]


def session_folders(namespace: dict) -> dict:
    """Where this run's session keeps its mail (s09 on: MAILBOX, in .mailbox/<session>/) and its
    task board (s07 on: BOARD), as the step named them; what the step lacks is None."""
    return {"mailbox": getattr(namespace.get("MAILBOX"), "root", None),
            "board": getattr(namespace.get("BOARD"), "dir", None)}


def trace_problem(trace: str) -> str | None:
    """Why the page cannot be written to `trace`, checked before the session runs; None if fine."""
    path = Path(trace)
    if not path.parent.is_dir():
        return f"the folder {path.parent} does not exist (create it, or write the page elsewhere)"
    if path.is_dir():
        return "is a folder: give the page a file name, e.g. --trace run.html"
    if not os.access(path.parent, os.W_OK) or path.exists() and not os.access(path, os.W_OK):
        return f"cannot write there (permission denied in {path.parent})"
    return None


def save_trace(path: Path, calls: list, workdir: Path, title: str, **where) -> bool:
    """write_trace, with a failure told in one line instead of a traceback; True if written."""
    try:
        write_trace(path, calls, workdir, title=title, **where)
        return True
    except OSError as error:
        print(f"[trace] the page could not be written to {path}: {error}", file=sys.stderr)
        return False


def run(script_path: str, argv: list[str]) -> int:
    """A step's entry point when it has no credentials, or --demo / --trace: returns an exit code."""
    trace = flag_value(argv, "--trace")
    if trace is not None:
        problem = trace_problem(trace)
        if problem:
            print(f"--trace {trace}: {problem}", file=sys.stderr)
            return 2
    credentials = os.getenv("ANTHROPIC_API_KEY") or os.getenv("ANTHROPIC_AUTH_TOKEN")
    if credentials and "--demo" not in argv:
        return run_traced(script_path, trace, argv)
    return run_demo(script_path, trace)


def run_demo(script_path: str, trace: str | None = None) -> int:
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
            if hasattr(demo, "run"):
                demo.run(namespace, workdir, server)
            else:
                namespace["repl"]()
            if hasattr(demo, "finish"):
                demo.finish(namespace, workdir)
        finally:
            builtins.input = saved_input
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
        written = trace and save_trace(Path(saved_cwd, trace), server.calls, workdir,
                                       title=f"{script.stem} (offline demo)",
                                       **session_folders(namespace))
    seconds = time.monotonic() - started
    print(f"[offline demo] {len(server.requests)} model calls in {seconds:.1f}s; "
          f"{len(server.rejected)} rejected by the validator. The temporary folder is removed.")
    for _, problem in server.rejected:
        print(f"[offline demo] rejected: {problem}")
    if written:
        print(f"[offline demo] trace written to {Path(saved_cwd, trace)}")
    return 1 if server.rejected or trace and not written else 0


def unrecorded(notes: list) -> str:
    """The answers a page does not show, each kind once: "2 x a 200 answer that is ..."."""
    counts: dict = {}
    for note in notes:
        counts[note] = counts.get(note, 0) + 1
    return "; ".join(note if n == 1 else f"{n} x {note}" for note, n in counts.items())


def run_traced(script_path: str, trace: str | None, argv: list[str]) -> int:
    """A real session, recorded: the step talks to a local forwarding proxy that passes every request
    to the configured endpoint and keeps both sides; the page is written when the REPL ends."""
    upstream = (os.getenv("ANTHROPIC_BASE_URL") or "https://api.anthropic.com").rstrip("/")
    script, saved_env, saved_argv = Path(script_path).resolve(), dict(os.environ), sys.argv
    page = Path(trace).resolve()  # where it was meant, whatever folder the step moves to
    try:
        proxy = ForwardingProxy(upstream)
    except ValueError as error:
        print(f"[trace] {error}", file=sys.stderr)
        return 2
    with proxy:
        print(f"[trace] recording through {proxy.url} -> {upstream}; the page goes to {trace}", flush=True)
        namespace: dict = {}
        try:
            os.environ["ANTHROPIC_BASE_URL"] = proxy.url
            namespace = runpy.run_path(str(script), run_name="traced")  # the step, pointed at the proxy
            at = argv.index("--trace")
            sys.argv = argv[:at] + argv[at + 2:]  # its main() as without --trace: the step's own setup and cleanup
            namespace["main"]()
        finally:
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
            proxy.settle()  # the last reply is recorded just after the step has it
            written = save_trace(page, proxy.calls, Path.cwd(), title=f"{script.stem} (recorded)",
                                 **session_folders(namespace))
            if written:
                print(f"[trace] {len(proxy.calls)} model calls written to {trace}"
                      + (f"; not recorded: {unrecorded(proxy.notes)}" if proxy.notes else ""))
    return 0 if written else 1


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
                    if answer.chunked:  # passed on as it comes, chunks as sent, until the close
                        while block := answer.fp.read1(65536):
                            self.wfile.write(block)
                            blocks.append(block)
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
                    proxy.calls.append({"request": request, "reply": reply, "at": time.time()})

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


# -- The trace page ------------------------------------------------------------------------
PAGE_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{padding:14px 22px;background:#23303a;color:#fff}header h1{margin:0 0 4px;font-size:19px}
main{padding:12px 22px}section.call{background:#fff;border:1px solid #ddd;border-radius:6px;margin:12px 0;padding:10px 14px}
section.call>h2{font-size:15px;margin:0 0 6px}.agent{background:#e8eef5;border-radius:4px;padding:1px 6px}
.tokens span{display:inline-block;margin-right:12px;font-variant-numeric:tabular-nums}
.changes{margin:6px 0;padding:6px 10px;background:#fffbea;border-left:3px solid #e0b000}
.changes li{margin:2px 0}.msg{border-left:3px solid #bbb;margin:6px 0;padding:2px 10px}
.msg.user{border-color:#4a90d9}.msg.assistant{border-color:#7b5ea7}.role{font-weight:600;font-size:12px;color:#666}
.new{background:#eefaf0}.pair{display:grid;grid-template-columns:1fr 1fr;gap:8px;margin:4px 0}
.call-box,.result{background:#f3f1fb;border-radius:4px;padding:4px 8px}.result{background:#f0f6fc}
.result.error{background:#fdecec}pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:12px/1.4 monospace}
.transient{outline:2px dashed #e0a000;background:#fff6df}.cleared{color:#8a6d00;background:#fbf5e0}
.summary{background:#f5efff}.news{background:#eaf7ff;outline:1px solid #9ccbe8}.uses{color:#666;font-size:12px}
.reply{background:#f7f3ff}.earlier{color:#555;font-size:12px;margin:4px 0}.again{opacity:.85}
table.mail{border-collapse:collapse;width:100%;background:#fff}table.mail td,table.mail th{border:1px solid #ddd;
padding:3px 6px;text-align:left;vertical-align:top;font-size:12px}details>summary{cursor:pointer;color:#555}
"""


def agent_of(request: dict) -> str:
    system = system_text(request)
    found = re.search(r"teammate '([\w-]+)'", system)
    return found.group(1) if found else "summary" if "summarise" in system else "lead"


TOKEN_FIGURES = {"input": "input_tokens", "cache-read": "cache_read_input_tokens",
                 "cache-write": "cache_creation_input_tokens", "output": "output_tokens"}


def usage_figure(reply: dict, key: str) -> int | None:
    """One usage figure of a reply; None when the endpoint reported none (no usage, or null)."""
    usage = reply.get("usage") if isinstance(reply, dict) else None
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def render_figure(label: str, value: int | None) -> str:
    shown = "not reported" if value is None else f"{value:,}"
    return f'<span class="{label}" data-value="{"" if value is None else value}">' \
           f'{label.replace("-", " ")}: {shown}</span>'


class Drawn:
    """The messages a page has drawn: each distinct message once, numbered, in the call where it
    first reached the model; later requests that carry it again link there."""

    def __init__(self):
        self.keys: dict[int, bytes] = {}  # id(message) -> its digest (the calls keep them alive)
        self.where: dict[bytes, tuple[int, int]] = {}  # digest -> (its number, the call drawing it)

    def key(self, message) -> bytes:
        key = self.keys.get(id(message))
        if key is None:
            text = _compact(message).encode("utf-8", "surrogatepass")
            key = self.keys[id(message)] = hashlib.sha256(text).digest()
        return key

    def draw(self, messages: list, at: int, key: bytes, call: int, escape) -> str:
        """messages[at], drawn in full if the page has not drawn it yet, else a link to it."""
        message, role = messages[at], escape(str(messages[at].get("role")))
        if key in self.where:
            number, drawn_in = self.where[key]
            return (f'<div class="msg {role} new again"><div class="role">{role} '
                    f'<a href="#m-{number}">#{number}</a></div><div class="uses">the same message '
                    f'as in <a href="#call-{drawn_in}">call {drawn_in}</a></div></div>')
        number = len(self.where) + 1
        self.where[key] = (number, call)
        return render_message(message, messages[at - 1] if at else None, True, escape, number)

    def earlier(self, keys: list, since: int, escape, most: int = 12) -> str:
        """A line for the messages a request repeats from the agent's previous one: their links."""
        numbers = [self.where[k][0] for k in keys if k in self.where]
        runs: list = []
        for n in numbers:
            if runs and n == runs[-1][1] + 1:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        link = lambda n: f'<a href="#m-{n}">#{n}</a>'  # noqa: E731
        shown = ", ".join(link(a) if a == b else f"{link(a)}-{link(b)}" for a, b in runs[:most])
        more = f" and {len(runs) - most} more runs" if len(runs) > most else ""
        return (f'<div class="earlier">{len(keys)} earlier message(s), unchanged since '
                f'<a href="#call-{since}">call {since}</a>: {shown}{more}</div>')


def write_trace(path: Path, calls: list, workdir: Path, title: str = "",
                mailbox: Path | None = None, board: Path | None = None) -> None:
    """One self-contained page: a panel per model call, then the mail of this run's session
    (`mailbox`: its folder) and the task board (`board`: its folder), if the step has them.
    Each message is drawn once (see Drawn), so the page grows with the conversation, not with
    calls x history; it is written panel by panel."""
    from html import escape
    totals = {k: sum(usage_figure(c["reply"], k) or 0 for c in calls)
              for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")}
    drawn, previous = Drawn(), {}  # agent -> (the keys of its previous request, that call's number)
    # a lone surrogate in a text is written as \\ud800
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as page:
        page.write(
            f"<!doctype html><html><head><meta charset='utf-8'><title>trace: {escape(title)}"
            f"</title><style>{PAGE_STYLE}</style></head><body><header><h1>What the model saw: "
            f"{escape(title)}</h1>{len(calls)} model calls. Tokens: not cached "
            f"{totals['input_tokens']:,}; read from the cache "
            f"{totals['cache_read_input_tokens']:,}; written to it "
            f"{totals['cache_creation_input_tokens']:,}. Each panel is one request: "
            "what changed since that agent's previous request, the new messages, and the reply. "
            "Each message is drawn once, numbered, where it first reached the model; a later "
            "request that carries it again links there.</header><main>")
        for number, call in enumerate(calls, 1):
            page.write(render_call(number, call, drawn, previous, escape))
        page.write(mail_table(mailbox, workdir, escape) + board_table(board, escape)
                   + "</main></body></html>")


def render_call(number: int, call: dict, drawn: Drawn, previous: dict, escape) -> str:
    """One panel: what changed since the agent's previous call, the new messages, the reply."""
    request, reply = call["request"], call["reply"]
    agent, messages = agent_of(request), request.get("messages") or []
    keys = [drawn.key(m) for m in messages]
    before, since = previous.get(agent, ([], 0))
    previous[agent] = (keys, number)
    shared = next((i for i, (a, b) in enumerate(zip(before, keys)) if a != b),
                  min(len(before), len(keys)))
    fresh = "new" if shared == len(before) else "new or changed"  # all after an edit is sent again
    changes = [f"{len(messages) - shared} {fresh} message(s) since {agent}'s previous call"] \
        if before else [f"{agent}'s first call: {len(messages)} message(s)"]
    if before and shared < len(before):
        edited = json.dumps(messages[shared:])
        how = "summarised by a compaction" if "[This conversation was compacted" in edited else \
            "old results cleared by micro compaction" if "[cleared:" in edited else "rewritten"
        changes.append(f"{len(before) - shared} earlier message(s) changed: {how}")
    last = json.dumps(messages[-1]) if messages else ""
    if "<nag-reminder>" in last:
        changes.append("a transient reminder rides on this request only (it is not in the history)")
    if "New messages in your team mailbox" in last:
        changes.append("team mail joins this request")
    tokens = {label: usage_figure(reply, key) for label, key in TOKEN_FIGURES.items()}
    return (f'<section class="call" id="call-{number}" data-agent="{escape(agent)}">'
            f'<h2>Call {number} <span class="agent">{escape(agent)}</span> stop: '
            f'{escape(str(reply.get("stop_reason")))}</h2><div class="tokens">'
            + "".join(render_figure(k, v) for k, v in tokens.items())
            + '</div><ul class="changes">' + "".join(f"<li>{escape(c)}</li>" for c in changes) + "</ul>"
            + (drawn.earlier(keys[:shared], since, escape) if shared else "")
            + "".join(drawn.draw(messages, i, keys[i], number, escape)
                      for i in range(shared, len(messages)))
            + '<div class="msg assistant reply"><div class="role">reply</div>'
            + "".join(render_block(b, escape) for b in reply.get("content") or [])
            + "</div></section>")


def mail_table(session: Path | None, workdir: Path, escape) -> str:
    """The mail of this run's session (s09 on: the folder .mailbox/<session>/ the step named),
    and of no other session that left its mail in the same folder."""
    if session is None:
        return ""
    mail = []
    for mailbox in sorted(Path(session).glob("*.jsonl")):
        for line in mailbox.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                m = json.loads(line)
                protocol = f" [{escape(m['protocol'])}]" if m.get("protocol") else ""
                mail.append(f'<tr><td>{escape(mailbox.name)}</td><td>{escape(str(m.get("from")))} '
                            f'-&gt; {escape(str(m.get("to")))}</td><td>{escape(str(m.get("kind")))}'
                            f'{protocol}</td><td>{clipped(str(m.get("content")), escape)}'
                            '</td></tr>')
            except (ValueError, AttributeError, TypeError):
                mail.append(f"<tr><td>{escape(mailbox.name)}</td><td colspan=3>(a malformed line)"
                            "</td></tr>")
    try:
        where = Path(session).relative_to(workdir)
    except ValueError:
        where = Path(session)
    return (f"<h2>Mailbox traffic of this session ({escape(str(where))})</h2><table class='mail'>"
            "<tr><th>mailbox</th><th>from -&gt; to</th><th>kind</th><th>content</th></tr>"
            f"{''.join(mail)}</table>" if mail else "")


BOARD_COLUMNS = ("id", "subject", "status", "owner", "blockedBy", "result")


def board_table(tasks: Path | None, escape) -> str:
    """The task board as the run left it (s07 on, the folder the step's board uses): who did
    what, and how it ended."""
    if tasks is None:
        return ""
    board = []
    files = sorted(Path(tasks).glob("task_*.json"), key=lambda p: (len(p.name), p.name))
    for task_file in files:
        try:
            task = json.loads(task_file.read_text(encoding="utf-8"))
            board.append("<tr>" + "".join(f"<td>{clipped(str(task.get(key) or ''), escape)}</td>"
                                          for key in BOARD_COLUMNS) + "</tr>")
        except (ValueError, AttributeError):
            board.append(f"<tr><td colspan=6>{escape(task_file.name)}: not a task record</td></tr>")
    return ("<h2>The task board at the end</h2><table class='mail board'><tr><th>id</th>"
            "<th>subject</th><th>status</th><th>owner</th><th>blocked by</th><th>result</th></tr>"
            f"{''.join(board)}</table>" if board else "")


def render_message(message: dict, before: dict | None, new: bool, escape, number: int = 0) -> str:
    """A message as the model received it (with its number on the page, and an anchor to it).
    Each tool result is drawn beside the call it answers."""
    calls = {b.get("id"): b for b in blocks_of(before or {}) if b.get("type") == "tool_use"}
    parts = []
    for block in blocks_of(message):
        if block.get("type") == "tool_result":
            call = calls.get(block.get("tool_use_id"), {"name": "?", "input": {}})
            error = " error" if block.get("is_error") else ""
            parts.append(f'<div class="pair" data-id="{escape(str(block.get("tool_use_id")))}">'
                         f'<div class="call-box">{render_block({**call, "type": "tool_use"}, escape)}</div>'
                         f'<div class="result{error}">{render_result(block, escape)}</div></div>')
        elif block.get("type") == "tool_use":  # drawn in full beside its result, in the next message
            parts.append(f'<div class="uses">calls <b>{escape(str(block.get("name")))}</b> '
                         f'({escape(str(block.get("id")))})</div>')
        else:
            parts.append(render_block(block, escape))
    role = escape(str(message.get("role")))
    anchor, label = (f' id="m-{number}"', f" #{number}") if number else ("", "")
    return (f'<div class="msg {role}{" new" if new else ""}"{anchor}><div class="role">'
            f'{role}{label}</div>{"".join(parts)}</div>')


def clipped(text: str, escape, limit: int = 600) -> str:
    if len(text) <= limit:
        return f"<pre>{escape(text)}</pre>"
    return (f"<pre>{escape(text[:limit])}</pre><details><summary>{len(text) - limit:,} more characters</summary>"
            f"<pre>{escape(text[limit:])}</pre></details>")


def render_block(block: dict, escape) -> str:
    if block.get("type") == "tool_use":
        return (f'<b class="tool" data-id="{escape(str(block.get("id")))}">{escape(str(block.get("name")))}</b>'
                + clipped(json.dumps(block.get("input"), ensure_ascii=False), escape))
    text = str(block.get("text", ""))
    kind = "transient" if "<nag-reminder>" in text else "summary" if text.startswith("[This conversation was") else \
        "news" if text.startswith("New messages in your team mailbox") else "text"
    return f'<div class="{kind}">{clipped(text, escape)}</div>'


def render_result(result: dict, escape) -> str:
    content = result.get("content", "")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return "".join(render_block(b, escape) if not str(b.get("text", "")).startswith("[cleared:")
                   else f'<div class="cleared">{clipped(b["text"], escape)}</div>' for b in blocks)
