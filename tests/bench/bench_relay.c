/* make bench: sagad-relay throughput and latency beside the raw floor, for
 * both of its sources (relay.source = table and wal) on the same services.
 *
 * 1. floor: a plain idempotent librdkafka producer (acks=all) sending N
 *    200-byte messages, the best the relay could ever do here;
 * 2. drain: N outgoing messages written before the relay starts, then
 *    sagad-relay started: msg/s until all N are published.
 *    - table: N rows in the outbox (one INSERT), done when the cursor has
 *      published them all;
 *    - wal: the relay is started once to make its slot and switch the
 *      source, and stopped; then writers INSERT the N rows (transactions
 *      of WAL_TX_ROWS), which the trigger writes into the WAL; the relay
 *      is started again and it is done when the topic's end offset (what a
 *      consumer can read) reaches N;
 *    - wal, exactly once: the same with relay.exactly_once (a Kafka
 *      transaction and a checkpoint per batch) into a topic of its own;
 *      its end offset counts each batch's commit marker too, so the drain
 *      is taken as done at most one batch early;
 *    beside: the WAL written per message (pg_current_wal_lsn() over the
 *    writes, and over the drain), and the CPU per 10,000 messages of the
 *    relay's PostgreSQL sessions (the walsender apart), the relay process
 *    and the broker during the drain (/proc/PID/stat utime + stime);
 * 3. latency: rows committed at a steady rate while the relay runs; each
 *    payload carries its commit time and a consumer measures commit to
 *    consume (an upper bound of commit to ack).
 * Prints a table and writes bench/results/relay.json (when both sources
 * ran).  Not a test: the figures are reported, never asserted.
 *
 * The WAL source needs the relay's login (REPLICATION; SAGAD_TEST_PG_URL_RELAY,
 * deploy/local/pg.sh url-relay).  Its slot is dropped at the end, and by
 * die() (through atexit) when the run fails: a slot left behind keeps the
 * WAL for ever and blocks DROP DATABASE. */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_kafka.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"
#include "bench_util.h"

#define PAYLOAD     200
#define WAL_TX_ROWS 10000 /* rows per writer transaction of the WAL source's backlog */
#define LAT_RATE    2000
#define LAT_SECS    15

static char dsn[512], topic[128], wal_topic[160], eos_topic[160], ck_topic[160];
static const char *relay_dsn, *slot; /* bench_wal_prepare() */

typedef enum source_e { SRC_TABLE, SRC_WAL, SRC_EOS, NSRC } source_t;
static const char *const source_names[] = {"table", "wal", "wal, exactly once"};
static const char *const source_keys[] = {"", "wal_", "wal_eos_"};

static bool is_wal(source_t src)
{
    return src != SRC_TABLE;
}

/* The topic the source's drain and latency use. */
static const char *topic_of(source_t src)
{
    return src == SRC_TABLE ? topic : src == SRC_WAL ? wal_topic : eos_topic;
}

/* Whose CPU the drain measures. */
typedef enum cpu_part_e {
    CPU_WALSENDER,
    CPU_BACKENDS,
    CPU_RELAY,
    CPU_BROKER,
    CPU_NPARTS
} cpu_part_t;
static const char *const cpu_part_names[] = {"walsender", "relay's PostgreSQL sessions",
                                             "relay process", "broker"};
static const char *const cpu_part_keys[] = {"walsender", "relay_backends", "relay", "broker"};

typedef struct cpu_seen_s {
    pid_t pid;
    cpu_part_t part;
    long long first, last; /* ticks (1/100 s) when first and last seen */
} cpu_seen_t;

typedef struct cpu_split_s {
    cpu_seen_t seen[32];
    size_t n;
} cpu_split_t;

typedef struct result_s {
    bool ran;
    double drain_rate, drain_s, write_rate;
    double wal_write_per_msg, wal_drain_per_msg;
    double cpu_ms_per_10k[CPU_NPARTS]; /* -1: not measured */
    double p50, p99;
    bench_cpu_t c0, c1, c2;
} result_t;

