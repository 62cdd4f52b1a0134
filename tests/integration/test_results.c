/* Results flow forward, compensations know what they undo, unknown
 * outcomes are undone (DESIGN section 10; docs/WORKER.md, "References"
 * and "Unknown outcomes").  The real worker and relay, with builtin tools
 * or the example downstream checkout-svc, whose request log shows what
 * each call really received. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_json.h"

static sgt_bg_t svc;
static char base[128]; /* http://127.0.0.1:PORT of checkout-svc, "" when not started */

static void results_setup(void)
{
    sgw_setup();
    memset(&svc, 0, sizeof(svc));
    base[0] = '\0';
}

static void results_teardown(void)
{
    if (base[0])
        sgw_checkout_stop(&svc);
    sgt_bg_free(&svc);
    sgw_teardown();
}

TestSuite(results, .init = results_setup, .fini = results_teardown, .timeout = 180);

/* Submits a whole saga.start document (its text, with %s for the saga id
 * where the format puts it). */
static void submit_doc(const char *saga_id, const char *rest)
{
    char msg[8192];

    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
             "\"name\": \"results\", %s}",
             saga_id, saga_id, rest);
    sgw_produce(sgw.topic_cmd, saga_id, msg, strlen(msg));
}

static sg_json_t *parse(const char *text)
{
    sg_json_t *doc = sg_json_parse(text, strlen(text), NULL, NULL);

    cr_assert_not_null(doc, "not JSON: %s", text);
    return doc;
}

/* The text of a member of a JSON object as JSON ("" when absent). */
static void member_json(char *out, size_t size, const sg_json_t *obj, const char *key)
{
    const sg_json_t *m = sg_json_member(obj, key);
    char *text = m ? sg_json_print(m) : NULL;

    snprintf(out, size, "%s", text ? text : "");
    free(text);
}

/* The checkout tools on checkout-svc, retried fast; charge_extra and
 * refund_extra are added to those two tools' members. */
static void start_checkout(const char *const *svc_args, const char *charge_extra,
                           const char *refund_extra)
{
    char tools[4096];

    sgw_checkout_start(&svc, svc_args, base, sizeof(base));
    snprintf(tools, sizeof(tools),
             "\"co.charge\": {\"adapter\": \"http\", \"target\": \"%s/payment/charge\", "
             "\"side_effect\": \"reversible\", \"compensation\": \"co.refund\", \"retry\": "
             "{\"max_attempts\": 3, \"base_ms\": 10, \"cap_ms\": 20}%s%s},"
             "\"co.refund\": {\"adapter\": \"http\", \"target\": \"%s/payment/refund\", "
             "\"side_effect\": \"idempotent\", \"compensate_retry\": {\"max_attempts\": 2, "
             "\"base_ms\": 10, \"cap_ms\": 20}%s%s},"
             "\"fail.permanent\": {\"adapter\": \"builtin\", \"target\": \"fail\", "
             "\"side_effect\": \"idempotent\"}",
             base, charge_extra ? ", " : "", charge_extra ? charge_extra : "", base,
             refund_extra ? ", " : "", refund_extra ? refund_extra : "");
    sgw_pair_start(tools, 1, NULL);
}

/* A charge, then a step that fails for good: the charge is refunded. */
static const char charge_then_fail[] =
    "\"steps\": [{\"name\": \"charge\", \"tool\": \"co.charge\", \"args\": {\"amount_cents\": "
    "1250}}, {\"name\": \"boom\", \"tool\": \"fail.permanent\", \"args\": {\"class\": "
    "\"permanent\", \"code\": \"tool.rejected\"}}]";

