"""Reading an answer as it came over the wire, for the recording proxy: the chunked transfer
coding, server-sent events, and the message a stream carried, rebuilt from its events."""

from __future__ import annotations

import json
import re


def chunked_whole(data: bytes) -> bool:
    """Whether a body in the chunked transfer coding arrived whole: its last chunk and trailers."""
    try:
        return dechunk(data, whole=True) is not None
    except ValueError:  # not chunked framing at all
        return False


def dechunk(data: bytes, whole: bool = False) -> bytes | None:
    """The body carried by a chunked transfer coding (RFC 9112, 7.1), as far as it arrived;
    with `whole`, None unless the last chunk (size 0) and the end of its trailers are there."""
    parts, at = [], 0
    while (end := data.find(b"\r\n", at)) >= 0:
        size = int(data[at:end].split(b";")[0].strip() or b"0", 16)  # extensions are ignored
        if size == 0:  # the last chunk; with `whole`, its (empty) trailer section must end too
            return b"".join(parts) if not whole or data.find(b"\r\n\r\n", end) >= 0 else None
        parts.append(data[end + 2:end + 2 + size])
        at = end + 2 + size + 2
    return None if whole else b"".join(parts)


SSE_LINE_END = re.compile(r"\r\n|\r|\n")


def read_sse(text: str):
    """The events of a server-sent event stream, as (event type, data), parsed by the spec (HTML
    Living Standard, "Interpreting an event stream"): lines end in CRLF, LF or CR; a line that
    starts with ":" is a comment; "field: value" loses at most one space after the colon (and a
    line without a colon is a field with an empty value); the data lines of an event are joined
    by "\n"; a blank line dispatches the event, and an event cut off before one is dropped."""
    kind, data = "", []
    for line in SSE_LINE_END.split(text.removeprefix("\ufeff")):
        if not line:
            if data:
                yield kind or "message", "\n".join(data)
            kind, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            kind = value
        # "id", "retry" and fields the spec does not know change nothing here


def is_event_stream(text: str, content_type: str | None) -> bool:
    if content_type:
        return content_type.split(";")[0].strip().lower() == "text/event-stream"
    first = text.lstrip("\ufeff \t\r\n")  # no header: by its first line (JSON starts with "{")
    return first.startswith((":", "event", "data", "id", "retry"))


# -- Rebuilding a streamed message from its events ----------------------------------------
class MessageSoFar:
    """What the events of a stream have said so far: the message, and the pieces of its blocks'
    text and input (joined at the end, as a block's deltas may come in many pieces)."""

    def __init__(self):
        self.message: dict = {"content": []}
        self.pieces: dict = {}  # (index, "text" or "input") -> the pieces of that block


def on_message_start(so_far: MessageSoFar, event: dict) -> None:
    if isinstance(event.get("message"), dict):
        so_far.message = {"content": [], **event["message"]}


def on_block_start(so_far: MessageSoFar, event: dict) -> None:
    so_far.message["content"].append(event.get("content_block") or {})


# delta type -> (the block field it adds to, the delta's key that holds the piece)
DELTAS = {"text_delta": ("text", "text"), "input_json_delta": ("input", "partial_json")}


def on_block_delta(so_far: MessageSoFar, event: dict) -> None:
    delta = event.get("delta")
    if not isinstance(delta, dict):
        return
    field, key = DELTAS.get(delta.get("type"), ("", ""))  # other deltas add nothing recorded
    if field and isinstance(delta.get(key), str):
        so_far.pieces.setdefault((event.get("index"), field), []).append(delta[key])


def on_message_delta(so_far: MessageSoFar, event: dict) -> None:
    message = so_far.message
    message.update({k: v for k, v in (event.get("delta") or {}).items() if v is not None})
    message["usage"] = {**(message.get("usage") or {}), **(event.get("usage") or {})}


def on_error(so_far: MessageSoFar, event: dict) -> None:
    so_far.message["error"] = event.get("error")  # the stream ended with an error


ON_EVENT = {"message_start": on_message_start, "content_block_start": on_block_start,
            "content_block_delta": on_block_delta, "message_delta": on_message_delta,
            "error": on_error}  # "ping", the "..._stop" events: nothing to add


def rebuild(body: bytes, content_type: str | None = None) -> dict:
    """The message a reply carried: plain JSON, or accumulated from its server-sent events."""
    text = body.decode("utf-8", "replace")
    if not is_event_stream(text, content_type):
        return json.loads(text)
    so_far = MessageSoFar()
    for kind, data in read_sse(text):
        try:
            event = json.loads(data)
        except ValueError:
            continue  # not JSON (a keep-alive, say): nothing of the message
        if not isinstance(event, dict):
            continue
        kind = event.get("type", kind)  # the event's own type; else the stream's "event:" line
        handle = ON_EVENT.get(kind) if isinstance(kind, str) else None
        if handle:
            handle(so_far, event)
    return join_pieces(so_far)


def join_pieces(so_far: MessageSoFar) -> dict:
    """The message, each block with its text, and its input parsed from the pieces of JSON."""
    content = so_far.message["content"]
    for (index, field), parts in so_far.pieces.items():
        if not isinstance(index, int) or not 0 <= index < len(content):
            continue  # a delta for a block that never started
        block, joined = content[index], "".join(parts)
        if field == "text":
            block["text"] = str(block.get("text") or "") + joined
            continue
        try:
            block["input"] = json.loads(joined)
        except ValueError:
            block["input"] = {"(cut off)": joined}
    return so_far.message
