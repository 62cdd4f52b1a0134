/* The world of a sagad-worker end-to-end test: see sg_worker_env.h. */
#include <criterion/criterion.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sagad/sg_log.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_text.h"
#include "sg_worker_env.h"

sgw_world_t sgw;

/* ---- spawned binaries (tests/support: sgt_bg_*) ---------------------------- */

const char *const sgw_run_args[] = {"run", NULL};

/* Sends sig (0: none), then waits for the exit; its exit code.  After a
 * signal the wait is bounded: a worker drains for up to its drain timeout
 * (30 s by default) and then must be gone.  One that is not has its
 * stacks printed, is killed, and fails the test with its log's end. */
int sgw_proc_join(sgt_bg_t *pr, int sig)
{
    int rc;

    if (!sig)
        return sgt_bg_join(pr, -1);
    if (!pr->started || pr->joined)
        return sgt_bg_join(pr, 0);
    sgt_bg_signal(pr, sig);
    rc = sgt_bg_join(pr, SGW_STOP_TIMEOUT_S);
    cr_expect_neq(rc, -1, "pid %d still running %d s after signal %d; its log ends:\n%s",
                  (int)pr->p.pid, SGW_STOP_TIMEOUT_S, sig, sgt_bg_tail(pr));
    return rc;
}

/* ---- messages read from a topic ------------------------------------------ */

void sgw_reader_open(sgw_reader_t *r, const char *topic)
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

void sgw_reader_close(sgw_reader_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        sg_json_destroy(r->v[i].doc);
        sg_json_destroy(r->v[i].headers);
        free(r->v[i].raw);
    }
    free(r->v);
    sg_kafka_destroy(r->c);
    memset(r, 0, sizeof(*r));
}

/* Appends what arrives within ms. */
void sgw_reader_poll(sgw_reader_t *r, int ms)
{
    double end = sgt_now_s() + ms / 1000.0;
    sg_kafka_msg_t *msg;
    sg_err_t err;

    while (sgt_now_s() < end) {
        sgw_msg_t *m;
        const char *data, *key, *code;
        size_t len, klen, clen, hlen;
        const char *hname;
        const void *hval;

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
        m->headers = sg_json_new_object();
        for (size_t i = 0; sg_kafka_msg_header_at(msg, i, &hname, &hval, &hlen); i++) {
            char *v = hval ? strndup(hval, hlen) : NULL;
            sg_json_add_str(m->headers, hname, v ? v : "");
            free(v);
        }
        m->partition = sg_kafka_msg_partition(msg);
        m->offset = sg_kafka_msg_offset(msg);
        sg_kafka_msg_destroy(msg);
    }
}

void sgw_reader_wait_count(sgw_reader_t *r, size_t want)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;

    while (r->n < want && sgt_now_s() < deadline) {
        sgw_expect_worker_alive();
        sgw_reader_poll(r, 200);
    }
    cr_assert_geq(r->n, want, "only %zu of %zu messages arrived", r->n, want);
}

void sgw_wait_topic_count(const char *topic, size_t want)
{
    sgw_reader_t r;

    sgw_reader_open(&r, topic);
    sgw_reader_wait_count(&r, want);
    sgw_reader_close(&r);
}

void sgw_assert_call_running(int idx, const char *why)
{
    cr_assert_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = %d AND phase = "
                           "'forward' AND finished_at IS NULL",
                           idx),
                 1, "%s", why);
}

const char *sgw_jstr(const sg_json_t *doc, const char *key)
{
    const char *s = sg_json_string(sg_json_member(doc, key));

    return s ? s : "";
}

long long sgw_jint(const sg_json_t *doc, const char *key)
{
    int64_t v = -1;

    if (sg_json_get_int(doc, "$", key, true, &v, NULL) < 0)
        return -1;
    return (long long)v;
}

/* ---- the test's world ---------------------------------------------------- */

void sgw_env_add(const char *fmt, ...)
{
    va_list ap;

    cr_assert_lt(sgw.nenv, (size_t)SGW_MAX_ENV);
    va_start(ap, fmt);
    vsnprintf(sgw.envbuf[sgw.nenv], sizeof(sgw.envbuf[sgw.nenv]), fmt, ap);
    va_end(ap);
    sgw.env[sgw.nenv] = sgw.envbuf[sgw.nenv];
    sgw.env[++sgw.nenv] = NULL;
}

