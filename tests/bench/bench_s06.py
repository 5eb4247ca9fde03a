"""Benchmark for s06: the offline demo session stretched to 40 turns, with and without compaction.

    python tests/bench/bench_s06.py

Not collected by pytest (the file name does not start with test_). Everything runs locally:
the s06 script's real REPL, through the real SDK, against the stand-in (agents/offline.py),
whose usage.input_tokens is ceil(len(JSON of system, messages, tools) / 4).

The session: the demo's two reading turns, 37 more turns that each read one new generated
log (8,000 or 16,000 characters, alternating), and the demo's report turn - 40 user turns.
Measured per configuration: model calls, compactions, peak input_tokens of one call, total
input tokens summed over every call (summary calls included: they are paid for too), and
whether report.md still has the right error count for every log (nothing lost that matters).
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

from offline import StandIn, estimate_tokens, scripted_input  # noqa: E402

EXTRA_LOGS = 37
CONFIGS = [  # name, KEEP_RECENT, COMPACT_THRESHOLD
    ("no compaction", 10 ** 9, 10 ** 12),
    ("micro only", 3, 10 ** 12),
    ("auto only, threshold 50,000", 10 ** 9, 50_000),
    ("s06, demo threshold 10,000", 3, 10_000),
    ("s06, default threshold 50,000", 3, 50_000),
]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def session(demo, workdir: Path) -> list:
    """Create the logs; return the 40 user lines."""
    demo.setup(workdir)  # the demo's six logs
    prompts = [p for p in demo.PROMPTS if not p.startswith("/")]
    extra = []
    for i in range(EXTRA_LOGS):
        name = f"svc{i:02d}"
        (workdir / "logs" / f"{name}.log").write_text(demo.make_log(name, 8_000 if i % 2 else 16_000))
        extra.append(f"Read logs/{name}.log and tell me which service logged the most errors.")
    return prompts[:2] + extra + prompts[2:]


def true_counts(workdir: Path) -> dict:
    return {f"logs/{p.name}": p.read_text().count(" ERROR ") for p in (workdir / "logs").glob("*.log")}


def run(name: str, keep_recent: int, threshold: int) -> dict:
    demo = load(AGENTS / "demos" / "s06_compact.py", "bench_demo")
    saved_cwd, saved_env, saved_input = os.getcwd(), dict(os.environ), builtins.input
    with tempfile.TemporaryDirectory() as tmp, StandIn(demo.policy) as server:
        workdir = Path(tmp).resolve()
        try:
            os.chdir(workdir)
            prompts = session(demo, workdir)
            os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="bench",
                              COMPACT_THRESHOLD=str(threshold))
            agent = load(AGENTS / "s06_compact.py", "bench_s06")
            agent.KEEP_RECENT = keep_recent
            builtins.input = scripted_input(prompts)
            started = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()) as out:
                agent.repl()
            seconds = time.monotonic() - started
            report = (workdir / "report.md").read_text() if (workdir / "report.md").exists() else ""
            reported = {path: int(n) for path, n in re.findall(r"\| (logs/[\w-]+\.log) \| (\d+) \|", report)}
            expected = true_counts(workdir)
        finally:
            builtins.input = saved_input
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
    summaries = [r for r in server.requests if "tools" not in r]
    calls = [r for r in server.requests if "tools" in r]
    tokens = [estimate_tokens(r) for r in calls]
    return {"name": name, "calls": len(calls), "compactions": len(summaries),
            "micro": out.getvalue().count("[micro]"), "peak": max(tokens),
            "total": sum(tokens) + sum(estimate_tokens(r) for r in summaries),
            "report_ok": reported == expected, "logs": len(expected),
            "rejected": len(server.rejected), "seconds": seconds,
            "turns": len(prompts)}


def main() -> None:
    print(f"s06 benchmark: {EXTRA_LOGS + 3} user turns, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores")
    rows = [run(*config) for config in CONFIGS]
    base = rows[0]
    print(f"{'configuration':<32}{'calls':>6}{'compact':>8}{'peak in':>10}{'total in':>12}"
          f"{'vs none':>9}  report.md  rejected  time")
    for row in rows:
        print(f"{row['name']:<32}{row['calls']:>6}{row['compactions']:>8}{row['peak']:>10,}{row['total']:>12,}"
              f"{row['total'] / base['total']:>8.0%}  {'correct' if row['report_ok'] else 'WRONG':<9}"
              f"  {row['rejected']:>8}  {row['seconds']:.1f}s")


if __name__ == "__main__":
    main()
