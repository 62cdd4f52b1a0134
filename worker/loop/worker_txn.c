/* The worker's transactions (txn_slot_t): a batch of ready commands and
 * returned calls decided in two pipelined round trips on one of
 * worker.transactions_in_flight connections, and what follows a commit
 * (calls to the pool, offsets move) or a failure (fenced, reconnect, a
 * refused command split out, at last dead-lettered).  Calls
 * worker_saga_sql.c (load, decide and apply) and, below it in the loop,
 * worker_parts/session/chain/cmdq.c. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_run.h"
#include "worker_loop_int.h"

/* Tries of a message's dead letter that PostgreSQL refuses before a
 * reduced one is written instead (poison_single). */
#define DEAD_LETTER_TRIES 3

/* ---- one transaction ---------------------------------------------------- */

static int cmp_saga(const void *a, const void *b)
{
    return strcmp(((const worker_saga_t *)a)->saga_id, ((const worker_saga_t *)b)->saga_id);
}

static worker_saga_t *find_saga(worker_saga_t *sagas, size_t n, const char *id)
{
    worker_saga_t key;

    key.saga_id = id;
    return id[0] ? bsearch(&key, sagas, n, sizeof(*sagas), cmp_saga) : NULL;
}

/* The array parameters of load_state(): every saga of the batch; (saga,
 * step, phase, generation, attempt) of each step command; (saga,
 * definition) of each saga.start. */
enum {
    A_IDS,
    A_STEP_SAGA,
    A_STEP_IDX,
    A_STEP_PHASE,
    A_STEP_GEN,
    A_STEP_ATTEMPT,
    A_START_SAGA,
    A_START_DEF,
    A_CTL_SAGA,
    A_CTL_ID,
    NARRAYS
};

/* A control command to decide here (not one to forward, worker_forward()). */
static bool is_control(const worker_cmd_t *cmd)
{
    return cmd->state == CMD_READY && !cmd->forward &&
           (cmd->dec.type == SG_CMD_CANCEL || cmd->dec.type == SG_CMD_APPROVE ||
            cmd->dec.type == SG_CMD_REJECT);
}

static const char *control_id(const worker_cmd_t *cmd)
{
    return sg_json_string(sg_json_member(cmd->dec.doc, "id"));
}

/* The load's answers, in the slot (res[]). */
enum { R_LOAD, R_COUNTS, R_CONFLICTS, R_CONTROLS, NRES };
_Static_assert(NRES == sizeof(((txn_slot_t *)0)->res) / sizeof(sg_pg_res_t *), "txn_slot_t.res");

/* Round trip 1, sent and not waited for: BEGIN, the saga rows (locked),
 * the attempt rows of step commands (crash detection), the definitions of
 * resubmitted sagas, the control commands already in their saga's
 * history; their answers go to the current slot's res[]. */
