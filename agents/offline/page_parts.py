"""The parts of the trace page around the messages: who is asking, the index and its filter, the
context bar, an agent's system prompt and tools, the mail and the task board. page.py puts them
together (with page_changes.py: a message before and after it changed)."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

from .protocol import system_text


# -- Who is asking ------------------------------------------------------------------------
# Who sent a request, told by a marker in its system prompt: marker -> (the panel's label, the
# steps whose source holds the marker). A label "{name}" is the quoted name right after the
# marker ("You are the teammate 'alice' (reviewer) ..." -> alice). No marker: the lead.
AGENT_LABELS = {
    "You summarise a coding agent's session": ("summary", ("s06_compact",)),  # a compaction
    "You are the teammate ": ("{name}", ("s09_team", "s11_autonomous")),  # a teammate, a worker
    "You are a subagent": ("subagent", ("s04_subagent",)),  # a child with a fresh context
}
QUOTED = re.compile("'([^']+)'|\"([^\"]+)\"")  # 'name' or "name", as repr() quotes it


def agent_of(request: dict) -> str:
    """The label of a request's panel (see AGENT_LABELS)."""
    system = system_text(request)
    for marker, (label, _) in AGENT_LABELS.items():
        at = system.find(marker)
        if at < 0:
            continue
        if label != "{name}":
            return label
        quoted = QUOTED.match(system, at + len(marker))
        if quoted:
            return quoted.group(1) or quoted.group(2)
    return "lead"


# -- Token figures --------------------------------------------------------------------------
TOKEN_FIGURES = {"input": "input_tokens", "cache-read": "cache_read_input_tokens",
                 "cache-write": "cache_creation_input_tokens", "output": "output_tokens"}
# The context a request took, in the order the cache sees it: the prefix read, the part written,
# then what the cache did not cover. (css class, usage key, words)
CONTEXT_PARTS = (("read", "cache_read_input_tokens", "read from the cache"),
                 ("write", "cache_creation_input_tokens", "written to it"),
                 ("input", "input_tokens", "not cached"))


def usage_figure(reply: dict, key: str) -> int | None:
    """One usage figure of a reply; None when the endpoint reported none (no usage, or null)."""
    usage = reply.get("usage") if isinstance(reply, dict) else None
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def context_size(reply: dict) -> int:
    """Input + cache read + cache write: the context a request took (unreported figures as 0)."""
    return sum(usage_figure(reply, key) or 0 for _, key, _ in CONTEXT_PARTS)


def render_figure(label: str, value: int | None) -> str:
    shown = "not reported" if value is None else f"{value:,}"
    return f'<span class="{label}" data-value="{"" if value is None else value}">' \
           f'{label.replace("-", " ")}: {shown}</span>'


def share(tokens: int, scale: int) -> str:
    """A width or a position on a context bar: every bar of the page has the same scale."""
    return f"{100 * tokens / scale:.2f}%"


def context_bar(reply: dict, scale: int, threshold: int | None) -> str:
    """The request's context drawn to the page's scale: cache read, cache write, not cached (the
    panel's figures say how many), and the compaction threshold marked if the step has one."""
    parts = [f'<i class="{css}" data-tokens="{usage_figure(reply, key) or 0}" '
             f'style="width:{share(usage_figure(reply, key) or 0, scale)}"></i>'
             for css, key, _ in CONTEXT_PARTS]
    limit = ""
    if threshold:
        parts.append(f'<b class="limit" data-tokens="{threshold}" '
                     f'style="left:{share(threshold, scale)}"></b>')
        limit = f"; automatic compaction at {threshold:,}"
    return (f'<div class="context"><div class="bar">{"".join(parts)}</div>'
            f'<div class="said">context {context_size(reply):,} tokens{limit}</div></div>')


def legend() -> str:
    """What the colours of a context bar stand for."""
    return "".join(f'<span class="key"><i class="{css}"></i> {words}</span>'
                   for css, _, words in CONTEXT_PARTS)


# -- The index of calls, and the filter by agent ---------------------------------------------
def filter_rules(agents: dict) -> str:
    """CSS that shows one agent's panels and index rows while its radio button is checked: the
    filter needs no script. A panel that is the target of a link shows all the same."""
    return "".join(f"body:has(#only-{n}:checked) :is(section.call,tr.row):not(.agent-{n})"
                   ":not(:target){display:none}" for n in agents.values())


