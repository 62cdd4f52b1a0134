#include "sagad/sg_json.h"

#include <cJSON.h>
#include <float.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_text.h"

/* Integers above 2^53 cannot round-trip through cJSON's double. */
#define JSON_INT_MAX 9007199254740992.0

/* Counts the digits of the number token at buf[*i] and returns its
 * decimal exponent, saturated: where its first digit stands (int_digits
 * + exponent) and how far its last one does (frac_digits - exponent). */
static void number_extent(const char *buf, size_t len, size_t *i, long *high, long *low)
{
    long ints = 0, fracs = 0, exp = 0;
    bool neg = false;

    if (*i < len && buf[*i] == '-')
        (*i)++;
    for (; *i < len && buf[*i] >= '0' && buf[*i] <= '9'; (*i)++)
        ints++;
    if (*i < len && buf[*i] == '.')
        for ((*i)++; *i < len && buf[*i] >= '0' && buf[*i] <= '9'; (*i)++)
            fracs++;
    if (*i < len && (buf[*i] == 'e' || buf[*i] == 'E')) {
        (*i)++;
        if (*i < len && (buf[*i] == '+' || buf[*i] == '-'))
            neg = buf[(*i)++] == '-';
        for (; *i < len && buf[*i] >= '0' && buf[*i] <= '9'; (*i)++)
            if (exp < 100000000)
                exp = exp * 10 + (buf[*i] - '0');
    }
    if (neg)
        exp = -exp;
    *high = ints + exp;
    *low = fracs - exp;
}

bool sg_json_numbers_fit_pg(const char *buf, size_t len)
{
    bool in_str = false;

    for (size_t i = 0; i < len;) {
        char c = buf[i];
        long high, low;

        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            i++;
        } else if (c == '"') {
            in_str = true;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            number_extent(buf, len, &i, &high, &low);
            /* numeric holds 131,072 digits before the point and 16,383
             * after; kept well inside both. */
            if (high > 131000 || low > 16000)
                return false;
        } else {
            i++;
        }
    }
    return true;
}

long sg_json_nodes(const char *buf, size_t len, long limit)
{
    long n = 0;
    bool in_str = false, in_scalar = false;

    for (size_t i = 0; i < len; i++) {
        char c = buf[i];

        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"' || c == '[' || c == '{') {
            in_str = c == '"';
            in_scalar = false;
            n++;
        } else if (c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '+' ||
                   c == '.' || (c >= 'A' && c <= 'Z')) {
            /* A number or literal: counted at its first character. */
            n += !in_scalar;
            in_scalar = true;
        } else {
            in_scalar = false;
        }
        if (n > limit)
            return limit + 1;
    }
    return n;
}

int sg_json_depth(const char *buf, size_t len, int limit)
{
    int depth = 0, max = 0;
    bool in_str = false;

    for (size_t i = 0; i < len; i++) {
        char c = buf[i];

        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max && (max = depth) > limit)
                return limit + 1;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return max;
}

static bool only_space(const char *p, const char *end)
{
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return false;
    return true;
}

/* ---- I-JSON (RFC 7493): what cJSON accepts but would change ---------------
 *
 * cJSON decodes the escape \u0000 into a C string that ends there, so a
 * name or an id would be read as its prefix; and it keeps the first of two
 * equal member names where PostgreSQL's jsonb keeps the last, so the
 * worker would check one message and store another.  Both are refused,
 * naming the JSON path of the first. */

typedef struct scan_frame_s {
    bool obj, want_key;
    size_t idx;
    const char *key; /* the member's name in buf (raw, up to key_len) */
    size_t key_len;
} scan_frame_t;

static void scan_path(char *out, size_t size, const scan_frame_t *f, int n, const char *key,
                      size_t key_len)
{
    size_t o = (size_t)snprintf(out, size, "$");

    for (int i = 0; i < n && o < size; i++) {
        if (f[i].obj && f[i].key)
            o += (size_t)snprintf(out + o, size - o, ".%.*s", (int)f[i].key_len, f[i].key);
        else if (!f[i].obj)
            o += (size_t)snprintf(out + o, size - o, "[%zu]", f[i].idx);
    }
    if (key && o < size)
        snprintf(out + o, size - o, ".%.*s", (int)key_len, key);
}

/* What a path scan looks for. */
typedef enum scan_what_e {
    SCAN_NUL_ESCAPE, /* a \u0000 escape in a string or a name */
    SCAN_UNDERFLOW,  /* a number too small for a double */
} scan_what_t;

