#include "sagad/sg_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_health.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_version.h"

struct sg_http_s {
    struct MHD_Daemon *d;
    int64_t stall_ms;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body,
                             const char *type)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result rc;

    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static char *text(const char *s)
{
    char *p = sg_xstrdup(s);

    return p;
}

/* A check's answer: "ok" or the reasons, 200 or 503. */
static enum MHD_Result reply_check(struct MHD_Connection *conn, bool ok, const char *why)
{
    return reply(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, text(ok ? "ok\n" : why),
                 "text/plain; charset=utf-8");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
    sg_http_t *http = cls;
    char why[2048];

    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text("only GET and HEAD\n"),
                     "text/plain; charset=utf-8");
    if (strcmp(url, "/metrics") == 0) {
        sg_health_ready(why, sizeof(why)); /* runs stale probes, updates sagad_ready */
        return reply(conn, MHD_HTTP_OK, sg_metrics_render(),
                     "text/plain; version=0.0.4; charset=utf-8");
    }
    if (strcmp(url, "/healthz") == 0)
        return reply_check(conn, sg_health_live(http->stall_ms, why, sizeof(why)), why);
    if (strcmp(url, "/readyz") == 0)
        return reply_check(conn, sg_health_ready(why, sizeof(why)), why);
    return reply(conn, MHD_HTTP_NOT_FOUND, text("not found: try /metrics, /healthz, /readyz\n"),
                 "text/plain; charset=utf-8");
}

/* Fills addr from text; returns its length, 0 when not an IP address. */
static socklen_t parse_addr(const char *host, int port, struct sockaddr_storage *addr, bool *ipv6)
{
    struct sockaddr_in *v4 = (struct sockaddr_in *)addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)addr;

    memset(addr, 0, sizeof(*addr));
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *ipv6 = false;
        return sizeof(*v4);
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *ipv6 = true;
        return sizeof(*v6);
    }
    return 0;
}

sg_http_t *sg_http_start(const sg_config_t *cfg, unsigned served_by, unsigned required_checks,
                         char *errstr, size_t errstr_size)
{
    const char *host = sg_config_str(cfg, "http.bind");
    int port = (int)sg_config_int(cfg, "http.port");
    struct sockaddr_storage addr;
    const union MHD_DaemonInfo *info;
    char where[128], portstr[16];
    sg_http_t *http;
    bool ipv6;

    if (!parse_addr(host, port, &addr, &ipv6)) {
        snprintf(errstr, errstr_size,
                 "config: http.bind = \"%s\": must be an IPv4 or IPv6 address (0.0.0.0 for "
                 "every interface)",
                 host);
        return NULL;
    }
    sg_metrics_init(served_by);
    sg_metric_set(SG_M_BUILD_INFO, SG_LABELS(SAGAD_VERSION), 1);
    sg_health_init(required_checks);
    http = sg_xcalloc(1, sizeof(*http));
    http->stall_ms = sg_config_int(cfg, "health.stall_ms");
    errno = 0;
    http->d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | (ipv6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)port, NULL, NULL, handle, http, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    if (!http->d) {
        snprintf(errstr, errstr_size, "http: cannot listen on %s%s%s:%d (http.bind, http.port): %s",
                 ipv6 ? "[" : "", host, ipv6 ? "]" : "", port,
                 errno ? strerror(errno) : "libmicrohttpd refused");
        free(http);
        return NULL;
    }
    info = MHD_get_daemon_info(http->d, MHD_DAEMON_INFO_BIND_PORT);
    if (info)
        port = info->port;
    snprintf(where, sizeof(where), "%s%s%s:%d", ipv6 ? "[" : "", host, ipv6 ? "]" : "", port);
    snprintf(portstr, sizeof(portstr), "%d", port);
    sg_log_kv(SG_LOG_INFO, "http endpoint listening", "addr", where, "port", portstr, "paths",
              "/metrics /healthz /readyz", NULL);
    return http;
}

void sg_http_stop(sg_http_t *http)
{
    if (!http)
        return;
    MHD_stop_daemon(http->d);
    free(http);
}

/* ---- the general server ------------------------------------------------- */

struct sg_httpd_s {
    struct MHD_Daemon *d;
    sg_http_handler_fn fn;
    void *opaque;
    size_t max_body;
    int port;
};

/* One request, from its first call of access() to its completion.  A
 * request made in the program (sg_http_req_new) has no connection: its
 * method, path, headers and query arguments are its own copies. */
typedef struct req_kv_s {
    char *name, *value;
} req_kv_t;

struct sg_http_req_s {
    struct MHD_Connection *conn;
    const char *method, *url;
    char *body;
    size_t len, cap;
    size_t seen; /* bytes of body received, kept or not */
    bool too_large;
    char peer[64];
    /* made in the program only */
    char *own_method, *own_url;
    req_kv_t *headers, *query;
    size_t nheaders, nquery;
};

