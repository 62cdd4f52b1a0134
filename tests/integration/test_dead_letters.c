/* Dead letters end to end: every route that dead-letters writes the
 * complete record, the same in the dead_letters ledger and on the DLQ
 * topic (with headers plain Kafka tools can filter on), in the transaction
 * that moves the offset past the message or ends the step; and the `held`
 * saga of worker.dead_letter_hold_ms, its release and its replay under a
 * new generation.  Real worker, relay, PostgreSQL and Kafka (tests/support/sg_worker_env.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/sg_worker_env.h"

TestSuite(dead_letters, .init = sgw_setup, .fini = sgw_teardown, .timeout = 120);

/* A forward tool that fails twice and is then exhausted. */
#define FLAKY_TOOL                                                                                 \
    "\"flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "                \
    "\"idempotent\", \"retry\": {\"max_attempts\": 2, \"base_ms\": 10, \"cap_ms\": 20}}"

/* ---- the record ------------------------------------------------------------ */

/* The DLQ message whose sagad-error-code header is code, read until it came. */
static const sgw_msg_t *dlq_wait(sgw_reader_t *dlq, const char *code)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;

    for (;;) {
        for (size_t i = 0; i < dlq->n; i++)
            if (strcmp(dlq->v[i].code, code) == 0)
                return &dlq->v[i];
        cr_assert_lt(sgt_now_s(), deadline, "no %s message on the DLQ topic; worker log: %s", code,
                     sgt_bg_tail(&sgw.worker));
        sgw_expect_worker_alive();
        sgw_reader_poll(dlq, 200);
    }
}

static bool jtrue(const sg_json_t *doc, const char *key)
{
    bool v = false;

    return sg_json_get_bool(doc, "$", key, true, &v, NULL) == 0 && v;
}

/* Runs statements (a script, BEGIN ... COMMIT allowed). */
static void script(const char *sql)
{
    sg_err_t err;

    cr_assert_eq(sg_pg_exec_script(sgw.pg, sql, &err), 0, "%s: %s", sql, err.message);
}

static const char *header(const sgw_msg_t *m, const char *name)
{
    return sg_json_string(sg_json_member(m->headers, name));
}

/* A member as text: strings as they are, numbers printed, null "-". */
static void member_text(char *out, size_t size, const sg_json_t *doc, const char *key)
{
    const sg_json_t *node = sg_json_member(doc, key);
    char *text;

    if (!node || sg_json_is_null(node)) {
        snprintf(out, size, "-");
    } else if (sg_json_string(node)) {
        snprintf(out, size, "%s", sg_json_string(node));
    } else {
        text = sg_json_print(node);
        snprintf(out, size, "%s", text);
        free(text);
    }
}

/* The record's fields that schemas/dead-letter.schema.json requires (its
 * full check runs in tests/schemas/check.py over the fixtures). */
static void expect_record_shape(const sg_json_t *rec)
{
    static const char *const required[] = {"v",
                                           "type",
                                           "id",
                                           "status",
                                           "error_code",
                                           "error_class",
                                           "message",
                                           "saga_id",
                                           "saga_name",
                                           "step",
                                           "step_name",
                                           "tool",
                                           "phase",
                                           "attempts",
                                           "trail",
                                           "original",
                                           "first_failure_at",
                                           "last_failure_at",
                                           "worker_id",
                                           "sagad_version",
                                           "created_at",
                                           "payload",
                                           "payload_base64",
                                           "payload_bytes",
                                           "payload_sha256",
                                           "payload_omitted"};
    static const char *const original[] = {"topic",      "partition", "offset", "key",
                                           "key_base64", "timestamp", "headers"};
    const sg_json_t *orig = sg_json_member(rec, "original");

    cr_assert_not_null(rec, "the DLQ message is JSON");
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        cr_expect_not_null(sg_json_member(rec, required[i]), "the record has %s", required[i]);
    for (size_t i = 0; i < sizeof(original) / sizeof(original[0]); i++)
        cr_expect_not_null(sg_json_member(orig, original[i]), "the record has original.%s",
                           original[i]);
    cr_expect_eq(sgw_jint(rec, "v"), 1);
    cr_expect_str_eq(sgw_jstr(rec, "type"), "dead_letter");
    cr_expect_str_eq(sgw_jstr(rec, "status"), "pending");
    cr_expect_str_neq(sgw_jstr(rec, "worker_id"), "");
    cr_expect_str_neq(sgw_jstr(rec, "sagad_version"), "");
    cr_expect_eq(sg_json_array_size(sg_json_member(rec, "trail")),
                 (size_t)sgw_jint(rec, "attempts"), "attempts counts the trail");
}

/* The headers repeat the record: filterable without parsing the payload. */
static void expect_headers(const sgw_msg_t *m)
{
    const sg_json_t *rec = m->doc, *orig = sg_json_member(rec, "original");
    static const struct {
        const char *header, *member;
        bool original;
    } pairs[] = {
        {"sagad-error-code", "error_code", false},
        {"sagad-error-class", "error_class", false},
        {"sagad-dead-letter-id", "id", false},
        {"sagad-saga-id", "saga_id", false},
        {"sagad-step", "step_name", false},
        {"sagad-step-index", "step", false},
        {"sagad-tool", "tool", false},
        {"sagad-phase", "phase", false},
        {"sagad-original-topic", "topic", true},
        {"sagad-original-partition", "partition", true},
        {"sagad-original-offset", "offset", true},
    };
    char want[256];

    cr_expect_str_eq(header(m, "sagad-type") ? header(m, "sagad-type") : "", "dead_letter");
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        const char *got = header(m, pairs[i].header);
        member_text(want, sizeof(want), pairs[i].original ? orig : rec, pairs[i].member);
        if (strcmp(want, "-") == 0)
            cr_expect_null(got, "no %s header when the record has no %s", pairs[i].header,
                           pairs[i].member);
        else
            cr_expect_str_eq(got ? got : "(absent)", want, "header %s", pairs[i].header);
    }
}

