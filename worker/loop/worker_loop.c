/* The worker loop: fetch, decide in batches, call, commit.
 *
 * One thread owns Kafka and PostgreSQL.  Each turn it
 *   1. takes what Kafka has (up to worker.max_in_flight unfinished commands,
 *      and a window of WINDOW_FACTOR times that behind the stored offset),
 *   2. takes the calls the pool finished,
 *   3. sends one transaction over a batch of both: the saga rows are
 *      locked, each command is decided (worker_saga.c), and the offsets of
 *      the touched partitions move over their contiguous finished prefix
 *      through sagad_fence(), which refuses a worker that lost the
 *      partition (owner epoch); up to worker.transactions_in_flight of them
 *      are out at once (see turn());
 *   4. hands the calls decided in a transaction that committed to the
 *      pool, and
 *   5. sleeps in poll() until Kafka, the pool or PostgreSQL has something.
 *
 * A saga has at most one command being decided; its later commands wait
 * in its queue, so a slow step holds back its own saga only.  Its calls
 * run one at a time too, but for a parallel group's members, whose calls
 * run side by side out of the queue (worker_cmdq.c, "detached calls").  The offset
 * PostgreSQL keeps is the first unfinished offset of the partition, which
 * is where the next owner starts.
 *
 * This file owns the main loop and its turn: intake, the choice of what
 * goes into a batch and when, the waits, crash-loop isolation, the drain
 * and the rebalance hook.  It calls down into worker_txn.c (transactions),
 * worker_parts.c, worker_chain.c and worker_cmdq.c; worker_run.c calls
 * loop_run() once, which calls the run back after each turn. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_health.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_run.h"
#include "worker_loop_int.h"

/* Full (intake_full(): any limit), the worker just stops taking messages:
 * librdkafka keeps what it prefetched (bounded by queued.max.messages.
 * kbytes) and the next message is taken the moment a slot frees, which on
 * a busy worker is many times a second.  Only when no slot has freed for
 * this long are the partitions paused, so that the worker can poll (to
 * serve rebalances and stay within max.poll.interval.ms) without taking
 * messages.  A pause drops the prefetched messages and a resume fetches
 * them again, which is slow (up to a second in librdkafka 2.0; with 2.12,
 * pausing after 2 s of being full, however busy, cut the http bench by a
 * third), so it is kept for a worker that is stuck, not a busy one. */
#define PAUSE_AFTER_MS 2000

/* ---- intake: Kafka and the pool ----------------------------------------- */

/* Enough taken: max_in_flight unfinished commands, the whole window, or
 * worker.intake_max_bytes of messages.  Checked before each message is
 * taken, so the last one taken may pass the byte budget by its own
 * charge (a message larger than the budget is still taken, alone). */
static bool intake_full(const loop_t *L)
{
    return (int)(L->active - L->active_chained) >= L->max_in_flight ||
           L->held >= (size_t)L->max_in_flight * WINDOW_FACTOR ||
           L->held_bytes >= L->intake_max_bytes;
}

/* Empties the pipe librdkafka writes to when messages arrive: what it
 * signalled is taken now (intake) or left for the loop (a drain). */
static void kafka_wake_clear(loop_t *L)
{
    char skip[64];

    while (read(L->kafka_pipe[0], skip, sizeof(skip)) > 0)
        ;
}

/* The relay's sagad-mac on cmd's message, checked under
 * security.internal_auth: true when it holds (or, accept_unsigned, is
 * missing).  Else cmd is poison, input.command.unauthenticated, saying
 * why, and false. */
