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
 * A saga has at most one command in progress; its later commands wait in
 * its queue, so a slow step holds back its own saga only.  The offset
 * PostgreSQL keeps is the first unfinished offset of the partition, which
 * is where the next owner starts.
 *
 * Chaining (worker.chain).  A decision that emits a saga's next step
 * command for now (not a timer) writes it to the outbox as always.  When
 * that message will come back to this worker (its key, the saga id, maps
 * to a partition of ours under librdkafka's default partitioner), the
 * command is also decided at once, in the same transaction, as if it had
 * arrived: its attempt row commits with the previous outcome, and its call
 * starts right after the commit.  A saga's steps then cost one transaction
 * each and no trip through the relay and Kafka.  The chained command sits
 * at the head of its saga's queue and in its partition's FIFO (offset -1,
 * which the stored offset ignores), so ordering, draining and abandoning
 * treat it like any other.  A saga.start's first step command is chained
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
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/select.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_health.h"
#include "sagad/sg_http.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_run.h"
#include "sagad/sg_version.h"
#include "worker.h"

#define SAGA_BUCKETS          16384
#define WORKER_SCHEMA_VERSION 7     /* 0007: sagad_outbox_shard_of (0005: the held status) */
#define HOUSEKEEPING_MS       1000  /* gauges, SIGHUP */
#define PARTITIONS_CHECK_MS   10000 /* the commands topic's partition count, for chaining */
#define PG_PING_MS            5000  /* an idle worker checks its session this often */
#define CMD_SPARE             1024  /* freed commands kept for reuse: 1.5 MB */
/* A finished command waits in its partition's FIFO until every offset
 * before it is finished too; it then keeps only its offset (its message
 * and decoding are freed), so a slow command at the head holds back the
 * stored offset but not the commands behind it.  The window of commands
 * held, finished or not, is still bounded: this many times
 * worker.max_in_flight. */
#define WINDOW_FACTOR 16
/* Tries of a message's dead letter that PostgreSQL refuses before a
 * reduced one is written instead (poison_single). */
#define DEAD_LETTER_TRIES 3
/* Full (either limit above), the worker just stops taking messages:
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
#define CHAIN_BUCKETS  4096
/* Most commands chained from one decision in one transaction: a step, or
 * the compensations a failure walks through. */
#define CHAIN_DEPTH (2 * SG_MAX_STEPS + 2)

struct worker_part_s {
    int32_t partition;
    int64_t epoch;
    int64_t next_fetch; /* offset after the last one taken from Kafka */
    int64_t stored;     /* offset kept in PostgreSQL */
    int64_t in_kafka;   /* offset last committed to Kafka (for lag tools) */
    worker_cmd_t *head, *tail;
    bool touched; /* has a command in the current transaction */
};

typedef struct saga_slot_s {
    struct saga_slot_s *next;
    worker_cmd_t *head, *tail;
    char id[];
} saga_slot_t;

typedef struct vec_s {
    worker_cmd_t **v;
    size_t n, cap;
} vec_t;

/* A chained command whose message has not arrived yet. */
typedef struct chain_entry_s {
    struct chain_entry_s *next;
    int32_t partition;
    char id[];
} chain_entry_t;

/* One of the worker's transactions and what is kept per transaction.
 * Each has its own PostgreSQL connection, so that one can run while the
 * next batch is loaded and decided on the other. */
enum { MAX_TXNS = 2 };
typedef struct txn_slot_s {
    sg_pg_t *pg;
    worker_writes_t *writes;
    sg_metrics_batch_t metrics;
    vec_t chain_new;      /* chained in it, in decision order */
    worker_cmd_t **batch; /* sent and not collected yet: its commands */
    size_t n;
    worker_stats_t delta; /* what its decisions added to the counters */
    uint64_t t0;          /* when it began (us) */
} txn_slot_t;

typedef struct loop_s {
    worker_t w;
    sg_pg_opts_t pgopts;
    sg_kafka_t *consumer;
    worker_pool_t *pool;
    worker_part_t **parts;
    size_t nparts;
    saga_slot_t *sagas[SAGA_BUCKETS];
    vec_t ready;       /* READY, in arrival order */
    vec_t returned;    /* RETURNED, from the pool */
    vec_t graveyard;   /* abandoned or finished, freed at the end of the turn */
    size_t held;       /* commands held (not freed), finished or not */
    size_t held_bytes; /* their charges (worker.intake_max_bytes) */
    size_t intake_max_bytes;
    size_t active;          /* held and not FINISHED (nor PARKED) */
    size_t active_chained;  /* of them, chained commands: not what max_in_flight bounds */
    vec_t lighten;          /* FINISHED but still in a FIFO: shed their payload at turn end */
    vec_t spare;            /* freed commands, for reuse (cmd_new()) */
    vec_t suspects;         /* crash-loop suspects waiting to run alone, in order */
    worker_cmd_t *isolated; /* the suspect running alone now */
    size_t calling;
    /* Fast calls (see hold_for_calls()): when the last call was handed to
     * the pool, how long calls take (a moving average), and whether the
     * loop waits for them instead of sending. */
    uint64_t last_submit_us, call_avg_us;
    bool holding;
    bool paused;
    uint64_t last_poll; /* when intake last polled the consumer (ms) */
    int kafka_pipe[2];
    int max_in_flight, batch_size;
    int64_t drain_ms;
    unsigned pg_failures;
    uint64_t next_report;
    /* For the progress line: transactions, the commands in them, and the
     * time spent in them since the last line. */
    uint64_t txns, txn_cmds, txn_us;
    /* Transactions (see turn()): worker.transactions_in_flight slots and
     * the one being decided or run now. */
    txn_slot_t slots[MAX_TXNS];
    int nslots;
    txn_slot_t *cur;
    worker_saga_t *sagas_buf; /* run_txn's sagas, kept between batches */
    size_t sagas_cap;
    sg_cli_t *cli;
    sg_http_t *http;
    uint64_t next_housekeeping, last_pg_ok;
    uint64_t kafka_commit_ms, next_kafka_commit; /* worker.kafka_commit_interval_ms */
    bool pg_up;
    /* Chaining (see the top of this file); on when L->w.chain. */
    int32_t cmd_partitions;      /* of the commands topic, 0 or less: not known */
    int32_t known_partitions;    /* the last count read that was known */
    uint64_t partitions_read_at; /* when cmd_partitions was last asked for (ms) */
    /* The count as the watcher thread last read it, 0 when taken. */
    pthread_t watcher;
    bool watching;
    atomic_int watched;
    atomic_bool watcher_stop;
    uint64_t chain_paused_until;   /* a changed count stops chaining until then (ms) */
    uint64_t repartition_pause_ms; /* worker.chain_repartition_pause_ms */
    chain_entry_t *chain_set[CHAIN_BUCKETS];
    size_t nchain;
    vec_t *chain_new; /* the current transaction's (txn_slot_t) */
    bool draining;    /* a drain starts no new call: nothing is chained */
} loop_t;

static void vec_push(vec_t *vec, worker_cmd_t *cmd)
{
    if (vec->n == vec->cap) {
        vec->cap = vec->cap ? vec->cap * 2 : 256;
        vec->v = realloc(vec->v, sizeof(*vec->v) * vec->cap);
        if (!vec->v)
            abort();
    }
    vec->v[vec->n++] = cmd;
}

static void vec_remove(vec_t *vec, const worker_cmd_t *cmd)
{
    for (size_t i = 0; i < vec->n; i++)
        if (vec->v[i] == cmd) {
            memmove(&vec->v[i], &vec->v[i + 1], sizeof(*vec->v) * (vec->n - i - 1));
            vec->n--;
            return;
        }
}

/* ---- per-saga queues ---------------------------------------------------- */

static unsigned hash(const char *s)
{
    unsigned h = 2166136261u;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h % SAGA_BUCKETS;
}

static saga_slot_t *saga_slot(loop_t *L, const char *id, bool create)
{
    saga_slot_t **pp = &L->sagas[hash(id)], *s;

    for (s = *pp; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    if (!create)
        return NULL;
    s = calloc(1, sizeof(*s) + strlen(id) + 1);
    if (!s)
        abort();
    strcpy(s->id, id);
    s->next = *pp;
    *pp = s;
    return s;
}

static void saga_slot_free(loop_t *L, saga_slot_t *slot)
{
    saga_slot_t **pp = &L->sagas[hash(slot->id)];

    while (*pp != slot)
        pp = &(*pp)->next;
    *pp = slot->next;
    free(slot);
}

/* ---- chaining ------------------------------------------------------------ */

/* The message id of a command ("cmd:<saga>:<step>:..."), NULL if none. */
static const char *cmd_id(const worker_cmd_t *c)
{
    return c->dec.doc ? sg_json_string(sg_json_member(c->dec.doc, "id")) : NULL;
}

static void chain_add(loop_t *L, int32_t partition, const char *id)
{
    chain_entry_t *e = malloc(sizeof(*e) + strlen(id) + 1);
    unsigned b = hash(id) % CHAIN_BUCKETS;

    if (!e)
        abort();
    e->partition = partition;
    strcpy(e->id, id);
    e->next = L->chain_set[b];
    L->chain_set[b] = e;
    L->nchain++;
}

/* Is c the message of a chained command that ran here?  Forgets it. */
static bool chain_take(loop_t *L, const worker_cmd_t *c)
{
    const char *id = cmd_id(c);
    chain_entry_t **pp, *e;

    if (!id || !c->part || L->nchain == 0)
        return false;
    for (pp = &L->chain_set[hash(id) % CHAIN_BUCKETS]; (e = *pp); pp = &e->next)
        if (e->partition == c->part->partition && strcmp(e->id, id) == 0) {
            *pp = e->next;
            free(e);
            L->nchain--;
            return true;
        }
    return false;
}

/* A command stops (or starts, +1) being active: unfinished and not
 * parked.  worker.max_in_flight bounds the commands taken from Kafka: a
 * chained command and its copy are one piece of work, which holds one
 * slot, the copy's (counting both, a limit of 2 ran one call at a time;
 * counting the copy neither, intake ran ahead and held twice the
 * messages). */
static void active_add(loop_t *L, const worker_cmd_t *c, int delta)
{
    L->active += (size_t)(ssize_t)delta;
    if (c->chained)
        L->active_chained += (size_t)(ssize_t)delta;
}

/* The partition is not ours any more: its copies are the next owner's. */
static void chain_forget(loop_t *L, int32_t partition)
{
    for (size_t b = 0; b < CHAIN_BUCKETS && L->nchain; b++)
        for (chain_entry_t **pp = &L->chain_set[b], *e; (e = *pp);) {
            if (partition >= 0 && e->partition != partition) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            free(e);
            L->nchain--;
        }
}

static void retire(loop_t *L, worker_cmd_t *c);
static void cmd_ctx(const worker_cmd_t *c, sg_log_ctx_t *ctx);

static const char *const cstate_names[] = {"queued",   "ready",    "calling",
                                           "returned", "finished", "parked"};

/* The legal changes of a command's state ([from][to]).  A new command is
 * QUEUED (zeroed) until saga_enqueue places it. */
static const bool cstate_legal[6][6] = {
    /* from QUEUED: placed behind its saga, made READY, or the copy a parked
     * command adopts (RETURNED with the parked call's outcome) */
    [CMD_QUEUED] = {[CMD_QUEUED] = true, [CMD_READY] = true, [CMD_RETURNED] = true},
    /* from READY: decided and committed (a call, or done), a chained one's
     * refused outcome waits for its message, or decided again as poison */
    [CMD_READY] =
        {[CMD_READY] = true, [CMD_CALLING] = true, [CMD_FINISHED] = true, [CMD_PARKED] = true},
    [CMD_CALLING] = {[CMD_RETURNED] = true, [CMD_PARKED] = true},
    [CMD_RETURNED] = {[CMD_READY] = true, [CMD_FINISHED] = true, [CMD_PARKED] = true},
    /* FINISHED is final: the command is retired */
    [CMD_PARKED] = {[CMD_FINISHED] = true},
};

/* Every change of a command's state: logged at debug level, asserted
 * legal. */
static void cmd_set_state(worker_cmd_t *c, worker_cstate_t to)
{
    sg_log_ctx_t ctx;

    assert(cstate_legal[c->state][to]);
    if (SG_LOG_DEBUG <= sg_log_level) {
        cmd_ctx(c, &ctx);
        sg_log(SG_LOG_DEBUG, &ctx, "command %s: %s -> %s", c->chained ? "(chained)" : "",
               cstate_names[c->state], cstate_names[to]);
    }
    c->state = to;
}

/* The copy r of the PARKED chained command v (the head of its saga's
 * queue) takes v's place, call and result, and is completed as any
 * returned call: it has the message a dead letter names. */
static void adopt(loop_t *L, saga_slot_t *slot, worker_cmd_t *v, worker_cmd_t *r)
{
    worker_cmd_t **pp;

    for (pp = &v->saga_next; *pp && *pp != r; pp = &(*pp)->saga_next)
        ;
    *pp = r->saga_next;
    r->saga_next = v->saga_next;
    v->saga_next = NULL;
    slot->head = r;
    for (worker_cmd_t *c = slot->head; c; c = c->saga_next)
        slot->tail = c;
    chain_take(L, r);
    r->call = v->call;
    r->result = v->result;
    r->attempt_id = v->attempt_id;
    memset(&v->call, 0, sizeof(v->call));
    memset(&v->result, 0, sizeof(v->result));
    cmd_set_state(r, CMD_RETURNED);
    vec_push(&L->returned, r);
    cmd_set_state(v, CMD_FINISHED); /* not active since it parked */
    retire(L, v);
}

/* The copy of v among the commands queued behind it, if it came. */
static worker_cmd_t *find_copy(const worker_cmd_t *v)
{
    const char *id = cmd_id(v);

    for (worker_cmd_t *c = v->saga_next; c && id; c = c->saga_next)
        if (!c->chained && c->part == v->part && cmd_id(c) && strcmp(cmd_id(c), id) == 0)
            return c;
    return NULL;
}

/* A chained command whose call failed: its outcome waits for its message
 * (see the top of the file), holding its saga but no intake slot. */
static void park(loop_t *L, worker_cmd_t *v)
{
    saga_slot_t *slot = saga_slot(L, v->dec.saga_id, false);
    worker_cmd_t *copy = find_copy(v);
    sg_log_ctx_t ctx;

    cmd_set_state(v, CMD_PARKED);
    active_add(L, v, -1);
    if (slot && copy) {
        adopt(L, slot, v, copy);
        return;
    }
    /* Says why the saga waits: should the message not come (the relay
     * down), its outcome is not written yet. */
    cmd_ctx(v, &ctx);
    ctx.error_code = v->result.err.code;
    sg_log(SG_LOG_INFO, &ctx, "chained call failed: its outcome waits for its message");
}

/* Queues cmd behind its saga; READY when it is the saga's only one. */
static void saga_enqueue(loop_t *L, worker_cmd_t *cmd)
{
    saga_slot_t *slot;

    if (!cmd->dec.saga_id[0]) {
        cmd_set_state(cmd, CMD_READY);
        vec_push(&L->ready, cmd);
        return;
    }
    slot = saga_slot(L, cmd->dec.saga_id, true);
    if (slot->tail) {
        slot->tail->saga_next = cmd;
        slot->tail = cmd;
        cmd_set_state(cmd, CMD_QUEUED);
        if (slot->head->state == CMD_PARKED && find_copy(slot->head) == cmd)
            adopt(L, slot, slot->head, cmd);
        return;
    }
    slot->head = slot->tail = cmd;
    cmd_set_state(cmd, CMD_READY);
    vec_push(&L->ready, cmd);
}

/* Removes cmd from its saga's queue; the next one becomes READY. */
static void saga_dequeue(loop_t *L, worker_cmd_t *cmd)
{
    saga_slot_t *slot;
    worker_cmd_t **pp;

    if (!cmd->dec.saga_id[0] || !(slot = saga_slot(L, cmd->dec.saga_id, false)))
        return;
    for (pp = &slot->head; *pp && *pp != cmd; pp = &(*pp)->saga_next)
        ;
    if (!*pp)
        return;
    *pp = cmd->saga_next;
    if (slot->tail == cmd) {
        slot->tail = NULL;
        for (worker_cmd_t *c = slot->head; c; c = c->saga_next)
            slot->tail = c;
    }
    cmd->saga_next = NULL;
    if (!slot->head) {
        saga_slot_free(L, slot);
        return;
    }
    if (slot->head->state == CMD_QUEUED) {
        cmd_set_state(slot->head, CMD_READY);
        vec_push(&L->ready, slot->head);
    }
}

/* ---- commands and partitions -------------------------------------------- */

static void call_free(worker_call_t *call)
{
    free(call->saga_id);
    free(call->step_name);
    free(call->idem_key);
    free(call->traceparent);
    sg_json_destroy(call->args);
    sg_json_destroy(call->input);
    memset(call, 0, sizeof(*call));
}

/* Frees what a command holds besides its place in the FIFO. */
static void cmd_shed(loop_t *L, worker_cmd_t *cmd)
{
    L->held_bytes -= cmd->charge;
    cmd->charge = 0;
    sg_kafka_msg_destroy(cmd->msg);
    cmd->msg = NULL;
    sg_json_destroy(cmd->dec.doc);
    cmd->dec.doc = NULL;
    free(cmd->follow);
    cmd->follow = NULL;
    free(cmd->definition);
    cmd->definition = NULL;
    worker_fresh_free(cmd->fresh);
    cmd->fresh = NULL;
    call_free(&cmd->call);
    worker_result_clear(&cmd->result);
}

/* A command is 1.5 KB, a size for which malloc first sorts every small
 * free chunk back into its bins (malloc_consolidate): 5% of the worker's
 * CPU in a backlog, a command in and out per step.  Freed commands are
 * kept for the next ones instead, up to CMD_SPARE of them. */
static worker_cmd_t *cmd_new(loop_t *L)
{
    worker_cmd_t *c;

    if (L->spare.n == 0) {
        if (!(c = calloc(1, sizeof(*c))))
            abort();
        return c;
    }
    c = L->spare.v[--L->spare.n];
    memset(c, 0, sizeof(*c));
    return c;
}

/* Frees what a command holds and gives back its memory. */
static void cmd_release(loop_t *L, worker_cmd_t *c)
{
    cmd_shed(L, c);
    if (L->spare.n < CMD_SPARE)
        vec_push(&L->spare, c);
    else
        free(c);
}

static void cmd_free(loop_t *L, worker_cmd_t *cmd)
{
    if (cmd->state != CMD_FINISHED && cmd->state != CMD_PARKED)
        active_add(L, cmd, -1);
    cmd_release(L, cmd);
    L->held--;
}

static worker_part_t *part_find(loop_t *L, int32_t partition)
{
    for (size_t i = 0; i < L->nparts; i++)
        if (L->parts[i]->partition == partition)
            return L->parts[i];
    return NULL;
}

/* First unfinished offset of the partition: where a restart must begin,
 * once transaction t (NULL: none) commits.  The commands another
 * transaction finishes are unfinished until that one commits. */
static int64_t part_watermark(const worker_part_t *p, const txn_slot_t *t)
{
    for (const worker_cmd_t *c = p->head; c; c = c->part_next)
        if (c->state != CMD_FINISHED && !(c->finishing && c->txn == t) && !c->chained)
            return c->offset;
    return p->next_fetch;
}

static void part_append(worker_part_t *p, worker_cmd_t *c)
{
    c->part_prev = p->tail;
    c->part_next = NULL;
    if (p->tail)
        p->tail->part_next = c;
    else
        p->head = c;
    p->tail = c;
}

static void part_unlink(worker_part_t *p, worker_cmd_t *c)
{
    if (c->part_prev)
        c->part_prev->part_next = c->part_next;
    else
        p->head = c->part_next;
    if (c->part_next)
        c->part_next->part_prev = c->part_prev;
    else
        p->tail = c->part_prev;
    c->part_next = c->part_prev = NULL;
}

/* A finished command leaves memory at the end of the turn.  One with an
 * offset waits in its partition's FIFO, light, until the offset passes it;
 * a chained one holds no offset and leaves the FIFO at once (else it would
 * fill the window behind a slow command: a saga of n steps chains n). */
static void retire(loop_t *L, worker_cmd_t *c)
{
    if (c->chained && c->part) {
        part_unlink(c->part, c);
        vec_push(&L->graveyard, c);
    } else {
        vec_push(&L->lighten, c);
    }
}

/* Unlinks the finished prefix of the partition's FIFO.  The commands are
 * freed at the end of the turn, not here: the batch that finished them
 * (turn(), process()) still reads them after the commit. */
static void part_pop_finished(loop_t *L, worker_part_t *p)
{
    while (p->head && p->head->state == CMD_FINISHED) {
        worker_cmd_t *c = p->head;
        part_unlink(p, c);
        vec_push(&L->graveyard, c);
    }
}

/* Drops every command of a partition this worker no longer owns: nothing
 * of it may commit.  Calls still running are freed when they return. */
static void part_abandon(loop_t *L, worker_part_t *p, const char *why)
{
    size_t n = 0;

    while (p->head) {
        worker_cmd_t *c = p->head;
        p->head = c->part_next;
        if (c->state != CMD_FINISHED) {
            n++;
            saga_dequeue(L, c);
            vec_remove(&L->ready, c);
            vec_remove(&L->returned, c);
            vec_remove(&L->suspects, c);
            if (c == L->isolated)
                L->isolated = NULL;
        }
        c->abandoned = true;
        c->part = NULL;
        /* A running call is freed when it returns; the rest at the end of
         * the turn (a batch in progress may still point at them). */
        if (c->state != CMD_CALLING)
            vec_push(&L->graveyard, c);
    }
    p->tail = NULL;
    chain_forget(L, p->partition);
    if (n) {
        sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
        ctx.topic = L->w.topic_commands;
        ctx.partition = p->partition;
        sg_log(SG_LOG_WARN, &ctx,
               "abandoned %zu unfinished commands (%s); the partition's next owner redoes them", n,
               why);
    }
}

/* A partition that is not ours any more: its commands are abandoned and
 * the partition forgotten. */
static void part_drop(loop_t *L, worker_part_t *p, const char *why)
{
    char pstr[16];

    part_abandon(L, p, why);
    snprintf(pstr, sizeof(pstr), "%d", (int)p->partition);
    sg_metric_hide(SG_M_CONSUMER_LAG, SG_LABELS(pstr));
    for (size_t i = 0; i < L->nparts; i++)
        if (L->parts[i] == p) {
            memmove(&L->parts[i], &L->parts[i + 1], sizeof(*L->parts) * (L->nparts - i - 1));
            L->nparts--;
            break;
        }
    free(p);
}

/* Where a command's log lines say they come from. */
static void cmd_ctx(const worker_cmd_t *c, sg_log_ctx_t *ctx)
{
    sg_log_ctx_t init = SG_LOG_CTX_INIT;

    *ctx = init;
    ctx->saga_id = c->dec.saga_id[0] ? c->dec.saga_id : NULL;
    ctx->step = c->call.step_name;
    ctx->attempt = c->dec.attempt > 0 ? c->dec.attempt : -1;
    ctx->topic = c->msg ? sg_kafka_msg_topic(c->msg) : NULL;
    ctx->partition = c->msg ? sg_kafka_msg_partition(c->msg) : -1;
    ctx->offset = c->offset;
}

/* ---- PostgreSQL --------------------------------------------------------- */

/* The session's state for /readyz and sagad_pg_connected, set on change. */
static void pg_state(loop_t *L, bool up, const sg_err_t *err)
{
    if (up)
        L->last_pg_ok = sg_run_now_ms();
    if (up == L->pg_up)
        return;
    L->pg_up = up;
    sg_health_set(SG_CHECK_PG, up, "%s", err ? err->message : "connection lost");
}

static void pg_backoff(loop_t *L)
{
    sg_backoff_t b = {200, 5000};
    uint64_t ms = sg_backoff_delay_ms(&b, L->pg_failures < 10 ? L->pg_failures : 10, 0, &L->w.rng);
    uint64_t end = sg_run_now_ms() + ms;

    while (sg_run_now_ms() < end && !sg_run_stop_now) {
        struct timespec ts = {0, 20 * 1000000L};
        sg_health_beat();
        nanosleep(&ts, NULL);
    }
}

/* After a failure: reconnect when the session is gone. */
static void pg_recover(loop_t *L, const sg_err_t *err)
{
    sg_err_t e;

    pg_state(L, false, err);
    if (L->pg_failures++ == 0)
        sg_log_kv(SG_LOG_WARN, "PostgreSQL transaction failed; retrying with backoff", "error",
                  err->message, "error_code", err->code, NULL);
    pg_backoff(L);
    if (!sg_pg_ok(L->w.pg) && sg_pg_reconnect(L->w.pg, &e) < 0)
        sg_log_kv(SG_LOG_WARN, "PostgreSQL reconnect failed", "error", e.message, NULL);
    else if (sg_pg_ok(L->w.pg))
        pg_state(L, true, NULL);
}

/* The commands topic's partition count, n (0 or less: not known), as read
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
static void partitions_read(loop_t *L, int32_t n)
{
    L->partitions_read_at = sg_run_now_ms();
    if (n > 0 && L->known_partitions > 0 && n != L->known_partitions) {
        char was[16], now[16], pause[24];
        snprintf(was, sizeof(was), "%d", (int)L->known_partitions);
        snprintf(now, sizeof(now), "%d", (int)n);
        snprintf(pause, sizeof(pause), "%llu", (unsigned long long)L->repartition_pause_ms);
        sg_log_kv(SG_LOG_WARN,
                  "the commands topic's partition count changed: chaining is off while "
                  "producers still hash keys over the old count",
                  "topic", L->w.topic_commands, "partitions_before", was, "partitions", now,
                  "pause_ms", pause, NULL);
        L->chain_paused_until = sg_run_now_ms() + L->repartition_pause_ms;
    }
    if (n > 0)
        L->known_partitions = n;
    L->cmd_partitions = n;
}

/* Asks the cluster for the count, at most once a second: an assignment
 * calls this once per partition assigned. */
static void refresh_partitions(loop_t *L, int timeout_ms)
{
    if (!L->w.chain || sg_run_now_ms() - L->partitions_read_at < 1000)
        return;
    partitions_read(L, sg_kafka_partition_count(L->consumer, L->w.topic_commands, timeout_ms));
}

/* The watcher thread reads the count every PARTITIONS_CHECK_MS (every
 * second while it is not known) for housekeeping to take: a metadata
 * request from the loop itself, with a busy broker, held it up to 300 ms
 * (the latency benchmark's worst stalls).  librdkafka's handle may be
 * used from any thread. */
static void *partition_watcher(void *arg)
{
    loop_t *L = arg;

    while (!atomic_load(&L->watcher_stop)) {
        int32_t n = sg_kafka_partition_count(L->consumer, L->w.topic_commands, 2000);
        uint64_t until = sg_run_now_ms() + (n > 0 ? PARTITIONS_CHECK_MS : 1000);

        atomic_store(&L->watched, n > 0 ? n : -1);
        while (!atomic_load(&L->watcher_stop) && sg_run_now_ms() < until) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* L->parts is kept in partition order: send_fences() updates the offset
 * rows in that order, so two transactions out at once lock them in the
 * same order and cannot deadlock. */
static int cmp_part(const void *a, const void *b)
{
    int32_t x = (*(worker_part_t *const *)a)->partition,
            y = (*(worker_part_t *const *)b)->partition;

    return (x > y) - (x < y);
}

/* The partition's log ends before the offset kept in PostgreSQL: the
 * topic was deleted and made again, or the broker lost its data (an
 * unclean leader election cuts the log back).  Every message it now
 * holds came after what was consumed, yet sits below the stored offset,
 * where intake would skip it as already taken: its sagas would never run.
 * The stored offset goes back to the log's first offset instead (for our
 * epoch only); a command already handled before the loss, if one comes
 * again, is recognised by its saga's state and has no second effect.  (A
 * new leader whose high watermark lags for a moment after a failover
 * would land here too: the cost is handling the log again, still with no
 * second effect.)  When the leader does not answer in 2 s, the check waits
 * for the next assignment. */
static void log_reset(loop_t *L, worker_part_t *p)
{
    char pstr[16], epoch[24], low_s[24];
    const char *params[] = {L->w.group, L->w.topic_commands, pstr, epoch, low_s};
    int64_t low, high;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    sg_err_t err;

    if (p->stored == 0 ||
        sg_kafka_query_watermarks(L->consumer, L->w.topic_commands, p->partition, 2000, &low,
                                  &high) < 0 ||
        p->stored <= high)
        return;
    snprintf(pstr, sizeof(pstr), "%d", (int)p->partition);
    snprintf(epoch, sizeof(epoch), "%lld", (long long)p->epoch);
    snprintf(low_s, sizeof(low_s), "%lld", (long long)low);
    ctx.topic = L->w.topic_commands;
    ctx.partition = p->partition;
    ctx.offset = p->stored;
    /* Consumed from low whatever this says: should it fail, the fences
     * keep the old offset (they never lower it) and the partition's next
     * owner goes back again, with no second effect. */
    if (sg_pg_exec(L->w.pg,
                   "UPDATE consumer_offsets SET next_offset = $5::bigint, updated_at = now() "
                   "WHERE group_id = $1 AND topic = $2 AND partition = $3::int AND "
                   "owner_epoch = $4::bigint",
                   5, params, NULL, &err) < 0)
        sg_log(SG_LOG_WARN, &ctx, "cannot move the stored offset back: %s", err.message);
    sg_log(SG_LOG_ERROR, &ctx,
           "the partition's log ends at offset %lld, before the offset kept in PostgreSQL: "
           "the topic was made again or the broker lost data; consuming from its first "
           "offset, %lld (commands handled before are recognised and have no second effect)",
           (long long)high, (long long)low);
    p->stored = p->next_fetch = low;
}

static int64_t take_partition(loop_t *L, int32_t partition)
{
    char pstr[16];
    const char *params[] = {L->w.group, L->w.topic_commands, pstr, L->w.worker_id};
    sg_pg_res_t *res = NULL;
    worker_part_t *p;
    sg_err_t err;

    snprintf(pstr, sizeof(pstr), "%d", (int)partition);
    while (sg_pg_exec(L->w.pg,
                      "INSERT INTO consumer_offsets (group_id, topic, partition, next_offset, "
                      "owner_epoch, owner) VALUES ($1, $2, $3::int, 0, 1, $4) "
                      "ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
                      "owner_epoch = consumer_offsets.owner_epoch + 1, owner = EXCLUDED.owner, "
                      "updated_at = now() RETURNING next_offset, owner_epoch",
                      4, params, &res, &err) < 0) {
        if (!sg_run_running)
            return -1;
        pg_recover(L, &err);
    }
    L->pg_failures = 0;
    if ((p = part_find(L, partition))) /* a stale one: start over */
        part_abandon(L, p, "assigned again");
    else {
        p = calloc(1, sizeof(*p));
        if (!p)
            abort();
        L->parts = realloc(L->parts, sizeof(*L->parts) * (L->nparts + 1));
        if (!L->parts)
            abort();
        L->parts[L->nparts++] = p;
    }
    p->partition = partition;
    qsort(L->parts, L->nparts, sizeof(*L->parts), cmp_part);
    /* Partitions may have been added, which moves keys: chaining needs
     * the count the relay's producer partitions by. */
    refresh_partitions(L, 2000);
    p->next_fetch = p->stored = sg_pg_res_int(res, 0, 0, 0);
    p->in_kafka = -1; /* Kafka's copy may be older: the next commit sends it */
    p->epoch = sg_pg_res_int(res, 0, 1, 0);
    sg_pg_res_destroy(res);
    {
        sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
        ctx.topic = L->w.topic_commands;
        ctx.partition = partition;
        ctx.offset = p->next_fetch;
        sg_log(SG_LOG_INFO, &ctx,
               "partition taken with owner epoch %lld; fetching from the offset "
               "kept in PostgreSQL",
               (long long)p->epoch);
    }
    log_reset(L, p);
    return p->next_fetch;
}

/* ---- transactions ------------------------------------------------------- */

static int cmp_saga(const void *a, const void *b)
{
    return strcmp(((const worker_saga_t *)a)->saga_id, ((const worker_saga_t *)b)->saga_id);
}

static worker_saga_t *find_saga(worker_saga_t *sagas, size_t n, const char *id)
{
    worker_saga_t key;

    key.saga_id = id;
    return id[0] ? bsearch(&key, sagas, n, sizeof(*sagas), cmp_saga) : NULL;
}

/* The array parameters of load_state(): every saga of the batch; (saga,
 * step, phase, generation, attempt) of each step command; (saga,
 * definition) of each saga.start. */
enum {
    A_IDS,
    A_STEP_SAGA,
    A_STEP_IDX,
    A_STEP_PHASE,
    A_STEP_GEN,
    A_STEP_ATTEMPT,
    A_START_SAGA,
    A_START_DEF,
    NARRAYS
};

/* Round trip 1: BEGIN, the saga rows (locked), the attempt rows of step
 * commands (crash detection), the definitions of resubmitted sagas. */
static int load_state(loop_t *L, worker_cmd_t **batch, size_t n, sg_pg_res_t **load,
                      sg_pg_res_t **counts, sg_pg_res_t **conflicts, sg_err_t *err)
{
    const char **items = calloc(NARRAYS * (n + 1), sizeof(char *)), **a[NARRAYS], *p[NARRAYS];
    char(*nums)[3][16] = calloc(n + 1, sizeof(*nums));
    sg_pg_buf_t b[NARRAYS] = {{0}};
    size_t nids = 0, nc = 0, ns = 0;
    int rc;

    if (!items || !nums)
        abort();
    for (size_t k = 0; k < NARRAYS; k++)
        a[k] = items + k * (n + 1);
    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *c = batch[i];
        if (!c->dec.saga_id[0] || c->dec.type == SG_CMD_POISON || c->copy)
            continue;
        a[A_IDS][nids++] = c->dec.saga_id;
        if (c->state == CMD_READY &&
            (c->dec.type == SG_CMD_EXECUTE || c->dec.type == SG_CMD_COMPENSATE)) {
            snprintf(nums[nc][0], 16, "%d", c->dec.step);
            snprintf(nums[nc][1], 16, "%d", c->dec.generation);
            snprintf(nums[nc][2], 16, "%d", c->dec.attempt);
            a[A_STEP_SAGA][nc] = c->dec.saga_id;
            a[A_STEP_IDX][nc] = nums[nc][0];
            a[A_STEP_PHASE][nc] = c->dec.type == SG_CMD_COMPENSATE ? "compensate" : "forward";
            a[A_STEP_GEN][nc] = nums[nc][1];
            a[A_STEP_ATTEMPT][nc] = nums[nc][2];
            nc++;
        } else if (c->state == CMD_READY && c->dec.type == SG_CMD_START) {
            a[A_START_SAGA][ns] = c->dec.saga_id;
            a[A_START_DEF][ns] = worker_cmd_definition(c);
            ns++;
        }
    }
    for (size_t k = 0; k < NARRAYS; k++) {
        sg_pg_array_literal(&b[k], a[k], k == A_IDS ? nids : k < A_START_SAGA ? nc : ns);
        p[k] = b[k].data;
    }
    if (sg_pg_pipe_begin(L->w.pg, err) < 0) {
        rc = -1;
        goto out;
    }
    sg_pg_pipe_send(L->w.pg, "BEGIN", 0, NULL, NULL);
    sg_pg_pipe_send(L->w.pg, worker_sql_load, 1, &p[A_IDS], load);
    if (nc)
        sg_pg_pipe_send(
            L->w.pg,
            "SELECT u.saga_id, count(*) FILTER (WHERE a.finished_at IS NULL OR "
            "a.error_code = 'runtime.interrupted'), count(*) FILTER (WHERE a.finished_at IS "
            "NOT NULL AND a.error_code IS DISTINCT FROM 'runtime.interrupted') "
            "FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::int[]) "
            "AS u(saga_id, step, phase, gen, attempt) JOIN attempts a ON a.saga_id = u.saga_id "
            "AND a.step_idx = u.step AND a.phase = u.phase AND a.generation = u.gen AND "
            "a.attempt = u.attempt GROUP BY u.saga_id",
            5, &p[A_STEP_SAGA], counts);
    if (ns)
        sg_pg_pipe_send(L->w.pg,
                        "SELECT s.saga_id, s.definition = u.def FROM unnest($1::text[], "
                        "$2::jsonb[]) AS u(id, def) JOIN sagas s ON s.saga_id = u.id",
                        2, &p[A_START_SAGA], conflicts);
    rc = sg_pg_pipe_end(L->w.pg, err);
out:
    free(items);
    free(nums);
    for (size_t k = 0; k < NARRAYS; k++)
        sg_pg_buf_free(&b[k]);
    return rc;
}

/* Undoes the in-memory effects of a transaction that did not commit. */
static void undo_batch(worker_cmd_t **batch, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *c = batch[i];
        c->finishing = false;
        c->defer = false;
        if (c->calls) {
            c->calls = false;
            call_free(&c->call);
        }
    }
}

/* Drops the commands chained in a transaction that did not commit. */
static void chain_discard(loop_t *L)
{
    for (size_t i = 0; i < L->chain_new->n; i++) {
        cmd_release(L, L->chain_new->v[i]);
    }
    L->chain_new->n = 0;
}

/* Crash-loop suspects waiting to run alone, or one running: no other
 * call starts (see isolate_next()). */
static bool isolating(const loop_t *L)
{
    return L->isolated || L->suspects.n > 0;
}

/* Commands chained in transactions not committed yet, in every slot. */
static size_t chained_out(const loop_t *L)
{
    size_t n = 0;

    for (int i = 0; i < L->nslots; i++)
        n += L->slots[i].chain_new.n;
    return n;
}

/* May the step command c's decision emitted (for saga s) be chained? */
static bool chainable(const loop_t *L, const worker_cmd_t *c, const worker_saga_t *s)
{
    size_t cap = (size_t)L->max_in_flight * WINDOW_FACTOR;

    return L->w.chain && !L->draining && !isolating(L) && sg_run_running && L->cmd_partitions > 0 &&
           sg_run_now_ms() >= L->chain_paused_until && s && c->part && !c->abandoned &&
           L->nchain + chained_out(L) < cap &&
           sg_kafka_key_partition(s->saga_id, strlen(s->saga_id), L->cmd_partitions) ==
               c->part->partition;
}

/* Decides, in the open transaction, the step command c's decision emitted
 * for now, and the ones those emit in turn (see the top of the file). */
static void chain_follow(loop_t *L, worker_cmd_t *c, worker_saga_t *s)
{
    worker_cmd_t *prev = c;

    for (int depth = 0; prev->follow && depth < CHAIN_DEPTH; depth++) {
        char *payload = prev->follow;
        worker_cmd_t *v;

        prev->follow = NULL;
        if (!chainable(L, c, s)) {
            free(payload);
            return;
        }
        v = cmd_new(L);
        v->chained = true;
        v->part = c->part;
        v->offset = -1;
        v->origin = prev;
        cmd_set_state(v, CMD_READY);
        sg_submit_decode(payload, strlen(payload), &L->w.limits, &v->dec);
        free(payload);
        /* A command this transaction created has no attempt rows yet. */
        s->interrupted = s->finished = 0;
        worker_saga_decide(&L->w, v, s);
        if (v->unchained) {
            cmd_release(L, v);
            return;
        }
        v->finishing = !v->calls;
        L->w.stats.chained++;
        sg_metrics_batch_inc(L->w.metrics, SG_M_CHAINED, SG_LABELS("run"));
        vec_push(L->chain_new, v);
        prev = v;
    }
    free(prev->follow);
    prev->follow = NULL;
}

/* After the commit: the chained commands take their places, each right
 * behind the command that emitted it, and their copies are expected. */
static void chain_place(loop_t *L)
{
    for (size_t i = 0; i < L->chain_new->n; i++) {
        worker_cmd_t *v = L->chain_new->v[i], *o = v->origin;
        worker_part_t *p = v->part;
        /* o heads its saga's queue, or was placed just before v. */
        saga_slot_t *slot = saga_slot(L, v->dec.saga_id, false);

        v->origin = NULL;
        part_append(p, v);
        L->held++;
        active_add(L, v, 1);
        v->saga_next = o->saga_next;
        o->saga_next = v;
        if (slot->tail == o)
            slot->tail = v;
        chain_add(L, p->partition, cmd_id(v));
    }
}

/* The offsets of the partitions the transaction touched, through
 * sagad_fence() (which refuses a partition another worker owns now), in
 * one statement for all of them, in partition order (L->parts's). */
static void send_fences(loop_t *L)
{
    char(*nums)[3][24] = calloc(L->nparts + 1, sizeof(*nums));
    const char **items = calloc(3 * (L->nparts + 1), sizeof(char *));
    sg_pg_buf_t lit[3] = {{0}};
    const char *params[5] = {L->w.group, L->w.topic_commands};
    size_t n = 0;

    if (!nums || !items)
        abort();
    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *p = L->parts[i];
        if (!p->touched)
            continue;
        snprintf(nums[n][0], 24, "%d", (int)p->partition);
        snprintf(nums[n][1], 24, "%lld", (long long)p->epoch);
        snprintf(nums[n][2], 24, "%lld", (long long)part_watermark(p, L->cur));
        for (int k = 0; k < 3; k++)
            items[k * (L->nparts + 1) + n] = nums[n][k];
        n++;
    }
    for (int k = 0; k < 3; k++) {
        sg_pg_array_literal(&lit[k], items + k * (L->nparts + 1), n);
        params[2 + k] = lit[k].data;
    }
    if (n)
        sg_pg_pipe_send(L->w.pg,
                        "SELECT sagad_fence($1, $2, u.p, u.e, u.n) FROM unnest($3::int[], "
                        "$4::bigint[], $5::bigint[]) AS u(p, e, n)",
                        5, params, NULL);
    for (int k = 0; k < 3; k++)
        sg_pg_buf_free(&lit[k]);
    free(nums);
    free(items);
}

/* The counters are all int64_t: a transaction's part of them is kept as a
 * difference, taken back if it does not commit. */
_Static_assert(sizeof(worker_stats_t) % sizeof(int64_t) == 0, "worker_stats_t: int64_t only");
enum { NSTATS = sizeof(worker_stats_t) / sizeof(int64_t) };

static void stats_add(worker_stats_t *to, const worker_stats_t *d, int sign)
{
    int64_t *a = (int64_t *)to;
    const int64_t *b = (const int64_t *)d;

    for (size_t i = 0; i < NSTATS; i++)
        a[i] += sign * b[i];
}

/* Makes t the current transaction: the decisions write through its
 * connection, rows, metrics and chain. */
static void use_txn(loop_t *L, txn_slot_t *t)
{
    L->cur = t;
    L->w.pg = t->pg;
    L->w.writes = t->writes;
    L->w.metrics = &t->metrics;
    L->chain_new = &t->chain_new;
}

/* Undoes what the current transaction, which did not commit, did in
 * memory. */
static void txn_abort(loop_t *L, worker_cmd_t **batch, size_t n)
{
    sg_pg_rollback(L->w.pg);
    worker_writes_discard(L->w.writes);
    undo_batch(batch, n);
    chain_discard(L);
    sg_metrics_batch_discard(L->w.metrics);
    stats_add(&L->w.stats, &L->cur->delta, -1);
    memset(&L->cur->delta, 0, sizeof(L->cur->delta));
}

/* One transaction over batch in the current slot, sent up to its COMMIT
 * without waiting for the answers: txn_collect() reads them.  Returns -1
 * with err, the transaction undone, when it failed before COMMIT was
 * sent. */
static int txn_send(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    sg_pg_res_t *load = NULL, *counts = NULL, *conflicts = NULL;
    worker_saga_t *sagas = NULL;
    size_t nsagas = 0, row = 0;
    int rc = -1;
    /* Counted only if the transaction commits: a rolled-back batch is
     * decided again and would count twice. */
    worker_stats_t before = L->w.stats;

    sg_metrics_batch_discard(L->w.metrics);
    L->w.outbox_written = L->w.timers_written = false;
    for (size_t i = 0; i < n; i++)
        if (batch[i]->state == CMD_READY && !batch[i]->copy &&
            (batch[i]->dec.type == SG_CMD_EXECUTE || batch[i]->dec.type == SG_CMD_COMPENSATE))
            batch[i]->copy = chain_take(L, batch[i]);
    if (load_state(L, batch, n, &load, &counts, &conflicts, err) < 0)
        goto out;
    /* A saga is 11 KB (its step table): the array is kept from batch to
     * batch, as zeroing and freeing megabytes per transaction showed in
     * profiles.  worker_saga_load() clears each saga it fills. */
    if (L->sagas_cap < n + 1) {
        free(L->sagas_buf);
        L->sagas_cap = n + 1;
        if (!(L->sagas_buf = malloc(L->sagas_cap * sizeof(*sagas))))
            abort();
    }
    sagas = L->sagas_buf;
    while (row < sg_pg_res_rows(load))
        worker_saga_load(&sagas[nsagas++], load, &row);
    qsort(sagas, nsagas, sizeof(*sagas), cmp_saga);
    for (size_t r = 0; r < sg_pg_res_rows(counts); r++) {
        worker_saga_t *s = find_saga(sagas, nsagas, sg_pg_res_get(counts, r, 0));
        if (s) {
            s->interrupted = sg_pg_res_int(counts, r, 1, 0);
            s->finished = sg_pg_res_int(counts, r, 2, 0);
        }
    }
    for (size_t r = 0; r < sg_pg_res_rows(conflicts); r++) {
        worker_saga_t *s = find_saga(sagas, nsagas, sg_pg_res_get(conflicts, r, 0));
        if (s)
            s->same_definition = strcmp(sg_pg_res_get(conflicts, r, 1), "t") == 0;
    }

    /* Round trip 2: every decision's statements, the fences, COMMIT. */
    if (sg_pg_pipe_begin(L->w.pg, err) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *c = batch[i];
        worker_saga_t *s = c->dec.type == SG_CMD_POISON || c->copy
                               ? NULL
                               : find_saga(sagas, nsagas, c->dec.saga_id);
        c->part->touched = true;
        if (c->copy) {
            /* Its chained command ran here: only the offset moves. */
            c->finishing = true;
            L->w.stats.copies++;
            sg_metrics_batch_inc(L->w.metrics, SG_M_CHAINED, SG_LABELS("copy"));
            continue;
        }
        if (c->state == CMD_READY) {
            worker_saga_decide(&L->w, c, s);
            c->finishing = !c->calls && !c->defer;
        } else {
            worker_saga_complete(&L->w, c, s);
            c->finishing = true;
        }
        /* A saga.start that created its saga chains its first step
         * from the saga as written. */
        chain_follow(L, c, s ? s : c->fresh ? &c->fresh->saga : NULL);
        worker_fresh_free(c->fresh);
        c->fresh = NULL;
    }
    worker_writes_flush(&L->w);
    for (size_t i = 0; i < n; i++)
        batch[i]->txn = L->cur;
    for (size_t i = 0; i < L->chain_new->n; i++)
        L->chain_new->v[i]->txn = L->cur;
    send_fences(L);
    sg_pg_pipe_send(L->w.pg, "COMMIT", 0, NULL, NULL);
    /* After the COMMIT, before the sync: a transaction of its own (see
     * SG_OUTBOX_NOTIFY_OFF), skipped when the one before failed. */
    if (L->w.timers_written)
        sg_pg_pipe_send(L->w.pg, SG_OUTBOX_NOTIFY_TIMERS, 0, NULL, NULL);
    else if (L->w.outbox_written)
        sg_pg_pipe_send(L->w.pg, SG_OUTBOX_NOTIFY, 0, NULL, NULL);
    if (sg_pg_pipe_sync(L->w.pg, err) < 0) {
        /* txn_collect() reports it and rolls back */
    }
    rc = 0;
out:
    L->cur->delta = L->w.stats;
    stats_add(&L->cur->delta, &before, -1);
    if (rc < 0)
        txn_abort(L, batch, n);
    for (size_t i = 0; i < L->nparts; i++)
        L->parts[i]->touched = false;
    sg_pg_res_destroy(load);
    sg_pg_res_destroy(counts);
    sg_pg_res_destroy(conflicts);
    return rc;
}

/* Reads the answers of the current transaction, which txn_send() sent.
 * Returns 0 when it committed; -1 with err, the transaction undone, when
 * not. */
static int txn_collect(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    if (sg_pg_pipe_collect(L->w.pg, err) < 0) {
        txn_abort(L, batch, n);
        return -1;
    }
    if (worker_writes_committed(L->w.writes) > 0)
        sg_log_kv(
            SG_LOG_ERROR,
            "attempt rows missing from RETURNING: their outcomes will not be recorded on them",
            NULL);
    sg_metrics_batch_commit(L->w.metrics);
    pg_state(L, true, NULL);
    return 0;
}

/* One transaction over batch in the current slot, waited for.  Returns 0
 * when committed, -1 with err. */
static int run_txn(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    if (txn_send(L, batch, n, err) < 0)
        return -1;
    return txn_collect(L, batch, n, err);
}

/* A committed command: its call goes to the pool, or it is finished and
 * releases its saga. */
static void settle(loop_t *L, worker_cmd_t *c)
{
    if (c->defer) {
        c->defer = false;
        c->suspect = true; /* not back to ready (requeue()) */
        vec_push(&L->suspects, c);
        return;
    }
    if (c == L->isolated && !c->calls) {
        /* done alone (with or without a call): the next suspect may run */
        L->isolated = NULL;
        c->isolated = false;
    }
    if (c->calls) {
        c->calls = false;
        cmd_set_state(c, CMD_CALLING);
        L->calling++;
        c->call_t0 = L->last_submit_us = sg_run_now_us();
        worker_pool_submit(L->pool, c, &c->call, &c->result);
        return;
    }
    c->finishing = false;
    cmd_set_state(c, CMD_FINISHED);
    active_add(L, c, -1);
    saga_dequeue(L, c);
    retire(L, c);
}

/* Copies the offsets stored in PostgreSQL to Kafka, where lag tools read
 * them: those of every partition, in one request, at most once per
 * worker.kafka_commit_interval_ms (one request per transaction and
 * partition was, at 1,000 steps/s, a thousand writes a second to
 * __consumer_offsets, a broker cost that bought nothing); or only p's, at
 * once (p is being released).  Best effort: the worker itself never reads
 * them back. */
static void kafka_commit(loop_t *L, worker_part_t *p)
{
    int32_t *parts;
    int64_t *next;
    size_t n = 0;

    if (!L->consumer || (!p && sg_run_now_ms() < L->next_kafka_commit))
        return;
    if (!p)
        L->next_kafka_commit = sg_run_now_ms() + L->kafka_commit_ms;
    parts = malloc(sizeof(*parts) * (L->nparts + 1));
    next = malloc(sizeof(*next) * (L->nparts + 1));
    if (!parts || !next)
        abort();
    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *q = L->parts[i];
        if ((p && q != p) || q->stored <= q->in_kafka)
            continue;
        parts[n] = q->partition;
        next[n++] = q->in_kafka = q->stored;
    }
    sg_kafka_commit_offsets(L->consumer, L->w.topic_commands, parts, next, n);
    free(parts);
    free(next);
}

