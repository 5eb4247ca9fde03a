#!/usr/bin/env python3
"""s06_compact.py - keep a long session inside the context window, and the cache warm.
Base: s01_agent_loop.py - diff against it.

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
Run:  python agents/s06_compact.py  [--demo]  [--trace run.html]   (COMPACT_THRESHOLD=20000 compacts sooner)
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
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
# Credentials are passed explicitly, so the SDK never guesses; with none, main() runs the offline demo.
client = Anthropic(api_key=API_KEY, auth_token=AUTH_TOKEN, base_url=BASE_URL) if API_KEY or AUTH_TOKEN else None
SYSTEM = (f"You are a coding agent working in {WORKDIR}. "
          "Use the tools to inspect and change files; act, then report briefly.")
SYSTEM += " Old tool output may be cleared to save context; its full text stays in .transcripts/."  # s06: where


# -- Base tools -----------------------------------------------------------------
def safe_path(relative: str) -> Path:
    """Resolve a path inside WORKDIR; refuse anything that leaves it."""
    path = (WORKDIR / relative).resolve()  # resolve() follows symlinks too
    if not path.is_relative_to(WORKDIR.resolve()):
        raise ValueError(f"Path {relative!r} is outside the workspace {WORKDIR}")
    return path

def write_atomic(path: Path, text: str) -> None:
    """Write a temp file, then rename it over the target: a failure leaves the old file as it was."""
    if path.is_dir():  # the workspace itself, or a folder: refused before anything is written
        raise IsADirectoryError(f"{path.name or path} is a folder, not a file")
    mode = path.stat().st_mode if path.exists() else None  # a rewritten file keeps its mode
    if mode is not None and not mode & 0o222:  # nobody may write it: someone made it read-only on purpose
        raise PermissionError(f"{path.name} is read-only; it was left unchanged")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        with open(tmp, "xb") as file:  # a fresh file of our own; the umask sets a new file's mode
            file.write(text.encode("utf-8"))  # a string that cannot be stored fails here: the target is untouched
            file.flush()  # buffered: every byte is written or this raises (a full disk, a size limit)
            os.fsync(file.fileno())  # on disk before the rename, so a crash cannot leave an empty file
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)  # atomic: readers see the old file or the new one, never half of one
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

def run_bash(command: str) -> str:
    kept, total, done = bytearray(), [0], threading.Event()

    def drain() -> None:  # keep the first OUTPUT_LIMIT bytes, count the rest: memory stays bounded
        with process.stdout:  # closed at the end: a daemon still writing to it then gets SIGPIPE
            while not done.is_set() and (chunk := process.stdout.read1(65536)):
                kept.extend(chunk[:OUTPUT_LIMIT - len(kept)])
                total[0] += len(chunk)
    reader, timed_out = threading.Thread(target=drain, daemon=True), ""
    process = start_shell(command)
    try:
        reader.start()
        process.wait(timeout=BASH_TIMEOUT)
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as stop:  # neither may leave the command running
        kill_group(process)
        if isinstance(stop, KeyboardInterrupt):
            raise
        timed_out = f": killed after the {BASH_TIMEOUT}s timeout"
    reader.join(timeout=1)  # a daemon the command started may hold the pipe open forever: stop reading
    done.set()
    output = kept.decode("utf-8", "replace").strip() or "(no output)"
    if total[0] > OUTPUT_LIMIT:
        output += f"\n... [output truncated: {total[0] - OUTPUT_LIMIT:,} more bytes]"
    if reader.is_alive():
        output += "\n[stopped reading: a background process still holds the output open]"
    code = process.wait()
    return output + (f"\n[exit code {code}{timed_out}]" if code else "")  # after the cut, so it always survives

def start_shell(command: str) -> subprocess.Popen:
    """Popen with Ctrl-C held until it returns: an interrupt inside Popen would leave the command
    running with no handle to kill it by. Only the main thread ever receives Ctrl-C."""
    def popen() -> subprocess.Popen:
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

def kill_group(process: subprocess.Popen) -> None:
    """Kill the shell and everything it started."""
    if os.name == "posix":
        os.killpg(process.pid, signal.SIGKILL)
    else:
        process.kill()

def run_read(path: str, limit: int | None = None) -> str:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of lines, got {limit}")
    target = safe_path(path)
    if not target.is_file():  # a FIFO or a device would block or never end
        raise ValueError(f"{path} is not a regular file")
    with open(target, encoding="utf-8", newline="") as file:  # newline="": a \r\n is shown as it is
        text, cut = file.read(OUTPUT_LIMIT), file.read(1) != ""  # never read more than can be returned
    lines = text.splitlines(keepends=True)
    if limit is not None and limit < len(lines):
        return "".join(lines[:limit]) + f"... [{len(lines) - limit}{'+' if cut else ''} more lines]"
    return text + (f"\n... [output truncated at {OUTPUT_LIMIT:,} characters; use bash for the rest]" if cut else "")

def run_write(path: str, content: str) -> str:
    write_atomic(safe_path(path), content)
    return f"Wrote {len(content)} characters to {path}"

def run_edit(path: str, old_text: str, new_text: str) -> str:
    target = safe_path(path)
    text = target.read_bytes().decode("utf-8")  # bytes: a \r\n stays \r\n, as old_text must match it
    count = text.count(old_text) if old_text else 0
    if count == 0:
        raise ValueError(f"old_text not found in {path}; read the file and copy the text exactly")
    if count > 1:
        raise ValueError(f"old_text appears {count} times in {path}; include more context so it is unique")
    write_atomic(target, text.replace(old_text, new_text, 1))
    return f"Edited {path}"


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
CLEAR_BATCH_TOKENS = int(os.getenv("CLEAR_BATCH_TOKENS") or 10_000)  # micro waits until it can clear this much
COMPACT_THRESHOLD = int(os.getenv("COMPACT_THRESHOLD") or 50_000)  # tokens of context
COMPACT_BACKOFF_CALLS = 3  # after a failed or useless compaction: model calls before auto tries again
SUMMARY_MAX_TOKENS = 2000
SUMMARY_CLIP = 4000  # characters per block sent to the summariser; the transcript keeps all
TRANSCRIPT_DIR = WORKDIR / ".transcripts"

def content_blocks(message: dict) -> list:
    return message["content"] if isinstance(message["content"], list) else []

class Transcript:
    """The session on disk: one JSON line per message, full text, appended as it happens."""

    def __init__(self, folder: Path):
        self.path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}.jsonl"  # unique
        self.name = f"{folder.name}/{self.path.name}"  # how placeholders and summaries point here
        self.written: dict[int, tuple] = {}  # id(message) -> (message, blocks already written)
        self.problem: str | None = None  # why the last write failed; while set, nothing may be compacted

    def sync(self, messages: list) -> bool:
        """Append what is new since the last sync; False (said once) if the file cannot be written."""
        lines = []
        for message in messages:
            seen = self.written.get(id(message))
            if seen is None:
                lines.append(message)
            elif len(content_blocks(message)) > seen[1]:  # add_user_text joined words to a recorded turn
                lines.append({"role": message["role"], "content": message["content"][seen[1]:]})
        try:
            if lines:
                self.path.parent.mkdir(parents=True, exist_ok=True)  # created on first use
                with self.path.open("a", encoding="utf-8") as file:
                    file.write("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        except OSError as error:  # a folder replaced by a file, no space, no permission...
            if self.problem is None:
                print(f"[transcript] cannot write {self.path}: {error}. Nothing is compacted until it can be.")
            self.problem = str(error)
            return False
        self.problem = None
        self.written = {id(m): (m, len(content_blocks(m))) for m in messages}  # holding m keeps its id unique
        return True

TRANSCRIPT = Transcript(TRANSCRIPT_DIR)

def micro_compact(messages: list) -> int:
    """Clear old, long tool results in one batch, once that saves CLEAR_BATCH_TOKENS; return how many.

    Only results the model has read count: the newest user turn is never touched. Only a
    result's content changes, so every call keeps its answer and the request stays valid.
    """
    read = messages[:-1] if messages and messages[-1]["role"] == "user" else messages
    names = {b["id"]: b["name"] for m in read if m["role"] == "assistant" for b in content_blocks(m)
             if b["type"] == "tool_use"}
    results = [b for m in read if m["role"] == "user" for b in content_blocks(m) if b["type"] == "tool_result"]
    old = [r for r in results[:max(len(results) - KEEP_RECENT, 0)]
           if isinstance(r.get("content"), str) and len(r["content"]) > CLEAR_MIN_CHARS]
    if sum(len(r["content"]) for r in old) / 4 < CLEAR_BATCH_TOKENS:
        return 0  # not yet: an edit here turns every block after it into a cache write
    for result in old:
        name = names.get(result["tool_use_id"], "tool")
        size = len(result["content"])
        result["content"] = f"[cleared: {name} result, {size:,} chars; full text in {TRANSCRIPT.name}]"
    return len(old)

@dataclass
class ContextMeter:
    """What the harness knows about the size of its context, and what the cache did with it."""
    last_tokens: int | None = None  # the last reply's whole context: uncached + cache read + cache write
    calls: list = field(default_factory=list)  # (read, written, uncached, what edited it before) per call
    edited: str = ""  # how the history was edited since the last call: "", "micro" or "compacted"
    skip_auto: int = 0  # model calls left before auto compaction may try again
    requested: str | None = None  # the focus the compact tool asked for; None = no request
    retried: bool = False  # this turn already compacted once because the window was full

METER = ContextMeter()

def estimate_tokens(messages: list) -> int:
    """Before the first reply there is no real count: one token per 4 characters of JSON (a rule of
    thumb for English and code; the offline stand-in counts exactly this way)."""
    return math.ceil(len(json.dumps([SYSTEM, messages, TOOLS], ensure_ascii=False, separators=(",", ":"))) / 4)

def context_tokens(messages: list) -> int:
    return METER.last_tokens if METER.last_tokens is not None else estimate_tokens(messages)

def record_usage(reply) -> None:
    """After each reply: remember the API's own count of the context, and what the cache did with it."""
    usage = reply.usage  # some compatible endpoints send null counts: no figure, not a crash
    read = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    uncached = usage.input_tokens  # input_tokens alone is only the uncached part
    METER.last_tokens = None if uncached is None else uncached + read + written  # None: estimate
    METER.calls.append((read, written, uncached or 0, METER.edited))
    METER.edited = ""
    METER.retried = METER.retried and reply.stop_reason == "model_context_window_exceeded"  # once until one works

