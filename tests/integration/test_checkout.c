/* checkout-svc, the example downstream service, tested as a user sees it:
 * the real binary on a free port, called over HTTP with libcurl (suite
 * checkout); and the checkout saga run by the real worker against it
 * (suite checkout_saga, at the end). */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_json.h"

static sgt_bg_t svc;
static char base[128]; /* http://127.0.0.1:PORT */

static void start(const char *const *args)
{
    static const char *const env[] = {NULL};
    static const char prefix[] = "checkout-svc listening on ";
    char line[256];

    cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    cr_assert(sgt_bg_start_line(&svc, "checkout-svc", args, env, line, sizeof(line), 30),
              "checkout-svc printed no line: %s", sgt_bg_tail(&svc));
    cr_assert_eq(strncmp(line, prefix, strlen(prefix)), 0, "unexpected first line: %s", line);
    cr_assert_eq(strncmp(line + strlen(prefix), "http://127.0.0.1:", 17), 0, "%s", line);
    snprintf(base, sizeof(base), "%s", line + strlen(prefix));
}

static void start_plain(void)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", NULL};

    start(args);
}

/* Every test ends with SIGTERM, which must stop the service with exit 0. */
static void stop(void)
{
    int rc;

    if (!svc.started)
        return;
    sgt_bg_signal(&svc, SIGTERM);
    rc = sgt_bg_join(&svc, 60);
    cr_expect_eq(rc, 0, "checkout-svc exited %d after SIGTERM: %s", rc, sgt_bg_tail(&svc));
    sgt_bg_free(&svc);
    memset(&svc, 0, sizeof(svc));
    curl_global_cleanup();
}

/* method base+path with request headers (NULL-terminated, or NULL) and a
 * body: the response (free with sgt_res_free); status 0 and the error
 * text as body when no answer came. */
static sgt_res_t http(const char *method, const char *path, const char *const *headers,
                      const char *body)
{
    char url[512];

    snprintf(url, sizeof(url), "%s%s", base, path);
    return sgt_request(method, url, headers, body);
}

static size_t discard(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    (void)ptr;
    (void)userdata;
    return size * nmemb;
}

static sg_json_t *json_of(const sgt_res_t *r)
{
    sg_json_limits_t lim = {64u << 20, 64, 0};
    sg_err_t err;
    sg_json_t *doc = sg_json_parse(r->body, r->len, &lim, &err);

    cr_assert_not_null(doc, "response is not JSON (%s): %.300s", err.message, r->body);
    return doc;
}

static const char *str_at(const sg_json_t *obj, const char *key)
{
    const char *s = sg_json_string(sg_json_member(obj, key));

    cr_assert_not_null(s, "no string \"%s\"", key);
    return s;
}

static int64_t int_at(const sg_json_t *obj, const char *key)
{
    double d = -1;

    cr_assert(sg_json_number(sg_json_member(obj, key), &d), "no number \"%s\"", key);
    return (int64_t)d;
}

/* POST path with Idempotency-Key key (none when NULL). */
static sgt_res_t post(const char *path, const char *key, const char *body)
{
    char kh[300];
    const char *h[] = {kh, "Content-Type: application/json", NULL};

    snprintf(kh, sizeof(kh), "Idempotency-Key: %s", key ? key : "");
    return http("POST", path, key ? h : h + 1, body);
}

/* stats[group][path] */
static int64_t counter(const char *group, const char *path)
{
    sgt_res_t r = http("GET", "/_admin/stats", NULL, NULL);
    sg_json_t *doc = json_of(&r);
    int64_t n = int_at(sg_json_member(doc, group), path);

    cr_assert_eq(r.status, 200);
    sg_json_destroy(doc);
    sgt_res_free(&r);
    return n;
}

static void expect_error(const sgt_res_t *r, long status, const char *code, bool retriable)
{
    sg_json_t *doc = json_of(r);
    bool b = !retriable;

    cr_expect_eq(r->status, status, "status %ld, want %ld: %s", r->status, status, r->body);
    cr_expect_str_eq(str_at(doc, "error_code"), code);
    cr_expect(sg_json_get_bool(doc, "$", "retriable", true, &b, NULL) == 0 && b == retriable,
              "retriable must be %d: %s", retriable, r->body);
    cr_expect_not_null(sg_json_string(sg_json_member(doc, "message")), "%s", r->body);
    sg_json_destroy(doc);
}

TestSuite(checkout, .fini = stop, .timeout = 120);

/* --- dedup ---------------------------------------------------------------- */

Test(checkout, same_key_replays_the_stored_response_and_counts_one_effect)
{
    sgt_res_t a, b, c;
    sg_json_t *doc, *args;

    start_plain();
    a = post("/payment/charge", "order-1", "{\"args\":{\"amount_cents\":1250}}");
    cr_assert_eq(a.status, 201, "%s", a.body);
    cr_expect_null(sgt_res_header(&a, "Idempotent-Replayed"), "a fresh answer is no replay");
    cr_expect_str_eq(sgt_res_header(&a, "Content-Type"), "application/json");
    doc = json_of(&a);
    cr_expect_str_eq(str_at(doc, "path"), "/payment/charge");
    cr_expect_str_eq(str_at(doc, "idempotency_key"), "order-1");
    cr_expect_eq(strncmp(str_at(doc, "id"), "pay_", 4), 0, "%s", a.body);
    args = sg_json_parse("{\"amount_cents\":1250}", 21, NULL, NULL);
    cr_expect(sg_json_equal(sg_json_member(doc, "echo"), args), "echo: %s", a.body);
    sg_json_destroy(args);
    sg_json_destroy(doc);

    b = post("/payment/charge", "order-1", "{\"args\":{\"amount_cents\":1250}}");
    cr_expect_eq(b.status, 201);
    cr_expect_str_eq(b.body, a.body, "the replay must be byte for byte the stored body");
    cr_expect_str_eq(sgt_res_header(&b, "Idempotent-Replayed"), "true");

    c = post("/payment/charge", "order-2", "{\"args\":{\"amount_cents\":1250}}");
    cr_expect_eq(c.status, 201);
    cr_expect_str_neq(c.body, a.body, "another key is another payment");
    cr_expect_null(sgt_res_header(&c, "Idempotent-Replayed"));

    cr_expect_eq(counter("effects", "/payment/charge"), 2);
    cr_expect_eq(counter("requests", "/payment/charge"), 3);
    cr_expect_eq(counter("keys", "/payment/charge"), 2);
    /* The key is per path: the same key on another endpoint is new work. */
    sgt_res_free(&c);
    c = post("/payment/refund", "order-1", "{\"forward\":{\"idempotency_key\":\"order-1\"}}");
    cr_expect_eq(c.status, 200, "%s", c.body);
    cr_expect_null(sgt_res_header(&c, "Idempotent-Replayed"));
    cr_expect_eq(counter("effects", "/payment/refund"), 1);
    sgt_res_free(&a);
    sgt_res_free(&b);
    sgt_res_free(&c);
}

