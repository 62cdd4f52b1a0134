/* Control commands end to end (issue 25; docs/WORKER.md, "Cancellation"):
 * the real worker and relay, saga.cancel sent on the commands topic as a
 * producer or sagactl would, and what the producer relies on read back:
 * the events, the effects the downstream saw (builtin_ledger, the gate's
 * files), the final rows and the saga's control history.  Nothing waits
 * on time: a call is held in flight by a gate the test opens, a step
 * waits for a retry an hour away. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_json.h"

TestSuite(control, .init = sgw_setup, .fini = sgw_teardown, .timeout = 120);

/* saga.cancel of saga_id, as a producer sends it. */
static void send_cancel(const char *saga_id, const char *id, const char *reason)
{
    char msg[1024];

    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"%s\", \"saga_id\": \"%s\", "
             "\"by\": \"support:alice\", \"reason\": \"%s\"}",
             id, saga_id, reason);
    sgw_produce_signed("support:alice", 0, saga_id, msg, strlen(msg));
}

static void expect_no_dead_letters(void)
{
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0,
                 "a control command is answered, never dead-lettered");
}

/* The cancel waits behind the call in flight in its saga's queue: the
 * call's outcome is recorded first (the gate step succeeded), then what
 * stands is compensated in reverse, and the step after it is never
 * called.  Chaining is off so that the next step's command is a message
 * that comes after the cancel (chaining stops at a cancel the worker has
 * read; one it has not read yet is simply later). */
Test(control, cancel_while_a_call_is_in_flight_records_it_then_compensates, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_CHAIN=false", NULL};
    const sg_json_t *ev[16], *h;
    char dir[64], tools[1024], text[512];

    sgw_gate_dir(dir, sizeof(dir));
    sgw_gate_tool(tools, sizeof(tools), "gate", dir, NULL);
    sgw_pair_start(tools, 1, env);
    sgw_submit("cxl-fly",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"gate\", \"args\": {\"n\": 2}},"
               " {\"name\": \"ship\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 3}}]");
    sgw_wait_file(dir, "started");
    send_cancel("cxl-fly", "cancel-fly-1", "the customer withdrew the order");
    sgw_touch(dir, "open");
    sgw_wait_status("cxl-fly", "cancelled");
    sgw_event_wait("cxl-fly", "saga.cancelled");
    sgw_pair_stop();

    sgw_expect_events("cxl-fly", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                      "saga.cancelling", "step.compensated", "step.compensated", "saga.cancelled",
                      NULL);
    cr_expect_eq(sgw_jint(ev[2], "step"), 1, "the call in flight's outcome is recorded");
    cr_expect_str_eq(sgw_jstr(ev[3], "by"), "support:alice");
    cr_expect_str_eq(sgw_jstr(ev[3], "reason"), "the customer withdrew the order");
    cr_expect_str_eq(sgw_jstr(ev[3], "command_id"), "cancel-fly-1");
    cr_expect_eq(sgw_jint(ev[4], "step"), 1, "compensation in reverse: the gate step first");
    cr_expect_eq(sgw_jint(ev[5], "step"), 0);
    cr_expect_str_eq(sgw_jstr(ev[6], "status"), "cancelled");
    h = sgw_run_health(ev[6]);
    cr_expect_eq(sgw_jint(h, "compensated"), 2);
    cr_expect_eq(sgw_jint(h, "skipped"), 1);
    cr_expect_eq(sgw_jint(h, "failed"), 0);

    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,compensated,skipped");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(status, ',' ORDER BY id) FROM attempts WHERE "
                                "step_idx = 1 AND phase = 'forward'"),
                     "ok", "the call in flight finished and was recorded");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 2"), 0,
                 "the step after the cancel is never called");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key, ',' ORDER BY first_at, last_at) FROM "
                                "builtin_ledger"),
                     "cxl-fly:0:f:g1,cxl-fly:1:c:g1,cxl-fly:0:c:g1");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT command || '|' || command_id || '|' || requested_by || "
                                "'|' || reason || '|' || outcome FROM saga_controls WHERE "
                                "saga_id = 'cxl-fly'"),
                     "saga.cancel|cancel-fly-1|support:alice|the customer withdrew the "
                     "order|accepted");
    expect_no_dead_letters();
}

