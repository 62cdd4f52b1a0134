/* libFuzzer target: the body a downstream answers, as the worker keeps it
 * for the step's result (worker_result_data).  What is kept must be JSON
 * that PostgreSQL's jsonb can hold (sagad's own parser accepts it: UTF-8,
 * no NUL, no \u0000, no duplicate names); nothing is kept only when the
 * body is empty or not UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../worker/worker.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    worker_result_t r;
    sg_json_t *doc;

    memset(&r, 0, sizeof(r));
    worker_result_data(&r, (const char *)data, size, 1 << 16);
    if (r.data) {
        doc = sg_json_parse(r.data, strlen(r.data), NULL, NULL);
        if (!doc)
            abort(); /* kept something PostgreSQL would refuse */
        sg_json_destroy(doc);
    } else if (size > 0 && sg_json_utf8_valid((const char *)data, size)) {
        abort(); /* a UTF-8 body was dropped */
    }
    worker_result_clear(&r);
    return 0;
}
