"""--trace: every step writes one self-contained page of what the model saw, and a real browser
reads it. With a key, the page is recorded through the forwarding proxy (offline/proxy.py); in
these tests the "real" endpoint is a second local stand-in (or a small local server), so what
the page shows can be checked against what it answered.

The browser is Chromium, headless (`.ci/run` installs Debian's package). Without it these
checks skip, unless REQUIRE_BROWSER=1 says a browser must be there (CI sets it).
"""

import contextlib
import html.parser
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import AGENTS, STEPS
from offline import (
    AGENT_LABELS,
    CACHE_MIN_TOKENS,
    ForwardingProxy,
    Reply,
    ScriptedModel,
    agent_of,
    make_message,
    rebuild,
    reply,
    sse_events,
    tool_use,
    write_trace,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(
    not CHROMIUM and os.getenv("REQUIRE_BROWSER") != "1", reason="no Chromium here (CI installs it)"
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


VOID = {"meta", "input", "br", "hr", "img", "link"}  # elements without an end tag


class Page(html.parser.HTMLParser):
    """The DOM as the browser left it: the index rows, the panels (token figures, context bar,
    setup, links to the same agent's calls, edits), tool calls and pairs, the mail's times, and
    what the probe measured."""

    def __init__(self, text: str):
        super().__init__()
        self.panels, self.pairs, self.reply_calls, self.texts = [], [], [], []
        self.rows, self.mail_times, self.meta, self.probe = [], [], {}, None
        self.stack, self.probing = [], False
        self.feed(text)

    def inside(self, name: str) -> bool:
        return any(name in classes for classes in self.stack)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag not in VOID:
            self.stack.append(classes)
        panel = self.panels[-1] if self.panels else None
        if tag == "meta" and attrs.get("name"):
            self.meta[attrs["name"]] = attrs.get("content")
        elif tag == "pre" and attrs.get("id") == "probe":
            self.probe, self.probing = "", True
        elif tag == "tr" and "row" in classes:
            self.rows.append({"classes": classes, "href": None})
        elif tag == "a" and self.inside("row") and self.rows[-1]["href"] is None:
            self.rows[-1]["href"] = attrs.get("href")
        elif tag == "time":
            self.mail_times.append(attrs.get("datetime"))
        elif tag == "section" and "call" in classes:
            self.panels.append(
                {
                    "id": attrs.get("id"),
                    "agent": attrs.get("data-agent"),
                    "classes": classes,
                    "tokens": {},
                    "pairs": 0,
                    "links": {},
                    "setup": [],
                    "tools": [],
                    "bar": {},
                    "limit": None,
                    "edits": [],
                }
            )
        elif panel is not None:
            self.in_panel(panel, tag, attrs, classes)

    def in_panel(self, panel, tag, attrs, classes):
        if tag == "span" and self.stack[-2:-1] == [["tokens"]]:
            value = attrs["data-value"]  # empty when the endpoint reported no figure
            panel["tokens"][classes[0]] = int(value) if value else None
        elif tag == "a" and attrs.get("rel") in ("prev", "next"):
            panel["links"][attrs["rel"]] = attrs["href"]
        elif "setup" in classes:
            panel["setup"] += [c for c in classes if c != "setup"]
        elif "edit" in classes:
            panel["edits"].append({"before": "", "after": ""})
        elif self.inside("bar"):
            self.in_bar(panel, tag, attrs, classes)
        else:
            self.in_messages(panel, tag, attrs, classes)

    def in_bar(self, panel, tag, attrs, classes):
        if tag == "i":
            panel["bar"][classes[0]] = int(attrs["data-tokens"])
        elif "limit" in classes:
            panel["limit"] = int(attrs["data-tokens"])

    def in_messages(self, panel, tag, attrs, classes):
        if "pair" in classes:
            self.pairs.append({"id": attrs.get("data-id"), "call": None, "result": False})
            panel["pairs"] += 1
        elif "result" in classes and self.pairs:
            self.pairs[-1]["result"] = True
        elif tag == "b" and "tool" in classes:
            if self.inside("reply"):
                self.reply_calls.append((panel["agent"], attrs.get("data-id")))
            elif self.pairs:
                self.pairs[-1]["call"] = attrs.get("data-id")

    def handle_endtag(self, tag):
        if self.probing and tag == "pre":
            self.probe, self.probing = json.loads(self.probe), False
        if tag not in VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        self.texts.append(data)
        if self.probing:
            self.probe += data
        elif self.stack and self.stack[-1] == ["tool-name"]:
            self.panels[-1]["tools"].append(data)
        elif self.inside("edit") and (self.inside("before") or self.inside("after")):
            side = "before" if self.inside("before") else "after"
            self.panels[-1]["edits"][-1][side] += data


# Added to a copy of the page before a browser loads it (the page has no script of its own):
# it measures the context bars, clicks each radio button of the filter and notes what shows.
PROBE = """<script>
const box = element => element.getBoundingClientRect();
const panels = [...document.querySelectorAll("section.call")];
const rows = [...document.querySelectorAll("nav.index tr.row")];
const out = {dark: matchMedia("(prefers-color-scheme: dark)").matches,
             background: getComputedStyle(document.body).backgroundColor, bars: [], shown: {}};
for (const panel of panels) {
  const bar = panel.querySelector(".bar"), limit = bar.querySelector(".limit");
  out.bars.push({width: box(bar).width,
                 parts: [...bar.querySelectorAll("i")].map(i => [+i.dataset.tokens, box(i).width]),
                 limit: limit && [+limit.dataset.tokens, box(limit).left - box(bar).left]});
}
const visible = elements => elements.filter(e => getComputedStyle(e).display !== "none");
for (const radio of document.querySelectorAll("fieldset.filter input")) {
  radio.click();
  out.shown[radio.closest("label").textContent.trim()] = {
    panels: visible(panels).map(p => p.dataset.agent), rows: visible(rows).length};
}
const pre = document.createElement("pre");
pre.id = "probe";
pre.textContent = JSON.stringify(out);
document.body.append(pre);
</script>"""


def chromium(*args, timeout=60):
    return subprocess.run(
        [CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=timeout
    )


def in_browser(page, tmp_path, dark=False):
    """The DOM after Chromium loaded a copy of the page with PROBE (in dark mode if `dark`),
    and a screenshot of the page itself. (Headless Chromium can neither dump the DOM nor take a
    screenshot with scripts disabled; that the page needs none, the text of the page shows.)"""
    profile = tmp_path / "chromium-profile"
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(
        page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
    )
    mode = ["--force-dark-mode"] if dark else []
    dom = chromium(f"--user-data-dir={profile}", *mode, "--dump-dom", probed.as_uri())
    assert dom.returncode == 0 and "<section" in dom.stdout, dom.stderr[-2000:]
    if not dark:
        shot = tmp_path / f"{page.stem}.png"
        chromium(
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1100,2400",
            page.as_uri(),
        )
        assert shot.exists() and shot.stat().st_size > 10_000
    found = Page(dom.stdout)
    assert isinstance(found.probe, dict), "the probe ran"
    return found


def load_record(page):
    """run.json beside run.html, each request rebuilt from the messages, system prompts and tool
    lists it refers to."""
    record = json.loads(page.with_suffix(".json").read_text(encoding="utf-8"))
    requests = []
    for call in record["calls"]:
        request = dict(call["request"])
        request["messages"] = [record["messages"][n] for n in request["messages"]]
        for key in ("system", "tools"):
            if key in request:
                request[key] = record[key][request[key]]
        requests.append(request)
    return record, requests


@pytest.mark.parametrize("step", STEPS)
def test_every_demo_writes_a_self_contained_page(offline_demo, step):
    demo = offline_demo(step)
    assert f"trace written to {demo.trace}" in demo.done.stdout
    text = demo.trace.read_text(encoding="utf-8")
    calls = int(re.search(r"\[offline demo\] (\d+) model calls", demo.done.stdout).group(1))
    assert text.count('<section class="call') == calls  # one panel per model call
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), (
        "no network: nothing loaded from elsewhere"
    )
    assert "<script" not in text  # plain HTML and CSS: it opens from disk anywhere
    assert not re.search(r"<[^>]+\son[a-z]+=", text), "no event handler either: the filter is CSS"
    assert 'data-value="-' not in text, "no token figure is negative"
    mail = step in ("s09_team", "s11_autonomous")  # the steps with a session mailbox
    assert ("Mailbox traffic of this session (.mailbox/" in text) == mail
    assert "<meta name='viewport' content='width=device-width" in text
    assert "@media (prefers-color-scheme:dark)" in text
    assert f"under {CACHE_MIN_TOKENS:,} tokens is never cached" in text
    assert ("COMPACT_THRESHOLD = " in text) == (step == "s06_compact")


@pytest.mark.parametrize("step", STEPS)
def test_every_demo_writes_its_calls_to_run_json_each_message_once(offline_demo, step):
    demo = offline_demo(step)
    record, requests = load_record(demo.trace)
    text = demo.trace.read_text(encoding="utf-8")
    assert [c["agent"] for c in record["calls"]] == re.findall(r'data-agent="([^"]*)"', text)
    for key in ("messages", "system", "tools"):
        kept = [json.dumps(value, sort_keys=True) for value in record[key]]
        assert len(set(kept)) == len(kept), f"each of the {key} once"
    carried = [n for call in record["calls"] for n in call["request"]["messages"]]
    assert set(carried) == set(range(len(record["messages"]))), "each one carried, none missing"
    if len(requests) > 1:
        assert len(carried) > len(record["messages"]), "later calls refer to earlier messages"
    assert text.count(' id="m-') == len(record["messages"])  # the page's #n is number n - 1
    assert all(r["messages"] and r["messages"][0]["role"] == "user" for r in requests)
    assert all("content" in c["reply"] and isinstance(c["at"], float) for c in record["calls"])


def check_navigation(page, record):
    """What every page offers: an index row per call that links to it, each panel linked to
    the previous and next call of its agent, each agent's system prompt and tools where they are
    new, and a filter that shows one agent's calls."""
    ids = [f"#{p['id']}" for p in page.panels]
    assert [row["href"] for row in page.rows] == ids
    for row, panel in zip(page.rows, page.panels):
        assert [c for c in row["classes"] if c.startswith("agent-")] == [
            c for c in panel["classes"] if c.startswith("agent-")
        ]
    last, expected = {}, []
    for n, call in enumerate(record["calls"]):
        request, agent = call["request"], call["agent"]
        setup = (request.get("system"), request.get("tools"))
        before = last.get(agent)
        expected.append(
            [kind for kind, now, then in zip(("system", "tools"), setup, before or (None, None))
             if before is None or now != then]
        )
        last[agent] = setup
    assert [p["setup"] for p in page.panels] == expected
    for panel, call in zip(page.panels, record["calls"]):
        if "tools" in panel["setup"]:
            tools = record["tools"][call["request"]["tools"]] if "tools" in call["request"] else []
            assert panel["tools"] == [t["name"] for t in tools]
    for n, panel in enumerate(page.panels):
        same = [f"#{p['id']}" for p in page.panels if p["agent"] == panel["agent"]]
        at = same.index(ids[n])
        assert panel["links"].get("prev") == (same[at - 1] if at else None)
        assert panel["links"].get("next") == (same[at + 1] if at + 1 < len(same) else None)
    shown = page.probe["shown"]
    agents = [p["agent"] for p in page.panels]
    assert shown.pop("every agent") == {"panels": agents, "rows": len(agents)}
    assert len(shown) == len(set(agents))
    for label, seen in shown.items():
        agent = label.rsplit(" (", 1)[0]
        count = agents.count(agent)
        assert label == f"{agent} ({count})" and seen == {"panels": [agent] * count, "rows": count}


def check_bars(page, record, threshold):
    """Every context bar to one scale: its full width stands for the largest context of the run
    (or the threshold, if larger); the threshold is marked where the step has one."""
    contexts = [
        sum(c["reply"]["usage"].get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens",
                                                        "cache_creation_input_tokens"))
        for c in record["calls"]
    ]
    scale = max(contexts + [threshold or 0])
    widths = {round(bar["width"]) for bar in page.probe["bars"]}
    assert len(widths) == 1 and widths.pop() > 500
    for bar, context, panel in zip(page.probe["bars"], contexts, page.panels):
        assert sum(tokens for tokens, _ in bar["parts"]) == context
        assert panel["bar"] == {
            "read": panel["tokens"]["cache-read"],
            "write": panel["tokens"]["cache-write"],
            "input": panel["tokens"]["input"],
        }
        for tokens, px in bar["parts"]:
            assert abs(px - tokens / scale * bar["width"]) < 1.5, (tokens, px, bar["width"])
        if threshold:
            assert bar["limit"][0] == threshold == panel["limit"]
            assert abs(bar["limit"][1] - threshold / scale * bar["width"]) < 1.5
        else:
            assert bar["limit"] is None and panel["limit"] is None


@needs_browser
@pytest.mark.parametrize("step", ["s06_compact", "s09_team", "s11_autonomous"])
def test_a_browser_reads_the_demo_pages(offline_demo, tmp_path, step):
    demo = offline_demo(step)
    page = in_browser(demo.trace, tmp_path)
    record, _ = load_record(demo.trace)
    calls = int(re.search(r"\[offline demo\] (\d+) model calls", demo.done.stdout).group(1))
    assert len(page.panels) == calls
    assert page.meta["viewport"] == "width=device-width, initial-scale=1"
    assert all(p["call"] == p["id"] and p["result"] for p in page.pairs), (
        "every result sits beside its call"
    )
    unanswered = [
        (agent, i) for agent, i in page.reply_calls if i not in {p["id"] for p in page.pairs}
    ]
    if (
        step == "s11_autonomous"
    ):  # carol is killed with SIGKILL in the middle of a job: her last call never returns
        unanswered = [(agent, i) for agent, i in unanswered if agent != "carol"]
    assert not unanswered, f"tool calls never answered: {unanswered}"
    check_navigation(page, record)
    threshold = None
    if step == "s06_compact":  # the demo sets COMPACT_THRESHOLD before the script reads it
        demo_source = (AGENTS / "demos" / "s06_compact.py").read_text(encoding="utf-8")
        threshold = int(re.search(r"DEMO_THRESHOLD = ([\d_]+)", demo_source).group(1))
    check_bars(page, record, threshold)
    assert page.probe["dark"] is False and page.probe["background"] == "rgb(246, 246, 244)"
    words = " ".join(page.texts)
    if step == "s06_compact":
        assert (
            "old results cleared by micro compaction" in words
            and "summarised by a compaction" in words
        )
        edits = [e for p in page.panels for e in p["edits"]]
        cleared = [e for e in edits if "[cleared:" in e["after"] and "[cleared:" not in e["before"]]
        assert cleared and all(" INFO " in e["before"] or " ERROR " in e["before"] for e in cleared)
        assert any("[This conversation was compacted" in e["after"] for e in edits)
    if step in ("s09_team", "s11_autonomous"):
        assert "Mailbox traffic" in words and page.mail_times == sorted(page.mail_times)
        assert len(page.mail_times) >= 6 and all(page.mail_times)
    if step == "s09_team":
        assert {p["agent"] for p in page.panels} >= {"lead", "reviewer", "builder"}
        dark = in_browser(demo.trace, tmp_path, dark=True)
        assert dark.probe["dark"] is True
        red, green, blue = map(int, re.findall(r"\d+", dark.probe["background"]))
        assert red + green + blue < 150, dark.probe["background"]
    if step == "s11_autonomous":
        assert {"alice", "bob", "carol"} <= {
            p["agent"] for p in page.panels
        }  # the worker processes' calls too
        assert (
            "carol had it until its lease ran out" in words
        )  # the takeover, as the taker's model saw it
        assert "The task board at the end" in words and words.count("completed") >= 6


@needs_browser
def test_a_real_session_is_recorded_through_the_proxy(run_step, standin, workdir, tmp_path):
    """With a key, --trace records through a local proxy; the upstream here is a second stand-in."""
    standin.policy = ScriptedModel(
        [
            [
                "Let me look.",
                tool_use("bash", {"command": "echo traced"}),
                tool_use("read_file", {"path": "none.txt"}),
            ],
            reply(["Done: bash printed traced, and none.txt does not exist."]),
        ]
    )
    done = run_step("s01_agent_loop", "check it\n", args=["--trace", "real.html"])
    assert done.returncode == 0, done.stderr
    assert (
        "Done: bash printed traced" in done.stdout
        and "[trace] 2 model calls written to real.html" in done.stdout
    )
    assert (
        len(standin.requests) == 2 and standin.rejected == []
    )  # everything reached the real endpoint
    page = in_browser(workdir / "real.html", tmp_path)
    assert len(page.panels) == 2
    for panel, call in zip(
        page.panels, standin.calls
    ):  # the figures are what the endpoint answered
        usage = call["reply"]["usage"]
        assert panel["tokens"] == {
            "input": usage["input_tokens"],
            "cache-read": usage["cache_read_input_tokens"],
            "cache-write": usage["cache_creation_input_tokens"],
            "output": usage["output_tokens"],
        }
    assert len(page.pairs) == 2 and all(p["result"] for p in page.pairs)
    assert "traced" in " ".join(page.texts)
    record, requests = load_record(workdir / "real.html")  # run.json, beside real.html
    assert requests == [c["request"] for c in standin.calls]  # what the endpoint was sent
    assert [c["reply"]["content"] for c in record["calls"]] == [
        c["reply"]["content"] for c in standin.calls
    ]
    check_navigation(page, record)


# -- The recording proxy -------------------------------------------------------------------------
@contextlib.contextmanager
def serving(handler):
    """`handler` served on a free port of 127.0.0.1, in a thread: the server, with its `.url`."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def local_server(answer):
    """An HTTP server on 127.0.0.1 that keeps every request it gets (method, path, headers, body)
    and answers each with `answer(request)`: (status, headers, body)."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = {
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers),
                "body": body,
            }
            seen.append(request)
            status, headers, data = answer(request)
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST

        def log_message(self, *args):
            pass

    with serving(Handler) as server:
        server.seen = seen
        yield server


