/* Tracing and the saga counters end to end: the real worker and relay
 * (tests/support/sg_worker_env.h) calling the real checkout-svc, exporting
 * spans to a real Jaeger (deploy/local/jaeger.sh, started by tests/run.sh:
 * SAGAD_TEST_JAEGER_OTLP and SAGAD_TEST_JAEGER_QUERY) and read back
 * through Jaeger's HTTP query API; the counters scraped from the worker's
 * /metrics. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "../support/sgt_prom.h"
#include "sagad/sg_json.h"

static sgt_bg_t svc;
static char base[128]; /* http://127.0.0.1:PORT of checkout-svc */
static int metrics_port;

static void trace_setup(void)
{
    sgw_setup();
    memset(&svc, 0, sizeof(svc));
}

static void trace_teardown(void)
{
    sgw_checkout_stop(&svc);
    sgt_bg_free(&svc);
    sgw_teardown();
}

TestSuite(trace, .init = trace_setup, .fini = trace_teardown, .timeout = 240);
TestSuite(counters, .init = trace_setup, .fini = trace_teardown, .timeout = 240);

/* ---- helpers ------------------------------------------------------------- */

static const char *jaeger(const char *which)
{
    const char *v = getenv(which);

    cr_assert(v && *v,
              "%s is not set: tests/run.sh starts Jaeger (deploy/local/jaeger.sh) and "
              "exports it",
              which);
    return v;
}

/* Tools on checkout-svc, retried after 10-20 ms. */
/* checkout-svc with faults, then the worker, and the relay unless
 * relay_later (the test starts it with start_relay()). */
static void start_world_as(const char *const *faults, const char *const *env, bool relay_later)
{
    static const char fmt[] =
        "\"co.reserve\": {\"adapter\": \"http\", \"target\": \"%s/inventory/reserve\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.release\", \"retry\": "
        "{\"max_attempts\": 5, \"base_ms\": 10, \"cap_ms\": 20}},"
        "\"co.release\": {\"adapter\": \"http\", \"target\": \"%s/inventory/release\", "
        "\"side_effect\": \"idempotent\"},"
        "\"co.charge\": {\"adapter\": \"http\", \"target\": \"%s/payment/charge\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"co.refund\"},"
        "\"co.refund\": {\"adapter\": \"http\", \"target\": \"%s/payment/refund\", "
        "\"side_effect\": \"idempotent\"},"
        "\"co.book\": {\"adapter\": \"http\", \"target\": \"%s/shipping/book\", "
        "\"side_effect\": \"idempotent\", \"breaker\": {\"failure_threshold\": 1, "
        "\"cooldown_ms\": 600000}, \"retry\": {\"max_attempts\": 1}}";
    char tools[2048], port_env[64];
    const char *all_env[16];
    size_t n = 0;

    sgw_checkout_start(&svc, faults, base, sizeof(base));
    snprintf(tools, sizeof(tools), fmt, base, base, base, base, base);
    /* The relay's endpoint on a port of its own; the worker's known. */
    all_env[n++] = "SAGAD_HTTP_PORT=0";
    for (; env && *env && n < 15; env++)
        all_env[n++] = *env;
    all_env[n] = NULL;
    sgw_world_start(tools, 1, all_env);
    if (!relay_later)
        sgw_start(&sgw.relay, "sagad-relay", NULL);
    metrics_port = sgt_free_port();
    snprintf(port_env, sizeof(port_env), "SAGAD_HTTP_PORT=%d", metrics_port);
    all_env[0] = port_env;
    all_env[1] = NULL;
    sgw_start(&sgw.worker, "sagad-worker", all_env);
    sgw_wait_assigned(1);
}

static void start_world(const char *const *faults, const char *const *env)
{
    start_world_as(faults, env, false);
}

/* GET url as JSON, or NULL when it did not answer 200. */
static sg_json_t *get_json(const char *url)
{
    long status = 0;
    char *body = sgt_http("GET", url, NULL, &status);
    sg_json_t *doc = NULL;

    if (status == 200 && body)
        doc = sg_json_parse(body, strlen(body), NULL, NULL);
    free(body);
    return doc;
}