def shorten(text: str) -> str:
    cut = len(text) - SUMMARY_CLIP
    return text if cut <= 0 else f"{text[:SUMMARY_CLIP]} ...[{cut:,} more chars]"

def render_for_summary(messages: list) -> str:
    """The history as plain text. A request without tools may not carry tool_use or
    tool_result blocks, and plain text is what a summariser reads best anyway."""
    lines = []
    for message in messages:
        for block in content_blocks(message) or [{"type": "text", "text": message["content"]}]:
            if block["type"] == "text":
                lines.append(f"[{message['role']}] {shorten(block['text'])}")
            elif block["type"] == "tool_use":
                lines.append(f"[tool call] {block['name']} {shorten(json.dumps(block['input'], ensure_ascii=False))}")
            elif block["type"] == "tool_result":
                error = " (error)" if block.get("is_error") else ""
                lines.append(f"[tool result{error}] {shorten(str(block.get('content', '')))}")
    return "\n".join(lines)

SUMMARY_SYSTEM = "You summarise a coding agent's session so that the work can go on from the summary alone."
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
    response = client.messages.create(model=MODEL, system=SUMMARY_SYSTEM, max_tokens=SUMMARY_MAX_TOKENS,
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
    if any(b["type"] == "tool_result" for b in content_blocks(messages[-1])):
        return len(messages) - 2
    return len(messages) - 1

def summary_history(summary: str, pending: list, reason: str) -> list:
    """The new history: the summary first, then the pending turn, still a valid request."""
    intro = {"type": "text", "text": f"[This conversation was compacted ({reason}). The full record is "
                                     f"in {TRANSCRIPT.name}. Summary of everything before this point:]\n\n{summary}"}
    if len(pending) == 1:  # the user's new words join the summary, so roles still alternate
        words = pending[0]["content"]
        return [{"role": "user", "content": [intro] + ([{"type": "text", "text": words}] if isinstance(words, str)
                                                      else list(words))}]
    return [{"role": "user", "content": [intro]}] + pending  # nothing pending, or calls + results

def compact(messages: list, reason: str, focus: str = "") -> bool:
    """Replace everything before the pending turn with one summary. True if it did.

    Only at a turn boundary (every tool_use answered), and only once the transcript holds it all.
    The new history is built aside and swapped in at the very end, so a failed summary leaves
    the history exactly as it was.
    """
    if not TRANSCRIPT.sync(messages):  # the safety net comes first: no record, no compaction
        print(f"[compact] not now: the transcript cannot be written ({TRANSCRIPT.problem})")
        return False
    if messages and messages[-1]["role"] == "assistant" and \
            any(b["type"] == "tool_use" for b in content_blocks(messages[-1])):
        print("[compact] not now: a tool call is still waiting for its result")
        return False
    start, before = pending_start(messages), context_tokens(messages)
    if start == 0:
        print("[compact] nothing to summarise yet")
        return False
    try:
        summary = summarize(messages[:start], focus)
    except Exception as error:  # whatever went wrong, the history must survive it
        print(f"[compact] WARNING: the summary failed, history unchanged ({type(error).__name__}: {error})")
        return False
    messages[:] = summary_history(summary, messages[start:], reason)
    TRANSCRIPT.sync(messages)  # the summary is part of the record too
    METER.last_tokens, METER.edited = None, "compacted"  # that count described the old history
    print(f"[compact] {reason}: {before:,} -> ~{estimate_tokens(messages):,} tokens; record in {TRANSCRIPT.name}")
    print("\n".join("  | " + line for line in summary.splitlines()))  # what the model goes on from
    return True

def prepare_context(messages: list) -> None:
    """Before every model call: the transcript first, then at most one edit of old history."""
    if not TRANSCRIPT.sync(messages):  # nothing below may touch what is not on disk yet
        return
    if METER.requested is not None:  # the model called compact during the last turn
        reason, focus, METER.requested = "requested by the model", METER.requested, None
    elif context_tokens(messages) >= COMPACT_THRESHOLD and METER.skip_auto == 0:
        reason, focus = "automatic", ""  # the summary replaces it all: clearing first would be a wasted write
    else:
        METER.skip_auto = max(METER.skip_auto - 1, 0)
        if cleared := micro_compact(messages):
            METER.last_tokens, METER.edited = None, "micro"  # that count described the history before the edit
            print(f"[micro] cleared {cleared} old tool results in one batch; full text in {TRANSCRIPT.name}")
        return
    if not compact(messages, reason, focus) or context_tokens(messages) >= COMPACT_THRESHOLD:
        METER.skip_auto = COMPACT_BACKOFF_CALLS  # do not repeat a failing or useless summary

def compact_and_retry(messages: list) -> bool:
    """The reply said the window is full: compact and call again, once per turn."""
    if METER.retried:
        return False
    METER.retried = True
    return compact(messages, "the context window was full")

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
    print(f"context: {context_tokens(history):,} tokens ({source}); auto compaction at {COMPACT_THRESHOLD:,} "
          "(the | column). Per call: read from the cache (x0.1) + written to it (x1.25) + not cached (x1)")
    width = 40  # characters for COMPACT_THRESHOLD tokens
    for number, (read, written, uncached, edited) in enumerate(METER.calls, 1):
        total = read + written + uncached
        bar = "#" * min(max(round(total / COMPACT_THRESHOLD * width), 1), 2 * width)
        bar = bar.ljust(width)[:width] + "|" + bar[width:]
        print(f"  call {number:>3} {read:>8,} + {written:>7,} + {uncached:>6,}  {bar}"
              + (f"  <- {edited} before this call" if edited else ""))

COMPACT_TOOL = {
    "name": "compact",
    "description": "Summarise the conversation so far to free context, once the current results are "
                   "in. Use it when old details are no longer needed; the full record stays on disk.",
    "input_schema": {"type": "object", "properties": {
        "focus": {"type": "string", "description": "what the summary must keep in detail"}}},
}


# -- The tool table: what the model sees, and what runs ------------------------
TOOLS = [
    {"name": "bash", "description": "Run a shell command in the workspace.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"name": "read_file", "description": "Read a text file; limit = max lines.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                      "required": ["path"]}},
    {"name": "write_file", "description": "Create or overwrite a text file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                      "required": ["path", "content"]}},
    {"name": "edit_file", "description": "Replace one exact, unique piece of text in a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "old_text": {"type": "string"},
                      "new_text": {"type": "string"}}, "required": ["path", "old_text", "new_text"]}},
    COMPACT_TOOL,  # s06: the model can ask for a compaction
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read, "write_file": run_write,  # called with the call's input
                 "edit_file": run_edit, "compact": run_compact}  # s06: compacts before the next call