static bool relay_signed(loop_t *L, worker_cmd_t *cmd, const void *key, size_t key_len,
                         const void *payload, size_t len)
{
    sg_decoded_t *dec = &cmd->dec;
    const char *type = sg_json_string(sg_json_member(dec->doc, "type"));
    const char *topic = sg_kafka_msg_topic(cmd->msg), *why;
    const void *hv;
    size_t hlen = 0;
    sg_mac_verdict_t v;
    sg_err_t kerr;

    if (L->w.trust == SG_TRUST_OFF)
        return true;
    hv = sg_kafka_msg_header(cmd->msg, SG_MAC_HEADER, &hlen);
    if (L->w.keys.expires_ms && loop_keys_reload(L, false, &kerr) < 0)
        sg_log_kv(SG_LOG_WARN, "cannot re-read the internal keys", "error", kerr.message, NULL);
    v = sg_mac_verify(&L->w.keys, topic, key, key_len, payload, len, hv, hlen);
    if (v == SG_MAC_UNKNOWN_KEY) {
        /* A key rotated in since the last read, perhaps: read again (at
         * most once a second) before refusing. */
        if (loop_keys_reload(L, true, &kerr) < 0)
            sg_log_kv(SG_LOG_WARN, "cannot re-read the internal keys", "error", kerr.message, NULL);
        v = sg_mac_verify(&L->w.keys, topic, key, key_len, payload, len, hv, hlen);
    }
    if (v == SG_MAC_OK || (v == SG_MAC_MISSING && L->w.trust == SG_TRUST_ACCEPT_UNSIGNED))
        return true;
    why = v == SG_MAC_MISSING       ? "missing"
          : v == SG_MAC_MALFORMED   ? "malformed"
          : v == SG_MAC_UNKNOWN_KEY ? "made with a key this worker does not hold"
                                    : "wrong (the message changed, or was forged)";
    if (sg_trust_internal(dec->type))
        sg_err_set(&dec->err, SG_ERRCLASS_POISON, "input.command.unauthenticated",
                   "%s is a command only sagad-relay may publish, and its sagad-mac header is "
                   "%s: not acted on. If sagad sent it (an older relay during an upgrade, a key "
                   "expired while it waited), replay it with dlq-tool, which the relay signs",
                   type, why);
    else
        sg_err_set(&dec->err, SG_ERRCLASS_POISON, "input.command.unauthenticated",
                   "%s was read on the internal topic %s, which only sagad-relay may publish, "
                   "and its sagad-mac header is %s: not acted on. Producers write it to "
                   "topic.commands (%s)",
                   type, topic, why, L->w.topic_commands);
    dec->type = SG_CMD_POISON;
    return false;
}

/* When a control command read on the internal topic was read on the
 * commands topic and forwarded (its sagad-forwarded-at header, unix
 * seconds): the age of its signature counts to then, not to now, so a
 * relay that was down does not make it expire.  Only the relay writes
 * the internal topic; without ACLs, a copy whose header was changed is
 * still the copy of a control forwarded once, which its saga answers once
 * (its command id).  now_s when absent, unreadable or ahead of now_s. */
static int64_t forwarded_at(const sg_kafka_msg_t *msg, int64_t now_s)
{
    size_t hlen = 0;
    const char *hv = sg_kafka_msg_header(msg, WORKER_FORWARDED_AT, &hlen);
    int64_t t = 0;

    if (!hv || hlen == 0 || hlen > 18)
        return now_s;
    for (size_t i = 0; i < hlen; i++) {
        if (hv[i] < '0' || hv[i] > '9')
            return now_s;
        t = t * 10 + (hv[i] - '0');
    }
    return t > 0 && t < now_s ? t : now_s;
}

static bool is_control_type(sg_ctype_t type)
{
    return type == SG_CMD_CANCEL || type == SG_CMD_APPROVE || type == SG_CMD_REJECT;
}

/* The trust boundary at the door (docs/ARCHITECTURE.md, "Trust
 * boundary").  Every message of the internal topic, and an internal
 * command wherever it is read (on the commands topic: one published there
 * before the upgrade), must carry the relay's valid sagad-mac: else it is
 * poison, dead-lettered with input.command.unauthenticated, never acted
 * on.  A control command read on the commands topic is not decided there:
 * it is forwarded to the internal topic (worker_forward()), where its
 * saga's other commands are, and decided when read again.  A saga.start or
 * a control command carrying sagad-auth gets its principal verified here,
 * once; what the principal may do is the decision's (worker_saga.c,
 * worker_saga_start.c). */
