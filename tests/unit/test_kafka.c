/* sg_kafka: the pure error classification (retry, abort the transaction,
 * drain and restart, or give up) and client creation refusing a bad
 * kafka.* property with an error naming it. */
#include <criterion/criterion.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>

#include "sagad/sg_cli.h"
#include "sagad/sg_config.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "unit.h"

static const char *kind(sg_kafka_errkind_t k)
{
    return sg_kafka_errkind_name(k);
}

#define expect_kind(code, retriable, fatal, abort, want)                                           \
    cr_assert_eq(sg_kafka_classify((code), (retriable), (fatal), (abort)), (want),                 \
                 "%s: %s, expected %s", rd_kafka_err2name(code),                                   \
                 kind(sg_kafka_classify((code), (retriable), (fatal), (abort))), kind(want))

Test(kafka, fatal_flag_wins)
{
    expect_kind(RD_KAFKA_RESP_ERR__FENCED, false, true, false, SG_KAFKA_ERR_FATAL);
    expect_kind(RD_KAFKA_RESP_ERR__TRANSPORT, true, true, true, SG_KAFKA_ERR_FATAL);
    expect_kind(RD_KAFKA_RESP_ERR__FATAL, false, false, false, SG_KAFKA_ERR_FATAL);
}

Test(kafka, txn_requires_abort_is_abortable)
{
    expect_kind(RD_KAFKA_RESP_ERR__STATE, false, false, true, SG_KAFKA_ERR_ABORTABLE);
    expect_kind(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, true, false, true,
                SG_KAFKA_ERR_ABORTABLE);
}

Test(kafka, retriable_flag_is_retriable)
{
    expect_kind(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, true, false, false,
                SG_KAFKA_ERR_RETRIABLE);
    expect_kind(RD_KAFKA_RESP_ERR_UNKNOWN, true, false, false, SG_KAFKA_ERR_RETRIABLE);
}

Test(kafka, self_healing_codes_are_retriable_without_flag)
{
    cr_assert_eq(RD_KAFKA_RESP_ERR__TRANSPORT, -195);
    cr_assert_eq(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, -192);
    cr_assert_eq(RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, 19);
    expect_kind(RD_KAFKA_RESP_ERR__TRANSPORT, false, false, false, SG_KAFKA_ERR_RETRIABLE);
    expect_kind(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, false, false, false, SG_KAFKA_ERR_RETRIABLE);
    expect_kind(RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, false, false, false, SG_KAFKA_ERR_RETRIABLE);
    expect_kind(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, false, false, false, SG_KAFKA_ERR_RETRIABLE);
    expect_kind(RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, false, false, false,
                SG_KAFKA_ERR_RETRIABLE);
    expect_kind(RD_KAFKA_RESP_ERR__QUEUE_FULL, false, false, false, SG_KAFKA_ERR_RETRIABLE);
}

Test(kafka, authorization_and_size_errors_are_permanent)
{
    cr_assert_eq(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, 29);
    expect_kind(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, false, false, false,
                SG_KAFKA_ERR_PERMANENT);
    expect_kind(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, false, false, false, SG_KAFKA_ERR_PERMANENT);
    expect_kind(RD_KAFKA_RESP_ERR__INVALID_ARG, false, false, false, SG_KAFKA_ERR_PERMANENT);
}

Test(kafka, errkind_names)
{
    cr_assert_str_eq(sg_kafka_errkind_name(SG_KAFKA_ERR_RETRIABLE), "retriable");
    cr_assert_str_eq(sg_kafka_errkind_name(SG_KAFKA_ERR_ABORTABLE), "abortable");
    cr_assert_str_eq(sg_kafka_errkind_name(SG_KAFKA_ERR_FATAL), "fatal");
    cr_assert_str_eq(sg_kafka_errkind_name(SG_KAFKA_ERR_PERMANENT), "permanent");
    cr_assert_str_eq(sg_kafka_errkind_name((sg_kafka_errkind_t)42), "unknown");
}

Test(kafka, err_set_transient_code_and_message)
{
    sg_err_t err;

    cr_assert_eq(sg_kafka_err_set(&err, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, false, false, false,
                                  "delivery failed"),
                 -1);
    cr_assert_str_eq(err.code, "kafka.msg_timed_out");
    cr_assert_eq(err.cls, SG_ERRCLASS_TRANSIENT);
    cr_assert(err.retriable);
    cr_assert_not(err.fatal);
    assert_contains(err.message, "delivery failed: ");
    assert_contains(err.message, rd_kafka_err2str(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT));
    assert_contains(err.message, "(retriable)");
}

