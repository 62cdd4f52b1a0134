/* dlq-tool saga ID: one saga's timeline from the tables: acceptance,
 * every attempt and compensation (with generation and idempotency key),
 * dead letters, replays, revisions, and where it stands now. */
#include <stdio.h>

#include "dlq.h"

static const char timeline_sql[] =
    "SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), kind, detail, "
    "jsonb_build_object('time', t, 'kind', kind, 'detail', detail)::text FROM ("
    " SELECT s.created_at AS t, 1 AS ord, 'accepted' AS kind, format('%s, %s steps', s.name, "
    "  (SELECT count(*) FROM steps st WHERE st.saga_id = s.saga_id)) AS detail "
    "  FROM sagas s WHERE s.saga_id = $1"
    " UNION ALL"
    " SELECT a.started_at, 2, CASE a.phase WHEN 'forward' THEN 'attempt' ELSE 'compensation' END,"
    "  format('step %s (%s) g%s #%s: %s%s, key %s%s', a.step_idx, st.name, a.generation, "
    "  a.attempt, coalesce(a.status, 'unfinished'), coalesce(' ' || a.error_code, ''), "
    "  a.idempotency_key, coalesce(', ' || a.latency_ms || ' ms', '')) "
    "  FROM attempts a JOIN steps st ON st.saga_id = a.saga_id AND st.idx = a.step_idx "
    "  WHERE a.saga_id = $1"
    " UNION ALL"
    " SELECT d.created_at, 3, 'dead letter', format('#%s %s (%s)%s, %s: %s', d.id, d.error_code, "
    "  d.error_class, coalesce(' at step ' || d.step_idx || ' (' || d.step_name || ')', ''), "
    "  d.status, d.message) FROM dead_letters d WHERE d.saga_id = $1"
    " UNION ALL"
    " SELECT v.created_at, 4, 'edit', format('dead letter #%s revision %s by %s%s', "
    "  v.dead_letter_id, v.revision, v.operator, coalesce(': ' || v.reason, '')) "
    "  FROM dead_letter_revisions v JOIN dead_letters d ON d.id = v.dead_letter_id "
    "  WHERE d.saga_id = $1"
    " UNION ALL"
    " SELECT r.created_at, 5, 'replay', format('#%s of dead letter #%s by %s: %s%s%s (%s)', "
    "  r.id, r.dead_letter_id, r.operator, r.action, ', generation ' || r.new_generation, "
    "  ', key ' || r.new_key, r.reason) "
    "  FROM replays r JOIN dead_letters d ON d.id = r.dead_letter_id WHERE d.saga_id = $1"
    " UNION ALL"
    " SELECT d.resolved_at, 6, 'discarded', format('dead letter #%s by %s: %s', d.id, "
    "  coalesce(d.resolved_by, '?'), d.resolution_reason) FROM dead_letters d "
    "  WHERE d.saga_id = $1 AND d.status = 'discarded'"
    " UNION ALL"
    " SELECT s.updated_at, 7, 'now', format('%s, generation %s, last event seq %s', s.status, "
    "  s.generation, s.seq) FROM sagas s WHERE s.saga_id = $1"
    ") x ORDER BY t, ord";

static const char steps_sql[] =
    "SELECT idx, name, tool, status, attempts, comp_attempts, idempotency_key, error_code "
    "FROM steps WHERE saga_id = $1 ORDER BY idx";

int dlq_cmd_saga(sg_cli_t *cli, int argc, char **argv)
{
    static const char *const tl_h[] = {"TIME (UTC)", "WHAT", "DETAIL"};
    static const char *const steps_h[] = {"STEP",     "NAME",          "TOOL", "STATUS",
                                          "ATTEMPTS", "COMP_ATTEMPTS", "KEY",  "ERROR"};
    dlq_t d;
    sg_pg_res_t *res = NULL, *steps = NULL;
    const char *id;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return dlq_close(&d, rc);
    if (d.args.npos != 1) {
        dlq_warn(&d, "needs one saga ID (try dlq-tool saga --help)");
        return dlq_close(&d, SG_EXIT_USAGE);
    }
    id = d.args.pos[0];
    if ((rc = dlq_query(&d, timeline_sql, 1, &id, &res)) ||
        (rc = dlq_query(&d, steps_sql, 1, &id, &steps)))
        goto out;
    if (sg_pg_res_rows(res) == 0) {
        dlq_warn(&d, "no saga and no dead letter with saga id %s", id);
        rc = SG_EXIT_FAIL;
    } else if (sg_cli_opt(&d.args, "--json")) {
        for (size_t r = 0; r < sg_pg_res_rows(res); r++)
            printf("%s\n", sg_pg_res_get(res, r, 3));
    } else {
        printf("saga %s\n\n", id);
        dlq_table(res, tl_h, 3, 120);
        if (sg_pg_res_rows(steps)) {
            printf("\nsteps now:\n");
            dlq_table(steps, steps_h, 8, 80);
        }
    }
out:
    sg_pg_res_destroy(res);
    sg_pg_res_destroy(steps);
    return dlq_close(&d, rc);
}
