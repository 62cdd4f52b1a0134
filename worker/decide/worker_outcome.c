/* The outcome of a saga decision (worker_decide.h): the list of its
 * effects, and the messages, rows, dead letters and log lines the
 * decisions add to it, built here so the decision files say only what
 * happens.  Owns every text an op holds and frees it.  Pure: no SQL, no
 * clock (times come from the input's now), no I/O. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_text.h"
#include "sagad/sg_alloc.h"
#include "worker_decide.h"

static char *dup_or_null(const char *s)
{
    char *d;

    if (!s)
        return NULL;
    d = sg_xstrdup(s);
    return d;
}

worker_op_t *worker_out_op(worker_dc_t *d, worker_op_kind_t kind, const char *saga_id)
{
    worker_outcome_t *out = d->out;
    worker_op_t *op;

    if (out->n == out->cap) {
        size_t cap = out->cap ? 2 * out->cap : 16;
        worker_op_t *ops = sg_xrealloc(out->ops, cap * sizeof(*ops));
        out->ops = ops;
        out->cap = cap;
    }
    op = &out->ops[out->n++];
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    op->saga_id = saga_id;
    return op;
}

void worker_out_log(worker_dc_t *d, sg_log_level_t level, const sg_log_ctx_t *ctx, const char *fmt,
                    ...)
{
    worker_op_t *op;
    va_list ap;
    int n;

    if (level > d->rules->log_level)
        return;
    op = worker_out_op(d, WORKER_OP_LOG, ctx->saga_id);
    op->u.log.level = level;
    op->u.log.ctx = *ctx;
    op->u.log.error_code = dup_or_null(ctx->error_code);
    op->u.log.ctx.error_code = op->u.log.error_code;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort(); /* a format the C library cannot print: a programming error */
    op->u.log.text = sg_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(op->u.log.text, (size_t)n + 1, fmt, ap);
    va_end(ap);
}

static worker_op_t *metric(worker_dc_t *d, sg_metric_id_t id, const char *const *labels)
{
    worker_op_t *op = worker_out_op(d, WORKER_OP_METRIC, NULL);

    op->u.metric.id = id;
    for (int i = 0; labels && labels[i] && i < 3; i++)
        op->u.metric.labels[i] = dup_or_null(labels[i]);
    return op;
}

void worker_out_count(worker_dc_t *d, sg_metric_id_t id, const char *const *labels)
{
    metric(d, id, labels);
}

void worker_out_observe(worker_dc_t *d, sg_metric_id_t id, const char *const *labels, double value)
{
    worker_op_t *op = metric(d, id, labels);

    op->u.metric.observe = true;
    op->u.metric.value = value;
}

static char *headers_json(const char *type, const char *traceparent)
{
    sg_json_t *h = sg_json_new_object();
    char *text;

    sg_json_add_str(h, "sagad-type", type);
    if (traceparent)
        sg_json_add_str(h, "traceparent", traceparent);
    text = sg_json_print(h);
    sg_json_destroy(h);
    return text;
}

sg_json_t *worker_out_message_new(const char *type, const char *id, const char *saga_id)
{
    sg_json_t *m = sg_json_new_object();

    sg_json_add_int(m, "v", 1);
    sg_json_add_str(m, "type", type);
    sg_json_add_str(m, "id", id);
    sg_json_add_str(m, "saga_id", saga_id);
    return m;
}

/* ---- the cap on outgoing messages (limits.max_outgoing_bytes) ----------
 *
 * The relay's producer refuses a message over its message.max.bytes
 * (1,000,000 by default), and such a row used to stop its shard.  A
 * message over the cap loses its largest members, largest first, until
 * it fits: each becomes null (a problem list keeps the problems that fit)
 * and truncated_fields says what went, how large it was, and where
 * PostgreSQL keeps it whole. */

#define CAP_RESERVE 2048 /* room for truncated_fields */

