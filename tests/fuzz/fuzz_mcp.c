/* libFuzzer target: what sagad-gateway's MCP server decodes from a client
 * before any tool runs (gateway/gw_mcp.h): one JSON-RPC message, its era,
 * its method and params.  The first byte chooses the transport: even,
 * stdio (a fresh process each input: not initialized); odd, HTTP with the headers
 * of a 2026-07-28 tools/call.  Properties:
 *   - the decoder's verdict is one of its kinds; an invalid message has a
 *     standard code; a request has a method and an id that prints back;
 *   - an answer, when there is one, is one line of JSON: jsonrpc "2.0",
 *     an id, and exactly one of result and error, with an HTTP status the
 *     transport may send;
 *   - no tool runs here (a tool call that would run is dropped). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../gateway/gw_mcp.h"

static gw_t gw;
static gw_mcp_t http_m;

static void init(void)
{
    static sg_config_t *cfg;

    if (cfg)
        return;
    cfg = sg_config_new();
    gw.cfg = cfg;
    gw.lim.max_bytes = 65536;
    gw.lim.max_depth = 64;
    gw.lim.max_nodes = 20000;
    gw_mcp_init(&http_m, &gw, false);
}

static void decoded(const char *text, size_t n)
{
    gw_rpc_msg_t msg;
    gw_rpc_kind_t kind = gw_rpc_decode(text, n, &gw.lim, &msg);

    switch (kind) {
    case GW_RPC_INVALID:
        if (msg.code != GW_RPC_PARSE_ERROR && msg.code != GW_RPC_INVALID_REQUEST &&
            msg.code != GW_RPC_INVALID_PARAMS)
            abort();
        break;
    case GW_RPC_REQUEST:
        if (!msg.id || !msg.method || !*msg.method)
            abort();
        /* fall through */
    case GW_RPC_NOTIFICATION:
        if (!msg.method || (msg.params && !sg_json_is_object(msg.params)))
            abort();
        break;
    case GW_RPC_RESPONSE:
        if (!msg.id)
            abort();
        break;
    default:
        abort();
    }
    if (msg.id) {
        char *a = gw_rpc_error(msg.id, -32601, "x", NULL);
        sg_json_t *back = sg_json_parse(a, strlen(a), NULL, NULL);
        if (!back || !sg_json_equal(sg_json_member(back, "id"), msg.id))
            abort(); /* an id goes back as it came */
        sg_json_destroy(back);
        free(a);
    }
    gw_rpc_msg_free(&msg);
}

static void answered(gw_mcp_t *m, const char *text, size_t n, const gw_mcp_hdrs_t *h)
{
    gw_user_t user = {.name = "fuzz", .perms = GW_P_READ_ALL};
    gw_caller_t caller = {.user = &user, .via = "token"};
    gw_mcp_call_t *pending;
    gw_mcp_out_t out;
    sg_json_t *doc;

    gw_mcp_start(m, &caller, text, n, h, &out, &pending);
    gw_mcp_drop(pending);
    free(out.cancelled);
    if (!out.text) {
        if (out.status != 202 && !pending)
            abort();
        return;
    }
    if (out.status != 200 && out.status != 400 && out.status != 404 && out.status != 500)
        abort();
    if (strchr(out.text, '\n'))
        abort();
    doc = sg_json_parse(out.text, strlen(out.text), NULL, NULL);
    if (!doc || strcmp(sg_json_string(sg_json_member(doc, "jsonrpc")), "2.0") != 0 ||
        !sg_json_member(doc, "id") ||
        !!sg_json_member(doc, "result") == !!sg_json_member(doc, "error"))
        abort();
    sg_json_destroy(doc);
    free(out.text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const gw_mcp_hdrs_t h = {"2026-07-28", "tools/call", "get_saga"};

    init();
    if (size < 1)
        return 0;
    decoded((const char *)data + 1, size - 1);
    if (data[0] % 2 == 0) {
        gw_mcp_t stdio_m;
        gw_mcp_init(&stdio_m, &gw, true);
        answered(&stdio_m, (const char *)data + 1, size - 1, NULL);
        gw_mcp_fini(&stdio_m);
    } else
        answered(&http_m, (const char *)data + 1, size - 1, &h);
    return 0;
}