/* After a commit: finished commands release their saga and the offset
 * moves; decided calls go to the pool. */
static void after_commit(loop_t *L, worker_cmd_t **batch, size_t n)
{
    chain_place(L);
    for (size_t i = 0; i < n; i++)
        settle(L, batch[i]);
    for (size_t i = 0; i < L->chain_new->n; i++)
        settle(L, L->chain_new->v[i]);
    L->chain_new->n = 0;
    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *p = L->parts[i];
        int64_t wm = part_watermark(p, NULL);
        part_pop_finished(L, p);
        if (wm > p->stored)
            p->stored = wm;
    }
    kafka_commit(L, NULL);
}

/* Which partitions did another worker take?  Those are abandoned. */
static void check_fences(loop_t *L)
{
    const char *params[] = {L->w.group, L->w.topic_commands};
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    if (sg_pg_exec(L->w.pg,
                   "SELECT partition, owner_epoch FROM consumer_offsets WHERE group_id = $1 AND "
                   "topic = $2",
                   2, params, &res, &err) < 0)
        return;
    for (size_t r = 0; r < sg_pg_res_rows(res); r++) {
        worker_part_t *p = part_find(L, (int32_t)sg_pg_res_int(res, r, 0, -1));
        if (p && sg_pg_res_int(res, r, 1, 0) != p->epoch) {
            L->w.stats.fenced++;
            part_drop(L, p, "fenced: another worker owns the partition now");
        }
    }
    sg_pg_res_destroy(res);
}

