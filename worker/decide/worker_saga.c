/* The saga state machine (docs/ARCHITECTURE.md, "The saga state machine"):
 * the decisions on step.execute, step.compensate, saga.release, the
 * control commands (saga.cancel, saga.approve, saga.reject) and an
 * approval gate's timer, and on the outcome of a call.  Owns the rules of
 * a saga's life: which command is stale, when a step is retried (the
 * backoff, the budgets), when it fails for good, approval gates,
 * cancellation, the crash-loop limit.
 *
 * Pure (worker_decide.h): the rows and the command come in, the effects go
 * into the outcome; worker_saga_sql.c writes them into the transaction.
 * saga.start is decided in worker_saga_start.c; what follows an outcome
 * (compensation, groups, the terminal events) is worker_flow.c's.
 *
 * The one place where retry / compensate / dead-letter is decided for a
 * call's outcome is on_failure(); a forward step that fails for good goes
 * through worker_step_failed(), a compensation through
 * worker_comp_failed(). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_text.h"
#include "sagad/sg_alloc.h"
#include "worker_decide.h"

/* ---- decisions --------------------------------------------------------- */

/* Marks the unfinished attempt rows of the command as interrupted (a
 * worker died or lost the partition while they ran). */
static void mark_interrupted(worker_dc_t *d, bool compensate)
{
    const worker_dcmd_t *cmd = d->cmd;
    worker_op_t *op = worker_out_op(d, WORKER_OP_INTERRUPTED, cmd->dec->saga_id);

    op->u.attempt.step = cmd->dec->step;
    op->u.attempt.compensate = compensate;
    op->u.attempt.generation = cmd->dec->generation;
    op->u.attempt.attempt = cmd->dec->attempt;
}

/* A compensation attempt of st may have taken effect (its answer timed
 * out, its request went out unanswered, the worker died mid-call): its
 * key is kept from now on, across replays, so the downstream answers a
 * call that repeats it from its record instead of undoing twice (issue 35
 * item 1: a replay reran a refund that may have gone through under a new
 * key).  Sticky: the first such key is the one kept. */
static void comp_may_have_run(const worker_saga_t *saga, worker_step_t *st)
{
    if (st->comp_key_generation > 0)
        return;
    st->comp_key_generation = saga->generation;
    st->dirty = true;
}

/* An attempt this command starts again: a duplicate of a finished one,
 * the trace of a crash, or one crash too many.  Returns true when that
 * decided the command. */
static bool decide_rerun(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, bool comp)
{
    const worker_dcmd_t *cmd = d->cmd;
    sg_err_t err;

    if (saga->finished > 0 || saga->interrupted == 0) {
        worker_out_stale(d, "this attempt already ran");
        return true;
    }
    /* Its last run before the crash-loop limit happens alone
     * (worker_loop.c, isolate_next()): a crash then is its own, not
     * another command's it happened to run beside.  Nothing is written
     * until then. */
    if (saga->interrupted == d->rules->crash_loop_limit - 1 && !cmd->isolated) {
        d->out->defer = true;
        return true;
    }
    mark_interrupted(d, comp);
    if (comp)
        comp_may_have_run(saga, st);
    if (saga->interrupted < d->rules->crash_loop_limit)
        return false;
    sg_err_set(&err, SG_ERRCLASS_POISON, "runtime.crash_loop",
               "attempt %d of step %s (%s) was interrupted %lld times: not run again",
               cmd->dec->attempt, st->name, comp ? "compensate" : "forward",
               (long long)saga->interrupted);
    if (comp)
        worker_comp_failed(d, saga, st, &err);
    else /* it crashed the worker mid-call: it may have taken effect */
        worker_step_failed(d, saga, st, &err, true, true);
    worker_out_rows(d, saga);
    return true;
}

/* The step's call cannot be made (unknown tool, bad args): a chained
 * command has no message for a dead letter to name, so it is dropped,
 * nothing written, and its message decides this when it arrives. */
static void cannot_call(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, bool comp,
                        const sg_err_t *err)
{
    if (d->cmd->chained) {
        d->out->unchained = true;
        return;
    }
    /* An unknown tool is dead-lettered: the registry can be fixed and the
     * step replayed.  Bad args compensate like any permanent error. */
    if (comp)
        worker_comp_failed(d, saga, st, err);
    else
        worker_step_failed(d, saga, st, err, strcmp(err->code, "tool.unknown") == 0, false);
    worker_out_rows(d, saga);
}

/* The attempt row, committed before the call: a crash leaves it
 * unfinished, which is how crash loops are detected. */
