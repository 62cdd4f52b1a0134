/* dlq-tool saga ID: an alias of `sagactl show ID`, the saga's timeline
 * (lib/cli/sg_timeline.c prints it for both). */
#include <stdio.h>

#include "dlq.h"
#include "sagad/sg_timeline.h"

int dlq_cmd_saga(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    sg_err_t err;
    int found, rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return dlq_close(&d, rc);
    if (d.args.npos != 1) {
        dlq_warn(&d, "needs one saga ID (try dlq-tool saga --help)");
        return dlq_close(&d, SG_EXIT_USAGE);
    }
    found =
        sg_timeline_print(d.pg, d.args.pos[0], sg_cli_opt(&d.args, "--json") != NULL, stdout, &err);
    if (found < 0)
        rc = dlq_pg_fail(&d, "query failed", &err);
    else if (found == 0) {
        dlq_warn(&d, "no saga and no dead letter with saga id %s", d.args.pos[0]);
        rc = SG_EXIT_FAIL;
    }
    return dlq_close(&d, rc);
}
