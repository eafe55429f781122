"""Event-store backends under test, and event builders (store conformance suite and others).

A conformance test takes a ``StoreBackend`` and calls ``build()`` for a fresh,
unopened store; ``build()`` again gives a second store over the same data,
which is how tests check that what was acknowledged survives a reopen.
"postgres" runs on one PostgreSQL server per test process, a schema per
test (``postgres_store``). "sqlite-bucket" is the SQLite store in one-minute
time partitions (the router's default layout, in buckets short enough that
events ``ordered_ms`` spaces a ``step`` apart land in different files).
JetStream joins ``BACKEND_KINDS`` when its backend exists.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.support.postgres_store import postgres_available, store_options

from hookrouter.ids import new_event_id
from hookrouter.store import EventStore, NewEvent, open_store
from hookrouter.store.sqlite.partitions import MIN_BUCKET_SECONDS

# "sqlite" commits on the event loop (the default), "sqlite-thread" on a writer
# thread, "sqlite-bucket" on the loop into time partitions.
BACKEND_KINDS: tuple[str, ...] = ("sqlite", "sqlite-thread", "sqlite-bucket", "postgres")
# The partition length of "sqlite-bucket": the shortest the store accepts.
TEST_BUCKET_SECONDS = MIN_BUCKET_SECONDS


@dataclass(frozen=True)
class StoreBackend:
    """How to build one backend's store over one data location."""

    kind: str
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, **overrides: Any) -> EventStore:
        return open_store(self.kind, **{**self.options, **overrides})


def backend_for(kind: str, tmp_path: Path) -> StoreBackend:
    """A backend of ``kind`` whose data lives under ``tmp_path``."""
    if kind == "sqlite":
        return StoreBackend("sqlite", {"path": tmp_path / "store"})
    if kind == "sqlite-thread":
        return StoreBackend("sqlite", {"path": tmp_path / "store", "grouping": "thread"})
    if kind == "sqlite-bucket":
        options = {"path": tmp_path / "store", "bucket_seconds": TEST_BUCKET_SECONDS}
        return StoreBackend("sqlite", options)
    if kind == "postgres":
        if not postgres_available():
            pytest.skip("PostgreSQL server binaries are not installed")
        return StoreBackend("postgres", store_options(tmp_path))
    raise ValueError(f"no test setup for store backend {kind!r}")


_tick = itertools.count()


def make_event(
    *,
    tenant: str = "ten_a",
    source: str = "src_a",
    provider_event_id: str | None = None,
    endpoints: tuple[str, ...] = (),
    body: bytes = b'{"hello":"world"}',
    headers: dict[str, str] | None = None,
    event_type: str | None = "test.event",
    at_ms: int | None = None,
) -> NewEvent:
    """A ``NewEvent`` with a fresh id.

    Ids increase in creation order (``hookrouter.ids`` is monotonic within the
    process); ``at_ms`` sets ``received_at`` and the id's millisecond, unless an
    id minted earlier in the process is already later.
    """
    received = time.time() if at_ms is None else at_ms / 1000
    return NewEvent(
        event_id=new_event_id(at_ms),
        tenant_id=tenant,
        source_id=source,
        provider_event_id=provider_event_id,
        event_type=event_type,
        received_at=received,
        headers=headers if headers is not None else {"content-type": "application/json"},
        body=body,
        endpoint_ids=endpoints,
    )


# Milliseconds between the first stamps of two ``ordered_ms`` calls.
_CALL_SPAN_MS = 10_000_000


def ordered_ms(count: int, start: int = 1_700_000_000_000, step: int = 1) -> list[int]:
    """``count`` increasing millisecond stamps ``step`` apart, distinct across calls in one process.

    A ``step`` of a minute or more puts each stamp in its own "sqlite-bucket" partition.
    """
    if count * step >= _CALL_SPAN_MS:
        raise ValueError(f"{count} stamps {step} ms apart overlap the next call's")
    base = start + next(_tick) * _CALL_SPAN_MS
    return [base + i * step for i in range(count)]


def backup_copy(db: Path, dest: Path) -> None:
    """A consistent copy of a live database (WAL content included), as a backup tool makes."""
    with (
        contextlib.closing(sqlite3.connect(db)) as src,
        contextlib.closing(sqlite3.connect(dest)) as dst,
    ):
        src.backup(dst)
