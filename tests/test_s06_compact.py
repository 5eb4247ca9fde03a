"""s06: transcript, micro compaction, automatic and manual compaction - and a fuzz test that
compacts random sessions at every possible point and checks every request stays valid."""

import copy
import json
import random
import re
import types

import pytest

from offline import (
    QUIRKS,
    Reply,
    ScriptedModel,
    estimate_tokens,
    latest_results,
    reply,
    tool_use,
    validate_request,
)

STEP = "s06_compact"
PLACEHOLDER = re.compile(
    r"^\[cleared: (\w+) result, ([\d,]+) chars; full text in "
    r"\.transcripts/\d{8}-\d{6}-[0-9a-f]{8}\.jsonl\]$"
)


@pytest.fixture
def agent(load_step):
    module = load_step(STEP)
    module.CLEAR_BATCH_TOKENS = (
        0  # most tests look at one rule at a time; the batch has its own tests
    )
    return module


def is_summary_request(body: dict) -> bool:
    return "tools" not in body and "summarise" in body.get("system", "")


def transcript_lines(agent) -> list:
    return [
        json.loads(line) for line in agent.TRANSCRIPT.path.read_text(encoding="utf-8").splitlines()
    ]


def big(tag: str, size: int = 1000) -> str:
    """About `size` characters of text, on one line (read_file returns it unchanged)."""
    return " ".join([tag] * (size // (len(tag) + 1)))


# -- Micro compaction --------------------------------------------------------------------
def exchange(call_id: str, name: str, content: str, **extra) -> list:
    """One assistant tool call and its result."""
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": f"calling {name}"},
                {
                    "type": "tool_use",
                    "id": call_id,
                    "name": name,
                    "input": {"path": f"{call_id}.txt"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}
            ],
        },
    ]


def sample_history(pending: bool = False) -> list:
    """Finished exchanges; with pending=True, a newest user turn the model has not read yet."""
    parallel = [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "p1", "name": "bash", "input": {"command": "a"}},
                {"type": "tool_use", "id": "p2", "name": "read_file", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "p1", "content": big("bash-out", 500)},
                {"type": "tool_result", "tool_use_id": "p2", "content": big("b-text", 300)},
            ],
        },
    ]
    return (
        [{"role": "user", "content": "start"}]
        + exchange("t1", "read_file", big("one", 5214))
        + exchange("t2", "bash", "short output")  # short: never worth clearing
        + exchange("t3", "read_file", big("err", 400), is_error=True)
        + parallel  # counts as two results
        + exchange("t4", "read_file", big("four", 800))
        + (
            [{"role": "assistant", "content": [{"type": "text", "text": "done"}]}]
            if not pending
            else []
        )
    )


def test_micro_compaction_clears_only_old_long_results(agent):
    history = sample_history()
    before = copy.deepcopy(history)
    cleared = agent.micro_compact(history)
    results = [
        b
        for m in history
        if m["role"] == "user"
        for b in agent.content_blocks(m)
        if b["type"] == "tool_result"
    ]
    contents = {r["tool_use_id"]: r["content"] for r in results}
    # 6 results; the newest 3 (p1, p2, t4) stay; of t1, t2, t3 only the long ones go
    assert cleared == 2
    assert PLACEHOLDER.match(contents["t1"]).groups() == ("read_file", f"{len(big('one', 5214)):,}")
    assert PLACEHOLDER.match(contents["t3"]).groups()[0] == "read_file"
    assert contents["t2"] == "short output"
    for kept in ("p1", "p2", "t4"):
        original = next(
            b
            for m in before
            if m["role"] == "user"
            for b in agent.content_blocks(m)
            if b.get("tool_use_id") == kept
        )
        assert contents[kept] == original["content"]
    assert agent.micro_compact(history) == 0  # placeholders are short: nothing cleared twice


