"""Processes under test: start, wait ready, stop, and account for their resources.

CPU comes from /proc (utime + stime of the process and its descendants, via
psutil), so "CPU us per request" is the server's own cost, not the load
generator's. Resolution is one clock tick (10 ms): runs last seconds and
move tens of thousands of requests, so the error is well under 1 %.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class ServiceError(RuntimeError):
    """A process under test failed to start or died."""


@dataclass
class Service:
    """A process (tree) the harness started; stop it with :meth:`stop`."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int | None = None
    extra_pids: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pids(self) -> list[int]:
        """This process, its descendants (nginx workers, ...) and any extra pids."""
        out = [self.proc.pid]
        with contextlib.suppress(psutil.Error):
            out += [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        return out + list(self.extra_pids)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 30.0, check: object = None) -> None:
        """Wait until the port accepts connections (or ``check()`` is true)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServiceError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}"
                )
            ready = check() if callable(check) else (self.port is None or port_open(self.port))
            if ready:
                return
            time.sleep(0.05)
        self.stop()
        raise ServiceError(f"{self.name} not ready after {timeout:.0f}s:\n{self.tail()}")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(5)


def start(
    name: str,
    argv: Sequence[str],
    log: Path,
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Service:
    """Start ``argv`` with stdout/stderr to ``log``; the caller waits for readiness."""
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = log.open("ab")
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        fh.close()
    return Service(name, proc, log, port)


def cpu_seconds(pids: Sequence[int]) -> float:
    """user + system CPU seconds of ``pids`` (threads included), summed."""
    return sum(cpu_split(pids))


def main_thread_cpu(pids: Sequence[int]) -> float:
    """user + system CPU seconds of each process's main thread (the router's event loop)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for thread in psutil.Process(pid).threads():
                if thread.id == pid:
                    total += thread.user_time + thread.system_time
    return total


def cpu_split(pids: Sequence[int]) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pids`` (threads included), each summed.

    System time is the kernel working for the process: its syscalls (TCP
    send and receive on loopback, including the receiving side's softirq work
    done on the sender's CPU, fsync, WAL writes). It is the floor that no
    change in the router's own code can lower.
    """
    user = system = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            user += t.user
            system += t.system
    return user, system


def rss_bytes(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


def peak_rss_bytes(pids: Sequence[int]) -> int:
    """Sum of VmHWM (peak resident set) over ``pids`` from /proc/<pid>/status."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
    return total


class HasPids(Protocol):
    """A service or a system of several: whatever names its processes."""

    def pids(self) -> list[int]: ...


class CpuMeter:
    """CPU seconds a service spent between :meth:`start` and :meth:`stop`."""

    def __init__(self, service: HasPids) -> None:
        self.service = service
        self.t0 = 0.0
        self.cpu0 = 0.0
        self.cpu = 0.0
        self.wall = 0.0

    def start(self) -> CpuMeter:
        self.t0 = time.monotonic()
        self.cpu0 = cpu_seconds(self.service.pids())
        return self

    def stop(self) -> float:
        self.cpu = cpu_seconds(self.service.pids()) - self.cpu0
        self.wall = time.monotonic() - self.t0
        return self.cpu


class Sampler:
    """Samples RSS and CPU of a service every ``interval`` s in a thread (timelines)."""

    def __init__(self, service: HasPids, interval: float = 0.5, disk: Path | None = None) -> None:
        self.service = service
        self.interval = interval
        self.disk = disk
        self.samples: list[tuple[float, int, float, int]] = []  # (t, rss, cpu s, disk bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-sampler")
        self.t0 = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            pids = self.service.pids()
            disk = disk_usage(self.disk) if self.disk else 0
            self.samples.append(
                (time.monotonic() - self.t0, rss_bytes(pids), cpu_seconds(pids), disk)
            )
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def peak_rss(self) -> int:
        return max((s[1] for s in self.samples), default=0)


def disk_usage(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (like ``du``)."""
    total = 0
    if path.is_file():
        return path.stat().st_blocks * 512
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


@contextlib.contextmanager
def perf_syscalls(pids: Sequence[int], out: Path) -> Iterator[dict[str, float]]:
    """Count syscalls entered by ``pids`` while the block runs (``perf stat``).

    Yields a dict that holds ``syscalls`` after the block (absent when perf
    is missing or refused). Uses the ``raw_syscalls:sys_enter`` tracepoint,
    which works in this VM even though hardware counters do not.
    """
    result: dict[str, float] = {}
    perf = shutil.which("perf")
    if not perf or not pids:
        yield result
        return
    cmd = [
        perf,
        "stat",
        "-x",
        ",",
        "-e",
        "raw_syscalls:sys_enter",
        "-p",
        ",".join(str(p) for p in pids),
        "-o",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)  # perf needs a moment to attach before the load starts
    try:
        yield result
    finally:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        count = parse_perf_stat(out)
        if count is not None:
            result["syscalls"] = count


def parse_perf_stat(path: Path) -> float | None:
    """The raw_syscalls:sys_enter count from a ``perf stat -x,`` output file."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and "raw_syscalls:sys_enter" in parts[2]:
            with contextlib.suppress(ValueError):
                return float(parts[0])
    return None


@contextlib.contextmanager
def py_spy(exe: str | None, pid: int, out: Path, raw: Path | None = None) -> Iterator[Path | None]:
    """Record py-spy of ``pid`` while the block runs: ``out`` (SVG flame graph) and
    ``raw`` (collapsed stacks for :mod:`bench.profile`; default: ``out`` with suffix
    ``.raw.txt``).

    ``--nonblocking`` so the sampled process is never paused (the run's numbers stay
    comparable); 200 Hz is py-spy's usual rate for servers.
    """
    if exe is None:
        yield None
        return
    procs = []
    raw = raw or out.with_suffix(".raw.txt")
    for fmt, path in (("flamegraph", out), ("raw", raw)):
        cmd = [
            exe,
            "record",
            "-p",
            str(pid),
            "-o",
            str(path),
            "-f",
            fmt,
            "-r",
            "200",
            "--nonblocking",
        ]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(0.5)
    try:
        yield out
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
