/* Migrations against the real local PostgreSQL: concurrent runs of the
 * real binaries converge on one version with each migration applied once. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/sg_test.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"
#include "../../worker/worker.h"

static char db[128], dsn[512], dsn_env[600];

static void setup(void)
{
    sgt_db_create(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", dsn);
}

static void teardown(void)
{
    sgt_db_drop(db);
}

TestSuite(migrate, .init = setup, .fini = teardown);

Test(migrate, concurrent_binaries_converge_on_one_version)
{
    const char *progs[] = {"sagad-worker", "sagad-relay", "dlq-tool", "sagad-worker"};
    const char *args[] = {"migrate", NULL};
    const char *env[] = {dsn_env, NULL};
    sgt_proc_t procs[4];
    int latest = sg_migrate_latest(), migrated = 0, current = 0;
    char did[64], none[64];
    sg_pg_t *pg;

    /* The lock is held for a whole run: one process migrates everything,
     * the others wait and find the schema current. */
    snprintf(did, sizeof(did), "schema migrated from version 0 to %d\n", latest);
    snprintf(none, sizeof(none), "schema is up to date at version %d\n", latest);
    for (int i = 0; i < 4; i++)
        sgt_spawn(&procs[i], progs[i], args, env);
    for (int i = 0; i < 4; i++) {
        char *out, *err;
        int rc = sgt_wait(&procs[i], &out, &err);

        cr_expect_eq(rc, 0, "%s migrate exited %d: %s", progs[i], rc, err);
        migrated += strcmp(out, did) == 0;
        current += strcmp(out, none) == 0;
        cr_expect(strcmp(out, did) == 0 || strcmp(out, none) == 0, "%s stdout: %s", progs[i], out);
        free(out);
        free(err);
    }
    cr_expect_eq(migrated, 1, "one process applied the migrations");
    cr_expect_eq(current, 3, "the others found the schema current");
    pg = sgt_db_connect(dsn);
    cr_expect_eq(sgt_query_int(pg, "SELECT max(version) FROM sagad_schema_migrations"), latest);
    /* Each migration recorded exactly once: the advisory lock serialised. */
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM sagad_schema_migrations"), latest);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM pg_tables WHERE tablename IN ('sagas', "
                                   "'steps', 'attempts', 'outbox', 'timers', 'consumer_offsets', "
                                   "'dead_letters', 'replays')"),
                 8);
    sg_pg_destroy(pg);
}

Test(migrate, second_run_is_a_no_op)
{
    const char *args[] = {"migrate", NULL};
    const char *env[] = {dsn_env, NULL};
    char *out, *err, expect[64];

    cr_assert_eq(sgt_run("sagad-worker", args, env, NULL, NULL), 0);
    cr_assert_eq(sgt_run("sagad-relay", args, env, &out, &err), 0, "%s", err);
    snprintf(expect, sizeof(expect), "schema is up to date at version %d", sg_migrate_latest());
    cr_expect(strstr(out, expect) != NULL, "stdout: %s", out);
    free(out);
    free(err);
}

Test(migrate, in_process_run_reports_versions)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    sg_err_t err;
    int from = -1, to = -1, cur = -1;

    cr_assert_eq(sg_migrate_current(pg, &cur, &err), 0, "%s", err.message);
    cr_expect_eq(cur, 0, "a new database has no schema version");
    cr_assert_eq(sg_migrate_run(pg, &from, &to, &err), 0, "%s", err.message);
    cr_expect_eq(from, 0);
    cr_expect_eq(to, sg_migrate_latest());
    cr_assert_eq(sg_migrate_run(pg, &from, &to, &err), 0, "%s", err.message);
    cr_expect_eq(from, to);
    sg_pg_destroy(pg);
}

/* The worker reads a batch's sagas with their steps while it holds their
 * locks.  On tables autovacuum has not analyzed yet (a new install taking
 * its first load), a plain join was planned as a hash of the whole steps
 * table: every batch read all of it.  The plan must look the steps up by
 * saga, statistics or not. */
