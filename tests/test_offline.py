"""The local stand-in: it must reject what the real Messages API rejects, accept what it
accepts, and look enough like it that the official SDK works unchanged."""

import ast
import copy
import json
import socket
import struct
import threading
import urllib.error
import urllib.request

import anthropic
import pytest

from conftest import AGENTS
from offline import QUIRKS, ScriptedModel, estimate_tokens, reply, tool_use, validate_request

TOOLS = [
    {"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {}}}
]


def good_request() -> dict:
    """A valid request with a finished tool exchange, the shape every rule below breaks."""
    return {
        "model": "m",
        "max_tokens": 100,
        "system": "be brief",
        "tools": copy.deepcopy(TOOLS),
        "messages": [
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"},
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
    }


def post(server, body, path="/v1/messages", headers=None):
    headers = {"Content-Type": "application/json", "X-Api-Key": "k"} if headers is None else headers
    request = urllib.request.Request(
        server.url + path, data=json.dumps(body).encode(), headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def breaks(mutate):
    body = good_request()
    mutate(body)
    return body


def msgs(body):
    return body["messages"]


# (rule, how to break a good request); every one must be answered with 400.
BAD = {
    "5.1 model missing": lambda b: b.pop("model"),
    "5.1 model empty": lambda b: b.update(model=""),
    "5.1 max_tokens zero": lambda b: b.update(max_tokens=0),
    "5.1 max_tokens not int": lambda b: b.update(max_tokens="100"),
    "5.1 max_tokens bool": lambda b: b.update(max_tokens=True),
    "5.1 messages empty": lambda b: b.update(messages=[]),
    "5.1 messages missing": lambda b: b.pop("messages"),
    "5.1 a lone surrogate (JSON text can spell it; it is no character)": lambda b: msgs(b)[1][
        "content"
    ][1].update(input={"command": "echo \udc00"}),
    "5.2 system role in messages": lambda b: msgs(b).insert(0, {"role": "system", "content": "x"}),
    "5.2 first message assistant": lambda b: msgs(b).insert(
        0, {"role": "assistant", "content": "hi"}
    ),
    "5.2 last message assistant (prefill)": lambda b: msgs(b).append(
        {"role": "assistant", "content": "so"}
    ),
    "5.3 empty string content": lambda b: msgs(b)[0].update(content=""),
    "5.3 empty block list": lambda b: msgs(b)[0].update(content=[]),
    "5.3 empty text block": lambda b: msgs(b)[2]["content"].__setitem__(
        1, {"type": "text", "text": ""}
    ),
    "5.3 whitespace text block": lambda b: msgs(b)[2]["content"].__setitem__(
        1, {"type": "text", "text": " \n"}
    ),
    "5.3 tool_use in user message": lambda b: msgs(b)[0].update(
        content=[{"type": "tool_use", "id": "x", "name": "bash", "input": {}}]
    ),
    "5.4 tool_use without result": lambda b: msgs(b)[2]["content"].pop(0),
    "5.4 result not in next message": lambda b: msgs(b).__setitem__(
        2, {"role": "user", "content": "hm"}
    ),
    "5.4 result after text": lambda b: msgs(b)[2]["content"].reverse(),
    "5.4 result for unknown id": lambda b: msgs(b)[2]["content"].insert(
        1, {"type": "tool_result", "tool_use_id": "nope", "content": "x"}
    ),
    "5.4 two results for one use": lambda b: msgs(b)[2]["content"].insert(
        0, {"type": "tool_result", "tool_use_id": "t1", "content": "x"}
    ),
    "5.4 duplicate tool_use id": lambda b: msgs(b).extend(
        [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}],
            },
        ]
    ),
    "5.4 orphan result at start": lambda b: msgs(b).__setitem__(
        slice(0, 3),
        [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}],
            }
        ],
    ),
    "5.5 bad tool name": lambda b: b["tools"][0].update(name="run bash!"),
    "5.5 tool name too long": lambda b: b["tools"][0].update(name="x" * 65),
    "5.5 duplicate tool names": lambda b: b["tools"].append(copy.deepcopy(TOOLS[0])),
    "5.5 schema not object": lambda b: b["tools"][0].update(input_schema={"type": "string"}),
    "5.5 tool blocks without tools": lambda b: b.pop("tools"),
}

