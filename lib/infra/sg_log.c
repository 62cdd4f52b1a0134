#include "sagad/sg_log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_mask.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"

volatile sg_log_level_t sg_log_level = SG_LOG_INFO;

static char log_component[32] = "sagad";
static FILE *log_stream;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* A longer line is cut, field values first, and stays valid JSON. */
#define LOG_LINE_MAX  32768 /* a 4 KiB message fits even if every byte is escaped */
#define LOG_VALUE_MAX 4608  /* a 4 KiB message after masking (a mask may be longer) */

typedef struct line_s {
    char buf[LOG_LINE_MAX];
    size_t len;
} line_t;

void sg_log_init(const char *component, sg_log_level_t level)
{
    snprintf(log_component, sizeof(log_component), "%s", component);
    sg_log_level = level;
}

void sg_log_set_stream(FILE *fp)
{
    log_stream = fp;
}

int sg_log_level_parse(const char *name, sg_log_level_t *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (sg_log_level_t)i;
            return 0;
        }
    }
    return -1;
}

const char *sg_log_level_name(sg_log_level_t level)
{
    if ((unsigned)level >= sizeof(level_names) / sizeof(level_names[0]))
        return "unknown";
    return level_names[level];
}

/* The length of out[0..n) without a last UTF-8 sequence that was cut
 * short (by the room left, or already in the text given): log shippers
 * refuse a line that is not valid UTF-8. */
static size_t utf8_whole(const char *out, size_t n)
{
    size_t lead = n, want;
    unsigned char c;

    while (lead > 0 && n - lead < 4 && ((unsigned char)out[lead - 1] & 0xC0) == 0x80)
        lead--;
    if (lead == 0)
        return n;
    c = (unsigned char)out[lead - 1];
    if (c < 0xC0)
        return n; /* ASCII before the continuation bytes: nothing to judge */
    want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    return n - (lead - 1) < want ? lead - 1 : n;
}

size_t sg_log_json_escape(char *out, size_t out_size, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    if (out_size == 0)
        return 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[7];
        size_t elen;

        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            elen = 2;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            elen = 2;
        } else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        } else {
            esc[0] = (char)c;
            elen = 1;
        }
        if (n + elen >= out_size)
            break;
        memcpy(out + n, esc, elen);
        n += elen;
    }
    n = utf8_whole(out, n);
    out[n] = '\0';
    return n;
}

/* Room kept at the end of every line for the closing quote, brace and
 * newline (and a NUL), so a cut line is still one valid JSON object. */
#define LOG_TAIL 4

static size_t room(const line_t *l)
{
    return l->len + LOG_TAIL < sizeof(l->buf) ? sizeof(l->buf) - LOG_TAIL - l->len : 0;
}

/* Appends a short fixed piece; callers checked the room first. */
static void line_raw(line_t *l, const char *s)
{
    size_t len = strlen(s);

    if (len >= room(l))
        return;
    memcpy(l->buf + l->len, s, len);
    l->len += len;
    l->buf[l->len] = '\0';
}

/* A field is written whole or, when the line is full, not at all; only
 * its value may be cut.  Every value passes through sg_mask(): no secret
 * reaches the log, whoever wrote the message. */
static void line_str(line_t *l, const char *key, const char *val)
{
    char masked[LOG_VALUE_MAX];

    if (room(l) < strlen(key) + 8)
        return;
    sg_mask(val, masked, sizeof(masked));
    line_raw(l, ",\"");
    line_raw(l, key);
    line_raw(l, "\":\"");
    l->len += sg_log_json_escape(l->buf + l->len, room(l), masked);
    l->buf[l->len++] = '"'; /* LOG_TAIL keeps this byte */
    l->buf[l->len] = '\0';
}

static void line_num(line_t *l, const char *key, long long val)
{
    char num[32];

    if (room(l) < strlen(key) + 28)
        return;
    snprintf(num, sizeof(num), "%lld", val);
    line_raw(l, ",\"");
    line_raw(l, key);
    line_raw(l, "\":");
    line_raw(l, num);
}

