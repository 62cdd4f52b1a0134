/* The world of a sagad-worker end-to-end test, shared by the suites that
 * run the real worker and relay binaries (test_worker.c, test_adapters.c):
 * per test its own database, topics (commands, internal, events, dlq),
 * consumer group and tool registry; sagas go in as saga.start messages on
 * the commands topic, and what a producer relies on is read back from the
 * events topic and the tables.
 *
 * A suite uses it as TestSuite(x, .init = sgw_setup, .fini = sgw_teardown). */
#ifndef SAGAD_WORKER_ENV_H
#define SAGAD_WORKER_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_pg.h"
#include "sg_test.h"

#define SGW_WAIT_S 60.0 /* longest wait for anything a test expects to happen */

/* Tools every test's registry has; a test may add its own. */
#define SGW_BASE_TOOLS                                                                             \
    "\"noop\": {\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": \"read\"},"       \
    "\"echo\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "                 \
    "\"idempotent\"},"                                                                             \
    "\"ledger\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "             \
    "\"idempotent\"},"                                                                             \
    "\"ledger.reversible\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "  \
    "\"reversible\", \"compensation\": \"ledger\"},"                                               \
    "\"fail\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "                 \
    "\"idempotent\"},"                                                                             \
    "\"sleep\": {\"adapter\": \"builtin\", \"target\": \"sleep\", \"side_effect\": \"read\", "     \
    "\"timeout_ms\": 10000},"                                                                      \
    "\"email.send\": {\"adapter\": \"builtin\", \"target\": \"noop\", \"side_effect\": "           \
    "\"irreversible\"},"                                                                           \
    "\"inventory.reserve\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "    \
    "\"idempotent\", \"args\": {\"type\": \"object\", \"required\": [\"sku\", \"qty\"], "          \
    "\"properties\": {\"sku\": {\"type\": \"string\", \"minLength\": 1}, \"qty\": {\"type\": "     \
    "\"integer\", \"minimum\": 1}}}}"

typedef struct sgw_msg_s {
    sg_json_t *doc; /* NULL when the payload is not JSON */
    char *raw;      /* the payload's bytes, NUL added */
    size_t len;
    char key[160];
    char code[96];      /* sagad-error-code header, "" when absent */
    sg_json_t *headers; /* every header, name -> value as text */
    int32_t partition;
    int64_t offset;
} sgw_msg_t;

typedef struct sgw_reader_s {
    sg_kafka_t *c;
    sgw_msg_t *v;
    size_t n, cap;
} sgw_reader_t;

#define SGW_MAX_ENV   32
#define SGW_MAX_PROCS 8

typedef struct sgw_world_s {
    /* dsn: the owner's (migrate, the test's own statements through pg);
     * the worker and relay of env run as the runtime role (rt_dsn), and
     * dlq-tool is run with op_env (the operator role), as in production. */
    char db[128], dsn[512], dir[64], registry[128];
    char rt_dsn[600], op_dsn[600], op_env[640];
    char topic_cmd[128], topic_int[128], topic_ev[128], topic_dlq[128], group[128];
    char keyring[128];
    struct {
        const char *name;
        unsigned char priv[32];
        char path[160];
    } principals[7];
    char envbuf[SGW_MAX_ENV][640];
    const char *env[SGW_MAX_ENV + 1];
    size_t nenv;
    sgt_bg_t worker, relay;
    char wal_slot[96]; /* the WAL source's slot (sgw_relay_wal_start), dropped by teardown */
    sgt_bg_t procs[SGW_MAX_PROCS]; /* more workers and relays (sgw_proc_start) */
    int nprocs;
    sg_pg_t *pg;
    sg_kafka_t *producer;
    sgw_reader_t events;
} sgw_world_t;

extern sgw_world_t sgw;

/* The first cell as an integer (-1 for NULL).  Test-made ids only are
 * formatted into statements. */
#define sgw_q_int(...) sgt_query_intf(sgw.pg, __VA_ARGS__)

extern const char *const sgw_run_args[]; /* {"run", NULL} */

/* Fresh database (migrated), topic and group names, registry path, the
 * environment every process of the test gets; and the reverse. */
