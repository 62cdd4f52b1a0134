/* The fixture of the saga decision's tests (test_saga.c, test_saga_start.c):
 * a registry, a four-step saga in any state, commands and returned calls,
 * and readers of the outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "saga_fixture.h"
#include "unit.h"

static const char registry_text[] =
    "{\"v\":1,\"tools\":{"
    "\"noop\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":\"read\"},"
    "\"reserve\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"reversible\"},"
    "\"release\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"idempotent\"},"
    "\"charge\":{\"adapter\":\"builtin\",\"target\":\"ledger\",\"side_effect\":\"reversible\","
    "\"compensation\":\"release\",\"args\":{\"type\":\"object\",\"required\":[\"amount\"],"
    "\"properties\":{\"amount\":{\"type\":\"integer\",\"minimum\":1}}}},"
    "\"email\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":\"irreversible\"}"
    "}}";

/* The saga of every case: hold (reserve, compensated by release), note
 * (noop, nothing to undo), pay (charge, compensated by release), mail
 * (email, irreversible). */
static const struct {
    const char *name, *tool, *args, *comp;
} steps[] = {
    {"hold", "reserve", "{}", "{\"tool\":\"release\",\"args\":{}}"},
    {"note", "noop", "{}", NULL},
    {"pay", "charge", "{\"amount\":5}", "{\"tool\":\"release\",\"args\":{\"amount\":5}}"},
    {"mail", "email", "{}", NULL},
};

void fx_init(fx_t *fx)
{
    sg_config_t *cfg = sg_config_new();
    sg_err_t err;

    memset(fx, 0, sizeof(*fx));
    fx->reg = sg_registry_parse("test-registry.json", registry_text, strlen(registry_text), cfg,
                                NULL, &err);
    cr_assert_not_null(fx->reg, "registry refused: %s", err.message);
    sg_config_destroy(cfg);
    fx->retry = (sg_policy_t){3, 100, 1000};
    fx->comp_retry = (sg_policy_t){2, 100, 1000};
    fx->limits = (sg_json_limits_t)SG_JSON_LIMITS_DEFAULT;
    fx->rules = (worker_rules_t){
        .reg = fx->reg,
        .limits = &fx->limits,
        .topic_internal = "t.internal",
        .topic_events = "t.events",
        .crash_loop_limit = 3,
        .hold_ms = 0,
        .budget_ms = 0,
        .retry = &fx->retry,
        .comp_retry = &fx->comp_retry,
        .chain = true,
        .log_level = SG_LOG_DEBUG,
    };
    sg_rng_seed(&fx->rng, 42);
    fx->in = (worker_input_t){.cmd = &fx->cmd, .partition = 3, .now_ms = NOW_MS, .rng = &fx->rng};
    fx->cmd = (worker_dcmd_t){.dec = &fx->dec, .result = &fx->result, .call = &fx->call};
    fx->cmd.offset = 17;
}

void fx_fini(fx_t *fx)
{
    worker_outcome_free(&fx->out);
    sg_json_destroy(fx->dec.doc);
    sg_registry_destroy(fx->reg);
}

/* Status letters: p pending, r running, s succeeded, f failed, u unknown, c
 * compensating, C compensated, x compensation_failed, k skipped, a
 * awaiting_approval, A approved; for the saga: R running, H held, D
 * completed, c compensating, C compensated, F failed, N cancelling, X
 * cancelled. */
const char fx_step_letters[] = "prsfucCxkaA", fx_saga_letters[] = "RHDcCFNX";

worker_step_status_t fx_step_status(char l)
{
    const char *p = strchr(fx_step_letters, l);

    cr_assert(p && l, "step letter %c", l);
    return (worker_step_status_t)(p - fx_step_letters);
}

worker_saga_status_t fx_saga_status(char l)
{
    const char *p = strchr(fx_saga_letters, l);

    cr_assert(p && l, "saga letter %c", l);
    return (worker_saga_status_t)(p - fx_saga_letters);
}

/* The saga as a load returns it: statuses, attempts (forward, compensate)
 * per step. */
void fx_saga(fx_t *fx, char saga, const char *st, const int *att, const int *catt)
{
    worker_saga_t *s = &fx->saga;

    memset(s, 0, sizeof(*s));
    s->saga_id = "order-1";
    s->name = "order";
    s->input = "{\"order\":1}";
    s->traceparent = TP;
    s->status = fx_saga_status(saga);
    s->generation = 1;
    s->seq = 5;
    s->retry_budget = -1;
    s->nsteps = NSTEPS;
    for (int i = 0; i < NSTEPS; i++) {
        worker_step_t *p = &s->steps[i];
        p->idx = i;
        p->name = steps[i].name;
        p->tool = steps[i].tool;
        p->args = steps[i].args;
        p->comp = steps[i].comp;
        p->status = fx_step_status(st[i]);
        p->attempts = att ? att[i] : 0;
        p->comp_attempts = catt ? catt[i] : 0;
    }
}

void fx_command(fx_t *fx, sg_ctype_t type, int step, int attempt, int generation)
{
    fx->dec.type = type;
    snprintf(fx->dec.saga_id, sizeof(fx->dec.saga_id), "order-1");
    fx->dec.step = step;
    fx->dec.attempt = attempt;
    fx->dec.generation = generation;
}

/* The principal that signed the fixture's control commands (verified at
 * intake in the worker): every role, any tool. */
const sg_principal_t fx_signer = {.name = "ops",
                                  .roles = SG_ROLE_SUBMIT | SG_ROLE_CANCEL | SG_ROLE_APPROVE};

