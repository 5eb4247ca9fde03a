"""The trace page: one self-contained HTML page of what the model saw, call by call."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from .protocol import _compact, blocks_of, system_text


PAGE_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{padding:14px 22px;background:#23303a;color:#fff}header h1{margin:0 0 4px;font-size:19px}
main{padding:12px 22px}
section.call{background:#fff;border:1px solid #ddd;border-radius:6px;margin:12px 0;
padding:10px 14px}
section.call>h2{font-size:15px;margin:0 0 6px}
.agent{background:#e8eef5;border-radius:4px;padding:1px 6px}
.tokens span{display:inline-block;margin-right:12px;font-variant-numeric:tabular-nums}
.changes{margin:6px 0;padding:6px 10px;background:#fffbea;border-left:3px solid #e0b000}
.changes li{margin:2px 0}.msg{border-left:3px solid #bbb;margin:6px 0;padding:2px 10px}
.msg.user{border-color:#4a90d9}.msg.assistant{border-color:#7b5ea7}
.role{font-weight:600;font-size:12px;color:#666}
.new{background:#eefaf0}.pair{display:grid;grid-template-columns:1fr 1fr;gap:8px;margin:4px 0}
.call-box,.result{background:#f3f1fb;border-radius:4px;padding:4px 8px}.result{background:#f0f6fc}
.result.error{background:#fdecec}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:12px/1.4 monospace}
.transient{outline:2px dashed #e0a000;background:#fff6df}.cleared{color:#8a6d00;background:#fbf5e0}
.summary{background:#f5efff}.news{background:#eaf7ff;outline:1px solid #9ccbe8}
.uses{color:#666;font-size:12px}
.reply{background:#f7f3ff}.earlier{color:#555;font-size:12px;margin:4px 0}.again{opacity:.85}
table.mail{border-collapse:collapse;width:100%;background:#fff}
table.mail td,table.mail th{border:1px solid #ddd;padding:3px 6px;text-align:left;
vertical-align:top;font-size:12px}
details>summary{cursor:pointer;color:#555}
"""


# Who sent a request, told by a marker in its system prompt: marker -> (the panel's label, the
# steps whose source holds the marker). A label "{name}" is the quoted name right after the
# marker ("You are the teammate 'alice' (reviewer) ..." -> alice). No marker: the lead.
AGENT_LABELS = {
    "You summarise a coding agent's session": ("summary", ("s06_compact",)),  # a compaction
    "You are the teammate ": ("{name}", ("s09_team", "s11_autonomous")),  # a teammate, a worker
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
            + '</div><ul class="changes">' + "".join(f"<li>{escape(c)}</li>" for c in changes)
            + "</ul>"
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
            drawn = render_block({**call, "type": "tool_use"}, escape)
            parts.append(f'<div class="pair" data-id="{escape(str(block.get("tool_use_id")))}">'
                         f'<div class="call-box">{drawn}</div>'
                         f'<div class="result{error}">{render_result(block, escape)}</div></div>')
        elif block.get("type") == "tool_use":  # drawn in full beside its result, in the next one
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
    return (f"<pre>{escape(text[:limit])}</pre><details><summary>{len(text) - limit:,} more "
            "characters</summary>"
            f"<pre>{escape(text[limit:])}</pre></details>")


def render_block(block: dict, escape) -> str:
    if block.get("type") == "tool_use":
        return (f'<b class="tool" data-id="{escape(str(block.get("id")))}">'
                f'{escape(str(block.get("name")))}</b>'
                + clipped(json.dumps(block.get("input"), ensure_ascii=False), escape))
    text = str(block.get("text", ""))
    kind = "transient" if "<nag-reminder>" in text else \
        "summary" if text.startswith("[This conversation was") else \
        "news" if text.startswith("New messages in your team mailbox") else "text"
    return f'<div class="{kind}">{clipped(text, escape)}</div>'


def render_result(result: dict, escape) -> str:
    content = result.get("content", "")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return "".join(render_block(b, escape) if not str(b.get("text", "")).startswith("[cleared:")
                   else f'<div class="cleared">{clipped(b["text"], escape)}</div>' for b in blocks)
