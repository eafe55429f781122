"""SSRF guard: private, loopback, link-local and metadata destinations are refused."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from hookrouter.clock import ManualClock
from hookrouter.delivery.resolver import Resolver
from hookrouter.delivery.ssrf import DestinationPolicy, check_destination, refusal_reason
from hookrouter.errors import DeliveryError, DestinationRefused

STRICT = DestinationPolicy()


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "169.254.1.1",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "ff02::1",
        "100.64.0.1",  # CGNAT
        "240.0.0.1",
        "255.255.255.255",
        "::ffff:127.0.0.1",  # IPv4-mapped loopback
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "198.18.0.1",
        "192.0.2.1",
        "2001:db8::1",
    ],
)
def test_non_public_addresses_are_refused(address: str) -> None:
    with pytest.raises(DestinationRefused) as err:
        check_destination("hooks.example.com", [address], STRICT)
    assert "allow_private_networks" in err.value.message
    assert err.value.reason == "destination_refused"


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert check_destination("hooks.example.com", [address], STRICT) == ip_address(address)
    assert refusal_reason(ip_address(address)) is None


def test_reason_names_the_metadata_address() -> None:
    with pytest.raises(DestinationRefused) as err:
        check_destination("evil.example", ["169.254.169.254"], STRICT)
    assert "metadata" in err.value.message


def test_one_private_answer_refuses_the_whole_name() -> None:
    with pytest.raises(DestinationRefused):
        check_destination("mixed.example", ["93.184.215.14", "10.0.0.7"], STRICT)


def test_allow_private_networks_switch() -> None:
    policy = DestinationPolicy(allow_private_networks=True)
    assert str(check_destination("localhost", ["127.0.0.1"], policy)) == "127.0.0.1"


def test_allowlist_by_cidr_and_by_host() -> None:
    policy, issues = DestinationPolicy.parse(
        False, ["10.20.0.0/16", "*.svc.internal", "billing.local", "not a cidr/x"], "delivery.allow"
    )
    assert [i.path for i in issues] == ["delivery.allow[3]"]
    assert str(check_destination("db.example", ["10.20.3.4"], policy)) == "10.20.3.4"
    with pytest.raises(DestinationRefused):
        check_destination("db.example", ["10.21.0.1"], policy)
    assert str(check_destination("api.svc.internal", ["10.9.9.9"], policy)) == "10.9.9.9"
    assert str(check_destination("BILLING.local.", ["192.168.0.2"], policy)) == "192.168.0.2"
    with pytest.raises(DestinationRefused):
        check_destination("svc.internal.evil.example", ["10.9.9.9"], policy)


async def test_resolver_refuses_a_name_resolving_to_loopback() -> None:
    resolver = Resolver(STRICT)
    with pytest.raises(DestinationRefused) as err:
        await resolver.resolve("localhost", 443)
    assert "loopback" in err.value.message
    with pytest.raises(DestinationRefused):  # cached verdict, no second lookup
        await resolver.resolve("LOCALHOST", 443)
    s = resolver.stats()
    assert (s.lookups, s.hits, s.refusals) == (1, 1, 1)


async def test_resolver_literal_ips_and_allowed_names() -> None:
    with pytest.raises(DestinationRefused):
        await Resolver(STRICT).resolve("[::1]", 80)
    with pytest.raises(DestinationRefused):
        await Resolver(STRICT).resolve("169.254.169.254", 80)
    open_policy = DestinationPolicy(allow_private_networks=True)
    address = await Resolver(open_policy).resolve("localhost", 80)
    assert address.is_loopback


async def test_resolver_cache_expires_with_the_clock() -> None:
    clock = ManualClock()
    resolver = Resolver(DestinationPolicy(allow_private_networks=True), ttl=30, clock=clock)
    await resolver.resolve("localhost", 80)
    await resolver.resolve("localhost", 80)
    clock.advance(31)
    await resolver.resolve("localhost", 80)
    assert resolver.stats().lookups == 2


async def test_resolver_lets_go_of_expired_verdicts() -> None:
    """A router running for months resolves ever new names: only live verdicts stay."""
    clock = ManualClock()
    resolver = Resolver(DestinationPolicy(allow_private_networks=True), ttl=30, clock=clock)
    for i in range(3_000):
        await resolver.resolve(f"127.0.{i // 250}.{i % 250 + 1}", 80)
        clock.advance(1)
    assert resolver.stats().cached <= 31
    assert resolver.stats().evicted == 0


async def test_resolver_holds_at_most_max_entries_and_keeps_the_newest() -> None:
    """A tenant cycling its endpoint through new names cannot grow the cache past its cap."""
    clock = ManualClock()
    policy = DestinationPolicy(allow_private_networks=True)
    resolver = Resolver(policy, ttl=30, clock=clock, max_entries=100)
    hosts = [f"127.1.{i // 250}.{i % 250 + 1}" for i in range(1_000)]
    for host in hosts:
        await resolver.resolve(host, 80)
    assert resolver.stats().cached == 100
    assert resolver.stats().evicted == 900
    assert resolver.cached(hosts[-1], 80) is not None  # the newest are the ones kept
    assert resolver.cached(hosts[0], 80) is None


async def test_resolver_restores_a_name_at_the_back_when_looked_up_again() -> None:
    clock = ManualClock()
    policy = DestinationPolicy(allow_private_networks=True)
    resolver = Resolver(policy, ttl=30, clock=clock, max_entries=2)
    await resolver.resolve("127.0.0.1", 80)
    await resolver.resolve("127.0.0.2", 80)
    clock.advance(31)
    await resolver.resolve("127.0.0.1", 80)  # expired: stored again, now the newest
    await resolver.resolve("127.0.0.3", 80)  # drops 127.0.0.2 (expired), not 127.0.0.1
    assert resolver.cached("127.0.0.1", 80) is not None
    assert resolver.stats().evicted == 0


async def test_resolver_dns_failure_is_a_retryable_delivery_error() -> None:
    resolver = Resolver(STRICT)
    with pytest.raises(DeliveryError) as err:
        await resolver.resolve("no-such-host.invalid", 443)
    assert err.value.reason == "dns_failure"
    assert not isinstance(err.value, DestinationRefused)
