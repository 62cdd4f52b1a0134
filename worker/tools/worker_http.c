/* The http adapter: a tool is an HTTP endpoint, called with libcurl.
 *
 * Calls do not hold a thread each.  A pool thread builds the request and
 * hands it to one engine thread that runs every transfer of the process on
 * a curl multi handle (one connection cache, keep-alive across calls) and
 * finishes each call through worker_pool_finish(), the pool's normal
 * completion path.  The tool's concurrency slot stays taken until then.
 *
 * Registry fields (docs/ADAPTERS.md): target (the URL), method, headers
 * (values may hold ${env:NAME}, resolved at load and never logged),
 * connect_timeout_ms, tls_verify, ca_path, max_response_bytes.
 *
 * What an answer means for the call is decided in worker_http_answer.c. */
#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_mask.h"
#include "sagad/sg_version.h"
#include "sagad/sg_mask.h"
#include "../worker.h"

typedef struct http_tool_s {
    char *method;
    char **headers; /* "Name: value", values resolved */
    size_t nheaders;
    int64_t connect_timeout_ms;
    bool tls_verify;
    char *ca_file, *ca_dir;
    /* nothing_to_undo: statuses that, answering the tool run as a
     * compensation, mean there was nothing to undo (done). */
    long undo_none[16];
    size_t n_undo_none;
} http_tool_t;

typedef struct http_xfer_s {
    struct http_xfer_s *prev, *next;
    CURL *easy;
    worker_pending_t *pending;
    const worker_call_t *call;
    worker_result_t *out;
    struct curl_slist *headers;
    char *body;
    char *resp;
    size_t resp_len, resp_cap, max;
    bool too_large;
    char retry_after[64];
    char errbuf[CURL_ERROR_SIZE];
} http_xfer_t;

/* The engine: one thread and one multi handle for the process. */
static struct {
    pthread_mutex_t lock;
    bool started, stopping;
    pthread_t thread;
    CURLM *multi;
    http_xfer_t *incoming; /* handed over, not yet added (lock) */
    http_xfer_t *active;   /* on the multi handle (engine thread only) */
    volatile sig_atomic_t *stop_now;
} engine = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- the registry entry ------------------------------------------------ */

/* Headers the adapter sets itself; the registry cannot override them. */
static const char *const reserved_headers[] = {
    "Idempotency-Key", "traceparent",       "Content-Type",
    "Content-Length",  "User-Agent",        "Host",
    "Expect",          "Transfer-Encoding", NULL};

static int fail(sg_err_t *err, const char *path, const char *rule)
{
    return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid", "%s: %s", path, rule);
}

static bool header_name_ok(const char *s)
{
    size_t n = 0;

    for (; s[n]; n++)
        if (!isalnum((unsigned char)s[n]) && !strchr("!#$%&'*+-.^_`|~", s[n]))
            return false;
    return n > 0 && n <= 64;
}

/* Appends [p, p+n) to the growing string *buf. */
static void append(char **buf, size_t *len, const char *p, size_t n)
{
    *buf = sg_xrealloc(*buf, *len + n + 1);
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}

/* A header value with each ${env:NAME} replaced by the variable's value.
 * Errors name the path (tool and header) and the variable, never a value. */
