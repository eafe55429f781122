"""``hookrouter doctor``: what this machine allows for the ingress engines.

Theory of operation
-------------------
``probe()`` reads the kernel version and the io_uring sysctls, then runs the
io_uring feature checks in a CHILD process (``python -m
hookrouter.ingress.doctor --child``): a seccomp policy may kill a process on
``io_uring_setup`` (SECCOMP_RET_KILL) instead of failing it with EPERM, and
the doctor must survive that to report it. The child uses the C extension's
``probe()`` when it is built, otherwise a bare ``io_uring_setup`` through
ctypes. Nothing is faked: features are what the kernel accepted, errnos are
what it returned.

Zero-copy receive (zcrx) is reported as "did registering an interface queue
succeed", on the interface the caller names (default ``lo``, which never
supports it). Making zcrx useful needs NIC header/data split, flow steering
and RSS set up for that queue; hookrouter does none of that and never uses
zcrx on its own.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PROBE_TIMEOUT_SECONDS = 20.0  # the checks take milliseconds; this only bounds a hang
SYSCTL_DIR = "/proc/sys/kernel"


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """Facts about io_uring and the engines on this machine."""

    kernel: str
    io_uring_disabled: int | None  # kernel.io_uring_disabled (None: no such sysctl)
    io_uring_group: int | None  # kernel.io_uring_group
    native_available: bool
    native_error: str | None
    setup_errno: int | None  # io_uring_setup result: 0 ok, errno, None if not probed
    probe_error: str | None  # the probe itself failed (e.g. killed by seccomp)
    features: dict[str, bool] = field(default_factory=dict)
    zcrx_interface: str | None = None
    zcrx_errno: int | None = None
    engines: dict[str, str] = field(default_factory=dict)  # setting -> what it picks

    @property
    def io_uring_usable(self) -> bool:
        f = self.features
        return (
            self.native_available
            and self.setup_errno == 0
            and all(f.get(k, False) for k in ("multishot_accept", "multishot_recv", "buffer_rings"))
        )


def _errno_name(value: int) -> str:
    if value == errno.EOPNOTSUPP:  # same number as ENOTSUP on Linux; the kernel says this one
        return "EOPNOTSUPP"
    return errno.errorcode.get(value, str(value))


def _read_sysctl(name: str) -> int | None:
    try:
        with open(os.path.join(SYSCTL_DIR, name)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def explain_setup_errno(err: int, disabled: int | None) -> str:
    """Why io_uring_setup failed, in words an operator can act on."""
    name = _errno_name(err)
    if err == errno.EPERM:
        if disabled == 2:
            return f"io_uring_setup refused ({name}): kernel.io_uring_disabled=2 disables it"
        if disabled == 1:
            return (
                f"io_uring_setup refused ({name}): kernel.io_uring_disabled=1 allows only "
                "CAP_SYS_ADMIN and members of kernel.io_uring_group"
            )
        return (
            f"io_uring_setup refused ({name}) by a seccomp policy "
            "(Docker and containerd block io_uring by default)"
        )
    if err == errno.ENOSYS:
        return (
            f"io_uring_setup not available ({name}): kernel without CONFIG_IO_URING, "
            "or a seccomp policy that answers ENOSYS"
        )
    if err == errno.ENOMEM:
        return f"io_uring_setup failed ({name}): locked-memory limit too small for the rings"
    return f"io_uring_setup failed ({name})"


def explain_engine_failure(engine: str, exc: OSError) -> str:
    """The message for ``EngineUnavailable`` when a native engine cannot start."""
    err = exc.errno or 0
    what = str(exc.strerror or exc)
    if "io_uring_setup" in what:
        reason = explain_setup_errno(err, _read_sysctl("io_uring_disabled"))
    elif err == errno.EOPNOTSUPP:
        reason = f"{what}: needs Linux >= 6.0"
    else:
        reason = f"{what} ({_errno_name(err)})"
    return f"engine {engine!r} unavailable: {reason}"


_FEATURE_KEYS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "multishot_accept": lambda f: bool(f.get("multishot_accept")),
    "multishot_recv": lambda f: bool(f.get("multishot_recv")),
    "buffer_rings": lambda f: f.get("buf_ring_errno") == 0,
    "incremental_buffers": lambda f: f.get("buf_ring_inc_errno") == 0,
    "bundles": lambda f: bool(f.get("bundle")),
    "defer_taskrun": lambda f: f.get("defer_taskrun_errno") == 0,
    "coop_taskrun": lambda f: f.get("coop_taskrun_errno") == 0,
    "zero_copy_receive_opcode": lambda f: bool(f.get("op_recv_zc")),
}


def _run_child(zcrx_interface: str | None) -> tuple[dict[str, Any] | None, str | None]:
    cmd = [sys.executable, "-m", "hookrouter.ingress.doctor", "--child", zcrx_interface or ""]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"probe process failed: {exc}"
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        why = " (a seccomp policy kills io_uring syscalls)" if sig == "SIGSYS" else ""
        return None, f"probe process killed by {sig}{why}"
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return None, f"probe process exited {proc.returncode}: {tail[0]}"
    return json.loads(proc.stdout), None


def _engine_choices(native_ok: bool, native_error: str | None, uring: str | None) -> dict[str, str]:
    return {
        "asyncio": "asyncio",
        "epoll": "epoll" if native_ok else f"unavailable: {native_error}",
        "io_uring": "io_uring" if uring is None else f"unavailable: {uring}",
        "auto": "epoll" if native_ok else f"asyncio ({native_error})",
    }


def probe(zcrx_interface: str | None = "lo") -> DoctorReport:
    """Gather the report; never raises for what the kernel refuses."""
    from hookrouter._native import AVAILABLE, IMPORT_ERROR

    disabled = _read_sysctl("io_uring_disabled")
    raw, probe_error = _run_child(zcrx_interface)
    raw = raw or {}
    setup_errno = raw.get("setup_errno")
    features = {k: fn(raw) for k, fn in _FEATURE_KEYS.items()} if raw.get("full") else {}
    report = DoctorReport(
        kernel=platform.release(),
        io_uring_disabled=disabled,
        io_uring_group=_read_sysctl("io_uring_group"),
        native_available=AVAILABLE,
        native_error=IMPORT_ERROR,
        setup_errno=setup_errno,
        probe_error=probe_error,
        features=features,
        zcrx_interface=zcrx_interface if "zcrx_errno" in raw else None,
        zcrx_errno=raw.get("zcrx_errno"),
    )
    if probe_error:
        uring: str | None = probe_error
    elif setup_errno:
        uring = explain_setup_errno(setup_errno, disabled)
    elif not AVAILABLE:
        uring = str(IMPORT_ERROR)
    elif not report.io_uring_usable:
        uring = "kernel lacks multishot accept/recv or provided buffer rings (needs Linux >= 6.0)"
    else:
        uring = None
    engines = _engine_choices(AVAILABLE, IMPORT_ERROR, uring)
    return DoctorReport(**{**_fields(report), "engines": engines})


def _fields(report: DoctorReport) -> dict[str, Any]:
    return {name: getattr(report, name) for name in report.__dataclass_fields__}


def _zcrx_lines(r: DoctorReport) -> list[str]:
    if r.zcrx_errno is None:
        return ["  zcrx registration: not tried"]
    if r.zcrx_errno == 0:
        verdict = "registration succeeded (and was torn down at once)"
    else:
        hint = {
            errno.EOPNOTSUPP: "device or driver cannot do it (loopback never can)",
            errno.EPERM: "needs CAP_NET_ADMIN",
            errno.EINVAL: "kernel rejected the request (device queue or ABI mismatch)",
            errno.ENODEV: "no such interface",
        }.get(r.zcrx_errno, "refused")
        verdict = f"refused with {_errno_name(r.zcrx_errno)}: {hint}"
    return [
        f"  zcrx registration on {r.zcrx_interface} rx queue 0: {verdict}",
        "    (zero-copy receive also needs NIC header/data split, flow steering and RSS;",
        "     hookrouter configures none of that and never enables zcrx itself)",
    ]


def render(report: DoctorReport) -> str:
    """Human-readable report, one fact per line."""
    r = report
    yes = {True: "yes", False: "no"}
    disabled = "n/a" if r.io_uring_disabled is None else r.io_uring_disabled
    group = "n/a" if r.io_uring_group is None else r.io_uring_group
    lines = [
        f"kernel: {r.kernel}",
        f"kernel.io_uring_disabled: {disabled}",
        f"kernel.io_uring_group: {group}",
        f"native extension: {'built' if r.native_available else r.native_error}",
    ]
    if r.probe_error:
        lines.append(f"io_uring_setup: not known: {r.probe_error}")
    elif r.setup_errno == 0:
        lines.append("io_uring_setup: allowed")
    elif r.setup_errno is not None:
        lines.append(f"io_uring_setup: {explain_setup_errno(r.setup_errno, r.io_uring_disabled)}")
    if r.features:
        lines.append("io_uring features:")
        lines += [f"  {k.replace('_', ' ')}: {yes[v]}" for k, v in r.features.items()]
        lines += _zcrx_lines(r)
    lines.append("engine setting -> engine used:")
    lines += [f"  {k}: {v}" for k, v in r.engines.items()]
    return "\n".join(lines)


def _child_probe(zcrx_interface: str | None) -> dict[str, Any]:
    try:
        from hookrouter._native import _engine
    except ImportError:
        return {"setup_errno": _ctypes_setup_errno(), "full": False}
    facts: dict[str, Any] = dict(_engine.probe(zcrx_ifname=zcrx_interface))
    facts["full"] = facts.get("setup_errno") == 0
    return facts


def _ctypes_setup_errno() -> int:
    """io_uring_setup(1, params) without the extension: 0 or the errno."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # sizeof(struct io_uring_params)
    nr_io_uring_setup = 425
    fd = libc.syscall(nr_io_uring_setup, 1, params)
    if fd < 0:
        return ctypes.get_errno()
    os.close(fd)
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    print(json.dumps(_child_probe(sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None)))
