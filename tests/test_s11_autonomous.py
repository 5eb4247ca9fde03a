"""s11: autonomous teammates - the claim and its race across processes, leases and their ceiling,
owner-checked finishing, the worker loop, one agent per name, quitting without stranding tasks,
and the demo that shows the race and the crash.

The process races use fork, so the SDK is imported once; each child gets its own client
(sockets must never be shared across a fork). Workers in this process are threads, the way
team_spawn_autonomous runs them; two tests run `--worker` as a learner would.
"""

import collections
import importlib.util
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone

import pytest
from conftest import AGENTS, code_of, run_processes, step_env, wait_until

from offline import (
    QUIRKS,
    ScriptedModel,
    last_user_text,
    latest_results,
    steps_since_prompt,
    system_text,
    tool_use,
)

STEP = "s11_autonomous"
FORK = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
needs_fork = pytest.mark.skipif(FORK is None, reason="the process races use fork (POSIX)")


@pytest.fixture
def team(load_step):
    module = load_step(STEP)
    module.TEAM_TIMEOUT = 10  # a hung worker fails the test instead of hanging it
    module.POLL_SECONDS = 0.05
    module.IDLE_TIMEOUT = 30  # tests that want the idle stop set their own
    yield module
    for worker in module.RUNNING.values():
        worker.stopping = True  # leftovers end after their current wait


def task_prompt_id(request: dict) -> int | None:
    """The task id when this request opens a task: its last text is the 'Task #N:' prompt."""
    found = re.findall(r"(?m)^Task #(\d+):", last_user_text(request))
    return int(found[-1]) if found and steps_since_prompt(request) == 0 else None


def done_policy(request: dict) -> list:
    """Workers finish every task at once with 'done #N'; anything else gets a plain answer."""
    task_id = task_prompt_id(request)
    return [f"done #{task_id}" if task_id else "answered"]


def build_dag(board, count: int, seed: int = 11) -> None:
    """Eight roots, then tasks that each wait for 0-3 of the 30 tasks before them."""
    rng = random.Random(seed)
    for n in range(1, count + 1):
        earlier = range(max(1, n - 30), n)
        board.create(
            f"job {n}",
            blocked_by=rng.sample(earlier, k=min(len(earlier), rng.choice([0, 1, 2, 3])))
            if n > 8
            else [],
        )


def assert_dependency_order(tasks: list) -> None:
    """No task started before every blocker completed (updated_at of a completed task is when)."""
    board = {t["id"]: t for t in tasks}
    for task in tasks:
        for blocker in task["blockedBy"]:
            assert task["started_at"] >= board[blocker]["updated_at"], (
                f"#{task['id']} started before #{blocker}"
            )


def reports(team, name: str) -> list:
    return [
        m["content"]
        for m in team.MAILBOX.read(team.LEAD)[0]
        if m["from"] == name and m["kind"] == "message"
    ]


def spawn(team, name: str):
    team.run_team_spawn_autonomous(name)
    return team.RUNNING[name]


def claimable_ids(team) -> list:
    """The ids a worker may claim now, lowest first, by the step's one rule."""
    tasks = {t["id"]: t for t in team.BOARD.tasks()}
    return [task_id for task_id, task in tasks.items() if team.claimable(task, tasks)]


def expire(team, task_id: int) -> None:
    """Move a claim's lease into the past, as if its worker stopped renewing it long ago."""
    task = team.BOARD.read(task_id)
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    team.write_json(team.BOARD.path(task_id), {**task, "lease_until": past})


# -- The claim: compare-and-set with a lease --------------------------------------------------
def test_claim_records_start_and_a_lease_and_is_compare_and_set(team):
    team.BOARD.create("job")
    team.BOARD.create("blocked", blocked_by=[1])
    before = datetime.now(timezone.utc)
    task = team.claim(team.BOARD, 1, "w1")
    assert (task["status"], task["owner"]) == ("in_progress", "w1")
    started, lease = (
        datetime.fromisoformat(task["started_at"]),
        datetime.fromisoformat(task["lease_until"]),
    )
    assert before <= started and timedelta(seconds=299) < lease - started <= timedelta(seconds=301)
    refusals = []
    for task_id in (1, 2):  # taken; blocked
        with pytest.raises(team.TaskError) as lost:
            team.claim(team.BOARD, task_id, "w2")
        assert code_of(lost.value) == "CONFLICT"
        refusals.append(str(lost.value))
    assert refusals == [  # what the loser found, as every refusal of the board says
        "CONFLICT: task 1 is not claimable now: it is in_progress, owned by w1, blocked by "
        "nothing; pick another",
        "CONFLICT: task 2 is not claimable now: it is pending, owned by nobody, blocked by "
        "1 (in_progress); pick another",
    ]
    assert team.BOARD.read(1)["owner"] == "w1" and claimable_ids(team) == []


