/* libFuzzer target: what the WAL relay decodes from its replication
 * connection (sg_walmsg.h).  The input is one CopyData message: an
 * XLogData's data goes on to the pgoutput decoder and a Message's content
 * to the outbox frame decoder, as the relay hands them on, each copied
 * alone into a block of exactly its length so that a read past the end of
 * any layer is caught, not only past the end of the input.  The input is
 * also decoded directly as a pgoutput message and as a frame, so each
 * decoder sees raw bytes too.  Properties beyond "no crash, no read out of
 * bounds, no undefined behaviour":
 *   - what a decoder accepts, written again from the fields it returned,
 *     gives back the bytes it came from (nothing skipped, nothing read
 *     twice): an outbox frame whole, an XLogData whole, a keepalive, a
 *     Begin, a Commit and a Message up to their last field;
 *   - every pointer returned lies, with its length, inside the input;
 *     a frame's topic is non-empty without NUL, a prefix ends in a NUL;
 *   - every LSN decoded, written as text, reads back as itself, and the
 *     status update confirming it carries it three times. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_walmsg.h"

/* The bytes a decoder accepted, written again from its fields. */
typedef struct out_s {
    unsigned char b[64];
    unsigned char *big;
    size_t n, cap;
} out_t;

static void out_init(out_t *o, size_t cap)
{
    o->n = 0;
    o->cap = cap;
    o->big = cap > sizeof(o->b) ? malloc(cap) : NULL;
    if (cap > sizeof(o->b) && !o->big)
        abort();
}

static unsigned char *out_data(out_t *o)
{
    return o->big ? o->big : o->b;
}

static void put(out_t *o, const void *p, size_t n)
{
    if (n > o->cap - o->n)
        abort(); /* longer than what was decoded: a byte read twice */
    if (n > 0)
        memcpy(out_data(o) + o->n, p, n);
    o->n += n;
}

static void put8(out_t *o, uint8_t v)
{
    put(o, &v, 1);
}

static void put64(out_t *o, uint64_t v)
{
    unsigned char b[8];

    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (unsigned char)v;
    put(o, b, 8);
}

static void put32(out_t *o, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 8), (unsigned char)v};

    put(o, b, 4);
}

/* What was written again is the n first bytes of buf (the whole of buf
 * when whole). */