static void start_attempt(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, bool comp)
{
    const worker_dcmd_t *cmd = d->cmd;
    worker_op_t *op;

    if (comp)
        st->comp_attempts = cmd->dec->attempt;
    else
        st->attempts = cmd->dec->attempt;
    if (!comp)
        worker_set_step(d, saga, st, WORKER_STEP_RUNNING);
    st->dirty = true;
    if (!comp) {                              /* steps.idempotency_key stays the forward key */
        st->idem_key = d->out->call.idem_key; /* from worker_prepare_call */
        st->forward_key = st->idem_key;
        d->out->call.detach = st->group != NULL; /* its siblings run beside it */
        worker_set_calling(d, saga, st, true);
    }
    op = worker_out_op(d, WORKER_OP_ATTEMPT, saga->saga_id);
    op->u.attempt.step = st->idx;
    op->u.attempt.compensate = comp;
    op->u.attempt.generation = saga->generation;
    op->u.attempt.attempt = cmd->dec->attempt;
    op->u.attempt.idem_key = sg_xstrdup(d->out->call.idem_key);
    if (d->out->call.resolved) /* what was really sent, for dlq-tool show and the timeline */
        op->u.attempt.args = sg_json_print(d->out->call.args);
    worker_out_rows(d, saga);
    d->out->calls = true;
}

/* ---- approval gates ---------------------------------------------------- */

/* A step with an approval gate whose command came: no call.  It waits
 * awaiting_approval; step.approval_requested carries the approval packet
 * (the saga, the step, its tool, its args as the call would send them,
 * the saga's metadata, why, until when), and a timer of the gate's
 * timeout rejects it unless a person decided first.  d->out->call holds
 * the prepared call (its args resolved); it is not made. */
static void gate_step(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st)
{
    sg_json_t *gate = sg_json_parse(st->approval, strlen(st->approval), NULL, NULL);
    sg_json_t *b = worker_out_step_body(st), *meta, *c;
    int64_t timeout = d->rules->approval_timeout_ms;
    const char *reason = NULL;
    char until[40], id[SG_SAGA_ID_MAX + 64];
    bool registry = false;

    if (gate) {
        sg_json_get_int(gate, "$", "timeout_ms", false, &timeout, NULL);
        sg_json_get_str(gate, "$", "reason", false, &reason, NULL);
        sg_json_get_bool(gate, "$", "registry", false, &registry, NULL);
    }
    worker_set_step(d, saga, st, WORKER_STEP_AWAITING_APPROVAL);
    sg_json_add_str(b, "tool", st->tool);
    sg_json_add_node(b, "args", sg_json_dup(d->out->call.args));
    meta =
        saga->metadata ? sg_json_parse(saga->metadata, strlen(saga->metadata), NULL, NULL) : NULL;
    if (meta)
        sg_json_add_node(b, "metadata", meta);
    else
        sg_json_add_null(b, "metadata");
    sg_json_add_str(b, "saga_name", saga->name);
    sg_json_add_str(b, "required_by", registry ? "registry" : "step");
    if (reason)
        sg_json_add_str(b, "reason", reason);
    sg_json_add_int(b, "timeout_ms", timeout);
    sg_time_iso(until, sizeof(until), d->in->now_ms + timeout);
    sg_json_add_str(b, "expires_at", until);
    worker_out_event(d, saga, "step.approval_requested", b);
    snprintf(id, sizeof(id), "cmd:%s:%d:approval:g%d", saga->saga_id, st->idx, saga->generation);
    c = worker_out_message_new("step.approval_timeout", id, saga->saga_id);
    sg_json_add_int(c, "step", st->idx);
    sg_json_add_int(c, "generation", saga->generation);
    worker_out_emit(d, d->rules->topic_internal, saga->traceparent, c, timeout);
    sg_json_destroy(gate);
    d->out->decided = "awaiting_approval";
    worker_out_rows(d, saga);
}

void worker_add_principal(sg_json_t *b, const sg_decoded_t *dec)
{
    if (!dec->who)
        return;
    sg_json_add_str(b, "principal", dec->as);
    if (strcmp(dec->as, dec->who->name) != 0)
        sg_json_add_str(b, "via", dec->who->name);
}

/* The gate of st said no: a person's saga.reject (by, reason, the
 * command's id) or its timer (by NULL).  step.rejected says who and why;
 * then the step fails, never called, and the saga compensates. */
static void reject_step(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, const char *by,
                        const char *reason, const char *command_id)
{
    sg_json_t *b = worker_out_step_body(st);
    sg_err_t err;

    if (by)
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "runtime.approval_rejected",
                   "step %s was rejected at its approval gate by %s: %s", st->name, by, reason);
    else
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "runtime.approval_timeout",
                   "step %s: no decision at its approval gate within its timeout", st->name);
    if (by) {
        sg_json_add_str(b, "by", by);
        worker_add_principal(b, d->cmd->dec);
        sg_json_add_str(b, "reason", reason);
        if (command_id)
            sg_json_add_str(b, "command_id", command_id);
    } else {
        sg_json_add_bool(b, "timed_out", true);
    }
    worker_out_event(d, saga, "step.rejected", b);
    worker_step_failed(d, saga, st, &err, false, false);
}

/* A member of a group that stops (fail_fast, a saga.cancel) whose
 * command comes while it still runs: its retry, now due, is not made; or
 * its attempt was interrupted by a crash and is not made again.  (A call
 * of it in flight here holds such a command back until the call's outcome
 * is recorded: worker_cmdq.c, "detached calls".)  Its last attempt may
 * have taken effect: it ends unknown, and is compensated. */
