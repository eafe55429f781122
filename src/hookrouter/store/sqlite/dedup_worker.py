"""The dedup worker: writes flushed hot tiers as runs and merges runs, on its own thread.

It owns the only connection that writes ``dedup.db`` (``dedup``), so
its work never waits for, or holds, the events writer. A flush is one
transaction: the keys go in unsorted with ``executemany`` (the GIL is
released at every row, so the event loop is not held up, and the new run
stays in the connection's cache until the commit, so each page is still
written once). A merge is a series of transactions of ``MERGE_CHUNK`` keys
(hash ranges cut on the largest input) whose SQL runs without the GIL, with
a rest after each as long as it took (``MERGE_DUTY``); the replaced runs
are dropped whole. Merges drop entries of events older than
the oldest stored event (what retention deletes, almost always); the rare
entry of a deleted event younger than that stays until a later merge, and
probes confirm every hit, so it never answers.

Publishing order, and why inputs wait before they are dropped: see
``dedup_tiers``.

Failure: a flush or merge that fails (disk full, I/O error) is rolled back
and retried after ``RETRY_SECONDS``; until a flush succeeds its keys stay in
the flushing tier in memory, so answers stay exact meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Final

import orjson
from rbloom import Bloom

from hookrouter.store.sqlite.dedup import create_run_sql, run_table
from hookrouter.store.sqlite.dedup_tiers import DedupTiers, Run, key_hash

log = logging.getLogger(__name__)

MERGE_CHUNK: Final = 16_384  # keys per merge transaction (a few ms of the worker)
# Share of wall time a merge may keep the worker busy: after each chunk it
# rests as long as the chunk took. A merge's size grows with the store (the
# top level holds most keys); run flat out, its CPU and the burst of pages it
# dirties stalled the commits beside it (docs/performance.md, issue 34).
MERGE_DUTY: Final = 0.5
RETRY_SECONDS: Final = 1.0
_PIN_POLL_SECONDS: Final = 0.001

# Hash ranges are closed intervals [?1, ?2] of the signed 64-bit key hashes,
# written so that SQLite seeks each input's primary key to the range: with
# "?1 IS NULL OR h > ?1" it scanned every input whole for every chunk, which
# made a merge quadratic in its size (a 2M-key merge read 34M rows).
_HASH_MIN: Final = -(1 << 63)
_HASH_MAX: Final = (1 << 63) - 1
_CUT: Final = "SELECT h FROM {table} WHERE h >= ?1 ORDER BY h LIMIT 1 OFFSET ?2"
# A flush's rows go to SQLite a chunk per statement, as one JSON array, not one
# step per row: Python's sqlite3 drops and retakes the GIL around every step,
# and with the event loop busy each retake was a futex hand-off on both threads.
# The chunks keep each hold of the GIL short (hashing and filling the filter
# need it): a whole flush in a single statement held it long enough to raise
# ingest p99 several times over.
GIL_CHUNK: Final = 512  # keys (or read-back hashes) per hold of the GIL: a short hold
# The chunks are staged in a temporary table (in memory: temp_store) and copied
# into the run in one sorted statement, so the run's b-tree is filled in key
# order: inserted chunk by chunk (each sorted, the chunks in random order
# relative to each other) the flush cost more per key than staged.
_STAGE: Final = "CREATE TEMP TABLE IF NOT EXISTS flush_stage (h INTEGER, event_id TEXT)"
# A chunk travels as one JSON object {"hash": "event id", ...}: json_each then
# hands over each member's name and value as they are, where an array of
# [hash, id] pairs needed two json_extract calls, each parsing the pair again
# (about three times the cost). A chunk whose hashes repeat (two keys
# colliding on 64 bits: a dict would keep one) goes as pairs instead.
_FLUSH: Final = (
    "INSERT INTO temp.flush_stage (h, event_id)"
    " SELECT CAST(key AS INTEGER), value FROM json_each(?1)"
)
_FLUSH_PAIRS: Final = (
    "INSERT INTO temp.flush_stage (h, event_id)"
    " SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1)"
)
_COPY_STAGED: Final = (
    "INSERT INTO {table} (h, event_id) SELECT h, event_id FROM temp.flush_stage ORDER BY 1, 2"
)
# Up to ?3 hashes of a merged run from ?1 on (to ?2), as one JSON array, and the last one.
_READ_BACK: Final = (
    "SELECT json_group_array(h), max(h), count(*) FROM"
    " (SELECT h FROM {table} WHERE h BETWEEN ?1 AND ?2 ORDER BY h LIMIT ?3)"
)


def _write_flush_rows(
    conn: sqlite3.Connection,
    table: str,
    batch: dict[str, str],
    bloom: Bloom,
    summary: Bloom | None,
) -> None:
    """Write a flush's (hash, event id) rows into ``table``, adding each hash to the filters."""
    add, items = bloom.add, iter(batch.items())
    add_to_summary = summary.add if summary is not None else None
    conn.execute(_STAGE)
    conn.execute("DELETE FROM temp.flush_stage")  # left over by a flush that failed
    while chunk := list(itertools.islice(items, GIL_CHUNK)):
        by_hash: dict[int, str] = {}
        for key, event_id in chunk:
            hashed = key_hash(key)
            add(hashed)
            if add_to_summary is not None:
                add_to_summary(hashed)
            by_hash[hashed] = event_id
        if len(by_hash) == len(chunk):
            payload = orjson.dumps(by_hash, option=orjson.OPT_NON_STR_KEYS)
            conn.execute(_FLUSH, (payload,))  # the step runs without the GIL
        else:
            pairs = [(key_hash(key), event_id) for key, event_id in chunk]
            conn.execute(_FLUSH_PAIRS, (orjson.dumps(pairs),))
    conn.execute(_COPY_STAGED.format(table=table))
    conn.execute("DELETE FROM temp.flush_stage")


