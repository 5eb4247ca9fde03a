#!/usr/bin/env python3
"""s11_autonomous.py - autonomous teammates that find their own work on the task board.

In s09 a teammate waits to be told. Here it looks for work itself, in a fixed
order, and stops by itself when nothing comes:

    1. new mail?                  answer it (s09's rules; a shutdown ends the loop)
    2. a ready task?              claim the lowest id (compare-and-set under the board
                                  lock), do it, mark it completed or failed
    3. nothing?                   wait on the mailbox for POLL_INTERVAL
    4. nothing for IDLE_TIMEOUT?  report "stopped" to main and end

    lead "main" (REPL)            .tasks/  (s07's board)          workers: threads, or
    task_create, blockedBy  --->  [1]--+                          --worker processes
    team_spawn_autonomous          [2]-+-> [4] -> [5]   <-- claim #4 -- alice: won
                                   [3]-+                <-- claim #4 -- bob: CONFLICT, next
    main.jsonl  <--- "started" / "stopped" reports, answers to requests (s09's mailbox)

The board and the mailbox are s07's and s09's, carried here unchanged except for
lines marked `# s11:`. A claim now carries a lease that a heartbeat renews while
the work runs, so a task whose worker died (kill -9) becomes claimable again when
the lease runs out; and a worker can finish only a task it still holds.

Key insight: the loop is easy; the race is the lesson. Several agents, even in
several processes, reach for the same task, and only a compare-and-set under one
lock lets exactly one of them have it.

Run:  python agents/s11_autonomous.py           (offline demo when no key is set)
      python agents/s11_autonomous.py --demo    (force the offline demo)
      python agents/s11_autonomous.py --worker NAME [--session ID]
            one autonomous teammate as its own process, on the lead's board and
            session mailbox (the newest session unless --session is given)
      In the REPL: /tasks, /graph, /team list, /inbox
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from anthropic import Anthropic, APIError
from dotenv import load_dotenv

# -- Configuration ------------------------------------------------------------
load_dotenv(".env")  # the current folder's .env; shell variables win

WORKDIR = Path.cwd()
MODEL = os.getenv("MODEL_ID") or "claude-sonnet-5-5"
API_KEY = os.getenv("ANTHROPIC_API_KEY") or None
AUTH_TOKEN = os.getenv("ANTHROPIC_AUTH_TOKEN") or None
BASE_URL = os.getenv("ANTHROPIC_BASE_URL") or None
MAX_TOKENS = 8000
BASH_TIMEOUT = 60  # seconds
OUTPUT_LIMIT = 50_000  # characters of tool output sent back to the model

# Credentials are passed explicitly, so the SDK never guesses (and never warns).
# With none at all there is no client: main() runs the offline demo instead.
client = Anthropic(api_key=API_KEY, auth_token=AUTH_TOKEN, base_url=BASE_URL) if API_KEY or AUTH_TOKEN else None

SYSTEM = (
    f"You are a coding agent working in {WORKDIR}. "
    "Use the tools to inspect and change files; act, then report briefly."
    " For multi-step work keep the task board: task_create the steps, link them with blockedBy,"  # s07: plan on the board
    " set each in_progress then completed. The board lives in .tasks/ and outlives this"  # s07: plan on the board
    " conversation; use only task ids that a tool result gave you."  # s07: plan on the board
    " You lead a team: team_register defines a teammate, team_spawn starts it, team_send and"  # s09: lead a team
    " team_review ask it. Teammates answer through your mailbox; their messages reach you"  # s09: lead a team
    " with your next request."  # s09: lead a team
    " team_spawn_autonomous starts workers that claim ready tasks from the board by themselves"  # s11: workers
    " and report to you; plan the work as tasks first, then check it with task_list."  # s11: workers
)


# -- Base tools -----------------------------------------------------------------
def safe_path(relative: str) -> Path:
    """Resolve a path inside WORKDIR; refuse anything that leaves it."""
    path = (WORKDIR / relative).resolve()  # resolve() follows symlinks too
    if not path.is_relative_to(WORKDIR.resolve()):
        raise ValueError(f"Path {relative!r} is outside the workspace {WORKDIR}")
    return path


def clip(text: str) -> str:
    """Cap tool output so one huge result cannot flood the context."""
    if len(text) <= OUTPUT_LIMIT:
        return text
    cut = len(text) - OUTPUT_LIMIT
    return text[:OUTPUT_LIMIT] + f"\n... [output truncated: {cut:,} more characters]"


def kill_tree(process: subprocess.Popen) -> None:
    """Kill the shell and everything it started (a plain kill leaves children running)."""
    try:
        if os.name == "posix":
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except ProcessLookupError:
        pass  # it had already finished


def run_bash(command: str) -> str:
    process = subprocess.Popen(
        command, shell=True, cwd=WORKDIR, text=True, encoding="utf-8", errors="replace",
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a timeout can kill it all
    )
    try:
        output, _ = process.communicate(timeout=BASH_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_tree(process)
        process.communicate()
        raise TimeoutError(f"bash timed out after {BASH_TIMEOUT}s; the command was killed")
    except KeyboardInterrupt:  # Ctrl-C must not leave the command running either
        kill_tree(process)
        raise
    output = output.strip() or "(no output)"
    if process.returncode != 0:
        output += f"\n[exit code {process.returncode}]"
    return clip(output)


def run_read(path: str, limit: int | None = None) -> str:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of lines, got {limit}")
    lines = safe_path(path).read_text(encoding="utf-8").splitlines()
    if limit is not None and limit < len(lines):
        lines = lines[:limit] + [f"... [{len(lines) - limit} more lines]"]
    return clip("\n".join(lines))


def run_write(path: str, content: str) -> str:
    target = safe_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"Wrote {len(content)} characters to {path}"


def run_edit(path: str, old_text: str, new_text: str) -> str:
    target = safe_path(path)
    text = target.read_text(encoding="utf-8")
    count = text.count(old_text) if old_text else 0
    if count == 0:
        raise ValueError(f"old_text not found in {path}; read the file and copy the text exactly")
    if count > 1:
        raise ValueError(f"old_text appears {count} times in {path}; include more context so it is unique")
    target.write_text(text.replace(old_text, new_text, 1), encoding="utf-8")
    return f"Edited {path}"


# -- s11: autonomous teammates that find their own work on the shared board ------
# One block, three parts: s07's task board and s09's team, carried unchanged except
# for lines marked `# s11:` (a lease on every claim, owner-checked updates, finer
# timestamps, a "status" protocol), then the new part: a teammate that reads its
# mail, else claims the first ready task, else waits a little, and stops by itself
# when nothing comes - the same class in a thread of the lead or in a process.
import contextlib
import re
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta, timezone

if os.name == "nt":
    import msvcrt
else:
    import fcntl


# --- the task board (from s07) ------------------------------------------------
# Its file_lock and write_json_atomic serve the mailbox and .team.json as well.
TASK_STATUSES = ("pending", "in_progress", "completed", "failed", "deleted")
STATUS_MARKERS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]",
                  "failed": "[!]", "deleted": "[-]"}


@contextlib.contextmanager
def file_lock(lock_path: Path):
    """Hold an exclusive lock on lock_path; it excludes other threads and other processes."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:  # a fresh handle per holder, so threads exclude each other too
        if os.name == "nt":
            handle.seek(0)
            while True:  # LK_LOCK gives up after ~10 s; a busy board is a reason to wait, not to fail
                try:
                    msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue
        else:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if os.name == "nt":
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
            else:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_json_atomic(path: Path, data) -> None:
    """Readers see the old file or the new one, never half of one (even after a crash)."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


class TaskError(ValueError):
    """A request the board refuses. `.code` is for programs, the message tells the model what to do."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


