/* The saga state machine's private contract: what a decision reads and
 * what it returns.
 *
 *   worker_saga.c        the decisions on step commands, saga.release, the
 *                        control commands (saga.cancel, saga.approve,
 *                        saga.reject), an approval gate's timer and a
 *                        call's outcome (worker_decide)
 *   worker_flow.c        what follows an outcome: status changes, a step
 *                        that succeeded or failed for good, compensation,
 *                        the hold, parallel groups' policies, the terminal
 *                        events
 *   worker_group.c       a parallel group as a span of its members' rows
 *   worker_saga_start.c  the decision on saga.start, and a step's call
 *                        checked against the registry
 *   worker_outcome.c     the outcome: its ops, the messages built into it
 *   worker_saga_sql.c    the load of a batch's sagas, and the apply of an
 *                        outcome into the transaction (SQL, logs, metrics)
 *
 * A decision is pure: rows and a command in, an outcome out.  It sends no
 * statement, reads no clock (now comes in), draws no randomness but from
 * the generator it is given, and does no I/O; worker_saga_sql.c applies
 * what it returns. */
#ifndef SAGAD_WORKER_DECIDE_H
#define SAGAD_WORKER_DECIDE_H

#include "sagad/sg_log.h"
#include "sagad/sg_ref.h"
#include "../worker.h"

/* The worker's settings a decision follows. */
typedef struct worker_rules_s {
    const sg_registry_t *reg;
    const sg_json_limits_t *limits;            /* parsing a tool's answer */
    const char *topic_internal, *topic_events; /* where commands and events go */
    int crash_loop_limit;
    int64_t hold_ms;             /* worker.dead_letter_hold_ms */
    size_t event_result_max;     /* worker.event_result_max_bytes */
    size_t max_outgoing;         /* limits.max_outgoing_bytes: every message's text; 0: none */
    int64_t approval_timeout_ms; /* worker.approval_timeout_ms: a gate's default timeout */
    int64_t budget_ms;           /* the default retry budget */
    const sg_policy_t *retry, *comp_retry;
    bool chain;               /* keep what chaining needs (follow, fresh) */
    bool signed_all;          /* security.signed_submissions = all */
    sg_log_level_t log_level; /* log lines above it are not recorded */
} worker_rules_t;

/* A command as a decision sees it (issue 35 item 9: the decision's seam):
 * the decoded message, where it came from, and for a returned call the
 * call made and its outcome; nothing of the loop's own bookkeeping (its
 * queues, states, transaction slots).  The loop fills it from its
 * worker_cmd_t (worker_saga_sql.c); the unit tests and the model checker
 * fill it directly.  The pointers are never NULL (result and call are
 * empty unless returned). */
typedef struct worker_dcmd_s {
    const sg_decoded_t *dec;
    const worker_result_t *result; /* returned: the call's outcome */
    const worker_call_t *call;     /* returned: the call that was made */
    const char *definition;        /* a saga.start's stored definition, NULL: made here */
    int64_t offset;                /* of its message, -1: none (a chained command) */
    int64_t attempt_id;            /* returned: its attempt row */
    bool chained;                  /* run ahead of its message: it has none for a dead letter */
    bool isolated; /* runs with no other call beside it (a crash-loop suspect's last run) */
    bool answered; /* a control command its saga's history already holds */
} worker_dcmd_t;

/* The command and what the world says at the time of the decision. */
typedef struct worker_input_s {
    const worker_dcmd_t *cmd;
    bool returned;           /* decide its call's outcome (cmd->result), not the command */
    int32_t partition;       /* of its message, -1: none */
    const void *traceparent; /* a saga.start's header, NULL: none */
    size_t traceparent_len;
    int64_t now_ms; /* wall clock: event times, retry_at, held_until */
    sg_rng_t *rng;  /* backoff jitter, new trace ids */
} worker_input_t;

typedef enum worker_op_kind_e {
    WORKER_OP_SAGA_NEW,     /* insert a saga with its steps */
    WORKER_OP_ATTEMPT,      /* the attempt row, written before its call */
    WORKER_OP_ATTEMPT_DONE, /* the call's outcome on its attempt row */
    WORKER_OP_INTERRUPTED,  /* unfinished attempt rows marked interrupted */
    WORKER_OP_STEP,         /* a step's row */
    WORKER_OP_SAGA,         /* the saga's row */
    WORKER_OP_MESSAGE,      /* an event or a command: outbox, or timer when delayed */
    WORKER_OP_DEAD_LETTER,  /* ledger row and DLQ message of the command's message */
    WORKER_OP_LOG,          /* a log line */
    WORKER_OP_METRIC,       /* a metric to count or observe */
    WORKER_OP_CONTROL,      /* a control command in the saga's history (saga_controls) */
} worker_op_kind_t;

