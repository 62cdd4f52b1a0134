/* sg_json: the only door to cJSON.
 *
 * Parsing works on the exact bytes received (Kafka payloads are not
 * NUL-terminated) with a size cap, a nesting cap and UTF-8 validation done
 * before cJSON sees the input, so hostile input is refused with a stable
 * error code instead of exhausting the stack.  Field access is typed and
 * reports the JSON path ($.steps[2].tool) of a missing or wrong field. */
#ifndef SAGAD_JSON_H
#define SAGAD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_err.h"

/* A node of a parsed or built document.  Only the root is destroyed. */
typedef struct cJSON sg_json_t;

typedef struct sg_json_limits_s {
    size_t max_bytes; /* input.too_large above this */
    int max_depth;    /* input.json.too_deep above this */
    /* input.json.too_many_nodes above this many values and member names
     * (0: no cap; what is read is then bounded by max_bytes alone). */
    long max_nodes;
} sg_json_limits_t;

#define SG_JSON_LIMITS_DEFAULT                                                                     \
    {                                                                                              \
        1048576, 64, 20000                                                                         \
    }

/* True when every number in the JSON text buf (already parsed, so valid)
 * fits PostgreSQL's numeric, which jsonb stores numbers in exactly: at
 * most about 131,000 digits before the decimal point and 16,000 after,
 * exponents included (1e200000 does not fit; jsonb would refuse it). */
bool sg_json_numbers_fit_pg(const char *buf, size_t len);

/* Values and member names in the JSON text buf[0..len) (each object,
 * array, string, number and literal counts one), counted without parsing;
 * stops once past limit (returns limit + 1).  Each becomes a parsed node
 * of about 64 bytes, so this bounds what parsing a message costs. */
long sg_json_nodes(const char *buf, size_t len, long limit);

/* Deepest array/object nesting in buf, counting brackets outside strings;
 * stops counting once it exceeds limit (returns limit + 1). */
int sg_json_depth(const char *buf, size_t len, int limit);

/* 0 when every number in root goes out as it came in; else -1 with err
 * input.json.number_range (class poison) naming the path of the first
 * that would not: an integer beyond +/-(2^53-1) (it may have lost digits
 * when read), or a value sagad's printer (cJSON's, 15 significant digits
 * when they read back within DBL_EPSILON) would give back as another
 * double.  The command messages' contract (sg_submit_decode) applies it;
 * other documents (the registry) do not need it. */
int sg_json_exact_numbers(const sg_json_t *root, sg_err_t *err);

/* Parses exactly buf[0..len).  On failure returns NULL and sets err (class
 * poison) to input.too_large, input.utf8.invalid, input.json.too_deep or
 * input.json.malformed (with the byte offset).  The caller owns the result
 * and frees it with sg_json_destroy(). */
sg_json_t *sg_json_parse(const char *buf, size_t len, const sg_json_limits_t *lim, sg_err_t *err)
    __attribute__((warn_unused_result));

/* sg_json_parse, and the values and member names parsed into *nodes
 * (sg_json_nodes, counted once for the cap and for the caller). */
sg_json_t *sg_json_parse_counted(const char *buf, size_t len, const sg_json_limits_t *lim,
                                 sg_err_t *err, long *nodes) __attribute__((warn_unused_result));

/* Parses JSON text of sagad's own database (PostgreSQL's jsonb output),
 * which holds what producers and tools sent: a number sagad's printer
 * would not give back as it came (an integer beyond +/-(2^53-1), more than
 * 15 significant digits, a value below a double's range) is kept as its
 * text, so sg_json_print writes it back exactly; sg_json_number is false
 * for such a node (sg_json_print it to read the text).  No size or depth
 * cap beyond cJSON's and no I-JSON checks: not for input from outside.
 * NULL with err (input.utf8.invalid, input.json.malformed) when buf is not
 * one JSON value; the caller owns the result. */