Test(kafka, err_set_broker_code_names)
{
    sg_err_t err;

    sg_kafka_err_set(&err, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, false, false, false, "produce");
    cr_assert_str_eq(err.code, "kafka.not_enough_replicas");
    cr_assert_eq(err.cls, SG_ERRCLASS_TRANSIENT);

    sg_kafka_err_set(&err, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, false, false, false,
                     "produce");
    cr_assert_str_eq(err.code, "kafka.topic_authorization_failed");
    cr_assert_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_assert_not(err.retriable);
    cr_assert_not(err.fatal);
    assert_contains(err.message, "(permanent)");
}

Test(kafka, err_set_abortable_is_transient)
{
    sg_err_t err;

    sg_kafka_err_set(&err, RD_KAFKA_RESP_ERR__STATE, false, false, true, "commit");
    cr_assert_eq(err.cls, SG_ERRCLASS_TRANSIENT);
    cr_assert(err.retriable);
    cr_assert_not(err.fatal);
    assert_contains(err.message, "(abortable)");
}

Test(kafka, err_set_fatal_marks_the_handle_dead)
{
    sg_err_t err;

    sg_kafka_err_set(&err, RD_KAFKA_RESP_ERR__FENCED, false, true, false, "commit");
    cr_assert(err.fatal);
    cr_assert_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_assert_not(err.retriable);
    cr_assert_str_eq(err.code, "kafka.fenced");
    assert_contains(err.message, "(fatal)");
}

Test(kafka, err_set_accepts_null_err)
{
    cr_assert_eq(sg_kafka_err_set(NULL, RD_KAFKA_RESP_ERR__FENCED, false, true, false, "x"), -1);
}

/* librdkafka logs from its threads through sg_log; keep them out of the
 * test output. */
static FILE *quiet_log(char **buf, size_t *len)
{
    FILE *fp = open_memstream(buf, len);

    cr_assert_not_null(fp);
    sg_log_set_stream(fp);
    return fp;
}

/* buf is read after fclose: the stream moves the buffer as it grows. */
static void restore_log(FILE *fp, char **buf)
{
    sg_log_set_stream(NULL);
    fclose(fp);
    free(*buf);
    *buf = NULL;
}

static sg_kafka_t *new_with(const char *key, const char *value, sg_kafka_role_t role, char *errstr,
                            size_t errstr_size)
{
    sg_config_t *cfg = sg_config_new();
    sg_kafka_t *k;

    cr_assert_eq(sg_config_set(cfg, key, value, "test", errstr, errstr_size), 0, "%s", errstr);
    k = sg_kafka_new(cfg, role, NULL, errstr, errstr_size);
    sg_config_destroy(cfg);
    return k;
}

Test(kafka, new_refuses_unknown_property_naming_it)
{
    char errstr[512] = "", *buf = NULL;
    size_t len = 0;
    FILE *fp = quiet_log(&buf, &len);
    sg_kafka_t *k =
        new_with("kafka.no.such.property", "1", SG_KAFKA_PRODUCER, errstr, sizeof(errstr));

    cr_assert_null(k);
    assert_contains(errstr, "kafka.no.such.property");
    sg_kafka_destroy(k);
    restore_log(fp, &buf);
}

Test(kafka, new_refuses_bad_value_naming_the_key)
{
    char errstr[512] = "", *buf = NULL;
    size_t len = 0;
    FILE *fp = quiet_log(&buf, &len);
    sg_kafka_t *k = new_with("kafka.acks", "sometimes", SG_KAFKA_CONSUMER, errstr, sizeof(errstr));

    cr_assert_null(k);
    assert_contains(errstr, "kafka.acks");
    restore_log(fp, &buf);
}

Test(kafka, new_refuses_bad_program_property)
{
    static const char *const props[] = {"bogus.program.prop", "x", NULL};
    char errstr[512] = "", *buf = NULL;
    size_t len = 0;
    FILE *fp = quiet_log(&buf, &len);
    sg_config_t *cfg = sg_config_new();
    sg_kafka_t *k = sg_kafka_new(cfg, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));

    cr_assert_null(k);
    assert_contains(errstr, "bogus.program.prop");
    sg_config_destroy(cfg);
    restore_log(fp, &buf);
}

Test(kafka, new_creates_clients_without_a_broker, .timeout = 30)
{
    static const char *const props[] = {"group.id", "sagad-unit", NULL};
    char errstr[512] = "", *buf = NULL;
    size_t len = 0;
    FILE *fp = quiet_log(&buf, &len);
    sg_config_t *cfg = sg_config_new();
    sg_kafka_t *p, *c;

    cr_assert_eq(sg_config_set(cfg, "kafka.bootstrap.servers", "127.0.0.1:1", "test", errstr,
                               sizeof(errstr)),
                 0);
    p = sg_kafka_new(cfg, SG_KAFKA_PRODUCER, NULL, errstr, sizeof(errstr));
    cr_assert_not_null(p, "producer: %s", errstr);
    cr_assert_not(sg_kafka_fatal(p));
    c = sg_kafka_new(cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr));
    cr_assert_not_null(c, "consumer: %s", errstr);
    sg_kafka_destroy(c);
    sg_kafka_destroy(p);
    sg_kafka_destroy(NULL);
    sg_config_destroy(cfg);
    restore_log(fp, &buf);
}