static void out_same(out_t *o, const unsigned char *buf, size_t len, bool whole)
{
    if (o->n > len || (whole && o->n != len) || memcmp(out_data(o), buf, o->n) != 0)
        abort();
    free(o->big);
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void inside(const void *p, size_t n, const unsigned char *buf, size_t len)
{
    uintptr_t at = (uintptr_t)p, from = (uintptr_t)buf;

    if (!p || at < from || at - from > len || n > len - (at - from))
        abort();
}

/* n bytes alone in a block of exactly n bytes (the caller frees it). */
static unsigned char *alone(const unsigned char *p, size_t n)
{
    unsigned char *b = malloc(n);

    if (n > 0) {
        if (!b)
            abort();
        memcpy(b, p, n);
    }
    return b;
}

static void check_lsn(uint64_t lsn, int64_t now_us, bool reply)
{
    char text[24];
    unsigned hi, lo;
    unsigned char st[SG_WAL_STATUS_LEN];

    if (sg_lsn_text(text, lsn) != text || strlen(text) > 17 ||
        sscanf(text, "%X/%X", &hi, &lo) != 2 || ((uint64_t)hi << 32 | lo) != lsn)
        abort();
    sg_wal_status_encode(st, lsn, now_us, reply);
    if (st[0] != 'r' || get64(st + 1) != lsn || get64(st + 9) != lsn || get64(st + 17) != lsn ||
        get64(st + 25) != (uint64_t)now_us || st[33] != (reply ? 1 : 0))
        abort();
}

static void frame(const unsigned char *buf, size_t len)
{
    sg_outbox_frame_t f;
    out_t o;

    if (sg_outbox_frame_parse(buf, len, &f) < 0)
        return;
    inside(f.topic, f.topic_len, buf, len);
    inside(f.headers, f.headers_len, buf, len);
    inside(f.payload, f.payload_len, buf, len);
    if (f.topic_len == 0 || memchr(f.topic, '\0', f.topic_len))
        abort();
    if (f.has_key)
        inside(f.key, f.key_len, buf, len);
    else if (f.key_len != 0)
        abort();
    out_init(&o, len);
    put(&o, "SGO1", 4);
    put64(&o, (uint64_t)f.id);
    put32(&o, (uint32_t)f.topic_len);
    put(&o, f.topic, f.topic_len);
    put32(&o, f.has_key ? (uint32_t)f.key_len : UINT32_MAX);
    if (f.has_key)
        put(&o, f.key, f.key_len);
    put32(&o, (uint32_t)f.headers_len);
    put(&o, f.headers, f.headers_len);
    put(&o, f.payload, f.payload_len);
    out_same(&o, buf, len, true);
}

static void pgoutput(const unsigned char *buf, size_t len)
{
    sg_pgo_msg_t m;
    out_t o;

    if (sg_pgo_parse(buf, len, &m) < 0)
        return;
    if (len == 0 || m.type != (char)buf[0])
        abort();
    out_init(&o, len);
    put8(&o, (uint8_t)m.type);
    switch (m.type) {
    case 'B':
        put64(&o, m.lsn);
        put64(&o, (uint64_t)m.time_us);
        put32(&o, m.xid);
        break;
    case 'C':
        put8(&o, buf[1]); /* flags: unused */
        put64(&o, m.lsn);
        put64(&o, m.end_lsn);
        put64(&o, (uint64_t)m.time_us);
        check_lsn(m.end_lsn, m.time_us, false);
        break;
    case 'M':
        if (m.transactional != ((buf[1] & 1) != 0))
            abort();
        inside(m.prefix, strlen(m.prefix) + 1, buf, len);
        inside(m.content, m.content_len, buf, len);
        put8(&o, buf[1]);
        put64(&o, m.lsn);
        put(&o, m.prefix, strlen(m.prefix) + 1);
        put32(&o, (uint32_t)m.content_len);
        put(&o, m.content, m.content_len);
        if (m.content_len > 0) {
            unsigned char *content = alone(m.content, m.content_len);

            frame(content, m.content_len);
            free(content);
        }
        break;
    default:
        break; /* named, not decoded */
    }
    check_lsn(m.lsn, m.time_us, true);
    out_same(&o, buf, len, false);
}

static void copy_data(const unsigned char *buf, size_t len)
{
    sg_wal_copy_t c;
    out_t o;

    if (sg_wal_copy_parse(buf, len, &c) < 0)
        return;
    out_init(&o, len);
    put8(&o, (uint8_t)c.kind);
    if (c.kind == 'w') {
        inside(c.data, c.len, buf, len);
        put64(&o, c.start);
        put64(&o, c.end);
        put64(&o, (uint64_t)c.sent_us);
        put(&o, c.data, c.len);
        out_same(&o, buf, len, true);
        if (c.len > 0) {
            unsigned char *data = alone(c.data, c.len);

            pgoutput(data, c.len);
            free(data);
        }
    } else if (c.kind == 'k') {
        put64(&o, c.end);
        put64(&o, (uint64_t)c.sent_us);
        put8(&o, buf[17]);
        if (c.reply != (buf[17] != 0) || c.data || c.len != 0)
            abort();
        out_same(&o, buf, len, false);
    } else {
        abort(); /* a kind that is neither */
    }
    check_lsn(c.start, c.sent_us, c.reply);
    check_lsn(c.end, c.sent_us, c.reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    copy_data(data, size);
    pgoutput(data, size);
    frame(data, size);
    return 0;
}
