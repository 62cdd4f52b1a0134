/* sg_json: hostile input is refused with a stable code before cJSON sees
 * it, and typed access reports the JSON path of what is wrong.  Inputs are
 * copied into buffers of exactly their length with no terminator, as Kafka
 * hands them over, so the sanitizer build catches any over-read. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_json.h"
#include "sagad/sg_text.h"
#include "unit.h"

/* A malloc'd copy of len bytes with no NUL after them. */
static char *exact(const void *bytes, size_t len)
{
    char *p = malloc(len ? len : 1);

    cr_assert_not_null(p);
    memcpy(p, bytes, len);
    return p;
}

static sg_json_t *parse_bytes(const void *bytes, size_t len, const sg_json_limits_t *lim,
                              sg_err_t *err)
{
    char *buf = exact(bytes, len);
    sg_json_t *root;

    sg_err_clear(err);
    root = sg_json_parse(buf, len, lim, err);
    free(buf);
    return root;
}

static sg_json_t *parse_ok(const char *text)
{
    sg_err_t err;
    sg_json_t *root = parse_bytes(text, strlen(text), NULL, &err);

    cr_assert_not_null(root, "parse %s: %s %s", text, err.code, err.message);
    return root;
}

/* Parsing len bytes fails with code, class poison. */
static void expect_refused(const void *bytes, size_t len, const sg_json_limits_t *lim,
                           const char *code)
{
    sg_err_t err;
    sg_json_t *root = parse_bytes(bytes, len, lim, &err);

    cr_assert_null(root, "%zu bytes accepted, expected %s", len, code);
    cr_assert_str_eq(err.code, code, "%s", err.message);
    cr_assert_eq(err.cls, SG_ERRCLASS_POISON, "%s: class %s", code, sg_errclass_name(err.cls));
    cr_assert_not(err.retriable);
}

#define REFUSED_LIT(lit, code) expect_refused((lit), sizeof(lit) - 1, NULL, (code))

/* ---- parsing ---- */

Test(json, parses_unterminated_buffers)
{
    static const char *const docs[] = {"{\"a\":1}", "[1,2,3]", "\"str\"", "12345", "-1.5e3",
                                       "true",      "null",    "{}",      "[]",    "{\"a\":[{}]}"};

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        sg_json_destroy(parse_ok(docs[i]));
}

Test(json, prefix_of_a_longer_buffer_is_parsed_alone)
{
    const char *text = "{\"a\":1}GARBAGE";
    sg_err_t err;
    sg_json_t *root = sg_json_parse(text, 7, NULL, &err);
    int64_t v = 0;

    cr_assert_not_null(root, "%s", err.message);
    cr_assert_eq(sg_json_get_int(root, "$", "a", true, &v, &err), 0);
    cr_assert_eq(v, 1);
    sg_json_destroy(root);
}

Test(json, truncated_documents_are_malformed)
{
    static const char *const docs[] = {"{\"a\":1", "{\"a\":\"abc", "[1,",      "tru",
                                       "nul",      "\"\\u12",      "{\"a\"",   "[",
                                       "-",        "\"",           "{\"a\":tr"};

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        expect_refused(docs[i], strlen(docs[i]), NULL, "input.json.malformed");
}

Test(json, size_cap)
{
    sg_json_limits_t lim = {16, 64, 0};
    sg_err_t err;
    sg_json_t *root;

    expect_refused("[1,2,3,4,5,6,7,8,9]", 19, &lim, "input.too_large");
    root = parse_bytes("[1,2,3,4,5,6,7,8]", 17, &lim, &err);
    cr_assert_null(root);
    cr_assert_str_eq(err.code, "input.too_large");
    assert_contains(err.message, "17 bytes");
    assert_contains(err.message, "16");
    assert_contains(err.message, "limits.max_message_bytes");
    root = parse_bytes("[1,2,3,4,5,6,78]", 16, &lim, &err);
    cr_assert_not_null(root, "exactly max_bytes is allowed: %s", err.message);
    sg_json_destroy(root);
}

Test(json, empty_input_is_malformed)
{
    sg_err_t err;

    cr_assert_null(sg_json_parse("", 0, NULL, &err));
    cr_assert_str_eq(err.code, "input.json.malformed");
    cr_assert_null(sg_json_parse(NULL, 0, NULL, &err));
    cr_assert_str_eq(err.code, "input.json.malformed");
    cr_assert_null(sg_json_parse(NULL, 0, NULL, NULL), "NULL err is allowed");
}

Test(json, invalid_utf8_is_refused)
{
    REFUSED_LIT("\"\x80\"", "input.utf8.invalid");             /* lone continuation */
    REFUSED_LIT("\"\xc0\xaf\"", "input.utf8.invalid");         /* overlong '/' */
    REFUSED_LIT("\"\xe0\x80\xaf\"", "input.utf8.invalid");     /* overlong, 3 bytes */
    REFUSED_LIT("\"\xf0\x80\x80\xaf\"", "input.utf8.invalid"); /* overlong, 4 bytes */
    REFUSED_LIT("\"\xed\xa0\x80\"", "input.utf8.invalid");     /* surrogate U+D800 */
    REFUSED_LIT("\"\xed\xbf\xbf\"", "input.utf8.invalid");     /* surrogate U+DFFF */
    REFUSED_LIT("\"\xf4\x90\x80\x80\"", "input.utf8.invalid"); /* U+110000 */
    REFUSED_LIT("\"\xf5\x80\x80\x80\"", "input.utf8.invalid"); /* F5 lead */
    REFUSED_LIT("\"\xff\"", "input.utf8.invalid");
    REFUSED_LIT("\"\xc3(\"", "input.utf8.invalid");        /* bad continuation */
    REFUSED_LIT("\"\xc3", "input.utf8.invalid");           /* truncated 2-byte at the end */
    REFUSED_LIT("\"\xe2\x82", "input.utf8.invalid");       /* truncated 3-byte at the end */
    REFUSED_LIT("\"\xf0\x9f\x98", "input.utf8.invalid");   /* truncated 4-byte at the end */
    REFUSED_LIT("{\"a\":\"x\0y\"}", "input.utf8.invalid"); /* embedded NUL */
    REFUSED_LIT("{}\0", "input.utf8.invalid");             /* trailing NUL */
}