/* One effect of a decision.  Strings marked owned belong to the op; the
 * others point into the saga or the command, which outlive the apply. */
typedef struct worker_op_s {
    worker_op_kind_t kind;
    const char *saga_id;
    union {
        struct {
            const char *name, *definition, *input, *deadline, *traceparent; /* NULL: none */
            char *metadata, *steps, *def_owned; /* owned; def_owned: definition if made here */
            int64_t retry_budget_ms;            /* -1: none */
            char origin[40];          /* "<partition>:<offset>" of the saga.start, "": none */
            const char *submitted_by; /* its verified signer (the keyring's), NULL: none */
        } saga_new;
        struct { /* ATTEMPT and INTERRUPTED */
            int step, generation, attempt;
            bool compensate;
            char *idem_key; /* owned; NULL for INTERRUPTED */
            char *args;     /* owned; the resolved args, NULL: the step's as stored */
        } attempt;
        struct {
            int64_t id, latency_ms;
            worker_status_t status;
            sg_errclass_t cls;
            char *error_code, *envelope; /* owned; error_code NULL when ok */
        } done;
        struct {
            int idx, attempts, comp_attempts;
            worker_step_status_t status;
            bool calling;
            char *result, *error_code, *idem_key; /* owned; NULL: unchanged */
            const char *effect;                   /* forward_effect, NULL: unchanged */
            char *agent_action;                   /* owned; NULL: unchanged */
            int64_t done_seq;                     /* 0: unchanged */
            int comp_key_generation;              /* 0: unchanged */
            worker_slot_t *slot;
        } step;
        struct {
            worker_saga_status_t status;
            worker_saga_status_t from; /* the status the row held: a change when they differ */
            int64_t seq, retry_spent;
            char *output; /* owned; NULL: unchanged */
            worker_slot_t *slot;
        } saga;
        struct {
            const char *topic;
            char *key, *type, *headers, *payload; /* owned; key: the saga's id */
            int64_t delay_ms;                     /* > 0: a timer */
            int step, attempt, generation;        /* step commands; else -1 */
            bool compensate;                      /* a step.compensate */
        } msg;
        struct {
            int step; /* -1: no step concerned */
            bool compensate;
            int generation;
            sg_err_t *err; /* owned: a copy, kept out of line as it is large */
            const char *saga_name, *step_name, *traceparent;
            char *tool;         /* owned */
            char *agent_action; /* owned */
            char *steps_at;     /* owned: the saga's steps as they stand, NULL: no saga */
            bool has_saga;
        } dead;
        struct {
            sg_log_level_t level;
            sg_log_ctx_t ctx;        /* ctx.error_code points to error_code */
            char *text, *error_code; /* owned */
        } log;
        struct { /* into the command's document */
            const char *command, *command_id, *by, *reason;
            const char *principal; /* its verified signer, NULL: none */
            int step;              /* -1: the saga's */
            const char *outcome;   /* accepted, refused */
            char *error_code;      /* owned; refused: why, NULL when accepted */
            bool discard_held;     /* an accepted cancel of a held saga: its
                                      pending dead letters are discarded */
        } control;
        struct {
            sg_metric_id_t id;
            char *labels[3]; /* owned, NULL-terminated */
            bool observe;
            double value;
        } metric;
    } u;
} worker_op_t;

/* What a decision returns: its effects in the order they are applied, and
 * what the loop does with the command next. */
typedef struct worker_outcome_s {
    worker_op_t *ops;
    size_t n, cap;
    worker_stats_t stats; /* added to the worker's */
    const char *decided;  /* commands_consumed's label, NULL: by default */
    bool calls;           /* call the tool after the commit: call is filled */
    bool defer;           /* a crash-loop suspect: decide again when alone */
    bool unchained;       /* chained, but needs its message: dropped */
    worker_call_t call;
    worker_follow_t follow; /* the step command emitted for now, to chain */
    /* A parallel group's members started now, to chain side by side:
     * their steps (each one's step.execute, attempt 1, of the saga's
     * generation; worker_follow_make() spells it).  Their calls leave the
     * saga's queue as any member's do. */
    int16_t members[SG_GROUP_MAX_MEMBERS];
    int nmembers;
    worker_fresh_t *fresh; /* a saga.start's new saga (its rows' slots) */
    bool keep_fresh;       /* ...which the loop may chain from */
} worker_outcome_t;

/* Decides cmd (in->cmd) against saga (NULL: none, or poison): the
 * command, or with in->returned the outcome of its call.  Updates saga's rows in
 * place, as a command decided after it in the same transaction must see
 * them, and records every effect in out (zeroed first).  Pure. */
