/* The tool registry file: which tools a saga may name, and the settings
 * the worker calls them with.  The contract is
 * schemas/tool-registry.schema.json; the first problem fails the load with
 * the file, the JSON path and the rule, because a worker running with half
 * a registry would reject or fail sagas for reasons nobody can see. */
#include "sagad/sg_alloc.h"
#include "sagad/sg_registry.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sagad/sg_mask.h"
#include "sagad/sg_schema.h"

#define REGISTRY_MAX_BYTES (4 * 1024 * 1024)

/* The adapters a registry may name, with their own fields: the part of
 * each adapter that is contract, not code (worker/tools/worker_http.c and
 * worker_exec.c give the fields their meaning). */
static const char *const http_fields[] = {
    "method", "headers", "connect_timeout_ms", "tls_verify", "ca_path", "nothing_to_undo", NULL};
static const char *const no_fields[] = {NULL};
static const sg_adapter_kind_t kinds[] = {
    {"builtin", no_fields, false},
    {"http", http_fields, true},
    {"exec", no_fields, true},
};

#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static const char *const effect_names[] = {"read", "idempotent", "reversible", "irreversible"};

const char *sg_effect_name(sg_effect_t e)
{
    return effect_names[e];
}

bool sg_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 64)
        return false;
    for (; *s; s++)
        if (!(*s == '.' || *s == '_' || *s == '-' || (*s >= '0' && *s <= '9') ||
              (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
            return false;
    return true;
}

int sg_registry_bad(sg_err_t *err, const char *file, const char *path, const char *fmt, ...)
{
    va_list ap;
    char rule[300];

    va_start(ap, fmt);
    vsnprintf(rule, sizeof(rule), fmt, ap);
    va_end(ap);
    return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid", "%s: %s: %s", file,
                      path, rule);
}

/* sg_json's typed getters name the path already; add the file. */
static int with_file(sg_err_t *err, const char *file)
{
    sg_err_t e = *err;

    return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid", "%s: %s", file,
                      e.message);
}

static bool listed(const char *const *list, const char *key)
{
    for (; list && *list; list++)
        if (strcmp(*list, key) == 0)
            return true;
    return false;
}

/* Every member of the object at path is in known (NULL-terminated); else
 * "unknown field (known: ...)" naming the member. */
static int only_known(const sg_json_t *obj, const char *path, const char *const *known,
                      const char *file, sg_err_t *err)
{
    char mpath[400], names[200] = "";

    for (const sg_json_t *m = sg_json_first(obj); m; m = sg_json_next(m)) {
        if (listed(known, sg_json_key(m)))
            continue;
        for (const char *const *k = known; *k; k++)
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                     k == known ? "" : ", ", *k);
        sg_json_path_key(mpath, sizeof(mpath), path, sg_json_key(m));
        return sg_registry_bad(err, file, mpath, "unknown field (known: %s)", names);
    }
    return 0;
}

static int int_field(const sg_json_t *obj, const char *base, const char *key, int64_t min,
                     int64_t max, int64_t *out, const char *file, sg_err_t *err)
{
    char path[256];
    int rc = sg_json_get_int(obj, base, key, false, out, err);

    if (rc < 0)
        return with_file(err, file);
    if (rc == 0 && (*out < min || *out > max)) {
        sg_json_path_key(path, sizeof(path), base, key);
        return sg_registry_bad(err, file, path, "must be between %lld and %lld, got %lld",
                               (long long)min, (long long)max, (long long)*out);
    }
    return 0;
}

static int load_policy(const sg_json_t *tool, const char *base, const char *key, sg_policy_t *pol,
                       const char *file, sg_err_t *err)
{
    static const char *const known[] = {"max_attempts", "base_ms", "cap_ms", NULL};
    const sg_json_t *obj = NULL;
    char path[256];
    int64_t v;
    int rc = sg_json_get_object(tool, base, key, false, &obj, err);

    if (rc < 0)
        return with_file(err, file);
    if (rc > 0)
        return 0;
    sg_json_path_key(path, sizeof(path), base, key);
    if (only_known(obj, path, known, file, err) < 0)
        return -1;
    v = 0;
    if (int_field(obj, path, "max_attempts", 1, 100, &v, file, err) < 0)
        return -1;
    pol->max_attempts = (int)v;
    v = 0;
    if (int_field(obj, path, "base_ms", 1, 3600000, &v, file, err) < 0)
        return -1;
    pol->base_ms = v;
    v = 0;
    if (int_field(obj, path, "cap_ms", 1, 86400000, &v, file, err) < 0)
        return -1;
    pol->cap_ms = v;
    return 0;
}

