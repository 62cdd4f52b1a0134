/* libFuzzer target: a reference's pointer and a context document, split
 * at the first newline.  The pointer is checked as submission checks it,
 * looked up as RFC 6901 says, and resolved inside a template as the worker
 * resolves a step's args before a call.  Properties: a resolution either
 * names its error (input.ref.unresolved) or leaves no reference behind,
 * and a pointer that resolves in a lookup resolves in a template too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_json.h"
#include "sagad/sg_ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data, *nl = memchr(text, '\n', size);
    char *ptr, name[80];
    const char *step, *rule;
    sg_json_t *ctx, *tmpl, *out;
    sg_err_t err;

    if (!nl)
        return 0;
    ptr = strndup(text, (size_t)(nl - text));
    if (!ptr || strlen(ptr) != (size_t)(nl - text)) { /* a NUL inside */
        free(ptr);
        return 0;
    }
    rule = sg_ref_pointer_check(ptr, name, sizeof(name), &step);
    if (!rule && step && strlen(step) > 64)
        abort(); /* a step name is at most 64 characters */
    ctx = sg_json_parse(nl + 1, size - (size_t)(nl - text) - 1, NULL, &err);
    tmpl = sg_json_new_object();
    {
        sg_json_t *ref = sg_json_new_object();
        sg_json_add_str(ref, SG_REF_MEMBER, ptr);
        sg_json_add_node(tmpl, "x", ref);
    }
    if (ctx) {
        const sg_json_t *found = sg_ref_lookup(ctx, ptr);
        out = sg_ref_resolve(tmpl, ctx, "$.args", NULL, &err);
        if (out && sg_ref_any(sg_json_member(out, "x")) && !sg_ref_any(found))
            abort(); /* a reference left unresolved */
        if (!out && strcmp(err.code, "input.ref.unresolved") != 0)
            abort(); /* every failure is input.ref.unresolved */
        if (!found && out)
            abort(); /* resolved what the lookup did not find */
        sg_json_destroy(out);
    }
    sg_json_destroy(tmpl);
    sg_json_destroy(ctx);
    free(ptr);
    return 0;
}
