#!/usr/bin/env python3
# /// script
# requires-python = ">=3.10"
# dependencies = ["anthropic>=0.83,<3", "python-dotenv>=0.10.1"]
# ///
"""s01_agent_loop.py - the minimal correct agent loop.  Base: none; every step extends this.

    user prompt --> +-------+  tool_use     +-----------+   every tool_use gets exactly
                    | model | ------------> | run tools |   one tool_result, errors too
                    |       | <------------ | (harness) |
                    +-------+  tool_result  +-----------+
                        | no tool call in the stored reply: the turn is over
                        v  (what the reply holds decides, not its stop_reason)

Key insight: the loop is a few lines; the harness's real job is to keep the conversation
valid, whatever the model, the endpoint or the user does.

Read in this order: agent_loop; add_reply and repair_reply (every reply enters the history
through them, repaired); run_tool (every failure becomes a result); close_turn; the REPL.
Run:  python agents/s01_agent_loop.py  [--demo: offline even with a key]  [--trace run.html]
"""

import os
import re
import subprocess
import sys

try:  # input() gets line editing where readline exists (not on Windows): arrow keys, history
    import readline  # noqa: F401  (imported for that effect alone)
except ImportError:
    pass

from anthropic import Anthropic
from dotenv import load_dotenv

# -- Configuration ------------------------------------------------------------
load_dotenv(".env")  # the current folder's .env; shell variables win
MODEL = os.getenv("MODEL_ID") or "claude-sonnet-5-5"
API_KEY = os.getenv("ANTHROPIC_API_KEY") or None
AUTH_TOKEN = os.getenv("ANTHROPIC_AUTH_TOKEN") or None
BASH_TIMEOUT = 60  # seconds
OUTPUT_LIMIT = 50_000  # characters of tool output sent back to the model
# Passed explicitly, so an empty variable means none; the SDK reads ANTHROPIC_BASE_URL itself.
client = Anthropic(api_key=API_KEY, auth_token=AUTH_TOKEN) if API_KEY or AUTH_TOKEN else None


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages):
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
        calls = add_reply(messages, call_model(messages))
        if not calls:  # decided by what the stored reply holds, not by its stop_reason
            return
        # every answer in one user turn; a Ctrl-C appends none of them, and close_turn answers them
        results = [run_tool(*call) for call in calls]
        for result in results:  # the first lines of each output, indented under its call
            print("\n".join(f"  {line[:200]}" for line in result["content"].splitlines()[:4]))
        messages.append({"role": "user", "content": results})

def call_model(messages):
    """One call; the reply is shown, then stored by add_reply."""
    reply = client.messages.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=8000)
    for block in reply.content:
        print(getattr(block, "text", None) or f"> {getattr(block, 'input', block)}")
    return reply

def add_reply(messages, reply, say=print):
    """The one door into a history: store a repaired copy of the reply and return its tool
    calls as (call, why it must not run) pairs."""
    content, calls, repairs = repair_reply(reply.content, messages)
    if repairs:
        say(f"[repaired the reply: {'; '.join(repairs)}]")
    if not content:  # stored, an empty message would make every later request invalid
        say("[the model sent an empty reply; tell it how to go on]")
        return []
    messages.append({"role": "assistant", "content": content})
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
            content.append({"type": "text", "text": block.text})
        elif block.type == "text":  # the API refuses whitespace-only text
            repairs.append("dropped an empty text block")
        else:  # sent back, a type this harness does not know may be refused
            repairs.append(f"left out a {block.type!r} block (a type this harness does not know)")
    return content, calls, repairs

def repair_call(block, taken, repairs):
    """A valid tool_use for the history, and why it must not run (None when it may)."""
    call_id = unique_id(block.get("id"), taken, repairs)
    name = block.get("name")
    args = block.get("input")
    call = {"type": "tool_use", "id": call_id, "name": name, "input": args}
    if isinstance(name, str) and name and isinstance(args, dict):
        return call, None
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

def add_user_text(messages, text):
    """Append the user's words; join them to a trailing user turn so roles keep alternating."""
    if not messages or messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": []})
    if isinstance(messages[-1]["content"], str):  # the SDK's examples start with a plain string
        messages[-1]["content"] = [{"type": "text", "text": messages[-1]["content"]}]
    messages[-1]["content"].append({"type": "text", "text": text})


# -- The tool: bash in the workspace -------------------------------------------
def run_bash(command):
    done = subprocess.run(command, shell=True, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True,
                          timeout=BASH_TIMEOUT)  # on timeout it kills the command and raises
    output = done.stdout + done.stderr
    return output if len(output) <= OUTPUT_LIMIT else output[:OUTPUT_LIMIT] + "... [cut]"


# -- The tool table: what the model sees, and what runs ------------------------
TOOLS = [
    {"name": "bash", "description": "Run a shell command in the workspace.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                      "required": ["command"]}},
]

TOOL_HANDLERS = {"bash": run_bash}  # called with the call's input as keyword arguments

def run_tool(call, not_run=None):
    """Run one tool call as stored in the history; always return exactly one tool_result."""
    result = {"type": "tool_result", "tool_use_id": call["id"]}
    try:
        if not_run:  # a malformed call, or a turn that ended: the call is answered, not run
            raise ValueError(not_run)
        if call["name"] not in TOOL_HANDLERS:
            raise ValueError(f"Unknown tool {call['name']!r}. Available: {sorted(TOOL_HANDLERS)}")
        result["content"] = TOOL_HANDLERS[call["name"]](**call["input"])
    except Exception as error:  # any failure becomes a result the model can read
        result.update(is_error=True, content=f"Error: {str(error) or type(error).__name__}")
    return result


# -- The REPL ---------------------------------------------------------------------
def repl(prompt="s01 >> "):
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
            if query:  # an empty line does nothing
                add_user_text(history, query)
                agent_loop(history)
        except BaseException as error:  # Ctrl-C or any error ends the turn; the history stays valid
            reason = "interrupted by the user" if isinstance(error, KeyboardInterrupt) else \
                f"{type(error).__name__}: {error}"
            close_turn(history, reason)
            print(f"[{reason}]")

def main():
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
