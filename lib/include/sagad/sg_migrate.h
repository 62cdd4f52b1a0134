/* sg_migrate: numbered SQL migrations, embedded in every binary.
 *
 * The files schemas/sql/NNNN_name.sql are compiled in (see
 * schemas/embed-sql.sh).  Running them takes a session advisory lock, so two
 * processes migrating at once serialise: the second finds the work done.
 * Each migration runs in its own transaction together with the row that
 * records it in sagad_schema_migrations. */
#ifndef SAGAD_MIGRATE_H
#define SAGAD_MIGRATE_H

#include <stddef.h>

#include "sagad/sg_err.h"
#include "sagad/sg_pg.h"

typedef struct sg_migration_s {
    int version;
    const char *name;
    const char *sql;
} sg_migration_t;

/* The advisory lock key migrations hold ("sagad.migrate"). */
#define SG_MIGRATE_LOCK_KEY 0x5a6ad0010001LL

/* The outbox's wake-up (migration 0009): the relay LISTENs on
 * SG_OUTBOX_CHANNEL.  A session that ran SG_OUTBOX_NOTIFY_OFF is not
 * notified for by the outbox trigger: after the COMMIT of a transaction
 * that wrote outbox rows it sends SG_OUTBOX_NOTIFY, in a transaction of
 * its own, which keeps the cluster-wide NOTIFY lock out of its commit. */
#define SG_OUTBOX_CHANNEL    "sagad_outbox"
#define SG_OUTBOX_NOTIFY_OFF "SET sagad.outbox_notify = off"
#define SG_OUTBOX_NOTIFY     "SELECT pg_notify('" SG_OUTBOX_CHANNEL "', '')"
/* The same from a transaction that wrote timers: the relay moves due
 * timers only when the next one it knows of is due, at least once every
 * relay.poll_interval_ms, and when this payload tells it of new ones. */
#define SG_OUTBOX_TIMERS_MARK "timers"
#define SG_OUTBOX_NOTIFY_TIMERS                                                                    \
    "SELECT pg_notify('" SG_OUTBOX_CHANNEL "', '" SG_OUTBOX_TIMERS_MARK "')"

/* The embedded migrations, in version order. */
const sg_migration_t *sg_migrate_list(size_t *count);

/* Version of the newest embedded migration. */
int sg_migrate_latest(void);

/* Checks the embedded list: versions strictly increasing from 1.  Returns
 * -1 with errstr naming the offending file otherwise. */
int sg_migrate_check_list(char *errstr, size_t errstr_size);

/* The schema version recorded in the database (0 when never migrated). */
int sg_migrate_current(sg_pg_t *pg, int *version, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Applies every migration newer than the database's version.  *from and
 * *to (may be NULL) receive the versions before and after.  Refuses, with
 * code runtime.schema.newer, a database whose version is newer than this
 * binary knows. */
int sg_migrate_run(sg_pg_t *pg, int *from, int *to, sg_err_t *err)
    __attribute__((warn_unused_result));

#endif
