"""Router cost per event against tenant count: ``python -m bench.tenant_cost``.

``bench tenants`` creates every tenant through the admin API (about 10 ms
each, so 100,000 tenants take most of an hour) and times the runs on a
shared host. This finds *what* grows instead: the tenants are written to the
store directly (as the admin API stores them), the router starts on that
store, and for each window of events it records the router's CPU, the
cyclic garbage collector's work per generation, the bytes the router had
written to storage (``written_kb`` per event: WAL and checkpoint pages), with
``--callgrind`` the user-space instructions (far less noisy than time) and
with ``--pyspy`` a py-spy profile, with ``--perf`` a ``perf record``
(cpu-clock) of the router's threads whose samples are printed as µs per event
by library and symbol (``perf_us_per_event``: compiled and native code, where
py-spy sees no frames). Compare the figures of two tenant counts
with the same events.

``--startup N`` instead starts the router N times on each stored catalog and
reports exec to ``/readyz`` (wall) and the router's CPU until then; with
``--cprofile`` the first start is profiled from the wrapper's first line to
readiness (``startup-<tenants>.prof`` in ``--keep``).

``--no-freeze`` keeps every tenant in the collector's view, as the router
did before ``heap.HeapSettler``: neither the ``gc.freeze`` done at start
(``heap.settle_heap``) nor the settler's after each collection.
``--count-objects`` adds the collector's tracked objects at the end of each
window and, per event, the change by type over the window (``kept_by_type``:
what first events leave behind, against what a second window leaves).
``--via-admin`` starts each router on an empty store and creates its tenants
through the admin API, as ``bench tenants`` does (slow: ~1.5 ms a tenant),
instead of on a stored catalog: the catalog's objects are then made one
request at a time after start, among the admin API's own, and not frozen.
``--admin-views N`` times N requests of each operator view in
``ADMIN_VIEWS`` after each window (``admin_ms``: median wall ms and the
answer's bytes), with that window's delivery state held.
``--labelled-tenants N`` sets the router's ``[telemetry] labelled_tenants``
(with ``--admin-views``: what the bound costs a scrape of ``/metrics``).
``--windows N`` sends the same number of events to the same tenants N times: the
second and later windows see tenants that already have runtime state (a
steady state rather than every event being its tenant's first).
``--pause S`` waits S seconds between windows: past the engine's idle
release (60 s), every window's tenants are rebuilt, as in ``bench tenants``'
rounds. ``--alternate`` starts every count's router first and sends their
windows in turn (``bench tenants``' order), so routers age side by side and
each window is paired with the other counts' of the same turn.

    .venv/bin/python -m bench.tenant_cost --tenants 10,100000 --events 20000
    .venv/bin/python -m bench.tenant_cost --tenants 100000 --share 0.01 --no-freeze --windows 3
    .venv/bin/python -m bench.tenant_cost --tenants 100000 --startup 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import ab, procs, signing, systems
from bench import perf as perf_tools
from bench.api import Context, Scenario
from bench.scenarios._common import SinkLog, cpu_reading, wait_quiet
from bench.scenarios.isolation import _store_idle_tenants
from bench.scenarios.tenants import CONFIG, CONNECTIONS, _create, _streams, _written
from bench.tools import Tools

# Run inside the router's process (``prefix``): counts the collector's work per
# generation into a JSON file, and optionally skips the freeze at start.
_WRAPPER = """
import gc, json, os, sys, threading, time
out = os.environ["TENANT_COST_GC"]
stats = {"0": [0, 0.0, 0], "1": [0, 0.0, 0], "2": [0, 0.0, 0]}
started = [0.0]
def _cb(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        s = stats[str(info["generation"])]
        s[0] += 1
        s[1] += time.perf_counter() - started[0]
        s[2] += info.get("collected", 0)
gc.callbacks.append(_cb)
def _types():
    # Asked for by a ``.census`` file: tracked objects by type, outside the freeze,
    # into a ``.types`` file of their own (the reading below is rewritten every 0.5 s).
    if not os.path.exists(out + ".census"):
        return
    counts = {}
    for o in gc.get_objects():
        kind = type(o).__qualname__
        counts[kind] = counts.get(kind, 0) + 1
    with open(out + ".types.tmp", "w") as fh:
        json.dump(counts, fh)
    os.replace(out + ".types.tmp", out + ".types")
    os.remove(out + ".census")
def _dump():
    while True:
        time.sleep(0.5)
        tmp = out + ".tmp"
        counting = os.environ.get("TENANT_COST_COUNT")
        if counting:
            _types()
        with open(tmp, "w") as fh:
            json.dump({"gc": stats, "tracked": len(gc.get_objects()) if counting else None}, fh)
        os.replace(tmp, out)
threading.Thread(target=_dump, daemon=True).start()
if os.environ.get("TENANT_COST_NO_FREEZE"):
    import hookrouter.heap as heap
    import hookrouter.runtime as rt
    def _settle():
        gc.unfreeze()  # what start froze (the stored catalog) too
        gc.collect()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(heap.GC_YOUNG_THRESHOLD, older, oldest)
    rt.settle_heap = _settle
    heap.HeapSettler.install = lambda self, loop: True  # nor what collections keep
if os.environ.get("TENANT_COST_CPROFILE"):
    import cProfile, signal
    prof = [None]
    def _on(_s, _f):
        prof[0] = cProfile.Profile()
        prof[0].enable()
    def _off(_s, _f):
        if prof[0] is not None:
            prof[0].disable()
            prof[0].dump_stats(os.environ["TENANT_COST_CPROFILE"])
            prof[0] = None
    signal.signal(signal.SIGUSR1, _on)
    signal.signal(signal.SIGUSR2, _off)
    if os.environ.get("TENANT_COST_CPROFILE_START"):
        _on(None, None)
from hookrouter.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


_TOTALS = re.compile(r"^(?:totals|summary):\s+([\d ]+)", re.MULTILINE)
_EVENTS = re.compile(r"^events:\s+(.+)$", re.MULTILINE)
PLACEHOLDER = "http://127.0.0.1:1"  # stored endpoint URLs, replaced by the sink's in each copy


def _tenant_id(i: int) -> str:
    return f"t{i:06d}"


def _point_at(data: Path, sink_url: str) -> None:
    """Point the stored endpoints of a copied store at this invocation's sink."""
    with sqlite3.connect(data / "events.db") as db:
        db.execute("UPDATE entities SET doc = replace(doc, ?, ?)", (PLACEHOLDER, sink_url))


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, check=True)


