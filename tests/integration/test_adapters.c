/* The http and exec tool adapters end to end: the real worker and relay
 * (tests/support/sg_worker_env.h) calling the real example downstream
 * checkout-svc (examples/checkout) over HTTP, or the child programs of
 * tests/fixtures/exec.  What a user relies on is read back from the
 * tables (attempts, steps), the events, checkout-svc's own request log,
 * the worker's log and /proc. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_json.h"
#include "sagad/sg_submit.h"

static sgt_bg_t svc;
static char base[128]; /* http://127.0.0.1:PORT of checkout-svc */

static void http_setup(void)
{
    sgw_setup();
    memset(&svc, 0, sizeof(svc));
}

static void http_teardown(void)
{
    sgw_checkout_stop(&svc);
    sgt_bg_free(&svc);
    sgw_teardown();
}

TestSuite(http, .init = http_setup, .fini = http_teardown, .timeout = 180);
TestSuite(exec, .init = sgw_setup, .fini = sgw_teardown, .timeout = 180);

/* ---- helpers ------------------------------------------------------------- */

/* The checkout tools on checkout-svc, each retried fast, plus extra;
 * charge_args (NULL: none) is co.charge's args schema. */
static char *checkout_tools_with(const char *charge_args, const char *extra)
{
    static const char fmt[] =
        "\"co.reserve\": {\"adapter\": \"http\", \"target\": \"%s/inventory/reserve\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.release\", \"timeout_ms\": "
        "1000, \"retry\": {\"max_attempts\": 5, \"base_ms\": 10, \"cap_ms\": 20}},"
        "\"co.release\": {\"adapter\": \"http\", \"target\": \"%s/inventory/release\", "
        "\"side_effect\": \"idempotent\"},"
        "\"co.charge\": {\"adapter\": \"http\", \"target\": \"%s/payment/charge\", %s%s%s"
        "\"side_effect\": \"reversible\", \"compensation\": \"co.refund\", \"retry\": "
        "{\"max_attempts\": 5, \"base_ms\": 10, \"cap_ms\": 20}},"
        "\"co.refund\": {\"adapter\": \"http\", \"target\": \"%s/payment/refund\", "
        "\"side_effect\": \"idempotent\"},"
        "\"co.book\": {\"adapter\": \"http\", \"target\": \"%s/shipping/book\", "
        "\"side_effect\": \"idempotent\", \"retry\": {\"max_attempts\": 5, \"base_ms\": 10, "
        "\"cap_ms\": 20}},"
        "\"co.email\": {\"adapter\": \"http\", \"target\": \"%s/email/send\", \"side_effect\": "
        "\"irreversible\"}%s%s";
    size_t size = sizeof(fmt) + 6 * strlen(base) + (extra ? strlen(extra) : 0) +
                  (charge_args ? strlen(charge_args) : 0) + 32;
    char *out = malloc(size);

    cr_assert_not_null(out);
    snprintf(out, size, fmt, base, base, base, charge_args ? "\"args\": " : "",
             charge_args ? charge_args : "", charge_args ? ", " : "", base, base, base,
             extra ? "," : "", extra ? extra : "");
    return out;
}

static char *checkout_tools(const char *extra)
{
    return checkout_tools_with(NULL, extra);
}

/* checkout-svc with args, then relay and worker with its tools and the
 * extra ones (extra_fmt: members of "tools", with %s for the base URL). */
/* These tests use checkout-svc as a plain HTTP endpoint (a book without a
 * reservation, a refund that names no charge): --no-checks. */
static void start_all(const char *const *svc_args, const char *extra_fmt, const char *const *env)
{
    const char *argv[16] = {"--no-checks"};
    size_t n = 1;
    char *tools, extra[2048];

    for (; svc_args && *svc_args; svc_args++) {
        cr_assert_lt(n, sizeof(argv) / sizeof(argv[0]) - 1);
        argv[n++] = *svc_args;
    }
    argv[n] = NULL;
    sgw_checkout_start(&svc, argv, base, sizeof(base));
    if (extra_fmt)
        snprintf(extra, sizeof(extra), extra_fmt, base);
    tools = checkout_tools(extra_fmt ? extra : NULL);
    sgw_pair_start(tools, 1, env);
    free(tools);
}

/* POST /_admin/faults with the JSON body. */
static void add_fault(const char *json)
{
    char url[256];
    long status = 0;
    char *body;

    snprintf(url, sizeof(url), "%s/_admin/faults", base);
    body = sgt_http("POST", url, json, &status);
    cr_assert(status >= 200 && status < 300, "POST %s %s: %ld %s", url, json, status, body);
    free(body);
}

/* A string member of a request's headers (names lower-cased). */
static const char *req_header(const sg_json_t *req, const char *name)
{
    return sgw_jstr(sg_json_member(req, "headers"), name);
}

static const char *req_key(const sg_json_t *req)
{
    return sgw_jstr(req, "idempotency_key");
}

#define q_int(...) sgw_q_int(__VA_ARGS__)

static const char *q_text(char *out, size_t size, const char *sql)
{
    return sgw_q_text(out, size, "%s", sql);
}

/* The attempts of step idx as "N=status:code,..." in attempt order. */
static const char *attempt_trail(char *out, size_t size, int idx, const char *phase)
{
    return sgw_q_text(out, size,
                      "SELECT string_agg(attempt || '=' || status || ':' || coalesce(error_code, "
                      "'-'), ',' ORDER BY attempt) FROM attempts WHERE step_idx = %d AND phase = "
                      "'%s'",
                      idx, phase);
}

