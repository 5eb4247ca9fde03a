"""s02: the file tools, streaming, caching, and how the loop survives bad input, every reply shape
the API documents, broken endpoints, Ctrl-C and failed writes."""

import os
import shutil
import signal
import sys
import threading
import time

import pytest

from conftest import (
    AGENTS,
    as_a_process_writes_stderr,
    import_fresh,
    replay_a_quirk,
    user,
    wait_until,
)
from offline import QUIRKS, ScriptedModel, latest_results, reply, tool_use

STEP = "s02_tool_use"


def results_sent(standin, request_index: int) -> list:
    """The tool_result blocks that the loop sent in a given request."""
    return latest_results(standin.requests[request_index])


def texts(message: dict) -> list:
    content = message["content"]
    return (
        [content]
        if isinstance(content, str)
        else [b.get("text") for b in content if b["type"] == "text"]
    )


# -- End to end, as a learner runs it ------------------------------------------------
def test_subprocess_session_streams_writes_and_survives_every_reply_shape(
    run_step, standin, workdir
):
    """One session as a learner types it: a streamed answer that writes a file and reads it
    back; then empty replies, a refusal, cut-offs and a pause: each is one line, the REPL goes on
    and every later request is still valid (today's main got stuck after the first empty reply)."""
    refusal = {"type": "refusal", "category": "cyber", "explanation": "This request was declined."}
    standin.policy = ScriptedModel(
        [
            [
                "Writing it now.",
                tool_use("write_file", {"path": "out/hello.txt", "content": "hi there\n"}),
            ],
            [tool_use("bash", {"command": "cat out/hello.txt"})],
            ["All done: the file says hi."],
            reply([]),  # "say hi": an empty end_turn
            [
                "hi \udc00 there"
            ],  # "continue": text with a lone surrogate (valid JSON, not printable UTF-8)
            reply(["Sure, here is how to"], "refusal", refusal),  # "break in"
            reply(["Listing:", tool_use("bash", {"command": "ls " + "x" * 80})], "max_tokens"),
            reply(["Searching..."], "pause_turn"),
            reply(["The answer is"], "model_context_window_exceeded"),
            reply([], "refusal"),
            ["still here"],
        ]
    )
    lines = [
        "write the file",
        "",
        "/help",
        "say hi",
        "continue",
        "break in",
        "list",
        "search",
        "long",
        "again",
        "last",
        "q",
    ]
    done = run_step(STEP, "\n".join(lines) + "\n")
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no SDK warnings, no traceback
    assert (workdir / "out" / "hello.txt").read_text() == "hi there\n"
    assert (
        "s02 >> Writing it now.\n> write_file:" in out
    )  # streamed text, then the call once complete
    assert "All done: the file says hi." in out
    assert all(
        r["stream"] is True and r["cache_control"] == {"type": "ephemeral"}
        for r in standin.requests
    )
    assert "Commands: /help, q or exit (quit)" in out
    assert "[the model sent an empty reply; tell it how to go on]" in out
    assert "hi \\udc00 there" in out  # printed, not a crash
    assert "declined this request (refusal)" in out
    assert "cut off at max_tokens (8000); an unfinished tool call was not run" in out
    assert "paused this turn (pause_turn)" in out and "the context window is full" in out
    assert "s02 >> still here" in out
    assert (
        standin.rejected == [] and len(standin.requests) == 11
    )  # the empty line and /help sent nothing
    last = standin.requests[-1]["messages"]
    assert "hi ? there" in str(last)  # the history keeps a sendable copy of the text
    refused = [m for m in last if "break in" in texts(m)][0]
    after = texts(refused)[texts(refused).index("break in") + 1]
    assert after.startswith("[not answered: the model declined")
    assert "Sure, here is how to" not in str(last)  # the refused reply is not kept
    cut = [m for m in last if m["role"] == "user" and latest_results({"messages": [m]})][-1]
    assert latest_results({"messages": [cut]})[0]["content"].startswith(
        "Error: cut off at max_tokens"
    )


