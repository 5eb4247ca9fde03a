"""s09: a team that works from the board - names, the roster, JSONL mailboxes across threads and
processes, request/response protocols, teammates, the lead's inbox, and a learner's run."""

import json
import multiprocessing
import os
import threading
import time

import pytest

from conftest import AGENTS
from offline import QUIRKS, ScriptedModel, last_user_text, latest_results, system_text, tool_use

STEP = "s09_team"


@pytest.fixture
def team(load_step):
    module = load_step(STEP)
    module.TEAM_TIMEOUT = 10  # a hung teammate fails the test instead of hanging it
    yield module
    for mate in module.RUNNING.values():
        mate.stopping = True  # leftover teammates end after their current wait


def echo_policy(request):
    """Answers every request with the system prompt's first word and the request's last line."""
    return [f"{system_text(request).split()[0]} did: {last_user_text(request).splitlines()[-1]}"]


# -- Names become file names -----------------------------------------------------------
@pytest.mark.parametrize("bad", ["", "../x", "a/b", "a b", " x", "x\n", "é", "x" * 65, None, 7])
def test_bad_names_are_refused_everywhere(team, bad, workdir):
    with pytest.raises(ValueError, match="invalid"):
        team.check_name(bad)
    with pytest.raises(ValueError, match="invalid teammate name"):
        team.ROSTER.add(bad, "role", "prompt")
    with pytest.raises(ValueError):
        team.MAILBOX.send(bad, "lead", "hi")
    assert not (workdir / ".team.json").exists() and not (workdir / ".mailbox").exists()


# -- The roster: .team.json ---------------------------------------------------------------
def test_roster_adds_and_loads_and_reserves_the_lead(team, workdir):
    team.ROSTER.add("reviewer", " reviews plans ", "You review.")
    team.ROSTER.add("builder", "builds", "You build.")
    assert json.loads((workdir / ".team.json").read_text())["teammates"]["reviewer"] == {
        "name": "reviewer",
        "role": "reviews plans",
        "prompt": "You review.",
    }
    assert sorted(team.ROSTER.load()) == ["builder", "reviewer"]
    with pytest.raises(ValueError, match="lead"):
        team.ROSTER.add("lead", "r", "p")
    for role, prompt in (("", "p"), ("r", "   "), (None, "p")):
        with pytest.raises(ValueError, match="non-empty"):
            team.ROSTER.add("x", role, prompt)


@pytest.mark.parametrize(
    "content,reason",
    [
        ("{not json", "expected {'teammates'"),
        (
            '{"teammates": {"alice": {"name": "alice"}}}',
            "entries ['alice'] are not",
        ),  # today: a bare KeyError
        ('{"teammates": {"alice": ["not", "a", "dict"]}}', "expected {'teammates'"),
        ('["a", "list"]', "expected {'teammates'"),
    ],
)
def test_a_roster_of_the_wrong_shape_is_named_and_kept(
    team, workdir, standin, type_lines, capsys, content, reason
):
    (workdir / ".team.json").write_text(content)
    with pytest.raises(team.CorruptFile) as caught:
        team.ROSTER.add("x", "r", "p")
    assert reason in str(caught.value) and str(workdir / ".team.json") in str(caught.value)
    assert (workdir / ".team.json").read_text() == content  # never overwritten
    type_lines("/team")
    team.repl()
    assert f"[team] {workdir / '.team.json'}: " in capsys.readouterr().out


# -- The mailbox -------------------------------------------------------------------------
def test_send_writes_one_whole_line_and_read_returns_the_next_offset(team):
    first = team.MAILBOX.send("b", "a", "hello", "request")
    second = team.MAILBOX.send("b", "a", "again")
    messages, offset = team.MAILBOX.read("b")
    assert [m["id"] for m in messages] == [first, second] and first != second
    assert messages[0]["kind"] == "request" and messages[0]["at"].endswith("+00:00")
    assert offset == team.MAILBOX.path("b").stat().st_size  # a byte offset, not a message id
    assert team.MAILBOX.read("b", offset) == ([], offset)
    third = team.MAILBOX.send("b", "a", "third")
    assert [m["id"] for m in team.MAILBOX.read("b", offset)[0]] == [
        third
    ]  # exclusive: only what is new
    assert team.MAILBOX.read("nobody") == ([], 0)


