/* make bench: sagad-worker throughput, latency and memory beside floors.
 *
 * Everything runs on this host: PostgreSQL (synchronous_commit=on), Kafka,
 * sagad-relay and one sagad-worker.  Sagas have 3 `noop` steps.
 *   1. floor: a plain librdkafka consumer reading saga.start messages of
 *      the same shape, msg/s;
 *   2. floor: the worker's statements per step (lock the saga, attempt row,
 *      outcome, events, next command, offset fence) run through PostgreSQL
 *      in pipelined batches, with no Kafka at all, steps/s; and the same
 *      with each saga's start (its rows, first messages, fence) timed too;
 *   3. throughput: a backlog of sagas submitted, then timed until every one
 *      completed, steps/s;
 *   4. latency: sagas offered at 1,000 steps/s; saga.start produced to
 *      saga.completed consumed, p50/p99 over 30 s after a 3 s ramp, and
 *      the p99 of each third;
 *   5. the worker's peak RSS (VmHWM).
 * Prints a table and writes bench/results/worker.json.  Not a test. */
#define _GNU_SOURCE /* memmem */
#include <pthread.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../worker/worker.h"
#include "sagad/sg_migrate.h"
#include "bench_util.h"

#define FLOOR_BATCH 256 /* sagas a transaction in the SQL floor (worker.batch_size) */

#define STEPS 3

static char dsn[512], cmd_topic[128], int_topic[128], ev_topic[128], dlq_topic[128], group[128],
    regpath[256];
/* SAGAD_BENCH_RELAY_SOURCE: the relay's source, table (the default) or wal */
static const char *relay_source = "table", *wal_slot;

static void write_registry(void)
{
    FILE *fp;

    snprintf(regpath, sizeof(regpath), "/tmp/sagad-bench-tools-%d.json", (int)getpid());
    fp = fopen(regpath, "w");
    if (!fp)
        die("registry", regpath);
    fputs("{\"v\":1,\"tools\":{\"noop\":{\"adapter\":\"builtin\",\"target\":\"noop\","
          "\"side_effect\":\"read\"},\"echo\":{\"adapter\":\"builtin\",\"target\":\"echo\","
          "\"side_effect\":\"read\"}}}\n",
          fp);
    fclose(fp);
}

/* The sagas the runs submit: 3 noop steps; or (the cost of references)
 * 3 echo steps with static args, or the same whose b and c take a value
 * from the result of the step before ({"$from": ...}), which makes the
 * worker load the saga's step results and resolve them at each call. */
static enum { SAGA_NOOP, SAGA_ECHO, SAGA_REFS, SAGA_GROUP } saga_kind;
/* The latency run's saga ids: <lat_prefix>-<n>. */
static const char *lat_prefix = "lat";

static int start_json(char *out, size_t size, const char *saga_id)
{
    static const char *const steps[] = {
        [SAGA_NOOP] = "[{\"name\":\"a\",\"tool\":\"noop\"},{\"name\":\"b\",\"tool\":\"noop\"},"
                      "{\"name\":\"c\",\"tool\":\"noop\"}]",
        [SAGA_ECHO] = "[{\"name\":\"a\",\"tool\":\"echo\",\"args\":{\"id\":\"r-1\"}},"
                      "{\"name\":\"b\",\"tool\":\"echo\",\"args\":{\"id\":\"r-1\"}},"
                      "{\"name\":\"c\",\"tool\":\"echo\",\"args\":{\"id\":\"r-1\"}}]",
        [SAGA_REFS] = "[{\"name\":\"a\",\"tool\":\"echo\",\"args\":{\"id\":\"r-1\"}},"
                      "{\"name\":\"b\",\"tool\":\"echo\",\"args\":{\"id\":{\"$from\":"
                      "\"/steps/a/result/id\"}}},{\"name\":\"c\",\"tool\":\"echo\",\"args\":"
                      "{\"id\":{\"$from\":\"/steps/b/result/id\"}}}]",
        /* The same three noop calls as one parallel group. */
        [SAGA_GROUP] = "[{\"name\":\"g\",\"policy\":\"all_or_nothing\",\"parallel\":["
                       "{\"name\":\"a\",\"tool\":\"noop\"},{\"name\":\"b\",\"tool\":\"noop\"},"
                       "{\"name\":\"c\",\"tool\":\"noop\"}]}]",
    };

    return snprintf(out, size,
                    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-%s\",\"saga_id\":\"%s\","
                    "\"name\":\"bench\",\"steps\":%s}",
                    saga_id, saga_id, steps[saga_kind]);
}

static void produce(const char *topic, const char *prefix, int n, double rate, double *sent)
{
    bench_produce(topic, prefix, n, rate, sent, start_json);
}

