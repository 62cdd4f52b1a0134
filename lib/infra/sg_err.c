#include "sagad/sg_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sagad/sg_text.h"

static const char *const class_names[] = {
    [SG_ERRCLASS_NONE] = "none",           [SG_ERRCLASS_TRANSIENT] = "transient",
    [SG_ERRCLASS_THROTTLED] = "throttled", [SG_ERRCLASS_TIMEOUT] = "timeout",
    [SG_ERRCLASS_PERMANENT] = "permanent", [SG_ERRCLASS_POISON] = "poison",
};

void sg_err_clear(sg_err_t *err)
{
    if (!err)
        return;
    memset(err, 0, sizeof(*err));
}

int sg_err_set(sg_err_t *err, sg_errclass_t cls, const char *code, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return -1;
    err->cls = cls;
    err->retriable =
        cls == SG_ERRCLASS_TRANSIENT || cls == SG_ERRCLASS_THROTTLED || cls == SG_ERRCLASS_TIMEOUT;
    err->fatal = false;
    snprintf(err->code, sizeof(err->code), "%s", code);
    va_start(ap, fmt);
    /* Cut to fit, but never inside a UTF-8 character: the message is
     * stored (attempts, dead letters), and PostgreSQL refuses half of one. */
    if (vsnprintf(err->message, sizeof(err->message), fmt, ap) >= (int)sizeof(err->message))
        err->message[sg_utf8_cut(err->message, sizeof(err->message))] = '\0';
    va_end(ap);
    return -1;
}

void sg_err_prefix(sg_err_t *err, const char *fmt, ...)
{
    char prefix[256], old[sizeof(err->message)];
    va_list ap;

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof(old));
    snprintf(err->message, sizeof(err->message), "%s: %s", prefix, old);
}

const char *sg_errclass_name(sg_errclass_t cls)
{
    if ((unsigned)cls >= sizeof(class_names) / sizeof(class_names[0]))
        return "unknown";
    return class_names[cls];
}

int sg_errclass_parse(const char *name, sg_errclass_t *out)
{
    for (size_t i = 0; i < sizeof(class_names) / sizeof(class_names[0]); i++) {
        if (strcmp(name, class_names[i]) == 0) {
            *out = (sg_errclass_t)i;
            return 0;
        }
    }
    return -1;
}
