"""Play mode (--play), driven as a learner drives it: the step runs as a process, the learner's
lines arrive on stdin - a prompt at the REPL, then per model call a reply (`@tool {json}` lines
are calls, other lines text, an empty line sends). The harness's tools really run in the test's
folder, and the stand-in validates every request: each run must end with nothing rejected.

The flags themselves (--help, an unknown flag) are checked here too, since play mode brought
argparse to offline.run.
"""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from conftest import AGENTS, STEPS

import offline


def play(step: str, folder, *lines: str, flags=("--play",)) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, str(AGENTS / f"{step}.py"), *flags],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=folder,
        env=env,
        timeout=120,  # a hang guard, far above the few seconds a run takes
    )


@pytest.fixture
def play_here(run_in_process):
    """play() in this process: the step's main() with the flags as argv, the lines as a piped
    stdin, no key. For the runs whose subject is play mode itself; the s09 session (teammate
    threads that outlive a session belong in a process of their own), Ctrl-C and the flags as
    typed keep a process."""

    def run(step: str, folder, *lines: str, flags=("--play",)) -> subprocess.CompletedProcess:
        return run_in_process(step, "\n".join(lines) + "\n", args=flags, cwd=folder, keyed=False)

    return run


def calls(output: str) -> list:
    """What each model call showed the learner, in order (up to where it asks for the reply)."""
    return [call.split("your reply (")[0] for call in output.split("--- model call ")[1:]]


def played(done: subprocess.CompletedProcess, answered: int) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"[play] {answered} model calls answered; 0 rejected by the validator." in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_s01_a_played_call_runs_and_its_output_reaches_the_next_call(play_here, tmp_path):
    out = played(
        play_here(
            "s01_agent_loop",
            tmp_path,
            "which files are here?",
            '@bash {"command": "echo made > made.txt && ls"}',
            '@bash {"command": "echo second"}',  # two calls in one reply: parallel calls
            "",
            "made.txt is here.",
            "",
        ),
        answered=2,
    )
    assert (tmp_path / "made.txt").read_text() == "made\n", "the played call really ran"
    first, second = calls(out)
    assert "tools: bash(command)" in first and "user: which files are here?" in first
    assert "result (bash): made.txt" in second and "result (bash): second" in second
    assert "which files" not in second, "a call shows only what is new since the last one"


def test_s02_bad_lines_are_explained_and_the_reply_typed_again(play_here, tmp_path):
    out = played(
        play_here(
            "s02_tool_use",
            tmp_path,
            "make notes",
            '@write_file {"path": "notes.txt"}',  # a required argument missing
            '@nosuch {"x": 1}',  # a tool the model does not have
            "@read_file {path: notes.txt}",  # not JSON
            '@write_file ["notes.txt"]',  # not an object
            "/show",
            '@write_file {"path": "notes.txt", "content": "hi\\n"}',
            "",
            "Done:",
            "    notes.txt says hi.",  # two text lines: one text block, indentation kept
            "",
        ),
        answered=2,
    )
    assert "write_file needs content" in out
    assert "no tool 'nosuch'" in out
    assert "the arguments are not JSON" in out
    assert "must be a JSON object" in out
    assert out.count("Type the whole reply again.") == 4
    assert '"max_tokens"' in out, "/show printed the request as JSON"
    assert (tmp_path / "notes.txt").read_text() == "hi\n"
    assert "Done:\n    notes.txt says hi." in out, "the streamed reply came back through the SDK"


def test_s03_the_reminder_comes_after_three_replies_without_the_list(play_here, tmp_path):
    lines = ["tidy up", '@todo_write {"action": "add", "task": "tidy"}', ""]
    lines += [line for n in range(3) for line in (f'@bash {{"command": "echo {n}"}}', "")]
    out = played(play_here("s03_todo", tmp_path, *lines, "done", ""), answered=5)
    shown = calls(out)
    assert not any("<nag-reminder>" in call for call in shown[:4])
    assert "<nag-reminder>" in shown[4] and "tidy" in shown[4]


def test_s07_a_played_update_of_a_blocked_task_gets_the_refusal(play_here, tmp_path):
    out = played(
        play_here(
            "s07_task_system",
            tmp_path,
            "plan two steps",
            '@task_create {"subject": "build"}',
            '@task_create {"subject": "ship", "blocked_by": [1]}',
            "",
            '@task_update {"task_id": 2, "status": "completed"}',
            "",
            "/quit",  # in a reply: the session ends
            "never read",
        ),
        answered=3,
    )
    assert "task 2 cannot be completed while blocked by 1" in calls(out)[2]
    assert "never read" not in out and "ended play mode" in out
    board = json.loads((tmp_path / ".tasks" / "task_2.json").read_text())
    assert board["status"] == "pending", "the board refused, in the current folder"


def test_s09_the_learner_leads_a_scripted_teammate(tmp_path):
    out = played(
        play(
            "s09_team",
            tmp_path,
            "get a helper",
            '@team_spawn {"name": "bob", "role": "helper", "prompt": "Help the lead."}',
            "",
            '@team_send {"name": "bob", "message": "Please say hello."}',
            '@team_wait {"seconds": 30}',
            "",
            "Bob answered.",
            "",
            "/team",
        ),
        answered=4,  # three of the lead's, one of bob's (the demo's script answers it)
    )
    lead_calls = [call for call in calls(out) if call.split(" ", 2)[1] == "·" and "lead" in call]
    assert len(lead_calls) == 3, "only the lead's calls are asked for"
    assert "bob here" in lead_calls[2], "the teammate's answer reached the lead"
    assert "bob - helper" in out


