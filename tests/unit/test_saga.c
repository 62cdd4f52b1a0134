/* The saga and step state machines through the pure decision
 * (worker/worker_decide.h): typed rows and a command in, the outcome out,
 * no PostgreSQL, no Kafka, no clock.  Each case of the table names the
 * rows before, the command, and what the outcome must hold: the messages
 * and dead letters in order, the rows after, the call, the metric. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../worker/worker_decide.h"
#include "unit.h"

/* 2026-01-01T00:00:00Z */
#define NOW_MS 1767225600000LL
#define TP     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

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
#define NSTEPS 4

typedef struct fx_s {
    sg_registry_t *reg;
    sg_policy_t retry, comp_retry;
    sg_json_limits_t limits;
    worker_rules_t rules;
    sg_rng_t rng;
    worker_input_t in;
    worker_cmd_t cmd;
    worker_saga_t saga;
    worker_outcome_t out;
} fx_t;

static void fx_init(fx_t *fx)
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
        .topic_commands = "t.commands",
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
    fx->cmd.state = CMD_READY;
    fx->cmd.offset = 17;
}

static void fx_fini(fx_t *fx)
{
    worker_outcome_free(&fx->out);
    sg_json_destroy(fx->cmd.dec.doc);
    sg_registry_destroy(fx->reg);
}

/* Status letters: p pending, r running, s succeeded, f failed, c
 * compensating, C compensated, x compensation_failed, k skipped; for the
 * saga: R running, H held, D completed, c compensating, C compensated, F
 * failed. */
static const char step_letters[] = "prsfcCxk", saga_letters[] = "RHDcCF";

static worker_step_status_t step_status(char l)
{
    const char *p = strchr(step_letters, l);

    cr_assert(p && l, "step letter %c", l);
    return (worker_step_status_t)(p - step_letters);
}

static worker_saga_status_t saga_status(char l)
{
    const char *p = strchr(saga_letters, l);

    cr_assert(p && l, "saga letter %c", l);
    return (worker_saga_status_t)(p - saga_letters);
}

/* The saga as a load returns it: statuses, attempts (forward, compensate)
 * per step. */
static void fx_saga(fx_t *fx, char saga, const char *st, const int *att, const int *catt)
{
    worker_saga_t *s = &fx->saga;

    memset(s, 0, sizeof(*s));
    s->saga_id = "order-1";
    s->name = "order";
    s->input = "{\"order\":1}";
    s->traceparent = TP;
    s->status = saga_status(saga);
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
        p->status = step_status(st[i]);
        p->attempts = att ? att[i] : 0;
        p->comp_attempts = catt ? catt[i] : 0;
    }
}

static void fx_command(fx_t *fx, sg_ctype_t type, int step, int attempt, int generation)
{
    fx->cmd.dec.type = type;
    snprintf(fx->cmd.dec.saga_id, sizeof(fx->cmd.dec.saga_id), "order-1");
    fx->cmd.dec.step = step;
    fx->cmd.dec.attempt = attempt;
    fx->cmd.dec.generation = generation;
}

/* A call of step that returned: ok, or an error of cls. */
static void fx_returned(fx_t *fx, bool comp, int step, int attempt, worker_status_t status,
                        sg_errclass_t cls, bool retriable)
{
    fx_command(fx, comp ? SG_CMD_COMPENSATE : SG_CMD_EXECUTE, step, attempt, 1);
    fx->cmd.state = CMD_RETURNED;
    fx->in.returned = true;
    fx->cmd.attempt_id = 99;
    fx->cmd.call.tool = sg_registry_find(fx->reg, comp ? "release" : steps[step].tool);
    fx->cmd.call.step_name = (char *)steps[step].name;
    fx->cmd.call.attempt = attempt;
    fx->cmd.call.idem_key = "key";
    fx->cmd.result.status = status;
    fx->cmd.result.latency_ms = 12;
    if (status == WORKER_OK) {
        fx->cmd.result.data = "{\"ok\":true}";
    } else {
        sg_err_set(&fx->cmd.result.err, cls, "tool.failed", "it broke");
        fx->cmd.result.err.retriable = retriable;
    }
}

static void fx_decide(fx_t *fx, bool with_saga)
{
    worker_decide(&fx->rules, &fx->in, with_saga ? &fx->saga : NULL, &fx->out);
}

/* ---- reading the outcome ----------------------------------------------- */

/* The ordered effects that leave the transaction: message types (a timer
 * as @type), dead letters (DL), interrupted attempts (INT), attempt rows
 * (ATT), new sagas (NEW). */
static void effects(const worker_outcome_t *out, char *buf, size_t size)
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
        default:
            continue;
        }
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? "," : "", one);
    }
}

/* The step statuses of the rows the outcome writes, '-' for a step with
 * no row; and the saga row's status, '-' when none. */
