"""s04: the subagent tool - a child on a fresh history whose work never reaches the parent's,
its limits (turns, report size, a failing or malformed reply, Ctrl-C), and the cost it adds.

The stand-in answers the parent and the child from two scripts (`Script`): a request is the
child's when its system prompt is the child's."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque

import pytest

from conftest import AGENTS, step_env, user, wait_until
from offline import (QUIRKS, latest_results, reply, run_play, scripted_input, tool_use,
                     validate_request)

STEP = "s04_subagent"
ASK = tool_use("subagent", {"description": "look around", "prompt": "count the files here"})


@pytest.fixture
def agent(load_step):
    return load_step(STEP)


class Script:
    """A policy: the parent's turns and the child's turns, each played in order."""

    def __init__(self, parent: list, child: list):
        self.turns = {"parent": deque(parent), "child": deque(child)}

    def __call__(self, request: dict):
        who = "child" if is_child(request) else "parent"
        turn = self.turns[who].popleft() if self.turns[who] else [f"({who} has no more turns)"]
        return turn(request) if callable(turn) else turn


def is_child(request: dict) -> bool:
    return "You are a subagent" in json.dumps(request.get("system"))


def split(standin) -> tuple:
    parent = [r for r in standin.requests if not is_child(r)]
    return parent, [r for r in standin.requests if is_child(r)]


def valid(agent, history: list) -> bool:
    """The history, sent as the next request, passes the API's checks (plus a new question)."""
    messages = json.loads(json.dumps(history))
    agent.add_user_text(messages, "and now?")
    body = {"model": "m", "max_tokens": 1, "messages": messages, "tools": agent.TOOLS}
    return validate_request(body) is None


def the_result(history: list) -> dict:
    """The one tool_result that answered the parent's subagent call."""
    call_id = next(b["id"] for m in history for b in m["content"] if b.get("name") == "subagent")
    found = [b for m in history for b in m["content"] if b.get("tool_use_id") == call_id]
    assert len(found) == 1
    return found[0]


def delegate(agent, standin, child: list, after: list = (["done"],)) -> list:
    """One parent turn that hands ASK to a child playing `child`; the parent's history."""
    standin.policy = Script([[ASK], *after], child)
    history = [user("please delegate")]
    agent.agent_loop(history)
    return history


# -- What the child sees, and what comes back -------------------------------------------------
def test_the_child_starts_from_the_prompt_alone_and_cannot_delegate(agent, standin):
    standin.policy = Script([["PARENT-ONLY context"], [ASK], ["done"]], [["3 files"]])
    history = [user("remember PARENT-ONLY")]
    agent.agent_loop(history)
    agent.add_user_text(history, "now delegate")
    agent.agent_loop(history)
    parent, child = split(standin)
    assert child[0]["messages"] == [user("count the files here")]
    assert child[0]["system"] == agent.SUBAGENT_SYSTEM and "PARENT-ONLY" not in json.dumps(child)
    names = [tool["name"] for tool in parent[-1]["tools"]]
    assert "subagent" in names
    assert [tool["name"] for tool in child[0]["tools"]] == [n for n in names if n != "subagent"]
    assert standin.rejected == []


def test_a_tool_output_of_the_child_never_reaches_the_parent(agent, standin, workdir):
    (workdir / "secret.txt").write_text("CHILD-ONLY-4242\n")
    standin.policy = Script(
        [[ASK], ["done"], ["still fine"]],
        [[tool_use("read_file", {"path": "secret.txt"})], ["The file holds one number."]],
    )
    history = [user("delegate")]
    agent.agent_loop(history)
    agent.add_user_text(history, "and later?")
    agent.agent_loop(history)
    parent, child = split(standin)
    assert "CHILD-ONLY-4242" in json.dumps(child[1]), "the child did read it"
    assert len(parent) == 3 and not any("CHILD-ONLY-4242" in json.dumps(r) for r in parent)
    result = the_result(history)
    assert result["content"].startswith("The file holds one number.\n[2 model calls, 1 tool ")
    assert not result.get("is_error") and standin.rejected == []