@pytest.mark.parametrize(
    "kind,protocol,content",
    [
        ("shout", None, "x"),
        ("request", "party", "x"),
        ("request", None, ""),
        ("request", None, None),
    ],
)
def test_bad_messages_are_refused(team, kind, protocol, content):
    with pytest.raises(ValueError):
        team.MAILBOX.send("b", "a", content, kind, protocol)


@pytest.mark.parametrize("sender", ["../evil", "", None, 7, "a b"])
def test_a_sender_is_checked_like_every_name_before_anything_is_written(team, sender):
    """The answer goes back to the sender: "../evil" would be a path, None a line nobody reads."""
    with pytest.raises(ValueError, match=r"invalid sender .*: use 1-64 letters"):
        team.MAILBOX.send("b", sender, "hi")
    assert not team.MAILBOX.path("b").exists()


@pytest.mark.parametrize(
    "kind,protocol,named", [("shout", None, "kind 'shout'"), ("request", "party", "'party'")]
)
def test_a_refused_message_names_what_it_got(team, kind, protocol, named):
    with pytest.raises(ValueError) as refused:
        team.MAILBOX.send("b", "a", "x", kind, protocol)
    assert named in str(refused.value) and "('request', 'response', 'message')" in str(
        refused.value
    )


def test_empty_lines_are_gaps_not_malformed_messages(team, capsys):
    team.MAILBOX.send("b", "a", "one")
    with open(team.MAILBOX.path("b"), "ab") as handle:
        handle.write(b"\n  \n")  # e.g. an editor's blank lines
    team.MAILBOX.send("b", "a", "two")
    assert [m["content"] for m in team.MAILBOX.read("b")[0]] == ["one", "two"]
    assert "[mailbox]" not in capsys.readouterr().out


def test_a_line_still_being_written_is_left_for_later(team):
    team.MAILBOX.send("b", "a", "whole")
    line = (
        json.dumps({"id": "late", "from": "a", "to": "b", "kind": "message", "content": "late"})
        + "\n"
    )
    path = team.MAILBOX.path("b")
    with open(path, "ab") as handle:
        handle.write(line[:20].encode())  # a writer caught halfway
    messages, offset = team.MAILBOX.read("b")
    assert [m["content"] for m in messages] == ["whole"]
    with open(path, "ab") as handle:
        handle.write(line[20:].encode())
    assert [m["content"] for m in team.MAILBOX.read("b", offset)[0]] == ["late"]


def test_a_killed_writers_fragment_swallows_no_later_message(team, capsys):
    """A writer killed mid-append leaves a line without its newline. Today the next send
    appended right after it, and the merged line - a later, whole message - was lost."""
    team.MAILBOX.send("b", "a", "before")
    with open(team.MAILBOX.path("b"), "ab") as handle:
        handle.write(b'{"id": "torn", "from": "worker", "content": "' + b"x" * 5000)  # then kill -9
    team.MAILBOX.send("b", "other", "after the crash")
    messages, _ = team.MAILBOX.read("b")
    assert [m["content"] for m in messages] == ["before", "after the crash"]
    out = capsys.readouterr().out
    assert (
        out.count("[mailbox] skipped a malformed line in") == 1
        and str(team.MAILBOX.path("b")) in out
    )


