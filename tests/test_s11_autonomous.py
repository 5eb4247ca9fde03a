"""s11: autonomous teammates - leases, the claim race across processes, the worker loop, the lead.

The races use real processes started with fork, so the SDK is imported once; each child
gets its own client (sockets must never be shared across a fork). Workers in this process
are threads, the way team_spawn_autonomous runs them; one test runs `--worker` as a learner
would, in a process of its own.
"""

import collections
import json
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone

import pytest
from conftest import AGENTS, step_env, wait_until

from offline import ScriptedModel, latest_results, load_demo, steps_since_prompt, system_text, tool_use

STEP = "s11_autonomous"
FORK = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
needs_fork = pytest.mark.skipif(FORK is None, reason="the process races use fork (POSIX)")


@pytest.fixture
def team(load_step):
    module = load_step(STEP)
    module.TEAM_TIMEOUT = 10  # a hung worker fails the test instead of hanging it
    module.POLL_INTERVAL = 0.05
    module.IDLE_TIMEOUT = 30  # tests that want the idle stop set their own
    yield module
    for worker in module.RUNNING.values():
        worker.stopping = True  # leftovers end after their current wait


def task_prompt_id(request: dict) -> int | None:
    """The task id when this request opens a task: its last block is the 'Task #N:' prompt."""
    content = request["messages"][-1]["content"]
    last = content if isinstance(content, str) else content[-1].get("text", "")
    found = re.match(r"Task #(\d+):", last)
    return int(found.group(1)) if found else None


def done_policy(request: dict) -> list:
    """Workers finish every task at once with 'done #N'; anything else gets a plain answer."""
    task_id = task_prompt_id(request)
    return [f"done #{task_id}" if task_id else "answered"]


def build_dag(board, count: int, seed: int = 11) -> None:
    """Eight roots, then tasks that each wait for 0-3 of the 30 tasks before them."""
    rng = random.Random(seed)
    for n in range(1, count + 1):
        earlier = range(max(1, n - 30), n)
        board.create(f"job {n}", blocked_by=rng.sample(earlier, k=min(len(earlier), rng.choice([0, 1, 2, 3])))
                     if n > 8 else [])


def assert_dependency_order(tasks: list) -> None:
    """No task started before every blocker completed (a completed task's updated_at is its completion)."""
    board = {t["id"]: t for t in tasks}
    for task in tasks:
        for blocker in task["blockedBy"]:
            assert task["started_at"] >= board[blocker]["updated_at"], f"#{task['id']} started before #{blocker}"


def reports(team, name: str) -> list:
    return [team.decode_protocol(m.content)[1] for m in team.BUS.receive("main")
            if m.from_agent == name and team.decode_protocol(m.content)[0] == "status"]


def spawn(team, name: str):
    team.run_team_spawn_autonomous(name)
    return team.RUNNING[name]


def stop(team, name: str) -> str:
    return team.run_team_shutdown(name)


# -- Leases and owner checks on the board ---------------------------------------------------
def test_claim_records_start_and_a_lease(team):
    team.TASKS.create("job")
    before = datetime.now(timezone.utc)
    task = team.TASKS.claim(1, "w1")
    assert (task["status"], task["owner"]) == ("in_progress", "w1")
    started, lease = datetime.fromisoformat(task["started_at"]), datetime.fromisoformat(task["lease_until"])
    assert before <= started and timedelta(seconds=299) < lease - started <= timedelta(seconds=301)
    assert re.search(r"\.\d{6}\+00:00$", task["started_at"]), "microseconds: claims within a second stay ordered"
    assert team.TASKS.ready() == []


