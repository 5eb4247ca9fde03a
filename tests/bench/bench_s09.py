"""Benchmark for s09's mailbox (not collected by pytest).

Run from the repository root:  python tests/bench/bench_s09.py [--lines 100000]

1. Throughput: messages per second into ONE mailbox with 1 writer process and with
   8 writer processes (each send takes the cross-process lock and appends one line).
2. Reading: receive() from the start of a 100,000-line mailbox, versus after a cursor
   near its end (the byte-offset cache at work), versus the same cursor on a fresh bus
   that has to find it first.

Everything runs in a temporary folder; nothing talks to a model.
"""

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "agents" / "s09_team.py"

WRITER = textwrap.dedent("""
    import importlib.util, sys, time
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("s09", sys.argv[1])
    team = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(team)
    bus = team.MessageBus(Path(sys.argv[2]))
    name, count = sys.argv[3], int(sys.argv[4])
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        bus.send(team.Message(from_agent=name, to_agent="inbox", content=f"message {i} from {name}"))
    print(time.time(), flush=True)  # when the last send returned (process exit is not counted)
""")


def load_team():
    spec = importlib.util.spec_from_file_location("s09_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def throughput(team, folder: Path, writers: int, per_writer: int) -> float:
    """Messages per second, from the moment all writers are told to go until the last send returns."""
    root = folder / f"writers-{writers}"
    script = folder / "writer.py"
    script.write_text(WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(SCRIPT), str(root), f"w{n}", str(per_writer)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=folder)
             for n in range(writers)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    started = time.time()  # wall clock: the writers report their end on the same clock
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    finished = [float(proc.stdout.readline()) for proc in procs]
    for proc in procs:
        assert proc.wait() == 0
    seconds = max(finished) - started
    received = team.MessageBus(root).receive("inbox")
    assert len(received) == writers * per_writer and len({m.id for m in received}) == len(received)
    return len(received) / seconds


def timed(function, repeats: int = 5) -> float:
    """Median seconds of `repeats` calls."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def reading(team, folder: Path, lines: int) -> dict:
    root = folder / "big"
    bus = team.MessageBus(root)
    started = time.perf_counter()
    ids = [bus.send(team.Message(from_agent="a", to_agent="big", content=f"message number {i}")).id
           for i in range(lines)]
    fill = time.perf_counter() - started
    cursor = ids[-11]  # ten messages after it
    assert len(bus.receive("big", since_id=cursor)) == 10
    return {
        "fill": fill,
        "from_start": timed(lambda: team.MessageBus(root).receive("big"), repeats=3),
        "after_cursor_warm": timed(lambda: bus.receive("big", since_id=cursor), repeats=50),
        "after_last_warm": timed(lambda: bus.receive("big", since_id=ids[-1]), repeats=50),
        "after_cursor_cold": timed(lambda: team.MessageBus(root).receive("big", since_id=cursor), repeats=3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="size of the big mailbox")
    parser.add_argument("--messages", type=int, default=4000, help="messages per throughput run")
    args = parser.parse_args()
    team = load_team()
    with tempfile.TemporaryDirectory(prefix="bench-s09-") as tmp:
        folder = Path(tmp)
        print(f"Python {sys.version.split()[0]} on {sys.platform}; {args.messages} messages per run")
        for writers in (1, 8):
            rate = throughput(team, folder, writers, args.messages // writers)
            print(f"  {writers} writer process{'es' if writers > 1 else ''}: {rate:,.0f} messages/s")
        r = reading(team, folder, args.lines)
        print(f"Mailbox of {args.lines:,} lines (filled by send() in {r['fill']:.1f}s, "
              f"{args.lines / r['fill']:,.0f} messages/s single-threaded):")
        print(f"  receive from the start (fresh bus)          {r['from_start'] * 1000:9.2f} ms")
        print(f"  receive after a cursor 10 from the end      {r['after_cursor_warm'] * 1000:9.3f} ms")
        print(f"  receive after the last message (poll)       {r['after_last_warm'] * 1000:9.3f} ms")
        print(f"  same cursor on a fresh bus (finds it first) {r['after_cursor_cold'] * 1000:9.2f} ms")
        print(f"  speed-up of a cached cursor over a full read: {r['from_start'] / r['after_cursor_warm']:,.0f}x")


if __name__ == "__main__":
    main()
