#include "sagad/sg_config.h"

#include <ctype.h>
#include <strings.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_mask.h"

#define MiB (1024 * 1024)

/* The one table.  docs/CONFIGURATION.md and the sample config are generated
 * from it; keep docs to one line. */
static const sg_config_key_t config_table[] = {
    {"log.level", SG_CONFIG_ENUM, "info", 0, 0, "error|warn|info|debug", SG_CONFIG_RELOADABLE,
     "Lowest level written to the JSON log on stderr (re-read on SIGHUP by worker and relay)."},
    {"pg.dsn", SG_CONFIG_STR, NULL, 0, 0, NULL, SG_CONFIG_SECRET,
     "PostgreSQL connection string, URL or key=value form (required; password masked)."},
    {"pg.connect_timeout_ms", SG_CONFIG_INT, "5000", 1, 600000, NULL, 0,
     "Time allowed for one PostgreSQL connection attempt."},
    {"pg.connect_attempts", SG_CONFIG_INT, "10", 0, 1000000, NULL, 0,
     "Connection attempts at start-up before giving up (0: retry forever)."},
    {"pg.retry_base_ms", SG_CONFIG_INT, "200", 1, 600000, NULL, 0,
     "First delay between PostgreSQL reconnection attempts (doubles, full jitter)."},
    {"pg.retry_cap_ms", SG_CONFIG_INT, "5000", 1, 3600000, NULL, 0,
     "Longest delay between PostgreSQL reconnection attempts."},
    {"pg.strict_roles", SG_CONFIG_BOOL, "false", 0, 0, NULL, 0,
     "Refuse to run with a database role that may do more than the binary needs (superuser, "
     "owner of the tables, CREATE in their schema; for dlq-tool also direct ledger writes)."},
    {"topic.commands", SG_CONFIG_STR, "sagad.commands", 0, 0, NULL, 0,
     "Kafka topic producers write: saga.start and the control commands (cancel, approve, "
     "reject)."},
    {"topic.internal", SG_CONFIG_STR, "sagad.internal", 0, 0, NULL, 0,
     "Kafka topic of sagad's own commands (steps, timers, forwarded controls); only the relay "
     "writes it."},
    {"topic.events", SG_CONFIG_STR, "sagad.events", 0, 0, NULL, 0,
     "Kafka topic the saga events are published to."},
    {"topic.dlq", SG_CONFIG_STR, "sagad.dlq", 0, 0, NULL, 0,
     "Kafka topic the dead letters are published to."},
    {"limits.max_message_bytes", SG_CONFIG_INT, "1048576", 64, 64 * MiB, NULL, 0,
     "Largest message accepted; a larger one is dead-lettered (input.too_large)."},
    {"limits.max_outgoing_bytes", SG_CONFIG_INT, "900000", 4096, 64 * MiB, NULL, 0,
     "Largest message sagad writes for Kafka (events, commands, dead letters), kept below the "
     "producer's message.max.bytes (1,000,000 by default): a larger one loses its largest "
     "fields (truncated_fields says which, and where PostgreSQL keeps them whole)."},
    {"limits.max_json_depth", SG_CONFIG_INT, "64", 2, 1000, NULL, 0,
     "Deepest JSON nesting accepted; deeper input is dead-lettered (input.json.too_deep)."},
    {"limits.max_json_nodes", SG_CONFIG_INT, "20000", 16, 10000000, NULL, 0,
     "Most JSON values and member names in one message (each parses into about 64 bytes); "
     "more is dead-lettered (input.json.too_many_nodes)."},
    {"security.internal_auth", SG_CONFIG_ENUM, "require", 0, 0, "require|accept_unsigned|off", 0,
     "Internal commands (step.*, saga.release): the relay signs them (sagad-mac) and the worker "
     "acts only on signed ones; accept_unsigned during a rolling upgrade; off only on a private "
     "broker."},
    {"security.key_reload_ms", SG_CONFIG_INT, "30000", 1000, 3600000, NULL, 0,
     "How often worker and relay re-read the internal keys (table internal_keys) for rotation."},
    {"security.keyring", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "Path of the keyring JSON file: principals, their Ed25519 public keys and roles "
     "(schemas/keyring.schema.json); empty: no control command is accepted."},
    {"ctl.key", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "Private key file sagactl signs saga.start and control commands with (made by `sagactl "
     "keys new`); empty: unsigned unless --key is given."},
    {"security.signed_submissions", SG_CONFIG_ENUM, "gated", 0, 0, "gated|all", 0,
     "Which saga.start must be signed by a principal with the submit role: those that call a "
     "tool with an approval gate (four eyes), or all."},
    {"security.signature_max_age_s", SG_CONFIG_INT, "900", 10, 86400, NULL, 0,
     "Oldest signature (sagad-auth time) a control command or submission may carry; a signature "
     "up to 60 s in the future is accepted for clock skew."},
    {"retry.base_ms", SG_CONFIG_INT, "250", 1, 3600000, NULL, 0,
     "Backoff base: attempt n waits random(0, min(cap, base * 2^n))."},
    {"retry.cap_ms", SG_CONFIG_INT, "30000", 1, 86400000, NULL, 0,
     "Backoff cap: the longest wait before a retry (Retry-After may exceed it)."},
    {"retry.max_attempts", SG_CONFIG_INT, "5", 1, 1000, NULL, 0,
     "Attempts per step before the step counts as failed."},
    {"retry.budget_ms", SG_CONFIG_INT, "60000", 0, 604800000, NULL, 0,
     "Total retry delay a saga may spend before it is dead-lettered (0: no budget)."},
    {"retry.compensate_max_attempts", SG_CONFIG_INT, "20", 1, 100000, NULL, 0,
     "Attempts per compensation before the saga fails and needs an operator."},
    {"retry.compensate_cap_ms", SG_CONFIG_INT, "300000", 1, 86400000, NULL, 0,
     "Backoff cap of compensation retries (they must succeed eventually, so they wait longer)."},
    {"worker.registry", SG_CONFIG_STR, "/etc/sagad/tools.json", 0, 0, NULL, 0,
     "Path of the tool registry JSON file (schemas/tool-registry.schema.json)."},
    {"worker.group_id", SG_CONFIG_STR, "sagad-worker", 0, 0, NULL, 0,
     "Kafka consumer group of the workers; also the key of their offsets in PostgreSQL."},
    {"worker.id", SG_CONFIG_STR, "auto", 0, 0, NULL, 0,
     "Name of this worker in attempts, dead letters and logs (auto: hostname-pid)."},
    {"worker.max_in_flight", SG_CONFIG_INT, "1024", 1, 1000000, NULL, 0,
     "Unfinished commands held at once (running, or queued behind their saga; a chained "
     "command and its copy count once); fetching pauses above it, or when 16 times as many "
     "wait behind the stored offset."},
    {"worker.intake_max_bytes", SG_CONFIG_INT, "67108864", 1048576, 1099511627776LL, NULL, 0,
     "Bytes the messages the worker holds may cost at once, parsed or not (a message counts 4 "
     "times its size, for its dead letter's copies, and while parsed its size again plus 64 "
     "bytes per JSON value); intake waits above it. "
     "The last message taken may pass it (one larger than it is taken alone)."},
    {"worker.threads", SG_CONFIG_INT, "16", 1, 1024, NULL, 0,
     "Tool calls running at once (threads of the call pool)."},
    {"worker.batch_size", SG_CONFIG_INT, "256", 1, 10000, NULL, 0,
     "Most commands decided or finished in one PostgreSQL transaction."},
    {"worker.transactions_in_flight", SG_CONFIG_INT, "2", 1, 2, NULL, 0,
     "PostgreSQL transactions the worker keeps out at once, each on its own connection: with "
     "2, the next batch is loaded and decided while the last one commits."},
    {"worker.crash_loop_limit", SG_CONFIG_INT, "3", 1, 1000, NULL, 0,
     "Interrupted attempts of one command before it is dead-lettered (runtime.crash_loop); "
     "the last run before the limit happens with no other call beside it."},
    {"worker.approval_timeout_ms", SG_CONFIG_INT, "86400000", 1000, 604800000, NULL, 0,
     "How long a step with an approval gate waits for saga.approve or saga.reject when its "
     "own approval.timeout_ms does not say; no decision in time counts as a rejection."},
    {"worker.dead_letter_hold_ms", SG_CONFIG_INT, "0", 0, 604800000, NULL, 0,
     "How long a saga whose forward step was dead-lettered stays `held` (nothing compensated, "
     "so dlq-tool can replay the step) before its compensation starts (0: at once)."},
    {"worker.event_result_max_bytes", SG_CONFIG_INT, "16384", 0, 1048576, NULL, 0,
     "Largest step result (JSON text) a step.succeeded event carries; a larger one is left "
     "out, with result_truncated: true and its size (the step row keeps it whole). 0: never."},
    {"worker.drain_timeout_ms", SG_CONFIG_INT, "30000", 0, 3600000, NULL, 0,
     "On SIGTERM or a revoked partition, how long running tool calls may finish before "
     "they are abandoned (redelivered, same idempotency key)."},
    {"worker.kafka_commit_interval_ms", SG_CONFIG_INT, "1000", 0, 60000, NULL, 0,
     "How often the offsets kept in PostgreSQL are copied to the Kafka group, for lag tools "
     "only (0: after every transaction); a revoked partition's is copied at once."},
    {"worker.chain", SG_CONFIG_BOOL, "true", 0, 0, NULL, 0,
     "Run a saga's next step command (or the members of a parallel group it starts, side by "
     "side) in the transaction that emitted it, when its message will come to this worker (a "
     "partition of topic.internal it owns), instead of after the "
     "relay and Kafka bring it back; the message is still sent, and acknowledged when it "
     "arrives."},
    {"worker.chain_repartition_pause_ms", SG_CONFIG_INT, "360000", 0, 86400000, NULL, 0,
     "After the internal topic's partition count changes, how long chaining stays off while "
     "the relay still hashes keys over the old count; above its "
     "topic.metadata.refresh.interval.ms (librdkafka: 5 minutes)."},
    {"worker.test_allow_crash", SG_CONFIG_BOOL, "false", 0, 0, NULL, 0,
     "Tests only: allow the builtin `crash` tool, which aborts the worker process."},
    {"breaker.failure_threshold", SG_CONFIG_INT, "5", 1, 100000, NULL, 0,
     "Consecutive transient failures of one tool that open its circuit (calls then fail fast "
     "with tool.circuit_open until the cool-down ends)."},
    {"breaker.cooldown_ms", SG_CONFIG_INT, "30000", 100, 86400000, NULL, 0,
     "How long an open circuit stays open before one probe call is let through."},
    {"relay.shards", SG_CONFIG_INT, "1", 1, 256, NULL, 0,
     "Outbox shards; must match relay_settings.shards in the database (set while empty)."},
    {"relay.batch_size", SG_CONFIG_INT, "1000", 1, 100000, NULL, 0,
     "Outbox rows published per batch; the cursor moves once the whole batch is acked."},
    {"relay.poll_interval_ms", SG_CONFIG_INT, "100", 1, 60000, NULL, 0,
     "Longest wait for a NOTIFY before polling the outbox and the timers anyway."},
    {"relay.standby_poll_ms", SG_CONFIG_INT, "1000", 50, 60000, NULL, 0,
     "How often a standby relay tries to take over an orphaned shard."},
    {"relay.delivery_timeout_ms", SG_CONFIG_INT, "30000", 1000, 3600000, NULL, 0,
     "Time a batch may wait for Kafka acks before it is retried from the cursor."},
    {"relay.timer_batch", SG_CONFIG_INT, "1000", 1, 100000, NULL, 0,
     "Due timers moved into the outbox per transaction."},
    {"relay.xmin_warn_ms", SG_CONFIG_INT, "10000", 100, 86400000, NULL, 0,
     "Warn, naming the blocking backend, once a running transaction holds the relay back this "
     "long."},
    {"relay.source", SG_CONFIG_ENUM, "table", 0, 0, "table|wal", 0,
     "Where the relay reads outgoing messages: the outbox table, or the write-ahead log through "
     "a logical replication slot (docs/RELAY.md, \"The WAL source\"; needs wal_level = logical)."},
    {"relay.slot", SG_CONFIG_STR, "sagad_relay", 0, 0, NULL, 0,
     "The logical replication slot of the WAL source (made by the relay when missing)."},
    {"relay.replication_dsn", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_SECRET | SG_CONFIG_EMPTY_OK,
     "Connection string of the WAL source's replication session, a login with REPLICATION; "
     "empty: pg.dsn (password masked)."},
    {"relay.wal_batch_size", SG_CONFIG_INT, "10000", 1, 1000000, NULL, 0,
     "WAL source: messages sent to Kafka before the relay waits for their acks and confirms "
     "the WAL position of the last whole transaction among them."},
    {"relay.wal_sender_timeout_ms", SG_CONFIG_INT, "10000", 1000, 600000, NULL, 0,
     "WAL source: the server ends a replication session silent this long (a relay paused or "
     "cut off), which frees the slot for a standby."},
    {"relay.exactly_once", SG_CONFIG_BOOL, "false", 0, 0, NULL, 0,
     "WAL source: each batch and a checkpoint of its WAL position go to Kafka in one "
     "transaction, so read_committed consumers see each message once (docs/RELAY.md, "
     "\"Exactly once\")."},
    {"relay.checkpoint_topic", SG_CONFIG_STR, "sagad.relay.checkpoints", 0, 0, NULL, 0,
     "With relay.exactly_once: the topic of one partition each batch's checkpoint goes to "
     "(sagad-worker topics makes it; compact it, or keep records longer than a relay may be "
     "down), one topic per slot."},
    {"relay.transactional_id", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "With relay.exactly_once: the Kafka transactional.id the slot's relays share (the one "
     "that takes the slot fences the others); empty: sagad-relay.<system identifier>/"
     "<database>/<relay.slot>."},
    {"retention.sagas_s", SG_CONFIG_INT, "1209600", 1, 315360000, NULL, 0,
     "Finished sagas (completed, compensated, failed) are removed with their steps and attempts "
     "this long after their last change (14 days), unless a dead letter still names them."},
    {"retention.dedup_window_s", SG_CONFIG_INT, "1209600", 1, 315360000, NULL, 0,
     "How long a saga_id is remembered (a repeated saga.start answered as a duplicate); its "
     "saga row is the memory, so it must equal retention.sagas_s."},
    {"retention.dead_letters_s", SG_CONFIG_INT, "7776000", 1, 315360000, NULL, 0,
     "Handled (replayed or discarded) dead letters are removed with their replays and revisions "
     "this long after they were resolved (90 days); pending ones never."},
    {"retention.janitor", SG_CONFIG_BOOL, "true", 0, 0, NULL, 0,
     "Relay only: run the janitor that removes rows past their horizon (one relay of the "
     "database runs it at a time, by an advisory lock)."},
    {"retention.interval_ms", SG_CONFIG_INT, "60000", 100, 86400000, NULL, 0,
     "How often the janitor starts a pass over the tables."},
    {"retention.batch_size", SG_CONFIG_INT, "500", 1, 100000, NULL, 0,
     "Sagas (with their steps and attempts) or dead letters the janitor removes per "
     "transaction."},
    {"retention.pause_ms", SG_CONFIG_INT, "100", 0, 60000, NULL, 0,
     "The janitor's pause between two batches (time for the workers' transactions and "
     "autovacuum)."},
    {"gateway.bind", SG_CONFIG_STR, "127.0.0.1", 0, 0, NULL, 0,
     "Address sagad-gateway's API listens on (0.0.0.0 in a pod, behind its NetworkPolicy)."},
    {"gateway.port", SG_CONFIG_INT, "8480", 0, 65535, NULL, 0,
     "Port of sagad-gateway: the API under /v1, /healthz, /readyz and /metrics; 0 picks a free "
     "port (logged)."},
    {"gateway.users", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "Path of the gateway's users file: names, roles and hashed bearer tokens "
     "(schemas/gateway-users.schema.json); empty: nobody is authenticated."},
    {"gateway.key", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "Private key file the gateway signs with, for the users it authenticated (a principal with "
     "the delegate role in the workers' keyring); empty: submissions go unsigned and controls "
     "are refused."},
    {"gateway.trusted_proxies", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "Comma-separated IP addresses of authenticating proxies whose gateway.proxy_header names "
     "the user; empty: that header is ignored from everyone."},
    {"gateway.proxy_header", SG_CONFIG_STR, "X-Forwarded-User", 0, 0, NULL, 0,
     "The header a trusted proxy names the authenticated user in (oauth2-proxy: "
     "X-Forwarded-User)."},
    {"gateway.allowed_origins", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "Comma-separated origins (https://console.example) a browser may call the API from; a "
     "request with any other Origin header is refused with 403."},
    {"gateway.tls_cert", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "PEM certificate file: with gateway.tls_key the gateway speaks HTTPS; empty: plain HTTP "
     "(bind 127.0.0.1, or put a TLS-terminating proxy in front)."},
    {"gateway.tls_key", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "PEM private key file of gateway.tls_cert."},
    {"gateway.rate_per_s", SG_CONFIG_INT, "200", 1, 1000000, NULL, 0,
     "Requests a second each principal may make (a token bucket; over it: 429 with "
     "Retry-After)."},
    {"gateway.rate_burst", SG_CONFIG_INT, "400", 1, 1000000, NULL, 0,
     "Requests a principal may make at once before gateway.rate_per_s applies."},
    {"gateway.wait_max_ms", SG_CONFIG_INT, "60000", 1000, 600000, NULL, 0,
     "Longest a long poll (GET /v1/sagas/{id}/wait) or an event stream holds a request open."},
    {"gateway.pg_pool", SG_CONFIG_INT, "4", 1, 64, NULL, 0,
     "PostgreSQL connections of the gateway's queries (long polls wait on one LISTEN "
     "connection of their own, not on these)."},
    {"gateway.max_connections", SG_CONFIG_INT, "256", 8, 10000, NULL, 0,
     "Open HTTP connections the gateway serves at once (each has a thread); more are refused."},
    {"console.enabled", SG_CONFIG_BOOL, "true", 0, 0, NULL, 0,
     "Serve the operator console (docs/CONSOLE.md) at / of sagad-gateway, and accept its "
     "session cookie on /v1; false: only bearer tokens and the trusted proxy."},
    {"console.read_only", SG_CONFIG_BOOL, "false", 0, 0, NULL, 0,
     "Refuse (403) every state-changing /v1 request made through a console session: the "
     "console only looks; bearer-token clients are unaffected."},
    {"console.session_idle_ms", SG_CONFIG_INT, "1800000", 60000, 86400000, NULL, 0,
     "A console session unused for this long is over (sign in again)."},
    {"console.session_max_ms", SG_CONFIG_INT, "43200000", 60000, 604800000, NULL, 0,
     "A console session is over this long after sign-in, used or not."},
    {"console.max_sessions", SG_CONFIG_INT, "1024", 1, 100000, NULL, 0,
     "Console sessions a gateway replica holds in memory; past it a sign-in ends the session "
     "used least recently."},
    {"mcp.token", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK | SG_CONFIG_SECRET,
     "Bearer token of the users file that `sagad-gateway mcp --stdio` acts as (SAGAD_MCP_TOKEN, "
     "set in the agent's MCP configuration); empty: the stdio server refuses to start."},
    {"mcp.approvals", SG_CONFIG_BOOL, "false", 0, 0, NULL, 0,
     "Offer the MCP tools approve_step and reject_step (still only to an approver, never on a "
     "saga it submitted); false: an agent is told to ask its user instead."},
    {"http.bind", SG_CONFIG_STR, "127.0.0.1", 0, 0, NULL, 0,
     "Address the /metrics, /healthz and /readyz endpoint listens on (0.0.0.0 in a pod)."},
    {"http.port", SG_CONFIG_INT, "9400", 0, 65535, NULL, 0,
     "Port of the /metrics, /healthz and /readyz endpoint; 0 picks a free port (logged)."},
    {"health.stall_ms", SG_CONFIG_INT, "30000", 100, 3600000, NULL, 0,
     "/healthz fails once the main loop has not turned for this long."},
    {"metrics.saga_names", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "Saga names (comma-separated, at most 64) whose steps sagad_saga_steps_finished_total "
     "counts by saga and step name; others count as saga=\"other\", step=\"other\"; empty: "
     "every name, up to the metric's bound of series (then _other)."},
    {"otel.endpoint", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "OTEL_EXPORTER_OTLP_ENDPOINT: base URL of an OTLP/HTTP trace collector (spans are posted "
     "to <url>/v1/traces); empty (the default): tracing off, no span is built."},
    {"otel.protocol", SG_CONFIG_ENUM, "http/protobuf", 0, 0, "http/protobuf|http/json", 0,
     "OTEL_EXPORTER_OTLP_PROTOCOL: the encoding of the posts, protobuf (the OpenTelemetry "
     "SDKs' default; 44% of JSON's bytes for sagad's spans, cheaper to write and to read) or "
     "OTLP's JSON; "
     "grpc is not spoken."},
    {"otel.headers", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK | SG_CONFIG_SECRET,
     "OTEL_EXPORTER_OTLP_HEADERS: key=value pairs, comma-separated, sent with every export "
     "(an Authorization header, an API key)."},
    {"otel.timeout_ms", SG_CONFIG_INT, "10000", 1, 600000, NULL, 0,
     "OTEL_EXPORTER_OTLP_TIMEOUT: longest time one export may take; a failed export is "
     "dropped (counted) and the next waits 1 s, doubling to 30 s while the collector fails."},
    {"otel.traces_sampler_arg", SG_CONFIG_RATIO, "1", 0, 0, NULL, 0,
     "OTEL_TRACES_SAMPLER_ARG: share of sagas traced, by trace id (traceidratio), so a saga's "
     "spans are kept or dropped together by every worker."},
    {"otel.service_name", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "OTEL_SERVICE_NAME: the service.name of the spans; empty: the program's name "
     "(sagad-worker, sagad-relay)."},
    {"otel.resource_attributes", SG_CONFIG_STR, "", 0, 0, NULL, SG_CONFIG_EMPTY_OK,
     "OTEL_RESOURCE_ATTRIBUTES: key=value pairs, comma-separated, added to the spans' "
     "resource (deployment.environment=prod,k8s.pod.name=...)."},
    {"otel.max_queue_size", SG_CONFIG_INT, "2048", 1, 1000000, NULL, 0,
     "OTEL_BSP_MAX_QUEUE_SIZE: spans waiting for export at most; more are dropped and counted "
     "(sagad_spans_dropped_total), never waited for."},
    {"otel.max_export_batch_size", SG_CONFIG_INT, "512", 1, 100000, NULL, 0,
     "OTEL_BSP_MAX_EXPORT_BATCH_SIZE: most spans in one export."},
    {"otel.schedule_delay_ms", SG_CONFIG_INT, "5000", 1, 600000, NULL, 0,
     "OTEL_BSP_SCHEDULE_DELAY: longest time a span waits for its batch to fill before it is "
     "exported."},
};