def test_expired_lease_makes_the_task_claimable_and_the_old_owner_loses_it(team):
    team.TASKS.create("job")
    team.TASKS.create("by hand")
    team.TASKS.claim(1, "slow")
    team.TASKS.update(2, status="in_progress")  # no lease: set by hand, never taken away
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    team.TASKS.update(1, expected_owner="slow", worker_fields={"lease_until": past})
    assert [t["id"] for t in team.TASKS.ready()] == [1]
    assert team.TASKS.claim(1, "rescuer")["owner"] == "rescuer"
    with pytest.raises(team.TaskError) as lost:
        team.TASKS.update(1, status="completed", expected_owner="slow", worker_fields={"result": "mine"})
    assert lost.value.code == "CONFLICT" and "no longer slow's claim" in str(lost.value)
    with pytest.raises(team.TaskError):
        team.TASKS.update(1, expected_owner="slow", worker_fields={"lease_until": past})  # nor renew it
    done = team.TASKS.update(1, status="completed", expected_owner="rescuer", worker_fields={"result": "ok"})
    assert (done["owner"], done["result"]) == ("rescuer", "ok")
    with pytest.raises(team.TaskError):  # completed: no longer anyone's claim
        team.TASKS.update(1, expected_owner="rescuer", worker_fields={"lease_until": past})


def test_heartbeat_renews_the_lease_until_the_work_ends(team):
    team.LEASE_SECONDS = 0.6  # a beat every 0.2 s; a stall of 0.4 s would be needed to lose it
    team.TASKS.create("job")
    team.TASKS.claim(1, "w1")
    seen = set()
    with team.heartbeat(team.TASKS, 1, "w1"):
        assert wait_until(lambda: seen.add(team.TASKS.get(1)["lease_until"]) or len(seen) >= 3)
        assert [t["id"] for t in team.TASKS.ready()] == []  # renewed in time: never up for grabs
    last = team.TASKS.get(1)["lease_until"]
    assert wait_until(lambda: team.TASKS.ready() != [], timeout=3)  # no more beats: the lease lapses
    assert team.TASKS.get(1)["lease_until"] == last


# -- The worker loop, in threads ------------------------------------------------------------
def test_threads_claim_in_dependency_order_once_each_with_result_notes(team, standin, capsys):
    standin.policy = done_policy
    build_dag(team.TASKS, 30)
    team.IDLE_TIMEOUT = 0.3
    workers = [spawn(team, name) for name in ("w1", "w2", "w3")]
    for worker in workers:
        worker.thread.join(timeout=20)
    tasks = team.TASKS.list()
    assert all(t["status"] == "completed" and t["result"] == f"done #{t['id']}" for t in tasks)
    assert_dependency_order(tasks)
    opened = collections.Counter(filter(None, map(task_prompt_id, standin.requests)))
    assert opened == {n: 1 for n in range(1, 31)}
    claims = re.findall(r"\[(w\d)\] claimed #(\d+) .* \(ready were: ([^)]*)\)", capsys.readouterr().out)
    assert sorted(int(task_id) for _, task_id, _ in claims) == list(range(1, 31))  # none twice, lost races silent
    assert all(f"#{task_id}" in ready.split(", ") for _, task_id, ready in claims)
    assert {t["owner"] for t in tasks} <= {"w1", "w2", "w3"} and standin.rejected == []


def test_idle_timeout_stops_the_worker_and_tells_main(team, standin):
    team.IDLE_TIMEOUT = 0.3
    worker = spawn(team, "w1")
    worker.thread.join(timeout=5)
    assert not worker.is_running()
    assert reports(team, "w1") == ["started", "stopped: idle for 0.3s (no messages, no ready tasks)"]
    assert team.agent_state("w1") == "stopped" and standin.requests == []


def test_mail_rules_and_shutdown_while_idle(team, standin):
    standin.policy = done_policy
    team.worker_definition("w1")
    waiting = team.LEAD_FSM.request("w1", None, "queued before start")
    team.LEAD_FSM.request("w1", "shutdown", "an old stop")
    worker = spawn(team, "w1")
    assert team.LEAD_FSM.wait_response(waiting, timeout=10).content == "answered"
    assert wait_until(lambda: team.agent_state("w1") == "idle")
    assert worker.is_running()  # the shutdown from before it started is not obeyed
    assert stop(team, "w1") == "w1 acknowledged: w1 is shutting down"
    assert not worker.is_running() and reports(team, "w1")[-1] == "stopped: shutdown requested"


