"""Scripted model for the s01 offline demo (not a real model: every turn is written here).

The model looks around with bash, in a reply shaped like those some endpoints send (two
calls sharing one id: the harness repairs the reply and says so), counts lines, makes a
slip (a file that is not there: the error comes back as a result and the loop goes on),
and answers from what bash really printed.
"""

from pathlib import Path

from offline import QUIRKS, latest_results, result_text, steps_since_prompt, tool_use

PROMPTS = ["Which Python file here is the longest?"]


def setup(workdir: Path) -> None:
    (workdir / "app.py").write_text("".join(f"print({n})\n" for n in range(40)), encoding="utf-8")
    (workdir / "util.py").write_text("def helper():\n    return 1\n", encoding="utf-8")


def policy(request: dict):
    step = steps_since_prompt(request)
    results = [result_text(r) for r in latest_results(request)]
    if step == 0:  # two calls with the same id: stored as they are, the next request is a 400
        reply = QUIRKS["duplicate_ids"](tool_use("bash", {"command": "ls"}))
        reply.content[1]["input"] = {"command": "pwd"}
        return reply
    if step == 1:  # a slip a real model makes: a folder that does not exist
        return ["Let me count the lines.", tool_use("bash", {"command": "wc -l src/*.py"})]
    if step == 2:
        return [
            "No src folder; the files are right here.",
            tool_use("bash", {"command": "wc -l *.py"}),
        ]
    counts = [line.split() for line in results[0].splitlines() if line.strip().endswith(".py")]
    longest = max(counts, key=lambda fields: int(fields[0]))
    return [f"{longest[1]} is the longest, with {longest[0]} lines (bash: `wc -l *.py`)."]