static double bench_floor(long n)
{
    const char *extra[] = {"linger.ms", "5", NULL};
    sg_kafka_t *p = kclient(SG_KAFKA_PRODUCER, extra);
    char payload[PAYLOAD], key[16], ftopic[160];
    sg_kafka_batch_t batch = {0};
    sg_err_t err;
    double t0;

    memset(payload, 'x', sizeof(payload));
    snprintf(ftopic, sizeof(ftopic), "%s_floor", topic);
    if (sg_kafka_create_topic(p, ftopic, 1, 30000, &err) < 0)
        die("create topic", err.message);
    t0 = now_s();
    for (long i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "k%ld", i % 1000);
        while (sg_kafka_produce(p, ftopic, key, strlen(key), payload, sizeof(payload), NULL, 0,
                                &batch, &err) < 0)
            sg_kafka_poll(p, 10);
        sg_kafka_poll(p, 0);
    }
    if (sg_kafka_flush(p, 120000, &err) < 0)
        die("flush", err.message);
    t0 = now_s() - t0;
    sg_kafka_destroy(p);
    return (double)batch.delivered / t0;
}

/* The relay of source src, at log level warn, then SAGAD_BENCH_ENV
 * (space-separated KEY=VALUE pairs, e.g. "SAGAD_RELAY_WAL_BATCH_SIZE=2000")
 * for tuning runs. */
