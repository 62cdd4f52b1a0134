/* `sagad-gateway mcp --stdio`: MCP for a local agent (gw_mcp.h,
 * docs/AGENTS.md).
 *
 * The agent's runtime starts this process and speaks newline-delimited
 * JSON-RPC on its stdin and stdout; stdout carries answers and nothing
 * else, every log line goes to stderr.  The process is a gateway without
 * its HTTP listener: the same users file, delegate key, registry,
 * PostgreSQL pool and producer (gateway.*), and it acts as the user whose
 * bearer token is in mcp.token (SAGAD_MCP_TOKEN in the agent's MCP
 * configuration), authenticated as the API authenticates it, so a local
 * agent has exactly that user's roles and no more.
 *
 * Tool calls are answered concurrently (a wait_saga does not hold up a
 * tools/list), each answer written whole as one line; the protocol's own
 * messages (initialize, tools/list...) in the order they were read.  A
 * request named by notifications/cancelled runs to its end (a submission
 * already sent stays sent) but is not answered.  At the end of stdin
 * (the client's way to stop it) or SIGTERM, waits end early and the
 * requests already read are answered before the process exits 0. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_mcp.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_run.h"

#define IN_FLIGHT_MAX 32
#define READ_CHUNK    65536

typedef struct job_s {
    struct server_s *s;
    gw_mcp_call_t *pending;
    char *id; /* the request's id as JSON text */
    bool cancelled;
    struct job_s *next;
} job_t;

typedef struct server_s {
    gw_mcp_t m;
    gw_caller_t caller;
    pthread_mutex_t mu; /* stdout, and what is below */
    pthread_cond_t idle;
    int in_flight;
    job_t *jobs; /* in flight, for notifications/cancelled */
} server_t;

static void emit(server_t *s, const char *text)
{
    pthread_mutex_lock(&s->mu);
    fputs(text, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&s->mu);
}

/* A cancelled request gets no answer (MCP: no further message for it). */
static void cancel(server_t *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    for (job_t *j = s->jobs; j; j = j->next)
        if (strcmp(j->id, id) == 0)
            j->cancelled = true;
    pthread_mutex_unlock(&s->mu);
}

static void *run_one(void *arg)
{
    job_t *j = arg;
    server_t *s = j->s;
    gw_mcp_out_t out;

    gw_mcp_run(j->pending, &out);
    pthread_mutex_lock(&s->mu);
    if (out.text && !j->cancelled) {
        fputs(out.text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    for (job_t **at = &s->jobs; *at; at = &(*at)->next)
        if (*at == j) {
            *at = j->next;
            break;
        }
    s->in_flight--;
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    free(out.text);
    free(j->id);
    free(j);
    return NULL;
}

/* Answers line: the protocol's own messages here, in the order read; a
 * tool call on a thread of its own (inline past IN_FLIGHT_MAX, which also
 * stops reading until one ends). */
static void dispatch(server_t *s, const char *line, size_t len)
{
    gw_mcp_call_t *pending;
    gw_mcp_out_t out;
    pthread_attr_t attr;
    pthread_t t;
    job_t *j;

    gw_mcp_start(&s->m, &s->caller, line, len, NULL, &out, &pending);
    if (out.cancelled)
        cancel(s, out.cancelled);
    free(out.cancelled);
    if (!pending) {
        if (out.text)
            emit(s, out.text);
        free(out.text);
        return;
    }
    j = sg_xcalloc(1, sizeof(*j));
    j->s = s;
    j->pending = pending;
    j->id = gw_mcp_call_id(pending);
    pthread_mutex_lock(&s->mu);
    while (s->in_flight >= IN_FLIGHT_MAX)
        pthread_cond_wait(&s->idle, &s->mu);
    s->in_flight++;
    j->next = s->jobs;
    s->jobs = j;
    pthread_mutex_unlock(&s->mu);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, run_one, j) != 0)
        run_one(j);
    pthread_attr_destroy(&attr);
}

static bool blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
            return false;
    return true;
}

/* Reads stdin until its end or SIGTERM, a message a line.  A line over
 * max bytes is dropped whole and answered -32600. */
