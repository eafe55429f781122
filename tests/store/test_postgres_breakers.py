"""Breakers any node can read: the owner's writes are fenced by its lease epoch, bounded history.

A real server (the shared one, a schema per test); the partition's owner and
epoch are set by hand, as a lease turn would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.postgres_store import postgres_available, store_options

from hookrouter.store.base import BreakerRange, Entity, StoredBreaker
from hookrouter.store.postgres import PostgresStore, breakers, changes
from hookrouter.store.postgres.breakers import HISTORY, BreakerBoard
from hookrouter.store.postgres.conn import Conn

pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")
TENANT = "acme"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[PostgresStore]:
    opened = PostgresStore(**{**store_options(tmp_path), "node_id": "a"})  # type: ignore[arg-type]
    await opened.open()
    yield opened
    await opened.close()


async def _lease(store: PostgresStore, owner: str, epoch: int, tenant: str = TENANT) -> int:
    partition = store.partition_of(tenant)
    await store.run(
        lambda c: c.execute(
            "UPDATE partitions SET owner = $1, epoch = $2 WHERE partition = $3",
            owner,
            epoch,
            partition,
        )
    )
    return partition


def _unexpected(what: str, exc: BaseException) -> None:
    raise AssertionError(f"{what} failed: {exc}")


def _row(state: str, at: float, signal: str, before: str = "closed") -> StoredBreaker:
    opened = at if state == "open" else None
    return StoredBreaker("e1", TENANT, state, opened, 1, "a", at, ((at, before, state, signal),))


async def _all(board: BreakerBoard) -> list[StoredBreaker]:
    return await board.page(BreakerRange(), 1000)


async def _written(board: BreakerBoard, rows: list[StoredBreaker]) -> None:
    for row in rows:
        board.publish(row)
    await board.stop()  # waits for the queue to be written


async def test_the_owner_writes_each_transition_and_any_node_reads_it(
    store: PostgresStore,
) -> None:
    partition = await _lease(store, "a", 7)
    board = BreakerBoard(store.run, "a", store.partition_of, {partition: 7}, _unexpected)
    await _written(
        board, [_row("open", 100.0, "trip"), _row("half_open", 130.0, "cooldown_elapsed", "open")]
    )
    found = await board.one("e1")
    assert found is not None and found.state == "half_open" and found.node == "a"
    assert [h[3] for h in found.history] == ["cooldown_elapsed", "trip"]  # newest first
    assert [b.endpoint_id for b in await _all(board)] == ["e1"]
    assert board.stats() == {
        "breakers_written": 2, "breakers_fenced": 0, "breakers_failed": 0, "breakers_dropped": 0
    }  # fmt: skip


async def test_a_page_is_read_by_endpoint_id_and_narrowed_by_the_query(
    store: PostgresStore,
) -> None:
    other = next(
        t
        for t in (f"t{i}" for i in range(64))
        if store.partition_of(t) != store.partition_of(TENANT)
    )
    held = {await _lease(store, "a", 7): 7, await _lease(store, "a", 7, other): 7}
    board = BreakerBoard(store.run, "a", store.partition_of, held, _unexpected)

    def row(i: int) -> StoredBreaker:
        state = "open" if i % 3 == 0 else "closed"
        change = (float(i), "half_open", state, "trip")
        return StoredBreaker(
            f"e{i:02d}", TENANT if i % 2 else other, state, None, 1, "a", float(i), (change,)
        )

    await _written(board, [row(i) for i in range(30)])

    async def walk(wanted: BreakerRange, limit: int = 7) -> list[str]:
        seen: list[str] = []
        while True:
            page = await board.page(
                dataclasses.replace(wanted, after=seen[-1] if seen else wanted.after), limit
            )
            assert len(page) <= limit
            seen += [b.endpoint_id for b in page]
            if len(page) < limit:
                return seen

    every = [f"e{i:02d}" for i in range(30)]
    assert await walk(BreakerRange()) == every
    assert await walk(BreakerRange(after="e09", until="e20")) == every[10:21]
    assert await walk(BreakerRange(tripped=True)) == [e for i, e in enumerate(every) if i % 3 == 0]
    assert await walk(BreakerRange(endpoints=["e03", "e04", "e99"])) == ["e03", "e04"]
    skipped = (store.partition_of(other),)
    assert await walk(BreakerRange(skip=skipped)) == every[1::2]  # the other tenant's left out


async def test_a_former_owner_cannot_write_over_the_new_one(store: PostgresStore) -> None:
    partition = await _lease(store, "a", 7)
    stale = BreakerBoard(store.run, "a", store.partition_of, {partition: 7}, _unexpected)
    await _written(stale, [_row("open", 100.0, "trip")])
    await _lease(store, "b", 8)  # taken over: b's breakers start closed
    fresh = BreakerBoard(store.run, "b", store.partition_of, {partition: 8}, _unexpected)
    await fresh.taken([partition], 140.0)
    await _written(stale, [_row("open", 150.0, "probe_failed", "half_open")])  # a, paused, resumes
    found = await fresh.one("e1")
    assert found is not None and (found.state, found.node) == ("closed", "b")
    assert stale.stats()["breakers_fenced"] == 1


async def test_the_history_keeps_the_last_transitions_only(store: PostgresStore) -> None:
    partition = await _lease(store, "a", 7)
    board = BreakerBoard(store.run, "a", store.partition_of, {partition: 7}, _unexpected)
    states = ["open", "half_open"] * (HISTORY + 5)
    await _written(board, [_row(s, float(i), f"s{i}") for i, s in enumerate(states)])
    found = await board.one("e1")
    assert found is not None and len(found.history) == HISTORY
    assert found.history[0][3] == f"s{len(states) - 1}"


async def test_removing_the_endpoint_removes_its_breaker_for_good(store: PostgresStore) -> None:
    partition = await _lease(store, "a", 7)
    board = BreakerBoard(store.run, "a", store.partition_of, {partition: 7}, _unexpected)
    endpoint = Entity("endpoint", "e1", TENANT, {"id": "e1", "tenant": TENANT}, 1.0)
    await store.put_entity(endpoint)
    await _written(board, [_row("open", 100.0, "trip")])
    assert await store.delete_entity("endpoint", "e1")
    assert await _all(board) == []
    # A transition the owner had in flight when it was removed does not bring it back.
    await _written(board, [_row("half_open", 130.0, "cooldown_elapsed", "open")])
    assert await _all(board) == [] and board.stats()["breakers_fenced"] == 1
    await store.put_entity(endpoint)  # made again: its breaker is written again
    await _written(board, [_row("open", 200.0, "trip")])
    assert [b.endpoint_id for b in await _all(board)] == ["e1"]


async def test_transitions_past_the_queue_bound_are_counted_and_logged(
    store: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    partition = await _lease(store, "a", 7)
    board = BreakerBoard(store.run, "a", store.partition_of, {partition: 7}, _unexpected, bound=3)
    with caplog.at_level(logging.WARNING, "hookrouter.store.postgres.breakers"):
        for i, state in enumerate(["open", "half_open", "open", "half_open", "open"]):
            board.publish(_row(state, float(i), f"s{i}"))  # the writer has not run yet
        await board.stop()
    assert board.stats()["breakers_dropped"] == 2
    assert board.stats()["breakers_written"] == 3
    found = await board.one("e1")
    assert found is not None and [h[3] for h in found.history] == ["s4", "s3", "s2"]
    dropped = [r.getMessage() for r in caplog.records]
    assert len(dropped) == 1  # throttled: one line for both
    assert "tenant acme endpoint e1" in dropped[0]


async def test_a_transition_written_while_the_removal_commits_stays_removed(
    store: PostgresStore,
) -> None:
    """The removal holds the change lock, uncommitted, while a transition is written."""
    partition = await _lease(store, "a", 7)
    board = BreakerBoard(store.run, "a", store.partition_of, {partition: 7}, _unexpected)
    await store.put_entity(Entity("endpoint", "e1", TENANT, {"id": "e1"}, 1.0))
    removing, commit = asyncio.Event(), asyncio.Event()

    async def remove(conn: Conn) -> None:
        async with conn.transaction():
            await conn.execute(changes.HOLD)
            await conn.fetchval(changes.DELETE_ENTITY, "endpoint", "e1", None, None)
            removing.set()
            await commit.wait()

    removal = asyncio.create_task(store.run(remove))
    await removing.wait()
    board.publish(_row("open", 100.0, "trip"))
    await asyncio.sleep(0.3)  # the write runs now, or waits for the lock
    commit.set()
    await removal
    await board.stop()
    assert await _all(board) == []
    assert board.stats()["breakers_fenced"] == 1


async def test_a_removal_waits_for_a_transition_being_written_and_removes_it(
    store: PostgresStore,
) -> None:
    """A transition written, uncommitted, when the removal starts: the removal deletes it."""
    partition = await _lease(store, "a", 7)
    await store.put_entity(Entity("endpoint", "e1", TENANT, {"id": "e1"}, 1.0))
    writing, commit = asyncio.Event(), asyncio.Event()

    async def write(conn: Conn) -> bool:
        async with conn.transaction():
            await conn.execute(changes.SHARE)
            landed = await breakers.write_transition(
                conn, _row("open", 100.0, "trip"), partition, 7
            )
            writing.set()
            await commit.wait()
        return landed

    writer = asyncio.create_task(store.run(write))
    await writing.wait()
    removal = asyncio.create_task(store.delete_entity("endpoint", "e1"))
    await asyncio.sleep(0.3)  # the removal runs now, or waits for the lock
    commit.set()
    assert await writer
    assert await removal
    assert await store.run(lambda c: breakers.read_page(c, BreakerRange(), 10)) == []
