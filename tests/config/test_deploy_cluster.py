"""deploy/: the Dockerfile, the compose file and the Kubernetes example hold together.

No container runtime runs here, so these check what can be checked without
one: every YAML document parses, the router config each deployment mounts
loads with the router's own loader (its store options with the backend's),
every ``env:`` secret it reads is provided, the probes and ports agree with
the config, and the files the Dockerfile copies exist. The same topology
(three routers, a primary with a synchronous standby) runs as processes in
tests/cluster.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from hookrouter.config import Config, load_config
from hookrouter.store.backends import choose

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONFIG_PATH = "/etc/hookrouter/hookrouter.toml"
_DEFAULTED = re.compile(r"\$\{(\w+):-([^}]*)\}")


def _env_refs(raw: Any) -> set[str]:
    """Every ``env:NAME`` a config document reads."""
    if isinstance(raw, str):
        return {raw[4:]} if raw.startswith("env:") else set()
    values = raw.values() if isinstance(raw, dict) else raw if isinstance(raw, list) else ()
    found: set[str] = set()
    for value in values:
        found |= _env_refs(value)
    return found


def _load_with(
    path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[Config, dict[str, Any]]:
    """The config as ``hookrouter serve`` loads it, with ``env`` as the environment's."""
    raw = tomllib.loads(path.read_text())
    missing = _env_refs(raw) - set(env)
    assert not missing, f"{path.name} reads env:{sorted(missing)}, which the deployment never sets"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = load_config(path)
    assert not choose(config.store).warnings  # [store.postgres] as the backend reads it
    return config, raw


def _compose_env(values: dict[str, str]) -> dict[str, str]:
    """Compose's ``${NAME:-default}`` with nothing set: the defaults."""
    return {k: _DEFAULTED.sub(lambda m: m.group(2), v) for k, v in values.items()}


def test_the_compose_file_runs_three_routers_on_a_primary_a_standby_and_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = DEPLOY / "compose"
    doc = yaml.safe_load((folder / "compose.yaml").read_text())
    services = doc["services"]
    routers = sorted(s for s in services if s.startswith("router-"))
    assert routers == ["router-1", "router-2", "router-3"]
    assert {"postgres-primary", "postgres-standby", "redis"} <= set(services)
    for name in routers:
        router = services[name]
        build = router["build"]
        assert (folder / build["context"] / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
        mounts = [v.split(":") for v in router["volumes"]]  # source:target:mode
        source = folder / next(m[0] for m in mounts if m[1] == CONFIG_PATH)
        config, raw = _load_with(source, _compose_env(router["environment"]), monkeypatch)
        assert config.cluster is not None and config.store.backend == "postgres"
        dsn = raw["store"]["postgres"]["dsn"]
        assert "postgres-primary" in dsn and "postgres-standby" in dsn  # failover by libpq
        assert "target_session_attrs=read-write" in dsn
        assert "redis://redis:" in raw["redis"]["url"]
        assert router["ports"] == [f"808{name[-1]}:{config.server.port}"]
    for service in ("postgres-primary", "postgres-standby"):
        for volume in services[service]["volumes"]:
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                script = folder / source
                assert script.is_file() and os.access(script, os.X_OK), script
    init = (folder / "primary-init.sh").read_text()
    assert "synchronous_standby_names = 'FIRST 1 (standby1)'" in init
    standby = (folder / "standby-entrypoint.sh").read_text()
    assert "application_name=standby1" in standby and "pg_basebackup" in standby


def test_the_kubernetes_example_config_probes_and_secrets_agree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "hookrouter.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs if d}
    assert set(by_kind) == {"Secret", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"}
    config_file = tmp_path / "hookrouter.toml"
    config_file.write_text(by_kind["ConfigMap"]["data"]["hookrouter.toml"])
    config, _ = _load_with(config_file, by_kind["Secret"]["stringData"], monkeypatch)
    assert config.cluster is not None and config.store.backend == "postgres"

    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert ports["http"] == config.server.port
    assert container["args"] == ["serve", "--config", CONFIG_PATH]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert f"{mounts['config']}/hookrouter.toml" == CONFIG_PATH
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["envFrom"] == [{"secretRef": {"name": by_kind["Secret"]["metadata"]["name"]}}]
    # SIGTERM's drain (grace) and lease release must fit before the kubelet kills.
    assert pod["terminationGracePeriodSeconds"] > config.server.shutdown_grace_seconds + 5
    service = by_kind["Service"]["spec"]
    assert service["selector"] == by_kind["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["ports"][0]["targetPort"] == "http"


def test_the_dockerfile_builds_from_files_that_exist_and_runs_unprivileged() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line.strip() for line in text.replace("\\\n", " ").splitlines()]
    stages = [line.split() for line in lines if line.startswith("FROM ")]
    assert [s[-1] for s in stages] == ["build", "runtime"]  # multi-stage, named
    for line in lines:
        if line.startswith("COPY ") and "--from=" not in line:
            *sources, _target = shlex.split(line)[1:]
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    final = text[text.index(" AS runtime") :]
    user = next(line.split()[1] for line in final.splitlines() if line.startswith("USER "))
    assert user.split(":")[0] not in ("0", "root")
    assert "HOOKROUTER_COMPILE=1" in text  # the compiled wheel, checked in the build
    assert f'CMD ["serve", "--config", "{CONFIG_PATH}"]' in text
    assert "/readyz" in text
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignored and "!src/" in ignored  # a small context: the sources only
