/* The WAL source's batch: the messages read from the stream and handed to
 * Kafka, each kept (copied into one arena) until Kafka answered for it,
 * and what becomes of those Kafka refused for good: outbox_quarantine.
 * The stream, the slot and when a batch ends are outbox_wal.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_run.h"

void outbox_wal_batch_init(outbox_wal_batch_t *b, size_t max, bool tracing)
{
    memset(b, 0, sizeof(*b));
    b->max = max;
    b->slots = sg_xcalloc(max, sizeof(*b->slots));
    b->msgs = sg_xcalloc(max, sizeof(*b->msgs));
    if (tracing)
        b->hints = sg_xcalloc(max, sizeof(*b->hints));
    b->kafka.slots = b->slots;
    b->kafka.nslots = max;
}

void outbox_wal_batch_free(outbox_wal_batch_t *b)
{
    sg_pg_buf_free(&b->arena);
    free(b->slots);
    free(b->msgs);
    free(b->hints);
    memset(b, 0, sizeof(*b));
}

void outbox_wal_batch_reset(outbox_wal_batch_t *b, sg_kafka_t *producer)
{
    while (b->kafka.pending > 0 && producer && !sg_run_stop_now)
        (void)sg_kafka_flush(producer, 50, NULL);
    /* Only the slots this batch used: a slot holds an sg_err_t (about
     * 600 bytes), and zeroing all relay.wal_batch_size of them (6 MB) for
     * every batch, however small, was half of the relay's CPU. */
    size_t used = b->kafka.next < b->kafka.nslots ? b->kafka.next : b->kafka.nslots;

    memset(&b->kafka, 0, sizeof(b->kafka));
    memset(b->slots, 0, used * sizeof(*b->slots));
    b->kafka.slots = b->slots;
    b->kafka.nslots = b->max;
    b->n = 0;
    sg_pg_buf_reset(&b->arena);
}

size_t outbox_wal_batch_add(outbox_wal_batch_t *b, const sg_outbox_frame_t *f, int64_t commit_us,
                            uint64_t commit_lsn, uint64_t lsn)
{
    outbox_wal_msg_t *m = &b->msgs[b->n];

    if (b->n == 0)
        b->at_ns = sg_run_wall_ns();
    m->id = f->id;
    m->off = b->arena.len;
    m->topic_len = f->topic_len;
    m->has_key = f->has_key;
    m->key_len = f->key_len;
    m->headers_len = f->headers_len;
    m->payload_len = f->payload_len;
    m->quarantined = false;
    m->commit_us = commit_us;
    m->commit_lsn = commit_lsn;
    m->lsn = lsn;
    sg_pg_buf_put(&b->arena, f->topic, f->topic_len);
    sg_pg_buf_putc(&b->arena, '\0');
    if (f->has_key)
        sg_pg_buf_put(&b->arena, (const char *)f->key, f->key_len);
    sg_pg_buf_put(&b->arena, f->headers, f->headers_len);
    sg_pg_buf_put(&b->arena, (const char *)f->payload, f->payload_len);
    return b->n++;
}

void outbox_wal_batch_frame(const outbox_wal_batch_t *b, size_t i, sg_outbox_frame_t *f)
{
    const outbox_wal_msg_t *m = &b->msgs[i];
    const char *p = b->arena.data + m->off;

    f->id = m->id;
    f->topic = p;
    f->topic_len = m->topic_len;
    p += m->topic_len + 1;
    f->has_key = m->has_key;
    f->key = m->has_key ? (const unsigned char *)p : NULL;
    f->key_len = m->key_len;
    p += m->key_len;
    f->headers = p;
    f->headers_len = m->headers_len;
    p += m->headers_len;
    f->payload = (const unsigned char *)p;
    f->payload_len = m->payload_len;
}

/* Hands message i to Kafka into one (the batch's own, or one of a
 * single slot). */
static int produce_into(const outbox_wal_batch_t *b, size_t i, sg_kafka_t *producer,
                        const outbox_signer_t *s, outbox_trace_hint_t *hint, sg_kafka_batch_t *into,
                        sg_err_t *err)
{
    sg_outbox_frame_t f;

    outbox_wal_batch_frame(b, i, &f);
    return outbox_produce(producer, s, f.topic, f.key, f.key_len, f.headers, f.headers_len,
                          f.payload, f.payload_len, hint, into, err);
}

int outbox_wal_batch_produce(outbox_wal_batch_t *b, size_t i, sg_kafka_t *producer,
                             const outbox_signer_t *s, sg_err_t *err)
{
    return produce_into(b, i, producer, s, b->hints ? &b->hints[i] : NULL, &b->kafka, err);
}

/* Lower-case hex of n bytes, NUL-terminated (for decode(..., 'hex')). */
static char *hex_of(const unsigned char *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char *out = sg_xmalloc(2 * n + 1);

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
    return out;
}

