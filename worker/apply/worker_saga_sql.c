/* The saga state machine's side that touches PostgreSQL and Kafka: the
 * load of a batch's sagas into typed rows (worker_sql_load), and the apply
 * of a decision's outcome (worker_decide.h) into the open transaction:
 * its rows into the batch's writes (worker_writes.c), the statements of
 * its dead letters and interrupted attempts into the pipeline, its log
 * lines and metrics.  Owns the column order of the load, the dead-letter
 * statement and what it takes from the Kafka message.
 *
 * worker_saga_decide and worker_saga_complete, which the loop calls, are
 * each: read the clock and the message, decide (worker_saga.c), apply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_text.h"
#include "sagad/sg_version.h"
#include "../decide/worker_decide.h"
#include "worker_observe.h"

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
    L_ORIGIN,
    L_KEY_GEN,
    L_IDEM_KEY,
    L_RESULT,
    L_EFFECT,
    L_FLOW,
    L_OUTPUT_SPEC,
    L_ACTION,
    L_OUTPUT,
    L_APPROVAL,
    L_METADATA,
    L_GROUP,
    L_POLICY,
    L_DONE_SEQ,
    L_CALLING,
    L_COMP_KEY_GEN,
    L_SUBMITTED_BY,
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
    "st.attempts, st.comp_attempts, st.error_code, s.origin, st.key_generation, "
    "st.idempotency_key, CASE WHEN s.results_flow OR st.status = 'compensating' "
    "OR st.grp IS NOT NULL THEN st.result::text END, st.forward_effect, s.results_flow, "
    "CASE WHEN s.results_flow THEN (s.definition->'output')::text END, st.agent_action, "
    "s.output::text, st.approval::text, "
    "CASE WHEN st.approval IS NOT NULL THEN s.metadata::text END, st.grp, st.grp_policy, "
    "st.done_seq, st.calling, st.comp_key_generation, s.submitted_by "
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
    saga->status_written = saga->status;
    saga->generation = (int)sg_pg_res_int(res, r, L_GEN, 1);
    saga->seq = sg_pg_res_int(res, r, L_SEQ, 0);
    saga->retry_spent = sg_pg_res_int(res, r, L_SPENT, 0);
    saga->retry_budget = sg_pg_res_int(res, r, L_BUDGET, -1);
    saga->past_deadline = strcmp(sg_pg_res_get(res, r, L_PAST_DEADLINE), "t") == 0;
    saga->input = sg_pg_res_get(res, r, L_INPUT);
    saga->traceparent = sg_pg_res_get(res, r, L_TRACEPARENT);
    saga->origin = sg_pg_res_get(res, r, L_ORIGIN);
    saga->results_flow = strcmp(sg_pg_res_get(res, r, L_FLOW), "t") == 0;
    saga->output_spec = sg_pg_res_get(res, r, L_OUTPUT_SPEC);
    saga->stored_output = sg_pg_res_get(res, r, L_OUTPUT);
    saga->submitted_by = sg_pg_res_get(res, r, L_SUBMITTED_BY);
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
        st->key_generation = (int)sg_pg_res_int(res, r, L_KEY_GEN, 0);
        st->forward_key = sg_pg_res_get(res, r, L_IDEM_KEY);
        st->done_result = sg_pg_res_get(res, r, L_RESULT);
        st->done_effect = sg_pg_res_get(res, r, L_EFFECT);
        st->done_action = sg_pg_res_get(res, r, L_ACTION);
        st->approval = sg_pg_res_get(res, r, L_APPROVAL);
        st->group = sg_pg_res_get(res, r, L_GROUP);
        st->policy = worker_policy_parse(sg_pg_res_get(res, r, L_POLICY));
        st->done_seq = sg_pg_res_int(res, r, L_DONE_SEQ, 0);
        st->calling = strcmp(sg_pg_res_get(res, r, L_CALLING), "t") == 0;
        st->comp_key_generation = (int)sg_pg_res_int(res, r, L_COMP_KEY_GEN, 0);
        if (sg_pg_res_get(res, r, L_METADATA))
            saga->metadata = sg_pg_res_get(res, r, L_METADATA);
        if (idx + 1 > saga->nsteps)
            saga->nsteps = idx + 1;
    }
    *row = r;
}

/* ---- the apply --------------------------------------------------------- */

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

