/* /v1/sagas (gw.h): submit, read, wait, list and attempts (the controls:
 * gw_controls.c; following: gw_events.c).
 *
 * What a saga looks like to a client is its envelope (envelope_sql):
 * status ok | partial | error | timeout | cancelled once it ended,
 * running or awaiting_approval before; each step's outcome; run_health;
 * the failure that stopped it with its agent_action; the output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "gw.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_check.h"
#include "sagad/sg_err.h"
#include "sagad/sg_log.h"
#include "sagad/sg_mask.h"
#include "sagad/sg_run.h"
#include "sagad/sg_saga_query.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_submit.h"
#include "sagad/sg_text.h"

/* ---- reading ------------------------------------------------------------------ */

static bool ended(const char *status)
{
    return strcmp(status, "completed") == 0 || strcmp(status, "compensated") == 0 ||
           strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0;
}

static const char envelope_sql[] =
    "SELECT jsonb_build_object("
    " 'saga_id', s.saga_id, 'name', s.name,"
    " 'status', CASE"
    "   WHEN s.status = 'completed' THEN CASE WHEN EXISTS (SELECT 1 FROM steps st"
    "     WHERE st.saga_id = s.saga_id AND st.grp_policy = 'best_effort'"
    "     AND st.status NOT IN ('succeeded', 'skipped')) THEN 'partial' ELSE 'ok' END"
    "   WHEN s.status = 'cancelled' THEN 'cancelled'"
    "   WHEN s.status IN ('compensated', 'failed') THEN CASE WHEN EXISTS (SELECT 1 FROM steps st"
    "     WHERE st.saga_id = s.saga_id AND st.error_code = 'runtime.deadline_exceeded')"
    "     THEN 'timeout' ELSE 'error' END"
    "   WHEN EXISTS (SELECT 1 FROM steps st WHERE st.saga_id = s.saga_id"
    "     AND st.status = 'awaiting_approval') THEN 'awaiting_approval'"
    "   ELSE 'running' END,"
    " 'saga_status', s.status, 'generation', s.generation, 'seq', s.seq,"
    " 'created_at', s.created_at, 'updated_at', s.updated_at,"
    " 'submitted_by', s.submitted_by, 'output', s.output,"
    " 'steps', COALESCE((SELECT jsonb_agg(jsonb_build_object('step', st.idx, 'name', st.name,"
    "   'tool', st.tool, 'status', st.status, 'attempts', st.attempts,"
    "   'error_code', st.error_code, 'agent_action', st.agent_action, 'group', st.grp,"
    "   'approval', st.approval, 'result', st.result) ORDER BY st.idx)"
    "   FROM steps st WHERE st.saga_id = s.saga_id), '[]'::jsonb),"
    " 'run_health', (SELECT jsonb_build_object('steps_total', count(*),"
    "   'ok', count(*) FILTER (WHERE st.status = 'succeeded'),"
    "   'failed', count(*) FILTER (WHERE st.status IN ('failed', 'compensation_failed')"
    "     AND st.grp_policy IS DISTINCT FROM 'best_effort'),"
    "   'compensated', count(*) FILTER (WHERE st.status = 'compensated'),"
    "   'skipped', count(*) FILTER (WHERE st.status = 'skipped'),"
    "   'unknown', count(*) FILTER (WHERE st.status = 'unknown'),"
    "   'awaiting_approval', count(*) FILTER (WHERE st.status = 'awaiting_approval'),"
    "   'blocking_failure', (SELECT jsonb_build_object('step', b.idx, 'step_name', b.name,"
    "     'status', b.status, 'error_code', b.error_code, 'agent_action', b.agent_action)"
    "     FROM steps b WHERE b.saga_id = s.saga_id"
    "     AND b.status IN ('failed', 'unknown', 'compensation_failed')"
    "     AND b.grp_policy IS DISTINCT FROM 'best_effort' AND b.error_code IS NOT NULL"
    "     ORDER BY b.status = 'compensation_failed' DESC, b.idx LIMIT 1))"
    "   FROM steps st WHERE st.saga_id = s.saga_id))::text,"
    " s.submitted_by, s.seq, s.version, s.status "
    "FROM sagas s WHERE s.saga_id = $1";

enum { E_DOC, E_SUBMITTED_BY, E_SEQ, E_VERSION, E_STATUS };

