"""SqliteStore specifics: batching limits, write jobs, attempt history, lifecycle, factory."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.support.store_backends import make_event

from hookrouter.errors import ConfigError, StoreError, StoreUnavailable
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store import DeliveryState, open_store
from hookrouter.store.base import AttemptRecord
from hookrouter.store.ledger import OutcomeRecord, ReplayFilter
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite import batch as sqlite_batch
from hookrouter.store.sqlite import fanout as sqlite_fanout
from hookrouter.store.sqlite.batch import MAX_BATCH, padded_size
from hookrouter.store.sqlite.committer import Committer
from hookrouter.store.sqlite.ledger import SqliteLedger


def test_statement_sizes_come_from_a_short_ladder() -> None:
    sizes = {padded_size(n) for n in range(1, MAX_BATCH + 1)}
    assert len(sizes) <= 64  # all stay prepared in the writer's statement cache
    for n in range(1, MAX_BATCH + 1):
        size = padded_size(n)
        assert n <= size <= MAX_BATCH
        assert size - n <= n / 8  # at most 12.5 % padding rows
    assert [padded_size(n) for n in (1, 16, 17, 33, 1000)] == [1, 16, 18, 36, 1024]


async def test_burst_larger_than_one_statement_is_split_and_fully_acknowledged(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    events = [make_event(endpoints=("ep_a",)) for _ in range(2500)]
    results = await asyncio.gather(*(store.append(e) for e in events))
    assert [r.event_id for r in results] == [e.event_id for e in events]
    stats = store.stats()
    assert stats["events_per_commit_max"] <= MAX_BATCH
    assert stats["commits"] >= 3
    assert len(await store.list_events(limit=1000)) == 1000


async def test_headers_and_endpoints_are_stored_as_text_and_read_back_exactly(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    headers = {"x-name": "café ☕", "content-type": "application/json"}
    event = make_event(endpoints=("ep_a", "ep_é"), headers=headers)
    await store.append(event)
    with contextlib.closing(sqlite3.connect(store.db_path)) as conn:
        row = conn.execute(
            "SELECT typeof(headers), typeof(endpoints), headers, endpoints FROM events"
        ).fetchone()
    assert row[:2] == ("text", "text")  # queryable with SQLite's JSON functions as text
    assert '"café ☕"' in row[2] and "ep_é" in row[3]
    stored = await store.get_event(event.event_id)
    assert stored is not None and stored.headers == headers
    assert {d.endpoint_id for d in stored.deliveries} == {"ep_a", "ep_é"}


async def test_get_event_returns_attempt_history_per_delivery(open_sqlite: Any) -> None:
    store = await open_sqlite()
    event = make_event(endpoints=("ep_a", "ep_b"))
    await store.append(event)

    def two_attempts(conn: sqlite3.Connection) -> None:  # what the delivery engine records
        sqlite_fanout.materialize(conn)  # the fresh deliveries get their rows
        for attempt, code, error in ((1, None, "timeout"), (2, 500, None)):
            conn.execute(
                "INSERT INTO attempts VALUES (?, 'ep_a', ?, ?, 12.5, ?, ?, ?)",
                (event.event_id, attempt, 100.0 + attempt, code, error, "oops" if code else None),
            )
        conn.execute(
            "UPDATE deliveries SET state = 'retry', attempts = 2, next_attempt_at = 160.0,"
            " last_status_code = 500, updated_at = 102.0 WHERE endpoint_id = 'ep_a'"
        )

    await store.submit_write(two_attempts)
    record = await store.get_event(event.event_id)
    assert record is not None
    ep_a, ep_b = record.deliveries
    assert (ep_a.state, ep_a.attempts, ep_a.next_attempt_at) == (DeliveryState.RETRY, 2, 160.0)
    assert ep_a.last_status_code == 500
    assert [(a.attempt, a.status_code, a.error) for a in ep_a.history] == [
        (1, None, "timeout"),
        (2, 500, None),
    ]
    assert ep_a.history[1].response_excerpt == "oops" and ep_a.history[0].duration_ms == 12.5
    assert ep_b.history == () and ep_b.state is DeliveryState.PENDING


def _attempted(
    event_id: str, number: int, state: DeliveryState, code: int | None, at: float
) -> OutcomeRecord:
    """An attempt's outcome as the delivery engine records it."""
    error = None if code else "timeout"
    attempt = AttemptRecord(number, at, 7.5, code, error)
    return OutcomeRecord(
        DeliveryRef(event_id, "ep_a"), state, number, None, code, error, at, attempt
    )


