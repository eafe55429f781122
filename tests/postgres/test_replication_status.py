"""Whether "acknowledged" means on two disks: the start-up line and ``hookrouter doctor``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import asyncpg
import tomli_w
from tests.support.postgres_servers import PostgresServer, Replicated
from tests.support.router import base_config

from hookrouter.store.postgres.replication import probe_dsn, replication_status


def _doctor(tmp_path: Path, dsn: str) -> str:
    cfg = base_config(tmp_path / "data", 0)
    cfg["store"] = {"backend": "postgres", "postgres": {"dsn": dsn}}
    path = tmp_path / "hookrouter.toml"
    path.write_bytes(tomli_w.dumps(cfg).encode())
    done = subprocess.run(
        [sys.executable, "-m", "hookrouter", "doctor", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return next(line for line in done.stdout.splitlines() if line.startswith("store:"))


async def test_a_primary_with_a_synchronous_standby_says_so(
    replicated: Replicated, tmp_path: Path
) -> None:
    replicated.wait_streaming()
    status = await probe_dsn(replicated.dsn)
    assert status.synchronous and not status.in_recovery
    assert status.summary().startswith("synchronous standby: yes")
    assert "on the primary and the standby" in _doctor(tmp_path, replicated.dsn)


async def test_a_lone_server_says_acknowledged_is_one_disk(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(pg_server.dsn, timeout=5)
    try:
        status = await replication_status(conn)
    finally:
        await conn.close()
    assert not status.synchronous
    line = _doctor(tmp_path, pg_server.dsn)
    assert "synchronous standby: no" in line
    assert "primary's disk only" in line and "docs/cluster.md" in line
