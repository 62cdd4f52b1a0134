/* sg_timeline: one saga's history from the tables, the view `sagactl
 * show` and its alias `dlq-tool saga` print: acceptance, every attempt
 * and compensation (generation, idempotency key, latency, error code),
 * dead letters, edits, replays, discards, and where it stands now. */
#ifndef SAGAD_TIMELINE_H
#define SAGAD_TIMELINE_H

#include <stdbool.h>
#include <stdio.h>

#include "sagad/sg_err.h"
#include "sagad/sg_pg.h"

/* Writes the timeline of saga_id to out: a table then the steps as they
 * are now, or with json one JSON object per line ({time, kind, detail}).
 * Returns 1 when written, 0 when there is no saga and no dead letter of
 * that id (nothing written), -1 with err set when a query failed. */
int sg_timeline_print(sg_pg_t *pg, const char *saga_id, bool json, FILE *out, sg_err_t *err)
    __attribute__((warn_unused_result));

#endif
