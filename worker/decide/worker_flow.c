/* The saga's flow once a decision knows what happened (docs/WORKER.md,
 * "Parallel groups"; docs/ARCHITECTURE.md, "The saga state machine"):
 * every status change (worker_set_step, worker_set_saga), a step that
 * succeeded or failed for good, compensation in reverse order (a parallel
 * group's members by the order of their outcomes), the hold of a
 * dead-lettered saga, a parallel group's policies, and the terminal
 * events.  worker_saga.c decides each command and call outcome and comes
 * here for what follows; nothing here calls back up.
 *
 * Pure (worker_decide.h), like the decisions. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_text.h"
#include "sagad/sg_ref.h"
#include "worker_decide.h"

/* Every status change goes through these two: logged at debug level, and
 * asserted to be a transition of worker_state.c's tables (so the tables,
 * and docs/STATES.md printed from them, are what the code does). */
void worker_set_step(worker_dc_t *d, const worker_saga_t *saga, worker_step_t *st,
                     worker_step_status_t to)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    assert(worker_step_transition_ok(st->status, to));
    ctx.saga_id = saga->saga_id;
    ctx.step = st->name;
    worker_out_log(d, SG_LOG_DEBUG, &ctx, "step %d: %s -> %s", st->idx,
                   worker_step_status_name(st->status), worker_step_status_name(to));
    st->status = to;
    if (to != WORKER_STEP_RUNNING)
        st->calling = false;
    st->dirty = true;
}

void worker_set_calling(worker_dc_t *d, const worker_saga_t *saga, worker_step_t *st, bool calling)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    /* An outcome for a step not marked calling (a row written by a worker
     * of before 0017, whose call was in flight at the upgrade) changes
     * nothing: tolerated, not asserted. */
    if (!calling && !st->calling)
        return;
    assert(st->status == WORKER_STEP_RUNNING && worker_calling_transition_ok(st->calling, calling));
    ctx.saga_id = saga->saga_id;
    ctx.step = st->name;
    worker_out_log(d, SG_LOG_DEBUG, &ctx, "step %d, its call: %s", st->idx,
                   calling ? (st->calling ? "in flight again" : "in flight") : "recorded");
    st->calling = calling;
    st->dirty = true;
}

void worker_set_saga(worker_dc_t *d, worker_saga_t *saga, worker_saga_status_t to)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    assert(worker_saga_transition_ok(saga->status, to));
    ctx.saga_id = saga->saga_id;
    worker_out_log(d, SG_LOG_DEBUG, &ctx, "saga: %s -> %s", worker_saga_status_name(saga->status),
                   worker_saga_status_name(to));
    saga->status = to;
    saga->dirty = true;
}

static bool resolve_output(worker_dc_t *d, worker_saga_t *saga, sg_json_t *body, sg_err_t *err);

/* The failure that stopped the saga: what run_health's blocking_failure
 * names (a compensation that failed first), or NULL. */
static const worker_step_t *blocking_step(const worker_saga_t *saga)
{
    const worker_step_t *block = NULL;

    for (int i = 0; i < saga->nsteps; i++) {
        const worker_step_t *st = &saga->steps[i];
        if (st->status == WORKER_STEP_COMPENSATION_FAILED)
            return st;
        if (!block && st->policy != WORKER_POLICY_BEST_EFFORT &&
            (st->status == WORKER_STEP_FAILED || st->status == WORKER_STEP_UNKNOWN))
            block = st;
    }
    return block;
}

/* The agent_action a terminal event carries: the blocking failure's,
 * the tool's own when it sent one, else its code's default. */
static void add_terminal_action(worker_dc_t *d, const worker_saga_t *saga, sg_json_t *body)
{
    const worker_step_t *st = blocking_step(saga);
    const char *action;

    if (!st)
        return;
    action = d->action && d->action_step == st->idx ? d->action
             : st->done_action                      ? st->done_action
                                                    : sg_err_agent_action(st->error_code);
    if (action)
        sg_json_add_str(body, "agent_action", action);
}

/* Records the agent_action of step st's failure with err: on the step's
 * row, and for the events this decision emits. */
static const char *fail_action(worker_dc_t *d, worker_step_t *st, const sg_err_t *err)
{
    free(d->action);
    d->action = worker_out_agent_action(d, err);
    d->action_step = st->idx;
    st->action = d->action;
    return d->action;
}

