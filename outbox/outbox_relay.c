/* The relay loop: one state machine per process.
 *
 *   CONNECTING -> STANDBY -> ACTIVE -> (error) BACKOFF -> CONNECTING/ACTIVE
 *
 * STANDBY tries the advisory lock of every shard (sagad_relay_try_lock, the
 * runtime role's: schemas/sql/0021_least_privilege.sql); the session that holds a
 * shard's lock is its only publisher, and the server drops the lock when
 * that session dies, so a standby takes over within relay.standby_poll_ms.
 * ACTIVE publishes rows whose transaction is older than every running one,
 * in (tx, id) order, and moves the cursor (deleting the published rows) in
 * the same statement, on the same session that holds the lock, only after
 * Kafka acknowledged the whole batch. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outbox.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_health.h"
#include "sagad/sg_http.h"
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_otel.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"
#include "sagad/sg_trust.h"

#define STATS_MS     5000 /* backlog, oldest row and due timers are counted this often */
#define HEARTBEAT_MS 1000 /* the cursor row's heartbeat and blocked time are stored this often */

typedef enum outbox_state_e {
    RELAY_CONNECTING,
    RELAY_STANDBY,
    RELAY_ACTIVE,
    RELAY_BACKOFF,
} outbox_state_t;

static const char *const state_names[] = {"connecting", "standby", "active", "backoff"};

typedef struct outbox_relay_s {
    /* relay.* settings, read once: none is reloadable */
    int64_t batch_size, timer_batch, xmin_warn_ms;
    uint64_t poll_ms, standby_poll_ms;
    sg_pg_opts_t pgopts;
    sg_pg_t *pg;
    sg_kafka_t *producer;
    outbox_state_t state;
    int shard;           /* held shard, -1 when none */
    char shard_text[16]; /* the same, as the text parameter the queries take */
    int nshards;
    char holder[160];
    char cur_tx[32]; /* cursor: (tx, id) of the last acknowledged row */
    int64_t cur_id;
    unsigned failures; /* consecutive, drives the backoff */
    sg_backoff_t backoff;
    sg_rng_t rng;
    sg_kafka_batch_t batch;
    sg_kafka_slot_t *slots;     /* batch_size of them: each row's delivery */
    outbox_trace_hint_t *hints; /* batch_size of them with tracing on, else NULL */
    int64_t solo_left;          /* rows still to publish one at a time (see quarantine) */
    int64_t published;
    int64_t blocked_ms;
    bool blocked_warned;
    uint64_t next_heartbeat, next_blocked_check;
    bool failpoint_after_ack;
    sg_otel_t *otel; /* NULL: tracing off */
    int exit_code;
    sg_cli_t *cli;
    uint64_t next_stats;
    /* Due timers are moved when timers_at has come (the next timer the
     * last move saw, or relay.poll_interval_ms after it) or a writer told
     * of new ones (timers_news: SG_OUTBOX_TIMERS_MARK). */
    uint64_t timers_at;
    bool timers_news;
    outbox_signer_t signer;
} outbox_relay_t;

/* sagad_relay_state and the lock check of /readyz: known while standby or
 * active, and in a backoff that kept the session (and so the lock). */
static void export_state(const outbox_relay_t *r)
{
    for (int i = RELAY_CONNECTING; i <= RELAY_BACKOFF; i++)
        sg_metric_set(SG_M_RELAY_STATE, SG_LABELS(state_names[i]), i == (int)r->state);
    sg_health_set(SG_CHECK_LOCK,
                  r->state == RELAY_STANDBY || r->state == RELAY_ACTIVE ||
                      (r->state == RELAY_BACKOFF && r->pg),
                  "relay is %s: shard lock state not known", state_names[r->state]);
}

static void set_state(outbox_relay_t *r, outbox_state_t st, const char *why)
{
    if (r->state == st)
        return;
    sg_log_kv(SG_LOG_INFO, "relay state change", "from", state_names[r->state], "to",
              state_names[st], "why", why, NULL);
    r->state = st;
    if (st == RELAY_ACTIVE)
        r->timers_at = 0; /* a shard taken (again): look at once */
    export_state(r);
}

/* The gauges of a held shard leave the exposition with the shard. */
static void hide_shard(const outbox_relay_t *r)
{
    const char *const *l = SG_LABELS(r->shard_text);

    if (r->shard < 0)
        return;
    sg_metric_hide(SG_M_OUTBOX_BACKLOG, l);
    sg_metric_hide(SG_M_OUTBOX_OLDEST_AGE, l);
    sg_metric_hide(SG_M_OUTBOX_XMIN_BLOCKED, l);
}

/* Logs the error and moves to BACKOFF; a broken session also loses its
 * lock, so it goes back through CONNECTING. */
