/* Exactly once for read_committed consumers (relay.exactly_once, WAL
 * source only; docs/RELAY.md, "Exactly once").
 *
 * The relays of one slot share a Kafka transactional.id.  The one that
 * takes the slot makes a transactional producer and initialises it, which
 * aborts whatever an earlier holder left open and fences that holder: its
 * next commit fails.  Each batch then goes to Kafka in one transaction
 * with a checkpoint record naming the last message it holds by WAL
 * position: the commit LSN of that message's transaction and the
 * message's own LSN.  The position is confirmed to PostgreSQL only after
 * the commit, as without exactly once; what the server sends again after
 * a crash between the two is recognised by the checkpoint, read back when
 * the slot is taken, and skipped.
 *
 * Why the two LSNs name a message: the server sends whole transactions in
 * commit order, so commit LSNs grow along the stream, and within one
 * transaction its messages come in WAL order, the same each time it is
 * decoded again.  That holds within one WAL history only: a checkpoint
 * carries the history it was written on (system identifier, timeline,
 * database) and is keyed by it, so that a restore into a new cluster, a
 * failover to a standby or another installation on the same Kafka never
 * skips by another history's positions (it would skip messages never
 * published). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox.h"
#include "sagad/sg_json.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_walmsg.h"

#define EOS_END_MS 30000 /* a commit or an abort */
/* The broker's default transaction.max.timeout.ms: a longer
 * transaction.timeout.ms is refused at initialisation. */
#define EOS_TXN_MAX_MS 900000

void outbox_eos_init(outbox_eos_t *e, const sg_config_t *cfg, const char *slot, const char *holder)
{
    int64_t delivery = sg_config_int(cfg, "relay.delivery_timeout_ms");

    memset(e, 0, sizeof(*e));
    e->cfg = cfg;
    e->slot = slot;
    e->holder = holder;
    e->topic = sg_config_str(cfg, "relay.checkpoint_topic");
    /* The transaction must outlive a batch's delivery timeout, and stay
     * within what the broker allows. */
    e->txn_timeout_ms = delivery > 60000 ? delivery : 60000;
    if (e->txn_timeout_ms > EOS_TXN_MAX_MS)
        e->txn_timeout_ms = EOS_TXN_MAX_MS;
    e->msg_timeout_ms = delivery < e->txn_timeout_ms ? delivery : e->txn_timeout_ms;
    e->ck_batch.slots = &e->ck_slot;
    e->ck_batch.nslots = 1;
}

static int parse_lsn(const sg_json_t *doc, const char *name, uint64_t *out)
{
    const char *s = sg_json_string(sg_json_member(doc, name));
    unsigned hi, lo;
    char end;

    if (!s || sscanf(s, "%X/%X%c", &hi, &lo, &end) != 2)
        return -1;
    *out = (uint64_t)hi << 32 | lo;
    return 0;
}

/* The slot's last checkpoint, read back from the topic (read_committed):
 * 1 when there is one of this history, 0 when none. */
