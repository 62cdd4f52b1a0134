/* sg_ops: durations and moments of the operator queries' filters, and the
 * WHERE clauses and JSON rows the query modules share (sg_ops_int.h). */
#include "sagad/sg_ops.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sg_ops_int.h"

bool sg_ops_duration_ms(const char *s, int64_t *ms)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    char *end;
    long long n;

    if (!s || *s < '0' || *s > '9')
        return false; /* strtoll would take a sign or leading space */
    errno = 0;
    n = strtoll(s, &end, 10);
    if (end == s || errno)
        return false;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (n > INT64_MAX / units[i].ms / 1000)
                return false;
            *ms = n * units[i].ms;
            return true;
        }
    }
    return false;
}

bool sg_ops_when_parse(const char *text, sg_ops_when_t *w)
{
    memset(w, 0, sizeof(*w));
    if (!text || !*text)
        return false;
    if (sg_ops_duration_ms(text, &w->ago_ms)) {
        w->kind = SG_OPS_WHEN_AGO;
    } else {
        w->kind = SG_OPS_WHEN_AT;
        w->at = text;
    }
    return true;
}

void sg_ops_where_init(sg_ops_where_t *w)
{
    memset(w, 0, sizeof(*w));
    sg_pg_buf_puts(&w->sql, "");
}

void sg_ops_where_free(sg_ops_where_t *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->own[i]);
    sg_pg_buf_free(&w->sql);
    memset(w, 0, sizeof(*w));
}

int sg_ops_where_param(sg_ops_where_t *w, const char *value)
{
    if (w->n >= SG_OPS_MAX_PARAMS)
        abort(); /* the filters have fewer fields than slots */
    w->params[w->n] = value;
    return ++w->n;
}

int sg_ops_where_param_own(sg_ops_where_t *w, char *value)
{
    int k = sg_ops_where_param(w, value);

    w->own[k - 1] = value;
    return k;
}

void sg_ops_where_add(sg_ops_where_t *w, const char *fmt, int param)
{
    char cond[512];

    snprintf(cond, sizeof(cond), fmt, param);
    sg_pg_buf_puts(&w->sql, w->sql.len ? " AND " : " WHERE ");
    sg_pg_buf_puts(&w->sql, cond);
}

int sg_ops_where_interval(sg_ops_where_t *w, int64_t ms)
{
    char *text = sg_xmalloc(40);

    snprintf(text, 40, "%lld milliseconds", (long long)ms);
    return sg_ops_where_param_own(w, text);
}

void sg_ops_where_when(sg_ops_where_t *w, const char *column, const char *op,
                       const sg_ops_when_t *when)
{
    char fmt[128];

    if (when->kind == SG_OPS_WHEN_AGO) {
        snprintf(fmt, sizeof(fmt), "%s %s now() - $%%d::interval", column, op);
        sg_ops_where_add(w, fmt, sg_ops_where_interval(w, when->ago_ms));
    } else if (when->kind == SG_OPS_WHEN_AT) {
        snprintf(fmt, sizeof(fmt), "%s %s $%%d::timestamptz", column, op);
        sg_ops_where_add(w, fmt, sg_ops_where_param(w, when->at));
    }
}

/* Column 0 of row r of res, a JSON document, appended to rows. */
static int read_row(const sg_pg_res_t *res, size_t r, sg_json_t *rows, sg_err_t *err)
{
    const char *text = sg_pg_res_get(res, r, 0);
    sg_json_t *doc;

    if (!text)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "pg.query", "row %zu has no document", r);
    if (!(doc = sg_json_parse_exact(text, strlen(text), err)))
        return -1;
    sg_json_append(rows, doc);
    return 0;
}

int sg_ops_rows(sg_pg_t *pg, const char *sql, int n, const char *const *params, size_t max,
                sg_json_t **rows, bool *more, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    size_t nrows;

    *rows = NULL;
    if (more)
        *more = false;
    if (sg_pg_exec(pg, sql, n, params, &res, err) < 0)
        return -1;
    nrows = sg_pg_res_rows(res);
    if (max && nrows > max) {
        nrows = max;
        if (more)
            *more = true;
    }
    *rows = sg_json_new_array();
    for (size_t r = 0; r < nrows; r++) {
        if (read_row(res, r, *rows, err) < 0) {
            sg_json_destroy(*rows);
            *rows = NULL;
            sg_pg_res_destroy(res);
            return -1;
        }
    }
    sg_pg_res_destroy(res);
    return 0;
}

int sg_ops_row(sg_pg_t *pg, const char *sql, int n, const char *const *params, sg_json_t **row,
               sg_err_t *err)
{
    sg_json_t *rows;

    *row = NULL;
    if (sg_ops_rows(pg, sql, n, params, 1, &rows, NULL, err) < 0)
        return -1;
    if (sg_json_array_size(rows) > 0)
        *row = sg_json_dup(sg_json_array_get(rows, 0));
    sg_json_destroy(rows);
    return 0;
}

int sg_ops_bad(sg_err_t *err, const char *fmt, ...)
{
    char msg[sizeof(err->message)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid", "%s", msg);
}

/* The first of since and until that PostgreSQL cannot read, named in err
 * (input.schema.invalid); err untouched when both are fine. */
static void when_blame(sg_pg_t *pg, const sg_ops_when_t *since, const sg_ops_when_t *until,
                       sg_err_t *err)
{
    const char *const fields[] = {"since", "until"};
    const sg_ops_when_t *const whens[] = {since, until};

    for (int i = 0; i < 2; i++) {
        const char *why;
        sg_err_t e;

        if (whens[i]->kind != SG_OPS_WHEN_AT ||
            sg_pg_exec(pg, "SELECT $1::timestamptz", 1, &whens[i]->at, NULL, &e) == 0 ||
            strcmp(e.code, "pg.data") != 0)
            continue;
        /* PostgreSQL's sentence alone: "invalid input syntax for ..." */
        why = strstr(e.message, "ERROR:");
        why = why ? why + 6 + strspn(why + 6, " ") : e.message;
        sg_ops_bad(err,
                   "%s %s: not an age (500ms, 90s, 30m, 2h, 7d) nor a timestamp PostgreSQL "
                   "reads (%.*s)",
                   fields[i], whens[i]->at, (int)strcspn(why, "\n"), why);
        return;
    }
}

int sg_ops_rows_when(sg_pg_t *pg, const char *sql, const sg_ops_where_t *w, size_t max,
                     const sg_ops_when_t *since, const sg_ops_when_t *until, sg_json_t **rows,
                     bool *more, sg_err_t *err)
{
    if (sg_ops_rows(pg, sql, w->n, w->params, max, rows, more, err) == 0)
        return 0;
    if (strcmp(err->code, "pg.data") == 0)
        when_blame(pg, since, until, err);
    return -1;
}
