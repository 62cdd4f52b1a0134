/* The MCP resources (gw_mcp.h): what an agent may read by URI.
 *
 *   sagad://registry        the tools a saga may call (list_tools_registry's)
 *   sagad://error-codes     the error-code registry (schemas/error_codes.json):
 *                           every code's class, cause and agent_action
 *   sagad://sagas/{saga_id} a saga's envelope (get_saga's), for the users
 *                           who may read it
 *   sagad://schemas/saga-start, sagad://schemas/event
 *                           the JSON Schemas of a saga.start and of an event
 *
 * Each is read through the tool that answers the same question, so who may
 * read what is decided where the tools decide it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_mcp.h"
#include "sagad/sg_alloc.h"

extern const char sg_error_codes_json[]; /* lib/: embedded at build time */
/* schemas/NAME.schema.json, embedded at build time (Makefile, GW_GEN_OBJS) */
extern const char gw_schema_saga_start[];
extern const char gw_schema_event[];

static const struct {
    const char *uri, *name, *title, *description;
    const char *text;
} schemas[] = {
    {"sagad://schemas/saga-start", "saga-start-schema", "What a saga is",
     "The JSON Schema of a saga.start message: what submit_saga and validate_saga take as saga "
     "(the worker checks more than a schema can say: validate_saga).",
     gw_schema_saga_start},
    {"sagad://schemas/event", "event-schema", "What an event is",
     "The JSON Schema of the events get_saga_events answers.", gw_schema_event},
};
#define NSCHEMAS (sizeof(schemas) / sizeof(schemas[0]))

#define SAGA_PREFIX "sagad://sagas/"

static sg_json_t *resource(const char *key, const char *value, const char *name, const char *title,
                           const char *description)
{
    sg_json_t *r = sg_json_new_object();

    sg_json_add_str(r, key, value);
    sg_json_add_str(r, "name", name);
    sg_json_add_str(r, "title", title);
    sg_json_add_str(r, "description", description);
    sg_json_add_str(r, "mimeType", "application/json");
    return r;
}

sg_json_t *gw_mcp_resources_list(void)
{
    sg_json_t *v = sg_json_new_array();

    sg_json_append(v, resource("uri", "sagad://registry", "registry", "The tool registry",
                               "The tools a saga's steps may call: side effect, approval, "
                               "retry, compensation and args schema of each."));
    sg_json_append(v, resource("uri", "sagad://error-codes", "error-codes", "The error codes",
                               "Every error code sagad reports: its class, whether a retry can "
                               "help, its cause and agent_action."));
    for (size_t i = 0; i < NSCHEMAS; i++) {
        sg_json_t *r = resource("uri", schemas[i].uri, schemas[i].name, schemas[i].title,
                                schemas[i].description);
        sg_json_set(r, "mimeType", sg_json_new_str("application/schema+json"));
        sg_json_append(v, r);
    }
    return v;
}

sg_json_t *gw_mcp_resource_templates(void)
{
    sg_json_t *v = sg_json_new_array();

    sg_json_append(v, resource("uriTemplate", SAGA_PREFIX "{saga_id}", "saga", "A saga",
                               "A saga's envelope (as get_saga answers it), for a user who may "
                               "read it."));
    return v;
}

bool gw_mcp_resource_known(const char *uri)
{
    for (size_t i = 0; i < NSCHEMAS; i++)
        if (strcmp(uri, schemas[i].uri) == 0)
            return true;
    return strcmp(uri, "sagad://registry") == 0 || strcmp(uri, "sagad://error-codes") == 0 ||
           (strncmp(uri, SAGA_PREFIX, strlen(SAGA_PREFIX)) == 0 && uri[strlen(SAGA_PREFIX)]);
}

/* The structured answer of a tool, or NULL when it refused. */
static char *through(gw_t *gw, const gw_caller_t *c, const char *tool, sg_json_t *args)
{
    sg_json_t *result = NULL;
    bool is_error = true;
    char *text = NULL;

    if (gw_mcp_tool_call(gw, c, false, tool, args, &result) &&
        sg_json_get_bool(result, "$", "isError", true, &is_error, NULL) == 0 && !is_error)
        text = sg_json_print(sg_json_member(result, "structuredContent"));
    sg_json_destroy(result);
    sg_json_destroy(args);
    return text;
}

char *gw_mcp_resource_read(gw_t *gw, const gw_caller_t *c, const char *uri)
{
    sg_json_t *args = sg_json_new_object();

    for (size_t i = 0; i < NSCHEMAS; i++)
        if (strcmp(uri, schemas[i].uri) == 0) {
            sg_json_destroy(args);
            return sg_xstrdup(schemas[i].text);
        }
    if (strcmp(uri, "sagad://error-codes") == 0) {
        sg_json_destroy(args);
        return sg_xstrdup(sg_error_codes_json);
    }
    if (strcmp(uri, "sagad://registry") == 0)
        return through(gw, c, "list_tools_registry", args);
    sg_json_add_str(args, "saga_id", uri + strlen(SAGA_PREFIX));
    return through(gw, c, "get_saga", args);
}
