/* sg_cmd: what a command of the operator's command lines (sagactl,
 * dlq-tool, sagad-relay status) does the same way: parse its options,
 * read their values by the same rules, say what is wrong in the same
 * words ("PROG COMMAND: --option VALUE: rule"), connect, turn a failed
 * query into an exit code, print JSON lines, and name the person acting.
 * One family of commands, so one implementation of each. */
#ifndef SAGAD_CMD_H
#define SAGAD_CMD_H

#include <stdbool.h>
#include <stdint.h>

#include "sagad/sg_cli.h"
#include "sagad/sg_err.h"
#include "sagad/sg_json.h"
#include "sagad/sg_ops.h"
#include "sagad/sg_pg.h"

/* A running command: its parsed arguments and, once connected, its
 * PostgreSQL connection. */
typedef struct sg_cmd_s {
    sg_cli_t *cli;
    sg_cli_args_t args;
    sg_pg_t *pg;
    bool json; /* --json, before or after the command */
} sg_cmd_t;

/* Parses the command's arguments into c.  SG_EXIT_OK, or SG_EXIT_USAGE
 * after saying why (sg_cli_parse).  sg_cmd_close(c) in every case. */
int sg_cmd_open(sg_cmd_t *c, sg_cli_t *cli, int argc, char **argv)
    __attribute__((warn_unused_result));
/* A connection of cfg's pg.* keys for role (what it is used as), three
 * attempts: NULL with err when PostgreSQL cannot be reached. */
sg_pg_t *sg_cmd_pg_new(const sg_cmd_t *c, const sg_config_t *cfg, sg_pg_role_t role, sg_err_t *err)
    __attribute__((warn_unused_result));
/* c->pg from sg_cmd_pg_new: SG_EXIT_OK, or SG_EXIT_INFRA after saying why. */
int sg_cmd_connect(sg_cmd_t *c, const sg_config_t *cfg, sg_pg_role_t role)
    __attribute__((warn_unused_result));
/* Frees what open and connect made; returns rc. */
int sg_cmd_close(sg_cmd_t *c, int rc);

/* "PROG COMMAND: message" on stderr. */
void sg_cmd_warn(const sg_cmd_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Says what failed and returns its exit code: a filter value an operator
 * query refused (input.schema.invalid, "FIELD VALUE: rule") as the option
 * --FIELD, SG_EXIT_USAGE; a value PostgreSQL refused (pg.data),
 * SG_EXIT_USAGE; anything else ("what: message [code]"), SG_EXIT_INFRA. */
int sg_cmd_fail(const sg_cmd_t *c, const char *what, const sg_err_t *err);

/* The one positional argument, or NULL after saying which is needed
 * (what: "saga ID"). */
const char *sg_cmd_one_arg(const sg_cmd_t *c, const char *what);
/* -1 after saying so when positional arguments were given. */
int sg_cmd_no_args(const sg_cmd_t *c);

/* Option values, each -1 after naming the option, the value and the
 * rule; the default when the option is absent. */
int sg_cmd_opt_long(const sg_cmd_t *c, const char *name, long def, long max, long *out);
/* A duration (sg_ops_duration_ms: 500ms, 90s, 30m, 2h, 7d). */
int sg_cmd_opt_duration(const sg_cmd_t *c, const char *name, int64_t def_ms, int64_t *ms);
/* A moment: a duration is an age, anything else a timestamp (sg_ops_when_t;
 * the text is borrowed from argv). */
int sg_cmd_opt_when(const sg_cmd_t *c, const char *name, sg_ops_when_t *w);

/* Who is acting, as the ledgers and the control commands record it:
 * --by (its deprecated name --operator too), else $USER, else the login
 * name; NULL when none is known. */
const char *sg_cmd_by(const sg_cmd_t *c);

/* After a page of rows with a next page: which --before gives it (key:
 * the rows' member that --before takes), on stderr. */
void sg_cmd_more(const sg_json_t *rows, const char *key);

/* doc as one line of compact JSON on stdout. */
void sg_cmd_print_json(const sg_json_t *doc);

#endif
