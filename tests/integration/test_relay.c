/* sagad-relay against the real PostgreSQL and Kafka: every test runs the
 * real binary on its own database and reads what reached the broker. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sgt_consume.h"
#include "../support/sgt_prom.h"
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"

static char db[128], dsn[512], dsn_env[600], kafka_env[256], topic[128];

static void setup(void)
{
    sg_pg_t *pg;
    sg_err_t err;

    sgt_db_create(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", dsn);
    snprintf(kafka_env, sizeof(kafka_env), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", sgt_kafka());
    sgt_unique(topic, sizeof(topic), "sgt_relay");
    pg = sgt_db_connect(dsn);
    cr_assert_eq(sg_migrate_run(pg, NULL, NULL, &err), 0, "%s", err.message);
    sg_pg_destroy(pg);
}

static void teardown(void)
{
    sgt_db_drop(db);
}

TestSuite(relay, .init = setup, .fini = teardown, .timeout = 240);

static void exec(sg_pg_t *pg, const char *sql, int n, const char *const *params)
{
    sg_err_t err;

    cr_assert_eq(sg_pg_exec(pg, sql, n, params, NULL, &err), 0, "%s: %s", sql, err.message);
}

/* Starts a relay on this test's database; extra is NULL-terminated. */
static void relay_start(sgt_proc_t *p, const char *const *extra)
{
    const char *env[16] = {dsn_env, kafka_env, "SAGAD_LOG_LEVEL=info",
                           "SAGAD_RELAY_STANDBY_POLL_MS=200"};
    const char *args[] = {"run", NULL};
    size_t n = 4;

    for (; extra && *extra && n < 15; extra++)
        env[n++] = *extra;
    env[n] = NULL;
    sgt_spawn(p, "sagad-relay", args, env);
}

static int relay_stop(sgt_proc_t *p, int sig, char **err)
{
    kill(p->pid, sig);
    return sgt_wait(p, NULL, err);
}

/* Waits until the shard's cursor has a holder with this pid. */
static void wait_holder(sg_pg_t *pg, int pid)
{
    char sql[256];
    double deadline = sgt_now_s() + 30;

    snprintf(
        sql, sizeof(sql),
        "SELECT count(*) FROM relay_cursors WHERE holder LIKE '%%:%d' AND EXISTS (SELECT 1 "
        "FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM "
        "pg_database WHERE datname = current_database()))",
        pid);
    while (sgt_query_int(pg, sql) < 1 && sgt_now_s() < deadline)
        usleep(50000);
    cr_assert_geq(sgt_query_int(pg, sql), 1, "relay %d never became active", pid);
}

/* Reads this test's topic from the beginning (sgt_consume). */
static void consume(got_t *got, size_t want, double timeout_s)
{
    sgt_consume(topic, got, want, timeout_s);
}

static void insert_round(sg_pg_t *pg, int first, int stride, int nkeys, int seq)
{
    sgt_insert_round(pg, topic, first, stride, nkeys, seq);
}

#define WRITERS 8
#define KEYS    1000
#define PER_KEY 100

static void *writer(void *arg)
{
    int w = (int)(intptr_t)arg;
    sg_pg_t *pg = sgt_db_connect(dsn);

    /* Writer w owns keys w, w+8, ...: one transaction per round, so each
     * key's rows are inserted (and committed) in seq order. */
    for (int seq = 0; seq < PER_KEY; seq++)
        insert_round(pg, w, WRITERS, KEYS / WRITERS, seq);
    sg_pg_destroy(pg);
    return NULL;
}

Test(relay, order_and_completeness_under_concurrent_writers)
{
    pthread_t th[WRITERS];
    sgt_proc_t relay;
    got_t got;
    size_t dups;

    relay_start(&relay, NULL);
    for (int w = 0; w < WRITERS; w++)
        pthread_create(&th[w], NULL, writer, (void *)(intptr_t)w);
    for (int w = 0; w < WRITERS; w++)
        pthread_join(th[w], NULL);
    consume(&got, (size_t)KEYS * PER_KEY, 180);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0, "SIGTERM must exit 0");
    dups = check_complete_ordered(&got, KEYS, PER_KEY);
    cr_expect_eq(dups, 0, "no crash, so no redelivery expected");
    got_free(&got);
}

