/* sagad-worker end to end: the real worker and relay binaries on their own
 * database, topics, consumer group and tool registry per test.  Sagas go in
 * as saga.start messages on the commands topic; what a producer or an
 * operator relies on is read back from the events and DLQ topics and from
 * the tables (sagas, steps, attempts, dead_letters, builtin_ledger,
 * consumer_offsets). */
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
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_log.h"
#include "sagad/sg_pg.h"

#define WAIT_S 60.0 /* longest wait for anything a test expects to happen */

/* Tools every test's registry has; a test may add its own. */
#define BASE_TOOLS                                                                                 \
    "\"noop\": {\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": \"read\"},"       \
    "\"echo\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "                 \
    "\"idempotent\"},"                                                                             \
    "\"ledger\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "             \
    "\"idempotent\"},"                                                                             \
    "\"ledger.reversible\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "  \
    "\"reversible\", \"compensation\": \"ledger\"},"                                               \
    "\"fail\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "                 \
    "\"idempotent\"},"                                                                             \
    "\"sleep\": {\"adapter\": \"builtin\", \"target\": \"sleep\", \"side_effect\": \"read\", "     \
    "\"timeout_ms\": 10000},"                                                                      \
    "\"email.send\": {\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": "           \
    "\"irreversible\"},"                                                                           \
    "\"inventory.reserve\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "    \
    "\"idempotent\", \"args\": {\"type\": \"object\", \"required\": [\"sku\", \"qty\"], "          \
    "\"properties\": {\"sku\": {\"type\": \"string\", \"minLength\": 1}, \"qty\": {\"type\": "     \
    "\"integer\", \"minimum\": 1}}}}"

/* ---- spawned binaries (tests/support: sgt_bg_*) ---------------------------- */

typedef sgt_bg_t proc_t;

static const char *const run_args[] = {"run", NULL};

/* Sends sig (0: none), then waits for the exit; its exit code. */
static int proc_join(proc_t *pr, int sig)
{
    if (sig)
        sgt_bg_signal(pr, sig);
    return sgt_bg_join(pr, -1);
}

/* ---- messages read from a topic ------------------------------------------ */

typedef struct msg_s {
    sg_json_t *doc; /* NULL when the payload is not JSON */
    char *raw;      /* the payload's bytes, NUL added */
    size_t len;
    char key[160];
    char code[96]; /* sagad-error-code header, "" when absent */
    int32_t partition;
    int64_t offset;
} msg_t;

typedef struct reader_s {
    sg_kafka_t *c;
    msg_t *v;
    size_t n, cap;
} reader_t;

static void reader_open(reader_t *r, const char *topic)
{
    char group[128], errstr[256];
    const char *props[] = {"bootstrap.servers", sgt_kafka(), "group.id", group, NULL};
    const char *topics[] = {topic};
    sg_err_t err;

    sgt_unique(group, sizeof(group), "sgt_wreader");
    memset(r, 0, sizeof(*r));
    r->c = sg_kafka_new(NULL, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr));
    cr_assert_not_null(r->c, "%s", errstr);
    cr_assert_eq(sg_kafka_subscribe(r->c, topics, 1, &err), 0, "%s", err.message);
}

static void reader_close(reader_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        sg_json_destroy(r->v[i].doc);
        free(r->v[i].raw);
    }
    free(r->v);
    sg_kafka_destroy(r->c);
    memset(r, 0, sizeof(*r));
}

/* Appends what arrives within ms. */
static void reader_poll(reader_t *r, int ms)
{
    double end = sgt_now_s() + ms / 1000.0;
    sg_kafka_msg_t *msg;
    sg_err_t err;

    while (sgt_now_s() < end) {
        msg_t *m;
        const char *data, *key, *code;
        size_t len, klen, clen;

        if (sg_kafka_consume(r->c, 50, &msg, &err) != 1)
            continue;
        if (r->n == r->cap) {
            r->cap = r->cap ? r->cap * 2 : 256;
            r->v = realloc(r->v, r->cap * sizeof(*r->v));
            cr_assert_not_null(r->v);
        }
        m = &r->v[r->n++];
        memset(m, 0, sizeof(*m));
        data = sg_kafka_msg_payload(msg, &len);
        if (!data)
            len = 0;
        m->doc = data ? sg_json_parse(data, len, NULL, NULL) : NULL;
        m->raw = malloc(len + 1);
        cr_assert_not_null(m->raw);
        if (len)
            memcpy(m->raw, data, len);
        m->raw[len] = '\0';
        m->len = len;
        if ((key = sg_kafka_msg_key(msg, &klen)))
            snprintf(m->key, sizeof(m->key), "%.*s", (int)klen, key);
        if ((code = sg_kafka_msg_header(msg, "sagad-error-code", &clen)))
            snprintf(m->code, sizeof(m->code), "%.*s", (int)clen, code);
        m->partition = sg_kafka_msg_partition(msg);
        m->offset = sg_kafka_msg_offset(msg);
        sg_kafka_msg_destroy(msg);
    }
}

static void expect_worker_alive(void);

static void reader_wait_count(reader_t *r, size_t want)
{
    double deadline = sgt_now_s() + WAIT_S;

    while (r->n < want && sgt_now_s() < deadline) {
        expect_worker_alive();
        reader_poll(r, 200);
    }
    cr_assert_geq(r->n, want, "only %zu of %zu messages arrived", r->n, want);
}

static const char *jstr(const sg_json_t *doc, const char *key)
{
    const char *s = sg_json_string(sg_json_member(doc, key));

    return s ? s : "";
}

static long long jint(const sg_json_t *doc, const char *key)
{
    int64_t v = -1;

    if (sg_json_get_int(doc, "$", key, true, &v, NULL) < 0)
        return -1;
    return (long long)v;
}

/* ---- the test's world ---------------------------------------------------- */

#define MAX_ENV 32

static struct {
    char db[128], dsn[512], dir[64], registry[128];
    char topic_cmd[128], topic_ev[128], topic_dlq[128], group[128];
    char envbuf[MAX_ENV][640];
    const char *env[MAX_ENV + 1];
    size_t nenv;
    proc_t worker, relay;
    sg_pg_t *pg;
    sg_kafka_t *producer;
    reader_t events;
} T;

