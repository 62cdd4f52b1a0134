/* sg_schema: the args-schema subset of JSON Schema (docs/ARGS-SCHEMA.md).
 *
 * sg_schema_check walks a schema once and refuses anything outside the
 * subset, so sg_schema_validate can trust its shape: a keyword it does not
 * find is absent, never misspelt or of the wrong type. */
#include "sagad/sg_schema.h"

#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_text.h"

#define PATH_SIZE 512
#define RULE_SIZE 160

/* Counts and lengths above 2^53 could not be told apart as doubles. */
#define COUNT_MAX 9007199254740992.0

#define REGEX_FLAGS (REG_EXTENDED | REG_NOSUB)

static const char *const type_names[] = {"object",  "array",   "string", "number",
                                         "integer", "boolean", "null"};

/* ---- shared by both walks ---- */

/* A member's key, or an array item's text: what duplicates are judged by. */
static const char *name_of(const sg_json_t *node)
{
    const char *key = sg_json_key(node);

    return key ? key : sg_json_string(node);
}

/* True when a sibling between first and node has node's name. */
static bool seen_before(const sg_json_t *first, const sg_json_t *node)
{
    const char *name = name_of(node);

    for (const sg_json_t *c = first; c && c != node; c = sg_json_next(c))
        if (name && name_of(c) && strcmp(name, name_of(c)) == 0)
            return true;
    return false;
}

/* "type" holds one name or an array of names: both are walked alike,
 * for (t = type_next(type, NULL); t; t = type_next(type, t)). */
static const sg_json_t *type_next(const sg_json_t *type, const sg_json_t *cur)
{
    if (!sg_json_is_array(type))
        return cur ? NULL : type;
    return cur ? sg_json_next(cur) : sg_json_first(type);
}

/* "integer" is a number with no fractional part; the other names are
 * sg_json_type_name's. */
static bool type_matches(const char *name, const sg_json_t *doc)
{
    double x;

    if (strcmp(name, "integer") == 0)
        return sg_json_number(doc, &x) && x == floor(x);
    return strcmp(name, sg_json_type_name(doc)) == 0;
}

/* The shortest of %.15g / %.17g that reads back as d: "1", "0.5". */
static void number_text(char *out, size_t out_size, double d)
{
    snprintf(out, out_size, "%.15g", d);
    if (strtod(out, NULL) != d)
        snprintf(out, out_size, "%.17g", d);
}

/* ---- sg_schema_check ---- */

typedef int (*keyword_fn)(const sg_json_t *val, const char *path, int depth, sg_err_t *err);

static int check_schema(const sg_json_t *schema, const char *path, int depth, sg_err_t *err);

