/* Set-based writes of a batch's transaction.
 *
 * The decisions of a batch write the same few kinds of rows over and over:
 * a new saga with its steps, an attempt row, an attempt's outcome, step
 * and saga state, outbox messages, timers.  Sent one statement per row,
 * PostgreSQL spends most of a step's cost on per-statement overhead, so
 * these rows are collected here, column by column, and sent as one
 * statement per kind over unnest() of array parameters.
 *
 * Order is kept where it matters:
 *   - any other statement (a dead letter, which reads the attempt rows; an
 *     interrupted attempt) first flushes what was collected, so every
 *     statement sees the rows written before it in decision order;
 *   - the kinds are flushed in an order where each depends only on earlier
 *     ones (new sagas before updates of them);
 *   - outbox rows keep their order (unnest yields elements in order, and
 *     the ids come from the sequence in insertion order), so a saga's
 *     events keep theirs;
 *   - a step or saga written twice before a flush is one row holding the
 *     last state, as one UPDATE must not match a row twice. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "../worker.h"

enum { MAX_COLS = 13 };

/* Rows of one kind, column by column (column-major: each column is one
 * array parameter).  Strings are owned; NULL is SQL NULL.  A kind whose
 * rows are only ever appended (streamed) keeps no strings: each value
 * goes straight into its column's array literal, escaped, as the row
 * comes (a copy of every message and its free, then a second pass over
 * it at the flush, were a tenth of the worker's CPU). */
typedef struct table_s {
    int ncols;
    bool streamed;
    size_t n, cap;
    char **col[MAX_COLS];
    sg_pg_buf_t lit[MAX_COLS]; /* streamed: "{" and the rows so far */
} table_t;

/* An INSERT INTO attempts in flight: its RETURNING rows name the attempt
 * ids of cmds, in insertion order. */
typedef struct attempt_ins_s {
    struct attempt_ins_s *next;
    sg_pg_res_t *res;
    size_t n;
    worker_cmd_t **cmds;
} attempt_ins_t;

enum { T_SAGA_NEW, T_ATTEMPT_NEW, T_ATTEMPT_DONE, T_STEP, T_SAGA, T_OUTBOX, T_TIMER, NTABLES };

struct worker_writes_s {
    table_t t[NTABLES];
    worker_cmd_t **attempt_cmds; /* the commands of T_ATTEMPT_NEW's rows */
    size_t attempt_cap;
    attempt_ins_t *inserts;
    unsigned gen; /* bumped by every flush: slot numbers of older ones are void */
    sg_pg_buf_t lit[MAX_COLS];
};

static const int ncols[NTABLES] = {
    [T_SAGA_NEW] = 11, [T_ATTEMPT_NEW] = 7, [T_ATTEMPT_DONE] = 6, [T_STEP] = 13,
    [T_SAGA] = 5,      [T_OUTBOX] = 4,      [T_TIMER] = 5,
};

/* Every message of the transaction in one call (migration 0028): the
 * function decides the route once (the WAL, or the table with the shard
 * computed in the statement, as 0007 wants) and writes them all in one
 * set-based statement, in the arrays' order. */
const char worker_sql_outbox[] =
    "SELECT sagad_outbox_write($1::text[], $2::text[], $3::jsonb[], $4::text[])";

/* Each statement reads its table's columns as $1..$n; T_ATTEMPT_NEW also
 * the worker id as $8. */