/* A running saga whose step waits for a retry an hour away: no call is in
 * flight, so the cancel is decided at once.  The waiting step's last
 * attempt may have taken effect: it ends unknown and is compensated first,
 * then the step before it; the step after it is never called, and the
 * retry's timer, when it comes, finds nothing to do. */
Test(control, cancel_of_a_running_saga_compensates_in_reverse_and_ends_cancelled, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_RETRY_BUDGET_MS=0", NULL};
    static const char tools[] =
        "\"flaky.reversible\": {\"adapter\": \"builtin\", \"target\": \"fail\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"ledger\"}";
    const sg_json_t *ev[16], *h, *block;
    char text[512];

    sgw_pair_start(tools, 2, env);
    sgw_submit("cxl-run",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"flaky.reversible\", \"args\": {\"class\": "
               "\"transient\", \"code\": \"bank.busy\", \"retry_after_ms\": 3600000}},"
               " {\"name\": \"ship\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 3}}]");
    sgw_event_wait("cxl-run", "step.retry_scheduled");
    send_cancel("cxl-run", "cancel-run-1", "fraud suspected");
    sgw_wait_status("cxl-run", "cancelled");
    sgw_event_wait("cxl-run", "saga.cancelled");
    sgw_pair_stop();

    sgw_expect_events("cxl-run", ev, "saga.accepted", "step.succeeded", "step.retry_scheduled",
                      "saga.cancelling", "step.compensated", "step.compensated", "saga.cancelled",
                      NULL);
    cr_expect_str_eq(sgw_jstr(ev[3], "reason"), "fraud suspected");
    cr_expect_eq(sgw_jint(ev[4], "step"), 1, "the step that may have taken effect first");
    cr_expect_eq(sgw_jint(ev[5], "step"), 0);
    h = sgw_run_health(ev[6]);
    cr_expect_eq(sgw_jint(h, "compensated"), 2);
    cr_expect_eq(sgw_jint(h, "skipped"), 1);
    block = sg_json_member(h, "blocking_failure");
    cr_expect(block && sg_json_is_null(block), "undone: nothing blocks");

    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,compensated,skipped");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT forward_effect || '|' || error_code FROM steps WHERE idx = 1"),
        "possible|runtime.saga_cancelled");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 2"), 0,
                 "the step after the cancel is never called");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key, ',' ORDER BY first_at, last_at) FROM "
                                "builtin_ledger"),
                     "cxl-run:0:f:g1,cxl-run:1:c:g1,cxl-run:0:c:g1");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM sagas"), "cancelled");
    expect_no_dead_letters();
}

/* A held saga (a dead-lettered step, held for an operator's replay): the
 * cancel ends the hold and compensates what ran; the dead letter is
 * discarded, and the release timer, when it comes, finds nothing to do. */
Test(control, cancel_of_a_held_saga_compensates_and_ends_cancelled, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000", NULL};
    const sg_json_t *ev[16];
    char text[512];

    sgw_pair_start(NULL, 1, env);
    sgw_submit("cxl-held",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"fail\", \"args\": {\"class\": \"poison\", "
               "\"code\": \"bank.garbled\"}}]");
    sgw_wait_status("cxl-held", "held");
    send_cancel("cxl-held", "cancel-held-1", "nobody will fix it");
    sgw_wait_status("cxl-held", "cancelled");
    sgw_event_wait("cxl-held", "saga.cancelled");
    sgw_pair_stop();

    sgw_expect_events("cxl-held", ev, "saga.accepted", "step.succeeded", "step.failed",
                      "saga.dead_lettered", "saga.cancelling", "step.compensated", "saga.cancelled",
                      NULL);
    cr_expect_eq(sgw_jint(ev[5], "step"), 0);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,failed");
    /* The dead letter that held it is answered by the cancel: discarded,
     * saying by whom and why (it stayed pending for ever and kept the
     * cancelled saga from retention: issue 35 item 5). */
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT status || '|' || resolved_by || '|' || resolution_reason || "
                   "'|' || (resolved_at IS NOT NULL) FROM dead_letters"),
        "discarded|support:alice|saga cancelled (cancel-held-1): nobody will fix it|true");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg(key, ',' ORDER BY first_at) FROM builtin_ledger"),
        "cxl-held:0:f:g1,cxl-held:0:c:g1");
}