static void env_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void env_add(const char *fmt, ...)
{
    va_list ap;

    cr_assert_lt(T.nenv, (size_t)MAX_ENV);
    va_start(ap, fmt);
    vsnprintf(T.envbuf[T.nenv], sizeof(T.envbuf[T.nenv]), fmt, ap);
    va_end(ap);
    T.env[T.nenv] = T.envbuf[T.nenv];
    T.env[++T.nenv] = NULL;
}

/* Runs `sagad-worker args...` to completion with the test's environment. */
static void worker_cli(const char *const *args)
{
    char *out, *err;
    int rc = sgt_run("sagad-worker", args, T.env, &out, &err);

    cr_assert_eq(rc, 0, "sagad-worker %s exited %d: %s%s", args[0], rc, out, err);
    free(out);
    free(err);
}

static void setup(void)
{
    const char *migrate[] = {"migrate", NULL};

    memset(&T, 0, sizeof(T));
    sg_log_init("test_worker", SG_LOG_WARN); /* the test's own Kafka clients */
    sgt_db_create(T.db, sizeof(T.db), T.dsn, sizeof(T.dsn));
    sgt_unique(T.topic_cmd, sizeof(T.topic_cmd), "sgt_cmd");
    sgt_unique(T.topic_ev, sizeof(T.topic_ev), "sgt_ev");
    sgt_unique(T.topic_dlq, sizeof(T.topic_dlq), "sgt_dlq");
    sgt_unique(T.group, sizeof(T.group), "sgt_worker");
    snprintf(T.dir, sizeof(T.dir), "/tmp/sagad-wtest-XXXXXX");
    cr_assert_not_null(mkdtemp(T.dir));
    snprintf(T.registry, sizeof(T.registry), "%s/tools.json", T.dir);
    env_add("SAGAD_PG_DSN=%s", T.dsn);
    env_add("SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", sgt_kafka());
    env_add("SAGAD_TOPIC_COMMANDS=%s", T.topic_cmd);
    env_add("SAGAD_TOPIC_EVENTS=%s", T.topic_ev);
    env_add("SAGAD_TOPIC_DLQ=%s", T.topic_dlq);
    env_add("SAGAD_WORKER_GROUP_ID=%s", T.group);
    env_add("SAGAD_WORKER_REGISTRY=%s", T.registry);
    env_add("SAGAD_LOG_LEVEL=info");
    env_add("SAGAD_RELAY_POLL_INTERVAL_MS=50");
    worker_cli(migrate);
    T.pg = sgt_db_connect(T.dsn);
}

static void teardown(void)
{
    /* Normally stopped by the test already; this is for a failed one. */
    proc_join(&T.worker, SIGTERM);
    proc_join(&T.relay, SIGTERM);
    sgt_bg_free(&T.worker);
    sgt_bg_free(&T.relay);
    reader_close(&T.events);
    sg_kafka_destroy(T.producer);
    sg_pg_destroy(T.pg);
    sgt_db_drop(T.db);
    unlink(T.registry);
    rmdir(T.dir);
}

TestSuite(worker, .init = setup, .fini = teardown, .timeout = 120);

/* Writes the registry (BASE_TOOLS plus extra_tools, members of "tools"),
 * creates the topics, and starts a relay and a worker; extra_env entries
 * ("KEY=value", NULL-terminated) are added to both. */
static void pair_start(const char *extra_tools, int partitions, const char *const *extra_env)
{
    char nparts[16], errstr[256];
    const char *topics[] = {"topics", "--partitions", nparts, NULL};
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    FILE *fp = fopen(T.registry, "w");

    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"tools\": {%s%s%s}}\n", BASE_TOOLS, extra_tools ? "," : "",
            extra_tools ? extra_tools : "");
    fclose(fp);
    for (; extra_env && *extra_env; extra_env++)
        env_add("%s", *extra_env);
    snprintf(nparts, sizeof(nparts), "%d", partitions);
    worker_cli(topics);
    T.producer = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    cr_assert_not_null(T.producer, "%s", errstr);
    reader_open(&T.events, T.topic_ev);
    sgt_bg_start(&T.relay, "sagad-relay", run_args, T.env);
    sgt_bg_start(&T.worker, "sagad-worker", run_args, T.env);
}

/* SIGTERM to both: each drains and exits 0.  The worker's stderr stays in
 * T.worker.err for the test to look at. */
static void pair_stop(void)
{
    int rc = proc_join(&T.worker, SIGTERM);

    cr_expect_eq(rc, 0, "the worker exits 0 on SIGTERM, got %d: %s", rc, sgt_bg_tail(&T.worker));
    rc = proc_join(&T.relay, SIGTERM);
    cr_expect_eq(rc, 0, "the relay exits 0 on SIGTERM, got %d: %s", rc, sgt_bg_tail(&T.relay));
}

/* Fails at once, with its log, when the worker died under a test that
 * waits for it to do something. */
static void expect_worker_alive(void)
{
    int rc;

    if (!(T.worker.started && !T.worker.joined) || !sgt_bg_done(&T.worker))
        return;
    rc = proc_join(&T.worker, 0);
    cr_assert_fail("the worker exited %d: %s", rc, sgt_bg_tail(&T.worker));
}

/* ---- producing ----------------------------------------------------------- */

static void produce(const char *topic, const char *key, const void *payload, size_t len)
{
    sg_err_t err;

    cr_assert_eq(sg_kafka_produce(T.producer, topic, key, key ? strlen(key) : 0, payload, len, NULL,
                                  0, NULL, &err),
                 0, "%s", err.message);
    cr_assert_eq(sg_kafka_flush(T.producer, 30000, &err), 0, "%s", err.message);
}