static char *msg_headers_json(const sg_kafka_msg_t *msg)
{
    sg_json_t *h = sg_json_new_object();
    const char *name;
    const void *val;
    size_t len;
    char *text;

    for (size_t i = 0; msg && sg_kafka_msg_header_at(msg, i, &name, &val, &len); i++) {
        char *n = sg_text_or_base64(name, strlen(name));
        if (!val) {
            sg_json_add_null(h, n);
        } else {
            char *v = sg_text_or_base64(val, len);
            sg_json_add_str(h, n, v);
            free(v);
        }
        free(n);
    }
    text = sg_json_print(h);
    sg_json_destroy(h);
    return text;
}

/* The longest header value a forward keeps as it came.  A valid
 * sagad-auth is under 256 bytes ("v1", a principal of 64, a key id of 32,
 * a time, 88 characters of signature): one longer is malformed however it
 * is cut, and is cut here. */
#define FORWARD_HEADER_MAX 512

/* A header of the forwarded message, as the outbox's JSON holds it: its
 * bytes when they are UTF-8 without NUL, up to FORWARD_HEADER_MAX; else
 * with the bytes escaped (\xNN), which no signature parses, so the
 * decision refuses it as input.auth.malformed, as it would have the
 * original. */
static void forward_header(sg_json_t *h, const sg_kafka_msg_t *msg, const char *name)
{
    size_t len = 0;
    const void *val = sg_kafka_msg_header(msg, name, &len);
    char *text;

    if (!val)
        return;
    if (len <= FORWARD_HEADER_MAX && sg_utf8_valid(val, len))
        text = sg_xstrndup(val, len);
    else
        text = sg_text_visible_n(val, len < FORWARD_HEADER_MAX ? len : FORWARD_HEADER_MAX, false);
    sg_json_add_str(h, name, text);
    free(text);
}

void worker_forward(worker_t *w, worker_cmd_t *cmd, int64_t now_s)
{
    static const char *const types[] = {[SG_CMD_CANCEL] = "saga.cancel",
                                        [SG_CMD_APPROVE] = "saga.approve",
                                        [SG_CMD_REJECT] = "saga.reject"};
    const sg_kafka_msg_t *msg = cmd->msg;
    const char *type = types[cmd->dec.type];
    sg_json_t *h = sg_json_new_object();
    char from[320], at[24], *headers, *payload;
    size_t len = 0;
    const void *bytes = sg_kafka_msg_payload(msg, &len);
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    snprintf(from, sizeof(from), "%s:%d:%lld", sg_kafka_msg_topic(msg),
             (int)sg_kafka_msg_partition(msg), (long long)cmd->offset);
    snprintf(at, sizeof(at), "%lld", (long long)now_s);
    sg_json_add_str(h, "sagad-type", type);
    forward_header(h, msg, SG_AUTH_HEADER);
    forward_header(h, msg, "traceparent");
    sg_json_add_str(h, WORKER_FORWARDED_FROM, from);
    sg_json_add_str(h, WORKER_FORWARDED_AT, at);
    headers = sg_json_print(h);
    /* The payload decoded as UTF-8 without NUL (sg_submit_decode), so the
     * text column carries its exact bytes; the key is the saga id
     * (sg_submit_check_key). */
    payload = sg_xstrndup(bytes ? bytes : "", len);
    worker_write_message(w, 0, w->topic_internal, cmd->dec.saga_id, headers, payload);
    sg_metrics_batch_inc(w->metrics, SG_M_COMMANDS_CONSUMED, SG_LABELS(type, "forwarded"));
    w->stats.forwarded++;
    ctx.saga_id = cmd->dec.saga_id;
    ctx.topic = sg_kafka_msg_topic(msg);
    ctx.partition = sg_kafka_msg_partition(msg);
    ctx.offset = cmd->offset;
    sg_log(SG_LOG_DEBUG, &ctx, "%s forwarded to %s, decided when read there", type,
           w->topic_internal);
    free(payload);
    free(headers);
    sg_json_destroy(h);
}

