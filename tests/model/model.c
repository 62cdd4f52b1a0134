/* sagad-model: a bounded model checker over the saga decision.
 *
 * Every shape of shapes.c starts as a saga whose first step's commands are
 * in flight; then every interleaving of what the world around
 * worker_decide() can do is explored depth first, up to a bound: a message
 * in flight delivered (timers at any later point), a call's outcome (ok,
 * permanent, transient, a timeout that did or did not take effect), a
 * crash while a call runs (the command redelivered, its attempt row left
 * unfinished), a control injected (saga.cancel, saga.approve, saga.reject,
 * each again with the same command id), a decided message redelivered (a
 * crash between the commit and the consumer's offset).  Each reachable
 * state is checked against the invariants (check() below); a violation is
 * printed as a trace that --replay reads back.  tests/model/README.md says
 * what is modelled and what is abstracted away. */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model.h"

/* ---- the worker's settings --------------------------------------------- */

static const char registry_text[] =
    "{\"v\":1,\"tools\":{"
    "\"rsv\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"reversible\"},"
    "\"rel\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"idempotent\"},"
    "\"idem\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"idempotent\"},"
    "\"irr\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":\"irreversible\"},"
    "\"read\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":\"read\"}"
    "}}";

#define SAGA_ID "m-1"
#define TP      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static sg_registry_t *reg;
static sg_policy_t retry_pol, comp_pol;
static sg_json_limits_t limits = SG_JSON_LIMITS_DEFAULT;
static worker_rules_t rules;
static const shape_t *shape;

/* ---- options ------------------------------------------------------------- */

static int opt_depth = 22, opt_redeliveries = 1, opt_crashes = 1, opt_dups = 2;
static double opt_seconds = 50;
static bool opt_json, opt_strict;
static const char *opt_shape, *opt_replay, *opt_cases, *opt_known;

/* ---- interned error codes (a step's error_code in the state) ----------- */

static char codes[64][64];
static int ncodes = 1; /* 0: none */

static uint8_t intern(const char *code)
{
    if (!code || !*code)
        return 0;
    for (int i = 1; i < ncodes; i++)
        if (strcmp(codes[i], code) == 0)
            return (uint8_t)i;
    if (ncodes == 64) {
        fprintf(stderr, "sagad-model: more than 63 error codes\n");
        exit(2);
    }
    snprintf(codes[ncodes], sizeof(codes[0]), "%s", code);
    return (uint8_t)ncodes++;
}

/* ---- actions --------------------------------------------------------------- */

enum { A_DELIVER, A_RETURN, A_CRASH, A_INJECT, A_REDELIVER };
/* The outcome of a returned call. */
enum { RES_OK, RES_PERM, RES_TRANS, RES_TIMEOUT_APPLIED, RES_TIMEOUT_LOST };
static const char *const outcome_names[] = {"ok", "perm", "trans", "timeout+", "timeout-"};
static const char *const mtype_names[] = {"exec",   "comp",    "gate-timeout", "release",
                                          "cancel", "approve", "reject"};

typedef struct maction_s {
    uint8_t kind;
    mmsg_t m;       /* DELIVER, INJECT, REDELIVER */
    mcall_t c;      /* RETURN, CRASH */
    uint8_t result; /* RETURN: RES_*; CRASH: 1 when its effect was applied */
} maction_t;

static void action_text(const maction_t *a, char *buf, size_t size)
{
    const char *kinds[] = {"deliver", "return", "crash", "inject", "redeliver"};

    switch (a->kind) {
    case A_DELIVER:
    case A_REDELIVER:
        if (a->m.type == MT_EXEC || a->m.type == MT_COMP)
            snprintf(buf, size, "%s %s %d %d", kinds[a->kind], mtype_names[a->m.type], a->m.step,
                     a->m.attempt);
        else if (a->m.type == MT_GATE_TIMEOUT)
            snprintf(buf, size, "%s %s %d", kinds[a->kind], mtype_names[a->m.type], a->m.step);
        else
            snprintf(buf, size, "%s %s", kinds[a->kind], mtype_names[a->m.type]);
        break;
    case A_RETURN:
        snprintf(buf, size, "return %s %d %d %s", a->c.comp ? "comp" : "exec", a->c.step,
                 a->c.attempt, outcome_names[a->result]);
        break;
    case A_CRASH:
        snprintf(buf, size, "crash %s %d %d %s", a->c.comp ? "comp" : "exec", a->c.step,
                 a->c.attempt, a->result ? "applied" : "lost");
        break;
    default:
        snprintf(buf, size, "inject %s", mtype_names[a->m.type]);
        break;
    }
}

/* ---- the state's parts ------------------------------------------------------ */

static int cmp4(const void *a, const void *b)
{
    return memcmp(a, b, 4);
}

static int cmp_call(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(mcall_t));
}

/* Adds a message in flight; false when the bound on messages is reached. */
static bool push_msg(mstate_t *s, mmsg_t m)
{
    if (s->nmsg == M_MSGS)
        return false;
    s->msg[s->nmsg++] = m;
    qsort(s->msg, s->nmsg, sizeof(mmsg_t), cmp4);
    return true;
}

static void drop_msg(mstate_t *s, int i)
{
    memmove(&s->msg[i], &s->msg[i + 1], (size_t)(s->nmsg - i - 1) * sizeof(mmsg_t));
    s->nmsg--;
    memset(&s->msg[s->nmsg], 0, sizeof(mmsg_t));
}

static void drop_call(mstate_t *s, int i)
{
    memmove(&s->call[i], &s->call[i + 1], (size_t)(s->ncall - i - 1) * sizeof(mcall_t));
    s->ncall--;
    memset(&s->call[s->ncall], 0, sizeof(mcall_t));
}

/* The decided message, for a redelivery later (while one is left). */
static void push_ring(mstate_t *s, mmsg_t m)
{
    if (s->redeliveries >= opt_redeliveries)
        return;
    memmove(&s->ring[1], &s->ring[0], (M_RING - 1) * sizeof(mmsg_t));
    s->ring[0] = m;
    if (s->nring < M_RING)
        s->nring++;
}

static bool terminal_status(int st)
{
    return st == WORKER_SAGA_COMPLETED || st == WORKER_SAGA_COMPENSATED ||
           st == WORKER_SAGA_FAILED || st == WORKER_SAGA_CANCELLED;
}

/* ---- the saga's rows in and out of the decision ---------------------------- */

static char keys[M_STEPS][128];
static char results[M_STEPS][32];

