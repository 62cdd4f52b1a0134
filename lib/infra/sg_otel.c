/* The OTLP/HTTP span exporter (see sg_otel.h).  The second user of libcurl
 * beside the worker's http adapter: lib/ cannot call into a program, and
 * the relay exports spans too.
 *
 * A span's attributes are kept as the protobuf bytes of OTLP's KeyValue
 * messages from the moment the caller adds them (a tag, two lengths and
 * the bytes: no escaping, no formatting on the caller's thread).  The
 * exporter's thread writes a batch as an ExportTraceServiceRequest in
 * protobuf (otel.protocol http/protobuf, the default, as in the
 * OpenTelemetry SDKs) by copying those bytes, or in OTLP's JSON encoding
 * (http/json) by reading them back.  Both are written by hand: a span is a
 * flat record, and neither a cJSON tree nor a protobuf library per span is
 * worth its cost on the worker's loop.  Field numbers are those of
 * opentelemetry-proto's trace/v1, common/v1 and resource/v1 messages. */
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
#include "sagad/sg_text.h"
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

/* n bytes of s as a JSON string, quotes included. */
static void buf_json_strn(buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";

    buf_need(b, n * 6 + 2);
    b->p[b->n++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\') {
            b->p[b->n++] = '\\';
            b->p[b->n++] = (char)c;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            b->p[b->n++] = '\\';
            b->p[b->n++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c < 0x20) {
            memcpy(b->p + b->n, "\\u00", 4);
            b->p[b->n + 4] = hex[c >> 4];
            b->p[b->n + 5] = hex[c & 15];
            b->n += 6;
        } else {
            b->p[b->n++] = (char)c;
        }
    }
    b->p[b->n++] = '"';
    b->p[b->n] = '\0';
}

/* ---- protobuf ---------------------------------------------------------------- */

/* The tag byte of a length-delimited field (every field number used here
 * is below 16, so a tag is one byte). */
#define PB_LEN(field) ((char)((field) << 3 | 2))

static size_t pb_varint_size(uint64_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes a varint at p (room for 10 bytes); returns the end. */
static char *put_varint(char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

static void pb_varint(buf_t *b, uint64_t v)
{
    char tmp[10];

    buf_add(b, tmp, (size_t)(put_varint(tmp, v) - tmp));
}

static void pb_fixed64(buf_t *b, uint64_t v)
{
    char tmp[8];

    for (int i = 0; i < 8; i++)
        tmp[i] = (char)(v >> (8 * i));
    buf_add(b, tmp, 8);
}

/* The size of a length-delimited field of n bytes, tag and length included. */
static size_t pb_field_size(size_t n)
{
    return 1 + pb_varint_size(n) + n;
}

/* A tag and a length; the caller adds the n bytes. */
static void pb_head(buf_t *b, int field, size_t n)
{
    char tag = PB_LEN(field);

    buf_add(b, &tag, 1);
    pb_varint(b, n);
}

static void pb_bytes(buf_t *b, int field, const void *p, size_t n)
{
    pb_head(b, field, n);
    buf_add(b, p, n);
}

/* Reads a varint at *p (below end); false when it does not fit. */
static bool pb_read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char c = *(*p)++;

        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return true;
    }
    return false;
}

/* A protobuf string must be UTF-8: text that is not (a producer's saga id,
 * a tool's message) is copied with each bad byte as U+FFFD.  NULL when s
 * is valid, so the caller uses s itself. */