/* A number token of n bytes (JSON syntax already checked) whose value
 * underflows a double: not 0, yet read as 0 or as a subnormal that keeps
 * fewer digits than were sent (1e-400 became 0 and went on as 0). */
static bool number_underflows(const char *p, size_t n)
{
    char small[64], *text = n < sizeof(small) ? small : sg_xmalloc(n + 1);
    double v;
    bool digit = false;

    for (size_t i = 0; i < n && p[i] != 'e' && p[i] != 'E' && !digit; i++)
        digit = p[i] >= '1' && p[i] <= '9';
    if (!digit)
        v = 1; /* a zero, whatever its exponent */
    else {
        memcpy(text, p, n);
        text[n] = '\0';
        v = strtod(text, NULL);
    }
    if (text != small)
        free(text);
    return v == 0 || fabs(v) < DBL_MIN;
}

static size_t number_len(const char *buf, size_t len, size_t i)
{
    size_t j = i;

    while (j < len && (buf[j] == '-' || buf[j] == '+' || buf[j] == '.' || buf[j] == 'e' ||
                       buf[j] == 'E' || (buf[j] >= '0' && buf[j] <= '9')))
        j++;
    return j - i;
}

/* Could buf hold what is looked for?  Most messages hold no escape at all,
 * and few a \u0000; a number can only underflow with a negative exponent
 * after a digit ("1e-400").  Only then is a path worth a scan. */
static bool scan_worth_it(const char *buf, size_t len, scan_what_t what)
{
    const char *b;
    const char *end = buf + len;

    if (what == SCAN_NUL_ESCAPE) {
        for (b = memchr(buf, '\\', len); b; b = memchr(b + 1, '\\', (size_t)(end - b - 1)))
            if (b + 5 < end && b[1] == 'u' && memcmp(b + 2, "0000", 4) == 0)
                return true;
        return false;
    }
    for (b = memchr(buf, '-', len); b; b = memchr(b + 1, '-', (size_t)(end - b - 1)))
        if (b - buf >= 2 && (b[-1] == 'e' || b[-1] == 'E') &&
            ((b[-2] >= '0' && b[-2] <= '9') || b[-2] == '.'))
            return true;
    return false;
}

/* The JSON path of the first of what (in buf: valid JSON, at most depth
 * levels deep) into path; false when there is none. */
static bool scan_find(const char *buf, size_t len, int depth, scan_what_t what, char *path,
                      size_t size)
{
    scan_frame_t f[depth + 1];
    int n = 0;

    if (!scan_worth_it(buf, len, what))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (c == '"') {
            size_t start = ++i;
            bool key = n > 0 && f[n - 1].obj && f[n - 1].want_key;
            for (; i < len && buf[i] != '"'; i++) {
                if (buf[i] != '\\')
                    continue;
                if (what == SCAN_NUL_ESCAPE && i + 5 < len && buf[i + 1] == 'u' &&
                    memcmp(buf + i + 2, "0000", 4) == 0) {
                    if (key)
                        scan_path(path, size, f, n - 1, buf + start, i - start);
                    else
                        scan_path(path, size, f, n, NULL, 0);
                    return true;
                }
                i++; /* the escaped character */
            }
            if (key) {
                f[n - 1].key = buf + start;
                f[n - 1].key_len = i - start;
            }
        } else if (what == SCAN_UNDERFLOW && (c == '-' || (c >= '0' && c <= '9'))) {
            size_t tok = number_len(buf, len, i);
            if (number_underflows(buf + i, tok)) {
                scan_path(path, size, f, n, NULL, 0);
                return true;
            }
            i += tok - 1;
        } else if ((c == '{' || c == '[') && n <= depth) {
            f[n++] = (scan_frame_t){c == '{', c == '{', 0, NULL, 0};
        } else if ((c == '}' || c == ']') && n > 0) {
            n--;
        } else if (c == ',' && n > 0) {
            if (f[n - 1].obj)
                f[n - 1].want_key = true;
            else
                f[n - 1].idx++;
        } else if (c == ':' && n > 0) {
            f[n - 1].want_key = false;
        }
    }
    return false;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* A number cJSON would not give back as it came: it keeps a double and
 * prints 15 significant digits whenever they read back within
 * DBL_EPSILON (cJSON 1.7), so 9007199254740991 would be sent on as
 * 9007199254740990; and an integer beyond 2^53 - 1 may already have lost
 * digits when it was read.  Such numbers are refused, not altered. */
