/* The circuit breaker's state machine and the registry checks of the http
 * and exec adapters (no services: registries are loaded from temporary
 * files, no call is made). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../worker/worker.h"
#include "unit.h"

/* ---- breaker ------------------------------------------------------------- */

static worker_result_t outcome(sg_errclass_t cls)
{
    worker_result_t r;

    memset(&r, 0, sizeof(r));
    if (cls != SG_ERRCLASS_NONE)
        worker_result_error(&r, cls, "tool.http.503", "test");
    return r;
}

static bool admit(const sg_tool_t *tool, bool *probe, worker_result_t *out)
{
    memset(out, 0, sizeof(*out));
    return worker_breaker_admit(tool, out, probe);
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

Test(breaker, opens_after_threshold_fails_fast_probes_once_and_closes)
{
    sg_tool_t tool = {.name = "pay"};
    worker_result_t out, fail = outcome(SG_ERRCLASS_TRANSIENT), ok = outcome(SG_ERRCLASS_NONE);
    worker_breaker_info_t info;
    bool probe;

    tool.breaker = worker_breaker_new(3, 100);
    for (int i = 0; i < 2; i++) {
        cr_assert(admit(&tool, &probe, &out));
        worker_breaker_record(&tool, &fail, probe);
    }
    worker_breaker_info(&tool, &info);
    cr_expect_eq(info.state, WORKER_BREAKER_CLOSED, "2 of 3 failures: still closed");
    cr_expect_eq(info.failures, 2);
    cr_assert(admit(&tool, &probe, &out));
    worker_breaker_record(&tool, &fail, probe);
    worker_breaker_info(&tool, &info);
    cr_expect_eq(info.state, WORKER_BREAKER_OPEN);

    cr_expect_not(admit(&tool, &probe, &out), "open: fails fast");
    cr_expect_str_eq(out.err.code, "tool.circuit_open");
    cr_expect_eq(out.err.cls, SG_ERRCLASS_TRANSIENT);
    cr_expect(out.retry_after_ms > 0 && out.retry_after_ms <= 100, "waits for the cool-down: %lld",
              (long long)out.retry_after_ms);

    nap_ms(120);
    cr_assert(admit(&tool, &probe, &out), "after the cool-down one probe goes");
    cr_expect(probe);
    cr_expect_not(admit(&tool, &probe, &out), "a second call while the probe runs fails fast");
    cr_expect_str_eq(out.err.code, "tool.circuit_open");
    worker_breaker_record(&tool, &ok, true);
    worker_breaker_info(&tool, &info);
    cr_expect_eq(info.state, WORKER_BREAKER_CLOSED, "the probe's success closes it");
    cr_expect_eq(info.transitions[WORKER_BREAKER_OPEN], 1);
    cr_expect_eq(info.transitions[WORKER_BREAKER_HALF_OPEN], 1);
    cr_expect_eq(info.transitions[WORKER_BREAKER_CLOSED], 1);
    cr_expect_eq(info.rejected, 2);
    worker_breaker_destroy(tool.breaker);
}

Test(breaker, a_failed_probe_reopens_and_permanent_errors_count_as_answers)
{
    sg_tool_t tool = {.name = "pay"};
    worker_result_t out, fail = outcome(SG_ERRCLASS_TIMEOUT), perm = outcome(SG_ERRCLASS_PERMANENT),
                         late = outcome(SG_ERRCLASS_THROTTLED);
    worker_breaker_info_t info;
    bool probe;

    tool.breaker = worker_breaker_new(2, 100);
    cr_assert(admit(&tool, &probe, &out));
    worker_breaker_record(&tool, &fail, probe);
    cr_assert(admit(&tool, &probe, &out));
    worker_breaker_record(&tool, &perm, probe);
    worker_breaker_info(&tool, &info);
    cr_expect_eq(info.failures, 0, "a 4xx is an answer: the count starts again");
    worker_breaker_record(&tool, &late, false);
    worker_breaker_record(&tool, &fail, false);
    worker_breaker_info(&tool, &info);
    cr_expect_eq(info.state, WORKER_BREAKER_OPEN, "throttled and timeout count as failures");
    worker_breaker_record(&tool, &fail, false);
    nap_ms(120);
    cr_assert(admit(&tool, &probe, &out));
    cr_assert(probe);
    worker_breaker_record(&tool, &fail, true);
    worker_breaker_info(&tool, &info);
    cr_expect_eq(info.state, WORKER_BREAKER_OPEN, "the failed probe reopens it");
    cr_expect_not(admit(&tool, &probe, &out), "and the cool-down starts again");
    cr_expect_eq(info.transitions[WORKER_BREAKER_OPEN], 2);
    worker_breaker_destroy(tool.breaker);
}

Test(breaker, tools_without_a_breaker_always_go)
{
    sg_tool_t tool = {.name = "noop"};
    worker_breaker_info_t info;
    worker_result_t out;
    bool probe = true;

    cr_expect(admit(&tool, &probe, &out));
    cr_expect_not(probe);
    worker_breaker_info(&tool, &info);
    cr_expect_eq(info.state, WORKER_BREAKER_CLOSED);
    cr_expect_str_eq(worker_breaker_state_name(WORKER_BREAKER_HALF_OPEN), "half_open");
}

/* ---- registry checks of the http and exec adapters ------------------------ */

/* Loads a registry with one tool "pay" (the JSON object's members);
 * returns the error message, or "" when it loaded. */
static const char *load_one(const char *members, char *msg, size_t size)
{
    char path[] = "/tmp/sagad-unit-registry-XXXXXX";
    int fd = mkstemp(path);
    FILE *fp = fdopen(fd, "w");
    sg_config_t *cfg = sg_config_new();
    sg_registry_t *reg;
    sg_err_t err;

    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"tools\": {\"pay\": {%s}}}", members);
    fclose(fp);
    reg = worker_registry_load(path, cfg, &err);
    snprintf(msg, size, "%s", reg ? "" : err.message);
    sg_registry_destroy(reg);
    sg_config_destroy(cfg);
    unlink(path);
    return msg;
}