/* Runs `sagad-worker args...` to completion with the test's environment. */
void sgw_worker_cli(const char *const *args)
{
    char *out, *err;
    int rc = sgt_run("sagad-worker", args, sgw.env, &out, &err);

    cr_assert_eq(rc, 0, "sagad-worker %s exited %d: %s%s", args[0], rc, out, err);
    free(out);
    free(err);
}

/* The test keyring: every principal gets a fresh key pair, its private
 * half in a key file (as `sagactl keys new` writes it). */
static void write_keyring(void)
{
    static const struct {
        const char *name, *entry;
    } who[] = {
        {"shop", "\"roles\": [\"submit\"]"},
        {"agent", "\"roles\": [\"submit\", \"approve\", \"cancel\"]"},
        {"finance:bob", "\"roles\": [\"approve\", \"cancel\"]"},
        {"ann", "\"roles\": [\"approve\", \"cancel\"]"},
        {"support:alice", "\"roles\": [\"cancel\"]"},
        {"limited", "\"roles\": [\"approve\"], \"approve_tools\": [\"noop\"]"},
        /* sagad-gateway's: it signs for the users it authenticated */
        {"gateway", "\"roles\": [\"submit\", \"approve\", \"cancel\", \"delegate\"]"},
    };
    FILE *fp;
    sg_err_t err;

    snprintf(sgw.keyring, sizeof(sgw.keyring), "%s/keyring.json", sgw.dir);
    fp = fopen(sgw.keyring, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"principals\": {");
    for (size_t i = 0; i < sizeof(who) / sizeof(who[0]); i++) {
        unsigned char pub[32];
        char *b64pub, *b64priv;
        FILE *kf;

        cr_assert_eq(sg_ed25519_keygen(pub, sgw.principals[i].priv, &err), 0);
        sgw.principals[i].name = who[i].name;
        b64pub = sg_base64(pub, 32);
        b64priv = sg_base64(sgw.principals[i].priv, 32);
        fprintf(fp, "%s\"%s\": {\"keys\": {\"k1\": \"%s\"}, %s}", i ? ", " : "", who[i].name,
                b64pub, who[i].entry);
        snprintf(sgw.principals[i].path, sizeof(sgw.principals[i].path), "%s/key-%zu.json", sgw.dir,
                 i);
        kf = fopen(sgw.principals[i].path, "w");
        cr_assert_not_null(kf);
        fprintf(kf, "{\"principal\": \"%s\", \"key_id\": \"k1\", \"private_key\": \"%s\"}\n",
                who[i].name, b64priv);
        fclose(kf);
        free(b64pub);
        free(b64priv);
    }
    fprintf(fp, "}}\n");
    fclose(fp);
}

static size_t principal_index(const char *name)
{
    for (size_t i = 0; i < sizeof(sgw.principals) / sizeof(sgw.principals[0]); i++)
        if (sgw.principals[i].name && strcmp(sgw.principals[i].name, name) == 0)
            return i;
    cr_assert_fail("no test principal %s", name);
    return 0;
}

const char *sgw_key_path(const char *principal)
{
    return sgw.principals[principal_index(principal)].path;
}

void sgw_produce_signed(const char *principal, int64_t ts_skew_s, const char *key,
                        const void *payload, size_t len)
{
    size_t i = principal_index(principal);
    sg_err_t err;
    char *auth =
        sg_auth_sign(sgw.principals[i].priv, principal, "k1", (int64_t)time(NULL) + ts_skew_s, key,
                     strlen(key), payload, len, &err);
    sg_kafka_header_t h = {SG_AUTH_HEADER, auth, 0};

    cr_assert_not_null(auth, "%s", err.message);
    h.len = strlen(auth);
    sgw_produce_headers(sgw.topic_cmd, key, payload, len, &h, 1);
    free(auth);
}

