/* Chaining: running a saga's next step command before its message comes
 * back through the relay and Kafka.  This file owns the commands chained in
 * a transaction, the set of their copies still expected (chain_set), the
 * parked ones, and the internal topic's partition count with the thread
 * that watches it.  Below the transactions and partitions; of the loop's
 * files it calls only worker_cmdq.c (and worker_saga_sql.c for decisions).
 *
 * Chaining (worker.chain).  A decision that emits a saga's next step
 * command for now (not a timer) writes it to the outbox as always, for the
 * internal topic.  When that message will come back to this worker (its
 * key, the saga id, maps to a partition of the internal topic that is
 * ours under librdkafka's default partitioner), the command is also
 * decided at once, in the same transaction, as if it had arrived: its
 * attempt row commits with the previous outcome, and its call starts right
 * after the commit.  A saga's steps then cost one transaction each and no
 * trip through the relay and Kafka.  The chained command sits at the head
 * of its saga's queue and in the FIFO of the partition its message will
 * arrive on (offset -1, which the stored offset ignores), so ordering,
 * draining and abandoning treat it like any other.  A saga.start's first step command is chained
 * the same way, decided with the saga the start just wrote (worker_fresh_t)
 * unless the saga has a deadline.  Its message, when it arrives, is a copy:
 *   - normally the chained command has finished by then (the saga queue
 *     holds the copy back until it has), and the copy is acknowledged with
 *     no transaction of its own beyond the offset (`chain` set, by message
 *     id and partition);
 *   - a chained call that failed is PARKED until its copy arrives, and the
 *     copy takes over its result: failures may need a dead letter, which
 *     names the message, and a chained command has none.  For the same
 *     reason a chained command whose decision could dead-letter it (an
 *     unknown tool) is dropped, and its message decides it.
 * A worker that dies or loses the partition leaves the copy to the next
 * owner, which finds the attempt row as any redelivery would. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_run.h"
#include "worker_loop_int.h"

#define PARTITIONS_CHECK_MS 10000 /* the internal topic's partition count, for chaining */
/* Most commands chained from one decision in one transaction: a step, or
 * the compensations a failure walks through. */
#define CHAIN_DEPTH (2 * SG_MAX_STEPS + 2)

/* ---- the copies expected ---------------------------------------------- */

/* The message id of a command ("cmd:<saga>:<step>:..."), NULL if none. */
static const char *cmd_id(const worker_cmd_t *cmd)
{
    return cmd->dec.doc ? sg_json_string(sg_json_member(cmd->dec.doc, "id")) : NULL;
}

static void chain_add(loop_t *L, const worker_part_t *p, const char *id)
{
    chain_entry_t *e = sg_xmalloc(sizeof(*e) + strlen(id) + 1);
    unsigned b = loop_hash(id) % CHAIN_BUCKETS;

    e->topic = p->topic;
    e->partition = p->partition;
    strcpy(e->id, id);
    e->next = L->chain_set[b];
    L->chain_set[b] = e;
    L->nchain++;
}

/* Is c the message of a chained command that ran here?  Forgets it. */
bool loop_chain_take(loop_t *L, const worker_cmd_t *cmd)
{
    const char *id = cmd_id(cmd);
    chain_entry_t **pp, *e;

    if (!id || !cmd->part || L->nchain == 0)
        return false;
    for (pp = &L->chain_set[loop_hash(id) % CHAIN_BUCKETS]; (e = *pp); pp = &e->next)
        if (e->topic == cmd->part->topic && e->partition == cmd->part->partition &&
            strcmp(e->id, id) == 0) {
            *pp = e->next;
            free(e);
            L->nchain--;
            return true;
        }
    return false;
}

/* The partition is not ours any more: its copies are the next owner's. */
void loop_chain_forget(loop_t *L, const worker_part_t *p)
{
    for (size_t b = 0; b < CHAIN_BUCKETS && L->nchain; b++)
        for (chain_entry_t **pp = &L->chain_set[b], *e; (e = *pp);) {
            if (p && (e->topic != p->topic || e->partition != p->partition)) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            free(e);
            L->nchain--;
        }
}

