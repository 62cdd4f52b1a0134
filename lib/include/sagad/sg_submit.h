/* sg_submit: the command messages' contract, shared by every binary that
 * reads or checks them (sagad-worker decides them; dlq-tool checks an
 * edited submission with the same rules before a replay).
 *
 * schemas/saga-start.schema.json and schemas/step-command.schema.json are
 * the contract; sg_submit_validate checks the same rules (the tests run
 * both over the same fixtures) plus those JSON Schema cannot say: unique
 * names (steps, parallel groups and their members share one namespace),
 * at most SG_MAX_STEPS calls, registered tools, args valid for their
 * tool, a compensation for reversible steps, irreversible steps last,
 * references to what has run before.  Every problem is reported, each
 * with its JSON path and rule. */
#ifndef SAGAD_SUBMIT_H
#define SAGAD_SUBMIT_H

#include <stdbool.h>
#include <stddef.h>

#include "sagad/sg_err.h"
#include "sagad/sg_json.h"
#include "sagad/sg_registry.h"

typedef enum sg_ctype_e {
    SG_CMD_START,
    SG_CMD_EXECUTE,
    SG_CMD_COMPENSATE,
    SG_CMD_RELEASE,          /* saga.release: a held saga's hold ended */
    SG_CMD_CANCEL,           /* saga.cancel: stop the saga, compensate what it did */
    SG_CMD_APPROVE,          /* saga.approve: a step waiting for approval runs */
    SG_CMD_REJECT,           /* saga.reject: it does not, the saga compensates */
    SG_CMD_APPROVAL_TIMEOUT, /* step.approval_timeout: a gate's timer (a rejection) */
    SG_CMD_POISON,           /* could not be decoded: dead-lettered */
} sg_ctype_t;

#define SG_SAGA_ID_MAX 128
/* Calls of a saga: its steps and its groups' members (one row each). */
#define SG_MAX_STEPS 64
/* Members of one parallel group. */
#define SG_GROUP_MAX_MEMBERS 16
/* A control command's by and reason, in Unicode code points. */
#define SG_CONTROL_BY_MAX     128
#define SG_CONTROL_REASON_MAX 1024
/* on_behalf_of: the user a delegating principal (sagad-gateway) signs for,
 * as long as a keyring principal's name may be. */
#define SG_ON_BEHALF_OF_MAX 64
/* A step's approval.timeout_ms (and worker.approval_timeout_ms). */
#define SG_APPROVAL_TIMEOUT_MIN 1000
#define SG_APPROVAL_TIMEOUT_MAX 604800000

/* Decodes the envelope of a command message.  Never fails: a message that
 * cannot be decoded comes back as SG_CMD_POISON with err set. */
typedef struct sg_decoded_s {
    sg_ctype_t type;
    sg_json_t *doc;
    char saga_id[SG_SAGA_ID_MAX + 1]; /* "" when unknown */
    int step, attempt, generation;
    /* A control command's: who asks and why, into doc; saga.approve and
     * saga.reject name their step by index (step) or by name (step_name,
     * then step is -1). */
    const char *by, *reason, *step_name;
    /* on_behalf_of of a control command (a saga.start's is in doc). */
    const char *on_behalf_of;
    long nodes; /* values and member names parsed into doc (0 when none) */
    sg_err_t err;
    /* Who signed it (header sagad-auth, checked against the keyring at
     * intake, sg_trust.h): the principal, NULL when unsigned or when the
     * signature did not verify; then auth.code says why (NULL: no
     * signature at all). */
    const struct sg_principal_s *who;
    sg_err_t auth;
    /* Whom it is decided as: who's name, or the on_behalf_of of a
     * delegate's (sagad-gateway's) signature; NULL when who is. */
    const char *as;
} sg_decoded_t;

void sg_submit_decode(const void *payload, size_t len, const sg_json_limits_t *lim,
                      sg_decoded_t *out);

/* Every command of a saga is keyed by its saga_id: that keeps them in
 * order on one partition, which is what lets a control command be decided
 * with no call of its saga in flight.  A decoded command whose Kafka key
 * (key_len bytes, NULL or empty: none) is not its saga_id becomes
 * SG_CMD_POISON with input.key.mismatch (saga_id kept, for its dead
 * letter).  A command already poison is left as it is. */
void sg_submit_check_key(sg_decoded_t *dec, const void *key, size_t key_len);

/* One problem of a rejected submission. */
typedef void (*sg_problem_fn)(void *opaque, const char *path, const char *rule);

/* Validates a saga.start document against the contract and the registry:
 * calls fn once per problem; returns the number of problems. */
int sg_submit_validate(const sg_json_t *doc, const sg_registry_t *reg, sg_problem_fn fn,
                       void *opaque);

/* What a valid saga.start may do that its author likely did not mean:
 * calls fn once per warning (path, text); returns their number.  Today
 * one: a compensation whose args reference its own step's result, which
 * does not exist when that step timed out (its outcome unknown, the case
 * compensation is for), so the compensation would fail with
 * input.ref.unresolved and the saga with it.  docs/WORKER.md,
 * "References". */
int sg_submit_warnings(const sg_json_t *doc, sg_problem_fn fn, void *opaque);

/* A parallel group's policy (docs/WORKER.md, "Parallel groups"). */
typedef enum sg_group_policy_e {
    SG_GROUP_ALL_OR_NOTHING,
    SG_GROUP_BEST_EFFORT,
    SG_GROUP_FAIL_FAST,
} sg_group_policy_t;

/* The policy s names: 0 and *out set, or -1 when s names none. */
int sg_submit_policy_parse(const char *s, sg_group_policy_t *out)
    __attribute__((warn_unused_result));

/* True when an element of a saga.start's steps is a parallel group (an
 * object with a "parallel" member) rather than a call step. */
bool sg_submit_is_group(const sg_json_t *step);

/* Checks args against tool's args schema; returns problems found. */
int sg_submit_validate_args(const sg_tool_t *tool, const sg_json_t *args, const char *base,
                            sg_problem_fn fn, void *opaque);

/* A saga id's shape: 1 to 128 of [A-Za-z0-9._:-]. */
bool sg_saga_id_ok(const char *s);

/* The stored definition of a valid saga.start (caller frees the text). */
char *sg_submit_definition(const sg_json_t *doc);

/* A W3C trace context header (version-traceid-parentid-flags): 55 bytes
 * of lowercase hex and dashes, version not ff, neither id all zeros.  The
 * only traceparent sagad keeps and sends on: anything else a producer put
 * in the header (CR, LF, another header) is replaced. */
bool sg_traceparent_ok(const void *value, size_t len);

/* The idempotency key of (saga, step, phase, generation): stable across
 * retries, fresh after a replay bumps the generation. */
void sg_idem_key(char *out, size_t out_size, const char *saga_id, int step, bool compensate,
                 int generation);

#endif
