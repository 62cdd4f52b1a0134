#include "sagad/sg_kafka.h"

#include <ctype.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>

/* Before 2.4 a cooperative consumer's close can hang for ever when a
 * rebalance lands during it (librdkafka issue 4527); the Makefile builds
 * 2.12.1 (deploy/build-librdkafka.sh). */
#if RD_KAFKA_VERSION < 0x020400ff
#error "sagad needs librdkafka 2.4 or later: run make (it builds .deps/librdkafka)"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"
#include "sagad/sg_log.h"

/* How long a consumer's close may take (SG_KAFKA_CLOSE_MS): leaving the
 * group on a reachable cluster takes well under a second, and the worker
 * has drained its partitions before it closes. */

struct sg_kafka_s {
    rd_kafka_t *rk;
    sg_kafka_role_t role;
    volatile int fatal;
    sg_kafka_rebalance_fn rebalance_fn;
    void *rebalance_opaque;
    bool coop;           /* the group's rebalance protocol at its last rebalance */
    bool closed;         /* a consumer that left its group (sg_kafka_close) */
    bool subscribed;     /* a group member (sg_kafka_subscribe), not assigned by hand */
    uint64_t unsub_end;  /* sg_kafka_close: when the wait for an empty assignment ends */
    volatile int joined; /* a consumer got its first assignment (maybe empty) */
    /* The close runs on a thread of its own (sg_kafka_close): the hook
     * runs under hook_lock, and not at all once the close is abandoned. */
    pthread_mutex_t hook_lock;
    bool abandoned;
    atomic_bool close_done;
    struct sg_kafka_s *next_abandoned;
};

/* Consumers whose close hung: never destroyed (that would wait for the
 * close), kept reachable until the process exits. */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static sg_kafka_t *abandoned_list;

/* Errors librdkafka does not flag retriable on every path but that heal by
 * themselves once the cluster settles. */
static const rd_kafka_resp_err_t transient_codes[] = {
    RD_KAFKA_RESP_ERR__TRANSPORT,
    RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
    RD_KAFKA_RESP_ERR__TIMED_OUT,
    RD_KAFKA_RESP_ERR__MSG_TIMED_OUT,
    RD_KAFKA_RESP_ERR__QUEUE_FULL,
    RD_KAFKA_RESP_ERR__RESOLVE,
    RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION,
    RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
    RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
    RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION,
    RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
    RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
    RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
    RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
};

sg_kafka_errkind_t sg_kafka_classify(int code, bool retriable, bool fatal, bool txn_requires_abort)
{
    if (fatal || code == RD_KAFKA_RESP_ERR__FATAL)
        return SG_KAFKA_ERR_FATAL;
    if (txn_requires_abort)
        return SG_KAFKA_ERR_ABORTABLE;
    if (retriable)
        return SG_KAFKA_ERR_RETRIABLE;
    for (size_t i = 0; i < sizeof(transient_codes) / sizeof(transient_codes[0]); i++)
        if (code == (int)transient_codes[i])
            return SG_KAFKA_ERR_RETRIABLE;
    return SG_KAFKA_ERR_PERMANENT;
}

const char *sg_kafka_errkind_name(sg_kafka_errkind_t kind)
{
    static const char *const names[] = {"retriable", "abortable", "fatal", "permanent"};

    return (unsigned)kind < 4 ? names[kind] : "unknown";
}

/* "kafka.<name>": librdkafka's name of code, lower case, without the
 * leading underscores of its local errors. */
static void code_name(int code, char *ecode, size_t size)
{
    const char *name = rd_kafka_err2name((rd_kafka_resp_err_t)code);
    size_t n = (size_t)snprintf(ecode, size, "kafka.");

    while (*name == '_')
        name++;
    for (; *name && n + 1 < size; name++)
        ecode[n++] = (char)tolower((unsigned char)*name);
    ecode[n] = '\0';
}

