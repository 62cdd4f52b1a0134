/* sg_dlq_query: the dead-letter ledger for operators: find entries (list,
 * groups, stats), read one (show), and act on one (replay, discard, edit)
 * through the sagad_dlq_* functions of the schema, each one entry in one
 * transaction (schemas/sql/0006, 0013, 0015).  The contract every operator
 * query keeps (connection, JSON rows, errors): sg_ops.h.
 *
 * Roles: what reads needs a login of sagad_reader; replay, discard and
 * edit need sagad_operator (the functions' EXECUTE is granted to it only),
 * and record the login beside the declared name (`by`). */
#ifndef SAGAD_DLQ_QUERY_H
#define SAGAD_DLQ_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"
#include "sagad/sg_ops.h"
#include "sagad/sg_pg.h"

#define SG_DLQ_LIST_DEFAULT 50
#define SG_DLQ_LIST_MAX     1000000

/* Which entries; zeroed means every entry (the first page of a list). */
typedef struct sg_dlq_filter_s {
    const char *code;        /* error code; a trailing '*' matches a prefix ("tool.http.*") */
    const char *error_class; /* transient, throttled, timeout, permanent or poison */
    const char *saga;        /* entries of one saga */
    const char *tool;        /* entries of steps calling this tool */
    const char *step;        /* a step index (digits) or a step name */
    sg_ops_when_t since;     /* created at or after */
    sg_ops_when_t until;     /* created before */
    const char *status;      /* pending, replayed, discarded, or any (as NULL) */
    int64_t before;          /* > 0: entries older than this ID (the next page) */
    long limit;              /* list: 0 is SG_DLQ_LIST_DEFAULT, at most SG_DLQ_LIST_MAX;
                                ids: 0 is no limit */
} sg_dlq_filter_t;

/* A dead-letter ID from text: digits only, at most 18 of them. */
bool sg_dlq_id_parse(const char *text, int64_t *id);

/* Entries newest first (by ID): *rows an array of {id, status, created_at,
 * error_code, error_class, message, saga_id, saga_name, step, step_name,
 * tool, phase, attempts, original_topic, first_failure_at, last_failure_at,
 * resolved_at, revisions (edits saved), replays (replays made)}; *more true
 * when a next page exists (before: the last row's id).  A filter value
 * that breaks a rule is input.schema.invalid, naming the field (class,
 * status, limit, since, until).  Role: sagad_reader. */
int sg_dlq_list(sg_pg_t *pg, const sg_dlq_filter_t *f, sg_json_t **rows, bool *more, sg_err_t *err)
    __attribute__((warn_unused_result));

/* The IDs of the entries f selects, oldest first, at most f->limit (0:
 * all): what a bulk replay works through.  *ids malloc'd (free it), *n
 * their count.  Role: sagad_reader. */
int sg_dlq_ids(sg_pg_t *pg, const sg_dlq_filter_t *f, int64_t **ids, size_t *n, sg_err_t *err)
    __attribute__((warn_unused_result));

/* The entries f selects grouped by error code and tool (null for entries
 * of no step): *rows an array of {error_code, tool, count, pending,
 * replayed, discarded, sagas (distinct), first_seen, last_seen (the
 * entries' created_at)}, most pending first, then largest, then latest.
 * Role: sagad_reader. */
int sg_dlq_groups(sg_pg_t *pg, const sg_dlq_filter_t *f, sg_json_t **rows, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Counts of the whole ledger: {pending, replayed, discarded,
 * oldest_pending_id (null when none), oldest_pending_age_s,
 * oldest_pending_at, by_code: [{error_code, error_class, pending, replayed,
 * discarded, total}], pending_by_age: {"< 1h": n, "1h - 24h": n, "1d -
 * 7d": n, "> 7d": n}, replays_by_outcome: {outcome: n}} where a replay's
 * outcome is its saga's status now, "superseded" (replayed again since),
 * "resubmitted" or "saga_gone".  Role: sagad_reader. */
int sg_dlq_stats(sg_pg_t *pg, sg_json_t **stats, sg_err_t *err) __attribute__((warn_unused_result));

/* One entry: {record: the DLQ record (sagad_dead_letter_record: error,
 * saga, step, attempt trail, original topic/partition/offset/key/headers,
 * payload, steps_at), resolved_at, resolved_by, resolution_reason,
 * revisions: [{revision, operator, reason, created_at, payload}],
 * replays: [{id, operator, reason, created_at, action, new_generation,
 * new_key, revision, forced, rerun_from, kept, repeats}], steps_at, saga:
 * {saga_id, name, status, generation, updated_at, steps: [...]} or null}.
 * *entry NULL (and 0 returned) when there is no such entry.
 * Role: sagad_reader. */
int sg_dlq_show(sg_pg_t *pg, int64_t id, sg_json_t **entry, sg_err_t *err)
    __attribute__((warn_unused_result));

/* What one replay asks (docs/DLQ.md, "What a replay does"). */
typedef struct sg_dlq_replay_req_s {
    int64_t id;
    const char *by;             /* who replays (replays.operator) */
    const char *reason;         /* why: required unless dry_run */
    bool force;                 /* replay an entry already replayed or discarded */
    bool dry_run;               /* the plan only: nothing changes, not even a sequence */
    const char *internal_topic; /* where a replayed step command goes (topic.internal) */
    const char *rerun_from;     /* NULL, or a step (index or name) to run again from */
} sg_dlq_replay_req_t;

/* Replays one entry in one transaction (sagad_dlq_replay: a replays row,
 * the entry marked, the saga's new generation, the command in the outbox),
 * or with dry_run says what it would do.  *result {id, outcome (replayed,
 * would_replay, refused, missing), action, saga_id, saga_status,
 * new_generation, step, new_key, replay_id, revision, topic, detail (the
 * sentence for a person), rerun_from, kept: [{step, name, tool, status,
 * effect, key, how}], repeats: [the same, and old_key]}.  A refusal is an
 * outcome, not an error.  A schema older than migration 0015 is
 * runtime.schema.old.  Role: sagad_operator. */
int sg_dlq_replay(sg_pg_t *pg, const sg_dlq_replay_req_t *req, sg_json_t **result, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Marks one entry resolved without replay, with who and why
 * (sagad_dlq_discard), releasing the hold of its saga if held (the saga
 * compensates now).  *result {id, outcome (discarded, refused, missing),
 * released, detail}.  reason is required.  Role: sagad_operator. */
int sg_dlq_discard(sg_pg_t *pg, int64_t id, const char *by, const char *reason, sg_json_t **result,
                   sg_err_t *err) __attribute__((warn_unused_result));

/* The payload an edit starts from: {id, status, step (null for a rejected
 * submission, the only kind edited), revision (0: the original), payload
 * (its latest revision, null when not UTF-8)}; *cur NULL when there is no
 * such entry.  Role: sagad_reader. */
int sg_dlq_payload(sg_pg_t *pg, int64_t id, sg_json_t **cur, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Saves payload as the entry's next revision (sagad_dlq_edit; the
 * original is never changed, replay uses the latest).  The caller checks
 * it first with the worker's rules (sg_check_submission); the database
 * keeps only a JSON object.  *result {id, revision}, NULL when there is no
 * such entry.  reason may be NULL.  Role: sagad_operator. */
int sg_dlq_edit(sg_pg_t *pg, int64_t id, const char *payload, const char *by, const char *reason,
                sg_json_t **result, sg_err_t *err) __attribute__((warn_unused_result));

#endif