/* gw.h */
bool gw_may_read(const gw_caller_t *c, const char *submitted_by)
{
    return (c->user->perms & GW_P_READ_ALL) || ((c->user->perms & GW_P_READ_OWN) && submitted_by &&
                                                strcmp(submitted_by, c->user->name) == 0);
}

/* gw.h */
void gw_no_saga(sg_http_answer_t *ans, const char *id)
{
    char detail[400], cut[129]; /* the client's text: never half a character */

    sg_text_copy(cut, sizeof(cut), id);
    snprintf(detail, sizeof(detail),
             "no saga %s that you may read: not submitted, not yet taken by a worker (wait "
             "on /v1/sagas/%s/wait), or refused at intake",
             cut, cut);
    gw_problem(ans, 404, detail, NULL);
}

/* The envelope's own agent_action: what the client does next. */
static const char *next_action(const char *status, const sg_json_t *health)
{
    const sg_json_t *block = sg_json_member(health, "blocking_failure");
    const char *action = sg_json_string(sg_json_member(block, "agent_action"));

    if (strcmp(status, "running") == 0)
        return "The saga is running: wait for it (GET /v1/sagas/{id}/wait); do not submit it "
               "again.";
    if (strcmp(status, "awaiting_approval") == 0)
        return "A step waits for a person's approval: ask your user to have an approver decide "
               "it (GET /v1/approvals), then wait again. You cannot approve your own saga.";
    if (strcmp(status, "ok") == 0)
        return "Done: use the output.";
    if (strcmp(status, "cancelled") == 0)
        return "The saga was cancelled and what it had done was undone; submit a new saga if "
               "the work is still wanted.";
    if (action)
        return action;
    return sg_err_agent_action(sg_json_string(sg_json_member(block, "error_code")));
}

/* The envelope of row r (caller destroys), agent_action and error_code
 * filled in. */
static sg_json_t *envelope_of(const sg_pg_res_t *res)
{
    sg_json_t *doc = sg_json_parse(sg_pg_res_get(res, 0, E_DOC),
                                   strlen(sg_pg_res_get(res, 0, E_DOC)), NULL, NULL);
    const sg_json_t *health = sg_json_member(doc, "run_health");
    const sg_json_t *block = sg_json_member(health, "blocking_failure");
    const char *status = sg_json_string(sg_json_member(doc, "status"));
    const char *action = next_action(status ? status : "running", health);

    if (sg_json_string(sg_json_member(block, "error_code")))
        sg_json_add_str(doc, "error_code", sg_json_string(sg_json_member(block, "error_code")));
    else
        sg_json_add_null(doc, "error_code");
    if (action)
        sg_json_add_str(doc, "agent_action", action);
    else
        sg_json_add_null(doc, "agent_action");
    return doc;
}

static void etag_of(const sg_pg_res_t *res, char *out, size_t size)
{
    snprintf(out, size, "\"%s.%s\"", sg_pg_res_get(res, 0, E_SEQ),
             sg_pg_res_get(res, 0, E_VERSION));
}

/* Reads the envelope row: 1 found (and readable), 0 not, -1 answered. */
static int load(gw_t *gw, const gw_caller_t *c, const char *id, sg_pg_res_t **res,
                sg_http_answer_t *ans)
{
    sg_err_t err;
    sg_pg_t *pg = gw_pool_get(gw->pool, &err);
    int rc;

    *res = NULL;
    if (!pg) {
        gw_db_problem(ans, &err);
        return -1;
    }
    rc = sg_pg_exec_cached(pg, envelope_sql, 1, &id, res, &err);
    gw_pool_put(gw->pool, pg);
    if (rc < 0) {
        gw_db_problem(ans, &err);
        return -1;
    }
    if (sg_pg_res_rows(*res) == 0 || !gw_may_read(c, sg_pg_res_get(*res, 0, E_SUBMITTED_BY))) {
        sg_pg_res_destroy(*res);
        *res = NULL;
        return 0;
    }
    return 1;
}

/* gw.h */
bool gw_saga_id_ok(sg_http_answer_t *ans, const char *id)
{
    if (sg_saga_id_ok(id))
        return true;
    gw_problem(ans, 400, "{id}: a saga id is 1 to 128 of A-Z a-z 0-9 . _ : -", NULL);
    return false;
}