/* A ratio is kept as an integer in millionths. */
#define SG_RATIO_ONE 1000000

#define CONFIG_NKEYS (sizeof(config_table) / sizeof(config_table[0]))

typedef struct config_val_s {
    char *text; /* NULL only for a required key not yet set */
    int64_t i;  /* SG_CONFIG_RATIO: the ratio times SG_RATIO_ONE */
    char *origin;
} config_val_t;

typedef struct kafka_kv_s {
    char *key; /* without the "kafka." prefix */
    char *value;
    char *origin;
    struct kafka_kv_s *next;
} kafka_kv_t;

struct sg_config_s {
    config_val_t vals[CONFIG_NKEYS];
    kafka_kv_t *kafka; /* in insertion order */
};

static void *xmalloc(size_t n)
{
    void *p = sg_xmalloc(n);

    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;

    return memcpy(xmalloc(n), s, n);
}

const sg_config_key_t *sg_config_table(size_t *count)
{
    *count = CONFIG_NKEYS;
    return config_table;
}

static int key_index(const char *key)
{
    for (size_t i = 0; i < CONFIG_NKEYS; i++)
        if (strcmp(config_table[i].key, key) == 0)
            return (int)i;
    return -1;
}

static bool enum_has(const char *choices, const char *value)
{
    size_t vlen = strlen(value);

    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);

        if (len == vlen && strncmp(p, value, len) == 0)
            return true;
        p += len + (bar ? 1 : 0);
    }
    return false;
}