/* The span's tags as JSON text (static buffer: one at a time). */
static const char *tags_text(const sg_json_t *span)
{
    static char buf[8192];
    char *text = sg_json_print(sg_json_member(span, "tags"));

    snprintf(buf, sizeof(buf), "%s", text ? text : "");
    free(text);
    return buf;
}

/* Is s a span of the relay: "publish <topic>", or "publish" for a
 * saga's rows to several topics? */
static bool relay_span(const sg_json_t *s)
{
    const char *name = sgw_jstr(s, "operationName");

    return strcmp(name, "publish") == 0 || strncmp(name, "publish ", 8) == 0;
}

/* The worker's spans of a trace, and whether the relay's span of the
 * saga's last event is there. */
static size_t worker_spans(const sg_json_t *trace, bool *last_published)
{
    const sg_json_t *spans = sg_json_member(trace, "spans");
    size_t n = 0;

    *last_published = false;
    for (size_t i = 0; i < sg_json_array_size(spans); i++) {
        const sg_json_t *s = sg_json_array_get(spans, i);
        if (!relay_span(s))
            n++;
        else if (strstr(tags_text(s), "saga.compensated"))
            *last_published = true;
    }
    return n;
}

/* Jaeger's trace (data[0]) once it holds want spans of the worker and the
 * relay's span of the last event; the caller destroys *doc.  Spans arrive
 * batched and asynchronously: polled, never timed. */
static const sg_json_t *jaeger_trace(const char *trace_id, size_t want, sg_json_t **doc)
{
    char url[512];

    snprintf(url, sizeof(url), "%s/api/traces/%s", jaeger("SAGAD_TEST_JAEGER_QUERY"), trace_id);
    for (int i = 0; i < (int)(SGW_WAIT_S * 5); i++) {
        const sg_json_t *t;
        bool last = false;
        *doc = get_json(url);
        t = *doc ? sg_json_array_get(sg_json_member(*doc, "data"), 0) : NULL;
        if (t && worker_spans(t, &last) >= want && last)
            return t;
        sg_json_destroy(*doc);
        *doc = NULL;
        usleep(200000);
    }
    cr_assert_fail("Jaeger has no trace %s of %zu worker spans and the relay's after %.0f s",
                   trace_id, want, SGW_WAIT_S);
    return NULL;
}

static const sg_json_t *span_named(const sg_json_t *trace, const char *name)
{
    const sg_json_t *spans = sg_json_member(trace, "spans");
    const sg_json_t *found = NULL;

    for (size_t i = 0; i < sg_json_array_size(spans); i++) {
        const sg_json_t *s = sg_json_array_get(spans, i);
        if (strcmp(sgw_jstr(s, "operationName"), name) == 0) {
            cr_assert_null(found, "two spans named \"%s\"", name);
            found = s;
        }
    }
    cr_assert_not_null(found, "no span named \"%s\"", name);
    return found;
}

/* The span's reference of refType (CHILD_OF: its parent; FOLLOWS_FROM: a
 * link), "" when none. */
static const char *span_ref(const sg_json_t *span, const char *type, const char **trace_id)
{
    const sg_json_t *refs = sg_json_member(span, "references");

    for (size_t i = 0; i < sg_json_array_size(refs); i++) {
        const sg_json_t *r = sg_json_array_get(refs, i);
        if (strcmp(sgw_jstr(r, "refType"), type) == 0) {
            if (trace_id)
                *trace_id = sgw_jstr(r, "traceID");
            return sgw_jstr(r, "spanID");
        }
    }
    return "";
}

static void expect_parent(const sg_json_t *trace, const char *child, const char *parent)
{
    const sg_json_t *c = span_named(trace, child), *p = span_named(trace, parent);

    cr_expect_str_eq(span_ref(c, "CHILD_OF", NULL), sgw_jstr(p, "spanID"),
                     "\"%s\" is a child of \"%s\"", child, parent);
}