def _attempt_rows(store: SqliteStore, event_id: str) -> int:
    with contextlib.closing(sqlite3.connect(store.db_path)) as conn:
        query = "SELECT count(*) FROM attempts WHERE event_id = ?"
        return int(conn.execute(query, (event_id,)).fetchone()[0])


async def test_a_successful_attempt_is_kept_in_its_delivery_row_only(open_sqlite: Any) -> None:
    """Most deliveries succeed at once: they cost no attempts row, and the view still shows it."""
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    at_once, second_try = make_event(endpoints=("ep_a",)), make_event(endpoints=("ep_a",))
    for event in (at_once, second_try):
        await store.append(event)
    await ledger.record([_attempted(at_once.event_id, 1, DeliveryState.DELIVERED, 200, 100.0)])
    await ledger.record([_attempted(second_try.event_id, 1, DeliveryState.RETRY, None, 100.0)])
    await ledger.record([_attempted(second_try.event_id, 2, DeliveryState.DELIVERED, 204, 160.0)])

    assert _attempt_rows(store, at_once.event_id) == 0
    assert _attempt_rows(store, second_try.event_id) == 1  # only the failed one
    record = await store.get_event(at_once.event_id)
    assert record is not None
    (delivery,) = record.deliveries
    assert delivery.state is DeliveryState.DELIVERED
    assert delivery.history == (AttemptRecord(1, 100.0, 7.5, 200, None),)
    record = await store.get_event(second_try.event_id)
    assert record is not None
    assert record.deliveries[0].history == (
        AttemptRecord(1, 100.0, 7.5, None, "timeout"),
        AttemptRecord(2, 160.0, 7.5, 204, None),
    )