def test_claiming_the_next_task_picks_the_lowest_claimable_under_one_lock_hold(team, monkeypatch):
    for n in range(1, 5):
        team.BOARD.create(f"job {n}", blocked_by=[1] if n == 3 else [])
    holds = []
    original = team.TaskBoard.locked
    monkeypatch.setattr(team.TaskBoard, "locked", lambda board: holds.append(1) or original(board))
    got = [team.claim(team.BOARD, None, f"w{n}") for n in range(4)]
    assert [task and task["id"] for task in got] == [1, 2, 4, None]  # 3 waits for 1
    assert [task and task["owner"] for task in got[:3]] == ["w0", "w1", "w2"]
    assert len(holds) == 4  # one hold each: the pick and the claim are one step, never two


def test_threads_claiming_the_next_task_at_once_never_collide(team):
    for n in range(40):
        team.BOARD.create(f"job {n}")
    won = collections.defaultdict(list)
    gate = threading.Barrier(4)

    def worker(name):
        gate.wait()
        while task := team.claim(team.BOARD, None, name):
            won[name].append(task["id"])

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(i for ids in won.values() for i in ids) == list(range(1, 41))
    assert {t["owner"] for t in team.BOARD.tasks()} == set(won)


def test_an_expired_lease_makes_the_task_claimable_and_the_old_owner_loses_it(team):
    team.BOARD.create("job")
    team.BOARD.create("by hand")
    team.claim(team.BOARD, 1, "slow")
    team.BOARD.update(2, status="in_progress")  # no lease: set by hand, never taken away
    expire(team, 1)
    assert claimable_ids(team) == [1]
    assert team.claim(team.BOARD, 1, "rescuer")["owner"] == "rescuer"
    assert team.finish(team.BOARD, 1, "slow", "completed", "mine") is False  # no longer its claim
    assert team.renew(team.BOARD, 1, "slow") is False  # nor can it renew its way back
    assert team.finish(team.BOARD, 1, "rescuer", "completed", "ok") is True
    done = team.BOARD.read(1)
    assert (done["status"], done["owner"], done["result"]) == ("completed", "rescuer", "ok")
    assert team.renew(team.BOARD, 1, "rescuer") is False  # completed: nobody's claim now


def test_the_heartbeat_renews_the_lease_until_the_work_ends(team):
    team.LEASE_SECONDS = 0.6  # a beat every 0.2 s; a stall of 0.4 s would be needed to lose it
    team.BOARD.create("job")
    team.claim(team.BOARD, 1, "w1")
    seen = set()
    with team.heartbeat(team.BOARD, 1, "w1"):
        assert wait_until(lambda: seen.add(team.BOARD.read(1)["lease_until"]) or len(seen) >= 3)
        assert claimable_ids(team) == []  # renewed in time: never up for grabs
    last = team.BOARD.read(1)["lease_until"]
    assert wait_until(lambda: claimable_ids(team) != [])  # no more beats: it lapses
    assert team.BOARD.read(1)["lease_until"] == last


def test_a_task_past_its_ceiling_is_no_longer_renewed(team, capsys):
    """A worker stuck on a task (a hung tool, a daemon) must not keep its claim forever."""
    team.LEASE_SECONDS, team.TASK_CEILING = 0.3, 0.5
    team.BOARD.create("stuck")
    team.claim(team.BOARD, 1, "w1")
    with team.heartbeat(team.BOARD, 1, "w1"):
        assert wait_until(lambda: claimable_ids(team) != [])  # while still "working"
    assert "ran past its 0.5s ceiling" in capsys.readouterr().out