/* The payload a dead letter's log line shows at most: the line holds 32 KiB. */
#define DL_LOG_PAYLOAD 12288

/* What the dead letter says, for its log line: the envelope of the ledger
 * row and DLQ message but the trail (read by the statement) and with the
 * payload cut to DL_LOG_PAYLOAD bytes (its size is given). */
static char *dead_letter_log(const worker_t *w, const worker_cmd_t *cmd, const worker_op_t *op,
                             const char *message, const char *key64, const char *headers)
{
    const sg_err_t *err = op->u.dead.err;
    const sg_kafka_msg_t *msg = cmd->msg;
    sg_json_t *env = sg_json_new_object(), *orig = sg_json_new_object();
    size_t len = 0;
    const void *payload = sg_kafka_msg_payload(msg, &len);
    char *text;

    sg_json_add_str(env, "error_code", err->code);
    sg_json_add_str(env, "error_class", sg_errclass_name(err->cls));
    sg_json_add_str(env, "message", message);
    if (op->saga_id && *op->saga_id)
        sg_json_add_str(env, "saga_id", op->saga_id);
    if (op->u.dead.saga_name)
        sg_json_add_str(env, "saga_name", op->u.dead.saga_name);
    if (op->u.dead.step >= 0) {
        sg_json_add_int(env, "step_index", op->u.dead.step);
        if (op->u.dead.step_name)
            sg_json_add_str(env, "step", op->u.dead.step_name);
        sg_json_add_str(env, "phase", op->u.dead.compensate ? "compensate" : "forward");
    }
    if (op->u.dead.tool)
        sg_json_add_str(env, "tool", op->u.dead.tool);
    sg_json_add_int(env, "generation", op->u.dead.generation);
    sg_json_add_str(env, "worker_id", w->worker_id);
    if (sg_kafka_msg_topic(msg))
        sg_json_add_str(orig, "topic", sg_kafka_msg_topic(msg));
    sg_json_add_int(orig, "partition", sg_kafka_msg_partition(msg));
    sg_json_add_int(orig, "offset", cmd->offset);
    if (key64)
        sg_json_add_str(orig, "key_base64", key64);
    if (sg_kafka_msg_timestamp(msg) >= 0)
        sg_json_add_int(orig, "timestamp_ms", sg_kafka_msg_timestamp(msg));
    if (headers)
        sg_json_add_raw(orig, "headers", headers);
    sg_json_add_node(env, "original", orig);
    sg_json_add_int(env, "payload_bytes", (int64_t)len);
    if (payload && sg_utf8_valid(payload, len)) {
        size_t cut = len > DL_LOG_PAYLOAD ? DL_LOG_PAYLOAD : len;
        char *p = sg_xstrndup(payload, cut);
        p[sg_utf8_cut(p, cut)] = '\0';
        sg_json_add_str(env, "payload", p);
        free(p);
        sg_json_add_bool(env, "payload_truncated", cut < len);
    } else if (payload) {
        char *b = sg_base64(payload, len > DL_LOG_PAYLOAD ? DL_LOG_PAYLOAD : len);
        sg_json_add_str(env, "payload_base64", b);
        free(b);
        sg_json_add_bool(env, "payload_truncated", len > DL_LOG_PAYLOAD);
    }
    text = sg_json_print(env);
    sg_json_destroy(env);
    return text;
}

/* Writes a dead letter (ledger row + DLQ message, one statement) for cmd's
 * message.  The trail is every attempt row of (saga, step, phase,
 * generation), read in the same transaction, so it includes the attempt
 * finished just before; steps_at the saga's steps as the decision leaves
 * them (worker_outcome.c).  The DLQ message's headers let plain Kafka tools
 * filter without parsing JSON. */
