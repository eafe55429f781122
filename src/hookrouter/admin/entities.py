"""Tenants, sources and endpoints as a service: validate, persist, publish.

The store holds the documents; this service validates every change with the
config parsers, checks references (a source needs its tenant; a tenant with
sources or endpoints cannot be deleted), persists it, and applies it to the
live ``Catalog`` as one entity's change (``Catalog.put_*``/``remove_*``: the
cost of one change does not grow with the catalog, where a rebuild per change
made N creates cost O(N^2)). Changes are serialised by a lock, so two admin
calls can never interleave their checks and writes.

At start the config file seeds the store. An entity the file declares is
written when the file's version of it is new or differs from the version
seeded last time (a hash kept in the stored document under ``_seed``);
otherwise the stored document is kept, so changes made at run time (through
the admin API, or an endpoint disabled by a 410 Gone) survive restarts until
someone edits that entity in the file. Entities created through the admin API
and absent from the file are kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import orjson

from hookrouter.admin.paging import SortedIds, page_of
from hookrouter.clock import Clock
from hookrouter.config import Config
from hookrouter.config.catalog import Catalog
from hookrouter.config.entities import (
    EndpointConfig,
    SourceConfig,
    TenantConfig,
    destination_policy,
    parse_entity_doc,
)
from hookrouter.config.stored import parse_stored
from hookrouter.core.addresses import DestinationPolicy
from hookrouter.errors import ConfigError, ConfigIssue, NotFound, RequestRejected
from hookrouter.store.base import Entity, EntityKind, EventStore, StoredChange

log = logging.getLogger(__name__)

KINDS: tuple[EntityKind, ...] = ("tenant", "source", "endpoint")
USER_KINDS: tuple[EntityKind, ...] = ("source", "endpoint")  # entities that name a tenant
SEED_KEY = "_seed"
AnyEntity = TenantConfig | SourceConfig | EndpointConfig


class Conflict(RequestRejected):
    status = 409
    reason = "conflict"


class LimitReached(Conflict):
    reason = "limit_reached"


# What one admin client may create, so that a leaked tenant key or a runaway
# integration cannot grow the catalog (and an event's fan-out) without bound.
# The config file, the operator's own, is not held to them.
MAX_TENANTS = 1_000_000
MAX_SOURCES_PER_TENANT = 256
MAX_ENDPOINTS_PER_TENANT = 256


class EntityService:
    """Owns the published catalog and every change to it."""

    def __init__(
        self,
        store: EventStore,
        clock: Clock,
        on_change: Callable[[Catalog], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._lock = asyncio.Lock()
        self._items: dict[EntityKind, dict[str, AnyEntity]] = {k: {} for k in KINDS}
        self._order: dict[EntityKind, SortedIds] = {k: SortedIds() for k in KINDS}  # list pages
        self._seeds: dict[tuple[EntityKind, str], str | None] = {}
        self.catalog = Catalog((), (), ())
        # Sources and endpoints loaded whose tenant is not stored, by that tenant.
        self._orphans: dict[str, list[tuple[EntityKind, str]]] = {}
        self._on_change = on_change
        # [delivery]'s SSRF policy, for documents put at run time (set by load).
        self._destinations: DestinationPolicy | None = None

    def catalog_getter(self) -> Callable[[], Catalog]:
        """A callable returning the catalog published at the time of the call.

        The hot paths call it once per request and per delivery: a partial of
        the builtin ``getattr`` runs in C, where a lambda cost a Python frame.
        """
        return partial(getattr, self, "catalog")

    async def load(self, config: Config) -> None:
        """Seed the store from ``config``, then load and publish everything stored."""
        self._destinations = destination_policy(config.delivery)
        seeds: dict[EntityKind, tuple[AnyEntity, ...]] = {
            "tenant": config.tenants,
            "source": config.sources,
            "endpoint": config.endpoints,
        }
        async with self._lock:
            now = self._clock.time()
            # One kind at a time: reading the next kind while checking this one
            # was slower (the store's thread holds the GIL for most of a read).
            for kind in KINDS:
                stored = {entity.id: entity.doc for entity in await self._store.list_entities(kind)}
                await self._seed(kind, seeds[kind], stored, now)
                self._load_kind(kind, stored)
            tenants = self._items["tenant"]
            for user_kind in USER_KINDS:
                for item in self._items[user_kind].values():
                    if not isinstance(item, TenantConfig) and item.tenant not in tenants:
                        self._orphans.setdefault(item.tenant, []).append((user_kind, item.id))
            self.catalog = Catalog(
                [i for i in self._items["tenant"].values() if isinstance(i, TenantConfig)],
                [i for i in self._items["source"].values() if isinstance(i, SourceConfig)],
                [i for i in self._items["endpoint"].values() if isinstance(i, EndpointConfig)],
            )
            self._published()

    async def _seed(
        self,
        kind: EntityKind,
        items: Sequence[AnyEntity],
        stored: dict[str, dict[str, Any]],
        now: float,
    ) -> None:
        """Store each of the config file's ``items`` whose document changed since it was seeded."""
        for item in items:
            seed = _seed_of(item.doc)
            previous = stored.get(item.id)
            if previous is None or previous.get(SEED_KEY) != seed:
                doc = {**item.doc, SEED_KEY: seed}
                await self._store.put_entity(_entity(kind, item.id, item, doc, now))
                stored[item.id] = doc

    def _load_kind(self, kind: EntityKind, stored: dict[str, dict[str, Any]]) -> None:
        """Check each stored document of ``kind`` again and hold the result."""
        items = self._items[kind]
        for entity_id, doc in stored.items():
            seed = doc.get(SEED_KEY)
            plain = doc
            if seed is not None:  # None: stored through the API (``_seeds`` reads it as absent)
                self._seeds[(kind, entity_id)] = seed
                plain = {k: v for k, v in doc.items() if k != SEED_KEY}
            items[entity_id] = _stored(kind, entity_id, plain, self._store)
        self._order[kind] = SortedIds(items)

    def page(
        self, kind: EntityKind, after: str | None, limit: int, tenant: str | None = None
    ) -> tuple[Sequence[AnyEntity], str | None]:
        """Up to ``limit`` entities by id past ``after``, and the next page's cursor.

        With ``tenant``, only that tenant's (itself, or its sources or
        endpoints, from the catalog's per-tenant index): the cost is the
        page's, or the tenant's, never the router's whole catalog.
        """
        items = self._items[kind]
        if tenant is None:
            ids, cursor = self._order[kind].page(after, limit)
        elif kind == "tenant":
            ids, cursor = page_of([tenant] if tenant in items else [], after, limit)
        else:
            users = self.catalog.sources_of if kind == "source" else self.catalog.endpoints_of
            ids, cursor = page_of(users(tenant), after, limit)
        return [items[i] for i in ids if i in items], cursor

    def get(self, kind: EntityKind, entity_id: str) -> AnyEntity:
        item = self._items[kind].get(entity_id)
        if item is None:
            raise NotFound(f"no {kind} named {entity_id!r}")
        return item

    async def put(
        self, kind: EntityKind, doc: Mapping[str, Any], *, create_only: bool = False
    ) -> tuple[AnyEntity, bool]:
        """Validate and store ``doc``; returns (entity, created)."""
        item = parse_entity_doc(kind, doc, destinations=self._destinations)
        async with self._lock:
            exists = item.id in self._items[kind]
            if create_only and exists:
                raise Conflict(f"{kind} {item.id!r} already exists")
            self._check_tenant(item)
            if not exists:
                self._check_limits(item)
            seed = self._seeds.get((kind, item.id))
            doc = dict(item.doc) if seed is None else {**item.doc, SEED_KEY: seed}
            await self._store.put_entity(_entity(kind, item.id, item, doc, self._clock.time()))
            self._items[kind][item.id] = item
            self._order[kind].add(item.id)
            self._apply(item)
        return item, not exists

    async def delete(self, kind: EntityKind, entity_id: str) -> None:
        async with self._lock:
            if entity_id not in self._items[kind]:
                raise NotFound(f"no {kind} named {entity_id!r}")
            if kind == "tenant":
                self._check_unused(entity_id)
            await self._store.delete_entity(kind, entity_id)
            self._forget(kind, entity_id)

    async def apply_stored(self, changes: Sequence[StoredChange]) -> int:
        """Entity changes another node stored (cluster mode's change feed); how many applied.

        Each is applied as one entity's change, in feed order, as if made
        here. A put whose document is the one already live (this node's own
        change, read back) changes nothing; one that no longer validates is
        logged and skipped: the node keeps its previous version.
        """
        applied = 0
        async with self._lock:
            for change in changes:
                kind = _user_kind(change.kind)
                if kind is None or change.action == "command":
                    continue
                if change.action == "delete":
                    applied += self._forget(kind, change.id)
                elif change.doc is not None:
                    applied += self._apply_stored(kind, change.id, change.doc)
        return applied

    def _apply_stored(self, kind: EntityKind, entity_id: str, doc: Mapping[str, Any]) -> bool:
        seed = doc.get(SEED_KEY)
        plain = doc if seed is None else {k: v for k, v in doc.items() if k != SEED_KEY}
        current = self._items[kind].get(entity_id)
        self._seeds[(kind, entity_id)] = seed
        if current is not None and current.doc == plain:
            return False
        try:
            item = _stored(kind, entity_id, plain, self._store)
        except ConfigError as exc:
            log.error(
                "stored %s %r changed but is not valid; kept as it was: %s", kind, entity_id, exc
            )
            return False
        self._items[kind][entity_id] = item
        self._order[kind].add(entity_id)
        self._apply(item)
        return True

    def _forget(self, kind: EntityKind, entity_id: str) -> bool:
        """One entity deleted: out of the live catalog (False if it was not there)."""
        if self._items[kind].pop(entity_id, None) is None:
            return False
        self._order[kind].discard(entity_id)
        self._seeds.pop((kind, entity_id), None)
        if kind == "tenant":
            self.catalog.remove_tenant(entity_id)
        elif kind == "source":
            self.catalog.remove_source(entity_id)
        else:
            self.catalog.remove_endpoint(entity_id)
        self._published()
        return True

    def _check_tenant(self, item: AnyEntity) -> None:
        tenants = self._items["tenant"]
        if isinstance(item, SourceConfig | EndpointConfig) and item.tenant not in tenants:
            raise ConfigError([ConfigIssue("tenant", f"unknown tenant {item.tenant!r}")])

    def _check_limits(self, item: AnyEntity) -> None:
        """A new entity must fit the limits above (each count is an index lookup)."""
        if isinstance(item, TenantConfig):
            count, limit, what = len(self._items["tenant"]), MAX_TENANTS, "the router"
        elif isinstance(item, SourceConfig):
            count = len(self.catalog.sources_of(item.tenant))
            limit, what = MAX_SOURCES_PER_TENANT, f"tenant {item.tenant!r}"
        else:
            count = len(self.catalog.endpoints_of(item.tenant))
            limit, what = MAX_ENDPOINTS_PER_TENANT, f"tenant {item.tenant!r}"
        if count >= limit:
            kind = type(item).__name__.removesuffix("Config").lower()
            raise LimitReached(f"{what} has {limit} {kind}s, the most it may have")

    def _check_unused(self, tenant_id: str) -> None:
        """Refuse to delete a tenant that sources or endpoints still name (the catalog's index)."""
        for kind, users in (
            ("source", self.catalog.sources_of(tenant_id)),
            ("endpoint", self.catalog.endpoints_of(tenant_id)),
        ):
            if users:
                raise Conflict(
                    f"tenant {tenant_id!r} still has {kind}s: {', '.join(sorted(users))}"
                )

    def _apply(self, item: AnyEntity) -> None:
        """One entity added or replaced: change the live catalog, not rebuild it."""
        catalog = self.catalog
        if isinstance(item, TenantConfig):
            new = item.id not in catalog.tenants
            catalog.put_tenant(item)
            if new:  # stored sources/endpoints naming it before it existed join now
                self._adopt(item.id)
        elif isinstance(item, SourceConfig):
            catalog.put_source(item)
        else:
            catalog.put_endpoint(item)
        self._published()

    def _adopt(self, tenant_id: str) -> None:
        """Entities loaded while their tenant was missing (only from an older store)."""
        for kind, entity_id in self._orphans.pop(tenant_id, ()):
            item = self._items[kind].get(entity_id)  # its latest version, if still there
            if item is None or isinstance(item, TenantConfig) or item.tenant != tenant_id:
                continue
            if isinstance(item, SourceConfig):
                self.catalog.put_source(item)
            elif isinstance(item, EndpointConfig):
                self.catalog.put_endpoint(item)

    def _published(self) -> None:
        if self._on_change is not None:
            self._on_change(self.catalog)


