/* sagad-worker internals.
 *
 *   worker_registry.c  the adapter behind each tool of the registry (the file
 *                      itself: lib/contract/sg_registry.c)
 *   worker_call.c      a call's request document and normalised outcome
 *   worker_builtin.c   the builtin adapter (noop, echo, fail, sleep, ledger, crash)
 *   worker_http.c      the http adapter: libcurl, one multi-handle thread
 *   worker_http_answer.c  what an HTTP status, body and Retry-After mean
 *   worker_exec.c      the exec adapter: a child process per call
 *   worker_breaker.c   the circuit breaker of each http and exec tool
 *   worker_pool.c      threads that run tool calls, with per-tool limits
 *   worker_saga.c      the state machine: one pure decision per command or
 *                      call outcome (worker_decide.h, with worker_saga_start.c
 *                      and worker_outcome.c)
 *   worker_saga_sql.c  the load of a batch's sagas, and the apply of a
 *                      decision's outcome into the transaction of its batch
 *   worker_observe.c   what the apply reports beyond rows: spans, the error
 *                      and partial-saga counters, log lines' trace ids
 *   worker_run.c       the run command: setup, the main loop, teardown; the
 *                      loop's files share worker_loop_int.h, which lists them:
 *                      worker_loop.c (the turn), worker_txn.c (batches),
 *                      worker_parts.c (partitions, offsets), worker_session.c,
 *                      worker_chain.c (chaining), worker_cmdq.c (commands)
 *   worker_topics.c    the topics command
 */
#ifndef SAGAD_WORKER_H
#define SAGAD_WORKER_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sagad/sg_backoff.h"
#include "sagad/sg_cli.h"
#include "sagad/sg_config.h"
#include "sagad/sg_err.h"
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_otel.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_registry.h"
#include "sagad/sg_trust.h"
#include "sagad/sg_submit.h"

/* ---- tools and adapters ------------------------------------------------ */

typedef struct sg_tool_adapter_s worker_adapter_t;
typedef struct sg_tool_breaker_s worker_breaker_t;
/* A call the pool handed to an asynchronous adapter (see start below). */
typedef struct worker_pending_s worker_pending_t;

/* What a pool thread owns across calls (connections of adapters). */
typedef struct worker_thread_s {
    const sg_config_t *cfg;
    sg_pg_t *pg;                 /* opened on first use by tools that need PostgreSQL */
    volatile sig_atomic_t *stop; /* set: abandon calls now (second SIGTERM) */
    struct worker_pool_s *pool;  /* the pool the thread belongs to */
} worker_thread_t;

/* One tool call.  Everything is owned by the call. */
typedef struct worker_call_s {
    const sg_tool_t *tool;
    char *saga_id;
    char *step_name;
    int step_idx;
    bool compensate;
    int attempt, generation;
    char *idem_key;
    char *traceparent;
    sg_json_t *args;    /* object, never NULL; references resolved */
    sg_json_t *input;   /* the saga's input, may be NULL */
    sg_json_t *forward; /* a compensation's: the outcome of the step it undoes */
    bool resolved;      /* args held references: the attempt row records them */
    bool detach;        /* a parallel group member's forward call: it leaves its saga's
                           queue while it runs, so its siblings run beside it */
} worker_call_t;

/* Frees what a call owns and zeroes it (worker_outcome.c: the decision
 * builds calls, the loop frees the ones it ran). */
void worker_call_free(worker_call_t *call);

/* A call's envelope status.  partial and cancelled are defined and no
 * adapter produces them: a parallel group's partial is its manifest's
 * status (group.finished), not a call's; a saga.cancel lets the call in
 * flight finish, whose own outcome is recorded (docs/WORKER.md,
 * "Cancellation"). */
typedef enum worker_status_e {
    WORKER_OK,
    WORKER_ERROR,
    WORKER_TIMEOUT,
    WORKER_PARTIAL,
    WORKER_CANCELLED,
} worker_status_t;

/* Its name in the envelope and attempts.status (worker_state.c). */
const char *worker_status_name(worker_status_t s);