static void apply_dead_letter(worker_t *w, const worker_cmd_t *cmd, const worker_op_t *op)
{
    static const char sql[] =
        "WITH t AS (SELECT count(*) AS n, "
        "  coalesce(jsonb_agg(jsonb_build_object('attempt', a.attempt, 'started_at', a.started_at, "
        "    'finished_at', a.finished_at, 'status', a.status, 'error_code', a.error_code, "
        "    'error_class', a.error_class, 'message', a.envelope->>'message', 'latency_ms', "
        "    a.latency_ms, 'worker_id', a.worker_id, 'args', a.args, "
        "    'agent_action', a.envelope->>'agent_action') ORDER BY a.id), '[]') AS trail, "
        "  min(a.started_at) AS first_at, max(coalesce(a.finished_at, a.started_at)) AS last_at "
        "  FROM attempts a WHERE a.saga_id = $4 AND a.step_idx = $6::int AND a.phase = $9 "
        "  AND a.generation = $19::int), "
        "dl AS (INSERT INTO dead_letters (error_code, error_class, message, saga_id, saga_name, "
        "  step_idx, step_name, tool, phase, attempts, trail, original_topic, original_partition, "
        "  original_offset, original_key, original_timestamp, original_headers, payload, "
        "  first_failure_at, last_failure_at, worker_id, sagad_version, agent_action, steps_at) "
        "  SELECT $1, $2, $3, $4, $5, $6::int, $7, $8, $9, t.n, t.trail, $10, $11::int, "
        "  $12::bigint, decode($13, 'base64'), to_timestamp($14::bigint / 1000.0), $15::jsonb, "
        "  decode($16, 'base64'), coalesce(t.first_at, now()), greatest(t.last_at, now()), "
        "  $17, $18, $23, $24::jsonb FROM t RETURNING *), "
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
    const sg_err_t *err = op->u.dead.err;
    const sg_kafka_msg_t *msg = cmd->msg;
    const void *key = NULL, *payload = NULL;
    size_t key_len = 0, len = 0;
    char *key64 = NULL, *payload64, *headers, *log, message[sizeof(err->message) + 80];
    bool st = op->u.dead.step >= 0;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    /* The record keeps to both limits: the producer's (max_outgoing) and
     * the one every sagad message keeps to (limits.max_message_bytes). */
    size_t dl_cap = w->max_outgoing < w->limits.max_bytes ? w->max_outgoing : w->limits.max_bytes;

    key = sg_kafka_msg_key(msg, &key_len);
    if (key)
        key64 = sg_base64(key, key_len);
    payload = sg_kafka_msg_payload(msg, &len);
    payload64 = sg_base64(payload ? payload : "", payload ? len : 0);
    /* The reduced dead letter (worker_txn.c's last resort) keeps what
     * surely fits: no headers, and the message with every control
     * character and byte that is not UTF-8 written \xHH. */
    headers = cmd->dl_minimal ? NULL : msg_headers_json(msg);
    if (cmd->dl_minimal) {
        char *shown = sg_text_visible(err->message, false);
        snprintf(message, sizeof(message), "reduced dead letter (headers left out): %.*s",
                 (int)sg_utf8_cut(shown, sizeof(err->message)), shown);
        free(shown);
    } else {
        snprintf(message, sizeof(message), "%s", err->message);
    }
    {
        const char *params[] = {
            err->code,
            sg_errclass_name(err->cls),
            message,
            op->saga_id,
            op->u.dead.saga_name,
            st ? SG_PG_INT(op->u.dead.step) : NULL,
            op->u.dead.step_name,
            op->u.dead.tool,
            st ? (op->u.dead.compensate ? "compensate" : "forward") : NULL,
            sg_kafka_msg_topic(msg),
            SG_PG_INT(sg_kafka_msg_partition(msg)),
            SG_PG_INT(cmd->offset),
            key64,
            sg_kafka_msg_timestamp(msg) >= 0 ? SG_PG_INT(sg_kafka_msg_timestamp(msg)) : NULL,
            headers,
            payload64,
            w->worker_id,
            SAGAD_VERSION,
            SG_PG_INT(op->u.dead.generation),
            w->topic_dlq,
            op->u.dead.traceparent,
            SG_PG_INT(dl_cap),
            op->u.dead.agent_action,
            op->u.dead.steps_at};
        send(w, sql, 24, params);
    }
    log = dead_letter_log(w, cmd, op, message, key64, headers);
    free(key64);
    free(payload64);
    free(headers);
    ctx.saga_id = op->u.dead.has_saga ? op->saga_id : NULL;
    ctx.step = op->u.dead.step_name;
    ctx.error_code = err->code;
    ctx.topic = sg_kafka_msg_topic(msg);
    ctx.partition = sg_kafka_msg_partition(msg);
    ctx.offset = cmd->offset;
    if (w->log_trace_id[0]) {
        ctx.trace_id = w->log_trace_id;
        ctx.span_id = w->log_span_id;
    }
    snprintf(message, sizeof(message), "dead-lettered: %s", err->message);
    sg_log_json(SG_LOG_WARN, &ctx, message, "dead_letter", log);
    free(log);
}