static const char *const sql[NTABLES] = {
    [T_SAGA_NEW] =
        "WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::jsonb[], "
        "$5::jsonb[], $6::timestamptz[], $7::bigint[], $8::text[], $9::jsonb[], $10::text[], "
        "$11::text[]) AS u(id, name, def, input, meta, deadline, budget, tp, steps, origin, sub)), "
        "s AS (INSERT INTO sagas (saga_id, name, definition, input, metadata, deadline, "
        "retry_budget_ms, traceparent, origin, submitted_by) SELECT id, name, def, input, meta, "
        "deadline, budget, tp, origin, sub "
        "FROM u RETURNING saga_id) "
        "INSERT INTO steps (saga_id, idx, name, tool, args, compensate, approval, grp, "
        "grp_policy) "
        "SELECT u.id, (e.ord - 1)::int, e.v->>'name', e.v->>'tool', e.v->'args', "
        "nullif(e.v->'compensate', 'null'::jsonb), e.v->'approval', e.v->>'group', "
        "e.v->>'policy' "
        "FROM u JOIN s ON s.saga_id = u.id, jsonb_array_elements(u.steps) WITH ORDINALITY "
        "AS e(v, ord)",
    [T_ATTEMPT_NEW] =
        "INSERT INTO attempts (saga_id, step_idx, phase, generation, attempt, idempotency_key, "
        "args, worker_id) SELECT s, i, p, g, a, k, x, $8 FROM unnest($1::text[], $2::int[], "
        "$3::text[], $4::int[], $5::int[], $6::text[], $7::jsonb[]) AS u(s, i, p, g, a, k, x) "
        "RETURNING id, saga_id, step_idx, phase, attempt",
    [T_ATTEMPT_DONE] =
        "UPDATE attempts a SET finished_at = now(), status = u.st, error_code = u.code, "
        "error_class = u.cls, latency_ms = u.lat, envelope = u.env "
        "FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[], "
        "$6::jsonb[]) AS u(id, st, code, cls, lat, env) WHERE a.id = u.id",
    [T_STEP] = "UPDATE steps t SET status = u.st, attempts = u.att, comp_attempts = u.catt, "
               "calling = u.cl, "
               "result = coalesce(u.res, t.result), error_code = coalesce(u.code, t.error_code), "
               "idempotency_key = coalesce(u.k, t.idempotency_key), "
               "forward_effect = coalesce(u.fe, t.forward_effect), "
               "agent_action = coalesce(u.aa, t.agent_action), "
               "done_seq = coalesce(u.ds, t.done_seq), "
               "comp_key_generation = coalesce(u.ckg, t.comp_key_generation), updated_at = now() "
               "FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::int[], "
               "$6::bool[], $7::jsonb[], $8::text[], $9::text[], $10::text[], $11::text[], "
               "$12::bigint[], $13::int[]) AS u(s, i, st, att, catt, cl, res, code, k, fe, aa, ds, "
               "ckg) "
               "WHERE t.saga_id = u.s AND t.idx = u.i",
    /* updated_at moves with a status change, else only once it is a
     * second old: sagas_status indexes it, and an update that changes an
     * indexed column cannot be HOT, so each step's outcome wrote a new
     * entry into every index of sagas.  Within a second it keeps its
     * value, and the steps between a saga's start and its end are HOT
     * updates (docs/SAGACTL.md: last progress, to within a second). */
    [T_SAGA] = "UPDATE sagas t SET status = u.st, seq = u.seq, retry_spent_ms = u.sp, "
               "output = coalesce(u.o, t.output), version = t.version + 1, "
               "updated_at = CASE WHEN t.status <> u.st OR t.updated_at < now() - "
               "interval '1 second' THEN now() ELSE t.updated_at END "
               "FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::jsonb[]) "
               "AS u(s, st, seq, sp, o) WHERE t.saga_id = u.s",
    [T_OUTBOX] = worker_sql_outbox,
    [T_TIMER] = "INSERT INTO timers (due_at, topic, key, headers, payload) "
                "SELECT now() + d * interval '1 millisecond', t, convert_to(k, 'UTF8'), h, "
                "convert_to(p, 'UTF8') FROM unnest($1::bigint[], $2::text[], $3::text[], "
                "$4::jsonb[], $5::text[]) AS u(d, t, k, h, p)",
};

static char *dup_or_null(const char *s)
{
    char *d;

    if (!s)
        return NULL;
    d = sg_xstrdup(s);
    return d;
}

