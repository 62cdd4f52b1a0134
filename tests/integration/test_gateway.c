/* sagad-gateway over real HTTP, in front of the real worker and relay
 * (issue 37): what a client relies on, each route's happy path and its
 * refusals.  Users: shop (submitter), agent (submitter and approver: it
 * may approve, never its own saga), ann (approver), oncall (operator),
 * viewer (reader), other (another submitter).  The gateway signs as the
 * keyring's principal "gateway" (delegate) for the user who asked. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_json.h"
#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"

TestSuite(gateway, .init = sgw_setup, .fini = sgw_teardown, .timeout = 180);

#define GATED_TOOLS                                                                                \
    "\"bank.charge\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "        \
    "\"reversible\", \"compensation\": \"ledger\", \"approval\": \"required\"}"

#define CHECKOUT                                                                                   \
    "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"             \
    " {\"name\": \"charge\", \"tool\": \"bank.charge\", \"args\": {\"amount\": 5000}},"            \
    " {\"name\": \"ship\", \"tool\": \"ledger\", \"args\": {\"n\": 2}}]"

static const char *const users[] = {"shop", "agent", "ann", "oncall", "viewer", "other"};
static const char *const roles[] = {"[\"submitter\"]", "[\"submitter\", \"approver\"]",
                                    "[\"approver\"]",  "[\"operator\"]",
                                    "[\"reader\"]",    "[\"submitter\"]"};

static sgw_gateway_t gw;

static const char *token_of(const char *user)
{
    for (size_t i = 0; i < sizeof(users) / sizeof(users[0]); i++)
        if (strcmp(users[i], user) == 0)
            return gw.token[i];
    cr_assert_fail("no user %s", user);
    return NULL;
}

/* The world, then the gateway (sgw_gateway_start) with more of its
 * settings (NULL-terminated "KEY=value", or NULL), over https when scheme
 * says. */
static void start_with(const char *scheme, const char *const *more)
{
    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_gateway_start(&gw, scheme, users, roles, sizeof(users) / sizeof(users[0]), more);
}

static void start(void)
{
    start_with("http", NULL);
}

/* A request as user (NULL: no token), with extra headers. */
static sgt_res_t call(const char *user, const char *method, const char *path, const char *body,
                      const char *extra_header)
{
    char url[512], auth[128];
    const char *headers[4] = {NULL};
    size_t n = 0;

    snprintf(url, sizeof(url), "%s%s", gw.base, path);
    if (user) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token_of(user));
        headers[n++] = auth;
    }
    if (body)
        headers[n++] = "Content-Type: application/json";
    if (extra_header)
        headers[n++] = extra_header;
    return sgt_request(method, url, headers, body);
}

static sg_json_t *json_of(const sgt_res_t *r)
{
    sg_json_t *doc = sg_json_parse(r->body, r->len, NULL, NULL);

    cr_assert_not_null(doc, "not JSON (status %ld): %s", r->status, r->body);
    return doc;
}

static void saga_body(char *out, size_t size, const char *saga_id, const char *steps)
{
    if (saga_id)
        snprintf(out, size,
                 "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"%s\", \"name\": \"gw\", "
                 "\"steps\": %s}",
                 saga_id, steps);
    else
        snprintf(out, size, "{\"v\": 1, \"type\": \"saga.start\", \"name\": \"gw\", \"steps\": %s}",
                 steps);
}

/* Waits (long poll) until the saga is in a state a client acts on. */
static sg_json_t *wait_saga(const char *user, const char *id)
{
    char path[256];
    sgt_res_t r;
    sg_json_t *doc;

    snprintf(path, sizeof(path), "/v1/sagas/%s/wait?timeout=30s", id);
    r = call(user, "GET", path, NULL, NULL);
    cr_assert_eq(r.status, 200, "wait: %ld %s", r.status, r.body);
    doc = json_of(&r);
    sgt_res_free(&r);
    return doc;
}

static long long ledger_calls(const char *key)
{
    return sgw_q_int("SELECT coalesce(sum(calls), 0) FROM builtin_ledger WHERE key = '%s'", key);
}

/* The tour of the README: a submitter's saga waits at its gate; the
 * submitter cannot approve it (four eyes, even holding the approver role),
 * another approver does, and the saga completes; who submitted and who
 * approved are recorded as the users, via the gateway. */
