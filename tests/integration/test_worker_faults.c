/* sagad-worker under faults: SIGKILL at random points, a stopped worker
 * whose partitions were taken over (a zombie), and a SIGTERM while a call
 * runs.  Each test runs the real worker and relay on its own database,
 * topics and consumer group, and judges by the rows PostgreSQL holds. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "sagad/sg_backoff.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_text.h"

#define MAX_PARTS 8
#define MAX_PROCS 16
/* One bound for every test: Criterion 2.4.1 leaks a timer entry (and the
 * ASan run fails on it) when tests with different timeouts finish out of
 * deadline order. */
#define WF_TIMEOUT_S 180

/* A running sagad process; a thread drains its output so it never blocks
 * on a full pipe, and reaps it. */
typedef sgt_bg_t proc_t;

/* The test's own database, topics and group, and the environment every
 * process of the test starts with. */
static struct fixture_s {
    char db[128], dsn[512], topic[128], internal[128], events[128], dlq[128], group[128];
    int partitions;
    char env_text[10][700];
    const char *env[11];
    /* The keyring (ARCHITECTURE.md, "Trust boundary"): shop submits,
     * faults approves and cancels; their private keys. */
    char keyring[64];
    unsigned char shop_key[32], faults_key[32];
    sg_pg_t *pg;
    /* Every process a test starts: a failed assertion leaves the test
     * early, and fixture_fini still stops and reaps them. */
    proc_t procs[MAX_PROCS];
    int nprocs;
} fx;

/* consumer_offsets.next_offset as last seen, per partition of the
 * commands topic ([0]) and of the internal one ([1]). */
typedef struct offsets_s {
    long long last[2][MAX_PARTS];
    long samples;
} offsets_t;

/* Each test's database holds its own topics only: they are told apart by
 * the prefix sgt_unique gave them. */
#define WF_COMMANDS_ROWS "consumer_offsets WHERE topic ~ '^sgt_wf_cmd'"
#define WF_INTERNAL_ROWS "consumer_offsets WHERE topic ~ '^sgt_wf_int'"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static void fixture_init(int partitions)
{
    char topics_out[256];
    const char *args[] = {"topics", "--partitions", topics_out, NULL};
    sg_err_t err;
    char *out = NULL, *errtext = NULL;
    int n = 0, rc;

    fx.partitions = partitions;
    sgt_db_create(fx.db, sizeof(fx.db), fx.dsn, sizeof(fx.dsn));
    sgt_unique(fx.topic, sizeof(fx.topic), "sgt_wf_cmd");
    sgt_unique(fx.internal, sizeof(fx.internal), "sgt_wf_int");
    sgt_unique(fx.events, sizeof(fx.events), "sgt_wf_evt");
    sgt_unique(fx.dlq, sizeof(fx.dlq), "sgt_wf_dlq");
    sgt_unique(fx.group, sizeof(fx.group), "sgt_wf_group");
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_PG_DSN=%s", fx.dsn);
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s",
             sgt_kafka());
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_TOPIC_COMMANDS=%s", fx.topic);
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_TOPIC_INTERNAL=%s", fx.internal);
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_TOPIC_EVENTS=%s", fx.events);
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_TOPIC_DLQ=%s", fx.dlq);
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_WORKER_GROUP_ID=%s", fx.group);
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]),
             "SAGAD_WORKER_REGISTRY=tests/fixtures/faults-tools.json");
    snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_LOG_LEVEL=info");
    {
        unsigned char pub[2][32];
        char *b64[2];
        FILE *fp;
        int fd;

        snprintf(fx.keyring, sizeof(fx.keyring), "/tmp/sgt-wf-keyring-XXXXXX");
        cr_assert_geq(fd = mkstemp(fx.keyring), 0);
        cr_assert_eq(sg_ed25519_keygen(pub[0], fx.shop_key, &err), 0);
        cr_assert_eq(sg_ed25519_keygen(pub[1], fx.faults_key, &err), 0);
        b64[0] = sg_base64(pub[0], 32);
        b64[1] = sg_base64(pub[1], 32);
        cr_assert_not_null(fp = fdopen(fd, "w"));
        fprintf(fp,
                "{\"v\": 1, \"principals\": {\"shop\": {\"keys\": {\"k1\": \"%s\"}, "
                "\"roles\": [\"submit\"]}, \"faults\": {\"keys\": {\"k1\": \"%s\"}, "
                "\"roles\": [\"approve\", \"cancel\"]}}}\n",
                b64[0], b64[1]);
        fclose(fp);
        free(b64[0]);
        free(b64[1]);
        snprintf(fx.env_text[n++], sizeof(fx.env_text[0]), "SAGAD_SECURITY_KEYRING=%s", fx.keyring);
    }
    for (int i = 0; i < n; i++)
        fx.env[i] = fx.env_text[i];
    fx.env[n] = NULL;
    fx.pg = sgt_db_connect(fx.dsn);
    cr_assert_eq(sg_migrate_run(fx.pg, NULL, NULL, &err), 0, "%s", err.message);
    snprintf(topics_out, sizeof(topics_out), "%d", partitions);
    rc = sgt_run("sagad-worker", args, fx.env, &out, &errtext);
    cr_assert_eq(rc, 0, "sagad-worker topics: %s", errtext);
    free(out);
    free(errtext);
}

static void fixture_fini(void)
{
    for (int i = 0; i < fx.nprocs; i++) {
        proc_t *pr = &fx.procs[i];
        sgt_bg_join(pr, 0); /* kills what still runs */
        sgt_bg_free(pr);
    }
    sg_pg_destroy(fx.pg);
    fx.pg = NULL;
    if (fx.db[0])
        sgt_db_drop(fx.db);
    if (fx.keyring[0])
        unlink(fx.keyring);
}

TestSuite(worker_faults, .fini = fixture_fini);

/* ---- processes ---------------------------------------------------------- */

/* Starts prog run with the fixture's environment plus extra
 * (NULL-terminated).  The process belongs to the fixture. */
