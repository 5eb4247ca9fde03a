"""Play mode (--play): the learner is the model.

The step runs its real REPL; its model calls go to the stand-in, whose policy is a Player: for
each call it prints what the model receives - on an agent's first call its system prompt and
tools, then on every call what is new since that agent's previous one (play_view.py) - and
reads the reply from the keyboard:

    @NAME {json}     a tool call (several such lines: parallel calls in one reply)
    any other line   text
    an empty line    sends the reply        /show /tools /help /quit

A bad line is explained and the reply typed again. The reply is sent like any other (streamed
when the step streams), so the harness validates it, runs the tools for real and asks again.
In s09/s11 the learner plays the lead; the other agents follow the demo's policy unless
`--play all`.

One keyboard, several readers: the REPL's prompt and every agent's call. `Keyboard` lets one
read at a time, and a waiting call goes before the REPL's next prompt.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import runpy
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from .demo import load_demo, save_trace, session_folders
from .page import AGENT_LABELS, agent_of
from .play_view import View
from .server import StandIn

HELP = """\
  reply syntax:
    @NAME {json}   a tool call, e.g. @bash {"command": "ls"}; several lines: parallel calls
    other lines    text
    empty line     send the reply (a reply without tool calls ends the turn: end_turn)
    /show          the full request, as JSON        /tools   the tool schemas
    /help          this help                        /quit    end the session"""
CALL = re.compile(r"@([\w-]+)\s*(.*)$")


class Quit(Exception):
    """The learner ended the session (/quit, or the end of the input)."""


class Abandoned(Exception):
    """The call being answered was interrupted (Ctrl-C): its reply goes nowhere."""


MAIN_THREAD_AGENTS = ("lead", "summary", "subagent")  # asked in the REPL's own turn


class Keyboard:
    """The one terminal, shared by the REPL's prompt and every agent's model call: one reads at
    a time, and a call waiting for the learner goes before the REPL's next prompt.

    Ctrl-C while the lead's call is asking ends the turn in the REPL, but that call is still
    reading: the REPL then marks it `abandoned`, and the line it reads is handed to the prompt."""

    def __init__(self, read: Callable[[str], str]):
        self.read = read
        self.turn = threading.Condition()
        self.calls_waiting = 0
        self.holder: str | None = None  # the agent whose call is reading, if one is
        self.abandoned = False
        self.handed: str | None = None
        self.quit = False

    @contextmanager
    def held(self, agent: str | None = None):
        """The keyboard for one model call (agent) or for the REPL's prompt (None)."""
        with self.turn:
            self.calls_waiting += agent is not None
            self.turn.wait_for(lambda: self.holder is None and
                               (agent is not None or not self.calls_waiting))
            self.calls_waiting -= agent is not None
            self.holder = agent or "the prompt"
        try:
            yield
        finally:
            with self.turn:
                self.holder = None
                self.turn.notify_all()

    def repl_input(self, prompt: str = "") -> str:
        """input() for the REPL: the end of the input once the learner has quit."""
        with self.turn:
            if self.holder in MAIN_THREAD_AGENTS:  # the REPL is back: that call was interrupted
                self.abandoned = True
                print(f"\n[play] that model call was interrupted; this line goes to the prompt"
                      f"\n{prompt}", end="", flush=True)
                self.turn.wait_for(lambda: self.holder is None)
                if self.handed is not None:
                    line, self.handed = self.handed, None
                    return line
        with self.held():
            if self.quit:
                raise EOFError
            line = self.read(prompt)
        if line.strip() == "/quit":  # play mode's /quit works at the prompt too
            raise EOFError
        return line

    def line_for(self, prompt: str) -> str:
        """One line for the model call holding the keyboard; Abandoned once the REPL took over."""
        line = self.read(prompt)
        with self.turn:
            if self.abandoned:
                self.abandoned, self.handed = False, line
                raise Abandoned
        return line


# -- Reading the reply ---------------------------------------------------------------------
def parse_call(line: str, tools: dict) -> dict:
    """A block for `@NAME {json}`; ValueError says what is wrong with the line."""
    found = CALL.match(line)
    if not found:
        raise ValueError("a tool call is @NAME {json}, e.g. @bash {\"command\": \"ls\"}")
    name, raw = found.groups()
    if name not in tools:
        raise ValueError(f"no tool {name!r}; the tools are: {', '.join(tools)}")
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except ValueError as error:
        raise ValueError(f"the arguments are not JSON ({error})") from None
    if not isinstance(arguments, dict):
        raise ValueError("the arguments must be a JSON object: {...}")
    required = (tools[name].get("input_schema") or {}).get("required") or []
    missing = [key for key in required if key not in arguments]
    if missing:
        raise ValueError(f"{name} needs {', '.join(missing)}: see /tools")
    return {"type": "tool_use", "name": name, "input": arguments}


def command(line: str, request: dict) -> str | None:
    """What a /command prints; None for a line that is not one."""
    if line == "/help":
        return HELP
    if line == "/show":
        return json.dumps(request, indent=2, ensure_ascii=False)
    if line == "/tools":
        return json.dumps(request.get("tools") or [], indent=2, ensure_ascii=False)
    return None


