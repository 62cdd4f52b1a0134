/* sagad-gateway internals (docs/GATEWAY.md): one HTTP front door for
 * producers, approvers, on-call and agents.
 *
 *   gw_server.c  the routes, the request's life: authenticate, rate
 *                limit, answer, count (sg_httpd of sg_http.h)
 *   gw_auth.c    the users file, bearer tokens, trusted proxies, roles,
 *                per-principal token buckets
 *   gw_pool.c    PostgreSQL: a pool for queries and one LISTEN session
 *                that wakes long polls when a worker commits
 *   gw_produce.c Kafka: one producer, delivery awaited per request;
 *                the signature of the users' messages (delegate key)
 *   gw_sagas.c   /v1/sagas: submit, read, wait, list, attempts;
 *                gw_controls.c cancel, approve, reject; gw_events.c follow
 *   gw_ops.c     /v1/approvals, /v1/dead-letters, /v1/tools, /v1/errors
 *   gw_mcp*.c    MCP for agents: POST /mcp and `mcp --stdio` (gw_mcp.h)
 *   gw_console.c the operator console: its files, sign-in, the session
 *                cookie and its CSRF, Origin and read-only rules
 *                (gw_console.h, docs/CONSOLE.md); gw_session.c its
 *                session table
 *
 * Stateless: any number of replicas behind one Service.  It reads
 * PostgreSQL as sagad_operator and writes to Kafka only what a producer
 * or a signed control may write (docs/ARCHITECTURE.md, "Trust
 * boundary"). */
#ifndef SAGAD_GW_H
#define SAGAD_GW_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_check.h"
#include "sagad/sg_cli.h"
#include "sagad/sg_config.h"
#include "sagad/sg_http.h"
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_registry.h"
#include "sagad/sg_trust.h"

/* ---- who may do what ----------------------------------------------------- */

enum {
    GW_P_READ_ALL = 1u << 0,   /* any saga, list, approvals' packets */
    GW_P_READ_OWN = 1u << 1,   /* the sagas it submitted */
    GW_P_SUBMIT = 1u << 2,     /* POST /v1/sagas */
    GW_P_CANCEL_OWN = 1u << 3, /* cancel a saga it submitted */
    GW_P_CANCEL_ALL = 1u << 4, /* cancel any saga */
    GW_P_APPROVE = 1u << 5,    /* approve / reject (approve_tools) */
    GW_P_DLQ_READ = 1u << 6,   /* dead letters: metadata, masked payloads */
    GW_P_DLQ_WRITE = 1u << 7,  /* replay, discard */
};

typedef struct gw_user_s {
    char *name;
    unsigned perms;
    char **approve_tools; /* NULL: any tool */
    size_t napprove_tools;
    unsigned char (*tokens)[32]; /* SHA-256 of each bearer token */
    size_t ntokens;
} gw_user_t;

typedef struct gw_users_s {
    gw_user_t *v;
    size_t n;
} gw_users_t;

/* Loads the users file (schemas/gateway-users.schema.json); NULL with why
 * naming the path, the JSON path and the rule. */
gw_users_t *gw_users_load(const char *path, char *why, size_t why_size);
gw_users_t *gw_users_parse(const char *text, size_t len, const char *what, char *why,
                           size_t why_size);
void gw_users_free(gw_users_t *u);
bool gw_user_may_approve(const gw_user_t *u, const char *tool);

/* A fresh bearer token ("sgw_" and 43 characters of base64url) and the
 * text of its hash as the users file holds it ("sha256:<64 hex>"). */
void gw_token_new(char token[48], char hash[72]);
/* The hash text of a token (as above). */
void gw_token_hash_text(const char *token, char hash[72]);
/* The user holding a bearer token, NULL when no one does (every stored
 * hash is compared, in constant time). */
const gw_user_t *gw_user_by_token(const gw_users_t *users, const char *token);

/* ---- the process ----------------------------------------------------------- */

typedef struct gw_pool_s gw_pool_t;
typedef struct gw_producer_s gw_producer_t;
typedef struct gw_limiter_s gw_limiter_t;
typedef struct gw_sessions_s gw_sessions_t;

typedef struct gw_s {
    const sg_config_t *cfg;
    gw_users_t *users;
    sg_registry_t *reg;
    sg_signing_key_t key; /* the delegate's key */
    void *signer;         /* key.priv as OpenSSL holds it, made once */
    bool have_key;
    char **proxies; /* trusted proxy addresses */
    size_t nproxies;
    char **origins; /* allowed Origin values */
    size_t norigins;
    gw_pool_t *pool;
    gw_producer_t *prod;
    gw_limiter_t *limiter;
    sg_json_limits_t lim;
    int64_t wait_max_ms;
    gw_sessions_t *sessions; /* the console's; NULL when console.enabled is false */
    bool console_read_only;
    bool tls;
} gw_t;

