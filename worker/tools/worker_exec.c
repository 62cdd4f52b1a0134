/* The exec adapter: a tool is a program, run once per call.
 *
 * The contract (docs/ADAPTERS.md):
 *   argv       exactly the registry's target array, program first (an
 *              absolute path); no shell, nothing from the message in argv
 *   stdin      the request JSON (the http adapter's body), then EOF
 *   env        a minimal environment: PATH, LANG and SAGAD_IDEMPOTENCY_KEY,
 *              SAGAD_SAGA_ID, SAGAD_STEP, SAGAD_STEP_INDEX, SAGAD_PHASE,
 *              SAGAD_ATTEMPT, SAGAD_TOOL, SAGAD_TIMEOUT_MS
 *   stdout     the answer: JSON data, or text kept as a string; at most
 *              max_response_bytes (more: tool.exec.output_too_large)
 *   stderr     up to 4 KiB is read; the error message (511 bytes) keeps its start
 *   exit       0 ok; 75 (EX_TEMPFAIL) transient tool.exec.tempfail; other
 *              permanent tool.exec.exit; killed by a signal: permanent
 *              tool.exec.signal naming it; past timeout_ms: tool.timeout
 *
 * The child gets its own process group and only descriptors 0, 1 and 2
 * (posix_spawn closes the rest, so a descriptor another thread opens at
 * the same moment cannot leak into it).  When the call ends, for whatever
 * reason, the whole group is killed and the child reaped: no grandchild
 * outlives its call, no zombie is left. */
#define _GNU_SOURCE /* pipe2, posix_spawn_file_actions_addclosefrom_np, sigabbrev_np */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "../worker.h"

#define EXEC_STDERR_MAX 4096
#define EXEC_TEMPFAIL   75 /* EX_TEMPFAIL of sysexits.h */
#define EXEC_ENV_MAX    12

typedef struct exec_tool_s {
    char **argv; /* NULL-terminated */
} exec_tool_t;

/* What one call's child said. */
typedef struct exec_io_s {
    char *out;
    size_t out_len, out_cap, out_max;
    bool out_too_large;
    char err[EXEC_STDERR_MAX + 1];
    size_t err_len;
} exec_io_t;

/* ---- the registry entry ------------------------------------------------ */

static void exec_release(sg_tool_t *tool)
{
    exec_tool_t *x = tool->state;

    if (!x)
        return;
    for (char **a = x->argv; a && *a; a++)
        free(*a);
    free(x->argv);
    free(x);
    tool->state = NULL;
}

static int exec_prepare(sg_tool_t *tool, const sg_json_t *node, const char *base,
                        const sg_config_t *cfg, sg_err_t *err)
{
    const sg_json_t *target = tool->target_json;
    exec_tool_t *x = sg_xcalloc(1, sizeof(*x));
    size_t n = sg_json_array_size(target);
    char path[300], item[320];

    (void)node;
    (void)cfg;
    tool->state = x;
    sg_json_path_key(path, sizeof(path), base, "target");
    if (!sg_json_is_array(target) || n == 0)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: an exec target is argv: an array of strings, program first", path);
    x->argv = sg_xcalloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const char *s = sg_json_string(sg_json_array_get(target, i));
        sg_json_path_idx(item, sizeof(item), path, i);
        if (!s)
            return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                              "%s: must be a string", item);
        x->argv[i] = sg_xstrdup(s);
    }
    sg_json_path_idx(item, sizeof(item), path, 0);
    if (x->argv[0][0] != '/')
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: the program must be an absolute path (no PATH search)", item);
    if (access(x->argv[0], X_OK) < 0)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: %s is not an executable file: %s", item, x->argv[0],
                          strerror(errno));
    return 0;
}

/* ---- one call ---------------------------------------------------------- */

