#!/usr/bin/env python3
"""s07_task_system.py - a persistent task graph that outlives the conversation.

Conversation history is a process; a task board is state. Goals that must
survive compaction, restarts and hand-over between agents live on disk, one
JSON file per task, linked by `blockedBy` edges:

    .tasks/task_1.json   {"id": 1, "status": "completed", "blockedBy": []}
    .tasks/task_2.json   {"id": 2, "status": "pending",   "blockedBy": [1]}
    .tasks/task_3.json   {"id": 3, "status": "pending",   "blockedBy": [1]}
    .tasks/task_4.json   {"id": 4, "status": "pending",   "blockedBy": [2, 3]}

              +--> [2] --+
        [1] --+          +--> [4]      1 done: 2 and 3 are ready (in parallel)
              +--> [3] --+             2 and 3 done: 4 is unblocked

The board answers at any time: what can run now, what waits for what, and
what finishing a task unblocks. `blocks` is never stored - it is derived from
everyone's `blockedBy` - so each edge has one source of truth. Every change
takes a cross-process lock, re-reads, validates everything, then writes only
the files that change, each one atomically.

Key insight: put the plan where the conversation cannot lose it - on disk, as
a graph that says what is ready.

Run:  python agents/s07_task_system.py           (offline demo when no key is set)
      python agents/s07_task_system.py --demo    (force the offline demo)
      In the REPL, /tasks prints the board and /graph prints it as Mermaid.
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


# -- s07: the task board - a dependency graph on disk that outlives the chat -----
# One JSON file per task in .tasks/, plus .highwatermark (the last id handed out)
# and .lock (the cross-process lock). Only `blockedBy` is stored; `blocks` is
# derived when reading, so every edge has exactly one source of truth. Every
# change: lock, re-read, validate everything, then write only what changed.
import contextlib
import tempfile
from datetime import datetime, timezone

if os.name == "nt":
    import msvcrt
else:
    import fcntl

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
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
        return task["status"] == "pending" and not task["owner"]

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
                    "updated_at": utc_now()}
            write_json_atomic(self._path(task_id), task)
        return task

    def update(self, task_id, *, status=None, subject=None, description=None, owner=None,
               add_blocked_by=None, remove_blocked_by=None, add_blocks=None, remove_blocks=None,
               expected_status=None) -> dict:
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
]

TOOL_HANDLERS = {
    "bash": lambda args: run_bash(args["command"]),
    "read_file": lambda args: run_read(args["path"], args.get("limit")),
    "write_file": lambda args: run_write(args["path"], args["content"]),
    "edit_file": lambda args: run_edit(args["path"], args["old_text"], args["new_text"]),
    **TASK_TOOL_HANDLERS,  # s07: the task tools run against TASKS
}

SLASH_COMMANDS = {"/tasks": show_tasks, "/graph": show_graph}  # s07: the board and its graph, for you

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
def repl(prompt: str = "s07 >> ") -> None:  # s07: its own prompt
    history: list = []
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