static proc_t *proc_start(const char *prog, const char *const *extra)
{
    const char *args[] = {"run", NULL};
    const char *env[32];
    size_t n = 0;
    proc_t *pr;

    cr_assert_lt(fx.nprocs, MAX_PROCS, "too many processes for one test");
    pr = &fx.procs[fx.nprocs++];
    for (const char *const *e = fx.env; *e; e++)
        env[n++] = *e;
    for (; extra && *extra && n < 31; extra++)
        env[n++] = *extra;
    env[n] = NULL;
    sgt_bg_start(pr, prog, args, env);
    return pr;
}

/* For a failure message: the end of the process's log, which is complete
 * only once it exited, so a running process is stopped first. */
static const char *proc_log(proc_t *pr)
{
    sgt_bg_join(pr, 0);
    return sgt_bg_tail(pr);
}

/* ---- data ----------------------------------------------------------------- */

/* Produces msg keyed by key, signed (header sagad-auth) by the principal
 * whose private key priv is. */
static void produce_signed(sg_kafka_t *k, const unsigned char *priv, const char *principal,
                           const char *key, const char *msg, size_t len)
{
    sg_err_t err;
    char *auth =
        sg_auth_sign(priv, principal, "k1", (int64_t)time(NULL), key, strlen(key), msg, len, &err);
    sg_kafka_header_t h = {SG_AUTH_HEADER, auth, auth ? strlen(auth) : 0};

    cr_assert_not_null(auth, "%s", err.message);
    cr_assert_eq(sg_kafka_produce(k, fx.topic, key, strlen(key), msg, len, &h, 1, NULL, &err), 0,
                 "%s", err.message);
    free(auth);
}

/* Produces one saga.start per id, keyed by saga id, as a producer would
 * (signed by shop: some have an approval gate). */
static void submit_sagas(const char *prefix, int first, int count, const char *steps_json)
{
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    char errstr[256], id[64], payload[2048];
    sg_kafka_t *k = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    sg_err_t err;

    cr_assert_not_null(k, "%s", errstr);
    for (int i = first; i < first + count; i++) {
        int len;

        snprintf(id, sizeof(id), "%s-%04d", prefix, i);
        len = snprintf(payload, sizeof(payload),
                       "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-%s\",\"saga_id\":\"%s\","
                       "\"name\":\"%s\",\"input\":{\"n\":%d},\"steps\":%s}",
                       id, id, prefix, i, steps_json);
        produce_signed(k, fx.shop_key, "shop", id, payload, (size_t)len);
        sg_kafka_poll(k, 0);
    }
    cr_assert_eq(sg_kafka_flush(k, 30000, &err), 0, "%s", err.message);
    sg_kafka_destroy(k);
}

#define query_int(...) sgt_query_intf(fx.pg, __VA_ARGS__)

#define GATED_SAGAS 20 /* sagas whose second step waits for a person */

/* The sagas not finished, with their steps' statuses, on stderr: what a
 * failed wait needs to say. */
static void print_unfinished(void)
{
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    if (sg_pg_exec(fx.pg,
                   "SELECT s.saga_id || ' ' || s.status || ': ' || string_agg(st.name || '=' || "
                   "st.status, ' ' ORDER BY st.idx) FROM sagas s JOIN steps st USING (saga_id) "
                   "WHERE s.status NOT IN ('completed', 'compensated', 'failed', 'cancelled') "
                   "GROUP BY s.saga_id, s.status ORDER BY 1 LIMIT 20",
                   0, NULL, &res, &err) < 0)
        return;
    for (size_t r = 0; r < sg_pg_res_rows(res); r++)
        fprintf(stderr, "worker_faults: unfinished: %s\n", sg_pg_res_get(res, r, 0));
    sg_pg_res_destroy(res);
}

/* The gated sagas now waiting for their approval get their decision:
 * saga.approve for an even number, saga.cancel for an odd one; each once
 * (sent[]).  Returns how many were sent. */
static int decide_gates(bool *sent)
{
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    char errstr[256], id[64], msg[512];
    sg_kafka_t *k = NULL;
    sg_err_t err;
    int n = 0;

    for (int i = 0; i < GATED_SAGAS; i++) {
        if (sent[i] || query_int("SELECT count(*) FROM steps WHERE saga_id = 'gate-%04d' AND "
                                 "status = 'awaiting_approval'",
                                 i) != 1)
            continue;
        if (!k)
            k = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
        cr_assert_not_null(k, "%s", errstr);
        snprintf(id, sizeof(id), "gate-%04d", i);
        if (i % 2 == 0)
            snprintf(msg, sizeof(msg),
                     "{\"v\":1,\"type\":\"saga.approve\",\"id\":\"ok-%s\",\"saga_id\":\"%s\","
                     "\"step\":\"b\",\"by\":\"faults\",\"reason\":\"approved under kills\"}",
                     id, id);
        else
            snprintf(msg, sizeof(msg),
                     "{\"v\":1,\"type\":\"saga.cancel\",\"id\":\"cxl-%s\",\"saga_id\":\"%s\","
                     "\"by\":\"faults\",\"reason\":\"cancelled under kills\"}",
                     id, id);
        produce_signed(k, fx.faults_key, "faults", id, msg, strlen(msg));
        sent[i] = true;
        n++;
    }
    if (k) {
        cr_assert_eq(sg_kafka_flush(k, 30000, &err), 0, "%s", err.message);
        sg_kafka_destroy(k);
    }
    return n;
}

/* Checks that no partition's stored offset went backwards since the last
 * sample. */