Test(json, valid_multibyte_text_round_trips)
{
    const char *text = "{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf\"}";
    sg_json_t *root = parse_ok(text);
    const char *s = NULL;
    sg_err_t err;

    cr_assert_eq(sg_json_get_str(root, "$", "s", true, &s, &err), 0);
    cr_assert_str_eq(s, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf");
    sg_json_destroy(root);
}

static char *nested(int depth, size_t *len)
{
    char *buf = malloc((size_t)depth * 2);

    cr_assert_not_null(buf);
    memset(buf, '[', (size_t)depth);
    memset(buf + depth, ']', (size_t)depth);
    *len = (size_t)depth * 2;
    return buf;
}

Test(json, nesting_deeper_than_the_limit_is_refused)
{
    size_t len;
    char *ok = nested(64, &len), *deep;
    sg_err_t err;
    sg_json_t *root = sg_json_parse(ok, len, NULL, &err);

    cr_assert_not_null(root, "depth 64 is the default limit: %s", err.message);
    sg_json_destroy(root);
    free(ok);

    deep = nested(65, &len);
    cr_assert_null(sg_json_parse(deep, len, NULL, &err));
    cr_assert_str_eq(err.code, "input.json.too_deep");
    cr_assert_eq(err.cls, SG_ERRCLASS_POISON);
    assert_contains(err.message, "64");
    assert_contains(err.message, "limits.max_json_depth");
    free(deep);

    /* Deep enough to exhaust a recursive parser's stack. */
    deep = nested(200000, &len);
    cr_assert_null(sg_json_parse(deep, len, &(sg_json_limits_t){1 << 20, 64, 0}, &err));
    cr_assert_str_eq(err.code, "input.json.too_deep");
    free(deep);
}

Test(json, objects_count_towards_depth)
{
    sg_json_limits_t lim = {1024, 2, 0};

    expect_refused("{\"a\":{\"b\":[1]}}", 15, &lim, "input.json.too_deep");
    sg_json_destroy(parse_ok("{\"a\":{\"b\":1}}"));
}

Test(json, brackets_inside_strings_do_not_count)
{
    sg_json_limits_t lim = {1024, 2, 0};
    const char *docs[] = {"[\"[[[[[[[[[[{{{{{{{{\"]", "{\"[[[[[[\":\"]]]]]]{{{{\"}",
                          "[\"\\\"[[[[[[[[\"]", "[\"\\\\\",\"x\"]"};

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        sg_err_t err;
        sg_json_t *root = parse_bytes(docs[i], strlen(docs[i]), &lim, &err);

        cr_assert_not_null(root, "%s: %s %s", docs[i], err.code, err.message);
        sg_json_destroy(root);
    }
}

Test(json, depth_counter_directly)
{
    cr_assert_eq(sg_json_depth("[]", 2, 10), 1);
    cr_assert_eq(sg_json_depth("1", 1, 10), 0);
    cr_assert_eq(sg_json_depth("[[],[[]]]", 9, 10), 3);
    cr_assert_eq(sg_json_depth("[[[[[[", 6, 3), 4, "stops at limit + 1");
    cr_assert_eq(sg_json_depth("[\"[[[\"]", 7, 10), 1);
    cr_assert_eq(sg_json_depth("[\"\\\"[[\"]", 8, 10), 1, "escaped quote stays in the string");
}

Test(json, syntax_errors_are_malformed)
{
    static const char *const docs[] = {"{\"a\":}", "{a:1}",     "[1,2,]", "{'a':1}", "[1 2]",
                                       "nope",     "{\"a\" 1}", "01x",    "   "};

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        sg_err_t err;

        cr_assert_null(parse_bytes(docs[i], strlen(docs[i]), NULL, &err), "%s accepted", docs[i]);
        cr_assert_str_eq(err.code, "input.json.malformed", "%s: %s", docs[i], err.code);
        assert_contains(err.message, "byte");
    }
}

Test(json, trailing_garbage_is_malformed_with_offset)
{
    sg_err_t err;

    cr_assert_null(parse_bytes("[1,2]x", 6, NULL, &err));
    cr_assert_str_eq(err.code, "input.json.malformed");
    assert_contains(err.message, "trailing data");
    assert_contains(err.message, "byte 5");
    cr_assert_null(parse_bytes("{\"a\":1} {\"b\":2}", 15, NULL, &err));
    cr_assert_str_eq(err.code, "input.json.malformed");
}

Test(json, surrounding_whitespace_is_fine)
{
    sg_json_destroy(parse_ok("  {\"a\":1}\n\t\r "));
    sg_json_destroy(parse_ok("[1]\n"));
}

/* ---- typed access ---- */

static const char *saga_doc = "{\"name\":\"order\",\"steps\":["
                              "{\"name\":\"reserve\",\"tool\":\"inventory\",\"timeout_ms\":500},"
                              "{\"name\":\"charge\",\"tool\":\"payments\",\"idempotent\":true},"
                              "{\"name\":\"ship\",\"timeout_ms\":\"soon\",\"note\":null}],"
                              "\"meta\":{\"k\":\"v\"},\"big\":1152921504606846976,"
                              "\"frac\":1.5,\"neg\":-42,\"max\":9007199254740992}";

