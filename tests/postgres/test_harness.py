"""The PostgreSQL harness does what the cluster tests will lean on (issue #32).

A crash keeps committed rows; with a synchronous standby a commit is on the
standby when it returns and waits, invisible, while the standby is down (a
client timeout bounds that wait, ``statement_timeout`` does not); after the primary dies
and the standby is promoted, the multi-host DSN reaches the new primary.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from tests.support.postgres_servers import PostgresServer, Replicated, multi_host_dsn


async def _connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, timeout=5)


async def test_server_settings_and_identity(pg_server: PostgresServer) -> None:
    conn = await _connect(pg_server.dsn)
    try:
        row = await conn.fetchrow(
            "SELECT current_user, current_database(), inet_server_port(),"
            " current_setting('fsync'), current_setting('synchronous_commit')"
        )
    finally:
        await conn.close()
    assert row is not None
    assert tuple(row) == ("hookrouter", "hookrouter", pg_server.port, "on", "on")
    assert pg_server.port != 5432


async def test_committed_rows_survive_kill9_and_immediate_stop(pg_server: PostgresServer) -> None:
    conn = await _connect(pg_server.dsn)
    await conn.execute("CREATE TABLE acked (id int PRIMARY KEY)")
    for i in range(50):  # 50 separate commits, each acknowledged before the next
        await conn.execute("INSERT INTO acked VALUES ($1)", i)
    old_pid = pg_server.pid

    pg_server.kill9()
    assert not pg_server.running
    with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
        await conn.fetchval("SELECT 1")
    conn.terminate()

    pg_server.start()
    assert pg_server.pid != old_pid
    assert "not properly shut down" in pg_server.log_file.read_text()
    conn = await _connect(pg_server.dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM acked") == 50
        await conn.execute("INSERT INTO acked VALUES (50)")
    finally:
        await conn.close()

    pg_server.stop("immediate")
    pg_server.start()
    assert pg_server.psql("SELECT count(*) FROM acked") == "51"


async def test_sync_standby_has_every_commit(replicated: Replicated) -> None:
    primary, standby = replicated.primary, replicated.standby
    assert primary.psql("SELECT sync_state FROM pg_stat_replication") == "sync"
    assert standby.in_recovery()
    conn = await _connect(primary.dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS synced (id int PRIMARY KEY)")
        await conn.execute("INSERT INTO synced VALUES (1)")
        commit_lsn = await conn.fetchval("SELECT pg_current_wal_insert_lsn()::text")
    finally:
        await conn.close()

    # synchronous_commit=on: the commit returned once the standby had flushed it.
    flushed = standby.psql(
        f"SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '{commit_lsn}') >= 0"
    )
    assert flushed == "t"
    # Replay lags the flush a little: the row becomes readable shortly after.
    deadline = time.monotonic() + 5
    while standby.psql("SELECT count(*) FROM synced WHERE id = 1") != "1":
        assert time.monotonic() < deadline, "committed row never replayed on the standby"
        await asyncio.sleep(0.02)


async def test_commit_waits_while_the_sync_standby_is_down(replicated: Replicated) -> None:
    primary, standby = replicated.primary, replicated.standby
    primary.psql("CREATE TABLE IF NOT EXISTS waits (id int PRIMARY KEY)", user="hookrouter")
    conn = await _connect(primary.dsn)
    standby.stop("fast")
    try:
        # statement_timeout does not end a wait for the synchronous standby (the
        # commit record is already written): only the client can stop waiting.
        await conn.execute("SET statement_timeout = '200ms'")
        insert = asyncio.ensure_future(conn.execute("INSERT INTO waits VALUES (1)"))
        done, _ = await asyncio.wait([insert], timeout=1.0)
        assert not done, "a commit returned while its synchronous standby was down"
        # Until the standby confirms, no other session sees the row either.
        assert primary.psql("SELECT count(*) FROM waits") == "0"
    finally:
        standby.start()
        replicated.wait_streaming()
    try:
        # The standby is back: the waiting commit completes, and new ones do not wait.
        assert await asyncio.wait_for(insert, 10.0) == "INSERT 0 1"
        await asyncio.wait_for(conn.execute("INSERT INTO waits VALUES (2)"), 10.0)
    finally:
        await conn.close()
    assert standby.psql("SELECT pg_last_wal_receive_lsn() IS NOT NULL") == "t"
    deadline = time.monotonic() + 5
    while standby.psql("SELECT count(*) FROM waits") != "2":
        assert time.monotonic() < deadline, "the standby did not catch up"
        await asyncio.sleep(0.02)


async def test_promoted_standby_is_reached_through_the_multi_host_dsn(
    own_replicated: Replicated,
) -> None:
    primary, standby = own_replicated.primary, own_replicated.standby
    # Standby listed first: target_session_attrs=read-write still picks the primary.
    standby_first = multi_host_dsn([standby.port, primary.port])
    conn = await _connect(standby_first)
    try:
        assert await conn.fetchval("SELECT inet_server_port()") == primary.port
        await conn.execute("CREATE TABLE failover (id int PRIMARY KEY)")
        await conn.execute("INSERT INTO failover VALUES (1)")
    finally:
        await conn.close()

    primary.kill9()
    standby.promote()
    assert not standby.in_recovery()

    # The dead primary is listed first: the connection moves on to the new one.
    dsn = multi_host_dsn([primary.port, standby.port])
    assert dsn == (
        f"postgresql://hookrouter@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        "/hookrouter?target_session_attrs=read-write"
    )
    conn = await _connect(dsn)
    try:
        assert await conn.fetchval("SELECT inet_server_port()") == standby.port
        assert not await conn.fetchval("SELECT pg_is_in_recovery()")
        assert await conn.fetchval("SELECT count(*) FROM failover") == 1
        # No synchronous standby any more: the new primary commits alone.
        await asyncio.wait_for(conn.execute("INSERT INTO failover VALUES (2)"), 5.0)
    finally:
        await conn.close()
    # libpq follows the same DSN (psql is libpq).
    assert standby.psql("SELECT inet_server_port()", dsn=dsn) == str(standby.port)