def _callgrind_dump(pid: int, out: Path, label: str) -> dict[str, int]:
    """Dump the counts since the last zero; the totals by event, ``Ir`` first (dump kept)."""
    before = set(out.glob("callgrind.*"))
    _callgrind(pid, "--dump")
    for _ in range(600):
        new = set(out.glob("callgrind.*")) - before
        if new:
            break
        time.sleep(0.1)
    dump = max(new, key=lambda p: p.stat().st_mtime)
    time.sleep(0.5)
    kept = out / f"dump-{label}.cg"
    dump.rename(kept)
    text = kept.read_text(errors="replace")
    found = _TOTALS.search(text)
    names = _EVENTS.search(text)
    if not found:
        return {}
    counts = [int(n) for n in found.group(1).split()]
    return dict(zip(names.group(1).split() if names else ["Ir"], counts, strict=False))


# With --callgrind --cachesim, each window's dump is also read by stage: the
# inclusive instructions and last-level read misses under each root below
# (compiled builds; interpreted ones have no such symbols). The stages of an
# event are apart from the timers' work, which Valgrind over-weights: it
# stretches a window many times over while the timers keep wall-clock time
# (the factor is in docs/performance.md).
_CALLGRIND_STAGES = (
    ("CPyDef_session___HttpSession___data_received", "ingest request"),
    ("CPyDef_cycle___CallbackWaiter____resolve", "commit answered (reply, engine)"),
    ("CPyDef_batch___commit_events", "store commit (writer thread)"),
    ("CPyDef_engine___DeliveryEngine____pump", "attempt start"),
    ("CPyDef_connection___Conn___data_received", "attempt response"),
    ("CPyDef_sqlite___ledger____write_outcomes", "outcome writes (writer thread)"),
    ("CPyDef_engine____poll_forever_DeliveryEngine_gen_____mypyc_generator_helper__", "timers"),
)
_ANNOTATED = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+([\d,]+|\.)\s.*?(CPyDef_\w+)\s")