/* The ledger row of the record, as text: what the tests compare (its
 * original topic as c, the commands topic, or i, the internal one). */
static const char *ledger_row(char *out, size_t size, long long id)
{
    return sgw_q_text(
        out, size,
        "SELECT concat_ws('|', error_code, error_class, coalesce(saga_id, '-'), "
        "coalesce(saga_name, '-'), coalesce(step_idx::text, '-'), coalesce(step_name, '-'), "
        "coalesce(tool, '-'), coalesce(phase, '-'), attempts, jsonb_array_length(trail), "
        "CASE original_topic WHEN '%s' THEN 'c' WHEN '%s' THEN 'i' ELSE '?' END, "
        "original_partition, original_offset, status) FROM dead_letters WHERE id = %lld",
        sgw.topic_cmd, sgw.topic_int, id);
}

/* The same fields from the topic's record, in ledger_row's order. */
static void record_row(char *out, size_t size, const sg_json_t *rec)
{
    static const char *const keys[] = {"error_code", "error_class", "saga_id", "saga_name", "step",
                                       "step_name",  "tool",        "phase",   "attempts"};
    const sg_json_t *orig = sg_json_member(rec, "original");
    char v[256];
    size_t len = 0;

    out[0] = '\0';
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        member_text(v, sizeof(v), rec, keys[i]);
        len += (size_t)snprintf(out + len, size - len, "%s|", v);
    }
    len += (size_t)snprintf(out + len, size - len, "%zu|%s|%lld|%lld|%s",
                            sg_json_array_size(sg_json_member(rec, "trail")),
                            strcmp(sgw_jstr(orig, "topic"), sgw.topic_cmd) == 0   ? "c"
                            : strcmp(sgw_jstr(orig, "topic"), sgw.topic_int) == 0 ? "i"
                                                                                  : "?",
                            sgw_jint(orig, "partition"), sgw_jint(orig, "offset"),
                            sgw_jstr(rec, "status"));
}

/* The stored payload, its record form (text, or base64 when not UTF-8;
 * nothing when omitted), size and SHA-256 all agree with the bytes. */
static void expect_payload(const sg_json_t *rec, const void *orig, size_t len)
{
    char *hex = malloc(2 * len + 1);
    const char *params[4];
    char id[24];
    sg_pg_res_t *res;
    sg_err_t err;

    cr_assert_not_null(hex);
    for (size_t i = 0; i < len; i++)
        sprintf(hex + 2 * i, "%02x", ((const unsigned char *)orig)[i]);
    hex[2 * len] = '\0';
    snprintf(id, sizeof(id), "%lld", sgw_jint(rec, "id"));
    params[0] = id;
    params[1] = hex;
    params[2] = sg_json_string(sg_json_member(rec, "payload"));
    params[3] = sg_json_string(sg_json_member(rec, "payload_base64"));
    cr_assert_eq(
        sg_pg_exec(sgw.pg,
                   "SELECT payload = decode($2, 'hex'), "
                   "coalesce(convert_to($3, 'UTF8') = payload, decode($4, 'base64') = payload), "
                   "octet_length(payload), encode(sha256(payload), 'hex') "
                   "FROM dead_letters WHERE id = $1::bigint",
                   4, params, &res, &err),
        0, "%s", err.message);
    cr_assert_eq(sg_pg_res_rows(res), 1, "the ledger has dead letter %s", id);
    cr_expect_str_eq(sg_pg_res_get(res, 0, 0), "t", "the ledger keeps the original bytes");
    if (jtrue(rec, "payload_omitted"))
        cr_expect_null(sg_pg_res_get(res, 0, 1), "an omitted payload is not in the record");
    else
        cr_expect_str_eq(sg_pg_res_get(res, 0, 1) ? sg_pg_res_get(res, 0, 1) : "(null)", "t",
                         "the record's payload is the original bytes");
    cr_expect_eq(sgw_jint(rec, "payload_bytes"), (long long)len);
    cr_expect_str_eq(sgw_jstr(rec, "payload_sha256"), sg_pg_res_get(res, 0, 3));
    sg_pg_res_destroy(res);
    free(hex);
}

/* The record's trail is the attempts table's, attempt by attempt. */
static void expect_trail(const sg_json_t *rec, const char *saga_id, int step, const char *phase)
{
    const sg_json_t *trail = sg_json_member(rec, "trail");
    char got[1024] = "", want[1024], lat[32];

    for (size_t i = 0; i < sg_json_array_size(trail); i++) {
        const sg_json_t *a = sg_json_array_get(trail, i);
        size_t len = strlen(got);
        member_text(lat, sizeof(lat), a, "latency_ms");
        snprintf(got + len, sizeof(got) - len, "%s%lld=%s/%s/%s/%s", i ? "," : "",
                 sgw_jint(a, "attempt"), sgw_jstr(a, "error_code"), sgw_jstr(a, "error_class"), lat,
                 sgw_jstr(a, "message")[0] ? "msg" : "no-msg");
        cr_expect_str_neq(sgw_jstr(a, "started_at"), "", "each attempt has its time");
    }
    sgw_q_text(want, sizeof(want),
               "SELECT coalesce(string_agg(attempt || '=' || error_code || '/' || error_class || "
               "'/' || coalesce(latency_ms::text, '-') || '/' || CASE WHEN envelope->>'message' "
               "<> '' THEN 'msg' ELSE 'no-msg' END, ',' ORDER BY id), '') FROM attempts WHERE "
               "saga_id = '%s' AND step_idx = %d AND phase = '%s'",
               saga_id, step, phase);
    cr_expect_str_eq(got, want,
                     "the trail is every attempt with its code, class, latency, message");
    cr_expect(strcmp(sgw_jstr(rec, "first_failure_at"), sgw_jstr(rec, "last_failure_at")) <= 0,
              "first failure %s is not after the last %s", sgw_jstr(rec, "first_failure_at"),
              sgw_jstr(rec, "last_failure_at"));
}