static void stop_member(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st)
{
    const worker_dcmd_t *cmd = d->cmd;
    sg_json_t *b;

    if (cmd->dec->attempt == st->attempts) {
        if (saga->finished > 0 || saga->interrupted == 0) {
            worker_out_stale(d, "this attempt already ran");
            return;
        }
        mark_interrupted(d, false);
    } else if (cmd->dec->attempt != st->attempts + 1) {
        worker_out_stale(d, "attempt number is not the next one");
        return;
    }
    b = worker_out_step_body(st);
    sg_json_add_str(b, "outcome", "unknown");
    sg_json_add_str(b, "error_code", "runtime.group_stopped");
    sg_json_add_str(b, "message", "its group stopped before this attempt: not made");
    worker_out_event(d, saga, "step.failed", b);
    worker_stop_step(d, saga, st, "runtime.group_stopped");
    d->out->decided = "stopped";
    worker_resume_compensation(d, saga, worker_group_last(saga, st->idx));
    worker_out_rows(d, saga);
}

/* A best_effort group's unknown member whose undo runs while its saga
 * runs on (worker_flow.c, undo_unknown_member). */
static bool undoing_member(const worker_saga_t *saga, const worker_step_t *st)
{
    return saga->status == WORKER_SAGA_RUNNING && st->group &&
           st->policy == WORKER_POLICY_BEST_EFFORT && st->status == WORKER_STEP_COMPENSATING;
}

static void decide_step(worker_dc_t *d, worker_saga_t *saga)
{
    const worker_dcmd_t *cmd = d->cmd;
    bool comp = cmd->dec->type == SG_CMD_COMPENSATE;
    worker_step_t *st;
    int attempts;
    sg_err_t err;

    if (!saga) {
        sg_err_set(&err, SG_ERRCLASS_POISON, "input.saga.unknown",
                   "%s for saga %s, which does not exist",
                   comp ? "step.compensate" : "step.execute", cmd->dec->saga_id);
        worker_out_dead_letter(d, NULL, -1, false, &err, NULL);
        return;
    }
    if (cmd->dec->generation != saga->generation) {
        worker_out_stale(d, "generation is not the saga's current one");
        return;
    }
    if (cmd->dec->step >= saga->nsteps) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                   "$.step: %d is past the last step of saga %s (%d steps)", cmd->dec->step,
                   saga->saga_id, saga->nsteps);
        worker_out_dead_letter(d, saga, -1, false, &err, NULL);
        worker_out_rows(d, saga);
        return;
    }
    st = &saga->steps[cmd->dec->step];
    attempts = comp ? st->comp_attempts : st->attempts;
    if (!comp && st->group && st->status == WORKER_STEP_RUNNING &&
        (saga->status == WORKER_SAGA_COMPENSATING || saga->status == WORKER_SAGA_CANCELLING)) {
        stop_member(d, saga, st);
        return;
    }
    if ((comp ? saga->status != WORKER_SAGA_COMPENSATING &&
                    saga->status != WORKER_SAGA_CANCELLING && !undoing_member(saga, st)
              : saga->status != WORKER_SAGA_RUNNING) ||
        (comp ? st->status != WORKER_STEP_COMPENSATING
              : st->status != WORKER_STEP_PENDING && st->status != WORKER_STEP_RUNNING &&
                    st->status != WORKER_STEP_APPROVED)) {
        worker_out_stale(d, "the step is not waiting for this command");
        return;
    }
    if (cmd->dec->attempt == attempts && attempts > 0) {
        if (decide_rerun(d, saga, st, comp))
            return;
    } else if (cmd->dec->attempt != attempts + 1) {
        worker_out_stale(d, "attempt number is not the next one");
        return;
    }
    if (!comp && saga->past_deadline) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "runtime.deadline_exceeded",
                   "the saga's deadline passed before step %s ran", st->name);
        worker_step_failed(d, saga, st, &err, false, false);
        worker_out_rows(d, saga);
        return;
    }
    /* A compensation receives the forward result, which the load reads
     * only for steps already compensating: one chained in the transaction
     * that began the compensation waits for its message instead. */
    if (comp && cmd->chained && !st->done_result && st->done_effect &&
        strcmp(st->done_effect, "known") == 0) {
        d->out->unchained = true;
        return;
    }
    if (!worker_prepare_call(d, saga, st, comp, &err)) {
        /* A step that references one that did not succeed (a best_effort
         * member) is skipped, not failed for a reference without a value. */
        if (strcmp(err.code, "runtime.skipped_dependency_failed") == 0) {
            worker_skip_dependent(d, saga, st, &err);
            worker_out_rows(d, saga);
        } else {
            cannot_call(d, saga, st, comp, &err);
        }
        return;
    }
    if (!comp && st->status == WORKER_STEP_PENDING && st->approval) {
        gate_step(d, saga, st);
        return;
    }
    start_attempt(d, saga, st, comp);
}

/* saga.release: the hold of a held saga ended (its timer, or
 * sagad_release_hold()); the compensation starts below the failed step. */