Test(relay, late_commit_is_published_and_naive_poller_loses_it)
{
    const char *extra[] = {"SAGAD_RELAY_XMIN_WARN_MS=300", NULL};
    sg_pg_t *late = sgt_db_connect(dsn), *pg = sgt_db_connect(dsn);
    const char *p[] = {topic};
    sgt_proc_t relay;
    char *err, pidtext[32], older[512];
    int64_t naive_last, naive_found, late_pid;
    got_t got;

    late_pid = sgt_query_int(late, "SELECT pg_backend_pid()");
    snprintf(pidtext, sizeof(pidtext), "\"pid\":\"%lld\"", (long long)late_pid);
    snprintf(older, sizeof(older),
             "SELECT count(*) FROM pg_stat_activity o, pg_stat_activity t WHERE t.pid = %lld "
             "AND o.pid <> t.pid AND o.backend_xid IS NOT NULL AND age(o.backend_xid) >= "
             "age(t.backend_xid)",
             (long long)late_pid);
    relay_start(&relay, extra);
    /* T1 inserts first (smaller id and xid) and stays open.  The relay's
     * warning names the oldest transaction of the whole cluster, so T1
     * must be that: a transaction of another test (a CREATE or DROP
     * DATABASE) begun before T1 and still running would be named instead.
     * T1 begins again until nothing older runs beside it. */
    for (int tries = 0;; tries++) {
        exec(late, "BEGIN", 0, NULL);
        exec(late,
             "INSERT INTO outbox (topic, key, payload) VALUES ($1, 'late', "
             "convert_to('late', 'UTF8'))",
             1, p);
        if (sgt_query_int(pg, older) == 0)
            break;
        exec(late, "ROLLBACK", 0, NULL);
        cr_assert_lt(tries, 600, "an older transaction ran beside T1 for a minute");
        usleep(100000);
    }
    for (int seq = 0; seq < 10; seq++)
        insert_round(pg, 0, 1, 1000, seq); /* 10,000 rows commit after T1 began */
    /* The negative control: a poller on `id > last_id` reads now... */
    naive_last = sgt_query_int(pg, "SELECT max(id) FROM outbox");
    /* The relay is held back by T1, and says so at its next heartbeat
     * (every second): wait for it, bounded, until past the 300 ms that
     * make it warn (a blocked time below that, exported first, is no
     * warning yet: committing T1 then raced the warning). */
    for (int i = 0; i < 50; i++) {
        if (sgt_query_int(pg, "SELECT xmin_blocked_ms FROM relay_cursors WHERE shard = 0") >= 300)
            break;
        usleep(100000);
    }
    cr_expect_gt(sgt_query_int(pg, "SELECT xmin_blocked_ms FROM relay_cursors WHERE shard = 0"), 0,
                 "the blocked time is exported");
    cr_expect_eq(sgt_query_int(pg, "SELECT published FROM relay_cursors WHERE shard = 0"), 0,
                 "nothing after T1 may be published while T1 runs");
    exec(late, "COMMIT", 0, NULL);
    {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM outbox WHERE id > %lld",
                 (long long)naive_last);
        naive_found = sgt_query_int(pg, sql);
    }
    cr_expect_eq(naive_found, 0, "...and never sees T1's row, whose id is below its cursor");
    consume(&got, 10001, 120);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &err), 0);
    cr_assert_eq(got.n, 10001, "every row, T1's included, reaches Kafka");
    cr_expect_str_eq(got.payload[0], "late", "T1 has the oldest xid, so it goes first");
    cr_expect(strstr(err, "long-running transaction") && strstr(err, pidtext),
              "the warning names the blocking backend %s: %s", pidtext, err);
    free(err);
    got_free(&got);
    sg_pg_destroy(late);
    sg_pg_destroy(pg);
}