static int load_state(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    sg_pg_res_t **res = L->cur->res;
    const char **items = sg_xcalloc(NARRAYS * (n + 1), sizeof(char *)), **a[NARRAYS], *p[NARRAYS];
    char(*nums)[3][16] = sg_xcalloc(n + 1, sizeof(*nums));
    sg_pg_buf_t b[NARRAYS] = {{0}};
    size_t nids = 0, nc = 0, ns = 0, nk = 0;
    int rc;

    for (size_t k = 0; k < NARRAYS; k++)
        a[k] = items + k * (n + 1);
    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *cmd = batch[i];
        if (!cmd->dec.saga_id[0] || cmd->dec.type == SG_CMD_POISON || cmd->copy || cmd->forward)
            continue;
        a[A_IDS][nids++] = cmd->dec.saga_id;
        if (cmd->state == CMD_READY &&
            (cmd->dec.type == SG_CMD_EXECUTE || cmd->dec.type == SG_CMD_COMPENSATE)) {
            snprintf(nums[nc][0], 16, "%d", cmd->dec.step);
            snprintf(nums[nc][1], 16, "%d", cmd->dec.generation);
            snprintf(nums[nc][2], 16, "%d", cmd->dec.attempt);
            a[A_STEP_SAGA][nc] = cmd->dec.saga_id;
            a[A_STEP_IDX][nc] = nums[nc][0];
            a[A_STEP_PHASE][nc] = cmd->dec.type == SG_CMD_COMPENSATE ? "compensate" : "forward";
            a[A_STEP_GEN][nc] = nums[nc][1];
            a[A_STEP_ATTEMPT][nc] = nums[nc][2];
            nc++;
        } else if (cmd->state == CMD_READY && cmd->dec.type == SG_CMD_START) {
            a[A_START_SAGA][ns] = cmd->dec.saga_id;
            a[A_START_DEF][ns] = worker_cmd_definition(cmd);
            ns++;
        } else if (is_control(cmd) && control_id(cmd)) {
            a[A_CTL_SAGA][nk] = cmd->dec.saga_id;
            a[A_CTL_ID][nk] = control_id(cmd);
            nk++;
        }
    }
    for (size_t k = 0; k < NARRAYS; k++) {
        sg_pg_array_literal(&b[k], a[k],
                            k == A_IDS         ? nids
                            : k < A_START_SAGA ? nc
                            : k < A_CTL_SAGA   ? ns
                                               : nk);
        p[k] = b[k].data;
    }
    if (sg_pg_pipe_begin(L->w.pg, err) < 0) {
        rc = -1;
        goto out;
    }
    sg_pg_pipe_send(L->w.pg, "BEGIN", 0, NULL, NULL);
    sg_pg_pipe_send(L->w.pg, worker_sql_load, 1, &p[A_IDS], &res[R_LOAD]);
    if (nc)
        sg_pg_pipe_send(
            L->w.pg,
            "SELECT u.saga_id, count(*) FILTER (WHERE a.finished_at IS NULL OR "
            "a.error_code = 'runtime.interrupted'), count(*) FILTER (WHERE a.finished_at IS "
            "NOT NULL AND a.error_code IS DISTINCT FROM 'runtime.interrupted') "
            "FROM unnest($1::text[], $2::int[], $3::text[], $4::int[], $5::int[]) "
            "AS u(saga_id, step, phase, gen, attempt) JOIN attempts a ON a.saga_id = u.saga_id "
            "AND a.step_idx = u.step AND a.phase = u.phase AND a.generation = u.gen AND "
            "a.attempt = u.attempt GROUP BY u.saga_id",
            5, &p[A_STEP_SAGA], &res[R_COUNTS]);
    if (ns)
        sg_pg_pipe_send(L->w.pg,
                        "SELECT s.saga_id, s.definition = u.def FROM unnest($1::text[], "
                        "$2::jsonb[]) AS u(id, def) JOIN sagas s ON s.saga_id = u.id",
                        2, &p[A_START_SAGA], &res[R_CONFLICTS]);
    if (nk)
        sg_pg_pipe_send(L->w.pg,
                        "SELECT DISTINCT c.saga_id, c.command_id FROM unnest($1::text[], "
                        "$2::text[]) AS u(saga_id, id) JOIN saga_controls c ON c.saga_id = "
                        "u.saga_id AND c.command_id = u.id",
                        2, &p[A_CTL_SAGA], &res[R_CONTROLS]);
    if (sg_pg_pipe_sync(L->w.pg, err) < 0) {
        /* txn_decide() reports it: the pipeline is left there */
    }
    rc = 0;
out:
    free(items);
    free(nums);
    for (size_t k = 0; k < NARRAYS; k++)
        sg_pg_buf_free(&b[k]);
    return rc;
}

/* A control command is decided once per (saga, command id) and answered
 * once: one its saga's history (saga_controls) already holds was decided
 * by an earlier owner of the partition, whose offset did not commit
 * before a crash or a drain timeout, or that came twice (issue 35 item 4:
 * an accepted cancel read again was answered saga.command_refused under
 * the same id); the decision only logs it (worker_saga.c).  Two with one
 * id never meet in one batch: only the head of a saga's queue is ready
 * (worker_cmdq.c), and the next is decided after its commit. */
static void mark_answered(worker_cmd_t **batch, size_t n, const sg_pg_res_t *controls)
{
    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *cmd = batch[i];
        const char *id = is_control(cmd) ? control_id(cmd) : NULL;
        if (!id)
            continue;
        cmd->answered = false;
        for (size_t r = 0; r < sg_pg_res_rows(controls) && !cmd->answered; r++)
            cmd->answered = strcmp(sg_pg_res_get(controls, r, 0), cmd->dec.saga_id) == 0 &&
                            strcmp(sg_pg_res_get(controls, r, 1), id) == 0;
    }
}

