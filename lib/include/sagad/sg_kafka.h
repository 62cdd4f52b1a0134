/* sg_kafka: the only door to librdkafka.
 *
 * Builds producers and consumers from the config table (every kafka.* key
 * passes through to librdkafka), routes librdkafka's logs into sg_log, and
 * classifies every Kafka error in one place: retriable (try again),
 * abortable (abort the transaction, then try again), fatal (the handle is
 * dead: drain and restart) or permanent (will not succeed as asked). */
#ifndef SAGAD_KAFKA_H
#define SAGAD_KAFKA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_config.h"
#include "sagad/sg_err.h"

typedef struct sg_kafka_s sg_kafka_t;
typedef struct rd_kafka_message_s sg_kafka_msg_t; /* read with sg_kafka_msg_* */

typedef enum sg_kafka_role_e {
    SG_KAFKA_PRODUCER,
    SG_KAFKA_CONSUMER,
} sg_kafka_role_t;

typedef enum sg_kafka_errkind_e {
    SG_KAFKA_ERR_RETRIABLE,
    SG_KAFKA_ERR_ABORTABLE,
    SG_KAFKA_ERR_FATAL,
    SG_KAFKA_ERR_PERMANENT,
} sg_kafka_errkind_t;

typedef struct sg_kafka_header_s {
    const char *name;
    const void *value;
    size_t len;
} sg_kafka_header_t;

/* The outcome of one message of a batch that keeps them (slots). */
typedef struct sg_kafka_slot_s {
    struct sg_kafka_batch_s *batch;
    bool failed;   /* err says why */
    bool reported; /* failed by its delivery report, not refused at once */
    sg_err_t err;
} sg_kafka_slot_t;

/* Delivery tracking for a batch: sg_kafka_produce() counts a message in,
 * its delivery report counts it out.  The batch is safe to acknowledge
 * when pending == 0 and failed == 0.
 *
 * A caller that must know which message failed sets slots (nslots of
 * them, its own; zeroed with the rest): the n-th sg_kafka_produce() of
 * the batch reports into slots[n], whether refused at once or by its
 * delivery report, except a call refused for a full queue
 * (kafka.queue_full), which takes no slot: the same message is offered
 * again.  Calls past nslots report into the batch's counts only. */
typedef struct sg_kafka_batch_s {
    int pending;
    int delivered;
    int failed;
    sg_err_t first_err;
    sg_kafka_slot_t *slots;
    size_t nslots, next;
    sg_kafka_slot_t self; /* the slot of a message past nslots */
} sg_kafka_batch_t;

/* Partition assignment change seen by the rebalance callback, before it
 * takes effect.  For an assigned partition, a return value >= 0 is the
 * offset to start fetching at (the offset kept outside Kafka); a negative
 * value keeps the committed offset.  Ignored for a revoked partition: the
 * hook returns once the partition's work is drained or abandoned. */
typedef int64_t (*sg_kafka_rebalance_fn)(void *opaque, bool assigned, const char *topic,
                                         int32_t partition);

/* The kind of a Kafka error.  Pure: the flags come from librdkafka's
 * rd_kafka_error_is_retriable/is_fatal/txn_requires_abort. */
sg_kafka_errkind_t sg_kafka_classify(int code, bool retriable, bool fatal, bool txn_requires_abort);

/* True when err is Kafka's refusal of one message that no retry will
 * change: larger than message.max.bytes (the producer's or the topic's),
 * a record or record list the broker calls invalid or too large, a topic
 * name the broker refuses.  Authorization and unknown topics are not:
 * they are fixed outside the message (ACLs, topic creation), and every
 * message to that topic would be refused alike. */
bool sg_kafka_err_refused(const sg_err_t *err);

/* Fills err from a librdkafka error code and flags: code "kafka.<name>",
 * class transient for retriable/abortable, permanent otherwise, err->fatal
 * for fatal.  what names the operation.  Returns -1. */
int sg_kafka_err_set(sg_err_t *err, int code, bool retriable, bool fatal, bool txn_requires_abort,
                     const char *what);

const char *sg_kafka_errkind_name(sg_kafka_errkind_t kind);

/* The librdkafka version linked in ("2.12.1"), for the startup log. */
const char *sg_kafka_version(void);

