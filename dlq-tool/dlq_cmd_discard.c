/* dlq-tool discard ID... --reason: resolved without replay, kept in the
 * ledger.  sg_dlq_discard (sagad_dlq_discard(), schemas/sql/0006) does one
 * entry in one transaction, releasing the hold of a held saga with it.
 * --json: the result of each entry, one object per line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlq.h"

/* Says what became of entry id; counts it. */
static void report(const dlq_t *d, int64_t id, const sg_json_t *r, long *done, long *refused)
{
    const char *outcome = sg_json_string(sg_json_member(r, "outcome"));
    const char *detail = sg_json_string(sg_json_member(r, "detail"));

    if (d->json)
        sg_cmd_print_json(r);
    if (outcome && strcmp(outcome, "discarded") == 0) {
        (*done)++;
        if (!d->json)
            printf("discarded %lld%s%s\n", (long long)id, detail && *detail ? ": " : "",
                   detail ? detail : "");
    } else if (outcome && strcmp(outcome, "refused") == 0) {
        (*refused)++;
        sg_cmd_warn(d, "%lld refused: %s", (long long)id, detail ? detail : "?");
    } else {
        sg_cmd_warn(d, "%s", detail ? detail : "no such dead letter"); /* missing */
    }
}

int dlq_cmd_discard(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    int64_t *ids = NULL;
    const char *reason;
    long done = 0, refused = 0;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return sg_cmd_close(&d, rc);
    reason = sg_cli_opt(&d.args, "--reason");
    if (d.args.npos == 0 || !reason || !*reason) {
        sg_cmd_warn(&d, "needs IDs and --reason (try dlq-tool discard --help)");
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    }
    if (dlq_ids(&d, &ids) < 0) {
        free(ids);
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    }
    for (size_t i = 0; i < d.args.npos && !rc; i++) {
        sg_json_t *r = NULL;
        sg_err_t err;

        if (sg_dlq_discard(d.pg, ids[i], dlq_by(&d), reason, &r, &err) < 0)
            rc = sg_cmd_fail(&d, "discard failed", &err);
        else
            report(&d, ids[i], r, &done, &refused);
        sg_json_destroy(r);
    }
    if (!rc)
        rc = refused ? SG_EXIT_REFUSED : done ? SG_EXIT_OK : SG_EXIT_FAIL;
    free(ids);
    return sg_cmd_close(&d, rc);
}
