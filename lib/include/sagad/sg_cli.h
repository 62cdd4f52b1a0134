/* sg_cli: the front end every sagad binary shares.
 *
 * Global options (--config, --print-config, --help, --version), config
 * loading (file, then SAGAD_* environment) and subcommand dispatch from one
 * table, from which --help is generated.  Functions here return exit codes;
 * only main() exits. */
#ifndef SAGAD_CLI_H
#define SAGAD_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_config.h"

/* Exit codes shared by every binary (documented in README.md). */
#define SG_EXIT_OK      0 /* done */
#define SG_EXIT_FAIL    1 /* the work failed, or nothing matched */
#define SG_EXIT_USAGE   2 /* bad usage or bad configuration */
#define SG_EXIT_REFUSED 3 /* refused for safety */
#define SG_EXIT_INFRA   4 /* PostgreSQL or Kafka unreachable or failing */

typedef struct sg_cli_s {
    const char *prog;        /* e.g. "sagad-worker" */
    const char *component;   /* log component, e.g. "worker" */
    sg_config_t *cfg;        /* loaded and checked before a command runs */
    const char *config_path; /* --config or SAGAD_CONFIG, NULL when none */
} sg_cli_t;

typedef struct sg_cli_cmd_s {
    const char *name;
    int (*fn)(sg_cli_t *cli, int argc, char **argv); /* argv[0] is the command */
    const char *args;                                /* e.g. "[--dry-run] ID..." */
    const char *help;                                /* one line */
} sg_cli_cmd_t;

typedef struct sg_cli_app_s {
    const char *prog;
    const char *component;
    const char *summary; /* one line under the usage */
    const sg_cli_cmd_t *cmds;
    size_t ncmds;
} sg_cli_app_t;

/* Parses argv, loads the config and runs the chosen command.  Returns the
 * process exit code. */
int sg_cli_main(const sg_cli_app_t *app, int argc, char **argv);

/* Lifecycle of the long-running `run` commands.  sg_cli_trap_signals()
 * makes the first SIGTERM/SIGINT clear sg_cli_running (stop taking work,
 * drain, exit 0) and the second also set sg_cli_stop_now (abandon what is
 * in flight, exit now); SIGPIPE is ignored. */
extern volatile sig_atomic_t sg_cli_running;
extern volatile sig_atomic_t sg_cli_stop_now;
void sg_cli_trap_signals(void);

/* SIGHUP sets sg_cli_reload_requested (sg_cli_trap_signals installs it);
 * the main loop calls sg_cli_reload() every turn, which then re-reads the
 * reloadable keys (log.level) from the config file and the environment,
 * applies them and logs the change.  A bad value is logged and ignored. */
extern volatile sig_atomic_t sg_cli_reload_requested;
void sg_cli_reload(sg_cli_t *cli);

/* Milliseconds on a monotonic clock, for deadlines and latencies. */
uint64_t sg_cli_now_ms(void);

/* The `migrate` command every binary offers. */
int sg_cli_cmd_migrate(sg_cli_t *cli, int argc, char **argv);

#endif
