/* The health of the worker's PostgreSQL session: whether it is up (for
 * /readyz and sagad_pg_connected, and when it last answered), and the
 * backoff and reconnect after a failure, counted in pg_failures.  Used by
 * the transactions, partition ownership and housekeeping alike. */
#include <time.h>

#include "sagad/sg_health.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "worker_loop_int.h"

/* The session's state for /readyz and sagad_pg_connected, set on change. */
void loop_pg_state(loop_t *L, bool up, const sg_err_t *err)
{
    if (up)
        L->last_pg_ok = sg_run_now_ms();
    if (up == L->pg_up)
        return;
    L->pg_up = up;
    sg_health_set(SG_CHECK_PG, up, "%s", err ? err->message : "connection lost");
}

static void pg_backoff(loop_t *L)
{
    sg_backoff_t b = {200, 5000};
    uint64_t ms = sg_backoff_delay_ms(&b, L->pg_failures < 10 ? L->pg_failures : 10, 0, &L->w.rng);
    uint64_t end = sg_run_now_ms() + ms;

    while (sg_run_now_ms() < end && !sg_run_stop_now) {
        struct timespec ts = {0, 20 * 1000000L};
        sg_health_beat();
        nanosleep(&ts, NULL);
    }
}

sg_pg_t *loop_side_pg(loop_t *L, sg_err_t *err)
{
    if (!L->side_pg && !(L->side_pg = sg_pg_connect(&L->pgopts, err)))
        return NULL;
    if (!sg_pg_ok(L->side_pg) && sg_pg_reconnect(L->side_pg, err) < 0)
        return NULL;
    return L->side_pg;
}

/* True when a key held has passed its expires_at (by this host's clock):
 * it must stop being accepted now, not at the next periodic read. */
static bool keys_expired(const loop_t *L)
{
    return L->w.keys.expires_ms && (int64_t)time(NULL) * 1000 >= L->w.keys.expires_ms;
}

int loop_keys_reload(loop_t *L, bool force, sg_err_t *err)
{
    sg_mac_keys_t keys;
    uint64_t now = sg_run_now_ms();
    bool by_force, by_expiry;

    if (L->w.trust == SG_TRUST_OFF)
        return 0;
    /* An expired key is read away at once, like a new one, at most once
     * a second (PostgreSQL's clock, which decides, may be behind ours).
     * The two causes are limited apart: a read for an unknown key id just
     * before an expiry must not keep the expired key accepted for up to a
     * second more. */
    by_force = force && now - L->keys_forced_at >= 1000;
    by_expiry = keys_expired(L) && now - L->keys_expiry_at >= 1000;
    if (!by_force && !by_expiry && now < L->w.keys_at)
        return 0;
    if (by_force)
        L->keys_forced_at = now;
    if (by_expiry)
        L->keys_expiry_at = now;
    L->w.keys_at = now + L->w.key_reload_ms;
    if (!loop_side_pg(L, err) || sg_trust_keys_load(L->side_pg, &keys, err) < 0)
        return -1;
    sg_mac_keys_clear(&L->w.keys);
    L->w.keys = keys;
    return 1;
}

/* After a failure: reconnect when the session is gone. */
void loop_pg_recover(loop_t *L, const sg_err_t *err)
{
    sg_err_t e;

    loop_pg_state(L, false, err);
    if (L->pg_failures++ == 0)
        sg_log_kv(SG_LOG_WARN, "PostgreSQL transaction failed; retrying with backoff", "error",
                  err->message, "error_code", err->code, NULL);
    pg_backoff(L);
    if (!sg_pg_ok(L->w.pg) && sg_pg_reconnect(L->w.pg, &e) < 0)
        sg_log_kv(SG_LOG_WARN, "PostgreSQL reconnect failed", "error", e.message, NULL);
    else if (sg_pg_ok(L->w.pg))
        loop_pg_state(L, true, NULL);
}
