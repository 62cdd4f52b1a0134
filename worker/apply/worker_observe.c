/* The saga's spans, its error and partial-saga counters and the trace
 * context of its log lines, read from a decision's outcome by the apply
 * (worker_observe.h).  Runs on the loop thread only. */
#include "worker_observe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_run.h"

/* Starts of open spans, and the delays scheduled before attempts, by id:
 * a direct-mapped table, so memory is fixed and an old entry is simply
 * overwritten (its span then starts at its end). */
#define CACHE_SIZE 32768

typedef struct cache_ent_s {
    uint64_t key;
    int64_t value;
} cache_ent_t;

#define MAX_NAMES 64

struct worker_observe_s {
    sg_otel_t *otel;
    cache_ent_t *cache;     /* NULL when tracing is off */
    char *names[MAX_NAMES]; /* metrics.saga_names; none: every name */
    int nnames;
};

/* The ids of one saga's spans. */
typedef struct saga_ctx_s {
    const char *id;
    sg_trace_id_t trace;
    uint64_t link_span; /* the producer's span, 0: none */
    bool sampled;
    int generation;
} saga_ctx_t;

static void cache_put(worker_observe_t *ob, uint64_t key, int64_t value)
{
    cache_ent_t *e = &ob->cache[key & (CACHE_SIZE - 1)];

    e->key = key;
    e->value = value;
}

static bool cache_take(worker_observe_t *ob, uint64_t key, int64_t *value)
{
    cache_ent_t *e = &ob->cache[key & (CACHE_SIZE - 1)];

    if (e->key != key)
        return false;
    *value = e->value;
    e->key = 0;
    return true;
}

static bool cache_has(const worker_observe_t *ob, uint64_t key)
{
    return ob->cache[key & (CACHE_SIZE - 1)].key == key;
}

static bool tracing;

bool worker_observe_tracing(void)
{
    return tracing;
}