/* Submits saga.start for saga_id with steps (a JSON array's text). */
static void submit(const char *saga_id, const char *steps)
{
    size_t size = strlen(steps) + 512;
    char *msg = malloc(size);

    cr_assert_not_null(msg);
    snprintf(msg, size,
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
             "\"name\": \"test\", \"steps\": %s}",
             saga_id, saga_id, steps);
    produce(T.topic_cmd, saga_id, msg, strlen(msg));
    free(msg);
}

/* ---- PostgreSQL ---------------------------------------------------------- */

static void vsql(char *out, size_t size, const char *fmt, va_list ap)
{
    int n = vsnprintf(out, size, fmt, ap);

    cr_assert(n > 0 && (size_t)n < size, "statement too long");
}

/* The first cell as an integer (-1 for NULL).  Test-made ids only are
 * formatted into statements. */
#define q_int(...) sgt_query_intf(T.pg, __VA_ARGS__)

/* The first cell as text into out ("(null)" for NULL, "" for no row). */
static const char *q_text(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static const char *q_text(char *out, size_t size, const char *fmt, ...)
{
    char sql[2048];
    sg_pg_res_t *res;
    sg_err_t err;
    va_list ap;

    va_start(ap, fmt);
    vsql(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    cr_assert_eq(sg_pg_exec(T.pg, sql, 0, NULL, &res, &err), 0, "%s: %s", sql, err.message);
    if (sg_pg_res_rows(res) == 0)
        snprintf(out, size, "%s", "");
    else
        snprintf(out, size, "%s", sg_pg_res_get(res, 0, 0) ? sg_pg_res_get(res, 0, 0) : "(null)");
    sg_pg_res_destroy(res);
    return out;
}

static bool terminal_status(const char *status)
{
    return strcmp(status, "completed") == 0 || strcmp(status, "compensated") == 0 ||
           strcmp(status, "failed") == 0;
}

/* Polls the sagas table until saga_id has status; fails at once when it
 * ends in another terminal status, or when the deadline passes. */
static void wait_status(const char *saga_id, const char *status)
{
    double deadline = sgt_now_s() + WAIT_S;
    char now[32];

    for (;;) {
        q_text(now, sizeof(now), "SELECT status FROM sagas WHERE saga_id = '%s'", saga_id);
        if (strcmp(now, status) == 0)
            return;
        cr_assert(!terminal_status(now), "saga %s ended %s, expected %s", saga_id, now, status);
        expect_worker_alive();
        cr_assert_lt(sgt_now_s(), deadline, "saga %s is still \"%s\", expected %s; worker log: %s",
                     saga_id, now, status, sgt_bg_tail(&T.worker));
        usleep(50000);
    }
}

/* Polls until the query's integer is want. */
static void wait_int(long long want, const char *sql)
{
    double deadline = sgt_now_s() + WAIT_S;
    long long v;

    while ((v = sgt_query_int(T.pg, sql)) != want && sgt_now_s() < deadline) {
        expect_worker_alive();
        usleep(50000);
    }
    cr_assert_eq(v, want, "%s: %lld, expected %lld; worker log: %s", sql, v, want,
                 sgt_bg_tail(&T.worker));
}

/* ---- events -------------------------------------------------------------- */

static const msg_t *event_find(const char *saga_id, const char *type)
{
    for (size_t i = 0; i < T.events.n; i++) {
        const sg_json_t *ev = T.events.v[i].doc;
        if (strcmp(jstr(ev, "saga_id"), saga_id) == 0 && strcmp(jstr(ev, "type"), type) == 0)
            return &T.events.v[i];
    }
    return NULL;
}

/* Reads the events topic until saga_id's event of that type arrived. */
static const sg_json_t *event_wait(const char *saga_id, const char *type)
{
    double deadline = sgt_now_s() + WAIT_S;
    const msg_t *m;

    while (!(m = event_find(saga_id, type)) && sgt_now_s() < deadline) {
        expect_worker_alive();
        reader_poll(&T.events, 200);
    }
    cr_assert_not_null(m, "no %s event for saga %s", type, saga_id);
    return m->doc;
}

/* The saga's own events (seq > 0; a rejected resubmission has seq 0), in
 * the order the events topic delivered them. */
static size_t saga_events(const char *saga_id, const sg_json_t **out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < T.events.n; i++) {
        const sg_json_t *ev = T.events.v[i].doc;
        if (strcmp(jstr(ev, "saga_id"), saga_id) == 0 && jint(ev, "seq") > 0) {
            cr_assert_lt(n, max, "more than %zu events for saga %s", max, saga_id);
            out[n++] = ev;
        }
    }
    return n;
}

/* Asserts the saga's events are exactly the given types (NULL-terminated)
 * with seq 1..N in that order; returns them through out (max 64). */
static size_t expect_events(const char *saga_id, const sg_json_t **out, ...)
{
    const sg_json_t *evs[64];
    const char *want[64];
    char got[2048] = "";
    size_t n = saga_events(saga_id, evs, 64), nw = 0;
    va_list ap;

    va_start(ap, out);
    for (const char *t; (t = va_arg(ap, const char *)) && nw < 64;)
        want[nw++] = t;
    va_end(ap);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof(got) - len, "%s%s#%lld", i ? ", " : "", jstr(evs[i], "type"),
                 jint(evs[i], "seq"));
    }
    cr_assert_eq(n, nw, "saga %s: %zu events, expected %zu: %s", saga_id, n, nw, got);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(jstr(evs[i], "type"), want[i], "saga %s event %zu: %s", saga_id, i, got);
        cr_assert_eq(jint(evs[i], "seq"), (long long)i + 1, "saga %s seq out of order: %s", saga_id,
                     got);
        if (out)
            out[i] = evs[i];
    }
    return n;
}

static const sg_json_t *run_health(const sg_json_t *ev)
{
    const sg_json_t *h = sg_json_member(ev, "run_health");

    cr_assert_not_null(h, "terminal event %s without run_health", jstr(ev, "type"));
    return h;
}

/* ---- the tests ----------------------------------------------------------- */

