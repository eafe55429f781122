"""The Jinja2 environment of the console's templates (shipped in the package).

Autoescaping is on for every template: event types, headers, bodies, error
texts and receivers' answers come from outside and are shown as text, never
as markup. Templates are compiled once per process and cached.
"""

from __future__ import annotations

import datetime

from jinja2 import Environment, PackageLoader, StrictUndefined


def when(seconds: float | None) -> str:
    """Unix seconds as an ISO-like UTC time a person can read."""
    if not seconds:
        return "—"
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("hookrouter.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,  # a misspelt name fails the page (and its test)
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    return env


__all__ = ["environment", "when"]