static void rows(const worker_outcome_t *out, char *st, char *saga)
{
    memset(st, '-', NSTEPS);
    st[NSTEPS] = '\0';
    *saga = '-';
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        if (op->kind == WORKER_OP_STEP)
            st[op->u.step.idx] = step_letters[op->u.step.status];
        else if (op->kind == WORKER_OP_SAGA)
            *saga = saga_letters[op->u.saga.status];
    }
}

static const worker_op_t *nth_op(const worker_outcome_t *out, worker_op_kind_t kind, int n)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == kind && n-- == 0)
            return &out->ops[i];
    return NULL;
}

static const worker_op_t *message(const worker_outcome_t *out, const char *type)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == WORKER_OP_MESSAGE && strcmp(out->ops[i].u.msg.type, type) == 0)
            return &out->ops[i];
    return NULL;
}

/* The label of commands_consumed (or "-" when not counted). */
static const char *consumed(const worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == WORKER_OP_METRIC &&
            out->ops[i].u.metric.id == SG_M_COMMANDS_CONSUMED)
            return out->ops[i].u.metric.labels[1];
    return "-";
}

static bool counted(const worker_outcome_t *out, sg_metric_id_t id, const char *label)
{
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        if (op->kind == WORKER_OP_METRIC && op->u.metric.id == id &&
            (!label || (op->u.metric.labels[0] && strcmp(op->u.metric.labels[0], label) == 0)))
            return true;
    }
    return false;
}

static bool logged(const worker_outcome_t *out, const char *needle)
{
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == WORKER_OP_LOG && strstr(out->ops[i].u.log.text, needle))
            return true;
    return false;
}

/* ---- the transitions --------------------------------------------------- */

typedef enum { EXEC, COMP, RELEASE, RET_OK, RET_ERR, RET_COMP_OK, RET_COMP_ERR } kind_t;

typedef struct case_s {
    const char *name;
    /* before */
    char saga;
    const char *steps;
    int att[NSTEPS], catt[NSTEPS];
    /* the command; its generation is the saga's + gen_off; for RET_*ERR
     * the error's class and retriable */
    kind_t kind;
    int step, attempt, gen_off;
    sg_errclass_t cls;
    bool retriable;
    /* the world: attempt rows of the command, deadline, hold, budget */
    int interrupted, finished;
    bool isolated, chained, past_deadline;
    int64_t hold_ms, spent, budget;
    /* after */
    const char *effects; /* effects(), in order */
    char saga_after;     /* the saga's status after */
    const char *steps_after;
    const char *step_rows; /* rows(): the step rows written */
    char saga_row;         /* rows(): the saga row's status */
    bool calls, defer, unchained;
    const char *consumed; /* commands_consumed's outcome, NULL: not counted */
    const char *log;      /* a log line holding this, or NULL */
} case_t;

