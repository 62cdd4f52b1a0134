/* make bench: `sagactl list`'s first page over 1,000,000 sagas, beside
 * the raw floor of the same machine.
 *
 * The sagas (3 steps each, 3,000,000 step rows) are bulk-inserted with
 * generate_series, created one second apart, mostly finished, some
 * running, a few stalled.  Timed, each the median of LIST_RUNS:
 *   - the floor: the page's keyset SELECT alone (50 rows) in a libpq loop;
 *   - the same SELECT with the index sagas_created dropped (what migration
 *     0010 saves), run once after the others;
 *   - `sagactl list`, `list --status running` and `list --stuck 10m`, the
 *     whole process: start, config, connection, query, table on stdout.
 * Prints a table and writes bench/results/ctl.json.  Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_pg.h"
#include "bench_util.h"

#define SAGAS     1000000
#define LIST_RUNS 7

static char dsn[512], dsn_env[600];

static void fill(sg_pg_t *pg)
{
    char count[24];
    const char *p[] = {count};

    snprintf(count, sizeof(count), "%d", SAGAS);
    /* 1 in 25 running (1 in 5 of those idle for an hour: stalled), 1 in
     * 50 compensated, 1 in 100 failed, the rest completed. */
    exec(pg,
         "INSERT INTO sagas (saga_id, name, status, definition, seq, created_at, updated_at) "
         "SELECT 'b-' || g, 'checkout-' || (g % 10), "
         " CASE WHEN g % 25 = 0 THEN 'running' WHEN g % 50 = 1 THEN 'compensated' "
         "      WHEN g % 100 = 2 THEN 'failed' ELSE 'completed' END, '{}', 4, "
         " now() - ($1::int - g) * interval '1 second', "
         " now() - ($1::int - g) * interval '1 second' + "
         "   CASE WHEN g % 125 = 0 THEN interval '0' ELSE interval '1 second' END "
         "FROM generate_series(1, $1::int) g",
         1, p);
    exec(pg,
         "UPDATE sagas SET updated_at = now() WHERE status = 'running' AND "
         "substr(saga_id, 3)::int % 125 <> 0",
         0, NULL);
    exec(pg,
         "INSERT INTO steps (saga_id, idx, name, tool, status, attempts) "
         "SELECT s.saga_id, i, 'step-' || i, 'tool.' || i, "
         " CASE s.status WHEN 'completed' THEN 'succeeded' WHEN 'running' THEN "
         "  CASE WHEN i = 0 THEN 'succeeded' WHEN i = 1 THEN 'running' ELSE 'pending' END "
         "  WHEN 'compensated' THEN 'compensated' ELSE 'compensation_failed' END, 1 "
         "FROM sagas s, generate_series(0, 2) i",
         0, NULL);
    exec(pg, "VACUUM ANALYZE sagas", 0, NULL);
    exec(pg, "VACUUM ANALYZE steps", 0, NULL);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static const char floor_sql[] = "SELECT s.saga_id, s.name, s.status, s.created_at, s.updated_at "
                                "FROM sagas s ORDER BY s.created_at DESC, s.saga_id DESC LIMIT 51";

static double floor_ms(sg_pg_t *pg)
{
    double f[LIST_RUNS];

    for (int i = 0; i < LIST_RUNS; i++) {
        sg_pg_res_t *res;
        sg_err_t err;
        double t0 = now_s();
        if (sg_pg_exec(pg, floor_sql, 0, NULL, &res, &err) < 0)
            die("list floor", err.message);
        f[i] = (now_s() - t0) * 1000.0;
        if (sg_pg_res_rows(res) != 51)
            die("list floor", "not a full page");
        sg_pg_res_destroy(res);
    }
    return median(f, LIST_RUNS);
}

static double tool_ms(char *const *args)
{
    char *const env[] = {dsn_env, NULL};
    double t[LIST_RUNS];

    for (int i = 0; i < LIST_RUNS; i++) {
        double t0 = now_s();
        int rc = bench_run("sagactl", args, env);
        if (rc != 0) {
            fprintf(stderr, "bench-ctl: sagactl %s %s exited %d\n", args[0], args[1] ? args[1] : "",
                    rc);
            exit(1);
        }
        t[i] = (now_s() - t0) * 1000.0;
    }
    return median(t, LIST_RUNS);
}

int main(void)
{
    char *const list[] = {"list", NULL};
    char *const running[] = {"list", "--status", "running", NULL};
    char *const stuck[] = {"list", "--stuck", "10m", NULL};
    char *const version[] = {"--version", NULL};
    char db[64];
    sg_pg_t *pg;
    double fill_s, floor, no_index, start, ms_list, ms_running, ms_stuck;
    FILE *fp;

    bench_name = "bench-ctl";
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", dsn);
    fill_s = now_s();
    fill(pg);
    fill_s = now_s() - fill_s;
    floor = floor_ms(pg);
    start = tool_ms(version);
    ms_list = tool_ms(list);
    ms_running = tool_ms(running);
    ms_stuck = tool_ms(stuck);
    exec(pg, "DROP INDEX sagas_created", 0, NULL);
    no_index = floor_ms(pg);
    sg_pg_destroy(pg);
    bench_drop_db(db);

    printf("\nsagactl list (first page of 50, over %d sagas and %d steps; filled in %.0f s)\n",
           SAGAS, 3 * SAGAS, fill_s);
    printf("  floor: the page's keyset SELECT (libpq)      %10.2f ms\n", floor);
    printf("  floor: sagactl --version (process start)     %10.2f ms\n", start);
    printf("  sagactl list                                 %10.2f ms  (target < 50)\n", ms_list);
    printf("  sagactl list --status running                %10.2f ms\n", ms_running);
    printf("  sagactl list --stuck 10m                     %10.2f ms\n", ms_stuck);
    printf("  the SELECT without the index sagas_created   %10.2f ms\n", no_index);
    if (system("mkdir -p bench/results") == 0 && (fp = fopen("bench/results/ctl.json", "w"))) {
        fprintf(fp,
                "{\"sagas\": %d, \"floor_select_ms\": %.2f, \"floor_process_start_ms\": %.2f, "
                "\"sagactl_list_ms\": %.2f, \"sagactl_list_status_ms\": %.2f, "
                "\"sagactl_list_stuck_ms\": %.2f, \"select_without_index_ms\": %.2f, "
                "\"time\": %ld}\n",
                SAGAS, floor, start, ms_list, ms_running, ms_stuck, no_index, (long)time(NULL));
        fclose(fp);
    }
    return 0;
}
