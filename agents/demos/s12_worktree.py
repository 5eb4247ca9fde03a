"""Scripted model for the s12 offline demo (not a real model: every turn is written here).

The demo folder is a small git repository with one file, greet.py. The model plans two tasks
that change the same line of it in incompatible ways (a formal greeting, a shouting one) and
gives each its own lane. Both changes are made and run in their lanes while the main checkout
stays untouched; the formal one is committed. Asked to keep the formal one and throw the other
away, the model closes the formal lane with keep (its branch stays for review); closing the
shouting lane is refused on screen because its change is uncommitted, and the model then forces
it - the result names what was thrown away. At the end the demo prints
`git log --oneline --graph --all --decorate` (the kept branch) and the main checkout's greet.py.
Ids come from real results.
"""

import subprocess
import sys
from pathlib import Path

from offline import last_user_text, steps_since_prompt, task_ids, tool_use

PROMPTS = [
    "greet.py needs two versions to compare: a formal greeting and a shouting one. "
    "Work on both in parallel, without them colliding.",
    "/lanes",
    "/tasks",
    "Keep the formal one for review; throw the shouting one away. Close both lanes.",
    "/lanes",
]

FORMAL, SHOUT = "Make the greeting formal", "Make the greeting shout"
ORIGINAL = '    return f"Hello, {name}."\n'
CHANGES = {
    "formal": '    return f"Good day to you, {name}."\n',
    "shout": '    return f"HELLO, {name.upper()}!!!"\n',
}
PYTHON = f'"{sys.executable}"'  # the interpreter running the demo: portable, no PATH guess


def git(workdir: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=workdir, capture_output=True, text=True, check=True
    )
    return done.stdout


def setup(workdir: Path) -> None:
    """A repository with one commit; its own identity, so commits work on any machine."""
    (workdir / "greet.py").write_text(
        "def greet(name):\n" + ORIGINAL + "\n\nprint(greet('Ada'))\n", encoding="utf-8"
    )
    (workdir / ".gitignore").write_text(".tasks/\n.worktrees/\n", encoding="utf-8")
    git(workdir, "init", "-q")
    git(workdir, "symbolic-ref", "HEAD", "refs/heads/main")
    for key, value in (("user.name", "Demo"), ("user.email", "demo@example.com"),
                       ("commit.gpgsign", "false")):
        git(workdir, "config", key, value)
    git(workdir, "add", "greet.py", ".gitignore")
    git(workdir, "commit", "-q", "-m", "greet: say hello")


def plan(step: int, ids: dict) -> list:
    if step == 0:
        return [
            "Both changes rewrite the same line of greet.py, so each task gets its own lane.",
            tool_use("task_create", {"subject": FORMAL}),
            tool_use("task_create", {"subject": SHOUT}),
        ]
    if step == 1:
        return [tool_use("lane_create", {"name": "formal", "task_id": ids[FORMAL]}),
                tool_use("lane_create", {"name": "shout", "task_id": ids[SHOUT]})]
    if step == 2:
        return [tool_use("edit_file", {"path": f".worktrees/{lane}/greet.py",
                                       "old_text": ORIGINAL, "new_text": new})
                for lane, new in CHANGES.items()]
    if step == 3:
        return [
            tool_use("lane_run", {"name": "formal", "command": f"{PYTHON} greet.py && "
                                  "git commit -qam \"greet: formal\" && git log --oneline -1"}),
            tool_use("lane_run", {"name": "shout", "command": f"{PYTHON} greet.py"}),
        ]
    if step == 4:
        return ["The main checkout must not have changed:",
                tool_use("bash", {"command": f"git status --short && {PYTHON} greet.py"})]
    if step == 5:
        return [tool_use("lane_list", {})]
    return ["Both versions run, each in its lane; the main checkout still says hello. The "
            "formal one is committed on wt/formal, the shouting one is not committed yet."]


def close(step: int, ids: dict) -> list:
    if step == 0:
        return [tool_use("lane_close", {"name": "formal", "action": "keep"}),
                tool_use("lane_close", {"name": "shout", "action": "discard"})]
    if step == 1:
        return ["Closing the shout lane was refused: its change is uncommitted. You asked to "
                "throw it away, so I force it.",
                tool_use("lane_close", {"name": "shout", "action": "discard", "force": True})]
    if step == 2:
        return [tool_use("task_update", {"task_id": ids[FORMAL], "status": "completed"}),
                tool_use("task_update", {"task_id": ids[SHOUT], "status": "deleted"})]
    return ["Done: wt/formal keeps the formal greeting for review (git merge wt/formal takes "
            "it); the shouting version and its lane are gone."]


def policy(request: dict) -> list:
    step, ids = steps_since_prompt(request), task_ids(request)
    if last_user_text(request).startswith("Keep"):
        return close(step, ids)
    return plan(step, ids)


def finish(namespace: dict, workdir: Path) -> None:
    """What git says after the session: the kept branch, and the main checkout as it was."""
    print("=" * 70)
    print("$ git log --oneline --graph --all --decorate")
    print(git(workdir, "log", "--oneline", "--graph", "--all", "--decorate").rstrip())
    print("$ git worktree list")
    print(git(workdir, "worktree", "list").rstrip())
    print("The main checkout's greet.py (untouched):")
    print((workdir / "greet.py").read_text(encoding="utf-8").rstrip())
    print("=" * 70)