static void expect_contains(const char *hay, const char *needle, const char *what)
{
    cr_expect(hay && strstr(hay, needle), "%s: \"%s\" not in: %s", what, needle,
              hay ? hay : "(null)");
}

/* ---- http ---------------------------------------------------------------- */

Test(http, retries_keep_the_key_503_twice_then_ok_on_attempt_3)
{
    static const char *const faults[] = {"--fault", "/shipping/book=503x2", NULL};
    const sg_json_t *reqs, *body, *r;
    sg_json_t *doc;
    char text[512];

    start_all(faults, NULL, NULL);
    sgw_submit("keys-1", "[{\"name\": \"reserve\", \"tool\": \"co.reserve\", \"args\": {\"sku\": "
                         "\"B7\"}}, {\"name\": \"charge\", \"tool\": \"co.charge\", \"args\": "
                         "{\"amount_cents\": 500}}, {\"name\": \"book\", \"tool\": \"co.book\"}]");
    sgw_wait_status("keys-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(attempt_trail(text, sizeof(text), 2, "forward"),
                     "1=error:tool.http.503,2=error:tool.http.503,3=ok:-");
    reqs = sgw_checkout_requests(base, "/shipping/book", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 3, "three requests reached /shipping/book");
    for (size_t i = 0; i < 3; i++) {
        r = sg_json_array_get(reqs, i);
        cr_expect_str_eq(req_key(r), "keys-1:2:f:g1", "request %zu: the same key on every retry",
                         i);
        cr_expect_eq(sgw_jint(r, "status"), i < 2 ? 503 : 201);
        body = sg_json_member(r, "body");
        cr_expect_eq(sgw_jint(body, "attempt"), (long long)i + 1, "the body names the attempt");
    }
    r = sg_json_array_get(reqs, 2);
    body = sg_json_member(r, "body");
    cr_expect_str_eq(sgw_jstr(body, "saga_id"), "keys-1");
    cr_expect_str_eq(sgw_jstr(body, "step"), "book");
    cr_expect_eq(sgw_jint(body, "step_index"), 2);
    cr_expect_str_eq(sgw_jstr(body, "phase"), "forward");
    cr_expect_str_eq(req_header(r, "user-agent"), "sagad/0.1.0");
    cr_expect_str_eq(req_header(r, "content-type"), "application/json");
    cr_expect_eq(strncmp(req_header(r, "traceparent"), "00-", 3), 0, "a W3C traceparent: %s",
                 req_header(r, "traceparent"));
    sg_json_destroy(doc);

    reqs = sgw_checkout_requests(base, "/inventory/reserve", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1);
    cr_expect_str_eq(req_key(sg_json_array_get(reqs, 0)), "keys-1:0:f:g1");
    cr_expect_str_eq(
        sgw_jstr(sg_json_member(sg_json_member(sg_json_array_get(reqs, 0), "body"), "args"), "sku"),
        "B7", "the args travel in the body");
    sg_json_destroy(doc);
    reqs = sgw_checkout_requests(base, "/payment/charge", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1);
    cr_expect_str_eq(req_key(sg_json_array_get(reqs, 0)), "keys-1:1:f:g1",
                     "each step has its own key");
    sg_json_destroy(doc);
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT result->>'idempotency_key' FROM steps "
                            "WHERE idx = 2"),
                     "keys-1:2:f:g1", "the JSON answer is the step's result");
}

/* A producer's traceparent header of the right length but holding CR LF
 * and another header: before, it was stored and sent verbatim on every
 * call of the saga, and the downstream received the injected header. */
Test(http, a_traceparent_that_is_not_w3c_is_replaced_and_adds_no_header)
{
    /* 55 bytes, as a W3C traceparent has: the length alone once let it in */
    static const char bad[] = "00-0af7651916cd43dd8448eb211c80319c-b7\r\nX-Evil: yes1-01";
    static const char msg[] = "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-tp-1\", "
                              "\"saga_id\": \"tp-1\", \"name\": \"test\", \"steps\": "
                              "[{\"name\": \"book\", \"tool\": \"co.book\"}]}";
    const sg_kafka_header_t hdr = {"traceparent", bad, sizeof(bad) - 1};
    const sg_json_t *reqs, *r;
    const char *tp;
    sg_json_t *doc;
    char stored[128];

    cr_assert_eq(sizeof(bad) - 1, 55);
    start_all(NULL, NULL, NULL);
    sgw_produce_headers(sgw.topic_cmd, "tp-1", msg, strlen(msg), &hdr, 1);
    sgw_wait_status("tp-1", "completed");
    sgw_pair_stop();

    reqs = sgw_checkout_requests(base, "/shipping/book", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1);
    r = sg_json_array_get(reqs, 0);
    cr_expect_null(sg_json_member(sg_json_member(r, "headers"), "x-evil"),
                   "the injected header reached the downstream: x-evil: %s",
                   req_header(r, "x-evil"));
    tp = req_header(r, "traceparent");
    cr_assert_not_null(tp);
    cr_expect(sg_traceparent_ok(tp, strlen(tp)), "not W3C trace context: %s", tp);
    cr_expect_neq(strncmp(tp, "00-0af7651916cd43dd8448eb211c80319c", 35), 0,
                  "the producer's broken value was kept: %s", tp);
    cr_expect_str_eq(q_text(stored, sizeof(stored), "SELECT traceparent FROM sagas"), tp,
                     "the saga stores what its calls send");
    expect_contains(sgw.worker.err, "traceparent header is not W3C trace context",
                    "the replacement is logged");
    expect_contains(sgw.worker.err, "b7\\\\x0d\\\\x0aX-Evil", "with the bytes that came, escaped");
    sg_json_destroy(doc);
}

