"""s03: the session TODO list, its tools, the transient nag reminder, and the REPL commands."""

import copy
import json

import pytest

from offline import ScriptedModel, latest_results, tool_use, validate_request

STEP = "s03_todo"
REMINDER_HEAD = "You still have unfinished TODO items. Keep them in sync with your progress."


@pytest.fixture
def agent(load_step):
    return load_step(STEP)


def add(task, **extra):
    return tool_use("todo_write", {"action": "add", "task": task, **extra})


def update(task_id, status):
    return tool_use("todo_write", {"action": "update", "task_id": task_id, "status": status})


def bash(command="echo working"):
    return tool_use("bash", {"command": command})


def nags_in(request: dict) -> list:
    """(message index, block index) of every block that carries a reminder, as a text block
    of its own or inside a tool_result's content."""
    found = []
    for i, message in enumerate(request["messages"]):
        blocks = (
            message["content"]
            if isinstance(message["content"], list)
            else [{"type": "text", "text": message["content"]}]
        )
        found += [(i, j) for j, block in enumerate(blocks) if "<nag-reminder>" in json.dumps(block)]
    return found


def without_reminder(message: dict) -> dict:
    """The message as the history holds it: the request's copy minus its reminder."""
    blocks = list(message["content"])
    last = blocks[-1]
    if last["type"] == "tool_result":
        inner = last["content"][:-1]
        blocks[-1] = {**last, "content": inner[0]["text"] if len(inner) == 1 else inner}
    else:
        blocks = blocks[:-1]
    return {**message, "content": blocks}


# -- TodoManager ---------------------------------------------------------------------
def test_list_text_is_exact(agent):
    todos = agent.TodoManager()
    assert todos.list() == "No TODO items."
    todos.add("Create planner")
    todos.add("Write tests", "high")
    todos.update("t1", "done")
    assert todos.list() == (
        "TODO items:\n- t1 [done] (normal) Create planner\n- t2 [pending] (high) Write tests"
    )


def test_ids_count_up_and_are_never_reused(agent):
    todos = agent.TodoManager()
    assert [todos.add(f"item {n}") for n in range(3)] == ["t1", "t2", "t3"]
    with pytest.raises(ValueError):
        todos.add("   ")  # a refused add does not use up an id
    assert todos.add("fourth") == "t4"
    todos.update("t2", "done")
    assert todos.add("fifth") == "t5"
    assert list(todos.items) == ["t1", "t2", "t3", "t4", "t5"]
    todos.reset()  # a new conversation starts a new sequence
    assert todos.list() == "No TODO items." and todos.add("again") == "t1"


@pytest.mark.parametrize(
    "given,stored",
    [
        (None, "normal"),
        ("", "normal"),
        ("   ", "normal"),
        ("  high ", "high"),
        ("someday maybe", "someday maybe"),
    ],
)
def test_priority_is_a_stripped_label_with_default(agent, given, stored):
    todos = agent.TodoManager()
    task_id = (
        todos.add("  Task with spaces  ", given)
        if given is not None
        else todos.add("  Task with spaces  ")
    )
    assert todos.items[task_id] == {
        "task": "Task with spaces",
        "status": "pending",
        "priority": stored,
    }


def test_update_accepts_exactly_three_statuses(agent):
    todos = agent.TodoManager()
    todos.add("x")
    for status in ("in_progress", "done", "pending"):
        todos.update("t1", status)
        assert todos.items["t1"]["status"] == status
    for bad in ("failed", "DONE", "completed", ""):
        with pytest.raises(ValueError, match="allowed: pending, in_progress, done"):
            todos.update("t1", bad)
    assert todos.items["t1"]["status"] == "pending"


def test_nag_reminder_text_lists_only_unfinished_items(agent):
    todos = agent.TodoManager()
    todos.silent_calls = agent.NAG_AFTER
    assert todos.nag_reminder() is None  # nothing to nag about
    todos.add("Create planner")
    todos.add("Write tests", "high")
    todos.add("Ship it")
    todos.update("t1", "done")
    todos.update("t2", "in_progress")
    assert todos.nag_reminder() == (
        "<nag-reminder>\n" + REMINDER_HEAD + "\n"
        "- t2 [in_progress] (high) Write tests\n"
        "- t3 [pending] (normal) Ship it\n</nag-reminder>"
    )
    todos.silent_calls = agent.NAG_AFTER - 1
    assert todos.nag_reminder() is None  # not stale yet
    todos.silent_calls = agent.NAG_AFTER
    todos.update("t2", "done")
    todos.update("t3", "done")
    assert todos.nag_reminder() is None


# -- The tools, through the real loop ---------------------------------------------------
def test_todo_tools_add_update_and_read(agent, standin):
    standin.policy = ScriptedModel(
        [
            [add("Plan", priority=" high "), add("Build")],
            [update("t1", "done"), tool_use("todo_read")],
            ["ok"],
        ]
    )
    agent.agent_loop([{"role": "user", "content": "go"}])
    added = [r["content"] for r in latest_results(standin.requests[1])]
    assert added == ["Added t1 (high): Plan", "Added t2 (normal): Build"]
    updated, listed = latest_results(standin.requests[2])
    assert updated["content"] == "Updated t1: now done"
    assert (
        listed["content"] == "TODO items:\n- t1 [done] (high) Plan\n- t2 [pending] (normal) Build"
    )
    assert standin.rejected == []


