"""The fast reading of stored entities agrees with the full parsers (issue 38).

``config.stored.parse_stored`` may decline a document (None: the full parser
reads it) but must never accept one the parser refuses, nor read one
differently: hypothesis generates documents near the common shapes, valid and
not, and each is read both ways.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookrouter.config.entities import parse_entity_doc
from hookrouter.config.stored import parse_stored
from hookrouter.errors import ConfigError

STRIPE = "whsec_test_stripe_secret_0123456789abcdef"
STANDARD = "whsec_" + "YmVuY2gtc3RhbmRhcmQtd2ViaG9va3Mtc2VjcmV0IQ=="

names = st.sampled_from(["t1", "a.b-c_d", "", "bad name", "x" * 65, "é"])
ints = st.one_of(
    st.integers(min_value=-2, max_value=200_000),
    st.sampled_from([10_000_000, 10_000_001, 2**70]),
    st.booleans(),
    st.floats(allow_nan=False, max_value=1e6, min_value=-1),
    st.none(),
    st.just("5"),
)
secrets = st.sampled_from(
    [STRIPE, STANDARD, "whsec_short", "env:HOOKROUTER_TEST_UNSET", "…abcd", "", "plain-secret"]
)
urls = st.sampled_from(
    [
        "https://hooks.example.com/in",
        "http://127.0.0.1:9/x",
        "ftp://example.com/",
        "https://user:pw@example.com/",
        "https://example.com:99999/",
        "https://exa mple.com/",
        "https://hooks.example.com/in\x7f",
        "https://hooks.example.com?x=1",
        "",
    ]
)


def maybe(doc: dict[str, Any], extra: dict[str, st.SearchStrategy[Any]]) -> Any:
    """``doc`` with any subset of the ``extra`` keys, and sometimes a stray one."""
    optional = st.fixed_dictionaries({}, optional=extra)
    stray = st.dictionaries(st.sampled_from(["surprise", "rate_limit", "headers"]), st.none())
    return st.tuples(st.fixed_dictionaries(doc), optional, stray).map(
        lambda t: {**t[0], **t[1], **t[2]}
    )


tenant_docs = maybe(
    {"id": names},
    {"queue_capacity": ints, "max_in_flight": ints, "max_backlog": ints},
)
source_docs = maybe(
    {
        "id": names,
        "tenant": names,
        "provider": st.sampled_from(["stripe", "standard", "github", "strip"]),
        "secrets": st.lists(secrets, max_size=3),
    },
    {"tolerance_seconds": ints, "github": st.just({"append_action": False})},
)
endpoint_docs = maybe(
    {"id": names, "tenant": names, "url": urls, "secret": secrets},
    {
        "event_types": st.one_of(st.none(), st.lists(st.sampled_from(["a.*", "b", 3]))),
        "max_in_flight": ints,
        "enabled": st.one_of(st.booleans(), st.just(1)),
        "previous_secrets": st.one_of(st.none(), st.lists(secrets, max_size=2)),
    },
)


def same_reading(kind: str, doc: dict[str, Any]) -> None:
    fast = parse_stored(kind, doc)
    try:
        full = parse_entity_doc(kind, doc)
    except ConfigError:
        assert fast is None, f"accepted what the parser refuses: {doc!r}"
        return
    if fast is not None:
        assert fast == full
        assert fast.doc == full.doc


@settings(max_examples=400, deadline=None)
@given(tenant_docs)
def test_tenants_read_alike(doc: dict[str, Any]) -> None:
    same_reading("tenant", doc)


@settings(max_examples=400, deadline=None)
@given(source_docs)
def test_sources_read_alike(doc: dict[str, Any]) -> None:
    same_reading("source", doc)


@settings(max_examples=400, deadline=None)
@given(endpoint_docs)
def test_endpoints_read_alike(doc: dict[str, Any]) -> None:
    same_reading("endpoint", doc)


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("tenant", {"id": "t1", "queue_capacity": 50}),
        ("source", {"id": "s1", "tenant": "t1", "provider": "stripe", "secrets": [STRIPE]}),
        (
            "endpoint",
            {"id": "e1", "tenant": "t1", "url": "https://h.example.com/", "secret": STANDARD},
        ),
    ],
)
def test_common_shapes_take_the_fast_reading(kind: str, doc: dict[str, Any]) -> None:
    """What the admin API writes for a typical customer is read without the full parser."""
    fast = parse_stored(kind, doc)
    assert fast is not None and fast == parse_entity_doc(kind, doc)


def test_a_weak_stored_secret_is_left_to_the_parser() -> None:
    """A rule added after a document was stored still refuses it at start."""
    doc = {"id": "s1", "tenant": "t1", "provider": "stripe", "secrets": ["whsec_short"]}
    assert parse_stored("source", doc) is None
    with pytest.raises(ConfigError):
        parse_entity_doc("source", doc)
