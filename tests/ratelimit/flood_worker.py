"""A router process for the multi-process tests: floods one bucket, reports what it granted.

Run as ``python flood_worker.py '<json config>'``. Prints ``ready`` once its
connections are warm, waits for a line on stdin, floods for ``duration``
seconds, then prints one JSON line of counts. Not a test module.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from hookrouter.ratelimit import Limit, decide
from hookrouter.ratelimit.redis_calls import BucketCaller, make_client
from hookrouter.ratelimit.redis_limiter import RedisBucketLimiter
from hookrouter.ratelimit.slots import LeasePlan


async def main(cfg: dict[str, Any]) -> None:
    caller = BucketCaller(make_client(None, cfg["nodes"], 2.0), cfg["mode"])
    lease = LeasePlan(cfg["lease"], cfg["lease"] // 4)
    limiter = RedisBucketLimiter(caller, lease=lease, timeout=1.0)
    limit = Limit(cfg["capacity"], cfg["rate"])
    await caller.ping()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    grants = decisions = degraded = 0
    deadline = time.monotonic() + cfg["duration"]
    while time.monotonic() < deadline:
        batch = await asyncio.gather(
            *(decide(limiter, cfg["tenant"], "ingest", limit) for _ in range(cfg["concurrency"]))
        )
        decisions += len(batch)
        grants += sum(d.allowed for d in batch)
        degraded += sum(d.degraded for d in batch)
        await asyncio.sleep(0)
    stats = limiter.stats()
    await limiter.close()
    report = {
        "grants": grants,
        "decisions": decisions,
        "degraded": degraded,
        "leased": stats["leased_tokens"],
        "unspent": stats["local_supply"],
        "redis_calls": stats["redis_calls"],
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
