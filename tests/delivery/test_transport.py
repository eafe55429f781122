"""The outbound transport against real HTTP(S) receivers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.support.cyclic_garbage import cyclic_garbage
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver, ThrowawayCA

from hookrouter.clock import ManualClock
from hookrouter.delivery.transport import HttpTransport, Origin
from hookrouter.errors import DeliveryError

from .conftest import StartReceiver

JSON = [("content-type", "application/json")]


def origin(port: int, *, tls: bool = False, host: str = "127.0.0.1") -> Origin:
    return Origin("https" if tls else "http", host, port, "127.0.0.1")


async def post(t: HttpTransport, o: Origin, body: bytes = b"{}", limit: float = 2.0):  # type: ignore[no-untyped-def]
    return await t.request(o, "POST", "/hooks/in", JSON, body, total_timeout=limit)


async def test_keep_alive_reuses_one_connection(receivers: StartReceiver) -> None:
    r = await receivers()
    t = HttpTransport()
    for i in range(5):
        resp = await post(t, origin(r.port), f'{{"n":{i}}}'.encode())
        assert resp.status == 200 and resp.body == b"ok"
    assert r.connections == 1, "keep-alive must reuse the connection"
    assert [q.body for q in r.requests] == [f'{{"n":{i}}}'.encode() for i in range(5)]
    assert r.requests[0].headers["host"] == f"127.0.0.1:{r.port}"
    assert r.requests[0].headers["content-type"] == "application/json"
    assert t.stats().reused == 4 and t.stats().connections_opened == 1
    await t.aclose()


def test_origins_are_equal_by_value_and_spell_their_host_header() -> None:
    # Pools are keyed by origin: an origin built again after a re-resolution
    # must find its pool, and any differing field must not.
    a = Origin("http", "hooks.example", 8080, "192.0.2.7")
    assert a == Origin("http", "hooks.example", 8080, "192.0.2.7")
    assert hash(a) == hash(Origin("http", "hooks.example", 8080, "192.0.2.7"))
    others = [
        Origin("https", "hooks.example", 8080, "192.0.2.7"),
        Origin("http", "other.example", 8080, "192.0.2.7"),
        Origin("http", "hooks.example", 8081, "192.0.2.7"),
        Origin("http", "hooks.example", 8080, "192.0.2.8"),
    ]
    assert all(a != o for o in others)
    assert len({a, *others}) == 5
    assert a != ("http", "hooks.example", 8080, "192.0.2.7")
    assert a.host_header == "hooks.example:8080"
    assert Origin("https", "hooks.example", 443, "192.0.2.7").host_header == "hooks.example"
    assert Origin("http", "::1", 80, "::1").host_header == "[::1]"
    assert Origin("http", "::1", 8080, "::1").host_header == "[::1]:8080"


async def test_pool_limit_per_origin_caps_connections(receivers: StartReceiver) -> None:
    r = await receivers()
    t = HttpTransport(max_connections_per_origin=3)
    results = await asyncio.gather(*(post(t, origin(r.port)) for _ in range(20)))
    assert all(x.status == 200 for x in results)
    assert r.connections <= 3 and len(r.requests) == 20
    await t.aclose()


async def test_timeout_when_server_never_answers(receivers: StartReceiver) -> None:
    r = await receivers(lambda req: Reply(hang=req.body == b"hang"))
    t = HttpTransport()
    with pytest.raises(DeliveryError) as err:
        await post(t, origin(r.port), b"hang", limit=0.15)
    assert err.value.reason == "timeout"
    resp = await post(t, origin(r.port), b"fine")
    assert resp.status == 200
    assert r.connections == 2, "a timed-out connection must not be reused"
    await t.aclose()


async def test_each_request_on_a_kept_alive_connection_has_its_own_deadline(
    receivers: StartReceiver,
) -> None:
    """The connection's one timer follows the deadline of the request in progress."""
    r = await receivers(
        lambda req: Reply(hang=req.body == b"hang", delay=0.3 if req.body == b"slow" else 0.0)
    )
    t = HttpTransport()
    loop = asyncio.get_running_loop()
    # A long deadline first (the timer is armed for it), then a shorter one on
    # the same connection: it must fire at the shorter one, not 5 s later.
    assert (await post(t, origin(r.port), b"fast", limit=5.0)).status == 200
    started = loop.time()
    with pytest.raises(DeliveryError) as err:
        await post(t, origin(r.port), b"hang", limit=0.2)
    assert err.value.reason == "timeout"
    # uvloop's clock has millisecond steps: a timer due at +0.2 s may read as 0.1999...
    assert 0.195 <= loop.time() - started < 1.0
    # A short deadline first, then a longer one: the early timer must not end
    # the later request, which answers after 0.3 s, inside its 2 s.
    assert (await post(t, origin(r.port), b"fast", limit=0.1)).status == 200
    assert (await post(t, origin(r.port), b"slow", limit=2.0)).status == 200
    assert r.connections == 2, "the timed-out connection alone was replaced"
    await t.aclose()


