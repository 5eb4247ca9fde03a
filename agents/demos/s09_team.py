"""Scripted model for the s09 offline demo (not a real model: every turn is written here).

One policy plays three agents and tells them apart by the system prompt: the lead's, the
reviewer's ("the teammate 'reviewer'") and the builder's ("the teammate 'builder'").

The lead plans a release on the task board (two tasks), spawns a reviewer and asks it to
approve the plan: rejected, nothing runs the tests. The lead adds a test task, asks again:
approved. It spawns a builder and assigns it the tasks one message each; the builder keeps
them up to date on the board with its own task tools and answers each request. The answers
reach the lead through its mailbox, with its next request. Finally the lead shuts both down.
"""

import json
from pathlib import Path

from offline import blocks_of, latest_results, result_text, system_text, task_ids, tool_use

NEWS = "New messages in your team mailbox"  # how s09 hands the lead its mail
PROMPTS = [
    "Plan the 2.0 release on the board, and get the reviewer's approval before anyone starts.",
    "/tasks",
    "Approved - now have a builder do the tasks, one at a time.",
    "/tasks",
    "/team",
    "Everything is done: shut the team down.",
]


def setup(workdir: Path) -> None:
    (workdir / "parser.py").write_text(
        "def parse(text):\n    return dict(line.split('=') for line in text.splitlines())\n",
        encoding="utf-8",
    )


def texts(message: dict) -> list:
    return [b["text"] for b in blocks_of(message) if b.get("type") == "text"]


def prompt_and_step(request: dict) -> tuple:
    """The latest words of whoever asked this agent, and how many model turns followed them."""
    steps = 0
    for message in reversed(request["messages"]):
        words = (
            [t for t in texts(message) if not t.startswith(NEWS)]
            if message["role"] == "user"
            else []
        )
        if words:
            return words[-1], steps
        steps += message["role"] == "assistant"
    return "", steps


def policy(request: dict) -> list:
    system = system_text(request)
    if "the teammate 'reviewer'" in system:
        return reviewer(request)
    if "the teammate 'builder'" in system and "Task #" in prompt_and_step(request)[0]:
        return builder(request)
    if "the teammate '" in system:  # any other teammate or message (in play mode): a plain answer
        name = system.split("the teammate '")[1].split("'")[0]
        return [f"{name} here. I read: {prompt_and_step(request)[0]!r} - I have no task for that."]
    return lead(request)


def reviewer(request: dict) -> list:
    prompt, _ = prompt_and_step(request)
    if "test" in prompt.lower():
        return ["APPROVE: the tests run before the release."]
    return ["REJECT: nothing runs the tests before the release; add a test task."]


def builder(request: dict) -> list:
    prompt, step = prompt_and_step(request)
    task_id = int(prompt.split("Task #")[1].split()[0])
    if step == 0:
        return [tool_use("task_update", {"task_id": task_id, "status": "in_progress"})]
    if step == 1:
        return [
            tool_use(
                "bash",
                {"command": f"echo work on task {task_id}"},  # the same in sh and cmd.exe
            )
        ]
    if step == 2:
        return [tool_use("task_update", {"task_id": task_id, "status": "completed"})]
    unblocked = json.loads(result_text(latest_results(request)[0])).get("unblocked", [])
    return [f"Done with task #{task_id}." + (f" That unblocks {unblocked}." if unblocked else "")]


PARSER, TESTS, RELEASE = "Rewrite the config parser", "Run the test suite", "Release 2.0"
PLAN = f"1. {PARSER}\n2. {RELEASE}"
REVISED = f"1. {PARSER}\n2. {TESTS}\n3. {RELEASE}"


def lead(request: dict) -> list:
    prompt, step = prompt_and_step(request)
    ids, results = task_ids(request), [result_text(r) for r in latest_results(request)]
    if prompt.startswith("Plan"):
        script = [
            ["The plan goes on the board first.", tool_use("task_create", {"subject": PARSER})],
            [tool_use("task_create", {"subject": RELEASE, "blocked_by": [ids.get(PARSER)]})],
            [
                tool_use(
                    "team_spawn",
                    {
                        "name": "reviewer",
                        "role": "reviews plans before work starts",
                        "prompt": "You are a strict reviewer: "
                        "approve a plan only if it runs the tests.",
                    },
                )
            ],
            ["Asking the reviewer.", tool_use("team_review", {"name": "reviewer", "plan": PLAN})],
            [
                "Rejected: a test task goes between the parser and the release.",
                tool_use("task_create", {"subject": TESTS, "blocked_by": [ids.get(PARSER)]}),
            ],
            [
                tool_use(
                    "task_update", {"task_id": ids.get(RELEASE), "add_blocked_by": [ids.get(TESTS)]}
                )
            ],
            [tool_use("team_review", {"name": "reviewer", "plan": REVISED})],
        ]
        if step < len(script):
            return script[step]
        return [f"The reviewer approved the revised plan ({results[0].split(': ', 1)[-1]})"]
    if prompt.startswith("Approved"):
        order = [PARSER, TESTS, RELEASE]
        if step == 0:
            return [
                tool_use(
                    "team_spawn",
                    {
                        "name": "builder",
                        "role": "does the tasks it is given",
                        "prompt": "You do one task at a time and keep it current on the board.",
                    },
                )
            ]
        sent = (step - 1) // 2  # then, per task: send it, wait for the answer
        if sent < len(order) and step % 2:
            return [
                tool_use(
                    "team_send",
                    {
                        "name": "builder",
                        "task_id": ids[order[sent]],
                        "message": "Mark it in_progress, do it, mark it completed.",
                    },
                )
            ]
        if sent < len(order):
            return [tool_use("team_wait", {"seconds": 30})]
        return ["The builder finished all three tasks; each answer came back through my mailbox."]
    if prompt.startswith("Everything"):
        if step == 0:
            return [
                tool_use("team_shutdown", {"name": "builder"}),
                tool_use("team_shutdown", {"name": "reviewer"}),
            ]
        return ["Both teammates acknowledged and stopped."]
    return ["(the scripted lead has nothing to say to that)"]


def finish(namespace: dict, workdir: Path) -> None:
    """After the session: the lines the team really wrote to each other."""
    mailbox = namespace["MAILBOX"]
    print(f"On disk: {mailbox.root.relative_to(workdir)}/ (one JSON line per message)")
    for path in sorted(mailbox.root.glob("*.jsonl")):
        for message in mailbox.read(path.stem)[0]:
            protocol = f" [{message['protocol']}]" if message.get("protocol") else ""
            text = message["content"].replace("\n", " ")
            print(
                f"  {path.name:<14} {message['kind']:<8}{protocol} "
                f"{message['from']} -> {message['to']}: "
                f"{text[:60] + ('...' if len(text) > 60 else '')}"
            )
