/* The OTLP/HTTP span exporter (see sg_otel.h).  The second user of libcurl
 * beside the worker's http adapter: lib/ cannot call into a program, and
 * the relay exports spans too.  JSON is written here by hand rather than
 * through sg_json: a span is a flat record, and building a cJSON tree per
 * span would cost the worker's loop more than the text itself. */
#include "sagad/sg_otel.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_version.h"

#define BACKOFF_FIRST_MS 1000
#define BACKOFF_CAP_MS   30000

/* A growing text buffer. */
typedef struct buf_s {
    char *p;
    size_t n, cap;
} buf_t;

static void buf_need(buf_t *b, size_t more)
{
    if (b->n + more + 1 <= b->cap)
        return;
    /* A span's attributes take 300-1000 bytes: one allocation, mostly. */
    while (b->n + more + 1 > b->cap)
        b->cap = b->cap ? b->cap * 2 : 1024;
    b->p = sg_xrealloc(b->p, b->cap);
}

static void buf_add(buf_t *b, const char *s, size_t len)
{
    buf_need(b, len);
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}

static void buf_puts(buf_t *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

static void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    int len;

    buf_need(b, 128);
    /* Formatted once where it fits (nearly always), twice where not. */
    va_start(ap, fmt);
    len = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (len <= 0)
        return;
    if ((size_t)len >= b->cap - b->n) {
        buf_need(b, (size_t)len);
        va_start(ap, fmt);
        vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
        va_end(ap);
    }
    b->n += (size_t)len;
}

/* s as a JSON string, quotes included. */
static void buf_json_str(buf_t *b, const char *s)
{
    size_t cap = strlen(s) * 6 + 1;
    char stack[512], *tmp = cap <= sizeof(stack) ? stack : sg_xmalloc(cap);

    sg_log_json_escape(tmp, cap, s);
    buf_add(b, "\"", 1);
    buf_puts(b, tmp);
    buf_add(b, "\"", 1);
    if (tmp != stack)
        free(tmp);
}

/* ---- spans ----------------------------------------------------------------- */

struct sg_span_s {
    sg_span_t *next;
    sg_trace_id_t trace;
    uint64_t id, parent;
    sg_trace_id_t link_trace;
    uint64_t link_span; /* 0: no link */
    sg_span_kind_t kind;
    int64_t start_ns, end_ns;
    char *name;
    char *error; /* status message when the status is error, else NULL */
    buf_t attrs; /* the attributes, as the members of a JSON array */
};

sg_span_t *sg_span_new(const sg_trace_id_t *trace, uint64_t span_id, uint64_t parent_id,
                       const char *name, sg_span_kind_t kind, int64_t start_ns, int64_t end_ns)
{
    sg_span_t *s = sg_xcalloc(1, sizeof(*s));

    s->trace = *trace;
    s->id = span_id;
    s->parent = parent_id;
    s->name = sg_xstrdup(name);
    s->kind = kind;
    s->start_ns = start_ns;
    s->end_ns = end_ns < start_ns ? start_ns : end_ns;
    return s;
}

void sg_span_free(sg_span_t *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->error);
    free(s->attrs.p);
    free(s);
}

void sg_span_link(sg_span_t *s, const sg_trace_id_t *trace, uint64_t span_id)
{
    s->link_trace = *trace;
    s->link_span = span_id;
}

static void attr_key(sg_span_t *s, const char *key)
{
    if (s->attrs.n)
        buf_add(&s->attrs, ",", 1);
    buf_puts(&s->attrs, "{\"key\":");
    buf_json_str(&s->attrs, key);
}

void sg_span_str(sg_span_t *s, const char *key, const char *value)
{
    if (!value)
        return;
    attr_key(s, key);
    buf_puts(&s->attrs, ",\"value\":{\"stringValue\":");
    buf_json_str(&s->attrs, value);
    buf_puts(&s->attrs, "}}");
}