/* Everything about one dead letter: shape, headers, ledger row == record
 * row == want, and the payload against the original bytes. */
static void expect_dead_letter(const sgw_msg_t *m, const char *want, const void *orig, size_t len)
{
    char ledger[1024], record[1024];

    expect_record_shape(m->doc);
    expect_headers(m);
    cr_expect_str_eq(ledger_row(ledger, sizeof(ledger), sgw_jint(m->doc, "id")), want,
                     "the ledger row");
    record_row(record, sizeof(record), m->doc);
    cr_expect_str_eq(record, want, "the DLQ record");
    expect_payload(m->doc, orig, len);
}

/* The internal topic's message at offset (partition 0), for its bytes. */
static const sgw_msg_t *command_at(sgw_reader_t *cmds, long long offset)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;

    for (;;) {
        for (size_t i = 0; i < cmds->n; i++)
            if (cmds->v[i].offset == offset && cmds->v[i].partition == 0)
                return &cmds->v[i];
        cr_assert_lt(sgt_now_s(), deadline, "no message at offset %lld of the internal topic",
                     offset);
        sgw_reader_poll(cmds, 200);
    }
}

/* A step-level dead letter: its original message is the command the
 * worker consumed on the internal topic, byte for byte, at the offset the
 * record names. */
static void expect_step_dead_letter(const sgw_msg_t *m, const char *want, const char *phase)
{
    const sg_json_t *orig = sg_json_member(m->doc, "original");
    const sgw_msg_t *cmd;
    sgw_reader_t cmds;

    sgw_reader_open(&cmds, sgw.topic_int);
    cmd = command_at(&cmds, sgw_jint(orig, "offset"));
    expect_dead_letter(m, want, cmd->raw, cmd->len);
    cr_expect_str_eq(sgw_jstr(orig, "key"), sgw_jstr(m->doc, "saga_id"));
    cr_expect_str_eq(m->key, sgw_jstr(m->doc, "saga_id"), "the DLQ message is keyed by saga_id");
    expect_trail(m->doc, sgw_jstr(m->doc, "saga_id"), (int)sgw_jint(m->doc, "step"), phase);
    sgw_reader_close(&cmds);
}

/* ---- input routes: the offset moves past the message ------------------------ */

static void produce_with_header(const char *key, const void *payload, size_t len)
{
    sg_kafka_header_t h = {"x-origin", "checkout-service", 16};
    sg_err_t err;

    cr_assert_eq(sg_kafka_produce(sgw.producer, sgw.topic_cmd, key, key ? strlen(key) : 0, payload,
                                  len, &h, 1, NULL, &err),
                 0, "%s", err.message);
    cr_assert_eq(sg_kafka_flush(sgw.producer, 30000, &err), 0, "%s", err.message);
}

/* One undecodable message, alone on partition 0: dead-lettered at offset
 * 0 and the stored offset moved past it. */
static const sgw_msg_t *dead_letter_input(sgw_reader_t *dlq, const char *code, const void *payload,
                                          size_t len, const char *const *env)
{
    const sgw_msg_t *m;

    sgw_pair_start(NULL, 1, env);
    sgw_reader_open(dlq, sgw.topic_dlq);
    produce_with_header("in-1", payload, len);
    m = dlq_wait(dlq, code);
    sgw_wait_int(1, "SELECT sum(next_offset) FROM consumer_offsets");
    sgw_pair_stop();
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 1);
    cr_expect_str_eq(
        sgw_jstr(sg_json_member(sg_json_member(m->doc, "original"), "headers"), "x-origin"),
        "checkout-service", "the original headers are kept");
    cr_expect_str_eq(sgw_jstr(sg_json_member(m->doc, "original"), "key"), "in-1");
    cr_expect_str_neq(sgw_jstr(sg_json_member(m->doc, "original"), "timestamp"), "");
    return m;
}

Test(dead_letters, undecodable_json)
{
    static const char payload[] = "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"x\", ";
    sgw_reader_t dlq;
    const sgw_msg_t *m =
        dead_letter_input(&dlq, "input.json.malformed", payload, strlen(payload), NULL);

    expect_dead_letter(m, "input.json.malformed|poison|-|-|-|-|-|-|0|0|c|0|0|pending", payload,
                       strlen(payload));
    cr_expect_str_eq(sgw_jstr(m->doc, "payload"), payload, "a UTF-8 payload is given as text");
    sgw_reader_close(&dlq);
}

Test(dead_letters, non_utf8_payload_survives_byte_for_byte)
{
    static const char payload[] = "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"\xff\xfe\","
                                  " \"name\": \"caf\xe9\", \"z\": \"\x80\x00\x01\"}";
    const size_t len = sizeof(payload) - 1;
    sgw_reader_t dlq;
    const sgw_msg_t *m = dead_letter_input(&dlq, "input.utf8.invalid", payload, len, NULL);
    char text[256];

    expect_dead_letter(m, "input.utf8.invalid|poison|-|-|-|-|-|-|0|0|c|0|0|pending", payload, len);
    cr_expect(sg_json_is_null(sg_json_member(m->doc, "payload")), "not given as text");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT encode(payload, 'hex') FROM dead_letters"),
        "7b2276223a20312c202274797065223a2022736167612e7374617274222c2022736167615f"
        "6964223a2022fffe222c20226e616d65223a2022636166e9222c20227a223a2022800001227d",
        "the ledger holds the exact bytes, NUL included");
    sgw_reader_close(&dlq);
}