static pid_t relay_start(source_t src)
{
    static char dsn_env[600], kafka_env[300], slot_env[128], ck_env[200], extra[2048];
    static char *env[48];
    size_t n = 0;

    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", is_wal(src) ? relay_dsn : dsn);
    snprintf(kafka_env, sizeof(kafka_env), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", kafka);
    snprintf(slot_env, sizeof(slot_env), "SAGAD_RELAY_SLOT=%s", slot);
    env[n++] = dsn_env;
    env[n++] = kafka_env;
    env[n++] = "SAGAD_LOG_LEVEL=warn";
    if (is_wal(src)) {
        env[n++] = "SAGAD_RELAY_SOURCE=wal";
        env[n++] = slot_env;
    }
    if (src == SRC_EOS) {
        snprintf(ck_env, sizeof(ck_env), "SAGAD_RELAY_CHECKPOINT_TOPIC=%s", ck_topic);
        env[n++] = "SAGAD_RELAY_EXACTLY_ONCE=true";
        env[n++] = ck_env;
    }
    if (getenv("SAGAD_BENCH_ENV")) {
        snprintf(extra, sizeof(extra), "%s", getenv("SAGAD_BENCH_ENV"));
        for (char *t = strtok(extra, " "); t && n < 46; t = strtok(NULL, " "))
            env[n++] = t;
    }
    env[n] = NULL;
    return bench_spawn("sagad-relay", env);
}

static void relay_stop(pid_t pid)
{
    bench_stop(pid);
}

static int64_t wal_lsn(sg_pg_t *pg)
{
    return query_int(pg, "SELECT (pg_current_wal_lsn() - '0/0')::bigint");
}

/* User + system ticks pid has used so far (not its children's); -1 when
 * gone. */
static long long proc_ticks(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    FILE *fp;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (pid <= 0 || !(fp = fopen(path, "r")))
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    /* after the command's closing parenthesis: state is field 3, utime 14 */
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* Notes pid's CPU so far.  A process born during the drain (the relay,
 * its sessions) counts from zero, one already running (the broker) from
 * when it was first seen.  A session once seen streaming from the slot
 * counts as the walsender for the whole drain. */
static void cpu_note(cpu_split_t *cs, pid_t pid, cpu_part_t part, bool born_now)
{
    long long t = proc_ticks(pid);
    size_t i;

    if (t < 0)
        return;
    for (i = 0; i < cs->n && cs->seen[i].pid != pid; i++)
        ;
    if (i == cs->n) {
        if (cs->n == sizeof(cs->seen) / sizeof(cs->seen[0]))
            return;
        cs->seen[cs->n++] = (cpu_seen_t){pid, part, born_now ? 0 : t, t};
        return;
    }
    if (t > cs->seen[i].last)
        cs->seen[i].last = t;
    /* The replication session is a plain one until it starts streaming
     * from the slot. */
    if (part == CPU_WALSENDER)
        cs->seen[i].part = part;
}

/* The relay's PostgreSQL sessions on the benchmark's database: every
 * client backend and walsender not the benchmark's own; the walsender is
 * the one streaming from the slot (pg_replication_slots.active_pid).  pg
 * must be a session of the relay's login: pg_stat_activity shows another
 * role's sessions without their database. */
static void cpu_sample(sg_pg_t *pg, cpu_split_t *cs, pid_t relay)
{
    const char *p[] = {slot};
    sg_pg_res_t *res;
    sg_err_t err;

    if (sg_pg_exec(pg,
                   "SELECT a.pid, coalesce(a.pid = s.active_pid, false) FROM pg_stat_activity a "
                   "LEFT JOIN pg_replication_slots s ON s.slot_name = $1 "
                   "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() "
                   "AND a.backend_type IN ('client backend', 'walsender') "
                   "AND a.application_name <> 'sagad-bench'",
                   1, p, &res, &err) < 0)
        die("sessions", err.message);
    for (size_t i = 0; i < sg_pg_res_rows(res); i++)
        cpu_note(cs, (pid_t)sg_pg_res_int(res, i, 0, 0),
                 strcmp(sg_pg_res_get(res, i, 1), "t") == 0 ? CPU_WALSENDER : CPU_BACKENDS, true);
    sg_pg_res_destroy(res);
    cpu_note(cs, relay, CPU_RELAY, true);
}

/* The broker's pid, from the file deploy/local/kafka.sh keeps; 0 when not
 * known. */
static pid_t broker_pid(void)
{
    const char *dir = getenv("SAGAD_LOCAL_KAFKA_DIR");
    char path[600];
    long pid = 0;
    FILE *fp;

    snprintf(path, sizeof(path), "%s/kafka.pid", dir ? dir : ".run/kafka");
    if ((fp = fopen(path, "r"))) {
        if (fscanf(fp, "%ld", &pid) != 1)
            pid = 0;
        fclose(fp);
    }
    return (pid_t)pid;
}

static void cpu_result(const cpu_split_t *cs, long n, result_t *r)
{
    long long ticks[CPU_NPARTS] = {0};
    bool seen[CPU_NPARTS] = {false};

    for (size_t i = 0; i < cs->n; i++) {
        ticks[cs->seen[i].part] += cs->seen[i].last - cs->seen[i].first;
        seen[cs->seen[i].part] = true;
    }
    for (int k = 0; k < CPU_NPARTS; k++)
        r->cpu_ms_per_10k[k] = seen[k] ? (double)ticks[k] * 10.0 * 10000.0 / (double)n : -1;
}

static void drain_table(sg_pg_t *pg, long n, result_t *r)
{
    char count[32];
    const char *p[] = {topic, count};
    cpu_split_t cs = {.n = 0};
    int64_t lsn0, lsn1, lsn2;
    double t0;
    pid_t relay;

    snprintf(count, sizeof(count), "%ld", n);
    fprintf(stderr, "bench-relay: table: writing %ld outbox rows...\n", n);
    lsn0 = wal_lsn(pg);
    t0 = now_s();
    exec(pg,
         "INSERT INTO outbox (topic, key, payload) SELECT $1, convert_to('k' || (i % 1000), "
         "'UTF8'), convert_to(rpad(i::text, 200, 'x'), 'UTF8') FROM generate_series(1, "
         "$2::int) AS i",
         2, p);
    r->write_rate = (double)n / (now_s() - t0);
    r->wal_write_per_msg = (double)(wal_lsn(pg) - lsn0) / (double)n;
    exec(pg, "VACUUM ANALYZE outbox", 0, NULL);
    lsn1 = wal_lsn(pg);
    cpu_note(&cs, broker_pid(), CPU_BROKER, false);
    t0 = now_s();
    relay = relay_start(SRC_TABLE);
    while (query_int(pg, "SELECT coalesce(max(published), 0) FROM relay_cursors") < n) {
        usleep(100000);
        cpu_sample(pg, &cs, relay);
        if (now_s() - t0 > 600)
            die("drain", "not drained in 600 s");
    }
    r->drain_s = now_s() - t0;
    cpu_sample(pg, &cs, relay);
    cpu_note(&cs, broker_pid(), CPU_BROKER, false);
    lsn2 = wal_lsn(pg);
    relay_stop(relay);
    r->drain_rate = (double)n / r->drain_s;
    r->wal_drain_per_msg = (double)(lsn2 - lsn1) / (double)n;
    cpu_result(&cs, n, r);
}

/* Waits until query (one integer) answers at least want; dies after
 * secs. */
static void wait_for(sg_pg_t *pg, const char *sql, int64_t want, double secs, const char *what)
{
    double t0 = now_s();

    while (query_int(pg, sql) < want) {
        if (now_s() - t0 > secs)
            die(what, "timed out");
        usleep(100000);
    }
}

/* The relay makes its slot and switches the source on its first start;
 * stopped once it streams, so that the backlog is written into the WAL
 * by the writers' INSERTs, not moved there by the switch. */
static void wal_prepare(sg_pg_t *pg, source_t src)
{
    char sql[400];
    pid_t relay = relay_start(src);

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_replication_slots s, relay_settings r "
             "WHERE s.slot_name = '%s' AND s.active_pid IS NOT NULL "
             "AND r.source = 'wal' AND r.wal_slot = s.slot_name",
             slot);
    wait_for(pg, sql, 1, 60, "the WAL relay's first start");
    relay_stop(relay);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '%s' "
             "AND active_pid IS NULL",
             slot);
    wait_for(pg, sql, 1, 30, "the walsender's exit");
}