@pytest.mark.parametrize(
    "fault", ["stream_drop", "stream_error", "html", "truncated", "no_content"]
)
def test_broken_replies_are_one_line_and_the_repl_goes_on(
    agent, standin, type_lines, capsys, fault
):
    standin.policy = ScriptedModel([["this reply is broken on the way"], ["fine now"]])
    standin.fail_next(
        fault
    )  # after a 200 the SDK does not retry: the error reaches the REPL at once
    type_lines("first", "second")
    agent.repl()
    out = capsys.readouterr().out
    error_lines = [line for line in out.splitlines() if line.startswith("[") and "Error" in line]
    assert len(error_lines) == 1 and "fine now" in out
    assert standin.rejected == []
    assert texts(standin.requests[-1]["messages"][0])[:2] == [
        "first",
        texts(standin.requests[-1]["messages"][0])[1],
    ]
    assert texts(standin.requests[-1]["messages"][0])[1].startswith("[not answered: ")


# -- Configuration and flags, through main() in-process ------------------------------------
def run_main(module, monkeypatch, type_lines, *lines: str, argv=()):
    """The script's main() as `python script.py ARGV` with `lines` typed; the exit code."""
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    type_lines(*lines)
    with as_a_process_writes_stderr(monkeypatch):
        try:
            module.main()
        except SystemExit as stopped:
            return stopped.code
    return 0


def test_dotenv_in_current_folder_is_read_and_shell_wins(
    standin, workdir, monkeypatch, type_lines, capsys
):
    (workdir / ".env").write_text(
        f"ANTHROPIC_BASE_URL={standin.url}\nANTHROPIC_API_KEY=from-dotenv\n"
        "MODEL_ID=model-from-dotenv\n"
    )
    standin.policy = ScriptedModel([["hello"]])
    agent = import_fresh(
        AGENTS / f"{STEP}.py", workdir, monkeypatch, {"MODEL_ID": "model-from-shell"}
    )
    assert run_main(agent, monkeypatch, type_lines, "hi") == 0
    assert "hello" in capsys.readouterr().out
    assert standin.requests[0]["model"] == "model-from-shell"


def test_auth_token_is_enough(standin, workdir, monkeypatch, type_lines, capsys):
    standin.policy = ScriptedModel([["token accepted"]])
    env = {"ANTHROPIC_BASE_URL": standin.url, "ANTHROPIC_AUTH_TOKEN": "tok"}
    agent = import_fresh(AGENTS / f"{STEP}.py", workdir, monkeypatch, env)
    assert agent.client is not None, "a token alone must make a client"
    assert run_main(agent, monkeypatch, type_lines, "hi") == 0
    done = capsys.readouterr()
    assert "token accepted" in done.out and done.err == ""


def test_standalone_copy_runs_with_a_key_and_explains_without_one(
    standin, tmp_path, monkeypatch, type_lines, capsys
):
    """s01's test runs its copy as a process; here the same main() in-process: the copy is
    imported from its own folder, and `import offline` fails as it does with nothing beside it."""
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(AGENTS / f"{STEP}.py", alone / "agent.py")
    monkeypatch.setitem(sys.modules, "offline", None)  # import offline -> ImportError
    standin.policy = ScriptedModel(
        [[tool_use("write_file", {"path": "x.txt", "content": "x"})], ["ok"]]
    )
    env = {"ANTHROPIC_BASE_URL": standin.url, "ANTHROPIC_API_KEY": "test-key"}
    agent = import_fresh(alone / "agent.py", alone, monkeypatch, env)
    assert run_main(agent, monkeypatch, type_lines, "go") == 0
    assert (alone / "x.txt").read_text() == "x" and "ok" in capsys.readouterr().out
    keyless = import_fresh(alone / "agent.py", alone, monkeypatch, {})
    explained = run_main(keyless, monkeypatch, type_lines)
    assert isinstance(explained, str)  # SystemExit with a message: exit code 1, said on stderr
    assert "ANTHROPIC_API_KEY" in explained and "agents/offline" in explained
    assert "ANTHROPIC_AUTH_TOKEN" in explained  # either credential works