static void materialize(const mstate_t *s, worker_saga_t *sg)
{
    memset(sg, 0, sizeof(*sg));
    sg->saga_id = SAGA_ID;
    sg->name = shape->name;
    sg->input = "{\"order\":1}";
    sg->traceparent = TP;
    sg->status = (worker_saga_status_t)s->status;
    sg->generation = s->gen;
    sg->seq = s->seq;
    sg->retry_spent = s->retry_spent;
    sg->retry_budget = shape->retry_budget;
    sg->results_flow = shape->results_flow;
    sg->metadata = "{\"model\":true}";
    sg->nsteps = shape->nsteps;
    for (int i = 0; i < shape->nsteps; i++) {
        const mstep_def_t *def = &shape->steps[i];
        const mstep_t *m = &s->st[i];
        worker_step_t *st = &sg->steps[i];
        st->idx = i;
        st->name = def->name;
        st->tool = def->tool;
        st->args = def->args;
        st->comp = def->comp;
        st->group = def->group;
        st->policy = def->group ? def->policy : WORKER_POLICY_NONE;
        st->approval = def->approval;
        st->status = (worker_step_status_t)m->status;
        st->attempts = m->attempts;
        st->comp_attempts = m->comp_attempts;
        st->calling = m->calling;
        st->done_seq = m->done_seq;
        snprintf(st->error_code, sizeof(st->error_code), "%s", codes[m->err]);
        st->done_result = m->has_result ? results[i] : NULL;
        st->done_effect = m->effect == 1 ? "known" : m->effect == 2 ? "possible" : NULL;
        st->forward_key = m->has_key ? keys[i] : NULL;
    }
}

static void readback(const worker_saga_t *sg, mstate_t *s)
{
    s->status = (uint8_t)sg->status;
    s->gen = (uint8_t)sg->generation;
    s->seq = (int32_t)sg->seq;
    s->retry_spent = (int32_t)sg->retry_spent;
    for (int i = 0; i < shape->nsteps; i++) {
        const worker_step_t *st = &sg->steps[i];
        mstep_t *m = &s->st[i];
        /* A compensation begins (undo_step() sets compensating). */
        if (m->status != WORKER_STEP_COMPENSATING && st->status == WORKER_STEP_COMPENSATING)
            s->comp_starts[i]++;
        m->status = (uint8_t)st->status;
        m->attempts = (uint8_t)st->attempts;
        m->comp_attempts = (uint8_t)st->comp_attempts;
        m->calling = st->calling;
        m->done_seq = (int32_t)st->done_seq;
        m->err = intern(st->error_code);
        m->has_result = st->done_result != NULL;
        m->has_key = st->forward_key != NULL;
        m->effect = !st->done_effect ? 0 : strcmp(st->done_effect, "known") == 0 ? 1 : 2;
    }
}

/* ---- one decision ---------------------------------------------------------- */

/* The first violation seen while applying an action (set by the op
 * readers and by check()), and what it says. */
static const char *viol;
static char viol_detail[256];
/* Every invariant the action broke, with what each says. */
#define M_VIOLS 8
static const char *viols[M_VIOLS];
static char viol_details[M_VIOLS][256];
static int nviols;

static void violate(const char *inv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violate(const char *inv, const char *fmt, ...)
{
    va_list ap;
    int i;

    for (i = 0; i < nviols && strcmp(viols[i], inv) != 0; i++)
        ;
    if (i < nviols || nviols == M_VIOLS)
        return;
    viols[nviols] = inv;
    va_start(ap, fmt);
    vsnprintf(viol_details[nviols], sizeof(viol_details[0]), fmt, ap);
    va_end(ap);
    if (nviols++ == 0) {
        viol = inv;
        snprintf(viol_detail, sizeof(viol_detail), "%s", viol_details[0]);
    }
}

/* The bound on messages or calls was reached: the branch is cut. */
static bool overflow;

static int control_index(const char *id)
{
    if (!id)
        return -1;
    return id[0] == 'c' ? 0 : id[0] == 'a' ? 1 : id[0] == 'r' ? 2 : -1;
}

static int json_int(const char *payload, const char *key)
{
    sg_json_t *doc = sg_json_parse(payload, strlen(payload), NULL, NULL);
    double v = -1;

    if (doc)
        sg_json_number(sg_json_member(doc, key), &v);
    sg_json_destroy(doc);
    return (int)v;
}

/* What the decision's ops do to the world and to the messages in flight. */
static void read_ops(mstate_t *s, const worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        switch (op->kind) {
        case WORKER_OP_ATTEMPT: {
            int st = op->u.attempt.step, c = op->u.attempt.compensate, a = op->u.attempt.attempt;
            if (a >= M_ATT) {
                overflow = true;
                break;
            }
            s->rows[st][c][a][0]++;
            if (!c)
                s->fwd_issued[st] = 1;
            else if (!s->fwd_issued[st])
                violate("undo-only-if-may-stand",
                        "a compensation call of step %d (%s), whose forward call was never made",
                        st, shape->steps[st].name);
            break;
        }
        case WORKER_OP_INTERRUPTED: {
            uint8_t *r =
                s->rows[op->u.attempt.step][op->u.attempt.compensate][op->u.attempt.attempt];
            r[1] += r[0];
            r[0] = 0;
            break;
        }
        case WORKER_OP_MESSAGE: {
            const char *type = op->u.msg.type;
            mmsg_t m = {0, 0, 0, 0};
            if (strcmp(op->u.msg.topic, rules.topic_events) == 0) {
                if (strcmp(type, "step.retry_scheduled") == 0 &&
                    strstr(op->u.msg.payload, "\"phase\":\"forward\""))
                    s->fwd_retries++;
                else if (strcmp(type, "step.approved") == 0 || strcmp(type, "step.rejected") == 0) {
                    int st = json_int(op->u.msg.payload, "step");
                    if (st >= 0 && st < M_STEPS)
                        s->approvals[st]++;
                }
                break;
            }
            if (strcmp(type, "step.execute") == 0 || strcmp(type, "step.compensate") == 0) {
                m.type = type[5] == 'e' ? MT_EXEC : MT_COMP;
                m.step = (uint8_t)op->u.msg.step;
                m.attempt = (uint8_t)op->u.msg.attempt;
                m.gen = (uint8_t)op->u.msg.generation;
            } else if (strcmp(type, "step.approval_timeout") == 0) {
                m.type = MT_GATE_TIMEOUT;
                m.step = (uint8_t)json_int(op->u.msg.payload, "step");
                m.gen = (uint8_t)json_int(op->u.msg.payload, "generation");
            } else if (strcmp(type, "saga.release") == 0) {
                m.type = MT_RELEASE;
                m.gen = (uint8_t)json_int(op->u.msg.payload, "generation");
            } else {
                fprintf(stderr, "sagad-model: a command the model does not know: %s\n", type);
                exit(2);
            }
            if (m.attempt >= M_ATT || !push_msg(s, m))
                overflow = true;
            break;
        }
        case WORKER_OP_CONTROL: {
            int k = control_index(op->u.control.command_id);
            if (k >= 0 && s->answers[k] < 255)
                s->answers[k]++;
            if (k >= 0 && strcmp(op->u.control.outcome, "accepted") == 0)
                s->accepted[k]++;
            break;
        }
        default:
            break;
        }
    }
}

