"""s08: background jobs - their files, their limits, their results delivered once at the next
model call, the line at the prompt, and no job outliving the REPL.

Jobs here wait on files the test creates (gate.py) or run until they are killed (spawn.py,
whose child's pid proves a whole group was killed). Nothing waits on a clock: each test waits
on a condition with a generous deadline, only against a hang."""

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import AGENTS, step_env, wait_until

from offline import ScriptedModel, tool_use, validate_request

STEP = "s08_background"
PYTHON = f'"{sys.executable}"'
HEAD = "<background-results>\nFrom the harness, not the user: background jobs that ended.\n"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

GATE = """\
import os, sys, time
while not os.path.exists(sys.argv[1]):  # the test opens the gate by creating this file
    time.sleep(0.01)
print(sys.argv[2], flush=True)
"""

SPAWN = """\
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as file:
    file.write(str(child.pid))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])  # whole, or not yet there
child.wait()
"""


@pytest.fixture
def agent(load_step, workdir):
    (workdir / "gate.py").write_text(GATE)
    (workdir / "spawn.py").write_text(SPAWN)
    module = load_step(STEP)
    yield module
    for job in module.JOBS.values():  # no test leaves a job running
        module.kill_job(job, "the test ended")


def gate(name: str, text: str = "check passed") -> str:
    return f"{PYTHON} gate.py {name} '{text}'"


def alive(pid: int) -> bool:
    """A process that still runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def child_pid(workdir: Path, name: str = "child.pid") -> int:
    assert wait_until(lambda: (workdir / name).exists(), timeout=60)
    return int((workdir / name).read_text())


def carried(request: dict) -> int:
    """How many delivered blocks a request carries (the system prompt names the tag too)."""
    return json.dumps(request["messages"]).count("<background-results>")


def call(name: str, args: dict) -> dict:
    """A tool call as the history stores it."""
    return {**tool_use(name, args), "id": "toolu_1"}


def notes_in(history: list) -> list:
    """Every delivered block in a history, wherever it sits."""
    found = []
    for message in history:
        for block in message["content"] if isinstance(message["content"], list) else []:
            inner = block.get("content") if block["type"] == "tool_result" else [block]
            found += [part["text"] for part in inner if isinstance(inner, list)
                      if "<background-results>" in part.get("text", "")]
    return found


def ended(agent, job_id: str = "j1"):
    """Wait until the job's thread has queued it."""
    assert wait_until(lambda: agent.JOBS[job_id].ended is not None, timeout=60)
    return agent.JOBS[job_id]


# -- Delivery ---------------------------------------------------------------------------------
def test_a_result_reaches_one_later_request_inside_the_newest_tool_result(agent, standin, workdir):
    def edit_while_the_check_runs(request):
        (workdir / "go").touch()  # the check ends while this turn is being made ...
        assert wait_until(lambda: not agent.FINISHED.empty(), timeout=60)
        return [tool_use("bash", {"command": "echo edited"}), tool_use("bash", {"command": "true"})]

    standin.policy = ScriptedModel([
        [tool_use("background_run", {"command": gate("go")})],
        edit_while_the_check_runs,  # ... so its result goes with the next request
        ["the check passed"],
        ["nothing new"],
    ])
    history = [{"role": "user", "content": [{"type": "text", "text": "check, and fix meanwhile"}]}]
    agent.agent_loop(history)
    started = standin.requests[1]["messages"][-1]["content"][0]["content"]
    assert started.startswith("Started job j1 (") and ".background/j1-" in started
    assert [carried(request) for request in standin.requests] == [0, 0, 1]
    newest = standin.requests[2]["messages"][-1]["content"]
    assert [block["type"] for block in newest] == ["tool_result", "tool_result"]  # no text after
    assert newest[0]["content"] == "edited"
    echoed, note = newest[1]["content"]
    assert echoed == {"type": "text", "text": "(no output)"}  # true prints nothing
    assert note["text"].startswith(HEAD + f"job j1 `{gate('go')}`: exit code 0 after ")
    assert note["text"].endswith("\ncheck passed\n</background-results>")
    assert notes_in(history) == [note["text"]]  # it stays where it was put
    agent.add_user_text(history, "anything else?")
    agent.agent_loop(history)
    assert carried(standin.requests[3]) == 1  # once in the history, never delivered again
    assert standin.rejected == [] and all(validate_request(r) is None for r in standin.requests)