def test_micro_compaction_never_touches_calls_ids_or_structure(agent):
    history = sample_history()
    before = copy.deepcopy(history)
    agent.micro_compact(history)
    assert len(history) == len(before)
    for old, new in zip(before, history):
        assert old["role"] == new["role"]
        if old["role"] == "assistant" or isinstance(old["content"], str):
            assert old == new  # tool_use blocks and plain text are untouched
            continue
        for old_block, new_block in zip(old["content"], new["content"], strict=True):
            assert set(old_block) == set(new_block)  # same keys: is_error survives
            assert {k: v for k, v in old_block.items() if k != "content"} == {
                k: v for k, v in new_block.items() if k != "content"
            }
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": history + [{"role": "user", "content": "go on"}],
        "tools": agent.TOOLS,
    }
    assert validate_request(body) is None


@pytest.mark.parametrize("keep", [0, 1, 6])
def test_keep_recent_is_respected(agent, keep):
    agent.KEEP_RECENT = keep
    history = sample_history()
    agent.micro_compact(history)
    contents = [
        b["content"]
        for m in history
        if m["role"] == "user"
        for b in agent.content_blocks(m)
        if b["type"] == "tool_result"
    ]
    cleared = [bool(PLACEHOLDER.match(c)) for c in contents]
    long_ones = [True, False, True, True, True, True]  # t1, t2, t3, p1, p2, t4
    expected = [is_long and i < len(contents) - keep for i, is_long in enumerate(long_ones)]
    assert cleared == expected


def test_results_in_the_newest_user_turn_are_never_cleared(agent):
    """Five parallel results the model has not read yet: today's main cleared the first two."""
    agent.KEEP_RECENT = 3
    calls = [
        {"type": "tool_use", "id": f"n{i}", "name": "read_file", "input": {"path": f"{i}"}}
        for i in range(5)
    ]
    history = [
        {"role": "user", "content": "read five files"},
        {"role": "assistant", "content": calls},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"n{i}", "content": big(f"x{i}")}
                for i in range(5)
            ],
        },
    ]
    before = copy.deepcopy(history)
    assert agent.micro_compact(history) == 0 and history == before
    history += [
        {"role": "assistant", "content": [{"type": "text", "text": "read them"}]},
        {"role": "user", "content": "and now?"},
    ]
    assert agent.micro_compact(history) == 2  # once read, the oldest two of the five may go


def test_micro_compaction_waits_for_a_batch_then_clears_it_at_once(agent):
    agent.KEEP_RECENT, agent.CLEAR_BATCH_TOKENS = (
        0,
        1500,
    )  # one big("one", 5214) result is ~1,300 tokens
    history = sample_history()[:3] + [
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
    ]
    assert (
        agent.micro_compact(history) == 0
    )  # t1 alone is not worth a cache write of all that follows
    history = sample_history()
    assert (
        agent.micro_compact(history) == 5
    )  # with the others it is: all five long ones in one edit
    contents = [
        b["content"] for m in history for b in agent.content_blocks(m) if b["type"] == "tool_result"
    ]
    assert [bool(PLACEHOLDER.match(c)) for c in contents] == [True, False, True, True, True, True]


# -- The transcript --------------------------------------------------------------------------
def reading_model(count: int) -> ScriptedModel:
    """Reads f0.txt, f1.txt, ... one call each, then answers."""
    return ScriptedModel(
        [[tool_use("read_file", {"path": f"f{i}.txt"})] for i in range(count)] + [["read them all"]]
    )


def test_transcript_holds_full_text_of_every_cleared_result(agent, standin, workdir):
    texts = [big(f"file{i}", 3000) for i in range(6)]
    for i, text in enumerate(texts):
        (workdir / f"f{i}.txt").write_text(text)
    standin.policy = reading_model(6)
    history = [{"role": "user", "content": "read six files"}]
    agent.agent_loop(history)
    final = standin.requests[-1]["messages"]
    sent = [
        r["content"]
        for m in final
        for r in agent.content_blocks(m)
        if r.get("type") == "tool_result"
    ]
    assert [bool(PLACEHOLDER.match(c)) for c in sent] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]  # f5: unread
    recorded = [
        b["content"]
        for line in transcript_lines(agent)
        for b in agent.content_blocks(line)
        if b.get("type") == "tool_result"
    ]
    assert recorded == texts  # full text, each exactly once, in order
    assert agent.TRANSCRIPT.path.parent == workdir / ".transcripts"
    assert transcript_lines(agent)[0] == {"role": "user", "content": "read six files"}
    assert len(transcript_lines(agent)) == len(history)  # the final reply reached the disk too
    assert transcript_lines(agent)[-1]["content"][0]["text"] == "read them all"
    assert standin.rejected == []


