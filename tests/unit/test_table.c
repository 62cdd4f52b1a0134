/* sg_table: human tables line up on a terminal whatever the text is
 * (wide CJK and emoji, combining marks) and never carry control bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_table.h"
#include "unit.h"

Test(table, display_width_counts_terminal_columns)
{
    cr_expect_eq(sg_table_width(""), 0);
    cr_expect_eq(sg_table_width("abc"), 3);
    cr_expect_eq(sg_table_width("caf\xc3\xa9"), 4);              /* é precomposed */
    cr_expect_eq(sg_table_width("cafe\xcc\x81"), 4);             /* e + combining acute */
    cr_expect_eq(sg_table_width("\xe6\x97\xa5\xe6\x9c\xac"), 4); /* 日本 */
    cr_expect_eq(sg_table_width("\xed\x95\x9c"), 2);             /* 한 */
    cr_expect_eq(sg_table_width("\xef\xbc\xa1"), 2);             /* fullwidth A */
    cr_expect_eq(sg_table_width("\xf0\x9f\x98\x80"), 2);         /* 😀 */
    cr_expect_eq(sg_table_width("\xf0\x9f\x9a\x80x"), 3);        /* 🚀x */
    cr_expect_eq(sg_table_width("\xe2\x82\xac"), 1);             /* € is narrow */
}

Test(table, fit_never_splits_a_wide_character)
{
    const char *s = "a\xe6\x97\xa5\xe6\x9c\xac"; /* a日本: 1 + 2 + 2 columns */

    cr_expect_eq(sg_table_fit(s, 0), 0);
    cr_expect_eq(sg_table_fit(s, 1), 1);
    cr_expect_eq(sg_table_fit(s, 2), 1); /* 日 would take columns 2-3 */
    cr_expect_eq(sg_table_fit(s, 3), 4);
    cr_expect_eq(sg_table_fit(s, 5), 7);
}

static char *render(sg_table_t *t, int maxw)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);

    sg_table_print(t, fp, maxw);
    fclose(fp);
    return buf;
}

