/* sagad-gateway's MCP server against the real worker and relay (issue 39).
 *
 * mcp:      POST /mcp over real HTTP: what a client gets for what is not a
 *           good request (the standard JSON-RPC errors and their HTTP
 *           statuses, 2026-07-28's header checks, the gateway's own
 *           refusals: token, Origin, size), and one tool call end to end.
 * mcp_sdk:  the golden stdio transcripts (tests/mcp/golden.py), then the
 *           official Python SDK as the client (tests/mcp/test_sdk.py),
 *           over stdio and HTTP, each major and each era; run only when
 *           SAGAD_TEST_MCP_PYTHONS names the SDKs' interpreters
 *           (tests/mcp/run.sh, after the integration tests of the plain
 *           build), skipped otherwise. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_json.h"
#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"

TestSuite(mcp, .init = sgw_setup, .fini = sgw_teardown, .timeout = 180);
TestSuite(mcp_sdk, .init = sgw_setup, .fini = sgw_teardown, .timeout = 300);

#define GATED_TOOLS                                                                                \
    "\"bank.charge\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "        \
    "\"reversible\", \"compensation\": \"ledger\", \"approval\": \"required\", \"description\": "  \
    "\"Charges the customer's card (needs a person's approval).\"}"

/* shop submits; agent submits and approves (never its own saga); ann
 * approves; viewer reads. */
static const char *const users[] = {"shop", "agent", "ann", "viewer"};
static const char *const roles[] = {"[\"submitter\"]", "[\"submitter\", \"approver\"]",
                                    "[\"approver\"]", "[\"reader\"]"};
#define NUSERS (sizeof(users) / sizeof(users[0]))

static sgw_gateway_t gw;

/* The world, then the gateway (sgw_gateway_start), approvals offered
 * over MCP. */
static void start(void)
{
    const char *more[] = {"SAGAD_MCP_APPROVALS=true",
                          /* tests/mcp/bench.py asks fast, one principal */
                          "SAGAD_GATEWAY_RATE_PER_S=100000", "SAGAD_GATEWAY_RATE_BURST=100000",
                          NULL};

    sgw_pair_start(GATED_TOOLS, 1, NULL);
    sgw_gateway_start(&gw, "http", users, roles, NUSERS, more);
}

/* POST /mcp with body as user 0 (shop) unless auth says otherwise, with
 * more headers (NULL-terminated, or NULL). */
static sgt_res_t post(const char *auth, const char *body, const char *const *more)
{
    char url[128], a[128];
    const char *h[12] = {"Content-Type: application/json",
                         "Accept: application/json, text/event-stream"};
    size_t n = 2;

    snprintf(url, sizeof(url), "%s/mcp", gw.base);
    if (!auth)
        auth = gw.token[0];
    if (*auth) {
        snprintf(a, sizeof(a), "Authorization: Bearer %s", auth);
        h[n++] = a;
    }
    for (; more && *more && n < 11; more++)
        h[n++] = *more;
    return sgt_request("POST", url, h, body);
}

static long long rpc_code(const sgt_res_t *r)
{
    sg_json_t *doc = sg_json_parse(r->body, r->len, NULL, NULL);
    int64_t code = 0;

    cr_assert_not_null(doc, "not JSON (%ld): %s", r->status, r->body);
    cr_assert_eq(sg_json_get_int(sg_json_member(doc, "error"), "$", "code", true, &code, NULL), 0,
                 "no error: %s", r->body);
    sg_json_destroy(doc);
    return code;
}

#define META                                                                                       \
    "\"_meta\": {\"io.modelcontextprotocol/protocolVersion\": \"2026-07-28\", "                    \
    "\"io.modelcontextprotocol/clientCapabilities\": {}}"