static double floor_consume(int n)
{
    char topic[160], g[160];
    const char *extra[] = {"group.id", g, NULL};
    const char *topics[] = {topic};
    sg_kafka_t *c;
    sg_err_t err;
    double t0 = 0;
    int got = 0;

    snprintf(topic, sizeof(topic), "%s_floor", cmd_topic);
    snprintf(g, sizeof(g), "%s_floor", group);
    {
        sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
        if (sg_kafka_create_topic(k, topic, 3, 30000, &err) < 0)
            die("create topic", err.message);
        sg_kafka_destroy(k);
    }
    produce(topic, "floor", n, 0, NULL);
    c = kclient(SG_KAFKA_CONSUMER, extra);
    if (sg_kafka_subscribe(c, topics, 1, &err) < 0)
        die("subscribe", err.message);
    while (got < n) {
        sg_kafka_msg_t *msg;
        if (sg_kafka_consume(c, 1000, &msg, &err) != 1)
            continue;
        if (got++ == 0)
            t0 = now_s();
        sg_kafka_msg_destroy(msg);
    }
    t0 = now_s() - t0;
    sg_kafka_destroy(c);
    return n / t0;
}

/* One batch of the SQL floor: sagas f-b..f-(b+m-1), each with two
 * outgoing messages of about the worker's size. */
typedef struct {
    int m;
    char *ids[FLOOR_BATCH], *keys[2 * FLOOR_BATCH], *pays[2 * FLOOR_BATCH];
    const char *tops[2 * FLOOR_BATCH], *heads[2 * FLOOR_BATCH];
    sg_pg_buf_t ids_lit, keys_lit, pays_lit, tops_lit, heads_lit;
} floor_batch_t;

static void floor_batch_fill(floor_batch_t *fb, int b, int nsagas)
{
    fb->m = 0;
    for (int i = b; i < b + FLOOR_BATCH && i <= nsagas; i++, fb->m++) {
        int m = fb->m;

        fb->ids[m] = malloc(32);
        if (!fb->ids[m])
            die("floor", "out of memory");
        snprintf(fb->ids[m], 32, "f-%d", i);
        for (int k = 0; k < 2; k++) {
            fb->keys[2 * m + k] = fb->ids[m];
            fb->tops[2 * m + k] = "floor";
            fb->heads[2 * m + k] = "{\"sagad-type\":\"x\"}";
            if (!(fb->pays[2 * m + k] = malloc(200)))
                die("floor", "out of memory");
            snprintf(fb->pays[2 * m + k], 200, "%s%0150d", fb->ids[m], 0);
        }
    }
    sg_pg_buf_reset(&fb->ids_lit);
    sg_pg_buf_reset(&fb->keys_lit);
    sg_pg_buf_reset(&fb->pays_lit);
    sg_pg_buf_reset(&fb->tops_lit);
    sg_pg_buf_reset(&fb->heads_lit);
    sg_pg_array_literal(&fb->ids_lit, (const char *const *)fb->ids, (size_t)fb->m);
    sg_pg_array_literal(&fb->keys_lit, (const char *const *)fb->keys, (size_t)(2 * fb->m));
    sg_pg_array_literal(&fb->pays_lit, (const char *const *)fb->pays, (size_t)(2 * fb->m));
    sg_pg_array_literal(&fb->tops_lit, fb->tops, (size_t)(2 * fb->m));
    sg_pg_array_literal(&fb->heads_lit, fb->heads, (size_t)(2 * fb->m));
}

static void floor_batch_clear(floor_batch_t *fb)
{
    for (int i = 0; i < fb->m; i++) {
        free(fb->ids[i]);
        free(fb->pays[2 * i]);
        free(fb->pays[2 * i + 1]);
    }
    fb->m = 0;
}

/* The end of every floor transaction: the batch's two messages a saga,
 * the offset fence, COMMIT and the NOTIFY after it; then the pipeline's
 * results read. */
static void floor_commit(sg_pg_t *pg, const floor_batch_t *fb, int b)
{
    const char *pm[] = {fb->tops_lit.data, fb->keys_lit.data, fb->heads_lit.data,
                        fb->pays_lit.data};
    char off[24];
    const char *po[] = {off};
    sg_err_t err;

    snprintf(off, sizeof(off), "%d", b);
    sg_pg_pipe_send(pg, worker_sql_outbox, 4, pm, NULL);
    sg_pg_pipe_send(pg, "SELECT sagad_fence('floor', 'floor', 0, 1, $1::bigint)", 1, po, NULL);
    sg_pg_pipe_send(pg, "COMMIT", 0, NULL, NULL);
    sg_pg_pipe_send(pg, SG_OUTBOX_NOTIFY, 0, NULL, NULL);
    if (sg_pg_pipe_end(pg, &err) < 0)
        die("floor transaction", err.message);
}

/* The worker's SQL without Kafka, batched and pipelined as the worker
 * batches it (one set-based statement per kind of row over the batch, see
 * worker/apply/worker_writes.c), FLOOR_BATCH sagas a transaction:
 *   - the start: each saga's row and its three step rows, its first
 *     messages (saga.accepted and the first step.execute) and the offset
 *     fence, as a saga.start's transaction writes them;
 *   - then one transaction per step, as a chained saga takes (the step's
 *     attempt row commits with the previous step's outcome): the attempt
 *     row, the outcome, the step and saga rows, two messages and the
 *     fence.
 * *per_step: steps/s over the step transactions alone (the floor printed
 * before 2026-11-29, over sagas made before the clock started);
 * *per_saga: steps/s over all of it, the start included, which is the SQL
 * a backlog of sagas costs the worker. */