/* ---- parked chained commands ------------------------------------------- */

/* r, the copy of the PARKED chained command v, takes over v's call and
 * result (it has the message a dead letter names); v is done. */
static void take_over(loop_t *L, worker_cmd_t *v, worker_cmd_t *r)
{
    loop_chain_take(L, r);
    r->call = v->call;
    r->result = v->result;
    r->attempt_id = v->attempt_id;
    memset(&v->call, 0, sizeof(v->call));
    memset(&v->result, 0, sizeof(v->result));
}

/* The copy r of the PARKED chained command v (the head of its saga's
 * queue) takes v's place, call and result, and is completed as any
 * returned call. */
static void adopt(loop_t *L, saga_slot_t *slot, worker_cmd_t *v, worker_cmd_t *r)
{
    worker_cmd_t **pp;

    for (pp = &v->saga_next; *pp && *pp != r; pp = &(*pp)->saga_next)
        ;
    *pp = r->saga_next;
    r->saga_next = v->saga_next;
    v->saga_next = NULL;
    slot->head = r;
    for (worker_cmd_t *cmd = slot->head; cmd; cmd = cmd->saga_next)
        slot->tail = cmd;
    take_over(L, v, r);
    loop_cmd_set_state(r, CMD_RETURNED);
    loop_vec_push(&L->returned, r);
    loop_cmd_set_state(v, CMD_FINISHED); /* not active since it parked */
    loop_retire(L, v);
}

/* The copy of v among the commands queued from first on, if it came. */
static worker_cmd_t *find_copy(const worker_cmd_t *v, worker_cmd_t *first)
{
    const char *id = cmd_id(v);

    for (worker_cmd_t *cmd = first; cmd && id; cmd = cmd->saga_next)
        if (!cmd->chained && cmd->part == v->part && cmd_id(cmd) && strcmp(cmd_id(cmd), id) == 0)
            return cmd;
    return NULL;
}

/* The same for v, a chained group member whose detached call failed: r,
 * its copy (held out of the queue, see hold(); or found in it), takes v's
 * call and result and comes back as the call's outcome would. */
static void adopt_detached(loop_t *L, saga_slot_t *slot, worker_cmd_t *v, worker_cmd_t *r)
{
    v->held_copy = NULL;
    take_over(L, v, r);
    loop_saga_take_detached(L, slot, v, r);
    loop_cmd_set_state(v, CMD_FINISHED); /* not active since it parked */
    loop_retire(L, v);
}

/* A chained command whose call failed: its outcome waits for its message
 * (see the top of the file), holding its saga but no intake slot. */
void loop_chain_park(loop_t *L, worker_cmd_t *v)
{
    saga_slot_t *slot = loop_saga_slot(L, v->dec.saga_id, false);
    /* A detached member's copy is held beside it: intake holds it there
     * (hold()), and loop_chain_detached() moves one that came before the
     * loop read the commit.  Only a second copy (the relay publishes at
     * least once) waits in the queue, and is decided there as the
     * duplicate it is; the queue is searched all the same should none be
     * held, as a parked command whose copy is never found holds its saga
     * for ever. */
    worker_cmd_t *copy = !slot          ? NULL
                         : !v->detached ? find_copy(v, v->saga_next)
                         : v->held_copy ? v->held_copy
                                        : find_copy(v, slot->head);
    sg_log_ctx_t ctx;

    loop_cmd_set_state(v, CMD_PARKED);
    loop_active_add(L, v, -1);
    if (copy) {
        if (v->detached)
            adopt_detached(L, slot, v, copy);
        else
            adopt(L, slot, v, copy);
        return;
    }
    /* Says why the saga waits: should the message not come (the relay
     * down), its outcome is not written yet. */
    loop_cmd_ctx(v, &ctx);
    ctx.error_code = v->result.err.code;
    sg_log(SG_LOG_INFO, &ctx, "chained call failed: its outcome waits for its message");
}

