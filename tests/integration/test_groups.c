/* Parallel groups end to end (issue 25; docs/WORKER.md, "Parallel
 * groups"): the real worker and relay, a group's members held in flight
 * by exec gates the test opens, and what a producer relies on read back:
 * the events (group.finished's manifest, the terminal event), the rows,
 * the attempts the downstream received and the order effects were
 * undone in.  That members run side by side is shown by the downstream
 * itself: both gates report started before either is let go, which a
 * saga running one call at a time never reaches. */
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_json.h"

TestSuite(groups, .init = sgw_setup, .fini = sgw_teardown, .timeout = 150);

/* The names of the saga's step.compensated events, in order. */
static void compensated_order(const char *saga_id, char *out, size_t size)
{
    const sg_json_t *ev[64];
    size_t n = sgw_saga_events(saga_id, ev, 64), len = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        if (strcmp(sgw_jstr(ev[i], "type"), "step.compensated") == 0)
            len += (size_t)snprintf(out + len, size - len, "%s%s", len ? "," : "",
                                    sgw_jstr(ev[i], "step_name"));
}

/* The index of the saga's first event of type for step name (NULL: any),
 * -1 when none. */
static int event_at(const char *saga_id, const char *type, const char *name)
{
    const sg_json_t *ev[64];
    size_t n = sgw_saga_events(saga_id, ev, 64);

    for (size_t i = 0; i < n; i++)
        if (strcmp(sgw_jstr(ev[i], "type"), type) == 0 &&
            (!name || strcmp(sgw_jstr(ev[i], "step_name"), name) == 0))
            return (int)i;
    return -1;
}

static const char *member_status(const sg_json_t *manifest, const char *member, const char *key)
{
    const sg_json_t *m = sg_json_member(sg_json_member(manifest, "members"), member);

    cr_assert_not_null(m, "no member %s in the manifest", member);
    return sg_json_string(sg_json_member(m, key));
}

/* Two exec gate tools a and b, held in da and db until the test opens
 * them, as the registry entries tools ("<a's>, <b's>"). */
static void gate_pair(char da[64], char db[64], char tools[2100], const char *a, const char *b)
{
    char ta[1024], tb[1024];

    sgw_gate_dir(da, 64);
    sgw_gate_dir(db, 64);
    sgw_gate_tool(ta, sizeof(ta), a, da, NULL);
    sgw_gate_tool(tb, sizeof(tb), b, db, NULL);
    snprintf(tools, 2100, "%s, %s", ta, tb);
}

/* best_effort: the three channels run side by side (both gates start
 * before either is let go); the one that fails is named in the manifest,
 * in the terminal event and in run_health, nothing is undone, and the
 * step after the group reads the manifest through $from. */
Test(groups, best_effort_members_run_side_by_side_and_the_saga_completes_partial)
{
    const sg_json_t *fin, *done, *h, *partial;
    char da[64], db[64], tools[2100], text[512];

    gate_pair(da, db, tools, "mail", "push");
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("grp-be",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"notify\", \"policy\": \"best_effort\", \"parallel\": ["
               "  {\"name\": \"email\", \"tool\": \"mail\", \"args\": {\"to\": \"a@example.com\"}},"
               "  {\"name\": \"sms\", \"tool\": \"fail\", \"args\": {\"code\": \"tool.sms.down\"}},"
               "  {\"name\": \"app\", \"tool\": \"push\", \"args\": {\"device\": \"d-1\"}}]},"
               " {\"name\": \"summary\", \"tool\": \"echo\", \"args\": {"
               "  \"status\": {\"$from\": \"/steps/notify/result/status\"},"
               "  \"email\": {\"$from\": \"/steps/notify/result/members/email/status\"},"
               "  \"sms\": {\"$from\": \"/steps/notify/result/members/sms/error_code\"}}}]");
    sgw_wait_file(da, "started");
    sgw_wait_file(db, "started");
    sgw_touch(da, "open");
    sgw_touch(db, "open");
    sgw_wait_status("grp-be", "completed");
    fin = sgw_event_wait("grp-be", "group.finished");
    done = sgw_event_wait("grp-be", "saga.completed");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(fin, "group"), "notify");
    cr_expect_str_eq(sgw_jstr(fin, "policy"), "best_effort");
    cr_expect_str_eq(sgw_jstr(fin, "status"), "partial");
    cr_expect_str_eq(member_status(fin, "email", "status"), "succeeded");
    cr_expect_str_eq(member_status(fin, "app", "status"), "succeeded");
    cr_expect_str_eq(member_status(fin, "sms", "status"), "failed");
    cr_expect_str_eq(member_status(fin, "sms", "error_code"), "tool.sms.down");
    partial = sg_json_member(done, "partial");
    cr_assert(partial && sg_json_array_size(partial) == 1, "saga.completed names the member");
    cr_expect_str_eq(sgw_jstr(sg_json_array_get(partial, 0), "step_name"), "sms");
    h = sgw_run_health(done);
    cr_expect_eq(sgw_jint(h, "partial"), 1);
    cr_expect_eq(sgw_jint(h, "failed"), 0, "a best_effort failure stops nothing");
    cr_expect_eq(sgw_jint(h, "ok"), 4);

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(name || '=' || status || ':' || "
                                "coalesce(grp, '-'), ',' ORDER BY idx) FROM steps"),
                     "reserve=succeeded:-,email=succeeded:notify,sms=failed:notify,"
                     "app=succeeded:notify,summary=succeeded:-");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', result->>'status', result->>'email', "
                                "result->>'sms') FROM steps WHERE name = 'summary'"),
                     "partial|succeeded|tool.sms.down", "the manifest flowed into the next step");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'compensate'"), 0);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'forward'"), 5,
                 "each member called once");
}