typedef struct racer_s {
    sgt_res_t res;
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;

    r->res = post("/inventory/reserve", "same-key", "{\"args\":{\"sku\":\"A\",\"qty\":1}}");
    return NULL;
}

/* Concurrent requests under one key (each held by --delay-ms, so they are
 * in flight together) make one effect and all see the same answer. */
Test(checkout, concurrent_requests_under_one_key_make_one_effect)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--delay-ms", "100", NULL};
    racer_t r[16];
    pthread_t t[16];
    int replayed = 0;

    start(args);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 16; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 16; i++) {
        cr_expect_eq(r[i].res.status, 201, "%s", r[i].res.body);
        cr_expect_str_eq(r[i].res.body, r[0].res.body);
        replayed += sgt_res_header(&r[i].res, "Idempotent-Replayed") != NULL;
    }
    for (int i = 0; i < 16; i++)
        sgt_res_free(&r[i].res);
    cr_expect_eq(replayed, 15, "all but the first are replays");
    cr_expect_eq(counter("effects", "/inventory/reserve"), 1);
}

Test(checkout, missing_idempotency_key_is_400_and_no_effect)
{
    sgt_res_t r;

    start_plain();
    r = post("/shipping/book", NULL, "{\"args\":{}}");
    expect_error(&r, 400, "missing_idempotency_key", false);
    sgt_res_free(&r);
    cr_expect_eq(counter("effects", "/shipping/book"), 0);
    cr_expect_eq(counter("keys", "/shipping/book"), 0);
    cr_expect_eq(counter("requests", "/shipping/book"), 1);
}

/* --- faults --------------------------------------------------------------- */

Test(checkout, fault_503x2_fails_twice_then_succeeds_and_the_success_is_replayed)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--fault", "/shipping/book=503x2",
                                       NULL};
    sgt_res_t r[4];
    char body[128];
    sg_json_t *doc;

    start(args);
    r[0] = post("/inventory/reserve", "res-1", "{\"args\":{\"sku\":\"A\",\"qty\":1}}");
    doc = json_of(&r[0]);
    snprintf(body, sizeof(body), "{\"args\":{\"reservation_id\":\"%s\"}}",
             str_at(doc, "reservation_id"));
    sg_json_destroy(doc);
    sgt_res_free(&r[0]);
    for (int i = 0; i < 4; i++)
        r[i] = post("/shipping/book", "ship-1", body);
    expect_error(&r[0], 503, "injected_503", true);
    expect_error(&r[1], 503, "injected_503", true);
    cr_expect_eq(r[2].status, 201, "%s", r[2].body);
    cr_expect_null(sgt_res_header(&r[2], "Idempotent-Replayed"));
    cr_expect_eq(r[3].status, 201);
    cr_expect_str_eq(r[3].body, r[2].body);
    cr_expect_str_eq(sgt_res_header(&r[3], "Idempotent-Replayed"), "true");
    cr_expect_eq(counter("effects", "/shipping/book"), 1);
    for (int i = 0; i < 4; i++)
        sgt_res_free(&r[i]);
}

Test(checkout, retry_after_is_passed_through_verbatim)
{
    static const char *const args[] = {
        "--listen", "127.0.0.1:0", "--fault",
        "/payment/charge=429x1,retry_after=Wed, 21 Oct 2015 07:28:00 GMT", NULL};
    sgt_res_t r;

    start(args);
    r = post("/payment/charge", "k", "{}");
    expect_error(&r, 429, "injected_429", true);
    cr_expect_str_eq(sgt_res_header(&r, "Retry-After"), "Wed, 21 Oct 2015 07:28:00 GMT");
    sgt_res_free(&r);
    /* Not stored: the retry under the same key is new work. */
    r = post("/payment/charge", "k", "{}");
    cr_expect_eq(r.status, 201, "%s", r.body);
    cr_expect_null(sgt_res_header(&r, "Retry-After"));
    cr_expect_null(sgt_res_header(&r, "Idempotent-Replayed"));
    sgt_res_free(&r);

    r = http("POST", "/_admin/faults", NULL,
             "{\"path\":\"/payment/charge\",\"status\":503,\"times\":1,\"retry_after\":\"7\"}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    sgt_res_free(&r);
    r = post("/payment/charge", "k2", "{}");
    expect_error(&r, 503, "injected_503", true);
    cr_expect_str_eq(sgt_res_header(&r, "Retry-After"), "7");
    sgt_res_free(&r);
}

/* A few MiB (the real oversized test uses 50): exactly that many bytes,
 * one JSON string. */
Test(checkout, body_bytes_answers_exactly_that_many_bytes)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--fault",
                                       "/email/send=200x1,body_bytes=3145733", NULL};
    sgt_res_t r;
    size_t bad = 0;

    start(args);
    r = post("/email/send", "mail-1", "{}");
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, 3145733, "got %zu bytes", r.len);
    cr_expect_eq(r.body[0], '"');
    cr_expect_eq(r.body[r.len - 1], '"');
    for (size_t i = 1; i + 1 < r.len; i++)
        bad += r.body[i] != 'x';
    cr_expect_eq(bad, 0, "%zu bytes are not 'x'", bad);
    cr_expect_eq(counter("effects", "/email/send"), 0, "a streamed fault is no effect");
    sgt_res_free(&r);
}

