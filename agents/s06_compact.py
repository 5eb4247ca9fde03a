#!/usr/bin/env python3
# /// script
# requires-python = ">=3.10"
# dependencies = ["anthropic>=0.83,<3", "python-dotenv>=0.10.1"]
# ///
"""s06_compact.py - keep a long session inside the context window, and the cache warm.
Base: s02_tool_use.py - diff against it.

Every call sends the whole history again: it grows with every tool result until it is
slow, expensive, and finally too big. Prompt caching makes the repeated part cheap - but
only while it stays byte-identical, so every edit of old history costs a cache write of
everything after it. Three layers keep the context small without fighting the cache,
and a transcript on disk makes sure nothing is ever lost:

    every message --append--> .transcripts/<session>.jsonl   (full text, first)
    before each model call:
      1. micro   old tool results the model has already read become placeholders -
                 in one batch, once CLEAR_BATCH_TOKENS can go (one cache write, not one per call)
      2. auto    the last reply's context >= COMPACT_THRESHOLD?  one summary request (no tools)
                 -> history = [summary + pending turn]; also once when the window is full
      3. manual  the model calls `compact`, or you type /compact [focus]
    /tokens: per call, tokens read from the cache, written to it, and not cached at all

Key insight: compaction may forget detail from the prompt, never from the record - write
the transcript first, edit old history rarely and in batches, and keep every tool_use
paired with its result.

Read in this order: prepare_context, micro_compact, compact; then Transcript and ContextMeter.
Run:  python agents/s06_compact.py  [--demo]  [--trace run.html]
      (COMPACT_THRESHOLD=20000 in the environment compacts sooner)
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
SYSTEM += (" Old tool output may be cleared to save context;"  # s06: says where cleared output is
           " its full text stays in .transcripts/.")


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages):
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    retried = False  # s06: a full window is compacted and retried, once per turn
    while True:
        prepare_context(messages)  # s06: the transcript, then at most one edit of old history
        reply = call_model(messages)
        record_usage(reply)  # the API's own count of the context, and what the cache did
        if reply.stop_reason == "model_context_window_exceeded" and not retried:
            retried = True  # once per turn: a second full window ends the turn
            if compact(messages, "the context window was full"):
                continue  # the cut-off reply is dropped; the summary takes its place
        calls = add_reply(messages, reply)
        TRANSCRIPT.sync(messages)  # the reply is on disk before anything may edit it
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


# -- s06: compaction that keeps the cache: a transcript, then micro, auto, manual ---
# Every token of the history is sent again on every call, and the window is finite. The
# cache makes the repeated part cheap, but only up to the first block that changed, so the
# layers edit old history rarely and in batches. The rule above all: every message is on
# disk, in full, before any layer touches the history.
import math
import secrets
import time
from dataclasses import dataclass, field

KEEP_RECENT = 3  # read results kept verbatim, counted from the newest
CLEAR_MIN_CHARS = 200  # shorter results cost little; clearing them saves nothing
CLEAR_BATCH_TOKENS = int(os.getenv("CLEAR_BATCH_TOKENS") or 10_000)  # micro's batch, in tokens
COMPACT_THRESHOLD = int(os.getenv("COMPACT_THRESHOLD") or 50_000)  # tokens of context
COMPACT_BACKOFF_CALLS = 3  # model calls auto waits after a failed or useless summary
SUMMARY_MAX_TOKENS = 2000
SUMMARY_CLIP = 4000  # characters per block sent to the summariser; the transcript keeps all
TRANSCRIPT_DIR = WORKDIR / ".transcripts"

class Transcript:
    """The session on disk: one JSON line per message, full text, appended as it happens."""

    def __init__(self, folder: Path):
        # a timestamp to sort by, and a random part: two sessions never share a file
        self.path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}.jsonl"
        self.name = f"{folder.name}/{self.path.name}"  # how placeholders and summaries point here
        # id(message) -> (message, blocks already written); holding it keeps the id unique
        self.written: dict[int, tuple] = {}
        self.problem: str | None = None  # why the last write failed; while set, no compaction

    def sync(self, messages: list) -> bool:
        """Append what is new since the last sync; False (said once) if the file cannot take it."""
        lines = []
        for message in messages:
            seen = self.written.get(id(message))
            if seen is None:
                lines.append(message)
            elif len(content_blocks(message)) > seen[1]:  # words joined to a recorded turn
                lines.append({"role": message["role"], "content": message["content"][seen[1]:]})
        try:
            if lines:
                self.path.parent.mkdir(parents=True, exist_ok=True)  # created on first use
                with self.path.open("a", encoding="utf-8") as file:
                    file.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        except OSError as error:  # a folder replaced by a file, no space, no permission...
            if self.problem is None:
                print(f"[transcript] cannot write {self.path}: {error}. "
                      "Nothing is compacted until it can be.")
            self.problem = str(error)
            return False
        self.problem = None
        self.written = {id(m): (m, len(content_blocks(m))) for m in messages}
        return True

TRANSCRIPT = Transcript(TRANSCRIPT_DIR)

def micro_compact(messages: list) -> int:
    """Clear old, long tool results in one batch, once that saves CLEAR_BATCH_TOKENS.

    Returns how many. Only results the model has read count: the newest user turn is never
    touched. Only a result's content changes, so every call keeps its answer and the request
    stays valid.
    """
    read = messages[:-1] if messages and messages[-1]["role"] == "user" else messages
    names = {call["id"]: call["name"] for call in blocks_of(read, "tool_use")}
    results = blocks_of(read, "tool_result")
    old = [result for result in results[:max(len(results) - KEEP_RECENT, 0)]
           if isinstance(result.get("content"), str) and len(result["content"]) > CLEAR_MIN_CHARS]
    if sum(len(result["content"]) for result in old) / 4 < CLEAR_BATCH_TOKENS:
        return 0  # not yet: an edit here turns every block after it into a cache write
    for result in old:
        name = names.get(result["tool_use_id"], "tool")
        size = len(result["content"])
        result["content"] = (f"[cleared: {name} result, {size:,} chars; "
                             f"full text in {TRANSCRIPT.name}]")
    return len(old)

@dataclass
class ContextMeter:
    """What the harness knows about the size of its context, and what the cache did with it."""
    last_tokens: int | None = None  # the last reply's whole context; None: estimate it
    calls: list = field(default_factory=list)  # per call: read, written, uncached, edit before
    edited: str = ""  # how the history was edited since the last call: "", "micro", "compacted"
    skip_auto: int = 0  # model calls left before auto compaction may try again
    requested: str | None = None  # the focus the compact tool asked for; None = no request

METER = ContextMeter()

def estimate_tokens(messages: list) -> int:
    """Before the first reply there is no real count: one token per 4 characters of JSON (a
    rule of thumb for English and code; the offline stand-in counts exactly this way)."""
    sent = json.dumps([SYSTEM, messages, TOOLS], ensure_ascii=False, separators=(",", ":"))
    return math.ceil(len(sent) / 4)

def context_tokens(messages: list) -> int:
    return METER.last_tokens if METER.last_tokens is not None else estimate_tokens(messages)

def record_usage(reply) -> None:
    """After each reply: the API's own count of the context, and what the cache did with it."""
    usage = reply.usage  # some compatible endpoints send null counts: no figure, not a crash
    read = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    uncached = usage.input_tokens  # input_tokens alone is only the uncached part
    METER.last_tokens = None if uncached is None else uncached + read + written  # None: estimate
    METER.calls.append((read, written, uncached or 0, METER.edited))
    METER.edited = ""

