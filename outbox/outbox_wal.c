/* The WAL source (relay.source = wal; docs/RELAY.md, "The WAL source").
 *
 *   CONNECTING -> STANDBY -> ACTIVE -> (error) BACKOFF -> CONNECTING/STANDBY
 *
 * Writers' outbox rows go into the WAL as logical decoding messages (the
 * trigger of schemas/sql/0026_wal_outbox.sql).  One relay streams them
 * from the replication slot (pgoutput, messages on), in commit order, and
 * hands each to Kafka.  The slot is the lock: the server lets one session
 * stream from it, and frees it when that session ends (a crash closes the
 * socket at once; a relay paused or cut off is ended after
 * relay.wal_sender_timeout_ms), so a standby's next START_REPLICATION
 * takes over.
 *
 * What is confirmed to the server (the slot's confirmed_flush_lsn, below
 * which it may forget) is only ever the end of a transaction whose every
 * message Kafka acknowledged, never a message's own position: after a
 * restart the server sends again every transaction committed after that
 * point, whole.  A keepalive's position is confirmed only while nothing
 * is in flight and no transaction is open. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outbox.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_health.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pgrepl.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"
#include "sagad/sg_walmsg.h"

#define WAL_PUBLICATION "sagad_outbox"
#define STATUS_MS       1000 /* a status update at least this often, busy or idle */
#define SWEEP_MS        1000 /* rows found in the outbox table are moved into the WAL this often */
#define HEARTBEAT_MS    5000 /* a heartbeat is written into the WAL this often */
/* A batch that has reached DRAIN_BATCH messages when the socket is
 * momentarily empty waits for more, until DRAIN_WAIT_MS after its first
 * message, before it is sent for acknowledgement: in a backlog the server
 * is still sending, and without the wait each batch ended with a socket
 * read (53 messages on average over a drain, docs/PERFORMANCE.md), so the
 * drain was a string of Kafka round trips.  A smaller batch (a quiet
 * stream's) goes at once; the bound keeps a busy but steady stream (one
 * that is never quiet for DRAIN_WAIT_MS) from growing a batch for long. */
#define DRAIN_BATCH   32
#define DRAIN_WAIT_MS 1

typedef enum wal_state_e {
    WAL_CONNECTING,
    WAL_STANDBY,
    WAL_ACTIVE,
    WAL_BACKOFF,
} wal_state_t;

static const char *const wal_state_names[] = {"connecting", "standby", "active", "backoff"};

typedef struct wal_relay_s {
    const outbox_ctx_t *ctx;
    sg_pg_opts_t pgopts;
    sg_pg_t *pg;     /* checks, the switch, timers, quarantine, the fence */
    sg_pgrepl_t *rp; /* the stream */
    const char *slot, *repl_dsn;
    int sender_timeout_ms;
    int64_t batch_max, timer_batch;
    uint64_t poll_ms, standby_poll_ms;
    outbox_signer_t signer;
    wal_state_t state;
    unsigned failures;
    sg_backoff_t backoff;
    sg_rng_t rng;
    int exit_code;
    bool failpoint_after_ack;
    /* SAGAD_TEST_FAILPOINT=relay.slow_produce: 1 ms after each message
     * handed to Kafka, so that a refusal comes back while the relay still
     * produces into the same transaction (a test's certainty, not a
     * race). */
    bool failpoint_slow_produce;
    /* relay.exactly_once: the batches in Kafka transactions (outbox_eos.c) */
    bool exactly_once;
    outbox_eos_t eos;
    bool single_batch;   /* this batch ends after its message (the refused one) */
    bool eos_stop;       /* the transaction failed: no more messages in this batch */
    unsigned char *held; /* a message read for the next batch (the refused one) */
    size_t held_len;
    /* the stream */
    uint64_t confirmed; /* last position confirmed to the server */
    /* What this process published through on any stream so far, and
     * when it confirmed that (wall ms): kept across streams, for the
     * loss report when a slot turns out gone (0: never streamed). */
    uint64_t published_through;
    int64_t published_through_ms;
    uint64_t settled;    /* end of the last whole transaction Kafka acknowledged */
    uint64_t commit_end; /* end of the last commit read */
    bool in_txn;
    int64_t txn_commit_us;
    uint64_t txn_commit_lsn; /* the open transaction's commit LSN (its Begin says) */
    bool fence_checked;      /* this batch's holder check was made */
    uint64_t status_at, sweep_at, timers_at, heartbeat_at;
    /* Wall-clock ms of the oldest heartbeat written and not yet read back
     * (0: none): publishing lags by at least now minus this. */
    int64_t hb_pending_ms;
    uint64_t hb_pending_lsn; /* where that heartbeat is in the WAL */
    outbox_wal_batch_t b;    /* the batch (outbox_wal_batch.c) */
    int64_t published, batches;
} wal_relay_t;