/* A command of the model: what the decision's seam (worker_dcmd_t,
 * worker/decide/worker_decide.h) points to, and its fields; decide() hands the
 * decision a worker_dcmd_t made of it, as the loop does from its own
 * worker_cmd_t. */
typedef struct mcmd_s {
    sg_decoded_t dec;
    worker_result_t result;
    worker_call_t call;
    int64_t offset, attempt_id;
    bool isolated, answered;
} mcmd_t;

/* The command of message m as the loop decodes it: a control's from its
 * JSON (sg_submit_decode), a step command's fields.  A control command
 * whose id the saga's history (saga_controls: the CONTROL ops applied to
 * s) already holds is marked answered, as the load marks it
 * (worker_txn.c, mark_answered). */
static const sg_principal_t signer = {.name = "env",
                                      .roles = SG_ROLE_SUBMIT | SG_ROLE_CANCEL | SG_ROLE_APPROVE};

static void command_of(const mstate_t *s, const mmsg_t *m, mcmd_t *cmd)
{
    static const char *const ctl[] = {
        [MT_CANCEL] = "saga.cancel", [MT_APPROVE] = "saga.approve", [MT_REJECT] = "saga.reject"};
    static const char ids[] = {[MT_CANCEL] = 'c', [MT_APPROVE] = 'a', [MT_REJECT] = 'r'};
    char doc[256];

    memset(cmd, 0, sizeof(*cmd));
    cmd->offset = 1;
    cmd->isolated = true; /* a crash-loop suspect runs alone at once */
    if (m->type >= MT_CANCEL) {
        if (m->type == MT_CANCEL)
            snprintf(doc, sizeof(doc),
                     "{\"v\":1,\"type\":\"saga.cancel\",\"id\":\"c-1\",\"saga_id\":\"" SAGA_ID
                     "\",\"by\":\"env\",\"reason\":\"model\"}");
        else
            snprintf(doc, sizeof(doc),
                     "{\"v\":1,\"type\":\"%s\",\"id\":\"%c-1\",\"saga_id\":\"" SAGA_ID
                     "\",\"step\":%d,\"by\":\"env\",\"reason\":\"model\"}",
                     ctl[m->type], ids[m->type], m->step);
        sg_submit_decode(doc, strlen(doc), &limits, &cmd->dec);
        if (cmd->dec.type == SG_CMD_POISON) {
            fprintf(stderr, "sagad-model: %s refused: %s\n", doc, cmd->dec.err.message);
            exit(2);
        }
        /* Signed by a principal of every role (the environment's
         * authorisation is the trust suite's; the model checks what an
         * accepted control does to the saga). */
        cmd->dec.who = &signer;
        cmd->dec.as = signer.name;
        cmd->answered = s->answers[m->type - MT_CANCEL] > 0;
        return;
    }
    cmd->dec.type = m->type == MT_EXEC           ? SG_CMD_EXECUTE
                    : m->type == MT_COMP         ? SG_CMD_COMPENSATE
                    : m->type == MT_GATE_TIMEOUT ? SG_CMD_APPROVAL_TIMEOUT
                                                 : SG_CMD_RELEASE;
    snprintf(cmd->dec.saga_id, sizeof(cmd->dec.saga_id), "%s", SAGA_ID);
    cmd->dec.step = m->step;
    cmd->dec.attempt = m->attempt;
    cmd->dec.generation = m->gen;
}

static sg_rng_t rng;

/* Decides cmd against the saga of s (returned: the outcome of its call),
 * and applies what it returns to s. */
static void decide(mstate_t *s, mcmd_t *cmd, bool returned)
{
    static worker_saga_t sg;
    worker_dcmd_t dcmd = {.dec = &cmd->dec,
                          .result = &cmd->result,
                          .call = &cmd->call,
                          .offset = cmd->offset,
                          .attempt_id = cmd->attempt_id,
                          .isolated = cmd->isolated,
                          .answered = cmd->answered};
    worker_input_t in = {
        .cmd = &dcmd, .returned = returned, .partition = 0, .now_ms = 1767225600000LL, .rng = &rng};
    worker_outcome_t out;
    int step = cmd->dec.step;

    materialize(s, &sg);
    if (!returned && (cmd->dec.type == SG_CMD_EXECUTE || cmd->dec.type == SG_CMD_COMPENSATE) &&
        step >= 0 && step < shape->nsteps && cmd->dec.attempt < M_ATT) {
        const uint8_t *r = s->rows[step][cmd->dec.type == SG_CMD_COMPENSATE][cmd->dec.attempt];
        sg.interrupted = r[0] + r[1];
        sg.finished = r[2];
    }
    sg_rng_seed(&rng, 7);
    worker_decide(&rules, &in, &sg, &out);
    read_ops(s, &out);
    readback(&sg, s);
    if (out.defer || out.unchained) {
        fprintf(stderr, "sagad-model: a decision deferred or unchained: not modelled\n");
        exit(2);
    }
    if (out.calls) {
        mcall_t c = {(uint8_t)out.call.step_idx, out.call.compensate, (uint8_t)out.call.attempt,
                     (uint8_t)out.call.generation, out.call.detach};
        if (s->ncall == M_CALLS) {
            overflow = true;
        } else {
            s->call[s->ncall++] = c;
            qsort(s->call, s->ncall, sizeof(mcall_t), cmp_call);
        }
    }
    worker_outcome_free(&out);
}

/* ---- actions: which are enabled, and what one does ------------------------ */

/* A non-member's call in flight holds its saga's queue: nothing else of
 * the saga is decided until its outcome is.  A member's call is detached,
 * but a command of that member waits for its outcome (worker_cmdq.c). */
static bool deliverable(const mstate_t *s, const mmsg_t *m)
{
    for (int i = 0; i < s->ncall; i++) {
        if (!s->call[i].detach)
            return false;
        if (m && (m->type == MT_EXEC || m->type == MT_COMP) && m->step == s->call[i].step)
            return false;
    }
    return true;
}

#define M_ACTIONS 64