TOOL_ERRORS = [
    ("add_without_task", {"action": "add"}, "action 'add' needs 'task'"),
    ("add_blank_task", {"action": "add", "task": "  "}, "action 'add' needs 'task'"),
    (
        "update_without_task_id",
        {"action": "update", "status": "done"},
        "action 'update' needs task_id",
    ),
    (
        "update_without_status",
        {"action": "update", "task_id": "t1"},
        "needs task_id and status (one of: pending",
    ),
    (
        "unknown_id",
        {"action": "update", "task_id": "t9", "status": "done"},
        "unknown TODO id 't9' (known ids: t1)",
    ),
    (
        "invalid_status",
        {"action": "update", "task_id": "t1", "status": "finished"},
        "invalid status 'finished'; allowed: pending, in_progress, done",
    ),
    (
        "unknown_action",
        {"action": "delete", "task_id": "t1"},
        "unknown action 'delete'; use 'add' or 'update'",
    ),
    ("missing_action", {"task": "x"}, "missing required argument(s) ['action']"),
]


@pytest.mark.parametrize("name,args,expected", TOOL_ERRORS, ids=[e[0] for e in TOOL_ERRORS])
def test_todo_write_errors_are_clear_error_results(agent, standin, name, args, expected):
    standin.policy = ScriptedModel(
        [[add("existing")], [tool_use("todo_write", args)], ["recovered"]]
    )
    history = [{"role": "user", "content": "go"}]
    agent.agent_loop(history)
    [result] = latest_results(standin.requests[2])
    assert result["is_error"] is True
    assert expected in result["content"]
    assert agent.TODOS.list() == "TODO items:\n- t1 [pending] (normal) existing"  # nothing changed
    assert history[-1]["content"][0]["text"] == "recovered"


# -- The reminder ------------------------------------------------------------------------
def test_reminder_only_after_nag_after_silent_calls(agent, standin):
    assert agent.NAG_AFTER == 3
    standin.policy = ScriptedModel(
        [
            [add("Write the report")],  # call 1 uses the list: counter 0
            [bash()],
            [bash()],
            [bash()],  # calls 2-4 ignore it: counter 1, 2, 3
            [update("t1", "in_progress")],  # call 5 is nagged, then uses the list: counter 0
            [bash()],
            [bash()],  # calls 6-7: counter 1, 2 - not stale yet
            ["done for now"],
        ]
    )
    agent.agent_loop([{"role": "user", "content": "write the report"}])
    nagged = [i for i, request in enumerate(standin.requests) if nags_in(request)]
    assert nagged == [4]
    assert standin.rejected == []


def test_reminder_repeats_while_the_list_stays_ignored(agent, standin):
    standin.policy = ScriptedModel(
        [[add("a")], [bash()], [bash()], [bash()], [bash()], [bash()], ["end"]]
    )
    agent.agent_loop([{"role": "user", "content": "go"}])
    assert [bool(nags_in(r)) for r in standin.requests] == [
        False,
        False,
        False,
        False,
        True,
        True,
        True,
    ]
    # transient: each request carries exactly one reminder, never an older one
    assert [len(nags_in(r)) for r in standin.requests[4:]] == [1, 1, 1]


def test_no_reminder_when_every_item_is_done(agent, standin):
    standin.policy = ScriptedModel(
        [[add("a"), add("b")], [update("t1", "done"), update("t2", "done")]]
        + [[bash()]] * 6
        + [["end"]]
    )
    agent.agent_loop([{"role": "user", "content": "go"}])
    assert agent.TODOS.silent_calls == 7  # stale, but nothing is left to do
    assert len(standin.requests) == 9 and not any(nags_in(r) for r in standin.requests)


def test_no_reminder_without_a_list_even_across_turns(agent, standin):
    standin.policy = ScriptedModel([[bash()], ["answer"]] * 4)
    history = []
    for n in range(4):
        agent.add_user_text(history, f"prompt {n}")
        agent.agent_loop(history)
    assert agent.TODOS.silent_calls == 8
    assert len(standin.requests) == 8 and not any(nags_in(r) for r in standin.requests)


def test_nag_after_is_the_threshold(agent, standin):
    agent.NAG_AFTER = 1
    standin.policy = ScriptedModel([[add("a")], [bash()], ["end"]])
    agent.agent_loop([{"role": "user", "content": "go"}])
    assert [bool(nags_in(r)) for r in standin.requests] == [False, False, True]