static int64_t wall_ms(void)
{
    return sg_run_wall_ns() / 1000000;
}

/* sagad_outbox_oldest_age_seconds{shard="wal"}: how long the oldest
 * heartbeat written has waited to be read back, or the batch in flight
 * for Kafka's answer, whichever is longer; 0 when nothing waits. */
static void export_age(const wal_relay_t *w)
{
    int64_t now = wall_ms(), age = w->hb_pending_ms ? now - w->hb_pending_ms : 0;

    if (w->b.n > 0 && now - w->b.at_ns / 1000000 > age)
        age = now - w->b.at_ns / 1000000;

    sg_metric_set(SG_M_OUTBOX_OLDEST_AGE, SG_LABELS("wal"), age > 0 ? (double)age / 1000.0 : 0.0);
}

static void wal_export_state(const wal_relay_t *w)
{
    for (int i = WAL_CONNECTING; i <= WAL_BACKOFF; i++)
        sg_metric_set(SG_M_RELAY_STATE, SG_LABELS(wal_state_names[i]), i == (int)w->state);
    sg_health_set(SG_CHECK_LOCK,
                  w->state == WAL_STANDBY || w->state == WAL_ACTIVE ||
                      (w->state == WAL_BACKOFF && w->pg),
                  "relay is %s: slot state not known", wal_state_names[w->state]);
}

static void wal_set_state(wal_relay_t *w, wal_state_t st, const char *why)
{
    if (w->state == st)
        return;
    sg_log_kv(SG_LOG_INFO, "relay state change", "from", wal_state_names[w->state], "to",
              wal_state_names[st], "why", why, "source", "wal", NULL);
    w->state = st;
    wal_export_state(w);
}

static void reset_batch(wal_relay_t *w);

/* Where the batch goes: the transactional producer with exactly once. */
static sg_kafka_t *producer(const wal_relay_t *w)
{
    return w->exactly_once ? w->eos.producer : w->ctx->producer;
}

/* The stream goes; what it had in flight is waited for, then forgotten:
 * the next stream starts again from the confirmed position. */
static void drop_stream(wal_relay_t *w)
{
    sg_pgrepl_close(w->rp);
    w->rp = NULL;
    /* With exactly once, the abort first: it fails at once what
     * librdkafka holds back of a failed transaction, which would
     * otherwise wait for its delivery timeout. */
    if (w->exactly_once)
        outbox_eos_abort(&w->eos);
    reset_batch(w);
    if (w->exactly_once)
        outbox_eos_drop(&w->eos);
    free(w->held);
    w->held = NULL;
    w->in_txn = false;
}

/* Logs the error and moves to BACKOFF.  The stream is always dropped (the
 * server sends again from the confirmed position); a broken control
 * session too. */
static void wal_fail(wal_relay_t *w, const char *what, const sg_err_t *err)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    ctx.error_code = err->code;
    sg_log(SG_LOG_WARN, &ctx, "%s: %s", what, err->message);
    w->failures++;
    if (w->state == WAL_CONNECTING && err->cls == SG_ERRCLASS_PERMANENT) {
        w->exit_code = SG_EXIT_FAIL;
        sg_run_running = 0;
    }
    drop_stream(w);
    if (!sg_pg_ok(w->pg) || strcmp(err->code, "pg.session_reset") == 0) {
        sg_health_set(SG_CHECK_PG, false, "%s", err->message);
        sg_pg_destroy(w->pg);
        w->pg = NULL;
    }
    wal_set_state(w, WAL_BACKOFF, what);
}

static int one_value(wal_relay_t *w, const char *sql, int n, const char *const *p, char *out,
                     size_t out_size, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    const char *v;

    if (sg_pg_exec_cached(w->pg, sql, n, p, &res, err) < 0)
        return -1;
    v = sg_pg_res_rows(res) > 0 ? sg_pg_res_get(res, 0, 0) : NULL;
    snprintf(out, out_size, "%s", v ? v : "");
    sg_pg_res_destroy(res);
    return 0;
}

/* CONNECTING: the control session and what the WAL source needs of the
 * server, each refused with what to do. */