static int invalid(sg_err_t *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int invalid(sg_err_t *err, const char *path, const char *fmt, ...)
{
    char rule[RULE_SIZE];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(rule, sizeof(rule), fmt, ap);
    va_end(ap);
    return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.schema.invalid", "%s: %s", path, rule);
}

static bool is_type_name(const char *name)
{
    for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
        if (strcmp(name, type_names[i]) == 0)
            return true;
    return false;
}

static int kw_type(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    char item[PATH_SIZE];
    size_t i = 0;

    (void)depth;
    if (!sg_json_string(val) && !sg_json_is_array(val))
        return invalid(err, path, "must be a type name or an array of them, got %s",
                       sg_json_type_name(val));
    if (sg_json_is_array(val) && !sg_json_first(val))
        return invalid(err, path, "empty array");
    for (const sg_json_t *t = type_next(val, NULL); t; t = type_next(val, t), i++) {
        const char *name = sg_json_string(t);

        if (sg_json_is_array(val))
            sg_json_path_idx(item, sizeof(item), path, i);
        else
            snprintf(item, sizeof(item), "%s", path);
        if (!name)
            return invalid(err, item, "must be a string, got %s", sg_json_type_name(t));
        if (!is_type_name(name))
            return invalid(err, item, "unknown type \"%s\"", name);
        if (seen_before(sg_json_first(val), t))
            return invalid(err, item, "duplicate type \"%s\"", name);
    }
    return 0;
}

static int kw_properties(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    char child[PATH_SIZE];

    if (!sg_json_is_object(val))
        return invalid(err, path, "must be an object, got %s", sg_json_type_name(val));
    for (const sg_json_t *p = sg_json_first(val); p; p = sg_json_next(p)) {
        sg_json_path_key(child, sizeof(child), path, sg_json_key(p));
        if (seen_before(sg_json_first(val), p))
            return invalid(err, child, "duplicate property");
        if (check_schema(p, child, depth + 1, err) < 0)
            return -1;
    }
    return 0;
}

static int kw_required(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    char item[PATH_SIZE];
    size_t i = 0;

    (void)depth;
    if (!sg_json_is_array(val))
        return invalid(err, path, "must be an array of names, got %s", sg_json_type_name(val));
    for (const sg_json_t *r = sg_json_first(val); r; r = sg_json_next(r), i++) {
        sg_json_path_idx(item, sizeof(item), path, i);
        if (!sg_json_string(r))
            return invalid(err, item, "must be a string, got %s", sg_json_type_name(r));
        if (seen_before(sg_json_first(val), r))
            return invalid(err, item, "duplicate name \"%s\"", sg_json_string(r));
    }
    return 0;
}

static int kw_items(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    return check_schema(val, path, depth + 1, err);
}

static int kw_boolean(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    (void)depth;
    if (strcmp(sg_json_type_name(val), "boolean") != 0)
        return invalid(err, path, "must be a boolean, got %s", sg_json_type_name(val));
    return 0;
}

static int kw_count(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    double x;

    (void)depth;
    if (!sg_json_number(val, &x) || x < 0 || x != floor(x) || x > COUNT_MAX)
        return invalid(err, path, "must be a non-negative integer");
    return 0;
}

static int kw_number(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    double x;

    (void)depth;
    if (!sg_json_number(val, &x))
        return invalid(err, path, "must be a number, got %s", sg_json_type_name(val));
    return 0;
}

static int kw_enum(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    (void)depth;
    if (!sg_json_is_array(val) || !sg_json_first(val))
        return invalid(err, path, "must be a non-empty array");
    return 0;
}

static int kw_text(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    (void)depth;
    if (!sg_json_string(val))
        return invalid(err, path, "must be a string, got %s", sg_json_type_name(val));
    return 0;
}

static int kw_any(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    (void)val, (void)path, (void)depth, (void)err;
    return 0;
}

/* JSON Schema patterns are ECMA-262; authors write \d or \w out of habit.
 * glibc reads \d as a plain "d" (so "^\d+$" matches "ddd" and not "123")
 * and \w, \s, \b or \1 as GNU extensions: refuse a backslash before a
 * letter or digit.  Non-ASCII is refused too: in the C locale the matcher
 * sees bytes, so [é] or é+ would not mean what they say. */
/* Also refused, since glibc's regcomp copies a repeated part once per
 * repetition and can take gigabytes for a few hundred bytes of pattern
 * (found by fuzzing: "a+++...+"): a quantifier right after another, a
 * bound above PATTERN_MAX_BOUND, more than PATTERN_MAX_BOUNDS bounds, and
 * a pattern longer than PATTERN_MAX_LEN. */
#define PATTERN_MAX_LEN    256
#define PATTERN_MAX_BOUND  100
#define PATTERN_MAX_BOUNDS 2

static int pattern_portable(const char *p, const char *path, sg_err_t *err)
{
    bool after_quantifier = false;
    int bounds = 0;

    if (strlen(p) > PATTERN_MAX_LEN)
        return invalid(err, path, "longer than %d characters", PATTERN_MAX_LEN);
    for (const char *s = p; *s; s++) {
        unsigned char c = (unsigned char)*s, next = (unsigned char)s[1];

        if (c >= 0x80)
            return invalid(err, path, "non-ASCII characters are not supported");
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (after_quantifier)
                return invalid(err, path,
                               "a quantifier right after another (as in a++ or a{2}*) is not "
                               "POSIX ERE");
            if (c == '{') {
                char *end;
                long lo = strtol(s + 1, &end, 10), hi = lo;
                if (*end == ',')
                    hi = end[1] == '}' ? lo : strtol(end + 1, &end, 10); /* {n,}: n */
                if (++bounds > PATTERN_MAX_BOUNDS)
                    return invalid(err, path, "more than %d bounds {n,m}", PATTERN_MAX_BOUNDS);
                if (lo > PATTERN_MAX_BOUND || hi > PATTERN_MAX_BOUND)
                    return invalid(err, path, "a bound above {%d}", PATTERN_MAX_BOUND);
                s = strchr(s, '}') ? strchr(s, '}') : s;
            }
            after_quantifier = true;
            continue;
        }
        after_quantifier = false;
        if (c != '\\')
            continue;
        if ((next >= '0' && next <= '9') || (next >= 'a' && next <= 'z') ||
            (next >= 'A' && next <= 'Z'))
            return invalid(err, path, "\\%c is not POSIX ERE (write [0-9], [[:space:]], ...)",
                           next);
        if (next)
            s++;
    }
    return 0;
}

