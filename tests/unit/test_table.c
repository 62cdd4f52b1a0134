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
