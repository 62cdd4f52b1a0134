/* dlq-tool stats: counts by error code and class, pending by age, the
 * oldest pending entry, replays by outcome (sg_dlq_stats); also as
 * Prometheus text (--prometheus) for a textfile collector or a cron job. */
#include <stdio.h>
#include <stdlib.h>

#include "dlq.h"
#include "sagad/sg_table.h"

/* A label value of the exposition format: \, " and line feeds escaped. */
static void label(const char *v)
{
    for (; v && *v; v++) {
        if (*v == '\\' || *v == '"')
            printf("\\%c", *v);
        else if (*v == '\n')
            printf("\\n");
        else
            putchar(*v);
    }
}

/* A number member as JSON writes it ("0" when absent). */
static void number(const sg_json_t *o, const char *key)
{
    char *v = sg_table_cell(o, key, SG_CELL_TEXT);

    fputs(v ? v : "0", stdout);
    free(v);
}

static void prometheus(const sg_json_t *s)
{
    static const char *const status[] = {"pending", "replayed", "discarded"};

    printf("# HELP sagad_dlq_dead_letters Dead letters in the ledger by error code, class and "
           "status.\n# TYPE sagad_dlq_dead_letters gauge\n");
    for (const sg_json_t *c = sg_json_first(sg_json_member(s, "by_code")); c; c = sg_json_next(c)) {
        for (int st = 0; st < 3; st++) {
            printf("sagad_dlq_dead_letters{code=\"");
            label(sg_json_string(sg_json_member(c, "error_code")));
            printf("\",class=\"");
            label(sg_json_string(sg_json_member(c, "error_class")));
            printf("\",status=\"%s\"} ", status[st]);
            number(c, status[st]);
            putchar('\n');
        }
    }
    printf("# HELP sagad_dlq_pending Dead letters waiting for an operator.\n"
           "# TYPE sagad_dlq_pending gauge\nsagad_dlq_pending ");
    number(s, "pending");
    printf("\n# HELP sagad_dlq_oldest_pending_age_seconds Age of the oldest pending dead letter, "
           "0 when none is pending.\n# TYPE sagad_dlq_oldest_pending_age_seconds gauge\n"
           "sagad_dlq_oldest_pending_age_seconds ");
    number(s, "oldest_pending_age_s");
    printf("\n# HELP sagad_dlq_replays Operator replays by outcome (the replayed saga's state "
           "now).\n# TYPE sagad_dlq_replays gauge\n");
    for (const sg_json_t *o = sg_json_first(sg_json_member(s, "replays_by_outcome")); o;
         o = sg_json_next(o)) {
        char *n = sg_json_print(o);
        printf("sagad_dlq_replays{outcome=\"");
        label(sg_json_key(o));
        printf("\"} %s\n", n);
        free(n);
    }
}

/* The members of an object {name: count} as a table of two columns. */
static void pairs(const sg_json_t *obj, const char *name_h)
{
    const char *const header[] = {name_h, "COUNT"};
    sg_table_t *t = sg_table_new(header, 2);

    for (const sg_json_t *o = sg_json_first(obj); o; o = sg_json_next(o)) {
        char *n = sg_json_print(o);
        sg_table_add(t, (const char *const[]){sg_json_key(o), n});
        free(n);
    }
    sg_table_print(t, stdout, 60);
    sg_table_destroy(t);
}

static void human(const sg_json_t *s)
{
    static const sg_table_col_t code_cols[] = {
        {"CODE", "error_code", SG_CELL_TEXT},
        {"CLASS", "error_class", SG_CELL_TEXT},
        {"PENDING", "pending", SG_CELL_TEXT},
        {"REPLAYED", "replayed", SG_CELL_TEXT},
        {"DISCARDED", "discarded", SG_CELL_TEXT},
        {"TOTAL", "total", SG_CELL_TEXT},
        {NULL, NULL, SG_CELL_TEXT},
    };
    char *oldest = sg_table_cell(s, "oldest_pending_id", SG_CELL_TEXT);

    printf("pending ");
    number(s, "pending");
    printf(", replayed ");
    number(s, "replayed");
    printf(", discarded ");
    number(s, "discarded");
    putchar('\n');
    if (oldest) {
        char *at = sg_table_cell(s, "oldest_pending_at", SG_CELL_TIME);
        printf("oldest pending: %s, created %s UTC, ", oldest, at ? at : "?");
        number(s, "oldest_pending_age_s");
        printf(" s old\n");
        free(at);
    }
    free(oldest);
    printf("\n");
    sg_table_print_rows(stdout, code_cols, sg_json_member(s, "by_code"), 60);
    printf("\n");
    pairs(sg_json_member(s, "pending_by_age"), "PENDING AGE");
    printf("\n");
    pairs(sg_json_member(s, "replays_by_outcome"), "REPLAY OUTCOME");
}

int dlq_cmd_stats(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    sg_json_t *s = NULL;
    sg_err_t err;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return sg_cmd_close(&d, rc);
    if (sg_cmd_no_args(&d) < 0)
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    if (sg_dlq_stats(d.pg, &s, &err) < 0)
        rc = sg_cmd_fail(&d, "query failed", &err);
    else if (sg_cli_opt(&d.args, "--prometheus"))
        prometheus(s);
    else if (d.json)
        sg_cmd_print_json(s);
    else
        human(s);
    sg_json_destroy(s);
    return sg_cmd_close(&d, rc);
}
