/* The WAL source's wire formats, decoded without trusting their lengths
 * (docs/RELAY.md, "The WAL source"):
 *
 *  - a replication CopyData message: 'w' XLogData (a pgoutput message
 *    inside) or 'k' primary keepalive;
 *  - a pgoutput message of protocol version 1: Begin, Commit and the
 *    logical decoding Message (the others are named by their type only);
 *  - the outbox frame inside a Message of prefix SG_WAL_PREFIX, written by
 *    sagad_outbox_frame() (schemas/sql/0026_wal_outbox.sql).
 *
 * Pure: no allocation; every pointer returned points into the input. */
#ifndef SAGAD_SG_WALMSG_H
#define SAGAD_SG_WALMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_WAL_PREFIX           "sagad.outbox"
#define SG_WAL_HEARTBEAT_PREFIX "sagad.heartbeat" /* the relay's own clock (0026) */

typedef struct sg_wal_copy_s {
    char kind;                 /* 'w' or 'k' */
    uint64_t start;            /* 'w': WAL start of the data */
    uint64_t end;              /* the server's WAL end */
    int64_t sent_us;           /* the server's clock, microseconds since 2000-01-01 */
    bool reply;                /* 'k': the server asks for a status update now */
    const unsigned char *data; /* 'w': the pgoutput message */
    size_t len;
} sg_wal_copy_t;

/* Returns 0, or -1 when buf is not a complete 'w' or 'k' message. */
int sg_wal_copy_parse(const unsigned char *buf, size_t len, sg_wal_copy_t *out);

typedef struct sg_pgo_msg_s {
    char type;                    /* 'B', 'C', 'M', or another pgoutput type (not decoded) */
    uint64_t lsn;                 /* B: the commit's LSN; C: the commit's LSN; M: the message's */
    uint64_t end_lsn;             /* C: the end of the commit record (what is confirmed) */
    int64_t time_us;              /* B, C: commit time, microseconds since 2000-01-01 */
    uint32_t xid;                 /* B */
    bool transactional;           /* M */
    const char *prefix;           /* M: NUL-terminated inside the input */
    const unsigned char *content; /* M */
    size_t content_len;
} sg_pgo_msg_t;

/* Returns 0, or -1 when a B, C or M message is cut short or malformed
 * (an M whose prefix has no terminator, a content length past the end). */
int sg_pgo_parse(const unsigned char *buf, size_t len, sg_pgo_msg_t *out);

typedef struct sg_outbox_frame_s {
    int64_t id; /* the outbox id the row would have had */
    const char *topic;
    size_t topic_len;
    bool has_key;
    const unsigned char *key;
    size_t key_len;
    const char *headers; /* JSON text of an object, not NUL-terminated */
    size_t headers_len;
    const unsigned char *payload;
    size_t payload_len;
} sg_outbox_frame_t;

/* Returns 0, or -1 when buf is not an 'SGO1' frame whose lengths fit it.
 * The topic is checked to be non-empty and free of NUL bytes. */
int sg_outbox_frame_parse(const unsigned char *buf, size_t len, sg_outbox_frame_t *out);

/* The 34-byte standby status update ('r') confirming write, flush and
 * apply at lsn, stamped now_us (microseconds since 2000-01-01). */
#define SG_WAL_STATUS_LEN 34
void sg_wal_status_encode(unsigned char out[SG_WAL_STATUS_LEN], uint64_t lsn, int64_t now_us,
                          bool reply);

/* "X/Y", PostgreSQL's text form of an LSN; buf of at least 24 bytes. */
const char *sg_lsn_text(char buf[24], uint64_t lsn);

#endif
