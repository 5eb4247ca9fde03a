#!/usr/bin/env python3
# /// script
# requires-python = ">=3.10"
# dependencies = ["anthropic>=0.83,<3", "python-dotenv>=0.10.1"]
# ///
"""s12_worktree.py - a lane per task: a git worktree, so parallel work never collides.
Base: s07_task_system.py - diff against it.

From s07 on, every task edits the one workspace: two tasks that touch the same file undo each
other. Here each task gets a lane - a git worktree with a branch of its own - bound on the board:

    main checkout  (untouched)           .tasks/task_1.json  {"id": 1, "lane": "formal", ...}
      .worktrees/formal   branch wt/formal   <- task #1 edits, runs, commits here
      .worktrees/shout    branch wt/shout    <- task #2, the same file, no collision

    lane_close formal keep      the folder goes; wt/formal and its commits stay for review
    lane_close shout discard    folder and branch go - refused while that would lose work,
                                unless force=true, whose result names what was thrown away

The board is the control plane, the lanes are the execution plane. Which lanes exist is what
`git worktree list` says, which task a lane serves is on the board: no third record to drift.

Key insight: isolate by directory, record in one place - git knows the lanes, the board knows
the tasks, and closing a lane never throws work away without saying so.

Read in this order: lane_create, lane_close (and commits_only_here), lane_facts, lane_list.
Run:  python agents/s12_worktree.py  [--demo]  [--trace run.html]
In the REPL: /lanes, /tasks [STATUS]
"""

import json  # s02: tool inputs sent as text, previews, strings made sendable
import os
import re
import signal  # s02: bash is stopped whole, also by a Ctrl-C while it starts
import subprocess
import sys
import threading  # s02: bash's output is read as it comes
from pathlib import Path

try:  # input() gets line editing where readline exists (not on Windows): arrow keys, history
    import readline  # noqa: F401  (imported for that effect alone)
except ImportError:
    pass

from anthropic import Anthropic, APIError, APIStatusError  # s02: the API's errors, and ours
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
SYSTEM += (" For multi-step work keep the task board: task_create the steps, link them"  # s07: plan
           " with blocked_by, set each in_progress then completed. The board lives in .tasks/"
           " and outlives this conversation; use only task ids that a tool result gave you.")
SYSTEM += (" Give each task that changes files its own lane (lane_create), a git"  # s12: lanes
           " worktree where its edits cannot collide with other tasks'. Edit the lane's files"
           " under .worktrees/<name>/, run and commit there with lane_run, then lane_close it.")


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages):
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
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
    with client.messages.stream(model=model, system=system, messages=messages,
                                tools=TOOLS if tools is None else tools, max_tokens=MAX_TOKENS,
                                cache_control={"type": "ephemeral"}) as stream:
        try:  # the request was accepted; what fails from here on is the reply itself
            for event in stream if echo else ():
                show(event)
            return stream.get_final_message()
        except APIStatusError:  # an error event the API sent mid-stream: its own words
            raise
        except Exception as error:  # cut short, or a 200 that is no reply: whatever the SDK raised
            raise APIError(f"not a valid reply: {first_cause(error)!r}", None, body=None) from error

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
        elif block.type == "text":  # the API refuses whitespace-only text
            repairs.append("dropped an empty text block")
        else:  # sent back, a type this harness does not know may be refused
            repairs.append(f"left out a {block.type!r} block (a type this harness does not know)")
    return content, calls, repairs

def repair_call(block, taken, repairs):
    """A valid tool_use for the history, and why it must not run (None when it may)."""
    call_id = unique_id(block.get("id"), taken, repairs)
    name = block.get("name")
    args = parsed_input(block.get("input"), call_id, repairs)  # s02: some send JSON as text
    call = {"type": "tool_use", "id": call_id, "name": name, "input": args}
    if isinstance(name, str) and name and isinstance(args, dict):
        return sendable(call), None  # s02: any string, made sendable
    not_run = ("malformed call, not run: a tool call needs a name and an object input; "
               f"received name={name!r}, input={args!r}")
    repairs.append(not_run)
    return {**call, "name": "malformed", "input": {}}, not_run

def unique_id(raw, taken, repairs):
    """An id the API accepts (^[a-zA-Z0-9_-]+$), unique in the history: the first keeps its id."""
    call_id = re.sub(r"[^a-zA-Z0-9_-]", "_", f"{raw}") or "call"  # "" matches nothing either
    while call_id in taken:
        call_id += "_2"
    if call_id != raw:
        repairs.append(f"tool id {raw!r} -> {call_id}")
    taken.add(call_id)
    return call_id

def close_turn(messages, reason):
    """After anything: answer every tool_use left open, so the next request is valid."""
    # the last message's tool_use blocks (only they have an input), if there is a last message
    if messages and (calls := [block for block in messages[-1]["content"] if "input" in block]):
        messages.append({"role": "user", "content": [run_tool(call, reason) for call in calls]})
    elif messages and messages[-1]["role"] == "user":  # s02: marked, so it is not redone
        add_user_text(messages, f"[not answered: {reason}]")

