"""Fixtures for the native transport tests: backends present, fd limits, leak checks."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from hookrouter._native import IMPORT_ERROR
from hookrouter._native import engine as native


def _io_uring_usable() -> str | None:
    """None when the io_uring backend can run here, else why not."""
    if native is None:
        return IMPORT_ERROR
    facts = native.probe()
    if facts["setup_errno"]:
        return f"io_uring_setup refused: errno {facts['setup_errno']}"
    if not (facts.get("multishot_recv") and facts.get("multishot_accept")):
        return "kernel lacks multishot accept/recv"
    return None


IO_URING_SKIP = _io_uring_usable()
BACKENDS = [
    pytest.param("epoll", marks=pytest.mark.skipif(native is None, reason=str(IMPORT_ERROR))),
    pytest.param(
        "io_uring", marks=pytest.mark.skipif(IO_URING_SKIP is not None, reason=str(IO_URING_SKIP))
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def uring_backend() -> str:
    if IO_URING_SKIP is not None:
        pytest.skip(IO_URING_SKIP)
    return "io_uring"


@pytest.fixture(scope="session", autouse=True)
def _raise_fd_limit() -> Iterator[None]:
    """Thousands of connections need two fds each in this process (client + server)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(autouse=True)
def _resources_return_to_zero() -> Iterator[None]:
    """Every test must leave no connection, send chunk, buffer or engine alive."""
    yield
    if native is not None:
        import gc

        gc.collect()
        assert native.debug_counters() == {
            "connections": 0,
            "send_chunks": 0,
            "buffers": 0,
            "engines": 0,
        }