/* Undoes the in-memory effects of a transaction that did not commit. */
static void undo_batch(worker_cmd_t **batch, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *cmd = batch[i];
        cmd->finishing = false;
        cmd->defer = false;
        if (cmd->calls) {
            cmd->calls = false;
            worker_call_free(&cmd->call);
        }
    }
}

/* The counters are all int64_t: a transaction's part of them is kept as a
 * difference, taken back if it does not commit. */
_Static_assert(sizeof(worker_stats_t) % sizeof(int64_t) == 0, "worker_stats_t: int64_t only");
enum { NSTATS = sizeof(worker_stats_t) / sizeof(int64_t) };

void loop_stats_add(worker_stats_t *to, const worker_stats_t *d, int sign)
{
    int64_t *a = (int64_t *)to;
    const int64_t *b = (const int64_t *)d;

    for (size_t i = 0; i < NSTATS; i++)
        a[i] += sign * b[i];
}

/* Makes t the current transaction: the decisions write through its
 * connection, rows, metrics and chain. */
void loop_use_txn(loop_t *L, txn_slot_t *t)
{
    L->cur = t;
    L->w.pg = t->pg;
    L->w.writes = t->writes;
    L->w.metrics = &t->metrics;
    L->w.spans = &t->spans;
    L->chain_new = &t->chain_new;
}

/* Undoes what the current transaction, which did not commit, did in
 * memory. */
static void txn_abort(loop_t *L, worker_cmd_t **batch, size_t n)
{
    sg_pg_rollback(L->w.pg);
    worker_writes_discard(L->w.writes);
    undo_batch(batch, n);
    loop_chain_discard(L);
    sg_metrics_batch_discard(L->w.metrics);
    sg_span_list_discard(L->w.spans);
    loop_stats_add(&L->w.stats, &L->cur->delta, -1);
    memset(&L->cur->delta, 0, sizeof(L->cur->delta));
}

/* The load's answers and what they hold, dropped. */
static void load_free(txn_slot_t *t)
{
    for (size_t i = 0; i < NRES; i++) {
        sg_pg_res_destroy(t->res[i]);
        t->res[i] = NULL;
    }
}

int loop_txn_start(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    memset(&L->cur->delta, 0, sizeof(L->cur->delta));
    for (size_t i = 0; i < n; i++)
        if (batch[i]->state == CMD_READY && !batch[i]->copy &&
            (batch[i]->dec.type == SG_CMD_EXECUTE || batch[i]->dec.type == SG_CMD_COMPENSATE))
            batch[i]->copy = loop_chain_take(L, batch[i]);
    if (load_state(L, batch, n, err) < 0) {
        txn_abort(L, batch, n);
        return -1;
    }
    L->cur->loading = true;
    return 0;
}

/* The current slot's transaction over batch, its load sent
 * (loop_txn_start()): the load's answers read (waited for, when they are
 * not all there), every command decided, and round trip 2 sent up to its
 * COMMIT without waiting for the answers: txn_collect() reads them.
 * Returns -1 with err, the transaction undone, when it failed before
 * COMMIT was sent. */
