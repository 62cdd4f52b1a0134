/* sg_walmsg: the WAL source's decoders, fed messages built byte by byte
 * as PostgreSQL writes them (its documentation's "Streaming Replication
 * Protocol" and "Logical Replication Message Formats", pgoutput protocol
 * version 1) and outbox frames built as sagad_outbox_frame() builds them
 * (schemas/sql/0026_wal_outbox.sql).  These bytes come from the server,
 * and a Message's content from whoever wrote into the WAL, so every input
 * is handed over in a heap block of exactly its length: the ASan build
 * catches a read of one byte past the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_walmsg.h"
#include "unit.h"

/* Every byte of these differs, so a field read from the wrong offset or
 * with its bytes or halves swapped shows. */
#define LSN_A  UINT64_C(0x0102030405060708)
#define LSN_B  UINT64_C(0x1112131415161718)
#define LSN_C  UINT64_C(0x2122232425262728)
#define TIME_A INT64_C(0x3132333435363738)

/* 2026-01-01T00:00:00Z in microseconds since 2000-01-01, PostgreSQL's epoch */
#define T2026 INT64_C(820540800000000)

#define expect_u64(got, want)                                                                      \
    cr_expect_eq((uint64_t)(got), (uint64_t)(want), "%s: got 0x%llx, want 0x%llx", #got,           \
                 (unsigned long long)(got), (unsigned long long)(want))

/* A message on the wire, written the way the server writes it:
 * integers in network byte order, strings without their NUL unless
 * put8(w, 0) adds it. */
typedef struct wire_s {
    unsigned char b[512];
    size_t n;
} wire_t;

static void put8(wire_t *w, uint8_t v)
{
    cr_assert_lt(w->n, sizeof(w->b), "test message too long");
    w->b[w->n++] = v;
}

static void put32(wire_t *w, uint32_t v)
{
    for (int shift = 24; shift >= 0; shift -= 8)
        put8(w, (uint8_t)(v >> shift));
}

static void put64(wire_t *w, uint64_t v)
{
    put32(w, (uint32_t)(v >> 32));
    put32(w, (uint32_t)v);
}

static void putn(wire_t *w, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put8(w, ((const unsigned char *)p)[i]);
}

static void putstr(wire_t *w, const char *s)
{
    putn(w, s, strlen(s));
}

/* The first n bytes of w, alone in a heap block of exactly n bytes.
 * malloc(0) may give NULL: the decoders must take (NULL, 0) too. */
static unsigned char *exact(const wire_t *w, size_t n)
{
    unsigned char *p = malloc(n);

    if (n > 0) {
        cr_assert_not_null(p);
        memcpy(p, w->b, n);
    }
    return p;
}

/* XLogData: 'w', int64 WAL start, int64 WAL end, int64 send time, data. */
static void xlogdata(wire_t *w, uint64_t start, uint64_t end, int64_t sent, const wire_t *data)
{
    put8(w, 'w');
    put64(w, start);
    put64(w, end);
    put64(w, (uint64_t)sent);
    putn(w, data->b, data->n);
}

/* Primary keepalive: 'k', int64 WAL end, int64 send time, byte reply. */
static void keepalive(wire_t *w, uint64_t end, int64_t sent, uint8_t reply)
{
    put8(w, 'k');
    put64(w, end);
    put64(w, (uint64_t)sent);
    put8(w, reply);
}

/* Begin: 'B', int64 final LSN, int64 commit time, int32 xid. */
static void begin(wire_t *w, uint64_t final_lsn, int64_t time_us, uint32_t xid)
{
    put8(w, 'B');
    put64(w, final_lsn);
    put64(w, (uint64_t)time_us);
    put32(w, xid);
}

/* Commit: 'C', int8 flags, int64 commit LSN, int64 end LSN, int64 time. */
static void commit(wire_t *w, uint8_t flags, uint64_t lsn, uint64_t end_lsn, int64_t time_us)
{
    put8(w, 'C');
    put8(w, flags);
    put64(w, lsn);
    put64(w, end_lsn);
    put64(w, (uint64_t)time_us);
}

