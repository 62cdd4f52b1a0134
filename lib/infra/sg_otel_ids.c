/* Trace and span ids (see sg_otel.h): the hash that names a span, and the
 * W3C traceparent read and written.  Pure functions of their arguments,
 * shared by the worker, the relay and the gateway; the exporter is
 * sg_otel.c. */
#include <stdio.h>
#include <string.h>

#include "sagad/sg_otel.h"
#include "sagad/sg_text.h"

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

int sg_otel_parse_traceparent(const char *tp, sg_trace_id_t *trace, uint64_t *span_id,
                              unsigned *flags)
{
    uint8_t sp[8], fl, zero[16] = {0};

    if (!tp || strlen(tp) < 55 || strncmp(tp, "00-", 3) != 0 || tp[35] != '-' || tp[52] != '-')
        return -1;
    if (sg_hex_decode(tp + 3, 16, trace->b) < 0 || sg_hex_decode(tp + 36, 8, sp) < 0 ||
        sg_hex_decode(tp + 53, 1, &fl) < 0 || memcmp(trace->b, zero, 16) == 0)
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