Test(mcp, http_refusals_are_the_standard_json_rpc_errors)
{
    const char *legacy[] = {"MCP-Protocol-Version: 2025-11-25", NULL};
    const char *modern_list[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/list",
                                 NULL};
    const char *modern_nope[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: nope", NULL};
    const char *mismatch[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call",
                              "Mcp-Name: submit_saga", NULL};
    const char *evil[] = {"Origin: https://evil.example", NULL};
    const char *sse_only[] = {"Accept: text/event-stream", NULL};
    char *big;
    sgt_res_t r;

    start();
    /* the gateway's own door: a token, an allowed Origin, the body's size */
    r = post("", "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}", legacy);
    cr_expect_eq(r.status, 401);
    cr_expect_not_null(sgt_res_header(&r, "WWW-Authenticate"));
    sgt_res_free(&r);
    r = post("sgw_not_a_token", "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}", legacy);
    cr_expect_eq(r.status, 401, "a wrong token: %ld", r.status);
    sgt_res_free(&r);
    r = post(NULL, "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}", evil);
    cr_expect_eq(r.status, 403, "a foreign Origin: %ld", r.status);
    sgt_res_free(&r);
    big = malloc(1100000);
    memset(big, ' ', 1099999);
    big[0] = '{';
    big[1099998] = '}';
    big[1099999] = '\0';
    r = post(NULL, big, legacy);
    free(big);
    cr_expect_eq(r.status, 413, "over limits.max_message_bytes: %ld", r.status);
    sgt_res_free(&r);
    /* JSON-RPC's own */
    r = post(NULL, "{\"jsonrpc\": \"2.0\", \"id\": 1,", legacy);
    cr_expect_eq(r.status, 400);
    cr_expect_eq(rpc_code(&r), -32700);
    cr_expect_not_null(strstr(r.body, "\"id\":null"), "%s", r.body);
    sgt_res_free(&r);
    r = post(NULL, "[{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}]", legacy);
    cr_expect_eq(r.status, 400);
    cr_expect_eq(rpc_code(&r), -32600, "a batch");
    sgt_res_free(&r);
    r = post(NULL, "{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"nope\"}", legacy);
    cr_expect_eq(r.status, 200);
    cr_expect_eq(rpc_code(&r), -32601);
    cr_expect_not_null(strstr(r.body, "\"id\":7"), "%s", r.body);
    sgt_res_free(&r);
    r = post(NULL,
             "{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"nope\", \"params\": {" META "}}",
             modern_nope);
    cr_expect_eq(r.status, 404, "2026-07-28: unknown method: %ld", r.status);
    cr_expect_eq(rpc_code(&r), -32601);
    sgt_res_free(&r);
    r = post(NULL,
             "{\"jsonrpc\": \"2.0\", \"id\": 8, \"method\": \"tools/call\", \"params\": {\"name\": "
             "\"get_saga\", \"arguments\": {\"saga_id\": \"x\"}, " META "}}",
             mismatch);
    cr_expect_eq(r.status, 400);
    cr_expect_eq(rpc_code(&r), -32020, "Mcp-Name says another tool");
    sgt_res_free(&r);
    r = post(
        NULL,
        "{\"jsonrpc\": \"2.0\", \"id\": 9, \"method\": \"tools/list\", \"params\": {\"_meta\": "
        "{\"io.modelcontextprotocol/protocolVersion\": \"2026-07-28\"}}}",
        modern_list);
    cr_expect_eq(rpc_code(&r), -32602, "clientCapabilities missing");
    sgt_res_free(&r);
    {
        const char *future[] = {"MCP-Protocol-Version: 2031-01-01", "Mcp-Method: tools/list", NULL};
        r = post(NULL,
                 "{\"jsonrpc\": \"2.0\", \"id\": 10, \"method\": \"tools/list\", \"params\": "
                 "{\"_meta\": {\"io.modelcontextprotocol/protocolVersion\": \"2031-01-01\", "
                 "\"io.modelcontextprotocol/clientCapabilities\": {}}}}",
                 future);
        cr_expect_eq(r.status, 400);
        cr_expect_eq(rpc_code(&r), -32022);
        cr_expect_not_null(strstr(r.body, "\"supported\":[\"2026-07-28\""), "%s", r.body);
        sgt_res_free(&r);
    }
    /* a notification: 202, no body; GET: 405 (no stream outside a request) */
    r = post(NULL, "{\"jsonrpc\": \"2.0\", \"method\": \"notifications/initialized\"}", legacy);
    cr_expect_eq(r.status, 202);
    cr_expect_eq(r.len, 0);
    sgt_res_free(&r);
    {
        char url[128], a[128];
        const char *h[] = {a, NULL};
        snprintf(url, sizeof(url), "%s/mcp", gw.base);
        snprintf(a, sizeof(a), "Authorization: Bearer %s", gw.token[0]);
        r = sgt_request("GET", url, h, NULL);
        cr_expect_eq(r.status, 405);
        sgt_res_free(&r);
    }
    /* initialize: no session is minted; an SSE answer when only that is
     * accepted */
    r = post(NULL,
             "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"initialize\", \"params\": "
             "{\"protocolVersion\": \"2025-06-18\", \"capabilities\": {}, \"clientInfo\": "
             "{\"name\": \"c\", \"version\": \"1\"}}}",
             NULL);
    cr_expect_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_expect_null(sgt_res_header(&r, "Mcp-Session-Id"));
    cr_expect_not_null(strstr(r.body, "\"protocolVersion\":\"2025-06-18\""), "%s", r.body);
    sgt_res_free(&r);
    {
        char url[128], a[128];
        const char *h[] = {"Content-Type: application/json", a, sse_only[0], legacy[0], NULL};
        snprintf(url, sizeof(url), "%s/mcp", gw.base);
        snprintf(a, sizeof(a), "Authorization: Bearer %s", gw.token[0]);
        r = sgt_request("POST", url, h, "{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"ping\"}");
        cr_expect_eq(r.status, 200);
        cr_expect_str_eq(sgt_res_header(&r, "Content-Type"), "text/event-stream");
        cr_expect_not_null(strstr(r.body, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,"),
                           "%s", r.body);
        sgt_res_free(&r);
    }
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas"), 0);
}

/* A saga submitted and waited for through MCP, as curl would: the
 * answer's structuredContent is the envelope, its text block the same. */
Test(mcp, submit_and_wait_through_tools_call)
{
    const char *h[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call",
                       "Mcp-Name: submit_saga", NULL};
    const char *hw[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call",
                        "Mcp-Name: wait_saga", NULL};
    sgt_res_t r;

    start();
    r = post(
        NULL,
        "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": "
        "\"submit_saga\", \"arguments\": {\"saga\": {\"saga_id\": \"mcp-1\", \"name\": "
        "\"t\", \"steps\": [{\"name\": \"a\", \"tool\": \"echo\", \"args\": {\"x\": 1}}]}}, " META
        "}}",
        h);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_expect_not_null(strstr(r.body, "\"outcome\":\"accepted\""), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"isError\":false"), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"resultType\":\"complete\""), "%s", r.body);
    sgt_res_free(&r);
    r = post(NULL,
             "{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"tools/call\", \"params\": {\"name\": "
             "\"wait_saga\", \"arguments\": {\"saga_id\": \"mcp-1\", \"timeout_ms\": 30000}, " META
             "}}",
             hw);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_expect_not_null(strstr(r.body, "\"status\":\"ok\""), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "Done: use the output."), "%s", r.body);
    sgt_res_free(&r);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = 'mcp-1' AND submitted_by "
                           "= 'shop' AND status = 'completed'"),
                 1);
}