Test(worker, happy_path_three_steps_complete_in_order, .timeout = 120)
{
    const sg_json_t *ev[8], *h;
    char text[256];

    pair_start(NULL, 1, NULL);
    submit("happy-1", "[{\"name\": \"reserve\", \"tool\": \"ledger\", \"args\": {\"sku\": \"B7\"}},"
                      " {\"name\": \"pack\", \"tool\": \"echo\", \"args\": {\"box\": \"small\"}},"
                      " {\"name\": \"notify\", \"tool\": \"noop\"}]");
    wait_status("happy-1", "completed");
    event_wait("happy-1", "saga.completed");
    pair_stop();

    expect_events("happy-1", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                  "step.succeeded", "saga.completed", NULL);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(jint(ev[1 + i], "step"), i, "step.succeeded in step order");
    cr_expect_str_eq(jstr(ev[1], "step_name"), "reserve");
    h = run_health(ev[4]);
    cr_expect_eq(jint(h, "ok"), 3);
    cr_expect_eq(jint(h, "failed"), 0);
    cr_expect_eq(jint(h, "compensated"), 0);
    cr_expect(sg_json_member(h, "blocking_failure") &&
                  sg_json_is_null(sg_json_member(h, "blocking_failure")),
              "blocking_failure is null");

    cr_expect_eq(q_int("SELECT count(*) FROM steps WHERE saga_id = 'happy-1' AND status = "
                       "'succeeded' AND attempts = 1"),
                 3);
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT result->>'box' FROM steps WHERE idx = 1"),
                     "small", "the tool's answer is stored with the step");
    cr_expect_eq(q_int("SELECT count(*) FROM attempts WHERE status = 'ok' AND idempotency_key = "
                       "saga_id || ':' || step_idx || ':f:g1'"),
                 3, "one attempt per step, keyed <saga>:<step>:f:g1");
    cr_expect_eq(q_int("SELECT calls FROM builtin_ledger WHERE key = 'happy-1:0:f:g1'"), 1);
    /* saga.start and three step.execute consumed, in the same transactions
     * as their outcomes. */
    cr_expect_eq(q_int("SELECT sum(next_offset) FROM consumer_offsets WHERE group_id = '%s' AND "
                       "topic = '%s'",
                       T.group, T.topic_cmd),
                 4);
    cr_expect_eq(q_int("SELECT count(*) FROM dead_letters"), 0);
}

Test(worker, permanent_failure_compensates_in_reverse_order, .timeout = 120)
{
    const sg_json_t *ev[16], *h, *block;
    char text[512];

    pair_start(NULL, 2, NULL);
    submit("perm-1",
           "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
           " {\"name\": \"charge\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}},"
           " {\"name\": \"book\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 3}},"
           " {\"name\": \"ship\", \"tool\": \"fail\", \"args\": {\"class\": \"permanent\", "
           "\"code\": \"carrier.refused\", \"message\": \"address rejected\"}}]");
    wait_status("perm-1", "compensated");
    event_wait("perm-1", "saga.compensated");
    pair_stop();

    expect_events("perm-1", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                  "step.succeeded", "step.failed", "saga.compensating", "step.compensated",
                  "step.compensated", "step.compensated", "saga.compensated", NULL);
    cr_expect_eq(jint(ev[4], "step"), 3);
    cr_expect_str_eq(jstr(ev[4], "error_code"), "carrier.refused");
    cr_expect_str_eq(jstr(ev[4], "error_class"), "permanent");
    cr_expect_str_eq(jstr(ev[4], "message"), "address rejected");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(jint(ev[6 + i], "step"), 2 - i, "compensations run in reverse order");
    h = run_health(ev[9]);
    cr_expect_eq(jint(h, "ok"), 0);
    cr_expect_eq(jint(h, "failed"), 1);
    cr_expect_eq(jint(h, "compensated"), 3);
    block = sg_json_member(h, "blocking_failure");
    cr_assert_not_null(block, "blocking_failure names the failed step");
    cr_expect_eq(jint(block, "step"), 3);
    cr_expect_str_eq(jstr(block, "step_name"), "ship");
    cr_expect_str_eq(jstr(block, "error_code"), "carrier.refused");

    /* The compensations' effects, keyed by phase c, in the order made. */
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg(key, ',' ORDER BY first_at, last_at) FROM "
                            "builtin_ledger WHERE key LIKE '%%:c:g1'"),
                     "perm-1:2:c:g1,perm-1:1:c:g1,perm-1:0:c:g1");
    cr_expect_eq(q_int("SELECT count(*) FROM builtin_ledger WHERE calls = 1"), 6,
                 "three effects and three compensations, once each");
    cr_expect_str_eq(
        q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,compensated,compensated,failed");
    cr_expect_str_eq(q_text(text, sizeof(text), "SELECT error_code FROM steps WHERE idx = 3"),
                     "carrier.refused");
    cr_expect_eq(q_int("SELECT count(*) FROM dead_letters"), 0,
                 "a permanent step failure compensates; nothing to dead-letter");
}