static void decide_release(worker_dc_t *d, worker_saga_t *saga)
{
    const worker_dcmd_t *cmd = d->cmd;
    worker_step_t *st = NULL;
    sg_err_t err;

    if (!saga) {
        sg_err_set(&err, SG_ERRCLASS_POISON, "input.saga.unknown",
                   "saga.release for saga %s, which does not exist", cmd->dec->saga_id);
        worker_out_dead_letter(d, NULL, -1, false, &err, NULL);
        return;
    }
    if (cmd->dec->generation != saga->generation) {
        worker_out_stale(d, "the hold belongs to an older generation (the saga was replayed)");
        return;
    }
    if (saga->status != WORKER_SAGA_HELD) {
        worker_out_stale(d, "the saga is not held");
        return;
    }
    for (int i = saga->nsteps - 1; i >= 0 && !st; i--)
        if (saga->steps[i].status == WORKER_STEP_FAILED ||
            saga->steps[i].status == WORKER_STEP_UNKNOWN)
            st = &saga->steps[i];
    if (!st) {
        worker_out_stale(d, "a held saga without a failed step");
        return;
    }
    /* worker_step_failed() stored the dead letter's code with the step. */
    sg_err_set(&err, SG_ERRCLASS_POISON, st->error_code,
               "the hold of the dead-lettered step %s ended without a replay: compensating",
               st->name);
    worker_begin_compensation(d, saga, st->idx, &err);
    worker_out_rows(d, saga);
}

/* saga.cancel (docs/WORKER.md, "Cancellation").  The loop decides a
 * saga's commands one at a time, in order, and a command whose call is in
 * flight holds the saga's queue until its outcome is recorded; so when a
 * cancel is decided, no call of the saga runs, and none starts after it:
 * the step commands already emitted find the saga no longer running and
 * are stale.  Pending steps are skipped; a step still running waits for a
 * retry, and as its last attempt may have taken effect it ends unknown
 * and is compensated first; then every step whose effect stands, in
 * reverse.  A step waiting at its approval gate (or approved, not yet
 * run) is skipped: the gate is cancelled, its timer stale.  A saga already
 * compensating, or finished, or unknown, is answered with
 * saga.command_refused. */
/* Whether the signer of a control command may do it (docs/ARCHITECTURE.md,
 * "Trust boundary"): a principal of the keyring whose signature verified
 * at intake, with the role; for saga.approve and saga.reject the approve
 * role for the step's tool, not the principal that submitted the saga
 * (four eyes), and the step's generation when the command names one.
 * When not, the command is answered with saga.command_refused and its
 * reason (recorded in the saga's history when the saga exists). */
static bool authorized(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st)
{
    const sg_decoded_t *dec = d->cmd->dec;
    const char *type = sg_json_string(sg_json_member(dec->doc, "type"));
    sg_err_t err;

    if (!dec->who) {
        if (dec->auth.code[0])
            err = dec->auth;
        else
            sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.auth.unsigned",
                       "%s without a sagad-auth signature: control commands must be signed "
                       "with a registered key (sagactl --key)",
                       type);
    } else if (!(dec->who->roles &
                 (dec->type == SG_CMD_CANCEL ? SG_ROLE_CANCEL : SG_ROLE_APPROVE))) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.auth.forbidden",
                   "%s by %s, who does not have the %s role in the keyring", type, dec->who->name,
                   dec->type == SG_CMD_CANCEL ? "cancel" : "approve");
    } else if (st && !sg_principal_may_approve(dec->who, st->tool)) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.auth.forbidden",
                   "%s of step %s by %s, who may not approve tool %s (approve_tools in the "
                   "keyring)",
                   type, st->name, dec->who->name, st->tool);
    } else if (st && saga->submitted_by && strcmp(saga->submitted_by, dec->as) == 0) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.auth.self_approval",
                   "%s of step %s by %s, who submitted saga %s: four eyes, another approver "
                   "must decide",
                   type, st->name, dec->as, saga->saga_id);
    } else if (st && dec->generation && dec->generation != saga->generation) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.auth.generation",
                   "%s of step %s for generation %d, but the gate is of generation %d: read "
                   "the saga again and decide its current gate",
                   type, st->name, dec->generation, saga->generation);
    } else {
        return true;
    }
    worker_out_refused(d, saga, st, &err);
    return false;
}

