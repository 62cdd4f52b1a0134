/* dlq-tool discard ID... --reason: resolved without replay, kept in the
 * ledger.  sagad_dlq_discard() (schemas/sql/0006) does one entry in one
 * transaction, releasing the hold of a held saga with it. */
#include <stdio.h>
#include <string.h>

#include "dlq.h"

static const char discard_sql[] =
    "SELECT r.outcome, r.released, r.detail FROM sagad_dlq_discard($1::bigint, $2, $3) r";

int dlq_cmd_discard(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    const char *const *ids;
    const char *reason, *operator_name;
    long done = 0, refused = 0;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return dlq_close(&d, rc);
    reason = sg_cli_opt(&d.args, "--reason");
    if (d.args.npos == 0 || !reason || !*reason) {
        dlq_warn(&d, "needs IDs and --reason (try dlq-tool discard --help)");
        return dlq_close(&d, SG_EXIT_USAGE);
    }
    if (dlq_ids_check(&d, d.args.pos, d.args.npos) < 0)
        return dlq_close(&d, SG_EXIT_USAGE);
    ids = d.args.pos;
    operator_name = dlq_operator(&d);
    for (size_t i = 0; i < d.args.npos && !rc; i++) {
        const char *params[] = {ids[i], operator_name, reason};
        sg_pg_res_t *res;
        const char *outcome, *detail;

        if ((rc = dlq_query(&d, discard_sql, 3, params, &res)))
            break;
        outcome = sg_pg_res_get(res, 0, 0);
        detail = sg_pg_res_get(res, 0, 2);
        if (strcmp(outcome, "discarded") == 0) {
            done++;
            printf("discarded %s%s%s\n", ids[i], detail && *detail ? ": " : "",
                   detail ? detail : "");
        } else if (strcmp(outcome, "refused") == 0) {
            refused++;
            dlq_warn(&d, "%s refused: %s", ids[i], detail);
        } else {
            dlq_warn(&d, "%s", detail); /* not found */
        }
        sg_pg_res_destroy(res);
    }
    if (!rc)
        rc = refused ? SG_EXIT_REFUSED : done ? SG_EXIT_OK : SG_EXIT_FAIL;
    return dlq_close(&d, rc);
}