Test(checkout, admin_faults_are_added_listed_and_cleared)
{
    sgt_res_t r;
    sg_json_t *doc;

    start_plain();
    r = http("POST", "/_admin/faults", NULL, "{\"path\":\"/email/send\",\"status\":400}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    sgt_res_free(&r);
    r = http("GET", "/_admin/faults", NULL, NULL);
    doc = json_of(&r);
    cr_expect_eq(sg_json_array_size(sg_json_member(doc, "faults")), 1, "%s", r.body);
    sg_json_destroy(doc);
    sgt_res_free(&r);

    /* For ever (times absent), whatever the key; a 400 is final, so the
     * key keeps its answer even after the fault is gone. */
    for (int i = 0; i < 3; i++) {
        char key[16];

        snprintf(key, sizeof(key), "mail-%d", i);
        r = post("/email/send", key, "{}");
        expect_error(&r, 400, "injected_400", false);
        sgt_res_free(&r);
    }
    r = http("DELETE", "/_admin/faults", NULL, NULL);
    cr_assert_eq(r.status, 200, "%s", r.body);
    sgt_res_free(&r);
    r = post("/email/send", "mail-new", "{}");
    cr_expect_eq(r.status, 201, "%s", r.body);
    sgt_res_free(&r);
    r = post("/email/send", "mail-0", "{}");
    expect_error(&r, 400, "injected_400", false);
    cr_expect_str_eq(sgt_res_header(&r, "Idempotent-Replayed"), "true");
    sgt_res_free(&r);

    r = http("POST", "/_admin/faults", NULL, "{\"path\":\"/email/send\",\"status\":\"x\"}");
    expect_error(&r, 400, "invalid_fault", false);
    cr_expect(strstr(r.body, "$.status") != NULL, "the error names the field: %s", r.body);
    sgt_res_free(&r);
    r = http("POST", "/_admin/faults", NULL, "{\"path\":\"/nowhere\",\"status\":500}");
    expect_error(&r, 400, "invalid_fault", false);
    cr_expect(strstr(r.body, "$.path") != NULL, "%s", r.body);
    sgt_res_free(&r);
}

Test(checkout, bad_keys_and_bodies_get_a_400_that_names_the_rule)
{
    char long_key[300];
    sgt_res_t r;

    start_plain();
    r = post("/payment/charge", "has space", "{}");
    expect_error(&r, 400, "invalid_idempotency_key", false);
    cr_expect(strstr(r.body, "Idempotency-Key") != NULL, "%s", r.body);
    sgt_res_free(&r);
    memset(long_key, 'k', 256);
    long_key[256] = '\0';
    r = post("/payment/charge", long_key, "{}");
    expect_error(&r, 400, "invalid_idempotency_key", false);
    sgt_res_free(&r);
    long_key[255] = '\0';
    r = post("/payment/charge", long_key, "{}");
    cr_expect_eq(r.status, 201, "255 characters are allowed: %s", r.body);
    sgt_res_free(&r);

    /* A malformed body is a final answer: stored and replayed. */
    r = post("/payment/charge", "bad-body", "{\"args\":");
    expect_error(&r, 400, "invalid_json", false);
    sgt_res_free(&r);
    r = post("/payment/charge", "bad-body", "{}");
    expect_error(&r, 400, "invalid_json", false);
    cr_expect_str_eq(sgt_res_header(&r, "Idempotent-Replayed"), "true");
    sgt_res_free(&r);
    r = post("/payment/charge", "array-body", "[1]");
    expect_error(&r, 400, "invalid_body", false);
    sgt_res_free(&r);
    cr_expect_eq(counter("effects", "/payment/charge"), 1);
}

/* --- admin: the request log, stats and reset ------------------------------ */

Test(checkout, request_log_has_lowercased_headers_and_the_parsed_body)
{
    const char *h[] = {"Idempotency-Key: res-1", "Authorization: Bearer s3cr3t",
                       "X-Trace-Thing: Mixed Case Value", "Content-Type: application/json", NULL};
    const sg_json_t *e, *hdrs, *body;
    sg_json_t *doc;
    sgt_res_t r;

    start_plain();
    r = http("POST", "/inventory/reserve", h, "{\"args\":{\"sku\":\"A-1\",\"qty\":2}}");
    cr_assert_eq(r.status, 201, "%s", r.body);
    sgt_res_free(&r);
    r = post("/email/send", "mail-1", "not json at all");
    sgt_res_free(&r);

    r = http("GET", "/_admin/requests?path=/inventory/reserve", NULL, NULL);
    cr_assert_eq(r.status, 200);
    doc = json_of(&r);
    cr_assert_eq(sg_json_array_size(sg_json_member(doc, "requests")), 1, "%s", r.body);
    e = sg_json_array_get(sg_json_member(doc, "requests"), 0);
    cr_expect_eq(int_at(e, "seq"), 1);
    cr_expect_gt(int_at(e, "time_ms"), 1600000000000LL);
    cr_expect_str_eq(str_at(e, "method"), "POST");
    cr_expect_str_eq(str_at(e, "path"), "/inventory/reserve");
    cr_expect_str_eq(str_at(e, "idempotency_key"), "res-1");
    cr_expect_eq(int_at(e, "status"), 201);
    hdrs = sg_json_member(e, "headers");
    cr_expect_str_eq(str_at(hdrs, "authorization"), "Bearer s3cr3t");
    cr_expect_str_eq(str_at(hdrs, "x-trace-thing"), "Mixed Case Value");
    cr_expect_str_eq(str_at(hdrs, "idempotency-key"), "res-1");
    cr_expect_null(sg_json_member(hdrs, "Authorization"), "names are lowercased");
    body = sg_json_member(sg_json_member(e, "body"), "args");
    cr_expect_str_eq(str_at(body, "sku"), "A-1");
    cr_expect_eq(int_at(body, "qty"), 2);
    sg_json_destroy(doc);
    sgt_res_free(&r);

    /* Unfiltered: both, oldest first; a body that is not JSON is text. */
    r = http("GET", "/_admin/requests", NULL, NULL);
    doc = json_of(&r);
    cr_assert_eq(sg_json_array_size(sg_json_member(doc, "requests")), 2, "%s", r.body);
    e = sg_json_array_get(sg_json_member(doc, "requests"), 1);
    cr_expect_str_eq(str_at(e, "path"), "/email/send");
    cr_expect_str_eq(sg_json_string(sg_json_member(e, "body")), "not json at all");
    cr_expect_eq(int_at(e, "status"), 400, "%s", r.body);
    sg_json_destroy(doc);
    sgt_res_free(&r);
}

/* The log keeps the last 10,000 requests, so memory stays bounded. */
Test(checkout, request_log_keeps_the_last_10000)
{
    CURL *c = curl_easy_init();
    char url[256];
    sg_json_t *doc;
    const sg_json_t *reqs;
    sgt_res_t r;

    start_plain();
    snprintf(url, sizeof(url), "%s/shipping/cancel", base);
    cr_assert_not_null(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "{}");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    for (int i = 0; i < 10005; i++) /* one keep-alive connection */
        cr_assert_eq(curl_easy_perform(c), CURLE_OK);
    curl_easy_cleanup(c);

    r = http("GET", "/_admin/requests", NULL, NULL);
    doc = json_of(&r);
    reqs = sg_json_member(doc, "requests");
    cr_assert_eq(sg_json_array_size(reqs), 10000);
    cr_expect_eq(int_at(sg_json_array_get(reqs, 0), "seq"), 6);
    cr_expect_eq(int_at(sg_json_array_get(reqs, 9999), "seq"), 10005);
    cr_expect_eq(counter("requests", "/shipping/cancel"), 10005, "counters are not capped");
    sg_json_destroy(doc);
    sgt_res_free(&r);
}

Test(checkout, stats_count_requests_effects_and_keys_and_reset_clears_them)
{
    sgt_res_t r;

    start_plain();
    for (int i = 0; i < 3; i++) {
        r = post("/inventory/reserve", i < 2 ? "a" : "b", "{}");
        sgt_res_free(&r);
    }
    r = post("/inventory/release", "a", "{\"forward\":{\"idempotency_key\":\"a\"}}");
    cr_expect_eq(r.status, 200, "%s", r.body);
    sgt_res_free(&r);
    cr_expect_eq(counter("requests", "/inventory/reserve"), 3);
    cr_expect_eq(counter("effects", "/inventory/reserve"), 2);
    cr_expect_eq(counter("keys", "/inventory/reserve"), 2);
    cr_expect_eq(counter("requests", "/inventory/release"), 1);
    cr_expect_eq(counter("effects", "/inventory/release"), 1);
    cr_expect_eq(counter("requests", "/shipping/cancel"), 0, "every path is listed");

    r = http("POST", "/_admin/reset", NULL, "");
    cr_assert_eq(r.status, 200, "%s", r.body);
    sgt_res_free(&r);
    cr_expect_eq(counter("requests", "/inventory/reserve"), 0);
    cr_expect_eq(counter("effects", "/inventory/reserve"), 0);
    cr_expect_eq(counter("keys", "/inventory/reserve"), 0);
    r = http("GET", "/_admin/requests", NULL, NULL);
    cr_expect_str_eq(r.body, "{\"requests\":[]}");
    sgt_res_free(&r);
    /* Stored responses are gone too: key "a" is new work again. */
    r = post("/inventory/reserve", "a", "{}");
    cr_expect_eq(r.status, 201);
    cr_expect_null(sgt_res_header(&r, "Idempotent-Replayed"));
    sgt_res_free(&r);
}

Test(checkout, unknown_path_is_404_and_wrong_method_405)
{
    sgt_res_t r;

    start_plain();
    r = post("/payment/steal", "k", "{}");
    expect_error(&r, 404, "not_found", false);
    sgt_res_free(&r);
    r = http("GET", "/payment/charge", NULL, NULL);
    expect_error(&r, 405, "method_not_allowed", false);
    cr_expect_str_eq(sgt_res_header(&r, "Allow"), "POST");
    sgt_res_free(&r);
    r = http("DELETE", "/_admin/stats", NULL, NULL);
    expect_error(&r, 405, "method_not_allowed", false);
    cr_expect_str_eq(sgt_res_header(&r, "Allow"), "GET");
    sgt_res_free(&r);
}

/* --- ids: what a request refers to is checked ----------------------------- */

/* The string member name of a response's JSON body, copied into out. */
static const char *id_in(const sgt_res_t *r, const char *name, char *out, size_t size)
{
    sg_json_t *doc = json_of(r);

    snprintf(out, size, "%s", str_at(doc, name));
    sg_json_destroy(doc);
    return out;
}

/* The last request the log has for path. */
static sg_json_t *last_request(const char *path, const sg_json_t **e)
{
    char url[256];
    sgt_res_t r;
    sg_json_t *doc;
    size_t n;

    snprintf(url, sizeof(url), "/_admin/requests?path=%s", path);
    r = http("GET", url, NULL, NULL);
    doc = json_of(&r);
    sgt_res_free(&r);
    n = sg_json_array_size(sg_json_member(doc, "requests"));
    cr_assert_gt(n, 0, "no request to %s in the log", path);
    *e = sg_json_array_get(sg_json_member(doc, "requests"), n - 1);
    return doc;
}

Test(checkout, book_needs_the_id_of_a_live_reservation)
{
    char res_id[64], body[256], got[64];
    const sg_json_t *e;
    sg_json_t *doc;
    sgt_res_t r;

    start_plain();
    r = post("/shipping/book", "b-none", "{\"args\":{\"carrier\":\"dhl\"}}");
    expect_error(&r, 400, "unknown_reservation", false);
    cr_expect(strstr(r.body, "args.reservation_id") != NULL, "names the member: %s", r.body);
    sgt_res_free(&r);
    r = post("/shipping/book", "b-unknown", "{\"args\":{\"reservation_id\":\"inv_424242\"}}");
    expect_error(&r, 400, "unknown_reservation", false);
    cr_expect(strstr(r.body, "inv_424242") != NULL, "names the id: %s", r.body);
    sgt_res_free(&r);
    /* A charge id is no reservation id. */
    r = post("/payment/charge", "c-1", "{\"args\":{\"amount_cents\":100}}");
    snprintf(body, sizeof(body), "{\"args\":{\"reservation_id\":\"%s\"}}",
             id_in(&r, "charge_id", got, sizeof(got)));
    sgt_res_free(&r);
    r = post("/shipping/book", "b-charge", body);
    expect_error(&r, 400, "unknown_reservation", false);
    sgt_res_free(&r);
    cr_expect_eq(counter("effects", "/shipping/book"), 0);

    r = post("/inventory/reserve", "r-1", "{\"args\":{\"sku\":\"A\",\"qty\":1}}");
    cr_assert_eq(r.status, 201, "%s", r.body);
    id_in(&r, "reservation_id", res_id, sizeof(res_id));
    cr_expect_str_eq(id_in(&r, "id", got, sizeof(got)), res_id, "id and reservation_id agree");
    cr_expect_eq(strncmp(res_id, "inv_", 4), 0, "%s", res_id);
    sgt_res_free(&r);
    snprintf(body, sizeof(body), "{\"args\":{\"reservation_id\":\"%s\",\"carrier\":\"dhl\"}}",
             res_id);
    r = post("/shipping/book", "b-1", body);
    cr_assert_eq(r.status, 201, "%s", r.body);
    cr_expect_eq(strncmp(id_in(&r, "booking_id", got, sizeof(got)), "shp_", 4), 0, "%s", r.body);
    cr_expect_str_eq(id_in(&r, "reservation_id", got, sizeof(got)), res_id);
    sgt_res_free(&r);
    doc = last_request("/shipping/book", &e);
    cr_expect_str_eq(str_at(e, "ref_id"), res_id, "the log shows the id the booking carried");
    cr_expect_str_eq(str_at(e, "ref_from"), "args");
    cr_expect_eq(strncmp(str_at(e, "issued_id"), "shp_", 4), 0);
    sg_json_destroy(doc);

    /* Released, the reservation is no longer live. */
    snprintf(body, sizeof(body), "{\"forward\":{\"result\":{\"reservation_id\":\"%s\"}}}", res_id);
    r = post("/inventory/release", "l-1", body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(id_in(&r, "reservation_id", got, sizeof(got)), res_id);
    cr_expect_eq(strncmp(id_in(&r, "release_id", got, sizeof(got)), "rel_", 4), 0);
    sgt_res_free(&r);
    snprintf(body, sizeof(body), "{\"args\":{\"reservation_id\":\"%s\"}}", res_id);
    r = post("/shipping/book", "b-2", body);
    expect_error(&r, 400, "unknown_reservation", false);
    sgt_res_free(&r);
    cr_expect_eq(counter("effects", "/shipping/book"), 1);
}

Test(checkout, refund_of_an_unknown_charge_is_404_and_a_second_refund_409)
{
    char charge_id[64], body[256], got[64], first[4096];
    const sg_json_t *e;
    sg_json_t *doc;
    sgt_res_t r;

    start_plain();
    r = post("/payment/refund", "x-1", "{\"args\":{\"charge_id\":\"pay_999999\"}}");
    expect_error(&r, 404, "unknown_charge", false);
    cr_expect(strstr(r.body, "pay_999999") != NULL, "names the id: %s", r.body);
    sgt_res_free(&r);
    r = post("/payment/refund", "x-2",
             "{\"forward\":{\"result\":{\"charge_id\":\"pay_888888\"},\"idempotency_key\":\"k\","
             "\"effect\":\"known\"}}");
    expect_error(&r, 404, "unknown_charge", false);
    sgt_res_free(&r);
    r = post("/payment/refund", "x-3", "{\"args\":{}}");
    expect_error(&r, 400, "missing_ref", false);
    sgt_res_free(&r);
    cr_expect_eq(counter("effects", "/payment/refund"), 0);

    r = post("/payment/charge", "c-1", "{\"args\":{\"amount_cents\":4500}}");
    cr_assert_eq(r.status, 201, "%s", r.body);
    id_in(&r, "charge_id", charge_id, sizeof(charge_id));
    cr_expect_eq(strncmp(charge_id, "pay_", 4), 0, "%s", r.body);
    sgt_res_free(&r);
    snprintf(body, sizeof(body),
             "{\"forward\":{\"result\":{\"charge_id\":\"%s\"},\"idempotency_key\":\"c-1\","
             "\"effect\":\"known\"}}",
             charge_id);
    r = post("/payment/refund", "x-4", body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(id_in(&r, "charge_id", got, sizeof(got)), charge_id);
    cr_expect_eq(strncmp(id_in(&r, "refund_id", got, sizeof(got)), "ref_", 4), 0);
    snprintf(first, sizeof(first), "%s", r.body);
    sgt_res_free(&r);
    doc = last_request("/payment/refund", &e);
    cr_expect_str_eq(str_at(e, "ref_id"), charge_id, "the log shows the charge the refund named");
    cr_expect_str_eq(str_at(e, "ref_from"), "forward.result");
    sg_json_destroy(doc);

    /* The same key: the stored answer.  Another key: refused, 409. */
    r = post("/payment/refund", "x-4", body);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(r.body, first);
    cr_expect_str_eq(sgt_res_header(&r, "Idempotent-Replayed"), "true");
    sgt_res_free(&r);
    r = post("/payment/refund", "x-5", body);
    expect_error(&r, 409, "charge_already_refunded", false);
    sgt_res_free(&r);
    cr_expect_eq(counter("effects", "/payment/refund"), 1, "one refund");
}

Test(checkout, refund_by_the_forward_key_finds_the_charge_made_under_it)
{
    char charge_id[64], got[64];
    const sg_json_t *e;
    sg_json_t *doc;
    sgt_res_t r;

    start_plain();
    r = post("/payment/charge", "saga-1:1:f:g1", "{\"args\":{\"amount_cents\":4500}}");
    cr_assert_eq(r.status, 201, "%s", r.body);
    id_in(&r, "charge_id", charge_id, sizeof(charge_id));
    sgt_res_free(&r);
    r = post("/payment/charge", "saga-2:1:f:g1", "{\"args\":{\"amount_cents\":10}}");
    sgt_res_free(&r);

    /* No charge under that key: nothing to undo, 404. */
    r = post("/payment/refund", "saga-3:1:c:g1",
             "{\"forward\":{\"result\":null,\"idempotency_key\":\"saga-3:1:f:g1\",\"effect\":"
             "\"possible\"}}");
    expect_error(&r, 404, "unknown_charge", false);
    cr_expect(strstr(r.body, "saga-3:1:f:g1") != NULL, "names the key: %s", r.body);
    sgt_res_free(&r);

    r = post("/payment/refund", "saga-1:1:c:g1",
             "{\"forward\":{\"result\":null,\"idempotency_key\":\"saga-1:1:f:g1\",\"effect\":"
             "\"possible\"}}");
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(id_in(&r, "charge_id", got, sizeof(got)), charge_id,
                     "the charge made under the forward key, not another");
    sgt_res_free(&r);
    doc = last_request("/payment/refund", &e);
    cr_expect_str_eq(str_at(e, "ref_id"), charge_id);
    cr_expect_str_eq(str_at(e, "ref_from"), "forward.idempotency_key");
    sg_json_destroy(doc);
    cr_expect_eq(counter("effects", "/payment/refund"), 1);
}

static void *slow_charge(void *arg)
{
    sgt_res_t *r = arg;

    *r = post("/payment/charge", "slow-1", "{\"args\":{\"amount_cents\":1}}");
    return NULL;
}

/* A refund by key while the charge under that key is still being worked
 * on (a slow success) is told to come back: 425, retriable, not stored;
 * once the charge is made the same refund finds it. */
Test(checkout, refund_by_key_of_a_charge_in_progress_is_425_then_finds_it)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--fault",
                                       "/payment/charge=201x1,delay_ms=5000", NULL};
    static const char refund[] = "{\"forward\":{\"result\":null,\"idempotency_key\":\"slow-1\","
                                 "\"effect\":\"possible\"}}";
    char charge_id[64], got[64];
    bool arrived = false;
    sgt_res_t r, charge;
    pthread_t t;

    start(args);
    cr_assert_eq(pthread_create(&t, NULL, slow_charge, &charge), 0);
    for (int i = 0; i < 500 && !arrived; i++) {
        r = http("GET", "/_admin/requests?path=/payment/charge", NULL, NULL);
        arrived = strstr(r.body, "\"status\":null") != NULL;
        sgt_res_free(&r);
        if (!arrived)
            usleep(20000);
    }
    cr_assert(arrived, "the charge never arrived");
    r = post("/payment/refund", "refund-1", refund);
    expect_error(&r, 425, "in_progress", true);
    sgt_res_free(&r);
    pthread_join(t, NULL);
    cr_assert_eq(charge.status, 201, "%s", charge.body);
    id_in(&charge, "charge_id", charge_id, sizeof(charge_id));
    sgt_res_free(&charge);
    r = post("/payment/refund", "refund-1", refund);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_null(sgt_res_header(&r, "Idempotent-Replayed"), "a 425 is not stored");
    cr_expect_str_eq(id_in(&r, "charge_id", got, sizeof(got)), charge_id);
    sgt_res_free(&r);
}

Test(checkout, cancel_needs_a_booking_it_issued_once)
{
    char res_id[64], ship_id[64], body[256], got[64];
    sgt_res_t r;

    start_plain();
    r = post("/shipping/cancel", "k-0", "{\"args\":{\"booking_id\":\"shp_123456\"}}");
    expect_error(&r, 404, "unknown_booking", false);
    sgt_res_free(&r);
    r = post("/inventory/reserve", "r-1", "{\"args\":{\"sku\":\"A\",\"qty\":1}}");
    id_in(&r, "reservation_id", res_id, sizeof(res_id));
    sgt_res_free(&r);
    snprintf(body, sizeof(body), "{\"args\":{\"reservation_id\":\"%s\"}}", res_id);
    r = post("/shipping/book", "b-1", body);
    cr_assert_eq(r.status, 201, "%s", r.body);
    id_in(&r, "booking_id", ship_id, sizeof(ship_id));
    sgt_res_free(&r);
    snprintf(body, sizeof(body), "{\"forward\":{\"result\":{\"booking_id\":\"%s\"}}}", ship_id);
    r = post("/shipping/cancel", "k-1", body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(id_in(&r, "booking_id", got, sizeof(got)), ship_id);
    cr_expect_eq(strncmp(id_in(&r, "cancellation_id", got, sizeof(got)), "cnl_", 4), 0);
    sgt_res_free(&r);
    r = post("/shipping/cancel", "k-2", body);
    expect_error(&r, 409, "booking_already_cancelled", false);
    sgt_res_free(&r);
    cr_expect_eq(counter("effects", "/shipping/cancel"), 1);
}

Test(checkout, no_checks_accepts_any_ids_or_none)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--no-checks", NULL};
    sgt_res_t r;

    start(args);
    r = post("/shipping/book", "b-1", "{\"args\":{\"carrier\":\"dhl\"}}");
    cr_expect_eq(r.status, 201, "%s", r.body);
    sgt_res_free(&r);
    r = post("/payment/refund", "x-1", "{}");
    cr_expect_eq(r.status, 200, "%s", r.body);
    sgt_res_free(&r);
}

/* --- lifecycle ------------------------------------------------------------ */

static void *hang(void *arg)
{
    sgt_res_t *r = arg;

    *r = post("/inventory/reserve", "hung", "{}");
    return NULL;
}

/* SIGTERM with a request hanging in a 60 s injected delay: the sleeper
 * is woken, answered 503, and the service exits 0 (checked in stop()). */
Test(checkout, sigterm_during_a_hanging_request_exits_0)
{
    static const char *const args[] = {"--listen", "127.0.0.1:0", "--fault",
                                       "/inventory/reserve=200,delay_ms=60000", NULL};
    pthread_t t;
    sgt_res_t r, hung;
    bool arrived = false;

    start(args);
    cr_assert_eq(pthread_create(&t, NULL, hang, &hung), 0);
    /* Wait until the service has the request (status still null). */
    for (int i = 0; i < 500 && !arrived; i++) {
        r = http("GET", "/_admin/requests", NULL, NULL);
        arrived = strstr(r.body, "\"status\":null") != NULL;
        sgt_res_free(&r);
        if (!arrived)
            usleep(20000);
    }
    cr_assert(arrived, "the hanging request never arrived");
    sgt_bg_signal(&svc, SIGTERM);
    cr_expect_eq(sgt_bg_join(&svc, 30), 0, "%s", sgt_bg_tail(&svc));
    pthread_join(t, NULL);
    expect_error(&hung, 503, "shutting_down", true);
    sgt_res_free(&hung);
}

Test(checkout, help_and_bad_usage)
{
    static const char *const help[] = {"--help", NULL};
    static const char *const bad_fault[] = {"--fault", "/shipping/book=5x", NULL};
    static const char *const bad_path[] = {"--fault", "/nowhere=500", NULL};
    char *out = NULL, *err = NULL;

    cr_expect_eq(sgt_run("checkout-svc", help, NULL, &out, &err), 0);
    cr_expect(strstr(out, "--fault SPEC") && strstr(out, "/_admin/requests"), "%s", out);
    free(out);
    free(err);
    cr_expect_eq(sgt_run("checkout-svc", bad_fault, NULL, &out, &err), 2);
    cr_expect(strstr(err, "times:") != NULL, "the error names the part: %s", err);
    cr_expect_str_eq(out, "", "nothing on stdout but the listening line");
    free(out);
    free(err);
    cr_expect_eq(sgt_run("checkout-svc", bad_path, NULL, &out, &err), 2);
    cr_expect(strstr(err, "unknown path \"/nowhere\"") != NULL, "%s", err);
    free(out);
    free(err);
}

/* The demo's sagas (references, output) against the demo's registry
 * (nothing_to_undo, book's args schema), by the worker's own validator.
 * Needs the worker part of issue 24: the registry and the validator of the
 * branch before it refuse both. */
TestSuite(checkout_examples, .timeout = 60);

Test(checkout_examples, the_demo_sagas_validate_against_the_checkout_registry)
{
    static const char *const files[] = {"examples/sagas/checkout-ok.json",
                                        "examples/sagas/checkout-fails.json"};

    for (size_t i = 0; i < 2; i++) {
        const char *args[] = {"validate", "--registry", "examples/checkout/tools.json", files[i],
                              NULL};
        char *out = NULL, *err = NULL;
        int rc = sgt_run("sagactl", args, NULL, &out, &err);

        cr_expect_eq(rc, 0, "sagactl validate %s exited %d: %s%s", files[i], rc, out, err);
        free(out);
        free(err);
    }
}

/* ==== the checkout saga on the real worker ================================
 *
 * The worker and relay (tests/support/sg_worker_env.h) calling checkout-svc
 * with its id checks on, on the contract of issue 24 (DESIGN.md section 10):
 * {"$from": POINTER} references in args and the saga's output, the forward
 * outcome of a compensation in its body under "forward" (result,
 * idempotency_key, effect "known" | "possible"), a registry's
 * nothing_to_undo statuses, step.succeeded's result and saga.completed's
 * output.  What checkout-svc received is read back from its request log. */

static sgt_bg_t saga_svc;
static char saga_base[128];

static void saga_setup(void)
{
    sgw_setup();
    memset(&saga_svc, 0, sizeof(saga_svc));
}

static void saga_teardown(void)
{
    sgw_checkout_stop(&saga_svc);
    sgt_bg_free(&saga_svc);
    sgw_teardown();
}

TestSuite(checkout_saga, .init = saga_setup, .fini = saga_teardown, .timeout = 180);

/* The checkout tools on checkout-svc with fast retries; co.charge_fast
 * gives up after two attempts of 500 ms; the compensations count 404 and
 * 409 as nothing to undo, as examples/checkout/tools.json does; co.refund
 * retries every 100..500 ms as a compensation (compensate_retry: a 425
 * while the charge is still being made comes back soon). */
static void saga_start_all(const char *const *svc_args)
{
    static const char fmt[] =
        "\"co.reserve\": {\"adapter\": \"http\", \"target\": \"%s/inventory/reserve\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.release\", \"retry\": "
        "{\"max_attempts\": 5, \"base_ms\": 10, \"cap_ms\": 20}},"
        "\"co.release\": {\"adapter\": \"http\", \"target\": \"%s/inventory/release\", "
        "\"side_effect\": \"idempotent\", \"nothing_to_undo\": [404, 409]},"
        "\"co.charge\": {\"adapter\": \"http\", \"target\": \"%s/payment/charge\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.refund\", \"retry\": "
        "{\"max_attempts\": 5, \"base_ms\": 10, \"cap_ms\": 20}},"
        "\"co.charge_fast\": {\"adapter\": \"http\", \"target\": \"%s/payment/charge\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.refund\", \"timeout_ms\": 500, "
        "\"retry\": {\"max_attempts\": 2, \"base_ms\": 10, \"cap_ms\": 20}},"
        "\"co.refund\": {\"adapter\": \"http\", \"target\": \"%s/payment/refund\", "
        "\"side_effect\": \"idempotent\", \"nothing_to_undo\": [404, 409], "
        "\"compensate_retry\": {\"max_attempts\": 30, \"base_ms\": 100, \"cap_ms\": 500}},"
        "\"co.book\": {\"adapter\": \"http\", \"target\": \"%s/shipping/book\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.cancel\", \"args\": {\"type\": "
        "\"object\", \"required\": [\"reservation_id\"]}},"
        "\"co.cancel\": {\"adapter\": \"http\", \"target\": \"%s/shipping/cancel\", "
        "\"side_effect\": \"idempotent\", \"nothing_to_undo\": [404, 409]},"
        "\"co.email\": {\"adapter\": \"http\", \"target\": \"%s/email/send\", \"side_effect\": "
        "\"irreversible\"}";
    char tools[sizeof(fmt) + 8 * 128];

    sgw_checkout_start(&saga_svc, svc_args, saga_base, sizeof(saga_base));
    snprintf(tools, sizeof(tools), fmt, saga_base, saga_base, saga_base, saga_base, saga_base,
             saga_base, saga_base, saga_base);
    sgw_pair_start(tools, 1, NULL);
}

/* saga.start of saga_id: steps and the rest of the document (", ..." or ""). */
static void saga_submit(const char *saga_id, const char *steps, const char *rest)
{
    char msg[4096];

    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
             "\"name\": \"checkout\", \"input\": {\"order\": 7}, \"steps\": %s%s}",
             saga_id, saga_id, steps, rest);
    sgw_produce(sgw.topic_cmd, saga_id, msg, strlen(msg));
}