Test(http, a_400_is_not_retried_and_compensates_in_reverse_with_compensate_keys)
{
    static const char *const faults[] = {"--fault", "/email/send=400", NULL};
    const sg_json_t *reqs, *failed;
    sg_json_t *doc;
    char text[512];
    long long refund_seq, release_seq;

    start_all(faults, NULL, NULL);
    sgw_submit("comp-1", "[{\"name\": \"reserve\", \"tool\": \"co.reserve\"}, {\"name\": "
                         "\"charge\", \"tool\": \"co.charge\"}, {\"name\": \"email\", \"tool\": "
                         "\"co.email\"}]");
    sgw_wait_status("comp-1", "compensated");
    failed = sgw_event_wait("comp-1", "step.failed");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "tool.http.400");
    cr_expect_str_eq(sgw_jstr(failed, "error_class"), "permanent");
    expect_contains(sgw_jstr(failed, "message"), "injected_400",
                    "the downstream's own error_code is in the message");
    cr_expect_str_eq(attempt_trail(text, sizeof(text), 2, "forward"), "1=error:tool.http.400",
                     "a 400 is not retried");
    reqs = sgw_checkout_requests(base, "/email/send", &doc);
    cr_expect_eq(sg_json_array_size(reqs), 1, "one request reached /email/send");
    sg_json_destroy(doc);

    reqs = sgw_checkout_requests(base, "/payment/refund", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1);
    cr_expect_str_eq(req_key(sg_json_array_get(reqs, 0)), "comp-1:1:c:g1");
    cr_expect_str_eq(sgw_jstr(sg_json_member(sg_json_array_get(reqs, 0), "body"), "phase"),
                     "compensate");
    refund_seq = sgw_jint(sg_json_array_get(reqs, 0), "seq");
    sg_json_destroy(doc);
    reqs = sgw_checkout_requests(base, "/inventory/release", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1);
    cr_expect_str_eq(req_key(sg_json_array_get(reqs, 0)), "comp-1:0:c:g1");
    release_seq = sgw_jint(sg_json_array_get(reqs, 0), "seq");
    sg_json_destroy(doc);
    cr_expect_lt(refund_seq, release_seq, "compensations run in reverse order");
    cr_expect_str_eq(
        q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,compensated,failed");
}

Test(http, retry_after_seconds_and_http_date_set_the_earliest_next_attempt)
{
    static const char *const faults[] = {"--fault", "/payment/charge=429x1,retry_after=2", NULL};
    const sg_json_t *reqs;
    sg_json_t *doc;
    char text[512], date[64], fault[256];
    time_t due;

    start_all(faults, NULL, NULL);
    sgw_submit("ra-1", "[{\"name\": \"charge\", \"tool\": \"co.charge\"}]");
    sgw_wait_status("ra-1", "completed");

    due = time(NULL) + 3;
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&due));
    snprintf(fault, sizeof(fault),
             "{\"path\": \"/shipping/book\", \"status\": 503, \"times\": 1, \"retry_after\": "
             "\"%s\"}",
             date);
    add_fault(fault);
    sgw_submit("ra-2", "[{\"name\": \"book\", \"tool\": \"co.book\"}]");
    sgw_wait_status("ra-2", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg(attempt || '=' || coalesce(error_class, '-') || ':' "
                            "|| coalesce(envelope->'metadata'->>'retry_after_ms', '-'), ',' ORDER "
                            "BY attempt) FROM attempts WHERE saga_id = 'ra-1'"),
                     "1=throttled:2000,2=-:-", "429 is throttled; Retry-After: 2 is 2000 ms");
    reqs = sgw_checkout_requests(base, "/payment/charge", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 2);
    cr_expect_geq(sgw_jint(sg_json_array_get(reqs, 1), "time_ms") -
                      sgw_jint(sg_json_array_get(reqs, 0), "time_ms"),
                  2000, "the retry came no sooner than Retry-After: 2");
    sg_json_destroy(doc);

    cr_expect_leq(q_int("SELECT (envelope->'metadata'->>'retry_after_ms')::int FROM attempts "
                        "WHERE saga_id = 'ra-2' AND attempt = 1"),
                  3000, "an HTTP-date 3 s ahead is at most 3000 ms away");
    reqs = sgw_checkout_requests(base, "/shipping/book", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 2);
    cr_expect_geq(sgw_jint(sg_json_array_get(reqs, 1), "time_ms"), (long long)due * 1000,
                  "the retry came no sooner than the HTTP-date %s", date);
    sg_json_destroy(doc);
}

Test(http, a_hanging_endpoint_times_out_and_is_retried_with_the_same_key)
{
    const sg_json_t *reqs;
    sg_json_t *doc;
    char text[512];
    long long latency;

    start_all(NULL, NULL, NULL);
    add_fault("{\"path\": \"/inventory/reserve\", \"status\": 200, \"times\": 1, \"delay_ms\": "
              "10000}");
    sgw_submit("hang-1", "[{\"name\": \"reserve\", \"tool\": \"co.reserve\"}]");
    sgw_wait_status("hang-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(attempt_trail(text, sizeof(text), 0, "forward"),
                     "1=timeout:tool.timeout,2=ok:-");
    /* The registry's timeout_ms is 1000; the endpoint hangs for 10 s.
     * libcurl's timers have millisecond granularity and were seen to cut
     * the call at 999 ms (1 run in 8), hence the 5 ms of slack. */
    latency = q_int("SELECT latency_ms FROM attempts WHERE attempt = 1");
    cr_expect_geq(latency, 995, "the timed-out call took %lld ms", latency);
    cr_expect_lt(latency, 10000,
                 "the call was cut at the tool's timeout (%lld ms), not at the server's answer",
                 latency);
    reqs = sgw_checkout_requests(base, "/inventory/reserve", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 2);
    cr_expect_str_eq(req_key(sg_json_array_get(reqs, 0)), "hang-1:0:f:g1");
    cr_expect_str_eq(req_key(sg_json_array_get(reqs, 1)), "hang-1:0:f:g1",
                     "the outcome was unknown: the retry carries the same key");
    sg_json_destroy(doc);
}

