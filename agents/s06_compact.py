#!/usr/bin/env python3
"""s06_compact.py - keep a long session inside the context window, without losing anything.

Every call sends the whole history again, so context grows with every tool result
until it is slow, expensive, and finally too big. Three layers keep it in check,
cheapest first, and a transcript on disk makes sure nothing is ever lost:

    every message --append--> .transcripts/<session>.jsonl   (full text, first)
                  |
    before each model call:
      1. micro   keep the last KEEP_RECENT tool results; older long ones become
                 "[cleared: read_file result, 5,214 chars; full text in ...]"
      2. auto    usage.input_tokens of the last reply >= COMPACT_THRESHOLD?
                 -> one summary request (no tools) -> history = [summary + pending turn]
      3. manual  the model calls `compact`, or you type /compact [focus]
    /tokens shows the context size, the threshold, and a bar per call.

Key insight: compaction may forget detail from the prompt, never from the record -
write the transcript first, then summarise at a turn boundary, and keep every
tool_use paired with its result.

Run:  python agents/s06_compact.py           (offline demo when no key is set)
      python agents/s06_compact.py --demo    (force the offline demo)
      COMPACT_THRESHOLD=20000 python agents/s06_compact.py   (compact sooner)
"""

import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
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
    " Old tool output may be cleared to save context; its full text stays in .transcripts/."  # s06: say where cleared output went
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


# -- s06: context compaction: a transcript on disk, then micro, auto, manual ----
# Every token of the history is sent (and paid for) again on every call, and the
# window is finite. Three layers, cheapest first: clear old tool output (micro),
# summarise when the real context size crosses a threshold (auto), summarise when
# the model or the user asks (manual). The rule above all: every message is on
# disk, in full, before any layer touches the history.

KEEP_RECENT = 3  # tool results kept verbatim, counted from the newest
CLEAR_MIN_CHARS = 200  # shorter results cost little; clearing them saves nothing
COMPACT_THRESHOLD = int(os.getenv("COMPACT_THRESHOLD") or 50_000)  # tokens of context
COMPACT_BACKOFF_CALLS = 3  # after a failed or useless compaction: model calls before auto tries again
SUMMARY_MAX_TOKENS = 2000
SUMMARY_CLIP = 4000  # characters per block sent to the summariser; the transcript keeps all
TRANSCRIPT_DIR = WORKDIR / ".transcripts"


def new_session_id() -> str:
    """Time for sorting, a random suffix so two runs in the same second never collide."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(4)


def content_blocks(message: dict) -> list:
    content = message["content"]
    return content if isinstance(content, list) else []


def block_count(message: dict) -> int:
    return len(message["content"]) if isinstance(message["content"], list) else 1


class Transcript:
    """The session on disk: one JSON line per message, full text, appended as it happens."""

    def __init__(self, folder: Path):
        self.path = folder / f"{new_session_id()}.jsonl"
        self.name = f"{folder.name}/{self.path.name}"  # how placeholders and summaries point here
        self.written: dict[int, tuple] = {}  # id(message) -> (message, blocks already written)

    def sync(self, messages: list) -> None:
        """Append what is new since the last sync. Call it before anything edits the history."""
        lines = []
        for message in messages:
            seen = self.written.get(id(message))
            if seen is None:
                lines.append(message)
            elif block_count(message) > seen[1]:  # add_user_text joined words to a recorded turn
                lines.append({"role": message["role"], "content": message["content"][seen[1]:]})
        if lines:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # created on first use
            with self.path.open("a", encoding="utf-8") as file:
                file.write("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        # Holding the messages themselves keeps their ids from being reused by new objects.
        self.written = {id(m): (m, block_count(m)) for m in messages}


TRANSCRIPT = Transcript(TRANSCRIPT_DIR)


def micro_compact(messages: list) -> int:
    """Clear old, long tool results in place (all but the newest KEEP_RECENT); return how many.

    Only a result's content changes. tool_use blocks, ids and the tool_result structure
    stay, so every call keeps its answer and the request stays valid.
    """
    names = {b["id"]: b["name"] for m in messages if m["role"] == "assistant"
             for b in content_blocks(m) if b["type"] == "tool_use"}
    results = [b for m in messages if m["role"] == "user"
               for b in content_blocks(m) if b["type"] == "tool_result"]
    cleared = 0
    for result in results[:max(len(results) - KEEP_RECENT, 0)]:
        text = result.get("content")
        if isinstance(text, str) and len(text) > CLEAR_MIN_CHARS:  # our tools answer in text
            name = names.get(result["tool_use_id"], "tool")
            result["content"] = f"[cleared: {name} result, {len(text):,} chars; full text in {TRANSCRIPT.name}]"
            cleared += 1
    return cleared


@dataclass
class ContextMeter:
    """What the harness knows about the size of its context."""
    last_input_tokens: int | None = None  # usage.input_tokens of the last reply: the API's own count
    calls: list = field(default_factory=list)  # (input_tokens, compacted just before) per model call
    compacted: bool = False  # a compaction happened since the last call
    skip_auto: int = 0  # model calls left before auto compaction may try again
    requested: str | None = None  # the focus the compact tool asked for; None = no request


METER = ContextMeter()


def estimate_tokens(messages: list) -> int:
    """No reply yet, so no real count: one token per 4 characters of the request's JSON.

    A rule of thumb for English and code (the offline stand-in counts exactly this way);
    the API's own count replaces it as soon as a reply arrives.
    """
    seen = [SYSTEM, messages, TOOLS]
    return math.ceil(len(json.dumps(seen, ensure_ascii=False, separators=(",", ":"))) / 4)


def context_tokens(messages: list) -> int:
    """The real size of the context if a reply told us, else the estimate."""
    return METER.last_input_tokens if METER.last_input_tokens is not None else estimate_tokens(messages)


def record_reply(messages: list, response) -> None:
    """After each reply: remember the API's count, and put the reply on disk."""
    METER.last_input_tokens = response.usage.input_tokens
    METER.calls.append((response.usage.input_tokens, METER.compacted))
    METER.compacted = False
    TRANSCRIPT.sync(messages)