sg_json_t *sg_json_parse_exact(const char *buf, size_t len, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Frees a root node; NULL is a no-op. */
void sg_json_destroy(sg_json_t *root);

/* Path helpers: out = base + ".key" / base + "[idx]". */
void sg_json_path_key(char *out, size_t out_size, const char *base, const char *key);
void sg_json_path_idx(char *out, size_t out_size, const char *base, size_t idx);

/* Typed field access on object obj whose path is base ("$" for the root).
 * Return 0 when found with the right type, 1 when absent and !required,
 * -1 (err set, class permanent, code input.schema.*) when absent and
 * required or of the wrong type.  Strings point into the document. */
int sg_json_get_str(const sg_json_t *obj, const char *base, const char *key, bool required,
                    const char **out, sg_err_t *err);
int sg_json_get_int(const sg_json_t *obj, const char *base, const char *key, bool required,
                    int64_t *out, sg_err_t *err);
int sg_json_get_bool(const sg_json_t *obj, const char *base, const char *key, bool required,
                     bool *out, sg_err_t *err);
int sg_json_get_object(const sg_json_t *obj, const char *base, const char *key, bool required,
                       const sg_json_t **out, sg_err_t *err);
int sg_json_get_array(const sg_json_t *obj, const char *base, const char *key, bool required,
                      const sg_json_t **out, sg_err_t *err);

/* Array access; NULL when idx is out of range. */
size_t sg_json_array_size(const sg_json_t *arr);
const sg_json_t *sg_json_array_get(const sg_json_t *arr, size_t idx);

/* Iteration over the members of an object or the items of an array:
 * for (c = sg_json_first(obj); c; c = sg_json_next(c)).  sg_json_key is
 * the member name (NULL for array items); sg_json_string is the text of a
 * string node, NULL for other types. */
const sg_json_t *sg_json_first(const sg_json_t *node);
const sg_json_t *sg_json_next(const sg_json_t *node);
const char *sg_json_key(const sg_json_t *node);
const char *sg_json_string(const sg_json_t *node);

/* The member named key of object obj, whatever its type (a null member is
 * returned, not treated as absent); NULL when obj is not an object or has
 * no such member.  The match is case-sensitive. */
const sg_json_t *sg_json_member(const sg_json_t *obj, const char *key);

/* When node is a number, stores its value in *out and returns true; for
 * any other node returns false and leaves *out untouched. */
bool sg_json_number(const sg_json_t *node, double *out);

/* True when a and b hold the same JSON value: same type, numbers equal as
 * doubles up to the last bit of rounding (1 == 1.0), strings byte for
 * byte, arrays item by item in order, objects with the same members in
 * any order.  NULL equals nothing. */
bool sg_json_equal(const sg_json_t *a, const sg_json_t *b);

/* Type tests and names ("object", "array", "string", "number", "boolean",
 * "null"). */
bool sg_json_is_object(const sg_json_t *node);
bool sg_json_is_array(const sg_json_t *node);
const char *sg_json_type_name(const sg_json_t *node);

/* Building.  sg_json_new_object() aborts on OOM; add functions copy their
 * arguments; sg_json_add_node takes ownership of child. */
sg_json_t *sg_json_new_object(void);
sg_json_t *sg_json_new_array(void);
/* A string node (val copied), to stand alone or be added as a child. */
sg_json_t *sg_json_new_str(const char *val);
void sg_json_add_str(sg_json_t *obj, const char *key, const char *val);
void sg_json_add_int(sg_json_t *obj, const char *key, int64_t val);
void sg_json_add_bool(sg_json_t *obj, const char *key, bool val);
void sg_json_add_node(sg_json_t *obj, const char *key, sg_json_t *child);
/* Adds json_text, which the caller has checked is one JSON value, to be
 * printed exactly as it is (a tool's answer goes into an envelope this
 * way, so its numbers never pass through a double). */
void sg_json_add_raw(sg_json_t *obj, const char *key, const char *json_text);
void sg_json_append(sg_json_t *arr, sg_json_t *child);
/* Moves every member of object src, in order and with its name, to the
 * end of object dst (no copy); src is left empty.  NULL src: nothing. */
void sg_json_move_members(sg_json_t *dst, sg_json_t *src);
/* Editing (takes child): sg_json_set replaces member key of obj, or adds
 * it; sg_json_set_at replaces item idx of arr, or appends when idx is its
 * size, and returns -1 (child untouched, still the caller's) past that. */
void sg_json_set(sg_json_t *obj, const char *key, sg_json_t *child);
int sg_json_set_at(sg_json_t *arr, size_t idx, sg_json_t *child);

/* Deep copy (the caller destroys it); NULL for NULL. */
sg_json_t *sg_json_dup(const sg_json_t *node);
bool sg_json_is_null(const sg_json_t *node);
void sg_json_add_null(sg_json_t *obj, const char *key);

/* Compact text of node; the caller frees it with free(). */
char *sg_json_print(const sg_json_t *node);
/* The same, indented over several lines for people (tabs). */
char *sg_json_print_pretty(const sg_json_t *node);

#endif
