/* sg_metrics: the process's Prometheus metrics.
 *
 * One catalog (the table in sg_metrics.c) names every metric sagad
 * exports: name, type, labels, help text, histogram buckets, the bound on
 * its label combinations and which binary serves it.  docs/METRICS.md is
 * generated from it (`make docs`, checked by `make docs-check`).
 *
 * Updates are cheap from any thread: a series is found by a lock-free scan
 * and updated with atomics; only the first use of a label combination
 * takes the metric's lock.  Each metric holds at most its `max_series`
 * combinations; later ones are counted under the label value `_other` and
 * in sagad_metrics_label_overflow_total{metric}, so no input can grow the
 * exposition without bound.
 *
 * Labels are passed as an array of values in the order of the catalog's
 * label names: sg_metric_inc(SG_M_STEPS, SG_LABELS(tool, "ok")). */
#ifndef SAGAD_METRICS_H
#define SAGAD_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum sg_metric_id_e {
    /* every long-running binary */
    SG_M_BUILD_INFO,
    SG_M_PG_CONNECTED,
    SG_M_KAFKA_CONNECTED,
    SG_M_READY,
    SG_M_LABEL_OVERFLOW,
    /* sagad-worker */
    SG_M_COMMANDS_CONSUMED,
    SG_M_DUPLICATES_IGNORED,
    SG_M_SAGAS_STARTED,
    SG_M_SAGAS_FINISHED,
    SG_M_STEPS,
    SG_M_STEP_DURATION,
    SG_M_RETRIES_SCHEDULED,
    SG_M_COMPENSATIONS,
    SG_M_DEAD_LETTERS,
    SG_M_STEPS_IN_FLIGHT,
    SG_M_COMMANDS_HELD,
    SG_M_INTAKE_BYTES_HELD,
    SG_M_INTAKE_PAUSES,
    SG_M_CHAINED,
    SG_M_PARTITIONS_ASSIGNED,
    SG_M_CONSUMER_LAG,
    SG_M_CIRCUIT_STATE,
    SG_M_ERRORS,
    SG_M_SAGA_STEPS_FINISHED,
    SG_M_SPANS_EXPORTED,
    SG_M_SPANS_DROPPED,
    /* sagad-relay */
    SG_M_RELAY_STATE,
    SG_M_OUTBOX_PUBLISHED,
    SG_M_OUTBOX_QUARANTINED,
    SG_M_RELAY_KAFKA_TXNS,
    SG_M_RELAY_SKIPPED,
    SG_M_OUTBOX_BACKLOG,
    SG_M_OUTBOX_OLDEST_AGE,
    SG_M_OUTBOX_PUBLISH_LATENCY,
    SG_M_OUTBOX_XMIN_BLOCKED,
    SG_M_TIMERS_DUE,
    SG_M_TIMERS_FIRED,
    SG_M_DLQ_PENDING,
    SG_M_DLQ_OLDEST_AGE,
    SG_M_RETENTION_REMOVED,
    SG_M_RETENTION_OLDEST_AGE,
    /* sagad-gateway */
    SG_M_GW_REQUESTS,
    SG_M_GW_REQUEST_DURATION,
    SG_M_GW_RATE_LIMITED,
    SG_M__COUNT
} sg_metric_id_t;

typedef enum sg_metric_type_e {
    SG_METRIC_COUNTER,
    SG_METRIC_GAUGE,
    SG_METRIC_HISTOGRAM,
} sg_metric_type_t;

/* Which binary serves a metric (a bit mask). */
#define SG_METRICS_WORKER  0x1
#define SG_METRICS_RELAY   0x2
#define SG_METRICS_GATEWAY 0x4

#define SG_METRIC_MAX_LABELS 3

typedef struct sg_metric_def_s {
    const char *name;
    sg_metric_type_t type;
    const char *labels[SG_METRIC_MAX_LABELS]; /* NULL-padded */
    const double *buckets;                    /* histogram upper bounds, ascending */
    size_t nbuckets;
    size_t max_series; /* label combinations kept before `_other` */
    unsigned served_by;
    const char *help; /* one line */
} sg_metric_def_t;

#define SG_LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The catalog, for docs and tests. */
const sg_metric_def_t *sg_metrics_catalog(size_t *count);

/* Turns on the metrics served by `served_by` (SG_METRICS_*); the others
 * are never rendered.  Call once, before other threads use metrics. */
void sg_metrics_init(unsigned served_by);

/* Updates.  labels: NULL for a metric without labels.  Updating a metric
 * of the wrong type is a programming error and aborts. */
void sg_metric_add(sg_metric_id_t id, const char *const *labels, uint64_t n);
#define sg_metric_inc(id, labels) sg_metric_add((id), (labels), 1)
void sg_metric_set(sg_metric_id_t id, const char *const *labels, double v);
void sg_metric_observe(sg_metric_id_t id, const char *const *labels, double v);
/* A gauge series leaves the exposition (e.g. a revoked partition) until it
 * is set again; labels NULL hides every series of the metric. */
void sg_metric_hide(sg_metric_id_t id, const char *const *labels);

/* The value of a counter or gauge series, 0 when it does not exist (tests). */
double sg_metric_value(sg_metric_id_t id, const char *const *labels);

/* The exposition in Prometheus text format 0.0.4: HELP and TYPE for every
 * enabled metric, then its series.  malloc'd; the caller frees it. */
char *sg_metrics_render(void);

/* The Markdown reference of the catalog (docs/METRICS.md). */
void sg_metrics_write_reference(FILE *out);

/* Updates held back until a transaction commits: a rolled-back batch must
 * not count its outcomes (they are counted again when it is retried).
 * Record with the batch functions, then commit (apply) or discard. */
typedef struct sg_metrics_batch_s {
    struct sg_metrics_pending_s *v;
    size_t n, cap;
} sg_metrics_batch_t;

void sg_metrics_batch_inc(sg_metrics_batch_t *b, sg_metric_id_t id, const char *const *labels);
void sg_metrics_batch_observe(sg_metrics_batch_t *b, sg_metric_id_t id, const char *const *labels,
                              double v);
void sg_metrics_batch_commit(sg_metrics_batch_t *b);
void sg_metrics_batch_discard(sg_metrics_batch_t *b);
void sg_metrics_batch_free(sg_metrics_batch_t *b);

#endif
