/* What the MCP tools answer (gw_mcp.h): results, failure envelopes, saga
 * envelopes for an agent.  Pure: no I/O, no clock.
 *
 * Downstream text is data.  A tool's answer, its error message and even
 * the agent_action it sends with a failure were written by a service the
 * agent does not control, and a model reads whatever it is handed as
 * possible instructions.  So here every agent_action an agent sees comes
 * from the error-code registry (schemas/error_codes.json) or from this
 * server's own sentences; what a downstream said is kept, cut, under
 * reported_agent_action, beside results and outputs that are cut too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_mcp.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_err.h"

static sg_json_t *jnull(void)
{
    sg_json_t *n = sg_json_parse("null", 4, NULL, NULL);

    if (!n)
        abort();
    return n;
}

sg_json_t *gw_mcp_result(sg_json_t *structured, bool is_error)
{
    sg_json_t *res = sg_json_new_object(), *content = sg_json_new_array();
    sg_json_t *block = sg_json_new_object();
    char *text = sg_json_print(structured);

    sg_json_add_str(block, "type", "text");
    sg_json_add_str(block, "text", text);
    free(text);
    sg_json_append(content, block);
    sg_json_add_node(res, "content", content);
    sg_json_add_node(res, "structuredContent", structured);
    sg_json_add_bool(res, "isError", is_error);
    return res;
}

/* Whether the registry's class of code is one that is retried. */
static bool retried(const char *code)
{
    char *text = sg_err_describe(code);
    sg_json_t *doc = text ? sg_json_parse(text, strlen(text), NULL, NULL) : NULL;
    bool yes = false;

    if (doc && sg_json_get_bool(doc, "$", "retryable", true, &yes, NULL) < 0)
        yes = false;
    sg_json_destroy(doc);
    free(text);
    return yes;
}

/* A copy of s cut at max bytes (on a UTF-8 character boundary), saying
 * how much was cut. */
static char *cut(const char *s, size_t max)
{
    size_t n = strlen(s), keep = max;
    char *out;

    if (n <= max)
        return sg_xstrdup(s);
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
        keep--;
    out = sg_xmalloc(keep + 64);
    memcpy(out, s, keep);
    snprintf(out + keep, 64, " [cut: %zu more bytes]", n - keep);
    return out;
}

sg_json_t *gw_mcp_failure(const char *code, const char *message, const char *override,
                          sg_json_t *run_health)
{
    sg_json_t *doc = sg_json_new_object();
    const char *action = override ? override : sg_err_agent_action(code);
    bool retry = retried(code);
    char *msg = cut(message ? message : "", GW_MCP_TEXT_MAX);

    sg_json_add_str(doc, "status", retry ? "unavailable" : "refused");
    sg_json_add_str(doc, "error_code", code);
    sg_json_add_str(doc, "message", msg);
    sg_json_add_bool(doc, "retriable", retry);
    sg_json_add_str(doc, "agent_action",
                    action ? action
                           : "Do not retry this call as it is: read message and error_code "
                             "(explain_error tells what the code means), then change the call.");
    sg_json_add_node(doc, "run_health", run_health ? run_health : jnull());
    free(msg);
    return doc;
}

/* The code of a gateway answer that carries none. */
static const char *code_of_status(unsigned status, const char *detail, const char *not_found)
{
    switch (status) {
    case 401:
    case 403:
        return "input.auth.forbidden";
    case 404:
        return not_found ? not_found : "input.saga.not_found";
    case 409:
        return "input.saga.conflict";
    case 413:
        return "input.too_large";
    case 400:
    case 422:
        return "input.schema.invalid";
    default:
        if (status >= 500)
            return detail && strncmp(detail, "PostgreSQL", 10) == 0 ? "pg.unavailable"
                                                                    : "kafka.unavailable";
        return "input.schema.invalid";
    }
}

sg_json_t *gw_mcp_failure_of(unsigned status, const sg_json_t *problem, const char *not_found)
{
    const char *detail = sg_json_string(sg_json_member(problem, "detail"));
    const char *code = sg_json_string(sg_json_member(problem, "code"));
    const sg_json_t *errors = sg_json_member(problem, "errors");
    sg_json_t *doc;

    /* A code the gateway names is the registry's; a 404 means what the
     * tool says it means (a saga, an error code, a step). */
    if (!code || status == 404)
        code = code_of_status(status, detail, not_found);
    doc = gw_mcp_failure(code, detail ? detail : "the gateway refused the call", NULL, NULL);
    if (sg_json_is_array(errors)) {
        sg_json_t *copy = sg_json_dup(errors);
        gw_mcp_data(copy);
        sg_json_add_node(doc, "errors", copy);
    }
    return doc;
}