/* Dead letters, read-only: a reader lists them grouped and reads one, its
 * payload masked and marked untrusted, its header values left out; a
 * submitter is refused with a failure result, never a protocol error; no
 * tool replays or discards. */
Test(mcp, dead_letters_read_only_and_masked)
{
    static const char poison[] =
        "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"mcp-dl\", \"id\": \"s\", "
        "\"name\": \"n\", \"steps\": [{\"name\": \"a\", \"tool\": \"no.such.tool\", "
        "\"args\": {\"password\": \"hunter2-secret\"}}]}";
    const char *h[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call",
                       "Mcp-Name: list_dead_letters", NULL};
    const char *hg[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/call",
                        "Mcp-Name: get_dead_letter", NULL};
    const char *hl[] = {"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: tools/list", NULL};
    char body[512];
    long long id;
    sgt_res_t r;

    start();
    sgw_produce(sgw.topic_cmd, "mcp-dl", poison, strlen(poison));
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters WHERE saga_id = 'mcp-dl'");
    id = sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = 'mcp-dl'");

    r = post(gw.token[3],
             "{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {\"name\": "
             "\"list_dead_letters\", \"arguments\": {}, " META "}}",
             h);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_expect_not_null(strstr(r.body, "\"isError\":false"), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"error_code\":\"input.schema.invalid\""), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"untrusted_text\":true"), "%s", r.body);
    sgt_res_free(&r);

    snprintf(body, sizeof(body),
             "{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": \"tools/call\", \"params\": {\"name\": "
             "\"get_dead_letter\", \"arguments\": {\"id\": %lld}, " META "}}",
             id);
    r = post(gw.token[3], body, hg);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_expect_not_null(strstr(r.body, "\"isError\":false"), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"payload_untrusted\":true"), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "\"saga_id\":\"mcp-dl\""), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "****"), "the password is masked: %s", r.body);
    cr_expect_null(strstr(r.body, "hunter2-secret"), "a secret reached the agent: %s", r.body);
    cr_expect_not_null(strstr(r.body, "\"header_names\""), "%s", r.body);
    sgt_res_free(&r);

    /* shop is a submitter: a failure result that says why */
    r = post(NULL, body, hg);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_expect_not_null(strstr(r.body, "\"isError\":true"), "%s", r.body);
    cr_expect_not_null(strstr(r.body, "reader or operator role"), "%s", r.body);
    cr_expect_null(strstr(r.body, "hunter2"), "%s", r.body);
    sgt_res_free(&r);

    r = post(gw.token[3],
             "{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": \"tools/list\", \"params\": {" META
             "}}",
             hl);
    cr_assert_eq(r.status, 200, "%ld %s", r.status, r.body);
    cr_expect_not_null(strstr(r.body, "\"name\":\"get_dead_letter\""), "%s", r.body);
    cr_expect_null(strstr(r.body, "replay_dead_letter"), "%s", r.body);
    cr_expect_null(strstr(r.body, "\"name\":\"discard"), "%s", r.body);
    sgt_res_free(&r);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE saga_id = 'mcp-dl' AND "
                           "status = 'pending'"),
                 1, "reading changed the ledger");
}

