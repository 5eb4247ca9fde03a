"""s07: the persistent task board - its rules, its races, its tools, and a learner's run.

Units use the script's TaskBoard directly (loaded once; importing it has no side effects).
The creation race uses real processes (the claim race is s11's: claiming is its lesson).
The tool layer, slash commands and the REPL run against
the local stand-in; one end-to-end test runs the script as a subprocess, twice.
"""

import json
import os
import shutil
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import PROCESSES, code_of, load_script, run_processes

from offline import ScriptedModel, latest_results, tool_use

STEP = "s07_task_system"


s07 = load_script(STEP, f"{STEP}_units")
TaskError = s07.TaskError


@pytest.fixture
def tasks_dir(tmp_path):
    return tmp_path / ".tasks"


@pytest.fixture
def board(tasks_dir):
    return s07.TaskBoard(tasks_dir)


def error_of(call, *args, **kwargs) -> TaskError:
    with pytest.raises(TaskError) as caught:
        call(*args, **kwargs)
    return caught.value


def snapshot(folder: Path) -> dict:
    """Every file's bytes and inode: a rewrite with the same bytes still shows (a new inode)."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_ino)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def diamond(board):
    """1 unblocks 2 and 3, which both gate 4."""
    board.create("Plan")
    board.create("Build", blocked_by=[1])
    board.create("Document", blocked_by=[1])
    board.create("Ship", blocked_by=[2, 3])


# --- storage -------------------------------------------------------------------


def test_create_writes_one_file_per_task_and_the_last_id(board, tasks_dir):
    first = board.create("  Plan the work  ", "why and how")
    second = board.create("Do the work", blocked_by=[first["id"]])
    assert (first["id"], second["id"]) == (1, 2)
    stored = json.loads((tasks_dir / "task_2.json").read_text())
    assert stored["subject"] == "Do the work" and stored["blockedBy"] == [1]
    assert set(stored) == {
        "id",
        "subject",
        "description",
        "status",
        "blockedBy",
        "owner",
        "created_at",
        "updated_at",
    }  # `blocks` is never stored
    assert json.loads((tasks_dir / "task_1.json").read_text())["subject"] == "Plan the work"
    state = json.loads((tasks_dir / ".board" / "state.json").read_text())
    assert state["generation"] == 2 and state["last_id"] == 2
    assert sorted(p.name for p in tasks_dir.glob("task_*.json")) == ["task_1.json", "task_2.json"]


def test_timestamps_are_utc_iso8601(board):
    task = board.create("Plan")
    for field in ("created_at", "updated_at"):
        stamp = datetime.fromisoformat(task[field])
        assert stamp.utcoffset() == timedelta(0)


def test_constructing_and_reading_an_empty_board_creates_nothing(tasks_dir):
    board = s07.TaskBoard(tasks_dir)
    assert board.tasks() == [] and board.ready() == []
    assert code_of(error_of(board.get, 1)) == "NOT_FOUND"
    assert not tasks_dir.exists()


# --- validation rules ----------------------------------------------------------------


def test_subject_must_not_be_blank(board):
    assert code_of(error_of(board.create, "   ")) == "INVALID_ARGS"
    board.create("Plan")
    assert code_of(error_of(board.update, 1, subject=" \n")) == "INVALID_ARGS"
    assert board.get(1)["subject"] == "Plan"


def test_ids_may_arrive_as_int_or_numeric_string(board):
    board.create("Plan")
    board.create("Build", blocked_by=["1"])
    assert board.get("2")["blockedBy"] == [1]
    assert board.update(" 2 ", subject="Build it")["subject"] == "Build it"
    for bad in ("two", "-1", "0", 1.5, True, None, "1e3"):
        assert code_of(error_of(board.get, bad)) == "INVALID_ARGS"


def test_unknown_ids_are_rejected(board):
    board.create("Plan")
    assert code_of(error_of(board.update, 9, status="completed")) == "NOT_FOUND"
    assert code_of(error_of(board.get, 9)) == "NOT_FOUND"
    assert code_of(error_of(board.create, "Build", blocked_by=[9])) == "INVALID_DEPENDENCY"
    assert code_of(error_of(board.update, 1, add_blocked_by=[9])) == "INVALID_DEPENDENCY"
    assert board.tasks()[0]["blockedBy"] == [] and len(board.tasks()) == 1


def test_an_update_without_a_change_is_refused_and_says_what_it_takes(board):
    board.create("Plan")
    error = error_of(board.update, 1)
    assert code_of(error) == "INVALID_ARGS" and "pass at least one change" in str(error)
    assert "add_blocked_by" in str(error)
    no_change = error_of(board.update, 1, add_blocked_by=[], remove_blocked_by=[])
    assert code_of(no_change) == "INVALID_ARGS"


def test_a_list_of_ids_that_is_no_list_names_its_argument(board):
    board.create("Plan")
    assert "blocked_by must be a list" in str(error_of(board.create, "Build", blocked_by=1))
    for field in ("add_blocked_by", "remove_blocked_by"):
        error = error_of(board.update, 1, **{field: "1"})
        assert code_of(error) == "INVALID_ARGS" and f"{field} must be a list of ids" in str(error)
        assert "got '1'" in str(error)


def test_self_edges_are_rejected(board):
    board.create("Plan")
    assert code_of(error_of(board.update, 1, add_blocked_by=[1])) == "INVALID_DEPENDENCY"
    assert code_of(error_of(board.update, 1, add_blocked_by=["1"])) == "INVALID_DEPENDENCY"


def test_edges_to_deleted_tasks_are_rejected(board):
    board.create("Plan")
    board.create("Build")
    board.update(1, status="deleted")
    assert code_of(error_of(board.update, 2, add_blocked_by=[1])) == "INVALID_DEPENDENCY"
    assert code_of(error_of(board.create, "Ship", blocked_by=[1])) == "INVALID_DEPENDENCY"
    assert code_of(error_of(board.update, 1, subject="Revive")) == "INVALID_STATUS"


def test_cycle_error_names_the_whole_cycle(board):
    for subject in "ABCDE":
        board.create(subject)
    board.update(5, add_blocked_by=[3])
    error = error_of(board.update, 3, add_blocked_by=[5])
    assert code_of(error) == "INVALID_DEPENDENCY" and "3 -> 5 -> 3" in str(error)
    board.update(2, add_blocked_by=[1])
    board.update(4, add_blocked_by=[2])
    error = error_of(board.update, 1, add_blocked_by=[4])  # closes 1 -> 2 -> 4 -> 1
    assert "1 -> 2 -> 4 -> 1" in str(error)


def test_blocked_task_cannot_start_or_complete(board):
    diamond(board)
    board.update(1, status="completed")
    board.update(2, status="in_progress")
    for status in ("in_progress", "completed"):
        error = error_of(board.update, 4, status=status)
        assert code_of(error) == "INVALID_STATUS"
        assert "2 (in_progress)" in str(error) and "3 (pending)" in str(error)
    assert board.get(4)["status"] == "pending"


def test_a_started_task_stays_editable_when_a_blocker_reopens(board):
    board.create("Design")
    board.create("Build", blocked_by=[1])
    board.update(1, status="completed")
    board.update(2, status="in_progress")
    board.update(1, status="pending")  # the design is reopened under a running build
    assert board.update(2, subject="Build the API", owner="ann")["subject"] == "Build the API"
    assert (
        code_of(error_of(board.update, 2, status="completed")) == "INVALID_STATUS"
    )  # finishing is a move
    assert board.update(2, status="pending")["status"] == "pending"


def test_failed_blocker_keeps_dependents_blocked_until_reopened(board):
    board.create("Fetch data")
    board.create("Analyse", blocked_by=[1])
    failed = board.update(1, status="failed")
    assert "unblocked" not in failed
    assert [t["id"] for t in board.ready()] == []
    assert code_of(error_of(board.update, 2, status="in_progress")) == "INVALID_STATUS"
    board.update(1, status="pending")
    assert board.update(1, status="completed")["unblocked"] == [2]
    assert [t["id"] for t in board.ready()] == [2]


def test_delete_removes_the_task_from_every_blocked_by_and_reports_unblocked(board, tasks_dir):
    diamond(board)
    board.update(1, status="completed")
    board.update(2, status="completed")
    result = board.update(3, status="deleted")
    assert result["status"] == "deleted" and result["unblocked"] == [4]
    assert json.loads((tasks_dir / "task_4.json").read_text())["blockedBy"] == [2]
    assert [(t["id"], t["status"]) for t in board.tasks()] == [
        (1, "completed"),
        (2, "completed"),
        (3, "deleted"),
        (4, "pending"),
    ]


def test_rejected_update_leaves_every_file_byte_identical(board, tasks_dir):
    diamond(board)
    board.update(1, status="completed")
    before = snapshot(tasks_dir)
    # valid parts first (subject, owner, an edge to another task), then a cycle-closing edge last
    error = error_of(
        board.update, 2, subject="New name", owner="bob", remove_blocked_by=[1], add_blocked_by=[4]
    )
    assert code_of(error) == "INVALID_DEPENDENCY"
    assert (
        code_of(
            error_of(board.update, 3, status="completed", add_blocked_by=[2], remove_blocked_by=[2])
        )
        == "INVALID_ARGS"
    )
    deleting = error_of(board.update, 3, status="deleted", remove_blocked_by=[1])
    assert code_of(deleting) == "INVALID_ARGS"
    assert code_of(error_of(board.update, 4, description="x", status="completed")) == (
        "INVALID_STATUS"
    )
    assert snapshot(tasks_dir) == before


def count_calls(monkeypatch, owner, name) -> list:
    calls = []
    original = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *args: calls.append(args) or original(*args))
    return calls


def test_completing_a_task_writes_only_its_own_file_and_reads_back_only_that(
    board, tasks_dir, monkeypatch
):
    board.create("Base")
    for n in range(10):
        board.create(f"Dependent {n}", blocked_by=[1])
    board.tasks()  # its first read: from here on it knows the board
    before = snapshot(tasks_dir)
    fsyncs = count_calls(monkeypatch, s07.os, "fsync")
    reads = count_calls(monkeypatch, s07.TaskBoard, "read")
    full_reads = count_calls(monkeypatch, s07.TaskBoard, "ids")
    result = board.update(1, status="completed")
    assert result["unblocked"] == list(range(2, 12)) and result["blocks"] == list(range(2, 12))
    after = snapshot(tasks_dir)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"task_1.json", ".board/state.json"}  # the task, and the readers' cue
    assert len(fsyncs) == 1 and full_reads == []  # one fsynced write; the board is not re-read
    assert {task_id for (_, task_id) in reads} == {1}  # the task it changed, and nothing else
    assert board.create("One more")["id"] == 12 and len(fsyncs) == 2 and full_reads == []
    reads.clear()
    assert board.get(12)["blocks"] == [] and [t["id"] for t in board.ready()] == list(range(2, 13))
    assert full_reads == [] and {task_id for (_, task_id) in reads} == {12}


def reads_of(reader, calls) -> list:
    return sorted(task_id for (board, task_id) in calls if board is reader)


def test_a_reader_reads_again_only_the_files_changed_since_it_last_looked(
    board, tasks_dir, monkeypatch
):
    """Another board object is another process's view: after its first look it re-reads a task
    file only when state.json's log says a change wrote it."""
    diamond(board)
    other = s07.TaskBoard(tasks_dir)
    reads = count_calls(monkeypatch, s07.TaskBoard, "read")
    full_reads = count_calls(monkeypatch, s07.TaskBoard, "ids")
    for _ in range(5):
        assert [t["id"] for t in other.ready()] == [1]
    assert [reader for (reader,) in full_reads] == [other]  # its first look: every file, once
    assert reads_of(other, reads) == [1, 2, 3, 4]
    board.update(1, status="completed")  # changes by someone else: the generation moves on
    board.update(4, subject="Ship it")
    reads.clear()
    assert [t["id"] for t in other.ready()] == [2, 3] and reads_of(other, reads) == [1, 4]
    assert other.get(4)["subject"] == "Ship it"
    assert [reader for (reader,) in full_reads].count(other) == 1