void worker_decide(const worker_rules_t *rules, const worker_input_t *in, worker_saga_t *saga,
                   worker_outcome_t *out);

/* Frees what out still owns (the call, follow and fresh unless taken). */
void worker_outcome_free(worker_outcome_t *out);

/* ---- between the decision files ---------------------------------------- */

/* One decision in progress. */
typedef struct worker_dc_s {
    const worker_rules_t *rules;
    const worker_input_t *in;
    const worker_dcmd_t *cmd;
    worker_outcome_t *out;
    /* The agent_action of the failure this decision records (owned, freed
     * when the decision ends), and its step. */
    char *action;
    int action_step;
} worker_dc_t;

worker_op_t *worker_out_op(worker_dc_t *d, worker_op_kind_t kind, const char *saga_id);
void worker_out_log(worker_dc_t *d, sg_log_level_t level, const sg_log_ctx_t *ctx, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));
/* Counts id with up to three labels (NULL-terminated). */
void worker_out_count(worker_dc_t *d, sg_metric_id_t id, const char *const *labels);
void worker_out_observe(worker_dc_t *d, sg_metric_id_t id, const char *const *labels, double value);
/* The members every message starts with: v, type, id, saga_id. */
sg_json_t *worker_out_message_new(const char *type, const char *id, const char *saga_id);
/* Queues msg (keyed by its saga_id) now or as a timer; takes msg. */
worker_op_t *worker_out_emit(worker_dc_t *d, const char *topic, const char *traceparent,
                             sg_json_t *msg, int64_t delay_ms);
/* A new event of saga (seq bumped); takes body. */
void worker_out_event(worker_dc_t *d, worker_saga_t *saga, const char *type, sg_json_t *body);
/* step.execute / step.compensate for (step, attempt), now or later; the
 * first one for now is kept as the outcome's follow when chaining. */
void worker_out_command(worker_dc_t *d, worker_saga_t *saga, int step, bool compensate, int attempt,
                        int64_t delay_ms);
/* Runs step idx: its step.execute, or for a parallel group's member the
 * step.execute of every pending member of the group, kept in the
 * outcome's members when chaining (a chained member's call leaves the
 * saga's queue like any member's, so that its siblings run beside it). */
void worker_out_run_step(worker_dc_t *d, worker_saga_t *saga, int idx);
sg_json_t *worker_out_step_body(const worker_step_t *st);
void worker_out_add_error(sg_json_t *body, const sg_err_t *err);
/* The agent_action of a failure with err: the tool's own, verbatim, when
 * the command's call failed with an answer that carries one (a JSON
 * object's "agent_action" string), else err's code's default
 * (schemas/error_codes.json); NULL when neither.  Caller frees. */
char *worker_out_agent_action(worker_dc_t *d, const sg_err_t *err);
/* The dirty step rows and the saga row. */
void worker_out_rows(worker_dc_t *d, worker_saga_t *saga);
/* A dead letter of the command's message (step < 0: none concerned), and
 * the saga.dead_lettered event when there is a saga. */
void worker_out_dead_letter(worker_dc_t *d, worker_saga_t *saga, int step, bool compensate,
                            const sg_err_t *err, const char *held_until);
/* A duplicate or stale command: no effect but its log line and metric. */
void worker_out_stale(worker_dc_t *d, const char *why);
/* The same, with the log line's own first words (what happened). */
void worker_out_ignored(worker_dc_t *d, const char *what, const char *why);

/* A control command (saga.cancel, saga.approve, saga.reject) that cannot
 * be carried out: the event saga.command_refused (seq 0 when there is no
 * saga; with the step and its status when st) and, for a saga, its history
 * row; err says why (worker_outcome.c). */
/* principal (whom the control is decided as) and, when a delegate signed
 * it for that user, via (the delegate) into an event's body b; nothing
 * when it was not signed. */
void worker_add_principal(sg_json_t *b, const sg_decoded_t *dec);
void worker_out_refused(worker_dc_t *d, worker_saga_t *saga, const worker_step_t *st,
                        const sg_err_t *err);
/* The control command's row in its saga's history (saga_controls); the
 * op, for what else its apply does (discard_held). */
worker_op_t *worker_out_control(worker_dc_t *d, const worker_saga_t *saga, int step,
                                const char *outcome, const char *error_code);

/* worker_flow.c: what follows an outcome.  Every status change goes
 * through worker_set_step / worker_set_saga: logged at debug level and
 * asserted to be a transition of worker_state.c's tables. */
void worker_set_step(worker_dc_t *d, const worker_saga_t *saga, worker_step_t *st,
                     worker_step_status_t to);