int outbox_wal_batch_quarantine(outbox_wal_batch_t *b, size_t i, sg_pg_t *pg, const sg_err_t *why,
                                sg_err_t *err)
{
    sg_outbox_frame_t f;
    char id[24], *key = NULL, *payload, *headers;
    const char *p[7];
    int rc;

    outbox_wal_batch_frame(b, i, &f);
    /* bytea as hex text: libpq's text parameters carry no length */
    if (f.has_key)
        key = hex_of(f.key, f.key_len);
    headers = sg_xstrndup(f.headers, f.headers_len);
    payload = hex_of(f.payload, f.payload_len);
    p[0] = sg_pg_int_text(id, f.id);
    p[1] = f.topic;
    p[2] = key;
    p[3] = headers;
    p[4] = payload;
    p[5] = why->code;
    p[6] = why->message;
    rc = sg_pg_exec_cached(
        pg,
        "INSERT INTO outbox_quarantine (outbox_id, tx, shard, topic, key, headers, payload, "
        "created_at, error_code, error, holder) VALUES ($1::bigint, '0', 0, $2, "
        "decode($3, 'hex'), $4::jsonb, decode($5, 'hex'), now(), $6, $7, 'wal') "
        "ON CONFLICT (outbox_id) DO NOTHING",
        7, p, NULL, err);
    if (rc == 0) {
        sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

        b->msgs[i].quarantined = true;
        ctx.error_code = why->code;
        sg_log(SG_LOG_ERROR, &ctx,
               "message %s (topic %s) refused by Kafka for good, moved to outbox_quarantine; "
               "the stream goes on without it: %s",
               id, f.topic, why->message);
        sg_metric_inc(SG_M_OUTBOX_QUARANTINED, SG_LABELS(why->code));
    }
    free(key);
    free(headers);
    free(payload);
    return rc;
}

/* A message refused by delivery report in a batch of several may have
 * been refused with its neighbours (the broker refuses a request whole):
 * it is sent again alone, and quarantined only if refused alone. */
static int resend_alone(outbox_wal_batch_t *b, size_t i, sg_kafka_t *producer,
                        const outbox_signer_t *s, sg_pg_t *pg, sg_err_t *err)
{
    sg_kafka_slot_t slot;
    sg_kafka_batch_t one;

    memset(&slot, 0, sizeof(slot));
    memset(&one, 0, sizeof(one));
    one.slots = &slot;
    one.nslots = 1;
    if (produce_into(b, i, producer, s, NULL, &one, err) < 0 && !sg_kafka_err_refused(err))
        return -1;
    while (one.pending > 0 && !sg_run_stop_now)
        (void)sg_kafka_flush(producer, 50, NULL);
    if (!slot.failed)
        return 0;
    if (!sg_kafka_err_refused(&slot.err)) {
        *err = slot.err;
        return -1;
    }
    return outbox_wal_batch_quarantine(b, i, pg, &slot.err, err);
}

int outbox_wal_batch_set_aside(outbox_wal_batch_t *b, sg_kafka_t *producer,
                               const outbox_signer_t *s, sg_pg_t *pg, sg_err_t *err)
{
    for (size_t i = 0; i < b->n; i++) {
        const sg_kafka_slot_t *slot = &b->slots[i];

        if (!slot->failed)
            continue;
        if (!sg_kafka_err_refused(&slot->err)) {
            *err = slot->err;
            sg_err_prefix(err, "%d of %zu messages not acknowledged; reading again from %s",
                          b->kafka.failed, b->n, "the confirmed position");
            return -1;
        }
        if (slot->reported && b->n > 1 ? resend_alone(b, i, producer, s, pg, err) < 0
                                       : outbox_wal_batch_quarantine(b, i, pg, &slot->err, err) < 0)
            return -1;
    }
    return 0;
}

void outbox_wal_batch_trace(const outbox_wal_batch_t *b, sg_otel_t *otel, int64_t end_ns)
{
    outbox_trace_row_t *rows = sg_xcalloc(b->n, sizeof(*rows));
    char(*ids)[32] = sg_xcalloc(b->n, sizeof(*ids));
    size_t k = 0;

    for (size_t i = 0; i < b->n; i++) {
        sg_outbox_frame_t f;

        if (b->msgs[i].quarantined)
            continue;
        outbox_wal_batch_frame(b, i, &f);
        rows[k].topic = f.topic;
        rows[k].key = f.key;
        rows[k].key_len = f.key_len;
        rows[k].hint = &b->hints[i];
        snprintf(ids[k], sizeof(ids[k]), "wal|%lld", (long long)f.id);
        rows[k].id = ids[k];
        k++;
    }
    outbox_trace_batch(otel, rows, k, b->at_ns, end_ns);
    free(ids);
    free(rows);
}