def render_for_summary(messages: list) -> str:
    """The history as plain text. A request without tools may not carry tool_use or
    tool_result blocks, and plain text is what a summariser reads best anyway."""
    lines = []
    for message in messages:
        for block in content_blocks(message):
            if block["type"] == "text":
                lines.append(f"[{message['role']}] {shorten(block['text'])}")
            elif block["type"] == "tool_use":
                arguments = json.dumps(block["input"], ensure_ascii=False)
                lines.append(f"[tool call] {block['name']} {shorten(arguments)}")
            elif block["type"] == "tool_result":
                error = " (error)" if block.get("is_error") else ""
                lines.append(f"[tool result{error}] {shorten(str(block.get('content', '')))}")
    return "\n".join(lines)

SUMMARY_SYSTEM = ("You summarise a coding agent's session so that the work can go on from the "
                  "summary alone.")
SUMMARY_REQUEST = """Summarise the session below. Keep names, paths and numbers. Cover:
1. the user's goals and explicit requests
2. what was done, and what came of it
3. files read, created or changed
4. decisions taken, and why
5. open items and unsolved errors
6. the next step
{focus}
<session>
{session}
</session>"""

def summarize(messages: list, focus: str = "") -> str:
    """One request with no tools, so the only possible answer is text."""
    prompt = SUMMARY_REQUEST.format(focus=f"Keep in particular detail: {focus}" if focus else "",
                                    session=render_for_summary(messages))
    response = client.messages.create(model=MODEL, system=SUMMARY_SYSTEM,
                                      max_tokens=SUMMARY_MAX_TOKENS,
                                      messages=[{"role": "user", "content": prompt}])
    summary = "".join(block.text for block in response.content if block.type == "text").strip()
    if not summary:
        raise ValueError("the summary came back empty")
    return summary

