"""The offline demo and --trace: run a step's REPL against its scripted model in a temporary
folder, or record a real session through the forwarding proxy; either way, write the page."""

from __future__ import annotations

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
                calls = f"{len(proxy.calls)} model call" + "s" * (len(proxy.calls) != 1)
                print(f"[trace] {calls} written to {trace} and "
                      f"{record_path(page).name}"
                      + (f"; not recorded: {unrecorded(proxy.notes)}" if proxy.notes else ""))
    return 0 if written else 1