static const case_t cases[] = {
    /* forward steps */
    {.name = "first attempt of a pending step: attempt row, then the call",
     .saga = 'R',
     .steps = "pppp",
     .kind = EXEC,
     .step = 0,
     .attempt = 1,
     .effects = "ATT",
     .saga_after = 'R',
     .steps_after = "rppp",
     .step_rows = "r---",
     .saga_row = '-',
     .calls = true,
     .consumed = "called",
     .log = "step 0: pending -> running"},
    {.name = "retry of a running step: attempt row, the call",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 2,
     .effects = "ATT",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "-r--",
     .saga_row = '-',
     .calls = true,
     .consumed = "called",
     .log = "step 1: running -> running"},
    {.name = "step success: the next step's command",
     .saga = 'R',
     .steps = "rppp",
     .att = {1},
     .kind = RET_OK,
     .step = 0,
     .attempt = 1,
     .effects = "step.succeeded,step.execute",
     .saga_after = 'R',
     .steps_after = "sppp",
     .step_rows = "s---",
     .saga_row = 'R',
     .log = "step call succeeded in 12 ms"},
    {.name = "success of the step before the last: the last step's command",
     .saga = 'R',
     .steps = "ssrp",
     .att = {1, 1, 1},
     .kind = RET_OK,
     .step = 2,
     .attempt = 1,
     .effects = "step.succeeded,step.execute",
     .saga_after = 'R',
     .steps_after = "sssp",
     .step_rows = "--s-",
     .saga_row = 'R'},
    {.name = "last step success: the saga is completed",
     .saga = 'R',
     .steps = "sssr",
     .att = {1, 1, 1, 1},
     .kind = RET_OK,
     .step = 3,
     .attempt = 1,
     .effects = "step.succeeded,saga.completed",
     .saga_after = 'D',
     .steps_after = "ssss",
     .step_rows = "---s",
     .saga_row = 'D',
     .log = "saga: running -> completed"},
    {.name = "transient failure: a retry after a backoff (a timer)",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = RET_ERR,
     .step = 1,
     .attempt = 1,
     .cls = SG_ERRCLASS_TRANSIENT,
     .retriable = true,
     .effects = "@step.execute,step.retry_scheduled",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "----",
     .saga_row = 'R',
     .log = "step call failed (transient): it broke"},
    {.name = "transient failure, attempts exhausted: dead letter, compensation",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 3},
     .kind = RET_ERR,
     .step = 1,
     .attempt = 3,
     .cls = SG_ERRCLASS_TRANSIENT,
     .retriable = true,
     .effects = "step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate",
     .saga_after = 'c',
     .steps_after = "cfkk",
     .step_rows = "cfkk",
     .saga_row = 'c'},
    {.name = "transient failure, retry budget spent: dead letter, compensation",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = RET_ERR,
     .step = 1,
     .attempt = 1,
     .cls = SG_ERRCLASS_TRANSIENT,
     .retriable = true,
     .spent = 1000,
     .budget = 100,
     .effects = "step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate",
     .saga_after = 'c',
     .steps_after = "cfkk",
     .step_rows = "cfkk",
     .saga_row = 'c'},
    {.name = "poison failure, with a hold: dead letter, saga held, release timer",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = RET_ERR,
     .step = 1,
     .attempt = 1,
     .cls = SG_ERRCLASS_POISON,
     .hold_ms = 60000,
     .effects = "step.failed,DL,saga.dead_lettered,@saga.release",
     .saga_after = 'H',
     .steps_after = "sfpp",
     .step_rows = "-f--",
     .saga_row = 'H',
     .log = "saga: running -> held"},
    {.name = "permanent failure: compensation in reverse order",
     .saga = 'R',
     .steps = "sssr",
     .att = {1, 1, 1, 1},
     .kind = RET_ERR,
     .step = 3,
     .attempt = 1,
     .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.failed,saga.compensating,step.compensate",
     .saga_after = 'c',
     .steps_after = "sscf",
     .step_rows = "--cf",
     .saga_row = 'c'},
    {.name = "permanent failure of the first step: nothing to undo, compensated",
     .saga = 'R',
     .steps = "rppp",
     .att = {1},
     .kind = RET_ERR,
     .step = 0,
     .attempt = 1,
     .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.failed,saga.compensating,saga.compensated",
     .saga_after = 'C',
     .steps_after = "fkkk",
     .step_rows = "fkkk",
     .saga_row = 'C'},
    {.name = "deadline passed before the step ran: failed, compensation",
     .saga = 'R',
     .steps = "sppp",
     .att = {1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .past_deadline = true,
     .effects = "step.failed,saga.compensating,step.compensate",
     .saga_after = 'c',
     .steps_after = "cfkk",
     .step_rows = "cfkk",
     .saga_row = 'c',
     .consumed = "failed"},
    /* compensation */
    {.name = "compensation command: attempt row, the call",
     .saga = 'c',
     .steps = "sscf",
     .att = {1, 1, 1, 1},
     .kind = COMP,
     .step = 2,
     .attempt = 1,
     .effects = "ATT",
     .saga_after = 'c',
     .steps_after = "sscf",
     .step_rows = "--c-",
     .saga_row = '-',
     .calls = true,
     .consumed = "called"},
    {.name = "compensation success: the next one down, skipping a step without one",
     .saga = 'c',
     .steps = "sscf",
     .att = {1, 1, 1, 1},
     .catt = {0, 0, 1},
     .kind = RET_COMP_OK,
     .step = 2,
     .attempt = 1,
     .effects = "step.compensated,step.compensate",
     .saga_after = 'c',
     .steps_after = "ckCf",
     .step_rows = "ckC-",
     .saga_row = 'c'},
    {.name = "last compensation success: the saga is compensated",
     .saga = 'c',
     .steps = "ckCf",
     .att = {1, 1, 1, 1},
     .catt = {1, 0, 1},
     .kind = RET_COMP_OK,
     .step = 0,
     .attempt = 1,
     .effects = "step.compensated,saga.compensated",
     .saga_after = 'C',
     .steps_after = "CkCf",
     .step_rows = "C---",
     .saga_row = 'C',
     .log = "saga: compensating -> compensated"},
    {.name = "compensation transient failure: retry timer",
     .saga = 'c',
     .steps = "sscf",
     .att = {1, 1, 1, 1},
     .catt = {0, 0, 1},
     .kind = RET_COMP_ERR,
     .step = 2,
     .attempt = 1,
     .cls = SG_ERRCLASS_TRANSIENT,
     .retriable = true,
     .effects = "@step.compensate,step.retry_scheduled",
     .saga_after = 'c',
     .steps_after = "sscf",
     .step_rows = "----",
     .saga_row = 'c'},
    {.name = "compensation attempts exhausted: failed, dead letter",
     .saga = 'c',
     .steps = "sscf",
     .att = {1, 1, 1, 1},
     .catt = {0, 0, 2},
     .kind = RET_COMP_ERR,
     .step = 2,
     .attempt = 2,
     .cls = SG_ERRCLASS_TRANSIENT,
     .retriable = true,
     .effects = "step.compensation_failed,DL,saga.dead_lettered,saga.failed",
     .saga_after = 'F',
     .steps_after = "ssxf",
     .step_rows = "--x-",
     .saga_row = 'F',
     .log = "saga: compensating -> failed"},
    {.name = "compensation permanent failure: the saga failed",
     .saga = 'c',
     .steps = "sscf",
     .att = {1, 1, 1, 1},
     .catt = {0, 0, 1},
     .kind = RET_COMP_ERR,
     .step = 2,
     .attempt = 1,
     .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.compensation_failed,DL,saga.dead_lettered,saga.failed",
     .saga_after = 'F',
     .steps_after = "ssxf",
     .step_rows = "--x-",
     .saga_row = 'F'},
    /* saga.release */
    {.name = "release of a held saga: compensation below the failed step",
     .saga = 'H',
     .steps = "sfpp",
     .att = {1, 1},
     .kind = RELEASE,
     .effects = "saga.compensating,step.compensate",
     .saga_after = 'c',
     .steps_after = "cfkk",
     .step_rows = "c-kk",
     .saga_row = 'c',
     .consumed = "failed",
     .log = "saga: held -> compensating"},
    {.name = "release of an older generation: stale",
     .saga = 'H',
     .steps = "sfpp",
     .att = {1, 1},
     .kind = RELEASE,
     .gen_off = -1,
     .effects = "",
     .saga_after = 'H',
     .steps_after = "sfpp",
     .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored",
     .log = "older generation"},
    {.name = "release of a saga no longer held: stale",
     .saga = 'c',
     .steps = "cfkk",
     .att = {1, 1},
     .kind = RELEASE,
     .effects = "",
     .saga_after = 'c',
     .steps_after = "cfkk",
     .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored",
     .log = "not held"},
    /* stale and duplicate commands */
    {.name = "duplicate of an attempt that finished",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .finished = 1,
     .effects = "",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored",
     .log = "already ran"},
    {.name = "duplicate of an attempt that was interrupted, then finished",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .interrupted = 1,
     .finished = 1,
     .effects = "",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored",
     .log = "already ran"},
    {.name = "attempt number that is not the next one",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 3,
     .effects = "",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored",
     .log = "not the next"},
    {.name = "a command of another generation",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 2,
     .gen_off = 1,
     .effects = "",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored",
     .log = "generation is not the saga's current one"},
    {.name = "a step not waiting (already succeeded)",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 0,
     .attempt = 2,
     .effects = "",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored",
     .log = "not waiting"},
    {.name = "an outcome after the step moved on",
     .saga = 'c',
     .steps = "cfkk",
     .att = {1, 1},
     .kind = RET_OK,
     .step = 1,
     .attempt = 1,
     .effects = "",
     .saga_after = 'c',
     .steps_after = "cfkk",
     .step_rows = "----",
     .saga_row = '-',
     .log = "the step moved on while the call ran"},
    /* interrupted calls and the crash loop */
    {.name = "interrupted attempt: marked, run again",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .interrupted = 1,
     .effects = "INT,ATT",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "-r--",
     .saga_row = '-',
     .calls = true,
     .consumed = "called"},
    {.name = "crash-loop suspect: deferred until it runs alone, nothing written",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .interrupted = 2,
     .effects = "",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "----",
     .saga_row = '-',
     .defer = true},
    {.name = "crash-loop suspect run alone: marked, run again",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .interrupted = 2,
     .isolated = true,
     .effects = "INT,ATT",
     .saga_after = 'R',
     .steps_after = "srpp",
     .step_rows = "-r--",
     .saga_row = '-',
     .calls = true,
     .consumed = "called"},
    {.name = "crash loop: interrupted too often, dead letter, compensation",
     .saga = 'R',
     .steps = "srpp",
     .att = {1, 1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .interrupted = 3,
     .isolated = true,
     .effects = "INT,step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate",
     .saga_after = 'c',
     .steps_after = "cfkk",
     .step_rows = "cfkk",
     .saga_row = 'c',
     .consumed = "dead_lettered"},
    {.name = "chained command whose tool is gone: dropped, its message decides",
     .saga = 'R',
     .steps = "sppp",
     .att = {1},
     .kind = EXEC,
     .step = 1,
     .attempt = 1,
     .chained = true,
     .effects = "",
     .saga_after = 'R',
     .steps_after = "sppp",
     .step_rows = "----",
     .saga_row = '-',
     .unchained = true},
};

/* The transitions the setters logged over the table's rows. */
static bool seen_saga[WORKER_SAGA__COUNT][WORKER_SAGA__COUNT];
static bool seen_step[WORKER_STEP__COUNT][WORKER_STEP__COUNT];

/* Reads the setters' debug lines "saga: FROM -> TO", "step N: FROM -> TO". */
static void note_transitions(const worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++) {
        const char *text = out->ops[i].u.log.text;
        char from[32], to[32];
        worker_saga_status_t sf, st;
        worker_step_status_t pf, pt;

        if (out->ops[i].kind != WORKER_OP_LOG)
            continue;
        if (sscanf(text, "saga: %31s -> %31s", from, to) == 2) {
            cr_assert_eq(worker_saga_status_parse(from, &sf), 0);
            cr_assert_eq(worker_saga_status_parse(to, &st), 0);
            seen_saga[sf][st] = true;
        } else if (sscanf(text, "step %*d: %31s -> %31s", from, to) == 2) {
            cr_assert_eq(worker_step_status_parse(from, &pf), 0);
            cr_assert_eq(worker_step_status_parse(to, &pt), 0);
            seen_step[pf][pt] = true;
        }
    }
}