SLASH_COMMANDS = {"/compact": compact_now, "/tokens": show_tokens}  # s06: manual compaction, context size

JSON_TYPES = {"string": [str], "integer": [int], "boolean": [bool], "array": [list], "object": [dict]}  # exact

def check_args(name: str, args: dict) -> None:
    """Check arguments against the tool's schema; say what is wrong and what is allowed."""
    schema = next(tool["input_schema"] for tool in TOOLS if tool["name"] == name)
    allowed, missing = schema.get("properties", {}), [k for k in schema.get("required", []) if k not in args]
    if missing:
        raise ValueError(f"missing required argument(s) {missing}; {name} takes {sorted(allowed)}")
    for key, value in args.items():
        if key not in allowed:
            raise ValueError(f"unknown argument {key!r}; {name} takes {sorted(allowed)}")
        expected = allowed[key].get("type")
        if expected in JSON_TYPES and type(value) not in JSON_TYPES[expected]:
            raise ValueError(f"argument {key!r} must be of type {expected}, got {type(value).__name__}")

def run_tool(call: dict, malformed: str | None = None) -> dict:
    """Run one tool call as stored in the history; always return exactly one tool_result."""
    result = {"type": "tool_result", "tool_use_id": call["id"]}
    try:
        if malformed:  # found by repair_call: the call is answered, not run
            raise ValueError(malformed)
        if call["name"] not in TOOL_HANDLERS:
            raise ValueError(f"Unknown tool {call['name']!r}. Available: {sorted(TOOL_HANDLERS)}")
        check_args(call["name"], call["input"])
        output = TOOL_HANDLERS[call["name"]](**call["input"])  # the schema's names are its parameters
        result["content"] = output or "(no output)"
    except Exception as error:  # any failure becomes a result the model can read, never an empty one
        result.update(is_error=True, content=f"Error: {str(error) or type(error).__name__}")
    return result

