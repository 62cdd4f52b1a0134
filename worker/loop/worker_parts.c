/* The partitions this worker owns, of the commands and the internal topic
 * (L->parts, in (topic, partition) order): taking one with a new owner
 * epoch, the offsets (fetched, stored in PostgreSQL,
 * copied to Kafka), the first unfinished offset each transaction stores
 * through sagad_fence(), and losing a partition (fenced, revoked, shut
 * down), which abandons its commands.  Calls down into worker_session.c,
 * worker_chain.c and worker_cmdq.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_run.h"
#include "worker_loop_int.h"

/* ---- the partitions and their commands ---------------------------------- */

/* First unfinished offset of the partition: where a restart must begin,
 * once transaction t (NULL: none) commits.  The commands another
 * transaction finishes are unfinished until that one commits. */
int64_t loop_part_watermark(const worker_part_t *p, const txn_slot_t *t)
{
    for (const worker_cmd_t *cmd = p->head; cmd; cmd = cmd->part_next)
        if (cmd->state != CMD_FINISHED && !(cmd->finishing && cmd->txn == t) && !cmd->chained)
            return cmd->offset;
    return p->next_fetch;
}

/* Unlinks the finished prefix of the partition's FIFO.  The commands are
 * freed at the end of the turn, not here: the batch that finished them
 * (worker_loop.c's turn(), worker_txn.c's process()) still reads them after the commit. */
void loop_part_pop_finished(loop_t *L, worker_part_t *p)
{
    while (p->head && p->head->state == CMD_FINISHED) {
        worker_cmd_t *cmd = p->head;
        loop_part_unlink(p, cmd);
        loop_vec_push(&L->graveyard, cmd);
    }
}

/* Drops every command of a partition this worker no longer owns: nothing
 * of it may commit.  Calls still running are freed when they return. */
static void part_abandon(loop_t *L, worker_part_t *p, const char *why)
{
    size_t n = 0;

    while (p->head) {
        worker_cmd_t *cmd = p->head;
        p->head = cmd->part_next;
        if (cmd->state != CMD_FINISHED) {
            n++;
            loop_saga_dequeue(L, cmd);
            loop_vec_remove(&L->ready, cmd);
            loop_vec_remove(&L->returned, cmd);
            loop_vec_remove(&L->suspects, cmd);
            if (cmd == L->isolated)
                L->isolated = NULL;
        }
        cmd->abandoned = true;
        cmd->part = NULL;
        cmd->held_copy = NULL; /* in this FIFO too, and dropped with it */
        /* A running call is freed when it returns; the rest at the end of
         * the turn (a batch in progress may still point at them). */
        if (cmd->state != CMD_CALLING)
            loop_vec_push(&L->graveyard, cmd);
    }
    p->tail = NULL;
    loop_chain_forget(L, p);
    if (n) {
        sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
        ctx.topic = p->topic_name;
        ctx.partition = p->partition;
        sg_log(SG_LOG_WARN, &ctx,
               "abandoned %zu unfinished commands (%s); the partition's next owner redoes them", n,
               why);
    }
}

/* A partition that is not ours any more: its commands are abandoned and
 * the partition forgotten. */
void loop_part_drop(loop_t *L, worker_part_t *p, const char *why)
{
    char pstr[16];

    part_abandon(L, p, why);
    snprintf(pstr, sizeof(pstr), "%d", (int)p->partition);
    sg_metric_hide(SG_M_CONSUMER_LAG, SG_LABELS(p->topic_name, pstr));
    for (size_t i = 0; i < L->nparts; i++)
        if (L->parts[i] == p) {
            memmove(&L->parts[i], &L->parts[i + 1], sizeof(*L->parts) * (L->nparts - i - 1));
            L->nparts--;
            break;
        }
    free(p);
}

/* ---- ownership ---------------------------------------------------------- */

/* L->parts is kept in (topic, partition) order: loop_send_fences()
 * updates the offset rows in that order, so two transactions out at once
 * lock them in the same order and cannot deadlock. */
static int cmp_part(const void *a, const void *b)
{
    const worker_part_t *x = *(worker_part_t *const *)a, *y = *(worker_part_t *const *)b;

    if (x->topic != y->topic)
        return x->topic < y->topic ? -1 : 1;
    return (x->partition > y->partition) - (x->partition < y->partition);
}