/* Message: 'M', int8 flags (1: transactional), int64 LSN, the prefix and
 * its NUL, int32 length, the content. */
static void message(wire_t *w, uint8_t flags, uint64_t lsn, const char *prefix, const void *content,
                    size_t content_len)
{
    put8(w, 'M');
    put8(w, flags);
    put64(w, lsn);
    putstr(w, prefix);
    put8(w, 0);
    put32(w, (uint32_t)content_len);
    putn(w, content, content_len);
}

/* sagad_outbox_frame(): '\x53474f31' || int8send(id) || int4 length and
 * UTF-8 of the topic || int4send(coalesce(octet_length(key), -1)) ||
 * coalesce(key, '') || int4 length and text of the headers || payload.
 * key NULL is SQL's NULL. */
static void frame(wire_t *w, int64_t id, const char *topic, const void *key, size_t key_len,
                  const char *headers, const void *payload, size_t payload_len)
{
    putstr(w, "SGO1");
    put64(w, (uint64_t)id);
    put32(w, (uint32_t)strlen(topic));
    putstr(w, topic);
    put32(w, key ? (uint32_t)key_len : UINT32_MAX);
    if (key)
        putn(w, key, key_len);
    put32(w, (uint32_t)strlen(headers));
    putstr(w, headers);
    putn(w, payload, payload_len);
}

static int copy_parse(const unsigned char *buf, size_t len)
{
    sg_wal_copy_t c;

    return sg_wal_copy_parse(buf, len, &c);
}

static int pgo_parse(const unsigned char *buf, size_t len)
{
    sg_pgo_msg_t m;

    return sg_pgo_parse(buf, len, &m);
}

static int frame_parse(const unsigned char *buf, size_t len)
{
    sg_outbox_frame_t f;

    return sg_outbox_frame_parse(buf, len, &f);
}

/* Every prefix of w shorter than upto bytes is refused. */
static void expect_cuts_refused(int (*parse)(const unsigned char *, size_t), const wire_t *w,
                                size_t upto, const char *what)
{
    for (size_t n = 0; n < upto; n++) {
        unsigned char *p = exact(w, n);

        cr_expect_eq(parse(p, n), -1, "%s cut to %zu of %zu bytes was accepted", what, n, w->n);
        free(p);
    }
}

/* A headers object as jsonb::text writes it (a space after ':' and ','). */
#define HEADERS "{\"sagad-type\": \"step.done\", \"sagad-saga-id\": \"s-17\"}"

Test(walmsg, xlogdata_gives_its_positions_clock_and_data)
{
    static const unsigned char data[] = {'B', 0, 0xff, 'x'};
    wire_t in = {.n = 0}, w = {.n = 0};
    sg_wal_copy_t c;
    unsigned char *p;

    putn(&in, data, sizeof(data));
    xlogdata(&w, LSN_A, LSN_B, TIME_A, &in);
    cr_assert_eq(w.n, 1 + 8 + 8 + 8 + sizeof(data));
    p = exact(&w, w.n);
    cr_assert_eq(sg_wal_copy_parse(p, w.n, &c), 0);
    cr_expect_eq(c.kind, 'w');
    expect_u64(c.start, LSN_A);
    expect_u64(c.end, LSN_B);
    cr_expect_eq(c.sent_us, TIME_A);
    cr_expect_not(c.reply);
    cr_expect_eq(c.data, p + 25, "the data starts after the 25-byte header");
    cr_expect_eq(c.len, sizeof(data));
    cr_expect_arr_eq(c.data, data, sizeof(data));
    free(p);
}

Test(walmsg, keepalive_gives_the_server_end_clock_and_reply_request)
{
    for (uint8_t reply = 0; reply <= 1; reply++) {
        wire_t w = {.n = 0};
        sg_wal_copy_t c;
        unsigned char *p;

        keepalive(&w, LSN_B, T2026, reply);
        cr_assert_eq(w.n, 18);
        p = exact(&w, w.n);
        cr_assert_eq(sg_wal_copy_parse(p, w.n, &c), 0);
        cr_expect_eq(c.kind, 'k');
        expect_u64(c.end, LSN_B);
        cr_expect_eq(c.sent_us, T2026);
        cr_expect_eq(c.reply, reply == 1, "reply byte %u", reply);
        expect_u64(c.start, 0);
        cr_expect_null(c.data, "a keepalive carries no data");
        cr_expect_eq(c.len, 0);
        free(p);
    }
}

