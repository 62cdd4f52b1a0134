/* The parallel group decisions (worker_saga.c, worker_group.c), pure: the
 * fixture's four steps with note (1) and pay (2), or hold, note and pay
 * (0-2), made members of a group; the effects and rows each decision
 * returns. */
#include <stdio.h>
#include <string.h>

#include "saga_fixture.h"
#include "unit.h"

/* Steps first..last form group "g" with policy p. */
static void group(fx_t *fx, int first, int last, worker_policy_t p)
{
    for (int i = first; i <= last; i++) {
        fx->saga.steps[i].group = "g";
        fx->saga.steps[i].policy = p;
    }
}

static void expect_effects(fx_t *fx, const char *want, const char *what)
{
    char got[512];

    fx_effects(&fx->out, got, sizeof(got));
    cr_expect_str_eq(got, want, "%s: effects %s", what, got);
}

static void expect_steps(fx_t *fx, const char *want, const char *what)
{
    char after[NSTEPS + 1];

    for (int i = 0; i < NSTEPS; i++)
        after[i] = fx_step_letters[fx->saga.steps[i].status];
    after[NSTEPS] = '\0';
    cr_expect_str_eq(after, want, "%s: steps after", what);
}

/* The step before a group succeeded: every member's step.execute at
 * once, none chained (a member's call leaves its saga's queue; a chained
 * one would hold it). */
Test(group, a_group_starts_every_pending_member_at_once_and_chains_none)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "rppp", (int[]){1, 0, 0, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx_returned(&fx, false, 0, 1, WORKER_OK, SG_ERRCLASS_NONE, false);
    fx_decide(&fx, true);
    expect_effects(&fx, "step.succeeded,step.execute,step.execute", "group start");
    cr_expect_eq(fx_nth_op(&fx.out, WORKER_OP_MESSAGE, 1)->u.msg.step, 1);
    cr_expect_eq(fx_nth_op(&fx.out, WORKER_OP_MESSAGE, 2)->u.msg.step, 2);
    cr_expect_not(fx.out.follow.set, "no member is chained");
    fx_fini(&fx);
}

/* A member's call is detached from its saga's queue; a step's is not. */
Test(group, a_members_call_runs_out_of_the_queue)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "sppp", (int[]){1, 0, 0, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_ALL_OR_NOTHING);
    fx_command(&fx, SG_CMD_EXECUTE, 2, 1, 1);
    fx_decide(&fx, true);
    cr_expect(fx.out.calls);
    cr_expect(fx.out.call.detach, "a member's call is detached");
    cr_expect(fx.saga.steps[2].calling, "its call may be in flight");
    fx_fini(&fx);

    fx_init(&fx);
    fx_saga(&fx, 'R', "sppp", (int[]){1, 0, 0, 0}, NULL);
    fx_command(&fx, SG_CMD_EXECUTE, 1, 1, 1);
    fx_decide(&fx, true);
    cr_expect(fx.out.calls);
    cr_expect_not(fx.out.call.detach, "a step's call keeps its saga's queue");
    fx_fini(&fx);
}

/* best_effort: a member fails while its sibling already succeeded; the
 * group ends partial (group.finished) and the next step runs. */
Test(group, best_effort_ends_partial_and_the_saga_goes_on)
{
    fx_t fx;
    const worker_op_t *fin;

    fx_init(&fx);
    fx_saga(&fx, 'R', "ssrp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx_returned(&fx, false, 2, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    expect_effects(&fx, "step.failed,group.finished,step.execute", "best_effort");
    expect_steps(&fx, "ssfp", "best_effort");
    fin = fx_message(&fx.out, "group.finished");
    assert_contains(fin->u.msg.payload, "\"status\":\"partial\"");
    assert_contains(fin->u.msg.payload, "\"pay\":{\"status\":\"failed\",\"error_code\":");
    cr_expect_eq(fx_message(&fx.out, "step.execute")->u.msg.step, 3);
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING);
    fx_fini(&fx);
}

/* all_or_nothing: the last member fails; the group is undone (its member
 * without a compensation skipped), then the step before it; the step
 * after it is skipped_dependency_failed. */
Test(group, all_or_nothing_fails_the_group_and_compensates)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "ssrp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_ALL_OR_NOTHING);
    fx_returned(&fx, false, 2, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    expect_effects(&fx, "step.failed,group.finished,saga.compensating,step.compensate",
                   "all_or_nothing");
    expect_steps(&fx, "ckfk", "all_or_nothing");
    cr_expect_eq(fx_message(&fx.out, "step.compensate")->u.msg.step, 0);
    cr_expect_str_eq(fx.saga.steps[3].error_code, "runtime.skipped_dependency_failed");
    assert_contains(fx_message(&fx.out, "group.finished")->u.msg.payload, "\"status\":\"error\"");
    fx_fini(&fx);
}

