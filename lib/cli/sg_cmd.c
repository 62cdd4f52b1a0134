/* sg_cmd: what the operator's commands do the same way (sg_cmd.h). */
#include "sagad/sg_cmd.h"

#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_table.h"
#include "sagad/sg_text.h"

int sg_cmd_open(sg_cmd_t *c, sg_cli_t *cli, int argc, char **argv)
{
    memset(c, 0, sizeof(*c));
    c->cli = cli;
    if (sg_cli_parse(cli, argc, argv, &c->args) < 0)
        return SG_EXIT_USAGE;
    c->json = sg_cli_opt(&c->args, "--json") != NULL;
    return SG_EXIT_OK;
}

sg_pg_t *sg_cmd_pg_new(const sg_cmd_t *c, const sg_config_t *cfg, sg_pg_role_t role, sg_err_t *err)
{
    sg_pg_opts_t opts;

    sg_pg_opts_from_config(&opts, cfg, c->cli->prog);
    opts.role = role;
    opts.connect_attempts = 3;
    return sg_pg_connect(&opts, err);
}

int sg_cmd_connect(sg_cmd_t *c, const sg_config_t *cfg, sg_pg_role_t role)
{
    sg_err_t err;

    if (!(c->pg = sg_cmd_pg_new(c, cfg, role, &err))) {
        sg_cmd_warn(c, "cannot reach PostgreSQL: %s (check pg.dsn / SAGAD_PG_DSN)", err.message);
        return SG_EXIT_INFRA;
    }
    return SG_EXIT_OK;
}

int sg_cmd_close(sg_cmd_t *c, int rc)
{
    sg_pg_destroy(c->pg);
    sg_cli_args_free(&c->args);
    c->pg = NULL;
    return rc;
}

void sg_cmd_warn(const sg_cmd_t *c, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s %s: ", c->cli->prog, c->cli->cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int sg_cmd_fail(const sg_cmd_t *c, const char *what, const sg_err_t *err)
{
    /* The queries name a filter's field, which is the option's name. */
    if (strcmp(err->code, "input.schema.invalid") == 0) {
        sg_cmd_warn(c, "--%s", err->message);
        return SG_EXIT_USAGE;
    }
    sg_cmd_warn(c, "%s: %s [%s]", what, err->message, err->code);
    /* A data error comes from a value the operator typed: a usage error,
     * not an outage. */
    return strcmp(err->code, "pg.data") == 0 ? SG_EXIT_USAGE : SG_EXIT_INFRA;
}

const char *sg_cmd_one_arg(const sg_cmd_t *c, const char *what)
{
    if (c->args.npos != 1) {
        sg_cmd_warn(c, "needs one %s (try %s %s --help)", what, c->cli->prog, c->cli->cmd->name);
        return NULL;
    }
    return c->args.pos[0];
}

int sg_cmd_no_args(const sg_cmd_t *c)
{
    if (c->args.npos == 0)
        return 0;
    sg_cmd_warn(c, "takes no arguments, only options (try %s %s --help)", c->cli->prog,
                c->cli->cmd->name);
    return -1;
}

int sg_cmd_opt_long(const sg_cmd_t *c, const char *name, long def, long max, long *out)
{
    const char *v = sg_cli_opt(&c->args, name);
    char *end;

    *out = def;
    if (!v)
        return 0;
    errno = 0;
    *out = strtol(v, &end, 10);
    if (end == v || *end || errno || *out < 1 || *out > max) {
        sg_cmd_warn(c, "%s %s: must be a whole number from 1 to %ld", name, v, max);
        return -1;
    }
    return 0;
}

int sg_cmd_opt_duration(const sg_cmd_t *c, const char *name, int64_t def_ms, int64_t *ms)
{
    const char *v = sg_cli_opt(&c->args, name);

    *ms = def_ms;
    if (v && !sg_ops_duration_ms(v, ms)) {
        sg_cmd_warn(c, "%s %s: a duration is a whole number and a unit: 500ms, 90s, 30m, 2h or 7d",
                    name, v);
        return -1;
    }
    return 0;
}

int sg_cmd_opt_when(const sg_cmd_t *c, const char *name, sg_ops_when_t *w)
{
    const char *v = sg_cli_opt(&c->args, name);

    memset(w, 0, sizeof(*w));
    if (v && !sg_ops_when_parse(v, w)) {
        sg_cmd_warn(c,
                    "%s: an age (500ms, 90s, 30m, 2h, 7d) or a timestamp (2026-11-21 07:49, "
                    "2026-11-21T07:49:01Z)",
                    name);
        return -1;
    }
    return 0;
}

const char *sg_cmd_by(const sg_cmd_t *c)
{
    const char *v = sg_cli_opt(&c->args, "--by");
    struct passwd *pw;

    if (v && *v)
        return v;
    if ((v = getenv("USER")) && *v)
        return v;
    if ((v = getlogin()) && *v)
        return v;
    pw = getpwuid(getuid());
    return pw && pw->pw_name[0] ? pw->pw_name : NULL;
}

void sg_cmd_more(const sg_json_t *rows, const char *key)
{
    size_t n = sg_json_array_size(rows);
    char *last = n ? sg_table_cell(sg_json_array_get(rows, n - 1), key, SG_CELL_TEXT) : NULL;
    char *shown = sg_text_visible(last ? last : "?", false); /* a producer's id */

    fprintf(stderr, "more: add --before %s for the next page\n", shown);
    free(shown);
    free(last);
}

void sg_cmd_print_json(const sg_json_t *doc)
{
    char *text = sg_json_print(doc);

    printf("%s\n", text);
    free(text);
}
