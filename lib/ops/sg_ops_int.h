/* What the query modules of lib/ops share (sg_ops.c), private to
 * sg_ops.c, sg_saga_query.c, sg_dlq_query.c and sg_relay_query.c: a
 * filter's WHERE clause with its text parameters, and rows of one JSON
 * column read into a JSON array. */
#ifndef SAGAD_OPS_INT_H
#define SAGAD_OPS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"
#include "sagad/sg_ops.h"
#include "sagad/sg_pg.h"

#define SG_OPS_MAX_PARAMS 16

/* A WHERE clause ANDed up from conditions, and its parameters ($1...). */
typedef struct sg_ops_where_s {
    sg_pg_buf_t sql;                       /* "" or " WHERE a AND b" */
    const char *params[SG_OPS_MAX_PARAMS]; /* borrowed, or own[] */
    char *own[SG_OPS_MAX_PARAMS];          /* parameters made here, freed */
    int n;
} sg_ops_where_t;

void sg_ops_where_init(sg_ops_where_t *w);
void sg_ops_where_free(sg_ops_where_t *w);
/* Appends value (borrowed) as the next parameter; its $ number. */
int sg_ops_where_param(sg_ops_where_t *w, const char *value);
/* The same for a value of its own (taken, freed with w). */
int sg_ops_where_param_own(sg_ops_where_t *w, char *value);
/* ANDs a condition: fmt holds one %d, the $ number of a parameter. */
void sg_ops_where_add(sg_ops_where_t *w, const char *fmt, int param);
/* A parameter of its own: the interval of ms milliseconds; its $ number. */
int sg_ops_where_interval(sg_ops_where_t *w, int64_t ms);
/* ANDs "column op <moment>" for a bound that is set. */
void sg_ops_where_when(sg_ops_where_t *w, const char *column, const char *op,
                       const sg_ops_when_t *when);

/* Runs sql and reads column 0 of at most max rows (0: all), a JSON
 * document each, into a new array *rows; *more (may be NULL) says whether
 * rows were left over.  0, or -1 with err. */
int sg_ops_rows(sg_pg_t *pg, const char *sql, int n, const char *const *params, size_t max,
                sg_json_t **rows, bool *more, sg_err_t *err) __attribute__((warn_unused_result));
/* The same for the first row only: *row NULL when there is none. */
int sg_ops_row(sg_pg_t *pg, const char *sql, int n, const char *const *params, sg_json_t **row,
               sg_err_t *err) __attribute__((warn_unused_result));

/* A filter value that breaks a rule: err "input.schema.invalid" with the
 * message "FIELD VALUE: rule" (fmt makes all of it); returns -1. */
int sg_ops_bad(sg_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* sg_ops_rows of a filter's statement with w's parameters; when it fails
 * with pg.data and since or until is a timestamp PostgreSQL cannot read,
 * err is rewritten as input.schema.invalid naming the first such field. */
int sg_ops_rows_when(sg_pg_t *pg, const char *sql, const sg_ops_where_t *w, size_t max,
                     const sg_ops_when_t *since, const sg_ops_when_t *until, sg_json_t **rows,
                     bool *more, sg_err_t *err) __attribute__((warn_unused_result));

#endif