def test_a_reader_catching_up_while_writers_write_ends_with_the_board_as_it_is(
    tasks_dir, monkeypatch
):
    """Three writers change subjects, owners and edges (always to a lower id: never a cycle) while
    a fourth board reads without the lock. Then, with the reader paused, five more changes; the
    reader catches up on them from the log alone, and its copy equals a fresh full read - tasks
    and `blocks` alike."""
    setup = s07.TaskBoard(tasks_dir)
    for n in range(1, 21):
        setup.create(f"Task {n}")
    reader, caught_up = s07.TaskBoard(tasks_dir), {}
    stop, paused, resume = threading.Event(), threading.Event(), threading.Event()
    full_reads = count_calls(monkeypatch, s07.TaskBoard, "ids")

    def write(board, seed, steps):
        for step in range(steps):
            task_id = 2 + (seed * 7 + step * 5) % 19  # 2..20
            edge = {f"{'add' if step % 3 else 'remove'}_blocked_by": [1 + step % (task_id - 1)]}
            board.update(task_id, subject=f"w{seed} s{step}", owner=f"w{seed}", **edge)

    def read():  # each thread has its own copy: this one is read, and caught up, here
        while not stop.is_set():
            reader.get(1 + len(reader.ready()) % 20)
        reader.current()  # up to date with the writers, then paused
        paused.set()
        resume.wait(30)
        before = len(full_reads)
        caught_up.update(reader.current(), full_reads=len(full_reads) - before)

    watcher = threading.Thread(target=read)
    writers = [
        threading.Thread(target=write, args=(s07.TaskBoard(tasks_dir), seed, 40))
        for seed in range(3)
    ]
    for thread in [watcher, *writers]:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    assert paused.wait(30)
    write(setup, 3, 5)  # the reader is paused: these it can learn only from the log
    resume.set()
    watcher.join()
    fresh = s07.TaskBoard(tasks_dir).current()
    assert caught_up["full_reads"] == 0 and caught_up["state"] == fresh["state"]
    assert caught_up["tasks"] == fresh["tasks"]
    assert {i: b for i, b in caught_up["blocks"].items() if b} == {
        i: b for i, b in fresh["blocks"].items() if b
    }


