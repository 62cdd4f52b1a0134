/* The gateway's server (gw.h): the routes, and each request's life:
 * route, Origin, authenticate, rate limit, the handler, the count and
 * the log line naming the principal. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gw.h"
#include "gw_console.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_health.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_run.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_version.h"

/* ---- answers ----------------------------------------------------------------- */

static const char *reason_phrase(unsigned status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Payload Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return status >= 500 ? "Internal Server Error" : "Error";
    }
}

void gw_problem(sg_http_answer_t *ans, unsigned status, const char *detail, sg_json_t *extra)
{
    sg_json_t *doc = sg_json_new_object();
    char *text;

    sg_json_add_str(doc, "type", "about:blank");
    sg_json_add_str(doc, "title", reason_phrase(status));
    sg_json_add_int(doc, "status", status);
    sg_json_add_str(doc, "detail", detail);
    for (const sg_json_t *m = extra ? sg_json_first(extra) : NULL; m; m = sg_json_next(m))
        sg_json_add_node(doc, sg_json_key(m), sg_json_dup(m));
    sg_json_destroy(extra);
    text = sg_json_print(doc);
    sg_json_destroy(doc);
    ans->status = status;
    ans->type = "application/problem+json";
    ans->body = text;
    ans->len = strlen(text);
}

void gw_problem_at(sg_http_answer_t *ans, unsigned status, const char *code, const char *path,
                   const char *rule)
{
    sg_json_t *extra = sg_json_new_object(), *errors = sg_json_new_array(),
              *one = sg_json_new_object();

    sg_json_add_str(extra, "code", code);
    sg_json_add_str(one, "path", path);
    sg_json_add_str(one, "rule", rule);
    sg_json_append(errors, one);
    sg_json_add_node(extra, "errors", errors);
    gw_problem(ans, status, rule, extra);
}

void gw_json_text(sg_http_answer_t *ans, unsigned status, char *text)
{
    ans->status = status;
    ans->type = "application/json";
    ans->body = text;
    ans->len = strlen(text);
}

void gw_json(sg_http_answer_t *ans, unsigned status, sg_json_t *doc)
{
    char *text = sg_json_print(doc);

    sg_json_destroy(doc);
    gw_json_text(ans, status, text);
}

void gw_db_problem(sg_http_answer_t *ans, const sg_err_t *err)
{
    char detail[700];

    sg_log_kv(SG_LOG_WARN, "query failed", "error", err->message, "code", err->code, NULL);
    snprintf(detail, sizeof(detail),
             "PostgreSQL failed (%s); try again in a moment: the gateway reconnects by itself",
             err->code);
    gw_problem(ans, 503, detail, NULL);
    sg_http_answer_header(ans, "Retry-After", "1");
}

static void plain(sg_http_answer_t *ans, unsigned status, const char *text)
{
    ans->status = status;
    ans->type = "text/plain; charset=utf-8";
    ans->body = sg_xstrdup(text);
    ans->len = strlen(text);
}

/* ---- routes -------------------------------------------------------------------- */

struct gw_route_s {
    const char *method;
    const char *tmpl; /* segments; {id}, {step}, {verb} are parameters */
    gw_handler_fn fn;
};

static const gw_route_t routes[] = {
    {"POST", "/v1/sagas", gw_sagas_submit},
    {"GET", "/v1/sagas", gw_sagas_list},
    {"GET", "/v1/sagas/{id}", gw_sagas_get},
    {"GET", "/v1/sagas/{id}/wait", gw_sagas_wait},
    {"GET", "/v1/sagas/{id}/events", gw_sagas_events},
    {"GET", "/v1/sagas/{id}/attempts", gw_sagas_attempts},
    {"POST", "/v1/sagas/{id}/cancel", gw_sagas_cancel},
    {"POST", "/v1/sagas/{id}/steps/{step}/{verb}", gw_sagas_decide},
    {"GET", "/v1/approvals", gw_ops_approvals},
    {"GET", "/v1/dead-letters", gw_ops_dlq_list},
    {"GET", "/v1/dead-letters/{id}", gw_ops_dlq_get},
    {"POST", "/v1/dead-letters/{id}/replay", gw_ops_dlq_replay},
    {"POST", "/v1/dead-letters/{id}/discard", gw_ops_dlq_discard},
    {"GET", "/v1/summary", gw_ops_summary},
    {"GET", "/v1/tools", gw_ops_tools},
    {"GET", "/v1/errors/{id}", gw_ops_error},
    {"POST", "/mcp", gw_mcp_http},
};

