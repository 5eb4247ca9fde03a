"""s01: the minimal correct loop - one tool, every tool_use answered, every reply repaired
where it enters the history, a REPL that survives Ctrl-C and errors, the offline demo."""

import re
import shutil

import pytest

from conftest import AGENTS, REPO, replay_a_quirk, user
from offline import QUIRKS, ScriptedModel, latest_results, tool_use

STEP = "s01_agent_loop"


def results_in(message: dict) -> list:
    return latest_results({"messages": [message]})


@pytest.fixture
def agent(load_step):
    return load_step(STEP)


def test_offline_demo_shows_the_loop_a_repaired_reply_and_an_error_result(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stderr
    assert "OFFLINE DEMO" in done.stdout and "4 model calls" in done.stdout
    assert "[repaired the reply: tool id 'call_0' -> call_0_2]" in done.stdout
    assert "No src folder" in done.stdout  # the model read the error that came back as a result
    assert "app.py is the longest, with 40 lines" in done.stdout  # from what bash really printed


def test_the_loop_runs_every_call_and_answers_each_once_in_one_turn(agent, standin, workdir):
    (workdir / "a.txt").write_text("alpha\n")
    standin.policy = ScriptedModel(
        [
            [
                tool_use("bash", {"command": "cat a.txt"}),
                tool_use("nope", {}),
                tool_use("bash", {"bad": "argument"}),
            ],
            ["Looked at it."],
        ]
    )
    history = [user("look")]
    agent.agent_loop(history)
    assert standin.rejected == [] and len(standin.requests) == 2
    calls = [b["id"] for b in history[1]["content"] if b["type"] == "tool_use"]
    results = results_in(history[2])
    assert [r["tool_use_id"] for r in results] == calls
    assert results[0]["content"] == "alpha\n" and not results[0].get("is_error")
    assert (
        results[1]["is_error"]
        and "Unknown tool 'nope'. Available: ['bash']" in results[1]["content"]
    )
    assert results[2]["is_error"] and "unexpected keyword argument 'bad'" in results[2]["content"]
    assert history[-1]["role"] == "assistant"


def test_bash_runs_in_the_workspace_with_a_timeout_and_a_cap(agent, workdir):
    assert agent.run_bash("pwd").strip() == str(workdir)
    assert "boom" in agent.run_bash("echo boom >&2")
    agent.OUTPUT_LIMIT = 10
    assert agent.run_bash("seq 1000") == "1\n2\n3\n4\n5\n... [cut]"
    agent.BASH_TIMEOUT = 0.2
    result = agent.run_tool({"id": "t1", "name": "bash", "input": {"command": "sleep 30"}})
    assert result["is_error"] and "timed out" in result["content"]


RUNS = {
    "whitespace_text",
    "empty_text",
    "duplicate_ids",
    "reused_id",
    "odd_id",
    "empty_id",
    "call_under_end_turn",
    "unknown_stop_reason",
    "no_stop",
    "null_usage",
    "no_usage",
    "unknown_block",
}
MALFORMED = {
    "string_input",
    "list_input",
    "null_input",
    "missing_name",
    "empty_name",
}  # s02 parses strings
NO_CALL = {"whitespace_only", "tool_use_without_call"}


def test_the_quirk_lists_cover_the_catalogue():
    assert RUNS | MALFORMED | NO_CALL == set(QUIRKS)


@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_every_quirk_leaves_a_valid_history_and_the_next_prompt_is_answered(
    quirk, agent, standin, type_lines, capsys
):
    out, results, ids = replay_a_quirk(agent, standin, type_lines, capsys, quirk, quirk in NO_CALL)
    assert standin.rejected == []
    assert "answered second" in out or "answered third" in out
    assert len(ids) == len(set(ids)) == len(results)  # every call answered once, ids unique
    if quirk in RUNS:
        assert results and all("ran-42" in r["content"] for r in results)
    if quirk in MALFORMED:
        assert results and all(
            r["is_error"] and "malformed call, not run" in r["content"] for r in results
        )
    if quirk in NO_CALL:
        assert results == []
    if quirk not in (
        "call_under_end_turn",
        "unknown_stop_reason",
        "no_stop",
        "null_usage",
        "no_usage",
        "tool_use_without_call",
    ):
        assert "[repaired the reply:" in out or quirk == "whitespace_only"


def test_ids_are_repaired_deterministically_and_results_use_them(agent, standin, type_lines):
    call = tool_use("bash", {"command": "true"})
    standin.policy = ScriptedModel([QUIRKS["duplicate_ids"](call), QUIRKS["odd_id"](call), ["ok"]])
    type_lines("go")
    agent.repl()
    sent = standin.requests[-1]["messages"]
    assert [b["id"] for b in sent[1]["content"]] == ["call_0", "call_0_2"]  # the first keeps its id
    assert [b["tool_use_id"] for b in sent[2]["content"]] == ["call_0", "call_0_2"]
    assert sent[3]["content"][0]["id"] == "functions_bash_0"
    assert sent[4]["content"][0]["tool_use_id"] == "functions_bash_0"


def test_an_empty_reply_is_not_stored_and_the_next_words_join_the_turn(
    agent, standin, type_lines, capsys
):
    standin.policy = ScriptedModel([QUIRKS["whitespace_only"](None), ["fine"]])
    type_lines("first", "second")
    agent.repl()
    assert "[the model sent an empty reply; tell it how to go on]" in capsys.readouterr().out
    assert standin.requests[-1]["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        }
    ]


@pytest.mark.parametrize("lines", [["q"], ["exit"], [], ["  EXIT  "]])
def test_repl_quits_cleanly(agent, standin, type_lines, capsys, lines):
    type_lines(*lines, "never sent") if lines else type_lines()  # [] is end of input
    agent.repl()
    assert standin.requests == []


def test_ctrl_c_at_the_prompt_quits(agent, standin, monkeypatch):
    def ctrl_c(prompt):
        raise KeyboardInterrupt

    monkeypatch.setattr("builtins.input", ctrl_c)
    agent.repl()
    assert standin.requests == []


def test_an_empty_line_does_nothing(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["answered"]])
    type_lines("", "   ", "hello")
    agent.repl()
    assert "answered" in capsys.readouterr().out and len(standin.requests) == 1