static void run_case(const case_t *c)
{
    fx_t fx;
    char got[512], st[NSTEPS + 1], sg, after[NSTEPS + 1];

    fx_init(&fx);
    fx_saga(&fx, c->saga, c->steps, c->att, c->catt);
    switch (c->kind) {
    case EXEC:
        fx_command(&fx, SG_CMD_EXECUTE, c->step, c->attempt, 1 + c->gen_off);
        break;
    case COMP:
        fx_command(&fx, SG_CMD_COMPENSATE, c->step, c->attempt, 1 + c->gen_off);
        break;
    case RELEASE:
        fx_command(&fx, SG_CMD_RELEASE, -1, 0, 1 + c->gen_off);
        break;
    case RET_OK:
    case RET_ERR:
        fx_returned(&fx, false, c->step, c->attempt, c->kind == RET_OK ? WORKER_OK : WORKER_ERROR,
                    c->cls, c->retriable);
        break;
    case RET_COMP_OK:
    case RET_COMP_ERR:
        fx_returned(&fx, true, c->step, c->attempt,
                    c->kind == RET_COMP_OK ? WORKER_OK : WORKER_ERROR, c->cls, c->retriable);
        break;
    }
    fx.saga.interrupted = c->interrupted;
    fx.saga.finished = c->finished;
    fx.saga.past_deadline = c->past_deadline;
    fx.saga.retry_spent = c->spent;
    fx.saga.retry_budget = c->budget ? c->budget : -1;
    fx.cmd.isolated = c->isolated;
    fx.cmd.chained = c->chained;
    fx.rules.hold_ms = c->hold_ms;
    if (c->chained)
        fx.saga.steps[1].tool = "teleport";
    fx_decide(&fx, true);

    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, c->effects, "%s: effects", c->name);
    cr_expect_eq(fx.saga.status, saga_status(c->saga_after), "%s: saga %s", c->name,
                 worker_saga_status_name(fx.saga.status));
    for (int i = 0; i < NSTEPS; i++)
        after[i] = step_letters[fx.saga.steps[i].status];
    after[NSTEPS] = '\0';
    cr_expect_str_eq(after, c->steps_after, "%s: steps after", c->name);
    rows(&fx.out, st, &sg);
    cr_expect_str_eq(st, c->step_rows, "%s: step rows", c->name);
    cr_expect_eq(sg, c->saga_row, "%s: saga row %c", c->name, sg);
    cr_expect_eq(fx.out.calls, c->calls, "%s: calls", c->name);
    cr_expect_eq(fx.out.defer, c->defer, "%s: defer", c->name);
    cr_expect_eq(fx.out.unchained, c->unchained, "%s: unchained", c->name);
    cr_expect_str_eq(consumed(&fx.out), c->consumed ? c->consumed : "-", "%s: consumed", c->name);
    if (c->log)
        cr_expect(logged(&fx.out, c->log), "%s: no log line with \"%s\"", c->name, c->log);
    note_transitions(&fx.out);
    fx_fini(&fx);
}