static void authenticate(loop_t *L, worker_cmd_t *cmd, const void *key, size_t key_len,
                         const void *payload, size_t len)
{
    sg_decoded_t *dec = &cmd->dec;
    bool internal_topic = cmd->part->topic == LOOP_TOPIC_INTERNAL;
    int64_t now_s = (int64_t)time(NULL);
    const void *hv;
    const char *obo;
    size_t hlen = 0;

    if (dec->type == SG_CMD_POISON)
        return;
    if ((internal_topic || sg_trust_internal(dec->type)) &&
        !relay_signed(L, cmd, key, key_len, payload, len))
        return;
    if (sg_trust_internal(dec->type))
        return;
    if (is_control_type(dec->type) && !internal_topic) {
        if (len > L->w.max_outgoing) {
            /* Its fields are bounded (control-command.schema.json): only
             * padding makes it this large, and no larger message goes out. */
            dec->type = SG_CMD_POISON;
            sg_err_set(&dec->err, SG_ERRCLASS_POISON, "input.too_large",
                       "the control command is %zu bytes, more than limits.max_outgoing_bytes "
                       "(%zu), the most sagad forwards to its internal topic: send it without "
                       "the padding",
                       len, L->w.max_outgoing);
            return;
        }
        cmd->forward = true;
        return;
    }
    if (is_control_type(dec->type))
        now_s = forwarded_at(cmd->msg, now_s);
    hv = sg_kafka_msg_header(cmd->msg, SG_AUTH_HEADER, &hlen);
    obo = dec->type == SG_CMD_START ? sg_json_string(sg_json_member(dec->doc, "on_behalf_of"))
                                    : dec->on_behalf_of;
    if (!hv && dec->type == SG_CMD_START && !obo)
        return; /* unsigned: the decision says whether that may start it */
    dec->who = sg_keyring_verify(L->w.keyring, hv, hlen, key, key_len, payload, len, now_s,
                                 L->w.signature_max_age_s, &dec->auth);
    if (dec->who && obo && !(dec->who->roles & SG_ROLE_DELEGATE)) {
        sg_err_set(&dec->auth, SG_ERRCLASS_PERMANENT, "input.auth.forbidden",
                   "it names on_behalf_of %s, but its signer %s does not have the delegate role "
                   "in the keyring: only a delegating principal (sagad-gateway) signs for "
                   "another",
                   obo, dec->who->name);
        dec->who = NULL;
    }
    if (dec->who)
        dec->as = obo ? obo : dec->who->name;
    if (!dec->who && dec->type == SG_CMD_START && L->w.trust != SG_TRUST_OFF) {
        /* A replay (dlq-tool: through the outbox, so signed by the relay)
         * keeps the submission's headers, and its signature no longer
         * holds once the payload was edited or its time has passed: it is
         * the operator's submission now, unsigned (a saga with a gate is
         * then refused: its producer must submit it again, signed). */
        const void *mv = sg_kafka_msg_header(cmd->msg, SG_MAC_HEADER, &hlen);
        if (mv && sg_mac_verify(&L->w.keys, sg_kafka_msg_topic(cmd->msg), key, key_len, payload,
                                len, mv, hlen) == SG_MAC_OK)
            memset(&dec->auth, 0, sizeof(dec->auth));
    }
}

/* A message from either consumer, taking turns so that neither topic waits
 * behind the other's backlog: 1 with *msg, 0 when neither has one (each
 * polled: that serves its rebalances), -1 with err. */
static int consume_next(loop_t *L, sg_kafka_msg_t **msg, sg_err_t *err)
{
    for (int i = 0; i < LOOP_NTOPICS; i++) {
        int t = (L->next_consumer + i) % LOOP_NTOPICS;
        int rc = sg_kafka_consume(L->consumers[t], 0, msg, err);

        if (rc != 0) {
            L->next_consumer = (t + 1) % LOOP_NTOPICS;
            return rc;
        }
    }
    return 0;
}

/* Pauses (or resumes) both consumers; 0 when both did. */
static int pause_all(loop_t *L, bool pause)
{
    int rc = 0;

    for (int t = 0; t < LOOP_NTOPICS; t++)
        if (sg_kafka_pause(L->consumers[t], pause) < 0)
            rc = -1;
    return rc;
}