class Player:
    """The stand-in's policy in play mode: asks the learner for the agents they play."""

    def __init__(self, keyboard: Keyboard, others: Callable | None, play_all: bool, team: bool):
        self.keyboard = keyboard
        self.team = team  # a step with teammates: every call says which agent asks
        self.others = others  # the demo's policy, for the agents the learner does not play
        self.play_all = play_all or others is None
        self.views: dict = {}
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> list:
        agent = agent_of(request)
        if not (self.play_all or agent == "lead"):
            try:
                return self.others(request)
            except Exception as error:  # the demo's script has no answer here: the learner has
                print(f"[play] the demo's script cannot answer {agent} ({error}): you play it.")
        with self.lock:
            self.count += 1
            number = self.count
            view = self.views.setdefault(agent, View())
        with self.keyboard.held(agent):
            label = f" · {agent}" if self.team or agent != "lead" else ""
            print(f"--- model call {number}{label} " + "-" * 40, flush=True)
            print("\n".join(view.news(request)), flush=True)
            try:
                return self.reply(request)
            except Quit:
                self.keyboard.quit = True
                return ["(the learner ended play mode)"]
            except Abandoned:
                return ["(interrupted)"]

    def reply(self, request: dict) -> list:
        tools = {t["name"]: t for t in request.get("tools") or []}
        print("your reply (@tool {json} is a call, other lines text, an empty line sends; "
              "/help):", flush=True)
        blocks: list = []
        while True:
            try:
                typed = self.keyboard.line_for("  > ").rstrip()  # text keeps its indentation
            except EOFError:
                raise Quit from None
            line = typed.strip()
            if line == "/quit":
                raise Quit
            if not line and blocks:
                return blocks
            if not line:
                print("  (type a reply first; an empty line sends it)", flush=True)
            elif command(line, request) is not None:
                print(command(line, request), flush=True)
            elif not line.startswith("@"):
                text = blocks.pop() + "\n" if blocks and isinstance(blocks[-1], str) else ""
                blocks.append(text + typed)
            else:
                try:
                    blocks.append(parse_call(line, tools))
                except ValueError as problem:
                    print(f"  ! {problem}. Type the whole reply again.", flush=True)
                    blocks = []


# -- The session ----------------------------------------------------------------------------
PLAY_BANNER = """\
======================================================================
 PLAY MODE - you are the model. The step's REPL runs for real in
 {workdir}; each of its model calls is sent to the stand-in at {url},
 which shows what the model receives and asks you for the reply.
 {who}
 /help shows the reply syntax; /quit ends.
======================================================================"""


def run_play(script_path: str, play_all: bool, seeded: bool, trace: str | None) -> int:
    """The step's own main() with the learner as the model: in the current folder, or (seeded)
    in a temporary folder set up like the demo's. Returns an exit code."""
    script = Path(script_path).resolve()
    demo = load_demo(script) if (script.parent / "demos" / f"{script.stem}.py").exists() else None
    team = any(label == "{name}" and script.stem in steps for label, steps in AGENT_LABELS.values())
    keyboard = Keyboard(builtins.input)
    player = Player(keyboard, getattr(demo, "policy", None), play_all, team)
    others = [label for label, steps in AGENT_LABELS.values() if script.stem in steps]
    who = "You answer every model call." if play_all or not others else \
        f"You play the {'lead' if team else 'agent'}; " \
        f"{'teammates' if team else f'the {others[0]} calls'} follow the demo's script\n " \
        "(--play all: you answer them too)."
    saved = dict(os.environ), os.getcwd(), builtins.input, sys.argv
    with StandIn(player) as server, \
            tempfile.TemporaryDirectory(prefix=f"{script.stem}-play-") as tmp:
        workdir = Path(tmp).resolve() if seeded else Path.cwd()
        print(PLAY_BANNER.format(workdir=workdir, url=server.url, who=who), flush=True)
        namespace: dict = {}
        try:
            os.chdir(workdir)
            os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)
            os.environ.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="offline-play")
            if seeded and hasattr(demo, "setup"):
                demo.setup(workdir)
            namespace = runpy.run_path(str(script), run_name="offline_play")
            builtins.input, sys.argv = keyboard.repl_input, [str(script)]
            namespace["main"]()  # the step's own setup and cleanup, as with a key
        finally:
            os.environ.clear()
            os.environ.update(saved[0])
            os.chdir(saved[1])
            builtins.input, sys.argv = saved[2], saved[3]
        written = trace and save_trace(Path(saved[1], trace), server.calls, workdir,
                                       title=f"{script.stem} (played)",
                                       **session_folders(namespace))
    print(f"[play] {len(server.calls)} model calls answered; "
          f"{len(server.rejected)} rejected by the validator.")
    for _, problem in server.rejected:
        print(f"[play] rejected: {problem}")
    if written:
        print(f"[play] trace written to {Path(saved[1], trace)} (and the calls as JSON beside it)")
    return 1 if server.rejected or trace and not written else 0
