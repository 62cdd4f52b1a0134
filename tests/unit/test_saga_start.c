/* The saga decision on saga.start (accepted, rejected, duplicate,
 * conflict), the call a step command prepares, and the dead letters of
 * poison and of commands naming no saga or step (worker/decide/worker_decide.h,
 * without services; the fixture: saga_fixture.c). */
#include <stdio.h>
#include <string.h>

#include "saga_fixture.h"
#include "unit.h"

/* ---- saga.start --------------------------------------------------------- */

#define START(steps)                                                                               \
    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"s1\",\"saga_id\":\"order-1\",\"name\":\"order\","   \
    "\"steps\":" steps "}"

static const char good_start[] =
    START("[{\"name\":\"hold\",\"tool\":\"reserve\",\"compensate\":{\"tool\":\"release\"}},"
          "{\"name\":\"pay\",\"tool\":\"charge\",\"args\":{\"amount\":5}}]");

static void fx_start(fx_t *fx, const char *text)
{
    sg_submit_decode(text, strlen(text), &fx->limits, &fx->dec);
    cr_assert_eq(fx->dec.type, SG_CMD_START, "%s", fx->dec.err.message);
}

Test(saga, start_accepted_writes_the_saga_and_its_first_command)
{
    fx_t fx;
    char got[512];
    const worker_op_t *row, *ev, *first;

    fx_init(&fx);
    fx_start(&fx, good_start);
    fx.in.traceparent = TP;
    fx.in.traceparent_len = strlen(TP);
    fx_decide(&fx, false);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "NEW,saga.accepted,step.execute");
    row = fx_nth_op(&fx.out, WORKER_OP_SAGA_NEW, 0);
    cr_expect_str_eq(row->saga_id, "order-1");
    cr_expect_str_eq(row->u.saga_new.name, "order");
    cr_expect_str_eq(row->u.saga_new.traceparent, TP);
    cr_expect_null(row->u.saga_new.deadline);
    cr_expect_eq(row->u.saga_new.retry_budget_ms, -1);
    /* the registry's compensation of charge is written with its args */
    assert_contains(row->u.saga_new.steps, "\"compensate\":{\"tool\":\"release\",\"args\":"
                                           "{\"amount\":5}}");
    ev = fx_message(&fx.out, "saga.accepted");
    cr_expect_str_eq(ev->u.msg.payload,
                     "{\"v\":1,\"type\":\"saga.accepted\",\"id\":\"evt:order-1:1\",\"saga_id\":"
                     "\"order-1\",\"seq\":1,\"time\":\"2026-01-01T00:00:00.000Z\",\"name\":"
                     "\"order\",\"steps\":2}");
    cr_expect_str_eq(ev->u.msg.headers,
                     "{\"sagad-type\":\"saga.accepted\",\"traceparent\":\"" TP "\"}");
    cr_expect_str_eq(ev->u.msg.topic, "t.events");
    first = fx_message(&fx.out, "step.execute");
    cr_expect_str_eq(first->u.msg.topic, "t.internal");
    cr_expect_eq(first->u.msg.step, 0);
    cr_expect_eq(first->u.msg.attempt, 1);
    cr_expect_eq(first->u.msg.delay_ms, 0);
    /* chained: the first command as sent, and the saga as the load would
     * return it */
    cr_assert(fx.out.follow.set);
    cr_expect_eq(fx.out.follow.type, SG_CMD_EXECUTE);
    cr_expect_eq(fx.out.follow.step, first->u.msg.step);
    cr_expect_eq(fx.out.follow.attempt, first->u.msg.attempt);
    cr_expect_eq(fx.out.follow.generation, first->u.msg.generation);
    assert_contains(first->u.msg.payload, fx.out.follow.id);
    cr_assert(fx.out.keep_fresh);
    cr_expect_eq(fx.out.fresh->saga.nsteps, 2);
    cr_expect_eq(fx.out.fresh->saga.status, WORKER_SAGA_RUNNING);
    cr_expect_eq(fx.out.fresh->saga.steps[1].status, WORKER_STEP_PENDING);
    cr_expect_eq(fx_nth_op(&fx.out, WORKER_OP_SAGA, 0)->u.saga.seq, 1);
    cr_expect_str_eq(fx_consumed(&fx.out), "started");
    cr_expect(fx_counted(&fx.out, SG_M_SAGAS_STARTED, NULL));
    cr_expect_eq(fx.out.stats.started, 1);
    fx_fini(&fx);
}