/* A command PostgreSQL refuses on its own: its outcome becomes a dead
 * letter (or, for a call's outcome, a permanent failure of the step). */
static void poison_single(loop_t *L, worker_cmd_t *c, const sg_err_t *why)
{
    sg_log_ctx_t ctx;
    sg_err_t err;

    if (c->chained) {
        /* The dead letter needs its message: parked until it comes. */
        worker_result_clear(&c->result);
        worker_result_error(&c->result, SG_ERRCLASS_POISON, "runtime.pg.rejected",
                            "the tool's answer could not be stored: %s", why->message);
        park(L, c);
        return;
    }
    if (c->state == CMD_RETURNED && strcmp(c->result.err.code, "runtime.pg.rejected") != 0) {
        worker_result_clear(&c->result);
        worker_result_error(&c->result, SG_ERRCLASS_POISON, "runtime.pg.rejected",
                            "the tool's answer could not be stored: %s", why->message);
        if (run_txn(L, &c, 1, &err) == 0) {
            after_commit(L, &c, 1);
            return;
        }
    }
    /* Last resort: decided again as poison, the message itself becomes a
     * dead letter, through the same transaction path as any other. */
    cmd_set_state(c, CMD_READY);
    c->dec.type = SG_CMD_POISON;
    sg_err_set(&c->dec.err, SG_ERRCLASS_POISON, "runtime.pg.rejected",
               "PostgreSQL refused to store the outcome of this message: %s", why->message);
    if (run_txn(L, &c, 1, &err) == 0) {
        after_commit(L, &c, 1);
        return;
    }
    cmd_ctx(c, &ctx);
    ctx.error_code = err.code;
    /* Never the same refused insert for ever (the partition would stop):
     * after a few tries, a dead letter of what surely fits, and why. */
    if (++c->dl_refused >= DEAD_LETTER_TRIES && !c->dl_minimal) {
        c->dl_minimal = true;
        sg_log(SG_LOG_WARN, &ctx,
               "PostgreSQL refused this message's dead letter %d times; writing a reduced one "
               "(its headers left out, its message escaped): %s",
               c->dl_refused, err.message);
        if (run_txn(L, &c, 1, &err) == 0) {
            after_commit(L, &c, 1);
            return;
        }
    }
    sg_log(SG_LOG_ERROR, &ctx, "could not even dead-letter a message; will retry: %s", err.message);
}