def test_the_heartbeat_says_when_the_claim_is_no_longer_its_own(team, monkeypatch):
    """Taken over while the work still runs: the worker hears it now, not at the end."""
    lines = []
    monkeypatch.setattr(team, "notify", lines.append)
    team.LEASE_SECONDS = 0.3  # a beat every 0.1 s
    team.BOARD.create("job")
    team.claim(team.BOARD, 1, "w1@s")
    with team.heartbeat(team.BOARD, 1, "w1@s"):
        with team.BOARD.locked():  # taken over, as after a lapsed lease: one change, no race
            task = team.BOARD.read(1)
            team.write_json(team.BOARD.path(1), {**task, "owner": "w2", "claimed_by": "w2@s"})
        assert wait_until(lambda: any("no longer mine" in line for line in lines))
    assert lines == ["[w1@s] #1 is no longer mine: stopped renewing it"]
    assert team.BOARD.read(1)["claimed_by"] == "w2@s"


@pytest.mark.parametrize("sender,kind", [("../evil", "message"), (None, "message"), ("a", "x")])
def test_the_mailbox_refuses_a_bad_sender_or_kind_and_names_it(team, sender, kind):
    with pytest.raises(ValueError, match=r"invalid sender|got kind 'x'"):
        team.MAILBOX.send("lead", sender, "hi", kind)
    assert not team.MAILBOX.path("lead").exists()


def test_release_gives_back_every_claim_of_the_named_agents_at_once(team):
    for n in range(4):
        team.BOARD.create(f"job {n}")
    team.claim(team.BOARD, 1, "a")
    team.claim(team.BOARD, 2, "b")
    team.claim(team.BOARD, 3, "c")
    assert team.release(team.BOARD, {"a", "b"}) == [1, 2]
    assert [(t["status"], t["owner"]) for t in team.BOARD.tasks()] == [
        ("pending", ""),
        ("pending", ""),
        ("in_progress", "c"),
        ("pending", ""),
    ]


def test_alice_of_one_session_going_idle_leaves_alice_of_another_her_task(team, standin):
    """Today release() matched the bare name: the idle alice gave back the task the busy alice was
    running, its result was dropped, and the job ran twice."""
    gate, entered = threading.Event(), threading.Event()

    def policy(request):
        entered.set()
        gate.wait(10)
        return ["done"]

    standin.policy = policy
    team.IDLE_TIMEOUT = 0.3
    team.BOARD.create("long job")
    other = team.Mailbox(team.MAILBOX.root.parent / "other-session")  # a second lead, same board
    entry = {"name": "alice", "role": "autonomous worker", "prompt": "Work."}
    busy = team.AutonomousAgent(entry, other, team.BOARD)
    busy.thread.start()
    try:
        assert entered.wait(10)
        idle = spawn(team, "alice")  # the same name in this session: another mailbox, so allowed
        idle.thread.join(timeout=10)
        assert reports(team, "alice")[-1].startswith("stopped: idle")
        task = team.BOARD.read(1)
        assert (task["status"], task["owner"]) == ("in_progress", "alice")  # today: pending
        assert task["claimed_by"] == "alice@other-session"
        assert not team.finish(team.BOARD, 1, idle.owner, "completed", "not mine")
        assert not team.renew(team.BOARD, 1, idle.owner)
    finally:
        gate.set()
    busy.thread.join(timeout=10)
    assert (team.BOARD.read(1)["status"], team.BOARD.read(1)["result"]) == ("completed", "done")
    assert len(standin.requests) == 1  # the job ran once


def claim_all(team, worker, results):
    ids = list(range(1, 201))
    random.Random(worker).shuffle(ids)
    won = []
    for task_id in ids:
        try:
            won.append(team.claim(team.BOARD, task_id, f"w{worker}")["id"])
        except team.TaskError as error:
            assert code_of(error) == "CONFLICT"
    results.put((f"w{worker}", won))


@needs_fork
def test_eight_processes_claiming_at_once_claim_each_task_exactly_once(team):
    for n in range(200):
        team.BOARD.create(f"job {n}")
    outcome = run_processes(
        claim_all, lambda n: (team, n)
    )  # forked: each process starts with this module
    claims = [(owner, task_id) for owner, won in outcome for task_id in won]
    assert sorted(task_id for _, task_id in claims) == list(range(1, 201))
    owners = {t["id"]: t["owner"] for t in team.BOARD.tasks()}
    assert all(owners[task_id] == owner for owner, task_id in claims)