def test_transcript_names_are_unique(agent):
    names = {agent.Transcript(agent.TRANSCRIPT_DIR).path.name for _ in range(500)}  # same second
    assert len(names) == 500
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}\.jsonl", name) for name in names)


def test_transcript_records_words_joined_to_a_recorded_turn(
    agent, standin, workdir, type_lines, capsys
):
    """After a failed call the REPL joins the next words to the trailing user turn, which is
    already on disk; the words must still reach the transcript."""
    (workdir / "f.txt").write_text("content of f")

    def ask_then_break(request):  # the tool runs, then the next call fails with a 400
        standin.fail_next(400)
        return [tool_use("read_file", {"path": "f.txt"})]

    standin.policy = ScriptedModel([ask_then_break, ["fine"]])
    type_lines("go", "and now?")
    agent.repl()
    assert "[BadRequestError: " in capsys.readouterr().out
    lines = transcript_lines(agent)
    assert [line["role"] for line in lines] == ["user", "assistant", "user", "user", "assistant"]
    assert lines[2]["content"][0]["content"] == "content of f"
    assert [b["text"] for b in lines[3]["content"]][
        -1
    ] == "and now?"  # after the "[not answered: ...]" mark
    assert lines[4]["content"][0]["text"] == "fine" and standin.rejected == []


# -- Automatic compaction --------------------------------------------------------------------
def fake_reply(uncached: int, read: int = 0, written: int = 0, stop: str = "end_turn"):
    usage = types.SimpleNamespace(
        input_tokens=uncached, cache_read_input_tokens=read, cache_creation_input_tokens=written
    )
    return types.SimpleNamespace(usage=usage, stop_reason=stop)


def finished_turns(n: int) -> list:
    history = []
    for i in range(n):
        history += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]},
        ]
    return history + [{"role": "user", "content": "next question"}]


def test_trigger_counts_cached_tokens_too_not_the_estimate(agent, standin):
    """With caching on, usage.input_tokens is only the uncached tail: the context is all three."""
    agent.COMPACT_THRESHOLD = 1000
    standin.policy = ScriptedModel([["SUMMARY"]])
    small = finished_turns(2)
    assert agent.estimate_tokens(small) < 1000
    agent.record_usage(
        fake_reply(uncached=10, read=900, written=90)
    )  # the API says: at the threshold
    agent.prepare_context(small)
    assert len(standin.requests) == 1 and is_summary_request(standin.requests[0])
    assert "SUMMARY" in small[0]["content"][0]["text"]

    huge = finished_turns(2)
    huge[0]["content"] = big("padding", 20_000)  # the estimate is far above the threshold...
    agent.record_usage(fake_reply(uncached=999))  # ...but the API's own count is below it
    agent.prepare_context(huge)
    assert len(standin.requests) == 1  # no new summary request

    agent.METER.last_tokens = None  # no reply yet: the documented estimate decides
    standin.policy = ScriptedModel([["SUMMARY 2"]])
    agent.prepare_context(huge)
    assert len(standin.requests) == 2 and "SUMMARY 2" in huge[0]["content"][0]["text"]


def test_estimate_before_first_reply_matches_documented_formula(agent, standin):
    agent.COMPACT_THRESHOLD = 10**9
    standin.policy = ScriptedModel([["ok"]])
    history = finished_turns(3)
    guess = agent.context_tokens(history)
    agent.agent_loop(history)
    assert guess == estimate_tokens(
        standin.requests[0]
    )  # ceil(len(JSON of system, messages, tools) / 4)
    assert agent.METER.last_tokens == guess  # the stand-in reports the same count, cached or not


def test_default_threshold_and_environment(load_step, monkeypatch):
    assert load_step(STEP).COMPACT_THRESHOLD == 50_000
    monkeypatch.setenv("COMPACT_THRESHOLD", "1234")
    assert load_step(STEP).COMPACT_THRESHOLD == 1234