#define CHECKOUT_STEPS(charge_tool)                                                                \
    "[{\"name\": \"reserve\", \"tool\": \"co.reserve\", \"args\": {\"sku\": \"B7\", \"qty\": "     \
    "1}}, {\"name\": \"charge\", \"tool\": \"" charge_tool "\", \"args\": {\"amount_cents\": "     \
    "4500}}, {\"name\": \"ship\", \"tool\": \"co.book\", \"args\": {\"carrier\": \"dhl\", "        \
    "\"reservation_id\": {\"$from\": \"/steps/reserve/result/reservation_id\"}}}, {\"name\": "     \
    "\"notify\", \"tool\": \"co.email\"}]"

#define CHECKOUT_OUTPUT                                                                            \
    ", \"output\": {\"charge_id\": {\"$from\": \"/steps/charge/result/charge_id\"}, "              \
    "\"booking_id\": {\"$from\": \"/steps/ship/result/booking_id\"}}"

/* The requests checkout-svc received on path (all of them, oldest first);
 * *doc owns them. */
static const sg_json_t *received(const char *path, sg_json_t **doc)
{
    return sgw_checkout_requests(saga_base, path, doc);
}

/* The id the one fresh success on path issued, copied into out. */
static const char *issued_on(const char *path, char *out, size_t size)
{
    sg_json_t *doc;
    const sg_json_t *reqs = received(path, &doc);
    int found = 0;

    out[0] = '\0';
    for (size_t i = 0; i < sg_json_array_size(reqs); i++) {
        const sg_json_t *r = sg_json_array_get(reqs, i);
        const char *id = sg_json_string(sg_json_member(r, "issued_id"));
        bool replayed = false;

        sg_json_get_bool(r, "$", "replayed", false, &replayed, NULL);
        if (id && !replayed && ++found == 1)
            snprintf(out, size, "%s", id);
    }
    cr_expect_eq(found, 1, "%s issued %d ids, want 1", path, found);
    sg_json_destroy(doc);
    return out;
}

