/* sagactl status ID, show ID and list: the sagas as PostgreSQL has them,
 * asked through lib/ops (sg_saga_query.h) and shown as tables or, with
 * --json, as the queries' own objects. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_saga_query.h"
#include "sagad/sg_table.h"
#include "sagad/sg_timeline.h"

/* "2/3": steps succeeded of all. */
static char *steps_ok(const sg_json_t *saga)
{
    char *ok = sg_table_cell(saga, "steps_succeeded", SG_CELL_TEXT);
    char *all = sg_table_cell(saga, "steps_total", SG_CELL_TEXT);
    size_t n = (ok ? strlen(ok) : 1) + (all ? strlen(all) : 1) + 2;
    char *out = sg_xmalloc(n);

    snprintf(out, n, "%s/%s", ok ? ok : "?", all ? all : "?");
    free(ok);
    free(all);
    return out;
}

/* "2 (ship) failed": the step it is at; NULL when none. */
static char *now_at(const sg_json_t *saga)
{
    char *step = sg_table_cell(saga, "at_step.step", SG_CELL_TEXT);
    char *name = sg_table_cell(saga, "at_step.name", SG_CELL_TEXT);
    char *status = sg_table_cell(saga, "at_step.status", SG_CELL_TEXT);
    char *out = NULL;

    if (step && name && status) {
        size_t n = strlen(step) + strlen(name) + strlen(status) + 5;
        out = sg_xmalloc(n);
        snprintf(out, n, "%s (%s) %s", step, name, status);
    }
    free(step);
    free(name);
    free(status);
    return out;
}

static void status_table(const sg_json_t *saga)
{
    static const struct {
        const char *label, *key;
        sg_cell_t cell;
    } rows[] = {
        {"saga", "saga_id", SG_CELL_TEXT},       {"name", "name", SG_CELL_TEXT},
        {"status", "status", SG_CELL_TEXT},      {"generation", "generation", SG_CELL_TEXT},
        {"steps ok", NULL, SG_CELL_TEXT},        {"now at", NULL, SG_CELL_TEXT},
        {"created", "created_at", SG_CELL_TIME},
    };
    sg_table_t *t = sg_table_new(NULL, 2);
    char *updated = sg_table_cell(saga, "updated_at", SG_CELL_TIME);
    char *idle = sg_table_cell(saga, "idle_s", SG_CELL_AGE);
    char line[160];

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *v = rows[i].key ? sg_table_cell(saga, rows[i].key, rows[i].cell)
                  : i == 4    ? steps_ok(saga)
                              : now_at(saga);
        if (rows[i].cell == SG_CELL_TIME && v) {
            snprintf(line, sizeof(line), "%s UTC", v);
            free(v);
            v = sg_xstrdup(line);
        }
        sg_table_add(t, (const char *const[]){rows[i].label, v});
        free(v);
    }
    snprintf(line, sizeof(line), "%s UTC (%s ago)", updated ? updated : "?", idle ? idle : "?");
    sg_table_add(t, (const char *const[]){"updated", line});
    sg_table_print(t, stdout, 120);
    sg_table_destroy(t);
    free(updated);
    free(idle);
}

int ctl_cmd_status(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    sg_json_t *saga = NULL;
    sg_err_t err;
    const char *id;
    int rc = ctl_open(&c, cli, argc, argv, true);

    if (rc)
        return ctl_close(&c, rc);
    if (!(id = sg_cmd_one_arg(&c.cmd, "saga ID")))
        return ctl_close(&c, SG_EXIT_USAGE);
    if (sg_saga_status(c.cmd.pg, id, &saga, &err) < 0)
        rc = sg_cmd_fail(&c.cmd, "query failed", &err);
    else if (!saga) {
        sg_cmd_warn(&c.cmd, "no saga %s", id);
        rc = SG_EXIT_FAIL;
    } else if (c.cmd.json)
        sg_cmd_print_json(saga);
    else
        status_table(saga);
    sg_json_destroy(saga);
    return ctl_close(&c, rc);
}

