/* References between a saga's steps: their shape, and their resolution
 * against a saga's context document (sagad/sg_ref.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_ref.h"

bool sg_ref_is(const sg_json_t *node)
{
    return sg_json_is_object(node) && sg_json_member(node, SG_REF_MEMBER) != NULL;
}

bool sg_ref_any(const sg_json_t *node)
{
    if (sg_ref_is(node))
        return true;
    if (!sg_json_is_object(node) && !sg_json_is_array(node))
        return false;
    for (const sg_json_t *m = sg_json_first(node); m; m = sg_json_next(m))
        if (sg_ref_any(m))
            return true;
    return false;
}

const char *sg_ref_find_step(const sg_json_t *tmpl, sg_ref_step_fn fn, void *opaque, char *name,
                             size_t name_size)
{
    if (sg_ref_is(tmpl)) {
        const char *pointer = sg_json_string(sg_json_member(tmpl, SG_REF_MEMBER)), *step = NULL;
        if (pointer && !sg_ref_pointer_check(pointer, name, name_size, &step) && step &&
            fn(opaque, name, pointer))
            return name;
        return NULL;
    }
    if (!sg_json_is_object(tmpl) && !sg_json_is_array(tmpl))
        return NULL;
    for (const sg_json_t *m = sg_json_first(tmpl); m; m = sg_json_next(m))
        if (sg_ref_find_step(m, fn, opaque, name, name_size))
            return name;
    return NULL;
}

/* The next token of pointer p (after its '/'), unescaped into out;
 * returns where the token ends, or NULL when an escape is malformed or
 * the token does not fit. */
static const char *token(const char *p, char *out, size_t size)
{
    size_t n = 0;

    for (p++; *p && *p != '/'; p++) {
        char c = *p;
        if (c == '~') {
            if (p[1] != '0' && p[1] != '1')
                return NULL;
            c = p[1] == '0' ? '~' : '/';
            p++;
        }
        if (n + 1 >= size)
            return NULL;
        out[n++] = c;
    }
    out[n] = '\0';
    return p;
}

/* Escapes are well formed all through p. */
static bool escapes_ok(const char *p)
{
    for (; *p; p++)
        if (*p == '~' && p[1] != '0' && p[1] != '1')
            return false;
    return true;
}

const char *sg_ref_pointer_check(const char *pointer, char *name, size_t name_size,
                                 const char **step)
{
    static const char shape[] =
        "pattern: a JSON Pointer (RFC 6901) of the form /input[/...], /steps/NAME/result[/...] "
        "or /steps/NAME/key";
    const char *p = pointer;

    *step = NULL;
    if (!escapes_ok(pointer))
        return "pattern: a JSON Pointer (RFC 6901): '~' is escaped as ~0, '/' in a name as ~1";
    if (strncmp(p, "/input", 6) == 0 && (p[6] == '\0' || p[6] == '/'))
        return NULL;
    if (strncmp(p, "/steps/", 7) != 0)
        return shape;
    p += 6;
    /* A step name is 1-64 of A-Z a-z 0-9 . _ - : no escapes in it. */
    p = token(p, name, name_size);
    if (!p || !*name ||
        strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                     "0123456789._-") != strlen(name) ||
        strlen(name) > 64)
        return shape;
    if (strcmp(p, "/key") != 0 && !(strncmp(p, "/result", 7) == 0 && (p[7] == '\0' || p[7] == '/')))
        return shape;
    *step = name;
    return NULL;
}

const sg_json_t *sg_ref_lookup(const sg_json_t *doc, const char *pointer)
{
    const sg_json_t *node = doc;
    const char *p = pointer;
    char tok[512];

    while (node && *p) {
        if (*p != '/' || !(p = token(p, tok, sizeof(tok))))
            return NULL;
        if (sg_json_is_object(node)) {
            node = sg_json_member(node, tok);
        } else if (sg_json_is_array(node)) {
            char *end;
            unsigned long idx;
            if (!tok[0] || tok[strspn(tok, "0123456789")] != '\0' ||
                (tok[0] == '0' && tok[1] != '\0'))
                return NULL;
            idx = strtoul(tok, &end, 10);
            node = idx < sg_json_array_size(node) ? sg_json_array_get(node, idx) : NULL;
        } else {
            return NULL;
        }
    }
    return node;
}

/* What one resolution has brought in so far, and the sizes of the values
 * it brought (a template names one value many times: measured once). */