def test_a_job_that_ends_at_the_prompt_says_one_line_and_joins_the_users_words(
        agent, standin, workdir, monkeypatch, capsys):
    lines = iter(["start the check", "what happened?"])

    def user(prompt=""):
        line = next(lines, None)
        if line == "what happened?":
            (workdir / "go").touch()
            assert wait_until(lambda: agent.JOBS["j1"].told, timeout=60)  # said at the prompt
        if line is None:
            raise EOFError
        return line

    monkeypatch.setattr("builtins.input", user)
    standin.policy = ScriptedModel([
        [tool_use("background_run", {"command": gate("go")})], ["started"], ["it passed"]])
    agent.repl()
    out = capsys.readouterr().out
    assert out.count("[background] job j1 ended (exit code 0); its result goes to the model "
                     "with your next message") == 1
    words, note = standin.requests[2]["messages"][-1]["content"]
    assert words == {"type": "text", "text": "what happened?"}
    assert note["type"] == "text" and note["text"].startswith(HEAD)
    assert [carried(r) for r in standin.requests] == [0, 0, 1] and standin.rejected == []


def test_a_job_that_ended_before_the_prompt_is_told_there(agent, workdir, monkeypatch, capsys):
    agent.run_background(gate("go"))
    (workdir / "go").touch()
    job = ended(agent)
    assert not job.told  # nobody waited at the prompt when it ended
    monkeypatch.setattr("builtins.input", lambda prompt="": "typed")
    assert agent.read_line("s08 >> ") == "typed" and job.told
    assert capsys.readouterr().out.count("[background] job j1 ended (exit code 0)") == 1
    assert agent.read_line("s08 >> ") == "typed"  # one line per job, not one per prompt
    assert "[background]" not in capsys.readouterr().out


def test_a_user_turn_in_the_short_form_gets_its_own_block(agent, workdir):
    agent.run_background(gate("go"))
    (workdir / "go").touch()
    ended(agent)
    history = [{"role": "user", "content": "hello"}]
    agent.deliver_results(history)
    words, note = history[0]["content"]
    assert words == {"type": "text", "text": "hello"} and note["text"].startswith(HEAD)
    assert validate_request({"model": "m", "max_tokens": 1, "messages": history}) is None


# -- Stopping: background_stop, quitting, the timeout ---------------------------------------
def test_stop_kills_the_whole_group_and_is_not_delivered_again(agent, standin, workdir):
    standin.policy = ScriptedModel([
        [tool_use("background_run", {"command": f"{PYTHON} spawn.py child.pid"})],
        lambda request: child_pid(workdir) and [tool_use("background_stop", {"job_id": "j1"})],
        ["stopped"],
    ])
    history = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    agent.agent_loop(history)
    stopped = history[-2]["content"][0]["content"]
    assert stopped.startswith("job j1 `") and "exit code -9 after" in stopped
    assert "(stopped by background_stop)" in stopped
    assert wait_until(lambda: not alive(child_pid(workdir)), timeout=30)
    ended(agent)
    agent.add_user_text(history, "more?")
    agent.deliver_results(history)
    assert notes_in(history) == []  # the stop's result said it all


def test_a_job_that_ended_unseen_and_is_then_stopped_is_told_once(agent, workdir):
    agent.run_background(gate("go"))
    (workdir / "go").touch()
    ended(agent)
    told = agent.run_background_stop("j1")
    assert "exit code 0 after" in told and "stopped" not in told and "check passed" in told
    history = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    agent.deliver_results(history)
    assert notes_in(history) == []


@pytest.mark.parametrize("how", ["q", "EOF", "Ctrl-C"])
def test_quitting_kills_every_running_job_whole_and_names_it(
        agent, workdir, monkeypatch, capsys, how):
    agent.run_background(f"{PYTHON} spawn.py child.pid")
    agent.run_background(gate("never"))
    pid = child_pid(workdir)

    def user(prompt=""):
        if how == "q":
            return "q"
        raise EOFError if how == "EOF" else KeyboardInterrupt

    monkeypatch.setattr("builtins.input", user)
    agent.repl()
    out = capsys.readouterr().out
    assert f"[stopped job j1: {PYTHON} spawn.py child.pid]" in out
    assert f"[stopped job j2: {gate('never')}]" in out
    assert all(job.process.returncode is not None for job in agent.JOBS.values())
    assert wait_until(lambda: not alive(pid), timeout=30), "the job's child outlived the REPL"


def test_the_timeout_kills_the_job_whole_and_says_so(agent, workdir):
    assert agent.JOB_TIMEOUT > agent.BASH_TIMEOUT  # what bash cannot wait for, a job can
    agent.JOB_TIMEOUT = 1
    agent.run_background(f"{PYTHON} spawn.py child.pid")
    pid = child_pid(workdir)
    ended(agent)
    history = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    agent.deliver_results(history)
    [note] = notes_in(history)
    assert "exit code -9 after" in note and "(killed after the 1s timeout)" in note
    assert wait_until(lambda: not alive(pid), timeout=30)


