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
    for check in (_check_encodable, _check_top_level, _check_tools, _check_messages,
                  _check_tool_pairing):
        error = check(body)
        if error:
            return error
    return None


def _check_encodable(body: dict) -> str | None:
    """JSON text may spell a lone surrogate ("\\udc00"), but it is no character: the real API
    refuses such a body as invalid JSON (an SDK that encodes the body as UTF-8 cannot send it)."""
    try:
        _compact(body).encode("utf-8")
    except UnicodeEncodeError as error:
        return f"request body is not valid JSON: a lone surrogate {error.object[error.start]!r}"
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


# Which block types each role may send.
ALLOWED_BLOCKS = {"user": {"text", "image", "document", "tool_result"},
                  "assistant": {"text", "tool_use", "thinking", "redacted_thinking"}}


def _check_content(where: str, message: dict) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return None if content.strip() else f"{where}: text content must be non-empty"
    if not isinstance(content, list) or not content:
        return f"{where}: content must be a non-empty string or a non-empty list of blocks"
    for j, block in enumerate(content):
        error = _check_block(f"{where}.content.{j}", block, message["role"])
        if error:
            return error
    return None


def _check_block(where: str, block, role: str) -> str | None:
    """One block of a message: a type its role may send, then the rules of that type."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in ALLOWED_BLOCKS[role]:
        return f"{where}: block type {kind!r} is not allowed in a {role} message"
    check = BLOCK_CHECKS.get(kind)  # images, documents and thinking are passed as they are
    return check(where, block) if check else None


def _check_text(where: str, block: dict) -> str | None:
    # The real API words an empty text and a whitespace-only text differently.
    if block.get("text") == "":
        return f"{where}.text: text content blocks must be non-empty"
    if not isinstance(block.get("text"), str) or not block["text"].strip():
        return f"{where}.text: text content blocks must contain non-whitespace text"
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


def _check_tool_result(where: str, block: dict) -> str | None:
    if not isinstance(block.get("tool_use_id"), str):
        return f"{where}.tool_use_id: Field required"
    if block.get("is_error") and not result_text(block).strip():
        return f"{where}.content: an error tool_result must have non-empty content"
    if not _is_result_content(block.get("content", "")):
        return f"{where}.content: must be a string or a list of blocks (non-empty text, images)"
    return None


def _is_result_content(content) -> bool:
    """What a tool_result may carry: a string, or a list of non-empty texts, images, documents."""
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(_is_result_block(b) for b in content)


def _is_result_block(block) -> bool:
    if not isinstance(block, dict) or block.get("type") not in ("text", "image", "document"):
        return False
    return block["type"] != "text" or bool(str(block.get("text", "")).strip())


BLOCK_CHECKS = {"text": _check_text, "tool_use": _check_tool_use,
                "tool_result": _check_tool_result}


# -- Pairing: each tool_use answered by a tool_result in the very next message ------------
def _check_tool_pairing(body: dict) -> str | None:
    messages = body["messages"]
    seen_ids: set = set()  # tool_use ids must be unique across the whole conversation
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            error = _check_tool_uses_answered(messages, i, seen_ids)
        else:
            error = _check_tool_results_asked_for(messages, i)
        if error:
            return error
    return None


def _tool_use_ids(message: dict | None) -> list:
    """The ids of the tool calls in an assistant message (none for anything else)."""
    if not message or message["role"] != "assistant":
        return []
    return [b["id"] for b in blocks_of(message) if b.get("type") == "tool_use"]


def _tool_result_ids(message: dict | None) -> list:
    """The tool_use ids that a user message's tool_result blocks answer (none otherwise)."""
    if not message or message["role"] != "user":
        return []
    return [b["tool_use_id"] for b in blocks_of(message) if b.get("type") == "tool_result"]


def _check_tool_uses_answered(messages: list, i: int, seen_ids: set) -> str | None:
    """Assistant message i: its tool_use ids are new, and the next message answers each one."""
    ids = _tool_use_ids(messages[i])
    duplicate = next((x for x in ids if x in seen_ids or ids.count(x) > 1), None)
    if duplicate:
        return f"messages.{i}: `tool_use` ids must be unique (found {duplicate!r} twice)"
    seen_ids.update(ids)
    following = messages[i + 1] if i + 1 < len(messages) else None
    answered = _tool_result_ids(following)
    missing = [x for x in ids if x not in answered]
    if missing:
        return (f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message.")
    return None


def _check_tool_results_asked_for(messages: list, i: int) -> str | None:
    """User message i: its tool_results come first, each answering a call of the message before
    it, and each call only once."""
    kinds = [b["type"] for b in blocks_of(messages[i])]
    if "tool_result" not in kinds:
        return None
    first_other = next((k for k, kind in enumerate(kinds) if kind != "tool_result"), len(kinds))
    if "tool_result" in kinds[first_other:]:
        return (f"messages.{i}: `tool_result` blocks must come first in the user message, "
                "before any other content")
    offered = _tool_use_ids(messages[i - 1] if i > 0 else None)
    answered = _tool_result_ids(messages[i])
    for tool_use_id in answered:
        if tool_use_id not in offered:
            return (f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {tool_use_id}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message.")
        if answered.count(tool_use_id) > 1:
            return (f"messages.{i}.content: more than one `tool_result` for "
                    f"`tool_use_id` {tool_use_id}")
    return None
