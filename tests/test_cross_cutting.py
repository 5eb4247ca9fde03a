"""Checks every step inherits; new steps in agents/ are picked up automatically.

- base identity: each step names its base ("Base: s07_task_system.py"); the base's lines
  appear in the step unchanged except lines marked `# sNN: <why>`, and the step's own code
  sits in its docstring and its banner blocks ("# -- s09: ..."), so `diff -u base step` is
  the lesson; code-token budgets, and every function a step defines is used in it;
- docs parity: docs/en/<step>.md and docs/zh/<step>.md exist, with the same sections
  and the same code;
- snippet drift: every ```python block of a walkthrough appears verbatim in its script;
- standalone: a script imports only the standard library, anthropic and dotenv, and
  importing it has no side effects;
- offline demo: with no credentials it runs, exits 0 and leaves nothing behind (how long it takes
  is measured by tests/bench/bench_demos.py, not asserted: a loaded machine made that flaky).
"""

import ast
import difflib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

try:
    import fcntl  # the lock xdist workers share (POSIX)
except ImportError:
    fcntl = None

import pytest
from conftest import AGENTS, REPO, STEPS

SPINE = "s01_agent_loop"
MARK = re.compile(r"#\s*s\d\d:\s*\S")
TOTAL_TOKENS = {"s01_agent_loop": 1100}  # the spine, whole
OWN_TOKENS = {
    "s02_tool_use": 1800,
    "s03_todo": 950,
    "s04_subagent": 800,
    "s05_skills": 1000,
    "s06_compact": 1800,
    "s07_task_system": 3000,
    "s08_background": 1400,
    "s09_team": 2500,
    "s11_autonomous": 2000,
    "s12_worktree": 2000,
}  # what a step's diff against its base adds
# s07: 3,000, raised from DESIGN.md's 2,800 for the board that reuses what it read (issue 32).


def source(step: str) -> str:
    return (AGENTS / f"{step}.py").read_text(encoding="utf-8")


def base_of(step: str) -> str | None:
    """The base a script names in its docstring: 'Base: s07_task_system.py'."""
    found = re.search(r"Base: (s\d\d_\w+)\.py", ast.get_docstring(ast.parse(source(step))) or "")
    return found.group(1) if found else None


def lesson_lines(step: str, lines: list) -> set:
    """Indexes of the lines a step may add freely: its docstring and its own banner blocks."""
    tree = ast.parse("\n".join(lines))
    free = set(range(tree.body[0].lineno - 1, tree.body[0].end_lineno))  # the module docstring
    inside = False
    for i, line in enumerate(lines):
        if line.startswith("# -- "):
            inside = line.startswith(f"# -- {step[:3]}:")
        if inside:
            free.add(i)
    return free