static void offsets_sample(offsets_t *o)
{
    const char *params[] = {fx.group, fx.topic, fx.internal};
    sg_pg_res_t *res;
    sg_err_t err;

    cr_assert_eq(sg_pg_exec(fx.pg,
                            "SELECT (topic = $3)::int, partition, next_offset FROM "
                            "consumer_offsets WHERE group_id = $1 AND topic IN ($2, $3)",
                            3, params, &res, &err),
                 0, "%s", err.message);
    for (size_t r = 0; r < sg_pg_res_rows(res); r++) {
        int t = (int)sg_pg_res_int(res, r, 0, -1);
        int part = (int)sg_pg_res_int(res, r, 1, -1);
        long long next = (long long)sg_pg_res_int(res, r, 2, -1);

        cr_assert(t >= 0 && t < 2 && part >= 0 && part < MAX_PARTS);
        cr_assert_geq(next, o->last[t][part],
                      "%s partition %d: stored offset moved back from %lld to %lld",
                      t ? "internal" : "commands", part, o->last[t][part], next);
        o->last[t][part] = next;
    }
    sg_pg_res_destroy(res);
    o->samples++;
}

/* Polls sql (one integer) every 100 ms until it reaches want or timeout_s
 * passes, sampling the offsets in between when o is given.  Returns the
 * last value. */
static long long wait_for(const char *sql, long long want, double timeout_s, offsets_t *o)
{
    double deadline = sgt_now_s() + timeout_s;
    long long v;

    while ((v = sgt_query_int(fx.pg, sql)) < want && sgt_now_s() < deadline) {
        if (o)
            offsets_sample(o);
        sleep_ms(100);
    }
    return v;
}

/* Sleeps ms, sampling the offsets every ~100 ms. */
static void sleep_sampling(long ms, offsets_t *o)
{
    double end = sgt_now_s() + (double)ms / 1000.0;

    while (sgt_now_s() < end) {
        double left = end - sgt_now_s();

        offsets_sample(o);
        sleep_ms(left > 0.1 ? 100 : (long)(left * 1000) + 1);
    }
}

/* ---- 1. crash safety under load ----------------------------------------- */

#define CRASH_SAGAS 500
#define CRASH_STEPS 3
#define CRASH_KILLS 10

/* Each step names the one before it by reference: b the result of a
 * (the ledger answers {"key", "calls"}), c the key of b. */
static const char ledger_steps[] =
    "[{\"name\":\"a\",\"tool\":\"ledger\",\"args\":{\"s\":0}},"
    "{\"name\":\"b\",\"tool\":\"ledger\",\"args\":{\"s\":1,\"after\":{\"$from\":"
    "\"/steps/a/result/key\"}}},"
    "{\"name\":\"c\",\"tool\":\"ledger\",\"args\":{\"s\":2,\"after\":{\"$from\":\"/steps/b/"
    "key\"}}}]";

/* A charge whose outcome stays unknown (every attempt times out): it is
 * compensated first, its undo naming the forward key it undoes, then the
 * reservation before it. */
#define UNKNOWN_SAGAS 20

/* A reservation, then a step that waits for a person: each is approved
 * (even numbers) or cancelled (odd) once it waits, while the kills go on. */
static const char gated_steps[] =
    "[{\"name\":\"a\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":0}},"
    "{\"name\":\"b\",\"tool\":\"ledger.gated\",\"args\":{\"s\":1}}]";
static const char unknown_steps[] =
    "[{\"name\":\"a\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":0}},"
    "{\"name\":\"b\",\"tool\":\"hang.reversible\",\"args\":{\"ms\":1000},"
    "\"compensate\":{\"tool\":\"ledger\",\"args\":{\"undo\":{\"$from\":\"/steps/b/key\"},"
    "\"held\":{\"$from\":\"/steps/a/result/key\"}}}}]";

/* Parallel groups: a reservation, a group of two reversible members, one
 * refused for good and one that naps 300 ms (so that kills land among its
 * members' calls), then a step after the group.  best_effort (even
 * numbers) completes partial: the four effects once each, nothing undone.
 * all_or_nothing (odd) compensates: the reservation and both members made
 * and undone once each, the step after the group never called.  Their
 * members' calls run side by side, so the kills land among them. */
#define GROUP_SAGAS 40
static const char group_be_steps[] =
    "[{\"name\":\"a\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":0}},"
    "{\"name\":\"g\",\"policy\":\"best_effort\",\"parallel\":["
    "{\"name\":\"x\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":1}},"
    "{\"name\":\"y\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":2}},"
    "{\"name\":\"z\",\"tool\":\"fail\",\"args\":{\"code\":\"z.refused\"}},"
    "{\"name\":\"n\",\"tool\":\"sleep\",\"args\":{\"ms\":300}}]},"
    "{\"name\":\"d\",\"tool\":\"ledger\",\"args\":{\"s\":5}}]";
static const char group_aon_steps[] =
    "[{\"name\":\"a\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":0}},"
    "{\"name\":\"g\",\"policy\":\"all_or_nothing\",\"parallel\":["
    "{\"name\":\"x\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":1}},"
    "{\"name\":\"y\",\"tool\":\"ledger.reversible\",\"args\":{\"s\":2}},"
    "{\"name\":\"z\",\"tool\":\"fail\",\"args\":{\"code\":\"z.refused\"}},"
    "{\"name\":\"n\",\"tool\":\"sleep\",\"args\":{\"ms\":300}}]},"
    "{\"name\":\"d\",\"tool\":\"ledger\",\"args\":{\"s\":5}}]";

static uint64_t test_seed(void)
{
    const char *s = getenv("SAGAD_TEST_SEED");
    struct timespec ts;

    if (s && *s)
        return strtoull(s, NULL, 10);
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000003u) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
}