bool sg_kafka_err_refused(const sg_err_t *err)
{
    static const rd_kafka_resp_err_t refused[] = {
        RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE,
        RD_KAFKA_RESP_ERR_INVALID_RECORD,     RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE,
        RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION,
    };
    char ecode[64];

    for (size_t i = 0; err && i < sizeof(refused) / sizeof(refused[0]); i++) {
        code_name(refused[i], ecode, sizeof(ecode));
        if (strcmp(err->code, ecode) == 0)
            return true;
    }
    return false;
}

int sg_kafka_err_set(sg_err_t *err, int code, bool retriable, bool fatal, bool txn_requires_abort,
                     const char *what)
{
    sg_kafka_errkind_t kind = sg_kafka_classify(code, retriable, fatal, txn_requires_abort);
    char ecode[64];

    code_name(code, ecode, sizeof(ecode));
    sg_err_set(err,
               kind == SG_KAFKA_ERR_RETRIABLE || kind == SG_KAFKA_ERR_ABORTABLE
                   ? SG_ERRCLASS_TRANSIENT
                   : SG_ERRCLASS_PERMANENT,
               ecode, "%s: %s (%s)", what, rd_kafka_err2str((rd_kafka_resp_err_t)code),
               sg_kafka_errkind_name(kind));
    if (err)
        err->fatal = kind == SG_KAFKA_ERR_FATAL;
    return -1;
}

/* Fills err from an rd_kafka_error_t and destroys it. */
static int error_take(sg_err_t *err, rd_kafka_error_t *error, const char *what)
{
    char buf[256];

    snprintf(buf, sizeof(buf), "%s: %s", what, rd_kafka_error_string(error));
    sg_kafka_err_set(err, rd_kafka_error_code(error), rd_kafka_error_is_retriable(error),
                     rd_kafka_error_is_fatal(error), rd_kafka_error_txn_requires_abort(error), buf);
    rd_kafka_error_destroy(error);
    return -1;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    sg_log_level_t lvl = level <= 3   ? SG_LOG_ERROR
                         : level == 4 ? SG_LOG_WARN
                         : level <= 6 ? SG_LOG_INFO
                                      : SG_LOG_DEBUG;

    if (lvl > sg_log_level)
        return;
    sg_log_kv(lvl, buf, "source", "librdkafka", "facility", fac, "client", rd_kafka_name(rk), NULL);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    sg_kafka_t *k = opaque;
    char fatal_reason[512];

    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        rd_kafka_fatal_error(rk, fatal_reason, sizeof(fatal_reason));
        k->fatal = 1;
        sg_log_kv(SG_LOG_ERROR, "fatal Kafka error: the client must be recreated", "error",
                  fatal_reason, NULL);
        return;
    }
    /* librdkafka recovers from the rest by itself; they are worth a warning
     * because they explain stalls. */
    sg_log_kv(SG_LOG_WARN, "Kafka client error", "error", rd_kafka_err2name(err), "reason", reason,
              NULL);
}

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    sg_kafka_slot_t *slot = m->_private;
    sg_kafka_batch_t *batch = slot ? slot->batch : NULL;

    (void)rk;
    (void)opaque;
    if (!batch)
        return;
    batch->pending--;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        batch->delivered++;
        return;
    }
    slot->failed = slot->reported = true;
    sg_kafka_err_set(&slot->err, m->err, false, false, false, "delivery failed");
    if (batch->failed++ == 0)
        batch->first_err = slot->err;
}