/* A charge that the downstream applies and answers after the tool's
 * timeout, sent on a connection kept alive from an earlier call: libcurl
 * reports no connect time for a reused connection, and the attempt was
 * recorded "no connection" (tool.http.connect), the step failed as never
 * applied and the charge stood (issue 35 item 0).  The request went out:
 * the outcome is unknown, and the saga refunds it.  Both reuses: across
 * sagas (ka-2's only call follows ka-1's) and within one (ka-3's charge
 * follows its own reserve). */
Test(http, a_timed_out_call_on_a_kept_alive_connection_is_unknown_and_undone)
{
    static const char charge1[] =
        "\"co.charge1\": {\"adapter\": \"http\", \"target\": \"%s/payment/charge\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.refund\", \"timeout_ms\": "
        "1000, \"retry\": {\"max_attempts\": 1}}";
    const sg_json_t *reqs;
    sg_json_t *doc;
    char text[512];

    start_all(NULL, charge1, NULL);
    /* Applied after 2.5 s: a slow success, never answered in time. */
    add_fault("{\"path\": \"/payment/charge\", \"status\": 201, \"delay_ms\": 2500}");
    sgw_submit("ka-1", "[{\"name\": \"reserve\", \"tool\": \"co.reserve\"}]");
    sgw_wait_status("ka-1", "completed");
    sgw_submit("ka-2", "[{\"name\": \"charge\", \"tool\": \"co.charge1\"}]");
    sgw_wait_status("ka-2", "compensated");
    sgw_submit("ka-3", "[{\"name\": \"reserve\", \"tool\": \"co.reserve\"}, "
                       "{\"name\": \"charge\", \"tool\": \"co.charge1\"}]");
    sgw_wait_status("ka-3", "compensated");

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(saga_id || ':' || status || ':' || "
                                "coalesce(error_code, '-'), ',' ORDER BY saga_id) FROM attempts "
                                "WHERE phase = 'forward' AND step_idx = (CASE saga_id WHEN "
                                "'ka-2' THEN 0 ELSE 1 END) AND saga_id <> 'ka-1'"),
                     "ka-2:timeout:tool.timeout,ka-3:timeout:tool.timeout",
                     "the request went out: its answer timed out, not the connection");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(saga_id || ':' || idx || ':' || status, ',' "
                                "ORDER BY saga_id, idx) FROM steps WHERE saga_id <> 'ka-1'"),
                     "ka-2:0:compensated,ka-3:0:compensated,ka-3:1:compensated",
                     "the charges that may stand were refunded");
    reqs = sgw_checkout_requests(base, "/payment/refund", &doc);
    cr_expect_eq(sg_json_array_size(reqs), 2, "one refund per charge that may stand");
    if (sg_json_array_size(reqs) == 2) {
        cr_expect_str_eq(req_key(sg_json_array_get(reqs, 0)), "ka-2:0:c:g1");
        cr_expect_str_eq(req_key(sg_json_array_get(reqs, 1)), "ka-3:1:c:g1");
    }
    sg_json_destroy(doc);
    /* The downstream did apply both charges, after the worker gave up. */
    for (double deadline = sgt_now_s() + 10;
         sgw_checkout_effects(base, "/payment/charge") < 2 && sgt_now_s() < deadline;)
        usleep(50000);
    cr_expect_eq(sgw_checkout_effects(base, "/payment/charge"), 2);
    sgw_pair_stop();
}

