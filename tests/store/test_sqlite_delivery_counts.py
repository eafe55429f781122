"""Open deliveries are counted by triggers (schema version 7), never scanned.

The engine reads the per-(tenant, state) counts every few seconds for its
backlog cap and gauges. What must hold: after any mix of the ledger's moves
(outcomes, park, resume, promote, replay, retention) the kept counts equal a
count of the rows; they survive a SIGKILL mid-write; and a store written
before version 7 gets them at its first open.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.store_backends import make_event

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import OPEN_STATES, AttemptRecord, DeliveryState
from hookrouter.store.ledger import OutcomeRecord, ReplayFilter
from hookrouter.store.sqlite import SqliteStore, ledger_sql
from hookrouter.store.sqlite.schema import MIGRATIONS

S = DeliveryState
_OPEN = tuple(OPEN_STATES)
_CHILD = Path(__file__).with_name("counts_child.py")


def _outcome(event_id: str, endpoint: str, state: DeliveryState, tenant: str) -> OutcomeRecord:
    next_at = 1.0 if state is S.RETRY else None
    attempt = AttemptRecord(1, 100.0, 3.0, 500, None)
    ref = DeliveryRef(event_id, endpoint)
    return OutcomeRecord(ref, state, 1, next_at, 500, None, 100.0, attempt, tenant_id=tenant)


def scanned_counts(db_path: Path) -> dict[tuple[str, DeliveryState], int]:
    """Open deliveries per (tenant, state), counted row by row from the file."""
    conn = sqlite3.connect(db_path)
    try:
        rows = conn.execute(
            "SELECT tenant_id, state, count(*) FROM deliveries"
            " WHERE state IN ('pending', 'retry', 'parked') GROUP BY 1, 2"
        ).fetchall()
    finally:
        conn.close()
    return {(t, S(s)): n for t, s, n in rows}


async def test_kept_counts_equal_the_rows_after_every_kind_of_move(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = store.delivery_ledger()
    events = [make_event(tenant=f"ten_{i % 2}", endpoints=("ep_a", "ep_b")) for i in range(12)]
    for event in events:
        await store.append(event)
    expected: list[dict[tuple[str, DeliveryState], int]] = []

    async def check() -> None:
        counts = await ledger.state_counts(_OPEN)  # materializes the fresh ones first
        assert counts == scanned_counts(store.db_path)
        expected.append(counts)

    await check()  # all pending (materialized)
    await ledger.record(
        [_outcome(e.event_id, "ep_a", state, e.tenant_id) for e, state in zip(
            events, [S.DELIVERED, S.RETRY, S.DEAD, S.PARKED, S.DISABLED, S.RETRY] * 2, strict=True
        )]
    )  # fmt: skip
    await check()
    await ledger.park_pending("ten_0", "ep_b", 200.0, 100)
    await check()
    await ledger.resume_parked("ten_0", "ep_b", 100)
    await check()
    await ledger.promote_due(10.0, 100)  # the retries (due at 1.0) become pending
    await check()
    await ledger.replay(ReplayFilter(tenant_id="ten_1"))
    await check()
    assert expected[0] == {("ten_0", S.PENDING): 12, ("ten_1", S.PENDING): 12}
    assert expected[1][("ten_1", S.RETRY)] == 4 and expected[1][("ten_1", S.PARKED)] == 2
    # Deleting an event's deliveries (retention, a removed tenant) lowers its counts.
    gone = events[1]
    await store.submit_write(
        lambda c: c.execute("DELETE FROM deliveries WHERE event_id = ?", (gone.event_id,))
    )
    await check()
    assert sum(expected[-1].values()) < sum(expected[-2].values())


async def test_counts_come_from_the_kept_table_not_the_deliveries(open_sqlite: Any) -> None:
    """The query never touches ``deliveries``: its cost does not grow with open work."""
    store = await open_sqlite()
    plan = await store.run_read(
        lambda c: " | ".join(
            r[3] for r in c.execute(f"EXPLAIN QUERY PLAN {ledger_sql.state_counts_sql(_OPEN)}")
        )
    )
    assert "delivery_counts" in plan and "deliveries " not in f"{plan} ", plan
    assert "SCAN" not in plan, plan


def _kill_child_mid_writes(path: Path) -> None:
    """Run ``counts_child`` until 40 rounds of outcomes were written, then SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, str(_CHILD), str(path)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    for _ in range(40):  # more outcome writes are in flight after each line
        assert child.stdout.readline(), "the child exited early"
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    child.stdout.close()


async def test_counts_survive_sigkill_during_outcome_writes(tmp_path: Path) -> None:
    """A child writes outcomes of every state as fast as it can; SIGKILL; counts still match."""
    path = tmp_path / "store"
    await asyncio.to_thread(_kill_child_mid_writes, path)
    before = scanned_counts(path / "events.db")
    assert sum(before.values()) > 0
    store = SqliteStore(path)
    await store.open()
    try:
        counts = await store.delivery_ledger().state_counts(_OPEN)
        assert counts == scanned_counts(path / "events.db")
    finally:
        await store.close()


async def test_a_store_written_before_version_7_gets_its_counts_at_first_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    old = SqliteStore(path, migrations=MIGRATIONS[:6])
    await old.open()
    events = [make_event(endpoints=("ep_a",)) for _ in range(5)]
    for event in events:
        await old.append(event)
    ledger = old.delivery_ledger()
    await ledger.record([_outcome(events[0].event_id, "ep_a", S.RETRY, events[0].tenant_id)])
    await ledger.record([_outcome(events[1].event_id, "ep_a", S.DELIVERED, events[1].tenant_id)])
    await old.close()

    store = SqliteStore(path)
    await store.open()
    try:
        assert store.schema_migrated_from == 6
        counts = await store.delivery_ledger().state_counts(_OPEN)
        assert counts == {("ten_a", S.RETRY): 1, ("ten_a", S.PENDING): 3}
    finally:
        await store.close()