/* Members a message is named by: never cut. */
static bool envelope_member(const char *key)
{
    static const char *const keys[] = {"v",    "type",      "id",      "saga_id",    "seq", "time",
                                       "step", "step_name", "attempt", "generation", NULL};

    for (int i = 0; keys[i]; i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

/* Where the whole of a cut member stays. */
static const char *kept_in(const char *field)
{
    static const char *const where[][2] = {
        {"output", "sagas.output"},
        {"problems", "dead_letters.payload (the submission: sagactl validate lists every problem)"},
        {"result", "steps.result"},
        {"metadata", "sagas.metadata"},
        {"args", "steps.args (as submitted, references unresolved)"},
        {"members", "steps (the group's rows)"},
        {"run_health", "steps and attempts (the saga's rows)"},
    };

    for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++)
        if (strcmp(field, where[i][0]) == 0)
            return where[i][1];
    return "the saga's rows";
}

/* The largest member of msg not cut yet (and its printed size). */
static const sg_json_t *largest_member(const sg_json_t *msg, const sg_json_t *cuts, size_t *size)
{
    const sg_json_t *best = NULL;

    *size = 0;
    for (const sg_json_t *m = sg_json_first(msg); m; m = sg_json_next(m)) {
        const char *key = sg_json_key(m);
        char *text;
        size_t len;
        bool cut = false;

        if (envelope_member(key) || strncmp(key, "truncated", 9) == 0 || sg_json_is_null(m))
            continue;
        for (const sg_json_t *c = sg_json_first(cuts); c && !cut; c = sg_json_next(c))
            cut = strcmp(sg_json_string(sg_json_member(c, "field")), key) == 0;
        if (cut)
            continue;
        text = sg_json_print(m);
        len = strlen(text);
        free(text);
        if (len > *size) {
            *size = len;
            best = m;
        }
    }
    return best;
}

/* The first items of arr whose text fits in budget bytes; *dropped the rest. */
static sg_json_t *array_prefix(const sg_json_t *arr, size_t budget, int64_t *dropped)
{
    sg_json_t *kept = sg_json_new_array();
    size_t used = 2, n = sg_json_array_size(arr), i;

    for (i = 0; i < n; i++) {
        const sg_json_t *item = sg_json_array_get(arr, i);
        char *text = sg_json_print(item);
        size_t len = strlen(text) + 1;

        free(text);
        if (used + len > budget && i > 0) /* the first stays: the list is never empty */
            break;
        used += len;
        sg_json_append(kept, sg_json_dup(item));
    }
    *dropped = (int64_t)(n - i);
    return kept;
}

/* A copy of msg with member key replaced by value (NULL: null). */
static sg_json_t *with_member(const sg_json_t *msg, const char *key, sg_json_t *value)
{
    sg_json_t *out = sg_json_new_object();

    for (const sg_json_t *m = sg_json_first(msg); m; m = sg_json_next(m)) {
        if (strcmp(sg_json_key(m), key) != 0)
            sg_json_add_node(out, sg_json_key(m), sg_json_dup(m));
        else if (value)
            sg_json_add_node(out, key, value);
        else
            sg_json_add_null(out, key);
    }
    return out;
}

/* The text of msg within cap bytes (0: no cap).  Takes msg. */
static char *capped_text(sg_json_t *msg, size_t cap)
{
    char *text = sg_json_print(msg);
    sg_json_t *cuts = NULL;
    size_t len = strlen(text), size;

    while (cap > 0 && len > cap) {
        const sg_json_t *m = largest_member(msg, cuts, &size);
        sg_json_t *cut, *next, *kept = NULL;
        int64_t dropped = 0;
        const char *key;

        if (!m)
            break; /* only the envelope is left: it is small */
        key = sg_json_key(m);
        if (sg_json_is_array(m) && strcmp(key, "problems") == 0 && len - size + CAP_RESERVE < cap)
            kept = array_prefix(m, cap - CAP_RESERVE - (len - size), &dropped);
        cut = sg_json_new_object();
        sg_json_add_str(cut, "field", key);
        sg_json_add_int(cut, "bytes", (int64_t)size);
        if (kept)
            sg_json_add_int(cut, "dropped", dropped);
        sg_json_add_str(cut, "kept_in", kept_in(key));
        if (!cuts)
            cuts = sg_json_new_array();
        sg_json_append(cuts, cut);
        next = with_member(msg, key, kept);
        sg_json_destroy(msg);
        msg = next;
        sg_json_set(msg, "truncated", sg_json_parse("true", 4, NULL, NULL));
        sg_json_set(msg, "truncated_fields", sg_json_dup(cuts));
        free(text);
        text = sg_json_print(msg);
        len = strlen(text);
    }
    sg_json_destroy(cuts);
    sg_json_destroy(msg);
    return text;
}

worker_op_t *worker_out_emit(worker_dc_t *d, const char *topic, const char *traceparent,
                             sg_json_t *msg, int64_t delay_ms)
{
    const char *type = sg_json_string(sg_json_member(msg, "type"));
    worker_op_t *op = worker_out_op(d, WORKER_OP_MESSAGE, NULL);

    op->u.msg.topic = topic;
    op->u.msg.type = dup_or_null(type);
    op->u.msg.headers = headers_json(type, traceparent);
    op->u.msg.key = dup_or_null(sg_json_string(sg_json_member(msg, "saga_id")));
    op->saga_id = op->u.msg.key;
    op->u.msg.payload = capped_text(msg, d->rules->max_outgoing);
    op->u.msg.delay_ms = delay_ms;
    op->u.msg.step = op->u.msg.attempt = op->u.msg.generation = -1;
    return op;
}

void worker_out_event(worker_dc_t *d, worker_saga_t *saga, const char *type, sg_json_t *body)
{
    char id[SG_SAGA_ID_MAX + 32], now[40];
    sg_json_t *ev;

    saga->seq++;
    saga->dirty = true;
    snprintf(id, sizeof(id), "evt:%s:%lld", saga->saga_id, (long long)saga->seq);
    sg_time_iso(now, sizeof(now), d->in->now_ms);
    ev = worker_out_message_new(type, id, saga->saga_id);
    sg_json_add_int(ev, "seq", saga->seq);
    sg_json_add_str(ev, "time", now);
    sg_json_move_members(ev, body);
    sg_json_destroy(body);
    worker_out_emit(d, d->rules->topic_events, saga->traceparent, ev, 0);
}

/* The id of saga's step.execute (step.compensate) of step for attempt, in
 * its present generation: cmd:<saga>:<step>:f|c:g<gen>:a<attempt>. */
static void command_id(char *id, size_t size, const worker_saga_t *saga, int step, bool compensate,
                       int attempt)
{
    snprintf(id, size, "cmd:%s:%d:%s:g%d:a%d", saga->saga_id, step, compensate ? "c" : "f",
             saga->generation, attempt);
}

void worker_follow_make(worker_follow_t *f, const worker_saga_t *saga, int step, bool compensate,
                        int attempt)
{
    f->set = true;
    f->type = compensate ? SG_CMD_COMPENSATE : SG_CMD_EXECUTE;
    f->step = step;
    f->attempt = attempt;
    f->generation = saga->generation;
    command_id(f->id, sizeof(f->id), saga, step, compensate, attempt);
}

/* The step command's message, emitted. */
static void emit_command(worker_dc_t *d, worker_saga_t *saga, int step, bool compensate,
                         int attempt, int64_t delay_ms)
{
    char id[sizeof(((worker_follow_t *)0)->id)];
    worker_op_t *op;
    sg_json_t *c;

    command_id(id, sizeof(id), saga, step, compensate, attempt);
    c = worker_out_message_new(compensate ? "step.compensate" : "step.execute", id, saga->saga_id);
    sg_json_add_int(c, "step", step);
    sg_json_add_int(c, "attempt", attempt);
    sg_json_add_int(c, "generation", saga->generation);
    op = worker_out_emit(d, d->rules->topic_internal, saga->traceparent, c, delay_ms);
    op->u.msg.step = step;
    op->u.msg.attempt = attempt;
    op->u.msg.generation = saga->generation;
    op->u.msg.compensate = compensate;
}

void worker_out_command(worker_dc_t *d, worker_saga_t *saga, int step, bool compensate, int attempt,
                        int64_t delay_ms)
{
    emit_command(d, saga, step, compensate, attempt, delay_ms);
    /* Sent now: the loop may chain it (run it in this transaction); not a
     * group member's forward command here (a retry without a wait
     * included): a chained call holds its saga's queue, and only the
     * members a group starts together are chained, side by side
     * (worker_out_run_step). */
    if (d->rules->chain && delay_ms <= 0 && !d->out->follow.set &&
        (compensate || !saga->steps[step].group))
        worker_follow_make(&d->out->follow, saga, step, compensate, attempt);
}

void worker_out_run_step(worker_dc_t *d, worker_saga_t *saga, int idx)
{
    int last;

    if (!saga->steps[idx].group) {
        worker_out_command(d, saga, idx, false, 1, 0);
        return;
    }
    last = worker_group_last(saga, idx);
    for (int j = worker_group_first(saga, idx); j <= last; j++) {
        if (saga->steps[j].status != WORKER_STEP_PENDING)
            continue;
        emit_command(d, saga, j, false, 1, 0);
        if (d->rules->chain && d->out->nmembers < SG_GROUP_MAX_MEMBERS)
            d->out->members[d->out->nmembers++] = (int16_t)j;
    }
}

sg_json_t *worker_out_step_body(const worker_step_t *st)
{
    sg_json_t *b = sg_json_new_object();

    sg_json_add_int(b, "step", st->idx);
    sg_json_add_str(b, "step_name", st->name);
    if (st->group)
        sg_json_add_str(b, "group", st->group);
    return b;
}

void worker_out_add_error(sg_json_t *b, const sg_err_t *err)
{
    sg_json_add_str(b, "error_code", err->code);
    sg_json_add_str(b, "error_class", sg_errclass_name(err->cls));
    sg_json_add_str(b, "message", err->message);
}

char *worker_out_agent_action(worker_dc_t *d, const sg_err_t *err)
{
    const worker_result_t *r = d->cmd->result;
    const char *def = sg_err_agent_action(err->code);
    char *found = NULL;

    if (d->in->returned && r->status != WORKER_OK && r->data) {
        sg_json_t *doc = sg_json_parse(r->data, strlen(r->data), NULL, NULL);
        const char *a = sg_json_string(sg_json_member(doc, "agent_action"));
        if (a && *a)
            found = sg_xstrdup(a);
        sg_json_destroy(doc);
    }
    return found ? found : dup_or_null(def);
}

void worker_out_rows(worker_dc_t *d, worker_saga_t *saga)
{
    worker_op_t *op;

    for (int i = 0; i < saga->nsteps; i++) {
        worker_step_t *st = &saga->steps[i];
        if (!st->dirty)
            continue;
        op = worker_out_op(d, WORKER_OP_STEP, saga->saga_id);
        op->u.step.idx = i;
        op->u.step.status = st->status;
        op->u.step.attempts = st->attempts;
        op->u.step.comp_attempts = st->comp_attempts;
        op->u.step.result = dup_or_null(st->result);
        op->u.step.error_code = dup_or_null(st->error_code[0] ? st->error_code : NULL);
        op->u.step.idem_key = dup_or_null(st->idem_key);
        op->u.step.effect = st->effect;
        op->u.step.agent_action = dup_or_null(st->action);
        op->u.step.done_seq = st->done_seq;
        op->u.step.comp_key_generation = st->comp_key_generation;
        op->u.step.calling = st->calling;
        op->u.step.slot = &st->slot;
        st->dirty = false;
        st->result = NULL;
        st->idem_key = NULL;
        st->effect = NULL;
        st->action = NULL;
    }
    if (!saga->dirty)
        return;
    op = worker_out_op(d, WORKER_OP_SAGA, saga->saga_id);
    op->u.saga.status = saga->status;
    op->u.saga.from = saga->status_written;
    saga->status_written = saga->status;
    op->u.saga.seq = saga->seq;
    op->u.saga.retry_spent = saga->retry_spent;
    op->u.saga.output = saga->output; /* taken: resolve_output made it */
    saga->output = NULL;
    op->u.saga.slot = &saga->slot;
    saga->dirty = false;
}

/* The tool a dead letter names: the step's, or its compensation's. */
static char *dead_tool(const worker_step_t *st, bool compensate)
{
    const char *tool = st->tool;
    sg_json_t *comp = NULL;
    char *out;

    if (compensate && st->comp) {
        comp = sg_json_parse(st->comp, strlen(st->comp), NULL, NULL);
        if (comp)
            sg_json_get_str(comp, "$", "tool", false, &tool, NULL);
    }
    out = dup_or_null(tool);
    sg_json_destroy(comp);
    return out;
}

/* The saga's steps as the decision leaves them, for its dead letter
 * (dead_letters.steps_at): what had completed when it was written. */
static char *steps_at(const worker_saga_t *saga)
{
    sg_json_t *list = sg_json_new_array();
    char *text;

    for (int i = 0; i < saga->nsteps; i++) {
        const worker_step_t *st = &saga->steps[i];
        const char *key = st->idem_key ? st->idem_key : st->forward_key;
        sg_json_t *e = sg_json_new_object();
        sg_json_add_int(e, "step", i);
        sg_json_add_str(e, "name", st->name);
        sg_json_add_str(e, "tool", st->tool);
        sg_json_add_str(e, "status", worker_step_status_name(st->status));
        sg_json_add_int(e, "attempts", st->attempts);
        sg_json_add_int(e, "comp_attempts", st->comp_attempts);
        if (key)
            sg_json_add_str(e, "idempotency_key", key);
        else
            sg_json_add_null(e, "idempotency_key");
        if (st->error_code[0])
            sg_json_add_str(e, "error_code", st->error_code);
        else
            sg_json_add_null(e, "error_code");
        sg_json_append(list, e);
    }
    text = sg_json_print(list);
    sg_json_destroy(list);
    return text;
}

void worker_out_dead_letter(worker_dc_t *d, worker_saga_t *saga, int step, bool compensate,
                            const sg_err_t *err, const char *held_until)
{
    const worker_dcmd_t *cmd = d->cmd;
    const worker_step_t *st = saga && step >= 0 ? &saga->steps[step] : NULL;
    worker_op_t *op;

    op = worker_out_op(d, WORKER_OP_DEAD_LETTER,
                       saga ? saga->saga_id : (cmd->dec->saga_id[0] ? cmd->dec->saga_id : NULL));
    op->u.dead.step = st ? step : -1;
    op->u.dead.compensate = compensate;
    op->u.dead.generation = saga ? saga->generation : cmd->dec->generation;
    op->u.dead.err = sg_xmalloc(sizeof(*err));
    *op->u.dead.err = *err;
    op->u.dead.has_saga = saga != NULL;
    op->u.dead.steps_at = saga ? steps_at(saga) : NULL;
    op->u.dead.saga_name = saga ? saga->name : NULL;
    /* A rejected submission has no saga row, but its document names it. */
    if (!saga && cmd->dec->type == SG_CMD_START)
        op->u.dead.saga_name = sg_json_string(sg_json_member(cmd->dec->doc, "name"));
    op->u.dead.step_name = st ? st->name : NULL;
    op->u.dead.tool = st ? dead_tool(st, compensate) : NULL;
    op->u.dead.traceparent = saga ? saga->traceparent : NULL;
    op->u.dead.agent_action = d->action && d->action_step == step ? sg_xstrdup(d->action)
                                                                  : worker_out_agent_action(d, err);
    d->out->stats.dead_letters++;
    d->out->decided = "dead_lettered";
    worker_out_count(d, SG_M_DEAD_LETTERS, SG_LABELS(err->code));
    if (saga) {
        sg_json_t *b = st ? worker_out_step_body(st) : sg_json_new_object();
        worker_out_add_error(b, err);
        if (op->u.dead.agent_action)
            sg_json_add_str(b, "agent_action", op->u.dead.agent_action);
        if (held_until)
            sg_json_add_str(b, "held_until", held_until);
        worker_out_event(d, saga, "saga.dead_lettered", b);
    }
}

void worker_out_stale(worker_dc_t *d, const char *why)
{
    worker_out_ignored(d, "duplicate or stale command, no effect", why);
}

void worker_out_ignored(worker_dc_t *d, const char *what, const char *why)
{
    const worker_dcmd_t *cmd = d->cmd;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    d->out->stats.stale++;
    d->out->decided = "ignored";
    worker_out_count(d, SG_M_DUPLICATES_IGNORED,
                     SG_LABELS(d->in->returned ? "outcome" : "command"));
    ctx.saga_id = cmd->dec->saga_id;
    ctx.step = cmd->call->step_name;
    ctx.attempt = cmd->dec->attempt;
    ctx.partition = d->in->partition;
    ctx.offset = cmd->offset;
    worker_out_log(d, SG_LOG_INFO, &ctx, "%s: %s", what, why);
}

void worker_fresh_free(worker_fresh_t *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->ntexts; i++)
        free(f->texts[i]);
    sg_json_destroy(f->steps);
    free(f);
}