/* A completed saga whose best_effort groups did not all succeed says
 * which members did not, and which steps were skipped because a step they
 * reference did not: "partial": [{group (members only), step_name,
 * status, error_code}]. */
static void add_partial(const worker_saga_t *saga, sg_json_t *body)
{
    sg_json_t *list = NULL;

    for (int i = 0; i < saga->nsteps; i++) {
        const worker_step_t *st = &saga->steps[i];
        sg_json_t *e;
        if (st->status == WORKER_STEP_SUCCEEDED ||
            (!st->group && strcmp(st->error_code, "runtime.skipped_dependency_failed") != 0))
            continue;
        if (!list)
            list = sg_json_new_array();
        e = sg_json_new_object();
        if (st->group)
            sg_json_add_str(e, "group", st->group);
        sg_json_add_str(e, "step_name", st->name);
        sg_json_add_str(e, "status", worker_step_status_name(st->status));
        if (st->error_code[0])
            sg_json_add_str(e, "error_code", st->error_code);
        sg_json_append(list, e);
    }
    if (list)
        sg_json_add_node(body, "partial", list);
}

static void terminal(worker_dc_t *d, worker_saga_t *saga, worker_saga_status_t to)
{
    sg_json_t *b = sg_json_new_object();
    sg_err_t err;
    const char *status = worker_saga_status_name(to);
    char type[32];

    worker_set_saga(d, saga, to);
    sg_json_add_str(b, "status", status);
    sg_json_add_node(b, "run_health", worker_run_health(saga));
    if (to != WORKER_SAGA_COMPLETED)
        add_terminal_action(d, saga, b);
    else
        add_partial(saga, b);
    /* Every step succeeded: an output that names no value does not undo
     * them; the event says what is wrong with it instead. */
    if (to == WORKER_SAGA_COMPLETED && !resolve_output(d, saga, b, &err)) {
        sg_json_t *e = sg_json_new_object();
        sg_json_add_null(b, "output");
        sg_json_add_str(e, "error_code", err.code);
        sg_json_add_str(e, "message", err.message);
        sg_json_add_node(b, "output_error", e);
    }
    snprintf(type, sizeof(type), "saga.%s", status);
    worker_out_event(d, saga, type, b);
    worker_out_count(d, SG_M_SAGAS_FINISHED, SG_LABELS(status));
    if (to == WORKER_SAGA_COMPLETED)
        d->out->stats.completed++;
    else if (to == WORKER_SAGA_COMPENSATED)
        d->out->stats.compensated++;
    else if (to == WORKER_SAGA_CANCELLED)
        d->out->stats.cancelled++;
    else
        d->out->stats.failed++;
}

/* ---- compensation ------------------------------------------------------ */

/* Starts undoing step j when its effect stands or may stand (succeeded,
 * or unknown) and it has a compensation: true.  Without one, a succeeded
 * step is skipped, and an unknown one stays unknown: its effect may
 * stand, and nothing can undo it. */
static bool undo_step(worker_dc_t *d, worker_saga_t *saga, int j)
{
    worker_step_t *st = &saga->steps[j];

    if (st->status != WORKER_STEP_SUCCEEDED && st->status != WORKER_STEP_UNKNOWN)
        return false;
    if (st->comp && strcmp(st->comp, "null") != 0) {
        worker_set_step(d, saga, st, WORKER_STEP_COMPENSATING);
        st->comp_attempts = 0;
        worker_out_command(d, saga, j, true, 1, 0);
        return true;
    }
    if (st->status == WORKER_STEP_SUCCEEDED)
        worker_set_step(d, saga, st, WORKER_STEP_SKIPPED);
    return false;
}

/* Starts the compensation of the highest step at or below from whose
 * effect stands or may stand (the step that failed may have taken effect,
 * and is compensated first); a parallel group's members in reverse order
 * of their outcomes (done_seq), the order their effects took place.  All
 * done: the saga is compensated (cancelled when a saga.cancel started
 * it). */