/* Creates a client.  Properties are applied in this order, later wins:
 * role defaults (consumer: enable.auto.commit=false, auto.offset.reset=
 * earliest, cooperative-sticky; producer: enable.idempotence=true,
 * acks=all), the config's kafka.* keys, then props (NULL-terminated
 * key, value pairs the program requires).  NULL + errstr on failure. */
sg_kafka_t *sg_kafka_new(const sg_config_t *cfg, sg_kafka_role_t role, const char *const *props,
                         char *errstr, size_t errstr_size) __attribute__((warn_unused_result));

/* How long a consumer's close may take (sg_kafka_close). */
#define SG_KAFKA_CLOSE_MS 10000

/* A consumer leaves its group: its partitions are revoked (through the
 * rebalance hook) and no more messages come.  Other roles, NULL and a
 * closed consumer: no-op.  Messages still held stay valid until destroyed,
 * and must all be destroyed before sg_kafka_destroy(), which waits for
 * them.  Bounded: a close librdkafka has not finished in SG_KAFKA_CLOSE_MS
 * is abandoned with a warning (the hook is not called after that), and
 * sg_kafka_destroy() then leaves the handle to the process's exit. */
void sg_kafka_close(sg_kafka_t *k);
/* The same, abandoned at deadline_ms (sg_run_now_ms()'s clock), so that a
 * program closing several consumers, one after the other (their hooks
 * must not run at once), keeps to one bound for all. */
void sg_kafka_close_until(sg_kafka_t *k, uint64_t deadline_ms);

/* Closes the client (sg_kafka_close first); NULL is a no-op. */
void sg_kafka_destroy(sg_kafka_t *k);

/* True once librdkafka raised a fatal error on this handle. */
bool sg_kafka_fatal(const sg_kafka_t *k);

/* Creates a topic; an existing topic is success. */
int sg_kafka_create_topic(sg_kafka_t *k, const char *topic, int partitions, int timeout_ms,
                          sg_err_t *err) __attribute__((warn_unused_result));

/* Number of brokers in the cluster metadata, -1 on error. */
int sg_kafka_broker_count(sg_kafka_t *k, int timeout_ms, sg_err_t *err);

/* Queues one message (copied).  batch may be NULL.  Returns -1 with err
 * set when librdkafka refuses it at once (queue full, unknown topic...). */