static int txn_decide(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    sg_pg_res_t **res = L->cur->res;
    sg_pg_res_t *load, *counts, *conflicts, *controls;
    worker_saga_t *sagas = NULL;
    size_t nsagas = 0, row = 0;
    int rc = -1;
    /* Counted only if the transaction commits: a rolled-back batch is
     * decided again and would count twice. */
    worker_stats_t before = L->w.stats;

    L->cur->loading = false;
    sg_metrics_batch_discard(L->w.metrics);
    sg_span_list_discard(L->w.spans);
    L->w.outbox_written = L->w.timers_written = false;
    if (sg_pg_pipe_collect(L->w.pg, err) < 0)
        goto out;
    load = res[R_LOAD];
    counts = res[R_COUNTS];
    conflicts = res[R_CONFLICTS];
    controls = res[R_CONTROLS];
    mark_answered(batch, n, controls);
    /* A saga is 11 KB (its step table): the array is kept from batch to
     * batch, as zeroing and freeing megabytes per transaction showed in
     * profiles.  worker_saga_load() clears each saga it fills. */
    if (L->sagas_cap < n + 1) {
        free(L->sagas_buf);
        L->sagas_cap = n + 1;
        L->sagas_buf = sg_xmalloc(L->sagas_cap * sizeof(*sagas));
    }
    sagas = L->sagas_buf;
    while (row < sg_pg_res_rows(load))
        worker_saga_load(&sagas[nsagas++], load, &row);
    qsort(sagas, nsagas, sizeof(*sagas), cmp_saga);
    for (size_t r = 0; r < sg_pg_res_rows(counts); r++) {
        worker_saga_t *s = find_saga(sagas, nsagas, sg_pg_res_get(counts, r, 0));
        if (s) {
            s->interrupted = sg_pg_res_int(counts, r, 1, 0);
            s->finished = sg_pg_res_int(counts, r, 2, 0);
        }
    }
    for (size_t r = 0; r < sg_pg_res_rows(conflicts); r++) {
        worker_saga_t *s = find_saga(sagas, nsagas, sg_pg_res_get(conflicts, r, 0));
        if (s)
            s->same_definition = strcmp(sg_pg_res_get(conflicts, r, 1), "t") == 0;
    }

    /* Round trip 2: every decision's statements, the fences, COMMIT. */
    if (sg_pg_pipe_begin(L->w.pg, err) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *cmd = batch[i];
        worker_saga_t *s = cmd->dec.type == SG_CMD_POISON || cmd->copy || cmd->forward
                               ? NULL
                               : find_saga(sagas, nsagas, cmd->dec.saga_id);
        cmd->part->touched = true;
        if (cmd->copy) {
            /* Its chained command ran here: only the offset moves. */
            cmd->finishing = true;
            L->w.stats.copies++;
            sg_metrics_batch_inc(L->w.metrics, SG_M_CHAINED, SG_LABELS("copy"));
            continue;
        }
        if (cmd->forward) {
            /* Into the internal topic, with the offset that read it. */
            worker_forward(&L->w, cmd, (int64_t)time(NULL));
            cmd->finishing = true;
            continue;
        }
        if (cmd->state == CMD_READY) {
            worker_saga_decide(&L->w, cmd, s);
            cmd->finishing = !cmd->calls && !cmd->defer;
        } else {
            worker_saga_complete(&L->w, cmd, s);
            cmd->finishing = true;
        }
        /* A saga.start that created its saga chains its first step
         * from the saga as written. */
        loop_chain_follow(L, cmd, s ? s : cmd->fresh ? &cmd->fresh->saga : NULL);
        worker_fresh_free(cmd->fresh);
        cmd->fresh = NULL;
    }
    worker_writes_flush(&L->w);
    for (size_t i = 0; i < n; i++)
        batch[i]->txn = L->cur;
    for (size_t i = 0; i < L->chain_new->n; i++)
        L->chain_new->v[i]->txn = L->cur;
    loop_send_fences(L);
    sg_pg_pipe_send(L->w.pg, "COMMIT", 0, NULL, NULL);
    /* After the COMMIT, before the sync: a transaction of its own (see
     * SG_OUTBOX_NOTIFY_OFF), skipped when the one before failed. */
    if (L->w.timers_written)
        sg_pg_pipe_send(L->w.pg, SG_OUTBOX_NOTIFY_TIMERS, 0, NULL, NULL);
    else if (L->w.outbox_written)
        sg_pg_pipe_send(L->w.pg, SG_OUTBOX_NOTIFY, 0, NULL, NULL);
    if (sg_pg_pipe_sync(L->w.pg, err) < 0) {
        /* txn_collect() reports it and rolls back */
    }
    rc = 0;
out:
    L->cur->delta = L->w.stats;
    loop_stats_add(&L->cur->delta, &before, -1);
    if (rc < 0)
        txn_abort(L, batch, n);
    for (size_t i = 0; i < L->nparts; i++)
        L->parts[i]->touched = false;
    load_free(L->cur);
    return rc;
}

int loop_txn_send(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    if (loop_txn_start(L, batch, n, err) < 0)
        return -1;
    return txn_decide(L, batch, n, err);
}

