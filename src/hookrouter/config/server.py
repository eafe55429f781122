"""The ``[server]`` (ingest listener) and ``[admin]`` sections."""

from __future__ import annotations

from dataclasses import dataclass

from hookrouter.config.reader import TableReader
from hookrouter.core.http1 import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_HEADER_BYTES

ENGINES = ("asyncio", "epoll", "io_uring", "auto")

# Precedent for a connection cap sized from the fd limit: HAProxy's maxconn
# (derived from ``ulimit -n``) and nginx's worker_connections (default 512).
MAX_CONNECTIONS_CEILING = 10_000
# Descriptors kept back for the store's files, Redis, logs and the loop's own
# fds; the delivery sockets come on top: up to ``[delivery] workers`` in
# flight and as many idle (``delivery/transport.py``).
FD_RESERVE = 128
MAX_CONNECTIONS_FLOOR = 16


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    engine: str = "asyncio"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    keepalive_timeout_seconds: float = 75.0
    shutdown_grace_seconds: float = 10.0
    backlog: int = 1024
    max_connections: int = 0  # 0: derived from the fd limit (derive_max_connections)


@dataclass(frozen=True, slots=True)
class AdminSettings:
    token: str = ""
    # Optional: a token for GET requests only (dashboards, auditors).
    read_only_token: str = ""
    # Optional: a listener of its own for /admin and /metrics (an internal
    # interface); the ingest listener then answers 404 for them.
    listen: tuple[str, int] | None = None
    # Optional: the bearer token /metrics requires (its labels name every tenant).
    metrics_token: str = ""
    # Wrong credentials one client may present per minute before 429s; 0: no limit.
    max_auth_failures: int = 10


def parse_listen(reader: TableReader, key: str) -> tuple[str, int]:
    default = ServerSettings()
    text = reader.string(key, f"{default.host}:{default.port}")
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        reader.problem(key, f"must look like HOST:PORT (e.g. 127.0.0.1:8080), got {text!r}")
        return default.host, default.port
    return host, int(port_text)


def parse_server(r: TableReader) -> ServerSettings:
    d = ServerSettings()
    host, port = parse_listen(r, "listen")
    settings = ServerSettings(
        host=host,
        port=port,
        engine=r.choice("engine", ENGINES, d.engine),
        max_body_bytes=r.integer("max_body_bytes", d.max_body_bytes, minimum=1),
        max_header_bytes=r.integer("max_header_bytes", d.max_header_bytes, minimum=1024),
        header_timeout_seconds=r.number(
            "header_timeout_seconds", d.header_timeout_seconds, minimum=0.1
        ),
        body_timeout_seconds=r.number("body_timeout_seconds", d.body_timeout_seconds, minimum=0.1),
        keepalive_timeout_seconds=r.number(
            "keepalive_timeout_seconds", d.keepalive_timeout_seconds, minimum=0.1
        ),
        shutdown_grace_seconds=r.number(
            "shutdown_grace_seconds", d.shutdown_grace_seconds, minimum=0.0
        ),
        backlog=r.integer("backlog", d.backlog, minimum=1),
        max_connections=r.integer("max_connections", d.max_connections, minimum=1, maximum=1 << 24),
    )
    r.finish()
    return settings


def derive_max_connections(fd_soft_limit: int, delivery_workers: int) -> int:
    """The default ``max_connections`` for a process allowed ``fd_soft_limit`` fds.

    ``fd_soft_limit`` < 0 is RLIM_INFINITY. Past the cap accepts pause, which
    is better than the kernel's EMFILE on accept, which also starves the store.
    """
    if fd_soft_limit < 0:
        return MAX_CONNECTIONS_CEILING
    spare = fd_soft_limit - FD_RESERVE - 2 * delivery_workers
    return max(MAX_CONNECTIONS_FLOOR, min(MAX_CONNECTIONS_CEILING, spare))


def parse_admin(r: TableReader) -> AdminSettings:
    token = r.secret("token")
    if r.has("token") and token and len(token) < 8:
        r.problem("token", "is too short (use at least 8 characters)")
    read_only = r.secret("read_only_token")
    if read_only and len(read_only) < 8:
        r.problem("read_only_token", "is too short (use at least 8 characters)")
    elif read_only and read_only == token:
        r.problem("read_only_token", "must differ from token")
    listen = parse_listen(r, "listen") if r.has("listen") else None
    metrics_token = r.secret("metrics_token")
    if metrics_token and len(metrics_token) < 8:
        r.problem("metrics_token", "is too short (use at least 8 characters)")
    max_failures = r.integer("max_auth_failures", AdminSettings().max_auth_failures, minimum=0)
    r.finish()
    return AdminSettings(
        token=token,
        read_only_token=read_only,
        listen=listen,
        metrics_token=metrics_token,
        max_auth_failures=max_failures,
    )
