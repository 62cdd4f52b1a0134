/* sg_saga_query: status, list and timeline of sagas (sg_saga_query.h).
 *
 * list pages by keyset, newest first on (created_at, saga_id): the filters
 * are applied while walking the index sagas_created
 * (schemas/sql/0010_sagactl_list.sql), the page is cut there, and only the
 * page's sagas get their step counts. */
#include "sagad/sg_saga_query.h"

#include <stdio.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sg_ops_int.h"

const char *const sg_saga_statuses[] = {"running",      "held",        "completed",
                                        "compensating", "compensated", "failed",
                                        "cancelling",   "cancelled",   NULL};

/* One saga as status and list give it: s a sagas row, c its step counts
 * and a the step it is at (SAGA_JOINS). */
#define SAGA_FIELDS                                                                                \
    "'saga_id', s.saga_id, 'name', s.name, 'status', s.status, 'generation', s.generation, "       \
    "'seq', s.seq, 'created_at', s.created_at, 'updated_at', s.updated_at, "                       \
    "'submitted_by', s.submitted_by, "                                                             \
    "'idle_s', round(extract(epoch FROM now() - s.updated_at), 3), "                               \
    "'steps_succeeded', c.succeeded, 'steps_total', c.total, 'at_step', a.at"

#define SAGA_JOINS                                                                                 \
    " CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE st.status = 'succeeded') AS succeeded, "   \
    "  count(*) AS total FROM steps st WHERE st.saga_id = s.saga_id) c "                           \
    "LEFT JOIN LATERAL (SELECT jsonb_build_object('step', st.idx, 'name', st.name, 'status', "     \
    "  st.status) AS at FROM steps st WHERE st.saga_id = s.saga_id AND st.status NOT IN "          \
    "  ('pending', 'succeeded', 'skipped') ORDER BY st.idx DESC LIMIT 1) a ON true"

static const char status_sql[] =
    "SELECT jsonb_build_object(" SAGA_FIELDS ", 'steps', coalesce((SELECT jsonb_agg("
    " jsonb_build_object('step', st.idx, 'name', st.name, 'tool', st.tool, 'status', st.status, "
    " 'attempts', st.attempts, 'error_code', st.error_code) ORDER BY st.idx) FROM steps st "
    " WHERE st.saga_id = s.saga_id), '[]'))::text FROM sagas s" SAGA_JOINS " WHERE s.saga_id = $1";

int sg_saga_status(sg_pg_t *pg, const char *saga_id, sg_json_t **saga, sg_err_t *err)
{
    return sg_ops_row(pg, status_sql, 1, &saga_id, saga, err);
}

static bool known_status(const char *s)
{
    for (size_t i = 0; sg_saga_statuses[i]; i++)
        if (strcmp(sg_saga_statuses[i], s) == 0)
            return true;
    return false;
}

