/* sagad-worker end to end: the real worker and relay binaries on their own
 * database, topics, consumer group and tool registry per test.  Sagas go in
 * as saga.start messages on the commands topic, their steps' commands travel
 * on the internal topic; what a producer or an
 * operator relies on is read back from the events and DLQ topics and from
 * the tables (sagas, steps, attempts, dead_letters, builtin_ledger,
 * consumer_offsets). */
#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_log.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"

TestSuite(worker, .init = sgw_setup, .fini = sgw_teardown, .timeout = 120);

/* ---- the tests ----------------------------------------------------------- */

Test(worker, happy_path_three_steps_complete_in_order, .timeout = 120)
{
    const sg_json_t *ev[8], *h;
    char text[256];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("happy-1",
               "[{\"name\": \"reserve\", \"tool\": \"ledger\", \"args\": {\"sku\": \"B7\"}},"
               " {\"name\": \"pack\", \"tool\": \"echo\", \"args\": {\"box\": \"small\"}},"
               " {\"name\": \"notify\", \"tool\": \"noop\"}]");
    sgw_wait_status("happy-1", "completed");
    sgw_event_wait("happy-1", "saga.completed");
    /* The steps were chained: their messages come back after the steps
     * ran, and are acknowledged then. */
    sgw_wait_int(4, "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets");
    sgw_pair_stop();

    sgw_expect_events("happy-1", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                      "step.succeeded", "saga.completed", NULL);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(sgw_jint(ev[1 + i], "step"), i, "step.succeeded in step order");
    cr_expect_str_eq(sgw_jstr(ev[1], "step_name"), "reserve");
    h = sgw_run_health(ev[4]);
    cr_expect_eq(sgw_jint(h, "ok"), 3);
    cr_expect_eq(sgw_jint(h, "failed"), 0);
    cr_expect_eq(sgw_jint(h, "compensated"), 0);
    cr_expect(sg_json_member(h, "blocking_failure") &&
                  sg_json_is_null(sg_json_member(h, "blocking_failure")),
              "blocking_failure is null");

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM steps WHERE saga_id = 'happy-1' AND status = "
                           "'succeeded' AND attempts = 1"),
                 3);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT result->>'box' FROM steps WHERE idx = 1"), "small",
        "the tool's answer is stored with the step");
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM attempts WHERE status = 'ok' AND idempotency_key = "
                  "saga_id || ':' || step_idx || ':f:g1'"),
        3, "one attempt per step, keyed <saga>:<step>:f:g1");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'happy-1:0:f:g1'"), 1);
    /* saga.start consumed on the commands topic, the three step.execute
     * on the internal one, in the same transactions as their outcomes. */
    cr_expect_eq(
        sgw_q_int("SELECT sum(next_offset) FROM consumer_offsets WHERE group_id = '%s' AND "
                  "topic = '%s'",
                  sgw.group, sgw.topic_cmd),
        1);
    cr_expect_eq(
        sgw_q_int("SELECT sum(next_offset) FROM consumer_offsets WHERE group_id = '%s' AND "
                  "topic = '%s'",
                  sgw.group, sgw.topic_int),
        3);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0);
}

Test(worker, permanent_failure_compensates_in_reverse_order, .timeout = 120)
{
    const sg_json_t *ev[16], *h, *block;
    char text[512];

    sgw_pair_start(NULL, 2, NULL);
    sgw_submit("perm-1",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}},"
               " {\"name\": \"book\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 3}},"
               " {\"name\": \"ship\", \"tool\": \"fail\", \"args\": {\"class\": \"permanent\", "
               "\"code\": \"carrier.refused\", \"message\": \"address rejected\"}}]");
    sgw_wait_status("perm-1", "compensated");
    sgw_event_wait("perm-1", "saga.compensated");
    sgw_pair_stop();

    sgw_expect_events("perm-1", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                      "step.succeeded", "step.failed", "saga.compensating", "step.compensated",
                      "step.compensated", "step.compensated", "saga.compensated", NULL);
    cr_expect_eq(sgw_jint(ev[4], "step"), 3);
    cr_expect_str_eq(sgw_jstr(ev[4], "error_code"), "carrier.refused");
    cr_expect_str_eq(sgw_jstr(ev[4], "error_class"), "permanent");
    cr_expect_str_eq(sgw_jstr(ev[4], "message"), "address rejected");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(sgw_jint(ev[6 + i], "step"), 2 - i, "compensations run in reverse order");
    h = sgw_run_health(ev[9]);
    cr_expect_eq(sgw_jint(h, "ok"), 0);
    cr_expect_eq(sgw_jint(h, "failed"), 1);
    cr_expect_eq(sgw_jint(h, "compensated"), 3);
    block = sg_json_member(h, "blocking_failure");
    cr_assert_not_null(block, "blocking_failure names the failed step");
    cr_expect_eq(sgw_jint(block, "step"), 3);
    cr_expect_str_eq(sgw_jstr(block, "step_name"), "ship");
    cr_expect_str_eq(sgw_jstr(block, "error_code"), "carrier.refused");

    /* The compensations' effects, keyed by phase c, in the order made. */
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key, ',' ORDER BY first_at, last_at) FROM "
                                "builtin_ledger WHERE key LIKE '%%:c:g1'"),
                     "perm-1:2:c:g1,perm-1:1:c:g1,perm-1:0:c:g1");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE calls = 1"), 6,
                 "three effects and three compensations, once each");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,compensated,compensated,failed");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT error_code FROM steps WHERE idx = 3"),
                     "carrier.refused");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0,
                 "a permanent step failure compensates; nothing to dead-letter");
}

/* Submits a saga with a deadline (sgw_submit's saga.start has none). */
static void submit_with_deadline(const char *saga_id, const char *deadline, const char *steps)
{
    char msg[1024];

    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
             "\"name\": \"test\", \"deadline\": \"%s\", \"steps\": %s}",
             saga_id, saga_id, deadline, steps);
    sgw_produce(sgw.topic_cmd, saga_id, msg, strlen(msg));
}

/* A step that would start after the saga's deadline is not run: it fails
 * with runtime.deadline_exceeded and the succeeded steps before it are
 * compensated, with nothing dead-lettered. */