/* Who is asking: the user (NULL when not authenticated) and how. */
typedef struct gw_caller_s {
    const gw_user_t *user;
    const char *via; /* "token", "proxy" or "session" (the console's cookie) */
    char csrf[48];   /* a session's CSRF token, "" otherwise */
} gw_caller_t;

/* Authenticates the request: Authorization: Bearer, a trusted proxy's
 * header, or the console's session cookie (gw_console_session).  0 with
 * caller set; -1 with status (401) and detail set. */
int gw_authenticate(const gw_t *gw, sg_http_req_t *req, gw_caller_t *caller, char *detail,
                    size_t detail_size);

/* A token bucket per principal: true when the request may go on, else
 * *retry_after_s says when. */
gw_limiter_t *gw_limiter_new(double per_s, double burst);
void gw_limiter_free(gw_limiter_t *l);
bool gw_limiter_take(gw_limiter_t *l, const char *who, int *retry_after_s);

/* ---- PostgreSQL ------------------------------------------------------------ */

/* Opens size sessions and the LISTEN session; NULL with why. */
gw_pool_t *gw_pool_new(const sg_config_t *cfg, int size, char *why, size_t why_size);
void gw_pool_free(gw_pool_t *p);
/* Takes a session (waits for one); give it back with gw_pool_put.  A
 * session found broken is reconnected before it is handed out; NULL when
 * PostgreSQL cannot be reached (err set). */
sg_pg_t *gw_pool_get(gw_pool_t *p, sg_err_t *err);
void gw_pool_put(gw_pool_t *p, sg_pg_t *pg);
/* A request waiting for a saga to move registers the seq it saw (-1: no
 * such saga yet), looks at the saga once more (gw_saga_seq: what moved
 * before the watch was registered), then waits: true once the listener
 * saw the saga's seq differ from seq, false at deadline_ms (sg_run_now_ms
 * clock) or at shutdown.  Remove it in every case. */
typedef struct gw_watch_s {
    char saga_id[136];
    int64_t seq;
    bool fired;
    pthread_cond_t cv;
    struct gw_watch_s *next;
} gw_watch_t;
void gw_watch_add(gw_pool_t *p, gw_watch_t *w, const char *saga_id, int64_t seq);
bool gw_watch_wait(gw_pool_t *p, gw_watch_t *w, uint64_t deadline_ms);
void gw_watch_remove(gw_pool_t *p, gw_watch_t *w);
/* The saga's seq: -1 when there is no such saga, -2 with err set when the
 * query failed. */
int64_t gw_saga_seq(sg_pg_t *pg, const char *saga_id, sg_err_t *err);
/* True when the LISTEN session is up (readiness). */
bool gw_pool_listening(gw_pool_t *p);

/* ---- Kafka ------------------------------------------------------------------ */

gw_producer_t *gw_producer_new(const sg_config_t *cfg, char *why, size_t why_size);
void gw_producer_free(gw_producer_t *p);
/* Produces text to topic.commands keyed by saga_id, signed with the
 * delegate key when sign (sagad-auth), and waits for Kafka's
 * acknowledgement (at most timeout_ms).  -1 with err set. */
int gw_produce(gw_t *gw, const char *saga_id, const char *text, size_t len, bool sign,
               int64_t timeout_ms, sg_err_t *err);
/* The producer's readiness probe: a broker answers. */
bool gw_producer_ready(gw_producer_t *p, char *why, size_t why_size);

/* ---- answers ---------------------------------------------------------------- */

/* An RFC 9457 problem: {type, title, status, detail} plus members of
 * extra (taken; NULL: none), Content-Type application/problem+json. */
void gw_problem(sg_http_answer_t *ans, unsigned status, const char *detail, sg_json_t *extra);
/* A problem of one field: its code (schemas/error_codes.json) and
 * errors [{path, rule}], the rule as the detail. */
void gw_problem_at(sg_http_answer_t *ans, unsigned status, const char *code, const char *path,
                   const char *rule);
/* A JSON answer of doc (taken). */
void gw_json(sg_http_answer_t *ans, unsigned status, sg_json_t *doc);
/* A JSON answer of text (taken, malloc'd). */
void gw_json_text(sg_http_answer_t *ans, unsigned status, char *text);

/* A query failed: 503 with what to do. */
void gw_db_problem(sg_http_answer_t *ans, const sg_err_t *err);

/* A parsed route's parameters (path segments). */
typedef struct gw_route_args_s {
    const char *id;   /* saga or dead letter id */
    const char *step; /* step name or index */
    const char *verb; /* approve | reject */
} gw_route_args_t;

/* A submission's body decoded for user: ids filled in (saga_id from
 * Idempotency-Key ikey, per user, or made up), on_behalf_of set when the
 * gateway signs, and checked with the worker's rules.  0 with sub filled
 * (gw_submission_free); -1 after answering why (400, 422). */