static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    sg_kafka_t *k = opaque;
    const char *protocol = rd_kafka_rebalance_protocol(rk);
    bool coop, assigned = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
    rd_kafka_error_t *error = NULL;

    /* NULL "on error", which happens in the revoke of a closing consumer:
     * the partitions go back under the protocol they were assigned with. */
    if (protocol)
        k->coop = strcmp(protocol, "COOPERATIVE") == 0;
    coop = k->coop;
    /* The hook runs before the assignment takes effect, so the start offset
     * it returns (e.g. read from PostgreSQL) is where fetching begins, and a
     * revoked partition is drained before librdkafka lets it go. */
    pthread_mutex_lock(&k->hook_lock);
    for (int i = 0; !k->abandoned && k->rebalance_fn && i < parts->cnt; i++) {
        int64_t off = k->rebalance_fn(k->rebalance_opaque, assigned, parts->elems[i].topic,
                                      parts->elems[i].partition);
        if (assigned && off >= 0)
            parts->elems[i].offset = off;
    }
    pthread_mutex_unlock(&k->hook_lock);
    for (int i = 0; i < parts->cnt; i++) {
        sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

        ctx.topic = parts->elems[i].topic;
        ctx.partition = parts->elems[i].partition;
        sg_log(SG_LOG_INFO, &ctx, "partition %s (%s rebalance)", assigned ? "assigned" : "revoked",
               coop ? "cooperative" : "eager");
    }
    if (coop)
        error = assigned ? rd_kafka_incremental_assign(rk, parts)
                         : rd_kafka_incremental_unassign(rk, parts);
    else
        rd_kafka_assign(rk, assigned ? parts : NULL);
    if (error) {
        sg_log_kv(SG_LOG_ERROR, "rebalance failed", "error", rd_kafka_error_string(error), NULL);
        rd_kafka_error_destroy(error);
    } else if (assigned) {
        k->joined = 1;
    }
}

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, char *errstr,
                    size_t errstr_size)
{
    char rderr[256];

    if (rd_kafka_conf_set(conf, key, value, rderr, sizeof(rderr)) != RD_KAFKA_CONF_OK) {
        snprintf(errstr, errstr_size, "config: kafka.%s: %s", key, rderr);
        return -1;
    }
    return 0;
}

typedef struct conf_walk_s {
    rd_kafka_conf_t *conf;
    char *errstr;
    size_t errstr_size;
    int rc;
} conf_walk_t;

static void conf_walk(void *opaque, const char *key, const char *value)
{
    conf_walk_t *w = opaque;

    if (w->rc == 0)
        w->rc = conf_set(w->conf, key, value, w->errstr, w->errstr_size);
}