static int wal_connect(wal_relay_t *w, sg_err_t *err)
{
    char v[64];
    int version;

    w->pg = sg_pg_connect(&w->pgopts, err);
    if (!w->pg)
        return -1;
    if (sg_migrate_current(w->pg, &version, err) < 0)
        return -1;
    sg_health_set(SG_CHECK_PG, true, NULL);
    sg_health_set(SG_CHECK_SCHEMA, version >= OUTBOX_WAL_SCHEMA_VERSION,
                  "database schema is at version %d, the WAL source needs %d: run `sagad-relay "
                  "migrate`",
                  version, OUTBOX_WAL_SCHEMA_VERSION);
    if (version < OUTBOX_WAL_SCHEMA_VERSION)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.schema.old",
                          "database schema is at version %d, the WAL source needs %d: run "
                          "`sagad-relay migrate`",
                          version, OUTBOX_WAL_SCHEMA_VERSION);
    if (one_value(w, "SELECT current_setting('wal_level')", 0, NULL, v, sizeof(v), err) < 0)
        return -1;
    if (strcmp(v, "logical") != 0)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "relay.wal_level",
                          "relay.source is wal but the server's wal_level is %s: set wal_level = "
                          "logical and restart PostgreSQL, or set relay.source = table "
                          "(docs/RELAY.md, \"The WAL source\")",
                          v);
    /* Any login that may write a 'sagad.outbox' message could have the
     * relay sign and publish whatever it wrote. */
    if (one_value(w,
                  "SELECT coalesce(bool_or(a.grantee = 0), false) FROM pg_proc p, "
                  "aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a "
                  "WHERE p.proname = 'pg_logical_emit_message' "
                  "AND p.pronamespace = 'pg_catalog'::regnamespace AND a.privilege_type = "
                  "'EXECUTE'",
                  0, NULL, v, sizeof(v), err) < 0)
        return -1;
    if (strcmp(v, "f") != 0)
        return sg_err_set(
            err, SG_ERRCLASS_PERMANENT, "relay.emit_public",
            "every login of this database may call pg_logical_emit_message, so any of them "
            "could write a message the relay would sign and publish: as a superuser, REVOKE "
            "EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, bytea), "
            "pg_logical_emit_message(boolean, text, text) FROM PUBLIC, and GRANT it to the "
            "schema's owner (docs/OPERATIONS.md, \"The WAL source\")");
    if (one_value(w, "SELECT count(*) FROM pg_publication WHERE pubname = '" WAL_PUBLICATION "'", 0,
                  NULL, v, sizeof(v), err) < 0)
        return -1;
    if (strcmp(v, "1") != 0)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "relay.publication",
                          "no publication " WAL_PUBLICATION " in this database: run `sagad-relay "
                          "migrate`");
    if (outbox_signer_load(&w->signer, w->pg, err) < 0)
        return -1;
    /* What the control session commits (timers moved, the sweep, a row
     * quarantined) may be lost in a crash of PostgreSQL itself and done
     * again: the table relay's reasoning (docs/RELAY.md). */
    return sg_pg_exec(w->pg, "SELECT set_config('synchronous_commit', 'off', false)", 0, NULL, NULL,
                      err);
}

/* The slot is gone: says what was lost, as far as this process knows.
 * A relay that streamed before it (the one that rode the failover out)
 * names the position it had published through and when it confirmed it:
 * what was committed after that, before the old primary went, never
 * reached Kafka, and the sagas waiting on it show in `sagactl list
 * --stuck`. */
static void log_slot_lost(const wal_relay_t *w)
{
    static const char msg[] =
        "the WAL source's slot is gone (a failover to a primary without it, or dropped): "
        "messages committed after its last confirmed position and before it was lost were "
        "never published; making it again. Sagas waiting on a lost message show in `sagactl "
        "list --stuck` (docs/RELAY.md, \"Failover\")";
    char lsn[24], at[32];

    if (w->published_through_ms == 0) {
        sg_log_kv(SG_LOG_ERROR, msg, "slot", w->slot, "published_through",
                  "unknown (this process had not streamed from it)", NULL);
        return;
    }
    sg_log_kv(SG_LOG_ERROR, msg, "slot", w->slot, "published_through",
              sg_lsn_text(lsn, w->published_through), "published_through_at",
              sg_time_iso(at, sizeof(at), w->published_through_ms), NULL);
}

/* Makes sure the slot exists and the source reads it, then starts the
 * stream.  Returns 1 when streaming, 0 when another relay streams from
 * the slot (standby), -1 on error. */
