"""Console sessions and portal sign-in links kept where every router node reads them.

Behind a load balancer the next request of a browser may reach another
router: its session and the portal link it opens must be found there. A
store that several routers share (PostgreSQL) offers this table through
``EventStore.session_table``; a store one process owns (SQLite) offers
none, and the console keeps its sessions in that process's memory.

Rows hold who a session is (a tenant or the operator), its CSRF token and
pending flash messages, never the credential it signed in with. Times are
wall seconds: nodes share no monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredSession:
    id: str
    site: str  # "/console" or "/portal": a session opens one site only
    tenant: str | None  # None: the operator
    read_only: bool
    who: str
    csrf: str
    last_seen: float  # wall seconds
    flash: tuple[str, ...] = ()


class SessionTable(Protocol):
    async def get_session(self, session_id: str) -> StoredSession | None: ...

    async def put_session(self, session: StoredSession) -> None:
        """Insert or replace."""
        ...

    async def delete_session(self, session_id: str) -> None: ...

    async def purge_sessions(self, seen_before: float) -> int:
        """Delete sessions idle since before ``seen_before`` and links expired by then."""
        ...

    async def put_link(self, token: str, tenant: str, expires_at: float) -> None: ...

    async def take_link(self, token: str) -> tuple[str, float] | None:
        """The link's (tenant, expires_at), deleting it: a link works once."""
        ...


__all__ = ["SessionTable", "StoredSession"]
