"""Scripted model for the s08 offline demo (not a real model: every turn is written here).

The user asks for a slow check and, meanwhile, a fix. The model starts the check with
background_run (it returns at once), fixes the typo while the check runs, and says the check
is still going. The check ends while the REPL waits at its prompt: its one line appears there,
and its result rides with the user's next message, where the model reads it. Then the user
starts a long check and quits: the REPL stops that job and names it.

The check is a Python script (portable: no shell `sleep`) that takes about two seconds. The
order of the output shows the overlap: the edit is done and the model has answered while the
check still runs; its line comes at the prompt, after the answer. A blocking check would have
come first.
"""

import builtins
import os
import re
import time
from pathlib import Path

from offline import last_user_text, result_text, steps_since_prompt, tool_use

# Windows has no python3 command; the py launcher comes with python.org's Python (untested).
PYTHON = "py" if os.name == "nt" else "python3"
CHECK = f"{PYTHON} slow_check.py"
FULL = f"{PYTHON} slow_check.py --full"

PROMPTS = [
    f"Run the slow check ({CHECK}) and meanwhile fix the typo in README.md.",
    "How did the check go?",
    "Start the full check too, in the background; I'll look at it tomorrow.",
]

SLOW_CHECK = '''\
import sys, time
tests = 60 if "--full" in sys.argv else 3
for n in range(1, tests + 1):
    time.sleep(0.7)  # one slow test
    print(f"test {n} passed", flush=True)
print(f"{tests} passed")
'''


def setup(workdir: Path) -> None:
    (workdir / "slow_check.py").write_text(SLOW_CHECK, encoding="utf-8")
    (workdir / "README.md").write_text("# Demo\n\nTeh project checks itself.\n", encoding="utf-8")


def passed(request: dict) -> str:
    """The check's summary line ("3 passed") from any result the model has read, or ''."""
    texts = []
    for message in request["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            texts.append(block.get("text") or result_text(block))
    found = re.findall(r"^\d+ passed$", "\n".join(texts), re.M)
    return found[-1] if found else ""


def policy(request: dict) -> list:
    step = steps_since_prompt(request)
    asked = last_user_text(request)
    if asked.startswith("Start the full check"):
        if step == 0:
            return [tool_use("background_run", {"command": FULL})]
        return ["The full check runs as job j2; its result will come to me when it ends."]
    if asked.startswith("How did"):
        if passed(request):
            return [f"The check (job j1) ended with exit code 0: {passed(request)}."]
        if step == 0:
            return [tool_use("background_check", {"job_id": "j1"})]
        return ["The check is still running; I'll tell you when its result comes."]
    if step == 0:
        return ["I'll start the check in the background and fix the typo while it runs.",
                tool_use("background_run", {"command": CHECK})]
    if step == 1:
        return [tool_use("edit_file", {"path": "README.md", "old_text": "Teh project",
                                       "new_text": "The project"})]
    if passed(request):  # a slow machine: the check ended before the edit's answer came back
        return [f"Fixed the typo in README.md. The check (job j1) already ended: "
                f"{passed(request)}."]
    return ["Fixed the typo in README.md (Teh -> The). The check is still running as job j1; "
            "its result will come to me when it ends."]


def run(namespace: dict, workdir: Path, server) -> None:
    """The REPL as the learner meets it, except that the scripted user waits at the prompt
    until every job has said its line - as a person would wait for the check."""
    typed = builtins.input  # the scripted lines, echoed after their prompt

    def waiting_input(prompt: str = "") -> str:
        check = namespace["JOBS"].get("j1")
        if check and not check.told:  # the user waits for the check; not for the full one
            print(prompt, end="", flush=True)  # the prompt the job's line appears after
            deadline = time.monotonic() + 120  # only against a hang: the check takes 2 s
            while time.monotonic() < deadline and not check.told:
                time.sleep(0.05)
        return typed(prompt)

    builtins.input = waiting_input
    namespace["repl"]()
