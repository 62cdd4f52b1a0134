/* sg_mask: secrets never leave the process, in any form they are written. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_config.h"
#include "sagad/sg_log.h"
#include "sagad/sg_mask.h"
#include "unit.h"

static void expect_hidden(const char *in, const char *secret)
{
    char out[1024];

    sg_mask(in, out, sizeof(out));
    assert_not_contains(out, secret);
    assert_contains(out, SG_MASK);
}

Test(mask, context_patterns_hide_their_values)
{
    expect_hidden("sasl.password=kp4ss", "kp4ss");
    expect_hidden("{\"client_secret\":\"cs3cret\"}", "cs3cret");
    expect_hidden("Authorization: Bearer tok3n.abc", "tok3n.abc");
    expect_hidden("authorization: Basic dXNlcjpwdw==", "dXNlcjpwdw==");
    expect_hidden("x-api-token = 'a b c'", "a b c");
    expect_hidden("connect to https://bot:ghp_x1@api.example.com/v1 failed", "ghp_x1");
    /* an '@' in the password, not percent-encoded: hidden whole */
    expect_hidden("postgresql://sagad:p4@ss@w0rd@db.example:5432/sagad", "p4@ss@w0rd");
    expect_hidden("postgresql://sagad:p4@ss@w0rd@db.example:5432/sagad", "ss@w0rd");
    expect_hidden("postgresql://sagad:p4@ss@w0rd@db.example:5432/sagad", "w0rd");
}

Test(mask, plain_text_is_left_alone)
{
    static const char *const keep[] = {
        "password authentication failed for user \"sagad\"",
        "saga s-1 step 2 attempt 3 failed: tool.http.503",
        "postgresql://u@h:5432/db",
        "",
    };
    char out[256];

    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        sg_mask(keep[i], out, sizeof(out));
        cr_assert_str_eq(out, keep[i]);
    }
}

/* A registered secret is hidden wherever it turns up, even with no
 * keyword around it (an error message echoing a value). */
Test(mask, registered_literals_are_hidden_anywhere)
{
    char out[256];

    sg_mask_add_secret("Zq8-unguessable");
    sg_mask_add_dsn("host=db user=u password='p w0rd!'");
    sg_mask("echo: Zq8-unguessable and again Zq8-unguessable; p w0rd!", out, sizeof(out));
    assert_not_contains(out, "Zq8");
    assert_not_contains(out, "w0rd");
    cr_assert_str_eq(out, "echo: **** and again ****; ****");
}

Test(mask, config_registers_its_secrets)
{
    sg_config_t *cfg = sg_config_new();
    char errstr[256], out[256];

    cr_assert_eq(
        sg_config_set(cfg, "pg.dsn", "postgresql://u:pgS3cret@h/db", "t", errstr, sizeof(errstr)),
        0);
    cr_assert_eq(
        sg_config_set(cfg, "kafka.sasl.password", "kafkaS3cret", "t", errstr, sizeof(errstr)), 0);
    sg_mask("values pgS3cret kafkaS3cret", out, sizeof(out));
    cr_assert_str_eq(out, "values **** ****");
    sg_config_destroy(cfg);
}

/* The log writer masks the message and every field, whoever wrote it. */
Test(mask, log_lines_never_carry_secrets)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    cr_assert_not_null(fp);
    sg_mask_add_secret("L0gSecret");
    sg_log_init("test", SG_LOG_INFO);
    sg_log_set_stream(fp);
    ctx.error_code = "x L0gSecret";
    sg_log(SG_LOG_INFO, &ctx, "connecting with password=%s to %s", "hunter22",
           "postgresql://u:L0gSecret@h/db");
    sg_log_kv(SG_LOG_INFO, "header", "value", "Bearer abc.def", NULL);
    sg_log_set_stream(NULL);
    fclose(fp);
    assert_not_contains(buf, "hunter22");
    assert_not_contains(buf, "L0gSecret");
    assert_not_contains(buf, "abc.def");
    assert_contains(buf, "password=****");
    free(buf);
}

Test(mask, output_is_truncated_safely)
{
    char out[8];

    cr_assert_eq(sg_mask("password=abcdef and more", out, sizeof(out)), 7);
    cr_assert_str_eq(out, "passwor");
}