void sgw_setup(void);
void sgw_teardown(void);

/* Adds "KEY=value" to the environment of processes started later. */
void sgw_env_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs `sagad-worker args...` to completion; the test fails unless it exits 0. */
void sgw_worker_cli(const char *const *args);

/* Writes the registry (SGW_BASE_TOOLS plus extra_tools, members of
 * "tools"), creates the topics, opens the producer and the events reader;
 * extra_env ("KEY=value", NULL-terminated) is added to the environment of
 * every process started later.  Starts no process. */
void sgw_world_start(const char *extra_tools, int partitions, const char *const *extra_env);
/* sgw_world_start, then a relay (sgw.relay) and a worker (sgw.worker);
 * returns once the worker owns every partition of both its topics. */
void sgw_pair_start(const char *extra_tools, int partitions, const char *const *extra_env);
/* Starts sgw.relay with the WAL source (relay.source = wal), as the
 * relay's login (REPLICATION), on a slot of the test's own, which
 * sgw_teardown drops. */
void sgw_relay_wal_start(void);
/* Waits until the partitions of both topics (partitions each) are owned,
 * by the test's only worker.  Its two consumers join the group one after
 * the other: a saga.start read before the internal topic's partitions
 * are assigned would not have its first step chained, which tests of
 * chaining count. */
void sgw_wait_assigned(int partitions);
/* Starts `prog run` in pr with the test's environment plus extra_env
 * (later entries win). */
void sgw_start(sgt_bg_t *pr, const char *prog, const char *const *extra_env);
/* sgw_start into one more process of the world; teardown stops what is
 * still running. */
sgt_bg_t *sgw_proc_start(const char *prog, const char *const *extra_env);
/* A sagad-gateway of a test (test_gateway.c, test_mcp.c, test_console.c). */
#define SGW_GW_USERS_MAX 8
typedef struct sgw_gateway_s {
    char base[64];                    /* SCHEME://127.0.0.1:PORT */
    char token[SGW_GW_USERS_MAX][64]; /* users[i]'s bearer token */
    char users_path[160];             /* its users file */
    sgt_bg_t *proc;
} sgw_gateway_t;
/* After sgw_pair_start: a users file of users[i] with roles[i] (a JSON
 * array of role names), a new token each (`sagad-gateway token new`),
 * then sagad-gateway as sagad_operator signing as the keyring's "gateway",
 * https://console.example an allowed origin, over scheme ("http" or
 * "https", whose certificate more names), with more settings ("KEY=value",
 * NULL-terminated, or NULL; later entries win); returns once /readyz
 * answers 200. */
void sgw_gateway_start(sgw_gateway_t *g, const char *scheme, const char *const *users,
                       const char *const *roles, size_t n, const char *const *more);

/* SIGTERM to both; each must exit 0.  The worker's stderr stays in
 * sgw.worker.err. */
void sgw_pair_stop(void);
/* How long a signalled process may take to exit: the default drain
 * timeout (30 s) plus room for closing its clients on a slow machine. */
#define SGW_STOP_TIMEOUT_S 60
/* Sends sig (0: none), then waits for the exit; its exit code.  After a
 * signal the wait is bounded by SGW_STOP_TIMEOUT_S; past it the process's
 * stacks are printed, it is killed and the test fails. */
int sgw_proc_join(sgt_bg_t *pr, int sig);
/* Fails at once, with its log, when the worker died. */
void sgw_expect_worker_alive(void);

/* Exec gates (tests/fixtures/exec/gate.sh): a call that holds until the
 * test lets it go.  A directory of the gate's own (out: its path); the
 * registry entry of tool name gating in dir (reversible, undone by the
 * ledger), answering once opened, or with fail (an exit status) failing
 * then; the wait for a gate's file (started) while the worker lives; and
 * the file (open) that lets it go. */
void sgw_gate_dir(char *out, size_t size);
void sgw_gate_tool(char *out, size_t size, const char *name, const char *dir, const char *fail);
void sgw_wait_file(const char *dir, const char *name);
void sgw_touch(const char *dir, const char *name);

/* A saga whose step aborts the worker (the crash builtin, with
 * worker.test_allow_crash): restarts the worker after each abort until
 * saga_id is terminal; fails past max_crashes.  Returns the crashes. */
