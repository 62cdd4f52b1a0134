/* The saga state machine (docs/ARCHITECTURE.md, "The saga state machine").
 *
 * Each function here runs inside the open transaction of a batch, with the
 * saga row locked, and only sends statements into the pipeline: the step
 * and saga rows, the attempt row, the events, the next command (or a timer
 * for a retry) and dead letters.  The caller commits them together with
 * the consumed offset, or none of them.
 *
 * The one place where retry / compensate / dead-letter is decided for a
 * call's outcome is on_failure(); a forward step that fails for good goes
 * through step_failed(), a compensation through comp_failed(). */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "sagad/sg_log.h"
#include "sagad/sg_text.h"
#include "sagad/sg_version.h"
#include "worker.h"

/* Column order of worker_sql_load. */
enum {
    L_SAGA_ID,
    L_NAME,
    L_STATUS,
    L_GEN,
    L_SEQ,
    L_SPENT,
    L_BUDGET,
    L_PAST_DEADLINE,
    L_INPUT,
    L_TRACEPARENT,
    L_IDX,
    L_STEP_NAME,
    L_TOOL,
    L_ARGS,
    L_COMP,
    L_STEP_STATUS,
    L_ATTEMPTS,
    L_COMP_ATTEMPTS,
    L_ERROR_CODE,
};

/* The steps are read per saga (LATERAL), which makes the plan an index
 * lookup of each saga's steps whatever the statistics say.  As a plain
 * join, a steps table not yet analyzed (a new install under load, before
 * autovacuum's first ANALYZE) was hashed whole: 27 ms a batch at 70,000
 * steps against 3-6 ms, and growing with the table.  The subquery's ORDER
 * BY (steps_pkey's order) keeps the planner from flattening it back into
 * that join. */
const char worker_sql_load[] =
    "SELECT s.saga_id, s.name, s.status, s.generation, s.seq, s.retry_spent_ms, "
    "coalesce(s.retry_budget_ms, -1), coalesce(s.deadline < now(), false), s.input::text, "
    "s.traceparent, st.idx, st.name, st.tool, st.args::text, st.compensate::text, st.status, "
    "st.attempts, st.comp_attempts, st.error_code "
    "FROM sagas s CROSS JOIN LATERAL (SELECT * FROM steps t WHERE t.saga_id = s.saga_id "
    "ORDER BY t.saga_id, t.idx) st WHERE s.saga_id = ANY($1::text[]) "
    "ORDER BY s.saga_id FOR UPDATE OF s";

/* A status column holds a name the check constraints allow; one this
 * worker does not know means the schema is newer than the code, and no
 * decision on that saga could be right. */
static void status_of(const char *saga_id, int step, int parsed)
{
    char idx[16];

    if (parsed == 0)
        return;
    snprintf(idx, sizeof(idx), "%d", step);
    sg_log_kv(SG_LOG_ERROR, "unknown status in the database: is the schema newer than this worker?",
              "saga_id", saga_id, "step", step < 0 ? "-" : idx, NULL);
    abort();
}

void worker_saga_load(worker_saga_t *saga, const sg_pg_res_t *res, size_t *row)
{
    size_t r = *row;
    const char *id = sg_pg_res_get(res, r, L_SAGA_ID);

    memset(saga, 0, sizeof(*saga));
    saga->saga_id = id;
    saga->name = sg_pg_res_get(res, r, L_NAME);
    status_of(saga->saga_id, -1,
              worker_saga_status_parse(sg_pg_res_get(res, r, L_STATUS), &saga->status));
    saga->generation = (int)sg_pg_res_int(res, r, L_GEN, 1);
    saga->seq = sg_pg_res_int(res, r, L_SEQ, 0);
    saga->retry_spent = sg_pg_res_int(res, r, L_SPENT, 0);
    saga->retry_budget = sg_pg_res_int(res, r, L_BUDGET, -1);
    saga->past_deadline = strcmp(sg_pg_res_get(res, r, L_PAST_DEADLINE), "t") == 0;
    saga->input = sg_pg_res_get(res, r, L_INPUT);
    saga->traceparent = sg_pg_res_get(res, r, L_TRACEPARENT);
    for (; r < sg_pg_res_rows(res) && strcmp(sg_pg_res_get(res, r, L_SAGA_ID), id) == 0; r++) {
        worker_step_t *st;
        int idx = (int)sg_pg_res_int(res, r, L_IDX, -1);
        if (idx < 0 || idx >= SG_MAX_STEPS)
            continue;
        st = &saga->steps[idx];
        st->idx = idx;
        st->name = sg_pg_res_get(res, r, L_STEP_NAME);
        st->tool = sg_pg_res_get(res, r, L_TOOL);
        st->args = sg_pg_res_get(res, r, L_ARGS);
        st->comp = sg_pg_res_get(res, r, L_COMP);
        status_of(id, idx,
                  worker_step_status_parse(sg_pg_res_get(res, r, L_STEP_STATUS), &st->status));
        st->attempts = (int)sg_pg_res_int(res, r, L_ATTEMPTS, 0);
        st->comp_attempts = (int)sg_pg_res_int(res, r, L_COMP_ATTEMPTS, 0);
        /* run_health's blocking_failure names the code of a step that
         * failed in an earlier transaction. */
        snprintf(st->error_code, sizeof(st->error_code), "%s",
                 sg_pg_res_get(res, r, L_ERROR_CODE) ? sg_pg_res_get(res, r, L_ERROR_CODE) : "");
        if (idx + 1 > saga->nsteps)
            saga->nsteps = idx + 1;
    }
    *row = r;
}

/* ---- small helpers ----------------------------------------------------- */

/* A statement other than the collected rows of worker_writes.c: those
 * go first, so it sees them.  These are rare (a dead letter, which writes
 * its message to the outbox; an interrupted attempt): each counts as an
 * outbox write. */
static void send(worker_t *w, const char *sql, int n, const char *const *params)
{
    worker_writes_flush(w);
    w->outbox_written = true;
    sg_pg_pipe_send(w->pg, sql, n, params, NULL);
}

