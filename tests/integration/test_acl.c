/* The per-component Kafka principals against a real broker with SASL/SCRAM
 * and ACLs (deploy/local/kafka.sh with SAGAD_LOCAL_KAFKA_AUTH=scram, which
 * tests/run.sh starts beside the open one): each principal may do what its
 * component does and the broker refuses it the rest; the real relay and
 * worker run a saga under their own principals.  The topics are the
 * broker's fixed ones (the ACLs name them), so tests tell their messages
 * apart by unique keys and saga ids. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../support/sg_test.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_log.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"

#define ACL_COMMANDS    "sagad.commands"
#define ACL_INTERNAL    "sagad.internal"
#define ACL_EVENTS      "sagad.events"
#define ACL_DLQ         "sagad.dlq"
#define ACL_CHECKPOINTS "sagad.relay.checkpoints"
#define ACL_REFUSED     "kafka.topic_authorization_failed"
#define ACL_WAIT_S      60.0

static const char *const acl_topics[] = {ACL_COMMANDS, ACL_INTERNAL, ACL_EVENTS, ACL_DLQ};

/* A principal's librdkafka properties, as kafka.sh client-config printed
 * them, then the test's own (later ones win in sg_kafka_new). */
typedef struct acl_conf_s {
    char buf[2048];
    const char *props[41];
    size_t n;
} acl_conf_t;

static void acl_conf_add(acl_conf_t *c, const char *key, const char *value)
{
    cr_assert_lt(c->n + 2, sizeof(c->props) / sizeof(c->props[0]));
    c->props[c->n++] = key;
    c->props[c->n++] = value;
    c->props[c->n] = NULL;
}

static void acl_conf_load(acl_conf_t *c, const char *principal)
{
    char path[512];
    size_t used = 0, len;
    FILE *fp;

    memset(c, 0, sizeof(*c));
    snprintf(path, sizeof(path), "%s/%s.properties", sgt_kafka_acl_dir(), principal);
    fp = fopen(path, "r");
    cr_assert_not_null(fp, "no client config for %s at %s", principal, path);
    while (fgets(c->buf + used, (int)(sizeof(c->buf) - used), fp)) {
        char *line = c->buf + used, *eq = strchr(line, '=');

        len = strlen(line);
        used += len + 1;
        if (len && line[len - 1] == '\n')
            line[len - 1] = '\0';
        cr_assert_not_null(eq, "%s: not key=value: %s", path, line);
        *eq = '\0';
        acl_conf_add(c, line, eq + 1);
    }
    fclose(fp);
    cr_assert_gt(c->n, 8, "%s has no SASL settings: is its broker the scram one?", path);
}

static sg_kafka_t *acl_client(const acl_conf_t *c, sg_kafka_role_t role)
{
    char errstr[512];
    sg_kafka_t *k = sg_kafka_new(NULL, role, c->props, errstr, sizeof(errstr));

    cr_assert_not_null(k, "%s", errstr);
    return k;
}

/* Produces one message (payload, or a small one naming key when NULL)
 * and waits for its delivery report: the batch says whether the broker
 * took it, and with which error if not. */
static sg_kafka_batch_t acl_produce_payload(const acl_conf_t *c, const char *topic, const char *key,
                                            const char *payload)
{
    sg_kafka_t *k = acl_client(c, SG_KAFKA_PRODUCER);
    sg_kafka_batch_t batch = {0};
    sg_err_t err;
    char own[256];

    if (!payload) {
        snprintf(own, sizeof(own), "{\"acl_test\": \"%s\"}", key);
        payload = own;
    }
    cr_assert_eq(sg_kafka_produce(k, topic, key, strlen(key), payload, strlen(payload), NULL, 0,
                                  &batch, &err),
                 0, "%s", err.message);
    sg_kafka_flush(k, 30000, &err);
    sg_kafka_destroy(k);
    cr_assert_eq(batch.pending, 0, "no delivery report for %s within 30 s", topic);
    return batch;
}

