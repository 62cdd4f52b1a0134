#include "sagad/sg_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_cli_doc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_mask.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_retention.h"
#include "sagad/sg_run.h"
#include "sagad/sg_version.h"

extern char **environ;

static void usage(const sg_cli_app_t *app, FILE *out)
{
    fprintf(out, "usage: %s [--config FILE] [--json] [--print-config] COMMAND [ARGS]\n", app->prog);
    fprintf(out, "       %s --help | --version\n\n%s\n\ncommands:\n", app->prog, app->summary);
    for (size_t i = 0; i < app->ncmds; i++) {
        char left[160];

        /* A long synopsis gets a line of its own, so the summaries stay
         * in one column. */
        snprintf(left, sizeof(left), "%s %s", app->cmds[i].name, app->cmds[i].args);
        if (strlen(left) > 28)
            fprintf(out, "  %s\n  %-28s %s\n", left, "", app->cmds[i].help);
        else
            fprintf(out, "  %-28s %s\n", left, app->cmds[i].help);
    }
    fprintf(out, "\n`%s COMMAND --help` describes a command and its options.\n\noptions:\n",
            app->prog);
    for (const sg_cli_opt_t *o = sg_cli_global_opts; o->name; o++) {
        char left[64];

        snprintf(left, sizeof(left), "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(out, "  %-20s %s\n", left, o->help);
    }
    fprintf(out, "\nEvery key can be set in the environment: pg.dsn is SAGAD_PG_DSN, "
                 "kafka.bootstrap.servers\nis SAGAD_KAFKA_BOOTSTRAP_SERVERS. "
                 "Keys: docs/CONFIGURATION.md.\n"
                 "Exit codes: 0 ok, 1 failed, 2 usage or config error, 3 refused for safety,\n"
                 "4 PostgreSQL or Kafka unavailable.\n");
}

/* Loads defaults, file, environment and checks required keys. */
static sg_config_t *load_config(const char *path, char *errstr, size_t errstr_size)
{
    sg_config_t *cfg = sg_config_new();

    if ((path && sg_config_load_file(cfg, path, errstr, errstr_size) < 0) ||
        sg_config_load_env(cfg, environ, errstr, errstr_size) < 0 ||
        sg_config_check(cfg, errstr, errstr_size) < 0 ||
        sg_retention_check(cfg, errstr, errstr_size) < 0) {
        sg_config_destroy(cfg);
        return NULL;
    }
    return cfg;
}

static const sg_cli_opt_t *find_opt(const sg_cli_opt_t *opts, const char *name, size_t *idx)
{
    for (size_t i = 0; opts && opts[i].name; i++) {
        if (strcmp(opts[i].name, name) == 0) {
            *idx = i;
            return &opts[i];
        }
    }
    return NULL;
}

static bool lists_json(const sg_cli_cmd_t *cmd)
{
    size_t idx;

    return find_opt(cmd->opts, "--json", &idx) != NULL;
}

/* The global options after the command, as before it: --config FILE (or
 * --config=FILE) is taken out of argv into *config_path, and a --json the
 * command does not list sets *json (the caller refuses it).  The values of
 * the command's own options are stepped over, so a value is never taken
 * for an option; "--" ends the options.  Returns the new argc. */
static int take_globals(const sg_cli_cmd_t *cmd, int argc, char **argv, const char **config_path,
                        bool *json)
{
    int out = 1;

    for (int j = 1; j < argc; j++) {
        const char *a = argv[j];
        const sg_cli_opt_t *o;
        size_t idx, n = strcspn(a, "=");
        char name[64];

        if (strcmp(a, "--") == 0) {
            while (j < argc)
                argv[out++] = argv[j++];
            break;
        }
        snprintf(name, sizeof(name), "%.*s", (int)n, a);
        if (strcmp(name, "--config") == 0 && (a[n] == '=' || j + 1 < argc)) {
            *config_path = a[n] == '=' ? a + n + 1 : argv[++j];
            continue;
        }
        if (strcmp(a, "--json") == 0 && !lists_json(cmd)) {
            *json = true;
            continue;
        }
        argv[out++] = argv[j];
        if (a[0] == '-' && a[n] != '=' && (o = find_opt(cmd->opts, name, &idx)) && o->arg &&
            j + 1 < argc)
            argv[out++] = argv[++j];
    }
    argv[out] = NULL;
    return out;
}

static const sg_cli_cmd_t *find_cmd(const sg_cli_app_t *app, const char *name)
{
    for (size_t i = 0; i < app->ncmds; i++)
        if (strcmp(app->cmds[i].name, name) == 0)
            return &app->cmds[i];
    return NULL;
}

int sg_cli_main(const sg_cli_app_t *app, int argc, char **argv)
{
    const char *config_path = getenv("SAGAD_CONFIG");
    bool print_config = false;
    const sg_cli_cmd_t *cmd;
    sg_cli_t cli = {app->prog, app->component, NULL, NULL, NULL, false};
    bool json_unlisted = false;
    sg_log_level_t level;
    char errstr[1024];
    int i, rc;

    sg_log_init(app->component, SG_LOG_INFO);
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(app, stdout);
            return SG_EXIT_OK;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("%s %s\n", app->prog, SAGAD_VERSION);
            return SG_EXIT_OK;
        } else if (strcmp(argv[i], "--config-reference") == 0) {
            sg_config_write_reference(stdout);
            return SG_EXIT_OK;
        } else if (strcmp(argv[i], "--config-sample") == 0) {
            sg_config_write_sample(stdout);
            return SG_EXIT_OK;
        } else if (strcmp(argv[i], "--metrics-reference") == 0) {
            sg_metrics_write_reference(stdout);
            return SG_EXIT_OK;
        } else if (strcmp(argv[i], "--man") == 0) {
            sg_cli_write_man(app, stdout);
            return SG_EXIT_OK;
        } else if (strcmp(argv[i], "--completion") == 0 && i + 1 < argc) {
            if (sg_cli_write_completion(app, argv[i + 1], stdout) < 0) {
                fprintf(stderr, "%s: --completion %s: bash or zsh\n", app->prog, argv[i + 1]);
                return SG_EXIT_USAGE;
            }
            return SG_EXIT_OK;
        } else if (strcmp(argv[i], "--print-config") == 0) {
            print_config = true;
        } else if (strcmp(argv[i], "--json") == 0) {
            cli.json = true;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config_path = argv[++i];
        } else {
            fprintf(stderr, "%s: unknown option %s (try --help)\n", app->prog, argv[i]);
            return SG_EXIT_USAGE;
        }
    }
    cmd = i < argc ? find_cmd(app, argv[i]) : NULL;
    if (!print_config && !cmd) {
        if (i < argc)
            fprintf(stderr, "%s: unknown command %s (try --help)\n", app->prog, argv[i]);
        else
            usage(app, stderr);
        return SG_EXIT_USAGE;
    }
    for (int j = i + 1; cmd && j < argc && strcmp(argv[j], "--") != 0; j++) {
        if (strcmp(argv[j], "--help") == 0 || strcmp(argv[j], "-h") == 0) {
            sg_cli_cmd_help(app->prog, cmd, stdout);
            return SG_EXIT_OK;
        }
    }
    if (cmd) {
        argc = i + take_globals(cmd, argc - i, argv + i, &config_path, &json_unlisted);
        if ((cli.json || json_unlisted) && !lists_json(cmd)) {
            fprintf(stderr, "%s %s: --json: this command has no JSON output (try %s %s --help)\n",
                    app->prog, cmd->name, app->prog, cmd->name);
            return SG_EXIT_USAGE;
        }
    }
    cli.cmd = cmd;
    cli.config_path = config_path;
    if (cmd && cmd->offline && !print_config) {
        if (!cmd->args[0] && !cmd->opts && argc - i > 1) {
            fprintf(stderr, "%s %s: takes no arguments\n", app->prog, cmd->name);
            return SG_EXIT_USAGE;
        }
        return cmd->fn(&cli, argc - i, argv + i);
    }
    cli.cfg = load_config(config_path, errstr, sizeof(errstr));
    if (!cli.cfg) {
        char masked[1024];

        sg_mask(errstr, masked, sizeof(masked));
        fprintf(stderr, "%s: %s\n", app->prog, masked);
        return SG_EXIT_USAGE;
    }
    if (print_config) {
        sg_config_print(cli.cfg, stdout);
        sg_config_destroy(cli.cfg);
        return SG_EXIT_OK;
    }
    if (sg_log_level_parse(sg_config_str(cli.cfg, "log.level"), &level) == 0)
        sg_log_level = level;
    if (!cmd->args[0] && !cmd->opts && argc - i > 1) {
        fprintf(stderr, "%s %s: takes no arguments\n", app->prog, cmd->name);
        sg_config_destroy(cli.cfg);
        return SG_EXIT_USAGE;
    }
    rc = cmd->fn(&cli, argc - i, argv + i);
    sg_config_destroy(cli.cfg);
    return rc;
}