static void drain_wal(sg_pg_t *pg, source_t src, long n, result_t *r)
{
    const char *t = topic_of(src);
    sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
    sg_pg_t *mon = bench_connect(relay_dsn);
    cpu_split_t cs = {.n = 0};
    int64_t lsn0, lsn1, lsn2, low, high = 0;
    double t0;
    pid_t relay;
    sg_err_t err;

    if (sg_kafka_create_topic(k, t, 1, 30000, &err) < 0)
        die("create topic", err.message);
    wal_prepare(pg, src);
    fprintf(stderr, "bench-relay: %s: writing %ld messages, %d per transaction...\n",
            source_names[src], n, WAL_TX_ROWS);
    lsn0 = wal_lsn(pg);
    t0 = now_s();
    for (long i = 1; i <= n; i += WAL_TX_ROWS) {
        char from[24], to[24];
        const char *p[] = {t, from, to};

        snprintf(from, sizeof(from), "%ld", i);
        snprintf(to, sizeof(to), "%ld", i + WAL_TX_ROWS - 1 < n ? i + WAL_TX_ROWS - 1 : n);
        exec(pg,
             "INSERT INTO outbox (topic, key, payload) SELECT $1, convert_to('k' || (i % 1000), "
             "'UTF8'), convert_to(rpad(i::text, 200, 'x'), 'UTF8') FROM generate_series($2::int, "
             "$3::int) AS i",
             3, p);
    }
    r->write_rate = (double)n / (now_s() - t0);
    lsn1 = wal_lsn(pg);
    r->wal_write_per_msg = (double)(lsn1 - lsn0) / (double)n;
    if (query_int(pg, "SELECT count(*) FROM outbox") != 0)
        die("wal", "the writers' rows stayed in the outbox table: the source is not wal");
    cpu_note(&cs, broker_pid(), CPU_BROKER, false);
    t0 = now_s();
    relay = relay_start(src);
    while (high < n) {
        usleep(100000);
        cpu_sample(mon, &cs, relay);
        if (sg_kafka_query_watermarks(k, t, 0, 5000, &low, &high) < 0)
            high = 0;
        if (now_s() - t0 > 600)
            die("drain", "not drained in 600 s");
    }
    r->drain_s = now_s() - t0;
    cpu_sample(mon, &cs, relay);
    cpu_note(&cs, broker_pid(), CPU_BROKER, false);
    lsn2 = wal_lsn(pg);
    relay_stop(relay);
    sg_pg_destroy(mon);
    sg_kafka_destroy(k);
    r->drain_rate = (double)n / r->drain_s;
    r->wal_drain_per_msg = (double)(lsn2 - lsn1) / (double)n;
    cpu_result(&cs, n, r);
}

