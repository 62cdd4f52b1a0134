/* PostgreSQL for the gateway (gw.h): a fixed pool of sessions for the
 * queries, and one LISTEN session on sagad_outbox.
 *
 * Every worker transaction that changes a saga writes outbox rows and
 * then notifies sagad_outbox (schemas/sql/0009_notify_after_commit.sql),
 * so a notification is the moment a saga's rows may have changed.  The
 * listener turns each into a tick of one counter and wakes every long
 * poll; each looks at its own saga again.  Nothing is kept per saga: a
 * replica needs no state to answer any request. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"

struct gw_pool_s {
    pthread_mutex_t mu;
    pthread_cond_t free_cv;
    sg_pg_t **idle;
    size_t nidle, size;
    sg_pg_opts_t opts;
    /* the LISTEN side */
    pthread_t listener;
    bool listener_started;
    volatile int stop;
    pthread_mutex_t ch_mu;
    pthread_cond_t ch_cv;
    uint64_t changes;
    volatile int listening;
};

static void *listen_main(void *arg);

gw_pool_t *gw_pool_new(const sg_config_t *cfg, int size, char *why, size_t why_size)
{
    gw_pool_t *p = sg_xcalloc(1, sizeof(*p));
    sg_err_t err;

    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->free_cv, NULL);
    pthread_mutex_init(&p->ch_mu, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&p->ch_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    sg_pg_opts_from_config(&p->opts, cfg, "sagad-gateway");
    p->size = (size_t)size;
    p->idle = sg_xcalloc(p->size, sizeof(*p->idle));
    for (size_t i = 0; i < p->size; i++) {
        if (!(p->idle[i] = sg_pg_connect(&p->opts, &err))) {
            snprintf(why, why_size, "cannot reach PostgreSQL: %s (check pg.dsn / SAGAD_PG_DSN)",
                     err.message);
            gw_pool_free(p);
            return NULL;
        }
        p->nidle++;
    }
    if (pthread_create(&p->listener, NULL, listen_main, p) != 0) {
        snprintf(why, why_size, "cannot start the LISTEN thread");
        gw_pool_free(p);
        return NULL;
    }
    p->listener_started = true;
    return p;
}

void gw_pool_free(gw_pool_t *p)
{
    if (!p)
        return;
    p->stop = 1;
    if (p->listener_started)
        pthread_join(p->listener, NULL);
    for (size_t i = 0; i < p->nidle; i++)
        sg_pg_destroy(p->idle[i]);
    free(p->idle);
    pthread_cond_destroy(&p->free_cv);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->ch_cv);
    pthread_mutex_destroy(&p->ch_mu);
    free(p);
}

sg_pg_t *gw_pool_get(gw_pool_t *p, sg_err_t *err)
{
    sg_pg_t *pg;

    pthread_mutex_lock(&p->mu);
    while (p->nidle == 0)
        pthread_cond_wait(&p->free_cv, &p->mu);
    pg = p->idle[--p->nidle];
    pthread_mutex_unlock(&p->mu);
    if (!sg_pg_ok(pg) && sg_pg_reconnect(pg, err) < 0) {
        gw_pool_put(p, pg);
        return NULL;
    }
    return pg;
}

void gw_pool_put(gw_pool_t *p, sg_pg_t *pg)
{
    pthread_mutex_lock(&p->mu);
    p->idle[p->nidle++] = pg;
    pthread_cond_signal(&p->free_cv);
    pthread_mutex_unlock(&p->mu);
}

static void tick(gw_pool_t *p)
{
    pthread_mutex_lock(&p->ch_mu);
    p->changes++;
    pthread_cond_broadcast(&p->ch_cv);
    pthread_mutex_unlock(&p->ch_mu);
}

uint64_t gw_pool_changes(gw_pool_t *p)
{
    uint64_t v;

    pthread_mutex_lock(&p->ch_mu);
    v = p->changes;
    pthread_mutex_unlock(&p->ch_mu);
    return v;
}

uint64_t gw_pool_wait_change(gw_pool_t *p, uint64_t seen, uint64_t deadline_ms)
{
    uint64_t v;

    pthread_mutex_lock(&p->ch_mu);
    while (p->changes == seen && sg_run_now_ms() < deadline_ms && !p->stop) {
        struct timespec ts;
        uint64_t left = deadline_ms - sg_run_now_ms();
        clock_gettime(CLOCK_MONOTONIC, &ts);
        /* At most a second at a time: a lost LISTEN session (below) must
         * not leave a poll asleep past a change. */
        if (left > 1000)
            left = 1000;
        ts.tv_sec += (time_t)(left / 1000);
        ts.tv_nsec += (long)(left % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&p->ch_cv, &p->ch_mu, &ts) == ETIMEDOUT && !p->listening)
            break; /* no notifications now: the caller looks again every second */
    }
    v = p->changes;
    pthread_mutex_unlock(&p->ch_mu);
    return v;
}

bool gw_pool_listening(gw_pool_t *p)
{
    return p->listening != 0;
}

static void *listen_main(void *arg)
{
    gw_pool_t *p = arg;
    sg_pg_t *pg = NULL;
    sg_err_t err;
    int backoff_ms = 100;

    while (!p->stop) {
        bool marked;
        int rc;

        if (!pg || !sg_pg_ok(pg)) {
            p->listening = 0;
            sg_pg_destroy(pg);
            pg = sg_pg_connect(&p->opts, &err);
            if (!pg || sg_pg_listen(pg, "sagad_outbox", &err) < 0) {
                sg_log_kv(SG_LOG_WARN, "cannot LISTEN sagad_outbox; long polls look every second",
                          "error", err.message, NULL);
                for (int slept = 0; slept < backoff_ms && !p->stop; slept += 100) {
                    struct timespec ts = {0, 100 * 1000000L};
                    nanosleep(&ts, NULL);
                }
                backoff_ms = backoff_ms < 5000 ? backoff_ms * 2 : 5000;
                continue;
            }
            backoff_ms = 100;
            p->listening = 1;
            tick(p); /* whatever changed while it was away */
        }
        rc = sg_pg_wait_notify(pg, 200, NULL, &marked, &err);
        if (rc > 0)
            tick(p);
        else if (rc < 0)
            sg_log_kv(SG_LOG_WARN, "the LISTEN session failed; reconnecting", "error", err.message,
                      NULL);
    }
    p->listening = 0;
    sg_pg_destroy(pg);
    return NULL;
}