/* If-None-Match holds etag: "*", or a list of tags, weak (W/"...") or
 * not, compared weakly (RFC 9110 13.1.2). */
static bool etag_matches(const char *inm, const char *etag)
{
    size_t n = strlen(etag);

    while (*inm) {
        while (*inm == ' ' || *inm == ',')
            inm++;
        if (*inm == '*')
            return true;
        if (strncmp(inm, "W/", 2) == 0)
            inm += 2;
        if (strncmp(inm, etag, n) == 0 && (inm[n] == '\0' || inm[n] == ',' || inm[n] == ' '))
            return true;
        while (*inm && *inm != ',')
            inm++;
    }
    return false;
}

void gw_sagas_get(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                  sg_http_answer_t *ans)
{
    const char *inm = sg_http_req_header(req, "If-None-Match");
    sg_pg_res_t *res;
    char etag[64];
    int found;

    if (!gw_saga_id_ok(ans, a->id) || (found = load(gw, c, a->id, &res, ans)) < 0)
        return;
    if (!found) {
        gw_no_saga(ans, a->id);
        return;
    }
    etag_of(res, etag, sizeof(etag));
    if (inm && etag_matches(inm, etag)) {
        ans->status = 304;
    } else {
        gw_json(ans, 200, envelope_of(res));
    }
    sg_http_answer_header(ans, "ETag", etag);
    sg_http_answer_header(ans, "Cache-Control", "no-cache");
    sg_pg_res_destroy(res);
}

/* gw.h */
bool gw_parse_duration_ms(const char *s, int64_t *ms)
{
    char *end;
    long long n;

    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    n = strtoll(s, &end, 10);
    if (errno || n > 86400000LL)
        return false;
    if (strcmp(end, "ms") == 0)
        *ms = n;
    else if (*end == '\0' || strcmp(end, "s") == 0)
        *ms = n * 1000;
    else if (strcmp(end, "m") == 0)
        *ms = n * 60000;
    else
        return false;
    return true;
}

/* A whole number, 0 or more, digits only, within int64. */
static bool parse_i64(const char *s, int64_t *out)
{
    char *end;
    long long v;

    if (!s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end || errno)
        return false;
    *out = v;
    return true;
}

/* Waits until saga id's seq moves from seq (-1: until it exists), or
 * deadline_ms.  0 moved or deadline, -1 answered (PostgreSQL failed). */
static int watch(gw_t *gw, const char *id, int64_t seq, uint64_t deadline_ms, sg_http_answer_t *ans)
{
    gw_watch_t w;
    sg_err_t err;
    sg_pg_t *pg;
    int64_t now_seq;

    gw_watch_add(gw->pool, &w, id, seq);
    /* What moved between the caller's read and the watch's start. */
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_watch_remove(gw->pool, &w);
        gw_db_problem(ans, &err);
        return -1;
    }
    now_seq = gw_saga_seq(pg, id, &err);
    gw_pool_put(gw->pool, pg);
    if (now_seq == -2) {
        gw_watch_remove(gw->pool, &w);
        gw_db_problem(ans, &err);
        return -1;
    }
    if (now_seq == seq)
        gw_watch_wait(gw->pool, &w, deadline_ms);
    gw_watch_remove(gw->pool, &w);
    return 0;
}