static int parse_bool(const char *s, int64_t *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};

    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return (*out = 1), 0;
        if (strcasecmp(s, no[i]) == 0)
            return (*out = 0), 0;
    }
    return -1;
}

/* Parses value for key k into *out; on failure writes the rule to errstr. */
static int parse_value(const sg_config_key_t *k, const char *value, int64_t *out, char *rule,
                       size_t rule_size)
{
    char *end;
    long long v;

    *out = 0;
    switch (k->type) {
    case SG_CONFIG_STR:
        if (*value == '\0' && !(k->flags & SG_CONFIG_EMPTY_OK)) {
            snprintf(rule, rule_size, "must not be empty");
            return -1;
        }
        return 0;
    case SG_CONFIG_INT:
        errno = 0;
        v = strtoll(value, &end, 10);
        if (*value == '\0' || *end != '\0' || errno == ERANGE || v < k->min || v > k->max) {
            snprintf(rule, rule_size, "must be an integer between %lld and %lld", (long long)k->min,
                     (long long)k->max);
            return -1;
        }
        *out = v;
        return 0;
    case SG_CONFIG_BOOL:
        if (parse_bool(value, out) < 0) {
            snprintf(rule, rule_size, "must be true or false");
            return -1;
        }
        return 0;
    case SG_CONFIG_ENUM:
        if (!enum_has(k->choices, value)) {
            snprintf(rule, rule_size, "must be one of %s", k->choices);
            return -1;
        }
        return 0;
    case SG_CONFIG_RATIO: {
        double d;
        errno = 0;
        d = strtod(value, &end);
        if (*value == '\0' || *end != '\0' || errno == ERANGE || !(d >= 0.0 && d <= 1.0)) {
            snprintf(rule, rule_size, "must be a number from 0 to 1");
            return -1;
        }
        *out = (int64_t)(d * SG_RATIO_ONE + 0.5);
        return 0;
    }
    }
    return -1;
}

