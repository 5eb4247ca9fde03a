"""A message before and after it changed: what an agent's history lost or gained between two of
its calls (an edit where it stood, or a history rebuilt by a compaction), drawn for the trace
page. page.py puts it in the panel of the later call."""

from __future__ import annotations

import json
import os
from html import escape

from .protocol import blocks_of


# -- A message before and after it changed ------------------------------------------------
def message_text(message: dict) -> str:
    """A message as one text to compare: its blocks' text, tool calls and results, in order."""
    parts = []
    for block in blocks_of(message):
        if block.get("type") == "tool_use":
            said = json.dumps(block.get("input"), ensure_ascii=False)
            parts.append(f"[call {block.get('name')}] {said}")
        elif block.get("type") == "tool_result":
            content = block.get("content", "")
            inner = [{"text": content}] if isinstance(content, str) else content
            parts.append("[result] " + "\n".join(str(b.get("text", b)) for b in inner))
        else:
            parts.append(str(block.get("text", block)))
    return "\n".join(parts)


def difference(old: str, new: str) -> tuple[int, int]:
    """(the length of the text two strings start with, of the text both end with after that)."""
    head = len(os.path.commonprefix([old, new]))
    room = min(len(old), len(new)) - head
    return head, min(len(os.path.commonprefix([old[::-1], new[::-1]])), room)


def changed_part(text: str, head: int, tail: int, tag: str, limit: int = 300) -> str:
    """The part of `text` that changed, in <del> or <ins>, with a little of what is around it."""
    middle = text[head:len(text) - tail]
    more = f" [{len(middle) - limit:,} more characters]" if len(middle) > limit else ""
    around = text[max(head - 80, 0):head], text[len(text) - tail:][:80]
    return (f"<pre>{'...' if head > 80 else ''}{escape(around[0])}<{tag}>{escape(middle[:limit])}"
            f"{more}</{tag}>{escape(around[1])}{'...' if tail > 80 else ''}</pre>")


def edit_line(old: tuple, new: tuple, shared: int, how: str) -> str:
    """The line of the changes list for an edited history. `old`, `new`: (messages, numbers)."""
    if not in_place(old[0], new[0], shared):
        return f"{len(old[0]) - shared} earlier message(s) replaced: {how}"
    edited = sum(a != b for a, b in zip(old[1][shared:], new[1][shared:]))
    return (f"{edited} earlier message(s) changed: {how}. The request differs from the cached "
            "prefix from the first change on")


def in_place(old: list, new: list, shared: int) -> bool:
    """True if the history was edited where it stood (micro compaction, a reminder gone): the
    messages keep their places and roles. False if it was rebuilt (a compaction)."""
    return len(new) >= len(old) and all(old[j].get("role") == new[j].get("role")
                                        for j in range(shared, len(old)))


def before_after(old: tuple, new: tuple, shared: int) -> str:
    """Each message that changed since the agent's previous call, before and after. `old` and
    `new`: (messages, their numbers on the page) of that call and of this one."""
    if not in_place(old[0], new[0], shared):
        return rebuilt((old[0][shared:], old[1][shared:]), (new[0][shared:], new[1][shared:]))
    edits = []
    for j in range(shared, len(old[0])):
        if old[1][j] == new[1][j]:
            continue
        before, after = message_text(old[0][j]), message_text(new[0][j])
        head, tail = difference(before, after)
        edits.append(edit_box(f'{escape(str(new[0][j].get("role")))} {link(old[1][j])} is now '
                              f"{link(new[1][j])}", changed_part(before, head, tail, "del"),
                              changed_part(after, head, tail, "ins")))
    return "".join(edits)


def rebuilt(old: tuple, new: tuple) -> str:
    """A history rebuilt from some point on (a compaction): the messages it had from there, and
    the first of those that took their place. `old`, `new`: (messages, their numbers)."""
    size = sum(len(message_text(m)) for m in old[0])
    after = changed_part(message_text(new[0][0]), 0, 0, "ins") if new[0] else ""
    then = f'<div class="uses">then {link_runs(new[1][1:])}</div>' if len(new[1]) > 1 else ""
    return edit_box(f"the history was rebuilt: {len(old[0])} message(s) gave way to "
                    f"{len(new[0])}", f'<div class="uses">{len(old[0])} message(s), {size:,} '
                    f"characters: {link_runs(old[1])}</div>", after + then)


def edit_box(title: str, before: str, after: str) -> str:
    return (f'<div class="edit"><div class="role">{title}</div><div class="sides">'
            f'<div class="before"><div class="role">before</div>{before}</div>'
            f'<div class="after"><div class="role">after</div>{after}</div></div></div>')


def link(number: int) -> str:
    return f'<a href="#m-{number}">#{number}</a>'


def link_runs(numbers: list, most: int = 12) -> str:
    """Links to messages, runs of consecutive numbers as one: #1-#5, #8."""
    runs: list = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    shown = ", ".join(link(a) if a == b else f"{link(a)}-{link(b)}" for a, b in runs[:most])
    return shown + (f" and {len(runs) - most} more runs" if len(runs) > most else "")