static bool number_altered(const cJSON *n)
{
    double d = n->valuedouble, back;
    char text[40];

    if (d == floor(d) && fabs(d) > 9007199254740991.0)
        return true;
    if (d == (double)n->valueint)
        return false; /* printed as an int, exactly */
    snprintf(text, sizeof(text), "%1.15g", d);
    back = strtod(text, NULL);
    /* Read back exactly: that is what goes out.  Not within DBL_EPSILON:
     * cJSON then prints 17 digits, exactly too.  In between it would
     * print these 15 digits, which are another number. */
    return back != d && fabs(back - d) <= fmax(fabs(back), fabs(d)) * DBL_EPSILON;
}

static bool has_bad_number(const cJSON *node)
{
    for (const cJSON *c = node->child; c; c = c->next)
        if ((cJSON_IsNumber(c) && number_altered(c)) ||
            ((cJSON_IsObject(c) || cJSON_IsArray(c)) && has_bad_number(c)))
            return true;
    return false;
}

static bool find_bad_number(const cJSON *node, const char *base, char *path, size_t size)
{
    size_t n = 0;

    for (const cJSON *c = node->child; c; c = c->next, n++) {
        char sub[512];
        if (cJSON_IsObject(node))
            sg_json_path_key(sub, sizeof(sub), base, c->string);
        else
            sg_json_path_idx(sub, sizeof(sub), base, n);
        if (cJSON_IsNumber(c) && number_altered(c)) {
            snprintf(path, size, "%s", sub);
            return true;
        }
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && find_bad_number(c, sub, path, size))
            return true;
    }
    return false;
}

/* Whether some object under node has two members of one name: the cheap
 * question asked of every message (no path is built). */
static bool has_duplicate(const cJSON *node)
{
    const cJSON *c;
    size_t n = 0;

    for (c = node->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(node) && n > 1 && n <= 16) {
        for (const cJSON *a = node->child; a; a = a->next)
            for (c = a->next; c; c = c->next)
                if (strcmp(a->string, c->string) == 0)
                    return true;
    } else if (cJSON_IsObject(node) && n > 1) {
        return true; /* large: find_duplicate sorts, and answers */
    }
    for (c = node->child; c; c = c->next)
        if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && has_duplicate(c))
            return true;
    return false;
}

/* The path of the first object (depth first) with two members of one
 * name, and that name, into path; false when there is none. */
static bool find_duplicate(const cJSON *node, const char *base, char *path, size_t size)
{
    const cJSON *c;
    size_t n = 0;

    if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
        return false;
    for (c = node->child; c; c = c->next)
        n++;
    /* Only asked once has_duplicate found one: sorting is fine here. */
    if (cJSON_IsObject(node) && n > 1) {
        const cJSON **v = sg_xmalloc(n * sizeof(*v));
        size_t k = 0;
        bool dup = false;

        for (c = node->child; c; c = c->next)
            v[k++] = c;
        qsort(v, n, sizeof(*v), key_cmp);
        for (k = 1; k < n && !dup; k++)
            if (strcmp(v[k - 1]->string, v[k]->string) == 0) {
                sg_json_path_key(path, size, base, v[k]->string);
                dup = true;
            }
        free(v);
        if (dup)
            return true;
    }
    n = 0;
    for (c = node->child; c; c = c->next, n++) {
        char sub[512];
        if (cJSON_IsObject(node))
            sg_json_path_key(sub, sizeof(sub), base, c->string);
        else
            sg_json_path_idx(sub, sizeof(sub), base, n);
        if (find_duplicate(c, sub, path, size))
            return true;
    }
    return false;
}

int sg_json_exact_numbers(const sg_json_t *root, sg_err_t *err)
{
    char path[512];

    if (cJSON_IsNumber(root)
            ? number_altered(root)
            : has_bad_number(root) && find_bad_number(root, "$", path, sizeof(path))) {
        if (cJSON_IsNumber(root))
            snprintf(path, sizeof(path), "$");
        return sg_err_set(err, SG_ERRCLASS_POISON, "input.json.number_range",
                          "%s: a number sagad cannot pass on unchanged (an integer beyond "
                          "+/-(2^53-1), or more than the 15 significant digits sagad prints "
                          "back): send it as a string",
                          path);
    }
    return 0;
}

