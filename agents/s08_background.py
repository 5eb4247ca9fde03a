#!/usr/bin/env python3
# /// script
# requires-python = ">=3.10"
# dependencies = ["anthropic>=0.83,<3", "python-dotenv>=0.10.1"]
# ///
"""s08_background.py - slow commands run in the background while the agent keeps working.
Base: s02_tool_use.py - diff against it.

In s02 a slow command (a test suite, a build, a download) blocks the whole loop until it ends
or times out. Here background_run starts it in a process group of its own and returns at once
with a job id; the job writes its output to a file under .background/, and a thread per job
puts the finished job on a queue. Before each model call the loop hands every waiting result
to the model inside the newest user turn, labelled as the harness's:

    model: background_run("python slow_check.py") -> "Started job j1" (returns at once)
    model: edit_file(...) ... the check runs meanwhile ...      thread: j1 ended -> FINISHED
    next request, newest user turn:  tool_result("Edited notes.md"
                                       + <background-results> j1: exit code 0 ...)
    at the REPL's prompt: "[background] job j1 ended" at once; quitting stops what still runs

Key insight: a background result is a message from the harness, so it rides in the turn that
goes next anyway - inside the last tool_result, or beside the user's words - once, and never
as a second user message or an invented assistant turn.

Read in this order: run_background and watch; deliver_results (where a result goes, and why);
then stop_job, read_line, tell and the marked lines of agent_loop and repl.
Run:  python agents/s08_background.py  [--demo: offline even with a key]  [--trace run.html]
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
SYSTEM += (" Start slow commands (test suites, builds) with background_run"  # s08: say who talks
           " and go on working; their results arrive later inside <background-results>,"
           " written by the harness, not by the user.")


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages):
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
        deliver_results(messages)  # s08: finished jobs' results join the newest user turn
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
def start_shell(command, output=subprocess.PIPE):  # s08: a background job writes to its file
    """Popen with Ctrl-C held until it returns: an interrupt inside Popen would leave the
    command running with no handle to kill it by. Only the main thread receives Ctrl-C."""
    def popen():
        return subprocess.Popen(command, shell=True, cwd=WORKDIR, stdin=subprocess.DEVNULL,
                                stdout=output, stderr=subprocess.STDOUT,  # s08: or a file
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


# -- s08: background jobs, and their results delivered at the next call --------------------
# A job is a shell command in a process group of its own, its output in a file. One thread per
# job waits for it (killing it whole at JOB_TIMEOUT) and puts it on FINISHED; agent_loop hands
# every waiting result to the model before its next call. Only the main thread changes JOBS.
import contextlib
import queue
import time
from dataclasses import dataclass

MAX_JOBS = 4  # running at once
JOB_TIMEOUT = 30 * 60  # seconds; far above BASH_TIMEOUT - slow commands are what jobs are for
TAIL_LINES = 20  # the last lines of output a result carries
TAIL_BYTES = 4000  # read from the end of the file at most: a huge output stays in its file

@dataclass
class Job:
    id: str
    command: str
    process: subprocess.Popen
    log: str  # the output file, relative to the workspace
    started: float
    ended: float | None = None
    note: str = ""  # why it ended early: the timeout, background_stop, the REPL quitting
    stopped: bool = False  # stopped on purpose: that result is told then, never delivered later
    told: bool = False  # the learner has seen its one line

JOBS: dict[str, Job] = {}
FINISHED = queue.Queue()  # jobs that ended whose results the model has not been given yet
AT_PROMPT = threading.Event()  # set while the REPL waits for the user's line
TOLD = threading.Lock()  # one line per job, whichever thread says it first

def run_background(command: str) -> str:
    running = [job.id for job in JOBS.values() if job.process.returncode is None]
    if len(running) >= MAX_JOBS:
        raise ValueError(f"{MAX_JOBS} jobs are already running ({', '.join(running)}), the "
                         "most allowed; wait for one to end, or stop one with background_stop")
    job_id = f"j{len(JOBS) + 1}"
    folder = safe_path(".background")  # a .background that links out of the workspace: refused
    folder.mkdir(exist_ok=True)
    name = f"{job_id}-{os.getpid()}.log"  # the pid keeps two sessions in one workspace apart
    with open(folder / name, "wb") as output:  # the shell holds its own handle to it
        process = start_shell(command, output)
    job = Job(job_id, command, process, f".background/{name}", time.monotonic())
    JOBS[job_id] = job
    threading.Thread(target=watch, args=(job,), daemon=True).start()
    return (f"Started job {job_id} ({command}); its output goes to {job.log}, its result comes "
            "to you when it ends. Go on with other work.")

def watch(job: Job) -> None:
    """The job's own thread: wait for it, kill it whole at the timeout, queue its result."""
    try:
        job.process.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_job(job, f"killed after the {JOB_TIMEOUT}s timeout")
    job.ended = time.monotonic()
    FINISHED.put(job)
    if AT_PROMPT.is_set():  # nobody else would say it until the user types
        tell(job)

