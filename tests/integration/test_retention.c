/* Retention against the real PostgreSQL: the janitor removes exactly the
 * rows past their horizon, in batches, never a saga that is not finished
 * nor a pending dead letter; the binaries refuse contradictory horizons;
 * the relay runs the janitor and counts what it removed. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sgt_prom.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_retention.h"

#define H 3600 /* the horizon of these tests, seconds */

static char db[128], dsn[512];
static sg_pg_t *pg;

static void setup(void)
{
    sg_err_t err;
    int from, to;

    sgt_db_create(db, sizeof(db), dsn, sizeof(dsn));
    pg = sgt_db_connect(dsn);
    cr_assert_eq(sg_migrate_run(pg, &from, &to, &err), 0, "%s", err.message);
}

static void teardown(void)
{
    sg_pg_destroy(pg);
    sgt_db_drop(db);
}

TestSuite(retention, .init = setup, .fini = teardown);

static void sql(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sql(const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    sg_err_t err;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    cr_assert_eq(sg_pg_exec(pg, text, 0, NULL, NULL, &err), 0, "%s: %s", text, err.message);
}

/* A saga of two steps, one attempt each, last changed age_s ago. */
static void saga(const char *id, const char *status, long age_s)
{
    sql("INSERT INTO sagas (saga_id, name, status, definition, created_at, updated_at) "
        "VALUES ('%s', 't', '%s', '{}', now() - interval '%ld seconds' - interval '1 hour', "
        "now() - interval '%ld seconds')",
        id, status, age_s, age_s);
    sql("INSERT INTO steps (saga_id, idx, name, tool) "
        "SELECT '%s', i, 's' || i, 'noop' FROM generate_series(0, 1) i",
        id);
    sql("INSERT INTO attempts (saga_id, step_idx, phase, generation, attempt, idempotency_key) "
        "SELECT '%s', i, 'forward', 1, 1, '%s:' || i FROM generate_series(0, 1) i",
        id, id);
}

/* A dead letter of saga (or NULL), created ten years ago; a handled one
 * is resolved now (tests move resolved_at).  Returns its id. */
static long long dead_letter(const char *saga_id, const char *status)
{
    char sid[160];

    snprintf(sid, sizeof(sid), saga_id ? "'%s'" : "NULL", saga_id);
    return sgt_query_intf(pg,
                          "INSERT INTO dead_letters (status, error_code, error_class, saga_id, "
                          "created_at, resolved_at) VALUES ('%s', 'tool.http.503', 'transient', "
                          "%s, now() - interval '10 years', CASE WHEN '%s' = 'pending' THEN NULL "
                          "ELSE now() END) RETURNING id",
                          status, sid, status);
}

static long long count(const char *table, const char *where)
{
    return sgt_query_intf(pg, "SELECT count(*) FROM %s WHERE %s", table, where);
}

static void pass(int64_t batch, int64_t removed[SG_RET__COUNT])
{
    sg_retention_opts_t opts = {H, H, batch, 0, NULL};
    sg_err_t err;

    memset(removed, 0, sizeof(int64_t) * SG_RET__COUNT);
    cr_assert_eq(sg_retention_pass(pg, &opts, removed, &err), 0, "%s", err.message);
}

Test(retention, the_janitor_removes_exactly_the_expired_rows)
{
    int64_t removed[SG_RET__COUNT];
    long long fresh_handled, expired_dl, dl_of_failed;

    /* sagas */
    saga("past", "completed", H + 1);      /* one second past: goes */
    saga("before", "completed", H - 1);    /* one second before: stays */
    saga("comp", "compensated", H + 60);   /* goes */
    saga("running", "running", 315360000); /* ten years, still running: stays */
    saga("compensating", "compensating", 315360000);
    saga("held", "held", 315360000);
    saga("kept", "completed", 315360000);  /* a pending dead letter names it: stays */
    saga("failed", "failed", H + 60);      /* its dead letter expires first: both go */
    saga("cancelled", "cancelled", H + 1); /* goes, with its control history (issue 35 item 5) */
    saga("cancelling", "cancelling", 315360000); /* still undoing: stays */
    sql("INSERT INTO saga_controls (saga_id, command, command_id, requested_by, reason, outcome) "
        "VALUES "
        "('cancelled', 'saga.cancel', 'c-1', 'ops', 'r', 'accepted'), "
        "('cancelling', 'saga.cancel', 'c-2', 'ops', 'r', 'accepted')");
    /* dead letters */
    dead_letter("kept", "pending");
    dead_letter(NULL, "pending"); /* ten years pending: stays */
    dl_of_failed = dead_letter("failed", "discarded");
    expired_dl = dead_letter(NULL, "replayed");
    fresh_handled = dead_letter(NULL, "discarded");
    sql("UPDATE dead_letters SET resolved_at = now() - interval '%d seconds' WHERE id IN (%lld, "
        "%lld)",
        H + 1, dl_of_failed, expired_dl);
    sql("UPDATE dead_letters SET resolved_at = now() - interval '%d seconds' WHERE id = %lld",
        H - 1, fresh_handled);
    sql("INSERT INTO replays (dead_letter_id, operator, reason) VALUES (%lld, 'op', 'fixed'), "
        "(%lld, 'op', 'fixed')",
        expired_dl, fresh_handled);
    sql("INSERT INTO dead_letter_revisions (dead_letter_id, revision, payload, operator) VALUES "
        "(%lld, 1, '\\x7b7d', 'op'), (%lld, 1, '\\x7b7d', 'op')",
        expired_dl, fresh_handled);
    /* the builtin ledger */
    sql("INSERT INTO builtin_ledger (key, last_at) VALUES ('old', now() - interval '%d seconds'), "
        "('new', now() - interval '%d seconds')",
        H + 1, H - 1);

    pass(500, removed);

    cr_expect_eq(count("sagas", "saga_id IN ('past', 'comp', 'failed', 'cancelled')"), 0);
    cr_expect_eq(count("sagas", "true"), 6,
                 "before, running, compensating, held, kept, cancelling stay");
    cr_expect_eq(count("sagas", "saga_id IN ('before', 'running', 'compensating', 'held', "
                                "'kept', 'cancelling')"),
                 6);
    cr_expect_eq(count("steps", "true"), 12, "the kept sagas' steps stay, the others' go");
    cr_expect_eq(count("attempts", "true"), 12);
    cr_expect_eq(count("saga_controls", "true"), 1, "a removed saga's control history goes");
    cr_expect_eq(count("saga_controls", "saga_id = 'cancelling'"), 1);
    cr_expect_eq(count("dead_letters", "true"), 3);
    cr_expect_eq(count("dead_letters", "status = 'pending'"), 2, "pending ones are never removed");
    cr_expect_eq(
        sgt_query_intf(pg, "SELECT count(*) FROM dead_letters WHERE id = %lld", fresh_handled), 1);
    cr_expect_eq(count("replays", "true"), 1);
    cr_expect_eq(count("dead_letter_revisions", "true"), 1);
    cr_expect_eq(count("builtin_ledger", "key = 'new'"), 1);
    cr_expect_eq(count("builtin_ledger", "true"), 1);

    cr_expect_eq(removed[SG_RET_SAGAS], 4);
    cr_expect_eq(removed[SG_RET_STEPS], 8);
    cr_expect_eq(removed[SG_RET_ATTEMPTS], 8);
    cr_expect_eq(removed[SG_RET_DEAD_LETTERS], 2);
    cr_expect_eq(removed[SG_RET_REPLAYS], 1);
    cr_expect_eq(removed[SG_RET_REVISIONS], 1);
    cr_expect_eq(removed[SG_RET_BUILTIN_LEDGER], 1);

    /* A second pass finds nothing more. */
    pass(500, removed);
    for (int i = 0; i < SG_RET__COUNT; i++)
        cr_expect_eq(removed[i], 0, "%s: %lld removed again", sg_retention_table_name(i),
                     (long long)removed[i]);
}

Test(retention, batches_are_bounded_and_every_expired_row_goes)
{
    int64_t removed[SG_RET__COUNT];
    double before = sg_metric_value(SG_M_RETENTION_REMOVED, SG_LABELS("sagas"));
    char id[32];

    for (int i = 0; i < 7; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        saga(id, "completed", H + 10);
    }
    saga("young", "completed", 10);
    pass(3, removed); /* batches of 3, 3 and 1 */
    cr_expect_eq(removed[SG_RET_SAGAS], 7);
    cr_expect_eq(removed[SG_RET_ATTEMPTS], 14);
    cr_expect_eq(count("sagas", "true"), 1);
    cr_expect_eq(count("sagas", "saga_id = 'young'"), 1);
    cr_expect_eq(sg_metric_value(SG_M_RETENTION_REMOVED, SG_LABELS("sagas")) - before, 7.0);
}

Test(retention, the_oldest_ages_are_those_the_horizons_judge)
{
    double age[SG_RET_NAGED];
    long long dl;
    sg_err_t err;

    cr_assert_eq(sg_retention_export_ages(pg, age, &err), 0, "%s", err.message);
    cr_expect_eq(age[0] + age[1] + age[2], 0.0, "empty tables: 0");
    saga("old-running", "running", 9000);
    saga("kept", "compensated", 8000); /* a pending dead letter keeps it: not judged */
    dead_letter("kept", "pending");
    saga("done", "completed", 500);
    dl = dead_letter(NULL, "discarded");
    sql("UPDATE dead_letters SET resolved_at = now() - interval '700 seconds' WHERE id = %lld", dl);
    sql("INSERT INTO builtin_ledger (key, last_at) VALUES ('k', now() - interval '300 seconds')");
    cr_assert_eq(sg_retention_export_ages(pg, age, &err), 0, "%s", err.message);
    cr_expect(age[0] >= 500 && age[0] < 510, "sagas: %f", age[0]);
    cr_expect(age[1] >= 700 && age[1] < 710, "dead_letters: %f", age[1]);
    cr_expect(age[2] >= 300 && age[2] < 310, "builtin_ledger: %f", age[2]);
    saga("gone", "cancelled", 600); /* a cancelled saga is judged as well */
    cr_assert_eq(sg_retention_export_ages(pg, age, &err), 0, "%s", err.message);
    cr_expect(age[0] >= 600 && age[0] < 610, "sagas with a cancelled one: %f", age[0]);
}

/* Every binary refuses, at start, horizons that contradict each other,
 * with one line naming both keys. */
Test(retention, contradictory_horizons_are_refused_at_start)
{
    static const struct {
        const char *var, *want;
    } cases[] = {
        {"SAGAD_RETENTION_DEDUP_WINDOW_S=600",
         "config: retention.dedup_window_s (600 s) must equal retention.sagas_s (1209600 s)"},
        {"SAGAD_RETENTION_DEAD_LETTERS_S=86400",
         "config: retention.dead_letters_s (86400 s) is shorter than retention.sagas_s "
         "(1209600 s)"},
    };
    const char *progs[] = {"sagad-worker", "sagad-relay", "dlq-tool"};
    const char *args[] = {"--print-config", NULL};
    char dsn_env[600];

    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", dsn);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (size_t p = 0; p < 3; p++) {
            const char *env[] = {dsn_env, cases[c].var, NULL};
            char *out = NULL, *err = NULL;

            cr_expect_eq(sgt_run(progs[p], args, env, &out, &err), 2, "%s with %s", progs[p],
                         cases[c].var);
            cr_expect(strstr(err, cases[c].want) != NULL, "%s: stderr: %s", progs[p], err);
            cr_expect_eq(strchr(err, '\n'), strrchr(err, '\n'), "one line: %s", err);
            free(out);
            free(err);
        }
    }
    /* Both keys moved together are fine. */
    {
        const char *env[] = {dsn_env, "SAGAD_RETENTION_SAGAS_S=600",
                             "SAGAD_RETENTION_DEDUP_WINDOW_S=600", NULL};
        char *out = NULL;

        cr_expect_eq(sgt_run("sagad-relay", args, env, &out, NULL), 0);
        cr_expect(strstr(out, "retention.sagas_s = 600") != NULL, "%s", out);
        free(out);
    }
}