sg_json_t *sg_json_parse(const char *buf, size_t len, const sg_json_limits_t *lim, sg_err_t *err)
{
    return sg_json_parse_counted(buf, len, lim, err, NULL);
}

sg_json_t *sg_json_parse_counted(const char *buf, size_t len, const sg_json_limits_t *lim,
                                 sg_err_t *err, long *nodes)
{
    sg_json_limits_t def = SG_JSON_LIMITS_DEFAULT;
    long n = 0;
    const char *end = NULL;
    char path[512];
    cJSON *root;
    int depth;

    if (!lim)
        lim = &def;
    if (len > lim->max_bytes) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.too_large",
                   "message is %zu bytes, the limit is %zu (limits.max_message_bytes)", len,
                   lim->max_bytes);
        return NULL;
    }
    if (!buf || len == 0) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.malformed", "message is empty");
        return NULL;
    }
    /* cJSON would skip it; refused instead, so the producer hears of it
     * (RFC 8259 8.1: a networked JSON text must not start with one). */
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.malformed",
                   "message starts with a UTF-8 byte-order mark (U+FEFF), which JSON sent over "
                   "a network must not have (RFC 8259 8.1)");
        return NULL;
    }
    if (!sg_utf8_valid(buf, len)) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.utf8.invalid",
                   "message is not valid UTF-8 (or contains a NUL byte)");
        return NULL;
    }
    depth = sg_json_depth(buf, len, lim->max_depth);
    if (depth > lim->max_depth) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.too_deep",
                   "JSON nesting is deeper than %d (limits.max_json_depth)", lim->max_depth);
        return NULL;
    }
    /* One count serves the cap and the caller (it stops past the cap). */
    if ((lim->max_nodes > 0 || nodes) &&
        (n = sg_json_nodes(buf, len, lim->max_nodes > 0 ? lim->max_nodes : LONG_MAX - 1)) >
            lim->max_nodes &&
        lim->max_nodes > 0) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.too_many_nodes",
                   "JSON has more than %ld values and member names (limits.max_json_nodes)",
                   lim->max_nodes);
        return NULL;
    }
    root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root || !end || !only_space(end, buf + len)) {
        size_t at = root && end ? (size_t)(end - buf) : 0;

        if (!root) {
            const char *ep = cJSON_GetErrorPtr();
            /* The error pointer is only meaningful when it points into buf. */
            at = ep && ep >= buf && ep <= buf + len ? (size_t)(ep - buf) : 0;
        }
        cJSON_Delete(root);
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.malformed",
                   root ? "trailing data after the JSON value at byte %zu"
                        : "JSON syntax error near byte %zu",
                   at);
        return NULL;
    }
    if (scan_find(buf, len, depth, SCAN_NUL_ESCAPE, path, sizeof(path))) {
        cJSON_Delete(root);
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.nul",
                   "%s: a string holds the escape \\u0000 (NUL), which sagad does not accept "
                   "(I-JSON, RFC 7493): it would cut the string there",
                   path);
        return NULL;
    }
    if ((cJSON_IsObject(root) || cJSON_IsArray(root)) && has_duplicate(root) &&
        find_duplicate(root, "$", path, sizeof(path))) {
        cJSON_Delete(root);
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.duplicate_key",
                   "%s: the member name appears more than once in its object (I-JSON, RFC 7493)",
                   path);
        return NULL;
    }
    if (scan_find(buf, len, depth, SCAN_UNDERFLOW, path, sizeof(path))) {
        cJSON_Delete(root);
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.number_range",
                   "%s: a number too small for sagad to pass on unchanged (it underflows a "
                   "double, below 2.2e-308, and would become 0): send it as a string",
                   path);
        return NULL;
    }
    if (nodes)
        *nodes = n;
    return root;
}

void sg_json_destroy(sg_json_t *root)
{
    cJSON_Delete(root);
}

void sg_json_path_key(char *out, size_t out_size, const char *base, const char *key)
{
    /* The key is the client's text: a path cut to fit ends before a
     * character, never inside one (an answer quoting it must stay JSON). */
    if (snprintf(out, out_size, "%s.%s", base, key) >= (int)out_size)
        out[sg_utf8_cut(out, out_size - 1)] = '\0';
}