# Valid variations near each rule's edge; every one must be accepted.
GOOD = {
    "string content": lambda b: None,
    "system as blocks": lambda b: b.update(system=[{"type": "text", "text": "be brief"}]),
    "no system, no tools, plain chat": lambda b: b.update(
        messages=[{"role": "user", "content": "hi"}], tools=[]
    ),
    "tool name with dash and 64 chars": lambda b: b["tools"].append(
        {"name": "a-" + "b" * 62, "input_schema": {"type": "object"}}
    ),
    "several results then text": lambda b: (
        msgs(b)[1]["content"].append({"type": "tool_use", "id": "t2", "name": "bash", "input": {}}),
        msgs(b)[2]["content"].insert(
            1, {"type": "tool_result", "tool_use_id": "t2", "content": "b", "is_error": True}
        ),
    ),
    "consecutive user turns": lambda b: msgs(b).append({"role": "user", "content": "and more"}),
    "a surrogate pair (sent as \\ud83d\\ude00: one character)": lambda b: msgs(b)[0].update(
        content="smile \U0001f600"
    ),
}


@pytest.mark.parametrize("rule", BAD)
def test_bad_request_gets_400_with_real_error_body(standin, rule):
    body = breaks(BAD[rule])
    status, reply = post(standin, body)
    assert status == 400, rule
    assert reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error"
    assert reply["error"]["message"]
    assert standin.rejected[-1][1] == reply["error"]["message"]


@pytest.mark.parametrize("variant", GOOD)
def test_good_request_passes(standin, variant):
    body = breaks(GOOD[variant])
    assert validate_request(body) is None
    status, reply = post(standin, body)
    assert status == 200, reply
    assert reply["type"] == "message" and reply["role"] == "assistant"


def test_reply_has_the_real_shape_and_sdk_parses_it(standin):
    standin.policy = ScriptedModel([["thinking...", tool_use("bash", {"command": "ls"})]])
    client = anthropic.Anthropic(api_key="k", base_url=standin.url)
    body = good_request()
    reply = client.messages.create(
        model="m", max_tokens=100, messages=body["messages"], tools=TOOLS
    )
    assert reply.type == "message" and reply.model == "m" and reply.stop_reason == "tool_use"
    assert reply.content[0].text == "thinking..."
    assert reply.content[1].name == "bash" and reply.content[1].id.startswith("toolu_")
    assert reply.usage.input_tokens == estimate_tokens(standin.requests[0]) > 0


def test_tool_use_ids_are_unique_across_replies(standin):
    standin.policy = lambda request: [tool_use("bash"), tool_use("bash")]
    ids = set()
    for _ in range(3):
        _, reply = post(standin, good_request())
        ids.update(block["id"] for block in reply["content"])
    assert len(ids) == 6


def test_count_tokens_matches_usage_and_grows_with_input(standin):
    client = anthropic.Anthropic(api_key="k", base_url=standin.url)
    short = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi"}])
    long = client.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "hi " * 400}]
    )
    assert short.input_tokens == estimate_tokens({"messages": [{"role": "user", "content": "hi"}]})
    assert long.input_tokens > short.input_tokens + 250


def test_bearer_token_and_query_string_accepted(standin):
    status, _ = post(
        standin,
        good_request(),
        path="/v1/messages?beta=true",
        headers={"Content-Type": "application/json", "Authorization": "Bearer t"},
    )
    assert status == 200


def test_missing_credentials_is_401(standin):
    status, reply = post(standin, good_request(), headers={"Content-Type": "application/json"})
    assert status == 401 and reply["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(
    "status,kind", [(429, "rate_limit_error"), (500, "api_error"), (529, "overloaded_error")]
)
def test_fault_injection_answers_once_then_recovers(standin, status, kind):
    standin.fail_next(status)
    first, reply = post(standin, good_request())
    second, _ = post(standin, good_request())
    assert (first, reply["error"]["type"], second) == (status, kind, 200)


def test_broken_policy_is_a_loud_500(standin):
    standin.policy = lambda request: 1 / 0
    status, reply = post(standin, good_request())
    assert status == 500 and "ZeroDivisionError" in reply["error"]["message"]


