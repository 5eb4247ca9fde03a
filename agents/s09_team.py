#!/usr/bin/env python3
"""s09_team.py - a team that works from the task board: mailboxes, protocols, assignment by message.
Base: s07_task_system.py - diff against it.

One agent works alone. A team adds teammates: agents with their own prompt and history,
each in a background thread, sharing the board of s07. A team is a few plain files and
one loop per teammate:

    .team.json                        who the teammates are (shared by every session)
    .mailbox/<session>/lead.jsonl     the lead's mailbox: one JSON line per message
    .mailbox/<session>/alice.jsonl    a teammate's mailbox

    lead (the REPL)                                        teammate "alice" (a thread)
    task_create #1 #2 #3 on the board                      waits for mail, then runs its
    team_review(reviewer, plan) --request id=7---------->  own agent loop with the task
           <--------------------response reply_to=7----    tools: in_progress, completed
    team_send(alice, task_id=2)  --request: "#2 is yours"-> ...
    next request: the news rides along <-response: done-  (the answer to request #8)

A request has an id; its answer carries reply_to = that id. plan_approval and shutdown are
requests with a protocol name. Appends take a cross-process lock and write whole lines;
readers remember a byte offset, so threads and processes can share a mailbox.

Key insight: agents coordinate through files and ids, not each other's memory - the plan is
on the board, and a teammate's answer reaches the lead through its mailbox like anyone's.

Read in this order: Mailbox.send / read, Teammate.run and answer, deliver_team_news, the tools.
Run:  python agents/s09_team.py  [--demo]  [--trace run.html]    In the REPL: /team, /inbox, /tasks
"""

import json
import os
import re
import signal  # s02: bash is stopped whole, also by a Ctrl-C while it starts
import subprocess
import sys
import threading  # s02: bash's output is read as it comes
from pathlib import Path

from anthropic import Anthropic, APIError  # s02: one kind of error
from dotenv import load_dotenv

# -- Configuration ------------------------------------------------------------
load_dotenv(".env")  # the current folder's .env; shell variables win
WORKDIR = Path.cwd()  # s02: the file tools stay inside it
MODEL = os.getenv("MODEL_ID") or "claude-sonnet-5-5"
API_KEY = os.getenv("ANTHROPIC_API_KEY") or None
AUTH_TOKEN = os.getenv("ANTHROPIC_AUTH_TOKEN") or None
MAX_TOKENS = 8000  # s02: named, the notes quote it
BASH_TIMEOUT = 60  # seconds
OUTPUT_LIMIT = 50_000  # characters of tool output sent back to the model
# Passed explicitly, so an empty variable means none; the SDK reads ANTHROPIC_BASE_URL itself.
client = Anthropic(api_key=API_KEY, auth_token=AUTH_TOKEN) if API_KEY or AUTH_TOKEN else None
SYSTEM = (f"You are a coding agent working in {WORKDIR}. "  # s02: where the model works
          "Use the tools to inspect and change files; act, then report briefly.")
SYSTEM += (" For multi-step work keep the task board: task_create the steps, link them with blocked_by,"  # s07: plan
           " set each in_progress then completed. The board lives in .tasks/ and outlives this"  # s07: plan
           " conversation; use only task ids that a tool result gave you.")  # s07: plan on the board
SYSTEM += (" You lead a team: plan on the board, team_review the plan with a reviewer,"  # s09: lead
           " then team_spawn teammates and team_send each its task; team_wait for their answers.")


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages):
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
        deliver_team_news(messages)  # s09: teammates' answers join the next request
        calls = add_reply(messages, call_model(messages))
        if not calls:  # decided by what the stored reply holds, not by its stop_reason
            return
        run_calls(messages, calls)  # s02: one function, so Ctrl-C keeps the finished results

def run_calls(messages, calls):  # s02: all answers in one user turn, also on Ctrl-C
    """Answer every call in one user turn; on Ctrl-C the finished ones keep their results."""
    results = []
    try:
        for call, not_run in calls:
            results.append(run_tool(call, not_run))
            print(f"  {'ERROR ' if results[-1].get('is_error') else ''}"
                  f"{preview(results[-1]['content'])}")
    finally:  # only the calls that did not run are "interrupted"
        messages.append({"role": "user", "content": results + [
            run_tool(call, "interrupted by the user") for call, _ in calls[len(results):]]})

def call_model(messages, system=SYSTEM, tools=None, model=MODEL, echo=True):  # s02: streamed
    """One streamed call: text is shown as it arrives, each tool call once its block is complete.
    The request is cached up to its last block, so the next call reads this prefix cheaply."""
    try:
        with client.messages.stream(model=model, system=system, messages=messages,
                                    tools=TOOLS if tools is None else tools,
                                    max_tokens=MAX_TOKENS,
                                    cache_control={"type": "ephemeral"}) as stream:
            for event in stream if echo else ():
                show(event)
            return stream.get_final_message()
    except APIError:
        raise
    except Exception as error:  # a stream cut short, or a 200 that is no reply: one kind of error
        raise APIError(f"not a valid reply: {error!r}", None, body=None) from error

def show(event):
    """Print a streamed event: text as it comes, a tool call once its block is complete."""
    if event.type == "text":
        print(event.text, end="", flush=True)
    elif event.type == "content_block_stop" and event.content_block.type == "tool_use":
        block = event.content_block
        print(f"> {getattr(block, 'name', None)}: {preview(block.input, 120)}")
    elif event.type == "content_block_stop":
        print()  # a text block ends its line

def add_reply(messages, reply, say=print):
    """The one door into a history: store a repaired copy of the reply and return its tool
    calls as (call, why it must not run) pairs."""
    content, calls, repairs = repair_reply(reply.content, messages)
    if repairs:
        say(f"[repaired the reply: {'; '.join(repairs)}]")
    if reply.stop_reason == "refusal":  # s02: stored, a refusal would poison every request
        close_turn(messages, STOP_NOTES["refusal"])  # the refused request is marked, not redone
        say(f"[{STOP_NOTES['refusal']}]")
        return []
    if not content:  # stored, an empty message would make every later request invalid
        say("[the model sent an empty reply; tell it how to go on]")
        return []
    messages.append({"role": "assistant", "content": content})
    if note := STOP_NOTES.get(reply.stop_reason):  # s02: a turn that ended early says why
        say(f"[{note}]")
    if reply.stop_reason in CUT_OFF:
        close_turn(messages, note)  # a call cut off mid-input is answered, never run
        return []
    return calls

def repair_reply(blocks, messages):
    """What real endpoints send, made valid: the blocks to store, the calls, what was repaired."""
    taken = {block["id"] for message in messages for block in message["content"] if "id" in block}
    content = []
    calls = []
    repairs = []
    for block in blocks:
        if block.type == "tool_use":
            call, not_run = repair_call(dict(block), taken, repairs)
            content.append(call)
            calls.append((call, not_run))
        elif block.type == "text" and block.text.strip():
            content.append({"type": "text", "text": sendable(block.text)})  # s02: any string
        else:  # the API refuses whitespace-only text; a type we do not know may be refused
            repairs.append(f"left out an empty or unknown {block.type} block")
    return content, calls, repairs