def test_a_cursor_past_the_end_of_a_replaced_file_reads_it_from_the_start(team, capsys):
    """Today the offset pointed past the end of the new file, and every later message was missed."""
    for n in range(3):
        team.MAILBOX.send("b", "a", f"old {n}")
    _, offset = team.MAILBOX.read("b")
    team.MAILBOX.path("b").unlink()  # replaced: e.g. cleaned up by hand, or by the model's bash
    team.MAILBOX.send("b", "a", "after the cut")
    messages, after = team.MAILBOX.read("b", offset)
    assert [m["content"] for m in messages] == ["after the cut"]
    assert after == team.MAILBOX.path("b").stat().st_size
    out = capsys.readouterr().out.splitlines()
    path = team.MAILBOX.path("b")
    assert out == [f"[mailbox] {path} is shorter than the {offset} bytes read: read from the start"]
    assert team.MAILBOX.read("b", after) == ([], after)  # said once: the new offset is good


def test_a_reply_into_a_cut_mailbox_reaches_the_waiter(team):
    """Today wait() slept until the mailbox grew past the old offset, so the answer timed out."""
    asked = team.MAILBOX.send("x", "lead", "question", "request")
    for n in range(3):
        team.MAILBOX.send("lead", "x", f"old news {n}")
    start = team.MAILBOX.size("lead")
    found = []
    waiter = threading.Thread(
        target=lambda: found.append(team.MAILBOX.await_reply("lead", asked, start, 10)[0])
    )
    waiter.start()
    with open(team.MAILBOX.path("lead"), "r+b") as handle:
        handle.truncate(0)  # cut while the lead waits
    team.MAILBOX.send("lead", "x", "the answer", "response", reply_to=asked)
    waiter.join(timeout=15)
    assert found and found[0] is not None and found[0]["content"] == "the answer"


@pytest.mark.skipif(os.name != "posix", reason="RLIMIT_FSIZE is POSIX")
def test_a_send_the_disk_cannot_take_raises_and_leaves_the_mailbox_as_it_was(tmp_path):
    """Today one unbuffered write took what fit, send() returned an id for a message nobody can
    read, and a partial line stayed behind. The child ignores SIGXFSZ, so a write raises EFBIG."""
    script = f"""
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, {str(AGENTS)!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
import s09_team as team
box = team.Mailbox(Path({str(tmp_path)!r}) / "session")
box.send("b", "a", "first")
before = box.path("b").read_bytes()
resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 1000, len(before) + 1000))
try:
    print("sent", box.send("b", "a", "x" * 5000))
except OSError as error:
    print("raised", error.errno)
print("unchanged", box.path("b").read_bytes() == before)
box.send("b", "a", "small")
print("read", [m["content"] for m in box.read("b")[0]])
"""
    import errno
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"raised {errno.EFBIG}",
        "unchanged True",
        "read ['first', 'small']",
    ]
    assert "[mailbox] skipped" not in done.stdout + done.stderr  # no partial line to trip on


@pytest.mark.parametrize(
    "line",
    [
        '{"id": [1], "from": "a", "kind": "request", "content": "x"}',
        '{"id": "1", "from": "a", "kind": "request", "content": {}}',
        '["not", "an", "object"]',
        "7",
    ],
)
def test_a_line_with_wrong_field_types_is_skipped_not_fatal(
    team, standin, type_lines, capsys, line
):
    """Today: a TypeError traceback, and the REPL exits 1."""
    team.MAILBOX.send("lead", "a", "first")
    with open(team.MAILBOX.path("lead"), "a") as handle:
        handle.write(line + "\n")  # e.g. appended by the model's own bash
    team.MAILBOX.send("lead", "a", "second")
    standin.policy = ScriptedModel([["ok"]])
    type_lines("/inbox", "hello")
    team.repl()
    out = capsys.readouterr().out
    assert "first" in out and "second" in out and "[mailbox] skipped a malformed line" in out
    assert "ok" in out and standin.rejected == []


