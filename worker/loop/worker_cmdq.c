/* Where the loop's commands live: their memory (allocation, the spare
 * list, shedding a finished one's payload, freeing at the end of a turn),
 * the queue of each saga and the FIFO of each partition they sit in (and
 * finding a partition by its topic and number), the loop's vectors
 * (ready, returned, ...), and a command's state, which changes through
 * loop_cmd_set_state() only.  Calls nothing of the loop's other files. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "worker_loop_int.h"
#include "../apply/worker_observe.h"

#define CMD_SPARE 1024 /* freed commands kept for reuse: 1.5 MB */

/* ---- vectors ------------------------------------------------------------ */

void loop_vec_push(vec_t *vec, worker_cmd_t *cmd)
{
    if (vec->n == vec->cap) {
        vec->cap = vec->cap ? vec->cap * 2 : 256;
        vec->v = sg_xrealloc(vec->v, sizeof(*vec->v) * vec->cap);
    }
    vec->v[vec->n++] = cmd;
}

void loop_vec_remove(vec_t *vec, const worker_cmd_t *cmd)
{
    for (size_t i = 0; i < vec->n; i++)
        if (vec->v[i] == cmd) {
            memmove(&vec->v[i], &vec->v[i + 1], sizeof(*vec->v) * (vec->n - i - 1));
            vec->n--;
            return;
        }
}

/* ---- per-saga queues ---------------------------------------------------- */

unsigned loop_hash(const char *s)
{
    unsigned h = 2166136261u;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % SAGA_BUCKETS;
}

