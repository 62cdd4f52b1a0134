/* sg_otel: OpenTelemetry spans over OTLP/HTTP (JSON encoding).
 *
 * A program builds a span when it ends (sg_span_new ... attributes) and
 * hands it to the exporter, which never blocks the caller: a bounded queue,
 * one background thread that posts batches to <otel.endpoint>/v1/traces,
 * a timeout on every post, a pause that doubles (1 s to 30 s) after a failed
 * post instead of retrying it, and spans dropped and counted
 * (sagad_spans_dropped_total{reason}) when the queue is full or a post
 * failed.  With otel.endpoint empty (the default) sg_otel_start returns
 * NULL and nothing else happens: every function takes a NULL exporter and
 * does nothing with it.
 *
 * Span and trace ids are plain numbers here; sg_otel_id64 derives them
 * from text, so a span's id can be computed again by whoever ends it (a
 * saga's spans cross transactions, workers and restarts). */
#ifndef SAGAD_OTEL_H
#define SAGAD_OTEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_config.h"

typedef struct sg_otel_s sg_otel_t;

/* OTLP span kinds. */
typedef enum sg_span_kind_e {
    SG_SPAN_INTERNAL = 1,
    SG_SPAN_SERVER = 2,
    SG_SPAN_CLIENT = 3,
    SG_SPAN_PRODUCER = 4,
    SG_SPAN_CONSUMER = 5,
} sg_span_kind_t;

typedef struct sg_trace_id_s {
    uint8_t b[16];
} sg_trace_id_t;

typedef struct sg_span_s sg_span_t;

/* A list of ended spans not handed over yet (a transaction's, kept until
 * it commits).  Zero-initialised is empty. */
typedef struct sg_span_list_s {
    sg_span_t *head, *tail;
    size_t n;
} sg_span_list_t;

/* Starts the exporter of cfg's otel.* keys for a program called component
 * (the service name unless otel.service_name is set).  Returns 0 with *out
 * NULL when otel.endpoint is empty; 0 with *out set when the thread runs;
 * -1 with errstr naming the key and the rule on a bad otel.* value. */
int sg_otel_start(const sg_config_t *cfg, const char *component, sg_otel_t **out, char *errstr,
                  size_t errstr_size) __attribute__((warn_unused_result));

/* Posts what is queued (one try, within otel.timeout_ms), stops the thread
 * and frees everything.  NULL is a no-op. */
void sg_otel_stop(sg_otel_t *o);

/* True when a trace of this id is recorded (otel.traces_sampler_arg, a ratio
 * of trace ids, so every span of a trace is kept or none).  false for NULL. */
bool sg_otel_sampled(const sg_otel_t *o, const sg_trace_id_t *trace);

/* True when the queue is full: a caller may skip building spans that
 * would be dropped, and count them with sg_otel_dropped. */
bool sg_otel_full(const sg_otel_t *o);
/* Counts n spans dropped for reason (sagad_spans_dropped_total). */
void sg_otel_dropped(sg_otel_t *o, const char *reason, size_t n);

/* Queues span (taken; freed at once when o is NULL or the queue is full). */
void sg_otel_submit(sg_otel_t *o, sg_span_t *span);
/* Queues every span of list (taken; the list is empty after). */
void sg_otel_submit_list(sg_otel_t *o, sg_span_list_t *list);
void sg_span_list_add(sg_span_list_t *list, sg_span_t *span);
void sg_span_list_discard(sg_span_list_t *list);

/* A span that ran from start_ns to end_ns (ns since the epoch, kept in
 * whole us, cut down); parent 0: a root.  Never NULL. */
sg_span_t *sg_span_new(const sg_trace_id_t *trace, uint64_t span_id, uint64_t parent_id,
                       const char *name, sg_span_kind_t kind, int64_t start_ns, int64_t end_ns);
void sg_span_free(sg_span_t *span);
/* A link to another span's context (a producer's traceparent). */
void sg_span_link(sg_span_t *span, const sg_trace_id_t *trace, uint64_t span_id);
void sg_span_str(sg_span_t *span, const char *key, const char *value);
void sg_span_int(sg_span_t *span, const char *key, int64_t value);
/* Status error with its message (status ok is left unset, as OTel asks). */
void sg_span_error(sg_span_t *span, const char *message);

/* ---- ids ----------------------------------------------------------------- */

/* A non-zero 64-bit id of the bytes of text (FNV-1a, then mixed). */
uint64_t sg_otel_id64(const char *text);
/* The id of a saga's own span (the root of its trace in sagad), which the
 * worker ends and the relay's publish spans name as parent. */
uint64_t sg_otel_saga_span_id(const char *saga_id);
/* Parses a W3C traceparent "00-<32 hex>-<16 hex>-<2 hex>"; -1 when it is
 * not one (or its ids are zero). */
int sg_otel_parse_traceparent(const char *tp, sg_trace_id_t *trace, uint64_t *span_id,
                              unsigned *flags);
/* Writes "00-<trace>-<span>-01|00" (56 bytes with the NUL). */
void sg_otel_traceparent(char *out, size_t size, const sg_trace_id_t *trace, uint64_t span_id,
                         bool sampled);
/* Hex of a trace id (33 bytes with the NUL) and of a span id (17). */
void sg_otel_trace_hex(char *out, size_t size, const sg_trace_id_t *trace);
void sg_otel_span_hex(char *out, size_t size, uint64_t span_id);

#endif
