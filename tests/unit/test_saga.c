/* The saga and step state machines through the pure decision
 * (worker/decide/worker_decide.h): typed rows and a command in, the outcome out,
 * no PostgreSQL, no Kafka, no clock.  Each row of the table names the rows
 * before, the command, and what the outcome must hold: the messages and
 * dead letters in order, the rows after, the call, the metric, a log
 * line; together the rows make every transition the worker may make.
 * saga.start and what messages hold: test_saga_start.c. */
#include <stdio.h>
#include <string.h>

#include "saga_fixture.h"
#include "unit.h"

/* ---- the transitions --------------------------------------------------- */

typedef enum {
    EXEC,
    COMP,
    RELEASE,
    CANCEL,
    APPROVE,
    REJECT,
    GATE_TIMEOUT,
    RET_OK,
    RET_ERR,
    RET_COMP_OK,
    RET_COMP_ERR
} kind_t;

typedef struct case_s {
    const char *name;
    /* before */
    char saga;
    const char *steps;
    int att[NSTEPS], catt[NSTEPS];
    /* the command; its generation is the saga's + gen_off; for RET_*ERR
     * the error's class and retriable */
    kind_t kind;
    int step, attempt, gen_off;
    sg_errclass_t cls;
    bool retriable;
    /* the world: attempt rows of the command, deadline, hold, budget */
    int interrupted, finished;
    bool isolated, chained, past_deadline;
    int gate; /* 1 + the step with an approval gate, 0: none */
    int64_t hold_ms, spent, budget;
    /* after */
    const char *effects; /* fx_effects(), in order */
    char saga_after;     /* the saga's status after */
    const char *steps_after;
    const char *step_rows; /* fx_rows(): the step rows written */
    char saga_row;         /* fx_rows(): the saga row's status */
    bool calls, defer, unchained;
    const char *consumed; /* commands_consumed's outcome, NULL: not counted */
    const char *log;      /* a log line holding this, or NULL */
} case_t;