saga_slot_t *loop_saga_slot(loop_t *L, const char *id, bool create)
{
    saga_slot_t **pp = &L->sagas[loop_hash(id)], *s;

    for (s = *pp; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    if (!create)
        return NULL;
    s = sg_xcalloc(1, sizeof(*s) + strlen(id) + 1);
    strcpy(s->id, id);
    s->next = *pp;
    *pp = s;
    return s;
}

void loop_saga_slot_free(loop_t *L, saga_slot_t *slot)
{
    saga_slot_t **pp = &L->sagas[loop_hash(slot->id)];

    while (*pp != slot)
        pp = &(*pp)->next;
    *pp = slot->next;
    free(slot);
}

/* ---- a command's state -------------------------------------------------- */

static const char *const cstate_names[] = {"queued",   "ready",    "calling",
                                           "returned", "finished", "parked"};

/* The legal changes of a command's state ([from][to]).  A new command is
 * QUEUED (zeroed) until loop_saga_enqueue places it. */
static const bool cstate_legal[6][6] = {
    /* from QUEUED: placed behind its saga, made READY, or the copy a parked
     * command adopts (RETURNED with the parked call's outcome) */
    [CMD_QUEUED] = {[CMD_QUEUED] = true, [CMD_READY] = true, [CMD_RETURNED] = true},
    /* from READY: decided and committed (a call, or done), a chained one's
     * refused outcome waits for its message, or decided again as poison */
    [CMD_READY] = {[CMD_QUEUED] = true, /* back behind a detached call's outcome */
                   [CMD_READY] = true,
                   [CMD_CALLING] = true,
                   [CMD_FINISHED] = true,
                   [CMD_PARKED] = true},
    /* from CALLING: returned; a detached call (a group member's) back in
     * its saga's queue behind the command being decided */
    [CMD_CALLING] = {[CMD_QUEUED] = true, [CMD_RETURNED] = true, [CMD_PARKED] = true},
    [CMD_RETURNED] = {[CMD_READY] = true, [CMD_FINISHED] = true, [CMD_PARKED] = true},
    /* FINISHED is final: the command is retired */
    [CMD_PARKED] = {[CMD_FINISHED] = true},
};

/* Every change of a command's state: logged at debug level, asserted
 * legal. */
void loop_cmd_set_state(worker_cmd_t *cmd, worker_cstate_t to)
{
    sg_log_ctx_t ctx;

    assert(cstate_legal[cmd->state][to]);
    if (SG_LOG_DEBUG <= sg_log_level) {
        loop_cmd_ctx(cmd, &ctx);
        sg_log(SG_LOG_DEBUG, &ctx, "command %s: %s -> %s", cmd->chained ? "(chained)" : "",
               cstate_names[cmd->state], cstate_names[to]);
    }
    cmd->state = to;
}

/* ---- detached calls ------------------------------------------------------
 *
 * A saga's commands are decided one at a time, in order, and a call in
 * flight normally holds its saga's queue until its outcome is recorded.
 * The calls of a parallel group's members must run beside each other, so
 * a member's forward call (worker_call_t.detach) leaves the queue when it
 * goes to the pool and waits in the saga's detached list; the next command
 * of the saga (a sibling's step.execute, a saga.cancel) is decided
 * meanwhile.  Decisions stay one at a time: when the call returns, its
 * outcome goes back into the queue, at the head when nothing of the saga
 * is being decided, else right behind the command that is.  A step
 * command for a step whose call is detached (a duplicate message) waits
 * until that call's outcome is recorded, as it would behind it in the
 * queue, and then finds the attempt finished. */

/* Must cmd wait for a detached call of its saga (same step)? */
static bool blocked(const saga_slot_t *slot, const worker_cmd_t *cmd)
{
    if (cmd->dec.type != SG_CMD_EXECUTE && cmd->dec.type != SG_CMD_COMPENSATE)
        return false;
    for (const worker_cmd_t *d = slot->detached; d; d = d->det_next)
        if (d->dec.step == cmd->dec.step)
            return true;
    return false;
}

/* The head of slot's queue, if it waits, becomes what it can: RETURNED
 * with its detached call's outcome, or READY unless a detached call of
 * its step is still out. */
static void promote(loop_t *L, saga_slot_t *slot)
{
    worker_cmd_t *head = slot->head;

    if (!head || head->state != CMD_QUEUED)
        return;
    if (head->has_outcome) {
        head->has_outcome = false;
        loop_cmd_set_state(head, CMD_RETURNED);
        loop_vec_push(&L->returned, head);
    } else if (!blocked(slot, head)) {
        loop_cmd_set_state(head, CMD_READY);
        loop_vec_push(&L->ready, head);
    }
}

/* Unlinks cmd from slot's queue, if it is there. */
static bool unlink_queued(saga_slot_t *slot, worker_cmd_t *cmd)
{
    worker_cmd_t **pp;

    for (pp = &slot->head; *pp && *pp != cmd; pp = &(*pp)->saga_next)
        ;
    if (!*pp)
        return false;
    *pp = cmd->saga_next;
    if (slot->tail == cmd) {
        slot->tail = NULL;
        for (worker_cmd_t *c = slot->head; c; c = c->saga_next)
            slot->tail = c;
    }
    cmd->saga_next = NULL;
    return true;
}

void loop_saga_detach(loop_t *L, worker_cmd_t *cmd)
{
    saga_slot_t *slot = loop_saga_slot(L, cmd->dec.saga_id, false);

    if (!slot || !unlink_queued(slot, cmd))
        return;
    cmd->detached = true;
    cmd->det_next = slot->detached;
    slot->detached = cmd;
    promote(L, slot);
}

/* Takes cmd out of slot's detached list. */
static bool unlink_detached(saga_slot_t *slot, worker_cmd_t *cmd)
{
    for (worker_cmd_t **pp = &slot->detached; *pp; pp = &(*pp)->det_next)
        if (*pp == cmd) {
            *pp = cmd->det_next;
            cmd->det_next = NULL;
            cmd->detached = false;
            return true;
        }
    return false;
}

static bool in_vec(const vec_t *vec, const worker_cmd_t *cmd)
{
    for (size_t i = 0; i < vec->n; i++)
        if (vec->v[i] == cmd)
            return true;
    return false;
}

void loop_saga_reattach(loop_t *L, worker_cmd_t *cmd)
{
    saga_slot_t *slot = loop_saga_slot(L, cmd->dec.saga_id, true);

    unlink_detached(slot, cmd);
    /* A head that is ready but in no transaction yet waits behind the
     * outcome: it may be held back (a crash-loop suspect running alone
     * stops every new call), and the outcome it would then hold back is
     * what lets the suspect finish. */
    if (slot->head && slot->head->state == CMD_READY && in_vec(&L->ready, slot->head)) {
        loop_vec_remove(&L->ready, slot->head);
        loop_cmd_set_state(slot->head, CMD_QUEUED);
    }
    if (slot->head && slot->head->state != CMD_QUEUED) {
        /* One of the saga's commands is being decided: right behind it. */
        cmd->saga_next = slot->head->saga_next;
        slot->head->saga_next = cmd;
        if (slot->tail == slot->head)
            slot->tail = cmd;
        cmd->has_outcome = true;
        loop_cmd_set_state(cmd, CMD_QUEUED);
        return;
    }
    /* Nothing is (a head that waits is one this call's step held up). */
    cmd->saga_next = slot->head;
    slot->head = cmd;
    if (!slot->tail)
        slot->tail = cmd;
    loop_cmd_set_state(cmd, CMD_RETURNED);
    loop_vec_push(&L->returned, cmd);
}

void loop_saga_unqueue(loop_t *L, saga_slot_t *slot, worker_cmd_t *cmd)
{
    if (unlink_queued(slot, cmd))
        promote(L, slot);
}

void loop_saga_take_detached(loop_t *L, saga_slot_t *slot, worker_cmd_t *v, worker_cmd_t *r)
{
    unlink_queued(slot, r); /* a copy found in the queue (loop_chain_park()) */
    unlink_detached(slot, v);
    loop_saga_reattach(L, r);
}

/* Queues cmd behind its saga; READY when it is the saga's only one.  A
 * copy of a chained command that parked is then adopted by it
 * (worker_chain.c, arrived(), called next with the slot returned). */
saga_slot_t *loop_saga_enqueue(loop_t *L, worker_cmd_t *cmd, saga_slot_t *slot)
{
    /* A control command to forward touches no row of its saga: it does
     * not wait for the saga's call in flight (its copy will, on the
     * internal topic). */
    if (!cmd->dec.saga_id[0] || cmd->forward) {
        loop_cmd_set_state(cmd, CMD_READY);
        loop_vec_push(&L->ready, cmd);
        return NULL;
    }
    if (!slot)
        slot = loop_saga_slot(L, cmd->dec.saga_id, true);
    if (slot->tail) {
        slot->tail->saga_next = cmd;
        slot->tail = cmd;
        loop_cmd_set_state(cmd, CMD_QUEUED);
        return slot;
    }
    slot->head = slot->tail = cmd;
    if (blocked(slot, cmd)) { /* a detached call of its step is out */
        loop_cmd_set_state(cmd, CMD_QUEUED);
        return NULL;
    }
    loop_cmd_set_state(cmd, CMD_READY);
    loop_vec_push(&L->ready, cmd);
    return NULL;
}

/* Removes cmd from its saga's queue or detached list; the next one
 * becomes READY (or RETURNED, see promote()). */
void loop_saga_dequeue(loop_t *L, worker_cmd_t *cmd)
{
    saga_slot_t *slot;

    if (!cmd->dec.saga_id[0] || cmd->forward ||
        !(slot = loop_saga_slot(L, cmd->dec.saga_id, false)))
        return;
    if (!(cmd->detached ? unlink_detached(slot, cmd) : unlink_queued(slot, cmd)))
        return;
    cmd->has_outcome = false;
    if (!slot->head && !slot->detached) {
        loop_saga_slot_free(L, slot);
        return;
    }
    promote(L, slot);
}

/* ---- command memory ----------------------------------------------------- */

/* Frees what a command holds besides its place in the FIFO. */
static void cmd_shed(loop_t *L, worker_cmd_t *cmd)
{
    L->held_bytes -= cmd->charge;
    cmd->charge = 0;
    sg_kafka_msg_destroy(cmd->msg);
    cmd->msg = NULL;
    sg_json_destroy(cmd->dec.doc);
    cmd->dec.doc = NULL;
    cmd->follow.set = false;
    cmd->nmembers = 0;
    free(cmd->definition);
    cmd->definition = NULL;
    worker_fresh_free(cmd->fresh);
    cmd->fresh = NULL;
    worker_call_free(&cmd->call);
    worker_result_clear(&cmd->result);
}

/* A command is 1.5 KB, a size for which malloc first sorts every small
 * free chunk back into its bins (malloc_consolidate): 5% of the worker's
 * CPU in a backlog, a command in and out per step.  Freed commands are
 * kept for the next ones instead, up to CMD_SPARE of them. */
worker_cmd_t *loop_cmd_new(loop_t *L)
{
    worker_cmd_t *cmd;

    if (L->spare.n == 0) {
        cmd = sg_xcalloc(1, sizeof(*cmd));
        return cmd;
    }
    cmd = L->spare.v[--L->spare.n];
    memset(cmd, 0, sizeof(*cmd));
    return cmd;
}

/* Frees what a command holds and gives back its memory. */
void loop_cmd_release(loop_t *L, worker_cmd_t *cmd)
{
    cmd_shed(L, cmd);
    if (L->spare.n < CMD_SPARE)
        loop_vec_push(&L->spare, cmd);
    else
        free(cmd);
}

/* A command stops (or starts, +1) being active: unfinished and not
 * parked.  worker.max_in_flight bounds the commands taken from Kafka: a
 * chained command and its copy are one piece of work, which holds one
 * slot, the copy's (counting both, a limit of 2 ran one call at a time;
 * counting the copy neither, intake ran ahead and held twice the
 * messages). */
void loop_active_add(loop_t *L, const worker_cmd_t *cmd, int delta)
{
    L->active += (size_t)(ssize_t)delta;
    if (cmd->chained)
        L->active_chained += (size_t)(ssize_t)delta;
}

void loop_cmd_free(loop_t *L, worker_cmd_t *cmd)
{
    if (cmd->state != CMD_FINISHED && cmd->state != CMD_PARKED)
        loop_active_add(L, cmd, -1);
    loop_cmd_release(L, cmd);
    L->held--;
}

/* ---- partition FIFOs --------------------------------------------------- */

int loop_topic_find(const loop_t *L, const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, L->w.topic_commands) == 0)
        return LOOP_TOPIC_COMMANDS;
    if (strcmp(name, L->w.topic_internal) == 0)
        return LOOP_TOPIC_INTERNAL;
    return -1;
}

