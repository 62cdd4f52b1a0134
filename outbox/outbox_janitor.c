/* The janitor: removes finished work past its horizon (lib/ops/sg_retention.c).
 *
 *   CONNECTING -> STANDBY -> ACTIVE -> (error) CONNECTING
 *
 * It runs in a thread of every relay, on a session of its own, so its
 * batches never hold up publishing.  One relay of the database is the
 * janitor at a time: the one whose janitor session holds its advisory lock
 * (sagad_janitor_try_lock(), the shards' scheme; the server drops the lock with the session, so a
 * standby takes over).  Why here and not a CronJob: docs/OPERATIONS.md,
 * "Retention". */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_retention.h"
#include "sagad/sg_run.h"

#define STANDBY_MS 5000 /* a standby janitor tries the lock this often */

typedef enum janitor_state_e {
    JANITOR_CONNECTING,
    JANITOR_STANDBY,
    JANITOR_ACTIVE,
} janitor_state_t;

static const char *const janitor_state_names[] = {"connecting", "standby", "active"};

struct outbox_janitor_s {
    pthread_t thread;
    sg_pg_opts_t pgopts;
    sg_retention_opts_t opts;
    uint64_t interval_ms;
    janitor_state_t state;
    sg_pg_t *pg;
};

static void janitor_nap(uint64_t ms)
{
    for (uint64_t end = sg_run_now_ms() + ms; sg_run_running && sg_run_now_ms() < end;) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void janitor_set_state(outbox_janitor_t *j, janitor_state_t st, const char *why)
{
    if (j->state == st)
        return;
    sg_log_kv(SG_LOG_INFO, "janitor state change", "from", janitor_state_names[j->state], "to",
              janitor_state_names[st], "why", why, NULL);
    j->state = st;
}

static void janitor_fail(outbox_janitor_t *j, const char *what, const sg_err_t *err)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;

    ctx.error_code = err->code;
    sg_log(SG_LOG_WARN, &ctx, "janitor %s: %s", what, err->message);
    sg_pg_destroy(j->pg);
    j->pg = NULL;
    janitor_set_state(j, JANITOR_CONNECTING, what);
    janitor_nap(STANDBY_MS);
}

/* 1 when the lock is ours, 0 when another janitor holds it. */
static int janitor_try_lock(outbox_janitor_t *j, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    const char *got;
    int mine;

    if (sg_pg_exec(j->pg, "SELECT sagad_janitor_try_lock()", 0, NULL, &res, err) < 0)
        return -1;
    got = sg_pg_res_get(res, 0, 0);
    mine = got && strcmp(got, "t") == 0;
    sg_pg_res_destroy(res);
    return mine;
}

/* One pass, logged when it removed anything, then the age gauges. */
static int janitor_pass(outbox_janitor_t *j, sg_err_t *err)
{
    int64_t removed[SG_RET__COUNT] = {0};
    uint64_t t0 = sg_run_now_ms();
    char n[SG_RET__COUNT][24], ms[24];
    int64_t total = 0;

    if (sg_retention_pass(j->pg, &j->opts, removed, err) < 0)
        return -1;
    for (int i = 0; i < SG_RET__COUNT; i++) {
        snprintf(n[i], sizeof(n[i]), "%lld", (long long)removed[i]);
        total += removed[i];
    }
    snprintf(ms, sizeof(ms), "%llu", (unsigned long long)(sg_run_now_ms() - t0));
    if (total > 0)
        sg_log_kv(SG_LOG_INFO, "janitor pass", "sagas", n[SG_RET_SAGAS], "steps", n[SG_RET_STEPS],
                  "attempts", n[SG_RET_ATTEMPTS], "dead_letters", n[SG_RET_DEAD_LETTERS], "replays",
                  n[SG_RET_REPLAYS], "dead_letter_revisions", n[SG_RET_REVISIONS], "builtin_ledger",
                  n[SG_RET_BUILTIN_LEDGER], "ms", ms, NULL);
    return sg_retention_export_ages(j->pg, NULL, err);
}

static void *janitor_main(void *arg)
{
    outbox_janitor_t *j = arg;
    uint64_t next_pass = 0;
    sg_err_t err;
    int rc;

    while (sg_run_running) {
        sg_err_clear(&err);
        switch (j->state) {
        case JANITOR_CONNECTING:
            if (!(j->pg = sg_pg_connect(&j->pgopts, &err))) {
                janitor_fail(j, "connect", &err);
                break;
            }
            janitor_set_state(j, JANITOR_STANDBY, "connected");
            break;
        case JANITOR_STANDBY:
            if ((rc = janitor_try_lock(j, &err)) < 0)
                janitor_fail(j, "lock", &err);
            else if (rc > 0)
                janitor_set_state(j, JANITOR_ACTIVE, "janitor lock acquired");
            else
                janitor_nap(STANDBY_MS);
            break;
        case JANITOR_ACTIVE:
            if (sg_run_now_ms() >= next_pass) {
                next_pass = sg_run_now_ms() + j->interval_ms;
                if (janitor_pass(j, &err) < 0) {
                    janitor_fail(j, "pass", &err);
                    break;
                }
            }
            janitor_nap(next_pass > sg_run_now_ms() ? next_pass - sg_run_now_ms() : 0);
            break;
        }
    }
    sg_pg_destroy(j->pg);
    j->pg = NULL;
    return NULL;
}

outbox_janitor_t *outbox_janitor_start(const sg_config_t *cfg)
{
    outbox_janitor_t *j;

    if (!sg_config_bool(cfg, "retention.janitor")) {
        sg_log_kv(SG_LOG_INFO, "janitor off (retention.janitor = false)", NULL);
        return NULL;
    }
    j = sg_xcalloc(1, sizeof(*j));
    sg_pg_opts_from_config(&j->pgopts, cfg, "sagad-relay-janitor");
    j->pgopts.connect_attempts = 1; /* the state machine retries */
    j->pgopts.run = &sg_run_running;
    /* A batch waits at most a second for a lock (it is tried again next
     * pass), and, like the relay's own, its commit does not wait for the
     * WAL flush: a crash of PostgreSQL can only bring back rows the next
     * pass removes again. */
    j->pgopts.session_sql = "SET lock_timeout = '1s'; SET synchronous_commit = off";
    sg_retention_opts_from_config(&j->opts, cfg);
    j->opts.run = &sg_run_running;
    j->interval_ms = (uint64_t)sg_config_int(cfg, "retention.interval_ms");
    if (pthread_create(&j->thread, NULL, janitor_main, j) != 0) {
        sg_log_kv(SG_LOG_ERROR, "cannot start the janitor thread", NULL);
        free(j);
        return NULL;
    }
    return j;
}

void outbox_janitor_stop(outbox_janitor_t *j)
{
    if (!j)
        return;
    pthread_join(j->thread, NULL);
    free(j);
}
