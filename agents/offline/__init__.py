"""offline - a local stand-in for the Anthropic Messages API, with a scripted model.

Why it exists: every step of this course must run - and every test must pass -
without an API key and without the internet. Instead of faking the SDK, we run a
real HTTP server on 127.0.0.1 that speaks the Messages API closely enough that
the official `anthropic` SDK talks to it unchanged. The steps never know.

    step script --(anthropic SDK, HTTP)--> StandIn on 127.0.0.1:<port>
                                     |  1. check the auth header
                                     |  2. validate the request like the real API (400 if not)
                                     |  3. ask the scripted model (a policy) for the next turn
                                     v
                                  JSON, or server-sent events when the request streams

Read in this order: this header (the rules it follows), server.py (StandIn.handle), then
protocol.py (validate_request); replies.py holds the replies and QUIRKS, cache.py the cache
ledger; entry.py (a step's flags, and what each runs), demo.py (the demo runner and --trace),
proxy.py (the recording proxy), answers.py (how it reads what it relays), page.py, page_parts.py
and page_changes.py (the trace page), record.py (run.json), and play.py with play_view.py (play
mode) come last. Everything is importable from the package: `import offline`.

Policies. A policy is a function `policy(request: dict)` that looks at the request
(system prompt, messages, tools) and returns the next assistant turn: a list of
blocks (strings become text blocks, `tool_use(name, input)` a tool call), the stop
reason following from the blocks; or `reply(blocks, stop_reason, stop_details)` for
the replies a real model also sends: empty (`reply([])`), "refusal", "pause_turn",
"max_tokens" (a trailing tool_use is then cut off in the middle of its input) and
"model_context_window_exceeded".

Quirks. `QUIRKS[name](tool_use(...))` is the reply that real models and Anthropic-compatible
endpoints are known to send instead of a clean one, streamed or not: whitespace_text,
whitespace_only, empty_text (text a request may not carry), duplicate_ids, reused_id ("call_0"
every turn), odd_id ("functions.bash:0"), empty_id (""), string_input / list_input / null_input
(input that is not an object), missing_name, empty_name, tool_use_without_call (stop_reason
"tool_use" and no call), call_under_end_turn, unknown_stop_reason, no_stop (the stream ends after
the last block, before message_delta: no stop reason at all), null_usage, no_usage (the SDK
cannot accumulate a stream without usage: it raises), unknown_block (a server_tool_use block).
Stored as it came, each but the last five makes the next request invalid; the validator then
answers 400 as the real API does.

Tokens. The request is cut into the units the API caches, in its order: each tool
definition, the system prompt, then every content block of every message.

    total tokens = ceil(len(json.dumps([system, messages, tools])) / 4)

one token per four characters of the compact JSON of what the model reads. Crude,
but deterministic and proportional to the request's size. /v1/messages/count_tokens
answers the same number.

Prompt caching (automatic: a top-level `cache_control: {"type": "ephemeral"}`).
The breakpoint is the last unit. The stand-in remembers, per model, every prefix
that ended at a breakpoint of an earlier request, for CACHE_TTL seconds after its
last use (a hit renews it, like the real 5-minute cache). For a new request:

    cache_read_input_tokens      the longest remembered prefix it repeats exactly
    cache_creation_input_tokens  the rest, up to the breakpoint (now remembered too)
    input_tokens                 the rest: what the units do not cover (the JSON around them)

where a prefix of units weighs floor(its characters / 4) tokens, and the three add
up to the total above. A prefix under CACHE_MIN_TOKENS (1,024, like most models)
is not cached: everything is input_tokens. Without cache_control nothing is cached.
Simplified on purpose: the real API looks back at most 20 blocks from a breakpoint
for an earlier entry; this one looks back any distance.

Streaming (`"stream": true`): the real event sequence - message_start, ping, then
per block content_block_start, content_block_delta (text_delta / input_json_delta,
in small pieces), content_block_stop, then message_delta (stop reason, usage) and
message_stop - so `client.messages.stream(...)` works unchanged.

Faults, for tests (`fail_next(fault, times)`): an HTTP status (429, 500, 529: sent
with a short retry-after so the SDK's retries stay fast; more than its retries and
the error reaches the caller); "stream_error" (an error event after the first
piece of text) and "stream_drop" (the connection closes mid-stream); and malformed
200 replies from a broken "compatible" endpoint: "html", "truncated", "no_content".

The offline demo: `run(script, argv)` is what a step calls with no credentials (or
with --demo, or --trace): it runs the step's real REPL in a fresh temporary folder
with the scripted user lines of `agents/demos/<step>.py`. With --trace FILE.html
the run is written as one self-contained page; with a real key, --trace records
through a forwarding proxy to the real endpoint instead.

Play mode: with --play, the policy is a Player (play.py): the learner is the model. The step's
own main() runs in the current folder (with --demo: a temporary folder seeded like the demo),
and each model call shows what the model receives and reads the reply from the keyboard
(`@tool {json}` lines are calls). In s09/s11 the learner plays the lead and the demo's policy
answers the others, unless --play all. `flags()` (entry.py) is the argparse parser of every
step's flags.

run.json. Beside the page, --trace run.html writes run.json: {"title", "messages", "system",
"tools", "calls"}. Each call is {"agent", "at" (time.time() when its reply was recorded),
"request", "reply"}, the request as sent but for its "messages", "system" and "tools": numbers
that index the lists of the same names at the top, where each distinct message, system prompt
and tool list is stored once (message #n on the page is messages[n - 1]). To rebuild a request:
request["messages"] = [record["messages"][i] for i in request["messages"]], and likewise
record["system"][request["system"]] and record["tools"][request["tools"]] where present.
"""