class CorruptTaskFile(Exception):
    """A file on the board that cannot be trusted; the board stops rather than guess or overwrite."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}. The board will not overwrite this file: "
                         f"fix it by hand or move it out of {path.parent}, then retry.")
        self.path = path
        self.reason = reason


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")  # s11: order events within a second


def parse_task_id(value) -> int:
    """Ids are positive integers; models sometimes send them as strings ("3"), which is fine."""
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise TaskError("INVALID_ARGS", f"a task id must be a positive integer such as 3, got {value!r}; "
                                        "use only ids that task_create or task_list returned")
    return int(text)


def parse_id_list(value, field: str) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TaskError("INVALID_ARGS", f"{field} must be a list of task ids such as [1, 2], got {value!r}")
    return list(dict.fromkeys(parse_task_id(item) for item in value))  # dedupe, keep order


def clean_text(value, field: str, *, required: bool = False) -> str:
    if not isinstance(value, str):
        raise TaskError("INVALID_ARGS", f"{field} must be a string, got {value!r}")
    if required and not value.strip():
        raise TaskError("INVALID_ARGS", f"{field} must not be empty (spaces alone do not count)")
    return value.strip() if required else value


def check_status(status: str) -> str:
    if status not in TASK_STATUSES:
        raise TaskError("INVALID_STATUS", f"unknown status {status!r}; use one of {', '.join(TASK_STATUSES)}")
    return status


def listed(task: dict, status: str | None, include_deleted: bool) -> bool:
    """Does a listing filtered by `status` show this task? Deleted ones only when asked for."""
    if status is not None:
        return task["status"] == status
    return include_deleted or task["status"] != "deleted"


def record_problem(task, task_id: int) -> str | None:
    """Why a task record read from disk cannot be trusted, or None if it looks sound."""
    if not isinstance(task, dict):
        return "not a JSON object"
    if type(task.get("id")) is not int or task["id"] != task_id:
        return f"id is {task.get('id')!r} but the file name says {task_id}"
    if not isinstance(task.get("subject"), str) or not task["subject"].strip():
        return "subject is missing or empty"
    if task.get("status") not in TASK_STATUSES:
        return f"unknown status {task.get('status')!r} (allowed: {', '.join(TASK_STATUSES)})"
    blocked_by = task.get("blockedBy")
    if not isinstance(blocked_by, list) or any(type(item) is not int for item in blocked_by):
        return "blockedBy must be a list of integer task ids"
    if task_id in blocked_by:
        return "the task is blocked by itself"
    for field in ("description", "owner", "created_at", "updated_at"):
        if not isinstance(task.get(field), str):
            return f"{field} must be a string"
    return None


def find_cycle(blocked_by: dict[int, list[int]]) -> list[int] | None:
    """One dependency cycle in blocker-first order ([3, 5, 3]: 3 must finish before 5, 5 before 3)."""
    state = {}  # task id -> "open" while on the current path, "done" once fully explored
    for start in sorted(blocked_by):
        if start in state:
            continue
        path, stack = [start], [iter(blocked_by[start])]
        state[start] = "open"
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state.get(nxt) == "open":
                waits_for = path[path.index(nxt):] + [nxt]  # each waits for the next one
                return waits_for[::-1]
            elif nxt in blocked_by and nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                stack.append(iter(blocked_by[nxt]))
    return None


def format_cycle(cycle: list[int], start: int | None = None) -> str:
    """'3 -> 5 -> 3', rotated to begin at `start` when it is on the cycle."""
    if start in cycle:
        at = cycle.index(start)
        cycle = cycle[at:-1] + cycle[:at] + [start]
    return " -> ".join(str(task_id) for task_id in cycle)


class TaskManager:
    """A task graph stored as one JSON file per task, safe to share between threads and processes.

    Every method holds the board lock; mutations re-read inside it, validate everything,
    then write only the files that change. Nothing is created until the first write.
    """

    def __init__(self, tasks_dir: Path):
        self.dir = Path(tasks_dir)
        self.lock_path = self.dir / ".lock"
        self.highwatermark_path = self.dir / ".highwatermark"

    # reading (callers hold the lock)

    def _path(self, task_id: int) -> Path:
        return self.dir / f"task_{task_id}.json"

    def _read_task(self, task_id: int) -> dict:
        path = self._path(task_id)
        try:
            task = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TaskError("NOT_FOUND", f"there is no task {task_id}; "
                                         "call task_list to see the ids that exist") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptTaskFile(path, f"cannot be read as JSON ({exc})") from None
        problem = record_problem(task, task_id)
        if problem:
            raise CorruptTaskFile(path, problem)
        return task

    def _read_board(self) -> dict[int, dict]:
        """Every task on disk, checked as a whole: dangling edges and cycles count as corruption."""
        ids = []
        for path in self.dir.glob("task_*.json"):
            number = path.stem[len("task_"):]
            if number.isascii() and number.isdigit() and str(int(number)) == number:
                ids.append(int(number))
        board = {task_id: self._read_task(task_id) for task_id in sorted(ids)}
        for task in board.values():
            for blocker in task["blockedBy"]:
                if blocker not in board:
                    raise CorruptTaskFile(self._path(task["id"]), f"blocked by task {blocker}, which has no file")
                if board[blocker]["status"] == "deleted":
                    raise CorruptTaskFile(self._path(task["id"]), f"blocked by task {blocker}, which is deleted")
        cycle = find_cycle({i: t["blockedBy"] for i, t in board.items() if t["status"] != "deleted"})
        if cycle:
            raise CorruptTaskFile(self._path(cycle[0]), f"dependency cycle {format_cycle(cycle)}")
        return board

    def _read_highwatermark(self) -> int:
        try:
            text = self.highwatermark_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return 0
        if not (text.isascii() and text.isdigit()):
            raise CorruptTaskFile(self.highwatermark_path, f"expected the last id handed out, found {text[:40]!r}")
        return int(text)

    def _read_blockers(self, task: dict) -> dict[int, dict]:
        """Just the files a claim needs: the task's blockers, not the whole board."""
        for blocker in task["blockedBy"]:
            if not self._path(blocker).exists():
                raise CorruptTaskFile(self._path(task["id"]), f"blocked by task {blocker}, which has no file")
        return {blocker: self._read_task(blocker) for blocker in task["blockedBy"]}

    @staticmethod
    def _public(tasks: list[dict], board: dict[int, dict]) -> list[dict]:
        """Tasks as callers see them: stored fields plus `blocks`, derived from everyone's blockedBy."""
        blocks = {task_id: [] for task_id in board}
        for other in board.values():
            if other["status"] != "deleted":
                for blocker in other["blockedBy"]:
                    blocks.setdefault(blocker, []).append(other["id"])
        return [{**t, "blockedBy": list(t["blockedBy"]), "blocks": blocks[t["id"]]} for t in tasks]

    # the rules, as functions of a board in memory

    @staticmethod
    def _open_blockers(task: dict, board: dict[int, dict]) -> list[int]:
        return [b for b in task["blockedBy"] if board[b]["status"] != "completed"]  # failed still blocks

    @staticmethod
    def _blocked_error(task_id: int, wanted: str, waiting: list[int], board: dict[int, dict]) -> TaskError:
        states = ", ".join(f"{b} ({board[b]['status']})" for b in waiting)
        return TaskError("INVALID_STATUS", f"task {task_id} cannot be {wanted} while blocked by {states}; "
                                           "finish those first or remove the edge")

    @staticmethod
    def _up_for_grabs(task: dict) -> bool:
        return task["status"] == "pending" and not task["owner"] or lease_expired(task)  # s11: a dead worker's task

    @staticmethod
    def _check_dependency(task_id: int | None, other: int, board: dict[int, dict]) -> None:
        if other == task_id:
            raise TaskError("INVALID_DEPENDENCY", f"task {task_id} cannot depend on itself")
        if other not in board:
            raise TaskError("INVALID_DEPENDENCY", f"there is no task {other}; link only ids that "
                                                  "task_create or task_list returned")
        if board[other]["status"] == "deleted":
            raise TaskError("INVALID_DEPENDENCY", f"task {other} is deleted; it cannot block or be blocked")

    def _blocked_pending(self, board: dict[int, dict]) -> set[int]:
        return {i for i, t in board.items() if t["status"] == "pending" and self._open_blockers(t, board)}

    # changing the board

    def create(self, subject: str, description: str = "", blocked_by=None) -> dict:
        subject = clean_text(subject, "subject", required=True)
        description = clean_text(description, "description")
        blockers = parse_id_list(blocked_by, "blockedBy")
        with file_lock(self.lock_path):
            known = {b: self._read_task(b) for b in blockers if self._path(b).exists()}
            for blocker in blockers:
                self._check_dependency(None, blocker, known)  # a new task has no id yet, so no self-edge
            task_id = self._read_highwatermark() + 1
            while self._path(task_id).exists():  # a lost .highwatermark must never cost a task
                task_id += 1
            now = utc_now()
            task = {"id": task_id, "subject": subject, "description": description, "status": "pending",
                    "blockedBy": blockers, "owner": "", "created_at": now, "updated_at": now}
            write_json_atomic(self.highwatermark_path, task_id)  # first: a crash here only skips an id
            write_json_atomic(self._path(task_id), task)
        return self._public([task], {task_id: task})[0]

    def claim(self, task_id, owner: str) -> dict:
        """Compare-and-set: ready -> in_progress with this owner. CONFLICT if someone was faster."""
        task_id = parse_task_id(task_id)
        owner = clean_text(owner, "owner", required=True)
        with file_lock(self.lock_path):
            task = self._read_task(task_id)
            if not self._up_for_grabs(task):
                held = f", owned by {task['owner']}" if task["owner"] else ""
                raise TaskError("CONFLICT", f"task {task_id} is not up for grabs (it is {task['status']}{held}); "
                                            "pick another task from ready()")
            blockers = self._read_blockers(task)
            waiting = self._open_blockers(task, blockers)
            if waiting:
                raise self._blocked_error(task_id, "claimed", waiting, blockers)
            task = {**task,
                    "status": "in_progress",
                    "owner": owner,
                    "started_at": utc_now(),  # s11: when the work began, after every blocker completed
                    "lease_until": lease_deadline(),  # s11: renewed by a heartbeat; lapses if the worker dies
                    "updated_at": utc_now()}
            write_json_atomic(self._path(task_id), task)
        return task

    def update(self, task_id, *, status=None, subject=None, description=None, owner=None,
               add_blocked_by=None, remove_blocked_by=None, add_blocks=None, remove_blocks=None,
               expected_status=None, expected_owner=None, worker_fields=None) -> dict:  # s11: see check_claim
        task_id = parse_task_id(task_id)
        fields = {}
        if status is not None:
            fields["status"] = check_status(status)
        if subject is not None:
            fields["subject"] = clean_text(subject, "subject", required=True)
        if description is not None:
            fields["description"] = clean_text(description, "description")
        if owner is not None:
            fields["owner"] = clean_text(owner, "owner").strip()
        fields.update(worker_fields or {})  # s11: set by the harness, never by the model: result, lease_until
        edges = {name: parse_id_list(value, name) for name, value in (
            ("addBlockedBy", add_blocked_by), ("removeBlockedBy", remove_blocked_by),
            ("addBlocks", add_blocks), ("removeBlocks", remove_blocks))}
        if expected_status is not None:
            check_status(expected_status)
        if not fields and not any(edges.values()):
            raise TaskError("INVALID_ARGS", "nothing to update: pass status, subject, description, owner "
                                            "or one of addBlockedBy/removeBlockedBy/addBlocks/removeBlocks")
        with file_lock(self.lock_path):
            board = self._read_board()
            check_claim(board, task_id, expected_owner)  # s11: only the claim's holder may finish it
            after, unblocked = self._plan_update(board, task_id, fields, edges, expected_status)
            changed = [i for i in after if after[i] != board.get(i)]
            now = utc_now()
            for i in changed:
                after[i]["updated_at"] = now
                write_json_atomic(self._path(i), after[i])
        result = self._public([after[task_id]], after)[0]
        if fields.get("status") in ("completed", "deleted"):
            result = {"unblocked": unblocked, **result}  # first: it is what the caller acts on next
        return result

    def _plan_update(self, board, task_id, fields, edges, expected_status):
        """Validate and apply the update to a copy of the board; disk is untouched until this returns."""
        if task_id not in board:
            raise TaskError("NOT_FOUND", f"there is no task {task_id}; call task_list to see the ids that exist")
        task = board[task_id]
        if expected_status is not None and task["status"] != expected_status:
            raise TaskError("CONFLICT", f"task {task_id} is {task['status']}, not {expected_status}: "
                                        "someone changed it; read it again and decide again")
        if task["status"] == "deleted":
            raise TaskError("INVALID_STATUS", f"task {task_id} is deleted and cannot change; create a new task")
        if fields.get("status") == "deleted" and any(edges.values()):
            raise TaskError("INVALID_ARGS", "deleting a task takes no edge changes; delete it on its own")
        after = {i: {**t, "blockedBy": list(t["blockedBy"])} for i, t in board.items()}
        after[task_id].update(fields)
        self._apply_edges(after, task_id, edges)
        new_status = fields.get("status")
        if new_status in ("in_progress", "completed"):
            waiting = self._open_blockers(after[task_id], after)
            if waiting:
                raise self._blocked_error(task_id, new_status, waiting, after)
        if new_status == "deleted":
            for other in after.values():  # deleting removes the task from every blockedBy
                if task_id in other["blockedBy"]:
                    other["blockedBy"].remove(task_id)
        cycle = find_cycle({i: t["blockedBy"] for i, t in after.items() if t["status"] != "deleted"})
        if cycle:
            raise TaskError("INVALID_DEPENDENCY", f"that would close a dependency cycle {format_cycle(cycle, task_id)} "
                                                  "(each task would wait for itself); drop one of those edges")
        unblocked = sorted(self._blocked_pending(board) - self._blocked_pending(after) - {task_id})
        return after, unblocked

    def _apply_edges(self, after, task_id, edges) -> None:
        for other in [*edges["addBlockedBy"], *edges["addBlocks"]]:
            self._check_dependency(task_id, other, after)
        for other in [*edges["removeBlockedBy"], *edges["removeBlocks"]]:
            if other not in after:
                raise TaskError("INVALID_DEPENDENCY", f"there is no task {other}; call task_list to see the ids")
        if set(edges["addBlockedBy"]) & set(edges["removeBlockedBy"]) or \
                set(edges["addBlocks"]) & set(edges["removeBlocks"]):
            raise TaskError("INVALID_ARGS", "the same id is both added and removed; pick one")
        mine = after[task_id]["blockedBy"]
        mine.extend(b for b in edges["addBlockedBy"] if b not in mine)
        mine[:] = [b for b in mine if b not in edges["removeBlockedBy"]]
        for other in edges["addBlocks"]:  # "I block X" is stored as "X is blocked by me"
            if task_id not in after[other]["blockedBy"]:
                after[other]["blockedBy"].append(task_id)
        for other in edges["removeBlocks"]:
            if task_id in after[other]["blockedBy"]:
                after[other]["blockedBy"].remove(task_id)

    # reading the board

    def get(self, task_id) -> dict:
        task_id = parse_task_id(task_id)
        board = self._snapshot()
        if task_id not in board:
            raise TaskError("NOT_FOUND", f"there is no task {task_id}; call task_list to see the ids that exist")
        return self._public([board[task_id]], board)[0]

    def ready(self) -> list[dict]:
        """Tasks someone can start now: pending, unowned, every blocker completed."""
        board = self._snapshot()
        return self._public([t for t in board.values()
                             if self._up_for_grabs(t) and not self._open_blockers(t, board)], board)

    def _snapshot(self) -> dict[int, dict]:
        if not self.dir.is_dir():  # reading must not create the folder
            return {}
        with file_lock(self.lock_path):  # a consistent picture, never half of someone's update
            return self._read_board()

    # Kept last in the class body: below this line the name `list` means this method, not the builtin.
    def list(self, status: str | None = None, include_deleted: bool = False) -> list[dict]:
        if status is not None:
            check_status(status)
        board = self._snapshot()
        return self._public([t for t in board.values() if listed(t, status, include_deleted)], board)


