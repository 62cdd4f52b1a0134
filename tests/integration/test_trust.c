/* The trust boundary (issue 36 items 1 and 2) against the real worker and
 * relay, on a broker without ACLs: whatever a producer can write to the
 * commands topic, it can only start sagas its keyring entry allows and
 * decide nothing unless signed by a principal with the role, never its own
 * approvals.  Forged internal commands are dead-lettered unacted on; the
 * downstream (the builtin ledger, which counts every call by key) receives
 * nothing it should not have. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_sign.h"
#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"

TestSuite(trust, .init = sgw_setup, .fini = sgw_teardown, .timeout = 150);

#define GATED_TOOLS                                                                                \
    "\"bank.charge\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "        \
    "\"reversible\", \"compensation\": \"ledger\", \"approval\": \"required\"}"

/* reserve, the gated charge, ship: the checkout of the attack. */
#define CHECKOUT                                                                                   \
    "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"             \
    " {\"name\": \"charge\", \"tool\": \"bank.charge\", \"args\": {\"amount\": 5000}},"            \
    " {\"name\": \"ship\", \"tool\": \"ledger\", \"args\": {\"n\": 2}}]"

static void step_command(char *out, size_t size, const char *type, const char *saga_id, int step)
{
    snprintf(out, size,
             "{\"v\": 1, \"type\": \"%s\", \"id\": \"forged-%s-%d\", \"saga_id\": \"%s\", "
             "\"step\": %d, \"attempt\": 1, \"generation\": 1}",
             type, type, step, saga_id, step);
}

static void decision(char *out, size_t size, const char *type, const char *saga_id, const char *id,
                     const char *by)
{
    snprintf(out, size,
             "{\"v\": 1, \"type\": \"%s\", \"id\": \"%s\", \"saga_id\": \"%s\", \"step\": "
             "\"charge\", \"by\": \"%s\", \"reason\": \"looks fine\"}",
             type, id, saga_id, by);
}

static long long ledger_calls(const char *key)
{
    return sgw_q_int("SELECT coalesce(sum(calls), 0) FROM builtin_ledger WHERE key = '%s'", key);
}

/* The attack of the issue: with the charge waiting for its approval, a
 * producer sends step.execute of the shipment, and every other internal
 * command, unsigned or with a made-up signature.  None is acted on: each
 * is dead-lettered input.command.unauthenticated; nothing shipped, the
 * gate still waits, and the approved saga then completes as it should. */
Test(trust, forged_internal_commands_are_dead_lettered_and_never_acted_on)
{
    static const char bad_mac[] =
        "v1.k1.0000000000000000000000000000000000000000000000000000000000000000";
    sg_kafka_header_t forged = {SG_MAC_HEADER, bad_mac, sizeof(bad_mac) - 1};
    sg_kafka_header_t unknown = {SG_MAC_HEADER,
                                 "v1.k9.00000000000000000000000000000000000000000000000000000000000"
                                 "00000",
                                 70};
    char msg[512], text[512];

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_submit("forge-1", CHECKOUT);
    sgw_event_wait("forge-1", "step.approval_requested");

    step_command(msg, sizeof(msg), "step.execute", "forge-1", 2);
    sgw_produce(sgw.topic_cmd, "forge-1", msg, strlen(msg)); /* unsigned */
    step_command(msg, sizeof(msg), "step.compensate", "forge-1", 0);
    sgw_produce_headers(sgw.topic_cmd, "forge-1", msg, strlen(msg), &forged, 1);
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"step.approval_timeout\", \"id\": \"forged-gate\", "
             "\"saga_id\": \"forge-1\", \"step\": 1, \"generation\": 1}");
    sgw_produce_headers(sgw.topic_cmd, "forge-1", msg, strlen(msg), &unknown, 1);
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.release\", \"id\": \"forged-release\", \"saga_id\": "
             "\"forge-1\", \"generation\": 1}");
    sgw_produce(sgw.topic_cmd, "forge-1", msg, strlen(msg));
    sgw_wait_int(4, "SELECT count(*) FROM dead_letters WHERE error_code = "
                    "'input.command.unauthenticated'");

    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,awaiting_approval,pending", "nothing moved");
    cr_expect_eq(ledger_calls("forge-1:2:f:g1"), 0, "nothing was shipped");
    cr_expect_eq(ledger_calls("forge-1:0:c:g1"), 0, "the reservation was not undone");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx <> 0"), 0);
    cr_expect(strstr(sgw_q_text(text, sizeof(text),
                                "SELECT message FROM dead_letters WHERE convert_from(payload, "
                                "'UTF8') LIKE '%%step.execute%%' LIMIT 1"),
                     "only sagad-relay may publish") != NULL,
              "%s", text);

    /* The gate is intact: approved by another principal, the saga ends. */
    decision(msg, sizeof(msg), "saga.approve", "forge-1", "ok-1", "finance:bob");
    sgw_produce_signed("finance:bob", 0, "forge-1", msg, strlen(msg));
    sgw_wait_status("forge-1", "completed");
    sgw_pair_stop();
    cr_expect_eq(ledger_calls("forge-1:1:f:g1"), 1, "the charge, once, approved");
    cr_expect_eq(ledger_calls("forge-1:2:f:g1"), 1, "shipped once, after the charge");
}