Test(worker, step_after_the_deadline_fails_and_compensates, .timeout = 120)
{
    const sg_json_t *ev[16];
    char deadline[32], text[256];
    time_t t;
    struct tm tm;

    /* The deadline leaves ample time for reserve and nap to start (5 s),
     * and nap outlasts it (8 s), so ship would start after it. */
    sgw_pair_start(NULL, 1, NULL);
    t = time(NULL) + 5;
    gmtime_r(&t, &tm);
    strftime(deadline, sizeof(deadline), "%Y-%m-%dT%H:%M:%SZ", &tm);
    submit_with_deadline("late-1", deadline,
                         "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\"},"
                         " {\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": 8000}},"
                         " {\"name\": \"ship\", \"tool\": \"ledger.reversible\"}]");
    sgw_wait_status("late-1", "compensated");
    sgw_event_wait("late-1", "saga.compensated");
    sgw_pair_stop();

    sgw_expect_events("late-1", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                      "step.failed", "saga.compensating", "step.compensated", "saga.compensated",
                      NULL);
    cr_expect_eq(sgw_jint(ev[3], "step"), 2);
    cr_expect_str_eq(sgw_jstr(ev[3], "error_code"), "runtime.deadline_exceeded");
    cr_expect_eq(sgw_jint(ev[5], "step"), 0, "the reservation is undone");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key, ',' ORDER BY key) FROM builtin_ledger"),
                     "late-1:0:c:g1,late-1:0:f:g1", "ship was never called");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 2"), 0,
                 "no attempt of the late step");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT error_code FROM steps WHERE idx = 2"),
                     "runtime.deadline_exceeded");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0);
}

/* A saga whose deadline passed before its first step ran: the step is not
 * run, even though chaining decides a first step in the transaction that
 * creates the saga (a saga with a deadline is not chained there, as only
 * the next transaction's PostgreSQL clock judges the deadline). */
Test(worker, first_step_after_the_deadline_is_not_run, .timeout = 120)
{
    char text[64];

    sgw_pair_start(NULL, 1, NULL);
    submit_with_deadline("past-1", "2020-01-01T00:00:00Z",
                         "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\"}]");
    sgw_wait_status("past-1", "compensated");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT error_code FROM steps WHERE idx = 0"),
                     "runtime.deadline_exceeded");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts"), 0, "the step was never attempted");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger"), 0, "nor called");
}

Test(worker, transient_failures_retry_with_same_key_and_bounded_backoff, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_RETRY_BASE_MS=40", "SAGAD_RETRY_CAP_MS=60", NULL};
    const sg_json_t *ev[8];
    long long spent = 0;
    char text[256];

    sgw_pair_start(NULL, 1, env);
    sgw_submit("flaky-1", "[{\"name\": \"call\", \"tool\": \"fail\", \"args\": {\"class\": "
                          "\"transient\", \"code\": \"tool.http.503\", \"times\": 2}},"
                          " {\"name\": \"after\", \"tool\": \"noop\"}]");
    sgw_wait_status("flaky-1", "completed");
    sgw_event_wait("flaky-1", "saga.completed");
    sgw_pair_stop();

    sgw_expect_events("flaky-1", ev, "saga.accepted", "step.retry_scheduled",
                      "step.retry_scheduled", "step.succeeded", "step.succeeded", "saga.completed",
                      NULL);
    for (int i = 1; i <= 2; i++) {
        /* Retry i follows failed attempt i: random(0, min(cap, base * 2^(i-1))). */
        long long bound = 40LL << (i - 1) < 60 ? 40LL << (i - 1) : 60;
        long long delay = sgw_jint(ev[i], "delay_ms");
        cr_expect_eq(sgw_jint(ev[i], "attempt"), i + 1, "the retry is attempt %d", i + 1);
        cr_expect(delay >= 0 && delay <= bound, "retry %d: delay_ms %lld not in [0, %lld]", i,
                  delay, bound);
        cr_expect_str_eq(sgw_jstr(ev[i], "error_code"), "tool.http.503");
        cr_expect_str_eq(sgw_jstr(ev[i], "phase"), "forward");
        spent += delay;
    }
    cr_expect_eq(sgw_jint(ev[3], "step"), 0);
    cr_expect_eq(sgw_jint(ev[3], "attempt"), 3, "the third attempt succeeded");

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 0"), 3);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(DISTINCT idempotency_key, ',') FROM attempts "
                                "WHERE step_idx = 0"),
                     "flaky-1:0:f:g1", "every attempt carries the same idempotency key");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(attempt || '=' || status || ':' || "
                                "coalesce(error_code, '-'), ',' ORDER BY attempt) FROM attempts "
                                "WHERE step_idx = 0"),
                     "1=error:tool.http.503,2=error:tool.http.503,3=ok:-");
    cr_expect_eq(sgw_q_int("SELECT attempts FROM steps WHERE idx = 0 AND status = 'succeeded'"), 3);
    cr_expect_eq(sgw_q_int("SELECT retry_spent_ms FROM sagas"), spent,
                 "the retry budget is charged the delays announced");
}

Test(worker, retry_exhaustion_dead_letters_and_compensates, .timeout = 120)
{
    static const char tools[] =
        "\"flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
        "\"idempotent\", \"retry\": {\"max_attempts\": 3, \"base_ms\": 10, \"cap_ms\": 20}}";
    const sg_json_t *ev[16], *rec;
    sgw_reader_t dlq;
    char text[512];

    sgw_pair_start(tools, 3, NULL);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    sgw_submit("exhaust-1", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"},"
                            " {\"name\": \"call\", \"tool\": \"flaky\", \"args\": {\"class\": "
                            "\"transient\", \"code\": \"tool.http.503\", \"message\": \"down\"}}]");
    sgw_wait_status("exhaust-1", "compensated");
    sgw_event_wait("exhaust-1", "saga.compensated");
    sgw_reader_wait_count(&dlq, 1);
    sgw_pair_stop();

    sgw_expect_events("exhaust-1", ev, "saga.accepted", "step.succeeded", "step.retry_scheduled",
                      "step.retry_scheduled", "step.failed", "saga.dead_lettered",
                      "saga.compensating", "step.compensated", "saga.compensated", NULL);
    cr_expect_str_eq(sgw_jstr(ev[4], "error_code"), "runtime.budget.attempts_exhausted");
    cr_expect_str_eq(sgw_jstr(ev[5], "error_code"), "runtime.budget.attempts_exhausted");
    cr_expect_eq(sgw_jint(ev[7], "step"), 0);

    cr_assert_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 1);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT concat_ws('|', error_code, saga_id, step_name, tool, phase, "
                   "attempts, jsonb_array_length(trail), status) FROM dead_letters"),
        "runtime.budget.attempts_exhausted|exhaust-1|call|flaky|forward|3|3|pending");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg((e->>'attempt') || ':' || (e->>'error_code'), ',' "
                   "ORDER BY ord) FROM dead_letters, jsonb_array_elements(trail) WITH "
                   "ORDINALITY AS t(e, ord)"),
        "1:tool.http.503,2:tool.http.503,3:tool.http.503", "the trail holds every attempt's error");

    cr_expect_str_eq(dlq.v[0].code, "runtime.budget.attempts_exhausted",
                     "the DLQ message carries the sagad-error-code header");
    cr_expect_str_eq(dlq.v[0].key, "exhaust-1");
    rec = dlq.v[0].doc;
    cr_assert_not_null(rec, "the DLQ message is JSON");
    cr_expect_str_eq(sgw_jstr(rec, "error_code"), "runtime.budget.attempts_exhausted");
    cr_expect_str_eq(sgw_jstr(rec, "saga_id"), "exhaust-1");
    cr_expect_str_eq(sgw_jstr(rec, "step_name"), "call");
    cr_expect_eq(sgw_jint(rec, "attempts"), 3);
    cr_expect_eq(sg_json_array_size(sg_json_member(rec, "trail")), 3);
    cr_expect_str_eq(sgw_jstr(sg_json_member(rec, "original"), "topic"), sgw.topic_int,
                     "a step command's dead letter names the internal topic it was read on");

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(status || ':' || coalesce(error_code, '-'), ',' "
                                "ORDER BY idx) FROM steps"),
                     "compensated:-,failed:runtime.budget.attempts_exhausted");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'exhaust-1:0:c:g1'"), 1,
                 "the earlier step was compensated once");
    sgw_reader_close(&dlq);
}