typedef struct lat_s {
    double *ms;
    size_t n, want;
    const char *topic;
    volatile int stop;
} lat_t;

static void *consumer(void *arg)
{
    lat_t *lat = arg;
    char group[64];
    const char *extra[] = {"group.id", group, "fetch.wait.max.ms", "1", NULL};
    const char *topics[] = {lat->topic};
    sg_kafka_t *c;
    sg_err_t err;

    snprintf(group, sizeof(group), "bench-%d-%s", (int)getpid(), lat->topic);
    c = kclient(SG_KAFKA_CONSUMER, extra);
    if (sg_kafka_subscribe(c, topics, 1, &err) < 0)
        die("subscribe", err.message);
    while (!lat->stop && lat->n < lat->want) {
        sg_kafka_msg_t *msg;
        size_t len;
        const char *data;
        double sent;

        if (sg_kafka_consume(c, 100, &msg, &err) != 1)
            continue;
        data = sg_kafka_msg_payload(msg, &len);
        if (len > 2 && data[0] == 'L' && sscanf(data + 1, "%lf", &sent) == 1)
            lat->ms[lat->n++] = (now_s() - sent) * 1000.0;
        sg_kafka_msg_destroy(msg);
    }
    sg_kafka_destroy(c);
    return NULL;
}

/* rate rows/s for secs seconds, 10 rows per transaction, to the topic
 * the source's drain used. */
static void bench_latency(sg_pg_t *pg, source_t src, int rate, int secs, result_t *r)
{
    const char *t = topic_of(src);
    lat_t lat = {calloc((size_t)(rate * secs), sizeof(double)), 0, (size_t)(rate * secs), t, 0};
    pthread_t th;
    pid_t relay = relay_start(src);
    double t0, interval = 10.0 / rate;

    pthread_create(&th, NULL, consumer, &lat);
    sleep(3); /* the consumer joins its group, the relay takes its shard or slot */
    t0 = now_s();
    for (int i = 0; i < rate * secs / 10; i++) {
        char ts[40];
        const char *p[] = {t, ts};
        double due = t0 + i * interval;

        while (now_s() < due)
            usleep(200);
        /* The commit time is taken just before the statement; the insert
         * is autocommit, so the row commits with it. */
        snprintf(ts, sizeof(ts), "L%.6f", now_s());
        exec(pg,
             "INSERT INTO outbox (topic, key, payload) SELECT $1, convert_to('k' || g, 'UTF8'), "
             "convert_to(rpad($2, 200, ' '), 'UTF8') FROM generate_series(1, 10) AS g",
             2, p);
    }
    for (int i = 0; i < 300 && lat.n < lat.want; i++)
        usleep(100000);
    lat.stop = 1;
    pthread_join(th, NULL);
    relay_stop(relay);
    qsort(lat.ms, lat.n, sizeof(double), cmp_double);
    r->p50 = lat.n ? lat.ms[lat.n / 2] : -1;
    r->p99 = lat.n ? lat.ms[(size_t)((double)lat.n * 0.99)] : -1;
    fprintf(stderr, "bench-relay: %s: latency samples %zu of %zu\n", source_names[src], lat.n,
            lat.want);
    free(lat.ms);
}

