"""Off-CPU sampling of a process's threads from /proc, plus the kernel's writeback counters.

Where a thread is when it is *not* running is invisible to CPU profilers
(py-spy, ``perf record`` on cycles). This samples, every ``interval``
seconds, each thread's scheduler state (``R`` running, ``S`` sleeping,
``D`` uninterruptible: disk or page lock), the kernel function it waits in
(``wchan``) and, for ``D`` samples, its kernel stack (root only); and once
per ``vm_interval`` the dirty and writeback page counts of ``/proc/vmstat``.
A loop thread found in ``D`` inside ``balance_dirty_pages`` is being
throttled for dirtying pages faster than the disk takes them; one in
``folio_wait_writeback`` waits for a page the kernel is writing out; one in
``futex_wait`` waits for the GIL (or another lock).
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from pathlib import Path
from typing import Any

_VM_KEYS = ("nr_dirty", "nr_writeback", "nr_dirtied", "nr_written", "pgmajfault")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _state(stat: str) -> str:
    # The field after the parenthesised name (which may itself hold spaces).
    return stat.rpartition(")")[2].split()[0] if ")" in stat else "?"


def vmstat() -> dict[str, int]:
    values: dict[str, int] = {}
    for line in _read(Path("/proc/vmstat")).splitlines():
        name, _, value = line.partition(" ")
        if name in _VM_KEYS:
            values[name] = int(value)
    return values


class OffCpuSampler:
    """Samples ``pid``'s threads in a background thread while used as a context manager."""

    def __init__(self, pid: int, interval: float = 0.002, vm_interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval
        self.vm_interval = vm_interval
        # (thread name, state, wchan) -> samples
        self.counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self.samples: collections.Counter[str] = collections.Counter()  # thread name -> samples
        self.stacks: collections.Counter[tuple[str, str]] = collections.Counter()  # D stacks
        # (t, thread name, state, wchan) of every non-running loop-thread sample over time
        self.loop_blocked: list[tuple[float, str, str]] = []
        self.loop_times: list[float] = []  # when each loop-thread sample was taken
        self.vm: list[tuple[float, dict[str, int]]] = []
        # Per thread: (t, ns on CPU, ns runnable but waiting for a CPU) from schedstat,
        # read with the vm counters: waiting for a CPU is contention, not the store.
        self.sched: dict[str, list[tuple[float, int, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-offcpu")
        self.t0 = 0.0
        self.t0_wall = 0.0

    def _threads(self) -> list[tuple[Path, str]]:
        base = Path(f"/proc/{self.pid}/task")
        try:
            tasks = list(base.iterdir())
        except OSError:
            return []
        named = []
        for task in tasks:
            # Python threads share the process's name: tell them apart by id.
            name = "loop" if task.name == str(self.pid) else f"thread-{task.name}"
            named.append((task, name))
        return named

    def _run(self) -> None:
        threads = self._threads()
        next_vm = 0.0
        refreshed = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            if now - refreshed > 1.0:
                threads, refreshed = self._threads(), now
            for task, name in threads:
                state = _state(_read(task / "stat"))
                wchan = _read(task / "wchan").strip() or "-"
                self.samples[name] += 1
                self.counts[(name, state, wchan)] += 1
                if state == "D":
                    stack = _read(task / "stack")
                    frames = [ln.split()[1].split("+")[0] for ln in stack.splitlines() if " " in ln]
                    self.stacks[(name, ";".join(frames[:8]))] += 1
                if name == "loop":
                    self.loop_times.append(now - self.t0)
                if name == "loop" and state != "R":
                    self.loop_blocked.append((now - self.t0, state, wchan))
            if now >= next_vm:
                self.vm.append((now - self.t0, vmstat()))
                for task, name in threads:
                    fields = _read(task / "schedstat").split()
                    if len(fields) >= 2:
                        row = (now - self.t0, int(fields[0]), int(fields[1]))
                        self.sched.setdefault(name, []).append(row)
                next_vm = now + self.vm_interval
            self._stop.wait(self.interval)

    def __enter__(self) -> OffCpuSampler:
        self.t0 = time.monotonic()
        self.t0_wall = time.time()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def loop_timeline(self) -> list[tuple[float, float, float, float]]:
        """Per ``vm_interval``: (start s, loop's share on CPU, waiting for a CPU, in D state)."""
        rows = self.sched.get("loop", [])
        out = []
        for (t0, run0, wait0), (t1, run1, wait1) in itertools.pairwise(rows):
            span = max(1e-9, t1 - t0)
            in_d = sum(1 for t, st, _ in self.loop_blocked if t0 <= t < t1 and st == "D")
            seen = max(1, sum(1 for t in self.loop_times if t0 <= t < t1))
            out.append((t0, (run1 - run0) / 1e9 / span, (wait1 - wait0) / 1e9 / span, in_d / seen))
        return out

    def summary(self, top: int = 12) -> dict[str, Any]:
        """Shares of samples by thread, state and wait channel; top D stacks; vm peaks."""
        by_thread: dict[str, list[tuple[str, str, float]]] = {}
        for (name, state, wchan), n in self.counts.most_common():
            share = n / max(1, self.samples[name])
            if state != "R" and share >= 0.001:
                by_thread.setdefault(name, []).append((state, wchan, round(share, 4)))
        vm_peak = {
            key: max((v.get(key, 0) for _, v in self.vm), default=0)
            for key in ("nr_dirty", "nr_writeback")
        }
        first, last = (self.vm[0], self.vm[-1]) if self.vm else ((0.0, {}), (0.0, {}))
        span = max(1e-9, last[0] - first[0])
        rates = {
            f"{key}_per_s": round((last[1].get(key, 0) - first[1].get(key, 0)) / span)
            for key in ("nr_dirtied", "nr_written", "pgmajfault")
        }
        sched = {}
        for name, rows in self.sched.items():
            if len(rows) >= 2:
                span = (rows[-1][0] - rows[0][0]) * 1e9
                sched[name] = {
                    "on_cpu": round((rows[-1][1] - rows[0][1]) / span, 4),
                    "runqueue_wait": round((rows[-1][2] - rows[0][2]) / span, 4),
                }
        return {
            "sched": sched,
            "samples": dict(self.samples),
            "blocked": {k: v[:top] for k, v in by_thread.items()},
            "d_stacks": [[name, stack, n] for (name, stack), n in self.stacks.most_common(top)],
            "vm_peak_pages": vm_peak,
            "vm_rates": rates,
        }