# Views: a compact board for the model, Mermaid text for humans.

def render_board(tasks: list[dict], status: str | None = None, include_deleted: bool = False) -> str:
    """One line per task (no descriptions: task_get has them), then counts per status."""
    state = {t["id"]: t["status"] for t in tasks}
    shown = [t for t in tasks if listed(t, status, include_deleted)]
    if not shown:
        return "No tasks" + (f" with status {status}" if status else "") + ". Create one with task_create."
    lines = []
    for t in shown:
        line = f"{STATUS_MARKERS[t['status']]} #{t['id']} {t['subject']}"
        if t["owner"]:
            line += f"  @{t['owner']}"
        waiting = [b for b in t["blockedBy"] if state.get(b) != "completed"]
        if waiting and t["status"] != "deleted":
            line += "  (blocked by " + ", ".join(f"#{b}" for b in waiting) + ")"
        lines.append(line)
    counts = {s: sum(1 for t in shown if t["status"] == s) for s in TASK_STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n or s != "deleted")
    ready = [f"#{t['id']}" for t in shown if t["status"] == "pending" and not t["owner"]
             and all(state.get(b) == "completed" for b in t["blockedBy"])]
    return "\n".join(lines) + f"\n{len(shown)} tasks: {summary}; ready now: {', '.join(ready) or 'none'}"


def render_mermaid(tasks: list[dict]) -> str:
    """The graph as Mermaid text: paste it into any Mermaid viewer. Arrows point from blocker to blocked."""
    live = [t for t in tasks if t["status"] != "deleted"]
    lines = ["flowchart TD"]
    for t in live:
        label = f"{t['id']}: {t['subject']}".replace('"', "'").replace("\n", " ")
        lines.append(f'    t{t["id"]}["{label}<br/>{t["status"]}"]:::{t["status"]}')
    for t in live:
        lines.extend(f"    t{b} --> t{t['id']}" for b in t["blockedBy"])
    lines += ["    classDef pending fill:#eeeeee,stroke:#888888",
              "    classDef in_progress fill:#fff3cd,stroke:#d39e00",
              "    classDef completed fill:#d4edda,stroke:#28a745",
              "    classDef failed fill:#f8d7da,stroke:#dc3545"]
    return "\n".join(lines)


# The board as tools (for the model) and as slash commands (for you).
TASKS = TaskManager(WORKDIR / ".tasks")  # nothing on disk until the first task is created

ID_NOTE = "Use only ids that an earlier tool result returned; never guess one."
TASK_ID = {"anyOf": [{"type": "integer"}, {"type": "string"}], "description": "A task id, e.g. 3. " + ID_NOTE}
TASK_IDS = {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}