void sg_json_path_idx(char *out, size_t out_size, const char *base, size_t idx)
{
    snprintf(out, out_size, "%s[%zu]", base, idx);
}

const char *sg_json_type_name(const sg_json_t *node)
{
    if (!node)
        return "nothing";
    if (cJSON_IsObject(node))
        return "object";
    if (cJSON_IsArray(node))
        return "array";
    if (cJSON_IsString(node))
        return "string";
    if (cJSON_IsNumber(node))
        return "number";
    if (cJSON_IsBool(node))
        return "boolean";
    if (cJSON_IsNull(node))
        return "null";
    return "invalid";
}

bool sg_json_is_object(const sg_json_t *node)
{
    return cJSON_IsObject(node);
}

bool sg_json_is_array(const sg_json_t *node)
{
    return cJSON_IsArray(node);
}

const sg_json_t *sg_json_member(const sg_json_t *obj, const char *key)
{
    if (!cJSON_IsObject(obj) || !key)
        return NULL;
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

bool sg_json_number(const sg_json_t *node, double *out)
{
    if (!cJSON_IsNumber(node))
        return false;
    *out = node->valuedouble;
    return true;
}

bool sg_json_equal(const sg_json_t *a, const sg_json_t *b)
{
    /* Recursion is bounded by the parse depth limit.  cJSON compares
     * numbers with a relative tolerance of DBL_EPSILON, i.e. as doubles
     * that differ only in the last bit of rounding. */
    return a && b && cJSON_Compare(a, b, 1);
}

/* Looks up key and checks its type with is_type.  Returns the node, or
 * NULL with *rc set to 1 (absent, optional) or -1 (err set). */
static const cJSON *field(const sg_json_t *obj, const char *base, const char *key, bool required,
                          cJSON_bool (*is_type)(const cJSON *), const char *want, int *rc,
                          sg_err_t *err)
{
    char path[512];
    const cJSON *item = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;

    if (!item || (cJSON_IsNull(item) && !required)) {
        if (!required) {
            *rc = 1;
            return NULL;
        }
        /* the path is spelled out only for an error: on every message's
         * fields it was an snprintf a lookup */
        sg_json_path_key(path, sizeof(path), base, key);
        *rc = sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.required",
                         "%s: required %s is missing", path, want);
        return NULL;
    }
    if (!is_type(item)) {
        sg_json_path_key(path, sizeof(path), base, key);
        *rc = sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.type", "%s: must be %s, got %s",
                         path, want, sg_json_type_name(item));
        return NULL;
    }
    *rc = 0;
    return item;
}

int sg_json_get_str(const sg_json_t *obj, const char *base, const char *key, bool required,
                    const char **out, sg_err_t *err)
{
    int rc;
    const cJSON *item = field(obj, base, key, required, cJSON_IsString, "a string", &rc, err);

    if (item)
        *out = item->valuestring;
    return rc;
}

int sg_json_get_int(const sg_json_t *obj, const char *base, const char *key, bool required,
                    int64_t *out, sg_err_t *err)
{
    int rc;
    const cJSON *item = field(obj, base, key, required, cJSON_IsNumber, "an integer", &rc, err);
    char path[512];

    if (!item)
        return rc;
    if (item->valuedouble != floor(item->valuedouble) || fabs(item->valuedouble) > JSON_INT_MAX) {
        sg_json_path_key(path, sizeof(path), base, key);
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.type",
                          "%s: must be an integer within +/-2^53, got %g", path, item->valuedouble);
    }
    *out = (int64_t)item->valuedouble;
    return 0;
}

int sg_json_get_bool(const sg_json_t *obj, const char *base, const char *key, bool required,
                     bool *out, sg_err_t *err)
{
    int rc;
    const cJSON *item = field(obj, base, key, required, cJSON_IsBool, "a boolean", &rc, err);

    if (item)
        *out = cJSON_IsTrue(item);
    return rc;
}

int sg_json_get_object(const sg_json_t *obj, const char *base, const char *key, bool required,
                       const sg_json_t **out, sg_err_t *err)
{
    int rc;
    const cJSON *item = field(obj, base, key, required, cJSON_IsObject, "an object", &rc, err);

    if (item)
        *out = item;
    return rc;
}

int sg_json_get_array(const sg_json_t *obj, const char *base, const char *key, bool required,
                      const sg_json_t **out, sg_err_t *err)
{
    int rc;
    const cJSON *item = field(obj, base, key, required, cJSON_IsArray, "an array", &rc, err);

    if (item)
        *out = item;
    return rc;
}

