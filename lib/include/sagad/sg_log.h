/* sg_log: one log stream, JSON lines on stderr.
 *
 * Every line has ts, level, component and msg; lines about a message add
 * where it came from (saga_id, step, attempt, error_code, topic, partition,
 * offset, and trace_id and span_id when tracing is on).  The level is checked in the macro, so a
 * filtered call costs one comparison and never formats its arguments. */
#ifndef SAGAD_LOG_H
#define SAGAD_LOG_H

#include <stdint.h>
#include <stdio.h>

typedef enum sg_log_level_e {
    SG_LOG_ERROR = 0,
    SG_LOG_WARN,
    SG_LOG_INFO,
    SG_LOG_DEBUG,
} sg_log_level_t;

/* Where a line comes from.  Unset fields (NULL, or -1 for numbers) are not
 * printed.  Initialise with SG_LOG_CTX_INIT. */
typedef struct sg_log_ctx_s {
    const char *saga_id;
    const char *step;
    int attempt;
    const char *error_code;
    const char *topic;
    int32_t partition;
    int64_t offset;
    const char *trace_id, *span_id; /* W3C trace context, hex (tracing on) */
    const char *traceparent;        /* or both from a W3C traceparent */
} sg_log_ctx_t;

#define SG_LOG_CTX_INIT                                                                            \
    {                                                                                              \
        NULL, NULL, -1, NULL, NULL, -1, -1, NULL, NULL, NULL                                       \
    }

extern volatile sg_log_level_t sg_log_level;

/* Sets the component name written on every line (copied) and the level. */
void sg_log_init(const char *component, sg_log_level_t level);

/* Redirects output (tests); NULL restores stderr. */
void sg_log_set_stream(FILE *fp);

/* Parses "error|warn|info|debug"; returns -1 when unknown. */
int sg_log_level_parse(const char *name, sg_log_level_t *out);
const char *sg_log_level_name(sg_log_level_t level);

/* Writes one line.  ctx may be NULL.  Use the macros below instead. */
void sg_log_write(sg_log_level_t level, const sg_log_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes one line with ctx's fields and key holding json (a JSON value's
 * text, masked like every field), for a record a person reads whole (a
 * dead letter's envelope).  json must be valid JSON; when the line cannot
 * hold it, key says so instead. */
void sg_log_json(sg_log_level_t level, const sg_log_ctx_t *ctx, const char *msg, const char *key,
                 const char *json);

/* Writes one line with extra string fields given as key, value pairs ending
 * with NULL: sg_log_kv(SG_LOG_INFO, "ready", "port", "9464", NULL). */
void sg_log_kv(sg_log_level_t level, const char *msg, ...) __attribute__((sentinel));

#define sg_log(level, ctx, ...)                                                                    \
    do {                                                                                           \
        if ((level) <= sg_log_level)                                                               \
            sg_log_write((level), (ctx), __VA_ARGS__);                                             \
    } while (0)

#define sg_log_error(...) sg_log(SG_LOG_ERROR, NULL, __VA_ARGS__)
#define sg_log_warn(...)  sg_log(SG_LOG_WARN, NULL, __VA_ARGS__)
#define sg_log_info(...)  sg_log(SG_LOG_INFO, NULL, __VA_ARGS__)
#define sg_log_debug(...) sg_log(SG_LOG_DEBUG, NULL, __VA_ARGS__)

/* Appends s to out as the inside of a JSON string (no quotes), escaping
 * quotes, backslashes and control bytes.  Returns bytes written, always
 * NUL-terminates when out_size > 0, truncates safely: never inside an
 * escape or a UTF-8 sequence. */
size_t sg_log_json_escape(char *out, size_t out_size, const char *s);

#endif