void worker_next_compensation(worker_dc_t *d, worker_saga_t *saga, int from)
{
    bool passed[SG_MAX_STEPS] = {false};

    for (int j = from; j >= 0; j--) {
        if (saga->steps[j].group) {
            int first = worker_group_first(saga, j), k;
            while ((k = worker_group_next_undo(saga, first, j, passed)) >= 0) {
                if (undo_step(d, saga, k))
                    return;
                passed[k] = true;
            }
            j = first;
        } else if (undo_step(d, saga, j)) {
            return;
        }
    }
    terminal(d, saga,
             saga->status == WORKER_SAGA_CANCELLING ? WORKER_SAGA_CANCELLED
                                                    : WORKER_SAGA_COMPENSATED);
}

/* The compensation begins once no step runs: a parallel group's member
 * whose call is in flight, or that waits for a retry, is recorded first
 * (its outcome when its call returns; stopped, ending unknown, when its
 * retry or its redelivered command comes: decide_step()).  Only members
 * can still run here: a saga's other steps run one at a time and a
 * failure or a cancel is decided between them.  from: where a
 * compensation starts (a saga.cancel's starts at the top). */
void worker_resume_compensation(worker_dc_t *d, worker_saga_t *saga, int from)
{
    /* A best_effort member being undone while the saga ran (a cancel came
     * meanwhile) is recorded first too: one compensation at a time. */
    for (int i = 0; i < saga->nsteps; i++)
        if (saga->steps[i].status == WORKER_STEP_RUNNING ||
            saga->steps[i].status == WORKER_STEP_COMPENSATING)
            return;
    worker_next_compensation(d, saga,
                             saga->status == WORKER_SAGA_CANCELLING ? saga->nsteps - 1 : from);
}

/* A running step stops before its next attempt (its group or its saga
 * stopped): no new call.  Its last attempt may have taken effect, so it
 * ends unknown with code, and is compensated; its retry's timer finds it
 * so and is stale. */
void worker_stop_step(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, const char *code)
{
    worker_set_step(d, saga, st, WORKER_STEP_UNKNOWN);
    st->effect = st->done_effect = "possible";
    snprintf(st->error_code, sizeof(st->error_code), "%s", code);
    st->done_seq = saga->seq;
}

/* Step st is never called: skipped, with the code that says why. */
static void skip_step(worker_dc_t *d, const worker_saga_t *saga, worker_step_t *st,
                      const char *code)
{
    worker_set_step(d, saga, st, WORKER_STEP_SKIPPED);
    snprintf(st->error_code, sizeof(st->error_code), "%s", code);
}

/* What can no longer run after step failed_step is skipped, never
 * called: every pending step after it (its group), with the code that
 * says why, and its group's members not called yet. */
static void skip_rest(worker_dc_t *d, worker_saga_t *saga, int failed_step)
{
    int last = worker_group_last(saga, failed_step);

    for (int j = worker_group_first(saga, failed_step); j < saga->nsteps; j++) {
        worker_step_t *st = &saga->steps[j];
        bool sibling = j <= last;
        if (st->status != WORKER_STEP_PENDING &&
            !(sibling &&
              (st->status == WORKER_STEP_AWAITING_APPROVAL || st->status == WORKER_STEP_APPROVED)))
            continue;
        skip_step(d, saga, st,
                  sibling ? "runtime.group_stopped" : "runtime.skipped_dependency_failed");
    }
    /* A sibling waiting for a retry stops at once; one whose call is in
     * flight is recorded when the call returns (worker_resume_compensation()). */
    for (int j = worker_group_first(saga, failed_step); j <= last; j++)
        if (saga->steps[j].status == WORKER_STEP_RUNNING && !saga->steps[j].calling)
            worker_stop_step(d, saga, &saga->steps[j], "runtime.group_stopped");
}

/* A fail_fast group that stopped publishes group.finished, as the other
 * policies do, once its last member has ended: at the stop when no call
 * of it is in flight, else when the last one is recorded. */
static void fail_fast_finished(worker_dc_t *d, worker_saga_t *saga, int idx)
{
    int first = worker_group_first(saga, idx), last = worker_group_last(saga, idx);

    if (saga->steps[idx].policy == WORKER_POLICY_FAIL_FAST &&
        saga->status == WORKER_SAGA_COMPENSATING && worker_group_open(saga, first, last) == 0)
        worker_out_event(d, saga, "group.finished", worker_group_manifest(saga, first, last));
}

