/* make bench: sagad-gateway, the HTTP front door (issue 37), beside the
 * raw floors of the same machine.
 *
 * One sagad-gateway in front of the benchmark's PostgreSQL and Kafka, as
 * production runs it: PostgreSQL as sagad_operator, a users file with one
 * admin token, the delegate key (gateway.key) so that every submission is
 * signed, log level warn, the rate limit out of the way.  No worker.
 *   1. Submissions: POST /v1/sagas (a saga.start of 3 builtin steps) from
 *      CLIENTS threads, each with one keep-alive connection (a libcurl
 *      easy handle), for SUBMIT_SECS after a second of warm-up: rate,
 *      p50/p99 of a POST, the gateway's CPU.  Floors: the same messages
 *      through a pipelined producer (bench_produce: Kafka's ceiling here);
 *      the same messages each awaited, CLIENTS at a time through one
 *      producer (the gateway's produce path without HTTP, PostgreSQL or
 *      the signature); GET /healthz from the same clients (the HTTP
 *      server's ceiling).
 *   2. Reads: GET /v1/sagas/{id} of random sagas among SAGAS (3 steps
 *      each, bulk-inserted; the fill is timed), from READERS threads for
 *      READ_SECS: p50/p99.  Floor: the gateway's envelope query through
 *      libpq from as many sessions as the gateway's pool holds
 *      (gateway.pg_pool), unprepared as the gateway runs it, and prepared.
 *   3. Long-poll wake-ups: WAITERS clients wait on /v1/sagas/{id}/wait of
 *      running sagas; the benchmark ends them one at a time as the worker
 *      ends a saga (UPDATE, COMMIT, then pg_notify('sagad_outbox', '') in
 *      a transaction of its own, schemas/sql/0009_notify_after_commit.sql)
 *      and measures from its COMMIT to the answer; then the same while
 *      other commits notify NOISE times a second, as a busy worker's do.
 *      Floor: a LISTEN/NOTIFY round trip between two libpq sessions.
 *   4. The console's Now page over the same SAGAS: GET /v1/summary from one
 *      client, one request after the other, for SUMMARY_SECS: p50/p99.
 *      Floor: the summary statement alone, prepared as the gateway runs
 *      it, in a libpq loop.
 * Prints a table and writes bench/results/gateway.json.  Not a test:
 * nothing here passes or fails on speed. */
#define _GNU_SOURCE /* memmem */
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_json.h"
#include "bench_util.h"

#define PARTITIONS 6 /* topic.commands, as deploy/k8s's example has it */
#define PIPELINED  200000
#define WARM_S     1.0
#define SETTLE_S   0.2 /* a long poll this old is parked in the gateway */

/* The envelope query of GET /v1/sagas/{id} and of every look of a long
 * poll, copied from gateway/gw_sagas.c (envelope_sql): the floor of the
 * reads.  envelope_drifted() tells when the gateway's differs. */
static const char envelope_sql[] =
    "SELECT jsonb_build_object("
    " 'saga_id', s.saga_id, 'name', s.name,"
    " 'status', CASE"
    "   WHEN s.status = 'completed' THEN CASE WHEN EXISTS (SELECT 1 FROM steps st"
    "     WHERE st.saga_id = s.saga_id AND st.grp_policy = 'best_effort'"
    "     AND st.status NOT IN ('succeeded', 'skipped')) THEN 'partial' ELSE 'ok' END"
    "   WHEN s.status = 'cancelled' THEN 'cancelled'"
    "   WHEN s.status IN ('compensated', 'failed') THEN CASE WHEN EXISTS (SELECT 1 FROM steps st"
    "     WHERE st.saga_id = s.saga_id AND st.error_code = 'runtime.deadline_exceeded')"
    "     THEN 'timeout' ELSE 'error' END"
    "   WHEN EXISTS (SELECT 1 FROM steps st WHERE st.saga_id = s.saga_id"
    "     AND st.status = 'awaiting_approval') THEN 'awaiting_approval'"
    "   ELSE 'running' END,"
    " 'saga_status', s.status, 'generation', s.generation, 'seq', s.seq,"
    " 'created_at', s.created_at, 'updated_at', s.updated_at,"
    " 'submitted_by', s.submitted_by, 'output', s.output,"
    " 'steps', COALESCE((SELECT jsonb_agg(jsonb_build_object('step', st.idx, 'name', st.name,"
    "   'tool', st.tool, 'status', st.status, 'attempts', st.attempts,"
    "   'error_code', st.error_code, 'agent_action', st.agent_action, 'group', st.grp,"
    "   'approval', st.approval, 'result', st.result) ORDER BY st.idx)"
    "   FROM steps st WHERE st.saga_id = s.saga_id), '[]'::jsonb),"
    " 'run_health', (SELECT jsonb_build_object('steps_total', count(*),"
    "   'ok', count(*) FILTER (WHERE st.status = 'succeeded'),"
    "   'failed', count(*) FILTER (WHERE st.status IN ('failed', 'compensation_failed')"
    "     AND st.grp_policy IS DISTINCT FROM 'best_effort'),"
    "   'compensated', count(*) FILTER (WHERE st.status = 'compensated'),"
    "   'skipped', count(*) FILTER (WHERE st.status = 'skipped'),"
    "   'unknown', count(*) FILTER (WHERE st.status = 'unknown'),"
    "   'awaiting_approval', count(*) FILTER (WHERE st.status = 'awaiting_approval'),"
    "   'blocking_failure', (SELECT jsonb_build_object('step', b.idx, 'step_name', b.name,"
    "     'status', b.status, 'error_code', b.error_code, 'agent_action', b.agent_action)"
    "     FROM steps b WHERE b.saga_id = s.saga_id"
    "     AND b.status IN ('failed', 'unknown', 'compensation_failed')"
    "     AND b.grp_policy IS DISTINCT FROM 'best_effort' AND b.error_code IS NOT NULL"
    "     ORDER BY b.status = 'compensation_failed' DESC, b.idx LIMIT 1))"
    "   FROM steps st WHERE st.saga_id = s.saga_id))::text,"
    " s.submitted_by, s.seq, s.version, s.status "
    "FROM sagas s WHERE s.saga_id = $1";

/* The statement of GET /v1/summary, copied from gateway/gw_ops.c
 * (summary_sql, HEALTH_FRESH written out): the Now page's floor;
 * sql_drifted() tells when the gateway's differs. */
static const char summary_sql[] =
    "SELECT (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb) FROM "
    "         (SELECT status, count(*) AS n FROM sagas GROUP BY status) c)::text, "
    " (SELECT count(*) FROM sagas WHERE status IN ('running', 'compensating', 'cancelling') "
    "   AND updated_at < now() - $1::bigint * interval '1 ms'), "
    " (SELECT count(DISTINCT w.saga_id) FROM steps_waiting w JOIN steps st "
    "   ON st.saga_id = w.saga_id AND st.idx = w.idx WHERE st.status = 'awaiting_approval'), "
    " (SELECT count(*) FROM dead_letters WHERE status = 'pending'), "
    " (SELECT count(*) FROM dead_letters WHERE status = 'pending' "
    "   AND created_at > now() - interval '1 hour'), "
    " to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
    " (SELECT coalesce(jsonb_agg(jsonb_build_object('group', c.group_id, 'topic', c.topic, "
    "   'partition', c.partition, 'owner', c.owner, 'next_offset', c.next_offset, "
    "   'idle_s', round(extract(epoch FROM now() - c.updated_at)::numeric, 1), "
    "   'lag', l.lag, 'high_watermark', l.high_watermark, "
    "   'lag_age_s', round(extract(epoch FROM now() - l.measured_at)::numeric, 1)) "
    "   ORDER BY c.group_id, c.topic, c.partition), '[]'::jsonb) "
    "  FROM consumer_offsets c LEFT JOIN partition_lag l ON l.group_id = c.group_id "
    "   AND l.topic = c.topic AND l.partition = c.partition AND l.owner_epoch = c.owner_epoch "
    "   AND l.measured_at > now() - interval '30 seconds')::text, "
    " (SELECT count(DISTINCT tool) FROM tool_breakers WHERE state <> 'closed' "
    "   AND seen_at > now() - interval '30 seconds')";

/* Knobs (SAGAD_BENCH_GW_*), read once in main. */
static bool do_submit = true, do_read = true, do_wake = true, do_summary = true;
static int summary_secs = 10;
static int clients = 64, submit_secs = 15, sagas = 1000000, readers = 8, read_secs = 10,
           waiters = 32, wakes = 320, noise = 200, pg_pool = 4;

