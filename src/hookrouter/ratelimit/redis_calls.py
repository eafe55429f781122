"""Run batches of token-bucket calls on Redis: standalone or cluster, script or function.

This is the only module that speaks redis-py for the limiter. One batch is
one round trip when it can be: a single call goes out as one command, several
as one non-transactional pipeline (on a cluster, redis-py's cluster pipeline
splits it per node and sends the parts concurrently).

Program recovery: Redis forgets scripts on restart (and on ``SCRIPT FLUSH``)
and function libraries on ``FUNCTION FLUSH`` or a restart without
persistence. A call that fails with ``NOSCRIPT`` or "Function not found" is
not an outage: the program is loaded again (``SCRIPT LOAD`` / ``FUNCTION LOAD
REPLACE``, on every primary of a cluster) and just those calls are retried
once.

Connection-level errors propagate as :class:`RedisUnavailable`; an error
answer to one call (a bad argument, an OOM refusal) is returned in that call's
place and does not fail its neighbours.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from hookrouter.ratelimit.keys import BucketKeys
from hookrouter.ratelimit.scripts import PROGRAM, BucketProgram

Mode = Literal["script", "function"]

# Errors that mean "Redis is not answering", as opposed to "Redis said no".
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    rexc.ConnectionError,
    rexc.TimeoutError,
    rexc.ClusterDownError,
    rexc.ClusterError,
    rexc.RedisClusterException,  # e.g. no startup node reachable
    rexc.MaxConnectionsError,
    rexc.BusyLoadingError,
    rexc.TryAgainError,
    OSError,
    TimeoutError,
)


class RedisUnavailable(Exception):
    """Redis could not be reached or did not answer (wraps the redis-py error)."""


@dataclass(frozen=True, slots=True)
class BucketCall:
    """One token-bucket invocation: take between ``need`` and ``want`` tokens."""

    keys: BucketKeys
    scope: str
    capacity: float
    rate: float
    want: float
    need: float

    def args(self) -> tuple[str | float, ...]:
        return (self.capacity, self.rate, self.want, self.need, self.scope)


@dataclass(frozen=True, slots=True)
class BucketReply:
    """What the script answered, parsed from its three strings."""

    granted: float
    tokens: float
    retry_after: float


Outcome = BucketReply | rexc.ResponseError

AnyClient = Redis | RedisCluster


def make_client(url: str | None, cluster_nodes: Sequence[str], socket_timeout: float) -> AnyClient:
    """A redis-py asyncio client that fails fast instead of retrying for seconds.

    redis-py's defaults retry a failed command with backoff for several
    seconds; the limiter has its own deadline and health machine, so it
    allows one immediate retry (a stale pooled connection after a server
    restart) and no more.
    """
    retry = Retry(NoBackoff(), 1)
    common: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "retry": retry,
    }
    if cluster_nodes:
        nodes = []
        for item in cluster_nodes:
            host, _, port = item.rpartition(":")
            nodes.append(ClusterNode(host or "127.0.0.1", int(port)))
        return RedisCluster(startup_nodes=nodes, **common)
    if url is None:
        raise ValueError("either url or cluster_nodes is required")
    return Redis.from_url(url, **common)


def _parse(raw: Any) -> BucketReply:
    granted, tokens, retry_after = raw
    return BucketReply(float(granted), float(tokens), float(retry_after))


class BucketCaller:
    """Sends batches of :class:`BucketCall` to one Redis deployment."""

    def __init__(self, client: AnyClient, mode: Mode, program: BucketProgram = PROGRAM) -> None:
        self.client = client
        self.mode: Mode = mode
        self.program = program
        self.cluster = isinstance(client, RedisCluster)
        # redis-py's script object: it knows the SHA and reloads on NOSCRIPT.
        self.script = client.register_script(program.script)
        self.round_trips = 0
        self.commands = 0
        self.loads = 0

    def __repr__(self) -> str:
        kind = "cluster" if self.cluster else "standalone"
        return f"BucketCaller({kind}, mode={self.mode}, round_trips={self.round_trips})"

    async def run(self, calls: Sequence[BucketCall]) -> list[Outcome]:
        """One round trip for ``calls`` (plus one reload round trip if Redis lost the program)."""
        try:
            if self.cluster:
                assert isinstance(self.client, RedisCluster)
                await self.client.initialize()
            outcomes = await self._send(calls)
            missing = [i for i, o in enumerate(outcomes) if self._program_missing(o)]
            if missing:
                await self.load()
                again = await self._send([calls[i] for i in missing])
                for i, outcome in zip(missing, again, strict=True):
                    outcomes[i] = outcome
        except UNAVAILABLE_ERRORS as exc:
            raise RedisUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return [o if isinstance(o, rexc.ResponseError) else _parse(o) for o in outcomes]

    async def load(self) -> None:
        """Load the program on the server (every primary of a cluster)."""
        self.loads += 1
        self.round_trips += 1
        if self.mode == "script":
            await self.client.script_load(self.program.script)
        else:
            await self.client.function_load(self.program.library, replace=True)

    async def ping(self) -> None:
        """Round trip to the server, or to every primary of a cluster."""
        self.round_trips += 1
        try:
            if isinstance(self.client, RedisCluster):
                await self.client.initialize()
                await self.client.ping(target_nodes=RedisCluster.PRIMARIES)
            else:
                await self.client.ping()
        except UNAVAILABLE_ERRORS as exc:
            raise RedisUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def drop_connections(self) -> None:
        """Forget pooled connections (and, for a cluster, the slot map) after an outage."""
        try:
            if isinstance(self.client, RedisCluster):
                await self.client.aclose()
            else:
                await self.client.connection_pool.disconnect()
        except UNAVAILABLE_ERRORS:
            pass  # they are being dropped because they are broken

    async def close(self) -> None:
        await self.client.aclose()

    def _program_missing(self, outcome: Any) -> bool:
        if self.mode == "script":
            return isinstance(outcome, rexc.NoScriptError)
        return isinstance(outcome, rexc.ResponseError) and "Function not found" in str(outcome)

    async def _send(self, calls: Sequence[BucketCall]) -> list[Any]:
        self.round_trips += 1
        self.commands += len(calls)
        if len(calls) == 1:
            try:
                return [await self._one(calls[0])]
            except rexc.ResponseError as exc:
                if isinstance(exc, UNAVAILABLE_ERRORS):  # e.g. CLUSTERDOWN
                    raise
                return [exc]
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            args = self._command(call)
            pipe.execute_command(*args, **self._routing(call))
        results: list[Any] = await pipe.execute(raise_on_error=False)
        # Connection-level failures inside a pipeline come back as values too.
        for result in results:
            if isinstance(result, UNAVAILABLE_ERRORS):
                raise result
        return results

    async def _one(self, call: BucketCall) -> Any:
        if self.mode == "script":
            # Not Script.__call__: its NOSCRIPT reload would hide the miss from
            # the counters; run() reloads and retries the same way.
            return await self.client.evalsha(self.script.sha, 2, *call.keys.as_list(), *call.args())
        return await self.client.execute_command(*self._command(call), **self._routing(call))

    def _command(self, call: BucketCall) -> tuple[Any, ...]:
        keys = call.keys.as_list()
        if self.mode == "script":
            return ("EVALSHA", self.script.sha, 2, *keys, *call.args())
        return ("FCALL", self.program.function_name, 2, *keys, *call.args())

    def _routing(self, call: BucketCall) -> dict[str, Any]:
        # FCALL has "movable keys": without a target, redis-py's cluster client
        # asks a server (COMMAND GETKEYS) for every call, doubling round trips.
        if self.cluster and self.mode == "function":
            assert isinstance(self.client, RedisCluster)
            node = self.client.get_node_from_key(call.keys.bucket)
            return {"target_nodes": node}
        return {}
