"""Real PostgreSQL for the cluster-mode tests (issue #32), from tests/support/postgres_servers.py.

``pg_server`` is a server of the test's own (tests crash and restart it);
``replicated`` is a primary with a synchronous standby shared by a module's
tests, which must leave it streaming as they found it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.postgres_servers import (
    PostgresServer,
    Replicated,
    postgres_server,
    primary_with_standby,
)


@pytest.fixture
def pg_server() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def replicated() -> Iterator[Replicated]:
    with primary_with_standby(sync=True) as pair:
        yield pair


@pytest.fixture
def own_replicated() -> Iterator[Replicated]:
    """A pair for this test alone (tests that kill the primary or promote the standby)."""
    with primary_with_standby(sync=True) as pair:
        yield pair
