/* sg_saga_query: the sagas as PostgreSQL has them, for on-call: one saga
 * (status), a page of sagas (list) and one saga's history (timeline).
 * The contract every operator query keeps (connection, JSON rows, errors):
 * sg_ops.h.  All three only read: a login of sagad_reader is enough. */
#ifndef SAGAD_SAGA_QUERY_H
#define SAGAD_SAGA_QUERY_H

#include <stdbool.h>
#include <stdint.h>

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"
#include "sagad/sg_ops.h"
#include "sagad/sg_pg.h"

#define SG_SAGA_LIST_DEFAULT 50
#define SG_SAGA_LIST_MAX     10000
#define SG_SAGA_ATTEMPTS_MAX 1000

/* The statuses a saga can have, NULL-terminated: what filter.status takes. */
extern const char *const sg_saga_statuses[];

/* Which sagas a list shows; zeroed means every saga, the first page. */
typedef struct sg_saga_filter_s {
    const char *status;  /* NULL, or one of sg_saga_statuses */
    const char *name;    /* NULL, or sagas of this name */
    sg_ops_when_t since; /* created at or after */
    sg_ops_when_t until; /* created before */
    /* > 0: stuck, that is running, compensating or cancelling with its row
     * unchanged for this many milliseconds (the worker writes the row with
     * every step outcome and status change). */
    int64_t stuck_ms;
    /* NULL, or the next page: sagas created before this saga (the last of
     * the previous page), by keyset on (created_at, saga_id). */
    const char *before;
    long limit;               /* 0: SG_SAGA_LIST_DEFAULT; at most SG_SAGA_LIST_MAX */
    const char *error_code;   /* NULL, or sagas with a step that failed with this code */
    bool awaiting_approval;   /* only sagas with a step waiting for a person */
    const char *submitted_by; /* NULL, or the sagas this principal submitted */
} sg_saga_filter_t;

/* One saga: {saga_id, name, status, generation, seq, created_at,
 * updated_at, submitted_by, idle_s (seconds since updated_at), steps_succeeded,
 * steps_total, at_step ({step, name, status} of the last step neither
 * pending, succeeded nor skipped; null when none), steps: [{step, name,
 * tool, status, attempts, error_code}]}.  *saga NULL (and 0 returned) when
 * there is no such saga.  Role: sagad_reader. */
int sg_saga_status(sg_pg_t *pg, const char *saga_id, sg_json_t **saga, sg_err_t *err)
    __attribute__((warn_unused_result));

/* A page of sagas, newest first (created_at, then saga_id): *rows an array
 * of the objects sg_saga_status gives, without steps; *more true when a
 * next page exists (its before: the saga_id of the last row).  Pages are
 * keyset pages on the index sagas_created (migration 0010), so the
 * millionth saga's page costs what the first one's does.  A filter value
 * that breaks a rule (status, limit, a before that names no saga, a since
 * or until PostgreSQL cannot read) is input.schema.invalid.
 * Role: sagad_reader. */
int sg_saga_list(sg_pg_t *pg, const sg_saga_filter_t *f, sg_json_t **rows, bool *more,
                 sg_err_t *err) __attribute__((warn_unused_result));

/* One saga's history from the tables: {saga_id, events: [{time, kind,
 * detail}] in time order (acceptance, every attempt and compensation with
 * generation, key and latency, dead letters, edits, replays, control
 * commands, discards, and "now"), steps: [{step, name, tool, status,
 * attempts, comp_attempts, idempotency_key, error_code}]}.  *timeline
 * NULL (and 0 returned) when there is neither a saga nor a dead letter of
 * that id.  Role: sagad_reader. */
int sg_saga_timeline(sg_pg_t *pg, const char *saga_id, sg_json_t **timeline, sg_err_t *err)
    __attribute__((warn_unused_result));

/* One page of a saga's attempts, forward calls and compensations, in the
 * order they were written: those with an id above after (0: from the
 * first), at most limit (1 to SG_SAGA_ATTEMPTS_MAX).  *rows an array of
 * {id, step, step_name, tool, phase (forward | compensate), generation,
 * attempt, status (null while the call runs or after a crash), error_code,
 * error_class, message, retriable, maybe_applied, retry_after_ms,
 * agent_action (the last six from the attempt's stored envelope, null
 * when it has none), idempotency_key, worker_id, started_at, finished_at,
 * latency_ms, waited_ms (since the previous attempt of the same step,
 * phase and generation ended; null for a first attempt)}; *more true when
 * a next page exists (its after: the last row's id).  Never the args sent.
 * An empty array for a saga with no attempts or no such saga: the caller
 * tells them apart.  A limit or after out of range is
 * input.schema.invalid.  Role: sagad_reader. */
int sg_saga_attempts(sg_pg_t *pg, const char *saga_id, int64_t after, long limit, sg_json_t **rows,
                     bool *more, sg_err_t *err) __attribute__((warn_unused_result));

#endif
