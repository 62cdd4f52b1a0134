/* sg_err: the classified error every sagad decision is made from.
 *
 * An error carries a stable code ("area.sub.detail", registered in
 * schemas/error_codes.json), a class that tells the runtime what to do
 * (docs/ARCHITECTURE.md), and a human message.  Functions that can fail take an
 * sg_err_t * and fill it; a NULL err is allowed and discards the detail. */
#ifndef SAGAD_ERR_H
#define SAGAD_ERR_H

#include <stdbool.h>
#include <stddef.h>

typedef enum sg_errclass_e {
    SG_ERRCLASS_NONE = 0, /* no error */
    SG_ERRCLASS_TRANSIENT,
    SG_ERRCLASS_THROTTLED,
    SG_ERRCLASS_TIMEOUT,
    SG_ERRCLASS_PERMANENT,
    SG_ERRCLASS_POISON,
} sg_errclass_t;

typedef struct sg_err_s {
    sg_errclass_t cls;
    bool retriable; /* same call may succeed if repeated */
    bool fatal;     /* the handle that produced it is unusable; stop and drain */
    char code[64];
    char message[512];
} sg_err_t;

/* Resets err to "no error".  err may be NULL. */
void sg_err_clear(sg_err_t *err);

/* Fills err (if not NULL) and returns -1, so callers can write
 * `return sg_err_set(err, ...);`.  retriable follows from the class. */
int sg_err_set(sg_err_t *err, sg_errclass_t cls, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefixes err->message with "what: " to say which step failed. */
void sg_err_prefix(sg_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "transient", "throttled", ...; "none" for SG_ERRCLASS_NONE. */
const char *sg_errclass_name(sg_errclass_t cls);

/* The default agent_action of code (schemas/error_codes.json): exact
 * code, then its HTTP status family (tool.http.{5xx}), then area.sub.*;
 * NULL when the registry has none.  The text is static. */
const char *sg_err_agent_action(const char *code);
/* The registry's entry of code as JSON text (caller frees): code, class,
 * retryable (transient, timeout and throttled are), cause, action,
 * agent_action, and family when a family's entry answered.  NULL when
 * the registry knows neither the code nor a family of it. */
char *sg_err_describe(const char *code);

/* Parses a class name; returns -1 when unknown. */
int sg_errclass_parse(const char *name, sg_errclass_t *out);

#endif