static char *resolve_value(const char *in, const char *path, sg_err_t *err)
{
    char *out = NULL, name[129];
    size_t len = 0;

    append(&out, &len, "", 0);
    for (const char *p = in; *p;) {
        const char *end, *val;
        size_t n;
        if (!(p[0] == '$' && p[1] == '{')) {
            append(&out, &len, p++, 1);
            continue;
        }
        end = strchr(p, '}');
        if (strncmp(p, "${env:", 6) != 0 || !end) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                       "%s: a ${...} reference must be ${env:NAME}", path);
            goto err;
        }
        n = (size_t)(end - (p + 6));
        if (n == 0 || n >= sizeof(name) ||
            strspn(p + 6, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijkl"
                          "mnopqrstuvwxyz0123456789_") != n ||
            isdigit((unsigned char)p[6])) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                       "%s: ${env:NAME} needs a variable name of A-Z a-z 0-9 _ "
                       "(not starting with a digit)",
                       path);
            goto err;
        }
        memcpy(name, p + 6, n);
        name[n] = '\0';
        if (!(val = getenv(name))) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                       "%s: environment variable %s is not set", path, name);
            goto err;
        }
        /* Whatever a variable holds is treated as a secret: masked in every
         * log line and error from now on. */
        sg_mask_add_secret(val);
        append(&out, &len, val, strlen(val));
        p = end + 1;
    }
    if (strpbrk(out, "\r\n")) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                   "%s: the value holds a line break (after ${env:} substitution)", path);
        goto err;
    }
    return out;
err:
    free(out);
    return NULL;
}

/* A header value sagad sends holds no control byte (CR or LF would start
 * another header; libcurl sends what it is given). */
static bool header_value_ok(const char *v)
{
    for (; *v; v++)
        if ((unsigned char)*v < 0x20 || *v == 0x7f)
            return false;
    return true;
}

static int load_headers(http_tool_t *h, const sg_json_t *node, const char *base, sg_err_t *err)
{
    const sg_json_t *obj = NULL;
    char hbase[300], path[400];

    int rc = sg_json_get_object(node, base, "headers", false, &obj, err);

    if (rc != 0)
        return rc < 0 ? -1 : 0;
    sg_json_path_key(hbase, sizeof(hbase), base, "headers");
    for (const sg_json_t *m = sg_json_first(obj); m; m = sg_json_next(m)) {
        const char *name = sg_json_key(m), *value = sg_json_string(m);
        char *resolved, *line;
        sg_json_path_key(path, sizeof(path), hbase, name);
        if (!header_name_ok(name))
            return fail(err, path, "a header name is 1-64 token characters (RFC 9110)");
        for (size_t i = 0; reserved_headers[i]; i++)
            if (strcasecmp(name, reserved_headers[i]) == 0)
                return fail(err, path, "set by the adapter itself; the registry cannot set it");
        if (!value)
            return fail(err, path, "must be a string");
        if (!(resolved = resolve_value(value, path, err)))
            return -1;
        if (!header_value_ok(resolved)) {
            memset(resolved, 0, strlen(resolved));
            free(resolved);
            return fail(err, path, "a header value must not hold control characters (CR, LF, ...)");
        }
        line = sg_xmalloc(strlen(name) + strlen(resolved) + 3);
        sprintf(line, "%s: %s", name, resolved);
        /* The secret is wiped from the heap copy before it is freed. */
        memset(resolved, 0, strlen(resolved));
        free(resolved);
        h->headers = sg_xrealloc(h->headers, sizeof(char *) * (h->nheaders + 1));
        h->headers[h->nheaders++] = line;
    }
    return 0;
}

static int check_url(const char *url, const char *path, sg_err_t *err)
{
    CURLU *u = sg_xcheck(curl_url(), "curl_url");
    char *scheme = NULL, *host = NULL;
    int rc = 0;

    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        rc = fail(err, path, "not a URL curl can parse (http://host[:port]/path)");
    else if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
        rc = fail(err, path, "the scheme must be http or https");
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return rc;
}

static void http_release(sg_tool_t *tool)
{
    http_tool_t *h = tool->state;

    if (!h)
        return;
    for (size_t i = 0; i < h->nheaders; i++) {
        memset(h->headers[i], 0, strlen(h->headers[i]));
        free(h->headers[i]);
    }
    free(h->headers);
    free(h->method);
    free(h->ca_file);
    free(h->ca_dir);
    free(h);
    tool->state = NULL;
}