/* The rows run in one test: Criterion's parameterized tests copy the
 * parameters into a re-executed child, where the strings of a row would
 * not be at the same addresses.  A failure names its row. */
Test(saga, every_transition_of_the_table)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(&cases[i]);
    /* Every transition the worker may make (worker_state.c's tables,
     * docs/STATES.md) is made by some row. */
    for (int f = 0; f < WORKER_SAGA__COUNT; f++)
        for (int t = 0; t < WORKER_SAGA__COUNT; t++)
            cr_expect(!worker_saga_transition_ok(f, t) || seen_saga[f][t],
                      "no row makes the saga transition %s -> %s", worker_saga_status_name(f),
                      worker_saga_status_name(t));
    for (int f = 0; f < WORKER_STEP__COUNT; f++)
        for (int t = 0; t < WORKER_STEP__COUNT; t++)
            cr_expect(!worker_step_transition_ok(f, t) || seen_step[f][t],
                      "no row makes the step transition %s -> %s", worker_step_status_name(f),
                      worker_step_status_name(t));
}

/* ---- saga.start --------------------------------------------------------- */

#define START(steps)                                                                               \
    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"s1\",\"saga_id\":\"order-1\",\"name\":\"order\","   \
    "\"steps\":" steps "}"

static const char good_start[] =
    START("[{\"name\":\"hold\",\"tool\":\"reserve\",\"compensate\":{\"tool\":\"release\"}},"
          "{\"name\":\"pay\",\"tool\":\"charge\",\"args\":{\"amount\":5}}]");

