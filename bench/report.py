"""Results on disk and docs/benchmarks.md.

Each scenario run is saved as ``<results dir>/<scenario>.json`` (section,
status, date, machine); the Markdown report is always rebuilt from all
saved results, so running one scenario refreshes its section and keeps the
others (each section states its own date and run count).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.api import Figure, Scenario, Section, Table, Target

# Figure paths are stored relative to the checkout, so results written in one
# clone or worktree render correctly in another.
_REPO = Path(__file__).resolve().parent.parent

# Slots named by the issues that other engineers fill with their own modules.
KNOWN_SLOTS = {
    "ratelimit": ("5. Rate limiter modes", 50, "bench/scenarios/ratelimit.py (issue 4)"),
    "engines": ("6. Ingress engines", 60, "bench/scenarios/engines.py (issue 5)"),
}

METHOD = """\
- **Load.** Requests are pre-signed right before each run (`bench/signing.py`): every request
  carries a unique provider event id and a valid signature (Stripe `t=,v1=` or Standard
  Webhooks) with a timestamp inside the tolerance window, so the router does its full work
  (verify, dedup, durable commit) and no duplicate short-cut is taken. Peak throughput comes
  from **wrk** (closed loop, `-t 2`) replaying the set through `bench/lua/replay.lua`;
  each wrk thread replays its own slice, so no id is sent twice.
- **Latency at a fixed rate** comes from `bench/openloop.py` (uvloop + httptools, open loop):
  request *i* is due at *t0 + i/rate* (released in 1 ms batches) whatever happened before, and
  its latency is measured **from its due time**, so time spent waiting for a connection
  because the server answered earlier requests late is charged to the server (no coordinated
  omission, as in wrk2, which Debian does not package). The client's own scheduling lag is
  shown beside the figures: it is the floor of every open-loop latency.
- **References in the same run.** nginx `return 200` (one worker: the router is one process,
  and the second core belongs to the load generator) is the ceiling; the *typical stack*
  (`bench/reference/typical_stack.py`: FastAPI on uvicorn, Stripe SDK verification, one
  redis-py EVALSHA token bucket per event, one SQLite commit per request in WAL with
  `synchronous=FULL`, an aiohttp delivery worker) is the baseline. The systems are run in
  turn within each round, so each ratio compares numbers taken minutes apart on the same
  machine state.
- **Statistics.** Every figure is the **median of the runs** shown in its table (run-to-run
  range in brackets where it matters). Percentiles are nearest-rank.
- **Resources.** CPU µs per request/event = (utime + stime of the server's processes over the
  run, from /proc) / requests answered; peak RSS from sampling /proc; syscalls per request with
  `perf stat -e raw_syscalls:sys_enter` in a separate run (so its overhead does not touch the
  timed runs).
- **Caveat.** This is a 2-core virtual machine that other work may share: the load generator
  and the server compete for the same two cores, which is why only ratios measured in the same
  run are quoted as results.
- **Host speed.** Each section's header gives the milliseconds a fixed pure-Python loop (one
  million additions, median of 5) took when it started and when it ended (`bench/machine.py`;
  lower is faster). The two can differ by a third within minutes. The host's speed
  moves between sessions (2026-12-01, end to end: 11,050 events/s at 15:08 UTC on one
  session's host, 6,579 at 16:52 on the next one's, with no change to the hot path worth more
  than a few percent in between), and absolute figures such as µs per event move with it:
  compare them across sections or runs only at a similar host speed.