static rd_kafka_conf_t *build_conf(sg_kafka_t *k, const sg_config_t *cfg, const char *const *props,
                                   char *errstr, size_t errstr_size)
{
    /* queued.max.messages.kbytes bounds the prefetch (librdkafka: 64 MB):
     * the worker keeps what was prefetched while it is full (worker_loop.c),
     * and its memory target is 64 MB in all. */
    static const char *const consumer_defaults[] = {"enable.auto.commit",
                                                    "false",
                                                    "enable.auto.offset.store",
                                                    "false",
                                                    "auto.offset.reset",
                                                    "earliest",
                                                    "partition.assignment.strategy",
                                                    "cooperative-sticky",
                                                    "queued.max.messages.kbytes",
                                                    "16384",
                                                    NULL};
    static const char *const producer_defaults[] = {"enable.idempotence", "true", "acks", "all",
                                                    NULL};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *const *d = k->role == SG_KAFKA_CONSUMER ? consumer_defaults : producer_defaults;
    conf_walk_t w = {conf, errstr, errstr_size, 0};

    for (; *d; d += 2)
        if (conf_set(conf, d[0], d[1], errstr, errstr_size) < 0)
            goto err;
    if (cfg)
        sg_config_foreach_kafka(cfg, conf_walk, &w);
    if (w.rc < 0)
        goto err;
    for (; props && *props; props += 2)
        if (conf_set(conf, props[0], props[1], errstr, errstr_size) < 0)
            goto err;
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (k->role == SG_KAFKA_PRODUCER)
        rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    else
        rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    return conf;
err:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

sg_kafka_t *sg_kafka_new(const sg_config_t *cfg, sg_kafka_role_t role, const char *const *props,
                         char *errstr, size_t errstr_size)
{
    sg_kafka_t *k = sg_xcalloc(1, sizeof(*k));
    rd_kafka_conf_t *conf;
    char rderr[512];

    k->role = role;
    pthread_mutex_init(&k->hook_lock, NULL);
    conf = build_conf(k, cfg, props, errstr, errstr_size);
    if (!conf)
        goto err;
    k->rk = rd_kafka_new(role == SG_KAFKA_PRODUCER ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER, conf,
                         rderr, sizeof(rderr));
    if (!k->rk) {
        /* rd_kafka_new() keeps the conf only on success. */
        rd_kafka_conf_destroy(conf);
        snprintf(errstr, errstr_size, "kafka: cannot create client: %s", rderr);
        goto err;
    }
    conf = NULL; /* owned by rk now */
    if (role == SG_KAFKA_CONSUMER)
        rd_kafka_poll_set_consumer(k->rk);
    return k;
err:
    free(k);
    return NULL;
}

const char *sg_kafka_version(void)
{
    return rd_kafka_version_str();
}

/* A group member leaves in two steps.  librdkafka (2.5 to 2.12 at least,
 * issue 4792) can abort the process in rd_kafka_consumer_close when the
 * close meets a cooperative rebalance still assigning or revoking
 * partitions, or an offset commit still in flight ("assert:
 * !rd_kafka_assignment_in_progress"); seen once in sagad's CI on SIGTERM.
 * So the member first unsubscribes and serves its revoke here (the hook
 * may commit offsets to the group, asynchronously), until its assignment
 * has been empty for LEAVE_QUIET_MS or unsub_end passes, and only then
 * closes.  With too little time left for that, it closes at once, as
 * before: an unsubscribe with no poll after it would start the very
 * revoke the close could meet.  Messages polled meanwhile are dropped:
 * the worker has stopped taking work, and its offsets live in
 * PostgreSQL. */
#define LEAVE_QUIET_MS 200
#define LEAVE_MIN_MS   50

static void leave_assignment(sg_kafka_t *k)
{
    rd_kafka_topic_partition_list_t *parts;
    rd_kafka_message_t *m;
    uint64_t empty_since = 0, now = sg_run_now_ms();
    int held;

    if (!k->subscribed || k->unsub_end < now + LEAVE_MIN_MS ||
        rd_kafka_unsubscribe(k->rk) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    while ((now = sg_run_now_ms()) < k->unsub_end) {
        if ((m = rd_kafka_consumer_poll(k->rk, 20)) != NULL)
            rd_kafka_message_destroy(m);
        parts = NULL;
        if (rd_kafka_assignment(k->rk, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
            return;
        held = parts->cnt;
        rd_kafka_topic_partition_list_destroy(parts);
        if (held > 0)
            empty_since = 0;
        else if (empty_since == 0)
            empty_since = now;
        else if (now - empty_since >= LEAVE_QUIET_MS)
            return;
    }
}

static void *close_main(void *arg)
{
    sg_kafka_t *k = arg;

    leave_assignment(k);
    rd_kafka_consumer_close(k->rk);
    atomic_store(&k->close_done, true);
    return NULL;
}

void sg_kafka_close(sg_kafka_t *k)
{
    sg_kafka_close_until(k, sg_run_now_ms() + SG_KAFKA_CLOSE_MS);
}

void sg_kafka_close_until(sg_kafka_t *k, uint64_t end)
{
    uint64_t now = sg_run_now_ms();
    pthread_t t;

    if (!k || k->role != SG_KAFKA_CONSUMER || k->closed)
        return;
    k->closed = true;
    /* Half the budget for the unsubscribe, the rest for the close. */
    k->unsub_end = now + (end > now ? (end - now) / 2 : 0);
    /* Revokes the assignment through the rebalance hook (which may copy
     * its offsets to the group, for lag tools), commits nothing itself
     * (offsets live in PostgreSQL) and leaves the group.  librdkafka (2.12
     * too, issue 4884) can hang for ever in it: the revoke's unassign
     * waits for a reply its group has already stopped giving.  So the
     * close runs on its own thread, and one that overruns is abandoned:
     * the process goes on (and exits) without the group leave, and the
     * group hands the partitions on after session.timeout.ms. */
    if (pthread_create(&t, NULL, close_main, k) != 0) {
        close_main(k);
        return;
    }
    while (!atomic_load(&k->close_done) && sg_run_now_ms() < end)
        usleep(5000);
    if (atomic_load(&k->close_done)) {
        pthread_join(t, NULL);
        return;
    }
    pthread_mutex_lock(&k->hook_lock); /* a hook still running finishes first */
    k->abandoned = true;
    pthread_mutex_unlock(&k->hook_lock);
    pthread_detach(t);
    sg_log_kv(SG_LOG_WARN,
              "Kafka consumer close hung (librdkafka issue 4884); going on without leaving the "
              "group: its partitions move to other members after session.timeout.ms",
              "client", rd_kafka_name(k->rk), NULL);
}

void sg_kafka_destroy(sg_kafka_t *k)
{
    if (!k)
        return;
    sg_kafka_close(k);
    if (k->abandoned) {
        pthread_mutex_lock(&abandoned_lock);
        k->next_abandoned = abandoned_list;
        abandoned_list = k;
        pthread_mutex_unlock(&abandoned_lock);
        return;
    }
    rd_kafka_destroy(k->rk);
    pthread_mutex_destroy(&k->hook_lock);
    free(k);
}

bool sg_kafka_fatal(const sg_kafka_t *k)
{
    return k->fatal != 0;
}

int sg_kafka_create_topic(sg_kafka_t *k, const char *topic, int partitions, int timeout_ms,
                          sg_err_t *err)
{
    char errbuf[256];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, -1, errbuf, sizeof(errbuf));
    rd_kafka_queue_t *q = NULL;
    rd_kafka_event_t *ev = NULL;
    const rd_kafka_topic_result_t **res;
    size_t nres = 0;
    int rc = -1;

    if (!nt)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "kafka.invalid_topic", "topic %s: %s", topic,
                          errbuf);
    q = rd_kafka_queue_new(k->rk);
    rd_kafka_CreateTopics(k->rk, &nt, 1, NULL, q);
    ev = rd_kafka_queue_poll(q, timeout_ms);
    if (!ev) {
        sg_kafka_err_set(err, RD_KAFKA_RESP_ERR__TIMED_OUT, true, false, false, "create topic");
        goto done;
    }
    if (rd_kafka_event_error(ev)) {
        sg_kafka_err_set(err, rd_kafka_event_error(ev), false, false, false, "create topic");
        goto done;
    }
    res = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &nres);
    if (nres == 1 && rd_kafka_topic_result_error(res[0]) != RD_KAFKA_RESP_ERR_NO_ERROR &&
        rd_kafka_topic_result_error(res[0]) != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        sg_kafka_err_set(err, rd_kafka_topic_result_error(res[0]), false, false, false,
                         "create topic");
        goto done;
    }
    rc = 0;
done:
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    return rc;
}

int sg_kafka_broker_count(sg_kafka_t *k, int timeout_ms, sg_err_t *err)
{
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e = rd_kafka_metadata(k->rk, 0, NULL, &md, timeout_ms);
    int n;

    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return sg_kafka_err_set(err, e, false, false, false, "metadata");
    n = md->broker_cnt;
    rd_kafka_metadata_destroy(md);
    return n;
}

int sg_kafka_produce(sg_kafka_t *k, const char *topic, const void *key, size_t key_len,
                     const void *payload, size_t len, const sg_kafka_header_t *headers,
                     size_t nheaders, sg_kafka_batch_t *batch, sg_err_t *err)
{
    rd_kafka_headers_t *hdrs = nheaders ? rd_kafka_headers_new(nheaders) : NULL;
    sg_kafka_slot_t *slot = NULL;
    rd_kafka_resp_err_t e;

    if (batch) {
        slot =
            batch->slots && batch->next < batch->nslots ? &batch->slots[batch->next] : &batch->self;
        batch->next++;
        memset(slot, 0, sizeof(*slot));
        slot->batch = batch;
    }
    for (size_t i = 0; i < nheaders; i++)
        rd_kafka_header_add(hdrs, headers[i].name, -1, headers[i].value, (ssize_t)headers[i].len);
    e = rd_kafka_producev(k->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                          RD_KAFKA_V_VALUE((void *)payload, len),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(hdrs),
                          RD_KAFKA_V_OPAQUE(slot), RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* The headers are ours again when producev fails (and
         * rd_kafka_headers_destroy does not accept NULL). */
        if (hdrs)
            rd_kafka_headers_destroy(hdrs);
        sg_kafka_err_set(err, e, false, false, false, "produce");
        if (slot && e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            batch->next--; /* offered again: the same slot */
        } else if (slot) {
            slot->failed = true;
            sg_kafka_err_set(&slot->err, e, false, false, false, "produce");
        }
        return -1;
    }
    if (batch)
        batch->pending++;
    return 0;
}

void sg_kafka_poll(sg_kafka_t *k, int timeout_ms)
{
    rd_kafka_poll(k->rk, timeout_ms);
}

int sg_kafka_flush(sg_kafka_t *k, int timeout_ms, sg_err_t *err)
{
    rd_kafka_resp_err_t e = rd_kafka_flush(k->rk, timeout_ms);

    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return sg_kafka_err_set(err, e, true, false, false, "flush");
    return 0;
}

int sg_kafka_txn_init(sg_kafka_t *k, int timeout_ms, sg_err_t *err)
{
    rd_kafka_error_t *error = rd_kafka_init_transactions(k->rk, timeout_ms);

    return error ? error_take(err, error, "init transactions") : 0;
}

int sg_kafka_txn_begin(sg_kafka_t *k, sg_err_t *err)
{
    rd_kafka_error_t *error = rd_kafka_begin_transaction(k->rk);

    return error ? error_take(err, error, "begin transaction") : 0;
}

int sg_kafka_txn_commit(sg_kafka_t *k, int timeout_ms, sg_err_t *err)
{
    rd_kafka_error_t *error = rd_kafka_commit_transaction(k->rk, timeout_ms);

    return error ? error_take(err, error, "commit transaction") : 0;
}

int sg_kafka_txn_abort(sg_kafka_t *k, int timeout_ms, sg_err_t *err)
{
    rd_kafka_error_t *error = rd_kafka_abort_transaction(k->rk, timeout_ms);

    return error ? error_take(err, error, "abort transaction") : 0;
}

void sg_kafka_set_rebalance_hook(sg_kafka_t *k, sg_kafka_rebalance_fn fn, void *opaque)
{
    k->rebalance_fn = fn;
    k->rebalance_opaque = opaque;
}

int sg_kafka_subscribe(sg_kafka_t *k, const char *const *topics, size_t ntopics, sg_err_t *err)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)ntopics);
    rd_kafka_resp_err_t e;

    for (size_t i = 0; i < ntopics; i++)
        rd_kafka_topic_partition_list_add(list, topics[i], RD_KAFKA_PARTITION_UA);
    e = rd_kafka_subscribe(k->rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return sg_kafka_err_set(err, e, false, false, false, "subscribe");
    k->subscribed = true;
    return 0;
}

