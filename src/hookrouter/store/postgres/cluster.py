"""One node of a cluster: its leases, and how it learns of work in the partitions it holds.

Theory of operation
-------------------
``join`` empties the ledger's held epochs (a store opened alone holds every
partition) and runs the first lease turn, so the delivery engine starts on
the partitions this node won. ``start`` then runs two loops:

* **Leases** (``leases.LeaseKeeper``), every ``lease_seconds / 3``. After a
  turn that took, lost or began to give back partitions (or after the lease
  lapsed, which stopped attempts), ``on_change`` tells the engine to drop the
  tenants it no longer serves, and the node pages in the open work of the
  partitions it took (``deliveries_partition_open``), parked work included:
  its breakers start closed, as after a restart. Draining partitions
  are released once none of their attempts is in flight.
* **Work notices**: every node's group commit notifies the batch's lowest
  event id and partitions (``commit``). A dedicated connection LISTENs; a
  notice from another node for partitions this node serves pages in their
  pending deliveries from that id on (``on_work``), one query at a time with
  notices merged meanwhile. Every ``CATCH_UP_SECONDS`` the same connection
  is pinged and every held partition is scanned: a notice lost with a broken
  connection, or a replay made on another node, is found then.

Events this node ingests for tenants it serves reach its engine directly
(``CommitListener``); its own notices are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Final

from hookrouter.clock import Clock
from hookrouter.errors import StoreError
from hookrouter.log_throttle import LogThrottle
from hookrouter.store.ledger import Resumed
from hookrouter.store.postgres import errors
from hookrouter.store.postgres.leases import LeaseKeeper, Timing

if TYPE_CHECKING:
    import asyncpg

    from hookrouter.store.postgres.store import PostgresStore

log = logging.getLogger(__name__)

CATCH_UP_SECONDS: Final = 5.0
RECONNECT_SECONDS: Final = 1.0
PING_TIMEOUT: Final = 2.0

OnChange = Callable[[], None]
OnWork = Callable[[list[Resumed]], None]
Busy = Callable[[], Collection[str]]  # tenants with an attempt in flight


def _nothing() -> None:
    return None


def _no_work(_: list[Resumed]) -> None:
    return None


def _idle() -> Collection[str]:
    return ()


class ClusterNode:
    """Leases plus work notices for one router process (see the module docstring)."""

    def __init__(
        self,
        store: PostgresStore,
        node_id: str,
        *,
        lease_seconds: float,
        attempt_seconds: float,
        clock: Clock,
    ) -> None:
        """Build before ``store.open()``: the store then names this node in the database."""
        self._store = store
        store.node_id = node_id
        self.node_id = node_id
        self.lease_seconds = lease_seconds
        self._timing = Timing(lease_seconds, attempt_seconds + lease_seconds / 6)
        self._clock = clock
        self.channel = f"hookrouter.{store.schema}"[:63]
        self.keeper = LeaseKeeper(node_id, 0, self._timing, {}, clock)  # replaced by join
        self._on_change: OnChange = _nothing
        self._on_work: OnWork = _no_work
        self._busy: Busy = _idle
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wanted: dict[int, str] = {}  # partition -> lowest event id noticed
        self._paging = False
        self._failure_log = LogThrottle()
        self.notices = 0
        self.scans = 0

    # ---- the engine's question ---------------------------------------------------

    def owns(self, tenant_id: str) -> bool:
        """This node serves the tenant's partition and may start an attempt now."""
        keeper = self.keeper
        return keeper.can_start() and keeper.serves(self._partition_of(tenant_id))

    def serving(self) -> list[int]:
        return sorted(p for p in self.keeper.held if self.keeper.serves(p))

    # ---- lifecycle -------------------------------------------------------------------

    async def join(self) -> None:
        """Hold nothing but what the first lease turn wins; notify from now on."""
        store = self._store
        self._ledger = store.ledger
        self._partition_of = store.partition_of
        self._ledger.held.clear()
        self.keeper = LeaseKeeper(
            self.node_id, self._partition_of.count, self._timing, self._ledger.held, self._clock
        )
        store.committer.notify = (self.channel, self.node_id)
        store.lease_keeper = self.keeper
        await self._store.run(self.keeper.turn)
        log.info(
            "cluster node %s joined: %d of %d partitions, lease %g s",
            self.node_id,
            len(self.keeper.held),
            self.keeper.partitions,
            self.lease_seconds,
        )

    def start(self, on_change: OnChange, on_work: OnWork, busy: Busy = _idle) -> None:
        self._on_change, self._on_work, self._busy = on_change, on_work, busy
        loop = asyncio.get_running_loop()
        for coro in (self._lease_loop(), self._notice_loop()):
            task = loop.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Stop the loops, give every lease back (after its outcomes), leave the live nodes."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        try:
            await self._ledger.ordered(self.keeper.leave)
        except StoreError as exc:
            log.warning("could not release the leases at stop (they expire): %s", exc.message)

    # ---- leases ------------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        while True:
            await asyncio.sleep(self.keeper.timing.lease_seconds / 3)
            try:
                await self.lease_turn()
            except StoreError as exc:
                self._failed("lease turn", exc)

    async def lease_turn(self) -> None:
        """One turn: renew, take, maybe release; tell the engine; page in what was taken."""
        keeper = self.keeper
        lapsed = keeper.lapsed()
        result = await self._store.run(keeper.turn)
        partition_of = self._partition_of
        busy = {partition_of(t) for t in self._busy()}
        ready = keeper.ready_to_release(busy)
        if ready:
            await self._ledger.ordered(lambda conn: keeper.release(conn, ready))
        if result.taken or result.lost or result.to_release or ready or lapsed:
            self._on_change()
        if result.taken:
            # Breakers start closed on the new owner: what the old one parked is pending again.
            resumed = await self._ledger.resume_partitions(result.taken)
            if resumed:
                log.info("resumed %d parked deliveries of the partitions taken", resumed)
        if lapsed:
            await self._scan(self.serving())
        elif result.taken:
            await self._scan(result.taken)

    # ---- work notices and the catch-up scan ----------------------------------------------

    async def _notice_loop(self) -> None:
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await self._store.connect()
                await conn.add_listener(self.channel, self._noticed)
                await self._scan(self.serving())  # whatever was committed while not listening
                while True:
                    await asyncio.sleep(CATCH_UP_SECONDS)
                    await conn.fetchval("SELECT 1", timeout=PING_TIMEOUT)
                    await self._scan(self.serving())
            except Exception as exc:
                if not errors.is_store_failure(exc) and not isinstance(exc, TimeoutError):
                    raise
                self._failed("work notices", exc)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.terminate()
            await asyncio.sleep(RECONNECT_SECONDS)

    def _noticed(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """A commit's notice: ``<node> <lowest event id> <partitions or *>``."""
        parts = str(payload).split(" ")
        if len(parts) != 3 or parts[0] == self.node_id:
            return
        self.notices += 1
        _, since, named = parts
        keeper = self.keeper
        if named == "*":
            wanted: Sequence[int] = self.serving()
        else:
            wanted = [p for p in (int(x) for x in named.split(",") if x) if keeper.serves(p)]
        for partition in wanted:
            known = self._wanted.get(partition)
            if known is None or since < known:
                self._wanted[partition] = since
        if self._wanted and not self._paging:
            self._paging = True
            task = asyncio.get_running_loop().create_task(self._page_noticed())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _page_noticed(self) -> None:
        try:
            while self._wanted:
                wanted, self._wanted = self._wanted, {}
                await self._scan(sorted(wanted), min(wanted.values()))
        except StoreError as exc:
            self._failed("paging in noticed work", exc)  # the catch-up scan finds it
        finally:
            self._paging = False

    async def _scan(self, partitions: Sequence[int], since: str = "") -> None:
        if not partitions:
            return
        self.scans += 1
        found = await self._ledger.pending_in(partitions, since)
        if found:
            self._on_work(found)

    def _failed(self, what: str, exc: BaseException) -> None:
        skipped = self._failure_log.should_log(asyncio.get_running_loop().time())
        if skipped is not None:
            log.warning(
                "cluster %s failed: %s%s",
                what,
                exc,
                f" ({skipped} more failures since the last message)" if skipped else "",
            )

    def stats(self) -> dict[str, object]:
        return {**self.keeper.stats(), "notices": self.notices, "scans": self.scans}

    def __repr__(self) -> str:
        return f"ClusterNode({self.node_id!r}, {self.keeper!r})"


__all__ = ["CATCH_UP_SECONDS", "ClusterNode"]