void worker_set_saga(worker_dc_t *d, worker_saga_t *saga, worker_saga_status_t to);
/* A running step's call: in flight (calling) or not; a transition of
 * worker_state.c's calling table.  Leaving running clears it
 * (worker_set_step). */
void worker_set_calling(worker_dc_t *d, const worker_saga_t *saga, worker_step_t *st, bool calling);
/* The forward call of st succeeded (d->cmd->result): step.succeeded, then
 * the next step, its group's policy, or the compensation it stopped in. */
void worker_step_succeeded(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st);
/* A forward step failed for good with err: step.failed, then its dead
 * letter (dead_lettered; a step may hold its saga, a member never), its
 * group's policy or the compensation.  unknown: its last attempt may have
 * taken effect. */
void worker_step_failed(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, const sg_err_t *err,
                        bool dead_lettered, bool unknown);
/* A compensation failed for good: its dead letter, the saga failed (a
 * best_effort member undone while its saga runs: the saga goes on). */
void worker_comp_failed(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st,
                        const sg_err_t *err);
/* Step st depends on a step that did not succeed (worker_prepare_call's
 * runtime.skipped_dependency_failed, err; only a best_effort member, or a
 * step skipped for the same reason, can be that while the saga runs):
 * skipped, never called; the saga goes on (its group's policy decides for
 * a member). */
void worker_skip_dependent(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st,
                           const sg_err_t *err);
/* A best_effort group's unknown member was undone while its saga runs:
 * the next one, or group.finished and the saga goes on. */
void worker_member_undone(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st);
/* The saga compensates from failed_step (its group) down. */
void worker_begin_compensation(worker_dc_t *d, worker_saga_t *saga, int failed_step,
                               const sg_err_t *err);
/* The next compensation at or below from, or the terminal event. */
void worker_next_compensation(worker_dc_t *d, worker_saga_t *saga, int from);
/* The compensation from from, once no member's call is in flight. */
void worker_resume_compensation(worker_dc_t *d, worker_saga_t *saga, int from);
/* A running step stops before its next attempt: unknown with code (its
 * last attempt may have taken effect), to be compensated. */
void worker_stop_step(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, const char *code);

/* worker_group.c: a parallel group is the span [first, last] of its
 * members' consecutive step rows (a step not in a group: [idx, idx]). */
int worker_group_first(const worker_saga_t *saga, int idx);
int worker_group_last(const worker_saga_t *saga, int idx);
/* Members of the span whose forward part has not ended (pending, running,
 * at their approval gate). */
int worker_group_open(const worker_saga_t *saga, int first, int last);
/* Did a member of the span not succeed? */
bool worker_group_failed(const worker_saga_t *saga, int first, int last);
/* "ok" (every member succeeded), "partial" (a best_effort group with some
 * that did not) or "error" (none did, or a group that is undone). */
const char *worker_group_status(const worker_saga_t *saga, int first, int last);
/* The group's manifest: {group, policy, status, members: {NAME: {status,
 * error_code, result}}}; what group.finished carries and what
 * /steps/GROUP/result names. */
sg_json_t *worker_group_manifest(const worker_saga_t *saga, int first, int last);
/* The member of the span to undo next: of those whose effect stands or
 * may stand (succeeded, unknown) and not passed[idx], the one whose
 * outcome was recorded last; -1 when none. */
int worker_group_next_undo(const worker_saga_t *saga, int first, int last, const bool *passed);

/* worker_saga_start.c */
void worker_decide_start(worker_dc_t *d, worker_saga_t *existing);
/* What the saga's steps add up to: the run_health of terminal events and
 * of saga.duplicate (worker_outcome.c). */
sg_json_t *worker_run_health(const worker_saga_t *saga);
/* Fills d->out->call for step st; false (err set) when the call cannot be
 * made: a forward call that depends on a step that did not succeed
 * (runtime.skipped_dependency_failed), unknown tool, bad args. */
bool worker_prepare_call(worker_dc_t *d, const worker_saga_t *saga, const worker_step_t *st,
                         bool compensate, sg_err_t *err);
/* The generation of step st's key for its forward call or its
 * compensation: the one whose effect may stand when there is one (a
 * replay kept the forward key; a compensation attempt may have taken
 * effect under it), else the saga's. */
int worker_key_generation(const worker_saga_t *saga, const worker_step_t *st, bool compensate);
/* What a step's resolved args, or a saga's output, may bring in through
 * references: SG_REF_BUDGET_FACTOR times the message limits. */
sg_ref_budget_t worker_ref_budget(const worker_rules_t *rules);
/* The saga's context document, which references point into:
 * {"input", "steps": {NAME: {"result", "key"}}} for the steps that ran
 * (a result only when loaded: sagas whose results flow). */
sg_json_t *worker_saga_context(const worker_saga_t *saga);

#endif