worker_observe_t *worker_observe_new(sg_otel_t *otel, const sg_config_t *cfg, char *errstr,
                                     size_t errstr_size)
{
    worker_observe_t *ob = sg_xcalloc(1, sizeof(*ob));
    char *list = sg_xstrdup(sg_config_str(cfg, "metrics.saga_names")), *save = NULL;

    for (char *n = strtok_r(list, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
        while (*n == ' ')
            n++;
        for (char *e = n + strlen(n); e > n && e[-1] == ' ';)
            *--e = '\0';
        if (!*n)
            continue;
        if (ob->nnames == MAX_NAMES || !sg_name_ok(n)) {
            snprintf(errstr, errstr_size,
                     "metrics.saga_names: must list at most %d saga names, comma-separated, each "
                     "a valid name ('%s' is not accepted)",
                     MAX_NAMES, n);
            free(list);
            worker_observe_free(ob);
            return NULL;
        }
        ob->names[ob->nnames++] = sg_xstrdup(n);
    }
    free(list);
    ob->otel = otel;
    if (otel)
        ob->cache = sg_xcalloc(CACHE_SIZE, sizeof(*ob->cache));
    tracing = otel != NULL;
    return ob;
}

void worker_observe_free(worker_observe_t *ob)
{
    if (!ob)
        return;
    for (int i = 0; i < ob->nnames; i++)
        free(ob->names[i]);
    if (ob->otel)
        tracing = false;
    free(ob->cache);
    free(ob);
}

/* ---- ids ------------------------------------------------------------------- */

/* Appends the decimal digits of v at p; returns the end. */
static char *put_int(char *p, int v)
{
    char tmp[12];
    int n = 0;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;

    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *p++ = '-';
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* The id of the text "kind|saga|g<gen>|<step>|c or f|<attempt>", written
 * by hand: snprintf here was a tenth of tracing's cost on the loop. */
static uint64_t span_id(const char *kind, const char *saga_id, int gen, int step, bool comp,
                        int attempt)
{
    char text[SG_SAGA_ID_MAX + 96], *p = text;
    size_t klen = strlen(kind), slen = strnlen(saga_id, SG_SAGA_ID_MAX);

    memcpy(p, kind, klen);
    p += klen;
    *p++ = '|';
    memcpy(p, saga_id, slen);
    p += slen;
    *p++ = '|';
    *p++ = 'g';
    p = put_int(p, gen);
    *p++ = '|';
    p = put_int(p, step);
    *p++ = '|';
    *p++ = comp ? 'c' : 'f';
    *p++ = '|';
    p = put_int(p, attempt);
    *p = '\0';
    return sg_otel_id64(text);
}

static uint64_t saga_span(const saga_ctx_t *s)
{
    return sg_otel_saga_span_id(s->id);
}

static uint64_t step_span(const saga_ctx_t *s, int step, bool comp)
{
    return span_id("step", s->id, s->generation, step, comp, 0);
}

static uint64_t chain_span(const saga_ctx_t *s)
{
    return span_id("compensation", s->id, s->generation, -1, true, 0);
}

static uint64_t attempt_span(const saga_ctx_t *s, int step, bool comp, int attempt)
{
    return span_id("attempt", s->id, s->generation, step, comp, attempt);
}

/* The key under which the delay before an attempt waits. */
static uint64_t delay_key(uint64_t attempt_span_id)
{
    return attempt_span_id ^ 0x5deece66dULL;
}

/* The trace of a saga: its traceparent's (the producer's, or the one the
 * worker drew at saga.start), else one derived from its id. */
static void saga_ctx(const worker_observe_t *ob, const char *saga_id, const char *traceparent,
                     int generation, saga_ctx_t *s)
{
    uint64_t span = 0;

    memset(s, 0, sizeof(*s));
    s->id = saga_id;
    s->generation = generation;
    if (sg_otel_parse_traceparent(traceparent, &s->trace, &span, NULL) == 0) {
        s->link_span = span;
    } else {
        char text[SG_SAGA_ID_MAX + 8];
        uint64_t hi, lo;
        snprintf(text, sizeof(text), "trace|%s", saga_id);
        hi = sg_otel_id64(text);
        lo = sg_otel_id64(saga_id);
        for (int i = 0; i < 8; i++) {
            s->trace.b[i] = (uint8_t)(hi >> (56 - 8 * i));
            s->trace.b[8 + i] = (uint8_t)(lo >> (56 - 8 * i));
        }
    }
    s->sampled = sg_otel_sampled(ob->otel, &s->trace);
}

/* ---- spans ----------------------------------------------------------------- */

typedef struct obs_s {
    worker_observe_t *ob;
    worker_t *w;
    const worker_cmd_t *cmd;
    const worker_saga_t *saga;
    saga_ctx_t s;
    int64_t now;
} obs_t;

/* A span that ends now, begun when its start was put in the cache. */
static sg_span_t *ending(obs_t *o, uint64_t id, uint64_t parent, const char *name,
                         sg_span_kind_t kind)
{
    int64_t start;
    bool known = cache_take(o->ob, id, &start);
    sg_span_t *span =
        sg_span_new(&o->s.trace, id, parent, name, kind, known ? start : o->now, o->now);

    sg_span_str(span, "sagad.saga_id", o->s.id);
    if (!known)
        sg_span_int(span, "sagad.start_unknown", 1);
    return span;
}

static const char *step_name(const obs_t *o, int idx)
{
    if (o->saga && idx >= 0 && idx < o->saga->nsteps && o->saga->steps[idx].name)
        return o->saga->steps[idx].name;
    return "?";
}

/* "host" of an http tool's URL, for server.address. */
static void url_host(const char *url, char *out, size_t size)
{
    const char *p = strstr(url ? url : "", "://"), *end;

    out[0] = '\0';
    if (!p)
        return;
    p += 3;
    if (strchr(p, '@') && strchr(p, '@') < p + strcspn(p, "/"))
        p = strchr(p, '@') + 1;
    end = p + strcspn(p, ":/?#");
    snprintf(out, size, "%.*s", (int)(end - p), p);
}

static void attempt_attrs(obs_t *o, sg_span_t *span, const worker_call_t *call)
{
    const sg_tool_t *tool = call->tool;
    char hash[17];

    sg_span_str(span, "sagad.step", step_name(o, call->step_idx));
    sg_span_str(span, "sagad.phase", call->compensate ? "compensate" : "forward");
    sg_span_int(span, "sagad.attempt_number", call->attempt);
    sg_span_int(span, "sagad.generation", call->generation);
    if (tool) {
        sg_span_str(span, "sagad.tool", tool->name);
        sg_span_str(span, "sagad.adapter", tool->kind ? tool->kind->name : NULL);
        if (tool->kind && strcmp(tool->kind->name, "http") == 0) {
            char host[256];
            url_host(tool->target, host, sizeof(host));
            sg_span_str(span, "http.request.method", "POST");
            sg_span_str(span, "server.address", host);
        }
    }
    if (call->idem_key) {
        sg_otel_span_hex(hash, sizeof(hash), sg_otel_id64(call->idem_key));
        sg_span_str(span, "sagad.idempotency_key_hash", hash);
    }
}

/* The attempt whose call returned: from the call's hand-over to the pool
 * for its latency. */
static void end_attempt(obs_t *o, const worker_op_t *op)
{
    const worker_call_t *call = &o->cmd->call;
    uint64_t id = attempt_span(&o->s, call->step_idx, call->compensate, call->attempt);
    uint64_t parent = step_span(&o->s, call->step_idx, call->compensate);
    const sg_tool_t *tool = call->tool;
    bool external = tool && tool->kind && strcmp(tool->kind->name, "builtin") != 0;
    char name[160];
    int64_t start, delay;
    sg_span_t *span;

    snprintf(name, sizeof(name), "attempt %s #%d", tool ? tool->name : "?", call->attempt);
    /* The row's write time is in the cache; the call itself began when
     * the pool took it, call_t0 on the monotonic clock. */
    if (!cache_take(o->ob, id, &start))
        start = o->now - op->u.done.latency_ms * 1000000LL;
    if (o->cmd->call_t0) {
        int64_t ago = (int64_t)(sg_run_now_us() - o->cmd->call_t0) * 1000;
        if (o->now - ago > start)
            start = o->now - ago;
    }
    span = sg_span_new(&o->s.trace, id, parent, name, external ? SG_SPAN_CLIENT : SG_SPAN_INTERNAL,
                       start, start + op->u.done.latency_ms * 1000000LL);
    sg_span_str(span, "sagad.saga_id", o->s.id);
    attempt_attrs(o, span, call);
    if (cache_take(o->ob, delay_key(id), &delay))
        sg_span_int(span, "sagad.delay_ms", delay);
    if (op->u.done.status != WORKER_OK) {
        char msg[160];
        sg_span_str(span, "error.type", op->u.done.error_code);
        sg_span_str(span, "sagad.error_code", op->u.done.error_code);
        sg_span_str(span, "sagad.error_class", sg_errclass_name(op->u.done.cls));
        snprintf(msg, sizeof(msg), "%s (%s)", op->u.done.error_code ? op->u.done.error_code : "?",
                 sg_errclass_name(op->u.done.cls));
        sg_span_error(span, msg);
    }
    sg_span_list_add(o->w->spans, span);
}

/* A status a step's phase ends in: its span ends, its outcome is counted
 * (unknown: its last attempt may have taken effect). */
static bool step_ended(worker_step_status_t st)
{
    return st == WORKER_STEP_SUCCEEDED || st == WORKER_STEP_FAILED || st == WORKER_STEP_UNKNOWN ||
           st == WORKER_STEP_COMPENSATED || st == WORKER_STEP_COMPENSATION_FAILED;
}

static void end_step(obs_t *o, const worker_op_t *op)
{
    bool comp = op->u.step.status == WORKER_STEP_COMPENSATED ||
                op->u.step.status == WORKER_STEP_COMPENSATION_FAILED;
    int idx = op->u.step.idx;
    uint64_t id = step_span(&o->s, idx, comp);
    char name[160];
    sg_span_t *span;

    snprintf(name, sizeof(name), "%s %s", comp ? "compensate" : "step", step_name(o, idx));
    span = ending(o, id, comp ? chain_span(&o->s) : saga_span(&o->s), name, SG_SPAN_INTERNAL);
    sg_span_str(span, "sagad.step", step_name(o, idx));
    sg_span_int(span, "sagad.step_index", idx);
    sg_span_str(span, "sagad.outcome", worker_step_status_name(op->u.step.status));
    sg_span_int(span, "sagad.attempts", comp ? op->u.step.comp_attempts : op->u.step.attempts);
    if (op->u.step.status == WORKER_STEP_FAILED || op->u.step.status == WORKER_STEP_UNKNOWN ||
        op->u.step.status == WORKER_STEP_COMPENSATION_FAILED) {
        sg_span_str(span, "sagad.error_code", op->u.step.error_code);
        sg_span_error(span, op->u.step.error_code);
    }
    sg_span_list_add(o->w->spans, span);
}

static void end_saga(obs_t *o, worker_saga_status_t st)
{
    const char *status = worker_saga_status_name(st);
    char name[160];
    sg_span_t *span;

    if (st != WORKER_SAGA_COMPLETED) {
        span = ending(o, chain_span(&o->s), saga_span(&o->s), "compensation", SG_SPAN_INTERNAL);
        sg_span_str(span, "sagad.outcome", status);
        if (st == WORKER_SAGA_FAILED)
            sg_span_error(span, "a compensation could not be done");
        sg_span_list_add(o->w->spans, span);
    }
    snprintf(name, sizeof(name), "saga %s", o->saga && o->saga->name ? o->saga->name : "?");
    span = ending(o, saga_span(&o->s), 0, name, SG_SPAN_CONSUMER);
    if (o->saga && o->saga->name)
        sg_span_str(span, "sagad.saga", o->saga->name);
    sg_span_str(span, "sagad.outcome", status);
    sg_span_str(span, "messaging.system", "kafka");
    sg_span_str(span, "messaging.destination.name", o->w->topic_commands);
    sg_span_str(span, "messaging.operation.type", "process");
    if (o->s.link_span)
        sg_span_link(span, &o->s.trace, o->s.link_span);
    if (st == WORKER_SAGA_FAILED)
        sg_span_error(span, "saga failed: needs an operator");
    sg_span_list_add(o->w->spans, span);
}

static void dead_letter_span(obs_t *o, const worker_op_t *op)
{
    uint64_t parent = op->u.dead.step >= 0
                          ? step_span(&o->s, op->u.dead.step, op->u.dead.compensate)
                          : saga_span(&o->s);
    char key[64];
    sg_span_t *span;

    snprintf(key, sizeof(key), "dead_letter|%lld", (long long)o->cmd->offset);
    span = sg_span_new(
        &o->s.trace,
        span_id(key, o->s.id, o->s.generation, op->u.dead.step, op->u.dead.compensate, 0), parent,
        "dead_letter", SG_SPAN_PRODUCER, o->now, o->now);
    sg_span_str(span, "sagad.saga_id", o->s.id);
    sg_span_str(span, "messaging.system", "kafka");
    sg_span_str(span, "messaging.destination.name", o->w->topic_dlq);
    sg_span_str(span, "messaging.operation.type", "send");
    sg_span_str(span, "error.type", op->u.dead.err->code);
    sg_span_str(span, "sagad.error_code", op->u.dead.err->code);
    sg_span_str(span, "sagad.error_class", sg_errclass_name(op->u.dead.err->cls));
    if (op->u.dead.step_name)
        sg_span_str(span, "sagad.step", op->u.dead.step_name);
    sg_span_error(span, op->u.dead.err->code);
    sg_span_list_add(o->w->spans, span);
}

/* The saga's row op changed its status to one that ends the saga (and
 * its span). */
static bool saga_ended(const worker_op_t *op)
{
    worker_saga_status_t st = op->u.saga.status;

    return op->u.saga.from != st && (st == WORKER_SAGA_COMPLETED || st == WORKER_SAGA_COMPENSATED ||
                                     st == WORKER_SAGA_FAILED || st == WORKER_SAGA_CANCELLED);
}

/* ... to one that starts undoing it (a compensation, or a cancel's). */
static bool saga_undoing(const worker_op_t *op)
{
    worker_saga_status_t st = op->u.saga.status;

    return op->u.saga.from != st &&
           (st == WORKER_SAGA_COMPENSATING || st == WORKER_SAGA_CANCELLING);
}

/* A delayed step command (a retry): the delay its attempt's span notes. */
static void on_message(obs_t *o, const worker_op_t *op)
{
    if (op->u.msg.delay_ms > 0 && op->u.msg.step >= 0)
        cache_put(
            o->ob,
            delay_key(attempt_span(&o->s, op->u.msg.step, op->u.msg.compensate, op->u.msg.attempt)),
            op->u.msg.delay_ms);
}

/* The saga's row: the start of its undoing, or its end, taken from the
 * typed status change (a decision writes the row once, with every change
 * since the last write; one that went from running to compensated at once
 * ends the compensation span where it starts). */
static void on_saga(obs_t *o, const worker_op_t *op)
{
    if (saga_undoing(op))
        cache_put(o->ob, chain_span(&o->s), o->now);
    else if (saga_ended(op))
        end_saga(o, op->u.saga.status);
}

static void on_attempt(obs_t *o, const worker_op_t *op)
{
    int step = op->u.attempt.step;
    bool comp = op->u.attempt.compensate;
    uint64_t st = step_span(&o->s, step, comp);

    if (!cache_has(o->ob, st))
        cache_put(o->ob, st, o->now);
    cache_put(o->ob, attempt_span(&o->s, step, comp, op->u.attempt.attempt), o->now);
}

static void trace_ops(obs_t *o, worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        switch (op->kind) {
        case WORKER_OP_SAGA_NEW:
            cache_put(o->ob, saga_span(&o->s), o->now);
            break;
        case WORKER_OP_ATTEMPT:
            on_attempt(o, op);
            break;
        case WORKER_OP_ATTEMPT_DONE:
            end_attempt(o, op);
            break;
        case WORKER_OP_STEP:
            if (step_ended(op->u.step.status))
                end_step(o, op);
            break;
        case WORKER_OP_MESSAGE:
            on_message(o, op);
            break;
        case WORKER_OP_SAGA:
            on_saga(o, op);
            break;
        case WORKER_OP_DEAD_LETTER:
            dead_letter_span(o, op);
            break;
        default:
            break;
        }
    }
}

/* The queue is full (the collector is slow or down): the spans that end
 * here would be dropped, so they are not built, only counted; the starts
 * and delays they would have used are let go all the same. */
static size_t skip_ops(obs_t *o, const worker_outcome_t *out)
{
    size_t n = 0;
    int64_t v;

    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        const worker_call_t *c = &o->cmd->call;
        switch (op->kind) {
        case WORKER_OP_ATTEMPT_DONE: {
            uint64_t id = attempt_span(&o->s, c->step_idx, c->compensate, c->attempt);
            cache_take(o->ob, id, &v);
            cache_take(o->ob, delay_key(id), &v);
            n++;
            break;
        }
        case WORKER_OP_STEP:
            if (step_ended(op->u.step.status)) {
                bool comp = op->u.step.status == WORKER_STEP_COMPENSATED ||
                            op->u.step.status == WORKER_STEP_COMPENSATION_FAILED;
                cache_take(o->ob, step_span(&o->s, op->u.step.idx, comp), &v);
                n++;
            }
            break;
        case WORKER_OP_SAGA:
            if (saga_ended(op)) {
                cache_take(o->ob, saga_span(&o->s), &v);
                n++;
                if (op->u.saga.status != WORKER_SAGA_COMPLETED) {
                    cache_take(o->ob, chain_span(&o->s), &v);
                    n++;
                }
            }
            break;
        case WORKER_OP_DEAD_LETTER:
            n++;
            break;
        default:
            break;
        }
    }
    return n;
}

