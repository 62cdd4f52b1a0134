/* What every dlq-tool command shares: arguments, the connection, the
 * filter options and table output. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlq.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_text.h"

sg_pg_t *dlq_connect(const dlq_t *d, sg_err_t *err)
{
    sg_pg_opts_t opts;

    sg_pg_opts_from_config(&opts, d->cli->cfg, "dlq-tool");
    opts.role = SG_PG_ROLE_OPERATOR;
    opts.connect_attempts = 3;
    return sg_pg_connect(&opts, err);
}

int dlq_open(dlq_t *d, sg_cli_t *cli, int argc, char **argv, bool connect)
{
    sg_err_t err;

    memset(d, 0, sizeof(*d));
    d->cli = cli;
    if (sg_cli_parse(cli, argc, argv, &d->args) < 0)
        return SG_EXIT_USAGE;
    if (!connect)
        return SG_EXIT_OK;
    d->pg = dlq_connect(d, &err);
    if (!d->pg) {
        dlq_warn(d, "%s (check pg.dsn / SAGAD_PG_DSN)", err.message);
        return SG_EXIT_INFRA;
    }
    return SG_EXIT_OK;
}

int dlq_close(dlq_t *d, int rc)
{
    sg_pg_destroy(d->pg);
    sg_cli_args_free(&d->args);
    d->pg = NULL;
    return rc;
}

void dlq_warn(const dlq_t *d, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s %s: ", d->cli->prog, d->cli->cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int dlq_pg_fail(const dlq_t *d, const char *what, const sg_err_t *err)
{
    dlq_warn(d, "%s: %s [%s]", what, err->message, err->code);
    /* A data error here comes from a value the operator typed (a bad
     * --since timestamp): a usage error, not an outage. */
    return strcmp(err->code, "pg.data") == 0 ? SG_EXIT_USAGE : SG_EXIT_INFRA;
}

int dlq_query(dlq_t *d, const char *sql, int n, const char *const *params, sg_pg_res_t **res)
{
    sg_err_t err;

    if (sg_pg_exec(d->pg, sql, n, params, res, &err) == 0)
        return 0;
    return dlq_pg_fail(d, "query failed", &err);
}

int dlq_filter_param(dlq_filter_t *f, const char *value)
{
    if (f->n >= DLQ_MAX_PARAMS)
        abort(); /* the filters are fewer than the slots */
    f->params[f->n] = value;
    return ++f->n;
}

void dlq_filter_add(dlq_filter_t *f, const char *fmt, int param)
{
    size_t len = strlen(f->where);

    snprintf(f->where + len, sizeof(f->where) - len, "%s", f->where[0] ? " AND " : " WHERE ");
    len = strlen(f->where);
    snprintf(f->where + len, sizeof(f->where) - len, fmt, param);
}

/* "30m", "2h", "7d", "90s": an age; into "N seconds" for ::interval. */
static bool parse_age(const char *s, char *out, size_t out_size)
{
    char *end;
    long n = strtol(s, &end, 10);
    long mult;

    if (end == s || n < 0 || strlen(end) != 1)
        return false;
    switch (*end) {
    case 's':
        mult = 1;
        break;
    case 'm':
        mult = 60;
        break;
    case 'h':
        mult = 3600;
        break;
    case 'd':
        mult = 86400;
        break;
    default:
        return false;
    }
    snprintf(out, out_size, "%ld seconds", n * mult);
    return true;
}

static void filter_time(dlq_filter_t *f, const char *value, const char *op)
{
    char sql[96];
    char *own = f->own[f->n];

    if (parse_age(value, own, sizeof(f->own[0]))) {
        snprintf(sql, sizeof(sql), "d.created_at %s now() - $%%d::interval", op);
        dlq_filter_add(f, sql, dlq_filter_param(f, own));
    } else {
        snprintf(sql, sizeof(sql), "d.created_at %s $%%d::timestamptz", op);
        dlq_filter_add(f, sql, dlq_filter_param(f, value));
    }
}