Test(walmsg, a_copy_message_of_another_kind_is_refused)
{
    static const char kinds[] = {'r', 'x', 'W', 'K', 0};
    wire_t w = {.n = 0};
    sg_wal_copy_t c;
    unsigned char *p;

    cr_expect_eq(sg_wal_copy_parse(NULL, 0, &c), -1, "an empty message");
    for (size_t i = 0; i < sizeof(kinds); i++) {
        w.n = 0;
        put8(&w, (uint8_t)kinds[i]);
        put64(&w, LSN_A);
        put64(&w, LSN_B);
        put64(&w, (uint64_t)T2026);
        put8(&w, 0);
        p = exact(&w, w.n);
        cr_expect_eq(sg_wal_copy_parse(p, w.n, &c), -1, "kind 0x%02x was accepted",
                     (unsigned)kinds[i]);
        free(p);
    }
}

Test(walmsg, a_cut_copy_message_is_refused_by_its_decoder_or_the_next)
{
    wire_t in = {.n = 0}, w = {.n = 0};

    keepalive(&w, LSN_B, T2026, 1);
    expect_cuts_refused(copy_parse, &w, w.n, "a keepalive");

    /* XLogData's data runs to the end of the message, so a cut inside it
     * is only seen by the pgoutput decoder; a cut inside the header is. */
    begin(&in, LSN_A, T2026, 7);
    w.n = 0;
    xlogdata(&w, LSN_A, LSN_B, T2026, &in);
    expect_cuts_refused(copy_parse, &w, 25, "an XLogData header");
    for (size_t n = 25; n <= w.n; n++) {
        unsigned char *p = exact(&w, n);
        sg_wal_copy_t c;

        cr_assert_eq(sg_wal_copy_parse(p, n, &c), 0, "%zu bytes", n);
        cr_expect_eq(c.len, n - 25);
        cr_expect_eq(pgo_parse(c.data, c.len), n == w.n ? 0 : -1, "its Begin cut to %zu bytes",
                     c.len);
        free(p);
    }
}

Test(walmsg, begin_gives_the_final_lsn_commit_time_and_xid)
{
    wire_t w = {.n = 0};
    sg_pgo_msg_t m;
    unsigned char *p;

    begin(&w, LSN_A, TIME_A, UINT32_C(0xfedcba98));
    cr_assert_eq(w.n, 21);
    p = exact(&w, w.n);
    cr_assert_eq(sg_pgo_parse(p, w.n, &m), 0);
    cr_expect_eq(m.type, 'B');
    expect_u64(m.lsn, LSN_A);
    cr_expect_eq(m.time_us, TIME_A);
    cr_expect_eq(m.xid, UINT32_C(0xfedcba98));
    expect_u64(m.end_lsn, 0);
    cr_expect_null(m.prefix);
    free(p);
}

Test(walmsg, commit_gives_the_commit_lsn_the_end_lsn_and_time)
{
    /* flags are unused by protocol 1 and ignored, whatever they hold */
    for (unsigned flags = 0; flags <= 0xff; flags += 0xff) {
        wire_t w = {.n = 0};
        sg_pgo_msg_t m;
        unsigned char *p;

        commit(&w, (uint8_t)flags, LSN_A, LSN_B, T2026);
        cr_assert_eq(w.n, 26);
        p = exact(&w, w.n);
        cr_assert_eq(sg_pgo_parse(p, w.n, &m), 0, "flags 0x%02x", flags);
        cr_expect_eq(m.type, 'C');
        expect_u64(m.lsn, LSN_A);
        expect_u64(m.end_lsn, LSN_B);
        cr_expect_eq(m.time_us, T2026);
        cr_expect_eq(m.xid, 0);
        free(p);
    }
}

