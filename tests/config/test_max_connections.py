"""``[server] max_connections`` and its default from the fd limit."""

from __future__ import annotations

from hookrouter.config.server import (
    FD_RESERVE,
    MAX_CONNECTIONS_CEILING,
    MAX_CONNECTIONS_FLOOR,
    derive_max_connections,
)


def test_the_default_leaves_room_for_the_store_and_the_delivery_pool() -> None:
    assert derive_max_connections(1024, 256) == 1024 - FD_RESERVE - 2 * 256  # in flight + idle
    assert derive_max_connections(1 << 20, 256) == MAX_CONNECTIONS_CEILING
    assert derive_max_connections(-1, 256) == MAX_CONNECTIONS_CEILING  # RLIM_INFINITY
    assert derive_max_connections(256, 256) == MAX_CONNECTIONS_FLOOR
