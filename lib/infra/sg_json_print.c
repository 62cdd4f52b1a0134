/* sg_json_print: cJSON_PrintUnformatted's text, written by sagad (see
 * below for why). */
#include <cJSON.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_json.h"

/* ---- printing ------------------------------------------------------------
 *
 * The same text cJSON_PrintUnformatted() writes, byte for byte (the unit
 * test json::printer_writes_what_cjson_writes compares the two), written
 * into one growing buffer: cJSON's own printer was a sixth of the
 * worker's CPU, every outgoing message and its headers going through it,
 * mostly in its buffer's growth and an snprintf per number.  Integers
 * below 10^15, which is every seq, step and attempt, are written by hand;
 * other numbers as cJSON writes them. */

typedef struct print_buf_s {
    char *p;
    size_t len, cap;
} print_buf_t;

static char *pb_room(print_buf_t *b, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap * 2;

        if (cap < b->len + n + 1)
            cap = b->len + n + 1;
        b->p = sg_xrealloc(b->p, cap);
        b->cap = cap;
    }
    return b->p + b->len;
}

static void pb_put(print_buf_t *b, const char *s, size_t n)
{
    memcpy(pb_room(b, n), s, n);
    b->len += n;
}

static void pb_putc(print_buf_t *b, char c)
{
    *pb_room(b, 1) = c;
    b->len++;
}

/* As cJSON's print_string_ptr: ", \ and the control bytes escaped (\b
 * \f \n \r \t, else \u00xx), every other byte as it is; NULL as "". */
static void pb_string(print_buf_t *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)(s ? s : "");

    pb_putc(b, '"');
    for (;;) {
        const unsigned char *run = u;

        while (*u > 31 && *u != '"' && *u != '\\')
            u++;
        pb_put(b, (const char *)run, (size_t)(u - run));
        if (!*u)
            break;
        {
            /* the short escapes; any other byte below 32 is \u00xx */
            static const char short_esc[32] = {
                ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
            char e[6] = {'\\', 'u', '0', '0', hex[*u >> 4], hex[*u & 15]};
            char c = *u < 32 ? short_esc[*u] : (char)*u; /* " and \ stand for themselves */

            if (c)
                e[1] = c;
            pb_put(b, e, c ? 2 : 6);
        }
        u++;
    }
    pb_putc(b, '"');
}

/* As cJSON's print_number (1.7.15): null for NaN and infinities; else
 * 15 significant digits when they read back within DBL_EPSILON, or 17. */
static void pb_number(print_buf_t *b, const cJSON *n)
{
    double d = n->valuedouble, back;
    char text[32];
    int len;

    if (isnan(d) || isinf(d)) {
        pb_put(b, "null", 4);
        return;
    }
    if (d == floor(d) && fabs(d) < 1e15 && !(d == 0 && signbit(d))) {
        /* what %1.15g writes of an integer of at most 15 digits (and -0
         * as -0, below) */
        long long v = (long long)d;
        unsigned long long m = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        char *end = text + sizeof(text), *o = end;

        do
            *--o = (char)('0' + m % 10);
        while ((m /= 10) > 0);
        if (v < 0)
            *--o = '-';
        pb_put(b, o, (size_t)(end - o));
        return;
    }
    len = snprintf(text, sizeof(text), "%1.15g", d);
    back = strtod(text, NULL);
    if (!(fabs(back - d) <= fmax(fabs(back), fabs(d)) * DBL_EPSILON))
        len = snprintf(text, sizeof(text), "%1.17g", d);
    pb_put(b, text, (size_t)len);
}

/* False when cJSON would refuse to print node (an invalid node, a raw
 * one without text). */
static bool pb_value(print_buf_t *b, const cJSON *n)
{
    switch (n->type & 0xFF) {
    case cJSON_False:
        pb_put(b, "false", 5);
        return true;
    case cJSON_True:
        pb_put(b, "true", 4);
        return true;
    case cJSON_NULL:
        pb_put(b, "null", 4);
        return true;
    case cJSON_Number:
        pb_number(b, n);
        return true;
    case cJSON_String:
        pb_string(b, n->valuestring);
        return true;
    case cJSON_Raw:
        if (!n->valuestring)
            return false;
        pb_put(b, n->valuestring, strlen(n->valuestring));
        return true;
    case cJSON_Array:
    case cJSON_Object: {
        bool obj = (n->type & 0xFF) == cJSON_Object;

        pb_putc(b, obj ? '{' : '[');
        for (const cJSON *c = n->child; c; c = c->next) {
            if (c != n->child)
                pb_putc(b, ',');
            if (obj) {
                pb_string(b, c->string);
                pb_putc(b, ':');
            }
            if (!pb_value(b, c))
                return false;
        }
        pb_putc(b, obj ? '}' : ']');
        return true;
    }
    default:
        return false;
    }
}

char *sg_json_print(const sg_json_t *node)
{
    print_buf_t b = {sg_xmalloc(256), 0, 256};

    if (!node || !pb_value(&b, node)) {
        free(b.p);
        return sg_xcheck(cJSON_PrintUnformatted(node), "cJSON_PrintUnformatted");
    }
    b.p[b.len] = '\0';
    return b.p;
}