/* best_effort: a reversible member whose call timed out with no retry
 * left may have taken effect (the charge went through, its answer did
 * not).  The saga goes on past a partial group, so it is undone first,
 * under its compensation key, and only then does the group finish and
 * the next step run (issue 35 item 2: it stood when the saga completed,
 * and a cancel would have undone it). */
Test(groups, best_effort_undoes_a_member_whose_outcome_is_unknown_then_goes_on)
{
    static const char tools[] =
        "\"charge.timeout\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "
        "\"reversible\", \"compensation\": \"ledger\", \"retry\": {\"max_attempts\": 1}}";
    const sg_json_t *fin, *done, *partial;
    char text[512];

    sgw_pair_start(tools, 1, NULL);
    sgw_submit("grp-unk",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"pay\", \"policy\": \"best_effort\", \"parallel\": ["
               "  {\"name\": \"card\", \"tool\": \"charge.timeout\", \"args\": {\"class\": "
               "\"timeout\", \"code\": \"tool.timeout\"}},"
               "  {\"name\": \"points\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}}]},"
               " {\"name\": \"ship\", \"tool\": \"ledger\", \"args\": {\"n\": 3}}]");
    sgw_wait_status("grp-unk", "completed");
    fin = sgw_event_wait("grp-unk", "group.finished");
    done = sgw_event_wait("grp-unk", "saga.completed");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(fin, "status"), "partial");
    cr_expect_str_eq(member_status(fin, "card", "status"), "compensated");
    cr_expect_str_eq(member_status(fin, "points", "status"), "succeeded");
    cr_expect_lt(event_at("grp-unk", "step.compensated", "card"),
                 event_at("grp-unk", "group.finished", NULL), "undone before the group finished");
    cr_expect_lt(event_at("grp-unk", "group.finished", NULL),
                 event_at("grp-unk", "step.succeeded", "ship"), "and before the saga went on");
    partial = sg_json_member(done, "partial");
    cr_assert(partial && sg_json_array_size(partial) == 1, "saga.completed names the member");
    cr_expect_str_eq(sgw_jstr(sg_json_array_get(partial, 0), "status"), "compensated");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(name || '=' || status, ',' ORDER BY idx) "
                                "FROM steps"),
                     "reserve=succeeded,card=compensated,points=succeeded,ship=succeeded");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(idempotency_key, ',' ORDER BY id) FROM attempts "
                                "WHERE phase = 'compensate'"),
                     "grp-unk:1:c:g1", "the undo of card, under its compensation key");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg(key, ',' ORDER BY first_at) FROM builtin_ledger"),
        "grp-unk:0:f:g1,grp-unk:2:f:g1,grp-unk:1:c:g1,grp-unk:3:f:g1");
}

