/* sg_relay_query: what an operator asks first when events are late, the
 * state of every outbox shard (`sagad-relay status`).  The contract every
 * operator query keeps (connection, JSON rows, errors): sg_ops.h. */
#ifndef SAGAD_RELAY_QUERY_H
#define SAGAD_RELAY_QUERY_H

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"
#include "sagad/sg_pg.h"

/* One object per shard, in shard order: {shard, held (a relay holds its
 * lock), holder (the relay that last held it, null when none),
 * heartbeat_age_s (seconds since its holder's heartbeat, null), cursor:
 * {tx (text: an xid8), id}, published (rows published since the cursor
 * was made), backlog (rows waiting), oldest_age_s (seconds the oldest has
 * waited, null when none), blocked_ms (how long the relay has waited for
 * older transactions to end)}.  A schema without the relay's tables or
 * sagad_relay_locks() (migrate has not run) is pg.query.
 * Role: sagad_reader. */
int sg_relay_status(sg_pg_t *pg, sg_json_t **rows, sg_err_t *err)
    __attribute__((warn_unused_result));

/* The WAL source (relay.source = wal), when the database uses it: no row
 * otherwise, one object {source, slot, slot_exists, active (a relay
 * streams from it), walsender_pid, holder (that relay, by its
 * application_name), confirmed_lsn, lag_bytes (WAL written since the
 * last confirmed position: what is still to publish, and other writes),
 * retained_bytes (WAL the slot keeps from being recycled), table_rows
 * (rows waiting in the outbox table, to be moved into the WAL),
 * switched_at}.  Role: sagad_reader. */
int sg_relay_wal_status(sg_pg_t *pg, sg_json_t **rows, sg_err_t *err)
    __attribute__((warn_unused_result));

#endif