static void intake(loop_t *L)
{
    sg_kafka_msg_t *msg;
    sg_err_t err;

    kafka_wake_clear(L);
    /* Paused, one poll serves rebalances and keeps the group membership
     * (max.poll.interval.ms); paused partitions yield no messages. */
    if (L->paused || !intake_full(L))
        L->last_poll = sg_run_now_ms();
    for (bool once = L->paused; once || !intake_full(L); once = false) {
        int rc;
        worker_part_t *p;
        worker_cmd_t *cmd;
        const void *payload;
        size_t len;

        rc = consume_next(L, &msg, &err);
        if (rc == 0)
            break;
        if (rc < 0) {
            sg_log_kv(SG_LOG_WARN, "Kafka consume error", "error", err.message, "error_code",
                      err.code, NULL);
            break;
        }
        p = loop_part_find(L, loop_topic_find(L, sg_kafka_msg_topic(msg)),
                           sg_kafka_msg_partition(msg));
        if (!p || sg_kafka_msg_offset(msg) < p->next_fetch) {
            /* Not ours (any more), or already taken. */
            sg_kafka_msg_destroy(msg);
            continue;
        }
        cmd = loop_cmd_new(L);
        L->held++;
        loop_active_add(L, cmd, 1);
        L->w.stats.consumed++;
        cmd->msg = msg;
        cmd->part = p;
        cmd->offset = sg_kafka_msg_offset(msg);
        p->next_fetch = cmd->offset + 1;
        loop_part_append(p, cmd);
        payload = sg_kafka_msg_payload(msg, &len);
        sg_submit_decode(payload ? payload : "", payload ? len : 0, &L->w.limits, &cmd->dec);
        {
            size_t key_len = 0;
            const void *key = sg_kafka_msg_key(msg, &key_len);
            sg_submit_check_key(&cmd->dec, key, key_len);
            authenticate(L, cmd, key, key_len, payload ? payload : "", payload ? len : 0);
        }
        /* What the message may cost while held: its bytes as received,
         * up to 3 times more while its dead letter is written (the base64
         * text and libpq's copy of it: bench-flood's peak passed the
         * budget by that much when only the first two terms counted), and
         * while parsed its strings again and 64 bytes per value. */
        cmd->charge = 4 * len + (cmd->dec.doc ? len + 64 * (size_t)cmd->dec.nodes : 0);
        L->held_bytes += cmd->charge;
        loop_chain_intake(L, cmd);
    }
    if (!L->paused && intake_full(L) && sg_run_now_ms() - L->last_poll >= PAUSE_AFTER_MS) {
        L->paused = pause_all(L, true) == 0;
        if (L->paused)
            sg_metric_inc(SG_M_INTAKE_PAUSES, NULL);
    } else if (L->paused && (int)(L->active - L->active_chained) < L->max_in_flight * 3 / 4 &&
               L->held < (size_t)L->max_in_flight * WINDOW_FACTOR * 3 / 4 &&
               L->held_bytes < L->intake_max_bytes / 4 * 3) {
        L->paused = !(pause_all(L, false) == 0);
    }
}

void loop_take_returned(loop_t *L)
{
    size_t n = 0;
    void **done;
    uint64_t now;

    worker_pool_ack(L->pool); /* first, so a call finishing now wakes us again */
    done = worker_pool_take_done(L->pool, &n);
    now = n ? sg_run_now_us() : 0;

    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *cmd = done[i];
        uint64_t took = now - cmd->call_t0;
        L->calling--;
        L->call_avg_us = L->call_avg_us ? (7 * L->call_avg_us + took) / 8 : took;
        if (cmd->abandoned) {
            loop_cmd_free(L, cmd);
            continue;
        }
        if (cmd->chained && cmd->result.status != WORKER_OK) {
            loop_chain_park(L, cmd);
            continue;
        }
        if (cmd->detached) { /* a group member's: back into its saga's queue */
            loop_saga_reattach(L, cmd);
            loop_chain_release(L, cmd);
            continue;
        }
        loop_cmd_set_state(cmd, CMD_RETURNED);
        loop_vec_push(&L->returned, cmd);
    }
    free(done);
}

/* ---- what goes out, and when ------------------------------------------ */

