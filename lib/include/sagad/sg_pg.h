/* sg_pg: the only door to libpq.
 *
 * Connections retry with backoff, statements are always parameterised, and
 * every failure is mapped from its SQLSTATE to an error class once, here:
 * lost connections, serialization failures and deadlocks are transient,
 * constraint and data errors permanent. */
#ifndef SAGAD_PG_H
#define SAGAD_PG_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_backoff.h"
#include "sagad/sg_config.h"
#include "sagad/sg_err.h"

typedef struct sg_pg_s sg_pg_t;
typedef struct pg_result sg_pg_res_t; /* a PGresult; read it with sg_pg_res_* */

/* What a binary's database role is for (docs/OPERATIONS.md, "Database
 * roles"): the worker and relay need DML on the tables they touch, dlq-tool
 * reads and changes the ledger only through the sagad_dlq_* functions, and
 * `migrate` owns the schema. */
typedef enum sg_pg_role_e {
    SG_PG_ROLE_RUNTIME,
    SG_PG_ROLE_OPERATOR,
    SG_PG_ROLE_OWNER,
} sg_pg_role_t;

typedef struct sg_pg_opts_s {
    const char *dsn;              /* borrowed for the life of the connection */
    const char *application_name; /* shown in pg_stat_activity */
    int connect_timeout_ms;
    int connect_attempts; /* 0: retry until *run drops */
    sg_backoff_t retry;
    volatile sig_atomic_t *run; /* NULL, or a flag that stops retrying when 0 */
    /* NULL, or called about every 50 ms while a connect waits out its
     * backoff: the long-running binaries pass sg_health_beat, since such a
     * wait is not a stall (sg_pg calls nothing above it). */
    void (*waiting)(void);
    const char *session_sql; /* NULL, or run on every new session (SET ...) */
    /* Every new session reads what its role may do; the first one of the
     * process logs it ("database role").  With strict_roles (pg.strict_roles)
     * a role that may do more than `role` needs is refused
     * (runtime.role.too_powerful, permanent). */
    sg_pg_role_t role;
    bool strict_roles;
} sg_pg_opts_t;

/* Fills opts from the pg.* keys of cfg.  cfg must outlive the opts. */
void sg_pg_opts_from_config(sg_pg_opts_t *opts, const sg_config_t *cfg, const char *appname);

/* Connects, retrying transient failures with backoff as opts say.  Returns
 * NULL with err set when attempts run out or the failure is permanent (bad
 * password, unknown database).  Error text never contains the password. */
sg_pg_t *sg_pg_connect(const sg_pg_opts_t *opts, sg_err_t *err) __attribute__((warn_unused_result));

/* Closes the connection; NULL is a no-op. */
void sg_pg_destroy(sg_pg_t *pg);

/* True while the connection is usable. */
bool sg_pg_ok(const sg_pg_t *pg);

/* Drops and re-opens the connection with the original options. */
int sg_pg_reconnect(sg_pg_t *pg, sg_err_t *err) __attribute__((warn_unused_result));

/* Runs one parameterised statement (text parameters, NULL for SQL NULL).
 * On success returns 0 and, if res is not NULL, hands the result to the
 * caller (free with sg_pg_res_destroy); on failure returns -1, sets err
 * with the class of the SQLSTATE and leaves *res NULL. */
/* An integer as the text of a statement parameter, written into a buffer
 * that lives until the end of the enclosing block (a compound literal), so
 * a parameter list can be written where it is used:
 *     const char *p[] = {group, SG_PG_INT(partition), SG_PG_INT(epoch)}; */
#define SG_PG_INT(v) sg_pg_int_text((char[24]){0}, (long long)(v))
const char *sg_pg_int_text(char buf[24], long long v);

int sg_pg_exec(sg_pg_t *pg, const char *sql, int nparams, const char *const *params,
               sg_pg_res_t **res, sg_err_t *err) __attribute__((warn_unused_result));

/* sg_pg_exec for a statement run again and again (a loop's few fixed
 * statements): prepared on its first use in this session and executed by
 * name after, so PostgreSQL parses it once (and plans it once too, unless
 * the session sets plan_cache_mode).  SQL built at run time belongs in
 * sg_pg_exec (the cache is bounded; past it this is sg_pg_exec).  Not
 * inside a pipeline.  A statement a migration invalidated is prepared
 * again; one the server no longer knows (the session was reset behind
 * our back) fails with "pg.session_reset": start a new session. */
int sg_pg_exec_cached(sg_pg_t *pg, const char *sql, int nparams, const char *const *params,
                      sg_pg_res_t **res, sg_err_t *err) __attribute__((warn_unused_result));

/* Runs a script of several statements (simple protocol, no parameters),
 * as migrations need.  Inside a transaction when the caller opened one. */
int sg_pg_exec_script(sg_pg_t *pg, const char *sql, sg_err_t *err)
    __attribute__((warn_unused_result));

int sg_pg_begin(sg_pg_t *pg, sg_err_t *err) __attribute__((warn_unused_result));
int sg_pg_commit(sg_pg_t *pg, sg_err_t *err) __attribute__((warn_unused_result));
/* Rolls back; failure is logged, never returned: a broken connection has
 * rolled back already. */
