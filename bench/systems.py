"""The systems under test, started the same way for every scenario.

* :func:`start_nginx` -- the ``return 200`` ceiling (see bench.reference.nginx);
* :func:`start_typical` -- the typical stack (bench.reference.typical_stack)
  with its own redis-server;
* :func:`start_router` -- hookrouter itself from a generated TOML config;
* :func:`start_redis`, :func:`start_sink`, :func:`start_hang` -- helpers.

Every system listens on a free port on 127.0.0.1 and is registered with the
scenario's cleanup stack, so a failing scenario never leaves servers behind.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import procs
from bench.reference import nginx as nginx_ref

REPO = Path(__file__).resolve().parent.parent


@dataclass
class System:
    """A running system under test: what scenarios need to drive and measure it."""

    name: str  # "nginx" | "typical" | "router"
    label: str  # as printed in tables
    service: procs.Service
    port: int
    root: Path
    helpers: list[procs.Service] = field(default_factory=list)  # e.g. its redis-server
    admin_token: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        """The system's own processes (not its helpers: those are reported apart)."""
        return self.service.pids()

    def helper_pids(self) -> list[int]:
        return [pid for h in self.helpers for pid in h.pids()]

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path)
        if self.admin_token and path.startswith("/admin"):
            req.add_header("Authorization", f"Bearer {self.admin_token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def get_json(self, path: str, timeout: float = 5.0) -> Any:
        status, body = self.get(path, timeout)
        if status != 200:
            raise RuntimeError(f"{self.name} GET {path}: {status} {body[:200]!r}")
        return json.loads(body)

    def stop(self) -> None:
        self.service.stop()
        for helper in self.helpers:
            helper.stop()


def start_redis(redis_server: str, root: Path, name: str = "redis") -> procs.Service:
    """A private redis-server (no persistence: it only holds rate-limit buckets)."""
    root.mkdir(parents=True, exist_ok=True)
    port = procs.free_port()
    argv = [
        redis_server,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(root),
        "--daemonize",
        "no",
    ]
    service = procs.start(name, argv, root / "redis.log", port=port)
    service.wait_ready(15)
    return service


def start_nginx(nginx: str, root: Path, *, workers: int = 1) -> System:
    ng = nginx_ref.start(nginx, root, workers=workers)
    return System("nginx", f"nginx return 200 ({workers} worker)", ng.service, ng.port, root)


def start_sink(nginx: str, root: Path) -> nginx_ref.Nginx:
    """An nginx that answers 200 (500 under ``/fail/``) and logs one line per request."""
    return nginx_ref.start(nginx, root, sink=True, name="sink")


def start_typical(
    root: Path,
    redis: procs.Service,
    *,
    sources: dict[str, dict[str, str]],
    endpoints: dict[str, list[dict[str, str]]] | None = None,
    rate_limit: dict[str, float] | None = None,
    deliver: bool = True,
    delivery_workers: int = 64,
) -> System:
    """The typical stack on uvicorn (one worker, uvloop, httptools), see its module doc."""
    root.mkdir(parents=True, exist_ok=True)
    port = procs.free_port()
    config = {
        "db": str(root / "typical.db"),
        "redis_url": f"redis://127.0.0.1:{redis.port}/0",
        "sources": sources,
        "endpoints": endpoints or {},
        "rate_limit": rate_limit or {"capacity": 10_000_000, "refill_per_second": 10_000_000},
        "deliver": deliver,
        "delivery_workers": delivery_workers,
    }
    cfg = root / "typical.json"
    cfg.write_text(json.dumps(config, indent=1))
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.reference.typical_stack:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
        "--log-level",
        "warning",
        "--backlog",
        "4096",
    ]
    service = procs.start(
        "typical",
        argv,
        root / "typical.log",
        port=port,
        env={"TYPICAL_STACK_CONFIG": str(cfg)},
        cwd=REPO,
    )
    system = System("typical", "typical stack (FastAPI)", service, port, root, [redis])
    service.wait_ready(30, check=lambda: _http_ok(system, "/healthz"))
    return system