/* A crash-loop suspect, deferred by worker_saga.c (its attempt was
 * interrupted crash_loop_limit - 1 times), runs alone: new calls stop
 * (may_start()), and once no call runs and no transaction is out, the
 * first suspect is decided again, by itself.  A crash while it runs is
 * then its own, and the next interruption dead-letters it; a command that
 * was only running beside the one that crashed the worker runs alone,
 * completes, and never reaches the limit.  One suspect at a time, so a
 * crash loop slows the worker down until its command is dead-lettered. */
static void isolate_next(loop_t *L)
{
    worker_cmd_t *cmd;

    if (L->isolated || L->suspects.n == 0 || L->calling > 0 || L->returned.n > 0 || loop_txn_out(L))
        return;
    cmd = L->suspects.v[0];
    loop_vec_remove(&L->suspects, cmd);
    cmd->suspect = false;
    cmd->isolated = true;
    L->isolated = cmd;
    {
        sg_log_ctx_t ctx;
        loop_cmd_ctx(cmd, &ctx);
        sg_log(SG_LOG_WARN, &ctx,
               "crash-loop suspect: its attempt was interrupted %d times; it runs alone now "
               "(%zu more waiting), no other call beside it",
               L->w.crash_loop_limit - 1, L->suspects.n);
    }
    loop_vec_push(&L->ready, cmd);
    memmove(L->ready.v + 1, L->ready.v, sizeof(void *) * (L->ready.n - 1));
    L->ready.v[0] = cmd;
}

/* May ready command c go into a batch now?  While a suspect runs alone,
 * no command that may start a call does.  While suspects wait for the
 * worker to be quiet, no ready command does: returned calls finish, the
 * transactions out come back, and nothing new keeps the worker busy. */
static bool may_start(const loop_t *L, const worker_cmd_t *cmd)
{
    if (!loop_isolating(L) || cmd == L->isolated)
        return true;
    return L->isolated && cmd->dec.type != SG_CMD_EXECUTE && cmd->dec.type != SG_CMD_COMPENSATE;
}

/* May the ready commands go out now?  Yes with no transaction out.  With
 * one out, a second pays off when there is a backlog to share
 * (batch_size / 4 commands or more); fewer wait for the one out and go
 * with what its commit releases: at a low rate, more and smaller
 * transactions cost PostgreSQL more and the latency rises.  So a
 * transaction held up in its writes or commit holds up at most that many
 * commands; the rest run on the other connection. */
static bool send_now(const loop_t *L)
{
    size_t n = L->returned.n;

    if (!loop_txn_out(L))
        return true;
    for (size_t i = 0; i < L->ready.n && n < (size_t)L->batch_size / 4; i++)
        n += may_start(L, L->ready.v[i]);
    return n >= (size_t)L->batch_size / 4;
}

/* Calls that answer within a fraction of a transaction (builtins, a local
 * program, a downstream on the same host) should go out with the
 * transaction after the commit that started them.  Sent at once, that
 * transaction leaves before they return, and they wait a whole
 * transaction more: every step of a saga costs two transactions instead
 * of one, and at 1,000 steps/s the worker commits twice as often as it
 * needs to.  So, with no transaction out, calls started less than
 * CALL_HOLD_US ago and calls averaging under half that, the loop waits
 * for them, at most CALL_HOLD_US after the last one started (the main
 * loop's wait_turn()).  Slower tools (an HTTP call takes milliseconds)
 * never hold anything up, and neither does a batch big enough to go. */
#define CALL_HOLD_US 300

static bool hold_for_calls(loop_t *L)
{
    if (L->draining || L->calling == 0 || loop_txn_out(L) || L->call_avg_us == 0 ||
        L->call_avg_us > CALL_HOLD_US / 2 ||
        L->returned.n + L->ready.n >= (size_t)L->batch_size / 4)
        return false;
    L->holding = sg_run_now_us() < L->last_submit_us + CALL_HOLD_US;
    return L->holding;
}

