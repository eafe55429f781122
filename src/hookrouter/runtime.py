"""The router process: wires config, store, catalog, ingress and delivery.

``Router.start`` opens the store (migrating it), seeds and loads the catalog,
builds the ingest app and starts the engine; ``Router.stop`` is the graceful
path used on SIGTERM: stop accepting, answer requests in progress within the
grace period, stop delivery, flush and close the store. Nothing acknowledged
is lost on any path, because acknowledgement happens only after commit.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import signal
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from hookrouter.admin.api import AdminApi
from hookrouter.admin.cluster import ClusterAdmin
from hookrouter.admin.delivery_routes import install as install_delivery_routes
from hookrouter.admin.entities import EntityService
from hookrouter.admin.keys import KeyService
from hookrouter.admin.publish import Publisher
from hookrouter.admin.publish import install as install_publish_routes
from hookrouter.admin.retention_routes import install as install_retention_routes
from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.config import Config
from hookrouter.config.catalog import Catalog
from hookrouter.config.server import derive_max_connections
from hookrouter.console.app import Console
from hookrouter.core.http1 import Limits
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.delivery.factory import build_delivery
from hookrouter.errors import NotFound, ShutdownIncomplete, StoreError
from hookrouter.heap import HeapSettler, settle_heap
from hookrouter.ingress.admission import BacklogAdmission, RateLimitAdmission
from hookrouter.ingress.engine import IngressEngine, create_engine
from hookrouter.ingress.handler import AdmissionControl, CommitLatency, IngestApp
from hookrouter.ingress.ops import OpsApp
from hookrouter.ingress.server import MAX_CONNECTIONS, HttpServer, Timeouts
from hookrouter.operator_events import OperatorEvents
from hookrouter.ratelimit import RateLimiter, build_limiter
from hookrouter.store import metrics as store_metrics
from hookrouter.store import open_configured
from hookrouter.store.base import EventStore
from hookrouter.store.pruner import Pruner
from hookrouter.telemetry.build import build_tracing
from hookrouter.telemetry.tracing import Tracing

if TYPE_CHECKING:
    from hookrouter.store.postgres.cluster import ClusterNode

log = logging.getLogger(__name__)


class Router:
    """One hookrouter process."""

    def __init__(self, config: Config, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.store: EventStore | None = None
        self.entities: EntityService | None = None
        self.app: IngestApp | None = None
        # Shared by the app (observes each commit) and the ingest admission (reads it).
        self._commit_latency = CommitLatency()
        self.http: HttpServer | None = None
        self.engine: IngressEngine | None = None
        self.delivery: DeliveryEngine | None = None
        self._ops: OpsApp | None = None
        self._admin_ops: OpsApp | None = None  # [admin] listen's application
        self.admin_http: HttpServer | None = None
        self.admin_engine: IngressEngine | None = None
        self.admin_address: tuple[str, int] | None = None
        self._keys: KeyService | None = None
        self._admission: RateLimitAdmission | None = None
        self.pruner: Pruner | None = None
        self.address: tuple[str, int] | None = None
        self._stopping = False
        self._background: set[asyncio.Future[Any]] = set()
        self.tracing: Tracing | None = None  # [telemetry]: None unless an OTLP endpoint is set
        self.operator: OperatorEvents | None = None  # [[operator_hooks]]
        self.console: Console | None = None  # /console and /portal on the admin listener
        self.cluster: ClusterNode | None = None  # [cluster]: the PostgreSQL store's leases
        self.heap = HeapSettler()  # installed by ``settle`` once serving

    async def start(self) -> tuple[str, int]:
        """Start serving; returns the bound (host, port)."""
        cfg = self.config
        store = open_configured(cfg.store, clock=self.clock)
        self.cluster = self._cluster_node(store)
        await store.open()
        self.store = store
        if self.cluster is not None:
            await self.cluster.join()
        store_metrics.track(store)
        self.entities = EntityService(store, self.clock)
        await _collector_paused(self.entities.load(cfg))
        entities = self.entities
        self._keys = KeyService(store, self.clock)
        await self._keys.load()
        admin = AdminApi(cfg.admin, entities, store, self._keys, self.clock)
        self.pruner = Pruner(store, cfg.store.retention, self.clock)
        install_retention_routes(admin, self.pruner)
        self.console = Console(
            admin,
            cfg.admin,
            entities,
            self._keys,
            self.clock,
            data_dir=cfg.store.path,
            shared=store.session_table(),
        )
        separate = cfg.admin.listen is not None
        ops = OpsApp(
            admin,
            self._readiness,
            internal=not separate,
            metrics_token=cfg.admin.metrics_token,
            mounts=self.console.sites,
        )
        self._ops = ops
        if separate:
            self._admin_ops = OpsApp(
                admin,
                self._readiness,
                metrics_token=cfg.admin.metrics_token,
                mounts=self.console.sites,
            )
        # One limiter for ingest (tenants, sources) and delivery (endpoints).
        self._admission = RateLimitAdmission(build_limiter(cfg.redis, self.clock))
        self.tracing = build_tracing(cfg.telemetry)
        delivery_catalog = entities.catalog_getter()
        if cfg.operator.hooks:  # the hooks are endpoints of a reserved tenant, delivery only
            self.operator = OperatorEvents(cfg.operator, store, self.clock)
            delivery_catalog = self.operator.catalog(delivery_catalog)
        await self._start_delivery(store, delivery_catalog, admin)
        self.app = IngestApp(
            entities.catalog_getter(),
            store,
            self.clock,
            ops,
            admission=self._ingest_admission(),
            listener=self.delivery,
            commit_latency=self._commit_latency,
            max_body_bytes=cfg.server.max_body_bytes,
            labelled_sources=cfg.telemetry.labelled_tenants,
        )
        self.app.tracing = self.tracing
        publisher = Publisher(
            store,
            entities.catalog_getter(),
            self.clock,
            admission=self.app.admission,
            listener=self.delivery,
        )
        install_publish_routes(admin, publisher)
        self.http = HttpServer(
            self.app, limits=self._limits(), timeouts=self._timeouts(), clock=self.clock
        )
        self.engine = create_engine(
            cfg.server.engine, backlog=cfg.server.backlog, max_connections=self._max_connections()
        )
        self.address = await self.engine.start(self.http, cfg.server.host, cfg.server.port)
        self.http.start()
        await self._start_admin_listener()
        self.pruner.start()
        self.console.start()
        log.info(
            "hookrouter listening on http://%s:%d (engine %s, store %s)",
            *self.address,
            self.engine.name,
            cfg.store.path,
        )
        return self.address

    async def _start_delivery(
        self, store: EventStore, catalog: Callable[[], Catalog], admin: AdminApi
    ) -> None:
        """The delivery engine over the store's ledger (None if it has none), started."""
        self.delivery = build_delivery(store, catalog, self.config.delivery, self.clock)
        assert self._admission is not None  # made before delivery: they share the limiter
        if self.delivery is not None:
            if self.operator is not None:
                self.operator.attach(self.delivery)
                self._watch_redis(self.operator, self._admission.limiter)
            self.delivery.on_endpoint_gone(self._disable_endpoint)
            self.delivery.use_limiter(self._admission.limiter)
            self.delivery.use_tracing(self.tracing)
            telemetry = self.config.telemetry
            self.delivery.use_series_limits(
                telemetry.labelled_tenants, telemetry.labelled_latency_tenants
            )
            if self.cluster is not None:
                self.delivery.use_ownership(self.cluster.owns)
            await self.delivery.start()
            if self.cluster is not None:
                applier = self._start_cluster(self.cluster, self.delivery)
                install_delivery_routes(admin, self.delivery, applier.reset_breaker, applier)
            else:
                install_delivery_routes(admin, self.delivery)
            if self.console is not None:
                self.console.read_delivery_counters(partial(getattr, self.delivery, "counters"))
            if self.operator is not None:
                self.operator.start()

    def _cluster_node(self, store: EventStore) -> ClusterNode | None:
        """``[cluster]`` (set with the PostgreSQL store): this node's leases, before open."""
        settings = self.config.cluster
        if settings is None:
            return None
        from hookrouter.store.postgres.cluster import (
            ClusterNode,
        )  # asyncpg: imported only when chosen
        from hookrouter.store.postgres.store import PostgresStore

        if not isinstance(store, PostgresStore):
            raise StoreError(f"[cluster] needs the PostgreSQL store, not {store!r}")
        return ClusterNode(
            store,
            settings.node_id,
            lease_seconds=settings.lease_seconds,
            attempt_seconds=self.config.delivery.timeout_seconds,
            clock=self.clock,
        )

    def _start_cluster(self, cluster: ClusterNode, delivery: DeliveryEngine) -> ClusterAdmin:
        """Leases, work notices and the change feed (admin changes made on any node)."""
        assert self.entities is not None and self._keys is not None
        applier = ClusterAdmin(
            self.entities,
            self._keys,
            delivery,
            cluster.send_command,
            cluster.serves_tenant,
            board=cluster.breakers,
        )

        def requeue(found: list[Any]) -> None:
            for resumed in found:
                delivery.requeue(resumed)

        def busy() -> set[str]:
            return {tenant for tenant, _ in delivery.in_flight_events()}

        cluster.start(delivery.ownership_changed, requeue, busy, applier.apply)
        return applier

    async def _start_admin_listener(self) -> None:
        """``[admin] listen``: /admin and /metrics on a listener of their own, same loop."""
        listen, ops = self.config.admin.listen, self._admin_ops
        if listen is None or ops is None:
            return
        self.admin_http = HttpServer(
            ops, limits=self._limits(), timeouts=self._timeouts(), clock=self.clock
        )
        # asyncio: admin traffic is light, and it names each client's address
        # (the login throttle's key).
        self.admin_engine = create_engine("asyncio", backlog=self.config.server.backlog)
        self.admin_address = await self.admin_engine.start(self.admin_http, *listen)
        self.admin_http.start()
        log.info("admin API and /metrics on http://%s:%d", *self.admin_address)

    def _watch_redis(self, operator: OperatorEvents, limiter: RateLimiter) -> None:
        if self.config.redis is None:
            return  # in-process limits: nothing to watch, and redis-py stays unloaded
        from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter

        if isinstance(limiter, RedisBucketLimiter):
            operator.watch_redis(lambda: limiter.redis_up)

    def _ingest_admission(self) -> AdmissionControl | None:
        """Backlog cap (needs the delivery engine's counts) in front of the rate limits."""
        if self.delivery is None:
            return self._admission
        return BacklogAdmission(
            self.delivery.backlog,
            self.clock,
            self._admission,
            backlog_count=self.delivery.backlog_count,
            # A compiled method, not a closure here: it is asked once per event.
            commit_latency_ms=self._commit_latency.current_ms,
            max_commit_latency_ms=self.config.store.max_commit_latency_ms,
        )

    def _disable_endpoint(self, endpoint_id: str) -> None:
        """Persist ``enabled = false`` for an endpoint that answered 410 Gone."""
        entities = self.entities
        if entities is None:
            return
        try:
            doc = dict(entities.get("endpoint", endpoint_id).doc)
        except NotFound:
            return  # removed meanwhile (or an operator hook): nothing left to disable
        if self.operator is not None:
            self.operator.endpoint_disabled(str(doc.get("tenant", "")), endpoint_id, "gone")
        task = asyncio.ensure_future(entities.put("endpoint", {**doc, "enabled": False}))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _max_connections(self) -> int:
        cap = self.config.server.max_connections
        if not cap:
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            workers = self.config.delivery.workers
            cap = derive_max_connections(-1 if soft == resource.RLIM_INFINITY else soft, workers)
        MAX_CONNECTIONS.set(cap)
        return cap

    def _limits(self) -> Limits:
        server = self.config.server
        return Limits(
            max_header_bytes=server.max_header_bytes, max_body_bytes=server.max_body_bytes
        )

    def _timeouts(self) -> Timeouts:
        server = self.config.server
        return Timeouts(
            header_seconds=server.header_timeout_seconds,
            body_seconds=server.body_timeout_seconds,
            keepalive_seconds=server.keepalive_timeout_seconds,
        )

    async def _readiness(self) -> str | None:
        if self._stopping:
            return "draining"
        if self.store is None:
            return "starting"
        try:
            await self.store.ping()
        except StoreError as exc:
            return f"store: {exc.message}"
        return None

    async def stop(self) -> None:
        """Graceful stop: nothing acknowledged is lost, nothing new is accepted.

        Every stage runs even when an earlier one fails, so a fault in, say,
        the ingress engine still lets in-flight deliveries park and the store
        close; the failures are logged and raised together at the end.
        """
        if self._stopping:
            return
        self._stopping = True
        failed: list[str] = []
        for stage, step in self._stop_stages():
            try:
                await step()
            except Exception:
                log.exception("stop: %s failed; going on with the rest", stage)
                failed.append(stage)
        # What start and the settler froze is collectable again: a process may
        # go on after this router (tests start many).
        self.heap.remove()
        gc.unfreeze()
        if failed:
            raise ShutdownIncomplete(failed)
        log.info("hookrouter stopped")

    def _stop_stages(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """The stop sequence, in order: ingress first, the store last."""
        grace = self.config.server.shutdown_grace_seconds
        store = self.store
        stages: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        listeners = [
            ("ingress", "stop accepting", self.engine, self.http),
            ("admin", "stop accepting (admin)", self.admin_engine, self.admin_http),
        ]
        for _, stop_accepting, engine, _ in listeners:
            if engine is not None:
                stages.append((stop_accepting, engine.stop_accepting))
        for name, _, engine, http in listeners:
            if http is not None:
                stages.append((f"drain {name}", partial(_drain, http, grace)))
            if engine is not None:
                stages.append((f"{name} engine", engine.stop))
        if self.pruner is not None:
            stages.append(("retention pruner", self.pruner.stop))
        if self.console is not None:
            stages.append(("console sampler", self.console.stop))
        if self.operator is not None:
            stages.append(("operator events", self.operator.stop))
        if self.delivery is not None:
            # In-flight attempts get the grace period too; the rest stay pending.
            delivery = self.delivery
            stages.append(("delivery", lambda: delivery.stop(grace)))
        if self.cluster is not None:  # after delivery: its outcomes are written first
            stages.append(("cluster leases", self.cluster.stop))
        for ops in (self._ops, self._admin_ops):
            if ops is not None:
                stages.append(("ops", ops.close))
        if self._admission is not None:
            stages.append(("rate limiter", self._admission.close))
        stages.append(("background tasks", self._await_background))
        if self._keys is not None:
            stages.append(("api keys' last use", self._keys.close))
        tracing = self.tracing
        if tracing is not None:

            async def flush_spans() -> None:
                # The exporter posts synchronously: off the loop.
                await asyncio.get_running_loop().run_in_executor(None, tracing.shutdown)

            stages.append(("tracing", flush_spans))
        if store is not None:

            async def close_store() -> None:
                await store.close()
                store_metrics.untrack(store)

            stages.append(("store", close_store))
        return stages

    async def _await_background(self) -> None:
        await asyncio.gather(*self._background, return_exceptions=True)

    async def run_until_signalled(self) -> None:
        """Serve until SIGTERM or SIGINT, then stop gracefully."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self.start()
            self.settle()
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.stop()

    def settle(self) -> None:
        """Once started: freeze the start-up heap, then what each collection keeps.

        The second part only on an event loop that frees closed connections by
        reference counting (``heap.frees_by_refcount``); ``stats()["heap"]``
        says when it declined.
        """
        settle_heap()
        if not self.heap.install(asyncio.get_running_loop()):
            log.info("hookrouter: %s", self.heap.declined)

    def stats(self) -> dict[str, Any]:
        return {
            "heap": self.heap.stats(),
            "http": self.http.stats() if self.http else None,
            "engine": self.engine.stats() if self.engine else None,
            "store": self.store.stats() if self.store else None,
            "delivery": self.delivery.stats() if self.delivery else None,
            "retention": self.pruner.stats() if self.pruner else None,
            "cluster": self.cluster.stats() if self.cluster else None,
        }


async def _collector_paused(load: Awaitable[None]) -> None:
    """Run a bulk load with the cyclic garbage collector paused.

    Loading the stored tenants makes a few objects per entity, all kept for
    the process's life: collections during the load only re-scan the growing
    catalog (about half of building it, with 100,000 tenants). They are
    frozen as soon as it is done: left in the young generation, the first
    collection after the load scanned them all, and ``settle_heap``'s full
    collection again, finding nothing to free (docs/performance.md).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        await load
        gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


async def _drain(http: HttpServer, grace: float) -> None:
    await http.drain(grace)
    http.stop()
