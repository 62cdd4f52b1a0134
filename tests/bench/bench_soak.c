/* bench-soak: the tables stay bounded when sagas run for a long time.
 *
 * The real sagad-worker and sagad-relay run sagas submitted at a steady
 * rate (SOAK_RATE per second, default 100) for SOAK_SECONDS
 * (default 1200), with horizons of minutes (SOAK_HORIZON_S, default
 * 120, for sagas and dead letters alike) and the relay's janitor passing
 * every SOAK_INTERVAL_MS (default 15000).  Each saga is three steps
 * (noop, the builtin ledger, noop); 2% fail their last step and are
 * compensated; 1% of the messages are not JSON and become dead letters,
 * which this program discards each minute as an operator would (a pending
 * dead letter is never removed), so they expire too.
 *
 * Every minute it prints, per table, the rows, heap and index sizes and
 * dead tuples, then the worker's and the relay's RSS, the sagas finished
 * in that minute and the p99 from send to finish (the send time travels in
 * the saga's input).  The same figures go to bench/results/soak.tsv.
 * Nothing here passes or fails: the tables must plateau once the horizon
 * has passed, and the last lines say how much they moved in the second
 * half of the run. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"

static const char *const tables[] = {"sagas",  "steps",        "attempts", "outbox",
                                     "timers", "dead_letters", "replays",  "builtin_ledger"};
#define NTABLES (sizeof(tables) / sizeof(tables[0]))
#define MAXMIN  1000

static char dsn[512], cmd_topic[128], int_topic[128], ev_topic[128], dlq_topic[128], group[128],
    regpath[256];
static char horizon[32], interval[32];

typedef struct minute_s {
    long long rows[NTABLES], heap_kb[NTABLES], index_kb[NTABLES], dead[NTABLES];
    long worker_kb, relay_kb;
    long long finished, sent;
    double p99_ms;
} minute_t;

static minute_t mins[MAXMIN + 1];

static void write_registry(void)
{
    FILE *fp;

    snprintf(regpath, sizeof(regpath), "/tmp/sagad-bench-soak-tools-%d.json", (int)getpid());
    if (!(fp = fopen(regpath, "w")))
        die("registry", regpath);
    fputs("{\"v\":1,\"tools\":{"
          "\"noop\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":\"read\"},"
          "\"ledger\":{\"adapter\":\"builtin\",\"target\":\"ledger\","
          "\"side_effect\":\"idempotent\"},"
          "\"fail\":{\"adapter\":\"builtin\",\"target\":\"fail\",\"side_effect\":\"read\"}}}\n",
          fp);
    fclose(fp);
}

static pid_t start(const char *prog)
{
    static char e[4][64];
    const char *const topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};
    const char *const extra[] = {e[0], e[1], e[2], e[3], NULL};

    snprintf(e[0], sizeof(e[0]), "SAGAD_RETENTION_SAGAS_S=%s", horizon);
    snprintf(e[1], sizeof(e[1]), "SAGAD_RETENTION_DEDUP_WINDOW_S=%s", horizon);
    snprintf(e[2], sizeof(e[2]), "SAGAD_RETENTION_DEAD_LETTERS_S=%s", horizon);
    snprintf(e[3], sizeof(e[3]), "SAGAD_RETENTION_INTERVAL_MS=%s", interval);
    return bench_start_sagad(prog, dsn, regpath, topics, group, "error", extra);
}

/* Message i: one in 100 is not JSON, one in 50 of the rest fails its last
 * step; the send time (ms since the epoch) is the saga's input. */
static int soak_json(char *out, size_t size, long i, double sent_s)
{
    if (i % 100 == 99)
        return snprintf(out, size, "not json %ld", i);
    return snprintf(out, size,
                    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-s-%ld\",\"saga_id\":\"s-%ld\","
                    "\"name\":\"soak\",\"input\":{\"sent_ms\":%.0f},\"steps\":["
                    "{\"name\":\"a\",\"tool\":\"noop\"},{\"name\":\"b\",\"tool\":\"ledger\"},"
                    "{\"name\":\"c\",\"tool\":\"%s\"}]}",
                    i, i, sent_s * 1000.0, i % 50 == 49 ? "fail" : "noop");
}

static long long q(sg_pg_t *pg, const char *fmt, const char *table)
{
    char text[512];

    snprintf(text, sizeof(text), fmt, table, table);
    return query_int(pg, text);
}

