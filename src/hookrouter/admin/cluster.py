"""Cluster mode in the admin layer: other nodes' changes applied here, commands for the owner.

An admin call on any node writes its change to the database; the change feed
(``store.postgres.changes``, read by the cluster node) brings it to every
node, and ``apply`` makes it live here: tenants, sources and endpoints in the
catalog (``EntityService.apply_stored``), API keys (``KeyService``), and
operator commands. A breaker lives on the node that delivers the endpoint's
tenant (the owner of its partition), so a reset is a command: stored and
notified by whichever node receives it, applied by the owner. The receiving
node applies it at once when it is the owner itself.

Reading a breaker works from any node too: the owner writes each transition
to the database (``Board``, ``store.postgres.breakers``), and the routes ask
``breaker_page``/``shared_breaker`` here, which answer from memory for the
tenants this node delivers and from the database for the others.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol

from hookrouter.admin.delivery_routes import (
    WantedBreakers,
    held_page,
    local_views,
)
from hookrouter.admin.entities import EntityService
from hookrouter.admin.keys import KeyService
from hookrouter.delivery.breaker import Transition
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.store.base import BreakerRange, StoredBreaker, StoredChange

log = logging.getLogger(__name__)

BREAKER_RESET: Final = "breaker_reset"

Send = Callable[[str, str], Awaitable[int]]  # (command, target) -> its version
Serves = Callable[[str], bool]  # tenant -> this node delivers it now


class Board(Protocol):
    """The database's breakers (``store.postgres.breakers.BreakerBoard``)."""

    node_id: str

    def publish(self, row: StoredBreaker) -> None: ...
    async def page(self, wanted: BreakerRange, limit: int) -> list[StoredBreaker]: ...
    def own_partitions(self) -> tuple[int, ...]: ...
    async def one(self, endpoint_id: str) -> StoredBreaker | None: ...


