#include "sagad/sg_retention.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sagad/sg_metrics.h"

static const char *const table_names[SG_RET__COUNT] = {
    [SG_RET_SAGAS] = "sagas",
    [SG_RET_STEPS] = "steps",
    [SG_RET_ATTEMPTS] = "attempts",
    [SG_RET_DEAD_LETTERS] = "dead_letters",
    [SG_RET_REPLAYS] = "replays",
    [SG_RET_REVISIONS] = "dead_letter_revisions",
    [SG_RET_BUILTIN_LEDGER] = "builtin_ledger",
};

const char *sg_retention_table_name(sg_retention_table_t t)
{
    return t < SG_RET__COUNT ? table_names[t] : "?";
}

void sg_retention_opts_from_config(sg_retention_opts_t *opts, const sg_config_t *cfg)
{
    opts->sagas_s = sg_config_int(cfg, "retention.sagas_s");
    opts->dead_letters_s = sg_config_int(cfg, "retention.dead_letters_s");
    opts->batch_size = sg_config_int(cfg, "retention.batch_size");
    opts->pause_ms = sg_config_int(cfg, "retention.pause_ms");
    opts->run = NULL;
}

int sg_retention_check(const sg_config_t *cfg, char *errstr, size_t errstr_size)
{
    long long sagas = (long long)sg_config_int(cfg, "retention.sagas_s");
    long long dedup = (long long)sg_config_int(cfg, "retention.dedup_window_s");
    long long dead = (long long)sg_config_int(cfg, "retention.dead_letters_s");

    /* The saga row is what remembers a saga_id: a longer window cannot be
     * kept, a shorter one would be a promise the rows break (a repeat
     * inside the saga's horizon is still answered as a duplicate). */
    if (dedup != sagas) {
        snprintf(errstr, errstr_size,
                 "config: retention.dedup_window_s (%lld s) must equal retention.sagas_s (%lld s): "
                 "a saga_id is remembered exactly as long as its saga row is kept",
                 dedup, sagas);
        return -1;
    }
    /* A saga is kept while a dead letter names it (its replay needs it), so
     * a dead letter never outlives its saga; the other way round, a
     * finished saga would lose the record of why it failed while it is
     * still kept. */
    if (dead < sagas) {
        snprintf(errstr, errstr_size,
                 "config: retention.dead_letters_s (%lld s) is shorter than retention.sagas_s "
                 "(%lld s): a kept saga would lose the dead letters that explain it",
                 dead, sagas);
        return -1;
    }
    return 0;
}