/* all_or_nothing: a member fails while its sibling still runs: nothing
 * more until the sibling ends. */
Test(group, all_or_nothing_waits_for_its_members_in_flight)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "srrp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_ALL_OR_NOTHING);
    fx.saga.steps[1].calling = true;
    fx_returned(&fx, false, 2, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    expect_effects(&fx, "step.failed", "a sibling in flight");
    expect_steps(&fx, "srfp", "a sibling in flight");
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING);
    fx_fini(&fx);
}

/* fail_fast: the failure stops the group at once; the sibling whose call
 * is in flight is recorded first, then the compensation begins. */
Test(group, fail_fast_waits_for_the_call_in_flight_then_compensates)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "srrp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_FAIL_FAST);
    fx.saga.steps[1].calling = true;
    fx_returned(&fx, false, 2, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    expect_effects(&fx, "step.failed,saga.compensating", "the stop");
    expect_steps(&fx, "srfk", "the stop");
    cr_expect_eq(fx.saga.status, WORKER_SAGA_COMPENSATING);
    fx_fini(&fx);

    /* The call in flight returns: recorded, never retried, then undone. */
    fx_init(&fx);
    fx_saga(&fx, 'c', "srfk", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_FAIL_FAST);
    fx.saga.steps[1].calling = true;
    fx_returned(&fx, false, 1, 1, WORKER_OK, SG_ERRCLASS_NONE, false);
    fx_decide(&fx, true);
    /* its last member ended: group.finished, as for the other policies
     * (issue 35 item 6) */
    expect_effects(&fx, "step.succeeded,group.finished,step.compensate", "the call in flight");
    expect_steps(&fx, "ckfk", "the call in flight");
    cr_expect_eq(fx_message(&fx.out, "step.compensate")->u.msg.step, 0);
    fx_fini(&fx);
}

/* fail_fast: a sibling waiting for a retry (no call in flight) stops at
 * once: unknown, its retry never made, and the compensation begins. */
Test(group, fail_fast_stops_a_member_waiting_for_a_retry)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "rrrp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 0, 2, WORKER_POLICY_FAIL_FAST);
    fx.saga.steps[0].done_seq = 0;
    fx_returned(&fx, false, 2, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    /* no call in flight: the group has finished at the stop */
    expect_effects(&fx, "step.failed,saga.compensating,group.finished,step.compensate", "the stop");
    /* hold waited for a retry: unknown, and undone (it has a compensation);
     * note, unknown without one, stays unknown. */
    expect_steps(&fx, "cufk", "the stop");
    cr_expect_str_eq(fx.saga.steps[1].error_code, "runtime.group_stopped");
    cr_expect_eq(fx_message(&fx.out, "step.compensate")->u.msg.step, 0);
    fx_fini(&fx);
}

/* Members are undone in reverse order of their outcomes (done_seq), not
 * of their index. */
Test(group, members_are_undone_latest_outcome_first)
{
    for (int flip = 0; flip < 2; flip++) {
        fx_t fx;

        fx_init(&fx);
        fx_saga(&fx, 'R', "sssp", (int[]){1, 1, 1, 0}, NULL);
        group(&fx, 0, 2, WORKER_POLICY_ALL_OR_NOTHING);
        fx.saga.steps[0].done_seq = flip ? 3 : 5;
        fx.saga.steps[2].done_seq = flip ? 5 : 3;
        fx_cancel(&fx);
        fx_decide(&fx, true);
        expect_effects(&fx, "CTL:accepted,saga.cancelling,step.compensate", "cancel");
        cr_expect_eq(fx_message(&fx.out, "step.compensate")->u.msg.step, flip ? 2 : 0,
                     "the member whose outcome came last is undone first (flip %d)", flip);
        fx_fini(&fx);
    }
}

/* saga.cancel lets a member's call in flight finish: nothing is undone
 * until its outcome is recorded. */
Test(group, a_cancel_waits_for_a_members_call_in_flight)
{
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "srrp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx.saga.steps[1].calling = true;
    fx.saga.steps[2].calling = true;
    fx_cancel(&fx);
    fx_decide(&fx, true);
    expect_effects(&fx, "CTL:accepted,saga.cancelling", "cancel");
    expect_steps(&fx, "srrk", "cancel");
    cr_expect_eq(fx.saga.status, WORKER_SAGA_CANCELLING);
    fx_fini(&fx);
}