static void iso_time(char *out, size_t size, int64_t plus_ms)
{
    struct timeval tv;
    struct tm tm;
    time_t t;
    int64_t ms;

    gettimeofday(&tv, NULL);
    ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000 + plus_ms;
    t = (time_t)(ms / 1000);
    gmtime_r(&t, &tm);
    snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

static char *base64(const void *data, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    char *out = malloc(4 * ((len + 2) / 3) + 1), *o = out;

    if (!out)
        abort();
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < len ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < len ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < len ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
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

/* The members every message of the worker starts with: v, type, id,
 * saga_id. */
static sg_json_t *message_new(const char *type, const char *id, const char *saga_id)
{
    sg_json_t *m = sg_json_new_object();

    sg_json_add_int(m, "v", 1);
    sg_json_add_str(m, "type", type);
    sg_json_add_str(m, "id", id);
    sg_json_add_str(m, "saga_id", saga_id);
    return m;
}

/* Queues msg (from message_new(), keyed by its saga) for Kafka: into the
 * outbox now, or as a timer.  Takes msg.  keep, when not NULL, takes the
 * payload's text too. */
static void emit(worker_t *w, const char *topic, const char *traceparent, sg_json_t *msg,
                 int64_t delay_ms, char **keep)
{
    const char *type = sg_json_string(sg_json_member(msg, "type"));
    const char *key = sg_json_string(sg_json_member(msg, "saga_id"));
    char *headers = headers_json(type, traceparent), *payload = sg_json_print(msg);

    worker_write_message(w, delay_ms, topic, key, headers, payload);
    free(headers);
    if (keep)
        *keep = payload;
    else
        free(payload);
    sg_json_destroy(msg);
}

/* A new event of the saga: v, type, id, saga_id, seq, time, then body's
 * members.  Takes body. */
static void event(worker_t *w, worker_saga_t *saga, const char *type, sg_json_t *body)
{
    char id[SG_SAGA_ID_MAX + 32], now[40];
    sg_json_t *ev;

    saga->seq++;
    saga->dirty = true;
    snprintf(id, sizeof(id), "evt:%s:%lld", saga->saga_id, (long long)saga->seq);
    iso_time(now, sizeof(now), 0);
    ev = message_new(type, id, saga->saga_id);
    sg_json_add_int(ev, "seq", saga->seq);
    sg_json_add_str(ev, "time", now);
    for (const sg_json_t *m = body ? sg_json_first(body) : NULL; m; m = sg_json_next(m))
        sg_json_add_node(ev, sg_json_key(m), sg_json_dup(m));
    sg_json_destroy(body);
    emit(w, w->topic_events, saga->traceparent, ev, 0, NULL);
}

static sg_json_t *step_body(const worker_step_t *st)
{
    sg_json_t *b = sg_json_new_object();

    sg_json_add_int(b, "step", st->idx);
    sg_json_add_str(b, "step_name", st->name);
    return b;
}

static void add_error(sg_json_t *b, const sg_err_t *err)
{
    sg_json_add_str(b, "error_code", err->code);
    sg_json_add_str(b, "error_class", sg_errclass_name(err->cls));
    sg_json_add_str(b, "message", err->message);
}

/* step.execute / step.compensate for (step, attempt), now or later. */
static void command(worker_t *w, worker_saga_t *saga, int step, bool compensate, int attempt,
                    int64_t delay_ms)
{
    char id[SG_SAGA_ID_MAX + 64];
    sg_json_t *c;

    snprintf(id, sizeof(id), "cmd:%s:%d:%s:g%d:a%d", saga->saga_id, step, compensate ? "c" : "f",
             saga->generation, attempt);
    c = message_new(compensate ? "step.compensate" : "step.execute", id, saga->saga_id);
    sg_json_add_int(c, "step", step);
    sg_json_add_int(c, "attempt", attempt);
    sg_json_add_int(c, "generation", saga->generation);
    /* Sent now: the loop may chain it (run it in this transaction). */
    emit(w, w->topic_commands, saga->traceparent, c, delay_ms,
         w->chain && delay_ms <= 0 && w->cur && !w->cur->follow ? &w->cur->follow : NULL);
}

/* A header name or value as JSON text: as it is when it is UTF-8 (no NUL)
 * and does not itself start with "base64:", else "base64:" and its bytes
 * in base64.  So a dead letter keeps every header whatever its bytes, and
 * PostgreSQL's jsonb can hold it (a name that is not UTF-8 once made the
 * dead-letter insert fail, for ever). */
static char *header_text(const void *data, size_t len)
{
    char *b, *s;

    if (sg_json_utf8_valid(data, len) && !(len >= 7 && memcmp(data, "base64:", 7) == 0)) {
        if (!(s = strndup(data, len)))
            abort();
        return s;
    }
    b = base64(data, len);
    if (!(s = malloc(strlen(b) + 8)))
        abort();
    sprintf(s, "base64:%s", b);
    free(b);
    return s;
}

static char *msg_headers_json(const sg_kafka_msg_t *msg)
{
    sg_json_t *h = sg_json_new_object();
    const char *name;
    const void *val;
    size_t len;
    char *text;

    for (size_t i = 0; msg && sg_kafka_msg_header_at(msg, i, &name, &val, &len); i++) {
        char *n = header_text(name, strlen(name));
        if (!val) {
            sg_json_add_null(h, n);
        } else {
            char *v = header_text(val, len);
            sg_json_add_str(h, n, v);
            free(v);
        }
        free(n);
    }
    text = sg_json_print(h);
    sg_json_destroy(h);
    return text;
}

/* Writes a dead letter (ledger row + DLQ message, one statement) for cmd's
 * message.  step < 0 when no step is concerned.  The trail is every
 * attempt row of (saga, step, phase, generation), read in the same
 * transaction, so it includes the attempt finished just before.  The DLQ
 * message's headers let plain Kafka tools filter without parsing JSON;
 * held_until (NULL: not held) goes into the saga.dead_lettered event. */
static void dead_letter(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga, int step,
                        bool compensate, const sg_err_t *err, const char *held_until)
{
    static const char sql[] =
        "WITH t AS (SELECT count(*) AS n, "
        "  coalesce(jsonb_agg(jsonb_build_object('attempt', a.attempt, 'started_at', a.started_at, "
        "    'finished_at', a.finished_at, 'status', a.status, 'error_code', a.error_code, "
        "    'error_class', a.error_class, 'message', a.envelope->>'message', 'latency_ms', "
        "    a.latency_ms, 'worker_id', a.worker_id) ORDER BY a.id), '[]') AS trail, "
        "  min(a.started_at) AS first_at, max(coalesce(a.finished_at, a.started_at)) AS last_at "
        "  FROM attempts a WHERE a.saga_id = $4 AND a.step_idx = $6::int AND a.phase = $9 "
        "  AND a.generation = $19::int), "
        "dl AS (INSERT INTO dead_letters (error_code, error_class, message, saga_id, saga_name, "
        "  step_idx, step_name, tool, phase, attempts, trail, original_topic, original_partition, "
        "  original_offset, original_key, original_timestamp, original_headers, payload, "
        "  first_failure_at, last_failure_at, worker_id, sagad_version) "
        "  SELECT $1, $2, $3, $4, $5, $6::int, $7, $8, $9, t.n, t.trail, $10, $11::int, "
        "  $12::bigint, decode($13, 'base64'), to_timestamp($14::bigint / 1000.0), $15::jsonb, "
        "  decode($16, 'base64'), coalesce(t.first_at, now()), greatest(t.last_at, now()), "
        "  $17, $18 FROM t RETURNING *), "
        "m AS (SELECT dl.*, sagad_dead_letter_message(dl.*::dead_letters, $22::bigint) AS rec "
        "  FROM dl) "
        "INSERT INTO outbox (topic, key, headers, payload) "
        "SELECT $20, convert_to(m.saga_id, 'UTF8'), jsonb_strip_nulls(jsonb_build_object("
        "  'sagad-type', 'dead_letter', 'sagad-error-code', m.error_code, "
        "  'sagad-error-class', m.error_class, 'sagad-saga-id', m.saga_id, "
        "  'sagad-original-topic', m.original_topic, "
        "  'sagad-original-partition', m.original_partition::text, "
        "  'sagad-original-offset', m.original_offset::text, 'sagad-dead-letter-id', m.id::text, "
        "  'sagad-step', m.step_name, 'sagad-step-index', m.step_idx::text, "
        "  'sagad-tool', m.tool, 'sagad-phase', m.phase, "
        "  'sagad-payload-omitted', CASE WHEN (m.rec->>'payload_omitted')::boolean "
        "    THEN 'true' END, 'traceparent', $21::text)), "
        "  convert_to(m.rec::text, 'UTF8') FROM m";
    const worker_step_t *st = saga && step >= 0 ? &saga->steps[step] : NULL;
    const char *tool = NULL;
    char sidx[16], part[16], off[24], ts[24], gen[16], maxb[24];
    const char *saga_name = saga ? saga->name : NULL;
    const void *key = NULL, *payload = NULL;
    size_t key_len = 0, len = 0;
    char *key64 = NULL, *payload64, *headers, message[sizeof(err->message) + 80];
    const sg_json_t *comp = NULL;
    sg_json_t *compdoc = NULL;

    if (st) {
        tool = st->tool;
        if (compensate && st->comp) {
            compdoc = sg_json_parse(st->comp, strlen(st->comp), NULL, NULL);
            comp = compdoc;
            if (comp)
                sg_json_get_str(comp, "$", "tool", false, &tool, NULL);
        }
    }
    /* A rejected submission has no saga row, but its document names it. */
    if (!saga && cmd->dec.type == SG_CMD_START)
        saga_name = sg_json_string(sg_json_member(cmd->dec.doc, "name"));
    snprintf(maxb, sizeof(maxb), "%zu", w->limits.max_bytes);
    snprintf(sidx, sizeof(sidx), "%d", step);
    snprintf(gen, sizeof(gen), "%d", saga ? saga->generation : cmd->dec.generation);
    snprintf(part, sizeof(part), "%d", (int)sg_kafka_msg_partition(cmd->msg));
    snprintf(off, sizeof(off), "%lld", (long long)cmd->offset);
    snprintf(ts, sizeof(ts), "%lld", (long long)sg_kafka_msg_timestamp(cmd->msg));
    key = sg_kafka_msg_key(cmd->msg, &key_len);
    if (key)
        key64 = base64(key, key_len);
    payload = sg_kafka_msg_payload(cmd->msg, &len);
    payload64 = base64(payload ? payload : "", payload ? len : 0);
    /* The reduced dead letter (worker_loop.c's last resort) keeps what
     * surely fits: no headers, and the message with every control
     * character and byte that is not UTF-8 written \xHH. */
    headers = cmd->dl_minimal ? NULL : msg_headers_json(cmd->msg);
    if (cmd->dl_minimal) {
        char *shown = sg_text_visible(err->message, false);
        snprintf(message, sizeof(message), "reduced dead letter (headers left out): %.*s",
                 (int)sg_utf8_cut(shown, sizeof(err->message)), shown);
        free(shown);
    } else {
        snprintf(message, sizeof(message), "%s", err->message);
    }
    {
        const char *params[] = {err->code,
                                sg_errclass_name(err->cls),
                                message,
                                saga ? saga->saga_id
                                     : (cmd->dec.saga_id[0] ? cmd->dec.saga_id : NULL),
                                saga_name,
                                st ? sidx : NULL,
                                st ? st->name : NULL,
                                tool,
                                st ? (compensate ? "compensate" : "forward") : NULL,
                                sg_kafka_msg_topic(cmd->msg),
                                part,
                                off,
                                key64,
                                sg_kafka_msg_timestamp(cmd->msg) >= 0 ? ts : NULL,
                                headers,
                                payload64,
                                w->worker_id,
                                SAGAD_VERSION,
                                gen,
                                w->topic_dlq,
                                saga ? saga->traceparent : NULL,
                                maxb};
        send(w, sql, 22, params);
    }
    w->stats.dead_letters++;
    w->decided = "dead_lettered";
    sg_metrics_batch_inc(w->metrics, SG_M_DEAD_LETTERS, SG_LABELS(err->code));
    sg_json_destroy(compdoc);
    free(key64);
    free(payload64);
    free(headers);
    {
        sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
        ctx.saga_id = saga ? saga->saga_id : NULL;
        ctx.step = st ? st->name : NULL;
        ctx.error_code = err->code;
        ctx.topic = sg_kafka_msg_topic(cmd->msg);
        ctx.partition = sg_kafka_msg_partition(cmd->msg);
        ctx.offset = cmd->offset;
        sg_log(SG_LOG_WARN, &ctx, "dead-lettered: %s", err->message);
    }
    if (saga) {
        sg_json_t *b = st ? step_body(st) : sg_json_new_object();
        add_error(b, err);
        if (held_until)
            sg_json_add_str(b, "held_until", held_until);
        event(w, saga, "saga.dead_lettered", b);
    }
}

/* Every status change goes through these two: logged at debug level, and
 * asserted to be a transition of worker_state.c's tables (so the tables,
 * and docs/STATES.md printed from them, are what the code does). */
static void set_step(const worker_saga_t *saga, worker_step_t *st, worker_step_status_t to)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    assert(worker_step_transition_ok(st->status, to));
    ctx.saga_id = saga->saga_id;
    ctx.step = st->name;
    sg_log(SG_LOG_DEBUG, &ctx, "step %d: %s -> %s", st->idx, worker_step_status_name(st->status),
           worker_step_status_name(to));
    st->status = to;
    st->dirty = true;
}

static void set_saga(worker_saga_t *saga, worker_saga_status_t to)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    assert(worker_saga_transition_ok(saga->status, to));
    ctx.saga_id = saga->saga_id;
    sg_log(SG_LOG_DEBUG, &ctx, "saga: %s -> %s", worker_saga_status_name(saga->status),
           worker_saga_status_name(to));
    saga->status = to;
    saga->dirty = true;
}