def write_messages(root, name, count, results):
    import importlib.util

    spec = importlib.util.spec_from_file_location("s09_writer", AGENTS / f"{STEP}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mailbox = module.Mailbox(root)
    for i in range(count):
        mailbox.send("inbox", name, f"{i}|{time.time()}")
    results.put(name)


def test_eight_processes_share_one_mailbox(team):
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    results = context.Queue()
    procs = [
        context.Process(target=write_messages, args=(team.MAILBOX.root, f"w{n}", 500, results))
        for n in range(8)
    ]
    for proc in procs:
        proc.start()
    assert sorted(results.get(timeout=60) for _ in procs) == [f"w{n}" for n in range(8)]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    received, _ = team.MAILBOX.read("inbox")
    assert len(received) == 4000 and len({m["id"] for m in received}) == 4000
    for n in range(8):
        sequence = [int(m["content"].split("|")[0]) for m in received if m["from"] == f"w{n}"]
        assert sequence == list(range(500)), f"w{n}'s messages are out of order or missing"


def test_wait_wakes_on_another_process(team):
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    results = context.Queue()
    waiting = threading.Event()

    def waiter(outcome):
        waiting.set()
        outcome.append((team.MAILBOX.wait("inbox", 0, timeout=60), time.time()))

    outcome = []
    thread = threading.Thread(target=waiter, args=(outcome,))
    thread.start()
    assert waiting.wait(5)
    proc = context.Process(target=write_messages, args=(team.MAILBOX.root, "far", 1, results))
    proc.start()
    thread.join(timeout=90)
    proc.join(timeout=30)
    [(woke, woke_at)] = outcome
    sent_at = float(team.MAILBOX.read("inbox")[0][0]["content"].split("|")[1])
    assert (
        woke and woke_at - sent_at < 5
    )  # polled every 50 ms; a wait that slept to its deadline: 60 s


def test_wait_times_out_without_spinning_and_wakes_on_a_thread_at_once(team):
    cpu, started = time.thread_time(), time.monotonic()
    assert team.MAILBOX.wait("idle", 0, timeout=0.3) is False
    assert time.monotonic() - started >= 0.3 and time.thread_time() - cpu < 0.1
    timer = threading.Timer(0.05, lambda: team.MAILBOX.send("b", "a", "hi"))
    timer.start()
    started = time.monotonic()
    assert (
        team.MAILBOX.wait("b", 0, timeout=60) and time.monotonic() - started < 5
    )  # woken, not timed out
    timer.join()


def test_await_reply_correlates_by_reply_to_and_times_out(team):
    asked = team.MAILBOX.send("x", "lead", "question", "request")
    team.MAILBOX.send("lead", "x", "an answer to something else", "response", reply_to="other")
    started = time.monotonic()
    assert team.MAILBOX.await_reply("lead", asked, 0, timeout=0.2)[0] is None
    assert 0.2 <= time.monotonic() - started < 5  # the upper bound only guards against a hang
    team.MAILBOX.send("lead", "x", "the answer", "response", reply_to=asked)
    assert team.MAILBOX.await_reply("lead", asked, 0, timeout=1)[0]["content"] == "the answer"


# -- Teammates ---------------------------------------------------------------------------
def spawn(team, name="helper", prompt="Helper-bot."):
    return team.run_team_spawn(name, "helps", prompt)


def test_teammate_answers_requests_including_those_sent_before_it_started(team, standin):
    standin.policy = echo_policy
    early = team.MAILBOX.send("helper", "lead", "queued before start", "request")
    spawn(team)
    reply, _ = team.MAILBOX.await_reply("lead", early, 0, timeout=10)
    assert reply["content"] == "Helper-bot. did: queued before start" and reply["from"] == "helper"
    assert standin.rejected == []


def test_shutdown_stops_and_the_rest_of_the_batch_gets_a_polite_no(team, standin):
    standin.policy = echo_policy
    mate = team.Teammate({"name": "helper", "role": "helps", "prompt": "Helper-bot."}, team.MAILBOX)
    first = team.MAILBOX.send("helper", "lead", "first", "request")
    team.MAILBOX.send("helper", "other", "an answer, not an order", "response", "shutdown")
    stop = team.MAILBOX.send("helper", "lead", "stop", "request", "shutdown")
    late = team.MAILBOX.send("helper", "lead", "late", "request")
    for message in team.MAILBOX.read("helper")[0]:  # one batch, handled without a thread
        mate.handle(message)
    replies = {m["reply_to"]: m["content"] for m in team.MAILBOX.read("lead")[0]}
    assert replies == {
        first: "Helper-bot. did: first",
        stop: "helper is shutting down",
        late: "shutting down",
    }
    assert mate.stopping


def test_a_respawned_teammate_goes_on_where_it_stopped(team, standin):
    """Old requests are not answered twice, and an old shutdown is not obeyed again."""
    standin.policy = echo_policy
    spawn(team)
    assert team.run_team_shutdown("helper").startswith("helper acknowledged")
    spawn(team)
    asked = team.MAILBOX.send("helper", "lead", "are you back?", "request")
    reply, _ = team.MAILBOX.await_reply("lead", asked, 0, timeout=10)
    assert (
        reply["content"] == "Helper-bot. did: are you back?"
        and team.RUNNING["helper"].thread.is_alive()
    )
    assert len(standin.requests) == 1  # the first "please stop" was not answered again


def test_a_failed_request_is_closed_and_never_read_again_as_new_work(team, standin):
    """A failed prompt must not stay as a trailing user turn the next one is merged into."""
    standin.policy = echo_policy
    spawn(team)
    standin.fail_next(400)  # the next model call fails; 400 is not retried
    failing = team.MAILBOX.send("helper", "lead", "BOOM delete the build folder", "request")
    assert team.MAILBOX.await_reply("lead", failing, 0, 10)[0]["content"].startswith(
        "error: helper could not answer"
    )
    after = team.MAILBOX.send("helper", "lead", "list the files", "request")
    assert (
        team.MAILBOX.await_reply("lead", after, 0, 10)[0]["content"]
        == "Helper-bot. did: list the files"
    )
    sent = standin.requests[-1]["messages"]
    words = [b["text"] for m in sent for b in m["content"] if b["type"] == "text"]
    failed_at = next(i for i, w in enumerate(words) if "BOOM" in w)
    assert (
        words[failed_at + 1].startswith("[not answered: the request failed")
        and "not retried" in words[failed_at + 1]
    )
    assert standin.rejected == []


def test_teammates_have_their_own_prompt_and_the_base_and_task_tools(team, standin, workdir):
    standin.policy = ScriptedModel(
        [
            [tool_use("task_update", {"task_id": 1, "status": "in_progress"})],
            [tool_use("team_spawn", {"name": "x", "role": "r", "prompt": "p"})],
            ["done"],
        ]
    )
    team.BOARD.create("Build it")
    spawn(team, prompt="Builder-bot.")
    asked = team.run_team_send("helper", "Please do it.", task_id=1).split()[2]
    assert team.MAILBOX.await_reply("lead", asked, 0, 10)[0]["content"] == "done"
    request = standin.requests[0]
    assert request["system"].startswith("Builder-bot.") and "teammate 'helper'" in request["system"]
    assert {t["name"] for t in request["tools"]} == {
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "task_create",
        "task_update",
        "task_get",
        "task_list",
    }
    assert "Task #1 is yours: Build it" in last_user_text(request)
    assert team.BOARD.get(1)["owner"] == "helper" and team.BOARD.get(1)["status"] == "in_progress"
    refused = latest_results(standin.requests[2])[0]
    assert refused["is_error"] and "Unknown tool 'team_spawn'" in refused["content"]


# -- The lead ------------------------------------------------------------------------------
def test_news_rides_inside_the_last_tool_result_and_stays_in_the_history(team, standin):
    """Anthropic's docs link a text block after tool results to empty replies: not there."""
    standin.policy = ScriptedModel(
        [
            lambda request: (
                team.MAILBOX.send("lead", "alice", "done with #2")
                and [tool_use("bash", {"command": "echo hi"})]
            ),
            ["noted"],
            ["thanks"],
        ]
    )
    history = [{"role": "user", "content": "go"}]
    team.agent_loop(history)
    team.MAILBOX.send("lead", "alice", "news after the turn")
    team.add_user_text(history, "what's new?")
    team.agent_loop(history)
    second = standin.requests[1]["messages"][-1]
    assert [b["type"] for b in second["content"]] == ["tool_result"]
    assert second["content"][0]["content"][0] == {"type": "text", "text": "hi"}
    third = standin.requests[2]["messages"][-1]
    assert [b["text"] for b in third["content"]][0] == "what's new?"
    assert "news after the turn" in third["content"][-1]["text"]  # with the user's words
    assert "done with #2" in json.dumps(history)  # information, kept: unlike s03's reminder
    assert standin.rejected == []


def test_news_joins_a_user_turn_that_is_one_plain_string(team, standin):
    """The SDK's own examples send {"role": "user", "content": "go"}: a history copied from them
    runs through the lead's loop with news waiting, and the request is valid."""
    team.MAILBOX.send("lead", "alice", "done with #2")
    standin.policy = ScriptedModel([["noted"]])
    history = [{"role": "user", "content": "go"}]
    team.agent_loop(history)
    sent = standin.requests[-1]["messages"][0]["content"]
    assert sent[0] == {"type": "text", "text": "go"} and "done with #2" in sent[1]["text"]
    assert standin.rejected == [] and history[-1]["content"] == [{"type": "text", "text": "noted"}]


def test_news_joins_a_tool_result_whose_content_is_a_list_of_blocks(team):
    team.MAILBOX.send("lead", "alice", "done with #2")
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "hi"}],
    }
    history = [{"role": "user", "content": [result]}]
    team.deliver_team_news(history)
    texts = result["content"]
    assert texts[0] == {"type": "text", "text": "hi"} and len(texts) == 2
    assert texts[1]["type"] == "text" and "done with #2" in texts[1]["text"]