from .answers import chunked_whole, dechunk, is_event_stream, read_sse, rebuild
from .cache import CACHE_MIN_TOKENS, CACHE_TTL, CacheLedger, cache_units
from .demo import (BANNER, load_demo, run_demo, run_traced, save_trace, scripted_input,
                   session_folders, unrecorded)
from .entry import flags, run, trace_problem
from .play import Keyboard, Player, parse_call, run_play
from .play_view import View
from .page import (AGENT_LABELS, PAGE_STYLE, Drawn, agent_of, render_block, render_call,
                   render_message, usage_figure, write_trace)
from .protocol import (Interner, ScriptedModel, blocks_of, estimate_tokens, is_prompt,
                       last_user_text, latest_results, result_text, steps_since_prompt,
                       system_text, validate_request)
from .proxy import ForwardingProxy
from .replies import QUIRKS, Policy, Reply, make_message, reply, task_ids, tool_use
from .server import ERROR_TYPES, MALFORMED, STREAM_FAULTS, STREAM_PIECE, StandIn, sse_events

__all__ = [
    "BANNER", "CACHE_MIN_TOKENS", "CACHE_TTL", "CacheLedger", "cache_units", "flags", "load_demo",
    "run", "run_demo", "run_traced", "save_trace", "scripted_input", "session_folders",
    "trace_problem", "unrecorded", "AGENT_LABELS", "PAGE_STYLE", "Drawn", "agent_of",
    "render_block", "render_call", "render_message", "usage_figure", "write_trace", "Interner",
    "ScriptedModel", "blocks_of", "estimate_tokens", "is_prompt", "last_user_text",
    "latest_results", "result_text", "steps_since_prompt", "system_text", "task_ids",
    "validate_request",
    "ForwardingProxy", "Keyboard", "Player", "View", "parse_call", "run_play", "chunked_whole",
    "dechunk", "is_event_stream", "read_sse", "rebuild", "QUIRKS", "Policy", "Reply",
    "make_message", "reply", "tool_use", "ERROR_TYPES", "MALFORMED", "STREAM_FAULTS",
    "STREAM_PIECE", "StandIn", "sse_events",
]
