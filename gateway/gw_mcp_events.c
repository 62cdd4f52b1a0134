/* A saga's events after a seq, for get_saga_events (gw_mcp.h).
 *
 * PostgreSQL does not keep a saga's events once the relay published them
 * (the outbox is a queue, not a history), so they are read where
 * GET /v1/sagas/{id}/events reads them (gw_events.c): the saga's partition
 * of topic.events, from shortly before the saga was created, outside any
 * consumer group.  Unlike that stream this read is bounded: it stops once
 * it has the events up to the seq the saga had when asked (the envelope's;
 * the relay may publish the last of them a moment later), after limit
 * events or after budget_ms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_mcp.h"
#include "sagad/sg_run.h"

#define LOOKBACK_MS 10000 /* clocks of producers and brokers differ a little */

/* Takes one message: an event of saga_id after *last (and up to upto) is
 * appended. */
static void take(sg_kafka_msg_t *msg, const char *saga_id, int64_t *last, int64_t upto,
                 sg_json_t *events)
{
    size_t klen, plen;
    const void *key = sg_kafka_msg_key(msg, &klen);
    const char *payload = sg_kafka_msg_payload(msg, &plen);
    sg_json_t *ev;
    int64_t seq;

    if (!key || klen != strlen(saga_id) || memcmp(key, saga_id, klen) != 0 || !payload)
        return;
    if (!(ev = sg_json_parse(payload, plen, NULL, NULL)))
        return;
    if (sg_json_get_int(ev, "$", "seq", true, &seq, NULL) == 0 && seq > *last && seq <= upto &&
        sg_json_string(sg_json_member(ev, "type"))) {
        sg_json_append(events, ev);
        *last = seq;
        return;
    }
    sg_json_destroy(ev);
}

int gw_mcp_events_read(gw_t *gw, const char *saga_id, int64_t created_ms, int64_t after_seq,
                       int64_t upto, size_t limit, int64_t budget_ms, sg_json_t *events,
                       bool *complete, char *why, size_t why_size)
{
    const char *topic = sg_config_str(gw->cfg, "topic.events");
    const char *props[] = {"group.id", "sagad-gateway-mcp-events",   "enable.partition.eof",
                           "false",    "queued.max.messages.kbytes", "1024",
                           NULL};
    uint64_t deadline = sg_run_now_ms() + (uint64_t)budget_ms;
    int64_t last = after_seq, offset;
    sg_kafka_t *k;
    sg_err_t err;
    int nparts, rc = 0;
    int32_t part;

    *complete = false;
    if (!(k = sg_kafka_new(gw->cfg, SG_KAFKA_CONSUMER, props, why, why_size)))
        return -1;
    if ((nparts = sg_kafka_partition_count(k, topic, 5000)) <= 0 ||
        (part = sg_kafka_key_partition(saga_id, strlen(saga_id), nparts)) < 0 ||
        (offset = sg_kafka_offset_at(k, topic, part, created_ms - LOOKBACK_MS, 5000, &err)) < -1 ||
        sg_kafka_assign_at(k, topic, part, offset, &err) < 0) {
        snprintf(why, why_size, "cannot read the events topic (topic.events): Kafka unreachable");
        sg_kafka_destroy(k);
        return -1;
    }
    /* offset -1: the partition's end (nothing that recent yet) */
    while (last < upto && sg_json_array_size(events) < limit && sg_run_now_ms() < deadline) {
        sg_kafka_msg_t *msg = NULL;
        int got = sg_kafka_consume(k, 200, &msg, &err);
        if (got < 0) {
            snprintf(why, why_size, "cannot read the events topic: %s", err.message);
            rc = -1;
            break;
        }
        if (got > 0) {
            take(msg, saga_id, &last, upto, events);
            sg_kafka_msg_destroy(msg);
        }
    }
    *complete = last >= upto;
    sg_kafka_destroy(k);
    return rc;
}
