/* sg_http: the small HTTP endpoint of the long-running binaries.
 *
 *   GET /metrics  Prometheus text format 0.0.4 (sg_metrics_render)
 *   GET /healthz  200 "ok" while the main loop turns (health.stall_ms),
 *                 else 503 with the reason
 *   GET /readyz   200 "ok" when ready (sg_health_ready), else 503 with one
 *                 line per failing check
 *
 * Served by libmicrohttpd on its own thread, so a busy or stuck main loop
 * still answers probes (and /healthz can tell it is stuck).  The only door
 * to libmicrohttpd. */
#ifndef SAGAD_HTTP_H
#define SAGAD_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "sagad/sg_config.h"

typedef struct sg_http_s sg_http_t;

/* Turns on the metrics of served_by (SG_METRICS_*) and the readiness
 * checks of required_checks (SG_CHECK_BIT()s), then listens on
 * http.bind:http.port (port 0: a free port) and logs
 * {"msg":"http endpoint listening","addr":"HOST:PORT"}.  Returns NULL with
 * errstr naming the address on failure (bad address, port in use). */
sg_http_t *sg_http_start(const sg_config_t *cfg, unsigned served_by, unsigned required_checks,
                         char *errstr, size_t errstr_size) __attribute__((warn_unused_result));

/* Stops serving and joins the thread; NULL is a no-op. */
void sg_http_stop(sg_http_t *http);

/* ---- a general server: sagad-gateway's API ------------------------------
 *
 * One thread per connection (a long poll or an event stream holds its
 * thread, never another request's), request bodies gathered whole up to
 * max_body bytes (more: 413 before the handler runs), HTTP/1.1 keep-alive,
 * TLS when cert and key are given (libmicrohttpd with GnuTLS). */
typedef struct sg_httpd_s sg_httpd_t;
typedef struct sg_http_req_s sg_http_req_t;

/* The answer a handler fills.  body is malloc'd and taken (NULL: empty);
 * headers are name/value pairs copied when the answer is sent.  A stream
 * (Server-Sent Events) sets read instead of body: it is called with room
 * for max bytes and returns how many it wrote (it may block, it holds only
 * its own connection), or -1 at the end; done frees its opaque. */
#define SG_HTTP_MAX_HEADERS      12
#define SG_HTTP_HEADER_VALUE_MAX 1024
typedef struct sg_http_answer_s {
    unsigned status;
    const char *type; /* Content-Type; NULL: application/json */
    char *body;
    size_t len;
    struct {
        char name[48];
        char value[SG_HTTP_HEADER_VALUE_MAX];
    } headers[SG_HTTP_MAX_HEADERS];
    size_t nheaders;
    long (*read)(void *opaque, char *buf, size_t max);
    void (*done)(void *opaque);
    void *opaque;
} sg_http_answer_t;

/* Adds a header to the answer (silently dropped past SG_HTTP_MAX_HEADERS;
 * the value cut at SG_HTTP_HEADER_VALUE_MAX - 1 bytes). */
void sg_http_answer_header(sg_http_answer_t *ans, const char *name, const char *value);

typedef void (*sg_http_handler_fn)(void *opaque, sg_http_req_t *req, sg_http_answer_t *ans);

typedef struct sg_httpd_opts_s {
    const char *bind; /* an IPv4 or IPv6 address */
    int port;         /* 0: a free one (sg_httpd_port) */
    size_t max_body;
    unsigned max_connections;
    unsigned timeout_s;                     /* an idle connection is closed after it */
    const char *tls_cert_pem, *tls_key_pem; /* both or neither */
} sg_httpd_opts_t;

/* Starts serving; NULL with errstr saying why (bad address, port in use,
 * no TLS in this libmicrohttpd). */
sg_httpd_t *sg_httpd_start(const sg_httpd_opts_t *opts, sg_http_handler_fn fn, void *opaque,
                           char *errstr, size_t errstr_size) __attribute__((warn_unused_result));
int sg_httpd_port(const sg_httpd_t *d);
/* Stops: no new connection, open ones closed, threads joined. */
void sg_httpd_stop(sg_httpd_t *d);

/* The request, valid during the handler call. */
const char *sg_http_req_method(const sg_http_req_t *req);
const char *sg_http_req_path(const sg_http_req_t *req); /* without the query */
/* A header's value (case-insensitive name), NULL when absent. */
const char *sg_http_req_header(const sg_http_req_t *req, const char *name);
/* A query argument's value (decoded), NULL when absent ("" for ?x). */
const char *sg_http_req_query(const sg_http_req_t *req, const char *name);
/* The body gathered (not NUL-terminated; NULL with *len 0 when none). */
const char *sg_http_req_body(const sg_http_req_t *req, size_t *len);
/* The peer's address as text ("127.0.0.1", "::1"). */
const char *sg_http_req_peer(const sg_http_req_t *req);

/* A request made in the program rather than received, answered by the
 * same handlers (sagad-gateway's MCP tools call its API's handlers this
 * way, so who may do what is decided in one place).  Every value is
 * copied; headers are found case-insensitively, query arguments as given.
 * Free it with sg_http_req_destroy (NULL is a no-op); a received request
 * is freed by the server, never by this. */
sg_http_req_t *sg_http_req_new(const char *method, const char *path, const char *peer);
void sg_http_req_add_header(sg_http_req_t *req, const char *name, const char *value);
void sg_http_req_add_query(sg_http_req_t *req, const char *name, const char *value);
void sg_http_req_set_body(sg_http_req_t *req, const char *body, size_t len);
void sg_http_req_destroy(sg_http_req_t *req);

#endif
