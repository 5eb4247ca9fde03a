"""Scripted model for the s01 offline demo (not a real model: every turn is written here).

The model reads a file, writes a checklist from it, tries an edit with the wrong text
(the harness answers with an error result, and the loop goes on), reads the file again,
makes the edit, checks it with bash and answers. Each step reacts to the real tool
results it gets back. (cmd.exe, bash's shell on Windows, has no wc: there the model counts
with find, untested.)
"""

import os
import re
from pathlib import Path

from offline import latest_results, result_text, steps_since_prompt, tool_use

COUNT = 'find /c /v ""' if os.name == "nt" else "wc -l"  # cmd.exe's line count, or sh's
PROMPTS = [
    "Read notes.txt, turn it into a checklist in todo.md, mark the first item done, "
    "and tell me how many lines todo.md has.",
    "/help",
]


def setup(workdir: Path) -> None:
    (workdir / "notes.txt").write_text(
        "buy milk\ncall the plumber\nwater the plants\n", encoding="utf-8"
    )


def policy(request: dict) -> list:
    step = steps_since_prompt(request)
    results = [result_text(r) for r in latest_results(request)]
    if step == 0:
        return ["I'll start by reading the notes.", tool_use("read_file", {"path": "notes.txt"})]
    if step == 1:
        items = [line for line in results[0].splitlines() if line.strip()]
        checklist = "".join(f"- [ ] {item}\n" for item in items)
        return [tool_use("write_file", {"path": "todo.md", "content": "# TODO\n" + checklist})]
    if step == 2:  # a slip a real model makes: the wrong capital letter
        return [
            tool_use(
                "edit_file",
                {"path": "todo.md", "old_text": "- [ ] Buy milk", "new_text": "- [x] Buy milk"},
            )
        ]
    if step == 3:
        return [
            "That edit failed; let me look at the file again.",
            tool_use("read_file", {"path": "todo.md"}),
        ]
    if step == 4:
        return [
            tool_use(
                "edit_file",
                {"path": "todo.md", "old_text": "- [ ] buy milk", "new_text": "- [x] buy milk"},
            )
        ]
    if step == 5:
        return [tool_use("bash", {"command": f"{COUNT} todo.md"})]
    number = re.search(r"\b\d+\b", results[0]) if results else None  # "4 todo.md", "TODO.MD: 4"
    count = number.group() if number else "?"
    return [
        f"Done: todo.md is a checklist of the notes with 'buy milk' ticked off. "
        f"bash says it has {count} lines."
    ]