Test(json, missing_required_field_names_its_path)
{
    sg_json_t *root = parse_ok(saga_doc);
    const sg_json_t *steps = NULL, *step;
    char base[64], path[64];
    const char *tool = NULL;
    sg_err_t err;

    cr_assert_eq(sg_json_get_array(root, "$", "steps", true, &steps, &err), 0);
    cr_assert_eq(sg_json_array_size(steps), 3);
    sg_json_path_key(base, sizeof(base), "$", "steps");
    cr_assert_str_eq(base, "$.steps");
    step = sg_json_array_get(steps, 2);
    cr_assert_not_null(step);
    sg_json_path_idx(path, sizeof(path), base, 2);
    cr_assert_str_eq(path, "$.steps[2]");
    cr_assert_eq(sg_json_get_str(step, path, "tool", true, &tool, &err), -1);
    cr_assert_str_eq(err.code, "input.schema.required");
    cr_assert_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_assert_not(err.retriable);
    assert_contains(err.message, "$.steps[2].tool");
    assert_contains(err.message, "missing");
    cr_assert_null(tool, "out untouched on error");
    sg_json_destroy(root);
}

Test(json, wrong_type_names_path_expected_and_actual)
{
    sg_json_t *root = parse_ok(saga_doc);
    const sg_json_t *steps = NULL, *obj = NULL;
    int64_t i = 0;
    const char *s = NULL;
    bool b = false;
    sg_err_t err;

    sg_json_get_array(root, "$", "steps", true, &steps, &err);
    cr_assert_eq(
        sg_json_get_int(sg_json_array_get(steps, 2), "$.steps[2]", "timeout_ms", true, &i, &err),
        -1);
    cr_assert_str_eq(err.code, "input.schema.type");
    cr_assert_eq(err.cls, SG_ERRCLASS_PERMANENT);
    assert_contains(err.message, "$.steps[2].timeout_ms");
    assert_contains(err.message, "integer");
    assert_contains(err.message, "string");

    cr_assert_eq(sg_json_get_str(root, "$", "neg", true, &s, &err), -1);
    cr_assert_str_eq(err.code, "input.schema.type");
    assert_contains(err.message, "$.neg: must be a string, got number");

    cr_assert_eq(sg_json_get_bool(root, "$", "name", true, &b, &err), -1);
    assert_contains(err.message, "$.name: must be a boolean, got string");

    cr_assert_eq(sg_json_get_object(root, "$", "steps", true, &obj, &err), -1);
    assert_contains(err.message, "$.steps: must be an object, got array");

    cr_assert_eq(sg_json_get_array(root, "$", "meta", true, &obj, &err), -1);
    assert_contains(err.message, "$.meta: must be an array, got object");
    sg_json_destroy(root);
}

Test(json, required_null_is_a_type_error)
{
    sg_json_t *root = parse_ok("{\"note\":null}");
    const char *s = "untouched";
    sg_err_t err;

    cr_assert_eq(sg_json_get_str(root, "$", "note", true, &s, &err), -1);
    cr_assert_str_eq(err.code, "input.schema.type");
    assert_contains(err.message, "$.note: must be a string, got null");
    sg_json_destroy(root);
}

Test(json, optional_absent_or_null_returns_one)
{
    sg_json_t *root = parse_ok(saga_doc);
    const sg_json_t *steps = NULL, *step, *o = NULL;
    const char *s = "untouched";
    int64_t i = 77;
    bool b = true;
    sg_err_t err;

    sg_err_clear(&err);
    sg_json_get_array(root, "$", "steps", true, &steps, &err);
    step = sg_json_array_get(steps, 2);
    cr_assert_eq(sg_json_get_str(step, "$.steps[2]", "tool", false, &s, &err), 1);
    cr_assert_eq(sg_json_get_str(step, "$.steps[2]", "note", false, &s, &err), 1);
    cr_assert_str_eq(s, "untouched");
    cr_assert_eq(sg_json_get_int(root, "$", "absent", false, &i, &err), 1);
    cr_assert_eq(i, 77);
    cr_assert_eq(sg_json_get_bool(step, "$.steps[2]", "idempotent", false, &b, &err), 1);
    cr_assert(b);
    cr_assert_eq(sg_json_get_object(root, "$", "absent", false, &o, &err), 1);
    cr_assert_eq(sg_json_get_array(root, "$", "absent", false, &o, &err), 1);
    cr_assert_null(o);
    cr_assert_str_eq(err.code, "", "an absent optional field is not an error");
    /* Present but wrong type is an error even when optional. */
    cr_assert_eq(sg_json_get_int(step, "$.steps[2]", "timeout_ms", false, &i, &err), -1);
    cr_assert_str_eq(err.code, "input.schema.type");
    sg_json_destroy(root);
}