static sg_json_t *run_health(const worker_saga_t *saga)
{
    sg_json_t *h = sg_json_new_object(), *block = NULL;
    int ok = 0, failed = 0, comp = 0, skipped = 0;

    for (int i = 0; i < saga->nsteps; i++) {
        const worker_step_t *st = &saga->steps[i];
        if (st->status == WORKER_STEP_SUCCEEDED) {
            ok++;
        } else if (st->status == WORKER_STEP_COMPENSATED) {
            comp++;
        } else if (st->status == WORKER_STEP_SKIPPED) {
            skipped++;
        } else if (st->status == WORKER_STEP_FAILED ||
                   st->status == WORKER_STEP_COMPENSATION_FAILED) {
            failed++;
            if (!block || st->status == WORKER_STEP_COMPENSATION_FAILED) {
                sg_json_destroy(block);
                block = step_body(st);
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
    if (block)
        sg_json_add_node(h, "blocking_failure", block);
    else
        sg_json_add_null(h, "blocking_failure");
    return h;
}

static void terminal(worker_t *w, worker_saga_t *saga, worker_saga_status_t to)
{
    sg_json_t *b = sg_json_new_object();
    const char *status = worker_saga_status_name(to);
    char type[32];

    set_saga(saga, to);
    sg_json_add_str(b, "status", status);
    sg_json_add_node(b, "run_health", run_health(saga));
    snprintf(type, sizeof(type), "saga.%s", status);
    event(w, saga, type, b);
    sg_metrics_batch_inc(w->metrics, SG_M_SAGAS_FINISHED, SG_LABELS(status));
    if (to == WORKER_SAGA_COMPLETED)
        w->stats.completed++;
    else if (to == WORKER_SAGA_COMPENSATED)
        w->stats.compensated++;
    else
        w->stats.failed++;
}

/* Writes the dirty step rows and the saga row. */
static void flush(worker_t *w, worker_saga_t *saga)
{
    char idx[16], att[16], catt[16], seq[24], spent[24];

    for (int i = 0; i < saga->nsteps; i++) {
        worker_step_t *st = &saga->steps[i];
        if (!st->dirty)
            continue;
        snprintf(idx, sizeof(idx), "%d", i);
        snprintf(att, sizeof(att), "%d", st->attempts);
        snprintf(catt, sizeof(catt), "%d", st->comp_attempts);
        {
            const char *vals[] = {
                saga->saga_id, idx,        worker_step_status_name(st->status),       att,
                catt,          st->result, st->error_code[0] ? st->error_code : NULL, st->idem_key};
            worker_write_step(w, &st->slot, vals);
        }
        st->dirty = false;
        st->result = NULL;
        st->idem_key = NULL;
    }
    if (!saga->dirty)
        return;
    snprintf(seq, sizeof(seq), "%lld", (long long)saga->seq);
    snprintf(spent, sizeof(spent), "%lld", (long long)saga->retry_spent);
    {
        const char *vals[] = {saga->saga_id, worker_saga_status_name(saga->status), seq, spent};
        worker_write_saga(w, &saga->slot, vals);
    }
    saga->dirty = false;
}

/* ---- compensation ------------------------------------------------------ */

/* Starts the compensation of the highest succeeded step at or below from,
 * skipping steps that have none; all done: the saga is compensated. */
static void next_compensation(worker_t *w, worker_saga_t *saga, int from)
{
    for (int j = from; j >= 0; j--) {
        worker_step_t *st = &saga->steps[j];
        if (st->status != WORKER_STEP_SUCCEEDED)
            continue;
        if (st->comp && strcmp(st->comp, "null") != 0) {
            set_step(saga, st, WORKER_STEP_COMPENSATING);
            st->comp_attempts = 0;
            command(w, saga, j, true, 1, 0);
            return;
        }
        set_step(saga, st, WORKER_STEP_SKIPPED);
    }
    terminal(w, saga, WORKER_SAGA_COMPENSATED);
}

static void begin_compensation(worker_t *w, worker_saga_t *saga, int failed_step,
                               const sg_err_t *err)
{
    sg_json_t *b = step_body(&saga->steps[failed_step]);

    set_saga(saga, WORKER_SAGA_COMPENSATING);
    add_error(b, err);
    event(w, saga, "saga.compensating", b);
    for (int j = failed_step + 1; j < saga->nsteps; j++)
        if (saga->steps[j].status == WORKER_STEP_PENDING)
            set_step(saga, &saga->steps[j], WORKER_STEP_SKIPPED);
    next_compensation(w, saga, failed_step - 1);
}

static void comp_failed(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga, worker_step_t *st,
                        const sg_err_t *err)
{
    sg_json_t *b = step_body(st);

    set_step(saga, st, WORKER_STEP_COMPENSATION_FAILED);
    sg_metrics_batch_inc(w->metrics, SG_M_COMPENSATIONS, SG_LABELS("failed"));
    snprintf(st->error_code, sizeof(st->error_code), "%s", err->code);
    add_error(b, err);
    event(w, saga, "step.compensation_failed", b);
    /* The terminal event is the saga's last: consumers stop reading there. */
    dead_letter(w, cmd, saga, st->idx, true, err, NULL);
    terminal(w, saga, WORKER_SAGA_FAILED);
}

/* A forward step that failed as poison: its dead letter, then either the
 * compensation at once or, with worker.dead_letter_hold_ms, the hold: the
 * saga waits `held` with nothing undone, so an operator can replay the
 * step, and a saga.release timer of this generation starts the
 * compensation when the hold ends (a replay bumps the generation, which
 * makes that timer stale). */
static void step_dead_letter(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga, worker_step_t *st,
                             const sg_err_t *err)
{
    sg_json_t *c;
    char until[40], id[SG_SAGA_ID_MAX + 32];

    if (w->hold_ms <= 0) {
        dead_letter(w, cmd, saga, st->idx, false, err, NULL);
        begin_compensation(w, saga, st->idx, err);
        return;
    }
    iso_time(until, sizeof(until), w->hold_ms);
    dead_letter(w, cmd, saga, st->idx, false, err, until);
    set_saga(saga, WORKER_SAGA_HELD);
    snprintf(id, sizeof(id), "cmd:%s:release:g%d", saga->saga_id, saga->generation);
    c = message_new("saga.release", id, saga->saga_id);
    sg_json_add_int(c, "generation", saga->generation);
    emit(w, w->topic_commands, saga->traceparent, c, w->hold_ms, NULL);
    w->stats.held++;
}

/* A forward step failed for good: step.failed, then its dead letter (and
 * maybe the hold) or the compensation of the steps before it. */
static void step_failed(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga, worker_step_t *st,
                        const sg_err_t *err, bool dead_lettered)
{
    sg_json_t *b = step_body(st);

    set_step(saga, st, WORKER_STEP_FAILED);
    snprintf(st->error_code, sizeof(st->error_code), "%s", err->code);
    sg_json_add_int(b, "attempt", cmd->dec.attempt);
    add_error(b, err);
    event(w, saga, "step.failed", b);
    if (dead_lettered)
        step_dead_letter(w, cmd, saga, st, err);
    else
        begin_compensation(w, saga, st->idx, err);
}

/* ---- decisions --------------------------------------------------------- */

static void stale(worker_t *w, worker_cmd_t *cmd, const char *why)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    w->stats.stale++;
    w->decided = "ignored";
    sg_metrics_batch_inc(w->metrics, SG_M_DUPLICATES_IGNORED,
                         SG_LABELS(cmd->state == CMD_RETURNED ? "outcome" : "command"));
    ctx.saga_id = cmd->dec.saga_id;
    ctx.step = cmd->call.step_name;
    ctx.attempt = cmd->dec.attempt;
    ctx.partition = cmd->part ? sg_kafka_msg_partition(cmd->msg) : -1;
    ctx.offset = cmd->offset;
    sg_log(SG_LOG_INFO, &ctx, "duplicate or stale command, no effect: %s", why);
}

typedef struct problem_list_s {
    sg_json_t *arr;
    char text[400];
    int n;
} problem_list_t;

static void collect_problem(void *opaque, const char *path, const char *rule)
{
    problem_list_t *pl = opaque;
    sg_json_t *p = sg_json_new_object();
    size_t len = strlen(pl->text);

    sg_json_add_str(p, "path", path);
    sg_json_add_str(p, "rule", rule);
    sg_json_append(pl->arr, p);
    if (pl->n++ < 3)
        snprintf(pl->text + len, sizeof(pl->text) - len, "%s%s: %s", len ? "; " : "", path, rule);
}

/* saga.rejected (seq 0: the saga does not exist, or is another one) and a
 * dead letter so the submission can be fixed and replayed. */
static void reject(worker_t *w, worker_cmd_t *cmd, problem_list_t *pl, const char *code)
{
    const char *sub_id = NULL;
    char id[SG_SAGA_ID_MAX + 64], now[40];
    sg_json_t *ev;
    sg_err_t err;

    sg_json_get_str(cmd->dec.doc, "$", "id", false, &sub_id, NULL);
    snprintf(id, sizeof(id), "evt:%s:rejected:%d:%lld", cmd->dec.saga_id,
             (int)sg_kafka_msg_partition(cmd->msg), (long long)cmd->offset);
    iso_time(now, sizeof(now), 0);
    ev = message_new("saga.rejected", id, cmd->dec.saga_id);
    sg_json_add_int(ev, "seq", 0);
    sg_json_add_str(ev, "time", now);
    if (sub_id)
        sg_json_add_str(ev, "submission_id", sub_id);
    sg_json_add_str(ev, "error_code", code);
    sg_json_add_str(ev, "error_class", "permanent");
    sg_json_add_str(ev, "message", pl->text);
    sg_json_add_node(ev, "problems", pl->arr);
    pl->arr = NULL;
    emit(w, w->topic_events, NULL, ev, 0, NULL);
    w->stats.rejected++;
    sg_err_set(&err, SG_ERRCLASS_PERMANENT, code, "saga.start rejected: %d problem(s): %s", pl->n,
               pl->text);
    dead_letter(w, cmd, NULL, -1, false, &err, NULL);
    w->decided = "rejected";
}

static char *effective_steps(const sg_json_t *doc, const sg_registry_t *reg)
{
    const sg_json_t *steps = sg_json_member(doc, "steps");
    sg_json_t *out = sg_json_new_array();
    char *text;

    for (size_t i = 0; i < sg_json_array_size(steps); i++) {
        const sg_json_t *st = sg_json_array_get(steps, i), *comp = sg_json_member(st, "compensate");
        const sg_json_t *args = sg_json_member(st, "args");
        const char *name = sg_json_string(sg_json_member(st, "name"));
        const char *tool = sg_json_string(sg_json_member(st, "tool"));
        const sg_tool_t *t = sg_registry_find(reg, tool);
        sg_json_t *e = sg_json_new_object();

        sg_json_add_str(e, "name", name);
        sg_json_add_str(e, "tool", tool);
        sg_json_add_node(e, "args", args ? sg_json_dup(args) : sg_json_new_object());
        if (comp && !sg_json_is_null(comp)) {
            sg_json_t *c = sg_json_dup(comp);
            if (!sg_json_member(c, "args"))
                sg_json_add_node(c, "args", args ? sg_json_dup(args) : sg_json_new_object());
            sg_json_add_node(e, "compensate", c);
        } else if (t && t->compensation) {
            /* The registry's compensating tool, called with the step's args. */
            sg_json_t *c = sg_json_new_object();
            sg_json_add_str(c, "tool", t->compensation);
            sg_json_add_node(c, "args", args ? sg_json_dup(args) : sg_json_new_object());
            sg_json_add_node(e, "compensate", c);
        } else {
            sg_json_add_null(e, "compensate");
        }
        sg_json_append(out, e);
    }
    text = sg_json_print(out);
    sg_json_destroy(out);
    return text;
}

static void random_traceparent(worker_t *w, char *out, size_t size)
{
    uint64_t a = sg_rng_upto(&w->rng, UINT64_MAX), b = sg_rng_upto(&w->rng, UINT64_MAX),
             c = sg_rng_upto(&w->rng, UINT64_MAX);

    snprintf(out, size, "00-%016llx%016llx-%016llx-01", (unsigned long long)a,
             (unsigned long long)(b | 1), (unsigned long long)(c | 1));
}

/* A producer's traceparent that is not W3C trace context is never stored
 * or sent on (CR or LF in it would add headers to every call of the
 * saga): replaced, and said so, with what came escaped. */
static void bad_traceparent(const worker_cmd_t *cmd, const void *h, size_t hlen, const char *tp)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    char *seen = sg_text_visible_n(h, hlen < 64 ? hlen : 64, false);

    ctx.saga_id = cmd->dec.saga_id;
    sg_log(SG_LOG_WARN, &ctx,
           "traceparent header is not W3C trace context (%zu bytes: %s%s); the saga gets a new "
           "one: %s",
           hlen, seen, hlen > 64 ? "..." : "", tp);
    free(seen);
}

const char *worker_cmd_definition(worker_cmd_t *cmd)
{
    if (!cmd->definition)
        cmd->definition = sg_submit_definition(cmd->dec.doc);
    return cmd->definition;
}

/* Keeps text (malloc'd) with f; returns it. */
static const char *fresh_keep(worker_fresh_t *f, char *text)
{
    if (!text || f->ntexts == sizeof(f->texts) / sizeof(f->texts[0]))
        abort();
    return f->texts[f->ntexts++] = text;
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

/* The steps of a new saga from the effective steps it was inserted with
 * (steps_text, see effective_steps), as the load would read them back:
 * pending, never attempted. */
static bool fresh_steps(worker_fresh_t *f, const char *steps_text)
{
    size_t n;

    f->steps = sg_json_parse(steps_text, strlen(steps_text), NULL, NULL);
    n = sg_json_array_size(f->steps);
    if (!f->steps || n == 0 || n > SG_MAX_STEPS)
        return false;
    for (size_t i = 0; i < n; i++) {
        const sg_json_t *e = sg_json_array_get(f->steps, i),
                        *comp = sg_json_member(e, "compensate");
        worker_step_t *st = &f->saga.steps[i];

        st->idx = (int)i;
        st->name = sg_json_string(sg_json_member(e, "name"));
        st->tool = sg_json_string(sg_json_member(e, "tool"));
        st->args = fresh_keep(f, sg_json_print(sg_json_member(e, "args")));
        st->comp = comp && !sg_json_is_null(comp) ? fresh_keep(f, sg_json_print(comp)) : NULL;
        st->status = WORKER_STEP_PENDING;
    }
    f->saga.nsteps = (int)n;
    return true;
}

static void decide_start(worker_t *w, worker_cmd_t *cmd, worker_saga_t *existing)
{
    problem_list_t pl = {sg_json_new_array(), "", 0};
    worker_fresh_t *fresh;
    worker_saga_t *saga;
    const char *def;
    char *steps, tp[64] = "";
    const char *name = NULL, *deadline = NULL;
    const sg_json_t *input, *meta, *budget;
    char *input_text = NULL, *meta_text = NULL, budget_text[24];
    int64_t budget_ms = -1;
    const void *h;
    size_t hlen;

    if (existing) {
        if (existing->same_definition) {
            sg_json_destroy(pl.arr);
            stale(w, cmd, "saga.start of an existing saga with the same definition");
            return;
        }
        collect_problem(&pl, "$.saga_id",
                        "unique: this saga_id is already used with a different definition");
        reject(w, cmd, &pl, "input.saga.conflict");
        sg_json_destroy(pl.arr);
        return;
    }
    if (sg_submit_validate(cmd->dec.doc, w->reg, collect_problem, &pl) > 0) {
        reject(w, cmd, &pl, "input.schema.invalid");
        sg_json_destroy(pl.arr);
        return;
    }
    sg_json_destroy(pl.arr);

    def = worker_cmd_definition(cmd);
    steps = effective_steps(cmd->dec.doc, w->reg);
    sg_json_get_str(cmd->dec.doc, "$", "name", true, &name, NULL);
    sg_json_get_str(cmd->dec.doc, "$", "deadline", false, &deadline, NULL);
    if ((input = sg_json_member(cmd->dec.doc, "input")))
        input_text = sg_json_print(input);
    if ((meta = sg_json_member(cmd->dec.doc, "metadata")))
        meta_text = sg_json_print(meta);
    budget = sg_json_member(cmd->dec.doc, "retry_budget_ms");
    if (budget) {
        sg_json_get_int(cmd->dec.doc, "$", "retry_budget_ms", true, &budget_ms, NULL);
        snprintf(budget_text, sizeof(budget_text), "%lld", (long long)budget_ms);
    }
    h = sg_kafka_msg_header(cmd->msg, "traceparent", &hlen);
    if (sg_traceparent_ok(h, hlen)) {
        snprintf(tp, sizeof(tp), "%.*s", (int)hlen, (const char *)h);
    } else {
        random_traceparent(w, tp, sizeof(tp));
        if (h)
            bad_traceparent(cmd, h, hlen, tp);
    }
    {
        const char *vals[] = {cmd->dec.saga_id,
                              name,
                              def,
                              input_text,
                              meta_text,
                              deadline,
                              budget ? budget_text : NULL,
                              tp,
                              steps};
        worker_write_saga_new(w, vals);
    }
    /* A fresh saga, as the rows just written say. */
    if (!(fresh = calloc(1, sizeof(*fresh))))
        abort();
    saga = &fresh->saga;
    saga->saga_id = cmd->dec.saga_id;
    saga->name = name;
    saga->traceparent = fresh_keep(fresh, strdup(tp));
    saga->input = input_text ? fresh_keep(fresh, input_text) : NULL;
    saga->generation = 1;
    saga->retry_budget = budget_ms;
    saga->status = WORKER_SAGA_RUNNING;
    {
        sg_json_t *b = sg_json_new_object();
        sg_json_add_str(b, "name", name);
        sg_json_add_int(b, "steps",
                        (int64_t)sg_json_array_size(sg_json_member(cmd->dec.doc, "steps")));
        event(w, saga, "saga.accepted", b);
    }
    command(w, saga, 0, false, 1, 0);
    saga->dirty = true;
    flush(w, saga);
    w->stats.started++;
    sg_metrics_batch_inc(w->metrics, SG_M_SAGAS_STARTED, NULL);
    /* The steps too, as a load would return them, when the loop may chain
     * the first step.  Not with a deadline: whether it passed is
     * PostgreSQL's clock's to say, in the next transaction. */
    if (w->chain && !deadline && fresh_steps(fresh, steps))
        cmd->fresh = fresh;
    else
        worker_fresh_free(fresh);
    free(steps);
    free(meta_text);
}

/* Fills cmd->call for step st of saga; false (err set) when the call cannot
 * be made: unknown tool, bad args. */
static bool prepare_call(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga, worker_step_t *st,
                         bool compensate, sg_err_t *err)
{
    const char *tool_name = st->tool, *args_text = st->args;
    sg_json_t *comp = NULL, *args = NULL;
    const sg_tool_t *tool;
    problem_list_t pl = {NULL, "", 0};
    char key[256];

    if (compensate) {
        comp = st->comp ? sg_json_parse(st->comp, strlen(st->comp), NULL, NULL) : NULL;
        tool_name = comp ? sg_json_string(sg_json_member(comp, "tool")) : NULL;
        args =
            comp && sg_json_member(comp, "args") ? sg_json_dup(sg_json_member(comp, "args")) : NULL;
    } else if (args_text) {
        args = sg_json_parse(args_text, strlen(args_text), NULL, NULL);
    }
    if (!args)
        args = sg_json_new_object();
    tool = tool_name ? sg_registry_find(w->reg, tool_name) : NULL;
    if (!tool) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "tool.unknown",
                   "tool \"%s\" is not in the tool registry %s", tool_name ? tool_name : "(none)",
                   w->reg->path);
        goto fail;
    }
    pl.arr = sg_json_new_array();
    if (sg_submit_validate_args(tool, args, "$.args", collect_problem, &pl) > 0) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "tool.args.invalid", "args of tool %s: %s",
                   tool->name, pl.text);
        goto fail;
    }
    sg_json_destroy(pl.arr);
    sg_json_destroy(comp);
    sg_idem_key(key, sizeof(key), saga->saga_id, st->idx, compensate, saga->generation);
    cmd->call.tool = tool;
    cmd->call.saga_id = strdup(saga->saga_id);
    cmd->call.step_name = strdup(st->name);
    cmd->call.step_idx = st->idx;
    cmd->call.compensate = compensate;
    cmd->call.attempt = cmd->dec.attempt;
    cmd->call.generation = saga->generation;
    cmd->call.idem_key = strdup(key);
    cmd->call.traceparent = saga->traceparent ? strdup(saga->traceparent) : NULL;
    cmd->call.args = args;
    cmd->call.input =
        saga->input ? sg_json_parse(saga->input, strlen(saga->input), NULL, NULL) : NULL;
    return true;