static long long effects_of(const char *path)
{
    return sgw_checkout_effects(saga_base, path);
}

Test(checkout_saga, references_carry_the_reservation_forward_and_the_output_names_the_ids)
{
    char res_id[64], charge_id[64], ship_id[64];
    const sg_json_t *reqs, *done, *ev[16];
    sg_json_t *doc;
    size_t n;
    bool charge_result = false;

    saga_start_all(NULL);
    saga_submit("ref-1", CHECKOUT_STEPS("co.charge"), CHECKOUT_OUTPUT);
    sgw_wait_status("ref-1", "completed");
    done = sgw_event_wait("ref-1", "saga.completed");

    issued_on("/inventory/reserve", res_id, sizeof(res_id));
    issued_on("/payment/charge", charge_id, sizeof(charge_id));
    issued_on("/shipping/book", ship_id, sizeof(ship_id));
    reqs = received("/shipping/book", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1);
    cr_expect_str_eq(
        sgw_jstr(sg_json_member(sg_json_member(sg_json_array_get(reqs, 0), "body"), "args"),
                 "reservation_id"),
        res_id, "the booking carried the reservation id the reserve step answered");
    cr_expect_eq(sgw_jint(sg_json_array_get(reqs, 0), "status"), 201);
    sg_json_destroy(doc);

    cr_expect_str_eq(sgw_jstr(sg_json_member(done, "output"), "charge_id"), charge_id,
                     "saga.completed carries the resolved output");
    cr_expect_str_eq(sgw_jstr(sg_json_member(done, "output"), "booking_id"), ship_id);
    n = sgw_saga_events("ref-1", ev, 16);
    for (size_t i = 0; i < n; i++)
        if (strcmp(sgw_jstr(ev[i], "type"), "step.succeeded") == 0 && sgw_jint(ev[i], "step") == 1)
            charge_result =
                strcmp(sgw_jstr(sg_json_member(ev[i], "result"), "charge_id"), charge_id) == 0;
    cr_expect(charge_result, "step.succeeded of the charge carries its result (charge_id %s)",
              charge_id);
}

