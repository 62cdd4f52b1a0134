/* /v1/approvals, /v1/tools and /v1/errors/{code} (gw.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_err.h"
#include "sagad/sg_ops.h"
#include "sagad/sg_relay_query.h"

/* The steps waiting for a person that the caller may decide: a tool it
 * may approve, a saga it did not submit (four eyes), oldest first. */
static const char approvals_sql[] =
    "SELECT jsonb_build_object('saga_id', s.saga_id, 'saga_name', s.name, 'step', st.idx, "
    " 'step_name', st.name, 'tool', st.tool, 'args', st.args, 'generation', s.generation, "
    " 'submitted_by', s.submitted_by, 'reason', st.approval->>'reason', "
    " 'waiting_since', st.updated_at, "
    " 'expires_at', st.updated_at + (coalesce((st.approval->>'timeout_ms')::bigint, $3::bigint) "
    "   * interval '1 ms'))::text, "
    " st.tool "
    "FROM steps st JOIN sagas s ON s.saga_id = st.saga_id "
    "WHERE st.status = 'awaiting_approval' AND s.submitted_by IS DISTINCT FROM $1 "
    " AND ($4::text[] IS NULL OR st.tool = ANY($4::text[])) "
    "ORDER BY st.updated_at, st.saga_id, st.idx LIMIT $2::int";

void gw_ops_approvals(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                      sg_http_answer_t *ans)
{
    char tmo[24];
    sg_pg_buf_t tools = {0};
    const char *params[] = {c->user->name, "1000", tmo, NULL};
    sg_json_t *doc, *items;
    sg_pg_res_t *res = NULL;
    sg_err_t err;
    sg_pg_t *pg;
    int rc;

    (void)req;
    (void)a;
    snprintf(tmo, sizeof(tmo), "%lld",
             (long long)sg_config_int(gw->cfg, "worker.approval_timeout_ms"));
    if (!(c->user->perms & GW_P_APPROVE)) {
        gw_problem(ans, 403, "the approval inbox is an approver's (gateway.users roles)", NULL);
        return;
    }
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        return;
    }
    if (c->user->approve_tools) {
        sg_pg_array_literal(&tools, (const char *const *)c->user->approve_tools,
                            c->user->napprove_tools);
        params[3] = tools.data;
    }
    rc = sg_pg_exec(pg, approvals_sql, 4, params, &res, &err);
    sg_pg_buf_free(&tools);
    gw_pool_put(gw->pool, pg);
    if (rc < 0) {
        gw_db_problem(ans, &err);
        return;
    }
    doc = sg_json_new_object();
    items = sg_json_new_array();
    for (size_t r = 0; r < sg_pg_res_rows(res); r++) {
        const char *text = sg_pg_res_get(res, r, 0);
        if (gw_user_may_approve(c->user, sg_pg_res_get(res, r, 1)))
            sg_json_append(items, sg_json_parse(text, strlen(text), NULL, NULL));
    }
    sg_pg_res_destroy(res);
    sg_json_add_node(doc, "items", items);
    gw_json(ans, 200, doc);
}

/* What a client may know of a tool: never its target (a URL may hold a
 * credential) nor its headers. */
void gw_ops_tools(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                  sg_http_answer_t *ans)
{
    static const char *const shown[] = {
        "adapter",     "side_effect", "approval",    "compensation",    "retry", "compensate_retry",
        "concurrency", "args",        "description", "nothing_to_undo", NULL};
    sg_json_t *doc = sg_json_new_object(), *items = sg_json_new_array();

    (void)c;
    (void)req;
    (void)a;
    for (size_t i = 0; i < gw->reg->ntools; i++) {
        const sg_tool_t *t = &gw->reg->tools[i];
        sg_json_t *o = sg_json_new_object();
        sg_json_add_str(o, "name", t->name);
        for (size_t k = 0; shown[k]; k++) {
            const sg_json_t *v = sg_json_member(t->node, shown[k]);
            if (v)
                sg_json_add_node(o, shown[k], sg_json_dup(v));
        }
        sg_json_add_bool(o, "approval_required", t->approval_required);
        sg_json_add_int(o, "timeout_ms", t->timeout_ms);
        sg_json_append(items, o);
    }
    sg_json_add_node(doc, "items", items);
    gw_json(ans, 200, doc);
}