Test(worker, compensation_exhaustion_fails_saga_and_stops, .timeout = 120)
{
    static const char tools[] =
        "\"hold\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "
        "\"reversible\", \"compensation\": \"release.flaky\"},"
        "\"release.flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
        "\"idempotent\", \"compensate_retry\": {\"max_attempts\": 2, \"base_ms\": 10, "
        "\"cap_ms\": 20}}";
    const sg_json_t *evs[32], *last, *block;
    size_t n;
    char text[512];

    sgw_pair_start(tools, 1, NULL);
    sgw_submit(
        "compfail-1",
        "[{\"name\": \"first\", \"tool\": \"ledger.reversible\"},"
        " {\"name\": \"second\", \"tool\": \"hold\", \"args\": {\"class\": \"transient\", "
        "\"code\": \"tool.http.503\", \"message\": \"release endpoint down\"}},"
        " {\"name\": \"third\", \"tool\": \"fail\", \"args\": {\"code\": \"card.declined\"}}]");
    sgw_wait_status("compfail-1", "failed");
    sgw_event_wait("compfail-1", "saga.failed");
    sgw_event_wait("compfail-1", "saga.dead_lettered");
    sgw_pair_stop();

    n = sgw_saga_events("compfail-1", evs, 32);
    last = evs[n - 1];
    cr_expect_str_eq(sgw_jstr(last, "type"), "saga.failed",
                     "the terminal event is the saga's last");
    block = sg_json_member(sgw_run_health(last), "blocking_failure");
    cr_assert_not_null(block);
    cr_expect_str_eq(sgw_jstr(block, "step_name"), "second");
    cr_expect_str_eq(sgw_jstr(block, "status"), "compensation_failed");
    cr_expect_str_eq(sgw_jstr(block, "error_code"), "runtime.compensation_exhausted");
    cr_expect_eq(sgw_jint(sgw_event_wait("compfail-1", "step.compensation_failed"), "step"), 1);
    cr_expect_null(sgw_event_find("compfail-1", "step.compensated"),
                   "no compensation after the one that failed");

    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,compensation_failed,failed");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key = 'compfail-1:0:c:g1'"),
                 0, "the lower step's compensation never ran");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT count(*) || ':' || string_agg(DISTINCT idempotency_key, ',') "
                   "FROM attempts WHERE phase = 'compensate'"),
        "2:compfail-1:1:c:g1", "the compensation tool's own compensate_retry: 2 attempts, one key");
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 1);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT concat_ws('|', error_code, step_name, tool, phase, attempts) "
                   "FROM dead_letters"),
        "runtime.compensation_exhausted|second|release.flaky|compensate|2");
}

/* One bad submission: its saga_id (NULL: undecodable), the payload, and
 * what must come out: the dead letter's code, the problem path and the
 * start of its rule (decodable ones only). */
typedef struct bad_sub_s {
    const char *saga_id;
    const char *payload;
    const char *code;
    const char *path, *rule;
} bad_sub_t;

#define START(id, steps)                                                                           \
    "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-" id "\", \"saga_id\": \"" id "\", "       \
    "\"name\": \"bad\", \"steps\": " steps "}"

Test(worker, invalid_submissions_rejected_and_dead_lettered, .timeout = 120)
{
    static const char tools[] = "\"hold.unsafe\": {\"adapter\": \"builtin\", \"target\": \"echo\", "
                                "\"side_effect\": \"reversible\"}";
    static const char *const env[] = {"SAGAD_LIMITS_MAX_MESSAGE_BYTES=4096", NULL};
    static const bad_sub_t subs[] = {
        {"no-steps", START("no-steps", "[]"), "input.schema.invalid", "$.steps", "minItems"},
        {"dup-names",
         START("dup-names", "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"a\", \"tool\": "
                            "\"noop\"}]"),
         "input.schema.invalid", "$.steps[1].name", "unique"},
        {"unknown-tool", START("unknown-tool", "[{\"name\": \"a\", \"tool\": \"teleport\"}]"),
         "input.schema.invalid", "$.steps[0].tool", "unknown tool"},
        {"bad-args",
         START("bad-args", "[{\"name\": \"a\", \"tool\": \"inventory.reserve\", \"args\": "
                           "{\"sku\": \"B7\", \"qty\": 0}}]"),
         "input.schema.invalid", "$.steps[0].args.qty", "minimum"},
        {"no-comp", START("no-comp", "[{\"name\": \"a\", \"tool\": \"hold.unsafe\"}]"),
         "input.schema.invalid", "$.steps[0].compensate", "required"},
        {"irreversible-first",
         START("irreversible-first", "[{\"name\": \"mail\", \"tool\": \"email.send\"}, {\"name\": "
                                     "\"charge\", \"tool\": \"ledger.reversible\"}]"),
         "input.schema.invalid", "$.steps[0]", "order"},
        {NULL, "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"x\", \"steps\": [",
         "input.json.malformed", NULL, NULL},
        {NULL, "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"y\", \"name\": \"\xc3\x28\"}",
         "input.utf8.invalid", NULL, NULL},
        {NULL, NULL, "input.too_large", NULL, NULL},
    };
    const size_t nsubs = sizeof(subs) / sizeof(subs[0]);
    char big[5000], text[512];
    sgw_reader_t dlq;
    const sgw_msg_t *utf8 = NULL;

    /* Valid JSON, valid UTF-8, but past limits.max_message_bytes. */
    snprintf(big, sizeof(big),
             START("too-large", "[{\"name\": \"a\", \"tool\": \"noop\", "
                                "\"args\": {\"pad\": \"%4500s\"}}]"),
             "");
    sgw_pair_start(tools, 2, env);
    sgw_reader_open(&dlq, sgw.topic_dlq);
    for (size_t i = 0; i < nsubs; i++) {
        const char *p = subs[i].payload ? subs[i].payload : big;
        sgw_produce(sgw.topic_cmd, subs[i].saga_id, p, strlen(p));
    }
    sgw_wait_int((long long)nsubs, "SELECT count(*) FROM dead_letters");
    for (size_t i = 0; i < nsubs; i++)
        if (subs[i].saga_id)
            sgw_event_wait(subs[i].saga_id, "saga.rejected");
    sgw_reader_wait_count(&dlq, nsubs);
    sgw_pair_stop();

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas"), 0, "no saga was created");
    for (size_t i = 0; i < nsubs; i++) {
        const bad_sub_t *s = &subs[i];
        const sg_json_t *ev, *problems;
        bool found = false;

        if (!s->saga_id) {
            cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE error_code = '%s' AND "
                                   "saga_id IS NULL AND payload IS NOT NULL",
                                   s->code),
                         1, "one dead letter %s", s->code);
            continue;
        }
        cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE saga_id = '%s' AND "
                               "error_code = '%s'",
                               s->saga_id, s->code),
                     1, "%s: one dead letter %s", s->saga_id, s->code);
        ev = sgw_event_find(s->saga_id, "saga.rejected")->doc;
        cr_expect_str_eq(sgw_jstr(ev, "error_code"), s->code);
        cr_expect_eq(sgw_jint(ev, "seq"), 0, "a rejection is not part of any saga's sequence");
        problems = sg_json_member(ev, "problems");
        cr_assert_gt(sg_json_array_size(problems), 0, "%s: problems[] is empty", s->saga_id);
        for (size_t j = 0; j < sg_json_array_size(problems); j++) {
            const sg_json_t *p = sg_json_array_get(problems, j);
            if (strcmp(sgw_jstr(p, "path"), s->path) == 0 &&
                strncmp(sgw_jstr(p, "rule"), s->rule, strlen(s->rule)) == 0)
                found = true;
        }
        {
            char *all = sg_json_print(problems);
            cr_expect(found, "%s: no problem {path %s, rule %s...} in %s", s->saga_id, s->path,
                      s->rule, all);
            free(all);
        }
    }

    for (size_t i = 0; i < dlq.n; i++)
        if (strcmp(dlq.v[i].code, "input.utf8.invalid") == 0)
            utf8 = &dlq.v[i];
    cr_assert_not_null(utf8, "the non-UTF-8 submission reached the DLQ topic");
    cr_expect(sg_json_is_null(sg_json_member(utf8->doc, "payload")),
              "a non-UTF-8 payload is not given as text");
    cr_expect_str_eq(
        sgw_jstr(utf8->doc, "payload_base64"),
        sgw_q_text(text, sizeof(text),
                   "SELECT translate(encode(payload, 'base64'), E'\\n', '') FROM dead_letters "
                   "WHERE error_code = "
                   "'input.utf8.invalid' AND payload = convert_to('{\"v\": 1, \"type\": "
                   "\"saga.start\", \"saga_id\": \"y\", \"name\": \"', 'UTF8') || "
                   "'\\xc328'::bytea || convert_to('\"}', 'UTF8')"),
        "the original bytes, untouched, as base64");
    sgw_reader_close(&dlq);
}