def _callgrind_stages(dump: Path, events: int) -> dict[str, list[float]]:
    """[thousand instructions, last-level read misses] per event under each stage's root."""
    text = subprocess.run(
        [
            "callgrind_annotate",
            "--inclusive=yes",
            "--show=Ir,DLmr",
            "--sort=Ir",
            "--threshold=100",
            str(dump),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return stages_from_annotation(text, events)


def stages_from_annotation(text: str, events: int) -> dict[str, list[float]]:
    """``_callgrind_stages`` on ``callgrind_annotate``'s text (the first line per root)."""
    stages: dict[str, list[float]] = {}
    names = dict(_CALLGRIND_STAGES)
    for line in text.splitlines():
        found = _ANNOTATED.match(line)
        if found is None or found.group(3) not in names:
            continue
        stage = names[found.group(3)]
        if stage not in stages:
            ir, misses = (0 if v == "." else int(v.replace(",", "")) for v in found.groups()[:2])
            stages[stage] = [round(ir / events / 1000, 1), round(misses / events, 1)]
    path = [v for k, v in stages.items() if k != "timers"]
    if path:
        stages["event path (stages summed)"] = [
            round(sum(v[0] for v in path), 1),
            round(sum(v[1] for v in path), 1),
        ]
    return stages


def _gc(path: Path, census: bool = False) -> dict[str, Any]:
    """The wrapper's last reading; ``census``: with tracked objects by type (``types``)."""
    types: Any = None
    if census:
        answer = path.with_name(path.name + ".types")
        answer.unlink(missing_ok=True)
        path.with_name(path.name + ".census").touch()
        for _ in range(600):
            time.sleep(0.2)
            try:
                types = json.loads(answer.read_text())
                break
            except (OSError, ValueError):
                continue
    time.sleep(0.6)
    try:
        reading = dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}
    return {**reading, "types": types} if census else reading


def _kept_by_type(before: dict[str, Any], after: dict[str, Any], per: int) -> dict[str, float]:
    """Tracked objects per event the window left, by type (the largest changes)."""
    old, new = before.get("types") or {}, after.get("types") or {}
    change = {k: (new.get(k, 0) - old.get(k, 0)) / per for k in set(old) | set(new)}
    largest = sorted(change.items(), key=lambda kv: -abs(kv[1]))[:20]
    return {k: round(v, 2) for k, v in largest if abs(v) >= 0.01}


def _window(
    ctx: Context,
    router: systems.System,
    sink: SinkLog,
    streams: list[signing.Stream],
    events: int,
    gc_file: Path,
    label: str,
    pyspy: str | None,
    callgrind: bool,
    cprofile: bool = False,
    census: bool = False,
    perf_freq: int = 0,
    perf_graph: bool = False,
) -> dict[str, Any]:
    rs = ctx.request_set(events, streams)
    base = sink.mark()
    gc0 = _gc(gc_file, census)
    cpu0, _, kernel0 = cpu_reading(router)
    written0 = _written(router)
    pid = router.service.pid
    if callgrind:
        _callgrind(pid, "--zero")
    if cprofile:
        os.kill(pid, signal.SIGUSR1)
    spy = None
    if pyspy:
        spy = subprocess.Popen(
            [
                pyspy,
                "record",
                "-r",
                "200",
                "-f",
                "raw",
                "-o",
                str(ctx.workdir / f"spy-{label}.txt"),
                "-p",
                str(router.service.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    perf_data = ctx.workdir / f"perf-{label}.data"
    recording = (
        perf_tools.recording(router.pids(), perf_data, perf_freq, call_graph=perf_graph)
        if perf_freq
        else contextlib.nullcontext()
    )
    with recording:
        t0 = time.time()
        load = ctx.wrk(
            router.url, rs, connections=CONNECTIONS, duration_s=300, count_statuses=True, once=True
        )
        accepted = load.statuses.get("200", 0) + load.statuses.get("202", 0)
        delivered, drained = wait_quiet(
            lambda: sink.poll() - base, target=accepted, quiet_s=1.0, timeout_s=300
        )
    counted = _callgrind_dump(pid, ctx.workdir, label) if callgrind else {}
    stages = (
        _callgrind_stages(ctx.workdir / f"dump-{label}.cg", max(1, accepted))
        if "DLmr" in counted
        else {}
    )
    if cprofile:
        os.kill(pid, signal.SIGUSR2)
        time.sleep(2.0)
        (router.root / "cprofile.out").rename(ctx.workdir / f"cprofile-{label}.out")
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    cpu1, _, kernel1 = cpu_reading(router)
    written = _written(router) - written0
    gc1 = _gc(gc_file, census)
    times = sink.times[base:]
    span = max(1e-3, (max(times) if times else t0) - t0)
    per = max(1, delivered)
    gc_delta = (
        {
            g: [
                gc1["gc"][g][0] - gc0["gc"][g][0],
                round((gc1["gc"][g][1] - gc0["gc"][g][1]) * 1e6 / per, 1),
            ]
            for g in ("0", "1", "2")
        }
        if gc0 and gc1
        else {}
    )
    return {
        "label": label,
        "accepted": accepted,
        "delivered": delivered,
        "drained": drained,
        "eps": round(delivered / span),
        "cpu_us": round((cpu1 - cpu0) / per * 1e6, 1),
        "kernel_us": round((kernel1 - kernel0) / per * 1e6, 1),
        "written_kb": round(written / per / 1024, 2),
        "instr_k": round(counted.get("Ir", 0) / per / 1000, 1),
        # With --cachesim: simulated cache misses per event (D1 and last level, reads/writes).
        **{f"{k}_per_event": round(v / per, 1) for k, v in counted.items() if k != "Ir"},
        **({"callgrind_stages_per_event": stages} if stages else {}),
        "gc_per_gen_count_us_per_event": gc_delta,
        "tracked": gc1.get("tracked"),
        **({"kept_by_type": _kept_by_type(gc0, gc1, per)} if census else {}),
        **(_perf_figures(perf_data, perf_freq, per, perf_graph) if perf_freq else {}),
    }


# With --perf-graph each sample is charged to the innermost of these frames on
# its stack (first match in this order), so the steps of an event add up to
# the router's CPU: what a first event builds, and the path's stages.
_STEPS = (
    ("gc_collect_main", "cyclic collector"),
    ("CPyDef_endpoints___EndpointTable___get", "endpoint runtime (lookup, build)"),
    ("CPyDef_catalog___LiveSource___verifier", "source verifier (lookup, build)"),
    ("CPyDef_engine___DeliveryEngine____tenant", "tenant record, queue, limits"),
    ("CPyDef_handler___IngestApp____verify_and_store", "ingest: verify, route, admit, append"),
    ("CPyDef_handler___IngestApp____reply", "ingest: the 2xx reply"),
    ("CPyDef_handler___IngestApp____committed", "commit's answer to the engine"),
    ("CPyDef_engine___DeliveryEngine____pump", "attempt start (pump, request write)"),
    ("CPyDef_attempt___Attempter___complete", "attempt response (outcome)"),
    ("CPyDef_handler___IngestApp___handle", "ingest: the rest of the request"),
    ("libsqlite3", "store (SQLite)"),
    ("CPyDef_sqlite___", "store (SQLite)"),
    ("CPyDef_batch___", "store (SQLite)"),
)


def _step(frames: list[tuple[str, str]]) -> str:
    for sym, dso in frames:
        for needle, step in _STEPS:
            if needle in sym or needle in dso:
                return step
    return "kernel, other" if frames[0][1].startswith("[kernel") else "other"


def _perf_figures(data: Path, freq: int, events: int, graph: bool) -> dict[str, Any]:
    """µs per event by ``library:symbol`` (self), and with call graphs by step."""
    by_symbol: Counter[str] = Counter()
    by_step: Counter[str] = Counter()
    if graph:
        for frames in perf_tools.stacks(data):
            sym, dso = frames[0]
            by_symbol[f"{dso}:{sym}"] += 1
            by_step[_step(frames)] += 1
    else:
        for (_tid, dso, sym), n in perf_tools.samples(data).items():
            by_symbol[f"{Path(dso).name}:{sym}"] += n
    scale = 1e6 / freq / events

    def table(counts: Counter[str], top: int) -> dict[str, float]:
        total = {"(all)": round(sum(counts.values()) * scale, 2)}
        return total | {k: round(n * scale, 2) for k, n in counts.most_common(top)}

    figures = {"perf_us_per_event": table(by_symbol, 60)}
    if graph:
        figures["perf_steps_us_per_event"] = table(by_step, len(_STEPS) + 2)
    return figures


def _stored_catalog(stored: Path, count: int, root: Path, sink_url: str) -> None:
    """Copy a stored catalog of ``count`` idle tenants (made once) into ``root``."""
    if not (stored / "data").exists():
        shutil.rmtree(stored, ignore_errors=True)
        t0 = time.monotonic()
        asyncio.run(
            _store_idle_tenants(stored / "partial", count, name=_tenant_id, base_url=PLACEHOLDER)
        )
        (stored / "partial").rename(stored / "data")
        print(f"stored {count:,} tenants in {time.monotonic() - t0:.1f} s", flush=True)
    shutil.copytree(stored / "data", root / "data")
    _point_at(root / "data", sink_url)


def _startups(root: Path, count: int, runs: int, cprofile: bool, workdir: Path) -> None:
    """Start the router ``runs`` times on ``root``'s store: exec to /readyz, CPU until then."""
    for run in range(runs):
        env = {"TENANT_COST_GC": str(root / "gc.json")}
        profiled = cprofile and run == 0
        if profiled:
            env["TENANT_COST_CPROFILE"] = str(root / "cprofile.out")
            env["TENANT_COST_CPROFILE_START"] = "1"
        prefix = [sys.executable, str(workdir / "wrapper.py")]
        t0 = time.monotonic()
        router = systems.start_router(root, CONFIG, env=env, prefix=prefix, ready_timeout=900)
        wall = time.monotonic() - t0
        cpu, _, kernel = cpu_reading(router)
        try:
            if profiled:
                os.kill(router.service.pid, signal.SIGUSR2)
                time.sleep(3.0)
                (root / "cprofile.out").rename(workdir / f"startup-{count}.prof")
        finally:
            router.stop()
        result = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "kernel_s": round(kernel, 2)}
        print(json.dumps({"tenants": count, "startup": run, "profiled": profiled, **result}))


@dataclasses.dataclass
class _Plan:
    """One router and the windows it is sent, in order."""

    count: int
    router: systems.System
    gc_file: Path
    windows: list[tuple[str, list[signing.Stream]]]
    states_made: int = 0  # the router's tenant_states_made after the last window measured


@contextlib.contextmanager
def _router(
    args: argparse.Namespace, ctx: Context, workdir: Path, sink: Any, count: int
) -> Iterator[_Plan]:
    """A router with ``count`` tenants, started (and its tenants created); stopped at exit."""
    root = workdir / f"router-{count}"
    shutil.rmtree(root, ignore_errors=True)
    if not args.via_admin:
        _stored_catalog(args.stores / str(count), count, root, sink.url)
    gc_file = root / "gc.json"
    env = {"TENANT_COST_GC": str(gc_file)}
    if args.no_freeze:
        env["TENANT_COST_NO_FREEZE"] = "1"
    if args.cprofile:
        env["TENANT_COST_CPROFILE"] = str(root / "cprofile.out")
    if args.count_objects:
        env["TENANT_COST_COUNT"] = "1"
    env.update(pair.split("=", 1) for pair in args.env)
    prefix = [sys.executable, str(workdir / "wrapper.py")]
    if args.callgrind:
        cache = ["--cache-sim=yes", f"--LL={args.cachesim},16,64"] if args.cachesim else []
        prefix = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={workdir}/callgrind.%p",
            *cache,
            *prefix,
        ]
    config = dict(CONFIG)
    if args.labelled_tenants is not None:
        config["telemetry"] = {"labelled_tenants": args.labelled_tenants}
    if args.idle_tenants_kept is not None:
        config["delivery"] = {**config["delivery"], "idle_tenants_kept": args.idle_tenants_kept}
    router = systems.start_router(root, config, env=env, prefix=prefix, ready_timeout=900)
    try:
        if args.via_admin:
            t0 = time.monotonic()
            _create(ctx, router.port, 0, count, sink.url)
            print(f"created {count:,} tenants in {time.monotonic() - t0:.1f} s", flush=True)
        if args.callgrind:
            _callgrind(router.service.pid, "--instr=on")
        share = min(1.0, args.busy / count) if args.busy else args.share
        streams = _streams(count, share)
        windows = [(f"{count}-{w}", streams) for w in range(args.windows)]
        if args.first_share is not None:
            # The state this window leaves is what the measured ones run beside.
            windows.insert(0, (f"{count}-first", _streams(count, args.first_share)))
        yield _Plan(count, router, gc_file, windows)
    finally:
        router.stop()


def _measure(
    args: argparse.Namespace,
    ctx: Context,
    sink_log: SinkLog,
    plan: _Plan,
    window: tuple[str, list[signing.Stream]],
    pyspy: str | None,
) -> None:
    """One window on ``plan``'s router, printed as a JSON line."""
    label, streams = window
    router = plan.router
    result = _window(
        ctx,
        router,
        sink_log,
        streams,
        args.events,
        plan.gc_file,
        label,
        pyspy,
        args.callgrind,
        args.cprofile,
        args.count_objects,
        args.perf,
        args.perf_graph,
    )
    result["rss_mb"] = round(procs.rss_bytes(router.pids()) / 2**20)
    delivery = router.get_json("/admin/v1/delivery?limit=1", 60)
    result["transport"] = delivery["transport"]
    # The counter is cumulative; the window's own count is what a run reads
    # (with pauses the idle sweep may have released only some states).
    made = delivery.get("tenant_states_made") or 0
    result["tenant_states_made"] = made
    result["states_made_in_window"] = made - plan.states_made
    plan.states_made = made
    if args.admin_views:
        result["admin_ms"] = _admin_views(router, args.admin_views)
    print(json.dumps({"tenants": plan.count, "share": args.share, **result}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--tenants", default="10,100000")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--share", type=float, default=1.0, help="share of tenants sent events")
    ap.add_argument("--busy", type=int, help="tenants sent events (instead of --share)")
    ap.add_argument("--windows", type=int, default=2, help="measured windows per router")
    ap.add_argument(
        "--first-share",
        type=float,
        help="one window over this share of tenants before the measured ones (bench tenants"
        " runs its 1 %% set after runs over all tenants)",
    )
    ap.add_argument(
        "--pause", type=float, default=0.0, help="seconds between windows (past the idle release)"
    )
    ap.add_argument(
        "--alternate",
        action="store_true",
        help="run every count's router at once, their windows in turn (as bench tenants does)",
    )
    ap.add_argument(
        "--idle-tenants-kept", type=int, help="[delivery] idle_tenants_kept of the router"
    )
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set in the router's environment (e.g. PYTHONMALLOC=malloc); repeatable",
    )
    ap.add_argument("--no-freeze", action="store_true")
    ap.add_argument(
        "--via-admin", action="store_true", help="create the tenants through the admin API"
    )
    ap.add_argument("--count-objects", action="store_true")
    ap.add_argument(
        "--admin-views",
        type=int,
        default=0,
        metavar="N",
        help="after each window, time N of each admin view (ADMIN_VIEWS)",
    )
    ap.add_argument(
        "--labelled-tenants",
        type=int,
        metavar="N",
        help="[telemetry] labelled_tenants of the router (its default otherwise)",
    )
    ap.add_argument("--pyspy", action="store_true")
    ap.add_argument(
        "--perf", type=int, default=0, metavar="HZ", help="perf record each window at HZ"
    )
    ap.add_argument(
        "--perf-graph",
        action="store_true",
        help="with --perf: DWARF call graphs (perf-<window>.data in --keep, for perf report)",
    )
    ap.add_argument("--callgrind", action="store_true", help="count instructions (Valgrind)")
    ap.add_argument(
        "--cachesim",
        type=int,
        default=0,
        help="with --callgrind: simulate caches, last level of this many bytes (16-way)",
    )
    ap.add_argument("--cprofile", action="store_true", help="cProfile the loop thread per window")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--startup", type=int, default=0, help="only time N start-ups per count")
    ap.add_argument(
        "--stores", type=Path, default=Path(tempfile.gettempdir()) / "tenant-cost-stores"
    )
    args = ap.parse_args(argv)
    if args.perf_graph and not args.perf:
        ap.error("--perf-graph needs --perf HZ")
    if args.via_admin and args.startup:
        ap.error("--startup times a stored catalog's start; --via-admin has none")
    tools = Tools()
    pyspy = tools.optional("py-spy", install=True) if args.pyspy else None
    with tempfile.TemporaryDirectory(prefix="hookbench-tcost-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        scenario = Scenario("tenant_cost", "tenant cost", 0, ab.no_section)
        ctx = Context(scenario, quick=False, runs=1, workdir=workdir, img_dir=workdir, tools=tools)
        wrapper = workdir / "wrapper.py"
        wrapper.write_text(_WRAPPER)
        with ctx.cleanup:
            sink = ctx.sink()
            sink_log = SinkLog(sink.access_log)
            counts = [int(n) for n in args.tenants.split(",")]
            if args.startup:
                for count in counts:
                    root = workdir / f"router-{count}"
                    shutil.rmtree(root, ignore_errors=True)
                    _stored_catalog(args.stores / str(count), count, root, sink.url)
                    _startups(root, count, args.startup, args.cprofile, workdir)
                return 0
            # --alternate: every router at once, their windows in turn; else one at a time.
            groups = [counts] if args.alternate else [[count] for count in counts]
            for group in groups:
                with contextlib.ExitStack() as routers:
                    plans = [
                        routers.enter_context(_router(args, ctx, workdir, sink, c)) for c in group
                    ]
                    turns = len(plans[0].windows)
                    for w in range(turns):
                        if w and args.pause:
                            time.sleep(args.pause)
                        last = w == turns - 1
                        for plan in plans:
                            _measure(
                                args, ctx, sink_log, plan, plan.windows[w], pyspy if last else None
                            )
    return 0


# What an operator's views cost the router's loop with this window's state
# held: one GET at a time, the median of ``repeat`` (docs/performance.md).
ADMIN_VIEWS = (
    "/admin/v1/tenants",
    "/admin/v1/delivery",
    "/admin/v1/breakers",
    "/admin/v1/breakers?tripped=true",
    "/admin/v1/breakers?limit=1000",
    "/metrics",
)


def _admin_views(router: systems.System, repeat: int) -> dict[str, Any]:
    """Median wall ms, bytes and status of each of ``ADMIN_VIEWS`` (an older router may 400)."""
    views: dict[str, Any] = {}
    for path in ADMIN_VIEWS:
        times, size, status = [], 0, 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            status, body = router.get(path, 60)
            times.append((time.perf_counter() - t0) * 1e3)
            size = len(body)
        ms = round(sorted(times)[len(times) // 2], 2)
        views[path] = {"ms": ms, "bytes": size, "status": status}
    return views


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
