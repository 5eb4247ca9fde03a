"""s01: the minimal loop, its four tools, and how it survives bad input and failures."""

import os
import shutil
import sys

import pytest

from offline import ScriptedModel, latest_results, tool_use

STEP = "s01_agent_loop"


def results_sent(standin, request_index: int) -> list:
    """The tool_result blocks that the loop sent in a given request."""
    return latest_results(standin.requests[request_index])


# -- End to end, as a learner runs it ------------------------------------------------
def test_subprocess_run_writes_file_and_prints_answer(run_step, standin, workdir):
    standin.policy = ScriptedModel([
        [tool_use("write_file", {"path": "out/hello.txt", "content": "hi there\n"})],
        [tool_use("bash", {"command": "cat out/hello.txt"})],
        ["All done: the file says hi."],
    ])
    done = run_step(STEP, "write the file\n")
    assert done.returncode == 0, done.stderr
    assert (workdir / "out" / "hello.txt").read_text() == "hi there\n"
    assert "s01 >> " in done.stdout
    assert "> write_file:" in done.stdout and "hi there" in done.stdout
    assert "All done: the file says hi." in done.stdout
    assert done.stderr == ""  # no SDK warnings on a normal run
    assert len(standin.requests) == 3 and standin.rejected == []


def test_dotenv_in_current_folder_is_read_and_shell_wins(run_step, standin, workdir):
    (workdir / ".env").write_text(f"ANTHROPIC_BASE_URL={standin.url}\nANTHROPIC_API_KEY=from-dotenv\n"
                                  "MODEL_ID=model-from-dotenv\n")
    standin.policy = ScriptedModel([["hello"]])
    done = run_step(STEP, "hi\n", env={"ANTHROPIC_BASE_URL": None, "ANTHROPIC_API_KEY": None,
                                        "MODEL_ID": "model-from-shell"})
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout
    assert standin.requests[0]["model"] == "model-from-shell"


def test_auth_token_is_enough(run_step, standin):
    standin.policy = ScriptedModel([["token accepted"]])
    done = run_step(STEP, "hi\n", env={"ANTHROPIC_API_KEY": None, "ANTHROPIC_AUTH_TOKEN": "tok"})
    assert done.returncode == 0, done.stderr
    assert "token accepted" in done.stdout and done.stderr == ""