def add_user_text(messages, text):
    """Append the user's words; join them to a trailing user turn so roles keep alternating."""
    if not messages or messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": []})
    if isinstance(messages[-1]["content"], str):  # the SDK's examples start with a plain string
        messages[-1]["content"] = [{"type": "text", "text": messages[-1]["content"]}]
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
        raise ValueError(f"old_text appears {count} times in {path}; add context so it is unique")
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

def parsed_input(args, call_id, repairs):
    """A tool input that some endpoints send as text holding a JSON object, parsed."""
    if isinstance(args, str) and args.strip().startswith("{"):
        try:
            args = json.loads(args)
            repairs.append(f"parsed the input of {call_id} from a string")
        except ValueError:
            pass  # not JSON after all: answered as a malformed call
    return args

def first_cause(error):
    """The error at the bottom of a chain: the same one whichever layer of the SDK raised it."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error

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
    else:  # Windows has no killpg or SIGKILL: TerminateProcess stops the shell, not its children
        process.kill()

def drain(pipe, output):
    """Read the command's output to its end; keep what can be returned, so memory stays bounded."""
    with pipe:
        while chunk := pipe.read1(65536):
            output.extend(chunk[:OUTPUT_LIMIT + 1 - len(output)])


# -- s07: the task board - a dependency graph on disk that outlives the chat -----
# One JSON file per task in .tasks/; in .tasks/.board/ the lock and state.json: the generation,
# which every change bumps, the last id handed out, and a log of which tasks the last changes
# wrote. Only `blockedBy` is stored; `blocks` is derived. Readers never lock: every file is
# replaced whole, and a reader re-reads only what changed since it last looked. A change takes
# the lock, brings its copy up to date and re-reads the task it changes, checks every rule,
# then writes.
import contextlib
from collections import Counter
from datetime import datetime, timezone

MARKERS = {"pending": "[ ]", "in_progress": "[>]", "completed": "[x]", "failed": "[!]",
           "deleted": "[-]"}
STATUSES = list(MARKERS)
LOG_SIZE = 64  # the changes state.json names: a reader further behind reads every file

class TaskError(ValueError):
    """A request the board refuses: a code first (NOT_FOUND: ...), then what the model should do."""

class CorruptFile(Exception):
    """A state file that cannot be trusted: named and left alone, never guessed at or rewritten."""
    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}. It is left as it is: fix it or move it, then retry.")

# The rules of the graph, each in one place. `tasks` maps ids to tasks.
def open_blockers(task, tasks):
    """What `task` still waits for: its blockers not completed (a failed one blocks too)."""
    return [blocker for blocker in task["blockedBy"] if tasks[blocker]["status"] != "completed"]

def unblocked(task, tasks):
    """Pending, and nothing left to wait for."""
    return task["status"] == "pending" and not open_blockers(task, tasks)

def is_ready(task, tasks):
    """Someone can start it now: unblocked, and nobody has it."""
    return not task["owner"] and unblocked(task, tasks)

def find_cycle(board, starts):
    """A dependency cycle reached from `starts`, in blocker-first order ([3, 5, 3]: 3 must finish
    before 5, 5 before 3), or None. A depth-first search without recursion, so a long chain
    cannot exhaust Python's recursion limit."""
    done = set()  # tasks whose blockers were all explored: no cycle through them
    for start in starts:
        # The path walked so far, in order: each task on it waits for the next. With each task,
        # an iterator over the blockers not looked at yet.
        path = {start: iter(board[start]["blockedBy"])}
        while path:
            last = next(reversed(path))
            blocker = next(path[last], None)
            if blocker is None:
                done.add(last)
                del path[last]
            elif blocker in path:  # back on the path: a cycle; reversed, blockers come first
                ids = list(path)
                return [blocker, *reversed(ids[ids.index(blocker):])]
            elif blocker not in done:
                path[blocker] = iter(board[blocker]["blockedBy"])
    return None

def with_blocks(task, seen):
    """A copy of `task` with `blocks` (who waits for it), from a board as checked() keeps it."""
    return {**task, "blocks": sorted(seen["blocks"].get(task["id"], ()))}

# What comes in, from a caller before any file is touched, or from a file before it is used.
def parse_id(value):
    """A positive integer; models sometimes send it as text ("3"), which is fine."""
    text = str(value).strip() if type(value) in (int, str) else ""  # not True, not 1.5
    if not re.fullmatch(r"[1-9][0-9]{0,17}", text):  # 1 to 18 digits, no leading zero
        raise TaskError(f"INVALID_ARGS: a task id must be a positive integer such as 3, "
                        f"got {value!r}. {ID_NOTE}")
    return int(text)

def parse_ids(values, field):
    if values is None:
        return []
    if not isinstance(values, list):
        raise TaskError(f"INVALID_ARGS: {field} must be a list of ids such as [1, 2], "
                        f"got {values!r}")
    return list(dict.fromkeys(map(parse_id, values)))  # each id once, in order

