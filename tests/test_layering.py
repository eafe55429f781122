"""House rule 1: the sans-IO core imports no I/O machinery.

Protocol, verification, routing, flow control, retry/breaker policy and the
bucket maths take bytes, events and ``now`` and return decisions; they never
open sockets, files or databases and never read a clock. This walks their
imports (including imports inside functions) so a slip fails here rather
than in review. Transitive imports through other hookrouter modules are
checked too: a pure module may only import hookrouter modules that are pure.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hookrouter

PACKAGE = Path(hookrouter.__file__).parent
PURE_MODULES = [
    "_native/accel.py",
    "core/content_coding.py",
    "core/http1.py",
    "core/http1client.py",
    "core/routing.py",
    *sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "verify").glob("*.py")),
    "flow/backlog.py",
    "flow/credits.py",
    "flow/scheduler.py",
    "delivery/policy.py",
    "delivery/breaker.py",
    "delivery/ssrf.py",
    "delivery/signing.py",
    "store/retention.py",
    "store/sqlite/dedup_tiers.py",
    "ratelimit/bucket.py",
    "ratelimit/keys.py",
    "ratelimit/slots.py",
    "ratelimit/health.py",
]
# Allowed hookrouter imports from pure code besides other pure modules: data
# definitions with no behaviour (errors, ids, the clock *protocol* is not
# allowed), and the native helpers, C functions over bytes (_native/accel.py).
ALLOWED_SHARED = {
    "hookrouter.errors",
    "hookrouter.ids",
    "hookrouter.providers",
    "hookrouter._native._http1",
    "hookrouter._native._hmac",
}
FORBIDDEN = {
    "asyncio", "socket", "ssl", "selectors", "sqlite3", "redis", "aiohttp", "nats",
    "uvloop", "threading", "subprocess", "time",
}  # fmt: skip
FORBIDDEN_MODULES = {"urllib.request", "http.client", "http.server"}  # urllib.parse is pure


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def module_name(relative: str) -> str:
    return "hookrouter." + relative.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


PURE_NAMES = {module_name(m) for m in PURE_MODULES}


def test_the_list_covers_real_files() -> None:
    assert len(PURE_MODULES) >= 20
    for relative in PURE_MODULES:
        assert (PACKAGE / relative).is_file(), relative


@pytest.mark.parametrize("relative", PURE_MODULES)
def test_pure_module_imports_no_io(relative: str) -> None:
    imported = imports_of(PACKAGE / relative)
    roots = {name.split(".")[0] for name in imported}
    bad = (roots & FORBIDDEN) | (imported & FORBIDDEN_MODULES)
    assert not bad, f"{relative} imports {sorted(bad)}"
    ours = {name for name in imported if name.startswith("hookrouter.")}
    impure = {
        name
        for name in ours - PURE_NAMES - ALLOWED_SHARED
        if not any(
            name.startswith(pure + ".") or pure.startswith(name + ".") for pure in PURE_NAMES
        )
    }
    assert not impure, f"{relative} imports impure hookrouter modules {sorted(impure)}"
