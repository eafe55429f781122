"""Cluster mode in the admin layer: other nodes' changes applied here, commands for the owner.

An admin call on any node writes its change to the database; the change feed
(``store.postgres.changes``, read by the cluster node) brings it to every
node, and ``apply`` makes it live here: tenants, sources and endpoints in the
catalog (``EntityService.apply_stored``), API keys (``KeyService``), and
operator commands. A breaker lives on the node that delivers the endpoint's
tenant (the owner of its partition), so a reset is a command: stored and
notified by whichever node receives it, applied by the owner. The receiving
node applies it at once when it is the owner itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from hookrouter.admin.entities import EntityService
from hookrouter.admin.keys import KeyService
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.store.base import StoredChange

log = logging.getLogger(__name__)

BREAKER_RESET: Final = "breaker_reset"

Send = Callable[[str, str], Awaitable[int]]  # (command, target) -> its version
Serves = Callable[[str], bool]  # tenant -> this node delivers it now


class ClusterAdmin:
    """Applies the change feed on this node and sends the commands other nodes apply."""

    def __init__(
        self,
        entities: EntityService,
        keys: KeyService,
        delivery: DeliveryEngine | None,
        send: Send,
        serves: Serves,
    ) -> None:
        self._entities = entities
        self._keys = keys
        self._delivery = delivery
        self._send = send
        self._serves = serves
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
