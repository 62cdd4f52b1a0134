/* The call pool's hand-off (worker/tools/worker_pool.c): a submitted call
 * is only staged, and runs once worker_pool_flush() hands the batch to the
 * pool's threads; every call handed over finishes once and wakes the loop;
 * a tool's concurrency limit holds across the threads.  No services: a
 * test adapter counts its calls. */
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../worker/worker.h"
#include "sagad/sg_run.h"
#include "unit.h"

#define POOL_THREADS 4
#define CALLS        24

static atomic_int calls_run, running_now, running_max;
static atomic_int hold_ms; /* each call's length */

static void counting_call(worker_thread_t *th, const worker_call_t *call, worker_result_t *out)
{
    int now = atomic_fetch_add(&running_now, 1) + 1, max = atomic_load(&running_max);

    (void)th;
    (void)call;
    while (now > max && !atomic_compare_exchange_weak(&running_max, &max, now))
        ;
    if (atomic_load(&hold_ms) > 0)
        usleep((useconds_t)atomic_load(&hold_ms) * 1000);
    atomic_fetch_sub(&running_now, 1);
    atomic_fetch_add(&calls_run, 1);
    memset(out, 0, sizeof(*out));
    out->status = WORKER_OK;
    out->retry_after_ms = 7; /* a mark: this call's outcome reached its job */
}

static const worker_adapter_t counting_adapter = {.name = "counting", .call = counting_call};

typedef struct job_s {
    worker_call_t call;
    worker_result_t out;
    int done; /* times it came back from the pool */
} job_t;

static void reset_counts(int ms)
{
    atomic_store(&calls_run, 0);
    atomic_store(&running_now, 0);
    atomic_store(&running_max, 0);
    atomic_store(&hold_ms, ms);
}

/* Takes finished jobs until want came back or 10 s went by, waiting on
 * the pool's descriptor as the loop does; returns how many came back. */
static int collect(worker_pool_t *pool, int want)
{
    int got = 0;

    for (int rounds = 0; got < want && rounds < 1000; rounds++) {
        struct pollfd pfd = {worker_pool_fd(pool), POLLIN, 0};
        void **done;
        size_t n = 0;

        (void)poll(&pfd, 1, 10);
        worker_pool_ack(pool);
        if (!(done = worker_pool_take_done(pool, &n)))
            continue;
        for (size_t i = 0; i < n; i++) {
            ((job_t *)done[i])->done++;
            got++;
        }
        free(done);
    }
    return got;
}

static void submit_all(worker_pool_t *pool, sg_tool_t *tool, job_t *jobs, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&jobs[i], 0, sizeof(jobs[i]));
        jobs[i].call.tool = tool;
        worker_pool_submit(pool, &jobs[i], &jobs[i].call, &jobs[i].out);
    }
}

Test(pool, calls_wait_for_the_flush_then_each_runs_once)
{
    static volatile sig_atomic_t stop;
    sg_tool_t tool;
    job_t jobs[CALLS];
    worker_pool_t *pool = worker_pool_new(POOL_THREADS, NULL, &stop);
    size_t n = 0;

    memset(&tool, 0, sizeof(tool));
    tool.name = "count";
    tool.adapter = &counting_adapter;
    reset_counts(0);
    submit_all(pool, &tool, jobs, CALLS);
    /* Four idle threads would have run them by now, were they queued. */
    usleep(100 * 1000);
    cr_expect_eq(atomic_load(&calls_run), 0, "a staged call ran before the flush");
    cr_expect_null(worker_pool_take_done(pool, &n), "a staged call came back before the flush");

    worker_pool_flush(pool);
    cr_expect_eq(collect(pool, CALLS), CALLS, "every call handed over came back");
    cr_expect_eq(atomic_load(&calls_run), CALLS, "and ran");
    for (int i = 0; i < CALLS; i++) {
        cr_expect_eq(jobs[i].done, 1, "job %d came back %d times", i, jobs[i].done);
        cr_expect_eq(jobs[i].out.retry_after_ms, 7, "job %d's outcome is its call's", i);
    }
    /* A second flush with nothing staged hands nothing over. */
    worker_pool_flush(pool);
    usleep(50 * 1000);
    cr_expect_eq(atomic_load(&calls_run), CALLS, "nothing ran twice");
    worker_pool_destroy(pool);
}

Test(pool, a_tools_concurrency_limit_holds_across_threads)
{
    static volatile sig_atomic_t stop;
    sg_tool_t tool;
    job_t jobs[8];
    worker_pool_t *pool = worker_pool_new(POOL_THREADS, NULL, &stop);

    memset(&tool, 0, sizeof(tool));
    tool.name = "count";
    tool.adapter = &counting_adapter;
    tool.concurrency = 2;
    reset_counts(20);
    submit_all(pool, &tool, jobs, 8);
    worker_pool_flush(pool);
    cr_expect_eq(collect(pool, 8), 8, "every call came back");
    cr_expect_eq(atomic_load(&running_max), 2,
                 "at most the tool's concurrency (2) ran at once, and it was reached: %d",
                 atomic_load(&running_max));
    cr_expect_eq(tool.running, 0, "no slot of the tool left taken");
    worker_pool_destroy(pool);
}