def deliver_results(messages: list) -> None:
    """Put every waiting result into the newest user turn, once; it stays in the history.

    Inside the last tool_result, after its content, when the turn answers tool calls: a text
    block right after tool results teaches a model to end its turns with an empty reply (see
    s03's reminder). In a turn the user typed, a text block of its own beside their words."""
    jobs = []
    while not FINISHED.empty():
        jobs.append(FINISHED.get())
    texts = [report(job) for job in jobs if not job.stopped]  # a stop's result told it already
    if not texts:
        return
    note = ("<background-results>\nFrom the harness, not the user: background jobs that "
            "ended.\n" + "\n\n".join(texts) + "\n</background-results>")
    for job in jobs:
        job.told = True
    print(f"[harness] to the model, in the newest user turn:\n{note}")
    content = messages[-1]["content"]  # a list of blocks, or the user's words as one string
    if isinstance(content, list) and content[-1]["type"] == "tool_result":
        inner = content[-1].get("content") or "(no output)"
        inner = [{"type": "text", "text": inner}] if isinstance(inner, str) else list(inner)
        content[-1]["content"] = inner + [{"type": "text", "text": note}]
    else:  # add_user_text turns a plain string into a block first
        add_user_text(messages, note)

def report(job: Job, lines: int = TAIL_LINES) -> str:
    """What the model learns about a job: its state, its file, its last lines."""
    seconds = (job.ended or time.monotonic()) - job.started
    code = job.process.returncode
    state = f"running for {seconds:.1f}s" if code is None else \
        f"exit code {code} after {seconds:.1f}s"
    note = f" ({job.note})" if job.note else ""
    return f"job {job.id} `{job.command}`: {state}{note}; output in {job.log}\n{tail(job, lines)}"

def tail(job: Job, lines: int) -> str:
    """The last lines of the job's output file; says when earlier ones were left out."""
    try:
        with open(WORKDIR / job.log, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - TAIL_BYTES))
            kept = file.read().decode("utf-8", "replace").splitlines()
    except OSError as error:  # removed, say, by the model's own rm
        return f"[its output file cannot be read: {error}]"
    if size > TAIL_BYTES or len(kept) > lines:
        return f"[earlier lines left out; all of them are in {job.log}]\n" + \
            "\n".join(kept[-lines:])
    return "\n".join(kept) or "(no output)"

def find_job(job_id: str) -> Job:
    if job_id not in JOBS:
        raise ValueError(f"unknown job {job_id!r}; jobs: {', '.join(JOBS) or 'none yet'}")
    return JOBS[job_id]

def run_background_check(job_id: str = "") -> str:
    if job_id:
        return report(find_job(job_id))
    return "\n\n".join(report(job, 3) for job in JOBS.values()) or "No background jobs yet."

def run_background_stop(job_id: str) -> str:
    job = find_job(job_id)
    stop_job(job, "stopped by background_stop")
    return report(job)

def stop_job(job: Job, why: str) -> None:
    job.stopped = True  # first: its thread must not deliver what this already tells
    kill_job(job, why)

def stop_running_jobs() -> None:
    """On quit: no job outlives the REPL, and each one stopped is named."""
    for job in JOBS.values():
        if job.process.returncode is None:
            stop_job(job, "stopped: the REPL quit")
            print(f"[stopped job {job.id}: {job.command}]")

def read_line(prompt: str) -> str:
    """input(), with jobs that ended since the last prompt told first, later ones at once."""
    AT_PROMPT.set()
    try:
        for job in list(JOBS.values()):
            if job.ended:
                tell(job)
        return input(prompt)
    finally:
        AT_PROMPT.clear()

def tell(job: Job) -> None:
    with TOLD:
        if job.told or job.stopped:
            return
        job.told = True
    print(f"\n[background] job {job.id} ended (exit code {job.process.returncode}); its result "
          "goes to the model with your next message", flush=True)

BACKGROUND_TOOLS = [
    {"name": "background_run",
     "description": "Start a slow shell command in the background and return at once with a "
                    "job id; its result comes to you when it ends.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                      "required": ["command"]}},
    {"name": "background_check",
     "description": "State and last output lines of one job, or of every job without job_id.",
     "input_schema": {"type": "object", "properties": {"job_id": {"type": "string"}}}},
    {"name": "background_stop", "description": "Stop a job and everything it started.",
     "input_schema": {"type": "object", "properties": {"job_id": {"type": "string"}},
                      "required": ["job_id"]}},
]


# .. plumbing: stopping a job ...................................................................
def kill_job(job: Job, why: str) -> None:
    """Kill the job's whole process group unless it has ended; wait, so it is reaped."""
    if job.process.returncode is None:
        job.note = why
        with contextlib.suppress(ProcessLookupError):  # it ended a moment ago
            kill_group(job.process)
    job.process.wait()


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
    *BACKGROUND_TOOLS,  # s08: background_run, background_check, background_stop
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read,  # s02: called with the call's input
                 "write_file": run_write, "edit_file": run_edit,  # s08: the job tools
                 "background_run": run_background, "background_check": run_background_check,
                 "background_stop": run_background_stop}

SLASH_COMMANDS = {}  # "/name" -> fn(arg, history); its docstring is the /help line

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
def repl(prompt="s08 >> "):  # s08: this step's prompt
    history = []
    while True:
        try:
            query = read_line(prompt).strip()  # s08: a job that ends meanwhile says so
        except (EOFError, KeyboardInterrupt):  # Ctrl-D, or Ctrl-C at the prompt: quit
            print()
            return stop_running_jobs()  # s08: quitting stops the jobs still running
        if query.lower() in ("q", "exit"):
            return stop_running_jobs()  # s08: so does q
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