static void val_store(config_val_t *v, const char *text, int64_t i, const char *origin)
{
    free(v->text);
    free(v->origin);
    v->text = xstrdup(text);
    v->i = i;
    v->origin = xstrdup(origin);
}

sg_config_t *sg_config_new(void)
{
    sg_config_t *cfg = sg_xcalloc(1, sizeof(*cfg));

    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        const sg_config_key_t *k = &config_table[i];
        char rule[128];
        int64_t iv;

        if (!k->def)
            continue;
        /* Defaults go through the user-input parser: a bad default is a
         * bug the unit tests catch, not a silent surprise. */
        if (parse_value(k, k->def, &iv, rule, sizeof(rule)) < 0)
            abort();
        val_store(&cfg->vals[i], k->def, iv, "default");
    }
    return cfg;
}

void sg_config_destroy(sg_config_t *cfg)
{
    kafka_kv_t *kv, *next;

    if (!cfg)
        return;
    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        free(cfg->vals[i].text);
        free(cfg->vals[i].origin);
    }
    for (kv = cfg->kafka; kv; kv = next) {
        next = kv->next;
        free(kv->key);
        free(kv->value);
        free(kv->origin);
        free(kv);
    }
    free(cfg);
}

static void kafka_set(sg_config_t *cfg, const char *key, const char *value, const char *origin)
{
    kafka_kv_t **pp = &cfg->kafka;

    for (; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->key, key) == 0) {
            free((*pp)->value);
            free((*pp)->origin);
            (*pp)->value = xstrdup(value);
            (*pp)->origin = xstrdup(origin);
            return;
        }
    }
    *pp = xmalloc(sizeof(**pp));
    (*pp)->key = xstrdup(key);
    (*pp)->value = xstrdup(value);
    (*pp)->origin = xstrdup(origin);
    (*pp)->next = NULL;
}