/* The saga an outcome is about: its loaded row, or the one it creates. */
static bool outcome_saga(const worker_observe_t *ob, const worker_cmd_t *cmd,
                         const worker_saga_t *saga, const worker_outcome_t *out, saga_ctx_t *s)
{
    if (saga) {
        saga_ctx(ob, saga->saga_id, saga->traceparent, saga->generation, s);
        return true;
    }
    for (size_t i = 0; i < out->n; i++)
        if (out->ops[i].kind == WORKER_OP_SAGA_NEW) {
            saga_ctx(ob, out->ops[i].saga_id, out->ops[i].u.saga_new.traceparent, 1, s);
            return true;
        }
    if (cmd->dec.saga_id[0]) {
        saga_ctx(ob, cmd->dec.saga_id, NULL, cmd->dec.generation > 0 ? cmd->dec.generation : 1, s);
        return true;
    }
    return false;
}

/* ---- counters -------------------------------------------------------------- */

static bool name_listed(const worker_observe_t *ob, const char *name)
{
    if (!ob->nnames)
        return true;
    for (int i = 0; i < ob->nnames; i++)
        if (name && strcmp(ob->names[i], name) == 0)
            return true;
    return false;
}

static void count_ops(worker_observe_t *ob, worker_t *w, const worker_saga_t *saga,
                      const worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++) {
        const worker_op_t *op = &out->ops[i];
        if (op->kind == WORKER_OP_ATTEMPT_DONE && op->u.done.status != WORKER_OK) {
            sg_metrics_batch_inc(w->metrics, SG_M_ERRORS,
                                 SG_LABELS(op->u.done.error_code ? op->u.done.error_code : "?",
                                           sg_errclass_name(op->u.done.cls)));
        } else if (op->kind == WORKER_OP_STEP && saga && step_ended(op->u.step.status)) {
            bool listed = name_listed(ob, saga->name);
            const char *step =
                op->u.step.idx < saga->nsteps ? saga->steps[op->u.step.idx].name : NULL;
            sg_metrics_batch_inc(w->metrics, SG_M_SAGA_STEPS_FINISHED,
                                 SG_LABELS(listed && saga->name ? saga->name : "other",
                                           listed && step ? step : "other",
                                           worker_step_status_name(op->u.step.status)));
        }
    }
}