/* The normalised outcome of a call (the envelope, docs/ARCHITECTURE.md). */
typedef struct worker_result_s {
    worker_status_t status;
    sg_err_t err;           /* class and code when status != OK */
    char *data;             /* JSON text of the tool's answer, malloc'd, may be NULL */
    int64_t retry_after_ms; /* earliest next attempt the downstream asked for, 0: none */
    int64_t latency_ms;
    /* The call failed but may have taken effect: the request went out and
     * no answer says what happened (a transport error after sending, an
     * answer too large to read).  A timeout always may. */
    bool maybe_applied;
    /* A compensation answered with one of its tool's nothing_to_undo
     * statuses: done, nothing was there to undo. */
    bool nothing_to_undo;
} worker_result_t;

/* An adapter plugs a kind of tool into the worker.
 *
 * prepare() checks a registry entry at load time: node is the tool's
 * object at JSON path base; on a bad entry it returns -1 with err saying
 * "PATH: rule".  Which fields an adapter's tools may have, and whether they
 * get a circuit breaker, is the registry's contract (lib/contract/sg_registry.c's
 * adapter kinds); an adapter is found by the kind's name.
 *
 * A call runs one of two ways.  call() runs on a pool thread and returns
 * within the tool's timeout (plus a little).  Or, when start is set, the
 * pool thread only hands the call over: start() returns at once and the
 * adapter calls worker_pool_finish(p) exactly once, from any thread, when
 * out is filled.  stop() (optional) runs once at pool shutdown, after the
 * pool threads are gone: it finishes or abandons every started call. */
struct sg_tool_adapter_s {
    const char *name;
    int (*prepare)(sg_tool_t *tool, const sg_json_t *node, const char *base, const sg_config_t *cfg,
                   sg_err_t *err);
    void (*call)(worker_thread_t *th, const worker_call_t *call, worker_result_t *out);
    void (*release)(sg_tool_t *tool);
    void (*start)(worker_thread_t *th, worker_pending_t *p, const worker_call_t *call,
                  worker_result_t *out);
    void (*stop)(void);
};

/* Loads and checks a registry file (lib/contract/sg_registry.c) and prepares each
 * tool with its adapter: the tool's adapter, its state and, for external
 * tools, its circuit breaker.  On failure returns NULL with err naming the
 * file, the JSON path and the rule.  sg_registry_destroy releases it. */
sg_registry_t *worker_registry_load(const char *path, const sg_config_t *cfg, sg_err_t *err);

extern const worker_adapter_t worker_builtin_adapter;
extern const worker_adapter_t worker_http_adapter;
extern const worker_adapter_t worker_exec_adapter;

/* Fills out from an HTTP answer that arrived whole: status, body[0..len)
 * (at most max bytes) and the Retry-After header's value ("" if none).
 * The http adapter's outcome table (worker_http_answer.c). */
void worker_http_answer(worker_result_t *out, const char *tool, long status, const char *body,
                        size_t len, size_t max, const char *retry_after);

/* Calls every adapter's stop hook (pool shutdown). */
void worker_adapters_stop(void);

/* ---- circuit breakers -------------------------------------------------- */

typedef enum worker_breaker_state_e {
    WORKER_BREAKER_CLOSED,
    WORKER_BREAKER_OPEN,
    WORKER_BREAKER_HALF_OPEN,
} worker_breaker_state_t;

/* What a metrics exporter reads (sagad_circuit_state{tool}), and what the
 * worker copies to PostgreSQL for the console (worker_status.c). */
typedef struct worker_breaker_info_s {
    worker_breaker_state_t state;
    int failures;            /* consecutive, counted while closed */
    uint64_t transitions[3]; /* entries into each state since start */
    uint64_t rejected;       /* calls failed fast with tool.circuit_open */
    uint64_t since_ms;       /* when it entered state (sg_run_now_ms()) */
} worker_breaker_info_t;

/* A breaker with the registry's threshold and cool-down (never NULL). */
worker_breaker_t *worker_breaker_new(int threshold, int64_t cooldown_ms);
void worker_breaker_destroy(worker_breaker_t *b);
/* Decides whether a call of tool may go now.  false: out is filled with
 * tool.circuit_open and nothing may be sent.  *probe says the call is the
 * one half-open probe.  Tools without a breaker always go. */
