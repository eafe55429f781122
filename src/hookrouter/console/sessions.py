"""Server-side browser sessions and single-use portal sign-in links, in bounded memory.

The browser holds a random session id and nothing else: the admin token or
tenant key it signed in with is checked once and never stored, and the
session remembers only who it is (a ``Principal``). A session ends after
``idle_seconds`` without a request; the tables hold at most ``max_entries``
each, dropping the least recently used first, so a flood of sign-ins costs
memory in proportion to the cap. Sessions live in this process: a restart
signs everyone out, which is the safe direction.

Several routers behind one load balancer (a shared PostgreSQL store) keep
them in the store instead (``SharedSessions``, ``SharedLinks`` over
``store.sessions``), so any node knows a browser's session and opens a link
another node minted. A table rather than signed stateless cookies: signing
out and the idle expiry must hold on every node at once, which needs a
shared record anyway, and the store is already there; a page costs one
primary-key read, and a write only when its flash messages change or its
last-seen time is a minute old.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

from hookrouter.admin.operations import Principal
from hookrouter.clock import Clock
from hookrouter.store.sessions import SessionTable, StoredSession

# Precedent: OWASP's session management guidance suggests 15-30 minutes of
# idle time for ordinary applications; an operator console is a privileged one.
IDLE_SECONDS = 15 * 60
LINK_SECONDS = 5 * 60  # a portal link is meant to be opened right after it is minted
MAX_ENTRIES = 10_000
# A shared session's last-seen time is written at most this often (not per page).
TOUCH_SECONDS = 60.0


@dataclass(slots=True)
class Session:
    id: str
    principal: Principal
    who: str  # how the audit log names this session's changes
    csrf: str  # every POST must carry it (a form field)
    last_seen: float  # monotonic in memory, wall seconds in a shared table
    flash: list[str] = field(default_factory=list)  # messages for the next page shown
    saved_flash: tuple[str, ...] = ()  # as last stored (shared sessions)


class Sessions(Protocol):
    """A site's sessions: in this process (``SessionStore``) or shared (``SharedSessions``)."""

    idle_seconds: float

    async def create(self, principal: Principal, who: str) -> Session: ...

    async def get(self, session_id: str | None) -> Session | None: ...

    async def save(self, session: Session) -> None:
        """After a request: keep what changed (flash messages, last seen)."""
        ...

    async def drop(self, session_id: str | None) -> None: ...


class SessionStore:
    def __init__(
        self, clock: Clock, *, idle_seconds: float = IDLE_SECONDS, max_entries: int = MAX_ENTRIES
    ) -> None:
        self._clock = clock
        self.idle_seconds = idle_seconds
        self._max = max_entries
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    async def create(self, principal: Principal, who: str) -> Session:
        session = _new_session(principal, who, self._clock.monotonic())
        self._sessions[session.id] = session
        while len(self._sessions) > self._max:
            self._sessions.popitem(last=False)
        return session

    async def get(self, session_id: str | None) -> Session | None:
        """The live session with that id (its idle time starts again), else None."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock.monotonic()
        if now - session.last_seen > self.idle_seconds:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        self._sessions.move_to_end(session_id)
        return session

    async def save(self, session: Session) -> None:
        pass  # the object in the table is the session

    async def drop(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)


def _new_session(principal: Principal, who: str, now: float) -> Session:
    return Session(
        id=secrets.token_urlsafe(32),
        principal=principal,
        who=who,
        csrf=secrets.token_urlsafe(24),
        last_seen=now,
    )


class SharedSessions:
    """One site's sessions in the store's table, readable by every router node."""

    def __init__(
        self, table: SessionTable, site: str, clock: Clock, *, idle_seconds: float = IDLE_SECONDS
    ) -> None:
        self._table = table
        self._site = site
        self._clock = clock
        self.idle_seconds = idle_seconds

    async def create(self, principal: Principal, who: str) -> Session:
        now = self._clock.time()
        # Expired rows go as new ones come: the table holds about one idle time of sign-ins.
        await self._table.purge_sessions(now - self.idle_seconds)
        session = _new_session(principal, who, now)
        await self._table.put_session(self._stored(session))
        return session

    async def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        row = await self._table.get_session(session_id)
        if row is None or row.site != self._site:
            return None
        if self._clock.time() - row.last_seen > self.idle_seconds:
            await self._table.delete_session(session_id)
            return None
        principal = Principal(tenant=row.tenant, read_only=row.read_only)
        session = Session(row.id, principal, row.who, row.csrf, row.last_seen, list(row.flash))
        session.saved_flash = row.flash
        return session

    async def save(self, session: Session) -> None:
        now = self._clock.time()
        flash = tuple(session.flash)
        if flash == session.saved_flash and now - session.last_seen < TOUCH_SECONDS:
            return
        session.last_seen, session.saved_flash = now, flash
        await self._table.put_session(self._stored(session))

    async def drop(self, session_id: str | None) -> None:
        if session_id:
            await self._table.delete_session(session_id)

    def _stored(self, s: Session) -> StoredSession:
        p = s.principal
        flash = tuple(s.flash)
        return StoredSession(
            s.id, self._site, p.tenant, p.read_only, s.who, s.csrf, s.last_seen, flash
        )


@dataclass(frozen=True, slots=True)
class PortalLink:
    token: str
    tenant: str
    expires_at: float  # monotonic in memory, wall seconds in a shared table


class PortalLinks:
    """Sign-in links for one tenant's portal: valid ``LINK_SECONDS``, usable once."""

    def __init__(
        self, clock: Clock, *, ttl_seconds: float = LINK_SECONDS, max_entries: int = MAX_ENTRIES
    ) -> None:
        self._clock = clock
        self.ttl_seconds = ttl_seconds
        self._max = max_entries
        self._links: OrderedDict[str, PortalLink] = OrderedDict()

    async def mint(self, tenant: str) -> PortalLink:
        link = PortalLink(
            secrets.token_urlsafe(32), tenant, self._clock.monotonic() + self.ttl_seconds
        )
        self._links[link.token] = link
        while len(self._links) > self._max:
            self._links.popitem(last=False)
        return link

    async def redeem(self, token: str) -> str | None:
        """The link's tenant, once; None for an unknown, used or expired link."""
        link = self._links.pop(token, None)
        if link is None or self._clock.monotonic() > link.expires_at:
            return None
        return link.tenant


class Links(Protocol):
    ttl_seconds: float

    async def mint(self, tenant: str) -> PortalLink: ...

    async def redeem(self, token: str) -> str | None: ...


class SharedLinks:
    """Portal links in the store's table: minted on one node, opened on any."""

    def __init__(
        self, table: SessionTable, clock: Clock, *, ttl_seconds: float = LINK_SECONDS
    ) -> None:
        self._table = table
        self._clock = clock
        self.ttl_seconds = ttl_seconds

    async def mint(self, tenant: str) -> PortalLink:
        link = PortalLink(secrets.token_urlsafe(32), tenant, self._clock.time() + self.ttl_seconds)
        await self._table.put_link(link.token, link.tenant, link.expires_at)
        return link

    async def redeem(self, token: str) -> str | None:
        found = await self._table.take_link(token)
        if found is None or self._clock.time() > found[1]:
            return None
        return found[0]


__all__ = [
    "IDLE_SECONDS",
    "LINK_SECONDS",
    "Links",
    "PortalLink",
    "PortalLinks",
    "Session",
    "SessionStore",
    "Sessions",
    "SharedLinks",
    "SharedSessions",
]