static void fail(outbox_relay_t *r, const char *what, const sg_err_t *err)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    ctx.error_code = err->code;
    sg_log(SG_LOG_WARN, &ctx, "%s: %s", what, err->message);
    r->failures++;
    /* A wrong schema, shard count or password will not heal by waiting:
     * stop, and let the supervisor (Kubernetes) show the crash loop. */
    if (r->state == RELAY_CONNECTING && err->cls == SG_ERRCLASS_PERMANENT) {
        r->exit_code = SG_EXIT_FAIL;
        sg_run_running = 0;
    }
    /* A reset session (pg.session_reset) lost its lock and LISTEN too. */
    if (!sg_pg_ok(r->pg) || strcmp(err->code, "pg.session_reset") == 0) {
        sg_health_set(SG_CHECK_PG, false, "%s", err->message);
        hide_shard(r);
        sg_pg_destroy(r->pg);
        r->pg = NULL;
        r->shard = -1;
    }
    set_state(r, RELAY_BACKOFF, what);
}

static int query(outbox_relay_t *r, const char *sql, int n, const char *const *params,
                 sg_pg_res_t **res, sg_err_t *err)
{
    return sg_pg_exec_cached(r->pg, sql, n, params, res, err);
}

/* CONNECTING: a session, the schema check, the shard count check, LISTEN. */
static int step_connect(outbox_relay_t *r, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    int version, db_shards;

    r->pg = sg_pg_connect(&r->pgopts, err);
    if (!r->pg)
        return -1;
    if (sg_migrate_current(r->pg, &version, err) < 0)
        return -1;
    sg_health_set(SG_CHECK_PG, true, NULL);
    sg_health_set(SG_CHECK_SCHEMA, version >= OUTBOX_SCHEMA_VERSION,
                  "database schema is at version %d, the relay needs %d: run `sagad-relay "
                  "migrate`",
                  version, OUTBOX_SCHEMA_VERSION);
    if (version < OUTBOX_SCHEMA_VERSION)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.schema.old",
                          "database schema is at version %d, the relay needs %d: run "
                          "`sagad-relay migrate`",
                          version, OUTBOX_SCHEMA_VERSION);
    if (outbox_signer_load(&r->signer, r->pg, err) < 0)
        return -1;
    if (query(r, "SELECT shards FROM relay_settings", 0, NULL, &res, err) < 0)
        return -1;
    db_shards = (int)sg_pg_res_int(res, 0, 0, 1);
    sg_pg_res_destroy(res);
    if (db_shards != r->nshards)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.config.shards",
                          "relay.shards is %d but the database has %d (relay_settings.shards): "
                          "make them agree",
                          r->nshards, db_shards);
    /* The relay's statements are prepared once (query()), which saves
     * their parse, but PostgreSQL must still plan each execution for the
     * values and the table as they are (force_custom_plan).  The outbox
     * is a queue: autovacuum sees it nearly empty, and a generic plan
     * made then, cached, is a sequential scan, which between vacuums
     * visits every dead row on every batch (measured: the relay's backend
     * went from 15% to 45% of a core at 1,000 steps/s).  A custom plan
     * sees the table's current size and takes the index (outbox_order).
     * enable_seqscan = off instead made plans that must scan a small
     * table (the shard trigger's relay_settings) cost past jit_above_cost:
     * 127 ms of JIT compilation per timer moved.
     *
     * The relay's commits do not wait for their WAL flush.  What it writes
     * is where it got to (the cursor, the published rows' deletion, the
     * heartbeat) and due timers moved into the outbox; PostgreSQL loses at
     * most the latest of those in a crash of its own, never a worker's
     * commit (the WAL is flushed in order: a later synchronous commit
     * makes every earlier one durable with it).  A lost cursor move
     * publishes its batch again and a lost timer move fires the timer
     * again, the same message with the same id: duplicates, which
     * delivery is at least once already allows.  Waiting for the flush
     * held every batch up by an fsync, and on a slow disk by its spikes.
     *
     * Both are set for the session in one statement; set_config() returns
     * the value the session now runs with, which is logged for the
     * operator (and for the test that would notice either one gone). */
    if (sg_pg_exec(r->pg,
                   "SELECT set_config('synchronous_commit', 'off', false), "
                   "set_config('plan_cache_mode', 'force_custom_plan', false)",
                   0, NULL, &res, err) < 0)
        return -1;
    sg_log_kv(SG_LOG_INFO, "relay session settings", "synchronous_commit", sg_pg_res_get(res, 0, 0),
              "plan_cache_mode", sg_pg_res_get(res, 0, 1), NULL);
    sg_pg_res_destroy(res);
    return sg_pg_listen(r->pg, SG_OUTBOX_CHANNEL, err);
}

static int load_cursor(outbox_relay_t *r, sg_err_t *err)
{
    const char *p[] = {r->shard_text, r->holder};
    sg_pg_res_t *res = NULL;

    if (query(r,
              "INSERT INTO relay_cursors (shard, holder, heartbeat_at) VALUES ($1, $2, now()) "
              "ON CONFLICT (shard) DO UPDATE SET holder = $2, heartbeat_at = now() "
              "RETURNING tx::text, id",
              2, p, &res, err) < 0)
        return -1;
    snprintf(r->cur_tx, sizeof(r->cur_tx), "%s", sg_pg_res_get(res, 0, 0));
    r->cur_id = sg_pg_res_int(res, 0, 1, 0);
    sg_pg_res_destroy(res);
    return 0;
}