bool worker_breaker_admit(const sg_tool_t *tool, worker_result_t *out, bool *probe);
/* Feeds a finished (admitted) call's outcome into tool's breaker. */
void worker_breaker_record(const sg_tool_t *tool, const worker_result_t *res, bool probe);
/* The state of tool's breaker (closed, no counts, for tools without one).
 * Thread-safe; for the metrics endpoint. */
void worker_breaker_info(const sg_tool_t *tool, worker_breaker_info_t *out);
const char *worker_breaker_state_name(worker_breaker_state_t s);

/* Fills res for a tool error (status error, or timeout for that class). */
void worker_result_error(worker_result_t *out, sg_errclass_t cls, const char *code, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));
void worker_result_clear(worker_result_t *out);
/* The request document of a call, as the http adapter sends it and the
 * exec adapter writes it to stdin (docs/ADAPTERS.md); caller frees. */
char *worker_request_json(const worker_call_t *call);
/* Sets out->data from a tool's answer buf[0..len), without loss: the JSON
 * text when it is JSON jsonb holds exactly (at most max bytes), else one
 * JSON string holding the bytes (sg_text_or_base64); nothing when empty. */
void worker_result_data(worker_result_t *out, const char *buf, size_t len, size_t max);

/* ---- the call pool ----------------------------------------------------- */

typedef struct worker_pool_s worker_pool_t;
typedef void (*worker_done_fn)(void *opaque, void *job);

/* threads run calls; done(opaque, job) is called on the pool thread when a
 * call finished (the result is in the job); the caller wakes its loop. */
worker_pool_t *worker_pool_new(int threads, const sg_config_t *cfg, volatile sig_atomic_t *stop);
/* Stops taking calls and joins the pool's threads; calls handed to an
 * asynchronous adapter may still finish into the pool afterwards, so the
 * owner stops the adapters (worker_adapters_stop) between this and
 * worker_pool_destroy, which frees it (and stops it first if need be). */
void worker_pool_stop(worker_pool_t *pool);
void worker_pool_destroy(worker_pool_t *pool);
/* Stages a call, which runs once worker_pool_flush() hands it over.  job
 * is opaque to the pool; call and out point into it.  The loop's thread
 * only. */
void worker_pool_submit(worker_pool_t *pool, void *job, worker_call_t *call, worker_result_t *out);
/* Hands the staged calls to the pool's threads, under one lock. */
void worker_pool_flush(worker_pool_t *pool);
/* Takes the finished jobs (a NULL-terminated array the caller frees), or
 * NULL when none. */
void **worker_pool_take_done(worker_pool_t *pool, size_t *n);
/* A descriptor that becomes readable when a job finished. */
int worker_pool_fd(const worker_pool_t *pool);
/* Drains the wake-up descriptor. */
void worker_pool_ack(worker_pool_t *pool);
/* An asynchronous adapter's call is done (out filled); p is gone after. */
void worker_pool_finish(worker_pending_t *p);

/* ---- saga and step states (worker_state.c) ----------------------------- */

typedef enum worker_saga_status_e {
    WORKER_SAGA_RUNNING,
    WORKER_SAGA_HELD,
    WORKER_SAGA_COMPLETED,
    WORKER_SAGA_COMPENSATING,
    WORKER_SAGA_COMPENSATED,
    WORKER_SAGA_FAILED,
    WORKER_SAGA_CANCELLING, /* saga.cancel: compensating what it did */
    WORKER_SAGA_CANCELLED,
    WORKER_SAGA__COUNT
} worker_saga_status_t;

