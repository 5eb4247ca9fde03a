"""Scripted model for the s04 offline demo (not a real model: every turn is written here).

The user asks which services run with debug mode on. Answering means reading eight long
config files, so the scripted parent hands the task to a subagent. The scripted child lists
the folder, reads one file per call (its context grows to thousands of tokens) and reports
a few lines; the parent answers from that report alone. /cost then prints the parent's
largest context against the child's, from the usage fields of the real replies.

The child's script is generic, so --play can use it for any prompt the learner writes: it
lists the first folder the prompt names ("services/"; else the workspace), reads up to
MAX_FILES of the files listed and reports the lines that set debug or port, or each file's
first line.
"""

import os
import re
from pathlib import Path

from offline import latest_results, result_text, steps_since_prompt, system_text, tool_use

LIST = "dir /b" if os.name == "nt" else "ls"  # cmd.exe, bash's shell on Windows, has no ls
MAX_FILES = 12
SERVICES = {"billing": (8081, False), "search": (8082, True), "auth": (8083, False),
            "mail": (8084, False), "images": (8085, True), "gateway": (8086, False),
            "reports": (8087, False), "cache": (8088, False)}
PROMPTS = [
    "Which of our services run with debug mode on? Their configs are in services/.",
    "/cost",
]
SETTING = re.compile(r"^\s*(debug|port)\s*=.*$", re.M)
DEBUG_ON = re.compile(r"^- ([\w./-]+): .*debug = true", re.M)


# -- The world the demo runs in ------------------------------------------------------------
def make_config(name: str, port: int, debug: bool) -> str:
    """A long config: the setting that matters sits deep inside, so the whole file is read."""
    lines = [f"# {name} service configuration", "[server]", f"port = {port}", "workers = 4"]
    lines += ["", "[features]"]
    lines += [f"feature_{name}_{n:02d} = {'on' if n % 3 else 'off'}  # rollout wave {n % 5}"
              for n in range(40)]
    lines += ["", "[diagnostics]", f"debug = {'true' if debug else 'false'}", "trace_sample = 0.01"]
    lines += ["", "[limits]"] + [f"limit_{n:02d} = {100 * (n + 1)}" for n in range(30)]
    return "\n".join(lines) + "\n"


def setup(workdir: Path) -> None:
    (workdir / "services").mkdir()
    for name, (port, debug) in SERVICES.items():
        (workdir / "services" / f"{name}.conf").write_text(make_config(name, port, debug),
                                                          encoding="utf-8")


# -- The parent ----------------------------------------------------------------------------
def parent(request: dict) -> list:
    if steps_since_prompt(request) == 0:
        return [
            "Every config has to be read for that; a subagent can read them in its own context.",
            tool_use("subagent", {
                "description": "find debug settings in services/",
                "prompt": "List the files in services/, read each one, and report for every "
                          "file its debug and port settings, one line per file.",
            }),
        ]
    results = latest_results(request)
    report = result_text(results[0]) if results else ""
    if not results or results[0].get("is_error"):
        return [f"The subagent failed, so I cannot tell yet: {report[:200]}"]
    found = DEBUG_ON.findall(report)
    on = ", ".join(Path(name).stem for name in found) or "none of them"
    return [f"Debug mode is on in: {on}. The subagent read the files; my context holds only "
            f"its report ({len(report):,} characters). /cost shows both sides."]


# -- The child -----------------------------------------------------------------------------
def child(request: dict) -> list:
    prompt = result_text(request["messages"][0]) if request["messages"] else ""
    folder = re.search(r"([\w.-]+)/", prompt)
    where = folder.group(1) if folder else "."
    step = steps_since_prompt(request)
    if step == 0:
        return [f"Listing {where} first.", tool_use("bash", {"command": f"{LIST} {where}"})]
    listing = result_text(request["messages"][2]["content"][0])
    if "[exit code" in listing or "Error:" in listing:
        return [f"I could not list {where}: {listing}"]
    names = [line.strip() for line in listing.splitlines() if line.strip()][:MAX_FILES]
    if step <= len(names):
        return [tool_use("read_file", {"path": f"{where}/{names[step - 1]}"})]
    return [report(request, where, names)]


def report(request: dict, where: str, names: list) -> str:
    """One line per file read: the lines that set debug or port, else its first line."""
    reads = [m["content"][0] for m in request["messages"][4::2]]  # each read_file's result
    lines = []
    for name, result in zip(names, reads):
        text = result_text(result)
        settings = [match.group(0).strip() for match in SETTING.finditer(text)]
        shown = ", ".join(settings) if settings else (text.splitlines() or ["(empty)"])[0]
        lines.append(f"- {where}/{name}: {shown}")
    return f"Read {len(lines)} files in {where}/:\n" + "\n".join(lines)


def policy(request: dict) -> list:
    if "You are a subagent" in system_text(request):
        return child(request)
    return parent(request)