static const char *const common_fields[] = {
    "adapter",          "target",      "side_effect", "timeout_ms",  "compensation", "retry",
    "compensate_retry", "concurrency", "args",        "description", "approval",     NULL};
/* Fields of the adapters that call something outside the process. */
static const char *const external_fields[] = {"breaker", "max_response_bytes", NULL};

/* Every member of the tool is a field its adapter knows. */
static int check_fields(const sg_tool_t *t, const sg_json_t *node, const char *base,
                        const char *file, sg_err_t *err)
{
    char path[300];

    for (const sg_json_t *m = sg_json_first(node); m; m = sg_json_next(m)) {
        const char *key = sg_json_key(m);
        if (listed(common_fields, key) || listed(t->kind->fields, key) ||
            (t->kind->external && listed(external_fields, key)))
            continue;
        sg_json_path_key(path, sizeof(path), base, key);
        for (size_t i = 0; i < NKINDS; i++)
            if (listed(kinds[i].fields, key) || (kinds[i].external && listed(external_fields, key)))
                return sg_registry_bad(err, file, path,
                                       "not a field of the %s adapter (it belongs to %s)",
                                       t->kind->name, kinds[i].name);
        return sg_registry_bad(err, file, path, "unknown field");
    }
    return 0;
}

/* The breaker settings and the response cap of an external tool. */
static int load_external(sg_tool_t *t, const sg_json_t *node, const char *base, const char *file,
                         const sg_config_t *cfg, sg_err_t *err)
{
    static const char *const known[] = {"failure_threshold", "cooldown_ms", NULL};
    const sg_json_t *br = NULL;
    int64_t threshold = sg_config_int(cfg, "breaker.failure_threshold");
    int64_t cooldown = sg_config_int(cfg, "breaker.cooldown_ms");
    char path[300];

    t->max_response_bytes = 1024 * 1024;
    if (int_field(node, base, "max_response_bytes", 1, 256LL * 1024 * 1024, &t->max_response_bytes,
                  file, err) < 0)
        return -1;
    if (sg_json_get_object(node, base, "breaker", false, &br, err) < 0)
        return with_file(err, file);
    if (br) {
        sg_json_path_key(path, sizeof(path), base, "breaker");
        if (only_known(br, path, known, file, err) < 0)
            return -1;
        if (int_field(br, path, "failure_threshold", 1, 100000, &threshold, file, err) < 0 ||
            int_field(br, path, "cooldown_ms", 100, 86400000, &cooldown, file, err) < 0)
            return -1;
    }
    t->breaker_threshold = (int)threshold;
    t->breaker_cooldown_ms = cooldown;
    return 0;
}