void sg_http_answer_header(sg_http_answer_t *ans, const char *name, const char *value)
{
    if (ans->nheaders == SG_HTTP_MAX_HEADERS)
        return;
    snprintf(ans->headers[ans->nheaders].name, sizeof(ans->headers[0].name), "%s", name);
    snprintf(ans->headers[ans->nheaders].value, sizeof(ans->headers[0].value), "%s", value);
    ans->nheaders++;
}

const char *sg_http_req_method(const sg_http_req_t *req)
{
    return req->method;
}

const char *sg_http_req_path(const sg_http_req_t *req)
{
    return req->url;
}

const char *sg_http_req_header(const sg_http_req_t *req, const char *name)
{
    if (!req->conn) {
        for (size_t i = 0; i < req->nheaders; i++)
            if (strcasecmp(req->headers[i].name, name) == 0)
                return req->headers[i].value;
        return NULL;
    }
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *sg_http_req_query(const sg_http_req_t *req, const char *name)
{
    if (!req->conn) {
        for (size_t i = 0; i < req->nquery; i++)
            if (strcmp(req->query[i].name, name) == 0)
                return req->query[i].value;
        return NULL;
    }
    const char *v = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
    bool present = v || MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name,
                                                      strlen(name), NULL, NULL) == MHD_YES;

    return v ? v : present ? "" : NULL;
}

const char *sg_http_req_body(const sg_http_req_t *req, size_t *len)
{
    *len = req->len;
    return req->body;
}

const char *sg_http_req_peer(const sg_http_req_t *req)
{
    return req->peer;
}

sg_http_req_t *sg_http_req_new(const char *method, const char *path, const char *peer)
{
    sg_http_req_t *req = sg_xcalloc(1, sizeof(*req));

    req->method = req->own_method = sg_xstrdup(method);
    req->url = req->own_url = sg_xstrdup(path);
    snprintf(req->peer, sizeof(req->peer), "%s", peer);
    return req;
}

static void kv_add(req_kv_t **v, size_t *n, const char *name, const char *value)
{
    *v = sg_xrealloc(*v, (*n + 1) * sizeof(**v));
    (*v)[*n].name = sg_xstrdup(name);
    (*v)[*n].value = sg_xstrdup(value);
    (*n)++;
}

void sg_http_req_add_header(sg_http_req_t *req, const char *name, const char *value)
{
    kv_add(&req->headers, &req->nheaders, name, value);
}

void sg_http_req_add_query(sg_http_req_t *req, const char *name, const char *value)
{
    kv_add(&req->query, &req->nquery, name, value);
}

void sg_http_req_set_body(sg_http_req_t *req, const char *body, size_t len)
{
    free(req->body);
    req->body = sg_xmalloc(len + 1);
    memcpy(req->body, body, len);
    req->body[len] = '\0';
    req->len = len;
}

static void kv_free(req_kv_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].value);
    }
    free(v);
}

void sg_http_req_destroy(sg_http_req_t *req)
{
    if (!req)
        return;
    kv_free(req->headers, req->nheaders);
    kv_free(req->query, req->nquery);
    free(req->own_method);
    free(req->own_url);
    free(req->body);
    free(req);
}