Test(worker, duplicate_submission_is_idempotent_and_conflict_rejected, .timeout = 120)
{
    static const char steps[] = "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 1}},"
                                " {\"name\": \"b\", \"tool\": \"noop\"}]";
    static const char other[] = "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 2}},"
                                " {\"name\": \"b\", \"tool\": \"noop\"}]";
    const sg_json_t *rej, *problems;

    sgw_pair_start(NULL, 2, NULL);
    sgw_submit("dup-1", steps);
    sgw_submit("dup-1", steps);
    sgw_submit("dup-1", other);
    sgw_wait_status("dup-1", "completed");
    sgw_event_wait("dup-1", "saga.completed");
    rej = sgw_event_wait("dup-1", "saga.rejected");
    sgw_event_wait("dup-1", "saga.duplicate");
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters");
    /* 3 submissions on the commands topic and 2 step.execute on the
     * internal one, all consumed. */
    sgw_wait_int(5, "SELECT sum(next_offset) FROM consumer_offsets");
    sgw_pair_stop();

    /* The submission sent again is answered (saga.duplicate, in the
     * saga's own stream) wherever it fell among the saga's events. */
    {
        const sg_json_t *evs[16];
        size_t n, dups = 0;
        char order[256] = "";

        n = sgw_saga_events("dup-1", evs, 16);
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(order);
            cr_expect_eq(sgw_jint(evs[i], "seq"), (long long)i + 1, "seq in order");
            if (strcmp(sgw_jstr(evs[i], "type"), "saga.duplicate") == 0) {
                dups++;
                cr_expect_str_eq(sgw_jstr(evs[i], "submission_id"), "sub-dup-1");
                continue;
            }
            snprintf(order + len, sizeof(order) - len, "%s%s", len ? "," : "",
                     sgw_jstr(evs[i], "type"));
        }
        cr_expect_eq(dups, 1, "one answer to one submission sent again");
        cr_expect_str_eq(order, "saga.accepted,step.succeeded,step.succeeded,saga.completed");
    }
    cr_expect_str_eq(sgw_jstr(rej, "error_code"), "input.saga.conflict");
    problems = sg_json_member(rej, "problems");
    cr_expect_str_eq(sgw_jstr(sg_json_array_get(problems, 0), "path"), "$.saga_id");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas"), 1);
    cr_expect_eq(sgw_q_int("SELECT (args->>'n')::int FROM steps WHERE idx = 0"), 1,
                 "the first definition stands");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts"), 2, "each step ran once");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'dup-1:0:f:g1'"), 1);
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM dead_letters WHERE saga_id = 'dup-1' AND error_code "
                  "= 'input.saga.conflict'"),
        1);
}

/* Steps whose attempt started in the transaction that emitted their
 * command: the first step in the one that created the saga, the others in
 * the previous step's outcome (now() is the transaction's start time). */
static long long chained_steps(const char *saga_id)
{
    return sgw_q_int(
        "SELECT count(*) FROM attempts b JOIN sagas s USING (saga_id) "
        "LEFT JOIN attempts a ON a.saga_id = b.saga_id AND a.step_idx = b.step_idx - 1 "
        "WHERE b.saga_id = '%s' AND b.started_at = CASE b.step_idx WHEN 0 THEN "
        "s.created_at ELSE a.finished_at END",
        saga_id);
}

/* Runs a 3-step ledger saga on a worker with env and checks what every
 * run must show: each step ran once, and all four messages (saga.start,
 * three step.execute) were consumed, the chained steps' ones after the
 * steps they carry ran.  Then, how many steps were chained: started in
 * the transaction that emitted their command (the saga.start's, or the
 * previous step's outcome), and counted in the progress line with their
 * copies. */
static void expect_chained(const char *saga_id, const char *const *env, int want)
{
    char progress[64];

    sgw_pair_start(NULL, 1, env);
    sgw_submit(saga_id, "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 1}},"
                        " {\"name\": \"b\", \"tool\": \"ledger\", \"args\": {\"n\": 2}},"
                        " {\"name\": \"c\", \"tool\": \"ledger\", \"args\": {\"n\": 3}}]");
    sgw_wait_status(saga_id, "completed");
    sgw_wait_int(4, "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets");
    sgw_expect_worker_alive();
    sgw_pair_stop();

    cr_expect_eq(chained_steps(saga_id), want,
                 "steps started in the transaction that emitted their command");
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM attempts WHERE saga_id = '%s' AND status = 'ok'", saga_id),
        3, "one attempt per step: a message that came back ran nothing");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE calls = 1"), 3,
                 "each step's effect happened once");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0);
    snprintf(progress, sizeof(progress), "chained=%d copies=%d", want, want);
    cr_expect(strstr(sgw.worker.err, progress) != NULL, "the progress line says %s", progress);
}

