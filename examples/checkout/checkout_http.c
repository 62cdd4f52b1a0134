/* The HTTP side of checkout-svc: libmicrohttpd, routing, the order of the
 * business decisions, and the admin endpoints.
 *
 * Threading: one thread per connection (MHD_USE_THREAD_PER_CONNECTION with
 * the internal listening thread).  A delay is then a plain interruptible
 * sleep in that connection's thread, so 200+ concurrent keep-alive
 * connections each wait their delay in parallel and the code stays
 * straight-line.  Suspend/resume with a timer would save the threads'
 * stacks, but a test service with a few hundred connections does not need
 * that, and it would turn every delay into a callback state machine. */
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "checkout.h"
#include "sagad/sg_log.h"
#include "sagad/sg_text.h"

/* The request body as it arrives (libmicrohttpd calls back per chunk). */
typedef struct req_s {
    char *body;
    size_t len, cap;
    bool too_large; /* over CHECKOUT_BODY_MAX: read and dropped */
} req_t;

typedef enum MHD_Result mhd_result_t;

static char *xstrndup(const char *s, size_t n)
{
    char *d = strndup(s, n);

    if (!d)
        abort(); /* as sg_json does on OOM */
    return d;
}

/* Text safe to put in JSON (cJSON writes bytes through as they are): valid
 * UTF-8 as is, else every non-ASCII byte becomes '?'.  Stops at a NUL. */
