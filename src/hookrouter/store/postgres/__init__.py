"""The PostgreSQL store backend (cluster mode, issue 32): ``[store] backend = "postgres"``.

The driver is asyncpg: ``bench/pg_driver.py`` measured it against psycopg 3
(pipeline mode) and it spent less client CPU per event on every statement
this backend runs (docs/performance.md, "PostgreSQL driver choice"). Every
call into it stays inside this package, so another driver is a local change.
"""

from hookrouter.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
