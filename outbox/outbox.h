/* sagad-relay internals: the relay loop and the status report. */
#ifndef SAGAD_OUTBOX_H
#define SAGAD_OUTBOX_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "sagad/sg_cli.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_otel.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_trust.h"
#include "sagad/sg_walmsg.h"

/* The schema the relay needs: 0021 has the functions its shard and janitor
 * locks are taken through (sagad_relay_try_lock, sagad_janitor_try_lock;
 * their keys are the database's own, schemas/sql/0021_least_privilege.sql),
 * 0022 the quarantine of rows the broker refuses, 0023 the internal keys it
 * signs with (schemas/sql/0023_trust.sql). */
#define OUTBOX_SCHEMA_VERSION 23
/* The WAL source needs 0026: the outbox's trigger that writes a row into
 * the WAL, the switch sagad_outbox_to_wal() and the publication
 * (schemas/sql/0026_wal_outbox.sql). */
#define OUTBOX_WAL_SCHEMA_VERSION 26

/* security.internal_auth: off, or every message published carries a
 * sagad-mac header made with the newest live internal key, re-read every
 * security.key_reload_ms (keys_at: when next). */
typedef struct outbox_signer_s {
    sg_trust_mode_t trust;
    sg_mac_keys_t keys;
    uint64_t reload_ms, keys_at;
} outbox_signer_t;

void outbox_signer_init(outbox_signer_t *s, const sg_config_t *cfg);
/* Loads the keys now; a relay that may not sign is refused (permanent). */
int outbox_signer_load(outbox_signer_t *s, sg_pg_t *pg, sg_err_t *err);
/* Loads them again when security.key_reload_ms has passed. */
int outbox_signer_refresh(outbox_signer_t *s, sg_pg_t *pg, sg_err_t *err);

/* What a message's headers say for its publish span, kept by
 * outbox_produce() so that the span needs no second parse of them. */
typedef struct outbox_trace_hint_s {
    char traceparent[64]; /* "": none, or too long to be one */
    char type[96];        /* sagad-type, cut to fit; "": none */
} outbox_trace_hint_t;

/* Hands one message to Kafka (into batch), its headers taken from the
 * JSON object headers (headers_len bytes, may be NULL) and signed as s
 * says; fills hint, unless NULL, from the same headers.  Returns
 * sg_kafka_produce()'s answer. */