def _fill_filter(conn: sqlite3.Connection, table: str, low: int, high: int, bloom: Bloom) -> None:
    """Add the hashes of ``table`` in [low, high] to ``bloom``, ``GIL_CHUNK`` per statement."""
    sql = _READ_BACK.format(table=table)
    while True:
        text, top, count = conn.execute(sql, (low, high, GIL_CHUNK)).fetchone()
        if count:
            bloom.update(orjson.loads(text))
        # Equal hashes cut by the LIMIT are skipped below: the filter has that hash already.
        if count < GIL_CHUNK or top >= high:
            return
        low = top + 1


def _merge_sql(inputs: tuple[Run, ...], out: int) -> str:
    """Copy one hash range of ``inputs`` into run ``out`` (in order: whole pages)."""
    arms = " UNION ALL ".join(
        f"SELECT h, event_id FROM {run_table(r.run_id)}"
        " WHERE h BETWEEN ?1 AND ?2 AND event_id >= ?3"
        for r in inputs
    )
    return (
        f"INSERT INTO {run_table(out)} (h, event_id) SELECT h, event_id FROM ({arms})"
        " WHERE 1 ORDER BY 1, 2 ON CONFLICT DO NOTHING"
    )


class DedupWorker:
    """Flushes and merges for one store's ``DedupTiers`` (see module docstring)."""

    def __init__(self, conn: sqlite3.Connection, tiers: DedupTiers) -> None:
        self.conn = conn
        self.tiers = tiers
        self._queue: queue.SimpleQueue[tuple[dict[str, str], int] | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="hookrouter-store-dedup", daemon=True
        )
        row = conn.execute("SELECT coalesce(max(run), 0) FROM runs").fetchone()
        self._next_run = int(row[0]) + 1
        self._working = False
        self.merge_duty = MERGE_DUTY
        self.cpu_seconds = 0.0  # this thread's CPU in flushes and merges
        self.flushes = 0
        self.merges = 0
        self.summaries = 0  # summary filters built (TierPolicy.new_summary)
        self.failures = 0
        self.last_error: str | None = None

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Finish the step under way, then stop; unfinished work is redone at the next open."""
        self._stop.set()
        self._queue.put(None)
        self._thread.join()
        self.conn.close()

    def flush(self, batch: dict[str, str], upto_rowid: int) -> None:
        """Any thread: write ``batch`` (the rotated hot tier) as a level-0 run."""
        self._queue.put((batch, upto_rowid))

    # ---- the thread ----------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            item = self._queue.get()
            if item is None:
                return
            self._working = True
            started = time.thread_time()
            try:
                self._work(*item)
            finally:
                self.cpu_seconds += time.thread_time() - started
                self._working = False

    def _work(self, batch: dict[str, str], upto: int) -> None:
        """One flush, then every merge it makes due, then a new summary if it is full."""
        self._flush_until_done(batch, upto)
        while not self._stop.is_set() and (inputs := self.tiers.merge_candidate()):
            while not self._retrying(functools.partial(self._merge, inputs)):
                if self._stop.wait(RETRY_SECONDS):
                    return
        if not self._stop.is_set() and self.tiers.summary_due():
            self._retrying(self._rebuild_summary)  # if it fails, the next flush tries again

    def _rebuild_summary(self) -> None:
        """A bigger summary, read from every run's hashes; then it replaces the old one.

        No flush may publish meanwhile (its run would be missing from the new
        summary): unlike a merge, this does not let a waiting flush go first.
        It runs once per doubling of the runs' keys (``TierPolicy.new_summary``).
        """
        tiers = self.tiers
        runs = tiers.runs
        run_keys = sum(r.keys for r in runs)
        summary, capacity = tiers.policy.new_summary(run_keys)
        for run in runs:
            _fill_filter(self.conn, run_table(run.run_id), _HASH_MIN, _HASH_MAX, summary)
        tiers.install_summary(summary, capacity - run_keys)
        self.summaries += 1

    def _flush_until_done(self, batch: dict[str, str], upto: int) -> None:
        while not self._retrying(functools.partial(self._write_flush, batch, upto)):
            if self._stop.wait(RETRY_SECONDS):
                return

    def _flush_waiting(self) -> None:
        """Between merge chunks: a flush that waits goes first (the hot tier stays bounded)."""
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return
        if item is None:
            self._stop.set()
            return
        self._flush_until_done(*item)

    def _retrying(self, step: Callable[[], None]) -> bool:
        """Run one flush or merge; False (logged, counted, rolled back) if it raised."""
        try:
            step()
        except Exception as exc:  # a bug too: the thread must live on, or the hot tier grows
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("hookrouter dedup worker: %s; retrying", self.last_error, exc_info=exc)
            with contextlib.suppress(sqlite3.Error):
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
            return False
        return True

    def _new_run_id(self) -> int:
        run_id, self._next_run = self._next_run, self._next_run + 1
        return run_id

    def _write_flush(self, batch: dict[str, str], upto: int) -> None:
        conn, run_id = self.conn, self._new_run_id()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(create_run_sql(run_id))
        tiers = self.tiers
        bloom = tiers.policy.new_filter(len(batch))
        summary = tiers.summary  # the worker is the only thread that replaces it
        _write_flush_rows(conn, run_table(run_id), batch, bloom, summary)
        conn.execute(
            "INSERT INTO runs (run, level, keys, state) VALUES (?, 0, ?, 'live')",
            (run_id, len(batch)),
        )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'flushed_rowid'", (upto,))
        conn.execute("COMMIT")
        tiers.summary_room -= len(batch)
        tiers.publish(Run(run_id, 0, len(batch), bloom), flushed=True)
        self.flushes += 1

    def _merge(self, inputs: tuple[Run, ...]) -> None:
        out = self._new_run_id()
        try:
            self._write_merge(inputs, out)
        except Exception:
            self._drop_building(out)
            raise

    def _drop_building(self, run_id: int) -> None:
        """Best effort after a failed merge (the next open drops it otherwise)."""
        conn = self.conn
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute(f"DROP TABLE IF EXISTS {run_table(run_id)}")
            conn.execute("DELETE FROM runs WHERE run = ?", (run_id,))
        except sqlite3.Error:
            pass

    def _write_merge(self, inputs: tuple[Run, ...], out: int) -> None:
        conn = self.conn
        level = max(r.level for r in inputs) + 1
        oldest = conn.execute("SELECT min(event_id) FROM ev.events").fetchone()[0]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(create_run_sql(out))
        conn.execute(
            "INSERT INTO runs (run, level, keys, state) VALUES (?, ?, 0, 'building')", (out, level)
        )
        conn.execute("COMMIT")
        copied = self._copy_ranges(inputs, out, oldest)
        if copied is None:
            return  # stopping: the building run is dropped at the next open
        count, bloom = copied
        merged = Run(out, level, count, bloom)
        replaced = tuple(r.run_id for r in inputs)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE runs SET state = 'live', keys = ? WHERE run = ?", (count, out))
        conn.executemany("UPDATE runs SET state = 'dead' WHERE run = ?", ((r,) for r in replaced))
        conn.execute("COMMIT")
        generation = self.tiers.publish(merged, replaces=replaced)
        while not self.tiers.pins.clear_of(generation):
            time.sleep(_PIN_POLL_SECONDS)  # a probe is microseconds long
        conn.execute("BEGIN IMMEDIATE")
        for run_id in replaced:
            conn.execute(f"DROP TABLE {run_table(run_id)}")
        conn.executemany("DELETE FROM runs WHERE run = ?", ((r,) for r in replaced))
        conn.execute("COMMIT")
        self.merges += 1

    def _copy_ranges(
        self, inputs: tuple[Run, ...], out: int, oldest: str | None
    ) -> tuple[int, Bloom] | None:
        """Copy ``inputs`` into run ``out`` one hash range at a time; (keys, filter), or None.

        The filter is filled range by range (a read-back of what was just
        written), so a flush that waits between ranges never waits for a scan
        of the whole run. None: stopped half way.
        """
        conn = self.conn
        largest = run_table(max(inputs, key=lambda r: r.keys).run_id)
        copy, cut = _merge_sql(inputs, out), _CUT.format(table=largest)
        bloom = self.tiers.policy.new_filter(sum(r.keys for r in inputs))
        low, count = _HASH_MIN, 0
        while True:
            self._flush_waiting()
            if self._stop.is_set():
                return None
            chunk_started = time.monotonic()
            found = conn.execute(cut, (low, MERGE_CHUNK - 1)).fetchone()
            high = _HASH_MAX if found is None else int(found[0])
            conn.execute("BEGIN IMMEDIATE")
            count += conn.execute(copy, (low, high, oldest)).rowcount
            conn.execute("COMMIT")
            _fill_filter(conn, run_table(out), low, high, bloom)
            if high == _HASH_MAX:
                return count, bloom
            low = high + 1
            self._rest_after(time.monotonic() - chunk_started)

    def _rest_after(self, busy: float) -> None:
        """Pause so that a merge keeps the worker busy ``merge_duty`` of the time at most."""
        if self.merge_duty < 1.0:
            self._stop.wait(busy * (1.0 / self.merge_duty - 1.0))

    def settled(self) -> bool:
        """Nothing to flush or merge right now (tests wait for this)."""
        tiers = self.tiers
        return (
            self._queue.empty()
            and not self._working
            and tiers.flushing is None
            and tiers.merge_candidate() is None
        )

    def stats(self) -> dict[str, float | str | None]:
        """Counters for metrics and tests."""
        return {
            "worker_cpu_seconds": self.cpu_seconds,
            "flushes": self.flushes,
            "merges": self.merges,
            "summaries": self.summaries,
            "failures": self.failures,
            "last_error": self.last_error,
        }