int sg_config_set(sg_config_t *cfg, const char *key, const char *value, const char *origin,
                  char *errstr, size_t errstr_size)
{
    char rule[128];
    int64_t iv;
    int idx;

    if (strncmp(key, "kafka.", 6) == 0) {
        if (key[6] == '\0') {
            snprintf(errstr, errstr_size, "config: \"%s\" (from %s): kafka.* needs a property name",
                     key, origin);
            return -1;
        }
        if (sg_mask_key_is_secret(key + 6))
            sg_mask_add_secret(value);
        kafka_set(cfg, key + 6, value, origin);
        return 0;
    }
    idx = key_index(key);
    if (idx < 0) {
        snprintf(errstr, errstr_size,
                 "config: unknown key \"%s\" (from %s); see docs/CONFIGURATION.md", key, origin);
        return -1;
    }
    if (parse_value(&config_table[idx], value, &iv, rule, sizeof(rule)) < 0) {
        bool secret = config_table[idx].flags & SG_CONFIG_SECRET;

        snprintf(errstr, errstr_size, "config: %s = \"%s\" (from %s): %s", key,
                 secret ? "****" : value, origin, rule);
        return -1;
    }
    if (strcmp(key, "pg.dsn") == 0)
        sg_mask_add_dsn(value);
    else if (config_table[idx].flags & SG_CONFIG_SECRET)
        sg_mask_add_secret(value);
    val_store(&cfg->vals[idx], value, iv, origin);
    return 0;
}

