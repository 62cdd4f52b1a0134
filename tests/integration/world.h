/* The world of an end-to-end test of the real binaries (shared by
 * test_worker.c and test_dlq.c): its own database, topics, consumer group
 * and tool registry; a worker and a relay started as processes; readers
 * of the events and DLQ topics; helpers to query the tables and to wait
 * (bounded) for a state.  A suite uses .init = world_setup, .fini =
 * world_teardown. */
#ifndef SAGAD_TEST_WORLD_H
#define SAGAD_TEST_WORLD_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../support/sg_test.h"
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_pg.h"

#define WAIT_S 60.0 /* longest wait for anything a test expects to happen */

/* Tools every test's registry has; a test may add its own. */
#define BASE_TOOLS                                                                                 \
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

typedef sgt_bg_t proc_t;

extern const char *const run_args[];

/* Sends sig (0: none), then waits for the exit; its exit code. */
int proc_join(proc_t *pr, int sig);

/* ---- messages read from a topic ------------------------------------------ */

typedef struct msg_s {
    sg_json_t *doc; /* NULL when the payload is not JSON */
    char *raw;      /* the payload's bytes, NUL added */
    size_t len;
    char key[160];
    char code[96]; /* sagad-error-code header, "" when absent */
    int32_t partition;
    int64_t offset;
} msg_t;

typedef struct reader_s {
    sg_kafka_t *c;
    msg_t *v;
    size_t n, cap;
} reader_t;

void reader_open(reader_t *r, const char *topic);
void reader_close(reader_t *r);
/* Appends what arrives within ms. */
void reader_poll(reader_t *r, int ms);
/* Reads until at least want messages arrived (bounded by WAIT_S). */
void reader_wait_count(reader_t *r, size_t want);
const char *jstr(const sg_json_t *doc, const char *key);
long long jint(const sg_json_t *doc, const char *key);

/* ---- the test's world ---------------------------------------------------- */

#define MAX_ENV 32

struct world_s {
    char db[128], dsn[512], dir[64], registry[128];
    char topic_cmd[128], topic_ev[128], topic_dlq[128], group[128];
    char envbuf[MAX_ENV][640];
    const char *env[MAX_ENV + 1];
    size_t nenv;
    proc_t worker, relay;
    sg_pg_t *pg;
    sg_kafka_t *producer;
    reader_t events;
};
extern struct world_s T;

void env_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs `sagad-worker args...` to completion with the test's environment. */
void worker_cli(const char *const *args);
void world_setup(void);
void world_teardown(void);
/* Writes the registry (BASE_TOOLS plus extra_tools, members of "tools"),
 * creates the topics, and starts a relay and a worker; extra_env entries
 * ("KEY=value", NULL-terminated) are added to both. */
void pair_start(const char *extra_tools, int partitions, const char *const *extra_env);
/* SIGTERM to both: each drains and exits 0. */
void pair_stop(void);
/* Fails at once, with its log, when the worker died under a test that
 * waits for it to do something. */
void expect_worker_alive(void);

/* ---- producing ----------------------------------------------------------- */

void produce(const char *topic, const char *key, const void *payload, size_t len);
/* Submits saga.start for saga_id with steps (a JSON array's text). */
void submit(const char *saga_id, const char *steps);

/* ---- PostgreSQL ---------------------------------------------------------- */

/* The first cell as an integer (-1 for NULL).  Test-made ids only are
 * formatted into statements. */
#define q_int(...) sgt_query_intf(T.pg, __VA_ARGS__)
/* The first cell as text into out ("(null)" for NULL, "" for no row). */
const char *q_text(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* completed, compensated or failed. */
bool terminal_status(const char *status);
/* Polls the sagas table until saga_id has status (bounded). */
void wait_status(const char *saga_id, const char *status);
/* Polls until the query's integer is want (bounded). */
void wait_int(long long want, const char *sql);

/* ---- events -------------------------------------------------------------- */

const msg_t *event_find(const char *saga_id, const char *type);
const sg_json_t *event_wait(const char *saga_id, const char *type);
size_t saga_events(const char *saga_id, const sg_json_t **out, size_t max);
size_t expect_events(const char *saga_id, const sg_json_t **out, ...);
const sg_json_t *run_health(const sg_json_t *ev);

#endif