/* A row per case, its fields grouped: before, after, what else. */
/* clang-format off */
static const case_t cases[] = {
    /* forward steps */
    {.name = "first attempt of a pending step: attempt row, then the call",
     .saga = 'R', .steps = "pppp", .kind = EXEC, .step = 0, .attempt = 1,
     .effects = "ATT", .saga_after = 'R', .steps_after = "rppp", .step_rows = "r---",
     .saga_row = '-',
     .calls = true, .consumed = "called", .log = "step 0: pending -> running"},
    {.name = "retry of a running step: attempt row, the call",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 2,
     .effects = "ATT", .saga_after = 'R', .steps_after = "srpp", .step_rows = "-r--",
     .saga_row = '-',
     .calls = true, .consumed = "called", .log = "step 1: running -> running"},
    {.name = "step success: the next step's command",
     .saga = 'R', .steps = "rppp", .att = {1}, .kind = RET_OK, .step = 0, .attempt = 1,
     .effects = "step.succeeded,step.execute", .saga_after = 'R', .steps_after = "sppp",
     .step_rows = "s---", .saga_row = 'R',
     .log = "step call succeeded in 12 ms"},
    {.name = "success of the step before the last: the last step's command",
     .saga = 'R', .steps = "ssrp", .att = {1, 1, 1}, .kind = RET_OK, .step = 2, .attempt = 1,
     .effects = "step.succeeded,step.execute", .saga_after = 'R', .steps_after = "sssp",
     .step_rows = "--s-", .saga_row = 'R'},
    {.name = "last step success: the saga is completed",
     .saga = 'R', .steps = "sssr", .att = {1, 1, 1, 1}, .kind = RET_OK, .step = 3, .attempt = 1,
     .effects = "step.succeeded,saga.completed", .saga_after = 'D', .steps_after = "ssss",
     .step_rows = "---s", .saga_row = 'D',
     .log = "saga: running -> completed"},
    {.name = "transient failure: a retry after a backoff (a timer)",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = RET_ERR, .step = 1, .attempt = 1,
     .cls = SG_ERRCLASS_TRANSIENT, .retriable = true,
     .effects = "@step.execute,step.retry_scheduled", .saga_after = 'R', .steps_after = "srpp",
     .step_rows = "-r--", .saga_row = 'R', /* its row: no call in flight now (calling) */
     .log = "step call failed (transient): it broke"},
    {.name = "transient failure, attempts exhausted: dead letter, compensation",
     .saga = 'R', .steps = "srpp", .att = {1, 3}, .kind = RET_ERR, .step = 1, .attempt = 3,
     .cls = SG_ERRCLASS_TRANSIENT, .retriable = true,
     .effects = "step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate",
     .saga_after = 'c', .steps_after = "cfkk", .step_rows = "cfkk", .saga_row = 'c'},
    {.name = "transient failure, retry budget spent: dead letter, compensation",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = RET_ERR, .step = 1, .attempt = 1,
     .cls = SG_ERRCLASS_TRANSIENT, .retriable = true, .spent = 1000, .budget = 100,
     .effects = "step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate",
     .saga_after = 'c', .steps_after = "cfkk", .step_rows = "cfkk", .saga_row = 'c'},
    {.name = "timeout on the last attempt: unknown, and its own compensation runs first",
     .saga = 'R', .steps = "ssrp", .att = {1, 1, 3}, .kind = RET_ERR, .step = 2, .attempt = 3,
     .cls = SG_ERRCLASS_TIMEOUT, .retriable = true,
     .effects = "step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate",
     .saga_after = 'c', .steps_after = "ssck", .step_rows = "--ck", .saga_row = 'c',
     .log = "step 2: unknown -> compensating"},
    {.name = "a permanent error (known not taken): failed, its compensation does not run",
     .saga = 'R', .steps = "ssrp", .att = {1, 1, 1}, .kind = RET_ERR, .step = 2, .attempt = 1,
     .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.failed,saga.compensating,step.compensate", .saga_after = 'c',
     .steps_after = "ckfk", .step_rows = "ckfk", .saga_row = 'c'},
    {.name = "poison failure, with a hold: dead letter, saga held, release timer",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = RET_ERR, .step = 1, .attempt = 1,
     .cls = SG_ERRCLASS_POISON, .hold_ms = 60000,
     .effects = "step.failed,DL,saga.dead_lettered,@saga.release", .saga_after = 'H',
     .steps_after = "sfpp", .step_rows = "-f--", .saga_row = 'H',
     .log = "saga: running -> held"},
    {.name = "permanent failure: compensation in reverse order",
     .saga = 'R', .steps = "sssr", .att = {1, 1, 1, 1}, .kind = RET_ERR, .step = 3, .attempt = 1,
     .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.failed,saga.compensating,step.compensate", .saga_after = 'c',
     .steps_after = "sscf", .step_rows = "--cf", .saga_row = 'c'},
    {.name = "permanent failure of the first step: nothing to undo, compensated",
     .saga = 'R', .steps = "rppp", .att = {1}, .kind = RET_ERR, .step = 0, .attempt = 1,
     .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.failed,saga.compensating,saga.compensated", .saga_after = 'C',
     .steps_after = "fkkk", .step_rows = "fkkk", .saga_row = 'C'},
    {.name = "deadline passed before the step ran: failed, compensation",
     .saga = 'R', .steps = "sppp", .att = {1}, .kind = EXEC, .step = 1, .attempt = 1,
     .past_deadline = true,
     .effects = "step.failed,saga.compensating,step.compensate", .saga_after = 'c',
     .steps_after = "cfkk", .step_rows = "cfkk", .saga_row = 'c',
     .consumed = "failed"},
    /* compensation */
    {.name = "compensation command: attempt row, the call",
     .saga = 'c', .steps = "sscf", .att = {1, 1, 1, 1}, .kind = COMP, .step = 2, .attempt = 1,
     .effects = "ATT", .saga_after = 'c', .steps_after = "sscf", .step_rows = "--c-",
     .saga_row = '-',
     .calls = true, .consumed = "called"},
    {.name = "compensation success: the next one down, skipping a step without one",
     .saga = 'c', .steps = "sscf", .att = {1, 1, 1, 1}, .catt = {0, 0, 1}, .kind = RET_COMP_OK,
     .step = 2, .attempt = 1,
     .effects = "step.compensated,step.compensate", .saga_after = 'c', .steps_after = "ckCf",
     .step_rows = "ckC-", .saga_row = 'c'},
    {.name = "last compensation success: the saga is compensated",
     .saga = 'c', .steps = "ckCf", .att = {1, 1, 1, 1}, .catt = {1, 0, 1}, .kind = RET_COMP_OK,
     .step = 0, .attempt = 1,
     .effects = "step.compensated,saga.compensated", .saga_after = 'C', .steps_after = "CkCf",
     .step_rows = "C---", .saga_row = 'C',
     .log = "saga: compensating -> compensated"},
    {.name = "compensation transient failure: retry timer",
     .saga = 'c', .steps = "sscf", .att = {1, 1, 1, 1}, .catt = {0, 0, 1}, .kind = RET_COMP_ERR,
     .step = 2, .attempt = 1, .cls = SG_ERRCLASS_TRANSIENT, .retriable = true,
     .effects = "@step.compensate,step.retry_scheduled", .saga_after = 'c', .steps_after = "sscf",
     .step_rows = "----", .saga_row = 'c'},
    {.name = "compensation attempts exhausted: failed, dead letter",
     .saga = 'c', .steps = "sscf", .att = {1, 1, 1, 1}, .catt = {0, 0, 2}, .kind = RET_COMP_ERR,
     .step = 2, .attempt = 2, .cls = SG_ERRCLASS_TRANSIENT, .retriable = true,
     .effects = "step.compensation_failed,DL,saga.dead_lettered,saga.failed", .saga_after = 'F',
     .steps_after = "ssxf", .step_rows = "--x-", .saga_row = 'F',
     .log = "saga: compensating -> failed"},
    {.name = "compensation permanent failure: the saga failed",
     .saga = 'c', .steps = "sscf", .att = {1, 1, 1, 1}, .catt = {0, 0, 1}, .kind = RET_COMP_ERR,
     .step = 2, .attempt = 1, .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.compensation_failed,DL,saga.dead_lettered,saga.failed", .saga_after = 'F',
     .steps_after = "ssxf", .step_rows = "--x-", .saga_row = 'F'},
    /* saga.release */
    {.name = "release of a held saga: compensation below the failed step",
     .saga = 'H', .steps = "sfpp", .att = {1, 1}, .kind = RELEASE,
     .effects = "saga.compensating,step.compensate", .saga_after = 'c', .steps_after = "cfkk",
     .step_rows = "c-kk", .saga_row = 'c',
     .consumed = "failed", .log = "saga: held -> compensating"},
    {.name = "release of an older generation: stale",
     .saga = 'H', .steps = "sfpp", .att = {1, 1}, .kind = RELEASE, .gen_off = -1,
     .effects = "", .saga_after = 'H', .steps_after = "sfpp", .step_rows = "----", .saga_row = '-',
     .consumed = "ignored", .log = "older generation"},
    {.name = "release of a saga no longer held: stale",
     .saga = 'c', .steps = "cfkk", .att = {1, 1}, .kind = RELEASE,
     .effects = "", .saga_after = 'c', .steps_after = "cfkk", .step_rows = "----", .saga_row = '-',
     .consumed = "ignored", .log = "not held"},
    /* saga.cancel (effects: CTL is the row of the saga's control history) */
    {.name = "cancel between steps: pending skipped, compensation in reverse",
     .saga = 'R', .steps = "sspp", .att = {1, 1}, .kind = CANCEL,
     .effects = "CTL:accepted,saga.cancelling,step.compensate", .saga_after = 'N',
     .steps_after = "ckkk", .step_rows = "ckkk", .saga_row = 'N',
     .consumed = "cancelled", .log = "saga: running -> cancelling"},
    {.name = "cancel while a step waits for a retry: unknown, its compensation first",
     .saga = 'R', .steps = "ssrp", .att = {1, 1, 1}, .kind = CANCEL,
     .effects = "CTL:accepted,saga.cancelling,step.compensate", .saga_after = 'N',
     .steps_after = "ssck", .step_rows = "--ck", .saga_row = 'N',
     .consumed = "cancelled", .log = "step 2: running -> unknown"},
    {.name = "cancel before any step ran: nothing to undo, cancelled at once",
     .saga = 'R', .steps = "pppp", .kind = CANCEL,
     .effects = "CTL:accepted,saga.cancelling,saga.cancelled", .saga_after = 'X',
     .steps_after = "kkkk", .step_rows = "kkkk", .saga_row = 'X',
     .consumed = "cancelled", .log = "saga: cancelling -> cancelled"},
    {.name = "cancel of a held saga: its hold ends, compensation below the failed step",
     .saga = 'H', .steps = "sfpp", .att = {1, 1}, .kind = CANCEL,
     .effects = "CTL:accepted,saga.cancelling,step.compensate", .saga_after = 'N',
     .steps_after = "cfkk", .step_rows = "c-kk", .saga_row = 'N',
     .consumed = "cancelled", .log = "saga: held -> cancelling"},
    {.name = "compensation command of a cancelling saga: the call",
     .saga = 'N', .steps = "ckkk", .att = {1}, .kind = COMP, .step = 0, .attempt = 1,
     .effects = "ATT", .saga_after = 'N', .steps_after = "ckkk", .step_rows = "c---",
     .saga_row = '-',
     .calls = true, .consumed = "called"},
    {.name = "last compensation of a cancelling saga: cancelled",
     .saga = 'N', .steps = "ckkk", .att = {1}, .catt = {1}, .kind = RET_COMP_OK, .step = 0,
     .attempt = 1,
     .effects = "step.compensated,saga.cancelled", .saga_after = 'X', .steps_after = "Ckkk",
     .step_rows = "C---", .saga_row = 'X'},
    {.name = "a compensation of a cancelling saga fails for good: failed",
     .saga = 'N', .steps = "ckkk", .att = {1}, .catt = {1}, .kind = RET_COMP_ERR, .step = 0,
     .attempt = 1, .cls = SG_ERRCLASS_PERMANENT,
     .effects = "step.compensation_failed,DL,saga.dead_lettered,saga.failed", .saga_after = 'F',
     .steps_after = "xkkk", .step_rows = "x---", .saga_row = 'F',
     .log = "saga: cancelling -> failed"},
    {.name = "a step command of a cancelled saga: stale, never called",
     .saga = 'N', .steps = "ckkk", .att = {1}, .kind = EXEC, .step = 1, .attempt = 1,
     .effects = "", .saga_after = 'N', .steps_after = "ckkk", .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored", .log = "not waiting"},
    {.name = "cancel of a finished saga: refused, answered",
     .saga = 'D', .steps = "ssss", .att = {1, 1, 1, 1}, .kind = CANCEL,
     .effects = "CTL:refused,saga.command_refused", .saga_after = 'D', .steps_after = "ssss",
     .step_rows = "----", .saga_row = 'D',
     .consumed = "refused", .log = "which is completed"},
    {.name = "cancel of a compensating saga: refused, answered",
     .saga = 'c', .steps = "cfkk", .att = {1, 1}, .kind = CANCEL,
     .effects = "CTL:refused,saga.command_refused", .saga_after = 'c', .steps_after = "cfkk",
     .step_rows = "----", .saga_row = 'c',
     .consumed = "refused", .log = "already undoing"},
    {.name = "a second cancel: refused, answered",
     .saga = 'N', .steps = "ckkk", .att = {1}, .kind = CANCEL,
     .effects = "CTL:refused,saga.command_refused", .saga_after = 'N', .steps_after = "ckkk",
     .step_rows = "----", .saga_row = 'N',
     .consumed = "refused", .log = "which is cancelling"},
    /* approval gates (step 1 has one) */
    {.name = "a gated step's command: awaiting approval, the packet, the gate's timer, no call",
     .saga = 'R', .steps = "sppp", .att = {1}, .kind = EXEC, .step = 1, .attempt = 1, .gate = 2,
     .effects = "step.approval_requested,@step.approval_timeout", .saga_after = 'R',
     .steps_after = "sapp", .step_rows = "-a--", .saga_row = 'R',
     .consumed = "awaiting_approval", .log = "step 1: pending -> awaiting_approval"},
    {.name = "approval: approved, its command",
     .saga = 'R', .steps = "sapp", .att = {1}, .kind = APPROVE, .step = 1, .gate = 2,
     .effects = "CTL:accepted,step.approved,step.execute", .saga_after = 'R',
     .steps_after = "sApp", .step_rows = "-A--", .saga_row = 'R',
     .consumed = "approved", .log = "step 1: awaiting_approval -> approved"},
    {.name = "an approved step's command: the attempt row, the call",
     .saga = 'R', .steps = "sApp", .att = {1}, .kind = EXEC, .step = 1, .attempt = 1, .gate = 2,
     .effects = "ATT", .saga_after = 'R', .steps_after = "srpp", .step_rows = "-r--",
     .saga_row = '-',
     .calls = true, .consumed = "called", .log = "step 1: approved -> running"},
    {.name = "an approved step after the deadline: failed, compensation",
     .saga = 'R', .steps = "sApp", .att = {1}, .kind = EXEC, .step = 1, .attempt = 1, .gate = 2,
     .past_deadline = true,
     .effects = "step.failed,saga.compensating,step.compensate", .saga_after = 'c',
     .steps_after = "cfkk", .step_rows = "cfkk", .saga_row = 'c',
     .consumed = "failed", .log = "step 1: approved -> failed"},
    {.name = "rejection: the step fails uncalled, the saga compensates",
     .saga = 'R', .steps = "sapp", .att = {1}, .kind = REJECT, .step = 1, .gate = 2,
     .effects = "CTL:accepted,step.rejected,step.failed,saga.compensating,step.compensate",
     .saga_after = 'c', .steps_after = "cfkk", .step_rows = "cfkk", .saga_row = 'c',
     .consumed = "rejected", .log = "step 1: awaiting_approval -> failed"},
    {.name = "the gate's timer: a rejection",
     .saga = 'R', .steps = "sapp", .att = {1}, .kind = GATE_TIMEOUT, .step = 1, .gate = 2,
     .effects = "step.rejected,step.failed,saga.compensating,step.compensate", .saga_after = 'c',
     .steps_after = "cfkk", .step_rows = "cfkk", .saga_row = 'c',
     .consumed = "timed_out"},
    {.name = "the gate's timer after a decision: stale",
     .saga = 'R', .steps = "sApp", .att = {1}, .kind = GATE_TIMEOUT, .step = 1, .gate = 2,
     .effects = "", .saga_after = 'R', .steps_after = "sApp", .step_rows = "----",
     .saga_row = '-',
     .consumed = "ignored", .log = "decided before its timeout"},
    {.name = "approval of a step not waiting: refused, answered",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = APPROVE, .step = 1, .gate = 2,
     .effects = "CTL:refused,saga.command_refused", .saga_after = 'R', .steps_after = "srpp",
     .step_rows = "----", .saga_row = 'R',
     .consumed = "refused", .log = "only a step awaiting_approval"},
    {.name = "cancel of a saga awaiting approval: the gate cancelled, compensation",
     .saga = 'R', .steps = "sapp", .att = {1}, .kind = CANCEL, .gate = 2,
     .effects = "CTL:accepted,saga.cancelling,step.compensate", .saga_after = 'N',
     .steps_after = "ckkk", .step_rows = "ckkk", .saga_row = 'N',
     .consumed = "cancelled", .log = "step 1: awaiting_approval -> skipped"},
    {.name = "cancel after an approval, before the call: never called",
     .saga = 'R', .steps = "sApp", .att = {1}, .kind = CANCEL, .gate = 2,
     .effects = "CTL:accepted,saga.cancelling,step.compensate", .saga_after = 'N',
     .steps_after = "ckkk", .step_rows = "ckkk", .saga_row = 'N',
     .consumed = "cancelled", .log = "step 1: approved -> skipped"},
    /* stale and duplicate commands */
    {.name = "duplicate of an attempt that finished",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 1,
     .finished = 1,
     .effects = "", .saga_after = 'R', .steps_after = "srpp", .step_rows = "----", .saga_row = '-',
     .consumed = "ignored", .log = "already ran"},
    {.name = "duplicate of an attempt that was interrupted, then finished",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 1,
     .interrupted = 1, .finished = 1,
     .effects = "", .saga_after = 'R', .steps_after = "srpp", .step_rows = "----", .saga_row = '-',
     .consumed = "ignored", .log = "already ran"},
    {.name = "attempt number that is not the next one",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 3,
     .effects = "", .saga_after = 'R', .steps_after = "srpp", .step_rows = "----", .saga_row = '-',
     .consumed = "ignored", .log = "not the next"},
    {.name = "a command of another generation",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 2,
     .gen_off = 1,
     .effects = "", .saga_after = 'R', .steps_after = "srpp", .step_rows = "----", .saga_row = '-',
     .consumed = "ignored", .log = "generation is not the saga's current one"},
    {.name = "a step not waiting (already succeeded)",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 0, .attempt = 2,
     .effects = "", .saga_after = 'R', .steps_after = "srpp", .step_rows = "----", .saga_row = '-',
     .consumed = "ignored", .log = "not waiting"},
    {.name = "an outcome after the step moved on",
     .saga = 'c', .steps = "cfkk", .att = {1, 1}, .kind = RET_OK, .step = 1, .attempt = 1,
     .effects = "", .saga_after = 'c', .steps_after = "cfkk", .step_rows = "----", .saga_row = '-',
     .log = "the step moved on while the call ran"},
    /* interrupted calls and the crash loop */
    {.name = "interrupted attempt: marked, run again",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 1,
     .interrupted = 1,
     .effects = "INT,ATT", .saga_after = 'R', .steps_after = "srpp", .step_rows = "-r--",
     .saga_row = '-',
     .calls = true, .consumed = "called"},
    {.name = "crash-loop suspect: deferred until it runs alone, nothing written",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 1,
     .interrupted = 2,
     .effects = "", .saga_after = 'R', .steps_after = "srpp", .step_rows = "----", .saga_row = '-',
     .defer = true},
    {.name = "crash-loop suspect run alone: marked, run again",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 1,
     .interrupted = 2, .isolated = true,
     .effects = "INT,ATT", .saga_after = 'R', .steps_after = "srpp", .step_rows = "-r--",
     .saga_row = '-',
     .calls = true, .consumed = "called"},
    {.name = "crash loop: interrupted too often, dead letter, compensation",
     .saga = 'R', .steps = "srpp", .att = {1, 1}, .kind = EXEC, .step = 1, .attempt = 1,
     .interrupted = 3, .isolated = true,
     .effects = "INT,step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate",
     .saga_after = 'c', .steps_after = "cukk", .step_rows = "cukk", .saga_row = 'c',
     .consumed = "dead_lettered"},
    {.name = "chained command whose tool is gone: dropped, its message decides",
     .saga = 'R', .steps = "sppp", .att = {1}, .kind = EXEC, .step = 1, .attempt = 1,
     .chained = true,
     .effects = "", .saga_after = 'R', .steps_after = "sppp", .step_rows = "----", .saga_row = '-',
     .unchained = true},
};
/* clang-format on */

/* The transitions the setters logged over the table's rows. */
static bool seen_saga[WORKER_SAGA__COUNT][WORKER_SAGA__COUNT];
static bool seen_step[WORKER_STEP__COUNT][WORKER_STEP__COUNT];

/* Reads the setters' debug lines "saga: FROM -> TO", "step N: FROM -> TO". */
static void note_transitions(const worker_outcome_t *out)
{
    for (size_t i = 0; i < out->n; i++) {
        const char *text = out->ops[i].u.log.text;
        char from[32], to[32];
        worker_saga_status_t sf, st;
        worker_step_status_t pf, pt;

        if (out->ops[i].kind != WORKER_OP_LOG)
            continue;
        if (sscanf(text, "saga: %31s -> %31s", from, to) == 2) {
            cr_assert_eq(worker_saga_status_parse(from, &sf), 0);
            cr_assert_eq(worker_saga_status_parse(to, &st), 0);
            seen_saga[sf][st] = true;
        } else if (sscanf(text, "step %*d: %31s -> %31s", from, to) == 2) {
            cr_assert_eq(worker_step_status_parse(from, &pf), 0);
            cr_assert_eq(worker_step_status_parse(to, &pt), 0);
            seen_step[pf][pt] = true;
        }
    }
}

static void run_case(const case_t *c)
{
    fx_t fx;
    char got[512], st[NSTEPS + 1], sg, after[NSTEPS + 1];

    fx_init(&fx);
    fx_saga(&fx, c->saga, c->steps, c->att, c->catt);
    switch (c->kind) {
    case EXEC:
        fx_command(&fx, SG_CMD_EXECUTE, c->step, c->attempt, 1 + c->gen_off);
        break;
    case COMP:
        fx_command(&fx, SG_CMD_COMPENSATE, c->step, c->attempt, 1 + c->gen_off);
        break;
    case RELEASE:
        fx_command(&fx, SG_CMD_RELEASE, -1, 0, 1 + c->gen_off);
        break;
    case CANCEL:
        fx_cancel(&fx);
        break;
    case APPROVE:
    case REJECT:
        fx_decision(&fx, c->kind == APPROVE ? SG_CMD_APPROVE : SG_CMD_REJECT, c->step);
        break;
    case GATE_TIMEOUT:
        fx_command(&fx, SG_CMD_APPROVAL_TIMEOUT, c->step, 1, 1 + c->gen_off);
        break;
    case RET_OK:
    case RET_ERR:
        fx_returned(&fx, false, c->step, c->attempt,
                    c->kind == RET_OK               ? WORKER_OK
                    : c->cls == SG_ERRCLASS_TIMEOUT ? WORKER_TIMEOUT
                                                    : WORKER_ERROR,
                    c->cls, c->retriable);
        break;
    case RET_COMP_OK:
    case RET_COMP_ERR:
        fx_returned(&fx, true, c->step, c->attempt,
                    c->kind == RET_COMP_OK ? WORKER_OK : WORKER_ERROR, c->cls, c->retriable);
        break;
    }
    fx.saga.interrupted = c->interrupted;
    fx.saga.finished = c->finished;
    fx.saga.past_deadline = c->past_deadline;
    fx.saga.retry_spent = c->spent;
    fx.saga.retry_budget = c->budget ? c->budget : -1;
    fx.cmd.isolated = c->isolated;
    fx.cmd.chained = c->chained;
    fx.rules.hold_ms = c->hold_ms;
    if (c->chained)
        fx.saga.steps[1].tool = "teleport";
    if (c->gate)
        fx.saga.steps[c->gate - 1].approval = "{\"timeout_ms\":60000,\"reason\":\"big\"}";
    fx_decide(&fx, true);

    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, c->effects, "%s: effects", c->name);
    cr_expect_eq(fx.saga.status, fx_saga_status(c->saga_after), "%s: saga %s", c->name,
                 worker_saga_status_name(fx.saga.status));
    for (int i = 0; i < NSTEPS; i++)
        after[i] = fx_step_letters[fx.saga.steps[i].status];
    after[NSTEPS] = '\0';
    cr_expect_str_eq(after, c->steps_after, "%s: steps after", c->name);
    fx_rows(&fx.out, st, &sg);
    cr_expect_str_eq(st, c->step_rows, "%s: step rows", c->name);
    cr_expect_eq(sg, c->saga_row, "%s: saga row %c", c->name, sg);
    cr_expect_eq(fx.out.calls, c->calls, "%s: calls", c->name);
    cr_expect_eq(fx.out.defer, c->defer, "%s: defer", c->name);
    cr_expect_eq(fx.out.unchained, c->unchained, "%s: unchained", c->name);
    cr_expect_str_eq(fx_consumed(&fx.out), c->consumed ? c->consumed : "-", "%s: consumed",
                     c->name);
    if (c->log)
        cr_expect(fx_logged(&fx.out, c->log), "%s: no log line with \"%s\"", c->name, c->log);
    note_transitions(&fx.out);
    fx_fini(&fx);
}

