"""Structured logs of a real router: JSON lines with context, and no secret or body in them.

The router runs at DEBUG, in each ``[log] format``; events whose bodies and
headers carry marker strings (and a bearer token) are accepted, refused and
delivered to endpoints that fail: one answers 500 echoing everything it was
sent (the signed body, the signature, the endpoint's Authorization header)
in its body and headers, one 410, one refuses the connection. The failures
must be logged with their ids, and no marker, secret, token or echo of them
may appear anywhere in the log (an operator hook's secret included).
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.router import (
    ADMIN_TOKEN,
    ENDPOINT_SECRET,
    STANDARD_SECRET,
    STRIPE_SECRET,
    RouterProcess,
    base_config,
)
from tests.telemetry.operator_hooks import OPERATOR_SECRET, hook

BODY_MARKER = "BODYMARKER7f3a"
HEADER_MARKER = "HEADERMARKER91c2"
BEARER = "BEARERSECRETd41e"
ANSWER_MARKER = "ANSWERMARKER55b0"
EXTRA_HEADER_SECRET = "ENDPOINTHEADERSECRET0a9"


def _echo(request: Received) -> Reply:
    """A receiver that sends back everything it got, as a careless one would."""
    echoed = b"".join(f"{k}: {v}\n".encode() for k, v in request.headers.items()) + request.body
    headers = [(f"x-echo-{k}", v) for k, v in request.headers.items() if k != "content-length"]
    return Reply(status=500, body=ANSWER_MARKER.encode() + b"\n" + echoed, headers=headers)


def _gone(_request: Received) -> Reply:
    return Reply(status=410, body=f"gone {ANSWER_MARKER}".encode())


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_logs_carry_ids_and_never_secrets_or_bodies(tmp_path: Path, fmt: str) -> None:
    with (
        ThreadedReceiver(_echo) as failing,
        ThreadedReceiver(_gone) as gone,
        ThreadedReceiver() as operator,
    ):
        config = base_config(tmp_path / "data", 0)
        config["log"] = {"format": fmt, "level": "DEBUG"}
        config["operator_hooks"] = [hook(operator.port)]
        config["delivery"] = {
            "allow_private_networks": True,
            "retry_schedule": ["1s", "1s"],
            "timeout_seconds": 2,
        }
        config["endpoints"] = [
            {"id": "acme-failing", "tenant": "acme", "event_types": ["invoice.*"],
             "url": f"http://127.0.0.1:{failing.port}/hook?token={BEARER}",
             "secret": ENDPOINT_SECRET,
             "headers": {"Authorization": f"Bearer {EXTRA_HEADER_SECRET}"}},
            {"id": "acme-gone", "tenant": "acme", "url": f"http://127.0.0.1:{gone.port}/gone",
             "secret": ENDPOINT_SECRET},
            {"id": "globex-refused", "tenant": "globex", "url": "http://127.0.0.1:9/never",
             "secret": ENDPOINT_SECRET},
        ]  # fmt: skip
        router = RouterProcess(tmp_path, config).start()
        try:
            headers_extra = {"X-Marker": HEADER_MARKER, "Authorization": f"Bearer {BEARER}"}
            for n in range(3):
                body, headers = stripe_event(
                    f"evt_log_{n}", extra={"note": BODY_MARKER, "card": BEARER}
                )
                status, answer = router.post("acme-stripe", body, {**headers, **headers_extra})
                assert status == 200, answer
            # Refused: a bad signature, a body that is not JSON, an unknown source.
            body, headers = stripe_event(
                "evt_log_bad", secret="whsec_wrong", extra={"n": BODY_MARKER}
            )
            assert router.post("acme-stripe", body, {**headers, **headers_extra})[0] == 401
            raw = f"not json {BODY_MARKER}".encode()
            assert router.post("globex-std", raw, headers_extra)[0] == 401
            assert router.post("nope", raw, headers_extra)[0] == 404
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and (
                len(failing.receiver.requests) < 6 or not gone.receiver.requests
            ):
                time.sleep(0.1)
            assert len(failing.receiver.requests) >= 6  # first attempts and retries failed
        finally:
            assert router.stop() == 0
    text = router.log()
    signatures = [r.headers["webhook-signature"] for r in failing.receiver.requests]
    for secret in (
        BODY_MARKER, HEADER_MARKER, BEARER, ANSWER_MARKER, EXTRA_HEADER_SECRET,
        STRIPE_SECRET, STANDARD_SECRET, ENDPOINT_SECRET, ADMIN_TOKEN, OPERATOR_SECRET,
        *(s.split(",", 1)[1] for s in signatures),
    ):  # fmt: skip
        assert secret not in text, f"{secret} leaked into the log:\n{text}"
    if fmt == "text":
        failures = [line for line in text.splitlines() if "delivery attempt failed" in line]
        assert failures and "event_id=evt_" in failures[0] and "endpoint=" in failures[0]
        return
    lines = [orjson.loads(line) for line in text.splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    failures = [line for line in lines if line["message"].startswith("delivery attempt failed")]
    assert failures, text
    assert {"event_id", "tenant", "endpoint", "attempt"} <= set(failures[0])
    assert failures[0]["event_id"].startswith("evt_")
    gone_lines = [line for line in lines if "410 Gone" in line["message"]]
    assert gone_lines and gone_lines[0]["endpoint"] == "acme-gone"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_format_switch_and_component_levels(fmt: str) -> None:
    import io
    import logging

    from hookrouter.config.telemetry import LogSettings
    from hookrouter.telemetry.logs import configure, context

    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure(
            LogSettings(format=fmt, level="WARNING", components={"delivery": "DEBUG"}),
            stream=stream,
        )
        logging.getLogger("hookrouter.delivery.attempt").debug(
            "shown", extra=context(event_id="evt_1", endpoint="ep")
        )
        logging.getLogger("hookrouter.ingress.handler").info("hidden")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("hookrouter.delivery").setLevel(logging.NOTSET)
    out = stream.getvalue()
    assert "hidden" not in out
    if fmt == "json":
        line = orjson.loads(out)
        assert line["message"] == "shown" and line["event_id"] == "evt_1"
        assert line["endpoint"] == "ep" and line["logger"] == "hookrouter.delivery.attempt"
    else:
        assert "shown [event_id=evt_1 endpoint=ep]" in out
