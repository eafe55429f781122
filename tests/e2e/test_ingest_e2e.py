"""The ingest path end to end: a real router process, real sockets, real SDK signatures."""

from __future__ import annotations

import base64
import gzip
import socket
import time
import uuid
from pathlib import Path

import orjson
from tests.e2e.conftest import standard_event, stripe_event
from tests.support.router import RouterProcess, base_config

GZIP = {"Content-Encoding": "gzip"}


def uid() -> str:
    return "evt_" + uuid.uuid4().hex


def test_stripe_signed_event_is_acknowledged_and_visible(router: RouterProcess) -> None:
    body, headers = stripe_event(uid(), "invoice.paid")
    status, ack = router.post("acme-stripe", body, headers)
    assert status == 200
    assert ack["id"].startswith("evt_") and ack["duplicate"] is False

    status, event = router.admin("GET", f"/events/{ack['id']}")
    assert status == 200
    assert event["source"] == "acme-stripe"
    assert event["tenant"] == "acme"
    assert event["type"] == "invoice.paid"
    assert event["status"] == "pending"
    assert abs(event["received_at"] - time.time()) < 60
    assert [d["endpoint"] for d in event["deliveries"]] == ["acme-invoices"]
    assert event["deliveries"][0]["attempts"] >= 0


def test_standard_webhooks_signed_event_is_acknowledged(router: RouterProcess) -> None:
    body, headers = standard_event("msg_" + uuid.uuid4().hex)
    status, ack = router.post("globex-std", body, headers)
    assert status == 200
    status, event = router.admin("GET", f"/events/{ack['id']}?body=true")
    assert event["type"] == "user.created"
    assert orjson.loads(__import__("base64").b64decode(event["body_base64"])) == {
        "type": "user.created",
        "data": {"user": 1},
    }


def test_event_type_filter_decides_fan_out(router: RouterProcess) -> None:
    body, headers = stripe_event(uid(), "customer.created")
    _, ack = router.post("acme-stripe", body, headers)
    _, event = router.admin("GET", f"/events/{ack['id']}")
    assert event["deliveries"] == []
    assert event["status"] == "unrouted"


def test_duplicate_provider_event_is_stored_once(router: RouterProcess) -> None:
    event_id = uid()
    first = router.post("acme-stripe", *stripe_event(event_id))
    # The provider retries: same event id, a new signature and timestamp.
    second = router.post("acme-stripe", *stripe_event(event_id, ts=int(time.time()) - 5))
    assert first[0] == second[0] == 200
    assert second[1] == {"id": first[1]["id"], "duplicate": True}
    _, listing = router.admin("GET", "/events?tenant=acme")
    assert [e["id"] for e in listing["data"]].count(first[1]["id"]) == 1
    assert len(listing["data"]) == 1


def test_rejections_carry_precise_statuses_and_json_reasons(router: RouterProcess) -> None:
    body, headers = stripe_event(uid())
    cases = {
        "unknown source": (router.post("nope", body, headers), 404, "unknown_source"),
        "wrong secret": (
            router.post("acme-stripe", *stripe_event(uid(), secret="whsec_wrong")),
            401,
            "bad_signature",
        ),
        "tampered body": (
            router.post("acme-stripe", body.replace(b"100", b"999"), headers),
            401,
            "bad_signature",
        ),
        "stale timestamp": (
            router.post("acme-stripe", *stripe_event(uid(), ts=int(time.time()) - 3600)),
            401,
            "stale_timestamp",
        ),
        "missing signature": (
            router.post("acme-stripe", body, {"Content-Type": "application/json"}),
            401,
            "missing_signature",
        ),
    }
    for name, ((status, data), want_status, want_reason) in cases.items():
        assert (status, data["error"]) == (want_status, want_reason), name
        assert "Traceback" not in data["message"]
    _, listing = router.admin("GET", "/events")
    assert listing["data"] == []  # nothing rejected was stored


def test_get_on_ingest_is_405_with_allow(router: RouterProcess) -> None:
    status, headers, _ = router.request("GET", "/in/acme-stripe")
    assert status == 405
    assert headers["allow"] == "POST"


