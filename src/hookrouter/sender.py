"""``hookrouter send``: build and sign a test event the way its provider would.

Useful to check a deployment end to end (the quickstart uses it): the event
is signed with the source's first secret in the source's provider scheme, so
it passes the same verification a real provider's request passes.
"""

from __future__ import annotations

import base64
import hmac
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import orjson

from hookrouter.config import Config
from hookrouter.config.entities import SourceConfig
from hookrouter.errors import HookrouterError, UnknownSource, redact_url
from hookrouter.verify.generic import parse_options
from hookrouter.verify.standard import StandardSigner

Headers = dict[str, str]


def _hex(key: bytes, message: bytes, algorithm: str = "sha256") -> str:
    return hmac.new(key, message, algorithm).hexdigest()


def _b64(key: bytes, message: bytes, algorithm: str = "sha256") -> str:
    return base64.b64encode(hmac.new(key, message, algorithm).digest()).decode()


def _stripe(
    source: SourceConfig, event_id: str, event_type: str, data: dict[str, Any], now: int
) -> tuple[bytes, Headers]:
    body = orjson.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": now,
            "data": {"object": data},
        }
    )
    signature = _hex(source.secrets[0].encode(), f"{now}.".encode() + body)
    return body, {"Stripe-Signature": f"t={now},v1={signature}"}


def _github(
    source: SourceConfig, event_id: str, event_type: str, data: dict[str, Any], now: int
) -> tuple[bytes, Headers]:
    body = orjson.dumps(data)
    return body, {
        "X-Hub-Signature-256": "sha256=" + _hex(source.secrets[0].encode(), body),
        "X-GitHub-Delivery": event_id,
        "X-GitHub-Event": event_type,
    }


def _shopify(
    source: SourceConfig, event_id: str, event_type: str, data: dict[str, Any], now: int
) -> tuple[bytes, Headers]:
    body = orjson.dumps(data)
    return body, {
        "X-Shopify-Hmac-Sha256": _b64(source.secrets[0].encode(), body),
        "X-Shopify-Webhook-Id": event_id,
        "X-Shopify-Topic": event_type,
    }


def _slack(
    source: SourceConfig, event_id: str, event_type: str, data: dict[str, Any], now: int
) -> tuple[bytes, Headers]:
    body = orjson.dumps(
        {
            "type": "event_callback",
            "event_id": event_id,
            "event_time": now,
            "event": {"type": event_type, **data},
        }
    )
    base = f"v0:{now}:".encode() + body
    return body, {
        "X-Slack-Signature": "v0=" + _hex(source.secrets[0].encode(), base),
        "X-Slack-Request-Timestamp": str(now),
    }


def _standard(
    source: SourceConfig, event_id: str, event_type: str, data: dict[str, Any], now: int
) -> tuple[bytes, Headers]:
    body = orjson.dumps({"type": event_type, "timestamp": now, "data": data})
    return body, StandardSigner(source.secrets[0]).headers(event_id, now, body)


def _generic(
    source: SourceConfig, event_id: str, event_type: str, data: dict[str, Any], now: int
) -> tuple[bytes, Headers]:
    options = parse_options(source.options)
    payload: dict[str, Any] = dict(data)
    for path, value in ((options.id_field, event_id), (options.type_field, event_type)):
        if path:
            node = payload
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
    body = orjson.dumps(payload)
    headers: Headers = {}
    signed = body
    if options.timestamp_header:
        headers[options.timestamp_header] = str(now)
        signed = f"{now}.".encode() + body
    key = source.secrets[0].encode()
    if options.encoding == "hex":
        mac = _hex(key, signed, options.algorithm)
    else:
        mac = _b64(key, signed, options.algorithm)
    headers[options.header] = options.prefix + mac
    if options.id_header:
        headers[options.id_header] = event_id
    if options.type_header:
        headers[options.type_header] = event_type
    return body, headers


_BUILDERS: dict[str, Callable[..., tuple[bytes, Headers]]] = {
    "stripe": _stripe,
    "github": _github,
    "shopify": _shopify,
    "slack": _slack,
    "standard": _standard,
    "hmac": _generic,
}


def signed_test_request(
    source: SourceConfig, event_type: str, data: dict[str, Any], now: int | None = None
) -> tuple[bytes, Headers]:
    """Body and headers of a test event for ``source``, signed with its first secret."""
    stamp = int(time.time()) if now is None else now
    event_id = "evt_test_" + os.urandom(8).hex()
    body, headers = _BUILDERS[source.provider](source, event_id, event_type, data, stamp)
    headers["Content-Type"] = "application/json"
    return body, headers


def send_test_event(
    config: Config,
    source_id: str,
    *,
    event_type: str = "test.event",
    data: str | None = None,
    url: str | None = None,
    timeout: float = 10.0,
) -> tuple[int, bytes]:
    """Post a signed test event to the router; returns (status, response body)."""
    source = next((s for s in config.sources if s.id == source_id), None)
    if source is None:
        raise UnknownSource(f"no source {source_id!r} in the config file")
    try:
        payload = orjson.loads(data) if data else {"message": "hello from hookrouter send"}
    except orjson.JSONDecodeError as exc:
        raise HookrouterError(f"--data is not valid JSON: {exc}", reason="bad_data") from exc
    if not isinstance(payload, dict):
        raise HookrouterError("--data must be a JSON object", reason="bad_data")
    body, headers = signed_test_request(source, event_type, payload)
    host = config.server.host if config.server.host not in ("0.0.0.0", "::") else "127.0.0.1"
    base = url or f"http://{host}:{config.server.port}"
    request = urllib.request.Request(
        f"{base.rstrip('/')}/in/{source_id}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise HookrouterError(f"cannot reach the router at {redact_url(base)}: {exc}") from exc