static void read_loop(server_t *s, size_t max)
{
    char *buf = sg_xmalloc(max + READ_CHUNK + 1);
    size_t have = 0;
    bool skipping = false;

    while (sg_run_running) {
        struct pollfd pfd = {STDIN_FILENO, POLLIN, 0};
        ssize_t n;
        char *nl;

        if (poll(&pfd, 1, 200) <= 0)
            continue;
        n = read(STDIN_FILENO, buf + have, READ_CHUNK);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            break; /* the client closed stdin: stop */
        have += (size_t)n;
        while ((nl = memchr(buf, '\n', have))) {
            size_t len = (size_t)(nl - buf);
            if (!skipping && !blank(buf, len))
                dispatch(s, buf, len);
            skipping = false;
            memmove(buf, nl + 1, have - len - 1);
            have -= len + 1;
        }
        if (have > max) {
            char *text, why[120];
            snprintf(why, sizeof(why),
                     "Invalid Request: a message over %zu bytes (limits.max_message_bytes)", max);
            text = gw_rpc_error(NULL, GW_RPC_INVALID_REQUEST, why, NULL);
            if (!skipping)
                emit(s, text);
            free(text);
            skipping = true; /* the rest of this line goes too */
            have = 0;
        }
    }
    if (have && !skipping && !blank(buf, have))
        dispatch(s, buf, have);
    free(buf);
}

int gw_cmd_mcp(sg_cli_t *cli, int argc, char **argv)
{
    sg_cli_args_t args;
    sg_http_req_t *req;
    server_t s;
    gw_t gw;
    char why[1024], auth[600];
    int rc;

    if (sg_cli_parse(cli, argc, argv, &args) < 0)
        return SG_EXIT_USAGE;
    rc = sg_cli_opt(&args, "--stdio") && args.npos == 0;
    sg_cli_args_free(&args);
    if (!rc) {
        fprintf(stderr, "%s mcp: usage: %s mcp --stdio (MCP over HTTP is POST /mcp of `run`)\n",
                cli->prog, cli->prog);
        return SG_EXIT_USAGE;
    }
    if (!*sg_config_str(cli->cfg, "mcp.token")) {
        sg_log_kv(SG_LOG_ERROR,
                  "cannot start: mcp.token is empty: set SAGAD_MCP_TOKEN to a bearer token of the "
                  "users file (sagad-gateway token new) in the agent's MCP configuration",
                  NULL);
        return SG_EXIT_USAGE;
    }
    sg_metrics_init(SG_METRICS_GATEWAY);
    sg_run_trap_signals();
    if (gw_open(&gw, cli->cfg, why, sizeof(why)) < 0) {
        sg_log_kv(SG_LOG_ERROR, "cannot start", "error", why, NULL);
        return strstr(why, "PostgreSQL") ? SG_EXIT_INFRA : SG_EXIT_USAGE;
    }
    memset(&s, 0, sizeof(s));
    /* The token is authenticated as a request's would be. */
    req = sg_http_req_new("POST", "/mcp", "stdio");
    snprintf(auth, sizeof(auth), "Bearer %s", sg_config_str(cli->cfg, "mcp.token"));
    sg_http_req_add_header(req, "Authorization", auth);
    memset(auth, 0, sizeof(auth));
    rc = gw_authenticate(&gw, req, &s.caller, why, sizeof(why));
    sg_http_req_destroy(req);
    if (rc < 0) {
        sg_log_kv(SG_LOG_ERROR, "cannot start: mcp.token (SAGAD_MCP_TOKEN)", "error", why, NULL);
        gw_close(&gw);
        return SG_EXIT_USAGE;
    }
    s.caller.via = "stdio";
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.idle, NULL);
    gw_mcp_init(&s.m, &gw, true);
    sg_log_kv(SG_LOG_INFO, "mcp: serving on stdin and stdout", "principal", s.caller.user->name,
              "approvals", s.m.approvals ? "on" : "off", NULL);
    read_loop(&s, gw.lim.max_bytes);
    /* Waits in flight end now, answered with the saga as it is. */
    sg_run_running = 0;
    pthread_mutex_lock(&s.mu);
    while (s.in_flight > 0)
        pthread_cond_wait(&s.idle, &s.mu);
    pthread_mutex_unlock(&s.mu);
    sg_log_kv(SG_LOG_INFO, "mcp: stdin closed, stopping", NULL);
    gw_mcp_fini(&s.m);
    pthread_cond_destroy(&s.idle);
    pthread_mutex_destroy(&s.mu);
    gw_close(&gw);
    return SG_EXIT_OK;
}