Test(walmsg, a_message_gives_its_flag_lsn_prefix_and_content)
{
    static const unsigned char content[] = {'S', 'G', 'O', '1', 0, 0xff, 0, 'z'};
    wire_t w = {.n = 0};
    sg_pgo_msg_t m;
    unsigned char *p;

    message(&w, 1, LSN_C, SG_WAL_PREFIX, content, sizeof(content));
    cr_assert_eq(w.n, 1 + 1 + 8 + sizeof(SG_WAL_PREFIX) + 4 + sizeof(content));
    p = exact(&w, w.n);
    cr_assert_eq(sg_pgo_parse(p, w.n, &m), 0);
    cr_expect_eq(m.type, 'M');
    cr_expect(m.transactional);
    expect_u64(m.lsn, LSN_C);
    cr_expect_eq((const unsigned char *)m.prefix, p + 10, "the prefix points into the input");
    cr_expect_str_eq(m.prefix, SG_WAL_PREFIX);
    cr_expect_eq(m.content, p + 10 + sizeof(SG_WAL_PREFIX) + 4);
    cr_expect_eq(m.content_len, sizeof(content));
    cr_expect_arr_eq(m.content, content, sizeof(content));
    free(p);

    /* not transactional (pg_logical_emit_message(false, ...)), an empty
     * prefix and no content */
    w.n = 0;
    message(&w, 0, LSN_A, "", "", 0);
    p = exact(&w, w.n);
    cr_assert_eq(sg_pgo_parse(p, w.n, &m), 0);
    cr_expect_not(m.transactional);
    expect_u64(m.lsn, LSN_A);
    cr_expect_str_eq(m.prefix, "");
    cr_expect_eq(m.content_len, 0);
    free(p);
}

Test(walmsg, every_cut_of_a_begin_commit_or_message_is_refused)
{
    wire_t w = {.n = 0};

    begin(&w, LSN_A, T2026, 7);
    expect_cuts_refused(pgo_parse, &w, w.n, "a Begin");
    w.n = 0;
    commit(&w, 0, LSN_A, LSN_B, T2026);
    expect_cuts_refused(pgo_parse, &w, w.n, "a Commit");
    w.n = 0;
    message(&w, 1, LSN_A, SG_WAL_PREFIX, "content", 7);
    expect_cuts_refused(pgo_parse, &w, w.n, "a Message");
}

Test(walmsg, a_message_without_its_prefix_end_or_with_content_past_its_end_is_refused)
{
    static const uint32_t lengths[] = {4, 0x7fffffff, 0x80000000, UINT32_MAX};
    wire_t w = {.n = 0};
    unsigned char *p;

    /* the prefix runs to the end, no NUL */
    put8(&w, 'M');
    put8(&w, 1);
    put64(&w, LSN_A);
    putstr(&w, SG_WAL_PREFIX "\x01\x02\x03\x04xyz");
    p = exact(&w, w.n);
    cr_expect_eq(pgo_parse(p, w.n), -1, "a prefix without its NUL");
    free(p);

    /* 3 bytes of content, a length that says more */
    for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
        w.n = 0;
        put8(&w, 'M');
        put8(&w, 1);
        put64(&w, LSN_A);
        putstr(&w, SG_WAL_PREFIX);
        put8(&w, 0);
        put32(&w, lengths[i]);
        putstr(&w, "abc");
        p = exact(&w, w.n);
        cr_expect_eq(pgo_parse(p, w.n), -1, "content length %u over 3 bytes", lengths[i]);
        free(p);
    }
}

Test(walmsg, other_pgoutput_types_are_named_not_decoded)
{
    /* Relation, Insert, Update, Delete, Truncate, Type, Origin, and
     * streaming's Stream Start and Stop: none is decoded, each is named */
    static const char types[] = {'R', 'I', 'U', 'D', 'T', 'Y', 'O', 'S', 'E', 'x'};

    for (size_t i = 0; i < sizeof(types); i++) {
        for (size_t tail = 0; tail <= 5; tail += 5) {
            wire_t w = {.n = 0};
            sg_pgo_msg_t m;
            unsigned char *p;

            put8(&w, (uint8_t)types[i]);
            putn(&w, "\x00\x00\x40\x01N", tail);
            p = exact(&w, w.n);
            cr_expect_eq(sg_pgo_parse(p, w.n, &m), 0, "type %c, %zu bytes", types[i], w.n);
            cr_expect_eq(m.type, types[i]);
            expect_u64(m.lsn, 0);
            cr_expect_null(m.prefix);
            cr_expect_null(m.content);
            free(p);
        }
    }
    cr_expect_eq(pgo_parse(NULL, 0), -1, "no type at all");
}

