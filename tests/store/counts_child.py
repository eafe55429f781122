"""Child process for the delivery-counts crash test (not a test module).

Usage: python counts_child.py STORE_DIR

Appends routed events and records outcomes of every state for them, round
after round, forever; after each round's outcomes are written it prints a
line, so the parent knows writes were under way when it sends SIGKILL.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time

from hookrouter.flow.credits import DeliveryRef
from hookrouter.ids import new_event_id
from hookrouter.store.base import AttemptRecord, DeliveryState, NewEvent
from hookrouter.store.ledger import OutcomeRecord
from hookrouter.store.sqlite import SqliteStore

_STATES = itertools.cycle(
    [DeliveryState.RETRY, DeliveryState.DELIVERED, DeliveryState.PARKED, DeliveryState.DEAD]
)


async def _main(path: str) -> None:
    store = SqliteStore(path)
    await store.open()
    ledger = store.delivery_ledger()
    out = sys.stdout.fileno()
    for rnd in itertools.count():
        tenant = f"ten_{rnd % 3}"
        events = [
            NewEvent(
                new_event_id(),
                tenant,
                "src_a",
                None,
                "crash.test",
                time.time(),
                {"content-type": "application/json"},
                b'{"n": 1}',
                ("ep_a", "ep_b"),
            )
            for _ in range(50)
        ]
        await asyncio.gather(*(store.append(e) for e in events))
        outcomes = [
            OutcomeRecord(
                DeliveryRef(e.event_id, "ep_a"),
                state,
                1,
                time.time() + 60 if state is DeliveryState.RETRY else None,
                500,
                None,
                time.time(),
                AttemptRecord(1, time.time(), 2.0, 500, None),
                tenant_id=tenant,
            )
            for e, state in zip(events, _STATES, strict=False)
        ]
        # Without awaiting the previous round: outcome writes are always in flight.
        ledger.record(outcomes)
        if rnd % 5 == 4:
            await ledger.state_counts([DeliveryState.PENDING])  # materializes ep_b rows
        os.write(out, b"round\n")


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