void worker_begin_compensation(worker_dc_t *d, worker_saga_t *saga, int failed_step,
                               const sg_err_t *err)
{
    sg_json_t *b = worker_out_step_body(&saga->steps[failed_step]);

    worker_set_saga(d, saga, WORKER_SAGA_COMPENSATING);
    worker_out_add_error(b, err);
    add_terminal_action(d, saga, b);
    worker_out_event(d, saga, "saga.compensating", b);
    skip_rest(d, saga, failed_step);
    fail_fast_finished(d, saga, failed_step);
    worker_resume_compensation(d, saga, worker_group_last(saga, failed_step));
}

/* ---- parallel groups ---------------------------------------------------- */

/* The next step after step idx (its group) to run, or the saga is
 * complete.  A replay keeps a step whose effect stands as succeeded, and
 * it is passed over (docs/DLQ.md). */
static void continue_after(worker_dc_t *d, worker_saga_t *saga, int idx)
{
    for (int j = worker_group_last(saga, idx) + 1; j < saga->nsteps; j++)
        if (saga->steps[j].status == WORKER_STEP_PENDING) {
            worker_out_run_step(d, saga, j);
            return;
        }
    terminal(d, saga, WORKER_SAGA_COMPLETED);
}

/* A best_effort group's member that ended unknown may have taken effect
 * (a charge whose answer timed out): the saga goes on past a partial
 * group, so that effect would stand for good.  It is undone before the
 * group finishes, while the saga runs: the unknown member with a
 * compensation whose outcome came last starts compensating; true when
 * one did (the group finishes when its compensation has ended).  A member
 * without a compensation stays unknown: nothing can undo it, and the
 * saga's partial list names it. */
static bool undo_unknown_member(worker_dc_t *d, worker_saga_t *saga, int first, int last)
{
    const worker_step_t *pick = NULL;

    for (int i = first; i <= last; i++) {
        const worker_step_t *st = &saga->steps[i];
        if (st->status == WORKER_STEP_UNKNOWN && st->comp && strcmp(st->comp, "null") != 0 &&
            (!pick || st->done_seq > pick->done_seq))
            pick = st;
    }
    return pick && undo_step(d, saga, pick->idx);
}

/* Every member of the group [first, last] has ended: group.finished with
 * its manifest; then the saga goes on (every member succeeded, or a
 * best_effort group, once its unknown members are undone) or compensates,
 * the group's effects first. */
static void group_finished(worker_dc_t *d, worker_saga_t *saga, int first, int last)
{
    sg_json_t *b;
    const worker_step_t *failed = NULL;
    sg_err_t err;

    if (saga->steps[first].policy == WORKER_POLICY_BEST_EFFORT &&
        undo_unknown_member(d, saga, first, last))
        return;
    b = worker_group_manifest(saga, first, last);
    worker_out_event(d, saga, "group.finished", b);
    if (saga->steps[first].policy == WORKER_POLICY_BEST_EFFORT ||
        !worker_group_failed(saga, first, last)) {
        continue_after(d, saga, last);
        return;
    }
    /* all_or_nothing: the member that failed first is the saga's cause. */
    for (int i = first; i <= last; i++) {
        const worker_step_t *st = &saga->steps[i];
        if ((st->status == WORKER_STEP_FAILED || st->status == WORKER_STEP_UNKNOWN) &&
            (!failed || st->done_seq < failed->done_seq))
            failed = st;
    }
    if (!failed)
        failed = &saga->steps[first];
    sg_err_set(&err, SG_ERRCLASS_PERMANENT,
               failed->error_code[0] ? failed->error_code : "runtime.group_stopped",
               "member %s of all_or_nothing group %s failed: the group is undone", failed->name,
               failed->group);
    worker_begin_compensation(d, saga, failed->idx, &err);
}

/* An all_or_nothing group one of whose members failed will be undone,
 * whatever a person says: its members at their approval gate, approved
 * but not called, or gated and not yet at their gate are skipped
 * (runtime.group_stopped), so nobody is asked about a call that would be
 * undone at once and the group need not wait up to a gate's timeout.
 * Members running (in flight or waiting for a retry) run on, as the
 * policy says. */