/* The relay's session settings that its design relies on (RELAY.md):
 * commits that do not wait for their flush, and custom plans for the
 * outbox read.  Another session cannot see them, so the relay logs them
 * as its session reads them back. */
Test(relay, session_runs_without_flush_waits_and_with_custom_plans)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    char *err = NULL;

    relay_start(&relay, NULL);
    wait_holder(pg, relay.pid);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &err), 0);
    cr_expect(strstr(err, "\"msg\":\"relay session settings\"") &&
                  strstr(err, "\"synchronous_commit\":\"off\"") &&
                  strstr(err, "\"plan_cache_mode\":\"force_custom_plan\""),
              "the relay's session: synchronous_commit off, plan_cache_mode "
              "force_custom_plan: %s",
              err);
    free(err);
    sg_pg_destroy(pg);
}

Test(relay, crash_between_ack_and_cursor_loses_nothing)
{
    const char *crash[] = {"SAGAD_TEST_FAILPOINT=relay.after_ack", "SAGAD_RELAY_BATCH_SIZE=20",
                           NULL};
    const char *normal[] = {"SAGAD_RELAY_BATCH_SIZE=20", NULL};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    got_t got;
    char *err;
    int rc;

    for (int seq = 0; seq < 5; seq++)
        insert_round(pg, 0, 1, 10, seq); /* 50 rows */
    relay_start(&relay, crash);
    rc = sgt_wait(&relay, NULL, &err);
    /* Aborted at the failpoint, not failed for some other reason before
     * it published anything. */
    cr_assert_eq(rc, 128 + SIGABRT, "the failpoint aborts the relay; exit %d: %s", rc, err);
    cr_assert(strstr(err, "failpoint relay.after_ack") != NULL, "%s", err);
    free(err);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox"), 50, "the cursor did not move");
    relay_start(&relay, normal);
    consume(&got, 70, 20); /* wait for 50 plus room for duplicates */
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_expect_leq(check_complete_ordered(&got, 10, 5), 20, "duplicates are at most one batch");
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox"), 0, "published rows are removed");
    got_free(&got);
    sg_pg_destroy(pg);
}

Test(relay, standby_takes_over_after_kill_9)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t a, b;
    char *err_b;
    double t0;
    got_t got;

    relay_start(&a, NULL);
    wait_holder(pg, a.pid);
    relay_start(&b, NULL);
    for (int seq = 0; seq < 10; seq++)
        insert_round(pg, 0, 1, 100, seq);
    /* While A lives, the standby publishes nothing: A publishes the first
     * 1,000 rows itself and still holds the shard afterwards. */
    for (double deadline = sgt_now_s() + 30; sgt_now_s() < deadline;) {
        if (sgt_query_int(pg, "SELECT published FROM relay_cursors WHERE shard = 0") >= 1000)
            break;
        usleep(50000);
    }
    cr_expect_eq(sgt_query_int(pg, "SELECT published FROM relay_cursors WHERE shard = 0"), 1000);
    wait_holder(pg, a.pid);
    kill(a.pid, SIGKILL);
    sgt_wait(&a, NULL, NULL);
    t0 = sgt_now_s();
    for (int seq = 10; seq < 20; seq++)
        insert_round(pg, 0, 1, 100, seq);
    wait_holder(pg, b.pid);
    cr_expect_lt(sgt_now_s() - t0, 10.0, "takeover within seconds");
    consume(&got, 2000, 60);
    cr_expect_eq(relay_stop(&b, SIGTERM, &err_b), 0);
    check_complete_ordered(&got, 100, 20);
    cr_expect(strstr(err_b, "took over shard") != NULL, "the standby logs its takeover");
    free(err_b);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* The outbox's NOTIFY (migration 0009): a writer's commit of outbox rows
 * wakes the relay; an INSERT of no rows does not (the relay's own timer
 * move is one on most wake-ups, and would wake it again: a spin); and a
 * session that set SG_OUTBOX_NOTIFY_OFF, as the worker's do, is not
 * notified for: it notifies after its COMMIT itself. */
