/* sg_http: the small HTTP endpoint of the long-running binaries.
 *
 *   GET /metrics  Prometheus text format 0.0.4 (sg_metrics_render)
 *   GET /healthz  200 "ok" while the main loop turns (health.stall_ms),
 *                 else 503 with the reason
 *   GET /readyz   200 "ok" when ready (sg_health_ready), else 503 with one
 *                 line per failing check
 *
 * Served by libmicrohttpd on its own thread, so a busy or stuck main loop
 * still answers probes (and /healthz can tell it is stuck).  The only door
 * to libmicrohttpd. */
#ifndef SAGAD_HTTP_H
#define SAGAD_HTTP_H

#include <stddef.h>

#include "sagad/sg_config.h"

typedef struct sg_http_s sg_http_t;

/* Turns on the metrics of served_by (SG_METRICS_*) and the readiness
 * checks of required_checks (SG_CHECK_BIT()s), then listens on
 * http.bind:http.port (port 0: a free port) and logs
 * {"msg":"http endpoint listening","addr":"HOST:PORT"}.  Returns NULL with
 * errstr naming the address on failure (bad address, port in use). */
sg_http_t *sg_http_start(const sg_config_t *cfg, unsigned served_by, unsigned required_checks,
                         char *errstr, size_t errstr_size) __attribute__((warn_unused_result));

/* Stops serving and joins the thread; NULL is a no-op. */
void sg_http_stop(sg_http_t *http);

#endif