Test(saga, start_with_a_bad_traceparent_gets_a_new_one_and_says_so)
{
    fx_t fx;
    const worker_op_t *row;

    fx_init(&fx);
    fx_start(&fx, good_start);
    fx.in.traceparent = "00-bad\r\nX-Evil: 1";
    fx.in.traceparent_len = strlen(fx.in.traceparent);
    fx_decide(&fx, false);
    row = fx_nth_op(&fx.out, WORKER_OP_SAGA_NEW, 0);
    cr_expect(sg_traceparent_ok(row->u.saga_new.traceparent, strlen(row->u.saga_new.traceparent)));
    cr_expect(fx_logged(&fx.out, "traceparent header is not W3C trace context (17 bytes: "
                                 "00-bad\\x0d\\x0aX-Evil: 1)"));
    fx_fini(&fx);
}

Test(saga, start_rejected_by_validation_is_announced_and_dead_lettered)
{
    fx_t fx;
    char got[512];
    const worker_op_t *dl, *ev;

    fx_init(&fx);
    fx_start(&fx, START("[{\"name\":\"a\",\"tool\":\"teleport\"}]"));
    fx_decide(&fx, false);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "saga.rejected,DL");
    ev = fx_message(&fx.out, "saga.rejected");
    assert_contains(ev->u.msg.payload, "\"id\":\"evt:order-1:rejected:3:17\",\"saga_id\":"
                                       "\"order-1\",\"seq\":0");
    assert_contains(ev->u.msg.payload, "\"problems\":[{\"path\":\"$.steps[0].tool\"");
    cr_expect_str_eq(ev->u.msg.headers, "{\"sagad-type\":\"saga.rejected\"}");
    dl = fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0);
    cr_expect_str_eq(dl->u.dead.err->code, "input.schema.invalid");
    cr_expect_str_eq(dl->u.dead.saga_name, "order");
    cr_expect_eq(dl->u.dead.step, -1);
    cr_expect_not(dl->u.dead.has_saga);
    cr_expect_str_eq(fx_consumed(&fx.out), "rejected");
    cr_expect(fx_counted(&fx.out, SG_M_DEAD_LETTERS, "input.schema.invalid"));
    cr_expect_null(fx.out.fresh);
    fx_fini(&fx);
}

Test(saga, start_of_an_existing_saga_same_definition_is_a_duplicate)
{
    const worker_op_t *ev;
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", NULL, NULL);
    fx.saga.same_definition = true;
    fx_start(&fx, good_start);
    fx_decide(&fx, true);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "saga.duplicate", "answered, nothing else");
    cr_expect(fx_nth_op(&fx.out, WORKER_OP_SAGA, 0) != NULL, "the saga's row keeps the new seq");
    ev = fx_message(&fx.out, "saga.duplicate");
    cr_assert_not_null(ev);
    assert_contains(ev->u.msg.payload, "\"status\":\"running\"");
    assert_contains(ev->u.msg.payload, "\"seq\":6");
    cr_expect_null(strstr(ev->u.msg.payload, "run_health"), "not finished: no run_health");
    cr_expect_str_eq(fx_consumed(&fx.out), "ignored");
    cr_expect(fx_counted(&fx.out, SG_M_DUPLICATES_IGNORED, "command"));
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING, "the saga itself is untouched");
    cr_expect_null(fx.out.fresh);
    fx_fini(&fx);
}

/* The saga.start that created the saga, read again at the same offset
 * (its partition changed hands before the offset moved past it): nobody
 * asked anything, so nothing is answered. */
Test(saga, start_read_again_at_its_own_offset_is_not_answered)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'D', "ssss", NULL, NULL);
    fx.saga.same_definition = true;
    fx.saga.origin = "3:17"; /* the fixture's partition and offset */
    fx_start(&fx, good_start);
    fx_decide(&fx, true);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "", "no event for a message read again");
    cr_expect_null(fx_nth_op(&fx.out, WORKER_OP_SAGA, 0), "the saga is not written");
    cr_expect_str_eq(fx_consumed(&fx.out), "ignored");
    fx_fini(&fx);
}

/* A new saga remembers where its saga.start was read. */
Test(saga, a_new_saga_keeps_the_offset_of_its_start)
{
    fx_t fx;

    fx_init(&fx);
    fx_start(&fx, good_start);
    fx_decide(&fx, false);
    cr_assert_not_null(fx_nth_op(&fx.out, WORKER_OP_SAGA_NEW, 0));
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_SAGA_NEW, 0)->u.saga_new.origin, "3:17");
    fx_fini(&fx);
}

