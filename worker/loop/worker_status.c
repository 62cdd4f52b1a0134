/* The console's copy of what only the worker knows: each tool's circuit
 * breaker (worker_breaker.c) and each owned partition's lag, written to
 * PostgreSQL (tool_breakers, partition_lag: migration 0025) for the
 * gateway, which is stateless and reads only PostgreSQL (GET /v1/tools,
 * GET /v1/summary).
 *
 * Off the hot path: housekeeping calls it once a second; it writes when a
 * breaker changed state since the last copy, or every STATUS_MS otherwise
 * (the rows' seen_at / measured_at are the worker's heartbeat: readers
 * ignore rows older than 30 s, docs/CONSOLE.md).  One statement on the side
 * connection, never in a saga's transaction, so no step waits on it and
 * its row locks never meet the fences'.  The lag is the consumer's cached
 * high watermark (librdkafka keeps it from the fetch responses, no request)
 * minus the offset stored in PostgreSQL, as sagad_consumer_lag. */
#include <stdio.h>
#include <stdlib.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "worker_loop_int.h"

#define STATUS_MS      5000  /* the heartbeat's period */
#define STATUS_WARN_MS 60000 /* a failing copy is logged this often */
#define NCOLS          5

/* Both upserts, and the rows of other workers not written for an hour
 * (workers gone; their own rows are never touched here, so one statement
 * never both updates and deletes a row).  A breaker's since stays as it was
 * while it made no transition: its age is measured again on every copy. */
static const char status_sql[] =
    "WITH b AS (INSERT INTO tool_breakers AS t (worker_id, tool, state, since, failures, "
    "  transitions, seen_at) "
    " SELECT $1, u.tool, u.state, now() - u.age * interval '1 ms', u.failures, u.tr, now() "
    " FROM unnest($2::text[], $3::text[], $4::bigint[], $5::int[], $6::bigint[]) "
    "  AS u(tool, state, age, failures, tr) "
    " ON CONFLICT (worker_id, tool) DO UPDATE SET state = EXCLUDED.state, "
    "  since = CASE WHEN t.transitions = EXCLUDED.transitions AND t.state = EXCLUDED.state "
    "   THEN t.since ELSE EXCLUDED.since END, "
    "  failures = EXCLUDED.failures, transitions = EXCLUDED.transitions, seen_at = now()), "
    "l AS (INSERT INTO partition_lag AS t (group_id, topic, partition, owner_epoch, "
    "  high_watermark, lag, measured_at) "
    " SELECT $7, u.t, u.p, u.e, u.h, u.l, now() "
    " FROM unnest($8::text[], $9::int[], $10::bigint[], $11::bigint[], $12::bigint[]) "
    "  AS u(t, p, e, h, l) "
    " ON CONFLICT (group_id, topic, partition) DO UPDATE SET owner_epoch = EXCLUDED.owner_epoch, "
    "  high_watermark = EXCLUDED.high_watermark, lag = EXCLUDED.lag, measured_at = now() "
    " WHERE t.owner_epoch <= EXCLUDED.owner_epoch), "
    "d AS (DELETE FROM tool_breakers WHERE worker_id <> $1 "
    " AND seen_at < now() - interval '1 hour') "
    "SELECT 1";

/* NCOLS columns of rows, each an array literal's items; numbers are kept
 * as text in num. */
typedef struct cols_s {
    const char **items; /* [col * cap + row] */
    char (*num)[24];    /* [col * cap + row] */
    size_t n, cap;
} cols_t;

static void cols_init(cols_t *c, size_t cap)
{
    c->cap = cap ? cap : 1;
    c->n = 0;
    c->items = sg_xcalloc(NCOLS * c->cap, sizeof(*c->items));
    c->num = sg_xcalloc(NCOLS * c->cap, sizeof(*c->num));
}

static void cols_str(cols_t *c, int col, const char *s)
{
    c->items[col * c->cap + c->n] = s;
}

static void cols_int(cols_t *c, int col, long long v)
{
    char *at = c->num[col * c->cap + c->n];

    snprintf(at, 24, "%lld", v);
    c->items[col * c->cap + c->n] = at;
}

/* The columns as array literals into lit[NCOLS], their texts into params. */
static void cols_params(cols_t *c, sg_pg_buf_t lit[NCOLS], const char **params)
{
    for (int k = 0; k < NCOLS; k++) {
        sg_pg_array_literal(&lit[k], c->items + k * c->cap, c->n);
        params[k] = lit[k].data;
    }
}