static int read_checkpoint(outbox_eos_t *e, int timeout_ms, sg_err_t *err)
{
    /* fetch.wait.max.ms: a window's end is known by the fetch that comes
     * back empty, which the broker holds back this long (librdkafka's
     * 500 ms made each window, and so a takeover, half a second longer) */
    const char *props[] = {"group.id",
                           "sagad-relay-checkpoints",
                           "isolation.level",
                           "read_committed",
                           "enable.partition.eof",
                           "true",
                           "fetch.wait.max.ms",
                           "10",
                           NULL};
    char errstr[512], *value = NULL, other[128] = "";
    const char *history;
    size_t len;
    sg_kafka_t *k;
    sg_json_t *doc;
    int n, rc;

    e->ck_commit = e->ck_msg = 0;
    if (!(k = sg_kafka_new(e->cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr))))
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.config.invalid",
                          "the checkpoint reader: %s", errstr);
    n = sg_kafka_partition_count(k, e->topic, timeout_ms);
    if (n != 1) {
        sg_kafka_destroy(k);
        if (n > 1)
            return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.checkpoint_topic",
                              "the checkpoint topic %s (relay.checkpoint_topic) has %d "
                              "partitions: give the relay a topic of one partition",
                              e->topic, n);
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.checkpoint_topic",
                          "the checkpoint topic %s (relay.checkpoint_topic) is missing or Kafka "
                          "did not answer: create it (`sagad-worker topics` does) and let the "
                          "relay's principal read and write it (docs/OPERATIONS.md, \"Kafka "
                          "principals\")",
                          e->topic);
    }
    rc = sg_kafka_read_last(k, e->topic, 0, e->key, strlen(e->key), timeout_ms, &value, &len, other,
                            sizeof(other), err);
    sg_kafka_destroy(k);
    if (other[0])
        sg_log_kv(SG_LOG_WARN,
                  "exactly once: the checkpoint topic also holds another relay's checkpoints; "
                  "while that relay holds a transaction open, this one may read an older "
                  "checkpoint of its own and publish again what it had published: give each "
                  "slot a topic of its own (docs/RELAY.md, \"Exactly once\")",
                  "checkpoint_topic", e->topic, "other", other, NULL);
    if (rc <= 0)
        return rc;
    doc = sg_json_parse_exact(value, len, err);
    history = sg_json_string(sg_json_member(doc, "history"));
    if (!doc || !history || parse_lsn(doc, "commit_lsn", &e->ck_commit) < 0 ||
        parse_lsn(doc, "message_lsn", &e->ck_msg) < 0) {
        sg_json_destroy(doc);
        free(value);
        e->ck_commit = e->ck_msg = 0;
        /* Never publish over a checkpoint that cannot be read: it would
         * turn exactly once into at least once without a word. */
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "relay.checkpoint",
                          "the last checkpoint of %s in %s is not one the relay wrote "
                          "(history, commit_lsn and message_lsn as X/Y): find who wrote it; the "
                          "relay's principal alone may write that topic",
                          e->key, e->topic);
    }
    if (strcmp(history, e->history) != 0) {
        /* The same system and database on another timeline: a failover.
         * Positions past the switch are another history's, and messages
         * committed there were never published: skipping by them would
         * lose new ones.  Without a checkpoint, what the server sends
         * again may come twice, as without exactly once. */
        sg_log_kv(SG_LOG_WARN,
                  "exactly once: the last checkpoint was written on another WAL history (a "
                  "failover to a standby); not skipping by it, so messages the server sends "
                  "again may come twice this once",
                  "checkpoint_history", history, "history", e->history, NULL);
        e->ck_commit = e->ck_msg = 0;
        rc = 0;
    }
    sg_json_destroy(doc);
    free(value);
    return rc;
}

int outbox_eos_take(outbox_eos_t *e, int timeout_ms, sg_err_t *err)
{
    const char *history = e->history;
    char txn_timeout[32], msg_timeout[32], a[24], b[24], sysdb[160];
    const char *id = sg_config_str(e->cfg, "relay.transactional_id");
    const char *props[] = {
        "transactional.id",       e->txn_id,   "acks", "all", "message.timeout.ms", msg_timeout,
        "transaction.timeout.ms", txn_timeout, NULL};
    const char *slash;
    char errstr[512];
    int rc;

    outbox_eos_drop(e);
    /* "<system>/<timeline>/<database>": the key and the default id leave
     * the timeline out, so that a failover's relay finds (and then
     * refuses to skip by) the checkpoint of the timeline before. */
    slash = strchr(history, '/');
    snprintf(sysdb, sizeof(sysdb), "%.*s/%s", slash ? (int)(slash - history) : 0, history,
             slash && strchr(slash + 1, '/') ? strchr(slash + 1, '/') + 1 : "");
    snprintf(e->key, sizeof(e->key), "%s/%s", sysdb, e->slot);
    if (id && *id)
        snprintf(e->txn_id, sizeof(e->txn_id), "%s", id);
    else
        snprintf(e->txn_id, sizeof(e->txn_id), "sagad-relay.%s", e->key);
    snprintf(msg_timeout, sizeof(msg_timeout), "%lld", (long long)e->msg_timeout_ms);
    snprintf(txn_timeout, sizeof(txn_timeout), "%lld", (long long)e->txn_timeout_ms);
    if (!(e->producer = sg_kafka_new(e->cfg, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr))))
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.config.invalid",
                          "the transactional producer: %s", errstr);
    /* Aborts what an earlier holder left open and fences it. */
    if (sg_kafka_txn_init(e->producer, timeout_ms, err) < 0) {
        sg_err_prefix(err, "transactional.id %s", e->txn_id);
        outbox_eos_drop(e);
        return -1;
    }
    if ((rc = read_checkpoint(e, timeout_ms, err)) < 0) {
        outbox_eos_drop(e);
        return -1;
    }
    sg_log_kv(SG_LOG_INFO, "exactly once: took the transactional id", "transactional_id", e->txn_id,
              "checkpoint_topic", e->topic, "history", e->history, "commit_lsn",
              rc ? sg_lsn_text(a, e->ck_commit) : "(none)", "message_lsn",
              rc ? sg_lsn_text(b, e->ck_msg) : "(none)", NULL);
    e->skipped = 0;
    return 0;
}

