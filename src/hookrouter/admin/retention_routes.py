"""Retention routes of the admin API (added with ``AdminApi.route``).

::

    GET  /admin/v1/retention        the policy in force and what the passes did so far
    POST /admin/v1/retention/run    run a pass now (e.g. after shortening retention)

``run`` answers ``{"deleted": n}`` once the pass is complete; a store failure
is a 503 like any other store error.
"""

from __future__ import annotations

import dataclasses

from hookrouter.admin import schemas
from hookrouter.admin.api import AdminApi
from hookrouter.admin.operations import Call, Operation
from hookrouter.core.http1 import Response
from hookrouter.store.pruner import Pruner


def install(api: AdminApi, pruner: Pruner) -> None:
    """Add the retention routes to ``api``."""

    async def status(call: Call) -> Response:
        # Seconds per kind (null: kept forever) and the pass interval.
        policy = dataclasses.asdict(pruner.policy)
        return call.respond({"policy": policy, **pruner.stats()})

    async def run(call: Call) -> Response:
        return call.respond(schemas.RetentionRun(await pruner.run_pass()))

    tag = "retention"
    api.route(
        Operation(
            "GET",
            "/retention",
            "The retention policy and what its passes did",
            tag,
            response=schemas.Stats,
        ),
        status,
    )
    api.route(
        Operation("POST", "/retention/run", "Run a pass now", tag, response=schemas.RetentionRun),
        run,
    )


__all__ = ["install"]
