#!/usr/bin/env python3
"""s03_todo.py - a session TODO list, and a reminder that keeps it honest.

On a job with several steps a model loses track of what is left. This step gives
it a checklist for the current conversation (two tools: todo_write, todo_read),
kept in memory by the harness. The harness also counts model calls that ignore
the list; after NAG_AFTER of them, while items are unfinished, it attaches a
reminder to the next request - to that request only, never to the history:

    history (what is kept)               the request actually sent
    ---------------------------------    ------------------------------------------
    user: "build it"                     user: "build it"
    assistant: todo_write x3 (the plan)  assistant: todo_write x3 (the plan)
    ... 3 model calls, no todo tool ...  ... the same ...
    user: tool_result, tool_result       user: tool_result, tool_result,
                                               <nag-reminder>...</nag-reminder>  <- here only

    TodoManager (memory, one per session):  t1 [done] (high) ...
                                            t2 [in_progress] (normal) ...
    /todos prints it; /new and /clear reset it with the conversation.

Key insight: the model plans, but the harness keeps score - a transient reminder
nudges the model without ever polluting the conversation it is part of.

Run:  python agents/s03_todo.py           (offline demo when no key is set)
      python agents/s03_todo.py --demo    (force the offline demo)
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
    " For work with several steps, plan it with todo_write first and keep each item's status current."  # s03: ask for a plan
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


# -- s03: a session TODO list, and a reminder that keeps it honest ---------------
# The model keeps a checklist for the current conversation. It lives in memory
# only: one TodoManager per REPL session, emptied by /new and /clear. The harness,
# not the model, notices when the list goes stale and adds a reminder to the next
# request - to the request only, never to the history.

TODO_STATUSES = ("pending", "in_progress", "done")
TODO_TOOL_NAMES = ("todo_write", "todo_read")
NAG_AFTER = 3  # model calls in a row without a todo tool before the harness reminds


class TodoManager:
    """In-memory TODO items keyed t1, t2, ...; ids are never reused in a session."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.items: dict[str, dict] = {}
        self.next_number = 1
        self.silent_calls = 0  # model calls since the model last used a todo tool

    def add(self, task: str, priority: str = "normal") -> str:
        task = str(task or "").strip()
        if not task:
            raise ValueError("a TODO item needs a non-empty task")
        task_id = f"t{self.next_number}"
        self.next_number += 1  # a counter, not len(items): an id always means one item
        priority = str(priority or "").strip() or "normal"  # a free label, not an enum
        self.items[task_id] = {"task": task, "status": "pending", "priority": priority}
        return task_id

    def update(self, task_id: str, status: str) -> None:
        if task_id not in self.items:
            known = ", ".join(self.items) or "none yet"
            raise ValueError(f"unknown TODO id {task_id!r} (known ids: {known})")
        if status not in TODO_STATUSES:
            raise ValueError(f"invalid status {status!r}; allowed: {', '.join(TODO_STATUSES)}")
        self.items[task_id]["status"] = status

    def line(self, task_id: str) -> str:
        item = self.items[task_id]
        return f"- {task_id} [{item['status']}] ({item['priority']}) {item['task']}"

    def list(self) -> str:
        if not self.items:
            return "No TODO items."
        return "\n".join(["TODO items:"] + [self.line(task_id) for task_id in self.items])

    def get_nag_reminder(self) -> str | None:
        unfinished = [task_id for task_id, item in self.items.items() if item["status"] != "done"]
        if not unfinished:
            return None
        return "\n".join(["You still have unfinished TODO items. Keep them in sync with your progress."]
                         + [self.line(task_id) for task_id in unfinished])

    def note_model_call(self, used_todo_tool: bool) -> None:
        self.silent_calls = 0 if used_todo_tool else self.silent_calls + 1


TODOS = TodoManager()  # one list per REPL session


