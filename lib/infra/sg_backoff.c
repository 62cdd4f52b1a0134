#include "sagad/sg_backoff.h"

#include <time.h>
#include <unistd.h>

/* splitmix64: tiny, fast, and good enough to spread retries. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sg_rng_seed(sg_rng_t *rng, uint64_t seed)
{
    if (seed == 0) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    rng->state = seed;
}

uint64_t sg_rng_upto(sg_rng_t *rng, uint64_t bound)
{
    uint64_t span, limit, r;

    if (bound == UINT64_MAX)
        return splitmix64(&rng->state);
    span = bound + 1;
    /* Rejection sampling keeps the draw unbiased. */
    limit = UINT64_MAX - UINT64_MAX % span;
    do {
        r = splitmix64(&rng->state);
    } while (r >= limit);
    return r % span;
}

uint64_t sg_backoff_ceiling_ms(const sg_backoff_t *b, unsigned attempt)
{
    if (b->base_ms == 0)
        return 0;
    if (attempt >= 63 || b->base_ms > (b->cap_ms >> attempt))
        return b->cap_ms;
    return b->base_ms << attempt < b->cap_ms ? b->base_ms << attempt : b->cap_ms;
}

uint64_t sg_backoff_delay_ms(const sg_backoff_t *b, unsigned attempt, uint64_t retry_after_ms,
                             sg_rng_t *rng)
{
    uint64_t delay = sg_rng_upto(rng, sg_backoff_ceiling_ms(b, attempt));

    return retry_after_ms > delay ? retry_after_ms : delay;
}
