/* sg_metrics: the exposition is valid Prometheus text (checked by the
 * strict parser of tests/support), label cardinality stays bounded, and
 * held-back updates count only when committed. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../support/sgt_prom.h"
#include "sagad/sg_metrics.h"
#include "unit.h"

static char *render_parsed(sgt_prom_t *prom)
{
    char err[512];
    char *text = sg_metrics_render();

    cr_assert_eq(sgt_prom_parse(text, prom, err, sizeof(err)), 0, "%s in:\n%s", err, text);
    return text;
}

Test(metrics, exposition_is_valid_and_declares_every_metric_of_the_binary)
{
    size_t n;
    const sg_metric_def_t *cat = sg_metrics_catalog(&n);
    sgt_prom_t prom;
    char *text;

    sg_metrics_init(SG_METRICS_WORKER);
    sg_metric_inc(SG_M_STEPS, SG_LABELS("charge", "ok"));
    sg_metric_observe(SG_M_STEP_DURATION, SG_LABELS("charge"), 0.02);
    sg_metric_observe(SG_M_STEP_DURATION, SG_LABELS("charge"), 7);
    sg_metric_set(SG_M_CONSUMER_LAG, SG_LABELS("sagad.commands", "3"), 12);
    text = render_parsed(&prom);
    for (size_t i = 0; i < n; i++) {
        char help[160];
        snprintf(help, sizeof(help), "# TYPE %s ", cat[i].name);
        if (cat[i].served_by & SG_METRICS_WORKER)
            assert_contains(text, help);
        else
            assert_not_contains(text, help);
    }
    cr_assert_eq(sgt_prom_get(&prom, "sagad_steps_total", "tool=\"charge\",outcome=\"ok\"", -1), 1);
    cr_assert_eq(sgt_prom_get(&prom, "sagad_step_duration_seconds_count", "tool=\"charge\"", -1),
                 2);
    cr_assert_eq(sgt_prom_get(&prom, "sagad_step_duration_seconds_bucket",
                              "tool=\"charge\",le=\"0.025\"", -1),
                 1);
    cr_assert_eq(
        sgt_prom_get(&prom, "sagad_step_duration_seconds_bucket", "tool=\"charge\",le=\"5\"", -1),
        1);
    cr_assert_float_eq(
        sgt_prom_get(&prom, "sagad_step_duration_seconds_sum", "tool=\"charge\"", -1), 7.02, 1e-9);
    cr_assert_eq(
        sgt_prom_get(&prom, "sagad_consumer_lag", "topic=\"sagad.commands\",partition=\"3\"", -1),
        12);
    /* A metric without labels is there before its first update. */
    cr_assert_eq(sgt_prom_get(&prom, "sagad_sagas_started_total", "", -1), 0);
    sgt_prom_free(&prom);
    free(text);
}

Test(metrics, label_values_are_escaped)
{
    sgt_prom_t prom;
    char *text;

    sg_metrics_init(SG_METRICS_WORKER);
    sg_metric_inc(SG_M_DEAD_LETTERS, SG_LABELS("a\"b\\c\nd"));
    text = render_parsed(&prom);
    assert_contains(text, "error_code=\"a\\\"b\\\\c\\nd\"");
    cr_assert_eq(sgt_prom_get(&prom, "sagad_dead_letters_total", "error_code=\"a\"b\\c\nd\"", -1),
                 1);
    sgt_prom_free(&prom);
    free(text);
}

/* An unbounded stream of label values (e.g. codes from a misbehaving API)
 * cannot grow the exposition: past the bound they land in _other and the
 * overflow is counted. */
Test(metrics, label_cardinality_is_bounded_with_other_and_counted)
{
    size_t n;
    const sg_metric_def_t *cat = sg_metrics_catalog(&n);
    size_t bound = cat[SG_M_RETRIES_SCHEDULED].max_series;
    sgt_prom_t prom;
    size_t series = 0;
    char *text;

    sg_metrics_init(SG_METRICS_WORKER);
    for (size_t i = 0; i < bound + 50; i++) {
        char code[32];
        snprintf(code, sizeof(code), "tool.http.%zu", i);
        sg_metric_inc(SG_M_RETRIES_SCHEDULED, SG_LABELS(code));
    }
    text = render_parsed(&prom);
    for (size_t i = 0; i < prom.n; i++)
        series += strcmp(prom.v[i].name, "sagad_retries_scheduled_total") == 0;
    cr_assert_eq(series, bound + 1, "%zu series, expected %zu + _other", series, bound);
    cr_assert_eq(sgt_prom_get(&prom, "sagad_retries_scheduled_total", "error_code=\"_other\"", -1),
                 50);
    cr_assert_eq(sgt_prom_get(&prom, "sagad_metrics_label_overflow_total",
                              "metric=\"sagad_retries_scheduled_total\"", -1),
                 50);
    sgt_prom_free(&prom);
    free(text);
}