typedef struct spent_s {
    const sg_ref_budget_t *budget;
    size_t bytes;
    long nodes;
    struct {
        const sg_json_t *v;
        size_t bytes;
        long nodes;
    } seen[8];
    unsigned nseen;
} spent_t;

/* A value's size as the budget counts it; bounded by the parse caps that
 * let the value in, so the walk ends. */
static void measure(const sg_json_t *v, size_t *bytes, long *nodes)
{
    const char *s;

    (*nodes)++;
    if (sg_json_key(v)) {
        *bytes += strlen(sg_json_key(v));
        (*nodes)++;
    }
    if ((s = sg_json_string(v)))
        *bytes += strlen(s);
    else if (!sg_json_is_object(v) && !sg_json_is_array(v))
        *bytes += 24; /* a number or a literal, printed */
    for (const sg_json_t *m = sg_json_first(v); m; m = sg_json_next(m))
        measure(m, bytes, nodes);
}

/* Counts v against the budget: false (err set) when it does not fit. */
static bool spend(spent_t *sp, const sg_json_t *v, const char *path, const char *ptr, sg_err_t *err)
{
    size_t bytes = 0;
    long nodes = 0;
    unsigned i;

    if (!sp->budget)
        return true;
    for (i = 0; i < sp->nseen && sp->seen[i].v != v; i++)
        ;
    if (i < sp->nseen) {
        bytes = sp->seen[i].bytes;
        nodes = sp->seen[i].nodes;
    } else {
        measure(v, &bytes, &nodes);
        i = sp->nseen < 8 ? sp->nseen++ : 7;
        sp->seen[i].v = v;
        sp->seen[i].bytes = bytes;
        sp->seen[i].nodes = nodes;
    }
    sp->bytes += bytes;
    sp->nodes += nodes;
    if ((sp->budget->max_bytes && sp->bytes > sp->budget->max_bytes) ||
        (sp->budget->max_nodes && sp->nodes > sp->budget->max_nodes)) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.ref.too_large",
                   "%s: the reference {\"$from\": \"%s\"} would take what the references bring "
                   "in past %zu bytes or %ld values (%zu bytes and %ld values so far): name the "
                   "value once, or pass a smaller one",
                   path, ptr, sp->budget->max_bytes, sp->budget->max_nodes, sp->bytes, sp->nodes);
        return false;
    }
    return true;
}

static sg_json_t *resolve(const sg_json_t *t, const sg_json_t *ctx, const char *path, spent_t *sp,
                          sg_err_t *err)
{
    sg_json_t *copy;
    char sub[512];
    size_t i = 0;

    if (sg_ref_is(t)) {
        const char *ptr = sg_json_string(sg_json_member(t, SG_REF_MEMBER));
        const sg_json_t *v = ptr ? sg_ref_lookup(ctx, ptr) : NULL;
        sg_err_t inexact;
        if (!v) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.ref.unresolved",
                       "%s: the reference {\"$from\": \"%s\"} names no value", path,
                       ptr ? ptr : "?");
            return NULL;
        }
        if (!spend(sp, v, path, ptr, err))
            return NULL;
        if (sg_json_exact_numbers(v, &inexact) < 0) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.ref.unresolved",
                       "%s: the value of {\"$from\": \"%s\"} holds a number sagad cannot pass "
                       "on unchanged (%s)",
                       path, ptr, inexact.message);
            return NULL;
        }
        return sg_json_dup(v);
    }
    if (!sg_json_is_object(t) && !sg_json_is_array(t))
        return sg_json_dup(t);
    copy = sg_json_is_object(t) ? sg_json_new_object() : sg_json_new_array();
    for (const sg_json_t *m = sg_json_first(t); m; m = sg_json_next(m), i++) {
        sg_json_t *v;
        if (sg_json_is_object(t))
            sg_json_path_key(sub, sizeof(sub), path, sg_json_key(m));
        else
            sg_json_path_idx(sub, sizeof(sub), path, i);
        if (!(v = resolve(m, ctx, sub, sp, err))) {
            sg_json_destroy(copy);
            return NULL;
        }
        if (sg_json_is_object(t))
            sg_json_add_node(copy, sg_json_key(m), v);
        else
            sg_json_append(copy, v);
    }
    return copy;
}

sg_json_t *sg_ref_resolve(const sg_json_t *tmpl, const sg_json_t *ctx, const char *base,
                          const sg_ref_budget_t *budget, sg_err_t *err)
{
    spent_t sp = {budget, 0, 0, {{NULL, 0, 0}}, 0};

    return resolve(tmpl, ctx, base, &sp, err);
}