def check_fields(fields):
    """The fields a caller set (None: not set), as they will be stored."""
    fields = {name: value for name, value in fields.items() if value is not None}
    for name, value in fields.items():
        if not isinstance(value, str):
            raise TaskError(f"INVALID_ARGS: {name} must be text, got {value!r}")
    if fields.get("status", "pending") not in STATUSES:
        raise TaskError(f"INVALID_STATUS: unknown status {fields['status']!r}; use one of: "
                        f"{', '.join(STATUSES)}")
    if "subject" in fields:
        fields["subject"] = fields["subject"].strip()
        if not fields["subject"]:
            raise TaskError("INVALID_ARGS: subject must not be empty")
    return fields

def record_problem(task, task_id):
    """Why a task record read from disk cannot be trusted, or None when it looks sound."""
    if not isinstance(task, dict) or type(task.get("id")) is not int or task["id"] != task_id:
        return f"not a task record with id {task_id} (the number in its file name)"
    if task.get("status") not in STATUSES:
        return f"unknown status {task.get('status')!r} (allowed: {', '.join(STATUSES)})"
    edges = task.get("blockedBy")
    if not isinstance(edges, list) or any(type(b) is not int for b in edges):
        return "blockedBy must be a list of task ids (integers)"
    for field in ("subject", "description", "owner", "created_at", "updated_at"):
        if type(task.get(field)) is not str:
            return f"{field} must be a string"
    if type(task.get("lane", "")) is not str:  # s12: a lane's name, when a task has one
        return "lane must be a string"
    return None

def write_json(path, data):
    """Through the spine's write_atomic: a temp file, then a rename."""
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")

def utc_now():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

@contextlib.contextmanager
def file_lock(path, folders=0):
    """Hold an exclusive lock on `path`; it keeps out other threads and other processes. The last
    `folders` folders of its path are made where first needed, one at a time and never the ones
    above them: a workspace deleted under a running agent stays deleted."""
    for folder in reversed(path.parents[:folders]):
        folder.mkdir(exist_ok=True)
    with open(path, "a+b") as handle, os_lock(handle):  # a handle per holder: threads wait too
        yield

