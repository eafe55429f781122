"""Retention routes of the admin API (added with ``AdminApi.route``).

::

    GET  /admin/v1/retention        the policy in force and what the passes did so far
    POST /admin/v1/retention/run    run a pass now (e.g. after shortening retention)

``run`` answers ``{"deleted": n}`` once the pass is complete; a store failure
is a 503 like any other store error.
"""

from __future__ import annotations

import dataclasses
import re

from hookrouter.admin.api import AdminApi
from hookrouter.core.http1 import Request, Response
from hookrouter.ingress.ops import json_response
from hookrouter.store.pruner import Pruner


def install(api: AdminApi, pruner: Pruner) -> None:
    """Add the retention routes to ``api``."""

    async def status(request: Request, m: re.Match[str]) -> Response:
        # Seconds per kind (null: kept forever) and the pass interval.
        policy = dataclasses.asdict(pruner.policy)
        return json_response(200, {"policy": policy, **pruner.stats()})

    async def run(request: Request, m: re.Match[str]) -> Response:
        return json_response(200, {"deleted": await pruner.run_pass()})

    api.route("GET", r"/retention", status)
    api.route("POST", r"/retention/run", run)


__all__ = ["install"]
