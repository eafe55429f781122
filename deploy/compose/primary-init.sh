#!/bin/sh
# Runs once, when the primary's data directory is created
# (/docker-entrypoint-initdb.d): a replication role, its pg_hba line, and
# the synchronous standby's name. ALTER SYSTEM takes effect at the real start,
# after this initialisation: set on the command line instead, every commit of
# the initialisation would wait for a standby that cannot exist yet.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '${REPLICATION_PASSWORD}';
ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (standby1)';
ALTER SYSTEM SET synchronous_commit = 'on';
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