Test(worker, transient_failures_retry_with_same_key_and_bounded_backoff, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_RETRY_BASE_MS=40", "SAGAD_RETRY_CAP_MS=60", NULL};
    const sg_json_t *ev[8];
    long long spent = 0;
    char text[256];

    pair_start(NULL, 1, env);
    submit("flaky-1", "[{\"name\": \"call\", \"tool\": \"fail\", \"args\": {\"class\": "
                      "\"transient\", \"code\": \"tool.http.503\", \"times\": 2}},"
                      " {\"name\": \"after\", \"tool\": \"noop\"}]");
    wait_status("flaky-1", "completed");
    event_wait("flaky-1", "saga.completed");
    pair_stop();

    expect_events("flaky-1", ev, "saga.accepted", "step.retry_scheduled", "step.retry_scheduled",
                  "step.succeeded", "step.succeeded", "saga.completed", NULL);
    for (int i = 1; i <= 2; i++) {
        /* Retry i follows failed attempt i: random(0, min(cap, base * 2^(i-1))). */
        long long bound = 40LL << (i - 1) < 60 ? 40LL << (i - 1) : 60;
        long long delay = jint(ev[i], "delay_ms");
        cr_expect_eq(jint(ev[i], "attempt"), i + 1, "the retry is attempt %d", i + 1);
        cr_expect(delay >= 0 && delay <= bound, "retry %d: delay_ms %lld not in [0, %lld]", i,
                  delay, bound);
        cr_expect_str_eq(jstr(ev[i], "error_code"), "tool.http.503");
        cr_expect_str_eq(jstr(ev[i], "phase"), "forward");
        spent += delay;
    }
    cr_expect_eq(jint(ev[3], "step"), 0);
    cr_expect_eq(jint(ev[3], "attempt"), 3, "the third attempt succeeded");

    cr_expect_eq(q_int("SELECT count(*) FROM attempts WHERE step_idx = 0"), 3);
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg(DISTINCT idempotency_key, ',') FROM attempts "
                            "WHERE step_idx = 0"),
                     "flaky-1:0:f:g1", "every attempt carries the same idempotency key");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg(attempt || '=' || status || ':' || "
                            "coalesce(error_code, '-'), ',' ORDER BY attempt) FROM attempts "
                            "WHERE step_idx = 0"),
                     "1=error:tool.http.503,2=error:tool.http.503,3=ok:-");
    cr_expect_eq(q_int("SELECT attempts FROM steps WHERE idx = 0 AND status = 'succeeded'"), 3);
    cr_expect_eq(q_int("SELECT retry_spent_ms FROM sagas"), spent,
                 "the retry budget is charged the delays announced");
}

Test(worker, retry_exhaustion_dead_letters_and_compensates, .timeout = 120)
{
    static const char tools[] =
        "\"flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
        "\"idempotent\", \"retry\": {\"max_attempts\": 3, \"base_ms\": 10, \"cap_ms\": 20}}";
    const sg_json_t *ev[16], *rec;
    reader_t dlq;
    char text[512];

    pair_start(tools, 3, NULL);
    reader_open(&dlq, T.topic_dlq);
    submit("exhaust-1", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"},"
                        " {\"name\": \"call\", \"tool\": \"flaky\", \"args\": {\"class\": "
                        "\"transient\", \"code\": \"tool.http.503\", \"message\": \"down\"}}]");
    wait_status("exhaust-1", "compensated");
    event_wait("exhaust-1", "saga.compensated");
    reader_wait_count(&dlq, 1);
    pair_stop();

    expect_events("exhaust-1", ev, "saga.accepted", "step.succeeded", "step.retry_scheduled",
                  "step.retry_scheduled", "step.failed", "saga.dead_lettered", "saga.compensating",
                  "step.compensated", "saga.compensated", NULL);
    cr_expect_str_eq(jstr(ev[4], "error_code"), "runtime.budget.attempts_exhausted");
    cr_expect_str_eq(jstr(ev[5], "error_code"), "runtime.budget.attempts_exhausted");
    cr_expect_eq(jint(ev[7], "step"), 0);

    cr_assert_eq(q_int("SELECT count(*) FROM dead_letters"), 1);
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT concat_ws('|', error_code, saga_id, step_name, tool, phase, "
                            "attempts, jsonb_array_length(trail), status) FROM dead_letters"),
                     "runtime.budget.attempts_exhausted|exhaust-1|call|flaky|forward|3|3|pending");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg((e->>'attempt') || ':' || (e->>'error_code'), ',' "
                            "ORDER BY ord) FROM dead_letters, jsonb_array_elements(trail) WITH "
                            "ORDINALITY AS t(e, ord)"),
                     "1:tool.http.503,2:tool.http.503,3:tool.http.503",
                     "the trail holds every attempt's error");

    cr_expect_str_eq(dlq.v[0].code, "runtime.budget.attempts_exhausted",
                     "the DLQ message carries the sagad-error-code header");
    cr_expect_str_eq(dlq.v[0].key, "exhaust-1");
    rec = dlq.v[0].doc;
    cr_assert_not_null(rec, "the DLQ message is JSON");
    cr_expect_str_eq(jstr(rec, "error_code"), "runtime.budget.attempts_exhausted");
    cr_expect_str_eq(jstr(rec, "saga_id"), "exhaust-1");
    cr_expect_str_eq(jstr(rec, "step_name"), "call");
    cr_expect_eq(jint(rec, "attempts"), 3);
    cr_expect_eq(sg_json_array_size(sg_json_member(rec, "trail")), 3);
    cr_expect_str_eq(jstr(sg_json_member(rec, "original"), "topic"), T.topic_cmd);

    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg(status || ':' || coalesce(error_code, '-'), ',' "
                            "ORDER BY idx) FROM steps"),
                     "compensated:-,failed:runtime.budget.attempts_exhausted");
    cr_expect_eq(q_int("SELECT calls FROM builtin_ledger WHERE key = 'exhaust-1:0:c:g1'"), 1,
                 "the earlier step was compensated once");
    reader_close(&dlq);
}