/* Reads the answers of the current transaction, which txn_decide() sent.
 * Returns 0 when it committed; -1 with err, the transaction undone, when
 * not. */
static int txn_collect(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    if (sg_pg_pipe_collect(L->w.pg, err) < 0) {
        txn_abort(L, batch, n);
        return -1;
    }
    if (worker_writes_committed(L->w.writes) > 0)
        sg_log_kv(
            SG_LOG_ERROR,
            "attempt rows missing from RETURNING: their outcomes will not be recorded on them",
            NULL);
    sg_metrics_batch_commit(L->w.metrics);
    sg_otel_submit_list(L->otel, L->w.spans);
    loop_pg_state(L, true, NULL);
    return 0;
}

/* One transaction over batch in the current slot, waited for.  Returns 0
 * when committed, -1 with err. */
static int run_txn(loop_t *L, worker_cmd_t **batch, size_t n, sg_err_t *err)
{
    if (loop_txn_send(L, batch, n, err) < 0)
        return -1;
    return txn_collect(L, batch, n, err);
}

/* ---- after the commit --------------------------------------------------- */

/* A committed command: its call goes to the pool, or it is finished and
 * releases its saga. */
static void settle(loop_t *L, worker_cmd_t *cmd)
{
    if (cmd->defer) {
        cmd->defer = false;
        cmd->suspect = true; /* not back to ready (requeue()) */
        loop_vec_push(&L->suspects, cmd);
        return;
    }
    if (cmd == L->isolated && !cmd->calls) {
        /* done alone (with or without a call): the next suspect may run */
        L->isolated = NULL;
        cmd->isolated = false;
    }
    if (cmd->calls) {
        /* Read before the pool has it.  A chained command keeps its
         * place (its copy is matched behind it), unless it is a group's
         * member: its copy then waits beside it, out of the queue
         * (worker_chain.c, hold()). */
        bool detach = cmd->call.detach;
        cmd->calls = false;
        loop_cmd_set_state(cmd, CMD_CALLING);
        L->calling++;
        cmd->call_t0 = L->last_submit_us = sg_run_now_us();
        worker_pool_submit(L->pool, cmd, &cmd->call, &cmd->result);
        if (detach)
            loop_saga_detach(L, cmd);
        if (detach && cmd->chained)
            loop_chain_detached(L, cmd);
        return;
    }
    cmd->finishing = false;
    loop_cmd_set_state(cmd, CMD_FINISHED);
    loop_active_add(L, cmd, -1);
    loop_saga_dequeue(L, cmd);
    loop_retire(L, cmd);
}

/* After a commit: finished commands release their saga and the offset
 * moves; decided calls go to the pool. */
static void after_commit(loop_t *L, worker_cmd_t **batch, size_t n)
{
    loop_chain_place(L);
    for (size_t i = 0; i < n; i++)
        settle(L, batch[i]);
    for (size_t i = 0; i < L->chain_new->n; i++)
        settle(L, L->chain_new->v[i]);
    L->chain_new->n = 0;
    worker_pool_flush(L->pool);
    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *p = L->parts[i];
        int64_t wm = loop_part_watermark(p, NULL);
        loop_part_pop_finished(L, p);
        if (wm > p->stored)
            p->stored = wm;
    }
    loop_kafka_commit(L, NULL);
}

/* ---- after a failure ---------------------------------------------------- */

/* A command PostgreSQL refuses on its own: its outcome becomes a dead
 * letter (or, for a call's outcome, a permanent failure of the step). */