async def test_pool_wait_is_bounded_by_the_deadline(receivers: StartReceiver) -> None:
    r = await receivers(lambda req: Reply(hang=True))
    t = HttpTransport(max_connections_per_origin=1)
    first = asyncio.ensure_future(post(t, origin(r.port), limit=1.0))
    await asyncio.sleep(0.05)  # let the first request take the only connection
    with pytest.raises(DeliveryError) as err:
        await post(t, origin(r.port), limit=0.1)
    assert err.value.reason == "pool_timeout"
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert t.stats().open_connections == 0
    await t.aclose()


async def test_a_request_is_never_written_after_its_deadline() -> None:
    # The process stalls (SIGSTOP, a long pause) while an attempt waits for
    # the origin's only connection; the connection frees and the deadline
    # passes meanwhile. On resume the freed connection must not carry the
    # late request: in cluster mode the attempt's lease may be gone.
    with ThreadedReceiver(lambda req: Reply(delay=0.05)) as r:
        t = HttpTransport(max_connections_per_origin=1)
        o = origin(r.port)
        first = asyncio.ensure_future(post(t, o, b'{"n":1}', limit=2.0))
        while not r.receiver.requests:  # noqa: ASYNC110 (the receiver has a thread of its own)
            await asyncio.sleep(0.005)
        second = asyncio.ensure_future(post(t, o, b'{"n":2}', limit=0.2))
        await asyncio.sleep(0)  # the second now waits for the connection
        # The stall, on purpose: the first's answer (50 ms, from the receiver's
        # own thread) arrives, the second's deadline passes. Long enough that
        # a loaded machine still answers the first inside it.
        time.sleep(1.0)  # noqa: ASYNC251
        assert (await first).status == 200
        with pytest.raises(DeliveryError) as err:
            await second
        assert err.value.reason == "timeout"
        await asyncio.sleep(0.2)
        assert [q.body for q in r.receiver.requests] == [b'{"n":1}']
        assert t.stats().open_connections == 1  # the unused connection stays pooled
        await t.aclose()


async def test_body_is_capped_and_connection_dropped(receivers: StartReceiver) -> None:
    r = await receivers(lambda req: Reply(status=500, body=b"e" * 300_000))
    t = HttpTransport(body_cap=1024)
    resp = await post(t, origin(r.port))
    assert resp.status == 500 and resp.truncated and len(resp.body) == 1024
    await post(t, origin(r.port))
    assert r.connections == 2
    await t.aclose()


async def test_redirects_are_not_followed(receivers: StartReceiver) -> None:
    r = await receivers(
        lambda req: Reply(status=302, body=b"", headers=[("location", "http://127.0.0.1:1/x")])
    )
    t = HttpTransport()
    resp = await post(t, origin(r.port))
    assert resp.status == 302 and resp.headers["location"] == "http://127.0.0.1:1/x"
    assert len(r.requests) == 1
    await t.aclose()


async def test_connection_close_is_honoured(receivers: StartReceiver) -> None:
    r = await receivers(lambda req: Reply(close=True))
    t = HttpTransport()
    await post(t, origin(r.port))
    await post(t, origin(r.port))
    assert r.connections == 2
    await t.aclose()


async def test_close_delimited_and_retry_after_headers(receivers: StartReceiver) -> None:
    raw = b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\n\r\ncome back later"
    r = await receivers(lambda req: Reply(raw=raw, close_after_raw=True))
    t = HttpTransport()
    resp = await post(t, origin(r.port))
    assert (resp.status, resp.body, resp.headers["retry-after"]) == (503, b"come back later", "7")
    await t.aclose()