void sgw_setup(void)
{
    const char *migrate[] = {"migrate", NULL};

    memset(&sgw, 0, sizeof(sgw));
    sg_log_init("test_worker", SG_LOG_WARN); /* the test's own Kafka clients */
    sgt_db_create(sgw.db, sizeof(sgw.db), sgw.dsn, sizeof(sgw.dsn));
    sgt_unique(sgw.topic_cmd, sizeof(sgw.topic_cmd), "sgt_cmd");
    sgt_unique(sgw.topic_int, sizeof(sgw.topic_int), "sgt_int");
    sgt_unique(sgw.topic_ev, sizeof(sgw.topic_ev), "sgt_ev");
    sgt_unique(sgw.topic_dlq, sizeof(sgw.topic_dlq), "sgt_dlq");
    sgt_unique(sgw.group, sizeof(sgw.group), "sgt_worker");
    snprintf(sgw.dir, sizeof(sgw.dir), "/tmp/sagad-wtest-XXXXXX");
    cr_assert_not_null(mkdtemp(sgw.dir));
    snprintf(sgw.registry, sizeof(sgw.registry), "%s/tools.json", sgw.dir);
    sgw_env_add("SAGAD_PG_DSN=%s", sgw.dsn);
    sgw_env_add("SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", sgt_kafka());
    sgw_env_add("SAGAD_TOPIC_COMMANDS=%s", sgw.topic_cmd);
    sgw_env_add("SAGAD_TOPIC_INTERNAL=%s", sgw.topic_int);
    sgw_env_add("SAGAD_TOPIC_EVENTS=%s", sgw.topic_ev);
    sgw_env_add("SAGAD_TOPIC_DLQ=%s", sgw.topic_dlq);
    sgw_env_add("SAGAD_WORKER_GROUP_ID=%s", sgw.group);
    sgw_env_add("SAGAD_WORKER_REGISTRY=%s", sgw.registry);
    write_keyring();
    sgw_env_add("SAGAD_SECURITY_KEYRING=%s", sgw.keyring);
    sgw_env_add("SAGAD_LOG_LEVEL=info");
    sgw_env_add("SAGAD_RELAY_POLL_INTERVAL_MS=50");
    sgw_worker_cli(migrate);
    sgw.pg = sgt_db_connect(sgw.dsn);
    /* From here on the binaries run as production's roles: the later
     * SAGAD_PG_DSN wins. */
    sgt_role_dsn(sgw.rt_dsn, sizeof(sgw.rt_dsn), sgw.dsn, "runtime");
    sgt_role_dsn(sgw.op_dsn, sizeof(sgw.op_dsn), sgw.dsn, "operator");
    sgw_env_add("SAGAD_PG_DSN=%s", sgw.rt_dsn);
    snprintf(sgw.op_env, sizeof(sgw.op_env), "SAGAD_PG_DSN=%s", sgw.op_dsn);
}

void sgw_relay_wal_start(void)
{
    char dsn_env[700], slot_env[128], rdsn[600];
    const char *env[] = {dsn_env, slot_env, "SAGAD_RELAY_SOURCE=wal", NULL};

    sgt_role_dsn(rdsn, sizeof(rdsn), sgw.dsn, "relay");
    sgt_unique(sgw.wal_slot, sizeof(sgw.wal_slot), "sgw_slot");
    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", rdsn);
    snprintf(slot_env, sizeof(slot_env), "SAGAD_RELAY_SLOT=%s", sgw.wal_slot);
    sgw_start(&sgw.relay, "sagad-relay", env);
}

/* A slot keeps its database from being dropped and the WAL from being
 * recycled: dropped as the relay's login (which may), once its relay is
 * gone. */
static void drop_wal_slot(void)
{
    char rdsn[600], err[512];

    if (!sgw.wal_slot[0])
        return;
    sgt_role_dsn(rdsn, sizeof(rdsn), sgw.dsn, "relay");
    if (sgt_slot_drop(rdsn, sgw.wal_slot, err, sizeof(err)) < 0)
        cr_log_warn("cannot drop slot %s: %s", sgw.wal_slot, err);
}