static int kw_pattern(const sg_json_t *val, const char *path, int depth, sg_err_t *err)
{
    const char *p = sg_json_string(val);
    char msg[96];
    regex_t re;
    int rc;

    (void)depth;
    if (!p)
        return invalid(err, path, "must be a string, got %s", sg_json_type_name(val));
    if (pattern_portable(p, path, err) < 0)
        return -1;
    rc = regcomp(&re, p, REGEX_FLAGS);
    if (rc != 0) {
        regerror(rc, &re, msg, sizeof(msg));
        return invalid(err, path, "invalid regular expression: %s", msg);
    }
    regfree(&re);
    return 0;
}

static const struct keyword_s {
    const char *name;
    keyword_fn check;
} keywords[] = {
    {"type", kw_type},
    {"properties", kw_properties},
    {"required", kw_required},
    {"additionalProperties", kw_boolean},
    {"items", kw_items},
    {"minItems", kw_count},
    {"maxItems", kw_count},
    {"enum", kw_enum},
    {"const", kw_any},
    {"minimum", kw_number},
    {"maximum", kw_number},
    {"exclusiveMinimum", kw_number},
    {"exclusiveMaximum", kw_number},
    {"minLength", kw_count},
    {"maxLength", kw_count},
    {"pattern", kw_pattern},
    {"description", kw_text},
    {"title", kw_text},
    {"default", kw_any},
    {"$comment", kw_text},
};

static const struct keyword_s *keyword_find(const char *name)
{
    for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
        if (strcmp(name, keywords[i].name) == 0)
            return &keywords[i];
    return NULL;
}

/* A lower bound above its upper bound: no value could pass. */
static int check_bounds(const sg_json_t *schema, const char *path, const char *lo, const char *hi,
                        sg_err_t *err)
{
    char child[PATH_SIZE];
    double a, b;

    if (!sg_json_number(sg_json_member(schema, lo), &a) ||
        !sg_json_number(sg_json_member(schema, hi), &b) || a <= b)
        return 0;
    sg_json_path_key(child, sizeof(child), path, lo);
    return invalid(err, child, "greater than %s", hi);
}

/* A closed object requiring a member it does not declare: no value could
 * pass, and it is nearly always a misspelt name. */
static int check_required_declared(const sg_json_t *schema, const char *path, sg_err_t *err)
{
    const sg_json_t *props = sg_json_member(schema, "properties");
    const sg_json_t *required = sg_json_member(schema, "required");
    char base[PATH_SIZE], item[PATH_SIZE];
    bool open = true;
    size_t i = 0;

    if (sg_json_get_bool(schema, path, "additionalProperties", false, &open, NULL) != 0 || open)
        return 0;
    sg_json_path_key(base, sizeof(base), path, "required");
    for (const sg_json_t *r = sg_json_first(required); r; r = sg_json_next(r), i++) {
        if (sg_json_member(props, sg_json_string(r)))
            continue;
        sg_json_path_idx(item, sizeof(item), base, i);
        return invalid(err, item, "\"%s\" is not in properties and additionalProperties is false",
                       sg_json_string(r));
    }
    return 0;
}

static int check_schema(const sg_json_t *schema, const char *path, int depth, sg_err_t *err)
{
    char child[PATH_SIZE];

    if (depth > SG_SCHEMA_MAX_DEPTH)
        return invalid(err, path, "nested deeper than %d levels", SG_SCHEMA_MAX_DEPTH);
    if (!sg_json_is_object(schema))
        return invalid(err, path, "must be a schema object, got %s", sg_json_type_name(schema));
    for (const sg_json_t *m = sg_json_first(schema); m; m = sg_json_next(m)) {
        const struct keyword_s *kw = keyword_find(sg_json_key(m));

        sg_json_path_key(child, sizeof(child), path, sg_json_key(m));
        if (!kw)
            return invalid(err, child, "unsupported keyword");
        if (seen_before(sg_json_first(schema), m))
            return invalid(err, child, "duplicate keyword");
        if (kw->check(m, child, depth, err) < 0)
            return -1;
    }
    if (check_bounds(schema, path, "minimum", "maximum", err) < 0 ||
        check_bounds(schema, path, "minLength", "maxLength", err) < 0 ||
        check_bounds(schema, path, "minItems", "maxItems", err) < 0)
        return -1;
    return check_required_declared(schema, path, err);
}