int outbox_produce(sg_kafka_t *producer, const outbox_signer_t *s, const char *topic,
                   const unsigned char *key, size_t key_len, const char *headers,
                   size_t headers_len, const unsigned char *payload, size_t len,
                   outbox_trace_hint_t *hint, sg_kafka_batch_t *batch, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Moves due timers into the outbox (one statement, SKIP LOCKED, never
 * early); *next_ms: until the next one is due, at most cap.  Returns how
 * many moved, -1 on error. */
int outbox_fire_timers(sg_pg_t *pg, int64_t timer_batch, uint64_t cap, uint64_t *next_ms,
                       sg_err_t *err) __attribute__((warn_unused_result));

/* Sleeps up to ms, waking early when a stop is requested. */
void outbox_nap(uint64_t ms);

/* What `sagad-relay run` made before it chose a source, for the WAL one. */
typedef struct outbox_ctx_s {
    sg_cli_t *cli;
    sg_kafka_t *producer;
    sg_otel_t *otel; /* NULL: tracing off */
    const char *holder;
} outbox_ctx_t;

/* A published row, for its publish span (outbox_trace.c). */
typedef struct outbox_trace_row_s {
    const char *topic;
    const unsigned char *key; /* NULL: no key */
    size_t key_len;
    const outbox_trace_hint_t *hint; /* what outbox_produce() read in its headers */
    const char *id;                  /* names the row, unique in its source: its span's id */
} outbox_trace_row_t;

/* With tracing on (otel not NULL), one producer span per sampled saga
 * over its rows of rows[0..n), a batch read at start and acknowledged at
 * end (wall-clock ns), handed to the exporter. */
void outbox_trace_batch(sg_otel_t *otel, const outbox_trace_row_t *rows, size_t n, int64_t start,
                        int64_t end);

/* relay.exactly_once (outbox_eos.c): the WAL source's batches in Kafka
 * transactions with a checkpoint of their position. */
typedef struct outbox_eos_s {
    const sg_config_t *cfg;
    const char *slot, *topic, *holder;
    char history[160]; /* "<system identifier>/<timeline>/<database>" (sg_pgrepl_identify) */
    char key[256];     /* the checkpoints' key: "<system identifier>/<database>/<slot>" */
    char txn_id[320];
    int64_t txn_timeout_ms, msg_timeout_ms;
    sg_kafka_t *producer; /* transactional: made when the slot is taken, NULL before */
    bool open;            /* a transaction is open */
    /* The checkpoint: every message up to it (by commit LSN, then the
     * message's LSN) is in Kafka, committed. */
    uint64_t ck_commit, ck_msg;
    uint64_t next_commit, next_msg; /* the checkpoint in the open transaction */
    sg_kafka_batch_t ck_batch;      /* its delivery */
    sg_kafka_slot_t ck_slot;
    /* Skipped since the last message taken: the count for its log line
     * (sagad_relay_skipped_total counts them all). */
    int64_t skipped;
    /* A refusal the broker reported aborted a batch's transaction: the
     * stream is read again, and the refused message (by its commit LSN
     * and its own LSN) goes in a batch of its own, so that only it is
     * quarantined.  Kept across a take of the slot. */
    bool refused_known;
    uint64_t refused_commit, refused_msg;
} outbox_eos_t;

/* What the WAL source does with a message of the stream (outbox_eos_admit). */
typedef enum {
    OUTBOX_EOS_SKIP,       /* at or before the checkpoint: already in Kafka */
    OUTBOX_EOS_TAKE,       /* into the batch */
    OUTBOX_EOS_TAKE_ALONE, /* the refused message: into the batch, which it ends */
    OUTBOX_EOS_NEXT_BATCH  /* the refused message: the batch ends before it */
} outbox_eos_admit_t;

/* How a batch's transaction ends (outbox_eos_verdict). */
typedef enum {
    OUTBOX_EOS_COMMIT,     /* the failed messages (refused) are quarantined, then it commits */
    OUTBOX_EOS_READ_AGAIN, /* aborted: refused within a batch of several (refused_* set) */
    OUTBOX_EOS_FAILED      /* aborted, err says why */
} outbox_eos_verdict_t;

void outbox_eos_init(outbox_eos_t *e, const sg_config_t *cfg, const char *slot, const char *holder);
/* When the slot is taken, on the WAL history the replication session
 * reads (e->history, which sg_pgrepl_identify() wrote): a new
 * transactional producer, initialised (it fences every earlier holder),
 * and the slot's checkpoint read back, each step within timeout_ms. */
int outbox_eos_take(outbox_eos_t *e, int timeout_ms, sg_err_t *err)
    __attribute__((warn_unused_result));
/* The message at msg_lsn, of the transaction that commits at commit_lsn,
 * with in_batch messages in the batch already: skipped when the
 * checkpoint covers it (counted), held for a batch of its own when it is
 * the one the broker refused. */
outbox_eos_admit_t outbox_eos_admit(outbox_eos_t *e, uint64_t commit_lsn, uint64_t msg_lsn,
                                    size_t in_batch);
/* After the batch of n messages (their delivery reports in slots) and
 * the checkpoint (ck_sent: it went into the transaction) settled or
 * failed: aborts the transaction unless it may commit.  first_refused:
 * the index of the first message the broker refused, for the caller to
 * name in refused_*. */
outbox_eos_verdict_t outbox_eos_verdict(outbox_eos_t *e, const sg_kafka_batch_t *batch,
                                        const sg_kafka_slot_t *slots, size_t n, bool ck_sent,
                                        const sg_err_t *ck_err, size_t *first_refused,
                                        sg_err_t *err);
/* The batch's end, once its refused messages are quarantined: the
 * commit.  When a refusal aborted the transaction (a message refused
 * alone), the checkpoint (the last message's position) goes in one of
 * its own. */
int outbox_eos_finish(outbox_eos_t *e, uint64_t commit_lsn, uint64_t msg_lsn, sg_err_t *err)
    __attribute__((warn_unused_result));
/* Opens the batch's transaction unless one is open. */
int outbox_eos_begin(outbox_eos_t *e, sg_err_t *err) __attribute__((warn_unused_result));
/* The checkpoint (the batch's last message) into the transaction, sent
 * beside the batch's messages rather than after their acks: one round
 * trip less per batch.  Its delivery is tracked in ck_batch. */
int outbox_eos_checkpoint(outbox_eos_t *e, uint64_t commit_lsn, uint64_t msg_lsn, sg_err_t *err)
    __attribute__((warn_unused_result));
/* Commits the transaction; the checkpoint in it becomes the relay's.  On
 * failure, aborted. */
int outbox_eos_commit(outbox_eos_t *e, sg_err_t *err) __attribute__((warn_unused_result));
/* Aborts the open transaction (what librdkafka still held of it fails at
 * once); a producer that cannot abort is dropped. */
void outbox_eos_abort(outbox_eos_t *e);
/* Drops the producer (its open transaction is aborted by the next take). */
void outbox_eos_drop(outbox_eos_t *e);

/* The WAL source's batch (outbox_wal_batch.c): the messages read from
 * the stream, each copied into one arena and kept until Kafka answered
 * for it. */
typedef struct outbox_wal_msg_s {
    int64_t id;
    size_t off; /* into the arena: topic NUL, key, headers, payload */
    size_t topic_len, key_len, headers_len, payload_len;
    bool has_key;
    bool quarantined;         /* refused for good: in outbox_quarantine, never published */
    int64_t commit_us;        /* the transaction's commit time, for the latency */
    uint64_t commit_lsn, lsn; /* its transaction's commit and its own position: its name */
} outbox_wal_msg_t;

typedef struct outbox_wal_batch_s {
    sg_kafka_batch_t kafka; /* the delivery reports write here */
    sg_kafka_slot_t *slots; /* one a message, by its index */
    outbox_wal_msg_t *msgs;
    outbox_trace_hint_t *hints; /* one a message with tracing on, else NULL */
    size_t n, max;
    sg_pg_buf_t arena;
    int64_t at_ns; /* wall-clock ns its first message was added */
} outbox_wal_batch_t;

/* Room for max messages; hints only with tracing on. */
void outbox_wal_batch_init(outbox_wal_batch_t *b, size_t max, bool tracing);
void outbox_wal_batch_free(outbox_wal_batch_t *b);
/* Waits for Kafka's answer on whatever the batch still has in flight
 * (none when producer is NULL: it was dropped), then empties it. */
void outbox_wal_batch_reset(outbox_wal_batch_t *b, sg_kafka_t *producer);
/* Copies the frame into the batch (there must be room); returns its index. */
size_t outbox_wal_batch_add(outbox_wal_batch_t *b, const sg_outbox_frame_t *f, int64_t commit_us,
                            uint64_t commit_lsn, uint64_t lsn);
/* Message i as a frame whose pointers are into the arena (good until the
 * next add or reset); its topic is NUL-terminated. */
void outbox_wal_batch_frame(const outbox_wal_batch_t *b, size_t i, sg_outbox_frame_t *f);
/* Hands message i to Kafka, its delivery report into slot i. */
int outbox_wal_batch_produce(outbox_wal_batch_t *b, size_t i, sg_kafka_t *producer,
                             const outbox_signer_t *s, sg_err_t *err)
    __attribute__((warn_unused_result));
/* Copies message i, refused by Kafka for good (why), into
 * outbox_quarantine (outbox_id: its outbox id), as the table relay does,
 * and marks it quarantined. */
int outbox_wal_batch_quarantine(outbox_wal_batch_t *b, size_t i, sg_pg_t *pg, const sg_err_t *why,
                                sg_err_t *err) __attribute__((warn_unused_result));
/* Once nothing is in flight: each message Kafka refused for good is
 * quarantined, after a resend alone when it was refused by delivery
 * report in a batch of several (the broker refuses a request whole).
 * Returns -1 with err when a message failed in a way a retry may fix. */
int outbox_wal_batch_set_aside(outbox_wal_batch_t *b, sg_kafka_t *producer,
                               const outbox_signer_t *s, sg_pg_t *pg, sg_err_t *err)
    __attribute__((warn_unused_result));
/* With tracing on: the batch's publish spans (outbox_trace_batch), from
 * its first message's read to end_ns; none for a quarantined message. */
void outbox_wal_batch_trace(const outbox_wal_batch_t *b, sg_otel_t *otel, int64_t end_ns);

/* The WAL source's loop (outbox_wal.c): until a stop is requested.
 * Returns an exit code. */
int outbox_wal_run(const outbox_ctx_t *ctx);

typedef struct outbox_janitor_s outbox_janitor_t;

/* Starts the janitor thread (NULL when retention.janitor is off or the
 * thread cannot start, logged).  It runs while sg_run_running is set;
 * cfg must outlive it. */
outbox_janitor_t *outbox_janitor_start(const sg_config_t *cfg);
/* Waits for the thread to end (clear sg_run_running first); NULL: no-op. */
void outbox_janitor_stop(outbox_janitor_t *j);

/* `sagad-relay run`: publish until SIGTERM.  Returns an exit code. */
int outbox_cmd_run(sg_cli_t *cli, int argc, char **argv);

/* `sagad-relay status`: backlog, cursor and holder of every shard. */
int outbox_cmd_status(sg_cli_t *cli, int argc, char **argv);

#endif