/* Appends a row (ncols values, copied); returns its index. */
static size_t row_add(table_t *t, const char *const *vals)
{
    if (t->streamed) {
        for (int c = 0; c < t->ncols; c++) {
            sg_pg_buf_putc(&t->lit[c], t->n ? ',' : '{');
            sg_pg_array_item(&t->lit[c], vals[c]);
        }
        return t->n++;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 64;
        for (int c = 0; c < t->ncols; c++)
            t->col[c] = sg_xrealloc(t->col[c], t->cap * sizeof(char *));
    }
    for (int c = 0; c < t->ncols; c++)
        t->col[c][t->n] = dup_or_null(vals[c]);
    return t->n++;
}

static void cell_set(table_t *t, size_t row, int c, const char *val)
{
    free(t->col[c][row]);
    t->col[c][row] = dup_or_null(val);
}

static void table_clear(table_t *t)
{
    for (int c = 0; c < t->ncols; c++) {
        if (t->streamed)
            sg_pg_buf_reset(&t->lit[c]);
        else
            for (size_t r = 0; r < t->n; r++)
                free(t->col[c][r]);
    }
    t->n = 0;
}

/* Slots are zeroed with their saga (generation 0), which is never
 * current. */
static void next_gen(worker_writes_t *wr)
{
    if (++wr->gen == 0)
        wr->gen = 1;
}

worker_writes_t *worker_writes_new(void)
{
    worker_writes_t *wr = sg_xcalloc(1, sizeof(*wr));

    for (int k = 0; k < NTABLES; k++) {
        assert(ncols[k] <= MAX_COLS); /* a statement of more columns needs MAX_COLS raised */
        wr->t[k].ncols = ncols[k];
        /* upsert() rewrites the rows of steps and sagas in place */
        wr->t[k].streamed = k != T_STEP && k != T_SAGA;
    }
    wr->gen = 1;
    return wr;
}

void worker_writes_discard(worker_writes_t *wr)
{
    for (int k = 0; k < NTABLES; k++)
        table_clear(&wr->t[k]);
    while (wr->inserts) {
        attempt_ins_t *a = wr->inserts;
        wr->inserts = a->next;
        sg_pg_res_destroy(a->res);
        free(a->cmds);
        free(a);
    }
    next_gen(wr);
}

void worker_writes_free(worker_writes_t *wr)
{
    if (!wr)
        return;
    worker_writes_discard(wr);
    for (int k = 0; k < NTABLES; k++)
        for (int c = 0; c < wr->t[k].ncols; c++) {
            free(wr->t[k].col[c]);
            sg_pg_buf_free(&wr->t[k].lit[c]);
        }
    for (int c = 0; c < MAX_COLS; c++)
        sg_pg_buf_free(&wr->lit[c]);
    free(wr->attempt_cmds);
    free(wr);
}

void worker_writes_flush(worker_t *w)
{
    worker_writes_t *wr = w->writes;

    for (int k = 0; k < NTABLES; k++) {
        table_t *t = &wr->t[k];
        const char *params[MAX_COLS + 1];
        sg_pg_res_t **slot = NULL;

        if (t->n == 0)
            continue;
        for (int c = 0; c < t->ncols; c++) {
            if (t->streamed) {
                sg_pg_buf_putc(&t->lit[c], '}');
                params[c] = t->lit[c].data;
                continue;
            }
            sg_pg_buf_reset(&wr->lit[c]);
            sg_pg_array_literal(&wr->lit[c], (const char *const *)t->col[c], t->n);
            params[c] = wr->lit[c].data;
        }
        if (k == T_ATTEMPT_NEW) {
            attempt_ins_t *a = sg_xcalloc(1, sizeof(*a));
            a->cmds = sg_xmalloc(t->n * sizeof(*a->cmds));
            memcpy(a->cmds, wr->attempt_cmds, t->n * sizeof(*a->cmds));
            a->n = t->n;
            a->next = wr->inserts;
            wr->inserts = a;
            slot = &a->res;
            params[t->ncols] = w->worker_id;
        }
        if (k == T_OUTBOX)
            w->outbox_written = true;
        if (k == T_TIMER)
            w->timers_written = true;
        sg_pg_pipe_send(w->pg, sql[k], t->ncols + (k == T_ATTEMPT_NEW), params, slot);
        table_clear(t);
    }
    next_gen(wr);
}