void gw_sagas_wait(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                   sg_http_answer_t *ans)
{
    const char *t = sg_http_req_query(req, "timeout"), *after = sg_http_req_query(req, "after_seq");
    int64_t timeout_ms = 30000, after_seq = -1;
    uint64_t deadline;
    sg_pg_res_t *res = NULL;

    if (!gw_saga_id_ok(ans, a->id))
        return;
    if (t && !gw_parse_duration_ms(t, &timeout_ms)) {
        gw_problem(ans, 400, "timeout: a duration such as 30s, 500ms or 2m", NULL);
        return;
    }
    if (after && !parse_i64(after, &after_seq)) {
        gw_problem(ans, 400, "after_seq: an event seq, 0 or more", NULL);
        return;
    }
    if (timeout_ms > gw->wait_max_ms)
        timeout_ms = gw->wait_max_ms;
    deadline = sg_run_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        int64_t seq = -1;
        int found = load(gw, c, a->id, &res, ans);
        if (found < 0)
            return;
        if (found) {
            const char *st = sg_pg_res_get(res, 0, E_STATUS);
            sg_json_t *env = envelope_of(res);
            const char *es = sg_json_string(sg_json_member(env, "status"));
            bool done = ended(st);
            bool person = es && strcmp(es, "awaiting_approval") == 0;
            bool moved = after_seq >= 0 && sg_pg_res_int(res, 0, E_SEQ, 0) > after_seq;
            seq = sg_pg_res_int(res, 0, E_SEQ, 0);
            if (done || person || moved || sg_run_now_ms() >= deadline || !sg_run_running) {
                char etag[64];
                sg_json_add_bool(env, "wait_timed_out", !(done || person || moved));
                etag_of(res, etag, sizeof(etag));
                sg_http_answer_header(ans, "ETag", etag);
                gw_json(ans, 200, env);
                sg_pg_res_destroy(res);
                return;
            }
            sg_json_destroy(env);
            sg_pg_res_destroy(res);
            res = NULL;
        } else if (sg_run_now_ms() >= deadline || !sg_run_running) {
            gw_no_saga(ans, a->id);
            return;
        }
        if (watch(gw, a->id, seq, deadline, ans) < 0)
            return;
    }
}

/* gw.h */
int gw_saga_target(gw_t *gw, const gw_caller_t *c, const char *saga_id, const char *step,
                   gw_target_t *t, sg_http_answer_t *ans)
{
    const char *params[] = {saga_id, step ? step : ""};
    sg_pg_res_t *res = NULL;
    sg_err_t err;
    sg_pg_t *pg = gw_pool_get(gw->pool, &err);
    int rc;

    memset(t, 0, sizeof(*t));
    if (!pg) {
        gw_db_problem(ans, &err);
        return -1;
    }
    rc = sg_pg_exec(pg,
                    "SELECT s.submitted_by, s.generation, s.status, st.idx, st.name, st.tool, "
                    "st.status FROM sagas s LEFT JOIN steps st ON st.saga_id = s.saga_id AND "
                    "(st.name = $2 OR st.idx::text = $2) WHERE s.saga_id = $1 "
                    "ORDER BY st.name = $2 DESC LIMIT 1",
                    2, params, &res, &err);
    gw_pool_put(gw->pool, pg);
    if (rc < 0) {
        gw_db_problem(ans, &err);
        return -1;
    }
    if (sg_pg_res_rows(res) == 0) {
        sg_pg_res_destroy(res);
        return 0;
    }
    t->has_submitter = sg_pg_res_get(res, 0, 0) != NULL;
    snprintf(t->submitted_by, sizeof(t->submitted_by), "%s",
             t->has_submitter ? sg_pg_res_get(res, 0, 0) : "");
    snprintf(t->generation, sizeof(t->generation), "%s", sg_pg_res_get(res, 0, 1));
    snprintf(t->status, sizeof(t->status), "%s", sg_pg_res_get(res, 0, 2));
    if ((t->has_step = sg_pg_res_get(res, 0, 3) != NULL)) {
        snprintf(t->idx, sizeof(t->idx), "%s", sg_pg_res_get(res, 0, 3));
        snprintf(t->name, sizeof(t->name), "%s", sg_pg_res_get(res, 0, 4));
        snprintf(t->tool, sizeof(t->tool), "%s", sg_pg_res_get(res, 0, 5));
        snprintf(t->step_status, sizeof(t->step_status), "%s", sg_pg_res_get(res, 0, 6));
    }
    sg_pg_res_destroy(res);
    if (!gw_may_read(c, t->has_submitter ? t->submitted_by : NULL))
        return 0;
    return 1;
}

/* ---- the list ---------------------------------------------------------------- */

/* The list's query parameters, as the next page's Link repeats them. */
static const char *const list_params[] = {
    "status",    "name",       "created_after",     "created_before",
    "stuck_for", "error_code", "awaiting_approval", NULL};

/* text percent-encoded for a query string into buf. */
static void url_put(sg_pg_buf_t *buf, const char *text)
{
    static const char hex[] = "0123456789ABCDEF";

    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            sg_pg_buf_putc(buf, (char)*p);
        } else {
            sg_pg_buf_putc(buf, '%');
            sg_pg_buf_putc(buf, hex[*p >> 4]);
            sg_pg_buf_putc(buf, hex[*p & 15]);
        }
    }
}

