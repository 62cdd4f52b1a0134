/* The operator console on sagad-gateway over real HTTP, in front of the
 * real worker and relay (issue 38, docs/CONSOLE.md): its files and their
 * headers, sign-in and its cookie, and the rules a request the cookie
 * authenticated must keep (CSRF token, Origin, Sec-Fetch-Site,
 * console.read_only), while bearer-token clients go on as before.  Users:
 * shop (submitter), ann (approver), oncall (operator), viewer (reader). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_json.h"
#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"

TestSuite(console, .init = sgw_setup, .fini = sgw_teardown, .timeout = 180);

#define CSP                                                                                        \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

static const char *const users[] = {"shop", "ann", "oncall", "viewer"};
static const char *const roles[] = {"[\"submitter\"]", "[\"approver\"]", "[\"operator\"]",
                                    "[\"reader\"]"};

static sgw_gateway_t gw;

/* A signed-in browser: its cookie header and CSRF token. */
typedef struct browser_s {
    char cookie[160];
    char csrf[64];
} browser_t;

static const char *token_of(const char *user)
{
    for (size_t i = 0; i < sizeof(users) / sizeof(users[0]); i++)
        if (strcmp(users[i], user) == 0)
            return gw.token[i];
    cr_assert_fail("no user %s", user);
    return NULL;
}

/* The world, then the gateway (sgw_gateway_start) with more settings
 * ("KEY=value", NULL-ended). */
static void start_with(const char *const *more)
{
    sgw_pair_start(NULL, 1, NULL);
    sgw_gateway_start(&gw, "http", users, roles, sizeof(users) / sizeof(users[0]), more);
}

static void start(void)
{
    start_with(NULL);
}

/* A request with up to four extra headers (NULL-ended). */
static sgt_res_t call(const char *method, const char *path, const char *body,
                      const char *const *extra)
{
    char url[512];
    const char *headers[8] = {NULL};
    size_t n = 0;

    snprintf(url, sizeof(url), "%s%s", gw.base, path);
    if (body)
        headers[n++] = "Content-Type: application/json";
    for (; extra && *extra && n < 7; extra++)
        headers[n++] = *extra;
    return sgt_request(method, url, headers, body);
}

static sg_json_t *json_of(const sgt_res_t *r)
{
    sg_json_t *doc = sg_json_parse(r->body, r->len, NULL, NULL);

    cr_assert_not_null(doc, "not JSON (status %ld): %s", r->status, r->body);
    return doc;
}

/* The rule a 403 problem names. */
static void expect_refused(const sgt_res_t *r, const char *rule)
{
    sg_json_t *doc;

    cr_assert_eq(r->status, 403, "want 403 (%s), got %ld: %s", rule, r->status, r->body);
    cr_assert_str_eq(sgt_res_header(r, "Content-Type"), "application/problem+json");
    doc = json_of(r);
    cr_assert_str_eq(sgw_jstr(doc, "rule"), rule, "%s", r->body);
    sg_json_destroy(doc);
}

/* Signs user in as a browser does (JSON); the cookie and CSRF token. */
static void sign_in(const char *user, browser_t *b)
{
    char body[160];
    const char *set, *end;
    sgt_res_t r;
    sg_json_t *doc;

    snprintf(body, sizeof(body), "{\"token\": \"%s\"}", token_of(user));
    r = call("POST", "/console/login", body, NULL);
    cr_assert_eq(r.status, 200, "login: %ld %s", r.status, r.body);
    set = sgt_res_header(&r, "Set-Cookie");
    cr_assert_not_null(set, "login set no cookie: %s", r.headers);
    cr_assert(strncmp(set, "sagad_session=", 14) == 0, "%s", set);
    end = strchr(set, ';');
    cr_assert_not_null(end);
    snprintf(b->cookie, sizeof(b->cookie), "Cookie: %.*s", (int)(end - set), set);
    doc = json_of(&r);
    snprintf(b->csrf, sizeof(b->csrf), "X-CSRF-Token: %s", sgw_jstr(doc, "csrf_token"));
    sg_json_destroy(doc);
    sgt_res_free(&r);
}

/* A cancel of a saga that does not exist: a request that passed the
 * console's rules is answered 404 by the handler. */
#define NO_SAGA_CANCEL "/v1/sagas/console-no-such-saga/cancel"
#define REASON         "{\"reason\": \"console test\"}"

