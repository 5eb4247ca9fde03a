"""The walkthrough pages a reader finishes: what can be checked without reading them.

Every page (docs/en/<step>.md, docs/zh/<step>.md):
- starts with a navigation line whose links resolve (previous step, base, next step, README,
  the other language, and on Chinese pages the glossary);
- opens with the idea in ten lines (a ```text sketch) and a one-paragraph summary, and ends
  with three to five takeaways (an appendix of hardening notes may follow);
- keeps its prose within a 20-minute read: 2,500 English words or 5,000 Chinese characters,
  outside code blocks and before the appendix;
- describes the course as it is, never its history (no words of the list below);
- runs scripts with the README's virtual environment;
- puts in parentheses only English terms the glossary has a row for.
How well a page reads is judged by reading it; these only keep the shape.
"""

import re

import pytest
from conftest import REPO, STEPS

LADDER = [
    "s01_agent_loop",
    "s02_tool_use",
    "s03_todo",
    "s04_subagent",
    "s05_skills",
    "s06_compact",
    "s07_task_system",
    "s08_background",
    "s09_team",
    "s11_autonomous",
    "s12_worktree",
]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADINGS = {
    "en": (
        "## The idea in ten lines",
        "## In one minute",
        "## Takeaways",
        "## Appendix: hardening notes",
    ),
    "zh": ("## 十行看懂", "## 先说结论", "## 要点", "## 附录：加固笔记"),
}
MAX_PROSE = {"en": 2500, "zh": 5000}
WORDS = {"en": r"[A-Za-z0-9][\w'’-]*", "zh": r"[\u4e00-\u9fff]"}
HISTORY_WORDS = {
    "en": [
        "earlier version",
        "previous version",
        "the previous s0",
        "the previous s1",
        "old rule",
        "redesign",
        "used to ",
        "formerly",
        "this round",
        "last round",
        "before this",
        "was changed",
        "we changed",
    ],
    "zh": [
        "旧版",
        "老版本",
        "之前的版本",
        "以前的版本",
        "上一版",
        "早先",
        "改版",
        "重新设计",
        "旧规则",
    ],
}


def page(lang: str, step: str) -> str:
    return (REPO / "docs" / lang / f"{step}.md").read_text(encoding="utf-8")


def prose(text: str, lang: str) -> str:
    """What a reader reads as text: outside code blocks, before the appendix."""
    return FENCE.sub("", text.split("\n" + HEADINGS[lang][3])[0])


def section_titles(text: str) -> list:
    return re.findall(r"^## .*$", FENCE.sub("", text), re.M)


def section(text: str, title: str) -> str:
    body = FENCE.sub(lambda m: m.group(0).replace("\n## ", "\n##_"), text)
    return body.split("\n" + title + "\n", 1)[1].split("\n## ", 1)[0]


def base_of(step: str) -> str | None:
    found = re.search(r"Base: (s\d\d_\w+)\.py", (REPO / "agents" / f"{step}.py").read_text())
    return found.group(1) if found else None


PAGES = [(lang, step) for lang in ("en", "zh") for step in STEPS]


def test_the_ladder_is_every_step():
    assert sorted(LADDER) == sorted(STEPS), "a new step needs its place in LADDER"


@pytest.mark.parametrize("lang,step", PAGES)
def test_navigation_line_links_resolve(lang, step):
    first = page(lang, step).splitlines()[0]
    targets = LINK.findall(first)
    at = LADDER.index(step)
    wanted = {
        "../../README.md" if lang == "en" else "../../README.zh.md",
        f"../{'zh' if lang == 'en' else 'en'}/{step}.md",
    }
    wanted |= {f"{LADDER[at - 1]}.md"} if at else set()
    wanted |= {f"{LADDER[at + 1]}.md"} if at + 1 < len(LADDER) else set()
    wanted |= {f"../../agents/{base_of(step)}.py"} if base_of(step) else set()
    wanted |= {"README.md"} if lang == "zh" else set()
    assert wanted <= set(targets), f"the navigation line lacks {wanted - set(targets)}"
    folder = REPO / "docs" / lang
    for target in LINK.findall(FENCE.sub("", page(lang, step))):  # links, not code
        if not re.match(r"[a-z]+:|#", target):
            assert (folder / target.split("#")[0]).exists(), f"broken link {target}"


@pytest.mark.parametrize("lang,step", PAGES)
def test_page_opens_with_the_sketch_and_ends_with_takeaways(lang, step):
    text = page(lang, step)
    titles = section_titles(text)
    sketch, summary, takeaways, appendix = HEADINGS[lang]
    assert titles[:2] == [sketch, summary], "the page opens with the idea in ten lines"
    blocks = FENCE.findall(section(text, sketch))
    assert blocks and blocks[0][0] == "text" and blocks[0][1].count("\n") <= 12, (
        "the idea in ten lines is one ```text sketch of at most 12 lines"
    )
    assert takeaways in titles and titles[-1] in (takeaways, appendix), "takeaways come last"
    bullets = re.findall(r"^- ", section(text, takeaways), re.M)
    assert 3 <= len(bullets) <= 5, "three to five takeaways"


@pytest.mark.parametrize("lang,step", PAGES)
def test_prose_fits_a_twenty_minute_read(lang, step):
    count = len(re.findall(WORDS[lang], prose(page(lang, step), lang)))
    assert count <= MAX_PROSE[lang], f"{count} > {MAX_PROSE[lang]}: move hardening to the appendix"


@pytest.mark.parametrize("lang,step", PAGES)
def test_pages_describe_the_course_as_it_is(lang, step):
    text = FENCE.sub("", page(lang, step)).lower()
    found = [word for word in HISTORY_WORDS[lang] if word in text]
    assert not found, f"words about versions the reader never saw: {found}"


@pytest.mark.parametrize("lang,step", PAGES)
def test_commands_use_the_virtual_environment(lang, step):
    text = page(lang, step)
    commands = [body for kind, body in FENCE.findall(text) if kind in ("sh", "bash", "bat")]
    bare = re.compile(r"(^|[\s`(])(python3?|pip3?) ", re.M)
    found = [m.group(0) for body in commands for m in bare.finditer(body)]
    found += re.findall(r"`python3? agents/[^`]*`", prose(text, lang))
    assert not found, f"run scripts with .venv/bin/python (the README's setup): {found}"


def glossary_terms() -> set:
    rows = (REPO / "docs" / "zh" / "README.md").read_text(encoding="utf-8").splitlines()
    terms = set()
    for line in rows:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("English", "---"):
            terms |= {t.strip().lower() for t in re.split(r"[/(),]", cells[0]) if t.strip()}
    return terms


GLOSSARY_MUST_HAVE = [
    "owner",
    "pending",
    "reviewer",
    "builder",
    "dependent",
    "high-water mark",
    "ceiling",
    "play mode",
    "workspace",
]


def test_glossary_has_the_terms_the_pages_need():
    missing = [term for term in GLOSSARY_MUST_HAVE if term not in glossary_terms()]
    assert not missing, f"docs/zh/README.md lacks rows for {missing}"


@pytest.mark.parametrize("step", STEPS)
def test_english_in_parentheses_is_a_glossary_term(step):
    glossed = re.findall(r"（([A-Za-z][A-Za-z -]*)）", prose(page("zh", step), "zh"))
    terms = glossary_terms()
    missing = sorted({g for g in glossed if g.strip().lower() not in terms})
    assert not missing, f"terms glossed in parentheses but not in the glossary: {missing}"