Test(walmsg, a_frame_gives_its_id_topic_key_headers_and_payload)
{
    static const unsigned char key[] = {'s', '-', 0, 0xff, '7'};
    static const unsigned char payload[] = {'{', '}', 0, 0xc3, 0x28};
    const char *topic = "saga.events";
    wire_t w = {.n = 0};
    sg_outbox_frame_t f;
    unsigned char *p;
    size_t at;

    frame(&w, INT64_C(0x0123456789abcdef), topic, key, sizeof(key), HEADERS, payload,
          sizeof(payload));
    p = exact(&w, w.n);
    cr_assert_eq(sg_outbox_frame_parse(p, w.n, &f), 0);
    cr_expect_eq(f.id, INT64_C(0x0123456789abcdef));
    at = 4 + 8 + 4;
    cr_expect_eq((const unsigned char *)f.topic, p + at);
    cr_expect_eq(f.topic_len, strlen(topic));
    cr_expect_arr_eq(f.topic, topic, strlen(topic));
    at += strlen(topic) + 4;
    cr_expect(f.has_key);
    cr_expect_eq(f.key, p + at);
    cr_expect_eq(f.key_len, sizeof(key));
    cr_expect_arr_eq(f.key, key, sizeof(key));
    at += sizeof(key) + 4;
    cr_expect_eq((const unsigned char *)f.headers, p + at);
    cr_expect_eq(f.headers_len, strlen(HEADERS));
    cr_expect_arr_eq(f.headers, HEADERS, strlen(HEADERS));
    at += strlen(HEADERS);
    cr_expect_eq(f.payload, p + at);
    cr_expect_eq(f.payload_len, sizeof(payload));
    cr_expect_arr_eq(f.payload, payload, sizeof(payload));
    free(p);

    /* int8send of a negative id, and an empty payload */
    w.n = 0;
    frame(&w, -2, topic, key, sizeof(key), HEADERS, "", 0);
    p = exact(&w, w.n);
    cr_assert_eq(sg_outbox_frame_parse(p, w.n, &f), 0);
    cr_expect_eq(f.id, -2);
    cr_expect_eq(f.payload_len, 0);
    cr_expect_eq(f.headers_len, strlen(HEADERS));
    free(p);
}

Test(walmsg, a_null_key_is_not_an_empty_key)
{
    const char *topic = "t";
    const size_t key_at = 4 + 8 + 4 + 1 + 4;
    wire_t w = {.n = 0};
    sg_outbox_frame_t f;
    unsigned char *p;

    /* NULL: length -1 and no bytes */
    frame(&w, 1, topic, NULL, 0, HEADERS, "pay", 3);
    cr_assert_eq(w.b[key_at - 4], 0xff);
    p = exact(&w, w.n);
    cr_assert_eq(sg_outbox_frame_parse(p, w.n, &f), 0);
    cr_expect_not(f.has_key, "a NULL key must stay NULL, not become an empty one");
    cr_expect_eq(f.key_len, 0);
    cr_expect_eq((const unsigned char *)f.headers, p + key_at + 4,
                 "the headers follow the key's length at once");
    cr_expect_eq(f.headers_len, strlen(HEADERS));
    cr_expect_eq(f.payload_len, 3);
    cr_expect_arr_eq(f.payload, "pay", 3);
    free(p);

    /* '\x': length 0 */
    w.n = 0;
    frame(&w, 1, topic, "", 0, HEADERS, "pay", 3);
    p = exact(&w, w.n);
    cr_assert_eq(sg_outbox_frame_parse(p, w.n, &f), 0);
    cr_expect(f.has_key, "an empty key is a key");
    cr_expect_eq(f.key, p + key_at);
    cr_expect_eq(f.key_len, 0);
    cr_expect_eq((const unsigned char *)f.headers, p + key_at + 4);
    cr_expect_eq(f.headers_len, strlen(HEADERS));
    cr_expect_eq(f.payload_len, 3);
    cr_expect_arr_eq(f.payload, "pay", 3);
    free(p);
}