static int wal_standby(wal_relay_t *w, sg_err_t *err)
{
    const char *p[] = {w->slot};
    sg_pg_res_t *res = NULL;
    bool exists, invalid, lost, created;
    char moved[32];

    /* invalid: PostgreSQL gave the slot up (max_slot_wal_keep_size); it
     * can never be read again, and counts as lost */
    if (sg_pg_exec_cached(w->pg,
                          "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 "
                          "AND database = current_database()), EXISTS (SELECT 1 FROM "
                          "pg_replication_slots WHERE slot_name = $1 AND wal_status = 'lost'), "
                          "source = 'wal' AND wal_slot = $1 FROM relay_settings",
                          1, p, &res, err) < 0)
        return -1;
    invalid = strcmp(sg_pg_res_get(res, 0, 1), "t") == 0;
    exists = strcmp(sg_pg_res_get(res, 0, 0), "t") == 0 && !invalid;
    lost = !exists && strcmp(sg_pg_res_get(res, 0, 2), "t") == 0;
    sg_pg_res_destroy(res);
    w->rp = sg_pgrepl_connect(w->repl_dsn, w->ctx->holder, w->sender_timeout_ms, err);
    if (!w->rp)
        return -1;
    if (w->exactly_once &&
        sg_pgrepl_identify(w->rp, w->eos.history, sizeof(w->eos.history), err) < 0)
        return -1;
    if (invalid) {
        sg_log_kv(SG_LOG_ERROR,
                  "the WAL source's slot was invalidated (the WAL it needed was removed past "
                  "max_slot_wal_keep_size); dropping it",
                  "slot", w->slot, NULL);
        if (sg_pgrepl_drop_slot(w->rp, w->slot, err) < 0)
            return -1;
    }
    if (lost) {
        /* The source says wal and its slot is gone: a failover to a
         * primary the slot was not copied to, or a slot dropped by hand.
         * Writers have kept their rows in the table since (the trigger
         * routes to the WAL only while the slot exists); back to the
         * table first, so that none of them writes into the WAL before
         * those rows are moved there. */
        log_slot_lost(w);
        if (sg_pg_exec(w->pg, "SELECT sagad_outbox_to_table()", 0, NULL, NULL, err) < 0)
            return -1;
    }
    if (!exists) {
        if (sg_pgrepl_create_slot(w->rp, w->slot, &created, err) < 0)
            return -1;
        if (created)
            sg_log_kv(SG_LOG_INFO, "made the replication slot", "slot", w->slot, NULL);
    }
    if (one_value(w, "SELECT sagad_outbox_to_wal($1)", 1, p, moved, sizeof(moved), err) < 0)
        return -1;
    if (strcmp(moved, "0") != 0)
        sg_log_kv(SG_LOG_INFO, "moved outbox rows into the WAL", "rows", moved, NULL);
    if (sg_pgrepl_start(w->rp, w->slot, WAL_PUBLICATION, err) < 0) {
        if (strcmp(err->code, "pg.slot_busy") == 0) {
            drop_stream(w);
            return 0;
        }
        return -1;
    }
    /* Only once the slot is this relay's: initialising the transactional
     * id fences the relay that holds it.  Its steps stay well within the
     * session's wal_sender_timeout, which runs meanwhile. */
    if (w->exactly_once && outbox_eos_take(&w->eos, w->sender_timeout_ms / 4, err) < 0)
        return -1;
    w->confirmed = w->settled = w->commit_end = 0;
    w->in_txn = false;
    w->status_at = w->sweep_at = w->timers_at = w->heartbeat_at = 0;
    sg_log_kv(SG_LOG_INFO, "streaming from the replication slot", "slot", w->slot, "walsender_pid",
              SG_PG_INT(sg_pgrepl_pid(w->rp)), NULL);
    return 1;
}

/* Fencing: a relay that was paused (or cut off) long enough for its
 * session to be ended, and for a standby to take the slot, must not
 * publish what it still holds.  Before the first message of each batch
 * goes to Kafka, the slot must still be streamed by this relay's session.
 * (What it could publish otherwise are copies of committed messages,
 * never anything else; this makes even those stop.) */