void sgw_teardown(void)
{
    /* Normally stopped by the test already; this is for a failed one. */
    sgw_proc_join(&sgw.worker, SIGTERM);
    sgw_proc_join(&sgw.relay, SIGTERM);
    drop_wal_slot();
    sgt_bg_free(&sgw.worker);
    sgt_bg_free(&sgw.relay);
    for (int i = 0; i < sgw.nprocs; i++) {
        sgw_proc_join(&sgw.procs[i], SIGTERM);
        sgt_bg_free(&sgw.procs[i]);
    }
    sgw_reader_close(&sgw.events);
    sg_kafka_destroy(sgw.producer);
    sg_pg_destroy(sgw.pg);
    sgt_db_drop(sgw.db);
    unlink(sgw.registry);
    unlink(sgw.keyring);
    for (size_t i = 0; i < sizeof(sgw.principals) / sizeof(sgw.principals[0]); i++)
        if (sgw.principals[i].name)
            unlink(sgw.principals[i].path);
    rmdir(sgw.dir);
}

void sgw_world_start(const char *extra_tools, int partitions, const char *const *extra_env)
{
    char nparts[16], errstr[256];
    const char *topics[] = {"topics", "--partitions", nparts, NULL};
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    FILE *fp = fopen(sgw.registry, "w");

    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"tools\": {%s%s%s}}\n", SGW_BASE_TOOLS, extra_tools ? "," : "",
            extra_tools ? extra_tools : "");
    fclose(fp);
    for (; extra_env && *extra_env; extra_env++)
        sgw_env_add("%s", *extra_env);
    snprintf(nparts, sizeof(nparts), "%d", partitions);
    sgw_worker_cli(topics);
    sgw.producer = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    cr_assert_not_null(sgw.producer, "%s", errstr);
    sgw_reader_open(&sgw.events, sgw.topic_ev);
}

void sgw_pair_start(const char *extra_tools, int partitions, const char *const *extra_env)
{
    sgw_world_start(extra_tools, partitions, extra_env);
    sgt_bg_start(&sgw.relay, "sagad-relay", sgw_run_args, sgw.env);
    sgt_bg_start(&sgw.worker, "sagad-worker", sgw_run_args, sgw.env);
    sgw_wait_assigned(partitions);
}

void sgw_wait_assigned(int partitions)
{
    sgw_wait_int(2 * partitions, "SELECT count(*) FROM consumer_offsets");
}

void sgw_start(sgt_bg_t *pr, const char *prog, const char *const *extra_env)
{
    const char *env[SGW_MAX_ENV * 2 + 1];
    size_t n = 0;

    for (size_t i = 0; i < sgw.nenv; i++)
        env[n++] = sgw.env[i];
    for (; extra_env && *extra_env && n < SGW_MAX_ENV * 2; extra_env++)
        env[n++] = *extra_env;
    env[n] = NULL;
    sgt_bg_start(pr, prog, sgw_run_args, env);
}

sgt_bg_t *sgw_proc_start(const char *prog, const char *const *extra_env)
{
    cr_assert_lt(sgw.nprocs, SGW_MAX_PROCS, "too many processes for one test");
    sgw_start(&sgw.procs[sgw.nprocs], prog, extra_env);
    return &sgw.procs[sgw.nprocs++];
}

/* SIGTERM to both: each drains and exits 0.  The worker's stderr stays in
 * sgw.worker.err for the test to look at. */
void sgw_pair_stop(void)
{
    int rc = sgw_proc_join(&sgw.worker, SIGTERM);

    cr_expect_eq(rc, 0, "the worker exits 0 on SIGTERM, got %d: %s", rc, sgt_bg_tail(&sgw.worker));
    rc = sgw_proc_join(&sgw.relay, SIGTERM);
    cr_expect_eq(rc, 0, "the relay exits 0 on SIGTERM, got %d: %s", rc, sgt_bg_tail(&sgw.relay));
}

/* Fails at once, with its log, when the worker died under a test that
 * waits for it to do something. */
void sgw_expect_worker_alive(void)
{
    int rc;

    if (!(sgw.worker.started && !sgw.worker.joined) || !sgt_bg_done(&sgw.worker))
        return;
    rc = sgw_proc_join(&sgw.worker, 0);
    cr_assert_fail("the worker exited %d: %s", rc, sgt_bg_tail(&sgw.worker));
}

