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
  partitions it took (pending work through ``deliveries_pending``, which
  leads with the partition; parked work through ``deliveries_waiting``;
  retries come due through ``deliveries_retry_due`` as on every owner),
  parked work included: its breakers start closed, as after a restart.
  Draining partitions
  are released once none of their attempts is in flight.
* **Work notices**: every node's group commit notifies the lanes (tenant,
  endpoint) it gave new pending deliveries, with their partitions and
  lowest event ids (``notices``). A dedicated connection LISTENs; the lanes
  a notice from another node names in partitions this node serves are
  queued as they are (``on_work``), without a query, once the ledger's
  jobs queued before have run (notices arriving meanwhile merge, so a
  lane is paged in once for all of them, as a query would have paced it).
  A notice too long to name its lanes carries the batch's lowest event id
  and partitions only: the node then pages in their pending deliveries
  from that id on, one query at a time with such notices merged meanwhile. Every
  ``CATCH_UP_SECONDS`` the same connection is pinged and every held
  partition is scanned: a notice lost with a broken connection is found
  then.

* **Changes** (``changes``): entity writes and operator commands made on any
  node are versioned and notified on a second channel. A notice with a
  version above the last one applied (this node's own included: versions
  order concurrent writes on two nodes) makes the node read the changes
  above it, in version order, and hand them to ``on_changes`` (the admin
  layer applies each entity to the catalog, and a breaker reset on the
  tenant's owner). The catch-up scan asks for them too, so a lost notice
  costs at most ``CATCH_UP_SECONDS``. The first version to apply is read at
  ``join``, before the catalog is loaded: what is stored after that read is
  applied (again, harmlessly) rather than missed.

Events this node ingests for tenants it serves reach its engine directly
(``CommitListener``); its own work notices are ignored. A replay notifies
like a commit (``ledger``), so the owner pages it in at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final

from hookrouter.clock import Clock
from hookrouter.errors import StoreError
from hookrouter.log_throttle import LogThrottle
from hookrouter.store.base import StoredChange
from hookrouter.store.ledger import Resumed
from hookrouter.store.postgres import errors, notices
from hookrouter.store.postgres.breakers import BreakerBoard
from hookrouter.store.postgres.leases import LeaseKeeper, Timing

if TYPE_CHECKING:
    import asyncpg

    from hookrouter.store.postgres.store import PostgresStore

log = logging.getLogger(__name__)

CATCH_UP_SECONDS: Final = 5.0
RECONNECT_SECONDS: Final = 1.0
PING_TIMEOUT: Final = 2.0
CHANGES_PAGE: Final = 500  # changes read per query while catching up

OnChange = Callable[[], None]
OnWork = Callable[[list[Resumed]], None]
Busy = Callable[[], Collection[str]]  # tenants with an attempt in flight
OnChanges = Callable[[list[StoredChange]], Awaitable[None]]


def _nothing() -> None:
    return None


def _no_work(_: list[Resumed]) -> None:
    return None


def _idle() -> Collection[str]:
    return ()


async def _ignore(_: list[StoredChange]) -> None:
    return None


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
        catch_up_seconds: float = CATCH_UP_SECONDS,
    ) -> None:
        """Build before ``store.open()``: the store then names this node in the database."""
        self._store = store
        self._catch_up_seconds = catch_up_seconds
        store.node_id = node_id
        self.node_id = node_id
        self.lease_seconds = lease_seconds
        self._timing = Timing(lease_seconds, attempt_seconds + lease_seconds / 6)
        self._clock = clock
        self.channel = f"hookrouter.{store.schema}"[:63]
        self.changes_channel = f"hookrouter-changes.{store.schema}"[:63]
        self._own_notice = f"{node_id} "
        self.keeper = LeaseKeeper(node_id, 0, self._timing, {}, clock)  # replaced by join
        self.breakers: BreakerBoard | None = None  # made by join
        self._on_change: OnChange = _nothing
        self._on_work: OnWork = _no_work
        self._busy: Busy = _idle
        self._on_changes: OnChanges = _ignore
        self.applied_version = 0  # the change feed, applied up to here (read at join)
        self._changes_wanted = False
        self._syncing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wanted: dict[int, str] = {}  # partition -> lowest event id noticed
        self._named: list[notices.Lane] = []  # lanes noticed, not yet queued
        self._paging = False
        self._failure_log = LogThrottle()
        self.notices = 0
        self.scans = 0
        self.changes_applied = 0

    # ---- the engine's question ---------------------------------------------------

    def owns(self, tenant_id: str) -> bool:
        """This node serves the tenant's partition and may start an attempt now."""
        keeper = self.keeper
        return keeper.can_start() and keeper.serves(self._partition_of(tenant_id))

    def serving(self) -> list[int]:
        return sorted(p for p in self.keeper.held if self.keeper.serves(p))

    def serves_tenant(self, tenant_id: str) -> bool:
        """This node holds the tenant's partition (whether or not it may start attempts now)."""
        return self.keeper.serves(self._partition_of(tenant_id))

    async def send_command(self, name: str, target: str) -> int:
        """Store an operator command; every node is notified, the one it concerns applies it."""
        return await self._store.send_command(name, target)

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
        store.committer.notify = store.ledger.notify = (self.channel, self.node_id)
        store.changes_notify = (self.changes_channel, self.node_id)
        store.lease_keeper = self.keeper
        self.breakers = BreakerBoard(
            store.run, self.node_id, self._partition_of, store.ledger.held, self._failed
        )
        self.applied_version = await store.last_change()
        await self._store.run(self.keeper.turn)
        log.info(
            "cluster node %s joined: %d of %d partitions, lease %g s",
            self.node_id,
            len(self.keeper.held),
            self.keeper.partitions,
            self.lease_seconds,
        )

    def start(
        self,
        on_change: OnChange,
        on_work: OnWork,
        busy: Busy = _idle,
        on_changes: OnChanges = _ignore,
    ) -> None:
        self._on_change, self._on_work, self._busy = on_change, on_work, busy
        self._on_changes = on_changes
        self._spawn(self._lease_loop())
        self._spawn(self._notice_loop())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of this node (``stop`` cancels them all)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Stop the loops, give every lease back (after its outcomes), leave the live nodes."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        if self.breakers is not None:
            await self.breakers.stop()
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
            except Exception:  # the loop must go on: without turns every lease is lost
                log.exception("cluster lease turn failed unexpectedly")

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
            if self.breakers is not None:
                await self.breakers.taken(result.taken, self._clock.time())
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
                await conn.add_listener(self.changes_channel, self._changes_noticed)
                while True:  # first: whatever was stored while not listening
                    self._want_changes()
                    await self._scan(self.serving())
                    await asyncio.sleep(self._catch_up_seconds)
                    await conn.fetchval("SELECT 1", timeout=PING_TIMEOUT)
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
        """A commit's or replay's work notice (``notices``) from another node."""
        text = str(payload)
        if text.startswith(self._own_notice):
            return  # this node's engine had the events from its own commit
        notice = notices.decode(text)
        if notice is None:
            return
        self.notices += 1
        keeper = self.keeper
        if notice.lanes is not None:
            self._named.extend(lane for lane in notice.lanes if keeper.serves(lane.partition))
        else:
            if notice.partitions is None:
                wanted: Sequence[int] = self.serving()
            else:
                wanted = [p for p in notice.partitions if keeper.serves(p)]
            since = notice.since
            for partition in wanted:
                known = self._wanted.get(partition)
                if known is None or since < known:
                    self._wanted[partition] = since
        if (self._wanted or self._named) and not self._paging:
            self._paging = True
            self._spawn(self._page_noticed())

    async def _page_noticed(self) -> None:
        try:
            while self._named or self._wanted:
                if self._named:
                    # After the ledger's queued jobs, as a scan would run: notices
                    # arriving meanwhile merge, one page-in per lane for all of them.
                    await self._ledger.settled()
                    named, self._named = self._named, []
                    self._on_work(self._ledger.pending_named(notices.merged(named)))
                if self._wanted:
                    wanted, self._wanted = self._wanted, {}
                    await self._scan(sorted(wanted), min(wanted.values()))
        except StoreError as exc:
            self._failed("paging in noticed work", exc)  # the catch-up scan finds it
        except Exception:
            log.exception("paging in noticed work failed unexpectedly")
        finally:
            self._paging = False

    async def _scan(self, partitions: Sequence[int], since: str = "") -> None:
        if not partitions:
            return
        self.scans += 1
        found = await self._ledger.pending_in(partitions, since)
        if found:
            self._on_work(found)

    # ---- the change feed -------------------------------------------------------------

    def _changes_noticed(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """A change's notice: ``<node> <version>``; read the feed if it is news."""
        _, _, version = str(payload).rpartition(" ")
        if not version.isdigit() or int(version) > self.applied_version:
            self._want_changes()

    def _want_changes(self) -> None:
        self._changes_wanted = True
        if not self._syncing:
            self._syncing = True
            self._spawn(self._sync_changes())

    async def _sync_changes(self) -> None:
        """Apply the feed above ``applied_version`` in order, until nothing new was noticed."""
        try:
            while self._changes_wanted:
                self._changes_wanted = False
                while True:
                    found = await self._store.changes_since(self.applied_version, CHANGES_PAGE)
                    if not found:
                        break
                    await self._apply(found)
                    if len(found) < CHANGES_PAGE:
                        break
        except StoreError as exc:
            self._failed("reading the change feed", exc)  # the catch-up scan asks again
        except Exception:
            log.exception("applying the change feed failed unexpectedly")
        finally:
            self._syncing = False

    async def _apply(self, found: list[StoredChange]) -> None:
        try:
            await self._on_changes(found)
        except StoreError:
            raise
        except Exception:  # one bad change must not stop every later one
            log.exception("applying changes %d..%d failed", found[0].version, found[-1].version)
        self.applied_version = found[-1].version
        self.changes_applied += len(found)

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
        return {
            **self.keeper.stats(),
            "notices": self.notices,
            "scans": self.scans,
            "changes_applied": self.changes_applied,
            "applied_version": self.applied_version,
            **(self.breakers.stats() if self.breakers is not None else {}),
        }

    def __repr__(self) -> str:
        return f"ClusterNode({self.node_id!r}, {self.keeper!r})"


__all__ = ["CATCH_UP_SECONDS", "ClusterNode"]