INDEX_FIGURES = ("cache_read_input_tokens", "cache_creation_input_tokens", "input_tokens",
                 "output_tokens")


def call_index(calls: list, names: list, agents: dict) -> str:
    """A row per call (number, agent, stop reason, tokens), each a link to its panel; above it,
    the radio buttons of the filter. `names`: each call's agent; `agents`: agent -> number."""
    counts = {agent: names.count(agent) for agent in agents}
    choices = "".join(f'<label><input type="radio" name="agent" id="only-{n}"> {escape(agent)} '
                      f"({counts[agent]})</label>" for agent, n in agents.items())
    rows = []
    for number, (call, agent) in enumerate(zip(calls, names), 1):
        reply = call["reply"]
        figures = [context_size(reply)] + [usage_figure(reply, key) for key in INDEX_FIGURES]
        cells = "".join("<td>-</td>" if v is None else f"<td>{v:,}</td>" for v in figures)
        rows.append(f'<tr class="row agent-{agents[agent]}"><td><a href="#call-{number}">{number}'
                    f"</a></td><td>{escape(agent)}</td>"
                    f'<td>{escape(str(reply.get("stop_reason")))}</td>{cells}</tr>')
    return ('<nav class="index" id="calls"><h2>The calls</h2><fieldset class="filter"><legend>'
            'Show the calls of</legend><label><input type="radio" name="agent" id="only-0" '
            f'checked> every agent</label>{choices}</fieldset><div class="wide"><table>'
            "<tr><th>call</th><th>agent</th><th>stop</th><th>context</th><th>read from the cache"
            "</th><th>written to it</th><th>not cached</th><th>output</th></tr>"
            f'{"".join(rows)}</table></div></nav>')


# -- An agent's system prompt and tools -----------------------------------------------------
def clipped(text: str, limit: int = 600) -> str:
    if len(text) <= limit:
        return f"<pre>{escape(text)}</pre>"
    return (f"<pre>{escape(text[:limit])}</pre><details><summary>{len(text) - limit:,} more "
            f"characters</summary><pre>{escape(text[limit:])}</pre></details>")


def system_block(agent: str, request: dict, since: int | None) -> str:
    """The system prompt, on the agent's first call (since None) or where it changed."""
    text = system_text(request)
    when = "" if since is None else f", changed since its call {since}"
    return (f'<div class="setup system"><div class="role">{escape(agent)}\'s system prompt '
            f"({len(text):,} characters{when})</div>{clipped(text)}</div>")


def tool_names(tools) -> list:
    if not isinstance(tools, list):
        return []
    return [str(t.get("name")) for t in tools if isinstance(t, dict)]


def tools_block(request: dict, since: int | None, before) -> str:
    """The tool list (name and parameters; descriptions folded), on the agent's first call or
    where it changed (`before`: the list of its previous call)."""
    tools = request.get("tools") if isinstance(request.get("tools"), list) else []
    when = ""
    if since is not None:
        old, new = tool_names(before), tool_names(tools)
        added = [n for n in new if n not in old]
        gone = [n for n in old if n not in new]
        when = (f", changed since call {since}: added {', '.join(added) or 'none'}; "
                f"removed {', '.join(gone) or 'none'}")
    items = "".join(f"<li>{tool_line(t)}</li>" for t in tools if isinstance(t, dict))
    count = f"{len(tools)} tool(s)" if tools else "no tools"
    return (f'<div class="setup tools"><div class="role">{count}{escape(when)}</div>'
            f'<ul class="tools">{items}</ul></div>')