static int enabled(const mstate_t *s, maction_t *acts)
{
    int n = 0;

    for (int i = 0; i < s->nmsg; i++) {
        if ((i > 0 && memcmp(&s->msg[i], &s->msg[i - 1], 4) == 0) || !deliverable(s, &s->msg[i]))
            continue; /* a copy of the one before: the same branch */
        acts[n++] = (maction_t){.kind = A_DELIVER, .m = s->msg[i]};
    }
    for (int i = 0; i < s->ncall; i++) {
        const mcall_t *c = &s->call[i];
        const mstep_def_t *def = &shape->steps[c->step];
        int mask = c->comp ? def->comp_outcomes : def->fwd_outcomes;
        bool applied = (c->comp ? s->comp_applied : s->fwd_applied)[c->step];
        /* The downstream's ledger holds an effect under this key: a call
         * with it again answers what it recorded (or times out). */
        if (applied)
            mask &= O_OK | O_TIMEOUT;
        if (!mask)
            mask = O_OK;
        if (mask & O_OK)
            acts[n++] = (maction_t){.kind = A_RETURN, .c = *c, .result = RES_OK};
        if (mask & O_PERM)
            acts[n++] = (maction_t){.kind = A_RETURN, .c = *c, .result = RES_PERM};
        if (mask & O_TRANS)
            acts[n++] = (maction_t){.kind = A_RETURN, .c = *c, .result = RES_TRANS};
        if (mask & O_TIMEOUT) {
            acts[n++] = (maction_t){.kind = A_RETURN, .c = *c, .result = RES_TIMEOUT_APPLIED};
            if (!applied)
                acts[n++] = (maction_t){.kind = A_RETURN, .c = *c, .result = RES_TIMEOUT_LOST};
        }
        /* A crash kills every call in flight: modelled with one only. */
        if (s->crashes < opt_crashes && s->ncall == 1) {
            acts[n++] = (maction_t){.kind = A_CRASH, .c = *c, .result = 1};
            if (!applied)
                acts[n++] = (maction_t){.kind = A_CRASH, .c = *c, .result = 0};
        }
    }
    if (deliverable(s, NULL)) {
        static const int kinds[] = {C_CANCEL, C_APPROVE, C_REJECT};
        for (int k = 0; k < 3; k++)
            if ((shape->controls & kinds[k]) && s->injected[k] < opt_dups)
                acts[n++] = (maction_t){
                    .kind = A_INJECT,
                    .m = {(uint8_t)(MT_CANCEL + k), (uint8_t)(k ? shape->gate : 0), 0, 0}};
        for (int i = 0; s->redeliveries < opt_redeliveries && i < s->nring; i++)
            if (deliverable(s, &s->ring[i]))
                acts[n++] = (maction_t){.kind = A_REDELIVER, .m = s->ring[i]};
    }
    return n;
}

static void check(const mstate_t *old, const mstate_t *s);

/* Applies a to s; false when it is not enabled in s.  viol is set when
 * an invariant broke, overflow when a bound cut the branch. */
static bool apply(mstate_t *s, const maction_t *a)
{
    mstate_t old = *s;
    mcmd_t cmd;
    int i;

    viol = NULL;
    nviols = 0;
    overflow = false;
    switch (a->kind) {
    case A_DELIVER:
        for (i = 0; i < s->nmsg && memcmp(&s->msg[i], &a->m, 4) != 0; i++)
            ;
        if (i == s->nmsg || !deliverable(s, &a->m))
            return false;
        drop_msg(s, i);
        command_of(s, &a->m, &cmd);
        decide(s, &cmd, false);
        push_ring(s, a->m);
        sg_json_destroy(cmd.dec.doc);
        break;
    case A_REDELIVER:
    case A_INJECT:
        if (!deliverable(s, &a->m))
            return false;
        if (a->kind == A_REDELIVER) {
            for (i = 0; i < s->nring && memcmp(&s->ring[i], &a->m, 4) != 0; i++)
                ;
            if (i == s->nring || s->redeliveries >= opt_redeliveries)
                return false;
            if (++s->redeliveries == opt_redeliveries) { /* none left to redeliver */
                memset(s->ring, 0, sizeof(s->ring));
                s->nring = 0;
            }
        } else {
            int k = a->m.type - MT_CANCEL;
            if (k < 0 || k > 2 || s->injected[k] >= opt_dups)
                return false;
            s->injected[k]++;
        }
        command_of(s, &a->m, &cmd);
        decide(s, &cmd, false);
        if (a->kind == A_INJECT)
            push_ring(s, a->m);
        sg_json_destroy(cmd.dec.doc);
        break;
    case A_RETURN:
    case A_CRASH: {
        const mcall_t *c = &a->c;
        const mstep_def_t *def;
        uint8_t *row;
        for (i = 0; i < s->ncall && memcmp(&s->call[i], c, sizeof(*c)) != 0; i++)
            ;
        if (i == s->ncall || c->step >= shape->nsteps)
            return false;
        def = &shape->steps[c->step];
        drop_call(s, i);
        if (a->kind == A_CRASH) {
            /* The worker died mid-call: the attempt row stays unfinished,
             * the effect may or may not have been applied, and the
             * command comes again. */
            if (s->crashes >= opt_crashes)
                return false;
            s->crashes++;
            if (a->result)
                (c->comp ? s->comp_applied : s->fwd_applied)[c->step] = 1;
            if (!push_msg(s, (mmsg_t){c->comp ? MT_COMP : MT_EXEC, c->step, c->attempt, c->gen}))
                overflow = true;
            break;
        }
        row = s->rows[c->step][c->comp][c->attempt];
        if (row[0]) {
            row[0]--;
            row[2]++;
        }
        if (a->result == RES_OK || a->result == RES_TIMEOUT_APPLIED)
            (c->comp ? s->comp_applied : s->fwd_applied)[c->step] = 1;
        memset(&cmd, 0, sizeof(cmd));
        cmd.dec.type = c->comp ? SG_CMD_COMPENSATE : SG_CMD_EXECUTE;
        snprintf(cmd.dec.saga_id, sizeof(cmd.dec.saga_id), "%s", SAGA_ID);
        cmd.dec.step = c->step;
        cmd.dec.attempt = c->attempt;
        cmd.dec.generation = c->gen;
        cmd.attempt_id = 1;
        cmd.call.tool = sg_registry_find(reg, c->comp ? "rel" : def->tool);
        cmd.call.step_name = (char *)def->name;
        cmd.call.step_idx = c->step;
        cmd.call.compensate = c->comp;
        cmd.call.attempt = c->attempt;
        cmd.call.generation = c->gen;
        cmd.call.idem_key = keys[c->step];
        cmd.result.latency_ms = 5;
        switch (a->result) {
        case RES_OK:
            cmd.result.status = WORKER_OK;
            cmd.result.data = results[c->step];
            break;
        case RES_PERM:
            cmd.result.status = WORKER_ERROR;
            sg_err_set(&cmd.result.err, SG_ERRCLASS_PERMANENT, "tool.failed", "it broke");
            break;
        case RES_TRANS:
            cmd.result.status = WORKER_ERROR;
            sg_err_set(&cmd.result.err, SG_ERRCLASS_TRANSIENT, "tool.unavailable", "try again");
            cmd.result.err.retriable = true;
            break;
        default:
            cmd.result.status = WORKER_TIMEOUT;
            sg_err_set(&cmd.result.err, SG_ERRCLASS_TIMEOUT, "tool.timeout", "no answer");
            cmd.result.err.retriable = true;
            cmd.result.maybe_applied = true;
            break;
        }
        decide(s, &cmd, true);
        break;
    }
    default:
        return false;
    }
    check(&old, s);
    return true;
}

