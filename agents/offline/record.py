"""run.json, the recording beside the trace page: every request and reply of a run, with each
message, system prompt and tool list stored once (see the package docstring for its shape)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .page_parts import agent_of
from .protocol import _compact


class Numbered:
    """Each distinct JSON value once, numbered from 0 in the order it was first shown. Every
    request of a session repeats the whole history, so a later call refers to what earlier ones
    hold. The page numbers its messages with it too: message #n on the page is number n - 1."""

    def __init__(self):
        self.values: list = []
        self.numbers: dict[bytes, int] = {}  # digest of the compact JSON -> its number
        # id(value) -> (value, digest): the value is held, so its id stays unique while kept
        self.digests: dict[int, tuple] = {}

    def number(self, value) -> int:
        seen = self.digests.get(id(value))
        if seen is None:
            text = _compact(value).encode("utf-8", "surrogatepass")
            seen = self.digests[id(value)] = (value, hashlib.sha256(text).digest())
        digest = seen[1]
        if digest not in self.numbers:
            self.numbers[digest] = len(self.values)
            self.values.append(value)
        return self.numbers[digest]


def recording(calls: list, title: str = "") -> dict:
    """The run as one JSON value: the calls in order, each request's messages, system prompt and
    tools replaced by their numbers in the lists of the same names at the top."""
    shared = {"messages": Numbered(), "system": Numbered(), "tools": Numbered()}
    recorded = []
    for call in calls:
        request = dict(call["request"])
        request["messages"] = [shared["messages"].number(m) for m in request.get("messages") or []]
        for key in ("system", "tools"):
            if key in request:
                request[key] = shared[key].number(request[key])
        recorded.append({"agent": agent_of(call["request"]), "at": call.get("at"),
                         "request": request, "reply": call["reply"]})
    return {"title": title, "messages": shared["messages"].values,
            "system": shared["system"].values, "tools": shared["tools"].values,
            "calls": recorded}


def record_path(page: Path) -> Path:
    """Where run.json goes for a page: beside it, with the same stem (run.html -> run.json; a
    page named run.json keeps its name: run.json.json)."""
    page = Path(page)
    if page.suffix == ".json":
        return page.with_name(f"{page.name}.json")
    return page.with_suffix(".json")


def write_record(path: Path, calls: list, title: str = "") -> None:
    # A lone surrogate cannot be encoded: backslashreplace writes it as \\ud800, which is what
    # JSON spells it (ensure_ascii=False keeps other text readable).
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as file:
        json.dump(recording(calls, title), file, ensure_ascii=False, indent=1)