def test_reminder_rides_inside_the_last_tool_result_never_after_it(agent, standin):
    """Anthropic's docs link text blocks right after tool results to empty end_turn replies;
    today's main put the reminder exactly there."""
    standin.policy = ScriptedModel(
        [
            [add("Collect data"), add("Summarise")],
            [bash("echo 1")],
            [bash("echo 2")],
            [bash("echo a"), tool_use("read_file", {"path": "missing.txt"}), bash("echo c")],
            ["stopping here"],
        ]
    )
    history = [{"role": "user", "content": "go"}]
    agent.agent_loop(history)
    request = standin.requests[4]
    latest = request["messages"][-1]
    assert nags_in(request) == [(len(request["messages"]) - 1, 2)]
    assert [b["type"] for b in latest["content"]] == [
        "tool_result"
    ] * 3  # no text block after the results
    uses = [b["id"] for b in request["messages"][-2]["content"] if b["type"] == "tool_use"]
    assert [
        b["tool_use_id"] for b in latest["content"]
    ] == uses  # results still answer the tool_uses
    assert latest["content"][2]["content"] == [
        {"type": "text", "text": "c"},
        {
            "type": "text",
            "text": "<nag-reminder>\n" + REMINDER_HEAD + "\n- t1 [pending] (normal) Collect data\n"
            "- t2 [pending] (normal) Summarise\n</nag-reminder>",
        },
    ]
    assert validate_request(request) is None and standin.rejected == []


def test_history_never_holds_a_reminder(agent, standin):
    standin.policy = ScriptedModel(
        [[add("a")], [bash()], [bash()], [bash()], [bash(), bash()], [bash()], ["x"]]
    )
    history = [{"role": "user", "content": "go"}]
    agent.agent_loop(history)
    assert sum(bool(nags_in(r)) for r in standin.requests) == 3  # it did fire...
    assert "nag-reminder" not in json.dumps(history)  # ...yet the record is untouched
    for (
        request
    ) in standin.requests:  # each request is the history as it was then, plus the one reminder
        sent = request["messages"]
        if nags_in(request):
            sent = sent[:-1] + [without_reminder(sent[-1])]
        assert sent == history[: len(sent)]


def test_after_the_users_words_the_reminder_joins_their_text(agent):
    history = [{"role": "user", "content": "hello"}]
    before = copy.deepcopy(history)
    assert agent.with_nag_reminder(history, None) is history  # nothing to say: sent as is
    sent = agent.with_nag_reminder(history, "<nag-reminder>\nx\n</nag-reminder>")
    assert history == before  # the caller's list and messages are untouched
    assert sent[0]["content"] == [
        {"type": "text", "text": "hello"},
        {"type": "text", "text": "<nag-reminder>\nx\n</nag-reminder>"},
    ]
    assert validate_request({"model": "m", "max_tokens": 1, "messages": sent}) is None


# -- The REPL -----------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["/clear", "/new"])
def test_clear_and_new_reset_list_and_conversation(agent, standin, type_lines, capsys, command):
    standin.policy = ScriptedModel([[add("First job")], ["planned"], ["fresh start"]])
    type_lines("plan it", "/todos", command, "/todos", "what now?")
    agent.repl()
    out = capsys.readouterr().out
    assert "TODO items:\n- t1 [pending] (normal) First job" in out
    after = out.split(command, 1)[1]
    assert "No TODO items." in after and "First job" not in after
    assert standin.requests[-1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what now?"}]}
    ]
    assert agent.TODOS.next_number == 1 and agent.TODOS.silent_calls == 1


def test_a_run_from_main_nags_and_lists(run_in_process, standin, workdir):
    """The step as `python agents/s03_todo.py` runs it, with the lines piped in (in-process: the
    process boundary is s02's test; the demo runs this step as a process)."""
    standin.policy = ScriptedModel(
        [
            [add("Write a.txt"), add("Write b.txt", priority="low")],
            [tool_use("write_file", {"path": "a.txt", "content": "a"})],
            [tool_use("write_file", {"path": "b.txt", "content": "b"})],
            [bash("cat a.txt b.txt")],
            [update("t1", "done"), update("t2", "done")],
            ["both written"],
        ]
    )
    done = run_in_process(STEP, "write both files\n/todos\n")
    assert done.returncode == 0, done.stderr
    assert (workdir / "a.txt").read_text() == "a" and (workdir / "b.txt").read_text() == "b"
    out = done.stdout
    assert "s03 >> " in out and "> todo_write:" in out and "Added t2 (low): Write b.txt" in out
    assert "<nag-reminder>\n" + REMINDER_HEAD + "\n- t1 [pending] (normal) Write a.txt" in out
    assert "TODO items:\n- t1 [done] (normal) Write a.txt\n- t2 [done] (low) Write b.txt" in out
    assert [bool(nags_in(r)) for r in standin.requests] == [False] * 4 + [True, False]
    assert standin.rejected == [] and done.stderr == ""


def test_offline_demo_shows_the_reminder_at_work(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stderr
    out = done.stdout
    planned, nagged, listed = (
        out.index("Added t3"),
        out.index("<nag-reminder>"),
        out.index("s03 >> /todos"),
    )
    assert planned < nagged < listed  # plan, forget, get reminded, then list
    assert "test_greet: 1 passed" in out  # the work really ran
    assert "- t1 [in_progress] (high) Write greet.py" in out[nagged:]
    assert out[listed:].count("[done]") == 3 and "[pending]" not in out[listed:]
    assert "0 rejected by the validator" in out
