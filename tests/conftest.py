"""Shared test fixtures: the local Messages API and three ways to run a step.

- `standin`: a fresh stand-in server per test (agents/offline/). Script it with
  `standin.policy = ScriptedModel([...])`; inspect `standin.requests` / `standin.rejected`.
- `run_step(name, stdin)`: the script as a learner runs it - a subprocess whose
  ANTHROPIC_BASE_URL is the stand-in - in a fresh working folder. Each costs a second or two
  (the SDK's import): keep it for what needs a process (the REPL at a terminal, Ctrl-C,
  --worker, a copy of a script alone); `offline_demo(step)` runs each demo once per session.
- `run_in_process(name, stdin)`: the same run as the script's main() in this process (argv,
  cwd, environment and a piped stdin patched), for everything else end to end.
- `load_step(name)`: the script imported in-process (cwd = a fresh folder), for unit tests.

No test talks to the internet: every ANTHROPIC_* variable is removed, and the SDK's
config folder points into a temp folder.
"""

import contextlib
import functools
import importlib
import importlib.util
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    # the demo lock shared by xdist workers (POSIX); elsewhere each worker runs its own
    import fcntl
except ImportError:
    fcntl = None

REPO = Path(__file__).resolve().parent.parent
AGENTS = REPO / "agents"
sys.path.insert(0, str(AGENTS))  # so tests can `import offline`

from offline import StandIn, scripted_input  # noqa: E402

STEPS = sorted(p.stem for p in AGENTS.glob("s[0-9][0-9]_*.py"))


def share_one_tls_context():
    """Each step makes its SDK client at import, and each client's HTTP transport loads the
    system's CA certificates into a new TLS context: about 50 ms, paid by every test that imports
    a step (hundreds). The tests talk plain HTTP to 127.0.0.1, where no context is ever used, so
    in this process the transports share one context per set of arguments. (A no-op for an HTTP
    library that builds its context elsewhere: the suite is then only slower.)"""
    for name in ("httpx2._transports.default", "httpx._transports.default"):
        try:
            transports = importlib.import_module(name)
        except ImportError:
            continue
        build = getattr(transports, "create_ssl_context", None)
        if build is not None and not hasattr(build, "shared"):
            transports.create_ssl_context = shared_contexts(build)


def shared_contexts(build):
    cached = functools.lru_cache(maxsize=None)(build)

    def create_ssl_context(*args, **kwargs):
        try:
            return cached(*args, **kwargs)
        except TypeError:  # an argument that cannot be a key (a dict): a context of its own
            return build(*args, **kwargs)

    create_ssl_context.shared = True
    return create_ssl_context


share_one_tls_context()


def pytest_configure(config):
    """Ctrl-C reaches the tests however the suite was started.

    A background job (`pytest &` in a non-interactive shell) starts with SIGINT ignored, and an
    ignored signal stays ignored in every child, through fork and exec; Python then does not even
    install its KeyboardInterrupt handler. The Ctrl-C tests (in this process, and in a step started
    as a subprocess) would see nothing. So each pytest process - the xdist workers too - takes back
    the handler a terminal gives it. A caught signal is reset to the default at exec, so every child
    then starts as from a terminal: the subprocess tests need no preexec_fn or wrapper."""
    if (
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        and threading.current_thread() is threading.main_thread()
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The suite runs on every core when pytest-xdist is installed and no -n was given (pass -n 0
    to run it in one process, e.g. to debug a test); without xdist it runs in one process, where
    a fixed `-n auto` in pytest.ini would refuse to start."""
    if getattr(config.option, "numprocesses", "") is None and not hasattr(config, "workerinput"):
        config.option.numprocesses = "auto"


collect_ignore = ["bench"]  # tests/bench/: benchmarks run by hand, never collected


def pytest_collection_modifyitems(items):
    """The tests that start processes (the demos above all) go first, the quick in-process
    ones after them: the workers share the slow ones from the start, and the quick ones fill in
    at the end, instead of one worker finishing a long demo while the other idles."""
    def starts_processes(item) -> bool:
        return bool({"offline_demo", "run_step"} & set(getattr(item, "fixturenames", ())))

    items.sort(key=lambda item: not starts_processes(item))  # stable: otherwise as collected


def wait_until(condition, timeout: float = 30.0) -> bool:
    """Poll `condition` until it holds or the deadline passes; the result says which.

    The deadline only guards against a hang: it costs nothing while the condition comes true, so
    it is generous (a busy machine may be many times slower than yours)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


PROCESSES = multiprocessing.get_context(
    "fork" if hasattr(os, "fork") else "spawn"
)  # for races between processes


def run_processes(target, args_for, count: int = 8) -> list:
    """Start `count` processes of target(*args_for(n), results) at once; return what each put
    in results."""
    results = PROCESSES.Queue()
    procs = [PROCESSES.Process(target=target, args=(*args_for(n), results)) for n in range(count)]
    for proc in procs:
        proc.start()
    collected = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    return collected


@pytest.fixture(autouse=True)
def offline_env(monkeypatch, tmp_path_factory):
    for key in list(os.environ):
        if key.startswith("ANTHROPIC_") or key == "MODEL_ID":
            monkeypatch.delenv(key)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path_factory.mktemp("anthropic-config")))