Test(http, the_circuit_opens_stops_calls_and_closes_after_the_cooldown)
{
    static const char *const faults[] = {"--fault", "/shipping/book=503x4", NULL};
    static const char tool_fmt[] =
        "\"co.flaky\": {\"adapter\": \"http\", \"target\": \"%s/shipping/book\", "
        "\"side_effect\": \"idempotent\", \"breaker\": {\"failure_threshold\": 3, "
        "\"cooldown_ms\": 2000}, \"retry\": {\"max_attempts\": 20, \"base_ms\": 10, \"cap_ms\": "
        "20}}";
    static const char *const moves[] = {
        "\"from\":\"closed\",\"to\":\"open\"",      "\"from\":\"open\",\"to\":\"half_open\"",
        "\"from\":\"half_open\",\"to\":\"open\"",   "\"from\":\"open\",\"to\":\"half_open\"",
        "\"from\":\"half_open\",\"to\":\"closed\"",
    };
    const sg_json_t *reqs;
    sg_json_t *doc;
    char text[1024];
    const char *at;

    start_all(faults, tool_fmt, NULL);
    sgw_submit("brk-1", "[{\"name\": \"book\", \"tool\": \"co.flaky\"}]");
    sgw_wait_status("brk-1", "completed");
    sgw_pair_stop();

    reqs = sgw_checkout_requests(base, "/shipping/book", &doc);
    cr_expect_eq(sg_json_array_size(reqs), 5,
                 "4 failures and the success reached the server, nothing while open");
    sg_json_destroy(doc);
    cr_expect_eq(q_int("SELECT count(*) FROM attempts WHERE error_code IS DISTINCT FROM "
                       "'tool.circuit_open'"),
                 5, "every call that was sent has its attempt");
    cr_expect_geq(q_int("SELECT count(*) FROM attempts WHERE error_code = 'tool.circuit_open' "
                        "AND error_class = 'transient'"),
                  1, "calls while open failed fast: %s",
                  attempt_trail(text, sizeof(text), 0, "forward"));
    cr_expect_eq(q_int("SELECT count(*) FROM attempts WHERE error_code = 'tool.circuit_open' AND "
                       "(envelope->'metadata'->>'retry_after_ms')::int NOT BETWEEN 1 AND 2000"),
                 0, "a fast failure asks to wait for the rest of the cool-down");
    expect_contains(q_text(text, sizeof(text),
                           "SELECT envelope->>'message' FROM attempts WHERE error_code = "
                           "'tool.circuit_open' LIMIT 1"),
                    "nothing was sent", "circuit_open message");
    /* Each state change is logged, in order. */
    at = sgw.worker.err;
    for (size_t i = 0; i < sizeof(moves) / sizeof(moves[0]); i++) {
        const char *line = at ? strstr(at, moves[i]) : NULL;
        cr_assert_not_null(line, "state change %s (#%zu) not logged after the previous one: %s",
                           moves[i], i, sgt_bg_tail(&sgw.worker));
        at = line + 1;
    }
    expect_contains(sgw.worker.err, "\"tool\":\"co.flaky\"", "the change names the tool");
}

Test(http, header_secrets_from_env_reach_the_server_but_not_logs_or_tables)
{
    static const char tool_fmt[] =
        "\"co.secret\": {\"adapter\": \"http\", \"target\": \"%s/payment/charge\", "
        "\"side_effect\": \"idempotent\", \"headers\": {\"Authorization\": \"Bearer "
        "${env:SGT_PAYMENT_TOKEN}\", \"X-Client\": \"sagad-test\"}, \"retry\": {\"base_ms\": "
        "10, \"cap_ms\": 20}}";
    static const char *const faults[] = {"--fault", "/payment/charge=503x1", NULL};
    char secret[96], secret_env[160], want[128], path[256];
    const char *env[] = {secret_env, "SAGAD_LOG_LEVEL=debug", NULL};
    const char *check[] = {"check-registry", path, NULL};
    const sg_json_t *reqs;
    sg_json_t *doc;
    char *out = NULL, *err = NULL;
    FILE *fp;
    int rc;

    sgt_unique(secret, sizeof(secret), "sk_live");
    snprintf(secret_env, sizeof(secret_env), "SGT_PAYMENT_TOKEN=%s", secret);
    start_all(faults, tool_fmt, env);
    sgw_submit("sec-1", "[{\"name\": \"pay\", \"tool\": \"co.secret\"}]");
    sgw_wait_status("sec-1", "completed");
    sgw_pair_stop();

    reqs = sgw_checkout_requests(base, "/payment/charge", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 2, "a 503, then the retry");
    snprintf(want, sizeof(want), "Bearer %s", secret);
    for (size_t i = 0; i < 2; i++) {
        cr_expect_str_eq(req_header(sg_json_array_get(reqs, i), "authorization"), want);
        cr_expect_str_eq(req_header(sg_json_array_get(reqs, i), "x-client"), "sagad-test");
    }
    sg_json_destroy(doc);
    cr_expect_null(strstr(sgw.worker.err, secret), "the secret is in the worker's log: %s",
                   sgt_bg_tail(&sgw.worker));
    cr_expect(strstr(sgw.worker.err, "sec-1"), "the debug log has the saga's lines");
    cr_expect_null(strstr(sgw.relay.err, secret), "the secret is in the relay's log");
    cr_expect_eq(q_int("SELECT count(*) FROM attempts WHERE envelope::text LIKE '%%%s%%'", secret),
                 0);
    cr_expect_eq(q_int("SELECT count(*) FROM outbox WHERE payload::text LIKE '%%%s%%'", secret), 0);

    /* A variable that is not set is a registry error naming tool and header. */
    snprintf(path, sizeof(path), "%s/missing.json", sgw.dir);
    fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"tools\": {\"pay\": {\"adapter\": \"http\", \"target\": "
                "\"http://127.0.0.1:1/x\", \"side_effect\": \"read\", \"headers\": "
                "{\"Authorization\": \"Bearer ${env:SGT_NOT_SET_ANYWHERE}\"}}}}\n");
    fclose(fp);
    rc = sgt_run("sagad-worker", check, sgw.env, &out, &err);
    cr_expect_eq(rc, 2, "check-registry refuses the registry: %s", err);
    expect_contains(err,
                    "$.tools.pay.headers.Authorization: environment variable "
                    "SGT_NOT_SET_ANYWHERE is not set",
                    "check-registry");
    unlink(path);
    free(out);
    free(err);
}

Test(http, a_50_mib_answer_is_refused_while_streaming)
{
    char text[512];

    start_all(NULL, NULL, NULL);
    add_fault("{\"path\": \"/inventory/reserve\", \"status\": 200, \"times\": 1, \"body_bytes\": "
              "52428800}");
    sgw_submit("big-1", "[{\"name\": \"reserve\", \"tool\": \"co.reserve\"}]");
    sgw_wait_status("big-1", "compensated");
    sgw_pair_stop();

    cr_expect_str_eq(attempt_trail(text, sizeof(text), 0, "forward"),
                     "1=error:tool.http.response_too_large", "refused once, not retried");
    expect_contains(q_text(text, sizeof(text), "SELECT envelope->>'message' FROM attempts"),
                    "larger than its max_response_bytes (1048576)", "the message");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT envelope->>'data' FROM attempts"), "(null)",
                     "nothing of the answer is kept");
}

