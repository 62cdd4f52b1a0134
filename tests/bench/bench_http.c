/* make bench: sagad-worker with HTTP tools, beside the concurrency floor.
 *
 * One sagad-worker and a relay on this host call checkout-svc
 * (examples/checkout) with --delay-ms 50: every call takes at least 50 ms.
 * Sagas have 3 http steps (inventory, payment, shipping), one commands
 * partition, worker.max_in_flight = 200.  A backlog of sagas is timed until
 * every one completed:
 *   - steps/s, beside the floor concurrency / latency = 200 / 50 ms =
 *     4,000 steps/s (what calls one at a time per thread could never reach:
 *     16 threads would give 320);
 *   - p50/p99 of a saga's time from acceptance to completion (sagas
 *     table), beside the floor of 3 x 50 ms;
 *   - the worker's CPU seconds (utime + stime from /proc/PID/stat) per
 *     1,000 HTTP steps.
 * The same backlog on builtin noop tools first gives the worker's own
 * ceiling in this setup (one partition, 200 in flight), so the http figure
 * can be read against both.  Then the same three calls as one parallel
 * group (issue 40): a backlog, and both shapes offered at a pace with no
 * queue (PACED_N sagas at PACED_RATE a second), where a saga's p50 is what
 * its calls cost: about 3 x 50 ms in a line, about 50 ms in a group.
 * Prints a table and writes bench/results/http.json.  Not a test. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#define STEPS      3
#define IN_FLIGHT  200
#define DELAY_MS   50
#define PACED_N    300 /* sagas of each paced run */
#define PACED_RATE 20  /* sagas a second: 60 calls a second, no queue */

static char dsn[512], cmd_topic[128], int_topic[128], ev_topic[128], dlq_topic[128], group[128],
    regpath[256];
static char base[128];

/* A saga of 3 steps on tools prefix+reserve, prefix+charge, prefix+ship. */
static int saga_json(char *out, size_t size, const char *saga_id, const char *prefix)
{
    return snprintf(out, size,
                    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-%s\",\"saga_id\":\"%s\","
                    "\"name\":\"bench-http\",\"input\":{\"order\":\"%s\"},\"steps\":["
                    "{\"name\":\"reserve\",\"tool\":\"%sreserve\",\"args\":{\"sku\":\"B7\"}},"
                    "{\"name\":\"charge\",\"tool\":\"%scharge\",\"args\":{\"amount_cents\":100}},"
                    "{\"name\":\"ship\",\"tool\":\"%sship\",\"args\":{\"carrier\":\"dhl\"}}]}",
                    saga_id, saga_id, saga_id, prefix, prefix, prefix);
}

static int http_json(char *out, size_t size, const char *saga_id)
{
    return saga_json(out, size, saga_id, "");
}

static int noop_json(char *out, size_t size, const char *saga_id)
{
    return saga_json(out, size, saga_id, "noop.");
}

/* The same 3 http calls as one parallel group, all or nothing. */
static int group_json(char *out, size_t size, const char *saga_id)
{
    return snprintf(out, size,
                    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-%s\",\"saga_id\":\"%s\","
                    "\"name\":\"bench-http-group\",\"input\":{\"order\":\"%s\"},\"steps\":["
                    "{\"name\":\"g\",\"policy\":\"all_or_nothing\",\"parallel\":["
                    "{\"name\":\"reserve\",\"tool\":\"reserve\",\"args\":{\"sku\":\"B7\"}},"
                    "{\"name\":\"charge\",\"tool\":\"charge\",\"args\":{\"amount_cents\":100}},"
                    "{\"name\":\"ship\",\"tool\":\"ship\",\"args\":{\"carrier\":\"dhl\"}}]}]}",
                    saga_id, saga_id, saga_id);
}

static void write_registry(void)
{
    static const char *const tools[][2] = {{"reserve", "/inventory/reserve"},
                                           {"charge", "/payment/charge"},
                                           {"ship", "/shipping/book"}};
    FILE *fp;

    snprintf(regpath, sizeof(regpath), "/tmp/sagad-bench-http-tools-%d.json", (int)getpid());
    if (!(fp = fopen(regpath, "w")))
        die("registry", regpath);
    fputs("{\"v\":1,\"tools\":{", fp);
    for (int i = 0; i < 3; i++)
        fprintf(fp,
                "%s\"%s\":{\"adapter\":\"http\",\"target\":\"%s%s\",\"side_effect\":"
                "\"idempotent\",\"timeout_ms\":10000}",
                i ? "," : "", tools[i][0], base, tools[i][1]);
    /* The same sagas on builtin noop tools: the worker's own ceiling. */
    for (int i = 0; i < 3; i++)
        fprintf(fp,
                ",\"noop.%s\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":"
                "\"read\"}",
                tools[i][0]);
    fputs("}}\n", fp);
    fclose(fp);
}