def repair_call(block, taken, repairs):
    """A valid tool_use for the history, and why it must not run (None when it may)."""
    call_id = unique_id(block.get("id"), taken, repairs)
    name = block.get("name")
    args = parsed_input(block.get("input"), repairs)  # s02: some endpoints send JSON as text
    call = {"type": "tool_use", "id": call_id, "name": name, "input": args}
    if isinstance(name, str) and name and isinstance(args, dict):
        return sendable(call), None  # s02: any string, made sendable
    not_run = f"malformed call, not run: received name={name!r}, input={args!r}"
    repairs.append(not_run)
    return {**call, "name": "malformed", "input": {}}, not_run

def unique_id(raw, taken, repairs):
    """An id the API accepts (^[a-zA-Z0-9_-]+$), unique in the history: the first keeps its id."""
    call_id = re.sub(r"[^a-zA-Z0-9_-]", "_", f"{raw}")
    while call_id in taken:
        call_id += "_2"
    if call_id != raw:
        repairs.append(f"tool id {raw!r} -> {call_id}")
    taken.add(call_id)
    return call_id

def close_turn(messages, reason):
    """After anything: answer every tool_use left open, so the next request is valid."""
    if calls := [block for message in messages[-1:] for block in message["content"]
                 if "input" in block]:  # its tool_use blocks: only they have an input
        messages.append({"role": "user", "content": [run_tool(call, reason) for call in calls]})
    elif messages and messages[-1]["role"] == "user":  # s02: marked, so it is not redone
        add_user_text(messages, f"[not answered: {reason}]")

def add_user_text(messages, text):
    """Append the user's words; join them to a trailing user turn so roles keep alternating."""
    if not messages or messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": []})
    messages[-1]["content"].append({"type": "text", "text": text})


# -- The tool: bash in the workspace -------------------------------------------
def run_bash(command):  # s02: killed whole on timeout or Ctrl-C; a daemon cannot hang it
    output = bytearray()
    note = ""
    process = start_shell(command)
    try:  # from here on, no Ctrl-C may leave the command running
        reader = threading.Thread(target=drain, args=(process.stdout, output), daemon=True)
        reader.start()
        process.wait(timeout=BASH_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_group(process)
        note = f": killed after the {BASH_TIMEOUT}s timeout"
    except KeyboardInterrupt:
        kill_group(process)
        raise
    reader.join(timeout=1)  # a daemon the command started may hold the pipe open: stop waiting
    text = output[:OUTPUT_LIMIT].decode("utf-8", "replace").strip() or "(no output)"
    if len(output) > OUTPUT_LIMIT:
        text += f"\n... [output truncated at {OUTPUT_LIMIT:,} bytes]"
    if reader.is_alive():
        text += "\n[stopped reading: a background process still holds the output open]"
    code = process.wait()
    return text + (f"\n[exit code {code}{note}]" if code else "")  # after the cut: it survives


# -- s02: file tools that stay inside the workspace ---------------------------------
def safe_path(relative):
    """Resolve a path inside WORKDIR; refuse anything that leaves it."""
    path = (WORKDIR / relative).resolve()  # resolve() follows symlinks too
    if not path.is_relative_to(WORKDIR.resolve()):
        raise ValueError(f"Path {relative!r} is outside the workspace {WORKDIR}")
    return path

def write_atomic(path, text):
    """Write a temp file, then rename it over the target: a failure leaves the old file."""
    if path.is_dir():  # the workspace itself, or a folder: refused before anything is written
        raise IsADirectoryError(f"{path.name or path} is a folder, not a file")
    mode = path.stat().st_mode if path.exists() else None  # a rewritten file keeps its mode
    if mode is not None and not mode & 0o222:  # read-only on purpose: leave it so
        raise PermissionError(f"{path.name} is read-only; it was left unchanged")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        with open(tmp, "xb") as file:  # a fresh file of our own; the umask sets its mode
            file.write(text.encode("utf-8"))  # a string that cannot be stored fails here
            file.flush()  # every byte is written or this raises (a full disk, a size limit)
            os.fsync(file.fileno())  # on disk before the rename: a crash leaves no empty file
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)  # atomic: readers see the old file or the new one, never half
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

def run_read(path, limit=None):
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of lines, got {limit}")
    target = safe_path(path)
    if not target.is_file():  # a FIFO or a device would block or never end
        raise ValueError(f"{path} is not a regular file")
    with open(target, encoding="utf-8", newline="") as file:  # newline="": \r\n shown as it is
        text = file.read(OUTPUT_LIMIT)  # never read more than can be returned
        cut = file.read(1) != ""
    lines = text.splitlines(keepends=True)
    if limit is not None and limit < len(lines):
        more = f"{len(lines) - limit}{'+' if cut else ''}"
        return "".join(lines[:limit]) + f"... [{more} more lines]"
    if cut:
        text += f"\n... [output truncated at {OUTPUT_LIMIT:,} characters; use bash for the rest]"
    return text

def run_write(path, content):
    write_atomic(safe_path(path), content)
    return f"Wrote {len(content)} characters to {path}"

def run_edit(path, old_text, new_text):
    target = safe_path(path)
    text = target.read_bytes().decode("utf-8")  # bytes: a \r\n stays \r\n, as old_text must match
    count = text.count(old_text) if old_text else 0
    if count == 0:
        raise ValueError(f"old_text not found in {path}; read the file and copy the text exactly")
    if count > 1:
        raise ValueError(f"old_text appears {count} times in {path}; include more context")
    write_atomic(target, text.replace(old_text, new_text, 1))
    return f"Edited {path}"

JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list, "object": dict}

def check_args(name, args):
    """Check a call's arguments against its tool's schema; say what is wrong and what is allowed."""
    schema = next(tool["input_schema"] for tool in TOOLS if tool["name"] == name)
    allowed = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in args]
    if missing:
        raise ValueError(f"missing required argument(s) {missing}; {name} takes {sorted(allowed)}")
    for key, value in args.items():
        if key not in allowed:
            raise ValueError(f"unknown argument {key!r}; {name} takes {sorted(allowed)}")
        expected = JSON_TYPES.get(allowed[key].get("type"))
        if expected and type(value) is not expected:  # exact: True is not an integer here
            raise ValueError(f"argument {key!r} must be of type {allowed[key]['type']}, "
                             f"got {type(value).__name__}")


# -- s02: replies as real endpoints send them ---------------------------------------
STOP_NOTES = {  # the documented stop reasons that end a turn early, as the REPL says them
    "max_tokens": f"cut off at max_tokens ({MAX_TOKENS}); an unfinished tool call was not run",
    "model_context_window_exceeded": "cut off: the context window is full",
    "refusal": "the model declined this request (refusal); rephrase it rather than repeat it",
    "pause_turn": "the API paused this turn (pause_turn); send a message to let it go on",
}