Test(json, present_fields_are_read)
{
    sg_json_t *root = parse_ok(saga_doc);
    const sg_json_t *steps = NULL, *meta = NULL, *step;
    const char *s = NULL;
    int64_t i = 0;
    bool b = false;
    sg_err_t err;

    cr_assert_eq(sg_json_get_str(root, "$", "name", true, &s, &err), 0);
    cr_assert_str_eq(s, "order");
    cr_assert_eq(sg_json_get_array(root, "$", "steps", true, &steps, &err), 0);
    step = sg_json_array_get(steps, 0);
    cr_assert_eq(sg_json_get_int(step, "$.steps[0]", "timeout_ms", true, &i, &err), 0);
    cr_assert_eq(i, 500);
    step = sg_json_array_get(steps, 1);
    cr_assert_eq(sg_json_get_bool(step, "$.steps[1]", "idempotent", true, &b, &err), 0);
    cr_assert(b);
    cr_assert_eq(sg_json_get_object(root, "$", "meta", true, &meta, &err), 0);
    cr_assert(sg_json_is_object(meta));
    cr_assert_eq(sg_json_get_str(meta, "$.meta", "k", true, &s, &err), 0);
    cr_assert_str_eq(s, "v");
    cr_assert_eq(sg_json_get_int(root, "$", "neg", true, &i, &err), 0);
    cr_assert_eq(i, -42);
    cr_assert_eq(sg_json_get_int(root, "$", "max", true, &i, &err), 0);
    cr_assert_eq(i, INT64_C(9007199254740992), "2^53 is the largest exact integer");
    sg_json_destroy(root);
}

Test(json, integer_getter_rejects_fractions_and_huge_values)
{
    sg_json_t *root = parse_ok(saga_doc);
    int64_t i = 7;
    sg_err_t err;

    cr_assert_eq(sg_json_get_int(root, "$", "frac", true, &i, &err), -1);
    cr_assert_str_eq(err.code, "input.schema.type");
    assert_contains(err.message, "$.frac");
    assert_contains(err.message, "1.5");
    cr_assert_eq(sg_json_get_int(root, "$", "big", true, &i, &err), -1, "2^60 loses precision");
    cr_assert_str_eq(err.code, "input.schema.type");
    assert_contains(err.message, "$.big");
    cr_assert_eq(i, 7, "out untouched on error");
    sg_json_destroy(root);
}

Test(json, getters_on_a_non_object_report_required)
{
    sg_json_t *root = parse_ok("[1,2]");
    const char *s = NULL;
    sg_err_t err;

    cr_assert_eq(sg_json_get_str(root, "$", "a", true, &s, &err), -1);
    cr_assert_str_eq(err.code, "input.schema.required");
    assert_contains(err.message, "$.a");
    cr_assert_eq(sg_json_get_str(root, "$", "a", false, &s, &err), 1);
    sg_json_destroy(root);
}

Test(json, array_access_and_type_names)
{
    sg_json_t *root = parse_ok("[{},[],\"s\",1,true,false,null]");
    static const char *const names[] = {"object",  "array",   "string", "number",
                                        "boolean", "boolean", "null"};

    cr_assert_eq(sg_json_array_size(root), 7);
    for (size_t i = 0; i < 7; i++)
        cr_assert_str_eq(sg_json_type_name(sg_json_array_get(root, i)), names[i], "item %zu", i);
    cr_assert_null(sg_json_array_get(root, 7));
    cr_assert_null(sg_json_array_get(root, SIZE_MAX));
    cr_assert_eq(sg_json_array_size(NULL), 0);
    cr_assert_eq(sg_json_array_size(sg_json_array_get(root, 0)), 0, "an object is not an array");
    cr_assert_null(sg_json_array_get(sg_json_array_get(root, 0), 0));
    cr_assert(sg_json_is_object(sg_json_array_get(root, 0)));
    cr_assert_not(sg_json_is_object(sg_json_array_get(root, 1)));
    sg_json_destroy(root);
    sg_json_destroy(NULL);
}

Test(json, member_finds_any_type_and_only_in_objects)
{
    sg_json_t *root = parse_ok("{\"a\":1,\"n\":null,\"A\":\"upper\",\"o\":{\"x\":[]}}");
    sg_json_t *arr = parse_ok("[{\"a\":1}]");

    cr_assert_str_eq(sg_json_type_name(sg_json_member(root, "a")), "number");
    cr_assert_str_eq(sg_json_type_name(sg_json_member(root, "n")), "null",
                     "a null member is present, not absent");
    cr_assert_str_eq(sg_json_string(sg_json_member(root, "A")), "upper", "case-sensitive");
    cr_assert(sg_json_is_array(sg_json_member(sg_json_member(root, "o"), "x")));
    cr_assert_null(sg_json_member(root, "absent"));
    cr_assert_null(sg_json_member(root, "x"), "only direct members");
    cr_assert_null(sg_json_member(arr, "a"), "an array has no members");
    cr_assert_null(sg_json_member(NULL, "a"));
    cr_assert_null(sg_json_member(root, NULL));
    sg_json_destroy(arr);
    sg_json_destroy(root);
}

Test(json, number_value_and_array_test)
{
    sg_json_t *root = parse_ok("[-2.5,0,1e3,\"7\",true,null,[],{}]");
    double x = 42;

    cr_assert(sg_json_number(sg_json_array_get(root, 0), &x));
    cr_assert_eq(x, -2.5);
    cr_assert(sg_json_number(sg_json_array_get(root, 1), &x));
    cr_assert_eq(x, 0);
    cr_assert(sg_json_number(sg_json_array_get(root, 2), &x));
    cr_assert_eq(x, 1000);
    for (size_t i = 3; i < 8; i++)
        cr_assert_not(sg_json_number(sg_json_array_get(root, i), &x), "item %zu", i);
    cr_assert_eq(x, 1000, "out untouched for non-numbers");
    cr_assert_not(sg_json_number(NULL, &x));
    cr_assert(sg_json_is_array(root));
    cr_assert(sg_json_is_array(sg_json_array_get(root, 6)));
    cr_assert_not(sg_json_is_array(sg_json_array_get(root, 7)));
    cr_assert_not(sg_json_is_array(sg_json_array_get(root, 3)));
    cr_assert_not(sg_json_is_array(NULL));
    sg_json_destroy(root);
}