/* The rows run in one test: Criterion's parameterized tests copy the
 * parameters into a re-executed child, where the strings of a row would
 * not be at the same addresses.  A failure names its row. */
Test(saga, every_transition_of_the_table)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(&cases[i]);
    /* Every transition the worker may make (worker_state.c's tables,
     * docs/STATES.md) is made by some row. */
    for (int f = 0; f < WORKER_SAGA__COUNT; f++)
        for (int t = 0; t < WORKER_SAGA__COUNT; t++)
            cr_expect(!worker_saga_transition_ok(f, t) || seen_saga[f][t],
                      "no row makes the saga transition %s -> %s", worker_saga_status_name(f),
                      worker_saga_status_name(t));
    for (int f = 0; f < WORKER_STEP__COUNT; f++)
        for (int t = 0; t < WORKER_STEP__COUNT; t++)
            cr_expect(!worker_step_transition_ok(f, t) || seen_step[f][t],
                      "no row makes the step transition %s -> %s", worker_step_status_name(f),
                      worker_step_status_name(t));
}

/* ---- what the messages hold ---------------------------------------------- */

Test(saga, a_retry_is_a_timer_within_the_backoff_and_announced)
{
    fx_t fx;
    const worker_op_t *timer, *ev;
    char want[64];

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_TRANSIENT, true);
    fx_decide(&fx, true);
    timer = fx_message(&fx.out, "step.execute");
    cr_assert_not_null(timer);
    cr_expect(timer->u.msg.delay_ms > 0 && timer->u.msg.delay_ms <= 100, "delay %lld",
              (long long)timer->u.msg.delay_ms);
    cr_expect_eq(timer->u.msg.attempt, 2);
    assert_contains(timer->u.msg.payload, "\"id\":\"cmd:order-1:1:f:g1:a2\"");
    cr_expect_not(fx.out.follow.set, "a timer is not chained");
    cr_expect_eq(fx.saga.retry_spent, timer->u.msg.delay_ms);
    ev = fx_message(&fx.out, "step.retry_scheduled");
    snprintf(want, sizeof(want), "\"delay_ms\":%lld", (long long)timer->u.msg.delay_ms);
    assert_contains(ev->u.msg.payload, want);
    snprintf(want, sizeof(want), "\"retry_at\":\"2026-01-01T00:00:00.%03lldZ\"",
             (long long)timer->u.msg.delay_ms);
    assert_contains(ev->u.msg.payload, want);
    cr_expect(fx_counted(&fx.out, SG_M_RETRIES_SCHEDULED, "tool.failed"));
    cr_expect(fx_counted(&fx.out, SG_M_STEPS, "noop"));
    cr_expect_eq(fx_nth_op(&fx.out, WORKER_OP_ATTEMPT_DONE, 0)->u.done.id, 99);
    assert_contains(fx_nth_op(&fx.out, WORKER_OP_ATTEMPT_DONE, 0)->u.done.envelope,
                    "\"status\":\"error\",\"error_code\":\"tool.failed\",\"class\":"
                    "\"transient\",\"retriable\":true");
    fx_fini(&fx);
}

