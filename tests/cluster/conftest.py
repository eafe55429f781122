"""Cluster tests need PostgreSQL's server binaries (Debian's ``postgresql`` package)."""

from __future__ import annotations

import pytest
from tests.support.postgres_store import postgres_available


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if postgres_available():
        return
    skip = pytest.mark.skip(reason="PostgreSQL is not installed")
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(skip)
