/* sagad-gateway's decoders without a network: the users file reads as
 * schemas/gateway-users.schema.json says (the same fixtures), tokens and
 * their hashes, the routes, the rate limiter and a submission's decode. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../gateway/gw.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf = malloc(65536);

    cr_assert_not_null(fp, "%s", path);
    *len = fread(buf, 1, 65535, fp);
    fclose(fp);
    return buf;
}

Test(gateway, users_files_are_read_as_the_schema_says)
{
    static const char *const kinds[] = {"valid", "invalid"};

    for (int k = 0; k < 2; k++) {
        char dir[128];
        DIR *d;
        struct dirent *e;
        int n = 0;

        snprintf(dir, sizeof(dir), "tests/fixtures/gateway-users/%s", kinds[k]);
        cr_assert_not_null(d = opendir(dir), "%s", dir);
        while ((e = readdir(d))) {
            char path[400], why[512] = "";
            size_t len;
            char *text;
            gw_users_t *u;

            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            text = slurp(path, &len);
            u = gw_users_parse(text, len, path, why, sizeof(why));
            if (k == 0)
                cr_expect_not_null(u, "%s: %s", path, why);
            else
                cr_expect_null(u, "%s was accepted", path);
            if (!u)
                cr_expect(strstr(why, path) != NULL, "%s", why);
            gw_users_free(u);
            free(text);
            n++;
        }
        closedir(d);
        cr_expect_gt(n, 0);
    }
}

Test(gateway, roles_grant_what_the_docs_say)
{
    static const char text[] =
        "{\"v\": 1, \"users\": {\"s\": {\"roles\": [\"submitter\"]}, \"a\": {\"roles\": "
        "[\"approver\"], \"approve_tools\": [\"pay\"]}, \"o\": {\"roles\": [\"operator\"]}, "
        "\"r\": {\"roles\": [\"reader\"]}}}";
    char why[256];
    gw_users_t *u = gw_users_parse(text, strlen(text), "t", why, sizeof(why));

    cr_assert_not_null(u, "%s", why);
    cr_assert_eq(u->n, 4);
    cr_expect_eq(u->v[0].perms, GW_P_SUBMIT | GW_P_READ_OWN | GW_P_CANCEL_OWN);
    cr_expect(gw_user_may_approve(&u->v[1], "pay"));
    cr_expect(!gw_user_may_approve(&u->v[1], "ship"), "approve_tools bounds the approver");
    cr_expect(!gw_user_may_approve(&u->v[2], "pay"), "an operator approves nothing");
    cr_expect(u->v[2].perms & GW_P_DLQ_WRITE);
    cr_expect(!(u->v[3].perms & (GW_P_SUBMIT | GW_P_DLQ_WRITE | GW_P_CANCEL_ALL)),
              "a reader only reads");
    gw_users_free(u);
}

Test(gateway, a_token_is_random_and_its_hash_is_what_the_file_keeps)
{
    char t1[48], h1[72], t2[48], h2[72], again[72];

    gw_token_new(t1, h1);
    gw_token_new(t2, h2);
    cr_expect_eq(strncmp(t1, "sgw_", 4), 0);
    cr_expect_eq(strlen(t1), 47);
    cr_expect_str_neq(t1, t2);
    cr_expect_eq(strncmp(h1, "sha256:", 7), 0);
    cr_expect_eq(strlen(h1), 71);
    gw_token_hash_text(t1, again);
    cr_expect_str_eq(again, h1);
    cr_expect(strstr(h1, t1 + 4) == NULL, "the hash holds no part of the token");
}

Test(gateway, routes_and_their_parameters)
{
    char buf[512];
    gw_route_args_t a;
    bool known;
    const gw_route_t *r;

    r = gw_route_find("POST", "/v1/sagas/o-7/steps/charge/approve", buf, sizeof(buf), &a, &known);
    cr_assert_not_null(r);
    cr_expect_str_eq(gw_route_template(r), "/v1/sagas/{id}/steps/{step}/{verb}");
    cr_expect_str_eq(a.id, "o-7");
    cr_expect_str_eq(a.step, "charge");
    cr_expect_str_eq(a.verb, "approve");
    cr_expect_null(
        gw_route_find("POST", "/v1/sagas/o-7/steps/charge/delete", buf, sizeof(buf), &a, &known));
    cr_expect_null(gw_route_find("DELETE", "/v1/sagas/o-7", buf, sizeof(buf), &a, &known));
    cr_expect(known, "the path is known to another method: 405, not 404");
    cr_expect_null(
        gw_route_find("GET", "/v1/sagas/o-7/extra/segments", buf, sizeof(buf), &a, &known));
    cr_expect(!known);
    r = gw_route_find("GET", "/v1/sagas", buf, sizeof(buf), &a, &known);
    cr_assert_not_null(r);
    cr_expect_str_eq(gw_route_template(r), "/v1/sagas");
}

Test(gateway, the_rate_limiter_allows_a_burst_then_the_rate)
{
    gw_limiter_t *l = gw_limiter_new(1, 3);
    int after = 0;

    for (int i = 0; i < 3; i++)
        cr_expect(gw_limiter_take(l, "shop", &after), "request %d of the burst", i);
    cr_expect(!gw_limiter_take(l, "shop", &after), "past the burst");
    cr_expect_eq(after, 1, "Retry-After in whole seconds");
    cr_expect(gw_limiter_take(l, "ann", &after), "another principal has its own bucket");
    gw_limiter_free(l);
}

/* The gateway fills in ids and names its user; a client cannot name
 * another. */