/* Chaining (worker.chain, on by default): a step command is decided in the
 * transaction that emitted it, the first one in the saga.start's; its
 * message still goes out and is acknowledged when it comes back. */
Test(worker, next_step_runs_in_the_transaction_of_the_previous_outcome, .timeout = 120)
{
    expect_chained("chain-1", NULL, 3);
}

Test(worker, without_chaining_every_step_waits_for_its_message, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_CHAIN=false", NULL};

    expect_chained("nochain-1", env, 0);
}

/* A session listening where the relay does. */
static sg_pg_t *outbox_listener(void)
{
    sg_pg_t *listener = sgt_db_connect(sgw.dsn);
    sg_err_t err;

    cr_assert_eq(sg_pg_listen(listener, SG_OUTBOX_CHANNEL, &err), 0, "%s", err.message);
    return listener;
}

/* The worker's sessions leave the outbox trigger out of their commits
 * (migration 0009) and notify on the relay's channel after them: without
 * that, the relay would learn of the worker's messages only at its next
 * poll.  No relay runs here; the test listens where it would.  (A relay
 * with a long poll is no test of this: a notified row still held back
 * behind an older open transaction waits for the poll all the same.) */
Test(worker, commits_notify_the_relay_channel, .timeout = 120)
{
    sg_pg_t *listener;
    sg_err_t err;

    sgw_world_start(NULL, 1, NULL);
    listener = outbox_listener();
    sgw_start(&sgw.worker, "sagad-worker", NULL);
    sgw_wait_assigned(1); /* no relay: the step runs chained or not at all */
    sgw_submit("wake-1", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    sgw_wait_status("wake-1", "completed");
    cr_expect_eq(sg_pg_wait_notify(listener, 5000, NULL, NULL, &err), 1,
                 "the worker's commits notified %s", SG_OUTBOX_CHANNEL);
    cr_expect_gt(sgw_q_int("SELECT count(*) FROM outbox"), 0, "with its messages in the outbox");
    cr_expect_eq(sgw_proc_join(&sgw.worker, SIGTERM), 0, "%s", sgt_bg_tail(&sgw.worker));
    sg_pg_destroy(listener);
}

/* A commit that wrote a retry's timer says so in its notification: the
 * relay moves timers only when one it knows of is due, or when told of
 * new ones (else it would see this one up to relay.poll_interval_ms late). */
Test(worker, retry_timers_are_announced_to_the_relay, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_RETRY_BASE_MS=40", "SAGAD_RETRY_CAP_MS=60", NULL};
    bool marked = false;
    sg_pg_t *listener;
    sg_err_t err;

    sgw_world_start(NULL, 1, env);
    listener = outbox_listener();
    sgw_start(&sgw.relay, "sagad-relay", env);
    sgw_start(&sgw.worker, "sagad-worker", env);
    sgw_submit("timer-1", "[{\"name\": \"call\", \"tool\": \"fail\", \"args\": {\"class\": "
                          "\"transient\", \"code\": \"tool.http.503\", \"times\": 3}}]");
    sgw_wait_status("timer-1", "completed");
    /* Only the worker sends the mark (the outbox trigger's payload is ''). */
    for (int i = 0; i < 50 && !marked; i++)
        cr_assert_geq(sg_pg_wait_notify(listener, 100, SG_OUTBOX_TIMERS_MARK, &marked, &err), 0,
                      "%s", err.message);
    cr_expect(marked, "a notification with payload '%s' after the retry's timer was written",
              SG_OUTBOX_TIMERS_MARK);
    /* Three retries: a full-jitter delay of 0 goes straight to the outbox
     * with no timer, but not three times in a row (odds about 1 in 150,000). */
    cr_expect_eq(sgw_q_int("SELECT attempts FROM steps"), 4, "the step was retried three times");
    cr_expect_eq(sgw_proc_join(&sgw.worker, SIGTERM), 0, "%s", sgt_bg_tail(&sgw.worker));
    cr_expect_eq(sgw_proc_join(&sgw.relay, SIGTERM), 0, "%s", sgt_bg_tail(&sgw.relay));
    sg_pg_destroy(listener);
}

/* The commands topic made again (or the broker's data lost) while
 * PostgreSQL kept the offsets: the log now ends before the stored offset.
 * Its messages are new ones; skipped as "already taken" their sagas would
 * never run.  The worker says so and consumes from the log's start. */
Test(worker, stored_offset_beyond_the_log_end_is_taken_back, .timeout = 120)
{
    const char *params[2];
    sg_err_t err;

    sgw_world_start(NULL, 1, NULL);
    params[0] = sgw.group;
    params[1] = sgw.topic_cmd;
    cr_assert_eq(sg_pg_exec(sgw.pg,
                            "INSERT INTO consumer_offsets (group_id, topic, partition, "
                            "next_offset, owner_epoch) VALUES ($1, $2, 0, 500, 1)",
                            2, params, NULL, &err),
                 0, "%s", err.message);
    /* In the log before the worker looks: going back only to the log's
     * end would skip it. */
    sgw_submit("reset-1", "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 1}}]");
    sgw_start(&sgw.relay, "sagad-relay", NULL);
    sgw_start(&sgw.worker, "sagad-worker", NULL);
    sgw_wait_status("reset-1", "completed");
    sgw_pair_stop();

    cr_expect(strstr(sgw.worker.err, "before the offset kept in PostgreSQL: the topic was "
                                     "made again or the broker lost data") != NULL,
              "the worker says why it goes back: %s", sgt_bg_tail(&sgw.worker));
    cr_expect_lt(sgw_q_int("SELECT next_offset FROM consumer_offsets WHERE partition = 0 AND "
                           "topic = '%s'",
                           sgw.topic_cmd),
                 500, "the stored offset was taken back");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE calls = 1"), 1);
}

/* After a chained step b failed: the saga compensated, both steps were
 * chained, b ran once (attempts: "0:ok:-,1:<status>:<code>"), and its
 * one dead letter (code dl_code) names b's message, offset 1 of the
 * internal topic, after step a's.  Stops the processes. */
static void expect_chained_failure_on_message(const char *saga_id, const char *attempts,
                                              const char *dl_code)
{
    char text[512], want[512];

    sgw_wait_status(saga_id, "compensated");
    sgw_wait_int(3, "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets");
    sgw_pair_stop();

    cr_expect_eq(chained_steps(saga_id), 2, "steps a and b were chained");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(step_idx || ':' || status || ':' || "
                                "coalesce(error_code, '-'), ',' ORDER BY id) FROM attempts"),
                     attempts, "step b ran once, its result kept: %s", text);
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 1);
    snprintf(want, sizeof(want), "%s|b|%s|0|1|cmd:%s:1:f:g1:a1", dl_code, sgw.topic_int, saga_id);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', error_code, step_name, original_topic, "
                                "original_partition, original_offset, "
                                "convert_from(payload, 'UTF8')::jsonb->>'id') FROM dead_letters"),
                     want, "the dead letter names step b's message");
}