/* ---- the official SDKs ---------------------------------------------------------- */

/* The description of this world the Python client reads: the HTTP
 * endpoint, each user's token, and how to start the stdio server (this
 * test's environment plus the gateway's). */
static void write_world(const char *path)
{
    sg_json_t *doc = sg_json_new_object(), *tokens = sg_json_new_object();
    sg_json_t *env = sg_json_new_object();
    char url[128], cmd[300], key[220];
    FILE *fp = fopen(path, "w");
    char *text;

    cr_assert_not_null(fp);
    snprintf(url, sizeof(url), "%s/mcp", gw.base);
    sg_json_add_str(doc, "url", url);
    for (size_t i = 0; i < NUSERS; i++)
        sg_json_add_str(tokens, users[i], gw.token[i]);
    sg_json_add_node(doc, "tokens", tokens);
    snprintf(cmd, sizeof(cmd), "%s/sagad-gateway", sgt_bin_dir());
    if (cmd[0] != '/') {
        char cwd[200];
        cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
        snprintf(cmd, sizeof(cmd), "%s/%s/sagad-gateway", cwd, sgt_bin_dir());
    }
    sg_json_add_str(doc, "command", cmd);
    for (size_t i = 0; sgw.env[i]; i++) {
        const char *eq = strchr(sgw.env[i], '=');
        char name[128];
        if (!eq || (size_t)(eq - sgw.env[i]) >= sizeof(name))
            continue;
        memcpy(name, sgw.env[i], (size_t)(eq - sgw.env[i]));
        name[eq - sgw.env[i]] = '\0';
        if (strcmp(name, "PATH") != 0)
            sg_json_add_str(env, name, eq + 1);
    }
    {
        const char *eq = strchr(sgw.op_env, '=');
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - sgw.op_env), sgw.op_env);
        sg_json_set(env, name, sg_json_new_str(eq + 1));
    }
    sg_json_add_str(env, "SAGAD_GATEWAY_USERS", gw.users_path);
    snprintf(key, sizeof(key), "%s", sgw_key_path("gateway"));
    sg_json_add_str(env, "SAGAD_GATEWAY_KEY", key);
    sg_json_add_node(doc, "env", env);
    text = sg_json_print_pretty(doc);
    fputs(text, fp);
    fclose(fp);
    free(text);
    sg_json_destroy(doc);
}

