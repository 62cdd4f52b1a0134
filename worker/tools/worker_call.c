/* A tool call's request document and its normalised outcome: what every
 * adapter builds and fills, and the breaker and the loop read.  Calls
 * nothing but lib/, so adapters, the breaker and the registry can all use
 * it without calling each other. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_text.h"
#include "../worker.h"

void worker_result_clear(worker_result_t *out)
{
    free(out->data);
    memset(out, 0, sizeof(*out));
}

void worker_result_error(worker_result_t *out, sg_errclass_t cls, const char *code, const char *fmt,
                         ...)
{
    va_list ap;
    char msg[sizeof(out->err.message)];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    out->status = cls == SG_ERRCLASS_TIMEOUT ? WORKER_TIMEOUT : WORKER_ERROR;
    sg_err_set(&out->err, cls, code, "%s", msg);
}

char *worker_request_json(const worker_call_t *call)
{
    sg_json_t *b = sg_json_new_object();
    char *text;

    sg_json_add_str(b, "saga_id", call->saga_id);
    sg_json_add_str(b, "step", call->step_name);
    sg_json_add_int(b, "step_index", call->step_idx);
    sg_json_add_str(b, "phase", call->compensate ? "compensate" : "forward");
    sg_json_add_int(b, "attempt", call->attempt);
    sg_json_add_str(b, "idempotency_key", call->idem_key);
    sg_json_add_node(b, "args", sg_json_dup(call->args));
    if (call->input)
        sg_json_add_node(b, "input", sg_json_dup(call->input));
    else
        sg_json_add_null(b, "input");
    if (call->forward)
        sg_json_add_node(b, "forward", sg_json_dup(call->forward));
    text = sg_json_print(b);
    sg_json_destroy(b);
    return text;
}

/* A tool's answer is kept whole, whatever it holds: JSON that jsonb can
 * hold exactly (sagad's parser accepts it, and its numbers fit numeric)
 * is kept as it came; anything else (not JSON, a NUL escape, duplicate
 * names, a number past numeric's range, bytes that are not UTF-8) is
 * kept as one JSON string, in sg_text_or_base64's lossless form.  Only
 * an empty answer keeps nothing (the step's result is then null). */
void worker_result_data(worker_result_t *out, const char *buf, size_t len, size_t max)
{
    sg_json_limits_t lim = {max, 64, 0}; /* answers: bounded by max_response_bytes */
    sg_json_t *doc;
    char *text;

    free(out->data);
    out->data = NULL;
    if (len == 0)
        return;
    if ((doc = sg_json_parse(buf, len, &lim, NULL))) {
        sg_json_destroy(doc);
        if (sg_json_numbers_fit_pg(buf, len)) {
            out->data = sg_xstrndup(buf, len);
            return;
        }
    }
    text = sg_text_or_base64(buf, len);
    doc = sg_json_new_str(text);
    out->data = sg_json_print(doc);
    sg_json_destroy(doc);
    free(text);
}
