/* sg_backoff: exponential backoff with full jitter.
 *
 * delay = random(0, min(cap, base * 2^attempt)), and a Retry-After from the
 * downstream wins when it is larger.  The random source is a small seedable
 * generator so tests can replay a sequence; it is not for secrets. */
#ifndef SAGAD_BACKOFF_H
#define SAGAD_BACKOFF_H

#include <stdint.h>

typedef struct sg_backoff_s {
    uint64_t base_ms;
    uint64_t cap_ms;
} sg_backoff_t;

typedef struct sg_rng_s {
    uint64_t state;
} sg_rng_t;

/* Seeds rng; seed 0 picks one from the clock and the pid. */
void sg_rng_seed(sg_rng_t *rng, uint64_t seed);

/* Uniform in [0, bound] inclusive. */
uint64_t sg_rng_upto(sg_rng_t *rng, uint64_t bound);

/* min(cap, base * 2^attempt), overflow-safe; attempt counts from 0. */
uint64_t sg_backoff_ceiling_ms(const sg_backoff_t *b, unsigned attempt);

/* The delay before retry number attempt (from 0): a full-jitter draw,
 * or retry_after_ms when that is larger (0 means none was given). */
uint64_t sg_backoff_delay_ms(const sg_backoff_t *b, unsigned attempt, uint64_t retry_after_ms,
                             sg_rng_t *rng);

#endif
