/* libFuzzer target: the body a downstream answers, as the worker keeps it
 * for the step's result (worker_result_data).  What is kept must be JSON
 * that PostgreSQL's jsonb can hold (sagad's own parser accepts it: UTF-8,
 * no NUL, no \u0000, no duplicate names, numbers numeric can hold), and
 * it must keep the answer whole: the JSON text itself, or a JSON string
 * whose text (or, after "base64:", whose decoded bytes) equals the answer.
 * Only an empty answer keeps nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../worker/worker.h"

static int b64val(char c)
{
    const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c ? strchr(tab, c) : NULL;

    return p ? (int)(p - tab) : -1;
}

/* Decodes padded base64 s into out (room for strlen(s) bytes); returns
 * the length, or -1 when s is not padded base64. */
static long unbase64(const char *s, unsigned char *out)
{
    size_t n = strlen(s);
    long o = 0;

    if (n % 4)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int a = b64val(s[i]), b = b64val(s[i + 1]);
        int c = s[i + 2] == '=' ? 0 : b64val(s[i + 2]);
        int d = s[i + 3] == '=' ? 0 : b64val(s[i + 3]);
        if (a < 0 || b < 0 || c < 0 || d < 0)
            return -1;
        out[o++] = (unsigned char)(a << 2 | b >> 4);
        if (s[i + 2] != '=')
            out[o++] = (unsigned char)(b << 4 | c >> 2);
        if (s[i + 3] != '=')
            out[o++] = (unsigned char)(c << 6 | d);
    }
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    worker_result_t r;
    sg_json_t *doc;
    const char *s;

    memset(&r, 0, sizeof(r));
    worker_result_data(&r, (const char *)data, size, 1 << 16);
    if (!r.data) {
        if (size > 0)
            abort(); /* an answer was dropped */
        return 0;
    }
    doc = sg_json_parse(r.data, strlen(r.data), NULL, NULL);
    if (!doc || !sg_json_numbers_fit_pg(r.data, strlen(r.data)))
        abort(); /* kept something PostgreSQL would refuse */
    if (strlen(r.data) == size && memcmp(r.data, data, size) == 0) {
        /* kept as it came */
    } else if (!(s = sg_json_string(doc))) {
        abort(); /* neither the answer nor a string holding it */
    } else if (strncmp(s, "base64:", 7) == 0) {
        unsigned char *raw = malloc(strlen(s) + 1);
        long n = raw ? unbase64(s + 7, raw) : -1;
        if (n != (long)size || memcmp(raw, data, size) != 0)
            abort(); /* the bytes did not survive */
        free(raw);
    } else if (strlen(s) != size || memcmp(s, data, size) != 0) {
        abort(); /* the text did not survive */
    }
    sg_json_destroy(doc);
    worker_result_clear(&r);
    return 0;
}