void worker_call_free(worker_call_t *call)
{
    free(call->saga_id);
    free(call->step_name);
    free(call->idem_key);
    free(call->traceparent);
    sg_json_destroy(call->args);
    sg_json_destroy(call->input);
    sg_json_destroy(call->forward);
    memset(call, 0, sizeof(*call));
}

static void op_free(worker_op_t *op)
{
    switch (op->kind) {
    case WORKER_OP_SAGA_NEW:
        free(op->u.saga_new.metadata);
        free(op->u.saga_new.steps);
        free(op->u.saga_new.def_owned);
        break;
    case WORKER_OP_ATTEMPT:
    case WORKER_OP_INTERRUPTED:
        free(op->u.attempt.idem_key);
        free(op->u.attempt.args);
        break;
    case WORKER_OP_ATTEMPT_DONE:
        free(op->u.done.error_code);
        free(op->u.done.envelope);
        break;
    case WORKER_OP_STEP:
        free(op->u.step.result);
        free(op->u.step.error_code);
        free(op->u.step.idem_key);
        free(op->u.step.agent_action);
        break;
    case WORKER_OP_SAGA:
        free(op->u.saga.output);
        break;
    case WORKER_OP_MESSAGE:
        free(op->u.msg.key);
        free(op->u.msg.type);
        free(op->u.msg.headers);
        free(op->u.msg.payload);
        break;
    case WORKER_OP_DEAD_LETTER:
        free(op->u.dead.tool);
        free(op->u.dead.err);
        free(op->u.dead.agent_action);
        free(op->u.dead.steps_at);
        break;
    case WORKER_OP_LOG:
        free(op->u.log.text);
        free(op->u.log.error_code);
        break;
    case WORKER_OP_METRIC:
        for (int i = 0; i < 3; i++)
            free(op->u.metric.labels[i]);
        break;
    case WORKER_OP_CONTROL:
        free(op->u.control.error_code);
        break;
    }
}