static char dsn[512], op_dsn[512], cmd_topic[128], int_topic[128], ev_topic[128], dlq_topic[128];
static char dir[64], regpath[128], users_path[128], key_path[128], base[64];
static char token[64], auth_header[128];
static pid_t gw_pid;
static long gw_peak_kb; /* its VmHWM, read before it stops */

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);

    return v && atoi(v) > 0 ? atoi(v) : def;
}

/* A clock for intervals (now_s is the wall clock). */
static double mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts;

    if (s <= 0)
        return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

/* CPU seconds (user + system, all threads) process pid has used. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[2048], *p;
    unsigned long long ut = 0, st = 0;
    FILE *fp;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(fp = fopen(path, "r")))
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    /* Fields 14 and 15, counted after the ")" that ends field 2. */
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: the ids to read, not a secret */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* ---- latency samples -------------------------------------------------------- */

typedef struct samples_s {
    double *v; /* ms */
    size_t n, cap;
} samples_t;

static void samples_add(samples_t *s, double ms)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4096;
        if (!(s->v = realloc(s->v, s->cap * sizeof(*s->v))))
            die("samples", "out of memory");
    }
    s->v[s->n++] = ms;
}

static void samples_merge(samples_t *into, const samples_t *from)
{
    for (size_t i = 0; i < from->n; i++)
        samples_add(into, from->v[i]);
}

/* The q-quantile (sorts the samples); -1 when there are none. */
static double samples_q(samples_t *s, double q)
{
    size_t i;

    if (s->n == 0)
        return -1;
    qsort(s->v, s->n, sizeof(*s->v), cmp_double);
    i = (size_t)(q * (double)s->n);
    return s->v[i < s->n ? i : s->n - 1];
}

/* ---- HTTP clients: one keep-alive connection each ---------------------------- */

typedef struct client_s {
    CURL *curl;
    struct curl_slist *get_hdrs, *post_hdrs;
    char *body;
    size_t len, cap;
    long connects; /* new connections made (keep-alive: one) */
} client_t;

static size_t on_body(char *p, size_t size, size_t n, void *opaque)
{
    client_t *c = opaque;
    size_t len = size * n;

    if (c->len + len + 1 > c->cap) {
        c->cap = 2 * (c->len + len + 1);
        if (!(c->body = realloc(c->body, c->cap)))
            return 0;
    }
    memcpy(c->body + c->len, p, len);
    c->len += len;
    c->body[c->len] = '\0';
    return len;
}

static void *client_new(int idx)
{
    client_t *c = calloc(1, sizeof(*c));

    (void)idx;
    if (!c || !(c->curl = curl_easy_init()))
        die("curl", "curl_easy_init failed");
    c->get_hdrs = curl_slist_append(NULL, auth_header);
    c->post_hdrs = curl_slist_append(NULL, auth_header);
    c->post_hdrs = curl_slist_append(c->post_hdrs, "Content-Type: application/json");
    c->post_hdrs = curl_slist_append(c->post_hdrs, "Expect:");
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
    return c;
}

static void client_free(void *opaque)
{
    client_t *c = opaque;

    curl_slist_free_all(c->get_hdrs);
    curl_slist_free_all(c->post_hdrs);
    curl_easy_cleanup(c->curl);
    free(c->body);
    free(c);
}

/* GET path, or POST body when given; the status, -1 when no answer. */
static long http(client_t *c, const char *path, const char *body, size_t len)
{
    char url[300];
    long status = -1, connects = 0;

    snprintf(url, sizeof(url), "%s%s", base, path);
    c->len = 0;
    if (c->body)
        c->body[0] = '\0';
    curl_easy_setopt(c->curl, CURLOPT_URL, url);
    if (body) {
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->post_hdrs);
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE, (long)len);
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body);
    } else {
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->get_hdrs);
        curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
    }
    if (curl_easy_perform(c->curl) != CURLE_OK)
        return -1;
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c->curl, CURLINFO_NUM_CONNECTS, &connects);
    c->connects += connects;
    return status;
}

/* ---- a bounded load from many threads ------------------------------------------ */

typedef struct load_s load_t;

typedef struct runner_s {
    load_t *ld;
    int idx;
    uint64_t rng, n;
    void *ctx; /* the thread's client or session */
    samples_t lat;
    long ok, bad, done;
    pthread_t th;
} runner_t;

/* One operation: true when answered as expected (else why says what came). */
typedef bool (*op_fn)(runner_t *r, char *why, size_t why_size);

struct load_s {
    const char *what;
    int threads;
    void *(*ctx_new)(int idx);
    void (*ctx_free)(void *ctx);
    op_fn op;
    pthread_barrier_t ready, go;
    double begin, end; /* mono_s: the measured window, after WARM_S */
    pthread_mutex_t mu;
    char first_bad[300];
};

/* What a load measured. */
typedef struct result_s {
    double rate, p50, p99, gw_cpu_pct, self_cpu_pct;
    long ok, bad, done, connects;
    bench_cpu_t c0, c1;
    char first_bad[300];
} result_t;

static void *runner_main(void *arg)
{
    runner_t *r = arg;
    load_t *ld = r->ld;

    r->ctx = ld->ctx_new ? ld->ctx_new(r->idx) : NULL;
    pthread_barrier_wait(&ld->ready);
    pthread_barrier_wait(&ld->go);
    for (;;) {
        char why[300] = "";
        double t0 = mono_s(), t1;
        bool good;
        if (t0 >= ld->end)
            break;
        good = ld->op(r, why, sizeof(why));
        t1 = mono_s();
        r->done += good;
        if (t0 < ld->begin)
            continue; /* warm-up */
        if (good) {
            samples_add(&r->lat, (t1 - t0) * 1000.0);
            r->ok++;
        } else {
            pthread_mutex_lock(&ld->mu);
            if (!ld->first_bad[0])
                snprintf(ld->first_bad, sizeof(ld->first_bad), "%s", why);
            pthread_mutex_unlock(&ld->mu);
            r->bad++;
        }
    }
    return NULL;
}

/* Runs op from threads for WARM_S, then secs measured. */
static void load_run(load_t *ld, double secs, result_t *res)
{
    runner_t *r = calloc((size_t)ld->threads, sizeof(*r));
    samples_t all = {0};
    double g0, s0;

    memset(res, 0, sizeof(*res));
    fprintf(stderr, "bench-gateway: %s (%d threads, %.0f s)...\n", ld->what, ld->threads, secs);
    pthread_mutex_init(&ld->mu, NULL);
    pthread_barrier_init(&ld->ready, NULL, (unsigned)ld->threads + 1);
    pthread_barrier_init(&ld->go, NULL, (unsigned)ld->threads + 1);
    ld->first_bad[0] = '\0';
    for (int i = 0; i < ld->threads; i++) {
        r[i].ld = ld;
        r[i].idx = i;
        r[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) ^ (uint64_t)getpid();
        if (pthread_create(&r[i].th, NULL, runner_main, &r[i]) != 0)
            die("pthread_create", ld->what);
    }
    pthread_barrier_wait(&ld->ready); /* every thread connected */
    ld->begin = mono_s() + WARM_S;
    ld->end = ld->begin + secs;
    pthread_barrier_wait(&ld->go);
    sleep_s(ld->begin - mono_s());
    g0 = gw_pid > 0 ? proc_cpu_s(gw_pid) : 0;
    s0 = proc_cpu_s(getpid());
    bench_cpu(&res->c0);
    sleep_s(ld->end - mono_s());
    bench_cpu(&res->c1);
    res->gw_cpu_pct = gw_pid > 0 ? 100.0 * (proc_cpu_s(gw_pid) - g0) / secs : 0;
    res->self_cpu_pct = 100.0 * (proc_cpu_s(getpid()) - s0) / secs;
    for (int i = 0; i < ld->threads; i++) {
        pthread_join(r[i].th, NULL);
        samples_merge(&all, &r[i].lat);
        res->ok += r[i].ok;
        res->bad += r[i].bad;
        res->done += r[i].done;
        if (ld->ctx_new == client_new)
            res->connects += ((client_t *)r[i].ctx)->connects;
        if (ld->ctx_free)
            ld->ctx_free(r[i].ctx);
        free(r[i].lat.v);
    }
    res->rate = (double)res->ok / secs;
    res->p50 = samples_q(&all, 0.50);
    res->p99 = samples_q(&all, 0.99);
    snprintf(res->first_bad, sizeof(res->first_bad), "%s", ld->first_bad);
    free(all.v);
    free(r);
    pthread_barrier_destroy(&ld->ready);
    pthread_barrier_destroy(&ld->go);
    pthread_mutex_destroy(&ld->mu);
}