static void process(loop_t *L, worker_cmd_t **batch, size_t n);
static bool collect(loop_t *L, bool wait);

/* After the transaction over batch, begun at t0 (us), committed (rc 0):
 * the commands settle.  Failed (rc -1, err): lost partitions and lost
 * connections are sorted out, and a refused batch is split so one bad
 * command cannot hold up the others. */
static void txn_done(loop_t *L, worker_cmd_t **batch, size_t n, int rc, const sg_err_t *err,
                     uint64_t t0)
{
    L->txns++;
    L->txn_cmds += n;
    L->txn_us += sg_run_now_us() - t0;
    if (rc == 0) {
        L->pg_failures = 0;
        after_commit(L, batch, n);
        return;
    }
    /* What follows (a check of the fences that drops partitions, a
     * reconnect, transactions of one command each) runs with no other
     * transaction out, on this one's connection. */
    {
        txn_slot_t *t = L->cur;
        collect(L, true);
        use_txn(L, t);
    }
    if (strcmp(err->code, "pg.fenced") == 0) {
        sg_log_kv(SG_LOG_WARN, "fenced: a partition was taken over", "error", err->message, NULL);
        check_fences(L);
        return; /* the rest is retried next turn */
    }
    if (err->cls != SG_ERRCLASS_PERMANENT || !sg_pg_ok(L->w.pg)) {
        pg_recover(L, err);
        return;
    }
    if (n > 1) {
        for (size_t i = 0; i < n; i++)
            if (!batch[i]->abandoned)
                process(L, &batch[i], 1);
        return;
    }
    {
        sg_log_ctx_t ctx;
        cmd_ctx(batch[0], &ctx);
        ctx.error_code = err->code;
        sg_log(SG_LOG_WARN, &ctx, "PostgreSQL refused a command's outcome: %s", err->message);
    }
    poison_single(L, batch[0], err);
}

