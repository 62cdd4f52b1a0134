/* The `run` command, the top of the loop's files: setup opens what a run
 * holds (the HTTP endpoint, a PostgreSQL connection per transaction slot,
 * the consumers and their wake-up pipe, the partition watcher, the pool) and
 * teardown closes it in order; in between the main loop turns
 * (loop_run(), worker_loop.c), calling back each_turn() here for
 * housekeeping (liveness, SIGHUP, gauges, session checks) and the
 * progress line. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_health.h"
#include "sagad/sg_http.h"
#include "sagad/sg_log.h"
#include "sagad/sg_metrics.h"
#include "sagad/sg_otel.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_run.h"
#include "worker_loop_int.h"
#include "../apply/worker_observe.h"

#define WORKER_SCHEMA_VERSION 28   /* 0028: sagad_outbox_write, the outbox's writes */
#define HOUSEKEEPING_MS       1000 /* gauges, SIGHUP */
#define PG_PING_MS            5000 /* an idle worker checks its session this often */

/* ---- health and metrics ------------------------------------------------- */

static void schema_state(int version)
{
    sg_health_set(SG_CHECK_SCHEMA, version >= WORKER_SCHEMA_VERSION,
                  "database schema is at version %d, the worker needs %d: run `sagad-worker "
                  "migrate`",
                  version, WORKER_SCHEMA_VERSION);
}

/* An idle worker learns of a lost session (and a changed schema) here
 * rather than on its next command. */
static void ping_pg(loop_t *L)
{
    sg_err_t err;
    int version;

    if (sg_run_now_ms() - L->last_pg_ok < PG_PING_MS || loop_txn_out(L))
        return;
    loop_use_txn(L, &L->slots[0]);
    if (sg_migrate_current(L->w.pg, &version, &err) < 0) {
        loop_pg_recover(L, &err);
        return;
    }
    loop_pg_state(L, true, NULL);
    schema_state(version);
}

/* The internal keys, every security.key_reload_ms (worker_session.c): a
 * key rotated in (sagad_internal_key_rotate()) is accepted before the
 * relay signs with it.  A failed read keeps the keys held. */
static void maybe_reload_keys(loop_t *L)
{
    sg_err_t err;

    if (loop_keys_reload(L, false, &err) < 0)
        sg_log_kv(SG_LOG_WARN, "cannot re-read the internal keys; keeping those held", "error",
                  err.message, NULL);
}

static void export_gauges(loop_t *L)
{
    sg_metric_set(SG_M_STEPS_IN_FLIGHT, NULL, (double)L->calling);
    sg_metric_set(SG_M_COMMANDS_HELD, NULL, (double)L->held);
    sg_metric_set(SG_M_INTAKE_BYTES_HELD, NULL, (double)L->held_bytes);
    sg_metric_set(SG_M_PARTITIONS_ASSIGNED, NULL, (double)L->nparts);
    for (size_t i = 0; i < L->nparts; i++) {
        worker_part_t *p = L->parts[i];
        int64_t high = sg_kafka_high_watermark(L->consumers[p->topic], p->topic_name, p->partition);
        char pstr[16];

        if (high < 0)
            continue; /* nothing fetched yet */
        snprintf(pstr, sizeof(pstr), "%d", (int)p->partition);
        sg_metric_set(SG_M_CONSUMER_LAG, SG_LABELS(p->topic_name, pstr),
                      (double)(high > p->stored ? high - p->stored : 0));
    }
    /* sagad_circuit_state{tool}: 0 closed, 1 half-open, 2 open (rising
     * with severity, as METRICS.md says; not the enum's order). */
    for (size_t i = 0; i < L->w.reg->ntools; i++) {
        const sg_tool_t *tool = &L->w.reg->tools[i];
        worker_breaker_info_t info;
        if (!tool->breaker)
            continue;
        worker_breaker_info(tool, &info);
        sg_metric_set(SG_M_CIRCUIT_STATE, SG_LABELS(tool->name),
                      info.state == WORKER_BREAKER_OPEN        ? 2.0
                      : info.state == WORKER_BREAKER_HALF_OPEN ? 1.0
                                                               : 0.0);
    }
}