/* A tag's value as text ("" when absent). */
static const char *tag(const sg_json_t *span, const char *key, char *out, size_t size)
{
    const sg_json_t *tags = sg_json_member(span, "tags");

    out[0] = '\0';
    for (size_t i = 0; i < sg_json_array_size(tags); i++) {
        const sg_json_t *t = sg_json_array_get(tags, i);
        if (strcmp(sgw_jstr(t, "key"), key) == 0) {
            const sg_json_t *v = sg_json_member(t, "value");
            const char *s = sg_json_string(v);
            char *text = s ? NULL : sg_json_print(v);
            snprintf(out, size, "%s", s ? s : text);
            free(text);
        }
    }
    return out;
}

static void expect_tag(const sg_json_t *span, const char *key, const char *want)
{
    char v[256];

    cr_expect_str_eq(tag(span, key, v, sizeof(v)), want, "span \"%s\": tag %s",
                     sgw_jstr(span, "operationName"), key);
}

static void scrape(sgt_prom_t *prom)
{
    char *text = NULL, err[512];

    cr_assert_eq(sgt_http_get(metrics_port, "/metrics", &text), 200, "GET /metrics");
    cr_assert_eq(sgt_prom_parse(text, prom, err, sizeof(err)), 0, "%s in:\n%s", err, text);
    free(text);
}

static double metric(const sgt_prom_t *p, const char *name, const char *labels)
{
    return sgt_prom_get(p, name, labels, 0);
}

/* A committed outcome's counters move when the worker reads its COMMIT's
 * answer, and gauges at its next housekeeping: the test may see the rows
 * first, so it scrapes until the series has the value (bounded). */
static void expect_metric(const char *name, const char *labels, double want)
{
    sgt_prom_t prom;
    double v = -1;

    for (int i = 0; i < (int)(SGW_WAIT_S * 10); i++) {
        memset(&prom, 0, sizeof(prom));
        scrape(&prom);
        v = metric(&prom, name, labels);
        sgt_prom_free(&prom);
        if (v == want)
            break;
        usleep(100000);
    }
    cr_expect_eq(v, want, "%s{%s} is %g, not %g", name, labels, v, want);
}

/* The producer's trace context the saga.start carries: a trace id of
 * this run (Jaeger keeps earlier runs' traces). */
#define PRODUCER_SPAN "00f067aa0ba902b7"
static char producer_trace[33];

static void submit_traced(const char *saga_id, const char *steps)
{
    char tp[64];
    const sg_kafka_header_t hdr = {"traceparent", tp, 55};
    char msg[2048];
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(producer_trace, sizeof(producer_trace), "4bf92f35%08x%08lx%08lx", (unsigned)getpid(),
             (unsigned long)ts.tv_sec & 0xffffffffUL, (unsigned long)ts.tv_nsec & 0xffffffffUL);
    snprintf(tp, sizeof(tp), "00-%s-%s-01", producer_trace, PRODUCER_SPAN);

    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
             "\"name\": \"checkout\", \"steps\": %s}",
             saga_id, saga_id, steps);
    sgw_produce_headers(sgw.topic_cmd, saga_id, msg, strlen(msg), &hdr, 1);
}

#define RESERVE_THEN_CHARGE                                                                        \
    "[{\"name\": \"reserve\", \"tool\": \"co.reserve\", \"args\": {\"sku\": \"B7\"}}, "            \
    "{\"name\": \"charge\", \"tool\": \"co.charge\", \"args\": {\"amount_cents\": 500}}]"

/* ---- the trace ----------------------------------------------------------- */

/* reserve: 503 once, then ok (a retry); charge: 400 (permanent), so the
 * saga compensates reserve.  One trace, the producer's, in Jaeger, whose
 * OTLP receiver decoded the worker's and the relay's posts in protocol
 * (otel.protocol; NULL: the default, protobuf). */