def test_ctrl_c_during_a_tool_answers_every_call_and_the_repl_goes_on(
    agent, standin, type_lines, capsys
):
    def interrupted(command):
        raise KeyboardInterrupt

    agent.TOOL_HANDLERS["bash"] = interrupted
    standin.policy = ScriptedModel(
        [
            [tool_use("bash", {"command": "one"}), tool_use("bash", {"command": "two"})],
            ["moving on"],
        ]
    )
    type_lines("do two things", "next")
    agent.repl()
    out = capsys.readouterr().out
    assert "[interrupted by the user]" in out and "moving on" in out
    assert standin.rejected == []
    answered = results_in(standin.requests[1]["messages"][2])
    assert [r["content"] for r in answered] == ["Error: interrupted by the user"] * 2


def test_an_api_error_is_one_line_and_the_next_prompt_is_answered(
    agent, standin, type_lines, capsys
):
    standin.policy = ScriptedModel([["second answer"]])
    standin.fail_next(400)
    type_lines("first", "second")
    agent.repl()
    out = capsys.readouterr().out
    assert "[BadRequestError: " in out and "second answer" in out
    assert standin.rejected == [] and "Traceback" not in out


def test_a_lone_surrogate_in_a_tool_input_fails_every_later_request_as_the_walkthrough_says(
    agent, standin, type_lines, capsys
):
    """What s01 leaves to s02: the call is stored with its input, so no later request of the
    session goes through - the SDK cannot encode it, or (sent escaped) the API refuses it."""
    standin.policy = ScriptedModel(
        [[tool_use("bash", {"command": "echo \udc00"})], ["never answered"], ["never answered"]]
    )
    type_lines("run it", "hello again", "and again")
    agent.repl()
    out = capsys.readouterr().out
    assert len(standin.calls) == 1 and "never answered" not in out
    failed = [line for line in out.splitlines() if re.match(r"\[\w+Error: ", line)]
    assert len(failed) == 3, out  # one line at each prompt: the request after the call, then each
    said = {
        lang: " ".join((REPO / "docs" / lang / f"{STEP}.md").read_text("utf-8").split())
        for lang in ("en", "zh")
    }
    assert "from then on every request fails" in said["en"]
    assert "之后的每一个请求都会失败" in said["zh"]