/* A compensation's body names the forward call's result, key and effect;
 * checkout-svc checks the id it undoes. */
Test(checkout_saga, compensations_carry_the_ids_they_undo)
{
    static const char *const faults[] = {"--fault", "/email/send=400", NULL};
    char res_id[64], charge_id[64], ship_id[64];
    const struct {
        const char *path, *fwd_path, *name;
        char *id;
    } undo[] = {{"/shipping/cancel", "/shipping/book", "booking_id", ship_id},
                {"/payment/refund", "/payment/charge", "charge_id", charge_id},
                {"/inventory/release", "/inventory/reserve", "reservation_id", res_id}};
    long long seq[3];

    saga_start_all(faults);
    saga_submit("undo-1", CHECKOUT_STEPS("co.charge"), CHECKOUT_OUTPUT);
    sgw_wait_status("undo-1", "compensated");
    issued_on("/inventory/reserve", res_id, sizeof(res_id));
    issued_on("/payment/charge", charge_id, sizeof(charge_id));
    issued_on("/shipping/book", ship_id, sizeof(ship_id));

    for (size_t i = 0; i < 3; i++) {
        sg_json_t *doc, *fdoc;
        const sg_json_t *reqs = received(undo[i].path, &doc), *r, *fwd;
        const sg_json_t *freqs = received(undo[i].fwd_path, &fdoc);

        cr_assert_eq(sg_json_array_size(reqs), 1, "one request to %s", undo[i].path);
        r = sg_json_array_get(reqs, 0);
        seq[i] = sgw_jint(r, "seq");
        fwd = sg_json_member(sg_json_member(r, "body"), "forward");
        cr_expect_str_eq(sgw_jstr(sg_json_member(fwd, "result"), undo[i].name), undo[i].id,
                         "%s: forward.result.%s", undo[i].path, undo[i].name);
        cr_expect_str_eq(sgw_jstr(fwd, "effect"), "known", "%s", undo[i].path);
        cr_expect_str_eq(sgw_jstr(fwd, "idempotency_key"),
                         sgw_jstr(sg_json_array_get(freqs, 0), "idempotency_key"),
                         "%s: forward.idempotency_key is the forward call's key", undo[i].path);
        cr_expect_eq(sgw_jint(r, "status"), 200, "%s answered %lld", undo[i].path,
                     sgw_jint(r, "status"));
        cr_expect_str_eq(sgw_jstr(r, "ref_id"), undo[i].id, "checkout-svc undid %s", undo[i].id);
        cr_expect_eq(effects_of(undo[i].path), 1);
        sg_json_destroy(doc);
        sg_json_destroy(fdoc);
    }
    cr_expect(seq[0] < seq[1] && seq[1] < seq[2], "in reverse order");
}