/* One turn: the transactions PostgreSQL has answered are decided (their
 * load answered) or settle (their commit answered), and a batch of
 * returned calls and ready commands goes as one transaction on a free one
 * of worker.transactions_in_flight connections: its load is sent, and
 * the loop waits for no answer; each wakes it (loop_wait_events()) like a
 * message.  Meanwhile the worker loads and decides the next batch on the
 * other connection: its loop and a PostgreSQL backend no longer wait for
 * each other.
 *
 * Two transactions out at once never share a saga: a saga's next command
 * is ready only after the one before committed.  Each partition's offset
 * moves over the commands its own transaction finishes and over those
 * committed before, never over the other one's (loop_part_watermark()); a
 * transaction that commits after a later one keeps the offset where it is
 * (sagad_fence() takes the greater), and the fence rows are updated in
 * partition order, so the two transactions cannot deadlock on them. */
static bool turn(loop_t *L)
{
    txn_slot_t *t = NULL;
    worker_cmd_t **batch;
    size_t n = 0, nr;
    /* Committed ones first: their commands settle (and free their sagas'
     * next commands) as soon as PostgreSQL has answered. */
    bool collected = loop_collect(L, false);
    sg_err_t err;

    L->holding = false;
    loop_take_returned(L);
    isolate_next(L);
    for (int i = 0; i < L->nslots && !t; i++)
        if (!L->slots[i].batch)
            t = &L->slots[i];
    /* Nothing to send, or no connection free: the loop waits for an
     * answer (loop_wait_events()) as for a message or a call. */
    if ((L->ready.n == 0 && L->returned.n == 0) || !t || !send_now(L) || hold_for_calls(L)) {
        loop_bury(L);
        return collected;
    }
    batch = sg_xmalloc(sizeof(*batch) * (size_t)L->batch_size);
    nr = L->returned.n < (size_t)L->batch_size ? L->returned.n : (size_t)L->batch_size;
    for (size_t i = 0; i < nr; i++)
        batch[n++] = L->returned.v[i];
    /* An empty vector may have no array yet: memmove(NULL, ...) is
     * undefined even for 0 bytes (UBSan stops the worker on it). */
    if (nr)
        memmove(L->returned.v, L->returned.v + nr, sizeof(void *) * (L->returned.n - nr));
    L->returned.n -= nr;
    /* Ready commands in order; those that may not start a call now stay. */
    {
        size_t kept = 0;
        for (size_t i = 0; i < L->ready.n; i++) {
            worker_cmd_t *cmd = L->ready.v[i];
            if (n < (size_t)L->batch_size && may_start(L, cmd))
                batch[n++] = cmd;
            else
                L->ready.v[kept++] = cmd;
        }
        L->ready.n = kept;
    }
    if (n == 0) {
        free(batch);
        loop_bury(L);
        return collected;
    }
    loop_use_txn(L, t);
    t->t0 = sg_run_now_us();
    /* Only the load goes now: the loop goes on taking messages and
     * collecting while PostgreSQL answers, and decides the batch then
     * (loop_collect()). */
    if (loop_txn_start(L, batch, n, &err) == 0) {
        t->batch = batch;
        t->n = n;
    } else {
        loop_txn_settle(L, batch, n, -1, &err, t->t0);
    }
    loop_bury(L);
    return true;
}

/* ---- waits -------------------------------------------------------------- */

/* Waits up to timeout_ms for a message, a call's return or, while a
 * transaction is out, PostgreSQL's answer. */
void loop_wait_events(loop_t *L, int timeout_ms)
{
    struct pollfd fds[2 + MAX_TXNS] = {{L->kafka_pipe[0], POLLIN, 0},
                                       {worker_pool_fd(L->pool), POLLIN, 0}};
    nfds_t n = 2;

    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].batch && sg_pg_socket(L->slots[i].pg) >= 0) {
            fds[n].fd = sg_pg_socket(L->slots[i].pg);
            fds[n].events = POLLIN;
            fds[n++].revents = 0;
        }
    if (poll(fds, n, timeout_ms) < 0 && errno != EINTR)
        sg_log_kv(SG_LOG_WARN, "poll failed", "error", strerror(errno), NULL);
}

/* The main loop's wait after a turn with nothing sent: for the calls it
 * holds for (hold_for_calls()), at most until the hold ends; else up to
 * timeout_ms for anything (loop_wait_events()). */
