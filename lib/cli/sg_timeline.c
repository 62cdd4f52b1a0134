#include "sagad/sg_timeline.h"

#include "sagad/sg_table.h"

static const char timeline_sql[] =
    "SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), kind, detail, "
    "jsonb_build_object('time', t, 'kind', kind, 'detail', detail)::text FROM ("
    " SELECT s.created_at AS t, 1 AS ord, 'accepted' AS kind, format('%s, %s steps, %s', s.name, "
    "  (SELECT count(*) FROM steps st WHERE st.saga_id = s.saga_id), "
    "  coalesce('submitted by ' || s.submitted_by || ' (verified)', 'unsigned')) AS detail "
    "  FROM sagas s WHERE s.saga_id = $1"
    " UNION ALL"
    " SELECT a.started_at, 2, CASE a.phase WHEN 'forward' THEN 'attempt' ELSE 'compensation' END,"
    "  format('step %s (%s) g%s #%s: %s%s, key %s%s%s', a.step_idx, st.name, a.generation, "
    "  a.attempt, coalesce(a.status, 'unfinished'), coalesce(' ' || a.error_code, ''), "
    "  a.idempotency_key, coalesce(', ' || a.latency_ms || ' ms', ''), "
    "  coalesce(', sent ' || a.args::text, '')) "
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
    " SELECT r.created_at, 5, 'replay', format('#%s of dead letter #%s by %s: %s%s%s%s%s (%s)', "
    "  r.id, r.dead_letter_id, r.operator, r.action, ', generation ' || r.new_generation, "
    "  ', key ' || r.new_key, "
    "  (SELECT ', kept steps ' || string_agg(e->>'step', ' ') FROM jsonb_array_elements("
    "   r.kept) e), "
    "  (SELECT ', REPEATED steps ' || string_agg(e->>'step', ' ') || ' (--rerun-from ' || "
    "   r.rerun_from || ')' FROM jsonb_array_elements(r.repeats) e), r.reason) "
    "  FROM replays r JOIN dead_letters d ON d.id = r.dead_letter_id WHERE d.saga_id = $1"
    " UNION ALL"
    " SELECT c.decided_at, 5, c.command, format('%s by %s%s%s: %s%s', c.outcome, "
    "  coalesce(c.principal || ' (verified)', c.requested_by || ' (unsigned)'), "
    "  CASE WHEN c.principal IS NOT NULL AND c.requested_by <> c.principal "
    "  THEN ' for ' || c.requested_by ELSE '' END, "
    "  coalesce(', step ' || c.step_idx, ''), c.reason, coalesce(' (' || c.error_code || ')', '')) "
    "  FROM saga_controls c WHERE c.saga_id = $1"
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

/* The first ncols columns of every row of res, under header. */
static void print_res(const sg_pg_res_t *res, const char *const *header, int ncols, FILE *out,
                      int maxw)
{
    sg_table_t *t = sg_table_new(header, ncols);

    for (size_t r = 0; r < sg_pg_res_rows(res); r++) {
        const char *cells[8];
        for (int c = 0; c < ncols; c++)
            cells[c] = sg_pg_res_get(res, r, c);
        sg_table_add(t, cells);
    }
    sg_table_print(t, out, maxw);
    sg_table_destroy(t);
}

int sg_timeline_print(sg_pg_t *pg, const char *saga_id, bool json, FILE *out, sg_err_t *err)
{
    static const char *const tl_h[] = {"TIME (UTC)", "WHAT", "DETAIL"};
    static const char *const steps_h[] = {"STEP",     "NAME",          "TOOL", "STATUS",
                                          "ATTEMPTS", "COMP_ATTEMPTS", "KEY",  "ERROR"};
    sg_pg_res_t *res = NULL, *steps = NULL;
    int rc = 1;

    if (sg_pg_exec(pg, timeline_sql, 1, &saga_id, &res, err) < 0 ||
        sg_pg_exec(pg, steps_sql, 1, &saga_id, &steps, err) < 0) {
        rc = -1;
    } else if (sg_pg_res_rows(res) == 0) {
        rc = 0;
    } else if (json) {
        for (size_t r = 0; r < sg_pg_res_rows(res); r++)
            fprintf(out, "%s\n", sg_pg_res_get(res, r, 3));
    } else {
        fprintf(out, "saga %s\n\n", saga_id);
        print_res(res, tl_h, 3, out, 120);
        if (sg_pg_res_rows(steps)) {
            fprintf(out, "\nsteps now:\n");
            print_res(steps, steps_h, 8, out, 80);
        }
    }
    sg_pg_res_destroy(res);
    sg_pg_res_destroy(steps);
    return rc;
}