void sg_cli_cmd_help(const char *prog, const sg_cli_cmd_t *cmd, FILE *out)
{
    fprintf(out, "usage: %s [--config FILE] %s%s%s\n\n%s\n", prog, cmd->name,
            cmd->args[0] ? " " : "", cmd->args, cmd->help);
    if (cmd->opts && cmd->opts[0].name) {
        fprintf(out, "\noptions:\n");
        for (const sg_cli_opt_t *o = cmd->opts; o->name; o++) {
            char left[64];

            snprintf(left, sizeof(left), "%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
            fprintf(out, "  %-22s %s\n", left, o->help);
        }
    }
    if (cmd->detail)
        fprintf(out, "\n%s", cmd->detail);
    fprintf(out, "\nExit codes: 0 ok, 1 nothing matched or failed, 2 usage or config error,\n"
                 "3 refused for safety, 4 PostgreSQL or Kafka unavailable.\n");
}

const char *const sg_cli_aliases[][2] = {
    {"--operator", "--by"},
    {NULL, NULL},
};

/* The option name stands for: its new name when it is a deprecated one
 * the table lists beside its new name (said once on stderr). */
static const sg_cli_opt_t *resolve_alias(const sg_cli_t *cli, const sg_cli_opt_t *opts,
                                         const sg_cli_opt_t *o, size_t *idx)
{
    for (size_t k = 0; sg_cli_aliases[k][0]; k++) {
        const sg_cli_opt_t *to;

        if (strcmp(o->name, sg_cli_aliases[k][0]) != 0 ||
            !(to = find_opt(opts, sg_cli_aliases[k][1], idx)))
            continue;
        fprintf(stderr, "%s %s: %s is deprecated, use %s (the same)\n", cli->prog, cli->cmd->name,
                o->name, to->name);
        return to;
    }
    return o;
}

static int parse_fail(const sg_cli_t *cli, sg_cli_args_t *args, const char *what, const char *arg)
{
    fprintf(stderr, "%s %s: %s %s (try %s %s --help)\n", cli->prog, cli->cmd->name, what, arg,
            cli->prog, cli->cmd->name);
    sg_cli_args_free(args);
    return -1;
}

int sg_cli_parse(const sg_cli_t *cli, int argc, char **argv, sg_cli_args_t *args)
{
    const sg_cli_opt_t *opts = cli->cmd->opts;
    bool only_pos = false;
    size_t json_idx;

    memset(args, 0, sizeof(*args));
    while (opts && opts[args->nopts].name)
        args->nopts++;
    args->opts = opts;
    args->argc = argc;
    args->vals = sg_xcalloc(args->nopts * (size_t)argc + 1, sizeof(*args->vals));
    args->nvals = sg_xcalloc(args->nopts + 1, sizeof(*args->nvals));
    args->pos = sg_xcalloc((size_t)argc + 1, sizeof(*args->pos));
    for (int i = 1; i < argc; i++) {
        const sg_cli_opt_t *o;
        char name[64];
        const char *val = NULL, *eq;
        size_t idx;

        if (only_pos || argv[i][0] != '-' || strcmp(argv[i], "-") == 0) {
            args->pos[args->npos++] = argv[i];
            continue;
        }
        if (strcmp(argv[i], "--") == 0) {
            only_pos = true;
            continue;
        }
        /* --name=value is the same as --name value */
        eq = strchr(argv[i], '=');
        snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]),
                 argv[i]);
        if (!(o = find_opt(opts, name, &idx)))
            return parse_fail(cli, args, "unknown option", argv[i]);
        o = resolve_alias(cli, opts, o, &idx);
        if (o->arg) {
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return parse_fail(cli, args, "missing value for", argv[i]);
        } else if (eq) {
            return parse_fail(cli, args, "takes no value:", argv[i]);
        } else {
            val = "";
        }
        args->vals[idx * (size_t)argc + args->nvals[idx]++] = val;
    }
    /* --json before the command: as if given after it. */
    if (cli->json && find_opt(opts, "--json", &json_idx) && args->nvals[json_idx] == 0)
        args->vals[json_idx * (size_t)argc + args->nvals[json_idx]++] = "";
    return 0;
}