def test_auto_compaction_end_to_end_keeps_pending_turn(agent, standin, workdir, capsys):
    """Context crosses the threshold in the middle of a turn; compaction waits for the
    results, keeps the pending call and its results after the summary, and the turn goes on."""
    for i in range(3):
        (workdir / f"f{i}.txt").write_text(big(f"file{i}", 4000))
    agent.COMPACT_THRESHOLD = 1500
    summaries = []

    turns = reading_model(3)
    turns.turns[-1] = ["all three read"]

    def model(request):
        if is_summary_request(request):
            summaries.append(request)
            return ["the user wants three files read; f0 and f1 are read"]
        return turns(request)

    standin.policy = model
    history = [{"role": "user", "content": "read f0, f1, f2"}]
    agent.agent_loop(history)
    out = capsys.readouterr().out
    assert standin.rejected == []
    assert re.search(
        r"\[compact\] automatic: [\d,]+ -> ~[\d,]+ tokens; record in \.transcripts/", out
    )
    calls = [r for r in standin.requests if not is_summary_request(r)]
    crossing = next(i for i, r in enumerate(calls) if estimate_tokens(r) >= 1500)
    assert len(summaries) == 1 and standin.requests.index(summaries[0]) == crossing + 1
    after = calls[crossing + 1]["messages"]
    assert after[0]["role"] == "user" and "f0 and f1 are read" in after[0]["content"][0]["text"]
    assert after[1]["role"] == "assistant" and after[1]["content"][0]["type"] == "tool_use"
    assert latest_results(calls[crossing + 1])  # the pending results came along
    assert history[-1]["content"][0]["text"] == "all three read"


def test_summary_request_has_no_tools_and_asks_for_the_six_parts(agent, standin):
    standin.policy = ScriptedModel([["a summary"]])
    history = sample_history()
    assert agent.compact(history, "requested by the user", "the file sizes")
    [request] = standin.requests
    assert "tools" not in request and "summarise" in request["system"]
    prompt = request["messages"][0]["content"]
    for part in (
        "goals and explicit requests",
        "what was done",
        "files read, created or changed",
        "decisions",
        "open items",
        "the next step",
        "Keep in particular detail: the file sizes",
    ):
        assert part in prompt
    assert "[tool call] bash" in prompt and "[tool result (error)]" in prompt
    assert history == [
        {"role": "user", "content": [{"type": "text", "text": history[0]["content"][0]["text"]}]}
    ]
    assert (
        "a summary" in history[0]["content"][0]["text"]
        and agent.TRANSCRIPT.name in history[0]["content"][0]["text"]
    )


@pytest.mark.parametrize("failure", ["http_400", "empty_summary"])
def test_summary_failure_leaves_history_unchanged_and_backs_off(agent, standin, capsys, failure):
    agent.COMPACT_THRESHOLD = 100
    agent.COMPACT_BACKOFF_CALLS = 2
    history = finished_turns(3)
    snapshot = json.dumps(history)
    if failure == "http_400":
        standin.fail_next(400)
    else:
        standin.policy = ScriptedModel(
            [[tool_use("bash", {"command": "x"})]]
        )  # a reply with no text
    agent.prepare_context(history)
    assert json.dumps(history) == snapshot  # byte for byte
    assert "[compact] WARNING: the summary failed, history unchanged" in capsys.readouterr().out
    tried = len(standin.requests)
    standin.policy = ScriptedModel([["SUMMARY"]])
    for _ in range(2):  # still over the threshold, but backing off: no new summary request
        agent.prepare_context(history)
        assert len(standin.requests) == tried and json.dumps(history) == snapshot
    agent.prepare_context(history)  # the back-off is over: it tries again and succeeds
    assert len(standin.requests) == tried + 1
    assert "SUMMARY" in history[0]["content"][0]["text"]
    assert history[0]["content"][-1] == {
        "type": "text",
        "text": "next question",
    }  # the pending turn