/* Once per turn: liveness, SIGHUP; once a second: gauges and checks. */
static void housekeeping(loop_t *L)
{
    sg_health_beat();
    sg_cli_reload(L->cli);
    if (sg_run_now_ms() < L->next_housekeeping)
        return;
    L->next_housekeeping = sg_run_now_ms() + HOUSEKEEPING_MS;
    ping_pg(L);
    maybe_reload_keys(L);
    loop_kafka_commit(L, NULL);
    if (L->watching) {
        int n = atomic_exchange(&L->watched, 0);
        if (n != 0 && L->nparts > 0)
            loop_partitions_read(L, n);
    }
    sg_health_set(SG_CHECK_GROUP,
                  sg_kafka_group_joined(L->consumers[LOOP_TOPIC_COMMANDS]) &&
                      sg_kafka_group_joined(L->consumers[LOOP_TOPIC_INTERNAL]),
                  "consumer group %s not joined yet (no partition assignment received)",
                  L->w.group);
    export_gauges(L);
    loop_status_copy(L);
}

/* ---- start and stop ----------------------------------------------------- */

static void report(loop_t *L, bool force)
{
    worker_stats_t committed;
    const worker_stats_t *s = &committed;
    char line[512];

    if (!force && sg_run_now_ms() < L->next_report)
        return;
    committed = L->w.stats;
    /* What transactions out decided counts once they commit. */
    for (int i = 0; i < L->nslots; i++)
        if (L->slots[i].batch)
            loop_stats_add(&committed, &L->slots[i].delta, -1);
    L->next_report = sg_run_now_ms() + 10000;
    snprintf(line, sizeof(line),
             "consumed=%lld started=%lld rejected=%lld calls=%lld retries=%lld completed=%lld "
             "compensated=%lld cancelled=%lld failed=%lld dead_letters=%lld held_sagas=%lld "
             "stale=%lld forwarded=%lld held=%zu "
             "calling=%zu active=%zu ready=%zu paused=%d partitions=%zu chained=%lld "
             "copies=%lld txns=%llu cmds_per_txn=%.1f ms_per_txn=%.2f",
             (long long)s->consumed, (long long)s->started, (long long)s->rejected,
             (long long)s->calls, (long long)s->retries, (long long)s->completed,
             (long long)s->compensated, (long long)s->cancelled, (long long)s->failed,
             (long long)s->dead_letters, (long long)s->held, (long long)s->stale,
             (long long)s->forwarded, L->held, L->calling, L->active, L->ready.n, (int)L->paused,
             L->nparts, (long long)s->chained, (long long)s->copies, (unsigned long long)L->txns,
             L->txns ? (double)L->txn_cmds / (double)L->txns : 0.0,
             L->txns ? (double)L->txn_us / 1000.0 / (double)L->txns : 0.0);
    L->txns = L->txn_cmds = L->txn_us = 0;
    sg_log_kv(SG_LOG_INFO, "progress", "counters", line, NULL);
}

/* Chaining predicts the partition of the relay's messages with
 * librdkafka's default partitioner; another one turns chaining off. */
/* What the run does after each turn of the loop. */
static void each_turn(loop_t *L)
{
    report(L, false);
    housekeeping(L);
}

static void check_partitioner(void *opaque, const char *key, const char *value)
{
    loop_t *L = opaque;

    if (L->w.chain && strcmp(key, "partitioner") == 0 && strcmp(value, "consistent_random") != 0 &&
        strcmp(value, "consistent") != 0) {
        L->w.chain = false;
        sg_log_kv(SG_LOG_INFO, "worker.chain is off: kafka.partitioner is not librdkafka's default",
                  "partitioner", value, NULL);
    }
}

/* kafka.group.instance.id, if set (static membership): the internal
 * topic's consumer is a member of its own, so it gets the same id with
 * ".internal" after it (two members of one id fence each other). */
static void instance_id(void *opaque, const char *key, const char *value)
{
    char *out = opaque;

    if (strcmp(key, "group.instance.id") == 0)
        snprintf(out, 256, "%s.internal", value);
}

/* The consumers, one per topic in the workers' group (worker_loop_int.h
 * says why two), and the pipe both wake the loop through. */