Test(gateway, submit_wait_and_approve_with_two_tokens_four_eyes_kept)
{
    char body[2048];
    sgt_res_t r;
    sg_json_t *doc;
    const sg_json_t *ev;

    start();
    saga_body(body, sizeof(body), "gw-1", CHECKOUT);
    r = call("agent", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 202, "submit: %ld %s", r.status, r.body);
    cr_assert_str_eq(sgt_res_header(&r, "Location"), "/v1/sagas/gw-1");
    sgt_res_free(&r);

    doc = wait_saga("agent", "gw-1");
    cr_assert_str_eq(sgw_jstr(doc, "status"), "awaiting_approval");
    cr_assert_str_eq(sgw_jstr(doc, "submitted_by"), "agent");
    cr_assert_not_null(strstr(sgw_jstr(doc, "agent_action"), "approver"));
    sg_json_destroy(doc);

    /* the approval inbox: ann sees it, agent (its submitter) does not */
    r = call("ann", "GET", "/v1/approvals", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert_not_null(strstr(r.body, "\"saga_id\":\"gw-1\""), "%s", r.body);
    sgt_res_free(&r);
    r = call("agent", "GET", "/v1/approvals", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert_null(strstr(r.body, "gw-1"), "its own saga in its inbox: %s", r.body);
    sgt_res_free(&r);

    /* four eyes: the submitter's approval is refused, nothing is sent */
    r = call("agent", "POST", "/v1/sagas/gw-1/steps/charge/approve", "{\"reason\": \"mine\"}",
             NULL);
    cr_assert_eq(r.status, 403, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "input.auth.self_approval"), "%s", r.body);
    sgt_res_free(&r);
    /* a reason is required */
    r = call("ann", "POST", "/v1/sagas/gw-1/steps/charge/approve", "{}", NULL);
    cr_assert_eq(r.status, 422, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    cr_assert_eq(ledger_calls("gw-1:1:f:g1"), 0, "the charge ran before any approval");

    r = call("ann", "POST", "/v1/sagas/gw-1/steps/charge/approve",
             "{\"reason\": \"known customer\"}", NULL);
    cr_assert_eq(r.status, 200, "approve: %ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "\"outcome\":\"accepted\""), "%s", r.body);
    sgt_res_free(&r);

    doc = wait_saga("agent", "gw-1");
    cr_assert_str_eq(sgw_jstr(doc, "status"), "ok");
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM saga_controls WHERE saga_id = 'gw-1' AND "
                           "principal = 'ann' AND outcome = 'accepted'"),
                 1);
    sg_json_destroy(doc);
    cr_assert_eq(ledger_calls("gw-1:1:f:g1"), 1, "the approved charge ran once");
    ev = sgw_event_wait("gw-1", "step.approved");
    cr_assert_str_eq(sgw_jstr(ev, "principal"), "ann");
    cr_assert_str_eq(sgw_jstr(ev, "via"), "gateway");
    ev = sgw_event_wait("gw-1", "saga.accepted");
    cr_assert_str_eq(sgw_jstr(ev, "submitted_by"), "agent");
    cr_assert_str_eq(sgw_jstr(ev, "submitted_via"), "gateway");
}