Test(table, columns_align_by_display_width_and_controls_are_escaped)
{
    static const char *const header[] = {"NAME", "STATUS"};
    sg_table_t *t = sg_table_new(header, 2);
    char *out;

    sg_table_add(t,
                 (const char *const[]){"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "ok"}); /* 日本語 */
    sg_table_add(t, (const char *const[]){"a\x1b[2Jb", NULL});
    sg_table_add(t, (const char *const[]){"\xf0\x9f\x98\x80", "x"});
    cr_expect_eq(sg_table_rows(t), 3);
    out = render(t, 80);
    /* The widest cell is "a\x1b[2Jb" shown as a\x1b[2Jb (9 columns). */
    cr_expect_str_eq(out, "NAME       STATUS\n"
                          "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e     ok\n"
                          "a\\x1b[2Jb  -\n"
                          "\xf0\x9f\x98\x80         x\n");
    free(out);
    sg_table_destroy(t);
}

Test(table, a_cell_wider_than_the_cap_is_cut_with_a_tilde)
{
    sg_table_t *t = sg_table_new(NULL, 2);
    char *out;

    sg_table_add(t, (const char *const[]){"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", "z"});
    sg_table_add(t, (const char *const[]){"abcdef", "y"});
    out = render(t, 4);
    /* 日本語 is 6 columns: 日 (2) and "~" take 3 of the 4, padded to line up */
    cr_expect_str_eq(out, "\xe6\x97\xa5~   z\nabc~  y\n");
    free(out);
    sg_table_destroy(t);
    sg_table_destroy(NULL);
}

/* The rows the operator queries return, rendered as sagactl and dlq-tool
 * show them: a CJK saga name takes two columns a character, so the
 * columns after it start where they start on the other lines (a table
 * aligned by bytes or code points shifts them). */
Test(table, json_rows_with_cjk_names_line_up_by_display_width)
{
    static const sg_table_col_t cols[] = {
        {"SAGA", "saga_id", SG_CELL_TEXT},
        {"NAME", "name", SG_CELL_TEXT},
        {"STATUS", "status", SG_CELL_TEXT},
        {NULL, NULL, SG_CELL_TEXT},
    };
    static const char rows_json[] =
        "[{\"saga_id\": \"s-1\", \"name\": \"pay\", \"status\": \"running\"},"
        " {\"saga_id\": \"s-2\", \"name\": \"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\", "
        "\"status\": \"completed\"},"
        " {\"saga_id\": \"s-3\", \"name\": \"\xef\xbc\xa1\xef\xbc\xa2\", \"status\": null}]";
    sg_json_t *rows = sg_json_parse(rows_json, strlen(rows_json), NULL, NULL);
    char *buf = NULL, *line;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    int n = 0;

    cr_assert_not_null(rows);
    sg_table_print_rows(fp, cols, rows, 60);
    fclose(fp);
    /* 日本語の is 4 characters, 12 bytes, 8 columns: the widest name. */
    cr_expect_str_eq(buf, "SAGA  NAME      STATUS\n"
                          "s-1   pay       running\n"
                          "s-2   \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae  completed\n"
                          "s-3   \xef\xbc\xa1\xef\xbc\xa2      -\n");
    /* Every line's STATUS starts at the same display column. */
    for (line = buf; line && *line && n < 4; n++) {
        char *nl = strchr(line, '\n'), *st;
        *nl = '\0';
        st = strrchr(line, ' ') + 1;
        cr_expect_eq(sg_table_width(line) - sg_table_width(st), 16, "line %d: %s", n, line);
        line = nl + 1;
    }
    cr_expect_eq(n, 4);
    free(buf);
    sg_json_destroy(rows);
}

Test(table, cells_of_json_rows)
{
    static const char row_json[] =
        "{\"step\": 2, \"step_name\": \"ship\", \"msg\": \"down\\nnow\\tthen\", \"none\": null,"
        " \"at\": {\"name\": \"charge\"}, \"ok\": true, \"big\": 12345678901234567890,"
        " \"t\": \"2026-11-21T08:49:01.123456+01:00\", \"idle\": 93784.9}";
    sg_json_t *row = sg_json_parse_exact(row_json, strlen(row_json), NULL);
    char *c;

    cr_assert_not_null(row);
#define EXPECT_CELL(key, how, want)                                                                \
    do {                                                                                           \
        c = sg_table_cell(row, key, how);                                                          \
        cr_expect_str_eq(c ? c : "(null)", want, "cell %s", key);                                  \
        free(c);                                                                                   \
    } while (0)
    EXPECT_CELL("step step_name", SG_CELL_TEXT, "2 ship");
    EXPECT_CELL("step none", SG_CELL_TEXT, "(null)");
    EXPECT_CELL("missing", SG_CELL_TEXT, "(null)");
    EXPECT_CELL("msg", SG_CELL_LINE, "down now then");
    EXPECT_CELL("msg", SG_CELL_TEXT, "down\nnow\tthen");
    EXPECT_CELL("at.name", SG_CELL_TEXT, "charge");
    EXPECT_CELL("at", SG_CELL_TEXT, "{\"name\":\"charge\"}");
    EXPECT_CELL("ok", SG_CELL_TEXT, "true");
    EXPECT_CELL("big", SG_CELL_TEXT, "12345678901234567890");
    EXPECT_CELL("t", SG_CELL_TIME, "2026-11-21 07:49:01");
    EXPECT_CELL("t", SG_CELL_TIME_MS, "2026-11-21 07:49:01.123");
    EXPECT_CELL("idle", SG_CELL_AGE, "1 day 02:03:04");
#undef EXPECT_CELL
    sg_json_destroy(row);
}

/* PostgreSQL writes a timestamptz in JSON in its session's time zone;
 * people read UTC. */
Test(table, timestamps_are_shown_in_utc)
{
    static const struct {
        const char *in, *want;
        bool ms, ok;
    } cases[] = {
        {"2026-11-21T07:49:01+00:00", "2026-11-21 07:49:01", false, true},
        {"2026-11-21T07:49:01.5+00:00", "2026-11-21 07:49:01.500", true, true},
        {"2026-11-21T07:49:01.123999-05:30", "2026-11-21 13:19:01.123", true, true},
        {"2026-01-01T00:30:00+01:00", "2025-12-31 23:30:00", false, true},
        {"2024-02-29T23:00:00-02:00", "2024-03-01 01:00:00", false, true},
        {"1901-12-13T20:45:52+00:53:28", "1901-12-13 19:52:24", false, true},
        {"infinity", "infinity", false, false},
        {"2026-11-21 07:49:01", "2026-11-21 07:49:01", false, false},
    };
    char out[64];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_expect_eq(sg_table_time_utc(cases[i].in, cases[i].ms, out, sizeof(out)), cases[i].ok,
                     "%s", cases[i].in);
        cr_expect_str_eq(out, cases[i].want, "%s", cases[i].in);
    }
}

Test(table, ages)
{
    char out[64];

    sg_table_age(0, out, sizeof(out));
    cr_expect_str_eq(out, "00:00:00");
    sg_table_age(3599.9, out, sizeof(out));
    cr_expect_str_eq(out, "00:59:59");
    sg_table_age(86400, out, sizeof(out));
    cr_expect_str_eq(out, "1 day 00:00:00");
    sg_table_age(3 * 86400 + 7200 + 5, out, sizeof(out));
    cr_expect_str_eq(out, "3 days 02:00:05");
    sg_table_age(-2, out, sizeof(out));
    cr_expect_str_eq(out, "-00:00:02");
}