/* ---- the invariants ---------------------------------------------------------- */

static bool failed_status(int st)
{
    return st == WORKER_STEP_FAILED || st == WORKER_STEP_UNKNOWN;
}

static void check(const mstate_t *old, const mstate_t *s)
{
    static const char *const ctl[] = {"saga.cancel", "saga.approve", "saga.reject"};
    bool quiet = s->nmsg == 0 && s->ncall == 0;
    uint8_t unresolved = intern("input.ref.unresolved");

    for (int i = 0; i < shape->nsteps; i++) {
        const mstep_def_t *def = &shape->steps[i];
        if (s->comp_starts[i] > 1)
            violate("undone-once", "the compensation of step %d (%s) began %d times", i, def->name,
                    s->comp_starts[i]);
        if (s->approvals[i] > 1)
            violate("answered-once", "the approval gate of step %d (%s) was decided %d times", i,
                    def->name, s->approvals[i]);
        if (def->reversible && s->fwd_applied[i] && !s->comp_applied[i] &&
            (s->status == WORKER_SAGA_COMPENSATED || s->status == WORKER_SAGA_CANCELLED ||
             (s->status == WORKER_SAGA_COMPLETED && s->st[i].status != WORKER_STEP_SUCCEEDED)))
            violate("effect-stands",
                    "the saga is %s while the effect of step %d (%s, %s, reversible) stands "
                    "and is not undone",
                    worker_saga_status_name(s->status), i, def->name,
                    worker_step_status_name(s->st[i].status));
        if (unresolved && s->st[i].err == unresolved)
            violate("ref-resolves",
                    "step %d (%s) failed with input.ref.unresolved: a reference the saga's "
                    "definition made valid named no value at run time",
                    i, def->name);
        if (def->group && def->policy == WORKER_POLICY_ALL_OR_NOTHING &&
            (s->st[i].status == WORKER_STEP_AWAITING_APPROVAL ||
             s->st[i].status == WORKER_STEP_APPROVED))
            for (int j = 0; j < shape->nsteps; j++)
                if (j != i && shape->steps[j].group &&
                    strcmp(shape->steps[j].group, def->group) == 0 &&
                    failed_status(s->st[j].status))
                    violate("no-futile-approval",
                            "step %d (%s) is %s while its all_or_nothing group has already "
                            "failed (member %s is %s)",
                            i, def->name, worker_step_status_name(s->st[i].status),
                            shape->steps[j].name, worker_step_status_name(s->st[j].status));
    }
    for (int k = 0; k < 3; k++) {
        if (s->answers[k] > 1 && s->accepted[k])
            violate("answered-once",
                    "%s (command id %c-1) was accepted, and answered %d times in all (%d "
                    "accepted)",
                    ctl[k], "car"[k], s -> answers[k], s -> accepted[k]);
        else if (s->answers[k] > 1)
            violate("refused-once", "%s (command id %c-1) was refused %d times", ctl[k], "car"[k],
                    s -> answers[k]);
        if (quiet && s->injected[k] && !s->answers[k])
            violate("answered-once", "%s (command id %c-1) was never answered", ctl[k], "car"[k]);
    }
    if (terminal_status(old->status) && s->status != old->status)
        violate("terminal-stays", "the saga went from %s to %s",
                worker_saga_status_name(old->status), worker_saga_status_name(s->status));
    if (s->gen < old->gen)
        violate("generation-grows", "the generation went from %d to %d", old->gen, s->gen);
    if (shape->retry_budget == 0 && s->fwd_retries)
        violate("retry-budget", "a saga with retry_budget_ms 0 scheduled a forward retry");
    if (quiet && !terminal_status(s->status) && !overflow)
        violate("no-stuck-saga", "nothing is in flight and the saga is %s",
                worker_saga_status_name(s->status));
}

/* ---- the start ---------------------------------------------------------------- */

/* The saga as its saga.start stored it (running, every step pending),
 * with the step.execute of its first step (of each member of a group
 * that comes first) in flight. */
static void initial(mstate_t *s)
{
    worker_saga_t sg;

    memset(s, 0, sizeof(*s));
    s->status = WORKER_SAGA_RUNNING;
    s->gen = 1;
    s->seq = 1;
    for (int i = 0; i < shape->nsteps; i++) {
        s->st[i].status = WORKER_STEP_PENDING;
        sg_idem_key(keys[i], sizeof(keys[i]), SAGA_ID, i, false, 1);
        snprintf(results[i], sizeof(results[i]), "{\"v\":%d}", i + 1);
    }
    materialize(s, &sg);
    for (int i = 0; i <= worker_group_last(&sg, 0); i++)
        push_msg(s, (mmsg_t){MT_EXEC, (uint8_t)i, 1, 1});
}

static const char *status_letters(const mstate_t *s, char *buf)
{
    /* as tests/unit/saga_fixture.c spells them */
    static const char steps[] = "prsfucCxkaA";
    int n = 0;

    for (int i = 0; i < shape->nsteps; i++)
        buf[n++] = steps[s->st[i].status];
    buf[n] = '\0';
    return buf;
}

static void print_state(FILE *f, const mstate_t *s)
{
    char b[M_STEPS + 1];

    fprintf(f, "saga %-12s steps %s  messages %d calls %d", worker_saga_status_name(s->status),
            status_letters(s, b), s->nmsg, s->ncall);
}

/* ---- traces ----------------------------------------------------------------------- */

static maction_t trace[256];

/* The counterexample: each action replayed from the start, with the
 * statuses after it; the lines are --replay's. */
static void print_trace(FILE *f, int n, const char *inv, const char *detail)
{
    mstate_t s;
    char text[96];

    initial(&s);
    fprintf(f, "# counterexample: invariant %s\n# %s\n", inv, detail);
    fprintf(f, "# steps: p pending r running s succeeded f failed u unknown c compensating "
               "C compensated x compensation_failed k skipped a awaiting_approval A approved\n");
    fprintf(f, "shape %s\nexpect %s\n", shape->name, inv);
    for (int i = 0; i < n; i++) {
        action_text(&trace[i], text, sizeof(text));
        apply(&s, &trace[i]);
        fprintf(f, "%-32s # ", text);
        print_state(f, &s);
        fputc('\n', f);
    }
}