async def test_stale_pooled_connection_is_skipped_without_resending(
    receivers: StartReceiver,
) -> None:
    r = await receivers()
    t = HttpTransport()
    await post(t, origin(r.port))
    r.drop_idle_connections()  # the server's keep-alive timeout fires
    await asyncio.sleep(0.02)  # the FIN reaches our idle connection
    resp = await post(t, origin(r.port))
    assert resp.status == 200
    assert len(r.requests) == 2, "the request is sent exactly once"
    assert r.connections == 2 and t.stats().stale_skipped == 1
    await t.aclose()


async def test_many_receiver_hosts_hold_at_most_max_idle_connections(
    receivers: StartReceiver,
) -> None:
    """Customers each running their own receiver must not cost an idle socket each.

    Without the cap, 40 hosts served one after the other leave 40 keep-alive
    connections open: with thousands of tenants that exhausts descriptors.
    """
    r = await receivers()
    clock = ManualClock()
    t = HttpTransport(max_idle=4, clock=clock)
    hosts = [origin(r.port, host=f"receiver-{i}.customers.test") for i in range(40)]
    for o in hosts:
        assert (await post(t, o)).status == 200
    await asyncio.sleep(0.05)  # the receiver sees the closes
    assert t.stats().open_connections == t.stats().idle_connections == 4
    assert len(r.open) == 4 and r.connections == 40
    assert t.stats().evicted == 36
    # The hosts served last keep theirs: the one idle longest went first.
    assert (await post(t, hosts[-1])).status == 200
    assert r.connections == 40 and t.stats().reused == 1
    # Past the idle timeout the sweep closes them and forgets their pools.
    clock.advance(2.0)
    assert t.sweep() == 4
    assert t.stats().open_connections == 0 and t.stats().origins == 0
    await t.aclose()


async def test_concurrent_requests_beyond_the_cap_still_complete(receivers: StartReceiver) -> None:
    """The cap is on idle connections: requests in flight are never refused a socket."""
    r = await receivers()
    t = HttpTransport(max_idle=2)
    hosts = [origin(r.port, host=f"h{i}.customers.test") for i in range(6)]
    results = await asyncio.gather(*(post(t, o) for o in hosts for _ in range(3)))
    assert all(x.status == 200 for x in results) and len(r.requests) == 18
    # All 18 were in flight at once; once done, two stay idle.
    assert t.stats().connections_opened == 18
    assert t.stats().open_connections == t.stats().idle_connections == 2
    await t.aclose()


async def test_a_busy_pool_over_a_few_hosts_keeps_reusing_its_connections(
    receivers: StartReceiver,
) -> None:
    """Capping idle (not open) connections: rounds of in-flight work open no new ones."""
    r = await receivers()
    t = HttpTransport(max_idle=6)
    hosts = [origin(r.port, host=f"busy{i}.customers.test") for i in range(3)]
    for _ in range(4):
        results = await asyncio.gather(*(post(t, o) for o in hosts for _ in range(2)))
        assert all(x.status == 200 for x in results)
    assert t.stats().connections_opened == 6 and r.connections == 6
    await t.aclose()


async def test_connections_idle_too_long_are_not_reused(receivers: StartReceiver) -> None:
    r = await receivers()
    clock = ManualClock()
    t = HttpTransport(idle_timeout=1.5, clock=clock)
    await post(t, origin(r.port))
    clock.advance(1.0)
    await post(t, origin(r.port))
    assert r.connections == 1
    clock.advance(1.6)
    await post(t, origin(r.port))
    assert r.connections == 2
    clock.advance(2.0)
    assert t.sweep() == 1 and t.stats().open_connections == 0
    await t.aclose()


async def test_connection_refused_and_mid_response_close(receivers: StartReceiver) -> None:
    t = HttpTransport()
    r = await receivers()
    port = r.port
    await r.stop()
    with pytest.raises(DeliveryError) as err:
        await post(t, origin(port))
    assert err.value.reason == "connect_refused"
    half = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"
    r2 = await receivers(lambda req: Reply(raw=half, close_after_raw=True))
    with pytest.raises(DeliveryError) as err2:
        await post(t, origin(r2.port))
    assert err2.value.reason == "connection_closed"
    r3 = await receivers(lambda req: Reply(raw=b"SPDY/9 banana\r\n\r\n"))
    with pytest.raises(DeliveryError) as err3:
        await post(t, origin(r3.port))
    assert err3.value.reason == "bad_response"
    await t.aclose()