# -- Streaming: the real event sequence, which the SDK's helper accumulates -------------
def stream_events(server, body) -> list:
    request = urllib.request.Request(
        server.url + "/v1/messages",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json", "X-Api-Key": "k"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Type"] == "text/event-stream"
        frames = answer.read().decode().strip().split("\n\n")
    events = []
    for frame in frames:
        kind, data = frame.split("\n", 1)
        assert kind.startswith("event: ") and data.startswith("data: ")
        events.append((kind[7:], json.loads(data[6:])))
    return events


def test_a_stream_has_the_real_event_sequence(standin):
    standin.policy = ScriptedModel(
        [["Let me look at that for you.", tool_use("bash", {"command": "ls -la"})]]
    )
    kinds = [kind for kind, _ in stream_events(standin, good_request())]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2
    events = dict(stream_events(standin, good_request()))  # the last event of each kind
    assert (
        events["message_delta"]["delta"]["stop_reason"] == "end_turn"
    )  # the scripted model ran out


def test_the_sdk_stream_helper_rebuilds_the_message(standin):
    standin.policy = ScriptedModel(
        [
            [
                "Let me look at that for you, in pieces.",
                tool_use("bash", {"command": "ls -la /tmp && echo done"}),
            ]
        ]
    )
    client = anthropic.Anthropic(api_key="k", base_url=standin.url)
    with client.messages.stream(
        model="m", max_tokens=100, messages=good_request()["messages"], tools=TOOLS
    ) as stream:
        pieces = [event.text for event in stream if event.type == "text"]
        final = stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == "Let me look at that for you, in pieces."
    assert final.stop_reason == "tool_use" and final.content[1].input == {
        "command": "ls -la /tmp && echo done"
    }
    assert final.usage.input_tokens == estimate_tokens(standin.requests[0])


@pytest.mark.parametrize(
    "turn,stop,content",
    [
        (reply([]), "end_turn", []),
        (
            reply(
                ["I can't help with that."],
                "refusal",
                {"type": "refusal", "category": "cyber", "explanation": "no"},
            ),
            "refusal",
            ["I can't help with that."],
        ),
        (reply(["Searching"], "pause_turn"), "pause_turn", ["Searching"]),
        (
            reply(["Too long"], "model_context_window_exceeded"),
            "model_context_window_exceeded",
            ["Too long"],
        ),
    ],
)
def test_replies_a_real_model_also_sends(standin, turn, stop, content):
    standin.policy = ScriptedModel([turn])
    status, message = post(standin, good_request())
    assert status == 200 and message["stop_reason"] == stop
    assert [block["text"] for block in message["content"]] == content
    if stop == "refusal":
        assert message["stop_details"]["category"] == "cyber"


def test_max_tokens_cuts_a_tool_call_in_the_middle_of_its_input(standin):
    standin.policy = ScriptedModel(
        [reply([tool_use("bash", {"command": "echo " + "a" * 200})], "max_tokens")]
    )
    partial = "".join(
        event["delta"]["partial_json"]
        for kind, event in stream_events(standin, good_request())
        if kind == "content_block_delta"
    )
    with pytest.raises(ValueError):
        json.loads(partial)  # the input never finished
    assert partial.startswith('{"command":"echo aaa')


def test_faults_mid_stream_and_malformed_replies(standin):
    client = anthropic.Anthropic(api_key="k", base_url=standin.url, max_retries=0)
    standin.policy = lambda request: ["a reply long enough to be cut in the middle of its stream"]
    standin.fail_next("stream_error")
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        with client.messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            s.get_final_message()
    for fault in ("html", "truncated", "no_content"):
        standin.fail_next(fault)
        body = urllib.request.urlopen(
            urllib.request.Request(
                standin.url + "/v1/messages",
                data=json.dumps(good_request()).encode(),
                headers={"Content-Type": "application/json", "X-Api-Key": "k"},
            )
        ).read()
        with pytest.raises((ValueError, KeyError, AssertionError)):
            assert json.loads(body)["content"] is not None