/* The relay runs the janitor: an expired saga goes, a running one stays,
 * and /metrics counts the removal and the oldest age. */
Test(retention, the_relay_runs_the_janitor_and_counts_its_work)
{
    char dsn_env[600], kafka_env[300], port_env[64];
    int port = sgt_free_port();
    const char *args[] = {"run", NULL};
    const char *env[] = {dsn_env,
                         kafka_env,
                         port_env,
                         "SAGAD_RETENTION_SAGAS_S=60",
                         "SAGAD_RETENTION_DEDUP_WINDOW_S=60",
                         "SAGAD_RETENTION_DEAD_LETTERS_S=60",
                         "SAGAD_RETENTION_INTERVAL_MS=200",
                         NULL};
    double deadline = sgt_now_s() + 60;
    sgt_bg_t relay;
    sgt_prom_t prom;
    char *body = NULL, perr[256];

    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", dsn);
    snprintf(kafka_env, sizeof(kafka_env), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", sgt_kafka());
    snprintf(port_env, sizeof(port_env), "SAGAD_HTTP_PORT=%d", port);
    saga("expired", "completed", 61);
    saga("running", "running", 100000);
    memset(&relay, 0, sizeof(relay));
    sgt_bg_start(&relay, "sagad-relay", args, env);
    while (count("sagas", "saga_id = 'expired'") > 0) {
        cr_assert(!sgt_bg_done(&relay), "the relay exited: %s", sgt_bg_tail(&relay));
        cr_assert_lt(sgt_now_s(), deadline, "the janitor never removed the expired saga");
        usleep(100000);
    }
    cr_expect_eq(count("sagas", "saga_id = 'running'"), 1);
    saga("next", "completed", 30); /* 30 s to go: the age gauge shows it */
    for (;;) {
        cr_assert_eq(sgt_http_get(port, "/metrics", &body), 200);
        cr_assert_eq(sgt_prom_parse(body, &prom, perr, sizeof(perr)), 0, "%s", perr);
        free(body);
        if (sgt_prom_get(&prom, "sagad_retention_oldest_age_seconds", "table=\"sagas\"", -1) >= 30)
            break;
        sgt_prom_free(&prom);
        cr_assert_lt(sgt_now_s(), deadline, "no oldest age for sagas");
        usleep(100000);
    }
    cr_expect_eq(sgt_prom_get(&prom, "sagad_retention_removed_total", "table=\"sagas\"", -1), 1);
    cr_expect_eq(sgt_prom_get(&prom, "sagad_retention_removed_total", "table=\"attempts\"", -1), 2);
    sgt_prom_free(&prom);
    sgt_bg_signal(&relay, SIGTERM);
    cr_expect_eq(sgt_bg_join(&relay, 30), 0, "%s", sgt_bg_tail(&relay));
    cr_expect(strstr(relay.err, "\"msg\":\"janitor state change\"") != NULL);
    sgt_bg_free(&relay);
}
