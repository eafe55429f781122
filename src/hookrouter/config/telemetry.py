"""The ``[log]`` and ``[telemetry]`` sections: how the router reports on itself.

``[log]`` chooses the log line format (``text`` for people, ``json`` for a
log pipeline), the root level and levels per component (a logger name below
``hookrouter``, e.g. ``delivery = "DEBUG"``).

``[telemetry]`` switches OpenTelemetry tracing on: spans go to an OTLP/HTTP
collector at ``otlp_endpoint``. Tracing is off unless an endpoint is set here
or in ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``;
the other standard ``OTEL_*`` variables fill what the file leaves out. It also
bounds how many tenants get Prometheus series of their own
(``labelled_tenants``, ``labelled_latency_tenants``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from hookrouter.config.reader import TableReader

# Tenants (and, on the ingest counter, sources) whose Prometheus series carry
# their own label; later ones count under ``_other``. A few thousand keep each
# metric below ~10k series, where Prometheus servers start to struggle.
LABELLED_TENANTS: Final = 2_000
# The latency histogram is 16 series a tenant (14 buckets, count, sum): its
# own, smaller set of labelled tenants keeps it near the others' size.
LABELLED_LATENCY_TENANTS: Final = 500
# Past this many, one metric would hold millions of series.
MAX_LABELLED: Final = 100_000

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True, slots=True)
class LogSettings:
    format: str = "text"
    level: str = "INFO"
    # Logger name below ``hookrouter`` (``delivery``, ``ingress.handler``) -> level.
    components: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    """Tracing settings; ``enabled`` is False unless an OTLP endpoint is known."""

    otlp_endpoint: str = ""
    sample_ratio: float = 1.0
    service_name: str = "hookrouter"
    resource_attributes: Mapping[str, str] = field(default_factory=dict)
    # Deliveries carry a ``traceparent`` header unless their endpoint is listed here.
    propagate: bool = True
    no_propagation_endpoints: frozenset[str] = frozenset()
    # Cardinality bounds of the per-tenant (per-source) metric series.
    labelled_tenants: int = LABELLED_TENANTS
    labelled_latency_tenants: int = LABELLED_LATENCY_TENANTS

    @property
    def enabled(self) -> bool:
        return bool(self.otlp_endpoint)


def parse_log(r: TableReader) -> LogSettings:
    d = LogSettings()
    fmt = r.choice("format", LOG_FORMATS, d.format)
    level = _level(r, "level", d.level)
    components: dict[str, str] = {}
    table = r.sub("levels")
    if table is not None:
        for name in list(table.table):
            components[name] = _level(table, name, d.level)
        table.finish(extra_known=tuple(components))
    r.finish()
    return LogSettings(format=fmt, level=level, components=components)


def _level(r: TableReader, key: str, default: str) -> str:
    value = r.string(key, default).upper()
    if value not in LOG_LEVELS:
        r.problem(key, f"unknown level {value!r} (expected one of {', '.join(LOG_LEVELS)})")
        return default
    return value


def parse_telemetry(r: TableReader, env: Mapping[str, str] | None = None) -> TelemetrySettings:
    """The section, with ``OTEL_*`` variables for whatever the file does not set."""
    environ = os.environ if env is None else env
    d = TelemetrySettings()
    endpoint = r.string("otlp_endpoint", "") or _env_endpoint(environ)
    ratio_default = _env_ratio(environ, d.sample_ratio)
    ratio = r.number("sample_ratio", ratio_default, minimum=0.0, maximum=1.0)
    service = r.string("service_name", "") or environ.get("OTEL_SERVICE_NAME", d.service_name)
    attributes = _env_attributes(environ.get("OTEL_RESOURCE_ATTRIBUTES", ""))
    table = r.sub("resource_attributes")
    if table is not None:
        for key in list(table.table):
            attributes[key] = table.string(key)
        table.finish(extra_known=tuple(attributes))
    propagate = r.boolean("propagate", d.propagate)
    quiet = frozenset(r.string_list("no_propagation_endpoints") or ())
    labelled = r.integer("labelled_tenants", d.labelled_tenants, minimum=0, maximum=MAX_LABELLED)
    latency = r.integer(
        "labelled_latency_tenants", d.labelled_latency_tenants, minimum=0, maximum=MAX_LABELLED
    )
    r.finish()
    return TelemetrySettings(
        otlp_endpoint=endpoint,
        sample_ratio=ratio,
        service_name=service,
        resource_attributes=attributes,
        propagate=propagate,
        no_propagation_endpoints=quiet,
        labelled_tenants=labelled,
        labelled_latency_tenants=latency,
    )


def _env_endpoint(env: Mapping[str, str]) -> str:
    """The traces URL from the standard variables (the generic one gets ``/v1/traces``)."""
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    return f"{base.rstrip('/')}/v1/traces" if base else ""


def _env_ratio(env: Mapping[str, str], default: float) -> float:
    """``OTEL_TRACES_SAMPLER_ARG`` as a ratio, when it is one."""
    try:
        value = float(env.get("OTEL_TRACES_SAMPLER_ARG", ""))
    except ValueError:
        return default
    return value if 0.0 <= value <= 1.0 else default


def _env_attributes(text: str) -> dict[str, str]:
    """``key=value,key=value`` as the OpenTelemetry specification writes them."""
    out: dict[str, str] = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out
