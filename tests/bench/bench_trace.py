"""Benchmark --trace: the recording proxy and the trace page (not collected by pytest).

Run from the repository root:

    python tests/bench/bench_trace.py [--calls 60] [--kb 49] [--stream-mb 10] [--repeats 5]

1. A long session recorded through the proxy: --calls model calls, each answered with a call to
   read a new --kb KB file, whose text goes into the next request (the history grows by one file
   per call, as when an agent reads log after log). Measured: the largest request, the size of the
   trace page, and the peak memory (tracemalloc) of this process - the proxy, the recording and
   write_trace - while the session runs and while the page is written. The model (a stand-in) and
   the client that sends the requests run as processes of their own, so only the recorder counts.
2. One big streamed reply (--stream-mb MB of server-sent events, one small event per HTTP chunk,
   as the real API sends them), read by a client in this process: straight from the upstream, then
   through the proxy. Measured: the seconds each took, and when the proxy had recorded the reply.

Ratios are printed. Linear means: page and peak memory within a small multiple of the largest
request (the whole conversation is in it), and the stream through the proxy close to direct.
Everything runs on 127.0.0.1, in a temporary folder.
"""

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
sys.path.insert(0, str(AGENTS))

import offline  # noqa: E402

TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def log_text(number: int, kb: int) -> str:
    """A --kb KB log, different for every call."""
    lines, size = [], 0
    for i in range(10**9):
        line = (
            f"{number:03d}-{i:05d} INFO worker handled request {i * 7919 % 100003} in {i % 97} ms\n"
        )
        if size + len(line) > kb * 1000:
            break
        lines.append(line)
        size += len(line)
    return "".join(lines)


def read_events(data: bytes) -> dict:
    """The message in a stand-in's stream (it ends its lines with LF)."""
    message, pieces = {}, {}
    for line in data.decode().split("\n"):
        if not line.startswith("data: "):
            continue
        event = json.loads(line[6:])
        if event["type"] == "message_start":
            message = event["message"]
        elif event["type"] == "content_block_start":
            message["content"].append(event["content_block"])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            piece = delta.get("text", delta.get("partial_json"))
            pieces.setdefault(event["index"], []).append(piece)
    for index, parts in pieces.items():
        block = message["content"][index]
        if block["type"] == "text":
            block["text"] += "".join(parts)
        else:
            block["input"] = json.loads("".join(parts))
    return message


def post(url: str, body: bytes) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=900)
    headers = {
        "Content-Type": "application/json",
        "X-Api-Key": "bench",
        "anthropic-version": "2023-06-01",
    }
    connection.request("POST", "/v1/messages", body, headers)
    answer = connection.getresponse()
    data = answer.read()
    connection.close()
    return answer.status, data


def role_client(url: str, calls: int, kb: int) -> None:
    """The agent's side: send the growing history, answer each read_file call with a new log."""
    history, largest = [{"role": "user", "content": "Read the logs, one at a time."}], 0
    for number in range(calls):
        body = json.dumps(
            {
                "model": "bench",
                "max_tokens": 1000,
                "system": "You read logs.",
                "tools": TOOLS,
                "messages": history,
                "stream": True,
            }
        ).encode()
        largest = max(largest, len(body))
        status, data = post(url, body)
        assert status == 200, data[:300]
        message = read_events(data)
        history.append({"role": "assistant", "content": message["content"]})
        uses = [b for b in message["content"] if b["type"] == "tool_use"]
        if not uses:
            break
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": log_text(number, kb)}
            for b in uses
        ]
        history.append({"role": "user", "content": results})
    print(json.dumps({"calls": number + 1, "largest": largest}))


def role_model(calls: int) -> None:
    """The model: a stand-in that asks for one more log until the last call."""

    def policy(request):
        done = sum(m["role"] == "assistant" for m in request["messages"])
        if done == calls - 1:
            return ["All read."]
        return [offline.tool_use("read_file", {"path": f"log_{done}.txt"})]

    with offline.StandIn(policy) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the benchmark closes our stdin


