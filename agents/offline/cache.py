"""Prompt caching: which prefixes of earlier requests are remembered, and what a new request
reads from and writes to the cache (the rules are in the package's header)."""

from __future__ import annotations

import hashlib
import threading
import time

from .protocol import _compact, blocks_of, estimate_tokens

CACHE_TTL = 300.0  # seconds an unused cache entry lives (the real default is 5 minutes)
CACHE_MIN_TOKENS = 1024  # shorter prefixes are not cached


# -- Prompt caching: the ledger of remembered prefixes ----------------------------------
def cache_units(body: dict) -> list[tuple[str, int]]:
    """The request as the API caches it: tools, then system, then every message block, each as
    (what identifies it, how many characters it weighs). A block is identified with its role but
    weighs only its own JSON, so the units never add up to more than the request's estimate."""
    units = [(text, len(text)) for text in map(_compact, body.get("tools") or [])]
    if body.get("system"):
        units.append((_compact(body["system"]), len(_compact(body["system"]))))
    for message in body["messages"]:
        units += [(f"{message['role']}:{text}", len(text))
                  for text in map(_compact, blocks_of(message))]
    return units


class CacheLedger:
    """Which prefixes are cached, and until when; see the header for the rules."""

    def __init__(self, ttl: float = CACHE_TTL, min_tokens: int = CACHE_MIN_TOKENS,
                 clock=time.monotonic):
        self.ttl, self.min_tokens, self.clock = ttl, min_tokens, clock
        self.expires: dict[str, float] = {}  # prefix hash -> when it is forgotten
        self.lock = threading.Lock()

    def usage(self, body: dict) -> dict:
        total = estimate_tokens(body)
        nothing = {"input_tokens": total, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 0}
        if not isinstance(body.get("cache_control"), dict) or total < self.min_tokens:
            return nothing  # no cache, or too short to cache: a prefix is never longer than this
        digest, prefixes, chars = hashlib.sha256(str(body["model"]).encode()), [], 0
        for unit, weight in cache_units(body):
            digest.update(unit.encode("utf-8", "replace"))
            chars += weight
            prefixes.append((digest.hexdigest(), chars // 4))
        key, upto = prefixes[-1]  # the breakpoint: the last unit
        if upto < self.min_tokens:
            return nothing
        now = self.clock()
        with self.lock:
            read = next((tokens for prefix, tokens in reversed(prefixes)
                         if self.expires.get(prefix, -1.0) > now), 0)
            for prefix, tokens in prefixes:
                if tokens == read and prefix in self.expires:
                    self.expires[prefix] = now + self.ttl  # a hit renews the entry
            self.expires[key] = now + self.ttl
        return {"input_tokens": total - upto, "cache_creation_input_tokens": upto - read,
                "cache_read_input_tokens": read}
