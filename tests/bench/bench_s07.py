"""Benchmark the s07 task board on a board of 2,000 tasks (not collected by pytest).

Run from the repository root:  .venv/bin/python tests/bench/bench_s07.py [--tasks 2000]

Measures the readers (tasks(), ready(), get() - no lock), the changes (a subject edit, a status
change, completing a task with 10 dependents, adding an edge, create) with how long each holds
the board lock, and tasks created per second by 1 and by 8 processes at once. Everything happens
in a temporary folder.

Absolute times say more about the disk than about the board, so the machine's fsync cost is
measured first (a small file written and fsynced in the same folder, as write_atomic does) and
every figure is printed beside it: times in fsyncs, rates as a share of 1/fsync.
"""

import argparse
import contextlib
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
HELD = []  # seconds the board lock was held, per change


def timed_lock(original):
    @contextlib.contextmanager
    def lock(path):
        with original(path):
            start = time.perf_counter()
            try:
                yield
            finally:
                HELD.append(time.perf_counter() - start)

    return lock


def build_board(tasks_dir: Path, count: int):
    """A realistic mix: chains and fan-outs; task 1 gates ten dependents (2..11)."""
    board = s07.TaskBoard(tasks_dir)
    board.create("Hub task", "gates ten dependents")
    for n in range(2, 12):
        board.create(f"Dependent {n}", blocked_by=[1])
    rng = random.Random(7)
    for n in range(12, count + 1):
        blockers = (
            rng.sample(range(12, n), k=min(2, n - 12)) if rng.random() < 0.5 and n > 14 else []
        )
        board.create(f"Task {n}", "some description " * 5, blocked_by=blockers)
    return board


def fsync_ms(folder: Path, repeat: int = 50) -> float:
    """Median ms to write a task-sized file and fsync it: the unit the figures are quoted in."""
    data = b'{"id": 1, "subject": "x"}' * 12  # about the size of a task file
    times = []
    for n in range(repeat):
        path = folder / f"fsync_probe_{n}"
        with open(path, "xb") as file:
            file.write(data)
            file.flush()
            start = time.perf_counter()
            os.fsync(file.fileno())
            times.append((time.perf_counter() - start) * 1000)
        path.unlink()
    return statistics.median(times)


def timed(call, repeat: int) -> tuple:
    """(median wall ms, median lock-held ms) of `call`."""
    walls, held = [], []
    for _ in range(repeat):
        HELD.clear()
        start = time.perf_counter()
        call()
        walls.append((time.perf_counter() - start) * 1000)
        held.append(sum(HELD) * 1000)
    return statistics.median(walls), statistics.median(held)


def complete_and_reopen(board) -> None:
    assert board.update(1, status="completed")["unblocked"] == list(range(2, 12))
    s07.file_lock = ORIGINAL_LOCK  # the reopening is not measured
    board.update(1, status="pending")
    s07.file_lock = timed_lock(ORIGINAL_LOCK)


def create_many(tasks_dir: str, count: int, gate, results) -> None:
    board = s07.TaskBoard(Path(tasks_dir))
    gate.wait()
    results.put([board.create(f"task {n}")["id"] for n in range(count)])


def creates_per_second(processes: int, per_process: int) -> float:
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with tempfile.TemporaryDirectory() as folder:
        gate, results = context.Barrier(processes + 1), context.Queue()
        procs = [
            context.Process(target=create_many, args=(folder, per_process, gate, results))
            for _ in range(processes)
        ]
        for proc in procs:
            proc.start()
        gate.wait()
        start = time.perf_counter()
        ids = [i for _ in procs for i in results.get(timeout=300)]
        elapsed = time.perf_counter() - start
        for proc in procs:
            proc.join()
        assert sorted(ids) == list(range(1, len(ids) + 1)), "every id handed out exactly once"
    return len(ids) / elapsed


ORIGINAL_LOCK = s07.file_lock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.system()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as folder:
        fsync = fsync_ms(Path(folder))
        print(f"fsync of a small file: {fsync:.2f} ms (median of 50); figures below also in fsyncs")
        board = build_board(Path(folder) / ".tasks", args.tasks)
        s07.file_lock = timed_lock(ORIGINAL_LOCK)
        rows = [
            ("tasks() (read all, no lock)", timed(board.tasks, args.repeat)),
            ("ready() (no lock)", timed(board.ready, args.repeat)),
            ("get(500) (no lock)", timed(lambda: board.get(500), args.repeat)),
            (
                "update: a subject",
                timed(
                    lambda: board.update(500, subject=f"Renamed {time.perf_counter()}"), args.repeat
                ),
            ),
            (
                "update: pending -> in_progress",
                timed(lambda: board.update(12, status="in_progress"), 1),
            ),
            (
                "complete + reopen, 10 dependents (2 updates)",
                timed(lambda: complete_and_reopen(board), args.repeat),
            ),
            (
                "update: add an edge (cycle check)",
                timed(lambda: board.update(args.tasks, add_blocked_by=[13]), 1),
            ),
            ("create", timed(lambda: board.create("One more"), args.repeat)),
        ]
        s07.file_lock = ORIGINAL_LOCK
    print(f"board of {args.tasks} tasks (one JSON file each); median of {args.repeat} runs")
    print(f"  {'operation':<44} {'wall':>9} {'fsyncs':>7} {'lock held':>10} {'fsyncs':>7}")
    for label, (wall, held) in rows:
        print(
            f"  {label:<44} {wall:6.2f} ms {wall / fsync:7.1f} {held:7.2f} ms {held / fsync:7.1f}"
        )
    print("creates per second, every id distinct (a create writes two files: two fsyncs):")
    for processes in (1, 8):
        rate = creates_per_second(processes, 400 // processes)
        share = rate * fsync / 1000
        print(
            f"  {processes} process{'es' if processes > 1 else '':<3} {rate:10.0f} /s"
            f"  = {share:.2f} x 1/fsync (one create per {1 / share:.0f} fsyncs)"
        )


if __name__ == "__main__":
    sys.exit(main())