def test_a_request_nobody_answers_times_out_saying_where_it_is(team):
    team.TEAM_TIMEOUT = 0.2
    mute = threading.Event()  # a teammate that runs but never reads its mail
    team.RUNNING["mute"] = type("Mute", (), {"thread": threading.Thread(target=mute.wait)})()
    team.RUNNING["mute"].thread.start()
    try:
        with pytest.raises(TimeoutError, match="the request stays in its mailbox"):
            team.run_team_review("mute", "1. do it")
    finally:
        mute.set()
        del team.RUNNING["mute"]


def test_a_review_verdict_is_not_delivered_twice(team, standin):
    def model(request):
        if "teammate 'reviewer'" in system_text(request):
            return ["APPROVE: fine"]
        return (
            [tool_use("team_review", {"name": "reviewer", "plan": "1. do it"})]
            if not latest_results(request)
            else ["approved"]
        )

    standin.policy = model
    spawn(team, "reviewer", "Reviewer-bot.")
    team.agent_loop([{"role": "user", "content": "review my plan"}])
    final = standin.requests[-1]
    assert latest_results(final)[0]["content"] == "reviewer's verdict: APPROVE: fine"
    assert "New messages" not in json.dumps(final["messages"])


def test_team_wait_returns_the_news_and_times_out(team, standin):
    assert team.run_team_wait(0) == "No new mail within 0s."
    threading.Timer(0.05, lambda: team.MAILBOX.send("lead", "alice", "finished #1")).start()
    assert "finished #1" in team.run_team_wait(5)
    assert team.run_team_wait(0) == "No new mail within 0s."  # read once


