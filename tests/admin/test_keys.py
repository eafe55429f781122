"""Tenants' API keys on a real SQLite store (format, hashing, revocation, last use); tokens."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from hookrouter.admin.keys import KEY_PREFIX, KeyService
from hookrouter.clock import ManualClock
from hookrouter.config.reader import TableReader
from hookrouter.config.server import parse_admin
from hookrouter.errors import ConfigIssue, NotFound
from hookrouter.store import EventStore, open_store
from hookrouter.store.base import Entity


class CountingStore:
    """The real store, counting entity writes (the thing last-used must not do per request)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.puts = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def put_entity(self, entity: Entity) -> None:
        self.puts += 1
        await self.store.put_entity(entity)

    async def replace_entity(self, entity: Entity) -> bool:
        self.puts += 1
        return await self.store.replace_entity(entity)


@pytest.fixture
async def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = open_store("sqlite", path=tmp_path / "store")
    await opened.open()
    yield CountingStore(opened)
    await opened.close()


async def test_a_key_is_recognisable_high_entropy_and_stored_only_as_its_hash(
    store: CountingStore, tmp_path: Path
) -> None:
    keys = KeyService(store, ManualClock())  # type: ignore[arg-type]
    record, key = await keys.create("acme", "ci")
    assert key.startswith(f"{KEY_PREFIX}{record.id}_")
    secret = key.split("_", 2)[2]  # the secret itself may hold "_"
    assert len(secret) >= 43  # token_urlsafe(32): 32 bytes of entropy
    assert record.prefix == f"hrk_{record.id}" and record.prefix in key
    assert record.digest == hashlib.sha256(key.encode()).digest()
    await store.store.close()  # everything on disk
    with closing(sqlite3.connect(tmp_path / "store" / "events.db")) as conn:
        dump = "\n".join(conn.iterdump())
    assert secret not in dump and hashlib.sha256(key.encode()).hexdigest() in dump


async def test_authenticate_accepts_the_key_only(store: CountingStore) -> None:
    keys = KeyService(store, ManualClock())  # type: ignore[arg-type]
    record, key = await keys.create("acme")
    assert keys.authenticate(key) is record
    assert keys.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert keys.authenticate(f"{KEY_PREFIX}nope_{key.split('_', 2)[2]}") is None
    assert keys.authenticate("Bearer " + key) is None
    assert keys.authenticate("") is None


async def test_revocation_is_immediate_and_survives_a_reload(store: CountingStore) -> None:
    keys = KeyService(store, ManualClock())  # type: ignore[arg-type]
    kept, kept_key = await keys.create("acme")
    gone, gone_key = await keys.create("acme")
    with pytest.raises(NotFound):
        await keys.revoke("globex", gone.id)  # another tenant's key id is not found
    await keys.revoke("acme", gone.id)
    assert keys.authenticate(gone_key) is None
    again = KeyService(store, ManualClock())  # type: ignore[arg-type]
    await again.load()
    assert [k.id for k in again.list("acme")] == [kept.id]
    assert again.authenticate(kept_key) is not None and again.authenticate(gone_key) is None


async def test_last_use_is_written_at_most_once_per_interval(store: CountingStore) -> None:
    clock = ManualClock()
    keys = KeyService(store, clock, flush_seconds=60)  # type: ignore[arg-type]
    record, key = await keys.create("acme")
    writes = store.puts
    for _ in range(1000):
        assert keys.authenticate(key) is record
        clock.advance(0.01)
    await asyncio.sleep(0)
    assert store.puts == writes  # ten seconds of requests: no write
    clock.advance(60)
    keys.authenticate(key)
    keys.authenticate(key)
    await asyncio.gather(*keys._writes)
    assert store.puts == writes + 1
    await keys.close()  # the last use since that write
    reloaded = KeyService(store, clock)  # type: ignore[arg-type]
    await reloaded.load()
    assert reloaded.list("acme")[0].last_used_at == record.last_used_at


async def test_a_pending_last_use_write_does_not_bring_a_revoked_key_back(
    store: CountingStore,
) -> None:
    clock = ManualClock()
    keys = KeyService(store, clock, flush_seconds=0)  # type: ignore[arg-type]
    record, key = await keys.create("acme")
    keys.authenticate(key)  # schedules a write
    await keys.revoke("acme", record.id)
    await asyncio.gather(*keys._writes)
    assert await store.list_entities("api_key") == []


async def test_a_last_use_write_does_not_bring_back_a_key_revoked_elsewhere(
    store: CountingStore,
) -> None:
    clock = ManualClock()
    keys = KeyService(store, clock, flush_seconds=0)  # type: ignore[arg-type]
    record, key = await keys.create("acme")
    # Another node revoked it; this node has not heard yet and still knows the key.
    assert await store.delete_entity("api_key", record.id) is True
    keys.authenticate(key)  # schedules a last-use write
    await asyncio.gather(*keys._writes)
    await keys.close()
    assert await store.list_entities("api_key") == []


async def test_deleting_a_tenant_revokes_its_keys(store: CountingStore) -> None:
    keys = KeyService(store, ManualClock())  # type: ignore[arg-type]
    _, a = await keys.create("acme")
    _, b = await keys.create("acme")
    _, g = await keys.create("globex")
    await keys.revoke_tenant("acme")
    assert keys.authenticate(a) is None and keys.authenticate(b) is None
    assert keys.authenticate(g) is not None


@pytest.mark.parametrize(
    ("admin", "problem"),
    [
        ({"token": "admin-token", "read_only_token": "short"}, "too short"),
        ({"token": "admin-token", "read_only_token": "admin-token"}, "must differ"),
    ],
)
def test_read_only_token_is_checked(admin: dict[str, str], problem: str) -> None:
    issues: list[ConfigIssue] = []
    parse_admin(TableReader(admin, "admin", issues))
    assert [i.path for i in issues] == ["admin.read_only_token"] and problem in issues[0].message


def test_read_only_token_is_read() -> None:
    issues: list[ConfigIssue] = []
    settings = parse_admin(TableReader({"token": "a" * 8, "read_only_token": "b" * 8}, "", issues))
    assert (issues, settings.read_only_token) == ([], "b" * 8)
