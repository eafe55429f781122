"""Verification is sans-IO: no module in hookrouter.verify imports I/O machinery."""

from __future__ import annotations

import ast
from pathlib import Path

import hookrouter.verify

FORBIDDEN = {
    "asyncio",
    "socket",
    "sqlite3",
    "redis",
    "aiohttp",
    "nats",
    "uvloop",
    "httptools",
    "time",
}


def test_verify_modules_import_no_io():
    package = Path(hookrouter.verify.__file__).parent
    found = {}
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad = {n for n in names if n.split(".")[0] in FORBIDDEN}
            if bad:
                found[path.name] = bad
    assert found == {}
    assert len(list(package.glob("*.py"))) >= 8  # the walk really saw the modules
