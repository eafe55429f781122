"""Resolve endpoint host names asynchronously, SSRF-check them, and cache the verdict.

``getaddrinfo`` runs in the loop's thread pool, and a thread hop per attempt
would eat a large share of the delivery CPU budget: verdicts are cached per
(host, port) for ``ttl``
seconds (30 s: short enough to follow DNS changes of a moving endpoint, long
enough that lookups are rare). Concurrent lookups of one name share a single
query. Refusals are cached too, so a refused endpoint does not hammer DNS.
The decision itself is the pure :func:`hookrouter.delivery.ssrf.check_destination`.
A refusal is logged with its reason when it is cached, so once per host and TTL.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.delivery.ssrf import (
    DestinationPolicy,
    IPAddress,
    check_destination,
    literal_address,
)
from hookrouter.errors import DeliveryError, DestinationRefused

log = logging.getLogger(__name__)

DEFAULT_TTL = 30.0
# A failed lookup is retried sooner: resolvers fail transiently.
FAILURE_TTL = 5.0


@dataclass(frozen=True, slots=True)
class ResolverStats:
    cached: int
    lookups: int
    hits: int
    refusals: int


class Resolver:
    """Host name -> one checked address to connect to, or ``DeliveryError``."""

    def __init__(
        self, policy: DestinationPolicy, *, ttl: float = DEFAULT_TTL, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.policy = policy
        self.ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, int], tuple[float, IPAddress | DeliveryError]] = {}
        self._inflight: dict[tuple[str, int], asyncio.Future[IPAddress]] = {}
        self._lookups = self._hits = self._refusals = 0

    def cached(self, host: str, port: int) -> IPAddress | None:
        """The cached verdict without awaiting: an address, None (unknown), or raises."""
        cached = self._cache.get((host.lower(), port))
        if cached is None or cached[0] <= self._clock.monotonic():
            return None
        self._hits += 1
        verdict = cached[1]
        if isinstance(verdict, DeliveryError):
            # A fresh instance: re-raising one object grows its traceback.
            raise type(verdict)(verdict.message, reason=verdict.reason)
        return verdict

    async def resolve(self, host: str, port: int) -> IPAddress:
        """The address for ``host``; raises ``DestinationRefused`` / ``DeliveryError``."""
        address = self.cached(host, port)
        if address is not None:
            return address
        key = (host.lower(), port)
        literal = literal_address(host)
        if literal is not None:  # no lookup, but parse and check once per TTL, not per attempt
            now = self._clock.monotonic()
            try:
                verdict: IPAddress | DeliveryError = check_destination(host, [literal], self.policy)
            except DeliveryError as exc:
                verdict = exc
                self._refused(exc)
            self._cache[key] = (now + self.ttl, verdict)
            if isinstance(verdict, DeliveryError):
                raise verdict
            return verdict
        shared = self._inflight.get(key)
        if shared is not None:
            return await asyncio.shield(shared)
        future: asyncio.Future[IPAddress] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            address = await self._lookup(host, port)
        except DeliveryError as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: sharers re-raise it; no "never retrieved" noise
            raise
        else:
            future.set_result(address)
            return address
        finally:
            del self._inflight[key]

    async def _lookup(self, host: str, port: int) -> IPAddress:
        self._lookups += 1
        loop = asyncio.get_running_loop()
        now = self._clock.monotonic()
        key = (host.lower(), port)
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            error = DeliveryError(f"cannot resolve {host}: {exc}", reason="dns_failure")
            self._cache[key] = (now + FAILURE_TTL, error)
            raise error from exc
        addresses = [str(info[4][0]) for info in infos]
        try:
            address = check_destination(host, addresses, self.policy)
        except DeliveryError as exc:
            self._refused(exc)
            self._cache[key] = (now + self.ttl, exc)
            raise
        self._cache[key] = (now + self.ttl, address)
        return address

    def _refused(self, exc: DeliveryError) -> None:
        self._refusals += 1
        if isinstance(exc, DestinationRefused):
            log.warning("delivery refused by the SSRF guard: %s", exc.message)

    def forget(self, host: str | None = None) -> None:
        """Drop cached verdicts (all, or one host's): after a config change."""
        if host is None:
            self._cache.clear()
        else:
            for key in [k for k in self._cache if k[0] == host.lower()]:
                del self._cache[key]

    def stats(self) -> ResolverStats:
        return ResolverStats(len(self._cache), self._lookups, self._hits, self._refusals)

    def __repr__(self) -> str:
        return f"Resolver(cached={len(self._cache)}, policy={self.policy!r})"


__all__ = ["Resolver", "ResolverStats"]