/* STANDBY: try each shard's lock; the first one free is ours. */
static int step_standby(outbox_relay_t *r, sg_err_t *err)
{
    for (int s = 0; s < r->nshards; s++) {
        const char *p[] = {SG_PG_INT(s)};
        sg_pg_res_t *res = NULL;
        const char *got;
        bool mine;

        if (query(r, "SELECT sagad_relay_try_lock($1::integer)", 1, p, &res, err) < 0)
            return -1;
        got = sg_pg_res_get(res, 0, 0);
        mine = got && strcmp(got, "t") == 0;
        sg_pg_res_destroy(res);
        if (!mine)
            continue;
        r->shard = s;
        snprintf(r->shard_text, sizeof(r->shard_text), "%d", s);
        if (load_cursor(r, err) < 0)
            return -1;
        sg_log_kv(SG_LOG_INFO, "took over shard", "shard", r->shard_text, "cursor_tx", r->cur_tx,
                  NULL);
        return 1;
    }
    return 0;
}

/* Checked when a shard is taken: a restore into a new cluster always means
 * a new session, so it always passes through here first.
 *
 * After a dump/restore into a new cluster, transaction ids restart lower:
 * the cursor (and restored rows) can be ahead of the next xid.  Nothing
 * legitimate is ever at or above pg_snapshot_xmax, so such a row or cursor
 * proves the reset.  Recovery keeps every row: restored rows, and any row
 * inserted before the last of them, are renumbered to tx 3 so they go
 * first in id order (ids come from a sequence the restore carried over,
 * and one key's rows were inserted in commit order), and the cursor
 * restarts at (0, 0).  Published rows were deleted with their cursor move,
 * so nothing is published twice. */
static int check_xid_reset(outbox_relay_t *r, sg_err_t *err)
{
    const char *p[] = {r->shard_text, r->cur_tx};
    sg_pg_res_t *res = NULL;
    const char *ahead;
    bool reset;

    if (query(r,
              "SELECT $2::xid8 >= x OR EXISTS (SELECT 1 FROM outbox WHERE shard = $1 AND tx >= x) "
              "FROM (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS x) s",
              2, p, &res, err) < 0)
        return -1;
    ahead = sg_pg_res_get(res, 0, 0);
    reset = ahead && strcmp(ahead, "t") == 0;
    sg_pg_res_destroy(res);
    if (!reset)
        return 0;
    sg_log_kv(SG_LOG_WARN,
              "transaction ids restarted below the relay cursor (restored database?): "
              "renumbering waiting rows and restarting the cursor",
              "shard", r->shard_text, "cursor_tx", r->cur_tx, NULL);
    if (sg_pg_begin(r->pg, err) < 0)
        return -1;
    if (query(r,
              "UPDATE outbox SET tx = '3' WHERE shard = $1 AND id <= (SELECT max(id) FROM outbox "
              "WHERE shard = $1 AND tx >= pg_snapshot_xmax(pg_current_snapshot()))",
              1, p, NULL, err) < 0 ||
        query(r, "UPDATE relay_cursors SET tx = '0', id = 0, updated_at = now() WHERE shard = $1",
              1, p, NULL, err) < 0 ||
        sg_pg_commit(r->pg, err) < 0) {
        sg_pg_rollback(r->pg);
        return -1;
    }
    snprintf(r->cur_tx, sizeof(r->cur_tx), "0");
    r->cur_id = 0;
    return 0;
}

/* Queues one row for Kafka, signed. */
static int produce_row(outbox_relay_t *r, const sg_pg_res_t *res, size_t row, sg_err_t *err)
{
    const char *htext = sg_pg_res_get(res, row, 4);
    size_t key_len = 0, len = 0;
    unsigned char *key = sg_pg_res_bytea(res, row, 3, &key_len);
    unsigned char *payload = sg_pg_res_bytea(res, row, 5, &len);
    int rc = outbox_produce(r->producer, &r->signer, sg_pg_res_get(res, row, 2), key, key_len,
                            htext, htext ? strlen(htext) : 0, payload, len,
                            r->hints ? &r->hints[row] : NULL, &r->batch, err);

    free(key);
    free(payload);
    return rc;
}

/* Sends what is queued at once and serves delivery reports until the
 * batch is settled.  A stop request does not cut this short (the batch is
 * finished first); a second one does.  A flush overrides linger.ms while
 * it runs, so the batch leaves at once and together (one request per
 * partition); with linger.ms 0 its first message left alone and the rest
 * followed.  Requests are what the broker's CPU goes to: its request
 * threads took 49 of its 52% of a core at 1,000 steps/s. */
static void send_queued(outbox_relay_t *r, int timeout_ms)
{
    sg_err_t ignored; /* a timeout: the caller goes on or waits again */

    (void)sg_kafka_flush(r->producer, timeout_ms, &ignored);
}