def shorten(text: str) -> str:
    if len(text) <= SUMMARY_CLIP:
        return text
    return text[:SUMMARY_CLIP] + f" ...[{len(text) - SUMMARY_CLIP:,} more chars]"


def render_for_summary(messages: list) -> str:
    """The history as plain text. A request without tools may not carry tool_use or
    tool_result blocks, and plain text is what a summariser reads best anyway."""
    lines = []
    for message in messages:
        blocks = content_blocks(message) or [{"type": "text", "text": message["content"]}]
        for block in blocks:
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
    focus_line = f"Keep in particular detail: {focus}" if focus else ""
    prompt = SUMMARY_REQUEST.format(focus=focus_line, session=render_for_summary(messages))
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
        words = [{"type": "text", "text": words}] if isinstance(words, str) else list(words)
        return [{"role": "user", "content": [intro] + words}]
    return [{"role": "user", "content": [intro]}] + pending  # nothing pending, or calls + results


def compact(messages: list, reason: str, focus: str = "") -> bool:
    """Replace everything before the pending turn with one summary. True if it did.

    Only at a turn boundary (every tool_use answered). The new history is built aside and
    swapped in at the very end, so a failed summary leaves the history exactly as it was.
    """
    TRANSCRIPT.sync(messages)  # the safety net comes first
    if messages and messages[-1]["role"] == "assistant" and \
            any(b["type"] == "tool_use" for b in content_blocks(messages[-1])):
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
        print(f"[compact] WARNING: the summary failed, history unchanged ({type(error).__name__}: {error})")
        return False
    messages[:] = summary_history(summary, messages[start:], reason)
    TRANSCRIPT.sync(messages)  # the summary is part of the record too
    METER.last_input_tokens = None  # that count described the old history
    METER.compacted = True
    print(f"[compact] {reason}: {before:,} -> ~{estimate_tokens(messages):,} tokens; "
          f"full record in {TRANSCRIPT.name}")
    print("\n".join("  | " + line for line in summary.splitlines()))  # what the model goes on from
    return True


def prepare_context(messages: list) -> None:
    """Before every model call, cheapest layer first. Here every tool_use has its result."""
    TRANSCRIPT.sync(messages)  # first: nothing below may touch what is not on disk yet
    cleared = micro_compact(messages)
    if cleared:
        print(f"[micro] cleared {cleared} old tool result(s); full text in {TRANSCRIPT.name}")
    if METER.requested is not None:  # the model called compact during the last turn
        reason, focus, METER.requested = "requested by the model", METER.requested, None
    elif METER.skip_auto > 0:
        METER.skip_auto -= 1
        return
    elif context_tokens(messages) >= COMPACT_THRESHOLD:
        reason, focus = "automatic", ""
    else:
        return
    if not compact(messages, reason, focus) or context_tokens(messages) >= COMPACT_THRESHOLD:
        METER.skip_auto = COMPACT_BACKOFF_CALLS  # do not repeat a failing or useless summary


def run_compact(args: dict) -> str:
    METER.requested = args.get("focus") or ""
    return "Compaction scheduled: before your next call, the history up to here becomes a summary."


def compact_now(arg: str, history: list) -> None:
    """/compact [focus]: summarise now, between turns (Ctrl-C leaves the history as it was)."""
    if not compact(history, "requested by the user", arg):
        METER.skip_auto = COMPACT_BACKOFF_CALLS


def show_tokens(arg: str, history: list) -> None:
    """/tokens: the context size, the threshold, and one bar per model call so far."""
    source = "estimate" if METER.last_input_tokens is None else "usage.input_tokens of the last reply"
    print(f"context: {context_tokens(history):,} tokens ({source}); "
          f"auto compaction at {COMPACT_THRESHOLD:,} (the | column)")
    width = 40  # characters for COMPACT_THRESHOLD tokens
    for number, (tokens, compacted) in enumerate(METER.calls, 1):
        bar = "#" * min(max(round(tokens / COMPACT_THRESHOLD * width), 1), 2 * width)
        bar = bar.ljust(width)[:width] + "|" + bar[width:]
        print(f"  call {number:>3} {tokens:>9,} {bar}{'  <- compacted before this call' if compacted else ''}")


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
    COMPACT_TOOL,  # s06: the model can ask for a compaction
]

TOOL_HANDLERS = {
    "bash": lambda args: run_bash(args["command"]),
    "read_file": lambda args: run_read(args["path"], args.get("limit")),
    "write_file": lambda args: run_write(args["path"], args["content"]),
    "edit_file": lambda args: run_edit(args["path"], args["old_text"], args["new_text"]),
    "compact": run_compact,  # s06: compacts before the next call, once results are recorded
}

SLASH_COMMANDS = {"/compact": compact_now, "/tokens": show_tokens}  # s06: manual compaction, context size

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
        prepare_context(messages)  # s06: transcript, micro compaction, auto or requested compaction
        response = client.messages.create(
            model=MODEL, system=SYSTEM, messages=messages,
            tools=TOOLS, max_tokens=MAX_TOKENS,
        )
        messages.append({"role": "assistant",
                         "content": [block.model_dump(exclude_none=True) for block in response.content]})
        record_reply(messages, response)  # s06: the API's token count; the reply goes to the transcript
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
def repl(prompt: str = "s06 >> ") -> None:  # s06: this step's prompt
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
