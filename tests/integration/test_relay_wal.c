/* sagad-relay's WAL source (relay.source = wal) against the real
 * PostgreSQL (wal_level = logical, deploy/local/pg.sh) and Kafka: every
 * test runs the real binary, as the relay's own login (REPLICATION), on a
 * database and a replication slot of its own, and reads what reached the
 * broker. */
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
#include "sagad/sg_otel.h"
#include "sagad/sg_pg.h"

static char db[128], dsn[512], relay_dsn[512], dsn_env[600], kafka_env[256], slot_env[128],
    topic[128], slot[96];

static void setup(void)
{
    sg_pg_t *pg;
    sg_err_t err;

    sgt_db_create(db, sizeof(db), dsn, sizeof(dsn));
    sgt_role_dsn(relay_dsn, sizeof(relay_dsn), dsn, "relay");
    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", relay_dsn);
    snprintf(kafka_env, sizeof(kafka_env), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", sgt_kafka());
    sgt_unique(topic, sizeof(topic), "sgt_wal");
    sgt_unique(slot, sizeof(slot), "sgt_slot");
    snprintf(slot_env, sizeof(slot_env), "SAGAD_RELAY_SLOT=%s", slot);
    pg = sgt_db_connect(dsn);
    cr_assert_eq(sg_migrate_run(pg, NULL, NULL, &err), 0, "%s", err.message);
    sg_pg_destroy(pg);
}

/* A slot keeps its database from being dropped and the WAL from being
 * recycled: it goes first, as the relay's login (which may).  So do the
 * relay login's sessions a failed test left open (sgt_db_drop ends only
 * its own login's). */
static void teardown(void)
{
    sg_pg_t *pg = sgt_db_connect(relay_dsn);
    char err[512];
    sg_err_t e;

    if (sgt_slot_drop(relay_dsn, slot, err, sizeof(err)) < 0)
        cr_log_warn("cannot drop slot %s: %s", slot, err);
    if (sg_pg_exec(pg,
                   "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                   "current_database() AND usename = current_user AND pid <> pg_backend_pid()",
                   0, NULL, NULL, &e) < 0)
        cr_log_warn("cannot end the relay login's sessions: %s", e.message);
    sg_pg_destroy(pg);
    sgt_db_drop(db);
}

TestSuite(relay_wal, .init = setup, .fini = teardown, .timeout = 240);

static void exec(sg_pg_t *pg, const char *sql, int n, const char *const *params)
{
    sg_err_t err;

    cr_assert_eq(sg_pg_exec(pg, sql, n, params, NULL, &err), 0, "%s: %s", sql, err.message);
}

/* Starts a WAL relay on this test's database and slot; extra is
 * NULL-terminated. */
static void relay_start(sgt_proc_t *p, const char *const *extra)
{
    const char *env[16] = {dsn_env,
                           kafka_env,
                           slot_env,
                           "SAGAD_RELAY_SOURCE=wal",
                           "SAGAD_LOG_LEVEL=info",
                           "SAGAD_RELAY_STANDBY_POLL_MS=200",
                           "SAGAD_RETENTION_JANITOR=false"};
    const char *args[] = {"run", NULL};
    size_t n = 7;

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

/* The server process streaming from the slot (past its creation), 0 when
 * none.  Asked as the relay's login: pg_stat_activity shows a session's
 * command to its own role only. */
static long long slot_pid(void)
{
    sg_pg_t *rel = sgt_db_connect(relay_dsn);
    long long pid;

    pid = sgt_query_intf(rel,
                         "SELECT coalesce(max(s.active_pid), 0) FROM pg_replication_slots s "
                         "JOIN pg_stat_activity a ON a.pid = s.active_pid "
                         "WHERE s.slot_name = '%s' AND a.query LIKE 'START_REPLICATION%%'",
                         slot);
    sg_pg_destroy(rel);
    return pid;
}

/* Waits until a relay streams from the slot; returns its walsender. */
static long long wait_streaming(long long not_pid)
{
    double deadline = sgt_now_s() + 30;
    long long pid;

    while (((pid = slot_pid()) == 0 || pid == not_pid) && sgt_now_s() < deadline)
        usleep(50000);
    cr_assert(pid != 0 && pid != not_pid, "no relay streams from slot %s", slot);
    return pid;
}

static void insert_round(sg_pg_t *pg, int first, int stride, int nkeys, int seq)
{
    sgt_insert_round(pg, topic, first, stride, nkeys, seq);
}

#define WRITERS 4
#define KEYS    400
#define PER_KEY 25

static void *writer(void *arg)
{
    int w = (int)(intptr_t)arg;
    char rdsn[512];
    sg_pg_t *pg;

    /* the worker's login: its rows reach the WAL through the trigger */
    sgt_role_dsn(rdsn, sizeof(rdsn), dsn, "runtime");
    pg = sgt_db_connect(rdsn);
    for (int seq = 0; seq < PER_KEY; seq++)
        insert_round(pg, w, WRITERS, KEYS / WRITERS, seq);
    sg_pg_destroy(pg);
    return NULL;
}

/* Concurrent writers' messages arrive complete and, per key, in commit
 * order; none of them was ever a row of the outbox table. */
Test(relay_wal, publishes_in_commit_order_without_touching_the_table)
{
    pthread_t th[WRITERS];
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    got_t got;

    relay_start(&relay, NULL);
    wait_streaming(0);
    for (int w = 0; w < WRITERS; w++)
        pthread_create(&th[w], NULL, writer, (void *)(intptr_t)w);
    for (int w = 0; w < WRITERS; w++)
        pthread_join(th[w], NULL);
    sgt_consume(topic, &got, KEYS * PER_KEY, 60);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_expect_eq(check_complete_ordered(&got, KEYS, PER_KEY), 0, "no duplicates without a crash");
    cr_expect_eq(sgt_query_int(pg, "SELECT pg_relation_size('outbox')"), 0,
                 "the outbox table's heap was never written");
    cr_expect_eq(sgt_query_int(pg, "SELECT pg_indexes_size('outbox') - 8192 * (SELECT count(*) "
                                   "FROM pg_index WHERE indrelid = 'outbox'::regclass)"),
                 0, "nor its indexes (each its metapage only)");
    got_free(&got);
    sg_pg_destroy(pg);
}

/* A transaction left open holds back no one committed after it: the WAL
 * is decoded in commit order, not in transaction-id order. */
Test(relay_wal, an_open_transaction_holds_back_no_one)
{
    sg_pg_t *pg = sgt_db_connect(dsn), *slow = sgt_db_connect(dsn);
    const char *p[] = {topic};
    sgt_proc_t relay;
    got_t got;

    relay_start(&relay, NULL);
    wait_streaming(0);
    exec(slow, "BEGIN", 0, NULL);
    exec(slow,
         "INSERT INTO outbox (topic, key, payload) VALUES ($1, 'slow', convert_to('slow', "
         "'UTF8'))",
         1, p);
    insert_round(pg, 0, 1, 10, 0);
    sgt_consume(topic, &got, 10, 20);
    cr_expect_eq(got.n, 10, "the ten rows committed after it are published while it is open");
    got_free(&got);
    exec(slow, "COMMIT", 0, NULL);
    sgt_consume(topic, &got, 11, 20);
    cr_expect_eq(got.n, 11);
    cr_expect_str_eq(got.payload[10], "slow", "it goes when it commits, after the others");
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    got_free(&got);
    sg_pg_destroy(slow);
    sg_pg_destroy(pg);
}

/* What is confirmed to the server is the end of a transaction whose
 * messages Kafka all acknowledged: a crash between the acks and the
 * confirmation repeats them, loses nothing. */
Test(relay_wal, crash_between_acks_and_confirmation_loses_nothing)
{
    const char *crash[] = {"SAGAD_TEST_FAILPOINT=relay.after_ack", NULL};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    got_t got;
    char *err;
    size_t dups;
    int rc;

    for (int seq = 0; seq < 5; seq++)
        insert_round(pg, 0, 1, 10, seq); /* 50 messages, in the table until the switch */
    relay_start(&relay, crash);
    rc = sgt_wait(&relay, NULL, &err);
    cr_assert_eq(rc, 128 + SIGABRT, "the failpoint aborts the relay; exit %d: %s", rc, err);
    cr_assert(strstr(err, "failpoint relay.after_ack") != NULL, "%s", err);
    cr_assert(strstr(err, "\"rows\":\"50\"") != NULL, "the 50 rows moved into the WAL: %s", err);
    free(err);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox"), 0, "the rows are in the WAL");
    for (int seq = 5; seq < 7; seq++)
        insert_round(pg, 0, 1, 10, seq);
    relay_start(&relay, NULL);
    sgt_consume(topic, &got, 120, 20); /* 70, and room for the repeated ones */
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    dups = check_complete_ordered(&got, 10, 7);
    /* The crash came after the first acks, which may be part of the moved
     * rows' one transaction: that whole transaction came again, so as
     * many duplicates as were published before the crash, 1 to 50. */
    cr_expect(dups >= 1 && dups <= 50,
              "the unconfirmed transaction's published part came twice: %zu duplicates", dups);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* The slot is the lock: a standby's START_REPLICATION succeeds as soon as
 * the active relay's session ends, which kill -9 ends at once. */
Test(relay_wal, standby_takes_over_after_kill_9)
{
    const char *small[] = {"SAGAD_RELAY_WAL_BATCH_SIZE=100", NULL};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t a, b;
    long long pid_a;
    double t0;
    got_t got;
    size_t dups;

    relay_start(&a, small);
    pid_a = wait_streaming(0);
    relay_start(&b, small);
    for (int seq = 0; seq < 10; seq++)
        insert_round(pg, 0, 1, 100, seq);
    sgt_consume(topic, &got, 1000, 30);
    cr_assert_eq(got.n, 1000, "A published the first 1,000");
    got_free(&got);
    cr_expect_eq(slot_pid(), pid_a, "the standby did not take the slot while A lived");
    kill(a.pid, SIGKILL);
    sgt_wait(&a, NULL, NULL);
    t0 = sgt_now_s();
    for (int seq = 10; seq < 20; seq++)
        insert_round(pg, 0, 1, 100, seq);
    wait_streaming(pid_a);
    cr_expect_lt(sgt_now_s() - t0, 10.0, "takeover within seconds");
    sgt_consume(topic, &got, 2000, 60);
    cr_expect_eq(relay_stop(&b, SIGTERM, NULL), 0);
    dups = check_complete_ordered(&got, 100, 20);
    cr_expect_leq(dups, 100, "repeated at most A's unconfirmed transaction (%zu)", dups);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* A relay paused past relay.wal_sender_timeout_ms loses its session, a
 * standby streams, and the paused one, resumed, publishes nothing: each
 * message arrives once. */
Test(relay_wal, a_paused_relay_is_replaced_and_fenced)
{
    const char *quick[] = {"SAGAD_RELAY_WAL_SENDER_TIMEOUT_MS=2000", NULL};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t a, b;
    long long pid_a;
    char *err_a = NULL;
    got_t got;

    relay_start(&a, quick);
    pid_a = wait_streaming(0);
    relay_start(&b, quick);
    kill(a.pid, SIGSTOP);
    wait_streaming(pid_a);
    for (int seq = 0; seq < 5; seq++)
        insert_round(pg, 0, 1, 20, seq);
    kill(a.pid, SIGCONT);
    sgt_consume(topic, &got, 100, 30);
    sleep(2); /* room for a copy the resumed relay would send */
    got_free(&got);
    sgt_consume(topic, &got, 200, 5);
    cr_expect_eq(check_complete_ordered(&got, 20, 5), 0, "each message once");
    cr_expect_eq(relay_stop(&a, SIGTERM, &err_a), 0);
    cr_expect(strstr(err_a, "\"from\":\"active\",\"to\":\"backoff\"") &&
                  strstr(err_a, "\"published\":\"0\""),
              "the resumed relay found its session ended and published nothing: %s", err_a);
    cr_expect_eq(relay_stop(&b, SIGTERM, NULL), 0);
    free(err_a);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* A slot lost (a failover to a primary without it): writers keep their
 * rows in the table, and the relay, making the slot again, publishes
 * them. */
Test(relay_wal, rows_written_while_the_slot_is_gone_wait_in_the_table)
{
    sg_pg_t *pg = sgt_db_connect(dsn), *rel = sgt_db_connect(relay_dsn);
    sgt_proc_t relay;
    char *err = NULL, serr[512];
    got_t got;

    relay_start(&relay, NULL);
    wait_streaming(0);
    insert_round(pg, 0, 1, 10, 0);
    sgt_consume(topic, &got, 10, 20);
    cr_assert_eq(got.n, 10);
    got_free(&got);
    cr_assert_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_assert_eq(sgt_slot_drop(relay_dsn, slot, serr, sizeof(serr)), 0, "%s", serr);
    cr_assert_eq(sgt_query_intf(
                     rel, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s'", slot),
                 0);
    insert_round(pg, 0, 1, 10, 1);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox"), 10,
                 "with no slot, the rows wait in the table instead of the WAL");
    relay_start(&relay, NULL);
    sgt_consume(topic, &got, 20, 20);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &err), 0);
    cr_expect_eq(check_complete_ordered(&got, 10, 2), 0);
    cr_expect(strstr(err, "slot is gone") != NULL, "the relay says the slot was lost: %s", err);
    /* a relay just started had not streamed from the lost slot, so it
     * cannot say where the loss begins, and says so */
    cr_expect(strstr(err, "published_through") &&
                  strstr(err, "unknown (this process had not streamed from it)"),
              "the loss line says its start is unknown: %s", err);
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM outbox"), 0);
    free(err);
    got_free(&got);
    sg_pg_destroy(rel);
    sg_pg_destroy(pg);
}

/* Due timers reach Kafka through the WAL too (the relay's move inserts
 * into the outbox, whose trigger writes the WAL). */
Test(relay_wal, due_timers_are_published)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    const char *p[] = {topic};
    sgt_proc_t relay;
    got_t got;

    relay_start(&relay, NULL);
    wait_streaming(0);
    exec(pg,
         "INSERT INTO timers (due_at, topic, key, payload) VALUES "
         "(now() + interval '300 ms', $1, 'k0', convert_to('k0:0', 'UTF8')), "
         "(now() + interval '1 hour', $1, 'k0', convert_to('k0:1', 'UTF8'))",
         1, p);
    sgt_consume(topic, &got, 2, 10);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_expect_eq(got.n, 1, "the due timer, not the one due in an hour");
    cr_expect_eq(sgt_query_int(pg, "SELECT count(*) FROM timers"), 1);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* A row with no key is published with no key, not an empty one, as the
 * table source publishes it; an empty key stays empty. */
Test(relay_wal, a_row_without_a_key_is_published_without_one)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    const char *p[] = {topic};
    sgt_proc_t relay;
    got_t got;

    relay_start(&relay, NULL);
    wait_streaming(0);
    exec(pg,
         "INSERT INTO outbox (topic, key, payload) VALUES ($1, NULL, 'none'), ($1, '', 'empty')", 1,
         p);
    sgt_consume(topic, &got, 2, 20);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_assert_eq(got.n, 2);
    cr_expect_str_eq(got.payload[0], "none");
    cr_expect_eq(got.keyless[0], 1, "a NULL key is published as no key");
    cr_expect_eq(got.keyless[1], 0, "an empty key stays a key");
    got_free(&got);
    sg_pg_destroy(pg);
}

/* Removes the line "sagad-mac=..." from headers_text's text. */
static void strip_mac(char *text)
{
    char *m = strstr(text, "sagad-mac="), *end;

    if (!m)
        return;
    end = strchr(m, '\n');
    memmove(m, end ? end + 1 : m + strlen(m), strlen(end ? end + 1 : m + strlen(m)) + 1);
}

/* The worker writes its messages with sagad_outbox_write (migration
 * 0028), every other writer with an INSERT through the trigger
 * outbox_emit.  Both reach Kafka alike: the same key (none for a NULL
 * key, an empty one kept), the same headers in the same order, the same
 * payload; and, written in that order in one transaction, in that order
 * on one key. */
Test(relay_wal, the_worker_function_and_the_trigger_publish_alike)
{
    static const char *labels[] = {"nokey", "emptykey", "key"};
    char rdsn[512];
    sg_pg_t *run;
    const char *p[] = {topic};
    sgt_proc_t relay;
    got_t got;

    sgt_role_dsn(rdsn, sizeof(rdsn), dsn, "runtime");
    run = sgt_db_connect(rdsn);
    relay_start(&relay, NULL);
    wait_streaming(0);
    exec(run, "BEGIN", 0, NULL);
    exec(run,
         "INSERT INTO outbox (topic, key, headers, payload) VALUES "
         "($1, NULL, '{\"sagad-type\": \"t\", \"b\": \"2\", \"a\": \"1\"}', "
         "convert_to('trigger:nokey', 'UTF8')), "
         "($1, '', '{\"sagad-type\": \"t\", \"b\": \"2\", \"a\": \"1\"}', "
         "convert_to('trigger:emptykey', 'UTF8')), "
         "($1, 'same', '{\"sagad-type\": \"t\", \"b\": \"2\", \"a\": \"1\"}', "
         "convert_to('trigger:key', 'UTF8'))",
         1, p);
    exec(run,
         "SELECT sagad_outbox_write(ARRAY[$1, $1, $1], ARRAY[NULL, '', 'same'], "
         "array_fill('{\"sagad-type\": \"t\", \"b\": \"2\", \"a\": \"1\"}'::jsonb, "
         "ARRAY[3]), ARRAY['function:nokey', 'function:emptykey', 'function:key'])",
         1, p);
    exec(run,
         "INSERT INTO outbox (topic, key, payload) VALUES ($1, 'same', "
         "convert_to('trigger:after', 'UTF8'))",
         1, p);
    exec(run, "COMMIT", 0, NULL);
    sgt_consume(topic, &got, 7, 20);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_assert_eq(got.n, 7, "all seven messages published");
    for (size_t l = 0; l < 3; l++) {
        char want_t[32], want_f[32];
        size_t t = got.n, f = got.n;

        snprintf(want_t, sizeof(want_t), "trigger:%s", labels[l]);
        snprintf(want_f, sizeof(want_f), "function:%s", labels[l]);
        for (size_t i = 0; i < got.n; i++) {
            if (strcmp(got.payload[i], want_t) == 0)
                t = i;
            if (strcmp(got.payload[i], want_f) == 0)
                f = i;
        }
        cr_assert(t < got.n && f < got.n, "%s and %s both arrived", want_t, want_f);
        cr_expect_eq(got.keyless[f], got.keyless[t], "%s: keyless alike", labels[l]);
        cr_expect_eq(got.keyless[f], l == 0, "%s: only a NULL key is no key", labels[l]);
        if (!got.keyless[f] && !got.keyless[t])
            cr_expect_str_eq(got.key[f], got.key[t], "%s: the same key", labels[l]);
        /* sagad-mac signs the payload, which differs */
        strip_mac(got.headers[f]);
        strip_mac(got.headers[t]);
        cr_expect_str_eq(got.headers[f], got.headers[t], "%s: the same headers", labels[l]);
        cr_expect_neq(strstr(got.headers[f], "a=1\n"), NULL, "%s: headers %s", labels[l],
                      got.headers[f]);
    }
    {
        /* key "same": one partition, so Kafka's order is the commit's */
        const char *order[] = {"trigger:key", "function:key", "trigger:after"};
        size_t k = 0;

        for (size_t i = 0; i < got.n && k < 3; i++)
            if (got.key[i] && strcmp(got.key[i], "same") == 0)
                cr_expect_str_eq(got.payload[i], order[k++], "key same, message %zu", k);
        cr_expect_eq(k, 3);
    }
    got_free(&got);
    sg_pg_destroy(run);
}

/* A switch of the source and the worker's writes wait for each other:
 * sagad_outbox_write takes the outbox's lock before it reads the route.
 * So a switch waits for a write in flight (whose messages went into the
 * WAL, and are published), and a write waits for a switch in flight and
 * then follows the route the switch left. */
Test(relay_wal, a_switch_of_the_source_and_the_worker_wait_for_each_other)
{
    char rdsn[512];
    sg_pg_t *run, *sw;
    const char *p[] = {topic};
    sg_err_t err;
    sgt_proc_t relay;
    got_t got;

    sgt_role_dsn(rdsn, sizeof(rdsn), dsn, "runtime");
    run = sgt_db_connect(rdsn);
    sw = sgt_db_connect(relay_dsn);
    relay_start(&relay, NULL);
    wait_streaming(0);
    /* the relay would switch back to the WAL within a second */
    cr_assert_eq(relay_stop(&relay, SIGTERM, NULL), 0);

    exec(run, "BEGIN", 0, NULL);
    exec(run,
         "SELECT sagad_outbox_write(ARRAY[$1], ARRAY['k'], ARRAY['{}'::jsonb], "
         "ARRAY['in flight'])",
         1, p);
    exec(sw, "SET lock_timeout = '300ms'", 0, NULL);
    cr_expect_lt(sg_pg_exec(sw, "SELECT sagad_outbox_to_table()", 0, NULL, NULL, &err), 0,
                 "the switch waits for the write in flight");
    cr_expect_neq(strstr(err.message, "lock timeout"), NULL, "%s", err.message);
    exec(run, "COMMIT", 0, NULL);

    exec(sw, "BEGIN", 0, NULL);
    exec(sw, "SELECT sagad_outbox_to_table()", 0, NULL);
    exec(run, "SET lock_timeout = '300ms'", 0, NULL);
    cr_expect_lt(sg_pg_exec(run,
                            "SELECT sagad_outbox_write(ARRAY[$1], ARRAY['k'], "
                            "ARRAY['{}'::jsonb], ARRAY['refused'])",
                            1, p, NULL, &err),
                 0, "the write waits for the switch in flight");
    cr_expect_neq(strstr(err.message, "lock timeout"), NULL, "%s", err.message);
    exec(sw, "COMMIT", 0, NULL);
    exec(run,
         "SELECT sagad_outbox_write(ARRAY[$1], ARRAY['k'], ARRAY['{}'::jsonb], "
         "ARRAY['after the switch'])",
         1, p);
    cr_expect_eq(sgt_query_int(run, "SELECT count(*) FROM outbox WHERE payload = "
                                    "convert_to('after the switch', 'UTF8')"),
                 1, "written after the switch: into the table, the route it left");

    /* a WAL relay again: the message of the write in flight is in the
     * slot, and the table's row is moved into the WAL */
    relay_start(&relay, NULL);
    sgt_consume(topic, &got, 2, 20);
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_expect_eq(got.n, 2, "both messages published, none lost");
    if (got.n == 2) {
        cr_expect_str_eq(got.payload[0], "in flight");
        cr_expect_str_eq(got.payload[1], "after the switch");
    }
    got_free(&got);
    sg_pg_destroy(sw);
    sg_pg_destroy(run);
}

/* With tracing on, the WAL relay makes the table relay's publish spans:
 * in the trace of the rows' traceparent, children of their saga's span,
 * over every message it published of that saga (one span per saga per
 * batch, docs/WORKER.md). */
Test(relay_wal, publishes_spans_under_the_saga_span)
{
    const char *jq = getenv("SAGAD_TEST_JAEGER_QUERY"), *jo = getenv("SAGAD_TEST_JAEGER_OTLP");
    char otel_env[300], trace[40], tp[80], url[512], saga_span[24], topic2[160];
    const char *extra[] = {otel_env, "SAGAD_OTEL_SCHEDULE_DELAY_MS=100", NULL};
    const char *p[] = {topic, tp, topic2};
    sg_pg_t *pg = sgt_db_connect(dsn);
    sg_json_t *doc = NULL;
    sgt_proc_t relay;
    got_t got;
    long long messages = 0, spans = 0;

    cr_assert(jq && *jq && jo && *jo, "tests/run.sh starts Jaeger and exports SAGAD_TEST_JAEGER_*");
    snprintf(otel_env, sizeof(otel_env), "SAGAD_OTEL_ENDPOINT=%s", jo);
    snprintf(trace, sizeof(trace), "%016llx%016llx", (unsigned long long)getpid() << 20 | 0x5a5a,
             (unsigned long long)(sgt_now_s() * 1e6));
    snprintf(tp, sizeof(tp), "00-%s-00f067aa0ba902b7-01", trace);
    snprintf(saga_span, sizeof(saga_span), "%016llx",
             (unsigned long long)sg_otel_saga_span_id("saga-traced"));
    snprintf(topic2, sizeof(topic2), "%s_b", topic);
    relay_start(&relay, extra);
    wait_streaming(0);
    exec(pg,
         "INSERT INTO outbox (topic, key, headers, payload) VALUES "
         "($1, 'saga-traced', jsonb_build_object('traceparent', $2::text, 'sagad-type', "
         "'step.succeeded'), 'a'), "
         "($3, 'saga-traced', jsonb_build_object('traceparent', $2::text, 'sagad-type', "
         "'step.execute'), 'b')",
         3, p);
    sgt_consume(topic, &got, 1, 20);
    cr_assert_eq(got.n, 1);
    got_free(&got);
    snprintf(url, sizeof(url), "%s/api/traces/%s", jq, trace);
    for (int i = 0; i < 100 && messages < 2; i++, usleep(200000)) {
        long status = 0;
        char *body = sgt_http("GET", url, NULL, &status);
        const sg_json_t *t, *list;

        sg_json_destroy(doc);
        doc = status == 200 && body ? sg_json_parse(body, strlen(body), NULL, NULL) : NULL;
        free(body);
        t = doc ? sg_json_array_get(sg_json_member(doc, "data"), 0) : NULL;
        list = t ? sg_json_member(t, "spans") : NULL;
        messages = spans = 0;
        for (size_t k = 0; k < sg_json_array_size(list); k++) {
            const sg_json_t *s = sg_json_array_get(list, k);
            const sg_json_t *refs = sg_json_member(s, "references"),
                            *tags = sg_json_member(s, "tags");
            const char *name = sg_json_string(sg_json_member(s, "operationName"));
            const char *parent = NULL, *saga = NULL;
            double count = 0;
            bool single = false;

            if (!name || strncmp(name, "publish", 7) != 0) {
                cr_expect_fail("only relay spans in this trace: %s", name ? name : "(none)");
                continue;
            }
            for (size_t r = 0; r < sg_json_array_size(refs); r++)
                parent = sg_json_string(sg_json_member(sg_json_array_get(refs, r), "spanID"));
            for (size_t g = 0; g < sg_json_array_size(tags); g++) {
                const sg_json_t *tag = sg_json_array_get(tags, g);
                const char *key = sg_json_string(sg_json_member(tag, "key"));

                if (strcmp(key, "sagad.saga_id") == 0)
                    saga = sg_json_string(sg_json_member(tag, "value"));
                else if (strcmp(key, "messaging.batch.message_count") == 0)
                    (void)sg_json_number(sg_json_member(tag, "value"), &count);
                else if (strcmp(key, "sagad.message_type") == 0)
                    single = true;
            }
            cr_expect_str_eq(parent ? parent : "", saga_span, "%s: a child of the saga's span",
                             name);
            cr_expect_str_eq(saga ? saga : "", "saga-traced");
            spans++;
            messages += single ? 1 : (long long)count;
        }
    }
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    cr_expect_eq(messages, 2, "the spans cover both messages (%lld spans)", spans);
    cr_expect(spans >= 1 && spans <= 2);
    sg_json_destroy(doc);
    sg_pg_destroy(pg);
}

static double oldest_age(int port)
{
    char *body = NULL, err[256];
    sgt_prom_t prom = {0};
    double v;

    cr_assert_eq(sgt_http_get(port, "/metrics", &body), 200);
    cr_assert_eq(sgt_prom_parse(body, &prom, err, sizeof(err)), 0, "%s", err);
    v = sgt_prom_get(&prom, "sagad_outbox_oldest_age_seconds", "shard=\"wal\"", -1);
    sgt_prom_free(&prom);
    free(body);
    return v;
}

/* sagad_outbox_oldest_age_seconds{shard="wal"} (what SagadOutboxNotPublished
 * watches) is 0 while the relay keeps up, and grows while a message waits
 * on a broker that does not answer: the relay's heartbeats, written into
 * the WAL every 5 s, are not read back behind it. */
Test(relay_wal, oldest_age_grows_while_kafka_holds_a_message_back)
{
    int port = sgt_free_port(), dead = sgt_free_port();
    char port_env[64], dead_env[96];
    const char *env[] = {port_env, "SAGAD_RELAY_DELIVERY_TIMEOUT_MS=60000", NULL};
    const char *denv[] = {port_env, dead_env, "SAGAD_RELAY_DELIVERY_TIMEOUT_MS=60000", NULL};
    sg_pg_t *pg = sgt_db_connect(dsn);
    const char *p[] = {topic};
    sgt_proc_t relay;
    double age = 0;

    snprintf(port_env, sizeof(port_env), "SAGAD_HTTP_PORT=%d", port);
    snprintf(dead_env, sizeof(dead_env), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:%d", dead);
    relay_start(&relay, env);
    wait_streaming(0);
    sleep(6); /* a heartbeat written and read back */
    cr_expect_eq(oldest_age(port), 0, "a relay that keeps up lags by nothing");
    cr_expect_eq(relay_stop(&relay, SIGTERM, NULL), 0);
    /* the same slot, a broker nobody listens on */
    relay_start(&relay, denv);
    wait_streaming(0);
    exec(pg, "INSERT INTO outbox (topic, key, payload) VALUES ($1, 'k', 'held')", 1, p);
    for (double deadline = sgt_now_s() + 20; sgt_now_s() < deadline && age < 3; usleep(500000))
        age = oldest_age(port);
    cr_expect_geq(age, 3, "the age grows while the message waits (%.1f s)", age);
    kill(relay.pid, SIGKILL); /* its batch would wait a minute for a broker */
    sgt_wait(&relay, NULL, NULL);
    sg_pg_destroy(pg);
}

/* Only the schema's owner may write a logical decoding message: the
 * worker's, dlq-tool's, the reader's and a stranger's logins may not
 * (they write the outbox, whose trigger does it for them). */
Test(relay_wal, only_the_owner_may_write_a_decoding_message)
{
    static const char *const roles[] = {"runtime", "operator", "reader", "stranger", "relay"};

    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
        char rdsn[512];
        sg_pg_t *pg;
        sg_err_t err;
        int rc;

        sgt_role_dsn(rdsn, sizeof(rdsn), dsn, roles[i]);
        pg = sgt_db_connect(rdsn);
        rc = sg_pg_exec(pg, "SELECT pg_logical_emit_message(true, 'sagad.outbox', '\\x00'::bytea)",
                        0, NULL, NULL, &err);
        cr_expect_eq(rc, -1, "%s may not write a decoding message", roles[i]);
        cr_expect(strstr(err.message, "permission denied") != NULL, "%s: %s", roles[i],
                  err.message);
        sg_pg_destroy(pg);
    }
}

/* A database where every login may still write decoding messages (made
 * from template0, whose functions keep PostgreSQL's default grants): the
 * relay refuses to start, and says what to run. */
Test(relay_wal, refuses_a_database_where_anyone_may_emit)
{
    char name[128], odsn[512], rdsn[512], env_dsn[600], sql[256];
    const char *env[] = {
        env_dsn, kafka_env, slot_env, "SAGAD_RELAY_SOURCE=wal", "SAGAD_RETENTION_JANITOR=false",
        NULL};
    const char *args[] = {"run", NULL};
    sg_pg_t *admin = sgt_db_connect(sgt_pg_url()), *pg;
    sg_err_t err;
    char *out = NULL, *errtext = NULL;
    int rc;

    sgt_unique(name, sizeof(name), "sgt_t0");
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s TEMPLATE template0", name);
    exec(admin, sql, 0, NULL);
    snprintf(odsn, sizeof(odsn), "%.*s/%s", (int)(strrchr(dsn, '/') - dsn), dsn, name);
    pg = sgt_db_connect(odsn);
    cr_assert_eq(sg_migrate_run(pg, NULL, NULL, &err), 0, "%s", err.message);
    sg_pg_destroy(pg);
    sgt_role_dsn(rdsn, sizeof(rdsn), odsn, "relay");
    snprintf(env_dsn, sizeof(env_dsn), "SAGAD_PG_DSN=%s", rdsn);
    rc = sgt_run("sagad-relay", args, env, &out, &errtext);
    cr_expect_eq(rc, 1, "exit 1: waiting will not fix it (%d): %s", rc, errtext);
    cr_expect(strstr(errtext, "relay.emit_public") &&
                  strstr(errtext, "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message"),
              "the error names the rule and the fix: %s", errtext);
    free(out);
    free(errtext);
    sg_pg_destroy(admin);
    sgt_db_drop(name);
}

/* ---- relay.exactly_once ------------------------------------------------ */

/* The environment of an exactly-once relay: a checkpoint topic of this
 * test's own, made as an admin makes it (no relay may create topics). */
static void eos_env(char *topic_env, size_t size, const char **extra, const char *more)
{
    char ck[128], errstr[256];
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    sg_kafka_t *k;
    sg_err_t err;

    sgt_unique(ck, sizeof(ck), "sgt_ckpt");
    k = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    cr_assert_not_null(k, "%s", errstr);
    cr_assert_eq(sg_kafka_create_topic(k, ck, 1, 30000, &err), 0, "%s", err.message);
    sg_kafka_destroy(k);
    snprintf(topic_env, size, "SAGAD_RELAY_CHECKPOINT_TOPIC=%s", ck);
    extra[0] = "SAGAD_RELAY_EXACTLY_ONCE=true";
    extra[1] = topic_env;
    extra[2] = more;
    extra[3] = NULL;
}

/* Writes value into the checkpoint topic named by ck_env under the key
 * the relay of this test's slot reads ("<system identifier>/<database>/
 * <slot>"), as someone other than the relay would; returns the system
 * identifier. */
static long long plant_checkpoint(sg_pg_t *pg, const char *ck_env, const char *value_fmt)
{
    char errstr[256], key[256], value[512];
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    long long sysid = sgt_query_int(pg, "SELECT system_identifier FROM pg_control_system()");
    sg_kafka_t *k;
    sg_err_t err;

    snprintf(key, sizeof(key), "%lld/%s/%s", sysid, db, slot);
    /* value_fmt may name the key, the system and the database, in order */
    snprintf(value, sizeof(value), value_fmt, key, sysid, db);
    k = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    cr_assert_not_null(k, "%s", errstr);
    cr_assert_eq(sg_kafka_produce(k, strchr(ck_env, '=') + 1, key, strlen(key), value,
                                  strlen(value), NULL, 0, NULL, &err),
                 0, "%s", err.message);
    cr_assert_eq(sg_kafka_flush(k, 30000, &err), 0, "%s", err.message);
    sg_kafka_destroy(k);
    return sysid;
}

/* The crash of crash_between_acks_and_confirmation_loses_nothing, with
 * exactly once: the batch and its checkpoint were committed to Kafka, the
 * position was not confirmed to PostgreSQL, so the server sends the
 * transaction again, and the next relay skips what the checkpoint covers.
 * A read_committed reader sees each message once. */
Test(relay_wal, exactly_once_a_crash_before_confirmation_repeats_nothing)
{
    char ck_env[192], port_env[64], *body = NULL, perr[256];
    const char *crash[4], *calm[5];
    int port = sgt_free_port();
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    sgt_prom_t prom = {0};
    got_t got;
    char *err;
    int rc;

    eos_env(ck_env, sizeof(ck_env), crash, "SAGAD_TEST_FAILPOINT=relay.after_ack");
    snprintf(port_env, sizeof(port_env), "SAGAD_HTTP_PORT=%d", port);
    calm[0] = crash[0];
    calm[1] = crash[1];
    calm[2] = port_env;
    calm[3] = NULL;
    for (int seq = 0; seq < 5; seq++)
        insert_round(pg, 0, 1, 10, seq); /* 50, moved into the WAL in one transaction */
    relay_start(&relay, crash);
    rc = sgt_wait(&relay, NULL, &err);
    cr_assert_eq(rc, 128 + SIGABRT, "the failpoint aborts the relay; exit %d: %s", rc, err);
    cr_assert(strstr(err, "failpoint relay.after_ack") != NULL, "%s", err);
    free(err);
    for (int seq = 5; seq < 7; seq++)
        insert_round(pg, 0, 1, 10, seq);
    relay_start(&relay, calm);
    /* 70: a copy would come before the last of them (per key, in order) */
    sgt_consume(topic, &got, 70, 30);
    cr_assert_eq(sgt_http_get(port, "/metrics", &body), 200);
    cr_assert_eq(sgt_prom_parse(body, &prom, perr, sizeof(perr)), 0, "%s", perr);
    cr_expect_gt(sgt_prom_get(&prom, "sagad_relay_skipped_total", "", 0), 0,
                 "the skipped messages are counted");
    cr_expect_gt(
        sgt_prom_get(&prom, "sagad_relay_kafka_transactions_total", "outcome=\"committed\"", 0), 0,
        "and the transactions committed");
    sgt_prom_free(&prom);
    free(body);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &err), 0);
    cr_expect_eq(check_complete_ordered(&got, 10, 7), 0,
                 "the transaction the server sent again was skipped, not published twice");
    cr_expect(strstr(err, "skipped the messages the checkpoint says are in Kafka") != NULL,
              "the second relay found the first one's checkpoint: %s", err);
    free(err);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* kill -9 of the active relay in the middle of a drain of one large
 * transaction (20,000 messages moved into the WAL at once, so that the
 * batches end inside it): what it had sent of an uncommitted Kafka
 * transaction is aborted when the standby takes the transactional id, and
 * what it had committed is skipped by the checkpoint, which names a
 * message inside the transaction.  Each message is seen once, in order;
 * at least once, the same kill repeats up to the whole transaction. */
Test(relay_wal, exactly_once_kill_9_during_a_drain_repeats_nothing)
{
    char ck_env[192];
    const char *extra[4];
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t a, b;
    long long pid_a;
    got_t got;
    char *err_b = NULL;

    eos_env(ck_env, sizeof(ck_env), extra, "SAGAD_RELAY_WAL_BATCH_SIZE=10");
    for (int seq = 0; seq < 100; seq++)
        insert_round(pg, 0, 1, 200, seq); /* in the table until the switch */
    relay_start(&a, extra);
    pid_a = wait_streaming(0);
    relay_start(&b, extra);
    sgt_consume(topic, &got, 2000, 30);
    cr_assert_geq(got.n, 2000, "A was draining");
    got_free(&got);
    kill(a.pid, SIGKILL);
    sgt_wait(&a, NULL, NULL);
    wait_streaming(pid_a);
    /* 20,000: a copy would come before the last of them (per key, in order) */
    sgt_consume(topic, &got, 20000, 120);
    cr_expect_eq(relay_stop(&b, SIGTERM, &err_b), 0);
    cr_expect_eq(check_complete_ordered(&got, 200, 100), 0, "each message once: %zu seen", got.n);
    cr_expect(strstr(err_b, "skipped the messages the checkpoint says are in Kafka") != NULL,
              "the standby skipped what A had committed: %s", err_b);
    free(err_b);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* A message the broker refuses (larger than its message.max.bytes, which
 * the producer lets through), with 1,990 more behind it in the same
 * transaction and the default batch size: the refusal dooms the Kafka
 * transaction while the relay is still producing into it (the failpoint
 * relay.slow_produce makes sure of that: without it, whether the refusal
 * came back before the last produce was a race, and a relay that read the
 * same doomed batch again for ever passed now and then).  The relay
 * aborts it, reads the stream again with the refused message in a batch
 * of its own, quarantines it alone and goes on.  A read_committed reader
 * sees every other message once; nothing of the aborted transactions. */
Test(relay_wal, exactly_once_a_refused_message_is_quarantined_alone)
{
    char ck_env[192], port_env[64], *body = NULL, perr[256];
    const char *extra[6];
    const char *p[] = {topic};
    int port = sgt_free_port();
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    sgt_prom_t prom = {0};
    double deadline;
    got_t got;
    char *err = NULL;

    eos_env(ck_env, sizeof(ck_env), extra, "SAGAD_KAFKA_MESSAGE_MAX_BYTES=2000000");
    snprintf(port_env, sizeof(port_env), "SAGAD_HTTP_PORT=%d", port);
    extra[3] = port_env;
    /* the refusal comes back while the relay still produces the 1,990
     * messages behind it into the doomed transaction */
    extra[4] = "SAGAD_TEST_FAILPOINT=relay.slow_produce";
    extra[5] = NULL;
    insert_round(pg, 0, 1, 10, 0);
    /* 1,100,000 bytes: over the broker's message.max.bytes (1,048,588) */
    exec(pg,
         "INSERT INTO outbox (topic, key, payload) VALUES ($1, convert_to('k3', 'UTF8'), "
         "convert_to(repeat('x', 1100000), 'UTF8'))",
         1, p);
    for (int seq = 1; seq < 200; seq++)
        insert_round(pg, 0, 1, 10, seq); /* 2,001 rows, one transaction at the switch */
    relay_start(&relay, extra);
    deadline = sgt_now_s() + 60;
    while (sgt_query_int(pg, "SELECT count(*) FROM outbox_quarantine") < 1 &&
           sgt_now_s() < deadline)
        usleep(100000);
    sgt_consume(topic, &got, 2000, 60);
    cr_assert_eq(sgt_http_get(port, "/metrics", &body), 200);
    cr_assert_eq(sgt_prom_parse(body, &prom, perr, sizeof(perr)), 0, "%s", perr);
    cr_expect_geq(
        sgt_prom_get(&prom, "sagad_relay_kafka_transactions_total", "outcome=\"aborted\"", 0), 1,
        "the refusal aborted a transaction");
    sgt_prom_free(&prom);
    free(body);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &err), 0);
    cr_expect_eq(check_complete_ordered(&got, 10, 200), 0, "the 2,000 others once each: %zu",
                 got.n);
    cr_expect_eq(sgt_query_intf(pg, "SELECT count(*) FROM outbox_quarantine WHERE error_code = "
                                    "'kafka.msg_size_too_large' AND key = 'k3' AND "
                                    "octet_length(payload) = 1100000 AND holder = 'wal'"),
                 1, "the refused message is kept whole, with Kafka's error");
    free(err);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* A checkpoint of the slot that the relay did not write (a forged or
 * broken record in the topic) is never taken as the truth, nor ignored:
 * the relay publishes nothing and says what is wrong. */
Test(relay_wal, exactly_once_refuses_a_checkpoint_it_cannot_read)
{
    char ck_env[192];
    const char *extra[4];
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    got_t got;
    char *log = NULL;

    eos_env(ck_env, sizeof(ck_env), extra, NULL);
    plant_checkpoint(pg, ck_env, "{\"commit_lsn\":\"soon\"}");
    insert_round(pg, 0, 1, 10, 0);
    relay_start(&relay, extra);
    sgt_consume(topic, &got, 1, 5);
    cr_expect_eq(got.n, 0, "nothing published over a checkpoint it cannot read");
    got_free(&got);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &log), 0);
    cr_expect(strstr(log, "relay.checkpoint") && strstr(log, "is not one the relay wrote"),
              "the error names the checkpoint: %s", log);
    free(log);
    sg_pg_destroy(pg);
}

