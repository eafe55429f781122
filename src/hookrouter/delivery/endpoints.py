"""Per-endpoint delivery state: parsed target, signer, retry policy and breaker.

Built lazily from the live catalog on an endpoint's first attempt (an
endpoint without traffic has none) and rebuilt when its config object changes
(the admin API replaces it; the engine passes each change of the catalog's
log on, ``refresh``, so an attempt does not look its endpoint up in the
catalog), except the circuit breaker, which survives
config edits: an edit must not reset a breaker that is protecting a dead
endpoint. Removing an endpoint (or its tenant) releases both (``prune``).

What a config yields once and never changes -- the URL's parts and the
signer's key schedule (``Prepared``) -- is kept while that config object is
the endpoint's, through its tenant's idle release: a tenant back after a
pause rebuilds its breaker and runtime record, not its parsed URL and keys.

Two records are kept beside them for the console and the admin API: the
endpoint's recent health (``health``: success ratio, latency) and its
breaker's last ``HISTORY`` transitions (``history``; state changes are rare,
so the ring costs nothing per attempt). They outlive the release of an idle
tenant's runtimes and closed breakers, and go when the endpoint does.
"""

from __future__ import annotations

import re
import sys
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from mypy_extensions import mypyc_attr

from hookrouter.config.catalog import Catalog
from hookrouter.config.delivery import DeliverySettings
from hookrouter.config.entities import EndpointConfig, TenantConfig
from hookrouter.delivery.breaker import CircuitBreaker, Transition
from hookrouter.delivery.health import EndpointHealth
from hookrouter.delivery.policy import RetryPolicy
from hookrouter.delivery.signing import endpoint_signer
from hookrouter.delivery.ssrf import IPAddress
from hookrouter.delivery.transport import Origin
from hookrouter.ratelimit.bucket import Limit
from hookrouter.verify.standard import StandardSigner

HISTORY = 20  # breaker transitions kept per endpoint: about six trip-cooldown-probe cycles
# Distinct retry schedules whose policy is kept for sharing (``EndpointTable._policy``).
POLICIES_KEPT = 256
# Places (scheme, host, port) whose origin is kept for sharing (``SharedOrigins``).
ORIGINS_KEPT = 4096


# URLs of the usual shape, which ``Target.parse`` splits without ``urlsplit``:
# lower-case scheme and host name, a port without a leading zero, a path of
# visible ASCII without a fragment. Anything else (IPv6 literals, user info,
# upper case, white space, ...) takes the standard library's path.
_PLAIN_URL: Final = re.compile(
    r"(https?)://([a-z0-9][a-z0-9.-]*)(?::([1-9][0-9]{0,4}))?(/[!$&'()*+,\-./0-9:;=?@A-Z_a-z~%]*)?"
    r"\Z"
)
_MAX_PORT: Final = 65535