/* A control command is decided and answered once per (saga, command id):
 * read again (a new owner of the partition after a crash or a drain
 * timeout re-reads commands whose offset did not commit; here the same
 * message sent twice) it is neither acted on nor answered.  Before, an
 * accepted cancel read again was answered saga.command_refused under the
 * same id, and `sagactl cancel --wait` printed "refused" (issue 35 item
 * 4).  A cancel with another id after it is answered, which is how the
 * test knows the repeat was read. */
Test(control, a_control_command_read_again_is_answered_once, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000", NULL};
    const sg_json_t *ev[16], *refused;
    size_t n;

    sgw_pair_start(NULL, 1, env);
    sgw_submit("cxl-twice",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"fail\", \"args\": {\"class\": \"poison\"}}]");
    sgw_wait_status("cxl-twice", "held");
    send_cancel("cxl-twice", "cancel-once", "withdrawn");
    sgw_wait_status("cxl-twice", "cancelled");
    sgw_event_wait("cxl-twice", "saga.cancelled");
    send_cancel("cxl-twice", "cancel-once", "withdrawn");
    send_cancel("cxl-twice", "cancel-later", "again");
    refused = sgw_event_wait("cxl-twice", "saga.command_refused");
    cr_expect_str_eq(sgw_jstr(refused, "command_id"), "cancel-later",
                     "the first refusal is the later command's, not the repeat's");
    sgw_pair_stop();

    n = sgw_saga_events("cxl-twice", ev, 16);
    sgw_expect_events("cxl-twice", ev, "saga.accepted", "step.succeeded", "step.failed",
                      "saga.dead_lettered", "saga.cancelling", "step.compensated", "saga.cancelled",
                      "saga.command_refused", NULL);
    cr_expect_eq(n, 8, "one answer per command id");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls WHERE command_id = 'cancel-once'"),
                 1, "decided once");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls"), 2);
}

/* The same command id twice while the worker was down: both copies come
 * in one poll, behind each other in the saga's queue.  The first is
 * decided; the second, decided after its commit, finds it in the saga's
 * history and is only logged: one acceptance, one history row. */
Test(control, a_control_command_sent_twice_while_the_worker_is_down_is_answered_once,
     .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000", NULL};
    const sg_json_t *ev[16];

    sgw_pair_start(NULL, 1, env);
    sgw_submit("cxl-batch",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"fail\", \"args\": {\"class\": \"poison\"}}]");
    sgw_wait_status("cxl-batch", "held");
    sgw_pair_stop();
    send_cancel("cxl-batch", "cancel-dup", "withdrawn");
    send_cancel("cxl-batch", "cancel-dup", "withdrawn");
    sgt_bg_start(&sgw.relay, "sagad-relay", sgw_run_args, sgw.env);
    sgt_bg_start(&sgw.worker, "sagad-worker", sgw_run_args, sgw.env);
    sgw_wait_status("cxl-batch", "cancelled");
    sgw_event_wait("cxl-batch", "saga.cancelled");
    sgw_pair_stop();

    sgw_expect_events("cxl-batch", ev, "saga.accepted", "step.succeeded", "step.failed",
                      "saga.dead_lettered", "saga.cancelling", "step.compensated", "saga.cancelled",
                      NULL);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls WHERE command_id = 'cancel-dup'"), 1,
                 "decided once");
}

