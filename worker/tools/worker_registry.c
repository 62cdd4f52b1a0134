/* The worker's side of the tool registry: the adapter behind each tool.
 *
 * lib/contract/sg_registry.c reads and checks the file (the contract every binary
 * shares); for each tool it calls prepare_tool below, which finds the
 * tool's adapter, gives an external tool its circuit breaker and lets the
 * adapter check and prepare its own fields.  A problem in either stops
 * the worker with the file, the JSON path and the rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker.h"

static const worker_adapter_t *const adapters[] = {
    &worker_builtin_adapter,
    &worker_http_adapter,
    &worker_exec_adapter,
};

#define NADAPTERS (sizeof(adapters) / sizeof(adapters[0]))

void worker_adapters_stop(void)
{
    for (size_t i = 0; i < NADAPTERS; i++)
        if (adapters[i]->stop)
            adapters[i]->stop();
}

static int prepare_tool(sg_tool_t *t, const sg_json_t *node, const char *base,
                        const sg_config_t *cfg, void *opaque, sg_err_t *err)
{
    (void)opaque;
    for (size_t i = 0; i < NADAPTERS && !t->adapter; i++)
        if (strcmp(adapters[i]->name, t->kind->name) == 0)
            t->adapter = adapters[i];
    if (!t->adapter) /* a kind of the contract this worker has no code for */
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: adapter %s is not built into this worker", base, t->kind->name);
    if (t->kind->external)
        t->breaker = worker_breaker_new(t->breaker_threshold, t->breaker_cooldown_ms);
    return t->adapter->prepare(t, node, base, cfg, err);
}

static void release_tool(sg_tool_t *t, void *opaque)
{
    (void)opaque;
    if (t->adapter && t->adapter->release)
        t->adapter->release(t);
    worker_breaker_destroy(t->breaker);
    t->breaker = NULL;
}

sg_registry_t *worker_registry_load(const char *path, const sg_config_t *cfg, sg_err_t *err)
{
    static const sg_registry_hooks_t hooks = {prepare_tool, release_tool, NULL};

    return sg_registry_load(path, cfg, &hooks, err);
}

int worker_cmd_check_registry(sg_cli_t *cli, int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : sg_config_str(cli->cfg, "worker.registry");
    sg_registry_t *reg;
    sg_err_t err;

    if (argc > 2 || !*path) {
        fprintf(stderr, "usage: %s check-registry [FILE] (or set worker.registry)\n", cli->prog);
        return SG_EXIT_USAGE;
    }
    reg = worker_registry_load(path, cli->cfg, &err);
    if (!reg) {
        fprintf(stderr, "%s: %s\n", cli->prog, err.message);
        return SG_EXIT_USAGE;
    }
    printf("%-24s %-8s %-14s %-10s %s\n", "TOOL", "ADAPTER", "SIDE_EFFECT", "TIMEOUT",
           "COMPENSATION");
    for (size_t i = 0; i < reg->ntools; i++) {
        const sg_tool_t *t = &reg->tools[i];
        char timeout[24];
        snprintf(timeout, sizeof(timeout), "%lldms", (long long)t->timeout_ms);
        printf("%-24s %-8s %-14s %-10s %s\n", t->name, t->adapter->name, sg_effect_name(t->effect),
               timeout, t->compensation ? t->compensation : "-");
    }
    fprintf(stderr, "%s: %s: %zu tools, ok\n", cli->prog, path, reg->ntools);
    sg_registry_destroy(reg);
    return SG_EXIT_OK;
}
