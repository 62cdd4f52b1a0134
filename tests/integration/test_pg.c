/* sg_pg against the real local PostgreSQL: parameters, SQLSTATE classes,
 * lost connections and secrets kept out of error text. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../support/sg_test.h"
#include "sagad/sg_pg.h"

static sg_pg_t *connect_url(const char *url, int attempts, sg_err_t *err)
{
    sg_pg_opts_t opts = {.dsn = url,
                         .application_name = "sagad-tests",
                         .connect_timeout_ms = 3000,
                         .connect_attempts = attempts,
                         .retry = {10, 50}};

    return sg_pg_connect(&opts, err);
}

Test(pg, parameters_round_trip_and_null)
{
    sg_err_t err;
    sg_pg_t *pg = connect_url(sgt_pg_url(), 3, &err);
    const char *params[] = {"it's \"quoted\"; DROP TABLE x", NULL};
    sg_pg_res_t *res;

    cr_assert_not_null(pg, "%s", err.message);
    cr_assert_eq(sg_pg_exec(pg, "SELECT $1::text, $2::text, 42::bigint", 2, params, &res, &err), 0,
                 "%s", err.message);
    cr_expect_eq(sg_pg_res_rows(res), 1);
    cr_expect_str_eq(sg_pg_res_get(res, 0, 0), params[0]);
    cr_expect_null(sg_pg_res_get(res, 0, 1), "SQL NULL reads as NULL");
    cr_expect_eq(sg_pg_res_int(res, 0, 2, -1), 42);
    cr_expect_null(sg_pg_res_get(res, 5, 0), "out-of-range row reads as NULL");
    sg_pg_res_destroy(res);
    sg_pg_destroy(pg);
}

Test(pg, sqlstate_classes_from_the_server)
{
    sg_err_t err;
    sg_pg_t *pg = connect_url(sgt_pg_url(), 3, &err);

    cr_assert_not_null(pg, "%s", err.message);
    cr_assert_eq(sg_pg_begin(pg, &err), 0, "%s", err.message);
    cr_assert_eq(sg_pg_exec(pg, "CREATE TEMP TABLE t (id int PRIMARY KEY)", 0, NULL, NULL, &err), 0,
                 "%s", err.message);
    cr_assert_eq(sg_pg_exec(pg, "INSERT INTO t VALUES (1)", 0, NULL, NULL, &err), 0);
    cr_expect_eq(sg_pg_exec(pg, "INSERT INTO t VALUES (1)", 0, NULL, NULL, &err), -1);
    cr_expect_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_expect_str_eq(err.code, "pg.constraint");
    cr_expect(strstr(err.message, "23505") != NULL, "%s", err.message);
    sg_pg_rollback(pg);

    cr_expect_eq(sg_pg_exec(pg, "SELEC 1", 0, NULL, NULL, &err), -1);
    cr_expect_str_eq(err.code, "pg.query");
    cr_expect_eq(sg_pg_exec(pg, "SELECT 'x'::int", 0, NULL, NULL, &err), -1);
    cr_expect_str_eq(err.code, "pg.data");
    cr_expect_eq(err.retriable, false);
    sg_pg_destroy(pg);
}

Test(pg, lost_connection_is_transient_and_reconnects)
{
    sg_err_t err;
    sg_pg_t *victim = connect_url(sgt_pg_url(), 3, &err);
    sg_pg_t *killer = connect_url(sgt_pg_url(), 3, &err);
    sg_pg_res_t *res;
    char pid[32];
    const char *params[] = {pid};

    cr_assert_not_null(victim);
    cr_assert_not_null(killer);
    cr_assert_eq(sg_pg_exec(victim, "SELECT pg_backend_pid()", 0, NULL, &res, &err), 0);
    snprintf(pid, sizeof(pid), "%s", sg_pg_res_get(res, 0, 0));
    sg_pg_res_destroy(res);
    cr_assert_eq(sg_pg_exec(killer, "SELECT pg_terminate_backend($1::int)", 1, params, NULL, &err),
                 0, "%s", err.message);
    cr_expect_eq(sg_pg_exec(victim, "SELECT 1", 0, NULL, NULL, &err), -1);
    cr_expect_eq(err.cls, SG_ERRCLASS_TRANSIENT, "got %s: %s", err.code, err.message);
    cr_expect(err.retriable);
    cr_expect_not(sg_pg_ok(victim));
    cr_assert_eq(sg_pg_reconnect(victim, &err), 0, "%s", err.message);
    cr_expect_eq(sg_pg_exec(victim, "SELECT 1", 0, NULL, NULL, &err), 0, "%s", err.message);
    sg_pg_destroy(victim);
    sg_pg_destroy(killer);
}

Test(pg, wrong_password_is_permanent_and_not_echoed)
{
    char url[512];
    const char *at = strchr(sgt_pg_url(), '@');
    sg_err_t err;
    sg_pg_t *pg;

    cr_assert_not_null(at);
    snprintf(url, sizeof(url), "postgresql://sagad:Wr0ngSecretPw%s", at);
    pg = connect_url(url, 5, &err);
    cr_assert_null(pg);
    cr_expect_eq(err.cls, SG_ERRCLASS_PERMANENT, "bad credentials do not heal: %s", err.message);
    cr_expect(strstr(err.message, "password authentication failed") != NULL, "%s", err.message);
    cr_expect(strstr(err.message, "Wr0ngSecretPw") == NULL, "password leaked: %s", err.message);
}

Test(pg, closed_port_is_transient_after_bounded_attempts)
{
    sg_err_t err;
    sg_pg_t *pg = connect_url("postgresql://sagad:sagad@127.0.0.1:1/sagad", 2, &err);

    cr_assert_null(pg);
    cr_expect_eq(err.cls, SG_ERRCLASS_TRANSIENT);
    cr_expect_str_eq(err.code, "pg.connection");
}

/* Runs one pipeline: "SELECT $1::int + 1" with x, then extra (may be NULL);
 * returns pipe_end's code and the first statement's answer in *out. */