/* A cancel keyed by anything but its saga_id lands on a partition where
 * its saga's commands are not (a call of the saga may be in flight there):
 * dead-lettered input.key.mismatch, never decided nor answered; the saga
 * is untouched and a cancel keyed right still works (issue 35 item 7). */
Test(control, a_cancel_not_keyed_by_its_saga_id_is_dead_lettered, .timeout = 120)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000", NULL};
    static const char msg[] = "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"mis-1\", "
                              "\"saga_id\": \"cxl-key\", \"by\": \"support:alice\", "
                              "\"reason\": \"wrong key\"}";
    char text[512];

    sgw_pair_start(NULL, 1, env);
    sgw_submit("cxl-key",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"fail\", \"args\": {\"class\": \"poison\"}}]");
    sgw_wait_status("cxl-key", "held");
    sgw_produce(sgw.topic_cmd, "some-other-saga", msg, strlen(msg));
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters WHERE error_code = 'input.key.mismatch'");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM sagas"), "held",
                     "the mis-keyed cancel was not acted on");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls"), 0, "nor decided");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT saga_id || '|' || convert_from(original_key, 'UTF8') FROM "
                                "dead_letters WHERE error_code = 'input.key.mismatch'"),
                     "cxl-key|some-other-saga", "the dead letter names the saga and the key");
    send_cancel("cxl-key", "right-1", "keyed right");
    sgw_wait_status("cxl-key", "cancelled");
    sgw_pair_stop();
}

/* A finished saga: the cancel changes nothing and is answered with the
 * saga's status and run_health; the refusal is in the saga's history. */
Test(control, cancel_of_a_finished_saga_is_answered, .timeout = 120)
{
    const sg_json_t *ev;
    char text[512];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("cxl-done", "[{\"name\": \"reserve\", \"tool\": \"ledger\", \"args\": {\"n\": 1}}]");
    sgw_wait_status("cxl-done", "completed");
    send_cancel("cxl-done", "cancel-done-1", "too late");
    ev = sgw_event_wait("cxl-done", "saga.command_refused");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(ev, "command"), "saga.cancel");
    cr_expect_str_eq(sgw_jstr(ev, "command_id"), "cancel-done-1");
    cr_expect_str_eq(sgw_jstr(ev, "by"), "support:alice");
    cr_expect_str_eq(sgw_jstr(ev, "error_code"), "input.saga.finished");
    cr_expect_str_eq(sgw_jstr(ev, "status"), "completed");
    cr_expect_gt(sgw_jint(ev, "seq"), 0, "a refusal for a saga is in its event stream");
    cr_expect_eq(sgw_jint(sgw_run_health(ev), "ok"), 1);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM sagas"), "completed");
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'cxl-done:0:f:g1'"), 1,
                 "nothing undone");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger"), 1);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT outcome || '|' || error_code FROM saga_controls"),
        "refused|input.saga.finished");
    expect_no_dead_letters();
}

/* No such saga: answered with seq 0 (no saga, no stream), not
 * dead-lettered, and its offset passes. */
Test(control, cancel_of_an_unknown_saga_is_answered, .timeout = 120)
{
    const sg_json_t *ev;

    sgw_pair_start(NULL, 1, NULL);
    send_cancel("cxl-ghost", "cancel-ghost-1", "wrong id");
    ev = sgw_event_wait("cxl-ghost", "saga.command_refused");
    /* Read on the commands topic, forwarded, and decided from its copy on
     * the internal topic: both offsets moved past it. */
    sgw_wait_int(2, "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets");
    sgw_pair_stop();

    cr_expect_eq(sgw_jint(ev, "seq"), 0);
    cr_expect_str_eq(sgw_jstr(ev, "error_code"), "input.saga.not_found");
    cr_expect_str_eq(sgw_jstr(ev, "command_id"), "cancel-ghost-1");
    cr_expect_null(sg_json_member(ev, "status"), "no saga, no status");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas"), 0);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls"), 0);
    expect_no_dead_letters();
}

