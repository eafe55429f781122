"""One PostgreSQL server per test process for the store suites, and a fresh schema per test.

The server (``postgres_servers.postgres_server``) starts on first use and
stops when the process exits. Each test gets a schema of its own, named after
its ``tmp_path``: a store built twice for one test (a reopen) finds the same
data, tests never see each other's rows, and no database is created per test.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
from tests.support.postgres_servers import PostgresServer, pg_bin_dir, postgres_server

from hookrouter.store.postgres import PostgresStore

_shared: list[PostgresServer] = []

# The ``open_store`` fixture (tests/store/conftest.py): opens a store on the test's schema.
OpenStore = Callable[..., Awaitable[PostgresStore]]


def shared_server() -> PostgresServer:
    """The process's PostgreSQL for store tests (started on first call)."""
    if not _shared:
        context = postgres_server({"max_connections": "100"})
        server = context.__enter__()
        atexit.register(context.__exit__, None, None, None)
        _shared.append(server)
    return _shared[0]


def postgres_available() -> bool:
    try:
        pg_bin_dir()
    except RuntimeError:
        return False
    return True


def schema_for(tmp_path: Path) -> str:
    """The schema of the test that owns ``tmp_path``."""
    return "t_" + hashlib.blake2b(str(tmp_path).encode(), digest_size=8).hexdigest()


def store_options(tmp_path: Path, **overrides: object) -> dict[str, object]:
    """``PostgresStore`` keyword arguments for the test that owns ``tmp_path``."""
    return {"dsn": shared_server().dsn, "schema_name": schema_for(tmp_path), **overrides}


async def sql(tmp_path: Path, query: str, *args: Any) -> list[asyncpg.Record]:
    """Run ``query`` on a connection of its own, in the schema of the test owning ``tmp_path``."""
    conn = await asyncpg.connect(
        shared_server().dsn, server_settings={"search_path": schema_for(tmp_path)}
    )
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


@contextlib.contextmanager
def writes_locked(
    server: PostgresServer, schema: str, tables: str = "deliveries"
) -> Iterator[None]:
    """Another session holds ``tables`` in EXCLUSIVE mode: reads pass, every write waits.

    A store whose ``lock_timeout`` is short then sees its writes refused, as
    it would behind an operator's lock or a long migration.
    """
    psql = subprocess.Popen(
        [str(server.bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert psql.stdin is not None and psql.stdout is not None
    psql.stdin.write(
        f"SET search_path TO {schema};\nBEGIN;\nLOCK TABLE {tables} IN EXCLUSIVE MODE;\n"
        "\\echo locked\n"
    )
    psql.stdin.flush()
    line = psql.stdout.readline()
    if line.strip() != "locked":
        psql.kill()
        raise RuntimeError(f"psql could not take the lock: {line}{psql.communicate()[1]}")
    try:
        yield
    finally:
        psql.communicate("ROLLBACK;\n", timeout=30)
