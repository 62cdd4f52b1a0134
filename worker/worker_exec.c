/* The exec adapter: a tool is a program run once per call. */
#include "worker.h"

static int exec_prepare(worker_tool_t *tool, const sg_json_t *node, const char *base,
                        const sg_config_t *cfg, sg_err_t *err)
{
    (void)tool;
    (void)node;
    (void)cfg;
    return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                      "%s.adapter: adapter \"exec\" is not available in this build yet", base);
}

const worker_adapter_t worker_exec_adapter = {
    .name = "exec", .prepare = exec_prepare, .breaker = true};