/* Runs the batch and waits for it. */
static void process(loop_t *L, worker_cmd_t **batch, size_t n)
{
    sg_err_t err;
    uint64_t t0 = sg_run_now_us();
    int rc = run_txn(L, batch, n, &err);

    txn_done(L, batch, n, rc, &err, t0);
}

/* ---- Kafka -------------------------------------------------------------- */

static int64_t on_rebalance(void *opaque, bool assigned, const char *topic, int32_t partition);

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

        rc = sg_kafka_consume(L->consumer, 0, &msg, &err);
        if (rc == 0)
            break;
        if (rc < 0) {
            sg_log_kv(SG_LOG_WARN, "Kafka consume error", "error", err.message, "error_code",
                      err.code, NULL);
            break;
        }
        p = part_find(L, sg_kafka_msg_partition(msg));
        if (!p || sg_kafka_msg_offset(msg) < p->next_fetch) {
            /* Not ours (any more), or already taken. */
            sg_kafka_msg_destroy(msg);
            continue;
        }
        cmd = cmd_new(L);
        L->held++;
        active_add(L, cmd, 1);
        L->w.stats.consumed++;
        cmd->msg = msg;
        cmd->part = p;
        cmd->offset = sg_kafka_msg_offset(msg);
        p->next_fetch = cmd->offset + 1;
        part_append(p, cmd);
        payload = sg_kafka_msg_payload(msg, &len);
        sg_submit_decode(payload ? payload : "", payload ? len : 0, &L->w.limits, &cmd->dec);
        /* What the message may cost while held: its bytes as received,
         * up to 3 times more while its dead letter is written (the base64
         * text and libpq's copy of it: bench-flood's peak passed the
         * budget by that much when only the first two terms counted), and
         * while parsed its strings again and 64 bytes per value. */
        cmd->charge = 4 * len + (cmd->dec.doc ? len + 64 * (size_t)cmd->dec.nodes : 0);
        L->held_bytes += cmd->charge;
        saga_enqueue(L, cmd);
    }
    if (!L->paused && intake_full(L) && sg_run_now_ms() - L->last_poll >= PAUSE_AFTER_MS) {
        L->paused = sg_kafka_pause(L->consumer, true) == 0;
        if (L->paused)
            sg_metric_inc(SG_M_INTAKE_PAUSES, NULL);
    } else if (L->paused && (int)(L->active - L->active_chained) < L->max_in_flight * 3 / 4 &&
               L->held < (size_t)L->max_in_flight * WINDOW_FACTOR * 3 / 4 &&
               L->held_bytes < L->intake_max_bytes / 4 * 3) {
        L->paused = !(sg_kafka_pause(L->consumer, false) == 0);
    }
}

