#!/bin/sh
# The standby: cloned from the primary by pg_basebackup on first start
# (-R writes standby.signal and primary_conninfo, whose application_name is
# the name the primary's synchronous_standby_names waits for), then streams.
# After a promotion (pg_ctl promote -D "$PGDATA") it is the primary.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until rm -rf "${PGDATA:?}"/* && pg_basebackup -D "$PGDATA" -R -X stream -c fast \
        -d "host=postgres-primary port=5432 user=replicator password=$REPLICATION_PASSWORD application_name=standby1"
    do
        echo "standby: waiting for the primary"
        sleep 2
    done
    chmod 700 "$PGDATA"
fi
exec postgres -c hot_standby=on