static const char flow_1[] =
    "\"input\": {\"order\": 1001}, \"steps\": ["
    "{\"name\": \"reserve\", \"tool\": \"echo\", \"args\": {\"reservation_id\": "
    "\"inv_7\", \"lines\": [\"BOOK-7\", \"PEN-2\"]}},"
    "{\"name\": \"ship\", \"tool\": \"echo\", \"args\": {\"reservation\": {\"$from\": "
    "\"/steps/reserve/result/reservation_id\"}, \"second\": {\"$from\": "
    "\"/steps/reserve/result/lines/1\"}, \"key\": {\"$from\": \"/steps/reserve/key\"}, "
    "\"order\": {\"$from\": \"/input/order\"}, \"carrier\": \"dhl\"}}],"
    "\"output\": {\"shipped\": {\"$from\": \"/steps/ship/result/reservation\"}, "
    "\"order\": {\"$from\": \"/input/order\"}}";

Test(results, a_later_step_gets_an_earlier_result_and_the_saga_its_output)
{
    const sg_json_t *dup;
    const sg_json_t *ev[8];
    sg_json_t *args, *want;
    char text[1024];

    sgw_pair_start(NULL, 1, NULL);
    submit_doc("flow-1", flow_1);
    sgw_wait_status("flow-1", "completed");
    sgw_event_wait("flow-1", "saga.completed");
    /* Asked again, the saga answers with its output. */
    submit_doc("flow-1", flow_1);
    dup = sgw_event_wait("flow-1", "saga.duplicate");
    sgw_pair_stop();
    member_json(text, sizeof(text), dup, "output");
    args = parse(text[0] ? text : "null");
    want = parse("{\"shipped\": \"inv_7\", \"order\": 1001}");
    cr_expect(sg_json_equal(args, want),
              "saga.duplicate of a completed saga carries its output: %s", text);
    sg_json_destroy(args);
    sg_json_destroy(want);

    /* What the call really sent is on its attempt row; the first step's
     * args had no reference, so its row keeps none. */
    args = parse(sgw_q_text(text, sizeof(text),
                            "SELECT args::text FROM attempts WHERE saga_id = 'flow-1' AND "
                            "step_idx = 1"));
    want = parse("{\"reservation\": \"inv_7\", \"second\": \"PEN-2\", \"key\": "
                 "\"flow-1:0:f:g1\", \"order\": 1001, \"carrier\": \"dhl\"}");
    cr_expect(sg_json_equal(args, want), "attempt args: %s", text);
    sg_json_destroy(args);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT coalesce(args::text, 'NULL') FROM attempts WHERE "
                                "saga_id = 'flow-1' AND step_idx = 0"),
                     "NULL");
    /* ...and the saga's timeline shows what was sent. */
    {
        const char *const show[] = {"show", "flow-1", "--json", NULL};
        char *out = NULL;
        cr_expect_eq(sgt_run("sagactl", show, sgw.env, &out, NULL), 0);
        cr_expect(out && strstr(out, "sent {\\\"key\\\": \\\"flow-1:0:f:g1\\\"") != NULL,
                  "sagactl show: %s", out ? out : "(none)");
        free(out);
    }
    /* The events carry the results and the output. */
    sgw_expect_events("flow-1", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                      "saga.completed", "saga.duplicate", NULL);
    member_json(text, sizeof(text), ev[2], "result");
    args = parse(text);
    cr_expect(sg_json_equal(args, want), "step.succeeded carries the result: %s", text);
    sg_json_destroy(args);
    sg_json_destroy(want);
    member_json(text, sizeof(text), ev[3], "output");
    want = parse("{\"shipped\": \"inv_7\", \"order\": 1001}");
    args = parse(text);
    cr_expect(sg_json_equal(args, want), "saga.completed carries the output: %s", text);
    sg_json_destroy(args);
    args = parse(
        sgw_q_text(text, sizeof(text), "SELECT output::text FROM sagas WHERE saga_id = 'flow-1'"));
    cr_expect(sg_json_equal(args, want), "sagas.output: %s", text);
    sg_json_destroy(args);
    sg_json_destroy(want);
}

