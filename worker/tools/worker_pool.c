/* The call pool: a fixed set of threads running tool calls.
 *
 * The main loop never blocks on a tool: it submits calls here and learns
 * of finished ones through a pipe it polls beside the Kafka queue.  A
 * tool's concurrency limit holds across the whole worker: a queued call
 * whose tool is at its limit waits while later calls of other tools run.
 *
 * An asynchronous adapter (http) takes a call off a pool thread and
 * finishes it later from its own thread through worker_pool_finish(), so
 * thousands of calls can be in flight on a handful of threads; the tool's
 * slot stays taken until then.  Every call passes the tool's circuit
 * breaker first. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "../worker.h"

struct worker_pending_s {
    struct worker_pending_s *next;
    worker_pool_t *pool;
    void *job;
    worker_call_t *call;
    worker_result_t *out;
    int64_t t0;
    bool admitted, probe; /* by the breaker */
};

typedef worker_pending_t pool_job_t;

struct worker_pool_s {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pool_job_t *queue, *queue_tail;
    int idle; /* threads waiting on cond */
    /* Submitted and not yet flushed (the loop's thread only): a batch's
     * calls go to the queue under one lock, with one wake-up per thread
     * they need, not one per call (worker_pool_flush()). */
    pool_job_t *staged, *staged_tail;
    int nstaged;
    void **done;
    size_t ndone, done_cap;
    bool stopping;
    bool joined; /* worker_pool_stop ran */
    int nthreads;
    pthread_t *threads;
    worker_thread_t *ctx;
    int pipe_fd[2];
};

/* The first queued job whose tool has room; unlinked.  Lock held. */
static pool_job_t *take_runnable(worker_pool_t *pool)
{
    pool_job_t *prev = NULL;

    for (pool_job_t *j = pool->queue; j; prev = j, j = j->next) {
        sg_tool_t *tool = (sg_tool_t *)j->call->tool;
        if (tool->concurrency && tool->running >= tool->concurrency)
            continue;
        if (prev)
            prev->next = j->next;
        else
            pool->queue = j->next;
        if (pool->queue_tail == j)
            pool->queue_tail = prev;
        tool->running++;
        return j;
    }
    return NULL;
}

void worker_pool_finish(worker_pending_t *j)
{
    worker_pool_t *pool = j->pool;
    sg_tool_t *tool = (sg_tool_t *)j->call->tool;
    bool was_full, first;
    char b = 1;

    j->out->latency_ms = (int64_t)sg_run_now_ms() - j->t0;
    if (j->admitted)
        worker_breaker_record(j->call->tool, j->out, j->probe);
    pthread_mutex_lock(&pool->lock);
    was_full = tool->concurrency && tool->running >= tool->concurrency;
    tool->running--;
    first = pool->ndone == 0;
    if (pool->ndone == pool->done_cap) {
        pool->done_cap = pool->done_cap ? pool->done_cap * 2 : 64;
        pool->done = sg_xrealloc(pool->done, sizeof(void *) * pool->done_cap);
    }
    pool->done[pool->ndone++] = j->job;
    free(j);
    /* A slot of a tool at its limit freed up: a call of that tool waiting
     * in the queue may run now.  (New calls wake a thread as they come;
     * waking every idle thread on every finished call cost more than the
     * noop calls themselves.) */
    if (was_full)
        pthread_cond_broadcast(&pool->cond);
    /* The loop drains the pipe before it takes the finished calls, so one
     * byte per empty-to-non-empty change is enough to wake it. */
    if (first && write(pool->pipe_fd[1], &b, 1) < 0) {
        /* Full pipe: the loop is awake already. */
    }
    pthread_mutex_unlock(&pool->lock);
}

/* Runs (or hands over) one call; the breaker decides first. */
static void run_job(worker_thread_t *th, pool_job_t *j)
{
    const worker_adapter_t *ad = j->call->tool->adapter;

    j->t0 = (int64_t)sg_run_now_ms();
    j->admitted = worker_breaker_admit(j->call->tool, j->out, &j->probe);
    if (!j->admitted) {
        worker_pool_finish(j);
        return;
    }
    if (ad->start) {
        ad->start(th, j, j->call, j->out);
        return;
    }
    ad->call(th, j->call, j->out);
    worker_pool_finish(j);
}

