#include "sg_test.h"

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_pg.h"

static const char *env_or_fail(const char *name)
{
    const char *v = getenv(name);

    if (!v || !*v)
        cr_assert_fail(
            "%s is not set: run the tests through `make test` (tests/run.sh), which starts "
            "PostgreSQL and Kafka",
            name);
    return v;
}

const char *sgt_pg_url(void)
{
    return env_or_fail("SAGAD_TEST_PG_URL");
}

const char *sgt_kafka(void)
{
    return env_or_fail("SAGAD_TEST_KAFKA");
}

const char *sgt_kafka_acl_dir(void)
{
    return env_or_fail("SAGAD_TEST_KAFKA_ACL");
}

const char *sgt_bin_dir(void)
{
    const char *v = getenv("SAGAD_TEST_BIN_DIR");

    return v && *v ? v : "bin";
}

void sgt_unique(char *out, size_t out_size, const char *prefix)
{
    static atomic_int counter;
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(out, out_size, "%s_%d_%d_%ld", prefix, (int)getpid(), atomic_fetch_add(&counter, 1),
             ts.tv_nsec);
}

sg_pg_t *sgt_db_connect(const char *dsn)
{
    sg_pg_opts_t opts = {.dsn = dsn,
                         .application_name = "sagad-tests",
                         .connect_timeout_ms = 5000,
                         .connect_attempts = 3,
                         .retry = {100, 1000}};
    sg_err_t err;
    sg_pg_t *pg = sg_pg_connect(&opts, &err);

    cr_assert_not_null(pg, "cannot connect to the test PostgreSQL: %s", err.message);
    return pg;
}

long long sgt_query_int(sg_pg_t *pg, const char *sql)
{
    sg_pg_res_t *res;
    sg_err_t err;
    long long v;

    cr_assert_eq(sg_pg_exec(pg, sql, 0, NULL, &res, &err), 0, "%s: %s", sql, err.message);
    v = (long long)sg_pg_res_int(res, 0, 0, -1);
    sg_pg_res_destroy(res);
    return v;
}

void sgt_db_create(char *name, size_t name_size, char *dsn, size_t dsn_size)
{
    char sql[256];
    const char *url = sgt_pg_url();
    const char *slash = strrchr(url, '/');
    sg_pg_t *pg = sgt_db_connect(sgt_pg_url());
    sg_err_t err;

    sgt_unique(name, name_size, "sgt");
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
    cr_assert_eq(sg_pg_exec(pg, sql, 0, NULL, NULL, &err), 0, "%s", err.message);
    sg_pg_destroy(pg);
    cr_assert_not_null(slash, "SAGAD_TEST_PG_URL must be a postgresql:// URL");
    snprintf(dsn, dsn_size, "%.*s/%s", (int)(slash - url), url, name);
}

void sgt_role_dsn(char *out, size_t out_size, const char *dsn, const char *role)
{
    const char *var = strcmp(role, "runtime") == 0    ? "SAGAD_TEST_PG_URL_RUNTIME"
                      : strcmp(role, "reader") == 0   ? "SAGAD_TEST_PG_URL_READER"
                      : strcmp(role, "stranger") == 0 ? "SAGAD_TEST_PG_URL_STRANGER"
                      : strcmp(role, "relay") == 0    ? "SAGAD_TEST_PG_URL_RELAY"
                                                      : "SAGAD_TEST_PG_URL_OPERATOR";
    const char *url = getenv(var), *at = url ? strchr(url, '@') : NULL;
    const char *dat = strchr(dsn, '@');

    cr_assert_not_null(at, "%s is not set: run the tests through tests/run.sh", var);
    cr_assert_not_null(dat, "not a postgresql://user:password@ DSN: %s", dsn);
    /* the role's user:password, the test database's host, port and name */
    snprintf(out, out_size, "%.*s%s", (int)(at - url), url, dat);
}

void sgt_db_drop(const char *name)
{
    const char *p[] = {name};
    char sql[256];
    sg_pg_t *pg = sgt_db_connect(sgt_pg_url());
    sg_err_t err;
    int rc = -1;

    /* Not DROP ... WITH (FORCE): that also has to end autovacuum workers,
     * which our role may not.  A plain DROP makes autovacuum step aside;
     * our own sessions (relays a failed test left) we end first. */
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", name);
    for (int attempt = 0; attempt < 5 && rc < 0; attempt++) {
        cr_expect_eq(sg_pg_exec(pg,
                                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                "datname = $1 AND usename = current_user",
                                1, p, NULL, &err),
                     0, "%s", err.message);
        rc = sg_pg_exec(pg, sql, 0, NULL, NULL, &err);
        if (rc < 0)
            usleep(200000);
    }
    cr_expect_eq(rc, 0, "%s", err.message);
    sg_pg_destroy(pg);
}

