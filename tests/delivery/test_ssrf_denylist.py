"""The SSRF deny list is a fixed table (issue 33 item 16), not ``ipaddress``'s moving one.

Each registry row's addresses are refused, the addresses just outside each
row are allowed, legacy IPv4 spellings are read as ``getaddrinfo`` reads
them, and an endpoint whose host is a denied literal is refused at config
time (file and admin documents) unless ``[delivery]`` allows it.
"""

from __future__ import annotations

import ast
import ipaddress
import logging
from pathlib import Path
from typing import Any

import pytest

import hookrouter.core.addresses as addresses_module
from hookrouter.config import parse_config
from hookrouter.config.entities import destination_policy, parse_entity_doc
from hookrouter.core.addresses import (
    IPV4_DENIED,
    IPV6_DENIED,
    DeniedRange,
    DestinationPolicy,
    denied_range,
    literal_address,
)
from hookrouter.delivery.resolver import Resolver
from hookrouter.delivery.ssrf import check_destination, refusal_reason
from hookrouter.errors import ConfigError, DestinationRefused

STRICT = DestinationPolicy()
ENDPOINT_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
ROWS = [*IPV4_DENIED, *IPV6_DENIED]


def _representatives(row: DeniedRange) -> list[str]:
    """First, second and last address of the row's network (one for a /32 or /128)."""
    net = row.network
    picks = {net.network_address, net.broadcast_address}
    if net.num_addresses > 2:
        picks.add(net.network_address + 1)
    return sorted(str(a) for a in picks)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: str(row.network))
def test_every_registry_row_is_refused_with_its_name(row: DeniedRange) -> None:
    for text in _representatives(row):
        address = ipaddress.ip_address(text)
        found = denied_range(address)
        assert found is not None, text
        # A more specific row may name it (2001::/32 inside 2001::/23): never an unrelated one.
        assert found.network.subnet_of(row.network) or row.network.subnet_of(found.network)  # type: ignore[arg-type]
        with pytest.raises(DestinationRefused) as err:
            check_destination("hooks.example.com", [address], STRICT)
        assert found.reference in err.value.message


@pytest.mark.parametrize("address", ["192.0.0.8", "192.0.0.100", "fec0::1"])
def test_the_addresses_from_the_issue_are_refused(address: str) -> None:
    # Python 3.11.7's is_global calls these public; the table does not.
    with pytest.raises(DestinationRefused):
        check_destination("hooks.example.com", [address], STRICT)


@pytest.mark.parametrize(
    "address",
    [
        "1.0.0.1",
        "9.255.255.255",
        "11.0.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "191.255.255.255",
        "192.0.1.0",
        "192.0.3.0",
        "192.88.98.255",
        "192.88.100.0",
        "192.167.255.255",
        "192.169.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "198.51.99.255",
        "198.51.101.0",
        "203.0.112.255",
        "203.0.114.0",
        "223.255.255.255",
        "192.31.196.1",  # AS112: globally reachable in the registry
        "2000::1",
        "2001:200::",  # just after 2001::/23
        "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:db9::",
        "2003::1",
        "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "3fff:1000::",  # just after 3fff::/20
        "2606:4700::1111",
        "::ffff:8.8.8.8",  # IPv4-mapped public address
        "64:ff9b::808:808",  # NAT64 of 8.8.8.8
        "2002:808:808::1",  # 6to4 of 8.8.8.8
    ],
)
def test_addresses_just_outside_the_rows_are_allowed(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is None
    allowed = check_destination("hooks.example.com", [address], STRICT)
    assert allowed == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    ("address", "embedded"),
    [
        ("::ffff:127.0.0.1", "127.0.0.0/8"),
        ("::ffff:10.0.0.1", "10.0.0.0/8"),
        ("::ffff:192.0.0.8", "192.0.0.0/24"),
        ("::ffff:169.254.169.254", "169.254.0.0/16"),
        ("64:ff9b::c000:8", "192.0.0.0/24"),  # NAT64 of 192.0.0.8
        ("2002:c0a8:101::1", "192.168.0.0/16"),  # 6to4 of 192.168.1.1
    ],
)
def test_ipv6_forms_of_a_denied_ipv4_address_are_refused(address: str, embedded: str) -> None:
    reason = refusal_reason(ipaddress.ip_address(address))
    assert reason is not None
    assert embedded in reason
    assert "embedded in" in reason


