/* bench-flood: the worker's memory under a flood of large messages.
 *
 * SAGAD_BENCH_FLOOD (default 2,000) saga.start messages of about 1 MiB
 * each (SAGAD_BENCH_FLOOD_BYTES, default 1,040,000: an input that is an
 * array of small numbers, 520,000 JSON values) go to the commands topic
 * interleaved with as many normal 3-step sagas.  Each flood message holds
 * more values than limits.max_json_nodes, so it must end as a dead letter
 * and never be parsed; each normal saga must complete.  Printed: where
 * every message ended, the time it took, and the worker's peak RSS beside
 * what bounds it (worker.intake_max_bytes, librdkafka's prefetch of
 * queued.max.messages.kbytes, and the worker's RSS at rest).  Not a test:
 * nothing here passes or fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#define PREFETCH_KB 16384 /* the worker's queued.max.messages.kbytes (lib/infra/sg_kafka.c) */

static char dsn[512], cmd_topic[128], int_topic[128], ev_topic[128], dlq_topic[128], group[128],
    regpath[256];

static void write_registry(void)
{
    FILE *fp;

    snprintf(regpath, sizeof(regpath), "/tmp/sagad-bench-flood-tools-%d.json", (int)getpid());
    if (!(fp = fopen(regpath, "w")))
        die("registry", regpath);
    fputs("{\"v\":1,\"tools\":{\"noop\":{\"adapter\":\"builtin\",\"target\":\"noop\","
          "\"side_effect\":\"read\"}}}\n",
          fp);
    fclose(fp);
}

static pid_t start(const char *prog)
{
    const char *const topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};

    return bench_start_sagad(prog, dsn, regpath, topics, group, "error", NULL);
}

/* A saga.start of about size bytes whose input is [1,1,...,1]. */
static size_t flood_json(char *out, size_t size, int i)
{
    size_t n = (size_t)snprintf(out, size,
                                "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-f-%d\",\"saga_id\":"
                                "\"f-%d\",\"name\":\"flood\",\"steps\":[{\"name\":\"a\",\"tool\":"
                                "\"noop\"}],\"input\":[1",
                                i, i);

    while (n + 4 < size) {
        out[n++] = ',';
        out[n++] = '1';
    }
    out[n++] = ']';
    out[n++] = '}';
    return n;
}

static int normal_json(char *out, size_t size, const char *saga_id)
{
    return snprintf(out, size,
                    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-%s\",\"saga_id\":\"%s\","
                    "\"name\":\"bench\",\"steps\":[{\"name\":\"a\",\"tool\":\"noop\"},"
                    "{\"name\":\"b\",\"tool\":\"noop\"},{\"name\":\"c\",\"tool\":\"noop\"}]}",
                    saga_id, saga_id);
}