TASK_TOOLS = [
    {"name": "task_create",
     "description": "Add a task to the persistent task board (.tasks/; it survives restarts). Returns the "
                    "task as JSON with the id the board gave it. blockedBy: ids of existing tasks that must "
                    "be completed first - so create blockers first, read their ids from the results, then "
                    "create the tasks that wait for them. " + ID_NOTE,
     "input_schema": {"type": "object", "properties": {
         "subject": {"type": "string", "description": "Short imperative title."},
         "description": {"type": "string"}, "blockedBy": TASK_IDS}, "required": ["subject"]}},
    {"name": "task_update",
     "description": "Change one task: status (pending, in_progress, completed, failed, deleted), subject, "
                    "description, owner, or its edges: addBlockedBy/removeBlockedBy (tasks it waits for), "
                    "addBlocks/removeBlocks (tasks that wait for it). A task can start or complete only "
                    "when all its blockers are completed. Completing returns `unblocked`: the tasks that "
                    "just became ready. " + ID_NOTE,
     "input_schema": {"type": "object", "properties": {
         "task_id": TASK_ID, "status": {"type": "string", "enum": list(TASK_STATUSES)},
         "subject": {"type": "string"}, "description": {"type": "string"}, "owner": {"type": "string"},
         "addBlockedBy": TASK_IDS, "removeBlockedBy": TASK_IDS, "addBlocks": TASK_IDS, "removeBlocks": TASK_IDS},
         "required": ["task_id"]}},
    {"name": "task_get",
     "description": "One task in full, with its description and `blocks` (the tasks waiting for it).",
     "input_schema": {"type": "object", "properties": {"task_id": TASK_ID}, "required": ["task_id"]}},
    {"name": "task_list",
     "description": "The board in brief: one line per task (status, id, subject, owner, open blockers), "
                    "then counts and the tasks ready now. No descriptions: use task_get for those.",
     "input_schema": {"type": "object", "properties": {
         "status": {"type": "string", "enum": list(TASK_STATUSES)}, "include_deleted": {"type": "boolean"}}}},
]


def task_json(task: dict) -> str:
    return json.dumps(task, ensure_ascii=False)


def run_task_update(args: dict) -> str:
    return task_json(TASKS.update(
        args["task_id"], status=args.get("status"), subject=args.get("subject"),
        description=args.get("description"), owner=args.get("owner"),
        add_blocked_by=args.get("addBlockedBy"), remove_blocked_by=args.get("removeBlockedBy"),
        add_blocks=args.get("addBlocks"), remove_blocks=args.get("removeBlocks")))


def run_task_list(args: dict) -> str:
    status = args.get("status")
    if status is not None:
        check_status(status)
    return render_board(TASKS.list(include_deleted=True), status, args.get("include_deleted", False))


TASK_TOOL_HANDLERS = {
    "task_create": lambda args: task_json(TASKS.create(args["subject"], args.get("description", ""),
                                                       args.get("blockedBy"))),
    "task_update": run_task_update,
    "task_get": lambda args: task_json(TASKS.get(args["task_id"])),
    "task_list": run_task_list,
}


def show_tasks(arg: str, history: list) -> None:
    """/tasks [all]: the board as the model sees it (`all` includes deleted tasks)."""
    try:
        print(render_board(TASKS.list(include_deleted=True), include_deleted=arg == "all"))
    except (TaskError, CorruptTaskFile, OSError) as error:  # a broken board must not end the session
        print(f"[task board] {error}")


def show_graph(arg: str, history: list) -> None:
    """/graph: the dependency graph as Mermaid text (paste it into any Mermaid viewer)."""
    try:
        print(render_mermaid(TASKS.list()))
    except (TaskError, CorruptTaskFile, OSError) as error:
        print(f"[task board] {error}")


# --- who the teammates are: .team.json ------------------------------------------
AGENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
LEAD = "main"  # the REPL's own mailbox
TEAM_TIMEOUT = 120  # seconds team_review / team_shutdown wait for an answer


def check_name(name, what: str = "agent name") -> str:
    """Names become file names, so only a safe alphabet gets through."""
    if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        raise ValueError(f"invalid {what} {name!r}: use 1-64 letters, digits, '_' or '-'")
    return name


class TeamFileError(Exception):
    """.team.json exists but cannot be used; we refuse to overwrite it."""