static void await_acks(outbox_relay_t *r)
{
    while (r->batch.pending > 0 && !sg_run_stop_now)
        send_queued(r, 50);
}

static int advance_cursor(outbox_relay_t *r, const char *tx, const char *id, size_t n,
                          sg_err_t *err)
{
    const char *p[] = {r->shard_text, tx, id, SG_PG_INT(n), r->cur_tx, SG_PG_INT(r->cur_id)};

    /* One statement: the cursor moves and the published rows go together,
     * on the session holding the shard lock, so a relay that lost its lock
     * (its session died) cannot move anything.  The delete is bounded
     * below by the old cursor: an open range would walk every dead index
     * entry left by earlier batches until vacuum catches up. */
    if (query(r,
              "WITH d AS (DELETE FROM outbox WHERE shard = $1 AND (tx, id) > ($5::xid8, "
              "$6::bigint) AND (tx, id) <= ($2::xid8, $3::bigint)) "
              "UPDATE relay_cursors SET tx = $2::xid8, id = $3::bigint, "
              "published = published + $4::bigint, heartbeat_at = now(), updated_at = now() "
              "WHERE shard = $1",
              6, p, NULL, err) < 0)
        return -1;
    snprintf(r->cur_tx, sizeof(r->cur_tx), "%s", tx);
    r->cur_id = strtoll(id, NULL, 10);
    r->published += (int64_t)n;
    sg_metric_add(SG_M_OUTBOX_PUBLISHED, NULL, n);
    return 0;
}

/* With tracing on, the batch's publish spans (outbox_trace.c), from its
 * read to its last acknowledgement; a row moved to outbox_quarantine was
 * not published and has none.  n > 0 rows. */
static void trace_batch(outbox_relay_t *r, const sg_pg_res_t *res, size_t n, uint64_t read_at)
{
    int64_t end = sg_run_wall_ns(), start = end - (int64_t)(sg_run_now_ms() - read_at) * 1000000LL;
    outbox_trace_row_t *rows = sg_xcalloc(n, sizeof(*rows));
    char(*ids)[64] = sg_xcalloc(n, sizeof(*ids));
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (i < r->batch.nslots && r->slots[i].failed)
            continue;
        rows[k].topic = sg_pg_res_get(res, i, 2);
        rows[k].key = sg_pg_res_bytea(res, i, 3, &rows[k].key_len);
        rows[k].hint = &r->hints[i];
        snprintf(ids[k], sizeof(ids[k]), "%s|%s", sg_pg_res_get(res, i, 1),
                 sg_pg_res_get(res, i, 0));
        rows[k].id = ids[k];
        k++;
    }
    outbox_trace_batch(r->otel, rows, k, start, end);
    for (size_t i = 0; i < k; i++)
        free((void *)rows[i].key);
    free(ids);
    free(rows);
}

/* Copies row i, which Kafka refused for good (slot's err), into
 * outbox_quarantine; the cursor move that follows deletes it from the
 * outbox.  A row quarantined before (the relay stopped before its cursor
 * moved) is left as it was. */
static int quarantine_row(outbox_relay_t *r, const sg_pg_res_t *res, size_t i, const sg_err_t *why,
                          sg_err_t *err)
{
    const char *p[] = {r->shard_text, sg_pg_res_get(res, i, 0), why->code, why->message, r->holder};
    size_t key_len = 0;
    unsigned char *key = sg_pg_res_bytea(res, i, 3, &key_len);
    char *shown = key ? sg_text_visible_n(key, key_len, false) : NULL;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    free(key);
    if (query(r,
              "INSERT INTO outbox_quarantine (outbox_id, tx, shard, topic, key, headers, payload, "
              "created_at, error_code, error, holder) "
              "SELECT id, tx, shard, topic, key, headers, payload, created_at, $3, $4, $5 "
              "FROM outbox WHERE shard = $1 AND id = $2::bigint "
              "ON CONFLICT (outbox_id) DO NOTHING",
              5, p, NULL, err) < 0) {
        free(shown);
        return -1;
    }
    ctx.error_code = why->code;
    ctx.saga_id = shown;
    sg_log(SG_LOG_ERROR, &ctx,
           "outbox row %s (topic %s, key %s, shard %s) refused by Kafka for good, moved to "
           "outbox_quarantine; the shard goes on without it: %s",
           sg_pg_res_get(res, i, 0), sg_pg_res_get(res, i, 2), shown ? shown : "(none)",
           r->shard_text, why->message);
    sg_metric_inc(SG_M_OUTBOX_QUARANTINED, SG_LABELS(why->code));
    free(shown);
    return 0;
}

/* After the batch settled: which of its n rows Kafka refused.  Returns
 * the number refused for good (sg_kafka_err_refused), or -1 with err when
 * some row failed in a way a retry may fix: the whole batch is then sent
 * again, as before.  *reported: a refusal came by delivery report, where
 * Kafka may have refused a whole request, innocent rows with the guilty. */