/* ---- downstream data -------------------------------------------------------- */

static sg_json_t *preview(const sg_json_t *node)
{
    sg_json_t *p = sg_json_new_object();
    char *text = sg_json_print(node);
    char *head = cut(text, GW_MCP_TEXT_MAX);

    sg_json_add_bool(p, "truncated", true);
    sg_json_add_int(p, "bytes", (int64_t)strlen(text));
    sg_json_add_str(p, "preview", head);
    free(head);
    free(text);
    return p;
}

static void agent_actions(sg_json_t *obj);

/* Replaces the member or item at of node by repl. */
static void replace(sg_json_t *node, const sg_json_t *at, size_t i, sg_json_t *repl)
{
    if (sg_json_key(at))
        sg_json_set(node, sg_json_key(at), repl);
    else if (sg_json_set_at(node, i, repl) < 0)
        sg_json_destroy(repl);
}

void gw_mcp_data(sg_json_t *node)
{
    size_t i = 0;

    if (!node)
        return;
    if (sg_json_is_object(node))
        agent_actions(node);
    for (const sg_json_t *c = sg_json_first(node); c; i++) {
        const char *s = sg_json_string(c);
        const sg_json_t *next = sg_json_next(c);
        sg_json_t *repl = NULL;
        char *text;

        if (s && strlen(s) > GW_MCP_TEXT_MAX) {
            char *short_ = cut(s, GW_MCP_TEXT_MAX);
            repl = sg_json_new_str(short_);
            free(short_);
        } else {
            text = sg_json_print(c);
            if (strlen(text) > GW_MCP_VALUE_MAX)
                repl = preview(c);
            free(text);
        }
        if (repl)
            replace(node, c, i, repl); /* c is freed; repl is small and final */
        else
            gw_mcp_data((sg_json_t *)c);
        c = next;
    }
}

/* An object's agent_action, if it has an error_code, becomes the
 * registry's; a different text it carried is kept as reported_agent_action
 * (data, cut).  One without an error_code keeps none of its own. */
static void agent_actions(sg_json_t *obj)
{
    const sg_json_t *a = sg_json_member(obj, "agent_action");
    const char *said = sg_json_string(a);
    const char *code = sg_json_string(sg_json_member(obj, "error_code"));
    const char *reg = code ? sg_err_agent_action(code) : NULL;

    if (!a || sg_json_member(obj, "reported_agent_action"))
        return;
    if (said && (!reg || strcmp(said, reg) != 0)) {
        char *c = cut(said, GW_MCP_TEXT_MAX / 2);
        sg_json_add_str(obj, "reported_agent_action", c);
        free(c);
    }
    sg_json_set(obj, "agent_action", reg ? sg_json_new_str(reg) : jnull());
}

/* ---- a saga's envelope --------------------------------------------------------- */

static const char *str_of(const sg_json_t *o, const char *key)
{
    return sg_json_string(sg_json_member(o, key));
}

static sg_json_t *pending(const sg_json_t *steps)
{
    sg_json_t *out = sg_json_new_array();

    for (const sg_json_t *st = sg_json_first(steps); st; st = sg_json_next(st)) {
        const char *s = str_of(st, "status");
        sg_json_t *p;
        if (!s || strcmp(s, "awaiting_approval") != 0)
            continue;
        p = sg_json_new_object();
        for (const char *const *k = (const char *const[]){"step", "name", "tool", "approval", NULL};
             *k; k++)
            if (sg_json_member(st, *k))
                sg_json_add_node(p, strcmp(*k, "name") == 0 ? "step_name" : *k,
                                 sg_json_dup(sg_json_member(st, *k)));
        sg_json_append(out, p);
    }
    return out;
}

/* What the agent does next, by the saga's status: the server's sentences,
 * or the registry's for the failure that stopped it. */