#define HTTP_TOOL "\"adapter\": \"http\", \"side_effect\": \"read\", "

Test(adapters, http_registry_entries_are_checked_at_load)
{
    char msg[600];

    setenv("SGT_UNIT_TOKEN", "t0ps3cret", 1);
    cr_expect_str_eq(load_one(HTTP_TOOL "\"target\": \"https://pay.example/v1/charges\", "
                                        "\"method\": \"PUT\", \"tls_verify\": false, "
                                        "\"headers\": {\"Authorization\": \"Bearer "
                                        "${env:SGT_UNIT_TOKEN}\"}",
                              msg, sizeof(msg)),
                     "");
    assert_contains(load_one(HTTP_TOOL "\"target\": \"ftp://pay.example/x\"", msg, sizeof(msg)),
                    "$.tools.pay.target: the scheme must be http or https");
    assert_contains(
        load_one(HTTP_TOOL "\"target\": \"http://x/\", \"method\": \"GET\"", msg, sizeof(msg)),
        "$.tools.pay.method: must be one of POST, PUT, PATCH, DELETE");
    assert_contains(load_one(HTTP_TOOL "\"target\": \"http://x/\", \"headers\": "
                                       "{\"idempotency-key\": \"mine\"}",
                             msg, sizeof(msg)),
                    "$.tools.pay.headers.idempotency-key: set by the adapter itself");
    assert_contains(load_one(HTTP_TOOL "\"target\": \"http://x/\", \"headers\": "
                                       "{\"X-Token\": \"${SGT_UNIT_TOKEN}\"}",
                             msg, sizeof(msg)),
                    "$.tools.pay.headers.X-Token: a ${...} reference must be ${env:NAME}");
    /* A value with CR LF would add headers to every request; no other
     * control byte gets through either. */
    setenv("SGT_UNIT_CRLF", "t0ps3cret\r\nX-Evil: 1", 1);
    load_one(HTTP_TOOL "\"target\": \"http://x/\", \"headers\": {\"X-Token\": "
                       "\"${env:SGT_UNIT_CRLF}\"}",
             msg, sizeof(msg));
    assert_contains(msg, "$.tools.pay.headers.X-Token: the value holds a line break");
    assert_not_contains(msg, "X-Evil");
    assert_contains(load_one(HTTP_TOOL "\"target\": \"http://x/\", \"headers\": "
                                       "{\"X-Tab\": \"a\\tb\"}",
                             msg, sizeof(msg)),
                    "$.tools.pay.headers.X-Tab: a header value must not hold control characters");
    unsetenv("SGT_UNIT_CRLF");
    unsetenv("SGT_UNIT_NOT_SET");
    load_one(HTTP_TOOL "\"target\": \"http://x/\", \"headers\": {\"X-Token\": "
                       "\"${env:SGT_UNIT_TOKEN}-${env:SGT_UNIT_NOT_SET}\"}",
             msg, sizeof(msg));
    assert_contains(msg, "$.tools.pay.headers.X-Token: environment variable SGT_UNIT_NOT_SET is "
                         "not set");
    assert_not_contains(msg, "t0ps3cret");
    setenv("SGT_UNIT_TOKEN", "a\r\nX-Evil: 1", 1);
    load_one(HTTP_TOOL "\"target\": \"http://x/\", \"headers\": {\"X-Token\": "
                       "\"${env:SGT_UNIT_TOKEN}\"}",
             msg, sizeof(msg));
    assert_contains(msg, "$.tools.pay.headers.X-Token: the value holds a line break");
    assert_not_contains(msg, "X-Evil");
    unsetenv("SGT_UNIT_TOKEN");
    assert_contains(load_one(HTTP_TOOL "\"target\": \"http://x/\", \"ca_path\": "
                                       "\"/nonexistent/ca.pem\"",
                             msg, sizeof(msg)),
                    "$.tools.pay.ca_path: /nonexistent/ca.pem cannot be read");
    assert_contains(load_one(HTTP_TOOL "\"target\": \"http://x/\", \"breaker\": "
                                       "{\"failure_threshold\": 0}",
                             msg, sizeof(msg)),
                    "$.tools.pay.breaker.failure_threshold: must be between 1 and 100000");
}