def test_offline_demo_shows_every_tool_and_a_recovered_error(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stderr
    assert "OFFLINE DEMO" in done.stdout and "SCRIPTED" in done.stdout
    for tool in ("read_file", "write_file", "edit_file", "bash"):
        assert f"> {tool}:" in done.stdout
    assert (
        "ERROR Error: old_text not found in todo.md" in done.stdout
    )  # an error is a result, not a crash
    assert "it has 4 lines" in done.stdout  # the answer quotes what bash really printed
    assert "Commands: /help" in done.stdout


def test_demo_flag_forces_offline_with_a_key(load_step, standin, monkeypatch, type_lines):
    """With a key, --demo still takes the offline demo's road (the demo itself: offline_demo)."""
    import offline.entry

    agent = load_step(STEP)
    taken = []
    monkeypatch.setattr(offline.entry, "run_demo", lambda *args: taken.append(args) or 0)
    assert agent.client is not None
    assert run_main(agent, monkeypatch, type_lines, argv=["--demo"]) == 0
    assert taken == [(agent.__file__, None)]
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
    (
        "wrong_type",
        "read_file",
        {"path": "notes.txt", "limit": "two"},
        "'limit' must be of type integer, got str",
    ),
    (
        "bool_is_not_int",
        "read_file",
        {"path": "notes.txt", "limit": True},
        "'limit' must be of type integer, got bool",
    ),
    ("unknown_arg", "bash", {"command": "ls", "sudo": True}, "unknown argument 'sudo'"),
    ("bad_limit", "read_file", {"path": "notes.txt", "limit": 0}, "limit must be a positive"),
    ("dotdot", "write_file", {"path": "../x", "content": "x"}, "outside the workspace"),
    ("absolute", "read_file", {"path": "/etc/passwd"}, "outside the workspace"),
    ("symlink_out", "read_file", {"path": "link.txt"}, "outside the workspace"),
    (
        "edit_absent",
        "edit_file",
        {"path": "notes.txt", "old_text": "five", "new_text": "5"},
        "not found",
    ),
    (
        "edit_ambiguous",
        "edit_file",
        {"path": "twice.txt", "old_text": "same", "new_text": "x"},
        "appears 2 times",
    ),
    ("missing_file", "read_file", {"path": "nope.txt"}, "nope.txt is not a regular file"),
    ("a_folder", "read_file", {"path": "."}, "is not a regular file"),
]