async def test_a_switch_of_protocols_fails_the_attempt_not_the_transport(
    receivers: StartReceiver,
) -> None:
    """101 + Upgrade once escaped the parser's handling as an asyncio fatal transport error."""
    upgrade = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    answers = iter([Reply(raw=upgrade), Reply(status=200)])
    r = await receivers(lambda req: next(answers))
    t = HttpTransport()
    with pytest.raises(DeliveryError) as err:
        await post(t, origin(r.port))
    assert err.value.reason == "bad_response"
    assert "switched protocols" in err.value.message
    assert (await post(t, origin(r.port))).status == 200  # a fresh connection, all well
    await t.aclose()


async def test_header_injection_never_reaches_the_wire(receivers: StartReceiver) -> None:
    r = await receivers()
    t = HttpTransport()
    with pytest.raises(DeliveryError) as err:
        await t.request(
            origin(r.port), "POST", "/", [("x-id", "a\r\nx-evil: 1")], b"", total_timeout=1
        )
    assert err.value.reason == "bad_request" and r.requests == []
    assert (await post(t, origin(r.port))).status == 200
    await t.aclose()


async def test_https_with_verified_certificate(
    receivers: StartReceiver, test_ca: ThrowawayCA
) -> None:
    seen: list[Received] = []

    def handler(req: Received) -> Reply:
        seen.append(req)
        return Reply(status=204, body=b"")

    r = await receivers(handler, tls=test_ca)
    t = HttpTransport(ssl_context=test_ca.client_context())
    for _ in range(3):
        resp = await post(t, origin(r.port, tls=True, host="localhost"))
        assert resp.status == 204
    assert r.connections == 1
    assert seen[0].headers["host"] == f"localhost:{r.port}"
    await t.aclose()


async def test_tls_verification_failure_is_a_clear_error(
    receivers: StartReceiver, test_ca: ThrowawayCA
) -> None:
    r = await receivers(tls=test_ca)
    untrusting = HttpTransport()  # system CAs only: our test CA is unknown
    with pytest.raises(DeliveryError) as err:
        await post(untrusting, origin(r.port, tls=True, host="localhost"))
    assert err.value.reason == "tls_verify_failed"
    assert "certificate" in err.value.message and "localhost" in err.value.message
    trusting = HttpTransport(ssl_context=test_ca.client_context())
    with pytest.raises(DeliveryError) as wrong:  # the cert does not name this host
        await post(trusting, origin(r.port, tls=True, host="wrong.example"))
    assert wrong.value.reason == "tls_verify_failed"
    assert r.requests == []
    await untrusting.aclose()
    await trusting.aclose()


async def test_a_timed_out_request_is_reset_not_closed() -> None:
    """Its bytes must not be left to the kernel to retransmit after the attempt ended.

    Over a link that is down, a plain close leaves the unacknowledged request
    in the kernel, which sends it when the link returns: late, and past the
    sender's lease in a cluster. A reset drops it. Here (loopback) the request
    has arrived; what the receiver then sees is a reset, not an orderly close.
    """
    timed_out = asyncio.Event()
    seen: list[object] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await timed_out.wait()  # answer nothing until the attempt gave up
        try:
            while await asyncio.wait_for(reader.read(65536), 2.0):
                pass
            seen.append("orderly close")
        except ConnectionResetError:
            seen.append("reset")
        except TimeoutError:
            seen.append("still open")
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    t = HttpTransport()
    with pytest.raises(DeliveryError) as err:
        await post(t, origin(port), b"{}", limit=0.2)
    assert err.value.reason == "timeout"
    timed_out.set()
    for _ in range(300):
        if seen:
            break
        await asyncio.sleep(0.01)
    await t.aclose()
    server.close()
    assert seen == ["reset"]


async def test_closed_connections_leave_nothing_for_the_cyclic_collector(
    receivers: StartReceiver,
) -> None:
    # Close-delimited, so llhttp parses it (the one-call C parser takes only
    # whole answers with a length): the parser holds the connection's
    # callbacks, a cycle unless the closed connection lets go of it.
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nclose-delimited"
    r = await receivers(lambda req: Reply(raw=raw, close_after_raw=True))
    t = HttpTransport()
    with cyclic_garbage() as garbage:
        bodies = [(await post(t, origin(r.port))).body for _ in range(10)]
        await t.aclose()
        await asyncio.sleep(0.01)  # the last connection_lost runs a loop turn later
    assert bodies == [b"close-delimited"] * 10 and r.connections == 10
    assert garbage["ClientConnection"] == 0, garbage
    assert garbage["HttpResponseParser"] == 0, garbage