static int load_ca(http_tool_t *h, const sg_json_t *node, const char *base, sg_err_t *err)
{
    const char *ca = NULL;
    char path[300];
    struct stat st;

    if (sg_json_get_str(node, base, "ca_path", false, &ca, err) < 0)
        return -1;
    if (!ca)
        return 0;
    sg_json_path_key(path, sizeof(path), base, "ca_path");
    if (stat(ca, &st) < 0)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: %s cannot be read (a CA bundle file or a hashed CA directory)", path,
                          ca);
    if (S_ISDIR(st.st_mode))
        h->ca_dir = sg_xstrdup(ca);
    else
        h->ca_file = sg_xstrdup(ca);
    return 0;
}

static int load_undo_none(http_tool_t *h, const sg_json_t *node, const char *base, sg_err_t *err)
{
    const sg_json_t *arr = sg_json_member(node, "nothing_to_undo");
    char path[300];
    size_t n;

    if (!arr)
        return 0;
    sg_json_path_key(path, sizeof(path), base, "nothing_to_undo");
    n = sg_json_array_size(arr);
    if (!sg_json_is_array(arr) || n < 1 || n > sizeof(h->undo_none) / sizeof(h->undo_none[0]))
        return fail(err, path, "an array of 1 to 16 HTTP statuses (300-599), e.g. [404]");
    for (size_t i = 0; i < n; i++) {
        double v;
        if (!sg_json_number(sg_json_array_get(arr, i), &v) || v != (double)(long)v || v < 300 ||
            v > 599) {
            char item[320];
            sg_json_path_idx(item, sizeof(item), path, i);
            return fail(err, item, "an HTTP status from 300 to 599");
        }
        h->undo_none[h->n_undo_none++] = (long)v;
    }
    return 0;
}

static int http_prepare(sg_tool_t *tool, const sg_json_t *node, const char *base,
                        const sg_config_t *cfg, sg_err_t *err)
{
    static const char *const methods[] = {"POST", "PUT", "PATCH", "DELETE", NULL};
    http_tool_t *h = sg_xcalloc(1, sizeof(*h));
    const char *method = "POST";
    char path[300];
    size_t i;

    (void)cfg;
    tool->state = h;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: libcurl failed to initialise: %s", base,
                          curl_easy_strerror(curl_init_rc));
    sg_json_path_key(path, sizeof(path), base, "target");
    if (!tool->target)
        return fail(err, path, "an http target is a string: the URL");
    if (check_url(tool->target, path, err) < 0)
        return -1;
    if (sg_json_get_str(node, base, "method", false, &method, err) < 0)
        return -1;
    for (i = 0; methods[i] && strcmp(methods[i], method) != 0; i++)
        ;
    if (!methods[i]) {
        sg_json_path_key(path, sizeof(path), base, "method");
        return fail(err, path,
                    "must be one of POST, PUT, PATCH, DELETE (a call carries a JSON "
                    "body)");
    }
    h->method = sg_xstrdup(method);
    h->connect_timeout_ms = 10000;
    if (sg_json_get_int(node, base, "connect_timeout_ms", false, &h->connect_timeout_ms, err) < 0)
        return -1;
    if (h->connect_timeout_ms < 1 || h->connect_timeout_ms > 600000) {
        sg_json_path_key(path, sizeof(path), base, "connect_timeout_ms");
        return fail(err, path, "must be between 1 and 600000");
    }
    h->tls_verify = true;
    if (sg_json_get_bool(node, base, "tls_verify", false, &h->tls_verify, err) < 0 ||
        load_ca(h, node, base, err) < 0 || load_headers(h, node, base, err) < 0 ||
        load_undo_none(h, node, base, err) < 0)
        return -1;
    return 0;
}

