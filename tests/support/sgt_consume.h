/* Reading what a relay published, and checking it: the relay suites'
 * (test_relay.c, test_relay_wal.c) common ground. */
#ifndef SGT_CONSUME_H
#define SGT_CONSUME_H

#include <stddef.h>
#include <stdint.h>

struct sg_pg_s;

typedef struct got_s {
    char **payload;
    int64_t *ts;
    char *keyless;  /* 1: the message had no key (not an empty one) */
    char **key;     /* the key as text, NULL when keyless */
    char **headers; /* every header in order, "name=value\n" each */
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

/* Inserts into the outbox, in one transaction, rows "k<key>:<seq>" under
 * key "k<key>" for keys first, first + stride, ... (nkeys of them), to
 * topic: one round of the workload check_complete_ordered checks. */
void sgt_insert_round(struct sg_pg_s *pg, const char *topic, int first, int stride, int nkeys,
                      int seq);

#endif
