/* sg_utf8_cut: text cut to fit never ends inside a UTF-8 character. */
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_err.h"
#include "sagad/sg_text.h"
#include "unit.h"

Test(text, a_cut_never_splits_a_character)
{
    /* "aé€😀": 1 + 2 + 3 + 4 bytes */
    static const char s[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    static const size_t want[] = {0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10, 10};
    char out[16];

    for (size_t max = 0; max < sizeof(want) / sizeof(want[0]); max++)
        cr_expect_eq(sg_utf8_cut(s, max), want[max], "max %zu: got %zu, want %zu", max,
                     sg_utf8_cut(s, max), want[max]);
    /* a string that already ends in half a character (cut by bytes) */
    cr_expect_eq(sg_utf8_cut("ab\xe2\x82", 10), 2);
    cr_expect_eq(sg_utf8_cut("ab\xf0\x9f\x98", 10), 2);
    cr_expect_eq(sg_utf8_cut("abc", 10), 3);
    cr_expect_str_eq(sg_text_copy(out, 5, s), "a\xc3\xa9");
    cr_expect_str_eq(sg_text_copy(out, 1, s), "");
}

Test(text, an_error_message_cut_to_fit_stays_utf8)
{
    char long_text[600];
    sg_err_t err;

    /* 509 ASCII bytes, then a 3-byte character that straddles the 511-byte
     * end of sg_err_t's message */
    memset(long_text, 'x', 509);
    strcpy(long_text + 509, "\xe2\x82\xac tail");
    sg_err_set(&err, SG_ERRCLASS_PERMANENT, "test.code", "%s", long_text);
    cr_expect_eq(strlen(err.message), 509, "the half character is left out: %zu",
                 strlen(err.message));
}

Test(text, what_producers_sent_is_shown_not_obeyed)
{
    char *v;

    v = sg_text_visible("ok \x1b[31mred\x1b[0m\r\n\tend\x7f", false);
    cr_expect_str_eq(v, "ok \\x1b[31mred\\x1b[0m\\x0d\\x0a\\x09end\\x7f");
    free(v);
    v = sg_text_visible("line 1\nline 2\t\x07", true);
    cr_expect_str_eq(v, "line 1\nline 2\t\\x07", "line breaks and tabs kept for multi-line text");
    free(v);
    /* UTF-8 kept; a C1 control (U+009B, an 8-bit CSI) and bytes that are
     * not UTF-8 escaped */
    v = sg_text_visible("caf\xc3\xa9 \xe2\x82\xac \xc2\x9b"
                        "2J \xff\xfe",
                        false);
    cr_expect_str_eq(v, "caf\xc3\xa9 \xe2\x82\xac \\xc2\\x9b"
                        "2J \\xff\\xfe");
    free(v);
}

Test(text, bytes_with_a_nul_are_shown_whole)
{
    char *v = sg_text_visible_n("ab\0c\r", 5, false);

    cr_expect_str_eq(v, "ab\\x00c\\x0d");
    free(v);
}

Test(text, bytes_become_text_without_loss)
{
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"plain", 5, "plain"},
        {"caf\xc3\xa9", 5, "caf\xc3\xa9"},
        {"", 0, ""},
        {"\xff", 1, "base64:/w=="},             /* not UTF-8 */
        {"a\0b", 3, "base64:YQBi"},             /* a NUL byte */
        {"\xed\xa0\x80", 3, "base64:7aCA"},     /* a surrogate */
        {"base64:x", 8, "base64:YmFzZTY0Ong="}, /* would read as encoded */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *t = sg_text_or_base64(cases[i].in, cases[i].n);
        cr_expect_str_eq(t, cases[i].out, "case %zu", i);
        free(t);
    }
    cr_expect(sg_utf8_valid("caf\xc3\xa9", 5));
    cr_expect_not(sg_utf8_valid("caf\xc3", 4), "half a character");
    cr_expect_not(sg_utf8_valid("\xc0\xaf", 2), "overlong");
    cr_expect_not(sg_utf8_valid("\xf4\x90\x80\x80", 4), "past U+10FFFF");
}