Test(worker_faults, sigkill_at_random_points_loses_nothing_and_doubles_nothing,
     .timeout = WF_TIMEOUT_S)
{
    char instance[200], id[64], done_sql[256];
    /* Static membership: a restarted worker takes its partitions back at
     * once instead of waiting for the killed one's session to expire.  The
     * crash-loop limit sits above the number of kills, so no command can
     * be dead-lettered for being interrupted by this test. */
    const char *extra[] = {instance, id, "SAGAD_KAFKA_SESSION_TIMEOUT_MS=6000",
                           "SAGAD_WORKER_CRASH_LOOP_LIMIT=20", NULL};
    uint64_t seed = test_seed();
    sg_rng_t rng;
    offsets_t offsets = {{{0}}, 0};
    proc_t *relay, *worker;
    long long completed, calls, effects, interrupted;
    bool gate_sent[GATED_SAGAS] = {false};
    double t0 = sgt_now_s();

    sg_rng_seed(&rng, seed);
    fprintf(
        stderr,
        "worker_faults: kill schedule seed %llu (SAGAD_TEST_SEED=%llu replays the kill delays)\n",
        (unsigned long long)seed, (unsigned long long)seed);
    fixture_init(3);
    snprintf(instance, sizeof(instance), "SAGAD_KAFKA_GROUP_INSTANCE_ID=%s-w", fx.group);
    snprintf(done_sql, sizeof(done_sql),
             "SELECT count(*) FROM sagas WHERE status IN ('completed', 'compensated', 'failed', "
             "'cancelled')");
    relay = proc_start("sagad-relay", NULL);
    for (int kill_no = 0; kill_no < CRASH_KILLS; kill_no++) {
        long delay = 300 + (long)sg_rng_upto(&rng, 1200);
        int rc;

        /* The work arrives while the kills go on, so they land in the
         * middle of it rather than after it. */
        submit_sagas("crash", kill_no * (CRASH_SAGAS / CRASH_KILLS), CRASH_SAGAS / CRASH_KILLS,
                     ledger_steps);
        submit_sagas("unk", kill_no * (UNKNOWN_SAGAS / CRASH_KILLS), UNKNOWN_SAGAS / CRASH_KILLS,
                     unknown_steps);
        submit_sagas("gate", kill_no * (GATED_SAGAS / CRASH_KILLS), GATED_SAGAS / CRASH_KILLS,
                     gated_steps);
        submit_sagas("gbe", kill_no * (GROUP_SAGAS / 2 / CRASH_KILLS),
                     GROUP_SAGAS / 2 / CRASH_KILLS, group_be_steps);
        submit_sagas("gao", kill_no * (GROUP_SAGAS / 2 / CRASH_KILLS),
                     GROUP_SAGAS / 2 / CRASH_KILLS, group_aon_steps);
        snprintf(id, sizeof(id), "SAGAD_WORKER_ID=crash-%d", kill_no);
        worker = proc_start("sagad-worker", extra);
        sleep_sampling(delay / 2, &offsets);
        decide_gates(gate_sent);
        sleep_sampling(delay - delay / 2, &offsets);
        sgt_bg_signal(worker, SIGKILL);
        rc = sgt_bg_join(worker, 10);
        cr_assert_eq(rc, 128 + SIGKILL, "kill %d after %ld ms: exit %d, %s", kill_no, delay, rc,
                     proc_log(worker));
    }
    fprintf(stderr, "worker_faults: %lld of %d sagas terminal after %d kills\n",
            sgt_query_int(fx.pg, done_sql), CRASH_SAGAS + UNKNOWN_SAGAS + GATED_SAGAS + GROUP_SAGAS,
            CRASH_KILLS);

    snprintf(id, sizeof(id), "SAGAD_WORKER_ID=crash-last");
    worker = proc_start("sagad-worker", extra);
    /* It takes every partition of both topics (and is past start-up, so
     * it has its SIGTERM handler) before it is judged. */
    if (wait_for("SELECT count(*) FROM consumer_offsets WHERE owner = 'crash-last'", 6, 30,
                 &offsets) != 6)
        cr_assert_fail("the last worker did not take the partitions: %s", proc_log(worker));
    /* The gates still waiting get their decision from the last worker. */
    for (double t = sgt_now_s(); sgt_now_s() - t < 60;) {
        int left = 0;
        decide_gates(gate_sent);
        for (int i = 0; i < GATED_SAGAS; i++)
            left += !gate_sent[i];
        if (!left)
            break;
        sleep_sampling(200, &offsets);
    }
    completed =
        wait_for(done_sql, CRASH_SAGAS + UNKNOWN_SAGAS + GATED_SAGAS + GROUP_SAGAS, 120, &offsets);
    sgt_bg_signal(worker, SIGTERM);
    cr_expect_eq(sgt_bg_join(worker, 40), 0, "the last worker exits 0 on SIGTERM: %s",
                 proc_log(worker));
    sgt_bg_signal(relay, SIGTERM);
    cr_expect_eq(sgt_bg_join(relay, 30), 0, "the relay exits 0 on SIGTERM");
    offsets_sample(&offsets);
    if (completed != CRASH_SAGAS + UNKNOWN_SAGAS + GATED_SAGAS + GROUP_SAGAS)
        print_unfinished();
    cr_assert_eq(completed, CRASH_SAGAS + UNKNOWN_SAGAS + GATED_SAGAS + GROUP_SAGAS,
                 "only %lld of %d sagas finished; last worker: %s", completed,
                 CRASH_SAGAS + UNKNOWN_SAGAS + GATED_SAGAS + GROUP_SAGAS, proc_log(worker));

    cr_expect_eq(query_int("SELECT count(*) FROM sagas WHERE status = 'completed' AND saga_id "
                           "LIKE 'crash-%%'"),
                 CRASH_SAGAS, "every saga completed");
    /* The gates: approved ones ran their step once and completed; a
     * cancelled one never called it, and its reservation was undone once. */
    cr_expect_eq(query_int("SELECT count(*) FROM sagas WHERE saga_id ~ '^gate-[0-9]{3}[02468]$' "
                           "AND status = 'completed'"),
                 GATED_SAGAS / 2, "every approved saga completed");
    cr_expect_eq(query_int("SELECT count(*) FROM sagas WHERE saga_id ~ '^gate-[0-9]{3}[13579]$' "
                           "AND status = 'cancelled'"),
                 GATED_SAGAS / 2, "every cancelled saga ended cancelled");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ "
                           "'^gate-[0-9]{3}[02468]:[01]:f:g1$'"),
                 GATED_SAGAS, "an approved saga's two effects, once each");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ "
                           "'^gate-[0-9]{3}[13579]:0:[fc]:g1$'"),
                 GATED_SAGAS, "a cancelled saga's reservation made and undone, once each");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'gate-%%'"),
                 2 * GATED_SAGAS, "no other effect: a cancelled gate was never called");
    /* The groups: best_effort ones completed partial, every effect once,
     * nothing undone; all_or_nothing ones compensated, each effect made and
     * undone once, the step after the group never called. */
    cr_expect_eq(query_int("SELECT count(*) FROM sagas WHERE saga_id LIKE 'gbe-%%' AND status = "
                           "'completed'"),
                 GROUP_SAGAS / 2, "every best_effort group's saga completed");
    cr_expect_eq(query_int("SELECT count(*) FROM steps WHERE saga_id LIKE 'gbe-%%' AND "
                           "status = 'failed' AND name = 'z'"),
                 GROUP_SAGAS / 2, "the refused member failed, nothing else did");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ "
                           "'^gbe-[0-9]{4}:[0125]:f:g1$'"),
                 4 * (GROUP_SAGAS / 2), "a best_effort saga's four effects, once each");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'gbe-%%'"),
                 4 * (GROUP_SAGAS / 2), "nothing undone, nothing else");
    cr_expect_eq(query_int("SELECT count(*) FROM sagas WHERE saga_id LIKE 'gao-%%' AND status = "
                           "'compensated'"),
                 GROUP_SAGAS / 2, "every all_or_nothing group's saga compensated");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ "
                           "'^gao-[0-9]{4}:[0-2]:[fc]:g1$'"),
                 6 * (GROUP_SAGAS / 2), "the reservation and both members made and undone once");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'gao-%%'"),
                 6 * (GROUP_SAGAS / 2), "no other effect: the step after the group never ran");
    cr_expect_eq(query_int("SELECT count(*) FROM steps WHERE saga_id LIKE 'gao-%%' AND name = "
                           "'d' AND status = 'skipped' AND error_code = "
                           "'runtime.skipped_dependency_failed'"),
                 GROUP_SAGAS / 2, "the step after a failed group is skipped_dependency_failed");
    cr_expect_eq(query_int("SELECT count(*) FROM dead_letters WHERE saga_id ~ '^g(be|ao)-'"), 0,
                 "a refused member is not dead-lettered");
    cr_expect_eq(query_int("SELECT count(*) FROM steps WHERE saga_id LIKE 'crash-%%' AND status "
                           "<> 'succeeded'"),
                 0, "every step succeeded");
    cr_expect_eq(query_int("SELECT count(*) FROM dead_letters WHERE saga_id LIKE 'crash-%%'"), 0,
                 "nothing was dead-lettered");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'crash-%%'"),
                 CRASH_SAGAS * CRASH_STEPS, "one effect per (saga, step)");
    /* The references resolved to the keys of the steps before, whatever
     * the kills interrupted. */
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ '^crash-[0-9]{4}:1:' "
                           "AND args->>'after' IS DISTINCT FROM split_part(key, ':', 1) || "
                           "':0:f:g1'"),
                 0, "step b received step a's key from its result");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ '^crash-[0-9]{4}:2:' "
                           "AND args->>'after' IS DISTINCT FROM split_part(key, ':', 1) || "
                           "':1:f:g1'"),
                 0, "step c received step b's key");
    /* The unknown charges: each compensated once, by the key it undoes,
     * then the reservation; nothing else. */
    cr_expect_eq(query_int("SELECT count(*) FROM sagas WHERE saga_id LIKE 'unk-%%' AND status = "
                           "'compensated'"),
                 UNKNOWN_SAGAS, "every saga with an unknown step compensated");
    cr_expect_eq(query_int("SELECT count(*) FROM steps WHERE saga_id LIKE 'unk-%%' AND status = "
                           "'compensated'"),
                 2 * UNKNOWN_SAGAS, "the unknown step and the one before are compensated");
    cr_expect_eq(
        query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ '^unk-[0-9]{4}:1:c:g1$' "
                  "AND args->>'undo' = split_part(key, ':', 1) || ':1:f:g1' AND "
                  "args->>'held' = split_part(key, ':', 1) || ':0:f:g1'"),
        UNKNOWN_SAGAS, "each undo of the unknown step named its forward key");
    cr_expect_eq(
        query_int("SELECT count(*) FROM builtin_ledger WHERE key ~ '^unk-[0-9]{4}:0:[fc]:g1$'"),
        2 * UNKNOWN_SAGAS, "each reservation made and undone once");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'unk-%%'"),
                 3 * UNKNOWN_SAGAS, "no other effect");
    cr_expect_eq(query_int("SELECT count(*) FROM dead_letters WHERE saga_id LIKE 'unk-%%' AND "
                           "error_code = 'runtime.budget.attempts_exhausted'"),
                 UNKNOWN_SAGAS, "each unknown step dead-lettered once");
    cr_expect_eq(query_int("SELECT count(*) FROM generate_series(0, %d) AS n, generate_series(0, "
                           "%d) AS s WHERE NOT EXISTS (SELECT 1 FROM builtin_ledger WHERE key = "
                           "format('crash-%%s:%%s:f:g1', lpad(n::text, 4, '0'), s))",
                           CRASH_SAGAS - 1, CRASH_STEPS - 1),
                 0, "every expected key <saga>:<step>:f:g1 has its effect");
    cr_expect_eq(
        query_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'crash-%%' AND key !~ "
                  "'^crash-[0-9]{4}:[0-2]:f:g1$'"),
        0, "no key of another phase or generation");
    for (int p = 0; p < fx.partitions; p++) {
        cr_expect_gt(offsets.last[0][p], 0, "commands partition %d was consumed", p);
        cr_expect_gt(offsets.last[1][p], 0, "internal partition %d was consumed", p);
    }
    cr_expect_gt(offsets.samples, 50, "the offsets were watched throughout");

    calls = query_int("SELECT sum(calls) FROM builtin_ledger");
    effects = query_int("SELECT count(*) FROM builtin_ledger");
    interrupted = query_int("SELECT count(*) FROM attempts WHERE error_code = "
                            "'runtime.interrupted'");
    fprintf(stderr,
            "worker_faults: seed %llu: %d kills, ledger calls %lld for %lld effects (%lld "
            "absorbed retries), %lld interrupted attempts, most interruptions of one attempt "
            "%lld, %ld offset samples, %.1f s\n",
            (unsigned long long)seed, CRASH_KILLS, calls, effects, calls - effects, interrupted,
            query_int("SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM attempts WHERE "
                      "error_code = 'runtime.interrupted' GROUP BY saga_id, step_idx, attempt) x"),
            offsets.samples, sgt_now_s() - t0);
    cr_expect_geq(calls, effects);
}