static void run_source(sg_pg_t *pg, source_t src, long n, result_t *r)
{
    r->ran = true;
    bench_cpu(&r->c0);
    if (is_wal(src))
        drain_wal(pg, src, n, r);
    else
        drain_table(pg, n, r);
    bench_cpu(&r->c1);
    fprintf(stderr, "bench-relay: %s: drained at %.0f msg/s; latency at %d msg/s for %d s...\n",
            source_names[src], r->drain_rate, LAT_RATE, LAT_SECS);
    bench_latency(pg, src, LAT_RATE, LAT_SECS, r);
    bench_cpu(&r->c2);
}

/* One line of the side-by-side table: "-" for a source not run or a
 * figure not measured (negative). */
static void print_row(const char *label, const char *fmt, const result_t res[NSRC],
                      const double v[NSRC])
{
    printf("  %-52s", label);
    for (int s = 0; s < NSRC; s++) {
        char cell[32];

        snprintf(cell, sizeof(cell), fmt, v[s]);
        printf(" %18s", res[s].ran && v[s] >= 0 ? cell : "-");
    }
    printf("\n");
}

static void print_results(long n, double floor_rate, const result_t res[NSRC])
{
    printf("\nsagad-relay benchmark (%ld messages of %d bytes, PostgreSQL and Kafka on this "
           "host)\n",
           n, PAYLOAD);
    printf("  %-52s %12.0f msg/s\n", "floor: plain librdkafka producer (acks=all)", floor_rate);
    printf("  %-52s %18s %18s %18s\n", "relay.source", source_names[0], source_names[1],
           source_names[2]);
#define ROW(label, fmt, field)                                                                     \
    print_row(label, fmt, res, (const double[NSRC]){res[0].field, res[1].field, res[2].field})
    ROW("drain, msg/s", "%.0f", drain_rate);
    ROW("  the writers' INSERTs before it, msg/s", "%.0f", write_rate);
    ROW("commit->consume p50 at 2000 msg/s, ms", "%.1f", p50);
    ROW("commit->consume p99 at 2000 msg/s, ms", "%.1f", p99);
    ROW("WAL bytes per message, the writers' INSERTs", "%.0f", wal_write_per_msg);
    ROW("WAL bytes per message, during the drain", "%.0f", wal_drain_per_msg);
    for (int k = 0; k < CPU_NPARTS; k++) {
        char label[96];

        snprintf(label, sizeof(label), "CPU ms per 10,000 msgs in the drain: %s",
                 cpu_part_names[k]);
        ROW(label, "%.1f", cpu_ms_per_10k[k]);
    }
#undef ROW
    printf("  (targets, issue 40: wal drain >= 2x Debezium's warm drain, docs/PERFORMANCE.md; "
           "wal p99 <= 5 ms)\n");
    for (int s = 0; s < NSRC; s++) {
        char phases[64];

        if (!res[s].ran)
            continue;
        snprintf(phases, sizeof(phases), "%s: drain / latency", source_names[s]);
        bench_print_cpu(52, phases, &res[s].c0, &res[s].c1, &res[s].c1, &res[s].c2);
    }
}

static void json_source(FILE *fp, const char *prefix, const result_t *r)
{
    fprintf(fp,
            "\"%sdrain_msgs_per_s\": %.0f, \"%swrite_msgs_per_s\": %.0f, "
            "\"%scommit_to_consume_p50_ms\": %.2f, \"%scommit_to_consume_p99_ms\": %.2f, "
            "\"%swal_bytes_per_msg_writes\": %.1f, \"%swal_bytes_per_msg_drain\": %.1f, ",
            prefix, r->drain_rate, prefix, r->write_rate, prefix, r->p50, prefix, r->p99, prefix,
            r->wal_write_per_msg, prefix, r->wal_drain_per_msg);
    for (int k = 0; k < CPU_NPARTS; k++)
        if (r->cpu_ms_per_10k[k] >= 0)
            fprintf(fp, "\"%scpu_ms_per_10k_%s\": %.1f, ", prefix, cpu_part_keys[k],
                    r->cpu_ms_per_10k[k]);
    fprintf(fp, "\"%ssteal_pct_drain\": %.1f, \"%ssteal_pct_latency\": %.1f, ", prefix,
            bench_steal_pct(&r->c0, &r->c1), prefix, bench_steal_pct(&r->c1, &r->c2));
}

