/* sg_otel: trace context parsing and printing, ids, the sampler, what the
 * otel.* keys refuse, that an empty endpoint starts nothing, and the bytes
 * of a post in both encodings (a loopback receiver of one request). */
#define _GNU_SOURCE /* memmem, strcasestr */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sagad/sg_config.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_otel.h"

static char errstr[512];

Test(otel, a_traceparent_round_trips)
{
    static const char tp[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    sg_trace_id_t trace;
    uint64_t span;
    unsigned flags;
    char out[64];

    cr_assert_eq(sg_otel_parse_traceparent(tp, &trace, &span, &flags), 0);
    cr_expect_eq(span, 0x00f067aa0ba902b7ULL);
    cr_expect_eq(flags, 1);
    sg_otel_traceparent(out, sizeof(out), &trace, span, true);
    cr_expect_str_eq(out, tp);
    sg_otel_traceparent(out, sizeof(out), &trace, 0x1234, false);
    cr_expect_str_eq(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000001234-00");
}

Test(otel, a_traceparent_that_is_not_w3c_is_refused)
{
    static const char *const bad[] = {
        NULL,
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "01x4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
    };
    sg_trace_id_t trace;
    uint64_t span;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_eq(sg_otel_parse_traceparent(bad[i], &trace, &span, NULL), -1, "%s",
                     bad[i] ? bad[i] : "NULL");
}

/* A span's id is computed again by whoever ends it: the same text gives
 * the same id in every process, and different texts differ. */
Test(otel, ids_are_a_stable_function_of_their_text)
{
    cr_expect_eq(sg_otel_id64("attempt|s-1|g1|0|f|1"), sg_otel_id64("attempt|s-1|g1|0|f|1"));
    cr_expect_neq(sg_otel_id64("attempt|s-1|g1|0|f|1"), sg_otel_id64("attempt|s-1|g1|0|f|2"));
    cr_expect_neq(sg_otel_id64(""), 0);
    /* Pinned: a change of the hash would split the spans of sagas that
     * run across an upgrade into two trees. */
    cr_expect_eq(sg_otel_id64("saga|x"), 0xf300d1d3fed028d2ULL);
}

static sg_config_t *otel_config(const char *const *kv)
{
    sg_config_t *cfg = sg_config_new();

    for (; kv && kv[0]; kv += 2)
        cr_assert_eq(sg_config_set(cfg, kv[0], kv[1], "test", errstr, sizeof(errstr)), 0, "%s",
                     errstr);
    return cfg;
}

Test(otel, an_empty_endpoint_starts_nothing)
{
    sg_config_t *cfg = otel_config(NULL);
    sg_otel_t *o = (sg_otel_t *)1;
    sg_trace_id_t trace = {{1}};

    cr_assert_eq(sg_otel_start(cfg, "test", &o, errstr, sizeof(errstr)), 0);
    cr_expect_null(o, "no exporter, no thread");
    cr_expect_not(sg_otel_sampled(NULL, &trace), "nothing is sampled with tracing off");
    sg_otel_submit(NULL, sg_span_new(&trace, 1, 0, "x", SG_SPAN_INTERNAL, 0, 1)); /* freed */
    sg_otel_stop(NULL);
    sg_config_destroy(cfg);
}

Test(otel, bad_values_are_refused_naming_the_key_and_rule)
{
    static const char *const cases[][3] = {
        {"otel.endpoint", "collector:4318", "otel.endpoint: must be an http:// or https:// URL"},
        {"otel.headers", "Authorization", "otel.headers: must be a comma-separated list"},
        {"otel.resource_attributes", "=x", "otel.resource_attributes: must be a comma-separated"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *kv[] = {"otel.endpoint", "http://127.0.0.1:1", cases[i][0], cases[i][1], NULL};
        sg_config_t *cfg = otel_config(kv);
        sg_otel_t *o = NULL;

        errstr[0] = '\0';
        cr_expect_eq(sg_otel_start(cfg, "test", &o, errstr, sizeof(errstr)), -1, "%s", cases[i][0]);
        cr_expect_null(o);
        cr_expect(strstr(errstr, cases[i][2]), "%s: %s", cases[i][0], errstr);
        sg_config_destroy(cfg);
    }
}

Test(otel, the_sampler_ratio_is_a_number_from_0_to_1)
{
    sg_config_t *cfg = sg_config_new();

    cr_expect_eq(sg_config_ratio(cfg, "otel.traces_sampler_arg"), 1.0);
    cr_expect_eq(sg_config_set(cfg, "otel.traces_sampler_arg", "0.25", "t", errstr, sizeof(errstr)),
                 0);
    cr_expect_eq(sg_config_ratio(cfg, "otel.traces_sampler_arg"), 0.25);
    cr_expect_eq(
        sg_config_set(cfg, "otel.traces_sampler_arg", "1.5", "env X", errstr, sizeof(errstr)), -1);
    cr_expect(strstr(errstr, "otel.traces_sampler_arg") &&
                  strstr(errstr, "must be a number from 0 to 1"),
              "%s", errstr);
    sg_config_destroy(cfg);
}

/* Ratio 0 keeps no trace, 1 every one; between, by the trace id, so every
 * worker keeps or drops the same sagas. */
Test(otel, the_sampler_follows_the_ratio_by_trace_id)
{
    const char *none[] = {"otel.endpoint", "http://127.0.0.1:1", "otel.traces_sampler_arg", "0",
                          NULL};
    const char *half[] = {"otel.endpoint", "http://127.0.0.1:1", "otel.traces_sampler_arg", "0.5",
                          NULL};
    sg_config_t *c0 = otel_config(none), *c5 = otel_config(half);
    sg_otel_t *o0 = NULL, *o5 = NULL;
    int kept0 = 0, kept5 = 0;

    sg_metrics_init(SG_METRICS_WORKER);
    cr_assert_eq(sg_otel_start(c0, "t", &o0, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_assert_eq(sg_otel_start(c5, "t", &o5, errstr, sizeof(errstr)), 0, "%s", errstr);
    for (int i = 0; i < 1000; i++) {
        char text[32];
        uint64_t lo;
        sg_trace_id_t t = {{0}};
        snprintf(text, sizeof(text), "t%d", i);
        lo = sg_otel_id64(text);
        for (int b = 0; b < 8; b++)
            t.b[8 + b] = (uint8_t)(lo >> (56 - 8 * b));
        kept0 += sg_otel_sampled(o0, &t);
        kept5 += sg_otel_sampled(o5, &t);
        cr_assert_eq(sg_otel_sampled(o5, &t), sg_otel_sampled(o5, &t));
    }
    cr_expect_eq(kept0, 0);
    cr_expect(kept5 > 400 && kept5 < 600, "%d of 1000 kept at 0.5", kept5);
    sg_otel_stop(o0);
    sg_otel_stop(o5);
    sg_config_destroy(c0);
    sg_config_destroy(c5);
}

/* A full queue refuses spans at once and counts them; it says so, so the
 * worker can skip building spans that would be dropped. */
Test(otel, a_full_queue_drops_and_counts_and_says_so)
{
    const char *kv[] = {"otel.endpoint",
                        "http://127.0.0.1:1",
                        "otel.max_queue_size",
                        "2",
                        "otel.max_export_batch_size",
                        "100",
                        "otel.schedule_delay_ms",
                        "600000",
                        NULL};
    sg_config_t *cfg = otel_config(kv);
    sg_otel_t *o = NULL;
    sg_trace_id_t t = {{1}};

    sg_metrics_init(SG_METRICS_WORKER);
    cr_assert_eq(sg_otel_start(cfg, "t", &o, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_expect_not(sg_otel_full(o));
    for (int i = 0; i < 3; i++)
        sg_otel_submit(o, sg_span_new(&t, (uint64_t)i + 1, 0, "s", SG_SPAN_INTERNAL, 0, 1));
    cr_expect(sg_otel_full(o));
    cr_expect_eq(sg_metric_value(SG_M_SPANS_DROPPED, SG_LABELS("queue_full")), 1);
    sg_otel_dropped(o, "queue_full", 5);
    cr_expect_eq(sg_metric_value(SG_M_SPANS_DROPPED, SG_LABELS("queue_full")), 6);
    sg_otel_stop(o); /* one post of the 2 queued fails: export_failed */
    cr_expect_eq(sg_metric_value(SG_M_SPANS_DROPPED, SG_LABELS("export_failed")), 2);
    sg_config_destroy(cfg);
}

/* A platform's OTEL_* variables set the otel.* keys; SAGAD_* ones win; a
 * bad value is refused naming the key and the variable. */
Test(otel, the_sdk_variables_set_the_keys_below_sagad_ones)
{
    char *env1[] = {"OTEL_SERVICE_NAME=checkout-workers",
                    "OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318",
                    "OTEL_TRACES_SAMPLER_ARG=0.5",
                    "OTEL_EXPORTER_OTLP_PROTOCOL=http/json",
                    "OTEL_UNRELATED=x",
                    NULL};
    char *env2[] = {"OTEL_SERVICE_NAME=a", "SAGAD_OTEL_SERVICE_NAME=b", NULL};
    char *env3[] = {"OTEL_TRACES_SAMPLER_ARG=2", NULL};
    /* OTLP over gRPC is not spoken: said at start, not posted as HTTP. */
    char *env4[] = {"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", NULL};
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_load_env(cfg, env1, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_expect_str_eq(sg_config_str(cfg, "otel.service_name"), "checkout-workers");
    cr_expect_str_eq(sg_config_str(cfg, "otel.endpoint"), "http://collector:4318");
    cr_expect_eq(sg_config_ratio(cfg, "otel.traces_sampler_arg"), 0.5);
    cr_expect_str_eq(sg_config_str(cfg, "otel.protocol"), "http/json");
    sg_config_destroy(cfg);
    cfg = sg_config_new();
    cr_expect_str_eq(sg_config_str(cfg, "otel.protocol"), "http/protobuf", "the default");
    cr_expect_eq(sg_config_load_env(cfg, env4, errstr, sizeof(errstr)), -1);
    cr_expect(strstr(errstr, "otel.protocol") && strstr(errstr, "http/protobuf|http/json"), "%s",
              errstr);
    sg_config_destroy(cfg);
    cfg = sg_config_new();
    cr_assert_eq(sg_config_load_env(cfg, env2, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_expect_str_eq(sg_config_str(cfg, "otel.service_name"), "b");
    sg_config_destroy(cfg);
    cfg = sg_config_new();
    cr_expect_eq(sg_config_load_env(cfg, env3, errstr, sizeof(errstr)), -1);
    cr_expect(strstr(errstr, "otel.traces_sampler_arg") &&
                  strstr(errstr, "OTEL_TRACES_SAMPLER_ARG"),
              "%s", errstr);
    sg_config_destroy(cfg);
}

/* ---- what goes over the wire ------------------------------------------------ */

/* A collector of one request on a loopback port: the request's head and
 * body, answered 200. */
typedef struct one_post_s {
    int fd, port;
    pthread_t thread;
    char head[2048];
    unsigned char body[8192];
    size_t body_len;
} one_post_t;

static void *one_post_main(void *arg)
{
    one_post_t *p = arg;
    int c = accept(p->fd, NULL, NULL);
    size_t got = 0, want = 0;
    char *end = NULL;
    char buf[sizeof(p->head) + sizeof(p->body)];

    if (c < 0)
        return NULL;
    while (got < sizeof(buf)) {
        ssize_t n = read(c, buf + got, sizeof(buf) - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (!end && (end = memmem(buf, got, "\r\n\r\n", 4))) {
            const char *cl = memmem(buf, (size_t)(end - buf), "Content-Length: ", 16);
            want = cl ? strtoul(cl + 16, NULL, 10) : 0;
            snprintf(p->head, sizeof(p->head), "%.*s", (int)(end - buf), buf);
        }
        if (end && got >= (size_t)(end + 4 - buf) + want)
            break;
    }
    if (end) {
        p->body_len = got - (size_t)(end + 4 - buf);
        memcpy(p->body, end + 4, p->body_len);
    }
    dprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    close(c);
    return NULL;
}

static void one_post_start(one_post_t *p)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);

    memset(p, 0, sizeof(*p));
    p->fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(p->fd >= 0 && bind(p->fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              listen(p->fd, 1) == 0 && getsockname(p->fd, (struct sockaddr *)&a, &alen) == 0);
    p->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&p->thread, NULL, one_post_main, p), 0);
}

/* The bytes of field `field` (length-delimited) of the message m, the
 * nth occurrence; NULL when absent.  A reader of the few wire types OTLP's
 * trace messages use. */
static const unsigned char *pb_field(const unsigned char *m, size_t n, unsigned field, int nth,
                                     size_t *len)
{
    const unsigned char *p = m, *end = m + n;

    while (p < end) {
        uint64_t tag = 0, v = 0;
        for (int s = 0; p < end; s += 7) {
            tag |= (uint64_t)(*p & 0x7f) << s;
            if (!(*p++ & 0x80))
                break;
        }
        switch (tag & 7) {
        case 0:
            while (p < end && (*p++ & 0x80))
                ;
            continue;
        case 1:
            p += 8;
            continue;
        case 5:
            p += 4;
            continue;
        case 2:
            for (int s = 0; p < end; s += 7) {
                v |= (uint64_t)(*p & 0x7f) << s;
                if (!(*p++ & 0x80))
                    break;
            }
            if (tag >> 3 == field && nth-- == 0) {
                *len = (size_t)v;
                return p + v <= end ? p : NULL;
            }
            p += v;
            continue;
        default:
            return NULL;
        }
    }
    return NULL;
}

/* The string value of the attribute key among a message's KeyValues (field
 * attrs_field), or the raw bytes of its AnyValue when not a string. */
static bool pb_attr(const unsigned char *m, size_t n, unsigned attrs_field, const char *key,
                    const unsigned char **val, size_t *vlen)
{
    size_t kvlen, klen, alen;
    const unsigned char *kv, *k, *any;

    for (int i = 0; (kv = pb_field(m, n, attrs_field, i, &kvlen)); i++) {
        if (!(k = pb_field(kv, kvlen, 1, 0, &klen)) || klen != strlen(key) ||
            memcmp(k, key, klen) != 0)
            continue;
        if (!(any = pb_field(kv, kvlen, 2, 0, &alen)))
            return false;
        if (!(*val = pb_field(any, alen, 1, 0, vlen))) {
            *val = any; /* not a string: the AnyValue itself */
            *vlen = alen;
        }
        return true;
    }
    return false;
}

static bool bytes_are(const unsigned char *p, size_t n, const void *want, size_t wn)
{
    return p && n == wn && memcmp(p, want, wn) == 0;
}

/* Whether the first field `field` of m holds exactly want. */
static bool field_is(const unsigned char *m, size_t n, unsigned field, const void *want, size_t wn)
{
    size_t len = 0;
    const unsigned char *p = m ? pb_field(m, n, field, 0, &len) : NULL;

    return bytes_are(p, len, want, wn);
}

/* One span posted as protobuf (the default): the fields opentelemetry-proto
 * numbers, read back with a decoder of its own; text that is not UTF-8 goes
 * out with U+FFFD in place of the bad byte. */
Test(otel, a_span_is_posted_as_otlp_protobuf)
{
    one_post_t srv;
    char ep[64];
    const char *kv[] = {"otel.endpoint", ep, "otel.service_name", "svc", NULL};
    sg_config_t *cfg;
    sg_otel_t *o = NULL;
    sg_trace_id_t t, lt = {{9, 9}};
    sg_span_t *s;
    const unsigned char *rs, *res, *ss, *sp, *v, *st;
    size_t rsn, resn, ssn, spn, vn, stn;
    static const unsigned char want_id[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    static const unsigned char want_int[] = {0x18, 0xc8, 0x01}; /* int_value 200 */

    for (int i = 0; i < 16; i++)
        t.b[i] = (uint8_t)(0xa0 + i);
    one_post_start(&srv);
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", srv.port);
    cfg = otel_config(kv);
    cr_assert_eq(sg_otel_start(cfg, "t", &o, errstr, sizeof(errstr)), 0, "%s", errstr);
    s = sg_span_new(&t, 0x0102030405060708ULL, 0x1112131415161718ULL, "attempt pay #1",
                    SG_SPAN_CLIENT, 1999, 2500);
    sg_span_str(s, "sagad.saga_id", "order-\xff-7");
    sg_span_int(s, "http.status", 200);
    sg_span_link(s, &lt, 42);
    sg_span_error(s, "tool.http.503");
    sg_otel_submit(o, s);
    sg_otel_stop(o); /* posts what is queued */
    pthread_join(srv.thread, NULL);
    close(srv.fd);
    sg_config_destroy(cfg);

    cr_expect(strstr(srv.head, "POST /v1/traces ") &&
                  strcasestr(srv.head, "Content-Type: application/x-protobuf"),
              "%s", srv.head);
    rs = pb_field(srv.body, srv.body_len, 1, 0, &rsn); /* resource_spans */
    cr_assert_not_null(rs, "no resource_spans in %zu bytes", srv.body_len);
    res = pb_field(rs, rsn, 1, 0, &resn);
    cr_assert_not_null(res);
    cr_expect(pb_attr(res, resn, 1, "service.name", &v, &vn) && bytes_are(v, vn, "svc", 3));
    ss = pb_field(rs, rsn, 2, 0, &ssn);
    cr_assert_not_null(ss);
    v = pb_field(ss, ssn, 1, 0, &vn); /* scope */
    cr_expect(field_is(v, vn, 1, "sagad", 5), "scope.name");
    sp = pb_field(ss, ssn, 2, 0, &spn);
    cr_assert_not_null(sp);
    cr_expect_null(pb_field(ss, ssn, 2, 1, &vn), "one span");
    cr_expect(field_is(sp, spn, 1, t.b, 16), "trace_id");
    cr_expect(field_is(sp, spn, 2, want_id, 8), "span_id, big-endian");
    v = pb_field(sp, spn, 4, 0, &vn);
    cr_expect(vn == 8 && v && v[0] == 0x11 && v[7] == 0x18, "parent_span_id");
    cr_expect(field_is(sp, spn, 5, "attempt pay #1", 14), "name");
    cr_expect(pb_attr(sp, spn, 9, "sagad.saga_id", &v, &vn) &&
                  bytes_are(v, vn, "order-\xef\xbf\xbd-7", 11),
              "the bad byte is U+FFFD");
    cr_expect(pb_attr(sp, spn, 9, "http.status", &v, &vn) &&
                  bytes_are(v, vn, want_int, sizeof(want_int)),
              "an integer attribute is AnyValue.int_value");
    v = pb_field(sp, spn, 13, 0, &vn); /* links[0] */
    cr_expect(field_is(v, vn, 1, lt.b, 16), "the link's trace");
    st = pb_field(sp, spn, 15, 0, &stn);
    cr_expect(field_is(st, stn, 2, "tool.http.503", 13), "status.message");
    cr_expect(st && stn >= 2 && st[stn - 2] == 0x18 && st[stn - 1] == 2,
              "status.code STATUS_CODE_ERROR");
    /* kind (6) and the times (7, 8: fixed64) right after the name */
    v = pb_field(sp, spn, 5, 0, &vn);
    cr_assert_not_null(v);
    v += vn;
    cr_expect(v[0] == 0x30 && v[1] == SG_SPAN_CLIENT, "kind");
    cr_expect(v[2] == 0x39 && v[3] == 0xe8 && v[4] == 0x03 && v[11] == 0x41 && v[12] == 0xd0 &&
                  v[13] == 0x07,
              "start 1999 and end 2500 ns cut to whole us (1000, 2000), as fixed64");
}

/* http/json: the same span in OTLP's JSON encoding. */
Test(otel, a_span_is_posted_as_otlp_json_when_asked)
{
    one_post_t srv;
    char ep[64], body[8200];
    const char *kv[] = {"otel.endpoint", ep, "otel.protocol", "http/json", NULL};
    sg_config_t *cfg;
    sg_otel_t *o = NULL;
    sg_trace_id_t t = {{0xab}};
    sg_span_t *s;

    one_post_start(&srv);
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", srv.port);
    cfg = otel_config(kv);
    cr_assert_eq(sg_otel_start(cfg, "t", &o, errstr, sizeof(errstr)), 0, "%s", errstr);
    s = sg_span_new(&t, 0x0102030405060708ULL, 0, "saga \"x\"", SG_SPAN_INTERNAL, 1000, 2500);
    sg_span_str(s, "k", "line\nbreak");
    sg_span_int(s, "n", -3);
    sg_otel_submit(o, s);
    sg_otel_stop(o);
    pthread_join(srv.thread, NULL);
    close(srv.fd);
    sg_config_destroy(cfg);

    snprintf(body, sizeof(body), "%.*s", (int)srv.body_len, (const char *)srv.body);
    cr_expect(strcasestr(srv.head, "Content-Type: application/json"), "%s", srv.head);
    cr_expect(strstr(body, "\"spanId\":\"0102030405060708\""), "%s", body);
    cr_expect(strstr(body, "\"name\":\"saga \\\"x\\\"\""), "%s", body);
    cr_expect(strstr(body, "{\"key\":\"k\",\"value\":{\"stringValue\":\"line\\nbreak\"}}"), "%s",
              body);
    cr_expect(strstr(body, "{\"key\":\"n\",\"value\":{\"intValue\":\"-3\"}}"), "%s", body);
    cr_expect(strstr(body, "\"startTimeUnixNano\":\"1000\",\"endTimeUnixNano\":\"2000\""),
              "whole us: %s", body);
    cr_expect_null(strstr(body, "parentSpanId"), "a root has no parent: %s", body);
}
