"""Benchmark the s07 task board against a SQLite board, at 100, 1,000 and 10,000 tasks
(not collected by pytest).

Run from the repository root:  .venv/bin/python tests/bench/bench_s07.py [--sizes 100 1000 10000]

For each size, in one temporary folder, a board of that many tasks (chains and fan-outs, as
build_board makes them) is written once as s07's files and once into a SQLite database in WAL
mode with synchronous=FULL (every commit on disk, as every s07 change is). Then, median ms per:

  get      one task with its `blocks`, on a board nobody changed since the reader last looked
  ready    the tasks ready now, on the same unchanged board
  update   a status change that frees ten dependents, returning `unblocked` (then reopened,
           not measured)
  create   a new task with one blocker

The growth exponent from 1k to 10k is log10(t_10k / t_1k): 0 is flat, 1 is linear in N. The
fsync floor is one task-sized file written, fsynced and renamed, as write_atomic does, in a
folder of N files like the board's: what any change of one task costs at least. (A folder of
10,000 files makes that write 2-3x slower than an empty one, so it is measured per size; the
empty folder's figure is printed too.) It is sampled just before each timed update and create,
because a disk's speed drifts; the writes are given as multiples of its median at their size.
Times depend on the machine and its load; the ratios are the result.
"""

import argparse
import importlib.util
import json
import math
import os
import platform
import random
import sqlite3
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


def plan(count: int) -> list:
    """Task 1 gates ten dependents (2..11); then chains and fan-outs of up to two blockers."""
    rng = random.Random(7)
    tasks = []
    for n in range(1, count + 1):
        if n == 1:
            blockers = []
        elif n <= 11:
            blockers = [1]
        else:
            blockers = sorted(rng.sample(range(12, n), k=min(2, n - 12))) if n > 14 else []
        tasks.append({"id": n, "subject": f"Task {n}", "description": "some description " * 5,
                      "status": "pending", "blockedBy": blockers, "owner": "",
                      "created_at": "2026-01-01T00:00:00+00:00",
                      "updated_at": "2026-01-01T00:00:00+00:00"})
    return tasks


def build_files(folder: Path, tasks: list):
    """s07's files as create writes them, without waiting for an fsync per task."""
    folder.mkdir()
    for task in tasks:
        (folder / f"task_{task['id']}.json").write_text(
            json.dumps(task, indent=2, ensure_ascii=False) + "\n")
    (folder / ".board").mkdir()
    state = {"generation": 1, "last_id": len(tasks), "changed": [],
             "mtime": folder.stat().st_mtime_ns}
    (folder / ".board" / "state.json").write_text(json.dumps(state))
    return s07.TaskBoard(folder)


def build_floor_folder(folder: Path, count: int) -> Path:
    """A folder of `count` task-sized files, where the floor is measured: a write there costs
    what a write in the board's folder does, and leaves the board's folder alone."""
    folder.mkdir()
    data = json.dumps(plan(1)[0], indent=2).encode()
    for n in range(1, count + 1):
        (folder / f"task_{n}.json").write_bytes(data)
    return folder


class SqliteBoard:
    """A reference board: the same operations on SQLite in WAL mode, synchronous=FULL."""

    def __init__(self, path: Path, tasks: list):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(
            "CREATE TABLE tasks (id INTEGER PRIMARY KEY, subject TEXT, description TEXT,"
            " status TEXT, owner TEXT, created_at TEXT, updated_at TEXT);"
            "CREATE TABLE edges (task INTEGER, blocker INTEGER, PRIMARY KEY (task, blocker));"
            "CREATE INDEX edges_by_blocker ON edges (blocker);"
            "CREATE INDEX tasks_by_status ON tasks (status, owner);")
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)", [
            (t["id"], t["subject"], t["description"], t["status"], t["owner"], t["created_at"],
             t["updated_at"]) for t in tasks])
        self.db.executemany("INSERT INTO edges VALUES (?, ?)",
                            [(t["id"], b) for t in tasks for b in t["blockedBy"]])
        self.db.execute("COMMIT")

    def get(self, task_id: int) -> dict:
        row = self.db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        task = dict(zip(("id", "subject", "description", "status", "owner", "created_at",
                         "updated_at"), row))
        task["blockedBy"] = [b for (b,) in self.db.execute(
            "SELECT blocker FROM edges WHERE task = ? ORDER BY blocker", (task_id,))]
        task["blocks"] = [t for (t,) in self.db.execute(
            "SELECT task FROM edges WHERE blocker = ? ORDER BY task", (task_id,))]
        return task

    def ready(self) -> list:
        return [i for (i,) in self.db.execute(
            "SELECT id FROM tasks t WHERE status = 'pending' AND owner = '' AND NOT EXISTS ("
            " SELECT 1 FROM edges e JOIN tasks b ON b.id = e.blocker"
            " WHERE e.task = t.id AND b.status != 'completed') ORDER BY id")]

    def update(self, task_id: int, status: str) -> list:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("UPDATE tasks SET status = ?, updated_at = ? WHERE id = ?",
                        (status, s07.utc_now(), task_id))
        unblocked = [i for (i,) in self.db.execute(
            "SELECT t.id FROM edges d JOIN tasks t ON t.id = d.task WHERE d.blocker = ?"
            " AND t.status = 'pending' AND NOT EXISTS (SELECT 1 FROM edges e JOIN tasks b"
            " ON b.id = e.blocker WHERE e.task = t.id AND b.status != 'completed')",
            (task_id,))]
        self.db.execute("COMMIT")
        return unblocked

    def create(self, subject: str, blocked_by: list) -> int:
        self.db.execute("BEGIN IMMEDIATE")
        cursor = self.db.execute(
            "INSERT INTO tasks (subject, description, status, owner, created_at, updated_at)"
            " VALUES (?, '', 'pending', '', ?, ?)", (subject, s07.utc_now(), s07.utc_now()))
        self.db.executemany("INSERT INTO edges VALUES (?, ?)",
                            [(cursor.lastrowid, b) for b in blocked_by])
        self.db.execute("COMMIT")
        return cursor.lastrowid