def tool_line(tool: dict) -> str:
    """name(parameter: type, optional?: type), the descriptions folded under it."""
    schema = tool.get("input_schema") if isinstance(tool.get("input_schema"), dict) else {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    params, notes = [], []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type", "any")
        mark = "" if name in required else "?"
        params.append(f"{name}{mark}: {'|'.join(kind) if isinstance(kind, list) else kind}")
        if spec.get("description"):
            notes.append(f"{name}: {spec['description']}")
    head = f'<b class="tool-name">{escape(str(tool.get("name")))}</b>({escape(", ".join(params))})'
    told = "\n".join([str(tool.get("description") or "")] + notes).strip()
    if not told:
        return head
    return f"<details><summary>{head}</summary><pre>{escape(told)}</pre></details>"


# -- The mail and the task board ------------------------------------------------------------
def mail_table(session: Path | None, workdir: Path, carried_in=lambda text: None) -> str:
    """The mail of this run's session (s09 on: the folder .mailbox/<session>/ the step named),
    and of no other session that left its mail in the same folder, in time order.
    `carried_in(text)`: the first call whose request carried that text, or None."""
    if session is None:
        return ""
    letters = []  # (mailbox, line number, the message; None for a malformed line)
    for mailbox in sorted(Path(session).glob("*.jsonl")):
        lines = mailbox.read_text(encoding="utf-8", errors="replace").splitlines()
        letters += [(mailbox.name, n, parsed(line)) for n, line in enumerate(lines)]
    if not letters:
        return ""
    calls = [carried_in(str(m.get("content"))) if m else None for _, _, m in letters]
    rows = sorted(zip(sent_order(letters, calls), letters, calls))
    try:
        where = Path(session).relative_to(workdir)
    except ValueError:
        where = Path(session)
    return (f"<h2>Mailbox traffic of this session ({escape(str(where))})</h2><p>Session "
            f"{escape(Path(session).name)}, in time order: by the time each message was sent "
            "(UTC, to the second, as the mail records it), then by the first call whose request "
            "carried its text; mail no request carried goes just before its answer.</p>"
            "<div class='wide'><table class='mail'><tr><th>sent</th><th>first in</th>"
            "<th>from -&gt; to</th><th>kind</th><th>content</th></tr>"
            f"{''.join(mail_row(letter, call) for _, letter, call in rows)}</table></div>")


def parsed(line: str) -> dict | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def sent_order(letters: list, calls: list) -> list:
    """Where each letter sorts: by the time it was sent, then by the call that first carried
    it, or else just before the first call that carried an answer to it; malformed lines last."""
    answered: dict = {}  # id -> the first call that carried an answer to it
    for (_, _, m), call in zip(letters, calls):
        if m and call and m.get("reply_to"):
            asked = str(m["reply_to"])
            answered[asked] = min(call, answered.get(asked, call))
    keys = []
    for (mailbox, n, m), call in zip(letters, calls):
        if m is None:
            keys.append((1, "", 0, mailbox, n))
        else:
            when = call or answered.get(str(m.get("id")), float("inf")) - 0.5
            keys.append((0, str(m.get("at") or ""), when, mailbox, n))
    return keys


def mail_row(letter: tuple, call: int | None) -> str:
    mailbox, _, m = letter
    if m is None:
        return f"<tr><td></td><td></td><td colspan=3>{escape(mailbox)}: a malformed line</td></tr>"
    at = str(m.get("at") or "")
    protocol = f" [{escape(str(m['protocol']))}]" if m.get("protocol") else ""
    first = f'<a href="#call-{call}">call {call}</a>' if call else "-"
    return (f'<tr><td><time datetime="{escape(at)}">{escape(at[11:19] or at)}</time></td>'
            f'<td>{first}</td><td>{escape(str(m.get("from")))} -&gt; {escape(str(m.get("to")))}'
            f'</td><td>{escape(str(m.get("kind")))}{protocol}</td>'
            f'<td>{clipped(str(m.get("content")))}</td></tr>')


BOARD_COLUMNS = ("id", "subject", "status", "owner", "blockedBy", "result")


def board_table(tasks: Path | None) -> str:
    """The task board as the run left it (s07 on, the folder the step's board uses): who did
    what, and how it ended."""
    if tasks is None:
        return ""
    board = []
    files = sorted(Path(tasks).glob("task_*.json"), key=lambda p: (len(p.name), p.name))
    for task_file in files:
        try:
            task = json.loads(task_file.read_text(encoding="utf-8"))
            board.append("<tr>" + "".join(f"<td>{clipped(str(task.get(key) or ''))}</td>"
                                          for key in BOARD_COLUMNS) + "</tr>")
        except (ValueError, AttributeError):
            board.append(f"<tr><td colspan=6>{escape(task_file.name)}: not a task record</td></tr>")
    return ("<h2>The task board at the end</h2><div class='wide'><table class='mail board'><tr>"
            "<th>id</th><th>subject</th><th>status</th><th>owner</th><th>blocked by</th>"
            f"<th>result</th></tr>{''.join(board)}</table></div>" if board else "")