/* Link: rel="next": before, the request's own filters, and the page's
 * limit (always, the default included, so a client sees the page size). */
static void next_link(sg_http_req_t *req, const char *before, long limit, sg_http_answer_t *ans)
{
    sg_pg_buf_t link = {0};
    char n[24];

    sg_pg_buf_puts(&link, "</v1/sagas?before=");
    url_put(&link, before);
    for (size_t i = 0; list_params[i]; i++) {
        const char *v = sg_http_req_query(req, list_params[i]);
        if (!v)
            continue;
        sg_pg_buf_putc(&link, '&');
        sg_pg_buf_puts(&link, list_params[i]);
        sg_pg_buf_putc(&link, '=');
        url_put(&link, v);
    }
    snprintf(n, sizeof(n), "&limit=%ld", limit);
    sg_pg_buf_puts(&link, n);
    sg_pg_buf_puts(&link, ">; rel=\"next\"");
    if (link.len < SG_HTTP_HEADER_VALUE_MAX)
        sg_http_answer_header(ans, "Link", link.data);
    sg_pg_buf_free(&link);
}

void gw_sagas_list(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                   sg_http_answer_t *ans)
{
    sg_saga_filter_t f;
    const char *v;
    int64_t n;
    sg_json_t *rows = NULL, *doc;
    sg_pg_t *pg;
    sg_err_t err;
    bool more;
    int rc;

    (void)a;
    memset(&f, 0, sizeof(f));
    f.status = sg_http_req_query(req, "status");
    f.name = sg_http_req_query(req, "name");
    f.error_code = sg_http_req_query(req, "error_code");
    f.before = sg_http_req_query(req, "before");
    f.limit = 50;
    if ((v = sg_http_req_query(req, "limit")) && (!parse_i64(v, &n) || n < 1 || n > 1000)) {
        gw_problem(ans, 400, "limit: a whole number from 1 to 1000", NULL);
        return;
    }
    if (v)
        f.limit = (long)n;
    if ((v = sg_http_req_query(req, "stuck_for")) && !sg_ops_duration_ms(v, &f.stuck_ms)) {
        gw_problem(ans, 400, "stuck_for: a duration such as 90s, 15m or 2h", NULL);
        return;
    }
    if (((v = sg_http_req_query(req, "created_after")) && !sg_ops_when_parse(v, &f.since)) ||
        ((v = sg_http_req_query(req, "created_before")) && !sg_ops_when_parse(v, &f.until))) {
        gw_problem(ans, 400,
                   "created_after, created_before: an RFC 3339 time (2026-11-28T10:00:00Z) or an "
                   "age (2h)",
                   NULL);
        return;
    }
    if ((v = sg_http_req_query(req, "awaiting_approval"))) {
        if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0) {
            gw_problem(ans, 400, "awaiting_approval: true or false", NULL);
            return;
        }
        f.awaiting_approval = strcmp(v, "true") == 0;
    }
    if (f.before && !sg_saga_id_ok(f.before)) {
        gw_problem(ans, 400, "before: the saga_id that ended the previous page", NULL);
        return;
    }
    if (!(c->user->perms & GW_P_READ_ALL))
        f.submitted_by = c->user->name;
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        return;
    }
    rc = sg_saga_list(pg, &f, &rows, &more, &err);
    gw_pool_put(gw->pool, pg);
    if (rc < 0) {
        char detail[700];
        if (strcmp(err.code, "input.schema.invalid") == 0 || strcmp(err.code, "pg.data") == 0) {
            /* the lib names created_after "since" and created_before "until" */
            snprintf(detail, sizeof(detail), "%s", err.message);
            gw_problem(ans, 400, detail, NULL);
        } else {
            gw_db_problem(ans, &err);
        }
        return;
    }
    doc = sg_json_new_object();
    if (more && sg_json_array_size(rows)) {
        const char *last = sg_json_string(
            sg_json_member(sg_json_array_get(rows, sg_json_array_size(rows) - 1), "saga_id"));
        sg_json_add_str(doc, "next_before", last);
        next_link(req, last, f.limit, ans);
    } else {
        sg_json_add_null(doc, "next_before");
    }
    sg_json_add_node(doc, "items", rows);
    gw_json(ans, 200, doc);
}

/* ---- submitting ---------------------------------------------------------------- */