/* Every refusal with its status and a problem body that says why. */
Test(gateway, refusals_name_the_field_and_the_rule)
{
    char body[4096], *big;
    sgt_res_t r;
    sg_json_t *doc;
    const sg_json_t *errors;

    start();
    /* no token, a wrong one, a reader submitting, a foreign Origin */
    r = call(NULL, "GET", "/v1/tools", NULL, NULL);
    cr_assert_eq(r.status, 401);
    cr_assert_not_null(sgt_res_header(&r, "WWW-Authenticate"));
    cr_assert_str_eq(sgt_res_header(&r, "Content-Type"), "application/problem+json");
    sgt_res_free(&r);
    {
        char url[128];
        const char *h[] = {"Authorization: Bearer sgw_notatokenatall", NULL};
        snprintf(url, sizeof(url), "%s/v1/tools", gw.base);
        r = sgt_request("GET", url, h, NULL);
        cr_assert_eq(r.status, 401);
        sgt_res_free(&r);
    }
    r = call(NULL, "GET", "/v1/tools", NULL, "X-Forwarded-User: oncall");
    cr_assert_eq(r.status, 401, "an identity header from an untrusted peer: %ld", r.status);
    sgt_res_free(&r);
    saga_body(body, sizeof(body), "gw-r1", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    r = call("viewer", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 403, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("shop", "GET", "/v1/tools", NULL, "Origin: https://evil.example");
    cr_assert_eq(r.status, 403);
    sgt_res_free(&r);
    r = call("shop", "GET", "/v1/tools", NULL, "Origin: https://console.example");
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(sgt_res_header(&r, "Access-Control-Allow-Origin"), "https://console.example");
    cr_assert_null(strstr(r.body, "\"target\""), "a tool's target leaked: %s", r.body);
    sgt_res_free(&r);

    /* bad JSON: 400 at $ */
    r = call("shop", "POST", "/v1/sagas", "{\"v\": 1,", NULL);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "\"path\":\"$\""), "%s", r.body);
    sgt_res_free(&r);
    /* unknown tool: 422 with its path, nothing produced */
    saga_body(body, sizeof(body), "gw-r2", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 422, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    errors = sg_json_member(doc, "errors");
    cr_assert_eq(sg_json_array_size(errors), 1);
    cr_assert_str_eq(sgw_jstr(sg_json_array_get(errors, 0), "path"), "$.steps[0].tool");
    cr_assert_str_eq(sgw_jstr(doc, "code"), "input.schema.invalid");
    sg_json_destroy(doc);
    sgt_res_free(&r);
    /* dry_run: the verdict of a valid one, nothing sent */
    saga_body(body, sizeof(body), "gw-dry", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    r = call("shop", "POST", "/v1/sagas?dry_run=true", body, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "\"valid\":true"), "%s", r.body);
    sgt_res_free(&r);
    /* on_behalf_of names the authenticated user: no one else */
    snprintf(body, sizeof(body),
             "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"gw-r3\", \"name\": \"gw\", "
             "\"on_behalf_of\": \"ann\", \"steps\": [{\"name\": \"a\", \"tool\": \"noop\"}]}");
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 422, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "$.on_behalf_of"), "%s", r.body);
    sgt_res_free(&r);
    /* over 1 MiB: 413 before anything is parsed */
    big = malloc(1100000);
    memset(big, ' ', 1099999);
    big[0] = '{';
    big[1099998] = '}';
    big[1099999] = '\0';
    r = call("shop", "POST", "/v1/sagas", big, NULL);
    free(big);
    cr_assert_eq(r.status, 413, "%ld", r.status);
    sgt_res_free(&r);
    /* unknown saga, bad id, unknown route, wrong method */
    r = call("viewer", "GET", "/v1/sagas/no-such-saga", NULL, NULL);
    cr_assert_eq(r.status, 404);
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v1/sagas/bad%20id", NULL, NULL);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v2/sagas", NULL, NULL);
    cr_assert_eq(r.status, 404);
    sgt_res_free(&r);
    r = call("viewer", "DELETE", "/v1/sagas", NULL, NULL);
    cr_assert_eq(r.status, 405);
    cr_assert_str_eq(sgt_res_header(&r, "Allow"), "POST, GET, HEAD, OPTIONS");
    sgt_res_free(&r);
    r = call(NULL, "POST", "/healthz", NULL, NULL);
    cr_assert_eq(r.status, 405, "%ld", r.status);
    sgt_res_free(&r);
    /* a browser's preflight from an allowed origin, before any token */
    r = call(NULL, "OPTIONS", "/v1/sagas", NULL, "Origin: https://console.example");
    cr_assert_eq(r.status, 204, "%ld %s", r.status, r.body);
    cr_assert_str_eq(sgt_res_header(&r, "Access-Control-Allow-Origin"), "https://console.example");
    cr_assert_not_null(strstr(sgt_res_header(&r, "Access-Control-Allow-Headers"), "Authorization"));
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v1/errors/tool.http.503", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert_not_null(strstr(r.body, "\"retryable\":true"), "%s", r.body);
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v1/errors/not.a.code", NULL, NULL);
    cr_assert_eq(r.status, 404);
    sgt_res_free(&r);
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM sagas"), 0, "a refused submission started");
}

/* The same saga_id with the same body is the same saga (200); with another
 * body it is a conflict (409); Idempotency-Key makes the id for a client
 * that does not choose one, per user. */