/* A cancel that breaks its schema is undecodable: dead-lettered with the
 * field and the rule, like any malformed command, and the saga goes on. */
Test(control, malformed_cancel_is_dead_lettered_and_changes_nothing, .timeout = 120)
{
    static const char msg[] = "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"c-bad\", "
                              "\"saga_id\": \"cxl-bad\", \"by\": \"support:alice\"}";
    char text[512];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("cxl-bad", "[{\"name\": \"reserve\", \"tool\": \"ledger\", \"args\": {\"n\": 1}}]");
    sgw_wait_status("cxl-bad", "completed");
    sgw_produce(sgw.topic_cmd, "cxl-bad", msg, strlen(msg));
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT error_code FROM dead_letters"),
                     "input.schema.required");
    cr_expect(strstr(sgw_q_text(text, sizeof(text), "SELECT message FROM dead_letters"),
                     "$.reason") != NULL,
              "the message names the field: %s", text);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM sagas"), "completed");
    cr_expect_null(sgw_event_find("cxl-bad", "saga.cancelling"));
}

/* ---- approval gates ---- */

#define GATED_TOOLS                                                                                \
    "\"bank.charge\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "        \
    "\"reversible\", \"compensation\": \"ledger\", \"approval\": \"required\"}"

/* saga.approve or saga.reject of a step (a JSON value: index or name). */
static void send_decision(const char *type, const char *saga_id, const char *id, const char *step,
                          const char *reason)
{
    char msg[1024];

    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"%s\", \"id\": \"%s\", \"saga_id\": \"%s\", \"step\": %s, "
             "\"by\": \"finance:bob\", \"reason\": \"%s\"}",
             type, id, saga_id, step, reason);
    sgw_produce_signed("finance:bob", 0, saga_id, msg, strlen(msg));
}

/* The gate walked around: a step whose compensation names the gated
 * charge, and a step after it that fails so that the compensation would
 * run.  Refused at intake (saga.rejected at the compensation's path), the
 * charge is never made (issue 36 item 3: it ran without approval). */
Test(control, a_gated_tool_named_as_a_compensation_is_refused_and_never_called, .timeout = 120)
{
    const sg_json_t *ev;
    char text[512], *printed;

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_submit("gate-walk",
               "[{\"name\": \"reserve\", \"tool\": \"ledger\", \"args\": {\"n\": 1},"
               "  \"compensate\": {\"tool\": \"bank.charge\", \"args\": {\"amount\": 999999}}},"
               " {\"name\": \"boom\", \"tool\": \"fail\"}]");
    ev = sgw_event_wait("gate-walk", "saga.rejected");
    sgw_pair_stop();

    printed = sg_json_print(ev);
    cr_expect(strstr(printed, "$.steps[0].compensate.tool") &&
                  strstr(printed, "requires a person's approval"),
              "%s", printed);
    free(printed);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas"), 0, "no saga was stored");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger"), 0,
                 "nothing was called, the charge least of all: %s",
                 sgw_q_text(text, sizeof(text), "SELECT string_agg(key, ',') FROM builtin_ledger"));
}

/* A tool the registry gates: the step waits with its approval packet and
 * calls nothing until approved; then it runs and the saga completes. */