async def test_after_a_replay_the_new_attempts_replace_the_old_ones_of_the_same_number(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a",))
    await store.append(event)
    await ledger.record([_attempted(event.event_id, 1, DeliveryState.RETRY, None, 100.0)])
    await ledger.record([_attempted(event.event_id, 2, DeliveryState.DEAD, 500, 160.0)])
    dead = await store.get_event(event.event_id)
    assert dead is not None and [a.attempt for a in dead.deliveries[0].history] == [1, 2]

    await ledger.replay(ReplayFilter(event_id=event.event_id))
    await ledger.record([_attempted(event.event_id, 1, DeliveryState.DELIVERED, 200, 900.0)])
    record = await store.get_event(event.event_id)
    assert record is not None
    (delivery,) = record.deliveries
    assert delivery.state is DeliveryState.DELIVERED and delivery.attempts == 1
    assert delivery.history == (  # attempt 1 is the replay's; 2 is the old dead one
        AttemptRecord(1, 900.0, 7.5, 200, None),
        AttemptRecord(2, 160.0, 7.5, 500, None),
    )


async def test_failing_write_job_is_rolled_back_alone(open_sqlite: Any) -> None:
    store = await open_sqlite()

    def good(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO meta VALUES ('good', 1)")
        return "ok"

    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO meta VALUES ('bad', 1)")
        raise RuntimeError("job bug")

    results = await asyncio.gather(
        store.submit_write(good), store.submit_write(bad), return_exceptions=True
    )
    assert results[0] == "ok"
    assert isinstance(results[1], RuntimeError)
    keys = await store.run_read(lambda c: [r[0] for r in c.execute("SELECT key FROM meta")])
    assert "good" in keys and "bad" not in keys


async def test_on_the_loop_appends_are_acknowledged_before_jobs_of_their_turn_run(
    tmp_path: Path,
) -> None:
    # A ledger round's job can take milliseconds; the events queued in the
    # same loop turn must not wait for it before their 2xx.
    store = SqliteStore(tmp_path / "store", grouping="loop")
    await store.open()
    try:
        appended = [store.append(make_event()) for _ in range(3)]

        def job(conn: sqlite3.Connection) -> list[bool]:
            return [fut.done() for fut in appended]

        assert await store.submit_write(job) == [True, True, True]
        # Jobs are not starved by events that arrive at every turn.
        feeding = True

        async def feed() -> None:
            while feeding:
                store.append(make_event())
                await asyncio.sleep(0)

        feeder = asyncio.create_task(feed())
        try:
            for _ in range(20):
                assert await asyncio.wait_for(store.submit_write(lambda c: 1), 5) == 1
        finally:
            feeding = False
            await feeder
    finally:
        await store.close()


def _sync_level(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA synchronous").fetchone()[0])  # 1 NORMAL, 2 FULL


async def test_unsynced_jobs_skip_the_fsync_only_when_no_job_of_their_cycle_needs_it(
    open_sqlite: Any,
) -> None:
    store = await open_sqlite()
    # Alone (with an event commit in the same cycle): the jobs' COMMIT runs NORMAL,
    # which in WAL mode writes the frames without an fsync.
    _, alone = await asyncio.gather(
        store.append(make_event()), store.submit_write(_sync_level, synced=False)
    )
    assert alone == 1
    # With a job that needs its fsync in the same cycle, the whole cycle is synced
    # (on the loop both are surely in one cycle; a writer thread may split them).
    mixed = await asyncio.gather(
        store.submit_write(_sync_level, synced=False), store.submit_write(_sync_level)
    )
    if store.stats()["grouping"] == "loop":
        assert mixed == [2, 2]
    else:
        assert mixed[1] == 2
    # Afterwards the connection is back to FULL, so event commits still fsync.
    assert await store.submit_write(_sync_level) == 2
    event = make_event()
    assert (await store.append(event)).event_id == event.event_id


async def test_the_ledger_writes_outcomes_without_forcing_an_fsync(open_sqlite: Any) -> None:
    store = await open_sqlite()
    ledger = SqliteLedger(store)
    event = make_event(endpoints=("ep_a",))
    await store.append(event)
    written = ledger.record([_attempted(event.event_id, 1, DeliveryState.DELIVERED, 200, 100.0)])
    ledger.flush()
    # Submitted in the same cycle as the outcomes: no job of it asked for an fsync.
    level = await store.submit_write(_sync_level, synced=False)
    await written
    assert level == 1
    state = await store.run_read(
        lambda c: c.execute(
            "SELECT state FROM deliveries WHERE event_id = ?", (event.event_id,)
        ).fetchone()
    )
    assert state == ("delivered",)


async def test_dedup_stays_exact_after_a_job_deleted_the_newest_events(open_sqlite: Any) -> None:
    # SQLite may reuse the rowids of deleted newest rows; the writer must not
    # mistake a new event for an old one when it sorts out duplicates.
    store = await open_sqlite()
    old = [make_event(provider_event_id=f"old_{i}") for i in range(5)]
    await asyncio.gather(*(store.append(e) for e in old))
    await store.submit_write(
        lambda c: c.execute("DELETE FROM events WHERE provider_event_id IN ('old_3', 'old_4')")
    )
    fresh = make_event(provider_event_id="fresh")
    repeat = make_event(provider_event_id="old_0")
    new, dup = await asyncio.gather(store.append(fresh), store.append(repeat))
    assert (new.event_id, new.duplicate) == (fresh.event_id, False)
    assert (dup.event_id, dup.duplicate) == (old[0].event_id, True)


@pytest.mark.parametrize("grouping", ["loop", "thread"])
async def test_close_stops_threads_and_refuses_further_work(tmp_path: Path, grouping: Any) -> None:
    before = {t.name for t in threading.enumerate()}
    store = SqliteStore(tmp_path / "store", grouping=grouping)
    await store.open()
    await store.append(make_event())
    await store.get_event("evt_x")  # reads run on their own thread
    started = {t.name for t in threading.enumerate()} - before
    expected = {"hookrouter-store-checkpoint", "hookrouter-store-read_0"}
    if grouping == "thread":
        expected.add("hookrouter-store-writer")
    assert expected <= started, started
    await store.close()
    left = {t.name for t in threading.enumerate() if t.name.startswith("hookrouter-store")}
    assert left == set()
    with pytest.raises(StoreUnavailable):
        await store.get_event("evt_x")
    with pytest.raises(StoreUnavailable):
        await store.ping()
    await store.close()  # idempotent
    assert "closed" in repr(store)


async def test_stats_report_grouping_latency_and_checkpoints(open_sqlite: Any) -> None:
    store = await open_sqlite()
    await asyncio.gather(*(store.append(make_event()) for _ in range(40)))
    stats = store.stats()
    for key in (
        "appends",
        "commits",
        "events_per_commit_last",
        "events_per_commit_max",
        "events_per_commit_mean",
        "pending_appends",
        "commit_ms_last",
        "commit_ms_peak",
        "checkpoints",
        "duplicates",
        "failures",
    ):
        assert key in stats
    assert stats["appends"] == 40 and stats["pending_appends"] == 0
    assert stats["commit_ms_peak"] >= stats["commit_ms_last"] > 0


def test_open_store_builds_backends_by_name(tmp_path: Path) -> None:
    store = open_store("sqlite", path=tmp_path / "s")
    assert isinstance(store, SqliteStore)
    assert store.stats() == {"state": "new"}
    with pytest.raises(ConfigError) as unknown:
        open_store("cassandra", path=tmp_path)
    assert unknown.value.issues[0].path == "store.kind"
    assert "sqlite" in unknown.value.issues[0].message
    with pytest.raises(ConfigError):
        open_store("sqlite", path=tmp_path, colour="blue")


async def test_a_bug_in_the_writer_fails_waiters_instead_of_hanging_them(
    open_sqlite: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_sqlite()
    await store.append(make_event())

    def broken(self: Committer, cycle: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Committer, "_commit", broken)
    with pytest.raises(StoreError, match="a bug"):
        await asyncio.wait_for(store.append(make_event()), timeout=10)
    with pytest.raises(StoreUnavailable, match="crashed"):
        store.append(make_event())
    assert "crashed" in caplog.text


async def test_each_event_keeps_its_own_endpoint_list_past_the_spelled_list_cache(
    open_sqlite: Any,
) -> None:
    # sqlite_batch keeps the spelling of the first distinct endpoint lists and
    # spells later ones per event: more distinct lists than it holds, in
    # batches that mix repeated and new ones, must still give every row its
    # own list.
    store = await open_sqlite()
    lists = [(f"ep_{i}",) if i % 3 else (f"ep_{i}", "ep_shared") for i in range(2600)]
    events = [make_event(endpoints=lists[i % len(lists)]) for i in range(3000)]
    await asyncio.gather(*(store.append(e) for e in events))
    with sqlite3.connect(store.db_path) as conn:
        stored = dict(conn.execute("SELECT event_id, endpoints FROM events"))
    conn.close()
    assert len(stored) == len(events)
    for event in events:
        assert tuple(orjson.loads(stored[event.event_id])) == event.endpoint_ids
    assert len(sqlite_batch._SPELLED.texts) <= sqlite_batch.ENDPOINT_LISTS_KEPT  # stays bounded


def test_the_spelled_list_cache_comes_to_hold_the_lists_in_use_after_routes_change() -> None:
    # Full of lists no longer routed to (endpoints replaced over months), the
    # cache starts over after enough misses and then holds the current ones.
    spelled = sqlite_batch.SpelledLists(keep=4, refill_after=10)
    for i in range(4):
        spelled.spell((f"old_{i}",))
    current = ("ep_now",)
    for _ in range(9):
        assert spelled.spell(current) == '["ep_now"]'
    assert current not in spelled.texts  # full: spelled, not kept
    for _ in range(2):
        assert spelled.spell(current) == '["ep_now"]'
    assert current in spelled.texts
    assert not any(key[0].startswith("old_") for key in spelled.texts)
