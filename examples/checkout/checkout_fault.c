/* Fault specifications: from --fault SPEC and from POST /_admin/faults,
 * checked by one function so both accept exactly the same faults; and the
 * definitions the other modules share (the endpoints, which statuses are
 * retriable, the error body). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkout.h"

/* Indices: 0 reserve, 1 release, 2 charge, 3 refund, 4 book, 5 cancel,
 * 6 email, 7 sms, 8 webhook (the notification channels of a parallel
 * group). */
const checkout_endpoint_t checkout_endpoints[CHECKOUT_NPATHS] = {
    {"/inventory/reserve", "inv", 201, "reservation_id", -1, false, NULL, NULL, NULL},
    {"/inventory/release", "rel", 200, "release_id", 0, true, "reservation_id",
     "unknown_reservation", "reservation_already_released"},
    {"/payment/charge", "pay", 201, "charge_id", -1, false, NULL, NULL, NULL},
    {"/payment/refund", "ref", 200, "refund_id", 2, true, "charge_id", "unknown_charge",
     "charge_already_refunded"},
    {"/shipping/book", "shp", 201, "booking_id", 0, false, "reservation_id", "unknown_reservation",
     "unknown_reservation"},
    {"/shipping/cancel", "cnl", 200, "cancellation_id", 4, true, "booking_id", "unknown_booking",
     "booking_already_cancelled"},
    {"/email/send", "eml", 201, "message_id", -1, false, NULL, NULL, NULL},
    {"/sms/send", "sms", 201, "message_id", -1, false, NULL, NULL, NULL},
    {"/webhook/post", "hook", 201, "delivery_id", -1, false, NULL, NULL, NULL},
};

int checkout_path_index(const char *path)
{
    for (int i = 0; i < CHECKOUT_NPATHS; i++)
        if (strcmp(path, checkout_endpoints[i].path) == 0)
            return i;
    return -1;
}

bool checkout_status_retriable(int status)
{
    return status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599);
}

char *checkout_error_body(const char *code, bool retriable, const char *fmt, ...)
{
    sg_json_t *o = sg_json_new_object();
    char msg[512];
    char *text;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sg_json_add_str(o, "error_code", code);
    sg_json_add_bool(o, "retriable", retriable);
    sg_json_add_str(o, "message", msg);
    text = sg_json_print(o);
    sg_json_destroy(o);
    return text;
}

static int path_error(const char *where, const char *path, char *errstr, size_t errstr_size)
{
    snprintf(errstr, errstr_size, "%s: unknown path \"%s\": must be one of", where, path);
    for (int i = 0; i < CHECKOUT_NPATHS; i++) {
        size_t n = strlen(errstr);

        snprintf(errstr + n, errstr_size - n, "%s %s", i ? "," : "", checkout_endpoints[i].path);
    }
    return -1;
}