void fx_cancel(fx_t *fx)
{
    static const char doc[] = "{\"v\":1,\"type\":\"saga.cancel\",\"id\":\"c-1\","
                              "\"saga_id\":\"order-1\",\"by\":\"ops\",\"reason\":\"withdrawn\"}";

    fx_command(fx, SG_CMD_CANCEL, -1, 0, 0);
    sg_json_destroy(fx->dec.doc);
    fx->dec.doc = sg_json_parse(doc, strlen(doc), NULL, NULL);
    cr_assert_not_null(fx->dec.doc);
    fx->dec.by = sg_json_string(sg_json_member(fx->dec.doc, "by"));
    fx->dec.reason = sg_json_string(sg_json_member(fx->dec.doc, "reason"));
    fx->dec.who = &fx_signer;
    fx->dec.as = fx_signer.name;
}

void fx_decision(fx_t *fx, sg_ctype_t type, int step)
{
    char doc[256];

    snprintf(doc, sizeof(doc),
             "{\"v\":1,\"type\":\"%s\",\"id\":\"a-1\",\"saga_id\":\"order-1\",\"step\":%d,"
             "\"by\":\"bob\",\"reason\":\"checked\"}",
             type == SG_CMD_APPROVE ? "saga.approve" : "saga.reject", step);
    fx_command(fx, type, step, 0, 0);
    sg_json_destroy(fx->dec.doc);
    fx->dec.doc = sg_json_parse(doc, strlen(doc), NULL, NULL);
    cr_assert_not_null(fx->dec.doc);
    fx->dec.by = sg_json_string(sg_json_member(fx->dec.doc, "by"));
    fx->dec.reason = sg_json_string(sg_json_member(fx->dec.doc, "reason"));
    fx->dec.who = &fx_signer;
    fx->dec.as = fx_signer.name;
}

/* A call of step that returned: ok, or an error of cls. */
void fx_returned(fx_t *fx, bool comp, int step, int attempt, worker_status_t status,
                 sg_errclass_t cls, bool retriable)
{
    fx_command(fx, comp ? SG_CMD_COMPENSATE : SG_CMD_EXECUTE, step, attempt, 1);
    fx->in.returned = true;
    fx->cmd.attempt_id = 99;
    fx->call.tool = sg_registry_find(fx->reg, comp ? "release" : steps[step].tool);
    fx->call.step_name = (char *)steps[step].name;
    fx->call.attempt = attempt;
    fx->call.idem_key = "key";
    fx->result.status = status;
    fx->result.latency_ms = 12;
    if (status == WORKER_OK) {
        fx->result.data = "{\"ok\":true}";
    } else {
        sg_err_set(&fx->result.err, cls, "tool.failed", "it broke");
        fx->result.err.retriable = retriable;
    }
}

void fx_decide(fx_t *fx, bool with_saga)
{
    worker_decide(&fx->rules, &fx->in, with_saga ? &fx->saga : NULL, &fx->out);
}

/* ---- reading the outcome ----------------------------------------------- */

/* The ordered effects that leave the transaction: message types (a timer
 * as @type), dead letters (DL), interrupted attempts (INT), attempt rows
 * (ATT), new sagas (NEW). */
void fx_effects(const worker_outcome_t *out, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        char one[64] = "";
        switch (op->kind) {
        case WORKER_OP_MESSAGE:
            snprintf(one, sizeof(one), "%s%s", op->u.msg.delay_ms > 0 ? "@" : "", op->u.msg.type);
            break;
        case WORKER_OP_DEAD_LETTER:
            snprintf(one, sizeof(one), "DL");
            break;
        case WORKER_OP_INTERRUPTED:
            snprintf(one, sizeof(one), "INT");
            break;
        case WORKER_OP_ATTEMPT:
            snprintf(one, sizeof(one), "ATT");
            break;
        case WORKER_OP_SAGA_NEW:
            snprintf(one, sizeof(one), "NEW");
            break;
        case WORKER_OP_CONTROL:
            snprintf(one, sizeof(one), "CTL:%s", op->u.control.outcome);
            break;
        default:
            continue;
        }
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? "," : "", one);
    }
}

/* The step statuses of the rows the outcome writes, '-' for a step with
 * no row; and the saga row's status, '-' when none. */
void fx_rows(const worker_outcome_t *out, char *st, char *saga)
{
    memset(st, '-', NSTEPS);
    st[NSTEPS] = '\0';
    *saga = '-';
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        if (op->kind == WORKER_OP_STEP)
            st[op->u.step.idx] = fx_step_letters[op->u.step.status];
        else if (op->kind == WORKER_OP_SAGA)
            *saga = fx_saga_letters[op->u.saga.status];
    }
}

const worker_op_t *fx_nth_op(const worker_outcome_t *out, worker_op_kind_t kind, int n)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == kind && n-- == 0)
            return &out->ops[i];
    return NULL;
}

const worker_op_t *fx_message(const worker_outcome_t *out, const char *type)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == WORKER_OP_MESSAGE && strcmp(out->ops[i].u.msg.type, type) == 0)
            return &out->ops[i];
    return NULL;
}

/* The label of commands_consumed (or "-" when not counted). */
const char *fx_consumed(const worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == WORKER_OP_METRIC &&
            out->ops[i].u.metric.id == SG_M_COMMANDS_CONSUMED)
            return out->ops[i].u.metric.labels[1];
    return "-";
}

bool fx_counted(const worker_outcome_t *out, sg_metric_id_t id, const char *label)
{
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        if (op->kind == WORKER_OP_METRIC && op->u.metric.id == id &&
            (!label || (op->u.metric.labels[0] && strcmp(op->u.metric.labels[0], label) == 0)))
            return true;
    }
    return false;
}

bool fx_logged(const worker_outcome_t *out, const char *needle)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == WORKER_OP_LOG && strstr(out->ops[i].u.log.text, needle))
            return true;
    return false;
}