/* checkout-svc on a free port, delaying every answer; its base URL. */
static pid_t start_checkout(void)
{
    static char delay[16];
    /* --no-checks: the ship step books without a reservation id. */
    char *const args[] = {"--listen", "127.0.0.1:0", "--delay-ms", delay, "--no-checks", NULL};
    char *const env[] = {NULL};
    static const char prefix[] = "checkout-svc listening on ";
    char line[256];
    size_t n = 0;
    int fd;
    pid_t pid;

    snprintf(delay, sizeof(delay), "%d", DELAY_MS);
    pid = bench_spawn_argv("checkout-svc", args, env, &fd);
    while (n + 1 < sizeof(line)) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 30000) <= 0 || read(fd, &line[n], 1) != 1)
            die("checkout-svc", "printed no listening line");
        if (line[n] == '\n')
            break;
        n++;
    }
    line[n] = '\0';
    close(fd); /* it prints nothing else on stdout */
    if (strncmp(line, prefix, strlen(prefix)) != 0)
        die("checkout-svc", line);
    snprintf(base, sizeof(base), "%s", line + strlen(prefix));
    return pid;
}

static pid_t start(const char *prog)
{
    static char in_flight[64];
    const char *const topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};
    const char *const extra[] = {in_flight, NULL};

    snprintf(in_flight, sizeof(in_flight), "SAGAD_WORKER_MAX_IN_FLIGHT=%d", IN_FLIGHT);
    return bench_start_sagad(prog, dsn, regpath, topics, group, "warn", extra);
}

/* utime + stime of pid, in seconds. */
static double cpu_s(pid_t pid)
{
    char path[64], buf[2048], *p;
    unsigned long long ut = 0, st = 0;
    FILE *fp;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(fp = fopen(path, "r")))
        die("cpu", path);
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    /* Fields 14 and 15, counted after the ")" that ends field 2. */
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        die("cpu", "cannot parse /proc/PID/stat");
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double quantile_ms(sg_pg_t *pg, const char *prefix, double q)
{
    char sql[400];

    snprintf(sql, sizeof(sql),
             "SELECT (1000 * percentile_cont(%.2f) WITHIN GROUP (ORDER BY extract(epoch FROM "
             "updated_at - created_at)))::bigint FROM sagas WHERE status = 'completed' AND "
             "saga_id LIKE '%s-%%'",
             q, prefix);
    return (double)query_int(pg, sql);
}

typedef struct run_s {
    double steps_per_s, cpu_s, p50, p99;
    int64_t completed;
} run_t;

/* n sagas (prefix-0 ..), all at once (rate 0: a backlog) or at rate a
 * second, timed until all finished. */
static void run_at(sg_pg_t *pg, pid_t worker, const char *prefix, int n, double rate,
                   bench_json_fn json_of, run_t *r)
{
    char sql[300];
    double t0, cpu0 = cpu_s(worker);

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM sagas WHERE status IN ('completed', 'compensated', 'failed') "
             "AND saga_id LIKE '%s-%%'",
             prefix);
    t0 = now_s();
    bench_produce(cmd_topic, prefix, n, rate, NULL, json_of);
    while (query_int(pg, sql) < n) {
        if (now_s() - t0 > 600)
            die("throughput", "sagas did not finish within 10 minutes");
        usleep(20000);
    }
    r->steps_per_s = (double)n * STEPS / (now_s() - t0);
    r->cpu_s = cpu_s(worker) - cpu0;
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM sagas WHERE status = 'completed' AND saga_id LIKE '%s-%%'",
             prefix);
    r->completed = query_int(pg, sql);
    r->p50 = quantile_ms(pg, prefix, 0.50);
    r->p99 = quantile_ms(pg, prefix, 0.99);
}

static void run(sg_pg_t *pg, pid_t worker, const char *prefix, int n, bench_json_fn json_of,
                run_t *r)
{
    run_at(pg, worker, prefix, n, 0, json_of, r);
}

