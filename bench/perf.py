"""Where the compiled router's CPU goes: ``python -m bench.perf [--deliver]``.

py-spy sees no frames inside the mypyc modules, so this samples the router
with ``perf record`` (software cpu-clock, no call graphs: cheap enough to
leave the figures nearly undisturbed) while the same closed-loop load as
``bench.ab`` runs, and prints:

* samples by thread, and by where the CPU sits (kernel, the interpreter,
  SQLite, the compiled hookrouter modules, httptools, uvloop, ...);
* the symbols with the most self time;
* syscalls per event, by syscall (``perf stat`` on the syscall tracepoints);
* with ``--owners``, a round with DWARF call graphs: every sample charged to
  its nearest caller outside the interpreter, libc and the kernel (the
  compiled function, library or interpreted frame on whose behalf the
  runtime worked), so "Python runtime" splits by who asked for it;
* with ``--py-spy``, a round under py-spy: the interpreted Python functions
  still on the hot path (py-spy sees no compiled frames, so a compiled
  function's time lands on its nearest interpreted caller, often the
  event loop's ``run``: those rows mean "compiled or C code").

Shares are of the router's samples (all threads). Nothing is written to
docs/; the raw ``perf.data`` stays under ``--keep DIR`` when given.

    .venv/bin/python -m bench.perf --deliver --seconds 10
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from bench import ab, procs, signing
from bench.api import Context, Scenario
from bench.profile import read_raw
from bench.scenarios._common import set_size
from bench.tools import Tools

# (substring of the DSO path, category), first match wins.
CATEGORIES = (
    ("[kernel", "kernel"),
    ("[vdso]", "kernel"),
    ("libsqlite3", "SQLite"),
    ("_sqlite3", "SQLite (Python module)"),
    ("httptools", "httptools / llhttp"),
    ("uvloop", "uvloop / libuv"),
    ("orjson", "orjson"),
    ("__mypyc", "hookrouter (compiled)"),
    ("hookrouter", "hookrouter (compiled)"),
    ("_native", "hookrouter (compiled)"),
    ("libcrypto", "OpenSSL (HMAC)"),
    ("_hashlib", "OpenSSL (HMAC)"),
    ("libc.so", "libc"),
    ("libc-", "libc"),
    ("ld-linux", "libc"),
    ("python3", "Python runtime"),
    ("libpython", "Python runtime"),
)
SYSCALLS = (
    "read",
    "write",
    "writev",
    "recvfrom",
    "sendto",
    "pread64",
    "pwrite64",
    "fdatasync",
    "fsync",
    "epoll_wait",
    "epoll_ctl",
    "futex",
    "getpid",
    "newfstatat",
    "fcntl",
    "lseek",
    "clock_gettime",
    "accept4",
)


def category(dso: str) -> str:
    for needle, name in CATEGORIES:
        if needle in dso:
            return name
    return f"other ({Path(dso).name or dso})"


@contextlib.contextmanager
def _perf_running(cmd: list[str]) -> Iterator[None]:
    """Run a ``perf`` command attached to the router while the block runs."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf attaches before the load starts
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def recording(
    pids: list[int], data: Path, freq: int, call_graph: bool = False
) -> contextlib.AbstractContextManager[None]:
    """``perf record`` of ``pids`` (all their threads) while the block runs."""
    cmd = ["perf", "record", "-q", "-F", str(freq), "-e", "cpu-clock", "-o", str(data)]
    if call_graph:
        cmd += ["--call-graph", "dwarf,16384"]
    return _perf_running([*cmd, "-p", ",".join(map(str, pids))])


def counting(pids: list[int], out: Path) -> contextlib.AbstractContextManager[None]:
    """``perf stat`` of the chosen syscall tracepoints while the block runs."""
    events = ",".join(f"syscalls:sys_enter_{name}" for name in SYSCALLS)
    return _perf_running(
        ["perf", "stat", "-x", ",", "-e", events, "-p", ",".join(map(str, pids)), "-o", str(out)]
    )


def samples(data: Path) -> Counter[tuple[str, str, str]]:
    """(thread id, dso, symbol) -> samples, from ``perf script``."""
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "tid,ip,sym,dso", "--no-demangle"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts: Counter[tuple[str, str, str]] = Counter()
    for raw in script.splitlines():
        # "tid ip symbol (dso)": the dso is split off the end
        line = raw.strip()
        if not line.endswith(")") or "(" not in line:
            continue
        head, dso = line[:-1].rsplit("(", 1)
        parts = head.split(None, 2)
        if len(parts) < 2:
            continue
        sym = parts[2].strip() if len(parts) > 2 else "?"
        counts[(parts[0], dso, sym)] += 1
    return counts


def _table(title: str, counter: Counter[str], total: int, top: int) -> None:
    print(f"\n{title}")
    for name, n in counter.most_common(top):
        print(f"  {n / total:6.1%}  {name}")


def report(counts: Counter[tuple[str, str, str]], stat: Path, events: int, top: int) -> None:
    total = sum(counts.values()) or 1
    threads: Counter[str] = Counter()
    where: Counter[str] = Counter()
    symbols: Counter[str] = Counter()
    for (tid, dso, sym), n in counts.items():
        threads[f"thread {tid}"] += n
        where[category(dso)] += n
        symbols[f"{sym}  [{Path(dso).name}]"] += n
    print(f"\n{total:,} samples")
    _table("by thread", threads, total, 10)
    _table("by where the CPU sits", where, total, 20)
    _table("top symbols (self)", symbols, total, top)
    print(f"\nsyscalls per event ({events:,} events)")
    for line in stat.read_text().splitlines() if stat.exists() else []:
        parts = line.split(",")
        if len(parts) > 2 and parts[2].startswith("syscalls:sys_enter_"):
            with contextlib.suppress(ValueError):
                n = float(parts[0])
                if n:
                    name = parts[2].removeprefix("syscalls:sys_enter_")
                    print(f"  {n / events:8.3f}  {name}")