/* The child's whole environment, in buf (strings) and env (pointers). */
static void child_env(const worker_call_t *call, char buf[EXEC_ENV_MAX][320],
                      char *env[EXEC_ENV_MAX + 1])
{
    int n = 0;

    snprintf(buf[n++], 320, "PATH=/usr/local/bin:/usr/bin:/bin");
    snprintf(buf[n++], 320, "LANG=C.UTF-8");
    snprintf(buf[n++], 320, "SAGAD_IDEMPOTENCY_KEY=%s", call->idem_key);
    snprintf(buf[n++], 320, "SAGAD_SAGA_ID=%s", call->saga_id);
    snprintf(buf[n++], 320, "SAGAD_STEP=%s", call->step_name);
    snprintf(buf[n++], 320, "SAGAD_STEP_INDEX=%d", call->step_idx);
    snprintf(buf[n++], 320, "SAGAD_PHASE=%s", call->compensate ? "compensate" : "forward");
    snprintf(buf[n++], 320, "SAGAD_ATTEMPT=%d", call->attempt);
    snprintf(buf[n++], 320, "SAGAD_TOOL=%s", call->tool->name);
    snprintf(buf[n++], 320, "SAGAD_TIMEOUT_MS=%lld", (long long)call->tool->timeout_ms);
    for (int i = 0; i < n; i++)
        env[i] = buf[i];
    env[n] = NULL;
}

/* Starts the child with pipes on 0, 1, 2 (fds[i] are the parent's ends);
 * its pid, or -1 with errno. */
static pid_t spawn_child(char *const argv[], char *const env[], int fds[3])
{
    int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    pid_t pid = -1;
    int rc;

    for (int i = 0; i < 3; i++)
        if (pipe2(p[i], O_CLOEXEC) < 0)
            goto out;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[0][0], 0);
    posix_spawn_file_actions_adddup2(&fa, p[1][1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[2][1], 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE); /* the worker ignores it; a child must not */
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGCHLD);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    rc = posix_spawn(&pid, argv[0], &fa, &attr, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        pid = -1;
    }
out:
    for (int i = 0; i < 3; i++) {
        int mine = i == 0 ? 1 : 0; /* the parent writes stdin, reads the others */
        if (p[i][1 - mine] >= 0)
            close(p[i][1 - mine]);
        if (pid < 0 && p[i][mine] >= 0)
            close(p[i][mine]);
        fds[i] = pid < 0 ? -1 : p[i][mine];
    }
    return pid;
}

static void keep_out(exec_io_t *io, const char *buf, size_t n)
{
    if (io->out_too_large)
        return;
    if (io->out_len + n > io->out_max) {
        io->out_too_large = true;
        return;
    }
    if (io->out_len + n + 1 > io->out_cap) {
        io->out_cap = (io->out_len + n + 1) * 2;
        io->out = sg_xrealloc(io->out, io->out_cap);
    }
    memcpy(io->out + io->out_len, buf, n);
    io->out_len += n;
    io->out[io->out_len] = '\0';
}

static void keep_err(exec_io_t *io, const char *buf, size_t n)
{
    size_t room = EXEC_STDERR_MAX - io->err_len;

    if (n > room)
        n = room;
    memcpy(io->err + io->err_len, buf, n);
    io->err_len += n;
    io->err[io->err_len] = '\0';
}

/* True once the child exited; it stays a zombie (WNOWAIT), so its pid
 * and process group cannot be reused before it is reaped. */
static bool exited(pid_t pid)
{
    siginfo_t info;

    memset(&info, 0, sizeof(info));
    return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

/* Reads what fds[1] and fds[2] have now; closes them at EOF. */
static void drain(int fds[3], exec_io_t *io)
{
    char buf[65536];

    for (int i = 1; i < 3; i++) {
        while (fds[i] >= 0) {
            ssize_t r = read(fds[i], buf, sizeof(buf));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && errno == EAGAIN)
                break;
            if (r <= 0) {
                close(fds[i]);
                fds[i] = -1;
                break;
            }
            if (i == 1)
                keep_out(io, buf, (size_t)r);
            else
                keep_err(io, buf, (size_t)r);
        }
    }
}

/* Feeds stdin and drains stdout and stderr until the child exited, the
 * deadline passed or a hard stop.  Returns 0 when the child exited (not
 * yet reaped), -1 at the deadline, -2 on a hard stop, -3 when stdout
 * passed its cap. */