def test_ctrl_c_during_the_model_call_marks_nothing_and_the_repl_goes_on(
    agent, standin, type_lines, capsys, monkeypatch
):
    real_create = agent.client.messages.create
    calls = []

    def create_then_ctrl_c(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_create(**kwargs)

    monkeypatch.setattr(agent.client.messages, "create", create_then_ctrl_c)
    standin.policy = ScriptedModel([["the next answer"]])
    type_lines("tell me everything", "shorter please")
    agent.repl()
    out = capsys.readouterr().out
    assert "[interrupted by the user]" in out and "the next answer" in out
    assert standin.rejected == []
    assert standin.requests[0]["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "tell me everything"},
                {"type": "text", "text": "shorter please"},
            ],
        }
    ]


def test_standalone_copy_runs_with_a_key_and_explains_without_one(run_step, standin, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(AGENTS / f"{STEP}.py", alone / "agent.py")
    standin.policy = ScriptedModel([[tool_use("bash", {"command": "echo made > x.txt"})], ["ok"]])
    done = run_step(STEP, "go\n", script=alone / "agent.py", cwd=alone)
    assert done.returncode == 0, done.stderr
    assert (alone / "x.txt").read_text() == "made\n" and "ok" in done.stdout
    keyless = run_step(
        STEP,
        "",
        script=alone / "agent.py",
        cwd=alone,
        env={"ANTHROPIC_API_KEY": None, "ANTHROPIC_BASE_URL": None},
    )
    assert keyless.returncode != 0
    assert "ANTHROPIC_API_KEY" in keyless.stderr and "agents/offline" in keyless.stderr
    assert "ANTHROPIC_AUTH_TOKEN" in keyless.stderr  # either credential works
    assert "Traceback" not in keyless.stderr


def test_each_result_is_shown_under_its_call_first_lines_only(agent, standin, type_lines, capsys):
    """The learner sees what bash answered - the model's next words refer to it."""
    lines = "".join(f"line{n}\\n" for n in range(1, 7))
    standin.policy = ScriptedModel([[tool_use("bash", {"command": f"printf '{lines}'"})], ["ok"]])
    type_lines("go")
    agent.repl()
    out = capsys.readouterr().out
    assert "  line1\n  line2\n  line3\n  line4\n" in out  # indented under the call
    assert "  line5" not in out  # only the first lines: the model gets all of them
    assert "line6" in latest_results(standin.requests[-1])[0]["content"]


def test_a_plain_string_turn_from_the_sdks_examples_takes_more_text(agent):
    history = [{"role": "user", "content": "go"}]
    agent.add_user_text(history, "and then this")
    assert history == [{"role": "user", "content": [{"type": "text", "text": "go"},
                                                    {"type": "text", "text": "and then this"}]}]


def test_each_repair_says_what_it_did_and_why(agent, standin, type_lines, capsys):
    """An empty text, an unknown block and a malformed call are three different repairs, and
    each says so; a malformed call's result also says what a call needs."""
    standin.policy = ScriptedModel(
        [QUIRKS["whitespace_text"](tool_use("bash", {"command": "true"})), ["one"],
         QUIRKS["unknown_block"](tool_use("bash", {"command": "true"})), ["two"],
         QUIRKS["null_input"](tool_use("bash", {"command": "true"})), ["three"]]
    )
    type_lines("a", "b", "c")
    agent.repl()
    out = capsys.readouterr().out
    assert "[repaired the reply: dropped an empty text block]" in out
    assert "left out a 'server_tool_use' block (a type this harness does not know)" in out
    malformed = latest_results(standin.requests[-1])[0]["content"]
    assert "a tool call needs a name and an object input; received name='bash', input=None" in (
        malformed
    )
