"""``bench.partition_expiry`` still runs against the store it measures.

A small fill, both sides, short windows: each side removes the expired
events, and the unlink gives the filesystem back the partition's bytes. Its
figures are for docs/performance.md; this only keeps the bench working (it
once stopped at a store API change and nobody saw it until a measurement).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.partition_expiry import run


def test_both_expiries_run_and_remove_the_old_events(tmp_path: Path) -> None:
    rows = asyncio.run(run(tmp_path, 3_000, 200.0, 0.5, ["unlink", "delete"]))
    unlink, delete = rows
    assert (unlink["how"], delete["how"]) == ("unlink", "delete")
    assert unlink["removed"] == 1  # one partition file, unlinked whole
    assert delete["removed"] == 3_000  # the same events, row by row
    assert unlink["store_mib_after"] <= unlink["store_mib_before"]
    for row in rows:
        assert row["baseline"]["p99_ms"] > 0 and row["during"]