/* A step that references a best_effort member that failed is skipped
 * (runtime.skipped_dependency_failed), never called; the steps that do not
 * depend on it run, and the saga completes partial, naming both (issue 35
 * item 6: the saga failed with input.ref.unresolved and compensated
 * everything). */
Test(groups, a_step_that_depends_on_a_failed_member_is_skipped_and_the_rest_runs)
{
    const sg_json_t *done, *partial;
    char text[512];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit(
        "grp-dep",
        "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
        " {\"name\": \"notify\", \"policy\": \"best_effort\", \"parallel\": ["
        "  {\"name\": \"email\", \"tool\": \"echo\", \"args\": {\"id\": \"m-1\"}},"
        "  {\"name\": \"sms\", \"tool\": \"fail\", \"args\": {\"code\": \"tool.sms.down\"}}]},"
        " {\"name\": \"sms_receipt\", \"tool\": \"echo\", \"args\": "
        "{\"of\": {\"$from\": \"/steps/sms/result\"}}},"
        " {\"name\": \"email_receipt\", \"tool\": \"echo\", \"args\": "
        "{\"of\": {\"$from\": \"/steps/email/result/id\"}}}]");
    sgw_wait_status("grp-dep", "completed");
    done = sgw_event_wait("grp-dep", "saga.completed");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(name || '=' || status || ':' || "
                                "coalesce(error_code, '-'), ',' ORDER BY idx) FROM steps"),
                     "reserve=succeeded:-,email=succeeded:-,sms=failed:tool.sms.down,"
                     "sms_receipt=skipped:runtime.skipped_dependency_failed,"
                     "email_receipt=succeeded:-");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 3"), 0,
                 "the skipped step was never called");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'compensate'"), 0,
                 "nothing is undone");
    partial = sg_json_member(done, "partial");
    cr_assert(partial && sg_json_array_size(partial) == 2, "saga.completed names both");
    cr_expect_str_eq(sgw_jstr(sg_json_array_get(partial, 1), "step_name"), "sms_receipt");
    cr_expect_str_eq(sgw_jstr(sg_json_array_get(partial, 1), "error_code"),
                     "runtime.skipped_dependency_failed");
    cr_expect_eq(sgw_jint(sgw_run_health(done), "skipped"), 1);
}

/* all_or_nothing: a member fails; the group still waits for its member in
 * flight, then the saga undoes every member that took effect, the one
 * that finished last first, then the step before the group; the step
 * after the group is skipped_dependency_failed, never called. */
Test(groups, all_or_nothing_undoes_every_member_in_reverse_order_of_completion)
{
    const sg_json_t *fin, *end;
    char db[64], tools[1100], text[512];

    sgw_gate_dir(db, sizeof(db));
    sgw_gate_tool(tools, sizeof(tools), "slowpay", db, NULL);
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("grp-aon",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"pay\", \"policy\": \"all_or_nothing\", \"parallel\": ["
               "  {\"name\": \"card\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}},"
               "  {\"name\": \"wallet\", \"tool\": \"slowpay\", \"args\": {\"n\": 3}},"
               "  {\"name\": \"points\", \"tool\": \"fail\", \"args\": {\"code\": "
               "\"tool.points.refused\"}}]},"
               " {\"name\": \"ship\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 4}}]");
    sgw_wait_file(db, "started");
    sgw_wait_int(1, "SELECT count(*) FROM steps WHERE name = 'card' AND status = 'succeeded'");
    sgw_wait_int(1, "SELECT count(*) FROM steps WHERE name = 'points' AND status = 'failed'");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'compensate'"), 0,
                 "nothing is undone while a member's call is in flight");
    sgw_touch(db, "open");
    sgw_wait_status("grp-aon", "compensated");
    fin = sgw_event_wait("grp-aon", "group.finished");
    end = sgw_event_wait("grp-aon", "saga.compensated");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(fin, "status"), "error");
    cr_expect_str_eq(member_status(fin, "wallet", "status"), "succeeded");
    cr_expect_str_eq(member_status(fin, "points", "error_code"), "tool.points.refused");
    compensated_order("grp-aon", text, sizeof(text));
    cr_expect_str_eq(text, "wallet,card,reserve",
                     "members undone in reverse order of completion, then the earlier step");
    cr_expect_eq(sgw_jint(sgw_run_health(end), "compensated"), 3);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(name || '=' || status, ',' ORDER BY idx) "
                                "FROM steps"),
                     "reserve=compensated,card=compensated,wallet=compensated,points=failed,"
                     "ship=skipped");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT error_code FROM steps WHERE name = 'ship'"),
        "runtime.skipped_dependency_failed");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 4"), 0,
                 "the step after the failed group is never called");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'grp-aon:%%:c:%%'"),
                 3, "one undo per effect that stood");
}