size_t sg_json_array_size(const sg_json_t *arr)
{
    return cJSON_IsArray(arr) ? (size_t)cJSON_GetArraySize(arr) : 0;
}

const sg_json_t *sg_json_array_get(const sg_json_t *arr, size_t idx)
{
    if (!cJSON_IsArray(arr) || idx > (size_t)INT32_MAX)
        return NULL;
    return cJSON_GetArrayItem(arr, (int)idx);
}

const sg_json_t *sg_json_first(const sg_json_t *node)
{
    return node && (cJSON_IsObject(node) || cJSON_IsArray(node)) ? node->child : NULL;
}

const sg_json_t *sg_json_next(const sg_json_t *node)
{
    return node ? node->next : NULL;
}

const char *sg_json_key(const sg_json_t *node)
{
    return node ? node->string : NULL;
}

const char *sg_json_string(const sg_json_t *node)
{
    return cJSON_IsString(node) ? node->valuestring : NULL;
}

static cJSON *oom_check(cJSON *node)
{
    sg_xcheck(node, "cJSON");
    return node;
}

sg_json_t *sg_json_new_object(void)
{
    return oom_check(cJSON_CreateObject());
}

sg_json_t *sg_json_new_array(void)
{
    return oom_check(cJSON_CreateArray());
}

sg_json_t *sg_json_new_str(const char *val)
{
    return oom_check(cJSON_CreateString(val));
}

void sg_json_add_str(sg_json_t *obj, const char *key, const char *val)
{
    oom_check(cJSON_AddStringToObject(obj, key, val));
}

void sg_json_add_int(sg_json_t *obj, const char *key, int64_t val)
{
    char text[32];

    /* cJSON prints doubles with 15 significant digits when that reads back
     * "close enough", which rounds integers past 1e15: write those raw. */
    if (val > -1000000000000000LL && val < 1000000000000000LL) {
        oom_check(cJSON_AddNumberToObject(obj, key, (double)val));
        return;
    }
    snprintf(text, sizeof(text), "%lld", (long long)val);
    oom_check(cJSON_AddRawToObject(obj, key, text));
}

void sg_json_add_raw(sg_json_t *obj, const char *key, const char *json_text)
{
    oom_check(cJSON_AddRawToObject(obj, key, json_text));
}

void sg_json_add_bool(sg_json_t *obj, const char *key, bool val)
{
    oom_check(cJSON_AddBoolToObject(obj, key, val));
}

void sg_json_add_node(sg_json_t *obj, const char *key, sg_json_t *child)
{
    if (!cJSON_AddItemToObject(obj, key, child))
        abort();
}

void sg_json_set(sg_json_t *obj, const char *key, sg_json_t *child)
{
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
        if (!cJSON_ReplaceItemInObjectCaseSensitive(obj, key, child))
            abort();
    } else {
        sg_json_add_node(obj, key, child);
    }
}

int sg_json_set_at(sg_json_t *arr, size_t idx, sg_json_t *child)
{
    size_t n = (size_t)cJSON_GetArraySize(arr);

    if (idx > n || idx > (size_t)INT32_MAX)
        return -1;
    if (idx == n)
        sg_json_append(arr, child);
    else if (!cJSON_ReplaceItemInArray(arr, (int)idx, child))
        abort();
    return 0;
}

void sg_json_append(sg_json_t *arr, sg_json_t *child)
{
    if (!cJSON_AddItemToArray(arr, child))
        abort();
}

char *sg_json_print_pretty(const sg_json_t *node)
{
    char *s = sg_xcheck(cJSON_Print(node), "cJSON_Print");

    return s;
}

void sg_json_move_members(sg_json_t *dst, sg_json_t *src)
{
    cJSON *c;

    /* an item detached keeps its name, which adding it as an array item
     * leaves as it is: the member goes over whole */
    while (src && (c = src->child) != NULL)
        cJSON_AddItemToArray(dst, cJSON_DetachItemViaPointer(src, c));
}

sg_json_t *sg_json_dup(const sg_json_t *node)
{
    return node ? oom_check(cJSON_Duplicate(node, 1)) : NULL;
}

bool sg_json_is_null(const sg_json_t *node)
{
    return cJSON_IsNull(node);
}

void sg_json_add_null(sg_json_t *obj, const char *key)
{
    oom_check(cJSON_AddNullToObject(obj, key));
}