# -- The worker loop, in threads ------------------------------------------------------------
def test_threads_claim_in_dependency_order_once_each_with_results(team, standin, capsys):
    standin.policy = done_policy
    build_dag(team.BOARD, 30)
    team.IDLE_TIMEOUT = 0.3
    workers = [spawn(team, name) for name in ("w1", "w2", "w3")]
    for worker in workers:
        worker.thread.join(timeout=20)
    tasks = team.BOARD.tasks()
    assert all(t["status"] == "completed" and t["result"] == f"done #{t['id']}" for t in tasks)
    assert_dependency_order(tasks)
    opened = collections.Counter(filter(None, map(task_prompt_id, standin.requests)))
    assert opened == {n: 1 for n in range(1, 31)}
    out = capsys.readouterr().out
    assert sorted(int(n) for n in re.findall(r"\[w\d\] claimed #(\d+) ", out)) == list(range(1, 31))
    for loser, task_id, winner in re.findall(
        r"\[(w\d)\] lost #(\d+) to (\w+)", out
    ):  # every lost race is said
        assert winner != loser and winner in ("w1", "w2", "w3")
    assert {t["owner"] for t in tasks} <= {"w1", "w2", "w3"} and standin.rejected == []


def test_an_idle_worker_waits_for_the_board_to_change_not_for_its_poll(team, standin, monkeypatch):
    """POLL_SECONDS is long here: only the generation moving can wake the worker in time."""
    standin.policy = done_policy
    team.POLL_SECONDS = 60
    looks = []
    original = team.claim
    monkeypatch.setattr(team, "claim", lambda *args: looks.append(args) or original(*args))
    worker = spawn(team, "w1")
    try:
        assert wait_until(lambda: len(looks) >= 1)  # it looked once, found nothing, and waits
        team.BOARD.create("late job")
        assert wait_until(lambda: team.BOARD.read(1)["status"] == "completed", timeout=30)
        assert len(looks) <= 4  # woken by the change, not by rescanning the board
    finally:
        worker.stopping = True
        team.BOARD.create("wake up")  # a change ends its wait at once
        worker.thread.join(timeout=30)


def test_no_worker_recreates_a_deleted_workspace(team, tmp_path):
    gone = tmp_path / "workspace"
    gone.mkdir()
    board = team.TaskBoard(gone / ".tasks")
    board.create("job")
    shutil.rmtree(gone)  # the folder is removed under a worker still running
    with pytest.raises(FileNotFoundError):
        board.create("another")
    with pytest.raises(FileNotFoundError):
        team.Mailbox(gone / ".mailbox" / "session").send(team.LEAD, "w1", "done")
    with pytest.raises(FileNotFoundError):
        team.hold_name(team.Mailbox(gone / ".mailbox" / "session"), "w1")
    assert not gone.exists()