void worker_outcome_free(worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++)
        op_free(&out->ops[i]);
    free(out->ops);
    worker_call_free(&out->call);
    worker_fresh_free(out->fresh);
    memset(out, 0, sizeof(*out));
}

sg_json_t *worker_run_health(const worker_saga_t *saga)
{
    sg_json_t *h = sg_json_new_object(), *block = NULL;
    int ok = 0, failed = 0, comp = 0, skipped = 0, unknown = 0, partial = 0;

    for (int i = 0; i < saga->nsteps; i++) {
        const worker_step_t *st = &saga->steps[i];
        if (st->policy == WORKER_POLICY_BEST_EFFORT &&
            (st->status == WORKER_STEP_FAILED || st->status == WORKER_STEP_UNKNOWN ||
             ((st->status == WORKER_STEP_COMPENSATED ||
               st->status == WORKER_STEP_COMPENSATION_FAILED) &&
              saga->status == WORKER_SAGA_COMPLETED && st->done_effect &&
              strcmp(st->done_effect, "possible") == 0))) {
            /* a best_effort member's failure stops nothing (one that ended
             * unknown was undone before its saga went on) */
            partial++;
        } else if (st->status == WORKER_STEP_SUCCEEDED) {
            ok++;
        } else if (st->status == WORKER_STEP_COMPENSATED) {
            comp++;
        } else if (st->status == WORKER_STEP_SKIPPED) {
            skipped++;
        } else if (st->status == WORKER_STEP_FAILED || st->status == WORKER_STEP_UNKNOWN ||
                   st->status == WORKER_STEP_COMPENSATION_FAILED) {
            if (st->status == WORKER_STEP_UNKNOWN)
                unknown++;
            else
                failed++;
            if (!block || st->status == WORKER_STEP_COMPENSATION_FAILED) {
                sg_json_destroy(block);
                block = worker_out_step_body(st);
                sg_json_add_str(block, "status", worker_step_status_name(st->status));
                if (st->error_code[0])
                    sg_json_add_str(block, "error_code", st->error_code);
            }
        }
    }
    sg_json_add_int(h, "steps_total", saga->nsteps);
    sg_json_add_int(h, "ok", ok);
    sg_json_add_int(h, "failed", failed);
    sg_json_add_int(h, "compensated", comp);
    sg_json_add_int(h, "skipped", skipped);
    sg_json_add_int(h, "unknown", unknown);
    if (partial)
        sg_json_add_int(h, "partial", partial);
    if (block)
        sg_json_add_node(h, "blocking_failure", block);
    else
        sg_json_add_null(h, "blocking_failure");
    return h;
}