/* fail_fast: the first failure stops the group.  A member waiting for a
 * retry an hour away is not retried: it ends unknown and is undone (its
 * last attempt may have taken effect); the member in flight finishes, is
 * recorded after the stop, and is undone first. */
Test(groups, fail_fast_stops_new_calls_records_the_call_in_flight_and_compensates)
{
    static const char extra[] =
        ", \"flaky.reversible\": {\"adapter\": \"builtin\", \"target\": \"fail\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"ledger\"}";
    static const char *const env[] = {"SAGAD_RETRY_BUDGET_MS=0", NULL};
    char da[64], db[64], ta[1024], tb[1024], tools[2400], text[512];
    int stop, slow_ok;

    sgw_gate_dir(da, sizeof(da));
    sgw_gate_dir(db, sizeof(db));
    sgw_gate_tool(ta, sizeof(ta), "slow", da, NULL);
    sgw_gate_tool(tb, sizeof(tb), "refuser", db, "1");
    snprintf(tools, sizeof(tools), "%s, %s%s", ta, tb, extra);
    sgw_pair_start(tools, 1, env); /* no retry budget: the car's retry waits an hour */
    sgw_submit("grp-ff",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"book\", \"policy\": \"fail_fast\", \"parallel\": ["
               "  {\"name\": \"hotel\", \"tool\": \"slow\", \"args\": {\"n\": 2}},"
               "  {\"name\": \"car\", \"tool\": \"flaky.reversible\", \"args\": {\"class\": "
               "\"transient\", \"code\": \"car.busy\", \"retry_after_ms\": 3600000}},"
               "  {\"name\": \"flight\", \"tool\": \"refuser\", \"args\": {\"n\": 4}}]},"
               " {\"name\": \"ship\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 5}}]");
    sgw_wait_file(da, "started");
    sgw_wait_file(db, "started");
    sgw_event_wait("grp-ff", "step.retry_scheduled");
    sgw_touch(db, "open"); /* the flight is refused */
    sgw_wait_status("grp-ff", "compensating");
    sgw_wait_int(1, "SELECT count(*) FROM steps WHERE name = 'car' AND status = 'unknown'");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'compensate'"), 0,
                 "the undo waits for the hotel's call in flight");
    sgw_touch(da, "open");
    sgw_wait_status("grp-ff", "compensated");
    sgw_event_wait("grp-ff", "saga.compensated");
    sgw_pair_stop();

    stop = event_at("grp-ff", "saga.compensating", NULL);
    slow_ok = event_at("grp-ff", "step.succeeded", "hotel");
    cr_expect(stop >= 0 && slow_ok > stop,
              "the hotel's call in flight finished and was recorded after the stop (%d, %d)", stop,
              slow_ok);
    /* group.finished, like the other policies, once its last call ended
     * (issue 35 item 6) */
    cr_expect_gt(event_at("grp-ff", "group.finished", NULL), slow_ok);
    cr_expect_str_eq(sgw_jstr(sgw_event_wait("grp-ff", "group.finished"), "status"), "error");
    compensated_order("grp-ff", text, sizeof(text));
    cr_expect_str_eq(text, "hotel,car,reserve");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(name || '=' || status, ',' ORDER BY idx) "
                                "FROM steps"),
                     "reserve=compensated,hotel=compensated,car=compensated,flight=failed,"
                     "ship=skipped");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT forward_effect || '|' || error_code FROM steps WHERE "
                                "name = 'car'"),
                     "possible|runtime.group_stopped");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts a JOIN steps s ON s.saga_id = "
                           "a.saga_id AND s.idx = a.step_idx WHERE s.name = 'car' AND "
                           "a.phase = 'forward'"),
                 1, "the stopped member's retry is never made");
}

