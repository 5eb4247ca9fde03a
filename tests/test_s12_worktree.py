"""s12: lanes (git worktrees) bound to tasks - against real git in temporary folders.

The script is loaded once; each test points its WORKDIR and BOARD at a fresh folder. git runs
with a fixed environment: an identity in variables, no global or system configuration, and a
ceiling so that no repository above the test's folder is found. Every refusal is checked twice:
the message says what to do, and nothing of the user's is gone (file contents, commits).
"""

import json
import os
import shutil
import subprocess

import pytest
from conftest import load_script

STEP = "s12_worktree"


s12 = load_script(STEP, f"{STEP}_units")
LaneError = s12.LaneError


@pytest.fixture
def work(tmp_path, monkeypatch):
    """An empty folder as the workspace, with git isolated from the machine's configuration."""
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        monkeypatch.delenv(key, raising=False)
    identity = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
                "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com"}
    for key, value in identity.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("HOME", str(tmp_path))  # git before 2.32 reads ~/.gitconfig
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    folder = (tmp_path / "work").resolve()
    folder.mkdir()
    monkeypatch.setattr(s12, "WORKDIR", folder)
    monkeypatch.setattr(s12, "BOARD", s12.TaskBoard(folder / ".tasks"))
    return folder


def git(cwd, *args) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def repo(work):
    """A repository with one commit: app.txt, and a .gitignore for the state folders."""
    (work / "app.txt").write_text("one\n")
    (work / ".gitignore").write_text(".tasks/\n.worktrees/\n")
    git(work, "init", "-q")
    git(work, "symbolic-ref", "HEAD", "refs/heads/main")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "start")
    return work


def task(subject="work"):
    return s12.BOARD.create(subject)["id"]


