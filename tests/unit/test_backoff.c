/* sg_backoff: full jitter keeps retrying workers from stampeding; the
 * ceiling keeps a long outage from producing hour-long sleeps. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "sagad/sg_backoff.h"
#include "unit.h"

#define DRAWS 10000

static const sg_backoff_t doc_backoff = {250, 30000}; /* retry.base_ms, retry.cap_ms defaults */

Test(backoff, ceiling_doubles_from_base_up_to_cap)
{
    static const struct {
        unsigned attempt;
        uint64_t ceiling;
    } cases[] = {
        {0, 250},    {1, 500},    {2, 1000},    {3, 2000},     {4, 4000},
        {5, 8000},   {6, 16000},  {7, 30000},   {8, 30000},    {62, 30000},
        {63, 30000}, {64, 30000}, {100, 30000}, {1000, 30000}, {UINT32_MAX, 30000},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_eq(sg_backoff_ceiling_ms(&doc_backoff, cases[i].attempt), cases[i].ceiling,
                     "attempt %u: got %llu, expected %llu", cases[i].attempt,
                     (unsigned long long)sg_backoff_ceiling_ms(&doc_backoff, cases[i].attempt),
                     (unsigned long long)cases[i].ceiling);
}

Test(backoff, ceiling_does_not_overflow_with_huge_base)
{
    sg_backoff_t b = {UINT64_MAX / 2 + 1, UINT64_MAX}; /* 2^63 */
    sg_backoff_t c = {UINT64_C(1) << 40, UINT64_C(1) << 62};

    cr_assert_eq(sg_backoff_ceiling_ms(&b, 0), UINT64_MAX / 2 + 1);
    cr_assert_eq(sg_backoff_ceiling_ms(&b, 1), UINT64_MAX, "2^64 must clamp to the cap");
    cr_assert_eq(sg_backoff_ceiling_ms(&b, 70), UINT64_MAX);
    cr_assert_eq(sg_backoff_ceiling_ms(&c, 21), UINT64_C(1) << 61);
    cr_assert_eq(sg_backoff_ceiling_ms(&c, 22), UINT64_C(1) << 62);
    cr_assert_eq(sg_backoff_ceiling_ms(&c, 30), UINT64_C(1) << 62,
                 "must not wrap to a small value");
}

Test(backoff, base_above_cap_gives_cap)
{
    sg_backoff_t b = {5000, 1000};

    cr_assert_eq(sg_backoff_ceiling_ms(&b, 0), 1000);
    cr_assert_eq(sg_backoff_ceiling_ms(&b, 3), 1000);
}

Test(backoff, delay_stays_within_zero_and_ceiling)
{
    sg_rng_t rng;

    sg_rng_seed(&rng, 42);
    for (unsigned attempt = 0; attempt < 12; attempt++) {
        uint64_t ceiling = sg_backoff_ceiling_ms(&doc_backoff, attempt);

        for (int i = 0; i < 2000; i++) {
            uint64_t d = sg_backoff_delay_ms(&doc_backoff, attempt, 0, &rng);

            cr_assert_leq(d, ceiling, "attempt %u: delay %llu above ceiling %llu", attempt,
                          (unsigned long long)d, (unsigned long long)ceiling);
        }
    }
}

Test(backoff, same_seed_replays_the_same_sequence)
{
    sg_rng_t a, b;

    sg_rng_seed(&a, 12345);
    sg_rng_seed(&b, 12345);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(sg_backoff_delay_ms(&doc_backoff, (unsigned)(i % 10), 0, &a),
                     sg_backoff_delay_ms(&doc_backoff, (unsigned)(i % 10), 0, &b), "draw %d", i);
}

Test(backoff, different_seeds_give_different_sequences)
{
    sg_rng_t a, b;
    int same = 0;

    sg_rng_seed(&a, 1);
    sg_rng_seed(&b, 2);
    for (int i = 0; i < 100; i++)
        same += sg_backoff_delay_ms(&doc_backoff, 7, 0, &a) ==
                sg_backoff_delay_ms(&doc_backoff, 7, 0, &b);
    cr_assert_lt(same, 10, "%d of 100 draws equal across seeds", same);
}

Test(backoff, seed_zero_picks_a_seed)
{
    sg_rng_t rng;

    sg_rng_seed(&rng, 0);
    cr_assert_neq(rng.state, 0, "seed 0 must be replaced by a clock/pid seed");
}

Test(backoff, draws_spread_over_the_whole_range)
{
    sg_backoff_t b = {1000, 1000};
    sg_rng_t rng;
    uint64_t sum = 0;
    int low = 0, high = 0;

    sg_rng_seed(&rng, 7);
    for (int i = 0; i < DRAWS; i++) {
        uint64_t d = sg_backoff_delay_ms(&b, 0, 0, &rng);

        cr_assert_leq(d, 1000);
        sum += d;
        low += d < 100;
        high += d > 900;
    }
    cr_assert(sum / DRAWS >= 400 && sum / DRAWS <= 600, "mean %llu not near 500",
              (unsigned long long)(sum / DRAWS));
    /* Each tail holds ~10% of a uniform draw. */
    cr_assert_gt(low, DRAWS / 20, "only %d draws below 100", low);
    cr_assert_gt(high, DRAWS / 20, "only %d draws above 900", high);
}

Test(backoff, retry_after_larger_than_jitter_wins)
{
    sg_rng_t rng;

    sg_rng_seed(&rng, 3);
    for (int i = 0; i < 1000; i++) {
        /* Retry-After may exceed the cap: the downstream asked for it. */
        cr_assert_eq(sg_backoff_delay_ms(&doc_backoff, 0, 5000, &rng), 5000);
        cr_assert_eq(sg_backoff_delay_ms(&doc_backoff, 20, 60000, &rng), 60000);
    }
}

Test(backoff, smaller_retry_after_is_a_floor_not_the_delay)
{
    sg_backoff_t b = {1000, 1000};
    sg_rng_t rng;
    int above = 0;

    sg_rng_seed(&rng, 4);
    for (int i = 0; i < 1000; i++) {
        uint64_t d = sg_backoff_delay_ms(&b, 0, 100, &rng);

        cr_assert(d >= 100 && d <= 1000, "delay %llu outside [100, 1000]", (unsigned long long)d);
        above += d > 100;
    }
    cr_assert_gt(above, 800, "the jitter draw must win when larger (%d of 1000)", above);
}

Test(backoff, rng_upto_bounds)
{
    sg_rng_t rng;
    int seen[2] = {0, 0};

    sg_rng_seed(&rng, 99);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(sg_rng_upto(&rng, 0), 0);
    for (int i = 0; i < 1000; i++) {
        uint64_t v = sg_rng_upto(&rng, 1);

        cr_assert_leq(v, 1);
        seen[v]++;
    }
    cr_assert(seen[0] > 300 && seen[1] > 300, "bound 1: %d zeros, %d ones", seen[0], seen[1]);
    for (int i = 0; i < 1000; i++)
        cr_assert_leq(sg_rng_upto(&rng, 6), 6);
    (void)sg_rng_upto(&rng, UINT64_MAX); /* every value is in range; must not loop forever */
}
