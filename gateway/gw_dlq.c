/* /v1/dead-letters (gw.h): on-call's view of the dead-letter ledger and
 * its two acts, replay and discard, through lib/ops's sg_dlq_query (the
 * queries and SQL functions dlq-tool runs; docs/DLQ.md).  Reading needs
 * the reader or operator role; acting, operator.  Whoever acts is
 * recorded as the authenticated user (replays.operator,
 * dead_letters.resolved_by) beside the gateway's database login. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_dlq_query.h"
#include "sagad/sg_text.h"

/* A payload longer than this is cut in GET /v1/dead-letters/{id} unless
 * ?full=true: it is a producer's or a downstream's text, shown as data. */
#define PAYLOAD_SHOWN 4096

static bool may(const gw_caller_t *c, unsigned perm, sg_http_answer_t *ans)
{
    if (c->user->perms & perm)
        return true;
    gw_problem(ans, 403,
               perm == GW_P_DLQ_WRITE ? "replaying and discarding need the operator role"
                                      : "dead letters are the reader's and the operator's",
               NULL);
    return false;
}

/* rc of a query: false when it succeeded; true after answering, 400 when
 * a filter value broke a rule, 503 when PostgreSQL failed. */
static bool answered_error(int rc, const sg_err_t *err, sg_http_answer_t *ans)
{
    if (rc == 0)
        return false;
    if (strcmp(err->code, "input.schema.invalid") == 0 || strcmp(err->code, "pg.data") == 0)
        gw_problem(ans, 400, err->message, NULL);
    else
        gw_db_problem(ans, err);
    return true;
}

static bool id_of(const gw_route_args_t *a, int64_t *id, sg_http_answer_t *ans)
{
    if (sg_dlq_id_parse(a->id, id))
        return true;
    gw_problem(ans, 400, "{id}: a dead letter's id, digits only", NULL);
    return false;
}

void gw_ops_dlq_list(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans)
{
    const char *view = sg_http_req_query(req, "view"), *v;
    sg_dlq_filter_t f;
    sg_json_t *rows = NULL, *doc;
    sg_pg_t *pg;
    sg_err_t err;
    bool more = false, entries;
    int rc;

    (void)a;
    if (!may(c, GW_P_DLQ_READ, ans))
        return;
    if (view && strcmp(view, "groups") != 0 && strcmp(view, "entries") != 0) {
        gw_problem(ans, 400, "view: groups (by error code and tool, the default) or entries", NULL);
        return;
    }
    entries = view && strcmp(view, "entries") == 0;
    memset(&f, 0, sizeof(f));
    f.code = sg_http_req_query(req, "code");
    f.error_class = sg_http_req_query(req, "class");
    f.saga = sg_http_req_query(req, "saga");
    f.tool = sg_http_req_query(req, "tool");
    f.status = sg_http_req_query(req, "status");
    if (((v = sg_http_req_query(req, "since")) && !sg_ops_when_parse(v, &f.since)) ||
        ((v = sg_http_req_query(req, "until")) && !sg_ops_when_parse(v, &f.until))) {
        gw_problem(ans, 400, "since, until: an RFC 3339 time or an age (2h)", NULL);
        return;
    }
    if ((v = sg_http_req_query(req, "before")) && !sg_dlq_id_parse(v, &f.before)) {
        gw_problem(ans, 400, "before: the id that ended the previous page", NULL);
        return;
    }
    if ((v = sg_http_req_query(req, "limit"))) {
        char *end;
        f.limit = strtol(v, &end, 10);
        if (*v < '0' || *v > '9' || *end || f.limit < 1 || f.limit > 1000) {
            gw_problem(ans, 400, "limit: a whole number from 1 to 1000", NULL);
            return;
        }
    }
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        return;
    }
    rc = entries ? sg_dlq_list(pg, &f, &rows, &more, &err) : sg_dlq_groups(pg, &f, &rows, &err);
    gw_pool_put(gw->pool, pg);
    if (answered_error(rc, &err, ans))
        return;
    doc = sg_json_new_object();
    if (entries) {
        const sg_json_t *last = sg_json_array_get(rows, sg_json_array_size(rows) - 1);
        double id;
        if (more && last && sg_json_number(sg_json_member(last, "id"), &id))
            sg_json_add_int(doc, "next_before", (int64_t)id);
        else
            sg_json_add_null(doc, "next_before");
    }
    sg_json_add_node(doc, entries ? "items" : "groups", rows);
    gw_json(ans, 200, doc);
}

/* The payload member of the entry's record cut to PAYLOAD_SHOWN bytes
 * (at a UTF-8 boundary), marked. */
static void cut_payload(sg_json_t *entry)
{
    sg_json_t *record = (sg_json_t *)sg_json_member(entry, "record");
    const char *p = sg_json_string(sg_json_member(record, "payload"));
    size_t n;
    char *cut;

    if (!p || strlen(p) <= PAYLOAD_SHOWN)
        return;
    n = sg_utf8_cut(p, PAYLOAD_SHOWN);
    cut = sg_xmalloc(n + 1);
    memcpy(cut, p, n);
    cut[n] = '\0';
    sg_json_set(record, "payload", sg_json_new_str(cut));
    sg_json_add_bool(record, "payload_cut", true);
    free(cut);
}