/* ---- the world: files, topics, the gateway ------------------------------------- */

/* A saga.start of 3 builtin steps; with_id: the message id too (the
 * gateway makes one when it is left out). */
static int saga_json(char *out, size_t size, const char *saga_id, bool with_id)
{
    char id[96] = "";

    if (with_id)
        snprintf(id, sizeof(id), "\"id\":\"sub-%s\",", saga_id);
    return snprintf(out, size,
                    "{\"v\":1,\"type\":\"saga.start\",%s\"saga_id\":\"%s\",\"name\":\"checkout\","
                    "\"input\":{\"order\":\"%s\"},\"steps\":["
                    "{\"name\":\"reserve\",\"tool\":\"noop.reserve\",\"args\":{\"sku\":\"B7\","
                    "\"qty\":1}},"
                    "{\"name\":\"charge\",\"tool\":\"noop.charge\",\"args\":{\"amount_cents\":"
                    "1999,\"currency\":\"EUR\"}},"
                    "{\"name\":\"ship\",\"tool\":\"noop.ship\",\"args\":{\"carrier\":\"dhl\"}}]}",
                    id, saga_id, saga_id);
}

static int floor_json(char *out, size_t size, const char *saga_id)
{
    return saga_json(out, size, saga_id, true);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");

    if (!fp || fputs(text, fp) < 0 || fclose(fp) != 0)
        die("write", path);
}

/* Runs bin/prog args, its stdout into out (at most size - 1 bytes). */
static void run_capture(const char *prog, char *const *args, char *out, size_t size)
{
    char *const env[] = {NULL};
    size_t n = 0;
    ssize_t got;
    int fd, status;
    pid_t pid = bench_spawn_argv(prog, args, env, &fd);

    while (n + 1 < size && (got = read(fd, out + n, size - 1 - n)) > 0)
        n += (size_t)got;
    out[n] = '\0';
    close(fd);
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die(prog, "failed");
}

/* The tools, the users file (one admin token) and the delegate key. */
static void write_files(void)
{
    char *const token_args[] = {"token", "new", "--user", "bench", "--json", NULL};
    char *const key_args[] = {"keys", "new", "--principal", "gateway", "--out", key_path, NULL};
    char out[1024], users[512];
    sg_json_t *doc;
    const char *tok, *hash;

    snprintf(dir, sizeof(dir), "/tmp/sagad-bench-gw-XXXXXX");
    if (!mkdtemp(dir))
        die("mkdtemp", dir);
    snprintf(regpath, sizeof(regpath), "%s/tools.json", dir);
    snprintf(users_path, sizeof(users_path), "%s/users.json", dir);
    snprintf(key_path, sizeof(key_path), "%s/gateway.key", dir);
    write_file(regpath, "{\"v\":1,\"tools\":{"
                        "\"noop.reserve\":{\"adapter\":\"builtin\",\"target\":\"noop\","
                        "\"side_effect\":\"read\"},"
                        "\"noop.charge\":{\"adapter\":\"builtin\",\"target\":\"noop\","
                        "\"side_effect\":\"read\"},"
                        "\"noop.ship\":{\"adapter\":\"builtin\",\"target\":\"noop\","
                        "\"side_effect\":\"read\"}}}\n");
    run_capture("sagad-gateway", token_args, out, sizeof(out));
    doc = sg_json_parse(out, strlen(out), NULL, NULL);
    tok = sg_json_string(sg_json_member(doc, "token"));
    hash = sg_json_string(sg_json_member(doc, "hash"));
    if (!tok || !hash)
        die("sagad-gateway token new", out);
    snprintf(token, sizeof(token), "%s", tok);
    snprintf(auth_header, sizeof(auth_header), "Authorization: Bearer %s", token);
    snprintf(users, sizeof(users),
             "{\"v\": 1, \"users\": {\"bench\": {\"roles\": [\"admin\"], \"tokens\": [\"%s\"]}}}\n",
             hash);
    sg_json_destroy(doc);
    write_file(users_path, users);
    run_capture("sagactl", key_args, out, sizeof(out));
}

static void remove_files(void)
{
    unlink(regpath);
    unlink(users_path);
    unlink(key_path);
    rmdir(dir);
}

/* The gateway's DSN: sagad_operator's login (make bench's
 * SAGAD_TEST_PG_URL_OPERATOR) on the benchmark's database. */
static void make_op_dsn(void)
{
    const char *url = getenv("SAGAD_TEST_PG_URL_OPERATOR");
    const char *at = url ? strchr(url, '@') : NULL, *dat = strchr(dsn, '@');

    if (!at || !dat) {
        fprintf(stderr, "bench-gateway: no SAGAD_TEST_PG_URL_OPERATOR: the gateway connects as "
                        "the benchmark's owner role\n");
        snprintf(op_dsn, sizeof(op_dsn), "%s", dsn);
        return;
    }
    snprintf(op_dsn, sizeof(op_dsn), "%.*s%s", (int)(at - url), url, dat);
}

static void make_topics(void)
{
    sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
    sg_err_t err;

    snprintf(cmd_topic, sizeof(cmd_topic), "bench_gw_cmd_%d", (int)getpid());
    snprintf(int_topic, sizeof(int_topic), "bench_gw_int_%d", (int)getpid());
    snprintf(ev_topic, sizeof(ev_topic), "bench_gw_ev_%d", (int)getpid());
    snprintf(dlq_topic, sizeof(dlq_topic), "bench_gw_dlq_%d", (int)getpid());
    if (sg_kafka_create_topic(k, cmd_topic, PARTITIONS, 30000, &err) < 0 ||
        sg_kafka_create_topic(k, int_topic, PARTITIONS, 30000, &err) < 0 ||
        sg_kafka_create_topic(k, ev_topic, 1, 30000, &err) < 0 ||
        sg_kafka_create_topic(k, dlq_topic, 1, 30000, &err) < 0)
        die("create topic", err.message);
    sg_kafka_destroy(k);
}

/* Messages on topic.commands (the sum of the partitions' high marks). */
static int64_t topic_messages(void)
{
    sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
    int64_t sum = 0, lo, hi;

    for (int p = 0; p < PARTITIONS; p++) {
        if (sg_kafka_query_watermarks(k, cmd_topic, p, 10000, &lo, &hi) < 0) {
            sum = -1;
            break;
        }
        sum += hi;
    }
    sg_kafka_destroy(k);
    return sum;
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        die("free port", "cannot bind 127.0.0.1:0");
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The gateway on a free port, SAGAD_BENCH_ENV last (it wins); returns
 * once /readyz answers 200. */
static void start_gateway(void)
{
    static char e[16][600], extra[2048];
    static char *env[16 + 32 + 1];
    int n = 0, port = free_port(), status;
    client_t *c;

    snprintf(e[n++], sizeof(e[0]), "SAGAD_PG_DSN=%s", op_dsn);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", kafka);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_TOPIC_COMMANDS=%s", cmd_topic);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_TOPIC_INTERNAL=%s", int_topic);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_TOPIC_EVENTS=%s", ev_topic);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_TOPIC_DLQ=%s", dlq_topic);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_WORKER_REGISTRY=%s", regpath);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_GATEWAY_USERS=%s", users_path);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_GATEWAY_KEY=%s", key_path);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_GATEWAY_PORT=%d", port);
    snprintf(e[n++], sizeof(e[0]), "SAGAD_GATEWAY_RATE_PER_S=1000000");
    snprintf(e[n++], sizeof(e[0]), "SAGAD_GATEWAY_RATE_BURST=1000000");
    snprintf(e[n++], sizeof(e[0]), "SAGAD_LOG_LEVEL=warn");
    for (int i = 0; i < n; i++)
        env[i] = e[i];
    if (getenv("SAGAD_BENCH_ENV")) {
        snprintf(extra, sizeof(extra), "%s", getenv("SAGAD_BENCH_ENV"));
        for (char *t = strtok(extra, " "); t && n < 16 + 32; t = strtok(NULL, " ")) {
            env[n++] = t;
            if (strncmp(t, "SAGAD_GATEWAY_PG_POOL=", 22) == 0)
                pg_pool = atoi(t + 22);
        }
    }
    env[n] = NULL;
    snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
    gw_pid = bench_spawn("sagad-gateway", env);
    c = client_new(0);
    for (double until = mono_s() + 30; http(c, "/readyz", NULL, 0) != 200; sleep_s(0.1)) {
        if (waitpid(gw_pid, &status, WNOHANG) == gw_pid)
            die("sagad-gateway", "exited before it was ready (its log is above)");
        if (mono_s() > until)
            die("sagad-gateway", "not ready within 30 s");
    }
    client_free(c);
}

