"""Replay request validation and the CLI's time parsing."""

from __future__ import annotations

import argparse

import pytest

from hookrouter.admin.api import BadRequest
from hookrouter.admin.delivery_routes import replay_filter
from hookrouter.admin.replay_cli import parse_time
from hookrouter.store.base import DeliveryState


def test_replay_filter_defaults_and_fields() -> None:
    selection, limit = replay_filter({})
    assert selection.states == (DeliveryState.DEAD,) and limit == 1000
    selection, limit = replay_filter(
        {"tenant": "acme", "endpoint": "e", "states": ["dead", "disabled"], "since": 1, "limit": 5}
    )
    assert (selection.tenant_id, selection.endpoint_id, selection.since, limit) == (
        "acme",
        "e",
        1,
        5,
    )
    assert selection.states == (DeliveryState.DEAD, DeliveryState.DISABLED)


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"states": ["delivered"]},
        {"states": []},
        {"tenant": 5},
        {"since": "yesterday"},
        {"limit": 0},
        {"limit": 10**6},
        {"limit": True},
        {"colour": "red"},
    ],
)
def test_replay_filter_rejects(doc: object) -> None:
    with pytest.raises(BadRequest):
        replay_filter(doc)


def test_parse_time() -> None:
    assert parse_time("1700000000") == 1_700_000_000
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time("2023-11-14T22:13:20")  # no time zone: ambiguous
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time("soon")