CUT_OFF = ("max_tokens", "model_context_window_exceeded")  # a call may be unfinished: not run

def parsed_input(args, repairs):
    """A tool input that some endpoints send as text holding a JSON object, parsed."""
    if isinstance(args, str) and args.strip().startswith("{"):
        try:
            args = json.loads(args)
            repairs.append("parsed a tool input sent as text")
        except ValueError:
            pass  # not JSON after all: answered as a malformed call
    return args

def sendable(value):
    """The value with lone surrogates replaced by "?": JSON can hold them, UTF-8 cannot."""
    return json.loads(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))

def preview(value, width=200):
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width] + "..."

def run_slash_command(line, history):
    name, _, arg = line.partition(" ")
    if name in SLASH_COMMANDS:
        return SLASH_COMMANDS[name](arg.strip(), history)
    helps = ["  " + fn.__doc__.splitlines()[0] for fn in dict.fromkeys(SLASH_COMMANDS.values())]
    unknown = "" if name == "/help" else f"Unknown command {name}. "
    print(unknown + "Commands: /help, q or exit (quit)", *helps, sep="\n")


# .. plumbing: starting and stopping bash ...........................................
def start_shell(command):
    """Popen with Ctrl-C held until it returns: an interrupt inside Popen would leave the
    command running with no handle to kill it by. Only the main thread receives Ctrl-C."""
    def popen():
        return subprocess.Popen(command, shell=True, cwd=WORKDIR, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)  # a group of its own: killable whole
    if threading.current_thread() is not threading.main_thread():
        return popen()
    held = []
    previous = signal.signal(signal.SIGINT, lambda *_: held.append(True))
    try:
        process = popen()
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:  # the Ctrl-C came while it started: it is ours now, so it can be stopped
        kill_group(process)
        raise KeyboardInterrupt
    return process

def kill_group(process):
    """Kill the shell and everything it started."""
    if os.name == "posix":
        os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()

def drain(pipe, output):
    """Read the command's output to its end; keep what can be returned, so memory stays bounded."""
    with pipe:
        while chunk := pipe.read1(65536):
            output.extend(chunk[:OUTPUT_LIMIT + 1 - len(output)])


# -- s07: the task board - a dependency graph on disk that outlives the chat -----
# One JSON file per task in .tasks/, plus .highwatermark (the last id handed out) and .lock. Only
# `blockedBy` is stored; `blocks` is derived. Readers never lock: each file is replaced whole. A change
# holds the lock only for what it needs: a status change reads the task and its blockers; only new
# edges and deletions read the whole board (for the cycle check, and for who names the task).
import contextlib
import re
from datetime import datetime, timezone

if os.name == "nt":
    import msvcrt
else:
    import fcntl

TASK_STATUSES = ("pending", "in_progress", "completed", "failed", "deleted")
MARKERS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "failed": "[!]", "deleted": "[-]"}

class TaskError(ValueError):
    """A request the board refuses. `.code` is for programs, the message tells the model what to do."""
    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code

class CorruptFile(Exception):
    """A state file that cannot be trusted: named, and left alone, rather than guessed at or overwritten."""
    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}. It is left as it is: fix it by hand or move it away, then retry.")

@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive lock on `path`; it excludes other threads and other processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:  # a handle of its own per holder, so threads exclude each other too
        if os.name == "nt":
            windows_lock(handle, msvcrt.LK_LOCK)
        else:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:  # POSIX unlocks when the handle closes; Windows wants it said
            if os.name == "nt":
                windows_lock(handle, msvcrt.LK_UNLCK)

def windows_lock(handle, mode: int) -> None:
    while True:  # byte 0 of the file; LK_LOCK gives up after ~10 s, and a busy board is a reason to wait
        with contextlib.suppress(OSError):
            handle.seek(0)
            return msvcrt.locking(handle.fileno(), mode, 1)

def write_json(path: Path, data) -> None:
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")  # the spine's temp file + rename

def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

def parse_id(value) -> int:
    """Ids are positive integers; models sometimes send them as strings ("3"), which is fine."""
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit() and len(text) < 19 and int(text) > 0):
        raise TaskError("INVALID_ARGS", f"a task id must be a positive integer such as 3, got {value!r}; "
                                        "use only ids that task_create or task_list returned")
    return int(text)

def parse_ids(values, field: str) -> list[int]:
    if values is not None and not isinstance(values, list):
        raise TaskError("INVALID_ARGS", f"{field} must be a list of task ids such as [1, 2], got {values!r}")
    return list(dict.fromkeys(parse_id(v) for v in values or []))  # dedupe, keep order

def check_fields(fields: dict) -> dict:
    """The fields a caller set (None: not set), checked before any file is touched."""
    fields = {name: value for name, value in fields.items() if value is not None}
    for name, value in fields.items():
        if not isinstance(value, str) or name == "subject" and not value.strip():
            raise TaskError("INVALID_ARGS", f"{name} must {'not be empty' if isinstance(value, str) else 'be text'}")
    if fields.get("status", "pending") not in TASK_STATUSES:
        raise TaskError("INVALID_STATUS", f"unknown status {fields['status']!r}; use one of: {TASK_STATUSES}")
    return {name: value.strip() if name in ("subject", "owner") else value for name, value in fields.items()}

def record_problem(task, task_id: int) -> str | None:
    """Why a task record read from disk cannot be trusted, or None if it looks sound."""
    if not isinstance(task, dict) or task.get("id") != task_id or type(task["id"]) is not int:
        return f"not a task record with id {task_id} (the file name's number)"
    if task.get("status") not in TASK_STATUSES:
        return f"unknown status {task.get('status')!r} (allowed: {', '.join(TASK_STATUSES)})"
    blocked_by = task.get("blockedBy")
    if not isinstance(blocked_by, list) or any(type(b) is not int for b in blocked_by) or task_id in blocked_by:
        return "blockedBy must be a list of other tasks' integer ids"
    bad = [f for f in ("subject", "description", "owner", "created_at", "updated_at") if type(task.get(f)) is not str]
    return f"{bad[0]} must be a string" if bad else None

def find_cycle(blocked_by: dict[int, list[int]]) -> list[int] | None:
    """One dependency cycle in blocker-first order ([3, 5, 3]: 3 must finish before 5, 5 before 3)."""
    state = {}  # task id -> "open" while on the current path, "done" once fully explored
    for start in sorted(set(blocked_by) - set(state)):
        path, stack, state[start] = [start], [iter(blocked_by[start])], "open"
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state.get(nxt) == "open":
                return (path[path.index(nxt):] + [nxt])[::-1]  # each waits for the next: reversed, blockers first
            elif nxt in blocked_by and nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                stack.append(iter(blocked_by[nxt]))
    return None