/* The charge is made (slowly: the service answers after 3 s) but every
 * attempt times out at 500 ms: its effect is only possible.  The refund
 * names it by the forward key (no result), is told 425 while the charge is
 * still being made, and then refunds it: once. */
Test(checkout_saga, a_charge_that_times_out_on_every_attempt_is_refunded_once_by_key)
{
    static const char *const faults[] = {"--fault", "/payment/charge=201,delay_ms=3000", NULL};
    char charge_id[64], key[256];
    const sg_json_t *reqs, *r, *fwd;
    sg_json_t *doc;
    size_t n;

    saga_start_all(faults);
    saga_submit("tmo-1", CHECKOUT_STEPS("co.charge_fast"), "");
    sgw_wait_status("tmo-1", "compensated");

    reqs = received("/payment/charge", &doc);
    cr_assert_geq(sg_json_array_size(reqs), 1);
    snprintf(key, sizeof(key), "%s", sgw_jstr(sg_json_array_get(reqs, 0), "idempotency_key"));
    sg_json_destroy(doc);
    issued_on("/payment/charge", charge_id, sizeof(charge_id));
    cr_expect_neq(charge_id[0], '\0', "the charge was made");

    reqs = received("/payment/refund", &doc);
    n = sg_json_array_size(reqs);
    cr_assert_geq(n, 1, "the timed-out charge was refunded");
    for (size_t i = 0; i < n; i++) {
        r = sg_json_array_get(reqs, i);
        fwd = sg_json_member(sg_json_member(r, "body"), "forward");
        cr_expect_str_eq(sgw_jstr(fwd, "effect"), "possible", "refund %zu", i);
        cr_expect(sg_json_is_null(sg_json_member(fwd, "result")), "no result to name: refund %zu",
                  i);
        cr_expect_str_eq(sgw_jstr(fwd, "idempotency_key"), key, "the charge's key: refund %zu", i);
    }
    r = sg_json_array_get(reqs, n - 1);
    cr_expect_eq(sgw_jint(r, "status"), 200, "the last refund succeeded");
    cr_expect_str_eq(sgw_jstr(r, "ref_id"), charge_id, "the refund found the charge by its key");
    cr_expect_str_eq(sgw_jstr(r, "ref_from"), "forward.idempotency_key");
    sg_json_destroy(doc);
    cr_expect_eq(effects_of("/payment/charge"), 1);
    cr_expect_eq(effects_of("/payment/refund"), 1, "refunded exactly once");
    cr_expect_eq(effects_of("/inventory/release"), 1);
}