Test(results, a_reference_to_an_absent_value_fails_the_step_and_the_saga_compensates)
{
    const sg_json_t *failed;
    char text[512];

    sgw_pair_start(NULL, 1, NULL);
    submit_doc("flow-2",
               "\"steps\": [{\"name\": \"hold\", \"tool\": \"ledger.reversible\", \"args\": "
               "{\"sku\": \"B7\"}},{\"name\": \"use\", \"tool\": \"echo\", \"args\": {\"id\": "
               "{\"$from\": \"/steps/hold/result/no_such_id\"}}}]");
    sgw_wait_status("flow-2", "compensated");
    failed = sgw_event_wait("flow-2", "step.failed");
    sgw_event_wait("flow-2", "saga.compensated");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "input.ref.unresolved");
    cr_expect(strstr(sgw_jstr(failed, "message"),
                     "$.steps[1].args.id: the reference {\"$from\": "
                     "\"/steps/hold/result/no_such_id\"} names no value") != NULL,
              "the message names the path and the pointer: %s", sgw_jstr(failed, "message"));
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1"), 0,
                 "the step was never called");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(status || ':' || coalesce(error_code, '-'), "
                                "',' ORDER BY idx) FROM steps"),
                     "compensated:-,failed:input.ref.unresolved");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'flow-2:0:c:g1'"), 1,
                 "the earlier step was undone once");
}

/* The amplification of issue 36 item 4: an 850 KB input named by six
 * thousand references fits the message caps (1 MiB, 20,000 values) and
 * would resolve to about 5 GB before any attempt row is written, killing
 * every worker that took the partition.  The step fails with
 * input.ref.too_large and is never called, the saga compensates, the
 * worker runs on, and the next saga of the same partition completes. */
Test(results, references_that_amplify_past_the_budget_fail_the_step_and_nothing_else)
{
    size_t big = 850000, n = 6000, len;
    char *msg = malloc(big + n * 32 + 1024);
    const sg_json_t *failed;
    char text[256];

    cr_assert_not_null(msg);
    sgw_pair_start(NULL, 1, NULL);
    len = (size_t)sprintf(msg, "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-amp\", "
                               "\"saga_id\": \"amp-1\", \"name\": \"amp\", \"input\": {\"b\": \"");
    memset(msg + len, 'x', big);
    len += big;
    len += (size_t)sprintf(msg + len, "\"}, \"steps\": [{\"name\": \"hold\", \"tool\": "
                                      "\"ledger.reversible\"}, {\"name\": \"echo\", \"tool\": "
                                      "\"echo\", \"args\": {\"copies\": [");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(msg + len, "%s{\"$from\": \"/input/b\"}", i ? "," : "");
    len += (size_t)sprintf(msg + len, "]}}]}");
    cr_assert_lt(len, 1048576, "the message fits the 1 MiB cap");
    sgw_produce(sgw.topic_cmd, "amp-1", msg, len);
    free(msg);
    submit_doc("amp-2", "\"steps\": [{\"name\": \"a\", \"tool\": \"noop\"}]");
    sgw_wait_status("amp-1", "compensated");
    sgw_wait_status("amp-2", "completed");
    failed = sgw_event_wait("amp-1", "step.failed");
    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "input.ref.too_large");
    cr_expect(strstr(sgw_jstr(failed, "message"), "$.steps[1].args.copies[") &&
                  strstr(sgw_jstr(failed, "message"), "{\"$from\": \"/input/b\"}"),
              "names the path and the pointer: %s", sgw_jstr(failed, "message"));
    cr_expect_not(sgt_bg_done(&sgw.worker), "the worker runs on");
    sgw_pair_stop();
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM attempts WHERE saga_id = 'amp-1' AND step_idx = 1"), 0,
        "the step was never called");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(status, ',' ORDER BY idx) FROM steps WHERE "
                                "saga_id = 'amp-1'"),
                     "compensated,failed");
}

