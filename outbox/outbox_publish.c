/* What both sources of the relay share (outbox_relay.c reads the outbox
 * table, outbox_wal.c the write-ahead log): the internal keys a message is
 * signed with, one message handed to Kafka, the move of due timers, and
 * the relay's nap. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "outbox.h"
#include "sagad/sg_health.h"
#include "sagad/sg_json.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"

void outbox_nap(uint64_t ms)
{
    for (uint64_t end = sg_run_now_ms() + ms; sg_run_running && sg_run_now_ms() < end;) {
        struct timespec ts = {0, 20 * 1000000L};
        sg_health_beat();
        nanosleep(&ts, NULL);
    }
}

void outbox_signer_init(outbox_signer_t *s, const sg_config_t *cfg)
{
    memset(s, 0, sizeof(*s));
    (void)sg_trust_mode_parse(sg_config_str(cfg, "security.internal_auth"), &s->trust);
    s->reload_ms = (uint64_t)sg_config_int(cfg, "security.key_reload_ms");
}

/* The internal keys, unless security.internal_auth is off.  A relay that
 * cannot sign does not publish: a worker that requires signatures would
 * dead-letter every step command it sent. */
int outbox_signer_load(outbox_signer_t *s, sg_pg_t *pg, sg_err_t *err)
{
    sg_mac_keys_t keys;

    if (s->trust == SG_TRUST_OFF)
        return 0;
    if (sg_trust_keys_load(pg, &keys, err) < 0)
        return -1;
    sg_mac_keys_clear(&s->keys);
    s->keys = keys;
    s->keys_at = sg_run_now_ms() + s->reload_ms;
    if (s->keys.signer < 0)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.internal_keys",
                          "no internal key may sign now (table internal_keys: every key "
                          "expired or not yet signing): run sagad_internal_key_rotate('0 s') "
                          "as the owner (docs/OPERATIONS.md, \"Internal keys\")");
    return 0;
}

int outbox_signer_refresh(outbox_signer_t *s, sg_pg_t *pg, sg_err_t *err)
{
    if (s->trust == SG_TRUST_OFF || sg_run_now_ms() < s->keys_at)
        return 0;
    return outbox_signer_load(s, pg, err);
}

/* Headers are the text of a JSON object of strings (others are skipped). */
int outbox_produce(sg_kafka_t *producer, const outbox_signer_t *s, const char *topic,
                   const unsigned char *key, size_t key_len, const char *headers,
                   size_t headers_len, const unsigned char *payload, size_t len,
                   outbox_trace_hint_t *hint, sg_kafka_batch_t *batch, sg_err_t *err)
{
    sg_kafka_header_t hdrs[32];
    char mac[SG_MAC_VALUE_MAX];
    size_t nh = 0;
    sg_json_t *parsed = headers ? sg_json_parse(headers, headers_len, NULL, NULL) : NULL;
    int rc;

    if (hint)
        hint->traceparent[0] = hint->type[0] = '\0';
    for (const sg_json_t *h = sg_json_first(parsed); h && nh < 32; h = sg_json_next(h)) {
        const char *v = sg_json_string(h);

        if (!v)
            continue;
        /* the first of each, as sg_json_member() would find it */
        if (hint && !hint->traceparent[0] && strcmp(sg_json_key(h), "traceparent") == 0 &&
            strlen(v) < sizeof(hint->traceparent))
            strcpy(hint->traceparent, v);
        else if (hint && !hint->type[0] && strcmp(sg_json_key(h), "sagad-type") == 0)
            sg_text_copy(hint->type, sizeof(hint->type), v);
        hdrs[nh].name = sg_json_key(h);
        hdrs[nh].value = v;
        hdrs[nh].len = strlen(v);
        nh++;
    }
    if (s->trust != SG_TRUST_OFF) {
        /* Over the topic, key and payload as they leave: a message's own
         * sagad-mac header (none is written, but a row is data) is
         * replaced, not trusted. */
        for (size_t i = 0; i < nh; i++)
            if (strcmp(hdrs[i].name, SG_MAC_HEADER) == 0)
                hdrs[i] = hdrs[--nh];
        if (nh < 32 && sg_mac_sign(&s->keys, topic, key, key_len, payload, len, mac) == 0) {
            hdrs[nh].name = SG_MAC_HEADER;
            hdrs[nh].value = mac;
            hdrs[nh].len = strlen(mac);
            nh++;
        }
    }
    rc = sg_kafka_produce(producer, topic, key, key_len, payload, len, hdrs, nh, batch, err);
    sg_json_destroy(parsed);
    return rc;
}

/* Moves up to timer_batch due timers into the outbox in one statement
 * (their due order kept), and says when the next one is due
 * (*next_ms, capped by cap).
 * Both read the time once: now(), the statement's transaction start, so
 * "due" is an index condition on timers_due (clock_timestamp() is
 * volatile and was a filter, which walked every future timer).  With the
 * WAL source the outbox's trigger writes them into the WAL instead. */
int outbox_fire_timers(sg_pg_t *pg, int64_t timer_batch, uint64_t cap, uint64_t *next_ms,
                       sg_err_t *err)
{
    char nbuf[24];
    const char *p[] = {sg_pg_int_text(nbuf, timer_batch)};
    sg_pg_res_t *res = NULL;
    int64_t n, ms;

    if (sg_pg_exec_cached(pg,
                          "WITH due AS (DELETE FROM timers WHERE id IN (SELECT id FROM timers "
                          "WHERE due_at <= now() ORDER BY due_at, id LIMIT $1 "
                          "FOR UPDATE SKIP LOCKED) RETURNING due_at, id, topic, key, headers, "
                          "payload), "
                          "moved AS (INSERT INTO outbox (topic, key, headers, payload) "
                          "SELECT topic, key, headers, payload FROM due ORDER BY due_at, id "
                          "RETURNING 1) "
                          "SELECT (SELECT count(*) FROM due), "
                          "(SELECT ceil(extract(epoch FROM min(due_at) - now()) * 1000)::bigint "
                          "FROM timers WHERE due_at > now())",
                          1, p, &res, err) < 0)
        return -1;
    n = sg_pg_res_int(res, 0, 0, 0);
    ms = sg_pg_res_int(res, 0, 1, (int64_t)cap);
    sg_pg_res_destroy(res);
    sg_metric_add(SG_M_TIMERS_FIRED, NULL, (uint64_t)n);
    if (ms < 0)
        ms = 0;
    *next_ms = (uint64_t)ms < cap ? (uint64_t)ms : cap;
    return (int)n;
}
