/* The circuit breaker of a tool, shared by every thread of the worker.
 *
 *   closed     calls go; consecutive transient, throttled and timeout
 *              failures are counted; failure_threshold of them open it
 *   open       calls fail fast with tool.circuit_open (transient, nothing
 *              is sent) until cooldown_ms have passed
 *   half_open  exactly one probe call goes; the others fail fast; the
 *              probe's success closes the circuit, its failure reopens it
 *
 * A permanent error counts as an answer: the downstream is up and decided
 * (a 400 says nothing about its health), so it closes a half-open circuit
 * and resets the count like a success.  Outcomes of calls that were sent
 * before the circuit opened are ignored: the circuit already knows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "../worker.h"

struct sg_tool_breaker_s {
    pthread_mutex_t lock;
    worker_breaker_state_t state;
    int threshold, failures;
    int64_t cooldown_ms, opened_at_ms;
    uint64_t since_ms; /* when it entered state; its creation at first */
    bool probing;
    uint64_t transitions[3], rejected;
};

static const char *const state_names[] = {"closed", "open", "half_open"};

const char *worker_breaker_state_name(worker_breaker_state_t s)
{
    return state_names[s];
}

worker_breaker_t *worker_breaker_new(int threshold, int64_t cooldown_ms)
{
    worker_breaker_t *b = sg_xcalloc(1, sizeof(*b));

    pthread_mutex_init(&b->lock, NULL);
    b->threshold = threshold;
    b->cooldown_ms = cooldown_ms;
    b->since_ms = sg_run_now_ms();
    return b;
}

void worker_breaker_destroy(worker_breaker_t *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* Lock held. */
static void move(worker_breaker_t *b, const sg_tool_t *tool, worker_breaker_state_t to, int64_t now)
{
    char failures[16];

    snprintf(failures, sizeof(failures), "%d", b->failures);
    sg_log_kv(to == WORKER_BREAKER_CLOSED ? SG_LOG_INFO : SG_LOG_WARN, "circuit state changed",
              "tool", tool->name, "from", state_names[b->state], "to", state_names[to], "failures",
              failures, NULL);
    b->state = to;
    b->since_ms = (uint64_t)now;
    b->transitions[to]++;
    b->probing = false;
    if (to == WORKER_BREAKER_OPEN)
        b->opened_at_ms = now;
    else
        b->failures = 0;
}

bool worker_breaker_admit(const sg_tool_t *tool, worker_result_t *out, bool *probe)
{
    worker_breaker_t *b = tool->breaker;
    int64_t now = (int64_t)sg_run_now_ms(), wait_ms = 0;

    *probe = false;
    if (!b)
        return true;
    pthread_mutex_lock(&b->lock);
    if (b->state == WORKER_BREAKER_OPEN && now - b->opened_at_ms >= b->cooldown_ms)
        move(b, tool, WORKER_BREAKER_HALF_OPEN, now);
    if (b->state == WORKER_BREAKER_CLOSED ||
        (b->state == WORKER_BREAKER_HALF_OPEN && !b->probing)) {
        *probe = b->state == WORKER_BREAKER_HALF_OPEN;
        b->probing = *probe;
        pthread_mutex_unlock(&b->lock);
        return true;
    }
    b->rejected++;
    if (b->state == WORKER_BREAKER_OPEN)
        wait_ms = b->cooldown_ms - (now - b->opened_at_ms);
    pthread_mutex_unlock(&b->lock);
    /* The retry waits for the cool-down: sooner it would fail fast again. */
    out->retry_after_ms = wait_ms > 0 ? wait_ms : 0;
    worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.circuit_open",
                        "circuit of tool %s is open after %d consecutive failures; nothing was "
                        "sent (%s)",
                        tool->name, b->threshold,
                        wait_ms > 0 ? "next probe after the cool-down" : "a probe call is running");
    return false;
}

void worker_breaker_record(const sg_tool_t *tool, const worker_result_t *res, bool probe)
{
    worker_breaker_t *b = tool->breaker;
    int64_t now = (int64_t)sg_run_now_ms();
    /* Transient, throttled and timeout: what sg_err_set() marks retriable. */
    bool failed = res->status != WORKER_OK && res->err.retriable;

    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    if (probe && b->state == WORKER_BREAKER_HALF_OPEN) {
        move(b, tool, failed ? WORKER_BREAKER_OPEN : WORKER_BREAKER_CLOSED, now);
    } else if (b->state == WORKER_BREAKER_CLOSED) {
        b->failures = failed ? b->failures + 1 : 0;
        if (b->failures >= b->threshold)
            move(b, tool, WORKER_BREAKER_OPEN, now);
    }
    pthread_mutex_unlock(&b->lock);
}

void worker_breaker_info(const sg_tool_t *tool, worker_breaker_info_t *out)
{
    worker_breaker_t *b = tool->breaker;

    memset(out, 0, sizeof(*out));
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    out->state = b->state;
    out->failures = b->failures;
    memcpy(out->transitions, b->transitions, sizeof(out->transitions));
    out->rejected = b->rejected;
    out->since_ms = b->since_ms;
    pthread_mutex_unlock(&b->lock);
}