static void take_returned(loop_t *L)
{
    size_t n = 0;
    void **done;
    uint64_t now;

    worker_pool_ack(L->pool); /* first, so a call finishing now wakes us again */
    done = worker_pool_take_done(L->pool, &n);
    now = n ? sg_run_now_us() : 0;

    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *c = done[i];
        uint64_t took = now - c->call_t0;
        L->calling--;
        L->call_avg_us = L->call_avg_us ? (7 * L->call_avg_us + took) / 8 : took;
        if (c->abandoned) {
            cmd_free(L, c);
            continue;
        }
        if (c->chained && c->result.status != WORKER_OK) {
            park(L, c);
            continue;
        }
        cmd_set_state(c, CMD_RETURNED);
        vec_push(&L->returned, c);
    }
    free(done);
}

static void bury(loop_t *L)
{
    /* Lightened first: a command can be in both lists (finished, then
     * popped in the same turn), and the graveyard frees it. */
    for (size_t i = 0; i < L->lighten.n; i++)
        cmd_shed(L, L->lighten.v[i]);
    L->lighten.n = 0;
    for (size_t i = 0; i < L->graveyard.n; i++)
        cmd_free(L, L->graveyard.v[i]);
    L->graveyard.n = 0;
}

/* What of batch did not commit goes back to the front of its queue, in
 * order. */
static void requeue(loop_t *L, worker_cmd_t **batch, size_t n)
{
    vec_t keep_r = {0}, keep_d = {0};

    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *c = batch[i];
        if (c->abandoned || c->suspect)
            continue;
        if (c->state == CMD_RETURNED)
            vec_push(&keep_r, c);
        else if (c->state == CMD_READY)
            vec_push(&keep_d, c);
    }
    for (size_t i = 0; i < L->returned.n; i++)
        vec_push(&keep_r, L->returned.v[i]);
    for (size_t i = 0; i < L->ready.n; i++)
        vec_push(&keep_d, L->ready.v[i]);
    free(L->returned.v);
    free(L->ready.v);
    L->returned = keep_r;
    L->ready = keep_d;
}

/* Settles a transaction that was sent: what did not commit goes back to
 * its queue (a commit settles every command of its batch). */
static void txn_settle(loop_t *L, worker_cmd_t **batch, size_t n, int rc, const sg_err_t *err,
                       uint64_t t0)
{
    txn_done(L, batch, n, rc, err, t0);
    if (rc < 0)
        requeue(L, batch, n);
    free(batch);
}

/* Waits for transaction t, if it is out, and settles it.  True when it
 * was out. */
static bool collect_pending(loop_t *L, txn_slot_t *t)
{
    worker_cmd_t **batch = t->batch;
    size_t n = t->n;
    sg_err_t err;
    int rc;

    if (!batch)
        return false;
    t->batch = NULL; /* what follows may run transactions of its own */
    use_txn(L, t);
    rc = txn_collect(L, batch, n, &err);
    txn_settle(L, batch, n, rc, &err, t->t0);
    return true;
}

/* The transactions out whose answers have all come, collected; with
 * wait, every transaction out: what uses a connection for anything else
 * (a rebalance, a drain's end, a failed transaction's aftermath) comes
 * here first.  True when one was collected. */
static bool collect(loop_t *L, bool wait)
{
    bool any = false;

    for (int i = 0; i < L->nslots; i++) {
        txn_slot_t *t = &L->slots[i];
        if (t->batch && (wait || sg_pg_pipe_answered(t->pg)))
            any |= collect_pending(L, t);
    }
    return any;
}

static bool txn_out(const loop_t *L)
{
    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].batch)
            return true;
    return false;
}

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
    worker_cmd_t *c;

    if (L->isolated || L->suspects.n == 0 || L->calling > 0 || L->returned.n > 0 || txn_out(L))
        return;
    c = L->suspects.v[0];
    vec_remove(&L->suspects, c);
    c->suspect = false;
    c->isolated = true;
    L->isolated = c;
    {
        sg_log_ctx_t ctx;
        cmd_ctx(c, &ctx);
        sg_log(SG_LOG_WARN, &ctx,
               "crash-loop suspect: its attempt was interrupted %d times; it runs alone now "
               "(%zu more waiting), no other call beside it",
               L->w.crash_loop_limit - 1, L->suspects.n);
    }
    vec_push(&L->ready, c);
    memmove(L->ready.v + 1, L->ready.v, sizeof(void *) * (L->ready.n - 1));
    L->ready.v[0] = c;
}

/* May ready command c go into a batch now?  While a suspect runs alone,
 * no command that may start a call does.  While suspects wait for the
 * worker to be quiet, no ready command does: returned calls finish, the
 * transactions out come back, and nothing new keeps the worker busy. */
static bool may_start(const loop_t *L, const worker_cmd_t *c)
{
    if (!isolating(L) || c == L->isolated)
        return true;
    return L->isolated && c->dec.type != SG_CMD_EXECUTE && c->dec.type != SG_CMD_COMPENSATE;
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

    if (!txn_out(L))
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
    if (L->draining || L->calling == 0 || txn_out(L) || L->call_avg_us == 0 ||
        L->call_avg_us > CALL_HOLD_US / 2 ||
        L->returned.n + L->ready.n >= (size_t)L->batch_size / 4)
        return false;
    L->holding = sg_run_now_us() < L->last_submit_us + CALL_HOLD_US;
    return L->holding;
}