def test_the_demo_stops_every_worker_still_alive(team):
    spec = importlib.util.spec_from_file_location("s11_demo", AGENTS / "demos" / f"{STEP}.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sleeper.reader = threading.Thread(target=lambda: None)
    sleeper.reader.start()
    demo.stop_all({"slow": sleeper})
    assert sleeper.poll() is not None


def test_idle_timeout_stops_the_worker_and_tells_the_lead(team, standin):
    team.IDLE_TIMEOUT = 0.3
    worker = spawn(team, "w1")
    worker.thread.join(timeout=5)
    assert not worker.thread.is_alive() and not team.is_running("w1")  # its name is free again
    assert reports(team, "w1") == [
        "started: I take ready tasks from the board",
        "stopped: idle for 0.3s (no mail, nothing claimable)",
    ]
    assert standin.requests == []


def test_shutdown_while_working_finishes_the_task_then_reads_mail_first(team, standin):
    gate, entered = threading.Event(), threading.Event()

    def policy(request):
        entered.set()
        gate.wait(10)
        return ["done"]

    standin.policy = policy
    team.BOARD.create("long job")
    spawn(team, "w1")
    assert entered.wait(10) and team.BOARD.read(1)["owner"] == "w1"
    team.BOARD.create("next job")  # claimable now, but the mail comes first
    answer = []
    asking = threading.Thread(target=lambda: answer.append(team.run_team_shutdown("w1")))
    asking.start()
    assert wait_until(lambda: team.MAILBOX.size("w1") > 0)
    gate.set()
    asking.join(timeout=15)
    assert answer == ["w1 acknowledged: w1 is shutting down"]
    first, second = team.BOARD.tasks()
    assert (first["status"], first["result"]) == ("completed", "done")
    assert (second["status"], second["owner"]) == ("pending", "")
    assert len(standin.requests) == 1


def test_a_failed_task_is_marked_failed_and_not_carried_into_the_next(team, standin):
    """A failed task #1 must not be merged into the next task's prompt."""
    standin.policy = done_policy
    team.IDLE_TIMEOUT = 0.3
    team.BOARD.create("breaks")
    team.BOARD.create("needs the first", blocked_by=[1])
    team.BOARD.create("independent")
    standin.fail_next(400)  # the first model call fails (a 400 is not retried)
    spawn(team, "w1").thread.join(timeout=10)
    failed, blocked, independent = team.BOARD.tasks()
    assert failed["status"] == "failed" and failed["result"].startswith("BadRequestError")
    assert (blocked["status"], blocked["owner"]) == ("pending", "")
    assert independent["status"] == "completed"
    (last,) = standin.requests[-1]["messages"]  # a clean context: task #1 is not in it
    identity, digest, prompt = [block["text"] for block in last["content"]]
    assert "task #1 breaks: failed: BadRequestError" in digest  # only as a line of the digest
    assert prompt.startswith("Task #3: independent") and "Task #1" not in prompt
    assert standin.rejected == []


def test_a_corrupt_task_file_stops_every_worker_cleanly_and_the_lead_hears_why(
    team, standin, capsys, monkeypatch
):
    """Today each worker died with a traceback: release() in its finally raised the same error
    again, so the lead never got "stopped", and quitting the lead raised it once more."""
    crashes = []
    monkeypatch.setattr(threading, "excepthook", crashes.append)
    team.BOARD.create("fine")
    team.BOARD.create("broken")
    broken = team.BOARD.path(2)
    broken.write_text("{not json")  # e.g. a hand edit gone wrong
    for worker in [spawn(team, "w1"), spawn(team, "w2")]:
        worker.thread.join(timeout=10)
    session = team.MAILBOX.root.name
    assert team.run_worker(["s11", "--worker", "w3", "--session", session]) == 0  # as a process
    assert crashes == [] and standin.requests == []
    out = capsys.readouterr().out.splitlines()
    for name in ("w1", "w2", "w3"):
        [line] = [line for line in out if line.startswith(f"[{name}] stopped: ")]
        reason = f"the task board cannot be read: {broken}: cannot be read as JSON"
        assert line.startswith(f"[{name}] stopped: {reason}")
        assert reports(team, name)[-1] == line.removeprefix(f"[{name}] ")  # the lead: the same
    team.stop_autonomous()  # quitting the lead on the same board: said, not raised
    assert capsys.readouterr().out.startswith("[team] workers' claims not given back")
    assert broken.read_text() == "{not json"  # left alone for a person to fix


def test_every_task_starts_from_who_i_am_and_what_i_have_done(team, standin):
    standin.policy = done_policy
    team.IDLE_TIMEOUT = 0.3
    for n in range(1, 4):
        team.BOARD.create(f"step {n}", blocked_by=[n - 1] if n > 1 else [])
    worker = team.AutonomousAgent(
        {"name": "w1", "role": "autonomous worker", "prompt": "Work."}, team.MAILBOX, team.BOARD
    )
    worker.thread.start()
    worker.thread.join(timeout=10)
    assert [t["status"] for t in team.BOARD.tasks()] == ["completed"] * 3
    assert len(standin.requests) == 3
    for n, request in enumerate(standin.requests, start=1):
        assert len(request["messages"]) == 1, "a clean context: one user message per task"
        identity, digest, prompt = [block["text"] for block in request["messages"][0]["content"]]
        assert identity.startswith("<identity>You are 'w1' (autonomous worker)")
        assert "led by 'lead'" in identity and team.MAILBOX.root.name in identity
        assert prompt.startswith(f"Task #{n}: step {n}")
        done = [f"task #{k} step {k}: completed: done #{k}" for k in range(1, n)]
        assert all(line in digest for line in done) and digest.count("task #") == n - 1
    assert standin.rejected == []


# -- One agent per name, and nothing stranded on exit --------------------------------------------
def test_a_name_already_running_is_refused_in_threads_and_processes(team, standin):
    standin.policy = done_policy
    spawn(team, "w1")
    with pytest.raises(ValueError, match="already running"):
        spawn(team, "w1")
    with pytest.raises(ValueError, match="already running"):
        team.run_team_spawn("w1", "role", "prompt")  # an s09 teammate of the same name too


@needs_fork
def test_quitting_the_lead_gives_back_its_workers_claims(team, standin, capsys):
    gate = threading.Event()
    standin.policy = lambda request: gate.wait(10) and ["too late"]
    team.BOARD.create("long job")
    spawn(team, "w1")
    assert wait_until(lambda: team.BOARD.read(1)["owner"] == "w1")
    try:
        team.stop_autonomous()  # what main() does when the REPL returns
    finally:
        gate.set()
    assert team.BOARD.read(1)["status"] == "pending" and team.BOARD.read(1)["owner"] == ""
    assert "[team] gave back [1] to the board" in capsys.readouterr().out


def worker_process(team, url: str, name: str) -> None:
    """A forked worker: the same class and loop as a thread, with a client of its own."""
    team.client = team.Anthropic(api_key="test-key", base_url=url)
    worker = team.AutonomousAgent(
        {"name": name, "role": "autonomous worker", "prompt": team.WORKER_PROMPT},
        team.MAILBOX,
        team.BOARD,
    )
    worker.thread.start()
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
    build_dag(team.BOARD, 200)
    team.IDLE_TIMEOUT, team.POLL_SECONDS = 0.5, 0.1
    names = [f"w{n}" for n in range(8)]
    procs = [FORK.Process(target=worker_process, args=(team, standin.url, name)) for name in names]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    tasks = team.BOARD.tasks()
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
    team.BOARD.create("job")
    doomed = FORK.Process(target=worker_process, args=(team, standin.url, "doomed"))
    doomed.start()
    try:
        assert entered.wait(10) and team.BOARD.read(1)["owner"] == "doomed"
        with pytest.raises(ValueError, match="already running"):
            spawn(team, "doomed")  # the name is held by the other process
        spawn(team, "rescuer")
        leases = set()
        assert wait_until(lambda: leases.add(team.BOARD.read(1)["lease_until"]) or len(leases) >= 3)
        assert team.BOARD.read(1)["owner"] == "doomed"  # alive and renewing: nobody takes it
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.join(timeout=10)
        last_lease = team.BOARD.read(1)["lease_until"]
        assert wait_until(lambda: team.BOARD.read(1)["status"] == "completed")
    finally:
        gate.set()
    task = team.BOARD.read(1)
    assert doomed.exitcode == -signal.SIGKILL and not team.is_running(
        "doomed"
    )  # the OS freed its name
    assert (task["owner"], task["result"]) == ("rescuer", "rescued")
    assert task["started_at"] >= last_lease, "reclaimed only after the lease ran out"


# -- The lead, and --worker as a learner runs it -------------------------------------------------
def test_lead_has_task_team_and_autonomous_tools_and_commands(team, standin, type_lines, capsys):
    lead = ScriptedModel(
        [
            [
                tool_use("task_create", {"subject": "hello"}),
                tool_use("team_spawn_autonomous", {"name": "w1"}),
                tool_use("team_spawn_autonomous", {"name": "../x"}),
            ],
            ["spawned"],
        ]
    )  # w1 may call before the lead's second request: each is answered by who asks
    standin.policy = lambda request: (
        ["done #1"] if "teammate 'w1'" in system_text(request) else lead(request)
    )
    type_lines("start a worker", "/tasks", "/team", "/inbox")
    team.repl()
    out = capsys.readouterr().out
    lead_request, lead_results = [
        r for r in standin.requests if "teammate '" not in system_text(r)
    ][:2]
    assert {"task_create", "task_list", "team_send", "team_shutdown", "team_spawn_autonomous"} <= {
        tool["name"] for tool in lead_request["tools"]
    }
    assert "team_spawn_autonomous" in lead_request["system"]
    assert latest_results(lead_results)[2]["is_error"]
    assert "s11 >> " in out and "#1 hello" in out and "w1 - autonomous worker [running]" in out
    assert wait_until(lambda: team.BOARD.read(1)["status"] == "completed")


def test_worker_flags_fail_clearly(team, capsys):
    assert team.run_worker(["s11", "--worker", "w1"]) == 2
    assert "no lead session" in capsys.readouterr().err
    team.MAILBOX.root.mkdir(parents=True)
    assert team.run_worker(["s11", "--worker", "w1", "--session", "nope"]) == 2
    assert "no lead session" in capsys.readouterr().err
    assert team.run_worker(["s11", "--worker"]) == 2
    assert "invalid worker name None" in capsys.readouterr().err
    team.client = None
    assert team.run_worker(["s11", "--worker", "w2"]) == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err
    assert "w2" not in team.ROSTER.load(), "refused before the roster is written"


def test_worker_lead_and_a_mailbox_folder_that_is_a_file_are_refused_in_one_line(
    team, standin, capsys, workdir
):
    """Today `--worker lead` started and read the lead's own mail, a session that is a file ended in
    a traceback, and a .mailbox that is a file was called 'no lead session: start the lead'."""
    team.MAILBOX.root.mkdir(parents=True)
    team.IDLE_TIMEOUT = 0.3  # so today's `--worker lead` stops by itself
    assert team.run_worker(["s11", "--worker", "lead", "--session", team.MAILBOX.root.name]) == 2
    refused = "[worker] 'lead' is the lead's own mailbox; pick another name\n"
    assert capsys.readouterr().err == refused
    assert not team.MAILBOX.path(team.LEAD).exists()  # it never started: nothing sent, nothing read
    (workdir / ".mailbox" / "stray").write_text("a file, not a session")
    assert team.run_worker(["s11", "--worker", "w1", "--session", "stray"]) == 2
    no_session = (
        f"[worker] no lead session in {workdir / '.mailbox'}: start the lead first, "
        "or pass --session\n"
    )
    assert capsys.readouterr().err == no_session
    assert team.run_worker(["s11", "--worker", "w1"]) == 0  # the newest entry is the file: skipped
    assert f"[w1] joined session {team.MAILBOX.root.name}" in capsys.readouterr().out
    shutil.rmtree(workdir / ".mailbox")
    (workdir / ".mailbox").write_text("a file where the sessions go")
    assert team.run_worker(["s11", "--worker", "w1"]) == 2
    is_a_file = f"[worker] {workdir / '.mailbox'} is a file, not the folder of lead sessions"
    assert capsys.readouterr().err == is_a_file + ": move it away\n"
    assert standin.requests == []


def test_worker_processes_share_the_board_refuse_a_twin_and_give_back_on_ctrl_c(
    team, standin, workdir
):
    """A learner's terminals: the lead, `--worker far`, and a second `--worker far` by mistake."""
    started = threading.Event()

    def policy(request):
        if "teammate 'far'" not in system_text(request):
            return ["lead"]
        if task_prompt_id(request):
            started.set()
            return [
                tool_use("bash", {"command": "echo $$ > far.pid; sleep 30"})
            ]  # a long job, interrupted below
        return ["pong from far"]

    standin.policy = policy
    team.MAILBOX.root.mkdir(parents=True)  # what the lead's first message does
    env = step_env(standin, {"POLL_SECONDS": "0.05", "IDLE_TIMEOUT": "30"})
    command = [
        sys.executable,
        str(AGENTS / f"{STEP}.py"),
        "--worker",
        "far",
        "--session",
        team.MAILBOX.root.name,
    ]
    worker = subprocess.Popen(
        command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert wait_until(
            lambda: reports(team, "far")[:1] == ["started: I take ready tasks from the board"],
            timeout=30,
        )
        twin = subprocess.run(
            command, cwd=workdir, env=env, capture_output=True, text=True, timeout=30
        )
        assert (
            twin.returncode == 2 and "far is already running" in twin.stderr
        )  # today: both started
        sent = team.run_team_send("far", "ping")  # it runs elsewhere: the name lock says so
        asked = sent.split()[2]
        assert team.MAILBOX.await_reply(team.LEAD, asked, 0, 10)[0]["content"] == "pong from far"
        team.BOARD.create("a long job")
        assert started.wait(15) and wait_until(
            lambda: (workdir / "far.pid").exists() and team.BOARD.read(1)["owner"]
        )
        worker.send_signal(signal.SIGINT)  # Ctrl-C in its terminal
        out, err = worker.communicate(timeout=15)
    finally:
        worker.kill()
    assert worker.returncode == 130, err
    assert (
        "[far] stopped: interrupted (Ctrl-C); gave back [1]" in out
        and "[far] claimed #1 a long job" in out
    )
    assert (team.BOARD.read(1)["status"], team.BOARD.read(1)["owner"]) == ("pending", "")
    assert (
        reports(team, "far")[-1] == "stopped: interrupted (Ctrl-C)"
    )  # the lead is told, as for any stop
    shell = int(
        (workdir / "far.pid").read_text()
    )  # its command died with it: given back, the task runs once
    assert wait_until(
        lambda: not os.path.exists(f"/proc/{shell}") or " Z " in open(f"/proc/{shell}/stat").read()
    )
    assert standin.rejected == []


def test_the_lead_opens_its_session_at_start_so_workers_can_join_it_also_when_traced(
    run_in_process, workdir
):
    for args in ([], ["--trace", "lead.html"]):  # with --trace the step's own main() still runs
        done = run_in_process(STEP, "q\n", args=args)
        assert done.returncode == 0, done.stderr
    assert len(list((workdir / ".mailbox").iterdir())) == 2 and (workdir / "lead.html").exists()


def test_asking_who_runs_creates_nothing_and_a_bad_name_is_an_error_not_a_running_agent(team):
    assert not team.is_running("nobody") and not team.MAILBOX.root.exists()
    with pytest.raises(ValueError, match="invalid"):
        team.run_team_spawn("../x", "coder", "you write code")


def test_a_restarted_worker_starts_after_the_mail_of_its_earlier_life(team, standin, capsys):
    """Mail reaches a name only while it runs, so what is already there was for the one before."""
    team.MAILBOX.root.mkdir(parents=True)
    team.MAILBOX.send(
        "w9", team.LEAD, "please stop", "request", "shutdown"
    )  # answered by an earlier w9
    team.MAILBOX.send("w9", team.LEAD, "say hi", "request")
    team.IDLE_TIMEOUT = 0.3
    standin.policy = lambda request: ["hi"]
    assert team.run_worker(["s11", "--worker", "w9", "--session", team.MAILBOX.root.name]) == 0
    assert reports(team, "w9")[-1].startswith("stopped: idle")  # not "shutdown requested" at once
    assert standin.requests == [] and "[w9] working on" not in capsys.readouterr().out


# -- The demo: the race and the crash, on screen ------------------------------------------
def test_offline_demo_shows_claims_a_kill_a_takeover_and_the_naive_race(offline_demo):
    done = offline_demo(STEP).done
    out = done.stdout
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    for name in ("alice", "bob", "carol"):
        assert f"[{name}] joined session" in out  # three real processes
    assert re.search(r"\[carol\] claimed #\d Job \d", out)
    killed = re.search(r"\[demo\] killed carol \(pid \d+\) with SIGKILL while it held #(\d)", out)
    assert killed, "\n".join(
        line for line in out.splitlines() if line.startswith(("[demo]", "[carol]"))
    )
    killed = int(killed.group(1))
    assert re.search(
        rf"\[(alice|bob)\] claimed #{killed} Job {killed} - taken over from carol", out
    )
    for loser, task_id, winner in re.findall(r"\[(\w+)\] lost #(\d+) to (\w+)", out):
        assert {loser, winner} <= {"alice", "bob", "carol"} and loser != winner
    assert (
        "[demo] summary: 6 of 6 jobs completed, each exactly once: True; "
        "the job carol held when killed "
        "was taken over after its lease ran out: True" in out
    )
    assert re.search(
        r"naive claim .*: alice, bob, carol each believe #1 is theirs - it would run 3 times", out
    )
    assert re.search(
        r"claim\(\) .*: (\w+) won #1; \w+ lost #1 to \1; \w+ lost #1 to \1 - it runs once", out
    )
    assert len(re.findall(r"\[race\] \w+: CONFLICT: task 1 is not claimable now: it is "
                          r"in_progress, owned by \w+, blocked by nothing", out)) == 2
    assert "0 rejected by the validator" in out


# -- Every reply a real endpoint sends, in a worker's loop --------------------------------
@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_a_worker_ends_a_quirky_task_honestly_and_goes_on_with_the_next(
    team, standin, workdir, quirk
):
    def policy(request):
        if latest_results(request):
            return ["done #1"]
        if task_prompt_id(request) == 1:
            return QUIRKS[quirk](tool_use("bash", {"command": "echo ran > marker.txt"}))
        return done_policy(request)

    standin.policy = policy
    team.IDLE_TIMEOUT = 0.3
    team.BOARD.create("the quirky one")
    team.BOARD.create("the next one")
    spawn(team, "w1").thread.join(timeout=20)
    first, second = team.BOARD.tasks()
    assert (second["status"], second["result"]) == ("completed", "done #2")
    assert standin.rejected == []
    if quirk in ("call_under_end_turn", "unknown_stop_reason", "no_stop", "duplicate_ids"):
        assert first["status"] == "completed" and (workdir / "marker.txt").exists()  # it ran
    if quirk in ("whitespace_only", "no_usage"):
        assert first["status"] == "failed"
    if first["status"] == "completed" and first["result"] == "done #1":
        assert (workdir / "marker.txt").exists() or quirk in (
            "list_input",
            "null_input",
            "missing_name",
            "empty_name",
        )  # answered with an error