static sg_kafka_batch_t acl_produce(const acl_conf_t *c, const char *topic, const char *key)
{
    return acl_produce_payload(c, topic, key, NULL);
}

static void expect_delivered(const char *who, const acl_conf_t *c, const char *topic)
{
    char key[128];
    sg_kafka_batch_t b;

    sgt_unique(key, sizeof(key), "acl");
    b = acl_produce(c, topic, key);
    cr_expect_eq(b.delivered, 1, "%s may write %s: %s", who, topic,
                 b.failed ? b.first_err.message : "");
}

static void expect_refused(const char *who, const acl_conf_t *c, const char *topic)
{
    char key[128];
    sg_kafka_batch_t b;

    sgt_unique(key, sizeof(key), "acl");
    b = acl_produce(c, topic, key);
    cr_expect_eq(b.delivered, 0, "%s wrote %s, which its ACLs must refuse", who, topic);
    cr_expect_str_eq(b.first_err.code, ACL_REFUSED, "%s writing %s: %s", who, topic,
                     b.first_err.message);
}

/* True when the payload (not NUL-terminated) holds text. */
static bool acl_payload_has(const sg_kafka_msg_t *msg, const char *text)
{
    size_t len = 0, tlen = strlen(text);
    const char *p = sg_kafka_msg_payload(msg, &len);

    for (size_t i = 0; p && i + tlen <= len; i++)
        if (memcmp(p + i, text, tlen) == 0)
            return true;
    return false;
}

/* Consumes topic as principal in group from its start until a message
 * keyed key, whose payload holds text (when not NULL), comes (1) or an
 * error does (-1, in err); 0 when neither within ACL_WAIT_S. */
static int acl_consume_text(const char *principal, const char *topic, const char *group,
                            const char *key, const char *text, sg_err_t *err)
{
    const char *topics[] = {topic};
    double deadline = sgt_now_s() + ACL_WAIT_S;
    acl_conf_t c;
    sg_kafka_t *k;
    int found = 0;

    acl_conf_load(&c, principal);
    acl_conf_add(&c, "group.id", group);
    k = acl_client(&c, SG_KAFKA_CONSUMER);
    cr_assert_eq(sg_kafka_subscribe(k, topics, 1, err), 0, "%s", err->message);
    while (!found && sgt_now_s() < deadline) {
        sg_kafka_msg_t *msg;
        int got = sg_kafka_consume(k, 200, &msg, err);
        size_t len = 0;
        const void *mkey;

        if (got < 0) {
            found = -1;
            break;
        }
        if (got == 0)
            continue;
        mkey = sg_kafka_msg_key(msg, &len);
        if (mkey && len == strlen(key) && memcmp(mkey, key, len) == 0)
            found = !text || acl_payload_has(msg, text);
        sg_kafka_msg_destroy(msg);
    }
    sg_kafka_close(k);
    sg_kafka_destroy(k);
    return found;
}

static int acl_consume_until(const char *principal, const char *topic, const char *group,
                             const char *key, sg_err_t *err)
{
    return acl_consume_text(principal, topic, group, key, NULL, err);
}

/* KEY=value in the environment's spelling of a librdkafka property:
 * sasl.password is SAGAD_KAFKA_SASL_PASSWORD, a "_" is "__"
 * (docs/OPERATIONS.md, "Configuration"). */
static void acl_env(char *out, size_t size, const char *key, const char *value)
{
    size_t n = (size_t)snprintf(out, size, "SAGAD_KAFKA_");

    for (; *key && n + 2 < size; key++) {
        if (*key == '_')
            out[n++] = '_';
        out[n++] = *key == '.' ? '_' : (char)toupper((unsigned char)*key);
    }
    snprintf(out + n, size - n, "=%s", value);
}

/* env: common (ncommon entries), then principal's SAGAD_KAFKA_* as its
 * pod gets them from its component's Secret (at most 6, in buf). */
