"""One batch of delivery outcomes as one fenced statement (``ledger_sql.WRITE_OUTCOMES``).

The last outcome of each delivery updates its row; every attempt that did
not deliver gets an attempt row. The statement names the epoch this node
holds for each partition it writes; outcomes of a partition whose epoch
moved on are not written, and are counted and logged here
(``stale_outcomes``). Events whose last open delivery just ended dead or
disabled are marked failed in the same transaction, unless the outcome
settles its event (the engine says so, or the stored fan-out was one).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import FINAL_STATES, DeliveryState
from hookrouter.store.ledger import AttemptRecord, OutcomeRecord
from hookrouter.store.postgres import ledger_sql as sql
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.partitioning import PartitionMap

_DELIVERED: Final = DeliveryState.DELIVERED

log = logging.getLogger(__name__)


class OutcomeWriter:
    """Writes outcome batches for the ledger; remembers which events have one delivery."""

    def __init__(self, partition_of: PartitionMap, held: dict[int, int]) -> None:
        self._partition_of = partition_of
        self.held = held  # partition -> the epoch this node holds it at (the ledger's)
        self.sole: set[str] = set()  # events loaded with one delivery, not yet finished
        self.stale_outcomes = 0  # outcomes refused by the epoch check

    async def write(self, conn: Conn, outcomes: list[OutcomeRecord]) -> None:
        last: dict[DeliveryRef, OutcomeRecord] = {}
        failed_attempts: dict[tuple[DeliveryRef, int], AttemptRecord] = {}
        for o in outcomes:
            last[o.ref] = o
            if o.attempt is not None and o.state is not _DELIVERED:
                failed_attempts[(o.ref, o.attempt.attempt)] = o.attempt
        updates = list(last.values())
        args = self._arguments(updates, list(failed_attempts.items()))
        finished = sorted(
            {o.ref.event_id for o in updates if o.state in FINAL_STATES and not self._settles(o)}
        )
        if finished:
            async with conn.transaction():
                row = await conn.fetchrow(sql.WRITE_OUTCOMES, *args)
                await conn.execute(sql.MARK_FAILED, finished)
        else:
            row = await conn.fetchrow(sql.WRITE_OUTCOMES, *args)
        assert row is not None
        self._count_stale(updates, set(row[0]))

    def _arguments(
        self,
        updates: list[OutcomeRecord],
        attempts: list[tuple[tuple[DeliveryRef, int], AttemptRecord]],
    ) -> list[Any]:
        partitions = self._partitions_of(updates)
        return [
            partitions,
            [self.held.get(p, 0) for p in partitions],  # 0: not held, never matches
            [o.ref.event_id for o in updates],
            [o.ref.endpoint_id for o in updates],
            [o.state.value for o in updates],
            [o.attempts for o in updates],
            [o.next_attempt_at for o in updates],
            [o.status_code for o in updates],
            [o.error for o in updates],
            [o.at for o in updates],
            [o.attempt is not None for o in updates],
            [ref.event_id for (ref, _), _ in attempts],
            [ref.endpoint_id for (ref, _), _ in attempts],
            [a.attempt for _, a in attempts],
            [a.started_at for _, a in attempts],
            [a.duration_ms for _, a in attempts],
            [a.status_code for _, a in attempts],
            [a.error for _, a in attempts],
            [a.response_excerpt for _, a in attempts],
            [None if o.attempt is None else o.attempt.attempt for o in updates],
            [None if o.attempt is None else o.attempt.started_at for o in updates],
            [None if o.attempt is None else o.attempt.duration_ms for o in updates],
        ]

    def _settles(self, outcome: OutcomeRecord) -> bool:
        """A final outcome that leaves no need to ask whether its event ended failed.

        The engine says so for an event it holds with one delivery; for one it
        loaded, the stored fan-out does (``load``): delivering an event's only
        delivery makes it delivered.
        """
        event_id = outcome.ref.event_id
        sole = event_id in self.sole
        if sole:
            self.sole.discard(event_id)
        return outcome.settles_event or (sole and outcome.state is _DELIVERED)

    def _partitions_of(self, outcomes: list[OutcomeRecord]) -> list[int]:
        """The partitions these outcomes write (every held one when a tenant is unknown)."""
        if any(o.tenant_id is None for o in outcomes):
            return sorted(self.held)
        partition_of = self._partition_of
        return sorted({partition_of(o.tenant_id) for o in outcomes if o.tenant_id is not None})

    def _count_stale(self, outcomes: list[OutcomeRecord], held: set[int]) -> None:
        partition_of = self._partition_of
        stale = sum(
            1 for o in outcomes if o.tenant_id is not None and partition_of(o.tenant_id) not in held
        )
        if stale:
            self.stale_outcomes += stale
            log.warning(
                "%d delivery outcomes refused: this node no longer holds their lease", stale
            )


__all__ = ["OutcomeWriter"]