/* The WHERE clause of f, or -1 with err for a value that breaks a rule. */
static int filter_where(const sg_saga_filter_t *f, sg_ops_where_t *w, sg_err_t *err)
{
    if (f->status && !known_status(f->status))
        return sg_ops_bad(err,
                          "status %s: must be running, held, completed, compensating, "
                          "compensated, failed, cancelling or cancelled",
                          f->status);
    if (f->limit < 0 || f->limit > SG_SAGA_LIST_MAX)
        return sg_ops_bad(err, "limit %ld: must be a whole number from 1 to %d", f->limit,
                          SG_SAGA_LIST_MAX);
    if (f->stuck_ms < 0)
        return sg_ops_bad(err, "stuck %lld ms: must not be negative", (long long)f->stuck_ms);
    if (f->status)
        sg_ops_where_add(w, "s.status = $%d", sg_ops_where_param(w, f->status));
    if (f->name)
        sg_ops_where_add(w, "s.name = $%d", sg_ops_where_param(w, f->name));
    sg_ops_where_when(w, "s.created_at", ">=", &f->since);
    sg_ops_where_when(w, "s.created_at", "<", &f->until);
    /* Stuck: still in progress, and its row unchanged for that long. */
    if (f->stuck_ms > 0)
        sg_ops_where_add(w,
                         "s.status IN ('running', 'compensating', 'cancelling') AND "
                         "s.updated_at < now() - $%d::interval",
                         sg_ops_where_interval(w, f->stuck_ms));
    if (f->error_code)
        sg_ops_where_add(w,
                         "EXISTS (SELECT 1 FROM steps st WHERE st.saga_id = s.saga_id AND "
                         "st.error_code = $%d)",
                         sg_ops_where_param(w, f->error_code));
    if (f->awaiting_approval)
        sg_ops_where_add(w,
                         "EXISTS (SELECT 1 FROM steps st WHERE st.saga_id = s.saga_id AND "
                         "st.status = 'awaiting_approval' AND $%d::boolean)",
                         sg_ops_where_param(w, "true"));
    if (f->submitted_by)
        sg_ops_where_add(w, "s.submitted_by = $%d", sg_ops_where_param(w, f->submitted_by));
    if (f->before)
        sg_ops_where_add(w,
                         "(s.created_at, s.saga_id) < (SELECT created_at, saga_id FROM sagas "
                         "WHERE saga_id = $%d)",
                         sg_ops_where_param(w, f->before));
    return 0;
}

/* A page's before must name a saga: without one the keyset comparison
 * is NULL, and an empty page would look like the end of the list. */
static int before_exists(sg_pg_t *pg, const char *before, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    bool found;

    if (!before)
        return 0;
    if (sg_pg_exec(pg, "SELECT 1 FROM sagas WHERE saga_id = $1", 1, &before, &res, err) < 0)
        return -1;
    found = sg_pg_res_rows(res) > 0;
    sg_pg_res_destroy(res);
    if (!found)
        return sg_ops_bad(err,
                          "before %s: no such saga (it names the last saga of the previous "
                          "page)",
                          before);
    return 0;
}

int sg_saga_list(sg_pg_t *pg, const sg_saga_filter_t *f, sg_json_t **rows, bool *more,
                 sg_err_t *err)
{
    long limit = f->limit ? f->limit : SG_SAGA_LIST_DEFAULT;
    sg_pg_buf_t sql = {0};
    sg_ops_where_t w;
    int lim, rc = -1;

    *rows = NULL;
    *more = false;
    sg_ops_where_init(&w);
    if (filter_where(f, &w, err) < 0 || before_exists(pg, f->before, err) < 0)
        goto done;
    /* One row more than asked says whether there is a next page. */
    lim = sg_ops_where_param_own(&w, sg_xstrdup(SG_PG_INT(limit + 1)));
    sg_pg_buf_puts(&sql, "SELECT jsonb_build_object(" SAGA_FIELDS ")::text FROM (SELECT * FROM "
                         "sagas s");
    sg_pg_buf_puts(&sql, w.sql.data);
    sg_pg_buf_puts(&sql, " ORDER BY s.created_at DESC, s.saga_id DESC LIMIT $");
    sg_pg_buf_puts(&sql, SG_PG_INT(lim));
    sg_pg_buf_puts(&sql, "::int) s" SAGA_JOINS " ORDER BY s.created_at DESC, s.saga_id DESC");
    rc = sg_ops_rows_when(pg, sql.data, &w, (size_t)limit, &f->since, &f->until, rows, more, err);
done:
    sg_pg_buf_free(&sql);
    sg_ops_where_free(&w);
    return rc;
}

