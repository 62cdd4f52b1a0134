/* What the apply of a decision reports beyond its rows (worker_observe.c):
 * the saga's spans, the error and partial-saga counters, and the trace
 * context of its log lines.  Read from the outcome's ops after the pure
 * decision returned, so the decision stays free of clocks and I/O.
 *
 * Spans (docs/WORKER.md, Tracing):
 *
 *   saga <name>                   accepted to terminal; links the producer's traceparent
 *   ├─ step <name>                the forward step: first attempt to succeeded/failed
 *   │  └─ attempt <tool> #n       one call; its context is the call's traceparent
 *   ├─ compensation               saga.compensating to compensated/failed
 *   │  └─ compensate <name>       one step's compensation
 *   │     └─ attempt <tool> #n
 *   └─ dead_letter                a dead-letter write (to the DLQ topic)
 *
 * Every id is a hash of what names the span (saga id, generation, step,
 * phase, attempt), so whichever transaction, worker or restart ends a span
 * computes the same id its children named as parent.  A span is sent when
 * it ends; its start is remembered by this process (a bounded table), and
 * a span whose start this process did not see (it began before a restart
 * or on another worker) starts at its end, marked sagad.start_unknown. */
#ifndef SAGAD_WORKER_OBSERVE_H
#define SAGAD_WORKER_OBSERVE_H

#include "sagad/sg_otel.h"
#include "../decide/worker_decide.h"

typedef struct worker_observe_s worker_observe_t;

/* otel may be NULL (tracing off: only the counters are kept).  Returns
 * NULL with errstr naming the key on a bad metrics.saga_names. */
worker_observe_t *worker_observe_new(sg_otel_t *otel, const sg_config_t *cfg, char *errstr,
                                     size_t errstr_size);
void worker_observe_free(worker_observe_t *ob);

/* Called by the apply for each decision, before its ops are applied:
 * counts sagad_errors_total and sagad_saga_steps_finished_total into the
 * transaction's metrics, adds the spans that ended to spans, and sets the
 * call's traceparent to its attempt span's context (tracing on). */
void worker_observe_outcome(worker_observe_t *ob, worker_t *w, const worker_cmd_t *cmd,
                            const worker_saga_t *saga, worker_outcome_t *out);

/* True once a worker_observe_t with an exporter exists (tracing on). */
bool worker_observe_tracing(void);

/* Fills ctx->trace_id and ctx->span_id (into ids, which must outlive ctx)
 * for a log line about cmd's saga; nothing when tracing is off. */
typedef struct worker_log_ids_s {
    char trace[33], span[17];
} worker_log_ids_t;
void worker_observe_log_ids(const worker_observe_t *ob, const worker_cmd_t *cmd,
                            const worker_saga_t *saga, const worker_outcome_t *out,
                            sg_log_ctx_t *ctx, worker_log_ids_t *ids);

#endif