/* retry_budget_ms: 0 in the saga allows no retry wait at all; the
 * config's retry.budget_ms of 0 is no budget (the fixture's default). */
Test(saga, a_retry_budget_of_0_allows_no_wait_and_the_config_0_no_limit)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx.saga.retry_budget = 0;
    fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_TRANSIENT, true);
    fx.result.retry_after_ms = 50;
    fx_decide(&fx, true);
    cr_expect_null(fx_message(&fx.out, "step.retry_scheduled"), "no retry within a budget of 0");
    cr_expect_not_null(fx_message(&fx.out, "saga.dead_lettered"));
    cr_expect(fx_counted(&fx.out, SG_M_DEAD_LETTERS, "runtime.budget.retry_exhausted"));
    fx_fini(&fx);

    /* Nor a retry whose wait is 0 (a policy of base 0; full jitter can
     * draw 0 from any): a budget of 0 means no retry, not "no waiting"
     * (issue 35 item 7: `>` let it through). */
    fx_init(&fx);
    fx.retry = (sg_policy_t){3, 0, 0};
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx.saga.retry_budget = 0;
    fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_TRANSIENT, true);
    fx_decide(&fx, true);
    cr_expect_null(fx_message(&fx.out, "step.retry_scheduled"),
                   "no 0 ms retry within a budget of 0");
    cr_expect(fx_counted(&fx.out, SG_M_DEAD_LETTERS, "runtime.budget.retry_exhausted"));
    fx_fini(&fx);

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx.saga.retry_spent = 1000000; /* far past any budget, but the config has none */
    fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_TRANSIENT, true);
    fx.result.retry_after_ms = 50;
    fx_decide(&fx, true);
    cr_expect_not_null(fx_message(&fx.out, "step.retry_scheduled"), "retry.budget_ms 0: no limit");
    fx_fini(&fx);
}