@pytest.mark.parametrize("name,tool,args,expected", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_tool_input_becomes_error_result(agent, standin, name, tool, args, expected):
    standin.policy = ScriptedModel([[tool_use(tool, args)], ["recovered"]])
    history = [user("try it")]
    agent.agent_loop(history)
    [result] = results_sent(standin, 1)
    assert result["is_error"] is True
    assert expected in result["content"]
    assert history[-1]["content"][0]["text"] == "recovered"  # the loop went on
    assert standin.rejected == []


def test_nothing_written_outside_workspace(agent, standin, workdir):
    standin.policy = ScriptedModel(
        [[tool_use("write_file", {"path": "../escaped.txt", "content": "x"})], ["ok"]]
    )
    agent.agent_loop([user("go")])
    assert not (workdir.parent / "escaped.txt").exists()


def test_read_limit_and_edit(agent, workdir):
    assert agent.run_read("notes.txt", 2) == "one\ntwo\n... [2 more lines]"
    assert agent.run_edit("notes.txt", "three", "3") == "Edited notes.txt"
    assert (workdir / "notes.txt").read_text() == "one\ntwo\n3\nfour\n"


# -- bash ---------------------------------------------------------------------------------
def test_bash_output_cap_keeps_the_exit_code(agent):
    agent.OUTPUT_LIMIT = 100
    output = agent.run_bash("seq 1 30000 | head -c 60000; exit 3")
    assert "[output truncated at 100 bytes]" in output
    assert output.endswith("[exit code 3]")  # today's main clipped it away
    assert len(output) < 200


def test_bash_failure_reports_exit_code(agent):
    assert agent.run_bash("echo oops >&2; exit 3") == "oops\n[exit code 3]"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX sessions")
def test_bash_returns_when_a_daemon_keeps_the_output_open(agent, workdir):
    """`setsid sleep &` leaves a process in another session holding stdout: today's main hung."""
    agent.BASH_TIMEOUT = 30
    started = time.monotonic()
    output = agent.run_bash(f"setsid sleep 20 & echo started; echo $! > {workdir}/daemon.pid")
    assert time.monotonic() - started < 10  # returns after ~1 s, not when the daemon ends (20 s)
    assert (
        output.startswith("started")
        and "a background process still holds the output open" in output
    )
    pid = int((workdir / "daemon.pid").read_text())
    os.kill(pid, signal.SIGKILL)


def test_bash_timeout_kills_the_command_and_says_so(agent):
    started = time.monotonic()
    output = agent.run_bash("echo begun; sleep 60")
    assert time.monotonic() - started < 10  # killed at 1 s; a command left running takes 60 s
    assert output.startswith("begun") and "killed after the 1s timeout" in output


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")
def test_ctrl_c_kills_the_running_command(agent, standin, workdir):
    """A bash command started by the agent must not outlive an interrupted turn."""
    marker = workdir / "still-running"
    standin.policy = ScriptedModel(
        [[tool_use("bash", {"command": f"sleep 30 && touch {marker}"})], ["x"]]
    )
    agent.BASH_TIMEOUT = 30
    started = threading.Event()
    real_popen = agent.subprocess.Popen

    class WatchedPopen(real_popen):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.set()

    agent.subprocess.Popen = WatchedPopen
    try:
        threading.Thread(
            target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT), daemon=True
        ).start()
        with pytest.raises(KeyboardInterrupt):
            agent.agent_loop([user("go")])
    finally:
        agent.subprocess.Popen = real_popen
    # SIGKILL is sent at once, but a process ends only when it next runs: on a busy machine, later
    gone = lambda: agent.subprocess.run(["pgrep", "-f", f"touch {marker}"]).returncode == 1  # noqa: E731
    assert wait_until(gone, timeout=10)


# -- Files: atomic writes, line endings, what read_file refuses ------------------------------
def test_a_failed_edit_leaves_the_file_byte_identical(agent, workdir):
    """A lone surrogate is valid JSON but cannot be written: today's main left the file empty."""
    before = (workdir / "notes.txt").read_bytes()
    with pytest.raises(UnicodeEncodeError):
        agent.run_edit("notes.txt", "two", "\ud83d")
    assert (workdir / "notes.txt").read_bytes() == before
    assert [p.name for p in workdir.iterdir() if p.name.endswith(".tmp")] == []


