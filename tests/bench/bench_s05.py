"""Measure what s05's two layers save: the demo session, cached as the step does it (the listing
in a system prompt that never changes, the body as a tool_result), and as the alternative does
it (each loaded body appended to the system prompt). Not collected by pytest.

Run from the repository root:  .venv/bin/python tests/bench/bench_s05.py

Both runs use the offline stand-in's deterministic cache accounting (agents/offline/cache.py) and
the demo's scripted model, in a temporary folder seeded like the demo. Prints each call's usage
figures and the session's totals.
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

import offline  # noqa: E402

FIGURES = ("cache_read_input_tokens", "cache_creation_input_tokens", "input_tokens")


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def session(edit_system: bool) -> list:
    """The demo's session; returns each call's usage."""
    demo = load(AGENTS / "demos" / "s05_skills.py", "demo_s05")
    saved = os.getcwd(), dict(os.environ), builtins.input
    with tempfile.TemporaryDirectory() as tmp, offline.StandIn(demo.policy) as server:
        try:
            os.chdir(tmp)
            os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="bench")
            demo.setup(Path(tmp))
            step = load(AGENTS / "s05_skills.py", "s05_bench")
            if edit_system:
                alternative(step)
            builtins.input = offline.scripted_input(list(demo.PROMPTS))
            with contextlib.redirect_stdout(io.StringIO()):  # the session's own output
                step.repl()
        finally:
            os.chdir(saved[0])
            os.environ.clear()
            os.environ.update(saved[1])
            builtins.input = saved[2]
        return [call["reply"]["usage"] for call in server.calls]


def alternative(step) -> None:
    """The naive design: load_skill appends the body to the system prompt."""
    loaded = []
    listing = step.system_prompt

    def load_into_system(name: str) -> str:
        step.run_load_skill(name)  # the same checks
        loaded.append(name)
        return f'<skill name="{name}"> is now in the system prompt </skill>'

    step.TOOL_HANDLERS["load_skill"] = load_into_system
    step.system_prompt = lambda: "\n\n".join(
        [listing()] + [step.SKILLS[name]["body"] for name in loaded])


def main() -> None:
    for title, edit in (("as s05 does it (body as a tool_result)", False),
                        ("the alternative (body appended to the system prompt)", True)):
        usages = session(edit)
        print(f"\n{title}")
        print(f"  {'call':<6}{'read':>8}{'written':>9}{'uncached':>10}")
        for number, usage in enumerate(usages, 1):
            print(f"  {number:<6}" + "".join(f"{usage[k]:>{w},}"
                                            for k, w in zip(FIGURES, (8, 9, 10))))
        totals = [sum(u[k] for u in usages) for k in FIGURES]
        print(f"  {'total':<6}" + "".join(f"{t:>{w},}" for t, w in zip(totals, (8, 9, 10))))


if __name__ == "__main__":
    main()