worker_part_t *loop_part_find(loop_t *L, int topic, int32_t partition)
{
    for (size_t i = 0; i < L->nparts; i++)
        if ((int)L->parts[i]->topic == topic && L->parts[i]->partition == partition)
            return L->parts[i];
    return NULL;
}

void loop_part_append(worker_part_t *p, worker_cmd_t *cmd)
{
    cmd->part_prev = p->tail;
    cmd->part_next = NULL;
    if (p->tail)
        p->tail->part_next = cmd;
    else
        p->head = cmd;
    p->tail = cmd;
}

void loop_part_unlink(worker_part_t *p, worker_cmd_t *cmd)
{
    if (cmd->part_prev)
        cmd->part_prev->part_next = cmd->part_next;
    else
        p->head = cmd->part_next;
    if (cmd->part_next)
        cmd->part_next->part_prev = cmd->part_prev;
    else
        p->tail = cmd->part_prev;
    cmd->part_next = cmd->part_prev = NULL;
}

/* A finished command leaves memory at the end of the turn.  One with an
 * offset waits in its partition's FIFO, light, until the offset passes it;
 * a chained one holds no offset and leaves the FIFO at once (else it would
 * fill the window behind a slow command: a saga of n steps chains n). */
void loop_retire(loop_t *L, worker_cmd_t *cmd)
{
    if (cmd->chained && cmd->part) {
        loop_part_unlink(cmd->part, cmd);
        loop_vec_push(&L->graveyard, cmd);
    } else {
        loop_vec_push(&L->lighten, cmd);
    }
}