/* ---- a product assert -------------------------------------------------------------- */

static int trace_len;
static volatile sig_atomic_t in_search;

static void on_abort(int sig)
{
    (void)sig;
    if (in_search && shape) {
        fprintf(stdout,
                "\nVIOLATION in shape %s: a product assert failed (an illegal status "
                "transition, worker_state.c) on the last action below\n",
                shape->name);
        for (int i = 0; i < trace_len; i++) {
            char text[96];
            action_text(&trace[i], text, sizeof(text));
            fprintf(stdout, "%s\n", text);
        }
        fflush(stdout);
    }
    _exit(1);
}

/* ---- the known failures --------------------------------------------------------------- */

typedef struct known_s {
    char kind[8], a[64], b[64];
} known_t;
static known_t known[64];
static int nknown;

static void load_known(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];

    if (!f) {
        perror(path);
        exit(2);
    }
    while (fgets(line, sizeof(line), f)) {
        known_t k = {"", "", ""};
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        if (sscanf(line, "%7s %63s %63s", k.kind, k.a, k.b) < 2)
            continue;
        if (nknown < 64)
            known[nknown++] = k;
    }
    fclose(f);
}

/* Is invariant inv of the current shape a known failure (skip SHAPE INV)? */
static bool known_violation(const char *inv)
{
    for (int i = 0; i < nknown; i++)
        if (strcmp(known[i].kind, "skip") == 0 && strcmp(known[i].a, shape->name) == 0 &&
            strcmp(known[i].b, inv) == 0)
            return true;
    return false;
}

static bool known_case(const char *file)
{
    const char *base = strrchr(file, '/');

    base = base ? base + 1 : file;
    for (int i = 0; i < nknown; i++)
        if (strcmp(known[i].kind, "case") == 0 && strcmp(known[i].a, base) == 0)
            return true;
    return false;
}

/* ---- the search ------------------------------------------------------------------------ */

/* Visited states: a hash of the state's bytes, with the most depth left
 * it was expanded with (a state reached again with no more left is
 * pruned).  Open addressing; two states of one hash are taken as one. */
typedef struct seen_s {
    uint64_t h;
    int32_t left;
} seen_t;
static seen_t *seen;
static size_t seen_cap, seen_n;

static uint64_t hash_state(const mstate_t *s)
{
    const unsigned char *p = (const unsigned char *)s;
    uint64_t h = 0x9e3779b97f4a7c15ULL;

    for (size_t i = 0; i < sizeof(*s); i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h | 1; /* 0 marks an empty slot */
}

static void seen_reset(void)
{
    free(seen);
    seen_cap = 1u << 20;
    seen_n = 0;
    seen = calloc(seen_cap, sizeof(*seen));
}

static void seen_grow(void)
{
    seen_t *old = seen;
    size_t cap = seen_cap;

    seen_cap *= 2;
    seen = calloc(seen_cap, sizeof(*seen));
    for (size_t i = 0; i < cap; i++)
        if (old[i].h) {
            size_t j = old[i].h & (seen_cap - 1);
            while (seen[j].h)
                j = (j + 1) & (seen_cap - 1);
            seen[j] = old[i];
        }
    free(old);
}

/* True when s was expanded before with at least left to go. */
static bool seen_before(const mstate_t *s, int left)
{
    uint64_t h = hash_state(s);
    size_t j;

    if (seen_n * 10 > seen_cap * 7 && seen_cap < (1u << 26))
        seen_grow();
    for (j = h & (seen_cap - 1); seen[j].h; j = (j + 1) & (seen_cap - 1))
        if (seen[j].h == h) {
            if (seen[j].left >= left)
                return true;
            seen[j].left = left;
            return false;
        }
    if (seen_n * 10 > seen_cap * 9)
        return false; /* full: explored again rather than not at all */
    seen[j].h = h;
    seen[j].left = left;
    seen_n++;
    return false;
}

typedef struct result_s {
    const char *shape;
    long long states, transitions;
    int depth;
    double seconds;
    bool timed_out;
    const char *violation; /* unexpected: the first one */
    char detail[256];
    int nknown_hits;
    char known_hits[8][32];
} result_t;

static result_t *cur;
static struct timespec t0;
static double deadline;

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
}

static FILE *cex_out;

/* Depth first from s at depth; true when an unexpected violation ends the search. */
static bool dfs(const mstate_t *s, int depth)
{
    maction_t acts[M_ACTIONS];
    int n;

    if (cur->timed_out || seen_before(s, opt_depth - depth))
        return false;
    cur->states++; /* a state reached with more depth left than before */
    if (depth > cur->depth)
        cur->depth = depth;
    if ((cur->states & 1023) == 0 && now_s() > deadline) {
        cur->timed_out = true;
        return false;
    }
    if (depth >= opt_depth)
        return false;
    n = enabled(s, acts);
    for (int i = 0; i < n; i++) {
        mstate_t t = *s;
        trace[depth] = acts[i];
        trace_len = depth + 1;
        apply(&t, &acts[i]);
        cur->transitions++;
        for (int v = 0; v < nviols; v++) {
            if (known_violation(viols[v])) {
                /* A known failure: counted, and the search goes on below
                 * it, so that it hides no other. */
                bool have = false;
                for (int k = 0; k < cur->nknown_hits; k++)
                    have |= strcmp(cur->known_hits[k], viols[v]) == 0;
                if (!have && cur->nknown_hits < 8)
                    snprintf(cur->known_hits[cur->nknown_hits++], 32, "%s", viols[v]);
                continue;
            }
            cur->violation = viols[v];
            snprintf(cur->detail, sizeof(cur->detail), "%s", viol_details[v]);
            print_trace(cex_out, depth + 1, viols[v], viol_details[v]);
            return true;
        }
        if (overflow)
            continue;
        if (dfs(&t, depth + 1))
            return true;
    }
    return false;
}

static void explore(const shape_t *sh, double seconds, result_t *r)
{
    mstate_t s;
    double start = now_s();

    memset(r, 0, sizeof(*r));
    shape = sh;
    cur = r;
    r->shape = sh->name;
    deadline = start + seconds;
    seen_reset();
    initial(&s);
    in_search = 1;
    dfs(&s, 0);
    in_search = 0;
    r->seconds = now_s() - start;
}

/* ---- replay ------------------------------------------------------------------------------ */

static int parse_type(const char *w)
{
    for (int i = 0; i < 7; i++)
        if (strcmp(mtype_names[i], w) == 0)
            return i;
    return -1;
}

