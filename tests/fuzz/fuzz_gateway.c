/* libFuzzer target: what sagad-gateway decodes from a client before
 * anything is sent or read: the route of a path, a submission's body with
 * its Idempotency-Key, and the users file.  The first byte chooses:
 *   0  a users file: a parsed user has a name and at least one right;
 *   1  a path: a route found has its parameters inside the path, and a
 *      {verb} is approve or reject, and it is under /v1/ (or is /mcp);
 *   else  "Idempotency-Key\nbody": a submission accepted is a saga.start
 *      the worker accepts (sg_check_submission again), with a saga id of
 *      the right shape and on_behalf_of the authenticated user; one
 *      refused is answered 400 or 422 with a JSON problem. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../gateway/gw.h"
#include "sagad/sg_submit.h"

static const char registry[] =
    "{\"v\": 1, \"tools\": {"
    "\"noop\": {\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": \"read\"},"
    "\"ledger\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "
    "\"reversible\", \"compensation\": \"ledger\"},"
    "\"charge\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "
    "\"reversible\", \"compensation\": \"ledger\", \"approval\": \"required\"},"
    "\"reserve\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "
    "\"idempotent\", \"args\": {\"type\": \"object\", \"required\": [\"sku\"], \"properties\": "
    "{\"sku\": {\"type\": \"string\", \"minLength\": 1}}}}}}";

static gw_t gw;

static void init(void)
{
    static sg_config_t *cfg;
    sg_err_t err;

    if (cfg)
        return;
    cfg = sg_config_new();
    gw.cfg = cfg;
    gw.have_key = true;
    gw.lim.max_bytes = 1048576;
    gw.lim.max_depth = 64;
    gw.lim.max_nodes = 20000;
    if (!(gw.reg = sg_registry_parse("fuzz", registry, strlen(registry), cfg, NULL, &err)))
        abort();
}

static void users(const char *text, size_t n)
{
    char why[512];
    gw_users_t *u = gw_users_parse(text, n, "fuzz", why, sizeof(why));

    for (size_t i = 0; u && i < u->n; i++)
        if (!u->v[i].name[0] || u->v[i].perms == 0)
            abort();
    gw_users_free(u);
}

static void route(const char *text, size_t n)
{
    char path[600], buf[1024];
    gw_route_args_t args;
    bool known;
    const gw_route_t *r;

    if (n >= sizeof(path))
        return;
    memcpy(path, text, n);
    path[n] = '\0';
    for (int m = 0; m < 2; m++) {
        r = gw_route_find(m ? "POST" : "GET", path, buf, sizeof(buf), &args, &known);
        if (r && !known)
            abort();
        if (args.id && (args.id < buf || args.id >= buf + sizeof(buf) || !*args.id))
            abort();
        if (args.verb && strcmp(args.verb, "approve") && strcmp(args.verb, "reject"))
            abort();
        if (r && strncmp(gw_route_template(r), "/v1/", 4) != 0 &&
            strcmp(gw_route_template(r), "/mcp") != 0)
            abort();
    }
}

static void submission(const char *text, size_t n)
{
    const char *nl = memchr(text, '\n', n);
    char key[300];
    gw_submission_t sub;
    sg_http_answer_t ans;
    sg_problems_t again;

    if (!nl || (size_t)(nl - text) >= sizeof(key))
        return;
    memcpy(key, text, (size_t)(nl - text));
    key[nl - text] = '\0';
    memset(&ans, 0, sizeof(ans));
    if (gw_submission_decode(&gw, "shop", key[0] ? key : NULL, nl + 1, n - (size_t)(nl + 1 - text),
                             &sub, &ans) == 0) {
        const char *obo = sg_json_string(sg_json_member(sub.doc, "on_behalf_of"));
        if (!sub.saga_id || !sg_saga_id_ok(sub.saga_id) || !obo || strcmp(obo, "shop") != 0)
            abort();
        if (sg_check_submission(sub.text, strlen(sub.text), &gw.lim, gw.reg, &again) != 0)
            abort();
        sg_problems_free(&again);
        gw_submission_free(&sub);
        if (ans.body)
            abort(); /* accepted, yet answered */
        return;
    }
    if ((ans.status != 400 && ans.status != 422) || !ans.body)
        abort();
    {
        sg_json_t *doc = sg_json_parse(ans.body, ans.len, NULL, NULL);
        if (!doc || !sg_json_string(sg_json_member(doc, "detail")))
            abort();
        sg_json_destroy(doc);
    }
    free(ans.body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init();
    if (size < 1)
        return 0;
    if (data[0] == 0)
        users((const char *)data + 1, size - 1);
    else if (data[0] == 1)
        route((const char *)data + 1, size - 1);
    else
        submission((const char *)data + 1, size - 1);
    return 0;
}