Test(json, equal_compares_by_value)
{
    static const struct {
        const char *a, *b;
        bool same;
    } cases[] = {
        {"1", "1.0", true},
        {"100", "1e2", true},
        {"1", "2", false},
        {"1", "\"1\"", false},
        {"\"abc\"", "\"abc\"", true},
        {"\"abc\"", "\"ABC\"", false},
        {"\"\\u00e9\"", "\"\xc3\xa9\"", true},
        {"true", "true", true},
        {"true", "false", false},
        {"null", "null", true},
        {"null", "false", false},
        {"0", "false", false},
        {"[1,2]", "[1,2]", true},
        {"[1,2]", "[2,1]", false},
        {"[1,2]", "[1,2,3]", false},
        {"[]", "{}", false},
        {"{\"a\":1,\"b\":[true]}", "{\"b\":[true],\"a\":1.0}", true},
        {"{\"a\":1}", "{\"a\":1,\"b\":2}", false},
        {"{\"a\":1,\"b\":2}", "{\"a\":1}", false},
        {"{\"a\":{\"b\":null}}", "{\"a\":{\"b\":0}}", false},
        {"{\"a\":1}", "{\"A\":1}", false},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_json_t *a = parse_ok(cases[i].a), *b = parse_ok(cases[i].b);

        cr_expect_eq(sg_json_equal(a, b), cases[i].same, "%s vs %s", cases[i].a, cases[i].b);
        cr_expect_eq(sg_json_equal(b, a), cases[i].same, "%s vs %s", cases[i].b, cases[i].a);
        cr_expect(sg_json_equal(a, a));
        cr_expect_not(sg_json_equal(a, NULL));
        cr_expect_not(sg_json_equal(NULL, a));
        sg_json_destroy(b);
        sg_json_destroy(a);
    }
    cr_assert_not(sg_json_equal(NULL, NULL), "NULL equals nothing");
}

Test(json, path_helpers)
{
    char p[32];

    sg_json_path_key(p, sizeof(p), "$", "steps");
    cr_assert_str_eq(p, "$.steps");
    sg_json_path_idx(p, sizeof(p), "$.steps", 12);
    cr_assert_str_eq(p, "$.steps[12]");
    sg_json_path_key(p, 8, "$.steps", "tool");
    cr_assert_str_eq(p, "$.steps", "truncated and terminated");
}

/* ---- building and printing ---- */

Test(json, build_print_and_parse_back)
{
    sg_json_t *root = sg_json_new_object(), *steps = sg_json_new_array(), *step;
    sg_json_t *back;
    char *text;
    const char *s = NULL;
    int64_t i = 0;
    bool b = false;
    sg_err_t err;

    sg_json_add_str(root, "saga_id", "s-1 \"quoted\"\n\xc3\xa9");
    sg_json_add_int(root, "attempt", 3);
    sg_json_add_int(root, "neg", -1700000000000); /* a timestamp in ms */
    sg_json_add_bool(root, "ok", true);
    for (int n = 0; n < 2; n++) {
        step = sg_json_new_object();
        sg_json_add_int(step, "i", n);
        sg_json_append(steps, step);
    }
    sg_json_add_node(root, "steps", steps);
    text = sg_json_print(root);
    cr_assert_str_eq(text, "{\"saga_id\":\"s-1 \\\"quoted\\\"\\n\xc3\xa9\",\"attempt\":3,"
                           "\"neg\":-1700000000000,\"ok\":true,"
                           "\"steps\":[{\"i\":0},{\"i\":1}]}");

    back = parse_ok(text);
    cr_assert_eq(sg_json_get_str(back, "$", "saga_id", true, &s, &err), 0);
    cr_assert_str_eq(s, "s-1 \"quoted\"\n\xc3\xa9");
    cr_assert_eq(sg_json_get_int(back, "$", "neg", true, &i, &err), 0);
    cr_assert_eq(i, -1700000000000);
    cr_assert_eq(sg_json_get_bool(back, "$", "ok", true, &b, &err), 0);
    cr_assert(b);
    cr_assert_eq(sg_json_get_array(back, "$", "steps", true, (const sg_json_t **)&steps, &err), 0);
    cr_assert_eq(sg_json_get_int(sg_json_array_get(steps, 1), "$.steps[1]", "i", true, &i, &err),
                 0);
    cr_assert_eq(i, 1);
    free(text);
    sg_json_destroy(back);
    sg_json_destroy(root);
}

/* The getter accepts every integer within +/-2^53, so the builder must
 * print each of them exactly: a seq or an id written by one process and
 * read by another must not change on the way. */
Test(json, built_integers_round_trip_up_to_2_pow_53)
{
    static const int64_t values[] = {0,
                                     1,
                                     -1,
                                     INT32_MAX,
                                     (int64_t)INT32_MAX + 1,
                                     1000000000000000,
                                     4503599627370497,
                                     9007199254740991,
                                     -9007199254740991,
                                     9007199254740992};

    for (size_t k = 0; k < sizeof(values) / sizeof(values[0]); k++) {
        sg_json_t *root = sg_json_new_object(), *back;
        char *text, want[64];
        int64_t i = 0;
        sg_err_t err;

        sg_json_add_int(root, "n", values[k]);
        text = sg_json_print(root);
        snprintf(want, sizeof(want), "{\"n\":%lld}", (long long)values[k]);
        cr_expect_str_eq(text, want);
        back = parse_ok(text);
        cr_assert_eq(sg_json_get_int(back, "$", "n", true, &i, &err), 0, "%s", err.message);
        cr_expect_eq(i, values[k], "%lld came back as %lld", (long long)values[k], (long long)i);
        free(text);
        sg_json_destroy(back);
        sg_json_destroy(root);
    }
}

