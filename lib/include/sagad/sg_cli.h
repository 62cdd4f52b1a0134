/* sg_cli: the front end every sagad binary shares.
 *
 * Global options (--config, --json, --print-config, --help, --version),
 * config loading (file, then SAGAD_* environment) and subcommand dispatch
 * from one table, from which --help is generated.  --config FILE and --json
 * are taken before or after the command alike.  Functions here return exit
 * codes; only main() exits. */
#ifndef SAGAD_CLI_H
#define SAGAD_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sagad/sg_config.h"

/* Exit codes shared by every binary (documented in docs/OPERATIONS.md). */
#define SG_EXIT_OK      0 /* done */
#define SG_EXIT_FAIL    1 /* the work failed, or nothing matched */
#define SG_EXIT_USAGE   2 /* bad usage or bad configuration */
#define SG_EXIT_REFUSED 3 /* refused for safety */
#define SG_EXIT_INFRA   4 /* PostgreSQL or Kafka unreachable or failing */

typedef struct sg_cli_cmd_s sg_cli_cmd_t;

typedef struct sg_cli_s {
    const char *prog;        /* e.g. "sagad-worker" */
    const char *component;   /* log component, e.g. "worker" */
    sg_config_t *cfg;        /* loaded and checked before a command runs */
    const char *config_path; /* --config or SAGAD_CONFIG, NULL when none */
    const sg_cli_cmd_t *cmd; /* the command being run */
    bool json;               /* --json came before the command */
} sg_cli_t;

/* One option of a subcommand.  The table ends with a {NULL} entry.  A
 * command that lists --json prints JSON with it (one object, or one per
 * line), given before or after the command; --json given to a command that
 * does not list it is refused.  The deprecated names of sg_cli_aliases
 * listed beside their new name are taken as it (with a note on stderr). */
typedef struct sg_cli_opt_s {
    const char *name; /* "--code" */
    const char *arg;  /* "CODE", or NULL for a flag */
    const char *help; /* one line */
} sg_cli_opt_t;

/* One subcommand.  One whose args is "" and opts NULL takes no arguments:
 * sg_cli_main refuses any ("takes no arguments", SG_EXIT_USAGE) before fn. */
struct sg_cli_cmd_s {
    const char *name;
    int (*fn)(sg_cli_t *cli, int argc, char **argv); /* argv[0] is the command */
    const char *args;                                /* e.g. "[--dry-run] ID..." */
    const char *help;                                /* one line */
    const sg_cli_opt_t *opts; /* NULL: the command parses its own arguments */
    const char *detail;       /* NULL, or paragraphs for `COMMAND --help` */
    bool offline;             /* runs without the config (cli->cfg NULL): printers of references */
};

typedef struct sg_cli_app_s {
    const char *prog;
    const char *component;
    const char *summary; /* one line under the usage */
    const sg_cli_cmd_t *cmds;
    size_t ncmds;
} sg_cli_app_t;

/* Parses argv, loads the config and runs the chosen command.  Returns the
 * process exit code.  `COMMAND --help` prints the command's help,
 * generated from its table entry, without loading the config. */
int sg_cli_main(const sg_cli_app_t *app, int argc, char **argv);

/* The main loop calls sg_cli_reload() every turn: after a SIGHUP
 * (sg_run_reload_requested, sagad/sg_run.h) it re-reads the reloadable
 * keys (log.level) from the config file and the environment, applies them
 * and logs the change.  A bad value is logged and ignored. */
void sg_cli_reload(sg_cli_t *cli);

/* Arguments of a command parsed against its opts table: options in any
 * order before, between or after the positional arguments ("--" ends the
 * options); an option that takes a value may repeat (every value is kept,
 * in order). */
typedef struct sg_cli_args_s {
    const sg_cli_opt_t *opts;
    size_t nopts;
    const char **vals; /* nopts lists of values, argc slots each */
    size_t *nvals;
    const char **pos; /* positional arguments */
    size_t npos;
    int argc;
} sg_cli_args_t;

/* Old option names kept working under their new one, NULL-terminated
 * pairs {old, new}: --operator is --by. */
extern const char *const sg_cli_aliases[][2];

/* Parses argv (argv[0] is the command) against cli->cmd->opts.  An
 * unknown option or a missing value is reported on stderr with the hint
 * `try COMMAND --help`; then -1 is returned (exit code SG_EXIT_USAGE) and
 * nothing needs freeing.  A --json given before the command counts as
 * given; an alias's value is its new name's. */
int sg_cli_parse(const sg_cli_t *cli, int argc, char **argv, sg_cli_args_t *args)
    __attribute__((warn_unused_result));
void sg_cli_args_free(sg_cli_args_t *args);
/* The last value of an option ("" for a flag given), NULL when absent. */
const char *sg_cli_opt(const sg_cli_args_t *args, const char *name);
/* Every value of an option, in order; the count. */
size_t sg_cli_opt_all(const sg_cli_args_t *args, const char *name, const char *const **vals);

/* Writes `prog COMMAND --help`: usage, summary, options, detail. */
void sg_cli_cmd_help(const char *prog, const sg_cli_cmd_t *cmd, FILE *out);

/* The `migrate` command every binary offers, and its options (--json:
 * {"from": N, "to": M}) for a table that lists them. */
int sg_cli_cmd_migrate(sg_cli_t *cli, int argc, char **argv);
extern const sg_cli_opt_t sg_cli_migrate_opts[];

#endif
