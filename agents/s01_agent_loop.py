#!/usr/bin/env python3
"""s01_agent_loop.py - the minimal agent loop.  Base: none; this is the spine every step extends.

    user prompt --> +-------+  tool_use     +-----------+   every tool_use gets exactly
                    | model | ------------> | run tools |   one tool_result, errors too
                    |       | <------------ | (harness) |
                    +-------+  tool_result  +-----------+
                        | stop_reason != "tool_use": a final answer - or a cut-off, a
                        v  refusal, an empty reply; each leaves a valid history

Replies stream (text shows as it is written); each request is cached up to its last block.
Key insight: the loop is trivial; the harness's job is to keep the conversation valid
and the workspace safe, whatever the model, the user or the network does.

Read in this order: agent_loop; call_model and add_reply (one call, every reply shape);
run_tool; close_turn (a valid history after anything); then the tools at the top.
Run:  python agents/s01_agent_loop.py  [--demo: the offline demo even with a key]  [--trace run.html]
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
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read, "write_file": run_write,  # called with the call's input
                 "edit_file": run_edit}

SLASH_COMMANDS = {}  # "/name" -> fn(arg, history), its docstring the /help line; later steps add theirs

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
        calls = add_reply(messages, call_model(messages))
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
def repl(prompt: str = "s01 >> ") -> None:
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