class TaskBoard(threading.local):
    """The graph in a folder, shared by threads and processes; a refused change writes nothing.
    Each thread keeps the board as it last read and checked it (a threading.local: __init__ runs
    again in each thread) and brings it up to date from state.json: when nothing changed, that
    costs two file operations; after a few changes, one file read per change."""

    def __init__(self, folder):
        self.dir = Path(folder)
        self.state_file = self.dir / ".board" / "state.json"
        self.seen = {}  # the board as last read and checked: nothing yet
        self.swept = False  # stale temp files are swept at this board's first change (per thread)

    def path(self, task_id):
        return self.dir / f"task_{task_id}.json"

    @contextlib.contextmanager
    def locked(self):
        """The lock, for one change at a time."""
        with file_lock(self.dir / ".board" / ".lock", 2):  # .tasks/.board/ made where needed
            if not self.swept:  # left by writers killed mid-write: none is live while we hold it
                for stale in self.dir.glob(".*.tmp"):
                    stale.unlink(missing_ok=True)
                self.swept = True
            yield

    def write(self, task):
        """Under the lock: one task file, whole and fsynced; then state.json, every reader's cue:
        the generation bumped, the task added to the log of the last changes, and the folder's
        modification time as the change left it."""
        state = self.state()
        write_json(self.path(task["id"]), task)
        # The log says which files changed only while nothing else changed the folder: after a
        # hand change (or at the first write) it starts again, empty.
        log = state["changed"] + [task["id"]] if state["folder"] == state["mtime"] else []
        temp = self.state_file.with_name("state.json.tmp")  # one name: only the lock holder
        temp.write_text(json.dumps({"generation": state["generation"] + 1,
                                    "last_id": max(state["last_id"], task["id"]),
                                    "changed": log[-LOG_SIZE:],
                                    "mtime": self.dir.stat().st_mtime_ns}))
        os.replace(temp, self.state_file)  # a cue, not data: no fsync (see create)

    # -- reading: no lock ---------------------------------------------------------
    def state(self):
        """state.json as the last change left it, and "folder": the task folder's modification
        time now, which a file added, removed or replaced changes (an edit in place does not).
        state.json sits in .board/, so that writing it leaves that time as the change left it."""
        try:
            text, folder = self.state_file.read_bytes(), self.dir.stat().st_mtime_ns
        except FileNotFoundError:  # nothing written yet
            text, folder = b'{"generation": 0, "last_id": 0, "changed": [], "mtime": 0}', None
        if not re.fullmatch(rb'\{"generation": [0-9]{1,19}, "last_id": [0-9]{1,18}, '
                            rb'"changed": \[([1-9][0-9]{0,17}(, [1-9][0-9]{0,17})*)?\], '
                            rb'"mtime": [0-9]{1,20}\}', text):  # a 5,000-digit paste is named too
            raise CorruptFile(self.state_file, 'expected {"generation": n, "last_id": n, '
                              '"changed": [ids], "mtime": n} with whole numbers, last_id the '
                              f"last id handed out; found {text[:40]!r}")
        return {**json.loads(text), "folder": folder}

    def checked(self):
        """The board as last read and checked, {"tasks", "blocks", and "ready" once asked},
        brought up to date: unchanged, it costs state(); else it reads what changed."""
        state = self.state()  # first: a change made while we read shows next time, never half
        if self.seen.get("state") == state:
            return self.seen  # nothing changed: no task file is read
        seen, self.seen = self.seen, {}  # suspect until the checks pass
        behind = state["generation"] - seen["state"]["generation"] if seen else -1
        if state["folder"] != state["mtime"] or not 0 < behind <= len(state["changed"]):
            seen, ids = {"tasks": {}, "blocks": {}}, self.ids()  # every file, from nothing
        else:  # only the board changed the folder since, and its log says which files
            ids = state["changed"][-behind:]
        self.load(seen, ids)
        seen["state"] = state
        self.seen = seen
        return seen

    def ids(self):
        """Every task file's id, in order (not task_07, not task_x)."""
        return sorted(int(p.stem[5:]) for p in self.dir.glob("task_*.json")
                      if re.fullmatch(r"task_[1-9][0-9]*", p.stem))

    def load(self, seen, ids):
        """Read `ids` into `seen`, keeping `blocks` - who waits for each task - in step, then
        check what they touch: an edge to a missing or deleted task, or a cycle, is corruption."""
        tasks, blocks = seen["tasks"], seen["blocks"]
        seen.pop("ready", None)  # worked out again when next asked
        moved = []  # tasks whose edges changed: a new cycle must pass through one of them
        for task_id in ids:
            old = tasks.get(task_id, {"blockedBy": []})["blockedBy"]
            tasks[task_id] = task = self.read(task_id)
            if task["blockedBy"] != old:
                moved.append(task_id)
                for blocker in old:
                    blocks[blocker].discard(task_id)
                for blocker in task["blockedBy"]:
                    blocks.setdefault(blocker, set()).add(task_id)
        # The tasks read and those waiting for them, each once: a set, so that a task waiting
        # for many is not checked again for each of them.
        for task_id in {*ids, *(d for i in ids for d in blocks.get(i, ()))}:
            for blocker in tasks[task_id]["blockedBy"]:
                if blocker not in tasks or tasks[blocker]["status"] == "deleted":
                    raise CorruptFile(self.path(task_id), f"blocked by task {blocker}, "
                                                          "deleted or gone")
        if cycle := find_cycle(tasks, moved):  # made by hand: no update lets one in
            raise CorruptFile(self.path(cycle[0]),
                              f"dependency cycle {' -> '.join(map(str, cycle))}")

    def read(self, task_id):
        """One task as its file says: NOT_FOUND if there is none, CorruptFile if it is unsound."""
        path = self.path(task_id)
        try:
            task = json.loads(path.read_bytes())  # bad UTF-8: a ValueError too
        except FileNotFoundError:
            raise TaskError(f"NOT_FOUND: there is no task {task_id}; see task_list") from None
        except (OSError, ValueError) as error:  # ValueError: bad UTF-8 or bad JSON
            raise CorruptFile(path, f"cannot be read as JSON ({error})") from None
        if problem := record_problem(task, task_id):
            raise CorruptFile(path, problem)
        return task

    def current(self):
        """checked(), for readers without the lock: a change seen half made, file by file, looks
        corrupt, so then the board is read again whole, under the lock."""
        try:
            return self.checked()
        except CorruptFile:
            with self.locked():
                return self.checked()

    def tasks(self):
        """Every task, deleted ones too, with `blocks`: who waits for it."""
        self.seen = {}  # a listing reads every file: a hand edit in place shows here at the latest
        seen = self.current()
        return [with_blocks(task, seen) for task in seen["tasks"].values()]

    def get(self, task_id):
        """One task in full, with its `blocks`."""
        task = self.read(parse_id(task_id))  # its file now; NOT_FOUND for an id never handed out
        return with_blocks(task, self.current())

    def ready(self):
        """The tasks someone can start now, worked out once per change of the board."""
        seen = self.current()
        if "ready" not in seen:
            tasks = seen["tasks"]
            seen["ready"] = [with_blocks(task, seen) for task in tasks.values()
                             if is_ready(task, tasks)]
        return list(seen["ready"])

    # -- changing: under the lock ----------------------------------------------------
    def create(self, subject, description="", blocked_by=None):
        """A new pending task; the board picks its id, never the caller."""
        fields = check_fields({"subject": subject, "description": description})
        blockers = parse_ids(blocked_by, "blocked_by")
        with self.locked():
            for blocker in blockers:
                self.check_blocker(blocker)  # nothing waits for a new task yet: no cycle
            task_id = self.state()["last_id"] + 1
            # A crash after the task's write and before state.json's leaves last_id behind:
            # the file is there, so its id is skipped, never handed out twice.
            while self.path(task_id).exists():
                task_id += 1
            now = utc_now()
            task = {"id": task_id, **fields, "status": "pending", "blockedBy": blockers,
                    "owner": "", "created_at": now, "updated_at": now}
            self.write(task)  # the one fsynced write; last_id follows it
        return task

    def update(self, task_id, status=None, subject=None, description=None, owner=None,
               add_blocked_by=None, remove_blocked_by=None, lane=None):  # s12: lane tools only
        """Change one task. Completing or deleting it also returns `unblocked`: what it freed."""
        task_id = parse_id(task_id)
        fields = check_fields({"status": status, "subject": subject, "description": description,
                               "owner": owner, "lane": lane})  # s12: "" unbinds the lane
        add = parse_ids(add_blocked_by, "add_blocked_by")
        remove = parse_ids(remove_blocked_by, "remove_blocked_by")
        if not (fields or add or remove):
            raise TaskError("INVALID_ARGS: pass at least one change (status, subject, "
                            "description, owner, add_blocked_by or "
                            "remove_blocked_by)")
        if set(add) & set(remove):
            raise TaskError("INVALID_ARGS: never add and remove the same id in one update")
        deleting = status == "deleted"
        if deleting and (add or remove):
            raise TaskError("INVALID_ARGS: deleting a task takes no edge changes; delete it on "
                            "its own")
        with self.locked():
            task = self.read(task_id)  # re-read inside the lock: what the caller saw may be stale
            seen = self.checked()  # as it is now: only what changed since is read again
            edges = [b for b in dict.fromkeys(task["blockedBy"] + add) if b not in remove]
            # a deleted task waits for nothing, and (below) nothing waits for it any more
            after = {**task, **fields, "blockedBy": [] if deleting else edges}
            self.check_change(task, after, add, seen["tasks"])
            waited = with_blocks(task, seen)["blocks"]  # who waits for it
            if deleting:  # the dependents first, so that no file ever names a deleted task
                for other in (seen["tasks"][i] for i in waited):
                    kept = [b for b in other["blockedBy"] if b != task_id]
                    self.write({**other, "blockedBy": kept, "updated_at": utc_now()})
            if after != task:  # a change that changes nothing writes nothing
                self.write({**after, "updated_at": utc_now()})
            seen = self.checked()  # the writes read back: one file each
        tasks = seen["tasks"]
        result = with_blocks(tasks[task_id], seen)  # a deleted task: nobody waits for it
        if after["status"] in ("completed", "deleted") and after["status"] != task["status"]:
            result = {"unblocked": [i for i in waited if unblocked(tasks[i], tasks)], **result}
        return result

    def check_change(self, task, after, add, board):
        """The rules a change must pass, on the board as it is now, under the lock."""
        if task["status"] == "deleted":
            raise TaskError(f"INVALID_STATUS: task {task['id']} is deleted and cannot change; "
                            "create a new task")
        for blocker in add:
            self.check_blocker(blocker)
        # a new cycle must pass through this task (the board had none), so search from it;
        # a task waiting for itself is the shortest cycle
        if add and (cycle := find_cycle({**board, task["id"]: after}, [task["id"]])):
            raise TaskError(f"INVALID_DEPENDENCY: that would close a dependency cycle "
                            f"{' -> '.join(map(str, cycle))}; drop one edge")
        if after["status"] in ("in_progress", "completed") and after["status"] != task["status"]:
            if waiting := open_blockers(after, board):  # a move: renaming stays free
                listed = ", ".join(f"{b} ({board[b]['status']})" for b in waiting)
                raise TaskError(f"INVALID_STATUS: task {task['id']} cannot be {after['status']} "
                                f"while blocked by {listed}; finish those first or remove the edge")

    def check_blocker(self, blocker):
        """An edge may point only at a task that exists and is not deleted."""
        if not self.path(blocker).exists() or self.read(blocker)["status"] == "deleted":
            raise TaskError(f"INVALID_DEPENDENCY: there is no task {blocker}, or it is deleted. "
                            f"{ID_NOTE}")


