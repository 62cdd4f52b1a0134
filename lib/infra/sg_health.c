#include "sagad/sg_health.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sagad/sg_run.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_metrics.h"

static const char *const check_names[SG_CHECK__COUNT] = {"postgresql", "schema", "kafka", "group",
                                                         "lock"};

typedef struct check_s {
    bool ok;
    char why[256];
    sg_health_probe_fn probe;
    void *opaque;
    int every_ms;
    uint64_t probed_at; /* 0: never */
} check_t;

static pthread_mutex_t health_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER; /* one probe run at a time */
static check_t checks[SG_CHECK__COUNT];
static unsigned required;
static _Atomic uint64_t last_beat;

void sg_health_init(unsigned required_mask)
{
    pthread_mutex_lock(&health_mu);
    required = required_mask;
    for (size_t i = 0; i < SG_CHECK__COUNT; i++) {
        memset(&checks[i], 0, sizeof(checks[i]));
        snprintf(checks[i].why, sizeof(checks[i].why), "not checked yet");
    }
    pthread_mutex_unlock(&health_mu);
    sg_health_beat();
}

static void set_locked(sg_check_t check, bool ok, const char *why)
{
    checks[check].ok = ok;
    snprintf(checks[check].why, sizeof(checks[check].why), "%s", ok ? "" : why);
    /* One line per check: libpq's messages span several. */
    for (char *c = checks[check].why; *c; c++)
        if (*c == '\n' || *c == '\t' || *c == '\r')
            *c = ' ';
    if (check == SG_CHECK_PG)
        sg_metric_set(SG_M_PG_CONNECTED, NULL, ok);
    else if (check == SG_CHECK_KAFKA)
        sg_metric_set(SG_M_KAFKA_CONNECTED, NULL, ok);
}

void sg_health_set(sg_check_t check, bool ok, const char *fmt, ...)
{
    char why[256] = "";
    va_list ap;

    if (!ok) {
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_lock(&health_mu);
    set_locked(check, ok, why);
    pthread_mutex_unlock(&health_mu);
}

void sg_health_set_probe(sg_check_t check, sg_health_probe_fn fn, void *opaque, int every_ms)
{
    pthread_mutex_lock(&probe_mu);
    pthread_mutex_lock(&health_mu);
    checks[check].probe = fn;
    checks[check].opaque = opaque;
    checks[check].every_ms = every_ms;
    checks[check].probed_at = 0;
    pthread_mutex_unlock(&health_mu);
    pthread_mutex_unlock(&probe_mu);
}

void sg_health_clear_probe(sg_check_t check)
{
    sg_health_set_probe(check, NULL, NULL, 0);
}

void sg_health_refresh(void)
{
    /* probe_mu is held across the probe: clear_probe() waits for a probe
     * in progress, so its opaque stays valid while it runs. */
    pthread_mutex_lock(&probe_mu);
    for (size_t i = 0; i < SG_CHECK__COUNT; i++) {
        check_t *c = &checks[i];
        uint64_t now = sg_run_now_ms();
        char why[256] = "";
        bool ok;

        if (!c->probe || (c->probed_at && now - c->probed_at < (uint64_t)c->every_ms))
            continue;
        ok = c->probe(c->opaque, why, sizeof(why));
        c->probed_at = sg_run_now_ms();
        pthread_mutex_lock(&health_mu);
        set_locked((sg_check_t)i, ok, why);
        pthread_mutex_unlock(&health_mu);
    }
    pthread_mutex_unlock(&probe_mu);
}

void sg_health_beat(void)
{
    atomic_store(&last_beat, sg_run_now_ms());
}

bool sg_health_live(int64_t stall_ms, char *out, size_t out_size)
{
    uint64_t idle = sg_run_now_ms() - atomic_load(&last_beat);

    if ((int64_t)idle < stall_ms)
        return true;
    snprintf(out, out_size, "main loop stalled: last turn %llu ms ago (health.stall_ms %lld)\n",
             (unsigned long long)idle, (long long)stall_ms);
    return false;
}

bool sg_health_ready(char *out, size_t out_size)
{
    size_t n = 0;
    bool ready = true;

    sg_health_refresh();
    out[0] = '\0';
    if (!sg_run_running) {
        n += (size_t)snprintf(out, out_size, "draining: stop requested (SIGTERM)\n");
        ready = false;
    }
    pthread_mutex_lock(&health_mu);
    for (size_t i = 0; i < SG_CHECK__COUNT; i++) {
        if (!(required & SG_CHECK_BIT(i)) || checks[i].ok)
            continue;
        ready = false;
        if (n < out_size)
            n += (size_t)snprintf(out + n, out_size - n, "%s: %s\n", check_names[i], checks[i].why);
    }
    pthread_mutex_unlock(&health_mu);
    sg_metric_set(SG_M_READY, NULL, ready);
    return ready;
}

bool sg_health_kafka_probe(void *opaque, char *why, size_t why_size)
{
    sg_err_t err;

    if (sg_kafka_broker_count(opaque, 1000, &err) > 0)
        return true;
    snprintf(why, why_size, "no broker answered a metadata request: %s", err.message);
    return false;
}
