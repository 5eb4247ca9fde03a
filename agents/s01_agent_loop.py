#!/usr/bin/env python3
"""s01_agent_loop.py - the minimal agent loop.

An agent is a model in a loop with tools. The model asks for a tool, the harness
runs it and sends the result back, and this repeats until the model answers in
plain text:

    user prompt
        |
        v
    +--------+   tool_use    +-----------+
    | model  | ------------> | run tools |
    |        | <------------ | (harness) |
    +--------+  tool_result  +-----------+
        |
        v  stop_reason != "tool_use"
    final answer

Four tools are enough for real work: bash, read_file, write_file, edit_file.
Every tool call gets exactly one tool_result - errors included - so the
conversation stays valid whatever the model asks for.

Key insight: the loop is trivial; the harness's job is to keep the conversation
valid and the workspace safe.

Run:  python agents/s01_agent_loop.py           (offline demo when no key is set)
      python agents/s01_agent_loop.py --demo    (force the offline demo)
"""

import json
import os
import signal
import subprocess
import sys
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
]

TOOL_HANDLERS = {
    "bash": lambda args: run_bash(args["command"]),
    "read_file": lambda args: run_read(args["path"], args.get("limit")),
    "write_file": lambda args: run_write(args["path"], args["content"]),
    "edit_file": lambda args: run_edit(args["path"], args["old_text"], args["new_text"]),
}

SLASH_COMMANDS = {}  # "/name" -> fn(arg, history); later steps add their own

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
        response = client.messages.create(
            model=MODEL, system=SYSTEM, messages=messages,
            tools=TOOLS, max_tokens=MAX_TOKENS,
        )
        messages.append({"role": "assistant",
                         "content": [block.model_dump(exclude_none=True) for block in response.content]})
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
def repl(prompt: str = "s01 >> ") -> None:
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