static int kafka_setup(loop_t *L, sg_cli_t *cli)
{
    char instance[256] = "";
    const char *props[] = {"group.id", L->w.group, "client.id", L->w.worker_id, NULL, NULL, NULL};
    const char *topics[LOOP_NTOPICS] = {L->w.topic_commands, L->w.topic_internal};
    char errstr[512];
    sg_err_t err;

    if (pipe(L->kafka_pipe) < 0)
        abort();
    for (int i = 0; i < 2; i++) {
        fcntl(L->kafka_pipe[i], F_SETFL, O_NONBLOCK);
        fcntl(L->kafka_pipe[i], F_SETFD, FD_CLOEXEC);
    }
    sg_config_foreach_kafka(L->w.cfg, instance_id, instance);
    for (int t = 0; t < LOOP_NTOPICS; t++) {
        if (t == LOOP_TOPIC_INTERNAL && instance[0]) {
            props[4] = "group.instance.id";
            props[5] = instance;
        }
        L->consumers[t] = sg_kafka_new(L->w.cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr));
        if (!L->consumers[t]) {
            fprintf(stderr, "%s: Kafka: %s\n", cli->prog, errstr);
            return SG_EXIT_USAGE;
        }
        sg_kafka_wake_fd(L->consumers[t], L->kafka_pipe[1]);
        sg_kafka_set_rebalance_hook(L->consumers[t], loop_on_rebalance, L);
    }
    sg_health_set_probe(SG_CHECK_KAFKA, sg_health_kafka_probe, L->consumers[LOOP_TOPIC_COMMANDS],
                        2000);
    for (int t = 0; t < LOOP_NTOPICS; t++)
        if (sg_kafka_subscribe(L->consumers[t], &topics[t], 1, &err) < 0) {
            fprintf(stderr, "%s: Kafka subscribe to %s: %s\n", cli->prog, topics[t], err.message);
            return SG_EXIT_INFRA;
        }
    return SG_EXIT_OK;
}