/* ---- 2. a zombie cannot commit ------------------------------------------ */

#define ZOMBIE_SAGAS 6

static const char slow_steps[] = "[{\"name\":\"slow\",\"tool\":\"sleep\",\"args\":{\"ms\":4000}},"
                                 "{\"name\":\"effect\",\"tool\":\"ledger\",\"args\":{}}]";

/* A worker named id with a short session, so a stopped one is expelled
 * from the group within seconds. */
static proc_t *start_named_worker(const char *id)
{
    char id_env[128];
    const char *extra[] = {id_env, "SAGAD_KAFKA_SESSION_TIMEOUT_MS=6000",
                           "SAGAD_KAFKA_HEARTBEAT_INTERVAL_MS=1000", NULL};

    snprintf(id_env, sizeof(id_env), "SAGAD_WORKER_ID=%s", id);
    return proc_start("sagad-worker", extra);
}

Test(worker_faults, stopped_worker_past_its_session_is_fenced_after_takeover,
     .timeout = WF_TIMEOUT_S)
{
    proc_t *relay, *zombie, *taker;
    long long epochs_before, v;
    int rc_zombie, rc_taker;

    fixture_init(3);
    relay = proc_start("sagad-relay", NULL);
    zombie = start_named_worker("zombie");
    submit_sagas("zombie", 0, ZOMBIE_SAGAS, slow_steps);
    /* Every saga's slow call is running in the first worker... */
    v = wait_for("SELECT count(*) FROM attempts WHERE worker_id = 'zombie' AND step_idx = 0 AND "
                 "finished_at IS NULL",
                 ZOMBIE_SAGAS, 30, NULL);
    if (v != ZOMBIE_SAGAS)
        cr_assert_fail("the first worker started %lld of %d calls: %s", v, ZOMBIE_SAGAS,
                       proc_log(zombie));
    /* ...when it stops answering: no heartbeats, no commits. */
    sgt_bg_signal(zombie, SIGSTOP);
    epochs_before = query_int("SELECT sum(owner_epoch) FROM consumer_offsets");
    taker = start_named_worker("taker");

    /* The broker expels the stopped members; the second worker takes every
     * partition of both topics (a new owner epoch each) and redoes the
     * interrupted calls. */
    v = wait_for("SELECT count(*) FROM consumer_offsets WHERE owner = 'taker'", 6, 45, NULL);
    if (v != 6)
        cr_assert_fail("the second worker took %lld of 6 partitions: %s", v, proc_log(taker));
    cr_expect_geq(query_int("SELECT sum(owner_epoch) FROM consumer_offsets"), epochs_before + 6,
                  "every takeover bumps the owner epoch");
    v = wait_for("SELECT count(*) FROM sagas WHERE status = 'completed'", ZOMBIE_SAGAS, 45, NULL);
    cr_assert_eq(v, ZOMBIE_SAGAS, "the second worker completed %lld of %d sagas", v, ZOMBIE_SAGAS);

    /* The zombie wakes up with its calls still running: when they return,
     * their outcomes must not land.  It rejoins the group and owns a
     * partition again once it has given up the old ones. */
    sgt_bg_signal(zombie, SIGCONT);
    v = wait_for("SELECT count(*) FROM consumer_offsets WHERE owner = 'zombie'", 1, 60, NULL);
    cr_expect_geq(v, 1, "the first worker rejoins after it was fenced");
    /* Both keep working afterwards. */
    submit_sagas("after", 0, ZOMBIE_SAGAS,
                 "[{\"name\":\"effect\",\"tool\":\"ledger\",\"args\":{}}]");
    v = wait_for("SELECT count(*) FROM sagas WHERE status = 'completed'", 2 * ZOMBIE_SAGAS, 45,
                 NULL);
    cr_expect_eq(v, 2 * ZOMBIE_SAGAS, "sagas submitted after the takeover complete");

    sgt_bg_signal(zombie, SIGTERM);
    sgt_bg_signal(taker, SIGTERM);
    rc_zombie = sgt_bg_join(zombie, 40);
    rc_taker = sgt_bg_join(taker, 40);
    sgt_bg_signal(relay, SIGTERM);
    cr_expect_eq(sgt_bg_join(relay, 30), 0, "the relay exits 0");
    cr_expect_eq(rc_zombie, 0, "the fenced worker exits 0 on SIGTERM: %s", proc_log(zombie));
    cr_expect_eq(rc_taker, 0, "the second worker exits 0 on SIGTERM: %s", proc_log(taker));

    cr_expect_eq(query_int("SELECT count(*) FROM attempts WHERE worker_id = 'zombie' AND saga_id "
                           "LIKE 'zombie-%%'"),
                 ZOMBIE_SAGAS, "the zombie started one call per saga, no more");
    cr_expect_eq(
        query_int("SELECT count(*) FROM attempts WHERE worker_id = 'zombie' AND saga_id "
                  "LIKE 'zombie-%%' AND (status IS DISTINCT FROM 'error' OR error_code IS DISTINCT "
                  "FROM 'runtime.interrupted')"),
        0, "the zombie's calls stay interrupted: none of their outcomes was stored");
    cr_expect_eq(query_int("SELECT count(*) FROM attempts WHERE step_idx = 0 AND status = 'ok' "
                           "AND saga_id LIKE 'zombie-%%'"),
                 ZOMBIE_SAGAS, "one stored outcome per slow step");
    cr_expect_eq(query_int("SELECT count(*) FROM attempts WHERE step_idx = 0 AND status = 'ok' "
                           "AND saga_id LIKE 'zombie-%%' AND worker_id = 'taker'"),
                 ZOMBIE_SAGAS, "...all of them the second worker's");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger"), 2 * ZOMBIE_SAGAS,
                 "one effect per saga");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE calls <> 1"), 0,
                 "and the effect step ran once: the zombie never moved a saga on");
    cr_expect_eq(query_int("SELECT count(*) FROM steps WHERE status <> 'succeeded'"), 0);
    cr_expect_eq(query_int("SELECT count(*) FROM dead_letters"), 0);
    cr_expect(strstr(zombie->err, "abandoned") &&
                  (strstr(zombie->err, "fenced") || strstr(zombie->err, "revoked")),
              "the zombie says it gave its commands up: %s", proc_log(zombie));
}