static char *utf8_fixed(const char *s, size_t *len)
{
    const unsigned char *p = (const unsigned char *)s;
    char *out, *w;

    if (sg_utf8_valid(s, *len))
        return NULL;
    w = out = sg_xmalloc(*len * 3 + 1);
    for (size_t i = 0; i < *len;) {
        size_t n = 1;

        while (n <= 4 && i + n <= *len && !sg_utf8_valid(p + i, n))
            n++;
        if (n <= 4 && i + n <= *len) {
            memcpy(w, p + i, n);
            w += n;
            i += n;
        } else {
            memcpy(w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    *w = '\0';
    *len = (size_t)(w - out);
    return out;
}

/* A copy of s that is valid UTF-8. */
static char *utf8_dup(const char *s)
{
    size_t len = strlen(s);
    char *fixed = utf8_fixed(s, &len);

    return fixed ? fixed : sg_xstrdup(s);
}

/* One attribute, as a KeyValue in field `field` of its message (a span's
 * attributes are field 9, a resource's field 1).  A string value is
 * AnyValue's field 1, an integer its field 3 (a varint).  The buffer
 * grows once, and the bytes are written in place: this runs on the
 * worker's loop for every attribute of every span. */
static void attr_kv(buf_t *b, int field, const char *key, const char *str, int64_t num)
{
    size_t klen = strlen(key), vlen = str ? strlen(str) : 0;
    char *fixed = str ? utf8_fixed(str, &vlen) : NULL;
    size_t any = str ? pb_field_size(vlen) : 1 + pb_varint_size((uint64_t)num);
    size_t kv = pb_field_size(klen) + pb_field_size(any);
    char *p;

    buf_need(b, pb_field_size(kv));
    p = b->p + b->n;
    *p++ = PB_LEN(field);
    p = put_varint(p, kv);
    *p++ = PB_LEN(1);
    p = put_varint(p, klen);
    memcpy(p, key, klen);
    p += klen;
    *p++ = PB_LEN(2);
    p = put_varint(p, any);
    if (str) {
        *p++ = PB_LEN(1);
        p = put_varint(p, vlen);
        memcpy(p, fixed ? fixed : str, vlen);
        p += vlen;
    } else {
        *p++ = 3 << 3; /* AnyValue.int_value, a varint */
        p = put_varint(p, (uint64_t)num);
    }
    b->n = (size_t)(p - b->p);
    b->p[b->n] = '\0';
    free(fixed);
}

static void attr_str(buf_t *b, int field, const char *key, const char *value)
{
    attr_kv(b, field, key, value, 0);
}

static void attr_int(buf_t *b, int field, const char *key, int64_t value)
{
    attr_kv(b, field, key, NULL, value);
}

/* The KeyValues of attrs (written by attr_str and attr_int, whatever their
 * field) as the members of a JSON array.  64-bit integers are strings in
 * OTLP/JSON. */
static void attrs_json(buf_t *out, const buf_t *attrs)
{
    const unsigned char *p = (const unsigned char *)attrs->p, *end = p + attrs->n;
    bool first = true;

    while (p && p < end) {
        const unsigned char *kv_end, *key, *val;
        uint64_t len, klen, any, vlen;

        p++; /* the field's tag */
        if (!pb_read_varint(&p, end, &len) || len > (uint64_t)(end - p))
            return;
        kv_end = p + len;
        if (p >= kv_end || *p++ != PB_LEN(1) || !pb_read_varint(&p, kv_end, &klen) ||
            klen > (uint64_t)(kv_end - p))
            return;
        key = p;
        p += klen;
        if (p >= kv_end || *p++ != PB_LEN(2) || !pb_read_varint(&p, kv_end, &any) || p >= kv_end)
            return;
        if (!first)
            buf_add(out, ",", 1);
        first = false;
        buf_puts(out, "{\"key\":");
        buf_json_strn(out, (const char *)key, klen);
        if (*p == PB_LEN(1)) {
            p++;
            if (!pb_read_varint(&p, kv_end, &vlen) || vlen > (uint64_t)(kv_end - p))
                return;
            val = p;
            buf_puts(out, ",\"value\":{\"stringValue\":");
            buf_json_strn(out, (const char *)val, vlen);
            buf_puts(out, "}}");
        } else {
            p++;
            if (!pb_read_varint(&p, kv_end, &vlen))
                return;
            buf_printf(out, ",\"value\":{\"intValue\":\"%" PRId64 "\"}}", (int64_t)vlen);
        }
        p = kv_end;
    }
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
    char *name;  /* valid UTF-8 */
    char *error; /* status message when the status is error, else NULL; valid UTF-8 */
    buf_t attrs; /* the attributes: Span.attributes (field 9) KeyValues, protobuf */
};

sg_span_t *sg_span_new(const sg_trace_id_t *trace, uint64_t span_id, uint64_t parent_id,
                       const char *name, sg_span_kind_t kind, int64_t start_ns, int64_t end_ns)
{
    sg_span_t *s = sg_xcalloc(1, sizeof(*s));

    s->trace = *trace;
    s->id = span_id;
    s->parent = parent_id;
    s->name = utf8_dup(name);
    s->kind = kind;
    /* Whole microseconds: a backend such as Jaeger keeps a span's start
     * and its duration in us, each cut down from ns on its own, so two
     * spans that end at the same ns but began at different ones could
     * show ends 1 us apart. */
    s->start_ns = start_ns / 1000 * 1000;
    s->end_ns = end_ns < start_ns ? s->start_ns : end_ns / 1000 * 1000;
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

void sg_span_str(sg_span_t *s, const char *key, const char *value)
{
    if (value)
        attr_str(&s->attrs, 9, key, value);
}

void sg_span_int(sg_span_t *s, const char *key, int64_t value)
{
    attr_int(&s->attrs, 9, key, value);
}

void sg_span_error(sg_span_t *s, const char *message)
{
    free(s->error);
    s->error = utf8_dup(message ? message : "");
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

/* ---- the exporter ---------------------------------------------------------- */

struct sg_otel_s {
    char *url;
    struct curl_slist *headers;
    buf_t resource;        /* the resource's attributes: Resource.attributes (1), protobuf */
    bool json;             /* otel.protocol http/json */
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
    buf_json_strn(b, s->name, strlen(s->name));
    buf_printf(b,
               ",\"kind\":%d,\"startTimeUnixNano\":\"%" PRId64 "\",\"endTimeUnixNano\":\"%" PRId64
               "\",\"attributes\":[",
               (int)s->kind, s->start_ns, s->end_ns);
    attrs_json(b, &s->attrs);
    buf_puts(b, "]");
    if (s->link_span) {
        sg_otel_trace_hex(trace, sizeof(trace), &s->link_trace);
        sg_otel_span_hex(id, sizeof(id), s->link_span);
        buf_printf(b, ",\"links\":[{\"traceId\":\"%s\",\"spanId\":\"%s\"}]", trace, id);
    }
    if (s->error) {
        buf_puts(b, ",\"status\":{\"code\":2,\"message\":");
        buf_json_strn(b, s->error, strlen(s->error));
        buf_puts(b, "}");
    }
    buf_puts(b, "}");
}

/* The ExportTraceServiceRequest of a batch, in OTLP's JSON encoding. */
static void request_json(const sg_otel_t *o, buf_t *b, const sg_span_t *first)
{
    buf_puts(b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    attrs_json(b, &o->resource);
    buf_printf(b,
               "]},\"scopeSpans\":[{\"scope\":{\"name\":\"sagad\",\"version\":\"%s\"},"
               "\"spans\":[",
               SAGAD_VERSION);
    for (const sg_span_t *s = first; s; s = s->next) {
        span_json(b, s);
        if (s->next)
            buf_add(b, ",", 1);
    }
    buf_puts(b, "]}]}]}");
}

static void id_bytes(uint8_t out[8], uint64_t id)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(id >> (56 - 8 * i));
}

/* Span.status: message (field 2) and code (field 3) STATUS_CODE_ERROR. */
static size_t status_pb_size(const sg_span_t *s)
{
    return pb_field_size(strlen(s->error)) + 2;
}

/* A Span message's size without its own tag and length. */
static size_t span_pb_size(const sg_span_t *s)
{
    size_t n = pb_field_size(16) + pb_field_size(8) + pb_field_size(strlen(s->name)) + 1 +
               pb_varint_size((uint64_t)s->kind) + 2 * 9 + s->attrs.n;

    if (s->parent)
        n += pb_field_size(8);
    if (s->link_span)
        n += pb_field_size(pb_field_size(16) + pb_field_size(8));
    if (s->error)
        n += pb_field_size(status_pb_size(s));
    return n;
}

/* One Span, fields in the order of their numbers (flags, 16, is not sent). */
static void span_pb(buf_t *b, const sg_span_t *s)
{
    uint8_t id[8];
    char tag;

    pb_head(b, 2, span_pb_size(s)); /* ScopeSpans.spans */
    pb_bytes(b, 1, s->trace.b, 16);
    id_bytes(id, s->id);
    pb_bytes(b, 2, id, 8);
    if (s->parent) {
        id_bytes(id, s->parent);
        pb_bytes(b, 4, id, 8);
    }
    pb_bytes(b, 5, s->name, strlen(s->name));
    tag = 6 << 3; /* kind, a varint */
    buf_add(b, &tag, 1);
    pb_varint(b, (uint64_t)s->kind);
    tag = 7 << 3 | 1; /* start_time_unix_nano, fixed64 */
    buf_add(b, &tag, 1);
    pb_fixed64(b, (uint64_t)s->start_ns);
    tag = 8 << 3 | 1;
    buf_add(b, &tag, 1);
    pb_fixed64(b, (uint64_t)s->end_ns);
    buf_add(b, s->attrs.p ? s->attrs.p : "", s->attrs.n);
    if (s->link_span) {
        pb_head(b, 13, pb_field_size(16) + pb_field_size(8));
        pb_bytes(b, 1, s->link_trace.b, 16);
        id_bytes(id, s->link_span);
        pb_bytes(b, 2, id, 8);
    }
    if (s->error) {
        pb_head(b, 15, status_pb_size(s));
        pb_bytes(b, 2, s->error, strlen(s->error));
        buf_add(b, "\x18\x02", 2); /* code (3): STATUS_CODE_ERROR */
    }
}

/* The ExportTraceServiceRequest of a batch in protobuf: resource_spans (1)
 * { resource (1), scope_spans (2) { scope (1), spans (2)... } }. */
static void request_pb(const sg_otel_t *o, buf_t *b, const sg_span_t *first)
{
    size_t scope = pb_field_size(5) + pb_field_size(strlen(SAGAD_VERSION)), spans = 0, scope_spans;

    for (const sg_span_t *s = first; s; s = s->next)
        spans += pb_field_size(span_pb_size(s));
    scope_spans = pb_field_size(scope) + spans;
    pb_head(b, 1, pb_field_size(o->resource.n) + pb_field_size(scope_spans));
    pb_bytes(b, 1, o->resource.p ? o->resource.p : "", o->resource.n);
    pb_head(b, 2, scope_spans);
    pb_head(b, 1, scope);
    pb_bytes(b, 1, "sagad", 5);
    pb_bytes(b, 2, SAGAD_VERSION, strlen(SAGAD_VERSION));
    for (const sg_span_t *s = first; s; s = s->next)
        span_pb(b, s);
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
    if (o->json)
        request_json(o, body, first);
    else
        request_pb(o, body, first);
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
    attr_str(opaque, 1, k, v);
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
    free(o->resource.p);
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
    o->headers = curl_slist_append(o->headers, o->json ? "Content-Type: application/json"
                                                       : "Content-Type: application/x-protobuf");
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
    o->json = strcmp(sg_config_str(cfg, "otel.protocol"), "http/json") == 0;
    add_resource(&o->resource, "service.name", service && *service ? service : component);
    add_resource(&o->resource, "service.version", SAGAD_VERSION);
    if (each_pair("otel.resource_attributes", sg_config_str(cfg, "otel.resource_attributes"),
                  add_resource, &o->resource, errstr, errstr_size) < 0 ||
        each_pair("otel.headers", sg_config_str(cfg, "otel.headers"), add_header, o, errstr,
                  errstr_size) < 0 ||
        setup_curl(o, errstr, errstr_size) < 0) {
        otel_free(o);
        return -1;
    }
    if (pthread_create(&o->thread, NULL, exporter_main, o) != 0) {
        snprintf(errstr, errstr_size, "otel.endpoint: cannot start the exporter thread");
        otel_free(o);
        return -1;
    }
    sg_log_kv(SG_LOG_INFO, "tracing on: spans exported over OTLP/HTTP", "url", o->url, "protocol",
              o->json ? "http/json" : "http/protobuf", NULL);
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
