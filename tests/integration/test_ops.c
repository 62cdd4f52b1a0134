/* Operability of the running binaries: the /metrics, /healthz and /readyz
 * endpoint of sagad-worker and sagad-relay (scraped and checked with the
 * strict parser of tests/support/sgt_prom), readiness while draining, the
 * SIGHUP log level, and secrets kept out of every log line.  Each test has
 * its own database, topics, group and registry; the processes log to files
 * so a test can read their lines (the endpoint's port) while they run. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sgt_prom.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_log.h"
#include "sagad/sg_pg.h"

#define WAIT_S 60.0

/* Distinctive secrets: none may appear in any log line or error output.
 * The test PostgreSQL's login password is fixed, so the DSNs carry these
 * as sslpassword (a libpq secret keyword) beside it. */
#define DSN_SECRET   "SslPw-7f3e1a"
#define KV_SECRET    "SslPw-kv-92bd"
#define SASL_SECRET  "SaslPw-c41d08"
#define TOKEN_SECRET "tok-5e9a77b1"

/* ---- processes with their stderr in a file ------------------------------- */

typedef struct oproc_s {
    sgt_proc_t p;
    pthread_t th;
    char log[128];
    atomic_bool done;
    int rc;
    bool started;
} oproc_t;

/* Copies the child's stderr into its log file (and drops stdout) until it
 * exits, then reaps it. */
static void *oproc_reap(void *arg)
{
    oproc_t *o = arg;
    FILE *fp = fopen(o->log, "a");
    int open_out = 1, open_err = 1, status;
    char buf[4096];

    while (open_out || open_err) {
        struct pollfd fds[2] = {{open_out ? o->p.out_fd : -1, POLLIN, 0},
                                {open_err ? o->p.err_fd : -1, POLLIN, 0}};
        if (poll(fds, 2, 1000) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            ssize_t r;
            if (!fds[i].revents)
                continue;
            r = read(fds[i].fd, buf, sizeof(buf));
            if (r <= 0)
                *(i ? &open_err : &open_out) = 0;
            else if (i == 1 && fp) {
                fwrite(buf, 1, (size_t)r, fp);
                fflush(fp);
            }
        }
    }
    if (fp)
        fclose(fp);
    close(o->p.out_fd);
    close(o->p.err_fd);
    waitpid(o->p.pid, &status, 0);
    o->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    atomic_store(&o->done, true);
    return NULL;
}

static void oproc_start(oproc_t *o, const char *prog, const char *log, const char *const *env)
{
    static const char *const run[] = {"run", NULL};

    FILE *fp = fopen(log, "w"); /* there before the first read of it */

    cr_assert_not_null(fp);
    fclose(fp);
    memset(o, 0, sizeof(*o));
    snprintf(o->log, sizeof(o->log), "%s", log);
    sgt_spawn(&o->p, prog, run, env);
    cr_assert_eq(pthread_create(&o->th, NULL, oproc_reap, o), 0);
    o->started = true;
}