# -- Manual compaction -------------------------------------------------------------------------
def test_compact_tool_compacts_after_the_results_are_recorded(agent, standin, capsys):
    standin.policy = ScriptedModel(
        [
            [tool_use("bash", {"command": "echo one"})],
            ["Old output is no longer needed.", tool_use("compact", {"focus": "the echo output"})],
            ["SUMMARY: echo printed one"],  # the summary request
            ["carrying on from the summary"],
        ]
    )
    history = [{"role": "user", "content": "echo one, then compact"}]
    agent.agent_loop(history)
    summary_request, after = standin.requests[2], standin.requests[3]
    assert is_summary_request(summary_request)
    assert "Keep in particular detail: the echo output" in summary_request["messages"][0]["content"]
    first, call, results = after["messages"]
    assert "compacted (requested by the model)" in first["content"][0]["text"]
    assert "SUMMARY: echo printed one" in first["content"][0]["text"]
    assert [b["name"] for b in call["content"] if b["type"] == "tool_use"] == ["compact"]
    assert "Compaction scheduled" in results["content"][0]["content"]
    assert history[-1]["content"][0]["text"] == "carrying on from the summary"
    assert standin.rejected == [] and "[compact] requested by the model" in capsys.readouterr().out


def test_slash_compact_and_tokens_in_the_repl(agent, standin, type_lines, capsys):
    standin.policy = ScriptedModel(
        [["first answer"], ["SUMMARY of the first turn"], ["second answer"]]
    )
    type_lines(
        "/tokens", "first question", "/tokens", "/compact keep the numbers", "second question"
    )
    agent.repl()
    out = capsys.readouterr().out
    assert "context: " in out and "(estimate)" in out  # no reply yet
    assert re.search(
        r"context: [\d,]+ tokens \(the last reply's usage\); auto compaction at 50,000", out
    )
    assert re.search(r"call +1 +0 \+ +0 \+ +[\d,]+ +#+", out)  # read + written + uncached
    summary_request, second = standin.requests[1], standin.requests[2]
    assert is_summary_request(summary_request)
    assert (
        "Keep in particular detail: keep the numbers" in summary_request["messages"][0]["content"]
    )
    assert "first question" in summary_request["messages"][0]["content"]
    [message] = second["messages"]  # the summary and the new words: one user message
    texts = [b["text"] for b in message["content"]]
    assert "compacted (requested by the user)" in texts[0] and texts[1:] == ["second question"]
    assert "second answer" in out and standin.rejected == []


def test_slash_compact_with_nothing_to_summarise(agent, standin, type_lines, capsys):
    type_lines("/compact")
    agent.repl()
    assert "nothing to summarise yet" in capsys.readouterr().out and standin.requests == []


# -- Fuzz: random sessions, compacted at every possible point ------------------------------------
class SummaryOnlyClient:
    """Answers summary requests without HTTP, and checks each against the validator."""

    def __init__(self):
        self.messages = self

    def create(self, **request):
        assert validate_request(request) is None, validate_request(request)
        assert "tools" not in request
        return types.SimpleNamespace(content=[types.SimpleNamespace(type="text", text="SUMMARY")])


def random_session(rng: random.Random) -> list:
    """Events as the REPL and loop produce them: ("say", text) for typed words,
    ("reply", blocks) for a model turn, ("results", blocks) for tool results,
    ("close", reason) for a turn closed by Ctrl-C or an API error."""
    events, next_id = [], 0
    for _ in range(rng.randint(1, 5)):
        events.append(("say", rng.choice(["hi", "read it", big("paste", rng.randint(10, 900))])))
        for _ in range(rng.randint(0, 4)):
            calls = []
            for _ in range(rng.choice([1, 1, 2, 3])):  # single and parallel calls
                next_id += 1
                calls.append(
                    {
                        "type": "tool_use",
                        "id": f"toolu_{next_id}",
                        "input": {"x": 1},
                        "name": rng.choice(["read_file", "bash", "compact"]),
                    }
                )
            text = [{"type": "text", "text": "let me look"}] if rng.random() < 0.5 else []
            events.append(("reply", text + calls))
            if rng.random() < 0.1:  # interrupted or failed mid-turn
                events.append(("close", "interrupted by the user"))
                break
            events.append(
                (
                    "results",
                    [
                        {
                            "type": "tool_result",
                            "tool_use_id": c["id"],
                            "content": big("out", rng.choice([5, 150, 250, 3000])),
                            **({"is_error": True} if rng.random() < 0.2 else {}),
                        }
                        for c in calls
                    ],
                )
            )
        else:
            events.append(("reply", [{"type": "text", "text": "done"}]))
    return events