def _http_ok(system: System, path: str) -> bool:
    try:
        return system.get(path, timeout=1.0)[0] == 200
    except OSError:
        return False


# -- the router ---------------------------------------------------------------


def router_command() -> list[str]:
    """How to start the router: the console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "hookrouter"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hookrouter"]


def router_available() -> tuple[bool, str]:
    """Whether ``hookrouter serve`` exists yet (the router is built concurrently)."""
    try:
        done = subprocess.run(
            [*router_command(), "serve", "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            cwd=REPO,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot run hookrouter: {exc}"
    if done.returncode != 0 or "--config" not in done.stdout + done.stderr:
        msg = (done.stderr or done.stdout).strip().splitlines()
        return (
            False,
            f"`hookrouter serve` not available yet ({msg[-1] if msg else done.returncode})",
        )
    return True, "ok"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_dumps(config: dict[str, Any]) -> str:
    """A small TOML writer for the router configs the harness generates.

    Tables, arrays of tables, and values that are str / int / float / bool /
    lists of those or inline tables of those -- all the config uses.
    """
    lines: list[str] = []
    scalars = {k: v for k, v in config.items() if not _is_table(v) and not _is_table_list(v)}
    for key, value in scalars.items():
        lines.append(f"{key} = {_toml_value(value)}")
    for key, value in config.items():
        if _is_table(value):
            _toml_table(lines, key, value)
        elif _is_table_list(value):
            for item in value:
                lines.append(f"\n[[{key}]]")
                for k, v in item.items():
                    lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(lines: list[str], name: str, table: dict[str, Any]) -> None:
    lines.append(f"\n[{name}]")
    for k, v in table.items():
        if not _is_table(v):
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in table.items():
        if _is_table(v):
            _toml_table(lines, f"{name}.{k}", v)


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) and not getattr(value, "inline", False)


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


class Inline(dict[str, Any]):
    """A dict written as a TOML inline table (``rate_limit = { capacity = 10 }``)."""

    inline = True


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    """A bare key when TOML allows one, else quoted (a filter's "$gte", "data.object.id")."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def start_router(
    root: Path,
    config: dict[str, Any],
    *,
    engine: str | None = None,
    env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
    ready_timeout: float = 60.0,
) -> System:
    """Start ``hookrouter serve`` with ``config`` (listen, store filled in); wait for /readyz.

    ``prefix`` runs the command under a wrapper (``valgrind ...``, see bench.instructions).
    """
    root.mkdir(parents=True, exist_ok=True)
    port = procs.free_port()
    config = json.loads(json.dumps(config))  # deep copy; Inline survives as dict below
    config = _restore_inline(config)
    server = config.setdefault("server", {})
    server["listen"] = f"127.0.0.1:{port}"
    if engine:
        server["engine"] = engine
    config.setdefault("store", {})["path"] = str(root / "data")
    token = config.setdefault("admin", {}).setdefault("token", "bench-admin-token")
    cfg = root / "router.toml"
    cfg.write_text(toml_dumps(config))
    argv = [*prefix, *router_command(), "serve", "--config", str(cfg)]
    service = procs.start("router", argv, root / "router.log", port=port, env=env, cwd=REPO)
    system = System("router", "hookrouter", service, port, root, admin_token=token)
    service.wait_ready(ready_timeout, check=lambda: _http_ok(system, "/readyz"))
    return system


def _restore_inline(config: dict[str, Any]) -> dict[str, Any]:
    # rate_limit is the only inline table the harness writes (issue 4's shape).
    for key in ("tenants", "sources", "endpoints"):
        for item in config.get(key, []):
            if isinstance(item.get("rate_limit"), dict):
                item["rate_limit"] = Inline(item["rate_limit"])
    return config


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format to ``{"name{labels}": value}`` (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def metric_sum(metrics: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for key, value in metrics.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


def wait_until(predicate: Any, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
