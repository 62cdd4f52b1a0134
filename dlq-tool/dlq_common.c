/* What dlq-tool's commands share beyond sg_cmd: the connection as the
 * operator role, the filter options, dead-letter IDs, who acts. */
#include <stdio.h>
#include <string.h>

#include "dlq.h"
#include "sagad/sg_alloc.h"

int dlq_open(dlq_t *d, sg_cli_t *cli, int argc, char **argv, bool connect)
{
    int rc = sg_cmd_open(d, cli, argc, argv);

    if (rc || !connect)
        return rc;
    return sg_cmd_connect(d, cli->cfg, SG_PG_ROLE_OPERATOR);
}

sg_pg_t *dlq_connect(const dlq_t *d, sg_err_t *err)
{
    return sg_cmd_pg_new(d, d->cli->cfg, SG_PG_ROLE_OPERATOR, err);
}

int dlq_filter(const dlq_t *d, sg_dlq_filter_t *f, const char *default_status, bool *any)
{
    static const char *const names[] = {"--code", "--class", "--saga",  "--tool",
                                        "--step", "--since", "--until", "--status"};
    const sg_cli_args_t *a = &d->args;

    memset(f, 0, sizeof(*f));
    *any = false;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        *any = *any || sg_cli_opt(a, names[i]);
    if (sg_cmd_opt_when(d, "--since", &f->since) < 0 ||
        sg_cmd_opt_when(d, "--until", &f->until) < 0)
        return -1;
    f->code = sg_cli_opt(a, "--code");
    f->error_class = sg_cli_opt(a, "--class");
    f->saga = sg_cli_opt(a, "--saga");
    f->tool = sg_cli_opt(a, "--tool");
    f->step = sg_cli_opt(a, "--step");
    f->status = sg_cli_opt(a, "--status");
    if (!f->status)
        f->status = default_status;
    return 0;
}

int dlq_ids(const dlq_t *d, int64_t **ids)
{
    *ids = sg_xcalloc(d->args.npos + 1, sizeof(**ids));
    for (size_t i = 0; i < d->args.npos; i++) {
        if (!sg_dlq_id_parse(d->args.pos[i], &(*ids)[i])) {
            sg_cmd_warn(d, "%s: a dead-letter ID is a number (see dlq-tool list)", d->args.pos[i]);
            return -1;
        }
    }
    return 0;
}

int dlq_one_id(const dlq_t *d, int64_t *id)
{
    if (d->args.npos != 1) {
        sg_cmd_warn(d, "needs one dead-letter ID (try %s %s --help)", d->cli->prog,
                    d->cli->cmd->name);
        return -1;
    }
    if (!sg_dlq_id_parse(d->args.pos[0], id)) {
        sg_cmd_warn(d, "%s: a dead-letter ID is a number (see dlq-tool list)", d->args.pos[0]);
        return -1;
    }
    return 0;
}

const char *dlq_by(const dlq_t *d)
{
    const char *by = sg_cmd_by(d);

    return by ? by : "unknown";
}
