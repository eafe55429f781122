"""Cluster tests need PostgreSQL's server binaries (Debian's ``postgresql`` package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.postgres_servers import Replicated, primary_with_standby
from tests.support.postgres_store import postgres_available


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if postgres_available():
        return
    skip = pytest.mark.skip(reason="PostgreSQL is not installed")
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture
def own_replicated() -> Iterator[Replicated]:
    """A primary with a synchronous standby for this test alone (it kills the primary)."""
    with primary_with_standby(sync=True) as pair:
        yield pair
