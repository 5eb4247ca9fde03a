"""s05: which folders are skills, the front matter reader, the listing in a system prompt that
never changes, load_skill, /skills, and the offline demo."""

import re
from pathlib import Path

import pytest

from offline import CACHE_MIN_TOKENS, ScriptedModel, latest_results, result_text, tool_use

STEP = "s05_skills"


@pytest.fixture
def agent(load_step):
    return load_step(STEP)


def write_skill(workdir: Path, where: str, text: str | bytes) -> Path:
    """<workdir>/<where>/SKILL.md holding `text` (bytes are written as they are)."""
    path = workdir / where / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def skill_text(name: str, description: str = "Use it when asked.", body: str = "Do it.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"


def found(agent) -> tuple[dict, list]:
    lines = []
    return agent.find_skills(say=lines.append), lines


# -- Which skills are used, and the one line for each that is not -------------------------
UNUSABLE = [
    ("notes", b"# Only instructions, no front matter\n", "no front matter"),
    ("open", b"---\nname: open\ndescription: never closed\n", "no front matter"),
    ("late", b"\n---\nname: late\ndescription: d\n---\n", "no front matter"),
    ("noname", b"---\ndescription: d\n---\nbody\n", "name '' is missing or invalid"),
    ("Upper", b"---\nname: Upper\ndescription: d\n---\n", "name 'Upper' is missing or invalid"),
    ("snake_case", b"---\nname: snake_case\ndescription: d\n---\n", "is missing or invalid"),
    ("-lead", b"---\nname: -lead\ndescription: d\n---\n", "is missing or invalid"),
    ("trail-", b"---\nname: trail-\ndescription: d\n---\n", "is missing or invalid"),
    ("dou--ble", b"---\nname: dou--ble\ndescription: d\n---\n", "is missing or invalid"),
    ("a" * 65, f"---\nname: {'a' * 65}\ndescription: d\n---\n".encode(), "is missing or invalid"),
    ("pdf", b"---\nname: pdf-tools\ndescription: d\n---\n",
     "name 'pdf-tools' differs from its folder's name 'pdf'"),
    ("long", f"---\nname: long\ndescription: {'x' * 1025}\n---\n".encode(),
     "the description has 1,025 characters; 1 to 1,024 are allowed"),
    ("nodesc", b"---\nname: nodesc\n---\nbody\n", "the description has 0 characters"),
    ("emptydesc", b"---\nname: emptydesc\ndescription: ''\n---\n", "has 0 characters"),
    ("latin", "---\nname: latin\ndescription: café\n---\n".encode("latin-1"), "not UTF-8"),
    ("utf16", skill_text("utf16").encode("utf-16"), "not UTF-8"),
    ("colon", b"---\nname: colon\ndescription: Review a diff: bugs first\n---\n",
     "cannot read description: 'Review a diff: bugs first' is not a plain value"),
    ("colon-end", b"---\nname: colon-end\ndescription: Use it for:\n---\n", "put it in quotes"),
    ("unclosed", b'---\nname: unclosed\ndescription: "starts here\n  ends here"\n---\n',
     "cannot read description"),
    ("escape", b'---\nname: escape\ndescription: "a \\x41 escape"\n---\n',
     "cannot read description: Invalid \\escape"),
    ("flow", b"---\nname: [flow]\ndescription: d\n---\n", "cannot read name"),
    ("nested-value", b"---\nname: nested-value\ndescription:\n  text: hi\n---\n",
     "cannot read description"),
]


@pytest.mark.parametrize("folder,text,reason", UNUSABLE, ids=[case[0][:12] for case in UNUSABLE])
def test_an_unusable_skill_is_left_out_with_one_line_and_the_rest_load(
        agent, workdir, folder, text, reason):
    write_skill(workdir, "skills/good", skill_text("good"))
    write_skill(workdir, f"skills/{folder}", text)
    skills, lines = found(agent)
    assert list(skills) == ["good"]
    assert len(lines) == 1 and lines[0].startswith(f"[skill left out] skills/{folder}/SKILL.md: ")
    assert reason in lines[0]


def test_the_limits_themselves_are_allowed(agent, workdir):
    write_skill(workdir, f"skills/{'a' * 64}", skill_text("a" * 64, "x" * 1024))
    write_skill(workdir, "skills/x", skill_text("x", "y"))
    write_skill(workdir, "skills/pdf-2-text", skill_text("pdf-2-text"))
    skills, lines = found(agent)
    assert lines == [] and sorted(skills) == ["a" * 64, "pdf-2-text", "x"]
    assert len(skills["a" * 64]["description"]) == 1024


def test_a_duplicate_name_keeps_the_first_found_and_names_the_file_that_lost(agent, workdir):
    kept = write_skill(workdir, "skills/deploy", skill_text("deploy", "From skills/."))
    write_skill(workdir, ".claude/skills/deploy", skill_text("deploy", "From .claude."))
    write_skill(workdir, ".claude/skills/lint", skill_text("lint"))
    skills, lines = found(agent)
    assert sorted(skills) == ["deploy", "lint"]
    assert skills["deploy"]["path"] == kept and skills["deploy"]["description"] == "From skills/."
    assert lines == ["[skill left out] .claude/skills/deploy/SKILL.md: a skill named 'deploy' "
                     "was found first, in skills/deploy/SKILL.md"]


def test_skills_in_dot_claude_skills_are_found(agent, workdir):
    write_skill(workdir, ".claude/skills/review", skill_text("review", "Review a change."))
    skills, lines = found(agent)
    assert lines == [] and list(skills) == ["review"]
    assert skills["review"]["body"] == "Do it."


def test_only_a_skill_md_right_under_a_root_is_a_skill(agent, workdir):
    write_skill(workdir, "skills/pdf", skill_text("pdf", body="See references/SKILL.md."))
    write_skill(workdir, "skills/pdf/references", skill_text("references"))
    write_skill(workdir, "skills/group/inner", skill_text("inner"))
    write_skill(workdir, "other/misc", skill_text("misc"))
    (workdir / "skills" / "SKILL.md").write_text(skill_text("skills"), encoding="utf-8")
    skills, lines = found(agent)
    assert list(skills) == ["pdf"] and lines == []


def test_no_skill_folders_at_all_is_no_skills_and_no_lines(agent):
    assert found(agent) == ({}, [])


# -- The front matter reader ------------------------------------------------------------------
READ = [
    ("double-quoted colon", 'description: "Write entries: one line each"',
     "Write entries: one line each"),
    ("single-quoted colon", "description: 'It''s: simple' # a comment", "It's: simple"),
    ("double-quoted escapes", r'description: "Tab\tand \"quotes\" \u00e9"', 'Tab\tand "quotes" é'),
    ("plain with #", "description: Works with C# code  # not this", "Works with C# code"),
    ("plain over lines", "description: Use this when\n  the user asks",
     "Use this when the user asks"),
    ("literal block", "description: |\n  First line.\n    Indented.\n\n  After a gap.\n",
     "First line.\n  Indented.\n\nAfter a gap."),
    ("folded block", "description: >\n  One line\n  and the next.\n\n  A new paragraph.",
     "One line and the next.\nA new paragraph."),
    ("folded, strip", "description: >-\n  Folded\n  text\n", "Folded text"),
    ("literal, keep", "description: |+\n  Kept\n\n", "Kept"),
    ("other fields skipped unread",
     "license: 'Apache-2.0: see LICENSE.txt'\nallowed-tools: [Bash, Read]\n"
     "metadata:\n  name: not-this\n  description: not: this either\n"
     "description: The real one.\ncompatibility: >\n  Any: really\n",
     "The real one."),
]


@pytest.mark.parametrize("case,lines,description", READ, ids=[case[0] for case in READ])
def test_the_reader_reads_what_skill_authors_write(agent, case, lines, description):
    fields, body = agent.skill_fields(f"---\nname: demo\n{lines}\n---\n# Body\n\nText.\n")
    assert fields == {"name": "demo", "description": description}
    assert body == "# Body\n\nText."


@pytest.mark.parametrize("prefix,newline", [("", "\r\n"), ("\ufeff", "\n"), ("\ufeff", "\r\n")],
                         ids=["CRLF", "BOM", "BOM and CRLF"])
def test_crlf_and_a_byte_order_mark_read_right(agent, workdir, prefix, newline):
    text = prefix + skill_text("win", '"Made: on Windows"', "Line one.\nLine two.")
    write_skill(workdir, "skills/win", text.replace("\n", newline))
    skills, lines = found(agent)
    assert lines == [] and skills["win"]["description"] == "Made: on Windows"
    assert skills["win"]["body"].replace("\r\n", "\n") == "Line one.\nLine two."


def test_quoted_names_and_a_closing_line_with_trailing_spaces(agent):
    fields, body = agent.skill_fields("---\nname: 'demo'\ndescription: \"d\"\n---  \nbody\n")
    assert fields == {"name": "demo", "description": "d"} and body == "body"


# -- The listing, load_skill and the cache -----------------------------------------------------
def test_the_listing_is_sorted_and_one_line_per_skill(agent, workdir):
    write_skill(workdir, "skills/zeta", skill_text("zeta", "|\n  Two\n  lines."))
    write_skill(workdir, ".claude/skills/alpha", skill_text("alpha", "First."))
    assert agent.system_prompt() == agent.SYSTEM  # no skills: the base's prompt
    agent.SKILLS.update(agent.find_skills())
    listing = agent.system_prompt().split(agent.SYSTEM, 1)[1]
    assert listing.endswith("\n- alpha: First.\n- zeta: Two lines.")
    assert "load_skill" in listing


def test_the_system_prompt_is_identical_before_and_after_a_load(agent, standin, workdir,
                                                               type_lines, capsys):
    # descriptions long enough that the first request is over the cache's minimum
    for name in ("alpha", "beta", "gamma"):
        write_skill(workdir, f"skills/{name}", skill_text(name, "word " * 200, f"{name} steps."))
    standin.policy = ScriptedModel([[tool_use("load_skill", {"name": "beta"})], ["beta done"],
                                    [tool_use("load_skill", {"name": "alpha"})], ["alpha done"]])
    type_lines("first task", "second task")
    agent.repl()
    systems = [request["system"] for request in standin.requests]
    assert len(systems) == 4 and len(set(systems)) == 1
    assert re.findall(r"^- (\w+): ", systems[0], re.M) == ["alpha", "beta", "gamma"]
    loaded = result_text(latest_results(standin.requests[1])[0])
    assert loaded == '<skill name="beta" folder="skills/beta">\nbeta steps.\n</skill>'
    usage = [call["reply"]["usage"] for call in standin.calls]
    assert usage[0]["cache_creation_input_tokens"] >= CACHE_MIN_TOKENS
    for before, after in zip(usage, usage[1:]):  # each call reads all of the one before it
        assert after["cache_read_input_tokens"] == (before["cache_read_input_tokens"]
                                                    + before["cache_creation_input_tokens"])
    assert standin.rejected == [] and "beta done" in capsys.readouterr().out


def test_load_skill_of_an_unknown_name_is_an_error_result_listing_the_names(agent, workdir):
    write_skill(workdir, "skills/beta", skill_text("beta"))
    write_skill(workdir, ".claude/skills/alpha", skill_text("alpha"))
    call = {"type": "tool_use", "id": "call_1", "name": "load_skill", "input": {"name": "gamma"}}
    assert agent.run_tool(call)["content"] == "Error: no skill named 'gamma'; the skills are: none"
    agent.SKILLS.update(agent.find_skills())
    result = agent.run_tool(call)
    assert result["is_error"] is True
    assert result["content"] == "Error: no skill named 'gamma'; the skills are: alpha, beta"
    assert agent.run_tool({**call, "input": {}})["content"].startswith(
        "Error: missing required argument(s) ['name']")


def test_the_session_starts_despite_broken_skills_and_skills_lists_them(agent, standin, workdir,
                                                                       type_lines, capsys):
    write_skill(workdir, "skills/good", skill_text("good", "'Good: really'"))
    write_skill(workdir, "skills/bad", b"no front matter\n")
    standin.policy = ScriptedModel([["hello back"]])
    type_lines("/skills", "hello", "/help")
    agent.repl()
    out = capsys.readouterr().out
    assert out.count("[skill left out] skills/bad/SKILL.md: no front matter") == 1
    assert "  good (skills/good): Good: really\n" in out and "hello back" in out
    assert "/skills: list the skills the model can load" in out


def test_skills_with_none_says_where_they_go(agent, type_lines, capsys):
    type_lines("/skills")
    agent.repl()
    assert "No skills: add <name>/SKILL.md under skills/ or .claude/skills/" in \
        capsys.readouterr().out


# -- As a learner runs it -------------------------------------------------------------------
def test_offline_demo_refuses_the_broken_skill_loads_one_and_prints_the_cache(offline_demo):
    demo = offline_demo(STEP)
    out = demo.done.stdout
    refused = "[skill left out] skills/code-review/SKILL.md: cannot read description:"
    assert out.count(refused) == 1 and out.index(refused) < out.index("s05 >> /skills")
    listed = out.split("s05 >> /skills", 1)[1].split("s05 >> ", 1)[0]
    assert re.findall(r"^  ([a-z-]+) \(", listed, re.M) == [
        "changelog", "commit-message", "release-notes"]
    assert "(.claude/skills/release-notes)" in listed
    assert "> load_skill: {\"name\": \"changelog\"}" in out
    assert "### Fixed\n\n- Starting with an empty `config.toml` no longer crashes (#41)" in out
    rows = re.findall(r"^  (\d)\s+(.+?)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$", out, re.M)
    figures = [[int(n.replace(",", "")) for n in row[2:]] for row in rows]
    assert [row[1] for row in rows] == ["the user's request", "read_file result",
                                        "load_skill result", "edit_file result"]
    read_after_load, written_before = figures[2][0], figures[1][1]
    assert written_before > 0 and read_after_load == written_before
    assert "0 rejected by the validator" in out
    page = demo.trace.read_text(encoding="utf-8")  # the trace shows the listing and the body
    assert "- changelog: Record a change in CHANGELOG.md" in page
    assert "&lt;skill name=&quot;changelog&quot; folder=&quot;skills/changelog&quot;&gt;" in page


def test_play_shows_the_listing_at_the_first_call_and_the_body_once_loaded(
    run_in_process, tmp_path
):
    lines = ["record the fix in the changelog", '@load_skill {"name": "changelog"}', "",
             "Loaded.", "", "q"]
    done = run_in_process(STEP, "\n".join(lines) + "\n", args=("--play", "--demo"),
                          cwd=tmp_path, keyed=False)
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = done.stdout.split("--- model call ")[1:3]
    assert "- changelog: Record a change" in first and "- release-notes: Turn" in first
    assert "system:" not in second, "the system prompt did not change"
    assert '<skill name="changelog" folder="skills/changelog">' in second
    assert "[play] 2 model calls answered; 0 rejected by the validator." in done.stdout
    assert list(tmp_path.iterdir()) == []