static char *text_or_lossy(const char *s, size_t len)
{
    char *d = xstrndup(s, len);

    if (!sg_utf8_valid(d, strlen(d)))
        for (char *p = d; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
    return d;
}

/* --- responses ------------------------------------------------------------ */

/* Bytes of a body_bytes answer: one JSON string, '"' x... '"', made as it
 * is sent so 50 MiB costs no 50 MiB buffer.  cls carries the total. */
static ssize_t stream_bytes(void *cls, uint64_t pos, char *buf, size_t max)
{
    uint64_t total = (uint64_t)(uintptr_t)cls;
    size_t n = total - pos < max ? (size_t)(total - pos) : max;

    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    memset(buf, 'x', n);
    if (pos == 0)
        buf[0] = '"';
    if (pos + n == total)
        buf[n - 1] = '"';
    return (ssize_t)n;
}

/* Queues reply (its body passes to libmicrohttpd). */
static mhd_result_t send_reply(struct MHD_Connection *conn, checkout_reply_t *reply,
                               const char *allow)
{
    struct MHD_Response *res;
    mhd_result_t rc;

    if (reply->body_bytes > 0)
        res =
            MHD_create_response_from_callback((uint64_t)reply->body_bytes, 64 * 1024, stream_bytes,
                                              (void *)(uintptr_t)reply->body_bytes, NULL);
    else
        res = MHD_create_response_from_buffer(strlen(reply->body), reply->body,
                                              MHD_RESPMEM_MUST_FREE);
    if (!res) {
        checkout_reply_free(reply);
        return MHD_NO;
    }
    reply->body = NULL;
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (reply->replayed)
        MHD_add_response_header(res, "Idempotent-Replayed", "true");
    if (reply->retry_after[0])
        MHD_add_response_header(res, MHD_HTTP_HEADER_RETRY_AFTER, reply->retry_after);
    if (allow)
        MHD_add_response_header(res, MHD_HTTP_HEADER_ALLOW, allow);
    rc = MHD_queue_response(conn, (unsigned)reply->status, res);
    MHD_destroy_response(res);
    return rc;
}

static mhd_result_t send_json(struct MHD_Connection *conn, int status, sg_json_t *doc)
{
    checkout_reply_t reply = {.status = status, .body = sg_json_print(doc)};

    sg_json_destroy(doc);
    return send_reply(conn, &reply, NULL);
}

static mhd_result_t send_ok(struct MHD_Connection *conn)
{
    sg_json_t *o = sg_json_new_object();

    sg_json_add_bool(o, "ok", true);
    return send_json(conn, 200, o);
}

/* --- the request log ------------------------------------------------------ */

#define MAX_HEADERS 128

typedef struct hdrs_s {
    size_t n;
    const char *name[MAX_HEADERS];
    const char *value[MAX_HEADERS];
} hdrs_t;

static mhd_result_t collect_header(void *cls, enum MHD_ValueKind kind, const char *name,
                                   const char *value)
{
    hdrs_t *h = cls;

    (void)kind;
    if (h->n < MAX_HEADERS) {
        h->name[h->n] = name;
        h->value[h->n++] = value ? value : "";
    }
    return MHD_YES;
}

/* {"name-lowercased": "value"}; repeated headers joined by ", " as
 * RFC 9110 section 5.3 allows. */
static sg_json_t *headers_json(struct MHD_Connection *conn)
{
    sg_json_t *o = sg_json_new_object();
    hdrs_t h = {0};

    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, &h);
    for (size_t i = 0; i < h.n; i++) {
        char name[256], *value = NULL, *joined;
        size_t j;

        for (j = 0; j < i && strcasecmp(h.name[j], h.name[i]) != 0; j++)
            ;
        if (j < i)
            continue; /* joined into the first occurrence */
        snprintf(name, sizeof(name), "%s", h.name[i]);
        for (char *p = name; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
        for (j = i; j < h.n; j++) {
            if (strcasecmp(h.name[j], h.name[i]) != 0)
                continue;
            if (!value) {
                value = xstrndup(h.value[j], strlen(h.value[j]));
                continue;
            }
            joined = malloc(strlen(value) + strlen(h.value[j]) + 3);
            if (!joined)
                abort();
            sprintf(joined, "%s, %s", value, h.value[j]);
            free(value);
            value = joined;
        }
        joined = text_or_lossy(value, strlen(value));
        sg_json_add_str(o, name, joined);
        free(joined);
        free(value);
    }
    return o;
}

/* The body as the log keeps it: parsed JSON, else the text, or a note
 * when it is too large to keep. */
static sg_json_t *body_json(const req_t *req)
{
    sg_json_t *doc;
    char *text, note[96];

    if (req->len == 0 && !req->too_large)
        return NULL;
    if (!req->too_large && req->len <= CHECKOUT_LOG_BODY_MAX) {
        sg_json_limits_t lim = {CHECKOUT_LOG_BODY_MAX, 64, 0};

        if ((doc = sg_json_parse(req->body, req->len, &lim, NULL)) != NULL)
            return doc;
    }
    if (req->too_large || req->len > CHECKOUT_LOG_BODY_MAX) {
        snprintf(note, sizeof(note), "(%s body of %zu bytes, not kept)",
                 req->too_large ? "oversized" : "large", req->len);
        return sg_json_new_str(note);
    }
    text = text_or_lossy(req->body, req->len);
    doc = sg_json_new_str(text);
    free(text);
    return doc;
}

static uint64_t log_request(checkout_server_t *srv, struct MHD_Connection *conn, const char *url,
                            const char *method, const req_t *req)
{
    const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
    checkout_logreq_t lr;

    lr.method = method;
    lr.path = text_or_lossy(url, strlen(url));
    lr.key = key ? text_or_lossy(key, strlen(key)) : NULL;
    lr.headers = headers_json(conn);
    lr.body = body_json(req);
    return checkout_state_log_begin(srv->st, &lr);
}

/* --- business endpoints --------------------------------------------------- */

static void do_work(checkout_server_t *srv, int idx, const char *key, int status, const req_t *req,
                    checkout_reply_t *reply)
{
    sg_json_limits_t lim = {CHECKOUT_BODY_MAX, 64, 0};
    sg_json_t *doc = NULL;
    char *error = NULL;
    sg_err_t err;

    if (req->len > 0 && (doc = sg_json_parse(req->body, req->len, &lim, &err)) == NULL)
        error = checkout_error_body("invalid_json", false, "request body: %s", err.message);
    else if (doc && !sg_json_is_object(doc))
        error = checkout_error_body("invalid_body", false,
                                    "request body: must be a JSON object, not %s",
                                    sg_json_type_name(doc));
    checkout_state_complete(srv->st, idx, key, error ? 400 : status, error, error ? NULL : doc,
                            reply);
    sg_json_destroy(doc);
}

/* An injected fault: wait, then answer as the fault says. */
static void do_fault(checkout_server_t *srv, int idx, const char *key, const checkout_fault_t *f,
                     const req_t *req, checkout_reply_t *reply)
{
    bool slow_success = f->status >= 200 && f->status <= 299 && f->body_bytes == 0;

    memset(reply, 0, sizeof(*reply));
    if (f->delay_ms > 0 && !checkout_state_sleep(srv->st, f->delay_ms)) {
        if (slow_success)
            checkout_state_progress_end(srv->st, idx, key);
        reply->status = 503;
        reply->body = checkout_error_body("shutting_down", true, "the service is stopping");
        return;
    }
    if (f->body_bytes > 0) {
        /* Streamed: neither stored nor an effect. */
        reply->status = f->status;
        reply->body_bytes = f->body_bytes;
    } else if (slow_success) {
        /* A slow success: the work happens (a client that gave up does not
         * know that; its retry under the same key gets the replay).  It was
         * in progress since checkout_state_admit. */
        do_work(srv, idx, key, f->status, req, reply);
        checkout_state_progress_end(srv->st, idx, key);
        return;
    } else {
        char code[32];

        snprintf(code, sizeof(code), "injected_%d", f->status);
        checkout_state_complete(
            srv->st, idx, key, f->status,
            checkout_error_body(code, checkout_status_retriable(f->status), "injected fault"), NULL,
            reply);
    }
    snprintf(reply->retry_after, sizeof(reply->retry_after), "%s", f->retry_after);
}

static bool key_ok(const char *key)
{
    size_t n = strlen(key);

    if (n == 0 || n > CHECKOUT_KEY_MAX)
        return false;
    for (const char *p = key; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
            return false;
    return true;
}

static void business(checkout_server_t *srv, struct MHD_Connection *conn, int idx, const req_t *req,
                     checkout_reply_t *reply)
{
    const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
    checkout_fault_t fault;

    memset(reply, 0, sizeof(*reply));
    if (srv->delay_ms > 0 && !checkout_state_sleep(srv->st, srv->delay_ms)) {
        reply->status = 503;
        reply->body = checkout_error_body("shutting_down", true, "the service is stopping");
    } else if (!key || !*key) {
        reply->status = 400;
        reply->body = checkout_error_body("missing_idempotency_key", false,
                                          "POST %s needs an Idempotency-Key header",
                                          checkout_endpoints[idx].path);
    } else if (!key_ok(key)) {
        reply->status = 400;
        reply->body =
            checkout_error_body("invalid_idempotency_key", false,
                                "Idempotency-Key: must be 1..%d printable ASCII characters "
                                "without spaces",
                                CHECKOUT_KEY_MAX);
    } else if (req->too_large) {
        reply->status = 413;
        reply->body = checkout_error_body("request_too_large", false,
                                          "request body: larger than %d bytes", CHECKOUT_BODY_MAX);
    } else {
        switch (checkout_state_admit(srv->st, idx, key, reply, &fault)) {
        case CHECKOUT_ADMIT_REPLAY:
            break;
        case CHECKOUT_ADMIT_FAULT:
            do_fault(srv, idx, key, &fault, req, reply);
            break;
        case CHECKOUT_ADMIT_GO:
            do_work(srv, idx, key, checkout_endpoints[idx].status, req, reply);
            break;
        }
    }
}

/* --- admin endpoints ------------------------------------------------------ */

typedef mhd_result_t (*admin_fn)(checkout_server_t *srv, struct MHD_Connection *conn,
                                 const req_t *req);

static mhd_result_t send_error(struct MHD_Connection *conn, int status, const char *allow,
                               const char *code, const char *message)
{
    checkout_reply_t reply = {.status = status,
                              .body = checkout_error_body(code, false, "%s", message)};

    return send_reply(conn, &reply, allow);
}

static mhd_result_t admin_fault_add(checkout_server_t *srv, struct MHD_Connection *conn,
                                    const req_t *req)
{
    sg_json_limits_t lim = {CHECKOUT_BODY_MAX, 16, 0};
    checkout_fault_t fault;
    sg_json_t *doc, *res;
    char errstr[512];
    sg_err_t err;
    int idx;

    if (req->too_large)
        return send_error(conn, 413, NULL, "request_too_large", "request body: too large");
    doc = sg_json_parse(req->body ? req->body : "", req->len, &lim, &err);
    if (!doc)
        return send_error(conn, 400, NULL, "invalid_json", err.message);
    if (checkout_fault_from_json(doc, &idx, &fault, errstr, sizeof(errstr)) < 0) {
        sg_json_destroy(doc);
        return send_error(conn, 400, NULL, "invalid_fault", errstr);
    }
    sg_json_destroy(doc);
    checkout_state_set_fault(srv->st, idx, &fault);
    res = sg_json_new_object();
    sg_json_add_bool(res, "ok", true);
    sg_json_add_node(res, "fault", checkout_fault_to_json(idx, &fault));
    return send_json(conn, 200, res);
}

static mhd_result_t admin_fault_clear(checkout_server_t *srv, struct MHD_Connection *conn,
                                      const req_t *req)
{
    (void)req;
    checkout_state_clear_faults(srv->st);
    return send_ok(conn);
}

static mhd_result_t admin_fault_list(checkout_server_t *srv, struct MHD_Connection *conn,
                                     const req_t *req)
{
    (void)req;
    return send_json(conn, 200, checkout_state_faults_json(srv->st));
}

static mhd_result_t admin_requests(checkout_server_t *srv, struct MHD_Connection *conn,
                                   const req_t *req)
{
    const char *path = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");

    (void)req;
    return send_json(conn, 200, checkout_state_requests_json(srv->st, path));
}

static mhd_result_t admin_stats(checkout_server_t *srv, struct MHD_Connection *conn,
                                const req_t *req)
{
    (void)req;
    return send_json(conn, 200, checkout_state_stats_json(srv->st));
}

static mhd_result_t admin_reset(checkout_server_t *srv, struct MHD_Connection *conn,
                                const req_t *req)
{
    (void)req;
    checkout_state_reset(srv->st);
    return send_ok(conn);
}

static const struct {
    const char *path;
    const char *method;
    admin_fn fn;
} admin_routes[] = {
    {"/_admin/faults", "POST", admin_fault_add}, {"/_admin/faults", "DELETE", admin_fault_clear},
    {"/_admin/faults", "GET", admin_fault_list}, {"/_admin/requests", "GET", admin_requests},
    {"/_admin/stats", "GET", admin_stats},       {"/_admin/reset", "POST", admin_reset},
};

#define N_ADMIN_ROUTES (sizeof(admin_routes) / sizeof(admin_routes[0]))

/* Admin requests are not logged (the log is of the service's clients).
 * Returns MHD_NO with *handled false when url is no admin path. */
static mhd_result_t admin(checkout_server_t *srv, struct MHD_Connection *conn, const char *url,
                          const char *method, const req_t *req, bool *handled)
{
    char allow[64] = "";

    *handled = false;
    for (size_t i = 0; i < N_ADMIN_ROUTES; i++) {
        if (strcmp(url, admin_routes[i].path) != 0)
            continue;
        *handled = true;
        if (strcmp(method, admin_routes[i].method) == 0)
            return admin_routes[i].fn(srv, conn, req);
        snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow), "%s%s", allow[0] ? ", " : "",
                 admin_routes[i].method);
    }
    if (!*handled)
        return MHD_NO;
    return send_error(conn, 405, allow, "method_not_allowed", "method not allowed on this path");
}