static void poison_single(loop_t *L, worker_cmd_t *cmd, const sg_err_t *why)
{
    sg_log_ctx_t ctx;
    sg_err_t err;

    if (cmd->chained) {
        /* The dead letter needs its message: parked until it comes. */
        worker_result_clear(&cmd->result);
        worker_result_error(&cmd->result, SG_ERRCLASS_POISON, "runtime.pg.rejected",
                            "the tool's answer could not be stored: %s", why->message);
        loop_chain_park(L, cmd);
        return;
    }
    if (cmd->state == CMD_RETURNED && strcmp(cmd->result.err.code, "runtime.pg.rejected") != 0) {
        worker_result_clear(&cmd->result);
        worker_result_error(&cmd->result, SG_ERRCLASS_POISON, "runtime.pg.rejected",
                            "the tool's answer could not be stored: %s", why->message);
        if (run_txn(L, &cmd, 1, &err) == 0) {
            after_commit(L, &cmd, 1);
            return;
        }
    }
    /* Last resort: decided again as poison, the message itself becomes a
     * dead letter, through the same transaction path as any other. */
    loop_cmd_set_state(cmd, CMD_READY);
    cmd->dec.type = SG_CMD_POISON;
    cmd->forward = false;
    sg_err_set(&cmd->dec.err, SG_ERRCLASS_POISON, "runtime.pg.rejected",
               "PostgreSQL refused to store the outcome of this message: %s", why->message);
    if (run_txn(L, &cmd, 1, &err) == 0) {
        after_commit(L, &cmd, 1);
        return;
    }
    loop_cmd_ctx(cmd, &ctx);
    ctx.error_code = err.code;
    /* Never the same refused insert for ever (the partition would stop):
     * after a few tries, a dead letter of what surely fits, and why. */
    if (++cmd->dl_refused >= DEAD_LETTER_TRIES && !cmd->dl_minimal) {
        cmd->dl_minimal = true;
        sg_log(SG_LOG_WARN, &ctx,
               "PostgreSQL refused this message's dead letter %d times; writing a reduced one "
               "(its headers left out, its message escaped): %s",
               cmd->dl_refused, err.message);
        if (run_txn(L, &cmd, 1, &err) == 0) {
            after_commit(L, &cmd, 1);
            return;
        }
    }
    sg_log(SG_LOG_ERROR, &ctx, "could not even dead-letter a message; will retry: %s", err.message);
}

static void process(loop_t *L, worker_cmd_t **batch, size_t n);

/* After the transaction over batch, begun at t0 (us), committed (rc 0):
 * the commands settle.  Failed (rc -1, err): lost partitions and lost
 * connections are sorted out, and a refused batch is split so one bad
 * command cannot hold up the others. */
static void txn_done(loop_t *L, worker_cmd_t **batch, size_t n, int rc, const sg_err_t *err,
                     uint64_t t0)
{
    L->txns++;
    L->txn_cmds += n;
    L->txn_us += sg_run_now_us() - t0;
    if (rc == 0) {
        L->pg_failures = 0;
        after_commit(L, batch, n);
        return;
    }
    /* What follows (a check of the fences that drops partitions, a
     * reconnect, transactions of one command each) runs with no other
     * transaction out, on this one's connection. */
    {
        txn_slot_t *t = L->cur;
        loop_collect(L, true);
        loop_use_txn(L, t);
    }
    if (strcmp(err->code, "pg.fenced") == 0) {
        sg_log_kv(SG_LOG_WARN, "fenced: a partition was taken over", "error", err->message, NULL);
        loop_check_fences(L);
        return; /* the rest is retried next turn */
    }
    if (err->cls != SG_ERRCLASS_PERMANENT || !sg_pg_ok(L->w.pg)) {
        loop_pg_recover(L, err);
        return;
    }
    if (n > 1) {
        for (size_t i = 0; i < n; i++)
            if (!batch[i]->abandoned)
                process(L, &batch[i], 1);
        return;
    }
    {
        sg_log_ctx_t ctx;
        loop_cmd_ctx(batch[0], &ctx);
        ctx.error_code = err->code;
        sg_log(SG_LOG_WARN, &ctx, "PostgreSQL refused a command's outcome: %s", err->message);
    }
    poison_single(L, batch[0], err);
}

/* Runs the batch and waits for it. */
static void process(loop_t *L, worker_cmd_t **batch, size_t n)
{
    sg_err_t err;
    uint64_t t0 = sg_run_now_us();
    int rc = run_txn(L, batch, n, &err);

    txn_done(L, batch, n, rc, &err, t0);
}

/* ---- transactions out --------------------------------------------------- */

/* What of batch did not commit goes back to the front of its queue, in
 * order. */