int sg_kafka_assign_at(sg_kafka_t *k, const char *topic, int32_t partition, int64_t offset,
                       sg_err_t *err)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e;

    rd_kafka_topic_partition_list_add(list, topic, partition)->offset = offset;
    e = rd_kafka_assign(k->rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return sg_kafka_err_set(err, e, false, false, false, "assign");
    return 0;
}

int64_t sg_kafka_offset_at(sg_kafka_t *k, const char *topic, int32_t partition, int64_t ts_ms,
                           int timeout_ms, sg_err_t *err)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e;
    int64_t off;

    rd_kafka_topic_partition_list_add(list, topic, partition)->offset = ts_ms;
    e = rd_kafka_offsets_for_times(k->rk, list, timeout_ms);
    off = list->elems[0].offset;
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        e = list->elems[0].err;
    rd_kafka_topic_partition_list_destroy(list);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        sg_kafka_err_set(err, e, false, false, false, "offsets for times");
        return -2;
    }
    return off; /* -1: no message that late: the end */
}

int sg_kafka_consume(sg_kafka_t *k, int timeout_ms, sg_kafka_msg_t **msg, sg_err_t *err)
{
    rd_kafka_message_t *m = rd_kafka_consumer_poll(k->rk, timeout_ms);

    *msg = NULL;
    if (!m)
        return 0;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        rd_kafka_message_destroy(m);
        return 0;
    }
    if (m->err) {
        sg_kafka_err_set(err, m->err, false, false, false, "consume");
        rd_kafka_message_destroy(m);
        return -1;
    }
    *msg = m;
    return 1;
}

