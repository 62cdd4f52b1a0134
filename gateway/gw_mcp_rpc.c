/* JSON-RPC 2.0 for the MCP server (gw_mcp.h): one message decoded, answers
 * encoded.
 *
 * What is refused, and with which code:
 *   -32700  not JSON (malformed, bad UTF-8, a NUL)
 *   -32600  over the size, nesting or node limits, duplicate members, a
 *           batch (MCP removed batches in 2025-06-18, and no revision
 *           spoken here has them), not an object, jsonrpc not "2.0", an
 *           id that is null, fractional, beyond 2^53-1 or not a string or
 *           number, a method that is not a string, params not structured
 *   -32602  params an array (MCP's params are objects)
 * An id is echoed only when it is usable: a string, or an integer that
 * prints back as it came, so an answer always names the request it
 * answers or says null. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_mcp.h"
#include "sagad/sg_text.h"

#define ID_INT_MAX 9007199254740991.0 /* 2^53-1: exact in a double */

static gw_rpc_kind_t invalid(gw_rpc_msg_t *msg, int code, const char *message)
{
    msg->kind = GW_RPC_INVALID;
    msg->code = code;
    snprintf(msg->message, sizeof(msg->message), "%s", message);
    return GW_RPC_INVALID;
}

/* The JSON-RPC code of a document sg_json_parse refused. */
static int parse_code(const char *err_code)
{
    if (strcmp(err_code, "input.json.malformed") == 0 ||
        strcmp(err_code, "input.utf8.invalid") == 0 || strcmp(err_code, "input.json.nul") == 0)
        return GW_RPC_PARSE_ERROR;
    return GW_RPC_INVALID_REQUEST;
}

static bool id_usable(const sg_json_t *id)
{
    double v;

    if (sg_json_string(id))
        return true;
    if (!sg_json_number(id, &v))
        return false;
    return v == floor(v) && fabs(v) <= ID_INT_MAX;
}

gw_rpc_kind_t gw_rpc_decode(const char *buf, size_t len, const sg_json_limits_t *lim,
                            gw_rpc_msg_t *msg)
{
    const sg_json_t *id, *method, *params, *version;
    sg_err_t err;
    char why[200];

    memset(msg, 0, sizeof(*msg));
    if (len > lim->max_bytes) {
        snprintf(why, sizeof(why), "Invalid Request: over %zu bytes (limits.max_message_bytes)",
                 lim->max_bytes);
        return invalid(msg, GW_RPC_INVALID_REQUEST, why);
    }
    if (!(msg->doc = sg_json_parse(buf ? buf : "", len, lim, &err))) {
        int code = parse_code(err.code);
        char cut[151]; /* the client's own keys may be in it: never half a character */

        snprintf(why, sizeof(why), "%s: %s",
                 code == GW_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request",
                 sg_text_copy(cut, sizeof(cut), err.message));
        return invalid(msg, code, why);
    }
    if (sg_json_is_array(msg->doc))
        return invalid(msg, GW_RPC_INVALID_REQUEST,
                       "Invalid Request: batches are not supported (MCP removed them in "
                       "2025-06-18): send one message at a time");
    if (!sg_json_is_object(msg->doc))
        return invalid(msg, GW_RPC_INVALID_REQUEST, "Invalid Request: a message is a JSON object");
    id = sg_json_member(msg->doc, "id");
    if (id && id_usable(id))
        msg->id = id;
    version = sg_json_member(msg->doc, "jsonrpc");
    if (!sg_json_string(version) || strcmp(sg_json_string(version), "2.0") != 0)
        return invalid(msg, GW_RPC_INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"");
    if (id && !msg->id)
        return invalid(msg, GW_RPC_INVALID_REQUEST,
                       "Invalid Request: id must be a string or an integer (not null)");
    method = sg_json_member(msg->doc, "method");
    if (!method) {
        if (id && (sg_json_member(msg->doc, "result") || sg_json_member(msg->doc, "error"))) {
            msg->kind = GW_RPC_RESPONSE;
            return msg->kind;
        }
        return invalid(msg, GW_RPC_INVALID_REQUEST, "Invalid Request: method is required");
    }
    if (!sg_json_string(method) || !*sg_json_string(method))
        return invalid(msg, GW_RPC_INVALID_REQUEST,
                       "Invalid Request: method must be a non-empty string");
    msg->method = sg_json_string(method);
    params = sg_json_member(msg->doc, "params");
    if (params && sg_json_is_array(params))
        return invalid(msg, GW_RPC_INVALID_PARAMS, "Invalid params: params must be an object");
    if (params && !sg_json_is_object(params))
        return invalid(msg, GW_RPC_INVALID_REQUEST, "Invalid Request: params must be an object");
    msg->params = params;
    msg->kind = id ? GW_RPC_REQUEST : GW_RPC_NOTIFICATION;
    return msg->kind;
}

void gw_rpc_msg_free(gw_rpc_msg_t *msg)
{
    sg_json_destroy(msg->doc);
    memset(msg, 0, sizeof(*msg));
}

static sg_json_t *envelope(const sg_json_t *id)
{
    sg_json_t *doc = sg_json_new_object();

    sg_json_add_str(doc, "jsonrpc", "2.0");
    if (id)
        sg_json_add_node(doc, "id", sg_json_dup(id));
    else
        sg_json_add_null(doc, "id");
    return doc;
}

char *gw_rpc_result(const sg_json_t *id, sg_json_t *result)
{
    sg_json_t *doc = envelope(id);
    char *text;

    sg_json_add_node(doc, "result", result);
    text = sg_json_print(doc);
    sg_json_destroy(doc);
    return text;
}

char *gw_rpc_error(const sg_json_t *id, int code, const char *message, sg_json_t *data)
{
    sg_json_t *doc = envelope(id), *e = sg_json_new_object();
    char *text;

    sg_json_add_int(e, "code", code);
    sg_json_add_str(e, "message", message);
    if (data)
        sg_json_add_node(e, "data", data);
    sg_json_add_node(doc, "error", e);
    text = sg_json_print(doc);
    sg_json_destroy(doc);
    return text;
}