Test(worker, compensation_exhaustion_fails_saga_and_stops, .timeout = 120)
{
    static const char tools[] =
        "\"hold\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "
        "\"reversible\", \"compensation\": \"release.flaky\"},"
        "\"release.flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
        "\"idempotent\", \"compensate_retry\": {\"max_attempts\": 2, \"base_ms\": 10, "
        "\"cap_ms\": 20}}";
    const sg_json_t *evs[32], *last, *block;
    size_t n;
    char text[512];

    pair_start(tools, 1, NULL);
    submit("compfail-1",
           "[{\"name\": \"first\", \"tool\": \"ledger.reversible\"},"
           " {\"name\": \"second\", \"tool\": \"hold\", \"args\": {\"class\": \"transient\", "
           "\"code\": \"tool.http.503\", \"message\": \"release endpoint down\"}},"
           " {\"name\": \"third\", \"tool\": \"fail\", \"args\": {\"code\": \"card.declined\"}}]");
    wait_status("compfail-1", "failed");
    event_wait("compfail-1", "saga.failed");
    event_wait("compfail-1", "saga.dead_lettered");
    pair_stop();

    n = saga_events("compfail-1", evs, 32);
    last = evs[n - 1];
    cr_expect_str_eq(jstr(last, "type"), "saga.failed", "the terminal event is the saga's last");
    block = sg_json_member(run_health(last), "blocking_failure");
    cr_assert_not_null(block);
    cr_expect_str_eq(jstr(block, "step_name"), "second");
    cr_expect_str_eq(jstr(block, "status"), "compensation_failed");
    cr_expect_str_eq(jstr(block, "error_code"), "runtime.compensation_exhausted");
    cr_expect_eq(jint(event_wait("compfail-1", "step.compensation_failed"), "step"), 1);
    cr_expect_null(event_find("compfail-1", "step.compensated"),
                   "no compensation after the one that failed");

    cr_expect_str_eq(
        q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,compensation_failed,failed");
    cr_expect_eq(q_int("SELECT count(*) FROM builtin_ledger WHERE key = 'compfail-1:0:c:g1'"), 0,
                 "the lower step's compensation never ran");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT count(*) || ':' || string_agg(DISTINCT idempotency_key, ',') "
                            "FROM attempts WHERE phase = 'compensate'"),
                     "2:compfail-1:1:c:g1",
                     "the compensation tool's own compensate_retry: 2 attempts, one key");
    cr_assert_eq(q_int("SELECT count(*) FROM dead_letters"), 1);
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT concat_ws('|', error_code, step_name, tool, phase, attempts) "
                            "FROM dead_letters"),
                     "runtime.compensation_exhausted|second|release.flaky|compensate|2");
}

/* One bad submission: its saga_id (NULL: undecodable), the payload, and
 * what must come out: the dead letter's code, the problem path and the
 * start of its rule (decodable ones only). */
typedef struct bad_sub_s {
    const char *saga_id;
    const char *payload;
    const char *code;
    const char *path, *rule;
} bad_sub_t;

#define START(id, steps)                                                                           \
    "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-" id "\", \"saga_id\": \"" id "\", "       \
    "\"name\": \"bad\", \"steps\": " steps "}"

Test(worker, invalid_submissions_rejected_and_dead_lettered, .timeout = 120)
{
    static const char tools[] = "\"hold.unsafe\": {\"adapter\": \"builtin\", \"target\": \"echo\", "
                                "\"side_effect\": \"reversible\"}";
    static const char *const env[] = {"SAGAD_LIMITS_MAX_MESSAGE_BYTES=4096", NULL};
    static const bad_sub_t subs[] = {
        {"no-steps", START("no-steps", "[]"), "input.schema.invalid", "$.steps", "minItems"},
        {"dup-names",
         START("dup-names", "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"a\", \"tool\": "
                            "\"noop\"}]"),
         "input.schema.invalid", "$.steps[1].name", "unique"},
        {"unknown-tool", START("unknown-tool", "[{\"name\": \"a\", \"tool\": \"teleport\"}]"),
         "input.schema.invalid", "$.steps[0].tool", "unknown tool"},
        {"bad-args",
         START("bad-args", "[{\"name\": \"a\", \"tool\": \"inventory.reserve\", \"args\": "
                           "{\"sku\": \"B7\", \"qty\": 0}}]"),
         "input.schema.invalid", "$.steps[0].args.qty", "minimum"},
        {"no-comp", START("no-comp", "[{\"name\": \"a\", \"tool\": \"hold.unsafe\"}]"),
         "input.schema.invalid", "$.steps[0].compensate", "required"},
        {"irreversible-first",
         START("irreversible-first", "[{\"name\": \"mail\", \"tool\": \"email.send\"}, {\"name\": "
                                     "\"charge\", \"tool\": \"ledger.reversible\"}]"),
         "input.schema.invalid", "$.steps[0]", "order"},
        {NULL, "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"x\", \"steps\": [",
         "input.json.malformed", NULL, NULL},
        {NULL, "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"y\", \"name\": \"\xc3\x28\"}",
         "input.utf8.invalid", NULL, NULL},
        {NULL, NULL, "input.too_large", NULL, NULL},
    };
    const size_t nsubs = sizeof(subs) / sizeof(subs[0]);
    char big[5000], text[512];
    reader_t dlq;
    const msg_t *utf8 = NULL;

    /* Valid JSON, valid UTF-8, but past limits.max_message_bytes. */
    snprintf(big, sizeof(big),
             START("too-large", "[{\"name\": \"a\", \"tool\": \"noop\", "
                                "\"args\": {\"pad\": \"%4500s\"}}]"),
             "");
    pair_start(tools, 2, env);
    reader_open(&dlq, T.topic_dlq);
    for (size_t i = 0; i < nsubs; i++) {
        const char *p = subs[i].payload ? subs[i].payload : big;
        produce(T.topic_cmd, subs[i].saga_id, p, strlen(p));
    }
    wait_int((long long)nsubs, "SELECT count(*) FROM dead_letters");
    for (size_t i = 0; i < nsubs; i++)
        if (subs[i].saga_id)
            event_wait(subs[i].saga_id, "saga.rejected");
    reader_wait_count(&dlq, nsubs);
    pair_stop();

    cr_expect_eq(q_int("SELECT count(*) FROM sagas"), 0, "no saga was created");
    for (size_t i = 0; i < nsubs; i++) {
        const bad_sub_t *s = &subs[i];
        const sg_json_t *ev, *problems;
        bool found = false;

        if (!s->saga_id) {
            cr_expect_eq(q_int("SELECT count(*) FROM dead_letters WHERE error_code = '%s' AND "
                               "saga_id IS NULL AND payload IS NOT NULL",
                               s->code),
                         1, "one dead letter %s", s->code);
            continue;
        }
        cr_expect_eq(q_int("SELECT count(*) FROM dead_letters WHERE saga_id = '%s' AND "
                           "error_code = '%s'",
                           s->saga_id, s->code),
                     1, "%s: one dead letter %s", s->saga_id, s->code);
        ev = event_find(s->saga_id, "saga.rejected")->doc;
        cr_expect_str_eq(jstr(ev, "error_code"), s->code);
        cr_expect_eq(jint(ev, "seq"), 0, "a rejection is not part of any saga's sequence");
        problems = sg_json_member(ev, "problems");
        cr_assert_gt(sg_json_array_size(problems), 0, "%s: problems[] is empty", s->saga_id);
        for (size_t j = 0; j < sg_json_array_size(problems); j++) {
            const sg_json_t *p = sg_json_array_get(problems, j);
            if (strcmp(jstr(p, "path"), s->path) == 0 &&
                strncmp(jstr(p, "rule"), s->rule, strlen(s->rule)) == 0)
                found = true;
        }
        {
            char *all = sg_json_print(problems);
            cr_expect(found, "%s: no problem {path %s, rule %s...} in %s", s->saga_id, s->path,
                      s->rule, all);
            free(all);
        }
    }

    for (size_t i = 0; i < dlq.n; i++)
        if (strcmp(dlq.v[i].code, "input.utf8.invalid") == 0)
            utf8 = &dlq.v[i];
    cr_assert_not_null(utf8, "the non-UTF-8 submission reached the DLQ topic");
    cr_expect(sg_json_is_null(sg_json_member(utf8->doc, "payload")),
              "a non-UTF-8 payload is not given as text");
    cr_expect_str_eq(jstr(utf8->doc, "payload_base64"),
                     q_text(text, sizeof(text),
                            "SELECT encode(payload, 'base64') FROM dead_letters WHERE error_code = "
                            "'input.utf8.invalid' AND payload = convert_to('{\"v\": 1, \"type\": "
                            "\"saga.start\", \"saga_id\": \"y\", \"name\": \"', 'UTF8') || "
                            "'\\xc328'::bytea || convert_to('\"}', 'UTF8')"),
                     "the original bytes, untouched, as base64");
    reader_close(&dlq);
}