/* saga.cancel while two members are in flight: both calls finish and are
 * recorded, then everything that stands is undone, the member that
 * finished last first. */
Test(groups, cancel_while_members_are_in_flight_records_them_then_compensates)
{
    char da[64], db[64], tools[2100], text[512], msg[512];
    int cancel_at, x_ok;

    gate_pair(da, db, tools, "gx", "gy");
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("grp-cx",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"both\", \"policy\": \"all_or_nothing\", \"parallel\": ["
               "  {\"name\": \"x\", \"tool\": \"gx\", \"args\": {\"n\": 2}},"
               "  {\"name\": \"y\", \"tool\": \"gy\", \"args\": {\"n\": 3}}]}]");
    sgw_wait_file(da, "started");
    sgw_wait_file(db, "started");
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"cancel-grp-1\", \"saga_id\": "
             "\"grp-cx\", \"by\": \"support:bob\", \"reason\": \"order withdrawn\"}");
    sgw_produce_signed("ann", 0, "grp-cx", msg, strlen(msg));
    sgw_wait_status("grp-cx", "cancelling");
    sgw_touch(da, "open");
    sgw_wait_int(1, "SELECT count(*) FROM steps WHERE name = 'x' AND status = 'succeeded'");
    sgw_touch(db, "open");
    sgw_wait_status("grp-cx", "cancelled");
    sgw_event_wait("grp-cx", "saga.cancelled");
    sgw_pair_stop();

    cancel_at = event_at("grp-cx", "saga.cancelling", NULL);
    x_ok = event_at("grp-cx", "step.succeeded", "x");
    cr_expect(cancel_at >= 0 && x_ok > cancel_at, "the calls in flight were recorded after it");
    compensated_order("grp-cx", text, sizeof(text));
    cr_expect_str_eq(text, "y,x,reserve");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(status, ',' ORDER BY id) FROM attempts WHERE "
                                "phase = 'forward'"),
                     "ok,ok,ok", "each call in flight finished and was recorded");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM sagas"), "cancelled");
}

/* dlq-tool as the operator runs it: the test's environment, the
 * operator's role. */
static int run_dlq(const char *const *args, char **out, char **err)
{
    const char *env[SGW_MAX_ENV + 2];
    size_t n = 0;

    for (size_t i = 0; sgw.env[i]; i++)
        if (strncmp(sgw.env[i], "SAGAD_PG_DSN=", 13) != 0)
            env[n++] = sgw.env[i];
    env[n++] = sgw.op_env;
    env[n] = NULL;
    return sgt_run("dlq-tool", args, env, out, err);
}

/* A replay whose first step to run again is a group member: the replay
 * emits that member's command and its pending siblings' commands come
 * with it (0017's trigger), so the whole group runs again and the saga
 * completes. */
Test(groups, a_replay_that_starts_in_a_group_runs_every_member_again)
{
    const char *args[] = {"replay", NULL, "--reason", "bank fixed", "--operator", "carol", NULL};
    char id[32], text[512], *out = NULL, *err = NULL;
    int rc;

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("grp-rp",
               "[{\"name\": \"lookup\", \"tool\": \"noop\"},"
               " {\"name\": \"pay\", \"policy\": \"all_or_nothing\", \"parallel\": ["
               "  {\"name\": \"card\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               "  {\"name\": \"bank\", \"tool\": \"fail\", \"args\": {\"class\": \"poison\", "
               "\"code\": \"bank.garbled\", \"generations\": 1}}]}]");
    sgw_wait_status("grp-rp", "compensated");
    snprintf(id, sizeof(id), "%lld",
             (long long)sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = 'grp-rp'"));
    args[1] = id;
    rc = run_dlq(args, &out, &err);
    cr_assert_eq(rc, 0, "dlq-tool replay: %s%s", out, err);
    free(out);
    free(err);
    sgw_wait_status("grp-rp", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(name || '=' || status, ',' ORDER BY idx) "
                                "FROM steps"),
                     "lookup=succeeded,card=succeeded,bank=succeeded");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(s.name || ':' || a.status, ',' ORDER BY "
                                "s.idx) FROM attempts a JOIN steps s ON s.saga_id = a.saga_id "
                                "AND s.idx = a.step_idx WHERE a.generation = 2 AND a.phase = "
                                "'forward'"),
                     "card:ok,bank:ok", "both members ran again in the replay's generation");
}

