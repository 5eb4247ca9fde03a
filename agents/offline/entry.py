"""A step's entry point with no credentials or with flags: the flags every step accepts, and
what each runs - the offline demo or a recorded session (demo.py), or play mode (play.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .demo import run_demo, run_traced
from .play import run_play


def trace_problem(trace: str) -> str | None:
    """Why the page cannot be written to `trace`, checked before the session runs; None if fine."""
    path = Path(trace)
    if not path.parent.is_dir():
        return f"the folder {path.parent} does not exist (create it, or write the page elsewhere)"
    if path.is_dir():
        return "is a folder: give the page a file name, e.g. --trace run.html"
    if not os.access(path.parent, os.W_OK) or path.exists() and not os.access(path, os.W_OK):
        return f"cannot write there (permission denied in {path.parent})"
    return None


def flags(script: Path) -> argparse.ArgumentParser:
    """The flags every step accepts (s11 also takes --worker NAME [--session ID] itself)."""
    worker = "def run_worker(" in script.read_text(encoding="utf-8")
    parser = argparse.ArgumentParser(
        prog=script.name,
        description=f"{script.stem}: a step of the course. With ANTHROPIC_API_KEY (or "
                    "ANTHROPIC_AUTH_TOKEN) set it talks to the model; without, it plays its "
                    "offline demo against the local stand-in.",
        epilog="--worker NAME [--session ID]  run one autonomous worker as its own process, on "
               "the lead's board and mailbox (start the lead first)" if worker else None)
    parser.add_argument("--demo", action="store_true",
                        help="the offline demo (a scripted model in a temporary folder), also "
                             "when a key is set; with --play: play in such a folder")
    parser.add_argument("--play", nargs="?", const="lead", choices=["lead", "all"],
                        help="you are the model: each model call shows what the model receives "
                             "and asks you for the reply (no key needed). In s09/s11 you play "
                             "the lead; --play all: every agent")
    parser.add_argument("--trace", metavar="FILE.html",
                        help="write the run as one self-contained page (with a key: recorded "
                             "through a local proxy)")
    return parser


def run(script_path: str, argv: list[str]) -> int:
    """A step's entry point with no credentials, or with flags: returns an exit code.
    An unknown flag, or a flag without its value, is refused with exit code 2."""
    script = Path(script_path).resolve()
    args = flags(script).parse_args(argv[1:])
    if args.trace is not None:
        problem = trace_problem(args.trace)
        if problem:
            print(f"--trace {args.trace}: {problem}", file=sys.stderr)
            return 2
    if args.play:
        return run_play(script_path, args.play == "all", args.demo, args.trace)
    credentials = os.getenv("ANTHROPIC_API_KEY") or os.getenv("ANTHROPIC_AUTH_TOKEN")
    if credentials and not args.demo:
        return run_traced(script_path, args.trace, argv)
    return run_demo(script_path, args.trace)