int sg_schema_check(const sg_json_t *schema, const char *where, sg_err_t *err)
{
    return check_schema(schema, where ? where : "$", 1, err);
}

/* ---- sg_schema_validate ---- */

typedef struct vstate_s {
    sg_schema_problem_fn fn;
    void *opaque;
    int count;
} vstate_t;

static void validate_node(const sg_json_t *schema, const sg_json_t *doc, const char *path,
                          int depth, vstate_t *v);

static bool full(const vstate_t *v)
{
    return v->count >= SG_SCHEMA_MAX_PROBLEMS;
}

static void problem(vstate_t *v, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void problem(vstate_t *v, const char *path, const char *fmt, ...)
{
    char rule[RULE_SIZE];
    va_list ap;

    if (full(v))
        return;
    v->count++;
    if (!v->fn)
        return;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof(rule), fmt, ap);
    va_end(ap);
    v->fn(v->opaque, path, rule);
}

static void validate_type(const sg_json_t *schema, const sg_json_t *doc, const char *path,
                          vstate_t *v)
{
    const sg_json_t *type = sg_json_member(schema, "type");
    char want[RULE_SIZE] = "";
    size_t len = 0;

    if (!type)
        return;
    for (const sg_json_t *t = type_next(type, NULL); t; t = type_next(type, t)) {
        const char *name = sg_json_string(t);

        if (!name)
            continue;
        if (type_matches(name, doc))
            return;
        if (len < sizeof(want))
            len +=
                (size_t)snprintf(want + len, sizeof(want) - len, "%s%s", len ? " or " : "", name);
    }
    problem(v, path, "type: expected %s", want);
}

static void validate_value(const sg_json_t *schema, const sg_json_t *doc, const char *path,
                           vstate_t *v)
{
    const sg_json_t *allowed = sg_json_member(schema, "enum");
    const sg_json_t *fixed = sg_json_member(schema, "const");

    if (fixed && !sg_json_equal(fixed, doc))
        problem(v, path, "const");
    if (!allowed)
        return;
    for (const sg_json_t *a = sg_json_first(allowed); a; a = sg_json_next(a))
        if (sg_json_equal(a, doc))
            return;
    problem(v, path, "enum");
}

static void validate_number(const sg_json_t *schema, double x, const char *path, vstate_t *v)
{
    static const struct {
        const char *kw;
        bool lower, exclusive;
    } bounds[] = {
        {"minimum", true, false},
        {"maximum", false, false},
        {"exclusiveMinimum", true, true},
        {"exclusiveMaximum", false, true},
    };
    char text[32];
    double lim;

    for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
        bool ok;

        if (!sg_json_number(sg_json_member(schema, bounds[i].kw), &lim))
            continue;
        if (bounds[i].lower)
            ok = bounds[i].exclusive ? x > lim : x >= lim;
        else
            ok = bounds[i].exclusive ? x < lim : x <= lim;
        if (!ok) {
            number_text(text, sizeof(text), lim);
            problem(v, path, "%s: %s", bounds[i].kw, text);
        }
    }
}

/* minLength/maxLength or minItems/maxItems against a size n. */
static void validate_size(const sg_json_t *schema, const char *min_kw, const char *max_kw, size_t n,
                          const char *path, vstate_t *v)
{
    char text[32];
    double lim;

    if (sg_json_number(sg_json_member(schema, min_kw), &lim) && (double)n < lim) {
        number_text(text, sizeof(text), lim);
        problem(v, path, "%s: %s", min_kw, text);
    }
    if (sg_json_number(sg_json_member(schema, max_kw), &lim) && (double)n > lim) {
        number_text(text, sizeof(text), lim);
        problem(v, path, "%s: %s", max_kw, text);
    }
}

/* Compiled patterns, by text: compiling costs far more than matching,
 * and every saga.start validates its steps' args against the same few
 * schemas.  Entries live until the process ends (a registry reload adds
 * its changed patterns); past PATTERN_CACHE distinct patterns the rest
 * are compiled per match as before.  regexec() on a shared regex_t is
 * safe from several threads; the lock guards the table only. */
#define PATTERN_CACHE 64

static struct {
    pthread_mutex_t lock;
    size_t n;
    struct {
        char *text;
        regex_t re;
    } slot[PATTERN_CACHE];
} patterns = {PTHREAD_MUTEX_INITIALIZER, 0, {{NULL}}};