Test(relay, outbox_insert_notifies_unless_the_session_notifies_itself)
{
    const char *p[] = {topic};
    const char *ins = "INSERT INTO outbox (topic, key, payload) VALUES ($1, 'k', "
                      "convert_to('n', 'UTF8'))";
    sg_pg_opts_t qopts = {.dsn = dsn,
                          .application_name = "sagad-tests-quiet",
                          .connect_timeout_ms = 5000,
                          .connect_attempts = 3,
                          .retry = {100, 1000},
                          .session_sql = SG_OUTBOX_NOTIFY_OFF};
    sg_pg_t *listener = sgt_db_connect(dsn), *writer = sgt_db_connect(dsn), *quiet;
    sg_err_t err;

    quiet = sg_pg_connect(&qopts, &err);
    cr_assert_not_null(quiet, "%s", err.message);
    cr_assert_eq(sg_pg_listen(listener, SG_OUTBOX_CHANNEL, &err), 0, "%s", err.message);

    exec(writer, ins, 1, p);
    cr_expect_eq(sg_pg_wait_notify(listener, 5000, NULL, NULL, &err), 1,
                 "a committed row notifies");
    exec(writer, "BEGIN", 0, NULL);
    exec(writer, ins, 1, p);
    exec(writer, ins, 1, p);
    cr_expect_eq(sg_pg_wait_notify(listener, 300, NULL, NULL, &err), 0,
                 "nothing before the commit");
    exec(writer, "COMMIT", 0, NULL);
    cr_expect_eq(sg_pg_wait_notify(listener, 5000, NULL, NULL, &err), 1,
                 "two rows, one commit: notified");
    cr_expect_eq(sg_pg_wait_notify(listener, 300, NULL, NULL, &err), 0, "once");
    exec(writer, "INSERT INTO outbox (topic, key, payload) SELECT topic, key, payload FROM timers",
         0, NULL);
    cr_expect_eq(sg_pg_wait_notify(listener, 500, NULL, NULL, &err), 0,
                 "an INSERT of no rows: no wake-up");

    exec(quiet, ins, 1, p);
    cr_expect_eq(sg_pg_wait_notify(listener, 500, NULL, NULL, &err), 0,
                 "a session with sagad.outbox_notify off is not notified for");
    exec(quiet, SG_OUTBOX_NOTIFY, 0, NULL);
    cr_expect_eq(sg_pg_wait_notify(listener, 5000, NULL, NULL, &err), 1, "it notifies itself");
    cr_expect_eq(sgt_query_int(writer, "SELECT count(*) FROM outbox"), 4, "every row written");
    sg_pg_destroy(quiet);
    sg_pg_destroy(writer);
    sg_pg_destroy(listener);
}

/* Inserts one timer on this test's topic, due after delay (an interval);
 * returns its due time in ms since the epoch. */
static int64_t insert_timer(sg_pg_t *pg, const char *delay)
{
    return sgt_query_intf(pg,
                          "INSERT INTO timers (due_at, topic, key, payload) VALUES (now() + "
                          "interval '%s', '%s', 't', convert_to('timer', 'UTF8')) "
                          "RETURNING (extract(epoch FROM due_at) * 1000)::bigint",
                          delay, topic);
}

/* Message i is the timer's, published at its due time or within 2 s after. */
static void expect_timer_on_time(const got_t *got, size_t i, int64_t due_ms)
{
    cr_expect_str_eq(got->payload[i], "timer");
    cr_expect_geq(got->ts[i], due_ms, "published at %lld, due at %lld", (long long)got->ts[i],
                  (long long)due_ms);
    cr_expect_lt(got->ts[i], due_ms + 2000, "and promptly after: published at %lld, due at %lld",
                 (long long)got->ts[i], (long long)due_ms);
}

