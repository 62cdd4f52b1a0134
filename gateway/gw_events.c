/* GET /v1/sagas/{id}/events: the saga's events as Server-Sent Events
 * (gw.h).
 *
 * The events topic is the record: each stream reads the saga's partition
 * (the key's, as the relay's producer chose it) from a little before the
 * saga was created, outside any consumer group, and passes on the events
 * keyed by the saga id.  When no event is that late yet (the relay has
 * not published them), it reads from the partition's end as it was
 * before that question, a number, not "the end" when the reader starts:
 * what the relay publishes in between is not skipped.  Each event's `id:` is its seq, so a client
 * that reconnects with Last-Event-ID gets the events after it: none lost, none twice.  A stream
 * ends after the saga's last event, or after gateway.wait_max_ms (reconnect to go on).  Streams are
 * few by design (each holds a Kafka reader): at most STREAMS_MAX at once per replica; a program
 * that only needs the outcome long-polls /wait instead. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "sagad/sg_submit.h"

#define STREAMS_MAX  64
#define KEEPALIVE_MS 15000
#define LOOKBACK_MS  10000 /* clocks of producers and brokers differ a little */

static atomic_int streams;

typedef struct stream_s {
    sg_kafka_t *k;
    char saga_id[SG_SAGA_ID_MAX + 1];
    int64_t last_seq;
    uint64_t deadline, last_write;
    char *out;
    size_t len, off;
    bool done;
} stream_t;

static bool terminal(const char *type)
{
    return type && (strcmp(type, "saga.completed") == 0 || strcmp(type, "saga.compensated") == 0 ||
                    strcmp(type, "saga.failed") == 0 || strcmp(type, "saga.cancelled") == 0);
}

static void put(stream_t *s, const char *text, size_t n)
{
    s->out = sg_xrealloc(s->out, s->len + n + 1);
    memcpy(s->out + s->len, text, n);
    s->len += n;
    s->out[s->len] = '\0';
}

static void puts_(stream_t *s, const char *text)
{
    put(s, text, strlen(text));
}

/* One event: id, event and its payload as data lines. */
static void frame(stream_t *s, int64_t seq, const char *type, const char *payload, size_t len)
{
    char head[200];
    size_t i = 0;

    snprintf(head, sizeof(head), "id: %lld\nevent: %s\n", (long long)seq, type);
    puts_(s, head);
    while (i < len) {
        const char *nl = memchr(payload + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - (payload + i)) : len - i;
        puts_(s, "data: ");
        put(s, payload + i, n);
        puts_(s, "\n");
        i += n + (nl ? 1 : 0);
    }
    puts_(s, "\n");
}

/* Takes one message: an event of this saga after last_seq is framed. */
static void take(stream_t *s, sg_kafka_msg_t *msg)
{
    size_t klen, plen;
    const void *key = sg_kafka_msg_key(msg, &klen);
    const char *payload = sg_kafka_msg_payload(msg, &plen);
    sg_json_t *ev;
    int64_t seq;
    const char *type;

    if (!key || klen != strlen(s->saga_id) || memcmp(key, s->saga_id, klen) != 0 || !payload)
        return;
    if (!(ev = sg_json_parse(payload, plen, NULL, NULL)))
        return;
    type = sg_json_string(sg_json_member(ev, "type"));
    if (sg_json_get_int(ev, "$", "seq", true, &seq, NULL) == 0 && seq > s->last_seq && type) {
        frame(s, seq, type, payload, plen);
        s->last_seq = seq;
        if (terminal(type))
            s->done = true;
    }
    sg_json_destroy(ev);
}

static long stream_read(void *opaque, char *buf, size_t max)
{
    stream_t *s = opaque;

    for (;;) {
        sg_kafka_msg_t *msg = NULL;
        sg_err_t err;
        int rc;

        if (s->off < s->len) {
            size_t n = s->len - s->off < max ? s->len - s->off : max;
            memcpy(buf, s->out + s->off, n);
            s->off += n;
            if (s->off == s->len)
                s->off = s->len = 0;
            s->last_write = sg_run_now_ms();
            return (long)n;
        }
        if (s->done)
            return -1;
        if (sg_run_now_ms() >= s->deadline || !sg_run_running) {
            puts_(s, ": the stream ends here (gateway.wait_max_ms); reconnect with "
                     "Last-Event-ID to go on\n\n");
            s->done = true;
            continue;
        }
        rc = sg_kafka_consume(s->k, 1000, &msg, &err);
        if (rc > 0) {
            take(s, msg);
            sg_kafka_msg_destroy(msg);
        } else if (rc < 0) {
            sg_log_kv(SG_LOG_WARN, "event stream: cannot read the events topic", "saga_id",
                      s->saga_id, "error", err.message, NULL);
        }
        if (s->len == 0 && sg_run_now_ms() - s->last_write >= KEEPALIVE_MS)
            puts_(s, ": keep-alive\n\n");
    }
}

