"""Scripted model and script for the s11 offline demo (not a real model: every turn is written
here).

Three acts, all real: real worker processes, a real SIGKILL, the step's own claim().

1. The lead plans six slow jobs on the board. Three `--worker` processes (alice, bob, carol:
   the same code a learner starts in three terminals) claim them - each picks and claims the
   lowest claimable job under one hold of the board lock, so none loses a race - and each line
   they print is one event: claimed, completed, stopped.
2. The demo kills carol with SIGKILL in the middle of a job. Nobody gives her task back: her
   lease simply stops being renewed, runs out after LEASE_SECONDS, and another worker takes it
   over and finishes it. At the end every job is completed, and its result written, once.
3. The race in slow motion: three threads read one ready task at the same moment (a barrier
   lines them up), then write. A naive claim - read, check, write, no lock; it lives here, never
   in the step - lets all three believe they won: the task would run three times. The step's
   claim(), a compare-and-set under the board lock, lets exactly one win; the others' refusals
   say what they found (its status and owner).

A worker's job: sleep (the work), then append one line to results/log.txt, then answer. A worker
killed during the sleep has not appended anything; the one that takes the job over does.

On Windows (untested) bash runs in cmd.exe, which has no sleep: the job waits with ping instead,
and the kill is Popen.kill(), which is TerminateProcess there (SIGKILL elsewhere).
"""

import builtins
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from offline import last_user_text, scripted_input, steps_since_prompt, system_text, tool_use

WORKERS = ["alice", "bob", "carol"]
VICTIM = "carol"
JOBS = 6
SETTINGS = {"LEASE_SECONDS": "2", "POLL_SECONDS": "0.1", "IDLE_TIMEOUT": "1.0"}  # short, for a demo
DEADLINE = 600  # seconds for the whole worker phase: a guard against a hang, never a pace
PROMPTS = [f"Plan {JOBS} independent jobs on the board for the workers."]
WINDOWS = os.name == "nt"  # bash runs in cmd.exe there
SLOW = "ping -n 2 127.0.0.1 > nul" if WINDOWS else "sleep 0.4"  # about 1 s in cmd.exe
LOG = r"results\log.txt" if WINDOWS else "results/log.txt"


def setup(workdir: Path) -> None:
    (workdir / "results").mkdir()
    os.environ.update(SETTINGS)  # read by the script when it loads (the workers inherit them)


# -- The scripted model: the lead plans; a worker does the job it was given ---------------------
def policy(request: dict) -> list:
    if "teammate '" in system_text(request):
        return worker_turn(request)
    step = steps_since_prompt(request)
    if step == 0:
        return ["Six jobs, no dependencies: any worker may take any of them."] + [
            tool_use("task_create", {"subject": f"Job {n}", "description": f"Process batch {n}."})
            for n in range(1, JOBS + 1)
        ]
    return ["The board is ready: workers will claim the jobs themselves."]


def worker_turn(request: dict) -> list:
    prompt, step = last_user_text(request), steps_since_prompt(request)
    if "Task #" not in prompt:  # mail that is not a job (in play mode): a plain answer
        return [f"I read: {prompt!r} - I only do jobs from the board."]
    job = int(prompt.split("Task #")[-1].split(":")[0])
    me = system_text(request).split("teammate '")[1].split("'")[0]
    if step == 0:
        return [tool_use("bash", {"command": SLOW})]  # the slow part of the job
    if step == 1:  # no quotes: cmd.exe would write them into the line
        return [tool_use("bash", {"command": f"echo job {job} done by {me} >> {LOG}"})]
    return [f"job {job} processed"]


# -- The script the demo plays ------------------------------------------------------------------
def run(namespace: dict, workdir: Path, server) -> None:
    builtins.input = scripted_input(list(PROMPTS) + ["/tasks"])
    namespace["repl"]()  # act 1: the lead plans (its model is scripted above; the board is real)
    board, mailbox = namespace["BOARD"], namespace["MAILBOX"]
    mailbox.root.mkdir(parents=True, exist_ok=True)
    print(
        f"\n[demo] three worker processes join session {mailbox.root.name}: "
        f"python {Path(namespace['__file__']).name} --worker NAME --session {mailbox.root.name}"
    )
    deadline = time.monotonic() + DEADLINE  # one hang guard for the whole worker phase
    workers = {}
    try:
        workers[VICTIM] = start_worker(namespace, workdir, server, VICTIM)  # first: it gets a job
        victim_job = wait_for_a_job(board, VICTIM, deadline)
        for name in WORKERS:
            if name != VICTIM:
                workers[name] = start_worker(namespace, workdir, server, name)
        kill_in_the_middle(workers, victim_job)
        for process in workers.values():  # each stops by itself once it is idle
            process.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:  # a hang, Ctrl-C or a timeout: no worker may outlive the folder it works in
        stop_all(workers)
    summary(board, workdir, victim_job)
    naive_versus_claim(namespace, workdir)