# Not frozen, and each __init__ below written out: mypyc leaves a dataclass's
# generated __init__ interpreted (mypyc/mypyc#817), and these are built on
# every endpoint's first attempt. Treat a Target as immutable.
@dataclass(slots=True)
class Target:
    """Where an endpoint URL points: the parts the transport needs."""

    scheme: str
    host: str
    port: int
    path: str  # request target: path plus query

    def __init__(self, scheme: str, host: str, port: int, path: str) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path

    @classmethod
    def parse(cls, url: str) -> Target:
        plain = _PLAIN_URL.match(url)
        if plain is not None and (plain[3] is None or int(plain[3]) <= _MAX_PORT):
            # Parsed on every endpoint's first attempt, each URL once: urlsplit's
            # cache never hits there, and a miss was the runtime's largest item.
            scheme, host, port = plain[1], plain[2], plain[3]
            path, _, query = (plain[4] or "/").partition("?")
            default = 443 if scheme == "https" else 80
            return cls(
                scheme, host, int(port) if port else default, f"{path}?{query}" if query else path
            )
        return cls._split(url)

    @classmethod
    def _split(cls, url: str) -> Target:
        """Any URL, the standard library's way (``parse`` agrees with it)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls(parts.scheme, parts.hostname, port, path)


class SharedOrigins:
    """One transport origin per place and resolved address, for all the endpoints there.

    Endpoints of many tenants often point at one host (a shared receiver, a
    SaaS inbox): the first attempt of each then takes the origin already made
    instead of formatting the address again (an interpreted ``ipaddress``
    method). The resolver hands out one address object per host until its TTL
    ends, so the identity check sees a new lookup. At most ``ORIGINS_KEPT``
    places are kept, the least recently asked for going first: emptying the
    map when full would make every endpoint there format its address again
    while more places than that are busy.
    """

    __slots__ = ("_by_place", "evicted")

    def __init__(self) -> None:
        self._by_place: OrderedDict[tuple[str, str, int], tuple[IPAddress, Origin]] = OrderedDict()
        self.evicted = 0  # places dropped to stay within ORIGINS_KEPT

    def get(self, scheme: str, host: str, port: int, address: IPAddress) -> Origin:
        place = (scheme, host, port)
        by_place = self._by_place
        held = by_place.get(place)
        if held is not None and held[0] is address:
            by_place.move_to_end(place)
            return held[1]
        origin = Origin(scheme, host, port, str(address))
        by_place[place] = (address, origin)
        by_place.move_to_end(place)
        if len(by_place) > ORIGINS_KEPT:
            by_place.popitem(last=False)
            self.evicted += 1
        return origin

    def __contains__(self, place: object) -> bool:
        return place in self._by_place

    def __len__(self) -> int:
        return len(self._by_place)


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
@dataclass(slots=True)
class Prepared:
    """What one endpoint config yields: its URL's parts and its signer. Immutable."""

    config: EndpointConfig
    scheme: str
    host: str
    port: int
    path: str
    signer: StandardSigner

    def __init__(self, config: EndpointConfig) -> None:
        target = Target.parse(config.url)
        self.config = config
        # Interned: the endpoints of many tenants often share a host, and every
        # attempt hashes it (resolver cache, shared origins); one string object
        # stays in the CPU's caches where one per endpoint would not.
        self.scheme = sys.intern(target.scheme)
        self.host = sys.intern(target.host)
        self.port = target.port
        self.path = target.path
        self.signer = endpoint_signer(config.secret, *config.previous_secrets)


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
@dataclass(slots=True)
class EndpointRuntime:
    config: EndpointConfig
    # What an attempt reads of the config, held here: with deliveries spread
    # over many tenants the config object would be one more cache miss each.
    # A changed config gets a new runtime (``EndpointTable.refresh``).
    tenant_id: str
    enabled: bool
    rate_limit: Limit | None
    headers: tuple[tuple[str, str], ...]  # the endpoint's own extra request headers
    # The parts of its URL (``Target.parse``), held here rather than in a
    # target object: one object fewer per endpoint for the collector to traverse.
    scheme: str
    host: str
    port: int
    path: str  # request target: path plus query
    signer: StandardSigner
    policy: RetryPolicy
    breaker: CircuitBreaker
    # The same object as ``EndpointTable.health[id]`` (which outlives the runtime):
    # held here so an attempt's result reaches it without another lookup.
    health: EndpointHealth
    # The table's origins, shared by the endpoints at one place (``SharedOrigins``).
    origins: SharedOrigins
    gone: bool = False  # answered 410: no more attempts until its config changes
    # Rate-limited deliveries are rescheduled no earlier than this (wall seconds),
    # each one token's time after the previous, so a backlog is paced, not stampeded.
    throttled_until: float = 0.0
    _origin: Origin | None = None
    _origin_address: IPAddress | None = None

    def __init__(
        self,
        *,
        config: EndpointConfig,
        scheme: str,
        host: str,
        port: int,
        path: str,
        signer: StandardSigner,
        policy: RetryPolicy,
        breaker: CircuitBreaker,
        health: EndpointHealth,
        origins: SharedOrigins,
    ) -> None:
        self.config = config
        self.tenant_id = config.tenant
        self.enabled = config.enabled
        self.rate_limit = config.rate_limit
        self.headers = config.headers
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
        self.signer = signer
        self.policy = policy
        self.breaker = breaker
        self.health = health
        self.origins = origins
        self.gone = False
        self.throttled_until = 0.0
        self._origin = None
        self._origin_address = None

    def origin(self, address: IPAddress) -> Origin:
        """The transport's origin for this endpoint dialled at ``address``.

        Kept while the resolver hands back the same address object, so an
        attempt neither formats the address nor builds a new pool key.
        """
        origin = self._origin
        if origin is None or address is not self._origin_address:
            origin = self.origins.get(self.scheme, self.host, self.port, address)
            self._origin, self._origin_address = origin, address
        return origin


