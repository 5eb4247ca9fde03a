"""Scripted model for the s06 offline demo (not a real model: every turn is written here).

The user asks for six generated service logs to be read. The model reads them one at a
time and writes down each log's error count in its own words as it goes, so the counts
survive when old tool output is cleared. The context passes a low demo threshold
(COMPACT_THRESHOLD, set by setup before the script loads), the harness compacts, and the
model writes report.md from the summary alone. `/tokens` draws the per-call chart.

The same policy serves the benchmark (tests/bench/bench_s06.py) with any number of turns:
it reads whatever logs/<name>.log paths the user's latest words (or the summary's next
step) name, and answers summary requests from the session text it is given.
"""

import json
import random
import re
from pathlib import Path

from offline import blocks_of, is_prompt, latest_results, result_text, system_text, tool_use

DEMO_THRESHOLD = 12_000  # tokens; the script's default is 50,000
DEMO_BATCH = 4_000  # tokens micro compaction waits for; the script's default is 10,000
SMALL_LOGS = ["api", "auth", "billing", "search", "cache", "mail"]
BIG_LOGS = ["payments", "gateway"]
PROMPTS = [
    "Read logs/api.log, logs/auth.log, logs/billing.log, logs/search.log, logs/cache.log and "
    "logs/mail.log, and tell me which service logged the most errors.",
    "Now the two big ones as well: logs/payments.log and logs/gateway.log.",
    "/tokens",
    "Write report.md: the error count of every log you read, highest first.",
    "/tokens",
]

LOG_PATH = re.compile(r"logs/[\w-]+\.log")
NOTE = re.compile(r"(logs/[\w-]+\.log): (\d+) errors")
COMPACTED = "[This conversation was compacted"


# -- The world the demo runs in -----------------------------------------------------------
def make_log(service: str, chars: int) -> str:
    """A deterministic log of about `chars` characters with a service-specific error rate."""
    rng = random.Random(service)
    error_rate = 0.05 + 0.25 * rng.random()
    lines, size, second = [], 0, 0
    while size < chars:
        second += rng.randint(1, 9)
        level = (
            "ERROR" if rng.random() < error_rate else rng.choice(["INFO", "INFO", "INFO", "WARN"])
        )
        event = rng.choice(
            [
                "request served",
                "cache miss",
                "upstream timeout",
                "retrying call",
                "connection reset",
                "slow query",
                "token refreshed",
            ]
        )
        clock = f"{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
        line = f"2025-03-01T{clock} {level:<5} {service}: {event} (req {rng.randint(1000, 9999)})"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def setup(workdir: Path) -> None:
    import os

    os.environ["COMPACT_THRESHOLD"] = str(DEMO_THRESHOLD)  # read by the script when it loads
    os.environ["CLEAR_BATCH_TOKENS"] = str(DEMO_BATCH)
    (workdir / "logs").mkdir()
    for service in SMALL_LOGS:
        (workdir / "logs" / f"{service}.log").write_text(make_log(service, 8_000), encoding="utf-8")
    for service in BIG_LOGS:
        (workdir / "logs" / f"{service}.log").write_text(
            make_log(service, 16_000), encoding="utf-8"
        )


def finish(namespace: dict, workdir: Path) -> None:
    """Show that the transcript still holds every log in full, whatever the prompt lost."""
    transcript = namespace["TRANSCRIPT"]
    lines = transcript.path.read_text(encoding="utf-8").splitlines()
    record = "\n".join(json.dumps(json.loads(line)) for line in lines)
    logs = sorted((workdir / "logs").glob("*.log"))
    kept = [
        log
        for log in logs
        if json.dumps(log.read_text(encoding="utf-8").rstrip("\n")).strip('"') in record
    ]
    print(
        f"[demo] transcript {transcript.name}: {len(lines)} lines; "
        f"it holds the full text of {len(kept)} of {len(logs)} logs"
    )
    report = workdir / "report.md"
    if report.exists():
        print("[demo] report.md:\n" + report.read_text(encoding="utf-8").rstrip())