Test(json, set_replaces_or_adds_and_set_at_appends_only_at_the_end)
{
    sg_json_t *root = parse_ok("{\"a\": 1, \"l\": [1, 2]}"), *two = sg_json_new_object();
    sg_json_t *l = (sg_json_t *)sg_json_member(root, "l");
    char *text;

    sg_json_set(root, "a", sg_json_new_array());
    sg_json_set(root, "b", sg_json_new_object());
    cr_assert_eq(sg_json_set_at(l, 0, sg_json_new_array()), 0);
    cr_assert_eq(sg_json_set_at(l, 2, sg_json_new_object()), 0, "index == size appends");
    cr_assert_eq(sg_json_set_at(l, 9, two), -1, "past the end is refused");
    sg_json_destroy(two); /* still ours */
    text = sg_json_print(root);
    cr_expect_str_eq(text, "{\"a\":[],\"l\":[[],2,{}],\"b\":{}}");
    free(text);
    sg_json_destroy(root);
}

/* A string can be a document of its own (a logged request body that is
 * not JSON) and a child of an object afterwards. */
Test(json, string_root_prints_escaped_and_can_be_adopted)
{
    sg_json_t *s = sg_json_new_str("a \"b\"\n"), *obj = sg_json_new_object();
    char *text = sg_json_print(s);

    cr_assert_str_eq(text, "\"a \\\"b\\\"\\n\"");
    cr_assert_str_eq(sg_json_string(s), "a \"b\"\n");
    free(text);
    sg_json_add_node(obj, "body", s);
    text = sg_json_print(obj);
    cr_assert_str_eq(text, "{\"body\":\"a \\\"b\\\"\\n\"}");
    free(text);
    sg_json_destroy(obj);
}

/* ---- I-JSON (RFC 7493) ---- */

/* Parsing text fails with code, and the message names path. */
static void expect_refused_at(const char *text, const char *code, const char *path)
{
    sg_err_t err;
    sg_json_t *root = parse_bytes(text, strlen(text), NULL, &err);
    char want[256];

    cr_assert_null(root, "accepted, expected %s: %s", code, text);
    cr_expect_str_eq(err.code, code, "%s", err.message);
    snprintf(want, sizeof(want), "%s: ", path);
    cr_expect_eq(strncmp(err.message, want, strlen(want)), 0, "expected %s first in: %s", path,
                 err.message);
}

Test(json, an_escaped_nul_is_refused_with_its_path)
{
    /* the ids and names of the hostile messages that were read as their
     * prefix: "nx1-nul" instead of "nx1-nul\u0000tail" */
    expect_refused_at("{\"saga_id\": \"nx1-nul\\u0000tail\"}", "input.json.nul", "$.saga_id");
    expect_refused_at("{\"steps\": [{\"name\": \"a\"}, {\"name\": \"a\\u0000\\u001b[31mred\"}]}",
                      "input.json.nul", "$.steps[1].name");
    expect_refused_at("{\"input\": {\"k\\u0000\": 1}}", "input.json.nul", "$.input.k");
    expect_refused_at("[1, [2, \"\\u0000\"]]", "input.json.nul", "$[1][1]");
    expect_refused_at("\"\\u0000\"", "input.json.nul", "$");
    /* an escaped backslash followed by u0000 is six characters, not NUL */
    sg_json_destroy(parse_ok("{\"a\": \"\\\\u0000\", \"b\": \"\\u0001 \\u00e9\"}"));
}

Test(json, a_duplicate_member_name_is_refused_with_its_path)
{
    expect_refused_at("{\"saga_id\": \"a\", \"saga_id\": \"b\"}", "input.json.duplicate_key",
                      "$.saga_id");
    expect_refused_at("{\"steps\": [{\"name\": \"a\", \"args\": {\"x\": 1, \"y\": 2, \"x\": 3}}]}",
                      "input.json.duplicate_key", "$.steps[0].args.x");
    /* a large object (sorted, not pairwise): with and without one */
    {
        char big[512];
        size_t o = (size_t)snprintf(big, sizeof(big), "{\"a\": {");
        for (int i = 0; i < 20; i++)
            o += (size_t)snprintf(big + o, sizeof(big) - o, "\"k%d\": %d, ", i, i);
        snprintf(big + o, sizeof(big) - o, "\"k7\": 0}}");
        expect_refused_at(big, "input.json.duplicate_key", "$.a.k7");
        snprintf(big + o, sizeof(big) - o, "\"k20\": 0}}");
        sg_json_destroy(parse_ok(big));
    }
    /* the same name in different objects is fine */
    sg_json_destroy(parse_ok("{\"a\": {\"x\": 1}, \"b\": {\"x\": 2}, \"x\": [{\"x\": 3}]}"));
}

Test(json, a_byte_order_mark_is_refused)
{
    REFUSED_LIT("\xef\xbb\xbf{\"v\": 1}", "input.json.malformed");
}

/* Parsing and the number check: fails with input.json.number_range at
 * path. */
static void expect_number_refused(const char *text, const char *path)
{
    sg_json_t *root = parse_ok(text);
    sg_err_t err;
    char want[256];

    cr_expect_eq(sg_json_exact_numbers(root, &err), -1, "accepted: %s", text);
    cr_expect_str_eq(err.code, "input.json.number_range");
    snprintf(want, sizeof(want), "%s: ", path);
    cr_expect_eq(strncmp(err.message, want, strlen(want)), 0, "expected %s first in: %s", path,
                 err.message);
    sg_json_destroy(root);
}

