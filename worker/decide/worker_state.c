/* The saga and step state machines as data: the status names (what the
 * sagas.status and steps.status columns hold) and every legal transition
 * with what causes it.  The decisions (worker_saga.c) change a status only
 * through its setters, which assert that the change is in these tables, and
 * tests/unit/test_saga.c checks that its table makes every one; `sagad-worker
 * states` prints them as docs/STATES.md (make docs; make docs-check keeps
 * the file current).  Pure: no I/O but the printer's stream. */
#include <stdio.h>
#include <string.h>

#include "../worker.h"

static const char *const saga_names[WORKER_SAGA__COUNT] = {
    "running",     "held",   "completed",  "compensating",
    "compensated", "failed", "cancelling", "cancelled",
};

static const char *const step_names[WORKER_STEP__COUNT] = {
    "pending", "running",           "succeeded",   "failed",
    "unknown", "compensating",      "compensated", "compensation_failed",
    "skipped", "awaiting_approval", "approved",
};

/* A transition, where it happens and why.  by_worker: made by the worker's
 * setters (asserted there); else by the replay functions in SQL
 * (schemas/sql/0015_replay_effects.sql), listed so the reference is whole. */
typedef struct transition_s {
    int from, to;
    bool by_worker;
    const char *when;
    const char *where;
} transition_t;

static const transition_t saga_transitions[] = {
    {WORKER_SAGA_RUNNING, WORKER_SAGA_COMPLETED, true, "the last step succeeded",
     "worker_step_succeeded"},
    {WORKER_SAGA_RUNNING, WORKER_SAGA_COMPENSATING, true,
     "a forward step failed (permanent error, deadline, bad args), or was dead-lettered with no "
     "hold",
     "worker_begin_compensation"},
    {WORKER_SAGA_RUNNING, WORKER_SAGA_HELD, true,
     "a forward step was dead-lettered and worker.dead_letter_hold_ms > 0", "step_dead_letter"},
    {WORKER_SAGA_HELD, WORKER_SAGA_COMPENSATING, true,
     "saga.release of its generation: the hold timer, or dlq-tool discard", "decide_release"},
    {WORKER_SAGA_COMPENSATING, WORKER_SAGA_COMPENSATED, true,
     "no succeeded step with a compensation is left", "worker_next_compensation"},
    {WORKER_SAGA_COMPENSATING, WORKER_SAGA_FAILED, true,
     "a compensation failed or ran out of attempts (dead-lettered)", "worker_comp_failed"},
    {WORKER_SAGA_RUNNING, WORKER_SAGA_CANCELLING, true,
     "saga.cancel, decided when no call of the saga is in flight (it waits behind one in the "
     "saga's queue): no new call starts",
     "decide_cancel"},
    {WORKER_SAGA_HELD, WORKER_SAGA_CANCELLING, true,
     "saga.cancel of a held saga: its hold ends, its release timer is stale", "decide_cancel"},
    {WORKER_SAGA_CANCELLING, WORKER_SAGA_CANCELLED, true,
     "no succeeded or unknown step with a compensation is left", "worker_next_compensation"},
    {WORKER_SAGA_CANCELLING, WORKER_SAGA_FAILED, true,
     "a compensation of the cancelled saga failed or ran out of attempts (dead-lettered)",
     "worker_comp_failed"},
    {WORKER_SAGA_HELD, WORKER_SAGA_RUNNING, false, "dlq-tool replay: resume at the failed step",
     "sagad_dlq_replay()"},
    {WORKER_SAGA_COMPENSATED, WORKER_SAGA_RUNNING, false,
     "dlq-tool replay: run again, steps whose effect stands kept", "sagad_dlq_replay()"},
    {WORKER_SAGA_FAILED, WORKER_SAGA_COMPENSATING, false,
     "dlq-tool replay: retry the failed compensation", "sagad_dlq_replay()"},
    {WORKER_SAGA_FAILED, WORKER_SAGA_CANCELLING, false,
     "dlq-tool replay of a saga that failed while it was being cancelled: retry the failed "
     "compensation; it ends cancelled",
     "sagad_dlq_replay()"},
};

