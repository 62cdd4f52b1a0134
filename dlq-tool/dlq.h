/* dlq-tool internals: one dlq_cmd_<verb>.c per command, shared helpers in
 * dlq_common.c.  Exit codes are sg_cli's SG_EXIT_* (0 ok, 1 nothing
 * matched, 2 usage/config, 3 refused for safety, 4 infrastructure).
 * Data goes to stdout, diagnostics to stderr. */
#ifndef SAGAD_DLQ_H
#define SAGAD_DLQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_cli.h"
#include "sagad/sg_json.h"
#include "sagad/sg_pg.h"

/* What every command holds: its parsed arguments and, once connected,
 * the PostgreSQL connection. */
typedef struct dlq_s {
    sg_cli_t *cli;
    sg_cli_args_t args;
    sg_pg_t *pg;
} dlq_t;

/* Parses the command's arguments; connects to PostgreSQL when connect.
 * Returns SG_EXIT_OK, or the exit code after saying why on stderr. */
int dlq_open(dlq_t *d, sg_cli_t *cli, int argc, char **argv, bool connect);
/* A connection of dlq-tool's own (what dlq_open makes): NULL with err
 * filled when PostgreSQL cannot be reached. */
sg_pg_t *dlq_connect(const dlq_t *d, sg_err_t *err) __attribute__((warn_unused_result));
/* Frees what dlq_open made and returns rc. */
int dlq_close(dlq_t *d, int rc);

/* Prints "dlq-tool VERB: message" on stderr. */
void dlq_warn(const dlq_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* dlq_warn for a PostgreSQL failure; returns SG_EXIT_INFRA. */
int dlq_pg_fail(const dlq_t *d, const char *what, const sg_err_t *err);

/* Runs a parameterised statement: SG_EXIT_OK, or after saying why on
 * stderr the exit code (SG_EXIT_INFRA, or SG_EXIT_USAGE for a bad value). */
int dlq_query(dlq_t *d, const char *sql, int n, const char *const *params, sg_pg_res_t **res)
    __attribute__((warn_unused_result));

/* The filter options shared by list, stats and replay (--code, --class,
 * --saga, --tool, --step, --since, --until, --status) as a WHERE clause on
 * dead_letters d with text parameters. */
#define DLQ_MAX_PARAMS 16
typedef struct dlq_filter_s {
    char where[1024];
    const char *params[DLQ_MAX_PARAMS];
    char own[DLQ_MAX_PARAMS][64]; /* parameters the filter made itself */
    int n;
    bool any; /* a filter option was given */
} dlq_filter_t;

/* Builds the filter; default_status (may be NULL) applies when --status
 * is absent.  A bad value is reported (option, value, rule): -1. */
int dlq_filter_build(dlq_t *d, dlq_filter_t *f, const char *default_status);
/* Appends a parameter; returns its $ number.  value is not copied. */
int dlq_filter_param(dlq_filter_t *f, const char *value);
/* ANDs a condition to the WHERE clause; fmt has one %d, the $ number of
 * param. */
void dlq_filter_add(dlq_filter_t *f, const char *fmt, int param);

/* Parses a positive integer option (absent: def).  -1 on a bad value. */
int dlq_opt_long(dlq_t *d, const char *name, long def, long max, long *out);

/* Checks dead-letter ids: 0, or -1 (reported) when one is not a number. */
int dlq_ids_check(dlq_t *d, const char *const *vals, size_t n);
/* The one dead-letter ID a command takes (show, edit), or NULL after
 * saying why on stderr. */
const char *dlq_one_id(dlq_t *d);

/* The operator's name: --operator, else $USER, else "unknown". */
const char *dlq_operator(const dlq_t *d);

/* Prints the rows of res as an aligned table with a header line; NULL
 * cells as "-".  maxw caps every column (longer text is cut with "~"). */
void dlq_table(const sg_pg_res_t *res, const char *const *header, int ncols, int maxw);

/* Commands. */
int dlq_cmd_list(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_show(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_stats(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_replay(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_edit(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_discard(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_saga(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_tail(sg_cli_t *cli, int argc, char **argv);

#endif