Test(json, a_number_that_would_go_out_changed_is_refused_with_its_path)
{
    static const char *const kept[] = {
        "{\"a\": 0, \"b\": -1, \"c\": 2147483648, \"d\": 123456789012345, \"e\": 0.1, "
        "\"f\": 1.5e-7, \"g\": 3998, \"h\": -4.25, \"i\": 0.12345678901234567}",
        "[9007199254740990, -9007199254740990]",
        "42",
    };
    sg_err_t err;

    /* an order id in minor units beyond 2^53: read as 1700000000123456768,
     * sent on as 1.7000000001234568e+18 */
    expect_number_refused("{\"args\": {\"order\": 1700000000123456789}}", "$.args.order");
    /* 2^53 - 1 itself: cJSON would print 9007199254740990 */
    expect_number_refused("{\"input\": [1, 9007199254740991]}", "$.input[1]");
    /* 15 digits would read back within DBL_EPSILON, so cJSON prints "1" */
    expect_number_refused("{\"x\": 1.0000000000000002}", "$.x");
    expect_number_refused("-18014398509481985", "$");
    expect_number_refused("{\"big\": 1e300}", "$.big");
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
        sg_json_t *root = parse_ok(kept[i]);
        cr_expect_eq(sg_json_exact_numbers(root, &err), 0, "%s: %s", kept[i], err.message);
        sg_json_destroy(root);
    }
}

/* A number below the smallest normal double was read as 0 (or as a
 * subnormal that keeps fewer digits) and passed on as that (issue 35
 * item 0): refused at the parse, with its path. */
Test(json, a_number_that_underflows_is_refused_with_its_path)
{
    static const struct {
        const char *text, *path;
    } refused[] = {
        {"{\"amount\": 1e-400}", "$.amount: "},
        {"{\"a\": [0, {\"b\": -2.5E-324}]}", "$.a[1].b: "},
        {"1e-309", "$: "},
        {"{\"note\": \"1e-400\", \"x\": [7, 0.00001e-400]}", "$.x[1]: "},
    };
    static const char *const kept[] = {
        "{\"zero\": 0e-400, \"neg\": -0.0E-999, \"small\": 2.3e-308, \"s\": \"9e-999\"}",
        "{\"a-b\": 1, \"e-mail\": \"x@y\", \"v\": 1.5e-7}",
    };
    sg_err_t err;

    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        sg_json_t *root = sg_json_parse(refused[i].text, strlen(refused[i].text), NULL, &err);
        cr_expect_null(root, "accepted: %s", refused[i].text);
        sg_json_destroy(root);
        if (root)
            continue;
        cr_expect_str_eq(err.code, "input.json.number_range", "%s", refused[i].text);
        cr_expect_eq(strncmp(err.message, refused[i].path, strlen(refused[i].path)), 0,
                     "expected %s first in: %s", refused[i].path, err.message);
        cr_expect(strstr(err.message, "send it as a string") != NULL, "%s", err.message);
    }
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        sg_json_destroy(parse_ok(kept[i]));
}

Test(json, values_and_member_names_are_counted_and_capped)
{
    static const struct {
        const char *text;
        long nodes;
    } cases[] = {
        {"{}", 1},
        {"[1, 2, 3]", 4},
        {"{\"a\": [true, null, -1.5e+3], \"b\": \"x,[{\\\"\"}", 8},
        {"[\"\\\\\", 10000000000000000000000]", 3},
    };
    sg_json_limits_t lim = {1024, 64, 6};
    sg_json_t *doc;
    sg_err_t err;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_expect_eq(sg_json_nodes(cases[i].text, strlen(cases[i].text), 100), cases[i].nodes, "%s",
                     cases[i].text);
    cr_expect_eq(sg_json_nodes("[1,2,3,4,5,6,7,8,9]", 19, 4), 5, "stops past the limit");

    doc = sg_json_parse("[1, 2, 3, 4, 5]", 15, &lim, &err);
    cr_expect_not_null(doc, "6 nodes: at the cap");
    sg_json_destroy(doc);
    cr_expect_null(sg_json_parse("[1, 2, 3, 4, 5, 6]", 18, &lim, &err), "7 nodes: over it");
    cr_expect_str_eq(err.code, "input.json.too_many_nodes");
    cr_expect(strstr(err.message, "more than 6 values") != NULL, "%s", err.message);
    lim.max_nodes = 0;
    doc = sg_json_parse("[1, 2, 3, 4, 5, 6]", 18, &lim, &err);
    cr_expect_not_null(doc, "0: no cap");
    sg_json_destroy(doc);
    /* One count for the cap and the caller, capped or not. */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long n = -1;
        lim.max_nodes = i % 2 ? 0 : 100;
        doc = sg_json_parse_counted(cases[i].text, strlen(cases[i].text), &lim, &err, &n);
        if (doc)
            cr_expect_eq(n, cases[i].nodes, "counted: %s", cases[i].text);
        sg_json_destroy(doc);
    }
}

/* Found by fuzz_gateway: a submission's unknown key, long and UTF-8, made
 * a problem path cut inside a character, and the 422 answer quoting it
 * was no longer JSON.  A path cut to fit ends before the character. */
Test(json, a_path_cut_to_fit_never_splits_a_character)
{
    char path[15]; /* "$.steps[0].ab" and one byte of the next character */

    sg_json_path_key(path, sizeof(path), "$.steps[0]", "ab\xdd\x89zz");
    cr_expect_str_eq(path, "$.steps[0].ab");
    cr_expect(sg_utf8_valid(path, strlen(path)), "not UTF-8: %s", path);
    sg_json_path_key(path, sizeof(path), "$", "abc");
    cr_expect_str_eq(path, "$.abc", "a path that fits is whole");
}