int sg_kafka_read_last(sg_kafka_t *k, const char *topic, int32_t partition, const void *key,
                       size_t key_len, int timeout_ms, char **value, size_t *value_len, char *other,
                       size_t other_size, sg_err_t *err)
{
    uint64_t deadline = sg_run_now_ms() + (uint64_t)timeout_ms;
    int64_t low = -1, high = -1, from, to, window = 64;
    rd_kafka_resp_err_t e;

    *value = NULL;
    *value_len = 0;
    if (other_size)
        other[0] = '\0';
    e = rd_kafka_query_watermark_offsets(k->rk, topic, partition, &low, &high, timeout_ms);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return sg_kafka_err_set(err, e, true, false, false, "watermarks of the checkpoint topic");
    /* Windows back from the end, each eight times the one before: the
     * last record with the key is usually among the last few. */
    for (to = high; to > low; to = from, window *= 8) {
        from = to - window < low ? low : to - window;
        if (sg_kafka_assign_at(k, topic, partition, from, err) < 0)
            return -1;
        for (;;) {
            rd_kafka_message_t *m;

            if (sg_run_now_ms() >= deadline) {
                free(*value);
                *value = NULL;
                return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "kafka.timeout",
                                  "reading %s [%d] back from offset %lld took over %d ms", topic,
                                  (int)partition, (long long)from, timeout_ms);
            }
            if (!(m = rd_kafka_consumer_poll(k->rk, 100)))
                continue;
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF || (!m->err && m->offset >= to)) {
                rd_kafka_message_destroy(m); /* the window's end */
                break;
            }
            if (m->err) {
                sg_kafka_err_set(err, m->err, true, false, false, "reading the checkpoint topic");
                rd_kafka_message_destroy(m);
                free(*value);
                *value = NULL;
                return -1;
            }
            if (other_size && !other[0] && m->key &&
                (m->key_len != key_len || memcmp(m->key, key, key_len) != 0)) {
                char *t = sg_text_visible_n(m->key, m->key_len, false);

                sg_text_copy(other, other_size, t);
                free(t);
            }
            if (m->key_len == key_len && (key_len == 0 || memcmp(m->key, key, key_len) == 0)) {
                free(*value);
                *value = sg_xmalloc(m->len + 1);
                if (m->len)
                    memcpy(*value, m->payload, m->len);
                (*value)[m->len] = '\0';
                *value_len = m->len;
            }
            rd_kafka_message_destroy(m);
        }
        if (*value)
            return 1;
    }
    return 0;
}