int sgt_slot_drop(const char *role_dsn, const char *slot, char *err, size_t err_size)
{
    const char *p[] = {slot};
    sg_pg_t *pg = sgt_db_connect(role_dsn);
    sg_err_t e = {0};
    int rc = -1;

    for (int i = 0; i < 100 && rc < 0; i++) {
        if (i > 0)
            usleep(100000);
        /* pg_terminate_backend only signals: the drop below may still find
         * the walsender there, hence the loop around both. */
        if (sg_pg_exec(pg,
                       "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                       "WHERE slot_name = $1 AND active_pid IS NOT NULL",
                       1, p, NULL, &e) < 0)
            continue;
        rc = sg_pg_exec(pg,
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = $1",
                        1, p, NULL, &e);
    }
    if (rc < 0)
        snprintf(err, err_size, "%s", e.message);
    sg_pg_destroy(pg);
    return rc;
}

void sgt_spawn(sgt_proc_t *p, const char *prog, const char *const *args, const char *const *env)
{
    int out[2], errp[2];
    char path[512];
    const char *argv[32];
    const char *envp[64];
    size_t n = 0, e = 0;

    snprintf(path, sizeof(path), "%s/%s", sgt_bin_dir(), prog);
    cr_assert_eq(access(path, X_OK), 0, "%s not built (run make, or set SAGAD_TEST_BIN_DIR)", path);
    argv[n++] = path;
    for (; args && *args && n < 31; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    static const char *const sanitizer_vars[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    static char kept[3][1024];

    envp[e++] = "PATH=/usr/local/bin:/usr/bin:/bin";
    /* Tests run many binaries at once: each endpoint on a free port (it
     * logs it), unless the test's env sets one (a later entry wins). */
    envp[e++] = "SAGAD_HTTP_PORT=0";
    /* Sanitizer settings follow the test binary into the child unchanged,
     * so a sanitizer run behaves the same in both. */
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(sanitizer_vars[i]);

        if (v) {
            snprintf(kept[i], sizeof(kept[i]), "%s=%s", sanitizer_vars[i], v);
            envp[e++] = kept[i];
        }
    }
    for (; env && *env && e < 63; env++)
        envp[e++] = *env;
    envp[e] = NULL;
    cr_assert_eq(pipe(out), 0);
    cr_assert_eq(pipe(errp), 0);
    p->pid = fork();
    cr_assert_geq(p->pid, 0, "fork failed");
    if (p->pid == 0) {
        /* A test that fails an assertion ends its process at once, with
         * no clean-up: what it started dies with it, instead of living on
         * (a relay holding a replication slot, a worker its partitions). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(out[1], 1);
        dup2(errp[1], 2);
        close(out[0]);
        close(out[1]);
        close(errp[0]);
        close(errp[1]);
        execve(path, (char *const *)argv, (char *const *)envp);
        fprintf(stderr, "exec %s failed\n", path);
        _exit(127);
    }
    close(out[1]);
    close(errp[1]);
    p->out_fd = out[0];
    p->err_fd = errp[0];
}

typedef struct buf_s {
    char *data;
    size_t len, cap;
} buf_t;

static void buf_read(buf_t *b, int fd, int *open)
{
    char chunk[4096];
    ssize_t r = read(fd, chunk, sizeof(chunk));

    if (r <= 0) {
        *open = 0;
        return;
    }
    if (b->len + (size_t)r + 1 > b->cap) {
        b->cap = (b->len + (size_t)r + 1) * 2;
        b->data = realloc(b->data, b->cap);
        cr_assert_not_null(b->data);
    }
    memcpy(b->data + b->len, chunk, (size_t)r);
    b->len += (size_t)r;
    b->data[b->len] = '\0';
}

/* Prints every thread's stack of a process that overran its time to
 * stderr, so a hang in CI leaves more than a timeout behind.  Best effort:
 * needs gdb, and ptrace rights over the child (we are its parent). */
static void dump_stacks(pid_t pid)
{
    char spid[24];
    const char *const args[] = {"gdb", "-p", spid, "-batch", "-nx", "-ex", "thread apply all bt",
                                NULL};
    pid_t g;
    int status;

    snprintf(spid, sizeof(spid), "%d", (int)pid);
    fprintf(stderr, "== process %d overran its time; its threads' stacks follow\n", (int)pid);
    g = fork();
    if (g == 0) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        execvp("gdb", (char *const *)args);
        fprintf(stderr, "(no stacks: cannot run gdb: %s)\n", strerror(errno));
        _exit(127);
    }
    if (g > 0)
        waitpid(g, &status, 0);
}

/* A command a test runs in the foreground (sgt_run, sgt_wait) that is
 * still running after this long is hung: its stacks are printed and it is
 * killed, so the test fails on its exit code with the evidence in the log
 * rather than on Criterion's timeout with none. */
#define SGT_RUN_TIMEOUT_S 90.0

/* Collects p's output until it exits; timeout_s < 0: no bound (the
 * reaper of a background process). */
static int wait_for(sgt_proc_t *p, char **out, char **err, double timeout_s)
{
    buf_t bo = {calloc(1, 1), 0, 1}, be = {calloc(1, 1), 0, 1};
    int out_open = 1, err_open = 1, status;
    double deadline = sgt_now_s() + timeout_s;
    bool killed = false;

    while (out_open || err_open) {
        struct pollfd fds[2] = {{out_open ? p->out_fd : -1, POLLIN, 0},
                                {err_open ? p->err_fd : -1, POLLIN, 0}};

        if (timeout_s >= 0 && sgt_now_s() > deadline) {
            if (killed)
                break; /* a child of its own still holds the pipes */
            dump_stacks(p->pid);
            kill(p->pid, SIGKILL);
            killed = true;
            deadline = sgt_now_s() + 5;
        }
        if (poll(fds, 2, 1000) <= 0)
            continue;
        if (fds[0].revents)
            buf_read(&bo, p->out_fd, &out_open);
        if (fds[1].revents)
            buf_read(&be, p->err_fd, &err_open);
    }
    close(p->out_fd);
    close(p->err_fd);
    waitpid(p->pid, &status, 0);
    if (out)
        *out = bo.data;
    else
        free(bo.data);
    if (err)
        *err = be.data;
    else
        free(be.data);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int sgt_wait(sgt_proc_t *p, char **out, char **err)
{
    return wait_for(p, out, err, SGT_RUN_TIMEOUT_S);
}

int sgt_run(const char *prog, const char *const *args, const char *const *env, char **out,
            char **err)
{
    sgt_proc_t p;

    sgt_spawn(&p, prog, args, env);
    return sgt_wait(&p, out, err);
}

static void *bg_reap(void *arg)
{
    sgt_bg_t *bg = arg;

    bg->rc = wait_for(&bg->p, &bg->out, &bg->err, -1);
    atomic_store(&bg->done, true);
    return NULL;
}

static void bg_spawn(sgt_bg_t *bg, const char *prog, const char *const *args,
                     const char *const *env)
{
    sgt_bg_free(bg); /* a restart: the previous run's output */
    memset(bg, 0, sizeof(*bg));
    sgt_spawn(&bg->p, prog, args, env);
}

static void bg_reap_from_now(sgt_bg_t *bg)
{
    cr_assert_eq(pthread_create(&bg->reaper, NULL, bg_reap, bg), 0);
    bg->started = true;
}

void sgt_bg_start(sgt_bg_t *bg, const char *prog, const char *const *args, const char *const *env)
{
    bg_spawn(bg, prog, args, env);
    bg_reap_from_now(bg);
}

bool sgt_bg_start_line(sgt_bg_t *bg, const char *prog, const char *const *args,
                       const char *const *env, char *line, size_t line_size, double timeout_s)
{
    double deadline = sgt_now_s() + timeout_s;
    size_t n = 0;
    bool got = false;

    bg_spawn(bg, prog, args, env);
    /* Byte by byte, so nothing after the line is taken from the reaper. */
    while (!got && sgt_now_s() < deadline) {
        struct pollfd pfd = {bg->p.out_fd, POLLIN, 0};
        char c;

        if (poll(&pfd, 1, 100) <= 0)
            continue;
        if (read(bg->p.out_fd, &c, 1) != 1)
            break; /* exited before the line */
        if (c == '\n')
            got = true;
        else if (n + 1 < line_size)
            line[n++] = c;
    }
    if (line_size > 0)
        line[n] = '\0';
    bg_reap_from_now(bg);
    return got;
}

bool sgt_bg_done(sgt_bg_t *bg)
{
    return atomic_load(&bg->done);
}

void sgt_bg_signal(sgt_bg_t *bg, int sig)
{
    if (bg->started && !atomic_load(&bg->done))
        kill(bg->p.pid, sig);
}

int sgt_bg_join(sgt_bg_t *bg, double timeout_s)
{
    double deadline = sgt_now_s() + timeout_s;
    bool late = false;

    if (!bg->started)
        return -1;
    if (bg->joined)
        return bg->rc;
    while (timeout_s >= 0 && !atomic_load(&bg->done)) {
        if (sgt_now_s() > deadline && !late) {
            late = true;
            if (timeout_s > 0) /* 0: a deliberate kill, not an overrun */
                dump_stacks(bg->p.pid);
            kill(bg->p.pid, SIGKILL);
        }
        usleep(20000);
    }
    pthread_join(bg->reaper, NULL);
    bg->joined = true;
    return late ? -1 : bg->rc;
}

const char *sgt_bg_tail(const sgt_bg_t *bg)
{
    size_t n = bg->err ? strlen(bg->err) : 0;

    if (!bg->err)
        return "(no output captured yet)";
    return n > 3000 ? bg->err + n - 3000 : bg->err;
}

void sgt_bg_free(sgt_bg_t *bg)
{
    free(bg->out);
    free(bg->err);
    bg->out = bg->err = NULL;
}

double sgt_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

long long sgt_query_intf(struct sg_pg_s *pg, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    cr_assert(n > 0 && (size_t)n < sizeof(sql), "statement too long");
    return sgt_query_int(pg, sql);
}

static size_t http_sink(char *ptr, size_t size, size_t nmemb, void *ud)
{
    char **buf = ((char ***)ud)[0];
    size_t *len = ((size_t **)ud)[1], n = size * nmemb;
    char *grown = realloc(*buf, *len + n + 1);

    if (!grown)
        return 0; /* curl fails the transfer */
    *buf = grown;
    memcpy(*buf + *len, ptr, n);
    *len += n;
    (*buf)[*len] = '\0';
    return n;
}

static const char *request_ca;

void sgt_request_ca(const char *path)
{
    request_ca = path;
}

sgt_res_t sgt_request(const char *method, const char *url, const char *const *headers,
                      const char *body)
{
    sgt_res_t r = {0, calloc(1, 1), 0, calloc(1, 1), 0};
    void *bsink[2] = {&r.body, &r.len}, *hsink[2] = {&r.headers, &r.hlen};
    struct curl_slist *hl = NULL;
    CURL *c = curl_easy_init();
    CURLcode rc = CURLE_OUT_OF_MEMORY;

    for (; headers && *headers; headers++)
        hl = curl_slist_append(hl, *headers);
    hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
    if (c && hl && r.body && r.headers) {
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
        if (body)
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_sink);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, bsink);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, http_sink);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, hsink);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
        if (request_ca)
            curl_easy_setopt(c, CURLOPT_CAINFO, request_ca);
        rc = curl_easy_perform(c);
    }
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    } else {
        free(r.body);
        r.body = strdup(curl_easy_strerror(rc));
        r.len = r.body ? strlen(r.body) : 0;
    }
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return r;
}

void sgt_res_free(sgt_res_t *r)
{
    free(r->body);
    free(r->headers);
    r->body = r->headers = NULL;
}

const char *sgt_res_header(const sgt_res_t *r, const char *name)
{
    static char value[512];
    size_t nl = strlen(name);

    for (const char *line = r->headers; line && *line;) {
        const char *eol = strstr(line, "\r\n");
        size_t len = eol ? (size_t)(eol - line) : strlen(line);

        if (len > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;

            while (*v == ' ')
                v++;
            snprintf(value, sizeof(value), "%.*s", (int)(line + len - v), v);
            return value;
        }
        line = eol ? eol + 2 : NULL;
    }
    return NULL;
}

char *sgt_http(const char *method, const char *url, const char *body, long *status)
{
    static const char *const json[] = {"Content-Type: application/json", NULL};
    sgt_res_t r = sgt_request(method, url, json, body);

    cr_assert_neq(r.status, 0, "%s %s: %s", method, url, r.body);
    *status = r.status;
    free(r.headers);
    return r.body;
}

int sgt_free_port(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0, "bind: %s", strerror(errno));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    port = ntohs(addr.sin_port);
    close(fd);
    return port;
}