/* sg_json_print writes its own text (the worker's outgoing messages): it
 * must be cJSON_PrintUnformatted's, byte for byte, which the rest of
 * sagad (and every stored message) was written with. */
static void expect_printed_as_cjson(const cJSON *doc, const char *what)
{
    char *ours = sg_json_print((const sg_json_t *)doc), *theirs = cJSON_PrintUnformatted(doc);

    cr_assert_not_null(theirs);
    cr_expect_str_eq(ours, theirs, "%s", what);
    free(ours);
    cJSON_free(theirs);
}

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* A random value: numbers from random bits, small and large integers and
 * decimals; strings of random bytes (every byte but NUL); nested arrays
 * and objects with such member names. */
static cJSON *random_value(uint64_t *x, int depth)
{
    switch (rng_next(x) % (depth > 3 ? 5 : 7)) {
    case 0: {
        uint64_t bits = rng_next(x);
        double d;

        memcpy(&d, &bits, sizeof(d));
        return cJSON_CreateNumber(d);
    }
    case 1:
        return cJSON_CreateNumber((double)((int64_t)rng_next(x) >> (rng_next(x) % 64)));
    case 2:
        return cJSON_CreateNumber((double)(int64_t)(rng_next(x) % 2000001) / 1000.0 - 1000.0);
    case 3: {
        char str[24];
        size_t n = rng_next(x) % sizeof(str);

        for (size_t i = 0; i < n; i++)
            str[i] = (char)(1 + rng_next(x) % 255);
        str[n] = '\0';
        return cJSON_CreateString(str);
    }
    case 4:
        return rng_next(x) % 3 == 0   ? cJSON_CreateNull()
               : rng_next(x) % 2 == 0 ? cJSON_CreateTrue()
                                      : cJSON_CreateFalse();
    default: {
        bool obj = rng_next(x) % 2;
        cJSON *c = obj ? cJSON_CreateObject() : cJSON_CreateArray();
        size_t n = rng_next(x) % 5;

        for (size_t i = 0; i < n; i++) {
            char key[12];

            for (size_t k = 0; k < sizeof(key) - 1; k++)
                key[k] = (char)(1 + rng_next(x) % 255);
            key[rng_next(x) % sizeof(key)] = '\0';
            key[sizeof(key) - 1] = '\0';
            if (obj)
                cJSON_AddItemToObject(c, key, random_value(x, depth + 1));
            else
                cJSON_AddItemToArray(c, random_value(x, depth + 1));
        }
        return c;
    }
    }
}

Test(json, printer_writes_what_cjson_writes)
{
    static const char *const texts[] = {
        "{}",
        "[]",
        "{\"\":[{},[],\"\"]}",
        "[0,-0,1,-1,2147483647,2147483648,-2147483648,-2147483649,999999999999999,"
        "-999999999999999,1000000000000000,9007199254740993,1e300,-1e-300,0.1,"
        "0.30000000000000004,3.141592653589793,123456789.123,1e15,1e16,5e-324,1.5]",
        "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f \\u00e9 \\u20ac "
        "\\ud83d\\ude00\"}",
        "{\"a\":{\"b\":{\"c\":[true,false,null,{\"d\":\"e\"}]}},\"f\":\"g\"}",
    };
    uint64_t x = 0x9e3779b97f4a7c15ULL;

    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        cJSON *doc = cJSON_Parse(texts[i]);

        cr_assert_not_null(doc, "%s", texts[i]);
        expect_printed_as_cjson(doc, texts[i]);
        cJSON_Delete(doc);
    }
    {
        cJSON *doc = cJSON_CreateArray();

        cJSON_AddItemToArray(doc, cJSON_CreateNumber(NAN));
        cJSON_AddItemToArray(doc, cJSON_CreateNumber(INFINITY));
        cJSON_AddItemToArray(doc, cJSON_CreateNumber(-INFINITY));
        cJSON_AddItemToArray(doc, cJSON_CreateRaw("12345678901234567890"));
        cJSON_AddItemToArray(doc, cJSON_CreateString(""));
        expect_printed_as_cjson(doc, "NaN, infinities, raw, empty string");
        cJSON_Delete(doc);
    }
    for (int i = 0; i < 3000; i++) {
        cJSON *doc = random_value(&x, 0);
        char what[48];

        snprintf(what, sizeof(what), "random document %d", i);
        expect_printed_as_cjson(doc, what);
        cJSON_Delete(doc);
    }
}

/* An event's body goes into its envelope whole, names and order kept,
 * without a copy. */
Test(json, members_move_with_their_names_in_order)
{
    sg_json_t *dst = parse_ok("{\"v\":1,\"type\":\"step.succeeded\"}");
    sg_json_t *src = parse_ok("{\"step\":2,\"result\":{\"a\":[1,\"x\"]},\"name\":\"charge\"}");
    char *text;

    sg_json_move_members(dst, src);
    sg_json_move_members(dst, NULL);
    text = sg_json_print(dst);
    cr_expect_str_eq(text, "{\"v\":1,\"type\":\"step.succeeded\",\"step\":2,\"result\":{\"a\":[1,"
                           "\"x\"]},\"name\":\"charge\"}");
    free(text);
    text = sg_json_print(src);
    cr_expect_str_eq(text, "{}", "the source is left empty");
    free(text);
    cr_expect_str_eq(sg_json_string(sg_json_member(dst, "name")), "charge");
    sg_json_destroy(src);
    sg_json_destroy(dst);
}
