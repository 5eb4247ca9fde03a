"""Scripted model for the s11 offline demo (not a real model: every turn is written here).

One policy plays three agents: the lead and two autonomous workers, alice and bob.
It tells them apart by the system prompt: a worker's says "the teammate 'alice'".

The lead puts five tasks on the board - two roots, a task after the second root,
a join, a tail - spawns two autonomous workers and waits, looking again every half
second, until both report that they stopped. The workers pick the tasks themselves.
Every task writes a real file, and the join reads files that earlier tasks wrote,
so it could not succeed if it ran too early.
"""

import json
import os
import re
from datetime import datetime
from pathlib import Path

from offline import blocks_of, last_user_text, latest_results, result_text, steps_since_prompt, tool_use

NEWS = "New messages in your team mailbox"  # how the lead is handed its mail
DEMO_ENV = {"IDLE_TIMEOUT": "1", "POLL_INTERVAL": "0.1"}  # workers stop 1 s after the board runs dry
WAIT_COMMAND = "sleep 0.5" if os.name != "nt" else "ping -n 2 127.0.0.1 > NUL"

PROMPTS = [
    "Plan the docs of our tool mdcount as tasks: intro.txt and usage.txt can start at once, faq.txt "
    "needs the usage, guide.txt joins intro and faq, and the release note comes last.",
    "/tasks",
    "Start two autonomous workers, alice and bob.",
    "Wait until the team has finished, then tell me how it went.",
    "/team list",
    "/tasks",
]

INTRO, USAGE, FAQ, GUIDE, NOTE = ("Write intro.txt", "Write usage.txt", "Write faq.txt",
                                  "Assemble guide.txt", "Write release-note.txt")
FILE_TEXT = {
    "intro.txt": "mdcount counts the Markdown files in a folder.\n",
    "usage.txt": "Usage: mdcount [FOLDER]   (default: the current folder)\n",
    "faq.txt": "Q: Does mdcount follow symlinks?  A: No, never.\n",
    "release-note.txt": "mdcount 1.0: first release. Read guide.txt to get started.\n",
}
GUIDE_PARTS = ["intro.txt", "usage.txt", "faq.txt"]


def setup(workdir: Path) -> None:
    os.environ.update(DEMO_ENV)  # read when the script loads; run_demo restores the environment after


def policy(request: dict) -> list:
    worker = re.search(r"the teammate '([\w-]+)'", request.get("system") or "")
    return work(request) if worker else lead(request)


# -- the workers: one task per prompt -----------------------------------------------
def work(request: dict) -> list:
    found = re.findall(r"Task #(\d+): (.+)", last_user_text(request))
    if not found:
        return ["I only work on tasks."]
    subject = found[-1][1].strip()
    step = steps_since_prompt(request)
    if subject == GUIDE:  # the join: its inputs come from three earlier tasks
        if step == 0:
            return [tool_use("read_file", {"path": name}) for name in GUIDE_PARTS]
        if step == 1:
            text = "".join(result_text(r).strip() + "\n" for r in latest_results(request))
            return [tool_use("write_file", {"path": "guide.txt", "content": text})]
        return ["Assembled guide.txt from intro.txt, usage.txt and faq.txt."]
    name = subject.split()[-1]
    if step == 0:
        return [tool_use("write_file", {"path": name, "content": FILE_TEXT[name]})]
    return [f"Wrote {name}."]


# -- the lead: plan, spawn, wait ----------------------------------------------------
def user_prompt_and_step(request: dict) -> tuple:
    """The user's latest words and how many model turns followed them (mail does not count as words)."""
    steps = 0
    for message in reversed(request["messages"]):
        if message["role"] == "user":
            texts = [b["text"] for b in blocks_of(message)
                     if b.get("type") == "text" and not b["text"].startswith(NEWS)]
            if texts:
                return texts[-1], steps
        steps += message["role"] == "assistant"
    return "", steps


