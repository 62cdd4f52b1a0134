/* dlq-tool list: dead letters, newest first, under the filter options;
 * dlq-tool groups: the same entries by error code and tool.  Both ask
 * lib/ops (sg_dlq_list, sg_dlq_groups). */
#include <stdio.h>
#include <stdlib.h>

#include "dlq.h"
#include "sagad/sg_table.h"

static const sg_table_col_t list_cols[] = {
    {"ID", "id", SG_CELL_TEXT},
    {"STATUS", "status", SG_CELL_TEXT},
    {"CREATED (UTC)", "created_at", SG_CELL_TIME},
    {"CODE", "error_code", SG_CELL_TEXT},
    {"CLASS", "error_class", SG_CELL_TEXT},
    {"SAGA", "saga_id", SG_CELL_TEXT},
    {"STEP", "step step_name", SG_CELL_TEXT},
    {"TOOL", "tool", SG_CELL_TEXT},
    {"ATTEMPTS", "attempts", SG_CELL_TEXT},
    {"MESSAGE", "message", SG_CELL_LINE},
    {NULL, NULL, SG_CELL_TEXT},
};

static const sg_table_col_t group_cols[] = {
    {"CODE", "error_code", SG_CELL_TEXT},
    {"TOOL", "tool", SG_CELL_TEXT},
    {"PENDING", "pending", SG_CELL_TEXT},
    {"REPLAYED", "replayed", SG_CELL_TEXT},
    {"DISCARDED", "discarded", SG_CELL_TEXT},
    {"TOTAL", "count", SG_CELL_TEXT},
    {"SAGAS", "sagas", SG_CELL_TEXT},
    {"FIRST SEEN (UTC)", "first_seen", SG_CELL_TIME},
    {"LAST SEEN (UTC)", "last_seen", SG_CELL_TIME},
    {NULL, NULL, SG_CELL_TEXT},
};

/* rows as JSON lines or a table; exit 1 when there are none. */
static int print_rows(const dlq_t *d, const sg_json_t *rows, const sg_table_col_t *cols)
{
    if (sg_json_array_size(rows) == 0) {
        fprintf(stderr, "no dead letters match\n");
        return SG_EXIT_FAIL;
    }
    if (d->json)
        for (const sg_json_t *r = sg_json_first(rows); r; r = sg_json_next(r))
            sg_cmd_print_json(r);
    else
        sg_table_print_rows(stdout, cols, rows, 60);
    return SG_EXIT_OK;
}

int dlq_cmd_list(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    sg_dlq_filter_t f;
    sg_json_t *rows = NULL;
    sg_err_t err;
    const char *before;
    bool any, more;
    long n;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return sg_cmd_close(&d, rc);
    if (sg_cmd_no_args(&d) < 0 || dlq_filter(&d, &f, NULL, &any) < 0 ||
        sg_cmd_opt_long(&d, "--limit", SG_DLQ_LIST_DEFAULT, SG_DLQ_LIST_MAX, &n) < 0)
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    f.limit = n;
    if ((before = sg_cli_opt(&d.args, "--before")) && !sg_dlq_id_parse(before, &f.before)) {
        sg_cmd_warn(&d, "--before %s: a dead-letter ID is a number (see dlq-tool list)", before);
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    }
    if (sg_dlq_list(d.pg, &f, &rows, &more, &err) < 0) {
        rc = sg_cmd_fail(&d, "query failed", &err);
    } else if (!(rc = print_rows(&d, rows, list_cols)) && more) {
        sg_cmd_more(rows, "id");
    }
    sg_json_destroy(rows);
    return sg_cmd_close(&d, rc);
}

int dlq_cmd_groups(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    sg_dlq_filter_t f;
    sg_json_t *rows = NULL;
    sg_err_t err;
    bool any;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return sg_cmd_close(&d, rc);
    if (sg_cmd_no_args(&d) < 0 || dlq_filter(&d, &f, NULL, &any) < 0)
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    if (sg_dlq_groups(d.pg, &f, &rows, &err) < 0)
        rc = sg_cmd_fail(&d, "query failed", &err);
    else
        rc = print_rows(&d, rows, group_cols);
    sg_json_destroy(rows);
    return sg_cmd_close(&d, rc);
}