/* A chained call that fails waits for its message, whose command takes
 * over the result: the dead letter names that message, and the step ran
 * once.  The relay starts only once the call has failed, so the message
 * comes after it (the next test has the other order). */
Test(worker, chained_step_failure_is_recorded_on_its_message, .timeout = 120)
{
    sgw_world_start(NULL, 1, NULL);
    sgw_start(&sgw.worker, "sagad-worker", NULL);
    sgw_wait_assigned(1);
    sgw_submit("chainfail-1",
               "[{\"name\": \"a\", \"tool\": \"noop\"},"
               " {\"name\": \"b\", \"tool\": \"fail\", \"args\": {\"class\": \"poison\", "
               "\"code\": \"tool.builtin.fail\", \"message\": \"bad input\"}}]");
    /* b's attempt row commits before its call, which fails in
     * microseconds; the second is margin. */
    sgw_wait_int(1, "SELECT count(*) FROM attempts WHERE step_idx = 1");
    sleep(1);
    sgw_start(&sgw.relay, "sagad-relay", NULL);
    expect_chained_failure_on_message("chainfail-1", "0:ok:-,1:error:tool.builtin.fail",
                                      "tool.builtin.fail");
    cr_expect(strstr(sgw.worker.err, "chained call failed: its outcome waits for its message"),
              "the worker says why the saga waits: %s", sgt_bg_tail(&sgw.worker));
}

/* The other order: the chained call's message arrives while the call still
 * runs (it waits behind it in its saga's queue), and the call then fails.
 * The message's command takes over the result at once. */
Test(worker, chained_step_failing_after_its_message_came_is_recorded_on_it, .timeout = 120)
{
    static const char tools[] =
        "\"sleep.cut\": {\"adapter\": \"builtin\", \"target\": \"sleep\", \"side_effect\": "
        "\"read\", \"timeout_ms\": 3000, \"retry\": {\"max_attempts\": 1}}";

    sgw_pair_start(tools, 1, NULL);
    sgw_submit("chainlate-1",
               "[{\"name\": \"a\", \"tool\": \"noop\"},"
               " {\"name\": \"b\", \"tool\": \"sleep.cut\", \"args\": {\"ms\": 60000}}]");
    /* The step.execute of a and of b, published by the relay while b's
     * call sleeps towards its 3 s timeout. */
    sgw_wait_topic_count(sgw.topic_int, 2);
    sgw_assert_call_running(1, "step b's message came while its call still ran");
    expect_chained_failure_on_message("chainlate-1", "0:ok:-,1:timeout:tool.timeout",
                                      "runtime.budget.attempts_exhausted");
    cr_expect_null(strstr(sgw.worker.err, "its outcome waits for its message"),
                   "the message was there when the call failed: %s", sgt_bg_tail(&sgw.worker));
}

Test(worker, replayed_step_command_has_no_effect, .timeout = 120)
{
    const sg_json_t *evs[16];
    sgw_reader_t cmds;
    const sgw_msg_t *exec = NULL;
    long long attempts, keys, calls, seq, published;

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("replay-1", "[{\"name\": \"a\", \"tool\": \"ledger\"},"
                           " {\"name\": \"b\", \"tool\": \"ledger\"}]");
    sgw_wait_status("replay-1", "completed");
    sgw_event_wait("replay-1", "saga.completed");
    sgw_wait_int(0, "SELECT count(*) FROM outbox");

    sgw_reader_open(&cmds, sgw.topic_int);
    sgw_reader_wait_count(&cmds, 2);
    for (size_t i = 0; i < cmds.n; i++)
        if (strcmp(sgw_jstr(cmds.v[i].doc, "type"), "step.execute") == 0 &&
            sgw_jint(cmds.v[i].doc, "step") == 0)
            exec = &cmds.v[i];
    cr_assert_not_null(exec, "step 0's step.execute is on the internal topic");
    attempts = sgw_q_int("SELECT count(*) FROM attempts");
    keys = sgw_q_int("SELECT count(*) FROM builtin_ledger");
    calls = sgw_q_int("SELECT sum(calls) FROM builtin_ledger");
    seq = sgw_q_int("SELECT seq FROM sagas");
    published = sgw_q_int("SELECT sum(published) FROM relay_cursors");

    /* The same command twice more, as a producer retry or a replay of the
     * topic would deliver it: the relay's signature with it, so it is a
     * copy of sagad's own message (a copy without it is dead-lettered
     * unread: trust::forged_internal_commands_...). */
    {
        const char *mac = sgw_jstr(exec->headers, "sagad-mac");
        sg_kafka_header_t h = {"sagad-mac", mac, strlen(mac)};

        cr_assert(mac[0], "the relay signed it");
        sgw_produce_headers(sgw.topic_int, exec->key, exec->raw, exec->len, &h, 1);
        sgw_produce_headers(sgw.topic_int, exec->key, exec->raw, exec->len, &h, 1);
    }
    sgw_wait_int(5, "SELECT sum(next_offset) FROM consumer_offsets");
    /* The transactions that consumed them wrote nothing to send. */
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM outbox") + sgw_q_int("SELECT count(*) FROM timers"), 0);
    sgw_reader_poll(&sgw.events, 1000);
    sgw_pair_stop();

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts"), attempts,
                 "the step did not run again");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger"), keys, "no new effect");
    cr_expect_eq(sgw_q_int("SELECT sum(calls) FROM builtin_ledger"), calls, "no new call");
    cr_expect_eq(sgw_q_int("SELECT seq FROM sagas"), seq);
    cr_expect_eq(sgw_q_int("SELECT sum(published) FROM relay_cursors"), published,
                 "nothing more was published");
    cr_expect_eq(sgw_saga_events("replay-1", evs, 16), 4, "no new events");
    cr_expect_str_eq(sgw_q_text((char[32]){0}, 32, "SELECT status FROM sagas"), "completed");
    cr_expect(strstr(sgw.worker.err, "duplicate or stale command, no effect"),
              "the worker logs the duplicate: %s", sgt_bg_tail(&sgw.worker));
    sgw_reader_close(&cmds);
}

/* A chained call and its message (the copy, which waits behind it) are one
 * piece of work: they hold one worker.max_in_flight slot between them.
 * With a limit of 2, a saga whose chained call is running and whose copy
 * has arrived leaves room for a second saga's call. */