/* Replays a trace file; 1 when an invariant breaks (printed), 3 when it
 * is another than the file's expect line names, 0 when none does, 2 when
 * the file is bad or an action is not enabled (the product no longer goes
 * that way). */
static int replay(const char *path, bool quiet)
{
    FILE *f = fopen(path, "r");
    char line[512], w[4][32], expect[32] = "";
    mstate_t s;
    int n = 0, lineno = 0;

    if (!f) {
        perror(path);
        return 2;
    }
    shape = NULL;
    while (fgets(line, sizeof(line), f)) {
        maction_t a;
        char *hash = strchr(line, '#');
        int nw, t;
        lineno++;
        if (hash)
            *hash = '\0';
        memset(w, 0, sizeof(w));
        nw = sscanf(line, "%31s %31s %31s %31s", w[0], w[1], w[2], w[3]);
        if (nw >= 2 && strcmp(w[0], "expect") == 0)
            snprintf(expect, sizeof(expect), "%s", w[1]);
        if (nw <= 0 || strcmp(w[0], "expect") == 0)
            continue;
        if (strcmp(w[0], "shape") == 0) {
            shape = model_shape(w[1]);
            if (!shape) {
                fprintf(stderr, "%s:%d: no shape %s\n", path, lineno, w[1]);
                fclose(f);
                return 2;
            }
            initial(&s);
            continue;
        }
        if (!shape) {
            fprintf(stderr, "%s:%d: the shape comes first\n", path, lineno);
            fclose(f);
            return 2;
        }
        memset(&a, 0, sizeof(a));
        t = parse_type(w[1]);
        if (strcmp(w[0], "deliver") == 0 || strcmp(w[0], "redeliver") == 0 ||
            strcmp(w[0], "inject") == 0) {
            a.kind = w[0][0] == 'd' ? A_DELIVER : w[0][0] == 'r' ? A_REDELIVER : A_INJECT;
            a.m.type = (uint8_t)t;
            a.m.step = (uint8_t)atoi(w[2]);
            a.m.attempt = (uint8_t)atoi(w[3]);
            a.m.gen = s.gen;
            if (t >= MT_CANCEL) {
                a.m.step = (uint8_t)(t == MT_CANCEL ? 0 : shape->gate);
                a.m.gen = a.kind == A_INJECT ? 0 : s.gen;
            }
            if (a.kind == A_INJECT || t >= MT_CANCEL)
                a.m.gen = 0;
            if (t == MT_RELEASE)
                a.m.step = a.m.attempt = 0;
        } else if (strcmp(w[0], "return") == 0 || strcmp(w[0], "crash") == 0) {
            a.kind = w[0][0] == 'r' ? A_RETURN : A_CRASH;
            a.c.comp = t == MT_COMP;
            a.c.step = (uint8_t)atoi(w[2]);
            a.c.attempt = (uint8_t)atoi(w[3]);
            a.c.gen = s.gen;
            a.c.detach = shape->steps[a.c.step].group && !a.c.comp;
            if (a.kind == A_CRASH) {
                a.result = strstr(line, "applied") != NULL;
            } else {
                char o[32] = "";
                sscanf(line, "%*s %*s %*s %*s %31s", o);
                for (int i = 0; i < 5; i++)
                    if (strcmp(outcome_names[i], o) == 0)
                        a.result = (uint8_t)i;
            }
        } else {
            fprintf(stderr, "%s:%d: what is \"%s\"?\n", path, lineno, w[0]);
            fclose(f);
            return 2;
        }
        if (t < 0) {
            fprintf(stderr, "%s:%d: what is \"%s\"?\n", path, lineno, w[1]);
            fclose(f);
            return 2;
        }
        trace[n++] = a;
        trace_len = n;
        in_search = 1;
        if (!apply(&s, &a)) {
            if (!quiet)
                fprintf(stdout, "%s:%d: not enabled now (the product goes another way): %s", path,
                        lineno, line);
            fclose(f);
            return 2;
        }
        for (int v = 1; viol && expect[0] && v < nviols; v++)
            if (strcmp(viols[v], expect) == 0) { /* the one the case is about */
                viol = viols[v];
                snprintf(viol_detail, sizeof(viol_detail), "%s", viol_details[v]);
            }
        if (viol) {
            const char *inv = viol;
            char detail[256];
            snprintf(detail, sizeof(detail), "%s", viol_detail);
            if (!quiet)
                print_trace(stdout, n, inv, detail);
            fclose(f);
            fprintf(stdout, "%s: FAILS: invariant %s: %s\n", path, inv, detail);
            if (expect[0] && strcmp(expect, inv) != 0) {
                fprintf(stdout, "%s: ... but it expects invariant %s to break\n", path, expect);
                return 3;
            }
            return 1;
        }
    }
    fclose(f);
    if (!quiet)
        fprintf(stdout, "%s: passes: no invariant broke (last: ", path);
    if (!quiet && shape) {
        print_state(stdout, &s);
        fprintf(stdout, ")\n");
    }
    return 0;
}

/* Replays every *.trace of dir, each in a child (a product assert aborts
 * it): a case on the known list (case FILE) is expected to fail; 1 when a
 * case fails unexpectedly (or, with --strict, a known one passes). */
static int check_cases(const char *dir)
{
    char cmd[1024], path[1024];
    FILE *ls;
    int bad = 0, n = 0;

    snprintf(cmd, sizeof(cmd), "ls %s/*.trace 2>/dev/null | sort", dir);
    ls = popen(cmd, "r");
    if (!ls)
        return 2;
    while (fgets(path, sizeof(path), ls)) {
        pid_t pid;
        int st, rc;
        bool expect_fail;
        path[strcspn(path, "\n")] = '\0';
        expect_fail = known_case(path);
        fflush(stdout);
        pid = fork();
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 1);
            _exit(replay(path, true));
        }
        waitpid(pid, &st, 0);
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        n++;
        if (rc == 1 && expect_fail) {
            printf("  XFAIL  %s (a known defect: still fails)\n", path);
        } else if (rc == 3) {
            printf("  FAIL   %s: another invariant than its expect line breaks (--replay %s)\n",
                   path, path);
            bad = 1;
        } else if (rc == 1) {
            printf("  FAIL   %s (sagad-model --replay %s)\n", path, path);
            bad = 1;
        } else if (rc == 0 && !expect_fail) {
            printf("  pass   %s\n", path);
        } else if (rc == 2 && !expect_fail) {
            printf("  ERROR  %s: the trace does not apply\n", path);
            bad = 1;
        } else {
            printf("  XPASS  %s: the defect no longer reproduces (%s): take it off %s\n", path,
                   rc == 0 ? "no invariant breaks" : "the trace no longer applies",
                   opt_known ? opt_known : "the known list");
            if (opt_strict)
                bad = 1;
        }
    }
    pclose(ls);
    printf("model cases: %d replayed\n", n);
    return bad;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: sagad-model [--depth N] [--max-seconds S] [--shape NAME] [--json]\n"
               "                   [--redeliveries N] [--crashes N] [--dups N] [--known FILE]\n"
               "       sagad-model --replay FILE\n"
               "       sagad-model --check-cases DIR [--known FILE] [--strict]\n"
               "       sagad-model --list\n"
               "Explores every interleaving of each shape's deliveries, call outcomes, crashes,\n"
               "controls and redeliveries up to the depth (default 22), --max-seconds in all\n"
               "(default 50).  Exit 1 on a violation not on the known list (skip SHAPE INV).\n");
}

