"""Every error hookrouter raises on purpose, in one tree.

::

    HookrouterError                  reason: str code, status: HTTP status hint
    ├── ConfigError                  invalid configuration; .issues lists key paths
    ├── ProtocolError                malformed or over-limit HTTP (400, 408, 413, 431, ...)
    ├── RequestRejected              a well-formed request we refuse
    │   ├── UnknownSource            404 unknown_source
    │   ├── UnsupportedEncoding      415 unsupported_content_encoding
    │   ├── VerificationFailed       401 missing_signature | bad_signature | stale_timestamp
    │   │                                | malformed_signature | missing_timestamp
    │   └── NotFound                 404 for admin resources
    ├── StoreError                   the durable store failed
    │   ├── StoreUnavailable         503 + Retry-After: cannot commit right now
    │   └── StoreSaturated           429/503 + Retry-After: backlog cap or commit latency
    ├── EngineUnavailable            an ingress engine cannot run here (reason says why)
    ├── ShutdownIncomplete           a stop stage failed; the later ones still ran
    └── DeliveryError                outbound transport failures (connect, timeout, refused)
        └── DestinationRefused       SSRF guard: destination not allowed

Rules: errors carry data (``status``, ``reason``, optional ``retry_after``),
not just text; foreign exceptions are translated at the boundary with
``raise ... from exc``; ordinary outcomes (a duplicate event, a rate-limit
denial) are result values, never exceptions. Only the ingress handler turns
these into HTTP responses, and it never sends a traceback. A URL that goes
into a message goes through :func:`redact_url` first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ``scheme://user:password@``: everything between ``//`` and the authority's last ``@``.
_USERINFO = re.compile(r"(?<=//)[^/?#\s]*@")
# A query or fragment parameter whose name suggests a credential; its value is hidden.
_SECRET_PARAM = re.compile(
    r"([?&;#](?:[^=&#\s]*(?:token|secret|passw|pwd|key|sig|auth|credential|session))"
    r"[^=&#\s]*=)[^&#\s'\"]*",
    re.IGNORECASE,
)


def redact_url(text: str) -> str:
    """``text`` (a URL, or a message containing URLs) with credentials replaced by ``***``.

    Userinfo becomes ``***@`` and the values of query parameters named like
    secrets (``token``, ``api_key``, ``sig``, ...) become ``***``. Use it on
    every URL that goes into an error message or a log line.
    """
    return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub("***@", text))


class HookrouterError(Exception):
    """Base of all hookrouter errors."""

    status: int = 500
    reason: str = "internal_error"

    def __init__(self, message: str, *, reason: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        if status is not None:
            self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r}, message={self.message!r})"


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in a configuration, located by its key path."""

    path: str  # e.g. "sources[2].provider"
    message: str  # e.g. "unknown provider 'strip'"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(HookrouterError):
    """The configuration is invalid; ``issues`` says where and why."""

    status = 400
    reason = "invalid_config"

    def __init__(self, issues: list[ConfigIssue]):
        self.issues = list(issues)
        super().__init__("; ".join(str(i) for i in self.issues) or "invalid configuration")


class ProtocolError(HookrouterError):
    """The peer broke HTTP/1.1 or a framing limit; the connection closes after the reply."""

    status = 400
    reason = "malformed_http"


class RequestRejected(HookrouterError):
    """A well-formed request that hookrouter refuses."""

    status = 400
    reason = "rejected"


class UnsupportedEncoding(RequestRejected):
    """415: the body uses a content coding hookrouter does not decode."""

    status = 415
    reason = "unsupported_content_encoding"


class UnknownSource(RequestRejected):
    status = 404
    reason = "unknown_source"


class VerificationFailed(RequestRejected):
    """Signature or timestamp check failed. ``reason`` names which check."""

    status = 401
    reason = "bad_signature"


class NotFound(RequestRejected):
    status = 404
    reason = "not_found"


class StoreError(HookrouterError):
    """The durable store failed."""

    status = 503
    reason = "store_error"


class StoreUnavailable(StoreError):
    """The store cannot commit now; senders should retry after ``retry_after`` seconds."""

    status = 503
    reason = "store_unavailable"

    def __init__(self, message: str, *, retry_after: float = 5.0, reason: str | None = None):
        super().__init__(message, reason=reason)
        self.retry_after = retry_after


class StoreSaturated(StoreUnavailable):
    """Backlog cap reached or commits too slow; shed load from senders that retry."""

    status = 429
    reason = "store_saturated"


class EngineUnavailable(HookrouterError):
    """An ingress engine cannot run on this machine; the message says exactly why."""

    status = 500
    reason = "engine_unavailable"


class ShutdownIncomplete(HookrouterError):
    """A stage of the graceful stop failed; every later stage still ran.

    ``stages`` names the failed ones, in order (their tracebacks are logged).
    """

    reason = "shutdown_incomplete"

    def __init__(self, stages: list[str]):
        super().__init__(f"stopped with errors in: {', '.join(stages)} (see the log)")
        self.stages = stages


class DeliveryError(HookrouterError):
    """An outbound delivery attempt failed before a response arrived."""

    status = 502
    reason = "delivery_failed"


class DestinationRefused(DeliveryError):
    """The SSRF guard refused a destination address."""

    reason = "destination_refused"