/* Does path match tmpl?  Parameters into args (pointing into buf, a copy
 * of path cut at the slashes). */
static bool match(const char *tmpl, const char *path, char *buf, size_t size, gw_route_args_t *args)
{
    char *save = NULL, *seg;
    const char *t = tmpl;

    memset(args, 0, sizeof(*args));
    /* An empty segment ("//", a trailing "/") is no route's: strtok_r
     * below would skip it. */
    if (strlen(path) >= size || strstr(path, "//") || (path[0] && path[strlen(path) - 1] == '/'))
        return false;
    strcpy(buf, path);
    seg = strtok_r(buf, "/", &save);
    while (*t) {
        const char *end;
        size_t n;
        if (*t == '/')
            t++;
        end = strchr(t, '/');
        n = end ? (size_t)(end - t) : strlen(t);
        if (!seg)
            return false;
        if (n == 4 && strncmp(t, "{id}", 4) == 0)
            args->id = seg;
        else if (n == 6 && strncmp(t, "{step}", 6) == 0)
            args->step = seg;
        else if (n == 6 && strncmp(t, "{verb}", 6) == 0) {
            if (strcmp(seg, "approve") && strcmp(seg, "reject"))
                return false;
            args->verb = seg;
        } else if (strlen(seg) != n || strncmp(t, seg, n) != 0)
            return false;
        t += n;
        seg = strtok_r(NULL, "/", &save);
    }
    return seg == NULL;
}

const gw_route_t *gw_route_find(const char *method, const char *path, char *buf, size_t size,
                                gw_route_args_t *args, bool *path_known)
{
    const gw_route_t *found = NULL;

    *path_known = false;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]) && !found; i++) {
        if (!match(routes[i].tmpl, path, buf, size, args))
            continue;
        *path_known = true;
        if (strcmp(routes[i].method, method) == 0)
            found = &routes[i];
    }
    if (!found)
        memset(args, 0, sizeof(*args));
    return found;
}

void gw_route_allow(const char *path, char *out, size_t size)
{
    char buf[1024];
    gw_route_args_t args;
    size_t n = 0;

    out[0] = '\0';
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (!match(routes[i].tmpl, path, buf, sizeof(buf), &args))
            continue;
        n += (size_t)snprintf(out + n, n < size ? size - n : 0, "%s%s", n ? ", " : "",
                              routes[i].method);
        if (strcmp(routes[i].method, "GET") == 0)
            n += (size_t)snprintf(out + n, n < size ? size - n : 0, ", HEAD");
    }
    snprintf(out + (n < size ? n : size - 1), n < size ? size - n : 1, "%s",
             n ? ", OPTIONS" : "OPTIONS");
}

const char *gw_route_template(const gw_route_t *route)
{
    return route->tmpl;
}

/* ---- one request ------------------------------------------------------------------ */

static void health(gw_t *gw, const char *path, sg_http_answer_t *ans)
{
    char why[1024];

    if (strcmp(path, "/healthz") == 0) {
        plain(ans, 200, "ok\n");
    } else if (strcmp(path, "/readyz") == 0) {
        bool ok = true;
        why[0] = '\0';
        if (!gw_pool_listening(gw->pool)) {
            ok = false;
            snprintf(why, sizeof(why), "postgresql: the LISTEN session is down\n");
        }
        if (!gw_producer_ready(gw->prod, why + strlen(why), sizeof(why) - strlen(why))) {
            ok = false;
            strncat(why, "\n", sizeof(why) - strlen(why) - 1);
        }
        sg_metric_set(SG_M_READY, NULL, ok ? 1 : 0);
        plain(ans, ok ? 200 : 503, ok ? "ok\n" : why);
    } else {
        ans->status = 200;
        ans->type = "text/plain; version=0.0.4; charset=utf-8";
        ans->body = sg_metrics_render();
        ans->len = strlen(ans->body);
    }
}