static int check_holder(wal_relay_t *w, sg_err_t *err)
{
    const char *p[] = {w->slot};
    char pid[24];

    if (one_value(w, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", 1, p, pid,
                  sizeof(pid), err) < 0)
        return -1;
    if (strtol(pid, NULL, 10) != sg_pgrepl_pid(w->rp))
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.fenced",
                          "the slot %s is streamed by server process %s, not this relay's %d: "
                          "another relay took over",
                          w->slot, pid[0] ? pid : "(none)", sg_pgrepl_pid(w->rp));
    w->fence_checked = true;
    return 0;
}

/* Waits for Kafka's answer on whatever the batch still has in flight,
 * then empties it. */
static void reset_batch(wal_relay_t *w)
{
    outbox_wal_batch_reset(&w->b, producer(w));
    w->fence_checked = false;
    w->single_batch = w->eos_stop = false;
}

/* One message of prefix sagad.outbox: copied into the batch's arena and
 * handed to Kafka.  Returns 1 when it must wait for the next batch (the
 * message Kafka refused, which goes alone), else 0 or -1. */
static int take_message(wal_relay_t *w, const sg_pgo_msg_t *m, sg_err_t *err)
{
    sg_outbox_frame_t f;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    size_t i;
    char lsn[24];

    if (!m->transactional || strcmp(m->prefix, SG_WAL_PREFIX) != 0)
        return 0; /* another program's message */
    if (sg_outbox_frame_parse(m->content, m->content_len, &f) < 0) {
        ctx.error_code = "relay.bad_frame";
        sg_log(SG_LOG_ERROR, &ctx,
               "a %s message at %s is not an outbox frame (%zu bytes); skipped: only the "
               "schema's owner may write one, so look for who did",
               SG_WAL_PREFIX, sg_lsn_text(lsn, m->lsn), m->content_len);
        sg_metric_inc(SG_M_OUTBOX_QUARANTINED, SG_LABELS("relay.bad_frame"));
        return 0;
    }
    if (w->exactly_once) {
        switch (outbox_eos_admit(&w->eos, w->txn_commit_lsn, m->lsn, w->b.n)) {
        case OUTBOX_EOS_SKIP:
            return 0;
        case OUTBOX_EOS_NEXT_BATCH:
            return 1;
        case OUTBOX_EOS_TAKE_ALONE:
            w->single_batch = true;
            break;
        case OUTBOX_EOS_TAKE:
            break;
        }
    }
    if (!w->fence_checked && check_holder(w, err) < 0)
        return -1;
    if (w->exactly_once && outbox_eos_begin(&w->eos, err) < 0)
        return -1;
    i = outbox_wal_batch_add(&w->b, &f, w->txn_commit_us, w->txn_commit_lsn, m->lsn);
    for (;;) {
        if (outbox_wal_batch_produce(&w->b, i, producer(w), &w->signer, err) == 0)
            break;
        if (strcmp(err->code, "kafka.queue_full") == 0) {
            (void)sg_kafka_flush(producer(w), 100, NULL);
            continue;
        }
        if (sg_kafka_err_refused(err))
            break; /* its slot says why; quarantined when the batch settles */
        if (w->exactly_once) {
            /* The transaction failed (a refusal the broker already
             * reported, say): its slot says why, and the batch ends here
             * for settle_eos() to find the cause. */
            w->eos_stop = true;
            break;
        }
        return -1;
    }
    sg_kafka_poll(producer(w), 0);
    if (w->failpoint_slow_produce)
        usleep(1000);
    return 0;
}

/* The batch is in Kafka: counted, traced, and the end of the last whole
 * transaction in it settled. */
static void settled(wal_relay_t *w)
{
    int64_t now_us;

    if (w->failpoint_after_ack) {
        sg_log_kv(SG_LOG_ERROR,
                  "failpoint relay.after_ack: aborting after acks, before the "
                  "confirmation",
                  NULL);
        abort();
    }
    now_us = sg_pgrepl_now_us();
    for (size_t i = 0; i < w->b.n; i++)
        sg_metric_observe(SG_M_OUTBOX_PUBLISH_LATENCY, NULL,
                          (double)(now_us - w->b.msgs[i].commit_us) / 1e6);
    sg_metric_add(SG_M_OUTBOX_PUBLISHED, NULL, w->b.n);
    if (w->ctx->otel)
        outbox_wal_batch_trace(&w->b, w->ctx->otel, sg_run_wall_ns());
    w->published += (int64_t)w->b.n;
    w->batches++;
    w->settled = w->commit_end;
    reset_batch(w);
}

/* Messages or the checkpoint not yet answered for by Kafka. */
static bool eos_pending(const wal_relay_t *w)
{
    return w->b.kafka.pending > 0 || w->eos.ck_batch.pending > 0;
}

