"""Checks every step inherits; new steps in agents/ are picked up automatically.

- spine identity: each spine unit of s01 appears byte-identical in every later step,
  except lines marked `# sNN: <why>`;
- docs parity: docs/en/<step>.md and docs/zh/<step>.md exist, with the same sections
  and the same code;
- snippet drift: every ```python block of a walkthrough appears verbatim in its script;
- standalone: a script imports only the standard library, anthropic and dotenv, and
  importing it has no side effects;
- offline demo: with no credentials it runs, exits 0, in time, and leaves nothing behind.
"""

import ast
import difflib
import re
import subprocess
import sys

import pytest
from conftest import AGENTS, REPO, STEPS

SPINE = "s01_agent_loop"
LATER_STEPS = [s for s in STEPS if s != SPINE]
MARK = re.compile(r"#\s*s\d\d:\s*\S")
DEMO_SECONDS = {"s11_autonomous": 10}  # every other step: 5 s


def source(step: str) -> str:
    return (AGENTS / f"{step}.py").read_text(encoding="utf-8")


def spine_units(text: str) -> dict:
    """Top-level functions, classes and assignments, by name, with their source lines."""
    lines = text.splitlines()
    units = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Call):
            names = [ast.unparse(node.value.func)]  # e.g. load_dotenv(...)
        else:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        for name in names:
            units[name] = lines[start - 1:node.end_lineno]
    return units


def unmarked_changes(spine: list, step: list) -> list:
    """Lines of `step` that differ from `spine` without a `# sNN:` mark (and removals)."""
    problems = []
    matcher = difflib.SequenceMatcher(a=spine, b=step, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            continue
        new = step[b1:b2]
        problems += [f"changed without a mark: {line.strip()}" for line in new if not MARK.search(line)]
        if op == "delete":
            problems += [f"removed without a marked replacement: {line.strip()}" for line in spine[a1:a2]]
    return problems


@pytest.mark.parametrize("step", LATER_STEPS)
def test_spine_identity(step):
    spine, later = spine_units(source(SPINE)), spine_units(source(step))
    problems = []
    for name, lines in spine.items():
        if name not in later:
            problems.append(f"{name}: missing")
            continue
        problems += [f"{name}: {p}" for p in unmarked_changes(lines, later[name])]
    assert not problems, f"{step} differs from the s01 spine:\n" + "\n".join(problems)


# Steps that carry earlier steps' blocks in their own file (DESIGN.md 3).
CARRIES = {"s11_autonomous": ["s07_task_system", "s09_team"]}


@pytest.mark.parametrize("step,carried", [(s, c) for s, cs in CARRIES.items() for c in cs if s in STEPS])
def test_carried_block_identity(step, carried):
    """Units a step adds (beyond the spine) reappear identical where a later step carries them."""
    spine, earlier, later = spine_units(source(SPINE)), spine_units(source(carried)), spine_units(source(step))
    problems = []
    for name, lines in earlier.items():
        if name in spine:
            continue  # spine units are checked against s01 above
        if name not in later:
            problems.append(f"{name}: missing")
            continue
        problems += [f"{name}: {p}" for p in unmarked_changes(lines, later[name])]
    assert not problems, f"{step} differs from {carried}:\n" + "\n".join(problems)


def test_spine_identity_check_can_fail():
    spine = ["def f():", "    return 1"]
    assert unmarked_changes(spine, spine) == []
    assert unmarked_changes(spine, ["def f():", "    return 2"]) != []
    assert unmarked_changes(spine, ["def f():", "    return 2  # s03: why"]) == []
    assert unmarked_changes(spine, ["def f():"]) != []


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
    assert len(sections(en)) == len(sections(zh)) >= 7, "same sections in both languages (DESIGN.md 8)"
    en_blocks, zh_blocks = FENCE.findall(en), FENCE.findall(zh)
    assert [lang for lang, _ in en_blocks] == [lang for lang, _ in zh_blocks], "same code blocks"
    code = lambda blocks: [body for lang, body in blocks if lang in ("python", "bash", "sh")]  # noqa: E731
    assert code(en_blocks) == code(zh_blocks), "code and commands identical in both languages"
    assert re.search(r"[\u4e00-\u9fff]", zh), "the Chinese page is written in Chinese"


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("step", STEPS)
def test_snippets_match_script(step, lang):
    script = source(step)
    stale = [body for kind, body in FENCE.findall(doc(lang, step)) if kind == "python" and body not in script]
    assert not stale, "snippets not found verbatim in the script:\n" + "\n---\n".join(stale)


# -- Standalone scripts -------------------------------------------------------------------
ALLOWED_IMPORTS = set(sys.stdlib_module_names) | {"anthropic", "dotenv"}


@pytest.mark.parametrize("step", STEPS)
def test_imports_only_stdlib_anthropic_dotenv(step):
    tree = ast.parse(source(step))
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name.split(".")[0] for n in top_level if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in top_level if isinstance(n, ast.ImportFrom)}
    assert names <= ALLOWED_IMPORTS, f"non-standard imports: {names - ALLOWED_IMPORTS}"


@pytest.mark.parametrize("step", STEPS)
def test_import_has_no_side_effects(step, tmp_path):
    code = ("import importlib.util, sys, threading\n"
            f"spec = importlib.util.spec_from_file_location('step', {str(AGENTS / (step + '.py'))!r})\n"
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
            "assert threading.active_count() == 1, 'a thread was started on import'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("step", STEPS)
def test_offline_demo_runs_and_leaves_nothing(offline_demo, step):
    demo = offline_demo(step)
    assert demo.done.returncode == 0, demo.done.stdout[-2000:] + demo.done.stderr
    assert "OFFLINE DEMO" in demo.done.stdout and "0 rejected by the validator" in demo.done.stdout
    assert demo.seconds < DEMO_SECONDS.get(step, 5), f"demo took {demo.seconds:.1f}s"
    assert demo.left_behind == [], "the demo must not create files in the current folder"
    assert (AGENTS / "demos" / f"{step}.py").exists()
