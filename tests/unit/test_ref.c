/* References between steps (lib/contract/sg_ref.c): the pointer's shape, its
 * lookup in a context document (RFC 6901), and the resolution of a
 * template, which never alters a value and names what it cannot find. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_ref.h"

static sg_json_t *parse(const char *text)
{
    sg_json_t *doc = sg_json_parse(text, strlen(text), NULL, NULL);

    cr_assert_not_null(doc, "test JSON: %s", text);
    return doc;
}

static const char ctx_text[] =
    "{\"input\":{\"order\":7,\"lines\":[\"a\",\"b\"]},\"steps\":{\"charge\":{\"result\":"
    "{\"charge_id\":\"pay_1\",\"a/b\":1,\"m~n\":2,\"\":3,\"big\":9007199254740993},"
    "\"key\":\"s:1:f:g1\"}}}";

Test(ref, a_pointer_is_input_or_an_earlier_steps_result_or_key)
{
    char name[80];
    const char *step;

    cr_expect_null(sg_ref_pointer_check("/input", name, sizeof(name), &step));
    cr_expect_null(step);
    cr_expect_null(sg_ref_pointer_check("/input/lines/0", name, sizeof(name), &step));
    cr_expect_null(sg_ref_pointer_check("/steps/charge/result/a~1b", name, sizeof(name), &step));
    cr_expect_str_eq(step, "charge");
    cr_expect_null(sg_ref_pointer_check("/steps/charge/key", name, sizeof(name), &step));
    cr_expect_not_null(sg_ref_pointer_check("", name, sizeof(name), &step));
    cr_expect_not_null(sg_ref_pointer_check("/inputs", name, sizeof(name), &step));
    cr_expect_not_null(sg_ref_pointer_check("/steps/charge", name, sizeof(name), &step));
    cr_expect_not_null(sg_ref_pointer_check("/steps/charge/key/x", name, sizeof(name), &step));
    cr_expect_not_null(sg_ref_pointer_check("/steps//result", name, sizeof(name), &step));
    cr_expect_not_null(sg_ref_pointer_check("/steps/a b/result", name, sizeof(name), &step));
    cr_expect_not_null(sg_ref_pointer_check("/input/x~", name, sizeof(name), &step));
}

Test(ref, lookup_follows_rfc_6901)
{
    sg_json_t *ctx = parse(ctx_text);
    const sg_json_t *v;

    cr_expect_eq(sg_ref_lookup(ctx, ""), ctx);
    cr_expect_str_eq(sg_json_string(sg_ref_lookup(ctx, "/input/lines/1")), "b");
    cr_expect_null(sg_ref_lookup(ctx, "/input/lines/01"), "no leading zeros");
    cr_expect_null(sg_ref_lookup(ctx, "/input/lines/-"), "- is past the end");
    cr_expect_null(sg_ref_lookup(ctx, "/input/lines/2"));
    v = sg_ref_lookup(ctx, "/steps/charge/result/a~1b");
    cr_expect_not_null(v, "~1 is /");
    v = sg_ref_lookup(ctx, "/steps/charge/result/m~0n");
    cr_expect_not_null(v, "~0 is ~");
    cr_expect_not_null(sg_ref_lookup(ctx, "/steps/charge/result/"), "the empty name");
    cr_expect_null(sg_ref_lookup(ctx, "/input/order/x"), "below a number");
    sg_json_destroy(ctx);
}

Test(ref, resolution_replaces_references_and_keeps_everything_else)
{
    sg_json_t *ctx = parse(ctx_text);
    sg_json_t *tmpl = parse("{\"id\":{\"$from\":\"/steps/charge/result/charge_id\"},\"k\":"
                            "[1,{\"$from\":\"/steps/charge/key\"},{\"x\":null}],\"n\":1.5}");
    sg_json_t *want = parse("{\"id\":\"pay_1\",\"k\":[1,\"s:1:f:g1\",{\"x\":null}],\"n\":1.5}");
    sg_err_t err;
    sg_json_t *got = sg_ref_resolve(tmpl, ctx, "$.args", NULL, &err);

    cr_assert_not_null(got, "%s", err.message);
    cr_expect(sg_json_equal(got, want), "%s", sg_json_print(got));
    cr_expect(sg_ref_any(tmpl));
    cr_expect_not(sg_ref_any(got));
    sg_json_destroy(got);
    sg_json_destroy(want);
    sg_json_destroy(tmpl);
    sg_json_destroy(ctx);
}

Test(ref, an_absent_value_or_an_inexact_number_is_input_ref_unresolved_naming_the_pointer)
{
    sg_json_t *ctx = parse(ctx_text);
    sg_json_t *absent = parse("{\"a\":[{\"$from\":\"/steps/charge/result/refund_id\"}]}");
    sg_json_t *big = parse("{\"b\":{\"$from\":\"/steps/charge/result/big\"}}");
    sg_err_t err;

    cr_expect_null(sg_ref_resolve(absent, ctx, "$.args", NULL, &err));
    cr_expect_str_eq(err.code, "input.ref.unresolved");
    cr_expect_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_expect(strstr(err.message, "$.args.a[0]: the reference {\"$from\": "
                                  "\"/steps/charge/result/refund_id\"} names no value") != NULL,
              "%s", err.message);
    cr_expect_null(sg_ref_resolve(big, ctx, "$.args", NULL, &err), "2^53+1 would be altered");
    cr_expect(strstr(err.message, "$.args.b: the value of") != NULL, "%s", err.message);
    sg_json_destroy(big);
    sg_json_destroy(absent);
    sg_json_destroy(ctx);
}

/* Six thousand references to an 850 KB input fit the intake caps and
 * would resolve to about 5 GB (issue 36 item 4): refused with
 * input.ref.too_large, naming the path and the pointer of the reference
 * that passes the budget, long before that much is copied.  The same
 * value named a few times resolves. */
