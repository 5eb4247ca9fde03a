"""The local stand-in: it must reject what the real Messages API rejects, accept what it
accepts, and look enough like it that the official SDK works unchanged."""

import copy
import json
import urllib.error
import urllib.request

import anthropic
import pytest

from offline import ScriptedModel, estimate_tokens, tool_use, validate_request

TOOLS = [{"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {}}}]


def good_request() -> dict:
    """A valid request with a finished tool exchange, the shape every rule below breaks."""
    return {
        "model": "m", "max_tokens": 100, "system": "be brief", "tools": copy.deepcopy(TOOLS),
        "messages": [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                              {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"},
                                         {"type": "text", "text": "thanks"}]},
        ],
    }


def post(server, body, path="/v1/messages", headers=None):
    headers = {"Content-Type": "application/json", "X-Api-Key": "k"} if headers is None else headers
    request = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), headers=headers)
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
    "5.2 system role in messages": lambda b: msgs(b).insert(0, {"role": "system", "content": "x"}),
    "5.2 first message assistant": lambda b: msgs(b).insert(0, {"role": "assistant", "content": "hi"}),
    "5.2 last message assistant (prefill)": lambda b: msgs(b).append({"role": "assistant", "content": "so"}),
    "5.3 empty string content": lambda b: msgs(b)[0].update(content=""),
    "5.3 empty block list": lambda b: msgs(b)[0].update(content=[]),
    "5.3 empty text block": lambda b: msgs(b)[2]["content"].__setitem__(1, {"type": "text", "text": ""}),
    "5.3 whitespace text block": lambda b: msgs(b)[2]["content"].__setitem__(1, {"type": "text", "text": " \n"}),
    "5.3 tool_use in user message": lambda b: msgs(b)[0].update(
        content=[{"type": "tool_use", "id": "x", "name": "bash", "input": {}}]),
    "5.4 tool_use without result": lambda b: msgs(b)[2]["content"].pop(0),
    "5.4 result not in next message": lambda b: msgs(b).__setitem__(2, {"role": "user", "content": "hm"}),
    "5.4 result after text": lambda b: msgs(b)[2]["content"].reverse(),
    "5.4 result for unknown id": lambda b: msgs(b)[2]["content"].insert(
        1, {"type": "tool_result", "tool_use_id": "nope", "content": "x"}),
    "5.4 two results for one use": lambda b: msgs(b)[2]["content"].insert(
        0, {"type": "tool_result", "tool_use_id": "t1", "content": "x"}),
    "5.4 duplicate tool_use id": lambda b: msgs(b).extend([
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]),
    "5.4 orphan result at start": lambda b: msgs(b).__setitem__(
        slice(0, 3), [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]),
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
    "no system, no tools, plain chat": lambda b: b.update(messages=[{"role": "user", "content": "hi"}], tools=[]),
    "tool name with dash and 64 chars": lambda b: b["tools"].append(
        {"name": "a-" + "b" * 62, "input_schema": {"type": "object"}}),
    "several results then text": lambda b: (
        msgs(b)[1]["content"].append({"type": "tool_use", "id": "t2", "name": "bash", "input": {}}),
        msgs(b)[2]["content"].insert(1, {"type": "tool_result", "tool_use_id": "t2", "content": "b",
                                         "is_error": True})),
    "consecutive user turns": lambda b: msgs(b).append({"role": "user", "content": "and more"}),
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
    reply = client.messages.create(model="m", max_tokens=100, messages=body["messages"], tools=TOOLS)
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
    long = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hi " * 400}])
    assert short.input_tokens == estimate_tokens({"messages": [{"role": "user", "content": "hi"}]})
    assert long.input_tokens > short.input_tokens + 250


def test_bearer_token_and_query_string_accepted(standin):
    status, _ = post(standin, good_request(), path="/v1/messages?beta=true",
                     headers={"Content-Type": "application/json", "Authorization": "Bearer t"})
    assert status == 200


def test_missing_credentials_is_401(standin):
    status, reply = post(standin, good_request(), headers={"Content-Type": "application/json"})
    assert status == 401 and reply["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("status,kind", [(429, "rate_limit_error"), (500, "api_error"), (529, "overloaded_error")])
def test_fault_injection_answers_once_then_recovers(standin, status, kind):
    standin.fail_next(status)
    first, reply = post(standin, good_request())
    second, _ = post(standin, good_request())
    assert (first, reply["error"]["type"], second) == (status, kind, 200)


def test_broken_policy_is_a_loud_500(standin):
    standin.policy = lambda request: 1 / 0
    status, reply = post(standin, good_request())
    assert status == 500 and "ZeroDivisionError" in reply["error"]["message"]
