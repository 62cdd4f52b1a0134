/* sg_health: what /healthz and /readyz answer.
 *
 * Liveness: the main loop calls sg_health_beat() every turn (and while it
 * waits out a backoff); the process is live while the last beat is younger
 * than health.stall_ms.
 *
 * Readiness: a few named checks, each set by the thread that knows
 * (sg_health_set), or probed on demand from the endpoint's thread with a
 * cached result (sg_health_set_probe, for Kafka reachability).  A process
 * is ready when every check it requires passes and it is not draining
 * (sg_run_running still set: the first SIGTERM makes it unready at once).
 * Thread-safe. */
#ifndef SAGAD_HEALTH_H
#define SAGAD_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sg_check_e {
    SG_CHECK_PG,     /* the PostgreSQL session works */
    SG_CHECK_SCHEMA, /* migrations at the version this binary needs */
    SG_CHECK_KAFKA,  /* a broker answers */
    SG_CHECK_GROUP,  /* worker: joined its consumer group (partitions, or none to give it) */
    SG_CHECK_LOCK,   /* relay: shard lock state known (active or standby) */
    SG_CHECK__COUNT
} sg_check_t;

#define SG_CHECK_BIT(c) (1u << (c))

/* Requires the checks in mask; each starts failing with "not checked yet". */
void sg_health_init(unsigned required_mask);

/* Sets a check; fmt (printf) says why it fails and is ignored when ok.
 * SG_CHECK_PG and SG_CHECK_KAFKA also drive sagad_pg_connected and
 * sagad_kafka_connected. */
void sg_health_set(sg_check_t check, bool ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A check evaluated by calling fn (from the endpoint's thread) when its last
 * result is older than every_ms.  fn returns true when the check passes and
 * otherwise writes why into why. */
typedef bool (*sg_health_probe_fn)(void *opaque, char *why, size_t why_size);

/* A probe for SG_CHECK_KAFKA: opaque is an sg_kafka_t (thread-safe, so it
 * may be asked from the endpoint's thread); passes when a broker answers
 * a metadata request within a second. */
bool sg_health_kafka_probe(void *opaque, char *why, size_t why_size);
void sg_health_set_probe(sg_check_t check, sg_health_probe_fn fn, void *opaque, int every_ms);
/* Forgets the probe (before its opaque goes away). */
void sg_health_clear_probe(sg_check_t check);

/* Runs the probes whose result is stale. */
void sg_health_refresh(void);

void sg_health_beat(void);

/* True when the last beat is younger than stall_ms; otherwise writes the
 * reason into out. */
bool sg_health_live(int64_t stall_ms, char *out, size_t out_size);

/* True when ready; otherwise writes one line per failing check into out
 * ("postgresql: ...\n"). */
bool sg_health_ready(char *out, size_t out_size);

#endif
