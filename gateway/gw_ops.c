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
 * may approve, a saga it did not submit (four eyes), oldest first.  Found
 * through steps_waiting (migration 0027), a row each, kept by triggers:
 * an index of steps on its status would cost every step's update its HOT
 * update. */
static const char approvals_sql[] =
    "SELECT jsonb_build_object('saga_id', s.saga_id, 'saga_name', s.name, 'step', st.idx, "
    " 'step_name', st.name, 'tool', st.tool, 'args', st.args, 'generation', s.generation, "
    " 'submitted_by', s.submitted_by, 'reason', st.approval->>'reason', "
    " 'waiting_since', st.updated_at, "
    " 'expires_at', st.updated_at + (coalesce((st.approval->>'timeout_ms')::bigint, $3::bigint) "
    "   * interval '1 ms'))::text, "
    " st.tool "
    "FROM steps_waiting w JOIN steps st ON st.saga_id = w.saga_id AND st.idx = w.idx "
    "JOIN sagas s ON s.saga_id = st.saga_id "
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

/* How long a worker's breaker rows count after its last write (it writes
 * every 5 s: worker/loop/worker_status.c), and the window and bound of the
 * recent error rate. */
#define HEALTH_FRESH "interval '30 seconds'"
#define RECENT_S     300
#define RECENT_MAX   10000
#define RECENT_SCAN  50000 /* the newest attempt ids looked at, at most */

/* Each tool's breaker as the workers alive hold it (tool_breakers, rows
 * written in the last 30 s: a worker gone stops counting), the worst state
 * first; and its calls and errors among the attempts started in the last
 * 5 minutes, at most the newest 10,000 of them (attempts_pkey walked
 * backwards: ids are given in insert order, as started_at is set; at most
 * RECENT_SCAN ids back, so an idle system does not walk every attempt
 * ever made; then one steps row each by its key: the statement's cost is
 * bounded whatever the rate, and no index on started_at costs every
 * attempt's insert, migration 0027).  An error is an attempt that ended in error
 * or timeout, tool.circuit_open included; a compensation counts for its
 * compensating tool.  One object keyed by tool. */
static const char health_sql[] =
    "WITH live AS (SELECT tool, min(CASE state WHEN 'open' THEN 0 WHEN 'half_open' THEN 1 "
    "   ELSE 2 END) AS worst, "
    "  jsonb_agg(jsonb_build_object('worker_id', worker_id, 'state', state, 'since', since, "
    "   'failures', failures) ORDER BY CASE state WHEN 'open' THEN 0 WHEN 'half_open' THEN 1 "
    "   ELSE 2 END, since, worker_id) AS workers "
    "  FROM tool_breakers WHERE seen_at > now() - " HEALTH_FRESH " GROUP BY tool), "
    "recent AS (SELECT CASE a.phase WHEN 'forward' THEN st.tool "
    "   ELSE st.compensate->>'tool' END AS tool, count(*) AS calls, "
    "  count(*) FILTER (WHERE a.status IN ('error', 'timeout')) AS errors "
    "  FROM (SELECT saga_id, step_idx, phase, status FROM attempts "
    "   WHERE id > (SELECT coalesce(max(id), 0) FROM attempts) - $3::bigint "
    "   AND started_at > now() - $1::int * interval '1 s' AND status IS NOT NULL "
    "   ORDER BY id DESC LIMIT $2::int) a "
    "  JOIN steps st ON st.saga_id = a.saga_id AND st.idx = a.step_idx GROUP BY 1) "
    "SELECT coalesce(jsonb_object_agg(coalesce(l.tool, r.tool), jsonb_strip_nulls("
    " jsonb_build_object('breaker', CASE WHEN l.tool IS NOT NULL THEN jsonb_build_object("
    "   'state', (ARRAY['open', 'half_open', 'closed'])[l.worst + 1], 'workers', l.workers) END, "
    "  'recent', CASE WHEN r.tool IS NOT NULL THEN jsonb_build_object('calls', r.calls, "
    "   'errors', r.errors, 'error_rate', round(r.errors::numeric / r.calls, 4)) END))), "
    " '{}'::jsonb)::text "
    "FROM live l FULL JOIN recent r ON r.tool = l.tool WHERE coalesce(l.tool, r.tool) IS NOT NULL";

/* The tools' health (above), parsed; NULL with err when PostgreSQL does
 * not answer. */
