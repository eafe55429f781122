"""Server-side browser sessions and single-use portal sign-in links, in bounded memory.

The browser holds a random session id and nothing else: the admin token or
tenant key it signed in with is checked once and never stored, and the
session remembers only who it is (a ``Principal``). A session ends after
``idle_seconds`` without a request; the tables hold at most ``max_entries``
each, dropping the least recently used first, so a flood of sign-ins costs
memory in proportion to the cap. Sessions live in this process: a restart
signs everyone out, which is the safe direction.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass, field

from hookrouter.admin.operations import Principal
from hookrouter.clock import Clock

# Precedent: OWASP's session management guidance suggests 15-30 minutes of
# idle time for ordinary applications; an operator console is a privileged one.
IDLE_SECONDS = 15 * 60
LINK_SECONDS = 5 * 60  # a portal link is meant to be opened right after it is minted
MAX_ENTRIES = 10_000


@dataclass(slots=True)
class Session:
    id: str
    principal: Principal
    who: str  # how the audit log names this session's changes
    csrf: str  # every POST must carry it (a form field)
    last_seen: float
    flash: list[str] = field(default_factory=list)  # messages for the next page shown


class SessionStore:
    def __init__(
        self, clock: Clock, *, idle_seconds: float = IDLE_SECONDS, max_entries: int = MAX_ENTRIES
    ) -> None:
        self._clock = clock
        self.idle_seconds = idle_seconds
        self._max = max_entries
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, principal: Principal, who: str) -> Session:
        session = Session(
            id=secrets.token_urlsafe(32),
            principal=principal,
            who=who,
            csrf=secrets.token_urlsafe(24),
            last_seen=self._clock.monotonic(),
        )
        self._sessions[session.id] = session
        while len(self._sessions) > self._max:
            self._sessions.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
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

    def drop(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._sessions)


@dataclass(frozen=True, slots=True)
class PortalLink:
    token: str
    tenant: str
    expires_at: float  # monotonic


class PortalLinks:
    """Sign-in links for one tenant's portal: valid ``LINK_SECONDS``, usable once."""

    def __init__(
        self, clock: Clock, *, ttl_seconds: float = LINK_SECONDS, max_entries: int = MAX_ENTRIES
    ) -> None:
        self._clock = clock
        self.ttl_seconds = ttl_seconds
        self._max = max_entries
        self._links: OrderedDict[str, PortalLink] = OrderedDict()

    def mint(self, tenant: str) -> PortalLink:
        link = PortalLink(
            secrets.token_urlsafe(32), tenant, self._clock.monotonic() + self.ttl_seconds
        )
        self._links[link.token] = link
        while len(self._links) > self._max:
            self._links.popitem(last=False)
        return link

    def redeem(self, token: str) -> str | None:
        """The link's tenant, once; None for an unknown, used or expired link."""
        link = self._links.pop(token, None)
        if link is None or self._clock.monotonic() > link.expires_at:
            return None
        return link.tenant


__all__ = ["IDLE_SECONDS", "LINK_SECONDS", "PortalLink", "PortalLinks", "Session", "SessionStore"]