/* The table source's keys are those of earlier runs (no prefix). */
static void write_json(long n, double floor_rate, const result_t res[NSRC])
{
    double load[3] = {-1, -1, -1};
    FILE *fp;

    FILE *la = fopen("/proc/loadavg", "r");

    if (la) {
        if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = load[1] = load[2] = -1;
        fclose(la);
    }
    if (system("mkdir -p bench/results") != 0 || !(fp = fopen("bench/results/relay.json", "w")))
        return;
    {
        fprintf(fp,
                "{\"rows\": %ld, \"payload_bytes\": %d, \"floor_producer_msgs_per_s\": %.0f, "
                "\"latency_rate_msgs_per_s\": %d, \"wal_tx_rows\": %d, ",
                n, PAYLOAD, floor_rate, LAT_RATE, WAL_TX_ROWS);
        fprintf(fp, "\"relay_drain_msgs_per_s\": %.0f, ", res[SRC_TABLE].drain_rate);
        for (int s = 0; s < NSRC; s++)
            if (res[s].ran)
                json_source(fp, source_keys[s], &res[s]);
        fprintf(fp, "\"loadavg_at_end\": [%.2f, %.2f, %.2f], \"time\": %.0f}\n", load[0], load[1],
                load[2], now_s());
        fclose(fp);
    }
}

int main(void)
{
    long n = getenv("SAGAD_BENCH_ROWS") ? atol(getenv("SAGAD_BENCH_ROWS")) : 1000000;
    const char *sources = getenv("SAGAD_BENCH_RELAY_SOURCES");
    result_t res[NSRC];
    char db[64];
    double floor_rate;
    sg_pg_t *pg;
    sg_err_t err;

    memset(res, 0, sizeof(res));
    if (!sources)
        sources = "table,wal,eos";
    bench_name = "bench-relay";
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    slot = bench_wal_prepare(dsn);
    relay_dsn = bench_wal_dsn();
    snprintf(topic, sizeof(topic), "bench_relay_%d", (int)getpid());
    snprintf(wal_topic, sizeof(wal_topic), "%s_wal", topic);
    snprintf(eos_topic, sizeof(eos_topic), "%s_eos", topic);
    snprintf(ck_topic, sizeof(ck_topic), "%s_checkpoints", topic);
    {
        sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
        if (sg_kafka_create_topic(k, topic, 1, 30000, &err) < 0 ||
            sg_kafka_create_topic(k, ck_topic, 1, 30000, &err) < 0)
            die("create topic", err.message);
        sg_kafka_destroy(k);
    }

    fprintf(stderr, "bench-relay: floor, %ld plain producer messages...\n", n);
    floor_rate = bench_floor(n);
    /* The table first: the WAL source's switch routes every later INSERT
     * into the WAL. */
    if (strstr(sources, "table"))
        run_source(pg, SRC_TABLE, n, &res[SRC_TABLE]);
    if (strstr(sources, "wal"))
        run_source(pg, SRC_WAL, n, &res[SRC_WAL]);
    if (strstr(sources, "eos"))
        run_source(pg, SRC_EOS, n, &res[SRC_EOS]);
    print_results(n, floor_rate, res);
    if (res[SRC_TABLE].ran && res[SRC_WAL].ran)
        write_json(n, floor_rate, res);
    bench_wal_drop();
    sg_pg_destroy(pg);
    bench_drop_db(db);
    return 0;
}