def test_body_over_limit_is_413(router: RouterProcess) -> None:
    big = b"x" * 70_000  # the e2e config caps bodies at 64 KiB
    status, _, data = router.request("POST", "/in/acme-stripe", big)
    assert status == 413
    assert orjson.loads(data)["error"] == "body_too_large"


def test_encoded_bodies_are_decoded_or_refused_with_a_reason(router: RouterProcess) -> None:
    body, headers = stripe_event(uid())
    status, ack = router.post("acme-stripe", gzip.compress(body), {**headers, **GZIP})
    assert status == 200, ack
    _, kept = router.admin("GET", f"/events/{ack['id']}?body=true")
    assert base64.b64decode(kept["body_base64"]) == body

    status, answer_headers, data = router.request(
        "POST", "/in/acme-stripe", body, {**headers, "Content-Encoding": "br"}
    )
    assert (status, orjson.loads(data)["error"]) == (415, "unsupported_content_encoding")
    assert answer_headers["accept-encoding"] == "gzip, deflate"

    # A 16 KB bomb inflating past the 64 KiB limit, and bytes that are not gzip at all.
    bomb = gzip.compress(bytes(16 * 1024 * 1024))
    status, _, data = router.request("POST", "/in/acme-stripe", bomb, {**headers, **GZIP})
    assert (status, orjson.loads(data)["error"]) == (413, "body_too_large")
    status, _, data = router.request("POST", "/in/acme-stripe", body, {**headers, **GZIP})
    assert (status, orjson.loads(data)["error"]) == (400, "bad_content_encoding")

    _, listing = router.admin("GET", "/events")
    assert [e["id"] for e in listing["data"]] == [ack["id"]]  # only the good one stored
    assert router.proc is not None and router.proc.poll() is None


def test_a_compressing_transfer_coding_is_501_then_closed(router: RouterProcess) -> None:
    body, headers = stripe_event(uid())
    packed = gzip.compress(body)
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    reply = router.raw(
        b"POST /in/acme-stripe HTTP/1.1\r\nHost: x\r\n"
        + head.encode()
        + b"Transfer-Encoding: gzip, chunked\r\n\r\n"
        + b"%x\r\n" % len(packed)
        + packed
        + b"\r\n0\r\n\r\n"
    )
    assert reply.startswith(b"HTTP/1.1 501 ")
    assert b'"error":"unsupported_transfer_encoding"' in reply
    assert b"connection: close" in reply.lower()


def test_headers_too_large_is_431(router: RouterProcess) -> None:
    raw = (
        b"POST /in/acme-stripe HTTP/1.1\r\nHost: x\r\nX-Pad: "
        + b"a" * 40_000
        + b"\r\nContent-Length: 0\r\n\r\n"
    )
    reply = router.raw(raw)
    assert reply.startswith(b"HTTP/1.1 431 ")
    assert b'"error":"headers_too_large"' in reply