/* The partition's log ends before the offset kept in PostgreSQL: the
 * topic was deleted and made again, or the broker lost its data (an
 * unclean leader election cuts the log back).  Every message it now
 * holds came after what was consumed, yet sits below the stored offset,
 * where intake would skip it as already taken: its sagas would never run.
 * The stored offset goes back to the log's first offset instead (for our
 * epoch only); a command already handled before the loss, if one comes
 * again, is recognised by its saga's state and has no second effect.  (A
 * new leader whose high watermark lags for a moment after a failover
 * would land here too: the cost is handling the log again, still with no
 * second effect.)  When the leader does not answer in 2 s, the check waits
 * for the next assignment. */
static void log_reset(loop_t *L, worker_part_t *p)
{
    int64_t low, high;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    sg_err_t err;

    if (p->stored == 0 ||
        sg_kafka_query_watermarks(L->consumers[p->topic], p->topic_name, p->partition, 2000, &low,
                                  &high) < 0 ||
        p->stored <= high)
        return;
    const char *params[] = {L->w.group, p->topic_name, SG_PG_INT(p->partition), SG_PG_INT(p->epoch),
                            SG_PG_INT(low)};
    ctx.topic = p->topic_name;
    ctx.partition = p->partition;
    ctx.offset = p->stored;
    /* Consumed from low whatever this says: should it fail, the fences
     * keep the old offset (they never lower it) and the partition's next
     * owner goes back again, with no second effect. */
    if (sg_pg_exec(L->w.pg,
                   "UPDATE consumer_offsets SET next_offset = $5::bigint, updated_at = now() "
                   "WHERE group_id = $1 AND topic = $2 AND partition = $3::int AND "
                   "owner_epoch = $4::bigint",
                   5, params, NULL, &err) < 0)
        sg_log(SG_LOG_WARN, &ctx, "cannot move the stored offset back: %s", err.message);
    sg_log(SG_LOG_ERROR, &ctx,
           "the partition's log ends at offset %lld, before the offset kept in PostgreSQL: "
           "the topic was made again or the broker lost data; consuming from its first "
           "offset, %lld (commands handled before are recognised and have no second effect)",
           (long long)high, (long long)low);
    p->stored = p->next_fetch = low;
}

int64_t loop_take_partition(loop_t *L, loop_topic_t topic, int32_t partition)
{
    const char *name = topic == LOOP_TOPIC_INTERNAL ? L->w.topic_internal : L->w.topic_commands;
    const char *params[] = {L->w.group, name, SG_PG_INT(partition), L->w.worker_id};
    sg_pg_res_t *res = NULL;
    worker_part_t *p;
    sg_err_t err;

    while (sg_pg_exec(L->w.pg,
                      "INSERT INTO consumer_offsets (group_id, topic, partition, next_offset, "
                      "owner_epoch, owner) VALUES ($1, $2, $3::int, 0, 1, $4) "
                      "ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
                      "owner_epoch = consumer_offsets.owner_epoch + 1, owner = EXCLUDED.owner, "
                      "updated_at = now() RETURNING next_offset, owner_epoch",
                      4, params, &res, &err) < 0) {
        if (!sg_run_running)
            return -1;
        loop_pg_recover(L, &err);
    }
    L->pg_failures = 0;
    if ((p = loop_part_find(L, (int)topic, partition))) /* a stale one: start over */
        part_abandon(L, p, "assigned again");
    else {
        p = sg_xcalloc(1, sizeof(*p));
        L->parts = sg_xrealloc(L->parts, sizeof(*L->parts) * (L->nparts + 1));
        L->parts[L->nparts++] = p;
    }
    p->topic = topic;
    p->topic_name = name;
    p->partition = partition;
    qsort(L->parts, L->nparts, sizeof(*L->parts), cmp_part);
    /* Partitions may have been added, which moves keys: chaining needs
     * the count the relay's producer partitions by. */
    loop_refresh_partitions(L, 2000);
    p->next_fetch = p->stored = sg_pg_res_int(res, 0, 0, 0);
    p->in_kafka = -1; /* Kafka's copy may be older: the next commit sends it */
    p->epoch = sg_pg_res_int(res, 0, 1, 0);
    sg_pg_res_destroy(res);
    {
        sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
        ctx.topic = name;
        ctx.partition = partition;
        ctx.offset = p->next_fetch;
        sg_log(SG_LOG_INFO, &ctx,
               "partition taken with owner epoch %lld; fetching from the offset "
               "kept in PostgreSQL",
               (long long)p->epoch);
    }
    log_reset(L, p);
    return p->next_fetch;
}