def created_ids(request: dict) -> dict:
    """subject -> id, from the task_create results so far: the board hands out the ids."""
    ids = {}
    for message in request["messages"]:
        for block in blocks_of(message):
            if block.get("type") == "tool_result" and not block.get("is_error"):
                try:
                    task = json.loads(result_text(block))
                except ValueError:
                    continue
                if isinstance(task, dict) and "subject" in task:
                    ids[task["subject"]] = task["id"]
    return ids


def stopped_workers(request: dict) -> set:
    mail = "\n".join(b["text"] for m in request["messages"] if m["role"] == "user"
                     for b in blocks_of(m) if b.get("type") == "text" and b["text"].startswith(NEWS))
    return set(re.findall(r"from ([\w-]+) \[status\]:\nstopped", mail))


def lead(request: dict) -> list:
    prompt, step = user_prompt_and_step(request)
    ids = created_ids(request)
    if prompt.startswith("Plan"):
        script = [
            ["Two roots first; their ids come back in the results.",
             tool_use("task_create", {"subject": INTRO, "description": "One line: what mdcount does."}),
             tool_use("task_create", {"subject": USAGE, "description": "How to run it."})],
            [tool_use("task_create", {"subject": FAQ, "blockedBy": [ids.get(USAGE)]})],
            [tool_use("task_create", {"subject": GUIDE, "description": "intro + usage + faq, in that order.",
                                      "blockedBy": [ids.get(INTRO), ids.get(FAQ)]})],
            [tool_use("task_create", {"subject": NOTE, "blockedBy": [ids.get(GUIDE)]})],
            ["Five tasks are on the board; only intro and usage are ready."],
        ]
        return script[min(step, 4)]
    if prompt.startswith("Start"):
        if step == 0:
            return [tool_use("team_spawn_autonomous", {"name": "alice"}),
                    tool_use("team_spawn_autonomous", {"name": "bob"})]
        return ["alice and bob are running. They take ready tasks by themselves; I just wait."]
    if prompt.startswith("Wait"):
        results = latest_results(request)
        last_call = results and result_text(results[0])
        if stopped_workers(request) >= {"alice", "bob"}:
            if not (last_call and "tasks:" in last_call):
                return [tool_use("task_list", {})]
            return ["Both workers ran out of work and stopped. The board: "
                    + last_call.splitlines()[-1].split(";")[0] + "."]
        if step >= 40:
            return ["The workers are still busy; I stop waiting here."]
        return [tool_use("bash", {"command": WAIT_COMMAND})]
    return ["OK."]


def finish(namespace: dict, workdir: Path) -> None:
    """After the session: who did what, and in which order, read back from .tasks/."""
    for worker in namespace["RUNNING"].values():
        worker.thread.join(timeout=5)
    tasks = namespace["TASKS"].list()
    board = {t["id"]: t for t in tasks}
    start = min(datetime.fromisoformat(t["started_at"]) for t in tasks)
    print("=" * 70)
    print("Read back from .tasks/: claim order (started_at) and the blockers each task waited for")
    for task in sorted(tasks, key=lambda t: t["started_at"]):
        at = (datetime.fromisoformat(task["started_at"]) - start).total_seconds()
        after = ", ".join(f"#{b}" for b in task["blockedBy"]) or "-"
        print(f"  +{at:6.3f}s  #{task['id']} {task['subject']:<24} by {task['owner']:<6} blockers done first: {after}")
    early = [t["id"] for t in tasks for b in t["blockedBy"] if t["started_at"] < board[b]["updated_at"]]
    print(f"Started before a blocker completed: {early or 'none'}")
    print("Files:", ", ".join(sorted(p.name for p in workdir.glob("*.txt"))))
    print("guide.txt:\n  " + (workdir / "guide.txt").read_text(encoding="utf-8").strip().replace("\n", "\n  "))
    print("=" * 70)
