"""The PostgreSQL store backend (cluster mode, issue 32): ``[store] backend = "postgres"``.

Every call into the driver (asyncpg, chosen by ``bench/pg_driver.py``: about a
third of psycopg 3's client CPU per event, docs/performance.md "PostgreSQL
driver choice") stays inside this package, so another driver is a local change.
"""

from hookrouter.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