fail:
    sg_json_destroy(pl.arr);
    sg_json_destroy(comp);
    sg_json_destroy(args);
    return false;
}

/* Marks the unfinished attempt rows of the command as interrupted (a
 * worker died or lost the partition while they ran). */
static void mark_interrupted(worker_t *w, worker_cmd_t *cmd, bool compensate)
{
    char step[16], gen[16], att[16];
    const char *params[] = {cmd->dec.saga_id, step, compensate ? "compensate" : "forward", gen,
                            att};

    snprintf(step, sizeof(step), "%d", cmd->dec.step);
    snprintf(gen, sizeof(gen), "%d", cmd->dec.generation);
    snprintf(att, sizeof(att), "%d", cmd->dec.attempt);
    send(w,
         "UPDATE attempts SET finished_at = now(), status = 'error', "
         "error_code = 'runtime.interrupted', error_class = 'timeout', "
         "envelope = jsonb_build_object('status', 'error', 'error_code', 'runtime.interrupted', "
         "'class', 'timeout', 'retriable', true, 'message', "
         "'the attempt started but never finished: the worker died or lost the partition') "
         "WHERE saga_id = $1 AND step_idx = $2::int AND phase = $3 AND generation = $4::int "
         "AND attempt = $5::int AND finished_at IS NULL",
         5, params);
}

