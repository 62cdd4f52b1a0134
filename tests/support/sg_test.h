/* Helpers shared by the Criterion tests (no tests in here). */
#ifndef SAGAD_TEST_H
#define SAGAD_TEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* The URL of the local PostgreSQL (SAGAD_TEST_PG_URL) or Kafka bootstrap
 * (SAGAD_TEST_KAFKA); the test fails when tests/run.sh did not set it. */
const char *sgt_pg_url(void);
const char *sgt_kafka(void);

/* The directory of the SASL/SCRAM broker's client configs
 * (SAGAD_TEST_KAFKA_ACL): one PRINCIPAL.properties a principal, written by
 * tests/run.sh with `deploy/local/kafka.sh client-config`; the test fails
 * when it is not set. */
const char *sgt_kafka_acl_dir(void);

/* Directory of the binaries under test (SAGAD_TEST_BIN_DIR, default bin). */
const char *sgt_bin_dir(void);

/* A name unique to this process and call: prefix_<pid>_<n>_<nanos>. */
void sgt_unique(char *out, size_t out_size, const char *prefix);

/* Creates a fresh database; writes its name and DSN.  Each test that
 * migrates gets its own so tests never see each other's rows. */
void sgt_db_create(char *name, size_t name_size, char *dsn, size_t dsn_size);
void sgt_db_drop(const char *name);

/* Drops the logical replication slot `slot` (if it exists) as the login of
 * role_dsn, which may (the relay's).  A relay that just exited leaves its
 * walsender on its way out for a moment, and a slot cannot be dropped while
 * one streams from it: that walsender is ended and the drop retried for up
 * to 10 s.  Returns 0, or -1 with the last error in err (err_size bytes). */
int sgt_slot_drop(const char *role_dsn, const char *slot, char *err, size_t err_size);

/* dsn (of sgt_db_create) with the login of a role of deploy/local/pg.sh:
 * "runtime" (SAGAD_TEST_PG_URL_RUNTIME), "operator"
 * (SAGAD_TEST_PG_URL_OPERATOR), "reader" (SAGAD_TEST_PG_URL_READER) or
 * "stranger", a login of no sagad role (SAGAD_TEST_PG_URL_STRANGER), or
 * "relay", the WAL relay's: runtime and REPLICATION (SAGAD_TEST_PG_URL_RELAY); the
 * test fails when the variable is unset. */
void sgt_role_dsn(char *out, size_t out_size, const char *dsn, const char *role);

/* A connection to dsn (the test fails if it cannot be made); free it with
 * sg_pg_destroy. */
struct sg_pg_s *sgt_db_connect(const char *dsn);

/* The first cell of sql's result as an integer (-1 for NULL). */
long long sgt_query_int(struct sg_pg_s *pg, const char *sql);

typedef struct sgt_proc_s {
    int pid;
    int out_fd;
    int err_fd;
} sgt_proc_t;

/* Starts bin_dir/prog with args (NULL-terminated) and exactly the
 * environment env (NULL-terminated, PATH added), capturing output. */
void sgt_spawn(sgt_proc_t *p, const char *prog, const char *const *args, const char *const *env);

/* Waits for p; returns its exit code (128+signal when killed) and the
 * captured output (malloc'd, caller frees; NULL pointers skip).  A child
 * still running after 90 s is taken for hung: its threads' stacks go to
 * stderr and it is killed (exit code 137). */
int sgt_wait(sgt_proc_t *p, char **out, char **err);

/* sgt_spawn + sgt_wait. */
int sgt_run(const char *prog, const char *const *args, const char *const *env, char **out,
            char **err);

/* A process left running in the background while the test goes on.  A
 * thread drains its output all the time (a chatty child never blocks on a
 * full pipe) and reaps it. */
typedef struct sgt_bg_s {
    sgt_proc_t p;
    pthread_t reaper;
    atomic_bool done; /* exited and reaped */
    bool started, joined;
    int rc;
    char *out, *err; /* complete once joined */
} sgt_bg_t;

/* Starts bin_dir/prog with args and env as sgt_spawn does.  bg is zeroed,
 * or joined (a restart). */
void sgt_bg_start(sgt_bg_t *bg, const char *prog, const char *const *args, const char *const *env);
/* sgt_bg_start that also waits up to timeout_s for the first line of the
 * process's stdout (an "I am listening on ..." line) and returns it
 * without the newline in line (truncated to line_size).  Returns false
 * when the process exited or stayed silent; the rest of stdout goes to
 * bg->out as usual. */
bool sgt_bg_start_line(sgt_bg_t *bg, const char *prog, const char *const *args,
                       const char *const *env, char *line, size_t line_size, double timeout_s);
bool sgt_bg_done(sgt_bg_t *bg);
/* Sends sig unless the process is gone already. */
void sgt_bg_signal(sgt_bg_t *bg, int sig);
/* Waits for the exit: its code (128+signal when killed).  timeout_s < 0
 * waits for ever; 0 kills it now; past a timeout its threads' stacks go to
 * stderr (gdb), then it is killed and -1 returned.
 * Joining a joined process returns its code again. */
int sgt_bg_join(sgt_bg_t *bg, double timeout_s);
/* The end of its stderr, for failure messages. */
const char *sgt_bg_tail(const sgt_bg_t *bg);
/* Frees the captured output (the process must be joined). */
void sgt_bg_free(sgt_bg_t *bg);

/* A TCP port on 127.0.0.1 free at the time of the call (the kernel's
 * pick), for a process the test must reach at a known port. */
int sgt_free_port(void);

/* Seconds on a monotonic clock. */
double sgt_now_s(void);

/* sgt_query_int with a printf-style statement (test-made values only). */
long long sgt_query_intf(struct sg_pg_s *pg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* An HTTP response: status 0 when no answer came, the error text in body
 * then; headers is the raw header block.  Both are NUL-terminated. */
typedef struct sgt_res_s {
    long status;
    char *body;
    size_t len;
    char *headers;
    size_t hlen;
} sgt_res_t;

/* One HTTP request with the given request headers ("Name: value",
 * NULL-terminated, or NULL) and body (or NULL).  It asserts nothing, so
 * helper threads may call it; free the response with sgt_res_free. */
sgt_res_t sgt_request(const char *method, const char *url, const char *const *headers,
                      const char *body);
void sgt_res_free(sgt_res_t *r);
/* The CA file https requests trust from now on (NULL: the system's). */
void sgt_request_ca(const char *path);

/* The value of response header name (any case; a static buffer), or NULL. */
const char *sgt_res_header(const sgt_res_t *r, const char *name);

/* sgt_request with a JSON body (or NULL): the response body (malloc'd,
 * caller frees) and its status.  The test fails when no answer comes. */
char *sgt_http(const char *method, const char *url, const char *body, long *status);

#endif