/* Controls that are not signed, signed wrongly, too old, by a principal
 * without the role, or by the submitter are refused, each answered with
 * its reason and recorded; the gate waits on.  Then the approver decides
 * and saga_controls, the events and `sagactl show` name both principals. */
Test(trust, unsigned_forbidden_and_self_approvals_are_refused_with_their_reason)
{
    static const char *const want[] = {"input.auth.unsigned",  "input.auth.bad_signature",
                                       "input.auth.expired",   "input.auth.forbidden",
                                       "input.auth.forbidden", "input.auth.self_approval",
                                       "input.auth.unsigned"};
    char msg[512], other[512], text[1024];
    const char *show[] = {"show", "self-1", NULL};
    sg_kafka_header_t h;
    char *auth, *out = NULL, *err = NULL;
    const sg_json_t *ev;
    sg_err_t e;
    int rc;

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    /* Submitted by agent, which may approve too: but not its own saga. */
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-self-1\", \"saga_id\": "
             "\"self-1\", \"name\": \"test\", \"steps\": %s}",
             CHECKOUT);
    sgw_produce_signed("agent", 0, "self-1", msg, strlen(msg));
    ev = sgw_event_wait("self-1", "saga.accepted");
    cr_expect_str_eq(sgw_jstr(ev, "submitted_by"), "agent");
    sgw_event_wait("self-1", "step.approval_requested");

    decision(msg, sizeof(msg), "saga.approve", "self-1", "c1", "finance:bob");
    sgw_produce(sgw.topic_cmd, "self-1", msg, strlen(msg)); /* 1: unsigned */
    /* 2: signed over other bytes than those sent */
    decision(other, sizeof(other), "saga.approve", "self-1", "c2", "finance:bob");
    auth = sg_auth_sign(sgw.principals[2].priv, "finance:bob", "k1", (int64_t)time(NULL), "self-1",
                        6, msg, strlen(msg), &e);
    cr_assert_not_null(auth);
    h = (sg_kafka_header_t){SG_AUTH_HEADER, auth, strlen(auth)};
    sgw_produce_headers(sgw.topic_cmd, "self-1", other, strlen(other), &h, 1);
    free(auth);
    decision(msg, sizeof(msg), "saga.approve", "self-1", "c3", "finance:bob");
    sgw_produce_signed("finance:bob", -7200, "self-1", msg, strlen(msg)); /* 3: two hours old */
    decision(msg, sizeof(msg), "saga.approve", "self-1", "c4", "support:alice");
    sgw_produce_signed("support:alice", 0, "self-1", msg, strlen(msg)); /* 4: no approve role */
    decision(msg, sizeof(msg), "saga.approve", "self-1", "c5", "limited");
    sgw_produce_signed("limited", 0, "self-1", msg, strlen(msg)); /* 5: not this tool */
    decision(msg, sizeof(msg), "saga.approve", "self-1", "c6", "agent");
    sgw_produce_signed("agent", 0, "self-1", msg, strlen(msg)); /* 6: four eyes */
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"c7\", \"saga_id\": \"self-1\", "
             "\"by\": \"anyone\", \"reason\": \"because\"}");
    sgw_produce(sgw.topic_cmd, "self-1", msg, strlen(msg)); /* 7: unsigned cancel */
    sgw_wait_int(7, "SELECT count(*) FROM saga_controls WHERE outcome = 'refused'");
    for (int i = 0; i < 7; i++) {
        char id[8];
        snprintf(id, sizeof(id), "c%d", i + 1);
        cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                    "SELECT error_code FROM saga_controls WHERE command_id = '%s'",
                                    id),
                         want[i], "control %s", id);
    }
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM steps WHERE idx = 1"),
                     "awaiting_approval", "no refused control decided the gate");
    cr_expect_eq(ledger_calls("self-1:1:f:g1"), 0, "the charge waits");
    ev = sgw_event_wait("self-1", "saga.command_refused");
    cr_expect_str_eq(sgw_jstr(ev, "error_code"), "input.auth.unsigned");

    decision(msg, sizeof(msg), "saga.approve", "self-1", "c8", "finance:bob");
    sgw_produce_signed("finance:bob", 0, "self-1", msg, strlen(msg));
    sgw_wait_status("self-1", "completed");
    ev = sgw_event_wait("self-1", "step.approved");
    cr_expect_str_eq(sgw_jstr(ev, "principal"), "finance:bob");
    rc = sgt_run("sagactl", show, sgw.env, &out, &err);
    sgw_pair_stop();

    cr_expect_eq(ledger_calls("self-1:1:f:g1"), 1, "charged once");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT submitted_by || '|' || (SELECT principal FROM "
                                "saga_controls WHERE outcome = 'accepted') FROM sagas"),
                     "agent|finance:bob");
    cr_expect_eq(rc, 0, "%s%s", out, err);
    cr_expect(strstr(out, "submitted by agent") != NULL, "sagactl show names the submitter:\n%s",
              out);
    cr_expect(strstr(out, "finance:bob (verified)") != NULL, "sagactl show names the approver:\n%s",
              out);
    free(out);
    free(err);
}