/* One turn: the transactions PostgreSQL has answered settle, and a batch
 * of returned calls and ready commands is sent as one transaction on a
 * free one of worker.transactions_in_flight connections, without waiting
 * for its answers: those wake the loop (wait_events()) like a message.
 * Meanwhile the worker loads and decides the next batch on the other
 * connection: its loop and a PostgreSQL backend no longer wait for each
 * other.
 *
 * Two transactions out at once never share a saga: a saga's next command
 * is ready only after the one before committed.  Each partition's offset
 * moves over the commands its own transaction finishes and over those
 * committed before, never over the other one's (part_watermark()); a
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
    bool collected = collect(L, false);
    sg_err_t err;

    L->holding = false;
    take_returned(L);
    isolate_next(L);
    for (int i = 0; i < L->nslots && !t; i++)
        if (!L->slots[i].batch)
            t = &L->slots[i];
    /* Nothing to send, or no connection free: the loop waits for an
     * answer (wait_events()) as for a message or a call. */
    if ((L->ready.n == 0 && L->returned.n == 0) || !t || !send_now(L) || hold_for_calls(L)) {
        bury(L);
        return collected;
    }
    batch = malloc(sizeof(*batch) * (size_t)L->batch_size);
    if (!batch)
        abort();
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
            worker_cmd_t *c = L->ready.v[i];
            if (n < (size_t)L->batch_size && may_start(L, c))
                batch[n++] = c;
            else
                L->ready.v[kept++] = c;
        }
        L->ready.n = kept;
    }
    if (n == 0) {
        free(batch);
        bury(L);
        return collected;
    }
    use_txn(L, t);
    t->t0 = sg_run_now_us();
    if (txn_send(L, batch, n, &err) == 0) {
        t->batch = batch;
        t->n = n;
    } else {
        txn_settle(L, batch, n, -1, &err, t->t0);
    }
    bury(L);
    return true;
}

/* Waits up to timeout_ms for a message, a call's return or, while a
 * transaction is out, PostgreSQL's answer. */
static void wait_events(loop_t *L, int timeout_ms)
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
 * timeout_ms for anything (wait_events()). */
static void wait_turn(loop_t *L, int timeout_ms)
{
    uint64_t now, end = L->last_submit_us + CALL_HOLD_US;
    struct timespec ts = {0, 0};
    fd_set rd;
    int fd = worker_pool_fd(L->pool);

    if (!L->holding) {
        wait_events(L, timeout_ms);
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

/* Lets running calls of partition p (all when p is NULL) finish and
 * commits their outcomes, for up to the drain timeout. */
static void drain(loop_t *L, worker_part_t *p)
{
    uint64_t end = sg_run_now_ms() + (uint64_t)L->drain_ms;

    L->draining = true;
    for (;;) {
        size_t busy = 0;
        for (size_t i = 0; i < L->nparts; i++)
            for (worker_cmd_t *c = L->parts[i]->head; c; c = c->part_next)
                if ((!p || L->parts[i] == p) &&
                    (c->state == CMD_CALLING || c->state == CMD_RETURNED))
                    busy++;
        if (sg_run_now_ms() >= end || sg_run_stop_now)
            break;
        if (busy == 0) {
            /* A transaction out may yet give p's commands calls to run. */
            if (!collect(L, true))
                break;
            continue;
        }
        sg_health_beat();
        if (!turn(L)) {
            /* No intake here: what Kafka signals waits for the loop. */
            kafka_wake_clear(L);
            wait_events(L, 50);
        }
    }
    /* At a forced stop a transaction out is left to PostgreSQL, which
     * rolls it back when the connection closes. */
    if (!sg_run_stop_now)
        collect(L, true);
    L->draining = false;
}

static int64_t on_rebalance(void *opaque, bool assigned, const char *topic, int32_t partition)
{
    loop_t *L = opaque;
    worker_part_t *p;

    (void)topic;
    collect(L, true);
    use_txn(L, &L->slots[0]);
    if (assigned)
        return take_partition(L, partition);
    if (!(p = part_find(L, partition)))
        return -1;
    /* Finish what can be finished while the partition is still ours; the
     * fence refuses the commits if it is not. */
    drain(L, p);
    if ((p = part_find(L, partition))) {
        kafka_commit(L, p);
        part_drop(L, p, "partition revoked");
    }
    return -1;
}

/* ---- health and metrics ------------------------------------------------- */

static void schema_state(int version)
{
    sg_health_set(SG_CHECK_SCHEMA, version >= WORKER_SCHEMA_VERSION,
                  "database schema is at version %d, the worker needs %d: run `sagad-worker "
                  "migrate`",
                  version, WORKER_SCHEMA_VERSION);
}

/* An idle worker learns of a lost session (and a changed schema) here
 * rather than on its next command. */
static void ping_pg(loop_t *L)
{
    sg_err_t err;
    int version;

    if (sg_run_now_ms() - L->last_pg_ok < PG_PING_MS || txn_out(L))
        return;
    use_txn(L, &L->slots[0]);
    if (sg_migrate_current(L->w.pg, &version, &err) < 0) {
        pg_recover(L, &err);
        return;
    }
    pg_state(L, true, NULL);
    schema_state(version);
}

static void export_gauges(loop_t *L)
{
    sg_metric_set(SG_M_STEPS_IN_FLIGHT, NULL, (double)L->calling);
    sg_metric_set(SG_M_COMMANDS_HELD, NULL, (double)L->held);
    sg_metric_set(SG_M_INTAKE_BYTES_HELD, NULL, (double)L->held_bytes);
    sg_metric_set(SG_M_PARTITIONS_ASSIGNED, NULL, (double)L->nparts);
    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *p = L->parts[i];
        int64_t high = sg_kafka_high_watermark(L->consumer, L->w.topic_commands, p->partition);
        char pstr[16];

        if (high < 0)
            continue; /* nothing fetched yet */
        snprintf(pstr, sizeof(pstr), "%d", (int)p->partition);
        sg_metric_set(SG_M_CONSUMER_LAG, SG_LABELS(pstr),
                      (double)(high > p->stored ? high - p->stored : 0));
    }
    /* sagad_circuit_state{tool}: 0 closed, 1 half-open, 2 open (rising
     * with severity, as METRICS.md says; not the enum's order). */
    for (size_t i = 0; i < L->w.reg->ntools; i++) {
        const sg_tool_t *tool = &L->w.reg->tools[i];
        worker_breaker_info_t info;
        if (!tool->breaker)
            continue;
        worker_breaker_info(tool, &info);
        sg_metric_set(SG_M_CIRCUIT_STATE, SG_LABELS(tool->name),
                      info.state == WORKER_BREAKER_OPEN        ? 2.0
                      : info.state == WORKER_BREAKER_HALF_OPEN ? 1.0
                                                               : 0.0);
    }
}

/* Once per turn: liveness, SIGHUP; once a second: gauges and checks. */
static void housekeeping(loop_t *L)
{
    sg_health_beat();
    sg_cli_reload(L->cli);
    if (sg_run_now_ms() < L->next_housekeeping)
        return;
    L->next_housekeeping = sg_run_now_ms() + HOUSEKEEPING_MS;
    ping_pg(L);
    kafka_commit(L, NULL);
    if (L->watching) {
        int n = atomic_exchange(&L->watched, 0);
        if (n != 0 && L->nparts > 0)
            partitions_read(L, n);
    }
    sg_health_set(SG_CHECK_GROUP, sg_kafka_group_joined(L->consumer),
                  "consumer group %s not joined yet (no partition assignment received)",
                  L->w.group);
    export_gauges(L);
}

/* ---- start and stop ----------------------------------------------------- */

static void report(loop_t *L, bool force)
{
    worker_stats_t committed;
    const worker_stats_t *s = &committed;
    char line[512];

    if (!force && sg_run_now_ms() < L->next_report)
        return;
    committed = L->w.stats;
    /* What transactions out decided counts once they commit. */
    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].batch)
            stats_add(&committed, &L->slots[i].delta, -1);
    L->next_report = sg_run_now_ms() + 10000;
    snprintf(line, sizeof(line),
             "consumed=%lld started=%lld rejected=%lld calls=%lld retries=%lld completed=%lld "
             "compensated=%lld failed=%lld dead_letters=%lld held_sagas=%lld stale=%lld held=%zu "
             "calling=%zu active=%zu ready=%zu paused=%d partitions=%zu chained=%lld "
             "copies=%lld txns=%llu cmds_per_txn=%.1f ms_per_txn=%.2f",
             (long long)s->consumed, (long long)s->started, (long long)s->rejected,
             (long long)s->calls, (long long)s->retries, (long long)s->completed,
             (long long)s->compensated, (long long)s->failed, (long long)s->dead_letters,
             (long long)s->held, (long long)s->stale, L->held, L->calling, L->active, L->ready.n,
             (int)L->paused, L->nparts, (long long)s->chained, (long long)s->copies,
             (unsigned long long)L->txns, L->txns ? (double)L->txn_cmds / (double)L->txns : 0.0,
             L->txns ? (double)L->txn_us / 1000.0 / (double)L->txns : 0.0);
    L->txns = L->txn_cmds = L->txn_us = 0;
    sg_log_kv(SG_LOG_INFO, "progress", "counters", line, NULL);
}

/* Chaining predicts the partition of the relay's messages with
 * librdkafka's default partitioner; another one turns chaining off. */
static void check_partitioner(void *opaque, const char *key, const char *value)
{
    loop_t *L = opaque;

    if (L->w.chain && strcmp(key, "partitioner") == 0 && strcmp(value, "consistent_random") != 0 &&
        strcmp(value, "consistent") != 0) {
        L->w.chain = false;
        sg_log_kv(SG_LOG_INFO, "worker.chain is off: kafka.partitioner is not librdkafka's default",
                  "partitioner", value, NULL);
    }
}

