"""Real Redis for the rate-limit tests: one standalone server and one 3-master cluster per session.

``limiter_factory`` builds :class:`RedisBucketLimiter` objects against either
deployment and closes them after the test; ``target`` parametrizes a test over
standalone/cluster x script/function, so the contract runs four times.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.redis_servers import (
    RedisClusterProcess,
    RedisServer,
    redis_cluster,
    redis_server,
)

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.ratelimit.redis_calls import BucketCaller, Mode, make_client
from hookrouter.ratelimit.redis_limiter import Policy, RedisBucketLimiter
from hookrouter.ratelimit.slots import LeasePlan


@pytest.fixture(scope="session")
def standalone_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcess]:
    with redis_cluster(tmp_path_factory.mktemp("rcluster"), masters=3) as proc:
        yield proc


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A standalone server for this test alone (tests that stop or pause it)."""
    with redis_server(tmp_path) as server:
        yield server


@dataclass(frozen=True)
class Target:
    """Where and how a limiter talks to Redis."""

    topology: str  # "standalone" | "cluster"
    mode: Mode
    url: str | None
    nodes: tuple[str, ...]
    flush: Callable[[], None]

    def client(self, socket_timeout: float = 2.0) -> Any:
        return make_client(self.url, self.nodes, socket_timeout)


def _flush_standalone(server: RedisServer) -> None:
    c = server.client()
    c.flushall()
    c.script_flush()
    c.function_flush()
    c.close()


@pytest.fixture(
    params=[
        ("standalone", "script"),
        ("standalone", "function"),
        ("cluster", "script"),
        ("cluster", "function"),
    ],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def target(request: pytest.FixtureRequest) -> Target:
    topology, mode = request.param
    if topology == "standalone":
        server: RedisServer = request.getfixturevalue("standalone_server")
        t = Target(topology, mode, server.url, (), lambda: _flush_standalone(server))
    else:
        proc: RedisClusterProcess = request.getfixturevalue("cluster")
        t = Target(topology, mode, None, tuple(proc.startup_nodes), proc.flushall)
    t.flush()
    return t


LimiterFactory = Callable[..., RedisBucketLimiter]


def build(
    url: str | None,
    nodes: tuple[str, ...],
    mode: Mode,
    *,
    lease: int = 0,
    low_water: int | None = None,
    on_redis_error: Policy = "allow",
    timeout: float = 0.5,
    clock: Clock = SYSTEM_CLOCK,
    socket_timeout: float = 2.0,
    **kwargs: Any,
) -> RedisBucketLimiter:
    """A limiter with test-friendly defaults (a generous timeout on a shared 2-core box)."""
    caller = BucketCaller(make_client(url, nodes, socket_timeout), mode)
    plan = LeasePlan(lease, lease // 4 if low_water is None else low_water)
    return RedisBucketLimiter(
        caller, clock=clock, lease=plan, on_redis_error=on_redis_error, timeout=timeout, **kwargs
    )


@pytest.fixture
async def limiter_factory(target: Target) -> AsyncIterator[LimiterFactory]:
    made: list[RedisBucketLimiter] = []

    def factory(**kwargs: Any) -> RedisBucketLimiter:
        limiter = build(target.url, target.nodes, target.mode, **kwargs)
        made.append(limiter)
        return limiter

    yield factory
    for limiter in made:
        with contextlib.suppress(Exception):
            await limiter.close()