static void *pool_main(void *arg)
{
    worker_thread_t *th = arg;
    worker_pool_t *pool = th->pool;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        pool_job_t *j = NULL;

        while (!pool->stopping && !(j = take_runnable(pool))) {
            pool->idle++;
            pthread_cond_wait(&pool->cond, &pool->lock);
            pool->idle--;
        }
        if (pool->stopping)
            break;
        pthread_mutex_unlock(&pool->lock);
        run_job(th, j);
        pthread_mutex_lock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->lock);
    sg_pg_destroy(th->pg);
    return NULL;
}

worker_pool_t *worker_pool_new(int threads, const sg_config_t *cfg, volatile sig_atomic_t *stop)
{
    worker_pool_t *pool = sg_xcalloc(1, sizeof(*pool));

    if (pipe(pool->pipe_fd) < 0)
        abort();
    fcntl(pool->pipe_fd[0], F_SETFL, O_NONBLOCK);
    fcntl(pool->pipe_fd[1], F_SETFL, O_NONBLOCK);
    fcntl(pool->pipe_fd[0], F_SETFD, FD_CLOEXEC);
    fcntl(pool->pipe_fd[1], F_SETFD, FD_CLOEXEC);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->cond, NULL);
    pool->nthreads = threads;
    pool->threads = sg_xcalloc((size_t)threads, sizeof(pthread_t));
    pool->ctx = sg_xcalloc((size_t)threads, sizeof(*pool->ctx));
    for (int i = 0; i < threads; i++) {
        worker_thread_t *th = &pool->ctx[i];
        th->cfg = cfg;
        th->stop = stop;
        th->pool = pool;
        if (pthread_create(&pool->threads[i], NULL, pool_main, th) != 0)
            abort();
    }
    return pool;
}

void worker_pool_stop(worker_pool_t *pool)
{
    if (!pool || pool->joined)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < pool->nthreads; i++)
        pthread_join(pool->threads[i], NULL);
    pool->joined = true;
}

void worker_pool_destroy(worker_pool_t *pool)
{
    if (!pool)
        return;
    worker_pool_stop(pool);
    worker_pool_flush(pool);
    while (pool->queue) {
        pool_job_t *j = pool->queue;
        pool->queue = j->next;
        free(j);
    }
    close(pool->pipe_fd[0]);
    close(pool->pipe_fd[1]);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->cond);
    free(pool->done);
    free(pool->threads);
    free(pool->ctx);
    free(pool);
}

void worker_pool_submit(worker_pool_t *pool, void *job, worker_call_t *call, worker_result_t *out)
{
    pool_job_t *j = sg_xcalloc(1, sizeof(*j));

    j->pool = pool;
    j->job = job;
    j->call = call;
    j->out = out;
    if (pool->staged_tail)
        pool->staged_tail->next = j;
    else
        pool->staged = j;
    pool->staged_tail = j;
    pool->nstaged++;
}

/* Each woken thread runs calls until the queue has none it may run: as
 * many threads are woken as there are calls, at most every idle one.
 * (One signal per call, when the loop handed over a transaction's 256
 * noop calls one by one, put a sixth of the worker's CPU in context
 * switches.) */
void worker_pool_flush(worker_pool_t *pool)
{
    if (!pool->staged)
        return;
    pthread_mutex_lock(&pool->lock);
    if (pool->queue_tail)
        pool->queue_tail->next = pool->staged;
    else
        pool->queue = pool->staged;
    pool->queue_tail = pool->staged_tail;
    if (pool->nstaged >= pool->idle)
        pthread_cond_broadcast(&pool->cond);
    else
        for (int i = 0; i < pool->nstaged; i++)
            pthread_cond_signal(&pool->cond);
    pthread_mutex_unlock(&pool->lock);
    pool->staged = pool->staged_tail = NULL;
    pool->nstaged = 0;
}

void **worker_pool_take_done(worker_pool_t *pool, size_t *n)
{
    void **out = NULL;

    pthread_mutex_lock(&pool->lock);
    *n = pool->ndone;
    if (pool->ndone) {
        out = pool->done;
        pool->done = NULL;
        pool->ndone = pool->done_cap = 0;
    }
    pthread_mutex_unlock(&pool->lock);
    return out;
}

int worker_pool_fd(const worker_pool_t *pool)
{
    return pool->pipe_fd[0];
}

void worker_pool_ack(worker_pool_t *pool)
{
    char buf[256];

    while (read(pool->pipe_fd[0], buf, sizeof(buf)) > 0)
        ;
}