worker_op_t *worker_out_control(worker_dc_t *d, const worker_saga_t *saga, int step,
                                const char *outcome, const char *error_code)
{
    const worker_dcmd_t *cmd = d->cmd;
    worker_op_t *op = worker_out_op(d, WORKER_OP_CONTROL, saga->saga_id);

    op->u.control.command = sg_json_string(sg_json_member(cmd->dec->doc, "type"));
    op->u.control.command_id = sg_json_string(sg_json_member(cmd->dec->doc, "id"));
    op->u.control.by = cmd->dec->by;
    op->u.control.principal = cmd->dec->as;
    op->u.control.reason = cmd->dec->reason;
    op->u.control.step = step;
    op->u.control.outcome = outcome;
    op->u.control.error_code = dup_or_null(error_code);
    return op;
}

/* The members of a control command every answer repeats: which command,
 * its id, who asked. */
static void add_command(const worker_dcmd_t *cmd, sg_json_t *body)
{
    const char *type = sg_json_string(sg_json_member(cmd->dec->doc, "type"));
    const char *id = sg_json_string(sg_json_member(cmd->dec->doc, "id"));

    sg_json_add_str(body, "command", type ? type : "?");
    if (id)
        sg_json_add_str(body, "command_id", id);
    if (cmd->dec->by)
        sg_json_add_str(body, "by", cmd->dec->by);
}

