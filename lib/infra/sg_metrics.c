#include "sagad/sg_metrics.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"

#define W SG_METRICS_WORKER
#define R SG_METRICS_RELAY
#define G SG_METRICS_GATEWAY

/* Tool calls take milliseconds (builtins) to minutes (slow HTTP APIs). */
static const double duration_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                          1,     2.5,  5,     10,   30,  60,   300};
/* Commit to acknowledged publish: a few ms when idle, seconds under load
 * or behind a long transaction. */
/* An API request: a millisecond for a read, up to a minute for a long poll. */
static const double request_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,    1,     2.5,  10,    30,   60};
static const double publish_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                         1,     2.5,  5,     10,   30,  60};

#define NB(a) (sizeof(a) / sizeof(a[0]))

/* The catalog.  Label values are bounded sets (tool names of the registry,
 * error codes of schemas/error_codes.json, partitions); never saga ids. */
static const sg_metric_def_t catalog[SG_M__COUNT] = {
    [SG_M_BUILD_INFO] = {"sagad_build_info",
                         SG_METRIC_GAUGE,
                         {"version"},
                         NULL,
                         0,
                         4,
                         W | R | G,
                         "Always 1; the version label is the sagad version of this process."},
    [SG_M_PG_CONNECTED] = {"sagad_pg_connected",
                           SG_METRIC_GAUGE,
                           {NULL},
                           NULL,
                           0,
                           1,
                           W | R | G,
                           "1 while the PostgreSQL session is usable, 0 while it is lost."},
    [SG_M_KAFKA_CONNECTED] = {"sagad_kafka_connected",
                              SG_METRIC_GAUGE,
                              {NULL},
                              NULL,
                              0,
                              1,
                              W | R | G,
                              "1 when a Kafka broker answered the last metadata probe, else 0."},
    [SG_M_READY] = {"sagad_ready",
                    SG_METRIC_GAUGE,
                    {NULL},
                    NULL,
                    0,
                    1,
                    W | R | G,
                    "1 when /readyz answers 200 (the last readiness evaluation), else 0."},
    [SG_M_LABEL_OVERFLOW] = {"sagad_metrics_label_overflow_total",
                             SG_METRIC_COUNTER,
                             {"metric"},
                             NULL,
                             0,
                             SG_M__COUNT,
                             W | R | G,
                             "Updates counted under the label value _other because the metric "
                             "reached its bound of label combinations."},
    [SG_M_COMMANDS_CONSUMED] =
        {"sagad_commands_consumed_total",
         SG_METRIC_COUNTER,
         {"type", "outcome"},
         NULL,
         0,
         64,
         W,
         "Commands decided, by type (saga.start, step.execute, "
         "step.compensate, saga.release, step.approval_timeout, saga.cancel, saga.approve, "
         "saga.reject, undecodable) and outcome (started, rejected, called, ignored, failed, "
         "dead_lettered, awaiting_approval, approved, timed_out, cancelled, refused, stopped: a "
         "group member whose group stopped; forwarded: a control command read on the commands "
         "topic, decided when read again on the internal topic); counted once committed."},
    [SG_M_DUPLICATES_IGNORED] = {"sagad_duplicates_ignored_total",
                                 SG_METRIC_COUNTER,
                                 {"phase"},
                                 NULL,
                                 0,
                                 2,
                                 W,
                                 "Duplicate or stale messages acknowledged without effect: a "
                                 "command (phase=command) or a call outcome the saga moved past "
                                 "(phase=outcome)."},
    [SG_M_SAGAS_STARTED] = {"sagad_sagas_started_total",
                            SG_METRIC_COUNTER,
                            {NULL},
                            NULL,
                            0,
                            1,
                            W,
                            "Sagas accepted (saga.start stored)."},
    [SG_M_SAGAS_FINISHED] = {"sagad_sagas_finished_total",
                             SG_METRIC_COUNTER,
                             {"status"},
                             NULL,
                             0,
                             4,
                             W,
                             "Sagas that reached a terminal status: completed, compensated, "
                             "cancelled or failed (failed needs an operator)."},
    [SG_M_STEPS] = {"sagad_steps_total",
                    SG_METRIC_COUNTER,
                    {"tool", "outcome"},
                    NULL,
                    0,
                    1024,
                    W,
                    "Forward step calls finished, by tool and outcome: ok or the error class "
                    "(transient, throttled, timeout, permanent, poison)."},
    [SG_M_STEP_DURATION] = {"sagad_step_duration_seconds",
                            SG_METRIC_HISTOGRAM,
                            {"tool"},
                            duration_buckets,
                            NB(duration_buckets),
                            256,
                            W,
                            "Latency of tool calls (steps and compensations), by tool."},
    [SG_M_RETRIES_SCHEDULED] = {"sagad_retries_scheduled_total",
                                SG_METRIC_COUNTER,
                                {"error_code"},
                                NULL,
                                0,
                                64,
                                W,
                                "Retries scheduled (a timer row), by the error code that caused "
                                "them."},
    [SG_M_COMPENSATIONS] = {"sagad_compensations_total",
                            SG_METRIC_COUNTER,
                            {"outcome"},
                            NULL,
                            0,
                            3,
                            W,
                            "Compensation attempts by outcome: ok, retry (scheduled again) or "
                            "failed (exhausted or permanent: the saga fails)."},
    [SG_M_DEAD_LETTERS] = {"sagad_dead_letters_total",
                           SG_METRIC_COUNTER,
                           {"error_code"},
                           NULL,
                           0,
                           64,
                           W,
                           "Dead letters written, by error code."},
    [SG_M_STEPS_IN_FLIGHT] = {"sagad_steps_in_flight",
                              SG_METRIC_GAUGE,
                              {NULL},
                              NULL,
                              0,
                              1,
                              W,
                              "Tool calls running now."},
    [SG_M_COMMANDS_HELD] = {"sagad_commands_held",
                            SG_METRIC_GAUGE,
                            {NULL},
                            NULL,
                            0,
                            1,
                            W,
                            "Commands taken from Kafka and not finished (running, or queued "
                            "behind their saga); intake stops at worker.max_in_flight."},
    [SG_M_INTAKE_BYTES_HELD] = {"sagad_intake_bytes_held",
                                SG_METRIC_GAUGE,
                                {NULL},
                                NULL,
                                0,
                                1,
                                W,
                                "Bytes of the messages held, counted against "
                                "worker.intake_max_bytes: 4 times each message's size, and "
                                "while it is parsed its size again plus 64 bytes per JSON "
                                "value."},
    [SG_M_INTAKE_PAUSES] = {"sagad_intake_pauses_total",
                            SG_METRIC_COUNTER,
                            {NULL},
                            NULL,
                            0,
                            1,
                            W,
                            "Times the worker paused its partitions because intake was full "
                            "and no slot freed for 2 s (every call stuck); a busy worker does "
                            "not pause."},
    [SG_M_CHAINED] = {"sagad_chained_commands_total",
                      SG_METRIC_COUNTER,
                      {"stage"},
                      NULL,
                      0,
                      2,
                      W,
                      "Step commands run in the transaction that emitted them (stage=run), "
                      "and their messages acknowledged on arrival (stage=copy); see "
                      "worker.chain."},
    [SG_M_PARTITIONS_ASSIGNED] = {"sagad_partitions_assigned",
                                  SG_METRIC_GAUGE,
                                  {NULL},
                                  NULL,
                                  0,
                                  1,
                                  W,
                                  "Partitions of the commands and internal topics this worker "
                                  "owns."},
    [SG_M_CONSUMER_LAG] = {"sagad_consumer_lag",
                           SG_METRIC_GAUGE,
                           {"topic", "partition"},
                           NULL,
                           0,
                           1024,
                           W,
                           "Messages of an owned partition not finished yet: high watermark "
                           "minus the offset stored in PostgreSQL."},
    [SG_M_CIRCUIT_STATE] = {"sagad_circuit_state",
                            SG_METRIC_GAUGE,
                            {"tool"},
                            NULL,
                            0,
                            256,
                            W,
                            "Circuit breaker of a tool: 0 closed, 1 half-open (probing), 2 open "
                            "(calls fail fast with tool.circuit_open)."},
    [SG_M_ERRORS] = {"sagad_errors_total",
                     SG_METRIC_COUNTER,
                     {"error_code", "class"},
                     NULL,
                     0,
                     128,
                     W,
                     "Failed tool calls (steps and compensations), every attempt, by error code "
                     "and class."},
    [SG_M_SAGA_STEPS_FINISHED] =
        {"sagad_saga_steps_finished_total",
         SG_METRIC_COUNTER,
         {"saga", "step", "outcome"},
         NULL,
         0,
         1024,
         W,
         "Steps that reached an end, by saga name, step name and outcome "
         "(succeeded, failed, unknown, compensated, compensation_failed); names "
         "outside metrics.saga_names count as saga=\"other\", step=\"other\"."},
    [SG_M_SPANS_EXPORTED] = {"sagad_spans_exported_total",
                             SG_METRIC_COUNTER,
                             {NULL},
                             NULL,
                             0,
                             1,
                             W | R,
                             "Spans the trace collector accepted (otel.endpoint)."},
    [SG_M_SPANS_DROPPED] = {"sagad_spans_dropped_total",
                            SG_METRIC_COUNTER,
                            {"reason"},
                            NULL,
                            0,
                            3,
                            W | R,
                            "Spans not exported: queue_full (otel.max_queue_size reached), "
                            "export_failed (the collector did not take the batch in "
                            "otel.timeout_ms), shutdown (still queued at exit)."},
    [SG_M_RELAY_STATE] = {"sagad_relay_state",
                          SG_METRIC_GAUGE,
                          {"state"},
                          NULL,
                          0,
                          4,
                          R,
                          "1 for the relay's current state (connecting, standby, active, "
                          "backoff), 0 for the others."},
    [SG_M_OUTBOX_PUBLISHED] = {"sagad_outbox_published_total",
                               SG_METRIC_COUNTER,
                               {NULL},
                               NULL,
                               0,
                               1,
                               R,
                               "Outbox rows published and acknowledged (cursor moved)."},
    [SG_M_OUTBOX_QUARANTINED] = {"sagad_outbox_quarantined_total",
                                 SG_METRIC_COUNTER,
                                 {"error_code"},
                                 NULL,
                                 0,
                                 16,
                                 R,
                                 "Outbox rows Kafka refused for good (too large, invalid), moved "
                                 "to outbox_quarantine so the shard goes on, by Kafka error."},
    [SG_M_RELAY_KAFKA_TXNS] = {"sagad_relay_kafka_transactions_total",
                               SG_METRIC_COUNTER,
                               {"outcome"},
                               NULL,
                               0,
                               2,
                               R,
                               "relay.exactly_once: Kafka transactions of batches, committed or "
                               "aborted (a refusal, a failed delivery, a stop or a lost slot)."},
    [SG_M_RELAY_SKIPPED] = {"sagad_relay_skipped_total",
                            SG_METRIC_COUNTER,
                            {NULL},
                            NULL,
                            0,
                            1,
                            R,
                            "relay.exactly_once: messages PostgreSQL sent again after a restart "
                            "that the checkpoint showed already committed to Kafka, so skipped."},
    [SG_M_OUTBOX_BACKLOG] = {"sagad_outbox_backlog",
                             SG_METRIC_GAUGE,
                             {"shard"},
                             NULL,
                             0,
                             256,
                             R,
                             "Outbox rows waiting in the shard this relay holds."},
    [SG_M_OUTBOX_OLDEST_AGE] = {"sagad_outbox_oldest_age_seconds",
                                SG_METRIC_GAUGE,
                                {"shard"},
                                NULL,
                                0,
                                256,
                                R,
                                "Age of the next row to publish in the held shard (0 when "
                                "empty)."},
    [SG_M_OUTBOX_PUBLISH_LATENCY] = {"sagad_outbox_publish_latency_seconds",
                                     SG_METRIC_HISTOGRAM,
                                     {NULL},
                                     publish_buckets,
                                     NB(publish_buckets),
                                     1,
                                     R,
                                     "From a row's insert to its acknowledged publish."},
    [SG_M_OUTBOX_XMIN_BLOCKED] = {"sagad_outbox_xmin_blocked_seconds",
                                  SG_METRIC_GAUGE,
                                  {"shard"},
                                  NULL,
                                  0,
                                  256,
                                  R,
                                  "How long committed rows have waited behind a running "
                                  "transaction (the xmin horizon); 0 when none wait."},
    [SG_M_TIMERS_DUE] = {"sagad_timers_due",
                         SG_METRIC_GAUGE,
                         {NULL},
                         NULL,
                         0,
                         1,
                         R,
                         "Timer rows (retries) due and not fired yet."},
    [SG_M_TIMERS_FIRED] = {"sagad_timers_fired_total",
                           SG_METRIC_COUNTER,
                           {NULL},
                           NULL,
                           0,
                           1,
                           R,
                           "Timer rows moved into the outbox."},
    [SG_M_DLQ_PENDING] = {"sagad_dlq_pending",
                          SG_METRIC_GAUGE,
                          {NULL},
                          NULL,
                          0,
                          1,
                          R,
                          "Dead letters waiting for an operator (status pending), counted by "
                          "an active relay; the same figure in every active relay."},
    [SG_M_DLQ_OLDEST_AGE] = {"sagad_dlq_oldest_pending_age_seconds",
                             SG_METRIC_GAUGE,
                             {NULL},
                             NULL,
                             0,
                             1,
                             R,
                             "Age of the oldest pending dead letter (0 when none wait)."},
    [SG_M_RETENTION_REMOVED] = {"sagad_retention_removed_total",
                                SG_METRIC_COUNTER,
                                {"table"},
                                NULL,
                                0,
                                8,
                                R,
                                "Rows the janitor removed past their horizon, per table "
                                "(docs/OPERATIONS.md, Retention)."},
    [SG_M_RETENTION_OLDEST_AGE] = {"sagad_retention_oldest_age_seconds",
                                   SG_METRIC_GAUGE,
                                   {"table"},
                                   NULL,
                                   0,
                                   4,
                                   R,
                                   "Age of the oldest row the janitor judges by a horizon "
                                   "(sagas: finished, no dead letter; dead_letters: handled; "
                                   "builtin_ledger), 0 when none; set by the relay running the "
                                   "janitor."},
    [SG_M_GW_REQUESTS] = {"sagad_gateway_requests_total",
                          SG_METRIC_COUNTER,
                          {"route", "status"},
                          NULL,
                          0,
                          256,
                          G,
                          "API requests answered, by route (its template, e.g. "
                          "/v1/sagas/{id}) and HTTP status."},
    [SG_M_GW_REQUEST_DURATION] = {"sagad_gateway_request_seconds",
                                  SG_METRIC_HISTOGRAM,
                                  {"route"},
                                  request_buckets,
                                  NB(request_buckets),
                                  64,
                                  G,
                                  "Time from a request's arrival to its answer, by route (a "
                                  "long poll counts its wait)."},
    [SG_M_GW_RATE_LIMITED] = {"sagad_gateway_rate_limited_total",
                              SG_METRIC_COUNTER,
                              {NULL},
                              NULL,
                              0,
                              1,
                              G,
                              "Requests refused with 429 because their principal exceeded "
                              "gateway.rate_per_s (gateway.rate_burst)."},
};

