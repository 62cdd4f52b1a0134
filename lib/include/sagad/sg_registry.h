/* sg_registry: the tool registry file, the contract every binary that
 * checks a saga reads the same way (the worker runs the tools; dlq-tool
 * and other front ends only validate against them).
 *
 * The file is checked as a whole (schemas/tool-registry.schema.json is
 * the contract): the first problem fails the load with the file, the JSON
 * path and the rule.  Adapter-specific meaning (an http target's URL, an
 * exec argv) is the running program's to check: sagad-worker prepares each
 * tool with its adapter after this load (worker/tools/worker_registry.c). */
#ifndef SAGAD_REGISTRY_H
#define SAGAD_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_config.h"
#include "sagad/sg_err.h"
#include "sagad/sg_json.h"

typedef enum sg_effect_e {
    SG_EFFECT_READ,
    SG_EFFECT_IDEMPOTENT,
    SG_EFFECT_REVERSIBLE,
    SG_EFFECT_IRREVERSIBLE,
} sg_effect_t;

const char *sg_effect_name(sg_effect_t e);

typedef struct sg_policy_s {
    int max_attempts; /* 0: the config's default */
    int64_t base_ms, cap_ms;
} sg_policy_t;

/* What the registry says of one kind of adapter: its own fields beside
 * the common ones, and whether it reaches outside the process (then its
 * tools take max_response_bytes and a circuit breaker). */
typedef struct sg_adapter_kind_s {
    const char *name;
    const char *const *fields; /* NULL-terminated */
    bool external;
} sg_adapter_kind_t;

/* Tool and step names: 1-64 characters of A-Z a-z 0-9 . _ - (they end up
 * in idempotency keys, paths and logs). */
bool sg_name_ok(const char *s);

typedef struct sg_tool_s {
    char *name;
    const sg_adapter_kind_t *kind;
    char *target; /* builtin name or URL; exec argv lives in target_json */
    sg_json_t *target_json;
    int64_t timeout_ms;
    sg_effect_t effect;
    char *compensation; /* default compensating tool, NULL when none */
    /* "approval": "required": every step of this tool waits for a person's
     * saga.approve before its call (an approval gate). */
    bool approval_required;
    sg_policy_t retry, comp_retry;
    int concurrency;            /* 0: unlimited */
    sg_json_t *args_schema;     /* NULL: any object */
    int64_t max_response_bytes; /* http body / exec stdout cap (external kinds) */
    int breaker_threshold;      /* external kinds: the breaker's settings */
    int64_t breaker_cooldown_ms;
    const sg_json_t *node; /* the tool's object in the registry document */

    /* The program that runs the tools owns these; sg_registry sets them
     * to zero and never reads them. */
    const struct sg_tool_adapter_s *adapter;
    void *state;
    int running;
    struct sg_tool_breaker_s *breaker;
} sg_tool_t;

/* What the program that runs the tools adds to each (sagad-worker: the
 * adapter, its breaker and state).  prepare runs for each tool right after
 * its common fields were read (node is its object at JSON path base) and
 * fails the load with err ("PATH: rule"; the file is added); release
 * undoes it and runs for every tool when the registry is destroyed, also
 * for tools prepare never saw or failed on. */
typedef struct sg_registry_hooks_s {
    int (*prepare)(sg_tool_t *t, const sg_json_t *node, const char *base, const sg_config_t *cfg,
                   void *opaque, sg_err_t *err);
    void (*release)(sg_tool_t *t, void *opaque);
    void *opaque;
} sg_registry_hooks_t;

typedef struct sg_registry_s {
    char *path;
    sg_tool_t *tools;
    size_t ntools;
    sg_json_t *doc;
    sg_registry_hooks_t hooks;
} sg_registry_t;

/* Loads and checks a registry file (breaker defaults from cfg's breaker.*
 * keys), with hooks (NULL: none) for each tool; registers the file's
 * credentials for log masking.  On failure returns NULL with err naming
 * the file, the JSON path and the rule (config.registry.invalid or
 * config.registry.unreadable). */
sg_registry_t *sg_registry_load(const char *path, const sg_config_t *cfg,
                                const sg_registry_hooks_t *hooks, sg_err_t *err)
    __attribute__((warn_unused_result));
/* The same from the file's text (text[0..len), path only names it in
 * errors): what sg_registry_load does after reading the file. */
sg_registry_t *sg_registry_parse(const char *path, const char *text, size_t len,
                                 const sg_config_t *cfg, const sg_registry_hooks_t *hooks,
                                 sg_err_t *err) __attribute__((warn_unused_result));
/* Releases every tool through the hooks, then frees; NULL is a no-op. */
void sg_registry_destroy(sg_registry_t *reg);
const sg_tool_t *sg_registry_find(const sg_registry_t *reg, const char *name);

/* Sets err to "FILE: PATH: rule" (config.registry.invalid); returns -1. */
int sg_registry_bad(sg_err_t *err, const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