static void peer_text(struct MHD_Connection *conn, char *out, size_t size)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;

    snprintf(out, size, "?");
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)size);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)size);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    sg_http_answer_t *ans = cls;
    long n;

    (void)pos;
    n = ans->read(ans->opaque, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void stream_free(void *cls)
{
    sg_http_answer_t *ans = cls;

    if (ans->done)
        ans->done(ans->opaque);
    free(ans);
}

static enum MHD_Result send_answer(struct MHD_Connection *conn, sg_http_answer_t *ans)
{
    struct MHD_Response *resp;
    enum MHD_Result rc;
    unsigned status = ans->status ? ans->status : 200;

    if (ans->read) {
        sg_http_answer_t *own = sg_xmalloc(sizeof(*own));
        *own = *ans;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, own,
                                                 stream_free);
        if (!resp) {
            stream_free(own);
            return MHD_NO;
        }
    } else {
        resp = MHD_create_response_from_buffer(ans->len, ans->body ? ans->body : (char *)"",
                                               ans->body ? MHD_RESPMEM_MUST_FREE
                                                         : MHD_RESPMEM_PERSISTENT);
        if (!resp) {
            free(ans->body);
            return MHD_NO;
        }
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            ans->type ? ans->type : "application/json");
    for (size_t i = 0; i < ans->nheaders; i++)
        MHD_add_response_header(resp, ans->headers[i].name, ans->headers[i].value);
    rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result too_large(struct MHD_Connection *conn, const sg_httpd_t *d)
{
    sg_http_answer_t ans;
    char *body = sg_xmalloc(256);

    memset(&ans, 0, sizeof(ans));
    ans.status = 413;
    ans.type = "application/problem+json";
    snprintf(body, 256,
             "{\"type\":\"about:blank\",\"title\":\"Payload Too Large\",\"status\":413,"
             "\"detail\":\"the body is over %zu bytes (limits.max_message_bytes)\"}",
             d->max_body);
    ans.body = body;
    ans.len = strlen(body);
    return send_answer(conn, &ans);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    sg_httpd_t *d = cls;
    sg_http_req_t *req = *con_cls;
    sg_http_answer_t ans;

    (void)version;
    if (!req) {
        req = sg_xcalloc(1, sizeof(*req));
        req->conn = conn;
        req->method = method;
        req->url = url;
        peer_text(conn, req->peer, sizeof(req->peer));
        *con_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size) {
        req->seen += *upload_data_size;
        if (req->seen > 8 * d->max_body)
            return MHD_NO; /* a client that does not stop: the connection is cut */
        if (!req->too_large && req->len + *upload_data_size > d->max_body) {
            /* The rest is read and dropped, then answered 413: a client
             * that is cut off mid-body sees a reset, not the answer. */
            req->too_large = true;
        } else if (!req->too_large) {
            if (req->len + *upload_data_size + 1 > req->cap) {
                req->cap = (req->len + *upload_data_size + 1) * 2;
                if (req->cap > d->max_body + 1)
                    req->cap = d->max_body + 1;
                req->body = sg_xrealloc(req->body, req->cap);
            }
            memcpy(req->body + req->len, upload_data, *upload_data_size);
            req->len += *upload_data_size;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->too_large)
        return too_large(conn, d);
    memset(&ans, 0, sizeof(ans));
    d->fn(d->opaque, req, &ans);
    return send_answer(conn, &ans);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    sg_http_req_t *req = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (!req)
        return;
    free(req->body);
    free(req);
    *con_cls = NULL;
}

sg_httpd_t *sg_httpd_start(const sg_httpd_opts_t *opts, sg_http_handler_fn fn, void *opaque,
                           char *errstr, size_t errstr_size)
{
    struct sockaddr_storage addr;
    const union MHD_DaemonInfo *info;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
    bool tls = opts->tls_cert_pem && *opts->tls_cert_pem;
    sg_httpd_t *d;
    bool ipv6;

    if (!parse_addr(opts->bind, opts->port, &addr, &ipv6)) {
        snprintf(errstr, errstr_size,
                 "%s: must be an IPv4 or IPv6 address (0.0.0.0 for every "
                 "interface)",
                 opts->bind);
        return NULL;
    }
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        snprintf(errstr, errstr_size,
                 "this libmicrohttpd was built without TLS: serve plain "
                 "HTTP behind a TLS-terminating proxy instead");
        return NULL;
    }
    if (ipv6)
        flags |= MHD_USE_IPv6;
    if (tls)
        flags |= MHD_USE_TLS;
    d = sg_xcalloc(1, sizeof(*d));
    d->fn = fn;
    d->opaque = opaque;
    d->max_body = opts->max_body;
    errno = 0;
    if (tls)
        d->d = MHD_start_daemon(
            flags, (uint16_t)opts->port, NULL, NULL, access_cb, d, MHD_OPTION_SOCK_ADDR,
            (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, opts->timeout_s,
            MHD_OPTION_CONNECTION_LIMIT, opts->max_connections, MHD_OPTION_NOTIFY_COMPLETED,
            completed_cb, d, MHD_OPTION_HTTPS_MEM_CERT, opts->tls_cert_pem,
            MHD_OPTION_HTTPS_MEM_KEY, opts->tls_key_pem, MHD_OPTION_END);
    else
        d->d = MHD_start_daemon(flags, (uint16_t)opts->port, NULL, NULL, access_cb, d,
                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                MHD_OPTION_CONNECTION_TIMEOUT, opts->timeout_s,
                                MHD_OPTION_CONNECTION_LIMIT, opts->max_connections,
                                MHD_OPTION_NOTIFY_COMPLETED, completed_cb, d, MHD_OPTION_END);
    if (!d->d) {
        snprintf(errstr, errstr_size, "cannot listen on %s%s%s:%d: %s", ipv6 ? "[" : "", opts->bind,
                 ipv6 ? "]" : "", opts->port,
                 errno ? strerror(errno) : "libmicrohttpd refused (a bad TLS certificate or key?)");
        free(d);
        return NULL;
    }
    info = MHD_get_daemon_info(d->d, MHD_DAEMON_INFO_BIND_PORT);
    d->port = info ? info->port : opts->port;
    return d;
}

int sg_httpd_port(const sg_httpd_t *d)
{
    return d->port;
}

void sg_httpd_stop(sg_httpd_t *d)
{
    if (!d)
        return;
    MHD_stop_daemon(d->d);
    free(d);
}