static void decide_cancel(worker_dc_t *d, worker_saga_t *saga)
{
    const worker_dcmd_t *cmd = d->cmd;
    sg_json_t *b;
    sg_err_t err;
    bool held;

    if (!saga) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.saga.not_found",
                   "saga.cancel for saga %s, which does not exist", cmd->dec->saga_id);
        worker_out_refused(d, NULL, NULL, &err);
        return;
    }
    if (!authorized(d, saga, NULL))
        return;
    if (saga->status != WORKER_SAGA_RUNNING && saga->status != WORKER_SAGA_HELD) {
        bool undoing =
            saga->status == WORKER_SAGA_COMPENSATING || saga->status == WORKER_SAGA_CANCELLING;
        sg_err_set(&err, SG_ERRCLASS_PERMANENT,
                   undoing ? "input.saga.compensating" : "input.saga.finished",
                   "saga.cancel of saga %s, which is %s: %s", saga->saga_id,
                   worker_saga_status_name(saga->status),
                   undoing ? "it is already undoing its steps" : "it has ended; nothing to stop");
        worker_out_refused(d, saga, NULL, &err);
        return;
    }
    held = saga->status == WORKER_SAGA_HELD;
    worker_set_saga(d, saga, WORKER_SAGA_CANCELLING);
    /* The dead letter that held it is answered by the cancel: discarded,
     * not left pending for ever (it would keep the saga from retention;
     * a replay of a cancelled saga is refused anyway). */
    worker_out_control(d, saga, -1, "accepted", NULL)->u.control.discard_held = held;
    for (int j = 0; j < saga->nsteps; j++) {
        worker_step_t *st = &saga->steps[j];
        if (st->status == WORKER_STEP_PENDING || st->status == WORKER_STEP_AWAITING_APPROVAL ||
            st->status == WORKER_STEP_APPROVED) {
            worker_set_step(d, saga, st, WORKER_STEP_SKIPPED); /* a gate is cancelled with it */
        } else if (st->status == WORKER_STEP_RUNNING && !(st->group && st->calling)) {
            /* It waits for a retry (a member's call in flight is recorded
             * first: worker_resume_compensation()). */
            worker_stop_step(d, saga, st, "runtime.saga_cancelled");
        }
    }
    b = sg_json_new_object();
    sg_json_add_str(b, "status", worker_saga_status_name(saga->status));
    sg_json_add_str(b, "command_id", sg_json_string(sg_json_member(cmd->dec->doc, "id")));
    sg_json_add_str(b, "by", cmd->dec->by);
    worker_add_principal(b, cmd->dec);
    sg_json_add_str(b, "reason", cmd->dec->reason);
    worker_out_event(d, saga, "saga.cancelling", b);
    d->out->decided = "cancelled";
    worker_resume_compensation(d, saga, saga->nsteps - 1);
    worker_out_rows(d, saga);
}

/* The step a saga.approve / saga.reject names: by index or by name. */
static worker_step_t *named_step(worker_saga_t *saga, const sg_decoded_t *dec)
{
    for (int i = 0; i < saga->nsteps; i++)
        if (dec->step_name ? strcmp(saga->steps[i].name, dec->step_name) == 0 : dec->step == i)
            return &saga->steps[i];
    return NULL;
}

/* saga.approve and saga.reject of a step awaiting_approval: approved, its
 * step.execute emitted (not chained: its message id is the gated
 * command's own, so it goes through Kafka); or rejected, and the saga
 * compensates.  Anything else (no such saga or step, a step not waiting,
 * a saga not running) is answered with saga.command_refused. */
static void decide_approval(worker_dc_t *d, worker_saga_t *saga)
{
    const worker_dcmd_t *cmd = d->cmd;
    bool approve = cmd->dec->type == SG_CMD_APPROVE;
    const char *type = approve ? "saga.approve" : "saga.reject";
    const char *cid = sg_json_string(sg_json_member(cmd->dec->doc, "id"));
    worker_step_t *st;
    char which[80];
    sg_err_t err;

    if (cmd->dec->step_name)
        snprintf(which, sizeof(which), "%s", cmd->dec->step_name);
    else
        snprintf(which, sizeof(which), "%d", cmd->dec->step);
    if (!saga) {
        sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.saga.not_found",
                   "%s for saga %s, which does not exist", type, cmd->dec->saga_id);
        worker_out_refused(d, NULL, NULL, &err);
        return;
    }
    st = named_step(saga, cmd->dec);
    if (!st || saga->status != WORKER_SAGA_RUNNING || st->status != WORKER_STEP_AWAITING_APPROVAL) {
        if (!st)
            sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.step.not_awaiting_approval",
                       "%s of step %s of saga %s, which has no such step", type, which,
                       saga->saga_id);
        else
            sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.step.not_awaiting_approval",
                       "%s of step %s of saga %s, which is %s (the saga %s): only a step "
                       "awaiting_approval can be approved or rejected",
                       type, st->name, saga->saga_id, worker_step_status_name(st->status),
                       worker_saga_status_name(saga->status));
        worker_out_refused(d, saga, st, &err);
        return;
    }
    if (!authorized(d, saga, st))
        return;
    worker_out_control(d, saga, st->idx, "accepted", NULL);
    if (approve) {
        sg_json_t *b = worker_out_step_body(st);
        worker_set_step(d, saga, st, WORKER_STEP_APPROVED);
        sg_json_add_str(b, "by", cmd->dec->by);
        worker_add_principal(b, cmd->dec);
        sg_json_add_str(b, "reason", cmd->dec->reason);
        if (cid)
            sg_json_add_str(b, "command_id", cid);
        worker_out_event(d, saga, "step.approved", b);
        worker_out_command(d, saga, st->idx, false, 1, 0);
        d->out->follow.set = false;
        d->out->decided = "approved";
    } else {
        reject_step(d, saga, st, cmd->dec->by, cmd->dec->reason, cid);
        d->out->decided = "rejected";
    }
    worker_out_rows(d, saga);
}