def test_a_full_disk_leaves_the_old_file(agent, workdir, monkeypatch):
    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(agent.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        agent.run_write("notes.txt", "new text " * 1000)
    assert (workdir / "notes.txt").read_text() == "one\ntwo\nthree\nfour\n"
    assert [p.name for p in workdir.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_rewrites_keep_the_mode_and_read_only_files_are_refused(agent, workdir):
    script = workdir / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o750)
    agent.run_edit("run.sh", "hi", "hello")
    assert script.stat().st_mode & 0o777 == 0o750
    script.chmod(0o444)
    with pytest.raises(PermissionError, match="read-only"):
        agent.run_write("run.sh", "changed")
    assert script.read_text() == "echo hello\n"


def test_edit_keeps_crlf_line_endings(agent, workdir):
    (workdir / "dos.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    agent.run_edit("dos.txt", "two\r\nthree", "2\r\n3")  # old_text exactly as on disk
    assert (workdir / "dos.txt").read_bytes() == b"one\r\n2\r\n3\r\n"
    assert agent.run_read("dos.txt") == "one\r\n2\r\n3\r\n"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX FIFOs")
def test_read_file_refuses_a_fifo_at_once(agent, workdir):
    os.mkfifo(workdir / "pipe")
    with pytest.raises(ValueError, match="not a regular file"):
        agent.run_read("pipe")


def test_read_file_reads_no_more_than_it_can_return(agent, workdir, monkeypatch):
    (workdir / "big.txt").write_text("x" * 2_000_000 + "\nlast line\n")
    agent.OUTPUT_LIMIT = 1000
    sizes = []
    real_open = open

    def watched_open(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        real_read = handle.read
        handle.read = lambda n=-1: sizes.append(n) or real_read(n)
        return handle

    monkeypatch.setattr("builtins.open", watched_open)
    text = agent.run_read("big.txt", 1)
    assert text.startswith("x" * 1000) and "more lines" not in text or text.endswith("more lines]")
    assert sizes and all(0 <= n <= 1000 for n in sizes)  # never read(-1): the whole file
    assert len(agent.run_read("big.txt")) < 1200


# -- The loop: parallel calls, Ctrl-C, API errors ------------------------------------------
def test_parallel_tool_calls_each_get_one_result(agent, standin):
    standin.policy = ScriptedModel(
        [
            [
                tool_use("bash", {"command": "echo a"}),
                tool_use("nope", {}),
                tool_use("bash", {"command": "echo c"}),
            ],
            ["ok"],
        ]
    )
    agent.agent_loop([user("go")])
    results = results_sent(standin, 1)
    uses = [
        b["id"] for b in standin.requests[1]["messages"][1]["content"] if b["type"] == "tool_use"
    ]
    assert [r["tool_use_id"] for r in results] == uses
    assert [r.get("is_error", False) for r in results] == [False, True, False]


def test_ctrl_c_during_the_third_call_keeps_the_first_two_results(
    agent, standin, type_lines, capsys
):
    """Today's main told the model that two calls which ran did not."""

    def interrupted(command):
        if command == "third":
            raise KeyboardInterrupt
        return f"ran {command}"

    agent.TOOL_HANDLERS["bash"] = interrupted
    standin.policy = ScriptedModel(
        [
            [tool_use("bash", {"command": c}) for c in ("first", "second", "third", "4th")],
            ["fine, moving on"],
        ]
    )
    type_lines("do four things", "next")
    agent.repl()
    out = capsys.readouterr().out
    assert "[interrupted by the user]" in out and "fine, moving on" in out
    assert standin.rejected == []
    sent = latest_results({"messages": [standin.requests[1]["messages"][2]]})
    assert [r["content"] for r in sent] == [
        "ran first",
        "ran second",
        "Error: interrupted by the user",
        "Error: interrupted by the user",
    ]
    assert texts(standin.requests[1]["messages"][2])[-1] == "next"


def test_ctrl_c_mid_stream_closes_the_turn_validly(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel(
        [["a long answer that is still streaming when you press Ctrl-C"], ["the next answer"]]
    )
    standin.fail_next("stream_stall")
    threading.Thread(
        target=lambda: standin.stalled.wait(10) and os.kill(os.getpid(), signal.SIGINT), daemon=True
    ).start()
    type_lines("tell me everything", "shorter please")
    try:
        agent.repl()
    finally:
        standin.release.set()
    out = capsys.readouterr().out
    assert "[interrupted by the user]" in out and "the next answer" in out
    assert standin.rejected == []
    assert texts(standin.requests[-1]["messages"][0]) == [
        "tell me everything",
        "[not answered: interrupted by the user]",
        "shorter please",
    ]


def test_ctrl_c_in_a_slash_command_keeps_the_repl(agent, standin, type_lines, capsys):
    def slow(arg, history):
        """/slow: wait"""
        raise KeyboardInterrupt

    agent.SLASH_COMMANDS["/slow"] = slow
    standin.policy = ScriptedModel([["still here"]])
    type_lines("/slow", "/help", "/nope", "hello")
    agent.repl()
    out = capsys.readouterr().out
    assert "[interrupted by the user]" in out and "still here" in out
    assert "  /slow: wait" in out and "Unknown command /nope." in out


@pytest.mark.parametrize("lines", [["q"], ["exit"], [], ["  EXIT  "]])
def test_repl_quits_cleanly(agent, standin, type_lines, capsys, lines):
    type_lines(*lines, "never sent") if lines else type_lines()  # [] is end of input
    agent.repl()
    assert standin.requests == []
    if lines:
        assert capsys.readouterr().out.startswith("s02 >> ")


def test_an_empty_line_does_nothing(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["answered"]])
    type_lines("", "   ", "hello")
    agent.repl()
    assert "answered" in capsys.readouterr().out
    assert len(standin.requests) == 1


def test_http_400_marks_the_prompt_and_keeps_the_repl(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["second answer"]])
    standin.fail_next(400)
    type_lines("first", "second")
    agent.repl()
    out = capsys.readouterr().out
    assert "[BadRequestError: " in out and "second answer" in out
    assert len(standin.requests) == 2 and standin.rejected == []
    assert texts(standin.requests[1]["messages"][0]) == [  # kept, and marked as never answered
        "first",
        texts(standin.requests[1]["messages"][0])[1],
        "second",
    ]
    assert texts(standin.requests[1]["messages"][0])[1].startswith("[not answered: BadRequestError")


def test_529_exhausting_retries_keeps_repl_running(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["back again"]])
    standin.fail_next(529, times=agent.client.max_retries + 1)
    type_lines("first", "second")
    agent.repl()
    out = capsys.readouterr().out
    assert "[OverloadedError: " in out and "back again" in out
    assert len(standin.requests) == agent.client.max_retries + 2
    assert standin.rejected == []


def test_529_then_success_is_retried_by_sdk(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([["made it"]])
    standin.fail_next(529)
    type_lines("hello")
    agent.repl()
    out = capsys.readouterr().out
    assert "made it" in out and "OverloadedError" not in out
    assert len(standin.requests) == 2


def test_api_error_mid_turn_closes_open_tool_calls(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel([[tool_use("bash", {"command": "echo hi"})], ["after"]])
    type_lines("first", "second")
    original = agent.run_tool

    def run_then_fail(call, malformed=None):  # the tool runs, then the next API call fails
        standin.fail_next(400)
        return original(call, malformed)

    agent.run_tool = run_then_fail
    agent.repl()
    assert "after" in capsys.readouterr().out
    assert standin.rejected == []
    resumed = standin.requests[-1]["messages"][2]
    assert (
        latest_results({"messages": [resumed]})[0]["content"] == "hi"
    )  # the result that ran is kept
    assert texts(resumed)[0].startswith("[not answered: ")


# -- Prompt caching, as the stand-in accounts it ---------------------------------------------
def test_the_history_is_read_from_the_cache_on_the_next_call(agent, standin):
    standin.policy = ScriptedModel([[tool_use("bash", {"command": "echo hi"})], ["done"]])
    agent.agent_loop([user("Here is a long brief. " * 300)])
    first, second = (call["reply"]["usage"] for call in standin.calls)
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1024
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] < 100  # only the new blocks are written


# -- Every reply a real endpoint sends (offline.QUIRKS) --------------------------------
RUNS = {
    "whitespace_text",
    "empty_text",
    "duplicate_ids",
    "reused_id",
    "odd_id",
    "empty_id",
    "string_input",
    "call_under_end_turn",
    "unknown_stop_reason",
    "no_stop",
    "null_usage",
    "unknown_block",
}
MALFORMED = {"list_input", "null_input", "missing_name", "empty_name"}
NO_CALL = {"whitespace_only", "tool_use_without_call"}


def test_the_quirk_lists_cover_the_catalogue():
    assert RUNS | MALFORMED | NO_CALL | {"no_usage"} == set(QUIRKS)


@pytest.mark.parametrize("quirk", sorted(set(QUIRKS) - {"no_usage"}))
def test_every_quirk_leaves_a_valid_history_and_the_next_prompt_is_answered(
    quirk, load_step, standin, type_lines, capsys
):
    out, results, ids = replay_a_quirk(
        load_step(STEP), standin, type_lines, capsys, quirk, quirk in NO_CALL
    )
    assert standin.rejected == []
    assert "answered second" in out or "answered third" in out
    assert len(ids) == len(set(ids)) == len(results)  # every call answered once, ids unique
    if quirk in RUNS:
        assert all("ran-42" in r["content"] for r in results) and results
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
        "tool_use_without_call",
    ):
        assert "[repaired the reply:" in out or quirk == "whitespace_only"


def test_a_stream_without_usage_is_one_line_and_the_session_goes_on(
    load_step, standin, type_lines, capsys
):
    """The SDK itself cannot read a stream whose message_start has no usage: one line, and
    the next prompt is answered."""
    standin.policy = ScriptedModel(
        [QUIRKS["no_usage"](tool_use("bash", {"command": "true"})), ["answered second"]]
    )
    type_lines("first", "second")
    load_step(STEP).repl()
    out = capsys.readouterr().out
    assert "[APIError: not a valid reply" in out and "answered second" in out
    assert standin.rejected == []


def test_whitespace_text_is_dropped_and_an_all_whitespace_reply_is_empty(
    load_step, standin, type_lines, capsys
):
    standin.policy = ScriptedModel([QUIRKS["whitespace_only"](None), ["fine"]])
    type_lines("first", "second")
    load_step(STEP).repl()
    assert "[the model sent an empty reply; tell it how to go on]" in capsys.readouterr().out
    assert [m["role"] for m in standin.requests[-1]["messages"]] == ["user"]  # nothing stored


def test_ids_are_repaired_deterministically_and_results_use_them(load_step, standin, type_lines):
    call = tool_use("bash", {"command": "true"})
    standin.policy = ScriptedModel([QUIRKS["duplicate_ids"](call), QUIRKS["odd_id"](call), ["ok"]])
    type_lines("go")
    load_step(STEP).repl()
    sent = standin.requests[-1]["messages"]
    assert [b["id"] for b in sent[1]["content"]] == ["call_0", "call_0_2"]  # the first keeps its id
    assert [b["tool_use_id"] for b in sent[2]["content"]] == ["call_0", "call_0_2"]
    assert sent[3]["content"][0]["id"] == "functions_bash_0"
    assert sent[4]["content"][0]["tool_use_id"] == "functions_bash_0"


def test_a_string_input_is_parsed_and_other_inputs_are_explained(load_step, standin, type_lines):
    standin.policy = ScriptedModel(
        [
            QUIRKS["string_input"](tool_use("bash", {"command": "echo x"})),
            QUIRKS["list_input"](tool_use("bash", {"command": "echo y"})),
            ["ok"],
        ]
    )
    type_lines("go")
    load_step(STEP).repl()
    sent = standin.requests[-1]["messages"]
    assert sent[1]["content"][0]["input"] == {"command": "echo x"}
    assert sent[2]["content"][0]["content"] == "x"
    assert sent[3]["content"][0]["input"] == {}
    assert "received name='bash', input=['echo y']" in sent[4]["content"][0]["content"]


def test_an_exception_without_a_message_still_explains_itself(load_step):
    agent = load_step(STEP)

    def fails_silently(command):
        raise ValueError()

    agent.TOOL_HANDLERS["bash"] = fails_silently
    result = agent.run_tool({"id": "t1", "name": "bash", "input": {"command": "ls"}})
    assert result["is_error"] and result["content"] == "Error: ValueError"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="a file-size limit in a forked child")
