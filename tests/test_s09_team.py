"""s09: teammates, JSONL mailboxes across threads and processes, request/response protocols."""

import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from conftest import AGENTS
from offline import ScriptedModel, last_user_text, latest_results, load_demo, system_text, tool_use

STEP = "s09_team"


@pytest.fixture
def team(load_step):
    module = load_step(STEP)
    module.TEAM_TIMEOUT = 10  # a hung teammate fails the test instead of hanging it
    yield module
    for loop in module.RUNNING.values():
        loop.stopping = True  # leftover teammates end after their current wait


def message(team, sender="a", to="b", content="hi", **extra):
    return team.Message(from_agent=sender, to_agent=to, content=content, **extra)


# -- Names become file names -----------------------------------------------------------
@pytest.mark.parametrize("bad", ["", "../x", "a/b", "a b", " x", "x\n", "é", "x" * 65, None, 7])
def test_bad_names_are_refused_everywhere(team, bad, workdir):
    with pytest.raises(ValueError, match="invalid"):
        team.check_name(bad)
    with pytest.raises(ValueError):
        team.TEAM.register(bad, "role", "prompt")
    with pytest.raises(ValueError):
        team.BUS.send(message(team, to=bad))
    assert not (workdir / ".team.json").exists() and not (workdir / ".mailbox").exists()


def test_good_names_pass(team):
    for good in ("a", "code-reviewer", "A_1", "x" * 64):
        assert team.check_name(good) == good


# -- TeammateManager -------------------------------------------------------------------
def test_register_get_list_remove(team, workdir):
    team.TEAM.register("reviewer", "reviews plans", "You review.")
    team.TEAM.register("coder", "writes code", "You code.", model="other-model")
    data = json.loads((workdir / ".team.json").read_text())
    assert data["teammates"]["coder"] == {"name": "coder", "role": "writes code",
                                          "system_prompt": "You code.", "model": "other-model"}
    assert "model" not in data["teammates"]["reviewer"]
    assert [t["name"] for t in team.TEAM.list()] == ["coder", "reviewer"]
    team.TEAM.remove("coder")
    assert [t["name"] for t in team.TEAM.list()] == ["reviewer"]
    with pytest.raises(LookupError, match="no teammate named 'coder'.*reviewer"):
        team.TEAM.get("coder")


@pytest.mark.parametrize("role,prompt", [("", "p"), ("r", "   "), (None, "p")])
def test_register_needs_role_and_prompt(team, role, prompt):
    with pytest.raises(ValueError, match="non-empty"):
        team.TEAM.register("x", role, prompt)


def test_main_is_reserved(team):
    with pytest.raises(ValueError, match="lead"):
        team.TEAM.register("main", "r", "p")


def test_corrupt_team_file_is_reported_and_kept(team, workdir, standin):
    (workdir / ".team.json").write_text("{not json")
    with pytest.raises(team.TeamFileError, match=r"\.team\.json is corrupt"):
        team.TEAM.register("x", "r", "p")
    assert (workdir / ".team.json").read_text() == "{not json"
    standin.policy = ScriptedModel([[tool_use("team_list")], ["noted"]])
    team.agent_loop([{"role": "user", "content": "who is on the team?"}])
    [result] = latest_results(standin.requests[1])
    assert result["is_error"] and "corrupt" in result["content"]


# -- Messages and the bus ---------------------------------------------------------------
def test_send_fills_id_and_timestamp_and_rejects_duplicates(team):
    first = team.BUS.send(message(team))
    second = team.BUS.send(message(team))
    assert first.id and second.id and first.id != second.id
    assert first.timestamp.endswith("+00:00")
    team.BUS.send(message(team, id="fixed-1"))
    with pytest.raises(ValueError, match="already used"):
        team.BUS.send(message(team, to="c", id="fixed-1"))
    assert [m.id for m in team.BUS.receive("b")] == [first.id, second.id, "fixed-1"]
    assert team.BUS.receive("c") == []