def test_play_demo_plays_in_a_fresh_folder_seeded_like_the_demo(play_here, tmp_path):
    out = played(
        play_here(
            "s01_agent_loop",
            tmp_path,
            "what is here?",
            '@bash {"command": "ls"}',
            "",
            "a reply the input ends in the middle of",
            flags=("--play", "--demo"),
        ),
        answered=2,
    )
    assert "app.py" in calls(out)[1] and "util.py" in calls(out)[1]
    assert list(tmp_path.iterdir()) == [], "the current folder is left alone"
    assert "ended play mode" in out, "the end of the input ends the session cleanly"


def test_play_with_trace_writes_the_played_replies(play_here, tmp_path):
    page = tmp_path / "run.html"
    played(
        play_here(
            "s01_agent_loop",
            tmp_path,
            "hi",
            "Hello, learner.",
            "",
            "/quit",  # at the prompt: the session ends
            "never read",
            flags=("--play", "--trace", str(page)),
        ),
        answered=1,
    )
    assert "Hello, learner." in page.read_text(encoding="utf-8")
    assert "never read" not in page.read_text(encoding="utf-8")
    assert page.with_suffix(".json").exists()


# -- The keyboard: one reader at a time, model calls first --------------------------------------
def test_a_waiting_model_call_goes_before_the_next_repl_prompt():
    order, typed = [], threading.Event()

    def read(prompt):
        order.append(prompt)
        if prompt == "repl-1":
            typed.wait(30)  # the learner is still typing at the prompt
        return "line"

    keyboard = offline.Keyboard(read)
    first = threading.Thread(target=keyboard.repl_input, args=("repl-1",))
    first.start()
    assert wait_for(lambda: order == ["repl-1"])

    def call():
        with keyboard.held("bob"):
            keyboard.read("call")

    asking = threading.Thread(target=call)
    asking.start()
    assert wait_for(lambda: keyboard.calls_waiting == 1)
    second = threading.Thread(target=keyboard.repl_input, args=("repl-2",))
    second.start()
    typed.set()
    for thread in (first, asking, second):
        thread.join(30)
    assert order == ["repl-1", "call", "repl-2"]


def wait_for(condition) -> bool:
    from conftest import wait_until

    return wait_until(condition, timeout=30)


def test_parse_call_checks_what_the_api_would_not():
    tools = {"bash": {"name": "bash", "input_schema": {"required": ["command"]}}}
    assert offline.parse_call('@bash {"command": "ls"}', tools)["input"] == {"command": "ls"}
    for line, problem in [
        ("@bash", "needs command"),
        ("@sh {}", "no tool 'sh'"),
        ("@bash {'command': 1}", "not JSON"),
        ("@bash 3", "JSON object"),
        ("@ bash", "@NAME {json}"),
    ]:
        with pytest.raises(ValueError, match=problem):
            offline.parse_call(line, tools)


# -- Flags ----------------------------------------------------------------------------------
@pytest.mark.parametrize("step", STEPS)
def test_help_lists_the_flags_and_an_unknown_flag_is_refused(step, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = str(AGENTS / f"{step}.py")
    for argv, code in [(["--help"], 0), (["--helo"], 2), (["--trace"], 2), (["--play", "x"], 2)]:
        with pytest.raises(SystemExit) as exited:
            offline.run(script, [script, *argv])
        assert exited.value.code == code, argv
    out, err = capsys.readouterr()
    for flag in ("--demo", "--play", "--trace"):
        assert flag in out
    assert ("--worker NAME [--session ID]" in out) == (step == "s11_autonomous")
    assert "unrecognized arguments: --helo" in err and "expected one argument" in err
    assert "invalid choice: 'x'" in err
    assert list(tmp_path.iterdir()) == [], "a refused flag starts nothing"


def test_the_flags_as_a_learner_types_them(play_here, tmp_path):
    """Through the step's own main(), as argv (every demo passes --trace to a real process)."""
    wrong = play_here("s01_agent_loop", tmp_path, flags=("--helo",))
    assert wrong.returncode == 2 and "unrecognized arguments: --helo" in wrong.stderr
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_asked_ends_the_turn_and_the_next_line_goes_to_the_prompt(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8")
    step = subprocess.Popen(
        [sys.executable, str(AGENTS / "s02_tool_use.py"), "--play"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        cwd=tmp_path,
        env=env,
    )
    try:
        step.stdin.write("hello\n")
        step.stdin.flush()
        read_until(step, "your reply (")
        step.send_signal(signal.SIGINT)  # what Ctrl-C sends, while the learner is asked
        read_until(step, "this line goes to the prompt")
        step.stdin.write("next words\n/quit\n")
        step.stdin.close()
        rest = step.stdout.read()
        assert step.wait(60) == 0
    finally:
        step.kill()
    second = calls(rest)[0]
    assert "[not answered: interrupted by the user]" in second
    assert "user: next words" in second, "the line went to the prompt, not to the old call"
    assert "0 rejected by the validator" in rest


def read_until(process, marker: str) -> str:
    seen = ""
    while marker not in seen:
        line = process.stdout.readline()
        assert line, f"the process ended before {marker!r}: {seen}"
        seen += line
    return seen