void sg_span_int(sg_span_t *s, const char *key, int64_t value)
{
    attr_key(s, key);
    /* OTLP/JSON writes 64-bit integers as strings. */
    buf_printf(&s->attrs, ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", value);
}

void sg_span_error(sg_span_t *s, const char *message)
{
    free(s->error);
    s->error = sg_xstrdup(message ? message : "");
}

void sg_span_list_add(sg_span_list_t *l, sg_span_t *s)
{
    s->next = NULL;
    if (l->tail)
        l->tail->next = s;
    else
        l->head = s;
    l->tail = s;
    l->n++;
}

void sg_span_list_discard(sg_span_list_t *l)
{
    sg_span_t *s, *next;

    for (s = l->head; s; s = next) {
        next = s->next;
        sg_span_free(s);
    }
    memset(l, 0, sizeof(*l));
}

/* ---- ids ------------------------------------------------------------------- */

uint64_t sg_otel_id64(const char *text)
{
    uint64_t h = 1469598103934665603ULL;

    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    /* FNV-1a alone leaves the high bits of short keys correlated; the
     * splitmix64 finaliser spreads them. */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h ? h : 1;
}

uint64_t sg_otel_saga_span_id(const char *saga_id)
{
    char text[256];

    /* The worker's naming (worker_observe.c span_id()): kind, saga,
     * generation 0, no step, forward, attempt 0. */
    snprintf(text, sizeof(text), "saga|%s|g0|-1|f|0", saga_id);
    return sg_otel_id64(text);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int parse_hex(const char *p, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(p[2 * i]), lo = hi < 0 ? -1 : hexval(p[2 * i + 1]);
        if (lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int sg_otel_parse_traceparent(const char *tp, sg_trace_id_t *trace, uint64_t *span_id,
                              unsigned *flags)
{
    uint8_t sp[8], fl, zero[16] = {0};

    if (!tp || strlen(tp) < 55 || strncmp(tp, "00-", 3) != 0 || tp[35] != '-' || tp[52] != '-')
        return -1;
    if (parse_hex(tp + 3, trace->b, 16) < 0 || parse_hex(tp + 36, sp, 8) < 0 ||
        parse_hex(tp + 53, &fl, 1) < 0 || memcmp(trace->b, zero, 16) == 0)
        return -1;
    *span_id = 0;
    for (int i = 0; i < 8; i++)
        *span_id = *span_id << 8 | sp[i];
    if (*span_id == 0)
        return -1;
    if (flags)
        *flags = fl;
    return 0;
}

static const char hexdigits[] = "0123456789abcdef";

/* Written by hand: the exporter prints three ids per span, and snprintf
 * per byte showed in profiles. */
void sg_otel_trace_hex(char *out, size_t size, const sg_trace_id_t *trace)
{
    char hex[33];

    for (int i = 0; i < 16; i++) {
        hex[2 * i] = hexdigits[trace->b[i] >> 4];
        hex[2 * i + 1] = hexdigits[trace->b[i] & 15];
    }
    hex[32] = '\0';
    if (size >= sizeof(hex))
        memcpy(out, hex, sizeof(hex));
    else if (size)
        snprintf(out, size, "%s", hex);
}

void sg_otel_span_hex(char *out, size_t size, uint64_t span_id)
{
    char hex[17];

    for (int i = 0; i < 16; i++)
        hex[i] = hexdigits[(span_id >> (60 - 4 * i)) & 15];
    hex[16] = '\0';
    if (size >= sizeof(hex))
        memcpy(out, hex, sizeof(hex));
    else if (size)
        snprintf(out, size, "%s", hex);
}

void sg_otel_traceparent(char *out, size_t size, const sg_trace_id_t *trace, uint64_t span_id,
                         bool sampled)
{
    char t[33], s[17];

    sg_otel_trace_hex(t, sizeof(t), trace);
    sg_otel_span_hex(s, sizeof(s), span_id);
    snprintf(out, size, "00-%s-%s-%s", t, s, sampled ? "01" : "00");
}

/* ---- the exporter ---------------------------------------------------------- */

struct sg_otel_s {
    char *url;
    struct curl_slist *headers;
    char *resource;        /* the resource's attributes, members of a JSON array */
    uint64_t sample_below; /* a trace is kept when its low 64 bits are below it */
    bool sample_all;
    long timeout_ms;
    size_t max_queue, max_batch;
    int64_t delay_ms;

    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stopping;
    sg_span_list_t queue;
    atomic_size_t queued; /* queue.n, for sg_otel_full without the lock */
    CURL *curl;           /* the thread's */
    buf_t body;           /* the thread's request, kept from post to post */
};

static void count_dropped(const char *reason, size_t n)
{
    if (n)
        sg_metric_add(SG_M_SPANS_DROPPED, SG_LABELS(reason), n);
}

bool sg_otel_full(const sg_otel_t *o)
{
    return o && atomic_load_explicit(&o->queued, memory_order_relaxed) >= o->max_queue;
}

void sg_otel_dropped(sg_otel_t *o, const char *reason, size_t n)
{
    if (o)
        count_dropped(reason, n);
}

bool sg_otel_sampled(const sg_otel_t *o, const sg_trace_id_t *trace)
{
    uint64_t low = 0;

    if (!o)
        return false;
    if (o->sample_all)
        return true;
    for (int i = 8; i < 16; i++)
        low = low << 8 | trace->b[i];
    return low < o->sample_below;
}

void sg_otel_submit(sg_otel_t *o, sg_span_t *s)
{
    sg_span_list_t one = {0};

    if (!s)
        return;
    sg_span_list_add(&one, s);
    sg_otel_submit_list(o, &one);
}

void sg_otel_submit_list(sg_otel_t *o, sg_span_list_t *l)
{
    size_t dropped = 0;
    bool full_batch;

    if (!o) {
        sg_span_list_discard(l);
        return;
    }
    pthread_mutex_lock(&o->lock);
    while (l->head) {
        sg_span_t *s = l->head;
        l->head = s->next;
        if (o->queue.n >= o->max_queue) {
            sg_span_free(s);
            dropped++;
        } else {
            sg_span_list_add(&o->queue, s);
        }
    }
    full_batch = o->queue.n >= o->max_batch;
    atomic_store_explicit(&o->queued, o->queue.n, memory_order_relaxed);
    pthread_mutex_unlock(&o->lock);
    memset(l, 0, sizeof(*l));
    if (full_batch)
        pthread_cond_signal(&o->wake);
    count_dropped("queue_full", dropped);
}

static void span_json(buf_t *b, const sg_span_t *s)
{
    char trace[33], id[17];

    sg_otel_trace_hex(trace, sizeof(trace), &s->trace);
    sg_otel_span_hex(id, sizeof(id), s->id);
    buf_printf(b, "{\"traceId\":\"%s\",\"spanId\":\"%s\",", trace, id);
    if (s->parent) {
        sg_otel_span_hex(id, sizeof(id), s->parent);
        buf_printf(b, "\"parentSpanId\":\"%s\",", id);
    }
    buf_puts(b, "\"name\":");
    buf_json_str(b, s->name);
    buf_printf(b,
               ",\"kind\":%d,\"startTimeUnixNano\":\"%" PRId64 "\",\"endTimeUnixNano\":\"%" PRId64
               "\",\"attributes\":[%s]",
               (int)s->kind, s->start_ns, s->end_ns, s->attrs.p ? s->attrs.p : "");
    if (s->link_span) {
        sg_otel_trace_hex(trace, sizeof(trace), &s->link_trace);
        sg_otel_span_hex(id, sizeof(id), s->link_span);
        buf_printf(b, ",\"links\":[{\"traceId\":\"%s\",\"spanId\":\"%s\"}]", trace, id);
    }
    if (s->error) {
        buf_puts(b, ",\"status\":{\"code\":2,\"message\":");
        buf_json_str(b, s->error);
        buf_puts(b, "}");
    }
    buf_puts(b, "}");
}

/* The ExportTraceServiceRequest of a batch, in OTLP's JSON encoding. */
static void request_json(const sg_otel_t *o, buf_t *b, const sg_span_t *first)
{
    buf_printf(b,
               "{\"resourceSpans\":[{\"resource\":{\"attributes\":[%s]},\"scopeSpans\":[{"
               "\"scope\":{\"name\":\"sagad\",\"version\":\"%s\"},\"spans\":[",
               o->resource, SAGAD_VERSION);
    for (const sg_span_t *s = first; s; s = s->next) {
        span_json(b, s);
        if (s->next)
            buf_add(b, ",", 1);
    }
    buf_puts(b, "]}]}]}");
}

static size_t discard_body(char *p, size_t size, size_t n, void *opaque)
{
    (void)p;
    (void)opaque;
    return size * n;
}

/* Posts one batch; 0 when the collector took it. */
static int post(sg_otel_t *o, const sg_span_t *first, char *why, size_t why_size)
{
    buf_t *body = &o->body;
    CURLcode rc;
    long status = 0;

    body->n = 0;
    request_json(o, body, first);
    curl_easy_setopt(o->curl, CURLOPT_POSTFIELDS, body->p);
    curl_easy_setopt(o->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->n);
    rc = curl_easy_perform(o->curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(o->curl, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
        snprintf(why, why_size, "%s", curl_easy_strerror(rc));
        return -1;
    }
    if (status < 200 || status > 299) {
        snprintf(why, why_size, "HTTP %ld", status);
        return -1;
    }
    return 0;
}

static void abs_deadline(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Takes up to max_batch spans off the queue (lock held). */
static sg_span_t *take_batch(sg_otel_t *o, size_t *n)
{
    sg_span_t *first = o->queue.head, *last = NULL, *s = first;

    *n = 0;
    while (s && *n < o->max_batch) {
        last = s;
        s = s->next;
        (*n)++;
    }
    if (!last)
        return NULL;
    last->next = NULL;
    o->queue.head = s;
    o->queue.n -= *n;
    atomic_store_explicit(&o->queued, o->queue.n, memory_order_relaxed);
    if (!s)
        o->queue.tail = NULL;
    return first;
}

/* Sends one batch, and says how long to wait before the next post: a
 * failed post is not retried (its spans are dropped) and the pause
 * doubles, so a collector that is down costs one timeout per pause. */
static int64_t export_one(sg_otel_t *o, sg_span_t *batch, size_t n, int64_t backoff)
{
    sg_span_list_t done = {batch, NULL, n};
    char why[160];

    if (post(o, batch, why, sizeof(why)) == 0) {
        sg_metric_add(SG_M_SPANS_EXPORTED, NULL, n);
        sg_span_list_discard(&done);
        if (backoff)
            sg_log_kv(SG_LOG_INFO, "trace collector reachable again", "url", o->url, NULL);
        return 0;
    }
    sg_span_list_discard(&done);
    count_dropped("export_failed", n);
    if (!backoff)
        sg_log_kv(SG_LOG_WARN, "trace export failed: spans dropped, next post after a pause", "url",
                  o->url, "error", why, NULL);
    backoff = backoff ? backoff * 2 : BACKOFF_FIRST_MS;
    return backoff > BACKOFF_CAP_MS ? BACKOFF_CAP_MS : backoff;
}

static void *exporter_main(void *arg)
{
    sg_otel_t *o = arg;
    int64_t backoff = 0;
    struct timespec until;

    pthread_mutex_lock(&o->lock);
    for (;;) {
        sg_span_t *batch;
        size_t n;

        /* Wait for a full batch or the schedule delay; during a pause
         * after a failure, only stopping wakes the thread. */
        abs_deadline(&until, backoff ? backoff : o->delay_ms);
        while (!o->stopping && (backoff || o->queue.n < o->max_batch))
            if (pthread_cond_timedwait(&o->wake, &o->lock, &until) == ETIMEDOUT)
                break;
        if (o->stopping && (backoff || !o->queue.n))
            break;
        batch = take_batch(o, &n);
        if (!batch) {
            backoff = 0;
            continue;
        }
        pthread_mutex_unlock(&o->lock);
        backoff = export_one(o, batch, n, backoff);
        pthread_mutex_lock(&o->lock);
    }
    pthread_mutex_unlock(&o->lock);
    return NULL;
}

/* ---- configuration --------------------------------------------------------- */

/* Checks "k=v,k=v" (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES)
 * and calls fn for each pair, trimmed. */
static int each_pair(const char *key, const char *text,
                     void (*fn)(void *, const char *, const char *), void *opaque, char *errstr,
                     size_t errstr_size)
{
    char *copy = sg_xstrdup(text), *save = NULL;
    int rc = 0;

    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '='), *k = item, *v, *end;

        if (!eq) {
            rc = -1;
            break;
        }
        *eq = '\0';
        v = eq + 1;
        while (*k == ' ')
            k++;
        for (end = k + strlen(k); end > k && end[-1] == ' ';)
            *--end = '\0';
        while (*v == ' ')
            v++;
        for (end = v + strlen(v); end > v && end[-1] == ' ';)
            *--end = '\0';
        if (!*k || strpbrk(k, "\r\n:") || strpbrk(v, "\r\n")) {
            rc = -1;
            break;
        }
        if (fn)
            fn(opaque, k, v);
    }
    free(copy);
    if (rc < 0)
        snprintf(errstr, errstr_size,
                 "%s: must be a comma-separated list of key=value pairs (no empty key, no line "
                 "break)",
                 key);
    return rc;
}

static void add_header(void *opaque, const char *k, const char *v)
{
    sg_otel_t *o = opaque;
    size_t n = strlen(k) + strlen(v) + 3;
    char *line = sg_xmalloc(n);

    snprintf(line, n, "%s: %s", k, v);
    o->headers = curl_slist_append(o->headers, line);
    free(line);
    if (!o->headers)
        abort();
}

static void add_resource(void *opaque, const char *k, const char *v)
{
    buf_t *b = opaque;

    if (b->n)
        buf_add(b, ",", 1);
    buf_puts(b, "{\"key\":");
    buf_json_str(b, k);
    buf_puts(b, ",\"value\":{\"stringValue\":");
    buf_json_str(b, v);
    buf_puts(b, "}}");
}

static void otel_free(sg_otel_t *o)
{
    if (o->curl)
        curl_easy_cleanup(o->curl);
    curl_slist_free_all(o->headers);
    sg_span_list_discard(&o->queue);
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->wake);
    free(o->url);
    free(o->resource);
    free(o->body.p);
    free(o);
}

static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int setup_curl(sg_otel_t *o, char *errstr, size_t errstr_size)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, curl_init);
    o->curl = curl_easy_init();
    if (!o->curl) {
        snprintf(errstr, errstr_size, "otel.endpoint: libcurl could not make a handle");
        return -1;
    }
    o->headers = curl_slist_append(o->headers, "Content-Type: application/json");
    curl_easy_setopt(o->curl, CURLOPT_URL, o->url);
    curl_easy_setopt(o->curl, CURLOPT_HTTPHEADER, o->headers);
    curl_easy_setopt(o->curl, CURLOPT_TIMEOUT_MS, o->timeout_ms);
    curl_easy_setopt(o->curl, CURLOPT_CONNECTTIMEOUT_MS, o->timeout_ms);
    curl_easy_setopt(o->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(o->curl, CURLOPT_WRITEFUNCTION, discard_body);
    curl_easy_setopt(o->curl, CURLOPT_USERAGENT, "sagad/" SAGAD_VERSION);
    curl_easy_setopt(o->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    return 0;
}

int sg_otel_start(const sg_config_t *cfg, const char *component, sg_otel_t **out, char *errstr,
                  size_t errstr_size)
{
    const char *endpoint = sg_config_str(cfg, "otel.endpoint");
    const char *service = sg_config_str(cfg, "otel.service_name");
    double ratio = sg_config_ratio(cfg, "otel.traces_sampler_arg");
    buf_t res = {0};
    size_t len;
    sg_otel_t *o;

    *out = NULL;
    if (!endpoint || !*endpoint)
        return 0;
    if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0) {
        snprintf(errstr, errstr_size, "otel.endpoint: must be an http:// or https:// URL, got '%s'",
                 endpoint);
        return -1;
    }
    o = sg_xcalloc(1, sizeof(*o));
    pthread_mutex_init(&o->lock, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&o->wake, &ca);
        pthread_condattr_destroy(&ca);
    }
    len = strlen(endpoint);
    while (len && endpoint[len - 1] == '/')
        len--;
    o->url = sg_xmalloc(len + sizeof("/v1/traces"));
    memcpy(o->url, endpoint, len);
    memcpy(o->url + len, "/v1/traces", sizeof("/v1/traces"));
    o->timeout_ms = (long)sg_config_int(cfg, "otel.timeout_ms");
    o->max_queue = (size_t)sg_config_int(cfg, "otel.max_queue_size");
    o->max_batch = (size_t)sg_config_int(cfg, "otel.max_export_batch_size");
    o->delay_ms = sg_config_int(cfg, "otel.schedule_delay_ms");
    o->sample_all = ratio >= 1.0;
    o->sample_below = (uint64_t)(ratio * 18446744073709551615.0);
    add_resource(&res, "service.name", service && *service ? service : component);
    add_resource(&res, "service.version", SAGAD_VERSION);
    if (each_pair("otel.resource_attributes", sg_config_str(cfg, "otel.resource_attributes"),
                  add_resource, &res, errstr, errstr_size) < 0 ||
        each_pair("otel.headers", sg_config_str(cfg, "otel.headers"), add_header, o, errstr,
                  errstr_size) < 0 ||
        setup_curl(o, errstr, errstr_size) < 0) {
        free(res.p);
        otel_free(o);
        return -1;
    }
    o->resource = res.p;
    if (pthread_create(&o->thread, NULL, exporter_main, o) != 0) {
        snprintf(errstr, errstr_size, "otel.endpoint: cannot start the exporter thread");
        otel_free(o);
        return -1;
    }
    sg_log_kv(SG_LOG_INFO, "tracing on: spans exported over OTLP/HTTP", "url", o->url, NULL);
    *out = o;
    return 0;
}

void sg_otel_stop(sg_otel_t *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->lock);
    o->stopping = true;
    pthread_mutex_unlock(&o->lock);
    pthread_cond_signal(&o->wake);
    pthread_join(o->thread, NULL);
    count_dropped("shutdown", o->queue.n);
    otel_free(o);
}