typedef struct series_s {
    atomic_bool present; /* rendered (a hidden gauge is not) */
    char *labels[SG_METRIC_MAX_LABELS];
    _Atomic uint64_t count;    /* counter value */
    _Atomic double value;      /* gauge value, histogram sum */
    _Atomic uint64_t *buckets; /* histogram: per bucket, the last one past every bound */
} series_t;

typedef struct metric_s {
    bool enabled;
    size_t nlabels;
    series_t *series; /* max_series + 1 slots; the last is `_other` */
    atomic_size_t n;  /* slots published, the `_other` one not included */
    atomic_bool other_used;
    pthread_mutex_t mu;
} metric_t;

static metric_t metrics[SG_M__COUNT];
static pthread_once_t metrics_once = PTHREAD_ONCE_INIT;

const sg_metric_def_t *sg_metrics_catalog(size_t *count)
{
    *count = SG_M__COUNT;
    return catalog;
}

static void metrics_alloc(void)
{
    for (size_t i = 0; i < SG_M__COUNT; i++) {
        metric_t *m = &metrics[i];
        const sg_metric_def_t *d = &catalog[i];

        while (m->nlabels < SG_METRIC_MAX_LABELS && d->labels[m->nlabels])
            m->nlabels++;
        m->series = sg_xcalloc(d->max_series + 1, sizeof(*m->series));
        pthread_mutex_init(&m->mu, NULL);
    }
}

