/* /v1/sagas/{id}/cancel, /approve and /reject (gw.h): the caller's right
 * checked, a control command produced to the commands topic with the
 * gateway's key (none: 503), then the worker's decision waited for in
 * saga_controls (?wait=, CONTROL_WAIT_MS by default, at most
 * gateway.wait_max_ms): 200 with it, 202 when it has not come. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_err.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_submit.h"
#include "sagad/sg_text.h"

#define CONTROL_WAIT_MS 5000

/* The worker's decision on command id, waited for up to wait_ms: 1 with
 * outcome and code set, 0 not decided yet, -1 PostgreSQL failed. */
static int decision(gw_t *gw, const char *saga_id, const char *command_id, int64_t wait_ms,
                    char *outcome, size_t osize, char *code, size_t csize)
{
    const char *params[] = {saga_id, command_id};
    uint64_t deadline = sg_run_now_ms() + (uint64_t)wait_ms;

    for (;;) {
        sg_pg_res_t *res = NULL;
        sg_err_t err;
        sg_pg_t *pg = gw_pool_get(gw->pool, &err);
        gw_watch_t w;
        int64_t seq;
        int rc;

        if (!pg)
            return -1;
        /* The seq first, then the look: a decision committed in between
         * moves the seq the watch compares with. */
        seq = gw_saga_seq(pg, saga_id, &err);
        rc = seq == -2 ? -1
                       : sg_pg_exec(pg,
                                    "SELECT outcome, coalesce(error_code, '') FROM saga_controls "
                                    "WHERE saga_id = $1 AND command_id = $2 ORDER BY id LIMIT 1",
                                    2, params, &res, &err);
        gw_pool_put(gw->pool, pg);
        if (rc < 0)
            return -1;
        if (sg_pg_res_rows(res)) {
            snprintf(outcome, osize, "%s", sg_pg_res_get(res, 0, 0));
            snprintf(code, csize, "%s", sg_pg_res_get(res, 0, 1));
            sg_pg_res_destroy(res);
            return 1;
        }
        sg_pg_res_destroy(res);
        if (sg_run_now_ms() >= deadline)
            return 0;
        gw_watch_add(gw->pool, &w, saga_id, seq);
        gw_watch_wait(gw->pool, &w, deadline);
        gw_watch_remove(gw->pool, &w);
    }
}

/* The reason of a control's body: {"reason": "..."}; NULL after answering. */
static sg_json_t *control_body(gw_t *gw, sg_http_req_t *req, const char **reason,
                               sg_http_answer_t *ans)
{
    size_t len;
    const char *body = sg_http_req_body(req, &len);
    sg_json_t *doc;
    sg_err_t err;

    if (!(doc = sg_json_parse(body ? body : "", len, &gw->lim, &err))) {
        gw_problem_at(ans, 400, err.code, "$", err.message);
        return NULL;
    }
    if (!sg_json_is_object(doc)) {
        sg_json_destroy(doc);
        gw_problem_at(ans, 400, "input.schema.type", "$",
                      "type: expected object {\"reason\": \"...\"}");
        return NULL;
    }
    *reason = sg_json_string(sg_json_member(doc, "reason"));
    if (!*reason || !**reason) {
        sg_json_destroy(doc);
        gw_problem_at(ans, 422, "input.schema.required", "$.reason",
                      "required: why (kept in the saga's history)");
        return NULL;
    }
    return doc;
}