static void floor_sql(sg_pg_t *pg, int nsagas, double *per_step, double *per_saga)
{
    static const char def[] = "{\"name\":\"bench\",\"steps\":[{\"name\":\"a\",\"tool\":\"noop\","
                              "\"args\":{}},{\"name\":\"b\",\"tool\":\"noop\",\"args\":{}},"
                              "{\"name\":\"c\",\"tool\":\"noop\",\"args\":{}}]}";
    floor_batch_t *fb = calloc(1, sizeof(*fb));
    sg_err_t err;
    double t0, t1;

    if (!fb)
        die("floor", "out of memory");
    /* As the worker's sessions: the NOTIFY after the COMMIT, not in it. */
    exec(pg, SG_OUTBOX_NOTIFY_OFF, 0, NULL);
    exec(pg,
         "INSERT INTO consumer_offsets (group_id, topic, partition, next_offset, owner_epoch) "
         "VALUES ('floor', 'floor', 0, 0, 1)",
         0, NULL);
    t0 = now_s();
    for (int b = 1; b <= nsagas; b += FLOOR_BATCH) {
        const char *ps[] = {NULL, def};

        floor_batch_fill(fb, b, nsagas);
        ps[0] = fb->ids_lit.data;
        if (sg_pg_pipe_begin(pg, &err) < 0)
            die("pipeline", err.message);
        sg_pg_pipe_send(pg, "BEGIN", 0, NULL, NULL);
        sg_pg_pipe_send(pg,
                        "WITH s AS (INSERT INTO sagas (saga_id, name, definition) SELECT id, "
                        "'bench', $2::jsonb FROM unnest($1::text[]) AS u(id) RETURNING saga_id, "
                        "definition) INSERT INTO steps (saga_id, idx, name, tool, args) SELECT "
                        "s.saga_id, (e.ord - 1)::int, e.v->>'name', e.v->>'tool', e.v->'args' "
                        "FROM s, jsonb_array_elements(s.definition->'steps') WITH ORDINALITY "
                        "AS e(v, ord)",
                        2, ps, NULL);
        floor_commit(pg, fb, b);
        floor_batch_clear(fb);
    }
    t1 = now_s();
    for (int step = 0; step < STEPS; step++) {
        char sidx[8];
        const char *idx[FLOOR_BATCH];
        sg_pg_buf_t idx_lit = {0};

        snprintf(sidx, sizeof(sidx), "%d", step);
        for (int i = 0; i < FLOOR_BATCH; i++)
            idx[i] = sidx;
        for (int b = 1; b <= nsagas; b += FLOOR_BATCH) {
            sg_pg_res_t *res = NULL, *ins = NULL;
            const char *pa[2];

            floor_batch_fill(fb, b, nsagas);
            sg_pg_buf_reset(&idx_lit);
            sg_pg_array_literal(&idx_lit, idx, (size_t)fb->m);
            pa[0] = fb->ids_lit.data;
            pa[1] = idx_lit.data;
            if (sg_pg_pipe_begin(pg, &err) < 0)
                die("pipeline", err.message);
            sg_pg_pipe_send(pg, "BEGIN", 0, NULL, NULL);
            sg_pg_pipe_send(pg, worker_sql_load, 1, pa, &res);
            sg_pg_pipe_send(pg,
                            "INSERT INTO attempts (saga_id, step_idx, phase, generation, "
                            "attempt, idempotency_key) SELECT s, i, 'forward', 1, 1, s "
                            "FROM unnest($1::text[], $2::int[]) AS u(s, i) RETURNING id",
                            2, pa, &ins);
            sg_pg_pipe_send(pg,
                            "UPDATE steps t SET status = 'running', attempts = 1 FROM "
                            "unnest($1::text[], $2::int[]) AS u(s, i) WHERE t.saga_id = "
                            "u.s AND t.idx = u.i",
                            2, pa, NULL);
            sg_pg_pipe_send(pg,
                            "UPDATE attempts a SET finished_at = now(), status = 'ok', "
                            "envelope = '{}' FROM unnest($1::text[], $2::int[]) AS u(s, "
                            "i) WHERE a.saga_id = u.s AND a.step_idx = u.i AND "
                            "a.finished_at IS NULL",
                            2, pa, NULL);
            sg_pg_pipe_send(pg,
                            "UPDATE steps t SET status = 'succeeded', result = 'null' "
                            "FROM unnest($1::text[], $2::int[]) AS u(s, i) WHERE "
                            "t.saga_id = u.s AND t.idx = u.i",
                            2, pa, NULL);
            sg_pg_pipe_send(pg,
                            "UPDATE sagas t SET seq = seq + 2, version = version + 1 "
                            "FROM unnest($1::text[]) AS u(s) WHERE t.saga_id = u.s",
                            1, pa, NULL);
            floor_commit(pg, fb, b + nsagas * (step + 1));
            sg_pg_res_destroy(res);
            sg_pg_res_destroy(ins);
            floor_batch_clear(fb);
        }
        sg_pg_buf_free(&idx_lit);
    }
    *per_step = nsagas * STEPS / (now_s() - t1);
    *per_saga = nsagas * STEPS / (now_s() - t0);
    sg_pg_buf_free(&fb->ids_lit);
    sg_pg_buf_free(&fb->keys_lit);
    sg_pg_buf_free(&fb->pays_lit);
    sg_pg_buf_free(&fb->tops_lit);
    sg_pg_buf_free(&fb->heads_lit);
    free(fb);
}