/* ---- 3. SIGTERM drains the running call ---------------------------------- */

/* SIGTERM to the worker, then to the relay: both exit 0. */
static void stop_cleanly(proc_t *worker, proc_t *relay)
{
    int rc;

    sgt_bg_signal(worker, SIGTERM);
    rc = sgt_bg_join(worker, 15);
    cr_expect_eq(rc, 0, "the worker exits 0 (exit %d): %s", rc, proc_log(worker));
    sgt_bg_signal(relay, SIGTERM);
    cr_expect_eq(sgt_bg_join(relay, 30), 0, "the relay exits 0");
}

Test(worker_faults, sigterm_lets_the_running_call_finish_and_commits_it, .timeout = WF_TIMEOUT_S)
{
    const char *extra[] = {"SAGAD_WORKER_DRAIN_TIMEOUT_MS=10000", NULL};
    proc_t *relay, *worker;
    double t0, took;
    long long v;
    int rc;

    fixture_init(1);
    relay = proc_start("sagad-relay", NULL);
    worker = proc_start("sagad-worker", extra);
    submit_sagas("drain", 0, 1, "[{\"name\":\"slow\",\"tool\":\"sleep\",\"args\":{\"ms\":1500}}]");
    v = wait_for("SELECT count(*) FROM attempts WHERE finished_at IS NULL", 1, 30, NULL);
    if (v != 1)
        cr_assert_fail("the call never started: %s", proc_log(worker));
    t0 = sgt_now_s();
    sgt_bg_signal(worker, SIGTERM);
    rc = sgt_bg_join(worker, 15);
    took = sgt_now_s() - t0;
    sgt_bg_signal(relay, SIGTERM);
    cr_expect_eq(sgt_bg_join(relay, 30), 0, "the relay exits 0");

    cr_expect_eq(rc, 0, "SIGTERM exits 0: %s", proc_log(worker));
    cr_expect_lt(took, 10.0, "within the drain timeout (took %.1f s)", took);
    cr_expect_eq(query_int("SELECT count(*) FROM attempts WHERE status = 'ok' AND latency_ms >= "
                           "1500"),
                 1, "the call ran to its end and its outcome was stored");
    cr_expect_eq(query_int("SELECT count(*) FROM attempts"), 1, "once");
    cr_expect_eq(query_int("SELECT count(*) FROM steps WHERE status = 'succeeded'"), 1);
    cr_expect_eq(query_int("SELECT count(*) FROM sagas WHERE status = 'completed'"), 1);
    /* The step ran chained, in the transaction of its saga.start (offset
     * 0 of the commands topic), so its own message (offset 0 of the
     * internal topic) may still have been on its way when the drain
     * stopped intake.  A restart acknowledges it without running the step
     * again. */
    cr_expect_geq(query_int("SELECT next_offset FROM " WF_COMMANDS_ROWS), 1,
                  "the stored offset moved past the saga.start");
    v = query_int("SELECT owner_epoch FROM " WF_INTERNAL_ROWS);
    relay = proc_start("sagad-relay", NULL);
    worker = proc_start("sagad-worker", extra);
    /* The drain may have consumed the step's message already (offset 1
     * then, before the restart): the worker is waited for by its taking
     * the partition, or SIGTERM could come before it handles signals. */
    cr_expect_eq(wait_for("SELECT owner_epoch FROM " WF_INTERNAL_ROWS, v + 1, 30, NULL), v + 1,
                 "the restarted worker took the partition");
    cr_expect_eq(wait_for("SELECT next_offset FROM " WF_INTERNAL_ROWS, 1, 30, NULL), 1,
                 "the restarted worker consumed the step's message");
    stop_cleanly(worker, relay);
    cr_expect_eq(query_int("SELECT count(*) FROM attempts"), 1, "the step did not run again");
}