@pytest.mark.parametrize(
    "address",
    [
        "::7f00:1",  # IPv4-compatible 127.0.0.1 (deprecated)
        "::808:808",  # IPv4-compatible of a public address: deprecated, refused anyway
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
        "64:ff9b:1::1",  # local-use translation
        "1fff::1",  # outside 2000::/3
        "4000::1",
        "5f01::",  # outside 2000::/3 as well as beside SRv6 5f00::/16
        "fe80::1%eth0",  # scoped link-local
    ],
)
def test_other_ipv6_forms_are_refused_outright(address: str) -> None:
    assert refusal_reason(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7F000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.000.000.001", "127.0.0.1"),
        ("10.0x10.1", "10.16.0.1"),
        ("0", "0.0.0.0"),
        ("[::1]", "::1"),
        ("127.0.0.1.", "127.0.0.1"),
    ],
)
def test_legacy_ipv4_spellings_are_read_as_getaddrinfo_reads_them(host: str, address: str) -> None:
    assert literal_address(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize("host", ["localhost", "08.1", "1.2.3.4.5", "256.1.1.1.1", "0x1g", "a.1"])
def test_names_are_not_read_as_addresses(host: str) -> None:
    assert literal_address(host) is None


async def test_resolver_refuses_legacy_spellings_without_a_lookup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    resolver = Resolver(STRICT)
    with caplog.at_level(logging.WARNING, logger="hookrouter.delivery.resolver"):
        for host in ("2130706433", "0x7f.1", "0251.0376.0251.0376"):
            with pytest.raises(DestinationRefused):
                await resolver.resolve(host, 80)
    assert resolver.stats().lookups == 0
    assert sum("SSRF guard" in r.getMessage() for r in caplog.records) == 3
    assert "metadata" in caplog.records[-1].getMessage()


def _config(url: str, **delivery: Any) -> dict[str, Any]:
    return {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"path": "./data"},
        "admin": {"token": "admin-token-123"},
        "delivery": delivery,
        "tenants": [{"id": "acme"}],
        "endpoints": [{"id": "e1", "tenant": "acme", "url": url, "secret": ENDPOINT_SECRET}],
    }


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:6379/",
        "http://169.254.169.254/latest/meta-data/",
        "https://[::1]/hook",
        "https://[::ffff:10.0.0.1]/hook",
        "http://192.0.0.8/",
        "http://[fec0::1]/",
        "http://2130706433/",
        "http://0x7f.1/",
    ],
)
def test_config_refuses_an_endpoint_at_a_denied_literal(url: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_config(url))
    [issue] = err.value.issues
    assert issue.path == "endpoints[0].url"
    assert "allow_private_networks" in issue.message
    assert "RFC" in issue.message


def test_config_accepts_denied_literals_the_delivery_settings_allow() -> None:
    assert parse_config(_config("http://127.0.0.1:9/", allow_private_networks=True))
    assert parse_config(_config("http://10.1.2.3/", allowlist=["10.0.0.0/8"]))
    assert parse_config(_config("http://0x0a.1/", allowlist=["10.0.0.0/8"]))
    # Names are judged when they resolve, at delivery: config cannot know their address.
    assert parse_config(_config("https://internal.example/"))
    assert parse_config(_config("https://93.184.215.14/"))


def test_config_reports_an_invalid_allowlist_entry() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_config("https://hooks.example.com/", allowlist=["10.0.0.0/33"]))
    assert [i.path for i in err.value.issues] == ["delivery.allowlist[0]"]


def test_admin_documents_are_checked_against_the_delivery_policy() -> None:
    doc = {"id": "e", "tenant": "acme", "url": "http://10.0.0.5/", "secret": ENDPOINT_SECRET}
    strict = destination_policy(parse_config(_config("https://x.example/")).delivery)
    with pytest.raises(ConfigError) as err:
        parse_entity_doc("endpoint", doc, destinations=strict)
    assert "private-use" in err.value.issues[0].message
    allowing = destination_policy(
        parse_config(_config("https://x.example/", allow_private_networks=True)).delivery
    )
    assert parse_entity_doc("endpoint", doc, destinations=allowing).id == "e"
    # Without a policy (re-validating stored documents at start) nothing is refused.
    assert parse_entity_doc("endpoint", doc).id == "e"


def test_the_deny_list_does_not_consult_ipaddress_tables() -> None:
    """The decision reads only the table: no is_global / is_private / is_reserved."""
    source = Path(addresses_module.__file__).read_text()
    attributes = {
        node.attr for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute)
    }
    consulted = attributes & {
        "is_global",
        "is_private",
        "is_reserved",
        "is_loopback",
        "is_link_local",
        "is_multicast",
        "is_site_local",
        "is_unspecified",
    }
    assert not consulted
    for row in ROWS:
        assert row.name
        assert row.reference.startswith(("RFC ", "IANA "))
