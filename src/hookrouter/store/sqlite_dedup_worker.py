"""The dedup worker: writes flushed hot tiers as runs and merges runs, on its own thread.

It owns the only connection that writes ``dedup.db`` (``sqlite_dedup``), so
its work never waits for, or holds, the events writer: a flush is one
transaction of ``hot_limit`` keys sorted by SQLite, a merge is a series of
transactions of ``MERGE_CHUNK`` keys each (key ranges cut on the largest
input), and the SQL of both runs without the GIL. Merges drop entries whose
event no longer exists, which is how keys of events deleted by retention
leave the index.

Publishing order, and why inputs wait before they are deleted: see
``dedup_tiers``.

Failure: a flush or merge that fails (disk full, I/O error) is rolled back
and retried after ``RETRY_SECONDS``; until a flush succeeds its keys stay in
the flushing tier in memory, so answers stay exact meanwhile.
"""

from __future__ import annotations

import functools
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Final

import orjson
from rbloom import Bloom

from hookrouter.store.dedup_tiers import DedupTiers, Run

log = logging.getLogger(__name__)

MERGE_CHUNK: Final = 16_384  # keys per merge transaction (~20-40 ms of the worker)
RETRY_SECONDS: Final = 1.0
_PIN_POLL_SECONDS: Final = 0.001

_FLUSH: Final = """
INSERT INTO keys (run, key, event_id)
SELECT ?1, value ->> 0, value ->> 1 FROM json_each(?2) WHERE 1 ORDER BY 2
ON CONFLICT DO NOTHING"""
_CUT: Final = "SELECT key FROM keys WHERE run = ? AND key > ? ORDER BY key LIMIT 1 OFFSET ?"
_MERGE: Final = """
INSERT INTO keys (run, key, event_id)
SELECT ?1, k.key, k.event_id FROM keys AS k
WHERE k.run IN (SELECT value FROM json_each(?2)) AND k.key > ?3 AND (?4 IS NULL OR k.key <= ?4)
    AND EXISTS (SELECT 1 FROM ev.events AS e WHERE e.event_id = k.event_id)
ORDER BY k.key
ON CONFLICT DO NOTHING"""


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
        self.flushes = 0
        self.merges = 0
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
            try:
                self._work(*item)
            finally:
                self._working = False

    def _work(self, batch: dict[str, str], upto: int) -> None:
        """One flush, then every merge it makes due."""
        while not self._retrying(functools.partial(self._write_flush, batch, upto)):
            if self._stop.wait(RETRY_SECONDS):
                return
        while not self._stop.is_set() and (inputs := self.tiers.merge_candidate()):
            while not self._retrying(functools.partial(self._merge, inputs)):
                if self._stop.wait(RETRY_SECONDS):
                    return

    def _retrying(self, step: Callable[[], None]) -> bool:
        """Run one flush or merge; False (logged, counted, rolled back) if SQLite failed."""
        try:
            step()
        except sqlite3.Error as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("hookrouter dedup worker: %s; retrying", self.last_error)
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            return False
        return True

    def _new_run_id(self) -> int:
        run_id, self._next_run = self._next_run, self._next_run + 1
        return run_id

    def _write_flush(self, batch: dict[str, str], upto: int) -> None:
        conn, run_id = self.conn, self._new_run_id()
        pairs = orjson.dumps(list(batch.items()))
        conn.execute("BEGIN IMMEDIATE")
        count = conn.execute(_FLUSH, (run_id, pairs)).rowcount
        conn.execute(
            "INSERT INTO runs (run, level, keys, state) VALUES (?, 0, ?, 'live')", (run_id, count)
        )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'flushed_rowid'", (upto,))
        conn.execute("COMMIT")
        bloom = self.tiers.policy.new_filter(count)
        bloom.update(batch)
        self.tiers.publish(Run(run_id, 0, count, bloom), flushed=True)
        self.flushes += 1

    def _merge(self, inputs: tuple[Run, ...]) -> None:
        out = self._new_run_id()
        try:
            self._write_merge(inputs, out)
        except sqlite3.Error:
            self._drop_building(out)
            raise

    def _drop_building(self, run_id: int) -> None:
        """Best effort after a failed merge (the next open drops it otherwise)."""
        conn = self.conn
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.execute("DELETE FROM keys WHERE run = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE run = ?", (run_id,))
        except sqlite3.Error:
            pass

    def _write_merge(self, inputs: tuple[Run, ...], out: int) -> None:
        conn = self.conn
        level = max(r.level for r in inputs) + 1
        ids = orjson.dumps([r.run_id for r in inputs])
        largest = max(inputs, key=lambda r: r.keys).run_id
        conn.execute(
            "INSERT INTO runs (run, level, keys, state) VALUES (?, ?, 0, 'building')", (out, level)
        )
        low = ""
        while True:
            if self._stop.is_set():
                return  # the building run is dropped at the next open
            cut = conn.execute(_CUT, (largest, low, MERGE_CHUNK - 1)).fetchone()
            high = None if cut is None else str(cut[0])
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_MERGE, (out, ids, low, high))
            conn.execute("COMMIT")
            if high is None:
                break
            low = high
        bloom, count = self._read_filter(out)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE runs SET state = 'live', keys = ? WHERE run = ?", (count, out))
        conn.execute(
            "UPDATE runs SET state = 'dead' WHERE run IN (SELECT value FROM json_each(?))", (ids,)
        )
        conn.execute("COMMIT")
        generation = self.tiers.publish(
            Run(out, level, count, bloom), replaces=tuple(r.run_id for r in inputs)
        )
        while not self.tiers.pins.clear_of(generation):
            time.sleep(_PIN_POLL_SECONDS)  # a probe is microseconds long
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM keys WHERE run IN (SELECT value FROM json_each(?))", (ids,))
        conn.execute("DELETE FROM runs WHERE run IN (SELECT value FROM json_each(?))", (ids,))
        conn.execute("COMMIT")
        self.merges += 1

    def _read_filter(self, run_id: int) -> tuple[Bloom, int]:
        rows = self.conn.execute("SELECT key FROM keys WHERE run = ?", (run_id,))
        keys = [str(k) for (k,) in rows]
        bloom = self.tiers.policy.new_filter(len(keys))
        bloom.update(keys)
        return bloom, len(keys)

    def settled(self) -> bool:
        """Nothing to flush or merge right now (tests wait for this)."""
        tiers = self.tiers
        return (
            self._queue.empty()
            and not self._working
            and tiers.flushing is None
            and tiers.merge_candidate() is None
        )

    def stats(self) -> dict[str, int | str | None]:
        """Counters for metrics and tests."""
        return {
            "flushes": self.flushes,
            "merges": self.merges,
            "failures": self.failures,
            "last_error": self.last_error,
        }