int sgw_crash_until_terminal(const char *saga_id, int max_crashes);

void sgw_produce(const char *topic, const char *key, const void *payload, size_t len);
/* The same, signed (header sagad-auth) by a principal of the test keyring
 * (sgw_setup writes it; SAGAD_SECURITY_KEYRING names it):
 *   shop           submit
 *   agent          submit, approve, cancel
 *   finance:bob    approve, cancel
 *   ann            approve, cancel
 *   support:alice  cancel
 *   limited        approve, of tool noop only
 * ts_skew_s moves the signature's time (0: now). */
void sgw_produce_signed(const char *principal, int64_t ts_skew_s, const char *key,
                        const void *payload, size_t len);
/* The private key file of a test principal, for `sagactl --key`. */
const char *sgw_key_path(const char *principal);
/* An internal command as sagad sends it: through the outbox and the relay,
 * which signs it, onto the internal topic. */
void sgw_send_internal(const char *key, const char *payload);
/* The same onto topic (an older worker wrote its internal commands to the
 * commands topic). */
void sgw_send_internal_to(const char *topic, const char *key, const char *payload);
/* The same with Kafka headers (name, value, value length each). */
void sgw_produce_headers(const char *topic, const char *key, const void *payload, size_t len,
                         const sg_kafka_header_t *headers, size_t nheaders);
/* Submits saga.start for saga_id with steps (a JSON array's text). */
void sgw_submit(const char *saga_id, const char *steps);

/* A consumer of one topic from its start; messages pile up in r->v. */
void sgw_reader_open(sgw_reader_t *r, const char *topic);
void sgw_reader_close(sgw_reader_t *r);
/* Appends what arrives within ms. */
void sgw_reader_poll(sgw_reader_t *r, int ms);
void sgw_reader_wait_count(sgw_reader_t *r, size_t want);
/* Waits until topic holds want messages, read from its start. */
void sgw_wait_topic_count(const char *topic, size_t want);
/* Asserts that the call of step idx is out: its forward attempt started
 * and not finished (why: what that shows). */
void sgw_assert_call_running(int idx, const char *why);

/* Members of a JSON object: "" / -1 when absent. */
const char *sgw_jstr(const sg_json_t *doc, const char *key);
long long sgw_jint(const sg_json_t *doc, const char *key);

/* The first cell as text into out ("(null)" for NULL, "" for no row). */
const char *sgw_q_text(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool sgw_terminal_status(const char *status);
/* Polls until saga_id has status; fails when it ends in another. */
void sgw_wait_status(const char *saga_id, const char *status);
/* Polls until the query's integer is want. */
void sgw_wait_int(long long want, const char *sql);

const sgw_msg_t *sgw_event_find(const char *saga_id, const char *type);
/* Reads the events topic until saga_id's event of that type arrived. */
const sg_json_t *sgw_event_wait(const char *saga_id, const char *type);
/* The saga's own events (seq > 0), in topic order. */
size_t sgw_saga_events(const char *saga_id, const sg_json_t **out, size_t max);
/* Asserts the saga's events are exactly the given types (NULL-terminated)
 * with seq 1..N in that order; returns them through out (max 64). */
size_t sgw_expect_events(const char *saga_id, const sg_json_t **out, ...);
const sg_json_t *sgw_run_health(const sg_json_t *ev);

/* checkout-svc (examples/checkout) on a free port with args (e.g.
 * "--fault", SPEC, ...; NULL-terminated); its base URL into base. */
void sgw_checkout_start(sgt_bg_t *svc, const char *const *args, char *base, size_t base_size);
/* SIGTERM; it must exit 0. */
void sgw_checkout_stop(sgt_bg_t *svc);
/* The service's request log (GET /_admin/requests?path=path): the
 * "requests" array, oldest first, in a document the caller destroys
 * (*doc). */
const sg_json_t *sgw_checkout_requests(const char *base, const char *path, sg_json_t **doc);
/* The effects the service applied on path (GET /_admin/stats: effects). */
long long sgw_checkout_effects(const char *base, const char *path);

#endif