# Matched against the DSO's file name: on the whole path "python3" also matched
# every extension under .venv/lib/python3.11/site-packages (uvloop, rbloom, ...),
# whose samples then went to "runtime only".
RUNTIME = ("[kernel", "[vdso]", "libpython", "python3", "libc.so", "libc-", "ld-linux", "[unknown]")


def _mypyc_helper(sym: str, dso: str) -> bool:
    """mypyc's runtime library (``CPyDict_Get``, ``CPyStr_Build``...), not a compiled function."""
    return "__mypyc" in dso and not sym.startswith(("CPyDef_", "CPyPy_", "CPyL_"))


def stacks(data: Path) -> list[list[tuple[str, str]]]:
    """Each call-graph sample of ``perf record --call-graph`` as its frames
    ``(symbol, library file name)``, innermost first."""
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "ip,sym,dso", "--no-demangle", "--no-inline"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: list[list[tuple[str, str]]] = []
    for block in script.split("\n\n"):
        frames = []
        for raw in block.splitlines():
            line = raw.strip()
            if not line.endswith(")") or "(" not in line:
                continue
            head, dso = line[:-1].rsplit("(", 1)
            sym = head.split(None, 1)[1].split("+0x")[0] if " " in head else "?"
            frames.append((sym, Path(dso).name))
        if frames:
            found.append(frames)
    return found


def owners(data: Path) -> Counter[str]:
    """Samples by their nearest frame outside the runtime (see the module docstring)."""
    counts: Counter[str] = Counter()
    for frames in stacks(data):
        owner = "runtime only (no caller outside it)"
        for sym, name in frames:
            if not any(needle in name for needle in RUNTIME) and not _mypyc_helper(sym, name):
                owner = f"{sym}  [{name}]"
                break
        counts[owner] += 1
    return counts


def owners_report(data: Path, top: int) -> None:
    counts = owners(data)
    total = sum(counts.values()) or 1
    _table(f"samples by owner ({total:,} samples)", counts, total, top)


def py_spy_report(raw: Path, top: int) -> None:
    """Self samples by innermost interpreted frame, and by its caller chain's last two."""
    stacks = read_raw(raw)
    total = sum(stacks.values()) or 1
    leaves: Counter[str] = Counter()
    for stack, n in stacks.items():
        leaves[" <- ".join(reversed(stack[-2:]))] += n
    _table(f"py-spy: innermost interpreted frames ({total:,} samples)", leaves, total, top)


def fresh_set(ctx: Context, seconds: float) -> signing.RequestSet:
    """A fresh request set (new provider ids) for one round of ``seconds``."""
    return ctx.request_set(set_size(40_000, seconds), [ab.stream()])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--deliver", action="store_true", help="deliver to an nginx sink as well")
    ap.add_argument("--seconds", type=float, default=10.0, help="load per measured round")
    ap.add_argument("--freq", type=int, default=1999, help="perf sampling frequency (Hz)")
    ap.add_argument("--top", type=int, default=40, help="symbols to list")
    ap.add_argument("--owners", action="store_true", help="add a call-graph round")
    ap.add_argument("--py-spy", action="store_true", help="add a py-spy round")
    ap.add_argument("--pythonpath", help="run the router from another copy of the package")
    ap.add_argument("--keep", type=Path, help="keep perf.data and the logs here")
    args = ap.parse_args(argv)
    tools = Tools()
    for tool in ("wrk", "nginx", "redis-server", "perf"):
        tools.require(tool)
    with tempfile.TemporaryDirectory(prefix="hookbench-perf-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        scenario = Scenario("perf", "perf", 0, ab.no_section)
        ctx = Context(scenario, quick=False, runs=1, workdir=workdir, img_dir=workdir, tools=tools)
        with ctx.cleanup:
            tree = ab.start_tree(ctx, "this tree", args.deliver, args.pythonpath)
            ab.run_round(ctx, tree, fresh_set(ctx, 3), 3)  # warm-up: caches, store pages, leases
            ab.run_round(ctx, tree, fresh_set(ctx, args.seconds), args.seconds)  # to quote
            print(
                f"\nunobserved round: {tree.rates[-1]:,.0f} events/s, "
                f"{tree.cpu_us[-1]:.1f} µs router CPU per event"
            )
            pids = tree.system.pids()
            data, stat = workdir / "perf.data", workdir / "syscalls.txt"
            with recording(pids, data, args.freq):
                ab.run_round(ctx, tree, fresh_set(ctx, args.seconds), args.seconds)
            print(f"perf-recorded round: {tree.rates[-1]:,.0f} events/s, {tree.cpu_us[-1]:.1f} µs")
            # Syscall tracepoints slow every syscall: counted in a round of their own.
            with counting(pids, stat):
                ab.run_round(ctx, tree, fresh_set(ctx, args.seconds), args.seconds)
            report(samples(data), stat, max(tree.events[-1], 1), args.top)
            if args.py_spy:
                raw = workdir / "py-spy.raw.txt"
                exe = tools.optional("py-spy", install=True)
                with procs.py_spy(exe, tree.system.service.pid, workdir / "py-spy.svg", raw):
                    ab.run_round(ctx, tree, fresh_set(ctx, args.seconds), args.seconds)
                py_spy_report(raw, args.top)
            if args.owners:
                graph = workdir / "perf-graph.data"
                with recording(pids, graph, max(99, args.freq // 4), call_graph=True):
                    ab.run_round(ctx, tree, fresh_set(ctx, args.seconds / 2), args.seconds / 2)
                owners_report(graph, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