/* ---- 4. A transaction held up in PostgreSQL ------------------------------ */

#define HELD_OTHERS 100

static void exec_sql(const char *sql)
{
    sg_err_t err;

    cr_assert_eq(sg_pg_exec(fx.pg, sql, 0, NULL, NULL, &err), 0, "%s: %s", sql, err.message);
}

/* The worker keeps two transactions out at once (worker.
 * transactions_in_flight).  Here the first, with saga hold-0000's
 * saga.start (offset 0), is held inside PostgreSQL by a trigger while 100
 * other sagas run on the other connection and commit.  Their commits must
 * not move the stored offset past offset 0, whose transaction has not
 * committed: the worker is killed, the held transaction dies with it, and
 * after a restart the held saga still runs, while every other saga's
 * effects stay at one each.  (With a batch size of 8, two ready commands
 * are enough for the second connection; see send_now().) */
Test(worker_faults, held_transaction_keeps_the_offset_and_holds_up_nothing_else,
     .timeout = WF_TIMEOUT_S)
{
    const char *extra[] = {"SAGAD_WORKER_BATCH_SIZE=8", NULL};
    offsets_t o = {{{0}}, 0};
    proc_t *relay, *worker;

    fixture_init(1);
    exec_sql("CREATE FUNCTION hold_saga() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
             "IF NEW.saga_id = 'hold-0000' THEN PERFORM pg_sleep(90); END IF; RETURN NEW; END $$");
    exec_sql("CREATE TRIGGER hold_saga BEFORE INSERT ON sagas FOR EACH ROW "
             "EXECUTE FUNCTION hold_saga()");
    relay = proc_start("sagad-relay", NULL);
    worker = proc_start("sagad-worker", extra);
    submit_sagas("hold", 0, 1, ledger_steps);
    cr_assert_eq(wait_for("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                          "AND datname = current_database()",
                          1, 30, NULL),
                 1, "the held saga's transaction never reached the trigger: %s", proc_log(worker));
    submit_sagas("free", 0, HELD_OTHERS, ledger_steps);
    cr_assert_eq(
        wait_for("SELECT count(*) FROM sagas WHERE status = 'completed'", HELD_OTHERS, 60, &o),
        HELD_OTHERS, "the other sagas complete while one transaction is held up: %s",
        proc_log(worker));
    cr_expect_eq(query_int("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                           "AND datname = current_database()"),
                 1, "...and still is");
    cr_expect_eq(query_int("SELECT next_offset FROM " WF_COMMANDS_ROWS), 0,
                 "the stored offset stays at the held saga.start's");

    sgt_bg_signal(worker, SIGKILL);
    sgt_bg_join(worker, 15);
    exec_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = "
             "'PgSleep' AND datname = current_database()");
    exec_sql("DROP TRIGGER hold_saga ON sagas");
    worker = proc_start("sagad-worker", extra);
    cr_expect_eq(
        wait_for("SELECT count(*) FROM sagas WHERE status = 'completed'", HELD_OTHERS + 1, 60, &o),
        HELD_OTHERS + 1, "after a restart the held saga runs too: %s", proc_log(worker));
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger"), 3 * (HELD_OTHERS + 1),
                 "every step's effect happened");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE calls <> 1"), 0, "once");
    cr_expect_geq(wait_for("SELECT next_offset FROM " WF_COMMANDS_ROWS, 1, 30, &o), 1,
                  "the offset moves on once the held saga.start committed");
    stop_cleanly(worker, relay);
}