def test_several_subagent_calls_run_one_after_the_other(agent, standin):
    calls = [tool_use("subagent", {"description": n, "prompt": f"task {n}"}) for n in "AB"]
    child = [[tool_use("bash", {"command": "echo hi"})], ["report"]] * 2
    standin.policy = Script([calls, ["both done"]], child)
    history = [user("two side tasks")]
    agent.agent_loop(history)
    prompts = [r["messages"][0]["content"][0]["text"] for r in split(standin)[1]]
    assert prompts == ["task A", "task A", "task B", "task B"]
    assert len(latest_results(split(standin)[0][-1])) == 2 and standin.rejected == []


def test_a_child_that_calls_subagent_anyway_gets_a_refusal(agent, standin):
    history = delegate(agent, standin, [[ASK], ["did it myself"]])
    child = split(standin)[1]
    refusal = latest_results(child[1])[0]
    assert refusal["is_error"] and "a subagent cannot start another" in refusal["content"]
    assert len(child) == 2 and the_result(history)["content"].startswith("did it myself")


# -- Limits: each one clear result, and a valid history ------------------------------------------
def test_the_turn_limit_stops_the_child_with_the_text_it_had(agent, standin, workdir):
    agent.SUBAGENT_TURNS = 3
    child = [[f"looking, step {n}", tool_use("write_file", {"path": f"{n}.txt", "content": "x"})]
             for n in (1, 2, 3)]
    history = delegate(agent, standin, child + [["never asked"]])
    result = the_result(history)
    assert len(split(standin)[1]) == 3 and not result.get("is_error")
    assert result["content"].startswith("looking, step 3\n[stopped at the limit of 3 model calls")
    assert "2 tool calls" in result["content"], "the last call's result would reach no model"
    assert [(workdir / f"{n}.txt").exists() for n in (1, 2, 3)] == [True, True, False]
    assert "step 2" not in result["content"] and valid(agent, history)


def test_a_long_report_is_cut_and_says_so(agent, standin):
    history = delegate(agent, standin, [["A" * 20_000 + "B" * 5_000]])
    content = the_result(history)["content"]
    assert content.startswith("A" * 20_000 + "\n... [report cut at 20,000 of 25,000 characters]")
    assert "B" not in content.split("]")[0] and valid(agent, history)


@pytest.mark.parametrize(
    "last,said",
    [
        (reply(["half a rep"], "max_tokens"), "half a rep\n[cut off at max_tokens (8000)"),
        (reply([], "refusal"), "(the subagent wrote no report)\n[the model declined"),
        (reply([]), "(the subagent wrote no report)\n[its last reply was empty; above is "),
    ],
)
def test_a_child_that_ends_early_says_why(agent, standin, last, said):
    history = delegate(agent, standin, [last])
    assert the_result(history)["content"].startswith(said) and valid(agent, history)


def test_an_empty_last_reply_is_not_taken_for_the_report(agent, standin):
    child = [["Let me look first.", tool_use("bash", {"command": "echo x"})], reply([])]
    history = delegate(agent, standin, child)
    assert the_result(history)["content"].startswith(
        "Let me look first.\n[its last reply was empty; above is the last text it wrote]\n"
        "[2 model calls, 1 tool call, "
    )
    assert valid(agent, history)


def failing_after(standin, fault, blocks):
    """A turn that makes the next request (the child's) fail with `fault`."""

    def turn(request):
        standin.fail_next(fault)
        return blocks

    return turn


@pytest.mark.parametrize(
    "fault,said",
    [(400, "BadRequestError: "), ("no_content", "APIError: not a valid reply"),
     ("html", "APIError: not a valid reply")],
)
def test_a_failing_child_is_one_error_result_and_the_repl_goes_on(
    agent, standin, type_lines, capsys, fault, said
):
    bash = tool_use("bash", {"command": "echo one"})
    standin.policy = Script([[ASK], ["it failed, sorry"], ["next answer"]],
                            [failing_after(standin, fault, [bash])])
    type_lines("delegate", "next")
    agent.repl()
    parent = split(standin)[0]
    result = latest_results(parent[1])[0]
    assert result["is_error"] and result["content"].startswith(
        "Error: the subagent stopped, its work lost, after 1 model call, 1 tool call, input "
    )
    assert said in result["content"]
    assert "next answer" in capsys.readouterr().out and len(parent) == 3
    assert standin.rejected == []