Test(dead_letters, over_the_size_cap)
{
    static const char *const env[] = {"SAGAD_LIMITS_MAX_MESSAGE_BYTES=4096", NULL};
    char big[5001];
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    memset(big, 'a', sizeof(big) - 1);
    memcpy(big, "{\"pad\": \"", 9);
    memcpy(big + sizeof(big) - 3, "\"}", 2);
    big[sizeof(big) - 1] = '\0';
    m = dead_letter_input(&dlq, "input.too_large", big, strlen(big), env);
    expect_dead_letter(m, "input.too_large|poison|-|-|-|-|-|-|0|0|c|0|0|pending", big, strlen(big));
    /* The record would break the size cap every sagad message keeps to:
     * the ledger keeps the bytes, the topic says where they are. */
    cr_expect(jtrue(m->doc, "payload_omitted"), "the record says the payload is omitted");
    cr_expect_str_eq(header(m, "sagad-payload-omitted") ? header(m, "sagad-payload-omitted") : "",
                     "true");
    cr_expect_leq(m->len, (size_t)4096, "the DLQ message keeps to limits.max_message_bytes");
    sgw_reader_close(&dlq);
}

/* A saga.start whose input is an array of 30,000 small numbers (60 KB,
 * far under the size cap) holds more values than limits.max_json_nodes
 * (20,000): dead-lettered whole, never parsed into 30,000 nodes. */
Test(dead_letters, too_many_json_nodes)
{
    static const char head[] =
        "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-n\", \"saga_id\": "
        "\"n-1\", \"name\": \"n\", \"steps\": [{\"name\": \"a\", "
        "\"tool\": \"builtin.noop\"}], \"input\": [0";
    size_t cap = sizeof(head) + 2 * 30000 + 8, len;
    char *payload = malloc(cap);
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    cr_assert_not_null(payload);
    len = (size_t)snprintf(payload, cap, "%s", head);
    for (int i = 1; i < 30000; i++)
        len += (size_t)snprintf(payload + len, cap - len, ",%d", i % 10);
    len += (size_t)snprintf(payload + len, cap - len, "]}");
    m = dead_letter_input(&dlq, "input.json.too_many_nodes", payload, len, NULL);
    expect_dead_letter(m, "input.json.too_many_nodes|poison|-|-|-|-|-|-|0|0|c|0|0|pending", payload,
                       len);
    cr_expect(strstr(sgw_jstr(m->doc, "message"), "limits.max_json_nodes") != NULL,
              "the message names the knob: %s", sgw_jstr(m->doc, "message"));
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas"), 0, "no saga was started");
    sgw_reader_close(&dlq);
    free(payload);
}

Test(dead_letters, schema_violation_of_a_submission)
{
    static const char payload[] = "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-1\", "
                                  "\"saga_id\": \"bad-1\", \"name\": \"checkout\", \"steps\": []}";
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    sgw_pair_start(NULL, 1, NULL);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    produce_with_header("bad-1", payload, strlen(payload));
    m = dlq_wait(&dlq, "input.schema.invalid");
    sgw_event_wait("bad-1", "saga.rejected");
    sgw_wait_int(1, "SELECT sum(next_offset) FROM consumer_offsets");
    sgw_pair_stop();

    expect_dead_letter(m, "input.schema.invalid|permanent|bad-1|checkout|-|-|-|-|0|0|c|0|0|pending",
                       payload, strlen(payload));
    cr_expect(strstr(sgw_jstr(m->doc, "message"), "$.steps"), "the message names the path: %s",
              sgw_jstr(m->doc, "message"));
    cr_expect_str_eq(m->key, "bad-1");
    sgw_reader_close(&dlq);
}

/* ---- step routes: the step ends, the saga compensates (or is held) -------- */

/* Rows of a saga as a worker of an older registry would have left them:
 * step 0 done (compensated by ledger), step 1 waiting for its tool. */
static void insert_saga(const char *saga_id, const char *tool1)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "BEGIN; INSERT INTO sagas (saga_id, name, definition) VALUES ('%s', 'legacy', '{}'); "
             "INSERT INTO steps (saga_id, idx, name, tool, args, compensate, status, attempts) "
             "VALUES ('%s', 0, 'reserve', 'ledger', '{}', '{\"tool\": \"ledger\", \"args\": {}}', "
             "'succeeded', 1), ('%s', 1, 'ship', '%s', '{}', NULL, 'pending', 0); COMMIT",
             saga_id, saga_id, saga_id, tool1);
    script(sql);
}

static void produce_command(const char *saga_id, const char *type, int step, int attempt, int gen)
{
    char cmd[512];

    snprintf(cmd, sizeof(cmd),
             "{\"v\": 1, \"type\": \"%s\", \"id\": \"t-%s-%d\", \"saga_id\": \"%s\", \"step\": "
             "%d, \"attempt\": %d, \"generation\": %d}",
             type, saga_id, step, saga_id, step, attempt, gen);
    sgw_send_internal(saga_id, cmd);
}

Test(dead_letters, unknown_tool_after_a_registry_change)
{
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    sgw_pair_start(NULL, 1, NULL);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    insert_saga("ut-1", "teleport");
    produce_command("ut-1", "step.execute", 1, 1, 1);
    m = dlq_wait(&dlq, "tool.unknown");
    sgw_wait_status("ut-1", "compensated");
    sgw_pair_stop();

    expect_step_dead_letter(
        m, "tool.unknown|permanent|ut-1|legacy|1|ship|teleport|forward|0|0|i|0|0|pending",
        "forward");
    cr_expect(strstr(sgw_jstr(m->doc, "message"), "teleport"), "%s", sgw_jstr(m->doc, "message"));
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'ut-1:0:c:g1'"), 1,
                 "the step before it was compensated");
    sgw_reader_close(&dlq);
}

