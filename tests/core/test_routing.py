"""Endpoint routing by event type filters."""

from __future__ import annotations

from hookrouter.core.filters import parse_filter
from hookrouter.core.routing import MEMO_LIMIT, Route, RoutingTable


def table() -> RoutingTable:
    return RoutingTable(
        [
            Route("ep-all", "acme"),
            Route("ep-invoices", "acme", ("invoice.*",)),
            Route("ep-created", "acme", ("*.created", "customer.deleted")),
            Route("ep-off", "acme", None, enabled=False),
            Route("ep-other", "globex"),
        ]
    )


def test_unfiltered_endpoint_gets_every_event_of_its_tenant_only() -> None:
    routes = table()
    assert routes.match("acme", "anything") == ("ep-all",)
    assert routes.match("globex", "invoice.paid") == ("ep-other",)
    assert routes.match("nobody", "invoice.paid") == ()


def test_globs_match_whole_type_including_dots() -> None:
    routes = table()
    assert routes.match("acme", "invoice.paid") == ("ep-all", "ep-invoices")
    assert routes.match("acme", "invoice.payment.failed") == ("ep-all", "ep-invoices")
    assert routes.match("acme", "customer.created") == ("ep-all", "ep-created")
    assert routes.match("acme", "customer.deleted") == ("ep-all", "ep-created")
    assert routes.match("acme", "xinvoice.paid") == ("ep-all",)


def test_regex_metacharacters_in_filters_are_literal() -> None:
    routes = RoutingTable([Route("ep", "t", ("a+b.(c)",))])
    assert routes.match("t", "a+b.(c)") == ("ep",)
    assert routes.match("t", "aab.(c)") == ()


def test_untyped_event_reaches_only_unfiltered_endpoints() -> None:
    assert table().match("acme", None) == ("ep-all",)


def test_disabled_endpoint_receives_nothing() -> None:
    assert "ep-off" not in table().match("acme", "x")


def test_memo_is_bounded_against_invented_types() -> None:
    routes = table()
    for i in range(MEMO_LIMIT + 500):
        routes.match("acme", f"type-{i}")
    assert len(routes._memo) == MEMO_LIMIT
    assert routes.match("acme", "invoice.new") == ("ep-all", "ep-invoices")


def test_content_filters_apply_after_the_type_match() -> None:
    big = parse_filter({"amount": {"$gte": 100}})
    routes = RoutingTable(
        [
            Route("ep-all", "acme"),
            Route("ep-big", "acme", ("invoice.*",), filter=big),
            Route("ep-off", "acme", None, enabled=False, filter=big),
        ]
    )
    assert routes.route("acme", "invoice.paid", b'{"amount": 500}', {}) == ("ep-all", "ep-big")
    assert routes.route("acme", "invoice.paid", b'{"amount": 5}', {}) == ("ep-all",)
    assert routes.route("acme", "user.created", b'{"amount": 500}', {}) == ("ep-all",)
    assert routes.route("acme", "invoice.paid", b"", {}, {"amount": 100}) == ("ep-all", "ep-big")
    assert routes.filter_of("acme", "ep-big") is big
    assert routes.filter_of("acme", "ep-off") is None  # disabled: routing holds no filter
    # Replacing the tenant's routes drops the filter with the endpoint.
    routes.replace_tenant("acme", [Route("ep-big", "acme", ("invoice.*",))])
    assert routes.route("acme", "invoice.paid", b'{"amount": 5}', {}) == ("ep-big",)
    assert routes.filter_of("acme", "ep-big") is None


def test_tenants_beyond_the_memo_limit_keep_their_answer() -> None:
    # Endpoints that take every type: the answer is fixed, so no memo entry is
    # made, and the tenants past MEMO_LIMIT are not matched again per event.
    count = MEMO_LIMIT + 50
    table = RoutingTable(Route(f"e{i}", f"t{i}") for i in range(count))
    for i in range(count):
        assert table.match(f"t{i}", "invoice.paid") == (f"e{i}",)
    last = f"t{count - 1}"
    assert table.match(last, None) is table.match(last, "charge.failed")
    assert not table._memo, "plain tenants take no memo entries"


def test_a_tenant_moves_between_plain_and_filtered_routes() -> None:
    table = RoutingTable([Route("a", "t1"), Route("b", "t1")])
    assert table.match("t1", "invoice.paid") == ("a", "b")
    table.replace_tenant("t1", [Route("a", "t1", ("invoice.*",)), Route("b", "t1")])
    assert table.match("t1", "invoice.paid") == ("a", "b")
    assert table.match("t1", "charge.failed") == ("b",)
    assert table.match("t1", None) == ("b",)
    table.replace_tenant("t1", [Route("b", "t1"), Route("c", "t1", enabled=False)])
    assert table.match("t1", "charge.failed") == ("b",)
    table.replace_tenant("t1", [])
    assert table.match("t1", "invoice.paid") == ()
    assert "tenants=0" in repr(table)