int main(void)
{
    int n = getenv("SAGAD_BENCH_HTTP_SAGAS") ? atoi(getenv("SAGAD_BENCH_HTTP_SAGAS")) : 3000;
    double floor = IN_FLIGHT * 1000.0 / DELAY_MS, per_k;
    run_t noop, http, grp, paced_line, paced_grp;
    char db[64];
    pid_t svc, relay, worker;
    sg_pg_t *pg;
    sg_err_t err;
    FILE *fp;

    bench_name = "bench-http";
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(cmd_topic, sizeof(cmd_topic), "bench_http_cmd_%d", (int)getpid());
    snprintf(int_topic, sizeof(int_topic), "bench_http_int_%d", (int)getpid());
    snprintf(ev_topic, sizeof(ev_topic), "bench_http_ev_%d", (int)getpid());
    snprintf(dlq_topic, sizeof(dlq_topic), "bench_http_dlq_%d", (int)getpid());
    snprintf(group, sizeof(group), "bench_http_worker_%d", (int)getpid());
    {
        sg_kafka_t *k = kclient(SG_KAFKA_PRODUCER, NULL);
        const char *topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};
        for (int i = 0; i < 4; i++)
            if (sg_kafka_create_topic(k, topics[i], 1, 30000, &err) < 0)
                die("create topic", err.message);
        sg_kafka_destroy(k);
    }
    svc = start_checkout();
    write_registry();
    relay = start("sagad-relay");
    worker = start("sagad-worker");
    sleep(4); /* the worker joins the group, the relay takes its shard */

    fprintf(stderr,
            "bench-http: ceiling, %d sagas of %d builtin noop steps (in flight %d, 1 "
            "partition)...\n",
            n, STEPS, IN_FLIGHT);
    run(pg, worker, "noop", n, noop_json, &noop);
    fprintf(stderr, "bench-http: %d sagas of %d http steps to checkout-svc --delay-ms %d...\n", n,
            STEPS, DELAY_MS);
    run(pg, worker, "http", n, http_json, &http);
    fprintf(stderr, "bench-http: %d sagas of one parallel group of the same %d http calls...\n", n,
            STEPS);
    run(pg, worker, "group", n, group_json, &grp);
    fprintf(stderr, "bench-http: %d sagas at %d/s, in a line, then as a group...\n", PACED_N,
            PACED_RATE);
    run_at(pg, worker, "pline", PACED_N, PACED_RATE, http_json, &paced_line);
    run_at(pg, worker, "pgroup", PACED_N, PACED_RATE, group_json, &paced_grp);
    bench_stop(worker);
    bench_stop(relay);
    bench_stop(svc);
    per_k = http.cpu_s * 1000.0 / ((double)n * STEPS);

    printf("\nsagad-worker http benchmark (%d sagas of %d steps; http steps call checkout-svc "
           "--delay-ms %d; in flight %d; 1 partition; everything on this host)\n",
           n, STEPS, DELAY_MS, IN_FLIGHT);
    printf("  %-52s %10.0f steps/s\n", "floor: in flight / call latency (200 / 50 ms)", floor);
    printf("  %-52s %10.0f steps/s  (the worker's own ceiling here)\n",
           "same sagas on builtin noop tools", noop.steps_per_s);
    printf("  %-52s %10.0f steps/s  (%.0f%% of the floor, %.0f%% of the noop ceiling)\n",
           "http: backlog of 3-step sagas", http.steps_per_s, 100.0 * http.steps_per_s / floor,
           100.0 * http.steps_per_s / noop.steps_per_s);
    printf("  %-52s %10lld of %d\n", "http: sagas completed", (long long)http.completed, n);
    printf("  %-52s %10.0f ms  (noop %.0f ms; floor %d ms)\n",
           "http: saga accepted -> completed p50", http.p50, noop.p50, STEPS * DELAY_MS);
    printf("  %-52s %10.0f ms  (noop %.0f ms)\n", "http: saga accepted -> completed p99", http.p99,
           noop.p99);
    printf("  %-52s %10.3f s  (noop steps: %.3f s)\n", "http: worker CPU per 1,000 steps", per_k,
           noop.cpu_s * 1000.0 / ((double)n * STEPS));
    printf("  %-52s %10.0f steps/s  (%lld of %d completed)\n",
           "http as one parallel group of 3: backlog", grp.steps_per_s, (long long)grp.completed,
           n);
    printf("  %-52s %10.0f ms  (p99 %.0f; floor %d ms)\n", "paced, 3 calls in a line: p50",
           paced_line.p50, paced_line.p99, STEPS * DELAY_MS);
    printf("  %-52s %10.0f ms  (p99 %.0f; floor %d ms; target p50 < 80)\n",
           "paced, the same 3 as a parallel group: p50", paced_grp.p50, paced_grp.p99, DELAY_MS);

    if (system("mkdir -p bench/results") == 0 && (fp = fopen("bench/results/http.json", "w"))) {
        fprintf(fp,
                "{\"sagas\": %d, \"steps_per_saga\": %d, \"delay_ms\": %d, \"in_flight\": %d, "
                "\"partitions\": 1, \"floor_steps_per_s\": %.0f, \"noop_steps_per_s\": %.0f, "
                "\"http_steps_per_s\": %.0f, \"http_completed\": %lld, "
                "\"accepted_to_completed_p50_ms\": %.0f, \"accepted_to_completed_p99_ms\": %.0f, "
                "\"noop_accepted_to_completed_p99_ms\": %.0f, "
                "\"worker_cpu_s_per_1000_http_steps\": %.4f, "
                "\"worker_cpu_s_per_1000_noop_steps\": %.4f, \"group_steps_per_s\": %.0f, "
                "\"paced_rate\": %d, \"paced_line_p50_ms\": %.0f, \"paced_line_p99_ms\": %.0f, "
                "\"paced_group_p50_ms\": %.0f, \"paced_group_p99_ms\": %.0f, \"time\": %.0f}\n",
                n, STEPS, DELAY_MS, IN_FLIGHT, floor, noop.steps_per_s, http.steps_per_s,
                (long long)http.completed, http.p50, http.p99, noop.p99, per_k,
                noop.cpu_s * 1000.0 / ((double)n * STEPS), grp.steps_per_s, PACED_RATE,
                paced_line.p50, paced_line.p99, paced_grp.p50, paced_grp.p99, now_s());
        fclose(fp);
    }
    unlink(regpath);
    sg_pg_destroy(pg);
    bench_drop_db(db);
    return 0;
}