/* With exactly once: the batch's messages and its checkpoint waited for
 * in one Kafka transaction, which commits or is aborted
 * (outbox_eos_verdict()). */
static int settle_eos(wal_relay_t *w, sg_err_t *err)
{
    const outbox_wal_msg_t *last = &w->b.msgs[w->b.n - 1];
    size_t refused = 0;
    sg_err_t ck_err;
    bool ck_sent;

    sg_err_clear(&ck_err);
    /* A checkpoint that cannot be sent (the transaction already failed)
     * is one more failure: the messages' reports say why. */
    ck_sent =
        !w->eos_stop && outbox_eos_checkpoint(&w->eos, last->commit_lsn, last->lsn, &ck_err) == 0;
    while (eos_pending(w) && w->b.kafka.failed == 0 && w->eos.ck_batch.failed == 0 && ck_sent &&
           producer(w) && !sg_run_stop_now) {
        (void)sg_kafka_flush(producer(w), 50, NULL);
        export_age(w);
    }
    if (eos_pending(w)) {
        outbox_eos_abort(&w->eos); /* fails what librdkafka held back */
        while (eos_pending(w) && producer(w) && !sg_run_stop_now)
            (void)sg_kafka_flush(producer(w), 50, NULL);
    }
    if (eos_pending(w))
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.stopped",
                          !producer(w) ? "the transactional producer was dropped (fenced, or it "
                                         "could not abort) before the batch settled"
                                       : "stopped before the batch settled");
    switch (outbox_eos_verdict(&w->eos, &w->b.kafka, w->b.slots, w->b.n, ck_sent, &ck_err, &refused,
                               err)) {
    case OUTBOX_EOS_READ_AGAIN:
        w->eos.refused_known = true;
        w->eos.refused_commit = w->b.msgs[refused].commit_lsn;
        w->eos.refused_msg = w->b.msgs[refused].lsn;
        return -1;
    case OUTBOX_EOS_FAILED:
        return -1;
    case OUTBOX_EOS_COMMIT:
        break;
    }
    for (size_t i = 0; i < w->b.n; i++)
        if (w->b.slots[i].failed &&
            outbox_wal_batch_quarantine(&w->b, i, w->pg, &w->b.slots[i].err, err) < 0) {
            outbox_eos_abort(&w->eos);
            return -1;
        }
    if (outbox_eos_finish(&w->eos, last->commit_lsn, last->lsn, err) < 0)
        return -1;
    settled(w);
    return 0;
}

/* Waits for Kafka's answer on the batch; then the end of the last whole
 * transaction in it is settled.  A failure that a retry may fix drops the
 * stream: it starts again from the confirmed position, and whatever was
 * published after it is published again (duplicates, by message id;
 * with exactly once, skipped by the checkpoint). */
static int settle(wal_relay_t *w, sg_err_t *err)
{
    if (w->exactly_once)
        return settle_eos(w, err);
    while (w->b.kafka.pending > 0 && producer(w) && !sg_run_stop_now) {
        (void)sg_kafka_flush(producer(w), 50, NULL);
        export_age(w);
    }
    if (w->b.kafka.pending > 0)
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.stopped",
                          "stopped before the batch settled");
    if (outbox_wal_batch_set_aside(&w->b, producer(w), &w->signer, w->pg, err) < 0)
        return -1;
    settled(w);
    return 0;
}

static int confirm(wal_relay_t *w, uint64_t lsn, sg_err_t *err)
{
    if (sg_pgrepl_confirm(w->rp, lsn > w->confirmed ? lsn : w->confirmed, err) < 0)
        return -1;
    if (lsn > w->confirmed)
        w->confirmed = lsn;
    if (w->confirmed > w->published_through || w->published_through_ms == 0) {
        w->published_through = w->confirmed;
        w->published_through_ms = wall_ms();
    }
    w->status_at = sg_run_now_ms() + STATUS_MS;
    return 0;
}