static int refused_rows(outbox_relay_t *r, size_t n, bool *reported, sg_err_t *err)
{
    int refused = 0;

    *reported = false;
    for (size_t i = 0; i < n && i < r->batch.nslots; i++) {
        const sg_kafka_slot_t *slot = &r->slots[i];

        if (!slot->failed)
            continue;
        if (!sg_kafka_err_refused(&slot->err)) {
            *err = slot->err;
            sg_err_prefix(err, "%d of %zu messages not acknowledged; retrying from the cursor",
                          r->batch.failed, n);
            return -1;
        }
        refused++;
        if (slot->reported)
            *reported = true;
    }
    return refused;
}

/* Rows Kafka refused for good, among n read: quarantined when each is
 * known to be refused for itself (refused at once, or alone in its
 * batch).  A refusal by delivery report in a batch of several rows may
 * have taken its neighbours along (the broker refuses a request whole):
 * then the same rows are sent again one at a time (solo_left), and only
 * the row refused alone is quarantined.  Returns 1 when the batch is to
 * be read again that way, 0 when the cursor may move, -1 on error. */
static int set_aside(outbox_relay_t *r, const sg_pg_res_t *res, size_t n, int refused,
                     bool reported, sg_err_t *err)
{
    if (refused == 0)
        return 0;
    if (reported && n > 1) {
        r->solo_left = (int64_t)n;
        sg_log_kv(SG_LOG_WARN,
                  "Kafka refused a batch's message for good: sending its rows one at a time "
                  "to find which",
                  "shard", r->shard_text, "rows", SG_PG_INT(n), NULL);
        return 1;
    }
    for (size_t i = 0; i < n && i < r->batch.nslots; i++)
        if (r->slots[i].failed && quarantine_row(r, res, i, &r->slots[i].err, err) < 0)
            return -1;
    return 0;
}

/* Reads and publishes one batch.  Returns rows published, -1 on error. */
static int publish_batch(outbox_relay_t *r, sg_err_t *err)
{
    int64_t limit = r->solo_left > 0 ? 1 : r->batch_size;
    const char *p[] = {r->shard_text, r->cur_tx, SG_PG_INT(r->cur_id), SG_PG_INT(limit)};
    sg_pg_res_t *res = NULL;
    uint64_t read_at;
    size_t n;
    int rc = -1, refused, aside;
    bool reported;

    if (query(r,
              /* The text column is aliased: a bare `tx` in ORDER BY would
               * name it and sort xids as text ('29019' < '3'). */
              "SELECT o.id, o.tx::text AS tx_text, o.topic, o.key, o.headers::text, o.payload, "
              "(extract(epoch FROM clock_timestamp() - o.created_at) * 1000)::bigint "
              "FROM outbox o WHERE o.shard = $1 AND (o.tx, o.id) > ($2::xid8, $3::bigint) "
              "AND o.tx < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY o.tx, o.id LIMIT $4",
              4, p, &res, err) < 0)
        return -1;
    read_at = sg_run_now_ms();
    n = sg_pg_res_rows(res);
    if (n > 0)
        sg_log(SG_LOG_DEBUG, NULL, "batch of %zu rows after cursor %s/%lld, first %s/%s", n,
               r->cur_tx, (long long)r->cur_id, sg_pg_res_get(res, 0, 1), sg_pg_res_get(res, 0, 0));
    memset(&r->batch, 0, sizeof(r->batch));
    r->batch.slots = r->slots;
    r->batch.nslots = (size_t)r->batch_size;
    for (size_t i = 0; i < n; i++) {
        if (produce_row(r, res, i, err) < 0) {
            /* Queue full: serve reports and try the row again. */
            if (strcmp(err->code, "kafka.queue_full") == 0) {
                send_queued(r, 100);
                i--;
                continue;
            }
            /* Refused at once for good (its slot says why): the rest go on. */
            if (sg_kafka_err_refused(err))
                continue;
            await_acks(r);
            goto done;
        }
        sg_kafka_poll(r->producer, 0);
    }
    await_acks(r);
    if (r->batch.pending > 0) {
        sg_err_set(err, SG_ERRCLASS_TRANSIENT, "relay.stopped", "stopped before the batch settled");
        goto done;
    }
    if ((refused = refused_rows(r, n, &reported, err)) < 0 ||
        (aside = set_aside(r, res, n, refused, reported, err)) < 0)
        goto done;
    if (aside > 0) {
        rc = 0;
        goto done;
    }
    if (n > 0 && r->failpoint_after_ack) {
        sg_log_kv(SG_LOG_ERROR, "failpoint relay.after_ack: aborting after acks, before the cursor",
                  NULL);
        abort();
    }
    if (n > 0 && advance_cursor(r, sg_pg_res_get(res, n - 1, 1), sg_pg_res_get(res, n - 1, 0),
                                n - (size_t)refused, err) < 0)
        goto done;
    if (n == 0 || r->solo_left <= (int64_t)n)
        r->solo_left = 0; /* the rows of the refused batch are all through */
    else
        r->solo_left -= (int64_t)n;
    if (r->otel && n > 0)
        trace_batch(r, res, n, read_at);
    /* Insert to acknowledged publish: the row's age when read, plus the
     * time its batch took to be acknowledged. */
    for (size_t i = 0; i < n; i++)
        sg_metric_observe(
            SG_M_OUTBOX_PUBLISH_LATENCY, NULL,
            (double)(sg_pg_res_int(res, i, 6, 0) + (int64_t)(sg_run_now_ms() - read_at)) / 1000.0);
    rc = (int)n;
done:
    sg_pg_res_destroy(res);
    return rc;
}