/* step.approval_timeout: the gate's timer.  A step still waiting (same
 * generation) is rejected; a decided gate makes it stale. */
static void decide_gate_timeout(worker_dc_t *d, worker_saga_t *saga)
{
    const worker_dcmd_t *cmd = d->cmd;
    worker_step_t *st;

    if (!saga || cmd->dec->generation != saga->generation || cmd->dec->step >= saga->nsteps) {
        worker_out_stale(d, "the gate's saga or generation is gone");
        return;
    }
    st = &saga->steps[cmd->dec->step];
    if (saga->status != WORKER_SAGA_RUNNING || st->status != WORKER_STEP_AWAITING_APPROVAL) {
        worker_out_stale(d, "the approval gate was decided before its timeout");
        return;
    }
    reject_step(d, saga, st, NULL, NULL, NULL);
    d->out->decided = "timed_out";
    worker_out_rows(d, saga);
}

static void decide_one(worker_dc_t *d, worker_saga_t *saga);

static void decide_ready(worker_dc_t *d, worker_saga_t *saga)
{
    static const char *const types[] = {[SG_CMD_START] = "saga.start",
                                        [SG_CMD_EXECUTE] = "step.execute",
                                        [SG_CMD_COMPENSATE] = "step.compensate",
                                        [SG_CMD_RELEASE] = "saga.release",
                                        [SG_CMD_CANCEL] = "saga.cancel",
                                        [SG_CMD_APPROVE] = "saga.approve",
                                        [SG_CMD_REJECT] = "saga.reject",
                                        [SG_CMD_APPROVAL_TIMEOUT] = "step.approval_timeout",
                                        [SG_CMD_POISON] = "undecodable"};
    const worker_dcmd_t *cmd = d->cmd;
    worker_outcome_t *out = d->out;
    const char *outcome;

    if (cmd->answered) {
        /* Decided and answered once already (worker_txn.c, mark_answered):
         * neither acted on nor answered again. */
        worker_out_ignored(d, "control command already answered",
                           "its saga's history holds this command id (read again after a "
                           "hand-over, or sent twice)");
    } else {
        decide_one(d, saga);
    }
    if (out->unchained || out->defer)
        return; /* decided again later: counted then */
    /* Nothing said otherwise: a saga.start was stored, a step failed
     * before any call (deadline, bad arguments). */
    outcome = out->calls                       ? "called"
              : out->decided                   ? out->decided
              : cmd->dec->type == SG_CMD_START ? "started"
                                               : "failed";
    worker_out_count(d, SG_M_COMMANDS_CONSUMED, SG_LABELS(types[cmd->dec->type], outcome));
}

static void decide_one(worker_dc_t *d, worker_saga_t *saga)
{
    const worker_dcmd_t *cmd = d->cmd;

    switch (cmd->dec->type) {
    case SG_CMD_POISON:
        worker_out_dead_letter(d, NULL, -1, false, &cmd->dec->err, NULL);
        break;
    case SG_CMD_RELEASE:
        decide_release(d, saga);
        break;
    case SG_CMD_CANCEL:
        decide_cancel(d, saga);
        break;
    case SG_CMD_APPROVE:
    case SG_CMD_REJECT:
        decide_approval(d, saga);
        break;
    case SG_CMD_APPROVAL_TIMEOUT:
        decide_gate_timeout(d, saga);
        break;
    case SG_CMD_START:
        worker_decide_start(d, saga);
        break;
    case SG_CMD_EXECUTE:
    case SG_CMD_COMPENSATE:
        decide_step(d, saga);
        break;
    }
}

/* ---- outcomes of calls ------------------------------------------------- */

/* The envelope stored on the attempt row (docs/ARCHITECTURE.md). */
static void finish_attempt(worker_dc_t *d)
{
    const worker_dcmd_t *cmd = d->cmd;
    const worker_result_t *r = cmd->result;
    sg_json_t *env = sg_json_new_object(), *meta = sg_json_new_object();
    worker_op_t *op;

    sg_json_add_str(env, "status", worker_status_name(r->status));
    if (r->status != WORKER_OK) {
        sg_json_add_str(env, "error_code", r->err.code);
        sg_json_add_str(env, "class", sg_errclass_name(r->err.cls));
        sg_json_add_bool(env, "retriable", r->err.retriable);
        sg_json_add_str(env, "message", r->err.message);
        {
            char *action = worker_out_agent_action(d, &r->err);
            if (action)
                sg_json_add_str(env, "agent_action", action);
            else
                sg_json_add_null(env, "agent_action");
            free(action);
        }
    } else {
        sg_json_add_null(env, "error_code");
        sg_json_add_null(env, "class");
        sg_json_add_bool(env, "retriable", false);
        sg_json_add_null(env, "message");
        sg_json_add_null(env, "agent_action");
    }
    /* The answer as worker_result_data kept it: JSON that jsonb holds as
     * it is, never re-printed through cJSON's doubles (which rounded an
     * integer beyond 2^53 in the envelope while the step's result kept it). */
    if (r->data)
        sg_json_add_raw(env, "data", r->data);
    else
        sg_json_add_null(env, "data");
    sg_json_add_str(meta, "tool", cmd->call->tool->name);
    sg_json_add_int(meta, "attempt", cmd->call->attempt);
    sg_json_add_int(meta, "latency_ms", r->latency_ms);
    sg_json_add_str(meta, "idempotency_key", cmd->call->idem_key);
    if (r->retry_after_ms)
        sg_json_add_int(meta, "retry_after_ms", r->retry_after_ms);
    if (r->status != WORKER_OK)
        sg_json_add_bool(meta, "maybe_applied", r->status == WORKER_TIMEOUT || r->maybe_applied);
    if (r->nothing_to_undo)
        sg_json_add_bool(meta, "nothing_to_undo", true);
    sg_json_add_node(env, "metadata", meta);
    op = worker_out_op(d, WORKER_OP_ATTEMPT_DONE, cmd->dec->saga_id);
    op->u.done.id = cmd->attempt_id;
    op->u.done.status = r->status;
    op->u.done.cls = r->err.cls;
    if (r->status != WORKER_OK)
        op->u.done.error_code = sg_xstrdup(r->err.code);
    op->u.done.latency_ms = r->latency_ms;
    op->u.done.envelope = sg_json_print(env);
    sg_json_destroy(env);
}

