"""How long each step's offline demo takes, against its budget (not collected by pytest).

Run from the repository root:  python tests/bench/bench_demos.py [--runs 3] [STEP ...]

A learner's first run is the offline demo, so it should be quick: 5 s for a step, 20 s for s11
(three worker processes, a lease that has to run out). The suite used to assert this, which made
it fail on a loaded machine (`demo took 7.1s`); the tests now check what the demo does, with a
generous timeout only against a hang, and the time is measured here, on a machine you know is
quiet. Each run is exactly the suite's: no ANTHROPIC_* variable, a fresh empty folder, --trace.
Exits 1 if a demo's median run is over its budget or a run fails.
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
STEPS = sorted(p.stem for p in AGENTS.glob("s[0-9][0-9]_*.py"))
BUDGET = {"s11_autonomous": 20.0}  # seconds; every other step: DEFAULT_BUDGET
DEFAULT_BUDGET = 5.0


def run_demo(step: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as root:
        cwd, config = Path(root) / "cwd", Path(root) / "anthropic-config"
        cwd.mkdir()
        config.mkdir()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("ANTHROPIC_") and k != "MODEL_ID"
        }
        env.update(PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8", ANTHROPIC_CONFIG_DIR=str(config))
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(AGENTS / f"{step}.py"), "--trace", str(Path(root) / "run.html")],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=600,
        )
        return time.perf_counter() - started, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("steps", nargs="*", default=STEPS)
    args = parser.parse_args()
    print(
        f"python {platform.python_version()} on {platform.system()}, {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        if hasattr(os, "getloadavg")
        else ""
    )
    print(
        f"{'step':<18} {'min':>6} {'median':>7} {'max':>6} {'budget':>7}  ({args.runs} runs each)"
    )
    failed = False
    for step in args.steps:
        runs = [run_demo(step) for _ in range(args.runs)]
        seconds = [s for s, _ in runs]
        budget = BUDGET.get(step, DEFAULT_BUDGET)
        median = statistics.median(seconds)
        verdict = "ok" if median < budget else "OVER BUDGET"
        if any(code != 0 for _, code in runs):
            verdict = f"FAILED (exit codes {[code for _, code in runs]})"
        failed |= verdict != "ok"
        print(
            f"{step:<18} {min(seconds):6.2f} {median:7.2f}"
            f" {max(seconds):6.2f} {budget:7.1f}  {verdict}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