static void one_tree_in_jaeger(const char *protocol)
{
    static const char *const faults[] = {"--fault", "/inventory/reserve=503x1", "--fault",
                                         "/payment/charge=400", NULL};
    char otlp[256], svcname[160], proto[64], v[256], want_tp[128], a1_id[17], c1_id[17];
    const char *env[] = {otlp, svcname, "SAGAD_OTEL_SCHEDULE_DELAY_MS=100", protocol ? proto : NULL,
                         NULL};
    const sg_json_t *trace, *saga, *a1, *a2, *reqs, *spans, *link_trace = NULL, *retry;
    sg_json_t *doc, *rdoc;

    snprintf(otlp, sizeof(otlp), "SAGAD_OTEL_ENDPOINT=%s", jaeger("SAGAD_TEST_JAEGER_OTLP"));
    snprintf(svcname, sizeof(svcname), "SAGAD_OTEL_SERVICE_NAME=sagad-test-%s", sgw.db);
    snprintf(proto, sizeof(proto), "SAGAD_OTEL_PROTOCOL=%s", protocol ? protocol : "");
    /* The relay starts once checkout-svc has answered reserve's first
     * attempt (run chained from the saga.start's transaction) with its
     * 503: that step command's message cannot come back before the relay
     * publishes it, so the failed call parks and says so every time (which
     * step's chained failure was logged used to depend on whether its
     * message came back first; in a loaded ASan run neither did).  The
     * half second lets the worker take the answer; the relay still has to
     * start, connect and publish after it. */
    start_world_as(faults, env, true);
    submit_traced("trace-1", RESERVE_THEN_CHARGE);
    for (double deadline = sgt_now_s() + SGW_WAIT_S;; usleep(20000)) {
        sg_json_t *d;
        size_t n = sg_json_array_size(sgw_checkout_requests(base, "/inventory/reserve", &d));
        sg_json_destroy(d);
        if (n > 0)
            break;
        cr_assert_lt(sgt_now_s(), deadline, "reserve's first attempt never reached checkout-svc");
    }
    usleep(500000);
    sgw_start(&sgw.relay, "sagad-relay", NULL);
    sgw_wait_status("trace-1", "compensated");
    retry = sgw_event_wait("trace-1", "step.retry_scheduled");
    sgw_pair_stop(); /* the exporter posts what is queued before exit */

    /* saga, 2 steps, 3 attempts, the compensation, 1 compensate, 1 attempt */
    trace = jaeger_trace(producer_trace, 9, &doc);
    spans = sg_json_member(trace, "spans");
    {
        bool last;
        cr_expect_eq(worker_spans(trace, &last), 9, "exactly the worker's 9 spans of the saga");
    }
    saga = span_named(trace, "saga checkout");
    cr_expect_str_eq(span_ref(saga, "CHILD_OF", NULL), "", "the saga span is a root");
    cr_expect_str_eq(span_ref(saga, "FOLLOWS_FROM", (const char **)&link_trace), PRODUCER_SPAN,
                     "the saga span links the producer's span");
    expect_tag(saga, "sagad.outcome", "compensated");
    expect_tag(saga, "messaging.system", "kafka");
    expect_tag(saga, "messaging.destination.name", sgw.topic_cmd);
    expect_parent(trace, "step reserve", "saga checkout");
    expect_parent(trace, "step charge", "saga checkout");
    expect_parent(trace, "attempt co.reserve #1", "step reserve");
    expect_parent(trace, "attempt co.reserve #2", "step reserve");
    expect_parent(trace, "attempt co.charge #1", "step charge");
    expect_parent(trace, "compensation", "saga checkout");
    expect_parent(trace, "compensate reserve", "compensation");
    expect_parent(trace, "attempt co.release #1", "compensate reserve");
    {
        /* The compensation starts where the saga turned to compensating
         * (the charge's failure), before its one step, and the saga ends
         * with it (both taken from the saga row's status changes). */
        double cs = 0, cd = 0, rs = 0, ss = 0, sd = 0;
        cr_assert(
            sg_json_number(sg_json_member(span_named(trace, "compensation"), "startTime"), &cs) &&
            sg_json_number(sg_json_member(span_named(trace, "compensation"), "duration"), &cd) &&
            sg_json_number(sg_json_member(span_named(trace, "compensate reserve"), "startTime"),
                           &rs) &&
            sg_json_number(sg_json_member(saga, "startTime"), &ss) &&
            sg_json_number(sg_json_member(saga, "duration"), &sd));
        cr_expect(cs <= rs && cd > 0, "compensation from %.0f for %.0f us, its step from %.0f", cs,
                  cd, rs);
        cr_expect(cs + cd == ss + sd, "the compensation and the saga end together: %.0f, %.0f",
                  cs + cd, ss + sd);
    }

    a1 = span_named(trace, "attempt co.reserve #1");
    a2 = span_named(trace, "attempt co.reserve #2");
    snprintf(a1_id, sizeof(a1_id), "%s", sgw_jstr(a1, "spanID"));
    snprintf(c1_id, sizeof(c1_id), "%s",
             sgw_jstr(span_named(trace, "attempt co.charge #1"), "spanID"));
    expect_tag(a1, "sagad.tool", "co.reserve");
    expect_tag(a1, "sagad.adapter", "http");
    expect_tag(a1, "sagad.attempt_number", "1");
    expect_tag(a1, "sagad.error_code", "tool.http.503");
    expect_tag(a1, "sagad.error_class", "transient");
    expect_tag(a1, "http.request.method", "POST");
    expect_tag(a1, "server.address", "127.0.0.1");
    expect_tag(a1, "error", "true");
    expect_tag(a2, "sagad.attempt_number", "2");
    expect_tag(a2, "sagad.error_code", "");
    /* Full jitter may draw a delay of 0 (the retry is sent at once, no
     * timer): then the attempt has no delay to carry. */
    if (sgw_jint(retry, "delay_ms") > 0)
        cr_expect_eq(atoll(tag(a2, "sagad.delay_ms", v, sizeof(v))), sgw_jint(retry, "delay_ms"),
                     "the retry's delay is on the attempt after it: \"%s\"", v);
    else
        cr_expect_str_eq(tag(a2, "sagad.delay_ms", v, sizeof(v)), "",
                         "a retry sent at once has no delay");
    cr_expect_eq(strlen(tag(a1, "sagad.idempotency_key_hash", v, sizeof(v))), 16, "%s", v);
    cr_expect_str_eq(tag(a2, "sagad.idempotency_key_hash", v, sizeof(v)),
                     tag(a1, "sagad.idempotency_key_hash", v + 128, 128),
                     "one key, one hash, for both attempts");
    expect_tag(span_named(trace, "attempt co.charge #1"), "sagad.error_class", "permanent");
    expect_tag(span_named(trace, "step charge"), "sagad.outcome", "failed");
    expect_tag(span_named(trace, "compensate reserve"), "sagad.outcome", "compensated");
    /* The relay's publish of the saga's last event, under the saga: one
     * span for the saga's rows in a batch, "publish <topic>" with the
     * topic as its destination when they all go to one, else "publish"
     * with the topics in sagad.destinations; naming its message's type,
     * or its messages' count and types in order. */
    {
        int found = 0;
        for (size_t i = 0; i < sg_json_array_size(spans); i++) {
            const sg_json_t *s = sg_json_array_get(spans, i);
            char name[200];
            const char *types;
            size_t tl;
            snprintf(name, sizeof(name), "publish %s", sgw.topic_ev);
            if (!relay_span(s) || !strstr(tags_text(s), "saga.compensated"))
                continue;
            found++;
            cr_expect_str_eq(span_ref(s, "CHILD_OF", NULL), sgw_jstr(saga, "spanID"),
                             "the publish span is a child of the saga span");
            expect_tag(s, "messaging.system", "kafka");
            if (strcmp(sgw_jstr(s, "operationName"), name) == 0) {
                expect_tag(s, "messaging.destination.name", sgw.topic_ev);
            } else {
                cr_expect_str_eq(sgw_jstr(s, "operationName"), "publish");
                cr_expect_str_eq(tag(s, "messaging.destination.name", v, sizeof(v)), "",
                                 "no one destination for rows to several topics");
                cr_expect_neq(strstr(tag(s, "sagad.destinations", v, sizeof(v)), sgw.topic_ev),
                              NULL, "the topics named: %s", v);
            }
            types = tag(s, "sagad.message_types", v, sizeof(v));
            tl = strlen(types);
            if (!*types) {
                expect_tag(s, "sagad.message_type", "saga.compensated");
            } else {
                char count[32];
                long long n = 1;
                for (const char *c = types; *c; c++)
                    n += *c == ',';
                cr_expect(tl > 17 && strcmp(types + tl - 17, ",saga.compensated") == 0,
                          "the last of the saga's types: %s", types);
                cr_expect_eq(atoll(tag(s, "messaging.batch.message_count", count, sizeof(count))),
                             n, "the count names as many messages as the types: %s", types);
            }
        }
        cr_expect_eq(found, 1, "one publish span holds saga.compensated");
    }
    /* One relay span per saga per batch, whatever the topics: the rows of
     * a batch share their start and end, so no two relay spans of the
     * saga do (a transaction writes a step's event and the next command,
     * to two topics: these were two spans until 2026-11-29). */
    for (size_t i = 0; i < sg_json_array_size(spans); i++) {
        const sg_json_t *a = sg_json_array_get(spans, i);
        double sa = 0, da = 0;

        if (!relay_span(a))
            continue;
        cr_assert(sg_json_number(sg_json_member(a, "startTime"), &sa) &&
                  sg_json_number(sg_json_member(a, "duration"), &da));
        for (size_t j = i + 1; j < sg_json_array_size(spans); j++) {
            const sg_json_t *b = sg_json_array_get(spans, j);
            double sb = 0, db = 0;

            if (!relay_span(b) || !sg_json_number(sg_json_member(b, "startTime"), &sb) ||
                !sg_json_number(sg_json_member(b, "duration"), &db))
                continue;
            cr_expect(sa != sb || da != db, "two relay spans of one batch: %s and %s",
                      sgw_jstr(a, "operationName"), sgw_jstr(b, "operationName"));
        }
    }
    /* Never the key, the args or the results. */
    for (size_t i = 0; i < sg_json_array_size(spans); i++) {
        char *text = sg_json_print(sg_json_member(sg_json_array_get(spans, i), "tags"));
        cr_expect_null(strstr(text, "trace-1:0:f:g1"), "a span holds the key: %s", text);
        cr_expect_null(strstr(text, "B7"), "a span holds the args: %s", text);
        free(text);
    }

    /* The downstream got each attempt's own span as its parent. */
    reqs = sgw_checkout_requests(base, "/inventory/reserve", &rdoc);
    cr_assert_eq(sg_json_array_size(reqs), 2);
    snprintf(want_tp, sizeof(want_tp), "00-%s-%s-01", producer_trace, sgw_jstr(a1, "spanID"));
    cr_expect_str_eq(sgw_jstr(sg_json_member(sg_json_array_get(reqs, 0), "headers"), "traceparent"),
                     want_tp, "attempt 1's request carries attempt 1's span");
    snprintf(want_tp, sizeof(want_tp), "00-%s-%s-01", producer_trace, sgw_jstr(a2, "spanID"));
    cr_expect_str_eq(sgw_jstr(sg_json_member(sg_json_array_get(reqs, 1), "headers"), "traceparent"),
                     want_tp, "attempt 2's request carries attempt 2's span");
    sg_json_destroy(rdoc);
    sg_json_destroy(doc);

    /* A line about a command whose call ran (outside the decision) names
     * its attempt's span: a first attempt that ran chained and failed
     * (reserve's 503 or charge's 400; which of them ran chained depends on
     * whether its message came back first). */
    {
        int lines = 0;
        for (const char *line = strstr(sgw.worker.err, "chained call failed"); line;
             line = strstr(line + 1, "chained call failed")) {
            const char *eol = strchr(line, '\n');
            char *one = strndup(line, eol ? (size_t)(eol - line) : strlen(line)), want[64];
            const char *id = strstr(one, "\"step\":\"reserve\"")  ? a1_id
                             : strstr(one, "\"step\":\"charge\"") ? c1_id
                                                                  : "?";
            snprintf(want, sizeof(want), "\"span_id\":\"%s\"", id);
            cr_expect(strstr(one, "\"attempt\":1") && strstr(one, want),
                      "the chained call's line names its attempt's span %s: %s", want, one);
            free(one);
            lines++;
        }
        cr_expect_gt(lines, 0, "a chained first attempt failed (reserve's 503, charge's 400)");
    }
    /* Every log line of the saga's decisions names its trace. */
    snprintf(want_tp, sizeof(want_tp), "\"trace_id\":\"%s\"", producer_trace);
    cr_expect(strstr(sgw.worker.err, want_tp), "no log line names the trace: %s",
              sgt_bg_tail(&sgw.worker));
    snprintf(want_tp, sizeof(want_tp), "\"protocol\":\"%s\"",
             protocol ? protocol : "http/protobuf");
    cr_expect(strstr(sgw.worker.err, want_tp) && strstr(sgw.relay.err, want_tp),
              "the worker and the relay did not say they export in %s", want_tp);
}