Test(adapters, fields_belong_to_their_adapter)
{
    char msg[600];

    assert_contains(load_one("\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": "
                             "\"read\", \"headers\": {}",
                             msg, sizeof(msg)),
                    "$.tools.pay.headers: not a field of the builtin adapter (it belongs to http)");
    assert_contains(load_one("\"adapter\": \"exec\", \"target\": [\"/bin/true\"], "
                             "\"side_effect\": \"read\", \"method\": \"POST\"",
                             msg, sizeof(msg)),
                    "$.tools.pay.method: not a field of the exec adapter (it belongs to http)");
    assert_contains(load_one("\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": "
                             "\"read\", \"breaker\": {}",
                             msg, sizeof(msg)),
                    "$.tools.pay.breaker: not a field of the builtin adapter");
}

Test(adapters, exec_argv_is_an_absolute_executable_program)
{
    char msg[600];

    cr_expect_str_eq(load_one("\"adapter\": \"exec\", \"target\": [\"/bin/true\", \"--x\"], "
                              "\"side_effect\": \"read\", \"max_response_bytes\": 10",
                              msg, sizeof(msg)),
                     "");
    assert_contains(load_one("\"adapter\": \"exec\", \"target\": [\"true\"], \"side_effect\": "
                             "\"read\"",
                             msg, sizeof(msg)),
                    "$.tools.pay.target[0]: the program must be an absolute path");
    assert_contains(load_one("\"adapter\": \"exec\", \"target\": [\"/etc/passwd\"], "
                             "\"side_effect\": \"read\"",
                             msg, sizeof(msg)),
                    "$.tools.pay.target[0]: /etc/passwd is not an executable file");
    assert_contains(load_one("\"adapter\": \"exec\", \"target\": \"/bin/true\", "
                             "\"side_effect\": \"read\"",
                             msg, sizeof(msg)),
                    "$.tools.pay.target: an exec target is argv");
}