void sg_pg_rollback(sg_pg_t *pg);

size_t sg_pg_res_rows(const sg_pg_res_t *res);
/* The text of a cell, or NULL for SQL NULL or an out-of-range cell. */
const char *sg_pg_res_get(const sg_pg_res_t *res, size_t row, int col);
/* A cell as an integer; def for NULL or non-numeric text. */
int64_t sg_pg_res_int(const sg_pg_res_t *res, size_t row, int col, int64_t def);
/* A bytea cell (text format) decoded into a malloc'd buffer the caller
 * frees; NULL for SQL NULL. */
unsigned char *sg_pg_res_bytea(const sg_pg_res_t *res, size_t row, int col, size_t *len);
/* Rows affected by an INSERT/UPDATE/DELETE (PQcmdTuples), 0 otherwise. */
int64_t sg_pg_res_affected(const sg_pg_res_t *res);
void sg_pg_res_destroy(sg_pg_res_t *res);

/* Pipelining: sends many statements without waiting for each answer, so
 * a transaction of many small statements costs one round trip.
 *
 *   sg_pg_pipe_begin(pg, &err);
 *   sg_pg_pipe_send(pg, "BEGIN", 0, NULL, NULL);
 *   sg_pg_pipe_send(pg, "SELECT ...", n, params, &res);   (res kept)
 *   sg_pg_pipe_end(pg, &err);                              (one sync)
 *
 * pipe_send never fails by itself: a failure to send is reported by
 * pipe_end.  pipe_end reads every result; a statement's rows land in its
 * slot (NULL slot: discarded) and on failure it returns -1 with the first
 * error, every slot NULL.  After a failure inside BEGIN..COMMIT the
 * transaction is aborted: call sg_pg_rollback(). */
int sg_pg_pipe_begin(sg_pg_t *pg, sg_err_t *err) __attribute__((warn_unused_result));
void sg_pg_pipe_send(sg_pg_t *pg, const char *sql, int nparams, const char *const *params,
                     sg_pg_res_t **slot);
int sg_pg_pipe_end(sg_pg_t *pg, sg_err_t *err) __attribute__((warn_unused_result));
/* pipe_end in two halves, for a caller with other work to do while
 * PostgreSQL runs the statements: pipe_sync sends them all with the sync
 * (-1 with err when that failed; collect reports it again), pipe_collect
 * later reads the answers exactly as pipe_end does.  Between the two the
 * connection takes nothing else. */
int sg_pg_pipe_sync(sg_pg_t *pg, sg_err_t *err) __attribute__((warn_unused_result));
int sg_pg_pipe_collect(sg_pg_t *pg, sg_err_t *err) __attribute__((warn_unused_result));
/* Reads what answers have come, without waiting: true when all have (a
 * pipe_collect now would not wait), false while some are still due. */
bool sg_pg_pipe_answered(sg_pg_t *pg);
/* The connection's socket, to wait for answers with poll(); -1 if none. */
int sg_pg_socket(const sg_pg_t *pg);

/* A growable text buffer (for array literals and statement text). */
typedef struct sg_pg_buf_s {
    char *data;
    size_t len, cap;
} sg_pg_buf_t;
void sg_pg_buf_put(sg_pg_buf_t *buf, const char *s, size_t n);
void sg_pg_buf_putc(sg_pg_buf_t *buf, char c);
void sg_pg_buf_puts(sg_pg_buf_t *buf, const char *s);
void sg_pg_buf_reset(sg_pg_buf_t *buf);
void sg_pg_buf_free(sg_pg_buf_t *buf);

/* Appends a PostgreSQL array literal of items ({"a","b",NULL}) to buf,
 * quoting every element; a NULL item is SQL NULL.  For = ANY($1::text[])
 * and unnest() parameters. */
void sg_pg_array_literal(sg_pg_buf_t *buf, const char *const *items, size_t n);
/* One element of such a literal appended to buf: "item" quoted and
 * escaped, or NULL for NULL (the caller writes the braces and commas). */
void sg_pg_array_item(sg_pg_buf_t *buf, const char *item);

/* LISTEN on channel (an identifier, not quoted by us). */
int sg_pg_listen(sg_pg_t *pg, const char *channel, sg_err_t *err)
    __attribute__((warn_unused_result));

/* Waits up to timeout_ms for a notification on this connection.  Returns
 * 1 when at least one arrived (all pending ones are consumed), 0 on
 * timeout, -1 with err when the connection broke.  When mark is given,
 * *marked is set (never cleared) if one of them carried it as payload. */
int sg_pg_wait_notify(sg_pg_t *pg, int timeout_ms, const char *mark, bool *marked, sg_err_t *err);
/* The same for the notifications libpq has already read (while results
 * came in), with no I/O: for a loop too busy to wait.  Returns 1 when
 * there was one. */
int sg_pg_notified(sg_pg_t *pg, const char *mark, bool *marked);

/* Maps a SQLSTATE (may be NULL) and whether the connection broke to an
 * error class and a stable code (pg.connection, pg.serialization,
 * pg.unavailable, pg.lock, pg.constraint, pg.data, pg.query).  Pure. */
sg_errclass_t sg_pg_classify(const char *sqlstate, bool conn_bad, const char **code);

#endif