static void stop_gates(worker_dc_t *d, worker_saga_t *saga, int first, int last)
{
    for (int i = first; i <= last; i++) {
        worker_step_t *m = &saga->steps[i];
        if (m->status == WORKER_STEP_AWAITING_APPROVAL || m->status == WORKER_STEP_APPROVED ||
            (m->status == WORKER_STEP_PENDING && m->approval))
            skip_step(d, saga, m, "runtime.group_stopped");
    }
}

/* A member's forward outcome was recorded (err: its failure, NULL when it
 * succeeded) while its saga runs.  fail_fast: its failure stops the group
 * at once (no new call; calls in flight are recorded) and the saga
 * compensates.  Otherwise the group waits for its last member. */
static void member_ended(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st,
                         const sg_err_t *err)
{
    int first = worker_group_first(saga, st->idx), last = worker_group_last(saga, st->idx);

    if (err && st->policy == WORKER_POLICY_FAIL_FAST) {
        worker_begin_compensation(d, saga, st->idx, err);
        return;
    }
    if (err && st->policy == WORKER_POLICY_ALL_OR_NOTHING)
        stop_gates(d, saga, first, last);
    if (worker_group_open(saga, first, last) == 0)
        group_finished(d, saga, first, last);
}

void worker_skip_dependent(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st,
                           const sg_err_t *err)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    skip_step(d, saga, st, err->code);
    ctx.saga_id = saga->saga_id;
    ctx.step = st->name;
    ctx.error_code = st->error_code;
    worker_out_log(d, SG_LOG_INFO, &ctx, "skipped: %s", err->message);
    d->out->decided = "skipped";
    if (st->group)
        member_ended(d, saga, st, err);
    else
        continue_after(d, saga, st->idx);
}

void worker_member_undone(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st)
{
    group_finished(d, saga, worker_group_first(saga, st->idx), worker_group_last(saga, st->idx));
}

void worker_comp_failed(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, const sg_err_t *err)
{
    sg_json_t *b = worker_out_step_body(st);

    worker_set_step(d, saga, st, WORKER_STEP_COMPENSATION_FAILED);
    worker_out_count(d, SG_M_COMPENSATIONS, SG_LABELS("failed"));
    snprintf(st->error_code, sizeof(st->error_code), "%s", err->code);
    worker_out_add_error(b, err);
    if (fail_action(d, st, err))
        sg_json_add_str(b, "agent_action", d->action);
    worker_out_event(d, saga, "step.compensation_failed", b);
    /* The terminal event is the saga's last: consumers stop reading there. */
    worker_out_dead_letter(d, saga, st->idx, true, err, NULL);
    if (saga->status == WORKER_SAGA_RUNNING) {
        /* The undo of a best_effort group's unknown member: its dead
         * letter is for an operator; the group is partial and the saga
         * goes on, as it would have without the undo. */
        worker_member_undone(d, saga, st);
        return;
    }
    terminal(d, saga, WORKER_SAGA_FAILED);
}

/* A forward step that failed as poison: its dead letter, then either the
 * compensation at once or, with worker.dead_letter_hold_ms, the hold: the
 * saga waits `held` with nothing undone, so an operator can replay the
 * step, and a saga.release timer of this generation starts the
 * compensation when the hold ends (a replay bumps the generation, which
 * makes that timer stale). */
static void step_dead_letter(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st,
                             const sg_err_t *err)
{
    int64_t hold_ms = d->rules->hold_ms;
    char until[40], id[SG_SAGA_ID_MAX + 32];
    sg_json_t *c;

    if (hold_ms <= 0) {
        worker_out_dead_letter(d, saga, st->idx, false, err, NULL);
        worker_begin_compensation(d, saga, st->idx, err);
        return;
    }
    sg_time_iso(until, sizeof(until), d->in->now_ms + hold_ms);
    worker_out_dead_letter(d, saga, st->idx, false, err, until);
    worker_set_saga(d, saga, WORKER_SAGA_HELD);
    snprintf(id, sizeof(id), "cmd:%s:release:g%d", saga->saga_id, saga->generation);
    c = worker_out_message_new("saga.release", id, saga->saga_id);
    sg_json_add_int(c, "generation", saga->generation);
    worker_out_emit(d, d->rules->topic_internal, saga->traceparent, c, hold_ms);
    d->out->stats.held++;
}

/* A forward step failed for good: step.failed, then its dead letter (and
 * maybe the hold) or the compensation of the steps before it.  unknown:
 * its last attempt may have taken effect, so the step ends unknown and its
 * own compensation runs first. */
