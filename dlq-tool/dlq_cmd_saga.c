/* dlq-tool saga ID: an alias of `sagactl show ID`, the saga's timeline
 * (sg_saga_timeline asks, lib/cli/sg_timeline.c prints it for both). */
#include <stdio.h>

#include "dlq.h"
#include "sagad/sg_saga_query.h"
#include "sagad/sg_timeline.h"

int dlq_cmd_saga(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    sg_json_t *timeline = NULL;
    sg_err_t err;
    const char *id;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return sg_cmd_close(&d, rc);
    if (!(id = sg_cmd_one_arg(&d, "saga ID")))
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    if (sg_saga_timeline(d.pg, id, &timeline, &err) < 0) {
        rc = sg_cmd_fail(&d, "query failed", &err);
    } else if (!timeline) {
        sg_cmd_warn(&d, "no saga and no dead letter with saga id %s", id);
        rc = SG_EXIT_FAIL;
    } else {
        sg_timeline_print(timeline, d.json, stdout);
    }
    sg_json_destroy(timeline);
    return sg_cmd_close(&d, rc);
}