/* ---- documents of sagad's own database --------------------------------- */

/* The next number token of buf at or after *pos, outside strings (buf is
 * valid JSON, so a digit or a minus outside a string starts one): its start
 * and length; *pos moves past it.  false when none is left. */
static bool next_number(const char *buf, size_t len, size_t *pos, size_t *start, size_t *n)
{
    for (size_t i = *pos; i < len; i++) {
        if (buf[i] == '"') {
            for (i++; i < len && buf[i] != '"'; i++)
                if (buf[i] == '\\')
                    i++;
        } else if (buf[i] == '-' || (buf[i] >= '0' && buf[i] <= '9')) {
            *start = i;
            *n = number_len(buf, len, i);
            *pos = i + *n;
            return true;
        }
    }
    return false;
}

/* The decimal value of the number token p[0..n) as its sign, its
 * significant digits (no leading or trailing zero) and the power of ten of
 * the last one: "1.50", "15e-1" and "0.15e1" all give +15e-1.  false when
 * the digits do not fit in size bytes. */
static bool decimal_of(const char *p, size_t n, char *digits, size_t size, long long *exp,
                       bool *neg)
{
    size_t i = 0, k = 0;
    long long frac = 0, e = 0;
    bool in_frac = false;

    *neg = n > 0 && p[0] == '-';
    i = *neg;
    for (; i < n && ((p[i] >= '0' && p[i] <= '9') || p[i] == '.'); i++) {
        if (p[i] == '.') {
            in_frac = true;
            continue;
        }
        frac += in_frac;
        if (k == 0 && p[i] == '0')
            continue; /* a leading zero */
        if (k + 1 >= size)
            return false;
        digits[k++] = p[i];
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        char *end;
        e = strtoll(p + i + 1, &end, 10);
    }
    for (; k > 0 && digits[k - 1] == '0'; k--)
        e++;
    digits[k] = '\0';
    *exp = k ? e - frac : 0;
    *neg = *neg && k > 0; /* -0 is 0 */
    return true;
}

/* Whether cJSON would print node (parsed from the token p[0..n)) as
 * another decimal value than the token's: a double holds about 16
 * digits, so a longer id, an amount to the 17th digit or a value below a
 * double's range would not go out as the database holds it. */
static bool prints_other_value(const cJSON *node, const char *p, size_t n)
{
    char a[64], b[64], *text = cJSON_PrintUnformatted(node);
    long long ea, eb;
    bool na, nb, other;

    if (!text)
        abort();
    other = !decimal_of(p, n, a, sizeof(a), &ea, &na) ||
            !decimal_of(text, strlen(text), b, sizeof(b), &eb, &nb) || strcmp(a, b) != 0 ||
            ea != eb || na != nb;
    cJSON_free(text);
    return other;
}

/* Numbers come in the document's order both in buf and in a depth-first
 * walk of the tree (cJSON keeps members and items in order), so the k-th
 * number node is the k-th number token.  One that would not print back as
 * the same value becomes a raw node holding the token. */
static void keep_exact(cJSON *node, const char *buf, size_t len, size_t *pos)
{
    size_t start, n;

    if (!cJSON_IsNumber(node)) {
        for (cJSON *c = node->child; c; c = c->next)
            keep_exact(c, buf, len, pos);
        return;
    }
    if (!next_number(buf, len, pos, &start, &n))
        return;
    if (prints_other_value(node, buf + start, n)) {
        char *text = cJSON_malloc(n + 1);

        if (!text)
            abort();
        memcpy(text, buf + start, n);
        text[n] = '\0';
        node->type = cJSON_Raw | (node->type & ~0xFF);
        node->valuestring = text;
    }
}

sg_json_t *sg_json_parse_exact(const char *buf, size_t len, sg_err_t *err)
{
    const char *end = NULL;
    size_t pos = 0;
    cJSON *root;

    if (!buf || !sg_utf8_valid(buf, len)) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.utf8.invalid",
                   "a document of the database is not UTF-8");
        return NULL;
    }
    root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root || !end || !only_space(end, buf + len)) {
        cJSON_Delete(root);
        sg_err_set(err, SG_ERRCLASS_POISON, "input.json.malformed",
                   "a document of the database is not one JSON value (%zu bytes)", len);
        return NULL;
    }
    keep_exact(root, buf, len, &pos);
    return root;
}