static char *trim(char *s)
{
    char *end;

    while (isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* Parses one `key = value` line in place.  Returns 1 for a key/value,
 * 0 for a blank or comment line, -1 for a malformed line. */
static int parse_line(char *line, char **key, char **value)
{
    char *eq, *v;
    size_t vlen;

    line = trim(line);
    if (*line == '\0' || *line == '#')
        return 0;
    eq = strchr(line, '=');
    if (!eq)
        return -1;
    *eq = '\0';
    *key = trim(line);
    v = trim(eq + 1);
    vlen = strlen(v);
    if (vlen >= 2 && v[0] == '"' && v[vlen - 1] == '"') {
        v[vlen - 1] = '\0';
        v++;
    }
    *value = v;
    return **key ? 1 : -1;
}

/* Keys a reload applies: the reloadable ones of the table. */
static bool reloadable(const char *key)
{
    int idx = key_index(key);

    return idx >= 0 && (config_table[idx].flags & SG_CONFIG_RELOADABLE);
}

static int load_file(sg_config_t *cfg, const char *path, bool (*only)(const char *key),
                     char *errstr, size_t errstr_size)
{
    char line[4096], origin[512];
    int lineno = 0, rc = 0;
    FILE *fp = fopen(path, "r");

    if (!fp) {
        snprintf(errstr, errstr_size, "config: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof(line), fp)) {
        char *key, *value;
        int kind;

        lineno++;
        snprintf(origin, sizeof(origin), "file %s:%d", path, lineno);
        if (!strchr(line, '\n') && !feof(fp)) {
            snprintf(errstr, errstr_size, "config: %s: line longer than %zu bytes", origin,
                     sizeof(line) - 1);
            rc = -1;
            break;
        }
        kind = parse_line(line, &key, &value);
        if (kind < 0) {
            snprintf(errstr, errstr_size, "config: %s: expected `key = value`", origin);
            rc = -1;
        } else if (kind > 0 && (!only || only(key))) {
            rc = sg_config_set(cfg, key, value, origin, errstr, errstr_size);
        }
    }
    fclose(fp);
    return rc;
}

int sg_config_load_file(sg_config_t *cfg, const char *path, char *errstr, size_t errstr_size)
{
    return load_file(cfg, path, NULL, errstr, errstr_size);
}

void sg_config_env_name(const char *key, char *out, size_t out_size)
{
    size_t n = (size_t)snprintf(out, out_size, "SAGAD_");

    for (; *key && n + 1 < out_size; key++, n++)
        out[n] = *key == '.' ? '_' : (char)toupper((unsigned char)*key);
    if (n < out_size)
        out[n] = '\0';
}

/* SAGAD_KAFKA_SASL_PASSWORD -> kafka.sasl.password; "__" -> "_". */
static void kafka_key_from_env(const char *rest, char *out, size_t out_size)
{
    size_t n = (size_t)snprintf(out, out_size, "kafka.");

    for (; *rest && n + 1 < out_size; rest++, n++) {
        if (rest[0] == '_' && rest[1] == '_') {
            out[n] = '_';
            rest++;
        } else {
            out[n] = *rest == '_' ? '.' : (char)tolower((unsigned char)*rest);
        }
    }
    out[n < out_size ? n : out_size - 1] = '\0';
}

static int env_key(const char *name, char *key, size_t key_size)
{
    char envname[128];

    if (strncmp(name, "SAGAD_KAFKA_", 12) == 0) {
        kafka_key_from_env(name + 12, key, key_size);
        return 0;
    }
    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        sg_config_env_name(config_table[i].key, envname, sizeof(envname));
        if (strcmp(envname, name) == 0) {
            snprintf(key, key_size, "%s", config_table[i].key);
            return 0;
        }
    }
    return -1;
}

/* The OpenTelemetry SDKs' own variables, which a platform (the OpenTelemetry
 * Operator, a Helm chart) may set for every container: each fills the key
 * of the same meaning, below that key's SAGAD_ variable. */
static const struct {
    const char *var, *key;
} otel_vars[] = {
    {"OTEL_EXPORTER_OTLP_ENDPOINT", "otel.endpoint"},
    {"OTEL_EXPORTER_OTLP_HEADERS", "otel.headers"},
    {"OTEL_EXPORTER_OTLP_PROTOCOL", "otel.protocol"},
    {"OTEL_EXPORTER_OTLP_TIMEOUT", "otel.timeout_ms"},
    {"OTEL_TRACES_SAMPLER_ARG", "otel.traces_sampler_arg"},
    {"OTEL_SERVICE_NAME", "otel.service_name"},
    {"OTEL_RESOURCE_ATTRIBUTES", "otel.resource_attributes"},
    {"OTEL_BSP_MAX_QUEUE_SIZE", "otel.max_queue_size"},
    {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "otel.max_export_batch_size"},
    {"OTEL_BSP_SCHEDULE_DELAY", "otel.schedule_delay_ms"},
};

static int load_otel_env(sg_config_t *cfg, char *const *envp, char *errstr, size_t errstr_size)
{
    for (; envp && *envp; envp++) {
        const char *eq = strchr(*envp, '=');
        char origin[160];

        if (strncmp(*envp, "OTEL_", 5) != 0 || !eq)
            continue;
        for (size_t i = 0; i < sizeof(otel_vars) / sizeof(otel_vars[0]); i++) {
            size_t nlen = strlen(otel_vars[i].var);
            if ((size_t)(eq - *envp) != nlen || strncmp(*envp, otel_vars[i].var, nlen) != 0)
                continue;
            snprintf(origin, sizeof(origin), "env %s", otel_vars[i].var);
            if (sg_config_set(cfg, otel_vars[i].key, eq + 1, origin, errstr, errstr_size) < 0)
                return -1;
        }
    }
    return 0;
}

static int load_env(sg_config_t *cfg, char *const *envp, bool (*only)(const char *key),
                    char *errstr, size_t errstr_size)
{
    if (!only && load_otel_env(cfg, envp, errstr, errstr_size) < 0)
        return -1;
    for (; envp && *envp; envp++) {
        const char *eq = strchr(*envp, '=');
        char name[128], key[160], origin[160];
        size_t nlen;

        if (strncmp(*envp, "SAGAD_", 6) != 0 || !eq)
            continue;
        nlen = (size_t)(eq - *envp);
        if (nlen >= sizeof(name))
            nlen = sizeof(name) - 1;
        memcpy(name, *envp, nlen);
        name[nlen] = '\0';
        if (strcmp(name, "SAGAD_CONFIG") == 0 || strncmp(name, "SAGAD_LOCAL_", 12) == 0 ||
            strncmp(name, "SAGAD_TEST_", 11) == 0)
            continue;
        if (env_key(name, key, sizeof(key)) < 0) {
            snprintf(errstr, errstr_size,
                     "config: unknown environment variable %s; see docs/CONFIGURATION.md", name);
            return -1;
        }
        snprintf(origin, sizeof(origin), "env %s", name);
        if ((!only || only(key)) &&
            sg_config_set(cfg, key, eq + 1, origin, errstr, errstr_size) < 0)
            return -1;
    }
    return 0;
}

int sg_config_load_env(sg_config_t *cfg, char *const *envp, char *errstr, size_t errstr_size)
{
    return load_env(cfg, envp, NULL, errstr, errstr_size);
}

int sg_config_load_reloadable(sg_config_t *cfg, const char *path, char *const *envp, char *errstr,
                              size_t errstr_size)
{
    if (path && load_file(cfg, path, reloadable, errstr, errstr_size) < 0)
        return -1;
    return load_env(cfg, envp, reloadable, errstr, errstr_size);
}

/* limits.max_outgoing_bytes must stay below what the producer takes
 * (kafka.message.max.bytes, librdkafka's 1,000,000 when unset): a message
 * between the two would be refused and quarantined by the relay. */
static int check_outgoing(const sg_config_t *cfg, char *errstr, size_t errstr_size)
{
    int idx = key_index("limits.max_outgoing_bytes");
    long long producer_max = 1000000;

    for (const kafka_kv_t *kv = cfg->kafka; kv; kv = kv->next)
        if (strcmp(kv->key, "message.max.bytes") == 0)
            producer_max = strtoll(kv->value, NULL, 10);
    if (idx < 0 || cfg->vals[idx].i < producer_max)
        return 0;
    snprintf(errstr, errstr_size,
             "config: limits.max_outgoing_bytes (%lld) must be below the producer's "
             "kafka.message.max.bytes (%lld): lower it, leaving room for headers and framing",
             (long long)cfg->vals[idx].i, producer_max);
    return -1;
}

/* topic.internal is read as the relay's alone (every message on it must
 * carry its sagad-mac): sharing a name with a topic others write would
 * dead-letter what they write, or have the worker read its own events. */
static int check_topics(const sg_config_t *cfg, char *errstr, size_t errstr_size)
{
    static const char *const others[] = {"topic.commands", "topic.events", "topic.dlq"};
    int idx = key_index("topic.internal");

    if (idx < 0 || !cfg->vals[idx].text)
        return 0;
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        int o = key_index(others[i]);
        if (o < 0 || !cfg->vals[o].text || strcmp(cfg->vals[o].text, cfg->vals[idx].text) != 0)
            continue;
        snprintf(errstr, errstr_size,
                 "config: topic.internal (%s) must differ from %s: only the relay writes it, "
                 "and every message on it must carry the relay's sagad-mac",
                 cfg->vals[idx].text, others[i]);
        return -1;
    }
    return 0;
}

int sg_config_check(const sg_config_t *cfg, char *errstr, size_t errstr_size)
{
    char envname[128];

    if (check_outgoing(cfg, errstr, errstr_size) < 0 || check_topics(cfg, errstr, errstr_size) < 0)
        return -1;

    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        if (cfg->vals[i].text)
            continue;
        sg_config_env_name(config_table[i].key, envname, sizeof(envname));
        snprintf(errstr, errstr_size, "config: %s is required: set it in the config file or in %s",
                 config_table[i].key, envname);
        return -1;
    }
    return 0;
}