static void wait_turn(loop_t *L, int timeout_ms)
{
    uint64_t now, end = L->last_submit_us + CALL_HOLD_US;
    struct timespec ts = {0, 0};
    fd_set rd;
    int fd = worker_pool_fd(L->pool);

    if (!L->holding) {
        loop_wait_events(L, timeout_ms);
        return;
    }
    if ((now = sg_run_now_us()) >= end)
        return;
    ts.tv_nsec = (long)(end - now) * 1000;
    FD_ZERO(&rd);
    FD_SET(fd, &rd);
    if (pselect(fd + 1, &rd, NULL, NULL, &ts, NULL) < 0 && errno != EINTR)
        sg_log_kv(SG_LOG_WARN, "pselect failed", "error", strerror(errno), NULL);
}

/* ---- drain and rebalance ------------------------------------------------ */

/* Lets running calls of partition p (all when p is NULL) finish and
 * commits their outcomes, for up to the drain timeout. */
void loop_drain(loop_t *L, worker_part_t *p)
{
    uint64_t end = sg_run_now_ms() + (uint64_t)L->drain_ms;

    L->draining = true;
    for (;;) {
        size_t busy = 0;
        for (size_t i = 0; i < L->nparts; i++)
            for (worker_cmd_t *cmd = L->parts[i]->head; cmd; cmd = cmd->part_next)
                if ((!p || L->parts[i] == p) &&
                    (cmd->state == CMD_CALLING || cmd->state == CMD_RETURNED || cmd->has_outcome))
                    busy++;
        if (sg_run_now_ms() >= end || sg_run_stop_now)
            break;
        if (busy == 0) {
            /* A transaction out may yet give p's commands calls to run. */
            if (!loop_collect(L, true))
                break;
            continue;
        }
        sg_health_beat();
        if (!turn(L)) {
            /* No intake here: what Kafka signals waits for the loop. */
            kafka_wake_clear(L);
            loop_wait_events(L, 50);
        }
    }
    /* At a forced stop a transaction out is left to PostgreSQL, which
     * rolls it back when the connection closes. */
    if (!sg_run_stop_now)
        loop_collect(L, true);
    L->draining = false;
}

void loop_run(loop_t *L, void (*each_turn)(loop_t *L))
{
    while (sg_run_running) {
        intake(L);
        if (!turn(L))
            wait_turn(L, 100);
        each_turn(L);
    }
}

/* The slot a new partition is taken on: a free one, when the partition is
 * new to this worker (nothing out touches it), so that a transaction held
 * up in PostgreSQL does not hold up the assignment (the internal topic's
 * consumer often joins after the commands topic's has begun work); else,
 * every transaction out settled first, slot 0 (one out may hold commands
 * of a partition assigned again, which is then started over). */
static txn_slot_t *assignment_slot(loop_t *L, int ti, int32_t partition)
{
    if (!loop_part_find(L, ti, partition))
        for (int i = 0; i < L->nslots; i++)
            if (!L->slots[i].batch)
                return &L->slots[i];
    loop_collect(L, true);
    return &L->slots[0];
}

int64_t loop_on_rebalance(void *opaque, bool assigned, const char *topic, int32_t partition)
{
    loop_t *L = opaque;
    int ti = loop_topic_find(L, topic);
    worker_part_t *p;

    if (ti < 0) {
        sg_log_kv(SG_LOG_WARN, "a partition of a topic this worker does not read: ignored", "topic",
                  topic, NULL);
        return -1;
    }
    if (assigned) {
        loop_use_txn(L, assignment_slot(L, ti, partition));
        return loop_take_partition(L, (loop_topic_t)ti, partition);
    }
    loop_collect(L, true);
    loop_use_txn(L, &L->slots[0]);
    if (!(p = loop_part_find(L, ti, partition)))
        return -1;
    /* Finish what can be finished while the partition is still ours; the
     * fence refuses the commits if it is not. */
    loop_drain(L, p);
    if ((p = loop_part_find(L, ti, partition))) {
        loop_kafka_commit(L, p);
        loop_part_drop(L, p, "partition revoked");
    }
    return -1;
}