/* Sleeps ms, in short naps so a stop request ends it early. */
static void pause_ms(int64_t ms, volatile sig_atomic_t *run)
{
    for (int64_t left = ms; left > 0 && (!run || *run); left -= 20) {
        struct timespec ts = {0, (left < 20 ? left : 20) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* One batch of finished sagas no dead letter names, with their steps,
 * attempts and control history; one batch of handled dead letters with
 * their replays and revisions.  Both delete through functions of the
 * owner (schemas/sql/0021_least_privilege.sql): the runtime role may not
 * delete those rows itself (the operator's ledgers are append-only for
 * it), only as retention's rule allows.  SKIP LOCKED inside: a saga a
 * worker holds, or a dead letter dlq-tool holds, waits for the next batch. */
static const char sql_sagas[] = "SELECT sagas, steps, attempts FROM sagad_retention_sagas($1, $2)";

static const char sql_dead_letters[] =
    "SELECT dead_letters, replays, revisions FROM sagad_retention_dead_letters($1, $2)";

static const char sql_ledger[] =
    "WITH b AS (DELETE FROM builtin_ledger WHERE key IN (SELECT key FROM builtin_ledger "
    "WHERE last_at < now() - make_interval(secs => $1::float8) "
    "LIMIT $2::bigint FOR UPDATE SKIP LOCKED) RETURNING 1) "
    "SELECT count(*) FROM b";

typedef struct kind_s {
    const char *sql;
    int ncols;
    sg_retention_table_t cols[3]; /* what each count of the result is */
} kind_t;

static const kind_t kinds[] = {
    /* dead letters first: removing them may let their sagas go */
    {sql_dead_letters, 3, {SG_RET_DEAD_LETTERS, SG_RET_REPLAYS, SG_RET_REVISIONS}},
    {sql_sagas, 3, {SG_RET_SAGAS, SG_RET_STEPS, SG_RET_ATTEMPTS}},
    {sql_ledger, 1, {SG_RET_BUILTIN_LEDGER}},
};

/* Runs one kind's batches until one comes back short.  The first count of
 * each kind is its batch's unit (sagas, dead letters, ledger rows). */
static int run_kind(sg_pg_t *pg, const kind_t *k, const char *horizon,
                    const sg_retention_opts_t *opts, int64_t removed[SG_RET__COUNT], sg_err_t *err)
{
    const char *p[] = {horizon, SG_PG_INT(opts->batch_size)};

    for (;;) {
        sg_pg_res_t *res = NULL;
        int64_t unit;

        if (opts->run && !*opts->run)
            return 0;
        if (sg_pg_exec_cached(pg, k->sql, 2, p, &res, err) < 0)
            return -1;
        unit = sg_pg_res_int(res, 0, 0, 0);
        for (int c = 0; c < k->ncols; c++) {
            int64_t n = sg_pg_res_int(res, 0, c, 0);

            removed[k->cols[c]] += n;
            if (n > 0)
                sg_metric_add(SG_M_RETENTION_REMOVED,
                              SG_LABELS(sg_retention_table_name(k->cols[c])), (uint64_t)n);
        }
        sg_pg_res_destroy(res);
        if (unit < opts->batch_size)
            return 0;
        pause_ms(opts->pause_ms, opts->run);
    }
}

int sg_retention_pass(sg_pg_t *pg, const sg_retention_opts_t *opts, int64_t removed[SG_RET__COUNT],
                      sg_err_t *err)
{
    const char *sagas = SG_PG_INT(opts->sagas_s), *dead = SG_PG_INT(opts->dead_letters_s);

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (run_kind(pg, &kinds[i], kinds[i].sql == sql_dead_letters ? dead : sagas, opts, removed,
                     err) < 0)
            return -1;
    return 0;
}

/* Each part reads one end of an index: sagas_status per finished status
 * (skipping the few a dead letter keeps), dead_letters_resolved,
 * builtin_ledger_last. */
static const char sql_ages[] =
    "SELECT coalesce(extract(epoch FROM now() - (SELECT min(u) FROM ("
    "(SELECT updated_at AS u FROM sagas s WHERE status = 'completed' AND NOT EXISTS "
    "(SELECT 1 FROM dead_letters d WHERE d.saga_id = s.saga_id) ORDER BY updated_at LIMIT 1) "
    "UNION ALL (SELECT updated_at FROM sagas s WHERE status = 'compensated' AND NOT EXISTS "
    "(SELECT 1 FROM dead_letters d WHERE d.saga_id = s.saga_id) ORDER BY updated_at LIMIT 1) "
    "UNION ALL (SELECT updated_at FROM sagas s WHERE status = 'failed' AND NOT EXISTS "
    "(SELECT 1 FROM dead_letters d WHERE d.saga_id = s.saga_id) ORDER BY updated_at LIMIT 1) "
    "UNION ALL (SELECT updated_at FROM sagas s WHERE status = 'cancelled' AND NOT EXISTS "
    "(SELECT 1 FROM dead_letters d WHERE d.saga_id = s.saga_id) ORDER BY updated_at LIMIT 1)"
    ") x)), 0)::float8, "
    "coalesce(extract(epoch FROM now() - (SELECT resolved_at FROM dead_letters "
    "WHERE status <> 'pending' AND resolved_at IS NOT NULL ORDER BY resolved_at LIMIT 1)), "
    "0)::float8, "
    "coalesce(extract(epoch FROM now() - (SELECT min(last_at) FROM builtin_ledger)), 0)::float8";

int sg_retention_export_ages(sg_pg_t *pg, double age[SG_RET_NAGED], sg_err_t *err)
{
    static const sg_retention_table_t aged[SG_RET_NAGED] = {SG_RET_SAGAS, SG_RET_DEAD_LETTERS,
                                                            SG_RET_BUILTIN_LEDGER};
    sg_pg_res_t *res = NULL;

    if (sg_pg_exec_cached(pg, sql_ages, 0, NULL, &res, err) < 0)
        return -1;
    for (int i = 0; i < SG_RET_NAGED; i++) {
        const char *v = sg_pg_res_get(res, 0, i);
        double a = v ? strtod(v, NULL) : 0;

        if (age)
            age[i] = a;
        sg_metric_set(SG_M_RETENTION_OLDEST_AGE, SG_LABELS(sg_retention_table_name(aged[i])), a);
    }
    sg_pg_res_destroy(res);
    return 0;
}
