"""Several real router processes on one real PostgreSQL, many tenants, one attempt-logging sink."""

from __future__ import annotations

import concurrent.futures
import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson
from tests.cluster.sink import AttemptSink
from tests.e2e.conftest import stripe_event
from tests.support.postgres_servers import PostgresServer, pg_bin_dir
from tests.support.postgres_store import schema_for, shared_server
from tests.support.router import ENDPOINT_SECRET, STRIPE_SECRET, RouterProcess, base_config

from hookrouter.store.postgres.partitioning import tenant_partition

LEASE = 3.0  # short, so takeovers fit the test budget; attempts must fit half of it
TIMEOUT = 1.0
PARTITIONS = 32


def tenant_names(count: int) -> list[str]:
    return [f"t{i:02d}" for i in range(count)]


def cluster_config(
    tmp_path: Path,
    node: str,
    sink: AttemptSink,
    tenants: list[str],
    *,
    tenant_options: dict[str, dict[str, Any]] | None = None,
    retry: str = "1s",
    dsn: str | None = None,
) -> dict[str, Any]:
    cfg = base_config(tmp_path / "data", 0)
    cfg["store"] = {
        "path": str(tmp_path / "data"),
        "backend": "postgres",
        "postgres": {
            "dsn": dsn or shared_server().dsn,
            "schema": schema_for(tmp_path),
            "pool_size": 4,
            "partitions": PARTITIONS,
        },
    }
    cfg["cluster"] = {"node_id": node, "lease_seconds": LEASE}
    cfg["delivery"] = {
        "allow_private_networks": True,
        "timeout_seconds": TIMEOUT,
        "breaker": {"cooldown_seconds": 1.0},  # a test waits seconds, not the 30 s default
    }
    options = tenant_options or {}
    cfg["tenants"] = [{"id": t, **options.get(t, {})} for t in tenants]
    cfg["sources"] = [
        {"id": f"s-{t}", "tenant": t, "provider": "stripe", "secrets": [STRIPE_SECRET]}
        for t in tenants
    ]
    cfg["endpoints"] = [
        {"id": f"e-{t}", "tenant": t, "url": sink.url(t), "secret": ENDPOINT_SECRET,
         "retry_schedule": [retry] * 30}
        for t in tenants
    ]  # fmt: skip
    return cfg


Make = Callable[[str, Path, dict[str, Any]], RouterProcess]  # (name, workdir, config)


def _plain(_name: str, workdir: Path, config: dict[str, Any]) -> RouterProcess:
    return RouterProcess(workdir, config)


@contextmanager
def cluster(
    tmp_path: Path,
    sink: AttemptSink,
    names: list[str],
    config: Callable[[str], dict[str, Any]],
    make: Make = _plain,
) -> Iterator[dict[str, RouterProcess]]:
    """Routers named ``names``, started together, registered with the sink; stopped at exit."""
    routers = {}
    for name in names:
        workdir = tmp_path / name
        workdir.mkdir()
        routers[name] = make(name, workdir, config(name))
    with ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        for router in pool.map(lambda r: r.start(timeout=30), routers.values()):
            stack.callback(router.__exit__, None, None, None)
            assert router.proc is not None
            sink.pids[router.proc.pid] = next(n for n, r in routers.items() if r is router)
        yield routers


def sql(tmp_path: Path, statement: str, dsn: str | None = None) -> str:
    """Run SQL in the test's schema, on the shared server or the one ``dsn`` names."""
    # A server's psql reaches any DSN: with one given, the shared server is not started.
    server = shared_server() if dsn is None else PostgresServer(0, Path("."), pg_bin_dir())
    return server.psql(f"SET search_path TO {schema_for(tmp_path)}; {statement}", dsn=dsn)


def owner_of(tmp_path: Path, tenant: str, dsn: str | None = None) -> str:
    """The node holding the lease of ``tenant``'s partition now ('' if none)."""
    partition = tenant_partition(tenant, PARTITIONS)
    return sql(
        tmp_path,
        f"SELECT owner FROM partitions WHERE partition = {partition} AND expires_at > now()",
        dsn,
    ).strip()


def holders(tmp_path: Path, dsn: str | None = None) -> dict[str, int]:
    """Live lease holders -> partitions held."""
    out = sql(
        tmp_path,
        "SELECT owner, count(*) FROM partitions WHERE owner IS NOT NULL AND expires_at > now()"
        " GROUP BY owner",
        dsn,
    )
    return {line.split("|")[0]: int(line.split("|")[1]) for line in out.splitlines() if line}