/* What intake queued behind the head of its saga's queue (slot): the copy
 * of that head, a PARKED chained command, takes its place at once. */
static void arrived(loop_t *L, saga_slot_t *slot, worker_cmd_t *cmd)
{
    if (slot->head->state == CMD_PARKED && find_copy(slot->head, slot->head->saga_next) == cmd)
        adopt(L, slot, slot->head, cmd);
}

/* Is cmd, just read, the copy of a chained group member whose detached
 * call is out (slot: its saga's)?  Then it stays out of its saga's queue,
 * where it would hold up the saga's next commands (a saga.cancel) while
 * the call runs: it waits beside the member, unfinished in its
 * partition's FIFO, so the offset does not pass it (a crash still redoes
 * the member), and joins the queue behind the member's outcome when the
 * call returns (loop_chain_release()).  The copy of one whose call failed
 * (PARKED) takes its result at once, as any parked command's copy does. */
static bool hold(loop_t *L, saga_slot_t *slot, worker_cmd_t *cmd)
{
    for (worker_cmd_t *d = slot->detached; d; d = d->det_next) {
        if (!d->chained || find_copy(d, cmd) != cmd)
            continue;
        /* A second copy (the relay publishes at least once) queues as any
         * duplicate does, held back while the call is out (worker_cmdq.c,
         * blocked()): the one held must not be dropped for it, or its
         * offset would never be passed. */
        if (d->held_copy)
            return false;
        if (d->state == CMD_PARKED)
            adopt_detached(L, slot, d, cmd);
        else
            d->held_copy = cmd;
        return true;
    }
    return false;
}

void loop_chain_intake(loop_t *L, worker_cmd_t *cmd)
{
    saga_slot_t *slot = NULL;

    /* Only a step.execute can be a member's copy, and only while copies
     * are expected; the slot looked up here serves the queue too. */
    if (L->nchain > 0 && cmd->dec.type == SG_CMD_EXECUTE && cmd->dec.saga_id[0] && !cmd->forward &&
        (slot = loop_saga_slot(L, cmd->dec.saga_id, false)) && hold(L, slot, cmd))
        return;
    if ((slot = loop_saga_enqueue(L, cmd, slot)))
        arrived(L, slot, cmd);
}

void loop_chain_detached(loop_t *L, worker_cmd_t *v)
{
    saga_slot_t *slot = loop_saga_slot(L, v->dec.saga_id, false);
    worker_cmd_t *copy = slot ? find_copy(v, slot->head) : NULL;

    /* Queued behind v when placed, so QUEUED (blocked by v's call). */
    if (!copy || copy->state != CMD_QUEUED)
        return;
    loop_saga_unqueue(L, slot, copy);
    v->held_copy = copy;
}

/* The detached call of v returned and v is back in its saga's queue: its
 * held copy, if it came meanwhile, queues behind it. */
void loop_chain_release(loop_t *L, worker_cmd_t *v)
{
    worker_cmd_t *copy = v->held_copy;
    saga_slot_t *slot;

    if (!copy)
        return;
    v->held_copy = NULL;
    if ((slot = loop_saga_enqueue(L, copy, NULL)))
        arrived(L, slot, copy);
}

/* ---- chaining in a transaction ----------------------------------------- */

/* Drops the commands chained in a transaction that did not commit. */
void loop_chain_discard(loop_t *L)
{
    for (size_t i = 0; i < L->chain_new->n; i++) {
        loop_cmd_release(L, L->chain_new->v[i]);
    }
    L->chain_new->n = 0;
}

/* Commands chained in transactions not committed yet, in every slot. */
static size_t chained_out(const loop_t *L)
{
    size_t n = 0;

    for (int i = 0; i < L->nslots; i++)
        n += L->slots[i].chain_new.n;
    return n;
}