class TeammateManager:
    """Teammate definitions in .team.json, shared by every session of the workspace."""

    def __init__(self, path: Path):
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")  # .team.json itself gets replaced

    def _load(self) -> dict:
        if not self.path.exists():
            return {"teammates": {}}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise TeamFileError(f"{self.path} is corrupt ({error}); fix or move it, it is left as is")
        if not isinstance(data, dict) or not isinstance(data.get("teammates"), dict):
            raise TeamFileError(f'{self.path} is not {{"teammates": {{...}}}}; fix or move it')
        return data

    def register(self, name: str, role: str, system_prompt: str, model: str | None = None) -> dict:
        check_name(name, "teammate name")
        if name == LEAD:
            raise ValueError(f"{LEAD!r} is the lead's own mailbox; pick another name")
        for field, value in (("role", role), ("system_prompt", system_prompt)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{field} must be a non-empty string")
        entry = {"name": name, "role": role.strip(), "system_prompt": system_prompt.strip()}
        if model:
            entry["model"] = str(model)
        with file_lock(self.lock_path):
            data = self._load()  # re-read inside the lock: another session may have written
            data["teammates"][name] = entry
            write_json_atomic(self.path, data)
        return entry

    def get(self, name: str) -> dict:
        teammates = self._load()["teammates"]
        if name not in teammates:
            known = ", ".join(sorted(teammates)) or "none yet"
            raise LookupError(f"no teammate named {name!r} (registered: {known})")
        return teammates[name]

    def list(self) -> list[dict]:
        return sorted(self._load()["teammates"].values(), key=lambda t: t["name"])

    def remove(self, name: str) -> None:
        with file_lock(self.lock_path):
            data = self._load()
            if data["teammates"].pop(name, None) is None:
                raise LookupError(f"no teammate named {name!r}")
            write_json_atomic(self.path, data)


# --- how a message reaches an agent: one JSONL mailbox each ---------------------
MSG_TYPES = ("request", "response", "broadcast", "message")


@dataclass(kw_only=True)
class Message:
    id: str = ""  # filled in by send() when empty
    from_agent: str
    to_agent: str
    content: str
    msg_type: str = "message"
    timestamp: str = ""  # ISO-8601 UTC, filled in by send() when empty
    in_reply_to: str | None = None

    def check(self) -> None:
        check_name(self.from_agent, "from_agent")
        check_name(self.to_agent, "to_agent")
        if self.msg_type not in MSG_TYPES:
            raise ValueError(f"msg_type {self.msg_type!r} is not one of {', '.join(MSG_TYPES)}")
        if not isinstance(self.content, str) or not self.content.strip():
            raise ValueError("content must be a non-empty string")

    @classmethod
    def from_json(cls, line: bytes) -> "Message":
        data = json.loads(line)
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


class MessageBus:
    """One append-only JSONL mailbox per agent: <root>/<agent>.jsonl.

    root is .mailbox/<session-id>, so two REPL sessions never see each other's traffic.
    Writers append one whole line under a cross-process lock; readers never lock:
    they read complete lines and leave a line without its newline for next time.
    """

    POLL_SECONDS = 0.05  # how often a waiter looks for writes from other processes

    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock = threading.Lock()  # guards the caches below
        self._arrived = threading.Condition()  # senders in this process wake waiters at once
        self._where: dict[str, tuple[str, int, int]] = {}  # id -> (agent, line start, line end)
        self._indexed: dict[str, int] = {}  # agent -> bytes of complete lines indexed so far
        self._reader = threading.local()  # per thread: agent -> mailbox size at its last receive

    def mailbox(self, agent: str) -> Path:
        return self.root / f"{check_name(agent)}.jsonl"

    def create_mailbox(self, agent: str) -> None:
        """An empty mailbox, so broadcasts reach an agent before anyone wrote to it."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.mailbox(agent).touch()

    def agents(self) -> list[str]:
        """Every agent that has a mailbox in this session."""
        return sorted(p.stem for p in self.root.glob("*.jsonl") if AGENT_NAME.fullmatch(p.stem))

    def send(self, message: Message) -> Message:
        message.check()
        explicit_id = bool(message.id)
        message.id = message.id or uuid.uuid4().hex
        message.timestamp = message.timestamp or datetime.now(timezone.utc).isoformat()
        line = (json.dumps(asdict(message), ensure_ascii=False) + "\n").encode("utf-8")
        path = self.mailbox(message.to_agent)
        with file_lock(path.with_suffix(".lock")):
            if explicit_id and self.find_message(message.id) is not None:
                raise ValueError(f"message id {message.id!r} is already used in this session")
            with open(path, "ab", buffering=0) as handle:  # unbuffered: one write() per line
                handle.write(line)
        with self._arrived:
            self._arrived.notify_all()
        return message

    def receive(self, agent: str, since_id: str | None = None) -> list[Message]:
        """Messages after the cursor message (exclusive); since_id=None reads from the start."""
        start = 0 if since_id is None else self._offset_after(agent, since_id)
        messages, size = self._read_from(agent, start)
        self._sizes()[agent] = size  # what this thread has now seen (wait_for_message)
        return messages

    def wait_for_message(self, agent: str, timeout: float) -> bool:
        """Wait until agent's mailbox holds bytes this thread has not received; False on timeout."""
        deadline = time.monotonic() + timeout
        path = self.mailbox(agent)
        with self._arrived:
            while True:
                if self._size(path) > self._sizes().get(agent, 0):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # Sleeps until a send() in this process notifies us, or POLL_SECONDS pass
                # and we stat the file again (another process cannot notify us).
                self._arrived.wait(min(remaining, self.POLL_SECONDS))

    def find_message(self, msg_id: str) -> Message | None:
        with self._lock:
            where = self._where.get(msg_id)
        if where is None:  # maybe written since we last looked: index what is new
            for agent in self.agents():
                self._read_from(agent, self._indexed.get(agent, 0))
            with self._lock:
                where = self._where.get(msg_id)
        if where is None:
            return None
        agent, start, end = where
        with open(self.mailbox(agent), "rb") as handle:
            handle.seek(start)
            return Message.from_json(handle.read(end - start))

    def _offset_after(self, agent: str, msg_id: str) -> int:
        with self._lock:
            where = self._where.get(msg_id)
        if where is None:  # a cursor we have not read yet (e.g. written by another process)
            self._read_from(agent, self._indexed.get(agent, 0))
            with self._lock:
                where = self._where.get(msg_id)
        if where is None or where[0] != agent:
            # Returning [] here would make a poller wait forever for nothing.
            raise LookupError(f"unknown cursor {msg_id!r}: no such message in {agent}'s mailbox")
        return where[2]

    def _read_from(self, agent: str, start: int) -> tuple[list[Message], int]:
        """Parse the complete lines from byte `start`; remember where each one is."""
        path = self.mailbox(agent)
        try:
            with open(path, "rb") as handle:
                handle.seek(start)
                data = handle.read()
        except FileNotFoundError:
            return [], 0
        messages, places, offset = [], [], start
        for raw in data.split(b"\n")[:-1]:  # the last piece has no newline yet: skip it
            end = offset + len(raw) + 1
            try:
                message = Message.from_json(raw)
                messages.append(message)
                places.append((message.id, (agent, offset, end)))
            except (ValueError, TypeError, KeyError) as error:
                print(f"[mailbox] skipped a corrupt line in {path} at byte {offset}: {error}")
            offset = end
        with self._lock:
            self._where.update(places)
            self._indexed[agent] = max(self._indexed.get(agent, 0), offset)
        return messages, start + len(data)

    def _sizes(self) -> dict:
        if not hasattr(self._reader, "sizes"):
            self._reader.sizes = {}
        return self._reader.sizes

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0


# --- how a request finds its answer: ids, in_reply_to, protocols ----------------
PROTOCOLS = ("plan_approval", "shutdown", "status")  # s11: workers report "started" and "stopped: why"


def encode_protocol(protocol: str, content: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return json.dumps({"protocol": protocol, "content": content}, ensure_ascii=False)


def decode_protocol(text: str) -> tuple[str | None, str]:
    """(protocol, body) for a protocol envelope; (None, text) for anything else."""
    try:
        data = json.loads(text)
    except ValueError:
        return None, text
    if isinstance(data, dict) and data.get("protocol") in PROTOCOLS and isinstance(data.get("content"), str):
        return data["protocol"], data["content"]
    return None, text


class ProtocolFSM:
    """Requests and answers for one agent.

    The state machine is per request: sent -> answered, and the only transition is a
    response whose in_reply_to is the request's id. The protocol travels with both.
    """

    def __init__(self, bus: MessageBus, agent: str):
        self.bus, self.agent = bus, check_name(agent)

    def request(self, to: str, protocol: str | None, content: str) -> str:
        body = content if protocol is None else encode_protocol(protocol, content)
        message = Message(from_agent=self.agent, to_agent=to, content=body, msg_type="request")
        return self.bus.send(message).id

    def respond(self, in_reply_to: str, content: str) -> str:
        original = self.bus.find_message(in_reply_to)
        if original is None:
            raise LookupError(f"cannot answer {in_reply_to!r}: no such message in this session")
        protocol, _ = decode_protocol(original.content)  # the answer speaks the same protocol
        body = content if protocol is None else encode_protocol(protocol, content)
        message = Message(from_agent=self.agent, to_agent=original.from_agent, content=body,
                          msg_type="response", in_reply_to=in_reply_to)
        return self.bus.send(message).id

    def broadcast(self, protocol: str, content: str) -> list[str]:
        body = encode_protocol(protocol, content)
        return [self.bus.send(Message(from_agent=self.agent, to_agent=agent, content=body,
                                      msg_type="broadcast")).id
                for agent in self.bus.agents() if agent != self.agent]

    def wait_response(self, msg_id: str, timeout: float) -> Message | None:
        deadline = time.monotonic() + timeout
        cursor = None
        while True:
            new = self.bus.receive(self.agent, since_id=cursor)
            for message in new:
                if message.msg_type == "response" and message.in_reply_to == msg_id:
                    return message
            cursor = new[-1].id if new else cursor
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.bus.wait_for_message(self.agent, remaining)


# --- teammates: one background loop per spawned teammate ------------------------
TEAMMATE_TOOLS = ("bash", "read_file", "write_file", "edit_file")  # managing the team stays with the lead
PLAN_REVIEW = ("Review the plan below. Start your answer with APPROVE or REJECT, "
               "then give one short reason.\n\nPlan:\n{plan}")


def teammate_turn(history: list, system: str, model: str) -> str:
    """agent_loop for a teammate: its own prompt, model and history, base tools, no printing."""
    tools = [tool for tool in TOOLS if tool["name"] in TEAMMATE_TOOLS]
    while True:
        response = client.messages.create(model=model, system=system, messages=history,
                                          tools=tools, max_tokens=MAX_TOKENS)
        history.append({"role": "assistant",
                        "content": [block.model_dump(exclude_none=True) for block in response.content]})
        if response.stop_reason != "tool_use":
            close_turn(history, f"not run: the reply ended with {response.stop_reason}")
            text = "\n".join(block.text for block in response.content if block.type == "text")
            return text.strip() or "(the teammate gave no text)"
        history.append({"role": "user", "content": [
            run_tool(block) if block.name in TEAMMATE_TOOLS else
            {"type": "tool_result", "tool_use_id": block.id, "is_error": True,
             "content": f"{block.name} is not a teammate tool; use {', '.join(TEAMMATE_TOOLS)}"}
            for block in response.content if block.type == "tool_use"]})


class TeammateLoop:
    """A spawned teammate: a thread that answers the requests in its mailbox."""

    def __init__(self, definition: dict, bus: MessageBus):
        self.name = definition["name"]
        self.model = definition.get("model") or MODEL
        self.system = (f"{definition['system_prompt']}\n\nYou are the teammate {self.name!r} "
                       f"({definition['role']}) working in {WORKDIR}. Your final text answer "
                       "is sent back to whoever asked.")
        self.fsm = ProtocolFSM(bus, self.name)
        self.history: list = []
        self.stopping = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        # Take the backlog now, in the spawning thread: what is already here was sent
        # "before it started", whatever the thread scheduler does next.
        backlog = self.fsm.bus.receive(self.name)
        self.fsm.bus.create_mailbox(self.name)
        self.thread = threading.Thread(target=self.run, args=(backlog,),
                                       name=f"teammate-{self.name}", daemon=True)
        self.thread.start()

    def is_running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def run(self, backlog: list[Message]) -> None:
        self.handle(self.unanswered(backlog))  # an old shutdown is not in there: not obeyed
        cursor = backlog[-1].id if backlog else None
        while not self.stopping:
            batch = self.fsm.bus.receive(self.name, since_id=cursor)
            if not batch:
                self.fsm.bus.wait_for_message(self.name, timeout=1.0)
                continue
            cursor = batch[-1].id
            self.handle(batch)

    def unanswered(self, backlog: list[Message]) -> list[Message]:
        """Old requests (not shutdowns) that no earlier run of this teammate answered."""
        requests = [m for m in backlog if m.msg_type == "request"
                    and decode_protocol(m.content)[0] != "shutdown"]
        answered = {reply.in_reply_to for sender in {m.from_agent for m in requests}
                    for reply in self.fsm.bus.receive(sender) if reply.from_agent == self.name}
        return [m for m in requests if m.id not in answered]

    def handle(self, batch: list[Message]) -> None:
        for message in batch:
            protocol, body = decode_protocol(message.content)
            if protocol == "shutdown" and message.msg_type != "response":
                reply = f"{self.name} is shutting down"
                self.stopping = True  # the rest of this batch only gets a polite no
            elif message.msg_type == "request":
                reply = "shutting down" if self.stopping else self.answer(message, protocol, body)
            else:
                continue  # responses, broadcasts and notes need no answer
            try:
                self.fsm.respond(message.id, reply)
            except (OSError, LookupError, ValueError) as error:  # e.g. the asker's mailbox is broken
                print(f"[{self.name}] could not answer {message.id}: {error}")

    def answer(self, message: Message, protocol: str | None, body: str) -> str:
        prompt = PLAN_REVIEW.format(plan=body) if protocol == "plan_approval" else \
            f"Request from {message.from_agent}:\n{body}"
        add_user_text(self.history, prompt)
        try:
            return teammate_turn(self.history, self.system, self.model)
        except Exception as error:  # one bad request must not kill the teammate
            close_turn(self.history, "the request failed")  # keep the history valid
            return f"error: {self.name} could not answer ({type(error).__name__}: {error})"


# --- the lead's side: team tools, its inbox, REPL commands ----------------------
SESSION_ID = datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
TEAM = TeammateManager(WORKDIR / ".team.json")
BUS = MessageBus(WORKDIR / ".mailbox" / SESSION_ID)  # nothing is created until first use
LEAD_FSM = ProtocolFSM(BUS, LEAD)
RUNNING: dict[str, TeammateLoop] = {}  # teammates spawned by this process


class LeadInbox:
    """main's mailbox as the lead reads it: a cursor, plus replies a tool already delivered."""

    def __init__(self, bus: MessageBus):
        self.bus, self.cursor, self.delivered = bus, None, set()

    def unread(self) -> list[Message]:
        return [m for m in self.bus.receive(LEAD, self.cursor) if m.id not in self.delivered]

    def take(self) -> list[Message]:
        new = self.bus.receive(LEAD, self.cursor)
        self.cursor = new[-1].id if new else self.cursor
        return [m for m in new if m.id not in self.delivered]


INBOX = LeadInbox(BUS)


def status_line(message: Message) -> str:
    protocol, body = decode_protocol(message.content)
    tag = f" [{protocol}]" if protocol else ""
    return f"Team {message.msg_type} from {message.from_agent}{tag}: {preview(body)}"


def deliver_team_news(messages: list) -> None:
    """Print main's new mail and add it to the next request, after any tool results."""
    try:
        news = INBOX.take()
    except (OSError, LookupError) as error:  # a broken mailbox must not end the REPL
        print(f"[team] cannot read the lead's mailbox: {error}")
        return
    lines = []
    for message in news:
        print(status_line(message))
        protocol, body = decode_protocol(message.content)
        reply = f", answering {message.in_reply_to}" if message.in_reply_to else ""
        lines.append(f"- {message.msg_type} {message.id} from {message.from_agent}"
                     f"{f' [{protocol}]' if protocol else ''}{reply}:\n{body}")
    if lines:
        add_user_text(messages, "New messages in your team mailbox:\n" + "\n".join(lines))


def is_running(name: str) -> bool:
    """Running in this process; another REPL's teammates are not visible here."""
    return name in RUNNING and RUNNING[name].is_running()


def running_teammate(name: str) -> TeammateLoop:
    if not is_running(check_name(name, "teammate name")):
        raise ValueError(f"{name} is not running in this session; team_spawn it first")
    return RUNNING[name]


def await_reply(name: str, request_id: str) -> str:
    reply = LEAD_FSM.wait_response(request_id, TEAM_TIMEOUT)
    if reply is None:
        raise TimeoutError(f"no answer from {name} within {TEAM_TIMEOUT}s; "
                           f"request {request_id} stays in its mailbox")
    INBOX.delivered.add(reply.id)  # this tool result carries it; do not repeat it as news
    return decode_protocol(reply.content)[1]


def run_team_register(name: str, role: str, system_prompt: str, model: str | None = None) -> str:
    entry = TEAM.register(name, role, system_prompt, model)
    return f"Registered teammate {entry['name']} ({entry['role']}) in {TEAM.path.name}"


def run_team_list() -> str:
    rows = []
    for teammate in TEAM.list():
        state = agent_state(teammate["name"])  # s11: working on #id, idle, stopped - from the board and reports
        model = f", model {teammate['model']}" if teammate.get("model") else ""
        rows.append(f"{teammate['name']} - {teammate['role']} [{state}{model}]")
    return "\n".join(rows) or "No teammates registered yet (use team_register)."


def run_team_spawn(name: str) -> str:
    definition = TEAM.get(check_name(name, "teammate name"))
    if is_running(name):
        raise ValueError(f"Teammate {name} is already running.")
    RUNNING[name] = TeammateLoop(definition, BUS)
    RUNNING[name].start()
    return f"Spawned {name}; it reads {BUS.mailbox(name).relative_to(WORKDIR)}"


def run_team_send(name: str, message: str) -> str:
    if name != LEAD:
        TEAM.get(check_name(name, "teammate name"))  # only registered teammates (or main)
    request_id = LEAD_FSM.request(name, None, message)
    running = name == LEAD or is_running(name) or reported_running(name)  # s11: or a worker in another process
    idle = "" if running else f" ({name} is not running; it answers once spawned)"  # s11: or a worker elsewhere
    return f"Sent message {request_id} to {name}{idle}. Its answer will arrive in your inbox."


def run_team_review(name: str, plan: str) -> str:
    running_teammate(name)
    verdict = await_reply(name, LEAD_FSM.request(name, "plan_approval", plan))
    return f"{name}'s verdict: {verdict}"


def run_team_shutdown(name: str) -> str:
    loop = running_teammate(name)
    acknowledgement = await_reply(name, LEAD_FSM.request(name, "shutdown", "please stop"))
    loop.thread.join(timeout=TEAM_TIMEOUT)  # it ends right after answering its current batch
    return f"{name} acknowledged: {acknowledgement}"


def name_schema(**extra: dict) -> dict:
    properties = {"name": {"type": "string"}, **extra}
    return {"type": "object", "properties": properties, "required": list(properties)}


TEAM_TOOLS = [
    {"name": "team_register", "description": "Define or redefine a teammate (saved in .team.json).",
     "input_schema": {"type": "object", "properties": {
         "name": {"type": "string"}, "role": {"type": "string"},
         "system_prompt": {"type": "string"}, "model": {"type": "string"}},
         "required": ["name", "role", "system_prompt"]}},
    {"name": "team_list", "description": "List teammates and whether each runs in this session.",
     "input_schema": {"type": "object", "properties": {}}},
    {"name": "team_spawn", "description": "Start a registered teammate in the background.",
     "input_schema": name_schema()},
    {"name": "team_send", "description": "Send a teammate a request; returns its id at once. "
     "The answer arrives later as a message in your inbox.",
     "input_schema": name_schema(message={"type": "string"})},
    {"name": "team_review", "description": "Ask a running teammate to approve or reject a plan; "
     "waits for the verdict.", "input_schema": name_schema(plan={"type": "string"})},
    {"name": "team_shutdown", "description": "Ask a running teammate to stop; waits for its acknowledgement.",
     "input_schema": name_schema()},
]

TEAM_HANDLERS = {
    "team_register": lambda args: run_team_register(args["name"], args["role"], args["system_prompt"],
                                                    args.get("model")),
    "team_list": lambda args: run_team_list(),
    "team_spawn": lambda args: run_team_spawn(args["name"]),
    "team_send": lambda args: run_team_send(args["name"], args["message"]),
    "team_review": lambda args: run_team_review(args["name"], args["plan"]),
    "team_shutdown": lambda args: run_team_shutdown(args["name"]),
}


def team_command(arg: str, history: list) -> None:
    """/team list | /team spawn <name> | /team send <name> <message>"""
    action, _, rest = arg.partition(" ")
    name, _, text = rest.strip().partition(" ")
    try:
        if action == "list":
            print(run_team_list())
        elif action == "spawn" and name:
            print(run_team_spawn(name))
        elif action == "send" and name and text.strip():
            print(run_team_send(name, text.strip()))
        else:
            print("Usage: /team list | /team spawn <name> | /team send <name> <message>")
    except Exception as error:  # a typo must not end the REPL
        print(f"[team] {error}")


def inbox_command(arg: str, history: list) -> None:
    """/inbox: main's unread messages, left unread (the model still gets them next turn)."""
    try:
        unread = INBOX.unread()
    except (OSError, LookupError) as error:
        print(f"[team] cannot read the lead's mailbox: {error}")
        return
    for message in unread:
        print(status_line(message))
    if not unread:
        print("No unread team messages.")


# --- s11: autonomous teammates - mail first, then the board, then a short wait ---
LEASE_SECONDS = float(os.getenv("LEASE_SECONDS") or 300)  # a claim lapses this long after its last renewal
POLL_INTERVAL = float(os.getenv("POLL_INTERVAL") or 1)  # seconds an idle worker waits on its mailbox
IDLE_TIMEOUT = float(os.getenv("IDLE_TIMEOUT") or 60)  # seconds with nothing to do before a worker stops
WORKER_CONTEXT_LIMIT = int(os.getenv("WORKER_CONTEXT_LIMIT") or 30_000)  # estimated tokens, then compact
RESULT_CHARS = 300  # the final answer, shortened, becomes the task's result note
WORKER_ROLE = "autonomous worker"
WORKER_PROMPT = ("You take tasks from the shared task board and do them with your tools. Work only on "
                 "the task you are given, then answer with a one-line summary of what you did.")


def lease_deadline() -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=LEASE_SECONDS)).isoformat(timespec="microseconds")


