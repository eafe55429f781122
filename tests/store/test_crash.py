"""Crash durability: what a killed process acknowledged is there after reopening."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from tests.support.store_backends import StoreBackend

from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.ledger import SqliteLedger

CHILD = Path(__file__).with_name("crash_child.py")
ACKS_BEFORE_KILL = 3000


async def test_every_acknowledged_event_survives_sigkill(backend: StoreBackend) -> None:
    options = {k: str(v) if isinstance(v, Path) else v for k, v in backend.options.items()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        backend.kind,
        json.dumps(options),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    acked: list[str] = []
    try:
        async with asyncio.timeout(30):
            while len(acked) < ACKS_BEFORE_KILL:
                line = await proc.stdout.readline()
                assert line.endswith(b"\n"), f"child stopped early: {line!r}"
                acked.append(line.decode().strip())
    finally:
        # SIGKILL: no flush, no close, no atexit; in the middle of appending.
        proc.send_signal(signal.SIGKILL)
        tail = await proc.stdout.read()
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # Lines already written before the kill were acknowledged too; a torn last
    # line (no newline) was not.
    acked.extend(line.decode() for line in tail.split(b"\n")[:-1])

    store = backend.build()
    await store.open()
    try:
        missing = [i for i in acked if await store.get_event(i) is None]
        stored = await store.list_events(limit=1000)
        # Their deliveries too: nothing delivered them, so all are pending work
        # for the engine at start-up (at least the acknowledged ones).
        backlog = (
            await SqliteLedger(store).pending_endpoints() if isinstance(store, SqliteStore) else []
        )
    finally:
        await store.close()
    assert missing == [], f"{len(missing)} of {len(acked)} acknowledged events were lost"
    assert len(stored) == 1000  # and the store is readable and holds them
    if isinstance(store, SqliteStore):
        assert [b.endpoint_id for b in backlog] == ["ep_a"]
        assert backlog[0].count >= len(acked)
