#include "bench_util.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_migrate.h"

const char *bench_name = "bench";
const char *pg_url, *kafka;

double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Processes started and not yet stopped: a benchmark that dies takes them
 * with it instead of leaving a worker and a relay running. */
static pid_t children[16];

static void child_forget(pid_t pid)
{
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
        if (children[i] == pid)
            children[i] = 0;
}

void die(const char *what, const char *why)
{
    fprintf(stderr, "%s: %s: %s\n", bench_name, what, why);
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
    exit(1);
}

sg_pg_t *bench_connect(const char *url)
{
    sg_pg_opts_t opts = {.dsn = url,
                         .application_name = "sagad-bench",
                         .connect_timeout_ms = 5000,
                         .connect_attempts = 5,
                         .retry = {100, 1000}};
    sg_err_t err;
    sg_pg_t *pg = sg_pg_connect(&opts, &err);

    if (!pg)
        die("connect", err.message);
    return pg;
}

void exec(sg_pg_t *pg, const char *sql, int n, const char *const *p)
{
    sg_err_t err;

    if (sg_pg_exec(pg, sql, n, p, NULL, &err) < 0)
        die(sql, err.message);
}

int64_t query_int(sg_pg_t *pg, const char *sql)
{
    sg_pg_res_t *res;
    sg_err_t err;
    int64_t v;

    if (sg_pg_exec(pg, sql, 0, NULL, &res, &err) < 0)
        die(sql, err.message);
    v = sg_pg_res_int(res, 0, 0, -1);
    sg_pg_res_destroy(res);
    return v;
}

sg_kafka_t *kclient(sg_kafka_role_t role, const char *const *extra)
{
    const char *props[16] = {"bootstrap.servers", kafka};
    char errstr[256];
    size_t n = 2;
    sg_kafka_t *k;

    for (; extra && *extra && n < 14; extra++)
        props[n++] = *extra;
    props[n] = NULL;
    k = sg_kafka_new(NULL, role, props, errstr, sizeof(errstr));
    if (!k)
        die("kafka", errstr);
    return k;
}

sg_pg_t *bench_setup_db(char *db, size_t db_size, char *dsn, size_t dsn_size)
{
    char sql[160];
    sg_pg_t *admin, *pg;
    sg_err_t err;

    pg_url = getenv("SAGAD_TEST_PG_URL");
    kafka = getenv("SAGAD_TEST_KAFKA");
    if (!pg_url || !kafka)
        die("environment", "run through `make bench`, which starts PostgreSQL and Kafka");
    snprintf(db, db_size, "bench_%d", (int)getpid());
    admin = bench_connect(pg_url);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", db);
    exec(admin, sql, 0, NULL);
    sg_pg_destroy(admin);
    snprintf(dsn, dsn_size, "%.*s/%s", (int)(strrchr(pg_url, '/') - pg_url), pg_url, db);
    pg = bench_connect(dsn);
    if (sg_migrate_run(pg, NULL, NULL, &err) < 0)
        die("migrate", err.message);
    return pg;
}

void bench_drop_db(const char *db)
{
    sg_pg_t *admin = bench_connect(pg_url);
    char sql[160];

    if (getenv("SAGAD_BENCH_KEEP_DB")) { /* for a look at the rows afterwards */
        fprintf(stderr, "%s: kept database %s (SAGAD_BENCH_KEEP_DB)\n", bench_name, db);
        sg_pg_destroy(admin);
        return;
    }
    /* A plain DROP (not FORCE) also makes autovacuum step aside. */
    snprintf(sql, sizeof(sql), "DROP DATABASE %s", db);
    exec(admin, sql, 0, NULL);
    sg_pg_destroy(admin);
}