/* Does a control command (saga.cancel) wait in cmd's saga queue behind
 * it?  Then the step command cmd's decision emitted is not chained: the
 * cancel is decided first, and that step command, when its message
 * arrives, finds the saga no longer running (docs/WORKER.md,
 * "Cancellation"). */
static bool control_waits(const worker_cmd_t *cmd)
{
    for (const worker_cmd_t *q = cmd->saga_next; q; q = q->saga_next)
        if (q->dec.type == SG_CMD_CANCEL)
            return true;
    return false;
}

/* May the step command c's decision emitted (for saga s) be chained?
 * The partition of the internal topic its message will arrive on, when it
 * is ours; else NULL. */
static worker_part_t *chainable(loop_t *L, const worker_cmd_t *cmd, const worker_saga_t *s)
{
    size_t cap = (size_t)L->max_in_flight * WINDOW_FACTOR;

    if (!L->w.chain || control_waits(cmd) || L->draining || loop_isolating(L) || !sg_run_running ||
        L->int_partitions <= 0 || sg_run_now_ms() < L->chain_paused_until || !s || !cmd->part ||
        cmd->abandoned || L->nchain + chained_out(L) >= cap)
        return NULL;
    return loop_part_find(
        L, LOOP_TOPIC_INTERNAL,
        sg_kafka_key_partition(s->saga_id, strlen(s->saga_id), L->int_partitions));
}

/* Decides f, a step command cmd's decision (or origin's) emitted for saga
 * s, in the open transaction as if its message had come; its place is
 * behind origin.  NULL: not chained (its message will decide it). */
static worker_cmd_t *chain_one(loop_t *L, worker_cmd_t *cmd, worker_cmd_t *origin,
                               const worker_follow_t *f, worker_saga_t *s)
{
    worker_part_t *p;
    worker_cmd_t *v;

    if (!(p = chainable(L, cmd, s)))
        return NULL;
    v = loop_cmd_new(L);
    v->chained = true;
    v->part = p;
    v->offset = -1;
    v->origin = origin;
    loop_cmd_set_state(v, CMD_READY);
    /* What decoding its message would give, taken from the decision as it
     * is (not printed and parsed back); its id is what the copy is
     * matched by (cmd_id). */
    v->dec.type = f->type;
    snprintf(v->dec.saga_id, sizeof(v->dec.saga_id), "%s", s->saga_id);
    v->dec.step = f->step;
    v->dec.attempt = f->attempt;
    v->dec.generation = f->generation;
    v->dec.doc = sg_json_new_object();
    sg_json_add_str(v->dec.doc, "id", f->id);
    /* A command this transaction created has no attempt rows yet. */
    s->interrupted = s->finished = 0;
    worker_saga_decide(&L->w, v, s);
    if (v->unchained) {
        loop_cmd_release(L, v);
        return NULL;
    }
    v->finishing = !v->calls;
    L->w.stats.chained++;
    sg_metrics_batch_inc(L->w.metrics, SG_M_CHAINED, SG_LABELS("run"));
    loop_vec_push(L->chain_new, v);
    return v;
}

/* Decides, in the open transaction, the step command cmd's decision
 * emitted for now, and the ones those emit in turn; or the members of a
 * group it started, side by side (see the top of the file).  Whatever is
 * not chained is decided from its message. */
void loop_chain_follow(loop_t *L, worker_cmd_t *cmd, worker_saga_t *s)
{
    worker_cmd_t *prev = cmd;

    for (int depth = 0; prev->follow.set && depth < CHAIN_DEPTH; depth++) {
        worker_follow_t f = prev->follow;
        worker_cmd_t *v;

        prev->follow.set = false;
        if (!(v = chain_one(L, cmd, prev, &f, s)))
            break;
        prev = v;
    }
    prev->follow.set = false;
    /* Each member behind the one before: all of them call at once, and
     * each call leaves the queue (worker_txn.c, settle()). */
    prev = cmd;
    for (int i = 0; i < cmd->nmembers; i++) {
        worker_follow_t f;
        worker_cmd_t *v;

        worker_follow_make(&f, s, cmd->members[i], false, 1);
        if ((v = chain_one(L, cmd, prev, &f, s)))
            prev = v;
    }
    cmd->nmembers = 0;
}