/* A member that crashes the worker, beside a sibling whose call is in
 * flight each time: crash-loop isolation runs each suspect alone at the
 * limit, so the crash is the crashing member's own.  It is dead-lettered
 * (runtime.crash_loop, unknown: it may have taken effect); the sibling
 * runs alone and succeeds; the best_effort group, and the saga, complete
 * partial. */
Test(groups, a_crash_loop_is_the_crashing_members_own, .timeout = 240)
{
    static const char tools[] =
        "\"crash\": {\"adapter\": \"builtin\", \"target\": \"crash\", \"side_effect\": \"read\"}";
    static const int limit = 2;
    char limit_env[64], instance_env[160], instance[96], text[512];
    const char *env[4] = {"SAGAD_WORKER_TEST_ALLOW_CRASH=true", limit_env, instance_env, NULL};
    int crashes;

    /* A static member rejoins at once after a crash. */
    sgt_unique(instance, sizeof(instance), "sgt_instance");
    snprintf(limit_env, sizeof(limit_env), "SAGAD_WORKER_CRASH_LOOP_LIMIT=%d", limit);
    snprintf(instance_env, sizeof(instance_env), "SAGAD_KAFKA_GROUP_INSTANCE_ID=%s", instance);
    sgw_pair_start(tools, 1, env);
    sgw_submit("grp-cl", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"},"
                         " {\"name\": \"g\", \"policy\": \"best_effort\", \"parallel\": ["
                         "  {\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": 1500}},"
                         "  {\"name\": \"boom\", \"tool\": \"crash\"}]}]");
    crashes = sgw_crash_until_terminal("grp-cl", limit + 1);
    sgw_wait_status("grp-cl", "completed");
    sgw_pair_stop();

    cr_expect_eq(crashes, limit, "the crashing member ran crash_loop_limit times, then no more");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', error_code, step_name, phase) FROM "
                                "dead_letters"),
                     "runtime.crash_loop|boom|forward");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(name || '=' || status || ':' || "
                                "coalesce(error_code, '-'), ',' ORDER BY idx) FROM steps"),
                     "hold=succeeded:-,nap=succeeded:-,boom=unknown:runtime.crash_loop");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1 AND error_code = "
                           "'runtime.interrupted'"),
                 limit - 1, "the sibling was in flight at the first crash, alone after");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1 AND status = 'ok'"),
                 1);
}

/* A saga whose first step is a group runs every member, with or without
 * chaining (without, the start's decision still knows the members). */
Test(groups, a_saga_that_starts_with_a_group_runs_every_member)
{
    static const char *const env[] = {"SAGAD_WORKER_CHAIN=false", NULL};
    const sg_json_t *fin;
    char text[256];

    sgw_pair_start(NULL, 1, env);
    sgw_submit("grp-first",
               "[{\"name\": \"g\", \"policy\": \"all_or_nothing\", \"parallel\": ["
               "  {\"name\": \"a\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               "  {\"name\": \"b\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}}]}]");
    sgw_wait_status("grp-first", "completed");
    fin = sgw_event_wait("grp-first", "group.finished");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(fin, "status"), "ok");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key, ',' ORDER BY key) FROM builtin_ledger"),
                     "grp-first:0:f:g1,grp-first:1:f:g1", "each member's effect, once");
}

/* Members whose attempt started in the transaction that started their
 * group: the one that created the saga (a first group) or the one that
 * recorded the step before (now() is a transaction's start time). */
static long long chained_members(const char *saga_id)
{
    return sgw_q_int("SELECT count(*) FROM attempts b JOIN sagas s USING (saga_id) JOIN steps m "
                     "ON m.saga_id = b.saga_id AND m.idx = b.step_idx WHERE b.saga_id = '%s' "
                     "AND b.phase = 'forward' AND m.grp IS NOT NULL AND (b.started_at = "
                     "s.created_at OR b.started_at IN (SELECT a.finished_at FROM attempts a JOIN "
                     "steps p ON p.saga_id = a.saga_id AND p.idx = a.step_idx WHERE a.saga_id = "
                     "b.saga_id AND p.grp IS NULL))",
                     saga_id);
}

