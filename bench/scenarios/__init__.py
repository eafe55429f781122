"""Scenario plug-ins: every module here that defines ``SCENARIO`` (a :class:`bench.api.Scenario`).

To add one, create ``bench/scenarios/<name>.py`` with a ``run(ctx) -> Section``
and ``SCENARIO = Scenario(name=..., title=..., order=..., run=run)``; it then
appears in ``python -m bench list``, runs with ``python -m bench <name>`` and
in ``all``, and gets its own section in docs/benchmarks.md. The issues'
scenarios are all here: ingest, e2e, isolation, flood, ratelimit (issue 4),
engines (issue 5), profile and compiled (mypyc vs interpreted).
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback

from bench.api import Scenario


def discover() -> tuple[list[Scenario], dict[str, str]]:
    """(scenarios sorted by order, {module: import error} for modules that failed to import)."""
    found: list[Scenario] = []
    broken: dict[str, str] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{__name__}.{info.name}")
        except Exception:  # a broken plug-in must not take the others down
            broken[info.name] = traceback.format_exc(limit=3)
            continue
        scenario = getattr(module, "SCENARIO", None)
        if isinstance(scenario, Scenario):
            found.append(scenario)
    names = [s.name for s in found]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"two scenarios share a name: {sorted(duplicates)}")
    return sorted(found, key=lambda s: (s.order, s.name)), broken
