"""Benchmark for s06: compaction and prompt caching, alone and together, on one long session.

    python tests/bench/bench_s06.py

Not collected by pytest (the file name does not start with test_). Everything runs locally:
the s06 script's real REPL, through the real SDK, against the stand-in (agents/offline.py),
which counts tokens as ceil(len(JSON of system, messages, tools) / 4) and accounts the cache
as documented in its header (prefixes remembered at each request's breakpoint, 1,024-token
minimum, reads and writes reported in usage).

The session: the demo's two reading turns, 37 more turns that each read one new generated
log (8,000 or 16,000 characters, alternating), and the demo's report turn - 40 user turns.

Configurations:
    naive             no compaction, no caching
    caching only      no compaction; every request cached up to its last block
    compaction only   micro compaction on every call (no batch), auto at COMPACT_THRESHOLD;
                      no caching
    both              the step as it ships: micro in batches of CLEAR_BATCH_TOKENS, auto, caching

Measured per configuration: model calls, compactions, micro batches, peak context of one call,
total input tokens over every call (summary calls included: they are paid for too), billed
input in token-equivalents (not cached x1.0, cache write x1.25, cache read x0.1), and whether
report.md still has the right error count for every log (nothing lost that matters).
Wall-clock time is printed only as a ratio to the naive run: the token figures are the result,
and they are the same on every machine.
"""

import builtins
import contextlib
import importlib.util
import io
import os
import re
import sys
import tempfile
import time
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
sys.path.insert(0, str(AGENTS))

from offline import CacheLedger, StandIn, scripted_input  # noqa: E402

EXTRA_LOGS = 37
NEVER = 10**12
SHIPPED = "as shipped"
CONFIGS = [  # name, caching, CLEAR_BATCH_TOKENS (None: no micro), COMPACT_THRESHOLD
    ("naive", False, None, NEVER),
    ("caching only", True, None, NEVER),
    ("compaction only", False, 0, SHIPPED),
    ("both (s06 as it ships)", True, SHIPPED, SHIPPED),
]
PRICE = {"uncached": 1.0, "write": 1.25, "read": 0.1}


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def session(demo, workdir: Path) -> list:
    """Create the logs; return the 40 user lines."""
    demo.setup(workdir)  # the demo's eight logs
    for demo_setting in (
        "COMPACT_THRESHOLD",
        "CLEAR_BATCH_TOKENS",
    ):  # the script's own defaults, not the demo's
        os.environ.pop(demo_setting, None)
    prompts = [p for p in demo.PROMPTS if not p.startswith("/")]
    extra = []
    for i in range(EXTRA_LOGS):
        name = f"svc{i:02d}"
        (workdir / "logs" / f"{name}.log").write_text(
            demo.make_log(name, 8_000 if i % 2 else 16_000)
        )
        extra.append(f"Read logs/{name}.log and tell me which service logged the most errors.")
    return prompts[:2] + extra + prompts[2:]


def true_counts(workdir: Path) -> dict:
    return {
        f"logs/{p.name}": p.read_text().count(" ERROR ") for p in (workdir / "logs").glob("*.log")
    }


def run(name: str, caching: bool, batch: int | None, threshold: int) -> dict:
    demo = load(AGENTS / "demos" / "s06_compact.py", "bench_demo")
    saved_cwd, saved_env, saved_input = os.getcwd(), dict(os.environ), builtins.input
    ledger = (
        CacheLedger() if caching else CacheLedger(min_tokens=NEVER)
    )  # nothing is ever long enough
    with tempfile.TemporaryDirectory() as tmp, StandIn(demo.policy, cache=ledger) as server:
        workdir = Path(tmp).resolve()
        try:
            os.chdir(workdir)
            prompts = session(demo, workdir)
            os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="bench")
            agent = load(AGENTS / "s06_compact.py", "bench_s06")
            agent.COMPACT_THRESHOLD = agent.COMPACT_THRESHOLD if threshold == SHIPPED else threshold
            agent.CLEAR_BATCH_TOKENS = {None: NEVER, SHIPPED: agent.CLEAR_BATCH_TOKENS}.get(
                batch, batch
            )
            builtins.input = scripted_input(prompts)
            started = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()) as out:
                agent.repl()
            seconds = time.monotonic() - started
            report = (workdir / "report.md").read_text() if (workdir / "report.md").exists() else ""
            reported = {
                path: int(n) for path, n in re.findall(r"\| (logs/[\w-]+\.log) \| (\d+) \|", report)
            }
            expected = true_counts(workdir)
        finally:
            builtins.input = saved_input
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
    usages = [call["reply"]["usage"] for call in server.calls]
    split = {
        "uncached": sum(u["input_tokens"] for u in usages),
        "write": sum(u["cache_creation_input_tokens"] for u in usages),
        "read": sum(u["cache_read_input_tokens"] for u in usages),
    }
    calls = [call for call in server.calls if "tools" in call["request"]]
    context = [
        sum(
            call["reply"]["usage"][k]
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        for call in calls
    ]
    return {
        "name": name,
        "calls": len(calls),
        "compactions": len(server.calls) - len(calls),
        "micro": out.getvalue().count("[micro]"),
        "peak": max(context),
        "total": sum(split.values()),
        "billed": sum(PRICE[k] * v for k, v in split.items()),
        "split": split,
        "report_ok": reported == expected,
        "rejected": len(server.rejected),
        "seconds": seconds,
    }


def main() -> None:
    print(
        f"s06 benchmark: {EXTRA_LOGS + 3} user turns, python"
        f" {sys.version.split()[0]}, {os.cpu_count()} cores"
    )
    rows = [run(*config) for config in CONFIGS]
    rows += [
        run(f"both, batch {batch:,}", True, batch, SHIPPED) for batch in (2_000, 5_000, 20_000)
    ]
    naive = rows[0]
    print(
        f"{'configuration':<24}{'calls':>6}{'summ.':>6}{'micro':>6}{'peak ctx':>10}{'total in':>11}"
        f"{'billed':>11}{'vs naive':>9}  report.md  time vs naive"
    )
    for row in rows:
        print(
            f"{row['name']:<24}{row['calls']:>6}{row['compactions']:>6}{row['micro']:>6}{row['peak']:>10,}"
            f"{row['total']:>11,}{row['billed']:>11,.0f}{row['billed'] / naive['billed']:>8.1%}"
            f"  {'correct' if row['report_ok'] else 'WRONG':<9}"
            f"  {row['seconds'] / naive['seconds']:.2f}x"
        )
    for row in rows:
        split = row["split"]
        print(
            f"  {row['name']:<22} not cached {split['uncached']:>10,}"
            f"   written {split['write']:>10,}"
            f"   read {split['read']:>10,}   rejected {row['rejected']}"
        )


if __name__ == "__main__":
    main()
