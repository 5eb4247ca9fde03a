"""The offline demo and --trace: run a step's REPL against its scripted model in a temporary
folder, or record a real session through the forwarding proxy; either way, write the page."""

from __future__ import annotations

import argparse
import builtins
import importlib.util
import os
import runpy
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Callable

from .page import write_trace
from .proxy import ForwardingProxy
from .record import record_path, write_record
from .server import StandIn


# -- The offline demo ------------------------------------------------------------------
BANNER = """\
======================================================================
 OFFLINE DEMO - no ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN is set
 (or --demo was given). The model is SCRIPTED: agents/demos/{name}.py,
 served by agents/offline/ at {url}. The tools really run,
 in a temporary folder: {workdir}
 To use a real model: copy .env.example to .env, set ANTHROPIC_API_KEY,
 and run this script again.
======================================================================"""


def load_demo(script: Path):
    path = script.parent / "demos" / f"{script.stem}.py"
    spec = importlib.util.spec_from_file_location(f"demo_{script.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scripted_input(lines: list[str]) -> Callable[[str], str]:
    """Stand in for input(): type the demo's lines, echoing them like a terminal would."""
    pending = deque(lines)

    def fake_input(prompt: str = "") -> str:
        if not pending:
            raise EOFError
        line = pending.popleft()
        print(f"{prompt}{line}", flush=True)
        return line

    return fake_input


def session_folders(namespace: dict) -> dict:
    """Where this run's session keeps its mail (s09 on: MAILBOX, in .mailbox/<session>/) and its
    task board (s07 on: BOARD), as the step named them, and the context size at which it
    compacts (s06: COMPACT_THRESHOLD, as this run read it); what the step lacks is None."""
    return {"mailbox": getattr(namespace.get("MAILBOX"), "root", None),
            "board": getattr(namespace.get("BOARD"), "dir", None),
            "threshold": namespace.get("COMPACT_THRESHOLD")}


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


def save_trace(path: Path, calls: list, workdir: Path, title: str, **where) -> bool:
    """write_trace, and the calls as JSON beside the page (run.html -> run.json), with a failure
    told in one line instead of a traceback; True if both were written."""
    try:
        write_trace(path, calls, workdir, title=title, **where)
        write_record(record_path(path), calls, title=title)
        return True
    except OSError as error:
        print(f"[trace] {path} or the .json beside it could not be written: {error}",
              file=sys.stderr)
        return False


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
        from .play import run_play  # play mode imports this module: import it only here
        return run_play(script_path, args.play == "all", args.demo, args.trace)
    credentials = os.getenv("ANTHROPIC_API_KEY") or os.getenv("ANTHROPIC_AUTH_TOKEN")
    if credentials and not args.demo:
        return run_traced(script_path, args.trace, argv)
    return run_demo(script_path, args.trace)


def run_demo(script_path: str, trace: str | None = None) -> int:
    """Run a step's REPL against the scripted model in a temporary folder. Returns an exit code."""
    script = Path(script_path).resolve()
    demo = load_demo(script)
    started = time.monotonic()
    saved_env, saved_cwd, saved_input = dict(os.environ), os.getcwd(), builtins.input
    with tempfile.TemporaryDirectory(prefix=f"{script.stem}-demo-") as tmp, \
            StandIn(demo.policy) as server:
        workdir = Path(tmp).resolve()
        print(BANNER.format(name=script.stem, url=server.url, workdir=workdir), flush=True)
        try:
            os.chdir(workdir)
            os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)
            os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="offline-demo")
            if hasattr(demo, "setup"):
                demo.setup(workdir)
            # Run the script again as a fresh module inside the temp folder, so its
            # WORKDIR, client and state all point at the demo's world.
            namespace = runpy.run_path(str(script), run_name="offline_demo")
            builtins.input = scripted_input(list(demo.PROMPTS))
            if hasattr(demo, "run"):
                demo.run(namespace, workdir, server)
            else:
                namespace["repl"]()
            if hasattr(demo, "finish"):
                demo.finish(namespace, workdir)
        finally:
            builtins.input = saved_input
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
        written = trace and save_trace(Path(saved_cwd, trace), server.calls, workdir,
                                       title=f"{script.stem} (offline demo)",
                                       **session_folders(namespace))
    seconds = time.monotonic() - started
    print(f"[offline demo] {len(server.requests)} model calls in {seconds:.1f}s; "
          f"{len(server.rejected)} rejected by the validator. The temporary folder is removed.")
    for _, problem in server.rejected:
        print(f"[offline demo] rejected: {problem}")
    if written:
        print(f"[offline demo] trace written to {Path(saved_cwd, trace)} "
              f"(the calls as JSON: {record_path(Path(saved_cwd, trace)).name})")
    return 1 if server.rejected or trace and not written else 0


def unrecorded(notes: list) -> str:
    """The answers a page does not show, each kind once: "2 x a 200 answer that is ..."."""
    counts: dict = {}
    for note in notes:
        counts[note] = counts.get(note, 0) + 1
    return "; ".join(note if n == 1 else f"{n} x {note}" for note, n in counts.items())


def run_traced(script_path: str, trace: str | None, argv: list[str]) -> int:
    """A real session, recorded: the step talks to a local forwarding proxy that passes every
    request to the configured endpoint and keeps both sides; the page is written when the REPL
    ends."""
    upstream = (os.getenv("ANTHROPIC_BASE_URL") or "https://api.anthropic.com").rstrip("/")
    script, saved_env, saved_argv = Path(script_path).resolve(), dict(os.environ), sys.argv
    page = Path(trace).resolve()  # where it was meant, whatever folder the step moves to
    try:
        proxy = ForwardingProxy(upstream)
    except ValueError as error:
        print(f"[trace] {error}", file=sys.stderr)
        return 2
    with proxy:
        print(f"[trace] recording through {proxy.url} -> {upstream}; the page goes to {trace}",
              flush=True)
        namespace: dict = {}
        try:
            os.environ["ANTHROPIC_BASE_URL"] = proxy.url
            # the step, pointed at the proxy
            namespace = runpy.run_path(str(script), run_name="traced")
            # its main() as with no flags (--trace was the only one): its own setup and cleanup
            sys.argv = argv[:1]
            namespace["main"]()
        finally:
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
            proxy.settle(10)  # the last reply is recorded just after the step has it
            written = save_trace(page, proxy.calls, Path.cwd(), title=f"{script.stem} (recorded)",
                                 **session_folders(namespace))
            if written:
                print(f"[trace] {len(proxy.calls)} model calls written to {trace} and "
                      f"{record_path(page).name}"
                      + (f"; not recorded: {unrecorded(proxy.notes)}" if proxy.notes else ""))
    return 0 if written else 1