/* A full local queue refuses a message at once with kafka.queue_full (the
 * relay waits and retries on that code); without headers this once
 * crashed in the cleanup path. */
Test(kafka, queue_full_is_reported_not_crashed, .timeout = 30)
{
    const char *props[] = {"bootstrap.servers",
                           "127.0.0.1:1",
                           "queue.buffering.max.messages",
                           "1",
                           "enable.idempotence",
                           "false",
                           NULL};
    char errstr[256];
    sg_kafka_t *k = sg_kafka_new(NULL, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr));
    sg_kafka_batch_t batch = {0};
    sg_err_t err;

    cr_assert_not_null(k, "%s", errstr);
    cr_assert_eq(sg_kafka_produce(k, "t", "k", 1, "a", 1, NULL, 0, &batch, &err), 0, "%s",
                 err.message);
    cr_expect_eq(sg_kafka_produce(k, "t", "k", 1, "b", 1, NULL, 0, &batch, &err), -1);
    cr_expect_str_eq(err.code, "kafka.queue_full");
    cr_expect(err.retriable);
    cr_expect_eq(batch.pending, 1, "only the accepted message is pending");
    sg_kafka_destroy(k);
}

/* A consumer's close that cannot finish is abandoned after its 10 s bound
 * (librdkafka can hang in the close for ever, issue 4884, which cannot be
 * made to happen on demand).  librdkafka's mock cluster stands in: once
 * the partition is assigned, every broker response is delayed 40 s and an
 * offset commit is sent, so the close must wait for that commit's reply.
 * sg_kafka_destroy must come back well before then, say why in the log,
 * and the revoke hook must have run. */
static rd_kafka_t *mock_owner; /* reachable: the abandoned consumer still uses its cluster */

static int64_t count_hook(void *opaque, bool assigned, const char *topic, int32_t partition)
{
    int *calls = opaque;

    (void)topic;
    (void)partition;
    calls[assigned ? 0 : 1]++;
    return -1;
}

Test(kafka, close_that_cannot_finish_is_abandoned, .timeout = 90)
{
    char errstr[512], *buf = NULL;
    size_t len = 0;
    const char *props[] = {"bootstrap.servers", NULL, "group.id", "sagad-unit-close", NULL};
    const char *topics[] = {"close-t"};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_mock_cluster_t *mc;
    sg_kafka_t *c;
    sg_err_t err;
    int calls[2] = {0, 0};
    uint64_t t0, took;
    FILE *fp;

    cr_assert_eq(rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof(errstr)),
                 RD_KAFKA_CONF_OK);
    mock_owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    cr_assert_not_null(mock_owner, "%s", errstr);
    mc = rd_kafka_mock_cluster_new(mock_owner, 1);
    cr_assert_not_null(mc);
    cr_assert_eq(rd_kafka_mock_topic_create(mc, topics[0], 1, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    props[1] = rd_kafka_mock_cluster_bootstraps(mc);

    fp = open_memstream(&buf, &len);
    cr_assert_not_null(fp);
    sg_log_set_stream(fp);
    c = sg_kafka_new(NULL, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr));
    cr_assert_not_null(c, "%s", errstr);
    sg_kafka_set_rebalance_hook(c, count_hook, calls);
    cr_assert_eq(sg_kafka_subscribe(c, topics, 1, &err), 0, "%s", err.message);
    t0 = sg_run_now_ms();
    while (calls[0] == 0 && sg_run_now_ms() - t0 < 30000) {
        sg_kafka_msg_t *m = NULL;
        if (sg_kafka_consume(c, 100, &m, &err) > 0)
            sg_kafka_msg_destroy(m);
    }
    cr_assert_eq(calls[0], 1, "the mock cluster assigned the partition");

    rd_kafka_mock_broker_set_rtt(mc, 1, 40000);
    sg_kafka_commit_offsets(c, topics[0], (const int32_t[]){0}, (const int64_t[]){1}, 1);
    t0 = sg_run_now_ms();
    sg_kafka_destroy(c);
    took = sg_run_now_ms() - t0;
    sg_log_set_stream(NULL);
    fclose(fp);
    cr_expect_lt(took, 20000, "destroy took %llu ms: the close was not abandoned at 10 s",
                 (unsigned long long)took);
    cr_expect_eq(calls[1], 1, "the revoke hook ran before the close was abandoned");
    assert_contains(buf, "Kafka consumer close hung");
    free(buf);
}
