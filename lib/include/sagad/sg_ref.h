/* sg_ref: references between a saga's steps (DESIGN section 10, "Results
 * flow forward"; docs/WORKER.md, "References").
 *
 * Anywhere in a step's args, its compensation's args and the saga's
 * output, an object of exactly one member {"$from": POINTER} stands for
 * the value POINTER names in the saga's context document
 *
 *     {"input": ..., "steps": {"NAME": {"result": ..., "key": "..."}}}
 *
 * POINTER is an RFC 6901 JSON Pointer of one of three shapes:
 * /input[/...], /steps/NAME/result[/...] or /steps/NAME/key.
 * Submission checks the shape and the step (sg_submit_validate.c); the worker
 * resolves the references at call time (sg_ref_resolve). */
#ifndef SAGAD_REF_H
#define SAGAD_REF_H

#include <stdbool.h>
#include <stddef.h>

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"

#define SG_REF_MEMBER "$from"

/* True when node is an object with a "$from" member: a reference, or (with
 * other members, or a value that is not a string) a malformed one. */
bool sg_ref_is(const sg_json_t *node);

/* True when node holds a reference anywhere (itself included). */
bool sg_ref_any(const sg_json_t *node);

/* Checks a reference's pointer.  On success returns NULL and sets *step to
 * the step it names (NULL for /input; the name is copied into name[]).  On
 * failure returns the rule it breaks. */
const char *sg_ref_pointer_check(const char *pointer, char *name, size_t name_size,
                                 const char **step);

/* Calls fn with the name of the step every reference in tmpl names
 * (/steps/NAME/...; references to /input and malformed ones are passed
 * over) and the reference's whole pointer, depth first; returns the first
 * name fn returned true for (copied into name), or NULL when none. */
typedef bool (*sg_ref_step_fn)(void *opaque, const char *step, const char *pointer);
const char *sg_ref_find_step(const sg_json_t *tmpl, sg_ref_step_fn fn, void *opaque, char *name,
                             size_t name_size);

/* The value pointer names in doc, or NULL when there is none.  pointer is
 * RFC 6901: "" is doc itself, ~1 is '/', ~0 is '~', an array index is
 * decimal without leading zeros. */
const sg_json_t *sg_ref_lookup(const sg_json_t *doc, const char *pointer);

/* How much the values references bring in may add up to: a template of
 * thousands of references to one large value (each fits the intake caps)
 * would otherwise resolve to gigabytes.  Counted over the referenced
 * values: bytes of their strings, member names and scalars, and their
 * values and member names.  0: no cap of that kind. */
typedef struct sg_ref_budget_s {
    size_t max_bytes;
    long max_nodes;
} sg_ref_budget_t;

/* The budget the worker gives a step's args and a saga's output: 4 times
 * the message limits (limits.max_message_bytes, limits.max_json_nodes). */
#define SG_REF_BUDGET_FACTOR 4

/* A copy of tmpl with every reference replaced by a copy of the value it
 * names in ctx.  NULL with err (permanent) naming the pointer and the JSON
 * path (base) of the first reference whose value is absent, or a number
 * sagad cannot pass on unchanged (input.ref.unresolved), or whose value
 * would take what is resolved past budget (input.ref.too_large; NULL: no
 * budget), found before that value is copied. */
sg_json_t *sg_ref_resolve(const sg_json_t *tmpl, const sg_json_t *ctx, const char *base,
                          const sg_ref_budget_t *budget, sg_err_t *err);

#endif