/* gw.h */
void gw_random_hex(char *out, size_t bytes)
{
    unsigned char r[16];

    if (bytes > sizeof(r))
        bytes = sizeof(r);
    if (sg_random_bytes(r, bytes) < 0)
        abort();
    for (size_t i = 0; i < bytes; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* The saga id of an Idempotency-Key: the same key from the same user is
 * the same saga, another user's is another. */
static void id_of_key(const char *user, const char *key, char out[40])
{
    unsigned char h[32];
    char *text = sg_xmalloc(strlen(user) + strlen(key) + 2);

    sprintf(text, "%s\n%s", user, key);
    sg_sha256(text, strlen(text), h);
    free(text);
    memcpy(out, "k-", 2);
    for (size_t i = 0; i < 16; i++)
        snprintf(out + 2 + 2 * i, 3, "%02x", h[i]);
}

static void problems_answer(sg_http_answer_t *ans, unsigned status, const char *detail,
                            const char *code, const sg_problems_t *p)
{
    sg_json_t *extra = sg_json_new_object();

    sg_json_add_str(extra, "code", code);
    sg_json_add_node(extra, "errors", sg_problems_json(p->v, p->n));
    gw_problem(ans, status, detail, extra);
}

/* An existing saga of this id: 0 none, 1 the same, 2 a different one,
 * -1 answered (PostgreSQL failed).  A new id (nearly every submission)
 * costs one indexed read; only a saga that exists has its definition
 * printed and compared (as jsonb, so key order and spacing do not count). */
static int existing(gw_t *gw, const gw_caller_t *c, const char *saga_id, const sg_json_t *doc,
                    sg_http_answer_t *ans)
{
    const char *params[] = {saga_id, NULL};
    sg_pg_res_t *res = NULL;
    sg_err_t err;
    sg_pg_t *pg = gw_pool_get(gw->pool, &err);
    char *def = NULL;
    int rc;

    if (!pg) {
        gw_db_problem(ans, &err);
        return -1;
    }
    rc = sg_pg_exec_cached(pg, "SELECT submitted_by FROM sagas WHERE saga_id = $1", 1, params, &res,
                           &err);
    if (rc == 0) {
        /* Another's saga is a conflict whatever its definition: whether a
         * guessed definition matches is not the caller's to learn. */
        rc = sg_pg_res_rows(res) == 0 ? 0 : !gw_may_read(c, sg_pg_res_get(res, 0, 0)) ? 2 : 3;
        sg_pg_res_destroy(res);
        res = NULL;
    }
    if (rc == 3) {
        params[1] = def = sg_submit_definition(doc);
        rc = sg_pg_exec_cached(pg, "SELECT definition = $2::jsonb FROM sagas WHERE saga_id = $1", 2,
                               params, &res, &err);
        if (rc == 0)
            rc = sg_pg_res_rows(res) == 0                     ? 0 /* gone meanwhile */
                 : strcmp(sg_pg_res_get(res, 0, 0), "t") == 0 ? 1
                                                              : 2;
        sg_pg_res_destroy(res);
        free(def);
    }
    gw_pool_put(gw->pool, pg);
    if (rc < 0)
        gw_db_problem(ans, &err);
    return rc;
}

static void accepted(sg_http_answer_t *ans, unsigned status, const char *saga_id, const char *id,
                     const char *state)
{
    sg_json_t *doc = sg_json_new_object(), *links = sg_json_new_object();
    char loc[200];

    snprintf(loc, sizeof(loc), "/v1/sagas/%s", saga_id);
    sg_json_add_str(doc, "saga_id", saga_id);
    if (id)
        sg_json_add_str(doc, "id", id);
    sg_json_add_str(doc, "status", state);
    sg_json_add_str(links, "self", loc);
    snprintf(loc, sizeof(loc), "/v1/sagas/%s/wait", saga_id);
    sg_json_add_str(links, "wait", loc);
    snprintf(loc, sizeof(loc), "/v1/sagas/%s/events", saga_id);
    sg_json_add_str(links, "events", loc);
    sg_json_add_node(doc, "links", links);
    snprintf(loc, sizeof(loc), "/v1/sagas/%s", saga_id);
    sg_http_answer_header(ans, "Location", loc);
    gw_json(ans, status, doc);
}

int gw_submission_decode(const gw_t *gw, const char *user, const char *ikey, const char *body,
                         size_t len, gw_submission_t *sub, sg_http_answer_t *ans)
{
    char made_id[40], made_msg[40];
    const char *obo;
    sg_err_t err;

    memset(sub, 0, sizeof(*sub));
    if (!(sub->doc = sg_json_parse(body ? body : "", len, &gw->lim, &err))) {
        gw_problem_at(ans, 400, err.code, "$", err.message);
        return -1;
    }
    if (!sg_json_is_object(sub->doc)) {
        gw_problem_at(ans, 400, "input.schema.type", "$", "type: expected object (a saga.start)");
        goto refused;
    }
    /* The ids a client may leave out: the saga's (from Idempotency-Key,
     * or made up) and the message's. */
    if (!sg_json_member(sub->doc, "saga_id")) {
        if (ikey && (!*ikey || strlen(ikey) > 255)) {
            gw_problem(ans, 400, "Idempotency-Key: 1 to 255 characters", NULL);
            goto refused;
        }
        if (ikey) {
            id_of_key(user, ikey, made_id);
        } else {
            memcpy(made_id, "gw-", 3);
            gw_random_hex(made_id + 3, 12);
        }
        sg_json_add_str(sub->doc, "saga_id", made_id);
    }
    if (!sg_json_member(sub->doc, "id")) {
        memcpy(made_msg, "start-", 6);
        gw_random_hex(made_msg + 6, 8);
        sg_json_add_str(sub->doc, "id", made_msg);
    }
    obo = sg_json_string(sg_json_member(sub->doc, "on_behalf_of"));
    if (sg_json_member(sub->doc, "on_behalf_of") && (!obo || strcmp(obo, user) != 0)) {
        gw_problem_at(ans, 422, "input.auth.forbidden", "$.on_behalf_of",
                      "set by the gateway: it names the authenticated user; leave it out");
        goto refused;
    }
    if (gw->have_key && !obo)
        sg_json_add_str(sub->doc, "on_behalf_of", user);
    sub->text = sg_json_print(sub->doc);
    if (sg_check_submission(sub->text, strlen(sub->text), &gw->lim, gw->reg, &sub->p) > 0) {
        problems_answer(ans, 422, "the worker would refuse this saga: see errors", sub->p.code,
                        &sub->p);
        goto refused;
    }
    sub->saga_id = sg_json_string(sg_json_member(sub->doc, "saga_id"));
    sub->id = sg_json_string(sg_json_member(sub->doc, "id"));
    return 0;
refused:
    gw_submission_free(sub);
    return -1;
}

void gw_submission_free(gw_submission_t *sub)
{
    sg_problems_free(&sub->p);
    free(sub->text);
    sg_json_destroy(sub->doc);
    memset(sub, 0, sizeof(*sub));
}

/* Content-Type names JSON: application/json, any case, parameters
 * (charset) allowed. */
static bool json_media_type(const char *ctype)
{
    size_t n = strlen("application/json");

    while (*ctype == ' ')
        ctype++;
    return strncasecmp(ctype, "application/json", n) == 0 &&
           (ctype[n] == '\0' || ctype[n] == ';' || ctype[n] == ' ');
}

void gw_sagas_submit(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans)
{
    const char *ctype = sg_http_req_header(req, "Content-Type");
    gw_submission_t sub;
    const char *body, *dry;
    sg_err_t err;
    size_t len;
    int same;

    (void)a;
    if (!(c->user->perms & GW_P_SUBMIT)) {
        gw_problem(ans, 403, "submitting needs the submitter role (gateway.users)", NULL);
        return;
    }
    if (ctype && !json_media_type(ctype)) {
        gw_problem(ans, 415, "Content-Type: application/json", NULL);
        return;
    }
    body = sg_http_req_body(req, &len);
    if (gw_submission_decode(gw, c->user->name, sg_http_req_header(req, "Idempotency-Key"), body,
                             len, &sub, ans) < 0)
        return;
    if ((dry = sg_http_req_query(req, "dry_run")) && strcmp(dry, "true") == 0) {
        /* sagactl validate: the verdict, nothing sent */
        sg_json_t *doc = sg_json_new_object();
        sg_json_add_bool(doc, "valid", true);
        sg_json_add_str(doc, "saga_id", sub.saga_id);
        sg_json_add_node(doc, "warnings", sg_problems_json(sub.p.w, sub.p.nw));
        gw_json(ans, 200, doc);
        goto out;
    }
    if ((same = existing(gw, c, sub.saga_id, sub.doc, ans)) < 0)
        goto out;
    if (same == 1) {
        accepted(ans, 200, sub.saga_id, NULL, "exists");
    } else if (same == 2) {
        gw_problem_at(ans, 409, "input.saga.conflict", "$.saga_id",
                      "unique: this saga_id is already used with a different definition");
    } else if (gw_produce(gw, sub.saga_id, sub.text, strlen(sub.text), gw->have_key,
                          GW_PRODUCE_TIMEOUT_MS, &err) < 0) {
        char detail[700];
        snprintf(detail, sizeof(detail),
                 "%s: not sent; try again (the same saga_id is safe to send twice)", err.message);
        gw_problem(ans, 503, detail, NULL);
        sg_http_answer_header(ans, "Retry-After", "1");
    } else {
        accepted(ans, 202, sub.saga_id, sub.id, "accepted");
    }
out:
    gw_submission_free(&sub);
}

/* ---- attempts -------------------------------------------------------------------- */

#define ATTEMPTS_DEFAULT 200

/* Each row's error message with every secret sg_mask knows hidden: a
 * downstream's error text may echo a credential it was sent. */
static void mask_messages(sg_json_t *rows)
{
    for (size_t i = 0; i < sg_json_array_size(rows); i++) {
        sg_json_t *row = (sg_json_t *)sg_json_array_get(rows, i);
        const char *msg = sg_json_string(sg_json_member(row, "message"));
        char masked[1024];

        if (!msg)
            continue;
        sg_mask(msg, masked, sizeof(masked));
        sg_json_set(row, "message", sg_json_new_str(masked));
    }
}

/* The query's limit and after: false after answering 400. */
static bool attempts_params(sg_http_req_t *req, long *limit, int64_t *after, sg_http_answer_t *ans)
{
    const char *v;
    int64_t n;

    *limit = ATTEMPTS_DEFAULT;
    *after = 0;
    if ((v = sg_http_req_query(req, "limit")) &&
        (!parse_i64(v, &n) || n < 1 || n > SG_SAGA_ATTEMPTS_MAX)) {
        gw_problem(ans, 400, "limit: a whole number from 1 to 1000", NULL);
        return false;
    }
    if (v)
        *limit = (long)n;
    if ((v = sg_http_req_query(req, "after")) && !parse_i64(v, after)) {
        gw_problem(ans, 400, "after: the id of the last attempt of the previous page", NULL);
        return false;
    }
    return true;
}

void gw_sagas_attempts(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                       sg_http_answer_t *ans)
{
    sg_json_t *rows = NULL, *doc;
    int64_t after;
    sg_err_t err;
    sg_pg_t *pg;
    gw_target_t t;
    long limit;
    bool more;
    int rc;

    if (!gw_saga_id_ok(ans, a->id) || !attempts_params(req, &limit, &after, ans) ||
        (rc = gw_saga_target(gw, c, a->id, NULL, &t, ans)) < 0)
        return;
    if (!rc) {
        gw_no_saga(ans, a->id);
        return;
    }
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        return;
    }
    rc = sg_saga_attempts(pg, a->id, after, limit, &rows, &more, &err);
    gw_pool_put(gw->pool, pg);
    if (rc < 0) {
        gw_db_problem(ans, &err);
        return;
    }
    mask_messages(rows);
    doc = sg_json_new_object();
    sg_json_add_str(doc, "saga_id", a->id);
    sg_json_add_bool(doc, "truncated", more);
    if (more) {
        const sg_json_t *last = sg_json_array_get(rows, sg_json_array_size(rows) - 1);
        double id = 0;
        char link[400];
        sg_json_number(sg_json_member(last, "id"), &id);
        sg_json_add_int(doc, "next_after", (int64_t)id);
        snprintf(link, sizeof(link), "</v1/sagas/%s/attempts?after=%lld&limit=%ld>; rel=\"next\"",
                 a->id, (long long)id, limit);
        sg_http_answer_header(ans, "Link", link);
    } else {
        sg_json_add_null(doc, "next_after");
    }
    sg_json_add_node(doc, "attempts", rows);
    gw_json(ans, 200, doc);
}