int ctl_cmd_show(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    sg_json_t *timeline = NULL;
    sg_err_t err;
    const char *id;
    int rc = ctl_open(&c, cli, argc, argv, true);

    if (rc)
        return ctl_close(&c, rc);
    if (!(id = sg_cmd_one_arg(&c.cmd, "saga ID")))
        return ctl_close(&c, SG_EXIT_USAGE);
    if (sg_saga_timeline(c.cmd.pg, id, &timeline, &err) < 0) {
        rc = sg_cmd_fail(&c.cmd, "query failed", &err);
    } else if (!timeline) {
        sg_cmd_warn(&c.cmd, "no saga and no dead letter with saga id %s", id);
        rc = SG_EXIT_FAIL;
    } else {
        sg_timeline_print(timeline, c.cmd.json, stdout);
    }
    sg_json_destroy(timeline);
    return ctl_close(&c, rc);
}

/* list's filter from its options: -1 after naming a bad one. */
static int filter_of(const ctl_t *c, sg_saga_filter_t *f)
{
    long limit;

    memset(f, 0, sizeof(*f));
    if (sg_cmd_no_args(&c->cmd) < 0 ||
        sg_cmd_opt_long(&c->cmd, "--limit", SG_SAGA_LIST_DEFAULT, SG_SAGA_LIST_MAX, &limit) < 0 ||
        sg_cmd_opt_when(&c->cmd, "--since", &f->since) < 0 ||
        sg_cmd_opt_when(&c->cmd, "--until", &f->until) < 0 ||
        sg_cmd_opt_duration(&c->cmd, "--stuck", 0, &f->stuck_ms) < 0)
        return -1;
    f->limit = limit;
    f->status = sg_cli_opt(&c->cmd.args, "--status");
    f->name = sg_cli_opt(&c->cmd.args, "--name");
    f->before = sg_cli_opt(&c->cmd.args, "--before");
    return 0;
}

static void list_table(const sg_json_t *rows)
{
    static const char *const header[] = {"SAGA_ID", "NAME",          "STATUS", "STEPS OK",
                                         "NOW AT",  "CREATED (UTC)", "UPDATED"};
    sg_table_t *t = sg_table_new(header, 7);

    for (const sg_json_t *r = sg_json_first(rows); r; r = sg_json_next(r)) {
        char *cells[7] = {sg_table_cell(r, "saga_id", SG_CELL_TEXT),
                          sg_table_cell(r, "name", SG_CELL_TEXT),
                          sg_table_cell(r, "status", SG_CELL_TEXT),
                          steps_ok(r),
                          now_at(r),
                          sg_table_cell(r, "created_at", SG_CELL_TIME),
                          sg_table_cell(r, "idle_s", SG_CELL_AGE)};
        char ago[80];

        if (cells[6]) {
            snprintf(ago, sizeof(ago), "%s ago", cells[6]);
            free(cells[6]);
            cells[6] = sg_xstrdup(ago);
        }
        sg_table_add(t, (const char *const *)cells);
        for (int i = 0; i < 7; i++)
            free(cells[i]);
    }
    sg_table_print(t, stdout, 60);
    sg_table_destroy(t);
}

int ctl_cmd_list(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    sg_saga_filter_t f;
    sg_json_t *rows = NULL;
    sg_err_t err;
    bool more;
    int rc = ctl_open(&c, cli, argc, argv, true);

    if (rc)
        return ctl_close(&c, rc);
    if (filter_of(&c, &f) < 0)
        return ctl_close(&c, SG_EXIT_USAGE);
    if (sg_saga_list(c.cmd.pg, &f, &rows, &more, &err) < 0) {
        rc = sg_cmd_fail(&c.cmd, "query failed", &err);
    } else if (sg_json_array_size(rows) == 0) {
        sg_cmd_warn(&c.cmd, "no saga matches");
        rc = SG_EXIT_FAIL;
    } else {
        if (c.cmd.json)
            for (const sg_json_t *r = sg_json_first(rows); r; r = sg_json_next(r))
                sg_cmd_print_json(r);
        else
            list_table(rows);
        if (more)
            sg_cmd_more(rows, "saga_id");
    }
    sg_json_destroy(rows);
    return ctl_close(&c, rc);
}