def apply(agent, history: list, event: tuple) -> None:
    kind, payload = event
    if kind == "say":
        agent.add_user_text(history, payload)
    elif kind == "reply":
        history.append({"role": "assistant", "content": copy.deepcopy(payload)})
    elif kind == "results":
        history.append({"role": "user", "content": copy.deepcopy(payload)})
    else:
        agent.close_turn(history, payload)


def before_model_call(events: list, i: int) -> bool:
    """A model call follows the event at i: typed words, tool results."""
    return events[i][0] in ("say", "results")


def check(agent, history: list) -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": agent.SYSTEM,
        "tools": agent.TOOLS,
        "messages": history,
    }
    problem = validate_request(body)
    assert problem is None, f"{problem}\n{json.dumps(history, indent=1)[:3000]}"


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_compaction_at_every_point_keeps_requests_valid(agent, capsys, seed):
    rng = random.Random(seed)
    agent.client = SummaryOnlyClient()
    checked = 0
    for _ in range(40):
        events = random_session(rng)
        for point in range(len(events)):  # compact right after this event...
            history = []
            for event in events[: point + 1]:
                apply(agent, history, event)
            if before_model_call(events, point):
                agent.CLEAR_BATCH_TOKENS = rng.choice([0, 0, 500])
                agent.micro_compact(history)
            between = events[point][0] == "reply" and any(
                b["type"] == "tool_use" for b in events[point][1]
            )  # a call whose result has not come yet
            snapshot = json.dumps(history) if between else None
            done = agent.compact(history, "fuzz")  # ...wherever that is
            if between:
                assert (
                    not done and json.dumps(history) == snapshot
                )  # never between a call and its result
            for i in range(point + 1, len(events)):  # ...then the session goes on
                apply(agent, history, events[i])
                if before_model_call(events, i):
                    agent.micro_compact(history)
                    if rng.random() < 0.25:
                        agent.compact(history, "fuzz again")
                    check(agent, history)
                    checked += 1
            if history and history[-1]["role"] == "user":
                check(agent, history)
                checked += 1
    capsys.readouterr()
    assert checked > 1000


# -- As a learner runs it ---------------------------------------------------------------------
def test_a_run_from_main_compacts_and_keeps_a_transcript(run_in_process, standin, workdir):
    """The step as `python agents/s06_compact.py` runs it, COMPACT_THRESHOLD read from the
    environment at start (in-process; the demo runs this step as a process)."""
    for i in range(3):
        (workdir / f"f{i}.txt").write_text(big(f"file{i}", 6000))
    standin.policy = ScriptedModel(
        [
            [tool_use("read_file", {"path": "f0.txt"})],
            [tool_use("read_file", {"path": "f1.txt"})],
            [tool_use("read_file", {"path": "f2.txt"})],
            ["three files read"],
            ["SUMMARY: three files were read"],
            ["carrying on"],
        ]
    )
    done = run_in_process(
        STEP, "read the files\nwhat next?\n", env={"COMPACT_THRESHOLD": "3000"}
    )
    assert done.returncode == 0, done.stderr
    assert "s06 >> " in done.stdout and "[compact] automatic" in done.stdout
    assert "carrying on" in done.stdout and standin.rejected == []
    [transcript] = (workdir / ".transcripts").glob("*.jsonl")
    record = transcript.read_text(encoding="utf-8")
    assert all(big(f"file{i}", 6000) in record for i in range(3))
    assert "SUMMARY: three files were read" in record


def test_offline_demo_shows_every_layer(offline_demo):
    done = offline_demo(STEP).done
    out = done.stdout
    assert done.returncode == 0, done.stderr
    micro, compacted = (
        out.index("[micro] cleared 2 old tool results in one batch"),
        out.index("[compact] automatic"),
    )
    assert micro < compacted  # the cheap layer first, the summary when it no longer suffices
    assert re.search(r"\[compact\] automatic: 1\d,\d{3} -> ~\d,\d{3} tokens", out)
    assert "auto compaction at 12,000" in out and "<- micro before this call" in out
    assert "<- compacted before this call" in out
    assert re.search(r"call +3 +[1-9][\d,]* \+", out)  # the cache is read from the third call on
    assert "Writing the report from the counts in the summary." in out
    assert "it holds the full text of 8 of 8 logs" in out
    assert "| logs/payments.log | 63 |" in out and "0 rejected by the validator" in out


