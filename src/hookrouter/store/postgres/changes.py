"""The change feed: entity writes and operator commands, versioned, notified, read in order.

Theory of operation
-------------------
Every entity put or delete and every operator command (a breaker reset) is
one statement that takes the next number of ``change_versions`` and stores
it with the change: the entity's ``version``, its ``entity_deletions`` row,
or its ``commands`` row (one row per command and target, the last one). In
cluster mode the same statement notifies ``<node> <version>`` on the
changes channel; the notice is sent at commit, with the change.

A transaction-level advisory lock is taken *before* the version is drawn and
held until commit, so versions commit in the order they were drawn: a
snapshot that shows version ``n`` shows every version below it that will
ever commit. ``changes_since(v)`` therefore misses nothing, and a node that
applied everything up to ``v`` asks only for what is above ``v`` (an index
probe per table when nothing changed, so the catch-up scan can ask often).
Entity writes are an operator's pace, so serialising them costs nothing that
matters.
"""

from __future__ import annotations

from typing import Final

import orjson

from hookrouter.store.base import ChangeAction, Entity, EntityKind, StoredChange
from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.schema import LOCK_NAMESPACE

# (channel, node id) in cluster mode; None: store the change without a notice.
Notify = tuple[str, str] | None

_KEY: Final = f"{LOCK_NAMESPACE}, hashtext('changes.' || current_schema())"
_LOCK: Final = f"lock AS (SELECT pg_advisory_xact_lock({_KEY}))"


# The lock again, in a statement of its own: a statement's snapshot is taken
# before the locks it takes, so one that must see every change committed while
# it waited (a breaker write racing a removal) takes the lock first, then runs.
HOLD: Final = f"SELECT pg_advisory_xact_lock({_KEY})"
SHARE: Final = f"SELECT pg_advisory_xact_lock_shared({_KEY})"


def _notice(channel: int) -> str:
    """Notify ``<node> <version>`` (channel at ``$channel``, node next) unless no channel."""
    node = f"${channel + 1}"
    return (
        f"CASE WHEN ${channel}::text IS NULL THEN NULL"
        f" ELSE pg_notify(${channel}, {node} || ' ' || version) END"
    )


# The insert draws its version from a row of ``lock``, so after the lock is held.
PUT_ENTITY: Final = f"""
WITH {_LOCK},
put AS (
    INSERT INTO entities (kind, id, tenant_id, doc, updated_at, version)
    SELECT $1, $2, $3, $4::jsonb, $5, nextval('change_versions') FROM lock
    ON CONFLICT (kind, id) DO UPDATE SET tenant_id = excluded.tenant_id,
        doc = excluded.doc, updated_at = excluded.updated_at, version = excluded.version
    RETURNING version),
revived AS (
    DELETE FROM entity_deletions
    WHERE kind = $1 AND id = $2 AND EXISTS (SELECT 1 FROM lock))
SELECT version, {_notice(6)} FROM put"""
# An update only: a row deleted meanwhile stays deleted. Its EXISTS takes the lock first.
REPLACE_ENTITY: Final = f"""
WITH {_LOCK},
put AS (
    UPDATE entities SET tenant_id = $3, doc = $4::jsonb, updated_at = $5,
        version = nextval('change_versions')
    WHERE kind = $1 AND id = $2 AND EXISTS (SELECT 1 FROM lock)
    RETURNING version)
SELECT version, {_notice(6)} FROM put"""
# Every row change waits for the lock too (its EXISTS runs first): a statement
# holding the lock never waits on a row another one locked before it. A removed
# endpoint's (or tenant's) breaker rows go with it: no node lists them again.
DELETE_ENTITY: Final = f"""
WITH {_LOCK},
gone AS (
    DELETE FROM entities WHERE kind = $1 AND id = $2 AND EXISTS (SELECT 1 FROM lock)
    RETURNING kind, id),
noted AS (
    INSERT INTO entity_deletions (kind, id, version)
    SELECT kind, id, nextval('change_versions') FROM gone
    ON CONFLICT (kind, id) DO UPDATE SET version = excluded.version
    RETURNING version),
unlisted AS (
    DELETE FROM breakers WHERE EXISTS (SELECT 1 FROM gone)
        AND (($1 = 'endpoint' AND endpoint_id = $2) OR ($1 = 'tenant' AND tenant_id = $2)))
SELECT version, {_notice(3)} FROM noted"""
COMMAND: Final = f"""
WITH {_LOCK},
sent AS (
    INSERT INTO commands (name, target, version)
    SELECT $1, $2, nextval('change_versions') FROM lock
    ON CONFLICT (name, target) DO UPDATE SET version = excluded.version
    RETURNING version)
SELECT version, {_notice(3)} FROM sent"""
SINCE: Final = """
SELECT version, 'put', kind, id, doc::text FROM entities WHERE version > $1
UNION ALL SELECT version, 'delete', kind, id, NULL FROM entity_deletions WHERE version > $1
UNION ALL SELECT version, 'command', name, target, NULL FROM commands WHERE version > $1
ORDER BY 1 LIMIT $2"""
LAST_VERSION: Final = """
SELECT greatest(0, (SELECT max(version) FROM entities),
    (SELECT max(version) FROM entity_deletions), (SELECT max(version) FROM commands))"""


def _channel(notify: Notify) -> tuple[str | None, str]:
    return notify if notify is not None else (None, "")


async def put_entity(conn: Conn, entity: Entity, doc: str, notify: Notify) -> int:
    """Store one entity document (JSON text); its version."""
    version: int = await conn.fetchval(
        PUT_ENTITY,
        entity.kind,
        entity.id,
        entity.tenant_id,
        doc,
        entity.updated_at,
        *_channel(notify),
    )
    return version


async def replace_entity(conn: Conn, entity: Entity, doc: str, notify: Notify) -> bool:
    """Replace a stored entity's document; False when it is not stored (nothing written)."""
    version = await conn.fetchval(
        REPLACE_ENTITY,
        entity.kind,
        entity.id,
        entity.tenant_id,
        doc,
        entity.updated_at,
        *_channel(notify),
    )
    return version is not None


async def delete_entity(conn: Conn, kind: EntityKind, entity_id: str, notify: Notify) -> bool:
    """Delete one entity; False if there was none (then nothing is versioned or notified).

    The lock is held before the statement so that its breaker delete sees a
    breaker row a transition wrote while the removal waited (``breakers``).
    """
    async with conn.transaction():
        await conn.execute(HOLD)
        version = await conn.fetchval(DELETE_ENTITY, kind, entity_id, *_channel(notify))
    return version is not None


async def command(conn: Conn, name: str, target: str, notify: Notify) -> int:
    """Store an operator command for whichever node it concerns; its version."""
    version: int = await conn.fetchval(COMMAND, name, target, *_channel(notify))
    return version


async def since(conn: Conn, version: int, limit: int) -> list[StoredChange]:
    """The changes above ``version``, oldest first, at most ``limit``."""
    rows = await conn.fetch(SINCE, version, limit)
    return [
        StoredChange(
            int(r[0]), _action(r[1]), r[2], r[3], None if r[4] is None else orjson.loads(r[4])
        )
        for r in rows
    ]


async def last_version(conn: Conn) -> int:
    """The highest version committed (every lower one that will commit has)."""
    return int(await conn.fetchval(LAST_VERSION))


_ACTIONS: Final[dict[str, ChangeAction]] = {"put": "put", "delete": "delete", "command": "command"}


def _action(text: str) -> ChangeAction:
    return _ACTIONS[text]


__all__ = ["Notify", "command", "delete_entity", "last_version", "put_entity", "since"]