int main(void)
{
    int n = getenv("SAGAD_BENCH_FLOOD") ? atoi(getenv("SAGAD_BENCH_FLOOD")) : 2000;
    size_t bytes = getenv("SAGAD_BENCH_FLOOD_BYTES")
                       ? (size_t)atol(getenv("SAGAD_BENCH_FLOOD_BYTES"))
                       : 1040000;
    const char *extra[] = {"linger.ms", "5", "message.max.bytes", "2000000", NULL};
    long budget_kb = 65536 /* worker.intake_max_bytes's default */, rest_kb, peak_kb,
         max_rss_kb = 0;
    int64_t dead = 0, dead_nodes = 0, done = 0, flood_sagas = 0;
    double t0, elapsed;
    char db[64], *big;
    sg_kafka_t *p;
    pid_t relay, worker;
    sg_pg_t *pg;
    sg_err_t err;
    FILE *fp;

    bench_name = "bench-flood";
    if (n < 1 || bytes < 256 || bytes > 1048000)
        die("SAGAD_BENCH_FLOOD / SAGAD_BENCH_FLOOD_BYTES",
            "need at least 1 message of 256..1048000 bytes (limits.max_message_bytes is 1 MiB)");
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(cmd_topic, sizeof(cmd_topic), "bench_flood_cmd_%d", (int)getpid());
    snprintf(int_topic, sizeof(int_topic), "bench_flood_int_%d", (int)getpid());
    snprintf(ev_topic, sizeof(ev_topic), "bench_flood_ev_%d", (int)getpid());
    snprintf(dlq_topic, sizeof(dlq_topic), "bench_flood_dlq_%d", (int)getpid());
    snprintf(group, sizeof(group), "bench_flood_%d", (int)getpid());
    write_registry();
    p = kclient(SG_KAFKA_PRODUCER, extra);
    {
        const char *topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};
        for (int i = 0; i < 4; i++)
            if (sg_kafka_create_topic(p, topics[i], 3, 30000, &err) < 0)
                die("create topic", err.message);
    }
    relay = start("sagad-relay");
    worker = start("sagad-worker");
    sleep(4); /* the worker joins the group, the relay takes its shard */
    rest_kb = bench_rss_kb(worker, "VmRSS");

    fprintf(stderr, "bench-flood: %d messages of %zu bytes among %d normal sagas...\n", n, bytes,
            n);
    if (!(big = malloc(bytes + 1)))
        die("malloc", "flood message");
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        char id[32], json[1024];
        size_t len;
        int jl;

        snprintf(id, sizeof(id), "n-%d", i);
        jl = normal_json(json, sizeof(json), id);
        while (sg_kafka_produce(p, cmd_topic, id, strlen(id), json, (size_t)jl, NULL, 0, NULL,
                                &err) < 0)
            sg_kafka_poll(p, 10);
        snprintf(id, sizeof(id), "f-%d", i);
        len = flood_json(big, bytes + 1, i);
        while (sg_kafka_produce(p, cmd_topic, id, strlen(id), big, len, NULL, 0, NULL, &err) < 0)
            sg_kafka_poll(p, 10);
        sg_kafka_poll(p, 0);
        if (i % 50 == 0) {
            long kb = bench_rss_kb(worker, "VmRSS");
            max_rss_kb = kb > max_rss_kb ? kb : max_rss_kb;
        }
    }
    if (sg_kafka_flush(p, 120000, &err) < 0)
        die("flush", err.message);
    sg_kafka_destroy(p);
    free(big);

    /* Until every message has ended somewhere (bounded: 15 minutes). */
    for (double last = 0; now_s() - t0 < 900; usleep(200000)) {
        long kb = bench_rss_kb(worker, "VmRSS");
        max_rss_kb = kb > max_rss_kb ? kb : max_rss_kb;
        dead = query_int(pg, "SELECT count(*) FROM dead_letters");
        done = query_int(pg, "SELECT count(*) FROM sagas WHERE status = 'completed' AND saga_id "
                             "LIKE 'n-%'");
        if (dead + done >= 2 * n)
            break;
        if (now_s() - last >= 10) {
            fprintf(stderr, "bench-flood: %lld dead letters, %lld sagas completed, RSS %.0f MB\n",
                    (long long)dead, (long long)done, kb / 1024.0);
            last = now_s();
        }
    }
    elapsed = now_s() - t0;
    dead_nodes = query_int(pg, "SELECT count(*) FROM dead_letters WHERE error_code = "
                               "'input.json.too_many_nodes'");
    flood_sagas = query_int(pg, "SELECT count(*) FROM sagas WHERE saga_id LIKE 'f-%'");
    peak_kb = bench_rss_kb(worker, "VmHWM");
    bench_stop(worker);
    bench_stop(relay);

    printf("\nsagad-worker flood benchmark (%d messages of %zu bytes, [1,1,...], among %d normal "
           "3-step sagas)\n",
           n, bytes, n);
    printf("  %-52s %10lld of %d  (%lld as input.json.too_many_nodes)\n",
           "flood messages dead-lettered", (long long)dead, n, (long long)dead_nodes);
    printf("  %-52s %10lld of %d\n", "flood messages run as sagas", (long long)flood_sagas, n);
    printf("  %-52s %10lld of %d\n", "normal sagas completed", (long long)done, n);
    printf("  %-52s %10.1f s  (%.0f MB/s of messages)\n", "time from the first message to the last",
           elapsed, n * (double)bytes / 1048576.0 / elapsed);
    printf("  %-52s %10.1f MB\n", "worker: RSS at rest, before the flood", rest_kb / 1024.0);
    printf("  %-52s %10.1f MB  (sampled max %.1f MB)\n", "worker: peak RSS (VmHWM)",
           peak_kb / 1024.0, max_rss_kb / 1024.0);
    printf("  %-52s %10.1f MB  (at rest %.0f + intake budget %.0f + prefetch %.0f + the last "
           "message's charge, 4 x its size)\n",
           "  its bound", (rest_kb + budget_kb + PREFETCH_KB) / 1024.0 + 4 * bytes / 1048576.0,
           rest_kb / 1024.0, budget_kb / 1024.0, PREFETCH_KB / 1024.0);
    if (dead + flood_sagas != n || done != n)
        printf("  NOT EVERY MESSAGE ENDED: %lld of %d flood messages and %lld of %d sagas\n",
               (long long)(dead + flood_sagas), n, (long long)done, n);

    if (system("mkdir -p bench/results") == 0 && (fp = fopen("bench/results/flood.json", "w"))) {
        fprintf(fp,
                "{\"flood_messages\": %d, \"flood_bytes\": %zu, \"normal_sagas\": %d, "
                "\"dead_lettered\": %lld, \"dead_lettered_too_many_nodes\": %lld, "
                "\"flood_run_as_sagas\": %lld, \"normal_completed\": %lld, \"seconds\": %.1f, "
                "\"worker_rest_rss_kb\": %ld, \"worker_peak_rss_kb\": %ld, "
                "\"intake_max_bytes_kb\": %ld, \"prefetch_kb\": %d, \"time\": %.0f}\n",
                n, bytes, n, (long long)dead, (long long)dead_nodes, (long long)flood_sagas,
                (long long)done, elapsed, rest_kb, peak_kb, budget_kb, PREFETCH_KB, now_s());
        fclose(fp);
    }
    unlink(regpath);
    sg_pg_destroy(pg);
    bench_drop_db(db);
    return 0;
}