static void acl_component_env(const char **env, char (*buf)[200], char (*common)[640],
                              size_t ncommon, const char *principal)
{
    acl_conf_t c;
    size_t n = 0;

    acl_conf_load(&c, principal);
    for (size_t i = 0; i < ncommon; i++)
        env[n++] = common[i];
    for (size_t i = 0; i + 1 < c.n && i / 2 < 6; i += 2) {
        acl_env(buf[i / 2], sizeof(buf[i / 2]), c.props[i], c.props[i + 1]);
        env[n++] = buf[i / 2];
    }
    env[n] = NULL;
}

static void acl_init(void)
{
    sg_log_init("test_acl", SG_LOG_ERROR);
}

TestSuite(acl, .init = acl_init, .timeout = 180);

/* An application submits sagas and control commands to sagad.commands and
 * nothing else: the worker's internal step commands are the relay's. */
Test(acl, producer_writes_commands_only)
{
    acl_conf_t c;

    acl_conf_load(&c, "producer");
    expect_delivered("producer", &c, ACL_COMMANDS);
    expect_refused("producer", &c, ACL_INTERNAL);
    expect_refused("producer", &c, ACL_EVENTS);
    expect_refused("producer", &c, ACL_DLQ);
}

/* sagad-gateway writes what a producer may (submissions, and controls it
 * signs for its users) and reads the events for its streams, in its own
 * group: not the internal topic, not the dead letters. */
Test(acl, gateway_writes_commands_reads_events_only)
{
    acl_conf_t c, relay;
    char key[128], group[128];
    sg_err_t err;
    int rc;

    acl_conf_load(&c, "gateway");
    expect_delivered("gateway", &c, ACL_COMMANDS);
    expect_refused("gateway", &c, ACL_INTERNAL);
    expect_refused("gateway", &c, ACL_EVENTS);
    expect_refused("gateway", &c, ACL_DLQ);

    acl_conf_load(&relay, "relay");
    sgt_unique(key, sizeof(key), "acl-gw-ev");
    cr_assert_eq(acl_produce(&relay, ACL_EVENTS, key).delivered, 1);
    cr_assert_eq(acl_produce(&relay, ACL_DLQ, key).delivered, 1);
    rc = acl_consume_until("gateway", ACL_EVENTS, "sagad-gateway-events", key, &err);
    cr_expect_eq(rc, 1, "the gateway reads %s: %s", ACL_EVENTS, rc < 0 ? err.message : "timed out");
    sgt_unique(group, sizeof(group), "app.acl-gw");
    rc = acl_consume_until("gateway", ACL_EVENTS, group, key, &err);
    cr_expect_eq(rc, -1, "the gateway read %s in a group not its own", ACL_EVENTS);
    cr_expect_str_eq(err.code, "kafka.group_authorization_failed", "%s", err.message);
    rc = acl_consume_until("gateway", ACL_DLQ, "sagad-gateway-events", key, &err);
    cr_expect_eq(rc, -1, "the gateway principal read %s", ACL_DLQ);
    cr_expect_str_eq(err.code, ACL_REFUSED, "%s", err.message);
}

/* The relay publishes whatever the outbox holds: all four topics. */
Test(acl, relay_writes_every_topic)
{
    acl_conf_t c;

    acl_conf_load(&c, "relay");
    for (size_t i = 0; i < sizeof(acl_topics) / sizeof(acl_topics[0]); i++)
        expect_delivered("relay", &c, acl_topics[i]);
}

/* relay.exactly_once: the relay takes a transactional id under its
 * prefix, writes a checkpoint in a transaction and reads it back; no
 * other principal may take a relay's id (it would fence the relay) or
 * write a checkpoint (a forged one would make the relay skip messages it
 * never published). */