/* ---- exec gates and crashes ---------------------------------------------- */

void sgw_gate_dir(char *out, size_t size)
{
    char tmpl[] = "/tmp/sagad-gate-XXXXXX";

    cr_assert_not_null(mkdtemp(tmpl));
    snprintf(out, size, "%s", tmpl);
}

void sgw_gate_tool(char *out, size_t size, const char *name, const char *dir, const char *fail)
{
    char gate[PATH_MAX];

    cr_assert_not_null(realpath("tests/fixtures/exec/gate.sh", gate));
    snprintf(out, size,
             "\"%s\": {\"adapter\": \"exec\", \"target\": [\"%s\", \"%s\"%s%s%s], "
             "\"side_effect\": \"reversible\", \"compensation\": \"ledger\", \"timeout_ms\": "
             "110000}",
             name, gate, dir, fail ? ", \"" : "", fail ? fail : "", fail ? "\"" : "");
}

void sgw_wait_file(const char *dir, const char *name)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;
    char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    while (access(path, F_OK) != 0 && sgt_now_s() < deadline) {
        sgw_expect_worker_alive();
        usleep(20000);
    }
    cr_assert_eq(access(path, F_OK), 0, "no %s: the call never started", path);
}

void sgw_touch(const char *dir, const char *name)
{
    char path[PATH_MAX];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "w");
    cr_assert_not_null(fp, "%s", path);
    fclose(fp);
}

int sgw_crash_until_terminal(const char *saga_id, int max_crashes)
{
    double deadline = sgt_now_s() + 2 * SGW_WAIT_S;
    int crashes = 0;

    for (;;) {
        char status[32];
        int rc;

        sgw_q_text(status, sizeof(status), "SELECT status FROM sagas WHERE saga_id = '%s'",
                   saga_id);
        if (sgw_terminal_status(status))
            return crashes;
        if (!sgt_bg_done(&sgw.worker)) {
            cr_assert_lt(sgt_now_s(), deadline, "saga %s is still %s after %d crashes: %s", saga_id,
                         status, crashes, sgt_bg_tail(&sgw.worker));
            usleep(50000);
            continue;
        }
        rc = sgw_proc_join(&sgw.worker, 0);
        cr_assert_eq(rc, 128 + SIGABRT, "the crash tool aborts the worker; got %d: %s", rc,
                     sgt_bg_tail(&sgw.worker));
        cr_expect(strstr(sgw.worker.err, "builtin crash: aborting the worker as asked"),
                  "the worker says why it aborts");
        crashes++;
        cr_assert_leq(crashes, max_crashes, "still crashing after %d crashes", crashes);
        sgt_bg_start(&sgw.worker, "sagad-worker", sgw_run_args, sgw.env);
    }
}

/* ---- producing ----------------------------------------------------------- */

void sgw_produce_headers(const char *topic, const char *key, const void *payload, size_t len,
                         const sg_kafka_header_t *headers, size_t nheaders)
{
    sg_err_t err;

    cr_assert_eq(sg_kafka_produce(sgw.producer, topic, key, key ? strlen(key) : 0, payload, len,
                                  headers, nheaders, NULL, &err),
                 0, "%s", err.message);
    cr_assert_eq(sg_kafka_flush(sgw.producer, 30000, &err), 0, "%s", err.message);
}

void sgw_produce(const char *topic, const char *key, const void *payload, size_t len)
{
    sgw_produce_headers(topic, key, payload, len, NULL, 0);
}

/* An internal command (step.execute, ...) as sagad sends it: a row of the
 * outbox, which the relay publishes with its sagad-mac signature.  What a
 * producer sends with sgw_produce() instead is refused. */
void sgw_send_internal(const char *key, const char *payload)
{
    sgw_send_internal_to(sgw.topic_int, key, payload);
}

void sgw_send_internal_to(const char *topic, const char *key, const char *payload)
{
    const char *params[] = {topic, key, payload};
    sg_err_t err;

    cr_assert_eq(sg_pg_exec(sgw.pg,
                            "INSERT INTO outbox (topic, key, headers, payload) VALUES ($1, "
                            "convert_to($2, 'UTF8'), '{}', convert_to($3, 'UTF8'))",
                            3, params, NULL, &err),
                 0, "outbox insert: %s", err.message);
}

