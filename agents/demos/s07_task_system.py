"""Scripted model for the s07 offline demo (not a real model: every turn is written here).

The model plans a small project as a graph - one task unblocks two that can run in
parallel, and both gate the last one - tries to start the last task too early (the
board refuses and says why), then completes the tasks in order while each result
reports what it unblocked, and leaves the last task for later. Finally the demo builds
a brand-new TaskBoard from the files on disk: the board survived the session, and
it knows what is ready next. Ids always come from real results.
"""

from pathlib import Path

from offline import (last_user_text, latest_results, result_text, steps_since_prompt, task_ids,
                     tool_use)

PROMPTS = [
    "Plan the release of a tiny library as tasks: first design the data model; after that the "
    "API and the docs can be written in parallel; ship v1 only when both are done.",
    "/tasks",
    "Let's start with shipping v1 right away.",
    "OK, do the work in order; leave shipping for tomorrow.",
]

DESIGN, API, DOCS, SHIP = "Design the data model", "Build the API", "Write the docs", "Ship v1"


def plan(step: int, ids: dict) -> list:
    if step == 0:
        return [
            "I'll put the plan on the task board. The first task has no blockers.",
            tool_use(
                "task_create", {"subject": DESIGN, "description": "Entities, fields, invariants."}
            ),
        ]
    if step == 1:  # both need the id the board just returned; they can be created in one turn
        return [
            tool_use("task_create", {"subject": API, "blocked_by": [ids[DESIGN]]}),
            tool_use("task_create", {"subject": DOCS, "blocked_by": [ids[DESIGN]]}),
        ]
    if step == 2:
        return [tool_use("task_create", {"subject": SHIP, "blocked_by": [ids[API], ids[DOCS]]})]
    if step == 3:
        return [tool_use("task_list", {})]
    return [
        "The plan is on the board: the API and the docs wait for the design, "
        "and shipping waits for both."
    ]


def start_too_early(step: int, ids: dict, results: list) -> list:
    if step == 0:
        return [tool_use("task_update", {"task_id": ids[SHIP], "status": "in_progress"})]
    refusal = (
        result_text(results[0]).split("while ")[-1].split(";")[0] if results else "its blockers"
    )
    return [
        f"The board refuses: '{SHIP}' is {refusal}. Nothing ships before the work it depends on."
    ]


WORK_ORDER = [  # (subject, status); API and docs run side by side once the design is done
    (DESIGN, "in_progress"),
    (DESIGN, "completed"),
    (API, "in_progress"),
    (DOCS, "in_progress"),
    (API, "completed"),
    (DOCS, "completed"),
]


def work(step: int, ids: dict, results: list) -> list:
    if step < len(WORK_ORDER):
        subject, status = WORK_ORDER[step]
        return [tool_use("task_update", {"task_id": ids[subject], "status": status})]
    return [
        f"Three tasks are completed; each completion reported what it unblocked. "
        f"'{SHIP}' is ready and waits on the board for the next session."
    ]


def policy(request: dict) -> list:
    step, ids = steps_since_prompt(request), task_ids(request)
    results = latest_results(request)
    prompt = last_user_text(request)
    if prompt.startswith("Plan"):
        return plan(step, ids)
    if prompt.startswith("Let's start"):
        return start_too_early(step, ids, results)
    return work(step, ids, results)


def finish(namespace: dict, workdir: Path) -> None:
    """A new TaskBoard, a new process in spirit: everything it knows comes from .tasks/."""
    tasks_dir = workdir / ".tasks"
    print("=" * 70)
    print("Restart: a fresh TaskBoard reads the board back from disk.")
    print("Files:", ", ".join(sorted(p.name for p in tasks_dir.iterdir())))
    board = namespace["TaskBoard"](tasks_dir)
    print(namespace["render_board"](board.tasks()))
    print("ready() ->", [f"#{task['id']} {task['subject']}" for task in board.ready()])
    print("=" * 70)