/* The relay's and worker's environment: the bench's own settings, then
 * SAGAD_BENCH_ENV (space-separated KEY=VALUE pairs, e.g.
 * "SAGAD_WORKER_BATCH_SIZE=64 SAGAD_LOG_LEVEL=info") for tuning runs: the
 * configuration takes the last value of a variable, so these win. */
static pid_t start(const char *prog)
{
    static char buf[2048];
    static const char *extra[32 + 1];
    const char *const topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};
    int n = 0;

    /* Tracing on (make bench's second run): every saga sampled, spans
     * exported to the real collector at this OTLP/HTTP endpoint. */
    if (getenv("SAGAD_BENCH_OTEL_ENDPOINT") && n < 30) {
        static char ep[512];
        snprintf(ep, sizeof(ep), "SAGAD_OTEL_ENDPOINT=%s", getenv("SAGAD_BENCH_OTEL_ENDPOINT"));
        extra[n++] = ep;
        extra[n++] = "SAGAD_OTEL_TRACES_SAMPLER_ARG=1";
    }
    /* The WAL source's relay, as the relay's login (REPLICATION) on this
     * database, with a slot of this run (dropped at exit). */
    if (wal_slot && strcmp(prog, "sagad-relay") == 0 && n < 30) {
        static char dsn_env[600], slot_env[128];
        snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", bench_wal_dsn());
        snprintf(slot_env, sizeof(slot_env), "SAGAD_RELAY_SLOT=%s", wal_slot);
        extra[n++] = dsn_env;
        extra[n++] = slot_env;
        extra[n++] = "SAGAD_RELAY_SOURCE=wal";
    }
    if (getenv("SAGAD_BENCH_ENV")) {
        snprintf(buf, sizeof(buf), "%s", getenv("SAGAD_BENCH_ENV"));
        for (char *t = strtok(buf, " "); t && n < 32; t = strtok(NULL, " "))
            extra[n++] = t;
    }
    extra[n] = NULL;
    return bench_start_sagad(prog, dsn, regpath, topics, group, "warn", extra);
}

/* Until the relay has published what was written so far (at most 60 s):
 * the table source's outbox is empty, or the WAL source's slot has
 * confirmed the WAL position of now (the table stays empty there). */
static void wait_relayed(sg_pg_t *pg)
{
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    if (!wal_slot) {
        for (double t0 = now_s();
             query_int(pg, "SELECT count(*) FROM outbox") > 0 && now_s() - t0 < 60;)
            usleep(100000);
        return;
    }
    /* the slot's confirmed position past the WAL's end now: everything
     * written so far was published */
    if (sg_pg_exec(pg, "SELECT pg_current_wal_lsn()::text", 0, NULL, &res, &err) < 0)
        die("wal position", err.message);
    {
        const char *p[] = {wal_slot, sg_pg_res_get(res, 0, 0)};

        for (double t0 = now_s(); now_s() - t0 < 60; usleep(100000)) {
            sg_pg_res_t *r = NULL;
            bool done;

            if (sg_pg_exec(pg,
                           "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 "
                           "AND confirmed_flush_lsn >= $2::pg_lsn",
                           2, p, &r, &err) < 0)
                die("slot position", err.message);
            done = strcmp(sg_pg_res_get(r, 0, 0), "0") != 0;
            sg_pg_res_destroy(r);
            if (done)
                break;
        }
    }
    sg_pg_res_destroy(res);
}

/* CPU seconds (user + system) process pid has used so far. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut = 0, st = 0;
    FILE *fp;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(fp = fopen(path, "r")))
        return 0;
    buf[fread(buf, 1, sizeof(buf) - 1, fp)] = '\0';
    fclose(fp);
    /* after the command's closing parenthesis: state is field 3, utime 14 */
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int64_t completed(sg_pg_t *pg, const char *prefix)
{
    char like[64], sql[200];

    snprintf(like, sizeof(like), "%s-%%", prefix);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM sagas WHERE status = 'completed' AND saga_id LIKE '%s'", like);
    return query_int(pg, sql);
}

static double throughput(sg_pg_t *pg, const char *prefix, int n)
{
    double t0 = now_s();

    produce(cmd_topic, prefix, n, 0, NULL);
    /* The count is a scan that grows with the sagas (3 ms at 30,000) and
     * takes CPU from what is measured: it runs every 100 ms, and every
     * 10 ms over the last tenth, which is when the end is timed. */
    for (int done; (done = completed(pg, prefix)) < n;) {
        if (now_s() - t0 > 600)
            die("throughput", "sagas did not complete within 10 minutes");
        usleep(done < n - n / 10 ? 100000 : 10000);
    }
    return n * STEPS / (now_s() - t0);
}

/* Where a saga's time goes, per completed saga, in ms (the hops are cut
 * at the events' "time", the worker's clock when it decided, and at the
 * Kafka timestamp of saga.completed, the relay's produce time; one host,
 * one clock):
 *   in:     saga.start produced -> saga.accepted decided (Kafka to the
 *           worker, the wait for its turn, the load);
 *   steps:  saga.accepted -> saga.completed decided (3 steps);
 *   relay:  saga.completed decided -> produced (commit, relay pick-up);
 *   out:    produced -> consumed here. */
