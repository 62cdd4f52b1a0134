/* The worker loop's private header: loop_t, the one context every file of
 * the loop works on, the structs it holds (partitions, saga slots, vectors,
 * expected copies of chained commands, transaction slots) and the functions
 * the loop's files share.  Only worker_loop.c, worker_cmdq.c, worker_chain.c,
 * worker_parts.c, worker_session.c, worker_txn.c, worker_status.c and
 * worker_run.c include it; the rest of the worker sees worker.h.
 *
 * Calls go one way, down this list (each file calls only those below it;
 * the one call back up is through a function pointer: loop_run() calls the
 * run's each_turn() after every turn):
 *   worker_run.c      the `run` command: setup, housekeeping, the progress
 *                     line, teardown
 *   worker_status.c   the copy of the breakers' states and the partitions'
 *                     lag in PostgreSQL, for the console
 *   worker_loop.c     the main loop and its turn: intake, batches, waits,
 *                     crash-loop isolation, drain, rebalance
 *   worker_txn.c      the batched transactions over the connections, and
 *                     what follows a commit or a failure
 *   worker_parts.c    partitions: ownership (epochs), offsets, fences
 *   worker_session.c  the PostgreSQL session's health: up/down, reconnect;
 *                     the internal keys, read on a connection of their own
 *   worker_chain.c    chaining, the internal topic's partition count
 *   worker_cmdq.c     command memory, the saga and partition queues (and
 *                     finding a partition), the loop's vectors, a command's
 *                     state */
#ifndef SAGAD_WORKER_LOOP_INT_H
#define SAGAD_WORKER_LOOP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sagad/sg_http.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "../worker.h"

#define SAGA_BUCKETS  16384
#define CHAIN_BUCKETS 4096
/* A finished command waits in its partition's FIFO until every offset
 * before it is finished too; it then keeps only its offset (its message
 * and decoding are freed), so a slow command at the head holds back the
 * stored offset but not the commands behind it.  The window of commands
 * held, finished or not, is still bounded: this many times
 * worker.max_in_flight. */
#define WINDOW_FACTOR 16

/* The two topics the worker reads (docs/ARCHITECTURE.md, "Trust
 * boundary"): a partition, its offsets and its fences are those of one
 * (topic, partition). */
typedef enum loop_topic_e {
    LOOP_TOPIC_COMMANDS, /* topic.commands: what producers write */
    LOOP_TOPIC_INTERNAL, /* topic.internal: what the relay alone writes */
    LOOP_NTOPICS
} loop_topic_t;

struct worker_part_s {
    loop_topic_t topic;
    const char *topic_name; /* its name in the configuration */
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
    worker_cmd_t *detached; /* group members' calls in flight, out of the queue */
    char id[];
} saga_slot_t;

typedef struct vec_s {
    worker_cmd_t **v;
    size_t n, cap;
} vec_t;

/* A chained command whose message has not arrived yet, on (topic,
 * partition). */
typedef struct chain_entry_s {
    struct chain_entry_s *next;
    loop_topic_t topic;
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
    sg_span_list_t spans; /* ended in it: exported once it commits */
    vec_t chain_new;      /* chained in it, in decision order */
    worker_cmd_t **batch; /* sent and not collected yet: its commands */
    size_t n;
    worker_stats_t delta; /* what its decisions added to the counters */
    uint64_t t0;          /* when it began (us) */
    /* Its first round trip (BEGIN and the load) is out: it is decided
     * when PostgreSQL answers (loop_collect()), not while the loop
     * waits. */
    bool loading;
    sg_pg_res_t *res[4]; /* the load's answers (worker_txn.c, load_state()) */
} txn_slot_t;

