"""The delivery ledger on SQLite: delivery-queue queries and outcome group commits.

Every state change *and* every page query is a job on the store's single
writer thread (``SqliteStore.submit_write``), so jobs apply in submission
order: a page query always sees the outcomes recorded before it (the
guarantee ``store/ledger.py`` promises). Bodies are read on the read thread;
the rows they come from were committed before anyone asked for them.

Outcomes are batched: ``record`` only queues; one job per flush writes them
all (the delivery row update with its last attempt, an attempt history row
for attempts that did not deliver, and ``failed`` for events that just ended
failed; ``status`` says why only that), inside the writer's next group
commit. Not writing a row for a successful attempt (schema version 4) cut the
router's CPU per delivered event end to end (``bench.ab --deliver``). The
SQL, and the index each statement relies on, is in ``ledger_sql``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, Protocol, TypeVar

import orjson

import hookrouter.store.sqlite.ledger_sql as sql
from hookrouter.errors import StoreError
from hookrouter.flow.credits import DeliveryRef, new_ref
from hookrouter.log_throttle import LogThrottle
from hookrouter.store.base import FINAL_STATES, OPEN_STATES, DeliveryState
from hookrouter.store.ledger import DeliveryWork, OutcomeRecord, Payload, ReplayFilter, Resumed
from hookrouter.store.sqlite import fanout, partition_files, status, tenant_index
from hookrouter.store.sqlite.partition_sql import On, attached, each
from hookrouter.store.sqlite.partitions import Catalog, Partition, Settled

_DELIVERED: Final = DeliveryState.DELIVERED
# A state's text by member: a dict lookup, where ``.value`` is the enum's
# interpreted property (slow, and read twice per outcome on the flush path).
_TEXT: Final[dict[DeliveryState, str]] = {s: s.value for s in DeliveryState}
# Bound for "no next attempt" and "no error"; the upsert makes them NULL (ledger_sql).
_NO_TIME: Final = -1.0
_NO_TEXT: Final = ""
# Outcomes are written at most every 5 ms, or at once when 512 are queued. Each
# job cycle is a transaction of its own (job commits were a large share of
# router CPU when every loop turn submitted its own, each with an fsync; they
# are unsynced now, see flush). 5 ms of extra delay on an
# outcome's durability only widens the after-a-crash duplicate window; page-ins
# flush first anyway.
FLUSH_DELAY: Final = 0.005
FLUSH_BATCH: Final = 512
# A batch the store could not write (disk full, I/O error) goes back to the
# head of the queue and is written again after this pause. Dropped, its
# deliveries would stay pending in the store, unknown to the engine, until a
# restart; written late, at worst an attempt repeats (at least once anyway).
RETRY_DELAY: Final = 1.0

log = logging.getLogger(__name__)


T = TypeVar("T")


class LedgerHost(Protocol):
    """What the ledger needs of ``SqliteStore``: its loop, writer and read thread.

    A protocol rather than the class, so this module does not import the store
    module that hands out the ledger (``SqliteStore.delivery_ledger``).
    """

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def submit_write(
        self, fn: Callable[[sqlite3.Connection], T], *, synced: bool = True
    ) -> asyncio.Future[T]: ...

    async def run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    @property
    def catalog(self) -> Catalog:
        """The writer's catalog (read it in write jobs)."""
        ...

    def reader_catalog(self) -> Catalog:
        """The read connection's catalog (read it inside ``run_read``)."""
        ...

    @property
    def settled(self) -> Settled:
        """Sealed partitions known to hold no open work (walks after open work skip them)."""
        ...