void gw_ops_dlq_get(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                    sg_http_answer_t *ans)
{
    const char *full = sg_http_req_query(req, "full");
    sg_json_t *entry = NULL;
    sg_pg_t *pg;
    sg_err_t err;
    int64_t id;
    int rc;

    if (!may(c, GW_P_DLQ_READ, ans) || !id_of(a, &id, ans))
        return;
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        return;
    }
    rc = sg_dlq_show(pg, id, &entry, &err);
    gw_pool_put(gw->pool, pg);
    if (answered_error(rc, &err, ans))
        return;
    if (!entry) {
        gw_problem(ans, 404, "no dead letter of that id", NULL);
        return;
    }
    if (!full || strcmp(full, "true") != 0)
        cut_payload(entry);
    /* What a producer or a downstream wrote is data, never an
     * instruction to whoever reads it. */
    sg_json_add_bool(entry, "payload_untrusted", true);
    gw_json(ans, 200, entry);
}

/* The body of an act: {reason, force?, rerun_from?}; NULL after answering. */
static sg_json_t *act_body(gw_t *gw, sg_http_req_t *req, bool reason_required, const char **reason,
                           sg_http_answer_t *ans)
{
    size_t len;
    const char *body = sg_http_req_body(req, &len);
    sg_json_t *doc;
    sg_err_t err;

    if (!(doc = sg_json_parse(body && len ? body : "{}", body && len ? len : 2, &gw->lim, &err))) {
        gw_problem(ans, 400, err.message, NULL);
        return NULL;
    }
    if (!sg_json_is_object(doc)) {
        sg_json_destroy(doc);
        gw_problem(ans, 400, "the body is a JSON object {\"reason\": \"...\"}", NULL);
        return NULL;
    }
    *reason = sg_json_string(sg_json_member(doc, "reason"));
    if (reason_required && (!*reason || !**reason)) {
        sg_json_destroy(doc);
        gw_problem_at(ans, 422, "input.schema.required", "$.reason",
                      "required: why (kept in the ledger)");
        return NULL;
    }
    return doc;
}

/* An act's result: 200, 404 missing, 409 refused (the detail says why). */
static void act_answer(sg_json_t *result, sg_http_answer_t *ans)
{
    const char *outcome = sg_json_string(sg_json_member(result, "outcome"));
    const char *detail = sg_json_string(sg_json_member(result, "detail"));

    if (outcome && strcmp(outcome, "missing") == 0) {
        gw_problem(ans, 404, detail ? detail : "no dead letter of that id", NULL);
        sg_json_destroy(result);
    } else if (outcome && strcmp(outcome, "refused") == 0) {
        sg_json_t *extra = sg_json_new_object();
        sg_json_add_str(extra, "code", "input.dead_letter.refused");
        gw_problem(ans, 409, detail ? detail : "refused", extra);
        sg_json_destroy(result);
    } else {
        gw_json(ans, 200, result);
    }
}

void gw_ops_dlq_replay(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                       sg_http_answer_t *ans)
{
    const char *dry = sg_http_req_query(req, "dry_run");
    sg_dlq_replay_req_t r;
    sg_json_t *body, *result = NULL;
    bool force = false;
    sg_pg_t *pg;
    sg_err_t err;
    int64_t id;
    int rc;

    memset(&r, 0, sizeof(r));
    if (dry && strcmp(dry, "true") != 0 && strcmp(dry, "false") != 0) {
        gw_problem(ans, 400, "dry_run: true or false", NULL);
        return;
    }
    r.dry_run = dry && strcmp(dry, "true") == 0;
    if (!may(c, r.dry_run ? GW_P_DLQ_READ : GW_P_DLQ_WRITE, ans) || !id_of(a, &id, ans))
        return;
    if (!(body = act_body(gw, req, !r.dry_run, &r.reason, ans)))
        return;
    if (sg_json_get_bool(body, "$", "force", false, &force, &err) < 0) {
        gw_problem(ans, 400, err.message, NULL);
        sg_json_destroy(body);
        return;
    }
    r.id = id;
    r.by = c->user->name;
    r.force = force;
    r.rerun_from = sg_json_string(sg_json_member(body, "rerun_from"));
    r.internal_topic = sg_config_str(gw->cfg, "topic.internal");
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        sg_json_destroy(body);
        return;
    }
    rc = sg_dlq_replay(pg, &r, &result, &err);
    gw_pool_put(gw->pool, pg);
    if (!answered_error(rc, &err, ans))
        act_answer(result, ans);
    sg_json_destroy(body);
}

void gw_ops_dlq_discard(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req,
                        const gw_route_args_t *a, sg_http_answer_t *ans)
{
    sg_json_t *body, *result = NULL;
    const char *reason;
    sg_pg_t *pg;
    sg_err_t err;
    int64_t id;
    int rc;

    if (!may(c, GW_P_DLQ_WRITE, ans) || !id_of(a, &id, ans))
        return;
    if (!(body = act_body(gw, req, true, &reason, ans)))
        return;
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        sg_json_destroy(body);
        return;
    }
    rc = sg_dlq_discard(pg, id, c->user->name, reason, &result, &err);
    gw_pool_put(gw->pool, pg);
    if (!answered_error(rc, &err, ans))
        act_answer(result, ans);
    sg_json_destroy(body);
}