/* A saga with an approval gate submitted unsigned is rejected: four eyes
 * needs its submitter.  One without a gate still runs unsigned. */
Test(trust, a_gated_saga_must_be_signed_by_its_submitter)
{
    char msg[512];
    const sg_json_t *ev;

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-u\", \"saga_id\": \"unsig-1\", "
             "\"name\": \"test\", \"steps\": %s}",
             CHECKOUT);
    sgw_produce(sgw.topic_cmd, "unsig-1", msg, strlen(msg));
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-p\", \"saga_id\": \"plain-1\", "
             "\"name\": \"test\", \"steps\": [{\"name\": \"a\", \"tool\": \"ledger\"}]}");
    sgw_produce(sgw.topic_cmd, "plain-1", msg, strlen(msg));
    ev = sgw_event_wait("unsig-1", "saga.rejected");
    sgw_wait_status("plain-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_jstr(ev, "error_code"), "input.auth.unsigned");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = 'unsig-1'"), 0);
    cr_expect_eq(ledger_calls("unsig-1:0:f:g1"), 0, "nothing of it ran");
}

/* A key rotated with no lead and no grace: the relay, re-reading every
 * second, signs with the new key at once; the worker, whose periodic
 * re-read is an hour away, meets a key id it does not hold and reads the
 * keys again then, instead of refusing sagad's own commands.  The old key
 * is gone for good: a copy signed with it is refused. */
