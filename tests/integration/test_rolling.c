/* Rolling deploys, as Kubernetes does them, with real processes: under a
 * steady load of sagas, one of two workers (or the active one of two
 * relays) gets SIGTERM.  It must exit 0 within its grace period, the other
 * must take its work over, and nothing may be lost or done twice: every
 * saga completes, every ledger effect happens once, every event reaches
 * the events topic once and in order; and a draining worker's /readyz
 * answers 503 at once.  Each test has its own database, topics and group
 * (tests/support/sg_worker_env). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../support/sg_worker_env.h"
#include "../support/sgt_prom.h"

#define ROLL_PARTITIONS 4
#define ROLL_SAGAS      240
#define ROLL_RATE_HZ    40 /* sagas submitted per second */
/* The grace periods the tests give, as Kubernetes would before SIGKILL:
 * the worker's drain timeout plus room for its last commit (the manifests
 * use the longest tool timeout plus the drain time); the relay's delivery
 * timeout plus room. */
#define WORKER_GRACE_S  15 /* worker.drain_timeout_ms 10 s + 5 s */
#define ABANDON_GRACE_S 16 /* drain 0.3 s + the sleep tool's timeout 10 s + 5 s */
#define RELAY_GRACE_S   40
#define ROLL_TIMEOUT_S  240

TestSuite(rolling, .init = sgw_setup, .fini = sgw_teardown, .timeout = ROLL_TIMEOUT_S);

/* Three steps, two of them ledger effects; every tenth saga's middle step
 * sleeps long enough to be running when the SIGTERM comes. */
static void saga_steps(int i, char *out, size_t size)
{
    snprintf(out, size,
             "[{\"name\": \"debit\", \"tool\": \"ledger\", \"args\": {\"i\": %d}},"
             " {\"name\": \"wait\", \"tool\": \"sleep\", \"args\": {\"ms\": %d}},"
             " {\"name\": \"credit\", \"tool\": \"ledger\", \"args\": {\"i\": %d}}]",
             i, i % 10 == 0 ? 1500 : 50, i);
}

/* ---- the steady load: a producer thread, no assertions off the main
 * thread (it counts what failed; the test checks the count) ----------------- */

typedef struct load_s {
    pthread_t th;
    sg_kafka_t *producer;
    atomic_int submitted;
    atomic_int failed;
} load_t;

static void *load_run(void *arg)
{
    load_t *l = arg;
    char id[64], steps[512], msg[1024];
    sg_err_t err;

    for (int i = 0; i < ROLL_SAGAS; i++) {
        int len;

        snprintf(id, sizeof(id), "roll-%04d", i);
        saga_steps(i, steps, sizeof(steps));
        len = snprintf(msg, sizeof(msg),
                       "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": "
                       "\"%s\", \"name\": \"rolling\", \"steps\": %s}",
                       id, id, steps);
        if (sg_kafka_produce(l->producer, sgw.topic_cmd, id, strlen(id), msg, (size_t)len, NULL, 0,
                             NULL, &err) < 0)
            atomic_fetch_add(&l->failed, 1);
        sg_kafka_poll(l->producer, 0);
        atomic_fetch_add(&l->submitted, 1);
        usleep(1000000 / ROLL_RATE_HZ);
    }
    if (sg_kafka_flush(l->producer, 30000, &err) < 0)
        atomic_fetch_add(&l->failed, 1);
    return NULL;
}

static void load_start(load_t *l)
{
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    char errstr[256];

    memset(l, 0, sizeof(*l));
    l->producer = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    cr_assert_not_null(l->producer, "%s", errstr);
    cr_assert_eq(pthread_create(&l->th, NULL, load_run, l), 0);
}

static void load_join(load_t *l)
{
    pthread_join(l->th, NULL);
    sg_kafka_destroy(l->producer);
    cr_assert_eq(atomic_load(&l->failed), 0, "the load's producer failed");
}

static void wait_submitted(load_t *l, int n)
{
    while (atomic_load(&l->submitted) < n)
        usleep(20000);
}

/* ---- what every test expects at the end ------------------------------------ */

/* Every saga completed, each ledger effect exactly once, nothing
 * dead-lettered, and each saga's events on the topic once, in order.  A
 * clean drain (every running call finished within it) also redid no call:
 * no interrupted attempt, no second ledger call. */