def pending_start(messages: list) -> int:
    """Where the part kept verbatim begins: the user turn not answered yet and, if it holds
    tool results, the assistant turn that made those calls (a result needs its call)."""
    if not messages or messages[-1]["role"] == "assistant":
        return len(messages)
    if blocks_of(messages[-1:], "tool_result"):
        return len(messages) - 2
    return len(messages) - 1

def summary_history(summary: str, pending: list, reason: str) -> list:
    """The new history: the summary first, then the pending turn, still a valid request."""
    text = (f"[This conversation was compacted ({reason}). The full record is in "
            f"{TRANSCRIPT.name}. Summary of everything before this point:]\n\n{summary}")
    intro = {"type": "text", "text": text}
    if len(pending) == 1:  # the user's new words join the summary, so roles still alternate
        return [{"role": "user", "content": [intro] + content_blocks(pending[0])}]
    return [{"role": "user", "content": [intro]}] + pending  # nothing pending, or calls + results

def compact(messages: list, reason: str, focus: str = "") -> bool:
    """Replace everything before the pending turn with one summary. True if it did.

    Only at a turn boundary (every tool_use answered), and only once the transcript holds it
    all. The new history is built aside and swapped in at the very end, so a failed summary
    leaves the history exactly as it was.
    """
    if not TRANSCRIPT.sync(messages):  # the safety net comes first: no record, no compaction
        print(f"[compact] not now: the transcript cannot be written ({TRANSCRIPT.problem})")
        return False
    if blocks_of(messages[-1:], "tool_use"):
        print("[compact] not now: a tool call is still waiting for its result")
        return False
    start = pending_start(messages)
    if start == 0:
        print("[compact] nothing to summarise yet")
        return False
    before = context_tokens(messages)
    try:
        summary = summarize(messages[:start], focus)
    except Exception as error:  # whatever went wrong, the history must survive it
        print("[compact] WARNING: the summary failed, history unchanged "
              f"({type(error).__name__}: {error})")
        return False
    messages[:] = summary_history(summary, messages[start:], reason)
    TRANSCRIPT.sync(messages)  # the summary is part of the record too
    METER.last_tokens = None  # that count described the old history
    METER.edited = "compacted"
    print(f"[compact] {reason}: {before:,} -> ~{estimate_tokens(messages):,} tokens; "
          f"record in {TRANSCRIPT.name}")
    print("\n".join("  | " + line for line in summary.splitlines()))  # what the model goes on from
    return True

