"""Scripted model for the s01 offline demo (not a real model: every turn is written here).

The model looks around with bash, in a reply shaped like those some endpoints send (two
calls sharing one id: the harness repairs the reply and says so), counts lines, makes a
slip (a file that is not there: the error comes back as a result and the loop goes on),
and answers from what bash really printed.

bash runs in sh on Linux and macOS and in cmd.exe on Windows, which has no ls, pwd or wc: the
scripted model types what the shell it finds understands (cmd.exe's part is untested).
"""

import os
import re
from pathlib import Path

from offline import QUIRKS, latest_results, result_text, steps_since_prompt, tool_use

PROMPTS = ["Which Python file here is the longest?"]
SHELL = (
    {"list": "dir /b", "where": "cd", "count": 'find /c /v ""'}  # cmd.exe
    if os.name == "nt"
    else {"list": "ls", "where": "pwd", "count": "wc -l"}
)


def setup(workdir: Path) -> None:
    (workdir / "app.py").write_text("".join(f"print({n})\n" for n in range(40)), encoding="utf-8")
    (workdir / "util.py").write_text("def helper():\n    return 1\n", encoding="utf-8")


def policy(request: dict):
    step = steps_since_prompt(request)
    results = [result_text(r) for r in latest_results(request)]
    if step == 0:  # two calls with the same id: stored as they are, the next request is a 400
        reply = QUIRKS["duplicate_ids"](tool_use("bash", {"command": SHELL["list"]}))
        reply.content[1]["input"] = {"command": SHELL["where"]}
        return reply
    if step == 1:  # a slip a real model makes: a folder that does not exist
        return [
            "Let me count the lines.",
            tool_use("bash", {"command": f"{SHELL['count']} src/*.py"}),
        ]
    if step == 2:
        return [
            "No src folder; the files are right here.",
            tool_use("bash", {"command": f"{SHELL['count']} *.py"}),
        ]
    counts = line_counts(results[0])
    longest = max(counts, key=counts.get)
    return [
        f"{longest} is the longest, with {counts[longest]} lines (bash: `{SHELL['count']} *.py`)."
    ]


def line_counts(output: str) -> dict:
    """{file: lines}, read from `wc -l` ("  40 app.py") or cmd.exe's find ("-- APP.PY: 40")."""
    counts = {}
    for line in output.splitlines():
        name = re.search(r"[\w.-]+\.py\b", line, re.I)
        number = re.search(r"\b\d+\b", line)
        if name and number:
            counts[name.group().lower()] = int(number.group())
    return counts
