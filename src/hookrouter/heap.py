"""The cyclic garbage collector for a long-running server whose heap keeps growing.

Most of what a router holds lives as long as the process: the catalog, and
per tenant the state its first event builds. Objects made at start-up are
frozen once (``settle_heap``); tenants created later through the admin API
and the runtime state of each tenant's first event are not, so they sit in
the oldest generation, and every full collection walks all of them with the
event loop stopped (docs/performance.md, "The collector and a catalog made
through the admin API"). ``HeapSettler`` freezes what survives each
collection instead, so no later collection scans it again.

Before it is frozen, a young collection still scans each new object once
and reads everything it points to, mostly cold (catalog strings, configs):
with events spread over many tenants that scan is a visible part of each
first event's cost (docs/performance.md, "What a cold read costs"). The
compiled per-tenant records that reach nothing which refers back to them
(a tenant's engine record, lane, backlog count, breaker, endpoint runtime,
metric cells, a cached body, an endpoint's signer and a source's verifier)
are declared ``@mypyc_attr(acyclic=True)``: never tracked, so never
scanned, and 16 bytes smaller. A field that could close a cycle through
one of them (a callback, the engine) must not be added to it;
``tests/delivery/test_acyclic_records.py`` keeps the list.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

# Allocations (net of frees) of container objects between young collections;
# CPython's default is 700. See settle_heap.
GC_YOUNG_THRESHOLD = 10_000


def settle_heap() -> None:
    """Tune the cyclic garbage collector for a long-running server, once started.

    The objects made at start-up (modules, config, catalog) live as long as
    the process: ``gc.freeze`` takes them out of every later collection. The
    request path frees its objects by reference counting, so collections find
    little; a higher young-generation threshold makes them rarer. Under
    end-to-end load each step cut the collector's cost per event, and with
    both no full collection ran at all.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


class HeapSettler:
    """Freezes the survivors of every collection (almost all are young ones).

    A young collection runs when allocations outnumber frees by
    ``GC_YOUNG_THRESHOLD``, which on the request path (freed by reference
    counting) happens only while the long-lived heap grows: tenants created,
    first events. What survives one is then almost all long-lived, and
    freezing it costs nothing (the generations' lists are spliced). The price
    is that an object frozen while in flight is never collected if it later
    becomes part of a garbage *cycle*; the request path frees by reference
    counting, and ``tests/e2e/test_heap_settling.py`` runs failures, retries,
    idle release and catalog churn under a freeze after every young collection
    and finds nothing of the router's left behind.

    That holds only on an event loop whose transports hold no cycle of their
    own (``frees_by_refcount``): on Python 3.11 each of the standard loop's
    socket transports references itself through a cached bound method, so one
    open across a collection would stay frozen after it closed.
    """

    def __init__(self) -> None:
        self.settles = 0
        self._installed = False
        self.declined: str | None = None  # why ``install`` left the collector alone

    def install(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Hook the collector if ``loop`` frees its connections by reference counting."""
        if not self._installed:
            self.declined = None if frees_by_refcount(loop) else _DECLINED.format(type(loop))
            if self.declined is not None:
                return False
            gc.callbacks.append(self._on_collection)
            self._installed = True
        return True

    def remove(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_collection)
            self._installed = False

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        # At "stop" the collector has finished; freezing only splices its lists.
        if phase == "stop":
            gc.freeze()
            self.settles += 1

    def stats(self) -> dict[str, int | str | None]:
        return {
            "settles": self.settles,
            "frozen_objects": gc.get_freeze_count(),
            "declined": self.declined,
        }


_DECLINED = "{} keeps reference cycles in its transports: collections left unfrozen"


def frees_by_refcount(loop: asyncio.AbstractEventLoop) -> bool:
    """True for uvloop, whose transports die by reference counting once closed.

    The standard loop's do not on Python 3.11 (a transport caches its own bound
    read callback, CPython issues 100348 and 106503, fixed in 3.12); it is the
    fallback where uvloop does not install, so it keeps the collector's default.
    """
    return type(loop).__module__.partition(".")[0] == "uvloop"


__all__ = ["GC_YOUNG_THRESHOLD", "HeapSettler", "frees_by_refcount", "settle_heap"]
