/* sg_ops: what the operator queries share (sg_saga_query.h,
 * sg_dlq_query.h, sg_relay_query.h): one implementation of the questions
 * sagactl, dlq-tool, sagad-relay status and sagad-gateway ask PostgreSQL,
 * so no two programs carry the same SQL.
 *
 * The contract of every query function:
 *   - it takes the caller's connection (sg_pg_t *) and a typed filter or
 *     request, and runs parameterised statements only;
 *   - rows come back as JSON objects PostgreSQL builds (jsonb_build_object),
 *     read with sg_json_parse_exact (numbers as they are stored): what a
 *     command line prints with --json, renders as a table (sg_table.h),
 *     and an HTTP server returns;
 *   - it returns 0, or -1 with err: "input.schema.invalid" when a filter
 *     value breaks a rule, the message "FIELD VALUE: rule" with FIELD the
 *     filter's field name, which is also the option's name (--FIELD) and
 *     the query parameter's; "pg.*" when PostgreSQL failed ("pg.query" for
 *     a missing grant, "pg.connection" when it is gone);
 *   - what a caller gets it owns (sg_json_destroy); on -1 it gets nothing.
 * Each function's header says which database role is enough to call it
 * (docs/OPERATIONS.md, "Database roles"). */
#ifndef SAGAD_OPS_H
#define SAGAD_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* A moment a filter compares with: an age (so long before the database's
 * now()) or a timestamp PostgreSQL reads (timestamptz input: RFC 3339,
 * "2026-11-21 07:49:01+00", ...). */
typedef enum sg_ops_when_kind_e {
    SG_OPS_WHEN_NONE = 0, /* no bound */
    SG_OPS_WHEN_AGO,
    SG_OPS_WHEN_AT,
} sg_ops_when_kind_t;

typedef struct sg_ops_when_s {
    sg_ops_when_kind_t kind;
    int64_t ago_ms; /* SG_OPS_WHEN_AGO */
    const char *at; /* SG_OPS_WHEN_AT: borrowed, must outlive the query */
} sg_ops_when_t;

/* A duration: a whole number and a unit, ms, s, m, h or d ("500ms",
 * "90s", "30m", "2h", "7d").  false when s is not one (sign, space,
 * fraction, unknown unit, or beyond about 292,000 years). */
bool sg_ops_duration_ms(const char *s, int64_t *ms);

/* A moment from text: a duration is an age, anything else a timestamp left
 * for PostgreSQL to read (a query names the field when it cannot).  false
 * for empty text. */
bool sg_ops_when_parse(const char *text, sg_ops_when_t *w);

#endif