def test_shutdown_while_working_finishes_the_task_then_reads_mail_first(team, standin):
    gate, entered = threading.Event(), threading.Event()

    def policy(request):
        entered.set()
        gate.wait(10)
        return ["done"]
    standin.policy = policy
    team.TASKS.create("long job")
    worker = spawn(team, "w1")
    assert entered.wait(10) and team.agent_state("w1") == "working on #1"
    asked = team.LEAD_FSM.request("w1", "shutdown", "please stop")
    team.TASKS.create("next job")  # ready now, but the mail comes first
    gate.set()
    reply = team.LEAD_FSM.wait_response(asked, timeout=10)
    assert team.decode_protocol(reply.content) == ("shutdown", "w1 is shutting down")
    worker.thread.join(timeout=10)
    first, second = team.TASKS.list()
    assert (first["status"], first["result"]) == ("completed", "done")
    assert (second["status"], second["owner"]) == ("pending", "")
    assert team.agent_state("w1") == "stopped" and len(standin.requests) == 1


def test_failure_marks_failed_and_keeps_dependents_blocked(team, standin):
    standin.policy = done_policy
    team.IDLE_TIMEOUT = 0.3
    team.TASKS.create("breaks")
    team.TASKS.create("needs the first", blocked_by=[1])
    team.TASKS.create("independent")
    standin.fail_next(400)  # the first model call fails (a 400 is not retried)
    spawn(team, "w1").thread.join(timeout=10)
    failed, blocked, independent = team.TASKS.list()
    assert failed["status"] == "failed" and failed["result"].startswith("BadRequestError")
    assert (blocked["status"], blocked["owner"]) == ("pending", "")
    assert independent["status"] == "completed"
    assert team.TASKS.ready() == []
    assert standin.rejected == []


def test_identity_comes_first_again_after_compaction(team, standin, capsys):
    standin.policy = done_policy
    team.IDLE_TIMEOUT = 0.3
    for n in range(1, 4):
        team.TASKS.create(f"step {n}", blocked_by=[n - 1] if n > 1 else [])
    worker = team.AutonomousAgent(team.worker_definition("w1"), team.BUS, team.TASKS)
    team.WORKER_CONTEXT_LIMIT = team.estimated_tokens(worker.history) + 40  # one task is enough to pass it
    worker.start()
    worker.thread.join(timeout=10)
    assert "history compacted" in capsys.readouterr().out
    for request in standin.requests:
        identity = request["messages"][0]["content"][0]["text"]
        assert identity.startswith("<identity>You are 'w1' (autonomous worker)") and "led by 'main'" in identity
        assert team.BUS.root.name in identity
    third = standin.requests[2]["messages"]
    assert len(third) == 1, "compacted: one user message - identity, digest, the new task"
    identity, digest, prompt = [block["text"] for block in third[0]["content"]]
    assert "task #2 step 2: completed: done #2" in digest and prompt.startswith("Task #3: step 3")
    assert standin.rejected == []


# -- Real processes racing for one board ------------------------------------------------------
def worker_process(team, url: str, name: str) -> None:
    """A forked worker: the same class and loop as a thread, with a client of its own."""
    team.client = team.Anthropic(api_key="test-key", base_url=url)
    worker = team.AutonomousAgent(team.worker_definition(name), team.BUS, team.TASKS)
    worker.start()
    worker.thread.join()