/* Where a command's log lines say they come from. */
void loop_cmd_ctx(const worker_cmd_t *cmd, sg_log_ctx_t *ctx)
{
    sg_log_ctx_t init = SG_LOG_CTX_INIT;

    *ctx = init;
    ctx->saga_id = cmd->dec.saga_id[0] ? cmd->dec.saga_id : NULL;
    ctx->step = cmd->call.step_name;
    ctx->attempt = cmd->dec.attempt > 0 ? cmd->dec.attempt : -1;
    ctx->topic = cmd->msg ? sg_kafka_msg_topic(cmd->msg) : NULL;
    ctx->partition = cmd->msg ? sg_kafka_msg_partition(cmd->msg) : -1;
    ctx->offset = cmd->offset;
    /* With tracing on, a command's call carries its attempt span's
     * context (worker_observe.c); off, its saga's, which is not logged. */
    if (worker_observe_tracing())
        ctx->traceparent = cmd->call.traceparent;
}

/* ---- the end of a turn ------------------------------------------------- */

void loop_bury(loop_t *L)
{
    /* Lightened first: a command can be in both lists (finished, then
     * popped in the same turn), and the graveyard frees it. */
    for (size_t i = 0; i < L->lighten.n; i++)
        cmd_shed(L, L->lighten.v[i]);
    L->lighten.n = 0;
    for (size_t i = 0; i < L->graveyard.n; i++)
        loop_cmd_free(L, L->graveyard.v[i]);
    L->graveyard.n = 0;
}