def test_a_reader_further_behind_than_the_log_reads_everything(board, tasks_dir, monkeypatch):
    diamond(board)
    other = s07.TaskBoard(tasks_dir)
    other.ready()
    monkeypatch.setattr(s07, "LOG_SIZE", 2)
    for subject in ("One", "Two", "Three"):  # three changes; state.json names the last two
        board.update(4, subject=subject)
    full_reads = count_calls(monkeypatch, s07.TaskBoard, "ids")
    assert other.get(1)["blocks"] == [2, 3] and [reader for (reader,) in full_reads] == [other]
    assert [t["subject"] for t in other.tasks()][3] == "Three"


def test_a_hand_edit_before_a_change_is_not_hidden_by_its_log(board, tasks_dir, monkeypatch):
    """Between two changes someone replaces a file by hand; the next change's log names only its
    own task, so the writer, finding the folder not as the last change left it, empties the log:
    a reader behind it reads every file."""
    for n in range(5):
        board.create(f"Task {n + 1}")
    other = s07.TaskBoard(tasks_dir)
    assert len(other.ready()) == 5
    record = json.loads((tasks_dir / "task_3.json").read_text())
    (tasks_dir / "hand.tmp").write_text(json.dumps({**record, "subject": "Renamed by hand"}))
    os.replace(tasks_dir / "hand.tmp", tasks_dir / "task_3.json")
    mtime = tasks_dir.stat().st_mtime_ns  # a later tick, also where the clock is coarse
    os.utime(tasks_dir, ns=(mtime, mtime + 10**9))
    board.update(1, subject="Task one")
    assert json.loads((tasks_dir / ".board" / "state.json").read_text())["changed"] == []
    assert [t["subject"] for t in other.ready()][:3] == ["Task one", "Task 2", "Renamed by hand"]


