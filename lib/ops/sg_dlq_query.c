/* sg_dlq_query: the dead-letter ledger's queries (sg_dlq_query.h).  The
 * writes are the schema's functions, one statement each, so one
 * transaction each: an entry is either fully replayed, discarded or edited,
 * or untouched, whatever happens to the caller. */
#include "sagad/sg_dlq_query.h"

#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sg_ops_int.h"

bool sg_dlq_id_parse(const char *text, int64_t *id)
{
    size_t n = text ? strlen(text) : 0;

    if (n == 0 || n > 18 || strspn(text, "0123456789") != n)
        return false;
    *id = strtoll(text, NULL, 10);
    return true;
}

/* error_code LIKE for "prefix*", LIKE's own characters escaped. */
static char *code_prefix(const char *code, size_t len)
{
    char *own = sg_xmalloc(2 * len + 2);
    size_t o = 0;

    for (size_t i = 0; i + 1 < len; i++) {
        if (code[i] == '%' || code[i] == '_' || code[i] == '\\')
            own[o++] = '\\';
        own[o++] = code[i];
    }
    own[o++] = '%';
    own[o] = '\0';
    return own;
}

static bool all_digits(const char *s)
{
    return *s && strspn(s, "0123456789") == strlen(s);
}

static int check_filter(const sg_dlq_filter_t *f, sg_err_t *err)
{
    sg_errclass_t cls;

    if (f->error_class && (sg_errclass_parse(f->error_class, &cls) < 0 || cls == SG_ERRCLASS_NONE))
        return sg_ops_bad(err,
                          "class %s: must be transient, throttled, timeout, permanent or poison",
                          f->error_class);
    if (f->status && strcmp(f->status, "pending") != 0 && strcmp(f->status, "replayed") != 0 &&
        strcmp(f->status, "discarded") != 0 && strcmp(f->status, "any") != 0)
        return sg_ops_bad(err, "status %s: must be pending, replayed, discarded or any", f->status);
    if (f->limit < 0 || f->limit > SG_DLQ_LIST_MAX)
        return sg_ops_bad(err, "limit %ld: must be a whole number from 1 to %d", f->limit,
                          SG_DLQ_LIST_MAX);
    if (f->before < 0)
        return sg_ops_bad(err, "before %lld: a dead-letter ID is a positive number",
                          (long long)f->before);
    return 0;
}

/* The WHERE clause on dead_letters d of f, or -1 with err. */
static int filter_where(const sg_dlq_filter_t *f, sg_ops_where_t *w, sg_err_t *err)
{
    size_t len = f->code ? strlen(f->code) : 0;

    if (check_filter(f, err) < 0)
        return -1;
    if (len > 0 && f->code[len - 1] == '*')
        sg_ops_where_add(w, "d.error_code LIKE $%d",
                         sg_ops_where_param_own(w, code_prefix(f->code, len)));
    else if (f->code)
        sg_ops_where_add(w, "d.error_code = $%d", sg_ops_where_param(w, f->code));
    if (f->error_class)
        sg_ops_where_add(w, "d.error_class = $%d", sg_ops_where_param(w, f->error_class));
    if (f->saga)
        sg_ops_where_add(w, "d.saga_id = $%d", sg_ops_where_param(w, f->saga));
    if (f->tool)
        sg_ops_where_add(w, "d.tool = $%d", sg_ops_where_param(w, f->tool));
    if (f->step)
        sg_ops_where_add(w, all_digits(f->step) ? "d.step_idx = $%d::int" : "d.step_name = $%d",
                         sg_ops_where_param(w, f->step));
    sg_ops_where_when(w, "d.created_at", ">=", &f->since);
    sg_ops_where_when(w, "d.created_at", "<", &f->until);
    if (f->status && strcmp(f->status, "any") != 0)
        sg_ops_where_add(w, "d.status = $%d", sg_ops_where_param(w, f->status));
    if (f->before > 0)
        sg_ops_where_add(w, "d.id < $%d::bigint",
                         sg_ops_where_param_own(w, sg_xstrdup(SG_PG_INT(f->before))));
    return 0;
}