Test(saga, start_of_a_finished_saga_again_is_answered_with_its_outcome)
{
    const worker_op_t *ev;
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'D', "ssss", NULL, NULL);
    fx.saga.same_definition = true;
    fx_start(&fx, good_start);
    fx_decide(&fx, true);
    ev = fx_message(&fx.out, "saga.duplicate");
    cr_assert_not_null(ev);
    assert_contains(ev->u.msg.payload, "\"status\":\"completed\"");
    assert_contains(ev->u.msg.payload, "\"run_health\":{\"steps_total\":4,\"ok\":4");
    fx_fini(&fx);

    /* A cancelled saga is finished too: its run_health as well (issue 35
     * item 7: a completed, compensated or failed one had it, not this). */
    fx_init(&fx);
    fx_saga(&fx, 'X', "CCkk", NULL, NULL);
    fx.saga.same_definition = true;
    fx_start(&fx, good_start);
    fx_decide(&fx, true);
    ev = fx_message(&fx.out, "saga.duplicate");
    cr_assert_not_null(ev);
    assert_contains(ev->u.msg.payload, "\"status\":\"cancelled\"");
    assert_contains(ev->u.msg.payload, "\"run_health\":{\"steps_total\":4");
    fx_fini(&fx);
}

Test(saga, start_of_an_existing_saga_other_definition_is_a_conflict)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", NULL, NULL);
    fx_start(&fx, good_start);
    fx_decide(&fx, true);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "saga.rejected,DL");
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code,
                     "input.saga.conflict");
    assert_contains(fx_message(&fx.out, "saga.rejected")->u.msg.payload,
                    "unique: this saga_id is already used with a different definition");
    cr_expect_eq(fx.saga.seq, 5, "the existing saga is untouched");
    fx_fini(&fx);
}

/* ---- the call and dead letters ------------------------------------------ */

Test(saga, a_decided_call_carries_its_tool_args_key_and_input)
{
    int64_t amount = 0;
    fx_t fx;

    fx_init(&fx);
    fx_saga(&fx, 'R', "sspp", (int[]){1, 1, 0, 0}, NULL);
    fx_command(&fx, SG_CMD_EXECUTE, 2, 1, 1);
    fx_decide(&fx, true);
    cr_assert(fx.out.calls);
    cr_expect_str_eq(fx.out.call.tool->name, "charge");
    cr_expect_str_eq(fx.out.call.step_name, "pay");
    cr_expect_eq(fx.out.call.attempt, 1);
    cr_expect_str_eq(fx.out.call.traceparent, TP);
    cr_expect_eq(sg_json_get_int(fx.out.call.args, "$.args", "amount", true, &amount, NULL), 0);
    cr_expect_eq(amount, 5);
    cr_expect_not_null(fx.out.call.input);
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_ATTEMPT, 0)->u.attempt.idem_key,
                     fx.out.call.idem_key);
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_STEP, 0)->u.step.idem_key, fx.out.call.idem_key);
    fx_fini(&fx);
}

Test(saga, a_tool_gone_from_the_registry_is_dead_lettered_bad_args_compensate)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_saga(&fx, 'R', "sppp", (int[]){1, 0, 0, 0}, NULL);
    fx.saga.steps[1].tool = "teleport";
    fx_command(&fx, SG_CMD_EXECUTE, 1, 1, 1);
    fx_decide(&fx, true);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "step.failed,DL,saga.dead_lettered,saga.compensating,step.compensate");
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code,
                     "tool.unknown");
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.tool, "teleport");
    fx_fini(&fx);

    fx_init(&fx);
    fx_saga(&fx, 'R', "sspp", (int[]){1, 1, 0, 0}, NULL);
    fx.saga.steps[2].args = "{\"amount\":0}";
    fx_command(&fx, SG_CMD_EXECUTE, 2, 1, 1);
    fx_decide(&fx, true);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "step.failed,saga.compensating,step.compensate");
    assert_contains(fx_message(&fx.out, "step.failed")->u.msg.payload, "\"tool.args.invalid\"");
    fx_fini(&fx);
}

Test(saga, poison_and_commands_of_unknown_sagas_or_steps_are_dead_lettered)
{
    fx_t fx;
    char got[512];

    fx_init(&fx);
    fx_command(&fx, SG_CMD_POISON, 0, 0, 0);
    fx.dec.saga_id[0] = '\0';
    sg_err_set(&fx.dec.err, SG_ERRCLASS_POISON, "input.json.invalid", "not JSON");
    fx_decide(&fx, false);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "DL");
    cr_expect_null(fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->saga_id);
    cr_expect_str_eq(fx_consumed(&fx.out), "dead_lettered");
    fx_fini(&fx);

    fx_init(&fx);
    fx_command(&fx, SG_CMD_EXECUTE, 0, 1, 1);
    fx_decide(&fx, false);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "DL");
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code,
                     "input.saga.unknown");
    fx_fini(&fx);

    fx_init(&fx);
    fx_saga(&fx, 'R', "srpp", (int[]){1, 1, 0, 0}, NULL);
    fx_command(&fx, SG_CMD_EXECUTE, 7, 1, 1);
    fx_decide(&fx, true);
    fx_effects(&fx.out, got, sizeof(got));
    cr_expect_str_eq(got, "DL,saga.dead_lettered");
    cr_expect_str_eq(fx_nth_op(&fx.out, WORKER_OP_DEAD_LETTER, 0)->u.dead.err->code,
                     "input.schema.invalid");
    cr_expect_eq(fx.saga.status, WORKER_SAGA_RUNNING);
    fx_fini(&fx);
}