Test(gateway, a_submission_is_decoded_for_its_user)
{
    static const char reg_text[] =
        "{\"v\": 1, \"tools\": {\"noop\": {\"adapter\": \"builtin\", \"target\": \"noop\", "
        "\"side_effect\": \"read\"}}}";
    static const char body[] =
        "{\"v\": 1, \"type\": \"saga.start\", \"name\": \"n\", \"steps\": [{\"name\": \"a\", "
        "\"tool\": \"noop\"}]}";
    static const char spoof[] =
        "{\"v\": 1, \"type\": \"saga.start\", \"name\": \"n\", \"on_behalf_of\": \"ann\", "
        "\"steps\": [{\"name\": \"a\", \"tool\": \"noop\"}]}";
    sg_config_t *cfg = sg_config_new();
    gw_t gw = {.cfg = cfg, .have_key = true, .lim = {1048576, 64, 20000}};
    gw_submission_t s1, s2;
    sg_http_answer_t ans = {0};
    sg_err_t err;

    cr_assert_not_null(gw.reg =
                           sg_registry_parse("t", reg_text, strlen(reg_text), cfg, NULL, &err));
    cr_assert_eq(gw_submission_decode(&gw, "shop", "order-7", body, strlen(body), &s1, &ans), 0);
    cr_assert_eq(gw_submission_decode(&gw, "shop", "order-7", body, strlen(body), &s2, &ans), 0);
    cr_expect_str_eq(s1.saga_id, s2.saga_id, "the same key is the same saga");
    cr_expect_eq(strncmp(s1.saga_id, "k-", 2), 0);
    cr_expect_str_eq(sg_json_string(sg_json_member(s1.doc, "on_behalf_of")), "shop");
    gw_submission_free(&s2);
    cr_assert_eq(gw_submission_decode(&gw, "ann", "order-7", body, strlen(body), &s2, &ans), 0);
    cr_expect_str_neq(s1.saga_id, s2.saga_id, "another user's key is another saga");
    gw_submission_free(&s1);
    gw_submission_free(&s2);
    cr_expect_eq(gw_submission_decode(&gw, "shop", NULL, spoof, strlen(spoof), &s1, &ans), -1);
    cr_expect_eq(ans.status, 422);
    cr_expect(strstr(ans.body, "$.on_behalf_of") != NULL, "%s", ans.body);
    free(ans.body);
    sg_registry_destroy(gw.reg);
    sg_config_destroy(cfg);
}