Test(console, files_are_served_with_the_csp_and_without_a_login)
{
    sgt_res_t r, again;
    char inm[128];

    start();
    r = call("GET", "/", NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_str_eq(sgt_res_header(&r, "Content-Type"), "text/html; charset=utf-8");
    cr_assert_str_eq(sgt_res_header(&r, "Content-Security-Policy"), CSP);
    cr_assert_str_eq(sgt_res_header(&r, "X-Content-Type-Options"), "nosniff");
    cr_assert_str_eq(sgt_res_header(&r, "Referrer-Policy"), "no-referrer");
    cr_assert_not_null(strstr(r.body, "<script type=\"module\" src=\"/assets/app.js\">"));
    /* No inline script or style for the CSP to refuse. */
    cr_assert_null(strstr(r.body, "<script>"));
    cr_assert_null(strstr(r.body, "style="));
    cr_assert_not_null(sgt_res_header(&r, "ETag"));
    snprintf(inm, sizeof(inm), "If-None-Match: %s", sgt_res_header(&r, "ETag"));
    again = call("GET", "/", NULL, (const char *const[]){inm, NULL});
    cr_assert_eq(again.status, 304, "%ld", again.status);
    sgt_res_free(&again);
    sgt_res_free(&r);

    r = call("GET", "/assets/app.js", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(sgt_res_header(&r, "Content-Type"), "text/javascript; charset=utf-8");
    cr_assert_str_eq(sgt_res_header(&r, "Content-Security-Policy"), CSP);
    sgt_res_free(&r);
    r = call("GET", "/assets/app.css", NULL, NULL);
    cr_assert_str_eq(sgt_res_header(&r, "Content-Type"), "text/css; charset=utf-8");
    sgt_res_free(&r);
    r = call("GET", "/assets/no-such.js", NULL, NULL);
    cr_assert_eq(r.status, 404);
    sgt_res_free(&r);
    /* The shell needs no login; the data does. */
    r = call("GET", "/v1/summary", NULL, NULL);
    cr_assert_eq(r.status, 401, "%ld", r.status);
    sgt_res_free(&r);
}

Test(console, login_sets_a_strict_cookie_and_the_session_reads_the_api)
{
    char body[160];
    const char *set;
    browser_t b;
    sgt_res_t r;
    sg_json_t *doc;

    start();
    r = call("POST", "/console/login", "{\"token\": \"sgw_not-a-token\"}", NULL);
    cr_assert_eq(r.status, 401, "%ld %s", r.status, r.body);
    cr_assert_null(sgt_res_header(&r, "Set-Cookie"));
    sgt_res_free(&r);

    snprintf(body, sizeof(body), "{\"token\": \"%s\"}", token_of("viewer"));
    r = call("POST", "/console/login", body, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    set = sgt_res_header(&r, "Set-Cookie");
    cr_assert_not_null(set);
    cr_assert_not_null(strstr(set, "; HttpOnly"), "%s", set);
    cr_assert_not_null(strstr(set, "; Secure"), "%s", set);
    cr_assert_not_null(strstr(set, "; SameSite=Strict"), "%s", set);
    cr_assert_not_null(strstr(set, "; Path=/"), "%s", set);
    /* The cookie holds a random id, never the token. */
    cr_assert_null(strstr(set, token_of("viewer")));
    doc = json_of(&r);
    cr_assert_str_eq(sgw_jstr(doc, "user"), "viewer");
    cr_assert_eq(strlen(sgw_jstr(doc, "csrf_token")), 43);
    sg_json_destroy(doc);
    sgt_res_free(&r);

    /* A plain form, without script: back to the console with the cookie. */
    {
        char url[128], form[128];
        const char *h[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
        snprintf(url, sizeof(url), "%s/console/login", gw.base);
        snprintf(form, sizeof(form), "token=%s", token_of("viewer"));
        r = sgt_request("POST", url, h, form);
        cr_assert_eq(r.status, 303, "%ld %s", r.status, r.body);
        cr_assert_str_eq(sgt_res_header(&r, "Location"), "/");
        cr_assert_not_null(strstr(sgt_res_header(&r, "Set-Cookie"), "; HttpOnly"));
        sgt_res_free(&r);
    }

    sign_in("viewer", &b);
    r = call("GET", "/console/session", NULL, (const char *const[]){b.cookie, NULL});
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    cr_assert_str_eq(sgw_jstr(doc, "csrf_token"), b.csrf + strlen("X-CSRF-Token: "));
    sg_json_destroy(doc);
    sgt_res_free(&r);
    /* The cookie alone reads the API, as the user. */
    r = call("GET", "/v1/summary", NULL, (const char *const[]){b.cookie, NULL});
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    cr_assert_not_null(sg_json_member(doc, "sagas_by_status"), "%s", r.body);
    cr_assert_not_null(sg_json_member(doc, "dead_letters_pending"), "%s", r.body);
    sg_json_destroy(doc);
    sgt_res_free(&r);
}

Test(console, a_cookie_post_needs_the_csrf_token)
{
    browser_t b;
    sgt_res_t r;

    start();
    sign_in("oncall", &b);
    r = call("POST", NO_SAGA_CANCEL, REASON, (const char *const[]){b.cookie, NULL});
    expect_refused(&r, "console.csrf");
    sgt_res_free(&r);
    r = call("POST", NO_SAGA_CANCEL, REASON,
             (const char *const[]){
                 b.cookie, "X-CSRF-Token: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", NULL});
    expect_refused(&r, "console.csrf");
    sgt_res_free(&r);
    /* With it, the request reaches its handler. */
    r = call("POST", NO_SAGA_CANCEL, REASON, (const char *const[]){b.cookie, b.csrf, NULL});
    cr_assert_eq(r.status, 404, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
}

Test(console, a_cookie_post_from_a_foreign_origin_or_site_is_refused)
{
    char same[128];
    browser_t b;
    sgt_res_t r;

    start();
    sign_in("oncall", &b);
    r = call("POST", NO_SAGA_CANCEL, REASON,
             (const char *const[]){b.cookie, b.csrf, "Origin: https://evil.example", NULL});
    cr_assert_eq(r.status, 403, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("POST", NO_SAGA_CANCEL, REASON,
             (const char *const[]){b.cookie, b.csrf, "Sec-Fetch-Site: cross-site", NULL});
    expect_refused(&r, "console.fetch_site");
    sgt_res_free(&r);
    r = call("POST", NO_SAGA_CANCEL, REASON,
             (const char *const[]){b.cookie, b.csrf, "Sec-Fetch-Site: same-site", NULL});
    expect_refused(&r, "console.fetch_site");
    sgt_res_free(&r);
    /* The console's own page: its origin, same-origin. */
    snprintf(same, sizeof(same), "Origin: %s", gw.base);
    r = call("POST", NO_SAGA_CANCEL, REASON,
             (const char *const[]){b.cookie, b.csrf, same, "Sec-Fetch-Site: same-origin", NULL});
    cr_assert_eq(r.status, 404, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    /* A sign-in posted by another site's page (login CSRF). */
    {
        char body[160];
        snprintf(body, sizeof(body), "{\"token\": \"%s\"}", token_of("oncall"));
        r = call("POST", "/console/login", body,
                 (const char *const[]){"Sec-Fetch-Site: cross-site", NULL});
        expect_refused(&r, "console.fetch_site");
        cr_assert_null(sgt_res_header(&r, "Set-Cookie"));
        sgt_res_free(&r);
    }
}

Test(console, read_only_refuses_a_console_post_and_says_so)
{
    const char *more[] = {"SAGAD_CONSOLE_READ_ONLY=true", NULL};
    char auth[128];
    browser_t b;
    sgt_res_t r;
    sg_json_t *doc;
    sg_err_t err;
    bool ro = false;

    start_with(more);
    sign_in("oncall", &b);
    r = call("GET", "/console/session", NULL, (const char *const[]){b.cookie, NULL});
    doc = json_of(&r);
    cr_assert_eq(sg_json_get_bool(doc, "$", "read_only", true, &ro, &err), 0, "%s", r.body);
    cr_assert(ro, "%s", r.body);
    sg_json_destroy(doc);
    sgt_res_free(&r);
    r = call("POST", NO_SAGA_CANCEL, REASON, (const char *const[]){b.cookie, b.csrf, NULL});
    expect_refused(&r, "console.read_only");
    sgt_res_free(&r);
    /* Reading goes on; a bearer-token client is not the console. */
    r = call("GET", "/v1/tools", NULL, (const char *const[]){b.cookie, NULL});
    cr_assert_eq(r.status, 200, "%ld", r.status);
    sgt_res_free(&r);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token_of("oncall"));
    r = call("POST", NO_SAGA_CANCEL, REASON, (const char *const[]){auth, NULL});
    cr_assert_eq(r.status, 404, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
}

Test(console, a_bearer_client_needs_no_csrf_and_the_summary_counts)
{
    char auth[128], body[512], path[256];
    sgt_res_t r;
    sg_json_t *doc;
    const sg_json_t *by;
    double done = 0;

    start();
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token_of("shop"));
    snprintf(body, sizeof(body),
             "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"console-%d\", \"name\": "
             "\"console\", \"steps\": [{\"name\": \"a\", \"tool\": \"noop\", \"args\": {}}]}",
             (int)getpid());
    r = call("POST", "/v1/sagas", body, (const char *const[]){auth, NULL});
    cr_assert_eq(r.status, 202, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    snprintf(path, sizeof(path), "/v1/sagas/console-%d/wait?timeout=30s", (int)getpid());
    r = call("GET", path, NULL, (const char *const[]){auth, NULL});
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    sgt_res_free(&r);

    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token_of("viewer"));
    r = call("GET", "/v1/summary?stuck_for=1m", NULL, (const char *const[]){auth, NULL});
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    by = sg_json_member(doc, "sagas_by_status");
    cr_assert(sg_json_number(sg_json_member(by, "completed"), &done) && done == 1, "%s", r.body);
    cr_assert_eq(sgw_jint(doc, "stuck_for_ms"), 60000, "%s", r.body);
    /* The relay's shards, as sagad-relay status has them. */
    cr_assert(sg_json_is_array(sg_json_member(doc, "relay")), "%s", r.body);
    cr_assert_geq(sg_json_array_size(sg_json_member(doc, "relay")), 1, "%s", r.body);
    /* The worker's partitions, as it committed them. */
    cr_assert_geq(sg_json_array_size(sg_json_member(doc, "partitions")), 1, "%s", r.body);
    sg_json_destroy(doc);
    sgt_res_free(&r);
    /* A submitter reads its own sagas only: not the counts of all. */
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token_of("shop"));
    r = call("GET", "/v1/summary", NULL, (const char *const[]){auth, NULL});
    cr_assert_eq(r.status, 403, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
}

Test(console, logout_ends_the_session)
{
    browser_t b;
    sgt_res_t r;

    start();
    sign_in("oncall", &b);
    /* Sign-out is a state change too: the CSRF token is needed. */
    r = call("POST", "/console/logout", NULL, (const char *const[]){b.cookie, NULL});
    expect_refused(&r, "console.csrf");
    sgt_res_free(&r);
    r = call("POST", "/console/logout", NULL, (const char *const[]){b.cookie, b.csrf, NULL});
    cr_assert_eq(r.status, 204, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(sgt_res_header(&r, "Set-Cookie"), "Max-Age=0"));
    sgt_res_free(&r);
    r = call("GET", "/console/session", NULL, (const char *const[]){b.cookie, NULL});
    cr_assert_eq(r.status, 401, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("GET", "/v1/tools", NULL, (const char *const[]){b.cookie, NULL});
    cr_assert_eq(r.status, 401, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
}

Test(console, a_trusted_proxy_signs_its_user_in)
{
    const char *more[] = {"SAGAD_GATEWAY_TRUSTED_PROXIES=127.0.0.1", NULL};
    sgt_res_t r;
    sg_json_t *doc;

    start_with(more);
    r = call("POST", "/console/login", NULL, (const char *const[]){"X-Forwarded-User: ann", NULL});
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_not_null(sgt_res_header(&r, "Set-Cookie"));
    doc = json_of(&r);
    cr_assert_str_eq(sgw_jstr(doc, "user"), "ann");
    sg_json_destroy(doc);
    sgt_res_free(&r);
    /* A user the proxy names but the users file does not know: none. */
    r = call("POST", "/console/login", NULL,
             (const char *const[]){"X-Forwarded-User: mallory", NULL});
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert_null(sgt_res_header(&r, "Set-Cookie"));
    sgt_res_free(&r);
}

Test(console, the_proxy_header_from_anyone_else_signs_nobody_in)
{
    sgt_res_t r;

    start();
    r = call("POST", "/console/login", NULL,
             (const char *const[]){"X-Forwarded-User: oncall", NULL});
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert_null(sgt_res_header(&r, "Set-Cookie"));
    sgt_res_free(&r);
}

Test(console, disabled_it_serves_nothing_and_takes_no_cookie)
{
    const char *more[] = {"SAGAD_CONSOLE_ENABLED=false", NULL};
    char body[160];
    sgt_res_t r;

    start_with(more);
    r = call("GET", "/", NULL, NULL);
    cr_assert_eq(r.status, 404, "%ld", r.status);
    cr_assert_null(sgt_res_header(&r, "Set-Cookie"));
    sgt_res_free(&r);
    r = call("GET", "/assets/app.js", NULL, NULL);
    cr_assert_eq(r.status, 404, "%ld", r.status);
    sgt_res_free(&r);
    snprintf(body, sizeof(body), "{\"token\": \"%s\"}", token_of("oncall"));
    r = call("POST", "/console/login", body, NULL);
    cr_assert_eq(r.status, 404, "%ld %s", r.status, r.body);
    cr_assert_null(sgt_res_header(&r, "Set-Cookie"));
    sgt_res_free(&r);
    /* A cookie of a session (from before a restart, or made up) is no
     * credential here. */
    r = call("GET", "/v1/tools", NULL,
             (const char *const[]){
                 "Cookie: sagad_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", NULL});
    cr_assert_eq(r.status, 401, "%ld", r.status);
    sgt_res_free(&r);
}

/* ---- what the workers tell the console: breakers, error rate, lag --------- */

/* A tool whose downstream refuses every connection (port 1: nothing
 * listens), with a breaker that opens after 2 failures and stays open for
 * 10 minutes. */
#define DOWN_TOOL                                                                                  \
    "\"down\": {\"adapter\": \"http\", \"target\": \"http://127.0.0.1:1/down\", \"side_effect\": " \
    "\"idempotent\", \"timeout_ms\": 2000, \"breaker\": {\"failure_threshold\": 2, "               \
    "\"cooldown_ms\": 600000}, \"retry\": {\"max_attempts\": 4, \"base_ms\": 10, \"cap_ms\": 20}}"

/* doc as text for a message, in a buffer of its own (the last 4 calls'). */
static const char *text_of(const sg_json_t *doc)
{
    static char buf[4][8192];
    static int next;
    char *text = sg_json_print(doc), *at = buf[next++ % 4];

    snprintf(at, sizeof(buf[0]), "%s", text ? text : "(null)");
    free(text);
    return at;
}

/* GET path as the viewer (a reader), answered 200; its JSON. */
static sg_json_t *viewer_get(const char *path)
{
    char auth[128];
    sgt_res_t r;
    sg_json_t *doc;

    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token_of("viewer"));
    r = call("GET", path, NULL, (const char *const[]){auth, NULL});
    cr_assert_eq(r.status, 200, "GET %s: %ld %s", path, r.status, r.body);
    doc = json_of(&r);
    sgt_res_free(&r);
    return doc;
}

/* The item of tools named name. */
static const sg_json_t *tool_item(const sg_json_t *tools, const char *name)
{
    const sg_json_t *items = sg_json_member(tools, "items");

    for (size_t i = 0; i < sg_json_array_size(items); i++)
        if (strcmp(sgw_jstr(sg_json_array_get(items, i), "name"), name) == 0)
            return sg_json_array_get(items, i);
    cr_assert_fail("no tool %s in GET /v1/tools", name);
    return NULL;
}

/* GET /v1/tools until down's breaker is in state (or absent, state NULL),
 * within SGW_WAIT_S; the last answer. */
static sg_json_t *wait_breaker(const char *state)
{
    sg_json_t *doc = NULL;

    for (double deadline = sgt_now_s() + SGW_WAIT_S;;) {
        const sg_json_t *b;
        sg_json_destroy(doc);
        doc = viewer_get("/v1/tools");
        b = sg_json_member(tool_item(doc, "down"), "breaker");
        if (state ? b && strcmp(sgw_jstr(b, "state"), state) == 0 : !b)
            return doc;
        cr_assert_lt(sgt_now_s(), deadline, "down's breaker never %s: %s", state ? state : "gone",
                     text_of(doc));
        usleep(200000);
    }
}

Test(console, tools_show_the_breaker_a_failing_downstream_opened_and_its_error_rate)
{
    const sg_json_t *down, *brk, *w, *recent, *noop;
    sg_json_t *doc;
    double rate = -1;
    long long calls, errors;

    sgw_pair_start(DOWN_TOOL, 1, NULL);
    sgw_gateway_start(&gw, "http", users, roles, sizeof(users) / sizeof(users[0]), NULL);
    doc = viewer_get("/v1/summary");
    cr_assert_eq(sgw_jint(doc, "breakers_open"), 0, "before any call");
    sg_json_destroy(doc);
    sgw_submit("brk-1", "[{\"name\": \"call\", \"tool\": \"down\"}]");

    /* Two refused connections open the circuit on the worker; it copies
     * the change to PostgreSQL within a second or so. */
    doc = wait_breaker("open");
    down = tool_item(doc, "down");
    brk = sg_json_member(down, "breaker");
    cr_assert_eq(sg_json_array_size(sg_json_member(brk, "workers")), 1, "one worker");
    w = sg_json_array_get(sg_json_member(brk, "workers"), 0);
    cr_expect_str_eq(sgw_jstr(w, "state"), "open");
    cr_expect_geq(sgw_jint(w, "failures"), 2, "%s", text_of(doc));
    cr_expect_not_null(sgw_jstr(w, "since"));
    /* Every finished call of down failed: refused, then failed fast. */
    recent = sg_json_member(down, "recent");
    cr_assert_not_null(recent, "%s", text_of(doc));
    calls = sgw_jint(recent, "calls");
    errors = sgw_jint(recent, "errors");
    cr_expect_geq(calls, 2, "%s", text_of(doc));
    cr_expect_eq(errors, calls, "%s", text_of(doc));
    cr_expect(sg_json_number(sg_json_member(recent, "error_rate"), &rate) && rate == 1.0,
              "error_rate %f", rate);
    cr_expect_eq(sgw_jint(recent, "window_s"), 300);
    /* A builtin tool has no breaker, and no call: no error rate. */
    noop = tool_item(doc, "noop");
    cr_expect_null(sg_json_member(noop, "breaker"));
    cr_expect_eq(sgw_jint(sg_json_member(noop, "recent"), "calls"), 0);
    cr_expect_null(sg_json_member(sg_json_member(noop, "recent"), "error_rate"));
    sg_json_destroy(doc);

    /* The Now page counts it; the worker's partitions have a lag (0: it
     * read everything), measured by their owner. */
    doc = viewer_get("/v1/summary");
    cr_expect_eq(sgw_jint(doc, "breakers_open"), 1, "%s", text_of(doc));
    sg_json_destroy(doc);
    for (double deadline = sgt_now_s() + SGW_WAIT_S;;) {
        const sg_json_t *parts, *p;
        double lag = -1;
        size_t known = 0;
        doc = viewer_get("/v1/summary");
        parts = sg_json_member(doc, "partitions");
        for (size_t i = 0; i < sg_json_array_size(parts); i++) {
            p = sg_json_array_get(parts, i);
            if (sg_json_number(sg_json_member(p, "lag"), &lag) && lag == 0 &&
                sgw_jint(p, "high_watermark") >= 0)
                known++;
        }
        if (known == sg_json_array_size(parts) && known >= 2) {
            sg_json_destroy(doc);
            break;
        }
        cr_assert_lt(sgt_now_s(), deadline, "no lag on every partition: %s", text_of(doc));
        sg_json_destroy(doc);
        usleep(200000);
    }

    /* A worker that stopped has no breaker; one that is gone (its rows
     * not written for over 30 s) does not keep a circuit open. */
    sgw_pair_stop();
    sg_json_destroy(wait_breaker(NULL));
    cr_assert_eq(sgw_q_int("WITH i AS (INSERT INTO tool_breakers (worker_id, tool, state, since, "
                           "failures, seen_at) VALUES ('gone-1', 'down', 'open', now() - interval "
                           "'1 hour', 9, now() - interval '31 seconds') RETURNING 1) "
                           "SELECT count(*) FROM i"),
                 1);
    doc = viewer_get("/v1/tools");
    cr_expect_null(sg_json_member(tool_item(doc, "down"), "breaker"), "%s", text_of(doc));
    sg_json_destroy(doc);
    doc = viewer_get("/v1/summary");
    cr_expect_eq(sgw_jint(doc, "breakers_open"), 0, "%s", text_of(doc));
    sg_json_destroy(doc);
}
