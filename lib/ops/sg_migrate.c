#include "sagad/sg_migrate.h"

#include <stdio.h>
#include <string.h>

#include "sagad/sg_log.h"

extern const sg_migration_t sg_migrations_embedded[];
extern const unsigned sg_migrations_embedded_count;

const sg_migration_t *sg_migrate_list(size_t *count)
{
    *count = sg_migrations_embedded_count;
    return sg_migrations_embedded;
}

int sg_migrate_latest(void)
{
    size_t n;
    const sg_migration_t *m = sg_migrate_list(&n);

    return n ? m[n - 1].version : 0;
}

int sg_migrate_check_list(char *errstr, size_t errstr_size)
{
    size_t n;
    const sg_migration_t *m = sg_migrate_list(&n);

    for (size_t i = 0; i < n; i++) {
        if (m[i].version != (int)i + 1) {
            snprintf(errstr, errstr_size,
                     "migration %s: expected version %zu (versions must run 1, 2, 3... with no "
                     "gap or repeat)",
                     m[i].name, i + 1);
            return -1;
        }
    }
    return 0;
}

int sg_migrate_current(sg_pg_t *pg, int *version, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    const char *exists;

    /* Probe first: a query naming a missing table fails at parse time. */
    if (sg_pg_exec(pg, "SELECT to_regclass('sagad_schema_migrations') IS NOT NULL", 0, NULL, &res,
                   err) < 0)
        return -1;
    exists = sg_pg_res_get(res, 0, 0);
    *version = 0;
    if (!exists || strcmp(exists, "t") != 0) {
        sg_pg_res_destroy(res);
        return 0;
    }
    sg_pg_res_destroy(res);
    if (sg_pg_exec(pg, "SELECT coalesce(max(version), 0) FROM sagad_schema_migrations", 0, NULL,
                   &res, err) < 0)
        return -1;
    *version = (int)sg_pg_res_int(res, 0, 0, 0);
    sg_pg_res_destroy(res);
    return 0;
}

static int apply_one(sg_pg_t *pg, const sg_migration_t *m, sg_err_t *err)
{
    const char *params[2] = {SG_PG_INT(m->version), m->name};

    if (sg_pg_begin(pg, err) < 0)
        return -1;
    if (sg_pg_exec_script(pg, m->sql, err) < 0 ||
        sg_pg_exec(pg, "INSERT INTO sagad_schema_migrations (version, name) VALUES ($1, $2)", 2,
                   params, NULL, err) < 0 ||
        sg_pg_commit(pg, err) < 0) {
        sg_err_prefix(err, "migration %s", m->name);
        sg_pg_rollback(pg);
        return -1;
    }
    sg_log_kv(SG_LOG_INFO, "migration applied", "migration", m->name, NULL);
    return 0;
}

static int apply_pending(sg_pg_t *pg, int *from, int *to, sg_err_t *err)
{
    size_t n;
    const sg_migration_t *m = sg_migrate_list(&n);
    int current;

    if (sg_pg_exec(pg,
                   "CREATE TABLE IF NOT EXISTS sagad_schema_migrations ("
                   " version integer PRIMARY KEY, name text NOT NULL,"
                   " applied_at timestamptz NOT NULL DEFAULT now())",
                   0, NULL, NULL, err) < 0 ||
        sg_migrate_current(pg, &current, err) < 0)
        return -1;
    *from = *to = current;
    if (current > sg_migrate_latest())
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.schema.newer",
                          "database schema is at version %d but this binary knows only up to %d: "
                          "upgrade the binary",
                          current, sg_migrate_latest());
    for (size_t i = 0; i < n; i++) {
        if (m[i].version <= current)
            continue;
        if (apply_one(pg, &m[i], err) < 0)
            return -1;
        *to = m[i].version;
    }
    /* Every run grants the group roles their rights again (0013): they may
     * have been created after the schema was (a managed database's DBA). */
    return sg_pg_exec(pg,
                      "SELECT sagad_grant_roles() WHERE to_regprocedure('sagad_grant_roles()') IS "
                      "NOT NULL",
                      0, NULL, NULL, err);
}

int sg_migrate_run(sg_pg_t *pg, int *from, int *to, sg_err_t *err)
{
    const char *params[1] = {SG_PG_INT(SG_MIGRATE_LOCK_KEY)};
    int f = 0, t = 0, rc;
    sg_err_t unlock_err;

    /* Session lock: held across the per-migration transactions, released
     * by the server if this process dies. */
    if (sg_pg_exec(pg, "SELECT pg_advisory_lock($1::bigint)", 1, params, NULL, err) < 0)
        return -1;
    rc = apply_pending(pg, &f, &t, err);
    if (sg_pg_exec(pg, "SELECT pg_advisory_unlock($1::bigint)", 1, params, NULL, &unlock_err) < 0)
        sg_log_kv(SG_LOG_WARN, "cannot release the migration lock", "error", unlock_err.message,
                  NULL);
    if (from)
        *from = f;
    if (to)
        *to = t;
    return rc;
}