typedef enum worker_step_status_e {
    WORKER_STEP_PENDING,
    WORKER_STEP_RUNNING,
    WORKER_STEP_SUCCEEDED,
    WORKER_STEP_FAILED,
    WORKER_STEP_UNKNOWN, /* its last attempt may have taken effect */
    WORKER_STEP_COMPENSATING,
    WORKER_STEP_COMPENSATED,
    WORKER_STEP_COMPENSATION_FAILED,
    WORKER_STEP_SKIPPED,
    WORKER_STEP_AWAITING_APPROVAL, /* an approval gate: waits for saga.approve / saga.reject */
    WORKER_STEP_APPROVED,          /* approved: its step.execute runs it */
    WORKER_STEP__COUNT
} worker_step_status_t;

/* The names the sagas.status and steps.status columns hold. */
const char *worker_saga_status_name(worker_saga_status_t s);
/* Has a saga of status s ended (completed, compensated, failed,
 * cancelled)? */
bool worker_saga_finished(worker_saga_status_t s);
const char *worker_step_status_name(worker_step_status_t s);
/* 0 and *out set, or -1 for a name that is not a status. */
int worker_saga_status_parse(const char *text, worker_saga_status_t *out);
int worker_step_status_parse(const char *text, worker_step_status_t *out);
/* True when the worker may change a status from to (its setters assert
 * it); the replay functions' changes in SQL are not included. */
bool worker_saga_transition_ok(worker_saga_status_t from, worker_saga_status_t to);
bool worker_step_transition_ok(worker_step_status_t from, worker_step_status_t to);
/* Is a running step's call (steps.calling) allowed to go from one to
 * the other? */
bool worker_calling_transition_ok(bool from, bool to);
/* Writes the Markdown reference of both state machines (docs/STATES.md). */
void worker_states_reference(FILE *out);
int worker_cmd_states(sg_cli_t *cli, int argc, char **argv);

/* ---- the run ----------------------------------------------------------- */

typedef struct worker_part_s worker_part_t;

typedef enum worker_cstate_e {
    CMD_QUEUED,   /* waiting behind an earlier command of its saga */
    CMD_READY,    /* to be decided in the next transaction */
    CMD_CALLING,  /* attempt committed, tool call running */
    CMD_RETURNED, /* call finished, outcome to be committed */
    CMD_FINISHED, /* committed: the offset may pass it */
    CMD_PARKED,   /* chained, its call failed: waits for its message (worker_chain.c) */
} worker_cstate_t;

/* One consumed message, from fetch to commit; or a chained command: one
 * the worker emitted and runs at once, before its message comes back
 * through the relay (worker_chain.c, "Chaining"). */
/* A step command a decision emitted for now, as the loop chains it: what
 * its message says, without printing and parsing it (set: there is one). */
typedef struct worker_follow_s {
    bool set;
    sg_ctype_t type; /* SG_CMD_EXECUTE or SG_CMD_COMPENSATE */
    int step, attempt, generation;
    char id[SG_SAGA_ID_MAX + 64]; /* the message's id, which its copy will carry */
} worker_follow_t;