/* Runs head, f's WHERE clause, tail and LIMIT limit (none when 0), and
 * reads at most max rows (0: all).  A pg.data failure is put on the since
 * or until PostgreSQL could not read. */
static int run_filtered(sg_pg_t *pg, const sg_dlq_filter_t *f, const char *head, const char *tail,
                        long limit, size_t max, sg_json_t **rows, bool *more, sg_err_t *err)
{
    sg_pg_buf_t sql = {0};
    sg_ops_where_t w;
    int rc = -1;

    *rows = NULL;
    sg_ops_where_init(&w);
    if (filter_where(f, &w, err) < 0)
        goto done;
    sg_pg_buf_puts(&sql, head);
    sg_pg_buf_puts(&sql, w.sql.data);
    sg_pg_buf_puts(&sql, tail);
    if (limit > 0) {
        sg_pg_buf_puts(&sql, " LIMIT $");
        sg_pg_buf_puts(&sql, SG_PG_INT(sg_ops_where_param_own(&w, sg_xstrdup(SG_PG_INT(limit)))));
    }
    rc = sg_ops_rows_when(pg, sql.data, &w, max, &f->since, &f->until, rows, more, err);
done:
    sg_pg_buf_free(&sql);
    sg_ops_where_free(&w);
    return rc;
}

int sg_dlq_list(sg_pg_t *pg, const sg_dlq_filter_t *f, sg_json_t **rows, bool *more, sg_err_t *err)
{
    long limit = f->limit ? f->limit : SG_DLQ_LIST_DEFAULT;

    /* One row more than asked says whether there is a next page. */
    return run_filtered(
        pg, f,
        "SELECT jsonb_build_object('id', d.id, 'status', d.status, 'created_at', d.created_at, "
        "'error_code', d.error_code, 'error_class', d.error_class, 'message', d.message, "
        "'saga_id', d.saga_id, 'saga_name', d.saga_name, 'step', d.step_idx, "
        "'step_name', d.step_name, 'tool', d.tool, 'phase', d.phase, 'attempts', d.attempts, "
        "'original_topic', d.original_topic, 'first_failure_at', d.first_failure_at, "
        "'last_failure_at', d.last_failure_at, 'resolved_at', d.resolved_at, "
        "'revisions', (SELECT count(*) FROM dead_letter_revisions v "
        "  WHERE v.dead_letter_id = d.id), "
        "'replays', (SELECT count(*) FROM replays r WHERE r.dead_letter_id = d.id))::text "
        "FROM dead_letters d",
        " ORDER BY d.id DESC", limit + 1, (size_t)limit, rows, more, err);
}

int sg_dlq_ids(sg_pg_t *pg, const sg_dlq_filter_t *f, int64_t **ids, size_t *n, sg_err_t *err)
{
    sg_dlq_filter_t all = *f;
    sg_json_t *rows;

    *ids = NULL;
    *n = 0;
    if (f->limit < 0)
        return sg_ops_bad(err, "limit %ld: must be a whole number from 1", f->limit);
    all.limit = 0; /* the list's cap is not the selection's */
    /* An ID's text is a JSON number. */
    if (run_filtered(pg, &all, "SELECT d.id FROM dead_letters d", " ORDER BY d.id", f->limit, 0,
                     &rows, NULL, err) < 0)
        return -1;
    *n = sg_json_array_size(rows);
    *ids = sg_xcalloc(*n + 1, sizeof(**ids));
    for (size_t i = 0; i < *n; i++) {
        char *text = sg_json_print(sg_json_array_get(rows, i));
        (*ids)[i] = strtoll(text, NULL, 10);
        free(text);
    }
    sg_json_destroy(rows);
    return 0;
}

