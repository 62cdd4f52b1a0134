/* The default agent_action of an error code: what the producer should do
 * next when the tool that failed sent no instruction of its own.  Read
 * from schemas/error_codes.json, embedded at build time (Makefile,
 * schemas/embed-json.sh), parsed once on first use. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"

extern const char sg_error_codes_json[];

static pthread_once_t once = PTHREAD_ONCE_INIT;
static sg_json_t *registry; /* the "codes" array's document; never freed */

static void load(void)
{
    registry = sg_json_parse(sg_error_codes_json, strlen(sg_error_codes_json), NULL, NULL);
}

static const sg_json_t *entry_of(const char *code)
{
    const sg_json_t *codes = sg_json_member(registry, "codes");

    for (size_t i = 0; i < sg_json_array_size(codes); i++) {
        const sg_json_t *e = sg_json_array_get(codes, i);
        const char *c = sg_json_string(sg_json_member(e, "code"));
        if (c && strcmp(c, code) == 0)
            return e;
    }
    return NULL;
}

/* The registry's entry of code: itself, else its HTTP family, else its
 * area's family. */
static const sg_json_t *lookup(const char *code)
{
    const sg_json_t *found;
    const char *dot;
    char family[96];
    size_t stem;

    pthread_once(&once, load);
    if (!code || !*code || !registry || strlen(code) > 80)
        return NULL;
    if ((found = entry_of(code)))
        return found;
    dot = strrchr(code, '.');
    if (!dot)
        return NULL;
    stem = (size_t)(dot - code);
    /* tool.http.503 -> tool.http.{5xx}; then the family area.sub.* */
    if (strlen(dot + 1) == 3 && dot[1] >= '3' && dot[1] <= '5' &&
        strspn(dot + 1, "0123456789") == 3) {
        snprintf(family, sizeof(family), "%.*s.{%cxx}", (int)stem, code, dot[1]);
        if ((found = entry_of(family)))
            return found;
    }
    snprintf(family, sizeof(family), "%.*s.*", (int)stem, code);
    return entry_of(family);
}

const char *sg_err_agent_action(const char *code)
{
    return sg_json_string(sg_json_member(lookup(code), "agent_action"));
}

char *sg_err_describe(const char *code)
{
    const sg_json_t *e = lookup(code);
    sg_json_t *out;
    const char *cls;
    char *text;

    if (!e)
        return NULL;
    out = sg_json_dup(e);
    sg_json_set(out, "code", sg_json_new_str(code));
    if (strcmp(sg_json_string(sg_json_member(e, "code")), code) != 0)
        sg_json_add_str(out, "family", sg_json_string(sg_json_member(e, "code")));
    cls = sg_json_string(sg_json_member(e, "class"));
    sg_json_add_bool(out, "retryable",
                     cls && (strcmp(cls, "transient") == 0 || strcmp(cls, "timeout") == 0 ||
                             strcmp(cls, "throttled") == 0));
    text = sg_json_print(out);
    sg_json_destroy(out);
    return text;
}