void sg_cli_args_free(sg_cli_args_t *args)
{
    free(args->vals);
    free(args->nvals);
    free(args->pos);
    memset(args, 0, sizeof(*args));
}

size_t sg_cli_opt_all(const sg_cli_args_t *args, const char *name, const char *const **vals)
{
    size_t idx;

    if (!find_opt(args->opts, name, &idx) || args->nvals[idx] == 0) {
        *vals = NULL;
        return 0;
    }
    *vals = &args->vals[idx * (size_t)args->argc];
    return args->nvals[idx];
}

const char *sg_cli_opt(const sg_cli_args_t *args, const char *name)
{
    const char *const *vals;
    size_t n = sg_cli_opt_all(args, name, &vals);

    return n ? vals[n - 1] : NULL;
}

const sg_cli_opt_t sg_cli_migrate_opts[] = {
    {"--json", NULL, "one JSON object: from, to (the schema versions)"},
    {NULL, NULL, NULL},
};

int sg_cli_cmd_migrate(sg_cli_t *cli, int argc, char **argv)
{
    sg_cli_args_t args = {0};
    sg_pg_opts_t opts;
    sg_pg_t *pg;
    sg_err_t err;
    char errstr[512];
    bool json = false;
    int from, to;

    if (cli->cmd->opts) {
        if (sg_cli_parse(cli, argc, argv, &args) < 0)
            return SG_EXIT_USAGE;
        json = sg_cli_opt(&args, "--json") != NULL;
        if (args.npos) {
            fprintf(stderr, "%s migrate: takes no arguments\n", cli->prog);
            sg_cli_args_free(&args);
            return SG_EXIT_USAGE;
        }
        sg_cli_args_free(&args);
    }
    if (sg_migrate_check_list(errstr, sizeof(errstr)) < 0) {
        fprintf(stderr, "%s migrate: BUG: %s\n", cli->prog, errstr);
        return SG_EXIT_FAIL;
    }
    sg_pg_opts_from_config(&opts, cli->cfg, cli->prog);
    opts.role = SG_PG_ROLE_OWNER; /* migrations change the schema */
    pg = sg_pg_connect(&opts, &err);
    if (!pg) {
        fprintf(stderr, "%s migrate: %s (check pg.dsn / SAGAD_PG_DSN)\n", cli->prog, err.message);
        return SG_EXIT_INFRA;
    }
    if (sg_migrate_run(pg, &from, &to, &err) < 0) {
        fprintf(stderr, "%s migrate: %s [%s]\n", cli->prog, err.message, err.code);
        sg_pg_destroy(pg);
        return err.cls == SG_ERRCLASS_PERMANENT ? SG_EXIT_FAIL : SG_EXIT_INFRA;
    }
    if (json)
        printf("{\"from\":%d,\"to\":%d}\n", from, to);
    else if (from == to)
        printf("schema is up to date at version %d\n", to);
    else
        printf("schema migrated from version %d to %d\n", from, to);
    sg_pg_destroy(pg);
    return SG_EXIT_OK;
}

void sg_cli_reload(sg_cli_t *cli)
{
    sg_config_t *fresh;
    sg_log_level_t level, old = sg_log_level;
    char errstr[1024];

    if (!sg_run_reload_requested)
        return;
    sg_run_reload_requested = 0;
    fresh = sg_config_new();
    if (sg_config_load_reloadable(fresh, cli->config_path, environ, errstr, sizeof(errstr)) < 0) {
        sg_log_kv(SG_LOG_WARN, "SIGHUP: config not reloaded, keeping the current values", "error",
                  errstr, NULL);
    } else if (sg_log_level_parse(sg_config_str(fresh, "log.level"), &level) == 0) {
        /* Logged at the higher of the two levels, so the line is seen. */
        sg_log_level = level > old ? level : old;
        sg_log_kv(SG_LOG_WARN, level == old ? "SIGHUP: log level unchanged" : "log level changed",
                  "from", sg_log_level_name(old), "to", sg_log_level_name(level), NULL);
        sg_log_level = level;
    }
    sg_config_destroy(fresh);
}