Test(worker, duplicate_submission_is_idempotent_and_conflict_rejected, .timeout = 120)
{
    static const char steps[] = "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 1}},"
                                " {\"name\": \"b\", \"tool\": \"noop\"}]";
    static const char other[] = "[{\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 2}},"
                                " {\"name\": \"b\", \"tool\": \"noop\"}]";
    const sg_json_t *rej, *problems;

    pair_start(NULL, 2, NULL);
    submit("dup-1", steps);
    submit("dup-1", steps);
    submit("dup-1", other);
    wait_status("dup-1", "completed");
    event_wait("dup-1", "saga.completed");
    rej = event_wait("dup-1", "saga.rejected");
    wait_int(1, "SELECT count(*) FROM dead_letters");
    /* The commands topic: 3 submissions and 2 step.execute, all consumed. */
    wait_int(5, "SELECT sum(next_offset) FROM consumer_offsets");
    pair_stop();

    expect_events("dup-1", NULL, "saga.accepted", "step.succeeded", "step.succeeded",
                  "saga.completed", NULL);
    cr_expect_str_eq(jstr(rej, "error_code"), "input.saga.conflict");
    problems = sg_json_member(rej, "problems");
    cr_expect_str_eq(jstr(sg_json_array_get(problems, 0), "path"), "$.saga_id");
    cr_expect_eq(q_int("SELECT count(*) FROM sagas"), 1);
    cr_expect_eq(q_int("SELECT (args->>'n')::int FROM steps WHERE idx = 0"), 1,
                 "the first definition stands");
    cr_expect_eq(q_int("SELECT count(*) FROM attempts"), 2, "each step ran once");
    cr_expect_eq(q_int("SELECT calls FROM builtin_ledger WHERE key = 'dup-1:0:f:g1'"), 1);
    cr_expect_eq(q_int("SELECT count(*) FROM dead_letters WHERE saga_id = 'dup-1' AND error_code "
                       "= 'input.saga.conflict'"),
                 1);
}

Test(worker, replayed_step_command_has_no_effect, .timeout = 120)
{
    const sg_json_t *evs[16];
    reader_t cmds;
    const msg_t *exec = NULL;
    long long attempts, keys, calls, seq, published;

    pair_start(NULL, 1, NULL);
    submit("replay-1", "[{\"name\": \"a\", \"tool\": \"ledger\"},"
                       " {\"name\": \"b\", \"tool\": \"ledger\"}]");
    wait_status("replay-1", "completed");
    event_wait("replay-1", "saga.completed");
    wait_int(0, "SELECT count(*) FROM outbox");

    reader_open(&cmds, T.topic_cmd);
    reader_wait_count(&cmds, 3);
    for (size_t i = 0; i < cmds.n; i++)
        if (strcmp(jstr(cmds.v[i].doc, "type"), "step.execute") == 0 &&
            jint(cmds.v[i].doc, "step") == 0)
            exec = &cmds.v[i];
    cr_assert_not_null(exec, "step 0's step.execute is on the commands topic");
    attempts = q_int("SELECT count(*) FROM attempts");
    keys = q_int("SELECT count(*) FROM builtin_ledger");
    calls = q_int("SELECT sum(calls) FROM builtin_ledger");
    seq = q_int("SELECT seq FROM sagas");
    published = q_int("SELECT sum(published) FROM relay_cursors");

    /* The same command twice more, as a producer retry or a replay of the
     * topic would deliver it. */
    produce(T.topic_cmd, exec->key, exec->raw, exec->len);
    produce(T.topic_cmd, exec->key, exec->raw, exec->len);
    wait_int(5, "SELECT sum(next_offset) FROM consumer_offsets");
    /* The transactions that consumed them wrote nothing to send. */
    cr_expect_eq(q_int("SELECT count(*) FROM outbox") + q_int("SELECT count(*) FROM timers"), 0);
    reader_poll(&T.events, 1000);
    pair_stop();

    cr_expect_eq(q_int("SELECT count(*) FROM attempts"), attempts, "the step did not run again");
    cr_expect_eq(q_int("SELECT count(*) FROM builtin_ledger"), keys, "no new effect");
    cr_expect_eq(q_int("SELECT sum(calls) FROM builtin_ledger"), calls, "no new call");
    cr_expect_eq(q_int("SELECT seq FROM sagas"), seq);
    cr_expect_eq(q_int("SELECT sum(published) FROM relay_cursors"), published,
                 "nothing more was published");
    cr_expect_eq(saga_events("replay-1", evs, 16), 4, "no new events");
    cr_expect_str_eq(q_text((char[32]){0}, 32, "SELECT status FROM sagas"), "completed");
    cr_expect(strstr(T.worker.err, "duplicate or stale command, no effect"),
              "the worker logs the duplicate: %s", sgt_bg_tail(&T.worker));
    reader_close(&cmds);
}

