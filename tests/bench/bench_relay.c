/* make bench: sagad-relay throughput and latency beside the raw floor.
 *
 * 1. floor: a plain idempotent librdkafka producer (acks=all) sending N
 *    200-byte messages, the best the relay could ever do here;
 * 2. drain: N rows already in the outbox, then sagad-relay started: rows/s
 *    until the cursor has published them all;
 * 3. latency: rows committed at a steady rate while the relay runs; each
 *    payload carries its commit time and a consumer measures commit to
 *    consume (an upper bound of commit to ack).
 * Prints a table and writes bench/results/relay.json.  Not a test: the
 * figures are reported, never asserted. */
#include <pthread.h>
#include <signal.h>
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

#define PAYLOAD 200

static char dsn[512], topic[128];

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

static pid_t relay_start(void)
{
    static char dsn_env[600], kafka_env[300];
    static char *env[] = {dsn_env, kafka_env, "SAGAD_LOG_LEVEL=warn", NULL};

    snprintf(dsn_env, sizeof(dsn_env), "SAGAD_PG_DSN=%s", dsn);
    snprintf(kafka_env, sizeof(kafka_env), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", kafka);
    return bench_spawn("sagad-relay", env);
}

static void relay_stop(pid_t pid)
{
    bench_stop(pid);
}

static double bench_drain(sg_pg_t *pg, long n)
{
    char count[32];
    const char *p[] = {topic, count};
    double t0;
    pid_t relay;

    snprintf(count, sizeof(count), "%ld", n);
    fprintf(stderr, "bench-relay: writing %ld outbox rows...\n", n);
    exec(pg,
         "INSERT INTO outbox (topic, key, payload) SELECT $1, convert_to('k' || (i % 1000), "
         "'UTF8'), convert_to(rpad(i::text, 200, 'x'), 'UTF8') FROM generate_series(1, "
         "$2::int) AS i",
         2, p);
    exec(pg, "VACUUM ANALYZE outbox", 0, NULL);
    t0 = now_s();
    relay = relay_start();
    while (query_int(pg, "SELECT coalesce(max(published), 0) FROM relay_cursors") < n) {
        usleep(100000);
        if (now_s() - t0 > 600)
            die("drain", "not drained in 600 s");
    }
    t0 = now_s() - t0;
    relay_stop(relay);
    return (double)n / t0;
}

typedef struct lat_s {
    double *ms;
    size_t n, want;
    volatile int stop;
} lat_t;

static void *consumer(void *arg)
{
    lat_t *lat = arg;
    char group[64];
    const char *extra[] = {"group.id", group, "fetch.wait.max.ms", "1", NULL};
    const char *topics[] = {topic};
    sg_kafka_t *c;
    sg_err_t err;

    snprintf(group, sizeof(group), "bench-%d", (int)getpid());
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

/* rate rows/s for secs seconds, 10 rows per transaction. */
static void bench_latency(sg_pg_t *pg, int rate, int secs, double *p50, double *p99)
{
    lat_t lat = {calloc((size_t)(rate * secs), sizeof(double)), 0, (size_t)(rate * secs), 0};
    pthread_t th;
    pid_t relay = relay_start();
    double t0, interval = 10.0 / rate;

    pthread_create(&th, NULL, consumer, &lat);
    sleep(3); /* the consumer joins its group, the relay takes its shard */
    t0 = now_s();
    for (int i = 0; i < rate * secs / 10; i++) {
        char ts[40];
        const char *p[] = {topic, ts};
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
    *p50 = lat.n ? lat.ms[lat.n / 2] : -1;
    *p99 = lat.n ? lat.ms[(size_t)((double)lat.n * 0.99)] : -1;
    fprintf(stderr, "bench-relay: latency samples %zu of %zu\n", lat.n, lat.want);
    free(lat.ms);
}

int main(void)
{
    long n = getenv("SAGAD_BENCH_ROWS") ? atol(getenv("SAGAD_BENCH_ROWS")) : 1000000;
    char db[64];
    double floor_rate, drain_rate, p50, p99;
    sg_pg_t *pg;
    sg_err_t err;
    FILE *fp;
    bench_cpu_t c0, c1, c2;

    bench_name = "bench-relay";
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(topic, sizeof(topic), "bench_relay_%d", (int)getpid());
    {
        sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
        if (sg_kafka_create_topic(k, topic, 1, 30000, &err) < 0)
            die("create topic", err.message);
        sg_kafka_destroy(k);
    }

    fprintf(stderr, "bench-relay: floor, %ld plain producer messages...\n", n);
    floor_rate = bench_floor(n);
    bench_cpu(&c0);
    drain_rate = bench_drain(pg, n);
    bench_cpu(&c1);
    fprintf(stderr, "bench-relay: latency at 2000 msg/s for 15 s...\n");
    bench_latency(pg, 2000, 15, &p50, &p99);
    bench_cpu(&c2);

    printf("\nsagad-relay benchmark (%ld rows of %d bytes, PostgreSQL and Kafka on this host)\n", n,
           PAYLOAD);
    printf("  %-44s %10.0f msg/s\n", "floor: plain librdkafka producer (acks=all)", floor_rate);
    printf("  %-44s %10.0f msg/s  (%.0f%% of floor; target >= 20000)\n", "relay: backlog drain",
           drain_rate, 100.0 * drain_rate / floor_rate);
    printf("  %-44s %10.1f ms\n", "relay: commit->consume p50 at 2000 msg/s", p50);
    printf("  %-44s %10.1f ms  (target p99 <= 25)\n", "relay: commit->consume p99 at 2000 msg/s",
           p99);
    bench_print_cpu(44, "drain / latency", &c0, &c1, &c1, &c2);

    if (system("mkdir -p bench/results") == 0 && (fp = fopen("bench/results/relay.json", "w"))) {
        fprintf(fp,
                "{\"rows\": %ld, \"payload_bytes\": %d, \"floor_producer_msgs_per_s\": %.0f, "
                "\"relay_drain_msgs_per_s\": %.0f, \"latency_rate_msgs_per_s\": 2000, "
                "\"commit_to_consume_p50_ms\": %.2f, \"commit_to_consume_p99_ms\": %.2f, "
                "\"steal_pct_drain\": %.1f, \"steal_pct_latency\": %.1f, \"time\": %.0f}\n",
                n, PAYLOAD, floor_rate, drain_rate, p50, p99, bench_steal_pct(&c0, &c1),
                bench_steal_pct(&c1, &c2), now_s());
        fclose(fp);
    }
    sg_pg_destroy(pg);
    bench_drop_db(db);
    return 0;
}