def send_raw(url: str, request_line: str, body: bytes = b"{}") -> bytes:
    """Send one request exactly as written (any request-target) and return the raw answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            f"{request_line}\r\nHost: {host}\r\nX-Api-Key: secret-key\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_the_proxy_hands_a_redirect_back_as_it_came_and_never_follows_it():
    moved = lambda request: (
        302,
        [
            ("Location", f"{elsewhere.url}/v1/messages"),  # noqa: E731
            ("X-Upstream", "moved"),
        ],
        b"moved elsewhere",
    )
    with (
        local_server(lambda request: (200, [], b'{"type": "message"}')) as elsewhere,
        local_server(moved) as upstream,
        ForwardingProxy(upstream.url + "/api") as proxy,
    ):
        host, port = proxy.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request(
            "POST",
            "/v1/messages",
            json.dumps({"model": "m"}),
            {"X-Api-Key": "secret-key", "Content-Type": "application/json"},
        )
        answer = conn.getresponse()
        assert answer.status == 302 and answer.getheader("X-Upstream") == "moved"
        assert answer.getheader("Location") == f"{elsewhere.url}/v1/messages"
        assert answer.read() == b"moved elsewhere"
        conn.close()
        assert elsewhere.seen == [], "nothing, and no key, went to the host the redirect named"
        [sent] = upstream.seen
        assert sent["path"] == "/api/v1/messages" and sent["headers"]["X-Api-Key"] == "secret-key"
        assert proxy.calls == []


@pytest.mark.parametrize(
    "target",
    [
        "{rest}/v1/messages",
        ".evil.example/v1/messages",
        "@127.0.0.1:{port}/v1/messages",
        "http://127.0.0.1:{port}/v1/messages",
    ],
)
def test_the_proxy_refuses_a_request_target_that_is_not_a_path(target):
    """The upstream URL is the configured base plus the request's path, nothing else. Here the
    base's port is the first digit of the other server's port: base + "{rest}/v1/messages" would
    be that server's address."""
    with local_server(lambda request: (200, [], b"{}")) as elsewhere:
        port = str(elsewhere.server_address[1])
        with ForwardingProxy(f"http://127.0.0.1:{port[0]}") as proxy:
            answer = send_raw(proxy.url, f"POST {target.format(rest=port[1:], port=port)} HTTP/1.1")
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert b"must be a path" in answer
        assert elsewhere.seen == []