Test(dead_letters, crash_loop)
{
    static const char *const env[] = {"SAGAD_WORKER_CRASH_LOOP_LIMIT=2", NULL};
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    sgw_pair_start(NULL, 1, env);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    /* The trace two crashes leave: attempt 1 started twice (once already
     * marked interrupted), never finished. */
    insert_saga("cl-1", "noop");
    script("BEGIN; UPDATE steps SET status = 'running', attempts = 1 WHERE "
           "saga_id = 'cl-1' AND idx = 1; INSERT INTO attempts (saga_id, "
           "step_idx, phase, generation, attempt, idempotency_key, worker_id, "
           "finished_at, status, error_code, error_class, envelope) VALUES "
           "('cl-1', 1, 'forward', 1, 1, 'cl-1:1:f:g1', 'gone-1', now(), "
           "'error', 'runtime.interrupted', 'timeout', "
           "'{\"message\": \"interrupted\"}'), ('cl-1', 1, 'forward', 1, 1, "
           "'cl-1:1:f:g1', 'gone-2', NULL, NULL, NULL, NULL, NULL); COMMIT");
    produce_command("cl-1", "step.execute", 1, 1, 1);
    m = dlq_wait(&dlq, "runtime.crash_loop");
    sgw_wait_status("cl-1", "compensated");
    sgw_pair_stop();

    expect_step_dead_letter(
        m, "runtime.crash_loop|poison|cl-1|legacy|1|ship|noop|forward|2|2|i|0|0|pending",
        "forward");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE saga_id = 'cl-1' AND step_idx = 1 "
                           "AND error_code = 'runtime.interrupted'"),
                 2, "both interrupted runs are in the trail");
    sgw_reader_close(&dlq);
}

Test(dead_letters, attempts_exhausted)
{
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    sgw_pair_start(FLAKY_TOOL, 1, NULL);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    sgw_submit("ax-1", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"},"
                       " {\"name\": \"call\", \"tool\": \"flaky\", \"args\": {\"class\": "
                       "\"transient\", \"code\": \"tool.http.503\", \"message\": \"down\"}}]");
    m = dlq_wait(&dlq, "runtime.budget.attempts_exhausted");
    sgw_wait_status("ax-1", "compensated");
    sgw_pair_stop();

    expect_step_dead_letter(m,
                            "runtime.budget.attempts_exhausted|poison|ax-1|test|1|call|flaky|"
                            "forward|2|2|i|0|2|pending",
                            "forward");
    sgw_reader_close(&dlq);
}

Test(dead_letters, retry_budget_exhausted)
{
    sgw_reader_t dlq;
    const sgw_msg_t *m;
    char sub[512];

    sgw_pair_start(NULL, 1, NULL);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    /* Retry-After 5 s against a 1 s budget: no retry fits. */
    snprintf(
        sub, sizeof(sub),
        "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-rb\", \"saga_id\": \"rb-1\", "
        "\"name\": \"budgeted\", \"retry_budget_ms\": 1000, \"steps\": [{\"name\": \"call\", "
        "\"tool\": \"fail\", \"args\": {\"class\": \"throttled\", \"code\": \"tool.http.429\", "
        "\"retry_after_ms\": 5000}}]}");
    sgw_produce(sgw.topic_cmd, "rb-1", sub, strlen(sub));
    m = dlq_wait(&dlq, "runtime.budget.retry_exhausted");
    sgw_wait_status("rb-1", "compensated");
    sgw_pair_stop();

    expect_step_dead_letter(m,
                            "runtime.budget.retry_exhausted|poison|rb-1|budgeted|0|call|fail|"
                            "forward|1|1|i|0|0|pending",
                            "forward");
    sgw_reader_close(&dlq);
}

Test(dead_letters, compensation_exhausted)
{
    static const char tools[] =
        "\"hold\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "
        "\"reversible\", \"compensation\": \"release.flaky\"},"
        "\"release.flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
        "\"idempotent\", \"compensate_retry\": {\"max_attempts\": 2, \"base_ms\": 10, "
        "\"cap_ms\": 20}}";
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    sgw_pair_start(tools, 1, NULL);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    sgw_submit("cx-1", "[{\"name\": \"second\", \"tool\": \"hold\", \"args\": {\"class\": "
                       "\"transient\", \"code\": \"tool.http.503\"}},"
                       " {\"name\": \"third\", \"tool\": \"fail\"}]");
    m = dlq_wait(&dlq, "runtime.compensation_exhausted");
    sgw_wait_status("cx-1", "failed");
    sgw_pair_stop();

    expect_step_dead_letter(m,
                            "runtime.compensation_exhausted|poison|cx-1|test|0|second|"
                            "release.flaky|compensate|2|2|i|0|3|pending",
                            "compensate");
    sgw_reader_close(&dlq);
}

