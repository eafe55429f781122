"""The PostgreSQL change feed: entity writes and commands, versioned in commit order, notified.

A real server (the shared one, a schema per test); two stores stand for two nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from tests.support.postgres_store import (
    postgres_available,
    schema_for,
    shared_server,
    store_options,
)

from hookrouter.store.base import Entity
from hookrouter.store.postgres import PostgresStore

pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")
CHANNEL = "test-changes"


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    opened = []
    for node in ("a", "b"):
        store = PostgresStore(**{**store_options(tmp_path), "node_id": node})  # type: ignore[arg-type]
        await store.open()
        store.changes_notify = (CHANNEL, node)
        opened.append(store)
    yield opened[0], opened[1]
    for store in opened:
        await store.close()


def _endpoint(entity_id: str, url: str) -> Entity:
    return Entity("endpoint", entity_id, "acme", {"id": entity_id, "url": url}, 1.0)


async def test_changes_come_back_in_order_with_deletions_and_commands(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = nodes
    start = await b.last_change()
    await a.put_entity(_endpoint("e1", "https://one.test/"))
    await b.put_entity(_endpoint("e2", "https://two.test/"))
    await a.put_entity(_endpoint("e1", "https://uno.test/"))  # e1's put moves up the feed
    assert await a.delete_entity("endpoint", "e2")
    assert not await a.delete_entity("endpoint", "e2")  # nothing there: nothing versioned
    await b.send_command("breaker_reset", "e1")
    found = await b.changes_since(start, 100)
    assert [(c.action, c.kind, c.id) for c in found] == [
        ("put", "endpoint", "e1"),
        ("delete", "endpoint", "e2"),
        ("command", "breaker_reset", "e1"),
    ]
    assert found[0].doc == {"id": "e1", "url": "https://uno.test/"}
    versions = [c.version for c in found]
    assert versions == sorted(versions) and versions[-1] == await a.last_change()
    assert await b.changes_since(versions[-1], 100) == []
    assert [c.id for c in await b.changes_since(start, 1)] == ["e1"]  # paged
    # Stored again after its deletion: a put, and no deletion left in the feed.
    await b.put_entity(_endpoint("e2", "https://two.test/"))
    again = await a.changes_since(versions[-1], 100)
    assert [(c.action, c.id) for c in again] == [("put", "e2")]
    assert [c.action for c in await a.changes_since(start, 100)].count("delete") == 0


async def test_every_change_is_notified_at_commit_with_its_version(
    nodes: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    a, b = nodes
    heard: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(
        shared_server().dsn, server_settings={"search_path": schema_for(tmp_path)}
    )
    try:
        await conn.add_listener(CHANNEL, lambda *args: heard.put_nowait(str(args[3])))
        await a.put_entity(_endpoint("e1", "https://one.test/"))
        await b.delete_entity("endpoint", "e1")
        version = await a.send_command("breaker_reset", "e9")
        notices = [await asyncio.wait_for(heard.get(), 5) for _ in range(3)]
        assert [n.split(" ")[0] for n in notices] == ["a", "b", "a"]
        assert notices[-1] == f"a {version}"
        a.changes_notify = None  # single-node mode: stored, not notified
        await a.put_entity(_endpoint("e3", "https://three.test/"))
        await asyncio.sleep(0.3)
        assert heard.empty()
    finally:
        await conn.close()


async def test_concurrent_writers_commit_in_version_order(
    nodes: tuple[PostgresStore, PostgresStore],
) -> None:
    """A reader between commits never sees a version above one not yet committed."""
    a, b = nodes
    start = await a.last_change()
    seen: list[list[int]] = []

    async def write(store: PostgresStore, n: int) -> None:
        await store.put_entity(_endpoint(f"e{n}", f"https://{n}.test/"))

    async def read() -> None:
        for _ in range(30):
            seen.append([c.version for c in await b.changes_since(start, 1000)])
            await asyncio.sleep(0)

    await asyncio.gather(*(write(a if n % 2 else b, n) for n in range(60)), read())
    final = [c.version for c in await a.changes_since(start, 1000)]
    assert len(final) == 60
    for snapshot in seen:  # each read is a prefix of the final order
        assert snapshot == final[: len(snapshot)]
