#!/usr/bin/env python3
# /// script
# requires-python = ">=3.10"
# dependencies = ["anthropic>=0.83,<3", "python-dotenv>=0.10.1"]
# ///
"""s04_subagent.py - a fresh context for a side task.  Base: s02_tool_use.py - diff against it.

A question that needs twenty files read fills the context with all twenty, and every later
call of the session pays for them again. The tool `subagent` hands such a task to a child:
the same call_model, add_reply and run_calls on a fresh history that holds only the prompt.
When the child stops, its history is dropped; the parent gets one tool_result:

    parent: ... > subagent(description, prompt)
                      child: [prompt] -> call_model -> add_reply -> run_calls -> ... (<= 30 calls)
                      child: tools = the parent's minus subagent; usage added to COST_SUBAGENTS
    parent: ... < tool_result: the child's last text (<= 20,000 characters) + what it cost

Key insight: context is the parent's scarcest resource; a subagent spends a context of its
own and hands back only what the parent needs - the work is not free, so /cost shows both.

Read in this order: the s04 block (run_subagent, report, counted), then the marked line of
agent_loop. /cost prints what the parent and its subagents spent.
Run:  python agents/s04_subagent.py  [--demo: offline even with a key]  [--trace run.html]
"""

import json  # s02: tool inputs sent as text, previews, strings made sendable
import os
import re
import signal  # s02: bash is stopped whole, also by a Ctrl-C while it starts
import subprocess
import sys
import threading  # s02: bash's output is read as it comes
from collections import Counter  # s04: tokens and calls, summed per agent
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


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages):
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
        calls = add_reply(messages, counted(call_model(messages), COST_PARENT))  # s04: usage kept
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


# -- s04: a subagent: the same loop on a fresh history; only its report comes back ------
# The child runs call_model, add_reply and run_calls like agent_loop, with a system prompt and
# tools of its own. Its history lives in run_subagent alone and is dropped when it returns.
SUBAGENT_TURNS = 30  # model calls a child may make; then it is stopped with what it has
REPORT_LIMIT = 20_000  # characters of a child's report that reach the parent
SUBAGENT_SYSTEM = (f"You are a subagent working in {WORKDIR} on one task given by another "
                   "agent, who sees nothing of your work but your last message. Use the tools, "
                   "then report what you found in a few lines.")
USAGE = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
         "output_tokens")  # the usage fields of a reply; the first three are its context
COST_PARENT = Counter()  # this session's calls and tokens, for /cost
COST_SUBAGENTS = Counter()
RUNNING = []  # the description of the child at work: a child may not start another

def run_subagent(description: str, prompt: str) -> str:
    """Run a child on `prompt` alone; return its last text and what it cost, never its history."""
    if RUNNING:  # its tools lack subagent; a model may call it all the same
        raise ValueError("a subagent cannot start another; do the task with your own tools")
    print(f"[subagent: {description}]")
    messages = []
    add_user_text(messages, prompt)
    tools = [tool for tool in TOOLS if tool not in SUBAGENT_TOOLS]  # no nesting
    spent = Counter()
    RUNNING.append(description)
    try:
        for turn in range(1, SUBAGENT_TURNS + 1):
            reply = call_model(messages, SUBAGENT_SYSTEM, tools)
            calls = add_reply(messages, counted(reply, spent, COST_SUBAGENTS))
            if not calls:  # done; a reply that ended early, or came empty, says why
                note = STOP_NOTES.get(reply.stop_reason)
                if not note and messages[-1]["role"] != "assistant":  # nothing was stored
                    note = "its last reply was empty; above is the last text it wrote"
                return report(messages, spent, note)
            if turn == SUBAGENT_TURNS:  # no model would read what these calls return: not run
                break
            spent["tool calls"] += len(calls)
            run_calls(messages, calls)
        return report(messages, spent, f"stopped at the limit of {SUBAGENT_TURNS} model calls; "
                                       "above is the last text it wrote")
    except APIError as error:  # the child ends; the parent reads why and goes on
        raise RuntimeError(f"the subagent stopped, its work lost, after {cost_line(spent)}: "
                           f"{type(error).__name__}: {error}") from error
    finally:  # also on Ctrl-C: the parent's run_calls answers this call "interrupted"
        RUNNING.clear()

def report(messages: list, spent: Counter, note: str | None) -> str:
    """The child's last text, cut at REPORT_LIMIT, why it stopped early, what it cost: all the
    parent gets."""
    text = last_text(messages) or "(the subagent wrote no report)"
    if len(text) > REPORT_LIMIT:
        text = text[:REPORT_LIMIT] + (f"\n... [report cut at {REPORT_LIMIT:,} of "
                                      f"{len(text):,} characters]")
    print(f"[subagent done: {cost_line(spent)}]")
    ending = f"[{note}]\n" if note else ""
    return f"{text}\n{ending}[{cost_line(spent)}]"

def last_text(messages: list) -> str:
    """The text of the child's last message that has any."""
    for message in reversed(messages):
        text = "\n".join(b["text"] for b in message["content"] if b["type"] == "text")
        if message["role"] == "assistant" and text:
            return text
    return ""

def counted(reply, *ledgers: Counter):
    """The reply, its usage added to each ledger (null usage counts as 0)."""
    usage = {key: getattr(reply.usage, key, None) or 0 for key in USAGE}
    context = sum(usage[key] for key in USAGE[:3])  # everything the model read for this reply
    for ledger in ledgers:
        ledger.update(usage, calls=1)
        ledger["largest context"] = max(ledger["largest context"], context)
    return reply

def cost_line(spent: Counter) -> str:
    tools = f"{counted_as(spent['tool calls'], 'tool call')}, " if "tool calls" in spent else ""
    return (f"{counted_as(spent['calls'], 'model call')}, {tools}"
            f"input {spent['input_tokens']:,} tokens "
            f"(+ {spent['cache_read_input_tokens']:,} read from the cache, "
            f"{spent['cache_creation_input_tokens']:,} written to it), "
            f"output {spent['output_tokens']:,}")

def counted_as(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")  # 1 model call, 2 model calls

def show_cost(arg: str, history: list) -> None:
    """/cost: the tokens this session spent, by the parent and by its subagents"""
    for name, spent in (("parent", COST_PARENT), ("subagents", COST_SUBAGENTS)):
        print(f"{name}: {cost_line(spent)}; largest context {spent['largest context']:,} tokens")
    print(f"total: {cost_line(COST_PARENT + COST_SUBAGENTS)}")

SUBAGENT_TOOLS = [
    {"name": "subagent",
     "description": "Hand a side task to a subagent with a fresh context: it works with your "
                    "other tools and returns only a short report, so its reading does not fill "
                    "your context. It sees nothing but `prompt`.",
     "input_schema": {"type": "object", "properties": {
         "description": {"type": "string", "description": "a few words, shown to the user"},
         "prompt": {"type": "string", "description": "the whole task, with every detail "
                                                      "the subagent needs"}},
         "required": ["description", "prompt"]}},
]


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
    *SUBAGENT_TOOLS,  # s04: the one tool the child does not get
]

TOOL_HANDLERS = {"bash": run_bash, "read_file": run_read,  # s02: called with the call's input
                 "write_file": run_write, "edit_file": run_edit,  # s04: a child's task
                 "subagent": run_subagent}

SLASH_COMMANDS = {"/cost": show_cost}  # s04: what the parent and its subagents spent

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
def repl(prompt="s04 >> "):  # s04: this step's prompt
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