def test_a_hand_edit_is_seen_replaced_at_once_in_place_by_a_listing_or_a_change(
    board, tasks_dir
):
    for n in range(40):
        board.create(f"Task {n + 1}")
    assert board.get(1)["subject"] == "Task 1"
    record = json.loads((tasks_dir / "task_30.json").read_text())
    replaced = tasks_dir / "replacement.tmp"  # as most editors save: a new file, renamed over
    replaced.write_text(json.dumps({**record, "subject": "Renamed by hand"}))
    os.replace(replaced, tasks_dir / "task_30.json")
    assert [t["id"] for t in board.ready()][29] == 30  # the folder changed: read again
    assert board.ready()[29]["subject"] == "Renamed by hand"
    (tasks_dir / "task_35.json").write_text(json.dumps({**record, "id": 35, "subject": "In place"}))
    assert board.get(35)["subject"] == "In place"  # get reads the task's own file
    (tasks_dir / "task_36.json").write_text("{broken")  # in place: the folder does not change
    with pytest.raises(s07.CorruptFile, match="task_36.json: cannot be read as JSON"):
        board.tasks()  # a listing compares every file's stat
    with pytest.raises(s07.CorruptFile, match="task_36.json: cannot be read as JSON"):
        board.ready()  # and the board stays suspect until a full read passes


def test_an_update_that_changes_nothing_writes_nothing(board, tasks_dir):
    board.create("Plan")
    before = snapshot(tasks_dir)
    board.update(1, subject="Plan", status="pending")
    assert snapshot(tasks_dir) == before