static int load_tool(sg_tool_t *t, const sg_json_t *node, const char *name, const char *file,
                     const sg_config_t *cfg, const sg_registry_hooks_t *hooks, sg_err_t *err)
{
    char base[128], path[300];
    const char *adapter = NULL, *effect = NULL, *comp = NULL;
    const sg_json_t *args = NULL, *target;
    int64_t v;
    size_t i;

    sg_json_path_key(base, sizeof(base), "$.tools", name);
    t->name = sg_xstrdup(name);
    if (!sg_name_ok(name))
        return sg_registry_bad(err, file, base,
                               "tool names are 1-64 characters of A-Z a-z 0-9 . _ -");
    if (!sg_json_is_object(node))
        return sg_registry_bad(err, file, base, "must be an object, got %s",
                               sg_json_type_name(node));
    if (sg_json_get_str(node, base, "adapter", true, &adapter, err) < 0)
        return with_file(err, file);
    for (i = 0; i < NKINDS; i++)
        if (strcmp(kinds[i].name, adapter) == 0)
            t->kind = &kinds[i];
    if (!t->kind) {
        sg_json_path_key(path, sizeof(path), base, "adapter");
        return sg_registry_bad(err, file, path, "must be one of builtin, http, exec; got \"%s\"",
                               adapter);
    }
    if (check_fields(t, node, base, file, err) < 0)
        return -1;
    if (sg_json_get_str(node, base, "side_effect", true, &effect, err) < 0 ||
        sg_json_get_str(node, base, "compensation", false, &comp, err) < 0 ||
        sg_json_get_object(node, base, "args", false, &args, err) < 0)
        return with_file(err, file);
    for (i = 0; i < 4 && strcmp(effect, effect_names[i]) != 0; i++)
        ;
    if (i == 4) {
        sg_json_path_key(path, sizeof(path), base, "side_effect");
        return sg_registry_bad(err, file, path,
                               "must be one of read, idempotent, reversible, irreversible");
    }
    t->effect = (sg_effect_t)i;
    target = sg_json_member(node, "target");
    sg_json_path_key(path, sizeof(path), base, "target");
    if (!target)
        return sg_registry_bad(err, file, path, "required");
    if (sg_json_string(target))
        t->target = sg_xstrdup(sg_json_string(target));
    t->target_json = sg_json_dup(target);
    v = 30000;
    if (int_field(node, base, "timeout_ms", 1, 3600000, &v, file, err) < 0)
        return -1;
    t->timeout_ms = v;
    v = 0;
    if (int_field(node, base, "concurrency", 1, 10000, &v, file, err) < 0)
        return -1;
    t->concurrency = (int)v;
    if (load_policy(node, base, "retry", &t->retry, file, err) < 0 ||
        load_policy(node, base, "compensate_retry", &t->comp_retry, file, err) < 0)
        return -1;
    if (comp && t->effect == SG_EFFECT_IRREVERSIBLE) {
        sg_json_path_key(path, sizeof(path), base, "compensation");
        return sg_registry_bad(err, file, path,
                               "an irreversible tool cannot be undone: no compensation");
    }
    if (comp)
        t->compensation = sg_xstrdup(comp);
    if (sg_json_member(node, "approval")) {
        const char *ap = sg_json_string(sg_json_member(node, "approval"));
        if (!ap || strcmp(ap, "required") != 0) {
            sg_json_path_key(path, sizeof(path), base, "approval");
            return sg_registry_bad(err, file, path,
                                   "enum: must be \"required\" (leave it out for no approval)");
        }
        t->approval_required = true;
    }
    if (args) {
        sg_json_path_key(path, sizeof(path), base, "args");
        if (sg_schema_check(args, path, err) < 0)
            return with_file(err, file);
        t->args_schema = sg_json_dup(args);
    }
    if (t->kind->external && load_external(t, node, base, file, cfg, err) < 0)
        return -1;
    t->node = node;
    if (hooks->prepare && hooks->prepare(t, node, base, cfg, hooks->opaque, err) < 0)
        return with_file(err, file);
    return 0;
}

static char *read_file(const char *path, size_t *len, sg_err_t *err)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0;

    if (!fp) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.unreadable",
                   "%s: cannot open: %s (set worker.registry to the tool registry file)", path,
                   strerror(errno));
        return NULL;
    }
    buf = sg_xmalloc(REGISTRY_MAX_BYTES + 1);
    n = fread(buf, 1, REGISTRY_MAX_BYTES + 1, fp);
    if (ferror(fp) || n > REGISTRY_MAX_BYTES) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.unreadable",
                   ferror(fp) ? "%s: read error" : "%s: larger than 4 MiB", path);
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    *len = n;
    return buf;
}

/* Header tokens and other credentials of the registry (any string under a
 * secret-like key, e.g. headers.Authorization, or a Bearer/Basic value)
 * are registered for masking before anything can echo them. */
static void register_secrets(const sg_json_t *node, const char *key)
{
    const char *s = sg_json_string(node);

    if (s) {
        if ((key && (sg_mask_key_is_secret(key) || strcasecmp(key, "authorization") == 0 ||
                     strcasecmp(key, "cookie") == 0)) ||
            strncasecmp(s, "bearer ", 7) == 0 || strncasecmp(s, "basic ", 6) == 0) {
            const char *sp = strchr(s, ' ');
            sg_mask_add_secret(s);
            if (sp && (strncasecmp(s, "bearer ", 7) == 0 || strncasecmp(s, "basic ", 6) == 0))
                sg_mask_add_secret(sp + 1);
        }
        return;
    }
    for (const sg_json_t *c = sg_json_first(node); c; c = sg_json_next(c))
        register_secrets(c, sg_json_key(c) ? sg_json_key(c) : key);
}