Test(saga, a_held_saga_dead_letter_says_until_when)
{
    fx_t fx;
    const worker_op_t *timer;

    fx_init(&fx);
    fx.rules.hold_ms = 60000;
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_POISON, false);
    fx_decide(&fx, true);
    assert_contains(fx_message(&fx.out, "saga.dead_lettered")->u.msg.payload,
                    "\"held_until\":\"2026-01-01T00:01:00.000Z\"");
    timer = fx_message(&fx.out, "saga.release");
    cr_expect_eq(timer->u.msg.delay_ms, 60000);
    assert_contains(timer->u.msg.payload, "\"id\":\"cmd:order-1:release:g1\"");
    cr_expect_eq(fx.out.stats.held, 1);
    fx_fini(&fx);
}

Test(saga, a_compensation_stored_as_json_null_is_no_compensation)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "sssr", (int[]){1, 1, 1, 1}, NULL);
    fx.saga.steps[2].comp = "null";
    fx_returned(&fx, false, 3, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "step.failed,saga.compensating,step.compensate");
    cr_expect_eq(fx.saga.steps[2].status, WORKER_STEP_SKIPPED);
    cr_expect_eq(fx.saga.steps[0].status, WORKER_STEP_COMPENSATING);
    cr_expect_eq(fx_message(&fx.out, "step.compensate")->u.msg.step, 0);
    fx_fini(&fx);
}