/* The request's count, time and log line naming its principal. */
static void account(sg_http_req_t *req, const sg_http_answer_t *ans, const char *label,
                    const gw_caller_t *caller, uint64_t started)
{
    char status[8], ms[24];

    snprintf(status, sizeof(status), "%u", ans->status ? ans->status : 200);
    sg_metric_inc(SG_M_GW_REQUESTS, SG_LABELS(label, status));
    sg_metric_observe(SG_M_GW_REQUEST_DURATION, SG_LABELS(label),
                      (double)(sg_run_now_us() - started) / 1e6);
    snprintf(ms, sizeof(ms), "%.3f", (double)(sg_run_now_us() - started) / 1000.0);
    sg_log_kv(ans->status >= 500 ? SG_LOG_WARN : SG_LOG_INFO, "request", "method",
              sg_http_req_method(req), "route", label, "status", status, "principal",
              caller->user ? caller->user->name : "-", "auth", caller->via ? caller->via : "-",
              "peer", sg_http_req_peer(req), "ms", ms, NULL);
}

static void handle(void *opaque, sg_http_req_t *req, sg_http_answer_t *ans)
{
    gw_t *gw = opaque;
    const char *method = sg_http_req_method(req), *path = sg_http_req_path(req);
    const char *origin = sg_http_req_header(req, "Origin");
    const gw_route_t *route;
    bool path_known = false;
    gw_route_args_t args;
    gw_caller_t caller = {0};
    char buf[1024], detail[512];
    uint64_t started = sg_run_now_us();
    const char *label;
    int retry_after;
    bool same_origin = false;

    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0 ||
        strcmp(path, "/metrics") == 0) {
        if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
            health(gw, path, ans);
        else {
            plain(ans, 405, "only GET and HEAD\n");
            sg_http_answer_header(ans, "Allow", "GET, HEAD");
        }
        return;
    }
    /* The console's files and sessions (gw_console.c), before the API. */
    if (gw_console_serve(gw, req, ans, &label)) {
        account(req, ans, label, &caller, started);
        return;
    }
    /* HEAD is GET without the body (libmicrohttpd sends none). */
    route = gw_route_find(strcmp(method, "HEAD") == 0 ? "GET" : method, path, buf, sizeof(buf),
                          &args, &path_known);
    label = route ? route->tmpl : path_known ? "(method)" : "(unknown)";
    if (!gw_console_origin_ok(gw, req, &same_origin)) {
        /* A browser page of another site: no credential it could carry
         * may act (the console's cookie, or a proxy's in front). */
        gw_problem(ans, 403,
                   "this Origin may not call the API: add it to gateway.allowed_origins if a "
                   "console there should",
                   NULL);
    } else if (strcmp(method, "OPTIONS") == 0 && path_known) {
        /* A browser's preflight (CORS) from an allowed origin, or a
         * client asking what the path takes. */
        char allow[64];
        gw_route_allow(path, allow, sizeof(allow));
        ans->status = 204;
        sg_http_answer_header(ans, "Allow", allow);
        if (origin) {
            sg_http_answer_header(ans, "Access-Control-Allow-Methods", allow);
            sg_http_answer_header(ans, "Access-Control-Allow-Headers",
                                  "Authorization, Content-Type, Idempotency-Key, "
                                  "If-None-Match, Last-Event-ID, X-CSRF-Token");
            sg_http_answer_header(ans, "Access-Control-Max-Age", "600");
        }
    } else if (!route && path_known) {
        char allow[64];
        gw_route_allow(path, allow, sizeof(allow));
        gw_problem(ans, 405, "this path does not take that method: see Allow", NULL);
        sg_http_answer_header(ans, "Allow", allow);
    } else if (!route) {
        gw_problem(ans, 404, "no such route: the API is under /v1 (schemas/openapi.yaml)", NULL);
    } else if (gw_authenticate(gw, req, &caller, detail, sizeof(detail)) < 0) {
        gw_problem(ans, 401, detail, NULL);
        sg_http_answer_header(ans, "WWW-Authenticate", "Bearer realm=\"sagad\"");
    } else if (strcmp(caller.via, "session") == 0 && gw_console_guard(gw, req, &caller, ans) < 0) {
        /* answered: the console's CSRF, Origin or read-only rule */
    } else if (!gw_limiter_take(gw->limiter, caller.user->name, &retry_after)) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after > 0 ? retry_after : 1);
        sg_metric_inc(SG_M_GW_RATE_LIMITED, NULL);
        gw_problem(ans, 429, "too many requests from this principal (gateway.rate_per_s)", NULL);
        sg_http_answer_header(ans, "Retry-After", ra);
    } else {
        route->fn(gw, &caller, req, &args, ans);
    }
    if (origin && !same_origin && gw_console_origin_ok(gw, req, &same_origin)) {
        sg_http_answer_header(ans, "Access-Control-Allow-Origin", origin);
        sg_http_answer_header(ans, "Access-Control-Expose-Headers",
                              "Location, ETag, Link, Retry-After");
        sg_http_answer_header(ans, "Vary", "Origin");
    }
    account(req, ans, label, &caller, started);
}