typedef struct worker_cmd_s {
    struct worker_cmd_s *saga_next; /* FIFO of its saga */
    struct worker_cmd_s *part_next; /* FIFO of its partition, offset order */
    struct worker_cmd_s *part_prev;
    worker_part_t *part;
    sg_kafka_msg_t *msg;
    int64_t offset;
    size_t charge; /* bytes counted against worker.intake_max_bytes */
    sg_decoded_t dec;
    worker_cstate_t state;
    bool finishing;                 /* will be FINISHED if the transaction commits */
    const void *txn;                /* that transaction (worker_loop_int.h's txn_slot_t) */
    bool calls;                     /* decided: call the tool after the commit */
    bool abandoned;                 /* its partition was lost while the call ran */
    bool chained;                   /* run ahead of its message: no msg, offset -1 */
    bool unchained;                 /* chained, but its decision needs its message: dropped */
    bool defer;                     /* a crash-loop suspect: decided again when it runs alone */
    bool isolated;                  /* ...which is now: no other call runs beside it */
    bool suspect;                   /* waiting for that in the loop's suspects */
    int dl_refused;                 /* times PostgreSQL refused its dead letter */
    bool dl_minimal;                /* so its dead letter leaves out what may be refused */
    bool copy;                      /* the message of a chained command that ran: acknowledged */
    bool answered;                  /* a control command its saga's history already holds (a
                                       redelivery after a hand-over): not decided again */
    bool forward;                   /* a control command read on the commands topic: forwarded
                                       into the internal topic (worker_forward), decided there */
    worker_follow_t follow;         /* the step command its decision emitted for now, to chain */
    struct worker_cmd_s *held_copy; /* a chained member's copy, come while its detached call
                                       is out: queued behind it when the call returns */
    int16_t members[SG_GROUP_MAX_MEMBERS]; /* a group's members whose step.execute its
                                              decision emitted for now, to chain side by
                                              side (worker_outcome_t's) */
    int nmembers;
    struct worker_cmd_s *origin;  /* chained: the command that emitted it, until placed */
    int64_t attempt_id;           /* of the attempt row, once committed */
    char *definition;             /* a saga.start's definition (sg_submit_definition), once built */
    struct worker_fresh_s *fresh; /* a saga.start's new saga, until its first step is chained */
    uint64_t call_t0;             /* when its call was handed to the pool (us) */
    /* A group member's call runs out of its saga's queue (worker_cmdq.c,
     * "detached calls"): in the saga's detached list while CALLING, then
     * back in the queue with its outcome (QUEUED with has_outcome until
     * it heads the queue). */
    bool detached;
    bool has_outcome;
    struct worker_cmd_s *det_next;
    worker_call_t call;
    worker_result_t result;
} worker_cmd_t;

/* A saga.start command's definition, built on first use and kept with the
 * command (the conflict check and the insert both need it). */
const char *worker_cmd_definition(worker_cmd_t *cmd);

/* Where a step's or saga's state row waits in the batch's writes (see
 * worker_writes.c); a slot of an older flush generation is void. */
typedef struct worker_slot_s {
    unsigned gen;
    size_t row;
} worker_slot_t;

/* A parallel group's batch policy (docs/WORKER.md, "Parallel groups"). */
typedef enum worker_policy_e {
    WORKER_POLICY_NONE, /* not a group member */
    WORKER_POLICY_ALL_OR_NOTHING,
    WORKER_POLICY_BEST_EFFORT,
    WORKER_POLICY_FAIL_FAST,
} worker_policy_t;

/* "all_or_nothing", ..., NULL for NONE; and back (NONE when unknown). */
const char *worker_policy_name(worker_policy_t p);
worker_policy_t worker_policy_parse(const char *s);

typedef struct worker_step_s {
    int idx;
    const char *name, *tool, *args, *comp; /* into the state result */
    const char *group;                     /* its parallel group's name, NULL: not a member */
    worker_policy_t policy;                /* its group's */
    int64_t done_seq; /* the event seq its forward outcome was recorded at, 0: none */
    bool calling;     /* a forward call of it may be in flight (steps.calling) */
    worker_step_status_t status;
    int attempts, comp_attempts;
    char error_code[64];
    /* to store, NULL: unchanged */
    const char *result;   /* JSON text */
    const char *idem_key; /* the forward idempotency key */
    const char *effect;   /* forward_effect: "known" or "possible" */
    const char *action;   /* agent_action of its failure */
    const char *approval; /* its approval gate (JSON: {timeout_ms, reason, registry}), NULL: none */
    /* as loaded (and updated by this transaction's decisions) */
    const char *forward_key; /* the last forward attempt's key, may be NULL */
    const char *done_result; /* its result, when the saga's results flow or it compensates */
    const char *done_effect; /* forward_effect, NULL: none yet */
    const char *done_action; /* agent_action of its failure, NULL: none */
    int key_generation;      /* a replay kept this generation's key (0: the saga's) */
    /* The generation of the compensation key under which an attempt may
     * have taken effect (a timeout, a request that went out unanswered, a
     * crash mid-call); 0: none.  Its compensation keeps that key from then
     * on, across replays: a refund that went through is never paid twice
     * under a new key. */
    int comp_key_generation;
    bool dirty;
    worker_slot_t slot;
} worker_step_t;

