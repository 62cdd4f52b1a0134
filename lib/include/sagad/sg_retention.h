/* sg_retention: how long finished work is kept, and the janitor's passes.
 *
 * Horizons (the retention.* keys, docs/OPERATIONS.md "Retention"):
 *   - a finished saga (completed, compensated, failed, cancelled) goes
 *     with its steps, attempts and control history retention.sagas_s after
 *     its last change, unless a dead letter still names it (its replay
 *     needs it);
 *   - a handled dead letter (replayed, discarded) goes with its replays and
 *     payload revisions retention.dead_letters_s after it was resolved;
 *   - a pending dead letter, and a saga not finished, are never removed;
 *   - the builtin ledger's rows go retention.sagas_s after their last call.
 * A saga_id is remembered while its saga row exists: the deduplication
 * window is the sagas' horizon (retention.dedup_window_s must equal it).
 *
 * A pass removes expired rows in batches of at most batch_size sagas or
 * dead letters, one short transaction each, with pause_ms between them, so
 * no lock is held for long and autovacuum keeps up with the dead rows. */
#ifndef SAGAD_RETENTION_H
#define SAGAD_RETENTION_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_config.h"
#include "sagad/sg_err.h"
#include "sagad/sg_pg.h"

/* The tables a pass removes rows from (labels of
 * sagad_retention_removed_total). */
typedef enum sg_retention_table_e {
    SG_RET_SAGAS,
    SG_RET_STEPS,
    SG_RET_ATTEMPTS,
    SG_RET_DEAD_LETTERS,
    SG_RET_REPLAYS,
    SG_RET_REVISIONS,
    SG_RET_BUILTIN_LEDGER,
    SG_RET__COUNT
} sg_retention_table_t;

/* "sagas", "steps", ... "dead_letter_revisions", "builtin_ledger". */
const char *sg_retention_table_name(sg_retention_table_t t);

typedef struct sg_retention_opts_s {
    int64_t sagas_s;            /* finished sagas (and the builtin ledger) */
    int64_t dead_letters_s;     /* handled dead letters */
    int64_t batch_size;         /* sagas or dead letters per transaction */
    int64_t pause_ms;           /* between two batches */
    volatile sig_atomic_t *run; /* NULL, or a flag that ends the pass early when 0 */
} sg_retention_opts_t;

/* Fills opts from the retention.* keys of cfg. */
void sg_retention_opts_from_config(sg_retention_opts_t *opts, const sg_config_t *cfg);

/* Refuses horizons that contradict each other: one line naming both keys
 * in errstr, -1.  Every binary calls it at start (sg_cli). */
int sg_retention_check(const sg_config_t *cfg, char *errstr, size_t errstr_size)
    __attribute__((warn_unused_result));

/* One pass: removes every row expired when each batch starts, batch by
 * batch, adding what each committed batch removed to removed[table] and to
 * sagad_retention_removed_total.  Returns 0, or -1 with err when a
 * statement failed (what earlier batches removed stays removed). */
int sg_retention_pass(sg_pg_t *pg, const sg_retention_opts_t *opts, int64_t removed[SG_RET__COUNT],
                      sg_err_t *err) __attribute__((warn_unused_result));

/* Tables whose rows have a horizon of their own (labels of
 * sagad_retention_oldest_age_seconds): sagas, dead_letters, builtin_ledger.
 * Steps, attempts, replays and revisions go with their saga or dead letter. */
#define SG_RET_NAGED 3

/* Sets sagad_retention_oldest_age_seconds: for sagas, the oldest finished
 * saga no dead letter keeps (by its last change); for dead_letters, the
 * oldest handled one (by its resolution); for builtin_ledger, the oldest
 * last call.  0 when there is none.  age[] gets the same values when not
 * NULL (sagas, dead_letters, builtin_ledger). */
int sg_retention_export_ages(sg_pg_t *pg, double age[SG_RET_NAGED], sg_err_t *err)
    __attribute__((warn_unused_result));

#endif