/* The loop's context, its fields grouped by the file that owns them. */
typedef struct loop_s {
    worker_t w; /* what the decisions read and write through (worker_saga.c) */

    /* worker_run.c: what the run holds, its settings and timers */
    sg_cli_t *cli;
    sg_http_t *http;
    sg_otel_t *otel; /* NULL: tracing off (otel.endpoint empty) */
    sg_pg_opts_t pgopts;
    /* One consumer per topic, both in the group worker.group_id: the
     * cooperative-sticky assignor balances the count of a member's
     * partitions, not their topics, so with one consumer of both topics a
     * worker could own all the commands partitions and another all the
     * internal ones, where the steps run (a member subscribed to one
     * topic only gets its partitions, so each topic is balanced alone). */
    sg_kafka_t *consumers[LOOP_NTOPICS];
    int next_consumer; /* intake takes turns between them */
    worker_pool_t *pool;
    int kafka_pipe[2];
    int max_in_flight, batch_size;
    size_t intake_max_bytes; /* worker.intake_max_bytes */
    int64_t drain_ms;
    uint64_t next_housekeeping;
    uint64_t next_report;

    /* worker_cmdq.c: the commands and the queues they wait in */
    saga_slot_t *sagas[SAGA_BUCKETS];
    vec_t ready;           /* READY, in arrival order */
    vec_t returned;        /* RETURNED, from the pool */
    vec_t graveyard;       /* abandoned or finished, freed at the end of the turn */
    size_t held;           /* commands held (not freed), finished or not */
    size_t held_bytes;     /* their charges, against worker.intake_max_bytes */
    size_t active;         /* held and not FINISHED (nor PARKED) */
    size_t active_chained; /* of them, chained commands: not what max_in_flight bounds */
    vec_t lighten;         /* FINISHED but still in a FIFO: shed their payload at turn end */
    vec_t spare;           /* freed commands, for reuse (loop_cmd_new()) */

    /* worker_loop.c: the turn */
    vec_t suspects;         /* crash-loop suspects waiting to run alone, in order */
    worker_cmd_t *isolated; /* the suspect running alone now */
    size_t calling;
    /* Fast calls (see worker_loop.c's hold_for_calls()): when the last
     * call was handed to the pool, how long calls take (a moving
     * average), and whether the loop waits for them instead of sending. */
    uint64_t last_submit_us, call_avg_us;
    bool holding;
    bool paused;
    uint64_t last_poll; /* when intake last polled the consumers (ms) */
    bool draining;      /* a drain starts no new call: nothing is chained */

    /* worker_txn.c: transactions (see worker_loop.c's turn()), worker.
     * transactions_in_flight slots and the one being decided or run now */
    txn_slot_t slots[MAX_TXNS];
    int nslots;
    txn_slot_t *cur;
    worker_saga_t *sagas_buf; /* txn_decide()'s sagas, kept between batches */
    size_t sagas_cap;
    /* For the progress line: transactions, the commands in them, and the
     * time spent in them since the last line. */
    uint64_t txns, txn_cmds, txn_us;

    /* worker_parts.c: the partitions, in (topic, partition) order */
    worker_part_t **parts;
    size_t nparts;
    uint64_t kafka_commit_ms, next_kafka_commit; /* worker.kafka_commit_interval_ms */

    /* worker_session.c: the PostgreSQL session */
    unsigned pg_failures;
    uint64_t last_pg_ok;
    bool pg_up;
    /* The side connection, for what housekeeping reads and writes while
     * the transactions' connections are busy under load: the internal
     * keys (a rotation must still be read) and the status copy
     * (worker_status.c).  And when the keys were last read on demand,
     * each cause at most once a second and each on its own clock, so that
     * one does not hold the other back: an unknown key id, and a key held
     * past its expires_at. */
    sg_pg_t *side_pg;
    uint64_t keys_forced_at, keys_expiry_at;

    /* worker_status.c: the copy of the breakers and lag in PostgreSQL */
    uint64_t next_status;      /* when the next copy is due (ms) */
    uint64_t status_seen;      /* the breakers' transitions it copied */
    uint64_t status_warned_at; /* its last failure logged (ms) */

    /* worker_chain.c: chaining (see the top of that file); on when
     * L->w.chain. */
    int32_t int_partitions;      /* of the internal topic, 0 or less: not known */
    int32_t known_partitions;    /* the last count read that was known */
    uint64_t partitions_read_at; /* when int_partitions was last asked for (ms) */
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
} loop_t;

/* Crash-loop suspects waiting to run alone, or one running: no other
 * call starts (see worker_loop.c's isolate_next()). */
static inline bool loop_isolating(const loop_t *L)
{
    return L->isolated || L->suspects.n > 0;
}

/* ---- worker_cmdq.c: command memory, queues, vectors -------------------- */

/* Appends to (aborts when out of memory) or removes from a vector. */
void loop_vec_push(vec_t *vec, worker_cmd_t *cmd);
void loop_vec_remove(vec_t *vec, const worker_cmd_t *cmd);
/* FNV-1a of a saga id, modulo SAGA_BUCKETS. */
unsigned loop_hash(const char *s);
/* The queue of saga id; created when create is set, else NULL if none. */
saga_slot_t *loop_saga_slot(loop_t *L, const char *id, bool create);
void loop_saga_slot_free(loop_t *L, saga_slot_t *slot);
/* Queues cmd behind its saga (READY when it is the saga's only one);
 * slot: its saga's, when the caller has looked it up (NULL: looked up
 * here, created if need be).  Returns the saga's slot when cmd was queued
 * behind another command, else NULL. */