def refused(call, *args, **kwargs) -> str:
    with pytest.raises(LaneError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def registered(work, name) -> bool:
    """Whether git lists a worktree at .worktrees/<name>."""
    listed = git(work, "worktree", "list", "--porcelain").splitlines()
    return f"worktree {work / '.worktrees' / name}" in listed


def branch_tip(work, name):
    return git(work, "branch", "--list", "--format=%(objectname)", f"wt/{name}")


def commit_in_lane(work, name, text, message):
    lane = work / ".worktrees" / name
    (lane / "app.txt").write_text(text)
    git(lane, "commit", "-qam", message)


# --- the happy path --------------------------------------------------------------------


def test_create_run_list_and_keep(repo):
    first = task("formal")
    s12.BOARD.update(first, status="in_progress")
    made = s12.lane_create("formal", first)
    lane = repo / ".worktrees" / "formal"
    assert "wt/formal" in made and (lane / "app.txt").read_text() == "one\n"
    assert registered(repo, "formal") and branch_tip(repo, "formal") != ""
    assert s12.BOARD.get(first)["lane"] == "formal", "the task records its lane"
    assert "lane formal" in s12.render_board(s12.BOARD.tasks()), "the board names it"
    assert s12.lane_run("formal", "git rev-parse --abbrev-ref HEAD") == "wt/formal"
    assert "[exit code 3]" in s12.lane_run("formal", "exit 3"), "run_bash's rules"

    commit_in_lane(repo, "formal", "one, formally\n", "formal")
    listed = s12.lane_list()
    assert listed.startswith("formal: task #1; folder .worktrees/formal; branch wt/formal;")
    assert "0 uncommitted change(s); 1 commit(s) on no other branch" in listed
    assert (repo / "app.txt").read_text() == "one\n", "the main checkout is untouched"

    closed = s12.lane_close("formal", "keep")
    assert "kept for review" in closed and "unbound task(s) [1]" in closed
    assert not lane.exists() and not registered(repo, "formal")
    assert git(repo, "log", "-1", "--format=%s", "wt/formal") == "formal", "the commit stays"
    after = s12.BOARD.get(first)
    assert after["lane"] == "" and after["status"] == "in_progress", "unbound, status kept"
    assert "branch wt/formal" in s12.lane_list(), "a kept branch is listed for review"


def test_discard_of_a_clean_lane_removes_folder_and_branch(repo):
    s12.lane_create("tmp", task())
    closed = s12.lane_close("tmp", "discard")
    assert "branch wt/tmp deleted" in closed and "thrown away" not in closed
    assert not (repo / ".worktrees" / "tmp").exists() and branch_tip(repo, "tmp") == ""
    assert s12.lane_list() == "no lanes; lane_create makes one"
    assert s12.lane_create("tmp", task()).startswith("lane tmp: "), "the name is free again"


def test_one_lane_per_task_and_a_task_must_exist(repo):
    first = task()
    s12.lane_create("a", first)
    assert "already works in lane a" in refused(s12.lane_create, "b", first)
    with pytest.raises(s12.TaskError, match="NOT_FOUND"):
        s12.lane_create("c", 99)
    assert branch_tip(repo, "b") == branch_tip(repo, "c") == "", "refused before git"


# --- refusals: nothing of the user's is lost -------------------------------------------------


def test_a_dirty_lane_is_refused_by_both_actions_and_force_names_the_files(repo):
    s12.lane_create("dirty", task())
    lane = repo / ".worktrees" / "dirty"
    (lane / "app.txt").write_text("changed\n")
    (lane / "new.txt").write_text("mine\n")
    for action in ("keep", "discard"):
        message = refused(s12.lane_close, "dirty", action)
        assert "refused" in message and "app.txt" in message and "new.txt" in message
        assert "git commit" in message and "force=true" in message, "says how to go on"
        assert (lane / "app.txt").read_text() == "changed\n" and (lane / "new.txt").exists()
        assert s12.BOARD.get(1)["lane"] == "dirty", "still bound"
    closed = s12.lane_close("dirty", "keep", force=True)
    assert "thrown away (force): uncommitted:  M app.txt; uncommitted: ?? new.txt" in closed
    assert not lane.exists() and branch_tip(repo, "dirty") != ""


def test_discard_of_commits_on_no_other_branch_is_refused_until_they_are_elsewhere(repo):
    s12.lane_create("feature", task())
    commit_in_lane(repo, "feature", "two\n", "the feature")
    tip = branch_tip(repo, "feature")
    message = refused(s12.lane_close, "feature", "discard")
    assert "the feature" in message and "keep" in message and "force=true" in message
    assert branch_tip(repo, "feature") == tip and (repo / ".worktrees/feature").is_dir()
    s12.lane_close("feature", "keep")  # keep loses nothing: the branch holds the commit
    assert "the feature" in refused(s12.lane_close, "feature", "discard"), "a kept branch too"
    assert branch_tip(repo, "feature") == tip
    git(repo, "merge", "-q", "--ff-only", "wt/feature")  # now main has the commit as well
    assert "thrown away" not in s12.lane_close("feature", "discard")
    assert branch_tip(repo, "feature") == "" and (repo / "app.txt").read_text() == "two\n"


def test_forced_discard_names_the_commits_it_threw_away(repo):
    s12.lane_create("doomed", task())
    commit_in_lane(repo, "doomed", "x\n", "doomed work")
    closed = s12.lane_close("doomed", "discard", force=True)
    assert "thrown away (force): commit " in closed and "doomed work" in closed
    assert branch_tip(repo, "doomed") == ""


def test_a_taken_name_is_refused_with_what_holds_it(repo):
    git(repo, "branch", "wt/taken")
    assert "branch wt/taken" in refused(s12.lane_create, "taken", task())
    assert not registered(repo, "taken")
    mine = repo / ".worktrees" / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my notes\n")
    message = refused(s12.lane_create, "mine", task())
    assert "folder .worktrees/mine" in message and "branch" not in message.split("Pick")[0]
    assert "there is no lane mine" in refused(s12.lane_close, "mine", "discard", force=True)
    assert (mine / "notes.txt").read_text() == "my notes\n" and branch_tip(repo, "mine") == ""


@pytest.mark.parametrize("name", ["x/y", "../x", "A B", "", "-x", "x.y", "a" * 41, "x\n", 3])
def test_a_bad_name_is_refused_before_git_sees_it(work, monkeypatch, name):
    monkeypatch.setattr(s12, "git", lambda *args, **kw: pytest.fail(f"git ran: {args}"))
    for call, args in ((s12.lane_create, (name, 1)), (s12.lane_run, (name, "ls")),
                       (s12.lane_close, (name, "discard"))):
        assert "invalid lane name" in refused(call, *args)
    assert not (work / ".worktrees").exists() and not (work.parent / "x").exists()


def lane_results(agent):
    calls = [("lane_create", {"name": "a", "task_id": 1}), ("lane_run", {"name": "a",
             "command": "ls"}), ("lane_list", {}), ("lane_close", {"name": "a", "action": "keep"})]
    return [agent.run_tool({"id": f"t{n}", "name": name, "input": args})
            for n, (name, args) in enumerate(calls)]


def test_no_repository_or_no_commit_each_tool_says_in_one_line_what_to_run(work):
    first = task()  # the rest of s07 works as before
    for result in lane_results(s12):
        assert result["is_error"] and "\n" not in result["content"]
        assert "not in a git repository" in result["content"] and "git init" in result["content"]
    git(work, "init", "-q")
    for result in lane_results(s12):
        assert result["is_error"] and "\n" not in result["content"]
        assert "no commit yet" in result["content"] and "git commit" in result["content"]
    assert s12.BOARD.get(first)["status"] == "pending" and not (work / ".worktrees").exists()


# --- the states a hand or a crash leaves ----------------------------------------------------


def test_a_lane_deleted_by_hand_is_shown_missing_and_either_action_closes_it(repo):
    for name in ("gone-keep", "gone-discard", "gone-work"):
        s12.lane_create(name, task(name))
    commit_in_lane(repo, "gone-work", "work\n", "work on a lane later deleted")
    for name in ("gone-keep", "gone-discard", "gone-work"):
        shutil.rmtree(repo / ".worktrees" / name)
    listed = s12.lane_list().splitlines()
    assert len(listed) == 3 and all("folder MISSING" in line for line in listed)
    assert "lane_run" not in refused(s12.lane_run, "gone-keep", "ls")

    s12.lane_close("gone-keep", "keep")
    assert not registered(repo, "gone-keep") and branch_tip(repo, "gone-keep") != ""
    s12.lane_close("gone-discard", "discard")
    assert not registered(repo, "gone-discard") and branch_tip(repo, "gone-discard") == ""
    tip = branch_tip(repo, "gone-work")
    assert "work on a lane later deleted" in refused(s12.lane_close, "gone-work", "discard")
    assert branch_tip(repo, "gone-work") == tip, "the commits of a deleted folder are safe"
    assert "MISSING" not in s12.lane_list().split("gone-work")[0]
    assert all(task["lane"] in ("", "gone-work") for task in s12.BOARD.tasks())


def test_a_crash_between_worktree_add_and_the_board_write_is_listed_and_closed(
    repo, monkeypatch
):
    first = task()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # the process stops right after `git worktree add`

    with monkeypatch.context() as patch:
        patch.setattr(s12.BOARD, "update", crash)
        with pytest.raises(KeyboardInterrupt):
            s12.lane_create("half", first)
    assert registered(repo, "half") and s12.BOARD.get(first).get("lane") is None
    assert s12.lane_list().startswith("half: task none; folder .worktrees/half; branch wt/half")
    assert "branch wt/half" in refused(s12.lane_create, "half", first), "not made twice"
    s12.lane_close("half", "discard")
    assert not registered(repo, "half") and branch_tip(repo, "half") == ""
    s12.lane_create("half", first)  # the name is usable again
    assert s12.BOARD.get(first)["lane"] == "half"


def test_a_binding_left_after_git_was_cleaned_is_listed_and_closed(repo):
    first = task()
    s12.BOARD.update(first, lane="ghost")  # a crash after the branch went, before the unbind
    assert s12.lane_list() == ("ghost: task #1; no folder; branch none; 0 uncommitted change(s);"
                               " 0 commit(s) on no other branch")
    assert "branch wt/ghost was already gone" in s12.lane_close("ghost", "keep")
    assert s12.BOARD.get(first)["lane"] == "" and s12.lane_list().startswith("no lanes")
    assert "there is no lane ghost" in refused(s12.lane_close, "ghost", "keep")


def test_a_lane_whose_task_was_deleted_still_closes_and_says_what_it_threw_away(repo):
    doomed = task()
    s12.lane_create("orphan", doomed)
    commit_in_lane(repo, "orphan", "x\n", "orphan work")
    s12.BOARD.update(doomed, status="deleted")  # the task goes, its lane field stays
    assert s12.lane_list().startswith("orphan: task none; folder .worktrees/orphan;")
    closed = s12.lane_close("orphan", "discard", force=True)
    assert "thrown away (force): commit " in closed and "orphan work" in closed
    assert s12.lane_list().startswith("no lanes") and not registered(repo, "orphan")
    assert s12.BOARD.get(doomed)["lane"] == "orphan"  # a deleted task is never changed


def test_a_lane_field_that_is_not_text_is_reported_with_its_file(repo):
    first = task()
    path = s12.BOARD.path(first)
    path.write_text(json.dumps({**json.loads(path.read_text()), "lane": 7}))
    with pytest.raises(s12.CorruptFile, match="task_1.json: lane must be a string"):
        s12.lane_list()


# --- the tool layer --------------------------------------------------------------------------


def test_tools_are_declared_and_refusals_reach_the_model_as_errors(repo, monkeypatch):
    first = task()
    names = [tool["name"] for tool in s12.TOOLS]
    assert {"lane_create", "lane_run", "lane_list", "lane_close"} <= set(names)
    ok, run, listed, closed = lane_results(s12)
    assert not ok.get("is_error") and "app.txt" in run["content"] and "a: task #1" in listed[
        "content"]
    assert not closed.get("is_error")
    bad = s12.run_tool({"id": "x", "name": "lane_close", "input": {"name": "a", "action": "drop"}})
    assert bad["is_error"] and "'keep'" in bad["content"] and "'discard'" in bad["content"]
    s12.lane_create("b", first)
    monkeypatch.setitem(s12.TOOL_HANDLERS, "task_get", s12.returning_json(s12.BOARD.get))
    got = s12.run_tool({"id": "y", "name": "task_get", "input": {"task_id": first}})
    assert '"lane": "b"' in got["content"], "task_get names the lane"


def test_the_offline_demo_keeps_one_lane_discards_the_other_and_shows_a_refusal(offline_demo):
    out = offline_demo(STEP).done.stdout
    assert "ERROR Error: refused: closing lane shout (discard) would lose uncommitted" in out
    assert "thrown away (force): uncommitted: M greet.py" in out  # as the preview shows it
    assert "HELLO, ADA!!!" in out and "Good day to you, Ada." in out
    graph = out.split("$ git log --oneline --graph --all --decorate")[1]
    assert "(wt/formal) greet: formal" in graph and "wt/shout" not in graph
    assert "(untouched):\ndef greet(name):\n    return f\"Hello, {name}.\"" in out