pid_t bench_spawn_argv(const char *prog, char *const *args, char *const *env, int *out_fd)
{
    char bin[600];
    char *argv[16];
    int fds[2] = {-1, -1};
    size_t n = 0;
    pid_t pid;

    snprintf(bin, sizeof(bin), "%s/%s",
             getenv("SAGAD_BENCH_BIN_DIR") ? getenv("SAGAD_BENCH_BIN_DIR") : "bin", prog);
    argv[n++] = bin;
    for (; args && *args && n < 15; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    if (out_fd && pipe(fds) < 0)
        die("pipe", prog);
    pid = fork();
    if (pid == 0) {
        char *envp[64], port[] = "SAGAD_HTTP_PORT=0";
        size_t k = 0;

        /* A free port each (benchmarks run a worker and a relay at once)
         * unless env sets one: the first occurrence of a name wins. */
        for (; env && *env && k < 62; env++)
            envp[k++] = *env;
        envp[k++] = port;
        envp[k] = NULL;
        if (out_fd)
            dup2(fds[1], 1);
        execve(bin, argv, envp);
        _exit(127);
    }
    for (size_t i = 0; pid > 0 && i < sizeof(children) / sizeof(children[0]); i++)
        if (children[i] == 0) {
            children[i] = pid;
            break;
        }
    if (out_fd) {
        close(fds[1]);
        *out_fd = fds[0];
    }
    return pid;
}

pid_t bench_spawn(const char *prog, char *const *env)
{
    char *const args[] = {"run", NULL};

    return bench_spawn_argv(prog, args, env, NULL);
}

void bench_produce(const char *topic, const char *prefix, int n, double rate, double *sent,
                   bench_json_fn json_of)
{
    const char *extra[] = {"linger.ms", "1", NULL};
    sg_kafka_t *p = kclient(SG_KAFKA_PRODUCER, extra);
    double t0;
    sg_err_t err;

    /* When latency is measured, the producer is made ready first: a new
     * producer holds its first messages until it has connected, read the
     * metadata and acquired its idempotent producer id, and those hundreds
     * of milliseconds would be charged to the first sagas sent (the p99 of
     * a 10 s run is its first 100 ms).  One message to a topic of its own,
     * flushed, does all of that. */
    if (sent) {
        if (sg_kafka_create_topic(p, "sagad_bench_warmup", 1, 30000, &err) < 0 ||
            sg_kafka_produce(p, "sagad_bench_warmup", "w", 1, "{}", 2, NULL, 0, NULL, &err) < 0 ||
            sg_kafka_flush(p, 30000, &err) < 0)
            die("producer warm-up", err.message);
    }
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        char id[64], json[2048];
        int len;
        snprintf(id, sizeof(id), "%s-%d", prefix, i);
        len = json_of(json, sizeof(json), id);
        if (rate > 0)
            while (now_s() < t0 + i / rate)
                usleep(200);
        if (sent)
            sent[i] = now_s();
        while (sg_kafka_produce(p, topic, id, strlen(id), json, (size_t)len, NULL, 0, NULL, &err) <
               0)
            sg_kafka_poll(p, 10);
        sg_kafka_poll(p, 0);
    }
    if (sg_kafka_flush(p, 60000, &err) < 0)
        die("flush", err.message);
    sg_kafka_destroy(p);
}

/* Runs a program to its end, its stdout read and dropped. */
int bench_run(const char *prog, char *const *args, char *const *env)
{
    char buf[4096];
    int fd, status;
    pid_t pid = bench_spawn_argv(prog, args, env, &fd);

    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    close(fd);
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return -1;
    child_forget(pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void bench_stop(pid_t pid)
{
    int status;

    /* SIGTERM drains; a process still there after 60 s is killed, and
     * said so, rather than leaving the benchmark (and it) hanging. */
    child_forget(pid);
    kill(pid, SIGTERM);
    for (int i = 0; i < 600; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return;
        usleep(100000);
    }
    fprintf(stderr, "%s: pid %d did not exit within 60 s of SIGTERM; killed\n", bench_name,
            (int)pid);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* User and system ticks of every process visible in /proc, with those of
 * its children that ended and were waited for (a relay the benchmark
 * started and stopped within a phase counts in the benchmark's). */
static long long own_ticks(void)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    long long sum = 0;

    if (!d)
        return 0;
    while ((e = readdir(d))) {
        char path[300], buf[1024], *p;
        unsigned long long ut, st, cut, cst;
        FILE *fp;
        size_t n;

        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        if (!(fp = fopen(path, "r")))
            continue;
        n = fread(buf, 1, sizeof(buf) - 1, fp);
        fclose(fp);
        buf[n] = '\0';
        /* Fields after the command name, which may hold anything: state
         * is the 3rd field, utime, stime, cutime and cstime the 14th to
         * the 17th. */
        if ((p = strrchr(buf, ')')) &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &ut,
                   &st, &cut, &cst) == 4)
            sum += (long long)(ut + st + cut + cst);
    }
    closedir(d);
    return sum;
}

void bench_cpu(bench_cpu_t *c)
{
    /* cpu user nice system idle iowait irq softirq steal ... */
    long long v[8] = {0};
    FILE *fp = fopen("/proc/stat", "r");

    memset(c, 0, sizeof(*c));
    if (!fp)
        return;
    if (fscanf(fp, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) == 8) {
        c->busy = v[0] + v[1] + v[2] + v[5] + v[6];
        c->steal = v[7];
        for (int i = 0; i < 8; i++)
            c->total += v[i];
    }
    fclose(fp);
    c->ours = own_ticks();
}

static double pct(long long part, long long total)
{
    return total > 0 ? 100.0 * (double)part / (double)total : 0.0;
}

double bench_busy_pct(const bench_cpu_t *a, const bench_cpu_t *b)
{
    return pct(b->busy - a->busy, b->total - a->total);
}

double bench_ours_pct(const bench_cpu_t *a, const bench_cpu_t *b)
{
    return pct(b->ours - a->ours, b->total - a->total);
}

double bench_steal_pct(const bench_cpu_t *a, const bench_cpu_t *b)
{
    return pct(b->steal - a->steal, b->total - a->total);
}

void bench_print_cpu(int width, const char *phases, const bench_cpu_t *a0, const bench_cpu_t *a1,
                     const bench_cpu_t *b0, const bench_cpu_t *b1)
{
    char busy[96];

    snprintf(busy, sizeof(busy), "host CPU busy, %s", phases);
    printf("  %-*s %4.0f%% / %3.0f%%\n", width, busy, bench_busy_pct(a0, a1),
           bench_busy_pct(b0, b1));
    printf("  %-*s %4.0f%% / %3.0f%%\n", width, "  of which this benchmark's processes",
           bench_ours_pct(a0, a1), bench_ours_pct(b0, b1));
    printf("  %-*s %4.0f%% / %3.0f%%\n", width, "host CPU stolen by the hypervisor",
           bench_steal_pct(a0, a1), bench_steal_pct(b0, b1));
}

long bench_rss_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    size_t n = strlen(field);
    long kb = -1;
    FILE *fp;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(fp = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), fp))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            kb = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(fp);
    return kb;
}

