"""The Messages API as the stand-in reads it: the token estimate, one copy of each message for
the recordings (Interner), helpers that read a request (for policies), the scripted model, and
validate_request - what the real API rejects, with its error message."""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections import deque


def estimate_tokens(body: dict) -> int:
    """The stand-in's documented token count: one token per 4 characters of JSON."""
    seen = [body.get("system", ""), body.get("messages", []), body.get("tools", [])]
    return math.ceil(len(_compact(seen)) / 4)


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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
            turn = self.turns.popleft() if self.turns else \
                ["(the scripted model has nothing more to say)"]
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
        return ("messages: the final message must have the `user` role (assistant prefill is not "
                "supported here)")
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
            return (f"{where}.content.{j}: block type {kind!r} is not allowed in a "
                    f"{message['role']} message")
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
                return (f"{where}.content.{j}.content: must be a string or a list of blocks "
                        "(non-empty text, images)")
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
            answered = [b["tool_use_id"] for b in blocks_of(following)
                        if b.get("type") == "tool_result"] \
                if following and following["role"] == "user" else []
            missing = [x for x in ids if x not in answered]
            if missing:
                return (f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                        f"immediately after: {', '.join(missing)}. Each `tool_use` block must "
                        "have a "
                        f"corresponding `tool_result` block in the next message.")
        else:
            kinds = [b["type"] for b in blocks]
            if "tool_result" not in kinds:
                continue
            first_other = next((k for k, kind in enumerate(kinds) if kind != "tool_result"),
                               len(kinds))
            if "tool_result" in kinds[first_other:]:
                return (f"messages.{i}: `tool_result` blocks must come first in the user message, "
                        "before any other content")
            before = messages[i - 1] if i > 0 else None
            offered = [b["id"] for b in blocks_of(before) if b.get("type") == "tool_use"] \
                if before and before["role"] == "assistant" else []
            answered = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
            for tool_use_id in answered:
                if tool_use_id not in offered:
                    return (f"messages.{i}.content: unexpected `tool_use_id` found in "
                            "`tool_result` blocks: "
                            f"{tool_use_id}. Each `tool_result` block must have a corresponding "
                            f"`tool_use` block in the previous message.")
                if answered.count(tool_use_id) > 1:
                    return (f"messages.{i}.content: more than one `tool_result` for "
                            f"`tool_use_id` {tool_use_id}")
    return None