def lease_expired(task: dict) -> bool:
    """An in_progress task whose lease ran out: its worker stopped renewing it (killed, hung, gone)."""
    lease = task.get("lease_until")
    if task["status"] != "in_progress" or not isinstance(lease, str):
        return False  # no lease (e.g. set in_progress by hand): nobody takes it away
    try:
        return datetime.fromisoformat(lease) <= datetime.now(timezone.utc)
    except (ValueError, TypeError):  # a hand-edited lease we cannot read: leave the task alone
        return False


def check_claim(board: dict[int, dict], task_id: int, owner: str | None) -> None:
    """update(expected_owner=X) goes through only while X still holds the claim."""
    task = board.get(task_id)
    if owner is None or task is None:
        return  # no check asked for; an unknown id is reported by _plan_update
    if task["status"] != "in_progress" or task["owner"] != owner:
        holder = f"owned by {task['owner']}" if task["owner"] else "unowned"
        raise TaskError("CONFLICT", f"task {task_id} is no longer {owner}'s claim (it is {task['status']}, "
                                    f"{holder}); its lease may have run out and someone else taken it")


@contextlib.contextmanager
def heartbeat(board: TaskManager, task_id: int, owner: str):
    """While the body runs, renew the claim's lease every LEASE_SECONDS / 3 from a thread of its own."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(LEASE_SECONDS / 3):
            try:
                board.update(task_id, expected_owner=owner, worker_fields={"lease_until": lease_deadline()})
            except TaskError as error:  # the claim is gone: renewing it would steal it back
                say(owner, f"stopped renewing #{task_id}: {error}")
                return
            except (CorruptTaskFile, OSError) as error:  # maybe passing: try again next beat
                say(owner, f"could not renew #{task_id}: {error}")

    thread = threading.Thread(target=beat, name=f"heartbeat-{owner}-{task_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def say(name: str, text: str) -> None:
    print(f"[{name}] {text}\n", end="", flush=True)  # one write, so lines of several threads stay whole


def task_prompt(task: dict) -> str:
    """A claimed task as the worker's prompt: what to do, and which tasks wait for it."""
    waiting = ", ".join(f"#{i}" for i in task["blocks"]) or "no other task"
    return (f"Task #{task['id']}: {task['subject']}\n{task['description']}".rstrip()
            + f"\nFinishing it unblocks: {waiting}. Do the work with your tools, then answer "
              "with a one-line summary of what you did.")


