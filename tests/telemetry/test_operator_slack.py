"""A Slack hook gets Slack's incoming-webhook message; a standard hook, in the same router,
the signed Standard Webhooks event. The Slack side is a fake of Slack's endpoint: a local
receiver answering ``ok`` like hooks.slack.com does."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.router import RouterProcess, base_config
from tests.support.waiting import poll_until
from tests.telemetry.operator_hooks import OPERATOR_SECRET, hook, verified_events

from hookrouter.config import parse_config
from hookrouter.errors import ConfigError
from hookrouter.operator_events.slack import slack_message


def _fake_slack(_request: Received) -> Reply:
    return Reply(body=b"ok", headers=[("content-type", "text/html")])


def test_a_slack_hook_gets_a_slack_message_beside_the_signed_event(tmp_path: Path) -> None:
    with (
        ThreadedReceiver(lambda _r: Reply(status=410)) as acme,
        ThreadedReceiver(_fake_slack) as slack,
        ThreadedReceiver() as operator,
    ):
        config = base_config(tmp_path / "data", 0)
        config["endpoints"][0]["url"] = f"http://127.0.0.1:{acme.port}/gone"
        config["operator_hooks"] = [
            hook(operator.port, ["endpoint.*"]),
            {"url": f"http://127.0.0.1:{slack.port}/services/T0/B0/x", "format": "slack",
             "events": ["endpoint.*"]},
        ]  # fmt: skip
        with RouterProcess(tmp_path, config) as router:
            body, headers = stripe_event("evt_for_slack")
            assert router.post("acme-stripe", body, headers)[0] == 200
            poll_until(lambda: len(slack.receiver.requests) >= 1)
            poll_until(lambda: len(operator.receiver.requests) >= 1)
    request = slack.receiver.requests[0]
    assert request.path == "/services/T0/B0/x"
    assert request.headers["content-type"] == "application/json"
    message = orjson.loads(request.body)
    assert set(message) == {"text", "blocks"}
    assert message["text"] == ("[hookrouter] Endpoint acme-invoices (tenant acme) disabled: gone")
    assert message["blocks"][0]["type"] == "section"
    assert message["blocks"][0]["text"]["type"] == "mrkdwn"
    fields = {f["text"] for f in message["blocks"][1]["fields"]}
    assert fields == {"*tenant*\nacme", "*endpoint*\nacme-invoices", "*reason*\ngone"}
    assert "endpoint.disabled" in message["blocks"][-1]["elements"][0]["text"]
    # The standard hook got the same event, signed.
    [event] = verified_events(operator)
    assert event["type"] == "endpoint.disabled"
    assert event["data"] == {"tenant": "acme", "endpoint": "acme-invoices", "reason": "gone"}


def _config(hooks: list[dict[str, object]]) -> dict[str, object]:
    doc = base_config(Path("data"), 8080)
    doc["operator_hooks"] = hooks
    return doc


def test_a_hooks_slack_com_url_is_slack_and_needs_no_secret() -> None:
    url = "https://hooks.slack.com/services/T000/B000/XXXX"
    config = parse_config(_config([{"url": url}]))
    assert config.operator.hooks[0].format == "slack"
    assert config.operator.hooks[0].secret == ""


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"url": "https://ops.example.com/hook"}, "operator_hooks[0].secret"),
        ({"url": "https://ops.example.com/hook", "secret": OPERATOR_SECRET, "format": "teams"},
         "operator_hooks[0].format"),
    ],
)  # fmt: skip
def test_a_hook_without_its_secret_or_with_an_unknown_format_is_refused(
    table: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_config([table]))
    assert any(problem in str(issue) for issue in info.value.issues), info.value.issues


def test_the_slack_message_escapes_what_slack_would_interpret() -> None:
    message = slack_message(
        "endpoint.disabled", "t", {"tenant": "<!channel>", "endpoint": "a&b", "reason": "x"}
    )
    text = orjson.dumps(message).decode()
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