static void decide_step(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga)
{
    bool comp = cmd->dec.type == SG_CMD_COMPENSATE;
    worker_step_t *st;
    int *attempts;
    sg_err_t err;
    char step[16], gen[16], att[16];

    if (!saga) {
        sg_err_set(&err, SG_ERRCLASS_POISON, "input.saga.unknown",
                   "%s for saga %s, which does not exist",
                   comp ? "step.compensate" : "step.execute", cmd->dec.saga_id);
        dead_letter(w, cmd, NULL, -1, false, &err, NULL);
        return;
    }
    if (cmd->dec.generation != saga->generation) {
        stale(w, cmd, "generation is not the saga's current one");
        return;
    }
    if (cmd->dec.step >= saga->nsteps) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                   "$.step: %d is past the last step of saga %s (%d steps)", cmd->dec.step,
                   saga->saga_id, saga->nsteps);
        dead_letter(w, cmd, saga, -1, false, &err, NULL);
        flush(w, saga);
        return;
    }
    st = &saga->steps[cmd->dec.step];
    attempts = comp ? &st->comp_attempts : &st->attempts;
    if (saga->status != (comp ? WORKER_SAGA_COMPENSATING : WORKER_SAGA_RUNNING) ||
        (comp ? st->status != WORKER_STEP_COMPENSATING
              : st->status != WORKER_STEP_PENDING && st->status != WORKER_STEP_RUNNING)) {
        stale(w, cmd, "the step is not waiting for this command");
        return;
    }
    if (cmd->dec.attempt == *attempts && *attempts > 0) {
        /* This attempt was started before: a duplicate of a finished one,
         * or the trace of a crash. */
        if (saga->finished > 0 || saga->interrupted == 0) {
            stale(w, cmd, "this attempt already ran");
            return;
        }
        /* Its last run before the crash-loop limit happens alone
         * (worker_loop.c, isolate_next()): a crash then is its own, not
         * another command's it happened to run beside.  Nothing is written
         * until then. */
        if (saga->interrupted == w->crash_loop_limit - 1 && !cmd->isolated) {
            cmd->defer = true;
            return;
        }
        mark_interrupted(w, cmd, comp);
        if (saga->interrupted >= w->crash_loop_limit) {
            sg_err_set(&err, SG_ERRCLASS_POISON, "runtime.crash_loop",
                       "attempt %d of step %s (%s) was interrupted %lld times: not run again",
                       cmd->dec.attempt, st->name, comp ? "compensate" : "forward",
                       (long long)saga->interrupted);
            if (comp)
                comp_failed(w, cmd, saga, st, &err);
            else
                step_failed(w, cmd, saga, st, &err, true);
            flush(w, saga);
            return;
        }
    } else if (cmd->dec.attempt != *attempts + 1) {
        stale(w, cmd, "attempt number is not the next one");
        return;
    }
    if (!comp && saga->past_deadline) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "runtime.deadline_exceeded",
                   "the saga's deadline passed before step %s ran", st->name);
        step_failed(w, cmd, saga, st, &err, false);
        flush(w, saga);
        return;
    }
    if (!prepare_call(w, cmd, saga, st, comp, &err)) {
        /* A chained command has no message for a dead letter to name: it
         * is dropped, nothing written, and its message decides this when
         * it arrives. */
        if (cmd->chained) {
            cmd->unchained = true;
            return;
        }
        /* An unknown tool is dead-lettered: the registry can be fixed and
         * the step replayed.  Bad args compensate like any permanent error. */
        if (comp)
            comp_failed(w, cmd, saga, st, &err);
        else
            step_failed(w, cmd, saga, st, &err, strcmp(err.code, "tool.unknown") == 0);
        flush(w, saga);
        return;
    }
    /* The attempt row is committed before the call: a crash leaves it
     * unfinished, which is how crash loops are detected. */
    *attempts = cmd->dec.attempt;
    if (!comp)
        set_step(saga, st, WORKER_STEP_RUNNING);
    st->dirty = true;
    st->idem_key = cmd->call.idem_key; /* from prepare_call */
    snprintf(step, sizeof(step), "%d", st->idx);
    snprintf(gen, sizeof(gen), "%d", saga->generation);
    snprintf(att, sizeof(att), "%d", cmd->dec.attempt);
    {
        const char *vals[] = {saga->saga_id, step, comp ? "compensate" : "forward",
                              gen,           att,  cmd->call.idem_key};
        worker_write_attempt(w, cmd, vals);
    }
    flush(w, saga);
    cmd->calls = true;
}