void worker_step_failed(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st, const sg_err_t *err,
                        bool dead_lettered, bool unknown)
{
    sg_json_t *b = worker_out_step_body(st);

    worker_set_step(d, saga, st, unknown ? WORKER_STEP_UNKNOWN : WORKER_STEP_FAILED);
    if (unknown)
        st->effect = st->done_effect = "possible";
    snprintf(st->error_code, sizeof(st->error_code), "%s", err->code);
    if (d->cmd->dec->type == SG_CMD_EXECUTE) /* not a step refused at its gate: never called */
        sg_json_add_int(b, "attempt", d->cmd->dec->attempt);
    sg_json_add_str(b, "outcome", unknown ? "unknown" : "failed");
    worker_out_add_error(b, err);
    if (fail_action(d, st, err))
        sg_json_add_str(b, "agent_action", d->action);
    worker_out_event(d, saga, "step.failed", b);
    st->done_seq = saga->seq;
    if (st->group) {
        /* A member is never held: its siblings run on.  Its poison is
         * dead-lettered all the same, and its group's policy decides. */
        if (dead_lettered)
            worker_out_dead_letter(d, saga, st->idx, false, err, NULL);
        if (saga->status == WORKER_SAGA_RUNNING) {
            member_ended(d, saga, st, err);
        } else {
            fail_fast_finished(d, saga, st->idx);
            worker_resume_compensation(d, saga, worker_group_last(saga, st->idx));
        }
    } else if (dead_lettered) {
        step_dead_letter(d, saga, st, err);
    } else {
        worker_begin_compensation(d, saga, st->idx, err);
    }
}

/* The saga's output, its references resolved, into body's "output" and
 * the saga row; false (err set) when a reference names no value. */
static bool resolve_output(worker_dc_t *d, worker_saga_t *saga, sg_json_t *body, sg_err_t *err)
{
    sg_ref_budget_t budget = worker_ref_budget(d->rules);
    sg_json_t *spec, *ctx, *out;

    if (!saga->output_spec)
        return true;
    spec = sg_json_parse(saga->output_spec, strlen(saga->output_spec), NULL, NULL);
    ctx = worker_saga_context(saga);
    out = spec ? sg_ref_resolve(spec, ctx, "$.output", &budget, err) : NULL;
    sg_json_destroy(ctx);
    sg_json_destroy(spec);
    if (!out)
        return false;
    free(saga->output);
    saga->output = sg_json_print(out); /* the saga op takes it (worker_out_rows) */
    saga->dirty = true;
    sg_json_add_node(body, "output", out);
    return true;
}

/* The step's result in its step.succeeded event, up to the configured
 * size: a larger one is named, not sent (the step row keeps it whole). */
static void add_result(worker_dc_t *d, sg_json_t *body, const char *result)
{
    size_t len = strlen(result);

    if (len <= d->rules->event_result_max) {
        sg_json_add_raw(body, "result", result);
        return;
    }
    sg_json_add_null(body, "result");
    sg_json_add_bool(body, "result_truncated", true);
    sg_json_add_int(body, "result_bytes", (int64_t)len);
}

void worker_step_succeeded(worker_dc_t *d, worker_saga_t *saga, worker_step_t *st)
{
    const worker_result_t *r = d->cmd->result;
    sg_json_t *b = worker_out_step_body(st);

    worker_set_step(d, saga, st, WORKER_STEP_SUCCEEDED);
    st->result = r->data ? r->data : "null"; /* JSON jsonb holds (worker_result_data) */
    st->done_result = st->result;            /* for references decided later in this transaction */
    st->effect = st->done_effect = "known";
    sg_json_add_int(b, "attempt", d->cmd->dec->attempt);
    add_result(d, b, st->result);
    worker_out_event(d, saga, "step.succeeded", b);
    st->done_seq = saga->seq;
    if (!st->group)
        continue_after(d, saga, st->idx);
    else if (saga->status == WORKER_SAGA_RUNNING)
        member_ended(d, saga, st, NULL);
    else { /* its group stopped while its call ran: undone with the rest */
        fail_fast_finished(d, saga, st->idx);
        worker_resume_compensation(d, saga, worker_group_last(saga, st->idx));
    }
}