Test(acl, only_the_relay_takes_its_transactional_id_and_writes_checkpoints)
{
    static const char *const others[] = {"producer", "worker", "operator", "keda", "gateway"};
    char txn_id[128], slot[96], *value = NULL;
    acl_conf_t c;
    sg_kafka_t *k;
    sg_err_t err;
    size_t len;
    int nparts;

    memset(&err, 0, sizeof(err));
    sgt_unique(slot, sizeof(slot), "acl_slot");
    snprintf(txn_id, sizeof(txn_id), "sagad-relay.%s", slot);
    acl_conf_load(&c, "relay");
    acl_conf_add(&c, "transactional.id", txn_id);
    k = acl_client(&c, SG_KAFKA_PRODUCER);
    cr_assert_eq(sg_kafka_txn_init(k, 30000, &err), 0, "the relay takes %s: %s", txn_id,
                 err.message);
    cr_assert_eq(sg_kafka_txn_begin(k, &err), 0, "%s", err.message);
    cr_assert_eq(sg_kafka_produce(k, ACL_CHECKPOINTS, slot, strlen(slot), "{\"acl\":1}", 9, NULL, 0,
                                  NULL, &err),
                 0, "%s", err.message);
    cr_expect_eq(sg_kafka_txn_commit(k, 30000, &err), 0, "the relay commits a checkpoint: %s",
                 err.message);
    sg_kafka_destroy(k);

    acl_conf_load(&c, "relay");
    acl_conf_add(&c, "group.id", "sagad-relay-checkpoints");
    acl_conf_add(&c, "isolation.level", "read_committed");
    acl_conf_add(&c, "enable.partition.eof", "true");
    k = acl_client(&c, SG_KAFKA_CONSUMER);
    nparts = sg_kafka_partition_count(k, ACL_CHECKPOINTS, 10000);
    cr_assert_gt(nparts, 0, "the relay sees %s", ACL_CHECKPOINTS);
    cr_expect_eq(sg_kafka_read_last(k, ACL_CHECKPOINTS,
                                    sg_kafka_key_partition(slot, strlen(slot), nparts), slot,
                                    strlen(slot), 30000, &value, &len, NULL, 0, &err),
                 1, "the relay reads its checkpoint back: %s", err.message);
    cr_expect_str_eq(value ? value : "", "{\"acl\":1}");
    free(value);
    sg_kafka_destroy(k);

    /* Every other principal: the default deny.  Without idempotence,
     * the write is refused on the topic itself (with it, a principal that
     * may write nothing is refused its producer id first). */
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        acl_conf_load(&c, others[i]);
        acl_conf_add(&c, "transactional.id", txn_id);
        k = acl_client(&c, SG_KAFKA_PRODUCER);
        cr_expect_eq(sg_kafka_txn_init(k, 30000, &err), -1, "%s took the relay's id", others[i]);
        cr_expect(strstr(err.code, "authorization_failed") != NULL, "%s refused by the ACLs: %s %s",
                  others[i], err.code, err.message);
        sg_kafka_destroy(k);
        acl_conf_load(&c, others[i]);
        acl_conf_add(&c, "enable.idempotence", "false");
        expect_refused(others[i], &c, ACL_CHECKPOINTS);
    }
}

/* The worker only consumes.  Without idempotence each write is refused
 * per topic; with sagad's default idempotent producer not even a producer
 * id is granted (it may write no topic), so nothing is delivered either. */
Test(acl, worker_produces_nowhere)
{
    acl_conf_t c;
    sg_kafka_batch_t b;

    acl_conf_load(&c, "worker");
    b = acl_produce(&c, ACL_COMMANDS, "acl-idempotent");
    cr_expect_eq(b.delivered, 0, "the worker principal wrote %s", ACL_COMMANDS);
    cr_expect_eq(b.failed, 1);
    acl_conf_add(&c, "enable.idempotence", "false");
    for (size_t i = 0; i < sizeof(acl_topics) / sizeof(acl_topics[0]); i++)
        expect_refused("worker", &c, acl_topics[i]);
}

/* Dead letters hold the payloads of failed sagas: operators read them, an
 * application does not. */