Test(results, a_compensation_receives_the_forward_result_key_and_effect)
{
    const sg_json_t *reqs, *fwd;
    sg_json_t *doc, *doc2, *charge_doc, *answer;
    char text[1024], answer_text[1024];

    start_checkout(NULL, NULL, NULL);
    submit_doc("fwd-1", charge_then_fail);
    sgw_wait_status("fwd-1", "compensated");
    sgw_pair_stop();

    reqs = sgw_checkout_requests(base, "/payment/charge", &charge_doc);
    cr_assert_eq(sg_json_array_size(reqs), 1);
    reqs = sgw_checkout_requests(base, "/payment/refund", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1, "one refund");
    fwd = sg_json_member(sg_json_member(sg_json_array_get(reqs, 0), "body"), "forward");
    cr_assert_not_null(fwd, "the refund's body has forward");
    cr_expect_str_eq(sgw_jstr(fwd, "idempotency_key"), "fwd-1:0:f:g1");
    cr_expect_str_eq(sgw_jstr(fwd, "effect"), "known");
    /* The result is the charge's answer, as the step row keeps it. */
    member_json(text, sizeof(text), fwd, "result");
    answer = parse(sgw_q_text(answer_text, sizeof(answer_text),
                              "SELECT result::text FROM steps WHERE idx = 0"));
    doc2 = parse(text);
    cr_expect(sg_json_equal(doc2, answer), "forward.result %s is the charge's answer %s", text,
              answer_text);
    sg_json_destroy(doc2);
    cr_expect_str_neq(sgw_jstr(answer, "idempotency_key"), "", "a real answer: %s", answer_text);
    sg_json_destroy(answer);
    sg_json_destroy(doc);
    sg_json_destroy(charge_doc);
}

/* checkout_saga (test_checkout.c) has a refund's 404 counted as nothing to
 * undo, with the registry's nothing_to_undo; without it, a 404 is a
 * compensation that failed. */
Test(results, without_nothing_to_undo_a_404_fails_the_compensation)
{
    static const char *const faults[] = {"--fault", "/payment/refund=404", NULL};

    start_checkout(faults, NULL, NULL);
    submit_doc("none-2", charge_then_fail);
    sgw_wait_status("none-2", "failed");
    sgw_pair_stop();
    cr_expect_str_eq(sgw_q_text((char[64]){0}, 64, "SELECT status FROM steps WHERE idx = 0"),
                     "compensation_failed");
}

/* ---- agent_action -------------------------------------------------------- */

Test(results, a_tools_own_agent_action_is_kept_verbatim_on_the_failure_and_the_outcome)
{
    static const char want[] = "Ask the customer for another card, then submit a new saga.";
    char tools[1024], path[PATH_MAX], text[512];
    const sg_json_t *failed, *compensating, *done;

    cr_assert_not_null(realpath("tests/fixtures/exec/refuse.sh", path));
    snprintf(tools, sizeof(tools),
             "\"pay.exec\": {\"adapter\": \"exec\", \"target\": [\"%s\"], \"side_effect\": "
             "\"idempotent\"}",
             path);
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("act-1", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"}, "
                        "{\"name\": \"pay\", \"tool\": \"pay.exec\"}]");
    sgw_wait_status("act-1", "compensated");
    failed = sgw_event_wait("act-1", "step.failed");
    compensating = sgw_event_wait("act-1", "saga.compensating");
    done = sgw_event_wait("act-1", "saga.compensated");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "tool.exec.exit");
    cr_expect_str_eq(sgw_jstr(failed, "agent_action"), want);
    cr_expect_str_eq(sgw_jstr(compensating, "agent_action"), want);
    cr_expect_str_eq(sgw_jstr(done, "agent_action"), want,
                     "the terminal event, a later "
                     "transaction's, names it too");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT envelope->>'agent_action' FROM attempts WHERE "
                                "step_idx = 1"),
                     want, "stored with the attempt");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT agent_action FROM steps WHERE idx = 1"),
                     want);
}