/* The figures of the minute that just ended. */
static void sample(sg_pg_t *pg, minute_t *m, pid_t worker, pid_t relay)
{
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    for (size_t t = 0; t < NTABLES; t++) {
        m->rows[t] = q(pg, "SELECT count(*) FROM %s", tables[t]);
        m->heap_kb[t] = q(pg, "SELECT pg_table_size('%s') / 1024", tables[t]);
        m->index_kb[t] = q(pg, "SELECT pg_indexes_size('%s') / 1024", tables[t]);
        m->dead[t] =
            q(pg, "SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relname = '%s'",
              tables[t]);
    }
    m->worker_kb = bench_rss_kb(worker, "VmRSS");
    m->relay_kb = bench_rss_kb(relay, "VmRSS");
    if (sg_pg_exec(pg,
                   "SELECT count(*), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY "
                   "extract(epoch FROM updated_at) * 1000 - (input->>'sent_ms')::float8), 0) "
                   "FROM sagas WHERE status IN ('completed', 'compensated') "
                   "AND updated_at >= now() - interval '60 seconds'",
                   0, NULL, &res, &err) < 0)
        die("p99", err.message);
    m->finished = sg_pg_res_int(res, 0, 0, 0);
    m->p99_ms = strtod(sg_pg_res_get(res, 0, 1), NULL);
    sg_pg_res_destroy(res);
}

static void print_minute(int k, const minute_t *m, FILE *tsv)
{
    printf("\nsoak minute %d: %lld sent, %lld sagas finished (%.1f/s), p99 send to finish %.0f "
           "ms, worker RSS %.1f MB, relay RSS %.1f MB\n",
           k, m->sent, m->finished, m->finished / 60.0, m->p99_ms, m->worker_kb / 1024.0,
           m->relay_kb / 1024.0);
    printf("  %-16s %10s %10s %10s %10s\n", "table", "rows", "heap kB", "index kB", "dead tup");
    for (size_t t = 0; t < NTABLES; t++) {
        printf("  %-16s %10lld %10lld %10lld %10lld\n", tables[t], m->rows[t], m->heap_kb[t],
               m->index_kb[t], m->dead[t]);
        if (tsv)
            fprintf(tsv, "%d\t%s\t%lld\t%lld\t%lld\t%lld\t%ld\t%ld\t%lld\t%.0f\n", k, tables[t],
                    m->rows[t], m->heap_kb[t], m->index_kb[t], m->dead[t], m->worker_kb,
                    m->relay_kb, m->finished, m->p99_ms);
    }
    fflush(stdout);
    if (tsv)
        fflush(tsv);
}

static void discard_pending(sg_pg_t *pg)
{
    exec(pg,
         "SELECT sagad_dlq_discard(id, 'bench-soak', 'soak: an operator handles the entry') "
         "FROM dead_letters WHERE status = 'pending'",
         0, NULL);
}

/* Sum of heap and index kB over the tables the janitor governs. */
static long long kept_kb(const minute_t *m)
{
    long long kb = 0;

    for (size_t t = 0; t < NTABLES; t++)
        kb += m->heap_kb[t] + m->index_kb[t];
    return kb;
}

static void summary(int last, int horizon_s)
{
    int mid = last / 2, settled = horizon_s / 60 + 2;

    printf("\nsagad soak: %d minutes, horizons %d s\n", last, horizon_s);
    printf("  %-16s %12s %12s %12s   (heap + index kB; rows)\n", "table", "minute 1", "middle",
           "end");
    for (size_t t = 0; t < NTABLES; t++)
        printf("  %-16s %6lld %5lld %6lld %5lld %6lld %5lld\n", tables[t],
               mins[1].heap_kb[t] + mins[1].index_kb[t], mins[1].rows[t],
               mins[mid].heap_kb[t] + mins[mid].index_kb[t], mins[mid].rows[t],
               mins[last].heap_kb[t] + mins[last].index_kb[t], mins[last].rows[t]);
    printf("  %-16s %6.1f MB %6.1f MB %6.1f MB\n", "worker RSS", mins[1].worker_kb / 1024.0,
           mins[mid].worker_kb / 1024.0, mins[last].worker_kb / 1024.0);
    printf("  %-16s %6.1f MB %6.1f MB %6.1f MB\n", "relay RSS", mins[1].relay_kb / 1024.0,
           mins[mid].relay_kb / 1024.0, mins[last].relay_kb / 1024.0);
    if (last >= 2 * settled) {
        long long a = kept_kb(&mins[mid]), b = kept_kb(&mins[last]);
        printf("  all tables, heap + index: %lld kB at minute %d, %lld kB at minute %d (%+.1f%%)\n",
               a, mid, b, last, a ? 100.0 * (double)(b - a) / (double)a : 0.0);
    } else {
        printf("  run shorter than twice the horizon plus two minutes: no plateau to compare\n");
    }
}

