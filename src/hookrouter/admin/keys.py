"""Tenants' API keys: minted once, stored as a hash, checked in constant time.

A key reads ``hrk_<id>_<secret>``: ``<id>`` (12 hex characters, not secret)
finds the key in a dict, ``<secret>`` carries 256 bits from ``secrets``. The
store keeps only the SHA-256 of the whole key. A slow KDF (bcrypt, scrypt)
exists to make guessing a low-entropy password expensive; guessing a 256-bit
random value is out of reach anyway, so a plain hash loses nothing and keeps
each request's check cheap.

Last-used times live in memory and reach the store at most once per key
every ``flush_seconds`` (in a background write), so authenticating a request
never waits for a write; after a crash they are at most that stale.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hookrouter.clock import Clock
from hookrouter.errors import NotFound, RequestRejected
from hookrouter.store.base import Entity, EventStore, StoredChange

log = logging.getLogger(__name__)

KEY_PREFIX = "hrk_"
_ID_BYTES = 6
_SECRET_BYTES = 32
MAX_KEYS_PER_TENANT = 100
FLUSH_SECONDS = 60.0


@dataclass(slots=True)
class ApiKey:
    id: str
    tenant: str
    digest: bytes
    name: str | None
    created_at: float
    last_used_at: float | None
    flushed_at: float  # when last_used_at was last sent to the store (monotonic)
    stored_last_used_at: float | None  # what the store has

    @property
    def prefix(self) -> str:
        return f"{KEY_PREFIX}{self.id}"

    def doc(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "sha256": self.digest.hex(),
            "name": self.name,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
        }


class TooManyKeys(RequestRejected):
    status = 409
    reason = "conflict"


class KeyService:
    """Every tenant's keys, in memory and in the store's ``api_key`` entities."""

    def __init__(self, store: EventStore, clock: Clock, flush_seconds: float = FLUSH_SECONDS):
        self._store = store
        self._clock = clock
        self._flush_seconds = flush_seconds
        self._keys: dict[str, ApiKey] = {}
        self._lock = asyncio.Lock()
        self._writes: set[asyncio.Task[None]] = set()

    async def load(self) -> None:
        for entity in await self._store.list_entities("api_key"):
            self._keys[entity.id] = self._record(entity.id, entity.doc)

    def apply_stored(self, changes: Sequence[StoredChange]) -> None:
        """Keys created or revoked on another node (cluster mode's change feed).

        A revocation made anywhere refuses the key here too; a put of a key
        already known (a last-used time written back) changes nothing.
        """
        for change in changes:
            if change.kind != "api_key" or change.action == "command":
                continue
            if change.action == "delete":
                self._keys.pop(change.id, None)
            elif change.doc is not None and change.id not in self._keys:
                self._keys[change.id] = self._record(change.id, change.doc)

    def _record(self, key_id: str, doc: Mapping[str, Any]) -> ApiKey:
        return ApiKey(
            id=key_id,
            tenant=str(doc["tenant"]),
            digest=bytes.fromhex(doc["sha256"]),
            name=doc.get("name"),
            created_at=float(doc["created_at"]),
            last_used_at=doc.get("last_used_at"),
            flushed_at=self._clock.monotonic(),
            stored_last_used_at=doc.get("last_used_at"),
        )

    def list(self, tenant: str) -> list[ApiKey]:
        return sorted(
            (k for k in self._keys.values() if k.tenant == tenant), key=lambda k: k.created_at
        )

    async def create(self, tenant: str, name: str | None = None) -> tuple[ApiKey, str]:
        """A new key for ``tenant``: (its record, the key itself, which is not kept)."""
        async with self._lock:
            if sum(1 for k in self._keys.values() if k.tenant == tenant) >= MAX_KEYS_PER_TENANT:
                raise TooManyKeys(f"tenant {tenant!r} has {MAX_KEYS_PER_TENANT} keys already")
            key_id = secrets.token_hex(_ID_BYTES)
            while key_id in self._keys:
                key_id = secrets.token_hex(_ID_BYTES)
            key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"
            record = ApiKey(
                id=key_id,
                tenant=tenant,
                digest=_digest(key),
                name=name,
                created_at=self._clock.time(),
                last_used_at=None,
                flushed_at=self._clock.monotonic(),
                stored_last_used_at=None,
            )
            await self._store.put_entity(self._entity(record))
            self._keys[key_id] = record
        return record, key

    async def revoke(self, tenant: str, key_id: str) -> None:
        """Forget the key now; the next request presenting it is refused."""
        async with self._lock:
            record = self._keys.get(key_id)
            if record is None or record.tenant != tenant:
                raise NotFound(f"tenant {tenant!r} has no key {key_id!r}")
            del self._keys[key_id]
            try:
                await self._store.delete_entity("api_key", key_id)
            except BaseException:
                self._keys[key_id] = record  # still stored: it would be back after a restart
                raise

    async def revoke_tenant(self, tenant: str) -> None:
        """Revoke every key of a tenant being deleted."""
        for record in self.list(tenant):
            await self.revoke(tenant, record.id)

    def authenticate(self, presented: str) -> ApiKey | None:
        """The key ``presented`` names, if it is one; notes its use."""
        if not presented.startswith(KEY_PREFIX):
            return None
        key_id, _, _ = presented[len(KEY_PREFIX) :].partition("_")
        record = self._keys.get(key_id)
        if record is None or not hmac.compare_digest(_digest(presented), record.digest):
            return None
        record.last_used_at = self._clock.time()
        now = self._clock.monotonic()
        if now - record.flushed_at >= self._flush_seconds:
            record.flushed_at = now
            task = asyncio.get_running_loop().create_task(self._write_last_used(record))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)
        return record

    async def close(self) -> None:
        """Let background writes finish, then write every last-used time not yet stored."""
        await asyncio.gather(*self._writes, return_exceptions=True)
        for record in list(self._keys.values()):
            if record.last_used_at != record.stored_last_used_at:
                await self._write_last_used(record)

    async def _write_last_used(self, record: ApiKey) -> None:
        async with self._lock:
            if self._keys.get(record.id) is not record:
                return  # revoked meanwhile: writing it would bring it back
            used = record.last_used_at
            try:
                # An update only: a key revoked on another node stays revoked.
                if not await self._store.replace_entity(self._entity(record)):
                    return
                record.stored_last_used_at = used
            except Exception as exc:  # a missed last-used time is not worth failing anything
                log.warning("could not store the last use of key %s: %s", record.prefix, exc)

    def _entity(self, record: ApiKey) -> Entity:
        return Entity(
            kind="api_key",
            id=record.id,
            tenant_id=record.tenant,
            doc=record.doc(),
            updated_at=self._clock.time(),
        )


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


__all__ = ["KEY_PREFIX", "ApiKey", "KeyService"]
