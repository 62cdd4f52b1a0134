/* make bench: dlq-tool beside the raw floors of the same machine.
 *
 * 1. replay: 10,000 pending dead letters replayed by `dlq-tool replay
 *    --code ... --yes` (one transaction per entry, no --rate), beside the
 *    same sagad_dlq_replay() statement in a tight libpq loop and beside
 *    a one-row INSERT per transaction (the commit floor);
 * 2. list: `dlq-tool list --code X` (first page, 50 rows) over 1,000,000
 *    ledger rows, process start and connection included, beside the same
 *    SELECT in a libpq loop.
 * Prints a table and writes bench/results/dlq.json.  Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_pg.h"
#include "bench_util.h"

#define REPLAY_N  10000
#define LIST_ROWS 1000000
#define LIST_RUNS 7

static char dsn[512], dsn_env[600];

/* n pending resubmission entries with error code `code`. */
static void fill(sg_pg_t *pg, const char *code, long n)
{
    char count[24];
    const char *p[] = {code, count};

    snprintf(count, sizeof(count), "%ld", n);
    exec(pg,
         "INSERT INTO dead_letters (error_code, error_class, message, saga_id, original_topic, "
         "original_key, payload) SELECT $1, 'poison', 'bench', 'b-' || g, 'sagad.commands', "
         "convert_to('b-' || g, 'UTF8'), convert_to('{\"v\":1,\"type\":\"saga.start\",\"saga_id\":"
         "\"b-' || g || '\"}', 'UTF8') FROM generate_series(1, $2::int) g",
         2, p);
}

static double floor_commit(sg_pg_t *pg, long n)
{
    double t0 = now_s();

    exec(pg, "CREATE TABLE bench_floor (id bigserial PRIMARY KEY, v text)", 0, NULL);
    for (long i = 0; i < n; i++)
        exec(pg, "INSERT INTO bench_floor (v) VALUES ('x')", 0, NULL);
    return (double)n / (now_s() - t0);
}

static double floor_replay_sql(sg_pg_t *pg, long n)
{
    sg_pg_res_t *res;
    sg_err_t err;
    double t0;
    long first;

    fill(pg, "bench.floor", n);
    first = (long)query_int(pg, "SELECT min(id) FROM dead_letters WHERE error_code = "
                                "'bench.floor'");
    t0 = now_s();
    for (long i = 0; i < n; i++) {
        char id[24];
        const char *p[] = {id};
        snprintf(id, sizeof(id), "%ld", first + i);
        if (sg_pg_exec(pg,
                       "SELECT outcome FROM sagad_dlq_replay($1::bigint, 'bench', 'bench', false, "
                       "true, 'sagad.commands', NULL)",
                       1, p, &res, &err) < 0)
            die("replay floor", err.message);
        sg_pg_res_destroy(res);
    }
    return (double)n / (now_s() - t0);
}

static double tool_replay(sg_pg_t *pg, long n)
{
    char *const args[] = {"replay", "--code",     "bench.tool", "--yes", "--reason",
                          "bench",  "--operator", "bench",      NULL};
    char *const env[] = {dsn_env, "SAGAD_LOG_LEVEL=warn", NULL};
    double t0;
    int rc;

    fill(pg, "bench.tool", n);
    t0 = now_s();
    if ((rc = bench_run("dlq-tool", args, env)) != 0) {
        fprintf(stderr, "bench-dlq: dlq-tool replay exited %d\n", rc);
        exit(1);
    }
    t0 = now_s() - t0;
    if (query_int(pg, "SELECT count(*) FROM dead_letters WHERE error_code = 'bench.tool' AND "
                      "status = 'replayed'") != n)
        die("replay", "not every entry was replayed");
    return (double)n / t0;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static void list_bench(sg_pg_t *pg, double *tool_ms, double *floor_ms)
{
    char *const args[] = {"list", "--code", "code.7", NULL};
    char *const env[] = {dsn_env, NULL};
    double t[LIST_RUNS], f[LIST_RUNS];
    char count[24];
    const char *p[] = {count};
    sg_pg_res_t *res;
    sg_err_t err;

    snprintf(count, sizeof(count), "%d", LIST_ROWS);
    exec(
        pg,
        "INSERT INTO dead_letters (error_code, error_class, message, saga_id, saga_name, step_idx, "
        "step_name, tool, phase, attempts, original_topic, payload, created_at) "
        "SELECT 'code.' || (g % 20), 'transient', 'downstream said no', 's-' || g, 'checkout', "
        "g % 4, 'step', 'tool.' || (g % 7), 'forward', 5, 'sagad.commands', "
        "convert_to('{}', 'UTF8'), now() - (($1::int - g) * interval '1 second') "
        "FROM generate_series(1, $1::int) g",
        1, p);
    exec(pg, "ANALYZE dead_letters", 0, NULL);
    for (int i = 0; i < LIST_RUNS; i++) {
        double t0 = now_s();
        if (bench_run("dlq-tool", args, env) != 0)
            die("list", "dlq-tool list failed");
        t[i] = (now_s() - t0) * 1000.0;
        t0 = now_s();
        if (sg_pg_exec(pg,
                       "SELECT d.id, d.status, d.created_at, d.error_code, d.error_class, "
                       "d.saga_id, d.step_idx, d.tool, d.attempts, d.message FROM dead_letters d "
                       "WHERE d.error_code = 'code.7' ORDER BY d.id DESC LIMIT 50",
                       0, NULL, &res, &err) < 0)
            die("list floor", err.message);
        sg_pg_res_destroy(res);
        f[i] = (now_s() - t0) * 1000.0;
    }
    *tool_ms = median(t, LIST_RUNS);
    *floor_ms = median(f, LIST_RUNS);
}

int main(void)
{
    char db[64];
    sg_pg_t *pg;
    double commit_floor, sql_floor, tool, list_ms, list_floor_ms;
    FILE *fp;

    bench_name = "bench-dlq";
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", dsn);
    commit_floor = floor_commit(pg, REPLAY_N);
    sql_floor = floor_replay_sql(pg, REPLAY_N);
    tool = tool_replay(pg, REPLAY_N);
    list_bench(pg, &list_ms, &list_floor_ms);
    sg_pg_destroy(pg);
    bench_drop_db(db);

    printf("\ndlq-tool (%d entries replayed; list over %d rows)\n", REPLAY_N, LIST_ROWS);
    printf("  floor: one-row INSERT per transaction      %10.0f tx/s\n", commit_floor);
    printf("  floor: sagad_dlq_replay() in a libpq loop   %10.0f entries/s\n", sql_floor);
    printf("  dlq-tool replay (no --rate)                 %10.0f entries/s  (target >= 2000)\n",
           tool);
    printf("  floor: list SELECT, first page              %10.2f ms\n", list_floor_ms);
    printf("  dlq-tool list --code (process, first page)  %10.2f ms  (target < 200)\n", list_ms);
    if (system("mkdir -p bench/results") == 0 && (fp = fopen("bench/results/dlq.json", "w"))) {
        fprintf(fp,
                "{\"replay_entries\": %d, \"floor_commit_tx_per_s\": %.0f, "
                "\"floor_replay_sql_entries_per_s\": %.0f, \"dlq_tool_replay_entries_per_s\": "
                "%.0f, \"list_rows\": %d, \"floor_list_first_page_ms\": %.2f, "
                "\"dlq_tool_list_first_page_ms\": %.2f, \"time\": %ld}\n",
                REPLAY_N, commit_floor, sql_floor, tool, LIST_ROWS, list_floor_ms, list_ms,
                (long)time(NULL));
        fclose(fp);
    }
    return 0;
}