def kill(conn: socket.socket) -> None:
    """Close as a killed process's socket closes when data is still coming: with a reset."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


@pytest.mark.parametrize("when", ["before its reply", "before its stream", "mid-stream"])
def test_a_client_killed_while_it_is_answered_leaves_no_traceback(standin, capsys, when):
    """The demo of s11 kills a worker that may be waiting for its reply; the stand-in runs in the
    demo's own process, so a traceback of its handler would land in the learner's console."""
    finished, made, killed = threading.Event(), threading.Event(), threading.Event()
    server = standin._server
    close_request = server.shutdown_request

    def closed(request):  # after the handler is done (and after handle_error, if it failed)
        close_request(request)
        finished.set()

    server.shutdown_request = closed

    def policy(request):
        made.set()
        killed.wait(30)  # a hang guard: the test sets it once the client is gone
        return ["a reply long enough to be streamed in several pieces of text, one at a time"]

    standin.policy = policy
    if when == "mid-stream":
        standin.fail_next("stream_stall")
    body = json.dumps({**good_request(), "stream": when != "before its reply"}).encode()
    host, port = standin.url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=30)
    conn.sendall(
        f"POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nX-Api-Key: k\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    if when == "mid-stream":
        killed.set()
        assert standin.stalled.wait(30)
        kill(conn)
        standin.release.set()
    else:
        assert made.wait(30)
        kill(conn)
        killed.set()
    assert finished.wait(30), "the stand-in is still answering a client that is gone"
    assert capsys.readouterr().err == ""  # before: a ConnectionResetError traceback


# -- Prompt caching, as documented in the header ----------------------------------------
def cached(server, body) -> dict:
    status, message = post(server, {**body, "cache_control": {"type": "ephemeral"}})
    assert status == 200, message
    usage = message["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] + usage[
        "cache_creation_input_tokens"
    ] == estimate_tokens(
        {**body, "cache_control": {"type": "ephemeral"}}
    )  # the three always add up
    assert (
        min(
            usage[key]
            for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
        >= 0
    )
    return usage


def long_request(extra: str = "") -> dict:
    body = good_request()
    body["system"] = "You are careful. " * 400 + extra  # ~1,700 tokens: above the minimum
    return body


def test_cache_writes_then_reads_the_repeated_prefix(standin):
    first = cached(standin, long_request())
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1024
    body = long_request()
    body["messages"].append({"role": "assistant", "content": "noted"})
    body["messages"].append({"role": "user", "content": "and one more thing"})
    second = cached(standin, body)
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert 0 < second["cache_creation_input_tokens"] < 50  # only the two new blocks


def test_many_small_blocks_never_outweigh_the_request(standin):
    """Six parallel tool results in one message, and many short string turns: the cached parts
    are weighed as they appear in the request, so no figure goes negative (one did, in a trace)."""
    body = long_request()
    body["messages"] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": f"toolu_{n}", "name": "bash", "input": {}}
                for n in range(6)
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "ok"}
                for n in range(6)
            ],
        },
    ]
    body["tools"] = [{"name": "bash", "input_schema": {"type": "object"}}]
    cached(standin, body)
    for n in range(60):
        body["messages"] += [
            {"role": "assistant", "content": "k"},
            {"role": "user", "content": str(n)},
        ]
    assert cached(standin, body)["cache_read_input_tokens"] > 1024


def test_an_edit_in_old_history_makes_the_rest_a_cache_write(standin):
    """Entries exist only where an earlier request ended (its breakpoint): an edit falls back
    to the longest earlier request the new one still repeats exactly."""
    body = long_request()
    first = cached(standin, body)
    body["messages"] += [
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "x " * 200},
    ]
    cached(standin, body)
    body["messages"][-1]["content"] = "y " * 200  # edit the newest block
    after = cached(standin, body)
    assert after["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert (
        after["cache_creation_input_tokens"] > 100
    )  # everything after the first request is written again
    body["system"] += " And brief."  # change the system prompt: nothing after it matches
    assert cached(standin, body)["cache_read_input_tokens"] == 0


def test_short_prompts_and_requests_without_cache_control_are_not_cached(standin):
    small = good_request()
    assert cached(standin, small)["cache_creation_input_tokens"] == 0  # under the minimum length
    status, message = post(standin, long_request())
    assert (
        message["usage"]["cache_creation_input_tokens"]
        == message["usage"]["cache_read_input_tokens"]
        == 0
    )


def test_cache_entries_expire_after_their_lifetime_unless_used(standin):
    now = [0.0]
    standin.cache.clock = lambda: now[0]
    cached(standin, long_request())
    now[0] += standin.cache.ttl - 1
    assert cached(standin, long_request())["cache_read_input_tokens"] > 0  # a hit renews the entry
    now[0] += standin.cache.ttl - 1
    assert cached(standin, long_request())["cache_read_input_tokens"] > 0
    now[0] += standin.cache.ttl + 1
    assert cached(standin, long_request())["cache_read_input_tokens"] == 0  # forgotten


# -- The quirks catalogue ----------------------------------------------------------------
NAIVE_REJECTED = {
    "whitespace_text",
    "empty_text",
    "duplicate_ids",
    "odd_id",
    "empty_id",
    "string_input",
    "list_input",
    "null_input",
    "missing_name",
    "empty_name",
    "unknown_block",
    "whitespace_only",
}


def naive_history(message: dict) -> list:
    """The reply stored as it came, each call answered: what a naive harness sends next."""
    calls = [b for b in message["content"] if b.get("type") == "tool_use"]
    answers = [
        {"type": "tool_result", "tool_use_id": str(b.get("id")), "content": "ok"} for b in calls
    ]
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": message["content"]},
        {"role": "user", "content": answers or "next"},
    ]


@pytest.mark.parametrize("streamed", [True, False])
@pytest.mark.parametrize("quirk", sorted(QUIRKS))
def test_each_quirk_reaches_the_sdk_streamed_or_not(standin, quirk, streamed):
    call = tool_use("bash", {"command": "ls"})
    standin.policy = lambda request: QUIRKS[quirk](call)
    client = anthropic.Anthropic(api_key="k", base_url=standin.url, max_retries=0)
    ask = dict(model="m", max_tokens=100, messages=[{"role": "user", "content": "go"}], tools=TOOLS)
    if streamed and quirk == "no_usage":  # the SDK itself cannot accumulate a stream without usage
        with pytest.raises(AttributeError), client.messages.stream(**ask) as stream:
            stream.get_final_message()
        return
    if streamed:
        with client.messages.stream(**ask) as stream:
            final = stream.get_final_message()
    else:
        final = client.messages.create(**ask)
    sent = standin.calls[-1]["reply"]
    assert [b.type for b in final.content] == [b["type"] for b in sent["content"]]
    assert final.stop_reason == (None if quirk == "no_stop" else sent["stop_reason"])
    if quirk in NAIVE_REJECTED:  # stored as it came, the next request is refused like the real API
        assert validate_request({**ask, "messages": naive_history(sent)}) is not None


# -- The package itself: modules a reader takes in one go, and no import cycle ------------------
PACKAGE = AGENTS / "offline"
MAX_LINES = 350


def test_every_module_of_the_package_is_at_most_350_lines():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.glob("*.py")}
    assert sizes and {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def package_imports(path) -> set:
    """The modules of the package that one module imports, wherever the import statement sits
    (a lazy import inside a function still makes a cycle): `from .x import y`, `from . import x`
    (the package itself when x is not a module), `import offline.x`, `from offline import y`."""
    modules, found = {p.stem for p in PACKAGE.glob("*.py")}, set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level == 1 or node.module == "offline"
                                                 or str(node.module).startswith("offline.")):
            within = (node.module or "").removeprefix("offline").lstrip(".") if node.level == 0 \
                else node.module or ""
            if within:
                found.add(within.split(".")[0])
            else:
                found |= {a.name if a.name in modules else "__init__" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] if "." in a.name else "__init__" for a in node.names
                      if a.name.split(".")[0] == "offline"}
    return found - {path.stem}


def test_the_package_has_no_import_cycle():
    graph = {p.stem: package_imports(p) for p in PACKAGE.glob("*.py")}
    done, path = set(), []

    def visit(module: str) -> None:
        assert module not in path, "import cycle: " + " -> ".join(path[path.index(module):]
                                                                  + [module])
        if module in done:
            return
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            visit(imported)
        path.pop()
        done.add(module)

    visit("__init__")
    assert done == set(graph), "every module is imported by the package (and the parser sees it)"
    for module in sorted(graph):
        visit(module)