class ClusterAdmin:
    """Applies the change feed on this node and sends the commands other nodes apply."""

    def __init__(
        self,
        entities: EntityService,
        keys: KeyService,
        delivery: DeliveryEngine | None,
        send: Send,
        serves: Serves,
        *,
        board: Board | None = None,
    ) -> None:
        self._entities = entities
        self._keys = keys
        self._delivery = delivery
        self._send = send
        self._serves = serves
        self._board = board
        if board is not None and delivery is not None:
            delivery.on_breaker_transition(self._breaker_changed)
        self._sent: set[int] = set()  # versions of commands this node applied when sending

    async def reset_breaker(self, endpoint_id: str) -> bool:
        """Close the endpoint's breaker on its owner, wherever that is; False: no such endpoint."""
        endpoint = self._entities.catalog.endpoints.get(endpoint_id)
        if endpoint is None:
            return False
        version = await self._send(BREAKER_RESET, endpoint_id)
        if self._delivery is not None and self._serves(endpoint.tenant):
            self._sent.add(version)
            self._delivery.reset_breaker(endpoint_id)
        return True

    async def apply(self, changes: Sequence[StoredChange]) -> None:
        """Changes stored by any node (this one's included), in the order stored."""
        applied = await self._entities.apply_stored(changes)
        self._keys.apply_stored(changes)
        for change in changes:
            if change.action == "command":
                self._command(change)
        if applied:
            log.info("applied %d entity changes stored by other nodes", applied)

    def _command(self, change: StoredChange) -> None:
        if change.version in self._sent:
            self._sent.discard(change.version)
            return
        if change.kind != BREAKER_RESET:
            log.warning("ignored unknown command %r (a newer node sent it?)", change.kind)
            return
        endpoint = self._entities.catalog.endpoints.get(change.id)
        delivery = self._delivery
        if delivery is not None and endpoint is not None and self._serves(endpoint.tenant):
            delivery.reset_breaker(change.id)
            log.info("breaker of %s reset by a command from another node", change.id)

    # ---- breakers any node can read -------------------------------------------------

    def _breaker_changed(self, tenant_id: str, transition: Transition) -> None:
        """The engine's listener: this node (the owner) writes the new state for the others."""
        assert self._board is not None and self._delivery is not None
        breaker = self._delivery.breaker(transition.endpoint_id)
        offset = self._delivery.wall_offset()
        opened = (
            None if breaker is None or breaker.opened_at is None else breaker.opened_at + offset
        )
        at = transition.at + offset
        self._board.publish(
            StoredBreaker(
                endpoint_id=transition.endpoint_id,
                tenant_id=tenant_id,
                state=transition.after.value,
                opened_at=opened,
                times_opened=0 if breaker is None else breaker.times_opened,
                node=self._board.node_id,
                changed_at=at,
                history=((at, transition.before.value, transition.after.value,
                          transition.signal.value),),
            )
        )  # fmt: skip

    async def breaker_page(self, wanted: WantedBreakers) -> tuple[list[dict[str, Any]], str | None]:
        """A page of every node's breakers: this node's tenants' from memory, others' as stored.

        Both sides are read a page at a time (the engine's held ids, the
        table by its key) and merged, so the answer costs a page whatever
        the number of breakers held or stored.
        """
        assert self._board is not None
        local: list[str] = []
        local_cursor = None
        if self._delivery is not None:
            local, local_cursor = held_page(self._delivery, wanted, self._served_endpoint)
        stored = await self._stored_rows(wanted)
        merged = sorted([*local, *stored])
        shown = merged[: wanted.limit]
        more = local_cursor is not None or len(merged) > wanted.limit
        ours = [e for e in shown if e not in stored]
        views = {v["endpoint_id"]: v for v in self._local_views(ours, wanted.tripped)}
        for endpoint_id in shown:
            if endpoint_id in stored:
                views[endpoint_id] = _stored_view(stored[endpoint_id])
        return [views[e] for e in shown if e in views], (shown[-1] if more and shown else None)

    async def _stored_rows(self, wanted: WantedBreakers) -> dict[str, StoredBreaker]:
        """Up to a page and one of the stored breakers of endpoints other nodes deliver."""
        assert self._board is not None
        want = wanted.limit + 1
        endpoints = None if wanted.of_tenant is None else sorted(wanted.of_tenant)
        rows: dict[str, StoredBreaker] = {}
        after = wanted.after
        while True:
            asked = BreakerRange(
                after, wanted.until, endpoints, wanted.tripped, self._board.own_partitions()
            )
            batch = await self._board.page(asked, want)
            for row in batch:
                # The query leaves out this node's partitions; the catalog has the last word.
                if not self._served_endpoint(row.endpoint_id):
                    rows[row.endpoint_id] = row
            if len(rows) >= want or len(batch) < want:
                return rows
            after = batch[-1].endpoint_id

    async def shared_breaker(self, endpoint_id: str) -> StoredBreaker | None:
        """The stored breaker of an endpoint another node delivers; None when it is ours."""
        if self._board is None or self._served_endpoint(endpoint_id):
            return None
        return await self._board.one(endpoint_id)

    def _served_endpoint(self, endpoint_id: str) -> bool:
        endpoint = self._entities.catalog.endpoints.get(endpoint_id)
        return endpoint is not None and self._serves(endpoint.tenant)

    def _local_views(self, ids: list[str], tripped: bool) -> list[dict[str, Any]]:
        delivery = self._delivery
        if delivery is None or self._board is None:
            return []
        node = self._board.node_id
        return [{**v, "node": node} for v in local_views(delivery, ids, tripped)]


def _stored_view(row: StoredBreaker) -> dict[str, Any]:
    return {
        "endpoint_id": row.endpoint_id,
        "state": row.state,
        "opened_at": row.opened_at,
        "times_opened": row.times_opened,
        "node": row.node,
        "changed_at": row.changed_at,
    }
