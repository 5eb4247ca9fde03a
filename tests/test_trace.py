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


class Page(html.parser.HTMLParser):
    """The DOM as the browser left it: panels, their token figures, tool calls and pairs."""

    def __init__(self, text: str):
        super().__init__()
        self.panels, self.pairs, self.reply_calls, self.texts = [], [], [], []
        self.stack, self.in_reply = [], 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        self.stack.append(classes)
        if tag == "section" and "call" in classes:
            self.panels.append({"agent": attrs.get("data-agent"), "tokens": {}, "pairs": 0})
        elif tag == "span" and self.panels and self.stack[-2:-1] == [["tokens"]]:
            value = attrs["data-value"]  # empty when the endpoint reported no figure
            self.panels[-1]["tokens"][classes[0]] = int(value) if value else None
        elif "pair" in classes:
            self.pairs.append({"id": attrs.get("data-id"), "call": None, "result": False})
            self.panels[-1]["pairs"] += 1
        elif "result" in classes and self.pairs:
            self.pairs[-1]["result"] = True
        elif tag == "b" and "tool" in classes:
            if any("reply" in c for c in self.stack):
                self.reply_calls.append((self.panels[-1]["agent"], attrs.get("data-id")))
            elif self.pairs:
                self.pairs[-1]["call"] = attrs.get("data-id")

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()

    def handle_data(self, data):
        self.texts.append(data)


def in_browser(page, tmp_path):
    """The DOM after Chromium loaded the page from disk, and a screenshot of it."""
    profile = tmp_path / "chromium-profile"
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dom.returncode == 0 and "<section" in dom.stdout, dom.stderr[-2000:]
    shot = tmp_path / f"{page.stem}.png"
    subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1100,2400",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=60,
    )
    assert shot.exists() and shot.stat().st_size > 10_000
    return Page(dom.stdout)


@pytest.mark.parametrize("step", STEPS)
def test_every_demo_writes_a_self_contained_page(offline_demo, step):
    demo = offline_demo(step)
    assert f"trace written to {demo.trace}" in demo.done.stdout
    text = demo.trace.read_text(encoding="utf-8")
    calls = int(re.search(r"\[offline demo\] (\d+) model calls", demo.done.stdout).group(1))
    assert text.count('<section class="call"') == calls  # one panel per model call
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), (
        "no network: nothing loaded from elsewhere"
    )
    assert "<script" not in text  # plain HTML and CSS: it opens from disk anywhere
    assert 'data-value="-' not in text, "no token figure is negative"
    mail = step in ("s09_team", "s11_autonomous")  # the steps with a session mailbox
    assert ("Mailbox traffic of this session (.mailbox/" in text) == mail


@needs_browser
@pytest.mark.parametrize("step", ["s06_compact", "s09_team", "s11_autonomous"])
def test_a_browser_reads_the_demo_pages(offline_demo, tmp_path, step):
    demo = offline_demo(step)
    page = in_browser(demo.trace, tmp_path)
    calls = int(re.search(r"\[offline demo\] (\d+) model calls", demo.done.stdout).group(1))
    assert len(page.panels) == calls
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
    words = " ".join(page.texts)
    if step == "s06_compact":
        assert (
            "old results cleared by micro compaction" in words
            and "summarised by a compaction" in words
        )
    if step == "s09_team":
        assert "Mailbox traffic" in words and {p["agent"] for p in page.panels} >= {
            "lead",
            "reviewer",
            "builder",
        }
    if step == "s11_autonomous":
        assert {"alice", "bob", "carol"} <= {
            p["agent"] for p in page.panels
        }  # the worker processes' calls too
        assert (
            "carol had it and stopped renewing its lease" in words
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


# -- The recording proxy -------------------------------------------------------------------------
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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.seen, server.url = seen, f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


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
    done = run_step("s01_agent_loop", "say it\n", args=["--trace", "odd.html"])
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "[trace] 1 model calls written to odd.html" in done.stdout
    text = (workdir / "odd.html").read_text(encoding="utf-8")
    assert "half \\ud800 a pair" in text and "not reported" in text


@pytest.mark.parametrize("mode", ["offline demo", "recorded"])
def test_a_trace_folder_that_does_not_exist_stops_the_run_before_it_starts(
    run_step, standin, workdir, mode
):
    env = {"ANTHROPIC_API_KEY": None} if mode == "offline demo" else {}
    done = run_step("s01_agent_loop", "hello\n", args=["--trace", "missing/run.html"], env=env)
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
def test_an_upstream_that_refuses_connections_gives_one_clear_line(run_step, workdir):
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        upstream = f"http://127.0.0.1:{closed.getsockname()[1]}"
        done = run_step(
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


def test_an_upstream_that_answers_html_gives_one_clear_line(run_step, workdir):
    portal = b"<html><body><h1>Sign in to the hotel wifi</h1></body></html>"
    with local_server(lambda request: (200, [("Content-Type", "text/html")], portal)) as upstream:
        done = run_step(
            "s01_agent_loop",
            "hello\n",
            args=["--trace", "portal.html"],
            env={"ANTHROPIC_BASE_URL": upstream.url},
        )
    assert done.returncode == 0 and done.stderr == "", done.stderr  # before: a traceback
    [said] = [line for line in done.stdout.splitlines() if "not recorded" in line]
    assert "not a Messages API reply (text/html)" in said and "Sign in to the hotel wifi" in said


def test_a_stream_that_breaks_off_upstream_breaks_off_for_the_step_without_a_traceback(
    run_step, standin, workdir
):
    standin.policy = ScriptedModel([["This reply is long enough to be cut off in the middle."]])
    standin.fail_next("stream_drop")
    done = run_step("s02_tool_use", "hello\n", args=["--trace", "drop.html"])  # s02 streams
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "[APIError: not a valid reply" in done.stdout  # it ended too soon, as without --trace
    [said] = [line for line in done.stdout.splitlines() if "not recorded" in line]
    assert "an answer that broke off" in said


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


def test_a_recorded_s01_page_shows_no_mail_or_board_of_other_sessions(run_step, standin, workdir):
    leave_mail(workdir, "20250101-090000-aaaaaa", "mail of an s09 session")
    (workdir / ".tasks").mkdir()
    (workdir / ".tasks" / "task_1.json").write_text(
        json.dumps(
            {"id": 1, "subject": "a task of an s07 session", "status": "pending", "blockedBy": []}
        )
    )
    standin.policy = ScriptedModel([["Hello."]])
    done = run_step("s01_agent_loop", "hello\n", args=["--trace", "s01.html"])
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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Lingering)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        with ForwardingProxy(f"http://127.0.0.1:{server.server_address[1]}") as proxy:
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
        release.set()
        server.shutdown()
        server.server_close()


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
