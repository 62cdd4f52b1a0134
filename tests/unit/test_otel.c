/* sg_otel: trace context parsing and printing, ids, the sampler, what the
 * otel.* keys refuse, and that an empty endpoint starts nothing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

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