# The view: a compact board, for the model and for you.
def render_board(tasks, status=None):
    """One line per task (no descriptions: task_get has them), then counts and what is ready."""
    everyone = {task["id"]: task for task in tasks}
    shown = [task for task in tasks  # deleted tasks only when asked for by their status
             if task["status"] == status or not status and task["status"] != "deleted"]
    lines = []
    for task in shown:
        line = f"{MARKERS[task['status']]} #{task['id']} {task['subject']}"
        if task["owner"]:
            line += f"  @{task['owner']}"
        if task.get("lane"):  # s12: the lane this task works in (task_get shows it too)
            line += f"  lane {task['lane']}"
        if waiting := open_blockers(task, everyone):
            line += f"  (blocked by {', '.join(f'#{b}' for b in waiting)})"
        lines.append(line)
    counts = Counter(task["status"] for task in shown)
    summary = ", ".join(f"{counts[s]} {s}" for s in STATUSES if s != "deleted" or counts[s])
    ready = [f"#{task['id']}" for task in shown if is_ready(task, everyone)]
    lines.append(f"{len(shown)} tasks: {summary}; ready now: {', '.join(ready) or 'none'}")
    return "\n".join(lines)


# The board as tools (for the model) and as slash commands (for you).
BOARD = TaskBoard(WORKDIR / ".tasks")  # nothing on disk until the first task is created
ID_NOTE = "Use only ids that an earlier tool result returned; never guess one."
TEXT = {"type": "string"}
STATUS = {**TEXT, "enum": STATUSES}
TASK_ID = {"anyOf": [{"type": "integer"}, {"type": "string"}],  # "3" is fine too
           "description": "A task id, e.g. 3. " + ID_NOTE}
