/* sg_timeline: one saga's history as people read it, the view `sagactl
 * show` and its alias `dlq-tool saga` print from sg_saga_timeline
 * (sg_saga_query.h): acceptance, every attempt and compensation
 * (generation, idempotency key, latency, error code), dead letters, edits,
 * replays, control commands, discards, and where it stands now; then its
 * steps. */
#ifndef SAGAD_TIMELINE_H
#define SAGAD_TIMELINE_H

#include <stdbool.h>
#include <stdio.h>

#include "sagad/sg_json.h"
#include "sagad/sg_table.h"

/* The columns of a saga's steps ({step, name, tool, status, attempts,
 * comp_attempts, idempotency_key, error_code}), here and in `dlq-tool
 * show`. */
extern const sg_table_col_t sg_timeline_step_cols[];

/* Writes timeline (what sg_saga_timeline gives) to out: a table of its
 * events then the steps as they are now, or with json each event as one
 * JSON object per line ({time, kind, detail}). */
void sg_timeline_print(const sg_json_t *timeline, bool json, FILE *out);

#endif