Test(trust, a_rotated_key_is_read_by_the_worker_when_first_seen)
{
    static const char *const relay_env[] = {"SAGAD_SECURITY_KEY_RELOAD_MS=1000", NULL};
    static const char *const worker_env[] = {"SAGAD_SECURITY_KEY_RELOAD_MS=3600000", NULL};
    sgw_reader_t cmds;
    const sgw_msg_t *old = NULL;
    char text[256];

    sgw_world_start(NULL, 1, NULL);
    sgw_start(&sgw.relay, "sagad-relay", relay_env);
    sgw_start(&sgw.worker, "sagad-worker", worker_env);
    sgw_submit("rot-1", "[{\"name\": \"a\", \"tool\": \"ledger\"}, {\"name\": \"b\", \"tool\": "
                        "\"ledger\"}]");
    sgw_wait_status("rot-1", "completed");
    sgw_reader_open(&cmds, sgw.topic_int);
    sgw_reader_wait_count(&cmds, 2);
    for (size_t i = 0; i < cmds.n; i++)
        if (strcmp(sgw_jstr(cmds.v[i].doc, "type"), "step.execute") == 0)
            old = &cmds.v[i];
    cr_assert_not_null(old);
    cr_expect(strncmp(sgw_jstr(old->headers, "sagad-mac"), "v1.k1.", 6) == 0, "%s",
              sgw_jstr(old->headers, "sagad-mac"));

    sgw_q_text(text, sizeof(text), "SELECT sagad_internal_key_rotate('0 s', '0 s')");
    sleep(2); /* the relay's re-read */
    sgw_submit("rot-2", "[{\"name\": \"a\", \"tool\": \"ledger\"}, {\"name\": \"b\", \"tool\": "
                        "\"ledger\"}]");
    sgw_wait_status("rot-2", "completed");
    /* rot-2's step commands on the topic, signed with the new key, before
     * the old copy goes after them: the topic has one partition, so the
     * worker reads a message of the new key (and re-reads the keys,
     * dropping the expired one) before it reads the old copy.  Produced
     * right after rot-2 completed instead, the old copy could be read
     * first, while the worker still held the old key (CI, ASan build:
     * accepted, no dead letter). */
    {
        size_t at = (size_t)(old - cmds.v); /* cmds.v moves as it grows */
        sgw_reader_wait_count(&cmds, 4);
        old = &cmds.v[at];
    }
    for (size_t i = 2; i < cmds.n; i++)
        cr_expect(strncmp(sgw_jstr(cmds.v[i].headers, "sagad-mac"), "v1.k1.", 6) != 0,
                  "rot-2's commands are signed with the new key: %s",
                  sgw_jstr(cmds.v[i].headers, "sagad-mac"));
    /* the copy signed with the expired key */
    {
        const char *mac = sgw_jstr(old->headers, "sagad-mac");
        sg_kafka_header_t h = {SG_MAC_HEADER, mac, strlen(mac)};
        sgw_produce_headers(sgw.topic_int, old->key, old->raw, old->len, &h, 1);
    }
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters WHERE error_code = "
                    "'input.command.unauthenticated'");
    sgw_pair_stop();
    sgw_reader_close(&cmds);

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 1,
                 "only the copy signed with the retired key was refused");
    cr_expect(strstr(sgt_bg_tail(&sgw.worker), "made with a key this worker does not hold") != NULL,
              "the refusal says why");
}

/* A key that expires while the worker holds it is refused from its
 * expires_at on, not from the worker's next periodic read of the keys (an
 * hour here): the rotation gives the old key 4 s of grace, the worker
 * learns of it when it first reads a command of the new key, and a copy
 * signed with the old key after those 4 s is dead-lettered. */
