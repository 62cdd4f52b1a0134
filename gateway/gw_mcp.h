/* sagad-gateway's MCP server (docs/AGENTS.md), private to gateway/gw_mcp*.c
 * and their tests.
 *
 *   gw_mcp_rpc.c     JSON-RPC 2.0: one message decoded (size, shape, id,
 *                    method, params) and answers encoded; fuzzed
 *   gw_mcp.c         the protocol: which era a message speaks (legacy
 *                    initialize handshake, 2025-06-18 and 2025-11-25; the
 *                    stateless 2026-07-28 with its per-request _meta),
 *                    the methods, and their answers
 *   gw_mcp_tools.c   the tools: their schemas and annotations, and each
 *                    call answered by the API's own handler (a request made
 *                    in the program, sg_http_req_new), so roles, four eyes
 *                    and the checks of a submission are decided in one place
 *   gw_mcp_data.c    what a tool answers: envelopes, failures, and the rule
 *                    that text from downstream services is data (cut, kept
 *                    in fields, never an agent_action); pure
 *   gw_mcp_events.c  a saga's events after a seq, read from topic.events
 *   gw_mcp_http.c    Streamable HTTP: POST /mcp, a JSON answer or an SSE
 *                    stream of one event
 *   gw_mcp_stdio.c   `sagad-gateway mcp --stdio`: newline-delimited
 *                    JSON-RPC on stdin and stdout */
#ifndef SAGAD_GW_MCP_H
#define SAGAD_GW_MCP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw.h"

/* The revisions spoken: the modern (stateless) one, then the legacy ones
 * an initialize may choose, newest first. */
#define GW_MCP_MODERN        "2026-07-28"
#define GW_MCP_LEGACY_LATEST "2025-11-25"
#define GW_MCP_LEGACY_OLDER  "2025-06-18"

/* ---- JSON-RPC 2.0 (gw_mcp_rpc.c) ------------------------------------------ */

enum {
    GW_RPC_PARSE_ERROR = -32700,
    GW_RPC_INVALID_REQUEST = -32600,
    GW_RPC_METHOD_NOT_FOUND = -32601,
    GW_RPC_INVALID_PARAMS = -32602,
    GW_RPC_INTERNAL_ERROR = -32603,
    /* MCP 2026-07-28's own codes */
    GW_RPC_HEADER_MISMATCH = -32020,
    GW_RPC_UNSUPPORTED_VERSION = -32022,
};

typedef enum gw_rpc_kind_e {
    GW_RPC_REQUEST,      /* method and id */
    GW_RPC_NOTIFICATION, /* method, no id: nothing is answered */
    GW_RPC_RESPONSE,     /* result or error: a client's answer, ignored */
    GW_RPC_INVALID,      /* answered with code and message (and id when usable) */
} gw_rpc_kind_t;

typedef struct gw_rpc_msg_s {
    gw_rpc_kind_t kind;
    sg_json_t *doc;          /* the message, owned */
    const sg_json_t *id;     /* a string or an integer of at most 2^53-1; NULL: none usable */
    const char *method;      /* requests and notifications */
    const sg_json_t *params; /* an object, or NULL when absent */
    int code;                /* GW_RPC_INVALID: the error to answer */
    char message[200];
} gw_rpc_msg_t;

/* Decodes one JSON-RPC message of buf[0..len): a single object (a batch,
 * which no revision spoken here allows, is an invalid request), at most
 * lim->max_bytes, nesting and nodes within lim.  Fills msg and returns its
 * kind; free it with gw_rpc_msg_free whatever the kind.  Pure. */
gw_rpc_kind_t gw_rpc_decode(const char *buf, size_t len, const sg_json_limits_t *lim,
                            gw_rpc_msg_t *msg);
void gw_rpc_msg_free(gw_rpc_msg_t *msg);

/* The text of an answer to id (NULL: "id": null), one line, malloc'd:
 * the result (taken), or an error with data (taken; NULL: none). */
char *gw_rpc_result(const sg_json_t *id, sg_json_t *result);
char *gw_rpc_error(const sg_json_t *id, int code, const char *message, sg_json_t *data);

/* ---- the protocol (gw_mcp.c) ------------------------------------------------ */

typedef struct gw_mcp_s {
    gw_t *gw;
    bool approvals; /* mcp.approvals: approve_step and reject_step offered */
    bool stdio;     /* one client for the process: initialize chooses its revision */
    pthread_mutex_t mu;
    char legacy[16]; /* stdio: the revision initialize chose, "" before */
} gw_mcp_t;

void gw_mcp_init(gw_mcp_t *m, gw_t *gw, bool stdio);
void gw_mcp_fini(gw_mcp_t *m);

/* What HTTP carried beside the body (NULL on stdio): the values of
 * MCP-Protocol-Version, Mcp-Method and Mcp-Name (NULL when absent). */
typedef struct gw_mcp_hdrs_s {
    const char *version, *method, *name;
} gw_mcp_hdrs_t;

/* The answer to one message: the HTTP status it goes with, and its text
 * (malloc'd, one line), NULL when nothing is answered (a notification, a
 * client's response). */
typedef struct gw_mcp_out_s {
    unsigned status;
    char *text;
    /* notifications/cancelled: the JSON text of the requestId it names
     * (malloc'd), for a transport that still has that request in flight;
     * NULL otherwise */
    char *cancelled;
} gw_mcp_out_t;