Test(control, a_registry_gated_step_waits_for_its_approval_then_runs, .timeout = 120)
{
    const sg_json_t *ev[16], *req, *args;
    char text[512];

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_submit("gate-ok",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"bank.charge\", \"args\": {\"amount\": "
               "{\"$from\": \"/steps/reserve/key\"}}},"
               " {\"name\": \"notify\", \"tool\": \"noop\"}]");
    req = sgw_event_wait("gate-ok", "step.approval_requested");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM steps WHERE idx = 1"),
                     "awaiting_approval");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1"), 0,
                 "no call before the approval");
    send_decision("saga.approve", "gate-ok", "approve-1", "\"charge\"", "known customer");
    sgw_wait_status("gate-ok", "completed");
    sgw_event_wait("gate-ok", "saga.completed");
    sgw_pair_stop();

    cr_expect_eq(sgw_jint(req, "step"), 1);
    cr_expect_str_eq(sgw_jstr(req, "tool"), "bank.charge");
    cr_expect_str_eq(sgw_jstr(req, "required_by"), "registry");
    args = sg_json_member(req, "args");
    cr_expect_str_eq(sgw_jstr(args, "amount"), "gate-ok:0:f:g1", "the args, references resolved");
    cr_expect_gt(sgw_jint(req, "timeout_ms"), 0);
    sgw_expect_events("gate-ok", ev, "saga.accepted", "step.succeeded", "step.approval_requested",
                      "step.approved", "step.succeeded", "step.succeeded", "saga.completed", NULL);
    cr_expect_str_eq(sgw_jstr(ev[3], "by"), "finance:bob");
    cr_expect_str_eq(sgw_jstr(ev[3], "reason"), "known customer");
    cr_expect_eq(sgw_jint(ev[4], "step"), 1);
    cr_expect_eq(sgw_q_int("SELECT calls FROM builtin_ledger WHERE key = 'gate-ok:1:f:g1'"), 1,
                 "the approved call, once");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT command || '|' || step_idx || '|' || requested_by || '|' || "
                   "outcome FROM saga_controls"),
        "saga.approve|1|finance:bob|accepted");
    expect_no_dead_letters();
}

/* A step's own gate rejected: never called, the saga compensates what it
 * did, and says who rejected it and why. */
Test(control, a_rejected_step_is_never_called_and_the_saga_compensates, .timeout = 120)
{
    const sg_json_t *ev[16];
    char text[512];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("gate-no",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}, "
               "\"approval\": {\"timeout_ms\": 600000, \"reason\": \"above the limit\"}}]");
    sgw_event_wait("gate-no", "step.approval_requested");
    send_decision("saga.reject", "gate-no", "reject-1", "1", "card flagged");
    sgw_wait_status("gate-no", "compensated");
    sgw_event_wait("gate-no", "saga.compensated");
    sgw_pair_stop();

    sgw_expect_events("gate-no", ev, "saga.accepted", "step.succeeded", "step.approval_requested",
                      "step.rejected", "step.failed", "saga.compensating", "step.compensated",
                      "saga.compensated", NULL);
    cr_expect_str_eq(sgw_jstr(ev[2], "required_by"), "step");
    cr_expect_str_eq(sgw_jstr(ev[2], "reason"), "above the limit");
    cr_expect_str_eq(sgw_jstr(ev[3], "by"), "finance:bob");
    cr_expect_str_eq(sgw_jstr(ev[3], "reason"), "card flagged");
    cr_expect_str_eq(sgw_jstr(ev[4], "error_code"), "runtime.approval_rejected");
    cr_expect_eq(sgw_jint(ev[6], "step"), 0);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,failed");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1"), 0,
                 "the rejected step is never called");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg(key, ',' ORDER BY first_at) FROM builtin_ledger"),
        "gate-no:0:f:g1,gate-no:0:c:g1");
    expect_no_dead_letters();
}

/* Nobody decides: the gate's timer (a delayed message through the relay)
 * rejects it, and the saga compensates. */
Test(control, an_approval_not_given_in_time_is_a_rejection, .timeout = 120)
{
    const sg_json_t *ev[16];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("gate-late",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}, "
               "\"approval\": {\"timeout_ms\": 1000}}]");
    sgw_wait_status("gate-late", "compensated");
    sgw_event_wait("gate-late", "saga.compensated");
    sgw_pair_stop();

    sgw_expect_events("gate-late", ev, "saga.accepted", "step.succeeded", "step.approval_requested",
                      "step.rejected", "step.failed", "saga.compensating", "step.compensated",
                      "saga.compensated", NULL);
    cr_expect_eq(sgw_jint(ev[2], "timeout_ms"), 1000);
    cr_expect(sg_json_member(ev[3], "timed_out") != NULL, "step.rejected says it timed out");
    cr_expect_str_eq(sgw_jstr(ev[4], "error_code"), "runtime.approval_timeout");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1"), 0);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls"), 0, "nobody decided");
    expect_no_dead_letters();
}

