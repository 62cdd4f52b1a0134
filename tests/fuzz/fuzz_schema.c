/* libFuzzer target: a tool's args schema and a document, split at the
 * first newline: the schema is checked as the registry checks it, and a
 * schema that passes validates the document as the worker validates a
 * step's args. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_json.h"
#include "sagad/sg_schema.h"

static void count(void *opaque, const char *path, const char *rule)
{
    if (!path || !rule || path[0] != '$')
        abort(); /* every problem names a JSON path and a rule */
    ++*(int *)opaque;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data, *nl = memchr(text, '\n', size);
    sg_json_t *schema, *doc;
    int problems = 0, n;
    sg_err_t err;

    if (!nl)
        return 0;
    schema = sg_json_parse(text, (size_t)(nl - text), NULL, &err);
    doc = sg_json_parse(nl + 1, size - (size_t)(nl - text) - 1, NULL, &err);
    if (schema && doc && sg_schema_check(schema, "$.args", &err) == 0) {
        n = sg_schema_validate(schema, doc, "$.args", count, &problems);
        if (n != problems)
            abort(); /* the count returned is the problems reported */
    }
    sg_json_destroy(schema);
    sg_json_destroy(doc);
    return 0;
}