int sg_kafka_produce(sg_kafka_t *k, const char *topic, const void *key, size_t key_len,
                     const void *payload, size_t len, const sg_kafka_header_t *headers,
                     size_t nheaders, sg_kafka_batch_t *batch, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Serves delivery reports and callbacks for up to timeout_ms. */
void sg_kafka_poll(sg_kafka_t *k, int timeout_ms);

/* Waits until every queued message is delivered or failed. */
int sg_kafka_flush(sg_kafka_t *k, int timeout_ms, sg_err_t *err);

/* Transactions (producer created with transactional.id). */
int sg_kafka_txn_init(sg_kafka_t *k, int timeout_ms, sg_err_t *err);
int sg_kafka_txn_begin(sg_kafka_t *k, sg_err_t *err);
int sg_kafka_txn_commit(sg_kafka_t *k, int timeout_ms, sg_err_t *err);
int sg_kafka_txn_abort(sg_kafka_t *k, int timeout_ms, sg_err_t *err);

/* Consumer: subscribe, then consume.  The rebalance hook (optional) sees
 * each assigned and revoked partition. */
void sg_kafka_set_rebalance_hook(sg_kafka_t *k, sg_kafka_rebalance_fn fn, void *opaque);
int sg_kafka_subscribe(sg_kafka_t *k, const char *const *topics, size_t ntopics, sg_err_t *err);

/* A consumer reads topic's partition from offset, outside any group
 * (nothing committed, no rebalance): a reader of one saga's events. */
int sg_kafka_assign_at(sg_kafka_t *k, const char *topic, int32_t partition, int64_t offset,
                       sg_err_t *err);
/* The offset of the first message of the partition at or after ts_ms
 * (Unix milliseconds), -1 when there is none yet (the end); -2 with err
 * set when Kafka did not answer. */
int64_t sg_kafka_offset_at(sg_kafka_t *k, const char *topic, int32_t partition, int64_t ts_ms,
                           int timeout_ms, sg_err_t *err);

/* Returns 1 with *msg set (free with sg_kafka_msg_destroy), 0 when nothing
 * arrived in time (or only a partition EOF), -1 with err on error. */
int sg_kafka_consume(sg_kafka_t *k, int timeout_ms, sg_kafka_msg_t **msg, sg_err_t *err);

/* The value of the last message with key in topic's partition, read back
 * from its end in growing windows (k: a consumer made with
 * enable.partition.eof=true; with isolation.level=read_committed, the
 * last committed one before the first transaction still open).  Returns
 * 1 with *value (NUL-terminated, free it), 0 when no message has the key,
 * -1 with err (Kafka did not answer, or not within timeout_ms).  other
 * gets the first other key met (text, cut to fit; "" when none). */
int sg_kafka_read_last(sg_kafka_t *k, const char *topic, int32_t partition, const void *key,
                       size_t key_len, int timeout_ms, char **value, size_t *value_len, char *other,
                       size_t other_size, sg_err_t *err) __attribute__((warn_unused_result));

/* Pauses (or resumes) fetching of every assigned partition: flow control
 * when the caller holds too much unfinished work. */
int sg_kafka_pause(sg_kafka_t *k, bool pause);

/* Makes librdkafka write a byte to fd whenever the consumer queue (a
 * producer: its main queue, where delivery reports wait for
 * sg_kafka_poll) turns non-empty, so a caller can poll() on it beside its
 * own descriptors. */
int sg_kafka_wake_fd(sg_kafka_t *k, int fd);

/* Commits next[i] (the offset of the next message to read) of
 * partitions[i] of topic, n of them in one request, for lag tools;
 * asynchronous, best effort. */
void sg_kafka_commit_offsets(sg_kafka_t *k, const char *topic, const int32_t *partitions,
                             const int64_t *next, size_t n);

/* True once the consumer joined its group: its first assignment arrived,
 * even an empty one (more consumers than partitions). */
bool sg_kafka_group_joined(const sg_kafka_t *k);

/* The partition's high watermark as last seen by fetching (no request is
 * sent), -1 when not known yet. */
int64_t sg_kafka_high_watermark(sg_kafka_t *k, const char *topic, int32_t partition);

/* The partition's first and next offsets, asked of its leader; -1 when
 * not answered within timeout_ms. */
int sg_kafka_query_watermarks(sg_kafka_t *k, const char *topic, int32_t partition, int timeout_ms,
                              int64_t *low, int64_t *high);

/* Partitions currently assigned to this consumer, -1 on error. */
int sg_kafka_assignment_count(sg_kafka_t *k);
/* Partitions of topic from the cluster's metadata; -1 when not known
 * within timeout_ms. */
int sg_kafka_partition_count(sg_kafka_t *k, const char *topic, int timeout_ms);
/* The partition librdkafka's default partitioner (consistent_random)
 * gives a non-empty key among partition_cnt; -1 for an empty key. */
int32_t sg_kafka_key_partition(const void *key, size_t len, int32_t partition_cnt);

/* The accessors take a NULL msg (a command the worker runs before its
 * message arrives): no topic, partition/offset/timestamp -1, no payload,
 * key or headers. */
const char *sg_kafka_msg_topic(const sg_kafka_msg_t *msg);
int32_t sg_kafka_msg_partition(const sg_kafka_msg_t *msg);
int64_t sg_kafka_msg_offset(const sg_kafka_msg_t *msg);
/* Message timestamp in ms since the epoch, -1 when not available. */
int64_t sg_kafka_msg_timestamp(const sg_kafka_msg_t *msg);
const void *sg_kafka_msg_payload(const sg_kafka_msg_t *msg, size_t *len);
const void *sg_kafka_msg_key(const sg_kafka_msg_t *msg, size_t *len);
/* Last header of that name, NULL when absent. */
const void *sg_kafka_msg_header(const sg_kafka_msg_t *msg, const char *name, size_t *len);
/* Header number idx (from 0): 1 with name/value/len set, 0 past the end. */
int sg_kafka_msg_header_at(const sg_kafka_msg_t *msg, size_t idx, const char **name,
                           const void **value, size_t *len);
void sg_kafka_msg_destroy(sg_kafka_msg_t *msg);

#endif