class SqliteLedger:
    """``DeliveryLedger`` over a ``SqliteStore``."""

    def __init__(self, store: LedgerHost) -> None:
        self._store = store
        self._outcomes: list[OutcomeRecord] = []
        self._flush_future: asyncio.Future[None] | None = None
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._last_job: asyncio.Future[Any] | None = None
        self._last_waiter: asyncio.Future[None]
        self.recorded = 0
        self.write_failures = 0  # outcome batches the store refused (each retried)
        self._backing_off = False  # a batch failed: no early flush before RETRY_DELAY
        self._failure_log = LogThrottle()
        # The periodic materialization (fanout, with promote_due): the
        # newest event the previous round saw, which is this round's bound.
        self._fanout_next: tuple[Partition | None, int] = (None, 0)
        self.fanout_chunk = fanout.ROUND_CHUNK  # events a round materializes at most
        self.tenant_merge_at = tenant_index.MERGE_AT  # events a round lets wait at most
        self.tenant_merge_chunk = tenant_index.MERGE_CHUNK  # events a round merges at most
        self.tenant_compact_chunk = tenant_index.COMPACT_CHUNK  # pairs one compaction step moves
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- writes ------------------------------------------------------------

    def record(self, outcomes: Sequence[OutcomeRecord]) -> asyncio.Future[None]:
        # Not get_running_loop() (a getpid per outcome), nor the store's property
        # (an interpreted call): the store's loop, looked up once.
        loop = self._loop
        if loop is None:
            loop = self._loop = self._store.loop
        self._outcomes.extend(outcomes)
        if self._flush_future is None:
            self._flush_future = loop.create_future()
        if not outcomes or (len(self._outcomes) >= FLUSH_BATCH and not self._backing_off):
            self.flush()  # a barrier, or enough for one job: submit now
            return self._last_waiter
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._timer = loop.call_later(FLUSH_DELAY, self._flush_due)
        return self._flush_future

    def _flush_due(self) -> None:
        self._timer = None
        if self._flush_scheduled:
            self.flush()

    def flush(self) -> None:
        """Submit the queued outcomes as one write job now (idempotent)."""
        self._flush_scheduled = False
        self._backing_off = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        outcomes, self._outcomes = self._outcomes, []
        waiter, self._flush_future = self._flush_future, None
        if waiter is None:
            waiter = self._store.loop.create_future()
        self._last_waiter = waiter
        if not outcomes:
            # Nothing new: the caller still waits for what was submitted before.
            if not waiter.done():
                last = self._last_job
                if last is not None and not last.done():
                    _chain(last, waiter)
                else:
                    waiter.set_result(None)
            return
        self.recorded += len(outcomes)
        try:
            # Unsynced: a lost outcome is a repeated delivery (batch.commit_jobs).
            job = self._store.submit_write(
                lambda conn: _write_outcomes(conn, self._store, outcomes), synced=False
            )
        except Exception as exc:  # the store is closed: nothing more can be written
            if not waiter.done():
                waiter.set_exception(exc)
                waiter.exception()  # reported to whoever awaits it, not as "never retrieved"
            return
        self._last_job = job
        job.add_done_callback(lambda done: self._written(done, outcomes, waiter))

    def _written(
        self, job: asyncio.Future[Any], outcomes: list[OutcomeRecord], waiter: asyncio.Future[None]
    ) -> None:
        """A flush's job ended: settle its waiter; on a store failure, queue the outcomes again.

        One callback per flush does both: under light load a flush carries few
        outcomes, so its fixed cost counts per event.
        """
        _settle(job, waiter)
        if job.cancelled():
            return
        exc = job.exception()
        if exc is None:
            return
        if waiter.done() and not waiter.cancelled():
            waiter.exception()  # logged below; awaiting callers still get it
        if not isinstance(exc, StoreError):  # a bug, not the disk: retrying would not help
            log.error("writing %d delivery outcomes failed", len(outcomes), exc_info=exc)
            return
        self.write_failures += 1
        self.recorded -= len(outcomes)
        self._outcomes[:0] = outcomes  # before newer ones: each delivery's outcomes in order
        loop = self._store.loop
        skipped = self._failure_log.should_log(loop.time())
        if skipped is not None:
            log.warning(
                "writing %d delivery outcomes failed (%s); retrying in %.0f s%s",
                len(outcomes),
                exc,
                RETRY_DELAY,
                f" ({skipped} more failures since the last message)" if skipped else "",
            )
        if self._timer is not None:
            self._timer.cancel()
        self._backing_off = self._flush_scheduled = True
        self._timer = loop.call_later(RETRY_DELAY, self._flush_due)

    def _fanout_round(self, conn: sqlite3.Connection) -> None:
        """Materialize up to the newest event the previous round saw, a chunk at most.

        The tenant index's merge rides along (``tenant_index``).

        By then nearly all of those deliveries have their outcome row
        (``fanout``); the chunk bounds the job (and the loop's stall)
        after a pause with no rounds, and the next rounds catch up.
        """
        catalog = self._store.catalog
        # Sealed partitions take late events only through the writer, which
        # attaches them to insert: the ones not attached now took none lately
        # (and whatever needs their rows materializes them first: page-in,
        # counts, retention's ``mark_if_idle``).
        settled = self._store.settled
        for older in catalog.partitions[:-1]:
            if attached(conn, older) and not settled.skip(older):
                part = On(conn, older)
                fanout.materialize(part)
                # its last, late events
                merged = tenant_index.merge(part, least=1, most=self.tenant_merge_chunk)
                self._compact(part, merged)
        newest = On(conn, catalog.newest)
        # Once a batch waits, a chunk at most (tenant_index).
        merged = tenant_index.merge(newest, self.tenant_merge_at, self.tenant_merge_chunk)
        self._compact(newest, merged)
        (seen, upto), newest_rowid = self._fanout_next, fanout.newest_rowid(newest)
        self._fanout_next = (catalog.newest, newest_rowid)
        current = fanout.watermark(newest)
        if current is not None and seen == catalog.newest:
            fanout.materialize(newest, min(upto, current + self.fanout_chunk))

    def _compact(self, part: On, merged: int) -> None:
        """The tenant index's compaction, paced by the events just merged (``tenant_index``)."""
        tenant_index.compact_for(part, merged, self.tenant_merge_at, self.tenant_compact_chunk)

    async def _write(self, fn: Any) -> Any:
        self.flush()  # earlier outcomes first: the ordering guarantee
        return await self._store.submit_write(fn)

    async def _materialized(self) -> None:
        """Every fresh delivery committed so far has its row (before a read that needs them)."""

        def job(conn: sqlite3.Connection) -> None:
            settled = self._store.settled
            for part in _open(each(conn, self._store.catalog), settled):
                fanout.materialize(part)
                if part.partition.end is not None and partition_files.idle(part):
                    settled.add(part.partition)  # later walks skip it

        await self._write(job)

    async def page_pending(
        self, tenant_id: str, endpoint_id: str, after: DeliveryRef | None, limit: int
    ) -> list[DeliveryRef]:
        def job(conn: sqlite3.Connection) -> list[DeliveryRef]:
            found: list[DeliveryRef] = []
            parts = _oldest_first(conn, self._store.catalog, after)
            for part in _open(parts, self._store.settled):
                fanout.materialize(part)  # spilled deliveries may still be fresh
                left = limit - len(found)
                if after is None:
                    rows = part.execute(sql.PAGE_ALL, (tenant_id, endpoint_id, left))
                else:
                    rows = part.execute(sql.PAGE_FROM, (tenant_id, endpoint_id, after[0], left))
                found += [new_ref(r[0], r[1]) for r in rows]
                if len(found) >= limit:
                    break
            return found

        result: list[DeliveryRef] = await self._write(job)
        return result

    async def promote_due(self, now: float, limit: int) -> list[tuple[str, DeliveryRef]]:
        # The engine asks every poll (0.25 s): the periodic materialization rides along.
        def job(conn: sqlite3.Connection) -> list[tuple[str, DeliveryRef]]:
            self._fanout_round(conn)
            rows: list[Any] = []
            for part in _open(each(conn, self._store.catalog), self._store.settled):
                rows += part.execute(sql.PROMOTE_DUE, (now, limit - len(rows))).fetchall()
                if len(rows) >= limit:
                    break
            rows.sort(key=lambda r: r[3])  # RETURNING has no defined order
            return [(r[0], new_ref(r[1], r[2])) for r in rows]

        result: list[tuple[str, DeliveryRef]] = await self._write(job)
        return result

    async def park_pending(self, tenant_id: str, endpoint_id: str, now: float, limit: int) -> int:
        def job(conn: sqlite3.Connection) -> int:
            parked = 0
            for part in _open(_oldest_first(conn, self._store.catalog, None), self._store.settled):
                fanout.materialize(part)
                left = limit - parked
                parked += part.execute(
                    sql.PARK_PENDING, (now, tenant_id, endpoint_id, left)
                ).rowcount
                if parked >= limit:
                    break
            return parked

        result: int = await self._write(job)
        return result

    async def resume_parked(
        self, tenant_id: str, endpoint_id: str, limit: int | None = None
    ) -> Resumed:
        def job(conn: sqlite3.Connection) -> Resumed:
            rows: list[Any] = []
            for part in _open(_oldest_first(conn, self._store.catalog, None), self._store.settled):
                left = -1 if limit is None else limit - len(rows)
                rows += part.execute(sql.RESUME_PARKED, (tenant_id, endpoint_id, left)).fetchall()
                if limit is not None and len(rows) >= limit:
                    break
            oldest = min((DeliveryRef(r[0], r[1]) for r in rows), default=None)
            return Resumed(tenant_id, endpoint_id, len(rows), oldest)

        result: Resumed = await self._write(job)
        return result

    async def replay(self, selection: ReplayFilter, limit: int = 10_000) -> list[Resumed]:
        where, params = sql.replay_where(selection)

        def job(conn: sqlite3.Connection) -> list[Resumed]:
            rows: list[Any] = []
            catalog = self._store.catalog
            for part in _oldest_first(conn, catalog, None):
                if not _overlaps(catalog, part.partition, selection):
                    continue
                done = part.execute(sql.replay_sql(where), (*params, limit - len(rows))).fetchall()
                part.executemany(status.REOPEN, [(e,) for e in {r[1] for r in done}])
                if done:  # open work again: walks must visit it
                    self._store.settled.discard(part.partition)
                rows += done
                if len(rows) >= limit:
                    break
            per: dict[tuple[str, str], list[DeliveryRef]] = {}
            for tenant, event_id, endpoint_id in rows:
                per.setdefault((tenant, endpoint_id), []).append(DeliveryRef(event_id, endpoint_id))
            return [Resumed(t, e, len(refs), min(refs)) for (t, e), refs in per.items()]

        result: list[Resumed] = await self._write(job)
        return result

    async def count_replayable(self, selection: ReplayFilter) -> int:
        where, params = sql.replay_where(selection)

        def read(conn: sqlite3.Connection) -> int:
            query = f"SELECT count(*) FROM deliveries d WHERE {where}"
            catalog = self._store.reader_catalog()
            return sum(
                int(part.execute(query, params).fetchone()[0])
                for part in each(conn, catalog)
                if _overlaps(catalog, part.partition, selection)
            )

        return await self._store.run_read(read)

    # ---- reads -------------------------------------------------------------

    async def load(self, refs: Sequence[DeliveryRef]) -> list[DeliveryWork]:
        wanted = list(refs)

        def read(conn: sqlite3.Connection) -> list[DeliveryWork]:
            pairs = orjson.dumps([[ref.event_id, ref.endpoint_id] for ref in wanted])
            catalog = self._store.reader_catalog()
            if len(catalog.partitions) == 1:
                rows = sorted(conn.execute(sql.LOAD, (pairs,)).fetchall())  # in ``refs`` order
            else:
                rows = sorted(_load_across(conn, catalog, wanted))
            return [
                DeliveryWork(
                    wanted[row[0]], row[1], row[2], row[3], Payload(bytes(row[4]), row[5], row[6])
                )
                for row in rows
            ]

        return await self._store.run_read(read)

    async def pending_endpoints(self) -> list[Resumed]:
        await self._materialized()  # after a crash: what was fresh is pending work too

        def read(conn: sqlite3.Connection) -> list[Resumed]:
            merged: dict[tuple[str, str], tuple[int, str]] = {}
            for part in _open(each(conn, self._store.reader_catalog()), self._store.settled):
                for t, e, n, oldest in part.execute(sql.PENDING_ENDPOINTS):
                    count, first = merged.get((t, e), (0, oldest))
                    merged[t, e] = (count + n, min(first, oldest))
            return [Resumed(t, e, n, DeliveryRef(o, e)) for (t, e), (n, o) in merged.items()]

        return await self._store.run_read(read)

    async def state_counts(
        self, states: Collection[DeliveryState] | None = None
    ) -> dict[tuple[str, DeliveryState], int]:
        query = sql.state_counts_sql(states)
        await self._materialized()  # fresh deliveries are pending ones
        # Settled partitions hold no open delivery, but may hold final ones.
        only_open = states is not None and all(s in OPEN_STATES for s in states)

        def read(conn: sqlite3.Connection) -> dict[tuple[str, DeliveryState], int]:
            counts: dict[tuple[str, DeliveryState], int] = {}
            parts = each(conn, self._store.reader_catalog())
            for part in _open(parts, self._store.settled) if only_open else parts:
                for r in part.execute(query):
                    key = (r[0], DeliveryState(r[1]))
                    counts[key] = counts.get(key, 0) + r[2]
            return counts

        return await self._store.run_read(read)

    def __repr__(self) -> str:
        return f"SqliteLedger(queued={len(self._outcomes)}, recorded={self.recorded})"


