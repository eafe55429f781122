"""The plan a PostgreSQL statement gets in the store's sessions, for tests and bench.

The store's sessions force generic plans (``PostgresStore.server_settings``).
EXPLAIN with parameters shows a custom plan instead, so the statement is
prepared and ``EXPLAIN EXECUTE`` runs it with its arguments as literals.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg


class _Rollback(Exception):
    """Leaves an analysed statement's transaction rolled back."""


async def generic_plan(
    conn: asyncpg.Connection, query: str, *args: Any, analyze: bool = False
) -> dict[str, Any]:
    """The top of ``query``'s generic plan; ``analyze``: run it too, rolled back."""
    name = f"probe_{abs(hash((query, analyze)))}"
    await conn.execute(f"PREPARE {name} AS {query}")
    try:
        types = await conn.fetchval(
            "SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1", name
        )
        literals = [
            await conn.fetchval(f"SELECT quote_nullable($1::{t}::text) || '::{t}'", arg)
            for t, arg in zip(types, args, strict=True)
        ]
        options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
        explain = f"EXPLAIN ({options}) EXECUTE {name}({', '.join(literals)})"
        if not analyze:
            return dict(json.loads(await conn.fetchval(explain))[0])
        try:
            async with conn.transaction():  # every statement sees the same store
                raise _Rollback(await conn.fetchval(explain))
        except _Rollback as done:
            return dict(json.loads(done.args[0])[0])
    finally:
        await conn.execute(f"DEALLOCATE {name}")


__all__ = ["generic_plan"]