/* How long committed rows have waited behind the xmin horizon; warns once
 * per episode past relay.xmin_warn_ms, naming the oldest transaction.
 * Measured as often as the heartbeat stores it, not on every idle turn
 * (each NOTIFY wakes the relay). */
static void check_blocked(outbox_relay_t *r)
{
    const char *p[] = {r->shard_text};
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    if (sg_run_now_ms() < r->next_blocked_check)
        return;
    r->next_blocked_check = sg_run_now_ms() + HEARTBEAT_MS;
    if (query(r,
              "SELECT coalesce((extract(epoch FROM now() - min(created_at)) * 1000)::bigint, 0) "
              "FROM outbox WHERE shard = $1 AND tx >= pg_snapshot_xmin(pg_current_snapshot())",
              1, p, &res, &err) < 0)
        return;
    r->blocked_ms = sg_pg_res_int(res, 0, 0, 0);
    sg_pg_res_destroy(res);
    sg_metric_set(SG_M_OUTBOX_XMIN_BLOCKED, SG_LABELS(r->shard_text),
                  (double)r->blocked_ms / 1000.0);
    if (r->blocked_ms < r->xmin_warn_ms) {
        r->blocked_warned = false;
        return;
    }
    if (r->blocked_warned)
        return;
    r->blocked_warned = true;
    if (query(r,
              "SELECT pid::text, coalesce(state, ''), "
              "coalesce(extract(epoch FROM now() - xact_start)::bigint, 0)::text, "
              "coalesce(left(query, 120), '') FROM pg_stat_activity "
              "WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
              "ORDER BY age(backend_xid) DESC LIMIT 1",
              0, NULL, &res, &err) < 0)
        return;
    if (sg_pg_res_rows(res) == 1)
        sg_log_kv(SG_LOG_WARN,
                  "a long-running transaction holds the outbox back (rows wait, none are "
                  "skipped); end it or raise relay.xmin_warn_ms",
                  "pid", sg_pg_res_get(res, 0, 0), "state", sg_pg_res_get(res, 0, 1), "age_s",
                  sg_pg_res_get(res, 0, 2), "query", sg_pg_res_get(res, 0, 3), NULL);
    sg_pg_res_destroy(res);
}

static int heartbeat(outbox_relay_t *r, sg_err_t *err)
{
    const char *p[] = {r->shard_text, r->holder, SG_PG_INT(r->blocked_ms)};

    if (sg_run_now_ms() < r->next_heartbeat)
        return 0;
    r->next_heartbeat = sg_run_now_ms() + HEARTBEAT_MS;
    return query(r,
                 "UPDATE relay_cursors SET holder = $2, heartbeat_at = now(), "
                 "xmin_blocked_ms = $3::bigint WHERE shard = $1",
                 3, p, NULL, err);
}

/* The held shard's backlog and oldest row, the due timers and the pending
 * dead letters, for the gauges.  The oldest row is the next one in
 * publishing order (an index scan), close enough to the oldest insert for
 * an alert; the dead letters use the (status, created_at) index.  The
 * outbox is read after the cursor only: the published rows before it are
 * deleted, but until vacuum their dead entries lie at the start of the
 * index, and counting over them took tens of milliseconds after a large
 * backlog, a stall of every saga's next hop once per STATS_MS. */
static void export_stats(outbox_relay_t *r)
{
    const char *p[] = {r->shard_text, r->cur_tx, SG_PG_INT(r->cur_id)};
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    if (sg_run_now_ms() < r->next_stats)
        return;
    r->next_stats = sg_run_now_ms() + STATS_MS;
    if (query(
            r,
            "SELECT (SELECT count(*) FROM outbox WHERE shard = $1 AND (tx, id) > ($2::xid8, "
            "$3::bigint)), "
            "coalesce((SELECT extract(epoch FROM now() - created_at) FROM outbox WHERE shard = $1 "
            "AND (tx, id) > ($2::xid8, $3::bigint) ORDER BY tx, id LIMIT 1), 0)::float8, "
            "(SELECT count(*) FROM timers WHERE due_at <= now()), "
            "(SELECT count(*) FROM dead_letters WHERE status = 'pending'), "
            "coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM dead_letters "
            "WHERE status = 'pending'), 0)::float8",
            3, p, &res, &err) < 0)
        return;
    sg_metric_set(SG_M_OUTBOX_BACKLOG, SG_LABELS(r->shard_text),
                  (double)sg_pg_res_int(res, 0, 0, 0));
    sg_metric_set(SG_M_OUTBOX_OLDEST_AGE, SG_LABELS(r->shard_text),
                  strtod(sg_pg_res_get(res, 0, 1) ? sg_pg_res_get(res, 0, 1) : "0", NULL));
    sg_metric_set(SG_M_TIMERS_DUE, NULL, (double)sg_pg_res_int(res, 0, 2, 0));
    sg_metric_set(SG_M_DLQ_PENDING, NULL, (double)sg_pg_res_int(res, 0, 3, 0));
    sg_metric_set(SG_M_DLQ_OLDEST_AGE, NULL,
                  strtod(sg_pg_res_get(res, 0, 4) ? sg_pg_res_get(res, 0, 4) : "0", NULL));
    sg_pg_res_destroy(res);
}

