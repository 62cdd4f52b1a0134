/* PostgreSQL for the gateway (gw.h): a fixed pool of sessions for the
 * queries, and one LISTEN session on sagad_outbox.
 *
 * Every worker transaction that changes a saga writes outbox rows and
 * then notifies sagad_outbox (schemas/sql/0009_notify_after_commit.sql),
 * so a notification is the moment a saga's rows may have changed.  The
 * requests waiting for a saga (long polls, controls awaiting their
 * answer) register a watch: the saga id and the seq they saw.  On a
 * notification the listener reads the seq of every watched saga in one
 * statement, on its own session, and wakes the watches whose saga moved
 * (every change of a saga's state emits an event, so moves its seq).  The
 * cost is one query per burst of notifications however many requests
 * wait, and none while nothing is watched.  A replica keeps nothing a
 * request needs once it is answered. */
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
    pthread_mutex_t ch_mu; /* guards the watches */
    gw_watch_t *watches;
    size_t nwatches;
    volatile int listening;
};

/* Watches are checked at most this often however often the workers
 * commit, and at least once a second while any is registered (a lost
 * notification, a LISTEN session reconnecting). */
#define CHECK_MIN_MS 2
#define CHECK_MAX_MS 1000

static void *listen_main(void *arg);

gw_pool_t *gw_pool_new(const sg_config_t *cfg, int size, char *why, size_t why_size)
{
    gw_pool_t *p = sg_xcalloc(1, sizeof(*p));
    sg_err_t err;

    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->free_cv, NULL);
    pthread_mutex_init(&p->ch_mu, NULL);
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

void gw_watch_add(gw_pool_t *p, gw_watch_t *w, const char *saga_id, int64_t seq)
{
    pthread_condattr_t ca;

    memset(w, 0, sizeof(*w));
    snprintf(w->saga_id, sizeof(w->saga_id), "%s", saga_id);
    w->seq = seq;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&p->ch_mu);
    w->next = p->watches;
    p->watches = w;
    p->nwatches++;
    pthread_mutex_unlock(&p->ch_mu);
}

void gw_watch_remove(gw_pool_t *p, gw_watch_t *w)
{
    pthread_mutex_lock(&p->ch_mu);
    for (gw_watch_t **at = &p->watches; *at; at = &(*at)->next) {
        if (*at == w) {
            *at = w->next;
            p->nwatches--;
            break;
        }
    }
    pthread_mutex_unlock(&p->ch_mu);
    pthread_cond_destroy(&w->cv);
}

bool gw_watch_wait(gw_pool_t *p, gw_watch_t *w, uint64_t deadline_ms)
{
    bool fired;

    pthread_mutex_lock(&p->ch_mu);
    while (!w->fired && sg_run_now_ms() < deadline_ms && !p->stop && sg_run_running) {
        struct timespec ts;
        uint64_t left = deadline_ms - sg_run_now_ms();
        if (left > 1000)
            left = 1000; /* sg_run_running is looked at each second */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(left / 1000);
        ts.tv_nsec += (long)(left % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &p->ch_mu, &ts);
    }
    fired = w->fired;
    pthread_mutex_unlock(&p->ch_mu);
    return fired;
}

int64_t gw_saga_seq(sg_pg_t *pg, const char *saga_id, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    int64_t seq;

    if (sg_pg_exec_cached(pg, "SELECT seq FROM sagas WHERE saga_id = $1", 1, &saga_id, &res, err) <
        0)
        return -2;
    seq = sg_pg_res_rows(res) ? sg_pg_res_int(res, 0, 0, -1) : -1;
    sg_pg_res_destroy(res);
    return seq;
}

/* Reads the seq of every watched saga and wakes the watches whose saga
 * moved (or appeared).  -1 when the query failed. */
static int check_watches(gw_pool_t *p, sg_pg_t *pg, sg_err_t *err)
{
    sg_pg_buf_t ids = {0};
    const char **v;
    const char *param;
    sg_pg_res_t *res = NULL;
    size_t n = 0;
    int rc;

    pthread_mutex_lock(&p->ch_mu);
    if (!p->nwatches) {
        pthread_mutex_unlock(&p->ch_mu);
        return 0;
    }
    v = sg_xcalloc(p->nwatches, sizeof(*v));
    for (gw_watch_t *w = p->watches; w; w = w->next)
        v[n++] = w->saga_id;
    sg_pg_array_literal(&ids, v, n);
    pthread_mutex_unlock(&p->ch_mu);
    free(v);
    param = ids.data;
    rc = sg_pg_exec_cached(pg, "SELECT saga_id, seq FROM sagas WHERE saga_id = ANY($1::text[])", 1,
                           &param, &res, err);
    sg_pg_buf_free(&ids);
    if (rc < 0)
        return -1;
    pthread_mutex_lock(&p->ch_mu);
    for (gw_watch_t *w = p->watches; w; w = w->next) {
        for (size_t r = 0; r < sg_pg_res_rows(res); r++) {
            if (strcmp(sg_pg_res_get(res, r, 0), w->saga_id) == 0 &&
                sg_pg_res_int(res, r, 1, -1) != w->seq) {
                w->fired = true;
                pthread_cond_signal(&w->cv);
            }
        }
    }
    pthread_mutex_unlock(&p->ch_mu);
    sg_pg_res_destroy(res);
    return 0;
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
    uint64_t last_check = 0;

    while (!p->stop) {
        bool marked, due;
        int rc;

        if (!pg || !sg_pg_ok(pg)) {
            p->listening = 0;
            sg_pg_destroy(pg);
            pg = sg_pg_connect(&p->opts, &err);
            if (!pg || sg_pg_listen(pg, "sagad_outbox", &err) < 0) {
                sg_log_kv(SG_LOG_WARN,
                          "cannot LISTEN sagad_outbox; waiting requests look once a second",
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
            last_check = 0; /* whatever changed while it was away */
        }
        rc = sg_pg_wait_notify(pg, 200, NULL, &marked, &err);
        if (rc < 0) {
            sg_log_kv(SG_LOG_WARN, "the LISTEN session failed; reconnecting", "error", err.message,
                      NULL);
            continue;
        }
        due = sg_run_now_ms() - last_check >= CHECK_MAX_MS;
        if (rc > 0 || due) {
            uint64_t since = sg_run_now_ms() - last_check;
            if (!due && since < CHECK_MIN_MS) {
                struct timespec ts = {0, (long)(CHECK_MIN_MS - since) * 1000000L};
                nanosleep(&ts, NULL);
                sg_pg_notified(pg, NULL, &marked); /* a burst is one check */
            }
            last_check = sg_run_now_ms();
            if (check_watches(p, pg, &err) < 0)
                sg_log_kv(SG_LOG_WARN, "cannot read the watched sagas", "error", err.message, NULL);
        }
    }
    p->listening = 0;
    sg_pg_destroy(pg);
    return NULL;
}