Test(acl, dlq_read_by_operator_not_producer)
{
    acl_conf_t relay;
    char key[128], group[128];
    sg_err_t err;
    int rc;

    acl_conf_load(&relay, "relay");
    sgt_unique(key, sizeof(key), "acl-dlq");
    cr_assert_eq(acl_produce(&relay, ACL_DLQ, key).delivered, 1);

    sgt_unique(group, sizeof(group), "dlq-tool-tail-acl");
    rc = acl_consume_until("operator", ACL_DLQ, group, key, &err);
    cr_expect_eq(rc, 1, "the operator reads %s: %s", ACL_DLQ, rc < 0 ? err.message : "timed out");

    sgt_unique(group, sizeof(group), "app.acl");
    rc = acl_consume_until("producer", ACL_DLQ, group, key, &err);
    cr_expect_eq(rc, -1, "the producer principal read %s", ACL_DLQ);
    cr_expect_str_eq(err.code, ACL_REFUSED, "%s", err.message);
}

/* An application follows the events in groups of its own prefix, never in
 * the worker's group, where it would take partitions of sagad.commands. */
Test(acl, producer_reads_events_in_its_groups_only)
{
    acl_conf_t relay;
    char key[128], group[128];
    sg_err_t err;
    int rc;

    acl_conf_load(&relay, "relay");
    sgt_unique(key, sizeof(key), "acl-ev");
    cr_assert_eq(acl_produce(&relay, ACL_EVENTS, key).delivered, 1);

    sgt_unique(group, sizeof(group), "app.acl");
    rc = acl_consume_until("producer", ACL_EVENTS, group, key, &err);
    cr_expect_eq(rc, 1, "the producer reads %s: %s", ACL_EVENTS,
                 rc < 0 ? err.message : "timed out");

    rc = acl_consume_until("producer", ACL_EVENTS, "sagad-worker", key, &err);
    cr_expect_eq(rc, -1, "the producer principal joined the worker's group");
    cr_expect_str_eq(err.code, "kafka.group_authorization_failed", "%s", err.message);
}

/* SCRAM checks the password: a wrong one never gets past the handshake.
 * sagactl says only that Kafka is unreachable; with log.level = debug
 * (its bug-report mode) librdkafka's line names the refusal. */
Test(acl, wrong_password_refused_at_authentication)
{
    acl_conf_t c;
    char *out = NULL, *err = NULL;
    char env[6][200];
    const char *envp[7] = {"SAGAD_LOG_LEVEL=debug"};
    const char *args[] = {"watch", "--max", "1", NULL};
    size_t n = 1;
    int rc;

    acl_conf_load(&c, "operator");
    for (size_t i = 0; i + 1 < c.n && n < 6; i += 2, n++) {
        bool pw = strcmp(c.props[i], "sasl.password") == 0;

        acl_env(env[n], sizeof(env[n]), c.props[i], pw ? "not-the-password" : c.props[i + 1]);
        envp[n] = env[n];
    }
    rc = sgt_run("sagactl", args, envp, &out, &err);
    cr_expect_eq(rc, 4, "sagactl watch with a wrong password exits 4 (Kafka unavailable), got %d",
                 rc);
    cr_expect(strstr(err, "SASL authentication error: Authentication failed during "
                          "authentication due to invalid credentials") != NULL,
              "the broker refused the password at authentication: %s", err);
    free(out);
    free(err);
}

/* The real relay and worker, each under its own principal and nothing
 * more, run a saga that an application submitted under the producer's:
 * the worker consumes (commands and internal, its group), the relay
 * publishes (the step commands and the events), the application reads its
 * events.  Then the application forges a step command of the saga: the
 * broker refuses it on the internal topic, and the worker dead-letters it
 * unacted on where the application may write, the commands topic. */