static void apply_interrupted(worker_t *w, const worker_op_t *op)
{
    const char *params[] = {op->saga_id, SG_PG_INT(op->u.attempt.step),
                            op->u.attempt.compensate ? "compensate" : "forward",
                            SG_PG_INT(op->u.attempt.generation), SG_PG_INT(op->u.attempt.attempt)};

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

static void apply_saga_new(worker_t *w, const worker_op_t *op)
{
    const char *vals[] = {
        op->saga_id,
        op->u.saga_new.name,
        op->u.saga_new.definition,
        op->u.saga_new.input,
        op->u.saga_new.metadata,
        op->u.saga_new.deadline,
        op->u.saga_new.retry_budget_ms >= 0 ? SG_PG_INT(op->u.saga_new.retry_budget_ms) : NULL,
        op->u.saga_new.traceparent,
        op->u.saga_new.steps,
        op->u.saga_new.origin[0] ? op->u.saga_new.origin : NULL,
        op->u.saga_new.submitted_by};

    worker_write_saga_new(w, vals);
}

static void apply_attempt(worker_t *w, worker_cmd_t *cmd, const worker_op_t *op)
{
    const char *vals[] = {op->saga_id,
                          SG_PG_INT(op->u.attempt.step),
                          op->u.attempt.compensate ? "compensate" : "forward",
                          SG_PG_INT(op->u.attempt.generation),
                          SG_PG_INT(op->u.attempt.attempt),
                          op->u.attempt.idem_key,
                          op->u.attempt.args};

    worker_write_attempt(w, cmd, vals);
}

static void apply_attempt_done(worker_t *w, const worker_op_t *op)
{
    bool ok = op->u.done.status == WORKER_OK;
    const char *vals[] = {
        SG_PG_INT(op->u.done.id),          worker_status_name(op->u.done.status),
        ok ? NULL : op->u.done.error_code, ok ? NULL : sg_errclass_name(op->u.done.cls),
        SG_PG_INT(op->u.done.latency_ms),  op->u.done.envelope};

    worker_write_attempt_done(w, vals);
}

static void apply_step(worker_t *w, const worker_op_t *op)
{
    const char *vals[] = {
        op->saga_id,
        SG_PG_INT(op->u.step.idx),
        worker_step_status_name(op->u.step.status),
        SG_PG_INT(op->u.step.attempts),
        SG_PG_INT(op->u.step.comp_attempts),
        op->u.step.calling ? "t" : "f",
        op->u.step.result,
        op->u.step.error_code,
        op->u.step.idem_key,
        op->u.step.effect,
        op->u.step.agent_action,
        op->u.step.done_seq > 0 ? SG_PG_INT(op->u.step.done_seq) : NULL,
        op->u.step.comp_key_generation > 0 ? SG_PG_INT(op->u.step.comp_key_generation) : NULL};

    worker_write_step(w, op->u.step.slot, vals);
}

static void apply_saga(worker_t *w, const worker_op_t *op)
{
    const char *vals[] = {op->saga_id, worker_saga_status_name(op->u.saga.status),
                          SG_PG_INT(op->u.saga.seq), SG_PG_INT(op->u.saga.retry_spent),
                          op->u.saga.output};

    worker_write_saga(w, op->u.saga.slot, vals);
}

static void apply_metric(worker_t *w, const worker_op_t *op)
{
    const char *const *labels =
        op->u.metric.labels[0] ? (const char *const *)op->u.metric.labels : NULL;

    if (op->u.metric.observe)
        sg_metrics_batch_observe(w->metrics, op->u.metric.id, labels, op->u.metric.value);
    else
        sg_metrics_batch_inc(w->metrics, op->u.metric.id, labels);
}

/* A control command's row in its saga's history: who asked, why, and
 * whether it was carried out (schemas/sql/0016_control.sql). */
static void apply_control(worker_t *w, const worker_op_t *op)
{
    const char *params[] = {op->saga_id,
                            op->u.control.command,
                            op->u.control.command_id,
                            op->u.control.step >= 0 ? SG_PG_INT(op->u.control.step) : NULL,
                            op->u.control.by,
                            op->u.control.reason,
                            op->u.control.outcome,
                            op->u.control.error_code,
                            op->u.control.principal};

    send(w,
         "INSERT INTO saga_controls (saga_id, command, command_id, step_idx, requested_by, reason, "
         "outcome, error_code, principal) VALUES ($1, $2, $3, $4::int, $5, $6, $7, $8, $9)",
         9, params);
    if (op->u.control.discard_held)
        send(w,
             "UPDATE dead_letters SET status = 'discarded', resolved_at = now(), resolved_by = $2, "
             "resolution_reason = 'saga cancelled (' || $3 || '): ' || $4 "
             "WHERE saga_id = $1 AND status = 'pending'",
             4,
             (const char *[]){op->saga_id, op->u.control.by, op->u.control.command_id,
                              op->u.control.reason});
}

static void apply_op(worker_t *w, worker_cmd_t *cmd, const worker_op_t *op)
{
    switch (op->kind) {
    case WORKER_OP_SAGA_NEW:
        apply_saga_new(w, op);
        break;
    case WORKER_OP_ATTEMPT:
        apply_attempt(w, cmd, op);
        break;
    case WORKER_OP_ATTEMPT_DONE:
        apply_attempt_done(w, op);
        break;
    case WORKER_OP_INTERRUPTED:
        apply_interrupted(w, op);
        break;
    case WORKER_OP_STEP:
        apply_step(w, op);
        break;
    case WORKER_OP_SAGA:
        apply_saga(w, op);
        break;
    case WORKER_OP_MESSAGE:
        worker_write_message(w, op->u.msg.delay_ms, op->u.msg.topic, op->u.msg.key,
                             op->u.msg.headers, op->u.msg.payload);
        break;
    case WORKER_OP_DEAD_LETTER:
        apply_dead_letter(w, cmd, op);
        break;
    case WORKER_OP_LOG: {
        sg_log_ctx_t ctx = op->u.log.ctx;
        if (w->log_trace_id[0]) {
            ctx.trace_id = w->log_trace_id;
            ctx.span_id = w->log_span_id;
        }
        sg_log(op->u.log.level, &ctx, "%s", op->u.log.text);
        break;
    }
    case WORKER_OP_METRIC:
        apply_metric(w, op);
        break;
    case WORKER_OP_CONTROL:
        apply_control(w, op);
        break;
    }
}

static void stats_add(worker_stats_t *to, const worker_stats_t *d)
{
    to->consumed += d->consumed;
    to->stale += d->stale;
    to->started += d->started;
    to->rejected += d->rejected;
    to->calls += d->calls;
    to->dead_letters += d->dead_letters;
    to->completed += d->completed;
    to->compensated += d->compensated;
    to->failed += d->failed;
    to->retries += d->retries;
    to->fenced += d->fenced;
    to->held += d->held;
    to->chained += d->chained;
    to->copies += d->copies;
    to->cancelled += d->cancelled;
}

/* Writes out's effects in order, and hands the command what the loop
 * does next with it: its call, its chained follower, its fresh saga. */
static void apply(worker_t *w, worker_cmd_t *cmd, worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++)
        apply_op(w, cmd, &out->ops[i]);
    stats_add(&w->stats, &out->stats);
    if (out->defer)
        cmd->defer = true;
    if (out->unchained)
        cmd->unchained = true;
    if (out->calls) {
        cmd->calls = true;
        cmd->call = out->call;
        memset(&out->call, 0, sizeof(out->call));
    }
    if (out->follow.set && !cmd->follow.set) {
        cmd->follow = out->follow;
        out->follow.set = false;
    }
    if (out->nmembers > 0 && cmd->nmembers == 0) {
        memcpy(cmd->members, out->members, (size_t)out->nmembers * sizeof(*cmd->members));
        cmd->nmembers = out->nmembers;
        out->nmembers = 0;
    }
    if (out->keep_fresh) {
        cmd->fresh = out->fresh;
        out->fresh = NULL;
    }
}