def retry_policy(
    endpoint: EndpointConfig, tenant: TenantConfig | None, settings: DeliverySettings
) -> RetryPolicy:
    """Most specific schedule wins: endpoint, then tenant, then ``[delivery]`` (or its default)."""
    return RetryPolicy(schedule=retry_schedule_of(endpoint, tenant, settings))


def retry_schedule_of(
    endpoint: EndpointConfig, tenant: TenantConfig | None, settings: DeliverySettings
) -> tuple[float, ...]:
    """The schedule ``retry_policy`` uses."""
    schedule = endpoint.retry_schedule
    if schedule is None and tenant is not None:
        schedule = tenant.retry_schedule
    return settings.retry_schedule if schedule is None else schedule


class EndpointTable:
    """Endpoint id -> :class:`EndpointRuntime`, kept in step with the catalog."""

    def __init__(self, settings: DeliverySettings) -> None:
        self.settings = settings
        self._runtimes: dict[str, EndpointRuntime] = {}
        self.breakers: dict[str, CircuitBreaker] = {}
        self.health: dict[str, EndpointHealth] = {}
        self.history: dict[str, deque[Transition]] = {}
        # Endpoint ids built, by tenant (prune): tuples of strings, which the
        # collector stops tracking after one pass, where a set per tenant stayed.
        self._of_tenant: dict[str, tuple[str, ...]] = {}
        self._policies: dict[tuple[float, ...], RetryPolicy] = {}  # by schedule (_policy)
        self.origins = SharedOrigins()
        # By endpoint id, while its config object is the one prepared (``_prepared_for``).
        self._prepared: dict[str, Prepared] = {}

    def get(self, catalog: Catalog, endpoint_id: str) -> EndpointRuntime | None:
        """The runtime for ``endpoint_id``; None when the endpoint no longer exists.

        A built runtime is returned without looking at the catalog: the caller
        passes every catalog change on (``refresh``) before asking.
        """
        runtime = self._runtimes.get(endpoint_id)
        if runtime is not None:
            return runtime
        config = catalog.endpoints.get(endpoint_id)
        if config is None:
            return None
        runtime = self._runtimes[endpoint_id] = self._build(catalog, config)
        return runtime

    def refresh(self, catalog: Catalog, tenant_id: str) -> list[str]:
        """The catalog changed ``tenant_id``: bring its built runtimes in step; ids released.

        Endpoints gone lose runtime and breaker (``prune``); a replaced config
        drops the runtime, rebuilt on its next attempt (the breaker stays);
        the others re-read their retry policy, which the tenant may set.
        Costs the tenant's endpoints with state.
        """
        live = catalog.endpoints_of(tenant_id)
        gone = self.prune(tenant_id, live)
        tenant = catalog.tenants.get(tenant_id)
        for endpoint_id in self._of_tenant.get(tenant_id, ()):
            config = live.get(endpoint_id)
            prepared = self._prepared.get(endpoint_id)
            if prepared is not None and prepared.config is not config:
                del self._prepared[endpoint_id]  # not the old secret kept in memory
            runtime = self._runtimes.get(endpoint_id)
            if runtime is None:
                continue
            if config is not runtime.config:
                del self._runtimes[endpoint_id]
            else:
                runtime.policy = self._policy(config, tenant)
        return gone

    def refresh_all(self, catalog: Catalog) -> None:
        """A different catalog object: refresh every tenant with built state."""
        for tenant_id in list(self._of_tenant):
            self.refresh(catalog, tenant_id)

    def breaker(self, endpoint_id: str) -> CircuitBreaker:
        breaker = self.breakers.get(endpoint_id)
        if breaker is None:
            breaker = self.breakers[endpoint_id] = CircuitBreaker(
                endpoint_id, self.settings.breaker
            )
        return breaker

    def observe(self, endpoint_id: str, success: bool, duration_ms: float, at: float) -> None:
        """Count one attempt's result in the endpoint's recent health."""
        self._health(endpoint_id).observe(success, duration_ms, at)

    def _health(self, endpoint_id: str) -> EndpointHealth:
        health = self.health.get(endpoint_id)
        if health is None:
            health = self.health[endpoint_id] = EndpointHealth()
        return health

    def remember(self, transition: Transition) -> None:
        """Keep a breaker transition in its endpoint's history."""
        ring = self.history.get(transition.endpoint_id)
        if ring is None:
            ring = self.history[transition.endpoint_id] = deque(maxlen=HISTORY)
        ring.append(transition)

    def prune(
        self, tenant_id: str, live: Mapping[str, EndpointConfig], *, idle: bool = False
    ) -> list[str]:
        """Release runtimes and breakers of the tenant's endpoints not in ``live``; their ids.

        ``idle``: the tenant has no work, its endpoints still exist; their
        health and breaker history stay. Costs the tenant's endpoints with
        state, not every endpoint.
        """
        built = self._of_tenant.get(tenant_id)
        if not built:
            return []
        gone = [endpoint_id for endpoint_id in built if endpoint_id not in live]
        for endpoint_id in gone:
            self._runtimes.pop(endpoint_id, None)
            self.breakers.pop(endpoint_id, None)
            if not idle:
                self._prepared.pop(endpoint_id, None)
                self.health.pop(endpoint_id, None)
                self.history.pop(endpoint_id, None)
        if gone and not idle:
            kept = tuple(endpoint_id for endpoint_id in built if endpoint_id in live)
            if kept:
                self._of_tenant[tenant_id] = kept
            else:
                del self._of_tenant[tenant_id]
        return gone

    def __len__(self) -> int:
        return len(self._runtimes)

    def _build(self, catalog: Catalog, config: EndpointConfig) -> EndpointRuntime:
        built = self._of_tenant.get(config.tenant, ())
        if config.id not in built:
            self._of_tenant[config.tenant] = (*built, config.id)
        prepared = self._prepared_for(config)
        return EndpointRuntime(
            config=config,
            scheme=prepared.scheme,
            host=prepared.host,
            port=prepared.port,
            path=prepared.path,
            signer=prepared.signer,
            policy=self._policy(config, catalog.tenants.get(config.tenant)),
            breaker=self.breaker(config.id),
            health=self._health(config.id),
            origins=self.origins,
        )

    def _prepared_for(self, config: EndpointConfig) -> Prepared:
        """``config``'s URL parts and signer, made once per config object."""
        prepared = self._prepared.get(config.id)
        if prepared is None or prepared.config is not config:
            prepared = self._prepared[config.id] = Prepared(config)
        return prepared

    def prepared_count(self) -> int:
        """Endpoints whose URL parts and signer are held (tests, memory accounting)."""
        return len(self._prepared)

    def _policy(self, config: EndpointConfig, tenant: TenantConfig | None) -> RetryPolicy:
        """The endpoint's retry policy, one object per distinct schedule.

        A policy is immutable, and building one (validating its schedule) was a
        fair part of an endpoint's first event; most endpoints share the default.
        """
        schedule = retry_schedule_of(config, tenant, self.settings)
        policy = self._policies.get(schedule)
        if policy is None:
            if len(self._policies) >= POLICIES_KEPT:  # schedules are config: rarely many
                self._policies.clear()
            policy = self._policies[schedule] = RetryPolicy(schedule=schedule)
        return policy

    def __repr__(self) -> str:
        return f"EndpointTable(endpoints={len(self._runtimes)}, breakers={len(self.breakers)})"


__all__ = [
    "HISTORY",
    "EndpointRuntime",
    "EndpointTable",
    "Prepared",
    "SharedOrigins",
    "Target",
    "retry_policy",
]