/* A checkpoint of this slot written on another timeline (as after a
 * failover to a standby), far ahead of every position here: its positions
 * are another history's, and skipping by them would lose every message.
 * The relay publishes them all and says why it did not skip. */
Test(relay_wal, exactly_once_does_not_skip_by_another_historys_checkpoint)
{
    char ck_env[192];
    const char *extra[4];
    sg_pg_t *pg = sgt_db_connect(dsn);
    sgt_proc_t relay;
    got_t got;
    char *log = NULL;

    eos_env(ck_env, sizeof(ck_env), extra, NULL);
    plant_checkpoint(pg, ck_env,
                     "{\"key\":\"%s\",\"history\":\"%lld/99/%s\",\"commit_lsn\":\"FF/0\","
                     "\"message_lsn\":\"FF/0\",\"relay\":\"test\"}");
    for (int seq = 0; seq < 3; seq++)
        insert_round(pg, 0, 1, 10, seq);
    relay_start(&relay, extra);
    sgt_consume(topic, &got, 30, 30);
    cr_expect_eq(relay_stop(&relay, SIGTERM, &log), 0);
    cr_expect_eq(check_complete_ordered(&got, 10, 3), 0, "all 30 published, once");
    cr_expect(strstr(log, "written on another WAL history") != NULL, "the warning says why: %s",
              log);
    free(log);
    got_free(&got);
    sg_pg_destroy(pg);
}

/* The table source has no WAL position to checkpoint: asked for exactly
 * once, the relay refuses to start and says why. */
Test(relay_wal, exactly_once_is_refused_with_the_table_source)
{
    const char *env[] = {dsn_env,
                         kafka_env,
                         "SAGAD_RELAY_SOURCE=table",
                         "SAGAD_RELAY_EXACTLY_ONCE=true",
                         "SAGAD_RETENTION_JANITOR=false",
                         NULL};
    const char *args[] = {"run", NULL};
    char *out = NULL, *errtext = NULL;
    int rc;

    rc = sgt_run("sagad-relay", args, env, &out, &errtext);
    cr_expect_eq(rc, 2, "a usage error (%d): %s", rc, errtext);
    cr_expect(strstr(errtext, "relay.exactly_once needs relay.source = wal") != NULL, "%s",
              errtext);
    free(out);
    free(errtext);
}
