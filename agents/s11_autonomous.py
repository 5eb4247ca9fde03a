#!/usr/bin/env python3
# /// script
# requires-python = ">=3.10"
# dependencies = ["anthropic>=0.83,<3", "python-dotenv>=0.10.1"]
# ///
"""s11_autonomous.py - autonomous teammates: they claim ready tasks themselves, also as processes.
Base: s09_team.py - diff against it.

In s09 a teammate waits to be told. Here it looks for work itself, in a fixed order, and
stops by itself when nothing comes:

    1. new mail?                  answer it (s09's rules; a shutdown ends the loop)
    2. a claimable task?          pick and claim the lowest id in one hold of the board
                                  lock (a compare-and-set), do it, finish it (completed/failed)
    3. nothing?                   wait for mail or the board's generation (POLL_SECONDS at most)
    4. nothing for IDLE_TIMEOUT?  report "stopped" to the lead, and end

    lead (REPL)                 .tasks/ (s07's board)              workers: threads of the lead,
    task_create, blocked_by --> [1]--+                             or --worker processes
                                [2]--+--> [4]  <-- claim -- alice: picks #4, lease 5 min
                                [3]--+         <-- claim -- bob:   next in the lock, #4 taken
    lead.jsonl  <-- "started", "completed #4 ...", "stopped: idle"    (s09's mailbox)

A claim carries a lease that a heartbeat renews while the work runs (up to TASK_CEILING), so
a task whose worker died - kill -9 - is claimable again once its lease runs out; a worker
finishes only a task it still holds; and quitting gives back every claim its workers hold.

Key insight: the loop is easy; the race is the lesson. Several agents, even in several
processes, reach for the same task, and only a compare-and-set under one lock lets exactly
one of them have it.

Three rules, one function each: lease_expired (when a lease has run out), claimable (who may
claim a task), holding (who holds a claim). Every check of the board goes through them.

Read in this order: the three rules, claim, AutonomousAgent.work, heartbeat, finish and
release; then run_worker.
Run:  python agents/s11_autonomous.py  [--demo]  [--trace run.html]   (the demo: the race, a crash)
      python agents/s11_autonomous.py --worker NAME [--session ID]    one worker as its own process
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
SYSTEM += (" You lead a team: plan on the board, team_review the plan with a reviewer,"  # s09: lead
           " then team_spawn teammates and team_send each its task; team_wait for their answers.")
SYSTEM += (" team_spawn_autonomous starts workers that claim ready tasks"  # s11: workers
           " by themselves and report to you: plan the work as tasks first,"
           " then check it with task_list.")


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
               add_blocked_by=None, remove_blocked_by=None):
        """Change one task. Completing or deleting it also returns `unblocked`: what it freed."""
        task_id = parse_id(task_id)
        fields = check_fields({"status": status, "subject": subject, "description": description,
                               "owner": owner})
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
            entries = json.loads(self.path.read_bytes())["teammates"]  # bad UTF-8: ValueError
            bad = [name for name, entry in entries.items() if entry.get("name") != name
                   or not all(isinstance(entry.get(key), str) for key in ("role", "prompt"))]
            if bad:
                raise ValueError(f"entries {bad} are not {{name, role, prompt}} of text")
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # any wrong shape
            expected = "{'teammates': {name: {name, role, prompt}}}"
            raise CorruptFile(self.path, f"expected {expected}: {error}") from None
        return entries

    def add(self, name, role, prompt):
        if check_name(name, "teammate name") == LEAD:
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
        check_name(sender, "sender")  # the answer goes back to it, so it is a name like any other
        if not (kind in KINDS and protocol in PROTOCOLS
                and isinstance(content, str) and content.strip()):
            raise ValueError(f"a message needs non-empty text, a kind in {KINDS} and a protocol "
                             f"in {PROTOCOLS}; got kind {kind!r}, protocol {protocol!r}, "
                             f"text {content!r:.40}")
        message = {"id": secrets.token_hex(8), "from": sender, "to": to, "kind": kind,
                   "protocol": protocol, "reply_to": reply_to, "content": content, "at": utc_now()}
        line = (json.dumps(message) + "\n").encode()  # ASCII JSON: lone surrogates are fine too
        # .mailbox/ and the session's folder are made where first needed, never the workspace
        with file_lock(path.with_suffix(".lock"), 2), open(path, "a+b", buffering=0) as handle:
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
        for line in filter(bytes.strip, data.splitlines()):  # an empty line is a gap, no message
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
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.alive = hold_name(mailbox, self.name)  # s11: one agent per name, across processes

    def run(self):
        while not self.stopping:
            messages, self.offset = self.mailbox.read(self.name, self.offset)
            for message in messages:
                self.handle(message)
            if not messages:
                self.mailbox.wait(self.name, self.offset, timeout=1.0)
        self.alive.close()  # s11: the name is free again

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
                              message.get("protocol"), message["id"])  # protocol, reply_to
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
    content = messages[-1]["content"]  # a list of blocks, or the user's words as one string
    if isinstance(content, list) and content[-1]["type"] == "tool_result":
        inner = content[-1].get("content") or "(no output)"  # text, or a list of blocks
        if isinstance(inner, str):
            inner = [{"type": "text", "text": inner}]
        content[-1]["content"] = inner + [{"type": "text", "text": news}]
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
    return name_taken(MAILBOX, name)  # s11: a thread of this lead, or a --worker process

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
        raise TimeoutError(f"{name} did not answer request {request_id} within {TEAM_TIMEOUT}s; "
                           "the request stays in its mailbox")
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
    return f"{name}'s verdict: {ask(name, plan, 'plan_approval')}"

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
TEAM_TOOLS = [
    tool("team_spawn", "Define a teammate (saved in .team.json) and start it.",
         ["name", "role", "prompt"], name=NAME, role=TEXT, prompt=TEXT),
    tool("team_send", "Send a running teammate a request; returns at once, the answer arrives "
                      "later. With task_id the task becomes theirs on the board (owner).",
         ["name", "message"], name=NAME, message=TEXT, task_id=TASK_ID),
    tool("team_review", "Ask a running teammate to approve or reject a plan.",
         ["name", "plan"], name=NAME, plan=TEXT),
    tool("team_wait", "Wait for a teammate's message (at most `seconds`) and return the new mail. "
                      "Use it after team_send when there is nothing else to do.",
         [], seconds={"type": "integer"}),
    tool("team_shutdown", "Ask a running teammate to stop; waits until it does.",
         ["name"], name=NAME),
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


# -- s11: autonomous teammates: they claim ready tasks themselves, also as processes --
# Three rules decide everything: when a lease has run out, who may claim a task, who holds a
# claim. A claim is a compare-and-set under s07's board lock, re-reading inside it; a heartbeat
# renews its lease while the work runs. The agent is s09's teammate with a loop of its own -
# mail, then the board, then a wait for news - in a thread of the lead or a --worker process.
LEASE_SECONDS = float(os.getenv("LEASE_SECONDS") or 300)  # a claim lapses this long after a renewal
TASK_CEILING = float(os.getenv("TASK_CEILING") or 3600)  # no renewals after this: a stuck task goes
POLL_SECONDS = float(os.getenv("POLL_SECONDS") or 1)  # an idle worker looks again after this
IDLE_TIMEOUT = float(os.getenv("IDLE_TIMEOUT") or 60)  # idle this long, a worker stops
WORKER_PROMPT = ("You take tasks from the shared task board and do them with your tools. Work only "
                 "on the task you are given and leave its status to the harness: it completes the "
                 "task when you answer with a one-line summary.")

def moment(after=0):
    """Now, or `after` seconds from now, to the microsecond: claims within a second stay ordered."""
    return datetime.fromtimestamp(time.time() + after, timezone.utc).isoformat()

def lease_expired(task):
    """When a lease has run out: the task is in progress and its worker stopped renewing it."""
    if task["status"] != "in_progress":  # most tasks: no lease to parse
        return False
    try:
        lease = datetime.fromisoformat(task.get("lease_until"))
    except (TypeError, ValueError):  # no lease (set in_progress by hand), or an unreadable one
        return False
    return lease <= datetime.now(timezone.utc)

def claimable(task, tasks):
    """Who may claim a task: anyone, when it is ready (unowned, and s07's `unblocked`) or when
    its lease has run out. `tasks` holds at least its blockers, by id."""
    return lease_expired(task) or (not task["owner"] and unblocked(task, tasks))

def holding(task, owners):
    """Who holds a claim: one of `owners` (NAME@SESSION, never the bare name), while in progress."""
    return task["status"] == "in_progress" and task.get("claimed_by") in owners

def claim(board, task_id, owner):
    """Compare-and-set: task `task_id` - or, with None, the lowest claimable one - becomes
    `owner`'s (NAME@SESSION), with a lease: picked, checked and written under one lock hold.
    None if nothing is claimable; CONFLICT if the task asked for is not, and why."""
    with board.locked():
        tasks = board.checked()["tasks"]  # the board as it is now: what changed is read again
        if task_id is None:
            task_id = min((i for i in tasks if claimable(tasks[i], tasks)), default=None)
            if task_id is None:
                return None
        task = board.read(task_id)  # the check happens here, inside the lock, on the file as it is
        if not claimable(task, tasks):  # say what was found, as every refusal does
            waiting = [f"{b} ({tasks[b]['status']})" for b in open_blockers(task, tasks)]
            raise TaskError(f"CONFLICT: task {task_id} is not claimable now: it is "
                            f"{task['status']}, owned by {task['owner'] or 'nobody'}, blocked by "
                            f"{', '.join(waiting) or 'nothing'}; pick another")
        task = {**task, "status": "in_progress", "owner": owner.partition("@")[0],
                "claimed_by": owner, "taken_from": task["owner"], "started_at": moment(),
                "lease_until": moment(LEASE_SECONDS), "updated_at": moment()}
        board.write(task)
    return task

def change_claim(board, task_id, owners, **changes):
    """Write `changes` only while one of `owners` still holds the claim; False once none does."""
    with board.locked():
        task = board.read(task_id)
        if not holding(task, owners):
            return False
        board.write({**task, **changes})
    return True

def renew(board, task_id, owner):
    return change_claim(board, task_id, {owner}, lease_until=moment(LEASE_SECONDS))

def finish(board, task_id, owner, status, result):
    """How the work ended, recorded only while `owner` holds the claim (a lapsed lease lost it)."""
    return change_claim(board, task_id, {owner}, status=status, result=result, lease_until=None,
                        updated_at=moment())

def release(board, owners):
    """Give back every claim these stopped owners still hold: pending and unowned again."""
    returned = []
    for task in board.tasks():  # a first look, without the lock; change_claim checks again
        if holding(task, owners) and change_claim(board, task["id"], owners, status="pending",
                                                  owner="", claimed_by="", lease_until=None,
                                                  updated_at=moment()):
            returned.append(task["id"])
    return returned

@contextlib.contextmanager
def heartbeat(board, task_id, owner):
    """While the body runs, renew the lease every LEASE_SECONDS / 3 - but not past TASK_CEILING:
    a task that makes no progress must not keep its claim forever."""
    done = threading.Event()
    ceiling = time.monotonic() + TASK_CEILING

    def beat():
        while not done.wait(LEASE_SECONDS / 3):
            if time.monotonic() > ceiling:
                notify(f"[{owner}] #{task_id} ran past its {TASK_CEILING:g}s ceiling: "
                       "the lease will lapse")
                return
            try:
                if not renew(board, task_id, owner):  # taken over, or given back
                    notify(f"[{owner}] #{task_id} is no longer mine: stopped renewing it")
                    return
            except (TaskError, CorruptFile, OSError) as error:  # maybe passing: try next beat
                notify(f"[{owner}] could not renew #{task_id}: {error}")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()

class AutonomousAgent(Teammate):
    """A teammate that finds its own work. A --worker process runs this same class and loop."""

    def __init__(self, entry, mailbox, board):
        super().__init__(entry, mailbox, mailbox.size(entry["name"]))  # older mail: an earlier life
        self.board = board
        self.role = entry["role"]
        self.owner = f"{self.name}@{mailbox.root.name}"  # unique across sessions sharing the board
        self.done = []  # one line per finished task, for the digest
        self.history = self.fresh_history()

    def fresh_history(self):
        """Who I am and what I have done: where each task's history starts."""
        identity = (f"<identity>You are {self.name!r} ({self.role}), an autonomous member of the "
                    f"team led by {LEAD!r}; mailbox session {self.mailbox.root.name}; workspace "
                    f"{WORKDIR}. You take ready tasks from the board in .tasks/, one at a time; "
                    "your final answer is its result.</identity>")
        digest = "\n".join(["Work done so far:", *(self.done[-20:] or ["none yet"])])
        return [{"role": "user", "content": [{"type": "text", "text": identity},
                                             {"type": "text", "text": digest}]}]

    def run(self):
        reason = "interrupted (Ctrl-C)"  # what is left if a KeyboardInterrupt ends the work
        with self.alive:  # the name is freed however this ends
            try:
                self.mailbox.send(LEAD, self.name, "started: I take ready tasks from the board")
                reason = self.work()
            except CorruptFile as error:  # a board file that cannot be trusted: named, left alone
                reason = f"the task board cannot be read: {error}"
            except Exception as error:  # a broken mailbox, or a bug: say why, do not die silently
                reason = f"crashed: {type(error).__name__}: {error}"
            finally:  # neither a crash nor Ctrl-C may strand a task
                self.stop(reason)

    def work(self):
        """The loop, in order: mail, then the board, then a wait. Returns why it ended."""
        busy_at = time.monotonic()
        self.board.current()  # the first look, outside the lock: a claim reads only what changed
        while not self.stopping:
            messages, self.offset = self.mailbox.read(self.name, self.offset)
            for message in messages:  # 1. mail first, by s09's rules
                self.handle(message)
            board = self.board.state()  # a change after this look ends the wait below
            if messages or self.work_on_next_task():  # 2. then the board
                busy_at = time.monotonic()
            elif time.monotonic() - busy_at >= IDLE_TIMEOUT:  # 4. nothing to do for too long
                return f"idle for {IDLE_TIMEOUT:g}s (no mail, nothing claimable)"
            else:  # 3. until mail comes, the board changes (its generation moves with every
                # change) or about POLL_SECONDS pass (a lease may run out): a stat and a small
                # read every 5 ms, never a scan of the board
                for _ in range(int(POLL_SECONDS / 0.005)):
                    if (self.mailbox.size(self.name) != self.offset
                            or self.board.state() != board):
                        break
                    time.sleep(0.005)
        return "shutdown requested"

    def work_on_next_task(self):
        """Claim the lowest claimable task and do it; False if there was none."""
        task = claim(self.board, None, self.owner)
        if task:
            self.do_task(task)
        return task is not None

    def do_task(self, task):
        claimed = f"[{self.name}] claimed #{task['id']} {task['subject']}"
        prompt = f"Task #{task['id']}: {task['subject']}\n{task['description']}\n"
        if task["taken_from"]:  # taken over from a worker whose lease ran out: maybe half done
            claimed += f" - taken over from {task['taken_from']}, whose lease ran out"
            prompt += f"{task['taken_from']} had it until its lease ran out: check what is done. "
        notify(claimed)
        # A clean context per task: its cost stays flat however many tasks came before, and
        # nothing from an earlier task distracts; what earlier tasks did is in the digest.
        self.history = self.fresh_history()
        add_user_text(self.history, prompt + "Do it with your tools, then answer in one line.")
        with heartbeat(self.board, task["id"], self.owner):
            try:
                note = teammate_turn(self.history, self.system)
                status = "completed"
            except Exception as error:  # an API error or a broken tool: the task failed, not me
                close_turn(self.history, f"task #{task['id']} failed ({error!r}); "
                                         "it is not retried by itself")
                note = f"{type(error).__name__}: {error}"
                status = "failed"
        result = preview(note, 200)
        if not finish(self.board, task["id"], self.owner, status, result):
            notify(f"[{self.name}] #{task['id']} is no longer mine (its lease ran out, or it was "
                   "changed): result dropped")
            return
        self.done.append(f"- task #{task['id']} {task['subject']}: {status}: {result}")
        report = f"{status} #{task['id']} {task['subject']}: {result}"
        notify(f"[{self.name}] {report}")
        self.mailbox.send(LEAD, self.name, report)

    def stop(self, reason):
        """Give back my claims, say why I stopped (terminal, lead); never raises a second time."""
        try:
            returned = release(self.board, {self.owner})
            gave_back = f"; gave back {returned}" if returned else ""
        except (CorruptFile, TaskError, OSError) as error:  # most likely what stopped the work
            gave_back = "" if str(error) in reason else f"; could not give back my claims: {error}"
        notify(f"[{self.name}] stopped: {reason}{gave_back}")
        try:
            self.mailbox.send(LEAD, self.name, f"stopped: {reason}")
        except (OSError, ValueError) as error:  # a broken mailbox: the terminal line must do
            notify(f"[{self.name}] could not tell the lead: {error}")

def worker_entry(name):
    """Who a worker is: its roster entry, added as a plain autonomous worker the first time."""
    if check_name(name, "worker name") == LEAD:  # it would read, and answer, the lead's own mail
        raise ValueError(f"{LEAD!r} is the lead's own mailbox; pick another name")
    return ROSTER.load().get(name) or ROSTER.add(name, "autonomous worker", WORKER_PROMPT)

def run_team_spawn_autonomous(name):
    RUNNING[name] = AutonomousAgent(worker_entry(name), MAILBOX, BOARD)  # refuses a running name
    RUNNING[name].thread.start()
    return (f"Spawned autonomous worker {name}: it claims ready tasks from .tasks/ by itself "
            f"and stops after {IDLE_TIMEOUT:g}s with nothing to do. Its reports arrive in your "
            "mailbox.")

def stop_autonomous():
    """Quitting the lead: stop its workers, and give back every claim they still hold."""
    workers = [agent for agent in RUNNING.values() if isinstance(agent, AutonomousAgent)]
    if not workers:  # nothing to stop, and no board to read
        return
    for agent in workers:
        agent.stopping = True
    for agent in workers:
        agent.thread.join(timeout=2)  # one still in a model call dies with the process
    try:
        returned = release(BOARD, {agent.owner for agent in workers})
    except (CorruptFile, TaskError, OSError) as error:  # quitting must not fail on a broken board
        print(f"[team] workers' claims not given back (their leases will lapse): {error}")
        return
    if returned:
        print(f"[team] gave back {returned} to the board: their workers stopped with the lead")

def run_worker(argv):
    """--worker NAME [--session ID]: one autonomous teammate as this process, on the lead's
    board and in its session's mailbox. Every refusal is one line on stderr and exit code 2."""
    flags = dict(zip(argv, argv[1:]))  # each argument -> the one after it
    try:
        if client is None:  # refused before anything is written, the roster included
            raise ValueError("a worker calls the model: set ANTHROPIC_API_KEY "
                             "(or ANTHROPIC_AUTH_TOKEN)")
        entry = worker_entry(flags.get("--worker"))
        session = check_name(flags.get("--session"), "session id") if "--session" in argv else "*"
        worker = AutonomousAgent(entry, lead_session(session), BOARD)
    except (ValueError, LookupError, CorruptFile, OSError) as error:
        print(f"[worker] {error}", file=sys.stderr)
        return 2
    notify(f"[{worker.name}] joined session {worker.mailbox.root.name} in {WORKDIR}")
    try:
        worker.run()  # in this thread, so Ctrl-C lands in the work and kills a running command
    except KeyboardInterrupt:
        return 130
    return 0

AUTONOMOUS_TOOLS = [
    tool("team_spawn_autonomous", "Start an autonomous worker in the background: it answers "
                                  "its mail, claims ready tasks from the board by itself (lowest "
                                  "id first), puts a result on each, and stops after a while "
                                  "with nothing to do. Plan the tasks with task_create and "
                                  "blocked_by first.", ["name"], name=NAME),
]

# .. plumbing: one agent per name, and finding the lead's session ...........................
def hold_name(mailbox, name):
    """A lock file per running agent, held for its life and freed by the OS if its process dies:
    two agents with one name would share one mailbox and answer every request twice."""
    for folder in (mailbox.root.parent, mailbox.root):  # made where first needed, never the
        folder.mkdir(exist_ok=True)  # workspace: a worker must not recreate a deleted one
    handle = open(mailbox.root / f"{check_name(name)}.alive", "a+b")
    try:
        if os.name == "nt":
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise ValueError(f"{name} is already running in session {mailbox.root.name}; "
                         "pick another name") from None
    return handle  # closing it (or dying) frees the name

def name_taken(mailbox, name):
    """Whether an agent of this name runs in the session, in any process: try its lock."""
    if not (mailbox.root / f"{check_name(name)}.alive").exists():  # never held: create nothing
        return False
    try:
        hold_name(mailbox, name).close()
    except ValueError:
        return True
    return False

def lead_session(wanted):
    """The mailbox of the lead session a worker joins: `wanted` by its id, or with * the newest."""
    root = WORKDIR / ".mailbox"
    if root.is_file():  # glob would find no session in it, and "start the lead" would mislead
        raise NotADirectoryError(f"{root} is a file, not the folder of lead sessions: move it away")
    sessions = [path for path in root.glob(wanted) if path.is_dir()]  # a stray file is no session
    if not sessions:
        raise LookupError(f"no lead session in {root}: start the lead first, or pass --session")
    return Mailbox(max(sessions, key=os.path.getmtime))


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
    *AUTONOMOUS_TOOLS,  # s11: team_spawn_autonomous
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read,  # s02: called with the call's input
                 "write_file": run_write, "edit_file": run_edit,  # s07: the task tools, on BOARD
                 **TASK_TOOL_HANDLERS, **TEAM_HANDLERS,  # s11: workers that find their own work
                 "team_spawn_autonomous": run_team_spawn_autonomous}

SLASH_COMMANDS = {"/tasks": show_tasks,  # s07: the board, for you
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
def repl(prompt="s11 >> "):  # s11: this step's prompt
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
    if "--worker" in sys.argv:  # s11: one autonomous teammate as its own process
        sys.exit(run_worker(sys.argv))
    if not client or sys.argv[1:]:  # no key, or --demo, --play, --trace run.html
        try:
            import offline  # the local stand-in, play mode and the trace recorder: only here
        except ImportError:
            raise SystemExit(  # copied alone, or run as python -m (agents/ not on sys.path)
                f"Set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN, or run python {__file__} "
                "with agents/offline/ beside it")
        sys.exit(offline.run(__file__, sys.argv))
    try:  # s11: quitting the lead must not strand its workers' tasks
        MAILBOX.root.mkdir(parents=True, exist_ok=True)  # the session --worker processes join
        repl()
    finally:
        stop_autonomous()


if __name__ == "__main__":
    main()