def test_malformed_http_is_400_then_closed(router: RouterProcess) -> None:
    reply = router.raw(b"POST /in/acme-stripe HTTP/1.1\r\nContent-Length: nope\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in reply
    assert b'"error":"malformed_http"' in reply


def test_pipelined_requests_are_answered_in_order(router: RouterProcess) -> None:
    ids = [uid() for _ in range(3)]
    wire = b""
    for event_id in ids:
        body, headers = stripe_event(event_id)
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        wire += (
            f"POST /in/acme-stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{head}\r\n"
        ).encode() + body
    wire += b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    reply = router.raw(wire)
    assert reply.count(b"HTTP/1.1 200 OK") == 4
    assert reply.rstrip().endswith(b'{"status":"ok"}')
    acked = [orjson.loads(part.split(b"\r\n\r\n", 1)[1]) for part in reply.split(b"HTTP/1.1 ")[1:4]]
    assert all(a["duplicate"] is False for a in acked)
    assert len({a["id"] for a in acked}) == 3


def test_expect_continue_gets_100_then_the_answer(router: RouterProcess) -> None:
    body, headers = stripe_event(uid())
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", router.port), timeout=5) as sock:
        sock.sendall(
            (
                f"POST /in/acme-stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                f"Expect: 100-continue\r\n{head}\r\n"
            ).encode()
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")


def test_slow_client_gets_408_and_close(tmp_path: Path, engine: str) -> None:
    config = base_config(tmp_path / "data", 0, engine)
    config["server"]["header_timeout_seconds"] = 0.5
    with RouterProcess(tmp_path, config) as router:
        started = time.monotonic()
        reply = router.raw(b"POST /in/acme-stripe HTTP/1.1\r\nHost: x\r\n", read_timeout=10)
        assert reply.startswith(b"HTTP/1.1 408 ")
        assert b"connection: close" in reply
        assert time.monotonic() - started < 5


def test_health_ready_and_metrics(router: RouterProcess) -> None:
    assert router.request("GET", "/healthz")[0] == 200
    status, _, data = router.request("GET", "/readyz")
    assert (status, orjson.loads(data)["status"]) == (200, "ready")
    router.post("acme-stripe", *stripe_event(uid()))
    status, headers, metrics = router.request("GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    assert (
        b'hookrouter_ingest_requests_total{result="accepted",source="acme-stripe"} 1.0' in metrics
    )


def _series(metrics: bytes, name: str) -> float:
    line = next(ln for ln in metrics.splitlines() if ln.startswith(name.encode() + b" "))
    return float(line.split()[1])


def test_store_series_follow_the_commits(router: RouterProcess) -> None:
    _, _, before = router.request("GET", "/metrics")
    event = stripe_event(uid())
    for _ in range(3):  # one new event, then the same one twice
        assert router.post("acme-stripe", *event)[0] == 200
    _, _, after = router.request("GET", "/metrics")

    def grew(name: str) -> float:
        return _series(after, name) - _series(before, name)

    assert grew("hookrouter_store_appends_total") == 3
    assert grew("hookrouter_store_duplicates_total") == 2
    assert grew("hookrouter_store_commits_total") >= 3  # each request waited for its commit
    assert _series(after, "hookrouter_store_pending_appends") == 0
    assert _series(after, "hookrouter_store_failing") == 0
    assert 0 < _series(after, "hookrouter_store_commit_seconds_peak") < 5
    assert _series(after, "hookrouter_store_wal_rewind_seconds_peak") >= 0  # exported
    # The new event's key joined the dedup tiers' hot tier (far below a flush).
    assert grew("hookrouter_store_dedup_hot_keys") == 1
    assert _series(after, "hookrouter_store_dedup_failures_total") == 0


def test_acknowledged_events_survive_kill_9(tmp_path: Path, engine: str) -> None:
    router = RouterProcess(tmp_path, base_config(tmp_path / "data", 0, engine)).start()
    acked = []
    for _ in range(50):
        status, ack = router.post("acme-stripe", *stripe_event(uid()))
        assert status == 200
        acked.append(ack["id"])
    router.kill()
    with RouterProcess(tmp_path, router.config) as restarted:
        for event_id in acked:
            status, event = restarted.admin("GET", f"/events/{event_id}")
            assert status == 200, event_id
            assert event["source"] == "acme-stripe"


def test_sigterm_stops_every_engine_cleanly(tmp_path: Path, engine: str) -> None:
    """Exit code 0 and the whole stop sequence, on the compiled build's event loop.

    Under uvloop, ``remove_reader`` returns None where typeshed says bool; the
    compiled native engine once checked that result and raised at every stop,
    skipping the delivery park and the store close.
    """
    router = RouterProcess(tmp_path, base_config(tmp_path / "data", 0, engine)).start()
    status, ack = router.post("acme-stripe", *stripe_event(uid()))
    assert status == 200
    code = router.stop()
    log = router.log()
    assert code == 0, log
    assert "Traceback" not in log
    assert "hookrouter stopped" in log
    with RouterProcess(tmp_path, router.config) as restarted:  # the store closed cleanly
        assert restarted.admin("GET", f"/events/{ack['id']}")[0] == 200