static const regex_t *pattern_cached(const char *pattern)
{
    const regex_t *found = NULL;

    pthread_mutex_lock(&patterns.lock);
    for (size_t i = 0; i < patterns.n && !found; i++)
        if (strcmp(patterns.slot[i].text, pattern) == 0)
            found = &patterns.slot[i].re;
    if (!found && patterns.n < PATTERN_CACHE &&
        regcomp(&patterns.slot[patterns.n].re, pattern, REGEX_FLAGS) == 0) {
        if ((patterns.slot[patterns.n].text = strdup(pattern)))
            found = &patterns.slot[patterns.n++].re;
        else
            regfree(&patterns.slot[patterns.n].re);
    }
    pthread_mutex_unlock(&patterns.lock);
    return found;
}

/* True when pattern matches somewhere in s (unanchored, as in JSON
 * Schema).  A pattern that does not compile, possible only in an
 * unchecked schema, matches nothing. */
static bool pattern_matches(const char *pattern, const char *s)
{
    const regex_t *cached = pattern_cached(pattern);
    regex_t re;
    bool found;

    if (cached)
        return regexec(cached, s, 0, NULL, 0) == 0;
    if (regcomp(&re, pattern, REGEX_FLAGS) != 0)
        return false;
    found = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return found;
}

static void validate_string(const sg_json_t *schema, const char *s, const char *path, vstate_t *v)
{
    const char *pattern = sg_json_string(sg_json_member(schema, "pattern"));

    validate_size(schema, "minLength", "maxLength", sg_utf8_chars(s), path, v);
    if (pattern && !pattern_matches(pattern, s))
        problem(v, path, "pattern");
}

static void validate_array(const sg_json_t *schema, const sg_json_t *doc, const char *path,
                           int depth, vstate_t *v)
{
    const sg_json_t *items = sg_json_member(schema, "items");
    char child[PATH_SIZE];
    size_t i = 0;

    validate_size(schema, "minItems", "maxItems", sg_json_array_size(doc), path, v);
    if (!items)
        return;
    for (const sg_json_t *it = sg_json_first(doc); it && !full(v); it = sg_json_next(it), i++) {
        sg_json_path_idx(child, sizeof(child), path, i);
        validate_node(items, it, child, depth + 1, v);
    }
}

static void validate_object(const sg_json_t *schema, const sg_json_t *doc, const char *path,
                            int depth, vstate_t *v)
{
    const sg_json_t *props = sg_json_member(schema, "properties");
    const sg_json_t *required = sg_json_member(schema, "required");
    char child[PATH_SIZE];
    bool open = true;

    (void)sg_json_get_bool(schema, path, "additionalProperties", false, &open, NULL);
    for (const sg_json_t *r = sg_json_first(required); r && !full(v); r = sg_json_next(r)) {
        const char *name = sg_json_string(r);

        if (!name || sg_json_member(doc, name))
            continue;
        sg_json_path_key(child, sizeof(child), path, name);
        problem(v, child, "required");
    }
    for (const sg_json_t *m = sg_json_first(doc); m && !full(v); m = sg_json_next(m)) {
        const sg_json_t *sub = sg_json_member(props, sg_json_key(m));

        sg_json_path_key(child, sizeof(child), path, sg_json_key(m));
        if (sub)
            validate_node(sub, m, child, depth + 1, v);
        else if (!open)
            problem(v, child, "additionalProperties: not allowed");
    }
}

static void validate_node(const sg_json_t *schema, const sg_json_t *doc, const char *path,
                          int depth, vstate_t *v)
{
    const char *s;
    double x;

    /* The depth test only guards an unchecked schema's recursion. */
    if (!sg_json_is_object(schema) || depth > SG_SCHEMA_MAX_DEPTH || full(v))
        return;
    validate_type(schema, doc, path, v);
    validate_value(schema, doc, path, v);
    if (sg_json_number(doc, &x))
        validate_number(schema, x, path, v);
    else if ((s = sg_json_string(doc)) != NULL)
        validate_string(schema, s, path, v);
    else if (sg_json_is_array(doc))
        validate_array(schema, doc, path, depth, v);
    else if (sg_json_is_object(doc))
        validate_object(schema, doc, path, depth, v);
}

int sg_schema_validate(const sg_json_t *schema, const sg_json_t *doc, const char *base,
                       sg_schema_problem_fn fn, void *opaque)
{
    vstate_t v = {fn, opaque, 0};

    validate_node(schema, doc, base ? base : "$", 1, &v);
    return v.count;
}
