"""The pure modules of flow/ and delivery/ import no I/O library (house rule 1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hookrouter

PURE = [
    "flow/credits.py",
    "flow/scheduler.py",
    "delivery/policy.py",
    "delivery/breaker.py",
    "delivery/ssrf.py",
    "delivery/signing.py",
    "core/http1client.py",
]
FORBIDDEN = {"asyncio", "socket", "ssl", "sqlite3", "redis", "aiohttp", "time", "selectors"}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io(module: str) -> None:
    path = Path(hookrouter.__file__).parent / module
    assert not imported_roots(path) & FORBIDDEN, f"{module} imports an I/O module"