/* One CopyData message of the stream. */
static int on_copy(wal_relay_t *w, const unsigned char *buf, size_t len, sg_err_t *err)
{
    sg_wal_copy_t c;
    sg_pgo_msg_t m;

    if (sg_wal_copy_parse(buf, len, &c) < 0)
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.stream",
                          "a replication message of %zu bytes could not be read", len);
    if (c.kind == 'k') {
        /* Nothing in flight and no transaction open: everything before the
         * server's position was read and published, so it may go. */
        if (w->b.n == 0 && !w->in_txn && c.end > w->confirmed)
            return confirm(w, c.end, err);
        return c.reply ? confirm(w, w->settled, err) : 0;
    }
    if (sg_pgo_parse(c.data, c.len, &m) < 0)
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.stream",
                          "a pgoutput message of %zu bytes could not be read", c.len);
    switch (m.type) {
    case 'B':
        w->in_txn = true;
        w->txn_commit_us = m.time_us;
        w->txn_commit_lsn = m.lsn;
        return 0;
    case 'M':
        if (strcmp(m.prefix, SG_WAL_HEARTBEAT_PREFIX) == 0) {
            /* read back: what was written before it has been read (by
             * WAL position, not by clocks, which may differ) */
            if (w->hb_pending_ms && m.lsn >= w->hb_pending_lsn)
                w->hb_pending_ms = 0;
            return 0;
        }
        switch (take_message(w, &m, err)) {
        case 1:
            w->held = sg_xmalloc(len);
            memcpy(w->held, buf, len);
            w->held_len = len;
            w->eos_stop = true;
            return 0;
        case 0:
            return 0;
        default:
            return -1;
        }
    case 'C':
        w->in_txn = false;
        w->commit_end = m.end_lsn;
        if (w->b.n == 0)
            w->settled = m.end_lsn; /* its messages, if any, were all settled */
        return 0;
    default:
        return 0; /* a table's change: the publication has none */
    }
}

/* ACTIVE: housekeeping when due, then what the stream has, up to a
 * batch, then the batch settled and its position confirmed. */
static int wal_active(wal_relay_t *w, sg_err_t *err)
{
    const char *p[] = {w->slot};
    const unsigned char *buf;
    size_t len;
    uint64_t now = sg_run_now_ms(), wait_ms;
    int64_t first_us = 0;
    int rc, fired;

    if (now >= w->timers_at) {
        if ((fired = outbox_fire_timers(w->pg, w->timer_batch, w->poll_ms, &wait_ms, err)) < 0)
            return -1;
        w->timers_at = fired > 0 ? 0 : now + wait_ms;
    }
    if (now >= w->sweep_at) {
        char moved[32];

        if (one_value(w, "SELECT sagad_outbox_to_wal($1)", 1, p, moved, sizeof(moved), err) < 0)
            return -1;
        if (strcmp(moved, "0") != 0)
            sg_log_kv(SG_LOG_WARN, "moved rows found in the outbox table into the WAL", "rows",
                      moved, NULL);
        w->sweep_at = now + SWEEP_MS;
    }
    if (outbox_signer_refresh(&w->signer, w->pg, err) < 0)
        return -1;
    if (now >= w->heartbeat_at) {
        char lsn[32];
        unsigned hi, lo;

        if (one_value(w, "SELECT sagad_outbox_wal_heartbeat()", 0, NULL, lsn, sizeof(lsn), err) < 0)
            return -1;
        if (w->hb_pending_ms == 0 && sscanf(lsn, "%X/%X", &hi, &lo) == 2) {
            w->hb_pending_ms = wall_ms();
            w->hb_pending_lsn = (uint64_t)hi << 32 | lo;
        }
        w->heartbeat_at = now + HEARTBEAT_MS;
    }
    now = sg_run_now_ms();
    wait_ms = w->timers_at > now ? w->timers_at - now : 0;
    if (wait_ms > w->poll_ms)
        wait_ms = w->poll_ms;
    rc = 0;
    if (w->held) {
        /* the message held back for a batch of its own */
        unsigned char *held = w->held;

        w->held = NULL;
        rc = on_copy(w, held, w->held_len, err);
        free(held);
        if (rc < 0)
            return -1;
    }
    while (!w->single_batch && !w->eos_stop) {
        rc = sg_pgrepl_read(w->rp, (int)wait_ms, &buf, &len, err);
        if (rc == 0 && wait_ms == 0 && (int64_t)w->b.n >= DRAIN_BATCH &&
            (int64_t)sg_run_now_us() - first_us < DRAIN_WAIT_MS * 1000) {
            wait_ms = DRAIN_WAIT_MS; /* a backlog: the server is still sending */
            continue;
        }
        if (rc <= 0)
            break;
        if (w->b.n == 0)
            first_us = (int64_t)sg_run_now_us();
        if (on_copy(w, buf, len, err) < 0)
            return -1;
        wait_ms = 0; /* what is there is read; then the batch goes */
        if ((int64_t)w->b.n >= w->batch_max)
            break;
    }
    if (rc < 0)
        return -1;
    if (w->b.n > 0 && settle(w, err) < 0)
        return -1;
    w->failures = 0;
    if (w->settled > w->confirmed || sg_run_now_ms() >= w->status_at)
        return confirm(w, w->settled, err);
    return 0;
}

