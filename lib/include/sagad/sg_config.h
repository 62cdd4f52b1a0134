/* sg_config: one table of configuration keys.
 *
 * Each key has a type, a default written as text (parsed by the same code
 * as user input), a validator and one line of documentation.  Values come
 * from the defaults, then a config file (`key = value` lines), then
 * SAGAD_* environment variables; the last one wins.  Keys under `kafka.`
 * are not in the table: they pass straight to librdkafka. */
#ifndef SAGAD_CONFIG_H
#define SAGAD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum sg_config_type_e {
    SG_CONFIG_STR,
    SG_CONFIG_INT,
    SG_CONFIG_BOOL,
    SG_CONFIG_ENUM,
    SG_CONFIG_RATIO, /* a decimal number from 0 to 1 */
} sg_config_type_t;

#define SG_CONFIG_SECRET     0x1 /* value masked in every output */
#define SG_CONFIG_RELOADABLE 0x2 /* applied on SIGHUP without restart */
#define SG_CONFIG_EMPTY_OK   0x4 /* a string that may be empty (empty: unset, off) */

typedef struct sg_config_key_s {
    const char *key;
    sg_config_type_t type;
    const char *def;     /* default as text; NULL means required */
    int64_t min, max;    /* SG_CONFIG_INT bounds, inclusive */
    const char *choices; /* SG_CONFIG_ENUM: "a|b|c" */
    unsigned flags;
    const char *doc;
} sg_config_key_t;

typedef struct sg_config_s sg_config_t;

/* The key table, for docs generation and tests. */
const sg_config_key_t *sg_config_table(size_t *count);

/* A config holding the defaults.  Never NULL (aborts on OOM like all
 * allocation in sagad). */
sg_config_t *sg_config_new(void);
void sg_config_destroy(sg_config_t *cfg);

/* Sets one key from text.  origin says where the value came from
 * ("file x.conf:3", "env SAGAD_X") and is copied.  On a bad value returns -1
 * and writes one line naming the key, the value and the rule to errstr; the
 * config is unchanged. */
int sg_config_set(sg_config_t *cfg, const char *key, const char *value, const char *origin,
                  char *errstr, size_t errstr_size) __attribute__((warn_unused_result));

/* Loads `key = value` lines (# comments, blank lines, optional double
 * quotes around the value).  Unknown keys are errors. */
int sg_config_load_file(sg_config_t *cfg, const char *path, char *errstr, size_t errstr_size)
    __attribute__((warn_unused_result));

/* Applies SAGAD_* variables of envp (NULL-terminated), after the
 * OpenTelemetry SDKs' OTEL_* variables that have an otel.* key
 * (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_ENDPOINT, ...), so a SAGAD_ one
 * wins.  SAGAD_KAFKA_X_Y
 * becomes kafka.x.y (a double underscore stands for a literal '_').
 * SAGAD_CONFIG, SAGAD_LOCAL_* and SAGAD_TEST_* are not config keys and are
 * skipped; other unknown SAGAD_ names are reported as errors, because a
 * misspelt variable silently ignored is worse than a refused start. */
int sg_config_load_env(sg_config_t *cfg, char *const *envp, char *errstr, size_t errstr_size)
    __attribute__((warn_unused_result));

/* SIGHUP: applies only the reloadable keys of the file (path may be NULL)
 * and of envp, in that order; other lines and variables are skipped
 * unchecked.  On a bad value returns -1 with errstr; earlier keys stay set. */
int sg_config_load_reloadable(sg_config_t *cfg, const char *path, char *const *envp, char *errstr,
                              size_t errstr_size) __attribute__((warn_unused_result));

/* Checks that every required key has a value. */
int sg_config_check(const sg_config_t *cfg, char *errstr, size_t errstr_size)
    __attribute__((warn_unused_result));

/* Typed access.  Asking for a key not in the table, or with the wrong type,
 * is a programming error and aborts. */
const char *sg_config_str(const sg_config_t *cfg, const char *key);
int64_t sg_config_int(const sg_config_t *cfg, const char *key);
bool sg_config_bool(const sg_config_t *cfg, const char *key);
double sg_config_ratio(const sg_config_t *cfg, const char *key);

/* Calls fn for every kafka.* key, with the "kafka." prefix removed. */
void sg_config_foreach_kafka(const sg_config_t *cfg,
                             void (*fn)(void *opaque, const char *key, const char *value),
                             void *opaque);

/* Writes the effective config, one `key = value  # origin` line per key,
 * with secrets masked. */
void sg_config_print(const sg_config_t *cfg, FILE *out);

/* Writes the Markdown reference of every key (docs/CONFIGURATION.md). */
void sg_config_write_reference(FILE *out);

/* Writes a config file of every key, each commented out at its default
 * with its doc line above (deploy/sagad.sample.conf). */
void sg_config_write_sample(FILE *out);

/* The environment variable name of a table key: "pg.dsn" -> "SAGAD_PG_DSN". */
void sg_config_env_name(const char *key, char *out, size_t out_size);

#endif
