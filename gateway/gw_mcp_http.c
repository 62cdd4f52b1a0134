/* POST /mcp: MCP's Streamable HTTP transport (gw_mcp.h, docs/AGENTS.md).
 *
 * gw_server.c has already done what it does for every route: the Origin
 * (a browser page of another site gets 403), authentication (bearer token
 * or trusted proxy: 401 otherwise), the principal's rate limit, and the
 * body's size (413 over limits.max_message_bytes).  Here: one JSON-RPC
 * message per POST, answered with application/json, or with a
 * text/event-stream of one event when the client accepts only that (a
 * request here is answered whole: there is nothing to stream before the
 * answer).  A notification or a client's response is 202 with no body.
 * GET and DELETE /mcp are 405: no stream is offered outside a request and
 * no session is kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw_mcp.h"
#include "sagad/sg_alloc.h"

/* Whether the Accept header lists type (or a wildcard that covers it). */
static bool accepts(const char *accept, const char *type)
{
    return !accept || strstr(accept, type) || strstr(accept, "*/*") ||
           (strncmp(type, "application/", 12) == 0 && strstr(accept, "application/*"));
}

static void rpc_answer(sg_http_answer_t *ans, unsigned status, char *text, bool sse)
{
    ans->status = status;
    if (!sse) {
        ans->type = "application/json";
        ans->body = text;
        ans->len = strlen(text);
        return;
    }
    ans->type = "text/event-stream";
    ans->len = strlen(text) + 32;
    ans->body = sg_xmalloc(ans->len);
    ans->len = (size_t)snprintf(ans->body, ans->len, "event: message\ndata: %s\n\n", text);
    free(text);
    sg_http_answer_header(ans, "Cache-Control", "no-cache");
    sg_http_answer_header(ans, "X-Accel-Buffering", "no");
}

void gw_mcp_http(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                 sg_http_answer_t *ans)
{
    const char *ctype = sg_http_req_header(req, "Content-Type");
    const char *accept = sg_http_req_header(req, "Accept");
    gw_mcp_hdrs_t hdrs = {sg_http_req_header(req, "MCP-Protocol-Version"),
                          sg_http_req_header(req, "Mcp-Method"),
                          sg_http_req_header(req, "Mcp-Name")};
    bool json = accepts(accept, "application/json");
    bool sse = !json && accepts(accept, "text/event-stream");
    gw_mcp_out_t out;
    gw_mcp_t m;
    const char *body;
    size_t len;

    (void)a;
    if (ctype && strncasecmp(ctype, "application/json", 16) != 0) {
        rpc_answer(ans, 415,
                   gw_rpc_error(NULL, GW_RPC_INVALID_REQUEST,
                                "Unsupported Media Type: Content-Type: application/json", NULL),
                   false);
        return;
    }
    if (!json && !sse) {
        rpc_answer(ans, 406,
                   gw_rpc_error(NULL, GW_RPC_INVALID_REQUEST,
                                "Not Acceptable: Accept application/json or text/event-stream",
                                NULL),
                   false);
        return;
    }
    body = sg_http_req_body(req, &len);
    gw_mcp_init(&m, gw, false);
    gw_mcp_handle(&m, c, body, len, &hdrs, &out);
    gw_mcp_fini(&m);
    if (!out.text) {
        ans->status = 202;
        return;
    }
    rpc_answer(ans, out.status, out.text, sse);
}