Test(dead_letters, outcome_postgresql_refuses)
{
    sgw_reader_t dlq;
    const sgw_msg_t *m;

    /* A data error on storing the step's answer, as a value PostgreSQL
     * cannot take would raise. */
    script("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
           "IF NEW.result->>'refuse' = 'yes' THEN RAISE EXCEPTION 'value refused' "
           "USING ERRCODE = '22023'; END IF; RETURN NEW; END $$; "
           "CREATE TRIGGER refuse BEFORE UPDATE ON steps FOR EACH ROW "
           "EXECUTE FUNCTION refuse()");
    sgw_pair_start(NULL, 1, NULL);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    sgw_submit("pr-1", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"},"
                       " {\"name\": \"answer\", \"tool\": \"echo\", \"args\": {\"refuse\": "
                       "\"yes\"}}]");
    m = dlq_wait(&dlq, "runtime.pg.rejected");
    sgw_wait_status("pr-1", "compensated");
    sgw_pair_stop();

    expect_step_dead_letter(m,
                            "runtime.pg.rejected|poison|pr-1|test|1|answer|echo|forward|1|1|i|0|"
                            "1|pending",
                            "forward");
    cr_expect(strstr(sgw_jstr(m->doc, "message"), "value refused"), "%s",
              sgw_jstr(m->doc, "message"));
    sgw_reader_close(&dlq);
}

/* A Kafka header whose name is not UTF-8 (and one whose value only looks
 * encoded): once, the dead-letter insert failed on it for ever (SQLSTATE
 * 22021) and the partition stopped.  Now the record keeps every header
 * losslessly and the next message of the partition runs. */
Test(dead_letters, a_header_name_that_is_not_utf8_is_kept_and_the_partition_goes_on)
{
    static const char payload[] = "not json";
    const sg_kafka_header_t hdrs[] = {
        {"\xff\xfe-trace", "x", 1},
        {"x-plain", "base64:looks-encoded", 20},
    };
    char text[256];

    sgw_pair_start(NULL, 1, NULL);
    sgw_produce_headers(sgw.topic_cmd, "hn-1", payload, strlen(payload), hdrs, 2);
    sgw_submit("hn-2", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    sgw_wait_status("hn-2", "completed");
    /* the stored offset passed both messages: the partition goes on */
    sgw_wait_int(1, "SELECT (sum(next_offset) >= 2)::int FROM consumer_offsets");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT error_code || '|' || convert_from(payload, 'UTF8') "
                                "FROM dead_letters"),
                     "input.json.malformed|not json");
    /* 0xff 0xfe "-trace" in base64, and the look-alike value encoded too,
     * so "base64:" always means encoded */
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT original_headers->>'base64://4tdHJhY2U=' FROM dead_letters"),
        "x", "the name's bytes are kept: %s",
        sgw_q_text(text, sizeof(text), "SELECT original_headers FROM dead_letters"));
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT original_headers->>'x-plain' FROM dead_letters"),
        "base64:YmFzZTY0Omxvb2tzLWVuY29kZWQ=");
}

/* A dead letter PostgreSQL keeps refusing (here a trigger refuses any
 * with a certain header): after a few tries the worker writes a reduced
 * one, without the headers and saying why, and goes on. */
Test(dead_letters, a_dead_letter_postgresql_refuses_is_reduced_not_retried_for_ever)
{
    static const char payload[] = "not json either";
    const sg_kafka_header_t hdr = {"refuse-me", "1", 1};
    char text[512];

    script("CREATE FUNCTION refuse_dl() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
           "IF NEW.original_headers ? 'refuse-me' THEN RAISE EXCEPTION 'dead letter refused' "
           "USING ERRCODE = '22021'; END IF; RETURN NEW; END $$; "
           "CREATE TRIGGER refuse_dl BEFORE INSERT ON dead_letters FOR EACH ROW "
           "EXECUTE FUNCTION refuse_dl()");
    sgw_pair_start(NULL, 1, NULL);
    sgw_produce_headers(sgw.topic_cmd, "rd-1", payload, strlen(payload), &hdr, 1);
    sgw_submit("rd-2", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    sgw_wait_status("rd-2", "completed");
    /* the stored offset passed both messages: the partition goes on */
    sgw_wait_int(1, "SELECT (sum(next_offset) >= 2)::int FROM consumer_offsets");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT error_code || '|' || (original_headers IS NULL) || '|' "
                                "|| original_offset || '|' || convert_from(payload, 'UTF8') "
                                "FROM dead_letters"),
                     "runtime.pg.rejected|true|0|not json either",
                     "one reduced dead letter, with the message's bytes");
    sgw_q_text(text, sizeof(text), "SELECT message FROM dead_letters");
    cr_expect(strstr(text, "reduced dead letter (headers left out)") &&
                  strstr(text, "dead letter refused"),
              "the message says what was left out and why: %s", text);
    cr_expect(strstr(sgw.worker.err, "writing a reduced one"), "the worker says so");
}

/* Hostile but well-formed JSON that cJSON would have changed: an escaped
 * NUL cut an id to its prefix (the saga ran as "nx1-nul", or was taken
 * for a duplicate of an existing saga and silently acknowledged), and of
 * two equal member names the worker checked the first while PostgreSQL
 * kept the last.  Each is now dead-lettered whole, with the JSON path. */