/* Is sql (a copy above) the one the gateway runs?  Looked for in the
 * binary: a copy that drifted measures another query. */
static bool sql_drifted(const char *sql, size_t len)
{
    char bin[600];
    struct stat st;
    char *buf;
    FILE *fp;
    bool found = false;

    snprintf(bin, sizeof(bin), "%s/sagad-gateway",
             getenv("SAGAD_BENCH_BIN_DIR") ? getenv("SAGAD_BENCH_BIN_DIR") : "bin");
    if (stat(bin, &st) < 0 || !(fp = fopen(bin, "rb")))
        return true;
    if ((buf = malloc((size_t)st.st_size)) &&
        fread(buf, 1, (size_t)st.st_size, fp) == (size_t)st.st_size)
        found = memmem(buf, (size_t)st.st_size, sql, len) != NULL;
    free(buf);
    fclose(fp);
    return !found;
}

/* ---- 1. submissions ------------------------------------------------------------- */

static bool op_submit(runner_t *r, char *why, size_t why_size)
{
    char id[64], json[1024];
    client_t *c = r->ctx;
    int len;
    long st;

    snprintf(id, sizeof(id), "s%d-%d-%llu", (int)getpid(), r->idx, (unsigned long long)r->n++);
    len = saga_json(json, sizeof(json), id, false);
    if ((st = http(c, "/v1/sagas", json, (size_t)len)) == 202)
        return true;
    snprintf(why, why_size, "POST /v1/sagas: %ld %.200s", st, c->body ? c->body : "");
    return false;
}

static bool op_healthz(runner_t *r, char *why, size_t why_size)
{
    long st = http(r->ctx, "/healthz", NULL, 0);

    if (st == 200)
        return true;
    snprintf(why, why_size, "GET /healthz: %ld", st);
    return false;
}

/* The awaited-produce floor: one producer shared by the threads, each
 * waiting for its own message's report under one lock, the reports
 * served by a thread woken by librdkafka's queue (as gateway/gw_produce.c
 * does it). */
static struct {
    sg_kafka_t *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pipe[2];
    volatile int stop;
    pthread_t th;
} kf;

static void *kf_serve(void *arg)
{
    (void)arg;
    while (!kf.stop) {
        struct pollfd pfd = {kf.pipe[0], POLLIN, 0};
        char drain[64];
        if (poll(&pfd, 1, 100) > 0)
            while (read(kf.pipe[0], drain, sizeof(drain)) > 0)
                ;
        pthread_mutex_lock(&kf.mu);
        sg_kafka_poll(kf.k, 0);
        pthread_cond_broadcast(&kf.cv);
        pthread_mutex_unlock(&kf.mu);
    }
    return NULL;
}

static bool op_produce_awaited(runner_t *r, char *why, size_t why_size)
{
    sg_kafka_batch_t batch;
    char id[64], json[1024];
    sg_err_t err;
    int len;
    bool ok;

    memset(&batch, 0, sizeof(batch));
    snprintf(id, sizeof(id), "a%d-%d-%llu", (int)getpid(), r->idx, (unsigned long long)r->n++);
    len = saga_json(json, sizeof(json), id, true);
    pthread_mutex_lock(&kf.mu);
    if (sg_kafka_produce(kf.k, cmd_topic, id, strlen(id), json, (size_t)len, NULL, 0, &batch,
                         &err) < 0) {
        pthread_mutex_unlock(&kf.mu);
        snprintf(why, why_size, "produce: %s", err.message);
        return false;
    }
    while (batch.pending)
        pthread_cond_wait(&kf.cv, &kf.mu);
    ok = batch.failed == 0;
    pthread_mutex_unlock(&kf.mu);
    if (!ok)
        snprintf(why, why_size, "delivery: %s", batch.first_err.message);
    return ok;
}

/* The librdkafka properties SAGAD_BENCH_ENV gives the gateway
 * (SAGAD_KAFKA_LINGER_MS=1 is linger.ms, "__" an underscore), so that the
 * floor's producer is configured as the gateway's is: NULL-terminated
 * pairs into props (at most n - 1 entries). */
static void kafka_props(const char **props, size_t n)
{
    static char buf[2048];
    size_t k = 0;

    props[0] = NULL;
    if (!getenv("SAGAD_BENCH_ENV"))
        return;
    snprintf(buf, sizeof(buf), "%s", getenv("SAGAD_BENCH_ENV"));
    for (char *t = strtok(buf, " "); t && k + 2 < n; t = strtok(NULL, " ")) {
        char *eq = strchr(t, '='), *w = t;
        if (strncmp(t, "SAGAD_KAFKA_", 12) != 0 || !eq)
            continue;
        *eq = '\0';
        for (const char *r = t + 12; *r; r++) {
            if (r[0] == '_' && r[1] == '_')
                *w++ = '_', r++;
            else
                *w++ = *r == '_' ? '.' : (char)(*r >= 'A' && *r <= 'Z' ? *r - 'A' + 'a' : *r);
        }
        *w = '\0';
        props[k++] = t;
        props[k++] = eq + 1;
    }
    props[k] = NULL;
}

static void produce_awaited(result_t *res)
{
    load_t ld = {
        .what = "floor: Kafka, each message awaited", .threads = clients, .op = op_produce_awaited};
    const char *props[13];

    kafka_props(props, sizeof(props) / sizeof(props[0]));
    kf.k = kclient(SG_KAFKA_PRODUCER, props); /* as the gateway's: acks=all, idempotent */
    pthread_mutex_init(&kf.mu, NULL);
    pthread_cond_init(&kf.cv, NULL);
    if (pipe(kf.pipe) < 0 || fcntl(kf.pipe[0], F_SETFL, O_NONBLOCK) < 0 ||
        fcntl(kf.pipe[1], F_SETFL, O_NONBLOCK) < 0 || sg_kafka_wake_fd(kf.k, kf.pipe[1]) < 0 ||
        pthread_create(&kf.th, NULL, kf_serve, NULL) != 0)
        die("awaited floor", "cannot set up the report thread");
    load_run(&ld, 5, res);
    kf.stop = 1;
    pthread_join(kf.th, NULL);
    sg_kafka_destroy(kf.k);
    close(kf.pipe[0]);
    close(kf.pipe[1]);
    pthread_cond_destroy(&kf.cv);
    pthread_mutex_destroy(&kf.mu);
}

typedef struct submit_s {
    double pipelined_rate;
    int64_t expected, on_topic;
    result_t awaited, healthz, post;
} submit_t;

static void submissions(submit_t *s)
{
    load_t post = {.what = "POST /v1/sagas",
                   .threads = clients,
                   .ctx_new = client_new,
                   .ctx_free = client_free,
                   .op = op_submit};
    load_t hz = {.what = "floor: GET /healthz",
                 .threads = clients,
                 .ctx_new = client_new,
                 .ctx_free = client_free,
                 .op = op_healthz};
    double *sent = malloc(PIPELINED * sizeof(*sent)), t1;
    char prefix[32];

    fprintf(stderr, "bench-gateway: floor: %d saga.starts through a pipelined producer...\n",
            PIPELINED);
    snprintf(prefix, sizeof(prefix), "p%d", (int)getpid());
    bench_produce(cmd_topic, prefix, PIPELINED, 0, sent, floor_json);
    t1 = now_s();
    s->pipelined_rate = PIPELINED / (t1 - sent[0]);
    free(sent);
    produce_awaited(&s->awaited);
    load_run(&hz, 5, &s->healthz);
    load_run(&post, submit_secs, &s->post);
    s->expected = PIPELINED + s->awaited.done + s->post.done;
    s->on_topic = topic_messages();
}

/* ---- 2. reads over SAGAS sagas ------------------------------------------------------ */

/* Sagas g-0000001 ..: 1 in 25 running (step 0 done, 1 running, 2
 * pending), 1 in 50 compensated, 1 in 100 failed, the rest completed
 * with an output; 3 steps each with args, result and idempotency key.
 * Zero-padded ids keep each insert at the right edge of the indexes. */
