"""Replies a policy gives (tool_use, reply, Reply), the quirks real endpoints send instead
(QUIRKS), make_message, which wraps a turn in the Messages API's response shape, and
task_ids, the task ids a scripted model reads back from its tool results."""

from __future__ import annotations

import itertools
import json
import math
import threading
from dataclasses import dataclass
from typing import Callable

from .protocol import blocks_of, estimate_tokens, result_text

Policy = Callable[[dict], "list | Reply"]


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
    `wire` names a quirk of how the reply is sent (see QUIRKS): "no_stop", "null_usage",
    "no_usage"."""
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
    block = {"type": "tool_use", "id": _next_id("toolu"), "name": call["name"],
             "input": call["input"]}
    block.update(changes)
    return {k: v for k, v in block.items() if v is not _MISSING}


_MISSING = object()
QUIRKS: dict[str, Callable[[dict], Reply]] = {
    "whitespace_text": lambda call: Reply(["\n\n", _raw_call(call)]),  # text before a call
    "whitespace_only": lambda call: Reply([" "], "end_turn"),  # nothing but a blank
    "empty_text": lambda call: Reply(["", _raw_call(call)]),
    "duplicate_ids": lambda call: Reply([_raw_call(call, id="call_0"),
                                         _raw_call(call, id="call_0")]),
    "reused_id": lambda call: Reply([_raw_call(call, id="call_0")]),  # every turn counts from 0
    "odd_id": lambda call: Reply([_raw_call(call, id="functions.bash:0")]),
    "empty_id": lambda call: Reply([_raw_call(call, id="")]),  # matches no pattern: not valid
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
    calls = any(b["type"] == "tool_use" for b in content)
    stop = turn.stop_reason or ("tool_use" if calls else "end_turn")
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
        message["wire"] = "no_stop"  # sse_events stops after the last block; not sent in JSON
    if turn.stop_details:
        message["stop_details"] = turn.stop_details
    return message


def task_ids(request: dict) -> dict:
    """subject -> id, from every task a tool result of the conversation returned (a scripted
    model learns the ids the board gave, as a real model must, instead of guessing them)."""
    ids = {}
    for message in request["messages"]:
        for block in blocks_of(message):
            if block.get("type") == "tool_result" and not block.get("is_error"):
                try:
                    task = json.loads(result_text(block))
                except ValueError:
                    continue  # not a task (e.g. the task_list board)
                if isinstance(task, dict) and "subject" in task:
                    ids[task["subject"]] = task["id"]
    return ids