/* A retry without a wait is sent at once; a step's is chained, a
 * member's never (its call must leave the saga's queue). */
Test(group, a_members_retry_without_a_wait_is_not_chained)
{
    for (int member = 0; member < 2; member++) {
        fx_t fx;

        fx_init(&fx);
        fx.retry.base_ms = 0; /* every delay is 0: no timer */
        fx.retry.cap_ms = 0;
        fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
        if (member)
            group(&fx, 1, 2, WORKER_POLICY_ALL_OR_NOTHING);
        fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_TRANSIENT, true);
        fx_decide(&fx, true);
        expect_effects(&fx, "step.execute,step.retry_scheduled", "a retry at once");
        cr_expect_eq(fx.out.follow.set, !member, "chained: %d (member %d)", fx.out.follow.set,
                     member);
        fx_fini(&fx);
    }
}

/* all_or_nothing: a member fails while its sibling waits at its approval
 * gate.  The group has failed whatever a person says: the sibling is
 * skipped at once (runtime.group_stopped), the group finishes and the
 * saga compensates; nobody is asked for up to a day about a call that
 * would be undone at once (issue 35 item 3).  The same for a sibling
 * approved but not called yet, and for a gated sibling whose gate has not
 * opened yet (its step.execute is then stale). */
Test(group, a_failed_all_or_nothing_group_stops_asking_for_approval)
{
    static const char *const gated[] = {"a", "A", "p"};

    for (size_t i = 0; i < sizeof(gated) / sizeof(gated[0]); i++) {
        fx_t fx;
        char sagas[] = "srXp";

        sagas[2] = gated[i][0];
        fx_init(&fx);
        fx_saga(&fx, 'R', sagas, (int[]){1, 1, 0, 0}, NULL);
        group(&fx, 1, 2, WORKER_POLICY_ALL_OR_NOTHING);
        fx.saga.steps[2].approval = "{\"timeout_ms\": 86400000}";
        fx_returned(&fx, false, 1, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
        fx_decide(&fx, true);
        expect_effects(&fx, "step.failed,group.finished,saga.compensating,step.compensate",
                       gated[i]);
        expect_steps(&fx, "cfkk", gated[i]);
        cr_expect_str_eq(fx.saga.steps[2].error_code, "runtime.group_stopped", "%s", gated[i]);
        cr_expect_eq(fx.saga.status, WORKER_SAGA_COMPENSATING, "%s", gated[i]);
        fx_fini(&fx);
    }
}

/* best_effort: a reversible member whose outcome is unknown (its call
 * timed out, no retry left) may have taken effect, and the saga goes on
 * past a partial group: it is undone before the group finishes (issue 35
 * item 2: it stood for good when the saga completed, while a cancel
 * undid it).  Then group.finished names it compensated, and the step
 * after the group runs. */
Test(group, best_effort_undoes_an_unknown_member_before_it_goes_on)
{
    fx_t fx;
    const worker_op_t *fin;

    fx_init(&fx);
    fx_saga(&fx, 'R', "ssrp", (int[]){1, 1, 3, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx_returned(&fx, false, 2, 3, WORKER_TIMEOUT, SG_ERRCLASS_TIMEOUT, true);
    fx_decide(&fx, true);
    /* attempts exhausted: dead-lettered, as any step's */
    expect_effects(&fx, "step.failed,DL,saga.dead_lettered,step.compensate", "unknown member");
    expect_steps(&fx, "sscp", "unknown member");
    cr_expect_eq(fx_message(&fx.out, "step.compensate")->u.msg.step, 2);
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING);
    cr_expect_null(fx_message(&fx.out, "group.finished"), "the group waits for the undo");
    fx_fini(&fx);

    /* Its compensation's command is decided, and called, while the saga
     * runs. */
    fx_init(&fx);
    fx_saga(&fx, 'R', "sscp", (int[]){1, 1, 3, 0}, (int[]){0, 0, 0, 0});
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx.saga.steps[2].done_effect = "possible";
    fx_command(&fx, SG_CMD_COMPENSATE, 2, 1, 1);
    fx_decide(&fx, true);
    cr_expect(fx.out.calls, "the undo is called while the saga runs");
    expect_effects(&fx, "ATT", "the undo's command");
    fx_fini(&fx);

    /* It is undone: the group finishes, partial, and the saga goes on. */
    fx_init(&fx);
    fx_saga(&fx, 'R', "sscp", (int[]){1, 1, 3, 0}, (int[]){0, 0, 1, 0});
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx.saga.steps[2].done_effect = "possible";
    fx_returned(&fx, true, 2, 1, WORKER_OK, SG_ERRCLASS_NONE, false);
    fx_decide(&fx, true);
    expect_effects(&fx, "step.compensated,group.finished,step.execute", "undone");
    expect_steps(&fx, "ssCp", "undone");
    fin = fx_message(&fx.out, "group.finished");
    assert_contains(fin->u.msg.payload, "\"status\":\"partial\"");
    assert_contains(fin->u.msg.payload, "\"pay\":{\"status\":\"compensated\"");
    cr_expect_eq(fx_message(&fx.out, "step.execute")->u.msg.step, 3);
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING);
    fx_fini(&fx);
}

/* A step that references a member of a best_effort group that did not
 * succeed is skipped (runtime.skipped_dependency_failed), never called,
 * and the saga goes on and completes partial, naming it (issue 35 item 6:
 * it failed with input.ref.unresolved and the saga compensated
 * everything).  A step referencing only the group's manifest, or a member
 * that succeeded, runs. */
Test(group, a_step_that_references_a_failed_member_is_skipped_and_the_saga_goes_on)
{
    fx_t fx;
    const worker_op_t *done;

    fx_init(&fx);
    fx_saga(&fx, 'R', "sfsp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx.saga.steps[3].args = "{\"charge\": {\"$from\": \"/steps/note/result/id\"}}";
    fx_command(&fx, SG_CMD_EXECUTE, 3, 1, 1);
    fx_decide(&fx, true);
    cr_expect_not(fx.out.calls, "never called");
    expect_effects(&fx, "saga.completed", "skipped");
    expect_steps(&fx, "sfsk", "skipped");
    cr_expect_str_eq(fx.saga.steps[3].error_code, "runtime.skipped_dependency_failed");
    cr_expect_eq(fx.saga.status, WORKER_SAGA_COMPLETED);
    done = fx_message(&fx.out, "saga.completed");
    assert_contains(done->u.msg.payload,
                    "{\"step_name\":\"mail\",\"status\":\"skipped\",\"error_code\":"
                    "\"runtime.skipped_dependency_failed\"}");
    assert_contains(done->u.msg.payload, "\"skipped\":1");
    cr_expect(fx_logged(&fx.out, "step mail references step note, which did not succeed"));
    fx_fini(&fx);

    /* The manifest, or a member that succeeded: it runs. */
    fx_init(&fx);
    fx_saga(&fx, 'R', "sfsp", (int[]){1, 1, 1, 0}, NULL);
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx.saga.steps[3].args = "{\"a\": {\"$from\": \"/steps/g/result/status\"}, "
                            "\"b\": {\"$from\": \"/steps/pay/key\"}}";
    fx_command(&fx, SG_CMD_EXECUTE, 3, 1, 1);
    fx_decide(&fx, true);
    cr_expect_neq(fx.saga.steps[3].status, WORKER_STEP_SKIPPED, "not skipped");
    cr_expect_str_neq(fx.saga.steps[3].error_code, "runtime.skipped_dependency_failed");
    fx_fini(&fx);
}

/* The undo of a best_effort member that ended unknown fails for good (a
 * permanent answer): the member ends compensation_failed and is
 * dead-lettered for on-call, and the saga still goes on past its partial
 * group (the undo was a clean-up, not a reason to stop); the group
 * finishes naming it. */
Test(group, a_best_effort_members_undo_that_fails_for_good_is_dead_lettered_and_the_saga_goes_on)
{
    fx_t fx;
    const worker_op_t *fin;

    fx_init(&fx);
    fx_saga(&fx, 'R', "sscp", (int[]){1, 1, 3, 0}, (int[]){0, 0, 1, 0});
    group(&fx, 1, 2, WORKER_POLICY_BEST_EFFORT);
    fx.saga.steps[2].done_effect = "possible";
    fx_returned(&fx, true, 2, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx_decide(&fx, true);
    expect_effects(&fx,
                   "step.compensation_failed,DL,saga.dead_lettered,group.finished,step.execute",
                   "the undo failed");
    expect_steps(&fx, "ssxp", "the undo failed");
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING, "the saga goes on");
    fin = fx_message(&fx.out, "group.finished");
    assert_contains(fin->u.msg.payload, "\"pay\":{\"status\":\"compensation_failed\"");
    cr_expect_eq(fx_message(&fx.out, "step.execute")->u.msg.step, 3);
    cr_expect_null(fx_message(&fx.out, "saga.failed"));
    fx_fini(&fx);
}
