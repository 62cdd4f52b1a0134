#include "sagad/sg_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