static void filter_code(dlq_filter_t *f, const char *code)
{
    size_t len = strlen(code);

    if (len > 0 && code[len - 1] == '*') {
        /* a prefix: "tool.http.*" (LIKE special characters escaped) */
        char *own = f->own[f->n];
        size_t o = 0;

        for (size_t i = 0; i + 1 < len && o + 3 < sizeof(f->own[0]); i++) {
            if (code[i] == '%' || code[i] == '_' || code[i] == '\\')
                own[o++] = '\\';
            own[o++] = code[i];
        }
        own[o++] = '%';
        own[o] = '\0';
        dlq_filter_add(f, "d.error_code LIKE $%d", dlq_filter_param(f, own));
    } else {
        dlq_filter_add(f, "d.error_code = $%d", dlq_filter_param(f, code));
    }
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

int dlq_filter_build(dlq_t *d, dlq_filter_t *f, const char *default_status)
{
    const sg_cli_args_t *a = &d->args;
    const char *v;
    sg_errclass_t cls;

    memset(f, 0, sizeof(*f));
    if ((v = sg_cli_opt(a, "--code"))) {
        filter_code(f, v);
        f->any = true;
    }
    if ((v = sg_cli_opt(a, "--class"))) {
        if (sg_errclass_parse(v, &cls) < 0 || cls == SG_ERRCLASS_NONE) {
            dlq_warn(d, "--class %s: must be transient, throttled, timeout, permanent or poison",
                     v);
            return -1;
        }
        dlq_filter_add(f, "d.error_class = $%d", dlq_filter_param(f, v));
        f->any = true;
    }
    if ((v = sg_cli_opt(a, "--saga"))) {
        dlq_filter_add(f, "d.saga_id = $%d", dlq_filter_param(f, v));
        f->any = true;
    }
    if ((v = sg_cli_opt(a, "--tool"))) {
        dlq_filter_add(f, "d.tool = $%d", dlq_filter_param(f, v));
        f->any = true;
    }
    if ((v = sg_cli_opt(a, "--step"))) {
        dlq_filter_add(f, all_digits(v) ? "d.step_idx = $%d::int" : "d.step_name = $%d",
                       dlq_filter_param(f, v));
        f->any = true;
    }
    if ((v = sg_cli_opt(a, "--since"))) {
        filter_time(f, v, ">=");
        f->any = true;
    }
    if ((v = sg_cli_opt(a, "--until"))) {
        filter_time(f, v, "<");
        f->any = true;
    }
    v = sg_cli_opt(a, "--status");
    if (v && strcmp(v, "pending") != 0 && strcmp(v, "replayed") != 0 &&
        strcmp(v, "discarded") != 0 && strcmp(v, "any") != 0) {
        dlq_warn(d, "--status %s: must be pending, replayed, discarded or any", v);
        return -1;
    }
    f->any = f->any || v;
    if (!v)
        v = default_status;
    if (v && strcmp(v, "any") != 0)
        dlq_filter_add(f, "d.status = $%d", dlq_filter_param(f, v));
    return 0;
}

int dlq_opt_long(dlq_t *d, const char *name, long def, long max, long *out)
{
    const char *v = sg_cli_opt(&d->args, name);
    char *end;

    *out = def;
    if (!v)
        return 0;
    *out = strtol(v, &end, 10);
    if (end == v || *end || *out < 1 || *out > max) {
        dlq_warn(d, "%s %s: must be a whole number from 1 to %ld", name, v, max);
        return -1;
    }
    return 0;
}

int dlq_ids_check(dlq_t *d, const char *const *vals, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!all_digits(vals[i]) || strlen(vals[i]) > 18) {
            dlq_warn(d, "%s: a dead-letter ID is a number (see dlq-tool list)", vals[i]);
            return -1;
        }
    }
    return 0;
}

const char *dlq_one_id(dlq_t *d)
{
    if (d->args.npos != 1) {
        dlq_warn(d, "needs one dead-letter ID (try %s %s --help)", d->cli->prog, d->cli->cmd->name);
        return NULL;
    }
    return dlq_ids_check(d, d->args.pos, 1) < 0 ? NULL : d->args.pos[0];
}

const char *dlq_operator(const dlq_t *d)
{
    const char *v = sg_cli_opt(&d->args, "--operator");

    if (v && *v)
        return v;
    v = getenv("USER");
    return v && *v ? v : "unknown";
}

/* Display width of a UTF-8 string: code points, not bytes. */
static int text_width(const char *s)
{
    int w = 0;

    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

static void print_cell(const char *s, int width, int maxw, bool last)
{
    int w = text_width(s);

    if (w > maxw) {
        /* cut at maxw - 1 code points, then "~" */
        int cp = 0;
        const char *p = s;

        for (; *p; p++) {
            if (((unsigned char)*p & 0xC0) != 0x80 && ++cp > maxw - 1)
                break;
        }
        printf("%.*s~", (int)(p - s), s);
        w = maxw;
    } else {
        fputs(s, stdout);
    }
    if (!last)
        printf("%*s", width - w + 2, "");
}

void dlq_table(const sg_pg_res_t *res, const char *const *header, int ncols, int maxw)
{
    size_t rows = sg_pg_res_rows(res);
    int width[32];
    char **cells;

    if (ncols > 32)
        ncols = 32;
    /* What producers sent (keys, names, messages) is shown, never obeyed:
     * control characters come out as \xHH. */
    cells = sg_xcalloc(rows * (size_t)ncols + 1, sizeof(*cells));
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < ncols; c++) {
            const char *v = sg_pg_res_get(res, r, c);
            cells[r * (size_t)ncols + (size_t)c] = sg_text_visible(v ? v : "-", false);
        }
    for (int c = 0; c < ncols; c++) {
        width[c] = text_width(header[c]);
        for (size_t r = 0; r < rows; r++) {
            int w = text_width(cells[r * (size_t)ncols + (size_t)c]);
            if (w > width[c])
                width[c] = w;
        }
        if (width[c] > maxw)
            width[c] = maxw;
    }
    for (int c = 0; c < ncols; c++)
        print_cell(header[c], width[c], maxw, c == ncols - 1);
    putchar('\n');
    for (size_t r = 0; r < rows; r++) {
        for (int c = 0; c < ncols; c++)
            print_cell(cells[r * (size_t)ncols + (size_t)c], width[c], maxw, c == ncols - 1);
        putchar('\n');
    }
    for (size_t i = 0; i < rows * (size_t)ncols; i++)
        free(cells[i]);
    free(cells);
}