/* saga.release: the hold of a held saga ended (its timer, or
 * sagad_release_hold()); the compensation starts below the failed step. */
static void decide_release(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga)
{
    worker_step_t *st = NULL;
    sg_err_t err;

    if (!saga) {
        sg_err_set(&err, SG_ERRCLASS_POISON, "input.saga.unknown",
                   "saga.release for saga %s, which does not exist", cmd->dec.saga_id);
        dead_letter(w, cmd, NULL, -1, false, &err, NULL);
        return;
    }
    if (cmd->dec.generation != saga->generation) {
        stale(w, cmd, "the hold belongs to an older generation (the saga was replayed)");
        return;
    }
    if (saga->status != WORKER_SAGA_HELD) {
        stale(w, cmd, "the saga is not held");
        return;
    }
    for (int i = saga->nsteps - 1; i >= 0 && !st; i--)
        if (saga->steps[i].status == WORKER_STEP_FAILED)
            st = &saga->steps[i];
    if (!st) {
        stale(w, cmd, "a held saga without a failed step");
        return;
    }
    /* step_failed() stored the dead letter's code with the step. */
    sg_err_set(&err, SG_ERRCLASS_POISON, st->error_code,
               "the hold of the dead-lettered step %s ended without a replay: compensating",
               st->name);
    begin_compensation(w, saga, st->idx, &err);
    flush(w, saga);
}