Test(walmsg, every_cut_of_a_frame_before_its_payload_is_refused)
{
    const char *topic = "saga.events";

    for (int with_key = 0; with_key <= 1; with_key++) {
        wire_t w = {.n = 0};
        size_t fixed;

        frame(&w, 5, topic, with_key ? "k-1" : NULL, 3, HEADERS, "{\"a\": 1}", 8);
        fixed = w.n - 8;
        expect_cuts_refused(frame_parse, &w, fixed, with_key ? "a frame with a key" : "a frame");
        /* the payload runs to the end: a shorter one is all the frame says */
        for (size_t n = fixed; n <= w.n; n++) {
            unsigned char *p = exact(&w, n);
            sg_outbox_frame_t f;

            cr_assert_eq(sg_outbox_frame_parse(p, n, &f), 0, "%zu bytes", n);
            cr_expect_eq(f.payload_len, n - fixed);
            cr_expect_eq(f.has_key, with_key == 1);
            free(p);
        }
    }
}

Test(walmsg, a_frame_with_an_empty_topic_or_a_nul_in_it_is_refused)
{
    wire_t w = {.n = 0};
    unsigned char *p;

    frame(&w, 1, "", "k", 1, HEADERS, "p", 1);
    p = exact(&w, w.n);
    cr_expect_eq(frame_parse(p, w.n), -1, "an empty topic");
    free(p);

    /* "sag\0a": 5 bytes, a NUL inside */
    w.n = 0;
    putstr(&w, "SGO1");
    put64(&w, 1);
    put32(&w, 5);
    putn(&w, "sag\0a", 5);
    put32(&w, UINT32_MAX);
    put32(&w, 2);
    putstr(&w, "{}");
    p = exact(&w, w.n);
    cr_expect_eq(frame_parse(p, w.n), -1, "a NUL inside the topic");
    free(p);

    /* the same frame with the NUL at the topic's end */
    w.b[4 + 8 + 4 + 3] = 'a';
    w.b[4 + 8 + 4 + 4] = '\0';
    p = exact(&w, w.n);
    cr_expect_eq(frame_parse(p, w.n), -1, "a NUL ending the topic");
    free(p);
    w.b[4 + 8 + 4 + 4] = 'a';
    p = exact(&w, w.n);
    cr_expect_eq(frame_parse(p, w.n), 0, "the frame without its NUL");
    free(p);
}

Test(walmsg, a_frame_of_another_magic_or_with_a_length_past_its_end_is_refused)
{
    static const char *magic[] = {"SGO2", "sgo1", "SGO0", "\0GO1"};
    static const uint32_t over[] = {100, 0x7fffffff, 0x80000000, UINT32_MAX - 1};
    const size_t topic_at = 4 + 8, key_at = topic_at + 4 + 1, headers_at = key_at + 4 + 1;
    wire_t good = {.n = 0}, w;
    unsigned char *p;

    frame(&good, 1, "t", "k", 1, "{}", "payload", 7);
    cr_assert_eq(good.n, headers_at + 4 + 2 + 7);
    p = exact(&good, good.n);
    cr_assert_eq(frame_parse(p, good.n), 0);
    free(p);

    for (size_t i = 0; i < sizeof(magic) / sizeof(magic[0]); i++) {
        w = good;
        memcpy(w.b, magic[i], 4);
        p = exact(&w, w.n);
        cr_expect_eq(frame_parse(p, w.n), -1, "magic %zu", i);
        free(p);
    }
    /* each length in turn says more than what is left (for the key, any
     * negative length but -1 is one) */
    for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
        const size_t at[] = {topic_at, key_at, headers_at};

        for (size_t j = 0; j < 3; j++) {
            w = good;
            w.n = at[j];
            put32(&w, over[i]);
            w.n = good.n;
            p = exact(&w, w.n);
            cr_expect_eq(frame_parse(p, w.n), -1, "length 0x%08x at byte %zu", over[i], at[j]);
            free(p);
        }
    }
}