def _oldest_first(
    conn: sqlite3.Connection, catalog: Catalog, after: DeliveryRef | None
) -> list[On]:
    """``conn`` on each partition oldest first, from the one holding ``after`` on."""
    parts = [On(conn, p) for p in catalog.partitions]
    if after is None or len(parts) == 1:
        return parts
    floor = after[0]
    return [
        p for p in parts if p.partition.end is None or floor < sql.event_id_floor(p.partition.end)
    ]


def _open(parts: list[On], settled: Settled) -> list[On]:
    """The partitions of ``parts`` that may hold open work (``partitions.Settled``)."""
    if not len(settled):
        return parts
    return [p for p in parts if not settled.skip(p.partition)]


def _overlaps(catalog: Catalog, partition: Partition, selection: ReplayFilter) -> bool:
    """Whether a replay's window (or its one event) can have deliveries in ``partition``."""
    if selection.event_id is not None:
        return catalog.holding(selection.event_id) == partition
    since, until = selection.since, selection.until
    return (until is None or partition.start < until) and (
        since is None or partition.end is None or since < partition.end
    )


def _load_across(
    conn: sqlite3.Connection, catalog: Catalog, wanted: list[DeliveryRef]
) -> list[tuple[Any, ...]]:
    """``LOAD``'s rows for refs spread over partitions, keyed by their place in ``wanted``."""
    groups: dict[Partition, list[int]] = {}
    for index, ref in enumerate(wanted):
        groups.setdefault(catalog.holding(ref.event_id), []).append(index)
    rows: list[tuple[Any, ...]] = []
    for partition, indexes in groups.items():
        pairs = orjson.dumps([[wanted[i].event_id, wanted[i].endpoint_id] for i in indexes])
        for row in On(conn, partition).execute(sql.LOAD, (pairs,)):
            rows.append((indexes[row[0]], *row[1:]))
    return rows


