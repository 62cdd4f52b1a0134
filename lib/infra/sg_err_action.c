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

static const char *action_of(const char *code)
{
    const sg_json_t *codes = sg_json_member(registry, "codes");

    for (size_t i = 0; i < sg_json_array_size(codes); i++) {
        const sg_json_t *e = sg_json_array_get(codes, i);
        const char *c = sg_json_string(sg_json_member(e, "code"));
        if (c && strcmp(c, code) == 0)
            return sg_json_string(sg_json_member(e, "agent_action"));
    }
    return NULL;
}

const char *sg_err_agent_action(const char *code)
{
    const char *dot, *found;
    char family[96];
    size_t stem;

    pthread_once(&once, load);
    if (!code || !*code || !registry)
        return NULL;
    if ((found = action_of(code)))
        return found;
    dot = strrchr(code, '.');
    if (!dot)
        return NULL;
    stem = (size_t)(dot - code);
    /* tool.http.503 -> tool.http.{5xx}; then the family area.sub.* */
    if (strlen(dot + 1) == 3 && dot[1] >= '3' && dot[1] <= '5' &&
        strspn(dot + 1, "0123456789") == 3) {
        snprintf(family, sizeof(family), "%.*s.{%cxx}", (int)stem, code, dot[1]);
        if ((found = action_of(family)))
            return found;
    }
    snprintf(family, sizeof(family), "%.*s.*", (int)stem, code);
    return action_of(family);
}