sg_registry_t *sg_registry_load(const char *path, const sg_config_t *cfg,
                                const sg_registry_hooks_t *hooks, sg_err_t *err)
{
    size_t len = 0;
    char *text = read_file(path, &len, err);
    sg_registry_t *reg;

    if (!text)
        return NULL;
    reg = sg_registry_parse(path, text, len, cfg, hooks, err);
    free(text);
    return reg;
}

sg_registry_t *sg_registry_parse(const char *path, const char *text, size_t len,
                                 const sg_config_t *cfg, const sg_registry_hooks_t *hooks,
                                 sg_err_t *err)
{
    static const sg_json_limits_t lim = {REGISTRY_MAX_BYTES, 64, 0};
    static const char *const known[] = {"v", "tools", "description", NULL};
    sg_registry_t *reg = sg_xcalloc(1, sizeof(*reg));
    const sg_json_t *tools = NULL;
    int64_t v = 0;
    size_t n = 0;

    reg->path = sg_xstrdup(path);
    if (hooks)
        reg->hooks = *hooks;
    reg->doc = sg_json_parse(text, len, &lim, err);
    if (!reg->doc) {
        with_file(err, path);
        goto err;
    }
    register_secrets(reg->doc, NULL);
    if (!sg_json_is_object(reg->doc)) {
        sg_registry_bad(err, path, "$", "must be an object");
        goto err;
    }
    if (only_known(reg->doc, "$", known, path, err) < 0)
        goto err;
    if (sg_json_get_int(reg->doc, "$", "v", true, &v, err) < 0 ||
        sg_json_get_object(reg->doc, "$", "tools", true, &tools, err) < 0) {
        with_file(err, path);
        goto err;
    }
    if (v != 1) {
        sg_registry_bad(err, path, "$.v", "must be 1 (the registry format version)");
        goto err;
    }
    for (const sg_json_t *m = sg_json_first(tools); m; m = sg_json_next(m))
        n++;
    reg->tools = sg_xcalloc(n ? n : 1, sizeof(*reg->tools));
    for (const sg_json_t *m = sg_json_first(tools); m; m = sg_json_next(m)) {
        sg_tool_t *t = &reg->tools[reg->ntools++];
        if (load_tool(t, m, sg_json_key(m), path, cfg, &reg->hooks, err) < 0)
            goto err;
    }
    for (size_t i = 0; i < reg->ntools; i++) {
        sg_tool_t *t = &reg->tools[i];
        char p[200], q[300];
        const sg_tool_t *c = t->compensation ? sg_registry_find(reg, t->compensation) : NULL;
        if (t->compensation && !c) {
            sg_json_path_key(p, sizeof(p), "$.tools", t->name);
            sg_json_path_key(q, sizeof(q), p, "compensation");
            sg_registry_bad(err, path, q, "names tool \"%s\", which is not in the registry",
                            t->compensation);
            goto err;
        }
        /* A compensation runs without a person's approval (when the saga
         * fails or is cancelled): naming a gated tool there would walk
         * around its gate. */
        if (c && c->approval_required) {
            sg_json_path_key(p, sizeof(p), "$.tools", t->name);
            sg_json_path_key(q, sizeof(q), p, "compensation");
            sg_registry_bad(err, path, q,
                            "names tool \"%s\", which requires approval (\"approval\": "
                            "\"required\"): a compensation runs without one",
                            t->compensation);
            goto err;
        }
    }
    return reg;
err:
    sg_registry_destroy(reg);
    return NULL;
}

const sg_tool_t *sg_registry_find(const sg_registry_t *reg, const char *name)
{
    for (size_t i = 0; i < reg->ntools; i++)
        if (strcmp(reg->tools[i].name, name) == 0)
            return &reg->tools[i];
    return NULL;
}

void sg_registry_destroy(sg_registry_t *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->ntools; i++) {
        sg_tool_t *t = &reg->tools[i];
        if (reg->hooks.release)
            reg->hooks.release(t, reg->hooks.opaque);
        free(t->name);
        free(t->target);
        free(t->compensation);
        sg_json_destroy(t->target_json);
        sg_json_destroy(t->args_schema);
    }
    free(reg->tools);
    sg_json_destroy(reg->doc);
    free(reg->path);
    free(reg);
}