/* Submits saga.start for saga_id with steps (a JSON array's text). */
void sgw_submit(const char *saga_id, const char *steps)
{
    size_t size = strlen(steps) + 512;
    char *msg = malloc(size);

    cr_assert_not_null(msg);
    snprintf(msg, size,
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
             "\"name\": \"test\", \"steps\": %s}",
             saga_id, saga_id, steps);
    /* Signed by a producer: a saga with an approval gate must be. */
    sgw_produce_signed("shop", 0, saga_id, msg, strlen(msg));
    free(msg);
}

/* ---- PostgreSQL ---------------------------------------------------------- */

static void sgw_vsql(char *out, size_t size, const char *fmt, va_list ap)
{
    int n = vsnprintf(out, size, fmt, ap);

    cr_assert(n > 0 && (size_t)n < size, "statement too long");
}

/* The first cell as text into out ("(null)" for NULL, "" for no row). */
const char *sgw_q_text(char *out, size_t size, const char *fmt, ...)
{
    char sql[2048];
    sg_pg_res_t *res;
    sg_err_t err;
    va_list ap;

    va_start(ap, fmt);
    sgw_vsql(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    cr_assert_eq(sg_pg_exec(sgw.pg, sql, 0, NULL, &res, &err), 0, "%s: %s", sql, err.message);
    if (sg_pg_res_rows(res) == 0)
        snprintf(out, size, "%s", "");
    else
        snprintf(out, size, "%s", sg_pg_res_get(res, 0, 0) ? sg_pg_res_get(res, 0, 0) : "(null)");
    sg_pg_res_destroy(res);
    return out;
}

bool sgw_terminal_status(const char *status)
{
    return strcmp(status, "completed") == 0 || strcmp(status, "compensated") == 0 ||
           strcmp(status, "failed") == 0;
}

/* Polls the sagas table until saga_id has status; fails at once when it
 * ends in another terminal status, or when the deadline passes. */
void sgw_wait_status(const char *saga_id, const char *status)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;
    char now[32];

    for (;;) {
        sgw_q_text(now, sizeof(now), "SELECT status FROM sagas WHERE saga_id = '%s'", saga_id);
        if (strcmp(now, status) == 0)
            return;
        cr_assert(!sgw_terminal_status(now), "saga %s ended %s, expected %s", saga_id, now, status);
        sgw_expect_worker_alive();
        cr_assert_lt(sgt_now_s(), deadline, "saga %s is still \"%s\", expected %s; worker log: %s",
                     saga_id, now, status, sgt_bg_tail(&sgw.worker));
        usleep(50000);
    }
}

/* Polls until the query's integer is want. */
void sgw_wait_int(long long want, const char *sql)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;
    long long v;

    while ((v = sgt_query_int(sgw.pg, sql)) != want && sgt_now_s() < deadline) {
        sgw_expect_worker_alive();
        usleep(50000);
    }
    cr_assert_eq(v, want, "%s: %lld, expected %lld; worker log: %s", sql, v, want,
                 sgt_bg_tail(&sgw.worker));
}

/* ---- events -------------------------------------------------------------- */

const sgw_msg_t *sgw_event_find(const char *saga_id, const char *type)
{
    for (size_t i = 0; i < sgw.events.n; i++) {
        const sg_json_t *ev = sgw.events.v[i].doc;
        if (strcmp(sgw_jstr(ev, "saga_id"), saga_id) == 0 &&
            strcmp(sgw_jstr(ev, "type"), type) == 0)
            return &sgw.events.v[i];
    }
    return NULL;
}

/* Reads the events topic until saga_id's event of that type arrived. */
const sg_json_t *sgw_event_wait(const char *saga_id, const char *type)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;
    const sgw_msg_t *m;

    while (!(m = sgw_event_find(saga_id, type)) && sgt_now_s() < deadline) {
        sgw_expect_worker_alive();
        sgw_reader_poll(&sgw.events, 200);
    }
    cr_assert_not_null(m, "no %s event for saga %s", type, saga_id);
    return m->doc;
}