static void cols_free(cols_t *c, sg_pg_buf_t lit[NCOLS])
{
    for (int k = 0; k < NCOLS; k++)
        sg_pg_buf_free(&lit[k]);
    free(c->items);
    free(c->num);
}

/* The sum of the breakers' transitions: it changes with every one. */
static uint64_t transitions(const loop_t *L)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < L->w.reg->ntools; i++) {
        const sg_tool_t *tool = &L->w.reg->tools[i];
        worker_breaker_info_t info;
        if (!tool->breaker)
            continue;
        worker_breaker_info(tool, &info);
        sum += info.transitions[0] + info.transitions[1] + info.transitions[2];
    }
    return sum;
}

static void breaker_rows(const loop_t *L, cols_t *c, uint64_t now)
{
    for (size_t i = 0; i < L->w.reg->ntools; i++) {
        const sg_tool_t *tool = &L->w.reg->tools[i];
        worker_breaker_info_t info;
        if (!tool->breaker)
            continue;
        worker_breaker_info(tool, &info);
        cols_str(c, 0, tool->name);
        cols_str(c, 1, worker_breaker_state_name(info.state));
        cols_int(c, 2, (long long)(now > info.since_ms ? now - info.since_ms : 0));
        cols_int(c, 3, info.failures);
        cols_int(c, 4,
                 (long long)(info.transitions[0] + info.transitions[1] + info.transitions[2]));
        c->n++;
    }
}

static void lag_rows(loop_t *L, cols_t *c)
{
    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *p = L->parts[i];
        int64_t high = sg_kafka_high_watermark(L->consumers[p->topic], p->topic_name, p->partition);
        if (high < 0)
            continue; /* nothing fetched yet: not known */
        cols_str(c, 0, p->topic_name);
        cols_int(c, 1, p->partition);
        cols_int(c, 2, (long long)p->epoch);
        cols_int(c, 3, (long long)high);
        cols_int(c, 4, (long long)(high > p->stored ? high - p->stored : 0));
        c->n++;
    }
}

static int copy(loop_t *L, uint64_t now, sg_err_t *err)
{
    const char *params[2 + 2 * NCOLS] = {L->w.worker_id};
    sg_pg_buf_t blit[NCOLS] = {{0}}, llit[NCOLS] = {{0}};
    cols_t b, l;
    sg_pg_t *pg;
    int rc = -1;

    cols_init(&b, L->w.reg->ntools);
    cols_init(&l, L->nparts);
    breaker_rows(L, &b, now);
    lag_rows(L, &l);
    cols_params(&b, blit, params + 1);
    params[1 + NCOLS] = L->w.group;
    cols_params(&l, llit, params + 2 + NCOLS);
    if ((pg = loop_side_pg(L, err)))
        rc = sg_pg_exec_cached(pg, status_sql, 2 + 2 * NCOLS, params, NULL, err);
    cols_free(&b, blit);
    cols_free(&l, llit);
    return rc;
}

void loop_status_copy(loop_t *L)
{
    uint64_t now = sg_run_now_ms(), seen;
    sg_err_t err;

    if (!L->pg_up)
        return; /* the session is being recovered: not now */
    seen = transitions(L);
    if (now < L->next_status && seen == L->status_seen)
        return;
    /* Seen even when the copy fails: the next one, STATUS_MS later, copies
     * every breaker as it is then. */
    L->next_status = now + STATUS_MS;
    L->status_seen = seen;
    if (copy(L, now, &err) == 0 ||
        (L->status_warned_at && now - L->status_warned_at < STATUS_WARN_MS))
        return;
    L->status_warned_at = now;
    sg_log_kv(SG_LOG_WARN,
              "cannot copy the breakers and lag to PostgreSQL (the console's Tools and Now "
              "pages); retrying every 5 s",
              "error", err.message, "error_code", err.code, NULL);
}

void loop_status_clear(loop_t *L)
{
    const char *params[] = {L->w.worker_id};
    sg_err_t err;
    sg_pg_t *pg;

    if (!L->pg_up || !(pg = loop_side_pg(L, &err)))
        return; /* the rows age out */
    if (sg_pg_exec(pg, "DELETE FROM tool_breakers WHERE worker_id = $1", 1, params, NULL, &err) < 0)
        sg_log_kv(SG_LOG_INFO, "breaker rows left to age out", "error", err.message, NULL);
}