/* ---- one call ---------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    http_xfer_t *x = ud;
    size_t n = size * nmemb;

    if (x->resp_len + n > x->max) {
        /* Refused while streaming: a 50 MiB answer is never buffered. */
        x->too_large = true;
        return 0;
    }
    if (x->resp_len + n + 1 > x->resp_cap) {
        size_t cap = x->resp_cap ? x->resp_cap : 4096;
        while (cap < x->resp_len + n + 1)
            cap *= 2;
        x->resp = sg_xrealloc(x->resp, cap);
        x->resp_cap = cap;
    }
    memcpy(x->resp + x->resp_len, ptr, n);
    x->resp_len += n;
    x->resp[x->resp_len] = '\0';
    return n;
}

static size_t on_header(char *buf, size_t size, size_t nmemb, void *ud)
{
    http_xfer_t *x = ud;
    size_t n = size * nmemb, i = 12;

    if (n > 12 && strncasecmp(buf, "Retry-After:", 12) == 0) {
        size_t len;
        while (i < n && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        len = n - i;
        while (len &&
               (buf[i + len - 1] == '\r' || buf[i + len - 1] == '\n' || buf[i + len - 1] == ' '))
            len--;
        if (len >= sizeof(x->retry_after))
            len = sizeof(x->retry_after) - 1;
        memcpy(x->retry_after, buf + i, len);
        x->retry_after[len] = '\0';
    }
    return n;
}

static struct curl_slist *add_header(struct curl_slist *list, const char *name, const char *value)
{
    char line[512];
    struct curl_slist *l;

    if (!header_value_ok(value)) {
        /* Only a traceparent stored before intake checked it can get
         * here; the request goes without it rather than with a broken
         * header. */
        sg_log_kv(SG_LOG_WARN, "header not sent: its value holds a control character", "header",
                  name, NULL);
        return list;
    }
    snprintf(line, sizeof(line), "%s: %s", name, value);
    l = sg_xcheck(curl_slist_append(list, line), "curl_slist_append");
    return l;
}

static struct curl_slist *request_headers(const http_tool_t *h, const worker_call_t *call)
{
    struct curl_slist *l = NULL;

    for (size_t i = 0; i < h->nheaders; i++)
        l = sg_xcheck(curl_slist_append(l, h->headers[i]), "curl_slist_append");
    l = add_header(l, "Idempotency-Key", call->idem_key);
    if (call->traceparent)
        l = add_header(l, "traceparent", call->traceparent);
    l = add_header(l, "Content-Type", "application/json");
    l = add_header(l, "Accept", "application/json");
    l = add_header(l, "User-Agent", "sagad/" SAGAD_VERSION);
    /* No 100-continue round trip for large bodies. */
    l = sg_xcheck(curl_slist_append(l, "Expect:"), "curl_slist_append");
    return l;
}

static void xfer_free(http_xfer_t *x)
{
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    free(x->body);
    free(x->resp);
    free(x);
}

/* Finishes the call: out is filled, the pool takes it back. */
static void xfer_done(http_xfer_t *x)
{
    worker_pending_t *p = x->pending;

    xfer_free(x);
    worker_pool_finish(p);
}

static CURL *make_easy(http_xfer_t *x, const sg_tool_t *tool)
{
    const http_tool_t *h = tool->state;
    CURL *e = curl_easy_init();

    if (!e)
        return NULL;
    curl_easy_setopt(e, CURLOPT_URL, tool->target);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(x->body));
    if (strcmp(h->method, "POST") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, h->method);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)tool->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(h->connect_timeout_ms < tool->timeout_ms ? h->connect_timeout_ms
                                                                     : tool->timeout_ms));
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, h->tls_verify ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, h->tls_verify ? 2L : 0L);
    if (h->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, h->ca_file);
    if (h->ca_dir)
        curl_easy_setopt(e, CURLOPT_CAPATH, h->ca_dir);
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->max);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    return e;
}

/* ---- the outcome ------------------------------------------------------- */