static void requeue(loop_t *L, worker_cmd_t **batch, size_t n)
{
    vec_t keep_r = {0}, keep_d = {0};

    for (size_t i = 0; i < n; i++) {
        worker_cmd_t *cmd = batch[i];
        if (cmd->abandoned || cmd->suspect)
            continue;
        if (cmd->state == CMD_RETURNED)
            loop_vec_push(&keep_r, cmd);
        else if (cmd->state == CMD_READY)
            loop_vec_push(&keep_d, cmd);
    }
    for (size_t i = 0; i < L->returned.n; i++)
        loop_vec_push(&keep_r, L->returned.v[i]);
    for (size_t i = 0; i < L->ready.n; i++)
        loop_vec_push(&keep_d, L->ready.v[i]);
    free(L->returned.v);
    free(L->ready.v);
    L->returned = keep_r;
    L->ready = keep_d;
}

/* Settles a transaction that was sent: what did not commit goes back to
 * its queue (a commit settles every command of its batch). */
void loop_txn_settle(loop_t *L, worker_cmd_t **batch, size_t n, int rc, const sg_err_t *err,
                     uint64_t t0)
{
    txn_done(L, batch, n, rc, err, t0);
    if (rc < 0)
        requeue(L, batch, n);
    free(batch);
}

/* Waits for transaction t, if it is out, and settles it.  True when it
 * was out. */
static bool collect_pending(loop_t *L, txn_slot_t *t)
{
    worker_cmd_t **batch = t->batch;
    size_t n = t->n;
    sg_err_t err;
    int rc;

    if (!batch)
        return false;
    t->batch = NULL; /* what follows may run transactions of its own */
    loop_use_txn(L, t);
    rc = txn_collect(L, batch, n, &err);
    loop_txn_settle(L, batch, n, rc, &err, t->t0);
    return true;
}

/* Transaction t, whose load is out, decided and its second round trip
 * sent: when it fails before its COMMIT was sent, it is settled here. */
static void decide_pending(loop_t *L, txn_slot_t *t)
{
    sg_err_t err;

    loop_use_txn(L, t);
    if (txn_decide(L, t->batch, t->n, &err) == 0)
        return;
    {
        worker_cmd_t **batch = t->batch;

        t->batch = NULL; /* what follows may run transactions of its own */
        loop_txn_settle(L, batch, t->n, -1, &err, t->t0);
    }
}

/* Waits up to 100 ms for PostgreSQL to answer any transaction out. */
static void wait_answers(const loop_t *L)
{
    struct pollfd fds[MAX_TXNS];
    nfds_t n = 0;

    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].batch && sg_pg_socket(L->slots[i].pg) >= 0) {
            fds[n].fd = sg_pg_socket(L->slots[i].pg);
            fds[n].events = POLLIN;
            fds[n++].revents = 0;
        }
    if (poll(n ? fds : NULL, n, n ? 100 : 10) < 0 && errno != EINTR)
        sg_log_kv(SG_LOG_WARN, "poll failed", "error", strerror(errno), NULL);
}

/* The transactions out whose load has been answered, decided; those
 * whose commit has, collected.  With wait, until none is out: what uses
 * a connection for anything else (a rebalance, a drain's end, a failed
 * transaction's aftermath) comes here first.  Each pass takes every
 * answer already there before it waits for more, on every connection at
 * once: a transaction whose load was answered holds its sagas' rows until
 * it is decided and commits, so waiting for the other one's load first
 * could wait for ever on a lock that this one holds up (another session
 * holding a row the other needs, and waiting for one of this one's; no
 * deadlock PostgreSQL can see, as this one is only idle).  At a forced
 * stop nothing is collected: what is out is left to PostgreSQL, which
 * rolls it back when the connection closes, and its commands may have
 * been freed with their partition.  True when one was decided or
 * collected. */
bool loop_collect(loop_t *L, bool wait)
{
    bool any = false;

    if (sg_run_stop_now)
        return false;
    for (;;) {
        bool progress = false;

        for (int i = 0; i < L->nslots; i++) {
            txn_slot_t *t = &L->slots[i];
            if (t->batch && t->loading && sg_pg_pipe_answered(t->pg)) {
                decide_pending(L, t);
                progress = true;
            }
            if (t->batch && !t->loading && sg_pg_pipe_answered(t->pg))
                progress |= collect_pending(L, t);
        }
        any |= progress;
        if (!wait || !loop_txn_out(L) || sg_run_stop_now)
            return any;
        if (!progress)
            wait_answers(L);
    }
}

bool loop_txn_out(const loop_t *L)
{
    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].batch)
            return true;
    return false;
}
