/* libFuzzer target: an HTTP answer as the http adapter classifies it
 * (worker_http_answer): any status, Retry-After value and body.
 * Properties beyond "no crash":
 *   - a 2xx is a success whatever the body holds, and the body is kept
 *     (never dropped);
 *   - anything else is an error with one of the adapter's own codes
 *     (tool.http.<status>, tool.downstream.*), never the downstream's;
 *   - the error message is UTF-8 without NUL (it is stored in a text
 *     column and published), and Retry-After stays within 0..24 h.
 * Input: two bytes of status, the Retry-After value up to the first
 * newline, then the body. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../worker/worker.h"
#include "sagad/sg_text.h"

static bool own_code(const char *code, long status)
{
    char want[32];

    snprintf(want, sizeof(want), "tool.http.%ld", status);
    return strcmp(code, want) == 0 || strcmp(code, "tool.downstream.retriable") == 0 ||
           strcmp(code, "tool.downstream.rejected") == 0 ||
           ((status < 300 || status > 599) && strcmp(code, "tool.http.io") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    worker_result_t r;
    char retry_after[64];
    const char *body, *nl;
    size_t len, ra;
    long status;

    if (size < 2)
        return 0;
    status = (long)((data[0] << 8 | data[1]) % 1000);
    body = (const char *)data + 2;
    len = size - 2;
    nl = memchr(body, '\n', len);
    ra = nl ? (size_t)(nl - body) : 0;
    if (ra >= sizeof(retry_after))
        ra = sizeof(retry_after) - 1;
    memcpy(retry_after, body, ra);
    retry_after[ra] = '\0';
    if (strlen(retry_after) != ra)
        return 0; /* a header value holds no NUL */
    if (nl) {
        len -= (size_t)(nl - body) + 1;
        body = nl + 1;
    }

    memset(&r, 0, sizeof(r));
    worker_http_answer(&r, "fuzz.tool", status, body, len, 1 << 16, retry_after);
    if ((status >= 200 && status < 300) != (r.status == WORKER_OK))
        abort(); /* a 2xx must succeed, nothing else may */
    if (len > 0 && !r.data)
        abort(); /* an answer was dropped */
    if (r.status != WORKER_OK) {
        if (!own_code(r.err.code, status))
            abort(); /* a code that is not the adapter's */
        if (!sg_utf8_valid(r.err.message, strlen(r.err.message)))
            abort(); /* a message PostgreSQL would refuse */
        if (r.retry_after_ms < 0 || r.retry_after_ms > 24LL * 3600 * 1000)
            abort();
    }
    worker_result_clear(&r);
    return 0;
}
