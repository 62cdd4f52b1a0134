/* sgt_consume.h: reading and checking what a relay published. */
#include "sgt_consume.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_test.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_pg.h"

static char *headers_text(const sg_kafka_msg_t *msg)
{
    char *text = NULL;
    size_t size = 0, len;
    FILE *f = open_memstream(&text, &size);
    const char *name;
    const void *value;

    cr_assert_not_null(f);
    for (size_t i = 0; sg_kafka_msg_header_at(msg, i, &name, &value, &len) == 1; i++)
        fprintf(f, "%s=%.*s\n", name, (int)len, value ? (const char *)value : "");
    fclose(f);
    return text;
}

void sgt_consume(const char *topic, got_t *got, size_t want, double timeout_s)
{
    char group[128], errstr[256];
    const char *props[] = {"bootstrap.servers", sgt_kafka(), "group.id", group, NULL};
    const char *topics[] = {topic};
    sg_kafka_t *c;
    sg_err_t err;
    double deadline = sgt_now_s() + timeout_s;

    sgt_unique(group, sizeof(group), "sgt_group");
    c = sg_kafka_new(NULL, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr));
    cr_assert_not_null(c, "%s", errstr);
    cr_assert_eq(sg_kafka_subscribe(c, topics, 1, &err), 0, "%s", err.message);
    memset(got, 0, sizeof(*got));
    while (got->n < want && sgt_now_s() < deadline) {
        sg_kafka_msg_t *msg;
        const char *data;
        size_t len;

        if (sg_kafka_consume(c, 200, &msg, &err) != 1)
            continue;
        if (got->n == got->cap) {
            got->cap = got->cap ? got->cap * 2 : 1024;
            got->payload = realloc(got->payload, got->cap * sizeof(char *));
            got->ts = realloc(got->ts, got->cap * sizeof(int64_t));
            got->keyless = realloc(got->keyless, got->cap);
            got->key = realloc(got->key, got->cap * sizeof(char *));
            got->headers = realloc(got->headers, got->cap * sizeof(char *));
        }
        data = sg_kafka_msg_payload(msg, &len);
        got->payload[got->n] = strndup(data, len);
        data = sg_kafka_msg_key(msg, &len);
        got->keyless[got->n] = data == NULL;
        got->key[got->n] = data ? strndup(data, len) : NULL;
        got->headers[got->n] = headers_text(msg);
        got->ts[got->n++] = sg_kafka_msg_timestamp(msg);
        sg_kafka_msg_destroy(msg);
    }
    sg_kafka_destroy(c);
}

void got_free(got_t *got)
{
    for (size_t i = 0; i < got->n; i++) {
        free(got->payload[i]);
        free(got->key[i]);
        free(got->headers[i]);
    }
    free(got->payload);
    free(got->key);
    free(got->headers);
    free(got->ts);
    free(got->keyless);
}

size_t check_complete_ordered(const got_t *got, int keys, int per_key)
{
    int *next = calloc((size_t)keys, sizeof(int));
    size_t dups = 0;

    for (size_t i = 0; i < got->n; i++) {
        int k, seq;

        cr_assert_eq(sscanf(got->payload[i], "k%d:%d", &k, &seq), 2, "bad payload %s",
                     got->payload[i]);
        cr_assert(k >= 0 && k < keys);
        if (seq < next[k]) {
            dups++; /* a redelivery of something already seen */
            continue;
        }
        cr_assert_eq(seq, next[k], "key %d: got seq %d, expected %d (lost or reordered)", k, seq,
                     next[k]);
        next[k]++;
    }
    for (int k = 0; k < keys; k++)
        cr_assert_eq(next[k], per_key, "key %d: only %d of %d messages arrived", k, next[k],
                     per_key);
    free(next);
    return dups;
}

void sgt_insert_round(sg_pg_t *pg, const char *topic, int first, int stride, int nkeys, int seq)
{
    char a[16], b[16], c[16], d[16];
    const char *p[] = {topic, a, b, c, d};
    sg_err_t err;

    snprintf(a, sizeof(a), "%d", first);
    snprintf(b, sizeof(b), "%d", stride);
    snprintf(c, sizeof(c), "%d", nkeys);
    snprintf(d, sizeof(d), "%d", seq);
    cr_assert_eq(sg_pg_exec(pg,
                            "INSERT INTO outbox (topic, key, payload) SELECT $1, "
                            "convert_to('k' || k, 'UTF8'), convert_to('k' || k || ':' || $5::int, "
                            "'UTF8') FROM (SELECT $2::int + $3::int * i AS k "
                            "FROM generate_series(0, $4::int - 1) AS i ORDER BY i) s",
                            5, p, NULL, &err),
                 0, "insert round: %s", err.message);
}