TASK_IDS = {"type": "array", "items": TASK_ID}

def tool(name, description, required, /, **properties):  # /: a property may be called name
    """A tool as the API takes it: its name, what it does, and its input as a JSON schema."""
    return {"name": name, "description": description, "input_schema": {
        "type": "object", "properties": properties, "required": required}}

TASK_TOOLS = [
    tool("task_create", "Add a task to the persistent task board (.tasks/; it survives restarts); "
                        "returns it with the id the board gave it. blocked_by: ids of tasks that "
                        "must be completed first - so create blockers first and take their ids "
                        "from the results. " + ID_NOTE,
         ["subject"], subject=TEXT, description=TEXT, blocked_by=TASK_IDS),
    tool("task_update", "Change one task: status, subject, description, owner, or what it waits "
                        "for (add_blocked_by, remove_blocked_by). It can start or complete only "
                        "once all its blockers are completed; completing returns `unblocked`, the "
                        "tasks that just became ready. " + ID_NOTE,
         ["task_id"], task_id=TASK_ID, status=STATUS, subject=TEXT, description=TEXT,
         owner=TEXT, add_blocked_by=TASK_IDS, remove_blocked_by=TASK_IDS),
    tool("task_get", "One task in full, with its description and `blocks` (what waits for it).",
         ["task_id"], task_id=TASK_ID),
    tool("task_list", "The board in brief: one line per task (status, id, subject, owner, open "
                      "blockers), then counts and the tasks ready now. No descriptions: use "
                      "task_get for those. Deleted tasks show only with status 'deleted'.",
         [], status=STATUS),
]

def run_task_list(status=None):
    check_fields({"status": status})  # the filter is checked like a status field
    return render_board(BOARD.tasks(), status)

def returning_json(method):
    """A board method as a tool: the task it returns, as JSON."""
    return lambda **args: json.dumps(method(**args), ensure_ascii=False)

TASK_TOOL_HANDLERS = {"task_create": returning_json(BOARD.create),
                      "task_update": returning_json(BOARD.update),
                      "task_get": returning_json(BOARD.get), "task_list": run_task_list}

def show_tasks(arg, history):
    """/tasks [STATUS]: the board as the model sees it (deleted tasks: /tasks deleted)"""
    try:
        print(run_task_list(arg or None))
    except (TaskError, CorruptFile, OSError) as error:  # a broken board must not end the session
        print(f"[task board] {error}")


# .. plumbing: the lock on each platform .................................................
if os.name == "nt":
    import msvcrt
else:
    import fcntl

@contextlib.contextmanager
def os_lock(handle):
    """POSIX: flock, freed when the handle closes. Windows: msvcrt on byte 0, retried, because
    LK_LOCK gives up after about 10 s and a busy board is a reason to wait, not to fail."""
    if os.name != "nt":
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield
        return
    while True:
        with contextlib.suppress(OSError):
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
            break
    try:
        yield
    finally:  # Windows wants the unlock said
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)


# -- s12: lanes - a git worktree per task, so parallel work never collides ---------
# A lane is a git worktree at .worktrees/<name> on branch wt/<name>. Each fact lives in one
# place: which lanes exist is what `git worktree list` says (no index file of our own), which
# task a lane serves is on the board. A crash between two steps leaves a state lane_list
# shows and lane_close finishes. Closing never loses work unless force says so, by name.
LANES = ".worktrees"
LANE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")  # a folder and a branch name: no / . space

class LaneError(ValueError):
    """A lane request refused, or git's own refusal: the message says what to do instead."""

def check_lane_name(name):
    """Checked before the name touches a path or a branch."""
    if not isinstance(name, str) or not LANE_NAME.fullmatch(name):
        raise LaneError(f"invalid lane name {name!r}: use 1-40 of a-z, 0-9 and '-', starting "
                        "with a letter or digit (it becomes a folder and a branch)")
    return name