Test(relay, timer_fires_at_due_time_not_before)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    int64_t due_ms;
    got_t got;

    relay_start(&relay, NULL);
    due_ms = insert_timer(pg, "2 s");
    consume(&got, 1, 30);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_assert_eq(got.n, 1);
    expect_timer_on_time(&got, 0, due_ms);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* With the poll a minute long, a timer written after the relay's last
 * look is moved on time only because its writer said so: the relay runs
 * the timer move when the next timer it knows of is due, at its poll, or
 * when a notification carries SG_OUTBOX_TIMERS_MARK. */
Test(relay, a_new_timer_is_moved_when_its_writer_announces_it)
{
    const char *extra[] = {"SAGAD_RELAY_POLL_INTERVAL_MS=60000", NULL};
    const char *p[] = {topic};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    int64_t due_ms;
    got_t got;

    relay_start(&relay, extra);
    /* The relay has looked at the timers once it publishes a row. */
    exec(pg,
         "INSERT INTO outbox (topic, key, payload) VALUES ($1, convert_to('r', 'UTF8'), "
         "convert_to('row', 'UTF8'))",
         1, p);
    consume(&got, 1, 30);
    cr_assert_eq(got.n, 1, "the relay is publishing");
    got_free(&got);
    exec(pg, "BEGIN", 0, NULL);
    due_ms = insert_timer(pg, "500 ms");
    exec(pg, SG_OUTBOX_NOTIFY_TIMERS, 0, NULL);
    exec(pg, "COMMIT", 0, NULL);
    consume(&got, 2, 20); /* the row again (a new group reads from the start), then the timer */
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_assert_eq(got.n, 2, "the timer fired before the relay's poll");
    expect_timer_on_time(&got, 1, due_ms);
    got_free(&got);
    sg_pg_destroy(pg);
}

Test(relay, ten_thousand_timers_fire_once_with_two_active_relays)
{
    const char *extra[] = {"SAGAD_RELAY_SHARDS=2", NULL};
    const char *p[] = {topic};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t a, b;
    got_t got;
    char *seen;

    exec(pg, "UPDATE relay_settings SET shards = 2", 0, NULL);
    relay_start(&a, extra);
    relay_start(&b, extra);
    exec(pg,
         "INSERT INTO timers (due_at, topic, key, payload) SELECT now() + (i % 2000) * "
         "interval '1 ms', $1, convert_to('k' || (i % 50), 'UTF8'), convert_to(i::text, 'UTF8') "
         "FROM generate_series(0, 9999) AS i",
         1, p);
    consume(&got, 10000, 90);
    sleep(1); /* anything extra would show up now */
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM timers"), 0);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM relay_cursors WHERE holder IS NOT NULL"),
                 2, "both relays are active, one per shard");
    cr_expect_eq(relay_stop(&a, SIGTERM, NULL), 0);
    cr_expect_eq(relay_stop(&b, SIGTERM, NULL), 0);
    cr_assert_eq(got.n, 10000, "got %zu messages", got.n);
    seen = calloc(10000, 1);
    for (size_t i = 0; i < got.n; i++) {
        int v = atoi(got.payload[i]);
        cr_assert(v >= 0 && v < 10000);
        cr_expect_eq(seen[v], 0, "timer %d fired twice", v);
        seen[v] = 1;
    }
    free(seen);
    got_free(&got);
    sg_pg_destroy(pg);
}

Test(relay, cursor_ahead_of_xids_after_restore_recovers)
{
    const char *p[] = {topic};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    got_t got;

    /* What a dump/restore into a fresh cluster leaves: a cursor and waiting
     * rows from the old cluster's far larger xids, then new rows. */
    exec(pg, "INSERT INTO relay_cursors (shard, tx, id) VALUES (0, '900000000', 5)", 0, NULL);
    exec(pg,
         "INSERT INTO outbox (tx, topic, key, payload) SELECT (900000000 + i)::text::xid8, $1, "
         "'k0', convert_to('k0:' || i, 'UTF8') FROM generate_series(0, 2) AS i",
         1, p);
    insert_round(pg, 0, 1, 1, 3);
    insert_round(pg, 0, 1, 1, 4);
    relay_start(&relay, NULL);
    consume(&got, 5, 30);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    check_complete_ordered(&got, 1, 5);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox"), 0, "nothing stalls");
    got_free(&got);
    sg_pg_destroy(pg);
}

