"""The trace page: one self-contained HTML page of what the model saw, call by call.

Top to bottom: the header (the totals; why a small request shows no cache), the index of calls
with the filter by agent, a panel per call (render_call), then the mail and the task board.
No script and nothing from the network: it opens from disk, with scripts disabled too.
page_parts.py draws the pieces around the messages and page_changes.py what changed in a
history; record.py writes run.json beside the page.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .cache import CACHE_MIN_TOKENS
from .page_changes import before_after, edit_line, link_runs, message_text
from .page_parts import (AGENT_LABELS, TOKEN_FIGURES, agent_of, board_table, call_index, clipped,
                         context_bar, context_size, filter_rules, legend, mail_table,
                         render_figure, system_block, tools_block, usage_figure)
from .protocol import blocks_of
from .record import Numbered

__all__ = ["AGENT_LABELS", "PAGE_STYLE", "Drawn", "agent_of", "render_block", "render_call",
           "render_message", "usage_figure", "write_trace"]

# Colours are variables, so that dark mode (prefers-color-scheme) only swaps them.
PAGE_STYLE = """
:root{color-scheme:light dark;--bg:#f6f6f4;--fg:#222;--panel:#fff;--line:#ddd;--muted:#666;
--head:#23303a;--link:#1a5fb4;--agent:#e8eef5;--note:#fffbea;--warn:#e0b000;--new:#eefaf0;
--call:#f3f1fb;--result:#f0f6fc;--error:#fdecec;--transient:#fff6df;--cleared:#fbf5e0;
--cleared-fg:#8a6d00;--summary:#f5efff;--news:#eaf7ff;--reply:#f7f3ff;--user:#4a90d9;
--assistant:#7b5ea7;--read:#4f9d62;--write:#e0a030;--input:#4a90d9;--del:#f7d4d4;--ins:#d3f0d9}
@media (prefers-color-scheme:dark){:root{--bg:#15181b;--fg:#e2e2e2;--panel:#1d2125;
--line:#3a4047;--muted:#a0a7ae;--head:#0d1216;--link:#8ab4f8;--agent:#2b3540;--note:#2d2918;
--new:#1b2a20;--call:#262236;--result:#1b2532;--error:#3b1f22;--transient:#3a3019;
--cleared:#302a18;--cleared-fg:#e0c46a;--summary:#2a2238;--news:#172b39;--reply:#231e31;
--del:#4a2326;--ins:#1f3d27}}
body{font:14px/1.45 system-ui,sans-serif;margin:0;background:var(--bg);color:var(--fg)}
a{color:var(--link)}header{padding:14px 22px;background:var(--head);color:#fff}
header h1{margin:0 0 4px;font-size:19px}header p{margin:4px 0}header a{color:#cfe3ff}
main,nav.index{padding:12px 22px}nav.index h2{margin:0 0 6px;font-size:16px}
fieldset.filter{border:1px solid var(--line);border-radius:6px;margin:0 0 8px}
fieldset.filter label{margin-right:14px;white-space:nowrap}
label:has(input:checked){font-weight:600}
section.call{background:var(--panel);border:1px solid var(--line);border-radius:6px;
margin:12px 0;padding:10px 14px}
section.call>h2{font-size:15px;margin:0 0 2px}section.call:target{outline:2px solid var(--link)}
.walk{font-size:12px;margin-bottom:4px}.walk a{margin-right:12px}
.agent{background:var(--agent);border-radius:4px;padding:1px 6px}
.tokens span{display:inline-block;margin-right:12px;font-variant-numeric:tabular-nums}
.context{margin:4px 0 6px;font-size:12px;color:var(--muted)}
.bar{position:relative;display:flex;height:10px;background:var(--line);border-radius:2px}
.bar i{flex:none;height:100%}.bar .read{background:var(--read)}
.bar .write{background:var(--write)}.bar .input{background:var(--input)}
.bar .limit{position:absolute;top:-3px;bottom:-3px;border-left:2px dashed var(--fg)}
.key{margin-left:10px}.key i{display:inline-block;width:10px;height:10px}.key .read{background:
var(--read)}.key .write{background:var(--write)}.key .input{background:var(--input)}
.setup{margin:6px 0;padding:4px 10px;border-left:3px solid var(--muted)}
ul.tools{margin:2px 0;padding-left:18px;font:12px/1.5 monospace}ul.tools pre{margin-left:14px}
.changes{margin:6px 0;padding:6px 10px;background:var(--note);border-left:3px solid var(--warn)}
.changes li{margin:2px 0 2px 14px}.msg{border-left:3px solid var(--line);margin:6px 0;
padding:2px 10px}
.msg.user{border-color:var(--user)}.msg.assistant{border-color:var(--assistant)}
.role{font-weight:600;font-size:12px;color:var(--muted)}
.new{background:var(--new)}
.pair,.sides{display:grid;grid-template-columns:1fr 1fr;gap:8px;margin:4px 0}
.call-box,.result{background:var(--call);border-radius:4px;padding:4px 8px}
.result{background:var(--result)}.result.error{background:var(--error)}
.edit{margin:6px 0;padding:4px 10px;border:1px dashed var(--warn);border-radius:4px}
.before,.after{background:var(--panel);padding:2px 6px}del{background:var(--del);
text-decoration:none}
ins{background:var(--ins);text-decoration:none}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font:12px/1.4 monospace}
.transient{outline:2px dashed var(--warn);background:var(--transient)}
.cleared{color:var(--cleared-fg);background:var(--cleared)}
.summary{background:var(--summary)}.news{background:var(--news);outline:1px solid var(--user)}
.uses{color:var(--muted);font-size:12px}.reply{background:var(--reply)}
.earlier{color:var(--muted);font-size:12px;margin:4px 0}.again{opacity:.85}
.wide{overflow-x:auto}table{border-collapse:collapse;width:100%;background:var(--panel)}
td,th{border:1px solid var(--line);padding:3px 6px;text-align:left;vertical-align:top;
font-size:12px;font-variant-numeric:tabular-nums}
details>summary{cursor:pointer;color:var(--muted)}
@media (max-width:640px){main,nav.index,header{padding:8px 10px}
.pair,.sides{grid-template-columns:1fr}}
"""


class Drawn:
    """The messages a page has drawn: each distinct message once, numbered (message #n is number
    n - 1 in run.json), in the call where it first reached the model; later requests that carry
    it again link there."""

    def __init__(self):
        self.messages = Numbered()
        self.drawn_in: dict[int, int] = {}  # a message's number -> the call that drew it
        self.texts: list | None = None  # each message's text, for carried_in

    def number(self, message: dict) -> int:
        return self.messages.number(message) + 1

    def draw(self, messages: list, at: int, number: int, call: int, escape) -> str:
        """messages[at], drawn in full if the page has not drawn it yet, else a link to it."""
        role = escape(str(messages[at].get("role")))
        if number in self.drawn_in:
            drawn_in = self.drawn_in[number]
            return (f'<div class="msg {role} new again"><div class="role">{role} '
                    f'<a href="#m-{number}">#{number}</a></div><div class="uses">the same message '
                    f'as in <a href="#call-{drawn_in}">call {drawn_in}</a></div></div>')
        self.drawn_in[number] = call
        return render_message(messages[at], messages[at - 1] if at else None, True, escape, number)

    def carried_in(self, text: str) -> int | None:
        """The first call whose request carried `text` (in a message it drew): where a piece of
        mail first reached a model."""
        if self.texts is None:  # made once, when the mail table first asks
            self.texts = [message_text(m) for m in self.messages.values]
        found = next((n for n, said in enumerate(self.texts, 1) if text in said), None)
        return self.drawn_in.get(found)

    def earlier(self, numbers: list, since: int) -> str:
        """A line for the messages a request repeats from the agent's previous one: their links."""
        return (f'<div class="earlier">{len(numbers)} earlier message(s), unchanged since '
                f'<a href="#call-{since}">call {since}</a>: {link_runs(numbers)}</div>')


@dataclass
class Seen:
    """What a call held, kept as its agent's previous call for the next one: its number, its
    messages and their numbers on the page, and the numbers of its system prompt and tool list
    (a different number next time: they changed)."""

    call: int
    messages: list
    numbers: list
    system: int
    tools: int


@dataclass
class Trace:
    """What the panels share: each call's agent, the next call of the same agent, the scale of
    every context bar, and what each agent's previous call held."""

    names: list  # each call's agent, in order
    agents: dict  # agent -> its number in the filter: 1, 2, ...
    following: list  # for each call, the number of the same agent's next call, or None
    scale: int  # the tokens across a context bar's full width
    threshold: int | None  # s06's COMPACT_THRESHOLD, marked on each bar; None if the step has none
    drawn: Drawn = field(default_factory=Drawn)
    systems: Numbered = field(default_factory=Numbered)
    tools: Numbered = field(default_factory=Numbered)
    last: dict = field(default_factory=dict)  # agent -> Seen

    @classmethod
    def of(cls, calls: list, threshold: int | None) -> "Trace":
        names = [agent_of(call["request"]) for call in calls]
        following: list = [None] * len(names)
        upcoming: dict = {}  # agent -> its next call, walking back from the end
        for at in range(len(names) - 1, -1, -1):
            following[at] = upcoming.get(names[at])
            upcoming[names[at]] = at + 1
        scale = max([context_size(call["reply"]) for call in calls] + [threshold or 0, 1])
        agents = {name: n for n, name in enumerate(dict.fromkeys(names), 1)}
        return cls(names, agents, following, scale, threshold)


def write_trace(path: Path, calls: list, workdir: Path, title: str = "",
                mailbox: Path | None = None, board: Path | None = None,
                threshold: int | None = None) -> None:
    """One self-contained page: the index of calls, a panel per model call, then the mail of
    this run's session (`mailbox`: its folder) and the task board (`board`: its folder), if the
    step has them; `threshold`: the context size at which the step compacts (s06), if it does.
    Each message is drawn once (see Drawn), so the page grows with the conversation, not with
    calls x history; it is written panel by panel."""
    from html import escape
    trace = Trace.of(calls, threshold)
    # a lone surrogate in a text is written as \\ud800
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as page:
        page.write(
            "<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' "
            f"content='width=device-width, initial-scale=1'><title>trace: {escape(title)}</title>"
            f"<style>{PAGE_STYLE}{filter_rules(trace.agents)}</style></head><body>"
            + page_header(title, calls, trace, escape)
            + call_index(calls, trace.names, trace.agents) + "<main>")
        for number, call in enumerate(calls, 1):
            page.write(render_call(number, call, trace, escape))
        page.write(mail_table(mailbox, workdir, trace.drawn.carried_in) + board_table(board)
                   + "</main></body></html>")


def page_header(title: str, calls: list, trace: Trace, escape) -> str:
    totals = {k: sum(usage_figure(c["reply"], k) or 0 for c in calls)
              for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")}
    limit = "" if not trace.threshold else (
        f"; the dashed line is the step's automatic compaction threshold, COMPACT_THRESHOLD = "
        f"{trace.threshold:,} tokens")
    return (f"<header><h1>What the model saw: {escape(title)}</h1><p>{len(calls)} model calls. "
            f"Tokens: not cached {totals['input_tokens']:,}; read from the cache "
            f"{totals['cache_read_input_tokens']:,}; written to it "
            f"{totals['cache_creation_input_tokens']:,}.</p><p>Each panel is one request: the "
            "agent's system prompt and tools where they are new, what changed since that agent's "
            "previous request, the new messages, and the reply. Each message is drawn once, "
            "numbered, where it first reached the model; a later request that carries it again "
            "links there. --trace writes the same calls, each message once, to a .json file "
            "beside this page.</p><p>Why a small request shows no cache: a prompt prefix under "
            f"{CACHE_MIN_TOKENS:,} tokens is never cached (offline.CACHE_MIN_TOKENS; most models "
            "have the same minimum), so all of it counts as not cached.</p><p>Each context bar "
            "is the request's context, drawn to one scale (its full width is "
            f"{trace.scale:,} tokens): {legend()}{limit}.</p></header>")


def render_call(number: int, call: dict, trace: Trace, escape) -> str:
    """One panel: the agent's setup where it is new, what changed since its previous call (and
    each changed message before and after), the new messages, the reply."""
    request, reply = call["request"], call["reply"]
    agent, messages = trace.names[number - 1], request.get("messages") or []
    seen = Seen(number, messages, [trace.drawn.number(m) for m in messages],
                trace.systems.number(request.get("system")),
                trace.tools.number(request.get("tools")))
    before = trace.last.get(agent)
    trace.last[agent] = seen
    shared = common_prefix(before.numbers, seen.numbers) if before else 0
    edited = before is not None and shared < len(before.numbers)
    return (panel_head(number, agent, reply, trace, before, escape)
            + context_bar(reply, trace.scale, trace.threshold)
            + agent_setup(agent, request, before, seen, trace)
            + changes_list(agent, before, seen, shared, escape)
            + (before_after((before.messages, before.numbers), (messages, seen.numbers), shared)
               if edited else "")
            + (trace.drawn.earlier(seen.numbers[:shared], before.call) if shared else "")
            + "".join(trace.drawn.draw(messages, i, seen.numbers[i], number, escape)
                      for i in range(shared, len(messages)))
            + '<div class="msg assistant reply"><div class="role">reply</div>'
            + "".join(render_block(b, escape) for b in reply.get("content") or [])
            + "</div></section>")


def common_prefix(before: list, now: list) -> int:
    return next((i for i, (a, b) in enumerate(zip(before, now)) if a != b), min(len(before),
                                                                                 len(now)))


def panel_head(number: int, agent: str, reply: dict, trace: Trace, before: Seen | None,
               escape) -> str:
    """The panel's title, the links to the same agent's previous and next call, its tokens."""
    who = escape(agent)
    walk = ['<a href="#calls">index</a>']
    if before:
        walk.append(f'<a rel="prev" href="#call-{before.call}">&larr; {who}\'s call '
                    f"{before.call}</a>")
    upcoming = trace.following[number - 1]
    if upcoming:
        walk.append(f'<a rel="next" href="#call-{upcoming}">{who}\'s call {upcoming} &rarr;</a>')
    started = trace.names[number] if number < len(trace.names) else agent  # s04: subagent
    if started != agent and any(b.get("name") == started for b in reply.get("content") or []):
        walk.append(f'<a href="#call-{number + 1}">{escape(started)}\'s call {number + 1}, '
                    "started by this reply &rarr;</a>")
    tokens = {label: usage_figure(reply, key) for label, key in TOKEN_FIGURES.items()}
    return (f'<section class="call agent-{trace.agents[agent]}" id="call-{number}" '
            f'data-agent="{who}"><h2>Call {number} <span class="agent">{who}</span> stop: '
            f'{escape(str(reply.get("stop_reason")))}</h2><div class="walk">{"".join(walk)}</div>'
            '<div class="tokens">' + "".join(render_figure(k, v) for k, v in tokens.items())
            + "</div>")


def agent_setup(agent: str, request: dict, before: Seen | None, seen: Seen, trace: Trace) -> str:
    """The agent's system prompt and tool list, on its first call and wherever they change."""
    since = before.call if before else None
    setup = ""
    if before is None or before.system != seen.system:
        setup += system_block(agent, request, since)
    if before is None or before.tools != seen.tools:
        setup += tools_block(request, since, trace.tools.values[before.tools] if before else None)
    return setup


def changes_list(agent: str, before: Seen | None, seen: Seen, shared: int, escape) -> str:
    """What changed since the agent's previous call, in a few words."""
    messages = seen.messages
    if before is None:
        changes = [f"{agent}'s first call: {len(messages)} message(s)"]
    else:
        fresh = "new" if shared == len(before.numbers) else "new or changed"  # all after an edit
        changes = [f"{len(messages) - shared} {fresh} message(s) since {agent}'s previous call"]
    if before and shared < len(before.numbers):
        how = how_changed(before.messages[shared:], messages[shared:])
        changes.append(edit_line((before.messages, before.numbers), (messages, seen.numbers),
                                 shared, how))
    last = json.dumps(messages[-1]) if messages else ""
    if "<nag-reminder>" in last:
        changes.append("a transient reminder rides on this request only (it is not in the history)")
    if "New messages in your team mailbox" in last:
        changes.append("team mail joins this request")
    return '<ul class="changes">' + "".join(f"<li>{escape(c)}</li>" for c in changes) + "</ul>"


def how_changed(old: list, new: list) -> str:
    """Why earlier messages changed, told by what the steps write into them."""
    before, after = json.dumps(old), json.dumps(new)
    if "[This conversation was compacted" in after:
        return "summarised by a compaction"
    if after.count("[cleared:") > before.count("[cleared:"):
        return "old results cleared by micro compaction"
    if "<nag-reminder>" in before:
        return "the reminder the previous request carried is gone (it was never in the history)"
    return "rewritten"


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


def render_block(block: dict, escape) -> str:
    if block.get("type") == "tool_use":
        return (f'<b class="tool" data-id="{escape(str(block.get("id")))}">'
                f'{escape(str(block.get("name")))}</b>'
                + clipped(json.dumps(block.get("input"), ensure_ascii=False)))
    text = str(block.get("text", ""))
    kind = "transient" if "<nag-reminder>" in text else \
        "summary" if text.startswith("[This conversation was") else \
        "news" if text.startswith("New messages in your team mailbox") else "text"
    return f'<div class="{kind}">{clipped(text)}</div>'


def render_result(result: dict, escape) -> str:
    content = result.get("content", "")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return "".join(render_block(b, escape) if not str(b.get("text", "")).startswith("[cleared:")
                   else f'<div class="cleared">{clipped(b["text"])}</div>' for b in blocks)
