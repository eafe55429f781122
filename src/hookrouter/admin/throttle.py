"""A per-client throttle on failed admin logins, in bounded memory.

After ``max_failures`` failed authentications from one client (peer IP)
within ``window_seconds``, that client's requests are answered 429 with
``Retry-After`` until its window ends, before any credential is compared:
guessing tokens or keys then costs a minute per ten tries. A success does
not clear the count, so interleaving one valid key with guesses gains
nothing. The table holds at most ``max_clients`` entries; when it is full
the oldest window is forgotten first, so a flood of source addresses costs
memory in proportion to the cap, never more.

Peers the engine cannot name (the native engines do not pass addresses up)
share one entry: throttled together rather than not at all. An admin
listener of its own (``[admin] listen``) runs on asyncio, which names them.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from hookrouter.clock import Clock
from hookrouter.errors import RequestRejected

# Precedent: fail2ban's sshd jail bans after maxretry failures within
# findtime; nginx limit_req answers the excess with 429 (limit_req_status).
MAX_FAILURES = 10
WINDOW_SECONDS = 60.0
MAX_CLIENTS = 10_000
UNKNOWN_PEER = "?"


class TooManyFailures(RequestRejected):
    status = 429
    reason = "too_many_auth_failures"

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many failed logins from this client; retry in {retry_after:.0f} s")
        self.retry_after = retry_after


@dataclass(slots=True)
class _Window:
    started: float
    failures: int


class AuthThrottle:
    def __init__(
        self,
        clock: Clock,
        *,
        max_failures: int = MAX_FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self._clock = clock
        self._max_failures = max_failures
        self._window = window_seconds
        self._max_clients = max_clients
        self._clients: OrderedDict[str, _Window] = OrderedDict()

    def check(self, peer: str | None) -> None:
        """Raise ``TooManyFailures`` while ``peer`` is over its budget."""
        entry = self._clients.get(peer or UNKNOWN_PEER)
        if entry is None or entry.failures < self._max_failures or not self._max_failures:
            return
        left = entry.started + self._window - self._clock.monotonic()
        if left > 0:
            raise TooManyFailures(left)

    def failed(self, peer: str | None) -> None:
        if not self._max_failures:
            return  # [admin] max_auth_failures = 0: no throttle
        key = peer or UNKNOWN_PEER
        now = self._clock.monotonic()
        entry = self._clients.get(key)
        if entry is None or now - entry.started >= self._window:
            entry = _Window(now, 0)
            self._clients[key] = entry
            self._clients.move_to_end(key)  # ordered by window start: the oldest goes first
            while len(self._clients) > self._max_clients:
                self._clients.popitem(last=False)
        entry.failures += 1

    def __len__(self) -> int:
        return len(self._clients)


__all__ = ["MAX_FAILURES", "WINDOW_SECONDS", "AuthThrottle", "TooManyFailures"]