static const char fill_sagas_sql[] =
    "INSERT INTO sagas (saga_id, name, status, definition, input, generation, seq, version, "
    " created_at, updated_at, output, submitted_by, origin) "
    "SELECT 'g-' || lpad(g::text, 7, '0'), 'checkout', "
    " CASE WHEN g % 25 = 0 THEN 'running' WHEN g % 50 = 1 THEN 'compensated' "
    "      WHEN g % 100 = 2 THEN 'failed' ELSE 'completed' END, "
    " '{\"name\": \"checkout\", \"steps\": [{\"name\": \"reserve\", \"tool\": \"noop.reserve\", "
    "   \"args\": {\"sku\": \"B7\", \"qty\": 1}}, {\"name\": \"charge\", \"tool\": "
    "   \"noop.charge\", \"args\": {\"amount_cents\": 1999, \"currency\": \"EUR\"}}, "
    "   {\"name\": \"ship\", \"tool\": \"noop.ship\", \"args\": {\"carrier\": \"dhl\"}}]}'::jsonb, "
    " jsonb_build_object('order', g), 1, 8, 9, "
    " now() - ($2::int - g) * interval '1 second', "
    " now() - ($2::int - g) * interval '1 second' + interval '1 second', "
    " CASE WHEN g % 25 <> 0 AND g % 50 <> 1 AND g % 100 <> 2 "
    "      THEN '{\"shipment\": \"s-1\"}'::jsonb END, 'bench', 'gateway' "
    "FROM generate_series($1::int, $2::int) g";

static const char fill_steps_sql[] =
    "INSERT INTO steps (saga_id, idx, name, tool, args, status, attempts, idempotency_key, "
    " result, error_code, agent_action, updated_at) "
    "SELECT 'g-' || lpad(g::text, 7, '0'), i, (ARRAY['reserve', 'charge', 'ship'])[i + 1], "
    " (ARRAY['noop.reserve', 'noop.charge', 'noop.ship'])[i + 1], "
    " '{\"sku\": \"B7\", \"qty\": 1}'::jsonb, "
    " CASE WHEN g % 25 = 0 THEN (ARRAY['succeeded', 'running', 'pending'])[i + 1] "
    "      WHEN g % 50 = 1 THEN (ARRAY['compensated', 'compensated', 'failed'])[i + 1] "
    "      WHEN g % 100 = 2 THEN (ARRAY['compensation_failed', 'compensation_failed', "
    "        'failed'])[i + 1] "
    "      ELSE 'succeeded' END, 1, "
    " 'g-' || lpad(g::text, 7, '0') || ':' || i || ':1', "
    " CASE WHEN g % 25 = 0 AND i > 0 THEN NULL ELSE '{\"ok\": true, \"ref\": \"r-1\"}'::jsonb "
    " END, "
    " CASE WHEN (g % 50 = 1 OR g % 100 = 2) AND i = 2 THEN 'tool.http.503' END, "
    " CASE WHEN (g % 50 = 1 OR g % 100 = 2) AND i = 2 "
    "      THEN 'The tool was unavailable; the saga was compensated.' END, now() "
    "FROM generate_series($1::int, $2::int) g, generate_series(0, 2) i";

typedef struct fill_part_s {
    int from, to;
    pthread_t th;
} fill_part_t;

/* Half of the ids, sagas then their steps, on a session of its own. */
static void *fill_main(void *arg)
{
    fill_part_t *f = arg;
    char from[16], to[16];
    const char *p[] = {from, to};
    sg_pg_t *pg = bench_connect(dsn);

    snprintf(from, sizeof(from), "%d", f->from);
    snprintf(to, sizeof(to), "%d", f->to);
    exec(pg, "SET synchronous_commit = off", 0, NULL);
    exec(pg, fill_sagas_sql, 2, p);
    exec(pg, fill_steps_sql, 2, p);
    sg_pg_destroy(pg);
    return NULL;
}

static void *vacuum_main(void *arg)
{
    sg_pg_t *pg = bench_connect(dsn);

    exec(pg, arg, 0, NULL);
    sg_pg_destroy(pg);
    return NULL;
}

/* The fill: two sessions (two cores) each inserting half, steps' foreign
 * key dropped meanwhile (one check per row, 3,000,000 of them) and added
 * again, validated in one join; VACUUM ANALYZE of both tables side by
 * side, so that neither autovacuum nor first reads setting hint bits run
 * during the measurements.  Its duration in seconds. */
static double fill(sg_pg_t *pg)
{
    fill_part_t part[2] = {{1, sagas / 2, 0}, {sagas / 2 + 1, sagas, 0}};
    pthread_t vac[2];
    double t0 = mono_s();

    fprintf(stderr, "bench-gateway: filling %d sagas and %d steps...\n", sagas, 3 * sagas);
    exec(pg, "ALTER TABLE steps DROP CONSTRAINT steps_saga_id_fkey", 0, NULL);
    for (int i = 0; i < 2; i++)
        if (pthread_create(&part[i].th, NULL, fill_main, &part[i]) != 0)
            die("fill", "pthread_create");
    for (int i = 0; i < 2; i++)
        pthread_join(part[i].th, NULL);
    fprintf(stderr, "bench-gateway: rows in %.1f s\n", mono_s() - t0);
    exec(pg,
         "ALTER TABLE steps ADD CONSTRAINT steps_saga_id_fkey FOREIGN KEY (saga_id) "
         "REFERENCES sagas ON DELETE CASCADE",
         0, NULL);
    fprintf(stderr, "bench-gateway: foreign key validated at %.1f s\n", mono_s() - t0);
    if (pthread_create(&vac[0], NULL, vacuum_main, "VACUUM ANALYZE sagas") != 0 ||
        pthread_create(&vac[1], NULL, vacuum_main, "VACUUM ANALYZE steps") != 0)
        die("vacuum", "pthread_create");
    pthread_join(vac[0], NULL);
    pthread_join(vac[1], NULL);
    return mono_s() - t0;
}

static void random_id(runner_t *r, char id[16])
{
    snprintf(id, 16, "g-%07d", (int)(rng_next(&r->rng) % (uint64_t)sagas) + 1);
}

static bool op_get(runner_t *r, char *why, size_t why_size)
{
    char id[16], path[64];
    long st;

    random_id(r, id);
    snprintf(path, sizeof(path), "/v1/sagas/%s", id);
    if ((st = http(r->ctx, path, NULL, 0)) == 200)
        return true;
    snprintf(why, why_size, "GET %s: %ld", path, st);
    return false;
}

static void *session_new(int idx)
{
    (void)idx;
    return bench_connect(dsn);
}

static void session_free(void *pg)
{
    sg_pg_destroy(pg);
}

static bool envelope(runner_t *r, bool prepared, char *why, size_t why_size)
{
    char id[16];
    const char *p[] = {id};
    sg_pg_res_t *res = NULL;
    sg_err_t err;
    int rc;

    random_id(r, id);
    rc = prepared ? sg_pg_exec_cached(r->ctx, envelope_sql, 1, p, &res, &err)
                  : sg_pg_exec(r->ctx, envelope_sql, 1, p, &res, &err);
    if (rc < 0 || sg_pg_res_rows(res) != 1) {
        snprintf(why, why_size, "envelope of %s: %s", id, rc < 0 ? err.message : "no row");
        sg_pg_res_destroy(res);
        return false;
    }
    sg_pg_res_destroy(res);
    return true;
}

static bool op_envelope(runner_t *r, char *why, size_t why_size)
{
    return envelope(r, false, why, why_size);
}

static bool op_envelope_prepared(runner_t *r, char *why, size_t why_size)
{
    return envelope(r, true, why, why_size);
}

typedef struct reads_s {
    double fill_s;
    result_t floor, prepared, get;
} reads_t;

static void reads(sg_pg_t *pg, reads_t *rd)
{
    load_t floor = {.what = "floor: the envelope query through libpq",
                    .threads = pg_pool,
                    .ctx_new = session_new,
                    .ctx_free = session_free,
                    .op = op_envelope};
    load_t prep = {.what = "floor: the envelope query, prepared",
                   .threads = pg_pool,
                   .ctx_new = session_new,
                   .ctx_free = session_free,
                   .op = op_envelope_prepared};
    load_t get = {.what = "GET /v1/sagas/{id}",
                  .threads = readers,
                  .ctx_new = client_new,
                  .ctx_free = client_free,
                  .op = op_get};

    (void)pg;
    load_run(&floor, read_secs, &rd->floor);
    load_run(&get, read_secs, &rd->get);
    load_run(&prep, read_secs, &rd->prepared);
}

