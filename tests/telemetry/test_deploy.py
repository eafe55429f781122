"""deploy/: the alert rules and the Grafana dashboard name only series a real router exports.

The router's ``/metrics`` lists every family (``# TYPE`` lines appear before
any sample), so a series the rules or panels name but the router does not
export is a typo or a renamed metric: an alert that can never fire.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from tests.support.router import RouterProcess, base_config

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "hookrouter-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "hookrouter-dashboard.json"
OPERATING = ROOT / "docs" / "operating.md"
SERIES = re.compile(r"\bhookrouter_[a-zA-Z0-9_]+")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def exported_series(metrics: str) -> set[str]:
    names: set[str] = set()
    for line in metrics.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            names.update(name + suffix for suffix in SUFFIXES.get(kind, ()))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def dashboard_exprs() -> list[str]:
    doc = orjson.loads(DASHBOARD.read_bytes())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", ())]
    exprs += [v["definition"] for v in doc["templating"]["list"] if "definition" in v]
    return exprs


def alert_names() -> list[str]:
    return re.findall(r"^\s*- alert: (\S+)$", RULES.read_text(), re.M)


@pytest.fixture(scope="module")
def metrics_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    workdir = tmp_path_factory.mktemp("deploy")
    with RouterProcess(workdir, base_config(workdir / "data", 0)) as router:
        status, _, body = router.request("GET", "/metrics")
    assert status == 200
    return body.decode()


def test_every_series_in_rules_and_dashboard_is_exported(metrics_text: str) -> None:
    exported = exported_series(metrics_text)
    named = set(SERIES.findall(RULES.read_text()))
    for expr in dashboard_exprs():
        named |= set(SERIES.findall(expr))
    assert len(named) >= 15
    assert named <= exported, f"not exported by the router: {sorted(named - exported)}"


def test_the_dashboard_loads_and_its_panels_are_well_formed() -> None:
    doc = orjson.loads(DASHBOARD.read_bytes())
    panels = doc["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    graphs = [p for p in panels if p["type"] != "row"]
    assert len(graphs) >= 12
    for panel in graphs:
        assert panel["title"] and panel["targets"], panel
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        assert all(t["expr"] and t["refId"] for t in panel["targets"])
    titles = " ".join(p["title"].lower() for p in graphs)
    for wanted in ("refusals", "commit latency", "backlog", "lag", "success ratio",
                   "latency per tenant", "breakers open", "dead-letter", "redis"):  # fmt: skip
        assert wanted in titles, wanted


def test_every_alert_has_a_runbook_and_the_panels_are_listed() -> None:
    text = OPERATING.read_text()
    names = alert_names()
    assert len(names) >= 10
    for name in names:
        assert f"### {name}" in text, f"no runbook section for {name} in docs/operating.md"
    doc = orjson.loads(DASHBOARD.read_bytes())
    for panel in doc["panels"]:
        if panel["type"] != "row":
            assert panel["title"] in text, f"panel {panel['title']!r} missing from the list"


def test_promtool_accepts_the_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; CI installs it)")
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