Test(ref, references_that_amplify_past_the_budget_are_input_ref_too_large)
{
    const sg_ref_budget_t budget = {4 * 1048576, 4 * 20000};
    size_t big = 850000, n = 6000, len = 0;
    char *big_text = malloc(big + 64), *tmpl_text = malloc(n * 32 + 16);
    sg_json_limits_t lim = {2 << 20, 64, 0};
    sg_json_t *ctx, *tmpl, *got;
    sg_err_t err;

    cr_assert(big_text && tmpl_text);
    len = (size_t)snprintf(big_text, 64, "{\"input\": {\"b\": \"");
    memset(big_text + len, 'x', big);
    len += big;
    snprintf(big_text + len, 64, "\"}}");
    ctx = sg_json_parse(big_text, strlen(big_text), &lim, &err);
    cr_assert_not_null(ctx, "%s", err.message);
    len = (size_t)snprintf(tmpl_text, 16, "[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(tmpl_text + len, 32, "%s{\"$from\": \"/input/b\"}", i ? "," : "");
    snprintf(tmpl_text + len, 16, "]");
    tmpl = sg_json_parse(tmpl_text, strlen(tmpl_text), &lim, &err);
    cr_assert_not_null(tmpl, "%s", err.message);

    cr_expect_null(sg_ref_resolve(tmpl, ctx, "$.steps[0].args", &budget, &err));
    cr_expect_str_eq(err.code, "input.ref.too_large");
    cr_expect_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_expect(strstr(err.message, "$.steps[0].args[4]: the reference {\"$from\": \"/input/b\"}") !=
                  NULL,
              "the fifth copy passes 4 MiB: %s", err.message);
    sg_json_destroy(tmpl);

    tmpl = parse("[{\"$from\": \"/input/b\"}, {\"$from\": \"/input/b\"}]");
    got = sg_ref_resolve(tmpl, ctx, "$.args", &budget, &err);
    cr_expect_not_null(got, "twice fits: %s", err.message);
    sg_json_destroy(got);
    sg_json_destroy(tmpl);
    sg_json_destroy(ctx);
    free(big_text);
    free(tmpl_text);
}
