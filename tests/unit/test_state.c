/* The saga and step state machines as the worker enforces them
 * (worker/decide/worker_state.c): the names the status columns hold, which
 * changes the worker may make (its setters assert exactly these), and the
 * reference printed as docs/STATES.md. */
#include <stdio.h>
#include <stdlib.h>

#include "../../worker/worker.h"
#include "unit.h"

Test(state, every_status_name_reads_back_and_others_are_refused)
{
    worker_saga_status_t saga;
    worker_step_status_t step;

    for (int s = 0; s < WORKER_SAGA__COUNT; s++) {
        cr_assert_eq(worker_saga_status_parse(worker_saga_status_name(s), &saga), 0);
        cr_assert_eq(saga, s);
    }
    for (int s = 0; s < WORKER_STEP__COUNT; s++) {
        cr_assert_eq(worker_step_status_parse(worker_step_status_name(s), &step), 0);
        cr_assert_eq(step, s);
    }
    /* The names the SQL check constraints allow (0001, 0005, 0016). */
    cr_assert_str_eq(worker_saga_status_name(WORKER_SAGA_COMPENSATING), "compensating");
    cr_assert_str_eq(worker_saga_status_name(WORKER_SAGA_CANCELLING), "cancelling");
    cr_assert_str_eq(worker_saga_status_name(WORKER_SAGA_CANCELLED), "cancelled");
    cr_assert_str_eq(worker_step_status_name(WORKER_STEP_COMPENSATION_FAILED),
                     "compensation_failed");
    cr_assert_eq(worker_saga_status_parse("canceled", &saga), -1);
    cr_assert_eq(worker_step_status_parse("Running", &step), -1);
    cr_assert_eq(worker_step_status_parse("", &step), -1);
}

typedef struct {
    int from, to;
    bool legal;
} case_t;