/* The value of key, whose type must be one of the bits in types (1 << type). */
static const config_val_t *get(const sg_config_t *cfg, const char *key, unsigned types)
{
    int idx = key_index(key);

    if (idx < 0 || !(types & (1u << config_table[idx].type))) {
        fprintf(stderr, "sagad: BUG: config key %s asked as the wrong type\n", key);
        abort();
    }
    return &cfg->vals[idx];
}

const char *sg_config_str(const sg_config_t *cfg, const char *key)
{
    return get(cfg, key, 1u << SG_CONFIG_STR | 1u << SG_CONFIG_ENUM)->text;
}

int64_t sg_config_int(const sg_config_t *cfg, const char *key)
{
    return get(cfg, key, 1u << SG_CONFIG_INT)->i;
}

bool sg_config_bool(const sg_config_t *cfg, const char *key)
{
    return get(cfg, key, 1u << SG_CONFIG_BOOL)->i != 0;
}

double sg_config_ratio(const sg_config_t *cfg, const char *key)
{
    return (double)get(cfg, key, 1u << SG_CONFIG_RATIO)->i / SG_RATIO_ONE;
}

void sg_config_foreach_kafka(const sg_config_t *cfg,
                             void (*fn)(void *opaque, const char *key, const char *value),
                             void *opaque)
{
    for (const kafka_kv_t *kv = cfg->kafka; kv; kv = kv->next)
        fn(opaque, kv->key, kv->value);
}