static const char timeline_sql[] =
    "SELECT jsonb_build_object('time', t, 'kind', kind, 'detail', detail)::text FROM ("
    " SELECT s.created_at AS t, 1 AS ord, 'accepted' AS kind, format('%s, %s steps, %s', s.name, "
    "  (SELECT count(*) FROM steps st WHERE st.saga_id = s.saga_id), "
    "  coalesce('submitted by ' || s.submitted_by || ' (verified)', 'unsigned')) AS detail "
    "  FROM sagas s WHERE s.saga_id = $1"
    " UNION ALL"
    " SELECT a.started_at, 2, CASE a.phase WHEN 'forward' THEN 'attempt' ELSE 'compensation' END,"
    "  format('step %s (%s) g%s #%s: %s%s, key %s%s%s', a.step_idx, st.name, a.generation, "
    "  a.attempt, coalesce(a.status, 'unfinished'), coalesce(' ' || a.error_code, ''), "
    "  a.idempotency_key, coalesce(', ' || a.latency_ms || ' ms', ''), "
    "  coalesce(', sent ' || a.args::text, '')) "
    "  FROM attempts a JOIN steps st ON st.saga_id = a.saga_id AND st.idx = a.step_idx "
    "  WHERE a.saga_id = $1"
    " UNION ALL"
    " SELECT d.created_at, 3, 'dead letter', format('#%s %s (%s)%s, %s: %s', d.id, d.error_code, "
    "  d.error_class, coalesce(' at step ' || d.step_idx || ' (' || d.step_name || ')', ''), "
    "  d.status, d.message) FROM dead_letters d WHERE d.saga_id = $1"
    " UNION ALL"
    " SELECT v.created_at, 4, 'edit', format('dead letter #%s revision %s by %s%s', "
    "  v.dead_letter_id, v.revision, v.operator, coalesce(': ' || v.reason, '')) "
    "  FROM dead_letter_revisions v JOIN dead_letters d ON d.id = v.dead_letter_id "
    "  WHERE d.saga_id = $1"
    " UNION ALL"
    " SELECT r.created_at, 5, 'replay', format('#%s of dead letter #%s by %s: %s%s%s%s%s (%s)', "
    "  r.id, r.dead_letter_id, r.operator, r.action, ', generation ' || r.new_generation, "
    "  ', key ' || r.new_key, "
    "  (SELECT ', kept steps ' || string_agg(e->>'step', ' ') FROM jsonb_array_elements("
    "   r.kept) e), "
    "  (SELECT ', REPEATED steps ' || string_agg(e->>'step', ' ') || ' (--rerun-from ' || "
    "   r.rerun_from || ')' FROM jsonb_array_elements(r.repeats) e), r.reason) "
    "  FROM replays r JOIN dead_letters d ON d.id = r.dead_letter_id WHERE d.saga_id = $1"
    " UNION ALL"
    " SELECT c.decided_at, 5, c.command, format('%s by %s%s%s: %s%s', c.outcome, "
    "  coalesce(c.principal || ' (verified)', c.requested_by || ' (unsigned)'), "
    "  CASE WHEN c.principal IS NOT NULL AND c.requested_by <> c.principal "
    "  THEN ' for ' || c.requested_by ELSE '' END, "
    "  coalesce(', step ' || c.step_idx, ''), c.reason, coalesce(' (' || c.error_code || ')', '')) "
    "  FROM saga_controls c WHERE c.saga_id = $1"
    " UNION ALL"
    " SELECT d.resolved_at, 6, 'discarded', format('dead letter #%s by %s: %s', d.id, "
    "  coalesce(d.resolved_by, '?'), d.resolution_reason) FROM dead_letters d "
    "  WHERE d.saga_id = $1 AND d.status = 'discarded'"
    " UNION ALL"
    " SELECT s.updated_at, 7, 'now', format('%s, generation %s, last event seq %s', s.status, "
    "  s.generation, s.seq) FROM sagas s WHERE s.saga_id = $1"
    ") x ORDER BY t, ord";

static const char steps_sql[] =
    "SELECT jsonb_build_object('step', idx, 'name', name, 'tool', tool, 'status', status, "
    "'attempts', attempts, 'comp_attempts', comp_attempts, 'idempotency_key', idempotency_key, "
    "'error_code', error_code)::text FROM steps WHERE saga_id = $1 ORDER BY idx";