@needs_fork
def test_eight_processes_on_a_200_task_dag_run_each_task_once_in_order(team, standin):
    opened, lock = collections.Counter(), threading.Lock()

    def policy(request):
        task_id = task_prompt_id(request)
        with lock:
            opened[task_id] += 1
        return [f"done #{task_id}"]
    standin.policy = policy
    build_dag(team.TASKS, 200)
    team.IDLE_TIMEOUT, team.POLL_INTERVAL = 0.5, 0.1
    names = [f"w{n}" for n in range(8)]
    for name in names:
        team.worker_definition(name)
    procs = [FORK.Process(target=worker_process, args=(team, standin.url, name)) for name in names]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    tasks = team.TASKS.list()
    twice = sorted(task_id for task_id, count in opened.items() if count > 1)
    assert not twice, f"{len(twice)} tasks ran more than once: {twice}"
    assert sorted(opened) == list(range(1, 201)), "each task's prompt reached the model"
    assert all(t["status"] == "completed" and t["result"] == f"done #{t['id']}" for t in tasks)
    assert_dependency_order(tasks)
    assert len({t["owner"] for t in tasks}) > 1, "the work was shared"
    for name in names:
        assert reports(team, name)[-1].startswith("stopped: idle")
    assert standin.rejected == []


@needs_fork
def test_a_worker_killed_mid_task_loses_it_when_its_lease_lapses(team, standin):
    gate, entered = threading.Event(), threading.Event()

    def policy(request):
        if "teammate 'doomed'" in system_text(request):
            entered.set()
            gate.wait(20)  # stuck in its model call until the test ends
            return ["too late"]
        return ["rescued"]
    standin.policy = policy
    team.LEASE_SECONDS = 1.0  # long enough that a busy machine never costs doomed its claim early
    team.TASKS.create("job")
    team.worker_definition("doomed")
    doomed = FORK.Process(target=worker_process, args=(team, standin.url, "doomed"))
    doomed.start()
    try:
        assert entered.wait(10) and team.TASKS.get(1)["owner"] == "doomed"
        spawn(team, "rescuer")
        leases = set()
        assert wait_until(lambda: leases.add(team.TASKS.get(1)["lease_until"]) or len(leases) >= 3)
        assert team.TASKS.get(1)["owner"] == "doomed"  # alive and renewing: nobody takes it
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.join(timeout=10)
        last_lease = team.TASKS.get(1)["lease_until"]
        assert wait_until(lambda: team.TASKS.get(1)["status"] == "completed", timeout=10)
    finally:
        gate.set()
    task = team.TASKS.get(1)
    assert doomed.exitcode == -signal.SIGKILL
    assert (task["owner"], task["result"]) == ("rescuer", "rescued")
    assert task["started_at"] >= last_lease, "reclaimed only after the lease ran out"
    stop(team, "rescuer")


# -- The lead, and --worker as a learner runs it -------------------------------------------------
def test_lead_has_task_team_and_autonomous_tools_and_commands(team, standin, type_lines, capsys, workdir):
    standin.policy = ScriptedModel([
        [tool_use("task_create", {"subject": "hello"}), tool_use("team_spawn_autonomous", {"name": "w1"}),
         tool_use("team_spawn_autonomous", {"name": "../x"})],
        ["spawned"]])
    type_lines("start a worker", "/tasks", "/team list", "/inbox")
    team.IDLE_TIMEOUT = 5
    team.repl()
    out = capsys.readouterr().out
    lead_request = standin.requests[0]
    names = {tool["name"] for tool in lead_request["tools"]}
    assert {"task_create", "task_list", "team_send", "team_shutdown", "team_spawn_autonomous"} <= names
    assert "team_spawn_autonomous" in lead_request["system"]
    assert latest_results(standin.requests[1])[2]["is_error"]
    assert "s11 >> " in out and "#1 hello" in out and "w1 - autonomous worker [" in out
    assert (workdir / ".mailbox" / team.SESSION_ID / "main.jsonl").exists()  # --worker finds this session
    assert wait_until(lambda: team.TASKS.get(1)["status"] == "completed")
    stop(team, "w1")