static void fx_start(fx_t *fx, const char *text)
{
    sg_submit_decode(text, strlen(text), &fx->limits, &fx->cmd.dec);
    cr_assert_eq(fx->cmd.dec.type, SG_CMD_START, "%s", fx->cmd.dec.err.message);
}

Test(saga, start_accepted_writes_the_saga_and_its_first_command)
{
    fx_t fx;
    char got[512];
    const worker_op_t *row, *ev, *first;

    fx_init(&fx);
    fx_start(&fx, good_start);
    fx.in.traceparent = TP;
    fx.in.traceparent_len = strlen(TP);
    fx_decide(&fx, false);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "NEW,saga.accepted,step.execute");
    row = nth_op(&fx.out, WORKER_OP_SAGA_NEW, 0);
    cr_expect_str_eq(row->saga_id, "order-1");
    cr_expect_str_eq(row->u.saga_new.name, "order");
    cr_expect_str_eq(row->u.saga_new.traceparent, TP);
    cr_expect_null(row->u.saga_new.deadline);
    cr_expect_eq(row->u.saga_new.retry_budget_ms, -1);
    /* the registry's compensation of charge is written with its args */
    assert_contains(row->u.saga_new.steps, "\"compensate\":{\"tool\":\"release\",\"args\":"
                                           "{\"amount\":5}}");
    ev = message(&fx.out, "saga.accepted");
    cr_expect_str_eq(ev->u.msg.payload,
                     "{\"v\":1,\"type\":\"saga.accepted\",\"id\":\"evt:order-1:1\",\"saga_id\":"
                     "\"order-1\",\"seq\":1,\"time\":\"2026-01-01T00:00:00.000Z\",\"name\":"
                     "\"order\",\"steps\":2}");
    cr_expect_str_eq(ev->u.msg.headers,
                     "{\"sagad-type\":\"saga.accepted\",\"traceparent\":\"" TP "\"}");
    cr_expect_str_eq(ev->u.msg.topic, "t.events");
    first = message(&fx.out, "step.execute");
    cr_expect_str_eq(first->u.msg.topic, "t.commands");
    cr_expect_eq(first->u.msg.step, 0);
    cr_expect_eq(first->u.msg.attempt, 1);
    cr_expect_eq(first->u.msg.delay_ms, 0);
    /* chained: the first command as sent, and the saga as the load would
     * return it */
    cr_expect_str_eq(fx.out.follow, first->u.msg.payload);
    cr_assert(fx.out.keep_fresh);
    cr_expect_eq(fx.out.fresh->saga.nsteps, 2);
    cr_expect_eq(fx.out.fresh->saga.status, WORKER_SAGA_RUNNING);
    cr_expect_eq(fx.out.fresh->saga.steps[1].status, WORKER_STEP_PENDING);
    cr_expect_eq(nth_op(&fx.out, WORKER_OP_SAGA, 0)->u.saga.seq, 1);
    cr_expect_str_eq(consumed(&fx.out), "started");
    cr_expect(counted(&fx.out, SG_M_SAGAS_STARTED, NULL));
    cr_expect_eq(fx.out.stats.started, 1);
    fx_fini(&fx);
}

Test(saga, start_with_a_bad_traceparent_gets_a_new_one_and_says_so)
{
    fx_t fx;
    const worker_op_t *row;

    fx_init(&fx);
    fx_start(&fx, good_start);
    fx.in.traceparent = "00-bad\r\nX-Evil: 1";
    fx.in.traceparent_len = strlen(fx.in.traceparent);
    fx_decide(&fx, false);
    row = nth_op(&fx.out, WORKER_OP_SAGA_NEW, 0);
    cr_expect(sg_traceparent_ok(row->u.saga_new.traceparent, strlen(row->u.saga_new.traceparent)));
    cr_expect(logged(&fx.out, "traceparent header is not W3C trace context (17 bytes: "
                              "00-bad\\x0d\\x0aX-Evil: 1)"));
    fx_fini(&fx);
}

