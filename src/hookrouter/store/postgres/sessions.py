"""The console's shared sessions and portal links on PostgreSQL (``store.sessions``)."""

from __future__ import annotations

import orjson

from hookrouter.store.postgres.conn import Conn
from hookrouter.store.postgres.queries import affected
from hookrouter.store.sessions import StoredSession

_COLUMNS = "id, site, tenant, read_only, who, csrf, last_seen, flash::text"


async def get_session(conn: Conn, session_id: str) -> StoredSession | None:
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM console_sessions WHERE id = $1", session_id)
    if row is None:
        return None
    flash = tuple(str(m) for m in orjson.loads(row[7]))
    return StoredSession(row[0], row[1], row[2], row[3], row[4], row[5], row[6], flash)


async def put_session(conn: Conn, s: StoredSession) -> None:
    await conn.execute(
        f"INSERT INTO console_sessions ({_COLUMNS.replace('::text', '')})"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)"
        " ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, flash = excluded.flash",
        s.id,
        s.site,
        s.tenant,
        s.read_only,
        s.who,
        s.csrf,
        s.last_seen,
        orjson.dumps(list(s.flash)).decode(),
    )


async def delete_session(conn: Conn, session_id: str) -> None:
    await conn.execute("DELETE FROM console_sessions WHERE id = $1", session_id)


async def purge(conn: Conn, seen_before: float) -> int:
    gone = affected(
        await conn.execute("DELETE FROM console_sessions WHERE last_seen < $1", seen_before)
    )
    return gone + affected(
        await conn.execute("DELETE FROM portal_links WHERE expires_at < $1", seen_before)
    )


async def put_link(conn: Conn, token: str, tenant: str, expires_at: float) -> None:
    await conn.execute(
        "INSERT INTO portal_links (token, tenant, expires_at) VALUES ($1, $2, $3)",
        token,
        tenant,
        expires_at,
    )


async def take_link(conn: Conn, token: str) -> tuple[str, float] | None:
    row = await conn.fetchrow(
        "DELETE FROM portal_links WHERE token = $1 RETURNING tenant, expires_at", token
    )
    return None if row is None else (str(row[0]), float(row[1]))


__all__ = ["delete_session", "get_session", "purge", "put_link", "put_session", "take_link"]
