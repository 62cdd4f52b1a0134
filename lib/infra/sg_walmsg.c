/* Decoders of the WAL source's wire formats (sg_walmsg.h).  Every length
 * comes from the stream and is checked against what is left before it is
 * used; integers are big-endian, as in PostgreSQL's protocol. */
#include "sagad/sg_walmsg.h"

#include <stdio.h>
#include <string.h>

typedef struct reader_s {
    const unsigned char *p;
    size_t left;
} reader_t;

static bool take(reader_t *r, size_t n, const unsigned char **out)
{
    if (r->left < n)
        return false;
    *out = r->p;
    r->p += n;
    r->left -= n;
    return true;
}

static bool u8(reader_t *r, uint8_t *v)
{
    const unsigned char *b;

    if (!take(r, 1, &b))
        return false;
    *v = b[0];
    return true;
}

static bool u32(reader_t *r, uint32_t *v)
{
    const unsigned char *b;

    if (!take(r, 4, &b))
        return false;
    *v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return true;
}

static bool u64(reader_t *r, uint64_t *v)
{
    uint32_t hi, lo;

    if (!u32(r, &hi) || !u32(r, &lo))
        return false;
    *v = (uint64_t)hi << 32 | lo;
    return true;
}

int sg_wal_copy_parse(const unsigned char *buf, size_t len, sg_wal_copy_t *out)
{
    reader_t r = {buf, len};
    uint64_t sent;
    uint8_t kind, reply;

    memset(out, 0, sizeof(*out));
    if (!u8(&r, &kind))
        return -1;
    out->kind = (char)kind;
    if (kind == 'w') {
        if (!u64(&r, &out->start) || !u64(&r, &out->end) || !u64(&r, &sent))
            return -1;
        out->sent_us = (int64_t)sent;
        out->data = r.p;
        out->len = r.left;
        return 0;
    }
    if (kind == 'k') {
        if (!u64(&r, &out->end) || !u64(&r, &sent) || !u8(&r, &reply))
            return -1;
        out->sent_us = (int64_t)sent;
        out->reply = reply != 0;
        return 0;
    }
    return -1;
}

int sg_pgo_parse(const unsigned char *buf, size_t len, sg_pgo_msg_t *out)
{
    reader_t r = {buf, len};
    uint64_t t;
    uint32_t n;
    uint8_t type, flags;
    const unsigned char *nul, *b;

    memset(out, 0, sizeof(*out));
    if (!u8(&r, &type))
        return -1;
    out->type = (char)type;
    switch (type) {
    case 'B':
        if (!u64(&r, &out->lsn) || !u64(&r, &t) || !u32(&r, &out->xid))
            return -1;
        out->time_us = (int64_t)t;
        return 0;
    case 'C':
        if (!u8(&r, &flags) || !u64(&r, &out->lsn) || !u64(&r, &out->end_lsn) || !u64(&r, &t))
            return -1;
        out->time_us = (int64_t)t;
        return 0;
    case 'M':
        /* protocol 1 (no streaming): flags, LSN, prefix, length, content */
        if (!u8(&r, &flags) || !u64(&r, &out->lsn))
            return -1;
        out->transactional = (flags & 1) != 0;
        nul = memchr(r.p, '\0', r.left);
        if (!nul)
            return -1;
        out->prefix = (const char *)r.p;
        if (!take(&r, (size_t)(nul - r.p) + 1, &b) || !u32(&r, &n) || !take(&r, n, &b))
            return -1;
        out->content = b;
        out->content_len = n;
        return 0;
    default:
        return 0;
    }
}

int sg_outbox_frame_parse(const unsigned char *buf, size_t len, sg_outbox_frame_t *out)
{
    reader_t r = {buf, len};
    const unsigned char *b;
    uint64_t id;
    uint32_t n;

    memset(out, 0, sizeof(*out));
    if (!take(&r, 4, &b) || memcmp(b, "SGO1", 4) != 0 || !u64(&r, &id))
        return -1;
    out->id = (int64_t)id;
    if (!u32(&r, &n) || n == 0 || !take(&r, n, &b) || memchr(b, '\0', n))
        return -1;
    out->topic = (const char *)b;
    out->topic_len = n;
    if (!u32(&r, &n))
        return -1;
    if (n != UINT32_MAX) {
        if (!take(&r, n, &b))
            return -1;
        out->has_key = true;
        out->key = b;
        out->key_len = n;
    }
    if (!u32(&r, &n) || !take(&r, n, &b))
        return -1;
    out->headers = (const char *)b;
    out->headers_len = n;
    out->payload = r.p;
    out->payload_len = r.left;
    return 0;
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

void sg_wal_status_encode(unsigned char out[SG_WAL_STATUS_LEN], uint64_t lsn, int64_t now_us,
                          bool reply)
{
    out[0] = 'r';
    put64(out + 1, lsn);  /* written */
    put64(out + 9, lsn);  /* flushed: what the slot may forget */
    put64(out + 17, lsn); /* applied */
    put64(out + 25, (uint64_t)now_us);
    out[33] = reply ? 1 : 0;
}

const char *sg_lsn_text(char buf[24], uint64_t lsn)
{
    snprintf(buf, 24, "%X/%X", (unsigned)(lsn >> 32), (unsigned)(lsn & 0xffffffffu));
    return buf;
}