/* SIGTERM (unless sig is 0) and the exit code; killed after timeout_s. */
static int oproc_stop(oproc_t *o, int sig, double timeout_s)
{
    double deadline = sgt_now_s() + timeout_s;

    if (!o->started)
        return -1;
    if (sig && !atomic_load(&o->done))
        kill(o->p.pid, sig);
    while (!atomic_load(&o->done) && sgt_now_s() < deadline)
        usleep(20000);
    if (!atomic_load(&o->done))
        kill(o->p.pid, SIGKILL);
    pthread_join(o->th, NULL);
    o->started = false;
    return o->rc;
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    char *buf;
    long n;

    cr_assert_not_null(fp, "cannot read %s", path);
    fseek(fp, 0, SEEK_END);
    n = ftell(fp);
    rewind(fp);
    buf = calloc(1, (size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    return buf;
}

/* Waits until the log has a line containing needle; returns that line's
 * copy (malloc'd). */
static char *log_wait(const oproc_t *o, const char *needle)
{
    double deadline = sgt_now_s() + WAIT_S;

    for (;;) {
        char *text = slurp(o->log), *hit = strstr(text, needle);
        if (hit) {
            char *bol = hit, *eol = strchr(hit, '\n'), *line;
            while (bol > text && bol[-1] != '\n')
                bol--;
            line = strndup(bol, eol ? (size_t)(eol - bol) : strlen(bol));
            free(text);
            return line;
        }
        free(text);
        cr_assert(!atomic_load(&o->done), "%s exited before logging \"%s\"", o->log, needle);
        cr_assert_lt(sgt_now_s(), deadline, "no \"%s\" in %s", needle, o->log);
        usleep(50000);
    }
}

/* The endpoint's port, from its "http endpoint listening" line. */
static int endpoint_port(const oproc_t *o)
{
    char *line = log_wait(o, "\"msg\":\"http endpoint listening\"");
    const char *p = strstr(line, "\"addr\":\"127.0.0.1:");
    int port = p ? atoi(p + strlen("\"addr\":\"127.0.0.1:")) : 0;

    cr_assert_gt(port, 0, "no port in: %s", line);
    free(line);
    return port;
}

/* ---- the test's world ---------------------------------------------------- */

static struct {
    char db[128], dsn[512], dir[64], registry[160], config[160];
    char topic_cmd[128], topic_int[128], topic_ev[128], topic_dlq[128], group[128];
    char envbuf[28][640];
    const char *wenv[24], *renv[24];
    size_t nw, nr;
    oproc_t worker, relay;
    sg_pg_t *pg;
} T;

static void env_push(const char **env, size_t *n, const char *text)
{
    cr_assert_lt(T.nw + T.nr, (size_t)26);
    snprintf(T.envbuf[T.nw + T.nr], sizeof(T.envbuf[0]), "%s", text);
    env[(*n)++] = T.envbuf[T.nw + T.nr];
    env[*n] = NULL;
}

/* Adds a variable to the worker's environment, the relay's, or both. */
static void env_add(bool worker, bool relay, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void env_add(bool worker, bool relay, const char *fmt, ...)
{
    char text[640];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (worker)
        env_push(T.wenv, &T.nw, text);
    if (relay)
        env_push(T.renv, &T.nr, text);
}

static void run_ok(const char *prog, const char *const *args, const char *const *env)
{
    char *out, *err;
    int rc = sgt_run(prog, args, env, &out, &err);

    cr_assert_eq(rc, 0, "%s %s exited %d: %s%s", prog, args[0], rc, out, err);
    free(out);
    free(err);
}

static void setup(void)
{
    static const char *const migrate[] = {"migrate", NULL};
    static const char *const topics[] = {"topics", "--partitions", "2", NULL};
    const char *slash;
    char kv[512], user[64], pw[64], host[64], port[16];
    FILE *fp;

    memset(&T, 0, sizeof(T));
    sg_log_init("test_ops", SG_LOG_WARN);
    sgt_db_create(T.db, sizeof(T.db), T.dsn, sizeof(T.dsn));
    sgt_unique(T.topic_cmd, sizeof(T.topic_cmd), "sgt_ocmd");
    sgt_unique(T.topic_int, sizeof(T.topic_int), "sgt_oint");
    sgt_unique(T.topic_ev, sizeof(T.topic_ev), "sgt_oev");
    sgt_unique(T.topic_dlq, sizeof(T.topic_dlq), "sgt_odlq");
    sgt_unique(T.group, sizeof(T.group), "sgt_ops");
    snprintf(T.dir, sizeof(T.dir), "/tmp/sagad-otest-XXXXXX");
    cr_assert_not_null(mkdtemp(T.dir));
    snprintf(T.registry, sizeof(T.registry), "%s/tools.json", T.dir);
    snprintf(T.config, sizeof(T.config), "%s/worker.conf", T.dir);
    fp = fopen(T.registry, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"tools\": {"
                "\"noop\": {\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": "
                "\"read\"},"
                "\"fail\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
                "\"idempotent\"},"
                "\"sleep\": {\"adapter\": \"builtin\", \"target\": \"sleep\", \"side_effect\": "
                "\"read\", \"timeout_ms\": 20000}}}\n");
    fclose(fp);
    fp = fopen(T.config, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "log.level = info\n");
    fclose(fp);
    /* The worker gets the URL form, the relay the key=value form. */
    env_add(true, false, "SAGAD_PG_DSN=%s?sslpassword=%s", T.dsn, DSN_SECRET);
    slash = strrchr(T.dsn, '/');
    cr_assert_eq(
        sscanf(sgt_pg_url(), "postgresql://%63[^:]:%63[^@]@%63[^:]:%15[^/]", user, pw, host, port),
        4, "SAGAD_TEST_PG_URL is not postgresql://user:password@host:port/db");
    snprintf(kv, sizeof(kv), "host=%s port=%s dbname=%s user=%s password=%s sslpassword=%s", host,
             port, slash + 1, user, pw, KV_SECRET);
    env_add(false, true, "SAGAD_PG_DSN=%s", kv);
    env_add(true, true, "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", sgt_kafka());
    env_add(true, true, "SAGAD_KAFKA_SASL_USERNAME=ops");
    env_add(true, true, "SAGAD_KAFKA_SASL_PASSWORD=%s", SASL_SECRET);
    env_add(true, true, "SAGAD_TOPIC_COMMANDS=%s", T.topic_cmd);
    env_add(true, true, "SAGAD_TOPIC_INTERNAL=%s", T.topic_int);
    env_add(true, true, "SAGAD_TOPIC_EVENTS=%s", T.topic_ev);
    env_add(true, true, "SAGAD_TOPIC_DLQ=%s", T.topic_dlq);
    env_add(true, false, "SAGAD_WORKER_GROUP_ID=%s", T.group);
    env_add(true, false, "SAGAD_WORKER_REGISTRY=%s", T.registry);
    env_add(true, false, "SAGAD_CONFIG=%s", T.config);
    env_add(true, true, "SAGAD_HTTP_PORT=0");
    env_add(false, true, "SAGAD_RELAY_POLL_INTERVAL_MS=50");
    run_ok("sagad-worker", migrate, T.wenv);
    run_ok("sagad-worker", topics, T.wenv);
    T.pg = sgt_db_connect(T.dsn);
}

static void teardown(void)
{
    char path[200];

    oproc_stop(&T.worker, SIGKILL, 10);
    oproc_stop(&T.relay, SIGKILL, 10);
    sg_pg_destroy(T.pg);
    sgt_db_drop(T.db);
    unlink(T.registry);
    unlink(T.config);
    snprintf(path, sizeof(path), "%s/worker.log", T.dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/relay.log", T.dir);
    unlink(path);
    rmdir(T.dir);
}

TestSuite(ops, .init = setup, .fini = teardown, .timeout = 180);

static void start_both(int *wport, int *rport)
{
    char wlog[200], rlog[200];

    snprintf(wlog, sizeof(wlog), "%s/worker.log", T.dir);
    snprintf(rlog, sizeof(rlog), "%s/relay.log", T.dir);
    oproc_start(&T.relay, "sagad-relay", rlog, T.renv);
    oproc_start(&T.worker, "sagad-worker", wlog, T.wenv);
    *wport = endpoint_port(&T.worker);
    *rport = endpoint_port(&T.relay);
}

/* Submits sagas prefix-0 .. prefix-(n-1) (just "prefix" when n is 0)
 * through one producer, so they are all in Kafka at once. */
static void submit_n(const char *prefix, int n, const char *steps)
{
    char msg[1024], id[64], errstr[256];
    const char *props[] = {"bootstrap.servers", sgt_kafka(), NULL};
    sg_kafka_t *k = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    sg_err_t err;

    cr_assert_not_null(k, "%s", errstr);
    for (int i = 0; i < (n ? n : 1); i++) {
        if (n)
            snprintf(id, sizeof(id), "%s-%d", prefix, i);
        else
            snprintf(id, sizeof(id), "%s", prefix);
        snprintf(msg, sizeof(msg),
                 "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
                 "\"name\": \"ops\", \"steps\": %s}",
                 id, id, steps);
        cr_assert_eq(
            sg_kafka_produce(k, T.topic_cmd, id, strlen(id), msg, strlen(msg), NULL, 0, NULL, &err),
            0, "%s", err.message);
    }
    cr_assert_eq(sg_kafka_flush(k, 30000, &err), 0, "%s", err.message);
    sg_kafka_destroy(k);
}

static void submit(const char *saga_id, const char *steps)
{
    submit_n(saga_id, 0, steps);
}

static void wait_saga(const char *saga_id, const char *status)
{
    double deadline = sgt_now_s() + WAIT_S;

    while (sgt_query_intf(T.pg, "SELECT count(*) FROM sagas WHERE saga_id = '%s' AND status = '%s'",
                          saga_id, status) != 1) {
        cr_assert_lt(sgt_now_s(), deadline, "saga %s is not %s", saga_id, status);
        usleep(50000);
    }
}

/* GET path; asserts the status; returns the body (caller frees). */
static char *get(int port, const char *path, int want)
{
    char *body = NULL;
    int status = sgt_http_get(port, path, &body);

    cr_assert_eq(status, want, "GET %s: %d, expected %d: %s", path, status, want, body ? body : "");
    return body;
}

/* Polls path until it answers want. */
static char *get_until(int port, const char *path, int want)
{
    double deadline = sgt_now_s() + WAIT_S;
    char *body = NULL;
    int status;

    while ((status = sgt_http_get(port, path, &body)) != want) {
        cr_assert_lt(sgt_now_s(), deadline, "GET %s: still %d, expected %d: %s", path, status, want,
                     body ? body : "");
        free(body);
        body = NULL;
        usleep(100000);
    }
    return body;
}

static void scrape(int port, sgt_prom_t *prom)
{
    char *text = get(port, "/metrics", 200), err[512];

    cr_assert_eq(sgt_prom_parse(text, prom, err, sizeof(err)), 0, "%s in:\n%s", err, text);
    free(text);
}

Test(ops, endpoints_answer_and_counters_move_after_a_saga)
{
    sgt_prom_t w, r;
    int wport, rport;
    char *body;

    start_both(&wport, &rport);
    body = get(wport, "/healthz", 200);
    cr_assert_str_eq(body, "ok\n");
    free(body);
    free(get_until(wport, "/readyz", 200));
    free(get_until(rport, "/readyz", 200));
    free(get(rport, "/healthz", 200));
    body = get(wport, "/nope", 404);
    free(body);

    scrape(wport, &w);
    cr_assert_eq(sgt_prom_get(&w, "sagad_ready", "", -1), 1);
    cr_assert_eq(sgt_prom_get(&w, "sagad_pg_connected", "", -1), 1);
    /* Two partitions of each of its topics, commands and internal. */
    cr_assert_eq(sgt_prom_get(&w, "sagad_partitions_assigned", "", -1), 4);
    cr_assert_eq(sgt_prom_get(&w, "sagad_sagas_finished_total", "status=\"completed\"", 0), 0);
    sgt_prom_free(&w);

    submit("ops-1",
           "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"b\", \"tool\": \"noop\"}]");
    wait_saga("ops-1", "completed");
    scrape(wport, &w);
    cr_assert_eq(sgt_prom_get(&w, "sagad_sagas_finished_total", "status=\"completed\"", 0), 1);
    cr_assert_eq(sgt_prom_get(&w, "sagad_sagas_started_total", "", -1), 1);
    cr_assert_eq(sgt_prom_get(&w, "sagad_steps_total", "tool=\"noop\",outcome=\"ok\"", 0), 2);
    cr_assert_eq(sgt_prom_get(&w, "sagad_step_duration_seconds_count", "tool=\"noop\"", 0), 2);
    cr_assert_eq(sgt_prom_get(&w, "sagad_commands_consumed_total",
                              "type=\"saga.start\",outcome=\"started\"", 0),
                 1);
    cr_assert_eq(sgt_prom_get(&w, "sagad_commands_consumed_total",
                              "type=\"step.execute\",outcome=\"called\"", 0),
                 2);
    cr_assert_eq(sgt_prom_get(&w, "sagad_steps_in_flight", "", -1), 0);
    sgt_prom_free(&w);

    /* The relay published the step commands and the events. */
    scrape(rport, &r);
    cr_assert_geq(sgt_prom_get(&r, "sagad_outbox_published_total", "", 0), 2);
    cr_assert_eq(sgt_prom_get(&r, "sagad_relay_state", "state=\"active\"", -1), 1);
    cr_assert_geq(sgt_prom_get(&r, "sagad_outbox_publish_latency_seconds_count", "", 0), 2);
    sgt_prom_free(&r);

    cr_assert_eq(oproc_stop(&T.worker, SIGTERM, 60), 0, "the worker exits 0 on SIGTERM");
    cr_assert_eq(oproc_stop(&T.relay, SIGTERM, 60), 0, "the relay exits 0 on SIGTERM");
}

/* The dead-letter gauges the alerts watch: an active relay counts the
 * pending dead letters and the age of the oldest. */
Test(ops, relay_exports_pending_dead_letters_and_the_oldest_age)
{
    double deadline = sgt_now_s() + WAIT_S;
    sgt_prom_t r;
    int wport, rport;

    start_both(&wport, &rport);
    scrape(rport, &r);
    cr_assert_eq(sgt_prom_get(&r, "sagad_dlq_pending", "", -1), 0, "none pending yet");
    sgt_prom_free(&r);
    /* A step naming a tool the registry lacks: refused and dead-lettered. */
    submit("ops-dead", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    while (sgt_query_int(T.pg, "SELECT count(*) FROM dead_letters WHERE status = 'pending'") < 1) {
        cr_assert_lt(sgt_now_s(), deadline, "the saga was not dead-lettered");
        usleep(50000);
    }
    for (;;) {
        scrape(rport, &r);
        if (sgt_prom_get(&r, "sagad_dlq_pending", "", -1) == 1 &&
            sgt_prom_get(&r, "sagad_dlq_oldest_pending_age_seconds", "", -1) > 0)
            break;
        sgt_prom_free(&r);
        cr_assert_lt(sgt_now_s(), deadline, "the relay never exported the pending dead letter");
        usleep(200000);
    }
    sgt_prom_free(&r);
    cr_assert_eq(oproc_stop(&T.worker, SIGTERM, 60), 0);
    cr_assert_eq(oproc_stop(&T.relay, SIGTERM, 60), 0);
}

/* Kubernetes stops sending traffic as soon as the pod drains: /readyz
 * answers 503 while the in-flight call still finishes. */
Test(ops, readyz_fails_as_soon_as_draining_starts)
{
    sgt_prom_t w;
    int wport, rport;
    double deadline = sgt_now_s() + WAIT_S;
    char *body;

    start_both(&wport, &rport);
    free(get_until(wport, "/readyz", 200));
    submit("ops-slow", "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": 4000}}]");
    for (;;) {
        scrape(wport, &w);
        if (sgt_prom_get(&w, "sagad_steps_in_flight", "", 0) == 1)
            break;
        sgt_prom_free(&w);
        cr_assert_lt(sgt_now_s(), deadline, "the sleep call never started");
        usleep(100000);
    }
    sgt_prom_free(&w);
    kill(T.worker.p.pid, SIGTERM);
    body = get_until(wport, "/readyz", 503);
    cr_assert(strstr(body, "draining") != NULL, "503 without the reason: %s", body);
    free(body);
    cr_assert(!atomic_load(&T.worker.done), "the worker was gone before the call finished");
    free(get(wport, "/healthz", 200)); /* draining is alive */
    cr_assert_eq(oproc_stop(&T.worker, 0, 60), 0, "the drained worker exits 0");
    wait_saga("ops-slow", "completed");
    log_wait(&T.worker, "\"msg\":\"stopping: finishing running calls\"");
}

/* A run with a password DSN in both forms, a SASL password and a header
 * token: none of them shows up in any log line, error or --print-config.
 * SIGHUP re-reads log.level from the config file. */
Test(ops, secrets_never_reach_logs_and_sighup_reloads_log_level)
{
    static const char *const secrets[] = {DSN_SECRET, KV_SECRET, SASL_SECRET, TOKEN_SECRET};
    static const char *const print[] = {"--print-config", NULL};
    static const char *const check[] = {"check-registry", NULL};
    char bad_uri[256], bad_reg[200], envreg[240], envdsn[600], *out, *err, *wlog, *rlog;
    const char *env[] = {bad_uri, NULL};
    const char *env2[] = {envreg, envdsn, NULL};
    int rc;
    const char *migrate[] = {"migrate", NULL};
    int wport, rport;
    FILE *fp;

    start_both(&wport, &rport);
    free(get_until(wport, "/readyz", 200));
    /* Failure paths log most: a failing step, retried, then compensated. */
    submit("ops-fail", "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"b\", \"tool\": "
                       "\"fail\", \"args\": {\"class\": \"permanent\"}}]");
    wait_saga("ops-fail", "compensated");
    fp = fopen(T.config, "w");
    cr_assert_not_null(fp);
    fprintf(fp, "log.level = debug\n");
    fclose(fp);
    kill(T.worker.p.pid, SIGHUP);
    free(log_wait(&T.worker, "\"msg\":\"log level changed\",\"from\":\"info\",\"to\":\"debug\""));
    submit("ops-debug", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    wait_saga("ops-debug", "completed");
    free(log_wait(&T.worker, "call succeeded")); /* a debug line: the new level holds */
    cr_assert_eq(oproc_stop(&T.worker, SIGTERM, 60), 0);
    cr_assert_eq(oproc_stop(&T.relay, SIGTERM, 60), 0);

    /* libpq quotes a malformed URI whole, password included. */
    snprintf(bad_uri, sizeof(bad_uri), "SAGAD_PG_DSN=postgresql://u:%s@[::1/db", DSN_SECRET);
    rc = sgt_run("sagad-worker", migrate, env, &out, &err);
    cr_assert_eq(rc, 4, "exit %d: %s", rc, err);
    cr_assert(strstr(err, "cannot connect to PostgreSQL") && strstr(err, "\"postgresql://u:****@"),
              "libpq's error, with the URI masked: %s", err);
    for (size_t i = 0; i < 4; i++) {
        cr_assert(!strstr(out, secrets[i]) && !strstr(err, secrets[i]), "%s in: %s%s", secrets[i],
                  out, err);
    }
    free(out);
    free(err);
    /* check-registry lists a registry holding a header token without it. */
    snprintf(bad_reg, sizeof(bad_reg), "%s/token.json", T.dir);
    fp = fopen(bad_reg, "w");
    cr_assert_not_null(fp);
    fprintf(fp,
            "{\"v\": 1, \"tools\": {\"pay\": {\"adapter\": \"http\", \"target\": "
            "\"https://pay.example/charge\", \"side_effect\": \"idempotent\", \"headers\": "
            "{\"Authorization\": \"Bearer %s\"}, \"description\": \"Bearer %s\"}}}\n",
            TOKEN_SECRET, TOKEN_SECRET);
    fclose(fp);
    snprintf(envreg, sizeof(envreg), "SAGAD_WORKER_REGISTRY=%s", bad_reg);
    snprintf(envdsn, sizeof(envdsn), "SAGAD_PG_DSN=%s", T.dsn); /* or it stops at the config */
    rc = sgt_run("sagad-worker", check, env2, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert(strstr(out, "pay ") && strstr(err, "1 tools, ok"), "the registry was read: %s%s", out,
              err);
    cr_assert(!strstr(out, TOKEN_SECRET) && !strstr(err, TOKEN_SECRET), "token in: %s%s", out, err);
    free(out);
    free(err);
    unlink(bad_reg);
    cr_assert_eq(sgt_run("sagad-worker", print, T.wenv, &out, &err), 0, "%s", err);
    cr_assert(strstr(out, "kafka.sasl.password = ****") != NULL, "%s", out);
    for (size_t i = 0; i < 4; i++)
        cr_assert(!strstr(out, secrets[i]), "%s in --print-config: %s", secrets[i], out);
    free(out);
    free(err);

    wlog = slurp(T.worker.log);
    rlog = slurp(T.relay.log);
    cr_assert(strstr(wlog, "\"level\":\"debug\"") != NULL, "no debug line after SIGHUP");
    for (size_t i = 0; i < 4; i++) {
        cr_assert(!strstr(wlog, secrets[i]), "%s in the worker's log:\n%s", secrets[i], wlog);
        cr_assert(!strstr(rlog, secrets[i]), "%s in the relay's log:\n%s", secrets[i], rlog);
    }
    free(wlog);
    free(rlog);
}

/* Intake full is not a reason to pause: a busy worker whose slots keep
 * freeing goes on taking messages (a pause drops librdkafka's prefetch and
 * the refetch is slow); only a worker with every slot stuck for 2 s
 * pauses, and it resumes when a slot frees. */
Test(ops, a_busy_worker_never_pauses_a_stuck_one_does_and_resumes)
{
    static const char busy[] = "[{\"name\": \"a\", \"tool\": \"sleep\", \"args\": {\"ms\": 200}},"
                               " {\"name\": \"b\", \"tool\": \"sleep\", \"args\": {\"ms\": 200}},"
                               " {\"name\": \"c\", \"tool\": \"sleep\", \"args\": {\"ms\": 200}}]";
    static const char stuck[] =
        "[{\"name\": \"a\", \"tool\": \"sleep\", \"args\": {\"ms\": 4000}}]";
    sgt_prom_t w;
    int wport, rport;
    char id[32];
    double t0;

    env_add(true, false, "SAGAD_WORKER_MAX_IN_FLIGHT=2");
    /* Without chaining every call holds a slot from its message on: with
     * it, a chained call holds none until its own message comes back
     * (worker_cmdq.c, loop_active_add), so how full intake is would depend on
     * the relay's pace. */
    env_add(true, false, "SAGAD_WORKER_CHAIN=false");
    start_both(&wport, &rport);
    free(get_until(wport, "/readyz", 200));

    /* 20 sagas of three 200 ms calls through 2 slots: intake is full for
     * about 6 s, but a slot frees every 100 ms or so. */
    t0 = sgt_now_s();
    submit_n("busy", 20, busy);
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof(id), "busy-%d", i);
        wait_saga(id, "completed");
    }
    cr_assert_gt(sgt_now_s() - t0, 5.0, "intake was full for longer than the 2 s pause delay");
    scrape(wport, &w);
    cr_expect_eq(sgt_prom_get(&w, "sagad_intake_pauses_total", "", -1), 0,
                 "a busy worker paused its partitions");
    sgt_prom_free(&w);

    /* Both slots held by 4 s calls, then a third saga queued behind them. */
    submit("stuck-1", stuck);
    submit("stuck-2", stuck);
    t0 = sgt_now_s();
    while (sgt_query_intf(T.pg, "SELECT count(*) FROM attempts WHERE saga_id LIKE 'stuck-%%' AND "
                                "finished_at IS NULL") != 2) {
        cr_assert_lt(sgt_now_s() - t0, WAIT_S, "both 4 s calls started");
        usleep(20000);
    }
    submit("after", "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    wait_saga("after", "completed");
    scrape(wport, &w);
    cr_expect_eq(sgt_prom_get(&w, "sagad_intake_pauses_total", "", -1), 1,
                 "a worker with every slot stuck for 2 s pauses once");
    sgt_prom_free(&w);
    wait_saga("stuck-1", "completed");
    wait_saga("stuck-2", "completed");
}

/* worker.intake_max_bytes at its least (1 MiB), and a saga.start of
 * 900 KB whose charge (its size, and its size again while parsed) is
 * larger than the whole budget: it is taken alone, not waited on for
 * ever, the small sagas around it complete too, and once all is done
 * every byte counted is given back (sagad_intake_bytes_held is 0). */
Test(ops, a_message_larger_than_the_intake_budget_is_taken_alone_and_counted_back)
{
    const size_t pad = 900 * 1024;
    char *big = malloc(pad + 512), errstr[256], id[32];
    const char *props[] = {"bootstrap.servers", sgt_kafka(), "message.max.bytes", "2000000", NULL};
    sg_kafka_t *k = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    double t0, held = -1;
    sgt_prom_t w;
    int wport, rport, len;
    sg_err_t err;

    cr_assert_not_null(big);
    cr_assert_not_null(k, "%s", errstr);
    env_add(true, false, "SAGAD_WORKER_INTAKE_MAX_BYTES=1048576");
    start_both(&wport, &rport);
    free(get_until(wport, "/readyz", 200));

    submit_n("ib-before", 3, "[{\"name\": \"a\", \"tool\": \"noop\"}]");
    len = snprintf(big, pad + 512,
                   "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-ib-big\", \"saga_id\": "
                   "\"ib-big\", \"name\": \"ops\", \"steps\": [{\"name\": \"a\", \"tool\": "
                   "\"noop\"}], \"input\": {\"blob\": \"");
    memset(big + len, 'x', pad);
    len += (int)pad;
    len += snprintf(big + len, 16, "\"}}");
    cr_assert_eq(
        sg_kafka_produce(k, T.topic_cmd, "ib-big", 6, big, (size_t)len, NULL, 0, NULL, &err), 0,
        "%s", err.message);
    cr_assert_eq(sg_kafka_flush(k, 30000, &err), 0, "%s", err.message);
    sg_kafka_destroy(k);
    free(big);
    submit_n("ib-after", 3, "[{\"name\": \"a\", \"tool\": \"noop\"}]");

    wait_saga("ib-big", "completed");
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof(id), "ib-before-%d", i);
        wait_saga(id, "completed");
        snprintf(id, sizeof(id), "ib-after-%d", i);
        wait_saga(id, "completed");
    }
    /* The gauge is set once a second. */
    for (t0 = sgt_now_s(); sgt_now_s() - t0 < 10 && held != 0; usleep(200000)) {
        scrape(wport, &w);
        held = sgt_prom_get(&w, "sagad_intake_bytes_held", "", -1);
        sgt_prom_free(&w);
    }
    cr_expect_eq(held, 0, "every byte counted against the budget is given back, %.0f left", held);
}