Test(http, args_are_checked_again_before_the_call_and_nothing_is_sent)
{
    const sg_json_t *failed, *reqs;
    sg_json_t *doc;
    char *tools;
    int rc;
    FILE *fp;

    start_all(NULL, NULL, NULL);
    sgw_submit("args-1", "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": 2000}},"
                         " {\"name\": \"pay\", \"tool\": \"co.charge\", \"args\": "
                         "{\"amount_cents\": 0}}]");
    /* While step 0 runs, the registry gains an args schema for co.charge
     * that the submitted args break; the worker restarts with it. */
    sgw_wait_int(1, "SELECT count(*) FROM attempts WHERE saga_id = 'args-1'");
    rc = sgw_proc_join(&sgw.worker, SIGTERM);
    cr_assert_eq(rc, 0, "the worker drains on SIGTERM: %s", sgt_bg_tail(&sgw.worker));
    tools = checkout_tools_with("{\"type\": \"object\", \"properties\": {\"amount_cents\": "
                                "{\"type\": \"integer\", \"minimum\": 1}}}",
                                NULL);
    fp = fopen(sgw.registry, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"tools\": {%s, %s}}\n", SGW_BASE_TOOLS, tools);
    fclose(fp);
    free(tools);
    sgt_bg_free(&sgw.worker);
    sgt_bg_start(&sgw.worker, "sagad-worker", sgw_run_args, sgw.env);
    sgw_wait_status("args-1", "compensated");
    failed = sgw_event_wait("args-1", "step.failed");
    sgw_pair_stop();

    cr_expect_eq(sgw_jint(failed, "step"), 1);
    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "tool.args.invalid");
    cr_expect_str_eq(sgw_jstr(failed, "error_class"), "permanent");
    expect_contains(sgw_jstr(failed, "message"), "$.args.amount_cents: minimum",
                    "the violation names the JSON path");
    reqs = sgw_checkout_requests(base, "/payment/charge", &doc);
    cr_expect_eq(sg_json_array_size(reqs), 0, "nothing was sent to /payment/charge");
    sg_json_destroy(doc);
    cr_expect_eq(q_int("SELECT count(*) FROM attempts WHERE step_idx = 1"), 0,
                 "no attempt was started");
}

/* ---- exec ---------------------------------------------------------------- */

/* The absolute path of a child program of tests/fixtures/exec. */
static const char *child(const char *name)
{
    static char paths[8][PATH_MAX];
    static int next;
    char rel[128];
    char *p = paths[next++ % 8];

    snprintf(rel, sizeof(rel), "tests/fixtures/exec/%s", name);
    cr_assert_not_null(realpath(rel, p), "%s", rel);
    return p;
}

/* Reads a pid the child wrote to path, waiting (bounded) for the file. */
static int read_pid(const char *path)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;
    int pid = 0;

    while (sgt_now_s() < deadline) {
        FILE *fp = fopen(path, "r");
        if (fp) {
            int ok = fscanf(fp, "%d", &pid);
            fclose(fp);
            if (ok == 1 && pid > 0)
                return pid;
        }
        usleep(20000);
    }
    cr_assert_fail("no pid in %s", path);
    return -1;
}

/* The process state letter from /proc/PID/stat, or 0 when it is gone. */
static char proc_state(int pid)
{
    char path[64], buf[512], *paren;
    FILE *fp;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if (!(fp = fopen(path, "r")))
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' ? paren[2] : 0;
}