int sg_dlq_groups(sg_pg_t *pg, const sg_dlq_filter_t *f, sg_json_t **rows, sg_err_t *err)
{
    sg_dlq_filter_t all = *f;

    all.limit = 0;
    return run_filtered(
        pg, &all,
        "SELECT jsonb_build_object('error_code', d.error_code, 'tool', d.tool, "
        "'count', count(*), 'pending', count(*) FILTER (WHERE d.status = 'pending'), "
        "'replayed', count(*) FILTER (WHERE d.status = 'replayed'), "
        "'discarded', count(*) FILTER (WHERE d.status = 'discarded'), "
        "'sagas', count(DISTINCT d.saga_id), 'first_seen', min(d.created_at), "
        "'last_seen', max(d.created_at))::text FROM dead_letters d",
        " GROUP BY d.error_code, d.tool ORDER BY count(*) FILTER (WHERE d.status = 'pending') "
        "DESC, count(*) DESC, max(d.created_at) DESC, d.error_code, d.tool",
        0, 0, rows, NULL, err);
}

static const char stats_summary_sql[] =
    "SELECT jsonb_build_object('pending', count(*) FILTER (WHERE status = 'pending'), "
    "'replayed', count(*) FILTER (WHERE status = 'replayed'), "
    "'discarded', count(*) FILTER (WHERE status = 'discarded'), "
    "'oldest_pending_id', (SELECT min(id) FROM dead_letters WHERE status = 'pending' AND "
    "  created_at = (SELECT min(created_at) FROM dead_letters WHERE status = 'pending')), "
    "'oldest_pending_age_s', coalesce(floor(extract(epoch FROM now() - min(created_at) FILTER "
    "  (WHERE status = 'pending')))::bigint, 0), "
    "'oldest_pending_at', min(created_at) FILTER (WHERE status = 'pending'))::text "
    "FROM dead_letters";

static const char stats_by_code_sql[] =
    "SELECT jsonb_build_object('error_code', error_code, 'error_class', error_class, "
    "'pending', count(*) FILTER (WHERE status = 'pending'), "
    "'replayed', count(*) FILTER (WHERE status = 'replayed'), "
    "'discarded', count(*) FILTER (WHERE status = 'discarded'), 'total', count(*))::text "
    "FROM dead_letters GROUP BY error_code, error_class "
    "ORDER BY count(*) FILTER (WHERE status = 'pending') DESC, count(*) DESC, error_code";

/* [label, count] pairs, in the buckets' order. */
static const char stats_by_age_sql[] =
    "SELECT jsonb_build_array(b.label, count(d.id))::text FROM (VALUES "
    "(1, '< 1h', interval '0', interval '1 hour'), "
    "(2, '1h - 24h', interval '1 hour', interval '1 day'), "
    "(3, '1d - 7d', interval '1 day', interval '7 days'), "
    "(4, '> 7d', interval '7 days', interval '100 years')) b(ord, label, lo, hi) "
    "LEFT JOIN dead_letters d ON d.status = 'pending' AND now() - d.created_at >= b.lo "
    "AND now() - d.created_at < b.hi GROUP BY b.ord, b.label ORDER BY b.ord";

/* A replay's outcome: what became of the saga it re-injected. */
static const char stats_replays_sql[] =
    "SELECT jsonb_build_array(o, count(*))::text FROM (SELECT CASE WHEN r.action = 'resubmit' "
    "  THEN 'resubmitted' WHEN s.saga_id IS NULL THEN 'saga_gone' "
    "  WHEN s.generation <> r.new_generation THEN 'superseded' ELSE s.status END AS o "
    "  FROM replays r JOIN dead_letters d ON d.id = r.dead_letter_id "
    "  LEFT JOIN sagas s ON s.saga_id = d.saga_id) x GROUP BY o ORDER BY o";

/* [[name, n], ...] as the object {name: n, ...}, in order (jsonb would
 * sort the names). */