Test(migrate, worker_load_finds_steps_by_saga_on_tables_never_analyzed)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    sg_pg_res_t *res = NULL;
    sg_err_t err;
    int from, to;
    char plan[8192] = "";
    const char *ids = "{s-17,s-4711,s-9000,s-12345,s-19999}";
    char *explain = malloc(sizeof("EXPLAIN ") + strlen(worker_sql_load));

    cr_assert_not_null(explain);
    cr_assert_eq(sg_migrate_run(pg, &from, &to, &err), 0, "%s", err.message);
    cr_assert_eq(
        sg_pg_exec(pg,
                   "WITH s AS (INSERT INTO sagas (saga_id, name, definition) "
                   "SELECT 's-' || g, 'plan', '{}' FROM generate_series(1, 20000) g "
                   "RETURNING saga_id) INSERT INTO steps (saga_id, idx, name, tool) "
                   "SELECT saga_id, i, 'step' || i, 'noop' FROM s, generate_series(0, 2) i",
                   0, NULL, NULL, &err),
        0, "%s", err.message);
    cr_assert_eq(sgt_query_int(pg, "SELECT count(*) FROM pg_stats WHERE tablename = 'steps'"), 0,
                 "steps must not have statistics for this test to mean anything");
    strcpy(explain, "EXPLAIN ");
    strcat(explain, worker_sql_load);
    cr_assert_eq(sg_pg_exec(pg, explain, 1, &ids, &res, &err), 0, "%s", err.message);
    for (size_t r = 0; r < sg_pg_res_rows(res); r++) {
        strncat(plan, sg_pg_res_get(res, r, 0), sizeof(plan) - strlen(plan) - 2);
        strcat(plan, "\n");
    }
    cr_expect(strstr(plan, "Seq Scan on steps") == NULL, "the load scans all steps:\n%s", plan);
    cr_expect(strstr(plan, "on steps") != NULL, "the plan reads steps:\n%s", plan);
    sg_pg_res_destroy(res);
    free(explain);
    cr_assert_eq(sg_pg_exec(pg, worker_sql_load, 1, &ids, &res, &err), 0, "%s", err.message);
    cr_expect_eq(sg_pg_res_rows(res), 15, "5 sagas of 3 steps each");
    sg_pg_res_destroy(res);
    sg_pg_destroy(pg);
}

/* The worker writes an outbox row's shard itself (0007); every other
 * writer leaves it to the trigger.  One saga's rows must land in one shard
 * either way, or the relays would publish its events out of order. */