#define FAST_SAGAS 100

Test(worker, slow_step_does_not_block_its_partition, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_THREADS=4", NULL};
    char id[32];
    size_t slow_at = 0, fast_before = 0;

    pair_start(NULL, 1, env);
    submit("slow", "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": 2000}}]");
    for (int i = 0; i < FAST_SAGAS; i++) {
        snprintf(id, sizeof(id), "fast-%03d", i);
        submit(id, "[{\"name\": \"only\", \"tool\": \"noop\"}]");
    }
    wait_status("slow", "completed");
    event_wait("slow", "saga.completed");
    wait_int(FAST_SAGAS + 1, "SELECT count(*) FROM sagas WHERE status = 'completed'");
    pair_stop();

    /* One partition: the events topic has the completions in commit order. */
    for (size_t i = 0; i < T.events.n; i++) {
        const sg_json_t *ev = T.events.v[i].doc;
        if (strcmp(jstr(ev, "type"), "saga.completed") != 0)
            continue;
        if (strcmp(jstr(ev, "saga_id"), "slow") == 0) {
            slow_at = i;
            break;
        }
        fast_before++;
    }
    cr_expect_eq(fast_before, FAST_SAGAS,
                 "all %d one-step sagas completed before the sleeping one; %zu did", FAST_SAGAS,
                 fast_before);
    cr_expect_gt(slow_at, 0);
    cr_expect_eq(q_int("SELECT count(*) FROM sagas WHERE saga_id LIKE 'fast-%%' AND updated_at <= "
                       "(SELECT updated_at FROM sagas WHERE saga_id = 'slow')"),
                 FAST_SAGAS);
}

Test(worker, crash_loop_dead_letters_after_limit, .timeout = 180)
{
    static const char tools[] =
        "\"crash\": {\"adapter\": \"builtin\", \"target\": \"crash\", \"side_effect\": \"read\"}";
    static const int limit = 2;
    char limit_env[64], instance_env[160], instance[96], text[512];
    const char *env[4] = {"SAGAD_WORKER_TEST_ALLOW_CRASH=true", limit_env, instance_env, NULL};
    const sg_json_t *evs[32], *dl;
    int starts = 0, crashes = 0;
    double deadline = sgt_now_s() + 2 * WAIT_S;
    size_t n;

    /* A static member rejoins at once after a crash instead of waiting for
     * the dead member's session to time out. */
    sgt_unique(instance, sizeof(instance), "sgt_instance");
    snprintf(limit_env, sizeof(limit_env), "SAGAD_WORKER_CRASH_LOOP_LIMIT=%d", limit);
    snprintf(instance_env, sizeof(instance_env), "SAGAD_KAFKA_GROUP_INSTANCE_ID=%s", instance);
    pair_start(tools, 2, env);
    starts = 1;
    submit("crashy", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"},"
                     " {\"name\": \"boom\", \"tool\": \"crash\"}]");
    submit("bystander", "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"b\", \"tool\": "
                        "\"noop\"}]");
    for (;;) {
        char status[32];
        int rc;

        q_text(status, sizeof(status), "SELECT status FROM sagas WHERE saga_id = 'crashy'");
        if (terminal_status(status))
            break;
        if (!sgt_bg_done(&T.worker)) {
            cr_assert_lt(sgt_now_s(), deadline, "saga crashy is still %s after %d crashes: %s",
                         status, crashes, sgt_bg_tail(&T.worker));
            usleep(50000);
            continue;
        }
        rc = proc_join(&T.worker, 0);
        cr_assert_eq(rc, 128 + SIGABRT, "the crash tool aborts the worker; got %d: %s", rc,
                     sgt_bg_tail(&T.worker));
        cr_expect(strstr(T.worker.err, "builtin crash: aborting the worker as asked"),
                  "the worker says why it aborts");
        crashes++;
        cr_assert_lt(starts, limit + 2, "still crashing after %d starts", starts);
        sgt_bg_start(&T.worker, "sagad-worker", run_args, T.env);
        starts++;
    }
    wait_status("crashy", "compensated");
    wait_status("bystander", "completed");
    event_wait("crashy", "saga.compensated");
    pair_stop();

    cr_expect_eq(crashes, limit, "the crashing attempt ran crash_loop_limit times, then no more");
    n = saga_events("crashy", evs, 32);
    cr_expect_str_eq(jstr(evs[n - 1], "type"), "saga.compensated");
    dl = event_find("crashy", "saga.dead_lettered")->doc;
    cr_expect_str_eq(jstr(dl, "error_code"), "runtime.crash_loop");
    cr_expect_str_eq(jstr(dl, "step_name"), "boom");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT concat_ws('|', error_code, saga_id, step_name, phase, "
                            "attempts) FROM dead_letters"),
                     "runtime.crash_loop|crashy|boom|forward|2");
    cr_expect_eq(q_int("SELECT count(*) FROM attempts WHERE saga_id = 'crashy' AND step_idx = 1 "
                       "AND error_code = 'runtime.interrupted'"),
                 limit, "each interrupted run is in the trail");
    cr_expect_str_eq(q_text(text, sizeof(text),
                            "SELECT string_agg(status || ':' || coalesce(error_code, '-'), ',' "
                            "ORDER BY idx) FROM steps WHERE saga_id = 'crashy'"),
                     "compensated:-,failed:runtime.crash_loop");
    cr_expect_eq(q_int("SELECT calls FROM builtin_ledger WHERE key = 'crashy:0:c:g1'"), 1);
    expect_events("bystander", NULL, "saga.accepted", "step.succeeded", "step.succeeded",
                  "saga.completed", NULL);
}
