"""Content filters: each operator, missing paths, type mismatches, bounds and error paths."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookrouter.core import filters
from hookrouter.core.filters import (
    MISSING,
    FilterError,
    Projection,
    filter_endpoints,
    json_equal,
    parse_body,
    parse_filter,
)

EVENT: dict[str, Any] = {
    "type": "invoice.paid",
    "livemode": True,
    "data": {
        "object": {
            "amount": 1500,
            "currency": "eur",
            "customer": None,
            "tags": ["vip", "eu"],
            "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
        }
    },
}
HEADERS = {"x-tier": "gold", "content-type": "application/json"}


def matches(doc: dict[str, Any], body: Any = EVENT, headers: dict[str, str] = HEADERS) -> bool:
    flt = parse_filter(doc)
    result = flt.matches(body, headers)
    # The explanation agrees with the verdict, every time.
    assert (flt.why_not(body, headers) is None) is result
    return result


def issues(doc: Any) -> list[tuple[str, str]]:
    with pytest.raises(FilterError) as caught:
        parse_filter(doc)
    return caught.value.issues


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        # implicit and explicit equality; numbers compare as JSON numbers
        ({"type": "invoice.paid"}, True),
        ({"type": "invoice.failed"}, False),
        ({"data.object.amount": 1500.0}, True),
        ({"data.object.amount": {"$eq": 1500}}, True),
        ({"livemode": 1}, False),  # true is not 1
        ({"livemode": True}, True),
        ({"data.object.customer": None}, True),
        ({"data.object.tags": ["vip", "eu"]}, True),
        ({"data.object.tags": ["eu", "vip"]}, False),
        ({"data.object.lines.1": {"sku": "B-7", "qty": 1}}, True),
        ({"data.object.currency": {"$neq": "usd"}}, True),
        ({"data.object.currency": {"$neq": "eur"}}, False),
        # membership
        ({"data.object.currency": {"$in": ["usd", "eur"]}}, True),
        ({"data.object.currency": {"$in": ["usd", "gbp"]}}, False),
        ({"livemode": {"$in": [1, 0]}}, False),
        ({"data.object.amount": {"$in": [1500.0]}}, True),
        ({"data.object.tags": {"$in": [["vip", "eu"], "x"]}}, True),
        ({"data.object.currency": {"$nin": ["usd", "gbp"]}}, True),
        ({"data.object.currency": {"$nin": ["eur"]}}, False),
        # order: numbers with numbers, strings with strings
        ({"data.object.amount": {"$gt": 1000}}, True),
        ({"data.object.amount": {"$gt": 1500}}, False),
        ({"data.object.amount": {"$gte": 1500}}, True),
        ({"data.object.amount": {"$lt": 1500}}, False),
        ({"data.object.amount": {"$lte": 1500}}, True),
        ({"data.object.amount": {"$gte": 1000, "$lt": 2000}}, True),
        ({"data.object.amount": {"$gt": "1000"}}, False),  # a number is not a string
        ({"data.object.currency": {"$gt": "abc"}}, True),
        ({"livemode": {"$gte": 0}}, False),  # a boolean is not a number
        # existence: null exists
        ({"data.object.customer": {"$exists": True}}, True),
        ({"data.object.refund": {"$exists": True}}, False),
        ({"data.object.refund": {"$exists": False}}, True),
        # strings
        ({"type": {"$prefix": "invoice."}}, True),
        ({"type": {"$prefix": "charge."}}, False),
        ({"type": {"$suffix": ".paid"}}, True),
        ({"data.object.amount": {"$prefix": "15"}}, False),
        ({"type": {"$contains": "ice.pa"}}, True),
        ({"type": {"$contains": "refund"}}, False),
        # $contains on a list: an element equal to the operand
        ({"data.object.tags": {"$contains": "vip"}}, True),
        ({"data.object.tags": {"$contains": "vi"}}, False),
        ({"data.object.lines": {"$contains": {"sku": "A-1", "qty": 2}}}, True),
        ({"data.object.amount": {"$contains": 1}}, False),
        # logic
        ({"$and": [{"type": "invoice.paid"}, {"livemode": True}]}, True),
        ({"$and": [{"type": "invoice.paid"}, {"livemode": False}]}, False),
        ({"$or": [{"type": "x"}, {"data.object.amount": {"$gte": 1000}}]}, True),
        ({"$or": [{"type": "x"}, {"type": "y"}]}, False),
        ({"$not": {"type": "x"}}, True),
        ({"$not": {"type": "invoice.paid"}}, False),
        ({}, True),
        # headers: names case-insensitive, values strings
        ({"$headers": {"X-Tier": "gold"}}, True),
        ({"$headers": {"x-tier": {"$in": ["silver", "bronze"]}}}, False),
        ({"$headers": {"x-region": {"$exists": False}}}, True),
        ({"$headers": {"x-tier": {"$gt": 1}}}, False),
    ],
)
def test_each_operator(doc: dict[str, Any], expected: bool) -> None:
    assert matches(doc) is expected


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        # On a missing path only the negative operators hold.
        ({"$eq": 1}, False),
        ({"$neq": 1}, True),
        ({"$in": [1]}, False),
        ({"$nin": [1]}, True),
        ({"$gt": 0}, False),
        ({"$gte": 0}, False),
        ({"$lt": 0}, False),
        ({"$lte": 0}, False),
        ({"$exists": True}, False),
        ({"$exists": False}, True),
        ({"$prefix": ""}, False),
        ({"$suffix": ""}, False),
        ({"$contains": ""}, False),
    ],
)
@pytest.mark.parametrize(
    "path",
    [
        "data.object.refund",  # absent key
        "type.length",  # through a string
        "data.object.lines.9.sku",  # past a list's end
        "data.object.lines.-1.sku",  # not an index
        "data.object.customer.id",  # through null
    ],
)
def test_missing_paths(path: str, condition: dict[str, Any], expected: bool) -> None:
    assert matches({path: condition}) is expected


def test_a_body_that_is_not_json_has_every_path_missing_but_its_headers() -> None:
    body = parse_body(b"token=abc&team_id=T1")
    assert body is MISSING
    assert matches({"token": {"$exists": False}}, body) is True
    assert matches({"token": "abc"}, body) is False
    assert matches({"$headers": {"x-tier": "gold"}}, body) is True


def test_a_body_nested_past_the_decoder_is_not_json() -> None:
    """A nesting bomb must not raise in the fan-out; its body paths are missing."""
    bomb = b"[" * 100_000 + b"]" * 100_000
    assert parse_body(bomb) is MISSING
    flt = {"gold": parse_filter({"$headers": {"x-tier": "gold"}}), "a": parse_filter({"a": 1})}
    assert filter_endpoints(flt, ["a", "gold"], bomb, HEADERS) == ("gold",)


def test_list_indexes_and_numeric_object_keys() -> None:
    assert matches({"data.object.lines.0.sku": "A-1"}) is True
    assert matches({"codes.200": "ok"}, {"codes": {"200": "ok"}}) is True


def test_why_not_names_the_failing_clause() -> None:
    flt = parse_filter(
        {"type": {"$prefix": "invoice."}, "data.object.amount": {"$gte": 1000, "$lt": 1200}}
    )
    assert flt.why_not(EVENT, HEADERS) == ('["data.object.amount"]: 1500 does not satisfy $lt 1200')
    flt = parse_filter({"$or": [{"type": "x"}, {"$headers": {"x-tier": "silver"}}]})
    assert flt.why_not(EVENT, HEADERS) == (
        '$or: no alternative holds ($or[0].type: "invoice.paid" does not satisfy $eq "x"; '
        '$or[1].$headers.x-tier: "gold" does not satisfy $eq "silver")'
    )
    assert parse_filter({"$not": {"livemode": True}}).why_not(EVENT, HEADERS) == (
        "$not: the negated filter matches"
    )
    assert parse_filter({"refund.id": 5}).why_not(EVENT, HEADERS) == (
        '["refund.id"]: missing does not satisfy $eq 5'
    )


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        ({"a": {"$regex": "^x"}}, "a.$regex", "unknown operator $regex"),
        ({"$where": "1"}, "$where", "unknown operator $where"),
        ({"a": {"$gt": 1, "b": 2}}, "a.b", "not an operator here"),
        ({"a": {"$gt": True}}, "a.$gt", "must be a number or a string, not boolean"),
        ({"a": {"$gte": [1]}}, "a.$gte", "must be a number or a string, not array"),
        ({"a": {"$in": "x"}}, "a.$in", "must be a list, not string"),
        ({"a": {"$nin": {"x": 1}}}, "a.$nin", "must be a list, not object"),
        ({"a": {"$exists": 1}}, "a.$exists", "must be true or false"),
        ({"a": {"$prefix": 1}}, "a.$prefix", "must be a string"),
        ({"a": {"$suffix": None}}, "a.$suffix", "must be a string"),
        ({"$or": []}, "$or", "non-empty list"),
        ({"$and": {"a": 1}}, "$and", "non-empty list"),
        ({"$or": [{"a": 1}, "b"]}, "$or[1]", "must be a filter object, not string"),
        ({"$not": [{"a": 1}]}, "$not", "must be a filter object, not array"),
        ({"$headers": ["x"]}, "$headers", "must be an object of header names"),
        ({"$headers": {"": 1}}, '$headers[""]', "must be a header name"),
        ({"a..b": 1}, '["a..b"]', "must not be empty"),
        ({".a": 1}, '[".a"]', "must not be empty"),
        ({"$and": [{"x": {"$in": [1]}}, {"y": {"$lt": {}}}]}, "$and[1].y.$lt", "not object"),
    ],
)
def test_invalid_filters_name_the_bad_operator(doc: Any, path: str, message: str) -> None:
    found = issues(doc)
    assert [p for p, _ in found] == [path]
    assert message in found[0][1]


def test_not_an_object() -> None:
    assert issues(["a"]) == [("", "a filter must be an object, not array")]


def test_every_problem_is_reported_at_once() -> None:
    found = issues({"a": {"$gt": None}, "$or": [], "b": {"$regex": "x"}})
    assert [p for p, _ in found] == ["a.$gt", "$or", "b.$regex"]


def test_bounds() -> None:
    deep: dict[str, Any] = {"a": 1}
    for _ in range(filters.MAX_DEPTH):
        deep = {"$not": deep}
    assert any("nests deeper" in m for _, m in issues(deep))
    parse_filter(deep["$not"])  # one level less is fine

    assert "at most 100 are allowed" in issues({"a": {"$in": list(range(101))}})[0][1]
    parse_filter({"a": {"$in": list(range(100))}})
    assert "at most 100 are allowed" in issues({"$or": [{"a": i} for i in range(101)]})[0][1]

    wide = {f"k{i}": {"$eq": i} for i in range(filters.MAX_NODES)}
    assert "nodes; at most 256" in issues(wide)[-1][1]
    big_literal = {"a": [list(range(50)) for _ in range(10)]}
    assert "nodes; at most 256" in issues(big_literal)[-1][1]

    assert "at most 16 keys" in issues({".".join("k" * 17): 1})[0][1]
    assert "longer than 1024" in issues({"a": "x" * 1025})[0][1]
    assert "longer than 1024" in issues({"a": {"$in": ["x" * 1025]}})[0][1]


def test_equal_documents_make_equal_filters() -> None:
    a = parse_filter({"a": 1, "b": {"$in": [1, 2]}})
    b = parse_filter({"b": {"$in": [1, 2]}, "a": 1})
    assert a == b
    assert hash(a) == hash(b)
    assert a != parse_filter({"a": 2})


def test_the_body_is_parsed_only_when_a_routed_endpoint_has_a_filter() -> None:
    gold = parse_filter({"$headers": {"x-tier": "gold"}})
    big = parse_filter({"amount": {"$gt": 100}})
    fs = {"gold": gold, "big": big}
    # Not JSON, never looked at: only "plain" is routed, and it has no filter.
    assert filter_endpoints(fs, ["plain"], b"\xff not json", HEADERS) == ("plain",)
    assert filter_endpoints(fs, ["big", "gold", "plain"], b'{"amount": 5}', HEADERS) == (
        "gold",
        "plain",
    )
    assert filter_endpoints(fs, ["big", "plain"], b"", {}, document={"amount": 500}) == (
        "big",
        "plain",
    )


# -- properties --------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)
keys = st.sampled_from(["a", "b", "0"])


@settings(max_examples=300, deadline=None)
@given(body=json_values, value=json_values, key=keys)
def test_negative_operators_are_exact_negations(body: Any, value: Any, key: str) -> None:
    doc = {"a": body}
    eq = parse_filter({key: {"$eq": value}}).matches(doc, {})
    assert parse_filter({key: {"$neq": value}}).matches(doc, {}) is not eq
    assert parse_filter({"$not": {key: {"$eq": value}}}).matches(doc, {}) is not eq
    member = parse_filter({key: {"$in": [value, "zz"]}}).matches(doc, {})
    assert parse_filter({key: {"$nin": [value, "zz"]}}).matches(doc, {}) is not member
    assert member is (eq or json_equal(doc.get(key, MISSING), "zz"))


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_a_value_equals_itself_and_its_json_round_trip(value: Any) -> None:
    assert json_equal(value, value)
    assert parse_filter({"a": {"$eq": value}}).matches(
        parse_body(msgspec.json.encode({"a": value})), {}
    )


@settings(max_examples=300, deadline=None)
@given(
    body=json_values,
    op=st.sampled_from(filters.OPERATORS),
    operand=json_values,
    path=st.lists(keys, min_size=1, max_size=3).map(".".join),
)
def test_evaluation_never_raises(body: Any, op: str, operand: Any, path: str) -> None:
    try:
        flt = parse_filter({path: {op: operand}})
    except FilterError:
        return
    result = flt.matches(body, {})
    assert (flt.why_not(body, {}) is None) is result


bodies = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys | st.just("c"), inner),
    max_leaves=15,
)


@settings(max_examples=400, deadline=None)
@given(
    body=bodies,
    paths=st.lists(st.lists(keys, min_size=1, max_size=3).map(".".join), min_size=1, max_size=3),
    op=st.sampled_from(filters.OPERATORS),
    operand=json_values,
)
def test_a_projected_body_filters_exactly_like_the_whole_body(
    body: Any, paths: list[str], op: str, operand: Any
) -> None:
    """``Projection`` decodes only the filters' paths: never a different verdict or reason."""
    try:
        flts = [parse_filter({path: {op: operand}}) for path in paths]
    except FilterError:
        return
    raw = msgspec.json.encode(body)
    projected, whole = Projection(flts).parse(raw), parse_body(raw)
    for flt in flts:
        assert flt.matches(projected, {}) is flt.matches(whole, {})
        assert flt.why_not(projected, {}) == flt.why_not(whole, {})


def test_a_projection_skips_what_no_filter_reads() -> None:
    flt = parse_filter({"data.object.customer": "cus_1", "type": {"$prefix": "inv"}})
    body = msgspec.json.encode(EVENT | {"type": "invoice.x", "data": {"object": {"customer": "c"}}})
    assert Projection([flt]).parse(body) == {
        "type": "invoice.x",
        "data": {"object": {"customer": "c"}},
    }
    # A list index reads its list whole; headers-only filters need no body at all.
    lines = parse_filter({"data.object.lines.0.sku": "A-1"})
    assert Projection([lines]).parse(msgspec.json.encode(EVENT)) == {
        "data": {"object": {"lines": EVENT["data"]["object"]["lines"]}}
    }
    assert Projection([parse_filter({"$headers": {"a": "b"}})]).parse(b"{}") is MISSING
    # Another shape than the paths assume: parsed whole.
    assert Projection([flt]).parse(b'{"data": "text", "n": 1}') == {"data": "text", "n": 1}
    assert Projection([flt]).parse(b"[1, 2]") == [1, 2]
    assert Projection([flt]).parse(b"not json") is MISSING