static void stream_done(void *opaque)
{
    stream_t *s = opaque;

    sg_kafka_destroy(s->k);
    free(s->out);
    free(s);
    atomic_fetch_sub(&streams, 1);
}

void gw_sagas_events(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans)
{
    const char *last = sg_http_req_header(req, "Last-Event-ID");
    const char *topic = sg_config_str(gw->cfg, "topic.events");
    /* A stream reads one saga's events: a small prefetch (librdkafka's
     * default is 64 MB per reader, and a replica may hold 64 of them). */
    const char *props[] = {"group.id", "sagad-gateway-events",       "enable.partition.eof",
                           "false",    "queued.max.messages.kbytes", "1024",
                           NULL};
    sg_pg_res_t *res = NULL;
    stream_t *s;
    sg_err_t err;
    sg_pg_t *pg;
    char errstr[512];
    int64_t created_ms, offset, low, high;
    int nparts, rc;
    int32_t part;

    if (!last)
        last = sg_http_req_query(req, "after_seq");
    if (!sg_saga_id_ok(a->id)) {
        gw_problem(ans, 400, "{id}: a saga id is 1 to 128 of A-Z a-z 0-9 . _ : -", NULL);
        return;
    }
    if (!(pg = gw_pool_get(gw->pool, &err))) {
        gw_db_problem(ans, &err);
        return;
    }
    rc = sg_pg_exec(pg,
                    "SELECT submitted_by, (extract(epoch FROM created_at) * 1000)::bigint "
                    "FROM sagas WHERE saga_id = $1",
                    1, &a->id, &res, &err);
    gw_pool_put(gw->pool, pg);
    if (rc < 0) {
        gw_db_problem(ans, &err);
        return;
    }
    if (sg_pg_res_rows(res) == 0 ||
        !((c->user->perms & GW_P_READ_ALL) ||
          ((c->user->perms & GW_P_READ_OWN) && sg_pg_res_get(res, 0, 0) &&
           strcmp(sg_pg_res_get(res, 0, 0), c->user->name) == 0))) {
        sg_pg_res_destroy(res);
        gw_problem(ans, 404, "no saga of that id that you may read", NULL);
        return;
    }
    created_ms = sg_pg_res_int(res, 0, 1, 0);
    sg_pg_res_destroy(res);
    if (atomic_fetch_add(&streams, 1) >= STREAMS_MAX) {
        atomic_fetch_sub(&streams, 1);
        gw_problem(ans, 503,
                   "too many event streams open on this replica: long-poll "
                   "/v1/sagas/{id}/wait, or retry later",
                   NULL);
        sg_http_answer_header(ans, "Retry-After", "5");
        return;
    }
    s = sg_xcalloc(1, sizeof(*s));
    snprintf(s->saga_id, sizeof(s->saga_id), "%s", a->id);
    s->last_seq = 0;
    if (last) {
        char *end;
        long long v;
        errno = 0;
        v = strtoll(last, &end, 10);
        if (*last < '0' || *last > '9' || *end || errno) {
            free(s);
            atomic_fetch_sub(&streams, 1);
            gw_problem(ans, 400, "Last-Event-ID (or after_seq): the seq of the last event read",
                       NULL);
            return;
        }
        s->last_seq = v;
    }
    s->deadline = sg_run_now_ms() + (uint64_t)gw->wait_max_ms;
    s->last_write = sg_run_now_ms();
    if (!(s->k = sg_kafka_new(gw->cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr))) ||
        (nparts = sg_kafka_partition_count(s->k, topic, 5000)) <= 0 ||
        (part = sg_kafka_key_partition(a->id, strlen(a->id), nparts)) < 0 ||
        sg_kafka_query_watermarks(s->k, topic, part, 5000, &low, &high) < 0 ||
        (offset = sg_kafka_offset_at(s->k, topic, part, created_ms - LOOKBACK_MS, 5000, &err)) <
            -1 ||
        sg_kafka_assign_at(s->k, topic, part, offset == -1 ? high : offset, &err) < 0) {
        gw_problem(ans, 503, "cannot read the events topic (topic.events): Kafka unreachable",
                   NULL);
        stream_done(s);
        return;
    }
    ans->status = 200;
    ans->type = "text/event-stream";
    sg_http_answer_header(ans, "Cache-Control", "no-cache");
    sg_http_answer_header(ans, "X-Accel-Buffering", "no");
    ans->read = stream_read;
    ans->done = stream_done;
    ans->opaque = s;
    /* The first bytes go out at once, so the client knows it is
     * connected before the first event. */
    puts_(s, ": sagad events\n\n");
}
