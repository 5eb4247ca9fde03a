"""What the model receives, as play mode shows it (play.py): on an agent's first call its system
prompt and tools, then on every call what is new since that agent's previous one (a View per
agent), long texts folded."""

from __future__ import annotations

import json
import textwrap

from .protocol import blocks_of, result_text, system_text

FOLD = 4  # lines of a long text shown before "... N more lines"
SYSTEM_FOLD = 12  # a system prompt shows more: a listing in it (s05: skills) is read to decide


# -- What the model receives ---------------------------------------------------------
def folded(label: str, text: str, fold: int = FOLD) -> str:
    """label: text, on one line if it fits; else its first `fold` lines, wrapped, below it."""
    lines = [part for line in text.splitlines() or [""] for part in textwrap.wrap(line, 92) or [""]]
    if len(lines) == 1 and len(label + lines[0]) < 96:
        return f"{label}: {lines[0]}"
    shown = "\n".join("      " + line for line in lines[:fold])
    more = len(lines) - fold
    hidden = f"\n      ... {more} more line{'s' * (more > 1)} (/show)" if more > 0 else ""
    return f"{label}:\n{shown}{hidden}"


def signature(tool: dict) -> str:
    """bash(command) or read_file(path, limit?): the parameters, optional ones marked."""
    schema = tool.get("input_schema") or {}
    required = set(schema.get("required") or [])
    names = [n if n in required else f"{n}?" for n in schema.get("properties") or {}]
    return f"{tool.get('name')}({', '.join(names)})"


def wrapped(label: str, items: list, width: int = 98) -> list:
    """Items joined by " · " on lines of at most `width`, none split, indented under label."""
    lines = [label]
    for item in items:
        if len(lines[-1]) > len(label) and len(lines[-1]) + 3 + len(item) > width:
            lines.append(" " * len(label))
        lines[-1] += (" · " if len(lines[-1]) > len(label) else "") + item
    return lines


def describe_block(role: str, block: dict, names: dict) -> str:
    kind = block.get("type")
    if kind == "text":
        return folded(f"  {role}", block.get("text", ""))
    if kind == "tool_result":
        error = ", an error" if block.get("is_error") else ""
        name = names.get(block.get("tool_use_id"), "?")
        return folded(f"  result ({name}{error})", result_text(block))
    if kind == "tool_use":
        arguments = json.dumps(block.get("input"), ensure_ascii=False)
        return f"  {role}: @{block.get('name')} {arguments}"
    return f"  {role}: [a {kind} block]"


def describe_message(message: dict, names: dict) -> list:
    return [describe_block(message["role"], b, names) for b in blocks_of(message)]


def tool_names(messages: list) -> dict:
    """tool_use id -> tool name, so a result says which call it answers."""
    return {b.get("id"): b.get("name") for m in messages for b in blocks_of(m)
            if b.get("type") == "tool_use"}


class View:
    """What one agent saw last time, so each call shows only what is new."""

    def __init__(self):
        self.system = None
        self.tools = None
        self.messages: list = []

    def news(self, request: dict) -> list:
        lines = []
        system, tools = system_text(request), request.get("tools") or []
        if system != self.system and system:
            lines.append(folded("  system", system, SYSTEM_FOLD))
        if tools != self.tools:
            lines += wrapped("  tools: ", [signature(t) for t in tools])
        messages, names = request["messages"], tool_names(request["messages"])
        seen = self.messages
        if len(messages) < len(seen):  # compacted, or a turn rolled back: say so
            lines.append(f"  (the history is {len(seen) - len(messages)} messages shorter than "
                         "at the last call)")
        for at, message in enumerate(messages):
            if at < len(seen) and message == seen[at]:
                continue
            if at == len(seen) and message["role"] == "assistant" and seen:
                continue  # the reply just typed, as the harness stored it
            lines += ["  (changed since the last call)"] if at < len(seen) else []
            lines += describe_message(message, names)
        self.system, self.tools, self.messages = system, tools, list(messages)
        return lines