/* A retry of (step, phase) after attempt: the timer, the event and the
 * budget.  Returns false (err set to why) when no retry is left. */
static bool schedule_retry(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, bool comp,
                           sg_err_t *why)
{
    const worker_dcmd_t *cmd = d->cmd;
    const worker_rules_t *rules = d->rules;
    const worker_result_t *r = cmd->result;
    int attempt = cmd->dec->attempt;
    /* The policy of the tool that was called: its retry, or its
     * compensate_retry when it ran as a compensation. */
    const sg_tool_t *tool = cmd->call->tool;
    const sg_policy_t *def = comp ? rules->comp_retry : rules->retry;
    const sg_policy_t *own = tool ? (comp ? &tool->comp_retry : &tool->retry) : NULL;
    int64_t budget = saga->retry_budget >= 0 ? saga->retry_budget : rules->budget_ms;
    sg_backoff_t b;
    uint64_t delay;
    sg_json_t *body;
    char at[40];
    int max;

    max = own && own->max_attempts ? own->max_attempts : def->max_attempts;
    b.base_ms = (uint64_t)(own && own->base_ms ? own->base_ms : def->base_ms);
    b.cap_ms = (uint64_t)(own && own->cap_ms ? own->cap_ms : def->cap_ms);
    if (attempt >= max) {
        sg_err_set(why, SG_ERRCLASS_POISON,
                   comp ? "runtime.compensation_exhausted" : "runtime.budget.attempts_exhausted",
                   "%s of step %s failed %d times (limit %d); last error %s: %s",
                   comp ? "compensation" : "attempt", st->name, attempt, max, r->err.code,
                   r->err.message);
        return false;
    }
    delay =
        sg_backoff_delay_ms(&b, (unsigned)(attempt - 1), (uint64_t)r->retry_after_ms, d->in->rng);
    /* A saga's own retry_budget_ms binds whatever it is: 0 allows no retry
     * at all, not even one whose wait drew 0 (the schema's "total time the
     * saga may spend waiting on retries": none).  Only the config's
     * retry.budget_ms of 0 means no budget. */
    if (!comp && (saga->retry_budget >= 0 || budget > 0) &&
        (budget == 0 || saga->retry_spent + (int64_t)delay > budget)) {
        sg_err_set(why, SG_ERRCLASS_POISON, "runtime.budget.retry_exhausted",
                   "the saga's retry budget of %lld ms is spent (%lld ms used, next wait %llu "
                   "ms); last error %s: %s",
                   (long long)budget, (long long)saga->retry_spent, (unsigned long long)delay,
                   r->err.code, r->err.message);
        return false;
    }
    if (!comp)
        saga->retry_spent += (int64_t)delay;
    saga->dirty = true;
    worker_out_count(d, SG_M_RETRIES_SCHEDULED, SG_LABELS(r->err.code));
    if (comp)
        worker_out_count(d, SG_M_COMPENSATIONS, SG_LABELS("retry"));
    worker_out_command(d, saga, st->idx, comp, attempt + 1, delay > 0 ? (int64_t)delay : 0);
    body = worker_out_step_body(st);
    sg_json_add_str(body, "phase", comp ? "compensate" : "forward");
    sg_json_add_int(body, "attempt", attempt + 1);
    sg_json_add_int(body, "delay_ms", (int64_t)delay);
    sg_time_iso(at, sizeof(at), d->in->now_ms + (int64_t)delay);
    sg_json_add_str(body, "retry_at", at);
    worker_out_add_error(body, &r->err);
    worker_out_event(d, saga, "step.retry_scheduled", body);
    d->out->stats.retries++;
    return true;
}

/* A failed call: a retry while the error is retriable and attempts and
 * budget are left; else the step fails (a forward step's poison, which
 * includes exhausted retries, is dead-lettered) or its compensation does. */
