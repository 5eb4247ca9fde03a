"""Scripted model for the s05 offline demo (not a real model: every turn is written here).

The workspace is seeded from s05_skills_seed/: a CHANGELOG.md, three skills (two in skills/, one
in .claude/skills/) and a broken one (an unquoted ': ' in its description), which the harness
leaves out with one line when the session starts. The user lists the skills with /skills, then
asks for a changelog entry. The model reads CHANGELOG.md, sees the changelog skill in the listing
of its system prompt, loads it, and adds the entry in the skill's format - only once the skill's
body has really arrived. After the session the demo shows the file and the
cache figures of each call: the system prompt never changed, so the call after the load reads
the whole earlier request from the cache.
"""

import shutil
from pathlib import Path

from offline import (CACHE_MIN_TOKENS, latest_results, result_text, steps_since_prompt,
                     system_text, tool_use)

SEED = Path(__file__).resolve().parent / "s05_skills_seed"
PROMPTS = [
    "/skills",
    "I fixed the crash when config.toml is empty (issue 41). Record it in the changelog.",
]
ENTRY = "- Starting with an empty `config.toml` no longer crashes (#41)\n"
FIXED = "## [Unreleased]\n\n### Added\n\n- A `--quiet` flag that prints only errors (#38)\n"


def setup(workdir: Path) -> None:
    shutil.copytree(SEED, workdir, dirs_exist_ok=True)


def policy(request: dict) -> list:
    step = steps_since_prompt(request)
    results = [result_text(r) for r in latest_results(request)]
    if step == 0:
        return ["Let me look at the changelog first.",
                tool_use("read_file", {"path": "CHANGELOG.md"})]
    if step == 1 and "- changelog:" in system_text(request):
        return ["The skill list has a changelog skill; I load it before I change the file.",
                tool_use("load_skill", {"name": "changelog"})]
    if step == 1:
        return ["No changelog skill is listed, so I do not know this project's format."]
    if step == 2 and '<skill name="changelog"' in results[0]:
        return ["The skill says: under [Unreleased], sections in the order Added, Changed, Fixed; "
                "one line per change, as a user sees it, with the issue number.",
                tool_use("edit_file", {"path": "CHANGELOG.md", "old_text": FIXED,
                                       "new_text": FIXED + "\n### Fixed\n\n" + ENTRY})]
    if step == 2:
        return [f"The skill did not load: {results[0]}"]
    return [f"Done: {results[0]}. The entry is under [Unreleased] > Fixed, in the format the "
            "changelog skill prescribes."]


def run(namespace: dict, workdir: Path, server) -> None:
    namespace["repl"]()
    head = (workdir / "CHANGELOG.md").read_text(encoding="utf-8").split("## [1.4.0]")[0]
    print("\n[demo] CHANGELOG.md now begins:\n" + head.rstrip())
    print("\n[demo] cache figures of each model call (the stand-in's usage fields, in tokens):")
    print(f"  {'call':<6}{'the history ends with':<30}{'read':>8}{'written':>9}{'uncached':>10}")
    for number, call in enumerate(server.calls, 1):
        usage = call["reply"]["usage"]
        print(f"  {number:<6}{last_block(call['request']):<30}"
              f"{usage['cache_read_input_tokens']:>8,}{usage['cache_creation_input_tokens']:>9,}"
              f"{usage['input_tokens']:>10,}")
    print(f"  A request under {CACHE_MIN_TOKENS:,} tokens is not cached. The system prompt, with "
          "the skill\n  listing, was the same in every call: each call read the one before it "
          "from the cache,\n  and the skill's body, at the end of the history, was the only "
          "new text to write.")


def last_block(request: dict) -> str:
    """What the request's last message holds: the user's words, or which tool's result."""
    results = latest_results(request)
    if not results:
        return "the user's request"
    asked = {b["id"]: b["name"] for b in request["messages"][-2]["content"]
             if b.get("type") == "tool_use"}
    names = [asked.get(r["tool_use_id"], "?") for r in results]
    return f"{', '.join(names)} result"