/* --- dispatch ------------------------------------------------------------- */

/* Everything that is not an admin request: logged, then answered. */
static mhd_result_t client_request(checkout_server_t *srv, struct MHD_Connection *conn,
                                   const char *url, const char *method, const req_t *req)
{
    uint64_t seq = log_request(srv, conn, url, method, req);
    int idx = checkout_path_index(url);
    checkout_reply_t reply;
    const char *allow = NULL;

    memset(&reply, 0, sizeof(reply));
    if (idx < 0) {
        reply.status = 404;
        reply.body = checkout_error_body("not_found", false, "no endpoint %s (see README.md)", url);
    } else if (strcmp(method, "POST") != 0) {
        allow = "POST";
        reply.status = 405;
        reply.body = checkout_error_body("method_not_allowed", false, "%s takes POST, not %s",
                                         checkout_endpoints[idx].path, method);
    } else {
        business(srv, conn, idx, req, &reply);
    }
    checkout_state_log_status(srv->st, seq, reply.status, reply.replayed, &reply.ids);
    return send_reply(conn, &reply, allow);
}

static void body_append(req_t *req, const char *data, size_t size)
{
    if (!req->too_large && req->len + size > CHECKOUT_BODY_MAX) {
        req->too_large = true;
        free(req->body);
        req->body = NULL;
    }
    if (!req->too_large) {
        if (req->len + size + 1 > req->cap) {
            size_t cap = (req->len + size + 1) * 2;
            char *p = realloc(req->body, cap > CHECKOUT_BODY_MAX + 1 ? CHECKOUT_BODY_MAX + 1 : cap);

            if (!p)
                abort();
            req->body = p;
            req->cap = cap > CHECKOUT_BODY_MAX + 1 ? CHECKOUT_BODY_MAX + 1 : cap;
        }
        memcpy(req->body + req->len, data, size);
        req->body[req->len + size] = '\0';
    }
    req->len += size;
}

static mhd_result_t on_request(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls)
{
    checkout_server_t *srv = cls;
    req_t *req = *con_cls;
    bool handled;
    mhd_result_t rc;

    (void)version;
    if (!req) {
        if (!(req = calloc(1, sizeof(*req))))
            return MHD_NO;
        *con_cls = req;
        checkout_state_enter(srv->st);
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        body_append(req, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    rc = admin(srv, conn, url, method, req, &handled);
    return handled ? rc : client_request(srv, conn, url, method, req);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    checkout_server_t *srv = cls;
    req_t *req = *con_cls;

    (void)conn;
    (void)toe;
    if (req) {
        free(req->body);
        free(req);
        *con_cls = NULL;
        checkout_state_leave(srv->st);
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    size_t n;

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    sg_log_warn("libmicrohttpd: %s", line);
}

struct MHD_Daemon *checkout_http_start(checkout_server_t *srv, const struct sockaddr *addr)
{
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *d;

    if (addr->sa_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* The logger goes first so that every message of the daemon reaches it. */
    d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        /* An idle keep-alive connection holds a thread: close
         * it after two minutes of silence. */
        MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_CONNECTION_LIMIT, 2000u, MHD_OPTION_END);
    return d;
}