static int pump(pid_t pid, int fds[3], const char *in, size_t in_len, exec_io_t *io,
                int64_t deadline, volatile sig_atomic_t *stop)
{
    size_t in_off = 0;

    for (int i = 0; i < 3; i++)
        fcntl(fds[i], F_SETFL, O_NONBLOCK);
    for (;;) {
        struct pollfd pfd[3];
        int64_t left = deadline - (int64_t)sg_run_now_ms();
        bool gone = exited(pid);
        if (fds[0] >= 0 && (in_off == in_len || gone)) {
            close(fds[0]);
            fds[0] = -1;
        }
        drain(fds, io);
        if (io->out_too_large)
            return -3;
        /* Not the end of output: a grandchild may hold stdout open. */
        if (gone)
            return 0;
        if (stop && *stop)
            return -2;
        if (left <= 0)
            return -1;
        for (int i = 0; i < 3; i++) {
            pfd[i].fd = fds[i];
            pfd[i].events = i == 0 ? POLLOUT : POLLIN;
            pfd[i].revents = 0;
        }
        /* Short naps: the exit itself is not a descriptor event. */
        poll(pfd, 3, left > 20 ? 20 : (int)left);
        if (fds[0] >= 0 && pfd[0].revents) {
            ssize_t w = write(fds[0], in + in_off, in_len - in_off);
            if (w > 0)
                in_off += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                in_off = in_len; /* the child closed its stdin (EPIPE) */
        }
    }
}

/* stderr as one line for a message. */
static const char *err_text(exec_io_t *io)
{
    for (size_t i = 0; i < io->err_len; i++)
        if (io->err[i] == '\n' || io->err[i] == '\r')
            io->err[i] = ' ';
    return io->err_len ? io->err : "(no stderr)";
}

static void map_exit(const worker_call_t *call, int status, exec_io_t *io, worker_result_t *out)
{
    const char *tool = call->tool->name;

    worker_result_data(out, io->out, io->out_len, io->out_max);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        out->status = WORKER_OK;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == EXEC_TEMPFAIL) {
        worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.exec.tempfail",
                            "tool %s exited 75 (EX_TEMPFAIL): %s", tool, err_text(io));
    } else if (WIFEXITED(status)) {
        worker_result_error(out, SG_ERRCLASS_PERMANENT, "tool.exec.exit",
                            "tool %s exited with status %d: %s", tool, WEXITSTATUS(status),
                            err_text(io));
    } else {
        const char *name = sigabbrev_np(WTERMSIG(status));
        worker_result_error(out, SG_ERRCLASS_PERMANENT, "tool.exec.signal",
                            "tool %s was killed by signal %d (SIG%s): %s", tool, WTERMSIG(status),
                            name ? name : "?", err_text(io));
    }
}

static void exec_call(worker_thread_t *th, const worker_call_t *call, worker_result_t *out)
{
    const exec_tool_t *x = call->tool->state;
    int64_t deadline = (int64_t)sg_run_now_ms() + call->tool->timeout_ms;
    char envbuf[EXEC_ENV_MAX][320], *env[EXEC_ENV_MAX + 1];
    exec_io_t io = {.out_max = (size_t)call->tool->max_response_bytes};
    char *in = worker_request_json(call);
    int fds[3], status = 0, rc;
    pid_t pid;

    child_env(call, envbuf, env);
    pid = spawn_child(x->argv, env, fds);
    if (pid < 0) {
        worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.exec.spawn",
                            "cannot start %s for tool %s: %s", x->argv[0], call->tool->name,
                            strerror(errno));
        free(in);
        return;
    }
    rc = pump(pid, fds, in, strlen(in), &io, deadline, th->stop);
    /* Whatever happened, nothing of the call outlives it: the group goes
     * (the child is at most a zombie yet, so the group id is still its
     * own), then the child is reaped. */
    kill(-pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (rc == -1)
        worker_result_error(out, SG_ERRCLASS_TIMEOUT, "tool.timeout",
                            "tool %s gave no answer within %lld ms; its process group was "
                            "killed",
                            call->tool->name, (long long)call->tool->timeout_ms);
    else if (rc == -2)
        worker_result_error(out, SG_ERRCLASS_TIMEOUT, "tool.abandoned",
                            "call of tool %s abandoned at shutdown; the outcome is unknown",
                            call->tool->name);
    else if (rc == -3)
        worker_result_error(out, SG_ERRCLASS_PERMANENT, "tool.exec.output_too_large",
                            "tool %s wrote more than its max_response_bytes (%zu) to stdout; it "
                            "was killed",
                            call->tool->name, io.out_max);
    else
        map_exit(call, status, &io, out);
    free(io.out);
    free(in);
}

const worker_adapter_t worker_exec_adapter = {
    .name = "exec",
    .prepare = exec_prepare,
    .call = exec_call,
    .release = exec_release,
};
