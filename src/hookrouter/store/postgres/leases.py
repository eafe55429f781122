"""Partition leases with epochs: one turn of heartbeat, renew, plan, take and release.

Theory of operation
-------------------
Every ``renew_seconds`` a node runs one ``turn`` in one transaction: it
marks itself live in ``nodes``, renews the leases it holds *at the epochs it
holds them* (a lease someone took over has a higher epoch and is not
renewed: it is lost), reads who else is live and who holds what, and takes
the free partitions ``lease_plan`` gives it, each with ``epoch + 1``.

Expiry is decided by the database clock (``expires_at`` against ``now()``),
never by comparing two hosts' clocks. Locally a node counts its lease from
the moment it *sent* the turn (monotonic clock), which is earlier than the
server's ``now()`` in that turn, so the node's idea of its lease always ends
before the database's. It starts an attempt only while that idea has at
least the attempt's deadline plus a margin left (``can_start``): every
attempt it starts ends before anyone may take the partition over.

Epochs fence what leaks past that: the delivery ledger writes an outcome only
while the partition's epoch is still the one this node holds
(``ledger_sql.WRITE_OUTCOMES``); a takeover row-locks and bumps it, so a
paused or cut-off former owner's late outcomes are refused and counted.

Release (rebalance on a join): a partition to give back first stops taking
new attempts (``draining``), then is released once none of its attempts is
in flight (or an attempt deadline has passed), through the ledger's ordered
chain so that its queued outcomes are written first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

from hookrouter.clock import Clock
from hookrouter.store.postgres import lease_plan
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.queries import affected

log = logging.getLogger(__name__)

_SECS: Final = "make_interval(secs => $2)"
HEARTBEAT: Final = (
    f"INSERT INTO nodes (node_id, expires_at) VALUES ($1, now() + {_SECS})"
    " ON CONFLICT (node_id) DO UPDATE SET expires_at = excluded.expires_at"
)
# $1 node, $2 lease seconds, $3/$4 the (partition, epoch) pairs held.
RENEW: Final = f"""
UPDATE partitions AS p SET expires_at = now() + {_SECS}
FROM unnest($3::int2[], $4::int8[]) AS h(partition, epoch)
WHERE p.partition = h.partition AND p.epoch = h.epoch AND p.owner = $1
RETURNING p.partition"""
LIVE_NODES: Final = "SELECT node_id FROM nodes WHERE expires_at > now()"
HOLDERS: Final = (
    "SELECT partition, owner FROM partitions WHERE owner IS NOT NULL AND expires_at > now()"
)
# A take bumps the epoch under the row lock, after any fenced write holding it.
TAKE: Final = f"""
UPDATE partitions SET owner = $1, epoch = epoch + 1, expires_at = now() + {_SECS}
WHERE partition = ANY($3::int2[]) AND (owner IS NULL OR expires_at <= now())
RETURNING partition, epoch"""
RELEASE: Final = """
UPDATE partitions AS p SET owner = NULL, expires_at = NULL
FROM unnest($2::int2[], $3::int8[]) AS h(partition, epoch)
WHERE p.partition = h.partition AND p.epoch = h.epoch AND p.owner = $1"""
LEAVE: Final = "DELETE FROM nodes WHERE node_id = $1"


@dataclass(frozen=True, slots=True)
class Timing:
    """A node's lease timing (``config.cluster`` derives it)."""

    lease_seconds: float
    # The longest attempt plus the margin: an attempt starts only with this much lease left.
    start_budget_seconds: float


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What one turn changed."""

    taken: tuple[int, ...]
    lost: tuple[int, ...]
    to_release: tuple[int, ...]


class LeaseKeeper:
    """This node's leases: what it holds at which epoch, and until when it may start attempts.

    ``held`` is shared with the ledger (its fence reads the epochs from it).
    """

    def __init__(
        self,
        node_id: str,
        partitions: int,
        timing: Timing,
        held: dict[int, int],
        clock: Clock,
    ) -> None:
        self.node_id = node_id
        self.partitions = partitions
        self.timing = timing
        self.held = held  # partition -> epoch
        self.draining: dict[int, float] = {}  # partition -> when it stopped starting attempts
        self._clock = clock
        self._start_until = float("-inf")  # monotonic: attempts may start before this
        self.turns = 0
        self.taken = 0
        self.lost = 0
        self.released = 0

    # ---- the hot-path questions ---------------------------------------------------

    def serves(self, partition: int) -> bool:
        """Held and not being given back (validity aside)."""
        return partition in self.held and partition not in self.draining

    def can_start(self) -> bool:
        """The lease still covers an attempt started now, with its margin."""
        return self._clock.monotonic() < self._start_until

    def lapsed(self) -> bool:
        return not self.can_start()

    # ---- one turn ------------------------------------------------------------------

    async def turn(self, conn: Conn) -> TurnResult:
        """Heartbeat, renew, plan and take, in one transaction (see the module docstring)."""
        sent = self._clock.monotonic()
        lease = self.timing.lease_seconds
        pairs = sorted(self.held.items())
        async with conn.transaction():
            await conn.execute(HEARTBEAT, self.node_id, lease)
            renewed = {
                int(r[0])
                for r in await conn.fetch(
                    RENEW, self.node_id, lease, [p for p, _ in pairs], [e for _, e in pairs]
                )
            }
            lost = tuple(p for p, _ in pairs if p not in renewed)
            for partition in lost:
                del self.held[partition]
                self.draining.pop(partition, None)
            live = [str(r[0]) for r in await conn.fetch(LIVE_NODES)]
            holders = {int(r[0]): str(r[1]) for r in await conn.fetch(HOLDERS)}
            planned = lease_plan.plan(self.node_id, self.held, live, holders, self.partitions)
            taken: list[int] = []
            if planned.take:
                for row in await conn.fetch(TAKE, self.node_id, lease, list(planned.take)):
                    self.held[int(row[0])] = int(row[1])
                    taken.append(int(row[0]))
        if self.held:
            self._start_until = sent + lease - self.timing.start_budget_seconds
        self.turns += 1
        self.taken += len(taken)
        self.lost += len(lost)
        now = self._clock.monotonic()
        for partition in planned.release:
            self.draining.setdefault(partition, now)
        if lost:
            log.warning(
                "lost %d partition leases to other nodes (this node was late to renew): %s",
                len(lost),
                _short(lost),
            )
        if taken:
            log.info("took %d partition leases: %s", len(taken), _short(taken))
        return TurnResult(tuple(sorted(taken)), lost, planned.release)

    def ready_to_release(self, busy: Collection[int]) -> list[int]:
        """Draining partitions with no attempt in flight, or whose attempts' deadline passed."""
        now = self._clock.monotonic()
        budget = self.timing.start_budget_seconds
        return sorted(
            p for p, since in self.draining.items() if p not in busy or now - since >= budget
        )

    async def release(self, conn: Conn, partitions: Collection[int]) -> int:
        """Give ``partitions`` back (the caller has written their outcomes); how many."""
        pairs = [(p, self.held[p]) for p in sorted(partitions) if p in self.held]
        done = affected(
            await conn.execute(RELEASE, self.node_id, [p for p, _ in pairs], [e for _, e in pairs])
        )
        for partition, _ in pairs:
            del self.held[partition]
            self.draining.pop(partition, None)
        self.released += len(pairs)
        if pairs:
            log.info("released %d partition leases: %s", len(pairs), _short([p for p, _ in pairs]))
        return done

    async def leave(self, conn: Conn) -> None:
        """Release everything and drop out of the live nodes (graceful stop)."""
        await self.release(conn, list(self.held))
        await conn.execute(LEAVE, self.node_id)
        self._start_until = float("-inf")

    def stats(self) -> dict[str, object]:
        return {
            "node_id": self.node_id,
            "held": len(self.held),
            "draining": len(self.draining),
            "can_start": self.can_start(),
            "turns": self.turns,
            "taken": self.taken,
            "lost": self.lost,
            "released": self.released,
        }

    def __repr__(self) -> str:
        return (
            f"LeaseKeeper({self.node_id!r}, held={len(self.held)}, draining={len(self.draining)})"
        )


def _short(partitions: Collection[int], limit: int = 16) -> str:
    shown = sorted(partitions)
    more = len(shown) - limit
    text = ",".join(str(p) for p in shown[:limit])
    return f"{text} (+{more} more)" if more > 0 else text


Owns = Callable[[str], bool]

__all__ = ["LeaseKeeper", "Owns", "Timing", "TurnResult"]