def unmarked_changes(base: list, step: list, free: set = frozenset()) -> list:
    """Lines of `step` that differ from `base` outside the free lines, without a `# sNN:` mark."""
    problems = []
    matcher = difflib.SequenceMatcher(a=base, b=step, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            continue
        new = [j for j in range(b1, b2) if j not in free]
        firsts = [
            j for j in new if j - 1 not in new
        ]  # one mark per run of changed lines, on its first
        problems += [
            f"line {j + 1} changed without a mark: {step[j].strip()}"
            for j in firsts
            if not MARK.search(step[j])
        ]
        base_docstring = set(range(*_docstring_span(base)))
        gone = [base[i] for i in range(a1, a2) if i not in base_docstring]
        if op == "delete" or (
            op == "replace" and gone and not any(MARK.search(step[j]) for j in range(b1, b2))
        ):
            problems += [f"removed without a marked replacement: {line.strip()}" for line in gone]
    return problems


def _docstring_span(lines: list) -> tuple:
    try:
        first = ast.parse("\n".join(lines)).body[0]
    except (SyntaxError, IndexError):
        return (0, 0)
    return (first.lineno - 1, first.end_lineno) if isinstance(first, ast.Expr) else (0, 0)


LATER_STEPS = [s for s in STEPS if s != SPINE]


@pytest.mark.parametrize("step", LATER_STEPS)
def test_base_identity_the_diff_against_the_base_is_the_lesson(step):
    base = base_of(step)
    assert base in STEPS and base < step, f"{step} must name an earlier step as 'Base: sNN_name.py'"
    base_lines, step_lines = source(base).splitlines(), source(step).splitlines()
    problems = unmarked_changes(base_lines, step_lines, lesson_lines(step, step_lines))
    assert not problems, f"{step} differs from its base {base}:\n" + "\n".join(problems)


def test_the_spine_names_no_base_and_the_ladder_is_the_documented_one():
    assert "Base: none" in ast.get_docstring(ast.parse(source(SPINE)))
    expected = {
        "s02_tool_use": SPINE,
        "s03_todo": "s02_tool_use",
        "s04_subagent": "s02_tool_use",
        "s05_skills": "s02_tool_use",
        "s06_compact": "s02_tool_use",
        "s07_task_system": "s02_tool_use",
        "s08_background": "s02_tool_use",
        "s09_team": "s07_task_system",
        "s11_autonomous": "s09_team",
        "s12_worktree": "s07_task_system",
    }
    assert {step: base_of(step) for step in LATER_STEPS} == expected


def test_base_identity_check_can_fail():
    base = ["def f():", "    return 1"]
    assert unmarked_changes(base, base) == []
    assert unmarked_changes(base, ["def f():", "    return 2"]) != []
    assert unmarked_changes(base, ["def f():", "    return 2  # s03: why"]) == []
    assert unmarked_changes(base, ["def f():"]) != []
    assert unmarked_changes(base, ["def f():", "    x = 1", "    return 1"]) != []
    assert unmarked_changes(base, ["def f():", "    x = 1", "    return 1"], free={1}) == []
    assert (
        unmarked_changes(base, ["def f():", "    x = 1  # s03: why", "    return 2"]) == []
    )  # one run
    assert unmarked_changes(base, ["def f():", "    x = 1", "    return 2  # s03: why"]) != []


SKIPPED = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


def code_tokens(text: str, lines: set | None = None) -> int:
    """Python's own tokens of the code (the module docstring, comments and layout do not
    count, so joining lines gains nothing); only those on `lines` (1-based) when given.
    An f-string counts as one token, as Python 3.11's tokenizer reads it."""
    first = ast.parse(text).body[0]
    doc = range(first.lineno, first.end_lineno + 1) if isinstance(first, ast.Expr) else range(0)
    count = 0
    depth = 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        kind = tokenize.tok_name[token.type]
        if kind == "FSTRING_START":
            depth += 1
        if depth:
            depth -= kind == "FSTRING_END"
            count += kind == "FSTRING_END" and (lines is None or token.start[0] in lines)
            continue
        if (
            token.type in SKIPPED
            or token.start[0] in doc
            or (lines and token.start[0] not in lines)
        ):
            continue
        count += 1
    return count


def added_lines(base: list, step: list) -> set:
    """1-based numbers of the lines the diff against the base adds (marked lines too)."""
    matcher = difflib.SequenceMatcher(a=base, b=step, autojunk=False)
    return {
        j + 1
        for op, _, _, b1, b2 in matcher.get_opcodes()
        if op in ("replace", "insert")
        for j in range(b1, b2)
    }


@pytest.mark.parametrize("step", STEPS)
def test_token_budget(step):
    text = source(step)
    if step in TOTAL_TOKENS:
        assert code_tokens(text) <= TOTAL_TOKENS[step], f"{step}: {code_tokens(text)} code tokens"
        return
    base = source(base_of(step)).splitlines()
    own = code_tokens(text, added_lines(base, text.splitlines()))
    assert own <= OWN_TOKENS[step], (
        f"{step} adds {own} code tokens; its budget is {OWN_TOKENS[step]}"
    )


def test_the_token_count_ignores_layout_and_comments():
    joined = '"""doc"""\nx = [1, 2]  # a comment\n'
    spread = '"""doc"""\n\n# a comment\nx = [1,\n     2]\n'
    assert code_tokens(joined) == code_tokens(spread) == 7  # x = [ 1 , 2 ]
    assert code_tokens('"""d"""\nname = f"{a} and {b}"\n') == 3
    assert code_tokens('"""d"""\nx = 1\ny = 2\n', lines={3}) == 3


@pytest.mark.parametrize("step", STEPS)
def test_every_function_and_method_is_used(step):
    text = source(step)
    defined = [
        n.name
        for n in ast.walk(ast.parse(text))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    unused = [
        name
        for name in defined
        if not name.startswith("__") and len(re.findall(rf"\b{re.escape(name)}\b", text)) < 2
    ]
    assert not unused, f"{step} defines but never uses: {unused}"


def test_lines_and_complexity_pass_ruff():
    """ruff.toml: lines at most 100 characters, complexity at most 10 per function."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        if os.getenv("REQUIRE_RUFF"):
            pytest.fail("ruff is required in CI (.ci/run installs it)")
        pytest.skip("ruff is not installed")
    done = subprocess.run(
        [ruff, "check", "--no-cache", "agents", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr


# -- Docs ------------------------------------------------------------------------------
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def doc(lang: str, step: str) -> str:
    path = REPO / "docs" / lang / f"{step}.md"
    assert path.exists(), f"missing walkthrough {path.relative_to(REPO)}"
    return path.read_text(encoding="utf-8")


def sections(text: str) -> list:
    return re.findall(r"^## ", FENCE.sub("", text), re.M)


@pytest.mark.parametrize("step", STEPS)
def test_docs_parity(step):
    en, zh = doc("en", step), doc("zh", step)
    assert len(sections(en)) == len(sections(zh)) >= 7, (
        "same sections in both languages (DESIGN.md 8)"
    )
    en_blocks, zh_blocks = FENCE.findall(en), FENCE.findall(zh)
    assert [lang for lang, _ in en_blocks] == [lang for lang, _ in zh_blocks], "same code blocks"
    code = lambda blocks: [body for lang, body in blocks if lang in ("python", "bash", "sh")]  # noqa: E731
    assert code(en_blocks) == code(zh_blocks), "code and commands identical in both languages"
    assert re.search(r"[\u4e00-\u9fff]", zh), "the Chinese page is written in Chinese"


def avoided_terms() -> dict:
    """The glossary's "not this" column: avoided word -> the glossary's word."""
    avoided = {}
    for line in (REPO / "docs" / "zh" / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] and cells[0] not in ("English", "---"):
            avoided.update(
                {word.strip(): cells[1] for word in cells[3].split("、") if word.strip()}
            )
    return avoided


@pytest.mark.parametrize("page", [f"docs/zh/{step}.md" for step in STEPS] + ["README.zh.md"])
def test_chinese_pages_use_the_one_glossary(page):
    avoided = avoided_terms()
    assert len(avoided) >= 8, "the glossary in docs/zh/README.md lists the words it avoids"
    text = (REPO / page).read_text(encoding="utf-8")
    found = {word: term for word, term in avoided.items() if word in text}
    assert not found, f"{page} uses words the glossary avoids: {found}"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("step", STEPS)
def test_snippets_match_script(step, lang):
    script = source(step)
    stale = [
        body
        for kind, body in FENCE.findall(doc(lang, step))
        if kind == "python" and body not in script
    ]
    assert not stale, "snippets not found verbatim in the script:\n" + "\n---\n".join(stale)


@pytest.mark.parametrize("readme", ["README.md", "README.zh.md"])
def test_ci_runs_exactly_the_readmes_test_command(readme):
    blocks = [
        body.strip()
        for lang, body in FENCE.findall((REPO / readme).read_text(encoding="utf-8"))
        if lang == "sh"
    ]
    test_command = next(block for block in blocks if block.endswith("-m pytest"))
    run_command = next(block for block in blocks if block.endswith("agents/s01_agent_loop.py"))
    assert (REPO / ".ci" / "run").read_text().rstrip().splitlines()[-1] == test_command
    assert test_command.startswith("python3 -m venv .venv && .venv/bin/python -m pip install"), (
        "both commands make and use a virtual environment (PEP 668 refuses the system Python)"
    )
    without_pip = "python3 -m venv --without-pip .venv && python3 -m pip --python .venv/bin/python"
    assert any(block.startswith(without_pip) for block in blocks), (
        "the form for a Python whose venv has no ensurepip (Debian, Ubuntu without python3-venv)"
    )
    assert run_command.rsplit("&&", 1)[0] == test_command.rsplit("&&", 1)[0], (
        "one install, two commands"
    )


# -- Standalone scripts -------------------------------------------------------------------
ALLOWED_IMPORTS = set(sys.stdlib_module_names) | {"anthropic", "dotenv"}


@pytest.mark.parametrize("step", STEPS)
def test_imports_only_stdlib_anthropic_dotenv(step):
    tree = ast.parse(source(step))
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name.split(".")[0] for n in top_level if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in top_level if isinstance(n, ast.ImportFrom)}
    assert names <= ALLOWED_IMPORTS, f"non-standard imports: {names - ALLOWED_IMPORTS}"


# PEP 723 (https://peps.python.org/pep-0723/): the block `uv run` and `pipx run` read.
SCRIPT_BLOCK = re.compile(
    r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$"
)
RUNTIME = ("anthropic", "python-dotenv")  # the distributions of ALLOWED_IMPORTS' non-stdlib names


def requirement_lines() -> dict:
    """requirements.txt as {distribution name: its line, comment removed}."""
    lines = (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
    requirements = [line.split(" #")[0].strip() for line in lines if not line.startswith("#")]
    return {re.match(r"[A-Za-z0-9._-]+", line).group(): line for line in requirements if line}


@pytest.mark.parametrize("step", STEPS)
def test_inline_metadata_matches_requirements(step):
    """`uv run agents/sNN_*.py` installs what the block names: requirements.txt's runtime lines."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the block itself is plain comments
    blocks = [m for m in SCRIPT_BLOCK.finditer(source(step)) if m.group("type") == "script"]
    assert len(blocks) == 1, "one `# /// script` block (PEP 723)"
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:]
        for line in blocks[0].group("content").splitlines(keepends=True)
    )
    metadata = tomllib.loads(content)
    required = requirement_lines()
    assert metadata["dependencies"] == [required[name] for name in RUNTIME]
    assert metadata["requires-python"] == ">=3.10"  # DESIGN.md 10; the SDK needs 3.10 too