/* Chaining (docs/WORKER.md): the members a group starts together are
 * decided in the transaction that starts it, side by side, and their
 * messages, when they come back, are acknowledged and run nothing; a
 * group that starts the saga is chained from the saga.start.  What shows
 * the chaining: chained_members() (the attempts' start times) and the
 * progress line's counts.  The gates only show the members' calls still
 * run side by side, as unchained members' do. */
Test(groups, a_group_started_now_runs_its_members_in_that_transaction)
{
    char da[64], db[64], tools[2100], text[256];

    gate_pair(da, db, tools, "gx", "gy");
    sgw_pair_start(tools, 1, NULL);
    sgw_submit("grp-ch1", "[{\"name\": \"lookup\", \"tool\": \"ledger\", \"args\": {\"n\": 1}},"
                          " {\"name\": \"both\", \"policy\": \"all_or_nothing\", \"parallel\": ["
                          "  {\"name\": \"x\", \"tool\": \"gx\", \"args\": {\"n\": 2}},"
                          "  {\"name\": \"y\", \"tool\": \"gy\", \"args\": {\"n\": 3}},"
                          "  {\"name\": \"z\", \"tool\": \"ledger\", \"args\": {\"n\": 4}}]}]");
    sgw_submit("grp-ch2", "[{\"name\": \"g\", \"policy\": \"all_or_nothing\", \"parallel\": ["
                          "  {\"name\": \"a\", \"tool\": \"ledger\", \"args\": {\"n\": 5}},"
                          "  {\"name\": \"b\", \"tool\": \"ledger\", \"args\": {\"n\": 6}}]}]");
    sgw_wait_file(da, "started");
    sgw_wait_file(db, "started");
    sgw_touch(da, "open");
    sgw_touch(db, "open");
    sgw_wait_status("grp-ch1", "completed");
    sgw_wait_status("grp-ch2", "completed");
    /* Every message consumed: two saga.start, then the step.execute of
     * lookup, x, y, z, a and b. */
    sgw_wait_int(8, "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets");
    sgw_expect_worker_alive();
    sgw_pair_stop();

    cr_expect_eq(chained_members("grp-ch1"), 3, "x, y and z started with lookup's outcome");
    cr_expect_eq(chained_members("grp-ch2"), 2, "a and b started with the saga");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'forward'"), 6,
                 "one attempt per step: a message that came back ran nothing");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key || '=' || calls, ',' ORDER BY key) FROM "
                                "builtin_ledger"),
                     "grp-ch1:0:f:g1=1,grp-ch1:3:f:g1=1,grp-ch2:0:f:g1=1,grp-ch2:1:f:g1=1",
                     "each effect happened once");
    cr_expect(strstr(sgw.worker.err, "chained=6 copies=6") != NULL,
              "the progress line counts the chained members and their copies: %s",
              sgt_bg_tail(&sgw.worker));
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0);
}

/* The one dead letter there is: code, topic, partition and offset of the
 * message it names, and that message's id. */
static void expect_dead_letter_names(const char *code, long long offset, const char *id)
{
    char text[512], want[512];

    cr_assert_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 1);
    snprintf(want, sizeof(want), "%s|%s|0|%lld|%s", code, sgw.topic_int, offset, id);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', error_code, original_topic, "
                                "original_partition, original_offset, "
                                "convert_from(payload, 'UTF8')::jsonb->>'id') FROM dead_letters"),
                     want, "the dead letter names that message");
}

/* A chained member whose call fails waits for its message, which takes
 * over the result: the saga compensates and the dead letter names that
 * message (offset 1 of the internal topic, after x's).  (a) The relay
 * starts once the call has failed, so the message comes after it. */