/* ---- 3. long-poll wake-ups --------------------------------------------------------- */

/* Sample s waits on the (first + s)-th running saga: g = 25 (first + s + 1). */
typedef struct wake_s {
    int first, n;
    double *sent, *commit, *answer; /* mono_s; 0: not yet */
    bool *good;
    pthread_mutex_t mu;
    volatile int noise_stop;
    long noise_sent;
} wake_t;

typedef struct waiter_s {
    wake_t *w;
    int idx;
    pthread_t th;
} waiter_t;

static void wake_id(const wake_t *w, int s, char id[16])
{
    snprintf(id, 16, "g-%07d", 25 * (w->first + s + 1));
}

static double wake_get(wake_t *w, double *v, int s)
{
    double x;

    pthread_mutex_lock(&w->mu);
    x = v[s];
    pthread_mutex_unlock(&w->mu);
    return x;
}

static bool answer_ok(const client_t *c)
{
    sg_json_t *doc = c->body ? sg_json_parse(c->body, c->len, NULL, NULL) : NULL;
    const char *status = sg_json_string(sg_json_member(doc, "status"));
    bool timed_out = true, ok;
    sg_err_t err;

    if (sg_json_get_bool(doc, "$", "wait_timed_out", true, &timed_out, &err) < 0)
        timed_out = true;
    ok = status && strcmp(status, "ok") == 0 && !timed_out;
    sg_json_destroy(doc);
    return ok;
}

/* Waiter k waits on samples k, k + waiters, ... one after the other. */
static void *waiter_main(void *arg)
{
    waiter_t *wt = arg;
    wake_t *w = wt->w;
    client_t *c = client_new(wt->idx);

    for (int s = wt->idx; s < w->n; s += waiters) {
        char id[16], path[80];
        long st;
        double t;
        wake_id(w, s, id);
        snprintf(path, sizeof(path), "/v1/sagas/%s/wait?timeout=20s", id);
        pthread_mutex_lock(&w->mu);
        w->sent[s] = mono_s();
        pthread_mutex_unlock(&w->mu);
        st = http(c, path, NULL, 0);
        t = mono_s();
        pthread_mutex_lock(&w->mu);
        w->answer[s] = t;
        w->good[s] = st == 200 && answer_ok(c);
        pthread_mutex_unlock(&w->mu);
    }
    client_free(c);
    return NULL;
}

/* Other commits' notifications, noise a second, until told to stop. */
static void *noise_main(void *arg)
{
    wake_t *w = arg;
    sg_pg_t *pg = bench_connect(dsn);
    double t0 = mono_s();

    while (!w->noise_stop) {
        exec(pg, "SELECT pg_notify('sagad_outbox', '')", 0, NULL);
        w->noise_sent++;
        sleep_s(t0 + (double)w->noise_sent / noise - mono_s());
    }
    sg_pg_destroy(pg);
    return NULL;
}

/* Ends saga id as a worker does: its rows in one transaction, then the
 * notification after the COMMIT in a transaction of its own.  The time of
 * the COMMIT's answer. */
static double end_saga(sg_pg_t *pg, const char *id)
{
    const char *p[] = {id};
    sg_err_t err;
    double t;

    if (sg_pg_begin(pg, &err) < 0)
        die("begin", err.message);
    exec(pg,
         "UPDATE steps SET status = 'succeeded', result = '{\"ok\": true}', updated_at = now() "
         "WHERE saga_id = $1 AND status <> 'succeeded'",
         1, p);
    exec(pg,
         "UPDATE sagas SET status = 'completed', seq = seq + 2, version = version + 1, "
         "output = '{\"shipment\": \"s-1\"}', updated_at = now() WHERE saga_id = $1",
         1, p);
    if (sg_pg_commit(pg, &err) < 0)
        die("commit", err.message);
    t = mono_s();
    exec(pg, "SELECT pg_notify('sagad_outbox', '')", 0, NULL);
    return t;
}

typedef struct wake_result_s {
    samples_t lat;
    int bad, late, early; /* not ok; asked after the settle time; answered before the COMMIT's
                             answer came */
    double gw_cpu_pct, p50, p99;
    long noise_sent;
} wake_result_t;

static void wake_run(sg_pg_t *pg, int first, bool with_noise, wake_result_t *res)
{
    wake_t w = {.first = first, .n = wakes};
    waiter_t *wt = calloc((size_t)waiters, sizeof(*wt));
    pthread_t noise_th;
    double t0, g0;

    memset(res, 0, sizeof(*res));
    fprintf(stderr, "bench-gateway: %d wake-ups, %d long polls waiting%s...\n", wakes, waiters,
            with_noise ? ", other commits notifying" : "");
    w.sent = calloc((size_t)wakes, sizeof(double));
    w.commit = calloc((size_t)wakes, sizeof(double));
    w.answer = calloc((size_t)wakes, sizeof(double));
    w.good = calloc((size_t)wakes, sizeof(bool));
    pthread_mutex_init(&w.mu, NULL);
    if (with_noise && pthread_create(&noise_th, NULL, noise_main, &w) != 0)
        die("noise", "pthread_create");
    for (int i = 0; i < waiters; i++) {
        wt[i].w = &w;
        wt[i].idx = i;
        if (pthread_create(&wt[i].th, NULL, waiter_main, &wt[i]) != 0)
            die("waiter", "pthread_create");
    }
    t0 = mono_s();
    g0 = proc_cpu_s(gw_pid);
    for (int s = 0; s < wakes; s++) {
        char id[16];
        double sent, until;
        /* Its long poll asked, and parked in the gateway. */
        while ((sent = wake_get(&w, w.sent, s)) == 0 || mono_s() - sent < SETTLE_S)
            sleep_s(0.001);
        wake_id(&w, s, id);
        w.commit[s] = end_saga(pg, id);
        for (until = w.commit[s] + 5; wake_get(&w, w.answer, s) == 0 && mono_s() < until;)
            sleep_s(0.0002);
    }
    for (int i = 0; i < waiters; i++)
        pthread_join(wt[i].th, NULL);
    res->gw_cpu_pct = 100.0 * (proc_cpu_s(gw_pid) - g0) / (mono_s() - t0);
    if (with_noise) {
        w.noise_stop = 1;
        pthread_join(noise_th, NULL);
        res->noise_sent = w.noise_sent;
    }
    for (int s = 0; s < wakes; s++) {
        /* An answer that never came counts as infinitely late.  One may
         * come before the COMMIT's own answer reached the benchmark: a
         * look woken by the previous notification, queued behind the
         * others for a pooled session, read the row just committed. */
        double ms = w.answer[s] > w.commit[s] ? (w.answer[s] - w.commit[s]) * 1000.0 : 0;
        samples_add(&res->lat, w.good[s] && w.answer[s] > 0 ? ms : 1e9);
        res->early += w.good[s] && w.answer[s] > 0 && w.answer[s] <= w.commit[s];
        res->bad += !w.good[s];
        res->late += w.sent[s] > w.commit[s] - SETTLE_S;
    }
    res->p50 = samples_q(&res->lat, 0.50);
    res->p99 = samples_q(&res->lat, 0.99);
    pthread_mutex_destroy(&w.mu);
    free(w.sent);
    free(w.commit);
    free(w.answer);
    free(w.good);
    free(wt);
}

/* The floor: LISTEN on one session, pg_notify on another, from before the
 * notifying statement to the notification read. */
static struct {
    pthread_mutex_t mu;
    long got;
    double at;
    volatile int stop, ready;
} lf;

static void *listen_main(void *arg)
{
    sg_pg_t *pg = bench_connect(dsn);
    sg_err_t err;

    if (sg_pg_listen(pg, arg, &err) < 0)
        die("LISTEN", err.message);
    lf.ready = 1;
    while (!lf.stop) {
        int rc = sg_pg_wait_notify(pg, 100, NULL, NULL, &err);
        double t = mono_s();
        if (rc < 0)
            die("wait notify", err.message);
        if (rc > 0) {
            pthread_mutex_lock(&lf.mu);
            lf.got++;
            lf.at = t;
            pthread_mutex_unlock(&lf.mu);
        }
    }
    sg_pg_destroy(pg);
    return NULL;
}