saga_slot_t *loop_saga_enqueue(loop_t *L, worker_cmd_t *cmd, saga_slot_t *slot);
/* Removes cmd from its saga's queue (or its detached list); the next one
 * becomes READY. */
void loop_saga_dequeue(loop_t *L, worker_cmd_t *cmd);
/* A group member's call went to the pool: cmd leaves its saga's queue for
 * the detached list, and the next command of the saga may be decided. */
void loop_saga_detach(loop_t *L, worker_cmd_t *cmd);
/* The detached call of cmd returned: back into its saga's queue, RETURNED
 * at once when nothing of the saga is being decided, else queued right
 * behind the command that is. */
void loop_saga_reattach(loop_t *L, worker_cmd_t *cmd);
/* Takes cmd, QUEUED, out of slot's queue; the next head may become ready. */
void loop_saga_unqueue(loop_t *L, saga_slot_t *slot, worker_cmd_t *cmd);
/* The detached call of v (a chained group member's, PARKED) is taken
 * over by r, its copy (held out of the queue, or in it): r comes back as
 * v's outcome would (loop_saga_reattach()); v leaves the detached list. */
void loop_saga_take_detached(loop_t *L, saga_slot_t *slot, worker_cmd_t *v, worker_cmd_t *r);
/* Every change of a command's state: logged at debug level, asserted
 * legal. */
void loop_cmd_set_state(worker_cmd_t *cmd, worker_cstate_t to);
/* Where a command's log lines say they come from. */
void loop_cmd_ctx(const worker_cmd_t *cmd, sg_log_ctx_t *ctx);
/* A zeroed command, from the spare list when it has one (never NULL). */
worker_cmd_t *loop_cmd_new(loop_t *L);
/* Frees what c holds and gives its memory back (not counted as held). */
void loop_cmd_release(loop_t *L, worker_cmd_t *cmd);
/* Releases a held command and counts it out of held and active. */
void loop_cmd_free(loop_t *L, worker_cmd_t *cmd);
/* A command stops (or starts, +1) being active. */
void loop_active_add(loop_t *L, const worker_cmd_t *cmd, int delta);
/* The topic of that name, -1 when the worker does not read it. */
int loop_topic_find(const loop_t *L, const char *name);
/* Our partition of that topic and number, NULL if not ours. */
worker_part_t *loop_part_find(loop_t *L, int topic, int32_t partition);
/* The partition FIFO: c appended at its tail, or unlinked. */
void loop_part_append(worker_part_t *p, worker_cmd_t *cmd);
void loop_part_unlink(worker_part_t *p, worker_cmd_t *cmd);
/* A finished command leaves memory at the end of the turn (loop_bury). */
void loop_retire(loop_t *L, worker_cmd_t *cmd);
/* The end of a turn: finished commands shed their payload, those out of
 * every queue are freed. */
void loop_bury(loop_t *L);

/* ---- worker_chain.c: chaining ------------------------------------------ */

/* Is c the message of a chained command that ran here?  Forgets it. */
bool loop_chain_take(loop_t *L, const worker_cmd_t *cmd);
/* Forgets the expected copies of partition p (NULL: of all). */
void loop_chain_forget(loop_t *L, const worker_part_t *p);
/* A message just read joins its saga's queue (loop_saga_enqueue()); but
 * a chained group member's copy is held beside it while its detached call
 * is out (see worker_chain.c), and queued behind it once the call
 * returned (loop_chain_release()). */
void loop_chain_intake(loop_t *L, worker_cmd_t *cmd);
void loop_chain_release(loop_t *L, worker_cmd_t *v);
/* A chained member's call just left the queue: its copy, if already
 * queued (it came before the loop read the commit), is held instead. */
void loop_chain_detached(loop_t *L, worker_cmd_t *v);
/* A chained command whose call failed waits for its message. */
void loop_chain_park(loop_t *L, worker_cmd_t *v);
/* In the open transaction: decides what c's decision emitted for now (s
 * its saga).  After the commit, loop_chain_place() queues those commands;
 * after a rollback, loop_chain_discard() drops them. */
void loop_chain_follow(loop_t *L, worker_cmd_t *cmd, worker_saga_t *s);
void loop_chain_place(loop_t *L);
void loop_chain_discard(loop_t *L);
/* The internal topic's partition count n, as read just now; or asked for
 * (at most once a second); loop_partition_watcher() is the thread reading
 * it in the background (arg: the loop). */
void loop_partitions_read(loop_t *L, int32_t n);
void loop_refresh_partitions(loop_t *L, int timeout_ms);
void *loop_partition_watcher(void *arg);

