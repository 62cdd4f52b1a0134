/* Kafka for the gateway (gw.h): one idempotent producer shared by every
 * request; each request waits for its own message's acknowledgement.
 *
 * Delivery reports are served by one thread, under the lock that guards
 * every request's batch: it sleeps on librdkafka's queue descriptor
 * (sg_kafka_wake_fd) without the lock, then serves the reports with it
 * and wakes the waiting requests.  A request holds the lock only to queue
 * its message and to look at its batch, so requests batch together in
 * librdkafka (linger.ms) instead of waiting in line. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gw.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_health.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "sagad/sg_sign.h"

struct gw_producer_s {
    sg_kafka_t *k;
    const char *topic;
    pthread_mutex_t mu;
    int pipe[2];
    pthread_t thread;
    bool started;
    volatile int stop;
    /* Batches of requests that stopped waiting: their message may still
     * be reported, into them, so they live until the producer does. */
    struct orphan_s *orphans;
    /* Requests waiting for their report, each on its own condition: a
     * report wakes its request only, not every one in flight. */
    struct orphan_s *waiting;
};

typedef struct orphan_s {
    sg_kafka_batch_t batch;
    pthread_cond_t cv;
    struct orphan_s *next;           /* orphans */
    struct orphan_s **wprev, *wnext; /* waiting */
} orphan_t;

static void unwait(orphan_t *o)
{
    if (!o->wprev)
        return;
    *o->wprev = o->wnext;
    if (o->wnext)
        o->wnext->wprev = o->wprev;
    o->wprev = NULL;
    o->wnext = NULL;
}

static void *serve_reports(void *arg)
{
    gw_producer_t *p = arg;

    while (!p->stop) {
        struct pollfd pfd = {p->pipe[0], POLLIN, 0};
        char drain[64];

        /* At most 100 ms asleep: librdkafka also has timers to run. */
        if (poll(&pfd, 1, 100) > 0)
            while (read(p->pipe[0], drain, sizeof(drain)) > 0)
                ;
        pthread_mutex_lock(&p->mu);
        sg_kafka_poll(p->k, 0);
        for (orphan_t *o = p->waiting, *nx; o; o = nx) {
            nx = o->wnext;
            if (!o->batch.pending) {
                unwait(o);
                pthread_cond_signal(&o->cv);
            }
        }
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

gw_producer_t *gw_producer_new(const sg_config_t *cfg, char *why, size_t why_size)
{
    gw_producer_t *p = sg_xcalloc(1, sizeof(*p));

    p->pipe[0] = p->pipe[1] = -1;
    p->topic = sg_config_str(cfg, "topic.commands");
    pthread_mutex_init(&p->mu, NULL);
    /* A message librdkafka cannot deliver within a minute is reported
     * failed, so no request's batch waits for ever. */
    static const char *const props[] = {"message.timeout.ms", "60000", NULL};
    if (!(p->k = sg_kafka_new(cfg, SG_KAFKA_PRODUCER, props, why, why_size)))
        goto fail;
    if (pipe(p->pipe) < 0 || fcntl(p->pipe[0], F_SETFL, O_NONBLOCK) < 0 ||
        fcntl(p->pipe[1], F_SETFL, O_NONBLOCK) < 0 || sg_kafka_wake_fd(p->k, p->pipe[1]) < 0) {
        snprintf(why, why_size, "cannot make the producer's wake-up pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&p->thread, NULL, serve_reports, p) != 0) {
        snprintf(why, why_size, "cannot start the delivery thread");
        goto fail;
    }
    p->started = true;
    return p;
fail:
    gw_producer_free(p);
    return NULL;
}

void gw_producer_free(gw_producer_t *p)
{
    sg_err_t err;

    if (!p)
        return;
    p->stop = 1;
    if (p->started)
        pthread_join(p->thread, NULL);
    if (p->k && sg_kafka_flush(p->k, 10000, &err) < 0)
        sg_log_kv(SG_LOG_WARN, "messages not acknowledged at exit", "error", err.message, NULL);
    sg_kafka_destroy(p->k);
    while (p->orphans) {
        orphan_t *o = p->orphans;
        p->orphans = o->next;
        pthread_cond_destroy(&o->cv);
        free(o);
    }
    if (p->pipe[0] >= 0)
        close(p->pipe[0]);
    if (p->pipe[1] >= 0)
        close(p->pipe[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

bool gw_producer_ready(gw_producer_t *p, char *why, size_t why_size)
{
    return sg_health_kafka_probe(p->k, why, why_size);
}

static void deadline_ts(struct timespec *ts, uint64_t ms_from_now)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms_from_now / 1000);
    ts->tv_nsec += (long)(ms_from_now % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int gw_produce(gw_t *gw, const char *saga_id, const char *text, size_t len, bool sign,
               int64_t timeout_ms, sg_err_t *err)
{
    gw_producer_t *p = gw->prod;
    sg_kafka_header_t hdr = {SG_AUTH_HEADER, NULL, 0};
    orphan_t *o = sg_xcalloc(1, sizeof(*o));
    sg_kafka_batch_t *batch = &o->batch;
    pthread_condattr_t ca;
    uint64_t deadline = sg_run_now_ms() + (uint64_t)timeout_ms;
    char *auth = NULL;
    int rc = 0;

    if (sign) {
        auth = sg_auth_sign_with(gw->signer, gw->key.principal, gw->key.key_id, (int64_t)time(NULL),
                                 saga_id, strlen(saga_id), text, len, err);
        if (!auth) {
            free(o);
            return -1;
        }
        hdr.value = auth;
        hdr.len = strlen(auth);
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&p->mu);
    if (sg_kafka_produce(p->k, p->topic, saga_id, strlen(saga_id), text, len, auth ? &hdr : NULL,
                         auth ? 1 : 0, batch, err) < 0) {
        rc = -1;
    } else {
        o->wnext = p->waiting;
        if (p->waiting)
            p->waiting->wprev = &o->wnext;
        o->wprev = &p->waiting;
        p->waiting = o;
        while (batch->pending && sg_run_now_ms() < deadline) {
            struct timespec ts;
            deadline_ts(&ts, deadline - sg_run_now_ms());
            pthread_cond_timedwait(&o->cv, &p->mu, &ts);
        }
        unwait(o);
        if (batch->failed) {
            *err = batch->first_err;
            rc = -1;
        } else if (batch->pending) {
            sg_err_set(err, SG_ERRCLASS_TRANSIENT, "kafka.timeout",
                       "Kafka did not acknowledge the message within %lld ms: it may yet be "
                       "delivered",
                       (long long)timeout_ms);
            rc = -2;
        }
    }
    if (batch->pending) {
        o->next = p->orphans;
        p->orphans = o;
        o = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    if (o)
        pthread_cond_destroy(&o->cv);
    free(o);
    free(auth);
    return rc;
}