def format_cycle(cycle: list[int], start: int | None = None) -> str:
    """'3 -> 5 -> 3', rotated to begin at `start` when it is on the cycle."""
    if start in cycle:
        cycle = cycle[cycle.index(start):-1] + cycle[:cycle.index(start)] + [start]
    return " -> ".join(str(task_id) for task_id in cycle)

def unblocked(task: dict, tasks: dict[int, dict]) -> bool:
    """Pending, and every blocker completed (a failed blocker still blocks)."""
    return task["status"] == "pending" and all(tasks[b]["status"] == "completed" for b in task["blockedBy"])

class TaskBoard:
    """A task graph, one JSON file per task, shared by threads and processes; a refused change writes nothing."""

    def __init__(self, folder: Path):
        self.dir, self.seen = Path(folder), {}  # task id -> (the file's identity, the task): each file parsed once

    # -- reading: no lock ---------------------------------------------------------
    def path(self, task_id: int) -> Path:
        return self.dir / f"task_{task_id}.json"

    def read(self, task_id: int) -> dict:
        path = self.path(task_id)
        try:
            stat = path.stat()
            identity = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # a change is a new file (os.replace)
            if self.seen.get(task_id, (None,))[0] == identity:
                return self.seen[task_id][1]
            task = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TaskError("NOT_FOUND", f"there is no task {task_id}; call task_list to see the ids") from None
        except (OSError, ValueError) as error:  # ValueError: bad UTF-8 or bad JSON
            raise CorruptFile(path, f"cannot be read as JSON ({error})") from None
        if problem := record_problem(task, task_id):
            raise CorruptFile(path, problem)
        self.seen[task_id] = (identity, task)
        return task

    def read_all(self) -> dict[int, dict]:
        """Every task, checked as a whole: an edge to nothing, or a cycle, is corruption too."""
        ids = sorted(int(p.stem[5:]) for p in self.dir.glob("task_*.json") if re.fullmatch(r"task_[1-9]\d*", p.stem))
        board = {task_id: self.read(task_id) for task_id in ids}
        for task in board.values():
            for blocker in task["blockedBy"]:
                if board.get(blocker, {"status": "deleted"})["status"] == "deleted":
                    raise CorruptFile(self.path(task["id"]), f"blocked by task {blocker}, deleted or gone")
        if cycle := find_cycle({i: t["blockedBy"] for i, t in board.items() if t["status"] != "deleted"}):
            raise CorruptFile(self.path(cycle[0]), f"dependency cycle {format_cycle(cycle)}")
        return board

    def tasks(self) -> list[dict]:
        """Every task, deleted ones included, with `blocks` derived from everyone's blockedBy."""
        try:
            board = self.read_all()
        except CorruptFile:  # or a change made while we read, file by file, half seen: look again, alone
            with self.locked():
                board = self.read_all()
        blocks = {task_id: [] for task_id in board}
        for task in (t for t in board.values() if t["status"] != "deleted"):  # a deleted task waits for nothing
            for blocker in task["blockedBy"]:
                blocks[blocker].append(task["id"])
        return [{**task, "blocks": blocks[task["id"]]} for task in board.values()]

    def get(self, task_id) -> dict:
        task = self.read(parse_id(task_id))  # NOT_FOUND for an id the board never handed out
        return next(t for t in self.tasks() if t["id"] == task["id"])  # with its derived `blocks`

    def ready(self) -> list[dict]:
        """Tasks someone can start now: pending, unowned, every blocker completed."""
        tasks = {t["id"]: t for t in self.tasks()}
        return [t for t in tasks.values() if not t["owner"] and unblocked(t, tasks)]

    # -- changing: under the lock ----------------------------------------------------
    def locked(self):
        return file_lock(self.dir / ".lock")

    def create(self, subject: str, description: str = "", blocked_by: list | None = None) -> dict:
        fields = check_fields({"subject": subject, "description": description})
        blockers = parse_ids(blocked_by, "blocked_by")
        with self.locked():
            for stale in self.dir.glob(".*.tmp"):  # a writer killed mid-write left it: under the lock none is live
                stale.unlink(missing_ok=True)
            for blocker in blockers:
                self.check_blocker(None, blocker)  # a new task has no id yet and nothing waits for it: no cycle
            last = self.dir / ".highwatermark"
            text = last.read_text(encoding="utf-8").strip() if last.exists() else "0"
            if not (text.isascii() and text.isdigit() and len(text) < 19):
                raise CorruptFile(last, f"expected the last id handed out, found {text[:40]!r}")
            task_id = int(text) + 1
            while self.path(task_id).exists():  # a lost .highwatermark must never cost a task
                task_id += 1
            now = utc_now()
            task = {"id": task_id, **fields, "status": "pending", "blockedBy": blockers, "owner": "",
                    "created_at": now, "updated_at": now}
            write_json(last, task_id)  # first: a crash here only skips an id
            write_json(self.path(task_id), task)
        return {**task, "blocks": []}

    def update(self, task_id, status=None, subject=None, description=None, owner=None,
               add_blocked_by=None, remove_blocked_by=None) -> dict:
        """Change one task. Completing or deleting it also returns `unblocked`: what just became ready."""
        task_id = parse_id(task_id)
        fields = check_fields({"status": status, "subject": subject, "description": description, "owner": owner})
        add, remove = parse_ids(add_blocked_by, "add_blocked_by"), parse_ids(remove_blocked_by, "remove_blocked_by")
        if not (fields or add or remove) or set(add) & set(remove):
            raise TaskError("INVALID_ARGS", "pass at least one change (status, subject, description, owner, "
                                            "add_blocked_by, remove_blocked_by), and never add and remove one id")
        with self.locked():
            task = self.read(task_id)  # re-read inside the lock: someone may have changed it a moment ago
            edges = list(dict.fromkeys(b for b in task["blockedBy"] + add if b not in remove))
            after = {**task, **fields, "blockedBy": edges}
            board = self.read_all() if add or after["status"] == "deleted" else {}  # only these need it all
            self.check_rules(task, after, add, board)
            dependents = [t for t in board.values() if task_id in t["blockedBy"]]
            for other in dependents if after["status"] == "deleted" else []:  # first: no reader may see an
                edges = [b for b in other["blockedBy"] if b != task_id]  # edge to a deleted task
                write_json(self.path(other["id"]), {**other, "blockedBy": edges, "updated_at": utc_now()})
            if after != task:  # a change that changes nothing writes nothing
                write_json(self.path(task_id), {**after, "updated_at": utc_now()})
        tasks = {t["id"]: t for t in self.tasks()}  # read again, without the lock, for the derived `blocks`
        if after["status"] not in ("completed", "deleted") or after == task:
            return tasks[task_id]
        waited = set(tasks[task_id]["blocks"]) | {d["id"] for d in dependents}
        return {"unblocked": sorted(i for i in waited if unblocked(tasks[i], tasks)), **tasks[task_id]}

    def check_rules(self, task: dict, after: dict, add: list[int], board: dict[int, dict]) -> None:
        """Every rule a change must pass; nothing is written until all of them do."""
        if task["status"] == "deleted":
            raise TaskError("INVALID_STATUS", f"task {task['id']} is deleted and cannot change; create a new task")
        if after["status"] == "deleted" and after["blockedBy"] != task["blockedBy"]:
            raise TaskError("INVALID_ARGS", "deleting a task takes no edge changes; delete it on its own")
        for blocker in add:
            self.check_blocker(task["id"], blocker)
        live = {i: t["blockedBy"] for i, t in board.items() if t["status"] != "deleted"}
        cycle = find_cycle({**live, task["id"]: after["blockedBy"]}) if add else None
        if cycle:
            raise TaskError("INVALID_DEPENDENCY", f"that would close a dependency cycle "
                                                  f"{format_cycle(cycle, task['id'])}; drop one of those edges")
        if after["status"] in ("in_progress", "completed") and after["status"] != task["status"]:  # on the move only
            waiting = [f"{b['id']} ({b['status']})" for b in map(self.read, after["blockedBy"])
                       if b["status"] != "completed"]  # a failed blocker blocks too
            if waiting:
                raise TaskError("INVALID_STATUS", f"task {task['id']} cannot be {after['status']} while blocked by "
                                                  f"{', '.join(waiting)}; finish those first or remove the edge")

    def check_blocker(self, task_id: int | None, blocker: int) -> None:
        if blocker == task_id:
            raise TaskError("INVALID_DEPENDENCY", f"task {task_id} cannot depend on itself")
        if not self.path(blocker).exists() or self.read(blocker)["status"] == "deleted":
            raise TaskError("INVALID_DEPENDENCY", f"there is no task {blocker}, or it is deleted; {ID_NOTE}")