/* ---- what step events hold ---------------------------------------------- */

Test(saga, step_succeeded_carries_the_result_up_to_the_configured_size)
{
    fx_t fx;
    const worker_op_t *ev;

    fx_init(&fx);
    fx.rules.event_result_max = 11; /* {"ok":true} */
    fx_saga(&fx, 'R', "rppp", (int[NSTEPS]){1}, NULL);
    fx_returned(&fx, false, 0, 1, WORKER_OK, SG_ERRCLASS_NONE, false);
    fx_decide(&fx, true);
    ev = fx_message(&fx.out, "step.succeeded");
    cr_assert_not_null(ev);
    assert_contains(ev->u.msg.payload, "\"result\":{\"ok\":true}");
    cr_expect_null(strstr(ev->u.msg.payload, "result_truncated"));
    fx_fini(&fx);

    fx_init(&fx);
    fx.rules.event_result_max = 10;
    fx_saga(&fx, 'R', "rppp", (int[NSTEPS]){1}, NULL);
    fx_returned(&fx, false, 0, 1, WORKER_OK, SG_ERRCLASS_NONE, false);
    fx_decide(&fx, true);
    ev = fx_message(&fx.out, "step.succeeded");
    cr_assert_not_null(ev);
    assert_contains(ev->u.msg.payload,
                    "\"result\":null,\"result_truncated\":true,\"result_bytes\":11");
    fx_fini(&fx);
}

Test(saga, a_tools_agent_action_wins_over_its_codes_default)
{
    fx_t fx;
    const worker_op_t *ev;

    fx_init(&fx);
    fx_saga(&fx, 'R', "ssrp", (int[NSTEPS]){1, 1, 1}, NULL);
    fx_returned(&fx, false, 2, 1, WORKER_ERROR, SG_ERRCLASS_PERMANENT, false);
    fx.result.data = "{\"error\":\"declined\",\"agent_action\":\"Ask for another card.\"}";
    fx_decide(&fx, true);
    ev = fx_message(&fx.out, "step.failed");
    cr_assert_not_null(ev);
    assert_contains(ev->u.msg.payload, "\"agent_action\":\"Ask for another card.\"");
    assert_contains(fx_message(&fx.out, "saga.compensating")->u.msg.payload,
                    "\"agent_action\":\"Ask for another card.\"");
    fx_fini(&fx);

    /* no agent_action in the answer: the code's default (tool.http.503
     * belongs to the tool.http.{5xx} family) */
    cr_expect_str_eq(sg_err_agent_action("tool.http.503"), sg_err_agent_action("tool.http.{5xx}"));
    cr_expect_not_null(sg_err_agent_action("kafka.broker_down"), "the kafka.* family");
    cr_expect_null(sg_err_agent_action("no.such.code"));
}

/* limits.max_outgoing_bytes: a message over it loses its largest member
 * (null now), and says what went, its size and where it is kept whole;
 * the envelope stays. */
Test(saga, a_message_over_the_outgoing_cap_loses_its_largest_member)
{
    fx_t fx;
    const worker_op_t *ev;
    size_t whole;

    fx_init(&fx);
    fx.rules.event_result_max = 100000;
    fx_saga(&fx, 'R', "rppp", (int[NSTEPS]){1}, NULL);
    fx_returned(&fx, false, 0, 1, WORKER_OK, SG_ERRCLASS_NONE, false);
    fx_decide(&fx, true);
    whole = strlen(fx_message(&fx.out, "step.succeeded")->u.msg.payload);
    fx_fini(&fx);

    fx_init(&fx);
    fx.rules.event_result_max = 100000;
    fx.rules.max_outgoing = whole - 1;
    fx_saga(&fx, 'R', "rppp", (int[NSTEPS]){1}, NULL);
    fx_returned(&fx, false, 0, 1, WORKER_OK, SG_ERRCLASS_NONE, false);
    fx_decide(&fx, true);
    ev = fx_message(&fx.out, "step.succeeded");
    cr_assert_not_null(ev);
    assert_contains(ev->u.msg.payload, "\"step_name\":\"hold\",\"attempt\":1,\"result\":null,");
    assert_contains(ev->u.msg.payload,
                    "\"truncated\":true,\"truncated_fields\":[{\"field\":\"result\",\"bytes\":11,"
                    "\"kept_in\":\"steps.result\"}]");
    fx_fini(&fx);
}