Test(migrate, worker_outbox_rows_take_the_shard_the_trigger_would)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    sg_pg_buf_t lit[4] = {{0}};
    const char *topics[64], *keys[64], *heads[64], *pays[64], *p[4];
    char names[64][16];
    sg_err_t err;
    int from, to;

    cr_assert_eq(sg_migrate_run(pg, &from, &to, &err), 0, "%s", err.message);
    cr_assert_eq(sg_pg_exec(pg, "UPDATE relay_settings SET shards = 4", 0, NULL, NULL, &err), 0,
                 "%s", err.message);
    for (int i = 0; i < 64; i++) {
        snprintf(names[i], sizeof(names[i]), "saga-%d", i);
        topics[i] = "w";
        keys[i] = i == 63 ? NULL : names[i];
        heads[i] = "{}";
        pays[i] = "x";
    }
    sg_pg_array_literal(&lit[0], topics, 64);
    sg_pg_array_literal(&lit[1], keys, 64);
    sg_pg_array_literal(&lit[2], heads, 64);
    sg_pg_array_literal(&lit[3], pays, 64);
    for (int k = 0; k < 4; k++)
        p[k] = lit[k].data;
    /* With the trigger off, the shards are the worker statement's own. */
    cr_assert_eq(
        sg_pg_exec(pg, "ALTER TABLE outbox DISABLE TRIGGER outbox_shard", 0, NULL, NULL, &err), 0,
        "%s", err.message);
    cr_assert_eq(sg_pg_exec(pg, worker_sql_outbox, 4, p, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(
        sg_pg_exec(pg, "ALTER TABLE outbox ENABLE TRIGGER outbox_shard", 0, NULL, NULL, &err), 0,
        "%s", err.message);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox WHERE shard < 0"), 0,
                 "the worker's statement sets every row's shard itself");
    cr_assert_eq(sg_pg_exec(pg,
                            "INSERT INTO outbox (topic, key, payload) SELECT 't', key, payload "
                            "FROM outbox WHERE topic = 'w' ORDER BY id",
                            0, NULL, NULL, &err),
                 0, "%s", err.message);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox"), 128);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox w JOIN outbox t ON t.topic = 't' "
                                   "AND t.key IS NOT DISTINCT FROM w.key AND t.shard = w.shard "
                                   "WHERE w.topic = 'w'"),
                 64, "each key has the same shard from the worker and from the trigger");
    cr_expect_eq(sgt_query_int(pg, "SELECT count(DISTINCT shard) FROM outbox WHERE shard >= 0"), 4,
                 "64 keys spread over the 4 shards");
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox WHERE key IS NULL AND shard = 0"),
                 2, "a row without a key goes to shard 0");
    for (int k = 0; k < 4; k++)
        sg_pg_buf_free(&lit[k]);
    sg_pg_destroy(pg);
}

/* What each of the worker's steps costs PostgreSQL (migration 0027): a
 * step's status changes are HOT updates (no index of steps names status,
 * not even in a predicate), the steps waiting for a person are still
 * found (steps_waiting, kept by triggers), and with the table source no
 * trigger of the WAL source runs for an outbox row.  With 0024's partial
 * index back, the HOT count is 0. */
Test(migrate, a_step_status_change_stays_a_hot_update_and_the_table_source_runs_no_wal_trigger)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    sg_err_t err;
    int from, to;
    static const char *const steps[] = {
        "UPDATE steps SET status = 'running', updated_at = now() WHERE saga_id = 'h-1'",
        "UPDATE steps SET status = 'awaiting_approval', updated_at = now() "
        "WHERE saga_id = 'h-1' AND idx = 1",
        "UPDATE steps SET status = 'succeeded', updated_at = now() WHERE saga_id = 'h-1' AND idx = "
        "0",
    };

    cr_assert_eq(sg_migrate_run(pg, &from, &to, &err), 0, "%s", err.message);
    cr_assert_eq(sg_pg_exec(pg, "BEGIN", 0, NULL, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(sg_pg_exec(pg,
                            "WITH s AS (INSERT INTO sagas (saga_id, name, definition) VALUES "
                            "('h-1', 'hot', '{}') RETURNING saga_id) INSERT INTO steps (saga_id, "
                            "idx, name, tool) SELECT saga_id, i, 'step' || i, 'noop' FROM s, "
                            "generate_series(0, 2) i",
                            0, NULL, NULL, &err),
                 0, "%s", err.message);
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        cr_assert_eq(sg_pg_exec(pg, steps[i], 0, NULL, NULL, &err), 0, "%s", err.message);
    cr_expect_eq(sgt_query_int(pg, "SELECT n_tup_upd FROM pg_stat_xact_user_tables "
                                   "WHERE relid = 'steps'::regclass"),
                 5);
    cr_expect_eq(sgt_query_int(pg, "SELECT n_tup_hot_upd FROM pg_stat_xact_user_tables "
                                   "WHERE relid = 'steps'::regclass"),
                 5, "every status change of a step is a HOT update");
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM steps_waiting "
                                   "WHERE saga_id = 'h-1' AND idx = 1"),
                 1, "the step waiting for a person is listed");
    cr_assert_eq(
        sg_pg_exec(pg, "UPDATE steps SET status = 'approved' WHERE saga_id = 'h-1' AND idx = 1", 0,
                   NULL, NULL, &err),
        0, "%s", err.message);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM steps_waiting"), 0,
                 "a step approved is no longer listed");
    cr_assert_eq(sg_pg_exec(pg, "COMMIT", 0, NULL, NULL, &err), 0, "%s", err.message);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_emit' "
                                   "AND tgrelid = 'outbox'::regclass AND tgenabled = 'D'"),
                 1, "the WAL source's trigger is off while the source is the table");
    cr_assert_eq(sg_pg_exec(pg, "SELECT sagad_outbox_to_table()", 0, NULL, NULL, &err), 0, "%s",
                 err.message);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_emit' "
                                   "AND tgenabled = 'D'"),
                 1, "and stays off when the source is set to the table again");
    sg_pg_destroy(pg);
}