outbox_eos_admit_t outbox_eos_admit(outbox_eos_t *e, uint64_t commit_lsn, uint64_t msg_lsn,
                                    size_t in_batch)
{
    if (commit_lsn < e->ck_commit || (commit_lsn == e->ck_commit && msg_lsn <= e->ck_msg)) {
        e->skipped++; /* sent again after a crash: already in Kafka */
        sg_metric_inc(SG_M_RELAY_SKIPPED, NULL);
        return OUTBOX_EOS_SKIP;
    }
    if (e->skipped > 0) {
        sg_log_kv(SG_LOG_INFO,
                  "exactly once: skipped the messages the checkpoint says are in Kafka", "messages",
                  SG_PG_INT(e->skipped), NULL);
        e->skipped = 0;
    }
    if (!e->refused_known || commit_lsn != e->refused_commit || msg_lsn != e->refused_msg)
        return OUTBOX_EOS_TAKE;
    if (in_batch > 0)
        return OUTBOX_EOS_NEXT_BATCH;
    e->refused_known = false;
    return OUTBOX_EOS_TAKE_ALONE;
}

/* A refusal Kafka reported dooms the transaction (and librdkafka holds
 * the rest of the batch back until it is aborted, which fails them).  In
 * a batch of several, the transaction is aborted and the stream read
 * again with the first refused message in a batch of its own; alone, the
 * message is quarantined and the checkpoint commits without it.  A
 * message librdkafka refused at once never joined the transaction: it is
 * quarantined. */
outbox_eos_verdict_t outbox_eos_verdict(outbox_eos_t *e, const sg_kafka_batch_t *batch,
                                        const sg_kafka_slot_t *slots, size_t n, bool ck_sent,
                                        const sg_err_t *ck_err, size_t *first_refused,
                                        sg_err_t *err)
{
    const sg_kafka_slot_t *other = NULL;
    int doomed = 0;

    for (size_t i = 0; i < n; i++) {
        const sg_kafka_slot_t *s = &slots[i];

        if (!s->failed)
            continue;
        if (s->reported && sg_kafka_err_refused(&s->err)) {
            if (doomed++ == 0)
                *first_refused = i; /* the batch is in stream order */
        } else if (!sg_kafka_err_refused(&s->err) && !other) {
            other = s;
        }
    }
    if (!other && e->ck_batch.failed)
        other = &e->ck_slot;
    if (doomed || other || !ck_sent)
        outbox_eos_abort(e);
    if (doomed && n > 1) {
        sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.refused_in_batch",
                   "Kafka refused %d of the batch's %zu messages, so its transaction is aborted; "
                   "reading the batch again with the first refused message in a transaction of "
                   "its own, so that only it is quarantined",
                   doomed, n);
        return OUTBOX_EOS_READ_AGAIN;
    }
    if (other) {
        *err = other->err;
        sg_err_prefix(err, "%d of %zu messages not acknowledged; the transaction is aborted",
                      batch->failed, n);
        return OUTBOX_EOS_FAILED;
    }
    if (!ck_sent && !doomed) {
        *err = *ck_err;
        sg_err_prefix(err, "the batch's checkpoint could not be sent; the transaction is aborted");
        return OUTBOX_EOS_FAILED;
    }
    return OUTBOX_EOS_COMMIT;
}