int main(int argc, char **argv)
{
    sg_config_t *cfg = sg_config_new();
    result_t res[32];
    int nres = 0, rc = 0;
    long long total = 0;
    sg_err_t err;
    double secs = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--depth") == 0 && v)
            opt_depth = atoi(argv[++i]);
        else if (strcmp(a, "--max-seconds") == 0 && v)
            opt_seconds = atof(argv[++i]);
        else if (strcmp(a, "--shape") == 0 && v)
            opt_shape = argv[++i];
        else if (strcmp(a, "--replay") == 0 && v)
            opt_replay = argv[++i];
        else if (strcmp(a, "--check-cases") == 0 && v)
            opt_cases = argv[++i];
        else if (strcmp(a, "--known") == 0 && v)
            opt_known = argv[++i];
        else if (strcmp(a, "--redeliveries") == 0 && v)
            opt_redeliveries = atoi(argv[++i]);
        else if (strcmp(a, "--crashes") == 0 && v)
            opt_crashes = atoi(argv[++i]);
        else if (strcmp(a, "--dups") == 0 && v)
            opt_dups = atoi(argv[++i]);
        else if (strcmp(a, "--json") == 0)
            opt_json = true;
        else if (strcmp(a, "--strict") == 0)
            opt_strict = true;
        else if (strcmp(a, "--list") == 0) {
            for (int k = 0; k < model_nshapes; k++)
                printf("%-16s %s\n", model_shapes[k].name, model_shapes[k].what);
            return 0;
        } else {
            usage(strcmp(a, "--help") == 0 ? stdout : stderr);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (opt_depth < 1 || opt_depth > 250)
        opt_depth = 22;
    signal(SIGABRT, on_abort);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    reg = sg_registry_parse("model-registry.json", registry_text, strlen(registry_text), cfg, NULL,
                            &err);
    sg_config_destroy(cfg);
    if (!reg) {
        fprintf(stderr, "sagad-model: registry refused: %s\n", err.message);
        return 2;
    }
    /* Retries without a wait: time is not modelled, and a zero-delay retry
     * is what a full-jitter draw of 0 gives. */
    retry_pol = (sg_policy_t){2, 0, 0};
    comp_pol = (sg_policy_t){2, 0, 0};
    rules = (worker_rules_t){.reg = reg,
                             .limits = &limits,
                             .topic_internal = "m.internal",
                             .topic_events = "m.events",
                             .crash_loop_limit = 3,
                             .hold_ms = 0,
                             .event_result_max = 4096,
                             .approval_timeout_ms = 60000,
                             .budget_ms = 0,
                             .retry = &retry_pol,
                             .comp_retry = &comp_pol,
                             .chain = false,
                             .log_level = SG_LOG_ERROR};
    if (opt_known)
        load_known(opt_known);
    cex_out = stdout;
    if (opt_replay) {
        rc = replay(opt_replay, false);
        sg_registry_destroy(reg);
        return rc;
    }
    if (opt_cases) {
        rc = check_cases(opt_cases);
        sg_registry_destroy(reg);
        return rc;
    }
    if (opt_json)
        cex_out = stderr;
    for (int k = 0; k < model_nshapes; k++) {
        const shape_t *sh = &model_shapes[k];
        int left = 0;
        if (opt_shape && strcmp(opt_shape, sh->name) != 0)
            continue;
        for (int j = k; j < model_nshapes; j++)
            left += !opt_shape || strcmp(opt_shape, model_shapes[j].name) == 0;
        if (!opt_json)
            printf("== shape %s: %s\n", sh->name, sh->what);
        fflush(stdout);
        explore(sh, (opt_seconds - now_s()) / left, &res[nres]);
        {
            result_t *r = &res[nres++];
            total += r->states;
            if (r->violation)
                rc = 1;
            if (!opt_json) {
                printf(
                    "   %lld states, %lld transitions, depth %d of %d, %.2f s, %.0f states/s%s\n",
                    r->states, r->transitions, r->depth, opt_depth, r->seconds,
                    r->seconds > 0 ? (double)r->states / r->seconds : 0.0,
                    r->timed_out ? " (time bound reached)" : "");
                for (int h = 0; h < r->nknown_hits; h++)
                    printf("   known failure (on the known list): %s\n", r->known_hits[h]);
                if (r->violation)
                    printf("   VIOLATION of %s: %s\n", r->violation, r->detail);
            }
        }
    }
    if (nres == 0) {
        fprintf(stderr, "sagad-model: no shape %s (--list)\n", opt_shape);
        return 2;
    }
    secs = now_s();
    if (opt_json) {
        printf("{\"depth_bound\":%d,\"seconds\":%.3f,\"states\":%lld,\"states_per_second\":%.0f,"
               "\"shapes\":[",
               opt_depth, secs, total, secs > 0 ? (double)total / secs : 0.0);
        for (int i = 0; i < nres; i++) {
            const result_t *r = &res[i];
            printf("%s{\"shape\":\"%s\",\"states\":%lld,\"transitions\":%lld,\"depth\":%d,"
                   "\"seconds\":%.3f,\"timed_out\":%s,\"violation\":",
                   i ? "," : "", r->shape, r->states, r->transitions, r->depth, r->seconds,
                   r->timed_out ? "true" : "false");
            if (r->violation)
                printf("{\"invariant\":\"%s\",\"detail\":\"%s\"}", r->violation, r->detail);
            else
                printf("null");
            printf(",\"known\":[");
            for (int h = 0; h < r->nknown_hits; h++)
                printf("%s\"%s\"", h ? "," : "", r->known_hits[h]);
            printf("]}");
        }
        printf("]}\n");
    } else {
        printf("model: %lld states in %.2f s (%.0f states/s), depth bound %d: %s\n", total, secs,
               secs > 0 ? (double)total / secs : 0.0, opt_depth,
               rc ? "VIOLATION (trace above; --replay reads it)" : "no unexpected violation");
    }
    free(seen);
    sg_registry_destroy(reg);
    return rc;
}
