"""Scripted model for the s03 offline demo (not a real model: every turn is written here).

The model plans three items with todo_write, starts the first one, then gets
absorbed in the work and stops updating the list. After NAG_AFTER such calls the
harness attaches a <nag-reminder> to the request; the model reacts to it (it
only reacts because the reminder really arrived), brings the list up to date and
finishes. The user then looks at the list with /todos.
"""

import json
import os

from offline import latest_results, result_text, steps_since_prompt, tool_use

PROMPTS = [
    "Write greet.py with a greet(name) function, a test for it in test_greet.py, and run the test.",
    "/todos",
]

GREET = 'def greet(name):\n    return f"Hello, {name}!"\n'
TEST = (
    "from greet import greet\n\n"
    'assert greet("Ada") == "Hello, Ada!"\n'
    'print("test_greet: 1 passed")\n'
)

# Windows has no python3 command; the py launcher comes with python.org's Python (untested).
PYTHON = "py" if os.name == "nt" else "python3"

# The turns where the model does the work without touching its TODO list.
WORK = {
    2: [tool_use("write_file", {"path": "test_greet.py", "content": TEST})],
    3: [tool_use("bash", {"command": f"{PYTHON} test_greet.py"})],
    4: [
        "The test passes. A docstring would help readers.",
        tool_use(
            "edit_file",
            {
                "path": "greet.py",
                "old_text": "def greet(name):\n",
                "new_text": 'def greet(name):\n    """Greet someone by name."""\n',
            },
        ),
    ],
}


def reminded(request: dict) -> bool:
    """The reminder rides inside the last tool result (or with the user's words)."""
    return "<nag-reminder>" in json.dumps(request["messages"][-1])


def policy(request: dict) -> list:
    step = steps_since_prompt(request)
    if reminded(request):
        return [
            "Right, my list is stale: all three items are actually done.",
            *[
                tool_use("todo_write", {"action": "update", "task_id": task_id, "status": "done"})
                for task_id in ("t1", "t2", "t3")
            ],
        ]
    if step == 0:
        return [
            "Three steps; let me plan them first.",
            tool_use("todo_write", {"action": "add", "task": "Write greet.py", "priority": "high"}),
            tool_use("todo_write", {"action": "add", "task": "Write test_greet.py"}),
            tool_use("todo_write", {"action": "add", "task": "Run the test"}),
        ]
    if step == 1:
        return [
            tool_use("todo_write", {"action": "update", "task_id": "t1", "status": "in_progress"}),
            tool_use("write_file", {"path": "greet.py", "content": GREET}),
        ]
    if step in WORK:
        return WORK[step]
    marked = sum("now done" in result_text(r) for r in latest_results(request))
    return [
        f"Done: greet.py has greet(), test_greet.py checks it, and the test passes. "
        f"{marked} items marked done on the list just now."
    ]