# -- The page is written whatever the endpoint sent, or the run does not start -----------------
NULLS = dict.fromkeys(
    ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]
)


@pytest.mark.parametrize(
    "usage, text",
    [
        (None, "plain"),
        (NULLS, "plain"),
        ({"input_tokens": 12, "output_tokens": None}, "plain"),
        ("absent", "plain"),
        ({"input_tokens": 12, "output_tokens": 3}, "half \ud800 a pair"),
    ],
)
def test_the_page_is_written_when_usage_is_null_or_the_text_holds_a_lone_surrogate(
    tmp_path, usage, text
):
    ask = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    answer = {
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": usage,
    }
    if usage == "absent":
        del answer["usage"]
    page = tmp_path / "odd.html"
    write_trace(page, [{"request": ask, "reply": answer}], tmp_path, title="odd replies")
    written = page.read_text(encoding="utf-8")
    [panel] = Page(written).panels
    reported = usage if isinstance(usage, dict) else {}
    assert panel["tokens"]["input"] == reported.get("input_tokens")
    assert panel["tokens"]["output"] == reported.get("output_tokens")
    assert ("not reported" in written) == (None in panel["tokens"].values())
    assert text.replace("\ud800", "\\ud800") in written  # a lone surrogate, spelled out


def test_a_recorded_reply_with_null_usage_and_a_lone_surrogate_still_gives_a_page(
    run_step, standin, workdir
):
    standin.policy = ScriptedModel([Reply(["half \ud800 a pair"], wire="null_usage")])
    done = run_step("s01_agent_loop", "say it\n", args=["--trace=odd.html"])  # the = form too
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "[trace] 1 model call written to odd.html" in done.stdout
    text = (workdir / "odd.html").read_text(encoding="utf-8")
    assert "half \\ud800 a pair" in text and "not reported" in text