void worker_saga_decide(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga)
{
    static const char *const types[] = {[SG_CMD_START] = "saga.start",
                                        [SG_CMD_EXECUTE] = "step.execute",
                                        [SG_CMD_COMPENSATE] = "step.compensate",
                                        [SG_CMD_RELEASE] = "saga.release",
                                        [SG_CMD_POISON] = "undecodable"};
    const char *outcome;

    w->decided = NULL;
    w->cur = cmd;
    switch (cmd->dec.type) {
    case SG_CMD_POISON:
        dead_letter(w, cmd, NULL, -1, false, &cmd->dec.err, NULL);
        break;
    case SG_CMD_RELEASE:
        decide_release(w, cmd, saga);
        break;
    case SG_CMD_START:
        decide_start(w, cmd, saga);
        break;
    case SG_CMD_EXECUTE:
    case SG_CMD_COMPENSATE:
        decide_step(w, cmd, saga);
        break;
    }
    w->cur = NULL;
    if (cmd->unchained || cmd->defer)
        return; /* decided again later: counted then */
    /* Nothing said otherwise: a saga.start was stored, a step failed
     * before any call (deadline, bad arguments). */
    outcome = cmd->calls                      ? "called"
              : w->decided                    ? w->decided
              : cmd->dec.type == SG_CMD_START ? "started"
                                              : "failed";
    sg_metrics_batch_inc(w->metrics, SG_M_COMMANDS_CONSUMED,
                         SG_LABELS(types[cmd->dec.type], outcome));
}

/* ---- outcomes ---------------------------------------------------------- */

static void finish_attempt(worker_t *w, worker_cmd_t *cmd)
{
    worker_result_t *r = &cmd->result;
    sg_json_t *env = sg_json_new_object(), *meta = sg_json_new_object(), *data = NULL;
    static const char *const status_names[] = {"ok", "error", "timeout"};
    char id[24], lat[24];
    char *text;

    sg_json_add_str(env, "status", status_names[r->status]);
    if (r->status != WORKER_OK) {
        sg_json_add_str(env, "error_code", r->err.code);
        sg_json_add_str(env, "class", sg_errclass_name(r->err.cls));
        sg_json_add_bool(env, "retriable", r->err.retriable);
        sg_json_add_str(env, "message", r->err.message);
    } else {
        sg_json_add_null(env, "error_code");
        sg_json_add_null(env, "class");
        sg_json_add_bool(env, "retriable", false);
        sg_json_add_null(env, "message");
    }
    if (r->data && !(data = sg_json_parse(r->data, strlen(r->data), &w->limits, NULL))) {
        /* Not JSON: kept as a string. */
        data = sg_json_new_object();
        sg_json_add_str(data, "text", r->data);
    }
    if (data)
        sg_json_add_node(env, "data", data);
    else
        sg_json_add_null(env, "data");
    sg_json_add_str(meta, "tool", cmd->call.tool->name);
    sg_json_add_int(meta, "attempt", cmd->call.attempt);
    sg_json_add_int(meta, "latency_ms", r->latency_ms);
    sg_json_add_str(meta, "idempotency_key", cmd->call.idem_key);
    if (r->retry_after_ms)
        sg_json_add_int(meta, "retry_after_ms", r->retry_after_ms);
    sg_json_add_node(env, "metadata", meta);
    text = sg_json_print(env);
    snprintf(id, sizeof(id), "%lld", (long long)cmd->attempt_id);
    snprintf(lat, sizeof(lat), "%lld", (long long)r->latency_ms);
    {
        const char *vals[] = {id,
                              status_names[r->status],
                              r->status == WORKER_OK ? NULL : r->err.code,
                              r->status == WORKER_OK ? NULL : sg_errclass_name(r->err.cls),
                              lat,
                              text};
        worker_write_attempt_done(w, vals);
    }
    free(text);
    sg_json_destroy(env);
}