static int setup(loop_t *L, sg_cli_t *cli)
{
    const sg_config_t *cfg = cli->cfg;
    const char *regpath = sg_config_str(cfg, "worker.registry");
    char errstr[512], host[64] = "worker";
    sg_err_t err;
    int version, rc;

    L->w.cfg = cfg;
    L->nslots = (int)sg_config_int(cfg, "worker.transactions_in_flight");
    for (int i = 0; i < L->nslots; i++)
        L->slots[i].writes = worker_writes_new();
    loop_use_txn(L, &L->slots[0]);
    L->w.group = sg_config_str(cfg, "worker.group_id");
    L->w.topic_commands = sg_config_str(cfg, "topic.commands");
    L->w.topic_internal = sg_config_str(cfg, "topic.internal");
    L->w.topic_events = sg_config_str(cfg, "topic.events");
    L->w.topic_dlq = sg_config_str(cfg, "topic.dlq");
    L->w.limits.max_bytes = (size_t)sg_config_int(cfg, "limits.max_message_bytes");
    L->w.limits.max_depth = (int)sg_config_int(cfg, "limits.max_json_depth");
    L->w.limits.max_nodes = (long)sg_config_int(cfg, "limits.max_json_nodes");
    L->intake_max_bytes = (size_t)sg_config_int(cfg, "worker.intake_max_bytes");
    L->w.crash_loop_limit = (int)sg_config_int(cfg, "worker.crash_loop_limit");
    L->w.hold_ms = sg_config_int(cfg, "worker.dead_letter_hold_ms");
    L->w.approval_timeout_ms = sg_config_int(cfg, "worker.approval_timeout_ms");
    L->w.event_result_max = (size_t)sg_config_int(cfg, "worker.event_result_max_bytes");
    L->w.max_outgoing = (size_t)sg_config_int(cfg, "limits.max_outgoing_bytes");
    L->w.retry.max_attempts = (int)sg_config_int(cfg, "retry.max_attempts");
    L->w.retry.base_ms = sg_config_int(cfg, "retry.base_ms");
    L->w.retry.cap_ms = sg_config_int(cfg, "retry.cap_ms");
    L->w.comp_retry.max_attempts = (int)sg_config_int(cfg, "retry.compensate_max_attempts");
    L->w.comp_retry.base_ms = sg_config_int(cfg, "retry.base_ms");
    L->w.comp_retry.cap_ms = sg_config_int(cfg, "retry.compensate_cap_ms");
    L->w.budget_ms = sg_config_int(cfg, "retry.budget_ms");
    (void)sg_trust_mode_parse(sg_config_str(cfg, "security.internal_auth"), &L->w.trust);
    L->w.key_reload_ms = (uint64_t)sg_config_int(cfg, "security.key_reload_ms");
    L->w.signature_max_age_s = sg_config_int(cfg, "security.signature_max_age_s");
    L->w.signed_all = strcmp(sg_config_str(cfg, "security.signed_submissions"), "all") == 0;
    L->max_in_flight = (int)sg_config_int(cfg, "worker.max_in_flight");
    L->batch_size = (int)sg_config_int(cfg, "worker.batch_size");
    L->drain_ms = sg_config_int(cfg, "worker.drain_timeout_ms");
    L->w.chain = sg_config_bool(cfg, "worker.chain");
    L->kafka_commit_ms = (uint64_t)sg_config_int(cfg, "worker.kafka_commit_interval_ms");
    L->repartition_pause_ms = (uint64_t)sg_config_int(cfg, "worker.chain_repartition_pause_ms");
    sg_config_foreach_kafka(cfg, check_partitioner, L);
    sg_rng_seed(&L->w.rng, 0);
    gethostname(host, sizeof(host) - 1);
    if (strcmp(sg_config_str(cfg, "worker.id"), "auto") != 0)
        snprintf(L->w.worker_id, sizeof(L->w.worker_id), "%s", sg_config_str(cfg, "worker.id"));
    else
        snprintf(L->w.worker_id, sizeof(L->w.worker_id), "%s-%d", host, (int)getpid());

    if (sg_otel_start(cfg, "sagad-worker", &L->otel, errstr, sizeof(errstr)) < 0 ||
        !(L->w.observe = worker_observe_new(L->otel, cfg, errstr, sizeof(errstr)))) {
        fprintf(stderr, "%s: %s\n", cli->prog, errstr);
        return SG_EXIT_USAGE;
    }
    L->w.reg = worker_registry_load(regpath, cfg, &err);
    if (!L->w.reg) {
        fprintf(stderr, "%s: bad tool registry: %s\n", cli->prog, err.message);
        return SG_EXIT_USAGE;
    }
    if (*sg_config_str(cfg, "security.keyring") &&
        !(L->w.keyring = sg_keyring_load(sg_config_str(cfg, "security.keyring"), &err))) {
        fprintf(stderr, "%s: bad keyring: %s\n", cli->prog, err.message);
        return SG_EXIT_USAGE;
    }
    sg_pg_opts_from_config(&L->pgopts, cfg, "sagad-worker");
    L->pgopts.run = &sg_run_running;
    L->pgopts.waiting = sg_health_beat;
    /* The outbox trigger's NOTIFY would hold the cluster-wide NOTIFY lock
     * through every commit's WAL flush, so that the two transactions out
     * and every other notifying writer commit one at a time: txn_decide()
     * notifies after the COMMIT instead (migration 0009). */
    L->pgopts.session_sql = SG_OUTBOX_NOTIFY_OFF;
    L->w.pg = L->slots[0].pg = sg_pg_connect(&L->pgopts, &err);
    if (!L->w.pg) {
        fprintf(stderr, "%s: PostgreSQL: %s\n", cli->prog, err.message);
        return err.cls == SG_ERRCLASS_PERMANENT ? SG_EXIT_FAIL : SG_EXIT_INFRA;
    }
    if (sg_migrate_current(L->w.pg, &version, &err) < 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, err.message);
        return SG_EXIT_INFRA;
    }
    loop_pg_state(L, true, NULL);
    schema_state(version);
    if (version < WORKER_SCHEMA_VERSION) {
        fprintf(stderr,
                "%s: database schema is at version %d, the worker needs %d: run `%s migrate`\n",
                cli->prog, version, WORKER_SCHEMA_VERSION, cli->prog);
        return SG_EXIT_FAIL;
    }
    if (loop_keys_reload(L, false, &err) < 0) {
        fprintf(stderr, "%s: %s\n", cli->prog, err.message);
        return SG_EXIT_FAIL;
    }
    for (int i = 1; i < L->nslots; i++)
        if (!(L->slots[i].pg = sg_pg_connect(&L->pgopts, &err))) {
            fprintf(stderr, "%s: PostgreSQL (connection %d of %d): %s\n", cli->prog, i + 1,
                    L->nslots, err.message);
            return err.cls == SG_ERRCLASS_PERMANENT ? SG_EXIT_FAIL : SG_EXIT_INFRA;
        }
    if ((rc = kafka_setup(L, cli)) != SG_EXIT_OK)
        return rc;
    if (L->w.chain) {
        if (pthread_create(&L->watcher, NULL, loop_partition_watcher, L) != 0)
            abort();
        L->watching = true;
    }
    L->pool = worker_pool_new((int)sg_config_int(cfg, "worker.threads"), cfg, &sg_run_stop_now);
    return SG_EXIT_OK;
}