static sg_json_t *pairs_object(const sg_json_t *pairs)
{
    sg_json_t *o = sg_json_new_object();

    for (const sg_json_t *p = sg_json_first(pairs); p; p = sg_json_next(p)) {
        const char *name = sg_json_string(sg_json_array_get(p, 0));
        double n = 0;

        sg_json_number(sg_json_array_get(p, 1), &n);
        if (name)
            sg_json_add_int(o, name, (int64_t)n);
    }
    return o;
}

int sg_dlq_stats(sg_pg_t *pg, sg_json_t **stats, sg_err_t *err)
{
    sg_json_t *by_code = NULL, *by_age = NULL, *replays = NULL;
    int rc = -1;

    *stats = NULL;
    if (sg_ops_row(pg, stats_summary_sql, 0, NULL, stats, err) < 0 ||
        sg_ops_rows(pg, stats_by_code_sql, 0, NULL, 0, &by_code, NULL, err) < 0 ||
        sg_ops_rows(pg, stats_by_age_sql, 0, NULL, 0, &by_age, NULL, err) < 0 ||
        sg_ops_rows(pg, stats_replays_sql, 0, NULL, 0, &replays, NULL, err) < 0)
        goto done;
    sg_json_add_node(*stats, "by_code", by_code);
    by_code = NULL;
    sg_json_add_node(*stats, "pending_by_age", pairs_object(by_age));
    sg_json_add_node(*stats, "replays_by_outcome", pairs_object(replays));
    rc = 0;
done:
    if (rc < 0) {
        sg_json_destroy(*stats);
        *stats = NULL;
    }
    sg_json_destroy(by_code);
    sg_json_destroy(by_age);
    sg_json_destroy(replays);
    return rc;
}

static const char show_sql[] =
    "SELECT jsonb_build_object('record', sagad_dead_letter_record(d), "
    "'resolved_at', d.resolved_at, 'resolution_reason', d.resolution_reason, "
    "'resolved_by', d.resolved_by, "
    "'revisions', coalesce((SELECT jsonb_agg(jsonb_build_object('revision', v.revision, "
    "  'operator', v.operator, 'reason', v.reason, 'created_at', v.created_at, "
    "  'payload', sagad_utf8(v.payload)) ORDER BY v.revision) FROM dead_letter_revisions v "
    "  WHERE v.dead_letter_id = d.id), '[]'), "
    "'replays', coalesce((SELECT jsonb_agg(jsonb_build_object('id', r.id, 'operator', "
    "  r.operator, 'reason', r.reason, 'created_at', r.created_at, 'action', r.action, "
    "  'new_generation', r.new_generation, 'new_key', r.new_key, 'revision', r.revision, "
    "  'forced', r.forced, 'rerun_from', r.rerun_from, 'kept', r.kept, 'repeats', r.repeats) "
    "  ORDER BY r.id) FROM replays r WHERE r.dead_letter_id = d.id), '[]'), "
    "'steps_at', d.steps_at, "
    "'saga', (SELECT jsonb_build_object('saga_id', s.saga_id, 'name', s.name, 'status', "
    "  s.status, 'generation', s.generation, 'updated_at', s.updated_at, 'steps', "
    "  (SELECT jsonb_agg(jsonb_build_object('step', st.idx, 'name', st.name, 'tool', st.tool, "
    "   'status', st.status, 'attempts', st.attempts, 'comp_attempts', st.comp_attempts, "
    "   'idempotency_key', st.idempotency_key, 'error_code', st.error_code) ORDER BY st.idx) "
    "   FROM steps st WHERE st.saga_id = s.saga_id)) FROM sagas s WHERE s.saga_id = d.saga_id)"
    ")::text FROM dead_letters d WHERE d.id = $1::bigint";

int sg_dlq_show(sg_pg_t *pg, int64_t id, sg_json_t **entry, sg_err_t *err)
{
    const char *param = SG_PG_INT(id);

    return sg_ops_row(pg, show_sql, 1, &param, entry, err);
}