void gw_ops_error(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                  sg_http_answer_t *ans)
{
    char *text = sg_err_describe(a->id);

    (void)gw;
    (void)c;
    (void)req;
    if (!text) {
        gw_problem(ans, 404,
                   "no such error code in the registry (schemas/error_codes.json): codes look "
                   "like tool.http.503 or input.schema.invalid",
                   NULL);
        return;
    }
    gw_json_text(ans, 200, text);
}

/* The Now page's figures in one statement, each over an index: sagas by
 * status (sagas_status), those in progress with no change for stuck_for
 * (sagas_status), steps waiting for a person (steps_awaiting_approval),
 * dead letters pending and new in the last hour (dead_letters_status),
 * and the workers' partitions (consumer_offsets, a row a partition).  The
 * relay's shards come beside them (sg_relay_status). */
static const char summary_sql[] =
    "SELECT (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb) FROM "
    "         (SELECT status, count(*) AS n FROM sagas GROUP BY status) c)::text, "
    " (SELECT count(*) FROM sagas WHERE status IN ('running', 'compensating', 'cancelling') "
    "   AND updated_at < now() - $1::bigint * interval '1 ms'), "
    " (SELECT count(DISTINCT saga_id) FROM steps WHERE status = 'awaiting_approval'), "
    " (SELECT count(*) FROM dead_letters WHERE status = 'pending'), "
    " (SELECT count(*) FROM dead_letters WHERE status = 'pending' "
    "   AND created_at > now() - interval '1 hour'), "
    " to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('group', group_id, 'topic', topic, "
    "   'partition', partition, 'owner', owner, 'next_offset', next_offset, "
    "   'idle_s', round(extract(epoch FROM now() - updated_at)::numeric, 1)) "
    "   ORDER BY group_id, topic, partition), '[]'::jsonb) FROM consumer_offsets)::text";

void gw_ops_summary(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                    sg_http_answer_t *ans)
{
    const char *v = sg_http_req_query(req, "stuck_for");
    int64_t stuck_ms = 15 * 60 * 1000;
    const char *params[1];
    sg_json_t *doc, *relay = NULL;
    sg_pg_res_t *res = NULL;
    sg_err_t err;
    sg_pg_t *pg;
    int rc;

    (void)a;
    if (!(c->user->perms & GW_P_READ_ALL)) {
        gw_problem(ans, 403,
                   "the summary counts every saga: a reader's, approver's or "
                   "operator's (gateway.users roles)",
                   NULL);
        return;
    }
    if (v && (!sg_ops_duration_ms(v, &stuck_ms) || stuck_ms < 0)) {
        gw_problem(ans, 400, "stuck_for: a duration such as 90s, 15m or 2h", NULL);
        return;
    }
    params[0] = SG_PG_INT(stuck_ms);
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        return;
    }
    rc = sg_pg_exec_cached(pg, summary_sql, 1, params, &res, &err);
    /* The relay's shards: is it alive (a heartbeat), is it behind (the
     * outbox's backlog and its oldest row), as `sagad-relay status`. */
    if (rc == 0 && sg_relay_status(pg, &relay, &err) < 0) {
        sg_pg_res_destroy(res);
        rc = -1;
    }
    gw_pool_put(gw->pool, pg);
    if (rc < 0) {
        gw_db_problem(ans, &err);
        return;
    }
    doc = sg_json_new_object();
    sg_json_add_raw(doc, "sagas_by_status", sg_pg_res_get(res, 0, 0));
    sg_json_add_int(doc, "stuck_for_ms", stuck_ms);
    sg_json_add_int(doc, "stuck", sg_pg_res_int(res, 0, 1, 0));
    sg_json_add_int(doc, "awaiting_approval", sg_pg_res_int(res, 0, 2, 0));
    sg_json_add_int(doc, "dead_letters_pending", sg_pg_res_int(res, 0, 3, 0));
    sg_json_add_int(doc, "dead_letters_new_1h", sg_pg_res_int(res, 0, 4, 0));
    sg_json_add_str(doc, "at", sg_pg_res_get(res, 0, 5));
    sg_json_add_node(doc, "relay", relay);
    sg_json_add_raw(doc, "partitions", sg_pg_res_get(res, 0, 6));
    sg_pg_res_destroy(res);
    gw_json(ans, 200, doc);
}