/* ACTIVE: timers, one batch, and a wait when there is nothing to do.
 *
 * The timer move runs only when a timer may be due: the relay wakes for
 * every worker commit, and moving timers on each wake was the most run
 * statement of its backend, planned every time, to find none due.  The
 * worker's notification after a commit that wrote timers carries
 * SG_OUTBOX_TIMERS_MARK; another writer's new timer (an operator's
 * INSERT) is seen within relay.poll_interval_ms, as the move still runs
 * at least that often. */
static int step_active(outbox_relay_t *r, sg_err_t *err)
{
    int fired = 0, n;
    uint64_t wait_ms, now;

    /* Notifications that came with the last cycle's results, when it was
     * too busy to wait (a batch is read next anyway). */
    (void)sg_pg_notified(r->pg, SG_OUTBOX_TIMERS_MARK, &r->timers_news);
    if (r->timers_news || sg_run_now_ms() >= r->timers_at) {
        r->timers_news = false;
        if ((fired = outbox_fire_timers(r->pg, r->timer_batch, r->poll_ms, &wait_ms, err)) < 0)
            return -1;
        /* the next timer, or the poll; at once while a move was full */
        r->timers_at = fired > 0 ? 0 : sg_run_now_ms() + wait_ms;
    }
    if (outbox_signer_refresh(&r->signer, r->pg, err) < 0)
        return -1;
    if ((n = publish_batch(r, err)) < 0)
        return -1;
    r->failures = 0;
    if (heartbeat(r, err) < 0)
        return -1;
    export_stats(r);
    if (n >= r->batch_size || fired > 0 || r->solo_left > 0 || !sg_run_running)
        return 0;
    check_blocked(r);
    now = sg_run_now_ms();
    if (sg_pg_wait_notify(r->pg, now < r->timers_at ? (int)(r->timers_at - now) : 0,
                          SG_OUTBOX_TIMERS_MARK, &r->timers_news, err) < 0)
        return -1;
    return 0;
}

static void release(outbox_relay_t *r)
{
    const char *p[] = {r->shard_text};
    sg_err_t err;

    if (!r->pg || r->shard < 0)
        return;
    if (query(r, "SELECT sagad_relay_unlock($1::integer)", 1, p, NULL, &err) < 0)
        sg_log_kv(SG_LOG_WARN, "cannot release the shard lock (the server drops it on close)",
                  "error", err.message, NULL);
    hide_shard(r);
    r->shard = -1;
}

static void run_loop(outbox_relay_t *r)
{
    sg_err_t err;
    int rc;

    while (sg_run_running) {
        sg_err_clear(&err);
        sg_health_beat();
        sg_cli_reload(r->cli);
        switch (r->state) {
        case RELAY_CONNECTING:
            if (step_connect(r, &err) < 0) {
                fail(r, "connect", &err);
                break;
            }
            set_state(r, RELAY_STANDBY, "connected");
            break;
        case RELAY_STANDBY:
            rc = step_standby(r, &err);
            if (rc < 0)
                fail(r, "standby", &err);
            else if (rc > 0)
                set_state(r, check_xid_reset(r, &err) < 0 ? RELAY_BACKOFF : RELAY_ACTIVE,
                          "shard lock acquired");
            else
                outbox_nap(r->standby_poll_ms);
            break;
        case RELAY_ACTIVE:
            if (step_active(r, &err) < 0)
                fail(r, "publish", &err);
            break;
        case RELAY_BACKOFF:
            outbox_nap(sg_backoff_delay_ms(&r->backoff, r->failures, 0, &r->rng));
            set_state(r,
                      !r->pg          ? RELAY_CONNECTING
                      : r->shard >= 0 ? RELAY_ACTIVE
                                      : RELAY_STANDBY,
                      "retry");
            break;
        }
    }
}