Test(metrics, batch_counts_only_when_committed)
{
    sg_metrics_batch_t b = {0};

    sg_metrics_init(SG_METRICS_WORKER);
    sg_metrics_batch_inc(&b, SG_M_SAGAS_FINISHED, SG_LABELS("completed"));
    sg_metrics_batch_observe(&b, SG_M_STEP_DURATION, SG_LABELS("noop"), 0.1);
    sg_metrics_batch_discard(&b); /* the transaction rolled back */
    cr_assert_eq(sg_metric_value(SG_M_SAGAS_FINISHED, SG_LABELS("completed")), 0);
    sg_metrics_batch_inc(&b, SG_M_SAGAS_FINISHED, SG_LABELS("completed"));
    sg_metrics_batch_commit(&b);
    sg_metrics_batch_commit(&b); /* nothing left to apply twice */
    cr_assert_eq(sg_metric_value(SG_M_SAGAS_FINISHED, SG_LABELS("completed")), 1);
    sg_metrics_batch_free(&b);
}

Test(metrics, hidden_gauge_leaves_the_exposition_until_set_again)
{
    char *text;

    sg_metrics_init(SG_METRICS_WORKER);
    sg_metric_set(SG_M_CONSUMER_LAG, SG_LABELS("sagad.internal", "1"), 5);
    sg_metric_set(SG_M_CONSUMER_LAG, SG_LABELS("sagad.internal", "2"), 6);
    sg_metric_hide(SG_M_CONSUMER_LAG, SG_LABELS("sagad.internal", "1"));
    text = sg_metrics_render();
    assert_not_contains(text, "partition=\"1\"");
    assert_contains(text, "sagad_consumer_lag{topic=\"sagad.internal\",partition=\"2\"} 6\n");
    free(text);
    sg_metric_set(SG_M_CONSUMER_LAG, SG_LABELS("sagad.internal", "1"), 0);
    text = sg_metrics_render();
    assert_contains(text, "sagad_consumer_lag{topic=\"sagad.internal\",partition=\"1\"} 0\n");
    free(text);
}

/* The parser the integration tests rely on must refuse what Prometheus
 * refuses, or a broken exposition would pass. */
Test(metrics, strict_parser_refuses_invalid_expositions)
{
    static const char *const bad[] = {
        "x 1\n",                                 /* no TYPE */
        "# TYPE x counter\nx 1",                 /* no final newline */
        "# TYPE x counter\nx{a=\"1} 1\n",        /* unterminated value */
        "# TYPE x counter\nx{a=\"\\q\"} 1\n",    /* bad escape */
        "# TYPE x counter\nx{1a=\"v\"} 1\n",     /* bad label name */
        "# TYPE x counter\nx one\n",             /* bad value */
        "# TYPE x counter\nx -1\n",              /* negative counter */
        "# TYPE x counter\nx 1\nx 2\n",          /* duplicate series */
        "# TYPE x gauge\n# TYPE x gauge\nx 1\n", /* second TYPE */
        "# comment\n",                           /* other comment */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
        "# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n", /* bucket without le */
    };
    static const char good[] = "# HELP h x\n# TYPE h histogram\nh_bucket{a=\"q\",le=\"1\"} 1\n"
                               "h_bucket{a=\"q\",le=\"+Inf\"} 2\nh_sum{a=\"q\"} 3.5\n"
                               "h_count{a=\"q\"} 2\n";
    sgt_prom_t prom;
    char err[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_expect_eq(sgt_prom_parse(bad[i], &prom, err, sizeof(err)), -1, "accepted: %s", bad[i]);
        sgt_prom_free(&prom);
    }
    cr_assert_eq(sgt_prom_parse(good, &prom, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(sgt_prom_get(&prom, "h_count", "a=\"q\"", -1), 2);
    sgt_prom_free(&prom);
}