/* Approvals for a step that is not waiting (not reached yet, no such step,
 * one that ran) are answered and change nothing; the waiting step still
 * waits for its own. */
Test(control, an_approval_for_a_step_not_waiting_is_answered, .timeout = 120)
{
    const sg_json_t *ev;
    char text[512];

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_submit("gate-which",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"bank.charge\", \"args\": {\"n\": 2}},"
               " {\"name\": \"notify\", \"tool\": \"noop\"}]");
    sgw_event_wait("gate-which", "step.approval_requested");
    send_decision("saga.approve", "gate-which", "approve-early", "\"notify\"", "too early");
    ev = sgw_event_wait("gate-which", "saga.command_refused");
    cr_expect_str_eq(sgw_jstr(ev, "error_code"), "input.step.not_awaiting_approval");
    cr_expect_str_eq(sgw_jstr(ev, "command"), "saga.approve");
    cr_expect_str_eq(sgw_jstr(ev, "command_id"), "approve-early");
    cr_expect_str_eq(sgw_jstr(ev, "step_status"), "pending");
    cr_expect_str_eq(sgw_jstr(ev, "status"), "running");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM steps WHERE idx = 1"),
                     "awaiting_approval", "the waiting step still waits");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM steps WHERE idx = 2"),
                     "pending");
    send_decision("saga.approve", "gate-which", "approve-1", "1", "ok");
    sgw_wait_status("gate-which", "completed");
    send_decision("saga.reject", "gate-which", "reject-late", "\"charge\"", "changed my mind");
    sgw_wait_int(2, "SELECT count(*) FROM saga_controls WHERE outcome = 'refused'");
    sgw_pair_stop();

    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg(command_id || ':' || error_code, ',' ORDER BY id) "
                   "FROM saga_controls WHERE outcome = 'refused'"),
        "approve-early:input.step.not_awaiting_approval,"
        "reject-late:input.step.not_awaiting_approval");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM sagas"), "completed",
                     "a late rejection changes nothing");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE '%%:c:%%'"), 0);
    expect_no_dead_letters();
}

/* Cancelling a saga that waits for an approval cancels the gate: the step
 * is skipped, never called, and what ran is compensated. */
Test(control, cancel_of_a_saga_awaiting_approval_cancels_the_gate, .timeout = 120)
{
    const sg_json_t *ev[16];
    char text[512];

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_submit("gate-cxl",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"bank.charge\", \"args\": {\"n\": 2}}]");
    sgw_event_wait("gate-cxl", "step.approval_requested");
    send_cancel("gate-cxl", "cancel-gate-1", "order withdrawn");
    sgw_wait_status("gate-cxl", "cancelled");
    sgw_event_wait("gate-cxl", "saga.cancelled");
    /* An approval after that is answered, and changes nothing. */
    send_decision("saga.approve", "gate-cxl", "approve-after", "\"charge\"", "too late");
    sgw_event_wait("gate-cxl", "saga.command_refused");
    sgw_pair_stop();

    sgw_expect_events("gate-cxl", ev, "saga.accepted", "step.succeeded", "step.approval_requested",
                      "saga.cancelling", "step.compensated", "saga.cancelled",
                      "saga.command_refused", NULL);
    cr_expect_str_eq(sgw_jstr(ev[6], "step_status"), "skipped");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,skipped");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1"), 0);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg(key, ',' ORDER BY first_at) FROM builtin_ledger"),
        "gate-cxl:0:f:g1,gate-cxl:0:c:g1");
    expect_no_dead_letters();
}