Test(worker, chained_call_and_its_message_hold_one_slot, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_MAX_IN_FLIGHT=2", NULL};
    static const char nap[] =
        "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": 4000}}]";

    sgw_pair_start(NULL, 1, env);
    sgw_submit("slot-a", nap);
    sgw_wait_int(1, "SELECT count(*) FROM attempts WHERE finished_at IS NULL");
    /* Its step's message published, then a second for the worker to
     * take it: it now waits behind the running call. */
    sgw_wait_int(1, "SELECT (count(*) = 0)::int FROM outbox");
    sleep(1);
    sgw_submit("slot-b", nap);
    sgw_wait_status("slot-a", "completed");
    sgw_wait_status("slot-b", "completed");
    sgw_expect_worker_alive();
    sgw_pair_stop();

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts b JOIN attempts a ON a.saga_id = "
                           "'slot-a' WHERE b.saga_id = 'slot-b' AND b.started_at < a.finished_at"),
                 1, "slot-b's call started while slot-a's ran");
}

/* The offsets kept in PostgreSQL are copied to the consumer group in
 * Kafka, where lag tools read them, those of both topics: at most once per
 * worker.kafka_commit_interval_ms, and at once for a partition the worker
 * gives up (here, on SIGTERM, long before the interval). */
Test(worker, offsets_reach_the_kafka_group_for_lag_tools, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_KAFKA_COMMIT_INTERVAL_MS=60000", NULL};
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(2);
    rd_kafka_t *rk;
    int64_t committed[2];

    sgw_pair_start(NULL, 1, env);
    sgw_submit("lag-1", "[{\"name\": \"a\", \"tool\": \"noop\"},"
                        " {\"name\": \"b\", \"tool\": \"noop\"}]");
    sgw_wait_status("lag-1", "completed");
    sgw_wait_int(3, "SELECT sum(next_offset) FROM consumer_offsets");
    sgw_pair_stop();

    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", sgt_kafka(), errstr, sizeof(errstr)),
                 RD_KAFKA_CONF_OK, "%s", errstr);
    cr_assert_eq(rd_kafka_conf_set(conf, "group.id", sgw.group, errstr, sizeof(errstr)),
                 RD_KAFKA_CONF_OK, "%s", errstr);
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    cr_assert_not_null(rk, "%s", errstr);
    rd_kafka_topic_partition_list_add(list, sgw.topic_cmd, 0);
    rd_kafka_topic_partition_list_add(list, sgw.topic_int, 0);
    cr_assert_eq(rd_kafka_committed(rk, list, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    committed[0] = list->elems[0].offset;
    committed[1] = list->elems[1].offset;
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_destroy(rk);
    cr_expect_eq(committed[0], 1,
                 "the group's offset of the commands topic in Kafka is the one PostgreSQL keeps "
                 "(saga.start consumed): %lld",
                 (long long)committed[0]);
    cr_expect_eq(committed[1], 2,
                 "the group's offset of the internal topic in Kafka is the one PostgreSQL "
                 "keeps (two step commands consumed): %lld",
                 (long long)committed[1]);
}

/* Partitions added to the internal topic move keys, and the relay's
 * producer learns of them only at its next metadata refresh (here, not
 * within the test): a chained step predicted with the new count could have
 * its message land elsewhere and run twice.  The worker notices the new
 * count (within its 10 s check) and stops chaining for
 * worker.chain_repartition_pause_ms; sagas keep completing, each step's
 * effect once.  The sagas after the change are ones whose key the new
 * count still puts on partition 0, which the worker owns: without the
 * pause they would be chained. */
Test(worker, added_partitions_pause_chaining, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_CHAIN_REPARTITION_PAUSE_MS=600000", NULL};
    char errstr[256], ids[4][32];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_NewPartitions_t *np;
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    const rd_kafka_topic_result_t **tr;
    size_t ntr = 0;
    rd_kafka_t *rk;
    int found = 0;

    sgw_pair_start(NULL, 1, env);
    sgw_submit("repart-0", "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 1}},"
                           " {\"name\": \"b\", \"tool\": \"ledger\", \"args\": {\"n\": 2}}]");
    sgw_wait_status("repart-0", "completed");

    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", sgt_kafka(), errstr, sizeof(errstr)),
                 RD_KAFKA_CONF_OK, "%s", errstr);
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    cr_assert_not_null(rk, "%s", errstr);
    np = rd_kafka_NewPartitions_new(sgw.topic_int, 3, errstr, sizeof(errstr));
    cr_assert_not_null(np, "%s", errstr);
    q = rd_kafka_queue_new(rk);
    rd_kafka_CreatePartitions(rk, &np, 1, NULL, q);
    ev = rd_kafka_queue_poll(q, 15000);
    cr_assert_not_null(ev, "no answer to CreatePartitions");
    tr = rd_kafka_CreatePartitions_result_topics(rd_kafka_event_CreatePartitions_result(ev), &ntr);
    cr_assert_eq(ntr, 1);
    cr_assert_eq(rd_kafka_topic_result_error(tr[0]), RD_KAFKA_RESP_ERR_NO_ERROR, "%s",
                 rd_kafka_topic_result_error_string(tr[0]));
    rd_kafka_event_destroy(ev);
    rd_kafka_NewPartitions_destroy(np);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    sleep(12); /* the worker checks the count every 10 s */

    for (int i = 0; found < 4 && i < 1000; i++) {
        snprintf(ids[found], sizeof(ids[found]), "repart-%d", i + 1);
        if (sg_kafka_key_partition(ids[found], strlen(ids[found]), 3) == 0)
            sgw_submit(ids[found++], "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": "
                                     "{\"n\": 1}}, {\"name\": \"b\", \"tool\": \"ledger\", "
                                     "\"args\": {\"n\": 2}}]");
    }
    cr_assert_eq(found, 4);
    for (int i = 0; i < found; i++)
        sgw_wait_status(ids[i], "completed");
    sgw_expect_worker_alive();
    sgw_pair_stop();

    cr_expect_eq(chained_steps("repart-0"), 2, "chained before the change");
    for (int i = 0; i < found; i++)
        cr_expect_eq(chained_steps(ids[i]), 0, "%s chained after the partition count changed",
                     ids[i]);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE calls <> 1"), 0,
                 "each step's effect happened once");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger"), 2 * (found + 1));
    cr_expect(strstr(sgw.worker.err, "partition count changed") != NULL &&
                  strstr(sgw.worker.err, "\"partitions_before\":\"1\",\"partitions\":\"3\"") !=
                      NULL,
              "the worker says chaining stopped: %s", sgt_bg_tail(&sgw.worker));
}

#define FAST_SAGAS 100

/* One saga sleeps sleep_ms at the head of the only partition while
 * FAST_SAGAS one-step sagas behind it on the same partition must all
 * complete first. */