static void line_begin(line_t *l, sg_log_level_t level, const char *msg)
{
    char tbuf[32];

    sg_time_iso(tbuf, sizeof(tbuf), sg_run_wall_ns() / 1000000);
    l->len = 0;
    line_raw(l, "{\"ts\":\"");
    line_raw(l, tbuf);
    line_raw(l, "\"");
    line_str(l, "level", sg_log_level_name(level));
    line_str(l, "component", log_component);
    line_str(l, "msg", msg);
}

static void line_emit(line_t *l)
{
    FILE *fp = log_stream ? log_stream : stderr;

    l->buf[l->len++] = '}';
    l->buf[l->len++] = '\n';
    /* One fwrite under the stream lock keeps lines from threads whole. */
    flockfile(fp);
    fwrite(l->buf, 1, l->len, fp);
    fflush(fp);
    funlockfile(fp);
}

static void line_ctx(line_t *l, const sg_log_ctx_t *ctx)
{
    if (!ctx)
        return;
    if (ctx->saga_id)
        line_str(l, "saga_id", ctx->saga_id);
    if (ctx->step)
        line_str(l, "step", ctx->step);
    if (ctx->attempt >= 0)
        line_num(l, "attempt", ctx->attempt);
    if (ctx->error_code)
        line_str(l, "error_code", ctx->error_code);
    if (ctx->topic)
        line_str(l, "topic", ctx->topic);
    if (ctx->partition >= 0)
        line_num(l, "partition", ctx->partition);
    if (ctx->offset >= 0)
        line_num(l, "offset", ctx->offset);
    if (ctx->trace_id)
        line_str(l, "trace_id", ctx->trace_id);
    if (ctx->span_id)
        line_str(l, "span_id", ctx->span_id);
    if (!ctx->trace_id && ctx->traceparent && strlen(ctx->traceparent) >= 55 &&
        ctx->traceparent[2] == '-' && ctx->traceparent[35] == '-') {
        char trace[33], span[17];
        memcpy(trace, ctx->traceparent + 3, 32);
        trace[32] = '\0';
        memcpy(span, ctx->traceparent + 36, 16);
        span[16] = '\0';
        line_str(l, "trace_id", trace);
        line_str(l, "span_id", span);
    }
}

void sg_log_write(sg_log_level_t level, const sg_log_ctx_t *ctx, const char *fmt, ...)
{
    char msg[4096];
    line_t l;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    line_begin(&l, level, msg);
    line_ctx(&l, ctx);
    line_emit(&l);
}

void sg_log_json(sg_log_level_t level, const sg_log_ctx_t *ctx, const char *msg, const char *key,
                 const char *json)
{
    size_t cap = 2 * strlen(json) + 256;
    char *masked;
    line_t l;

    if (level > sg_log_level)
        return;
    masked = malloc(cap);
    if (!masked)
        abort();
    line_begin(&l, level, msg);
    line_ctx(&l, ctx);
    sg_mask(json, masked, cap);
    /* Whole or not at all: a cut object would break the line's JSON. */
    if (strlen(masked) + strlen(key) + 8 < room(&l)) {
        line_raw(&l, ",\"");
        line_raw(&l, key);
        line_raw(&l, "\":");
        line_raw(&l, masked);
    } else {
        line_str(&l, key, "(left out: larger than a log line)");
    }
    free(masked);
    line_emit(&l);
}

void sg_log_kv(sg_log_level_t level, const char *msg, ...)
{
    line_t l;
    va_list ap;
    const char *key;

    if (level > sg_log_level)
        return;
    line_begin(&l, level, msg);
    va_start(ap, msg);
    while ((key = va_arg(ap, const char *)) != NULL) {
        const char *val = va_arg(ap, const char *);
        line_str(&l, key, val ? val : "");
    }
    va_end(ap);
    line_emit(&l);
}