static series_t *series_get(sg_metric_id_t id, const char *const *labels);

static void series_fill(series_t *s, const sg_metric_def_t *d, size_t nlabels,
                        const char *const *labels)
{
    for (size_t i = 0; i < nlabels; i++) {
        s->labels[i] = sg_xstrdup(labels ? labels[i] : "_other");
    }
    if (d->type == SG_METRIC_HISTOGRAM) {
        s->buckets = sg_xcalloc(d->nbuckets + 1, sizeof(*s->buckets));
    }
}

void sg_metrics_init(unsigned served_by)
{
    pthread_once(&metrics_once, metrics_alloc);
    for (size_t i = 0; i < SG_M__COUNT; i++) {
        metrics[i].enabled = (catalog[i].served_by & served_by) != 0;
        /* A metric without labels has its one series from the start, so
         * it renders 0 before its first update. */
        if (metrics[i].enabled && metrics[i].nlabels == 0)
            atomic_store(&series_get((sg_metric_id_t)i, NULL)->present, true);
    }
}

static bool labels_eq(const series_t *s, size_t nlabels, const char *const *labels)
{
    for (size_t i = 0; i < nlabels; i++)
        if (strcmp(s->labels[i], labels[i]) != 0)
            return false;
    return true;
}

static series_t *scan(metric_t *m, size_t n, const char *const *labels)
{
    for (size_t i = 0; i < n; i++)
        if (labels_eq(&m->series[i], m->nlabels, labels))
            return &m->series[i];
    return NULL;
}