Test(trace, a_saga_that_retries_and_compensates_is_one_tree_in_jaeger)
{
    one_tree_in_jaeger(NULL);
}

Test(trace, the_same_tree_reaches_jaeger_in_otlp_json)
{
    one_tree_in_jaeger("http/json");
}

/* The collector is down (nothing listens at the endpoint) and the queue
 * is small: the sagas still finish, and the spans are dropped and counted,
 * both the failed posts and the overflow. */
Test(trace, a_collector_that_is_down_drops_spans_and_counts_them)
{
    char otlp[128];
    const char *env[] = {otlp,
                         "SAGAD_OTEL_SCHEDULE_DELAY_MS=50",
                         "SAGAD_OTEL_TIMEOUT_MS=200",
                         "SAGAD_OTEL_MAX_QUEUE_SIZE=4",
                         "SAGAD_OTEL_MAX_EXPORT_BATCH_SIZE=2",
                         NULL};
    sgt_prom_t prom;
    char id[32];

    snprintf(otlp, sizeof(otlp), "SAGAD_OTEL_ENDPOINT=http://127.0.0.1:%d", sgt_free_port());
    start_world(NULL, env);
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof(id), "down-%d", i);
        sgw_submit(id, "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"b\", \"tool\": "
                       "\"noop\"}]");
    }
    sgw_wait_int(20, "SELECT count(*) FROM sagas WHERE status = 'completed'");
    expect_metric("sagad_sagas_finished_total", "status=\"completed\"", 20);
    for (int i = 0;; i++) {
        memset(&prom, 0, sizeof(prom));
        scrape(&prom);
        if ((metric(&prom, "sagad_spans_dropped_total", "reason=\"export_failed\"") > 0 &&
             metric(&prom, "sagad_spans_dropped_total", "reason=\"queue_full\"") > 0) ||
            i == (int)(SGW_WAIT_S * 10))
            break;
        sgt_prom_free(&prom);
        usleep(100000);
    }
    cr_expect_gt(metric(&prom, "sagad_spans_dropped_total", "reason=\"export_failed\""), 0,
                 "failed posts are counted");
    cr_expect_gt(metric(&prom, "sagad_spans_dropped_total", "reason=\"queue_full\""), 0,
                 "20 sagas' spans overflow a queue of 4 while the collector is down");
    cr_expect_eq(metric(&prom, "sagad_spans_exported_total", ""), 0);
    sgt_prom_free(&prom);
    sgw_pair_stop();
    cr_expect(strstr(sgw.worker.err, "trace export failed"), "the failure is logged once: %s",
              sgt_bg_tail(&sgw.worker));
}