static int64_t wall_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void decide_apply(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga, bool returned)
{
    const worker_rules_t rules = {
        .reg = w->reg,
        .limits = &w->limits,
        .topic_internal = w->topic_internal,
        .topic_events = w->topic_events,
        .crash_loop_limit = w->crash_loop_limit,
        .hold_ms = w->hold_ms,
        .approval_timeout_ms = w->approval_timeout_ms,
        .event_result_max = w->event_result_max,
        .max_outgoing = w->max_outgoing,
        .budget_ms = w->budget_ms,
        .retry = &w->retry,
        .comp_retry = &w->comp_retry,
        .chain = w->chain,
        .signed_all = w->signed_all,
        .log_level = sg_log_level,
    };
    /* The decision's view of the command (worker_decide.h): no more. */
    worker_dcmd_t dcmd = {
        .dec = &cmd->dec,
        .result = &cmd->result,
        .call = &cmd->call,
        .definition = cmd->definition,
        .offset = cmd->offset,
        .attempt_id = cmd->attempt_id,
        .chained = cmd->chained,
        .isolated = cmd->isolated,
        .answered = cmd->answered,
    };
    worker_input_t in = {
        .cmd = &dcmd,
        .returned = returned,
        .partition = sg_kafka_msg_partition(cmd->msg),
        .now_ms = wall_ms(),
        .rng = &w->rng,
    };
    worker_outcome_t out;

    if (!returned && cmd->dec.type == SG_CMD_START)
        in.traceparent = sg_kafka_msg_header(cmd->msg, "traceparent", &in.traceparent_len);
    worker_decide(&rules, &in, saga, &out);
    if (w->observe) {
        worker_observe_outcome(w->observe, w, cmd, saga, &out);
        /* The ids are printed only for a decision that logs. */
        for (size_t i = 0; i < out.n; i++)
            if (out.ops[i].kind == WORKER_OP_LOG || out.ops[i].kind == WORKER_OP_DEAD_LETTER) {
                worker_log_ids_t ids = {"", ""};
                sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
                worker_observe_log_ids(w->observe, cmd, saga, &out, &ctx, &ids);
                memcpy(w->log_trace_id, ids.trace, sizeof(ids.trace));
                memcpy(w->log_span_id, ids.span, sizeof(ids.span));
                break;
            }
    }
    apply(w, cmd, &out);
    w->log_trace_id[0] = '\0';
    worker_outcome_free(&out);
}

void worker_saga_decide(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga)
{
    decide_apply(w, cmd, saga, false);
}

void worker_saga_complete(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga)
{
    decide_apply(w, cmd, saga, true);
}

const char *worker_cmd_definition(worker_cmd_t *cmd)
{
    if (!cmd->definition)
        cmd->definition = sg_submit_definition(cmd->dec.doc);
    return cmd->definition;
}