def wait_delivered(
    tmp_path: Path, sink: AttemptSink, wanted: set[str], timeout: float, dsn: str | None = None
) -> None:
    """Wait until the sink has answered 200 for every id in ``wanted``; say what is stuck."""
    try:
        wait_for(lambda: wanted <= sink.delivered(), timeout, "every acknowledged event delivered")
    except AssertionError as exc:
        missing = sorted(wanted - sink.delivered())
        ids = ",".join(f"'{e}'" for e in missing[:200])
        detail = sql(
            tmp_path,
            "SELECT d.state, d.partition, p.owner, p.epoch, count(*) FROM deliveries d"
            f" JOIN partitions p USING (partition) WHERE d.event_id IN ({ids})"
            " GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC LIMIT 10",
            dsn,
        )
        raise AssertionError(
            f"{exc}: {len(missing)} missing; state|partition|owner|epoch|n:\n{detail}"
        ) from None


def lease_moves(routers: dict[str, RouterProcess]) -> int:
    """Leases lost or given back after start, from the routers' logs.

    On a starved machine a router's lease turn can run late enough to lose
    a lease: its tenants then move (at least once: a few deliveries twice).
    Tests that pin a tenant to one owner or duplicates to a kill check this.
    """
    lines = [line for r in routers.values() for line in r.log().splitlines()]
    return sum(1 for line in lines if "partition leases to other nodes" in line)


def wait_for(check: Callable[[], bool], timeout: float, what: str, step: float = 0.1) -> float:
    """Poll ``check`` until true; seconds it took. AssertionError naming ``what`` on timeout."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
    return time.monotonic() - started


def balanced(tmp_path: Path, names: list[str], dsn: str | None = None) -> Callable[[], bool]:
    def check() -> bool:
        found = holders(tmp_path, dsn)
        share = PARTITIONS // len(names)
        return set(found) == set(names) and all(share <= n <= share + 1 for n in found.values())

    return check


def wait_balanced(
    tmp_path: Path, names: list[str], dsn: str | None = None, timeout: float = 20
) -> float:
    """Wait until ``names`` hold their shares of the leases; say who holds what if not."""
    try:
        return wait_for(balanced(tmp_path, names, dsn), timeout, f"leases over {sorted(names)}")
    except AssertionError as exc:
        nodes = sql(
            tmp_path,
            "SELECT node_id, round(extract(epoch FROM expires_at - now())::numeric, 1)"
            " FROM nodes ORDER BY 1",
            dsn,
        )
        raise AssertionError(
            f"{exc}: live leases per node {holders(tmp_path, dsn)};"
            f" nodes and seconds left on their registration:\n{nodes}"
        ) from None


class Flood:
    """Threads posting signed events round-robin over routers until stopped or ``total`` sent.

    ``acked`` holds the event id of every 2xx answer (what the router promised
    to deliver); posts to a router that is down are simply not acknowledged.
    """

    def __init__(
        self,
        routers: list[RouterProcess],
        tenants: list[str],
        *,
        total: int,
        threads: int = 4,
        prefix: str = "evt",
        pace: float = 0.0,
    ) -> None:
        self.routers = routers
        self.tenants = tenants
        self.total = total
        self.prefix = prefix
        self.pace = pace
        self.acked: dict[str, str] = {}  # provider event id -> stored event id
        self.refused = 0
        self.statuses: Counter[int] = Counter()
        self.unavailable_without_retry_after = 0
        self.acked_at: list[float] = []  # when each 2xx came back (monotonic)
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def done(self) -> bool:
        return not any(t.is_alive() for t in self._threads)

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.total or self._stop.is_set():
                return None
            self._next += 1
            return self._next - 1

    def _run(self, index: int) -> None:
        conns: dict[int, http.client.HTTPConnection] = {}
        while (n := self._take()) is not None:
            tenant = self.tenants[n % len(self.tenants)]
            slot = (n + index) % len(self.routers)
            router = self.routers[slot]
            provider_id = f"{self.prefix}_{n}"
            body, headers = stripe_event(provider_id)
            conn = conns.get(slot) or router.connection(timeout=5)
            conns[slot] = conn
            try:
                conn.request("POST", f"/in/s-{tenant}", body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                conns.pop(slot).close()
                with self._lock:
                    self.refused += 1
                continue
            with self._lock:
                self.statuses[resp.status] += 1
                if resp.status == 200:
                    self.acked[provider_id] = orjson.loads(data)["id"]
                    self.acked_at.append(time.monotonic())
                else:
                    self.refused += 1
                    if resp.status == 503 and not resp.getheader("retry-after"):
                        self.unavailable_without_retry_after += 1
            if self.pace:
                time.sleep(self.pace)
        for conn in conns.values():
            conn.close()