static int pipe_once(sg_pg_t *pg, const char *x, const char *extra, long long *out, sg_err_t *err)
{
    const char *params[] = {x};
    sg_pg_res_t *res;
    int rc;

    *out = -1;
    if (sg_pg_pipe_begin(pg, err) < 0)
        return -1;
    sg_pg_pipe_send(pg, "SELECT $1::int + 1", 1, params, &res);
    if (extra)
        sg_pg_pipe_send(pg, extra, 0, NULL, NULL);
    rc = sg_pg_pipe_end(pg, err);
    if (rc == 0)
        *out = sg_pg_res_int(res, 0, 0, -1);
    sg_pg_res_destroy(res);
    return rc;
}

static long long prepared_count(sg_pg_t *pg, const char *like)
{
    const char *params[] = {like};
    sg_pg_res_t *res;
    sg_err_t err;
    long long n;

    cr_assert_eq(sg_pg_exec(pg,
                            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1",
                            1, params, &res, &err),
                 0, "%s", err.message);
    n = sg_pg_res_int(res, 0, 0, -1);
    sg_pg_res_destroy(res);
    return n;
}

/* Pipelined statements are prepared once per session and reused; the
 * answers stay right across reuse, an aborted pipeline and a reconnect. */
Test(pg, pipeline_prepares_once_and_survives_abort_and_reconnect)
{
    sg_err_t err;
    sg_pg_t *pg = connect_url(sgt_pg_url(), 3, &err);
    long long v;

    cr_assert_not_null(pg, "%s", err.message);
    for (int i = 0; i < 3; i++) {
        char x[8];
        snprintf(x, sizeof(x), "%d", 10 * i);
        cr_assert_eq(pipe_once(pg, x, NULL, &v, &err), 0, "%s", err.message);
        cr_expect_eq(v, 10 * i + 1);
    }
    cr_expect_eq(prepared_count(pg, "SELECT $1::int + 1"), 1, "one prepared statement, reused");

    /* A failing statement after a new one: the pipeline fails with the
     * cause, and both statements work again in the next pipeline. */
    cr_expect_eq(pipe_once(pg, "1", "SELECT 'x'::int /* new */", &v, &err), -1);
    cr_expect_str_eq(err.code, "pg.data", "%s", err.message);
    cr_assert_eq(sg_pg_pipe_begin(pg, &err), 0);
    sg_pg_pipe_send(pg, "SELECT 'x'::int /* new */", 0, NULL, NULL);
    sg_pg_pipe_send(pg, "SELECT 2 /* after the failure */", 0, NULL, NULL);
    cr_expect_eq(sg_pg_pipe_end(pg, &err), -1, "the first failure is reported");
    cr_expect_str_eq(err.code, "pg.data");
    cr_assert_eq(pipe_once(pg, "5", "SELECT 2 /* after the failure */", &v, &err), 0, "%s",
                 err.message);
    cr_expect_eq(v, 6);

    /* The session reset behind its back (DISCARD ALL, a pooler's reset):
     * reported as such, once; the statements are prepared again, and one
     * prepared by the failing pipeline itself is not prepared twice. */
    cr_assert_eq(sg_pg_exec(pg, "DISCARD ALL", 0, NULL, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(sg_pg_pipe_begin(pg, &err), 0);
    sg_pg_pipe_send(pg, "SELECT 3 /* prepared after the reset */", 0, NULL, NULL);
    sg_pg_pipe_send(pg, "SELECT $1::int + 1", 1, (const char *[]){"1"}, NULL);
    cr_expect_eq(sg_pg_pipe_end(pg, &err), -1);
    cr_expect_str_eq(err.code, "pg.session_reset", "%s", err.message);
    cr_expect_eq(err.cls, SG_ERRCLASS_TRANSIENT);
    cr_expect(strstr(err.message, "26000") && strstr(err.message, "session mode"), "%s",
              err.message);
    cr_assert_eq(pipe_once(pg, "2", "SELECT 3 /* prepared after the reset */", &v, &err), 0, "%s",
                 err.message);
    cr_expect_eq(v, 3);
    cr_expect_eq(prepared_count(pg, "SELECT $1::int + 1"), 1);

    /* A new session has no prepared statements: they are prepared again. */
    cr_assert_eq(sg_pg_reconnect(pg, &err), 0, "%s", err.message);
    cr_expect_eq(prepared_count(pg, "%"), 0);
    cr_assert_eq(pipe_once(pg, "7", NULL, &v, &err), 0, "%s", err.message);
    cr_expect_eq(v, 8);
    cr_expect_eq(prepared_count(pg, "SELECT $1::int + 1"), 1);
    sg_pg_destroy(pg);
}

/* SQL built at run time cannot grow the cache without bound: past it,
 * statements are still run, unnamed. */
Test(pg, pipeline_cache_is_bounded)
{
    sg_err_t err;
    sg_pg_t *pg = connect_url(sgt_pg_url(), 3, &err);

    cr_assert_not_null(pg, "%s", err.message);
    for (int i = 0; i < 300; i++) {
        char sql[64];
        sg_pg_res_t *res;
        snprintf(sql, sizeof(sql), "SELECT %d", i);
        cr_assert_eq(sg_pg_pipe_begin(pg, &err), 0);
        sg_pg_pipe_send(pg, sql, 0, NULL, &res);
        cr_assert_eq(sg_pg_pipe_end(pg, &err), 0, "%s", err.message);
        cr_expect_eq(sg_pg_res_int(res, 0, 0, -1), i);
        sg_pg_res_destroy(res);
    }
    cr_expect_eq(prepared_count(pg, "SELECT %"), 256);
    sg_pg_destroy(pg);
}

/* A new (temporary) exec_cached_t, which sel reads empty. */
static void fresh_table_reads_empty(sg_pg_t *pg, const char *sel)
{
    const char *p0[] = {"0"};
    sg_pg_res_t *res;
    sg_err_t err;

    cr_assert_eq(
        sg_pg_exec(pg, "CREATE TEMP TABLE exec_cached_t (id int, v text)", 0, NULL, NULL, &err), 0,
        "%s", err.message);
    cr_assert_eq(sg_pg_exec_cached(pg, sel, 1, p0, &res, &err), 0, "%s", err.message);
    cr_expect_eq(sg_pg_res_rows(res), 0);
    sg_pg_res_destroy(res);
}

/* sg_pg_exec_cached: prepared once per session and reused, answers right
 * (rows, and COMMAND_OK results too).  A statement whose table changed its
 * columns under it (as a migration does to a running relay) is prepared
 * anew and run: at once outside a transaction block; inside one the
 * failure aborted the transaction, so it is reported once and the next try
 * works.  A session reset behind its back is reported as such. */
Test(pg, exec_cached_prepares_once_and_recovers_from_ddl_and_deallocate)
{
    static const char sel[] = "SELECT * FROM exec_cached_t WHERE id > $1::int ORDER BY id";
    sg_err_t err;
    sg_pg_t *pg = connect_url(sgt_pg_url(), 3, &err);
    const char *p0[] = {"0"};
    sg_pg_res_t *res;

    cr_assert_not_null(pg, "%s", err.message);
    cr_assert_eq(
        sg_pg_exec(pg, "CREATE TEMP TABLE exec_cached_t (id int, v text)", 0, NULL, NULL, &err), 0,
        "%s", err.message);
    for (int i = 1; i <= 3; i++) {
        char id[8];
        const char *p[] = {id, "x"};
        snprintf(id, sizeof(id), "%d", i);
        cr_assert_eq(sg_pg_exec_cached(pg, "INSERT INTO exec_cached_t VALUES ($1::int, $2)", 2, p,
                                       &res, &err),
                     0, "%s", err.message);
        cr_expect_not_null(res, "a command's result is handed over like sg_pg_exec's");
        sg_pg_res_destroy(res);
    }
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sg_pg_exec_cached(pg, sel, 1, p0, &res, &err), 0, "%s", err.message);
        cr_expect_eq(sg_pg_res_rows(res), 3);
        cr_expect_str_eq(sg_pg_res_get(res, 2, 1), "x");
        sg_pg_res_destroy(res);
    }
    cr_expect_eq(prepared_count(pg, sel), 1, "one prepared statement, reused");

    /* The table's columns change: the old plan cannot be used again. */
    cr_assert_eq(
        sg_pg_exec(pg, "ALTER TABLE exec_cached_t ADD COLUMN w int DEFAULT 7", 0, NULL, NULL, &err),
        0, "%s", err.message);
    cr_assert_eq(sg_pg_exec_cached(pg, sel, 1, p0, &res, &err), 0, "%s", err.message);
    cr_expect_str_eq(sg_pg_res_get(res, 0, 2), "7", "the new column is seen");
    sg_pg_res_destroy(res);

    cr_expect_eq(prepared_count(pg, sel), 1, "the invalidated one was deallocated");

    /* The session reset behind its back (DISCARD ALL, a pooler's reset):
     * its locks and LISTENs are gone too, so this is an error that says
     * so, not a silent re-prepare; prepared again on the next use. */
    cr_assert_eq(sg_pg_exec(pg, "DISCARD ALL", 0, NULL, NULL, &err), 0, "%s", err.message);
    cr_expect_eq(sg_pg_exec_cached(pg, sel, 1, p0, &res, &err), -1);
    cr_expect_str_eq(err.code, "pg.session_reset");
    cr_expect_eq(err.cls, SG_ERRCLASS_TRANSIENT);
    cr_expect(strstr(err.message, "session mode") != NULL, "%s", err.message);
    fresh_table_reads_empty(pg, sel);
    cr_assert_eq(sg_pg_exec(pg, "INSERT INTO exec_cached_t VALUES (1, 'x'), (2, 'y'), (3, 'z')", 0,
                            NULL, NULL, &err),
                 0, "%s", err.message);

    /* The same inside a transaction block: reported once, then fine. */
    cr_assert_eq(
        sg_pg_exec(pg, "ALTER TABLE exec_cached_t ADD COLUMN w int DEFAULT 8", 0, NULL, NULL, &err),
        0, "%s", err.message);
    cr_assert_eq(sg_pg_begin(pg, &err), 0, "%s", err.message);
    cr_expect_eq(sg_pg_exec_cached(pg, sel, 1, p0, &res, &err), -1);
    cr_expect(strstr(err.message, "0A000") != NULL, "%s", err.message);
    sg_pg_rollback(pg);
    cr_assert_eq(sg_pg_exec_cached(pg, sel, 1, p0, &res, &err), 0, "%s", err.message);
    cr_expect_str_eq(sg_pg_res_get(res, 0, 2), "8", "the new column is seen");
    sg_pg_res_destroy(res);

    /* A new session: prepared again, silently. */
    cr_assert_eq(sg_pg_reconnect(pg, &err), 0, "%s", err.message);
    fresh_table_reads_empty(pg, sel);
    cr_expect_eq(prepared_count(pg, sel), 1);
    sg_pg_destroy(pg);
}