Test(saga, a_cancel_of_an_unknown_saga_is_answered_not_dead_lettered)
{
    fx_t fx;
    const worker_op_t *op;

    fx_init(&fx);
    fx_cancel(&fx);
    fx_decide(&fx, false);
    op = fx_message(&fx.out, "saga.command_refused");
    cr_assert_not_null(op, "no saga.command_refused");
    cr_expect_null(fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0), "dead-lettered");
    cr_expect_null(fx_nth_op(&fx.out, WORKER_OP_CONTROL, 0), "a history row without a saga");
    cr_expect_str_eq(op->u.msg.topic, "t.events");
    cr_expect(strstr(op->u.msg.payload, "\"seq\":0"), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"error_code\":\"input.saga.not_found\""), "%s",
              op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"command_id\":\"c-1\""), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"by\":\"ops\""), "%s", op->u.msg.payload);
    cr_expect_str_eq(fx_consumed(&fx.out), "refused");
    fx_fini(&fx);
}

Test(saga, a_cancel_says_who_and_why_in_its_event_and_history)
{
    fx_t fx;
    const worker_op_t *op, *ctl;

    fx_init(&fx);
    fx_saga(&fx, 'R', "sspp", (const int[]){1, 1, 0, 0}, NULL);
    fx_cancel(&fx);
    fx_decide(&fx, true);
    op = fx_message(&fx.out, "saga.cancelling");
    cr_assert_not_null(op);
    cr_expect(strstr(op->u.msg.payload, "\"by\":\"ops\""), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"reason\":\"withdrawn\""), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"command_id\":\"c-1\""), "%s", op->u.msg.payload);
    ctl = fx_nth_op(&fx.out, WORKER_OP_CONTROL, 0);
    cr_assert_not_null(ctl);
    cr_expect_str_eq(ctl->u.control.by, "ops");
    cr_expect_str_eq(ctl->u.control.reason, "withdrawn");
    cr_expect_str_eq(ctl->u.control.command, "saga.cancel");
    cr_expect_str_eq(ctl->u.control.command_id, "c-1");
    fx_fini(&fx);
}