# s, only against a hang: a demo takes 3 s (s11: 16 s); tests/bench/bench_demos.py times them
DEMO_TIMEOUT = 300


@dataclass
class DemoRun:
    done: subprocess.CompletedProcess
    seconds: float
    left_behind: list  # whatever the demo created in the folder it was started from
    trace: Path  # the page the demo wrote with --trace


@pytest.fixture(scope="session")
def offline_demo(tmp_path_factory):
    """`offline_demo(step)`: the step run with no credentials, as a learner first runs it.

    Each demo runs once per test session, also across xdist workers: the cross-cutting checks,
    the step's own test and the trace tests all read the same run. The first worker that needs a
    demo runs it under a file lock and leaves the result as JSON in the folder all workers share
    (the parent of each worker's basetemp, a folder of this run's own); the others wait on the
    lock and read it.
    """
    runs = {}
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in xdist workers only
    shared = None
    if run_id and fcntl:
        shared = tmp_path_factory.getbasetemp().parent / f"demos-{run_id}"
        shared.mkdir(exist_ok=True)

    def run(step: str) -> DemoRun:
        if step not in runs:
            runs[step] = run_demo(step) if shared is None else run_demo_once(step)
        return runs[step]

    def run_demo_once(step: str) -> DemoRun:
        record = shared / f"{step}.json"
        with open(shared / f"{step}.lock", "w") as lock:
            fcntl.flock(
                lock, fcntl.LOCK_EX
            )  # held while another worker runs this demo; freed if it dies
            if not record.exists():
                demo = run_demo(step)
                done = demo.done
                partial = record.with_suffix(".partial")
                partial.write_text(
                    json.dumps(
                        {
                            "args": done.args,
                            "returncode": done.returncode,
                            "stdout": done.stdout,
                            "stderr": done.stderr,
                            "seconds": demo.seconds,
                            "left_behind": demo.left_behind,
                            "trace": str(demo.trace),
                        }
                    ),
                    encoding="utf-8",
                )
                os.replace(partial, record)
                return demo
        saved = json.loads(record.read_text(encoding="utf-8"))
        done = subprocess.CompletedProcess(
            saved["args"], saved["returncode"], saved["stdout"], saved["stderr"]
        )
        return DemoRun(done, saved["seconds"], saved["left_behind"], Path(saved["trace"]))

    def run_demo(step: str) -> DemoRun:
        cwd, trace = (
            tmp_path_factory.mktemp(f"demo-{step}"),
            tmp_path_factory.mktemp(f"trace-{step}") / "run.html",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        env.update(
            PYTHONUNBUFFERED="1",
            PYTHONIOENCODING="utf-8",
            ANTHROPIC_CONFIG_DIR=str(tmp_path_factory.mktemp("anthropic-config")),
        )
        command = [sys.executable, str(AGENTS / f"{step}.py"), "--trace", str(trace)]
        started = time.monotonic()
        try:
            done = subprocess.run(
                command,
                text=True,
                encoding="utf-8",
                capture_output=True,
                cwd=cwd,
                env=env,
                timeout=DEMO_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except (
            subprocess.TimeoutExpired
        ) as hung:  # a result all the same, so no other worker waits for it again
            out, err = (
                s.decode("utf-8", "replace") if isinstance(s, bytes) else s or ""
                for s in (hung.stdout, hung.stderr)
            )
            done = subprocess.CompletedProcess(
                command,
                -9,
                out,
                err  # -9: killed, as run() does on a timeout
                + f"\n[conftest] the demo was killed after its {DEMO_TIMEOUT}s timeout",
            )
        return DemoRun(
            done, time.monotonic() - started, sorted(p.name for p in cwd.iterdir()), trace
        )

    return run


@pytest.fixture
def standin():
    with StandIn() as server:
        yield server


@pytest.fixture
def workdir(tmp_path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder.resolve()


def step_env(server: StandIn, extra: dict) -> dict:
    """The environment of a step under test; a value of None removes that variable."""
    env = dict(
        os.environ,
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="test-key",
        PYTHONUNBUFFERED="1",
        PYTHONIOENCODING="utf-8",
    )
    env.update(extra)
    return {key: value for key, value in env.items() if value is not None}


@pytest.fixture
def run_step(standin, workdir):
    """Run agents/<name>.py as a subprocess with `stdin` typed at its prompt."""

    def run(name: str, stdin: str = "", args=(), env=None, cwd=None, timeout=60, script=None):
        script = script or AGENTS / f"{name}.py"
        full_env = step_env(standin, env or {})
        return subprocess.run(
            [sys.executable, str(script), *args],
            input=stdin,
            text=True,
            encoding="utf-8",
            capture_output=True,
            cwd=cwd or workdir,
            env=full_env,
            timeout=timeout,
        )

    return run


CONFIG_VARIABLES = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "MODEL_ID")


def import_fresh(path: Path, folder: Path, monkeypatch, env: dict):
    """The script at `path` imported as a fresh module from `folder`, the way `python path` in
    that folder starts: its configuration variables are `env`'s (None or absent: unset), and
    whatever its configuration puts into os.environ (a .env) is undone after the test."""
    monkeypatch.chdir(folder)
    for key in CONFIG_VARIABLES:
        monkeypatch.setenv(key, "")  # remembered as it was, so the undo removes a dotenv value
        monkeypatch.delenv(key)
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location(f"fresh_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def piped_input(text: str):
    """input() as it behaves on a piped stdin holding `text`: it writes the prompt, returns the
    next line without echoing it, and raises EOFError at the end."""
    lines = deque(text.splitlines())

    def read(prompt: str = "") -> str:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        if not lines:
            raise EOFError
        return lines.popleft()

    return read


@contextlib.contextmanager
def as_a_process_writes_stderr(monkeypatch):
    """Print on stderr (capsys's, while a test captures) what the script's own process would,
    and pytest otherwise takes for its report: warnings, log records from WARNING up (Python's
    last resort handler), and the traceback of an exception that ends a thread."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            yield
    finally:
        logging.getLogger().removeHandler(handler)
        for w in caught:
            sys.stderr.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))


@pytest.fixture
def run_in_process(standin, request, monkeypatch, capsys):
    """`run_step`'s twin for runs where a process adds nothing: `python agents/<name>.py ARGS`
    with `stdin` piped in, as the script's main() in this process (a fresh import, argv, cwd and
    environment patched; a value of None in `env` removes a variable; keyed=False: no key and no
    stand-in, as a learner without a key). Returns a CompletedProcess: the exit code main()
    gave, and what it printed. Keep subprocesses for what needs a process: the REPL as typed at
    a terminal, Ctrl-C, --worker, a copy of a script alone."""

    def run(name: str, stdin: str = "", args=(), env=None, cwd=None, keyed=True):
        script = AGENTS / f"{name}.py"
        base = {"ANTHROPIC_BASE_URL": standin.url, "ANTHROPIC_API_KEY": "test-key"}
        folder = cwd or request.getfixturevalue("workdir")  # made only when it is the one
        module = import_fresh(script, folder, monkeypatch, {
            **(base if keyed else {}), **(env or {})})
        monkeypatch.setattr(sys, "argv", [str(script), *args])
        monkeypatch.setattr("builtins.input", piped_input(stdin))
        capsys.readouterr()  # what came before is not this run's
        with as_a_process_writes_stderr(monkeypatch):
            code = 0
            try:
                module.main()
            except SystemExit as stopped:
                code = stopped.code
        printed = capsys.readouterr()
        err = printed.err
        if isinstance(code, str):  # as the interpreter does with SystemExit("message")
            err, code = err + code + "\n", 1
        return subprocess.CompletedProcess(sys.argv, code or 0, printed.out, err)

    return run


def user(text: str) -> dict:
    """A user message of one text block, as add_user_text stores it."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def code_of(refusal: Exception) -> str:
    """The code a board's refusal starts with: NOT_FOUND for "NOT_FOUND: there is no task 9"."""
    return str(refusal).partition(":")[0]


def load_script(name: str, module_name: str):
    """agents/<name>.py executed as a module of its own, called `module_name`."""
    spec = importlib.util.spec_from_file_location(module_name, AGENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_step(standin, workdir, monkeypatch):
    """Import agents/<name>.py as a fresh module whose WORKDIR is `workdir`."""

    def load(name: str):
        monkeypatch.chdir(workdir)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", standin.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        return load_script(name, f"{name}_{uuid.uuid4().hex}")

    return load


@pytest.fixture
def type_lines(monkeypatch):
    """Feed lines to input() for an in-process REPL; EOF after the last one."""

    def feed(*lines: str):
        monkeypatch.setattr("builtins.input", scripted_input(list(lines)))

    return feed


def replay_a_quirk(agent, standin, type_lines, capsys, quirk: str, ends_turn: bool):
    """Run the REPL on a reply quirk sent twice (ids are reused too), then a plain answer.

    Returns what was printed, the tool results and the tool_use ids of the last request.
    `ends_turn`: the quirk holds no call, so each time it ends the turn by itself."""
    from offline import QUIRKS, ScriptedModel, tool_use

    call = tool_use("bash", {"command": "echo ran-$((20 + 22))"})
    turns = [QUIRKS[quirk](call), ["first done"], QUIRKS[quirk](call), ["answered second"]]
    if ends_turn:
        turns = [QUIRKS[quirk](call), QUIRKS[quirk](call), ["answered third"]]
    standin.policy = ScriptedModel(turns)
    type_lines("first", "second", *(["third"] if ends_turn else []))
    agent.repl()
    sent = standin.requests[-1]["messages"]
    blocks = [b for m in sent if isinstance(m["content"], list) for b in m["content"]]
    results = [b for b in blocks if b["type"] == "tool_result"]
    ids = [b["id"] for b in blocks if b["type"] == "tool_use"]
    return capsys.readouterr().out, results, ids