int outbox_eos_finish(outbox_eos_t *e, uint64_t commit_lsn, uint64_t msg_lsn, sg_err_t *err)
{
    /* a message refused alone: its transaction is gone, the checkpoint
     * goes in one of its own */
    if (!e->open && outbox_eos_checkpoint(e, commit_lsn, msg_lsn, err) < 0) {
        outbox_eos_abort(e);
        return -1;
    }
    return outbox_eos_commit(e, err);
}

int outbox_eos_begin(outbox_eos_t *e, sg_err_t *err)
{
    if (e->open)
        return 0;
    if (!e->producer)
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.transactional",
                          "the transactional producer was dropped (fenced, or it could not "
                          "abort): the slot is taken again");
    if (sg_kafka_txn_begin(e->producer, err) < 0)
        return -1;
    e->open = true;
    return 0;
}

int outbox_eos_checkpoint(outbox_eos_t *e, uint64_t commit_lsn, uint64_t msg_lsn, sg_err_t *err)
{
    char value[512], a[24], b[24];
    int n;

    if (outbox_eos_begin(e, err) < 0)
        return -1;
    n = snprintf(value, sizeof(value),
                 "{\"key\":\"%s\",\"history\":\"%s\",\"commit_lsn\":\"%s\",\"message_lsn\":\"%s\","
                 "\"relay\":\"%s\"}",
                 e->key, e->history, sg_lsn_text(a, commit_lsn), sg_lsn_text(b, msg_lsn),
                 e->holder);
    if (n < 0 || (size_t)n >= sizeof(value))
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.config.invalid",
                          "relay.slot or the holder name is too long for a checkpoint");
    memset(&e->ck_batch, 0, sizeof(e->ck_batch));
    memset(&e->ck_slot, 0, sizeof(e->ck_slot));
    e->ck_batch.slots = &e->ck_slot;
    e->ck_batch.nslots = 1;
    if (sg_kafka_produce(e->producer, e->topic, e->key, strlen(e->key), value, (size_t)n, NULL, 0,
                         &e->ck_batch, err) < 0)
        return -1;
    e->next_commit = commit_lsn;
    e->next_msg = msg_lsn;
    return 0;
}

int outbox_eos_commit(outbox_eos_t *e, sg_err_t *err)
{
    if (!e->open)
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.transactional",
                          "no transaction to commit");
    if (sg_kafka_txn_commit(e->producer, EOS_END_MS, err) < 0) {
        outbox_eos_abort(e);
        return -1;
    }
    e->open = false;
    sg_metric_inc(SG_M_RELAY_KAFKA_TXNS, SG_LABELS("committed"));
    e->ck_commit = e->next_commit;
    e->ck_msg = e->next_msg;
    return 0;
}

void outbox_eos_abort(outbox_eos_t *e)
{
    sg_err_t err;

    if (!e->open)
        return;
    sg_err_clear(&err);
    e->open = false;
    sg_metric_inc(SG_M_RELAY_KAFKA_TXNS, SG_LABELS("aborted"));
    if (sg_kafka_txn_abort(e->producer, EOS_END_MS, &err) < 0 || sg_kafka_fatal(e->producer)) {
        /* A fenced or broken producer cannot go on: the next take makes
         * a new one (and its initialisation aborts what this one left). */
        sg_log_kv(SG_LOG_WARN,
                  "exactly once: the producer could not abort (fenced or broken); dropping it",
                  "error", err.message[0] ? err.message : "a fatal error of the producer", NULL);
        outbox_eos_drop(e);
    }
}

void outbox_eos_drop(outbox_eos_t *e)
{
    e->open = false;
    sg_kafka_destroy(e->producer);
    e->producer = NULL;
}