/* The validator sg_json_parse checks every message with. */
Test(text, utf8_validator_directly)
{
    cr_assert(sg_utf8_valid("", 0));
    cr_assert(sg_utf8_valid("plain ascii", 11));
    cr_assert(sg_utf8_valid("\xc2\x80", 2));         /* U+0080, smallest 2-byte */
    cr_assert(sg_utf8_valid("\xe0\xa0\x80", 3));     /* U+0800 */
    cr_assert(sg_utf8_valid("\xef\xbf\xbf", 3));     /* U+FFFF */
    cr_assert(sg_utf8_valid("\xf0\x90\x80\x80", 4)); /* U+10000 */
    cr_assert_not(sg_utf8_valid("\xc1\xbf", 2));     /* overlong U+007F */
    cr_assert_not(sg_utf8_valid("\xe0\x9f\xbf", 3)); /* overlong U+07FF */
    cr_assert_not(sg_utf8_valid("a\0b", 3));
    /* The length bounds the check: a valid prefix of a cut sequence. */
    cr_assert(sg_utf8_valid("ab\xc3\xa9", 2));
    cr_assert_not(sg_utf8_valid("ab\xc3\xa9", 3));
}

/* The hex every credential and trace id is read with: lowercase only, and
 * a NUL or a bad digit refuses without reading past it. */
Test(text, hex_decodes_lowercase_and_refuses_the_rest)
{
    unsigned char out[4] = {0};

    cr_assert_eq(sg_hex_decode("00ff7a10", 4, out), 0);
    cr_assert_eq(out[0], 0x00);
    cr_assert_eq(out[1], 0xff);
    cr_assert_eq(out[2], 0x7a);
    cr_assert_eq(out[3], 0x10);
    cr_assert_eq(sg_hex_decode("", 0, out), 0, "nothing to decode");
    cr_assert_eq(sg_hex_decode("00FF", 2, out), -1, "uppercase is refused");
    cr_assert_eq(sg_hex_decode("0g", 1, out), -1, "not a hex digit");
    cr_assert_eq(sg_hex_decode("g", 1, out), -1, "a bad high digit, its low one unread");
    cr_assert_eq(sg_hex_decode("abc", 2, out), -1, "the NUL ends it");
    cr_assert_eq(sg_hex_decode("ab", 2, out), -1, "the NUL as a high digit");
    cr_assert_eq(sg_hex_decode(" 1", 1, out), -1);
}

/* A schema's maxLength counts characters, not bytes: a name of 128
 * euro signs (384 bytes) is 128 long. */
Test(text, length_in_characters_counts_each_character_once)
{
    char name[3 * 128 + 1] = "";

    cr_expect_eq(sg_utf8_chars(""), 0);
    cr_expect_eq(sg_utf8_chars("abc"), 3);
    cr_expect_eq(sg_utf8_chars("caf\xc3\xa9"), 4, "a 2-byte character");
    cr_expect_eq(sg_utf8_chars("\xf0\x9f\x98\x80!"), 2, "a 4-byte character");
    for (int i = 0; i < 128; i++)
        strcat(name, "\xe2\x82\xac");
    cr_expect_eq(sg_utf8_chars(name), 128);
}

/* Log lines, events and the relay's loss report write times one way: UTC,
 * milliseconds kept (not rounded), zero-padded. */
Test(text, a_time_is_written_in_utc_with_its_milliseconds)
{
    char buf[32];

    cr_expect_str_eq(sg_time_iso(buf, sizeof(buf), 1796006401123LL), "2026-11-30T02:40:01.123Z");
    cr_expect_str_eq(sg_time_iso(buf, sizeof(buf), 1796006401009LL), "2026-11-30T02:40:01.009Z");
    cr_expect_str_eq(sg_time_iso(buf, sizeof(buf), 0), "1970-01-01T00:00:00.000Z");
}