def preview(value, width: int = 200) -> str:
    flat = " ".join((value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)).split())
    return flat if len(flat) <= width else flat[:width] + "..."


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages: list) -> None:
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
        prepare_context(messages)  # s06: transcript, micro compaction, auto or requested compaction
        reply = call_model(messages)
        record_usage(reply)  # s06: the API's own count of the context, and what the cache did
        if reply.stop_reason == "model_context_window_exceeded" and compact_and_retry(messages):  # s06: once
            continue  # s06: the cut-off reply is dropped; the summary takes its place
        calls = add_reply(messages, reply)
        TRANSCRIPT.sync(messages)  # s06: the reply is on disk before anything may edit it
        if not calls:  # decided by what the reply holds, not by its stop_reason
            return
        run_calls(messages, calls)

def run_calls(messages: list, calls: list) -> None:
    """Answer every call in one user turn; on Ctrl-C the finished ones keep their results."""
    results = []
    try:
        for call, malformed in calls:
            results.append(run_tool(call, malformed))
            print(f"  {'ERROR ' if results[-1].get('is_error') else ''}{preview(results[-1]['content'])}")
    finally:  # only the calls that did not run are "interrupted"
        messages.append({"role": "user", "content": results + [
            {"type": "tool_result", "tool_use_id": call["id"], "content": "interrupted by the user",
             "is_error": True} for call, _ in calls[len(results):]]})

