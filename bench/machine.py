"""What the numbers were measured on: CPU, cores, memory, kernel, versions, commit."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
import sys
import time
from array import array
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.tools import Tools

PACKAGES = (
    "hookrouter",
    "uvloop",
    "httptools",
    "orjson",
    "redis",
    "hiredis",
    "aiohttp",
    "fastapi",
    "starlette",
    "uvicorn",
    "stripe",
    "standardwebhooks",
    "numpy",
    "matplotlib",
    "psutil",
)
TOOLS = ("wrk", "nginx", "redis-server", "perf", "py-spy")


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    with contextlib.suppress(OSError), open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


def _hypervisor() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        if " hypervisor" in fh.read():
            return "virtual machine"
    return "bare metal (no hypervisor flag)"


def host_speed_ms(rounds: int = 5) -> float:
    """Milliseconds a fixed pure-Python loop takes here (median of ``rounds``).

    The bench host's speed moves by tens of percent between sessions (and
    within one), and the absolute targets (µs per event, events/s) move with
    it; this puts a number on it in every scenario's header, so figures from
    different runs can be set side by side. One million interpreted additions:
    the router's hot path is mostly CPython work of that kind.
    """
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        times.append((time.perf_counter() - started) * 1000.0)
    return round(statistics.median(times), 1)


def read_latency_ns(mib: int, steps: int = 1_000_000, rounds: int = 3) -> float:
    """Nanoseconds per step of a chain of dependent random reads over ``mib`` MiB, from Python.

    Each step's address needs the value read by the one before, so the reads
    cannot overlap: over 1 MiB the figure is the interpreter's cost of a step,
    over hundreds of MiB it adds a cache (and TLB) miss. A router with many
    tenants reads each event's tenant state cold in just that way, so the
    difference says what one such read costs on the host of a run. The
    addresses come from a full-period linear congruential sequence fed the
    value read (always 0), not from a shuffled table, which would take longer
    to build than to measure.
    """
    count = (mib << 20) // 8
    if count & (count - 1):
        raise ValueError("mib must be a power of two")
    table = array("q", bytes(count * 8))
    mask = count - 1
    times = []
    for _ in range(rounds):
        index = 0
        started = time.perf_counter()
        for _ in range(steps):
            index = (table[index] + index * 1103515245 + 12345) & mask
        times.append((time.perf_counter() - started) / steps * 1e9)
    return round(statistics.median(times), 1)


def _git(repo: Path, *args: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10, check=False
        )
        return done.stdout.strip()
    return ""


def host_label() -> str:
    """The CPU a result was measured on, as its section names it (the hosts differ)."""
    return f"{_cpu_model()}, {os.cpu_count() or 0} cores"


def checkout(repo: Path) -> str:
    """The commit measured, marked when the tree had other changes than the harness's."""
    # The harness's own outputs do not make the measured code "changed".
    outputs = (":!bench/results", ":!docs/benchmarks.md", ":!docs/img")
    dirty = _git(repo, "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs)
    return _git(repo, "rev-parse", "--short", "HEAD") + (" (with local changes)" if dirty else "")


def describe(tools: Tools, repo: Path) -> dict[str, Any]:
    """Machine, software and checkout facts for the report header."""
    versions = {}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    for name in TOOLS:
        if not tools.have(name):
            tools.optional(name)
    return {
        "date": datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 0,
        "memory_gib": round(_memory_gib(), 1),
        "kernel": platform.release(),
        "virtualisation": _hypervisor(),
        "python": sys.version.split()[0],
        "packages": versions,
        "tools": {name: tools.version(name) for name in TOOLS},
        "commit": checkout(repo),
        "load_average": os.getloadavg()[0],
    }
