/* sg_err: the class drives retry / compensate / dead-letter, so the
 * mapping class -> retriable and the class names (stored in the DLQ and
 * used by dlq-tool filters) must not drift. */
#include <criterion/criterion.h>
#include <string.h>

#include "sagad/sg_err.h"
#include "unit.h"

Test(err, set_returns_minus_one_and_fills_every_field)
{
    sg_err_t err;

    memset(&err, 0x5a, sizeof(err));
    cr_assert_eq(sg_err_set(&err, SG_ERRCLASS_PERMANENT, "input.schema.required",
                            "%s: required %s is missing", "$.a", "a string"),
                 -1);
    cr_assert_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_assert_str_eq(err.code, "input.schema.required");
    cr_assert_str_eq(err.message, "$.a: required a string is missing");
    cr_assert_not(err.retriable);
    cr_assert_not(err.fatal, "sg_err_set must reset a stale fatal flag");
}

Test(err, retriable_only_for_transient_throttled_timeout)
{
    static const struct {
        sg_errclass_t cls;
        bool retriable;
    } cases[] = {
        {SG_ERRCLASS_NONE, false},   {SG_ERRCLASS_TRANSIENT, true},  {SG_ERRCLASS_THROTTLED, true},
        {SG_ERRCLASS_TIMEOUT, true}, {SG_ERRCLASS_PERMANENT, false}, {SG_ERRCLASS_POISON, false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_err_t err;

        sg_err_clear(&err);
        sg_err_set(&err, cases[i].cls, "x.y", "m");
        cr_assert_eq(err.retriable, cases[i].retriable, "class %s: retriable should be %d",
                     sg_errclass_name(cases[i].cls), cases[i].retriable);
    }
}

Test(err, null_err_is_allowed)
{
    cr_assert_eq(sg_err_set(NULL, SG_ERRCLASS_TRANSIENT, "x.y", "ignored %d", 1), -1);
    sg_err_clear(NULL);
    sg_err_prefix(NULL, "step");
}

Test(err, clear_resets_to_no_error)
{
    sg_err_t err;

    sg_err_set(&err, SG_ERRCLASS_TIMEOUT, "pg.timeout", "slow");
    err.fatal = true;
    sg_err_clear(&err);
    cr_assert_eq(err.cls, SG_ERRCLASS_NONE);
    cr_assert_not(err.retriable);
    cr_assert_not(err.fatal);
    cr_assert_str_eq(err.code, "");
    cr_assert_str_eq(err.message, "");
}

Test(err, long_code_and_message_are_truncated_and_terminated)
{
    char big[2000];
    sg_err_t err;

    memset(big, 'm', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sg_err_set(&err, SG_ERRCLASS_POISON, big, "%s", big);
    cr_assert_eq(strlen(err.code), sizeof(err.code) - 1);
    cr_assert_eq(strlen(err.message), sizeof(err.message) - 1);
}

Test(err, prefix_names_the_failed_step)
{
    sg_err_t err;

    sg_err_set(&err, SG_ERRCLASS_TRANSIENT, "pg.connection", "connection refused");
    sg_err_prefix(&err, "migration %s", "0001_core");
    cr_assert_str_eq(err.message, "migration 0001_core: connection refused");
    sg_err_prefix(&err, "migrate");
    cr_assert_str_eq(err.message, "migrate: migration 0001_core: connection refused");
    cr_assert_str_eq(err.code, "pg.connection", "prefix must not touch the code");
    cr_assert_eq(err.cls, SG_ERRCLASS_TRANSIENT);
}

Test(err, prefix_on_full_message_stays_terminated)
{
    char big[600];
    sg_err_t err;

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sg_err_set(&err, SG_ERRCLASS_PERMANENT, "x.y", "%s", big);
    sg_err_prefix(&err, "step");
    cr_assert_eq(strncmp(err.message, "step: xxx", 9), 0, "got: %.20s", err.message);
    cr_assert_eq(strlen(err.message), sizeof(err.message) - 1);
}

Test(err, class_names_round_trip)
{
    static const struct {
        sg_errclass_t cls;
        const char *name;
    } cases[] = {
        {SG_ERRCLASS_NONE, "none"},           {SG_ERRCLASS_TRANSIENT, "transient"},
        {SG_ERRCLASS_THROTTLED, "throttled"}, {SG_ERRCLASS_TIMEOUT, "timeout"},
        {SG_ERRCLASS_PERMANENT, "permanent"}, {SG_ERRCLASS_POISON, "poison"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_errclass_t parsed = (sg_errclass_t)-1;

        cr_assert_str_eq(sg_errclass_name(cases[i].cls), cases[i].name);
        cr_assert_eq(sg_errclass_parse(cases[i].name, &parsed), 0, "%s", cases[i].name);
        cr_assert_eq(parsed, cases[i].cls, "%s", cases[i].name);
    }
}

Test(err, unknown_class_names)
{
    sg_errclass_t parsed = SG_ERRCLASS_TIMEOUT;

    cr_assert_str_eq(sg_errclass_name((sg_errclass_t)99), "unknown");
    cr_assert_eq(sg_errclass_parse("fatal", &parsed), -1);
    cr_assert_eq(sg_errclass_parse("Transient", &parsed), -1);
    cr_assert_eq(sg_errclass_parse("", &parsed), -1);
    cr_assert_eq(parsed, SG_ERRCLASS_TIMEOUT, "a failed parse must not write *out");
}
