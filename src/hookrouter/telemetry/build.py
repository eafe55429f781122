"""The tracer the router runs with: None when ``[telemetry]`` is off, else the SDK's."""

from __future__ import annotations

from hookrouter.config.telemetry import TelemetrySettings
from hookrouter.errors import ConfigError, ConfigIssue
from hookrouter.telemetry.tracing import Tracing


def build_tracing(settings: TelemetrySettings) -> Tracing | None:
    """The tracer for ``settings``, or None when tracing is off (nothing imported)."""
    if not settings.enabled:
        return None
    try:
        from hookrouter.telemetry.otel import otel_tracing
    except ImportError as exc:
        message = (
            f"tracing needs OpenTelemetry ({exc.name or 'a module'} is missing):"
            " pip install 'hookrouter[otel]'"
        )
        raise ConfigError([ConfigIssue("telemetry.otlp_endpoint", message)]) from exc
    return otel_tracing(settings)


__all__ = ["build_tracing"]