def call_model(messages: list, system: str = SYSTEM, tools: list = TOOLS, model: str = MODEL, echo: bool = True):
    """One streamed call: text is shown as it arrives, each tool call once its block is complete."""
    try:
        with client.messages.stream(model=model, system=system, messages=messages, tools=tools,
                                    max_tokens=MAX_TOKENS, cache_control={"type": "ephemeral"}) as stream:
            for event in stream if echo else ():
                if event.type == "text":
                    print(event.text, end="", flush=True)
                elif event.type == "content_block_stop":  # a text block ends its line; a tool call shows whole
                    block = event.content_block
                    if block.type == "tool_use":
                        print(f"> {getattr(block, 'name', None)}: {preview(block.input, 120)}")
                    else:
                        print()
            return stream.get_final_message()
    except Exception as error:  # a stream cut short, or a 200 that is no reply (a broken "compatible" endpoint)
        raise error if isinstance(error, APIError) else APIError(f"not a valid reply: {error!r}", None, body=None)

STOP_NOTES = {  # the documented stop reasons that end a turn early, as the REPL says them
    "max_tokens": f"cut off at max_tokens ({MAX_TOKENS}); an unfinished tool call was not run",
    "model_context_window_exceeded": "cut off: the context window is full",
    "refusal": "the model declined this request (refusal); rephrase it rather than repeat it",
    "pause_turn": "the API paused this turn (pause_turn); send a message to let it go on",
    "empty": "the model sent an empty reply; tell it how to go on",
}

