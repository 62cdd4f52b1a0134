/* sagad-worker with the relay's WAL source (relay.source = wal): the real
 * worker and relay binaries, every message the worker writes (step
 * commands, events, a retry's timer once due) carried through the WAL
 * instead of the outbox table. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_json.h"

TestSuite(worker_wal, .init = sgw_setup, .fini = sgw_teardown, .timeout = 120);

Test(worker_wal, sagas_retry_complete_and_compensate_through_the_wal)
{
    static const char *const env[] = {"SAGAD_RETRY_BASE_MS=40", "SAGAD_RETRY_CAP_MS=60", NULL};
    const sg_json_t *ev[16];

    sgw_world_start(NULL, 2, env);
    sgw_relay_wal_start();
    sgw_start(&sgw.worker, "sagad-worker", NULL);
    sgw_wait_assigned(2);
    sgw_submit("wal-flaky", "[{\"name\": \"call\", \"tool\": \"fail\", \"args\": {\"class\": "
                            "\"transient\", \"code\": \"tool.http.503\", \"times\": 2}},"
                            " {\"name\": \"after\", \"tool\": \"noop\"}]");
    sgw_submit("wal-perm",
               "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}},"
               " {\"name\": \"ship\", \"tool\": \"fail\", \"args\": {\"class\": \"permanent\", "
               "\"code\": \"carrier.refused\"}}]");
    sgw_wait_status("wal-flaky", "completed");
    sgw_wait_status("wal-perm", "compensated");
    sgw_event_wait("wal-flaky", "saga.completed");
    sgw_event_wait("wal-perm", "saga.compensated");
    sgw_pair_stop();

    sgw_expect_events("wal-flaky", ev, "saga.accepted", "step.retry_scheduled",
                      "step.retry_scheduled", "step.succeeded", "step.succeeded", "saga.completed",
                      NULL);
    sgw_expect_events("wal-perm", ev, "saga.accepted", "step.succeeded", "step.succeeded",
                      "step.failed", "saga.compensating", "step.compensated", "step.compensated",
                      "saga.compensated", NULL);
    cr_expect_eq(sgw_jint(ev[5], "step"), 1, "compensations in reverse order");
    cr_expect_eq(sgw_jint(ev[6], "step"), 0);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM timers"), 0, "both retries' timers fired");
    cr_expect_eq(sgw_q_int("SELECT pg_relation_size('outbox')"), 0,
                 "no message was ever a row of the outbox table");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM relay_settings WHERE source = 'wal'"), 1);
}
