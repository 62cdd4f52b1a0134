/* `sagad-relay status`: what an operator asks first when events are late. */
#include <stdio.h>

#include "outbox.h"
#include "sagad/sg_pg.h"

static const char status_sql[] =
    "SELECT s.shard::text, coalesce(c.holder, '-'),"
    " coalesce(round(extract(epoch FROM now() - c.heartbeat_at)::numeric, 1)::text, '-'),"
    " coalesce(c.tx::text, '0') || '/' || coalesce(c.id, 0)::text,"
    " coalesce(c.published, 0)::text,"
    " (SELECT count(*) FROM outbox o WHERE o.shard = s.shard)::text,"
    " coalesce((SELECT round(extract(epoch FROM now() - min(o.created_at))::numeric, 1)::text"
    "           FROM outbox o WHERE o.shard = s.shard), '-'),"
    " coalesce(c.xmin_blocked_ms, 0)::text,"
    " CASE WHEN s.held THEN 'held' ELSE 'FREE' END"
    " FROM sagad_relay_locks() AS s"
    " LEFT JOIN relay_cursors c ON c.shard = s.shard ORDER BY s.shard";

int outbox_cmd_status(sg_cli_t *cli, int argc, char **argv)
{
    sg_pg_opts_t opts;
    sg_pg_res_t *res = NULL;
    sg_pg_t *pg;
    sg_err_t err;

    (void)argc;
    (void)argv;
    sg_pg_opts_from_config(&opts, cli->cfg, "sagad-relay status");
    pg = sg_pg_connect(&opts, &err);
    if (!pg) {
        fprintf(stderr, "%s status: %s\n", cli->prog, err.message);
        return SG_EXIT_INFRA;
    }
    if (sg_pg_exec(pg, status_sql, 0, NULL, &res, &err) < 0) {
        fprintf(stderr, "%s status: %s (has `sagad-relay migrate` run?)\n", cli->prog, err.message);
        sg_pg_destroy(pg);
        return SG_EXIT_INFRA;
    }
    printf("%-5s %-28s %-10s %-22s %-10s %-8s %-10s %-10s %s\n", "shard", "holder", "heartbeat",
           "cursor(tx/id)", "published", "backlog", "oldest_s", "blocked_ms", "lock");
    for (size_t i = 0; i < sg_pg_res_rows(res); i++)
        printf("%-5s %-28s %-10s %-22s %-10s %-8s %-10s %-10s %s\n", sg_pg_res_get(res, i, 0),
               sg_pg_res_get(res, i, 1), sg_pg_res_get(res, i, 2), sg_pg_res_get(res, i, 3),
               sg_pg_res_get(res, i, 4), sg_pg_res_get(res, i, 5), sg_pg_res_get(res, i, 6),
               sg_pg_res_get(res, i, 7), sg_pg_res_get(res, i, 8));
    sg_pg_res_destroy(res);
    sg_pg_destroy(pg);
    return SG_EXIT_OK;
}