Test(exec, stdin_stdout_json_round_trip_env_argv_and_exit_codes)
{
    char tools[2048], text[1024];
    const sg_json_t *failed;

    snprintf(tools, sizeof(tools),
             "\"ex.echo\": {\"adapter\": \"exec\", \"target\": [\"%s\", \"--flag\", \"a b\"], "
             "\"side_effect\": \"reversible\", \"compensation\": \"ex.echo\"},"
             "\"ex.fail\": {\"adapter\": \"exec\", \"target\": [\"%s\", \"3\"], "
             "\"side_effect\": \"idempotent\"},"
             "\"ex.segv\": {\"adapter\": \"exec\", \"target\": [\"%s\", \"0\", \"SEGV\"], "
             "\"side_effect\": \"idempotent\"}",
             child("echo.sh"), child("fail.sh"), child("fail.sh"));
    sgw_pair_start(tools, 1, NULL);
    sgw_produce(sgw.topic_cmd, "ex-1",
                "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-ex-1\", \"saga_id\": \"ex-1\", "
                "\"name\": \"exec\", \"input\": {\"order\": 7}, \"steps\": [{\"name\": \"s0\", "
                "\"tool\": \"ex.echo\", \"args\": {\"sku\": \"B7; rm -rf / $(reboot)\"}}, "
                "{\"name\": \"s1\", \"tool\": \"ex.fail\"}]}",
                strlen("{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-ex-1\", \"saga_id\": "
                       "\"ex-1\", \"name\": \"exec\", \"input\": {\"order\": 7}, \"steps\": "
                       "[{\"name\": \"s0\", \"tool\": \"ex.echo\", \"args\": {\"sku\": \"B7; rm "
                       "-rf / $(reboot)\"}}, {\"name\": \"s1\", \"tool\": \"ex.fail\"}]}"));
    sgw_submit("ex-2", "[{\"name\": \"crash\", \"tool\": \"ex.segv\"}]");
    sgw_wait_status("ex-1", "compensated");
    sgw_wait_status("ex-2", "compensated");
    failed = sgw_event_wait("ex-1", "step.failed");
    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "tool.exec.exit");
    expect_contains(sgw_jstr(failed, "message"), "exited with status 3: card declined by issuer",
                    "status and stderr in the message");
    failed = sgw_event_wait("ex-2", "step.failed");
    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "tool.exec.signal");
    expect_contains(sgw_jstr(failed, "message"), "killed by signal 11 (SIGSEGV)",
                    "the signal is named");
    sgw_pair_stop();

    /* The forward call's answer is the step result (JSON from stdout). */
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT concat_ws('|', result->'request'->'args'->>'sku', "
                            "result->'request'->'input'->>'order', result->'request'->>'step', "
                            "result->'request'->>'phase', result->'request'->>'attempt', "
                            "result->'request'->>'idempotency_key') FROM steps WHERE saga_id = "
                            "'ex-1' AND idx = 0"),
                     "B7; rm -rf / $(reboot)|7|s0|forward|1|ex-1:0:f:g1",
                     "stdin carries the request JSON, message data untouched");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT concat_ws('|', result->>'argc', result->>'argv', "
                            "result->>'key', result->>'saga', result->>'step', "
                            "result->>'step_index', result->>'phase', result->>'attempt') FROM "
                            "steps WHERE saga_id = 'ex-1' AND idx = 0"),
                     "2|--flag a b|ex-1:0:f:g1|ex-1|s0|0|forward|1",
                     "argv is the registry's, the SAGAD_* variables are set");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT result->>'env_names' FROM steps WHERE saga_id = 'ex-1' AND "
                            "idx = 0"),
                     "LANG PATH PWD SAGAD_ATTEMPT SAGAD_IDEMPOTENCY_KEY SAGAD_PHASE "
                     "SAGAD_SAGA_ID SAGAD_STEP SAGAD_STEP_INDEX SAGAD_TIMEOUT_MS SAGAD_TOOL ",
                     "a minimal environment (PWD is the shell's own)");
    /* The compensation ran the same program in phase compensate. */
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT concat_ws('|', envelope->'data'->>'phase', "
                            "envelope->'data'->>'key') FROM attempts WHERE saga_id = 'ex-1' AND "
                            "phase = 'compensate'"),
                     "compensate|ex-1:0:c:g1");
    cr_expect_str_eq(attempt_trail(text, sizeof(text), 1, "forward"), "1=error:tool.exec.exit",
                     "a non-zero exit is permanent: no retry");
}

Test(exec, exit_75_is_retried_and_text_output_is_kept_as_a_string)
{
    char tools[1024], text[512];

    snprintf(tools, sizeof(tools),
             "\"ex.tempfail\": {\"adapter\": \"exec\", \"target\": [\"%s\"], \"side_effect\": "
             "\"idempotent\", \"retry\": {\"base_ms\": 10, \"cap_ms\": 20}}",
             child("tempfail.sh"));
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("tf-1", "[{\"name\": \"post\", \"tool\": \"ex.tempfail\"}]");
    sgw_wait_status("tf-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(attempt_trail(text, sizeof(text), 0, "forward"),
                     "1=error:tool.exec.tempfail,2=ok:-");
    expect_contains(
        q_text(text, sizeof(text), "SELECT envelope->>'message' FROM attempts WHERE attempt = 1"),
        "ledger busy, try again", "stderr is in the message");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT result #>> '{}' FROM steps"),
                     "done on attempt 2\n", "non-JSON stdout is kept as a string");
}

/* A successful call whose answer PostgreSQL's jsonb cannot hold as it
 * came (a \u0000 escape, bytes that are not UTF-8, duplicate names, a
 * number past numeric's range) still succeeded: the step is recorded
 * succeeded with the answer kept whole as a string, and an integer too
 * large for a double is kept exact. */
