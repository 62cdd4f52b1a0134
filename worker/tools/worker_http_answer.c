/* The http adapter's outcome table, the only place it is decided.  Pure
 * apart from the clock an HTTP-date Retry-After is read against, so the
 * fuzzer can drive it with any status, body and header
 * (tests/fuzz/fuzz_http.c).  The rows decided while the transfer runs
 * (no answer, no connection, broken exchange, TLS, a body over the cap)
 * are map_curl_error's in worker_http.c.
 *
 *   2xx                       ok; the answer is the data, kept whole
 *                             (worker_result_data)
 *   408, 425, 5xx             transient  tool.http.<status>
 *   429                       throttled  tool.http.429
 *   other 3xx/4xx             permanent  tool.http.<status> (redirects are
 *                             not followed: a POST must not wander off)
 *   no answer in time         timeout    tool.timeout (retry, same key)
 *   no connection             transient  tool.http.connect (nothing sent)
 *   broken exchange           transient  tool.http.io
 *   certificate refused       permanent  tool.http.tls
 *   body over the cap         permanent  tool.http.response_too_large
 * A downstream body {"error_code", "retriable", "message"} can move a
 * status between retriable and not: tool.downstream.retriable (transient)
 * and tool.downstream.rejected (permanent); its own error_code is kept in
 * the message and the data, never made into one of our codes (ours are a
 * closed, registered set).  Retry-After (seconds or an HTTP-date) sets
 * retry_after_ms. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../worker.h"

#define RETRY_AFTER_MAX_MS (24LL * 3600 * 1000)

/* Retry-After as milliseconds from now: delta-seconds or an HTTP-date;
 * 0 when absent, past or unreadable. */
static int64_t retry_after_ms(const char *v)
{
    int64_t ms = 0;

    if (!*v)
        return 0;
    if (strspn(v, "0123456789") == strlen(v)) {
        ms = strlen(v) > 9 ? RETRY_AFTER_MAX_MS : strtoll(v, NULL, 10) * 1000;
    } else {
        time_t t = curl_getdate(v, NULL);
        int64_t now = (int64_t)time(NULL);
        /* A date far ahead (year 30,000) is capped before it is scaled:
         * its seconds times 1000 would overflow. */
        if (t != (time_t)-1 && (int64_t)t > now)
            ms = (int64_t)t - now > RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS
                                                              : ((int64_t)t - now) * 1000;
    }
    return ms < 0 ? 0 : ms > RETRY_AFTER_MAX_MS ? RETRY_AFTER_MAX_MS : ms;
}

static sg_errclass_t status_class(long status)
{
    if (status == 429)
        return SG_ERRCLASS_THROTTLED;
    if (status == 408 || status == 425 || status >= 500)
        return SG_ERRCLASS_TRANSIENT;
    return SG_ERRCLASS_PERMANENT;
}

/* A non-2xx answer, refined by a downstream error body when there is one. */
static void map_status(worker_result_t *out, const char *tool, long status, const char *body,
                       size_t len, const char *retry_after)
{
    sg_errclass_t cls = status_class(status);
    sg_json_t *doc = NULL;
    const char *dcode = NULL, *dmsg = NULL;
    bool dretry = false;
    char code[32];

    if (status < 300 || status > 599) {
        worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.http.io",
                            "HTTP status %ld from tool %s is not one HTTP defines", status, tool);
        return;
    }
    snprintf(code, sizeof(code), "tool.http.%ld", status);
    if (len)
        doc = sg_json_parse(body, len, NULL, NULL);
    dcode = sg_json_string(sg_json_member(doc, "error_code"));
    dmsg = sg_json_string(sg_json_member(doc, "message"));
    if (dcode && sg_json_get_bool(doc, "$", "retriable", true, &dretry, NULL) == 0) {
        if (dretry && cls == SG_ERRCLASS_PERMANENT) {
            cls = SG_ERRCLASS_TRANSIENT;
            snprintf(code, sizeof(code), "%s", "tool.downstream.retriable");
        } else if (!dretry && cls != SG_ERRCLASS_PERMANENT) {
            cls = SG_ERRCLASS_PERMANENT;
            snprintf(code, sizeof(code), "%s", "tool.downstream.rejected");
        }
        worker_result_error(out, cls, code, "HTTP %ld from tool %s: %s (retriable: %s): %s", status,
                            tool, dcode, dretry ? "true" : "false", dmsg ? dmsg : "");
    } else {
        worker_result_error(out, cls, code, "HTTP %ld from tool %s", status, tool);
    }
    sg_json_destroy(doc);
    out->retry_after_ms = retry_after_ms(retry_after);
}

void worker_http_answer(worker_result_t *out, const char *tool, long status, const char *body,
                        size_t len, size_t max, const char *retry_after)
{
    if (status >= 200 && status < 300)
        out->status = WORKER_OK;
    else
        map_status(out, tool, status, body, len, retry_after);
    worker_result_data(out, body, len, max);
}