@pytest.mark.parametrize("field,value", [("msg_type", "shout"), ("content", ""), ("content", None)])
def test_bad_messages_are_refused(team, field, value):
    with pytest.raises(ValueError):
        team.BUS.send(message(team, **{field: value}))


def test_cursor_is_exclusive_and_unknown_cursors_fail(team):
    ids = [team.BUS.send(message(team, content=f"m{i}")).id for i in range(4)]
    assert [m.content for m in team.BUS.receive("b")] == ["m0", "m1", "m2", "m3"]
    assert [m.content for m in team.BUS.receive("b", since_id=ids[1])] == ["m2", "m3"]
    assert team.BUS.receive("b", since_id=ids[3]) == []
    with pytest.raises(LookupError, match="unknown cursor 'nope'"):
        team.BUS.receive("b", since_id="nope")
    other = team.BUS.send(message(team, to="c")).id
    with pytest.raises(LookupError, match="unknown cursor"):
        team.BUS.receive("b", since_id=other)  # a message of another mailbox is no cursor here


def test_cursor_written_by_another_bus_is_found(team):
    writer = team.MessageBus(team.BUS.root)  # e.g. another process: this bus never saw its ids
    ids = [writer.send(message(team, content=f"m{i}")).id for i in range(3)]
    assert [m.content for m in team.BUS.receive("b", since_id=ids[0])] == ["m1", "m2"]


def test_torn_last_line_is_skipped_and_read_later(team):
    team.BUS.send(message(team, content="whole"))
    line = json.dumps({"id": "late", "from_agent": "a", "to_agent": "b", "content": "late",
                       "msg_type": "message", "timestamp": "t", "in_reply_to": None}) + "\n"
    path = team.BUS.mailbox("b")
    with open(path, "ab") as handle:
        handle.write(line[:20].encode())  # a writer caught halfway
    assert [m.content for m in team.BUS.receive("b")] == ["whole"]
    first = team.BUS.receive("b")[0].id
    assert team.BUS.receive("b", since_id=first) == []
    with open(path, "ab") as handle:
        handle.write(line[20:].encode())
    assert [m.content for m in team.BUS.receive("b", since_id=first)] == ["late"]


def test_reading_after_a_cursor_does_not_reparse_the_file(team, monkeypatch):
    ids = [team.BUS.send(message(team, content=f"m{i}")).id for i in range(200)]
    team.BUS.receive("b")
    parsed = []
    original = team.Message.from_json
    monkeypatch.setattr(team.Message, "from_json",
                        classmethod(lambda cls, raw: parsed.append(raw) or original(raw)))
    assert [m.content for m in team.BUS.receive("b", since_id=ids[-3])] == ["m198", "m199"]
    assert len(parsed) == 2


def test_find_message_across_mailboxes(team):
    sent = team.BUS.send(message(team, to="c", content="find me"))
    fresh = team.MessageBus(team.BUS.root)
    assert fresh.find_message(sent.id).content == "find me"
    assert fresh.find_message("missing") is None


# A writer process loads the real script, but with stand-ins for the SDK and dotenv:
# the mailbox needs neither, and importing the SDK costs ~1 s of CPU per process.
WRITER = textwrap.dedent("""
    import importlib.util, sys, types
    from pathlib import Path
    sys.modules["anthropic"] = types.SimpleNamespace(Anthropic=lambda **kw: None, APIError=Exception)
    sys.modules["dotenv"] = types.SimpleNamespace(load_dotenv=lambda *a, **kw: None)
    spec = importlib.util.spec_from_file_location("s09", sys.argv[1])
    team = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(team)
    bus = team.MessageBus(Path(sys.argv[2]))
    name, count, delay = sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    print("ready", flush=True)
    sys.stdin.readline()  # start together, so the writes really overlap
    __import__("time").sleep(delay)  # lets the reader get into its wait first (checked by the test)
    for i in range(count):
        bus.send(team.Message(from_agent=name, to_agent="inbox", content=f"{i}|{__import__('time').time()}"))
""")