def prepare_context(messages: list) -> None:
    """Before every model call: the transcript first, then at most one edit of old history."""
    if not TRANSCRIPT.sync(messages):  # nothing below may touch what is not on disk yet
        return
    if METER.requested is not None:  # the model called compact during the last turn
        reason = "requested by the model"
    elif context_tokens(messages) >= COMPACT_THRESHOLD and METER.skip_auto == 0:
        reason = "automatic"  # no micro first: the summary replaces it all, one write is enough
    else:
        METER.skip_auto = max(METER.skip_auto - 1, 0)
        if cleared := micro_compact(messages):
            METER.last_tokens = None  # that count described the history before the edit
            METER.edited = "micro"
            print(f"[micro] cleared {cleared} old tool results in one batch; "
                  f"full text in {TRANSCRIPT.name}")
        return
    focus = METER.requested or ""
    METER.requested = None
    if not compact(messages, reason, focus) or context_tokens(messages) >= COMPACT_THRESHOLD:
        METER.skip_auto = COMPACT_BACKOFF_CALLS  # do not repeat a failing or useless summary

def run_compact(focus: str = "") -> str:
    METER.requested = focus
    return "Compaction scheduled: before your next call, the history up to here becomes a summary."

def compact_now(arg: str, history: list) -> None:
    """/compact [focus]: summarise the history now (the full record stays in .transcripts/)"""
    if not compact(history, "requested by the user", arg):
        METER.skip_auto = COMPACT_BACKOFF_CALLS

def show_tokens(arg: str, history: list) -> None:
    """/tokens: the context size, and per call what the cache read, wrote, and did not cache"""
    source = "estimate" if METER.last_tokens is None else "the last reply's usage"
    print(f"context: {context_tokens(history):,} tokens ({source}); "
          f"auto compaction at {COMPACT_THRESHOLD:,} (the | column). "
          "Per call: read from the cache (x0.1) + written to it (x1.25) + not cached (x1)")
    width = 40  # characters for COMPACT_THRESHOLD tokens
    for number, (read, written, uncached, edited) in enumerate(METER.calls, 1):
        total = read + written + uncached
        bar = "#" * min(max(round(total / COMPACT_THRESHOLD * width), 1), 2 * width)
        bar = bar.ljust(width)[:width] + "|" + bar[width:]
        print(f"  call {number:>3} {read:>8,} + {written:>7,} + {uncached:>6,}  {bar}"
              + (f"  <- {edited} before this call" if edited else ""))

COMPACT_TOOL = {
    "name": "compact",
    "description": "Summarise the conversation so far to free context, once the current results "
                   "are in. Use it when old details are no longer needed; the full record stays "
                   "on disk.",
    "input_schema": {"type": "object", "properties": {
        "focus": {"type": "string", "description": "what the summary must keep in detail"}}},
}

# .. plumbing: the shapes of a message's content .....................................
def content_blocks(message: dict) -> list:
    """A message's content as blocks: a plain string is one text block."""
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content

def blocks_of(messages: list, kind: str) -> list:
    """Every block of one type in these messages: "tool_use" or "tool_result"."""
    return [block for message in messages for block in content_blocks(message)
            if block["type"] == kind]

def shorten(text: str) -> str:
    """At most SUMMARY_CLIP characters of a block for the summariser; it says what is left out."""
    cut = len(text) - SUMMARY_CLIP
    return text if cut <= 0 else f"{text[:SUMMARY_CLIP]} ...[{cut:,} more chars]"


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
    COMPACT_TOOL,  # s06: the model can ask for a compaction
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read,  # s02: called with the call's input
                 "write_file": run_write, "edit_file": run_edit,  # s06: compact only schedules
                 "compact": run_compact}

SLASH_COMMANDS = {"/compact": compact_now, "/tokens": show_tokens}  # s06: compaction, context size

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
def repl(prompt="s06 >> "):  # s06: this step's prompt
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