CUT_OFF = ("max_tokens", "model_context_window_exceeded")  # a tool call may be unfinished: not run

def add_reply(messages: list, reply, say=print) -> list:
    """The one door into a history: store a repaired copy of the reply, say why a turn ended
    early, and return the tool calls to run as (call, malformed) pairs."""
    content, repairs = repair_reply(reply.content, messages)
    if repairs:
        say(f"[repaired the reply: {'; '.join(repairs)}]")
    if reply.stop_reason == "refusal" or not content:  # stored, either would poison every request
        note = STOP_NOTES["refusal" if reply.stop_reason == "refusal" else "empty"]
        if reply.stop_reason == "refusal":
            close_turn(messages, note)  # the refused request is marked, so it is not redone
        say(f"[{note}]")
        return []
    messages.append({"role": "assistant", "content": [block for block, _ in content]})
    if note := STOP_NOTES.get(reply.stop_reason):
        say(f"[{note}]")
    if reply.stop_reason in CUT_OFF:
        close_turn(messages, note)  # a call cut off mid-input is answered, never run
        return []
    return [(block, malformed) for block, malformed in content if block["type"] == "tool_use"]

def repair_reply(blocks: list, messages: list) -> tuple[list, list]:
    """What real endpoints send, made valid: ([(block, malformed or None)], what was repaired)."""
    taken = {b["id"] for m in messages if m["role"] == "assistant" for b in m["content"]
             if isinstance(b, dict) and b.get("type") == "tool_use"}
    content, repairs = [], []
    for block in blocks:
        if block.type == "text" and block.text.strip():
            content.append(({"type": "text", "text": sendable(block.text)}, None))
        elif block.type == "tool_use":
            content.append(repair_call(block, taken, repairs))
        elif block.type == "text":
            repairs.append("dropped an empty text block")
        else:
            repairs.append(f"left out a {block.type!r} block (a type this harness does not know)")
    return content, repairs