static const transition_t step_transitions[] = {
    {WORKER_STEP_PENDING, WORKER_STEP_RUNNING, true,
     "its command is decided: the attempt row is written before the call", "start_attempt"},
    {WORKER_STEP_RUNNING, WORKER_STEP_RUNNING, true, "a retry's command is decided",
     "start_attempt"},
    {WORKER_STEP_PENDING, WORKER_STEP_AWAITING_APPROVAL, true,
     "its command is decided and it has an approval gate (its own approval, or its tool's "
     "registry \"approval\": \"required\"): step.approval_requested and the gate's timer, no call",
     "gate_step"},
    {WORKER_STEP_AWAITING_APPROVAL, WORKER_STEP_APPROVED, true,
     "saga.approve: its step.execute is emitted", "decide_approval"},
    {WORKER_STEP_APPROVED, WORKER_STEP_RUNNING, true,
     "its command is decided after the approval: the attempt row, then the call", "start_attempt"},
    {WORKER_STEP_AWAITING_APPROVAL, WORKER_STEP_FAILED, true,
     "saga.reject (runtime.approval_rejected), or no decision before the gate's timer "
     "(runtime.approval_timeout): the saga compensates",
     "reject_step"},
    {WORKER_STEP_APPROVED, WORKER_STEP_FAILED, true,
     "the saga's deadline passed before the approved step ran", "worker_step_failed"},
    {WORKER_STEP_AWAITING_APPROVAL, WORKER_STEP_SKIPPED, true,
     "saga.cancel while it waits for approval: the gate is cancelled, it is never called",
     "decide_cancel"},
    {WORKER_STEP_APPROVED, WORKER_STEP_SKIPPED, true,
     "saga.cancel after its approval, before its command was decided: never called",
     "decide_cancel"},
    {WORKER_STEP_RUNNING, WORKER_STEP_SUCCEEDED, true, "the call succeeded",
     "worker_step_succeeded"},
    {WORKER_STEP_PENDING, WORKER_STEP_FAILED, true,
     "at its decision: deadline passed, tool no longer registered, args break its schema",
     "worker_step_failed"},
    {WORKER_STEP_RUNNING, WORKER_STEP_FAILED, true,
     "permanent or poison failure, attempts or retry budget exhausted, crash loop, or a retry "
     "decided past the deadline",
     "worker_step_failed"},
    {WORKER_STEP_RUNNING, WORKER_STEP_UNKNOWN, true,
     "no retry is left and its last attempt may have taken effect: a timeout, a transport "
     "error after the request went out, an answer too large to read, or a crash loop",
     "worker_step_failed"},
    {WORKER_STEP_PENDING, WORKER_STEP_SKIPPED, true,
     "an earlier step failed, the saga was cancelled, or a step its args reference did not "
     "succeed: it is never called",
     "worker_begin_compensation"},
    {WORKER_STEP_RUNNING, WORKER_STEP_UNKNOWN, true,
     "saga.cancel while the step waits for a retry (its call is not in flight): its last attempt "
     "may have taken effect, so its compensation runs first",
     "decide_cancel"},
    {WORKER_STEP_UNKNOWN, WORKER_STEP_COMPENSATING, true,
     "compensation starts with it (it is the step that failed) and it has a compensation; or it "
     "is a best_effort group's member, undone before its group finishes while the saga runs on",
     "worker_next_compensation"},
    {WORKER_STEP_SUCCEEDED, WORKER_STEP_COMPENSATING, true,
     "compensation reached it and it has a compensation", "worker_next_compensation"},
    {WORKER_STEP_SUCCEEDED, WORKER_STEP_SKIPPED, true,
     "compensation reached it and it has none (read, idempotent or irreversible)",
     "worker_next_compensation"},
    {WORKER_STEP_COMPENSATING, WORKER_STEP_COMPENSATED, true, "the compensation succeeded",
     "decide_returned"},
    {WORKER_STEP_COMPENSATING, WORKER_STEP_COMPENSATION_FAILED, true,
     "the compensation failed for good or ran out of attempts", "worker_comp_failed"},
    {WORKER_STEP_FAILED, WORKER_STEP_PENDING, false,
     "dlq-tool replay of a held or compensated saga: the failed step runs again, new key",
     "sagad_dlq_replay()"},
    {WORKER_STEP_SKIPPED, WORKER_STEP_SUCCEEDED, false,
     "dlq-tool replay of a compensated saga: it succeeded and was never undone, so it is kept "
     "(not called again)",
     "sagad_dlq_replay()"},
    {-1, WORKER_STEP_PENDING, false,
     "dlq-tool replay of a held or compensated saga: a step whose effect is undone or was never "
     "taken (new key), or is unknown (its old key); with --rerun-from, every step from it on "
     "(new key)",
     "sagad_dlq_replay()"},
    {WORKER_STEP_COMPENSATION_FAILED, WORKER_STEP_COMPENSATING, false,
     "dlq-tool replay of a failed saga", "sagad_dlq_replay()"},
};

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

