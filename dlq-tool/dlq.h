/* dlq-tool internals: one dlq_cmd_<verb>.c per command, dlq-tool's own
 * helpers in dlq_common.c.  What it does as sagactl does (options,
 * messages, the connection) is lib/cli's sg_cmd; what it asks PostgreSQL
 * and the ledger's writes are lib/ops's (sg_dlq_query.h), the functions
 * sagad-gateway calls too.  Exit codes are sg_cli's SG_EXIT_* (0 ok, 1
 * nothing matched, 2 usage/config, 3 refused for safety, 4
 * infrastructure).  Data goes to stdout, diagnostics to stderr. */
#ifndef SAGAD_DLQ_H
#define SAGAD_DLQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_cli.h"
#include "sagad/sg_cmd.h"
#include "sagad/sg_dlq_query.h"
#include "sagad/sg_json.h"
#include "sagad/sg_pg.h"

/* A command of dlq-tool: its parsed arguments, --json and, once
 * connected, its connection as the operator role. */
typedef sg_cmd_t dlq_t;

/* Parses the command's arguments; connects to PostgreSQL when connect.
 * Returns SG_EXIT_OK, or the exit code after saying why on stderr;
 * sg_cmd_close(d, rc) in every case. */
int dlq_open(dlq_t *d, sg_cli_t *cli, int argc, char **argv, bool connect)
    __attribute__((warn_unused_result));
/* One more connection as dlq-tool's (a parallel replay's): NULL with err
 * when PostgreSQL cannot be reached. */
sg_pg_t *dlq_connect(const dlq_t *d, sg_err_t *err) __attribute__((warn_unused_result));

/* The filter options shared by list, groups and replay (--code, --class,
 * --saga, --tool, --step, --since, --until, --status) into f, with
 * default_status (may be NULL) when --status is absent; *any says whether
 * one was given.  -1 after naming a bad one (the values' rules are the
 * query's, sg_dlq_query.h). */
int dlq_filter(const dlq_t *d, sg_dlq_filter_t *f, const char *default_status, bool *any);

/* The positional arguments as dead-letter IDs (malloc'd, free it): -1
 * after naming one that is not. */
int dlq_ids(const dlq_t *d, int64_t **ids);
/* The one dead-letter ID of show and edit; -1 after saying why. */
int dlq_one_id(const dlq_t *d, int64_t *id);

/* Who acts, as the ledger records it: sg_cmd_by, else "unknown" (the
 * session's login is recorded beside it in every case). */
const char *dlq_by(const dlq_t *d);

/* Commands. */
int dlq_cmd_list(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_groups(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_show(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_stats(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_replay(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_edit(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_discard(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_saga(sg_cli_t *cli, int argc, char **argv);
int dlq_cmd_tail(sg_cli_t *cli, int argc, char **argv);

#endif