def test_errors_of_the_team_tools_are_results_that_say_why(team, standin):
    team.BOARD.create("Build it")
    standin.policy = ScriptedModel(
        [
            [
                tool_use("team_send", {"name": "ghost", "message": "hi"}),
                tool_use("team_review", {"name": "ghost", "plan": "p"}),
                tool_use("team_send", {"name": "ghost", "message": "x", "task_id": 1}),
            ],
            ["ok"],
        ]
    )
    team.agent_loop([{"role": "user", "content": "go"}])
    results = latest_results(standin.requests[1])
    assert all(r["is_error"] and "ghost is not running" in r["content"] for r in results)
    assert team.BOARD.get(1)["owner"] == ""  # a refused assignment leaves the board as it was


def test_status_lines_wait_while_you_type(team, monkeypatch, capsys):
    """A teammate's line must not land in the middle of the prompt being typed."""
    typed = threading.Event()

    def slow_input(prompt):
        print(prompt, end="", flush=True)
        threading.Thread(target=lambda: (team.notify("[alice] working on #3"), typed.set())).start()
        assert typed.wait(5)  # the line arrives while you are still typing...
        print("q")  # ...and you finish typing and press Enter
        return "q"

    monkeypatch.setattr("builtins.input", slow_input)
    team.repl()
    team.notify("[alice] done")
    assert capsys.readouterr().out == "s09 >> q\n[alice] working on #3\n[alice] done\n"