/* ---- worker_session.c: the PostgreSQL session -------------------------- */

/* The session's state for /readyz and sagad_pg_connected, set on change. */
void loop_pg_state(loop_t *L, bool up, const sg_err_t *err);
/* After a failure (err): backoff, then reconnect when the session is gone. */
void loop_pg_recover(loop_t *L, const sg_err_t *err);
/* Reads the internal keys again (L->w.keys) when security.key_reload_ms
 * has passed, or at once when force (an unknown key id was seen; at most
 * once a second).  Returns 1 when read, 0 when not due, -1 with err set
 * on failure (the keys held are kept). */
int loop_keys_reload(loop_t *L, bool force, sg_err_t *err);
/* The side connection (L->side_pg), connected or reconnected when it is
 * not up.  NULL with err when PostgreSQL does not answer. */
sg_pg_t *loop_side_pg(loop_t *L, sg_err_t *err);

/* ---- worker_parts.c: partitions, offsets, fences ----------------------- */

/* First unfinished offset of p once transaction t (NULL: none) commits. */
int64_t loop_part_watermark(const worker_part_t *p, const txn_slot_t *t);
/* Unlinks p's finished prefix (freed at the end of the turn). */
void loop_part_pop_finished(loop_t *L, worker_part_t *p);
/* Abandons p's commands and forgets p (which is freed). */
void loop_part_drop(loop_t *L, worker_part_t *p, const char *why);
/* A partition of topic assigned: owned with a new epoch; returns the
 * offset to fetch from, -1 when stopping. */
int64_t loop_take_partition(loop_t *L, loop_topic_t topic, int32_t partition);
/* Sends the fences of the touched partitions into the open pipeline. */
void loop_send_fences(loop_t *L);
/* Drops the partitions another worker owns now. */
void loop_check_fences(loop_t *L);
/* Copies the stored offsets to Kafka: p's now, or all (p NULL) when due. */
void loop_kafka_commit(loop_t *L, worker_part_t *p);

/* ---- worker_status.c: the console's copy -------------------------------- */

/* Copies the breakers' states and the partitions' lag to PostgreSQL when
 * a breaker changed state or every STATUS_MS (housekeeping, once a
 * second).  Best effort: a failure is logged once a minute. */
void loop_status_copy(loop_t *L);
/* Deletes this worker's breaker rows (a clean stop). */
void loop_status_clear(loop_t *L);

/* ---- worker_txn.c: transactions ---------------------------------------- */

/* Adds (sign 1) or takes back (-1) counters. */
void loop_stats_add(worker_stats_t *to, const worker_stats_t *d, int sign);
/* Makes t the current transaction. */
void loop_use_txn(loop_t *L, txn_slot_t *t);
/* Sends a transaction over batch in the current slot, up to its COMMIT
 * (its load waited for).  Returns -1 with err, the transaction undone,
 * when it failed before. */
int loop_txn_send(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err);
/* Sends only the first round trip (BEGIN and the load) of a transaction
 * over batch in the current slot: loop_collect() decides it when
 * PostgreSQL answers.  Returns -1 with err, the transaction undone, when
 * it could not be sent. */
int loop_txn_start(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err);
/* Settles a transaction that was sent (rc, err: how it ended; t0: when it
 * began, us) and frees batch. */
void loop_txn_settle(loop_t *L, worker_cmd_t **batch, size_t n, int rc, const sg_err_t *err,
                     uint64_t t0);
/* Decides the transactions out whose load was answered, and collects
 * those whose commit was (all of them, decided and collected, with
 * wait); true when one was. */
bool loop_collect(loop_t *L, bool wait);
/* Is a transaction out? */
bool loop_txn_out(const loop_t *L);

/* ---- worker_loop.c: the turn ------------------------------------------- */

/* The main loop: intake, a turn, a wait when the turn sent nothing, then
 * each_turn (the run's housekeeping and progress line, worker_run.c),
 * until a stop is asked.  The one call into the turn from above. */
void loop_run(loop_t *L, void (*each_turn)(loop_t *L));
/* Takes the calls the pool finished. */
void loop_take_returned(loop_t *L);
/* Waits up to timeout_ms for a message, a call or PostgreSQL's answer. */
void loop_wait_events(loop_t *L, int timeout_ms);
/* Lets the running calls of p (all when NULL) finish and commit. */
void loop_drain(loop_t *L, worker_part_t *p);
/* The consumers' rebalance hook (opaque: the loop). */
int64_t loop_on_rebalance(void *opaque, bool assigned, const char *topic, int32_t partition);

#endif