void worker_out_refused(worker_dc_t *d, worker_saga_t *saga, const worker_step_t *st,
                        const sg_err_t *err)
{
    const worker_dcmd_t *cmd = d->cmd;
    sg_json_t *b = sg_json_new_object();
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    add_command(cmd, b);
    sg_json_add_str(b, "error_code", err->code);
    sg_json_add_str(b, "error_class", sg_errclass_name(err->cls));
    sg_json_add_str(b, "message", err->message);
    ctx.saga_id = cmd->dec->saga_id;
    ctx.error_code = err->code;
    worker_out_log(d, SG_LOG_INFO, &ctx, "control command refused: %s", err->message);
    d->out->decided = "refused";
    if (saga) {
        bool done = worker_saga_finished(saga->status);
        sg_json_add_str(b, "status", worker_saga_status_name(saga->status));
        if (st) {
            sg_json_add_int(b, "step", st->idx);
            sg_json_add_str(b, "step_name", st->name);
            sg_json_add_str(b, "step_status", worker_step_status_name(st->status));
        }
        if (done)
            sg_json_add_node(b, "run_health", worker_run_health(saga));
        worker_out_control(d, saga, st ? st->idx : -1, "refused", err->code);
        worker_out_event(d, saga, "saga.command_refused", b);
        worker_out_rows(d, saga);
    } else {
        /* No saga, no event stream: seq 0, like saga.rejected; the id is
         * the command message's place, so a redelivery says it again under
         * the same id. */
        char id[SG_SAGA_ID_MAX + 64], now[40];
        sg_json_t *ev;
        snprintf(id, sizeof(id), "evt:%s:refused:%d:%lld", cmd->dec->saga_id, (int)d->in->partition,
                 (long long)cmd->offset);
        sg_time_iso(now, sizeof(now), d->in->now_ms);
        ev = worker_out_message_new("saga.command_refused", id, cmd->dec->saga_id);
        sg_json_add_int(ev, "seq", 0);
        sg_json_add_str(ev, "time", now);
        sg_json_move_members(ev, b);
        sg_json_destroy(b);
        worker_out_emit(d, d->rules->topic_events, NULL, ev, 0);
    }
}
