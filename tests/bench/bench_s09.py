"""Benchmark the s09 mailbox (not collected by pytest).

Run from the repository root:  .venv/bin/python tests/bench/bench_s09.py

1. Writing: messages per second into one mailbox from 1 and from 8 processes at once
   (forked; each send takes the mailbox's cross-process lock and appends one whole line).
2. Reading: read() from the start of a 100,000-line mailbox, versus read() from a byte offset
   near its end - what a teammate or the lead does on every poll.
Times depend on the machine, so each is printed beside a ratio (8 writers against 1, a read
from the start against one from an offset) and in fsyncs: what one os.fsync of a small file
costs here. send() does not fsync; the unit says how cheap an append is next to one.
Everything happens in a temporary folder.
"""

import importlib.util
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "agents" / "s09_team.py"
spec = importlib.util.spec_from_file_location("s09_team", SCRIPT)
team = importlib.util.module_from_spec(spec)
spec.loader.exec_module(team)


def writer(root: str, name: str, count: int, gate, results) -> None:
    mailbox = team.Mailbox(Path(root))
    gate.wait()
    for i in range(count):
        mailbox.send("inbox", name, f"message {i} from {name}")
    results.put(name)


def write_rate(writers: int, per_writer: int) -> float:
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with tempfile.TemporaryDirectory() as root:
        gate, results = context.Barrier(writers + 1), context.Queue()
        procs = [
            context.Process(target=writer, args=(root, f"w{n}", per_writer, gate, results))
            for n in range(writers)
        ]
        for proc in procs:
            proc.start()
        gate.wait()
        start = time.perf_counter()
        for _ in procs:
            results.get(timeout=300)
        seconds = time.perf_counter() - start
        for proc in procs:
            proc.join()
        received, _ = team.Mailbox(Path(root)).read("inbox")
        assert len(received) == writers * per_writer and len({m["id"] for m in received}) == len(
            received
        )
    return len(received) / seconds


def fsync_ms(repeats: int = 30) -> float:
    """The median cost of one small write plus os.fsync on this machine, in milliseconds."""
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "probe"
        with open(path, "ab", buffering=0) as handle:

            def write_and_sync():
                handle.write(b"x\n")
                os.fsync(handle.fileno())

            return timed(write_and_sync, repeats)


def timed(call, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> None:
    print(f"python {platform.python_version()} on {platform.system()}, {os.cpu_count()} cores")
    fsync = fsync_ms()
    print(f"one fsync of a small file here: {fsync:.3f} ms (the unit below)")
    print("writing into one mailbox (all delivered exactly once):")
    rates = {writers: write_rate(writers, 4000 // writers) for writers in (1, 8)}
    for writers, rate in rates.items():
        print(
            f"  {writers} writer process{'es' if writers > 1 else '':<3}"
            f" {rate:9.0f} sends/s, one send = {1000 / rate / fsync:6.3f} fsyncs"
        )
    print(f"  8 writers / 1 writer: {rates[8] / rates[1]:.2f} x the throughput (one lock)")
    with tempfile.TemporaryDirectory() as root:
        mailbox = team.Mailbox(Path(root))
        with open(
            mailbox.path("big"), "w", encoding="utf-8"
        ) as handle:  # 100,000 lines, written directly
            for i in range(100_000):
                handle.write(
                    f'{{"id": "m{i}", "from": "a", "to": "big", '
                    f'"kind": "message", "content": "number {i}"}}\n'
                )
        size = mailbox.path("big").stat().st_size
        near_end = size - 10 * (size // 100_000)
        near_end = mailbox.path("big").read_bytes().rfind(b"\n", 0, near_end) + 1
        print(f"reading a 100,000-line mailbox ({size / 1e6:.1f} MB):")
        reads = {
            "read() from the start": timed(lambda: mailbox.read("big"), 3),
            "read() from an offset 10 lines from the end": timed(
                lambda: mailbox.read("big", near_end), 50
            ),
            "read() at the end (a poll, nothing new)": timed(lambda: mailbox.read("big", size), 50),
        }
        for label, ms in reads.items():
            print(f"  {label:<44} {ms:9.3f} ms = {ms / fsync:9.2f} fsyncs")
        start, offset = reads["read() from the start"], list(reads.values())[1]
        print(f"  from the start / from an offset: {start / offset:.0f} x")


if __name__ == "__main__":
    main()