/* Sends the control and answers with the worker's decision (or 202). */
static void send_control(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const char *type,
                         const char *saga_id, const gw_target_t *t, const char *reason,
                         sg_http_answer_t *ans)
{
    sg_json_t *m = sg_json_new_object();
    const char *w = sg_http_req_query(req, "wait");
    char id[64], hex[17], outcome[16], code[96];
    int64_t wait_ms = CONTROL_WAIT_MS;
    sg_decoded_t dec;
    sg_err_t err;
    char *text;
    int rc;

    if (w && !gw_parse_duration_ms(w, &wait_ms)) {
        sg_json_destroy(m);
        gw_problem(ans, 400, "wait: a duration such as 5s (0: answer once sent)", NULL);
        return;
    }
    if (wait_ms > gw->wait_max_ms)
        wait_ms = gw->wait_max_ms;
    gw_random_hex(hex, 8);
    snprintf(id, sizeof(id), "%s-%s", type + 5, hex);
    sg_json_add_int(m, "v", 1);
    sg_json_add_str(m, "type", type);
    sg_json_add_str(m, "id", id);
    sg_json_add_str(m, "saga_id", saga_id);
    if (t->has_step) {
        sg_json_add_int(m, "step", atoi(t->idx));
        sg_json_add_int(m, "generation", atoi(t->generation));
    }
    sg_json_add_str(m, "by", c->user->name);
    sg_json_add_str(m, "reason", reason);
    sg_json_add_str(m, "on_behalf_of", c->user->name);
    text = sg_json_print(m);
    sg_json_destroy(m);
    sg_submit_decode(text, strlen(text), &gw->lim, &dec);
    sg_json_destroy(dec.doc);
    if (dec.type == SG_CMD_POISON) {
        gw_problem_at(ans, 422, dec.err.code, "$", dec.err.message);
        free(text);
        return;
    }
    rc = gw_produce(gw, saga_id, text, strlen(text), true, GW_PRODUCE_TIMEOUT_MS, &err);
    free(text);
    if (rc < 0) {
        char detail[700];
        snprintf(detail, sizeof(detail), "%s: not sent; try again", err.message);
        gw_problem(ans, 503, detail, NULL);
        return;
    }
    rc = wait_ms ? decision(gw, saga_id, id, wait_ms, outcome, sizeof(outcome), code, sizeof(code))
                 : 0;
    if (rc > 0 && strcmp(outcome, "refused") == 0) {
        sg_json_t *extra = sg_json_new_object();
        char detail[300];
        const char *action = sg_err_agent_action(code);
        sg_json_add_str(extra, "command_id", id);
        sg_json_add_str(extra, "code", code);
        if (action)
            sg_json_add_str(extra, "agent_action", action);
        snprintf(detail, sizeof(detail), "the worker refused %s: %s", type, code);
        gw_problem(ans, strncmp(code, "input.auth.", 11) == 0 ? 403 : 409, detail, extra);
        return;
    }
    {
        sg_json_t *doc = sg_json_new_object();
        sg_json_add_str(doc, "command_id", id);
        sg_json_add_str(doc, "saga_id", saga_id);
        sg_json_add_str(doc, "outcome", rc > 0 ? outcome : "sent");
        gw_json(ans, rc > 0 ? 200 : 202, doc);
    }
}

/* What every control checks first: the saga id, the caller's right
 * (perms, else 403 with why), the gateway's key, the body's reason.  The
 * body (caller destroys), or NULL after answering. */
static sg_json_t *control_prelude(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req,
                                  const gw_route_args_t *a, unsigned perms, const char *why,
                                  const char **reason, sg_http_answer_t *ans)
{
    if (!gw_saga_id_ok(ans, a->id))
        return NULL;
    if (!(c->user->perms & perms)) {
        gw_problem(ans, 403, why, NULL);
        return NULL;
    }
    if (!gw->have_key) {
        gw_problem(ans, 503,
                   "this gateway has no signing key (gateway.key): it cannot send controls", NULL);
        return NULL;
    }
    return control_body(gw, req, reason, ans);
}

void gw_sagas_cancel(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans)
{
    const char *reason;
    sg_json_t *body;
    gw_target_t t;
    int found;

    if (!(body = control_prelude(gw, c, req, a, GW_P_CANCEL_ALL | GW_P_CANCEL_OWN,
                                 "cancelling needs the operator role, or the submitter's own saga",
                                 &reason, ans)))
        return;
    if ((found = gw_saga_target(gw, c, a->id, NULL, &t, ans)) < 0)
        goto out;
    if (!found) {
        gw_no_saga(ans, a->id);
    } else if (!(c->user->perms & GW_P_CANCEL_ALL) &&
               (!t.has_submitter || strcmp(t.submitted_by, c->user->name) != 0)) {
        gw_problem(ans, 403, "a submitter may cancel only the sagas it submitted", NULL);
    } else {
        send_control(gw, c, req, "saga.cancel", a->id, &t, reason, ans);
    }
out:
    sg_json_destroy(body);
}

void gw_sagas_decide(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans)
{
    bool approve = strcmp(a->verb, "approve") == 0;
    const char *reason;
    sg_json_t *body;
    gw_target_t t;
    int found;

    if (!(body = control_prelude(gw, c, req, a, GW_P_APPROVE,
                                 "deciding an approval needs the approver role", &reason, ans)))
        return;
    if ((found = gw_saga_target(gw, c, a->id, a->step, &t, ans)) < 0)
        goto out;
    if (!found) {
        gw_no_saga(ans, a->id);
    } else if (!t.has_step) {
        gw_problem(ans, 404, "the saga has no such step (its name, or its index from 0)", NULL);
    } else if (!gw_user_may_approve(c->user, t.tool)) {
        gw_problem_at(ans, 403, "input.auth.forbidden", "$.step",
                      "you may not approve this step's tool (approve_tools in gateway.users)");
    } else if (t.has_submitter && strcmp(t.submitted_by, c->user->name) == 0) {
        gw_problem_at(ans, 403, "input.auth.self_approval", "$.step",
                      "four eyes: you submitted this saga, another approver must decide");
    } else if (strcmp(t.step_status, "awaiting_approval") != 0) {
        char detail[200];
        snprintf(detail, sizeof(detail), "step %s is %s, not awaiting_approval", t.name,
                 t.step_status);
        gw_problem_at(ans, 409, "input.step.not_awaiting_approval", "$.step", detail);
    } else {
        send_control(gw, c, req, approve ? "saga.approve" : "saga.reject", a->id, &t, reason, ans);
    }
out:
    sg_json_destroy(body);
}