/* The saga's own events (seq > 0; a rejected resubmission has seq 0), in
 * the order the events topic delivered them. */
size_t sgw_saga_events(const char *saga_id, const sg_json_t **out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < sgw.events.n; i++) {
        const sg_json_t *ev = sgw.events.v[i].doc;
        if (strcmp(sgw_jstr(ev, "saga_id"), saga_id) == 0 && sgw_jint(ev, "seq") > 0) {
            cr_assert_lt(n, max, "more than %zu events for saga %s", max, saga_id);
            out[n++] = ev;
        }
    }
    return n;
}

/* Asserts the saga's events are exactly the given types (NULL-terminated)
 * with seq 1..N in that order; returns them through out (max 64). */
size_t sgw_expect_events(const char *saga_id, const sg_json_t **out, ...)
{
    const sg_json_t *evs[64];
    const char *want[64];
    char got[2048] = "";
    size_t n = sgw_saga_events(saga_id, evs, 64), nw = 0;
    va_list ap;

    va_start(ap, out);
    for (const char *t; (t = va_arg(ap, const char *)) && nw < 64;)
        want[nw++] = t;
    va_end(ap);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof(got) - len, "%s%s#%lld", i ? ", " : "", sgw_jstr(evs[i], "type"),
                 sgw_jint(evs[i], "seq"));
    }
    cr_assert_eq(n, nw, "saga %s: %zu events, expected %zu: %s", saga_id, n, nw, got);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(sgw_jstr(evs[i], "type"), want[i], "saga %s event %zu: %s", saga_id, i,
                         got);
        cr_assert_eq(sgw_jint(evs[i], "seq"), (long long)i + 1, "saga %s seq out of order: %s",
                     saga_id, got);
        if (out)
            out[i] = evs[i];
    }
    return n;
}

const sg_json_t *sgw_run_health(const sg_json_t *ev)
{
    const sg_json_t *h = sg_json_member(ev, "run_health");

    cr_assert_not_null(h, "terminal event %s without run_health", sgw_jstr(ev, "type"));
    return h;
}

/* ---- checkout-svc -------------------------------------------------------- */

void sgw_checkout_start(sgt_bg_t *svc, const char *const *args, char *base, size_t base_size)
{
    static const char prefix[] = "checkout-svc listening on ";
    static const char *const env[] = {NULL};
    const char *argv[32] = {"--listen", "127.0.0.1:0"};
    size_t n = 2;
    char line[256];

    for (; args && *args; args++) {
        cr_assert_lt(n, sizeof(argv) / sizeof(argv[0]) - 1);
        argv[n++] = *args;
    }
    argv[n] = NULL;
    cr_assert(sgt_bg_start_line(svc, "checkout-svc", argv, env, line, sizeof(line), 30),
              "checkout-svc printed no line: %s", sgt_bg_tail(svc));
    cr_assert_eq(strncmp(line, prefix, strlen(prefix)), 0, "unexpected first line: %s", line);
    snprintf(base, base_size, "%s", line + strlen(prefix));
}

void sgw_checkout_stop(sgt_bg_t *svc)
{
    int rc;

    if (!svc->started || svc->joined)
        return;
    sgt_bg_signal(svc, SIGTERM);
    rc = sgt_bg_join(svc, 60);
    cr_expect_eq(rc, 0, "checkout-svc exited %d after SIGTERM: %s", rc, sgt_bg_tail(svc));
}

const sg_json_t *sgw_checkout_requests(const char *base, const char *path, sg_json_t **doc)
{
    char url[512];
    long status = 0;
    char *body;
    const sg_json_t *arr;

    snprintf(url, sizeof(url), "%s/_admin/requests?path=%s", base, path);
    body = sgt_http("GET", url, NULL, &status);
    cr_assert_eq(status, 200, "GET %s: %ld %s", url, status, body);
    *doc = sg_json_parse(body, strlen(body), &(sg_json_limits_t){64 << 20, 64, 0}, NULL);
    cr_assert_not_null(*doc, "GET %s: not JSON: %.200s", url, body);
    free(body);
    arr = sg_json_member(*doc, "requests");
    cr_assert(sg_json_is_array(arr), "GET %s: no requests array", url);
    return arr;
}