# -- Limits and bad calls ---------------------------------------------------------------------
def test_at_most_max_jobs_run_at_once(agent, workdir):
    agent.MAX_JOBS = 2
    agent.run_background(gate("one"))
    agent.run_background(gate("two"))
    refused = agent.run_tool(call("background_run", {"command": "echo three"}))
    assert refused["is_error"] is True and refused["content"] == (
        "Error: 2 jobs are already running (j1, j2), the most allowed; wait for one to end, "
        "or stop one with background_stop")
    (workdir / "one").touch()
    ended(agent)
    assert agent.run_background("echo three").startswith("Started job j3 (echo three)")


@pytest.mark.parametrize("name,args,expected", [
    ("background_check", {"job_id": "j9"}, "Error: unknown job 'j9'; jobs: none yet"),
    ("background_stop", {"job_id": "j9"}, "Error: unknown job 'j9'; jobs: none yet"),
    ("background_stop", {}, "Error: missing required argument(s) ['job_id']"),
    ("background_run", {"command": 7}, "Error: argument 'command' must be of type string"),
    ("background_check", {}, "No background jobs yet."),
])
def test_bad_calls_are_clear_results(agent, name, args, expected):
    assert agent.run_tool(call(name, args))["content"].startswith(expected)


def test_a_background_folder_that_leaves_the_workspace_is_refused(agent, workdir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workdir / ".background").symlink_to(outside)
    result = agent.run_tool(call("background_run", {"command": "echo hi"}))
    assert result["is_error"] and "outside the workspace" in result["content"]
    assert list(outside.iterdir()) == [] and agent.JOBS == {}


def test_a_huge_output_stays_in_its_file(agent, workdir):
    command = f"{PYTHON} -c \"[print('line', n) for n in range(200000)]\""
    agent.run_background(command)
    job = ended(agent)
    told = agent.run_background_check("j1")
    assert len(told) < 5000
    assert f"[earlier lines left out; all of them are in {job.log}]" in told
    assert told.endswith("line 199998\nline 199999")
    assert (workdir / job.log).read_text().count("\n") == 200000
    assert agent.run_background_check().count("\nline ") == 3  # every job, briefly


# -- The REPL as a learner runs it: Ctrl-C during a turn ------------------------------------
def test_ctrl_c_during_a_turn_leaves_the_job_running(standin, workdir):
    """The terminal sends Ctrl-C to the REPL's whole process group; a job has a group of its
    own, so it goes on, ends later, and its result goes with the next prompt."""
    (workdir / "gate.py").write_text(GATE)

    def start_then_stall(request):
        standin.fail_next("stream_stall")  # the next reply stops mid-stream
        return [tool_use("background_run", {"command": gate("go", "survived")})]

    standin.policy = ScriptedModel([start_then_stall, ["a long answer, cut by Ctrl-C"], ["ok"]])
    step = subprocess.Popen(
        [sys.executable, str(AGENTS / f"{STEP}.py")], cwd=workdir, env=step_env(standin, {}),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        encoding="utf-8", start_new_session=True)  # a group of its own, like a terminal's job
    out = []
    reader = threading.Thread(target=lambda: out.extend(iter(step.stdout.readline, "")))
    reader.start()
    seen = lambda text: text in "".join(out)  # noqa: E731
    try:
        step.stdin.write("start the check\n")
        step.stdin.flush()
        assert standin.stalled.wait(60)
        os.killpg(step.pid, signal.SIGINT)  # Ctrl-C, as the terminal sends it
        assert wait_until(lambda: seen("[interrupted by the user]"), timeout=60)
        (workdir / "go").touch()
        assert wait_until(lambda: seen("[background] job j1 ended (exit code 0)"), timeout=60)
        step.stdin.write("what happened?\n")
        step.stdin.close()
        assert step.wait(timeout=60) == 0
    finally:
        standin.release.set()
        if step.poll() is None:
            os.killpg(step.pid, signal.SIGKILL)
        reader.join(timeout=30)
    words, note = standin.requests[-1]["messages"][-1]["content"][-2:]
    assert words["text"] == "what happened?"
    assert note["text"].startswith(HEAD)
    assert note["text"].endswith("survived\n</background-results>")
    assert standin.rejected == [] and "Traceback" not in "".join(out)


def test_offline_demo_shows_the_check_running_while_the_model_works(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    out = done.stdout
    started = out.index("Started job j1 (")
    edited = out.index("  Edited README.md")
    result = out.index("<background-results>")
    assert started < edited < result, "the edit was made while the check ran"
    assert out.count("<background-results>") == 1  # delivered once
    assert "job j1 `python3 slow_check.py`: exit code 0 after" in out[result:]
    assert "The check (job j1) ended with exit code 0: 3 passed." in out[result:]
    assert "[stopped job j2: python3 slow_check.py --full]" in out  # quitting stopped it
    assert "0 rejected by the validator" in out