const char *worker_status_name(worker_status_t s)
{
    static const char *const names[] = {"ok", "error", "timeout", "partial", "cancelled"};

    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "error";
}

bool worker_saga_finished(worker_saga_status_t s)
{
    return s == WORKER_SAGA_COMPLETED || s == WORKER_SAGA_COMPENSATED || s == WORKER_SAGA_FAILED ||
           s == WORKER_SAGA_CANCELLED;
}

const char *worker_saga_status_name(worker_saga_status_t s)
{
    return (unsigned)s < WORKER_SAGA__COUNT ? saga_names[s] : "?";
}

static const char *const policy_names[] = {[WORKER_POLICY_NONE] = NULL,
                                           [WORKER_POLICY_ALL_OR_NOTHING] = "all_or_nothing",
                                           [WORKER_POLICY_BEST_EFFORT] = "best_effort",
                                           [WORKER_POLICY_FAIL_FAST] = "fail_fast"};

const char *worker_policy_name(worker_policy_t p)
{
    return p <= WORKER_POLICY_FAIL_FAST ? policy_names[p] : NULL;
}

worker_policy_t worker_policy_parse(const char *s)
{
    for (int p = WORKER_POLICY_ALL_OR_NOTHING; s && p <= WORKER_POLICY_FAIL_FAST; p++)
        if (strcmp(s, policy_names[p]) == 0)
            return (worker_policy_t)p;
    return WORKER_POLICY_NONE;
}

const char *worker_step_status_name(worker_step_status_t s)
{
    return (unsigned)s < WORKER_STEP__COUNT ? step_names[s] : "?";
}

static int parse(const char *const *names, int n, const char *text)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], text) == 0)
            return i;
    return -1;
}

int worker_saga_status_parse(const char *text, worker_saga_status_t *out)
{
    int i = parse(saga_names, WORKER_SAGA__COUNT, text);

    if (i < 0)
        return -1;
    *out = (worker_saga_status_t)i;
    return 0;
}

int worker_step_status_parse(const char *text, worker_step_status_t *out)
{
    int i = parse(step_names, WORKER_STEP__COUNT, text);

    if (i < 0)
        return -1;
    *out = (worker_step_status_t)i;
    return 0;
}

/* A running step's forward call (steps.calling, 0017): a state of its own
 * within running, with its setter (worker_set_calling, worker_flow.c).
 * 0: running, not calling; 1: running, calling. */