# Views: a compact board for the model, Mermaid text for humans.
def render_board(tasks: list[dict], status: str | None = None, include_deleted: bool = False) -> str:
    """One line per task (no descriptions: task_get has them), then counts per status."""
    by_id = {t["id"]: t for t in tasks}
    shown = [t for t in tasks if t["status"] == status] if status else \
        [t for t in tasks if include_deleted or t["status"] != "deleted"]
    if not shown:
        return "No tasks" + (f" with status {status}" if status else "") + ". Create one with task_create."
    lines = []
    for t in shown:
        waiting = [f"#{b}" for b in t["blockedBy"] if by_id[b]["status"] != "completed"]
        lines.append(f"{MARKERS[t['status']]} #{t['id']} {t['subject']}" + (f"  @{t['owner']}" if t["owner"] else "")
                     + (f"  (blocked by {', '.join(waiting)})" if waiting and t["status"] != "deleted" else ""))
    counts = ", ".join(f"{sum(t['status'] == s for t in shown)} {s}" for s in TASK_STATUSES
                       if s != "deleted" or any(t["status"] == s for t in shown))
    ready = [f"#{t['id']}" for t in shown if not t["owner"] and unblocked(t, by_id)]
    return "\n".join(lines) + f"\n{len(shown)} tasks: {counts}; ready now: {', '.join(ready) or 'none'}"

def render_mermaid(tasks: list[dict]) -> str:
    """The graph as Mermaid text: paste it into any Mermaid viewer. Arrows point from blocker to blocked."""
    live = [t for t in tasks if t["status"] != "deleted"]
    label = {t["id"]: f'{t["id"]}: {t["subject"]}'.replace('"', "'").replace("\n", " ") for t in live}
    lines = ["flowchart TD"] + [f'    t{t["id"]}["{label[t["id"]]}<br/>{t["status"]}"]:::{t["status"]}' for t in live]
    lines += [f"    t{b} --> t{t['id']}" for t in live for b in t["blockedBy"]]
    colors = {"pending": "#eeeeee,stroke:#888888", "in_progress": "#fff3cd,stroke:#d39e00",
              "completed": "#d4edda,stroke:#28a745", "failed": "#f8d7da,stroke:#dc3545"}
    return "\n".join(lines + [f"    classDef {status} fill:{color}" for status, color in colors.items()])


# The board as tools (for the model) and as slash commands (for you).
BOARD = TaskBoard(WORKDIR / ".tasks")  # nothing on disk until the first task is created
ID_NOTE = "Use only ids that an earlier tool result returned; never guess one."
TASK_ID = {"anyOf": [{"type": "integer"}, {"type": "string"}], "description": "A task id, e.g. 3. " + ID_NOTE}
TASK_IDS = {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}

TASK_TOOLS = [
    {"name": "task_create",
     "description": "Add a task to the persistent task board (.tasks/; it survives restarts); returns it with "
                    "the id the board gave it. blocked_by: ids of tasks that must be completed first - so create "
                    "blockers first and take their ids from the results. " + ID_NOTE,
     "input_schema": {"type": "object", "properties": {
         "subject": {"type": "string", "description": "Short imperative title."},
         "description": {"type": "string"}, "blocked_by": TASK_IDS}, "required": ["subject"]}},
    {"name": "task_update",
     "description": "Change one task: status, subject, description, owner, or what it waits for (add_blocked_by, "
                    "remove_blocked_by). It can start or complete only once all its blockers are completed; "
                    "completing returns `unblocked`, the tasks that just became ready. " + ID_NOTE,
     "input_schema": {"type": "object", "properties": {
         "task_id": TASK_ID, "status": {"type": "string", "enum": list(TASK_STATUSES)},
         "subject": {"type": "string"}, "description": {"type": "string"}, "owner": {"type": "string"},
         "add_blocked_by": TASK_IDS, "remove_blocked_by": TASK_IDS}, "required": ["task_id"]}},
    {"name": "task_get",
     "description": "One task in full, with its description and `blocks` (the tasks waiting for it).",
     "input_schema": {"type": "object", "properties": {"task_id": TASK_ID}, "required": ["task_id"]}},
    {"name": "task_list",
     "description": "The board in brief: one line per task (status, id, subject, owner, open blockers), then "
                    "counts and the tasks ready now. No descriptions: use task_get for those.",
     "input_schema": {"type": "object", "properties": {
         "status": {"type": "string", "enum": list(TASK_STATUSES)}, "include_deleted": {"type": "boolean"}}}},
]

def run_task_list(status: str | None = None, include_deleted: bool = False) -> str:
    check_fields({"status": status})
    return render_board(BOARD.tasks(), status, include_deleted)

TASK_TOOL_HANDLERS = {
    "task_create": lambda **args: json.dumps(BOARD.create(**args), ensure_ascii=False),
    "task_update": lambda **args: json.dumps(BOARD.update(**args), ensure_ascii=False),
    "task_get": lambda task_id: json.dumps(BOARD.get(task_id), ensure_ascii=False),
    "task_list": run_task_list,
}

