"""Child process for the crash test (not a test module).

Usage: python crash_child.py KIND OPTIONS_JSON

Opens the store, then 16 producers append events forever; after each append
is acknowledged the child writes the event id and a newline to stdout and
flushes, so every complete line the parent reads was acknowledged before the
parent sent SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from hookrouter.ids import new_event_id
from hookrouter.store import NewEvent, open_store


async def _produce(store: object, out: int) -> None:
    append = store.append  # type: ignore[attr-defined]
    while True:
        event = NewEvent(
            new_event_id(), "ten_a", "src_a", None, "crash.test", time.time(),
            {"content-type": "application/json"}, b'{"n": 1}' * 64, ("ep_a",),
        )  # fmt: skip
        result = await append(event)
        os.write(out, result.event_id.encode() + b"\n")  # unbuffered: one write per ack


async def _main(kind: str, options: dict[str, object]) -> None:
    store = open_store(kind, **options)
    await store.open()
    await asyncio.gather(*(_produce(store, sys.stdout.fileno()) for _ in range(16)))


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], json.loads(sys.argv[2])))