Test(relay, status_names_holder_and_backlog)
{
    const char *args[] = {"status", NULL};
    const char *env[] = {dsn_env, NULL};
    sg_pg_t *pg = sgt_db_connect(dsn);
    char *out, *err, shard[16], holder[64], published[32], backlog[32], lock[16];
    const char *row;

    insert_round(pg, 0, 1, 7, 0);
    cr_assert_eq(sgt_run("sagad-relay", args, env, &out, &err), 0, "%s", err);
    cr_expect_eq(strncmp(out, "shard ", 6), 0, "a header line first: %s", out);
    cr_expect(strstr(out, " backlog ") != NULL, "%s", out);
    /* One row, shard 0: nobody holds it, nothing published, 7 waiting. */
    row = strchr(out, '\n');
    cr_assert_not_null(row, "%s", out);
    cr_assert_eq(sscanf(row + 1, "%15s %63s %*s %*s %31s %31s %*s %*s %15s", shard, holder,
                        published, backlog, lock),
                 5, "%s", out);
    cr_expect_str_eq(shard, "0");
    cr_expect_str_eq(holder, "-", "%s", out);
    cr_expect_str_eq(published, "0", "%s", out);
    cr_expect_str_eq(backlog, "7", "7 rows waiting: %s", out);
    cr_expect_str_eq(lock, "FREE", "no relay holds the shard: %s", out);
    cr_expect_null(strchr(strchr(row + 1, '\n') + 1, '\n'), "one shard, one row: %s", out);
    free(out);
    free(err);
    sg_pg_destroy(pg);
}

/* A member of a status row as an integer, -1 when it is not one. */
static long long status_int(const sg_json_t *row, const char *key)
{
    int64_t v = -1;

    return sg_json_get_int(row, "$", key, true, &v, NULL) == 0 ? v : -1;
}

/* `sagad-relay status --json` (issue 37 item 4): one object per shard, the
 * numbers as numbers; --json is also taken before the command. */
Test(relay, status_json_is_one_object_per_shard)
{
    const char *env[] = {dsn_env, NULL};
    const char *const forms[][3] = {{"status", "--json", NULL}, {"--json", "status", NULL}};
    sg_pg_t *pg = sgt_db_connect(dsn);

    insert_round(pg, 0, 1, 7, 0);
    for (size_t f = 0; f < 2; f++) {
        char *out, *err, *nl;
        sg_json_t *row;
        double age = -1;
        bool held = true;

        cr_assert_eq(sgt_run("sagad-relay", forms[f], env, &out, &err), 0, "%s", err);
        nl = strchr(out, '\n');
        cr_assert_not_null(nl, "%s", out);
        cr_expect_str_eq(nl + 1, "", "one shard, one line: %s", out);
        row = sg_json_parse(out, (size_t)(nl - out), NULL, NULL);
        cr_assert_not_null(row, "one JSON object: %s", out);
        cr_expect_eq(status_int(row, "shard"), 0, "%s", out);
        cr_expect_eq(status_int(row, "backlog"), 7, "7 rows waiting: %s", out);
        cr_expect_eq(status_int(row, "published"), 0, "%s", out);
        cr_expect_eq(status_int(row, "blocked_ms"), 0, "%s", out);
        cr_expect(sg_json_is_null(sg_json_member(row, "holder")), "nobody holds it: %s", out);
        cr_expect(sg_json_is_null(sg_json_member(row, "heartbeat_age_s")), "%s", out);
        cr_expect_eq(sg_json_get_bool(row, "$", "held", true, &held, NULL), 0, "%s", out);
        cr_expect_not(held, "no relay holds the shard: %s", out);
        cr_expect_str_eq(sg_json_string(sg_json_member(sg_json_member(row, "cursor"), "tx")), "0",
                         "%s", out);
        cr_expect(sg_json_number(sg_json_member(row, "oldest_age_s"), &age) && age >= 0, "%s", out);
        sg_json_destroy(row);
        free(out);
        free(err);
    }
    sg_pg_destroy(pg);
}