/* A saga as loaded (FOR UPDATE) at the start of a transaction. */
typedef struct worker_saga_s {
    const char *saga_id, *name, *input, *traceparent;
    worker_saga_status_t status;
    worker_saga_status_t status_written; /* what its row holds: loaded, or the last op wrote */
    int generation;
    int64_t seq, retry_spent, retry_budget; /* budget -1: none */
    bool past_deadline;
    int nsteps;
    worker_step_t steps[SG_MAX_STEPS];
    bool dirty;
    worker_slot_t slot;
    /* attempt rows of the command's (step, phase, generation, attempt) */
    int64_t interrupted, finished;
    /* saga.start of an existing saga: same definition? */
    bool same_definition;
    /* "<partition>:<offset>" its saga.start was read at (NULL: not known) */
    const char *origin;
    /* Results flow (references or an output): step results are loaded. */
    bool results_flow;
    const char *output_spec;   /* the definition's output, NULL: none */
    char *output;              /* the resolved output to store (owned), NULL: unchanged */
    const char *stored_output; /* as loaded (a completed saga's), NULL: none */
    const char *metadata;      /* its metadata, loaded when a step has an approval gate */
    const char *submitted_by;  /* the principal that signed its saga.start, NULL: unsigned */
} worker_saga_t;

/* The saga a saga.start created in the open transaction, as the next
 * transaction's load would return it: its first step command can then be
 * decided in the same transaction (chained).  Owns its texts. */
typedef struct worker_fresh_s {
    worker_saga_t saga;
    sg_json_t *steps;                  /* the effective steps; names and tools point here */
    char *texts[3 * SG_MAX_STEPS + 3]; /* args, compensations, approvals, input, traceparent,
                                          metadata */
    size_t ntexts;
} worker_fresh_t;

void worker_fresh_free(worker_fresh_t *f);

typedef struct worker_stats_s {
    int64_t consumed, stale, started, rejected, calls, dead_letters, completed, compensated, failed,
        retries, fenced, held, chained, copies, cancelled, forwarded;
} worker_stats_t;

/* The rows a batch's decisions write, sent set-based (worker_writes.c). */
typedef struct worker_writes_s worker_writes_t;

/* The worker's shared context. */
typedef struct worker_s {
    const sg_config_t *cfg;
    sg_registry_t *reg;
    sg_pg_t *pg;
    char worker_id[128];
    /* topic_commands: what producers write; topic_internal: what the relay
     * alone writes, where every internal command goes (docs/ARCHITECTURE.md,
     * "Trust boundary"). */
    const char *group, *topic_commands, *topic_internal, *topic_events, *topic_dlq;
    sg_json_limits_t limits;
    int crash_loop_limit;
    int64_t hold_ms;             /* worker.dead_letter_hold_ms */
    size_t event_result_max;     /* worker.event_result_max_bytes */
    size_t max_outgoing;         /* limits.max_outgoing_bytes */
    int64_t approval_timeout_ms; /* worker.approval_timeout_ms */
    sg_policy_t retry, comp_retry;
    int64_t budget_ms;
    /* The trust boundary (sg_trust.h): security.internal_auth and the
     * internal keys (re-read every key_reload_ms, next at keys_at), the
     * keyring (NULL: none, every control command is refused) and the
     * signature rules. */
    sg_trust_mode_t trust;
    sg_mac_keys_t keys;
    uint64_t key_reload_ms, keys_at;
    sg_keyring_t *keyring;
    int64_t signature_max_age_s;
    bool signed_all; /* security.signed_submissions = all */
    sg_rng_t rng;
    worker_stats_t stats;
    /* Metrics of the open transaction, applied when it commits. */
    sg_metrics_batch_t *metrics; /* the open transaction's */
    /* worker.chain, and the default partitioner (worker_run.c): decisions
     * keep what chaining needs (cmd->follow, cmd->fresh) only then. */
    bool chain;
    worker_writes_t *writes;
    /* The open transaction wrote outbox rows: its COMMIT is followed by
     * SG_OUTBOX_NOTIFY (the session is quiet, see worker_run.c); it
     * wrote timers: by SG_OUTBOX_NOTIFY_TIMERS instead. */
    bool outbox_written, timers_written;
    /* Spans, error and partial-saga counters (worker_observe.c); the open
     * transaction's spans, handed to the exporter when it commits. */
    struct worker_observe_s *observe;
    sg_span_list_t *spans;
    /* The trace context of the decision being applied, for its log lines
     * ("" when tracing is off). */
    char log_trace_id[33], log_span_id[17];
} worker_t;