static void expect_everything_done_once(bool clean_drain)
{
    char id[64];

    sgw_wait_int(ROLL_SAGAS, "SELECT count(*) FROM sagas WHERE status = 'completed'");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas"), ROLL_SAGAS);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger"), 2 * ROLL_SAGAS,
                 "one effect per ledger step");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key !~ "
                           "'^roll-[0-9]{4}:[02]:f:g1$'"),
                 0, "every effect under its step's first-generation key");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0, "nothing dead-lettered");
    if (clean_drain) {
        cr_expect_eq(sgw_q_int("SELECT coalesce(sum(calls), 0) FROM builtin_ledger"),
                     2 * ROLL_SAGAS, "no ledger call was made twice");
        cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE error_code = "
                               "'runtime.interrupted'"),
                     0, "no call was interrupted");
    }
    for (int i = 0; i < ROLL_SAGAS; i++) {
        snprintf(id, sizeof(id), "roll-%04d", i);
        sgw_event_wait(id, "saga.completed");
        sgw_expect_events(id, NULL, "saga.accepted", "step.succeeded", "step.succeeded",
                          "step.succeeded", "saga.completed", NULL);
    }
}

/* ---- probes ---------------------------------------------------------------- */

/* Polls pr's /readyz on port until it answers want; returns the body
 * (caller frees).  Fails when pr exits first. */
static char *readyz_until(sgt_bg_t *pr, int port, int want)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;
    char *body = NULL;
    int status;

    while ((status = sgt_http_get(port, "/readyz", &body)) != want) {
        cr_assert(!sgt_bg_done(pr), "exited before /readyz answered %d (last %d): %s", want, status,
                  sgt_bg_tail(pr));
        cr_assert_lt(sgt_now_s(), deadline, "/readyz still %d, expected %d: %s", status, want,
                     body ? body : "");
        free(body);
        body = NULL;
        usleep(50000);
    }
    return body;
}

/* ---- workers --------------------------------------------------------------- */

/* Two workers, A (sgw.worker) and B, under the load; SIGTERM to A in the
 * middle of a call.  A must exit 0 within grace_s and B must own every
 * partition and finish everything. */
static void roll_one_worker(const char *drain_env, int grace_s, bool clean_drain)
{
    const char *common[] = {drain_env, NULL};
    char a_port[40];
    const char *a_env[] = {"SAGAD_WORKER_ID=roll-a", a_port, NULL};
    const char *b_env[] = {"SAGAD_WORKER_ID=roll-b", NULL};
    int port = sgt_free_port();
    sgt_bg_t *b;
    load_t load;
    long long a_parts;
    char *body;
    int rc;

    snprintf(a_port, sizeof(a_port), "SAGAD_HTTP_PORT=%d", port);
    sgw_world_start(NULL, ROLL_PARTITIONS, common);
    sgt_bg_start(&sgw.relay, "sagad-relay", sgw_run_args, sgw.env);
    sgw_start(&sgw.worker, "sagad-worker", a_env);
    b = sgw_proc_start("sagad-worker", b_env);
    free(readyz_until(&sgw.worker, port, 200));
    /* Both are members and own partitions of both topics before the load
     * starts (each topic is shared out on its own: a worker never holds
     * only the commands topic's, where no step runs). */
    sgw_wait_int(4, "SELECT count(DISTINCT (owner, topic)) FROM consumer_offsets WHERE owner IN "
                    "('roll-a', 'roll-b')");
    for (int t = 0; t < 2; t++) {
        const char *topic = t ? sgw.topic_int : sgw.topic_cmd;
        a_parts = sgw_q_int("SELECT count(*) FROM consumer_offsets WHERE owner = 'roll-a' AND "
                            "topic = '%s'",
                            topic);
        cr_assert(a_parts > 0 && a_parts < ROLL_PARTITIONS, "A owns %lld partitions of %s", a_parts,
                  topic);
    }

    load_start(&load);
    wait_submitted(&load, ROLL_SAGAS / 3);
    /* A is in the middle of a long call when Kubernetes stops it. */
    sgw_wait_int(1, "SELECT least(count(*), 1) FROM attempts WHERE worker_id = 'roll-a' AND "
                    "finished_at IS NULL AND step_idx = 1");
    sgt_bg_signal(&sgw.worker, SIGTERM);
    /* Kubernetes takes A out of its Service as soon as it drains, while the
     * call still runs. */
    body = readyz_until(&sgw.worker, port, 503);
    cr_expect(strstr(body, "draining") != NULL, "503 names the drain: %s", body);
    free(body);
    rc = sgt_bg_join(&sgw.worker, grace_s);
    cr_assert_eq(rc, 0, "worker A exits 0 within its %d s grace period, got %d: %s", grace_s, rc,
                 sgt_bg_tail(&sgw.worker));

    /* B owns every partition of both topics, each under a new owner
     * epoch. */
    sgw_wait_int(2 * ROLL_PARTITIONS,
                 "SELECT count(*) FROM consumer_offsets WHERE owner = 'roll-b'");
    load_join(&load);
    expect_everything_done_once(clean_drain);
    cr_expect_gt(sgw_q_int("SELECT count(*) FROM attempts WHERE worker_id = 'roll-a' AND status = "
                           "'ok'"),
                 0, "A did work before it left");
    cr_expect_gt(sgw_q_int("SELECT count(*) FROM attempts WHERE worker_id = 'roll-b'"), 0,
                 "B did work");
    rc = sgw_proc_join(b, SIGTERM);
    cr_expect_eq(rc, 0, "worker B exits 0: %s", sgt_bg_tail(b));
    rc = sgw_proc_join(&sgw.relay, SIGTERM);
    cr_expect_eq(rc, 0, "the relay exits 0: %s", sgt_bg_tail(&sgw.relay));
}