@pytest.mark.parametrize("mode", ["offline demo", "recorded"])
def test_a_trace_folder_that_does_not_exist_stops_the_run_before_it_starts(
    run_in_process, standin, workdir, mode
):
    env = {"ANTHROPIC_API_KEY": None} if mode == "offline demo" else {}
    done = run_in_process(
        "s01_agent_loop", "hello\n", args=["--trace", "missing/run.html"], env=env
    )
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and "missing does not exist" in done.stderr
    assert done.stdout == "" and standin.requests == []  # nothing ran


# -- The page and the recording grow with the conversation, not with calls x history ----------
def reading_session(calls: int, size: int):
    """The requests of an agent that reads one new `size`-character file per call, and replies."""
    history, requests = [{"role": "user", "content": "Read the logs, one at a time."}], []
    for n in range(calls):
        requests.append(
            {
                "model": "m",
                "max_tokens": 100,
                "tools": [{"name": "read_file", "input_schema": {"type": "object"}}],
                "messages": list(history),
            }
        )
        call = {
            "type": "tool_use",
            "id": f"toolu_{n}",
            "name": "read_file",
            "input": {"path": f"{n}.log"},
        }
        log = "".join(f"{n:02d}-{i:05d} INFO request served\n" for i in range(size // 26))
        history += [
            {"role": "assistant", "content": [call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": log}],
            },
        ]
    return requests


def test_the_page_draws_each_message_once(tmp_path):
    requests = reading_session(20, 20_000)
    said = {"content": [{"type": "text", "text": "reading"}], "usage": {"input_tokens": 1}}
    calls = [{"request": r, "reply": said} for r in requests]
    page = tmp_path / "long.html"
    write_trace(page, calls, tmp_path, title="20 calls")
    largest = len(json.dumps(requests[-1]))
    assert page.stat().st_size < 3 * largest + 20 * 4_000  # before: each call drew all its history
    text = page.read_text(encoding="utf-8")
    assert text.count("18-00000 INFO") == 1 and text.count("00-00000 INFO") == 1
    assert 'unchanged since <a href="#call-19">call 19</a>' in text  # call 20 links back


def test_a_recording_keeps_each_message_once(standin):
    """Through the proxy (and in the stand-in's own record), a call's request refers to the
    messages kept for the calls before it: memory grows with the conversation."""
    standin.policy = lambda request: ["ok"]
    requests = reading_session(6, 5_000)
    with ForwardingProxy(standin.url) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        for request in requests:
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request(
                "POST",
                "/v1/messages",
                json.dumps({**request, "stream": True}),
                {"X-Api-Key": "k", "Content-Type": "application/json"},
            )
            answer = conn.getresponse()
            assert answer.status == 200 and b"message_stop" in answer.read()
            conn.close()
        assert proxy.settle()
        for record in (proxy.calls, standin.calls):
            assert [c["request"]["messages"] for c in record] == [r["messages"] for r in requests]
            first, last = record[0]["request"]["messages"], record[-1]["request"]["messages"]
            assert last[0] is first[0]
            assert record[-1]["request"]["tools"] is record[0]["request"]["tools"]
            assert all(a is b for a, b in zip(record[-2]["request"]["messages"], last))


# -- Upstream failures: one clear line, no traceback ---------------------------------------
def test_an_upstream_that_refuses_connections_gives_one_clear_line(run_in_process, workdir):
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        upstream = f"http://127.0.0.1:{closed.getsockname()[1]}"
        done = run_in_process(
            "s01_agent_loop",
            "hello\n",
            args=["--trace", "down.html"],
            env={"ANTHROPIC_BASE_URL": upstream},
        )
    assert done.returncode == 0 and done.stderr == "", done.stderr  # before: 6 tracebacks
    said = [line for line in done.stdout.splitlines() if f"cannot reach {upstream}" in line]
    assert len(said) == 1 and "Connection refused" in said[0], done.stdout
    assert "[trace] 0 model calls written to down.html" in done.stdout
    assert (workdir / "down.html").exists()


def test_an_upstream_that_answers_html_gives_one_clear_line(run_in_process, workdir):
    portal = b"<html><body><h1>Sign in to the hotel wifi</h1></body></html>"
    with local_server(lambda request: (200, [("Content-Type", "text/html")], portal)) as upstream:
        done = run_in_process(
            "s01_agent_loop",
            "hello\n",
            args=["--trace", "portal.html"],
            env={"ANTHROPIC_BASE_URL": upstream.url},
        )
    assert done.returncode == 0 and done.stderr == "", done.stderr  # before: a traceback
    [said] = [line for line in done.stdout.splitlines() if "not recorded" in line]
    assert "not a Messages API reply (text/html)" in said and "Sign in to the hotel wifi" in said


def test_a_stream_that_breaks_off_upstream_breaks_off_for_the_step_without_a_traceback(
    run_in_process, standin, workdir
):
    standin.policy = ScriptedModel([["This reply is long enough to be cut off in the middle."]])
    standin.fail_next("stream_drop")
    done = run_in_process("s02_tool_use", "hello\n", args=["--trace", "drop.html"])  # s02 streams
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "[APIError: not a valid reply" in done.stdout  # it ended too soon, as without --trace
    [said] = [line for line in done.stdout.splitlines() if "not recorded" in line]
    assert "an answer that broke off" in said


@contextlib.contextmanager
def cut_short_server():
    """An upstream on 127.0.0.1 that announces the length of its answer (Content-Length), sends
    half of it and closes the connection: a real endpoint's answer cut off in the middle."""
    whole = json.dumps(make_message({"model": "m"}, ["cut off in the middle"], {})).encode()

    class CutShort(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole[: len(whole) // 2])
            self.close_connection = True  # the rest never comes

        def log_message(self, *args):
            pass

    with serving(CutShort) as server:
        yield server.url


def test_the_proxy_breaks_off_an_answer_of_announced_length_that_the_upstream_cut_short():
    """Before: the proxy took the early end for the end and kept the client's connection open;
    the client waited for the rest until its read timeout (the SDK's: 600 s)."""
    with cut_short_server() as upstream, ForwardingProxy(upstream) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)  # a hang guard only
        conn.request(
            "POST",
            "/v1/messages",
            json.dumps({"model": "m", "messages": []}),
            {"X-Api-Key": "k", "Content-Type": "application/json"},
        )
        answer = conn.getresponse()
        with pytest.raises(http.client.IncompleteRead):  # the end came too soon, and says so
            answer.read()
        conn.close()
        assert proxy.settle() and proxy.calls == []
        [said] = proxy.notes
        assert "an answer that broke off" in said


def test_a_step_whose_upstream_cuts_an_answer_short_breaks_off_at_once(run_step, workdir):
    """The step itself, through --trace: one clear line, no traceback, the REPL goes on, and it
    does not wait for the SDK's read timeout (the subprocess's 60 s timeout is the hang guard)."""
    with cut_short_server() as upstream:
        done = run_step(
            "s01_agent_loop",
            "hello\n",
            args=["--trace", "cut.html"],
            env={"ANTHROPIC_BASE_URL": upstream},
            timeout=60,
        )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "Traceback" not in done.stdout
    [said] = [line for line in done.stdout.splitlines() if "not recorded" in line]
    assert "an answer that broke off" in said
    assert "[trace] 0 model calls written to cut.html" in done.stdout


# -- Recording a stream: server-sent events as the spec reads them -----------------------------
STREAMED = make_message(
    {"model": "m"},
    [
        "Hello, this text comes in pieces of 24 characters.",
        tool_use("bash", {"command": "ls -la", "timeout": 5}),
    ],
    {"input_tokens": 30, "cache_read_input_tokens": 0},
)


def event_stream(end="\n", space=" ", comments=False, split=False, names=True, ids=False):
    """STREAMED as server-sent events, written in one of the ways the spec allows."""
    lines = [": a comment first"] if comments else []
    for number, (kind, data) in enumerate(sse_events(STREAMED)):
        text = json.dumps(data)
        lines += [f"id:{space}{number}"] * ids + [": keep-alive"] * comments
        lines += [f"event:{space}{kind}"] * names
        parts = ["{", text[1:-1], "}"] if split else [text]  # joined by "\n": the same JSON
        lines += [f"data:{space}{part}" for part in parts] + [""]
    return end.join(lines + [""]).encode()


@pytest.mark.parametrize(
    "written",
    [
        dict(end="\r\n"),
        dict(end="\r"),
        dict(space=""),
        dict(comments=True),
        dict(split=True),
        dict(names=False),
        dict(ids=True),
        dict(end="\r\n", space="", comments=True, split=True),
    ],
    ids=[
        "CRLF",
        "CR",
        "data: without its space",
        "comments",
        "data on several lines",
        "no event names",
        "id lines",
        "all of them",
    ],
)
def test_a_recorded_stream_is_read_as_the_spec_reads_it(written):
    message = rebuild(event_stream(**written))  # before: an empty reply, or an exception
    assert message["content"] == STREAMED["content"]
    assert message["stop_reason"] == "tool_use" and message["usage"] == STREAMED["usage"]


def test_an_event_is_dispatched_on_a_blank_line_only():
    """Two data lines without a blank line between them are one event; an event cut off
    before its blank line is dropped, as the SDK drops it."""
    stream = event_stream().decode()
    cut = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {}}
    stream += "event: message_delta\ndata: " + json.dumps(cut)  # no blank line after it
    assert rebuild(stream.encode())["stop_reason"] == "tool_use"
    one = (
        'event: message_start\ndata: {"type": "message_start", "message": {"id": "m1",\n'
        'data: "content": [], "role": "assistant"}}\n\n'
    )
    assert rebuild(one.encode()) == {"id": "m1", "content": [], "role": "assistant"}


def test_the_proxy_records_a_crlf_stream():
    body = event_stream(end="\r\n", space="")
    headers = [("Content-Type", "text/event-stream")]
    with (
        local_server(lambda request: (200, headers, body)) as upstream,
        ForwardingProxy(upstream.url) as proxy,
    ):
        host, port = proxy.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        ask = {"model": "m", "messages": [], "stream": True}
        conn.request(
            "POST",
            "/v1/messages",
            json.dumps(ask),
            {"X-Api-Key": "k", "Content-Type": "application/json"},
        )
        assert conn.getresponse().read() == body  # relayed as sent
        conn.close()
        assert proxy.settle()
        [call] = proxy.calls
    assert call["reply"]["content"] == STREAMED["content"]


# -- The page shows this run's session, not every session in the folder ----------------------
def leave_mail(folder, session: str, content: str) -> None:
    box = folder / ".mailbox" / session
    box.mkdir(parents=True)
    (box / "lead.jsonl").write_text(
        json.dumps(
            {"id": "m1", "from": "alice", "to": "lead", "kind": "response", "content": content}
        )
        + "\n"
    )


def letter(mail_id, to, content, second, reply_to=None) -> str:
    sent = {"id": mail_id, "from": "lead" if to == "alice" else "alice", "to": to}
    sent.update(kind="message", reply_to=reply_to, content=content)
    return json.dumps({**sent, "at": f"2025-01-02T10:00:{second:02d}+00:00"}) + "\n"


def test_the_mail_table_is_in_the_order_it_was_sent(tmp_path):
    """By the time sent; within a second (the mail's resolution: a demo sends it all in one),
    by the first call whose request carried it; mail no request carried just before its
    answer. By mailbox file, the order would be a different one."""
    box = tmp_path / ".mailbox" / "20250102-100000-aaaaaa"
    box.mkdir(parents=True)
    (box / "alice.jsonl").write_text(
        letter("a1", "alice", "the first job", 5) + letter("a2", "alice", "please stop", 5)
    )
    (box / "lead.jsonl").write_text(
        letter("l0", "lead", "hello early", 1)
        + letter("l1", "lead", "done with the first job", 5, reply_to="a1")
        + letter("l2", "lead", "stopping now", 5, reply_to="a2")
    )
    carried = ["the first job", "done with the first job", "stopping now"]
    calls = [
        {
            "request": {"model": "m", "messages": [{"role": "user", "content": said}]},
            "reply": {"content": [{"type": "text", "text": "ok"}], "usage": {}},
        }
        for said in carried
    ]
    page = tmp_path / "mail.html"
    write_trace(page, calls, tmp_path, title="mail", mailbox=box)
    text = page.read_text(encoding="utf-8")
    table = text[text.index("Mailbox traffic") :]
    sent = ["hello early", *carried[:2], "please stop", carried[2]]
    at = [table.index(f"<pre>{content}</pre>") for content in sent]
    assert at == sorted(at), [content for _, content in sorted(zip(at, sent))]
    assert table.count('<a href="#call-') == 3 and '<a href="#call-2">call 2</a>' in table
    assert Page(text).mail_times[0] == "2025-01-02T10:00:01+00:00"


def test_a_changed_message_shows_before_and_after(tmp_path):
    """Cleared in place (micro compaction): the message before and after; a history rebuilt
    (a compaction): the messages it had, and what took their place."""
    ask = {"role": "user", "content": "Read a.log."}
    use = {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.log"}}
    call = {"role": "assistant", "content": [use]}
    log = "2025-01-02 INFO served\n" * 40

    def result(text):
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                             "content": text}]}

    said = {"role": "assistant", "content": [{"type": "text", "text": "Read it."}]}
    more = {"role": "user", "content": "And now?"}
    summary = {"role": "user", "content": "[This conversation was compacted (automatic).] a.log"}
    histories = [
        [ask],
        [ask, call, result(log)],
        [ask, call, result("[cleared: read_file result, 920 chars]"), said, more],
        [summary],
    ]
    answer = {"content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 5}}
    calls = [{"request": {"model": "m", "messages": h}, "reply": answer} for h in histories]
    page = tmp_path / "edits.html"
    write_trace(page, calls, tmp_path, title="edits")
    panels = Page(page.read_text(encoding="utf-8")).panels
    assert [len(p["edits"]) for p in panels] == [0, 0, 1, 1]
    cleared, rebuilt = panels[2]["edits"][0], panels[3]["edits"][0]
    assert "INFO served" in cleared["before"] and "[cleared:" not in cleared["before"]
    assert "[cleared: read_file result" in cleared["after"] and "INFO" not in cleared["after"]
    assert "5 message(s)" in rebuilt["before"] and "#1" in rebuilt["before"]
    assert "[This conversation was compacted" in rebuilt["after"]


def test_the_s03_page_shows_the_reminder_its_previous_request_carried(offline_demo):
    """s03 puts its reminder into a copy of the last message it sends: the next request carries
    that message without it, and the page shows it before and after."""
    demo = offline_demo("s03_todo")
    text = demo.trace.read_text(encoding="utf-8")
    edits = [e for p in Page(text).panels for e in p["edits"]]
    gone = [e for e in edits if "<nag-reminder>" in e["before"]]
    assert gone and all("<nag-reminder>" not in e["after"] for e in gone)
    assert "the reminder the previous request carried is gone" in text


def test_the_page_shows_the_mail_of_its_own_session_only(tmp_path):
    leave_mail(tmp_path, "20250101-090000-aaaaaa", "mail of an earlier session")
    leave_mail(tmp_path, "20250102-090000-bbbbbb", "mail of this session")
    page = tmp_path / "mail.html"
    write_trace(
        page, [], tmp_path, title="mail", mailbox=tmp_path / ".mailbox" / "20250102-090000-bbbbbb"
    )
    text = page.read_text(encoding="utf-8")
    assert "mail of this session" in text and "mail of an earlier session" not in text
    assert "Mailbox traffic of this session (.mailbox/20250102-090000-bbbbbb)" in text


def test_a_recorded_s01_page_shows_no_mail_or_board_of_other_sessions(
    run_in_process, standin, workdir
):
    leave_mail(workdir, "20250101-090000-aaaaaa", "mail of an s09 session")
    (workdir / ".tasks").mkdir()
    (workdir / ".tasks" / "task_1.json").write_text(
        json.dumps(
            {"id": 1, "subject": "a task of an s07 session", "status": "pending", "blockedBy": []}
        )
    )
    standin.policy = ScriptedModel([["Hello."]])
    done = run_in_process("s01_agent_loop", "hello\n", args=["--trace", "s01.html"])
    assert done.returncode == 0, done.stderr
    text = (workdir / "s01.html").read_text(encoding="utf-8")
    assert "mail of an s09 session" not in text and "a task of an s07 session" not in text


def test_the_proxy_records_a_chunked_answer_when_it_ends_not_when_the_upstream_hangs_up():
    """An upstream that keeps the connection open after its last chunk (it should close it:
    the proxy asks for Connection: close) must not hold the recording back."""
    body, release = event_stream(), threading.Event()

    class Lingering(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, len(body), 100):
                piece = body[at : at + 100]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            release.wait(10)  # then it closes, as asked

        def log_message(self, *args):
            pass

    with serving(Lingering) as server:
        try:
            with ForwardingProxy(server.url) as proxy:
                host, port = proxy.url.removeprefix("http://").split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
                conn.request(
                    "POST",
                    "/v1/messages",
                    json.dumps({"model": "m", "messages": []}),
                    {"X-Api-Key": "k", "Content-Type": "application/json"},
                )
                assert conn.getresponse().read() == body
                assert proxy.settle(timeout=5), "the recording waited for the upstream to hang up"
                assert proxy.calls[0]["reply"]["content"] == STREAMED["content"]
                release.set()
                conn.close()
        finally:
            release.set()  # before the server stops, however the test ends


def test_the_proxy_keeps_the_calls_in_the_order_they_were_made(standin, monkeypatch):
    """A reply is recorded just after the client has it, so the next call can be recorded
    first; the page must still show the calls in the order the step made them."""
    import offline.proxy

    first_held, second_recorded, real = threading.Event(), threading.Event(), offline.proxy.rebuild

    def slow_first(body, kind=None):  # the first reply's recording waits for the second's
        if not first_held.is_set():
            first_held.set()
            second_recorded.wait(10)
        return real(body, kind)

    class Calls(list):
        def append(self, item):
            super().append(item)
            second_recorded.set()

        def insert(self, at, item):
            super().insert(at, item)
            second_recorded.set()

    monkeypatch.setattr(offline.proxy, "rebuild", slow_first)
    standin.policy = lambda request: ["ok"]
    with ForwardingProxy(standin.url) as proxy:
        proxy.calls = Calls()
        host, port = proxy.url.removeprefix("http://").split(":")
        for said in ("first", "second"):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            ask = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": said}]}
            conn.request(
                "POST",
                "/v1/messages",
                json.dumps(ask),
                {"X-Api-Key": "k", "Content-Type": "application/json"},
            )
            assert conn.getresponse().read()
            conn.close()
        assert proxy.settle()
    assert [c["request"]["messages"][0]["content"] for c in proxy.calls] == ["first", "second"]


# -- Who sent a request: one table of system-prompt markers -----------------------------------
@pytest.mark.parametrize("marker", sorted(AGENT_LABELS))
def test_each_panel_label_comes_from_a_marker_its_steps_really_send(marker):
    label, steps = AGENT_LABELS[marker]
    for step in steps:  # a step that rewords its prompt would have its panels labelled "lead"
        assert marker in (AGENTS / f"{step}.py").read_text(encoding="utf-8"), (step, marker)
    system = f"Some role.\n\n{marker}'alice' (reviewer) in /work. Be brief."
    expected = "alice" if label == "{name}" else label
    assert agent_of({"system": system, "messages": []}) == expected
    assert agent_of({"system": [{"type": "text", "text": system}], "messages": []}) == expected
    assert agent_of({"system": "You are a coding agent.", "messages": []}) == "lead"