static const char *const calling_names[] = {"running", "running, calling"};
static const transition_t calling_transitions[] = {
    {0, 1, true,
     "its command is decided: the attempt row is written, and the call is made after the commit "
     "(a member's call leaves its saga's queue while calling)",
     "start_attempt"},
    {1, 1, true,
     "its command is decided again after the worker died mid-call (the attempt row was left "
     "unfinished): marked interrupted, and the call is made again under the same key",
     "start_attempt"},
    {1, 0, true,
     "the call's outcome is recorded; a retry then waits, not calling. A step that leaves "
     "`running` (succeeded, failed, unknown) stops calling with it (worker_set_step)",
     "decide_returned"},
};

static bool legal(const transition_t *t, size_t n, int from, int to)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].by_worker && t[i].from == from && t[i].to == to)
            return true;
    return false;
}

bool worker_saga_transition_ok(worker_saga_status_t from, worker_saga_status_t to)
{
    return legal(saga_transitions, NELEMS(saga_transitions), (int)from, (int)to);
}

bool worker_step_transition_ok(worker_step_status_t from, worker_step_status_t to)
{
    return legal(step_transitions, NELEMS(step_transitions), (int)from, (int)to);
}

bool worker_calling_transition_ok(bool from, bool to)
{
    return legal(calling_transitions, NELEMS(calling_transitions), from, to);
}

static void print_table(FILE *out, const transition_t *t, size_t n, const char *const *names)
{
    fprintf(out, "| from | to | when | where |\n|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        if (t[i].from < 0)
            fprintf(out, "| any ");
        else
            fprintf(out, "| `%s` ", names[t[i].from]);
        fprintf(out, "| `%s` | %s | `%s`%s |\n", names[t[i].to], t[i].when, t[i].where,
                t[i].by_worker ? "" : " (SQL)");
    }
}

void worker_states_reference(FILE *out)
{
    fprintf(out,
            "# Saga and step states\n\n"
            "Generated by `sagad-worker states` from the tables in worker/decide/worker_state.c\n"
            "(`make docs`; `make docs-check` fails when this file is stale). The worker\n"
            "changes a status only through the setters of worker/decide/worker_flow.c, which\n"
            "assert that the change is one of the rows below named after a function of\n"
            "worker_saga.c or worker_flow.c (tests/unit/test_saga.c checks that its table of\n"
            "transitions makes every one); rows marked (SQL) are made by\n"
            "`sagad_dlq_replay()` (schemas/sql/0015_replay_effects.sql) when on-call\n"
            "replays a dead letter.\n"
            "A new saga starts `running` with every step `pending`.\n\n"
            "## Saga statuses (`sagas.status`)\n\n");
    print_table(out, saga_transitions, NELEMS(saga_transitions), saga_names);
    fprintf(out, "\nTerminal: `completed`, `compensated`, `cancelled` and `failed`, each\n"
                 "announced by the event `saga.<status>`; `failed` means a compensation did\n"
                 "not happen and a person must look.  `cancelling` is `compensating` for a\n"
                 "saga that was cancelled (saga.cancel): it ends `cancelled`.\n\n"
                 "## Step statuses (`steps.status`)\n\n");
    print_table(out, step_transitions, NELEMS(step_transitions), step_names);
    fprintf(out, "\n## A running step's call (`steps.calling`)\n\n"
                 "Within `running`, whether the step's forward call may be in flight: set with\n"
                 "its attempt row, cleared with its outcome, and kept across a crash until the\n"
                 "step's redelivered command is decided. A parallel group's member that stops\n"
                 "(fail_fast, saga.cancel) while calling is recorded when its call returns;\n"
                 "one not calling (waiting for a retry) stops at once.\n\n");
    print_table(out, calling_transitions, NELEMS(calling_transitions), calling_names);
}

int worker_cmd_states(sg_cli_t *cli, int argc, char **argv)
{
    (void)cli;
    (void)argc;
    (void)argv;
    worker_states_reference(stdout);
    return fflush(stdout) == 0 ? SG_EXIT_OK : SG_EXIT_FAIL;
}