def test_every_reply_quirk_inside_the_child_leaves_both_histories_valid(agent, standin):
    call = tool_use("bash", {"command": "echo quirk"})
    for quirk in sorted(QUIRKS):  # one module for the catalogue: each load costs a client
        history = delegate(agent, standin, [QUIRKS[quirk](call), ["child done"], ["again"]])
        assert standin.rejected == [] and valid(agent, history), quirk
        assert the_result(history)["content"], quirk  # one result, whatever the child did


# -- Ctrl-C inside the child ----------------------------------------------------------------
def test_ctrl_c_in_a_child_tool_answers_the_call_interrupted(agent, standin, type_lines, capsys):
    def interrupted(command):
        raise KeyboardInterrupt

    real_bash = agent.TOOL_HANDLERS["bash"]
    agent.TOOL_HANDLERS["bash"] = interrupted
    again = tool_use("subagent", {"description": "again", "prompt": "second try"})

    def restore(request):
        agent.TOOL_HANDLERS["bash"] = real_bash
        return [again]

    standin.policy = Script([[ASK], restore, ["fine"]],
                            [[tool_use("bash", {"command": "echo x"})], ["second report"]])
    type_lines("delegate", "next")
    agent.repl()
    assert "[interrupted by the user]" in capsys.readouterr().out
    parent = split(standin)[0]
    assert [r["content"] for r in latest_results({"messages": [parent[1]["messages"][2]]})] == [
        "Error: interrupted by the user"
    ]
    assert latest_results(parent[2])[0]["content"].startswith("second report"), "a child again"
    assert standin.rejected == []


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_real_sigint_while_the_child_runs_bash_keeps_the_parent_valid(
    agent, standin, type_lines, capsys, workdir
):
    started = workdir / "started"
    agent.BASH_TIMEOUT = 60
    sleep = tool_use("bash", {"command": f"touch {started} && sleep 30"})
    standin.policy = Script([[ASK], ["fine"]], [[sleep]])
    threading.Thread(
        target=lambda: wait_until(started.exists) and os.kill(os.getpid(), signal.SIGINT),
        daemon=True,
    ).start()
    type_lines("delegate", "next")
    agent.repl()
    assert "[interrupted by the user]" in capsys.readouterr().out
    parent = split(standin)[0]
    assert len(parent) == 2 and standin.rejected == []
    assert "Error: interrupted by the user" in json.dumps(parent[1]["messages"][2])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_in_the_terminal_while_a_child_works_keeps_the_repl(standin, workdir):
    """As a learner presses it: SIGINT to the step's process while the child's bash sleeps."""
    started = workdir / "started"
    sleep = tool_use("bash", {"command": f"touch {started} && sleep 30"})
    standin.policy = Script([[ASK], ["the next answer"]], [[sleep]])
    step = subprocess.Popen([sys.executable, str(AGENTS / f"{STEP}.py")], cwd=workdir,
                            env=step_env(standin, {}), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        step.stdin.write("delegate\n")
        step.stdin.flush()
        assert wait_until(started.exists, timeout=60)
        step.send_signal(signal.SIGINT)
        out, err = step.communicate("next\n", timeout=60)
    finally:
        step.kill()
    assert step.returncode == 0 and "Traceback" not in err, err
    assert "[interrupted by the user]" in out and "the next answer" in out
    parent = split(standin)[0]
    assert "Error: interrupted by the user" in json.dumps(parent[1]["messages"][2])
    assert standin.rejected == []


# -- The cost of delegation ----------------------------------------------------------------
def usage_sums(standin, child: bool) -> dict:
    replies = [c["reply"] for c in standin.calls if is_child(c["request"]) == child]
    totals = {key: sum((r["usage"] or {}).get(key) or 0 for r in replies)
              for key in ("input_tokens", "cache_read_input_tokens",
                          "cache_creation_input_tokens", "output_tokens")}
    return {**totals, "calls": len(replies)}


def test_cost_adds_the_childs_usage_and_tolerates_null_usage(agent, standin, workdir, capsys):
    (workdir / "big.txt").write_text("word " * 2_000)
    read = tool_use("read_file", {"path": "big.txt"})
    child = [[read], reply([tool_use("bash", {"command": "echo y"})]), QUIRKS["null_usage"](read),
             ["small report"]]
    history = delegate(agent, standin, child)
    agent.run_slash_command("/cost", history)
    out = capsys.readouterr().out
    for ledger, is_kid in ((agent.COST_PARENT, False), (agent.COST_SUBAGENTS, True)):
        expected = usage_sums(standin, is_kid)
        assert {key: ledger[key] for key in expected} == expected
    assert agent.COST_SUBAGENTS["calls"] == 4 and agent.COST_SUBAGENTS["cache_read_input_tokens"]
    line = re.search(r"subagents: .*largest context ([\d,]+) tokens", out)
    parent_line = re.search(r"parent: .*largest context ([\d,]+) tokens", out)
    assert int(line.group(1).replace(",", "")) > 2 * int(parent_line.group(1).replace(",", ""))
    total = agent.COST_PARENT["output_tokens"] + agent.COST_SUBAGENTS["output_tokens"]
    assert re.search(rf"total: \d+ model calls, .*output {total:,}\n", out)
    assert "[4 model calls, 3 tool calls, input " in the_result(history)["content"]


# -- As a learner runs it -----------------------------------------------------------------------
def test_offline_demo_delegates_and_shows_both_contexts(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[subagent: find debug settings in services/]" in out
    assert "Debug mode is on in: images, search." in out
    sizes = {who: int(n.replace(",", "")) for who, n in
             re.findall(r"^(parent|subagents): .*largest context ([\d,]+) tokens$", out, re.M)}
    assert sizes["subagents"] > 5 * sizes["parent"], sizes
    assert "0 rejected by the validator" in out


def test_the_trace_shows_the_child_as_its_own_agent(offline_demo):
    page = offline_demo(STEP).trace.read_text(encoding="utf-8")
    assert 'data-agent="subagent"' in page and "You are a subagent" in page
    parent = page.split('id="call-1"')[1].split('id="call-2"')[0]
    assert '<a href="#call-2">subagent\'s call 2, started by this reply &rarr;</a>' in parent


def play(capsys, monkeypatch, lines: list, play_all: bool) -> str:
    """Play mode in this process, as `--play --demo` (or `--play all --demo`) runs it."""
    monkeypatch.setattr("builtins.input", scripted_input(lines))
    code = run_play(str(AGENTS / f"{STEP}.py"), play_all, seeded=True, trace=None)
    out = capsys.readouterr().out
    assert code == 0 and "0 rejected by the validator." in out, out
    return out


def test_play_the_learner_is_the_parent_and_the_demo_answers_the_child(capsys, monkeypatch):
    ask = '@subagent {"description": "scan", "prompt": "read services/ and report"}'
    out = play(capsys, monkeypatch, ["delegate it", ask, "", "images and search.", ""], False)
    shown = out.split("--- model call ")[1:]
    assert len(shown) == 2 and "[play] 12 model calls answered" in out, "10 by the demo's child"
    assert "the subagent calls follow the demo's script" in out
    assert "result (subagent):\n      Read 8 files in services/:" in shown[1]


def test_play_all_asks_for_the_childs_calls_too(capsys, monkeypatch):
    ask = '@subagent {"description": "scan", "prompt": "say hi"}'
    lines = ["delegate it", ask, "", "hi from the child", "", "got it", ""]
    shown = play(capsys, monkeypatch, lines, True).split("--- model call ")[1:]
    assert len(shown) == 3 and shown[1].startswith("2 · subagent")
    assert "You are a subagent" in shown[1] and "user: say hi" in shown[1]
    assert "subagent(" not in shown[1] and "hi from the child" in shown[2]