def stop_all(workers: dict) -> None:
    """Kill every worker still alive and wait until it is gone, with its output read."""
    for process in workers.values():
        if process.poll() is None:
            process.kill()
    for process in workers.values():
        process.wait()
        process.reader.join(timeout=30)


def start_worker(namespace: dict, workdir: Path, server, name: str) -> subprocess.Popen:
    env = dict(
        os.environ,
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="offline-demo",
        PYTHONUNBUFFERED="1",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            namespace["__file__"],
            "--worker",
            name,
            "--session",
            namespace["MAILBOX"].root.name,
        ],
        cwd=workdir,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    process.reader = threading.Thread(
        target=lambda: [print(line, end="", flush=True) for line in process.stdout], daemon=True
    )
    process.reader.start()
    return process


def wait_for_a_job(board, name: str, deadline: float) -> int | None:
    """The id of the job `name` holds, once it holds one (the deadline only guards a hang)."""
    while time.monotonic() < deadline:
        held = [t for t in board.tasks() if t["status"] == "in_progress" and t["owner"] == name]
        if held:
            return held[0]["id"]
        time.sleep(0.02)
    print(f"[demo] {name} never held a job: nothing to kill")
    return None


def kill_in_the_middle(workers: dict, job: int | None) -> None:
    """Kill the victim without warning while it holds a job: nobody gives that job back."""
    if job is None:
        return
    time.sleep(0.2)  # a demo's pause, not a synchronisation: let the others join first
    workers[VICTIM].kill()  # SIGKILL on POSIX; TerminateProcess on Windows (no SIGKILL there)
    how = "TerminateProcess" if WINDOWS else "SIGKILL"
    print(
        f"[demo] killed {VICTIM} (pid {workers[VICTIM].pid}) with {how} while it held #{job}: "
        f"nobody gives that job back; its lease runs out in {SETTINGS['LEASE_SECONDS']}s",
        flush=True,
    )


def summary(board, workdir: Path, victim_job: int | None) -> None:
    tasks = board.tasks()
    log = (
        (workdir / "results" / "log.txt").read_text().splitlines()
        if (workdir / "results" / "log.txt").exists()
        else []
    )
    runs = {t["id"]: sum(line.startswith(f"job {t['id']} done") for line in log) for t in tasks}
    print("\n[demo] the board at the end (who did what varies from run to run):")
    for task in tasks:
        print(
            f"  #{task['id']} {task['subject']}: {task['status']} by {task['owner'] or 'nobody'}, "
            f"ran {runs[task['id']]} time(s)"
        )
    completed = sum(t["status"] == "completed" for t in tasks)
    once = all(n == 1 for n in runs.values())
    taken_over = (
        victim_job is not None
        and next(t for t in tasks if t["id"] == victim_job)["owner"] != VICTIM
    )
    print(
        f"[demo] summary: {completed} of {len(tasks)} jobs completed, each exactly once: {once}; "
        f"the job {VICTIM} held when killed was taken over after its lease ran out: {taken_over}"
    )


def naive_claim(board, write_json, task_id: int, owner: str, line_up: threading.Barrier) -> bool:
    """Read, check, write - and no lock. Kept here in the demo: it is the bug the step prevents."""
    task = board.read(task_id)  # 1. read
    if task["status"] != "pending" or task["owner"]:  # 2. check
        return False
    # Every worker has read "pending" before anyone writes: the window a real race hits by luck.
    line_up.wait()
    write_json(board.path(task_id), {**task, "status": "in_progress", "owner": owner})  # 3. write
    return True


def naive_versus_claim(namespace: dict, workdir: Path) -> None:
    print("\n[race] three workers reach for the same ready task at the same moment")
    for label in ("naive", "claim"):
        board = namespace["TaskBoard"](workdir / f".race-{label}")
        task_id = board.create("The contested job")["id"]
        line_up, outcome, refusals = threading.Barrier(len(WORKERS)), {}, {}

        def reach(name: str) -> None:
            if label == "naive":
                outcome[name] = naive_claim(board, namespace["write_json"], task_id, name, line_up)
                return
            line_up.wait()  # the same moment; claim() reads, checks and writes under one lock
            try:
                outcome[name] = bool(namespace["claim"](board, task_id, name))
            except namespace["TaskError"] as error:
                outcome[name] = False
                refusals[name] = str(error)

        threads = [threading.Thread(target=reach, args=(name,)) for name in WORKERS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        winners = [name for name in WORKERS if outcome.get(name)]
        owner = board.read(task_id)["owner"]
        if label == "naive":
            print(
                f"[race] naive claim (read, check, write, no lock): {', '.join(winners)} "
                f"each believe #{task_id} is theirs - it would run {len(winners)} times; "
                f"the file names only {owner}"
            )
        else:
            losers = [
                f"{name} lost #{task_id} to {owner}" for name in WORKERS if name not in winners
            ]
            print(
                f"[race] claim() (compare-and-set under the board lock): {owner} won #{task_id}; "
                f"{'; '.join(losers)} - it runs once"
            )
            for name, refusal in refusals.items():  # the refusal says what the loser found
                print(f"[race] {name}: {refusal}")