void sg_config_print(const sg_config_t *cfg, FILE *out)
{
    char masked[1024];

    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        const sg_config_key_t *k = &config_table[i];
        const config_val_t *v = &cfg->vals[i];
        const char *shown = v->text ? v->text : "(unset, required)";

        if (v->text && *v->text && (k->flags & SG_CONFIG_SECRET)) {
            if (strcmp(k->key, "pg.dsn") == 0)
                sg_mask(v->text, masked, sizeof(masked));
            else
                snprintf(masked, sizeof(masked), SG_MASK);
            shown = masked;
        }
        fprintf(out, "%s = %s  # %s\n", k->key, shown, v->origin ? v->origin : "required");
    }
    for (const kafka_kv_t *kv = cfg->kafka; kv; kv = kv->next)
        fprintf(out, "kafka.%s = %s  # %s\n", kv->key,
                sg_mask_key_is_secret(kv->key) ? SG_MASK : kv->value, kv->origin);
}

static const char *type_name(const sg_config_key_t *k)
{
    switch (k->type) {
    case SG_CONFIG_STR:
        return "string";
    case SG_CONFIG_INT:
        return "integer";
    case SG_CONFIG_BOOL:
        return "boolean";
    case SG_CONFIG_ENUM:
        return "enum";
    case SG_CONFIG_RATIO:
        return "number";
    }
    return "?";
}

void sg_config_write_reference(FILE *out)
{
    char envname[128];

    fprintf(out, "# Configuration reference\n\n"
                 "Generated from the config table in lib/infra/sg_config.c by `make docs`; do not "
                 "edit.\n\n"
                 "Values come from the defaults, then the config file (`--config FILE` or "
                 "`SAGAD_CONFIG`,\n`key = value` lines, `#` comments), then the environment; "
                 "the last one wins.\nKeys under `kafka.` are passed to librdkafka unchanged "
                 "(`SAGAD_KAFKA_SASL_MECHANISMS`\nis `kafka.sasl.mechanisms`; `__` stands for a "
                 "literal `_`).\nThe `otel.*` keys also read the OpenTelemetry SDKs' variable "
                 "named first in their meaning\n(`OTEL_SERVICE_NAME` is `otel.service_name`), "
                 "below their `SAGAD_` variable.\n\n"
                 "| key | environment | type | default | rule | meaning |\n"
                 "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        const sg_config_key_t *k = &config_table[i];
        char rule[160] = "";

        sg_config_env_name(k->key, envname, sizeof(envname));
        if (k->type == SG_CONFIG_INT)
            snprintf(rule, sizeof(rule), "%lld..%lld", (long long)k->min, (long long)k->max);
        else if (k->type == SG_CONFIG_ENUM) {
            /* A bare '|' would split the Markdown cell. */
            size_t n = (size_t)snprintf(rule, sizeof(rule), "one of ");
            for (const char *c = k->choices; *c && n + 3 < sizeof(rule); c++)
                n += (size_t)snprintf(rule + n, sizeof(rule) - n, *c == '|' ? ", " : "%c", *c);
        } else if (k->type == SG_CONFIG_STR)
            snprintf(rule, sizeof(rule),
                     (k->flags & SG_CONFIG_EMPTY_OK) ? "may be empty" : "non-empty");
        else if (k->type == SG_CONFIG_RATIO)
            snprintf(rule, sizeof(rule), "0..1");
        fprintf(out, "| `%s` | `%s` | %s | %s | %s | %s%s%s |\n", k->key, envname, type_name(k),
                k->def ? (*k->def ? k->def : "(empty)") : "(required)", rule, k->doc,
                (k->flags & SG_CONFIG_SECRET) ? " Secret." : "",
                (k->flags & SG_CONFIG_RELOADABLE) ? " Reloadable." : "");
    }
}

void sg_config_write_sample(FILE *out)
{
    char envname[128];

    fprintf(out,
            "# sagad sample configuration (`--config FILE` or SAGAD_CONFIG).\n"
            "#\n"
            "# Generated from the config table in lib/infra/sg_config.c by `make docs`; do not "
            "edit.\n"
            "# Every line is commented out and shows the default: copy the file and\n"
            "# uncomment what you change.  SAGAD_* environment variables win over the\n"
            "# file.  Reference: docs/CONFIGURATION.md.\n");
    for (size_t i = 0; i < CONFIG_NKEYS; i++) {
        const sg_config_key_t *k = &config_table[i];

        sg_config_env_name(k->key, envname, sizeof(envname));
        fprintf(out, "\n# %s\n# %s", k->doc, type_name(k));
        if (k->type == SG_CONFIG_INT)
            fprintf(out, ", %lld..%lld", (long long)k->min, (long long)k->max);
        else if (k->type == SG_CONFIG_ENUM)
            fprintf(out, ", one of %s", k->choices);
        else if (k->type == SG_CONFIG_RATIO)
            fprintf(out, ", 0..1");
        fprintf(out, "%s%s%s; environment %s\n", k->def ? "" : ", required",
                (k->flags & SG_CONFIG_SECRET) ? ", secret" : "",
                (k->flags & SG_CONFIG_RELOADABLE) ? ", reloadable" : "", envname);
        fprintf(out, "#%s =%s%s\n", k->key, k->def ? " " : "", k->def ? k->def : "");
    }
    fprintf(out, "\n# Any librdkafka property, prefixed with kafka. (environment SAGAD_KAFKA_*,\n"
                 "# `__` for a literal `_`).  Every binary that talks to Kafka needs the\n"
                 "# bootstrap servers; SASL/TLS settings go here too (passwords are masked).\n"
                 "#kafka.bootstrap.servers = localhost:9092\n");
}
