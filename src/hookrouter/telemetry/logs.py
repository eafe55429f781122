"""Log line formats (``[log] format``) and levels (``[log] level``, ``[log.levels]``).

The JSON format writes one object per line with ``time``, ``level``,
``logger``, ``message`` and, where the call site knows them, the context
fields below, passed as ``extra=`` (``context(...)`` builds that mapping).
Callbacks, not tasks, carry the hot paths, so a contextvar set around a
request would not reach the commit callback: call sites pass what they know.

What may be logged: identifiers (event, tenant, source, endpoint, trace),
states and reason codes. Never a body, a header value or a secret: the
context fields take identifiers only, and ``tests/telemetry`` runs a router
with bodies and headers full of markers to prove none reach the log.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, TextIO

import orjson

from hookrouter.config.telemetry import LogSettings

# Context fields a call site may pass in ``extra=`` (record attribute == JSON key).
CONTEXT_FIELDS: Final = ("event_id", "tenant", "source", "endpoint", "trace_id", "attempt")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ROOT: Final = "hookrouter"


def context(
    *,
    event_id: str | None = None,
    tenant: str | None = None,
    source: str | None = None,
    endpoint: str | None = None,
    trace_id: str | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    """The ``extra=`` mapping for a log call: the known identifiers only."""
    fields = {
        "event_id": event_id,
        "tenant": tenant,
        "source": source,
        "endpoint": endpoint,
        "trace_id": trace_id,
        "attempt": attempt,
    }
    return {key: value for key, value in fields.items() if value is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; the exception, when any, as its class and traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            line["error"] = type(record.exc_info[1]).__name__
            line["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """The classic line, with the known context fields appended as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = [
            f"{key}={value}"
            for key in CONTEXT_FIELDS
            if (value := record.__dict__.get(key)) is not None
        ]
        return f"{text} [{' '.join(fields)}]" if fields else text


def configure(
    settings: LogSettings, *, level_override: str | None = None, stream: TextIO | None = None
) -> None:
    """Replace the root handler with one in the chosen format; set the levels.

    ``level_override`` (the command line's ``--log-level``) wins over ``[log] level``.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel((level_override or settings.level).upper())
    apply_levels(settings.components)


def apply_levels(components: Mapping[str, str]) -> None:
    """Per-component levels: ``delivery`` means the ``hookrouter.delivery`` logger."""
    for name, level in components.items():
        full = name if name == ROOT or name.startswith(ROOT + ".") else f"{ROOT}.{name}"
        logging.getLogger(full).setLevel(level)


__all__ = ["CONTEXT_FIELDS", "JsonFormatter", "TextFormatter", "configure", "context"]