def _user_kind(kind: str) -> EntityKind | None:
    """``kind`` if this service keeps it (tenants, sources, endpoints), else None."""
    for known in KINDS:
        if kind == known:
            return known
    return None


def _entity(
    kind: EntityKind, entity_id: str, item: AnyEntity, doc: dict[str, Any], now: float
) -> Entity:
    tenant = None if isinstance(item, TenantConfig) else item.tenant
    return Entity(kind=kind, id=entity_id, tenant_id=tenant, doc=doc, updated_at=now)


def _seed_of(doc: Mapping[str, Any]) -> str:
    """A short, stable hash of a config file's document for one entity."""
    return hashlib.sha256(orjson.dumps(dict(doc), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _stored(
    kind: EntityKind, entity_id: str, doc: Mapping[str, Any], store: EventStore
) -> AnyEntity:
    """A stored document, validated again; a failure names the entity so it can be fixed.

    A document stored by an older version can fail a rule added since (an
    invalid outbound secret, say). Refusing to start is safer than skipping
    it: a missing endpoint would get its deliveries disabled.
    """
    fast = parse_stored(kind, doc)
    if fast is not None:
        return fast
    try:
        return parse_entity_doc(kind, doc)
    except ConfigError as exc:
        where = f"stored {kind} {entity_id!r}"
        issues = [
            ConfigIssue(f"{where}.{i.path}" if i.path else where, i.message) for i in exc.issues
        ]
        issues.append(ConfigIssue(where, _repair_advice(kind, entity_id, exc.issues, store)))
        raise ConfigError(issues) from exc


def _repair_advice(
    kind: EntityKind, entity_id: str, issues: list[ConfigIssue], store: EventStore
) -> str:
    """How an operator gets past a stored entity that no longer validates."""
    if not any(issue.path == "id" for issue in issues):
        # The admin API is not up yet; the file's version of an entity replaces the stored one.
        return "declare it in the config file with corrected values, then start again"
    # An id no config file can declare (empty, or written before names were
    # checked): the only way out is removing it by hand, which the admin API
    # could not address either; the backend knows how.
    return (
        "its id cannot be declared in a config file; with the router stopped, remove it: "
        f"{store.removal_hint(kind, entity_id)}, then start again"
    )