static void teardown(loop_t *L)
{
    if (L->watching) {
        atomic_store(&L->watcher_stop, true);
        pthread_join(L->watcher, NULL);
        L->watching = false;
    }
    L->drain_ms = 0;       /* drained already */
    sg_http_stop(L->http); /* nothing probes the consumers after this */
    L->http = NULL;
    sg_health_clear_probe(SG_CHECK_KAFKA);
    /* Leave the group first: that revokes the partitions through
     * loop_on_rebalance while the pool and PostgreSQL still work.  One
     * consumer after the other (the hook is the loop's), both within the
     * one bound the pods' grace period allows for (SG_KAFKA_CLOSE_MS). */
    {
        uint64_t end = sg_run_now_ms() + SG_KAFKA_CLOSE_MS;
        for (int t = 0; t < LOOP_NTOPICS; t++)
            sg_kafka_close_until(L->consumers[t], end);
    }
    /* The revoke abandoned every command left, but they still hold their
     * Kafka messages, and destroying a consumer waits for every message:
     * free them first, letting calls that outlived the drain return
     * (within their tool timeout), or the worker never exits. */
    while (L->pool && L->calling > 0) {
        loop_take_returned(L);
        if (L->calling > 0)
            loop_wait_events(L, 50);
    }
    loop_bury(L);
    for (int t = 0; t < LOOP_NTOPICS; t++) {
        sg_kafka_destroy(L->consumers[t]);
        L->consumers[t] = NULL;
    }
    /* Calls handed to asynchronous adapters finish (or are abandoned)
     * while the pool can still take them. */
    if (L->pool) {
        worker_pool_stop(L->pool);
        worker_adapters_stop();
    }
    worker_pool_destroy(L->pool);
    L->pool = NULL;
    while (L->nparts)
        loop_part_drop(L, L->parts[0], "shutting down");
    loop_bury(L);
    free(L->graveyard.v);
    free(L->lighten.v);
    for (size_t i = 0; i < L->spare.n; i++)
        free(L->spare.v[i]);
    free(L->spare.v);
    free(L->suspects.v);
    free(L->parts);
    free(L->ready.v);
    free(L->returned.v);
    loop_chain_forget(L, NULL);
    for (size_t i = 0; i < SAGA_BUCKETS; i++)
        while (L->sagas[i])
            loop_saga_slot_free(L, L->sagas[i]);
    for (int i = 0; i < MAX_TXNS; i++) {
        txn_slot_t *t = &L->slots[i];
        free(t->batch); /* out at a forced stop: PostgreSQL rolls it back */
        for (size_t r = 0; r < sizeof(t->res) / sizeof(t->res[0]); r++)
            sg_pg_res_destroy(t->res[r]);
        free(t->chain_new.v);
        sg_metrics_batch_free(&t->metrics);
        sg_span_list_discard(&t->spans);
        worker_writes_free(t->writes);
        sg_pg_destroy(t->pg);
    }
    /* What committed transactions ended is posted (one try) before exit. */
    sg_otel_stop(L->otel);
    L->otel = NULL;
    worker_observe_free(L->w.observe);
    L->w.observe = NULL;
    sg_registry_destroy(L->w.reg);
    sg_keyring_free(L->w.keyring);
    sg_mac_keys_clear(&L->w.keys);
    sg_pg_destroy(L->side_pg);
    free(L->sagas_buf);
    if (L->kafka_pipe[0] > 0) {
        close(L->kafka_pipe[0]);
        close(L->kafka_pipe[1]);
    }
}

int worker_cmd_run(sg_cli_t *cli, int argc, char **argv)
{
    loop_t *L = sg_xcalloc(1, sizeof(*L));
    char errstr[512];
    int rc;

    (void)argc; /* sg_cli_main refuses arguments: the table says it takes none */
    (void)argv;
    sg_run_trap_signals();
    L->cli = cli;
    L->http = sg_http_start(cli->cfg, SG_METRICS_WORKER,
                            SG_CHECK_BIT(SG_CHECK_PG) | SG_CHECK_BIT(SG_CHECK_SCHEMA) |
                                SG_CHECK_BIT(SG_CHECK_KAFKA) | SG_CHECK_BIT(SG_CHECK_GROUP),
                            errstr, sizeof(errstr));
    if (!L->http) {
        fprintf(stderr, "%s: %s\n", cli->prog, errstr);
        free(L);
        return SG_EXIT_USAGE;
    }
    rc = setup(L, cli);
    if (rc == SG_EXIT_OK) {
        sg_log_kv(SG_LOG_INFO, "worker running", "worker_id", L->w.worker_id, "group", L->w.group,
                  "topic", L->w.topic_commands, "internal_topic", L->w.topic_internal, "registry",
                  L->w.reg->path, "librdkafka", sg_kafka_version(), NULL);
        loop_run(L, each_turn);
        sg_log_kv(SG_LOG_INFO, "stopping: finishing running calls", NULL);
        loop_drain(L, NULL);
        report(L, true);
        loop_status_clear(L); /* a worker that stopped has no breakers */
    }
    teardown(L);
    free(L);
    if (sg_run_stop_now)
        return SG_EXIT_FAIL;
    return rc;
}
