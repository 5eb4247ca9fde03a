"""Benchmark for s11's autonomous workers (not collected by pytest).

Run from the repository root:  python tests/bench/bench_s11.py [--tasks 200] [--task-ms 50]

For 2, 4 and 8 worker processes (--workers; forked after one warm-up call, so the SDK is imported
and its reply models are built once), each running
s11's AutonomousAgent against the local stand-in with a scripted model that finishes each task in
one call, on a 200-task DAG (8 roots, then tasks waiting for 0-3 of the 30 before them), measures:
- wall time until the whole DAG is completed, for tasks whose model call takes --task-ms (a
  stand-in for model latency; it costs no CPU), and with --trivial for tasks that take none;
- for the slow tasks, the bound no schedule can beat: max(longest dependency chain, tasks /
  workers) x task time, and how far the run is from it;
- how long the board lock is held per task (every claim, renewal, finish), and how busy it was;
- what one fsync costs on this machine: s11's own atomic write of a task file (write, fsync,
  rename), so the lock's hold can be read as a number of such writes, whatever the disk.
Readers (tasks(), ready()) take no lock in s07's design, so only changes - a worker's pick and
claim, its renewals, its finish - are counted.
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

from offline import CacheLedger, StandIn  # noqa: E402

MODEL_SECONDS = {"value": 0.0}
POLL = os.getenv("POLL_SECONDS") or "1"  # the step's default: a change wakes an idle worker at once


def finish_at_once(request: dict) -> list:
    time.sleep(MODEL_SECONDS["value"])  # model latency, not CPU
    found = re.findall(
        r"(?m)^Task #(\d+):",
        "\n".join(
            b.get("text", "")
            for m in request["messages"][-1:]
            for b in m["content"]
            if isinstance(m["content"], list)
        ),
    )
    return [f"done #{found[-1]}" if found else "ok"]


def load_script(url: str):
    os.environ.update(
        ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="bench", IDLE_TIMEOUT="0.5", POLL_SECONDS=POLL
    )
    spec = importlib.util.spec_from_file_location("s11_autonomous", AGENTS / "s11_autonomous.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_dag(board, count: int, seed: int = 11) -> dict:
    """The DAG of the tests; returns each task's blockers."""
    rng = random.Random(seed)
    edges = {}
    for n in range(1, count + 1):
        earlier = range(max(1, n - 30), n)
        edges[n] = (
            rng.sample(earlier, k=min(len(earlier), rng.choice([0, 1, 2, 3]))) if n > 8 else []
        )
        board.create(f"job {n}", blocked_by=edges[n])
    return edges


def longest_chain(edges: dict) -> int:
    depth = {}
    for n in sorted(edges):  # blockers always have smaller ids
        depth[n] = 1 + max((depth[b] for b in edges[n]), default=0)
    return max(depth.values())


def worker(s11, url: str, root: str, name: str, gate, results) -> None:
    s11.client = s11.Anthropic(api_key="bench", base_url=url)  # never share sockets across a fork
    sys.stdout = open(os.devnull, "w")  # the workers' own lines would bury the table
    held = []
    original = s11.file_lock

    @contextlib.contextmanager
    def timed_lock(path, *folders):
        with original(path, *folders):
            start = time.perf_counter()
            try:
                yield
            finally:
                held.append(time.perf_counter() - start)

    s11.file_lock = timed_lock  # TaskBoard.locked() looks the name up when it runs
    board = s11.TaskBoard(Path(root) / ".tasks")
    agent = s11.AutonomousAgent(
        {"name": name, "role": "bench worker", "prompt": "Finish tasks."},
        s11.Mailbox(Path(root) / ".mailbox" / "bench"),
        board,
    )
    gate.wait()
    agent.thread.start()
    agent.thread.join()
    results.put((name, held))


def fsync_cost(s11, writes: int = 50) -> float:
    """Seconds for one of s11's atomic writes of a task-sized file (write, fsync, rename): the
    median of `writes`, in a temporary folder like the runs'."""
    with tempfile.TemporaryDirectory(prefix="bench-s11-fsync-") as root:
        path, text = Path(root) / "task_1.json", '{"id": 1, "status": "pending"}' * 8
        took = []
        for _ in range(writes):
            start = time.perf_counter()
            s11.write_atomic(path, text)
            took.append(time.perf_counter() - start)
    return sorted(took)[len(took) // 2]


def run(s11, url: str, processes: int, count: int) -> dict:
    context = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="bench-s11-") as root:
        board = s11.TaskBoard(Path(root) / ".tasks")
        edges = build_dag(board, count)
        gate, results = context.Barrier(processes + 1), context.Queue()
        procs = [
            context.Process(target=worker, args=(s11, url, root, f"w{n}", gate, results))
            for n in range(processes)
        ]
        for proc in procs:
            proc.start()
        gate.wait()
        go = time.time()
        collected = [results.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        tasks = board.tasks()
        assert all(t["status"] == "completed" for t in tasks), "the board did not finish"
    wall = max(datetime.fromisoformat(t["updated_at"]).timestamp() for t in tasks) - go
    held = [h for _, worker_held in collected for h in worker_held]
    return {
        "wall": wall,
        "held_per_task_ms": 1000 * sum(held) / len(tasks),
        "lock_busy": sum(held) / wall,
        "longest_hold_ms": 1000 * max(held),
        "chain": longest_chain(edges),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--task-ms", type=float, default=50)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--trivial", action="store_true", help="also run tasks that take no time")
    args = parser.parse_args()
    if not hasattr(os, "fork"):
        sys.exit("this benchmark forks its workers: run it on Linux or macOS")
    print(
        f"python {platform.python_version()} on {platform.system()},"
        f" {os.cpu_count()} cores; POLL_SECONDS={POLL}"
    )
    with StandIn(
        finish_at_once, cache=CacheLedger(min_tokens=10**12)
    ) as server:  # no cache hashing: measure the harness
        s11 = load_script(server.url)
        # One call before the workers fork: the SDK builds its reply models on first use (about
        # 0.25 s of CPU), which each worker would otherwise repeat on the same two cores.
        s11.call_model([{"role": "user", "content": "warm up"}], echo=False)
        fsync = fsync_cost(s11)
        print(
            f"one fsync'd write (s11's write_atomic of a task file): {1000 * fsync:.2f} ms"
            " (median of 50); 'lock held/task' is also given in such writes"
        )
        for task_seconds in ((0.0,) if args.trivial else ()) + (args.task_ms / 1000,):
            MODEL_SECONDS["value"] = task_seconds
            label = "trivial tasks" if not task_seconds else f"{args.task_ms:g} ms per task"
            print(f"{args.tasks}-task DAG, {label}:")
            print(
                "  workers    wall  lock held/task  (writes)  longest hold  lock busy"
                + ("  bound   wall/bound" * bool(task_seconds))
            )
            for processes in args.workers:
                r = run(s11, server.url, processes, args.tasks)
                line = (
                    f"  {processes:>7} {r['wall']:6.2f}s {r['held_per_task_ms']:11.2f}"
                    f" ms {r['held_per_task_ms'] / 1000 / fsync:9.1f}"
                    f"  {r['longest_hold_ms']:9.1f} ms"
                    f" {r['lock_busy']:9.0%}"
                )
                if task_seconds:
                    bound = max(r["chain"], args.tasks / processes) * task_seconds
                    line += f"  {bound:5.2f}s {r['wall'] / bound:7.2f}x"
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