"""


def save(results_dir: Path, scenario: Scenario, payload: dict[str, Any]) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{scenario.name}.json"
    path.write_text(json.dumps(payload, indent=1, default=str))
    return path


def section_to_json(section: Section) -> dict[str, Any]:
    data = asdict(section)
    data["figures"] = [
        {"path": _stored_path(f.path), "caption": f.caption} for f in section.figures
    ]
    return data


def _stored_path(path: Path) -> str:
    resolved = path.resolve()
    if resolved.is_relative_to(_REPO):
        return str(resolved.relative_to(_REPO))
    return str(path)


def section_from_json(data: dict[str, Any]) -> Section:
    return Section(
        text=list(data.get("text", [])),
        tables=[Table(**t) for t in data.get("tables", [])],
        figures=[Figure(_REPO / f["path"], f["caption"]) for f in data.get("figures", [])],
        targets=[Target(**t) for t in data.get("targets", [])],
        notes=list(data.get("notes", [])),
        data=dict(data.get("data", {})),
    )


def load_all(results_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(results_dir.glob("*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(table: Table) -> str:
    lines = []
    if table.title:
        lines.append(f"**{table.title}**\n")
    lines.append("| " + " | ".join(_cell(c) for c in table.columns) + " |")
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    if table.note:
        lines.append(f"\n{table.note}")
    return "\n".join(lines)


def _verdict(target: Target) -> str:
    if target.met is None:
        return "not measured"
    return "**met**" if target.met else "**MISSED**"


def render_targets(results: list[dict[str, Any]]) -> str:
    rows = []
    for res in results:
        section = section_from_json(res.get("section") or {})
        for t in section.targets:
            rows.append([res["title"], t.name, t.goal, t.measured, _verdict(t), t.note])
    if not rows:
        return "_No target has been measured yet._"
    table = Table("", ["scenario", "target", "goal", "measured", "verdict", "note"], rows)
    return render_table(table)


def render_bottlenecks(results: list[dict[str, Any]]) -> str:
    """Bottlenecks that sections name (``data["bottlenecks"]``), under the targets table."""
    lines = []
    for res in results:
        data = (res.get("section") or {}).get("data") or {}
        for item in data.get("bottlenecks", []):
            lines.append(f"- {item} (section {res['title']}).")
    if not lines:
        return ""
    return "Where the router's time goes, by profiler:\n\n" + "\n".join(lines) + "\n"


def _machine_block(machine: dict[str, Any]) -> str:
    pk = ", ".join(f"{k} {v}" for k, v in sorted(machine.get("packages", {}).items()))
    tl = "; ".join(f"{k}: {v}" for k, v in machine.get("tools", {}).items())
    return "\n".join(
        [
            f"- CPU: {machine.get('cpu')} — {machine.get('cores')} cores, "
            f"{machine.get('memory_gib')} GiB RAM, {machine.get('virtualisation')}",
            f"- Kernel: Linux {machine.get('kernel')}; Python {machine.get('python')}",
            f"- Packages: {pk}",
            f"- Tools: {tl}",
            f"- Installed by the harness in this run: {', '.join(machine['installed'])}"
            if machine.get("installed")
            else "- Tools were found installed (none installed by the run)",
            f"- Checkout: {machine.get('commit') or 'unknown'}; "
            f"load average at start: {machine.get('load_average', 0):.2f}",
        ]
    )


def render_section(res: dict[str, Any], out_dir: Path) -> str:
    parts = [f"## {res['title']}\n"]
    status = res.get("status")
    if status == "slot":
        parts.append(f"_Not written yet — slot for {res.get('reason')}._")
        return "\n".join(parts)
    if status == "skipped":
        parts.append(f"_Skipped: {res.get('reason')}._")
        return "\n".join(parts)
    mode = "quick smoke run — not for citation" if res.get("quick") else "full run"
    speeds = [res.get(k) for k in ("host_speed_ms", "host_speed_end_ms") if res.get(k)]
    speed = f", host speed {' / '.join(map(str, speeds))} ms (see Method)" if speeds else ""
    # Results saved before runs recorded where they ran say nothing here.
    where = f" on {res['host']}" if res.get("host") else ""
    commit = f", checkout {res['commit']}" if res.get("commit") else ""
    parts.append(
        f"_{res.get('date')}, {mode}{where}{commit}, {res.get('runs')} run(s) per figure, "
        f"{res.get('duration_s', 0):.0f} s, load average {res.get('load_average', 'n/a')} "
        f"at start{speed}._\n"
    )
    if status == "failed":
        parts.append(f"**This scenario failed:** `{_cell(res.get('reason'))}`\n")
    section = section_from_json(res.get("section") or {})
    parts += [p + "\n" for p in section.text]
    parts += [render_table(t) + "\n" for t in section.tables]
    for fig in section.figures:
        rel = os.path.relpath(fig.path, out_dir)
        parts.append(f"![{fig.caption}]({rel})\n\n_{fig.caption}_\n")
    parts += [p + "\n" for p in section.notes]
    return "\n".join(parts)


def render(
    results: list[dict[str, Any]],
    machine: dict[str, Any],
    out_path: Path,
    registered: list[Scenario],
) -> str:
    """The whole Markdown report."""
    by_name = {r["scenario"]: r for r in results}
    for sc in registered:
        if sc.name not in by_name:
            by_name[sc.name] = {
                "scenario": sc.name,
                "title": sc.title,
                "order": sc.order,
                "status": "skipped",
                "reason": "not run yet",
            }
    for name, (title, order, where) in KNOWN_SLOTS.items():
        if name not in by_name:
            by_name[name] = {
                "scenario": name,
                "title": title,
                "order": order,
                "status": "slot",
                "reason": where,
            }
    ordered = sorted(by_name.values(), key=lambda r: (r.get("order", 999), r["scenario"]))
    out_dir = out_path.parent
    head = [
        "# hookrouter benchmarks\n",
        "Generated by `python -m bench all` (one scenario: `python -m bench <name>`); do not edit "
        "by hand. Every figure is a median of repeated runs and every comparison is a ratio to "
        "a reference measured in the same run on the same machine.\n",
        "## Targets\n",
        render_targets([r for r in ordered if r.get("section")]) + "\n",
        render_bottlenecks(ordered),
        "## Machine\n",
        "Where this report was written. Each section's first line names the CPU and "
        "the checkout it was measured on, when its run recorded them.\n",
        _machine_block(machine) + "\n",
        "## Method\n",
        METHOD,
    ]
    body = [render_section(r, out_dir) for r in ordered]
    return "\n".join(head) + "\n" + "\n\n".join(body) + "\n"


def write(out_path: Path, text: str) -> None:
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out_path)