def show_tasks(arg: str, history: list) -> None:
    """/tasks [all | graph]: the board as the model sees it (all: with deleted tasks; graph: as Mermaid)"""
    try:
        tasks = BOARD.tasks()
        print(render_mermaid(tasks) if arg == "graph" else render_board(tasks, include_deleted=arg == "all"))
    except (TaskError, CorruptFile, OSError) as error:  # a broken board must not end the session
        print(f"[task board] {error}")


# -- s09: a team that works from the board: mailboxes, protocols, teammates -------
# Four plain parts: who the teammates are (.team.json), how a message reaches one (an
# append-only JSONL mailbox per agent), how a request finds its answer (an id and a
# reply_to), and one loop per teammate that reads its mailbox. The board is s07's.
import secrets
import time

LEAD = "lead"  # the REPL's own mailbox
TEAM_TIMEOUT = 120  # seconds team_review and team_shutdown wait for an answer
KINDS = ("request", "response", "message")
PROTOCOLS = (None, "plan_approval", "shutdown")  # what a request asks for, besides its text
REVIEW = "Review the plan below. Start your answer with APPROVE or REJECT, then one short reason."

def check_name(name, what="agent name"):
    """Names become file names, so only a safe alphabet gets through."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise ValueError(f"invalid {what} {name!r}: use 1-64 letters, digits, '_' or '-'")
    return name

class Roster:
    """Who the teammates are: .team.json, {"teammates": {name: {name, role, prompt}}}.
    Shared by every session in the folder."""

    def __init__(self, path):
        self.path = path

    def load(self):
        """The teammates by name; a file of the wrong shape is named, and left alone."""
        if not self.path.exists():
            return {}
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))["teammates"]
            bad = [name for name, entry in entries.items() if entry.get("name") != name
                   or not all(isinstance(entry.get(key), str) for key in ("role", "prompt"))]
            if bad:
                raise ValueError(f"entries {bad} are not {{name, role, prompt}} of text")
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # any wrong shape
            expected = "{'teammates': {name: {name, role, prompt}}}"
            raise CorruptFile(self.path, f"expected {expected}: {error}") from None
        return entries

    def add(self, name, role, prompt):
        if check_name(name) == LEAD:
            raise ValueError(f"{LEAD!r} is the lead's own mailbox; pick another name")
        if not all(isinstance(text, str) and text.strip() for text in (role, prompt)):
            raise ValueError("a teammate needs a non-empty role and prompt")
        entry = {"name": name, "role": role.strip(), "prompt": prompt.strip()}
        with file_lock(self.path.with_name(".team.lock")):  # re-read inside: others may write
            write_json(self.path, {"teammates": {**self.load(), name: entry}})
        return entry

class Mailbox:
    """One append-only JSONL file per agent in a session folder: <root>/<agent>.jsonl.

    A writer appends one whole line under a cross-process lock. A reader keeps a byte offset,
    never locks, and leaves a last line without its newline for later: its writer is at work.
    """

    def __init__(self, root):
        self.root = root
        self.arrived = threading.Condition()  # a send wakes this process's waiters at once

    def path(self, agent):
        return self.root / f"{check_name(agent)}.jsonl"

    def send(self, to, sender, content, kind="message", protocol=None, reply_to=None):
        """Append one message to `to`'s mailbox, whole or not at all; return its id."""
        path = self.path(to)
        if not (kind in KINDS and protocol in PROTOCOLS
                and isinstance(content, str) and content.strip()):
            raise ValueError(f"a message needs text, a kind in {KINDS}, a protocol in {PROTOCOLS}")
        message = {"id": secrets.token_hex(8), "from": sender, "to": to, "kind": kind,
                   "protocol": protocol, "reply_to": reply_to, "content": content, "at": utc_now()}
        line = (json.dumps(message) + "\n").encode()  # ASCII JSON: lone surrogates are fine too
        with file_lock(path.with_suffix(".lock")), open(path, "a+b", buffering=0) as handle:
            size = handle.seek(0, os.SEEK_END)  # append mode: every write lands at the end
            handle.seek(max(size - 1, 0))
            if size and handle.read(1) != b"\n":
                line = b"\n" + line  # a writer killed mid-line left a fragment: end it
            try:
                while line:  # unbuffered: a short write (a full disk, a size limit) is seen
                    line = line[handle.write(line):]
            except BaseException:  # a line goes in whole or not at all: cut back what went out
                handle.truncate(size)
                raise
        with self.arrived:
            self.arrived.notify_all()
        return message["id"]

    def size(self, agent):
        try:
            return self.path(agent).stat().st_size
        except FileNotFoundError:  # nobody has written to it yet (or the session folder is gone)
            return 0

    def read(self, agent, offset=0):
        """The complete messages after byte `offset`, and the offset to read from next time."""
        path = self.path(agent)
        if offset > self.size(agent):  # replaced or cut: what the offset counted is gone
            notify(f"[mailbox] {path} is shorter than the {offset} bytes read: read from the start")
            offset = 0
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            return [], offset
        data = data[:data.rfind(b"\n") + 1]  # a line without its newline is still being written
        messages = []
        for line in data.splitlines():
            try:
                message = json.loads(line)
                if not all(isinstance(message.get(key), str)
                           for key in ("id", "from", "kind", "content")):
                    raise ValueError("id, from, kind and content must be text")
                messages.append(message)
            except (ValueError, AttributeError) as error:  # torn by a killed writer, or hand-made
                notify(f"[mailbox] skipped a malformed line in {path}: {str(error)[:80]}")
        return messages, offset + len(data)

    def wait(self, agent, offset, timeout):
        """Until its size is not `offset` (a send by any process, or a cut); False on timeout."""
        deadline = time.monotonic() + timeout
        while self.size(agent) == offset:
            if time.monotonic() >= deadline:
                return False
            with self.arrived:  # woken by a send in this process; other processes: seen in 50 ms
                self.arrived.wait(0.05)
        return True

    def await_reply(self, agent, request_id, offset, timeout):
        """Wait for the response to `request_id` after `offset`: (it or None, the next offset)."""
        deadline = time.monotonic() + timeout
        while True:
            messages, offset = self.read(agent, offset)
            for message in messages:
                if message["kind"] == "response" and message.get("reply_to") == request_id:
                    return message, offset
            if not self.wait(agent, offset, deadline - time.monotonic()):
                return None, offset

TEAMMATE_TOOLS = ("bash", "read_file", "write_file", "edit_file",  # leading stays with the lead
                  "task_create", "task_update", "task_get", "task_list")

def teammate_turn(history, system):
    """agent_loop for a teammate: its own prompt, history and tools, nothing printed but notes.
    A turn that ends without an answer (refused, empty, cut off) raises: nobody takes it for one."""
    tools = [tool for tool in TOOLS if tool["name"] in TEAMMATE_TOOLS]
    while True:
        reply = call_model(history, system=system, tools=tools, echo=False)
        calls = add_reply(history, reply, say=notify)
        if not calls:
            break
        history.append({"role": "user", "content": [
            run_tool(call, not_run or not_for_teammates(call)) for call, not_run in calls]})
    if history[-1]["role"] != "assistant" or reply.stop_reason in STOP_NOTES:
        raise RuntimeError(f"no answer: {STOP_NOTES.get(reply.stop_reason, 'an empty reply')}")
    return "\n".join(block["text"] for block in history[-1]["content"])  # no calls: all text

