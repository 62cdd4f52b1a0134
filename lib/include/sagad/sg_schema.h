/* sg_schema: tool arguments checked against an "args schema", a small
 * subset of JSON Schema described in docs/ARGS-SCHEMA.md.
 *
 * A schema is checked once, when the registry holding it is loaded, so a
 * typo in it is a config error naming its path rather than a keyword that
 * silently checks nothing.  Documents are then validated against it and
 * every problem is reported with the path of the offending value, so one
 * refused message says all that is wrong with it. */
#ifndef SAGAD_SCHEMA_H
#define SAGAD_SCHEMA_H

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"

/* Levels of nested schemas (under properties or items), the root being
 * level 1; sg_schema_check refuses deeper schemas. */
#define SG_SCHEMA_MAX_DEPTH 32

/* sg_schema_validate reports at most this many problems. */
#define SG_SCHEMA_MAX_PROBLEMS 64

/* Receives one problem: path is the JSON path of the offending value in
 * the document ("$.args.items[1].qty"; for "required", the path the
 * missing member would have), rule a short text ("required",
 * "type: expected string", "maxLength: 64").  Both are valid only during
 * the call. */
typedef void (*sg_schema_problem_fn)(void *opaque, const char *path, const char *rule);

/* Checks that schema uses only the supported subset and is well formed,
 * including that every pattern compiles.  Returns 0, or -1 with err (class
 * permanent, code config.schema.invalid, message "<path>: <rule>") where
 * path is the offending place in the schema prefixed by where (e.g.
 * "$.tools.reserve.args"; NULL means "$").  err may be NULL. */
int sg_schema_check(const sg_json_t *schema, const char *where, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Validates doc against a schema that passed sg_schema_check (any other
 * schema gives unspecified results, though never a crash).  Calls fn (may
 * be NULL) with opaque once per problem, paths starting at base (e.g.
 * "$.steps[2].args"; NULL means "$"): a value's own problems first, then
 * those of its members or items in document order.  Stops after
 * SG_SCHEMA_MAX_PROBLEMS.  Returns the number of problems reported, 0 when
 * doc is valid.  Patterns are compiled on each call: nothing is cached. */
int sg_schema_validate(const sg_json_t *schema, const sg_json_t *doc, const char *base,
                       sg_schema_problem_fn fn, void *opaque) __attribute__((warn_unused_result));

#endif