static void on_failure(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, bool comp)
{
    const worker_result_t *r = d->cmd->result;
    const sg_err_t *err = &r->err;
    sg_err_t why;

    if (comp && (r->status == WORKER_TIMEOUT || r->maybe_applied))
        comp_may_have_run(saga, st);
    if (err->retriable) {
        if (schedule_retry(d, saga, st, comp, &why))
            return;
        err = &why;
    }
    if (comp)
        worker_comp_failed(d, saga, st, err);
    else
        worker_step_failed(d, saga, st, err, err->cls == SG_ERRCLASS_POISON,
                           r->status == WORKER_TIMEOUT || r->maybe_applied);
}

/* The call's metrics and log line, whatever the saga does with its outcome. */
static void count_call(worker_dc_t *d)
{
    const worker_dcmd_t *cmd = d->cmd;
    const char *tool = cmd->call->tool->name;
    const worker_result_t *r = cmd->result;
    bool comp = cmd->dec->type == SG_CMD_COMPENSATE;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    d->out->stats.calls++;
    worker_out_observe(d, SG_M_STEP_DURATION, SG_LABELS(tool), (double)r->latency_ms / 1000.0);
    if (comp && r->status == WORKER_OK)
        worker_out_count(d, SG_M_COMPENSATIONS, SG_LABELS("ok"));
    else if (!comp)
        worker_out_count(
            d, SG_M_STEPS,
            SG_LABELS(tool, r->status == WORKER_OK ? "ok" : sg_errclass_name(r->err.cls)));
    ctx.saga_id = cmd->dec->saga_id;
    ctx.step = cmd->call->step_name;
    ctx.attempt = cmd->dec->attempt;
    if (r->status != WORKER_OK) {
        ctx.error_code = r->err.code;
        worker_out_log(d, SG_LOG_INFO, &ctx, "%s call failed (%s): %s",
                       comp ? "compensation" : "step", sg_errclass_name(r->err.cls),
                       r->err.message);
    } else {
        worker_out_log(d, SG_LOG_DEBUG, &ctx, "%s call succeeded in %lld ms",
                       comp ? "compensation" : "step", (long long)r->latency_ms);
    }
}

static void decide_returned(worker_dc_t *d, worker_saga_t *saga)
{
    const worker_dcmd_t *cmd = d->cmd;
    bool comp = cmd->dec->type == SG_CMD_COMPENSATE, ok = cmd->result->status == WORKER_OK;
    worker_step_t *st;

    finish_attempt(d);
    count_call(d);
    if (!saga || saga->generation != cmd->dec->generation || cmd->dec->step >= saga->nsteps) {
        worker_out_stale(d, "the saga moved on while the call ran");
        return;
    }
    st = &saga->steps[cmd->dec->step];
    if ((comp ? st->comp_attempts : st->attempts) != cmd->dec->attempt ||
        st->status != (comp ? WORKER_STEP_COMPENSATING : WORKER_STEP_RUNNING)) {
        worker_out_stale(d, "the step moved on while the call ran");
        return;
    }
    if (!comp) { /* its outcome is recorded now, whatever it leads to */
        worker_set_calling(d, saga, st, false);
        st->dirty = true;
    }
    if (comp && ok) {
        sg_json_t *b = worker_out_step_body(st);
        if (cmd->result->nothing_to_undo)
            sg_json_add_bool(b, "nothing_to_undo", true);
        worker_set_step(d, saga, st, WORKER_STEP_COMPENSATED);
        worker_out_event(d, saga, "step.compensated", b);
        /* The rest of its group first (the group's span again: its
         * members are undone by done_seq, not by index). */
        if (saga->status == WORKER_SAGA_RUNNING)
            worker_member_undone(d, saga, st);
        else
            worker_next_compensation(d, saga,
                                     st->group ? worker_group_last(saga, st->idx) : st->idx - 1);
    } else if (ok) {
        worker_step_succeeded(d, saga, st);
    } else if (!comp && saga->status != WORKER_SAGA_RUNNING) {
        /* A member's call that ran while its group stopped: recorded as
         * it ended, never retried. */
        worker_step_failed(d, saga, st, &cmd->result->err,
                           cmd->result->err.cls == SG_ERRCLASS_POISON,
                           cmd->result->status == WORKER_TIMEOUT || cmd->result->maybe_applied);
    } else {
        on_failure(d, saga, st, comp);
    }
    worker_out_rows(d, saga);
}

void worker_decide(const worker_rules_t *rules, const worker_input_t *in, worker_saga_t *saga,
                   worker_outcome_t *out)
{
    worker_dc_t d = {rules, in, in->cmd, out, NULL, -1};

    memset(out, 0, sizeof(*out));
    if (in->returned)
        decide_returned(&d, saga);
    else
        decide_ready(&d, saga);
    /* Its rows copied it; nothing may point at it past the decision. */
    for (int i = 0; saga && d.action && i < saga->nsteps; i++)
        if (saga->steps[i].action == d.action)
            saga->steps[i].action = NULL;
    free(d.action);
}