/* A saga row locked by someone else (an operator's session, a dlq-tool
 * replay) holds up the load of the one transaction that reads it, and
 * nothing else: the loop does not wait for a load (loop_txn_start()), so
 * 100 other sagas run on the other connection meanwhile.  Here saga
 * lock-0000 completes, a session locks its row, and its saga.start comes
 * again (a duplicate, answered from its row once the lock goes).  Before
 * 2026-11-29 the loop blocked on that load, and nothing completed until
 * the lock went.  (With a batch size of 4, one waiting command is enough
 * for the other connection; with the default 256 it takes 64, and with 8
 * the last of the 100 sagas' commands, alone, waited for the locked one:
 * send_now().) */
Test(worker_faults, locked_saga_row_holds_up_only_its_own_batch, .timeout = WF_TIMEOUT_S)
{
    const char *extra[] = {"SAGAD_WORKER_BATCH_SIZE=4", NULL};
    offsets_t o = {{{0}}, 0};
    proc_t *relay, *worker;
    sg_pg_t *locker;
    sg_err_t err;

    fixture_init(1);
    relay = proc_start("sagad-relay", NULL);
    worker = proc_start("sagad-worker", extra);
    submit_sagas("lock", 0, 1, ledger_steps);
    cr_assert_eq(wait_for("SELECT count(*) FROM sagas WHERE status = 'completed'", 1, 60, &o), 1,
                 "saga lock-0000 completes: %s", proc_log(worker));
    locker = sgt_db_connect(fx.dsn);
    cr_assert_eq(sg_pg_exec(locker, "BEGIN", 0, NULL, NULL, &err), 0, "%s", err.message);
    cr_assert_eq(sg_pg_exec(locker, "SELECT 1 FROM sagas WHERE saga_id = 'lock-0000' FOR UPDATE", 0,
                            NULL, NULL, &err),
                 0, "%s", err.message);
    submit_sagas("lock", 0, 1, ledger_steps);
    cr_assert_eq(wait_for("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                          "AND datname = current_database() AND application_name LIKE "
                          "'sagad-worker%'",
                          1, 30, NULL),
                 1, "the worker's load of lock-0000 never waited for the lock: %s",
                 proc_log(worker));
    submit_sagas("free", 0, HELD_OTHERS, ledger_steps);
    /* An assert: proc_log() stops the worker to read its whole log. */
    cr_assert_eq(
        wait_for("SELECT count(*) FROM sagas WHERE status = 'completed'", HELD_OTHERS + 1, 60, &o),
        HELD_OTHERS + 1, "the other sagas complete while one load waits for a lock: %s",
        proc_log(worker));
    cr_expect_eq(query_int("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND datname = current_database() AND application_name LIKE "
                           "'sagad-worker%%'"),
                 1, "...and it still waits");
    cr_expect_eq(query_int("SELECT next_offset FROM " WF_COMMANDS_ROWS), 1,
                 "the stored offset stays at the waiting duplicate's");
    sg_pg_destroy(locker); /* the lock goes with the session */
    cr_expect_geq(wait_for("SELECT next_offset FROM " WF_COMMANDS_ROWS, 2, 30, &o), 2,
                  "the duplicate is answered once the lock goes: %s", proc_log(worker));
    cr_expect_eq(query_int("SELECT count(*) FROM sagas"), HELD_OTHERS + 1, "no saga twice");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger"), 3 * (HELD_OTHERS + 1),
                 "every step's effect happened");
    cr_expect_eq(query_int("SELECT count(*) FROM builtin_ledger WHERE calls <> 1"), 0, "once");
    stop_cleanly(worker, relay);
}