/* ---- start and stop ------------------------------------------------------------------ */

/* "a, b,c" into a list of trimmed items. */
static char **split_list(const char *s, size_t *n)
{
    char *copy = sg_xstrdup(s), *save = NULL, *item;
    char **v = NULL;

    *n = 0;
    for (item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ')
            item++;
        for (char *e = item + strlen(item); e > item && e[-1] == ' ';)
            *--e = '\0';
        if (!*item)
            continue;
        v = sg_xrealloc(v, (*n + 1) * sizeof(*v));
        v[(*n)++] = sg_xstrdup(item);
    }
    free(copy);
    return v;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static char *read_pem(const char *path, char *why, size_t why_size)
{
    FILE *fp = fopen(path, "rb");
    char *buf;
    size_t n;

    if (!fp) {
        snprintf(why, why_size, "cannot open %s", path);
        return NULL;
    }
    buf = sg_xmalloc(256 * 1024);
    n = fread(buf, 1, 256 * 1024 - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return buf;
}

static int setup(gw_t *gw, const sg_config_t *cfg, char *why, size_t why_size)
{
    const char *users = sg_config_str(cfg, "gateway.users");
    const char *key = sg_config_str(cfg, "gateway.key");
    sg_err_t err;

    memset(gw, 0, sizeof(*gw));
    gw->cfg = cfg;
    gw->wait_max_ms = sg_config_int(cfg, "gateway.wait_max_ms");
    gw->lim.max_bytes = (size_t)sg_config_int(cfg, "limits.max_message_bytes");
    gw->lim.max_depth = (int)sg_config_int(cfg, "limits.max_json_depth");
    gw->lim.max_nodes = (long)sg_config_int(cfg, "limits.max_json_nodes");
    if (*users && !(gw->users = gw_users_load(users, why, why_size)))
        return -1;
    if (!*users)
        sg_log_kv(SG_LOG_WARN, "gateway.users is empty: every API request is refused with 401",
                  NULL);
    if (*key) {
        if (sg_signing_key_load(key, &gw->key, why, why_size) < 0)
            return -1;
        if (!(gw->signer = sg_ed25519_signer_new(gw->key.priv))) {
            snprintf(why, why_size, "%s (gateway.key): OpenSSL refused the private key", key);
            return -1;
        }
        gw->have_key = true;
    } else {
        sg_log_kv(SG_LOG_WARN,
                  "gateway.key is empty: submissions go unsigned (a saga with an approval gate "
                  "is refused) and controls cannot be sent",
                  NULL);
    }
    if (!(gw->reg = sg_registry_load(sg_config_str(cfg, "worker.registry"), cfg, NULL, &err))) {
        snprintf(why, why_size, "%s", err.message);
        return -1;
    }
    gw->proxies = split_list(sg_config_str(cfg, "gateway.trusted_proxies"), &gw->nproxies);
    gw->origins = split_list(sg_config_str(cfg, "gateway.allowed_origins"), &gw->norigins);
    gw->tls = *sg_config_str(cfg, "gateway.tls_cert") != '\0';
    gw->console_read_only = sg_config_bool(cfg, "console.read_only");
    if (sg_config_bool(cfg, "console.enabled"))
        gw->sessions = gw_sessions_new((size_t)sg_config_int(cfg, "console.max_sessions"),
                                       sg_config_int(cfg, "console.session_idle_ms"),
                                       sg_config_int(cfg, "console.session_max_ms"));
    gw->limiter = gw_limiter_new((double)sg_config_int(cfg, "gateway.rate_per_s"),
                                 (double)sg_config_int(cfg, "gateway.rate_burst"));
    if (!(gw->pool = gw_pool_new(cfg, (int)sg_config_int(cfg, "gateway.pg_pool"), why, why_size)))
        return -1;
    if (!(gw->prod = gw_producer_new(cfg, why, why_size)))
        return -1;
    return 0;
}

static void teardown(gw_t *gw)
{
    gw_producer_free(gw->prod);
    gw_pool_free(gw->pool);
    gw_limiter_free(gw->limiter);
    gw_sessions_free(gw->sessions);
    free_list(gw->proxies, gw->nproxies);
    free_list(gw->origins, gw->norigins);
    sg_registry_destroy(gw->reg);
    gw_users_free(gw->users);
    sg_ed25519_signer_free(gw->signer);
    memset(&gw->key, 0, sizeof(gw->key));
}

int gw_open(gw_t *gw, const sg_config_t *cfg, char *why, size_t why_size)
{
    if (setup(gw, cfg, why, why_size) < 0) {
        teardown(gw);
        return -1;
    }
    return 0;
}

void gw_close(gw_t *gw)
{
    teardown(gw);
}

int gw_serve(sg_cli_t *cli)
{
    const sg_config_t *cfg = cli->cfg;
    sg_httpd_opts_t opts = {0};
    sg_httpd_t *d = NULL;
    char why[1024], where[160], port[16];
    char *cert = NULL, *key = NULL;
    gw_t gw;
    int rc = SG_EXIT_OK;

    sg_metrics_init(SG_METRICS_GATEWAY);
    sg_metric_set(SG_M_BUILD_INFO, SG_LABELS(SAGAD_VERSION), 1);
    sg_run_trap_signals();
    if (setup(&gw, cfg, why, sizeof(why)) < 0) {
        sg_log_kv(SG_LOG_ERROR, "cannot start", "error", why, NULL);
        teardown(&gw);
        return strstr(why, "PostgreSQL") ? SG_EXIT_INFRA : SG_EXIT_USAGE;
    }
    opts.bind = sg_config_str(cfg, "gateway.bind");
    opts.port = (int)sg_config_int(cfg, "gateway.port");
    opts.max_body = (size_t)sg_config_int(cfg, "limits.max_message_bytes");
    opts.max_connections = (unsigned)sg_config_int(cfg, "gateway.max_connections");
    opts.timeout_s = (unsigned)(gw.wait_max_ms / 1000 + 30);
    if (*sg_config_str(cfg, "gateway.tls_cert") || *sg_config_str(cfg, "gateway.tls_key")) {
        if (!(cert = read_pem(sg_config_str(cfg, "gateway.tls_cert"), why, sizeof(why))) ||
            !(key = read_pem(sg_config_str(cfg, "gateway.tls_key"), why, sizeof(why)))) {
            sg_log_kv(SG_LOG_ERROR,
                      "cannot start: gateway.tls_cert and gateway.tls_key go "
                      "together",
                      "error", why, NULL);
            rc = SG_EXIT_USAGE;
            goto out;
        }
        opts.tls_cert_pem = cert;
        opts.tls_key_pem = key;
    }
    if (!(d = sg_httpd_start(&opts, handle, &gw, why, sizeof(why)))) {
        sg_log_kv(SG_LOG_ERROR, "cannot start: gateway.bind, gateway.port", "error", why, NULL);
        rc = SG_EXIT_USAGE;
        goto out;
    }
    snprintf(where, sizeof(where), "%s:%d", opts.bind, sg_httpd_port(d));
    snprintf(port, sizeof(port), "%d", sg_httpd_port(d));
    sg_log_kv(SG_LOG_INFO, "gateway listening", "addr", where, "port", port, "tls",
              cert ? "on" : "off", "signer", gw.have_key ? gw.key.principal : "-", NULL);
    while (sg_run_running) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        sg_cli_reload(cli);
    }
    sg_log_kv(SG_LOG_INFO, "stopping: no new connection; open ones end", NULL);
out:
    sg_httpd_stop(d);
    teardown(&gw);
    if (key) {
        memset(key, 0, strlen(key));
        free(key);
    }
    free(cert);
    return rc;
}