Test(trust, an_expired_key_is_refused_from_its_expiry_on)
{
    static const char *const relay_env[] = {"SAGAD_SECURITY_KEY_RELOAD_MS=1000", NULL};
    static const char *const worker_env[] = {"SAGAD_SECURITY_KEY_RELOAD_MS=3600000", NULL};
    sgw_reader_t cmds;
    size_t old = 0;
    char text[256];
    double rotated;

    sgw_world_start(NULL, 1, NULL);
    sgw_start(&sgw.relay, "sagad-relay", relay_env);
    sgw_start(&sgw.worker, "sagad-worker", worker_env);
    sgw_submit("exp-1", "[{\"name\": \"a\", \"tool\": \"ledger\"}]");
    sgw_wait_status("exp-1", "completed");
    sgw_reader_open(&cmds, sgw.topic_int);
    sgw_reader_wait_count(&cmds, 1);
    cr_assert_str_eq(sgw_jstr(cmds.v[old].doc, "type"), "step.execute");
    cr_assert(strncmp(sgw_jstr(cmds.v[old].headers, "sagad-mac"), "v1.k1.", 6) == 0, "%s",
              sgw_jstr(cmds.v[old].headers, "sagad-mac"));

    sgw_q_text(text, sizeof(text), "SELECT sagad_internal_key_rotate('0 s', '4 s')");
    rotated = sgt_now_s();
    sleep(2); /* the relay's re-read: it signs with the new key */
    sgw_submit("exp-2", "[{\"name\": \"a\", \"tool\": \"ledger\"}]");
    sgw_wait_status("exp-2", "completed");
    sgw_reader_wait_count(&cmds, 2);
    cr_assert(strncmp(sgw_jstr(cmds.v[1].headers, "sagad-mac"), "v1.k1.", 6) != 0,
              "exp-2's command is signed with the new key: %s",
              sgw_jstr(cmds.v[1].headers, "sagad-mac"));
    while (sgt_now_s() < rotated + 5)
        usleep(100000);
    {
        const char *mac = sgw_jstr(cmds.v[old].headers, "sagad-mac");
        sg_kafka_header_t h = {SG_MAC_HEADER, mac, strlen(mac)};
        sgw_produce_headers(sgw.topic_int, cmds.v[old].key, cmds.v[old].raw, cmds.v[old].len, &h,
                            1);
    }
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters WHERE error_code = "
                    "'input.command.unauthenticated'");
    sgw_pair_stop();
    sgw_reader_close(&cmds);
    cr_expect(strstr(sgt_bg_tail(&sgw.worker), "made with a key this worker does not hold") != NULL,
              "the refusal says why");
}

/* ---- the internal topic (docs/ARCHITECTURE.md, "Trust boundary") -------- */

/* The message of that type and id read on r, waited for. */
static const sgw_msg_t *read_message(sgw_reader_t *r, const char *type, const char *id)
{
    double deadline = sgt_now_s() + SGW_WAIT_S;

    for (;;) {
        for (size_t i = 0; i < r->n; i++)
            if (strcmp(sgw_jstr(r->v[i].doc, "type"), type) == 0 &&
                strcmp(sgw_jstr(r->v[i].doc, "id"), id) == 0)
                return &r->v[i];
        cr_assert_lt(sgt_now_s(), deadline, "no %s %s on the topic", type, id);
        sgw_expect_worker_alive();
        sgw_reader_poll(r, 200);
    }
}

/* An approval sent to the commands topic is not decided there: the worker
 * forwards it into the internal topic, its bytes, key and sagad-auth as
 * they were, signed by the relay, and decides it when it reads it there,
 * in order with the saga's step commands.  The gate opens and the saga
 * completes, the approver recorded. */
