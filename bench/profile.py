"""Where the router's CPU goes: py-spy's collapsed stacks summarised for the report.

``python -m bench <scenario> --profile`` records two py-spy outputs of the
router while the scenario's main load runs: a flame graph (SVG, for people)
and collapsed stacks (``-f raw``: ``frame;frame;... count`` per line). This
module turns the latter into two small tables: the share of samples by area
of the code (the innermost frame decides: store, verification, HTTP, event
loop, ...) and the functions with the most self time. py-spy samples only
threads that are running (idle threads are excluded by default), so the
shares are shares of CPU-active samples across all the router's threads.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

# (substring of the frame's file, area) in priority order: first match wins.
AREAS = (
    ("hookrouter/store", "store (SQLite, group commit)"),
    ("sqlite3", "store (SQLite, group commit)"),
    ("hookrouter/verify", "signature verification"),
    ("hmac", "signature verification"),
    ("hookrouter/core/http1client", "delivery HTTP client"),
    ("hookrouter/core", "HTTP/1.1 core (httptools)"),
    ("httptools", "HTTP/1.1 core (httptools)"),
    ("hookrouter/ingress", "ingress (engine, handler)"),
    ("hookrouter/delivery", "delivery engine"),
    ("hookrouter/flow", "flow control (credits, scheduler)"),
    ("hookrouter/ratelimit", "rate limiting"),
    ("redis", "rate limiting (redis-py)"),
    ("hookrouter/metrics", "metrics"),
    ("prometheus_client", "metrics"),
    ("orjson", "JSON"),
    ("json", "JSON"),
    ("hookrouter", "hookrouter (other)"),
    ("asyncio", "event loop (asyncio/uvloop)"),
    ("uvloop", "event loop (asyncio/uvloop)"),
    ("threading", "threads / hand-offs"),
    ("concurrent", "threads / hand-offs"),
    ("queue", "threads / hand-offs"),
)


def _file_of(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "path/to/file.py"
    start = frame.rfind("(")
    return frame[start + 1 :].rsplit(":", 1)[0] if start >= 0 else ""


def area_of(frame: str) -> str:
    path = _file_of(frame)
    for needle, area in AREAS:
        if needle in path:
            return area
    return "other (stdlib, interpreter)"


def read_raw(path: Path) -> Counter[tuple[str, ...]]:
    """Collapsed stacks -> {stack (outermost first): samples}."""
    stacks: Counter[tuple[str, ...]] = Counter()
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return stacks
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def summarise(path: Path, top: int = 10) -> tuple[list[list[str]], list[list[str]], int]:
    """(rows by area, rows of top self-time functions, total samples)."""
    stacks = read_raw(path)
    total = sum(stacks.values())
    if not total:
        return [], [], 0
    by_area: Counter[str] = Counter()
    by_leaf: Counter[str] = Counter()
    for stack, n in stacks.items():
        leaf = stack[-1]
        by_area[area_of(leaf)] += n
        by_leaf[leaf] += n
    areas = [[a, f"{100.0 * n / total:.1f} %"] for a, n in by_area.most_common()]
    leaves = [[f"`{f}`", f"{100.0 * n / total:.1f} %"] for f, n in by_leaf.most_common(top)]
    return areas, leaves, total