Test(groups, a_chained_member_failing_is_recorded_on_its_message)
{
    char text[512];

    sgw_world_start(NULL, 1, NULL);
    sgw_start(&sgw.worker, "sagad-worker", NULL);
    sgw_wait_assigned(1);
    sgw_submit("grp-cf", "[{\"name\": \"g\", \"policy\": \"all_or_nothing\", \"parallel\": ["
                         "  {\"name\": \"x\", \"tool\": \"ledger.reversible\", \"args\": {}},"
                         "  {\"name\": \"y\", \"tool\": \"fail\", \"args\": {\"class\": "
                         "\"poison\", \"code\": \"tool.builtin.fail\", \"message\": \"bad\"}}]}]");
    sgw_wait_int(1, "SELECT count(*) FROM attempts WHERE step_idx = 1");
    sleep(1);
    sgw_start(&sgw.relay, "sagad-relay", NULL);
    sgw_wait_status("grp-cf", "compensated");
    /* saga.start, x's and y's step.execute, x's step.compensate */
    sgw_wait_int(4, "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets");
    sgw_pair_stop();

    cr_expect_eq(chained_members("grp-cf"), 2, "both members started with the saga");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(step_idx || ':' || phase || ':' || status, ',' "
                                "ORDER BY id) FROM attempts"),
                     "0:forward:ok,1:forward:error,0:compensate:ok", "y ran once, x was undone: %s",
                     text);
    expect_dead_letter_names("tool.builtin.fail", 1, "cmd:grp-cf:1:f:g1:a1");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT step_name FROM dead_letters"), "y");
    cr_expect(strstr(sgw.worker.err, "chained call failed: its outcome waits for its message"),
              "the worker says why the saga waits: %s", sgt_bg_tail(&sgw.worker));
}

/* (b) The other order: y's message comes while its call still runs.  It
 * waits beside the call, out of the saga's queue, and the offset does not
 * pass it (a crash now would leave y to the next owner); the call then
 * times out and the message's command takes the result at once.  A second
 * copy of y's message (the relay publishes at least once) comes while the
 * call runs too: it waits in the queue and is decided as a duplicate, and
 * the first keeps its place beside the call (when the second took it,
 * the first was never finished and the offset stopped before it). */
Test(groups, a_chained_members_message_waits_beside_its_call)
{
    static const char tools[] =
        "\"sleep.cut\": {\"adapter\": \"builtin\", \"target\": \"sleep\", \"side_effect\": "
        "\"read\", \"timeout_ms\": 5000, \"retry\": {\"max_attempts\": 1}}";
    char text[512], sql[256], *y_msg;
    sgw_reader_t cmds;

    sgw_pair_start(tools, 1, NULL);
    sgw_submit("grp-cl",
               "[{\"name\": \"g\", \"policy\": \"all_or_nothing\", \"parallel\": ["
               "  {\"name\": \"x\", \"tool\": \"ledger.reversible\", \"args\": {}},"
               "  {\"name\": \"y\", \"tool\": \"sleep.cut\", \"args\": {\"ms\": 60000}}]}]");
    sgw_reader_open(&cmds, sgw.topic_int);
    sgw_reader_wait_count(&cmds, 2);
    cr_assert_eq(cmds.v[1].offset, 1);
    y_msg = strdup(cmds.v[1].raw);
    sgw_reader_close(&cmds);
    /* x's message (offset 0) is acknowledged; y's (offset 1) is not while
     * y's call runs. */
    snprintf(sql, sizeof(sql),
             "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets WHERE topic = '%s'",
             sgw.topic_int);
    sgw_wait_int(1, sql);
    sleep(1);
    cr_expect_eq(sgw_q_int("%s", sql), 1, "the offset stays before y's message while y runs");
    sgw_assert_call_running(1, "y's message came while its call still ran");
    sgw_send_internal("grp-cl", y_msg);
    free(y_msg);
    sgw_wait_topic_count(sgw.topic_int, 3);
    sgw_assert_call_running(1, "the second copy came while y's call still ran");
    sgw_wait_status("grp-cl", "compensated");
    /* saga.start, x's and y's step.execute, y's again, x's
     * step.compensate: every one passed */
    sgw_wait_int(5, "SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets");
    sgw_pair_stop();

    cr_expect_eq(chained_members("grp-cl"), 2);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(step_idx || ':' || phase || ':' || status, ',' "
                                "ORDER BY id) FROM attempts"),
                     "0:forward:ok,1:forward:timeout,0:compensate:ok", "%s", text);
    expect_dead_letter_names("runtime.budget.attempts_exhausted", 1, "cmd:grp-cl:1:f:g1:a1");
    cr_expect_null(strstr(sgw.worker.err, "its outcome waits for its message"),
                   "the message was there when the call failed: %s", sgt_bg_tail(&sgw.worker));
}