Test(gateway, submission_is_idempotent_on_saga_id_and_idempotency_key)
{
    char body[2048], other[2048], first_id[64];
    sgt_res_t r;
    sg_json_t *doc;

    start();
    saga_body(body, sizeof(body), "gw-i1", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 202, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    sg_json_destroy(wait_saga("shop", "gw-i1"));
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 200, "the same again: %ld %s", r.status, r.body);
    sgt_res_free(&r);
    saga_body(other, sizeof(other), "gw-i1", "[{\"name\": \"b\", \"tool\": \"echo\"}]");
    r = call("shop", "POST", "/v1/sagas", other, NULL);
    cr_assert_eq(r.status, 409, "another body: %ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "input.saga.conflict"));
    sgt_res_free(&r);

    saga_body(body, sizeof(body), NULL, "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    r = call("shop", "POST", "/v1/sagas", body, "Idempotency-Key: order-7");
    cr_assert_eq(r.status, 202, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    snprintf(first_id, sizeof(first_id), "%s", sgw_jstr(doc, "saga_id"));
    sg_json_destroy(doc);
    sgt_res_free(&r);
    sg_json_destroy(wait_saga("shop", first_id));
    r = call("shop", "POST", "/v1/sagas", body, "Idempotency-Key: order-7");
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, first_id));
    sgt_res_free(&r);
    r = call("other", "POST", "/v1/sagas", body, "Idempotency-Key: order-7");
    cr_assert_eq(r.status, 202, "another user's key is another saga: %ld %s", r.status, r.body);
    cr_assert_null(strstr(r.body, first_id));
    sgt_res_free(&r);
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = '%s'", first_id), 1);
}

/* A submitter reads its own sagas and no one else's; a reader reads all. */
Test(gateway, a_submitter_reads_only_its_own_sagas)
{
    char body[2048];
    sgt_res_t r;

    start();
    saga_body(body, sizeof(body), "gw-own", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 202);
    sgt_res_free(&r);
    sg_json_destroy(wait_saga("shop", "gw-own"));
    r = call("other", "GET", "/v1/sagas/gw-own", NULL, NULL);
    cr_assert_eq(r.status, 404, "another submitter read it: %ld", r.status);
    sgt_res_free(&r);
    r = call("other", "GET", "/v1/sagas", NULL, NULL);
    cr_assert_eq(r.status, 200);
    cr_assert_null(strstr(r.body, "gw-own"), "%s", r.body);
    sgt_res_free(&r);
    /* another's saga id: a conflict, whether or not the body matches */
    r = call("other", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 409, "another's saga with the same body: %ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("other", "POST", "/v1/sagas/gw-own/cancel", "{\"reason\": \"x\"}", NULL);
    cr_assert_eq(r.status, 404, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v1/sagas/gw-own", NULL, NULL);
    cr_assert_eq(r.status, 200);
    {
        char inm[160], etag[64];
        snprintf(etag, sizeof(etag), "%s", sgt_res_header(&r, "ETag"));
        snprintf(inm, sizeof(inm), "If-None-Match: %s", etag);
        sgt_res_free(&r);
        r = call("viewer", "GET", "/v1/sagas/gw-own", NULL, inm);
        cr_assert_eq(r.status, 304, "an unchanged saga again: %ld", r.status);
        sgt_res_free(&r);
        snprintf(inm, sizeof(inm), "If-None-Match: \"0.0\", W/%s", etag);
        r = call("viewer", "GET", "/v1/sagas/gw-own", NULL, inm);
        cr_assert_eq(r.status, 304, "a weak tag in a list: %ld", r.status);
        sgt_res_free(&r);
    }
    r = call("viewer", "GET", "/v1/sagas?limit=10", NULL, NULL);
    cr_assert_not_null(strstr(r.body, "gw-own"), "%s", r.body);
    sgt_res_free(&r);
}

/* The event stream gives every event once, in seq order, ends after the
 * last one, and resumes after Last-Event-ID with nothing lost or
 * repeated; a long poll answers when the saga ends. */
Test(gateway, events_stream_resumes_after_last_event_id)
{
    char body[2048];
    sgt_res_t r;
    sg_json_t *doc;
    long long last = 0;
    int n = 0;

    start();
    saga_body(body, sizeof(body), "gw-ev",
              "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"b\", \"tool\": \"echo\", "
              "\"args\": {\"x\": 1}}]");
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 202);
    sgt_res_free(&r);
    doc = wait_saga("shop", "gw-ev");
    cr_assert_str_eq(sgw_jstr(doc, "status"), "ok");
    cr_assert_eq(sgw_jint(doc, "seq"), 4, "accepted, two steps, completed");
    sg_json_destroy(doc);

    r = call("shop", "GET", "/v1/sagas/gw-ev/events", NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_str_eq(sgt_res_header(&r, "Content-Type"), "text/event-stream");
    for (const char *p = r.body; (p = strstr(p, "\nid: ")) || (p == NULL && false);) {
        long long id = atoll(p + 5);
        cr_assert_eq(id, last + 1, "event %lld after %lld", id, last);
        last = id;
        n++;
        p += 5;
    }
    cr_assert_eq(n, 4, "%s", r.body);
    cr_assert_not_null(strstr(r.body, "event: saga.completed"));
    sgt_res_free(&r);

    /* A stream opened at once, before the relay has published anything
     * of the saga: every event still comes, the last one ends it. */
    saga_body(body, sizeof(body), "gw-ev2", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 202);
    sgt_res_free(&r);
    for (int i = 0;
         i < 100 && sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = 'gw-ev2'") == 0; i++)
        usleep(20000);
    r = call("shop", "GET", "/v1/sagas/gw-ev2/events", NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "id: 1\nevent: saga.accepted"), "%s", r.body);
    cr_assert_not_null(strstr(r.body, "event: saga.completed"), "%s", r.body);
    sgt_res_free(&r);

    r = call("shop", "GET", "/v1/sagas/gw-ev/events", NULL, "Last-Event-ID: 2");
    cr_assert_eq(r.status, 200);
    cr_assert_null(strstr(r.body, "id: 1\n"), "%s", r.body);
    cr_assert_null(strstr(r.body, "id: 2\n"), "%s", r.body);
    cr_assert_not_null(strstr(r.body, "id: 3\n"), "%s", r.body);
    cr_assert_not_null(strstr(r.body, "id: 4\n"), "%s", r.body);
    sgt_res_free(&r);
}

/* An operator cancels a saga held at its gate: it ends cancelled, the
 * reserved step undone.  Before that, callers without the right are
 * refused by the gateway and nothing reaches the worker: a reader may
 * not cancel, a submitter may not decide an approval. */
Test(gateway, an_operator_cancels_and_the_saga_is_compensated)
{
    char body[2048];
    sgt_res_t r;
    sg_json_t *doc;

    start();
    saga_body(body, sizeof(body), "gw-c", CHECKOUT);
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 202);
    sgt_res_free(&r);
    doc = wait_saga("shop", "gw-c");
    cr_assert_str_eq(sgw_jstr(doc, "status"), "awaiting_approval");
    sg_json_destroy(doc);
    r = call("viewer", "POST", "/v1/sagas/gw-c/cancel", "{\"reason\": \"x\"}", NULL);
    cr_assert_eq(r.status, 403, "a reader cancelling: %ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "cancelling needs the operator role"), "%s", r.body);
    sgt_res_free(&r);
    r = call("shop", "POST", "/v1/sagas/gw-c/steps/charge/approve", "{\"reason\": \"x\"}", NULL);
    cr_assert_eq(r.status, 403, "a submitter approving: %ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "needs the approver role"), "%s", r.body);
    sgt_res_free(&r);
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM saga_controls WHERE saga_id = 'gw-c'"), 0,
                 "a refused control reached the worker");
    r = call("oncall", "POST", "/v1/sagas/gw-c/cancel", "{\"reason\": \"customer withdrew\"}",
             NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    doc = wait_saga("shop", "gw-c");
    cr_assert_str_eq(sgw_jstr(doc, "status"), "cancelled");
    sg_json_destroy(doc);
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM saga_controls WHERE saga_id = 'gw-c' AND "
                           "principal = 'oncall' AND command = 'saga.cancel'"),
                 1);
    cr_assert_eq(ledger_calls("gw-c:1:f:g1"), 0, "the gated charge never ran");
}

/* TLS from gateway.tls_cert/tls_key, a trusted proxy's identity header
 * (believed from its address only), and a principal's rate limit. */
Test(gateway, tls_trusted_proxy_and_rate_limit)
{
    char cmd[1024], cert[200], key[200], env_cert[260], env_key[260];
    const char *more[] = {env_cert,
                          env_key,
                          "SAGAD_GATEWAY_TRUSTED_PROXIES=10.0.0.9, 127.0.0.1",
                          "SAGAD_GATEWAY_RATE_PER_S=1",
                          "SAGAD_GATEWAY_RATE_BURST=3",
                          NULL};
    sgt_res_t r;
    int limited = 0;

    snprintf(cert, sizeof(cert), "%s/cert.pem", sgw.dir);
    snprintf(key, sizeof(key), "%s/key.pem", sgw.dir);
    snprintf(cmd, sizeof(cmd),
             "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 2 "
             "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null",
             key, cert);
    cr_assert_eq(system(cmd), 0, "openssl could not make a certificate");
    snprintf(env_cert, sizeof(env_cert), "SAGAD_GATEWAY_TLS_CERT=%s", cert);
    snprintf(env_key, sizeof(env_key), "SAGAD_GATEWAY_TLS_KEY=%s", key);
    sgt_request_ca(cert);
    start_with("https", more);

    /* the proxy's header names ann: from 127.0.0.1 (trusted) it is ann */
    r = call(NULL, "GET", "/v1/approvals", NULL, "X-Forwarded-User: ann");
    cr_expect_eq(r.status, 200, "https, proxied: %ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call(NULL, "GET", "/v1/approvals", NULL, "X-Forwarded-User: nobody-known");
    cr_expect_eq(r.status, 401, "a proxied user not in the users file: %ld", r.status);
    sgt_res_free(&r);
    /* the bucket: 3 at once, then 1 a second, per principal */
    for (int i = 0; i < 6; i++) {
        r = call("viewer", "GET", "/v1/tools", NULL, NULL);
        if (r.status == 429) {
            limited++;
            cr_expect_not_null(sgt_res_header(&r, "Retry-After"));
        }
        sgt_res_free(&r);
    }
    cr_expect_geq(limited, 2, "6 requests at once, burst 3 at 1/s: %d refused", limited);
    r = call("shop", "GET", "/v1/tools", NULL, NULL);
    cr_expect_eq(r.status, 200, "another principal's bucket is its own: %ld", r.status);
    sgt_res_free(&r);
    sgt_request_ca(NULL);
}

/* Dead letters: a reader sees them grouped and one in full (its payload
 * marked untrusted); a dry-run replay says what it would do; discarding
 * is an operator's, recorded as the user, and a discarded entry is not
 * discarded twice. */
Test(gateway, dead_letters_grouped_shown_and_discarded)
{
    /* a producer that did not check: a step of no registered tool */
    static const char poison[] =
        "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"gw-dl\", \"id\": \"s\", "
        "\"name\": \"n\", \"steps\": [{\"name\": \"a\", \"tool\": \"no.such.tool\"}]}";
    char path[128], id[32];
    sgt_res_t r;
    sg_json_t *doc;
    const sg_json_t *groups;

    start();
    sgw_produce(sgw.topic_cmd, "gw-dl", poison, strlen(poison));
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters WHERE saga_id = 'gw-dl'");
    snprintf(id, sizeof(id), "%lld",
             sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = 'gw-dl'"));

    r = call("viewer", "GET", "/v1/dead-letters", NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    groups = sg_json_member(doc, "groups");
    cr_assert_eq(sg_json_array_size(groups), 1, "%s", r.body);
    cr_assert_str_eq(sgw_jstr(sg_json_array_get(groups, 0), "error_code"), "input.schema.invalid");
    cr_assert_eq(sgw_jint(sg_json_array_get(groups, 0), "pending"), 1);
    sg_json_destroy(doc);
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v1/dead-letters?view=entries&code=input.schema.*", NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "\"saga_id\":\"gw-dl\""), "%s", r.body);
    sgt_res_free(&r);
    snprintf(path, sizeof(path), "/v1/dead-letters/%s", id);
    r = call("viewer", "GET", path, NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "\"payload_untrusted\":true"), "%s", r.body);
    sgt_res_free(&r);
    r = call("shop", "GET", path, NULL, NULL);
    cr_assert_eq(r.status, 403, "a submitter reading the ledger: %ld", r.status);
    sgt_res_free(&r);

    snprintf(path, sizeof(path), "/v1/dead-letters/%s/replay?dry_run=true", id);
    r = call("viewer", "POST", path, "{}", NULL);
    cr_assert(r.status == 200 || r.status == 409, "dry run: %ld %s", r.status, r.body);
    sgt_res_free(&r);
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM replays"), 0, "a dry run replayed");

    snprintf(path, sizeof(path), "/v1/dead-letters/%s/discard", id);
    r = call("viewer", "POST", path, "{\"reason\": \"junk\"}", NULL);
    cr_assert_eq(r.status, 403, "a reader discarding: %ld", r.status);
    sgt_res_free(&r);
    r = call("oncall", "POST", path, "{}", NULL);
    cr_assert_eq(r.status, 422, "a discard without a reason: %ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("oncall", "POST", path, "{\"reason\": \"a broken test message\"}", NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_not_null(strstr(r.body, "\"outcome\":\"discarded\""), "%s", r.body);
    sgt_res_free(&r);
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE saga_id = 'gw-dl' AND "
                           "status = 'discarded' AND resolved_by = 'oncall'"),
                 1);
    r = call("oncall", "POST", path, "{\"reason\": \"again\"}", NULL);
    cr_assert_eq(r.status, 409, "discarded twice: %ld %s", r.status, r.body);
    sgt_res_free(&r);
}

/* The attempt of rows with step_name, phase and attempt number n; the
 * test fails when there is none. */
static const sg_json_t *attempt_of(const sg_json_t *rows, const char *step_name, const char *phase,
                                   long long n)
{
    for (size_t i = 0; i < sg_json_array_size(rows); i++) {
        const sg_json_t *a = sg_json_array_get(rows, i);
        if (strcmp(sgw_jstr(a, "step_name"), step_name) == 0 &&
            strcmp(sgw_jstr(a, "phase"), phase) == 0 && sgw_jint(a, "attempt") == n)
            return a;
    }
    cr_assert_fail("no %s attempt %lld of step %s", phase, n, step_name);
    return NULL;
}

/* GET /v1/sagas/{id}/attempts: every call of a saga as the attempts
 * table has it.  A transient failure then success: two attempts under one
 * key, the first with its code and class, the second ok after a wait; a
 * permanent failure with its agent_action; the compensation of the step
 * before it, phase compensate.  Pages by keyset; another submitter's
 * saga and an unknown one are 404, no token 401. */
Test(gateway, attempts_of_a_saga_with_keys_errors_and_compensation)
{
    static const char *const env[] = {"SAGAD_RETRY_BASE_MS=40", "SAGAD_RETRY_CAP_MS=60", NULL};
    char body[2048];
    const sg_json_t *rows, *a, *b;
    sgt_res_t r;
    sg_json_t *doc;

    sgw_pair_start(GATED_TOOLS, 1, env);
    sgw_gateway_start(&gw, "http", users, roles, sizeof(users) / sizeof(users[0]), NULL);
    saga_body(
        body, sizeof(body), "gw-att",
        "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
        " {\"name\": \"flaky\", \"tool\": \"fail\", \"args\": {\"class\": \"transient\", "
        "\"code\": \"tool.http.503\", \"times\": 1, \"message\": \"down, password=hunter22\"}},"
        " {\"name\": \"boom\", \"tool\": \"fail\"}]");
    r = call("shop", "POST", "/v1/sagas", body, NULL);
    cr_assert_eq(r.status, 202, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
    sgw_wait_status("gw-att", "compensated");

    r = call("shop", "GET", "/v1/sagas/gw-att/attempts", NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_assert_null(strstr(r.body, "hunter22"), "a secret in a message: %s", r.body);
    doc = json_of(&r);
    rows = sg_json_member(doc, "attempts");
    cr_assert_eq(sg_json_array_size(rows), 5, "reserve, flaky twice, boom, reserve undone: %s",
                 r.body);
    cr_assert_not_null(strstr(r.body, "\"truncated\":false"), "%s", r.body);
    a = attempt_of(rows, "flaky", "forward", 1);
    b = attempt_of(rows, "flaky", "forward", 2);
    cr_assert_str_eq(sgw_jstr(a, "status"), "error");
    cr_assert_str_eq(sgw_jstr(a, "error_code"), "tool.http.503");
    cr_assert_str_eq(sgw_jstr(a, "error_class"), "transient");
    cr_assert_str_neq(sgw_jstr(a, "agent_action"), "", "%s", r.body);
    cr_assert_str_eq(sgw_jstr(b, "status"), "ok");
    cr_assert_str_eq(sgw_jstr(b, "error_code"), "", "no code on a success");
    cr_assert_str_eq(sgw_jstr(a, "idempotency_key"), sgw_jstr(b, "idempotency_key"),
                     "a retry keeps its key");
    cr_assert_eq(sgw_jint(a, "generation"), 1);
    cr_assert(sgw_jint(b, "waited_ms") >= 0, "the retry's wait: %s", r.body);
    cr_assert(sgw_jint(a, "latency_ms") >= 0);
    cr_assert_str_neq(sgw_jstr(a, "started_at"), "");
    cr_assert_str_neq(sgw_jstr(a, "finished_at"), "");
    cr_assert_eq(sgw_jint(a, "waited_ms"), -1, "a first attempt waited for nothing");
    a = attempt_of(rows, "boom", "forward", 1);
    cr_assert_str_eq(sgw_jstr(a, "error_code"), "tool.builtin.fail");
    cr_assert_str_eq(sgw_jstr(a, "error_class"), "permanent");
    cr_assert_str_neq(sgw_jstr(a, "agent_action"), "", "%s", r.body);
    a = attempt_of(rows, "reserve", "forward", 1);
    b = attempt_of(rows, "reserve", "compensate", 1);
    cr_assert_str_eq(sgw_jstr(b, "status"), "ok");
    cr_assert_eq(sgw_jint(b, "step"), 0);
    cr_assert_str_neq(sgw_jstr(a, "idempotency_key"), sgw_jstr(b, "idempotency_key"),
                      "an undo has a key of its own");
    cr_assert_null(strstr(r.body, "\"args\""), "args are never answered: %s", r.body);
    sg_json_destroy(doc);
    sgt_res_free(&r);

    /* two a page: three pages, each after the last id of the one before */
    r = call("viewer", "GET", "/v1/sagas/gw-att/attempts?limit=2", NULL, NULL);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    cr_assert_eq(sg_json_array_size(sg_json_member(doc, "attempts")), 2);
    cr_assert_not_null(strstr(r.body, "\"truncated\":true"), "%s", r.body);
    cr_assert_not_null(strstr(sgt_res_header(&r, "Link"), "after="), "no Link");
    {
        char path[128];
        snprintf(path, sizeof(path), "/v1/sagas/gw-att/attempts?limit=3&after=%lld",
                 sgw_jint(doc, "next_after"));
        sg_json_destroy(doc);
        sgt_res_free(&r);
        r = call("viewer", "GET", path, NULL, NULL);
    }
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    doc = json_of(&r);
    cr_assert_eq(sg_json_array_size(sg_json_member(doc, "attempts")), 3, "%s", r.body);
    cr_assert_not_null(strstr(r.body, "\"truncated\":false"), "%s", r.body);
    cr_assert_str_eq(sgw_jstr(sg_json_array_get(sg_json_member(doc, "attempts"), 2), "phase"),
                     "compensate", "the undo is written last");
    sg_json_destroy(doc);
    sgt_res_free(&r);

    r = call("other", "GET", "/v1/sagas/gw-att/attempts", NULL, NULL);
    cr_assert_eq(r.status, 404, "another submitter read it: %ld %s", r.status, r.body);
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v1/sagas/gw-none/attempts", NULL, NULL);
    cr_assert_eq(r.status, 404, "%ld %s", r.status, r.body);
    cr_assert_str_eq(sgt_res_header(&r, "Content-Type"), "application/problem+json");
    sgt_res_free(&r);
    r = call(NULL, "GET", "/v1/sagas/gw-att/attempts", NULL, NULL);
    cr_assert_eq(r.status, 401, "no token: %ld", r.status);
    sgt_res_free(&r);
    r = call("viewer", "GET", "/v1/sagas/gw-att/attempts?limit=0", NULL, NULL);
    cr_assert_eq(r.status, 400, "%ld %s", r.status, r.body);
    sgt_res_free(&r);
}