Test(rolling, sigterm_to_one_of_two_workers_hands_its_partitions_over)
{
    /* The drain outlasts every call: A finishes them all and redoes none. */
    roll_one_worker("SAGAD_WORKER_DRAIN_TIMEOUT_MS=10000", WORKER_GRACE_S, true);
}

Test(rolling, a_call_longer_than_the_drain_is_abandoned_and_redone_by_the_other_worker)
{
    /* A 300 ms drain cuts the 1.5 s calls short: A abandons them, still
     * exits 0 (once they return, within the sleep tool's 10 s timeout), and
     * B redoes them under the same idempotency key. */
    roll_one_worker("SAGAD_WORKER_DRAIN_TIMEOUT_MS=300", ABANDON_GRACE_S, false);
    cr_expect_gt(sgw_q_int("SELECT count(*) FROM attempts WHERE worker_id = 'roll-a' AND "
                           "error_code = 'runtime.interrupted'"),
                 0, "A's abandoned calls count as interrupted");
}

/* ---- relays ---------------------------------------------------------------- */

/* The pid of the relay holding shard 0 (0 when none does). */
static long long relay_holder_pid(void)
{
    char holder[160];
    const char *colon;

    sgw_q_text(holder, sizeof(holder), "SELECT holder FROM relay_cursors WHERE shard = 0");
    colon = strrchr(holder, ':');
    return colon ? atoll(colon + 1) : 0;
}

static void wait_holder(int pid)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;

    while (relay_holder_pid() != pid && sgt_now_s() < deadline)
        usleep(50000);
    cr_assert_eq(relay_holder_pid(), pid, "relay %d never held the shard (holder %lld)", pid,
                 relay_holder_pid());
}

Test(rolling, sigterm_to_the_active_relay_lets_the_standby_publish_the_rest)
{
    const char *common[] = {"SAGAD_RELAY_STANDBY_POLL_MS=200", NULL};
    char standby_port[40];
    const char *standby_env[] = {standby_port, NULL};
    int port = sgt_free_port();
    sgt_bg_t *standby;
    load_t load;
    long long published_by_a;
    int rc;

    snprintf(standby_port, sizeof(standby_port), "SAGAD_HTTP_PORT=%d", port);
    sgw_world_start(NULL, ROLL_PARTITIONS, common);
    sgt_bg_start(&sgw.relay, "sagad-relay", sgw_run_args, sgw.env);
    wait_holder(sgw.relay.p.pid);
    standby = sgw_proc_start("sagad-relay", standby_env);
    sgt_bg_start(&sgw.worker, "sagad-worker", sgw_run_args, sgw.env);
    /* A standby is ready too (its lock state is known): the relay
     * Deployment's readiness probe keeps both replicas in service. */
    free(readyz_until(standby, port, 200));

    load_start(&load);
    wait_submitted(&load, ROLL_SAGAS / 3);
    sgw_wait_int(1, "SELECT least(count(*), 1) FROM sagas WHERE status = 'completed'");
    cr_assert_eq(relay_holder_pid(), sgw.relay.p.pid, "the first relay is the active one");
    sgt_bg_signal(&sgw.relay, SIGTERM);
    rc = sgt_bg_join(&sgw.relay, RELAY_GRACE_S);
    cr_assert_eq(rc, 0, "the active relay exits 0 within its %d s grace period, got %d: %s",
                 RELAY_GRACE_S, rc, sgt_bg_tail(&sgw.relay));
    published_by_a = sgw_q_int("SELECT published FROM relay_cursors WHERE shard = 0");
    wait_holder(standby->p.pid);

    load_join(&load);
    expect_everything_done_once(true);
    sgw_wait_int(0, "SELECT count(*) FROM outbox");
    cr_expect_gt(published_by_a, 0, "the first relay published before it stopped");
    cr_expect_gt(sgw_q_int("SELECT published FROM relay_cursors WHERE shard = 0"), published_by_a,
                 "the standby published the rest");
    rc = sgw_proc_join(standby, SIGTERM);
    cr_expect_eq(rc, 0, "the standby exits 0: %s", sgt_bg_tail(standby));
    cr_expect(strstr(standby->err, "took over shard") != NULL, "the standby logs its takeover: %s",
              sgt_bg_tail(standby));
    rc = sgw_proc_join(&sgw.worker, SIGTERM);
    cr_expect_eq(rc, 0, "the worker exits 0: %s", sgt_bg_tail(&sgw.worker));
}