static void slow_head_fast_tail(const char *const *env, int sleep_ms)
{
    char id[32], steps[128];
    size_t slow_at = 0, fast_before = 0;

    sgw_pair_start(NULL, 1, env);
    snprintf(steps, sizeof(steps),
             "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": %d}}]", sleep_ms);
    sgw_submit("slow", steps);
    for (int i = 0; i < FAST_SAGAS; i++) {
        snprintf(id, sizeof(id), "fast-%03d", i);
        sgw_submit(id, "[{\"name\": \"only\", \"tool\": \"noop\"}]");
    }
    sgw_wait_status("slow", "completed");
    sgw_event_wait("slow", "saga.completed");
    sgw_wait_int(FAST_SAGAS + 1, "SELECT count(*) FROM sagas WHERE status = 'completed'");
    sgw_pair_stop();

    /* One partition: the events topic has the completions in commit order. */
    for (size_t i = 0; i < sgw.events.n; i++) {
        const sg_json_t *ev = sgw.events.v[i].doc;
        if (strcmp(sgw_jstr(ev, "type"), "saga.completed") != 0)
            continue;
        if (strcmp(sgw_jstr(ev, "saga_id"), "slow") == 0) {
            slow_at = i;
            break;
        }
        fast_before++;
    }
    cr_expect_eq(fast_before, FAST_SAGAS,
                 "all %d one-step sagas completed before the sleeping one; %zu did", FAST_SAGAS,
                 fast_before);
    cr_expect_gt(slow_at, 0);
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id LIKE 'fast-%%' AND updated_at <= "
                  "(SELECT updated_at FROM sagas WHERE saga_id = 'slow')"),
        FAST_SAGAS);
}

Test(worker, slow_step_does_not_block_its_partition, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_THREADS=4", NULL};

    slow_head_fast_tail(env, 2000);
}

/* worker.max_in_flight counts unfinished commands: the fast sagas' finished
 * commands wait behind the sleeping one for the offset to move, but do not
 * use up the limit (16 here, against 2 x FAST_SAGAS commands behind it;
 * counting them, intake would stop after 15 and the test fail).  The nap is
 * long so that 16 at a time has ample time on a loaded machine. */
/* sagas.updated_at is what `sagactl list --stuck` and the console's idle
 * time read.  The worker moves it with every status change and, between
 * them, once it is a second old (worker_writes.c: the steps between a
 * saga's start and end stay HOT updates). */
Test(worker, saga_row_shows_progress_to_within_a_second, .timeout = 120)
{
    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("progress", "[{\"name\": \"a\", \"tool\": \"sleep\", \"args\": {\"ms\": 1300}},"
                           " {\"name\": \"b\", \"tool\": \"sleep\", \"args\": {\"ms\": 1300}}]");
    sgw_wait_int(1, "SELECT count(*) FROM steps WHERE saga_id = 'progress' AND idx = 0 AND "
                    "status = 'succeeded'");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = 'progress' AND status = "
                           "'running' AND updated_at >= created_at + interval '1 second'"),
                 1, "a running saga's step outcome a second after its start moves updated_at");
    sgw_wait_status("progress", "completed");
    sgw_submit("quick", "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"b\", "
                        "\"tool\": \"noop\"}]");
    sgw_wait_status("quick", "completed");
    sgw_pair_stop();
    /* The completing transaction wrote the last attempt's finish and the
     * status, with one now(). */
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas s WHERE updated_at = (SELECT "
                           "max(finished_at) FROM attempts a WHERE a.saga_id = s.saga_id)"),
                 2, "each saga's updated_at is the time of its completion");
}

Test(worker, finished_commands_behind_a_slow_one_do_not_stop_intake, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_THREADS=4", "SAGAD_WORKER_MAX_IN_FLIGHT=16",
                                      NULL};

    slow_head_fast_tail(env, 8000);
}

Test(worker, crash_loop_dead_letters_after_limit, .timeout = 180)
{
    static const char tools[] =
        "\"crash\": {\"adapter\": \"builtin\", \"target\": \"crash\", \"side_effect\": \"read\"}";
    static const int limit = 2;
    char limit_env[64], instance_env[160], instance[96], text[512];
    const char *env[4] = {"SAGAD_WORKER_TEST_ALLOW_CRASH=true", limit_env, instance_env, NULL};
    const sg_json_t *evs[32], *dl;
    int crashes;
    size_t n;

    /* A static member rejoins at once after a crash instead of waiting for
     * the dead member's session to time out. */
    sgt_unique(instance, sizeof(instance), "sgt_instance");
    snprintf(limit_env, sizeof(limit_env), "SAGAD_WORKER_CRASH_LOOP_LIMIT=%d", limit);
    snprintf(instance_env, sizeof(instance_env), "SAGAD_KAFKA_GROUP_INSTANCE_ID=%s", instance);
    sgw_pair_start(tools, 2, env);
    /* The bystander's step is still sleeping when the crash step aborts
     * the worker: its attempt is interrupted too, every time the two run
     * side by side.  It must still complete: at crash_loop_limit - 1
     * interruptions a command runs alone, so only the crash step's own
     * crash reaches the limit. */
    sgw_submit("bystander", "[{\"name\": \"a\", \"tool\": \"sleep\", \"args\": {\"ms\": 1500}}, "
                            "{\"name\": \"b\", \"tool\": \"noop\"}]");
    sgw_submit("crashy", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"},"
                         " {\"name\": \"boom\", \"tool\": \"crash\"}]");
    crashes = sgw_crash_until_terminal("crashy", limit + 1);
    sgw_wait_status("crashy", "compensated");
    sgw_wait_status("bystander", "completed");
    sgw_event_wait("crashy", "saga.compensated");
    sgw_pair_stop();

    cr_expect_eq(crashes, limit, "the crashing attempt ran crash_loop_limit times, then no more");
    n = sgw_saga_events("crashy", evs, 32);
    cr_expect_str_eq(sgw_jstr(evs[n - 1], "type"), "saga.compensated");
    dl = sgw_event_find("crashy", "saga.dead_lettered")->doc;
    cr_expect_str_eq(sgw_jstr(dl, "error_code"), "runtime.crash_loop");
    cr_expect_str_eq(sgw_jstr(dl, "step_name"), "boom");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', error_code, saga_id, step_name, phase, "
                                "attempts) FROM dead_letters"),
                     "runtime.crash_loop|crashy|boom|forward|2");
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM attempts WHERE saga_id = 'crashy' AND step_idx = 1 "
                  "AND error_code = 'runtime.interrupted'"),
        limit, "each interrupted run is in the trail");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(status || ':' || coalesce(error_code, '-'), ',' "
                                "ORDER BY idx) FROM steps WHERE saga_id = 'crashy'"),
                     "compensated:-,unknown:runtime.crash_loop");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'crashy:0:c:g1'"), 1);
    sgw_expect_events("bystander", NULL, "saga.accepted", "step.succeeded", "step.succeeded",
                      "saga.completed", NULL);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE saga_id = 'bystander' AND "
                           "step_idx = 0 AND error_code = 'runtime.interrupted'"),
                 limit - 1, "the bystander's step was running at the first crash, alone after");
}
