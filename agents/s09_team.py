#!/usr/bin/env python3
"""s09_team.py - teammates, JSONL mailboxes and request/response protocols.

One agent works alone. A team adds teammates: agents with their own system
prompt, model and history, each running in a background thread. A team is not
a chat room; it is a few plain files and one loop per teammate:

    .team.json                        who the teammates are (shared by all sessions)
    .mailbox/<session>/main.jsonl     the lead's mailbox: one JSON line per message
    .mailbox/<session>/reviewer.jsonl a teammate's mailbox

     lead ("main", the REPL)                     teammate "reviewer" (a thread)
    +------------------------+   request id=42    +--------------------------+
    | team_review, team_send | -> reviewer.jsonl  | waits for mail, runs its |
    |                        |                    | own agent loop, answers  |
    | new mail joins the     | <- main.jsonl      | with respond(42)         |
    | next model request     |   response         |                          |
    +------------------------+   in_reply_to=42   +--------------------------+

A request has an id; its answer carries in_reply_to = that id. The protocols
plan_approval and shutdown ride inside the content as JSON. Every append takes
a cross-process lock and writes one whole line, so threads and processes can
share a mailbox; readers keep a byte offset per cursor instead of re-reading.

Key insight: agents coordinate through files and ids, not through each other's
memory - the lead reads its teammates' answers from a mailbox like anyone else.

Run:  python agents/s09_team.py           (offline demo when no key is set)
      python agents/s09_team.py --demo    (force the offline demo)
      In the REPL: /team list, /team spawn <name>, /team send <name> <message>, /inbox
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from anthropic import Anthropic, APIError
from dotenv import load_dotenv

# -- Configuration ------------------------------------------------------------
load_dotenv(".env")  # the current folder's .env; shell variables win

WORKDIR = Path.cwd()
MODEL = os.getenv("MODEL_ID") or "claude-sonnet-5-5"
API_KEY = os.getenv("ANTHROPIC_API_KEY") or None
AUTH_TOKEN = os.getenv("ANTHROPIC_AUTH_TOKEN") or None
BASE_URL = os.getenv("ANTHROPIC_BASE_URL") or None
MAX_TOKENS = 8000
BASH_TIMEOUT = 60  # seconds
OUTPUT_LIMIT = 50_000  # characters of tool output sent back to the model

# Credentials are passed explicitly, so the SDK never guesses (and never warns).
# With none at all there is no client: main() runs the offline demo instead.
client = Anthropic(api_key=API_KEY, auth_token=AUTH_TOKEN, base_url=BASE_URL) if API_KEY or AUTH_TOKEN else None

SYSTEM = (
    f"You are a coding agent working in {WORKDIR}. "
    "Use the tools to inspect and change files; act, then report briefly."
    " You lead a team: team_register defines a teammate, team_spawn starts it, team_send and"  # s09: lead a team
    " team_review ask it. Teammates answer through your mailbox; their messages reach you"  # s09: lead a team
    " with your next request."  # s09: lead a team
)


# -- Base tools -----------------------------------------------------------------
def safe_path(relative: str) -> Path:
    """Resolve a path inside WORKDIR; refuse anything that leaves it."""
    path = (WORKDIR / relative).resolve()  # resolve() follows symlinks too
    if not path.is_relative_to(WORKDIR.resolve()):
        raise ValueError(f"Path {relative!r} is outside the workspace {WORKDIR}")
    return path


def clip(text: str) -> str:
    """Cap tool output so one huge result cannot flood the context."""
    if len(text) <= OUTPUT_LIMIT:
        return text
    cut = len(text) - OUTPUT_LIMIT
    return text[:OUTPUT_LIMIT] + f"\n... [output truncated: {cut:,} more characters]"


def kill_tree(process: subprocess.Popen) -> None:
    """Kill the shell and everything it started (a plain kill leaves children running)."""
    try:
        if os.name == "posix":
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except ProcessLookupError:
        pass  # it had already finished


def run_bash(command: str) -> str:
    process = subprocess.Popen(
        command, shell=True, cwd=WORKDIR, text=True, encoding="utf-8", errors="replace",
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a timeout can kill it all
    )
    try:
        output, _ = process.communicate(timeout=BASH_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill_tree(process)
        process.communicate()
        raise TimeoutError(f"bash timed out after {BASH_TIMEOUT}s; the command was killed")
    except KeyboardInterrupt:  # Ctrl-C must not leave the command running either
        kill_tree(process)
        raise
    output = output.strip() or "(no output)"
    if process.returncode != 0:
        output += f"\n[exit code {process.returncode}]"
    return clip(output)


def run_read(path: str, limit: int | None = None) -> str:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of lines, got {limit}")
    lines = safe_path(path).read_text(encoding="utf-8").splitlines()
    if limit is not None and limit < len(lines):
        lines = lines[:limit] + [f"... [{len(lines) - limit} more lines]"]
    return clip("\n".join(lines))


def run_write(path: str, content: str) -> str:
    target = safe_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return f"Wrote {len(content)} characters to {path}"


def run_edit(path: str, old_text: str, new_text: str) -> str:
    target = safe_path(path)
    text = target.read_text(encoding="utf-8")
    count = text.count(old_text) if old_text else 0
    if count == 0:
        raise ValueError(f"old_text not found in {path}; read the file and copy the text exactly")
    if count > 1:
        raise ValueError(f"old_text appears {count} times in {path}; include more context so it is unique")
    target.write_text(text.replace(old_text, new_text, 1), encoding="utf-8")
    return f"Edited {path}"


# -- s09: teammates, JSONL mailboxes and request/response protocols --------------
# A team is four plain parts: who the teammates are (.team.json), how a message
# reaches one (an append-only JSONL mailbox per agent), how a request finds its
# answer (an id and an in_reply_to), and one loop per teammate that reads its
# mailbox. The lead ("main") talks to teammates through the same files.
import contextlib
import re
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone

if os.name == "nt":
    import msvcrt
else:
    import fcntl


# --- cross-process helpers (the same two as in s07) -----------------------------
@contextlib.contextmanager
def file_lock(lock_path: Path):
    """Hold an exclusive lock on lock_path; it excludes other threads and other processes."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as handle:  # a fresh handle per holder, so threads exclude each other too
        if os.name == "nt":
            handle.seek(0)
            while True:  # LK_LOCK gives up after ~10 s; a busy board is a reason to wait, not to fail
                try:
                    msvcrt.locking(handle.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    continue
        else:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if os.name == "nt":
                handle.seek(0)
                msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
            else:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_json_atomic(path: Path, data) -> None:
    """Readers see the old file or the new one, never half of one (even after a crash)."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


# --- who the teammates are: .team.json ------------------------------------------
AGENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
LEAD = "main"  # the REPL's own mailbox
TEAM_TIMEOUT = 120  # seconds team_review / team_shutdown wait for an answer


def check_name(name, what: str = "agent name") -> str:
    """Names become file names, so only a safe alphabet gets through."""
    if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        raise ValueError(f"invalid {what} {name!r}: use 1-64 letters, digits, '_' or '-'")
    return name


class TeamFileError(Exception):
    """.team.json exists but cannot be used; we refuse to overwrite it."""


class TeammateManager:
    """Teammate definitions in .team.json, shared by every session of the workspace."""

    def __init__(self, path: Path):
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")  # .team.json itself gets replaced

    def _load(self) -> dict:
        if not self.path.exists():
            return {"teammates": {}}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise TeamFileError(f"{self.path} is corrupt ({error}); fix or move it, it is left as is")
        if not isinstance(data, dict) or not isinstance(data.get("teammates"), dict):
            raise TeamFileError(f'{self.path} is not {{"teammates": {{...}}}}; fix or move it')
        return data

    def register(self, name: str, role: str, system_prompt: str, model: str | None = None) -> dict:
        check_name(name, "teammate name")
        if name == LEAD:
            raise ValueError(f"{LEAD!r} is the lead's own mailbox; pick another name")
        for field, value in (("role", role), ("system_prompt", system_prompt)):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{field} must be a non-empty string")
        entry = {"name": name, "role": role.strip(), "system_prompt": system_prompt.strip()}
        if model:
            entry["model"] = str(model)
        with file_lock(self.lock_path):
            data = self._load()  # re-read inside the lock: another session may have written
            data["teammates"][name] = entry
            write_json_atomic(self.path, data)
        return entry

    def get(self, name: str) -> dict:
        teammates = self._load()["teammates"]
        if name not in teammates:
            known = ", ".join(sorted(teammates)) or "none yet"
            raise LookupError(f"no teammate named {name!r} (registered: {known})")
        return teammates[name]

    def list(self) -> list[dict]:
        return sorted(self._load()["teammates"].values(), key=lambda t: t["name"])

    def remove(self, name: str) -> None:
        with file_lock(self.lock_path):
            data = self._load()
            if data["teammates"].pop(name, None) is None:
                raise LookupError(f"no teammate named {name!r}")
            write_json_atomic(self.path, data)


# --- how a message reaches an agent: one JSONL mailbox each ---------------------
MSG_TYPES = ("request", "response", "broadcast", "message")


@dataclass(kw_only=True)
class Message:
    id: str = ""  # filled in by send() when empty
    from_agent: str
    to_agent: str
    content: str
    msg_type: str = "message"
    timestamp: str = ""  # ISO-8601 UTC, filled in by send() when empty
    in_reply_to: str | None = None

    def check(self) -> None:
        check_name(self.from_agent, "from_agent")
        check_name(self.to_agent, "to_agent")
        if self.msg_type not in MSG_TYPES:
            raise ValueError(f"msg_type {self.msg_type!r} is not one of {', '.join(MSG_TYPES)}")
        if not isinstance(self.content, str) or not self.content.strip():
            raise ValueError("content must be a non-empty string")

    @classmethod
    def from_json(cls, line: bytes) -> "Message":
        data = json.loads(line)
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


class MessageBus:
    """One append-only JSONL mailbox per agent: <root>/<agent>.jsonl.

    root is .mailbox/<session-id>, so two REPL sessions never see each other's traffic.
    Writers append one whole line under a cross-process lock; readers never lock:
    they read complete lines and leave a line without its newline for next time.
    """

    POLL_SECONDS = 0.05  # how often a waiter looks for writes from other processes

    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock = threading.Lock()  # guards the caches below
        self._arrived = threading.Condition()  # senders in this process wake waiters at once
        self._where: dict[str, tuple[str, int, int]] = {}  # id -> (agent, line start, line end)
        self._indexed: dict[str, int] = {}  # agent -> bytes of complete lines indexed so far
        self._reader = threading.local()  # per thread: agent -> mailbox size at its last receive

    def mailbox(self, agent: str) -> Path:
        return self.root / f"{check_name(agent)}.jsonl"

    def create_mailbox(self, agent: str) -> None:
        """An empty mailbox, so broadcasts reach an agent before anyone wrote to it."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.mailbox(agent).touch()

    def agents(self) -> list[str]:
        """Every agent that has a mailbox in this session."""
        return sorted(p.stem for p in self.root.glob("*.jsonl") if AGENT_NAME.fullmatch(p.stem))

    def send(self, message: Message) -> Message:
        message.check()
        explicit_id = bool(message.id)
        message.id = message.id or uuid.uuid4().hex
        message.timestamp = message.timestamp or datetime.now(timezone.utc).isoformat()
        line = (json.dumps(asdict(message), ensure_ascii=False) + "\n").encode("utf-8")
        path = self.mailbox(message.to_agent)
        with file_lock(path.with_suffix(".lock")):
            if explicit_id and self.find_message(message.id) is not None:
                raise ValueError(f"message id {message.id!r} is already used in this session")
            with open(path, "ab", buffering=0) as handle:  # unbuffered: one write() per line
                handle.write(line)
        with self._arrived:
            self._arrived.notify_all()
        return message

    def receive(self, agent: str, since_id: str | None = None) -> list[Message]:
        """Messages after the cursor message (exclusive); since_id=None reads from the start."""
        start = 0 if since_id is None else self._offset_after(agent, since_id)
        messages, size = self._read_from(agent, start)
        self._sizes()[agent] = size  # what this thread has now seen (wait_for_message)
        return messages

    def wait_for_message(self, agent: str, timeout: float) -> bool:
        """Wait until agent's mailbox holds bytes this thread has not received; False on timeout."""
        deadline = time.monotonic() + timeout
        path = self.mailbox(agent)
        with self._arrived:
            while True:
                if self._size(path) > self._sizes().get(agent, 0):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # Sleeps until a send() in this process notifies us, or POLL_SECONDS pass
                # and we stat the file again (another process cannot notify us).
                self._arrived.wait(min(remaining, self.POLL_SECONDS))

    def find_message(self, msg_id: str) -> Message | None:
        with self._lock:
            where = self._where.get(msg_id)
        if where is None:  # maybe written since we last looked: index what is new
            for agent in self.agents():
                self._read_from(agent, self._indexed.get(agent, 0))
            with self._lock:
                where = self._where.get(msg_id)
        if where is None:
            return None
        agent, start, end = where
        with open(self.mailbox(agent), "rb") as handle:
            handle.seek(start)
            return Message.from_json(handle.read(end - start))

    def _offset_after(self, agent: str, msg_id: str) -> int:
        with self._lock:
            where = self._where.get(msg_id)
        if where is None:  # a cursor we have not read yet (e.g. written by another process)
            self._read_from(agent, self._indexed.get(agent, 0))
            with self._lock:
                where = self._where.get(msg_id)
        if where is None or where[0] != agent:
            # Returning [] here would make a poller wait forever for nothing.
            raise LookupError(f"unknown cursor {msg_id!r}: no such message in {agent}'s mailbox")
        return where[2]

    def _read_from(self, agent: str, start: int) -> tuple[list[Message], int]:
        """Parse the complete lines from byte `start`; remember where each one is."""
        path = self.mailbox(agent)
        try:
            with open(path, "rb") as handle:
                handle.seek(start)
                data = handle.read()
        except FileNotFoundError:
            return [], 0
        messages, places, offset = [], [], start
        for raw in data.split(b"\n")[:-1]:  # the last piece has no newline yet: skip it
            end = offset + len(raw) + 1
            try:
                message = Message.from_json(raw)
                messages.append(message)
                places.append((message.id, (agent, offset, end)))
            except (ValueError, TypeError, KeyError) as error:
                print(f"[mailbox] skipped a corrupt line in {path} at byte {offset}: {error}")
            offset = end
        with self._lock:
            self._where.update(places)
            self._indexed[agent] = max(self._indexed.get(agent, 0), offset)
        return messages, start + len(data)

    def _sizes(self) -> dict:
        if not hasattr(self._reader, "sizes"):
            self._reader.sizes = {}
        return self._reader.sizes

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0


# --- how a request finds its answer: ids, in_reply_to, protocols ----------------
PROTOCOLS = ("plan_approval", "shutdown")


def encode_protocol(protocol: str, content: str) -> str:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    return json.dumps({"protocol": protocol, "content": content}, ensure_ascii=False)


def decode_protocol(text: str) -> tuple[str | None, str]:
    """(protocol, body) for a protocol envelope; (None, text) for anything else."""
    try:
        data = json.loads(text)
    except ValueError:
        return None, text
    if isinstance(data, dict) and data.get("protocol") in PROTOCOLS and isinstance(data.get("content"), str):
        return data["protocol"], data["content"]
    return None, text


class ProtocolFSM:
    """Requests and answers for one agent.

    The state machine is per request: sent -> answered, and the only transition is a
    response whose in_reply_to is the request's id. The protocol travels with both.
    """

    def __init__(self, bus: MessageBus, agent: str):
        self.bus, self.agent = bus, check_name(agent)

    def request(self, to: str, protocol: str | None, content: str) -> str:
        body = content if protocol is None else encode_protocol(protocol, content)
        message = Message(from_agent=self.agent, to_agent=to, content=body, msg_type="request")
        return self.bus.send(message).id

    def respond(self, in_reply_to: str, content: str) -> str:
        original = self.bus.find_message(in_reply_to)
        if original is None:
            raise LookupError(f"cannot answer {in_reply_to!r}: no such message in this session")
        protocol, _ = decode_protocol(original.content)  # the answer speaks the same protocol
        body = content if protocol is None else encode_protocol(protocol, content)
        message = Message(from_agent=self.agent, to_agent=original.from_agent, content=body,
                          msg_type="response", in_reply_to=in_reply_to)
        return self.bus.send(message).id

    def broadcast(self, protocol: str, content: str) -> list[str]:
        body = encode_protocol(protocol, content)
        return [self.bus.send(Message(from_agent=self.agent, to_agent=agent, content=body,
                                      msg_type="broadcast")).id
                for agent in self.bus.agents() if agent != self.agent]

    def wait_response(self, msg_id: str, timeout: float) -> Message | None:
        deadline = time.monotonic() + timeout
        cursor = None
        while True:
            new = self.bus.receive(self.agent, since_id=cursor)
            for message in new:
                if message.msg_type == "response" and message.in_reply_to == msg_id:
                    return message
            cursor = new[-1].id if new else cursor
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.bus.wait_for_message(self.agent, remaining)


# --- teammates: one background loop per spawned teammate ------------------------
TEAMMATE_TOOLS = ("bash", "read_file", "write_file", "edit_file")  # managing the team stays with the lead
PLAN_REVIEW = ("Review the plan below. Start your answer with APPROVE or REJECT, "
               "then give one short reason.\n\nPlan:\n{plan}")


def teammate_turn(history: list, system: str, model: str) -> str:
    """agent_loop for a teammate: its own prompt, model and history, base tools, no printing."""
    tools = [tool for tool in TOOLS if tool["name"] in TEAMMATE_TOOLS]
    while True:
        response = client.messages.create(model=model, system=system, messages=history,
                                          tools=tools, max_tokens=MAX_TOKENS)
        history.append({"role": "assistant",
                        "content": [block.model_dump(exclude_none=True) for block in response.content]})
        if response.stop_reason != "tool_use":
            close_turn(history, f"not run: the reply ended with {response.stop_reason}")
            text = "\n".join(block.text for block in response.content if block.type == "text")
            return text.strip() or "(the teammate gave no text)"
        history.append({"role": "user", "content": [
            run_tool(block) if block.name in TEAMMATE_TOOLS else
            {"type": "tool_result", "tool_use_id": block.id, "is_error": True,
             "content": f"{block.name} is not a teammate tool; use {', '.join(TEAMMATE_TOOLS)}"}
            for block in response.content if block.type == "tool_use"]})


class TeammateLoop:
    """A spawned teammate: a thread that answers the requests in its mailbox."""

    def __init__(self, definition: dict, bus: MessageBus):
        self.name = definition["name"]
        self.model = definition.get("model") or MODEL
        self.system = (f"{definition['system_prompt']}\n\nYou are the teammate {self.name!r} "
                       f"({definition['role']}) working in {WORKDIR}. Your final text answer "
                       "is sent back to whoever asked.")
        self.fsm = ProtocolFSM(bus, self.name)
        self.history: list = []
        self.stopping = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        # Take the backlog now, in the spawning thread: what is already here was sent
        # "before it started", whatever the thread scheduler does next.
        backlog = self.fsm.bus.receive(self.name)
        self.fsm.bus.create_mailbox(self.name)
        self.thread = threading.Thread(target=self.run, args=(backlog,),
                                       name=f"teammate-{self.name}", daemon=True)
        self.thread.start()

    def is_running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def run(self, backlog: list[Message]) -> None:
        self.handle(self.unanswered(backlog))  # an old shutdown is not in there: not obeyed
        cursor = backlog[-1].id if backlog else None
        while not self.stopping:
            batch = self.fsm.bus.receive(self.name, since_id=cursor)
            if not batch:
                self.fsm.bus.wait_for_message(self.name, timeout=1.0)
                continue
            cursor = batch[-1].id
            self.handle(batch)

    def unanswered(self, backlog: list[Message]) -> list[Message]:
        """Old requests (not shutdowns) that no earlier run of this teammate answered."""
        requests = [m for m in backlog if m.msg_type == "request"
                    and decode_protocol(m.content)[0] != "shutdown"]
        answered = {reply.in_reply_to for sender in {m.from_agent for m in requests}
                    for reply in self.fsm.bus.receive(sender) if reply.from_agent == self.name}
        return [m for m in requests if m.id not in answered]

    def handle(self, batch: list[Message]) -> None:
        for message in batch:
            protocol, body = decode_protocol(message.content)
            if protocol == "shutdown" and message.msg_type != "response":
                reply = f"{self.name} is shutting down"
                self.stopping = True  # the rest of this batch only gets a polite no
            elif message.msg_type == "request":
                reply = "shutting down" if self.stopping else self.answer(message, protocol, body)
            else:
                continue  # responses, broadcasts and notes need no answer
            try:
                self.fsm.respond(message.id, reply)
            except (OSError, LookupError, ValueError) as error:  # e.g. the asker's mailbox is broken
                print(f"[{self.name}] could not answer {message.id}: {error}")

    def answer(self, message: Message, protocol: str | None, body: str) -> str:
        prompt = PLAN_REVIEW.format(plan=body) if protocol == "plan_approval" else \
            f"Request from {message.from_agent}:\n{body}"
        add_user_text(self.history, prompt)
        try:
            return teammate_turn(self.history, self.system, self.model)
        except Exception as error:  # one bad request must not kill the teammate
            close_turn(self.history, "the request failed")  # keep the history valid
            return f"error: {self.name} could not answer ({type(error).__name__}: {error})"


# --- the lead's side: team tools, its inbox, REPL commands ----------------------
SESSION_ID = datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
TEAM = TeammateManager(WORKDIR / ".team.json")
BUS = MessageBus(WORKDIR / ".mailbox" / SESSION_ID)  # nothing is created until first use
LEAD_FSM = ProtocolFSM(BUS, LEAD)
RUNNING: dict[str, TeammateLoop] = {}  # teammates spawned by this process


class LeadInbox:
    """main's mailbox as the lead reads it: a cursor, plus replies a tool already delivered."""

    def __init__(self, bus: MessageBus):
        self.bus, self.cursor, self.delivered = bus, None, set()

    def unread(self) -> list[Message]:
        return [m for m in self.bus.receive(LEAD, self.cursor) if m.id not in self.delivered]

    def take(self) -> list[Message]:
        new = self.bus.receive(LEAD, self.cursor)
        self.cursor = new[-1].id if new else self.cursor
        return [m for m in new if m.id not in self.delivered]


INBOX = LeadInbox(BUS)


def status_line(message: Message) -> str:
    protocol, body = decode_protocol(message.content)
    tag = f" [{protocol}]" if protocol else ""
    return f"Team {message.msg_type} from {message.from_agent}{tag}: {preview(body)}"


def deliver_team_news(messages: list) -> None:
    """Print main's new mail and add it to the next request, after any tool results."""
    try:
        news = INBOX.take()
    except (OSError, LookupError) as error:  # a broken mailbox must not end the REPL
        print(f"[team] cannot read the lead's mailbox: {error}")
        return
    lines = []
    for message in news:
        print(status_line(message))
        protocol, body = decode_protocol(message.content)
        reply = f", answering {message.in_reply_to}" if message.in_reply_to else ""
        lines.append(f"- {message.msg_type} {message.id} from {message.from_agent}"
                     f"{f' [{protocol}]' if protocol else ''}{reply}:\n{body}")
    if lines:
        add_user_text(messages, "New messages in your team mailbox:\n" + "\n".join(lines))


def is_running(name: str) -> bool:
    """Running in this process; another REPL's teammates are not visible here."""
    return name in RUNNING and RUNNING[name].is_running()


def running_teammate(name: str) -> TeammateLoop:
    if not is_running(check_name(name, "teammate name")):
        raise ValueError(f"{name} is not running in this session; team_spawn it first")
    return RUNNING[name]


def await_reply(name: str, request_id: str) -> str:
    reply = LEAD_FSM.wait_response(request_id, TEAM_TIMEOUT)
    if reply is None:
        raise TimeoutError(f"no answer from {name} within {TEAM_TIMEOUT}s; "
                           f"request {request_id} stays in its mailbox")
    INBOX.delivered.add(reply.id)  # this tool result carries it; do not repeat it as news
    return decode_protocol(reply.content)[1]


def run_team_register(name: str, role: str, system_prompt: str, model: str | None = None) -> str:
    entry = TEAM.register(name, role, system_prompt, model)
    return f"Registered teammate {entry['name']} ({entry['role']}) in {TEAM.path.name}"


def run_team_list() -> str:
    rows = []
    for teammate in TEAM.list():
        state = "running" if is_running(teammate["name"]) else "not running"
        model = f", model {teammate['model']}" if teammate.get("model") else ""
        rows.append(f"{teammate['name']} - {teammate['role']} [{state}{model}]")
    return "\n".join(rows) or "No teammates registered yet (use team_register)."


def run_team_spawn(name: str) -> str:
    definition = TEAM.get(check_name(name, "teammate name"))
    if is_running(name):
        raise ValueError(f"Teammate {name} is already running.")
    RUNNING[name] = TeammateLoop(definition, BUS)
    RUNNING[name].start()
    return f"Spawned {name}; it reads {BUS.mailbox(name).relative_to(WORKDIR)}"


def run_team_send(name: str, message: str) -> str:
    if name != LEAD:
        TEAM.get(check_name(name, "teammate name"))  # only registered teammates (or main)
    request_id = LEAD_FSM.request(name, None, message)
    idle = "" if name == LEAD or is_running(name) else f" ({name} is not running; it answers once spawned)"
    return f"Sent message {request_id} to {name}{idle}. Its answer will arrive in your inbox."


def run_team_review(name: str, plan: str) -> str:
    running_teammate(name)
    verdict = await_reply(name, LEAD_FSM.request(name, "plan_approval", plan))
    return f"{name}'s verdict: {verdict}"


def run_team_shutdown(name: str) -> str:
    loop = running_teammate(name)
    acknowledgement = await_reply(name, LEAD_FSM.request(name, "shutdown", "please stop"))
    loop.thread.join(timeout=TEAM_TIMEOUT)  # it ends right after answering its current batch
    return f"{name} acknowledged: {acknowledgement}"


def name_schema(**extra: dict) -> dict:
    properties = {"name": {"type": "string"}, **extra}
    return {"type": "object", "properties": properties, "required": list(properties)}


TEAM_TOOLS = [
    {"name": "team_register", "description": "Define or redefine a teammate (saved in .team.json).",
     "input_schema": {"type": "object", "properties": {
         "name": {"type": "string"}, "role": {"type": "string"},
         "system_prompt": {"type": "string"}, "model": {"type": "string"}},
         "required": ["name", "role", "system_prompt"]}},
    {"name": "team_list", "description": "List teammates and whether each runs in this session.",
     "input_schema": {"type": "object", "properties": {}}},
    {"name": "team_spawn", "description": "Start a registered teammate in the background.",
     "input_schema": name_schema()},
    {"name": "team_send", "description": "Send a teammate a request; returns its id at once. "
     "The answer arrives later as a message in your inbox.",
     "input_schema": name_schema(message={"type": "string"})},
    {"name": "team_review", "description": "Ask a running teammate to approve or reject a plan; "
     "waits for the verdict.", "input_schema": name_schema(plan={"type": "string"})},
    {"name": "team_shutdown", "description": "Ask a running teammate to stop; waits for its acknowledgement.",
     "input_schema": name_schema()},
]

TEAM_HANDLERS = {
    "team_register": lambda args: run_team_register(args["name"], args["role"], args["system_prompt"],
                                                    args.get("model")),
    "team_list": lambda args: run_team_list(),
    "team_spawn": lambda args: run_team_spawn(args["name"]),
    "team_send": lambda args: run_team_send(args["name"], args["message"]),
    "team_review": lambda args: run_team_review(args["name"], args["plan"]),
    "team_shutdown": lambda args: run_team_shutdown(args["name"]),
}


def team_command(arg: str, history: list) -> None:
    """/team list | /team spawn <name> | /team send <name> <message>"""
    action, _, rest = arg.partition(" ")
    name, _, text = rest.strip().partition(" ")
    try:
        if action == "list":
            print(run_team_list())
        elif action == "spawn" and name:
            print(run_team_spawn(name))
        elif action == "send" and name and text.strip():
            print(run_team_send(name, text.strip()))
        else:
            print("Usage: /team list | /team spawn <name> | /team send <name> <message>")
    except Exception as error:  # a typo must not end the REPL
        print(f"[team] {error}")


def inbox_command(arg: str, history: list) -> None:
    """/inbox: main's unread messages, left unread (the model still gets them next turn)."""
    try:
        unread = INBOX.unread()
    except (OSError, LookupError) as error:
        print(f"[team] cannot read the lead's mailbox: {error}")
        return
    for message in unread:
        print(status_line(message))
    if not unread:
        print("No unread team messages.")


# -- The tool table: what the model sees, and what runs ------------------------
TOOLS = [
    {"name": "bash", "description": "Run a shell command in the workspace.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                      "required": ["command"]}},
    {"name": "read_file", "description": "Read a text file; limit = max lines.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                      "limit": {"type": "integer"}}, "required": ["path"]}},
    {"name": "write_file", "description": "Create or overwrite a text file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                      "content": {"type": "string"}}, "required": ["path", "content"]}},
    {"name": "edit_file", "description": "Replace one exact, unique piece of text in a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                      "old_text": {"type": "string"}, "new_text": {"type": "string"}},
                      "required": ["path", "old_text", "new_text"]}},
    *TEAM_TOOLS,  # s09: register, list, spawn, send, review, shut down teammates
]

TOOL_HANDLERS = {
    "bash": lambda args: run_bash(args["command"]),
    "read_file": lambda args: run_read(args["path"], args.get("limit")),
    "write_file": lambda args: run_write(args["path"], args["content"]),
    "edit_file": lambda args: run_edit(args["path"], args["old_text"], args["new_text"]),
    **TEAM_HANDLERS,  # s09: the team tools
}

SLASH_COMMANDS = {"/team": team_command, "/inbox": inbox_command}  # s09: the team, for you

JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
              "array": list, "object": dict}


def check_args(name: str, args: dict) -> None:
    """Check arguments against the tool's schema; say what is wrong and what is allowed."""
    schema = next(tool["input_schema"] for tool in TOOLS if tool["name"] == name)
    properties = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in args]
    if missing:
        raise ValueError(f"missing required argument(s) {missing}; {name} takes {sorted(properties)}")
    for key, value in args.items():
        expected = properties.get(key, {}).get("type")
        if key not in properties:
            raise ValueError(f"unknown argument {key!r}; {name} takes {sorted(properties)}")
        wrong_bool = isinstance(value, bool) and expected in ("integer", "number")
        if expected in JSON_TYPES and (wrong_bool or not isinstance(value, JSON_TYPES[expected])):
            raise ValueError(f"argument {key!r} must be of type {expected}, got {type(value).__name__}")


def run_tool(block) -> dict:
    """Run one tool_use block; always return exactly one tool_result, errors included."""
    result = {"type": "tool_result", "tool_use_id": block.id}
    if block.name not in TOOL_HANDLERS:
        result.update(is_error=True, content=f"Unknown tool {block.name!r}. Available: {sorted(TOOL_HANDLERS)}")
        return result
    args = block.input if isinstance(block.input, dict) else {}
    try:
        check_args(block.name, args)
        result["content"] = TOOL_HANDLERS[block.name](args)
    except Exception as error:  # any failure becomes a result the model can read
        result.update(is_error=True, content=f"Error: {error}")
    return result


def preview(text: str, width: int = 200) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[:width] + "..."


# -- The agent loop ---------------------------------------------------------------
def agent_loop(messages: list) -> None:
    """Call the model, run the tools it asks for, repeat until it stops asking."""
    while True:
        deliver_team_news(messages)  # s09: teammates' mail joins the next request, after tool results
        response = client.messages.create(
            model=MODEL, system=SYSTEM, messages=messages,
            tools=TOOLS, max_tokens=MAX_TOKENS,
        )
        messages.append({"role": "assistant",
                         "content": [block.model_dump(exclude_none=True) for block in response.content]})
        for block in response.content:
            if block.type == "text":
                print(block.text)
        if response.stop_reason != "tool_use":
            close_turn(messages, f"not run: the reply ended with {response.stop_reason}")
            return
        results = []
        for block in response.content:
            if block.type == "tool_use":
                print(f"> {block.name}: {preview(json.dumps(block.input, ensure_ascii=False), 120)}")
                result = run_tool(block)
                print(f"  {'ERROR ' if result.get('is_error') else ''}{preview(result['content'])}")
                results.append(result)
        messages.append({"role": "user", "content": results})


def close_turn(messages: list, reason: str) -> None:
    """Answer every tool_use still open, so the next request is valid (API rule)."""
    last = messages[-1] if messages else None
    if last and last["role"] == "assistant" and isinstance(last["content"], list):
        open_ids = [b["id"] for b in last["content"] if b.get("type") == "tool_use"]
        if open_ids:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": reason, "is_error": True}
                for i in open_ids]})