/* The series of labels, created on first use; past the bound, `_other`. */
static series_t *series_get(sg_metric_id_t id, const char *const *labels)
{
    metric_t *m;
    const sg_metric_def_t *d;
    series_t *s;
    size_t n;
    bool overflow = false;

    pthread_once(&metrics_once, metrics_alloc);
    m = &metrics[id];
    d = &catalog[id];
    for (size_t i = 0; i < m->nlabels; i++)
        if (!labels || !labels[i])
            abort(); /* a missing label value is a programming error */
    if ((s = scan(m, atomic_load_explicit(&m->n, memory_order_acquire), labels)))
        return s;
    pthread_mutex_lock(&m->mu);
    n = atomic_load(&m->n);
    if (!(s = scan(m, n, labels))) {
        if (n < d->max_series) {
            s = &m->series[n];
            series_fill(s, d, m->nlabels, labels);
            atomic_store_explicit(&m->n, n + 1, memory_order_release);
        } else {
            s = &m->series[d->max_series];
            if (!atomic_load(&m->other_used)) {
                series_fill(s, d, m->nlabels, NULL);
                atomic_store(&m->other_used, true);
            }
            overflow = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (overflow && id != SG_M_LABEL_OVERFLOW)
        sg_metric_inc(SG_M_LABEL_OVERFLOW, SG_LABELS(d->name));
    return s;
}

static void check_type(sg_metric_id_t id, sg_metric_type_t type)
{
    if ((unsigned)id >= SG_M__COUNT || catalog[id].type != type)
        abort();
}

void sg_metric_add(sg_metric_id_t id, const char *const *labels, uint64_t n)
{
    series_t *s;

    check_type(id, SG_METRIC_COUNTER);
    s = series_get(id, labels);
    atomic_fetch_add_explicit(&s->count, n, memory_order_relaxed);
    atomic_store(&s->present, true);
}

void sg_metric_set(sg_metric_id_t id, const char *const *labels, double v)
{
    series_t *s;

    check_type(id, SG_METRIC_GAUGE);
    s = series_get(id, labels);
    atomic_store(&s->value, v);
    atomic_store(&s->present, true);
}

static void atomic_add_double(_Atomic double *a, double v)
{
    double old = atomic_load(a);

    while (!atomic_compare_exchange_weak(a, &old, old + v))
        ;
}

static void hist_observe(const sg_metric_def_t *d, series_t *s, double v)
{
    size_t b = 0;

    while (b < d->nbuckets && v > d->buckets[b])
        b++;
    atomic_fetch_add_explicit(&s->buckets[b], 1, memory_order_relaxed);
    atomic_add_double(&s->value, v);
    atomic_store(&s->present, true);
}

void sg_metric_observe(sg_metric_id_t id, const char *const *labels, double v)
{
    check_type(id, SG_METRIC_HISTOGRAM);
    hist_observe(&catalog[id], series_get(id, labels), v);
}

void sg_metric_hide(sg_metric_id_t id, const char *const *labels)
{
    metric_t *m = &metrics[id];
    size_t n;

    check_type(id, SG_METRIC_GAUGE);
    pthread_once(&metrics_once, metrics_alloc);
    if (labels) {
        atomic_store(&series_get(id, labels)->present, false);
        return;
    }
    n = atomic_load_explicit(&m->n, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        atomic_store(&m->series[i].present, false);
    if (atomic_load(&m->other_used))
        atomic_store(&m->series[catalog[id].max_series].present, false);
}

double sg_metric_value(sg_metric_id_t id, const char *const *labels)
{
    metric_t *m = &metrics[id];
    series_t *s;

    pthread_once(&metrics_once, metrics_alloc);
    s = scan(m, atomic_load_explicit(&m->n, memory_order_acquire), labels);
    if (!s)
        return 0;
    return catalog[id].type == SG_METRIC_COUNTER ? (double)atomic_load(&s->count)
                                                 : atomic_load(&s->value);
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct buf_s {
    char *data;
    size_t len, cap;
} buf_t;

static void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        n = vsnprintf(b->data + b->len, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            abort();
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)n + 1;
        b->data = sg_xrealloc(b->data, b->cap);
    }
}

/* A label value in the exposition: backslash, quote and newline escaped. */
static void put_label_value(buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            buf_printf(b, "\\\\");
        else if (*v == '"')
            buf_printf(b, "\\\"");
        else if (*v == '\n')
            buf_printf(b, "\\n");
        else
            buf_printf(b, "%c", *v);
    }
}

/* {a="x",b="y"} plus an optional le; nothing when there are no labels. */
static void put_labels(buf_t *b, const metric_t *m, const sg_metric_def_t *d, const series_t *s,
                       const char *le)
{
    if (m->nlabels == 0 && !le)
        return;
    buf_printf(b, "{");
    for (size_t i = 0; i < m->nlabels; i++) {
        buf_printf(b, "%s%s=\"", i ? "," : "", d->labels[i]);
        put_label_value(b, s->labels[i]);
        buf_printf(b, "\"");
    }
    if (le)
        buf_printf(b, "%sle=\"%s\"", m->nlabels ? "," : "", le);
    buf_printf(b, "}");
}

static void put_double(buf_t *b, double v)
{
    if (isnan(v))
        buf_printf(b, "NaN");
    else if (isinf(v))
        buf_printf(b, v > 0 ? "+Inf" : "-Inf");
    else
        buf_printf(b, "%.17g", v);
}

static void render_histogram(buf_t *b, const metric_t *m, const sg_metric_def_t *d,
                             const series_t *s)
{
    uint64_t cum = 0;
    char le[32];

    /* +Inf and _count come from the same bucket reads, so they agree even
     * while other threads observe. */
    for (size_t i = 0; i <= d->nbuckets; i++) {
        cum += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
        if (i < d->nbuckets)
            snprintf(le, sizeof(le), "%g", d->buckets[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        buf_printf(b, "%s_bucket", d->name);
        put_labels(b, m, d, s, le);
        buf_printf(b, " %llu\n", (unsigned long long)cum);
    }
    buf_printf(b, "%s_sum", d->name);
    put_labels(b, m, d, s, NULL);
    buf_printf(b, " ");
    put_double(b, atomic_load(&s->value));
    buf_printf(b, "\n%s_count", d->name);
    put_labels(b, m, d, s, NULL);
    buf_printf(b, " %llu\n", (unsigned long long)cum);
}

static void render_series(buf_t *b, const metric_t *m, const sg_metric_def_t *d, const series_t *s)
{
    if (!atomic_load(&s->present))
        return;
    if (d->type == SG_METRIC_HISTOGRAM) {
        render_histogram(b, m, d, s);
        return;
    }
    buf_printf(b, "%s", d->name);
    put_labels(b, m, d, s, NULL);
    if (d->type == SG_METRIC_COUNTER) {
        buf_printf(b, " %llu\n", (unsigned long long)atomic_load(&s->count));
    } else {
        buf_printf(b, " ");
        put_double(b, atomic_load(&s->value));
        buf_printf(b, "\n");
    }
}

static const char *type_name(sg_metric_type_t t)
{
    return t == SG_METRIC_COUNTER ? "counter" : t == SG_METRIC_GAUGE ? "gauge" : "histogram";
}

char *sg_metrics_render(void)
{
    buf_t b = {sg_xmalloc(16384), 0, 16384};

    b.data[0] = '\0';
    pthread_once(&metrics_once, metrics_alloc);
    for (size_t i = 0; i < SG_M__COUNT; i++) {
        const metric_t *m = &metrics[i];
        const sg_metric_def_t *d = &catalog[i];
        size_t n = atomic_load_explicit(&m->n, memory_order_acquire);

        if (!m->enabled)
            continue;
        buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name,
                   type_name(d->type));
        for (size_t j = 0; j < n; j++)
            render_series(&b, m, d, &m->series[j]);
        if (atomic_load(&m->other_used))
            render_series(&b, m, d, &m->series[d->max_series]);
    }
    return b.data;
}

void sg_metrics_write_reference(FILE *out)
{
    fprintf(out,
            "# Metrics reference\n\n"
            "Generated from the metrics catalog in lib/infra/sg_metrics.c by `make docs`; do not "
            "edit.\n\n"
            "sagad-worker and sagad-relay serve these on `GET /metrics` (Prometheus text format "
            "0.0.4)\nof the endpoint set by `http.bind` and `http.port`. Label values are bounded "
            "sets (tool\nnames, error codes, partitions, shards; never saga ids): past a metric's "
            "bound, new\ncombinations are counted under the label value `_other` and in\n"
            "`sagad_metrics_label_overflow_total`.\n\n"
            "| metric | type | labels | bound | served by | meaning |\n"
            "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < SG_M__COUNT; i++) {
        const sg_metric_def_t *d = &catalog[i];
        char labels[128] = "";
        size_t n = 0;

        for (size_t j = 0; j < SG_METRIC_MAX_LABELS && d->labels[j]; j++)
            n += (size_t)snprintf(labels + n, sizeof(labels) - n, "%s`%s`", j ? ", " : "",
                                  d->labels[j]);
        char by[64];
        snprintf(by, sizeof(by), "%s%s%s%s%s", d->served_by & W ? "worker" : "",
                 (d->served_by & W) && (d->served_by & R) ? ", " : "",
                 d->served_by & R ? "relay" : "",
                 (d->served_by & (W | R)) && (d->served_by & G) ? ", " : "",
                 d->served_by & G ? "gateway" : "");
        fprintf(out, "| `%s` | %s | %s | %zu | %s | %s |\n", d->name, type_name(d->type),
                n ? labels : "-", d->max_series, by, d->help);
    }
    fprintf(out, "\nHistogram buckets (seconds):\n\n");
    for (size_t i = 0; i < SG_M__COUNT; i++) {
        const sg_metric_def_t *d = &catalog[i];

        if (d->type != SG_METRIC_HISTOGRAM)
            continue;
        fprintf(out, "- `%s`:", d->name);
        for (size_t j = 0; j < d->nbuckets; j++)
            fprintf(out, " %g", d->buckets[j]);
        fprintf(out, "\n");
    }
}

/* ---- batches ------------------------------------------------------------ */

typedef struct sg_metrics_pending_s {
    sg_metric_id_t id;
    series_t *s;
    double v;
} pending_t;

static void batch_push(sg_metrics_batch_t *b, sg_metric_id_t id, const char *const *labels,
                       double v)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->v = sg_xrealloc(b->v, b->cap * sizeof(*b->v));
    }
    /* The series is resolved now: the label strings may not outlive the
     * transaction (they point into its results). */
    b->v[b->n].id = id;
    b->v[b->n].s = series_get(id, labels);
    b->v[b->n].v = v;
    b->n++;
}

void sg_metrics_batch_inc(sg_metrics_batch_t *b, sg_metric_id_t id, const char *const *labels)
{
    check_type(id, SG_METRIC_COUNTER);
    batch_push(b, id, labels, 1);
}

void sg_metrics_batch_observe(sg_metrics_batch_t *b, sg_metric_id_t id, const char *const *labels,
                              double v)
{
    check_type(id, SG_METRIC_HISTOGRAM);
    batch_push(b, id, labels, v);
}

void sg_metrics_batch_commit(sg_metrics_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        pending_t *p = &b->v[i];

        if (catalog[p->id].type == SG_METRIC_HISTOGRAM) {
            hist_observe(&catalog[p->id], p->s, p->v);
            continue;
        }
        atomic_fetch_add_explicit(&p->s->count, (uint64_t)p->v, memory_order_relaxed);
        atomic_store(&p->s->present, true);
    }
    b->n = 0;
}

void sg_metrics_batch_discard(sg_metrics_batch_t *b)
{
    b->n = 0;
}

void sg_metrics_batch_free(sg_metrics_batch_t *b)
{
    free(b->v);
    memset(b, 0, sizeof(*b));
}
