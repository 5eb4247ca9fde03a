"""Scripted model for the s09 offline demo (not a real model: every turn is written here).

One policy plays two agents. It tells them apart by the system prompt: the
reviewer's says "the teammate 'reviewer'", the lead's does not.

The lead registers and spawns a reviewer, asks it to approve a plan (rejected:
no tests), revises the plan (approved), sends a plain request that the reviewer
answers by reading a file, then shuts it down. The reviewer's answer reaches
the lead through main's mailbox, added after the tool results of the next request.
"""

from pathlib import Path

from offline import blocks_of, latest_results, result_text, system_text, tool_use

NEWS = "New messages in your team mailbox"  # how s09 hands the lead its mail
PLAN = "1. Rewrite the config parser.\n2. Release version 2.0."
REVISED = "1. Rewrite the config parser.\n2. Run the test suite and fix failures.\n3. Release version 2.0."

PROMPTS = [
    "Set up a teammate called reviewer who reviews plans, and start it.",
    "/team list",
    "Get the reviewer's approval for my release plan before we start.",
    "Ask the reviewer what notes.txt says, then shut the reviewer down.",
    "/team list",
]


def setup(workdir: Path) -> None:
    (workdir / "notes.txt").write_text("Release checklist: bump the version, tag, announce.\n",
                                       encoding="utf-8")


def user_texts(message: dict) -> list:
    return [b["text"] for b in blocks_of(message) if b.get("type") == "text"]


def prompt_and_step(request: dict) -> tuple:
    """The user's latest words and how many model turns followed them.

    Mail added by the harness is text too, so it does not count as the user speaking.
    """
    steps = 0
    for message in reversed(request["messages"]):
        texts = [t for t in user_texts(message) if not t.startswith(NEWS)] \
            if message["role"] == "user" else []
        if texts:
            return texts[-1], steps
        steps += message["role"] == "assistant"
    return "", steps


def policy(request: dict) -> list:
    if "the teammate 'reviewer'" in system_text(request):
        return reviewer(request)
    return lead(request)


def reviewer(request: dict) -> list:
    prompt, step = prompt_and_step(request)
    if prompt.startswith("Review the plan"):
        if "test" in prompt.lower():
            return ["APPROVE: the tests now run before the release."]
        return ["REJECT: nothing runs the tests before the release; add a test step."]
    if step == 0:
        return [tool_use("read_file", {"path": "notes.txt"})]
    return [f"notes.txt says: {result_text(latest_results(request)[0]).strip()}"]


def lead(request: dict) -> list:
    prompt, step = prompt_and_step(request)
    results = [result_text(r) for r in latest_results(request)]
    if prompt.startswith("Set up"):
        script = [
            [tool_use("team_register", {
                "name": "reviewer", "role": "reviews plans before work starts",
                "system_prompt": "You are a strict reviewer. Approve a plan only if it runs the tests."})],
            [tool_use("team_spawn", {"name": "reviewer"})],
            ["The reviewer is registered and running in the background."],
        ]
        return script[min(step, 2)]
    if prompt.startswith("Get the reviewer"):
        if step == 0:
            return ["Asking the reviewer.", tool_use("team_review", {"name": "reviewer", "plan": PLAN})]
        if step == 1 and "REJECT" in results[0]:
            return ["Rejected; adding a test step and asking again.",
                    tool_use("team_review", {"name": "reviewer", "plan": REVISED})]
        return [f"The plan is approved. Final plan:\n{REVISED}"]
    if step == 0:
        return [tool_use("team_send", {"name": "reviewer",
                                       "message": "What does notes.txt say? One line, please."})]
    if step == 1:
        return [tool_use("team_shutdown", {"name": "reviewer"})]
    news = [t for t in user_texts(request["messages"][-1]) if t.startswith(NEWS)]
    answer = news[0].splitlines()[-1] if news else "(no answer yet)"
    return [f"The reviewer answered: {answer}\nIt has acknowledged the shutdown and stopped."]


def finish(namespace: dict, workdir: Path) -> None:
    """After the session: the files the team really talked through, and the reviewer's own tool calls."""
    bus = namespace["BUS"]
    print(f"On disk: {bus.root.relative_to(workdir)}/ (one JSON line per message)")
    for agent in bus.agents():
        for message in bus.receive(agent):
            content = message.content if len(message.content) <= 60 else message.content[:57] + "..."
            print(f"  {agent + '.jsonl':<15} {message.msg_type:<8} {message.from_agent} -> {message.to_agent}: {content}")
    history = namespace["RUNNING"]["reviewer"].history
    calls = [f"{b['name']}({b['input']})" for m in history if m["role"] == "assistant"
             for b in blocks_of(m) if b.get("type") == "tool_use"]
    print(f"The reviewer's own history: {len(history)} messages; its tool calls: {', '.join(calls)}")