/* After the commit: the chained commands take their places, each right
 * behind the command that emitted it, and their copies are expected. */
void loop_chain_place(loop_t *L)
{
    for (size_t i = 0; i < L->chain_new->n; i++) {
        worker_cmd_t *v = L->chain_new->v[i], *o = v->origin;
        worker_part_t *p = v->part;
        /* o heads its saga's queue, or was placed just before v. */
        saga_slot_t *slot = loop_saga_slot(L, v->dec.saga_id, false);

        v->origin = NULL;
        loop_part_append(p, v);
        L->held++;
        loop_active_add(L, v, 1);
        v->saga_next = o->saga_next;
        o->saga_next = v;
        if (slot->tail == o)
            slot->tail = v;
        chain_add(L, p, cmd_id(v));
    }
}

/* ---- the internal topic's partition count ------------------------------ */

/* The internal topic's partition count, n (0 or less: not known), as read
 * just now.
 *
 * Added partitions change where a key lands, and producers learn of them
 * only at their next metadata refresh (librdkafka: every 5 minutes), so
 * for a while the relay hashes keys over the old count while this worker
 * would predict with the new one, or the other way round.  A chained
 * command whose message lands elsewhere runs twice (the other partition's
 * owner finds its attempt started and not finished, as after a crash).
 * So a changed count turns chaining off for
 * worker.chain_repartition_pause_ms. */
void loop_partitions_read(loop_t *L, int32_t n)
{
    L->partitions_read_at = sg_run_now_ms();
    if (n > 0 && L->known_partitions > 0 && n != L->known_partitions) {
        char was[16], now[16], pause[24];
        snprintf(was, sizeof(was), "%d", (int)L->known_partitions);
        snprintf(now, sizeof(now), "%d", (int)n);
        snprintf(pause, sizeof(pause), "%llu", (unsigned long long)L->repartition_pause_ms);
        sg_log_kv(SG_LOG_WARN,
                  "the internal topic's partition count changed: chaining is off while "
                  "the relay still hashes keys over the old count",
                  "topic", L->w.topic_internal, "partitions_before", was, "partitions", now,
                  "pause_ms", pause, NULL);
        L->chain_paused_until = sg_run_now_ms() + L->repartition_pause_ms;
    }
    if (n > 0)
        L->known_partitions = n;
    L->int_partitions = n;
}

/* Asks the cluster for the count, at most once a second: an assignment
 * calls this once per partition assigned. */
void loop_refresh_partitions(loop_t *L, int timeout_ms)
{
    if (!L->w.chain || sg_run_now_ms() - L->partitions_read_at < 1000)
        return;
    loop_partitions_read(L, sg_kafka_partition_count(L->consumers[LOOP_TOPIC_INTERNAL],
                                                     L->w.topic_internal, timeout_ms));
}

/* The watcher thread reads the count every PARTITIONS_CHECK_MS (every
 * second while it is not known) for housekeeping to take: a metadata
 * request from the loop itself, with a busy broker, held it up to 300 ms
 * (the latency benchmark's worst stalls).  librdkafka's handle may be
 * used from any thread. */
void *loop_partition_watcher(void *arg)
{
    loop_t *L = arg;

    while (!atomic_load(&L->watcher_stop)) {
        int32_t n =
            sg_kafka_partition_count(L->consumers[LOOP_TOPIC_INTERNAL], L->w.topic_internal, 2000);
        uint64_t until = sg_run_now_ms() + (n > 0 ? PARTITIONS_CHECK_MS : 1000);

        atomic_store(&L->watched, n > 0 ? n : -1);
        while (!atomic_load(&L->watcher_stop) && sg_run_now_ms() < until) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}