static int setup(loop_t *L, sg_cli_t *cli)
{
    const sg_config_t *cfg = cli->cfg;
    const char *regpath = sg_config_str(cfg, "worker.registry");
    char errstr[512], host[64] = "worker";
    const char *topics[1];
    sg_err_t err;
    int version;

    L->w.cfg = cfg;
    L->nslots = (int)sg_config_int(cfg, "worker.transactions_in_flight");
    for (int i = 0; i < L->nslots; i++)
        L->slots[i].writes = worker_writes_new();
    use_txn(L, &L->slots[0]);
    L->w.group = sg_config_str(cfg, "worker.group_id");
    L->w.topic_commands = sg_config_str(cfg, "topic.commands");
    L->w.topic_events = sg_config_str(cfg, "topic.events");
    L->w.topic_dlq = sg_config_str(cfg, "topic.dlq");
    L->w.limits.max_bytes = (size_t)sg_config_int(cfg, "limits.max_message_bytes");
    L->w.limits.max_depth = (int)sg_config_int(cfg, "limits.max_json_depth");
    L->w.limits.max_nodes = (long)sg_config_int(cfg, "limits.max_json_nodes");
    L->intake_max_bytes = (size_t)sg_config_int(cfg, "worker.intake_max_bytes");
    L->w.crash_loop_limit = (int)sg_config_int(cfg, "worker.crash_loop_limit");
    L->w.hold_ms = sg_config_int(cfg, "worker.dead_letter_hold_ms");
    L->w.retry.max_attempts = (int)sg_config_int(cfg, "retry.max_attempts");
    L->w.retry.base_ms = sg_config_int(cfg, "retry.base_ms");
    L->w.retry.cap_ms = sg_config_int(cfg, "retry.cap_ms");
    L->w.comp_retry.max_attempts = (int)sg_config_int(cfg, "retry.compensate_max_attempts");
    L->w.comp_retry.base_ms = sg_config_int(cfg, "retry.base_ms");
    L->w.comp_retry.cap_ms = sg_config_int(cfg, "retry.compensate_cap_ms");
    L->w.budget_ms = sg_config_int(cfg, "retry.budget_ms");
    L->max_in_flight = (int)sg_config_int(cfg, "worker.max_in_flight");
    L->batch_size = (int)sg_config_int(cfg, "worker.batch_size");
    L->drain_ms = sg_config_int(cfg, "worker.drain_timeout_ms");
    L->w.chain = sg_config_bool(cfg, "worker.chain");
    L->kafka_commit_ms = (uint64_t)sg_config_int(cfg, "worker.kafka_commit_interval_ms");
    L->repartition_pause_ms = (uint64_t)sg_config_int(cfg, "worker.chain_repartition_pause_ms");
    sg_config_foreach_kafka(cfg, check_partitioner, L);
    sg_rng_seed(&L->w.rng, 0);
    gethostname(host, sizeof(host) - 1);
    if (strcmp(sg_config_str(cfg, "worker.id"), "auto") != 0)
        snprintf(L->w.worker_id, sizeof(L->w.worker_id), "%s", sg_config_str(cfg, "worker.id"));
    else
        snprintf(L->w.worker_id, sizeof(L->w.worker_id), "%s-%d", host, (int)getpid());

    L->w.reg = worker_registry_load(regpath, cfg, &err);
    if (!L->w.reg) {
        fprintf(stderr, "%s: bad tool registry: %s\n", cli->prog, err.message);
        return SG_EXIT_USAGE;
    }
    sg_pg_opts_from_config(&L->pgopts, cfg, "sagad-worker");
    L->pgopts.run = &sg_run_running;
    L->pgopts.waiting = sg_health_beat;
    /* The outbox trigger's NOTIFY would hold the cluster-wide NOTIFY lock
     * through every commit's WAL flush, so that the two transactions out
     * and every other notifying writer commit one at a time: txn_send()
     * notifies after the COMMIT instead (migration 0009). */
    L->pgopts.session_sql = SG_OUTBOX_NOTIFY_OFF;
    L->w.pg = L->slots[0].pg = sg_pg_connect(&L->pgopts, &err);
    if (!L->w.pg) {
        fprintf(stderr, "%s: PostgreSQL: %s\n", cli->prog, err.message);
        return err.cls == SG_ERRCLASS_PERMANENT ? SG_EXIT_FAIL : SG_EXIT_INFRA;
    }
    if (sg_migrate_current(L->w.pg, &version, &err) < 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, err.message);
        return SG_EXIT_INFRA;
    }
    pg_state(L, true, NULL);
    schema_state(version);
    if (version < WORKER_SCHEMA_VERSION) {
        fprintf(stderr,
                "%s: database schema is at version %d, the worker needs %d: run `%s migrate`\n",
                cli->prog, version, WORKER_SCHEMA_VERSION, cli->prog);
        return SG_EXIT_FAIL;
    }
    for (int i = 1; i < L->nslots; i++)
        if (!(L->slots[i].pg = sg_pg_connect(&L->pgopts, &err))) {
            fprintf(stderr, "%s: PostgreSQL (connection %d of %d): %s\n", cli->prog, i + 1,
                    L->nslots, err.message);
            return err.cls == SG_ERRCLASS_PERMANENT ? SG_EXIT_FAIL : SG_EXIT_INFRA;
        }
    {
        const char *props[] = {"group.id", L->w.group, "client.id", L->w.worker_id, NULL};
        L->consumer = sg_kafka_new(cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr));
    }
    if (!L->consumer) {
        fprintf(stderr, "%s: Kafka: %s\n", cli->prog, errstr);
        return SG_EXIT_USAGE;
    }
    if (pipe(L->kafka_pipe) < 0)
        abort();
    for (int i = 0; i < 2; i++) {
        fcntl(L->kafka_pipe[i], F_SETFL, O_NONBLOCK);
        fcntl(L->kafka_pipe[i], F_SETFD, FD_CLOEXEC);
    }
    sg_kafka_wake_fd(L->consumer, L->kafka_pipe[1]);
    sg_health_set_probe(SG_CHECK_KAFKA, sg_health_kafka_probe, L->consumer, 2000);
    sg_kafka_set_rebalance_hook(L->consumer, on_rebalance, L);
    topics[0] = L->w.topic_commands;
    if (sg_kafka_subscribe(L->consumer, topics, 1, &err) < 0) {
        fprintf(stderr, "%s: Kafka subscribe: %s\n", cli->prog, err.message);
        return SG_EXIT_INFRA;
    }
    if (L->w.chain) {
        if (pthread_create(&L->watcher, NULL, partition_watcher, L) != 0)
            abort();
        L->watching = true;
    }
    L->pool = worker_pool_new((int)sg_config_int(cfg, "worker.threads"), cfg, &sg_run_stop_now);
    return SG_EXIT_OK;
}

static void teardown(loop_t *L)
{
    if (L->watching) {
        atomic_store(&L->watcher_stop, true);
        pthread_join(L->watcher, NULL);
        L->watching = false;
    }
    L->drain_ms = 0;       /* drained already */
    sg_http_stop(L->http); /* nothing probes the consumer after this */
    L->http = NULL;
    sg_health_clear_probe(SG_CHECK_KAFKA);
    /* Leave the group first: that revokes the partitions through
     * on_rebalance while the pool and PostgreSQL still work. */
    sg_kafka_close(L->consumer);
    /* The revoke abandoned every command left, but they still hold their
     * Kafka messages, and destroying the consumer waits for every message:
     * free them first, letting calls that outlived the drain return
     * (within their tool timeout), or the worker never exits. */
    while (L->pool && L->calling > 0) {
        take_returned(L);
        if (L->calling > 0)
            wait_events(L, 50);
    }
    bury(L);
    sg_kafka_destroy(L->consumer);
    L->consumer = NULL;
    /* Calls handed to asynchronous adapters finish (or are abandoned)
     * while the pool can still take them. */
    if (L->pool) {
        worker_pool_stop(L->pool);
        worker_adapters_stop();
    }
    worker_pool_destroy(L->pool);
    L->pool = NULL;
    while (L->nparts)
        part_drop(L, L->parts[0], "shutting down");
    bury(L);
    free(L->graveyard.v);
    free(L->lighten.v);
    for (size_t i = 0; i < L->spare.n; i++)
        free(L->spare.v[i]);
    free(L->spare.v);
    free(L->suspects.v);
    free(L->parts);
    free(L->ready.v);
    free(L->returned.v);
    chain_forget(L, -1);
    for (size_t i = 0; i < SAGA_BUCKETS; i++)
        while (L->sagas[i])
            saga_slot_free(L, L->sagas[i]);
    for (int i = 0; i < MAX_TXNS; i++) {
        txn_slot_t *t = &L->slots[i];
        free(t->batch); /* out at a forced stop: PostgreSQL rolls it back */
        free(t->chain_new.v);
        sg_metrics_batch_free(&t->metrics);
        worker_writes_free(t->writes);
        sg_pg_destroy(t->pg);
    }
    sg_registry_destroy(L->w.reg);
    free(L->sagas_buf);
    if (L->kafka_pipe[0] > 0) {
        close(L->kafka_pipe[0]);
        close(L->kafka_pipe[1]);
    }
}

int worker_cmd_run(sg_cli_t *cli, int argc, char **argv)
{
    loop_t *L = calloc(1, sizeof(*L));
    char errstr[512];
    int rc;

    (void)argc; /* sg_cli_main refuses arguments: the table says it takes none */
    (void)argv;
    if (!L)
        abort();
    sg_run_trap_signals();
    L->cli = cli;
    L->http = sg_http_start(cli->cfg, SG_METRICS_WORKER,
                            SG_CHECK_BIT(SG_CHECK_PG) | SG_CHECK_BIT(SG_CHECK_SCHEMA) |
                                SG_CHECK_BIT(SG_CHECK_KAFKA) | SG_CHECK_BIT(SG_CHECK_GROUP),
                            errstr, sizeof(errstr));
    if (!L->http) {
        fprintf(stderr, "%s: %s\n", cli->prog, errstr);
        free(L);
        return SG_EXIT_USAGE;
    }
    rc = setup(L, cli);
    if (rc == SG_EXIT_OK) {
        sg_log_kv(SG_LOG_INFO, "worker running", "worker_id", L->w.worker_id, "group", L->w.group,
                  "topic", L->w.topic_commands, "registry", L->w.reg->path, "librdkafka",
                  sg_kafka_version(), NULL);
        while (sg_run_running) {
            intake(L);
            if (!turn(L))
                wait_turn(L, 100);
            report(L, false);
            housekeeping(L);
        }
        sg_log_kv(SG_LOG_INFO, "stopping: finishing running calls", NULL);
        drain(L, NULL);
        report(L, true);
    }
    teardown(L);
    free(L);
    if (sg_run_stop_now)
        return SG_EXIT_FAIL;
    return rc;
}

int worker_cmd_topics(sg_cli_t *cli, int argc, char **argv)
{
    const char *names[] = {sg_config_str(cli->cfg, "topic.commands"),
                           sg_config_str(cli->cfg, "topic.events"),
                           sg_config_str(cli->cfg, "topic.dlq")};
    long partitions = 6;
    char errstr[512], *end;
    sg_kafka_t *k;
    sg_err_t err;
    int rc = SG_EXIT_OK;

    if (argc == 3 && strcmp(argv[1], "--partitions") == 0) {
        partitions = strtol(argv[2], &end, 10);
        if (*end || partitions < 1 || partitions > 10000) {
            fprintf(stderr, "%s topics: --partitions must be 1-10000\n", cli->prog);
            return SG_EXIT_USAGE;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s topics [--partitions N]\n", cli->prog);
        return SG_EXIT_USAGE;
    }
    k = sg_kafka_new(cli->cfg, SG_KAFKA_PRODUCER, NULL, errstr, sizeof(errstr));
    if (!k) {
        fprintf(stderr, "%s: Kafka: %s\n", cli->prog, errstr);
        return SG_EXIT_USAGE;
    }
    for (size_t i = 0; i < 3; i++) {
        if (sg_kafka_create_topic(k, names[i], (int)partitions, 30000, &err) < 0) {
            fprintf(stderr, "%s: topic %s: %s\n", cli->prog, names[i], err.message);
            rc = SG_EXIT_INFRA;
            continue;
        }
        printf("%s\n", names[i]);
    }
    sg_kafka_destroy(k);
    return rc;
}