static void wal_loop(wal_relay_t *w)
{
    sg_err_t err;
    int rc;

    while (sg_run_running) {
        sg_err_clear(&err);
        sg_health_beat();
        sg_cli_reload(w->ctx->cli);
        export_age(w);
        switch (w->state) {
        case WAL_CONNECTING:
            if (wal_connect(w, &err) < 0) {
                wal_fail(w, "connect", &err);
                break;
            }
            wal_set_state(w, WAL_STANDBY, "connected");
            break;
        case WAL_STANDBY:
            rc = wal_standby(w, &err);
            if (rc < 0)
                wal_fail(w, "standby", &err);
            else if (rc > 0)
                wal_set_state(w, WAL_ACTIVE, "streaming from the slot");
            else
                outbox_nap(w->standby_poll_ms);
            break;
        case WAL_ACTIVE:
            if (wal_active(w, &err) < 0)
                wal_fail(w, "publish", &err);
            break;
        case WAL_BACKOFF:
            outbox_nap(sg_backoff_delay_ms(&w->backoff, w->failures, 0, &w->rng));
            wal_set_state(w, !w->pg ? WAL_CONNECTING : WAL_STANDBY, "retry");
            break;
        }
    }
}

int outbox_wal_run(const outbox_ctx_t *ctx)
{
    const sg_config_t *cfg = ctx->cli->cfg;
    const char *fp = getenv("SAGAD_TEST_FAILPOINT");
    sg_err_t err;
    wal_relay_t w;

    memset(&w, 0, sizeof(w));
    w.ctx = ctx;
    w.slot = sg_config_str(cfg, "relay.slot");
    w.repl_dsn = sg_config_str(cfg, "relay.replication_dsn");
    if (!w.repl_dsn || !*w.repl_dsn)
        w.repl_dsn = sg_config_str(cfg, "pg.dsn");
    w.sender_timeout_ms = (int)sg_config_int(cfg, "relay.wal_sender_timeout_ms");
    w.batch_max = sg_config_int(cfg, "relay.wal_batch_size");
    w.timer_batch = sg_config_int(cfg, "relay.timer_batch");
    w.poll_ms = (uint64_t)sg_config_int(cfg, "relay.poll_interval_ms");
    w.standby_poll_ms = (uint64_t)sg_config_int(cfg, "relay.standby_poll_ms");
    w.failpoint_after_ack = fp && strcmp(fp, "relay.after_ack") == 0;
    w.failpoint_slow_produce = fp && strcmp(fp, "relay.slow_produce") == 0;
    w.exactly_once = sg_config_bool(cfg, "relay.exactly_once");
    if (w.exactly_once)
        outbox_eos_init(&w.eos, cfg, w.slot, ctx->holder);
    w.backoff.base_ms = 100;
    w.backoff.cap_ms = 5000;
    sg_rng_seed(&w.rng, 0);
    outbox_signer_init(&w.signer, cfg);
    sg_pg_opts_from_config(&w.pgopts, cfg, "sagad-relay");
    w.pgopts.connect_attempts = 1; /* the state machine retries forever */
    w.pgopts.run = &sg_run_running;
    w.pgopts.waiting = sg_health_beat;
    outbox_wal_batch_init(&w.b, (size_t)w.batch_max, ctx->otel != NULL);
    wal_export_state(&w);
    sg_log_kv(SG_LOG_INFO, "relay source", "source", "wal", "slot", w.slot, "exactly_once",
              w.exactly_once ? "true" : "false", NULL);
    wal_loop(&w);
    /* A stop: the batch in flight is settled and confirmed first. */
    if (w.rp && w.b.n > 0 && !sg_run_stop_now && settle(&w, &err) == 0)
        (void)confirm(&w, w.settled, &err);
    drop_stream(&w);
    sg_pg_destroy(w.pg);
    outbox_wal_batch_free(&w.b);
    sg_mac_keys_clear(&w.signer.keys);
    sg_log_kv(SG_LOG_INFO, "relay stopped", "source", "wal", "published", SG_PG_INT(w.published),
              "batches", SG_PG_INT(w.batches), NULL);
    return w.exit_code;
}