/* ---- offsets and fences ------------------------------------------------ */

/* The offsets of the partitions the transaction touched, through
 * sagad_fence() (which refuses a partition another worker owns now), in
 * one statement for all of them, in (topic, partition) order (L->parts's;
 * unnest keeps it). */
void loop_send_fences(loop_t *L)
{
    char(*nums)[3][24] = sg_xcalloc(L->nparts + 1, sizeof(*nums));
    const char **items = sg_xcalloc(4 * (L->nparts + 1), sizeof(char *));
    sg_pg_buf_t lit[4] = {{0}};
    const char *params[5] = {L->w.group};
    size_t n = 0;

    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *p = L->parts[i];
        if (!p->touched)
            continue;
        items[n] = p->topic_name;
        snprintf(nums[n][0], 24, "%d", (int)p->partition);
        snprintf(nums[n][1], 24, "%lld", (long long)p->epoch);
        snprintf(nums[n][2], 24, "%lld", (long long)loop_part_watermark(p, L->cur));
        for (int k = 0; k < 3; k++)
            items[(k + 1) * (L->nparts + 1) + n] = nums[n][k];
        n++;
    }
    for (int k = 0; k < 4; k++) {
        sg_pg_array_literal(&lit[k], items + k * (L->nparts + 1), n);
        params[1 + k] = lit[k].data;
    }
    if (n)
        sg_pg_pipe_send(L->w.pg,
                        "SELECT sagad_fence($1, u.t, u.p, u.e, u.n) FROM unnest($2::text[], "
                        "$3::int[], $4::bigint[], $5::bigint[]) AS u(t, p, e, n)",
                        5, params, NULL);
    for (int k = 0; k < 4; k++)
        sg_pg_buf_free(&lit[k]);
    free(nums);
    free(items);
}

/* Copies the offsets stored in PostgreSQL to Kafka, where lag tools read
 * them: those of every partition, in one request, at most once per
 * worker.kafka_commit_interval_ms (one request per transaction and
 * partition was, at 1,000 steps/s, a thousand writes a second to
 * __consumer_offsets, a broker cost that bought nothing); or only p's, at
 * once (p is being released).  Best effort: the worker itself never reads
 * them back. */
void loop_kafka_commit(loop_t *L, worker_part_t *p)
{
    int32_t *parts;
    int64_t *next;

    if (!L->consumers[LOOP_TOPIC_COMMANDS] || (!p && sg_run_now_ms() < L->next_kafka_commit))
        return;
    if (!p)
        L->next_kafka_commit = sg_run_now_ms() + L->kafka_commit_ms;
    parts = sg_xmalloc(sizeof(*parts) * (L->nparts + 1));
    next = sg_xmalloc(sizeof(*next) * (L->nparts + 1));
    /* One request per topic, by its own consumer. */
    for (int t = 0; t < LOOP_NTOPICS; t++) {
        const char *name = NULL;
        size_t n = 0;
        for (size_t i = 0; i < L->nparts; i++) {
            worker_part_t *q = L->parts[i];
            if ((int)q->topic != t || (p && q != p) || q->stored <= q->in_kafka)
                continue;
            name = q->topic_name;
            parts[n] = q->partition;
            next[n++] = q->in_kafka = q->stored;
        }
        if (n)
            sg_kafka_commit_offsets(L->consumers[t], name, parts, next, n);
    }
    free(parts);
    free(next);
}

/* Which partitions did another worker take?  Those are abandoned. */
void loop_check_fences(loop_t *L)
{
    const char *params[] = {L->w.group, L->w.topic_commands, L->w.topic_internal};
    sg_pg_res_t *res = NULL;
    sg_err_t err;

    if (sg_pg_exec(L->w.pg,
                   "SELECT topic, partition, owner_epoch FROM consumer_offsets WHERE group_id = "
                   "$1 AND topic IN ($2, $3)",
                   3, params, &res, &err) < 0)
        return;
    for (size_t r = 0; r < sg_pg_res_rows(res); r++) {
        worker_part_t *p = loop_part_find(L, loop_topic_find(L, sg_pg_res_get(res, r, 0)),
                                          (int32_t)sg_pg_res_int(res, r, 1, -1));
        if (p && sg_pg_res_int(res, r, 2, 0) != p->epoch) {
            L->w.stats.fenced++;
            loop_part_drop(L, p, "fenced: another worker owns the partition now");
        }
    }
    sg_pg_res_destroy(res);
}