static const char replay_sql[] =
    "SELECT (jsonb_build_object('id', $1::bigint) || to_jsonb(r))::text "
    "FROM sagad_dlq_replay($1::bigint, $2, $3, $4::boolean, $5::boolean, $6, $7) r";

int sg_dlq_replay(sg_pg_t *pg, const sg_dlq_replay_req_t *req, sg_json_t **result, sg_err_t *err)
{
    const char *params[] = {SG_PG_INT(req->id),
                            req->by,
                            req->reason ? req->reason : "",
                            req->force ? "true" : "false",
                            req->dry_run ? "false" : "true",
                            req->internal_topic,
                            req->rerun_from};

    *result = NULL;
    if (!req->dry_run && (!req->reason || !*req->reason))
        return sg_ops_bad(err, "reason: required, except for a dry run (it is kept in the "
                               "replays ledger)");
    if (!req->by || !*req->by || !req->internal_topic || !*req->internal_topic)
        return sg_ops_bad(err, "by, internal_topic: required (who replays, where a step "
                               "command goes)");
    if (sg_ops_row(pg, replay_sql, 7, params, result, err) == 0)
        return 0;
    /* A schema older than 0015 has no seven-argument sagad_dlq_replay(). */
    if (strstr(err->message, "sagad_dlq_replay") && strstr(err->message, "does not exist"))
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.schema.old",
                   "the database schema is older than this program (its replay is migration "
                   "0015): run migrate, then replay again");
    return -1;
}

int sg_dlq_discard(sg_pg_t *pg, int64_t id, const char *by, const char *reason, sg_json_t **result,
                   sg_err_t *err)
{
    const char *params[] = {SG_PG_INT(id), by, reason};

    *result = NULL;
    if (!reason || !*reason)
        return sg_ops_bad(err, "reason: required (it is kept in the ledger)");
    if (!by || !*by)
        return sg_ops_bad(err, "by: required (who discards; kept in the ledger)");
    return sg_ops_row(pg,
                      "SELECT jsonb_build_object('id', $1::bigint, 'outcome', r.outcome, "
                      "'released', r.released, 'detail', r.detail)::text "
                      "FROM sagad_dlq_discard($1::bigint, $2, $3) r",
                      3, params, result, err);
}

int sg_dlq_payload(sg_pg_t *pg, int64_t id, sg_json_t **cur, sg_err_t *err)
{
    const char *param = SG_PG_INT(id);

    return sg_ops_row(
        pg,
        "SELECT jsonb_build_object('id', d.id, 'status', d.status, 'step', d.step_idx, "
        "'revision', p.revision, 'payload', sagad_utf8(p.payload))::text FROM dead_letters d "
        "CROSS JOIN LATERAL (SELECT * FROM (SELECT v.revision, v.payload "
        "  FROM dead_letter_revisions v WHERE v.dead_letter_id = d.id "
        "  UNION ALL SELECT 0, d.payload) x ORDER BY revision DESC LIMIT 1) p "
        "WHERE d.id = $1::bigint",
        1, &param, cur, err);
}

/* Through the function (0013): an operator role writes the ledger only
 * there, and the revision records its session_user.  No row: no such
 * dead letter. */
int sg_dlq_edit(sg_pg_t *pg, int64_t id, const char *payload, const char *by, const char *reason,
                sg_json_t **result, sg_err_t *err)
{
    const char *params[] = {SG_PG_INT(id), payload, by, reason};

    *result = NULL;
    if (!payload || !by || !*by)
        return sg_ops_bad(err, "payload, by: required (the new payload, who edits)");
    return sg_ops_row(pg,
                      "SELECT jsonb_build_object('id', $1::bigint, 'revision', r)::text "
                      "FROM sagad_dlq_edit($1::bigint, $2, $3, $4) r WHERE r IS NOT NULL",
                      4, params, result, err);
}