def estimated_tokens(messages: list) -> int:
    return len(json.dumps(messages, ensure_ascii=False)) // 4  # about four characters a token


class AutonomousAgent(TeammateLoop):
    """A teammate that finds its own work. A --worker process runs this same class and loop."""

    def __init__(self, definition: dict, bus: MessageBus, board: TaskManager):
        super().__init__(definition, bus)
        self.role = definition["role"]
        self.board = board
        self.done: list[str] = []  # one line per finished piece of work: the digest after compaction
        self.history = self.fresh_history()

    def identity(self) -> str:
        return (f"<identity>You are {self.name!r} ({self.role}), an autonomous member of the team led "
                f"by {LEAD!r}; mailbox session {self.fsm.bus.root.name}; workspace {WORKDIR}. You take "
                "ready tasks from the board in .tasks/ one at a time; your final answer becomes the "
                "task's result note.</identity>")

    def fresh_history(self) -> list:
        """Who I am, always first; after a compaction, what I have done so far."""
        blocks = [{"type": "text", "text": self.identity()}]
        if self.done:
            blocks.append({"type": "text", "text": "Your history was compacted. Work done so far:\n"
                                                   + "\n".join(self.done[-20:])})
        return [{"role": "user", "content": blocks}]

    def compact_if_long(self) -> None:
        """At a turn boundary: past the limit, the history restarts from the identity and a digest."""
        if estimated_tokens(self.history) > WORKER_CONTEXT_LIMIT:
            self.history = self.fresh_history()
            say(self.name, f"history compacted: identity + digest of {len(self.done)} items")

    def run(self, backlog: list[Message]) -> None:
        self.report("started")
        try:
            reason = self.work(backlog)
        except Exception as error:  # a broken board or mailbox: say why instead of dying silently
            reason = f"crashed: {type(error).__name__}: {error}"
        say(self.name, f"stopped: {reason}")
        self.report(f"stopped: {reason}")

    def work(self, backlog: list[Message]) -> str:
        """The loop, in order: mail, then the board, then a short wait. Returns why it ended."""
        self.handle(self.unanswered(backlog))  # s09's rules: old requests answered, old shutdowns not obeyed
        cursor = backlog[-1].id if backlog else None
        busy_at = time.monotonic()
        while not self.stopping:
            batch = self.fsm.bus.receive(self.name, since_id=cursor)
            if batch:  # 1. mail first
                cursor = batch[-1].id
                self.handle(batch)
            elif not self.work_on_next_task():  # 2. then the board
                if time.monotonic() - busy_at >= IDLE_TIMEOUT:  # 4. nothing to do for too long
                    return f"idle for {IDLE_TIMEOUT:g}s (no messages, no ready tasks)"
                self.fsm.bus.wait_for_message(self.name, timeout=POLL_INTERVAL)  # 3. a short wait
                continue
            busy_at = time.monotonic()
        return "shutdown requested"

    def work_on_next_task(self) -> bool:
        """Claim the first ready task (lowest id) and do it. False: there was nothing to claim."""
        ready = self.board.ready()
        for task in ready:
            try:
                self.board.claim(task["id"], owner=self.name)
            except TaskError:
                continue  # another agent was faster, or the task changed: normal, silent, try the next
            ids = ", ".join(f"#{t['id']}" for t in ready)
            say(self.name, f"claimed #{task['id']} {task['subject']} (ready were: {ids})")
            self.do_task(task)
            return True
        return False

    def do_task(self, task: dict) -> None:
        """Run the task as a prompt while a heartbeat keeps the claim; then record how it ended."""
        self.compact_if_long()
        add_user_text(self.history, task_prompt(task))
        with heartbeat(self.board, task["id"], self.name):
            try:
                status, note = "completed", teammate_turn(self.history, self.system, self.model)
            except Exception as error:  # an API error or a broken tool: the task failed, the worker goes on
                close_turn(self.history, "the task failed")  # keep the history valid
                status, note = "failed", f"{type(error).__name__}: {error}"
        note = preview(note, RESULT_CHARS)
        try:
            self.board.update(task["id"], status=status, expected_owner=self.name,
                              worker_fields={"result": note})
        except TaskError as error:  # the lease ran out and the task moved on: our result is dropped
            say(self.name, f"could not mark #{task['id']} {status}: {error}")
            return
        self.done.append(f"- task #{task['id']} {task['subject']}: {status}: {preview(note, 80)}")
        say(self.name, f"{status} #{task['id']}: {note}")

    def answer(self, message: Message, protocol: str | None, body: str) -> str:
        self.compact_if_long()
        reply = super().answer(message, protocol, body)
        self.done.append(f"- answered {message.from_agent}: {preview(reply, 80)}")
        return reply

    def report(self, status: str) -> None:
        """Tell the lead how this worker is doing; /team list reads these reports."""
        self.fsm.bus.send(Message(from_agent=self.name, to_agent=LEAD,
                                  content=encode_protocol("status", status)))


# --- the lead's side: spawning workers, and what /team list shows ----------------
def worker_definition(name: str) -> dict:
    """The worker's entry in .team.json; a name nobody registered gets a plain worker entry."""
    try:
        return TEAM.get(check_name(name, "worker name"))
    except LookupError:
        return TEAM.register(name, WORKER_ROLE, WORKER_PROMPT)


def agent_state(name: str) -> str:
    """working on #id, idle or stopped: read from the board and from the agent's own reports."""
    for task in TASKS.list(status="in_progress"):
        if task["owner"] == name:
            return f"working on #{task['id']}" + (", lease expired" if lease_expired(task) else "")
    last_report = None
    for message in BUS.receive(LEAD):
        protocol, body = decode_protocol(message.content)
        if message.from_agent == name and protocol == "status":
            last_report = body
    if last_report is not None:
        return "idle" if last_report == "started" else "stopped"
    return "running" if is_running(name) else "not running"  # an s09 teammate: it sends no reports


def reported_running(name: str) -> bool:
    """Alive by its own reports: it may be a --worker process, which this process cannot see."""
    try:
        state = agent_state(name)
    except (CorruptTaskFile, OSError):  # a broken board must not turn a message already sent into an error
        return False
    return state == "idle" or state.startswith("working on")


def run_team_spawn_autonomous(name: str) -> str:
    definition = worker_definition(name)
    if is_running(name) or reported_running(name):  # two agents with one name would share a mailbox
        raise ValueError(f"{name} is already running ({agent_state(name)}). If it crashed, spawn a worker "
                         "with another name: the task it held goes back to the board when its lease runs out.")
    RUNNING[name] = AutonomousAgent(definition, BUS, TASKS)
    RUNNING[name].start()
    return (f"Spawned autonomous worker {name}: it claims ready tasks from {TASKS.dir.name}/ by itself, "
            f"and stops after {IDLE_TIMEOUT:g}s with nothing to do. Its reports arrive in your inbox.")


