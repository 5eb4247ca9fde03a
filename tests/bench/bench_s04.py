"""Benchmark for s04: a task that reads N files, done inline by the parent versus delegated.

    python tests/bench/bench_s04.py

Not collected by pytest. Everything runs locally: the s04 script's real REPL, through the real
SDK, against the stand-in (agents/offline/), which counts tokens as ceil(len(JSON of system,
messages, tools) / 4) and accounts the cache as its header documents.

The session: the demo's question about N service configs (the demo's eight, plus generated
ones), then FOLLOW_UPS short questions in the same conversation - a real session goes on
after the side task, and every later call of the parent pays for what its context holds.

    inline     the parent lists the folder and reads every file itself (the demo's child
               script, played by the parent), then answers
    delegated  the step as the demo runs it: the parent calls subagent; the child reads

Measured per run, for the parent and the child apart: model calls, the largest context of one
call, input tokens (not cached + cache write + cache read), and billed input in token
equivalents (not cached x1.0, cache write x1.25, cache read x0.1). The ratios are the result;
they are the same on every machine. No time is measured.
"""

import builtins
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
sys.path.insert(0, str(AGENTS))

from offline import StandIn, is_prompt, last_user_text, system_text  # noqa: E402

FOLLOW_UPS = 5
PRICE = {"input_tokens": 1.0, "cache_creation_input_tokens": 1.25, "cache_read_input_tokens": 0.1}


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def policy_for(demo, inline: bool):
    """The demo's policy; inline, the parent runs the child's script on its own history."""

    def policy(request: dict) -> list:
        if last_user_text(request).startswith("Follow-up"):
            return ["Noted; nothing more to read for that."]
        if inline and "You are a subagent" not in system_text(request):
            first = next(i for i, m in enumerate(request["messages"]) if is_prompt(m))
            return demo.child({**request, "messages": request["messages"][first:]})
        return demo.policy(request)

    return policy


def figures(calls: list) -> dict:
    usages = [{k: call["reply"]["usage"].get(k) or 0 for k in PRICE} for call in calls]
    contexts = [sum(u.values()) for u in usages] or [0]
    return {"calls": len(calls), "peak": max(contexts), "input": sum(contexts),
            "billed": sum(PRICE[k] * u[k] for u in usages for k in PRICE)}


def run(files: int, inline: bool) -> dict:
    demo = load(AGENTS / "demos" / "s04_subagent.py", "bench_demo")
    demo.MAX_FILES = files
    saved_cwd, saved_env, saved_input = os.getcwd(), dict(os.environ), builtins.input
    with tempfile.TemporaryDirectory() as tmp, StandIn(policy_for(demo, inline)) as server:
        workdir = Path(tmp).resolve()
        try:
            os.chdir(workdir)
            demo.setup(workdir)
            for n in range(files - len(demo.SERVICES)):
                (workdir / "services" / f"extra{n:02d}.conf").write_text(
                    demo.make_config(f"extra{n:02d}", 9000 + n, n % 7 == 0), encoding="utf-8")
            os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="bench")
            agent = load(AGENTS / "s04_subagent.py", "bench_s04")
            agent.SUBAGENT_TURNS = files + 5
            lines = [demo.PROMPTS[0]] + [f"Follow-up {n}: thanks." for n in range(FOLLOW_UPS)]
            builtins.input = demo_input(lines)
            with contextlib.redirect_stdout(io.StringIO()):
                agent.repl()
        finally:
            builtins.input = saved_input
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
    assert not server.rejected, server.rejected
    child = [c for c in server.calls if "You are a subagent" in system_text(c["request"])]
    parent = [c for c in server.calls if c not in child]
    return {"parent": figures(parent), "child": figures(child)}


def demo_input(lines: list):
    pending = list(lines)

    def fake_input(prompt: str = "") -> str:
        if not pending:
            raise EOFError
        return pending.pop(0)

    return fake_input


def main() -> None:
    print(f"s04 benchmark: the demo's question, then {FOLLOW_UPS} follow-ups; "
          f"python {sys.version.split()[0]}")
    print(f"{'files':>5} {'run':<10}{'parent calls':>13}{'peak ctx':>10}{'billed in':>11}"
          f"{'child calls':>12}{'peak ctx':>10}{'billed in':>11}{'total billed':>14}")
    for files in (8, 16, 32):
        rows = {name: run(files, name == "inline") for name in ("inline", "delegated")}
        for name, row in rows.items():
            parent, child = row["parent"], row["child"]
            print(f"{files:>5} {name:<10}{parent['calls']:>13}{parent['peak']:>10,}"
                  f"{parent['billed']:>11,.0f}{child['calls']:>12}{child['peak']:>10,}"
                  f"{child['billed']:>11,.0f}{parent['billed'] + child['billed']:>14,.0f}")
        inline, delegated = rows["inline"], rows["delegated"]
        total = {name: r["parent"]["billed"] + r["child"]["billed"] for name, r in rows.items()}
        print(f"      delegated / inline: parent billed input "
              f"{delegated['parent']['billed'] / inline['parent']['billed']:.1%}, parent peak "
              f"context {delegated['parent']['peak'] / inline['parent']['peak']:.1%}, total billed "
              f"{total['delegated'] / total['inline']:.1%}")


if __name__ == "__main__":
    main()