static char *next_action(const char *status, const char *code, int64_t seq, bool timed_out)
{
    char buf[600];
    const char *reg = code ? sg_err_agent_action(code) : NULL;

    if (timed_out)
        snprintf(buf, sizeof(buf),
                 "The wait ended before the saga changed: call wait_saga again with "
                 "after_seq=%lld. Do not submit the saga again: it is running.",
                 (long long)seq);
    else if (strcmp(status, "running") == 0)
        snprintf(buf, sizeof(buf),
                 "The saga is running: call wait_saga with after_seq=%lld to wait for its next "
                 "change. Do not submit it again.",
                 (long long)seq);
    else if (strcmp(status, "awaiting_approval") == 0)
        snprintf(buf, sizeof(buf),
                 "A step waits for a person's approval (pending_approvals): ask your user to "
                 "have an approver decide it (tell them what is pending), then call wait_saga "
                 "with after_seq=%lld. You cannot approve a saga you submitted.",
                 (long long)seq);
    else if (strcmp(status, "ok") == 0)
        snprintf(buf, sizeof(buf), "Done: use the output.");
    else if (strcmp(status, "partial") == 0)
        snprintf(buf, sizeof(buf),
                 "Done, but best-effort steps failed (see steps): use the output, and tell your "
                 "user which optional steps did not happen.");
    else if (strcmp(status, "cancelled") == 0)
        snprintf(buf, sizeof(buf),
                 "The saga was cancelled and what it had done was undone; submit a new saga "
                 "(a new saga_id) only if the work is still wanted.");
    else if (reg)
        snprintf(buf, sizeof(buf), "%s", reg);
    else
        snprintf(buf, sizeof(buf),
                 "The saga failed and what it had done was undone: read error_code "
                 "(explain_error) and the failed step, fix the cause, and submit a new saga "
                 "under a new saga_id.");
    return sg_xstrdup(buf);
}

void gw_mcp_envelope(sg_json_t *env, bool wait_timed_out)
{
    const char *status = str_of(env, "status");
    const char *code = str_of(env, "error_code");
    sg_json_t *steps = (sg_json_t *)sg_json_member(env, "steps");
    sg_json_t *health = (sg_json_t *)sg_json_member(env, "run_health");
    double seq = 0;
    char *action;

    sg_json_number(sg_json_member(env, "seq"), &seq);
    /* Each step's and the blocking failure's agent_action: the registry's
     * (gw_mcp_data), their results and the output cut. */
    gw_mcp_data(steps);
    gw_mcp_data(health);
    if (sg_json_member(env, "output")) {
        sg_json_t *out = sg_json_dup(sg_json_member(env, "output"));
        char *text;
        gw_mcp_data(out); /* its members cut; then the whole, if still large */
        text = sg_json_print(out);
        if (strlen(text) > GW_MCP_VALUE_MAX) {
            sg_json_set(env, "output", preview(out));
            sg_json_destroy(out);
        } else {
            sg_json_set(env, "output", out);
        }
        free(text);
    }
    if (status && (strcmp(status, "error") == 0 || strcmp(status, "timeout") == 0)) {
        /* A saga that failed is a business failure: the envelope is also
         * a failure envelope (message and retriable beside status,
         * error_code, agent_action and run_health). */
        char msg[300];
        double step = -1;
        sg_json_number(sg_json_member(sg_json_member(health, "blocking_failure"), "step"), &step);
        snprintf(msg, sizeof(msg),
                 "The saga ended %s: step %d failed with %s; the steps before it were undone "
                 "(see steps and run_health).",
                 status, (int)step, code ? code : "an error");
        sg_json_set(env, "message", sg_json_new_str(msg));
        sg_json_set(env, "retriable",
                    sg_json_parse(code && retried(code) ? "true" : "false",
                                  code && retried(code) ? 4 : 5, NULL, NULL));
    }
    sg_json_set(env, "pending_approvals", pending(steps));
    action = next_action(status ? status : "running", code, (int64_t)seq, wait_timed_out);
    sg_json_set(env, "agent_action", sg_json_new_str(action));
    free(action);
    sg_json_set(
        env, "wait_timed_out",
        sg_json_parse(wait_timed_out ? "true" : "false", wait_timed_out ? 4 : 5, NULL, NULL));
}

bool gw_mcp_envelope_failed(const sg_json_t *env)
{
    const char *status = str_of(env, "status");

    return status && (strcmp(status, "error") == 0 || strcmp(status, "timeout") == 0);
}