def _write_outcomes(
    conn: sqlite3.Connection, store: LedgerHost, outcomes: Sequence[OutcomeRecord]
) -> None:
    """Each outcome into the partition of its event (the one its id names)."""
    catalog = store.catalog
    if len(catalog.partitions) == 1:
        _write_outcomes_in(conn, outcomes)
        return
    groups: dict[Partition, list[OutcomeRecord]] = {}
    for o in outcomes:
        groups.setdefault(catalog.holding(o.ref.event_id), []).append(o)
    settled = store.settled
    for partition, group in groups.items():
        # A settled partition has no open delivery to get an outcome (lifecycle):
        # should one reopen anyway, walks must see it.
        if settled.skip(partition) and any(o.state in OPEN_STATES for o in group):
            settled.discard(partition)
        _write_outcomes_in(On(conn, partition), group)


def _write_outcomes_in(conn: sqlite3.Connection | On, outcomes: Sequence[OutcomeRecord]) -> None:
    # Decisions made without an attempt (park, disable a removed endpoint, wait
    # for an endpoint's rate limit) keep the delivery's attempt count and last result.
    conn.executemany(
        sql.SET_STATE,
        [
            (_TEXT[o.state], o.next_attempt_at, o.at, o.ref.event_id, o.ref.endpoint_id)
            for o in outcomes
            if o.attempt is None
        ],
    )
    updates, attempts = _attempt_rows(outcomes)
    _upsert_deliveries(conn, updates)
    if attempts:
        conn.executemany(sql.INSERT_ATTEMPT, attempts)
    # Only final states can make an event failed (status); one statement
    # for the whole batch, a deliveries probe per event, except for events the
    # engine knows were settled as delivered (their only delivery succeeded).
    finished = {o.ref.event_id for o in outcomes if o.state in FINAL_STATES and not o.settles_event}
    if finished:
        conn.execute(status.MARK_FAILED, (orjson.dumps(list(finished)).decode(),))


