"""Shared by the admin API's end-to-end tests: a webhook receiver and a polling wait."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from tests.support.delivery_servers import ThreadedReceiver


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def receiver() -> Iterator[ThreadedReceiver]:
    with ThreadedReceiver() as server:
        yield server