def probe(folder: Path) -> float:
    """Ms to write a task-sized file, fsync it and rename it over task_1.json."""
    data = json.dumps(plan(1)[0], indent=2).encode()
    temp = folder / f".probe_{os.urandom(4).hex()}.tmp"
    start = time.perf_counter()
    with open(temp, "xb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, folder / "task_1.json")
    return (time.perf_counter() - start) * 1000


def median_ms(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(folder: Path, count: int, repeat: int) -> dict:
    tasks = plan(count)
    board = build_files(folder / f"board-{count}", tasks)
    floor_folder = build_floor_folder(folder / f"floor-{count}", count)
    lite = SqliteBoard(folder / f"board-{count}.sqlite", tasks)
    os.sync()  # everything on disk first: its write-back would slow the writes timed below
    some = random.Random(count).sample(range(1, count + 1), k=min(count, 50))
    board.ready()  # the reader's first look reads and checks everything once
    assert board.update(1, status="completed")["unblocked"] == list(range(2, 12))
    board.update(1, status="pending")
    assert lite.update(1, "completed") == list(range(2, 12))
    lite.update(1, "pending")
    picks = iter(some * repeat)
    floors = []  # taken just before each timed s07 write: the disk's speed drifts

    def complete_and_reopen(target):
        floors.append(probe(floor_folder))
        start = time.perf_counter()
        target(1, "completed")
        took = (time.perf_counter() - start) * 1000
        target(1, "pending")
        return took

    def s07_update(task_id, status):
        return board.update(task_id, status=status)

    row = {
        "get": median_ms(lambda: board.get(next(picks)), repeat * 4),
        "ready": median_ms(board.ready, repeat * 4),
        "update": statistics.median(complete_and_reopen(s07_update) for _ in range(repeat)),
        "create": median_ms(lambda: floors.append(probe(floor_folder)) or board.create(
            "One more", blocked_by=[count]), repeat),
        "sqlite get": median_ms(lambda: lite.get(next(picks)), repeat * 4),
        "sqlite ready": median_ms(lite.ready, repeat * 4),
        "sqlite update": statistics.median(complete_and_reopen(lite.update)
                                           for _ in range(repeat)),
        "sqlite create": median_ms(lambda: lite.create("One more", [count]), repeat),
    }
    row["floor"] = statistics.median(floors)
    lite.db.close()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version} on "
          f"{platform.system()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-s07-", dir=Path.cwd()) as root:
        folder = Path(root)
        (folder / "empty").mkdir()
        empty = statistics.median(probe(folder / "empty") for _ in range(50))
        print(f"fsync floor in an empty folder (a task file written, fsynced, renamed): "
              f"{empty:.2f} ms")
        rows = {count: measure(folder, count, args.repeat) for count in args.sizes}
    ops = ("get", "ready", "update", "create")
    print(f"\nmedian ms per operation; s07 / SQLite; writes also in fsync floors")
    print(f"  {'tasks':>6}  " + "  ".join(f"{op:>24}" for op in ops))
    for count, row in rows.items():
        cells = []
        for op in ops:
            cell = f"{row[op]:7.3f} / {row['sqlite ' + op]:7.3f}"
            cell += f" ={row[op] / row['sqlite ' + op]:5.1f}x"
            cells.append(cell)
        print(f"  {count:>6}  " + "  ".join(f"{c:>24}" for c in cells))
    for count, row in rows.items():
        floor = row["floor"]
        print(f"  {count:>6}  floor {floor:.2f} ms; update = {row['update'] / floor:.2f} fsync "
              f"floors, create = "
              f"{row['create'] / floor:.2f} (SQLite: {row['sqlite update'] / floor:.2f}, "
              f"{row['sqlite create'] / floor:.2f})")
    if 1000 in rows and 10000 in rows:
        print("growth exponent 1k -> 10k, log10(t_10k / t_1k) (0 flat, 1 linear):")
        for op in ops:
            mine = math.log10(rows[10000][op] / rows[1000][op])
            theirs = math.log10(rows[10000]["sqlite " + op] / rows[1000]["sqlite " + op])
            print(f"  {op:>7}  s07 {mine:5.2f}   SQLite {theirs:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