/* A retry of (step, phase) after attempt: the timer, the event and the
 * budget.  Returns false (err set to why) when no retry is left. */
static bool schedule_retry(worker_t *w, worker_saga_t *saga, worker_step_t *st, bool comp,
                           const worker_cmd_t *cmd, sg_err_t *why)
{
    const worker_result_t *r = &cmd->result;
    int attempt = cmd->dec.attempt;
    /* The policy of the tool that was called: its retry, or its
     * compensate_retry when it ran as a compensation. */
    const sg_tool_t *tool = cmd->call.tool;
    const sg_policy_t *def = comp ? &w->comp_retry : &w->retry;
    const sg_policy_t *own = tool ? (comp ? &tool->comp_retry : &tool->retry) : NULL;
    sg_backoff_t b;
    int max;
    uint64_t delay;
    int64_t budget = saga->retry_budget >= 0 ? saga->retry_budget : w->budget_ms;
    sg_json_t *body;
    char at[40];

    max = own && own->max_attempts ? own->max_attempts : def->max_attempts;
    b.base_ms = (uint64_t)(own && own->base_ms ? own->base_ms : def->base_ms);
    b.cap_ms = (uint64_t)(own && own->cap_ms ? own->cap_ms : def->cap_ms);
    if (attempt >= max) {
        sg_err_set(why, SG_ERRCLASS_POISON,
                   comp ? "runtime.compensation_exhausted" : "runtime.budget.attempts_exhausted",
                   "%s of step %s failed %d times (limit %d); last error %s: %s",
                   comp ? "compensation" : "attempt", st->name, attempt, max, r->err.code,
                   r->err.message);
        return false;
    }
    delay = sg_backoff_delay_ms(&b, (unsigned)(attempt - 1), (uint64_t)r->retry_after_ms, &w->rng);
    if (!comp && budget > 0 && saga->retry_spent + (int64_t)delay > budget) {
        sg_err_set(why, SG_ERRCLASS_POISON, "runtime.budget.retry_exhausted",
                   "the saga's retry budget of %lld ms is spent (%lld ms used, next wait %llu "
                   "ms); last error %s: %s",
                   (long long)budget, (long long)saga->retry_spent, (unsigned long long)delay,
                   r->err.code, r->err.message);
        return false;
    }
    if (!comp)
        saga->retry_spent += (int64_t)delay;
    saga->dirty = true;
    sg_metrics_batch_inc(w->metrics, SG_M_RETRIES_SCHEDULED, SG_LABELS(r->err.code));
    if (comp)
        sg_metrics_batch_inc(w->metrics, SG_M_COMPENSATIONS, SG_LABELS("retry"));
    command(w, saga, st->idx, comp, attempt + 1, delay > 0 ? (int64_t)delay : 0);
    body = step_body(st);
    sg_json_add_str(body, "phase", comp ? "compensate" : "forward");
    sg_json_add_int(body, "attempt", attempt + 1);
    sg_json_add_int(body, "delay_ms", (int64_t)delay);
    iso_time(at, sizeof(at), (int64_t)delay);
    sg_json_add_str(body, "retry_at", at);
    add_error(body, &r->err);
    event(w, saga, "step.retry_scheduled", body);
    w->stats.retries++;
    return true;
}

/* A failed call: a retry while the error is retriable and attempts and
 * budget are left; else the step fails (a forward step's poison, which
 * includes exhausted retries, is dead-lettered) or its compensation does. */
static void on_failure(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga, worker_step_t *st,
                       bool comp)
{
    const sg_err_t *err = &cmd->result.err;
    sg_err_t why;

    if (err->retriable) {
        if (schedule_retry(w, saga, st, comp, cmd, &why))
            return;
        err = &why;
    }
    if (comp)
        comp_failed(w, cmd, saga, st, err);
    else
        step_failed(w, cmd, saga, st, err, err->cls == SG_ERRCLASS_POISON);
}

/* The call's metrics, whatever the saga does with its outcome. */
static void count_call(worker_t *w, const worker_cmd_t *cmd)
{
    const char *tool = cmd->call.tool->name;
    const worker_result_t *r = &cmd->result;

    sg_metrics_batch_observe(w->metrics, SG_M_STEP_DURATION, SG_LABELS(tool),
                             (double)r->latency_ms / 1000.0);
    if (cmd->dec.type == SG_CMD_COMPENSATE) {
        if (r->status == WORKER_OK)
            sg_metrics_batch_inc(w->metrics, SG_M_COMPENSATIONS, SG_LABELS("ok"));
        return;
    }
    sg_metrics_batch_inc(
        w->metrics, SG_M_STEPS,
        SG_LABELS(tool, r->status == WORKER_OK ? "ok" : sg_errclass_name(r->err.cls)));
}

static void complete(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga)
{
    bool comp = cmd->dec.type == SG_CMD_COMPENSATE;
    worker_step_t *st;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    finish_attempt(w, cmd);
    w->stats.calls++;
    count_call(w, cmd);
    ctx.saga_id = cmd->dec.saga_id;
    ctx.step = cmd->call.step_name;
    ctx.attempt = cmd->dec.attempt;
    if (cmd->result.status != WORKER_OK) {
        ctx.error_code = cmd->result.err.code;
        sg_log(SG_LOG_INFO, &ctx, "%s call failed (%s): %s", comp ? "compensation" : "step",
               sg_errclass_name(cmd->result.err.cls), cmd->result.err.message);
    } else {
        sg_log(SG_LOG_DEBUG, &ctx, "%s call succeeded in %lld ms", comp ? "compensation" : "step",
               (long long)cmd->result.latency_ms);
    }
    if (!saga || saga->generation != cmd->dec.generation || cmd->dec.step >= saga->nsteps) {
        stale(w, cmd, "the saga moved on while the call ran");
        return;
    }
    st = &saga->steps[cmd->dec.step];
    if ((comp ? st->comp_attempts : st->attempts) != cmd->dec.attempt ||
        st->status != (comp ? WORKER_STEP_COMPENSATING : WORKER_STEP_RUNNING)) {
        stale(w, cmd, "the step moved on while the call ran");
        return;
    }
    if (comp) {
        if (cmd->result.status == WORKER_OK) {
            set_step(saga, st, WORKER_STEP_COMPENSATED);
            event(w, saga, "step.compensated", step_body(st));
            next_compensation(w, saga, st->idx - 1);
        } else {
            on_failure(w, cmd, saga, st, true);
        }
    } else if (cmd->result.status == WORKER_OK) {
        sg_json_t *b = step_body(st);
        set_step(saga, st, WORKER_STEP_SUCCEEDED);
        st->result = cmd->result.data ? cmd->result.data : "null";
        if (cmd->result.data && !sg_json_utf8_valid(st->result, strlen(st->result)))
            st->result = "null";
        sg_json_add_int(b, "attempt", cmd->dec.attempt);
        event(w, saga, "step.succeeded", b);
        if (st->idx + 1 < saga->nsteps)
            command(w, saga, st->idx + 1, false, 1, 0);
        else
            terminal(w, saga, WORKER_SAGA_COMPLETED);
    } else {
        on_failure(w, cmd, saga, st, false);
    }
    flush(w, saga);
}

void worker_saga_complete(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga)
{
    w->cur = cmd;
    complete(w, cmd, saga);
    w->cur = NULL;
}