/* The rules both parsers share.  where prefixes field names: "" or "$.". */
static int fault_check(const checkout_fault_t *f, const char *where, char *errstr,
                       size_t errstr_size)
{
    const char *field = NULL, *rule = NULL;

    if (f->status < 100 || f->status > 599)
        field = "status", rule = "must be an HTTP status 100..599";
    else if (f->times < 0)
        field = "times", rule = "must be 0 (for ever) or more";
    else if (f->delay_ms < 0 || f->delay_ms > 3600000)
        field = "delay_ms", rule = "must be 0..3600000";
    else if (f->body_bytes < 0 || f->body_bytes == 1 || f->body_bytes > ((int64_t)1 << 40))
        field = "body_bytes", rule = "must be 0 (off) or 2..2^40 (a JSON string needs its quotes)";
    for (const char *p = f->retry_after; !field && *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            field = "retry_after", rule = "must be printable ASCII (it is sent as a header)";
    if (!field)
        return 0;
    snprintf(errstr, errstr_size, "%s%s: %s", where, field, rule);
    return -1;
}

static int parse_int(const char *s, size_t len, int64_t *out)
{
    char buf[32], *end;
    long long v;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (buf[0] < '0' || buf[0] > '9')
        return -1;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* The options after STATUS[xTIMES].  A value runs up to the next comma
 * that starts another option, so retry_after may hold an HTTP-date
 * ("Wed, 21 Oct 2015 07:28:00 GMT"). */
static const char *const spec_opts[] = {"retry_after=", "delay_ms=", "body_bytes="};

static size_t opt_value_len(const char *v)
{
    const char *p = v;

    for (; (p = strchr(p, ',')) != NULL; p++)
        for (size_t i = 0; i < sizeof(spec_opts) / sizeof(spec_opts[0]); i++)
            if (strncmp(p + 1, spec_opts[i], strlen(spec_opts[i])) == 0)
                return (size_t)(p - v);
    return strlen(v);
}

static int parse_opts(const char *p, checkout_fault_t *f, char *errstr, size_t errstr_size)
{
    while (*p == ',') {
        size_t i, n, name_len;

        p++;
        for (i = 0; i < 3 && strncmp(p, spec_opts[i], strlen(spec_opts[i])) != 0; i++)
            ;
        if (i == 3) {
            snprintf(
                errstr, errstr_size,
                "unknown option at \"%s\": expected retry_after=, delay_ms= or body_bytes=", p);
            return -1;
        }
        name_len = strlen(spec_opts[i]);
        p += name_len;
        n = opt_value_len(p);
        if (i == 0) {
            if (n >= sizeof(f->retry_after)) {
                snprintf(errstr, errstr_size, "retry_after: longer than %zu bytes",
                         sizeof(f->retry_after) - 1);
                return -1;
            }
            memcpy(f->retry_after, p, n);
            f->retry_after[n] = '\0';
        } else if (parse_int(p, n, i == 1 ? &f->delay_ms : &f->body_bytes) < 0) {
            snprintf(errstr, errstr_size, "%.*s: must be a whole number", (int)name_len - 1,
                     spec_opts[i]);
            return -1;
        }
        p += n;
    }
    return 0;
}

int checkout_fault_parse(const char *spec, int *path_idx, checkout_fault_t *f, char *errstr,
                         size_t errstr_size)
{
    const char *eq = strchr(spec, '='), *p;
    char path[256];
    int64_t status;
    size_t n;

    memset(f, 0, sizeof(*f));
    if (!eq || (size_t)(eq - spec) >= sizeof(path)) {
        snprintf(errstr, errstr_size, "\"%s\": expected PATH=STATUS[xTIMES][,option=value]...",
                 spec);
        return -1;
    }
    memcpy(path, spec, (size_t)(eq - spec));
    path[eq - spec] = '\0';
    if ((*path_idx = checkout_path_index(path)) < 0)
        return path_error("path", path, errstr, errstr_size);
    p = eq + 1;
    n = strspn(p, "0123456789");
    if (parse_int(p, n, &status) < 0 || status > 999) {
        snprintf(errstr, errstr_size, "status: expected an HTTP status after \"%s=\"", path);
        return -1;
    }
    f->status = (int)status;
    p += n;
    if (*p == 'x') {
        n = strspn(++p, "0123456789");
        if (parse_int(p, n, &f->times) < 0 || f->times == 0) {
            snprintf(errstr, errstr_size, "times: expected a count of 1 or more after \"x\"");
            return -1;
        }
        p += n;
    }
    if (*p && *p != ',') {
        snprintf(errstr, errstr_size, "unexpected \"%s\" after the status", p);
        return -1;
    }
    if (parse_opts(p, f, errstr, errstr_size) < 0)
        return -1;
    return fault_check(f, "", errstr, errstr_size);
}

/* retry_after may be given as a string (verbatim) or a whole number. */
static int retry_after_from_json(const sg_json_t *obj, checkout_fault_t *f, char *errstr,
                                 size_t errstr_size)
{
    const sg_json_t *v = sg_json_member(obj, "retry_after");
    const char *s;
    double d;

    if (!v || sg_json_is_null(v))
        return 0;
    if ((s = sg_json_string(v)) != NULL) {
        if (strlen(s) >= sizeof(f->retry_after)) {
            snprintf(errstr, errstr_size, "$.retry_after: longer than %zu bytes",
                     sizeof(f->retry_after) - 1);
            return -1;
        }
        snprintf(f->retry_after, sizeof(f->retry_after), "%s", s);
        return 0;
    }
    if (sg_json_number(v, &d) && d >= 0 && d <= 1e9 && d == (double)(int64_t)d) {
        snprintf(f->retry_after, sizeof(f->retry_after), "%lld", (long long)d);
        return 0;
    }
    snprintf(errstr, errstr_size, "$.retry_after: must be a string or a whole number of seconds");
    return -1;
}

int checkout_fault_from_json(const sg_json_t *obj, int *path_idx, checkout_fault_t *f, char *errstr,
                             size_t errstr_size)
{
    const char *path;
    int64_t status = 0;
    sg_err_t err;

    memset(f, 0, sizeof(*f));
    if (!sg_json_is_object(obj)) {
        snprintf(errstr, errstr_size, "$: must be an object");
        return -1;
    }
    if (sg_json_get_str(obj, "$", "path", true, &path, &err) < 0 ||
        sg_json_get_int(obj, "$", "status", true, &status, &err) < 0 ||
        sg_json_get_int(obj, "$", "times", false, &f->times, &err) < 0 ||
        sg_json_get_int(obj, "$", "delay_ms", false, &f->delay_ms, &err) < 0 ||
        sg_json_get_int(obj, "$", "body_bytes", false, &f->body_bytes, &err) < 0) {
        snprintf(errstr, errstr_size, "%s", err.message);
        return -1;
    }
    if ((*path_idx = checkout_path_index(path)) < 0)
        return path_error("$.path", path, errstr, errstr_size);
    f->status = status >= 0 && status <= 999 ? (int)status : 0;
    if (retry_after_from_json(obj, f, errstr, errstr_size) < 0)
        return -1;
    return fault_check(f, "$.", errstr, errstr_size);
}

sg_json_t *checkout_fault_to_json(int path_idx, const checkout_fault_t *f)
{
    sg_json_t *o = sg_json_new_object();

    sg_json_add_str(o, "path", checkout_endpoints[path_idx].path);
    sg_json_add_int(o, "status", f->status);
    sg_json_add_int(o, "times", f->times);
    if (f->retry_after[0])
        sg_json_add_str(o, "retry_after", f->retry_after);
    else
        sg_json_add_null(o, "retry_after");
    sg_json_add_int(o, "delay_ms", f->delay_ms);
    sg_json_add_int(o, "body_bytes", f->body_bytes);
    return o;
}