int outbox_cmd_run(sg_cli_t *cli, int argc, char **argv)
{
    char errstr[512], timeout[32], host[64] = "unknown";
    /* linger.ms stays librdkafka's (5 ms): a batch is queued whole and then
     * flushed (await_acks), which sends it at once. */
    const char *props[] = {"enable.idempotence", "true",  "acks", "all",
                           "message.timeout.ms", timeout, NULL};
    const char *fp = getenv("SAGAD_TEST_FAILPOINT");
    sg_http_t *http;
    outbox_janitor_t *janitor;
    outbox_relay_t r;

    (void)argc;
    (void)argv;
    if (sg_config_bool(cli->cfg, "relay.exactly_once") &&
        strcmp(sg_config_str(cli->cfg, "relay.source"), "wal") != 0) {
        fprintf(stderr,
                "%s: relay.exactly_once needs relay.source = wal: the table source's batches "
                "have no WAL position to checkpoint (docs/RELAY.md, \"Exactly once\")\n",
                cli->prog);
        return SG_EXIT_USAGE;
    }
    memset(&r, 0, sizeof(r));
    r.cli = cli;
    r.shard = -1;
    r.nshards = (int)sg_config_int(cli->cfg, "relay.shards");
    r.batch_size = sg_config_int(cli->cfg, "relay.batch_size");
    r.timer_batch = sg_config_int(cli->cfg, "relay.timer_batch");
    r.xmin_warn_ms = sg_config_int(cli->cfg, "relay.xmin_warn_ms");
    r.poll_ms = (uint64_t)sg_config_int(cli->cfg, "relay.poll_interval_ms");
    r.standby_poll_ms = (uint64_t)sg_config_int(cli->cfg, "relay.standby_poll_ms");
    outbox_signer_init(&r.signer, cli->cfg);
    r.backoff.base_ms = 100;
    r.backoff.cap_ms = 5000;
    r.failpoint_after_ack = fp && strcmp(fp, "relay.after_ack") == 0;
    sg_rng_seed(&r.rng, 0);
    gethostname(host, sizeof(host) - 1);
    snprintf(r.holder, sizeof(r.holder), "%s:%d", host, (int)getpid());
    sg_pg_opts_from_config(&r.pgopts, cli->cfg, "sagad-relay");
    r.pgopts.connect_attempts = 1; /* the state machine retries forever */
    r.pgopts.run = &sg_run_running;
    r.pgopts.waiting = sg_health_beat;
    snprintf(timeout, sizeof(timeout), "%lld",
             (long long)sg_config_int(cli->cfg, "relay.delivery_timeout_ms"));
    r.producer = sg_kafka_new(cli->cfg, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    if (!r.producer) {
        fprintf(stderr, "%s: %s\n", cli->prog, errstr);
        return SG_EXIT_USAGE;
    }
    if (sg_otel_start(cli->cfg, "sagad-relay", &r.otel, errstr, sizeof(errstr)) < 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, errstr);
        sg_kafka_destroy(r.producer);
        return SG_EXIT_USAGE;
    }
    sg_run_trap_signals();
    http = sg_http_start(cli->cfg, SG_METRICS_RELAY,
                         SG_CHECK_BIT(SG_CHECK_PG) | SG_CHECK_BIT(SG_CHECK_SCHEMA) |
                             SG_CHECK_BIT(SG_CHECK_KAFKA) | SG_CHECK_BIT(SG_CHECK_LOCK),
                         errstr, sizeof(errstr));
    if (!http) {
        fprintf(stderr, "%s: %s\n", cli->prog, errstr);
        sg_otel_stop(r.otel);
        sg_kafka_destroy(r.producer);
        return SG_EXIT_USAGE;
    }
    sg_health_set_probe(SG_CHECK_KAFKA, sg_health_kafka_probe, r.producer, 2000);
    export_state(&r);
    sg_log_kv(SG_LOG_INFO, "relay starting", "holder", r.holder, "librdkafka", sg_kafka_version(),
              NULL);
    janitor = outbox_janitor_start(cli->cfg);
    r.slots = sg_xcalloc((size_t)r.batch_size, sizeof(*r.slots));
    if (r.otel)
        r.hints = sg_xcalloc((size_t)r.batch_size, sizeof(*r.hints));
    if (strcmp(sg_config_str(cli->cfg, "relay.source"), "wal") == 0) {
        outbox_ctx_t ctx = {cli, r.producer, r.otel, r.holder};

        r.exit_code = outbox_wal_run(&ctx);
    } else {
        run_loop(&r);
    }
    outbox_janitor_stop(janitor);
    /* Unready since the stop request; the endpoint goes before the
     * handles its probes use. */
    sg_http_stop(http);
    sg_health_clear_probe(SG_CHECK_KAFKA);
    release(&r);
    sg_pg_destroy(r.pg);
    if (!sg_run_stop_now)
        sg_kafka_flush(r.producer, 10000, NULL);
    sg_kafka_destroy(r.producer);
    free(r.slots);
    free(r.hints);
    sg_otel_stop(r.otel);
    sg_mac_keys_clear(&r.signer.keys);
    sg_log_kv(SG_LOG_INFO, "relay stopped", NULL);
    return r.exit_code;
}