# -- Reading the request ----------------------------------------------------------------------
def all_text(request: dict) -> str:
    """Everything the model can see, as one string."""
    return json.dumps(request["messages"], ensure_ascii=False)


def current_prompt(request: dict) -> tuple[int, str]:
    """(index, words) of the user's latest request. After a compaction that kept no user
    words, the request is the summary's 'next step' line."""
    messages = request["messages"]
    index = max(i for i, m in enumerate(messages) if is_prompt(m))
    words = [b["text"] for b in blocks_of(messages[index]) if b.get("type") == "text"][-1]
    if words.startswith(COMPACTED):
        words = next((line for line in words.splitlines() if line.startswith("6. Next step")), "")
    return index, words


def read_since(request: dict, index: int) -> list:
    return [
        b["input"].get("path")
        for m in request["messages"][index + 1 :]
        if m["role"] == "assistant"
        for b in blocks_of(m)
        if b.get("type") == "tool_use" and b["name"] == "read_file"
    ]


def counts(text: str) -> dict:
    """Error counts noted anywhere in the text, the latest note per log winning."""
    return {path: int(n) for path, n in NOTE.findall(text)}


# -- The scripted model -----------------------------------------------------------------------
def policy(request: dict) -> list:
    if "summarise" in system_text(request):
        return [summary(request["messages"][0]["content"])]
    index, words = current_prompt(request)
    reply = []
    results = latest_results(request)
    if results:
        last_call = [b for b in blocks_of(request["messages"][-2]) if b.get("type") == "tool_use"][
            -1
        ]
        if last_call["name"] == "write_file":
            return [
                f"Wrote report.md with {len(counts(all_text(request)))} logs, "
                "highest error count first."
            ]
        text = result_text(results[-1])
        path = last_call["input"].get("path")
        reply.append(
            f"{path}: {text.count(' ERROR ')} errors."
            if not results[-1].get("is_error")
            else f"Could not read {path}: {text}"
        )
    if "report.md" in words:
        ranked = sorted(counts(all_text(request)).items(), key=lambda item: -item[1])
        table = "".join(f"| {path} | {n} |\n" for path, n in ranked)
        source = "the summary" if COMPACTED in all_text(request) else "my notes"
        return [
            f"Writing the report from the counts in {source}.",
            tool_use(
                "write_file",
                {"path": "report.md", "content": "| log | errors |\n|---|---|\n" + table},
            ),
        ]
    wanted = list(dict.fromkeys(LOG_PATH.findall(words)))
    done = read_since(request, index)
    known = counts(all_text(request) + " ".join(reply))
    remaining = [path for path in wanted if path not in done and path not in known]
    if remaining:
        return reply + [tool_use("read_file", {"path": remaining[0]})]
    seen = counts(all_text(request) + " ".join(reply))
    if not seen:
        return reply + ["There is nothing to read in that request."]
    worst = max(seen, key=seen.get)
    return reply + [
        f"Of the {len(seen)} logs read so far, {worst} has the most errors ({seen[worst]})."
    ]


def summary(session: str) -> str:
    """A summary in the six parts the harness asks for, built from the session text."""
    requests = [
        line[len("[user] ") :]
        for line in session.splitlines()
        if line.startswith("[user] ") and not line.startswith("[user] " + COMPACTED)
    ]
    notes = counts(session)
    last_request = requests[-1] if requests else ""
    unread = [p for p in dict.fromkeys(LOG_PATH.findall(last_request)) if p not in notes]
    note_text = "; ".join(f"{path}: {n} errors" for path, n in notes.items()) or "nothing yet"
    return "\n".join(
        [
            "1. Goals: " + (" / ".join(requests[-3:]) or "see the earlier summary"),
            f"2. Done: read {len(notes)} logs and counted their ERROR lines: {note_text}.",
            "3. Files: read " + (", ".join(notes) or "none") + "; none changed.",
            (
                "4. Decisions: read one log at a time and note its count at once, "
                "so the numbers survive clearing."
            ),
            "5. Open items: " + (", ".join(unread) + " not read yet." if unread else "none."),
            "6. Next step: "
            + ("read " + ", ".join(unread) if unread else "wait for the user's next request."),
        ]
    )