pid_t bench_start_sagad(const char *prog, const char *dsn, const char *regpath,
                        const char *const topics[4], const char *group, const char *level,
                        const char *const *extra)
{
    static char e[9][600];
    static char *env[9 + 32 + 1];
    int n = 9;

    snprintf(e[0], sizeof(e[0]), "SAGAD_PG_DSN=%s", dsn);
    snprintf(e[1], sizeof(e[1]), "SAGAD_KAFKA_BOOTSTRAP_SERVERS=%s", kafka);
    snprintf(e[2], sizeof(e[2]), "SAGAD_LOG_LEVEL=%s", level);
    snprintf(e[3], sizeof(e[3]), "SAGAD_WORKER_REGISTRY=%s", regpath);
    snprintf(e[4], sizeof(e[4]), "SAGAD_TOPIC_COMMANDS=%s", topics[0]);
    snprintf(e[5], sizeof(e[5]), "SAGAD_TOPIC_INTERNAL=%s", topics[1]);
    snprintf(e[6], sizeof(e[6]), "SAGAD_TOPIC_EVENTS=%s", topics[2]);
    snprintf(e[7], sizeof(e[7]), "SAGAD_TOPIC_DLQ=%s", topics[3]);
    snprintf(e[8], sizeof(e[8]), "SAGAD_WORKER_GROUP_ID=%s", group);
    for (int i = 0; i < 9; i++)
        env[i] = e[i];
    for (; extra && *extra && n < 9 + 32; extra++)
        env[n++] = (char *)*extra;
    env[n] = NULL;
    return bench_spawn(prog, env);
}

static char wal_dsn[512], wal_slot[64];

const char *bench_wal_dsn(void)
{
    return wal_dsn;
}

/* As the relay's login on the benchmark's database (a logical slot is
 * dropped from its own database); from atexit too, so nothing here may
 * call die(). */
void bench_wal_drop(void)
{
    sg_pg_opts_t opts = {.dsn = wal_dsn,
                         .application_name = "sagad-bench",
                         .connect_timeout_ms = 5000,
                         .connect_attempts = 3,
                         .retry = {100, 1000}};
    const char *p[] = {wal_slot};
    sg_pg_t *pg;
    sg_err_t err;
    int rc = -1;

    if (!wal_slot[0] || !wal_dsn[0])
        return;
    if (!(pg = sg_pg_connect(&opts, &err))) {
        fprintf(stderr, "%s: slot %s NOT dropped: %s\n", bench_name, wal_slot, err.message);
        return;
    }
    /* a failure here shows as the drop's */
    if (sg_pg_exec(pg,
                   "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                   "WHERE slot_name = $1 AND active_pid IS NOT NULL",
                   1, p, NULL, &err) < 0)
        rc = -1;
    for (int i = 0; i < 100 && rc < 0; i++) {
        rc = sg_pg_exec(pg,
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = $1",
                        1, p, NULL, &err);
        if (rc < 0)
            usleep(100000); /* the walsender is still on its way out */
    }
    if (rc < 0)
        fprintf(stderr, "%s: slot %s NOT dropped: %s\n", bench_name, wal_slot, err.message);
    else
        wal_slot[0] = '\0';
    sg_pg_destroy(pg);
}

const char *bench_wal_prepare(const char *dsn)
{
    const char *url = getenv("SAGAD_TEST_PG_URL_RELAY");
    const char *at = url ? strchr(url, '@') : NULL, *dat = strchr(dsn, '@');

    if (!at || !dat)
        die("environment", "SAGAD_TEST_PG_URL_RELAY (deploy/local/pg.sh url-relay) is not set");
    snprintf(wal_dsn, sizeof(wal_dsn), "%.*s%s", (int)(at - url), url, dat);
    snprintf(wal_slot, sizeof(wal_slot), "sagad_bench_%d", (int)getpid());
    atexit(bench_wal_drop);
    return wal_slot;
}