def add_user_text(messages: list, text: str) -> None:
    """Append the user's words; join them to a trailing user turn so roles keep alternating."""
    if messages and messages[-1]["role"] == "user":
        last = messages[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"]}]
        last["content"].append({"type": "text", "text": text})
    else:
        messages.append({"role": "user", "content": text})


def run_slash_command(line: str, history: list) -> None:
    name, _, arg = line.partition(" ")
    command = SLASH_COMMANDS.get(name)
    if command:
        command(arg.strip(), history)
    else:
        print(f"Unknown command {name}. Available: {sorted(SLASH_COMMANDS) or 'none'}")


# -- The REPL ---------------------------------------------------------------------
def repl(prompt: str = "s09 >> ") -> None:  # s09: its own prompt
    history: list = []
    while True:
        try:
            query = input(prompt).strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return
        if query.lower() in ("", "q", "exit"):
            return
        try:
            if query.startswith("/"):
                run_slash_command(query, history)
            else:
                add_user_text(history, query)
                agent_loop(history)
        except KeyboardInterrupt:
            close_turn(history, "interrupted by the user")
            print("\n[turn interrupted; the conversation is kept]")
        except APIError as error:
            close_turn(history, "the turn failed with an API error")
            print(f"[API error] {type(error).__name__}: {getattr(error, 'message', error)}")
        print()


def main() -> None:
    if "--demo" in sys.argv or not (API_KEY or AUTH_TOKEN):
        try:
            import offline  # the local stand-in, only needed without credentials
        except ImportError:
            sys.exit("No ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN set, and the offline demo "
                     "(agents/offline.py) is not next to this script. Set a key in .env to run.")
        sys.exit(offline.run_demo(__file__))
    repl()


if __name__ == "__main__":
    main()