Test(saga, start_rejected_by_validation_is_announced_and_dead_lettered)
{
    fx_t fx;
    char got[512];
    const worker_op_t *dl, *ev;

    fx_init(&fx);
    fx_start(&fx, START("[{\"name\":\"a\",\"tool\":\"teleport\"}]"));
    fx_decide(&fx, false);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "saga.rejected,DL");
    ev = message(&fx.out, "saga.rejected");
    assert_contains(ev->u.msg.payload, "\"id\":\"evt:order-1:rejected:3:17\",\"saga_id\":"
                                       "\"order-1\",\"seq\":0");
    assert_contains(ev->u.msg.payload, "\"problems\":[{\"path\":\"$.steps[0].tool\"");
    cr_expect_str_eq(ev->u.msg.headers, "{\"sagad-type\":\"saga.rejected\"}");
    dl = nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0);
    cr_expect_str_eq(dl->u.dead.err->code, "input.schema.invalid");
    cr_expect_str_eq(dl->u.dead.saga_name, "order");
    cr_expect_eq(dl->u.dead.step, -1);
    cr_expect_not(dl->u.dead.has_saga);
    cr_expect_str_eq(consumed(&fx.out), "rejected");
    cr_expect(counted(&fx.out, SG_M_DEAD_LETTERS, "input.schema.invalid"));
    cr_expect_null(fx.out.fresh);
    fx_fini(&fx);
}

Test(saga, start_of_an_existing_saga_same_definition_is_a_duplicate)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", NULL, NULL);
    fx.saga.same_definition = true;
    fx_start(&fx, good_start);
    fx_decide(&fx, true);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "");
    cr_expect_str_eq(consumed(&fx.out), "ignored");
    cr_expect(counted(&fx.out, SG_M_DUPLICATES_IGNORED, "command"));
    cr_expect_eq(fx.saga.seq, 5, "the saga is untouched");
    fx_fini(&fx);
}

Test(saga, start_of_an_existing_saga_other_definition_is_a_conflict)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", NULL, NULL);
    fx_start(&fx, good_start);
    fx_decide(&fx, true);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "saga.rejected,DL");
    cr_expect_str_eq(nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code,
                     "input.saga.conflict");
    assert_contains(message(&fx.out, "saga.rejected")->u.msg.payload,
                    "unique: this saga_id is already used with a different definition");
    cr_expect_eq(fx.saga.seq, 5, "the existing saga is untouched");
    fx_fini(&fx);
}

/* ---- what the messages and the call hold -------------------------------- */

Test(saga, a_retry_is_a_timer_within_the_backoff_and_announced)
{
    fx_t fx;
    const worker_op_t *timer, *ev;
    char want[64];

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_TRANSIENT, true);
    fx_decide(&fx, true);
    timer = message(&fx.out, "step.execute");
    cr_assert_not_null(timer);
    cr_expect(timer->u.msg.delay_ms > 0 && timer->u.msg.delay_ms <= 100, "delay %lld",
              (long long)timer->u.msg.delay_ms);
    cr_expect_eq(timer->u.msg.attempt, 2);
    assert_contains(timer->u.msg.payload, "\"id\":\"cmd:order-1:1:f:g1:a2\"");
    cr_expect_null(fx.out.follow, "a timer is not chained");
    cr_expect_eq(fx.saga.retry_spent, timer->u.msg.delay_ms);
    ev = message(&fx.out, "step.retry_scheduled");
    snprintf(want, sizeof(want), "\"delay_ms\":%lld", (long long)timer->u.msg.delay_ms);
    assert_contains(ev->u.msg.payload, want);
    snprintf(want, sizeof(want), "\"retry_at\":\"2026-01-01T00:00:00.%03lldZ\"",
             (long long)timer->u.msg.delay_ms);
    assert_contains(ev->u.msg.payload, want);
    cr_expect(counted(&fx.out, SG_M_RETRIES_SCHEDULED, "tool.failed"));
    cr_expect(counted(&fx.out, SG_M_STEPS, "noop"));
    cr_expect_eq(nth_op(&fx.out, WORKER_OP_ATTEMPT_DONE, 0)->u.done.id, 99);
    assert_contains(nth_op(&fx.out, WORKER_OP_ATTEMPT_DONE, 0)->u.done.envelope,
                    "\"status\":\"error\",\"error_code\":\"tool.failed\",\"class\":"
                    "\"transient\",\"retriable\":true");
    fx_fini(&fx);
}