/* Every attempt times out and the charge never happens (the service
 * answers 503 after 3 s): the refund by key is answered 404 unknown_charge,
 * which co.refund's nothing_to_undo counts as done: the saga ends
 * compensated, not failed. */
Test(checkout_saga, a_refund_of_a_charge_that_never_happened_is_nothing_to_undo)
{
    static const char *const faults[] = {"--fault", "/payment/charge=503,delay_ms=3000", NULL};
    const sg_json_t *reqs, *r;
    sg_json_t *doc;

    saga_start_all(faults);
    saga_submit("nothing-1", CHECKOUT_STEPS("co.charge_fast"), "");
    sgw_wait_status("nothing-1", "compensated");
    reqs = received("/payment/refund", &doc);
    cr_assert_eq(sg_json_array_size(reqs), 1, "404 is final: one refund call");
    r = sg_json_array_get(reqs, 0);
    cr_expect_eq(sgw_jint(r, "status"), 404);
    cr_expect_str_eq(sgw_jstr(sg_json_member(sg_json_member(r, "body"), "forward"), "effect"),
                     "possible");
    sg_json_destroy(doc);
    cr_expect_eq(effects_of("/payment/charge"), 0);
    cr_expect_eq(effects_of("/payment/refund"), 0);
    cr_expect_eq(effects_of("/inventory/release"), 1);
}

/* A charge answered 400 was known not to be made: it is not refunded. */
Test(checkout_saga, a_charge_refused_with_400_is_not_refunded)
{
    static const char *const faults[] = {"--fault", "/payment/charge=400", NULL};
    sg_json_t *doc;

    saga_start_all(faults);
    saga_submit("refused-1", CHECKOUT_STEPS("co.charge"), "");
    sgw_wait_status("refused-1", "compensated");
    cr_expect_eq(sg_json_array_size(received("/payment/refund", &doc)), 0, "no refund call");
    sg_json_destroy(doc);
    cr_expect_eq(effects_of("/inventory/release"), 1, "the reservation is released");
}

/* A reference to a value the reserve step's result does not hold: the
 * booking is never called, the step fails with input.ref.unresolved and
 * the charge and the reservation are undone by their ids. */
Test(checkout_saga, an_unresolved_reference_fails_the_step_without_a_call)
{
    static const char steps[] =
        "[{\"name\": \"reserve\", \"tool\": \"co.reserve\", \"args\": {\"sku\": \"B7\", \"qty\": "
        "1}}, {\"name\": \"charge\", \"tool\": \"co.charge\", \"args\": {\"amount_cents\": 10}}, "
        "{\"name\": \"ship\", \"tool\": \"co.book\", \"args\": {\"reservation_id\": {\"$from\": "
        "\"/steps/reserve/result/no_such_member\"}}}]";
    const sg_json_t *failed;
    sg_json_t *doc;

    saga_start_all(NULL);
    saga_submit("unres-1", steps, "");
    sgw_wait_status("unres-1", "compensated");
    failed = sgw_event_wait("unres-1", "step.failed");
    cr_expect_str_eq(sgw_jstr(failed, "error_code"), "input.ref.unresolved");
    cr_expect(strstr(sgw_jstr(failed, "message"), "/steps/reserve/result/no_such_member") != NULL,
              "the message names the pointer: %s", sgw_jstr(failed, "message"));
    cr_expect_eq(sg_json_array_size(received("/shipping/book", &doc)), 0, "no booking call");
    sg_json_destroy(doc);
    cr_expect_eq(effects_of("/payment/refund"), 1);
    cr_expect_eq(effects_of("/inventory/release"), 1);
}