/* Waits until the shard has nothing left and want rows are quarantined. */
static void wait_quarantine(sg_pg_t *pg, long long want)
{
    const char *sql = "SELECT (SELECT count(*) FROM outbox_quarantine) * 1000000 + "
                      "(SELECT count(*) FROM outbox)";
    double deadline = sgt_now_s() + 60;

    while (sgt_query_int(pg, sql) != want * 1000000 && sgt_now_s() < deadline)
        usleep(100000);
    cr_assert_eq(sgt_query_int(pg, sql), want * 1000000,
                 "%lld row(s) quarantined and the outbox empty (quarantined * 10^6 + waiting)",
                 want);
}

/* A row Kafka refuses for good, between rows of its own key and others:
 * the relay moves it to outbox_quarantine, counts and logs it, and the
 * rows after it in the shard are published (they used to wait behind it
 * for ever, the batch retried with backoff).  producer_max: the relay's
 * kafka.message.max.bytes; code: the refusal expected; reported: it comes
 * by delivery report, and the batch is sent again one row at a time. */
static void refused_row_goes_aside(const char *producer_max, const char *code, bool reported)
{
    char max_env[96], port_env[64], *body = NULL, *err = NULL, labels[96], line[128];
    const char *extra[] = {max_env, port_env, "SAGAD_RELAY_BATCH_SIZE=20", NULL};
    const char *p[] = {topic};
    sg_pg_t *pg = sgt_db_connect(dsn);
    int port = sgt_free_port();
    long long big_id;
    sgt_proc_t relay;
    sgt_prom_t prom;
    got_t got;

    snprintf(max_env, sizeof(max_env), "SAGAD_KAFKA_MESSAGE_MAX_BYTES=%s", producer_max);
    snprintf(port_env, sizeof(port_env), "SAGAD_HTTP_PORT=%d", port);
    insert_round(pg, 0, 1, 10, 0);
    /* 1,100,000 bytes: over the producer's default message.max.bytes
     * (1,000,000) and the broker's (1,048,588). */
    exec(pg,
         "INSERT INTO outbox (topic, key, payload) VALUES ($1, convert_to('k3', 'UTF8'), "
         "convert_to(repeat('x', 1100000), 'UTF8'))",
         1, p);
    big_id = sgt_query_int(pg, "SELECT max(id) FROM outbox");
    for (int seq = 1; seq < 5; seq++)
        insert_round(pg, 0, 1, 10, seq);
    relay_start(&relay, extra);
    wait_quarantine(pg, 1);
    consume(&got, 1000, 8); /* the 50 rows and the copies sent again one at a time */
    cr_expect_eq(check_complete_ordered(&got, 10, 5) + 50, got.n,
                 "every row but the refused one published, each key in order");
    cr_expect_eq(sgt_query_intf(pg,
                                "SELECT count(*) FROM outbox_quarantine WHERE outbox_id = %lld "
                                "AND error_code = '%s' AND topic = '%s' AND key = 'k3' "
                                "AND octet_length(payload) = 1100000 AND status = 'quarantined'",
                                big_id, code, topic),
                 1, "the refused row is kept whole, with Kafka's error");
    cr_assert_eq(sgt_http_get(port, "/metrics", &body), 200);
    cr_assert_eq(sgt_prom_parse(body, &prom, labels, sizeof(labels)), 0, "%s", labels);
    snprintf(labels, sizeof(labels), "error_code=\"%s\"", code);
    cr_expect_eq(sgt_prom_get(&prom, "sagad_outbox_quarantined_total", labels, 0), 1);
    sgt_prom_free(&prom);
    free(body);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &err), 0);
    snprintf(line, sizeof(line), "outbox row %lld (topic %s, key k3", big_id, topic);
    cr_expect(strstr(err, line) && strstr(err, "\"level\":\"error\""),
              "an error line names the row, its topic and key: %s", err);
    cr_expect_eq(strstr(err, "sending its rows one at a time") != NULL, reported, "refused %s: %s",
                 reported ? "by delivery report" : "at once", err);
    free(err);
    got_free(&got);
    sg_pg_destroy(pg);
}