def git(*args, cwd=None):
    """git's output, or LaneError with what git said."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd or WORKDIR, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=BASH_TIMEOUT,
                              encoding="utf-8", errors="replace")
    except OSError as error:
        raise LaneError(f"cannot run git ({error}); install git first") from None
    if done.returncode:
        raise LaneError(f"git {args[0]} failed: {done.stderr.strip()}")
    return done.stdout

def require_repo():
    """Lanes start from a commit; without one, one line says what to run."""
    try:
        git("rev-parse", "--is-inside-work-tree")
    except LaneError:
        raise LaneError(f"{WORKDIR} is not in a git repository; lanes need one. Run git init, "
                        "list .tasks/ and .worktrees/ in .gitignore, then git add -A && git "
                        "commit -m start") from None
    try:
        git("rev-parse", "--verify", "HEAD")
    except LaneError:
        raise LaneError("the repository has no commit yet, and a lane starts from one. List "
                        ".tasks/ and .worktrees/ in .gitignore, then run git add -A && git "
                        "commit -m start") from None

def lanes_in_git():
    """name -> git's fields of each worktree in .worktrees/ (worktree, HEAD, branch)."""
    home = (WORKDIR / LANES).resolve()
    lanes = {}
    for entry in git("worktree", "list", "--porcelain").split("\n\n"):
        fields = dict(line.split(" ", 1) for line in entry.splitlines() if " " in line)
        path = Path(fields.get("worktree", "")).resolve()
        if path.parent == home:
            lanes[path.name] = fields
    return lanes

def lane_of(task):
    """The lane a task works in; "" for none. A deleted task keeps its field but works nowhere."""
    return task.get("lane", "") if task["status"] != "deleted" else ""

def lane_facts(name):
    """What git and the board say about one lane, and the work that closing it could lose."""
    worktree = lanes_in_git().get(name)
    folder = WORKDIR / LANES / name
    branch = git("branch", "--list", f"wt/{name}").strip() != ""
    live = worktree is not None and folder.is_dir()
    tips = [worktree["HEAD"]] if worktree else []  # a detached HEAD's commits count too
    if branch:
        tips.append(f"refs/heads/wt/{name}")
    return {"worktree": worktree, "live": live, "branch": branch, "tips": tips,
            "tasks": [task["id"] for task in BOARD.tasks() if lane_of(task) == name],
            "changes": git("status", "--porcelain", cwd=folder).splitlines() if live else []}

def commits_only_here(name, facts, keep_branch):
    """The lane's commits that no branch staying behind reaches ("%h %s" lines)."""
    if not facts["tips"]:
        return []
    others = ["--branches"] if keep_branch else [f"--exclude=wt/{name}", "--branches"]
    return git("log", "--format=%h %s", *facts["tips"], "--not", *others, "--").splitlines()

def lane_create(name, task_id):
    """A worktree from the current commit on a new branch, then the task records its lane."""
    check_lane_name(name)
    require_repo()
    task = BOARD.get(task_id)
    if task["status"] == "deleted":
        raise LaneError(f"task {task['id']} is deleted; a lane is for a live task")
    if task.get("lane"):
        raise LaneError(f"task {task['id']} already works in lane {task['lane']}; one lane per "
                        "task (lane_close that one first)")
    folder = WORKDIR / LANES / name
    taken = []  # what holds the name, each said: a kept branch, a folder, a lane git still knows
    if git("branch", "--list", f"wt/{name}"):
        taken.append(f"branch wt/{name}")
    if folder.exists():
        taken.append(f"folder {LANES}/{name}")
    if name in lanes_in_git():
        taken.append(f"a worktree git knows at {LANES}/{name}")
    if taken:
        raise LaneError(f"the lane name {name!r} is taken by: {', '.join(taken)}. Pick another "
                        f"name, or see lane_list (lane_close {name} frees a lane's name)")
    git("worktree", "add", "-b", f"wt/{name}", str(folder), "HEAD")
    BOARD.update(task["id"], lane=name)  # a crash before this: lane_list shows a lane, no task
    start = git("rev-parse", "--short", "HEAD").strip()
    result = (f"lane {name}: {LANES}/{name} on branch wt/{name}, from commit {start}; task "
              f"#{task['id']} works in it. Edit files under {LANES}/{name}/, run and commit with "
              "lane_run.")
    try:
        git("check-ignore", "-q", f"{LANES}/")
    except LaneError:  # else the main checkout's git status lists it, and git add -A takes it
        result += f" Note: {LANES}/ is not in .gitignore; add it there."
    return result

def lane_run(name, command):
    """A command inside the lane, by s02's run_bash: its timeout, process group, output cap."""
    check_lane_name(name)
    require_repo()
    if name not in lanes_in_git() or not (WORKDIR / LANES / name).is_dir():
        raise LaneError(f"there is no lane {name} with a folder; lane_list shows the lanes")
    return run_bash(f"cd {Path(LANES, name)} && {command}")  # the name has no shell characters

def describe_lane(name):
    """One line of lane_list: task, folder, branch, and the work only this lane holds."""
    facts = lane_facts(name)
    where = f"folder {LANES}/{name}" if facts["live"] else "no folder"
    if facts["worktree"] and not facts["live"]:
        where = "folder MISSING (deleted by hand?): lane_close with either action closes it"
    commits = commits_only_here(name, facts, keep_branch=False)
    tasks = ", ".join(f"#{task_id}" for task_id in facts["tasks"]) or "none"
    return (f"{name}: task {tasks}; {where}; branch {'wt/' + name if facts['branch'] else 'none'};"
            f" {len(facts['changes'])} uncommitted change(s); {len(commits)} commit(s) on no"
            " other branch")

