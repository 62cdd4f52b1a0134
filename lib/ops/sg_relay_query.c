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

static const char wal_sql[] =
    "SELECT jsonb_build_object('source', r.source, 'slot', r.wal_slot, "
    "'active', s.active_pid IS NOT NULL, 'walsender_pid', s.active_pid, "
    "'holder', (SELECT a.application_name FROM pg_stat_activity a WHERE a.pid = s.active_pid), "
    "'slot_exists', s.slot_name IS NOT NULL, "
    "'confirmed_lsn', s.confirmed_flush_lsn::text, "
    "'lag_bytes', pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint, "
    "'retained_bytes', pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint, "
    "'table_rows', (SELECT count(*) FROM outbox), "
    "'switched_at', r.source_changed_at)::text "
    "FROM relay_settings r LEFT JOIN pg_replication_slots s ON s.slot_name = r.wal_slot "
    "AND s.database = current_database() WHERE r.source = 'wal'";

int sg_relay_wal_status(sg_pg_t *pg, sg_json_t **rows, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    int rc;

    /* A schema before the WAL source (0026) has no relay_settings.source:
     * no WAL source, not an error. */
    if (sg_pg_exec(pg,
                   "SELECT count(*) FROM pg_attribute WHERE attrelid = 'relay_settings'::regclass "
                   "AND attname = 'source'",
                   0, NULL, &res, err) < 0)
        return -1;
    rc = sg_pg_res_int(res, 0, 0, 0) > 0;
    sg_pg_res_destroy(res);
    if (!rc) {
        *rows = sg_json_new_array();
        return 0;
    }
    return sg_ops_rows(pg, wal_sql, 0, NULL, 0, rows, NULL, err);
}