Test(dead_letters, nul_escapes_and_duplicate_names_are_dead_lettered_whole)
{
    static const char nul_id[] = "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"s-1\", "
                                 "\"saga_id\": \"nx1-nul\\u0000tail\", \"name\": \"t\", "
                                 "\"steps\": [{\"name\": \"a\", \"tool\": \"noop\"}]}";
    static const char dup_of_existing[] =
        "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-cx1\", "
        "\"saga_id\": \"cx1\\u0000x\", \"name\": \"test\", "
        "\"steps\": [{\"name\": \"a\", \"tool\": \"noop\"}]}";
    static const char dup_name[] = "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"s-3\", "
                                   "\"saga_id\": \"dn-1\", \"saga_id\": \"dn-2\", \"name\": "
                                   "\"t\", \"steps\": [{\"name\": \"a\", \"tool\": \"noop\"}]}";
    char text[512];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("cx1", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    sgw_wait_status("cx1", "completed");
    sgw_produce(sgw.topic_cmd, "nx1", nul_id, strlen(nul_id));
    sgw_produce(sgw.topic_cmd, "cx1", dup_of_existing, strlen(dup_of_existing));
    sgw_produce(sgw.topic_cmd, "dn", dup_name, strlen(dup_name));
    sgw_wait_int(3, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();

    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg(error_code || ' ' || split_part(message, ':', 1), "
                   "', ' ORDER BY id) FROM dead_letters"),
        "input.json.nul $.saga_id, input.json.nul $.saga_id, "
        "input.json.duplicate_key $.saga_id");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE payload = "
                           "convert_to('%s', 'UTF8')",
                           "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"s-1\", \"saga_id\": "
                           "\"nx1-nul\\u0000tail\", \"name\": \"t\", \"steps\": "
                           "[{\"name\": \"a\", \"tool\": \"noop\"}]}"),
                 1, "the payload is kept byte for byte");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(saga_id, ',' ORDER BY saga_id) FROM sagas"),
                     "cx1", "no saga ran under a cut or a doubled id");
}

/* An order id beyond 2^53 in a step's args: cJSON read it as a double,
 * and the downstream received 1.7000000001234568e+18.  Now refused whole,
 * naming the path; a saga with numbers that go out as they came runs. */
Test(dead_letters, a_number_that_would_reach_the_downstream_changed_is_dead_lettered)
{
    char text[512];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("nr-1", "[{\"name\": \"a\", \"tool\": \"echo\", \"args\": {\"order\": "
                       "1700000000123456789}}]");
    sgw_submit("nr-2", "[{\"name\": \"a\", \"tool\": \"echo\", \"args\": {\"order\": "
                       "170000000012345, \"amount\": 0.1}}]");
    sgw_wait_status("nr-2", "completed");
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT error_code || ' ' || split_part(message, ':', 1) "
                                "FROM dead_letters"),
                     "input.json.number_range $.steps[0].args.order");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = 'nr-1'"), 0,
                 "the saga with the altered number did not run");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT (result->>'order') || ' ' || (result->>'amount') "
                                "FROM steps WHERE saga_id = 'nr-2'"),
                     "170000000012345 0.1", "numbers that fit go out as they came");
}

/* ---- the held saga ---------------------------------------------------------- */

/* reserve (reversible ledger), charge (fails in generation 1 until
 * exhausted), notify (ledger). */
static void submit_held(const char *saga_id)
{
    sgw_submit(saga_id, "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\"},"
                        " {\"name\": \"charge\", \"tool\": \"flaky\", \"args\": {\"class\": "
                        "\"transient\", \"code\": \"tool.http.503\", \"generations\": 1}},"
                        " {\"name\": \"notify\", \"tool\": \"ledger\"}]");
}

/* The state of a held saga: nothing compensated, the step failed, the
 * rest pending, the dead letter pending, and its release timer waiting. */
static void expect_held(const char *saga_id)
{
    char text[256];

    sgw_wait_status(saga_id, "held");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(status, ',' ORDER BY idx) FROM steps WHERE "
                                "saga_id = '%s'",
                                saga_id),
                     "succeeded,failed,pending");
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE '%s:%%:c:%%'", saga_id), 0,
        "nothing is compensated while held");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE saga_id = '%s' AND phase = "
                           "'compensate'",
                           saga_id),
                 0);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM timers WHERE headers->>'sagad-type' = "
                           "'saga.release' AND key = convert_to('%s', 'UTF8')",
                           saga_id),
                 1, "the release timer waits");
    cr_expect_str_eq(sgw_jstr(sgw_event_wait(saga_id, "saga.dead_lettered"), "error_code"),
                     "runtime.budget.attempts_exhausted");
    cr_expect_str_neq(sgw_jstr(sgw_event_wait(saga_id, "saga.dead_lettered"), "held_until"), "",
                      "saga.dead_lettered says until when the saga is held");
}

Test(dead_letters, hold_timer_starts_the_compensation)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=1500", NULL};

    sgw_pair_start(FLAKY_TOOL, 1, env);
    submit_held("ht-1");
    sgw_wait_status("ht-1", "compensated");
    sgw_event_wait("ht-1", "saga.compensated");
    sgw_pair_stop();

    sgw_expect_events("ht-1", NULL, "saga.accepted", "step.succeeded", "step.retry_scheduled",
                      "step.failed", "saga.dead_lettered", "saga.compensating", "step.compensated",
                      "saga.compensated", NULL);
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'ht-1:0:c:g1'"), 1);
    /* The relay fires a timer when it is due, never before: the
     * compensation began at least the hold after the dead letter. */
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts a, dead_letters d WHERE a.phase = "
                           "'compensate' AND a.started_at >= d.created_at + interval '1500 ms'"),
                 1, "compensation started after the hold");
    cr_expect_str_eq(sgw_q_text((char[32]){0}, 32, "SELECT status FROM steps WHERE idx = 2"),
                     "skipped");
}