Test(adapters, tool_answers_become_json_data)
{
    worker_result_t r;

    memset(&r, 0, sizeof(r));
    worker_result_data(&r, "{\"id\": 1}", 9, 1024);
    cr_expect_str_eq(r.data, "{\"id\": 1}", "JSON is kept as it came");
    worker_result_data(&r, "done \"now\"\n", 11, 1024);
    cr_expect_str_eq(r.data, "\"done \\\"now\\\"\\n\"", "text becomes one JSON string");
    worker_result_data(&r, "\xff\xfe", 2, 1024);
    cr_expect_str_eq(r.data, "\"base64://4=\"", "bytes that are not UTF-8 are kept in base64");
    worker_result_data(&r, "", 0, 1024);
    cr_expect_null(r.data);
    worker_result_clear(&r);
}

/* A 2xx answer jsonb cannot hold as it came is kept whole as a string:
 * the step succeeded, and what the tool said is not lost. */
Test(adapters, tool_answers_jsonb_cannot_hold_are_kept_whole)
{
    static const struct {
        const char *body, *kept;
    } cases[] = {
        {"{\"id\": 9007199254740993123}", "{\"id\": 9007199254740993123}"}, /* exact */
        {"{\"a\": \"x\\u0000y\"}", "\"{\\\"a\\\": \\\"x\\\\u0000y\\\"}\""},
        {"{\"a\": 1, \"a\": 2}", "\"{\\\"a\\\": 1, \\\"a\\\": 2}\""},
        {"[1e200000]", "\"[1e200000]\""},
        {"[1.5e-20000]", "\"[1.5e-20000]\""},
        {"[1e300, 0.5e-300]", "[1e300, 0.5e-300]"},
        {"base64:abc", "\"base64:YmFzZTY0OmFiYw==\""},
        {"ok\x00", "\"base64:b2sA\""},
    };
    worker_result_t r;

    memset(&r, 0, sizeof(r));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = strlen(cases[i].body) + (strcmp(cases[i].body, "ok") == 0);
        worker_result_data(&r, cases[i].body, len, 1024);
        cr_expect_str_eq(r.data, cases[i].kept, "answer %zu", i);
    }
    worker_result_clear(&r);
}

/* Retry-After, as the http adapter reads it (worker_http_answer.c): delta
 * seconds, or an HTTP-date; past or unreadable is 0, and anything further
 * than a day is a day.  A date thousands of years ahead once overflowed
 * its milliseconds (UBSan, found by fuzz_http). */
Test(adapters, retry_after_is_read_as_seconds_or_a_date_and_capped_at_a_day)
{
    static const struct {
        const char *value;
        int64_t want_ms;
    } cases[] = {
        {"120", 120000},
        {"0", 0},
        {"9999999999", 24LL * 3600 * 1000},
        {"Wed, 21 Oct 2015 07:28:00 GMT", 0},
        {"Fri, 01 Jan 9999 00:00:00 GMT", 24LL * 3600 * 1000},
        {"4Oct0888988888", 24LL * 3600 * 1000},
        {"soon", 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        worker_result_t r;
        memset(&r, 0, sizeof(r));
        worker_http_answer(&r, "t", 503, "", 0, 1024, cases[i].value);
        cr_expect_eq(r.retry_after_ms, cases[i].want_ms, "Retry-After \"%s\": %lld ms, want %lld",
                     cases[i].value, (long long)r.retry_after_ms, (long long)cases[i].want_ms);
        worker_result_clear(&r);
    }
}
