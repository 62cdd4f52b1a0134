/* The world of an end-to-end test: see world.h. */
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

#include "sagad/sg_log.h"
#include "world.h"

/* ---- spawned binaries (tests/support: sgt_bg_*) ---------------------------- */

const char *const run_args[] = {"run", NULL};

/* Sends sig (0: none), then waits for the exit; its exit code. */
int proc_join(proc_t *pr, int sig)
{
    if (sig)
        sgt_bg_signal(pr, sig);
    return sgt_bg_join(pr, -1);
}

/* ---- messages read from a topic ------------------------------------------ */

void reader_open(reader_t *r, const char *topic)
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

void reader_close(reader_t *r)
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
void reader_poll(reader_t *r, int ms)
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

void reader_wait_count(reader_t *r, size_t want)
{
    double deadline = sgt_now_s() + WAIT_S;

    while (r->n < want && sgt_now_s() < deadline) {
        expect_worker_alive();
        reader_poll(r, 200);
    }
    cr_assert_geq(r->n, want, "only %zu of %zu messages arrived", r->n, want);
}

const char *jstr(const sg_json_t *doc, const char *key)
{
    const char *s = sg_json_string(sg_json_member(doc, key));

    return s ? s : "";
}

long long jint(const sg_json_t *doc, const char *key)
{
    int64_t v = -1;

    if (sg_json_get_int(doc, "$", key, true, &v, NULL) < 0)
        return -1;
    return (long long)v;
}

/* ---- the test's world ---------------------------------------------------- */

struct world_s T;

void env_add(const char *fmt, ...)
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
void worker_cli(const char *const *args)
{
    char *out, *err;
    int rc = sgt_run("sagad-worker", args, T.env, &out, &err);

    cr_assert_eq(rc, 0, "sagad-worker %s exited %d: %s%s", args[0], rc, out, err);
    free(out);
    free(err);
}

void world_setup(void)
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

void world_teardown(void)
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

/* Writes the registry (BASE_TOOLS plus extra_tools, members of "tools"),
 * creates the topics, and starts a relay and a worker; extra_env entries
 * ("KEY=value", NULL-terminated) are added to both. */
void pair_start(const char *extra_tools, int partitions, const char *const *extra_env)
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
void pair_stop(void)
{
    int rc = proc_join(&T.worker, SIGTERM);

    cr_expect_eq(rc, 0, "the worker exits 0 on SIGTERM, got %d: %s", rc, sgt_bg_tail(&T.worker));
    rc = proc_join(&T.relay, SIGTERM);
    cr_expect_eq(rc, 0, "the relay exits 0 on SIGTERM, got %d: %s", rc, sgt_bg_tail(&T.relay));
}

/* Fails at once, with its log, when the worker died under a test that
 * waits for it to do something. */
void expect_worker_alive(void)
{
    int rc;

    if (!(T.worker.started && !T.worker.joined) || !sgt_bg_done(&T.worker))
        return;
    rc = proc_join(&T.worker, 0);
    cr_assert_fail("the worker exited %d: %s", rc, sgt_bg_tail(&T.worker));
}

/* ---- producing ----------------------------------------------------------- */

void produce(const char *topic, const char *key, const void *payload, size_t len)
{
    sg_err_t err;

    cr_assert_eq(sg_kafka_produce(T.producer, topic, key, key ? strlen(key) : 0, payload, len, NULL,
                                  0, NULL, &err),
                 0, "%s", err.message);
    cr_assert_eq(sg_kafka_flush(T.producer, 30000, &err), 0, "%s", err.message);
}

/* Submits saga.start for saga_id with steps (a JSON array's text). */
void submit(const char *saga_id, const char *steps)
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

/* The first cell as text into out ("(null)" for NULL, "" for no row). */

const char *q_text(char *out, size_t size, const char *fmt, ...)
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

bool terminal_status(const char *status)
{
    return strcmp(status, "completed") == 0 || strcmp(status, "compensated") == 0 ||
           strcmp(status, "failed") == 0;
}

/* Polls the sagas table until saga_id has status; fails at once when it
 * ends in another terminal status, or when the deadline passes. */
void wait_status(const char *saga_id, const char *status)
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
void wait_int(long long want, const char *sql)
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

const msg_t *event_find(const char *saga_id, const char *type)
{
    for (size_t i = 0; i < T.events.n; i++) {
        const sg_json_t *ev = T.events.v[i].doc;
        if (strcmp(jstr(ev, "saga_id"), saga_id) == 0 && strcmp(jstr(ev, "type"), type) == 0)
            return &T.events.v[i];
    }
    return NULL;
}

/* Reads the events topic until saga_id's event of that type arrived. */
const sg_json_t *event_wait(const char *saga_id, const char *type)
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
size_t saga_events(const char *saga_id, const sg_json_t **out, size_t max)
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
size_t expect_events(const char *saga_id, const sg_json_t **out, ...)
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

const sg_json_t *run_health(const sg_json_t *ev)
{
    const sg_json_t *h = sg_json_member(ev, "run_health");

    cr_assert_not_null(h, "terminal event %s without run_health", jstr(ev, "type"));
    return h;
}