/* Answers the message buf[0..len) of caller. */
void gw_mcp_handle(gw_mcp_t *m, const gw_caller_t *caller, const char *buf, size_t len,
                   const gw_mcp_hdrs_t *hdrs, gw_mcp_out_t *out);

/* gw_mcp_handle in two halves, for a transport that answers tool calls
 * concurrently yet must take the protocol's own messages in the order they
 * came (stdio: what was read after initialize sees it done).  gw_mcp_start
 * answers into out, except a tools/call whose tool may run: then out is
 * empty and *pending is set; gw_mcp_run runs it (any thread), answers into
 * its out and frees pending.  caller must outlive pending. */
typedef struct gw_mcp_call_s gw_mcp_call_t;
void gw_mcp_start(gw_mcp_t *m, const gw_caller_t *caller, const char *buf, size_t len,
                  const gw_mcp_hdrs_t *hdrs, gw_mcp_out_t *out, gw_mcp_call_t **pending);
void gw_mcp_run(gw_mcp_call_t *pending, gw_mcp_out_t *out);
/* Frees pending without running its tool (nothing is answered). */
void gw_mcp_drop(gw_mcp_call_t *pending);
/* The JSON text of pending's request id (malloc'd), to match a
 * cancellation against. */
char *gw_mcp_call_id(const gw_mcp_call_t *pending);

/* ---- the tools (gw_mcp_tools.c) ---------------------------------------------- */

/* The tools offered (a new array of MCP Tool objects, caller destroys);
 * approve_step and reject_step only when approvals. */
sg_json_t *gw_mcp_tools_list(bool approvals);
/* Whether tool name is offered (approve_step and reject_step only with
 * approvals). */
bool gw_mcp_tool_known(const char *name, bool approvals);
/* Calls tool name with args (an object, or NULL) for caller: 1 with
 * *result a CallToolResult (caller destroys), 0 when there is no such tool
 * (a protocol error, -32602). */
int gw_mcp_tool_call(gw_t *gw, const gw_caller_t *caller, bool approvals, const char *name,
                     const sg_json_t *args, sg_json_t **result);

/* ---- the resources (gw_mcp_resources.c) -------------------------------------- */

/* resources/list's and resources/templates/list's items (new arrays). */
sg_json_t *gw_mcp_resources_list(void);
sg_json_t *gw_mcp_resource_templates(void);
/* Whether uri names a resource offered (a saga's, whether or not it exists). */
bool gw_mcp_resource_known(const char *uri);
/* The resource's JSON text for caller (malloc'd), NULL when there is none
 * it may read. */
char *gw_mcp_resource_read(gw_t *gw, const gw_caller_t *caller, const char *uri);

/* ---- what tools answer (gw_mcp_data.c) ---------------------------------------- */

/* Text and JSON from downstream services (results, outputs, messages,
 * their own agent_action) are data: strings are cut at this many bytes,
 * a member whose JSON is longer is replaced by a preview. */
#define GW_MCP_TEXT_MAX  1000
#define GW_MCP_VALUE_MAX 8192

/* A CallToolResult of structured (taken): structuredContent, the same JSON
 * in a text block, and isError. */
sg_json_t *gw_mcp_result(sg_json_t *structured, bool is_error);
/* The failure envelope: {status, error_code, message, retriable,
 * agent_action, run_health}; status is "unavailable" when the code's class
 * is retried, else "refused".  agent_action is override when given, else
 * the registry's for code.  run_health taken (NULL: null). */
sg_json_t *gw_mcp_failure(const char *code, const char *message, const char *override,
                          sg_json_t *run_health);
/* A gateway answer (status and body) that is not a success, as a failure
 * envelope: the problem's code (or one for its status; not_found for 404),
 * its detail as message, its errors kept. */
sg_json_t *gw_mcp_failure_of(unsigned status, const sg_json_t *problem, const char *not_found);
/* Rewrites a saga envelope of the API (GET /v1/sagas/{id}) for an agent,
 * in place: every agent_action from the registry or the server (a
 * downstream's own goes to reported_agent_action, cut), results and output
 * cut, pending_approvals listed, and the top agent_action saying what to
 * do next (for a wait that ended first, to wait again after its seq).  A
 * saga that ended error or timeout also gets message and retriable: it is
 * a failure envelope too (gw_mcp_envelope_failed). */
void gw_mcp_envelope(sg_json_t *env, bool wait_timed_out);
/* Whether the envelope is of a saga that failed (status error or timeout):
 * answered with isError. */
bool gw_mcp_envelope_failed(const sg_json_t *env);
/* Cuts every string of node longer than GW_MCP_TEXT_MAX and replaces each
 * member or item whose JSON is over GW_MCP_VALUE_MAX by a preview, in
 * place; an event's agent_action is treated as an envelope's steps'. */
void gw_mcp_data(sg_json_t *node);

/* ---- events (gw_mcp_events.c) -------------------------------------------------- */

/* Appends to events (an array) the events of saga_id with a seq after
 * after_seq, in seq order, up to upto (the saga's seq when read) or limit
 * events, reading topic.events from shortly before created_ms for at most
 * budget_ms.  0 with *complete telling whether every one up to upto was
 * found; -1 with why when Kafka cannot be read. */
int gw_mcp_events_read(gw_t *gw, const char *saga_id, int64_t created_ms, int64_t after_seq,
                       int64_t upto, size_t limit, int64_t budget_ms, sg_json_t *events,
                       bool *complete, char *why, size_t why_size);

#endif