def test_standalone_copy_runs_with_a_key(run_step, standin, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(run_step.__globals__["AGENTS"] / f"{STEP}.py", alone / "agent.py")
    standin.policy = ScriptedModel([[tool_use("write_file", {"path": "x.txt", "content": "x"})], ["ok"]])
    done = run_step(STEP, "go\n", script=alone / "agent.py", cwd=alone)
    assert done.returncode == 0, done.stderr
    assert (alone / "x.txt").read_text() == "x" and "ok" in done.stdout


def test_standalone_copy_without_key_explains(run_step, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(run_step.__globals__["AGENTS"] / f"{STEP}.py", alone / "agent.py")
    done = run_step(STEP, "", script=alone / "agent.py", cwd=alone,
                    env={"ANTHROPIC_API_KEY": None, "ANTHROPIC_BASE_URL": None})
    assert done.returncode != 0
    assert "ANTHROPIC_API_KEY" in done.stderr and "offline.py" in done.stderr


def test_offline_demo_shows_every_tool(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stderr
    assert "OFFLINE DEMO" in done.stdout and "SCRIPTED" in done.stdout
    for tool in ("read_file", "write_file", "edit_file", "bash"):
        assert f"> {tool}:" in done.stdout
    assert "it has 4 lines" in done.stdout  # the answer quotes what bash really printed


def test_demo_flag_forces_offline_with_a_key(run_step, standin):
    done = run_step(STEP, args=["--demo"])
    assert done.returncode == 0, done.stderr
    assert "OFFLINE DEMO" in done.stdout
    assert standin.requests == []  # the configured endpoint was not used


# -- Bad tool input never crashes the loop ---------------------------------------------
@pytest.fixture
def agent(load_step, workdir, tmp_path):
    module = load_step(STEP)
    module.BASH_TIMEOUT = 1
    (workdir / "notes.txt").write_text("one\ntwo\nthree\nfour\n")
    (workdir / "twice.txt").write_text("same\nsame\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (workdir / "link.txt").symlink_to(outside)
    return module


BAD_CALLS = [
    ("unknown_tool", "launch_rockets", {}, "Unknown tool 'launch_rockets'"),
    ("missing_arg", "write_file", {"path": "a.txt"}, "missing required argument(s) ['content']"),
    ("wrong_type", "read_file", {"path": "notes.txt", "limit": "two"}, "'limit' must be of type integer, got str"),
    ("bool_is_not_int", "read_file", {"path": "notes.txt", "limit": True}, "'limit' must be of type integer, got bool"),
    ("unknown_arg", "bash", {"command": "ls", "sudo": True}, "unknown argument 'sudo'"),
    ("bad_limit", "read_file", {"path": "notes.txt", "limit": 0}, "limit must be a positive"),
    ("dotdot", "write_file", {"path": "../x", "content": "x"}, "outside the workspace"),
    ("absolute", "read_file", {"path": "/etc/passwd"}, "outside the workspace"),
    ("symlink_out", "read_file", {"path": "link.txt"}, "outside the workspace"),
    ("edit_absent", "edit_file", {"path": "notes.txt", "old_text": "five", "new_text": "5"}, "not found"),
    ("edit_ambiguous", "edit_file", {"path": "twice.txt", "old_text": "same", "new_text": "x"}, "appears 2 times"),
    ("missing_file", "read_file", {"path": "nope.txt"}, "No such file"),
    ("bash_timeout", "bash", {"command": "sleep 5"}, "timed out after 1s"),
]


@pytest.mark.parametrize("name,tool,args,expected", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_tool_input_becomes_error_result(agent, standin, name, tool, args, expected):
    standin.policy = ScriptedModel([[tool_use(tool, args)], ["recovered"]])
    history = [{"role": "user", "content": "try it"}]
    agent.agent_loop(history)
    [result] = results_sent(standin, 1)
    assert result["is_error"] is True
    assert expected in result["content"]
    assert history[-1]["content"][0]["text"] == "recovered"  # the loop went on
    assert standin.rejected == []


def test_nothing_written_outside_workspace(agent, standin, workdir):
    standin.policy = ScriptedModel([[tool_use("write_file", {"path": "../escaped.txt", "content": "x"})], ["ok"]])
    agent.agent_loop([{"role": "user", "content": "go"}])
    assert not (workdir.parent / "escaped.txt").exists()


def test_read_limit_and_edit(agent, standin, workdir):
    standin.policy = ScriptedModel([
        [tool_use("read_file", {"path": "notes.txt", "limit": 2}),
         tool_use("edit_file", {"path": "notes.txt", "old_text": "three", "new_text": "3"})],
        ["ok"],
    ])
    agent.agent_loop([{"role": "user", "content": "go"}])
    read, edit = results_sent(standin, 1)
    assert read["content"] == "one\ntwo\n... [2 more lines]"
    assert "is_error" not in edit
    assert (workdir / "notes.txt").read_text() == "one\ntwo\n3\nfour\n"


def test_bash_output_cap_says_it_cut(agent, standin):
    agent.OUTPUT_LIMIT = 100
    standin.policy = ScriptedModel([[tool_use("bash", {"command": "printf %01000d 0"})], ["ok"]])
    agent.agent_loop([{"role": "user", "content": "go"}])
    [result] = results_sent(standin, 1)
    assert len(result["content"]) < 200
    assert "[output truncated: 900 more characters]" in result["content"]


def test_bash_failure_reports_exit_code(agent, standin):
    standin.policy = ScriptedModel([[tool_use("bash", {"command": "echo oops >&2; exit 3"})], ["ok"]])
    agent.agent_loop([{"role": "user", "content": "go"}])
    [result] = results_sent(standin, 1)
    assert result["content"] == "oops\n[exit code 3]"


def test_parallel_tool_calls_each_get_one_result(agent, standin):
    standin.policy = ScriptedModel([
        [tool_use("bash", {"command": "echo a"}), tool_use("nope", {}), tool_use("bash", {"command": "echo c"})],
        ["ok"],
    ])
    agent.agent_loop([{"role": "user", "content": "go"}])
    results = results_sent(standin, 1)
    uses = [b["id"] for b in standin.requests[1]["messages"][1]["content"] if b["type"] == "tool_use"]
    assert [r["tool_use_id"] for r in results] == uses
    assert [r.get("is_error", False) for r in results] == [False, True, False]


@pytest.mark.parametrize("lines", [["q"], ["exit"], [""], [], ["  EXIT  "]])
def test_repl_quits_cleanly(agent, standin, type_lines, capsys, lines):
    type_lines(*lines, "never sent") if lines else type_lines()  # [] is end of input
    agent.repl()
    assert standin.requests == []
    if lines:
        assert capsys.readouterr().out.startswith("s01 >> ")


def test_unknown_slash_command_is_explained(agent, standin, type_lines, capsys):
    type_lines("/help")
    agent.repl()
    assert "Unknown command /help" in capsys.readouterr().out
    assert standin.requests == []


def test_ctrl_c_in_a_slash_command_keeps_the_repl(agent, standin, type_lines, capsys):
    def slow(arg, history):
        raise KeyboardInterrupt

    agent.SLASH_COMMANDS["/slow"] = slow
    standin.policy = ScriptedModel([["still here"]])
    type_lines("/slow", "hello")
    agent.repl()
    out = capsys.readouterr().out
    assert "[turn interrupted" in out and "still here" in out


# -- API errors and Ctrl-C leave the REPL running and the history valid --------------------
def test_http_400_keeps_repl_running(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["second answer"]])
    standin.fail_next(400)
    type_lines("first", "second")
    agent.repl()
    out = capsys.readouterr().out
    assert "[API error] BadRequestError" in out and "second answer" in out
    assert len(standin.requests) == 2 and standin.rejected == []
    texts = [b["text"] for b in standin.requests[1]["messages"][0]["content"]]
    assert texts == ["first", "second"]  # nothing the user typed is lost


def test_529_exhausting_retries_keeps_repl_running(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["back again"]])
    standin.fail_next(529, times=agent.client.max_retries + 1)
    type_lines("first", "second")
    agent.repl()
    out = capsys.readouterr().out
    assert "[API error] OverloadedError" in out and "back again" in out
    assert len(standin.requests) == agent.client.max_retries + 2
    assert standin.rejected == []


def test_529_then_success_is_retried_by_sdk(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["made it"]])
    standin.fail_next(529)
    type_lines("hello")
    agent.repl()
    out = capsys.readouterr().out
    assert "made it" in out and "API error" not in out
    assert len(standin.requests) == 2


def test_api_error_mid_turn_closes_open_tool_calls(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([[tool_use("bash", {"command": "echo hi"})], ["after"]])
    type_lines("first", "second")
    original = agent.run_tool

    def run_then_fail(block):  # the tool runs, then the next API call fails
        standin.fail_next(400)
        return original(block)

    agent.run_tool = run_then_fail
    agent.repl()
    assert "after" in capsys.readouterr().out
    assert standin.rejected == []


def test_ctrl_c_mid_turn_leaves_valid_history(agent, standin, type_lines, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    agent.TOOL_HANDLERS["bash"] = interrupted
    standin.policy = ScriptedModel([
        [tool_use("read_file", {"path": "notes.txt"}), tool_use("bash", {"command": "sleep 100"})],
        ["fine, moving on"],
    ])
    type_lines("do two things", "next")
    agent.repl()
    out = capsys.readouterr().out
    assert "[turn interrupted" in out and "fine, moving on" in out
    assert standin.rejected == []
    closing = standin.requests[1]["messages"][2]["content"]
    assert [b["content"] for b in closing if b["type"] == "tool_result"] == ["interrupted by the user"] * 2
    assert closing[-1] == {"type": "text", "text": "next"}


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")
def test_ctrl_c_kills_the_running_command(agent, standin, workdir):
    """A bash command started by the agent must not outlive an interrupted turn."""
    import signal
    import threading

    marker = workdir / "still-running"
    standin.policy = ScriptedModel([[tool_use("bash", {"command": f"sleep 3 && touch {marker}"})], ["x"]])
    agent.BASH_TIMEOUT = 30
    started = threading.Event()
    real_popen = agent.subprocess.Popen

    class WatchedPopen(real_popen):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.set()

    agent.subprocess.Popen = WatchedPopen
    try:
        threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT), daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            agent.agent_loop([{"role": "user", "content": "go"}])
    finally:
        agent.subprocess.Popen = real_popen
    assert agent.subprocess.run(["pgrep", "-f", f"touch {marker}"]).returncode == 1