def test_team_and_inbox_commands(team, standin, type_lines, capsys):
    standin.policy = echo_policy
    spawn(team)
    team.ROSTER.add("idle", "waits", "You wait.")
    team.MAILBOX.send("lead", "helper", "unread news")
    type_lines("/team", "/inbox", "/inbox")
    team.repl()
    out = capsys.readouterr().out
    assert "helper - helps [running]" in out and "idle - waits [not running]" in out
    assert out.count("message from helper: unread news") == 2  # /inbox does not consume


def test_sessions_do_not_share_mailboxes(load_step):
    first, second = load_step(STEP), load_step(STEP)
    assert first.SESSION != second.SESSION and first.MAILBOX.root != second.MAILBOX.root


# -- As a learner runs it ----------------------------------------------------------------------
def test_offline_demo_plans_reviews_assigns_and_shuts_down(offline_demo):
    done = offline_demo(STEP).done
    out = done.stdout
    assert done.returncode == 0, done.stderr
    rejected, approved = out.index("verdict: REJECT"), out.index("verdict: APPROVE")
    assigned = out.index('"name": "builder", "task_id": 1')
    assert (
        rejected < approved < assigned
    )  # the plan is approved after one rejection, before any work
    for task in (1, 3, 2):
        assert f"Done with task #{task}." in out
    board = out[out.rindex("s09 >> /tasks") :]
    assert board.count("[x] #") == 3 and "@builder" in board
    assert "builder acknowledged: builder is shutting down" in out
    assert "reviewer acknowledged: reviewer is shutting down" in out
    assert "lead.jsonl     response [plan_approval] reviewer -> lead: REJECT" in out
    assert "0 rejected by the validator" in out and done.stderr == ""


# -- Every reply a real endpoint sends, in a teammate's loop ------------------------------
@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_a_teammate_survives_every_quirk_and_answers_the_next_request(team, standin, quirk):
    def policy(request):
        if latest_results(request):
            return ["first done"]
        if "first" in last_user_text(request).splitlines()[-1]:
            return QUIRKS[quirk](tool_use("bash", {"command": "echo ran-$((20 + 22))"}))
        return ["answered second"]

    standin.policy = policy
    spawn(team)
    first = team.MAILBOX.send("helper", "lead", "do the first thing", "request")
    answer, _ = team.MAILBOX.await_reply("lead", first, 0, timeout=10)
    second = team.MAILBOX.send("helper", "lead", "then the second", "request")
    assert (
        team.MAILBOX.await_reply("lead", second, 0, timeout=10)[0]["content"] == "answered second"
    )
    assert standin.rejected == []
    results = [
        b
        for m in standin.requests[-1]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    if quirk in ("call_under_end_turn", "unknown_stop_reason", "no_stop", "odd_id", "string_input"):
        assert answer["content"] == "first done" and "ran-42" in results[0]["content"]
    if quirk in ("whitespace_only", "no_usage"):  # no answer at all: said, not passed off as one
        assert answer["content"].startswith("error: helper could not answer")
