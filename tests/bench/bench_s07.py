"""Benchmark the s07 task board on a board of 2,000 tasks.

Run from the repository root:  python tests/bench/bench_s07.py [--tasks 2000]

Measures one update, completing a task with 10 dependents, list(), ready(), and claims per
second with 1 and with 8 processes. Everything happens in a temporary folder.
"""
import argparse
import importlib.util
import multiprocessing
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "agents" / "s07_task_system.py"


def load_script():
    spec = importlib.util.spec_from_file_location("s07_task_system", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


s07 = load_script()


def build_board(tasks_dir: Path, count: int) -> "s07.TaskManager":
    """A realistic mix: chains and fan-outs, task 1 gates ten dependents (2..11)."""
    board = s07.TaskManager(tasks_dir)
    board.create("Hub task", "gates ten dependents")
    for n in range(2, 12):
        board.create(f"Dependent {n}", blocked_by=[1])
    rng = random.Random(7)
    for n in range(12, count + 1):
        blockers = rng.sample(range(12, n), k=min(2, n - 12)) if rng.random() < 0.5 and n > 14 else []
        board.create(f"Task {n}", "some description " * 5, blocked_by=blockers)
    return board


def timed(call, repeat: int) -> float:
    """Median wall time of `call` in milliseconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def time_completion(board, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = board.update(1, status="completed")
        samples.append((time.perf_counter() - start) * 1000)
        assert result["unblocked"] == list(range(2, 12)), result["unblocked"]
        board.update(1, status="pending")  # reopen (re-blocks the ten), not timed
    return statistics.median(samples)


def claim_worker(tasks_dir: str, worker: int, count: int, start_gate, results) -> None:
    board = s07.TaskManager(Path(tasks_dir))
    ids = list(range(1, count + 1))
    random.Random(worker).shuffle(ids)
    start_gate.wait()
    won = 0
    for task_id in ids:
        try:
            board.claim(task_id, f"w{worker}")
            won += 1
        except s07.TaskError:
            pass  # someone else was faster: that is the point of compare-and-set
    results.put(won)


def ready_loop_worker(tasks_dir: str, worker: int, budget: int, start_gate, results) -> None:
    """The loop an autonomous worker runs: look at ready(), try to claim one, repeat."""
    board = s07.TaskManager(Path(tasks_dir))
    rng = random.Random(worker)
    start_gate.wait()
    won = 0
    while won < budget:
        ready = board.ready()
        if not ready:
            break
        try:
            board.claim(rng.choice(ready)["id"], f"w{worker}")
            won += 1
        except s07.TaskError:
            pass
    results.put(won)


def run_workers(worker, processes: int, tasks_dir: Path, extra) -> tuple[int, float]:
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    start_gate, results = context.Barrier(processes + 1), context.Queue()
    procs = [context.Process(target=worker, args=(str(tasks_dir), n, extra, start_gate, results))
             for n in range(processes)]
    for proc in procs:
        proc.start()
    start_gate.wait()
    start = time.perf_counter()
    won = sum(results.get(timeout=300) for _ in procs)
    elapsed = time.perf_counter() - start
    for proc in procs:
        proc.join()
    return won, elapsed


def ready_board(folder: str, count: int):
    """A board of `count` ready tasks in `folder`."""
    board = s07.TaskManager(Path(folder) / ".tasks")
    for n in range(count):
        board.create(f"job {n}")
    return board, board.dir


def claims_per_second(processes: int, count: int) -> float:
    """Wall-clock claims/s for `processes` workers racing to claim `count` ready tasks by id."""
    with tempfile.TemporaryDirectory() as folder:
        board, tasks_dir = ready_board(folder, count)
        won, elapsed = run_workers(claim_worker, processes, tasks_dir, count)
        assert won == count, f"{won} claims for {count} tasks"
        return count / elapsed


def ready_loop_claims_per_second(processes: int, count: int, per_worker: int) -> float:
    """Claims/s when every claim is preceded by ready() on a board of `count` tasks."""
    with tempfile.TemporaryDirectory() as folder:
        board, tasks_dir = ready_board(folder, count)
        won, elapsed = run_workers(ready_loop_worker, processes, tasks_dir, per_worker)
        claimed = [t for t in board.list() if t["status"] == "in_progress"]
        assert won == len(claimed) == len({t["id"] for t in claimed})
        return won / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.system()}, {os.cpu_count()} cores "
          f"(shared machine: figures are indicative)")
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        board = build_board(Path(folder) / ".tasks", args.tasks)
        print(f"built a board of {args.tasks} tasks in {time.perf_counter() - start:.1f} s")
        flip = iter(range(10 ** 6))
        rows = [
            ("one update (rename a task)", timed(lambda: board.update(500, subject=f"Renamed {next(flip)}"),
                                                 args.repeat)),
            ("complete a task with 10 dependents", time_completion(board, args.repeat)),
            ("list()", timed(board.list, args.repeat)),
            ("ready()", timed(board.ready, args.repeat)),
            ("get(1)", timed(lambda: board.get(1), args.repeat)),
        ]
        for label, ms in rows:
            print(f"  {label:<38} {ms:8.1f} ms (median of {args.repeat})")
    print(f"claims: {args.tasks} ready tasks, workers race to claim them by id (each claimed exactly once)")
    for processes in (1, 8):
        label = f"{processes} process{'es' if processes > 1 else ''}"
        print(f"  {label:<38} {claims_per_second(processes, args.tasks):8.0f} claims/s")
    print(f"claims: worker loop ready() -> claim() on a board of {args.tasks} tasks (40 claims in all)")
    for processes in (1, 8):
        label = f"{processes} process{'es' if processes > 1 else ''}"
        rate = ready_loop_claims_per_second(processes, args.tasks, per_worker=40 // processes)
        print(f"  {label:<38} {rate:8.0f} claims/s")


if __name__ == "__main__":
    sys.exit(main())