/* ---- the hooks ------------------------------------------------------------- */

void worker_observe_outcome(worker_observe_t *ob, worker_t *w, const worker_cmd_t *cmd,
                            const worker_saga_t *saga, worker_outcome_t *out)
{
    obs_t o = {.ob = ob, .w = w, .cmd = cmd, .saga = saga};

    if (!ob)
        return;
    count_ops(ob, w, saga, out);
    if (!ob->otel || !outcome_saga(ob, cmd, saga, out, &o.s))
        return;
    if (out->calls) {
        /* The downstream's spans join the trace under the attempt's. */
        char tp[64];
        const worker_call_t *c = &out->call;
        sg_otel_traceparent(tp, sizeof(tp), &o.s.trace,
                            attempt_span(&o.s, c->step_idx, c->compensate, c->attempt),
                            o.s.sampled);
        free(out->call.traceparent);
        out->call.traceparent = sg_xstrdup(tp);
    }
    if (!o.s.sampled)
        return;
    o.now = sg_run_wall_ns(); /* sg_span_new keeps whole us */
    if (sg_otel_full(ob->otel)) {
        /* Starts are still noted (the queue may have room when they end). */
        for (size_t i = 0; i < out->n; i++)
            if (out->ops[i].kind == WORKER_OP_SAGA_NEW || out->ops[i].kind == WORKER_OP_ATTEMPT ||
                (out->ops[i].kind == WORKER_OP_MESSAGE && out->ops[i].u.msg.delay_ms > 0) ||
                (out->ops[i].kind == WORKER_OP_SAGA && saga_undoing(&out->ops[i]))) {
                worker_outcome_t one = *out;
                one.ops = &out->ops[i];
                one.n = 1;
                trace_ops(&o, &one);
            }
        sg_otel_dropped(ob->otel, "queue_full", skip_ops(&o, out));
        return;
    }
    trace_ops(&o, out);
}