def test_worker_flags_fail_clearly(team, capsys):
    assert team.run_worker(["s11", "--worker", "w1"]) == 2
    assert "no lead session" in capsys.readouterr().err
    team.BUS.create_mailbox("main")
    assert team.run_worker(["s11", "--worker", "w1", "--session", "nope"]) == 2
    assert "no session 'nope'" in capsys.readouterr().err
    assert team.run_worker(["s11", "--worker"]) == 2
    assert "--worker needs a value" in capsys.readouterr().err
    team.client = None
    assert team.run_worker(["s11", "--worker", "w1"]) == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err


def test_lead_and_a_worker_process_share_board_and_mailbox(team, standin, workdir):
    def policy(request):
        if "teammate 'far'" not in system_text(request):
            return ["lead"]
        if task_prompt_id(request) or steps_since_prompt(request):
            return [tool_use("write_file", {"path": "hello.txt", "content": "hi\n"})] \
                if steps_since_prompt(request) == 0 else ["wrote hello.txt"]
        return ["pong from far"]
    standin.policy = policy
    team.BUS.create_mailbox("main")  # what the lead's REPL does when it starts
    team.TASKS.create("Write hello.txt")
    env = step_env(standin, {"POLL_INTERVAL": "0.05", "IDLE_TIMEOUT": "30"})
    worker = subprocess.Popen([sys.executable, str(AGENTS / f"{STEP}.py"), "--worker", "far"], cwd=workdir,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: reports(team, "far")[:1] == ["started"], timeout=30)
        sent = team.run_team_send("far", "ping")
        assert "not running" not in sent  # it runs elsewhere: its reports say so
        with pytest.raises(ValueError, match="already running"):
            team.run_team_spawn_autonomous("far")  # a second "far" would share its mailbox
        asked = re.search(r"Sent message (\w+)", sent).group(1)
        assert team.LEAD_FSM.wait_response(asked, timeout=10).content == "pong from far"
        assert wait_until(lambda: team.TASKS.get(1)["status"] == "completed", timeout=10)
        stop_id = team.LEAD_FSM.request("far", "shutdown", "please stop")
        assert team.LEAD_FSM.wait_response(stop_id, timeout=10) is not None
        out, err = worker.communicate(timeout=10)
    finally:
        worker.kill()
    assert worker.returncode == 0, err
    assert (workdir / "hello.txt").read_text() == "hi\n"
    assert team.TASKS.get(1)["owner"] == "far" and "[far] claimed #1 Write hello.txt" in out
    assert f"joined session {team.SESSION_ID}" in out
    assert team.run_team_list() == "far - autonomous worker [stopped]"
    assert standin.rejected == []


def test_demo_scenario_as_a_subprocess(run_step, standin, workdir):
    demo = load_demo(AGENTS / f"{STEP}.py")
    standin.policy = demo.policy
    done = run_step(STEP, "\n".join(demo.PROMPTS) + "\n", env=demo.DEMO_ENV, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    claims = re.findall(r"\[(alice|bob)\] claimed #(\d) ", out)
    assert sorted(task_id for _, task_id in claims) == ["1", "2", "3", "4", "5"]
    assert "alice - autonomous worker [stopped]" in out and "bob - autonomous worker [stopped]" in out
    assert "Team message from alice [status]: stopped: idle for 1s" in out
    tasks = [json.loads(p.read_text()) for p in sorted((workdir / ".tasks").glob("task_*.json"))]
    assert all(t["status"] == "completed" and t["owner"] in ("alice", "bob") for t in tasks) and len(tasks) == 5
    assert_dependency_order(tasks)
    guide = (workdir / "guide.txt").read_text()
    assert guide.splitlines() == [(workdir / name).read_text().strip() for name in demo.GUIDE_PARTS]
    assert standin.rejected == []