int main(void)
{
    int seconds = getenv("SOAK_SECONDS") ? atoi(getenv("SOAK_SECONDS")) : 1200;
    double rate = getenv("SOAK_RATE") ? atof(getenv("SOAK_RATE")) : 100;
    int horizon_s = getenv("SOAK_HORIZON_S") ? atoi(getenv("SOAK_HORIZON_S")) : 120;
    int interval_ms = getenv("SOAK_INTERVAL_MS") ? atoi(getenv("SOAK_INTERVAL_MS")) : 15000;
    const char *extra[] = {"linger.ms", "5", NULL};
    double t0, next_min;
    long i = 0;
    int k = 0;
    char db[64];
    FILE *tsv = NULL;
    sg_kafka_t *p;
    pid_t relay, worker;
    sg_pg_t *pg;
    sg_err_t err;

    bench_name = "bench-soak";
    /* A minute's throughput and p99 are read from the sagas still kept. */
    if (seconds < 60 || seconds > MAXMIN * 60 || rate <= 0 || horizon_s < 60)
        die("SOAK_*", "need 60..60000 seconds, a rate above 0 and a horizon of 60 s or more");
    snprintf(horizon, sizeof(horizon), "%d", horizon_s);
    snprintf(interval, sizeof(interval), "%d", interval_ms);
    pg = bench_setup_db(db, sizeof(db), dsn, sizeof(dsn));
    snprintf(cmd_topic, sizeof(cmd_topic), "bench_soak_cmd_%d", (int)getpid());
    snprintf(int_topic, sizeof(int_topic), "bench_soak_int_%d", (int)getpid());
    snprintf(ev_topic, sizeof(ev_topic), "bench_soak_ev_%d", (int)getpid());
    snprintf(dlq_topic, sizeof(dlq_topic), "bench_soak_dlq_%d", (int)getpid());
    snprintf(group, sizeof(group), "bench_soak_%d", (int)getpid());
    write_registry();
    p = kclient(SG_KAFKA_PRODUCER, extra);
    {
        const char *topics[] = {cmd_topic, int_topic, ev_topic, dlq_topic};
        for (int j = 0; j < 4; j++)
            if (sg_kafka_create_topic(p, topics[j], 3, 30000, &err) < 0)
                die("create topic", err.message);
    }
    relay = start("sagad-relay");
    worker = start("sagad-worker");
    sleep(4); /* the worker joins the group, the relay takes its shard */
    if (system("mkdir -p bench/results") == 0)
        tsv = fopen("bench/results/soak.tsv", "w");
    if (tsv)
        fprintf(tsv, "minute\ttable\trows\theap_kb\tindex_kb\tdead_tuples\tworker_rss_kb\t"
                     "relay_rss_kb\tfinished\tp99_ms\n");
    fprintf(stderr,
            "bench-soak: %d s at %.0f sagas/s, horizons %d s, janitor every %d ms, database %s\n",
            seconds, rate, horizon_s, interval_ms, db);

    t0 = now_s();
    next_min = t0 + 60;
    while (now_s() < t0 + seconds) {
        char id[64], json[1024];
        double send_at = t0 + (double)i / rate, sent_s;
        int len;

        while (now_s() < send_at)
            usleep(500);
        sent_s = now_s();
        snprintf(id, sizeof(id), "s-%ld", i);
        len = soak_json(json, sizeof(json), i, sent_s);
        while (sg_kafka_produce(p, cmd_topic, id, strlen(id), json, (size_t)len, NULL, 0, NULL,
                                &err) < 0)
            sg_kafka_poll(p, 10);
        sg_kafka_poll(p, 0);
        i++;
        mins[k + 1 <= MAXMIN ? k + 1 : MAXMIN].sent++;
        if (now_s() >= next_min) {
            k++;
            next_min += 60;
            if (waitpid(worker, NULL, WNOHANG) != 0 || waitpid(relay, NULL, WNOHANG) != 0)
                die("soak", "the worker or the relay exited");
            discard_pending(pg);
            sample(pg, &mins[k], worker, relay);
            print_minute(k, &mins[k], tsv);
        }
    }
    sg_kafka_flush(p, 30000, &err);
    sg_kafka_destroy(p);
    bench_stop(worker);
    bench_stop(relay);
    summary(k, horizon_s);
    if (tsv)
        fclose(tsv);
    unlink(regpath);
    sg_pg_destroy(pg);
    bench_drop_db(db);
    return 0;
}