typedef struct gw_submission_s {
    sg_json_t *doc;
    char *text;
    const char *saga_id, *id; /* in doc */
    sg_problems_t p;
} gw_submission_t;
int gw_submission_decode(const gw_t *gw, const char *user, const char *ikey, const char *body,
                         size_t len, gw_submission_t *sub, sg_http_answer_t *ans);
void gw_submission_free(gw_submission_t *sub);

/* The route of method and path: NULL when none (then *path_known says
 * whether another method has it); args point into buf. */
typedef struct gw_route_s gw_route_t;
const gw_route_t *gw_route_find(const char *method, const char *path, char *buf, size_t size,
                                gw_route_args_t *args, bool *path_known);
/* The methods path takes, for Allow ("GET, HEAD, OPTIONS"). */
void gw_route_allow(const char *path, char *out, size_t size);
/* The route's template ("/v1/sagas/{id}"), for metrics and logs. */
const char *gw_route_template(const gw_route_t *route);

/* ---- what the /v1/sagas handlers share (gw_sagas.c) ---------------------- */

/* How long a request waits for Kafka to take what it produces. */
#define GW_PRODUCE_TIMEOUT_MS 10000

/* A saga id as sg_saga_id_ok() takes it; else false after a 400. */
bool gw_saga_id_ok(sg_http_answer_t *ans, const char *id);
/* May c read a saga submitted_by (NULL: unknown) submitted? */
bool gw_may_read(const gw_caller_t *c, const char *submitted_by);
/* The 404 of a saga c may not read or that does not exist (the same
 * answer, so that ids cannot be probed); id cut to 128 bytes, never
 * inside a UTF-8 character. */
void gw_no_saga(sg_http_answer_t *ans, const char *id);
/* A saga as a control or a page of attempts needs it: its submitter and
 * generation, and (step given: a name or an index) the step's index,
 * name, tool and status. */
typedef struct gw_target_s {
    char submitted_by[80], generation[16], status[32];
    char idx[16], name[130], tool[130], step_status[32];
    bool has_submitter, has_step;
} gw_target_t;
/* Fills t for saga_id: 1 found and c may read it, 0 not (or not theirs to
 * read), -1 after answering a PostgreSQL failure. */
int gw_saga_target(gw_t *gw, const gw_caller_t *c, const char *saga_id, const char *step,
                   gw_target_t *t, sg_http_answer_t *ans);
/* "30s", "500ms", "2m" or plain seconds: digits first, no sign or space. */
bool gw_parse_duration_ms(const char *s, int64_t *ms);
/* bytes (at most 16) random bytes as lowercase hex digits and a NUL: out
 * holds 2 * bytes + 1. */
void gw_random_hex(char *out, size_t bytes);

/* The handlers: each answers one route (gw_server.c's table). */
typedef void (*gw_handler_fn)(gw_t *gw, const gw_caller_t *caller, sg_http_req_t *req,
                              const gw_route_args_t *args, sg_http_answer_t *ans);

void gw_sagas_submit(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans);
void gw_sagas_get(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                  sg_http_answer_t *ans);
void gw_sagas_wait(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                   sg_http_answer_t *ans);
void gw_sagas_events(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans);
void gw_sagas_attempts(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                       sg_http_answer_t *ans);
void gw_sagas_list(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                   sg_http_answer_t *ans);
void gw_sagas_cancel(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans);
void gw_sagas_decide(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans);
void gw_ops_approvals(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                      sg_http_answer_t *ans);
void gw_ops_tools(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                  sg_http_answer_t *ans);
void gw_ops_summary(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                    sg_http_answer_t *ans);
void gw_ops_error(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                  sg_http_answer_t *ans);
void gw_ops_dlq_list(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                     sg_http_answer_t *ans);
void gw_ops_dlq_get(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                    sg_http_answer_t *ans);
void gw_ops_dlq_replay(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                       sg_http_answer_t *ans);
void gw_ops_dlq_discard(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req,
                        const gw_route_args_t *a, sg_http_answer_t *ans);

/* POST /mcp: the MCP server's Streamable HTTP transport (gw_mcp_http.c). */
void gw_mcp_http(gw_t *gw, const gw_caller_t *c, sg_http_req_t *req, const gw_route_args_t *a,
                 sg_http_answer_t *ans);

/* Runs the server until SIGTERM; the exit code. */
int gw_serve(sg_cli_t *cli);
/* The gateway's state without its listener (users, key, registry, pool,
 * producer), for `mcp --stdio`: 0, or -1 with why (nothing left open).
 * gw_close frees what gw_open made. */
int gw_open(gw_t *gw, const sg_config_t *cfg, char *why, size_t why_size);
void gw_close(gw_t *gw);

/* Commands (main.c's table). */
int gw_cmd_run(sg_cli_t *cli, int argc, char **argv);
int gw_cmd_token(sg_cli_t *cli, int argc, char **argv);
int gw_cmd_mcp(sg_cli_t *cli, int argc, char **argv);

#endif