static sg_json_t *tools_health(gw_t *gw, sg_err_t *err)
{
    const char *params[] = {SG_PG_INT(RECENT_S), SG_PG_INT(RECENT_MAX), SG_PG_INT(RECENT_SCAN)};
    sg_json_t *health = NULL;
    sg_pg_res_t *res = NULL;
    const char *text;
    sg_pg_t *pg;
    int rc;

    if (!(pg = gw_pool_get(gw->pool, err)))
        return NULL;
    rc = sg_pg_exec_cached(pg, health_sql, 3, params, &res, err);
    gw_pool_put(gw->pool, pg);
    if (rc < 0)
        return NULL;
    text = sg_pg_res_get(res, 0, 0);
    health = sg_json_parse(text, strlen(text), NULL, err);
    sg_pg_res_destroy(res);
    return health;
}

/* A tool's breaker and recent calls from health (NULL: not known). */
static void tool_health(sg_json_t *o, const char *name, const sg_json_t *health)
{
    const sg_json_t *h = health ? sg_json_member(health, name) : NULL;
    const sg_json_t *breaker = h ? sg_json_member(h, "breaker") : NULL;
    const sg_json_t *recent = h ? sg_json_member(h, "recent") : NULL;
    sg_json_t *r;

    if (!health)
        return;
    if (breaker)
        sg_json_add_node(o, "breaker", sg_json_dup(breaker));
    r = recent ? sg_json_dup(recent) : sg_json_new_object();
    if (!recent) {
        sg_json_add_int(r, "calls", 0);
        sg_json_add_int(r, "errors", 0);
    }
    sg_json_add_int(r, "window_s", RECENT_S);
    sg_json_add_node(o, "recent", r);
}

/* What a client may know of a tool: never its target (a URL may hold a
 * credential) nor its headers; and how it is doing, as the workers see it
 * (breaker, recent).  The registry is the gateway's own: without
 * PostgreSQL it is still listed, with health_error saying why the rest is
 * missing. */
void gw_ops_tools(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                  sg_http_answer_t *ans)
{
    static const char *const shown[] = {
        "adapter",     "side_effect", "approval",    "compensation",    "retry", "compensate_retry",
        "concurrency", "args",        "description", "nothing_to_undo", NULL};
    sg_json_t *doc = sg_json_new_object(), *items = sg_json_new_array(), *health;
    sg_err_t err;

    (void)c;
    (void)req;
    (void)a;
    health = tools_health(gw, &err);
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
        tool_health(o, t->name, health);
        sg_json_append(items, o);
    }
    sg_json_destroy(health);
    sg_json_add_node(doc, "items", items);
    if (!health)
        sg_json_add_str(doc, "health_error", err.message);
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
 * (sagas_status), steps waiting for a person (steps_waiting),
 * dead letters pending and new in the last hour (dead_letters_status),
 * the tools whose breaker is not closed on a worker alive (tool_breakers,
 * a row a worker and tool), and the workers' partitions (consumer_offsets,
 * a row a partition) with the lag their owner measured (partition_lag, of
 * the owner's epoch, written in the last 30 s).  The relay's shards come
 * beside them (sg_relay_status). */
static const char summary_sql[] =
    "SELECT (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb) FROM "
    "         (SELECT status, count(*) AS n FROM sagas GROUP BY status) c)::text, "
    " (SELECT count(*) FROM sagas WHERE status IN ('running', 'compensating', 'cancelling') "
    "   AND updated_at < now() - $1::bigint * interval '1 ms'), "
    " (SELECT count(DISTINCT w.saga_id) FROM steps_waiting w JOIN steps st "
    "   ON st.saga_id = w.saga_id AND st.idx = w.idx WHERE st.status = 'awaiting_approval'), "
    " (SELECT count(*) FROM dead_letters WHERE status = 'pending'), "
    " (SELECT count(*) FROM dead_letters WHERE status = 'pending' "
    "   AND created_at > now() - interval '1 hour'), "
    " to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('group', c.group_id, 'topic', c.topic, "
    "   'partition', c.partition, 'owner', c.owner, 'next_offset', c.next_offset, "
    "   'idle_s', round(extract(epoch FROM now() - c.updated_at)::numeric, 1), "
    "   'lag', l.lag, 'high_watermark', l.high_watermark, "
    "   'lag_age_s', round(extract(epoch FROM now() - l.measured_at)::numeric, 1)) "
    "   ORDER BY c.group_id, c.topic, c.partition), '[]'::jsonb) "
    "  FROM consumer_offsets c LEFT JOIN partition_lag l ON l.group_id = c.group_id "
    "   AND l.topic = c.topic AND l.partition = c.partition AND l.owner_epoch = c.owner_epoch "
    "   AND l.measured_at > now() - " HEALTH_FRESH ")::text, "
    " (SELECT count(DISTINCT tool) FROM tool_breakers WHERE state <> 'closed' "
    "   AND seen_at > now() - " HEALTH_FRESH ")";

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
    sg_json_add_int(doc, "breakers_open", sg_pg_res_int(res, 0, 7, 0));
    sg_pg_res_destroy(res);
    gw_json(ans, 200, doc);
}
