"""Closed-loop load with wrk replaying a pre-signed request set.

wrk keeps ``-c`` connections busy, each sending its next request as soon as
the previous answer arrives: that finds the peak. Its latencies are the
closed-loop kind (a slow answer delays the requests behind it instead of
being counted against them), so the harness quotes them only as "p99 at N
connections"; latency at a fixed offered rate comes from
:mod:`bench.openloop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.signing import RequestSet

LUA = Path(__file__).parent / "lua" / "replay.lua"
MARK = "BENCH-JSON "


@dataclass
class LoadResult:
    """One load run (wrk or open loop), in the units the report uses."""

    requests: int  # completed responses
    duration_s: float
    latency_ms: dict[str, float]  # "p50", "p99", ... and "mean", "max"
    errors: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    wraps: int = 0
    client_cpu_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_json(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "duration_s": self.duration_s,
            "rps": self.rps,
            "latency_ms": self.latency_ms,
            "errors": self.errors,
            "statuses": self.statuses,
            "wraps": self.wraps,
            "client_cpu_s": self.client_cpu_s,
            "extra": self.extra,
        }


def parse_output(text: str, client_cpu_s: float = 0.0) -> LoadResult:
    """The :class:`LoadResult` from wrk's stdout (the ``done()`` JSON line of replay.lua)."""
    for line in text.splitlines():
        if line.startswith(MARK):
            data = json.loads(line[len(MARK) :])
            break
    else:
        raise ValueError(f"no {MARK.strip()} line in wrk output:\n{text[-2000:]}")
    lat = data["latency_us"]
    latency = {f"p{k}": v / 1000.0 for k, v in lat["p"].items()}
    latency.update(mean=lat["mean"] / 1000.0, max=lat["max"] / 1000.0)
    return LoadResult(
        requests=int(data["requests"]),
        duration_s=data["duration_us"] / 1e6,
        latency_ms=latency,
        errors={k: int(v) for k, v in data["errors"].items()},
        statuses={str(k): int(v) for k, v in data.get("statuses", {}).items()},
        wraps=int(data.get("wraps", 0)),
        client_cpu_s=client_cpu_s,
    )


def _interrupt_when_done(proc: subprocess.Popen[bytes], marker: Path, threads: int) -> None:
    """SIGINT wrk once every thread has used up its slice (see replay.lua's "once")."""
    while proc.poll() is None:
        done = len(list(marker.parent.glob(marker.name + "*")))
        if done >= threads:
            time.sleep(0.2)  # let the last responses arrive
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            return
        time.sleep(0.1)


def run(
    wrk: str,
    url: str,
    request_set: RequestSet,
    *,
    connections: int,
    duration_s: float,
    threads: int = 2,
    count_statuses: bool = False,
    once: bool = False,
    timeout_s: float = 10.0,
    log: Path | None = None,
) -> LoadResult:
    """Run wrk once and return its result (client CPU from wait4's rusage)."""
    threads = max(1, min(threads, connections))
    argv = [
        wrk,
        "-t",
        str(threads),
        "-c",
        str(connections),
        "-d",
        f"{max(1, round(duration_s))}s",  # wrk takes whole seconds ("1.5s" is an error)
        "--timeout",
        f"{timeout_s:g}s",
        "-s",
        str(LUA),
        url,
        "--",
        str(request_set.directory),
        str(threads),
    ]
    opts = [name for name, on in (("count", count_statuses), ("once", once)) if on]
    marker = request_set.directory / f"done-{os.getpid()}-{time.monotonic_ns()}-"
    if opts:
        argv.append(",".join(opts))
        if once:
            argv.append(str(marker))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    deadline = time.monotonic() + duration_s + 120
    if once:
        threading.Thread(
            target=_interrupt_when_done, args=(proc, marker, threads), daemon=True
        ).start()
    with proc.stdout:
        out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = out.decode(errors="replace")
    if log is not None:
        with log.open("a") as fh:
            fh.write(" ".join(argv) + "\n" + text + "\n")
    if proc.returncode != 0 or time.monotonic() > deadline:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{text[-2000:]}")
    return parse_output(text, usage.ru_utime + usage.ru_stime)
