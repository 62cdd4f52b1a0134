/* sg_ops and the operator queries' inputs, without a database: durations
 * and moments of the filters, dead-letter IDs, and the JSON the queries'
 * rows are read with (numbers given back as the database holds them). */
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_dlq_query.h"
#include "sagad/sg_json.h"
#include "sagad/sg_ops.h"
#include "unit.h"

Test(ops, durations_are_a_whole_number_and_a_unit)
{
    static const struct {
        const char *in;
        bool ok;
        int64_t ms;
    } cases[] = {
        {"500ms", true, 500},  {"90s", true, 90000},    {"30m", true, 1800000},
        {"2h", true, 7200000}, {"7d", true, 604800000}, {"0s", true, 0},
        {"", false, 0},        {"5", false, 0},         {"-5m", false, 0},
        {"+5m", false, 0},     {" 5m", false, 0},       {"1.5h", false, 0},
        {"5 m", false, 0},     {"5w", false, 0},        {"99999999999999d", false, 0},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t ms = -1;
        cr_expect_eq(sg_ops_duration_ms(cases[i].in, &ms), cases[i].ok, "\"%s\"", cases[i].in);
        if (cases[i].ok)
            cr_expect_eq(ms, cases[i].ms, "\"%s\"", cases[i].in);
    }
}

Test(ops, a_moment_is_an_age_or_a_timestamp_left_to_postgresql)
{
    sg_ops_when_t w;

    cr_assert(sg_ops_when_parse("2h", &w));
    cr_expect_eq(w.kind, SG_OPS_WHEN_AGO);
    cr_expect_eq(w.ago_ms, 7200000);
    cr_assert(sg_ops_when_parse("2026-11-21 07:49:01+00", &w));
    cr_expect_eq(w.kind, SG_OPS_WHEN_AT);
    cr_expect_str_eq(w.at, "2026-11-21 07:49:01+00");
    cr_expect_not(sg_ops_when_parse("", &w));
    cr_expect_eq(w.kind, SG_OPS_WHEN_NONE);
    cr_expect_not(sg_ops_when_parse(NULL, &w));
}

Test(ops, dead_letter_ids_are_digits)
{
    int64_t id = 0;

    cr_expect(sg_dlq_id_parse("42", &id));
    cr_expect_eq(id, 42);
    cr_expect(sg_dlq_id_parse("999999999999999999", &id));
    cr_expect_not(sg_dlq_id_parse("1234567890123456789", &id), "19 digits");
    cr_expect_not(sg_dlq_id_parse("-1", &id));
    cr_expect_not(sg_dlq_id_parse("4x", &id));
    cr_expect_not(sg_dlq_id_parse("", &id));
    cr_expect_not(sg_dlq_id_parse(NULL, &id));
}

/* What the database holds goes out as it is: an id beyond 2^53, a result
 * with 17 significant digits, a value below a double's range. */
Test(ops, json_of_the_database_keeps_its_numbers)
{
    static const char doc[] = "{\"id\": 12345678901234567890, \"small\": 1e-400, \"pi\": "
                              "3.1415926535897932, \"n\": 7, \"x\": 1.50, \"s\": \"12\", "
                              "\"list\": [9007199254740993, 2]}";
    sg_json_t *j = sg_json_parse_exact(doc, strlen(doc), NULL);
    char *text;
    double v;

    cr_assert_not_null(j);
    text = sg_json_print(j);
    cr_expect_str_eq(text, "{\"id\":12345678901234567890,\"small\":1e-400,\"pi\":"
                           "3.1415926535897932,\"n\":7,\"x\":1.5,\"s\":\"12\","
                           "\"list\":[9007199254740993,2]}");
    free(text);
    cr_expect(sg_json_number(sg_json_member(j, "n"), &v) && v == 7);
    cr_expect_not(sg_json_number(sg_json_member(j, "id"), &v), "kept as text");
    sg_json_destroy(j);
    cr_expect_null(sg_json_parse_exact("{\"a\": ", 6, NULL));
    cr_expect_null(sg_json_parse_exact("\xff", 1, NULL));
}