void worker_observe_log_ids(const worker_observe_t *ob, const worker_cmd_t *cmd,
                            const worker_saga_t *saga, const worker_outcome_t *out,
                            sg_log_ctx_t *ctx, worker_log_ids_t *ids)
{
    saga_ctx_t s;
    uint64_t span;

    if (!ob || !ob->otel || !outcome_saga(ob, cmd, saga, out, &s))
        return;
    if (out->calls)
        span = attempt_span(&s, out->call.step_idx, out->call.compensate, out->call.attempt);
    else if (cmd->state == CMD_RETURNED || cmd->state == CMD_CALLING)
        span = attempt_span(&s, cmd->call.step_idx, cmd->call.compensate, cmd->call.attempt);
    else if (cmd->dec.step >= 0 &&
             (cmd->dec.type == SG_CMD_EXECUTE || cmd->dec.type == SG_CMD_COMPENSATE))
        span = step_span(&s, cmd->dec.step, cmd->dec.type == SG_CMD_COMPENSATE);
    else
        span = saga_span(&s);
    sg_otel_trace_hex(ids->trace, sizeof(ids->trace), &s.trace);
    sg_otel_span_hex(ids->span, sizeof(ids->span), span);
    ctx->trace_id = ids->trace;
    ctx->span_id = ids->span;
}