int sg_saga_timeline(sg_pg_t *pg, const char *saga_id, sg_json_t **timeline, sg_err_t *err)
{
    sg_json_t *events = NULL, *steps = NULL;

    *timeline = NULL;
    if (sg_ops_rows(pg, timeline_sql, 1, &saga_id, 0, &events, NULL, err) < 0 ||
        sg_ops_rows(pg, steps_sql, 1, &saga_id, 0, &steps, NULL, err) < 0) {
        sg_json_destroy(events);
        return -1;
    }
    if (sg_json_array_size(events) == 0) {
        sg_json_destroy(events);
        sg_json_destroy(steps);
        return 0;
    }
    *timeline = sg_json_new_object();
    sg_json_add_str(*timeline, "saga_id", saga_id);
    sg_json_add_node(*timeline, "events", events);
    sg_json_add_node(*timeline, "steps", steps);
    return 0;
}

/* A saga's attempts in the order they were written (attempts.id, a
 * bigserial): the first page walks the saga's rows of index attempts_step,
 * a later one starts after the last id it gave.  waited_ms is what the
 * previous attempt of the same step, phase and generation left between
 * its end and this start (one index lookup a row): the delay the worker
 * scheduled is in the step.retry_scheduled event only. */
static const char attempts_sql[] =
    "SELECT jsonb_build_object('id', a.id, 'step', a.step_idx, 'step_name', st.name, "
    " 'tool', st.tool, 'phase', a.phase, 'generation', a.generation, 'attempt', a.attempt, "
    " 'status', a.status, 'error_code', a.error_code, 'error_class', a.error_class, "
    " 'message', a.envelope->>'message', 'retriable', a.envelope->'retriable', "
    " 'maybe_applied', a.envelope->'metadata'->'maybe_applied', "
    " 'retry_after_ms', a.envelope->'metadata'->'retry_after_ms', "
    " 'agent_action', a.envelope->>'agent_action', 'idempotency_key', a.idempotency_key, "
    " 'worker_id', a.worker_id, 'started_at', a.started_at, 'finished_at', a.finished_at, "
    " 'latency_ms', a.latency_ms, 'waited_ms', (SELECT round(extract(epoch FROM a.started_at - "
    "  p.finished_at) * 1000)::bigint FROM attempts p WHERE p.saga_id = a.saga_id AND "
    "  p.step_idx = a.step_idx AND p.phase = a.phase AND p.generation = a.generation AND "
    "  p.attempt = a.attempt - 1 ORDER BY p.id DESC LIMIT 1))::text "
    "FROM attempts a JOIN steps st ON st.saga_id = a.saga_id AND st.idx = a.step_idx "
    "WHERE a.saga_id = $1 AND a.id > $2::bigint ORDER BY a.id LIMIT $3::int";

int sg_saga_attempts(sg_pg_t *pg, const char *saga_id, int64_t after, long limit, sg_json_t **rows,
                     bool *more, sg_err_t *err)
{
    char after_s[24], limit_s[24];
    const char *params[] = {saga_id, after_s, limit_s};

    *rows = NULL;
    *more = false;
    if (limit < 1 || limit > SG_SAGA_ATTEMPTS_MAX)
        return sg_ops_bad(err, "limit %ld: must be a whole number from 1 to %d", limit,
                          SG_SAGA_ATTEMPTS_MAX);
    if (after < 0)
        return sg_ops_bad(err, "after %lld: must not be negative", (long long)after);
    snprintf(after_s, sizeof(after_s), "%lld", (long long)after);
    /* One row more than asked says whether there is a next page. */
    snprintf(limit_s, sizeof(limit_s), "%ld", limit + 1);
    return sg_ops_rows(pg, attempts_sql, 3, params, (size_t)limit, rows, more, err);
}