def repair_call(block, taken: set, repairs: list) -> tuple[dict, str | None]:
    """A valid tool_use for the history, and why it must not run (None when it may)."""
    call_id = unique_id(getattr(block, "id", None), taken)
    if call_id != getattr(block, "id", None):
        repairs.append(f"tool id {getattr(block, 'id', None)!r} -> {call_id!r}")
    name, args = getattr(block, "name", None), getattr(block, "input", None)
    if isinstance(args, str) and args.strip().startswith("{"):  # some endpoints send the JSON as text
        try:
            args = json.loads(args)
            repairs.append(f"parsed the input of {call_id} from a string")
        except ValueError:
            pass
    malformed = None
    if not isinstance(name, str) or not name or not isinstance(args, dict):
        malformed = (f"malformed call, not run: a tool call needs a name and an object input; "
                     f"received name={name!r}, input={preview(args, 100)}")
        repairs.append(f"malformed call {call_id} answered with an error")
    call = {"type": "tool_use", "id": call_id, "name": sendable(name) if isinstance(name, str) and name
            else "missing_name", "input": sendable(args) if malformed is None else {}}
    return call, malformed

def unique_id(raw, taken: set) -> str:
    """An id the API accepts (^[a-zA-Z0-9_-]+$), unique in the history: the first keeps its id."""
    base = re.sub(r"[^a-zA-Z0-9_-]", "_", raw if isinstance(raw, str) else "") or "call"
    call_id = base
    suffix = 1
    while call_id in taken:
        suffix += 1
        call_id = f"{base}_{suffix}"
    taken.add(call_id)
    return call_id

def sendable(value):
    """The value with lone surrogates replaced by "?": valid JSON in Python, not valid UTF-8 to send."""
    return json.loads(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))

def close_turn(messages: list, reason: str) -> None:
    """After anything: answer every open tool_use; mark a request that got no reply, so it is not redone."""
    last = messages[-1] if messages else {"role": None, "content": []}
    open_ids = [b["id"] for b in last["content"] if last["role"] == "assistant" and b["type"] == "tool_use"]
    if open_ids:
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": i, "content": reason, "is_error": True} for i in open_ids]})
    elif last["role"] == "user":
        add_user_text(messages, f"[not answered: {reason}]")

def add_user_text(messages: list, text: str) -> None:
    """Append the user's words; join them to a trailing user turn so roles keep alternating."""
    if not messages or messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": []})
    elif isinstance(messages[-1]["content"], str):
        messages[-1]["content"] = [{"type": "text", "text": messages[-1]["content"]}]
    messages[-1]["content"].append({"type": "text", "text": text})

def run_slash_command(line: str, history: list) -> None:
    name, _, arg = line.partition(" ")
    if name in SLASH_COMMANDS:
        return SLASH_COMMANDS[name](arg.strip(), history)
    print(("" if name == "/help" else f"Unknown command {name}. ") + "Commands: /help, q or exit (quit)",
          *("  " + command.__doc__.splitlines()[0] for command in dict.fromkeys(SLASH_COMMANDS.values())), sep="\n")


# -- The REPL ---------------------------------------------------------------------
def repl(prompt: str = "s06 >> ") -> None:  # s06: this step's prompt
    history: list = []
    while True:
        try:
            query = input(prompt).strip()
        except (EOFError, KeyboardInterrupt):  # Ctrl-D, or Ctrl-C at the prompt: quit
            print()
            return
        if query.lower() in ("q", "exit"):
            return
        try:
            if query.startswith("/"):
                run_slash_command(query, history)
            elif query:  # an empty line does nothing
                add_user_text(history, query)
                agent_loop(history)
        except (KeyboardInterrupt, APIError) as error:  # the turn ends; the conversation stays valid
            reason = "interrupted by the user" if isinstance(error, KeyboardInterrupt) else \
                f"API error: {type(error).__name__}: {getattr(error, 'message', error)}"
            close_turn(history, reason)
            print(f"\n[{reason}]")
        print()

def main() -> None:
    sys.stdout.reconfigure(errors="backslashreplace")  # print any string the API can send, lone surrogates too
    if "--demo" in sys.argv or "--trace" in sys.argv or not (API_KEY or AUTH_TOKEN):
        try:
            import offline  # the local stand-in and the trace recorder, needed only here
        except ImportError:
            sys.exit("No ANTHROPIC_API_KEY set, and agents/offline.py (the offline demo) is not next to this script.")
        sys.exit(offline.run(__file__, sys.argv))
    repl()


if __name__ == "__main__":
    main()