def not_for_teammates(call):
    """Why a teammate's call must not run (None if it may): its own tools only, whatever it asks."""
    if call["name"] not in TEAMMATE_TOOLS:
        return f"Unknown tool {call['name']!r} for a teammate"

class Teammate:
    """A spawned teammate: a thread that answers the requests in its mailbox, one at a time."""

    def __init__(self, entry, mailbox, offset=0):
        self.name = entry["name"]
        self.mailbox = mailbox
        self.offset = offset  # how far it has read: a respawn goes on from there
        self.system = (f"{entry['prompt']}\n\nYou are the teammate {self.name!r} ({entry['role']}) "
                       f"in {WORKDIR}. Keep the tasks you are given up to date on the board. "
                       "Your final answer goes back to whoever asked.")
        self.history = []
        self.stopping = False
        self.thread = threading.Thread(target=self.run, name=f"teammate-{self.name}", daemon=True)

    def run(self):
        while not self.stopping:
            messages, self.offset = self.mailbox.read(self.name, self.offset)
            for message in messages:
                self.handle(message)
            if not messages:
                self.mailbox.wait(self.name, self.offset, timeout=1.0)

    def handle(self, message):
        """Answer a request; responses and notes need no answer."""
        if message["kind"] != "request":
            return
        if message.get("protocol") == "shutdown":
            self.stopping = True
            reply = f"{self.name} is shutting down"
        elif self.stopping:  # a shutdown came earlier in this batch: a polite no
            reply = "shutting down"
        else:
            reply = self.answer(message)
        try:
            self.mailbox.send(message["from"], self.name, reply, "response",
                              protocol=message.get("protocol"), reply_to=message["id"])
        except (OSError, ValueError) as error:  # e.g. the asker's mailbox is broken
            notify(f"[{self.name}] could not answer {message['id']}: {error}")

    def answer(self, message):
        """My own agent loop on the request; its final text is the answer."""
        notify(f"[{self.name}] working on {preview(message['content'], 60)}")
        if message.get("protocol") == "plan_approval":  # this protocol's answer is a verdict
            request = f"{REVIEW}\n\n{message['content']}"
        else:
            request = f"From {message['from']}:\n{message['content']}"
        add_user_text(self.history, request)
        try:
            return teammate_turn(self.history, self.system)
        except Exception as error:  # one failed request must not kill the teammate, nor be redone
            failure = f"{type(error).__name__}: {error}"
            close_turn(self.history, f"the request failed ({failure}); it is not retried")
            return f"error: {self.name} could not answer ({failure})"


# The lead's side: its mailbox, the team tools, REPL commands.
SESSION = f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
ROSTER = Roster(WORKDIR / ".team.json")
MAILBOX = Mailbox(WORKDIR / ".mailbox" / SESSION)  # nothing is created until the first message
RUNNING = {}  # name -> the Teammate this process started
INBOX = {"offset": 0, "delivered": set()}  # how far the lead has read; ids a tool already returned

def unread_mail():
    """The lead's mail after its offset, less what a tool already returned; and the next offset."""
    messages, offset = MAILBOX.read(LEAD, INBOX["offset"])
    return [m for m in messages if m["id"] not in INBOX["delivered"]], offset

def take_news():
    """The lead's unread mail as one text, read once ("" when there is none)."""
    news, INBOX["offset"] = unread_mail()
    if not news:
        return ""
    return "New messages in your team mailbox:\n" + "\n".join(
        f"- {m['kind']} {m['id']} from {m['from']}"
        + (f", answering {m['reply_to']}" if m.get("reply_to") else "") + f":\n{m['content']}"
        for m in news)

def deliver_team_news(messages):
    """The lead's new mail joins the next request, where Anthropic's docs want extra text: inside
    the last tool_result when there are results (a text block after them teaches the model to end
    its turn empty), else with the user's words. Unlike s03's reminder it stays: it is news."""
    news = take_news()
    if not news:
        return
    notify(f"[team] the lead's next request carries its new mail: {preview(news, 150)}")
    last = messages[-1]["content"][-1]
    if last["type"] == "tool_result":
        last["content"] = [{"type": "text", "text": last["content"] or "(no output)"},  # a string
                           {"type": "text", "text": news}]
    else:
        add_user_text(messages, news)

def run_team_wait(seconds=60):
    """The lead's new mail once it arrives, waiting at most `seconds` (and TEAM_TIMEOUT)."""
    seconds = min(seconds, TEAM_TIMEOUT)
    deadline = time.monotonic() + seconds
    while not (news := take_news()):
        if not MAILBOX.wait(LEAD, INBOX["offset"], deadline - time.monotonic()):
            return f"No new mail within {seconds}s."
    return news

def is_running(name):
    return name in RUNNING and RUNNING[name].thread.is_alive()

def check_running(name):
    """Mail reaches a teammate only while it runs in this session."""
    if not is_running(name):
        raise ValueError(f"{name} is not running in this session; team_spawn it first")

def ask(name, content, protocol):
    """Send a request and wait for its answer (the protocols: plan_approval, shutdown)."""
    check_running(name)
    request_id = MAILBOX.send(name, LEAD, content, "request", protocol)
    reply, _ = MAILBOX.await_reply(LEAD, request_id, INBOX["offset"], TEAM_TIMEOUT)
    if reply is None:
        raise TimeoutError(f"{name} did not answer request {request_id} within {TEAM_TIMEOUT}s")
    INBOX["delivered"].add(reply["id"])  # this tool result carries it; do not repeat it as news
    return reply["content"]

def run_team_spawn(name, role, prompt):
    if is_running(name):  # before the roster changes: a running teammate keeps the prompt it has
        raise ValueError(f"{name} is already running")
    entry = ROSTER.add(name, role, prompt)
    RUNNING[name] = Teammate(entry, MAILBOX, RUNNING[name].offset if name in RUNNING else 0)
    RUNNING[name].thread.start()
    return f"Spawned {name} ({entry['role']}); it reads {MAILBOX.path(name).relative_to(WORKDIR)}"

def run_team_send(name, message, task_id=None):
    check_running(name)  # first: a refused send must not leave a task owned by nobody at work
    if task_id is not None:  # an assignment: the board says whose it is, the message what to do
        task = BOARD.update(task_id, owner=name)
        message = (f"Task #{task['id']} is yours: {task['subject']}\n"
                   f"{task['description']}\n{message}")
    request_id = MAILBOX.send(name, LEAD, message, "request")
    return f"Sent request {request_id} to {name}. Its answer comes with a later request of yours."

def run_team_review(name, plan):
    verdict = ask(name, plan, "plan_approval")
    return f"{name}'s verdict: {verdict}"