def run_todo_write(args: dict) -> str:
    action = args.get("action")
    if action == "add":
        if not str(args.get("task") or "").strip():
            raise ValueError("action 'add' needs 'task': a non-empty description of the item")
        task_id = TODOS.add(args["task"], args.get("priority", "normal"))
        item = TODOS.items[task_id]
        return f"Added {task_id} ({item['priority']}): {item['task']}"
    if action == "update":
        missing = [key for key in ("task_id", "status") if not args.get(key)]
        if missing:
            raise ValueError(f"action 'update' needs {' and '.join(missing)} "
                             f"(status is one of: {', '.join(TODO_STATUSES)})")
        TODOS.update(args["task_id"], args["status"])
        return f"Updated {args['task_id']}: now {args['status']}"
    raise ValueError(f"unknown action {action!r}; use 'add' or 'update'")


def used_todo_tool(content: list) -> bool:
    return any(block.type == "tool_use" and block.name in TODO_TOOL_NAMES for block in content)


def with_nag_reminder(history: list, todos: TodoManager) -> list:
    """The messages to send: the history itself, or a copy carrying a reminder.

    The reminder becomes the LAST text block of the latest user message: after
    every tool_result (the API wants results first), so it never sits between a
    tool_use and its results. Only the copy changes, so the history stays a
    faithful record and reminders never pile up.
    """
    reminder = todos.get_nag_reminder() if todos.silent_calls >= NAG_AFTER else None
    if reminder is None or not history or history[-1]["role"] != "user":
        return history
    latest = history[-1]
    content = latest["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks.append({"type": "text", "text": f"<nag-reminder>\n{reminder}\n</nag-reminder>"})
    return history[:-1] + [{**latest, "content": blocks}]


def messages_to_send(history: list) -> list:
    """with_nag_reminder for this session's list; shows the learner when it nags."""
    outgoing = with_nag_reminder(history, TODOS)
    if outgoing is not history:
        print(f"[harness] {TODOS.silent_calls} model calls without a todo tool, items still open;"
              " this request (not the history) carries:")
        print(outgoing[-1]["content"][-1]["text"])
    return outgoing


def show_todos(arg: str, history: list) -> None:
    print(TODOS.list())


def new_conversation(arg: str, history: list) -> None:
    history.clear()  # the REPL's own list, emptied in place
    TODOS.reset()  # a TODO list belongs to one conversation
    print("[new conversation: history and TODO list cleared]")


TODO_TOOLS = [
    {"name": "todo_write",
     "description": "Keep your TODO list for this conversation. action='add' with task "
                    "(and an optional priority label) adds an item and returns its id; "
                    "action='update' with task_id and status (pending, in_progress, done) changes one.",
     "input_schema": {"type": "object", "properties": {
         "action": {"type": "string", "enum": ["add", "update"]},
         "task": {"type": "string"},
         "priority": {"type": "string", "description": "a free label; default normal"},
         "task_id": {"type": "string", "description": "t1, t2, ..."},
         "status": {"type": "string", "enum": list(TODO_STATUSES)}},
         "required": ["action"]}},
    {"name": "todo_read", "description": "Show your TODO list for this conversation.",
     "input_schema": {"type": "object", "properties": {}}},
]


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
    *TODO_TOOLS,  # s03: todo_write and todo_read
]

TOOL_HANDLERS = {
    "bash": lambda args: run_bash(args["command"]),
    "read_file": lambda args: run_read(args["path"], args.get("limit")),
    "write_file": lambda args: run_write(args["path"], args["content"]),
    "edit_file": lambda args: run_edit(args["path"], args["old_text"], args["new_text"]),
    "todo_write": run_todo_write,  # s03: add or update an item
    "todo_read": lambda args: TODOS.list(),  # s03: the list as text
}

SLASH_COMMANDS = {"/todos": show_todos, "/new": new_conversation, "/clear": new_conversation}  # s03: list, reset

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
            model=MODEL, system=SYSTEM, messages=messages_to_send(messages),  # s03: reminder on the request only
            tools=TOOLS, max_tokens=MAX_TOKENS,
        )
        messages.append({"role": "assistant",
                         "content": [block.model_dump(exclude_none=True) for block in response.content]})
        TODOS.note_model_call(used_todo_tool(response.content))  # s03: count calls that ignore the list
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
def repl(prompt: str = "s03 >> ") -> None:  # s03: this step's prompt
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