/* Did any byte of the request leave for the tool?  Then the tool may have
 * acted on it, whatever followed.  Not CURLINFO_CONNECT_TIME_T: libcurl
 * reports 0 for a kept-alive connection it reused, so a request that went
 * out on one looked unsent (issue 35 item 0: a charge that timed out was
 * recorded as "no connection" and left standing).  CURLINFO_REQUEST_SIZE
 * counts the bytes of the request written to the socket for this
 * transfer; PRETRANSFER is the moment just before the first of them (set
 * on a reused connection too).  Either one counts: when in doubt the call
 * is taken as sent, since an unsent call taken as sent costs a
 * compensation the tool answers with "nothing to undo", and a sent call
 * taken as unsent leaves its effect standing. */
static bool request_sent(http_xfer_t *x)
{
    long request_size = 0;
    curl_off_t pretransfer = 0;

    if (curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &request_size) != CURLE_OK ||
        curl_easy_getinfo(x->easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer) != CURLE_OK)
        return true;
    return request_size > 0 || pretransfer > 0;
}

static void map_curl_error(http_xfer_t *x, CURLcode rc)
{
    worker_result_t *out = x->out;
    const char *tool = x->call->tool->name;

    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        if (!request_sent(x)) {
            worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.http.connect",
                                "no connection to tool %s in time: %s", tool, x->errbuf);
            break;
        }
        worker_result_error(out, SG_ERRCLASS_TIMEOUT, "tool.timeout",
                            "tool %s gave no answer within %lld ms", tool,
                            (long long)x->call->tool->timeout_ms);
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.http.connect",
                            "cannot connect to tool %s: %s", tool, x->errbuf);
        break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        worker_result_error(out, SG_ERRCLASS_PERMANENT, "tool.http.tls",
                            "TLS with tool %s refused: %s", tool, x->errbuf);
        break;
    case CURLE_FILESIZE_EXCEEDED:
        x->too_large = true;
        /* fall through */
    default:
        /* The request went out and no answer says what became of it. */
        out->maybe_applied = x->too_large || request_sent(x);
        if (x->too_large)
            worker_result_error(out, SG_ERRCLASS_PERMANENT, "tool.http.response_too_large",
                                "the answer of tool %s is larger than its max_response_bytes "
                                "(%zu); refused while reading",
                                tool, x->max);
        else
            worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.http.io",
                                "exchange with tool %s failed: %s: %s", tool,
                                curl_easy_strerror(rc), x->errbuf);
    }
}

/* A compensation answered with a status its tool declares as "nothing
 * to undo" (e.g. 404 for a refund of a charge that never happened): the
 * compensation is done.  The answer stays in the envelope's data. */
static void undo_none(http_xfer_t *x, long status)
{
    const http_tool_t *h = x->call->tool->state;

    for (size_t i = 0; i < h->n_undo_none; i++)
        if (h->undo_none[i] == status) {
            x->out->status = WORKER_OK;
            memset(&x->out->err, 0, sizeof(x->out->err));
            x->out->retry_after_ms = 0;
            x->out->nothing_to_undo = true;
            return;
        }
}

static void complete(http_xfer_t *x, CURLcode rc)
{
    long status = 0;

    if (rc != CURLE_OK) {
        map_curl_error(x, rc);
        if (!x->too_large)
            worker_result_data(x->out, x->resp, x->resp_len, x->max);
    } else {
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        worker_http_answer(x->out, x->call->tool->name, status, x->resp, x->resp_len, x->max,
                           x->retry_after);
        if (x->call->compensate && x->out->status != WORKER_OK)
            undo_none(x, status);
    }
    xfer_done(x);
}

/* ---- the engine thread ------------------------------------------------- */

static void link_active(http_xfer_t *x)
{
    x->prev = NULL;
    x->next = engine.active;
    if (engine.active)
        engine.active->prev = x;
    engine.active = x;
}

static void unlink_active(http_xfer_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        engine.active = x->next;
    if (x->next)
        x->next->prev = x->prev;
}

static void reap(void)
{
    CURLMsg *m;
    int left;

    while ((m = curl_multi_info_read(engine.multi, &left))) {
        http_xfer_t *x = NULL;
        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        curl_multi_remove_handle(engine.multi, m->easy_handle);
        unlink_active(x);
        complete(x, m->data.result);
    }
}