def run_team_shutdown(name):
    answer = ask(name, "please stop", "shutdown")
    if name in RUNNING:
        RUNNING[name].thread.join(timeout=TEAM_TIMEOUT)  # it ends right after its current batch
    return f"{name} acknowledged: {answer}"

def team_command(arg, history):
    """/team: who is on the team, and who is running in this session"""
    try:
        entries = ROSTER.load()
    except CorruptFile as error:
        print(f"[team] {error}")
        return
    for name, entry in sorted(entries.items()):
        print(f"  {name} - {entry['role']} [{'running' if is_running(name) else 'not running'}]")
    if not entries:
        print("  (no teammates yet)")

def inbox_command(arg, history):
    """/inbox: the lead's unread mail, left unread (the model gets it with its next request)"""
    lines = [f"  {m['kind']} from {m['from']}: {preview(m['content'])}" for m in unread_mail()[0]]
    print("\n".join(lines) or "No unread mail.")

NAME = {"type": "string", "description": "1-64 letters, digits, '_' or '-'"}
TEXT = {"type": "string"}
TEAM_TOOLS = [
    {"name": "team_spawn", "description": "Define a teammate (saved in .team.json) and start it.",
     "input_schema": {"type": "object", "properties": {"name": NAME, "role": TEXT, "prompt": TEXT},
                      "required": ["name", "role", "prompt"]}},
    {"name": "team_send", "description": "Send a running teammate a request; returns at once, the "
     "answer arrives later. With task_id the task becomes theirs on the board (owner).",
     "input_schema": {"type": "object", "required": ["name", "message"],
                      "properties": {"name": NAME, "message": TEXT, "task_id": TASK_ID}}},
    {"name": "team_review", "description": "Ask a running teammate to approve or reject a plan.",
     "input_schema": {"type": "object", "properties": {"name": NAME, "plan": TEXT},
                      "required": ["name", "plan"]}},
    {"name": "team_wait", "description": "Wait for a teammate's message (at most `seconds`) and "
     "return the new mail. Use it after team_send when there is nothing else to do.",
     "input_schema": {"type": "object", "properties": {"seconds": {"type": "integer"}}}},
    {"name": "team_shutdown", "description": "Ask a running teammate to stop; waits until it does.",
     "input_schema": {"type": "object", "properties": {"name": NAME}, "required": ["name"]}},
]

TEAM_HANDLERS = {"team_spawn": run_team_spawn, "team_send": run_team_send,
                 "team_review": run_team_review, "team_wait": run_team_wait,
                 "team_shutdown": run_team_shutdown}

# .. plumbing: status lines that wait while you type ..................................
# Lines from teammates' threads must not land in the middle of the prompt you are typing:
# while the REPL waits for input they queue, and show once you press Enter.
CONSOLE = {"queued": None, "lock": threading.Lock()}  # queued: a list while you type

def notify(line):
    with CONSOLE["lock"]:
        if CONSOLE["queued"] is None:
            print(line, flush=True)
        else:
            CONSOLE["queued"].append(line)

def read_line(prompt):
    """input(), while teammates' lines queue; they show once you pressed Enter."""
    CONSOLE["queued"] = []
    try:
        return input(prompt)
    finally:
        with CONSOLE["lock"]:
            for line in CONSOLE["queued"]:
                print(line)
            CONSOLE["queued"] = None


# -- The tool table: what the model sees, and what runs ------------------------
TOOLS = [
    {"name": "bash", "description": "Run a shell command in the workspace.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                      "required": ["command"]}},
    {"name": "read_file", "description": "Read a text file; limit = max lines.",  # s02: file tools
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                                                       "limit": {"type": "integer"}},
                      "required": ["path"]}},
    {"name": "write_file", "description": "Create or overwrite a text file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                                                       "content": {"type": "string"}},
                      "required": ["path", "content"]}},
    {"name": "edit_file", "description": "Replace one exact, unique piece of text in a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                                                       "old_text": {"type": "string"},
                                                       "new_text": {"type": "string"}},
                      "required": ["path", "old_text", "new_text"]}},
    *TASK_TOOLS,  # s07: task_create, task_update, task_get, task_list
    *TEAM_TOOLS,  # s09: spawn, send (and assign), review, shut down teammates
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read,  # s02: called with the call's input
                 "write_file": run_write, "edit_file": run_edit,  # s07: the task tools run against BOARD
                 **TASK_TOOL_HANDLERS, **TEAM_HANDLERS}  # s09: the team tools

SLASH_COMMANDS = {"/tasks": show_tasks,  # s07: the board and its graph, for you
                  "/team": team_command, "/inbox": inbox_command}  # s09: the team, the lead's mail

def run_tool(call, not_run=None):
    """Run one tool call as stored in the history; always return exactly one tool_result."""
    result = {"type": "tool_result", "tool_use_id": call["id"]}
    try:
        if not_run:  # a malformed call, or a turn that ended: the call is answered, not run
            raise ValueError(not_run)
        if call["name"] not in TOOL_HANDLERS:
            raise ValueError(f"Unknown tool {call['name']!r}. Available: {sorted(TOOL_HANDLERS)}")
        check_args(call["name"], call["input"])  # s02: the schema, checked before anything runs
        result["content"] = TOOL_HANDLERS[call["name"]](**call["input"])
    except Exception as error:  # any failure becomes a result the model can read
        result.update(is_error=True, content=f"Error: {str(error) or type(error).__name__}")
    return result


# -- The REPL ---------------------------------------------------------------------
def repl(prompt="s09 >> "):  # s09: this step's prompt
    history = []
    while True:
        try:
            query = read_line(prompt).strip()  # s09: teammates' lines wait while you type
        except (EOFError, KeyboardInterrupt):  # Ctrl-D, or Ctrl-C at the prompt: quit
            print()
            return
        if query.lower() in ("q", "exit"):
            return
        try:
            if query.startswith("/"):  # s02: commands for the harness, not the model
                run_slash_command(query, history)
            elif query:  # an empty line does nothing
                add_user_text(history, query)
                agent_loop(history)
        except BaseException as error:  # Ctrl-C or any error ends the turn; the history stays valid
            reason = "interrupted by the user" if isinstance(error, KeyboardInterrupt) else \
                f"{type(error).__name__}: {error}"
            close_turn(history, reason)
            print(f"\n[{reason}]")  # s02: on a line of its own, after streamed text

def main():
    sys.stdout.reconfigure(errors="backslashreplace")  # s02: print any string, lone surrogates too
    if not client or sys.argv[1:]:  # no key, or --demo, --play, --trace run.html
        try:
            import offline  # the local stand-in, play mode and the trace recorder: only here
        except ImportError:
            sys.exit("No ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN is set, and agents/offline "
                     "(the offline demo) is not next to this script.")
        sys.exit(offline.run(__file__, sys.argv))
    repl()


if __name__ == "__main__":
    main()