Test(migrate, refuses_a_newer_schema)
{
    const char *args[] = {"migrate", NULL};
    const char *env[] = {dsn_env, NULL};
    char sql[160], *err;
    sg_pg_t *pg;
    sg_err_t e;

    cr_assert_eq(sgt_run("sagad-worker", args, env, NULL, NULL), 0);
    pg = sgt_db_connect(dsn);
    snprintf(sql, sizeof(sql),
             "INSERT INTO sagad_schema_migrations (version, name) VALUES (%d, 'future')",
             sg_migrate_latest() + 1);
    cr_assert_eq(sg_pg_exec(pg, sql, 0, NULL, NULL, &e), 0, "%s", e.message);
    sg_pg_destroy(pg);
    cr_expect_eq(sgt_run("sagad-worker", args, env, NULL, &err), 1);
    cr_expect(strstr(err, "upgrade the binary") != NULL, "stderr: %s", err);
    cr_expect(strstr(err, "runtime.schema.newer") != NULL, "stderr: %s", err);
    free(err);
}

/* A worker whose statements need a newer schema than the database has
 * must not start: it would fail every batch and dead-letter every message
 * (what happened when 0007's shard function was missing). */
Test(migrate, worker_refuses_a_schema_older_than_it_needs)
{
    const char *margs[] = {"migrate", NULL}, *rargs[] = {"run", NULL};
    const char *env[] = {dsn_env, "SAGAD_WORKER_REGISTRY=examples/tools.json", NULL};
    char want[200], *err;
    sg_pg_t *pg;
    sg_err_t e;

    cr_assert_eq(sgt_run("sagad-worker", margs, env, NULL, NULL), 0);
    pg = sgt_db_connect(dsn);
    /* As a database migrated by the release before 0014 (results flow,
     * unknown outcomes; the worker needs 0028, sagad_outbox_write)
     * looks. */
    cr_assert_eq(sg_pg_exec(pg, "DELETE FROM sagad_schema_migrations WHERE version >= 14", 0, NULL,
                            NULL, &e),
                 0, "%s", e.message);
    sg_pg_destroy(pg);
    snprintf(want, sizeof(want), "%s",
             "database schema is at version 13, the worker needs 28: run `sagad-worker migrate`");
    cr_expect_eq(sgt_run("sagad-worker", rargs, env, NULL, &err), 1);
    cr_expect(strstr(err, want) != NULL, "stderr: %s", err);
    free(err);
}

Test(migrate, unreachable_database_exits_4)
{
    const char *args[] = {"migrate", NULL};
    const char *env[] = {"SAGAD_PG_DSN=postgresql://sagad:sagad@127.0.0.1:1/sagad",
                         "SAGAD_PG_CONNECT_ATTEMPTS=2", "SAGAD_PG_RETRY_BASE_MS=10", NULL};
    char *err;

    cr_expect_eq(sgt_run("sagad-worker", args, env, NULL, &err), 4);
    cr_expect(strstr(err, "cannot connect to PostgreSQL") != NULL, "stderr: %s", err);
    free(err);
}