/* Second SIGTERM: every running call ends now, outcome unknown. */
static void abandon_all(void)
{
    while (engine.active) {
        http_xfer_t *x = engine.active;
        unlink_active(x);
        curl_multi_remove_handle(engine.multi, x->easy);
        worker_result_error(x->out, SG_ERRCLASS_TIMEOUT, "tool.abandoned",
                            "call of tool %s abandoned at shutdown; the outcome is unknown",
                            x->call->tool->name);
        xfer_done(x);
    }
}

static void *engine_main(void *arg)
{
    (void)arg;
    for (;;) {
        http_xfer_t *in;
        bool stopping;
        int running = 0;

        pthread_mutex_lock(&engine.lock);
        in = engine.incoming;
        engine.incoming = NULL;
        stopping = engine.stopping;
        pthread_mutex_unlock(&engine.lock);
        while (in) {
            http_xfer_t *x = in;
            in = in->next;
            link_active(x);
            curl_multi_add_handle(engine.multi, x->easy);
        }
        if (engine.stop_now && *engine.stop_now)
            abandon_all();
        curl_multi_perform(engine.multi, &running);
        reap();
        if (stopping && !engine.active)
            break;
        curl_multi_poll(engine.multi, NULL, 0, 100, NULL);
    }
    return NULL;
}

/* Hands x to the engine, starting it on first use. */
static int engine_submit(http_xfer_t *x, volatile sig_atomic_t *stop_now)
{
    pthread_mutex_lock(&engine.lock);
    if (engine.stopping) {
        pthread_mutex_unlock(&engine.lock);
        return -1;
    }
    if (!engine.started) {
        engine.multi = curl_multi_init();
        engine.stop_now = stop_now;
        if (!engine.multi || pthread_create(&engine.thread, NULL, engine_main, NULL) != 0)
            abort();
        engine.started = true;
    }
    x->next = engine.incoming;
    engine.incoming = x;
    pthread_mutex_unlock(&engine.lock);
    curl_multi_wakeup(engine.multi);
    return 0;
}

static void http_start(worker_thread_t *th, worker_pending_t *p, const worker_call_t *call,
                       worker_result_t *out)
{
    http_xfer_t *x = sg_xcalloc(1, sizeof(*x));

    x->pending = p;
    x->call = call;
    x->out = out;
    x->max = (size_t)call->tool->max_response_bytes;
    x->body = worker_request_json(call);
    x->headers = request_headers(call->tool->state, call);
    x->easy = make_easy(x, call->tool);
    if (!x->easy) {
        worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.http.io",
                            "cannot make a request for tool %s (out of memory?)", call->tool->name);
        xfer_done(x);
        return;
    }
    if (engine_submit(x, th->stop) < 0) {
        worker_result_error(out, SG_ERRCLASS_TIMEOUT, "tool.abandoned",
                            "call of tool %s not started: the worker is shutting down",
                            call->tool->name);
        xfer_done(x);
    }
}

/* Pool shutdown: running calls finish (each within its timeout) unless a
 * second SIGTERM abandons them. */
static void http_stop(void)
{
    pthread_mutex_lock(&engine.lock);
    if (!engine.started) {
        pthread_mutex_unlock(&engine.lock);
        return;
    }
    engine.stopping = true;
    pthread_mutex_unlock(&engine.lock);
    curl_multi_wakeup(engine.multi);
    pthread_join(engine.thread, NULL);
    curl_multi_cleanup(engine.multi);
    pthread_mutex_lock(&engine.lock);
    engine.multi = NULL;
    engine.started = engine.stopping = false;
    pthread_mutex_unlock(&engine.lock);
}

const worker_adapter_t worker_http_adapter = {
    .name = "http",
    .prepare = http_prepare,
    .release = http_release,
    .start = http_start,
    .stop = http_stop,
};