def test_a_failed_write_leaves_the_old_file_and_no_temp_files(board, tasks_dir, monkeypatch):
    board.create("Plan")
    before = snapshot(tasks_dir)

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(s07.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        board.update(1, status="in_progress")
    assert snapshot(tasks_dir) == before  # the old file, and no temp file beside it


def test_stale_temp_files_of_killed_writers_are_swept_once_per_board(board, tasks_dir):
    board.create("Plan")
    for n in range(3):  # what a writer killed between creating and renaming its temp file leaves
        (tasks_dir / f".task_1.json.dead{n}.tmp").write_text("{half")
    board.create("Build")  # this board swept at its first change, not at every one
    assert len(list(tasks_dir.glob(".*.tmp"))) == 3
    s07.TaskBoard(tasks_dir).update(2, subject="Build it")  # a new board: its first change sweeps
    assert sorted(snapshot(tasks_dir)) == [
        ".board/.lock",
        ".board/state.json",
        "task_1.json",
        "task_2.json",
    ]


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_rewritten_task_files_keep_their_mode_and_read_only_ones_are_refused(board, tasks_dir):
    board.create("Plan")
    (tasks_dir / "task_1.json").chmod(0o640)
    board.update(1, subject="Plan well")
    assert (
        tasks_dir / "task_1.json"
    ).stat().st_mode & 0o777 == 0o640  # mkstemp would have made it 0600
    (tasks_dir / "task_1.json").chmod(0o444)
    with pytest.raises(PermissionError, match="read-only"):
        board.update(1, subject="Plan better")
    assert board.get(1)["subject"] == "Plan well"


@pytest.mark.parametrize(
    "content",
    [
        "7" * 5000,
        '{"generation": 3}',
        '{"generation": 3, "last_id": "2"}',
        "[1, 2]",
        '{"generation": ' + "7" * 5000 + ', "last_id": 2, "changed": [], "mtime": 1}',
        '{"generation": 3, "last_id": 2, "changed": [0], "mtime": 1}',
    ],
)
def test_a_corrupt_state_json_is_named_not_a_bare_error(board, tasks_dir, content):
    board.create("Plan")
    (tasks_dir / ".board" / "state.json").write_text(content)
    for attempt in (lambda: board.create("Build"), board.tasks, lambda: board.get(1)):
        with pytest.raises(s07.CorruptFile) as caught:
            attempt()
        assert str(tasks_dir / ".board" / "state.json") in str(caught.value)
        assert "last_id the last id handed out" in str(caught.value)
        assert f"found {content[:40].encode()!r}" in str(caught.value)  # what it found, cut short
    assert not (tasks_dir / "task_2.json").exists()


def test_readers_take_no_lock(board, tasks_dir):
    """A change holds the lock; list, ready and get go on reading the atomically written files."""
    diamond(board)
    holding, release = threading.Event(), threading.Event()

    def hold():
        with s07.file_lock(tasks_dir / ".board" / ".lock"):
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(5)
        assert [t["id"] for t in board.ready()] == [1] and board.get(4)["blockedBy"] == [2, 3]
    finally:
        release.set()
        holder.join()


# --- the graph ---------------------------------------------------------------------------


def test_blocks_is_derived_from_blocked_by(board, tasks_dir):
    diamond(board)
    assert board.get(1)["blocks"] == [2, 3]
    assert board.get(3)["blocks"] == [4]
    board.update(4, remove_blocked_by=[3])
    assert board.get(3)["blocks"] == []
    board.update(4, add_blocked_by=[3])  # stored once, on the waiting end
    assert json.loads((tasks_dir / "task_4.json").read_text())["blockedBy"] == [2, 3]
    assert "blocks" not in json.loads((tasks_dir / "task_3.json").read_text())
    board.update(4, status="deleted")  # a deleted task waits for nothing
    assert board.get(2)["blocks"] == [] and board.get(3)["blocks"] == []


def test_list_is_ordered_by_id_numerically(board):
    for n in range(12):
        board.create(f"Task {n + 1}")
    assert [t["id"] for t in board.tasks()] == list(range(1, 13))


def test_ids_are_never_reused_after_delete(board, tasks_dir):
    board.create("A")
    board.create("B")
    board.update(2, status="deleted")
    assert board.create("C")["id"] == 3
    (tasks_dir / "task_3.json").unlink()  # even a file removed by hand does not give its id back
    assert s07.TaskBoard(tasks_dir).create("D")["id"] == 4


def test_a_lost_state_json_never_overwrites_a_task(board, tasks_dir):
    board.create("A")
    board.create("B")
    (tasks_dir / ".board" / "state.json").unlink()
    assert board.create("C")["id"] == 3
    assert board.get(1)["subject"] == "A"


def test_the_board_makes_its_folder_where_first_needed_never_a_deleted_workspace(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    board = s07.TaskBoard(workspace / ".tasks")
    assert board.create("Plan")["id"] == 1  # .tasks/ made at the first change
    shutil.rmtree(workspace)  # the workspace is deleted under a running agent
    with pytest.raises(FileNotFoundError):
        board.create("Build")
    assert not workspace.exists()  # file_lock made no parents


def test_a_crash_between_the_task_and_state_json_never_hands_an_id_out_twice(
    board, tasks_dir, monkeypatch
):
    board.create("A")
    replace = os.replace

    def crash_before_state_json(source, target):
        if Path(target).name == "state.json":
            raise SystemExit("killed")  # the process dies after the task's fsynced write
        replace(source, target)

    monkeypatch.setattr(s07.os, "replace", crash_before_state_json)
    with pytest.raises(SystemExit):
        board.create("B")
    monkeypatch.setattr(s07.os, "replace", replace)
    assert json.loads((tasks_dir / ".board" / "state.json").read_text())["last_id"] == 1  # behind
    after_restart = s07.TaskBoard(tasks_dir)
    assert after_restart.create("C")["id"] == 3  # task_2.json is there: 2 is skipped
    assert [t["subject"] for t in after_restart.tasks()] == ["A", "B", "C"]
    assert after_restart.create("D")["id"] == 4


def test_reopening_a_task_reblocks_its_dependents(board):
    board.create("Build")
    board.create("Release", blocked_by=[1])
    board.update(1, status="completed")
    assert [t["id"] for t in board.ready()] == [2]
    board.update(1, status="pending")
    assert board.ready()[0]["id"] == 1 and len(board.ready()) == 1
    assert code_of(error_of(board.update, 2, status="in_progress")) == "INVALID_STATUS"


def test_unblocked_lists_only_tasks_whose_last_blocker_finished(board):
    diamond(board)
    assert board.update(1, status="completed")["unblocked"] == [2, 3]
    assert board.update(2, status="completed")["unblocked"] == []
    assert board.update(3, status="completed")["unblocked"] == [4]
    assert "unblocked" not in board.update(4, status="in_progress")


def test_ready_means_pending_unowned_and_unblocked(board):
    diamond(board)
    board.create("Side job")
    board.update(5, owner="carol")
    assert [t["id"] for t in board.ready()] == [1]
    board.update(1, status="completed")
    assert [t["id"] for t in board.ready()] == [2, 3]


def test_an_owned_pending_task_is_not_ready_but_is_reported_unblocked(board):
    board.create("Plan")
    board.create("Build", blocked_by=[1])
    board.update(2, owner="alice")  # assigned ahead of time (s09's lead does this)
    assert board.update(1, status="completed")["unblocked"] == [2]
    assert board.ready() == []


def test_unknown_status_is_rejected(board):
    board.create("Plan")
    error = error_of(board.update, 1, status="done")
    assert code_of(error) == "INVALID_STATUS" and "completed" in str(error)


# --- corrupt files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, reason",
    [
        ("task_2.json", "{not json", "cannot be read as JSON"),
        ("task_2.json", None, "unknown status 'done'"),
        ("task_1.json", None, "dependency cycle 1 -> 2 -> 1"),
    ],
)
def test_corrupt_file_is_reported_with_path_and_reason_and_never_overwritten(
    board, tasks_dir, name, content, reason
):
    board.create("A")
    board.create("B", blocked_by=[1])
    if content is None and "status" in reason:
        record = json.loads((tasks_dir / name).read_text())
        content = json.dumps({**record, "status": "done"})
    elif content is None:  # hand-edit task 1 to wait for task 2: a cycle no API call could create
        record = json.loads((tasks_dir / name).read_text())
        content = json.dumps({**record, "blockedBy": [2]})
    (tasks_dir / name).write_text(content)
    before = snapshot(tasks_dir)
    for attempt in (
        board.tasks,
        board.ready,
        lambda: board.get(1),
        lambda: board.update(2, status="deleted"),
    ):
        with pytest.raises(s07.CorruptFile) as caught:
            attempt()
        assert reason in str(caught.value) and str(tasks_dir / name) in str(caught.value)
    assert snapshot(tasks_dir) == before


# --- real processes racing for the board -------------------------------------------------


def create_many(tasks_dir, worker, count, results):
    board = s07.TaskBoard(Path(tasks_dir))
    results.put([board.create(f"worker {worker} task {n}")["id"] for n in range(count)])


def test_eight_processes_creating_at_once_get_distinct_ids(tasks_dir):
    ids = [
        i for batch in run_processes(create_many, lambda n: (str(tasks_dir), n, 50)) for i in batch
    ]
    assert len(ids) == 400 and set(ids) == set(range(1, 401))
    assert len(list(tasks_dir.glob("task_*.json"))) == 400
    assert json.loads((tasks_dir / ".board" / "state.json").read_text())["last_id"] == 400


def rewire(tasks_dir, rounds):
    """Add a task, make task 1 wait for it, delete it: each step is a valid board."""
    board = s07.TaskBoard(Path(tasks_dir))
    for _ in range(rounds):
        new = board.create("temporary")["id"]
        board.update(1, add_blocked_by=[new])
        board.update(new, status="deleted")


def test_readers_never_see_a_change_half_made_as_corruption(board, tasks_dir):
    """A reader goes file by file without the lock, so it can see task 1's new edge and then the
    deleted task it points to; that is a board mid-change, not a corrupt one."""
    board.create("Ship")
    writer = PROCESSES.Process(target=rewire, args=(str(tasks_dir), 100))
    writer.start()
    reads = 0
    try:
        while writer.is_alive() or reads == 0:
            assert [t["status"] for t in board.tasks()][
                0
            ] == "pending"  # raised CorruptFile before the fix
            reads += 1
    finally:
        writer.join(timeout=60)
    assert writer.exitcode == 0 and reads > 20
    assert board.get(1)["blockedBy"] == [] and len(board.tasks()) == 101


# --- the tools, as the model uses them ---------------------------------------------------


@pytest.fixture
def agent(load_step):
    return load_step(STEP)


def run_turns(agent, standin, *turns) -> list:
    """Play scripted turns through the real loop; return the tool results of each turn."""
    standin.policy = ScriptedModel([*turns, ["done"]])
    agent.agent_loop([{"role": "user", "content": "go"}])
    assert standin.rejected == []
    return [latest_results(request) for request in standin.requests[1:]]


def test_tasks_created_in_one_turn_may_depend_on_earlier_ones(agent, standin, workdir):
    [results] = run_turns(
        agent,
        standin,
        [
            tool_use("task_create", {"subject": "Design"}),
            tool_use("task_create", {"subject": "Build", "blocked_by": [1]}),
            tool_use("task_create", {"subject": "Test", "blocked_by": ["2"]}),
        ],
    )
    assert [r.get("is_error", False) for r in results] == [False, False, False]
    assert [json.loads(r["content"])["blockedBy"] for r in results] == [[], [1], [2]]
    assert json.loads((workdir / ".tasks" / "task_3.json").read_text())["blockedBy"] == [2]


def test_tool_descriptions_say_to_use_only_returned_ids(agent):
    tools = {tool["name"]: tool for tool in agent.TOOLS}
    assert (
        set(agent.TASK_TOOL_HANDLERS)
        == {"task_create", "task_update", "task_get", "task_list"}
        <= set(tools)
    )
    for name in ("task_create", "task_update"):
        assert "only ids that an earlier tool result returned" in tools[name]["description"]
    update = tools["task_update"]["input_schema"]["properties"]
    assert {
        "task_id",
        "status",
        "subject",
        "description",
        "owner",
        "add_blocked_by",
        "remove_blocked_by",
    } == set(update)


def test_task_list_is_a_compact_board_without_descriptions(agent, standin):
    agent.BOARD.create("Plan", "a long description the list must not repeat")
    agent.BOARD.create("Build", blocked_by=[1])
    agent.BOARD.create("Review", blocked_by=[1])
    agent.BOARD.create("Ship", blocked_by=[2, 3])
    agent.BOARD.update(1, status="completed")
    agent.BOARD.update(2, status="in_progress", owner="alice")
    agent.BOARD.update(3, status="deleted")
    [[board], [deleted]] = run_turns(
        agent,
        standin,
        [tool_use("task_list", {})],
        [tool_use("task_list", {"status": "deleted"})],
    )
    assert board["content"].splitlines() == [
        "[x] #1 Plan",
        "[>] #2 Build  @alice",
        "[ ] #4 Ship  (blocked by #2)",
        "3 tasks: 1 pending, 1 in_progress, 1 completed, 0 failed; ready now: none",
    ]
    assert deleted["content"].splitlines()[0] == "[-] #3 Review"  # only when asked for by status


@pytest.mark.parametrize(
    "call, expected",
    [
        (
            tool_use("task_update", {"task_id": 2, "status": "in_progress"}),
            "INVALID_STATUS: task 2 cannot be in_progress",
        ),
        (
            tool_use("task_update", {"task_id": 1, "status": "done"}),
            "INVALID_STATUS: unknown status 'done'",
        ),
        (tool_use("task_update", {"task_id": 9, "subject": "x"}), "NOT_FOUND: there is no task 9"),
        (
            tool_use("task_get", {"task_id": "one"}),
            "INVALID_ARGS: a task id must be a positive integer",
        ),
        (tool_use("task_create", {"subject": " "}), "INVALID_ARGS: subject must not be empty"),
        (
            tool_use("task_update", {"task_id": 1, "add_blocked_by": [2]}),
            "INVALID_DEPENDENCY: that would close a dependency cycle 1 -> 2 -> 1",
        ),
        (tool_use("task_list", {"status": "blocked"}), "INVALID_STATUS: unknown status 'blocked'"),
    ],
    ids=["blocked", "bad-status", "unknown-id", "bad-id", "blank-subject", "cycle", "bad-filter"],
)
def test_refused_task_calls_become_error_results_that_say_why(agent, standin, call, expected):
    agent.BOARD.create("Plan")
    agent.BOARD.create("Build", blocked_by=[1])
    [[result]] = run_turns(agent, standin, [call])
    assert result["is_error"] is True and expected in result["content"]


def test_completion_result_reports_unblocked_first(agent, standin):
    agent.BOARD.create("Plan")
    agent.BOARD.create("Build", blocked_by=[1])
    [[result]] = run_turns(
        agent, standin, [tool_use("task_update", {"task_id": "1", "status": "completed"})]
    )
    assert result["content"].startswith('{"unblocked": [2], "id": 1')


def test_slash_command_prints_the_board_filtered_by_a_checked_status(
    agent, standin, type_lines, capsys
):
    agent.BOARD.create("Plan")
    agent.BOARD.create('Build the "core"', blocked_by=[1])
    agent.BOARD.create("Scrap")
    agent.BOARD.update(3, status="deleted")
    type_lines("/tasks", "/tasks deleted", "/tasks done")
    agent.repl()
    first, deleted, bad = capsys.readouterr().out.split("s07 >> ")[1:4]
    assert '[ ] #2 Build the "core"  (blocked by #1)' in first and "#3" not in first
    assert "\n[-] #3 Scrap\n1 tasks:" in deleted
    assert "[task board] INVALID_STATUS: unknown status 'done'" in bad
    assert standin.requests == []


def test_a_corrupt_board_is_reported_and_the_repl_keeps_running(
    agent, standin, type_lines, capsys, workdir
):
    agent.BOARD.create("Plan")
    broken = workdir / ".tasks" / "task_1.json"
    broken.write_text('{"id": 1, "status": "pending"')
    standin.policy = ScriptedModel(
        [[tool_use("task_list", {})], ["I see the board file is broken."]]
    )
    type_lines("/tasks", "show the board", "/tasks pending")
    agent.repl()
    out = capsys.readouterr().out
    assert (
        out.count(f"[task board] {broken}: cannot be read as JSON") == 2
    )  # /tasks and /tasks pending
    [result] = latest_results(standin.requests[1])
    assert result["is_error"] is True and str(broken) in result["content"]
    assert "I see the board file is broken." in out
    assert broken.read_text() == '{"id": 1, "status": "pending"'


# --- as a learner runs it ----------------------------------------------------------------


def test_a_run_plans_on_disk_and_a_second_process_finds_the_board(
    run_in_process, run_step, standin, workdir
):
    standin.policy = ScriptedModel(
        [
            [tool_use("task_create", {"subject": "Design"})],
            [
                tool_use("task_create", {"subject": "Build", "blocked_by": [1]}),
                tool_use("task_update", {"task_id": 1, "status": "completed"}),
            ],
            ["Planned; Build is ready."],
        ]
    )
    first = run_in_process(STEP, "plan it\n/tasks\n")  # main(), as typed: no process needed
    assert first.returncode == 0, first.stderr
    assert "s07 >> " in first.stdout and '"unblocked": [2]' in first.stdout
    assert "[ ] #2 Build\n" in first.stdout and "Planned; Build is ready." in first.stdout
    assert sorted(snapshot(workdir / ".tasks")) == [
        ".board/.lock",
        ".board/state.json",
        "task_1.json",
        "task_2.json",
    ]
    second = run_step(STEP, "/tasks\n")  # a new process: everything it knows comes from .tasks/
    assert second.returncode == 0, second.stderr
    assert (
        "[x] #1 Design\n[ ] #2 Build\n2 tasks:" in second.stdout
        and "ready now: #2" in second.stdout
    )
    assert standin.rejected == []


def test_offline_demo_shows_the_refusal_the_unblocking_and_the_restart(offline_demo):
    done = offline_demo(STEP).done
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "ERROR Error: INVALID_STATUS: task 4 cannot be in_progress while blocked by "
        "2 (pending), 3 (pending)"
        in out
    )
    assert '"unblocked": [2, 3]' in out and '"unblocked": [4]' in out
    restart = out[out.index("Restart: a fresh TaskBoard") :]
    assert "[x] #3 Write the docs" in restart and "ready() -> ['#4 Ship v1']" in restart


def test_adding_and_removing_one_id_in_one_update_is_refused_on_its_own(board):
    board.create("Plan")
    board.create("Build")
    with pytest.raises(s07.TaskError) as caught:
        board.update(2, add_blocked_by=[1], remove_blocked_by=[1])
    assert "never add and remove the same id in one update" in str(caught.value)
    assert "pass at least one change" not in str(caught.value)  # one refusal, one reason
    assert board.get(2)["blockedBy"] == []