Test(trust, a_control_on_the_commands_topic_is_forwarded_and_decided)
{
    char msg[512], text[256], want_from[200];
    sgw_reader_t internal;
    const sgw_msg_t *copy;
    sg_kafka_header_t h;
    char *auth;
    sg_err_t e;

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_reader_open(&internal, sgw.topic_int);
    sgw_submit("fwd-1", CHECKOUT);
    sgw_event_wait("fwd-1", "step.approval_requested");

    decision(msg, sizeof(msg), "saga.approve", "fwd-1", "fwd-ok", "finance:bob");
    auth = sg_auth_sign(sgw.principals[2].priv, "finance:bob", "k1", (int64_t)time(NULL), "fwd-1",
                        5, msg, strlen(msg), &e);
    cr_assert_not_null(auth, "%s", e.message);
    h = (sg_kafka_header_t){SG_AUTH_HEADER, auth, strlen(auth)};
    sgw_produce_headers(sgw.topic_cmd, "fwd-1", msg, strlen(msg), &h, 1);
    sgw_wait_status("fwd-1", "completed");

    copy = read_message(&internal, "saga.approve", "fwd-ok");
    cr_expect_str_eq(copy->key, "fwd-1", "keyed by its saga id");
    cr_expect_eq(copy->len, strlen(msg));
    cr_expect_str_eq(copy->raw, msg, "its bytes unchanged");
    cr_expect_str_eq(sgw_jstr(copy->headers, SG_AUTH_HEADER), auth, "its signature kept");
    cr_expect(strncmp(sgw_jstr(copy->headers, SG_MAC_HEADER), "v1.", 3) == 0,
              "signed by the relay: %s", sgw_jstr(copy->headers, SG_MAC_HEADER));
    snprintf(want_from, sizeof(want_from), "%s:0:", sgw.topic_cmd);
    cr_expect(
        strncmp(sgw_jstr(copy->headers, "sagad-forwarded-from"), want_from, strlen(want_from)) == 0,
        "where it was read: %s", sgw_jstr(copy->headers, "sagad-forwarded-from"));
    sgw_pair_stop();
    sgw_reader_close(&internal);
    free(auth);

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT outcome || '|' || principal FROM saga_controls WHERE "
                                "command_id = 'fwd-ok'"),
                     "accepted|finance:bob");
    cr_expect_eq(ledger_calls("fwd-1:1:f:g1"), 1, "the charge, once, approved");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0);
    /* Both offsets moved: the approval read on each topic. */
    cr_expect_eq(sgw_q_int("SELECT count(DISTINCT topic) FROM consumer_offsets WHERE "
                           "next_offset > 0"),
                 2);
}

/* Only the relay writes the internal topic: whatever a message there is,
 * a submission, a control signed by a principal allowed to send it, or a
 * step command, without the relay's sagad-mac it is dead-lettered and
 * never acted on.  The same cancel sent to the commands topic is
 * forwarded, signed by the relay, and accepted. */