Test(saga, an_approval_packet_shows_the_call_and_its_timer_is_the_gates_timeout)
{
    fx_t fx;
    const worker_op_t *op, *timer;

    fx_init(&fx);
    fx_saga(&fx, 'R', "sspp", (const int[]){1, 1, 0, 0}, NULL);
    fx.saga.steps[2].approval = "{\"reason\":\"big charge\",\"registry\":true}";
    fx.saga.metadata = "{\"tenant\":\"eu-1\"}";
    fx.rules.approval_timeout_ms = 90000;
    fx_command(&fx, SG_CMD_EXECUTE, 2, 1, 1);
    fx_decide(&fx, true);
    cr_expect(!fx.out.calls, "no call before the approval");
    op = fx_message(&fx.out, "step.approval_requested");
    cr_assert_not_null(op);
    cr_expect(strstr(op->u.msg.payload, "\"args\":{\"amount\":5}"), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"tool\":\"charge\""), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"metadata\":{\"tenant\":\"eu-1\"}"), "%s",
              op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"required_by\":\"registry\""), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"reason\":\"big charge\""), "%s", op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"timeout_ms\":90000"), "the config's default: %s",
              op->u.msg.payload);
    cr_expect(strstr(op->u.msg.payload, "\"expires_at\":\"2026-01-01T00:01:30.000Z\""), "%s",
              op->u.msg.payload);
    timer = fx_message(&fx.out, "step.approval_timeout");
    cr_assert_not_null(timer);
    cr_expect_eq(timer->u.msg.delay_ms, 90000);
    cr_expect_str_eq(timer->u.msg.topic, "t.internal");
    cr_expect(strstr(timer->u.msg.payload, "\"step\":2,\"generation\":1"), "%s",
              timer->u.msg.payload);
    fx_fini(&fx);
}