Test(walmsg, the_relay_reads_a_frame_inside_a_message_inside_xlogdata)
{
    wire_t fr = {.n = 0}, msg = {.n = 0}, w = {.n = 0};
    sg_wal_copy_t c;
    sg_pgo_msg_t m;
    sg_outbox_frame_t f;
    unsigned char *p;

    frame(&fr, 9000000001, "orders.events", "order-1", 7, HEADERS, "{\"total\": 12}", 13);
    message(&msg, 1, UINT64_C(0x16B3748), SG_WAL_PREFIX, fr.b, fr.n);
    xlogdata(&w, UINT64_C(0x16B3748), UINT64_C(0x16B3800), T2026, &msg);
    p = exact(&w, w.n);
    cr_assert_eq(sg_wal_copy_parse(p, w.n, &c), 0);
    cr_assert_eq(c.kind, 'w');
    cr_assert_eq(sg_pgo_parse(c.data, c.len, &m), 0);
    cr_assert_eq(m.type, 'M');
    cr_expect(m.transactional);
    cr_expect_str_eq(m.prefix, SG_WAL_PREFIX);
    cr_assert_eq(m.content_len, fr.n);
    cr_assert_eq(sg_outbox_frame_parse(m.content, m.content_len, &f), 0);
    cr_expect_eq(f.id, 9000000001);
    cr_expect_eq(f.topic_len, 13);
    cr_expect_arr_eq(f.topic, "orders.events", 13);
    cr_expect(f.has_key);
    cr_expect_arr_eq(f.key, "order-1", 7);
    cr_expect_arr_eq(f.headers, HEADERS, strlen(HEADERS));
    cr_expect_eq(f.payload_len, 13);
    cr_expect_arr_eq(f.payload, "{\"total\": 12}", 13);
    cr_expect_eq(f.payload + f.payload_len, p + w.n, "the payload ends where the message does");
    free(p);
}

Test(walmsg, the_status_update_is_r_three_times_the_lsn_the_clock_and_the_reply_flag)
{
    static const unsigned char want[SG_WAL_STATUS_LEN] = {
        'r',  0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* written */
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,       /* flushed */
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,       /* applied */
        0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38,       /* the clock */
        0x00,                                                 /* no reply asked */
    };
    unsigned char out[SG_WAL_STATUS_LEN + 6];

    cr_assert_eq(SG_WAL_STATUS_LEN, 34);
    memset(out, 0xa5, sizeof(out));
    sg_wal_status_encode(out, LSN_A, TIME_A, false);
    cr_expect_arr_eq(out, want, SG_WAL_STATUS_LEN);
    for (size_t i = SG_WAL_STATUS_LEN; i < sizeof(out); i++)
        cr_expect_eq(out[i], 0xa5, "byte %zu written past the message", i);

    sg_wal_status_encode(out, LSN_A, TIME_A, true);
    cr_expect_arr_eq(out, want, SG_WAL_STATUS_LEN - 1);
    cr_expect_eq(out[33], 1, "reply asked");

    /* a clock before 2000 is negative, sent as its two's complement */
    sg_wal_status_encode(out, 0, -1, false);
    for (size_t i = 1; i < 25; i++)
        cr_expect_eq(out[i], 0, "byte %zu", i);
    for (size_t i = 25; i < 33; i++)
        cr_expect_eq(out[i], 0xff, "byte %zu", i);
}

Test(walmsg, an_lsn_is_written_as_postgresql_writes_it)
{
    static const struct {
        uint64_t lsn;
        const char *text;
    } cases[] = {
        {UINT64_C(0x16B3748), "0/16B3748"},
        {UINT64_C(0x100000000) + 5, "1/5"},
        {0, "0/0"},
        {UINT64_C(0xABCDEF0012345678), "ABCDEF00/12345678"},
        {UINT64_MAX, "FFFFFFFF/FFFFFFFF"},
    };
    char buf[24];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(buf, 'x', sizeof(buf));
        cr_expect_eq(sg_lsn_text(buf, cases[i].lsn), buf);
        cr_expect_str_eq(buf, cases[i].text);
    }
}