static void notify_floor(sg_pg_t *pg, wake_result_t *res)
{
    char chan[64], sql[128];
    pthread_t th;

    memset(res, 0, sizeof(*res));
    snprintf(chan, sizeof(chan), "sagad_bench_floor_%d", (int)getpid());
    snprintf(sql, sizeof(sql), "SELECT pg_notify('%s', '')", chan);
    pthread_mutex_init(&lf.mu, NULL);
    if (pthread_create(&th, NULL, listen_main, chan) != 0)
        die("listen", "pthread_create");
    while (!lf.ready)
        sleep_s(0.01);
    for (int s = 0; s < wakes; s++) {
        long before;
        double t0, until, at = 0;
        pthread_mutex_lock(&lf.mu);
        before = lf.got;
        pthread_mutex_unlock(&lf.mu);
        t0 = mono_s();
        exec(pg, sql, 0, NULL);
        for (until = t0 + 5; mono_s() < until; sleep_s(0.0002)) {
            pthread_mutex_lock(&lf.mu);
            at = lf.got > before ? lf.at : 0;
            pthread_mutex_unlock(&lf.mu);
            if (at)
                break;
        }
        samples_add(&res->lat, at ? (at - t0) * 1000.0 : 1e9);
        sleep_s(0.002);
    }
    lf.stop = 1;
    pthread_join(th, NULL);
    pthread_mutex_destroy(&lf.mu);
    res->p50 = samples_q(&res->lat, 0.50);
    res->p99 = samples_q(&res->lat, 0.99);
}

typedef struct wakeups_s {
    wake_result_t floor, quiet, busy;
} wakeups_t;

static void wakeups(sg_pg_t *pg, wakeups_t *wk)
{
    fprintf(stderr, "bench-gateway: floor: %d LISTEN/NOTIFY round trips...\n", wakes);
    notify_floor(pg, &wk->floor);
    wake_run(pg, 0, false, &wk->quiet);
    wake_run(pg, wakes, true, &wk->busy);
}

/* ---- the report ------------------------------------------------------------------------ */

static const char *met(bool yes)
{
    return yes ? "met" : "NOT met";
}

static void print_submissions(const submit_t *s)
{
    const result_t *p = &s->post;

    printf(" submissions: POST /v1/sagas, %d keep-alive clients, %d s; signed (gateway.key); "
           "%d partitions\n",
           clients, submit_secs, PARTITIONS);
    printf("  %-52s %9.0f msg/s\n", "floor: Kafka, pipelined producer (bench_produce)",
           s->pipelined_rate);
    printf("  %-52s %9.0f msg/s  p50 %.2f ms, p99 %.2f ms\n",
           "floor: Kafka, each message awaited, as many at once", s->awaited.rate, s->awaited.p50,
           s->awaited.p99);
    printf("  %-52s %9.0f req/s  p50 %.2f ms, p99 %.2f ms; gateway CPU %.0f%%\n",
           "floor: GET /healthz, the same clients", s->healthz.rate, s->healthz.p50, s->healthz.p99,
           s->healthz.gw_cpu_pct);
    printf("  %-52s %9.0f /s     (target >= 5,000: %s)\n", "POST /v1/sagas, 202 answers", p->rate,
           met(p->rate >= 5000));
    printf("  %-52s %9.2f ms / %.2f ms\n", "POST p50 / p99", p->p50, p->p99);
    printf("  %-52s %9.0f%% of a core, %.0f us per submission\n", "gateway CPU", p->gw_cpu_pct,
           p->ok ? p->gw_cpu_pct * 1e4 * submit_secs / (double)p->ok : 0);
    printf("  %-52s %9.0f%% of a core\n", "these clients' CPU (curl, 1 thread each)",
           p->self_cpu_pct);
    printf("  %-52s %9ld (first: %s)\n", "answers other than 202", p->bad,
           p->first_bad[0] ? p->first_bad : "-");
    printf("  %-52s %9lld of %lld produced or answered 202\n", "messages on topic.commands",
           (long long)s->on_topic, (long long)s->expected);
    printf("  %-52s %9ld for %d clients\n", "connections opened (keep-alive)", p->connects,
           clients);
    bench_print_cpu(52, "/healthz / POST", &s->healthz.c0, &s->healthz.c1, &p->c0, &p->c1);
}

static void print_reads(const reads_t *rd, bool drifted)
{
    printf(" reads: GET /v1/sagas/{id} of random sagas among %d (%d steps; filled in %.1f s), "
           "%d s each\n",
           sagas, 3 * sagas, rd->fill_s, read_secs);
    printf("  %-52s %9.2f ms / %.2f ms  (%.0f/s)\n", "floor: envelope query, libpq, p50 / p99",
           rd->floor.p50, rd->floor.p99, rd->floor.rate);
    printf("  %-52s %9.2f ms / %.2f ms  (%.0f/s)\n", "floor: the same, prepared, p50 / p99",
           rd->prepared.p50, rd->prepared.p99, rd->prepared.rate);
    printf("    (%d sessions: gateway.pg_pool%s)\n", pg_pool,
           drifted ? "; NOTE: the gateway's envelope query is not this copy" : "");
    printf("  %-52s %9.2f ms / %.2f ms  (%.0f/s; target p99 <= 10 ms: %s)\n", "GET, p50 / p99",
           rd->get.p50, rd->get.p99, rd->get.rate, met(rd->get.p99 <= 10));
    printf("  %-52s %9.0f%% of a core; %ld answers other than 200%s%s\n", "gateway CPU (GET)",
           rd->get.gw_cpu_pct, rd->get.bad, rd->get.first_bad[0] ? ": " : "", rd->get.first_bad);
    bench_print_cpu(52, "floor / GET", &rd->floor.c0, &rd->floor.c1, &rd->get.c0, &rd->get.c1);
}

static void print_wakeups(const wakeups_t *wk)
{
    printf(" wake-ups: /v1/sagas/{id}/wait, %d waiting; from the ending COMMIT to the answer, "
           "%d samples\n",
           waiters, wakes);
    printf("  %-52s %9.2f ms / %.2f ms\n", "floor: LISTEN/NOTIFY round trip, p50 / p99",
           wk->floor.p50, wk->floor.p99);
    printf("  %-52s %9.2f ms / %.2f ms  (target p99 <= 20 ms: %s)\n", "wake-up, p50 / p99",
           wk->quiet.p50, wk->quiet.p99, met(wk->quiet.p99 <= 20));
    printf("  %-52s %9.2f ms / %.2f ms  (%ld notifies)\n", "the same, other commits notifying",
           wk->busy.p50, wk->busy.p99, wk->busy.noise_sent);
    printf("    (%d/s: a busy worker's commits)\n", noise);
    printf("  %-52s %9.0f%% / %.0f%% of a core\n", "gateway CPU, quiet / notifying",
           wk->quiet.gw_cpu_pct, wk->busy.gw_cpu_pct);
    printf("  %-52s %9d / %d (asked late: %d / %d; before the COMMIT's answer: %d / %d)\n",
           "answers not ok, quiet / notifying", wk->quiet.bad, wk->busy.bad, wk->quiet.late,
           wk->busy.late, wk->quiet.early, wk->busy.early);
}