def stream_events(megabytes: float) -> list[bytes]:
    piece = "streamed text, as a model writes it, a few words per event. " * 2

    def event(data: dict) -> bytes:
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

    start = {
        "id": "msg_b",
        "type": "message",
        "role": "assistant",
        "model": "bench",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    events = [
        event({"type": "message_start", "message": start}),
        event(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
    ]
    delta = event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
    )
    events += [delta] * int(megabytes * 1_000_000 / len(delta))
    return events + [
        event({"type": "content_block_stop", "index": 0}),
        event(
            {
                "type": "message_delta",
                "usage": {"output_tokens": 100000},
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            }
        ),
        event({"type": "message_stop"}),
    ]


def role_streamer(megabytes: float) -> None:
    """An upstream that answers every request with one big stream, one event per HTTP chunk."""
    events = stream_events(megabytes)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def start(*args: str) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--role", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return process, process.stdout.readline().strip()


def session(calls: int, kb: int) -> dict:
    model, upstream = start("model", str(calls))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tracemalloc.start()
            with offline.ForwardingProxy(upstream) as proxy:
                client = subprocess.run(
                    [sys.executable, __file__, "--role", "client", proxy.url, str(calls), str(kb)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                if hasattr(proxy, "settle"):
                    proxy.settle()  # the last reply is recorded just after the client has it
                recorded = len(proxy.calls)
                session_peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.reset_peak()
                page = Path(tmp, "bench.html")
                offline.write_trace(page, proxy.calls, Path(tmp), title="bench")
                write_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            sent = json.loads(client.stdout)
            return {
                **sent,
                "recorded": recorded,
                "page": page.stat().st_size,
                "session_peak": session_peak,
                "write_peak": write_peak,
            }
    finally:
        model.stdin.close()
        model.wait(timeout=30)


def read_stream(url: str) -> tuple[float, bytes]:
    body = json.dumps(
        {
            "model": "bench",
            "max_tokens": 10,
            "stream": True,
            "messages": [{"role": "user", "content": "stream"}],
        }
    ).encode()
    started = time.perf_counter()
    status, data = post(url, body)
    assert status == 200
    return time.perf_counter() - started, data


def big_stream(megabytes: float, repeats: int, timeout: float) -> dict:
    """Best and median of `repeats` reads, direct and through the proxy (each recorded before the
    next starts, so a recording never overlaps the next relay)."""
    streamer, upstream = start("streamer", str(megabytes))
    direct, through, recorded = [], [], []
    try:
        _, sent = read_stream(upstream)  # warm up
        for _ in range(repeats):
            direct.append(read_stream(upstream)[0])
        with offline.ForwardingProxy(upstream) as proxy:
            for n in range(repeats):
                started = time.perf_counter()
                seconds, relayed = read_stream(proxy.url)
                through.append(seconds)
                while len(proxy.calls) <= n and time.perf_counter() - started < timeout:
                    time.sleep(0.05)  # a benchmark, not a test: polling is fine here
                if len(proxy.calls) <= n:
                    break
                recorded.append(time.perf_counter() - started)
            text = proxy.calls[0]["reply"]["content"][0]["text"] if proxy.calls else ""
        return {
            "size": len(sent),
            "direct": direct,
            "through": through,
            "recorded": recorded,
            "same": relayed == sent,
            "text": len(text),
        }
    finally:
        streamer.kill()
        streamer.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--kb", type=int, default=49)
    parser.add_argument("--stream-mb", type=float, default=10)
    parser.add_argument("--repeats", type=int, default=5, help="reads of the stream, each way")
    parser.add_argument(
        "--stream-timeout", type=float, default=600, help="seconds to wait for the recording"
    )
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        role, *rest = args.role
        {
            "client": lambda: role_client(rest[0], int(rest[1]), int(rest[2])),
            "model": lambda: role_model(int(rest[0])),
            "streamer": lambda: role_streamer(float(rest[0])),
        }[role]()
        return
    print(f"Python {platform.python_version()} on {platform.system()}, {os.cpu_count()} cores")
    mb = 1_000_000
    s = session(args.calls, args.kb)
    largest, calls = s["largest"], s["calls"]
    print(f"\n1. {calls} calls ({s['recorded']} recorded), each reading a new {args.kb} KB file")
    print(f"   largest request          {largest / mb:8.2f} MB")
    for label, value, linear in (
        ("trace page", s["page"], 1),
        ("peak memory, session", s["session_peak"], 3),
        ("peak memory, write page", s["write_peak"], 3),
    ):
        print(
            f"   {label:24} {value / mb:8.2f} MB = {value / largest:6.2f} x the largest request; "
            f"{(value - linear * largest) / calls / 1000:+9,.1f} KB a call beyond {linear}x"
        )
    b = big_stream(args.stream_mb, args.repeats, args.stream_timeout)
    best, median = (lambda t: min(t)), statistics.median
    print(
        f"\n2. one stream of {b['size'] / mb:.1f} MB ({b['text'] / mb:.1f} MB of text), read "
        f"{args.repeats} times each way; relayed byte for byte: {b['same']}"
    )
    for label, times in (("direct", b["direct"]), ("through the proxy", b["through"])):
        print(f"   {label:24} best {best(times):6.2f} s, median {median(times):6.2f} s")
    print(
        f"   through / direct         best {best(b['through']) / best(b['direct']):6.2f} x, "
        f"median {median(b['through']) / median(b['direct']):6.2f} x"
    )
    if len(b["recorded"]) == len(b["through"]):
        print(
            f"   recorded by the proxy    median {median(b['recorded']):6.2f} s after the "
            "request was sent"
        )
    else:
        print(f"   recorded by the proxy    not within {args.stream_timeout:.0f} s")


if __name__ == "__main__":
    main()
