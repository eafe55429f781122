"""Start real Redis servers for tests: a standalone server and a Redis Cluster.

Plain functions and context managers, no pytest: any test area can import
this file (``tests/ratelimit/conftest.py`` shows how, by path) and wrap the
helpers in its own fixtures.

* :func:`redis_server` yields a :class:`RedisServer` on a free 127.0.0.1 port
  with persistence off (``--save "" --appendonly no``) in its own directory;
  ``stop()`` / ``start()`` restart it on the same port (its data is gone, as
  after a real restart without persistence).
* :func:`redis_cluster` starts N cluster-enabled masters, joins them with
  ``redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`` and
  waits until every node reports ``cluster_state:ok``.

Everything started is stopped on exit, even when the body raises.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
# A cluster node also listens on port + 10000 (the cluster bus).
_CLUSTER_BUS_OFFSET = 10000


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(cluster_bus: bool = False) -> int:
    """A port free on 127.0.0.1 (and its cluster-bus twin when ``cluster_bus``)."""
    rng = random.Random()
    for _ in range(200):
        # Below the usual ephemeral range (32768+) so outgoing connections
        # rarely take it between this check and the server's bind.
        port = rng.randrange(20000, 32000 - _CLUSTER_BUS_OFFSET if cluster_bus else 32000)
        if _port_free(port) and (not cluster_bus or _port_free(port + _CLUSTER_BUS_OFFSET)):
            return port
    raise RuntimeError("no free port found")


@dataclass
class RedisServer:
    """One redis-server process that a test controls."""

    port: int
    directory: Path
    extra_args: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        """Start the server (again, on the same port) and wait until it answers PING."""
        if self.running:
            return
        args = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"),
            *self.extra_args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"redis-server on {self.port} exited: {err}{self.log_tail()}")
            with contextlib.suppress(redis.ConnectionError):
                if self.client().ping():
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server on {self.port} did not answer PING")
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and wait for it to exit."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def client(self) -> redis.Redis:
        """A fresh synchronous client (short timeouts: tests should fail, not hang)."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=1
        )

    def log_tail(self, lines: int = 20) -> str:
        log = self.directory / "redis.log"
        if not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def redis_server(
    directory: Path | None = None, extra_args: Sequence[str] = ()
) -> Iterator[RedisServer]:
    """A running standalone redis-server, stopped on exit."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="redis-")))
        server = _start_with_retry(directory, extra_args, cluster_bus=False)
        stack.callback(server.stop)
        yield server


def _start_with_retry(directory: Path, extra_args: Sequence[str], cluster_bus: bool) -> RedisServer:
    # Another process may take the port between free_port() and bind: retry.
    last: Exception | None = None
    for _ in range(5):
        port = free_port(cluster_bus)
        node_dir = directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        server = RedisServer(port, node_dir, tuple(extra_args))
        try:
            server.start()
            return server
        except (RuntimeError, TimeoutError) as exc:
            server.stop()
            last = exc
    raise RuntimeError(f"could not start redis-server: {last}")


@dataclass
class RedisClusterProcess:
    """A Redis Cluster of ``masters`` nodes without replicas."""

    nodes: list[RedisServer]

    @property
    def startup_nodes(self) -> list[str]:
        """``host:port`` of every node, as ``[redis] cluster_nodes`` takes them."""
        return [n.address for n in self.nodes]

    def primaries_clients(self) -> list[redis.Redis]:
        return [n.client() for n in self.nodes]

    def flushall(self) -> None:
        """Empty every node: keys, scripts and function libraries."""
        for c in self.primaries_clients():
            c.flushall()
            c.script_flush()
            c.function_flush()
            c.close()


def wait_cluster_ok(nodes: Sequence[RedisServer], timeout: float = 20.0) -> None:
    """Block until every node reports ``cluster_state:ok`` with all slots assigned."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for node in nodes:
            client = node.client()
            try:
                info = client.execute_command("CLUSTER INFO")
            finally:
                client.close()
            # redis-py parses the reply into a dict of strings.
            states.append(
                info.get("cluster_state") == "ok" and info.get("cluster_slots_ok") == "16384"
            )
        if all(states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster not ok after {timeout}s: {states}")
        time.sleep(0.05)


@contextlib.contextmanager
def redis_cluster(directory: Path | None = None, masters: int = 3) -> Iterator[RedisClusterProcess]:
    """A running Redis Cluster of ``masters`` nodes, torn down on exit."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rcluster-")))
        nodes: list[RedisServer] = []
        for _ in range(masters):
            node = _start_with_retry(
                directory,
                # 2 s node timeout: failures show quickly; the default (15 s) is for WANs.
                ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "2000"],
                cluster_bus=True,
            )  # fmt: skip
            stack.callback(node.stop)
            nodes.append(node)
        create = [REDIS_CLI, "--cluster", "create", *(n.address for n in nodes),
                  "--cluster-replicas", "0", "--cluster-yes"]  # fmt: skip
        done = subprocess.run(create, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed: {done.stdout!r} {done.stderr!r}"
            )
        wait_cluster_ok(nodes)
        yield RedisClusterProcess(nodes)