/* What dlq-tool's replay of a held saga does, in one transaction. */
static long long replay_held(const char *saga_id, int step)
{
    char sql[2048];
    long long dl = sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = '%s'", saga_id), rid;

    snprintf(sql, sizeof(sql),
             "WITH r AS (INSERT INTO replays (dead_letter_id, operator, reason, new_generation, "
             "new_key) SELECT %lld, 'test', 'downstream fixed', generation + 1, '%s:%d:f:g' || "
             "(generation + 1) FROM sagas WHERE saga_id = '%s' RETURNING id, new_generation), "
             "d AS (UPDATE dead_letters SET status = 'replayed', resolved_at = now() WHERE id = "
             "%lld), s AS (UPDATE sagas SET generation = generation + 1, status = 'running' "
             "WHERE saga_id = '%s'), st AS (UPDATE steps SET status = 'pending', attempts = 0 "
             "WHERE saga_id = '%s' AND idx = %d), o AS (INSERT INTO outbox (topic, key, headers, "
             "payload) SELECT '%s', convert_to('%s', 'UTF8'), jsonb_build_object('sagad-type', "
             "'step.execute', 'sagad-replay-of', '%lld', 'sagad-replay-id', r.id::text), "
             "convert_to(jsonb_build_object('v', 1, 'type', 'step.execute', 'id', 'replay-' || "
             "r.id, 'saga_id', '%s', 'step', %d, 'attempt', 1, 'generation', "
             "r.new_generation)::text, 'UTF8') FROM r) SELECT id FROM r",
             dl, saga_id, step, saga_id, dl, saga_id, saga_id, step, sgw.topic_int, saga_id, dl,
             saga_id, step);
    rid = sgt_query_int(sgw.pg, sql);
    cr_assert_gt(rid, 0, "the replay was written");
    return rid;
}

Test(dead_letters, replay_of_a_held_saga_resumes_at_the_step_under_a_new_key)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000", NULL};
    long long consumed;

    sgw_pair_start(FLAKY_TOOL, 1, env);
    submit_held("rp-1");
    expect_held("rp-1");
    replay_held("rp-1", 1);
    sgw_wait_status("rp-1", "completed");
    sgw_event_wait("rp-1", "saga.completed");

    /* The hold timer of generation 1, due now: stale, ignored. */
    consumed = sgw_q_int("SELECT sum(next_offset) FROM consumer_offsets");
    cr_assert_eq(sgw_q_int("WITH u AS (UPDATE timers SET due_at = now() RETURNING 1) SELECT "
                           "count(*) FROM u"),
                 1);
    sgw_wait_int(consumed + 1, "SELECT sum(next_offset) FROM consumer_offsets");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text((char[32]){0}, 32, "SELECT status FROM sagas"), "completed",
                     "the stale release changed nothing");
    cr_expect(strstr(sgw.worker.err, "older generation"), "the worker logs the stale release");
    cr_expect_eq(sgw_q_int("SELECT generation FROM sagas"), 2);
    cr_expect_str_eq(sgw_q_text((char[128]){0}, 128,
                                "SELECT string_agg(idempotency_key || '=' || status, ',' ORDER BY "
                                "id) FROM attempts WHERE step_idx = 1 AND generation = 2"),
                     "rp-1:1:f:g2=ok", "the replayed step ran once, under the new key");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 0"), 1,
                 "the completed step was not called again");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'rp-1:0:f:g1'"), 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'rp-1:0:%%' AND "
                           "key <> 'rp-1:0:f:g1'"),
                 0);
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'rp-1:2:f:g2'"), 1,
                 "the later step ran in the new generation");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'compensate'"), 0);
}

Test(dead_letters, release_hold_starts_the_compensation_now)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000", NULL};
    char text[32];

    sgw_pair_start(FLAKY_TOOL, 1, env);
    submit_held("rl-1");
    expect_held("rl-1");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT sagad_release_hold('rl-1')"), "t");
    sgw_wait_status("rl-1", "compensated");
    sgw_pair_stop();

    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'rl-1:0:c:g1'"), 1);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT sagad_release_hold('rl-1')"), "f",
                     "a saga that is not held cannot be released");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT sagad_release_hold('nobody')"), "f");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM timers"), 0);
}

/* What dlq-tool's replay of a failed saga does: the failed compensation
 * again, at a new generation. */
Test(dead_letters, replay_of_a_failed_saga_reruns_the_compensation)
{
    static const char tools[] =
        "\"hold\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "
        "\"reversible\", \"compensation\": \"release.fixed\"},"
        "\"release.fixed\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
        "\"idempotent\", \"compensate_retry\": {\"max_attempts\": 1}}";
    char sql[1024];

    sgw_pair_start(tools, 1, NULL);
    sgw_submit("rf-1", "[{\"name\": \"first\", \"tool\": \"ledger.reversible\"},"
                       " {\"name\": \"second\", \"tool\": \"hold\", \"args\": {\"generations\": "
                       "1}}, {\"name\": \"third\", \"tool\": \"fail\"}]");
    sgw_wait_status("rf-1", "failed");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'rf-1:0:c:%%'"), 0);
    snprintf(sql, sizeof(sql),
             "BEGIN; UPDATE dead_letters SET status = 'replayed'; UPDATE sagas SET generation = 2, "
             "status = 'compensating'; UPDATE steps SET status = 'compensating', comp_attempts = "
             "0 WHERE idx = 1; INSERT INTO outbox (topic, key, headers, payload) VALUES ('%s', "
             "convert_to('rf-1', 'UTF8'), '{\"sagad-type\": \"step.compensate\"}', "
             "convert_to('{\"v\": 1, \"type\": \"step.compensate\", \"id\": \"replay-rf\", "
             "\"saga_id\": \"rf-1\", \"step\": 1, \"attempt\": 1, \"generation\": 2}', 'UTF8')); "
             "COMMIT",
             sgw.topic_int);
    script(sql);
    sgw_wait_status("rf-1", "compensated");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text((char[128]){0}, 128,
                                "SELECT string_agg(idempotency_key || '=' || status, ',' ORDER BY "
                                "id) FROM attempts WHERE phase = 'compensate'"),
                     "rf-1:1:c:g1=error,rf-1:1:c:g2=ok,rf-1:0:c:g2=ok",
                     "the failed compensation ran again under a new key, then the one below");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'rf-1:0:c:g2'"), 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'forward' AND "
                           "generation = 2"),
                 0, "no forward step runs again");
}