def start_writers(team, tmp_path, names, count, delay=0.0):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    workers = [subprocess.Popen([sys.executable, str(script), team.__file__, str(team.BUS.root), name,
                                 str(count), str(delay)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=tmp_path) for name in names]
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready"
    return workers


def go(workers):
    for worker in workers:
        worker.stdin.write("go\n")
        worker.stdin.flush()


def test_eight_processes_share_one_mailbox(team, tmp_path):
    names = [f"w{n}" for n in range(8)]
    workers = start_writers(team, tmp_path, names, 500)
    go(workers)
    for worker in workers:
        assert worker.wait(timeout=60) == 0
    received = team.BUS.receive("inbox")
    assert len(received) == 4000
    assert len({m.id for m in received}) == 4000
    for name in names:
        sequence = [int(m.content.split("|")[0]) for m in received if m.from_agent == name]
        assert sequence == list(range(500)), f"{name}'s messages are out of order or missing"
    assert len(team.BUS.mailbox("inbox").read_bytes().splitlines()) == 4000  # one line each


def test_wait_for_message_wakes_on_another_process(team, tmp_path):
    assert team.BUS.receive("inbox") == []
    [worker] = start_writers(team, tmp_path, ["far"], 1, delay=0.3)
    go([worker])
    waiting_since = time.time()
    woke = team.BUS.wait_for_message("inbox", timeout=10)
    woke_at = time.time()
    assert worker.wait(timeout=30) == 0
    [got] = team.BUS.receive("inbox")
    sent_at = float(got.content.split("|")[1])
    assert sent_at > waiting_since, "the write must happen while we wait, or this proves nothing"
    assert woke and woke_at - sent_at < 0.5


def test_wait_for_message_times_out_without_spinning(team):
    team.BUS.receive("idle")
    cpu, started = time.thread_time(), time.monotonic()
    assert team.BUS.wait_for_message("idle", timeout=0.3) is False
    assert time.monotonic() - started >= 0.3
    assert time.thread_time() - cpu < 0.1  # a busy loop would burn the whole 0.3 s


def test_wait_for_message_wakes_on_a_thread_at_once(team):
    team.BUS.receive("b")
    timer = threading.Timer(0.05, lambda: team.BUS.send(message(team)))
    timer.start()
    started = time.monotonic()
    assert team.BUS.wait_for_message("b", timeout=5)
    assert time.monotonic() - started < 1
    timer.join()


# -- Protocols ---------------------------------------------------------------------------
def test_protocol_encode_decode(team):
    wire = team.encode_protocol("plan_approval", "step 1")
    assert json.loads(wire) == {"protocol": "plan_approval", "content": "step 1"}
    assert team.decode_protocol(wire) == ("plan_approval", "step 1")
    assert team.decode_protocol("just text") == (None, "just text")
    assert team.decode_protocol('{"protocol": "party", "content": "x"}')[0] is None
    assert team.decode_protocol("[1, 2]") == (None, "[1, 2]")
    with pytest.raises(ValueError, match="unknown protocol"):
        team.encode_protocol("party", "x")


def test_respond_reuses_protocol_and_answers_the_sender(team):
    lead, reviewer = team.ProtocolFSM(team.BUS, "main"), team.ProtocolFSM(team.BUS, "reviewer")
    asked = lead.request("reviewer", "plan_approval", "the plan")
    [request] = team.BUS.receive("reviewer")
    assert request.msg_type == "request" and team.decode_protocol(request.content) == ("plan_approval", "the plan")
    reviewer.respond(asked, "APPROVE")
    [reply] = team.BUS.receive("main")
    assert (reply.msg_type, reply.in_reply_to, reply.from_agent) == ("response", asked, "reviewer")
    assert team.decode_protocol(reply.content) == ("plan_approval", "APPROVE")
    plain = lead.request("reviewer", None, "hello")
    reviewer.respond(plain, "hi back")
    assert team.BUS.receive("main")[-1].content == "hi back"
    with pytest.raises(LookupError):
        reviewer.respond("no-such-id", "x")


def test_broadcast_skips_the_sender(team):
    for agent in ("main", "a", "b"):
        team.BUS.create_mailbox(agent)
    team.ProtocolFSM(team.BUS, "a").broadcast("shutdown", "stop all")
    assert team.BUS.receive("a") == []
    for agent in ("main", "b"):
        [got] = team.BUS.receive(agent)
        assert got.msg_type == "broadcast" and team.decode_protocol(got.content) == ("shutdown", "stop all")


def test_wait_response_times_out_and_finds_early_answers(team):
    lead, other = team.ProtocolFSM(team.BUS, "main"), team.ProtocolFSM(team.BUS, "x")
    asked = lead.request("x", None, "question")
    started = time.monotonic()
    assert lead.wait_response(asked, timeout=0.2) is None
    assert 0.2 <= time.monotonic() - started < 2
    other.respond(asked, "answer")  # answered before anyone waits: still found
    assert lead.wait_response(asked, timeout=1).content == "answer"


# -- Teammates ---------------------------------------------------------------------------
def echo_policy(request):
    """Answers every request with the first word of the system prompt and the request's last line."""
    text = last_user_text(request)
    return [f"{system_text(request).split()[0]} did: {text.splitlines()[-1]}"]


def test_teammate_handles_backlog_old_shutdown_new_shutdown_and_failure(team, standin):
    standin.policy = echo_policy
    team.TEAM.register("helper", "helps", "Helper-bot.")
    lead = team.LEAD_FSM
    waiting = lead.request("helper", None, "queued before start")
    old_stop = lead.request("helper", "shutdown", "old stop")
    team.run_team_spawn("helper")
    reply = lead.wait_response(waiting, timeout=10)
    assert reply.content == "Helper-bot. did: queued before start"
    assert team.RUNNING["helper"].is_running()  # the old shutdown was not obeyed
    standin.fail_next(400)  # the next model call fails without retries
    failing = lead.request("helper", None, "this one fails")
    assert lead.wait_response(failing, timeout=10).content.startswith("error: helper could not answer")
    after = lead.request("helper", None, "still alive?")
    assert lead.wait_response(after, timeout=10).content == "Helper-bot. did: still alive?"
    stop = lead.request("helper", "shutdown", "new stop")
    late = lead.request("helper", None, "one more")
    assert team.decode_protocol(lead.wait_response(stop, timeout=10).content) == \
        ("shutdown", "helper is shutting down")
    team.RUNNING["helper"].thread.join(timeout=10)
    assert not team.RUNNING["helper"].is_running()
    replies = {m.in_reply_to: m for m in team.BUS.receive("main")}
    assert old_stop not in replies
    assert replies.get(late) is None or replies[late].content == "shutting down"
    assert standin.rejected == []


def test_rest_of_a_batch_after_shutdown_gets_shutting_down(team, standin):
    standin.policy = echo_policy
    loop = team.TeammateLoop({"name": "helper", "role": "helps", "system_prompt": "Helper-bot."}, team.BUS)
    team.BUS.send(message(team, sender="other", to="helper", msg_type="response",
                          content=team.encode_protocol("shutdown", "an answer, not an order")))
    before = team.LEAD_FSM.request("helper", None, "first")
    stop = team.LEAD_FSM.request("helper", "shutdown", "stop")
    late = team.LEAD_FSM.request("helper", None, "late")
    loop.handle(team.BUS.receive("helper"))  # one batch, handled without a thread
    replies = {m.in_reply_to: m.content for m in team.BUS.receive("main")}
    assert replies[before] == "Helper-bot. did: first"
    assert team.decode_protocol(replies[stop]) == ("shutdown", "helper is shutting down")
    assert replies[late] == "shutting down" and loop.stopping
    assert len(standin.requests) == 1  # "late" never reached the model


def test_respawn_does_not_answer_old_requests_twice(team, standin):
    standin.policy = echo_policy
    team.TEAM.register("helper", "helps", "Helper-bot.")
    asked = team.LEAD_FSM.request("helper", None, "once")
    team.run_team_spawn("helper")
    team.LEAD_FSM.wait_response(asked, timeout=10)
    team.run_team_shutdown("helper")
    calls = len(standin.requests)
    team.run_team_spawn("helper")
    again = team.LEAD_FSM.request("helper", None, "twice")
    assert team.LEAD_FSM.wait_response(again, timeout=10).content.endswith("did: twice")
    assert len(standin.requests) == calls + 1
    team.run_team_shutdown("helper")


def test_teammate_uses_its_own_prompt_model_and_base_tools(team, standin, workdir):
    (workdir / "facts.txt").write_text("the sky is green\n")
    standin.policy = ScriptedModel([[tool_use("read_file", {"path": "facts.txt"}),
                                     tool_use("team_spawn", {"name": "x"})],
                                    lambda request: [latest_results(request)[0]["content"]]])
    team.TEAM.register("reader", "reads", "Reader-bot.", model="small-model")
    asked = team.LEAD_FSM.request("reader", None, "what does facts.txt say?")
    team.run_team_spawn("reader")
    assert team.LEAD_FSM.wait_response(asked, timeout=10).content == "the sky is green"
    first = standin.requests[0]
    assert first["model"] == "small-model" and first["system"].startswith("Reader-bot.")
    assert sorted(t["name"] for t in first["tools"]) == ["bash", "edit_file", "read_file", "write_file"]
    refused = latest_results(standin.requests[1])[1]
    assert refused["is_error"] and "not a teammate tool" in refused["content"]
    team.run_team_shutdown("reader")


# -- The lead: tools, inbox, delivery -------------------------------------------------------
def test_team_send_to_unknown_name_is_an_error_result(team, standin):
    standin.policy = ScriptedModel([[tool_use("team_send", {"name": "ghost", "message": "hi"}),
                                     tool_use("team_send", {"name": "../x", "message": "hi"})], ["ok"]])
    team.agent_loop([{"role": "user", "content": "message the ghost"}])
    ghost, dotdot = latest_results(standin.requests[1])
    assert ghost["is_error"] and "no teammate named 'ghost'" in ghost["content"]
    assert dotdot["is_error"] and "invalid teammate name" in dotdot["content"]
    assert not team.BUS.root.exists()  # nothing was written


def test_review_and_shutdown_need_a_running_teammate(team):
    team.TEAM.register("idle", "r", "p")
    for run in (lambda: team.run_team_review("idle", "plan"), lambda: team.run_team_shutdown("idle")):
        with pytest.raises(ValueError, match="not running"):
            run()


def test_team_review_times_out(team, standin):
    team.TEAM.register("slow", "r", "p")
    team.run_team_spawn("slow")
    team.TEAM_TIMEOUT = 0.2
    gate = threading.Event()
    standin.policy = lambda request: gate.wait(10) and ["too late"]
    try:
        with pytest.raises(TimeoutError, match="no answer from slow"):
            team.run_team_review("slow", "plan")
    finally:
        gate.set()  # let the stuck model call finish


def test_new_mail_reaches_the_model_after_tool_results(team, standin):
    standin.policy = ScriptedModel([[tool_use("team_send", {"name": "main", "message": "note to self"})],
                                    ["got it"]])
    history = [{"role": "user", "content": "leave yourself a note"}]
    team.agent_loop(history)
    content = standin.requests[1]["messages"][-1]["content"]
    assert [block["type"] for block in content] == ["tool_result", "text"]
    assert "note to self" in content[1]["text"] and "request" in content[1]["text"]
    assert standin.rejected == []
    assert team.INBOX.take() == []  # consumed: it is not delivered twice


def test_review_verdict_is_not_delivered_twice(team, standin):
    def policy(request):
        if "teammate 'critic'" in system_text(request):
            return ["REJECT: too vague"]
        return [tool_use("team_review", {"name": "critic", "plan": "do it"})] \
            if len(request["messages"]) == 1 else ["revising"]
    standin.policy = policy
    team.TEAM.register("critic", "r", "p")
    team.run_team_spawn("critic")
    team.agent_loop([{"role": "user", "content": "review"}])
    lead_requests = [r for r in standin.requests if "critic" not in system_text(r)]
    [result] = latest_results(lead_requests[-1])
    assert "REJECT: too vague" in result["content"]
    assert "New messages" not in json.dumps(lead_requests[-1]["messages"])
    team.run_team_shutdown("critic")


def test_inbox_shows_without_consuming_and_team_commands(team, capsys, standin):
    team.TEAM.register("helper", "helps", "Helper-bot.")
    team.SLASH_COMMANDS["/team"]("list", [])
    assert "helper - helps [not running]" in capsys.readouterr().out
    team.SLASH_COMMANDS["/team"]("send helper please look", [])
    assert "Sent message" in capsys.readouterr().out
    team.SLASH_COMMANDS["/team"]("send ghost hi", [])
    assert "no teammate named 'ghost'" in capsys.readouterr().out
    team.SLASH_COMMANDS["/team"]("dance", [])
    assert "Usage" in capsys.readouterr().out
    team.ProtocolFSM(team.BUS, "helper").respond(team.BUS.receive("helper")[0].id, "looked")
    team.SLASH_COMMANDS["/inbox"]("", [])
    assert "Team response from helper: looked" in capsys.readouterr().out
    assert [m.content for m in team.INBOX.take()] == ["looked"]  # still unread after /inbox
    team.SLASH_COMMANDS["/inbox"]("", [])
    assert "No unread team messages." in capsys.readouterr().out


def test_sessions_do_not_share_mailboxes(load_step):
    first, second = load_step(STEP), load_step(STEP)
    assert first.BUS.root != second.BUS.root and first.BUS.root.parent == second.BUS.root.parent


# -- End to end, as a learner runs it --------------------------------------------------------
def test_demo_scenario_as_a_subprocess(run_step, standin, workdir):
    demo = load_demo(AGENTS / f"{STEP}.py")
    demo.setup(workdir)
    standin.policy = demo.policy
    done = run_step(STEP, "\n".join(demo.PROMPTS) + "\n", timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "reviewer's verdict: REJECT" in out and "reviewer's verdict: APPROVE" in out
    assert out.index("verdict: REJECT") < out.index("verdict: APPROVE")
    assert "Team response from reviewer: notes.txt says: Release checklist" in out
    assert "reviewer acknowledged: reviewer is shutting down" in out
    assert "[running]" in out and "[not running]" in out
    assert standin.rejected == []
    reviewer_calls = [r for r in standin.requests if "teammate 'reviewer'" in system_text(r)]
    assert any(b.get("name") == "read_file" for r in reviewer_calls for m in r["messages"]
               if m["role"] == "assistant" for b in m["content"])
    team_file = json.loads((workdir / ".team.json").read_text())
    assert list(team_file["teammates"]) == ["reviewer"]
    [session] = (workdir / ".mailbox").iterdir()
    assert sorted(p.name for p in session.glob("*.jsonl")) == ["main.jsonl", "reviewer.jsonl"]


def test_offline_demo_shows_review_request_and_shutdown(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stderr
    assert "verdict: REJECT" in done.stdout and "verdict: APPROVE" in done.stdout
    assert "its tool calls: read_file" in done.stdout
