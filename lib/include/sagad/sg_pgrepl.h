/* A logical replication session on libpq (the WAL source of sagad-relay;
 * docs/RELAY.md, "The WAL source"): a connection with replication=database,
 * a pgoutput slot, the CopyBoth stream and standby status updates. */
#ifndef SAGAD_SG_PGREPL_H
#define SAGAD_SG_PGREPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_err.h"

typedef struct sg_pgrepl_s sg_pgrepl_t;

/* Connects to dsn (URL or key=value) as a replication session of its
 * database.  wal_sender_timeout_ms is set for this session only: the
 * server ends it when the relay stays silent that long. */
sg_pgrepl_t *sg_pgrepl_connect(const char *dsn, const char *appname, int wal_sender_timeout_ms,
                               sg_err_t *err) __attribute__((warn_unused_result));
void sg_pgrepl_close(sg_pgrepl_t *rp);

/* The server process of the session (pg_replication_slots.active_pid while
 * it streams). */
int sg_pgrepl_pid(const sg_pgrepl_t *rp);

/* Which WAL history the session reads (IDENTIFY_SYSTEM), as
 * "<system identifier>/<timeline>/<database>": a restore into a new
 * cluster changes the first, a failover to a standby the second. */
int sg_pgrepl_identify(sg_pgrepl_t *rp, char *history, size_t size, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Makes the pgoutput slot unless it exists.  *created: whether it did.
 * Waits, as the server does, for transactions running at that moment. */
int sg_pgrepl_create_slot(sg_pgrepl_t *rp, const char *slot, bool *created, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Drops the slot (one PostgreSQL invalidated: it can never be read
 * again).  A slot that does not exist is not an error. */
int sg_pgrepl_drop_slot(sg_pgrepl_t *rp, const char *slot, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Starts streaming from the slot's confirmed position: pgoutput protocol
 * 1, the publication, messages on.  A slot another session streams from
 * fails with code pg.slot_busy (transient: a standby waits for it). */
int sg_pgrepl_start(sg_pgrepl_t *rp, const char *slot, const char *publication, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Waits up to timeout_ms (0: does not wait) for the next CopyData
 * message.  Returns 1 with buf and len set (valid until the next call), 0 when
 * none came in time, -1 with err when the stream or session ended. */
int sg_pgrepl_read(sg_pgrepl_t *rp, int timeout_ms, const unsigned char **buf, size_t *len,
                   sg_err_t *err) __attribute__((warn_unused_result));

/* Sends a standby status update: everything up to lsn is written, flushed
 * and applied (the slot may forget it). */
int sg_pgrepl_confirm(sg_pgrepl_t *rp, uint64_t lsn, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Microseconds since 2000-01-01, PostgreSQL's epoch. */
int64_t sg_pgrepl_now_us(void);

#endif