AUTONOMOUS_TOOLS = [
    {"name": "team_spawn_autonomous",
     "description": "Start an autonomous teammate in the background. It answers its mail, takes ready "
                    "tasks from the task board by itself (lowest id first), puts a result note on each, "
                    "and stops after a while with nothing to do. An unregistered name gets a plain "
                    "worker definition. Plan the tasks with task_create and blockedBy.",
     "input_schema": name_schema()},
]

AUTONOMOUS_HANDLERS = {"team_spawn_autonomous": lambda args: run_team_spawn_autonomous(args["name"])}


# --- one worker as its own process: --worker NAME [--session ID] ----------------
def find_session(mailbox_root: Path, session: str | None) -> Path:
    """The lead's session folder: the one named, or else the most recently modified one."""
    if session is not None:
        folder = mailbox_root / check_name(session, "session id")
        if not folder.is_dir():
            raise LookupError(f"there is no session {session!r} in {mailbox_root}")
        return folder
    folders = [p for p in mailbox_root.iterdir() if p.is_dir()] if mailbox_root.is_dir() else []
    if not folders:
        raise LookupError(f"no lead session in {mailbox_root}: start the lead first "
                          "(python agents/s11_autonomous.py) in this folder, or pass --session ID")
    return max(folders, key=lambda folder: folder.stat().st_mtime)


def flag_value(argv: list[str], flag: str) -> str | None:
    if flag not in argv:
        return None
    at = argv.index(flag) + 1
    if at >= len(argv) or argv[at].startswith("--"):
        raise ValueError(f"{flag} needs a value, e.g. {flag} alice")
    return argv[at]


def run_worker(argv: list[str]) -> int:
    """One autonomous teammate as this process, on the lead's board and session mailbox."""
    try:
        name = check_name(flag_value(argv, "--worker"), "worker name")
        if client is None:
            raise ValueError("a worker calls the model: set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN")
        bus = MessageBus(find_session(WORKDIR / ".mailbox", flag_value(argv, "--session")))
        worker = AutonomousAgent(worker_definition(name), bus, TASKS)
    except (ValueError, LookupError, TeamFileError) as error:
        print(f"[worker] {error}", file=sys.stderr)
        return 2
    say(name, f"joined session {bus.root.name} in {WORKDIR}")
    worker.start()  # the same thread and loop as team_spawn_autonomous
    try:
        while worker.is_running():
            worker.thread.join(timeout=0.5)  # short joins keep Ctrl-C responsive
    except KeyboardInterrupt:
        say(name, "interrupted; a task it held goes back to the board when its lease runs out")
        return 130
    return 0


# -- The tool table: what the model sees, and what runs ------------------------
TOOLS = [
    {"name": "bash", "description": "Run a shell command in the workspace.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                      "required": ["command"]}},
    {"name": "read_file", "description": "Read a text file; limit = max lines.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                      "limit": {"type": "integer"}}, "required": ["path"]}},
    {"name": "write_file", "description": "Create or overwrite a text file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                      "content": {"type": "string"}}, "required": ["path", "content"]}},
    {"name": "edit_file", "description": "Replace one exact, unique piece of text in a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                      "old_text": {"type": "string"}, "new_text": {"type": "string"}},
                      "required": ["path", "old_text", "new_text"]}},
    *TASK_TOOLS,  # s07: task_create, task_update, task_get, task_list
    *TEAM_TOOLS,  # s09: register, list, spawn, send, review, shut down teammates
    *AUTONOMOUS_TOOLS,  # s11: team_spawn_autonomous
]

TOOL_HANDLERS = {
    "bash": lambda args: run_bash(args["command"]),
    "read_file": lambda args: run_read(args["path"], args.get("limit")),
    "write_file": lambda args: run_write(args["path"], args["content"]),
    "edit_file": lambda args: run_edit(args["path"], args["old_text"], args["new_text"]),
    **TASK_TOOL_HANDLERS,  # s07: the task tools run against TASKS
    **TEAM_HANDLERS,  # s09: the team tools
    **AUTONOMOUS_HANDLERS,  # s11: autonomous workers
}

SLASH_COMMANDS = {"/tasks": show_tasks, "/graph": show_graph,  # s11: s07's board and s09's team, for you
                  "/team": team_command, "/inbox": inbox_command}  # s11: s07's board and s09's team, for you

JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
              "array": list, "object": dict}


def check_args(name: str, args: dict) -> None:
    """Check arguments against the tool's schema; say what is wrong and what is allowed."""
    schema = next(tool["input_schema"] for tool in TOOLS if tool["name"] == name)
    properties = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in args]
    if missing:
        raise ValueError(f"missing required argument(s) {missing}; {name} takes {sorted(properties)}")
    for key, value in args.items():
        expected = properties.get(key, {}).get("type")
        if key not in properties:
            raise ValueError(f"unknown argument {key!r}; {name} takes {sorted(properties)}")
        wrong_bool = isinstance(value, bool) and expected in ("integer", "number")
        if expected in JSON_TYPES and (wrong_bool or not isinstance(value, JSON_TYPES[expected])):
            raise ValueError(f"argument {key!r} must be of type {expected}, got {type(value).__name__}")


def run_tool(block) -> dict:
    """Run one tool_use block; always return exactly one tool_result, errors included."""
    result = {"type": "tool_result", "tool_use_id": block.id}
    if block.name not in TOOL_HANDLERS:
        result.update(is_error=True, content=f"Unknown tool {block.name!r}. Available: {sorted(TOOL_HANDLERS)}")
        return result
    args = block.input if isinstance(block.input, dict) else {}
    try:
        check_args(block.name, args)
        result["content"] = TOOL_HANDLERS[block.name](args)
    except Exception as error:  # any failure becomes a result the model can read
        result.update(is_error=True, content=f"Error: {error}")
    return result


def preview(text: str, width: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[:width] + "..."


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages: list) -> None:
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
        deliver_team_news(messages)  # s09: teammates' mail joins the next request, after tool results
        response = client.messages.create(
            model=MODEL, system=SYSTEM, messages=messages,
            tools=TOOLS, max_tokens=MAX_TOKENS,
        )
        messages.append({"role": "assistant",
                         "content": [block.model_dump(exclude_none=True) for block in response.content]})
        for block in response.content:
            if block.type == "text":
                print(block.text)
        if response.stop_reason != "tool_use":
            close_turn(messages, f"not run: the reply ended with {response.stop_reason}")
            return
        results = []
        for block in response.content:
            if block.type == "tool_use":
                print(f"> {block.name}: {preview(json.dumps(block.input, ensure_ascii=False), 120)}")
                result = run_tool(block)
                print(f"  {'ERROR ' if result.get('is_error') else ''}{preview(result['content'])}")
                results.append(result)
        messages.append({"role": "user", "content": results})


def close_turn(messages: list, reason: str) -> None:
    """Answer every tool_use still open, so the next request is valid (API rule)."""
    last = messages[-1] if messages else None
    if last and last["role"] == "assistant" and isinstance(last["content"], list):
        open_ids = [b["id"] for b in last["content"] if b.get("type") == "tool_use"]
        if open_ids:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": reason, "is_error": True}
                for i in open_ids]})


def add_user_text(messages: list, text: str) -> None:
    """Append the user's words; join them to a trailing user turn so roles keep alternating."""
    if messages and messages[-1]["role"] == "user":
        last = messages[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        last["content"].append({"type": "text", "text": text})
    else:
        messages.append({"role": "user", "content": text})


def run_slash_command(line: str, history: list) -> None:
    name, _, arg = line.partition(" ")
    command = SLASH_COMMANDS.get(name)
    if command:
        command(arg.strip(), history)
    else:
        print(f"Unknown command {name}. Available: {sorted(SLASH_COMMANDS) or 'none'}")


# -- The REPL ---------------------------------------------------------------------
def repl(prompt: str = "s11 >> ") -> None:  # s11: its own prompt
    history: list = []
    BUS.create_mailbox(LEAD)  # s11: the session folder exists now, so --worker processes can find it
    while True:
        try:
            query = input(prompt).strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return
        if query.lower() in ("", "q", "exit"):
            return
        try:
            if query.startswith("/"):
                run_slash_command(query, history)
            else:
                add_user_text(history, query)
                agent_loop(history)
        except KeyboardInterrupt:
            close_turn(history, "interrupted by the user")
            print("\n[turn interrupted; the conversation is kept]")
        except APIError as error:
            close_turn(history, "the turn failed with an API error")
            print(f"[API error] {type(error).__name__}: {getattr(error, 'message', error)}")
        print()


def main() -> None:
    if "--worker" in sys.argv:  # s11: one autonomous teammate as its own process
        sys.exit(run_worker(sys.argv))  # s11: one autonomous teammate as its own process
    if "--demo" in sys.argv or not (API_KEY or AUTH_TOKEN):
        try:
            import offline  # the local stand-in, only needed without credentials
        except ImportError:
            sys.exit("No ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN set, and the offline demo "
                     "(agents/offline.py) is not next to this script. Set a key in .env to run.")
        sys.exit(offline.run_demo(__file__))
    repl()


if __name__ == "__main__":
    main()