Test(state, the_worker_moves_a_saga_only_along_its_transitions)
{
    static const case_t cases[] = {
        {WORKER_SAGA_RUNNING, WORKER_SAGA_COMPLETED, true},
        {WORKER_SAGA_RUNNING, WORKER_SAGA_COMPENSATING, true},
        {WORKER_SAGA_RUNNING, WORKER_SAGA_HELD, true},
        {WORKER_SAGA_HELD, WORKER_SAGA_COMPENSATING, true},
        {WORKER_SAGA_COMPENSATING, WORKER_SAGA_COMPENSATED, true},
        {WORKER_SAGA_COMPENSATING, WORKER_SAGA_FAILED, true},
        {WORKER_SAGA_RUNNING, WORKER_SAGA_CANCELLING, true},
        {WORKER_SAGA_HELD, WORKER_SAGA_CANCELLING, true},
        {WORKER_SAGA_CANCELLING, WORKER_SAGA_CANCELLED, true},
        {WORKER_SAGA_CANCELLING, WORKER_SAGA_FAILED, true},
        /* a cancel does not turn a compensation into a cancellation, and
         * a cancelled saga stays so */
        {WORKER_SAGA_COMPENSATING, WORKER_SAGA_CANCELLING, false},
        {WORKER_SAGA_CANCELLED, WORKER_SAGA_CANCELLING, false},
        {WORKER_SAGA_CANCELLING, WORKER_SAGA_COMPENSATED, false},
        /* terminal states stay terminal for the worker */
        {WORKER_SAGA_COMPLETED, WORKER_SAGA_RUNNING, false},
        {WORKER_SAGA_COMPLETED, WORKER_SAGA_COMPENSATING, false},
        {WORKER_SAGA_COMPENSATED, WORKER_SAGA_COMPENSATING, false},
        {WORKER_SAGA_FAILED, WORKER_SAGA_COMPENSATED, false},
        /* only a replay (SQL) brings a saga back */
        {WORKER_SAGA_HELD, WORKER_SAGA_RUNNING, false},
        {WORKER_SAGA_COMPENSATED, WORKER_SAGA_RUNNING, false},
        {WORKER_SAGA_FAILED, WORKER_SAGA_COMPENSATING, false},
        /* no shortcuts */
        {WORKER_SAGA_RUNNING, WORKER_SAGA_COMPENSATED, false},
        {WORKER_SAGA_RUNNING, WORKER_SAGA_FAILED, false},
        {WORKER_SAGA_HELD, WORKER_SAGA_COMPLETED, false},
        {WORKER_SAGA_COMPENSATING, WORKER_SAGA_COMPLETED, false},
        {WORKER_SAGA_RUNNING, WORKER_SAGA_RUNNING, false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_expect_eq(worker_saga_transition_ok(cases[i].from, cases[i].to), cases[i].legal,
                     "saga %s -> %s should be %s", worker_saga_status_name(cases[i].from),
                     worker_saga_status_name(cases[i].to), cases[i].legal ? "legal" : "refused");
}

Test(state, the_worker_moves_a_step_only_along_its_transitions)
{
    static const case_t cases[] = {
        {WORKER_STEP_PENDING, WORKER_STEP_RUNNING, true},
        {WORKER_STEP_RUNNING, WORKER_STEP_RUNNING, true}, /* a retry's attempt */
        {WORKER_STEP_RUNNING, WORKER_STEP_SUCCEEDED, true},
        {WORKER_STEP_PENDING, WORKER_STEP_FAILED, true}, /* refused at its decision */
        {WORKER_STEP_RUNNING, WORKER_STEP_FAILED, true},
        {WORKER_STEP_PENDING, WORKER_STEP_SKIPPED, true},
        {WORKER_STEP_SUCCEEDED, WORKER_STEP_COMPENSATING, true},
        {WORKER_STEP_SUCCEEDED, WORKER_STEP_SKIPPED, true},
        {WORKER_STEP_COMPENSATING, WORKER_STEP_COMPENSATED, true},
        {WORKER_STEP_COMPENSATING, WORKER_STEP_COMPENSATION_FAILED, true},
        /* a step is never called twice to success, nor undone twice */
        {WORKER_STEP_SUCCEEDED, WORKER_STEP_RUNNING, false},
        {WORKER_STEP_SUCCEEDED, WORKER_STEP_SUCCEEDED, false},
        {WORKER_STEP_COMPENSATED, WORKER_STEP_COMPENSATING, false},
        /* what never ran is never compensated */
        {WORKER_STEP_PENDING, WORKER_STEP_COMPENSATING, false},
        {WORKER_STEP_FAILED, WORKER_STEP_COMPENSATING, false},
        {WORKER_STEP_SKIPPED, WORKER_STEP_COMPENSATING, false},
        /* no success without a call */
        {WORKER_STEP_PENDING, WORKER_STEP_SUCCEEDED, false},
        /* only a replay (SQL) brings a step back */
        {WORKER_STEP_FAILED, WORKER_STEP_PENDING, false},
        {WORKER_STEP_COMPENSATION_FAILED, WORKER_STEP_COMPENSATING, false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_expect_eq(worker_step_transition_ok(cases[i].from, cases[i].to), cases[i].legal,
                     "step %s -> %s should be %s", worker_step_status_name(cases[i].from),
                     worker_step_status_name(cases[i].to), cases[i].legal ? "legal" : "refused");
}

Test(state, the_reference_lists_every_status_and_marks_the_replays)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);

    cr_assert_not_null(fp);
    worker_states_reference(fp);
    fclose(fp);
    for (int s = 0; s < WORKER_SAGA__COUNT; s++) {
        char cell[64];
        snprintf(cell, sizeof(cell), "`%s`", worker_saga_status_name(s));
        assert_contains(text, cell);
    }
    for (int s = 0; s < WORKER_STEP__COUNT; s++) {
        char cell[64];
        snprintf(cell, sizeof(cell), "`%s`", worker_step_status_name(s));
        assert_contains(text, cell);
    }
    assert_contains(
        text, "| `running` | `completed` | the last step succeeded | `worker_step_succeeded` |");
    assert_contains(text, "| `compensated` | `running` | dlq-tool replay: run again, steps whose "
                          "effect stands kept | `sagad_dlq_replay()` (SQL) |");
    free(text);
}