/* Runs one client run of tests/mcp/test_sdk.py; its output on failure. */
static void run_client(const char *python, const char *world, const char *transport,
                       const char *mode, const char *prefix)
{
    char cmd[1200], log[200];
    int rc;

    snprintf(log, sizeof(log), "%s/sdk-%s.log", sgw.dir, prefix);
    snprintf(cmd, sizeof(cmd),
             "%s tests/mcp/test_sdk.py --world %s --transport %s --mode %s --prefix %s > %s 2>&1",
             python, world, transport, mode, prefix, log);
    rc = system(cmd);
    {
        char tail[400];
        FILE *fp = fopen(log, "r");
        char *all = calloc(1, 200001);
        size_t n = fp ? fread(all, 1, 200000, fp) : 0;
        if (fp)
            fclose(fp);
        printf("== %s %s %s: exit %d\n%s\n", python, transport, mode,
               WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, n > 6000 ? all + n - 6000 : all);
        snprintf(tail, sizeof(tail), "%s", n > 300 ? all + n - 300 : all);
        cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s over %s (%s) failed: ...%s", python,
                  transport, mode, tail);
        free(all);
    }
}

Test(mcp_sdk, the_official_sdks_over_stdio_and_http)
{
    const char *pythons = getenv("SAGAD_TEST_MCP_PYTHONS");
    char world[200], *list, *save = NULL;
    int n = 0;

    if (!pythons || !*pythons)
        cr_skip_test("SAGAD_TEST_MCP_PYTHONS is not set: tests/mcp/run.sh runs these");
    start();
    snprintf(world, sizeof(world), "%s/world.json", sgw.dir);
    write_world(world);
    list = strdup(pythons);
    {
        /* the golden transcripts need no SDK: the first interpreter */
        char cmd[800], *first = strdup(strchr(list, '=') + 1);
        if (strchr(first, ','))
            *strchr(first, ',') = '\0';
        snprintf(cmd, sizeof(cmd), "%s tests/mcp/golden.py --world %s%s", first, world,
                 getenv("SAGAD_TEST_MCP_GOLDEN_UPDATE") ? " --update" : "");
        cr_expect_eq(system(cmd), 0, "the golden stdio transcripts (tests/mcp/golden)");
        free(first);
    }
    /* "MAJOR=PYTHON" pairs, comma-separated: each major's runs */
    for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '='), prefix[32];
        cr_assert_not_null(eq, "SAGAD_TEST_MCP_PYTHONS: MAJOR=PYTHON, ...: %s", item);
        *eq = '\0';
        if (strcmp(item, "2") == 0) {
            snprintf(prefix, sizeof(prefix), "s2m%d", n++);
            run_client(eq + 1, world, "stdio", "modern", prefix);
            snprintf(prefix, sizeof(prefix), "h2m%d", n++);
            run_client(eq + 1, world, "http", "modern", prefix);
            snprintf(prefix, sizeof(prefix), "h2l%d", n++);
            run_client(eq + 1, world, "http", "legacy", prefix);
        } else {
            snprintf(prefix, sizeof(prefix), "s1l%d", n++);
            run_client(eq + 1, world, "stdio", "2025-06-18", prefix);
            snprintf(prefix, sizeof(prefix), "h1l%d", n++);
            run_client(eq + 1, world, "http", "2025-11-25", prefix);
        }
    }
    if (getenv("SAGAD_TEST_MCP_BENCH")) {
        /* the overhead of MCP beside the API (tests/mcp/bench.py), printed */
        char cmd[800], *first = strdup(strchr(pythons, '=') + 1);
        if (strchr(first, ','))
            *strchr(first, ',') = '\0';
        snprintf(cmd, sizeof(cmd), "%s tests/mcp/bench.py --world %s", first, world);
        cr_expect_eq(system(cmd), 0, "tests/mcp/bench.py");
        free(first);
    }
    free(list);
}