Test(acl, saga_runs_under_component_principals, .timeout = 240)
{
    char db[128], dsn[512], rt_dsn[600], dir[] = "/tmp/sagad-acl-XXXXXX", registry[128];
    char saga[128], group[128], start[512], common[4][640], wenv[6][200], renv[6][200];
    const char *migrate_env[] = {common[0], NULL};
    const char *migrate[] = {"migrate", NULL}, *run[] = {"run", NULL};
    const char *worker_env[12] = {0}, *relay_env[12] = {0};
    sgt_bg_t worker = {0}, relay = {0};
    acl_conf_t prod;
    sg_kafka_batch_t b;
    sg_pg_t *pg;
    sg_err_t err;
    char *out = NULL, *errout = NULL;
    FILE *fp;
    int rc;

    sgt_db_create(db, sizeof(db), dsn, sizeof(dsn));
    cr_assert_not_null(mkdtemp(dir));
    snprintf(registry, sizeof(registry), "%s/tools.json", dir);
    fp = fopen(registry, "w");
    cr_assert_not_null(fp);
    fputs("{\"v\": 1, \"tools\": {\"noop\": {\"adapter\": \"builtin\", \"target\": "
          "\"noop\", \"side_effect\": \"read\"}}}\n",
          fp);
    fclose(fp);
    snprintf(common[0], sizeof(common[0]), "SAGAD_PG_DSN=%s", dsn);
    rc = sgt_run("sagad-worker", migrate, migrate_env, &out, &errout);
    cr_assert_eq(rc, 0, "migrate: %s", errout);
    free(out);
    free(errout);

    sgt_role_dsn(rt_dsn, sizeof(rt_dsn), dsn, "runtime");
    snprintf(common[0], sizeof(common[0]), "SAGAD_PG_DSN=%s", rt_dsn);
    snprintf(common[1], sizeof(common[1]), "SAGAD_WORKER_REGISTRY=%s", registry);
    snprintf(common[2], sizeof(common[2]), "SAGAD_RELAY_POLL_INTERVAL_MS=50");
    snprintf(common[3], sizeof(common[3]), "SAGAD_HTTP_PORT=0");
    acl_component_env(worker_env, wenv, common, 4, "worker");
    acl_component_env(relay_env, renv, common, 4, "relay");
    sgt_bg_start(&relay, "sagad-relay", run, relay_env);
    sgt_bg_start(&worker, "sagad-worker", run, worker_env);

    sgt_unique(saga, sizeof(saga), "acl-saga");
    snprintf(start, sizeof(start),
             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-%s\", \"saga_id\": \"%s\", "
             "\"name\": \"acl\", \"steps\": [{\"name\": \"one\", \"tool\": \"noop\"}, "
             "{\"name\": \"two\", \"tool\": \"noop\"}]}",
             saga, saga);
    acl_conf_load(&prod, "producer");
    {
        sg_kafka_t *k = acl_client(&prod, SG_KAFKA_PRODUCER);

        memset(&b, 0, sizeof(b));
        cr_assert_eq(sg_kafka_produce(k, ACL_COMMANDS, saga, strlen(saga), start, strlen(start),
                                      NULL, 0, &b, &err),
                     0, "%s", err.message);
        sg_kafka_flush(k, 30000, &err);
        sg_kafka_destroy(k);
    }
    cr_assert_eq(b.delivered, 1, "the producer submits to %s: %s", ACL_COMMANDS,
                 b.failed ? b.first_err.message : "no report");

    sgt_unique(group, sizeof(group), "app.acl");
    rc = acl_consume_text("producer", ACL_EVENTS, group, saga, "saga.completed", &err);
    cr_expect_eq(rc, 1, "saga.completed of %s on %s: %s\nworker: %s\nrelay: %s", saga, ACL_EVENTS,
                 rc < 0 ? err.message : "not within the wait", sgt_bg_tail(&worker),
                 sgt_bg_tail(&relay));
    pg = sgt_db_connect(dsn);
    cr_expect_eq(sgt_query_intf(pg,
                                "SELECT count(*) FROM sagas WHERE saga_id = '%s' AND "
                                "status = 'completed'",
                                saga),
                 1);

    snprintf(start, sizeof(start),
             "{\"v\": 1, \"type\": \"step.execute\", \"id\": \"forged-%s\", \"saga_id\": "
             "\"%s\", \"step\": 0, \"attempt\": 2, \"generation\": 1}",
             saga, saga);
    b = acl_produce_payload(&prod, ACL_INTERNAL, saga, start);
    cr_expect_eq(b.delivered, 0, "the producer wrote a step command to %s", ACL_INTERNAL);
    cr_expect_str_eq(b.first_err.code, ACL_REFUSED, "%s", b.first_err.message);
    b = acl_produce_payload(&prod, ACL_COMMANDS, saga, start);
    cr_expect_eq(b.delivered, 1, "the producer writes %s: %s", ACL_COMMANDS,
                 b.failed ? b.first_err.message : "");
    {
        double deadline = sgt_now_s() + ACL_WAIT_S;
        long long n = 0;

        while ((n = sgt_query_intf(pg,
                                   "SELECT count(*) FROM dead_letters WHERE saga_id = '%s' AND "
                                   "error_code = 'input.command.unauthenticated' AND "
                                   "original_topic = '%s'",
                                   saga, ACL_COMMANDS)) != 1 &&
               sgt_now_s() < deadline)
            usleep(100000);
        cr_expect_eq(n, 1, "the forged step command dead-lettered by the worker: %s",
                     sgt_bg_tail(&worker));
    }
    cr_expect_eq(sgt_query_intf(pg, "SELECT count(*) FROM attempts WHERE saga_id = '%s'", saga), 2,
                 "and never run: one attempt per step");
    sg_pg_destroy(pg);

    sgt_bg_signal(&worker, SIGTERM);
    sgt_bg_signal(&relay, SIGTERM);
    cr_expect_eq(sgt_bg_join(&worker, 60), 0, "the worker exits 0: %s", sgt_bg_tail(&worker));
    cr_expect_eq(sgt_bg_join(&relay, 60), 0, "the relay exits 0: %s", sgt_bg_tail(&relay));
    /* Neither needed more than its principal has. */
    cr_expect(!strstr(worker.err ? worker.err : "", "AUTHORIZATION_FAILED"),
              "the worker was refused: %s", worker.err);
    cr_expect(!strstr(relay.err ? relay.err : "", "AUTHORIZATION_FAILED"),
              "the relay was refused: %s", relay.err);
    sgt_bg_free(&worker);
    sgt_bg_free(&relay);
    unlink(registry);
    rmdir(dir);
    sgt_db_drop(db);
}

