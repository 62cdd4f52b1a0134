/* sg_relay_query: the outbox shards' state (sg_relay_query.h). */
#include "sagad/sg_relay_query.h"

#include "sg_ops_int.h"

static const char status_sql[] =
    "SELECT jsonb_build_object('shard', s.shard, 'held', s.held, 'holder', c.holder, "
    "'heartbeat_age_s', round(extract(epoch FROM now() - c.heartbeat_at)::numeric, 1), "
    "'cursor', jsonb_build_object('tx', coalesce(c.tx::text, '0'), 'id', coalesce(c.id, 0)), "
    "'published', coalesce(c.published, 0), "
    "'backlog', (SELECT count(*) FROM outbox o WHERE o.shard = s.shard), "
    "'oldest_age_s', (SELECT round(extract(epoch FROM now() - min(o.created_at))::numeric, 1) "
    "  FROM outbox o WHERE o.shard = s.shard), "
    "'blocked_ms', coalesce(c.xmin_blocked_ms, 0))::text "
    "FROM sagad_relay_locks() AS s LEFT JOIN relay_cursors c ON c.shard = s.shard "
    "ORDER BY s.shard";

int sg_relay_status(sg_pg_t *pg, sg_json_t **rows, sg_err_t *err)
{
    return sg_ops_rows(pg, status_sql, 0, NULL, 0, rows, NULL, err);
}