Test(saga, a_decided_call_carries_its_tool_args_key_and_input)
{
    int64_t amount = 0;
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "sspp", (int[]){1, 1, 0, 0}, NULL);
    fx_command(&fx, SG_CMD_EXECUTE, 2, 1, 1);
    fx_decide(&fx, true);
    cr_assert(fx.out.calls);
    cr_expect_str_eq(fx.out.call.tool->name, "charge");
    cr_expect_str_eq(fx.out.call.step_name, "pay");
    cr_expect_eq(fx.out.call.attempt, 1);
    cr_expect_str_eq(fx.out.call.traceparent, TP);
    cr_expect_eq(sg_json_get_int(fx.out.call.args, "$.args", "amount", true, &amount, NULL), 0);
    cr_expect_eq(amount, 5);
    cr_expect_not_null(fx.out.call.input);
    cr_expect_str_eq(nth_op(&fx.out, WORKER_OP_ATTEMPT, 0)->u.attempt.idem_key,
                     fx.out.call.idem_key);
    cr_expect_str_eq(nth_op(&fx.out, WORKER_OP_STEP, 0)->u.step.idem_key, fx.out.call.idem_key);
    fx_fini(&fx);
}

Test(saga, a_tool_gone_from_the_registry_is_dead_lettered_bad_args_compensate)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "sppp", (int[]){1, 0, 0, 0}, NULL);
    fx.saga.steps[1].tool = "teleport";
    fx_command(&fx, SG_CMD_EXECUTE, 1, 1, 1);
    fx_decide(&fx, true);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate");
    cr_expect_str_eq(nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code, "tool.unknown");
    cr_expect_str_eq(nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.tool, "teleport");
    fx_fini(&fx);

    fx_init(&fx);
    fx_saga(&fx, 'R', "sspp", (int[]){1, 1, 0, 0}, NULL);
    fx.saga.steps[2].args = "{\"amount\":0}";
    fx_command(&fx, SG_CMD_EXECUTE, 2, 1, 1);
    fx_decide(&fx, true);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "step.failed,saga.compensating,step.compensate");
    assert_contains(message(&fx.out, "step.failed")->u.msg.payload, "\"tool.args.invalid\"");
    fx_fini(&fx);
}

Test(saga, poison_and_commands_of_unknown_sagas_or_steps_are_dead_lettered)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_command(&fx, SG_CMD_POISON, 0, 0, 0);
    fx.cmd.dec.saga_id[0] = '\0';
    sg_err_set(&fx.cmd.dec.err, SG_ERRCLASS_POISON, "input.json.invalid", "not JSON");
    fx_decide(&fx, false);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "DL");
    cr_expect_null(nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->saga_id);
    cr_expect_str_eq(consumed(&fx.out), "dead_lettered");
    fx_fini(&fx);

    fx_init(&fx);
    fx_command(&fx, SG_CMD_EXECUTE, 0, 1, 1);
    fx_decide(&fx, false);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "DL");
    cr_expect_str_eq(nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code,
                     "input.saga.unknown");
    fx_fini(&fx);

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx_command(&fx, SG_CMD_EXECUTE, 7, 1, 1);
    fx_decide(&fx, true);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "DL,saga.dead_lettered");
    cr_expect_str_eq(nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code,
                     "input.schema.invalid");
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING);
    fx_fini(&fx);
}

Test(saga, a_held_saga_dead_letter_says_until_when)
{
    fx_t fx;
    const worker_op_t *timer;

    fx_init(&fx);
    fx.rules.hold_ms = 60000;
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_POISON, false);
    fx_decide(&fx, true);
    assert_contains(message(&fx.out, "saga.dead_lettered")->u.msg.payload,
                    "\"held_until\":\"2026-01-01T00:01:00.000Z\"");
    timer = message(&fx.out, "saga.release");
    cr_expect_eq(timer->u.msg.delay_ms, 60000);
    assert_contains(timer->u.msg.payload, "\"id\":\"cmd:order-1:release:g1\"");
    cr_expect_eq(fx.out.stats.held, 1);
    fx_fini(&fx);
}

Test(saga, a_compensation_stored_as_json_null_is_no_compensation)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "sssr", (int[]){1, 1, 1, 1}, NULL);
    fx.saga.steps[2].comp = "null";
    fx_returned(&fx, false, 3, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "step.failed,saga.compensating,step.compensate");
    cr_expect_eq(fx.saga.steps[2].status, WORKER_STEP_SKIPPED);
    cr_expect_eq(fx.saga.steps[0].status, WORKER_STEP_COMPENSATING);
    cr_expect_eq(message(&fx.out, "step.compensate")->u.msg.step, 0);
    fx_fini(&fx);
}