worker_writes_t *worker_writes_new(void);
void worker_writes_free(worker_writes_t *wr);
/* Sends what was collected into the open pipeline, one statement per kind
 * of row.  Before any other statement of the transaction, and before its
 * COMMIT. */
void worker_writes_flush(worker_t *w);
/* After the COMMIT succeeded: the attempt ids of the commands whose
 * attempt rows were inserted (cmd->attempt_id); returns how many were not
 * found (0 unless PostgreSQL broke its word).  Then empty, as after
 * worker_writes_discard(). */
int worker_writes_committed(worker_writes_t *wr);
/* Forgets everything (a transaction that did not commit). */
void worker_writes_discard(worker_writes_t *wr);
/* The rows, values as text in the column order of their statement in
 * worker_writes.c (NULL: SQL NULL); the values are copied. */
void worker_write_saga_new(worker_t *w, const char *const vals[11]);
void worker_write_attempt(worker_t *w, worker_cmd_t *cmd, const char *const vals[7]);
void worker_write_attempt_done(worker_t *w, const char *const vals[6]);
void worker_write_step(worker_t *w, worker_slot_t *slot, const char *const vals[13]);
void worker_write_saga(worker_t *w, worker_slot_t *slot, const char *const vals[5]);
/* An outbox message (delay_ms <= 0) or a timer. */
void worker_write_message(worker_t *w, int64_t delay_ms, const char *topic, const char *key,
                          const char *headers, const char *payload);

/* Decides a READY command inside the open transaction pipeline: writes
 * the statements of its outcome, or of its attempt row (then cmd->calls).
 * saga is NULL when the saga does not exist (or for poison). */
void worker_saga_decide(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga);
/* Saga's step.execute (compensate: step.compensate) of step for attempt,
 * in its present generation, as the loop chains it: what its message
 * says, its id included (worker_outcome.c spells the id). */
void worker_follow_make(worker_follow_t *f, const worker_saga_t *saga, int step, bool compensate,
                        int attempt);

/* Headers of a forwarded control command: where it was read
 * ("<topic>:<partition>:<offset>") and when (unix seconds). */
#define WORKER_FORWARDED_FROM "sagad-forwarded-from"
#define WORKER_FORWARDED_AT   "sagad-forwarded-at"

/* Forwards a control command read on the commands topic (cmd->forward)
 * into the internal topic, through the outbox of the open transaction:
 * its payload and key unchanged, its sagad-auth header kept, and where and
 * when it was read (headers sagad-forwarded-from, sagad-forwarded-at,
 * unix seconds now_s); the worker decides it when it reads it there, in
 * order with its saga's other commands (docs/ARCHITECTURE.md, "Trust
 * boundary").  Counted as consumed, outcome "forwarded". */
void worker_forward(worker_t *w, worker_cmd_t *cmd, int64_t now_s);

/* Writes the outcome of a RETURNED call. */
void worker_saga_complete(worker_t *w, worker_cmd_t *cmd, worker_saga_t *saga);

/* The statement loading the sagas of a batch ($1: text[] of ids). */
extern const char worker_sql_load[];
/* worker_writes.c: the batch's outbox rows, $1..$4 text[] topic, key,
 * jsonb[] headers, text[] payload. */
extern const char worker_sql_outbox[];
/* Fills saga from rows [*row, ...) of the load result with the same id. */
void worker_saga_load(worker_saga_t *saga, const sg_pg_res_t *res, size_t *row);

int worker_cmd_run(sg_cli_t *cli, int argc, char **argv);
int worker_cmd_check_registry(sg_cli_t *cli, int argc, char **argv);
int worker_cmd_topics(sg_cli_t *cli, int argc, char **argv);

#endif