/* The checkpoint the relay's log says it resumed from ("exactly once:
 * took the transactional id", its commit_lsn) as a WAL position; -1 when
 * it says none, -2 when the line or the key is not there. */
static long long checkpoint_commit_lsn(const char *log)
{
    const char *line = strstr(log, "exactly once: took the transactional id");
    const char *v = line ? strstr(line, "\"commit_lsn\":\"") : NULL;
    unsigned hi, lo;

    if (!v || (strchr(line, '\n') && v > strchr(line, '\n')))
        return -2;
    v += strlen("\"commit_lsn\":\"");
    if (strncmp(v, "(none)\"", 7) == 0)
        return -1;
    if (sscanf(v, "%X/%X\"", &hi, &lo) != 2)
        return -2;
    return (long long)hi << 32 | lo;
}

/* The relay's exactly-once parts, whole, under its principal and nothing
 * more (the grants of deploy/local/kafka.sh, as OPERATIONS.md lists
 * them): the WAL source takes its default transactional id
 * (sagad-relay.<system>/<database>/<slot>), publishes in transactions with
 * checkpoints, and a second run reads its checkpoint back through the
 * group sagad-relay-checkpoints.  An application reads the messages
 * read_committed (librdkafka's default). */
Test(acl, exactly_once_relay_runs_under_its_principal, .timeout = 240)
{
    char db[128], dsn[512], relay_dsn[600], slot[96], key[128], common[5][640], renv[6][200];
    char group[128];
    const char *relay_env[12] = {0}, *run[] = {"run", NULL};
    sgt_bg_t relay = {0};
    sg_pg_t *pg;
    sg_err_t err;
    long long before = 0, after = 0;
    int rc;

    sgt_db_create(db, sizeof(db), dsn, sizeof(dsn));
    pg = sgt_db_connect(dsn);
    cr_assert_eq(sg_migrate_run(pg, NULL, NULL, &err), 0, "%s", err.message);
    sgt_role_dsn(relay_dsn, sizeof(relay_dsn), dsn, "relay");
    sgt_unique(slot, sizeof(slot), "acl_slot");
    sgt_unique(key, sizeof(key), "acl-eos");
    snprintf(common[0], sizeof(common[0]), "SAGAD_PG_DSN=%s", relay_dsn);
    snprintf(common[1], sizeof(common[1]), "SAGAD_RELAY_SLOT=%s", slot);
    snprintf(common[2], sizeof(common[2]), "SAGAD_RELAY_SOURCE=wal");
    snprintf(common[3], sizeof(common[3]), "SAGAD_RELAY_EXACTLY_ONCE=true");
    snprintf(common[4], sizeof(common[4]), "SAGAD_HTTP_PORT=0");
    acl_component_env(relay_env, renv, common, 5, "relay");

    for (int round = 1; round <= 2; round++) {
        char text[64];
        long long ck;

        snprintf(text, sizeof(text), "round-%d", round);
        if (round == 1)
            before = sgt_query_int(pg, "SELECT (pg_current_wal_lsn() - '0/0')::bigint");
        else
            after = sgt_query_int(pg, "SELECT (pg_current_wal_lsn() - '0/0')::bigint");
        {
            const char *q[] = {ACL_EVENTS, key, text};
            cr_assert_eq(sg_pg_exec(pg,
                                    "INSERT INTO outbox (topic, key, payload) VALUES ($1, "
                                    "convert_to($2, 'UTF8'), convert_to($3, 'UTF8'))",
                                    3, q, NULL, &err),
                         0, "%s", err.message);
        }
        sgt_bg_start(&relay, "sagad-relay", run, relay_env);
        sgt_unique(group, sizeof(group), "app.acl-eos");
        rc = acl_consume_text("producer", ACL_EVENTS, group, key, text, &err);
        cr_expect_eq(rc, 1, "%s of %s, read_committed: %s\nrelay: %s", text, key,
                     rc < 0 ? err.message : "not within the wait", sgt_bg_tail(&relay));
        sgt_bg_signal(&relay, SIGTERM);
        cr_expect_eq(sgt_bg_join(&relay, 60), 0, "the relay exits 0: %s", sgt_bg_tail(&relay));
        cr_expect(strstr(relay.err, "exactly once: took the transactional id") != NULL,
                  "run %d took its id: %s", round, sgt_bg_tail(&relay));
        /* The first run found no checkpoint; the second found the first
         * one's: the commit that moved the first round's row from the
         * outbox table into the WAL (the first run's switch to the WAL
         * source), after the first round began and before the second. */
        ck = checkpoint_commit_lsn(relay.err ? relay.err : "");
        if (round == 1)
            cr_expect_eq(ck, -1, "the first run found no checkpoint: %s", sgt_bg_tail(&relay));
        else
            cr_expect(ck >= before && ck <= after,
                      "the second run read the first one's checkpoint back: commit LSN %lld, "
                      "the first round's row moved within [%lld, %lld]: %s",
                      ck, before, after, sgt_bg_tail(&relay));
        cr_expect(!strstr(relay.err, "AUTHORIZATION_FAILED") &&
                      !strstr(relay.err, "authorization_failed"),
                  "the relay was refused: %s", relay.err);
        sgt_bg_free(&relay);
    }
    cr_expect_eq(sgt_query_intf(pg,
                                "SELECT count(*) FROM outbox WHERE key = convert_to('%s', "
                                "'UTF8')",
                                key),
                 0, "nothing left in the outbox table");
    sg_pg_destroy(pg);
    {
        char serr[512];
        if (sgt_slot_drop(relay_dsn, slot, serr, sizeof(serr)) < 0)
            cr_log_warn("cannot drop slot %s: %s", slot, serr);
    }
    sgt_db_drop(db);
}