/* A compensation attempt that timed out may have taken effect: the step
 * records the generation of its key, and every later compensation call,
 * in a later generation too (a replay), uses that key (issue 35 item 1). */
Test(saga, a_compensation_that_may_have_run_keeps_its_key)
{
    fx_t fx;
    const worker_op_t *op;

    fx_init(&fx);
    fx_saga(&fx, 'c', "cfpp", (int[]){1, 1, 0, 0}, (int[]){1, 0, 0, 0});
    fx_returned(&fx, true, 0, 1, WORKER_TIMEOUT, SG_ERRCLASS_TIMEOUT, true);
    fx_decide(&fx, true);
    cr_expect_eq(fx.saga.steps[0].comp_key_generation, 1);
    op = fx_nth_op(&fx.out, WORKER_OP_STEP, 0);
    cr_assert_not_null(op);
    cr_expect_eq(op->u.step.comp_key_generation, 1, "written with the step's row");
    fx_fini(&fx);

    /* A permanent answer says it did not: no key is kept. */
    fx_init(&fx);
    fx_saga(&fx, 'c', "cfpp", (int[]){1, 1, 0, 0}, (int[]){1, 0, 0, 0});
    fx_returned(&fx, true, 0, 1, WORKER_ERROR, SG_ERRCLASS_TRANSIENT, true);
    fx_decide(&fx, true);
    cr_expect_eq(fx.saga.steps[0].comp_key_generation, 0);
    fx_fini(&fx);

    /* Replayed (generation 2): the compensation runs under the kept key. */
    fx_init(&fx);
    fx_saga(&fx, 'c', "cfpp", (int[]){1, 1, 0, 0}, (int[]){0, 0, 0, 0});
    fx.saga.generation = 2;
    fx.saga.steps[0].comp_key_generation = 1;
    fx_command(&fx, SG_CMD_COMPENSATE, 0, 1, 2);
    fx_decide(&fx, true);
    cr_assert(fx.out.calls);
    cr_expect_str_eq(fx.out.call.idem_key, "order-1:0:c:g1");
    fx_fini(&fx);
}