enum { HOP_IN, HOP_STEPS, HOP_RELAY, HOP_OUT, NHOPS };
static const char *const hop_names[NHOPS] = {"in", "steps", "relay", "out"};

typedef struct lat_s {
    double *sent, *ms, *accepted, *hop[NHOPS];
    int *who; /* the saga of each sample */
    int n, want;
    volatile int stop;
} lat_t;

/* An event's "time" in seconds since the epoch; -1 without one. */
static double event_time(const char *data, size_t len)
{
    const char *p = memmem(data, len, "\"time\":\"", 8);
    struct tm tm = {0};
    int ms = 0;

    if (!p || sscanf(p + 8, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (double)timegm(&tm) + ms / 1000.0;
}

static void *lat_consumer(void *arg)
{
    lat_t *lat = arg;
    char g[160];
    /* The default fetch.wait.max.ms: the broker answers as soon as a
     * message arrives anyway, and a 1 ms wait made this consumer a busy
     * loop of fetches that took CPU from what is measured. */
    const char *extra[] = {"group.id", g, NULL};
    const char *topics[] = {ev_topic};
    sg_kafka_t *c;
    sg_err_t err;
    char needle[32];
    int nl = snprintf(needle, sizeof(needle), "\"saga_id\":\"%s-", lat_prefix);

    snprintf(g, sizeof(g), "%s_lat", group);
    c = kclient(SG_KAFKA_CONSUMER, extra);
    if (sg_kafka_subscribe(c, topics, 1, &err) < 0)
        die("subscribe", err.message);
    while (!lat->stop && lat->n < lat->want) {
        sg_kafka_msg_t *msg;
        const char *data, *p;
        size_t len;
        int i;
        if (sg_kafka_consume(c, 100, &msg, &err) != 1)
            continue;
        data = sg_kafka_msg_payload(msg, &len);
        if (data && (p = memmem(data, len, needle, (size_t)nl)) && sscanf(p + nl, "%d", &i) == 1 &&
            i >= 0 && i < lat->want && lat->sent[i] > 0) {
            double now = now_s(), t = event_time(data, len);
            if (memmem(data, len, "\"saga.accepted\"", 15)) {
                lat->accepted[i] = t;
            } else if (memmem(data, len, "\"saga.completed\"", 16)) {
                double made = (double)sg_kafka_msg_timestamp(msg) / 1000.0;
                lat->hop[HOP_IN][lat->n] = (lat->accepted[i] - lat->sent[i]) * 1000.0;
                lat->hop[HOP_STEPS][lat->n] = (t - lat->accepted[i]) * 1000.0;
                lat->hop[HOP_RELAY][lat->n] = (made - t) * 1000.0;
                lat->hop[HOP_OUT][lat->n] = (now - made) * 1000.0;
                lat->who[lat->n] = i;
                lat->ms[lat->n++] = (now - lat->sent[i]) * 1000.0;
            }
        }
        sg_kafka_msg_destroy(msg);
    }
    sg_kafka_destroy(c);
    return NULL;
}

/* SAGAD_BENCH_LAT_DUMP=file: one line per sample, in completion order:
 * seconds from the first saga.start produced, then the total and each
 * hop in ms.  For finding where a tail comes from (one stall or many). */
static void lat_dump(const lat_t *lat)
{
    const char *path = getenv("SAGAD_BENCH_LAT_DUMP");
    FILE *f;

    if (!path || !*path || lat->n == 0)
        return;
    if (!(f = fopen(path, "w")))
        die("SAGAD_BENCH_LAT_DUMP", strerror(errno));
    fprintf(f, "sent_s total_ms in_ms steps_ms relay_ms out_ms\n");
    for (int k = 0; k < lat->n; k++)
        fprintf(f, "%.3f %.1f %.1f %.1f %.1f %.1f\n", lat->sent[lat->who[k]] - lat->sent[0],
                lat->ms[k], lat->hop[HOP_IN][k], lat->hop[HOP_STEPS][k], lat->hop[HOP_RELAY][k],
                lat->hop[HOP_OUT][k]);
    fclose(f);
}

static double pctl(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n ? v[(int)(n * q)] : -1;
}

/* The latency run: sagas offered at a steady rate for LAT_RAMP_S + secs
 * seconds.  Sagas produced in the first LAT_RAMP_S seconds are not
 * measured: that is the worker, relay and broker going from idle (the
 * backlog's drain and the consumer's join) to the rate, a transition a
 * system serving a steady load does not go through every ten seconds.
 * The measured seconds are also cut into LAT_WINDOWS windows with a p99
 * each, so a run whose p99 comes from one stall shows it.  A measured
 * saga that never completed counts as infinitely late. */
enum { LAT_RAMP_S = 3, LAT_WINDOWS = 3 };

typedef struct lat_result_s {
    double p50, p99, hops[NHOPS][2], win_p99[LAT_WINDOWS];
    int n, missing;
} lat_result_t;

/* The window of a saga produced at sent seconds after the first one, -1
 * when it was produced during the ramp. */
static int window_of(double sent, int secs)
{
    int w;

    if (sent < LAT_RAMP_S)
        return -1;
    w = (int)((sent - LAT_RAMP_S) * LAT_WINDOWS / secs);
    return w < LAT_WINDOWS ? w : LAT_WINDOWS - 1;
}

static void latency(double steps_per_s, int secs, lat_result_t *out)
{
    int want = (int)(steps_per_s / STEPS * (LAT_RAMP_S + secs)), m = 0, k, w;
    lat_t lat = {.want = want};
    double *ms, *hop[NHOPS], *win[LAT_WINDOWS], t0;
    int nwin[LAT_WINDOWS] = {0}, *got;
    pthread_t th;

    lat.sent = calloc((size_t)want, sizeof(double));
    lat.ms = calloc((size_t)want, sizeof(double));
    lat.accepted = calloc((size_t)want, sizeof(double));
    lat.who = calloc((size_t)want, sizeof(int));
    for (int h = 0; h < NHOPS; h++)
        lat.hop[h] = calloc((size_t)want, sizeof(double));

    pthread_create(&th, NULL, lat_consumer, &lat);
    sleep(3); /* the consumer joins its group */
    produce(cmd_topic, lat_prefix, want, steps_per_s / STEPS, lat.sent);
    t0 = now_s();
    while (lat.n < want && now_s() - t0 < 30)
        usleep(50000);
    lat.stop = 1;
    pthread_join(th, NULL);
    lat_dump(&lat);

    /* The measured samples, and the measured sagas that never completed. */
    ms = calloc((size_t)want, sizeof(double));
    got = calloc((size_t)want, sizeof(int));
    for (int h = 0; h < NHOPS; h++)
        hop[h] = calloc((size_t)want, sizeof(double));
    for (w = 0; w < LAT_WINDOWS; w++)
        win[w] = calloc((size_t)want, sizeof(double));
    for (k = 0; k < lat.n; k++) {
        got[lat.who[k]] = 1;
        if ((w = window_of(lat.sent[lat.who[k]] - lat.sent[0], secs)) < 0)
            continue;
        win[w][nwin[w]++] = lat.ms[k];
        for (int h = 0; h < NHOPS; h++)
            hop[h][m] = lat.hop[h][k];
        ms[m++] = lat.ms[k];
    }
    out->n = m;
    out->missing = 0;
    for (int i = 0; i < want; i++) {
        if (got[i] || (w = window_of(lat.sent[i] - lat.sent[0], secs)) < 0)
            continue;
        win[w][nwin[w]++] = INFINITY;
        ms[m++] = INFINITY;
        out->missing++;
    }
    out->p50 = pctl(ms, m, 0.5);
    out->p99 = pctl(ms, m, 0.99);
    for (w = 0; w < LAT_WINDOWS; w++) {
        out->win_p99[w] = pctl(win[w], nwin[w], 0.99);
        free(win[w]);
    }
    for (int h = 0; h < NHOPS; h++) {
        out->hops[h][0] = pctl(hop[h], out->n, 0.5);
        out->hops[h][1] = pctl(hop[h], out->n, 0.99);
        free(hop[h]);
        free(lat.hop[h]);
    }
    free(ms);
    free(got);
    free(lat.sent);
    free(lat.who);
    free(lat.ms);
    free(lat.accepted);
}

/* A figure for JSON: a never-completed saga makes a percentile infinite,
 * which JSON cannot spell; null says it. */
static const char *jnum(char *buf, size_t size, double v)
{
    if (isfinite(v))
        snprintf(buf, size, "%.2f", v);
    else
        snprintf(buf, size, "null");
    return buf;
}

int main(void)
{
    int n = getenv("SAGAD_BENCH_SAGAS") ? atoi(getenv("SAGAD_BENCH_SAGAS")) : 5000;
    double lat_rate = getenv("SAGAD_BENCH_RATE") ? atof(getenv("SAGAD_BENCH_RATE")) : 1000;
    int lat_secs = getenv("SAGAD_BENCH_LAT_SECS") ? atoi(getenv("SAGAD_BENCH_LAT_SECS")) : 30;
    /* rounds of the references comparison (0: none, for a worker without) */
    int ref_rounds = getenv("SAGAD_BENCH_REF_ROUNDS") ? atoi(getenv("SAGAD_BENCH_REF_ROUNDS")) : 2;
    /* the parallel group case (0: none) */
    int group_runs = getenv("SAGAD_BENCH_GROUP") ? atoi(getenv("SAGAD_BENCH_GROUP")) : 1;
    double floor_kafka, floor_pg, floor_saga, rate, rate_echo = 0, rate_refs = 0, rate_group = 0;
    lat_result_t lat, lat_group = {0};
    char p50s[32], p99s[32], gp50s[32], gp99s[32],
        wins[LAT_WINDOWS * 34] = "", wins_json[LAT_WINDOWS * 34] = "";
    bench_cpu_t c0, c1, c2, c3;
    double wcpu0, wcpu1, wcpu2, wcpu3;
    const char *otel = getenv("SAGAD_BENCH_OTEL_ENDPOINT");
    const char *result = getenv("SAGAD_BENCH_RESULT") ? getenv("SAGAD_BENCH_RESULT")
                         : otel                       ? "bench/results/worker-otel.json"
                                                      : "bench/results/worker.json";
    long rss;
    char db[64];
    pid_t relay, worker;
    sg_pg_t *pg;
    sg_err_t err;
    FILE *fp;

    bench_name = "bench-worker";
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    if (getenv("SAGAD_BENCH_RELAY_SOURCE"))
        relay_source = getenv("SAGAD_BENCH_RELAY_SOURCE");
    if (strcmp(relay_source, "wal") == 0)
        wal_slot = bench_wal_prepare(dsn);
    else if (strcmp(relay_source, "table") != 0)
        die("SAGAD_BENCH_RELAY_SOURCE", "must be table or wal");
    snprintf(cmd_topic, sizeof(cmd_topic), "bench_cmd_%d", (int)getpid());
    snprintf(int_topic, sizeof(int_topic), "bench_int_%d", (int)getpid());
    snprintf(ev_topic, sizeof(ev_topic), "bench_ev_%d", (int)getpid());
    snprintf(dlq_topic, sizeof(dlq_topic), "bench_dlq_%d", (int)getpid());
    snprintf(group, sizeof(group), "bench_worker_%d", (int)getpid());
    write_registry();
    {
        sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
        const char *topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};
        for (int i = 0; i < 4; i++)
            if (sg_kafka_create_topic(k, topics[i], 3, 30000, &err) < 0)
                die("create topic", err.message);
        sg_kafka_destroy(k);
    }

    fprintf(stderr, "bench-worker: floors (%d messages, %d sagas of SQL)...\n", n, n);
    floor_kafka = floor_consume(n);
    floor_sql(pg, n, &floor_pg, &floor_saga);
    exec(pg, "TRUNCATE outbox", 0, NULL);

    relay = start("sagad-relay");
    worker = start("sagad-worker");
    sleep(4); /* the worker joins the group, the relay takes its shard */
    fprintf(stderr, "bench-worker: throughput, a backlog of %d sagas of %d noop steps...\n", n,
            STEPS);
    bench_cpu(&c0);
    wcpu0 = proc_cpu_s(worker);
    rate = throughput(pg, "tp", n);
    wcpu1 = proc_cpu_s(worker);
    bench_cpu(&c1);
    /* The backlog's last events are still being relayed when its last saga
     * completes; the latency run starts on a quiet system. */
    wait_relayed(pg);
    sleep(2);
    if (lat_secs < LAT_WINDOWS)
        die("SAGAD_BENCH_LAT_SECS", "must be at least 3 (seconds)");
    fprintf(stderr, "bench-worker: latency at %.0f steps/s for %d s, after %d s at that rate...\n",
            lat_rate, lat_secs, LAT_RAMP_S);
    bench_cpu(&c2);
    wcpu2 = proc_cpu_s(worker);
    latency(lat_rate, lat_secs, &lat);
    wcpu3 = proc_cpu_s(worker);
    bench_cpu(&c3);
    /* References: echo sagas with and without them, alternated, the best
     * of each (the machine is shared: the best run is the least
     * disturbed). */
    fprintf(stderr, "bench-worker: references, %d echo sagas with and without, x%d...\n", n,
            ref_rounds);
    for (int r = 0; r < ref_rounds; r++) {
        char p[16];
        double v;
        saga_kind = SAGA_ECHO;
        snprintf(p, sizeof(p), "te%d", r);
        v = throughput(pg, p, n);
        rate_echo = v > rate_echo ? v : rate_echo;
        saga_kind = SAGA_REFS;
        snprintf(p, sizeof(p), "tr%d", r);
        v = throughput(pg, p, n);
        rate_refs = v > rate_refs ? v : rate_refs;
    }
    /* The same three noop calls as one parallel group of three members:
     * a backlog, then latency at the same offered rate. */
    if (group_runs > 0) {
        fprintf(stderr,
                "bench-worker: parallel groups, %d sagas of one group of 3 noop members, "
                "then latency...\n",
                n);
        saga_kind = SAGA_GROUP;
        rate_group = throughput(pg, "tg", n);
        wait_relayed(pg);
        sleep(2);
        lat_prefix = "lag";
        latency(lat_rate, lat_secs, &lat_group);
        lat_prefix = "lat";
    }
    saga_kind = SAGA_NOOP;
    rss = bench_rss_kb(worker, "VmHWM");
    bench_stop(worker);
    bench_stop(relay);

    printf("\nsagad-worker benchmark (%d sagas of %d noop steps; PostgreSQL, Kafka, relay (%s "
           "source) and worker on this host; tracing %s%s)\n",
           n, STEPS, relay_source, otel ? "on: sampling 1.0, OTLP/HTTP to " : "off",
           otel ? otel : "");
    printf("  %-52s %10.0f msg/s\n", "floor: plain librdkafka consumer, same messages",
           floor_kafka);
    printf("  %-52s %10.0f steps/s\n", "floor: the worker's SQL per step, no Kafka", floor_pg);
    printf("  %-52s %10.0f steps/s\n", "floor: ... with each saga's start, no Kafka", floor_saga);
    printf("  %-52s %10.0f steps/s  (%.0f%% of the SQL floor with starts, %.0f%% per step; "
           "target >= 5000)\n",
           "worker: backlog of 3-step sagas", rate, 100.0 * rate / floor_saga,
           100.0 * rate / floor_pg);
    printf("  %-52s %10.1f ms  (%d sagas over %d s, %d never completed)\n",
           "worker: saga.start -> saga.completed p50", lat.p50, lat.n + lat.missing, lat_secs,
           lat.missing);
    printf("  %-52s %10.1f ms  (target p99 <= 50)\n", "worker: saga.start -> saga.completed p99",
           lat.p99);
    for (int w = 0; w < LAT_WINDOWS; w++) {
        char num[32];
        size_t a = strlen(wins), b = strlen(wins_json);
        snprintf(wins + a, sizeof(wins) - a, "%s%.1f", w ? " / " : "", lat.win_p99[w]);
        snprintf(wins_json + b, sizeof(wins_json) - b, "%s%s", w ? ", " : "",
                 jnum(num, sizeof(num), lat.win_p99[w]));
    }
    printf("  %-52s %s ms\n", "  p99 of each third of the run", wins);
    for (int h = 0; h < NHOPS; h++) {
        char what[64];
        snprintf(what, sizeof(what), "  of which %s, p50 / p99", hop_names[h]);
        printf("  %-52s %6.1f / %5.1f ms\n", what, lat.hops[h][0], lat.hops[h][1]);
    }
    printf("  %-52s %10.0f steps/s\n", "worker: backlog of 3 echo steps, static args", rate_echo);
    printf("  %-52s %10.0f steps/s  (%+.1f%%; target: cost <= 10%%)\n",
           "worker: the same, b and c take the step before's result", rate_refs,
           rate_echo > 0 ? 100.0 * (rate_refs - rate_echo) / rate_echo : 0.0);
    if (group_runs > 0) {
        printf("  %-52s %10.0f steps/s  (%+.1f%% against the linear saga)\n",
               "worker: backlog, one group of 3 parallel noop calls", rate_group,
               rate > 0 ? 100.0 * (rate_group - rate) / rate : 0.0);
        printf("  %-52s %6.1f / %5.1f ms  (linear: %.1f / %.1f; %d never completed)\n",
               "worker: group saga start -> completed p50 / p99", lat_group.p50, lat_group.p99,
               lat.p50, lat.p99, lat_group.missing);
    }
    printf("  %-52s %10.1f MB  (target <= 64)\n", "worker: peak RSS", rss / 1024.0);
    printf("  %-52s %6.0f / %4.0f us\n", "worker process CPU per step, backlog / latency",
           1e6 * (wcpu1 - wcpu0) / ((double)n * STEPS),
           1e6 * (wcpu3 - wcpu2) / (lat_rate * (lat_secs + LAT_RAMP_S)));
    bench_print_cpu(52, "backlog / latency", &c0, &c1, &c2, &c3);

    if (system("mkdir -p bench/results") == 0 && (fp = fopen(result, "w"))) {
        fprintf(fp,
                "{\"tracing\": %s, \"relay_source\": \"%s\", \"worker_cpu_s_backlog\": %.2f, "
                "\"worker_cpu_s_latency\": %.2f, "
                "\"sagas\": %d, \"steps_per_saga\": %d, \"floor_consume_msgs_per_s\": %.0f, "
                "\"floor_sql_steps_per_s\": %.0f, \"floor_sql_saga_steps_per_s\": %.0f, "
                "\"worker_steps_per_s\": %.0f, "
                "\"latency_offered_steps_per_s\": %.0f, \"start_to_completed_p50_ms\": %s, "
                "\"start_to_completed_p99_ms\": %s, \"latency_window_p99_ms\": [%s], "
                "\"latency_samples\": %d, \"latency_never_completed\": %d, "
                "\"latency_ramp_s\": %d, \"latency_measured_s\": %d, "
                "\"worker_peak_rss_kb\": %ld, \"steal_pct_backlog\": %.1f, "
                "\"steal_pct_latency\": %.1f, \"busy_pct_backlog\": %.1f, "
                "\"busy_pct_latency\": %.1f, \"ours_pct_backlog\": %.1f, "
                "\"ours_pct_latency\": %.1f, \"echo_steps_per_s\": %.0f, "
                "\"echo_refs_steps_per_s\": %.0f, \"group_steps_per_s\": %.0f, "
                "\"group_start_to_completed_p50_ms\": %s, "
                "\"group_start_to_completed_p99_ms\": %s, \"time\": %.0f}\n",
                otel ? "true" : "false", relay_source, wcpu1 - wcpu0, wcpu3 - wcpu2, n, STEPS,
                floor_kafka, floor_pg, floor_saga, rate, lat_rate,
                jnum(p50s, sizeof(p50s), lat.p50), jnum(p99s, sizeof(p99s), lat.p99), wins_json,
                lat.n, lat.missing, LAT_RAMP_S, lat_secs, rss, bench_steal_pct(&c0, &c1),
                bench_steal_pct(&c2, &c3), bench_busy_pct(&c0, &c1), bench_busy_pct(&c2, &c3),
                bench_ours_pct(&c0, &c1), bench_ours_pct(&c2, &c3), rate_echo, rate_refs,
                rate_group, jnum(gp50s, sizeof(gp50s), group_runs > 0 ? lat_group.p50 : NAN),
                jnum(gp99s, sizeof(gp99s), group_runs > 0 ? lat_group.p99 : NAN), now_s());
        fclose(fp);
    }
    unlink(regpath);
    sg_pg_destroy(pg);
    bench_wal_drop();
    bench_drop_db(db);
    return 0;
}