def test_env_example_copied_as_it_is_sets_no_key_and_the_default_model():
    """`cp .env.example .env` and nothing filled in: the offline demo, with the default model.
    (python-dotenv 0.10.0 read the empty key as the line after it: requirements.txt's bound.)"""
    from dotenv import dotenv_values

    values = dotenv_values(REPO / ".env.example")
    assert values == {"ANTHROPIC_API_KEY": "", "MODEL_ID": "claude-sonnet-5-5"}


# One process imports what every step imports (the SDK, dotenv) under the checks a step gets, then
# forks a child per step: each child imports its step from that same start, in an empty folder of
# its own with stdout and stderr (the file descriptors) going to files of its own, so no step hides
# another's side effect and none pays the SDK's import again. Without fork: a process per step.
IMPORT_CHECK = """
import importlib.util, json, os, sys, threading
root = sys.argv[1]
def check(label, load):
    folder = os.path.join(root, label)
    os.mkdir(folder)
    os.chdir(folder)
    for fd, kind in ((1, "out"), (2, "err")):
        os.dup2(os.open(os.path.join(root, f"{label}.{kind}"), os.O_WRONLY | os.O_CREAT), fd)
    try:
        load()
        error = None
    except BaseException as raised:  # SystemExit and KeyboardInterrupt too
        error = f"{type(raised).__name__}: {raised}"
    sys.stdout.flush()
    sys.stderr.flush()
    found = {"error": error, "threads": threading.active_count(), "left": os.listdir(folder)}
    with open(os.path.join(root, f"{label}.json"), "w") as record:
        json.dump(found, record)
def import_step(path):
    spec = importlib.util.spec_from_file_location("step", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
if hasattr(os, "fork"):
    check("sdk", lambda: (__import__("anthropic"), __import__("dotenv")))
for path in sys.argv[2:]:
    label = os.path.basename(path)[:-3]
    pid = os.fork() if hasattr(os, "fork") else 0
    if pid == 0:
        check(label, lambda: import_step(path))
        if hasattr(os, "fork"):
            os._exit(0)
    else:
        os.waitpid(pid, 0)
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """`imported(label)`: what importing a step (or, label "sdk", the SDK and dotenv) left: an
    error, the thread count, files in its folder, and what it printed to stdout and stderr.
    Checked once per test run: the first xdist worker checks under a file lock, in the folder
    all workers share (as offline_demo does), and the others read what it found."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in xdist workers only
    if not (run_id and fcntl):
        return check_imports(tmp_path_factory.mktemp("imports"), tmp_path_factory)
    root = tmp_path_factory.getbasetemp().parent / f"imports-{run_id}"
    with open(root.with_name(root.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # freed if the worker holding it dies
        if not (root / "done").exists():
            shutil.rmtree(root, ignore_errors=True)  # what a worker that died left half made
            root.mkdir()
            check_imports(root, tmp_path_factory)
            (root / "done").touch()
    return check_imports(root, tmp_path_factory, run=False)


def check_imports(root: Path, tmp_path_factory, run: bool = True):
    """Run IMPORT_CHECK into `root` (unless run=False: it ran already); returns `imported`."""
    paths = [str(AGENTS / f"{step}.py") for step in STEPS]
    batches = [paths] if hasattr(os, "fork") else [[path] for path in paths]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.pop("MODEL_ID", None)  # as the autouse offline_env fixture leaves a test's environment
    env["ANTHROPIC_CONFIG_DIR"] = str(tmp_path_factory.mktemp("anthropic-config"))
    for batch in batches if run else []:
        done = subprocess.run(
            [sys.executable, "-c", IMPORT_CHECK, str(root), *batch],
            cwd=root, env=env, capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr

    def found(label: str) -> dict:
        record = root / f"{label}.json"
        assert record.exists(), f"importing {label} did not finish: " + (
            (root / f"{label}.err").read_text(errors="replace")
        )
        result = json.loads(record.read_text())
        result["stdout"] = (root / f"{label}.out").read_text(errors="replace")
        result["stderr"] = (root / f"{label}.err").read_text(errors="replace")
        return result

    return found


@pytest.mark.parametrize("step", STEPS)
def test_import_has_no_side_effects(imported, step):
    labels = ["sdk", step] if hasattr(os, "fork") else [step]
    for found in map(imported, labels):
        assert found["error"] is None, found["error"] + "\n" + found["stderr"]
        assert found["threads"] == 1, "a thread was started on import"
        assert found["stdout"] == "" and found["left"] == [], found


@pytest.mark.parametrize("step", STEPS)
def test_offline_demo_runs_and_leaves_nothing(offline_demo, step):
    demo = offline_demo(step)
    assert demo.done.returncode == 0, demo.done.stdout[-2000:] + demo.done.stderr
    assert "OFFLINE DEMO" in demo.done.stdout and "0 rejected by the validator" in demo.done.stdout
    assert "Unknown command" not in demo.done.stdout, (
        "every scripted line of the demo is a real command"
    )
    assert demo.left_behind == [], "the demo must not create files in the current folder"
    assert (AGENTS / "demos" / f"{step}.py").exists()