def lane_list():
    """Every lane git knows, every kept wt/ branch, and every lane the board still names."""
    require_repo()
    names = set(lanes_in_git()) | {lane_of(task) for task in BOARD.tasks()} - {""}
    names |= set(git("for-each-ref", "--format=%(refname:lstrip=3)", "refs/heads/wt/").split())
    return "\n".join(map(describe_lane, sorted(names))) or "no lanes; lane_create makes one"

def lane_close(name, action, force=False):
    """keep: the folder goes, the branch stays for review. discard: both go. Refused while that
    would lose work, unless force - whose result names what was thrown away."""
    check_lane_name(name)
    require_repo()
    if action not in ("keep", "discard"):
        raise LaneError(f"action must be 'keep' (the branch stays) or 'discard', got {action!r}")
    facts = lane_facts(name)
    if not (facts["worktree"] or facts["branch"] or facts["tasks"]):
        raise LaneError(f"there is no lane {name}; lane_list shows the lanes")
    lost = [f"uncommitted: {line}" for line in facts["changes"]]
    lost += [f"commit {c}" for c in commits_only_here(name, facts, action == "keep")]
    if lost and not force:
        raise LaneError(f"refused: closing lane {name} ({action}) would lose {'; '.join(lost)}. "
                        f"Commit with lane_run {name} 'git add -A && git commit -m ...', merge "
                        "the branch, or close with keep; or pass force=true to throw it away")
    if facts["live"]:
        flags = ["--force"] if force else []  # without it, git itself refuses a dirty folder
        git("worktree", "remove", *flags, str(WORKDIR / LANES / name))
    elif facts["worktree"]:
        git("worktree", "prune")  # the folder was deleted by hand: git forgets it
    if action == "discard" and facts["branch"]:
        git("branch", "-D", f"wt/{name}")
    for task_id in facts["tasks"]:  # last: a crash before it leaves a binding lane_list shows
        BOARD.update(task_id, lane="")
    fate = "deleted" if action == "discard" else f"kept for review (git log wt/{name})"
    result = f"closed lane {name}: folder gone; branch wt/{name} "
    result += fate if facts["branch"] else "was already gone"
    if facts["tasks"]:
        result += f"; unbound task(s) {facts['tasks']}, their status unchanged"
    if lost:
        result += f"; thrown away (force): {'; '.join(lost)}"
    return result

def show_lanes(arg, history):
    """/lanes: every lane with its task, branch and unsaved work (as lane_list)"""
    try:
        print(lane_list())
    except (LaneError, TaskError, CorruptFile, OSError) as error:
        print(f"[lanes] {error}")

LANE_NAME_ARG = {"type": "string", "description": "The lane's name: 1-40 of a-z, 0-9, '-'."}
LANE_TOOLS = [
    tool("lane_create", "Make a lane for one task: a git worktree at .worktrees/<name> on a new "
                        "branch wt/<name>, from the current commit; the task records its lane. "
                        "Parallel tasks in their own lanes never touch each other's files. "
                        + ID_NOTE, ["name", "task_id"], name=LANE_NAME_ARG, task_id=TASK_ID),
    tool("lane_run", "Run a shell command inside a lane's folder (as bash: timeout, output cap).",
         ["name", "command"], name=LANE_NAME_ARG, command={"type": "string"}),
    tool("lane_list", "Every lane: its task, folder, branch, uncommitted changes, and commits on "
                      "no other branch; kept branches and half-made or half-closed lanes too.",
         []),
    tool("lane_close", "Close a lane and unbind its task. keep: the folder goes, the branch and "
                       "its commits stay for review. discard: folder and branch go. Refused while "
                       "it would lose uncommitted changes (or, for discard, commits on no other "
                       "branch); force=true throws them away and the result names them.",
         ["name", "action"], name=LANE_NAME_ARG,
         action={"type": "string", "enum": ["keep", "discard"]}, force={"type": "boolean"}),
]

LANE_TOOL_HANDLERS = {"lane_create": lane_create, "lane_run": lane_run, "lane_list": lane_list,
                      "lane_close": lane_close}


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
    *LANE_TOOLS,  # s12: lane_create, lane_run, lane_list, lane_close
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read,  # s02: called with the call's input
                 "write_file": run_write, "edit_file": run_edit,  # s07: the task tools, on BOARD
                 **LANE_TOOL_HANDLERS,  # s12: the lane tools
                 **TASK_TOOL_HANDLERS}

SLASH_COMMANDS = {"/tasks": show_tasks}  # s07: the board, for you
SLASH_COMMANDS["/lanes"] = show_lanes  # s12: the lanes, as lane_list sees them

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
def repl(prompt="s12 >> "):  # s12: this step's prompt
    history = []
    while True:
        try:
            query = input(prompt).strip()
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
            raise SystemExit(  # copied alone, or run as python -m (agents/ not on sys.path)
                f"Set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN, or run python {__file__} "
                "with agents/offline/ beside it")
        sys.exit(offline.run(__file__, sys.argv))
    repl()


if __name__ == "__main__":
    main()