Test(results, without_one_the_codes_default_agent_action_is_published_and_dead_lettered)
{
    char text[512];
    const sg_json_t *failed, *dl;
    const sgw_msg_t *rec;
    sgw_reader_t dlq;

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("act-2", "[{\"name\": \"bad\", \"tool\": \"fail\", \"args\": {\"class\": "
                        "\"poison\", \"code\": \"tool.downstream.rejected\"}}]");
    sgw_wait_status("act-2", "compensated");
    failed = sgw_event_wait("act-2", "step.failed");
    dl = sgw_event_wait("act-2", "saga.dead_lettered");
    sgw_reader_open(&dlq, sgw.topic_dlq);
    sgw_reader_wait_count(&dlq, 1);
    sgw_pair_stop();

    /* schemas/error_codes.json's default for the code */
    cr_expect(
        strncmp(sgw_jstr(failed, "agent_action"), "Do not retry as is: follow the tool's", 37) == 0,
        "step.failed: %s", sgw_jstr(failed, "agent_action"));
    cr_expect_str_eq(sgw_jstr(dl, "agent_action"), sgw_jstr(failed, "agent_action"));
    rec = &dlq.v[0];
    cr_assert_not_null(rec->doc);
    cr_expect_str_eq(sgw_jstr(rec->doc, "agent_action"), sgw_jstr(failed, "agent_action"),
                     "the dead letter's record on the DLQ topic");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT agent_action FROM dead_letters"),
                     sgw_jstr(failed, "agent_action"));
    sgw_reader_close(&dlq);
}

/* ---- messages over limits.max_outgoing_bytes (issue 36 item 4) ---------- */

#define OUTGOING_CAP 900000 /* limits.max_outgoing_bytes's default */

/* Produces a saga.start made of head, n generated items separated by
 * sep, then tail. */
static void produce_big(const char *saga_id, const char *head, const char *sep,
                        void (*item)(char *out, size_t size, int i), int n, const char *tail)
{
    size_t cap = strlen(head) + strlen(tail) + 64, len;
    char *msg = malloc(cap), part[1024];

    cr_assert_not_null(msg);
    len = (size_t)snprintf(msg, cap, "%s", head);
    for (int i = 0; i < n; i++) {
        item(part, sizeof(part), i);
        if (len + strlen(part) + strlen(tail) + 8 > cap) {
            cap = 2 * cap + strlen(part);
            msg = realloc(msg, cap);
            cr_assert_not_null(msg);
        }
        len += (size_t)snprintf(msg + len, cap - len, "%s%s", i ? sep : "", part);
    }
    snprintf(msg + len, cap - len, "%s", tail);
    sgw_produce(sgw.topic_cmd, saga_id, msg, strlen(msg));
    free(msg);
}

/* The published event's bytes, under the cap, and what it says it cut. */
static const sg_json_t *truncated_field(const char *saga_id, const char *type, const char *field)
{
    const sgw_msg_t *m;
    const sg_json_t *cuts, *cut;

    sgw_event_wait(saga_id, type);
    m = sgw_event_find(saga_id, type);
    cr_expect_leq(m->len, (size_t)OUTGOING_CAP, "%s is %zu bytes, over the cap", type, m->len);
    cr_expect(sg_json_member(m->doc, "truncated") &&
                  strcmp(sg_json_type_name(sg_json_member(m->doc, "truncated")), "boolean") == 0,
              "%s says it was truncated", type);
    cuts = sg_json_member(m->doc, "truncated_fields");
    cr_assert(cuts && sg_json_array_size(cuts) >= 1, "truncated_fields names what went");
    cut = sg_json_array_get(cuts, 0);
    cr_expect_str_eq(sgw_jstr(cut, "field"), field);
    return cut;
}

/* Another saga submitted afterwards, in the same partition, completes:
 * nothing stalls behind the large message. */