long long sgw_checkout_effects(const char *base, const char *path)
{
    char url[512];
    long status = 0;
    char *body;
    sg_json_t *doc;
    long long n;

    snprintf(url, sizeof(url), "%s/_admin/stats", base);
    body = sgt_http("GET", url, NULL, &status);
    cr_assert_eq(status, 200, "GET %s: %ld %s", url, status, body);
    doc = sg_json_parse(body, strlen(body), NULL, NULL);
    cr_assert_not_null(doc, "GET %s: not JSON: %.200s", url, body);
    n = sgw_jint(sg_json_member(doc, "effects"), path);
    sg_json_destroy(doc);
    free(body);
    return n;
}

/* ---- a gateway --------------------------------------------------------------- */

static void gateway_users(sgw_gateway_t *g, const char *const *users, const char *const *roles,
                          size_t n)
{
    FILE *fp = fopen(g->users_path, "w");

    cr_assert_not_null(fp, "%s", g->users_path);
    cr_assert(n <= SGW_GW_USERS_MAX, "at most %d users", SGW_GW_USERS_MAX);
    fprintf(fp, "{\"v\": 1, \"users\": {");
    for (size_t i = 0; i < n; i++) {
        const char *args[] = {"token", "new", "--user", users[i], "--json", NULL};
        char *out = NULL, *err = NULL;
        sg_json_t *doc;
        int rc = sgt_run("sagad-gateway", args, sgw.env, &out, &err);
        cr_assert_eq(rc, 0, "token new: %s", err);
        doc = sg_json_parse(out, strlen(out), NULL, NULL);
        cr_assert_not_null(doc, "token new: %s", out);
        snprintf(g->token[i], sizeof(g->token[i]), "%s", sgw_jstr(doc, "token"));
        fprintf(fp, "%s\"%s\": {\"roles\": %s, \"tokens\": [\"%s\"]}", i ? ", " : "", users[i],
                roles[i], sgw_jstr(doc, "hash"));
        sg_json_destroy(doc);
        free(out);
        free(err);
    }
    fprintf(fp, "}}");
    fclose(fp);
}

void sgw_gateway_start(sgw_gateway_t *g, const char *scheme, const char *const *users,
                       const char *const *roles, size_t n, const char *const *more)
{
    char env_users[200], env_key[220], env_port[64];
    int port = sgt_free_port();
    const char *extra[24] = {env_users, env_key, env_port, sgw.op_env,
                             "SAGAD_GATEWAY_ALLOWED_ORIGINS=https://console.example"};
    size_t k = 5;
    double until;

    for (; more && *more && k < 23; more++)
        extra[k++] = *more;
    snprintf(g->users_path, sizeof(g->users_path), "%s/users.json", sgw.dir);
    gateway_users(g, users, roles, n);
    snprintf(env_users, sizeof(env_users), "SAGAD_GATEWAY_USERS=%s", g->users_path);
    snprintf(env_key, sizeof(env_key), "SAGAD_GATEWAY_KEY=%s", sgw_key_path("gateway"));
    snprintf(env_port, sizeof(env_port), "SAGAD_GATEWAY_PORT=%d", port);
    snprintf(g->base, sizeof(g->base), "%s://127.0.0.1:%d", scheme, port);
    g->proc = sgw_proc_start("sagad-gateway", extra);
    for (until = sgt_now_s() + SGW_WAIT_S; sgt_now_s() < until; usleep(100000)) {
        char url[128];
        sgt_res_t r;
        snprintf(url, sizeof(url), "%s/readyz", g->base);
        r = sgt_request("GET", url, NULL, NULL);
        if (r.status == 200) {
            sgt_res_free(&r);
            return;
        }
        sgt_res_free(&r);
        cr_assert(!sgt_bg_done(g->proc), "the gateway exited: %s", sgt_bg_tail(g->proc));
    }
    cr_assert_fail("the gateway did not become ready: %s", sgt_bg_tail(g->proc));
}