/* ---- the counters -------------------------------------------------------- */

/* Tracing off.  count-1 as above: a 503 retried, a 400 that compensates;
 * count-2: co.book answers 503, has one attempt and a breaker that one
 * failure opens, so its step is dead-lettered and its circuit is open. */
Test(counters, errors_step_outcomes_retries_compensations_dead_letters_and_circuits)
{
    static const char *const faults[] = {
        "--fault", "/inventory/reserve=503x1", "--fault", "/payment/charge=400",
        "--fault", "/shipping/book=503",       NULL};
    start_world(faults, NULL);
    submit_traced("count-1", RESERVE_THEN_CHARGE);
    sgw_wait_status("count-1", "compensated");
    sgw_submit("count-2", "[{\"name\": \"book\", \"tool\": \"co.book\"}]");
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters WHERE saga_id = 'count-2'");
    sgw_wait_int(1, "SELECT count(*) FROM sagas WHERE saga_id = 'count-2' AND status IN "
                    "('completed', 'compensated', 'failed')");
    expect_metric("sagad_errors_total", "error_code=\"tool.http.503\",class=\"transient\"", 2);
    expect_metric("sagad_errors_total", "error_code=\"tool.http.400\",class=\"permanent\"", 1);
    expect_metric("sagad_retries_scheduled_total", "error_code=\"tool.http.503\"", 1);
    expect_metric("sagad_saga_steps_finished_total",
                  "saga=\"checkout\",step=\"reserve\",outcome=\"succeeded\"", 1);
    expect_metric("sagad_saga_steps_finished_total",
                  "saga=\"checkout\",step=\"charge\",outcome=\"failed\"", 1);
    expect_metric("sagad_saga_steps_finished_total",
                  "saga=\"checkout\",step=\"reserve\",outcome=\"compensated\"", 1);
    expect_metric("sagad_saga_steps_finished_total",
                  "saga=\"test\",step=\"book\",outcome=\"failed\"", 1);
    expect_metric("sagad_compensations_total", "outcome=\"ok\"", 1);
    expect_metric("sagad_dead_letters_total", "error_code=\"runtime.budget.attempts_exhausted\"",
                  1);
    expect_metric("sagad_circuit_state", "tool=\"co.book\"", 2);
    expect_metric("sagad_circuit_state", "tool=\"co.reserve\"", 0);
    /* A poison message with a secret in it: dead-lettered, and logged whole,
     * masked. */
    sgw_produce(sgw.topic_cmd, "junk", "not json password=hunter2xyz", 28);
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters WHERE error_code = 'input.json.malformed'");
    expect_metric("sagad_dead_letters_total", "error_code=\"input.json.malformed\"", 1);
    sgw_pair_stop();
    /* Every dead-letter write logs its envelope. */
    cr_expect(strstr(sgw.worker.err, "\"dead_letter\":{\"error_code\":\"runtime.budget.attempts_"
                                     "exhausted\",\"error_class\":\"poison\""),
              "count-2's dead letter is logged with its envelope: %s", sgt_bg_tail(&sgw.worker));
    cr_expect(strstr(sgw.worker.err,
                     "\"saga_id\":\"count-2\",\"saga_name\":\"test\",\"step_index\":0,"
                     "\"step\":\"book\",\"phase\":\"forward\",\"tool\":\"co.book\""),
              "%s", sgt_bg_tail(&sgw.worker));
    cr_expect(strstr(sgw.worker.err, "\"payload\":\"not json password=****\""),
              "the poison payload is logged, masked: %s", sgt_bg_tail(&sgw.worker));
    cr_expect_null(strstr(sgw.worker.err, "hunter2xyz"), "a secret reached the log");
}

/* metrics.saga_names: a saga not listed counts as saga="other",
 * step="other", so an unbounded set of names stays bounded. */
Test(counters, saga_names_outside_the_allow_list_count_as_other)
{
    const char *env[] = {"SAGAD_METRICS_SAGA_NAMES=checkout", NULL};
    start_world(NULL, env);
    sgw_submit("named-1", "[{\"name\": \"a\", \"tool\": \"noop\"}]"); /* name "test" */
    submit_traced("named-2", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    sgw_wait_status("named-1", "completed");
    sgw_wait_status("named-2", "completed");
    expect_metric("sagad_saga_steps_finished_total",
                  "saga=\"other\",step=\"other\",outcome=\"succeeded\"", 1);
    expect_metric("sagad_saga_steps_finished_total",
                  "saga=\"checkout\",step=\"a\",outcome=\"succeeded\"", 1);
    sgw_pair_stop();
}