Test(exec, answers_jsonb_cannot_hold_are_kept_whole_and_the_step_succeeds)
{
    static const char *const answers[] = {
        "{\\\"a\\\": \\\"x\\\\\\\\u0000y\\\"}", /* {"a": "x\u0000y"} */
        "\\\\377\\\\376ok",                     /* not UTF-8 */
        "{\\\"a\\\": 1, \\\"a\\\": 2}",         /* duplicate names */
        "[1e200000]",                           /* past numeric */
        "{\\\"id\\\": 123456789012345678901234567890}",
    };
    char tools[4096], steps[1024], text[512];
    size_t o = 0;

    for (size_t i = 0; i < 5; i++)
        o += (size_t)snprintf(tools + o, sizeof(tools) - o,
                              "%s\"ex.answer%zu\": {\"adapter\": \"exec\", \"target\": [\"%s\", "
                              "\"%s\"], \"side_effect\": \"idempotent\"}",
                              i ? "," : "", i, child("answer.sh"), answers[i]);
    snprintf(steps, sizeof(steps),
             "[{\"name\": \"a0\", \"tool\": \"ex.answer0\"}, {\"name\": \"a1\", \"tool\": "
             "\"ex.answer1\"}, {\"name\": \"a2\", \"tool\": \"ex.answer2\"}, {\"name\": \"a3\", "
             "\"tool\": \"ex.answer3\"}, {\"name\": \"a4\", \"tool\": \"ex.answer4\"}]");
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("ans-1", steps);
    sgw_wait_status("ans-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg(status || ':' || coalesce(error_code, '-'), ',' "
                            "ORDER BY idx) FROM steps WHERE saga_id = 'ans-1'"),
                     "succeeded:-,succeeded:-,succeeded:-,succeeded:-,succeeded:-",
                     "every call that succeeded is recorded succeeded");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT result #>> '{}' FROM steps WHERE idx = 0"),
                     "{\"a\": \"x\\u0000y\"}", "a NUL escape: the text, as a string");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT result #>> '{}' FROM steps WHERE idx = 1"),
                     "base64://5vaw==", "bytes that are not UTF-8: in base64");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT result #>> '{}' FROM steps WHERE idx = 2"),
                     "{\"a\": 1, \"a\": 2}", "duplicate names: the text, both kept");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT result #>> '{}' FROM steps WHERE idx = 3"),
                     "[1e200000]", "a number numeric cannot hold: the text");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT result->>'id' FROM steps WHERE idx = 4"),
                     "123456789012345678901234567890", "a large integer is exact");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT envelope->'data'->>'id' FROM attempts WHERE step_idx = 4"),
                     "123456789012345678901234567890",
                     "and exact in the attempt's envelope too (not through a double)");
    cr_expect_str_eq(
        q_text(text, sizeof(text), "SELECT envelope->>'data' FROM attempts WHERE step_idx = 1"),
        "base64://5vaw==", "the envelope keeps what the result keeps");
}

Test(exec, a_timeout_kills_the_child_and_its_children_and_reaps_it)
{
    char tools[1536], text[512], pid_file[128], grand_file[128];
    int pid, grand;
    double deadline;

    snprintf(pid_file, sizeof(pid_file), "%s/child.pid", sgw.dir);
    snprintf(grand_file, sizeof(grand_file), "%s/grandchild.pid", sgw.dir);
    snprintf(tools, sizeof(tools),
             "\"ex.sleeper\": {\"adapter\": \"exec\", \"target\": [\"%s\", \"%s\", \"%s\"], "
             "\"side_effect\": \"idempotent\", \"timeout_ms\": 1500, \"retry\": "
             "{\"max_attempts\": 1}}",
             child("sleeper.sh"), pid_file, grand_file);
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("sl-1", "[{\"name\": \"nap\", \"tool\": \"ex.sleeper\"}]");
    pid = read_pid(pid_file);
    grand = read_pid(grand_file);
    sgw_wait_status("sl-1", "compensated");

    cr_expect_str_eq(attempt_trail(text, sizeof(text), 0, "forward"), "1=timeout:tool.timeout");
    expect_contains(q_text(text, sizeof(text), "SELECT envelope->>'message' FROM attempts"),
                    "its process group was killed", "the message");
    /* The attempt is committed after the kill: the child was reaped by the
     * worker (no zombie), the grandchild is dead (or a zombie of init's
     * while init gets to it). */
    cr_expect_eq(proc_state(pid), 0, "the child %d is still there (state %c)", pid,
                 proc_state(pid));
    deadline = sgt_now_s() + SGW_WAIT_S;
    while (proc_state(grand) != 0 && proc_state(grand) != 'Z' && sgt_now_s() < deadline)
        usleep(20000);
    cr_expect(proc_state(grand) == 0 || proc_state(grand) == 'Z',
              "the grandchild %d survived the timeout (state %c)", grand, proc_state(grand));
    sgw_pair_stop();
    unlink(pid_file);
    unlink(grand_file);
}

Test(exec, the_child_holds_only_descriptors_0_1_2)
{
    char tools[1024], pid_file[128], dir[64], comm[64] = "", names[256] = "";
    double deadline;
    struct dirent *e;
    DIR *d;
    int pid;

    snprintf(pid_file, sizeof(pid_file), "%s/fds.pid", sgw.dir);
    snprintf(tools, sizeof(tools),
             "\"ex.fds\": {\"adapter\": \"exec\", \"target\": [\"%s\", \"%s\", \"5\"], "
             "\"side_effect\": \"read\"}",
             child("fds.sh"), pid_file);
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("fd-1", "[{\"name\": \"look\", \"tool\": \"ex.fds\"}]");
    pid = read_pid(pid_file);
    /* Once it is `sleep`, the shell's own descriptors are gone. */
    deadline = sgt_now_s() + SGW_WAIT_S;
    while (strcmp(comm, "sleep\n") != 0 && sgt_now_s() < deadline) {
        char path[64];
        FILE *fp;
        snprintf(path, sizeof(path), "/proc/%d/comm", pid);
        if ((fp = fopen(path, "r"))) {
            if (!fgets(comm, sizeof(comm), fp))
                comm[0] = '\0';
            fclose(fp);
        }
        usleep(10000);
    }
    cr_assert_str_eq(comm, "sleep\n", "the child never became sleep");
    snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
    d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    {
        int fds[64], n = 0;
        while ((e = readdir(d)) && n < 64)
            if (e->d_name[0] != '.')
                fds[n++] = atoi(e->d_name);
        closedir(d);
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (fds[j] < fds[i]) {
                    int t = fds[i];
                    fds[i] = fds[j];
                    fds[j] = t;
                }
        for (int i = 0; i < n; i++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%d", i ? "," : "",
                     fds[i]);
    }
    cr_expect_str_eq(names, "0,1,2", "descriptors of the child: %s", names);
    sgw_wait_status("fd-1", "completed");
    sgw_pair_stop();
    unlink(pid_file);
}
