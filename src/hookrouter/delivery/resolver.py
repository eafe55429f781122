"""Resolve endpoint host names asynchronously, SSRF-check them, and cache the verdict.

``getaddrinfo`` runs in the loop's thread pool, and a thread hop per attempt
would eat a large share of the delivery CPU budget: verdicts are cached per
(host, port) for ``ttl``
seconds (30 s: short enough to follow DNS changes of a moving endpoint, long
enough that lookups are rare). Concurrent lookups of one name share a single
query. Refusals are cached too, so a refused endpoint does not hammer DNS.
The decision itself is the pure :func:`hookrouter.delivery.ssrf.check_destination`.
A refusal is logged with its reason when it is cached, so once per host and TTL.

Host names come from endpoint URLs, which tenants write through the API: the
cache holds at most ``max_entries`` verdicts and lets go of expired ones, so
a router that runs for months, or a tenant cycling its endpoint through new
names, cannot grow it without bound. Entries are kept in the order they were
stored, which with one TTL per kind is nearly their expiry order: expired
ones are dropped from the front as new ones come, and when full the oldest
(the soonest to expire) goes first.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
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
# Verdicts held at most: well above the hosts a router delivers to within one
# TTL, small enough (a few hundred bytes each) to be no memory concern.
MAX_ENTRIES = 32_768


@dataclass(frozen=True, slots=True)
class ResolverStats:
    cached: int
    lookups: int
    hits: int
    refusals: int
    evicted: int  # live verdicts dropped at the cap (looked up again when next needed)


class Resolver:
    """Host name -> one checked address to connect to, or ``DeliveryError``."""

    def __init__(
        self,
        policy: DestinationPolicy,
        *,
        ttl: float = DEFAULT_TTL,
        clock: Clock = SYSTEM_CLOCK,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.policy = policy
        self.ttl = ttl
        self.max_entries = max(1, max_entries)
        self._clock = clock
        self._cache: OrderedDict[tuple[str, int], tuple[float, IPAddress | DeliveryError]] = (
            OrderedDict()
        )
        self._inflight: dict[tuple[str, int], asyncio.Future[IPAddress]] = {}
        self._lookups = self._hits = self._refusals = self._evicted = 0

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
            try:
                verdict: IPAddress | DeliveryError = check_destination(host, [literal], self.policy)
            except DeliveryError as exc:
                verdict = exc
                self._refused(exc)
            self._remember(key, verdict, self.ttl)
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
        key = (host.lower(), port)
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            error = DeliveryError(f"cannot resolve {host}: {exc}", reason="dns_failure")
            self._remember(key, error, FAILURE_TTL)
            raise error from exc
        addresses = [str(info[4][0]) for info in infos]
        try:
            address = check_destination(host, addresses, self.policy)
        except DeliveryError as exc:
            self._refused(exc)
            self._remember(key, exc, self.ttl)
            raise
        self._remember(key, address, self.ttl)
        return address

    def _remember(
        self, key: tuple[str, int], verdict: IPAddress | DeliveryError, ttl: float
    ) -> None:
        """Store a verdict at the back, after dropping expired ones (and the oldest when full)."""
        cache = self._cache
        now = self._clock.monotonic()
        cache.pop(key, None)  # re-stored at the back, where its new expiry belongs
        while cache:
            oldest = next(iter(cache))
            if cache[oldest][0] > now:  # live: dropped only to make room
                if len(cache) < self.max_entries:
                    break
                self._evicted += 1
            del cache[oldest]
        cache[key] = (now + ttl, verdict)

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
        return ResolverStats(
            len(self._cache), self._lookups, self._hits, self._refusals, self._evicted
        )

    def __repr__(self) -> str:
        return f"Resolver(cached={len(self._cache)}, policy={self.policy!r})"


__all__ = ["MAX_ENTRIES", "Resolver", "ResolverStats"]