static void write_json(const submit_t *s, const reads_t *rd, const wakeups_t *wk)
{
    FILE *fp;

    if (system("mkdir -p bench/results") != 0 || !(fp = fopen("bench/results/gateway.json", "w")))
        return;
    fprintf(fp,
            "{\"bench\": \"gateway\", \"clients\": %d, \"submit_secs\": %d, \"partitions\": %d, "
            "\"floor_pipelined_msg_per_s\": %.0f, \"floor_awaited_msg_per_s\": %.0f, "
            "\"floor_awaited_p50_ms\": %.3f, \"floor_awaited_p99_ms\": %.3f, "
            "\"floor_healthz_per_s\": %.0f, \"floor_healthz_p50_ms\": %.3f, "
            "\"floor_healthz_p99_ms\": %.3f, \"submit_per_s\": %.0f, \"submit_p50_ms\": %.3f, "
            "\"submit_p99_ms\": %.3f, \"submit_errors\": %ld, \"submit_gateway_cpu_pct\": %.0f, "
            "\"submit_clients_cpu_pct\": %.0f, \"submit_host_busy_pct\": %.0f, "
            "\"submit_host_steal_pct\": %.0f, \"messages_on_topic\": %lld, "
            "\"messages_expected\": %lld, ",
            clients, submit_secs, PARTITIONS, s->pipelined_rate, s->awaited.rate, s->awaited.p50,
            s->awaited.p99, s->healthz.rate, s->healthz.p50, s->healthz.p99, s->post.rate,
            s->post.p50, s->post.p99, s->post.bad, s->post.gw_cpu_pct, s->post.self_cpu_pct,
            bench_busy_pct(&s->post.c0, &s->post.c1), bench_steal_pct(&s->post.c0, &s->post.c1),
            (long long)s->on_topic, (long long)s->expected);
    fprintf(fp,
            "\"sagas\": %d, \"fill_s\": %.1f, \"readers\": %d, \"pg_pool\": %d, "
            "\"floor_envelope_p50_ms\": %.3f, \"floor_envelope_p99_ms\": %.3f, "
            "\"floor_envelope_per_s\": %.0f, \"floor_envelope_prepared_p50_ms\": %.3f, "
            "\"floor_envelope_prepared_p99_ms\": %.3f, \"get_p50_ms\": %.3f, "
            "\"get_p99_ms\": %.3f, \"get_per_s\": %.0f, \"get_errors\": %ld, "
            "\"get_gateway_cpu_pct\": %.0f, ",
            sagas, rd->fill_s, readers, pg_pool, rd->floor.p50, rd->floor.p99, rd->floor.rate,
            rd->prepared.p50, rd->prepared.p99, rd->get.p50, rd->get.p99, rd->get.rate, rd->get.bad,
            rd->get.gw_cpu_pct);
    fprintf(fp,
            "\"waiters\": %d, \"wakes\": %d, \"floor_notify_p50_ms\": %.3f, "
            "\"floor_notify_p99_ms\": %.3f, \"wake_p50_ms\": %.3f, \"wake_p99_ms\": %.3f, "
            "\"wake_errors\": %d, \"wake_gateway_cpu_pct\": %.0f, \"noise_per_s\": %d, "
            "\"wake_noisy_p50_ms\": %.3f, \"wake_noisy_p99_ms\": %.3f, "
            "\"wake_noisy_errors\": %d, \"wake_noisy_gateway_cpu_pct\": %.0f, "
            "\"gateway_peak_rss_mb\": %.1f, \"time\": %.0f}\n",
            waiters, wakes, wk->floor.p50, wk->floor.p99, wk->quiet.p50, wk->quiet.p99,
            wk->quiet.bad, wk->quiet.gw_cpu_pct, noise, wk->busy.p50, wk->busy.p99, wk->busy.bad,
            wk->busy.gw_cpu_pct, (double)gw_peak_kb / 1024.0, now_s());
    fclose(fp);
}

/* ---- 4. the Now page ------------------------------------------------------------ */

typedef struct summary_s {
    result_t floor, get;
} summary_t;

static bool op_summary_floor(runner_t *r, char *why, size_t why_size)
{
    const char *p[] = {"900000"}; /* stuck_for: 15 min, the page's default */
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    if (sg_pg_exec_cached(r->ctx, summary_sql, 1, p, &res, &err) < 0) {
        snprintf(why, why_size, "summary statement: %s", err.message);
        return false;
    }
    sg_pg_res_destroy(res);
    return true;
}

static bool op_summary_get(runner_t *r, char *why, size_t why_size)
{
    long st;

    if ((st = http(r->ctx, "/v1/summary", NULL, 0)) == 200)
        return true;
    snprintf(why, why_size, "GET /v1/summary: %ld", st);
    return false;
}

/* One client, as one Now page is: the statement's own time, not a load. */
static void summaries(summary_t *sm)
{
    load_t floor = {.what = "floor: the summary statement through libpq, prepared",
                    .threads = 1,
                    .ctx_new = session_new,
                    .ctx_free = session_free,
                    .op = op_summary_floor};
    load_t get = {.what = "GET /v1/summary",
                  .threads = 1,
                  .ctx_new = client_new,
                  .ctx_free = client_free,
                  .op = op_summary_get};

    load_run(&floor, summary_secs, &sm->floor);
    load_run(&get, summary_secs, &sm->get);
}

static void print_summaries(const summary_t *sm, double fill_s, bool drifted)
{
    printf(" the Now page: GET /v1/summary over %d sagas (filled in %.1f s), one client, %d s "
           "each\n",
           sagas, fill_s, summary_secs);
    printf("  %-52s %9.2f ms / %.2f ms  (%.1f/s)%s\n", "floor: summary statement, p50 / p99",
           sm->floor.p50, sm->floor.p99, sm->floor.rate,
           drifted ? "; NOTE: the gateway's summary statement is not this copy" : "");
    printf("  %-52s %9.2f ms / %.2f ms  (%.1f/s; target p99 < 500 ms: %s)\n",
           "GET /v1/summary, p50 / p99", sm->get.p50, sm->get.p99, sm->get.rate,
           met(sm->get.p99 < 500));
    printf("  %-52s %ld answers other than 200%s%s\n", "", sm->get.bad,
           sm->get.first_bad[0] ? ": " : "", sm->get.first_bad);
}

int main(void)
{
    submit_t sub;
    reads_t rd;
    wakeups_t wk;
    summary_t sm;
    bool drifted, sum_drifted;
    char db[64];
    sg_pg_t *pg;

    bench_name = "bench-gateway";
    clients = env_int("SAGAD_BENCH_GW_CLIENTS", clients);
    submit_secs = env_int("SAGAD_BENCH_GW_SECS", submit_secs);
    sagas = env_int("SAGAD_BENCH_GW_SAGAS", sagas);
    readers = env_int("SAGAD_BENCH_GW_READERS", readers);
    read_secs = env_int("SAGAD_BENCH_GW_READ_SECS", read_secs);
    waiters = env_int("SAGAD_BENCH_GW_WAITERS", waiters);
    wakes = env_int("SAGAD_BENCH_GW_WAKES", wakes);
    noise = env_int("SAGAD_BENCH_GW_NOISE", noise);
    if (getenv("SAGAD_BENCH_GW_PHASES")) {
        const char *ph = getenv("SAGAD_BENCH_GW_PHASES");
        do_submit = strstr(ph, "submit") != NULL;
        do_read = strstr(ph, "read") != NULL;
        do_wake = strstr(ph, "wake") != NULL;
        do_summary = strstr(ph, "summary") != NULL;
    }
    summary_secs = env_int("SAGAD_BENCH_GW_SUMMARY_SECS", summary_secs);
    if (2 * wakes > sagas / 25)
        die("SAGAD_BENCH_GW_WAKES", "needs 2 running sagas a wake-up (1 in 25 sagas runs)");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        die("curl", "curl_global_init failed");
    drifted = sql_drifted(envelope_sql, sizeof(envelope_sql) - 1);
    sum_drifted = sql_drifted(summary_sql, sizeof(summary_sql) - 1);
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    make_op_dsn();
    make_topics();
    write_files();
    start_gateway();

    memset(&sub, 0, sizeof(sub));
    memset(&rd, 0, sizeof(rd));
    memset(&wk, 0, sizeof(wk));
    if (do_submit)
        submissions(&sub);
    memset(&sm, 0, sizeof(sm));
    if (do_read || do_wake || do_summary)
        rd.fill_s = fill(pg);
    if (do_summary)
        summaries(&sm);
    if (do_read)
        reads(pg, &rd);
    if (do_wake)
        wakeups(pg, &wk);

    gw_peak_kb = bench_rss_kb(gw_pid, "VmHWM");
    bench_stop(gw_pid);
    gw_pid = 0;
    printf("\nsagad-gateway benchmark (one gateway, PostgreSQL, Kafka and these clients on this "
           "host; no worker)\n");
    if (do_submit)
        print_submissions(&sub);
    if (do_read)
        print_reads(&rd, drifted);
    if (do_wake)
        print_wakeups(&wk);
    if (do_summary)
        print_summaries(&sm, rd.fill_s, sum_drifted);
    printf(" %-53s %9.1f MB\n", "gateway peak RSS (VmHWM)", (double)gw_peak_kb / 1024.0);
    if (do_submit && do_read && do_wake)
        write_json(&sub, &rd, &wk);
    free(wk.floor.lat.v);
    free(wk.quiet.lat.v);
    free(wk.busy.lat.v);
    remove_files();
    sg_pg_destroy(pg);
    bench_drop_db(db);
    curl_global_cleanup();
    return 0;
}