Test(trust, an_unsigned_message_of_any_type_on_the_internal_topic_is_dead_lettered)
{
    static const char bad_mac[] =
        "v1.k1.0000000000000000000000000000000000000000000000000000000000000000";
    sg_kafka_header_t forged = {SG_MAC_HEADER, bad_mac, sizeof(bad_mac) - 1};
    char msg[512], start[512], text[256];
    sg_kafka_header_t h[2];
    char *auth;
    sg_err_t e;

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_submit("int-1", CHECKOUT);
    sgw_event_wait("int-1", "step.approval_requested");

    snprintf(
        start, sizeof(start),
        "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-int-2\", \"saga_id\": "
        "\"int-2\", \"name\": \"test\", \"steps\": [{\"name\": \"a\", \"tool\": \"ledger\"}]}");
    sgw_produce(sgw.topic_int, "int-2", start, strlen(start));
    sgw_produce_headers(sgw.topic_int, "int-2", start, strlen(start), &forged, 1);
    snprintf(msg, sizeof(msg),
             "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"int-cxl\", \"saga_id\": \"int-1\", "
             "\"by\": \"alice\", \"reason\": \"stop\"}");
    auth = sg_auth_sign(sgw.principals[4].priv, "support:alice", "k1", (int64_t)time(NULL), "int-1",
                        5, msg, strlen(msg), &e);
    cr_assert_not_null(auth, "%s", e.message);
    h[0] = (sg_kafka_header_t){SG_AUTH_HEADER, auth, strlen(auth)};
    h[1] = (sg_kafka_header_t){"sagad-forwarded-at", "1", 1};
    sgw_produce_headers(sgw.topic_int, "int-1", msg, strlen(msg), h, 2);
    step_command(text, sizeof(text), "step.execute", "int-1", 2);
    sgw_produce(sgw.topic_int, "int-1", text, strlen(text));
    sgw_wait_int(4, "SELECT count(*) FROM dead_letters WHERE error_code = "
                    "'input.command.unauthenticated'");

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = 'int-2'"), 0,
                 "no saga started");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls"), 0, "no control decided");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,awaiting_approval,pending", "nothing moved");
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM dead_letters WHERE original_topic = '%s'", sgw.topic_int),
        4, "each where it was read");
    cr_expect(strstr(sgw_q_text(text, sizeof(text),
                                "SELECT message FROM dead_letters WHERE convert_from(payload, "
                                "'UTF8') LIKE '%%saga.cancel%%'"),
                     "was read on the internal topic") != NULL,
              "%s", text);

    /* The same signed cancel where producers write it. */
    sgw_produce_headers(sgw.topic_cmd, "int-1", msg, strlen(msg), h, 1);
    sgw_wait_status("int-1", "cancelled");
    sgw_pair_stop();
    free(auth);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT outcome || '|' || principal FROM saga_controls WHERE "
                                "command_id = 'int-cxl'"),
                     "accepted|support:alice");
    cr_expect_eq(ledger_calls("int-1:2:f:g1"), 0, "nothing was shipped");
}

/* A rolling upgrade: an older worker wrote its step commands to the
 * commands topic, and the relay published them there, signed.  The new
 * worker still runs such a command when its sagad-mac holds, and the
 * saga's next steps go through the internal topic. */
Test(trust, a_signed_step_command_on_the_commands_topic_still_runs)
{
    static const char *const no_chain[] = {"SAGAD_WORKER_CHAIN=false", NULL};
    char text[512], want[512];

    sgw_world_start(NULL, 1, no_chain);
    sgw_start(&sgw.worker, "sagad-worker", NULL);
    sgw_submit("old-1", "[{\"name\": \"a\", \"tool\": \"ledger\"}, {\"name\": \"b\", \"tool\": "
                        "\"ledger\"}]");
    /* The first step's command waits in the outbox (no relay yet); as an
     * older worker wrote it, for the commands topic. */
    sgw_wait_int(1, "SELECT count(*) FROM outbox WHERE convert_from(payload, 'UTF8') LIKE "
                    "'%step.execute%'");
    sgw_proc_join(&sgw.worker, SIGTERM);
    sgt_bg_free(&sgw.worker);
    cr_assert_eq(sgw_q_int("UPDATE outbox SET topic = '%s' WHERE topic = '%s' RETURNING 1",
                           sgw.topic_cmd, sgw.topic_int),
                 1);
    sgw_start(&sgw.relay, "sagad-relay", NULL);
    sgw_start(&sgw.worker, "sagad-worker", NULL);
    sgw_wait_status("old-1", "completed");
    sgw_pair_stop();

    cr_expect_eq(ledger_calls("old-1:0:f:g1"), 1, "step a ran once, from the commands topic");
    cr_expect_eq(ledger_calls("old-1:1:f:g1"), 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters"), 0);
    /* saga.start and a's command read on the commands topic, b's on the
     * internal one. */
    snprintf(want, sizeof(want), "%s=2,%s=1", sgw.topic_cmd, sgw.topic_int);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(topic || '=' || next_offset, ',' ORDER BY "
                                "topic = '%s') FROM consumer_offsets",
                                sgw.topic_int),
                     want);
}