def _upsert_deliveries(conn: sqlite3.Connection | On, updates: list[tuple[Any, ...]]) -> None:
    """Write the delivery rows of ``updates`` (12 parameters each, the tenant last).

    Rows whose tenant the engine gave go in without a lookup of their event;
    if one of those events was deleted meanwhile the foreign key refuses the
    batch midway, and the whole batch is written again in the guarded form,
    which skips it (rewriting the rows already written is harmless).
    """
    known = [row for row in updates if row[11] is not None]
    unknown = [row[:11] for row in updates if row[11] is None] if len(known) < len(updates) else []
    if known:
        try:
            conn.executemany(sql.UPDATE_DELIVERY, known)
        except sqlite3.IntegrityError:
            unknown += [row[:11] for row in known]
    if unknown:
        conn.executemany(sql.UPDATE_DELIVERY_GUARDED, unknown)


def _attempt_rows(
    outcomes: Sequence[OutcomeRecord],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Parameters of the delivery upserts (``_upsert_deliveries``) and of INSERT_ATTEMPT.

    A successful attempt lives only in its delivery's row (schema version 4):
    most deliveries succeed at once and then cost no ``attempts`` row.
    """
    updates: list[tuple[Any, ...]] = []
    attempts: list[tuple[Any, ...]] = []
    for o in outcomes:
        a = o.attempt
        if a is None:
            continue
        ref = o.ref
        updates.append(
            (
                _TEXT[o.state],
                o.attempts,
                _NO_TIME if o.next_attempt_at is None else o.next_attempt_at,
                o.status_code,
                _NO_TEXT if o.error is None else o.error,
                o.at,
                a.attempt,
                a.started_at,
                a.duration_ms,
                ref.event_id,
                ref.endpoint_id,
                o.tenant_id,
            )
        )
        if o.state is not _DELIVERED:
            attempts.append(
                (
                    ref.event_id,
                    ref.endpoint_id,
                    a.attempt,
                    a.started_at,
                    a.duration_ms,
                    a.status_code,
                    a.error,
                    a.response_excerpt,
                )
            )
    return updates, attempts


def _settle(fut: asyncio.Future[Any], target: asyncio.Future[None]) -> None:
    """Give ``target`` the outcome of the finished ``fut``."""
    if target.done():
        return
    if fut.cancelled():
        target.cancel()
    elif (exc := fut.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(None)


def _chain(source: asyncio.Future[Any], target: asyncio.Future[None]) -> None:
    source.add_done_callback(lambda fut: _settle(fut, target))


__all__ = ["SqliteLedger"]
