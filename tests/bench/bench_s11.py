"""Benchmark for s11's autonomous workers (not collected by pytest).

Run from the repository root:  python tests/bench/bench_s11.py [--tasks 200] [--poll 0.05] [--task-ms 0]

For 1, 2, 4 and 8 worker processes (forked, so the SDK is imported once), each running
s11's AutonomousAgent against the local stand-in with a scripted model that finishes every
task at once, measures:
- wall time until the whole DAG is completed;
- how busy the board lock was (share of the wall time someone held it);
- the share of a worker's time spent waiting for the lock and holding it, and in model calls.
Everything runs in a temporary folder. POSIX only (fork and flock).
"""

import argparse
import contextlib
import importlib.util
import multiprocessing
import os
import platform
import random
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
sys.path.insert(0, str(AGENTS))

from offline import StandIn  # noqa: E402


MODEL_SECONDS = 0.0  # --task-ms: how long the scripted "model" takes per task


def finish_at_once(request: dict) -> list:
    time.sleep(MODEL_SECONDS)  # a stand-in for model latency; it costs no CPU
    content = request["messages"][-1]["content"]
    last = content if isinstance(content, str) else content[-1].get("text", "")
    found = re.match(r"Task #(\d+):", last)
    return [f"done #{found.group(1)}" if found else "ok"]


def load_script(url: str):
    os.environ.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="bench")
    spec = importlib.util.spec_from_file_location("s11_autonomous", AGENTS / "s11_autonomous.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_dag(board, count: int, seed: int = 11) -> None:
    """Eight roots, then tasks that each wait for 0-3 of the 30 tasks before them."""
    rng = random.Random(seed)
    for n in range(1, count + 1):
        earlier = range(max(1, n - 30), n)
        blockers = rng.sample(earlier, k=min(len(earlier), rng.choice([0, 1, 2, 3]))) if n > 8 else []
        board.create(f"job {n}", blocked_by=blockers)


def instrument(s11, board_lock: Path, events: list, model_calls: list) -> None:
    """Record (start, operation, waited, held) for every board-lock use, and the time of every model turn."""
    original_lock, original_turn = s11.file_lock, s11.teammate_turn
    operation = {"name": "other"}  # which board method holds the lock (the worker thread is the only user)

    def labelled(name: str, method):
        def call(*args, **kwargs):
            operation["name"] = name
            try:
                return method(*args, **kwargs)
            finally:
                operation["name"] = "other"
        return call

    for name in ("ready", "claim", "update"):
        setattr(s11.TaskManager, name, labelled(name, getattr(s11.TaskManager, name)))

    @contextlib.contextmanager
    def timed_lock(path: Path):
        if path != board_lock:  # mailbox locks are not the board's
            with original_lock(path):
                yield
            return
        start, asked = time.time(), time.perf_counter()
        with original_lock(path):
            got = time.perf_counter()
            try:
                yield
            finally:
                events.append((start, operation["name"], got - asked, time.perf_counter() - got))

    def timed_turn(*args):
        start = time.perf_counter()
        try:
            return original_turn(*args)
        finally:
            model_calls.append(time.perf_counter() - start)

    s11.file_lock, s11.teammate_turn = timed_lock, timed_turn


def worker(s11, url: str, root: str, name: str, gate, results) -> None:
    s11.client = s11.Anthropic(api_key="bench", base_url=url)  # never share sockets across a fork
    sys.stdout = open(os.devnull, "w")  # the workers' own log lines would bury the table
    board = s11.TaskManager(Path(root) / ".tasks")
    events, model_calls = [], []
    instrument(s11, board.lock_path, events, model_calls)
    definition = {"name": name, "role": "bench worker", "system_prompt": "Finish tasks."}
    agent = s11.AutonomousAgent(definition, s11.MessageBus(Path(root) / ".mailbox" / "bench"), board)
    gate.wait()
    agent.start()
    agent.thread.join()
    results.put((name, events, model_calls))


def run(s11, url: str, processes: int, count: int) -> dict:
    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="bench-s11-") as root:
        board = s11.TaskManager(Path(root) / ".tasks")
        build_dag(board, count)
        gate, results = context.Barrier(processes + 1), context.Queue()
        procs = [context.Process(target=worker, args=(s11, url, root, f"w{n}", gate, results))
                 for n in range(processes)]
        for proc in procs:
            proc.start()
        gate.wait()
        go = time.time()
        collected = [results.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        tasks = board.list()
        assert all(t["status"] == "completed" for t in tasks), "the board did not finish"
    done = max(datetime.fromisoformat(t["updated_at"]).timestamp() for t in tasks)
    wall = done - go
    events = [e for _, worker_events, _ in collected for e in worker_events if e[0] < done]  # before the idle tail
    waited, held = sum(e[2] for e in events), sum(e[3] for e in events)
    model = sum(sum(calls) for _, _, calls in collected)
    per_task = {op: 1000 * sum(e[3] for e in events if e[1] == op) / len(tasks) for op in ("ready", "claim", "update")}
    polls = sum(1 for e in events if e[1] == "ready") / len(tasks)
    return {"wall": wall, "lock_busy": held / wall, "waiting": waited / (processes * wall),
            "holding": held / (processes * wall), "model": model / (processes * wall),
            "per_task": per_task, "polls": polls}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--poll", type=float, default=0.05, help="POLL_INTERVAL of the workers, seconds")
    parser.add_argument("--task-ms", type=float, default=0, help="simulated model time per task (default: none)")
    args = parser.parse_args()
    global MODEL_SECONDS
    MODEL_SECONDS = args.task_ms / 1000
    if not hasattr(os, "fork"):
        sys.exit("this benchmark forks its workers: run it on Linux or macOS")
    print(f"python {platform.python_version()} on {platform.system()}, {os.cpu_count()} cores "
          f"(shared machine: figures are indicative)")
    work = f"each task one model call of {args.task_ms:g} ms" if args.task_ms else "trivial tasks (one model call each)"
    print(f"{args.tasks}-task DAG (8 roots, 0-3 blockers each), {work}, "
          f"POLL_INTERVAL={args.poll}s; the stand-in runs in this process")
    with StandIn(finish_at_once) as server:
        s11 = load_script(server.url)
        s11.POLL_INTERVAL, s11.IDLE_TIMEOUT = args.poll, 0.5
        print("  workers   wall  lock busy | per worker: waiting holding in model | lock held per task, ms:"
              " ready() (calls) claim update")
        for processes in (1, 2, 4, 8):
            r = run(s11, server.url, processes, args.tasks)
            ms = r["per_task"]
            print(f"  {processes:>7} {r['wall']:5.2f}s {r['lock_busy']:9.0%}  | {r['waiting']:19.0%} "
                  f"{r['holding']:7.0%} {r['model']:8.0%} | {ms['ready']:20.1f} ({r['polls']:.1f}) "
                  f"{ms['claim']:5.1f} {ms['update']:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