int sg_kafka_pause(sg_kafka_t *k, bool pause)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    rd_kafka_resp_err_t e;

    if (rd_kafka_assignment(k->rk, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    e = pause ? rd_kafka_pause_partitions(k->rk, parts) : rd_kafka_resume_partitions(k->rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    return e == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
}

int sg_kafka_wake_fd(sg_kafka_t *k, int fd)
{
    rd_kafka_queue_t *q = k->role == SG_KAFKA_CONSUMER ? rd_kafka_queue_get_consumer(k->rk)
                                                       : rd_kafka_queue_get_main(k->rk);

    if (!q)
        return -1;
    rd_kafka_queue_io_event_enable(q, fd, "k", 1);
    rd_kafka_queue_destroy(q);
    return 0;
}

void sg_kafka_commit_offsets(sg_kafka_t *k, const char *topic, const int32_t *partitions,
                             const int64_t *next, size_t n)
{
    rd_kafka_topic_partition_list_t *list;

    if (n == 0)
        return;
    list = rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(list, topic, partitions[i])->offset = next[i];
    /* Asynchronous and best effort: PostgreSQL holds the real offset. */
    rd_kafka_commit(k->rk, list, 1);
    rd_kafka_topic_partition_list_destroy(list);
}

bool sg_kafka_group_joined(const sg_kafka_t *k)
{
    return k->joined != 0;
}

int64_t sg_kafka_high_watermark(sg_kafka_t *k, const char *topic, int32_t partition)
{
    int64_t low = -1, high = -1;

    if (rd_kafka_get_watermark_offsets(k->rk, topic, partition, &low, &high) !=
        RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    return high;
}

int sg_kafka_query_watermarks(sg_kafka_t *k, const char *topic, int32_t partition, int timeout_ms,
                              int64_t *low, int64_t *high)
{
    return rd_kafka_query_watermark_offsets(k->rk, topic, partition, low, high, timeout_ms) ==
                   RD_KAFKA_RESP_ERR_NO_ERROR
               ? 0
               : -1;
}

int sg_kafka_partition_count(sg_kafka_t *k, const char *topic, int timeout_ms)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(k->rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int n = -1;

    if (!rkt)
        return -1;
    if (rd_kafka_metadata(k->rk, 0, rkt, &md, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        n = md->topics[0].partition_cnt;
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return n;
}

int32_t sg_kafka_key_partition(const void *key, size_t len, int32_t partition_cnt)
{
    /* consistent_random with a non-empty key is CRC32(key) % count and
     * never looks at the topic handle. */
    if (len == 0 || partition_cnt <= 0)
        return -1;
    return rd_kafka_msg_partitioner_consistent_random(NULL, key, len, partition_cnt, NULL, NULL);
}

int sg_kafka_assignment_count(sg_kafka_t *k)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    int n;

    if (rd_kafka_assignment(k->rk, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    n = parts->cnt;
    rd_kafka_topic_partition_list_destroy(parts);
    return n;
}

const char *sg_kafka_msg_topic(const sg_kafka_msg_t *msg)
{
    return msg ? rd_kafka_topic_name(msg->rkt) : NULL;
}

int32_t sg_kafka_msg_partition(const sg_kafka_msg_t *msg)
{
    return msg ? msg->partition : -1;
}

int64_t sg_kafka_msg_offset(const sg_kafka_msg_t *msg)
{
    return msg ? msg->offset : -1;
}

int64_t sg_kafka_msg_timestamp(const sg_kafka_msg_t *msg)
{
    rd_kafka_timestamp_type_t type;

    return msg ? rd_kafka_message_timestamp(msg, &type) : -1;
}

const void *sg_kafka_msg_payload(const sg_kafka_msg_t *msg, size_t *len)
{
    *len = msg ? msg->len : 0;
    return msg ? msg->payload : NULL;
}

const void *sg_kafka_msg_key(const sg_kafka_msg_t *msg, size_t *len)
{
    *len = msg ? msg->key_len : 0;
    return msg ? msg->key : NULL;
}

const void *sg_kafka_msg_header(const sg_kafka_msg_t *msg, const char *name, size_t *len)
{
    rd_kafka_headers_t *hdrs;
    const void *val;

    if (!msg || rd_kafka_message_headers(msg, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    if (rd_kafka_header_get_last(hdrs, name, &val, len) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    return val;
}

int sg_kafka_msg_header_at(const sg_kafka_msg_t *msg, size_t idx, const char **name,
                           const void **value, size_t *len)
{
    rd_kafka_headers_t *hdrs;

    if (!msg || rd_kafka_message_headers(msg, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return 0;
    return rd_kafka_header_get_all(hdrs, idx, name, value, len) == RD_KAFKA_RESP_ERR_NO_ERROR;
}

void sg_kafka_msg_destroy(sg_kafka_msg_t *msg)
{
    if (msg)
        rd_kafka_message_destroy(msg);
}