Test(relay, a_row_the_producer_refuses_is_quarantined_and_the_shard_goes_on)
{
    refused_row_goes_aside("1000000", "kafka.msg_size_too_large", false);
}

/* The producer lets it through, the broker refuses it: the delivery
 * report says so, for the whole request, and the batch is sent again one
 * row at a time to find the row refused alone. */
Test(relay, a_row_the_broker_refuses_is_quarantined_and_the_shard_goes_on)
{
    refused_row_goes_aside("2000000", "kafka.msg_size_too_large", true);
}

/* The relay quarantines as the runtime role; the operator role
 * re-publishes a quarantined row (a new outbox row, the same message) and
 * drops one, through the two functions, each recording who. */
Test(relay, the_operator_republishes_or_drops_a_quarantined_row)
{
    char rt_dsn[600], op_dsn[600], rt_env[640];
    const char *env[] = {rt_env, kafka_env, "SAGAD_LOG_LEVEL=info", NULL};
    const char *args[] = {"run", NULL};
    const char *p[] = {topic};
    sg_pg_t *pg = sgt_db_connect(dsn), *op;
    long long first, again;
    sgt_proc_t relay;

    sgt_role_dsn(rt_dsn, sizeof(rt_dsn), dsn, "runtime");
    sgt_role_dsn(op_dsn, sizeof(op_dsn), dsn, "operator");
    snprintf(rt_env, sizeof(rt_env), "SAGAD_PG_DSN=%s", rt_dsn);
    exec(pg,
         "INSERT INTO outbox (topic, key, payload) VALUES ($1, convert_to('k0', 'UTF8'), "
         "convert_to(repeat('x', 1100000), 'UTF8'))",
         1, p);
    first = sgt_query_int(pg, "SELECT max(id) FROM outbox");
    sgt_spawn(&relay, "sagad-relay", args, env);
    wait_quarantine(pg, 1);
    op = sgt_db_connect(op_dsn);
    again = sgt_query_intf(op, "SELECT sagad_outbox_republish(%lld, 'tester')", first);
    cr_expect_gt(again, first, "a new outbox row");
    /* Still too large: quarantined again, under its new id. */
    wait_quarantine(pg, 2);
    cr_expect_eq(sgt_query_intf(pg,
                                "SELECT count(*) FROM outbox_quarantine WHERE outbox_id = %lld AND "
                                "status = 'republished' AND republished_id = %lld AND "
                                "resolved_by = 'tester' AND resolved_session_user IS NOT NULL",
                                first, again),
                 1);
    cr_expect_eq(sgt_query_intf(op, "SELECT sagad_outbox_drop(%lld, 'tester')::int", again), 1);
    cr_expect_eq(sgt_query_intf(op, "SELECT sagad_outbox_drop(%lld, 'tester')::int", again), 0,
                 "a row no longer waiting is not dropped twice");
    cr_expect_eq(sgt_query_intf(op,
                                "SELECT count(*) FROM sagad_outbox_republish(%lld, 'x') r "
                                "WHERE r IS NOT NULL",
                                again),
                 0, "nor re-published once dropped");
    cr_expect_eq(sgt_query_intf(pg,
                                "SELECT count(*) FROM outbox_quarantine WHERE outbox_id = %lld "
                                "AND status = 'dropped'",
                                again),
                 1);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    sg_pg_destroy(op);
    sg_pg_destroy(pg);
}