int worker_writes_committed(worker_writes_t *wr)
{
    int missing = 0;

    for (attempt_ins_t *a = wr->inserts; a; a = a->next) {
        size_t rows = sg_pg_res_rows(a->res);
        /* RETURNING comes in insertion order; the key columns are checked
         * rather than trusted. */
        for (size_t i = 0; i < a->n; i++) {
            worker_cmd_t *cmd = a->cmds[i];
            const char *phase = cmd->dec.type == SG_CMD_COMPENSATE ? "compensate" : "forward";
            cmd->attempt_id = 0;
            for (size_t k = 0; k < rows; k++) {
                size_t r = (i + k) % rows;
                if (strcmp(sg_pg_res_get(a->res, r, 1), cmd->dec.saga_id) == 0 &&
                    sg_pg_res_int(a->res, r, 2, -1) == cmd->dec.step &&
                    strcmp(sg_pg_res_get(a->res, r, 3), phase) == 0 &&
                    sg_pg_res_int(a->res, r, 4, -1) == cmd->dec.attempt) {
                    cmd->attempt_id = sg_pg_res_int(a->res, r, 0, 0);
                    break;
                }
            }
            if (!cmd->attempt_id)
                missing++;
        }
    }
    worker_writes_discard(wr);
    return missing;
}

/* ---- rows --------------------------------------------------------------- */

void worker_write_saga_new(worker_t *w, const char *const vals[11])
{
    row_add(&w->writes->t[T_SAGA_NEW], vals);
}

void worker_write_attempt(worker_t *w, worker_cmd_t *cmd, const char *const vals[7])
{
    worker_writes_t *wr = w->writes;
    size_t r = row_add(&wr->t[T_ATTEMPT_NEW], vals);

    if (r >= wr->attempt_cap) {
        wr->attempt_cap = wr->attempt_cap ? wr->attempt_cap * 2 : 64;
        wr->attempt_cmds = sg_xrealloc(wr->attempt_cmds, wr->attempt_cap * sizeof(cmd));
    }
    wr->attempt_cmds[r] = cmd;
}

void worker_write_attempt_done(worker_t *w, const char *const vals[6])
{
    row_add(&w->writes->t[T_ATTEMPT_DONE], vals);
}

void worker_write_message(worker_t *w, int64_t delay_ms, const char *topic, const char *key,
                          const char *headers, const char *payload)
{
    if (delay_ms > 0) {
        const char *vals[] = {SG_PG_INT(delay_ms), topic, key, headers, payload};
        row_add(&w->writes->t[T_TIMER], vals);
    } else {
        const char *vals[] = {topic, key, headers, payload};
        row_add(&w->writes->t[T_OUTBOX], vals);
    }
}

/* A row written before in this flush generation is updated in place:
 * state columns take the new value, the "unchanged when NULL" columns
 * (from `keep` on) only a non-NULL one. */
static void upsert(worker_writes_t *wr, int k, worker_slot_t *slot, const char *const *vals,
                   int keep)
{
    table_t *t = &wr->t[k];

    if (slot->gen != wr->gen) {
        slot->row = row_add(t, vals);
        slot->gen = wr->gen;
        return;
    }
    for (int c = 0; c < t->ncols; c++)
        if (c < keep || vals[c])
            cell_set(t, slot->row, c, vals[c]);
}

void worker_write_step(worker_t *w, worker_slot_t *slot, const char *const vals[13])
{
    upsert(w->writes, T_STEP, slot, vals, 6);
}

void worker_write_saga(worker_t *w, worker_slot_t *slot, const char *const vals[5])
{
    upsert(w->writes, T_SAGA, slot, vals, 4);
}
