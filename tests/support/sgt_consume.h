/* Reading what a relay published, and checking it: the relay suites'
 * (test_relay.c, test_relay_wal.c) common ground. */
#ifndef SGT_CONSUME_H
#define SGT_CONSUME_H

#include <stddef.h>
#include <stdint.h>

typedef struct got_s {
    char **payload;
    int64_t *ts;
    char *keyless; /* 1: the message had no key (not an empty one) */
    size_t n, cap;
} got_t;

/* Reads topic from the beginning, in a new group, until want messages
 * came or timeout_s passed. */
void sgt_consume(const char *topic, got_t *got, size_t want, double timeout_s);
void got_free(got_t *got);

/* Payloads are "k<key>:<seq>".  Checks every (key, seq < per_key) arrived
 * and that per key the first arrivals are in seq order.  Returns the
 * number of duplicates. */
size_t check_complete_ordered(const got_t *got, int keys, int per_key);

#endif
