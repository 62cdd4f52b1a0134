/* dlq-tool list: dead letters, newest first, under the filter options. */
#include <stdio.h>
#include <string.h>

#include "dlq.h"

/* The fields of one entry in --json output (documented in docs/DLQ.md). */
#define LIST_JSON                                                                                  \
    "jsonb_build_object('id', d.id, 'status', d.status, 'created_at', d.created_at, "              \
    "'error_code', d.error_code, 'error_class', d.error_class, 'message', d.message, "             \
    "'saga_id', d.saga_id, 'saga_name', d.saga_name, 'step', d.step_idx, "                         \
    "'step_name', d.step_name, 'tool', d.tool, 'phase', d.phase, 'attempts', d.attempts, "         \
    "'original_topic', d.original_topic, 'first_failure_at', d.first_failure_at, "                 \
    "'last_failure_at', d.last_failure_at, 'resolved_at', d.resolved_at, "                         \
    "'revisions', (SELECT count(*) FROM dead_letter_revisions v WHERE v.dead_letter_id = d.id), "  \
    "'replays', (SELECT count(*) FROM replays r WHERE r.dead_letter_id = d.id))::text"

#define LIST_TABLE                                                                                 \
    "d.id, d.status, to_char(d.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), "          \
    "d.error_code, d.error_class, d.saga_id, d.step_idx || ' ' || d.step_name, d.tool, "           \
    "d.attempts, replace(d.message, E'\\n', ' ')"

int dlq_cmd_list(sg_cli_t *cli, int argc, char **argv)
{
    static const char *const header[] = {"ID",   "STATUS", "CREATED (UTC)", "CODE",     "CLASS",
                                         "SAGA", "STEP",   "TOOL",          "ATTEMPTS", "MESSAGE"};
    dlq_t d;
    dlq_filter_t f;
    sg_pg_res_t *res = NULL;
    char sql[2048];
    const char *before;
    bool json;
    long n;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return dlq_close(&d, rc);
    if (d.args.npos) {
        dlq_warn(&d, "takes no arguments, only options (try dlq-tool list --help)");
        return dlq_close(&d, SG_EXIT_USAGE);
    }
    if (dlq_filter_build(&d, &f, NULL) < 0 || dlq_opt_long(&d, "--limit", 50, 1000000, &n) < 0)
        return dlq_close(&d, SG_EXIT_USAGE);
    if ((before = sg_cli_opt(&d.args, "--before"))) {
        if (dlq_ids_check(&d, &before, 1) < 0)
            return dlq_close(&d, SG_EXIT_USAGE);
        dlq_filter_add(&f, "d.id < $%d::bigint", dlq_filter_param(&f, before));
    }
    json = sg_cli_opt(&d.args, "--json") != NULL;
    snprintf(sql, sizeof(sql), "SELECT %s FROM dead_letters d%s ORDER BY d.id DESC LIMIT $%d",
             json ? LIST_JSON : LIST_TABLE, f.where, dlq_filter_param(&f, SG_PG_INT(n)));
    if ((rc = dlq_query(&d, sql, f.n, f.params, &res)))
        return dlq_close(&d, rc);
    if (sg_pg_res_rows(res) == 0) {
        fprintf(stderr, "no dead letters match\n");
        rc = SG_EXIT_FAIL;
    } else if (json) {
        for (size_t r = 0; r < sg_pg_res_rows(res); r++)
            printf("%s\n", sg_pg_res_get(res, r, 0));
    } else {
        dlq_table(res, header, 10, 60);
    }
    sg_pg_res_destroy(res);
    return dlq_close(&d, rc);
}