static void next_saga_completes(const char *saga_id)
{
    sgw_submit(saga_id, "[{\"name\": \"one\", \"tool\": \"noop\", \"args\": {}}]");
    sgw_event_wait(saga_id, "saga.completed");
    sgw_expect_worker_alive();
    cr_expect(!sgt_bg_done(&sgw.relay), "the relay still runs");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM outbox_quarantine"), 0,
                 "no message was refused: each kept to the cap");
}

/* 500 pieces of 1,000 'x', then one 'y': a string of 500,001 bytes. */
static void big_input_half(char *out, size_t size, int i)
{
    size_t n = i < 500 ? 1000 : 1;

    cr_assert_lt(n, size);
    memset(out, i < 500 ? 'x' : 'y', n);
    out[n] = '\0';
}

Test(results, an_output_over_the_cap_is_truncated_in_its_event_and_kept_whole)
{
    const sg_json_t *cut;
    char text[256];

    sgw_pair_start(NULL, 1, NULL);
    /* The output names the 500,001-byte input twice: 1,000,002 bytes of
     * text and more, where a saga.start may only be 1 MiB. */
    produce_big("big-out",
                "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-big-out\", \"saga_id\": "
                "\"big-out\", \"name\": \"results\", \"input\": {\"big\": \"",
                "", big_input_half, 501,
                "\"}, \"steps\": [{\"name\": \"one\", \"tool\": \"noop\", \"args\": {}}], "
                "\"output\": {\"a\": {\"$from\": \"/input/big\"}, \"b\": {\"$from\": "
                "\"/input/big\"}}}");
    sgw_wait_status("big-out", "completed");
    cut = truncated_field("big-out", "saga.completed", "output");
    cr_expect_gt(sgw_jint(cut, "bytes"), 1000001);
    cr_expect_str_eq(sgw_jstr(cut, "kept_in"), "sagas.output");
    cr_expect(
        sg_json_is_null(sg_json_member(sgw_event_find("big-out", "saga.completed")->doc, "output")),
        "the output itself is left out");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT length(output->>'a') + length(output->>'b') FROM sagas "
                                "WHERE saga_id = 'big-out'"),
                     "1000002", "PostgreSQL keeps the whole output");
    next_saga_completes("after-big-out");
    sgw_pair_stop();
}

/* An argument of 3,800 references to a step that does not exist: one
 * problem each, over 1,000,000 bytes of problems together. */
static void bad_reference(char *out, size_t size, int i)
{
    snprintf(out, size, "\"k%04d%0195d\": {\"$from\": \"/steps/nope/result\"}", i, 0);
}

Test(results, a_rejection_with_thousands_of_problems_keeps_to_the_cap)
{
    const sg_json_t *cut, *ev;
    long long kept;

    sgw_pair_start(NULL, 1, NULL);
    produce_big("many-problems",
                "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-many\", \"saga_id\": "
                "\"many-problems\", \"name\": \"results\", \"steps\": [{\"name\": \"one\", "
                "\"tool\": \"noop\", \"args\": {",
                ", ", bad_reference, 3800, "}}]}");
    cut = truncated_field("many-problems", "saga.rejected", "problems");
    ev = sgw_event_find("many-problems", "saga.rejected")->doc;
    kept = (long long)sg_json_array_size(sg_json_member(ev, "problems"));
    cr_expect_gt(kept, 1000, "the problems that fit are kept: %lld", kept);
    cr_expect_gt(sgw_jint(cut, "dropped"), 0);
    cr_expect_eq(kept + sgw_jint(cut, "dropped"), 3800, "kept and dropped make every problem");
    cr_expect(strstr(sgw_jstr(cut, "kept_in"), "dead_letters.payload") != NULL, "%s",
              sgw_jstr(cut, "kept_in"));
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE saga_id = 'many-problems' "
                           "AND octet_length(payload) > 900000"),
                 1, "the submission is dead-lettered whole");
    next_saga_completes("after-many-problems");
    sgw_pair_stop();
}