# -- Caching, the window, and a transcript that cannot be written --------------------------------
def test_batching_turns_a_cache_write_per_call_into_a_few(agent, standin, workdir):
    """Per-call clearing makes almost every call rewrite the history; batches make it rare."""
    for i in range(16):
        (workdir / f"f{i}.txt").write_text(big(f"file{i}", 3000))
    agent.COMPACT_THRESHOLD = 10**9
    rewrites = {}
    for batch in (0, 3000):
        standin.calls.clear()
        standin.policy, agent.CLEAR_BATCH_TOKENS = reading_model(16), batch
        agent.agent_loop([{"role": "user", "content": "read sixteen files"}])
        rewrites[batch] = sum(
            c["reply"]["usage"]["cache_creation_input_tokens"] > 1500 for c in standin.calls
        )
    assert rewrites[0] >= 12 and rewrites[3000] <= 5, rewrites


def test_a_full_window_compacts_and_retries_once(agent, standin, capsys):
    standin.policy = ScriptedModel(
        [
            reply(["cut off in the mid"], "model_context_window_exceeded"),
            ["SUMMARY of the long session"],
            ["the answer, from the summary"],
        ]
    )
    history = finished_turns(3)
    agent.agent_loop(history)
    out = capsys.readouterr().out
    assert "[compact] the context window was full" in out
    assert (
        is_summary_request(standin.requests[1])
        and history[-1]["content"][0]["text"] == "the answer, from the summary"
    )
    assert "cut off in the mid" not in json.dumps(history) and standin.rejected == []
    standin.policy = ScriptedModel(
        [
            reply(["again"], "model_context_window_exceeded"),
            ["SUMMARY"],
            reply(["and again"], "model_context_window_exceeded"),
        ]
    )
    agent.add_user_text(history, "more")
    agent.agent_loop(history)  # compacted once more, then the second cut-off ends the turn
    assert "cut off: the context window is full" in capsys.readouterr().out
    assert len(standin.requests) == 6 and standin.rejected == []


@pytest.mark.parametrize("breakage", ["folder is a file", "transcript is a folder", "disk full"])
def test_a_transcript_that_cannot_be_written_is_said_and_nothing_is_compacted(
    agent, standin, workdir, type_lines, capsys, monkeypatch, breakage
):
    """Today's main died with a traceback and left the tool_use unanswered."""
    if breakage == "folder is a file":
        (workdir / ".transcripts").write_text("not a folder")
    elif breakage == "transcript is a folder":
        agent.TRANSCRIPT.path.mkdir(parents=True)
    else:

        def no_space(*args, **kwargs):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(type(agent.TRANSCRIPT.path), "open", no_space)
    agent.COMPACT_THRESHOLD = 10
    standin.policy = ScriptedModel([[tool_use("bash", {"command": "echo one"})], ["answered"]])
    type_lines("go", "/compact")
    agent.repl()
    out = capsys.readouterr().out
    assert out.count("[transcript] cannot write") == 1 and str(agent.TRANSCRIPT.path) in out
    assert "answered" in out and "Traceback" not in out
    assert (
        out.count("[compact]") == 1 and "[compact] not now: the transcript cannot be written" in out
    )  # /compact
    assert not any(is_summary_request(r) for r in standin.requests)  # no record, no compaction
    assert standin.rejected == []


def test_null_usage_from_a_compatible_endpoint_falls_back_to_the_estimate(
    agent, standin, type_lines, capsys
):
    """Some compatible endpoints send usage with null counts: /tokens and the trigger cope."""
    standin.policy = ScriptedModel(
        [
            QUIRKS["null_usage"](tool_use("bash", {"command": "echo hi"})),
            Reply(["answered"], wire="null_usage"),
            ["again"],
        ]
    )
    type_lines("first question", "/tokens", "second question")
    agent.repl()
    out = capsys.readouterr().out
    assert "Traceback" not in out and "answered" in out and "again" in out
    assert "(estimate)" in out  # no count from the endpoint: the harness's own estimate
    assert standin.rejected == []