def test_a_write_that_runs_out_of_space_leaves_the_file_as_it_was(load_step, workdir):
    """A file-size limit stands in for a full disk: the write raises, the target is unchanged.
    The limit is set in a forked child, so this test process keeps writing freely."""
    import resource

    agent = load_step(STEP)
    target = workdir / "doc.txt"
    target.write_text("old\n" * 2500)
    report = workdir.parent / "report.txt"
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on, only os._exit
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
            try:
                agent.write_atomic(target, "new\n" * 7500)
                said = "wrote"
            except OSError as error:
                said = f"raised {error.errno}"
            report.write_text(said)  # a few bytes: under the limit
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert report.read_text().startswith("raised")
    assert len(target.read_text()) == 10000  # the old content
    assert sorted(p.name for p in workdir.iterdir()) == ["doc.txt"]  # no temp file left

@pytest.mark.parametrize("path", ["", ".", "sub"])
def test_write_file_refuses_a_folder_before_writing_anything(load_step, workdir, path):
    agent = load_step(STEP)
    (workdir / "sub").mkdir()
    before = sorted(p.name for p in workdir.parent.iterdir())
    result = agent.run_tool(
        {"id": "t1", "name": "write_file", "input": {"path": path, "content": "x"}}
    )
    assert result["is_error"] and "is a folder" in result["content"]
    assert sorted(p.name for p in workdir.parent.iterdir()) == before
    assert sorted(p.name for p in workdir.iterdir()) == ["sub"]


@pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX here")
def test_ctrl_c_while_bash_starts_leaves_no_command_running(load_step, workdir, monkeypatch):
    agent = load_step(STEP)
    real_popen = agent.subprocess.Popen
    started = []

    def popen_then_ctrl_c(*args, **kwargs):  # the Ctrl-C lands inside Popen, after the fork
        process = real_popen(*args, **kwargs)
        started.append(process)
        signal.raise_signal(signal.SIGINT)
        return process

    monkeypatch.setattr(agent.subprocess, "Popen", popen_then_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # however pytest started
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.run_bash("sleep 30")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert started and started[0].wait(timeout=30) is not None  # killed, not left running


class PeerClosed(Exception):
    """What the HTTP layer raises when a stream ends before its announced end."""


def cut_stream(error):
    """A stand-in for client.messages.stream whose reply breaks off with `error`."""

    class Stream:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __iter__(self):
            raise error

        def get_final_message(self):
            raise error

    return lambda **request: Stream()


def chained(outer, inner):
    """outer raised from inner, as an SDK that wraps the HTTP layer's error does."""
    try:
        try:
            raise inner
        except Exception as cause:
            raise outer from cause
    except Exception as error:
        return error


def test_a_stream_cut_short_is_one_line_whichever_error_the_sdk_raises(
    load_step, type_lines, capsys
):
    """Older SDKs let the HTTP layer's error through; newer ones wrap it in APIConnectionError.
    The step's line is the same either way, and the REPL answers the next prompt."""
    from anthropic import APIConnectionError

    lines = []
    for error in (
        PeerClosed("peer closed connection"),
        chained(APIConnectionError(message="Connection to x failed", request=None),
                PeerClosed("peer closed connection")),
    ):
        agent = load_step(STEP)
        agent.client.messages.stream = cut_stream(error)
        type_lines("first", "/help")
        agent.repl()
        out = capsys.readouterr().out
        errors = [line for line in out.splitlines() if line.startswith("[")]
        assert len(errors) == 1 and "Commands: /help" in out and "Traceback" not in out
        lines.append(errors[0])
    expected = "[APIError: not a valid reply: PeerClosed('peer closed connection')]"
    assert lines[0] == lines[1] == expected


def test_a_refusal_to_a_plain_string_turn_leaves_a_valid_history(agent, standin):
    """The SDK's own examples start a history with a plain string; a snippet copied from this
    step must take it: closing the refused turn adds a block to it."""
    refusal = {"type": "refusal", "category": "cyber", "explanation": "declined"}
    standin.policy = ScriptedModel([reply([], "refusal", refusal), ["fine"]])
    history = [{"role": "user", "content": "go"}]
    agent.agent_loop(history)
    assert history[0]["content"][0] == {"type": "text", "text": "go"}
    assert history[0]["content"][1]["text"].startswith("[not answered: the model declined")
    agent.add_user_text(history, "try again")
    agent.agent_loop(history)
    assert standin.rejected == [] and history[-1]["content"] == [{"type": "text", "text": "fine"}]


def test_a_parsed_input_names_its_call_and_an_ambiguous_edit_says_what_to_do(
    agent, standin, type_lines, capsys, workdir
):
    call = tool_use("bash", {"command": "echo x"})
    standin.policy = ScriptedModel([QUIRKS["string_input"](call), ["ok"]])
    type_lines("go")
    agent.repl()
    call_id = standin.requests[-1]["messages"][1]["content"][0]["id"]
    assert f"parsed the input of {call_id} from a string" in capsys.readouterr().out
    (workdir / "twice.txt").write_text("a\na\n")
    with pytest.raises(ValueError, match="appears 2 times in twice.txt; add context so it is uniq"):
        agent.run_edit("twice.txt", "a", "b")
