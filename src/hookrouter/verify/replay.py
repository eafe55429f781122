"""The replay guard for schemes that sign only the body (GitHub, Shopify, ``hmac``).

Their id header (``X-GitHub-Delivery``, ``X-Shopify-Webhook-Id``) is not
signed, so dedup on it cannot stop a replay: the same signed body sent again
with a fresh id is a new event. The guard remembers a hash of each accepted
body per source for ``replay_window`` seconds; a body seen again inside it is
answered like a dedup hit, with the first event's id.

Memory is bounded: one ordered dict for all sources, oldest first, at most
``max_entries`` keys (a 16-byte hash and a small entry each); past that the
oldest are dropped, which only shortens the window. Each event costs one
hash of its body and O(1) dict work.

A body whose first sighting is still being committed is *pending*: later
copies wait for that commit and get its id, or, if it failed, go on as new
events.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

# 16-byte keys plus an entry: about 200 bytes each, so ~20 MiB at the cap.
DEFAULT_MAX_ENTRIES: Final = 100_000
# On by default where only the body is signed; a legitimate event with a
# byte-identical body within this window would be taken for a replay.
DEFAULT_WINDOW_SECONDS: Final = 3600.0
BODY_ONLY_PROVIDERS: Final = frozenset({"github", "shopify"})

Waiter = Callable[[str | None], None]  # called with the first event's id, or None if it failed


def signs_only_the_body(provider: str, options: Mapping[str, Any]) -> bool:
    """True when nothing but the body is signed (no timestamp, no id)."""
    if provider in BODY_ONLY_PROVIDERS:
        return True
    return provider == "hmac" and not options.get("timestamp_header")


def default_window(provider: str, options: Mapping[str, Any]) -> float:
    """The guard's window when ``replay_window`` is not set: on for body-only schemes."""
    return DEFAULT_WINDOW_SECONDS if signs_only_the_body(provider, options) else 0.0


def body_key(source_id: str, body: bytes) -> bytes:
    """The guard's key: a hash of the source id and the signed body."""
    digest = hashlib.blake2b(source_id.encode(), digest_size=16)
    digest.update(b"\0")
    digest.update(body)
    return digest.digest()


class Sighting:
    """The first copy of a body: when, and its event id once committed."""

    __slots__ = ("event_id", "seen_at", "waiters")

    def __init__(self, seen_at: float) -> None:
        self.seen_at = seen_at
        self.event_id: str | None = None  # None while its commit is pending
        self.waiters: list[Waiter] = []


class ReplayGuard:
    """Body hashes seen recently, for every source; see the module docstring."""

    __slots__ = ("_longest", "_max_entries", "_seen", "dropped", "hits")

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._seen: OrderedDict[bytes, Sighting] = OrderedDict()
        self._longest = 0.0  # the longest window asked for: older entries serve nobody
        self.hits = 0
        self.dropped = 0  # evicted at the cap before their window ended

    def __len__(self) -> int:
        return len(self._seen)

    def claim(self, key: bytes, now: float, window: float) -> Sighting | None:
        """None if ``key`` is new within ``window`` (the caller must ``settle`` or
        ``forget`` it); else the earlier sighting to answer from (or wait on)."""
        self._longest = max(self._longest, window)
        self._expire(now)
        seen = self._seen.get(key)
        if seen is not None:
            if seen.event_id is None or now - seen.seen_at <= window:
                self.hits += 1
                return seen
            del self._seen[key]  # outside this source's window: a new first copy
        self._seen[key] = Sighting(now)
        if len(self._seen) > self._max_entries:
            _, oldest = self._seen.popitem(last=False)
            self.dropped += 1
            _release(oldest, None)
        return None

    def settle(self, key: bytes, event_id: str) -> None:
        """The first copy committed as ``event_id``; copies waiting on it get that id."""
        seen = self._seen.get(key)
        if seen is not None and seen.event_id is None:
            seen.event_id = event_id
            _release(seen, event_id)

    def forget(self, key: bytes) -> None:
        """The first copy was not stored: copies waiting on it go on as new events."""
        seen = self._seen.get(key)
        if seen is not None and seen.event_id is None:
            del self._seen[key]
            _release(seen, None)

    def _expire(self, now: float) -> None:
        seen, horizon = self._seen, now - self._longest
        while seen:
            key = next(iter(seen))
            first = seen[key]
            if first.seen_at >= horizon or first.event_id is None:
                return
            del seen[key]


def _release(seen: Sighting, event_id: str | None) -> None:
    waiters, seen.waiters = seen.waiters, []
    for waiter in waiters:
        waiter(event_id)


__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_WINDOW_SECONDS",
    "ReplayGuard",
    "Sighting",
    "body_key",
    "default_window",
    "signs_only_the_body",
]
