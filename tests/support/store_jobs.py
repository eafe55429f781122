"""Write jobs queued where a race would put them, on a real ``SqliteStore``."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.partition_sql import On


def queue_behind(
    monkeypatch: pytest.MonkeyPatch,
    store: SqliteStore,
    module: ModuleType,
    factory: str,
    behind: Callable[[sqlite3.Connection], Any],
) -> list[asyncio.Future[Any]]:
    """Queue ``behind`` right after each job that ``module.factory`` makes is submitted.

    In the same loop turn, so in the same commit cycle (one transaction, the
    catalog the cycle began with). Returns the futures of ``behind``.
    """
    made: list[Any] = []
    real_factory = getattr(module, factory)

    def making(*args: Any, **kwargs: Any) -> Any:
        made.append(real_factory(*args, **kwargs))
        return made[-1]

    real_submit = store.submit_write
    queued: list[asyncio.Future[Any]] = []

    def submit_write(job: Any, **kwargs: Any) -> Any:
        submitted = real_submit(job, **kwargs)
        if job in made:
            queued.append(real_submit(behind))
        return submitted

    monkeypatch.setattr(module, factory, making)
    monkeypatch.setattr(store, "submit_write", submit_write)
    return queued


def reopen(store: SqliteStore, event_id: str) -> Callable[[sqlite3.Connection], int]:
    """A job doing what a replay does, found by the writer's catalog: rows it reopened."""

    def job(conn: sqlite3.Connection) -> int:
        on = On(conn, store.catalog.route(event_id))
        sql = "UPDATE deliveries SET state = 'pending' WHERE event_id = ?"
        return int(on.execute(sql, (event_id,)).rowcount)

    return job


__all__ = ["queue_behind", "reopen"]
