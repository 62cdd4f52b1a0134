#include "sagad/sg_pg.h"

#include <libpq-fe.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_mask.h"

/* Statements sent through a pipeline are prepared once per connection and
 * then executed by name: the parse and plan of the same few statements,
 * run for every saga step, is most of PostgreSQL's work for them.  The
 * cache is keyed by the SQL text and bounded; past the bound a statement
 * is sent unnamed as before, so SQL built at run time cannot grow it. */
#define STMT_CACHE_SLOTS 512 /* power of two, twice STMT_CACHE_MAX */
#define STMT_CACHE_MAX   256

typedef enum stmt_state_e {
    STMT_NONE,    /* not prepared on this connection */
    STMT_PENDING, /* Prepare sent in the pipeline in progress */
    STMT_READY,
} stmt_state_t;

typedef struct stmt_s {
    char *sql; /* NULL: free slot */
    int nparams;
    stmt_state_t state;
    char name[16];
} stmt_t;

struct sg_pg_s {
    PGconn *conn;
    sg_pg_opts_t opts;
    sg_rng_t rng;
    /* Pipeline in progress: statements sent, results not read yet. */
    bool piping;
    bool synced; /* the sync is sent: only sg_pg_pipe_collect() may follow */
    /* Reading the answers (pipe_read()), resumable: statement and slot
     * reached, prepares settled, outcome so far, the sync read. */
    int c_stmt, c_slot, c_prep, c_rc;
    bool c_done;
    sg_err_t c_err;
    bool c_prep_ok[STMT_CACHE_MAX]; /* a pipeline prepares each entry at most once */
    int nsent;
    sg_err_t pipe_err; /* first send failure */
    sg_pg_res_t ***slots;
    int nslots, slots_cap;
    int *slot_stmt; /* statement number of each slot */
    stmt_t stmts[STMT_CACHE_SLOTS];
    int nstmts;
    int renamed; /* names given to entries prepared again (sg_r<n>) */
    /* Prepares sent in the pipeline in progress: statement number and
     * cache entry, in send order. */
    int *prep_stmt, *prep_entry;
    int nprep, prep_cap;
};

void sg_pg_opts_from_config(sg_pg_opts_t *opts, const sg_config_t *cfg, const char *appname)
{
    memset(opts, 0, sizeof(*opts));
    opts->dsn = sg_config_str(cfg, "pg.dsn");
    opts->application_name = appname;
    opts->connect_timeout_ms = (int)sg_config_int(cfg, "pg.connect_timeout_ms");
    opts->connect_attempts = (int)sg_config_int(cfg, "pg.connect_attempts");
    opts->retry.base_ms = (uint64_t)sg_config_int(cfg, "pg.retry_base_ms");
    opts->retry.cap_ms = (uint64_t)sg_config_int(cfg, "pg.retry_cap_ms");
    opts->strict_roles = sg_config_bool(cfg, "pg.strict_roles");
}

sg_errclass_t sg_pg_classify(const char *sqlstate, bool conn_bad, const char **code)
{
    static const struct {
        const char *prefix;
        sg_errclass_t cls;
        const char *code;
    } map[] = {
        {"08", SG_ERRCLASS_TRANSIENT, "pg.connection"}, /* connection exception */
        {"40001", SG_ERRCLASS_TRANSIENT, "pg.serialization"},
        {"40P01", SG_ERRCLASS_TRANSIENT, "pg.serialization"}, /* deadlock */
        {"57P", SG_ERRCLASS_TRANSIENT, "pg.unavailable"},     /* shutdown, cannot connect now */
        {"53", SG_ERRCLASS_TRANSIENT, "pg.unavailable"},      /* insufficient resources */
        {"55P03", SG_ERRCLASS_TRANSIENT, "pg.lock"},          /* lock_not_available */
        {"57014", SG_ERRCLASS_TIMEOUT, "pg.timeout"},         /* statement timeout / cancel */
        {"23", SG_ERRCLASS_PERMANENT, "pg.constraint"},
        {"22", SG_ERRCLASS_PERMANENT, "pg.data"},
        {"SGF01", SG_ERRCLASS_PERMANENT, "pg.fenced"}, /* sagad_fence(): partition lost */
        /* invalid_sql_statement_name: a prepared statement gone (result_error) */
        {"26000", SG_ERRCLASS_TRANSIENT, "pg.session_reset"},
    };
    const char *dummy;

    if (!code)
        code = &dummy;
    if (conn_bad || !sqlstate || !*sqlstate) {
        *code = "pg.connection";
        return SG_ERRCLASS_TRANSIENT;
    }
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strncmp(sqlstate, map[i].prefix, strlen(map[i].prefix)) == 0) {
            *code = map[i].code;
            return map[i].cls;
        }
    }
    *code = "pg.query";
    return SG_ERRCLASS_PERMANENT;
}

static void notice_receiver(void *arg, const PGresult *res)
{
    char msg[1024];
    const char *text = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);

    (void)arg;
    snprintf(msg, sizeof(msg), "postgresql %s: %s", sev ? sev : "NOTICE", text ? text : "");
    sg_log_kv(sev && strcmp(sev, "WARNING") == 0 ? SG_LOG_WARN : SG_LOG_DEBUG, msg, NULL);
}

/* libpq error text, with any password masked and the trailing newline
 * trimmed. */
static void conn_error(sg_err_t *err, PGconn *conn, const char *what)
{
    char buf[400];
    size_t n;
    const char *code;
    sg_errclass_t cls;

    /* libpq quotes a malformed URI whole, password included. */
    sg_mask(conn ? PQerrorMessage(conn) : "out of memory", buf, sizeof(buf));
    n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    cls = sg_pg_classify(NULL, true, &code);
    /* Authentication and "database does not exist" will not heal by retrying. */
    if (strstr(buf, "password authentication failed") || strstr(buf, "does not exist") ||
        strstr(buf, "no pg_hba.conf entry") || strstr(buf, "invalid connection option") ||
        strstr(buf, "invalid URI") || strstr(buf, "missing \"=\""))
        cls = SG_ERRCLASS_PERMANENT;
    sg_err_set(err, cls, code, "%s: %s", what, buf);
}

static int role_check(PGconn *conn, const sg_pg_opts_t *opts, sg_err_t *err);

static PGconn *connect_once(const sg_pg_opts_t *opts, sg_err_t *err)
{
    char timeout[16];
    const char *keys[] = {"dbname", "application_name", "connect_timeout", NULL};
    const char *vals[] = {opts->dsn, opts->application_name ? opts->application_name : "sagad",
                          timeout, NULL};
    PGconn *conn;

    /* libpq counts whole seconds, minimum 2; round up. */
    snprintf(timeout, sizeof(timeout), "%d", (opts->connect_timeout_ms + 999) / 1000);
    conn = PQconnectdbParams(keys, vals, 1);
    if (!conn || PQstatus(conn) != CONNECTION_OK) {
        conn_error(err, conn, "cannot connect to PostgreSQL");
        PQfinish(conn);
        return NULL;
    }
    PQsetNoticeReceiver(conn, notice_receiver, NULL);
    if (opts->session_sql) {
        PGresult *res = PQexec(conn, opts->session_sql);
        bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (!ok) {
            conn_error(err, conn, "cannot set up the PostgreSQL session");
            PQfinish(conn);
            return NULL;
        }
    }
    if (role_check(conn, opts, err) < 0) {
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

static const char *const role_names[] = {"runtime", "operator", "owner"};

/* What the session's role may do beyond its DML: superuser or CREATEROLE,
 * owner of the tables (so ALTER and DROP), CREATE in their schema, and
 * direct writes to the dead-letter ledger (an operator goes through the
 * sagad_dlq_* functions).  Logged by the first session of the process;
 * refused with strict_roles when more than opts->role needs. */
static const char role_sql[] =
    "SELECT current_user::text, session_user::text, r.rolsuper OR r.rolcreaterole, "
    "coalesce(pg_has_role(current_user, c.relowner, 'USAGE'), false), "
    "coalesce(has_schema_privilege(current_schema(), 'CREATE'), false), "
    "coalesce(has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE'), false) "
    "FROM pg_roles r LEFT JOIN pg_class c ON c.oid = to_regclass('dead_letters') "
    "WHERE r.rolname = current_user";

static int role_check(PGconn *conn, const sg_pg_opts_t *opts, sg_err_t *err)
{
    static atomic_bool logged;
    PGresult *res = PQexec(conn, role_sql);
    bool t[4] = {false, false, false, false};
    char user[128] = "?", session[128] = "?", more[160] = "";
    size_t n = 0;

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        snprintf(user, sizeof(user), "%s", PQgetvalue(res, 0, 0));
        snprintf(session, sizeof(session), "%s", PQgetvalue(res, 0, 1));
        for (int i = 0; i < 4; i++)
            t[i] = strcmp(PQgetvalue(res, 0, 2 + i), "t") == 0;
    }
    PQclear(res);
    /* What the role may do beyond what opts->role needs. */
    if (opts->role != SG_PG_ROLE_OWNER) {
        static const char *const what[] = {"superuser or CREATEROLE",
                                           "owns the tables (ALTER, DROP)", "CREATE in the schema",
                                           "writes the dead-letter ledger directly"};
        for (int i = 0; i < 4; i++) {
            if (!t[i] || (i == 3 && opts->role != SG_PG_ROLE_OPERATOR))
                continue;
            n += (size_t)snprintf(more + n, sizeof(more) - n, "%s%s", n ? ", " : "", what[i]);
            if (n >= sizeof(more))
                n = sizeof(more) - 1;
        }
    }
    if (!atomic_exchange(&logged, true))
        sg_log_kv(SG_LOG_INFO, "database role", "current_user", user, "session_user", session,
                  "used_as", role_names[opts->role], "beyond_its_needs", n ? more : "nothing",
                  "strict_roles", opts->strict_roles ? "on" : "off", NULL);
    if (n && opts->strict_roles)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.role.too_powerful",
                          "database role %s may do more than the %s role needs (%s), and "
                          "pg.strict_roles is on: connect as the %s role (docs/OPERATIONS.md, "
                          "Database roles)",
                          user, role_names[opts->role], more, role_names[opts->role]);
    return 0;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Connects with retries; the sleep is sliced so a cleared run flag stops
 * the wait quickly. */
static PGconn *connect_retry(const sg_pg_opts_t *opts, sg_rng_t *rng, sg_err_t *err)
{
    for (int attempt = 0;; attempt++) {
        PGconn *conn = connect_once(opts, err);
        uint64_t delay;

        if (conn)
            return conn;
        if (err && err->cls == SG_ERRCLASS_PERMANENT)
            return NULL;
        if (opts->connect_attempts > 0 && attempt + 1 >= opts->connect_attempts)
            return NULL;
        if (opts->run && !*opts->run)
            return NULL;
        delay = sg_backoff_delay_ms(&opts->retry, (unsigned)attempt, 0, rng);
        sg_log_kv(SG_LOG_WARN, "PostgreSQL not reachable, retrying", "error",
                  err ? err->message : "", NULL);
        for (uint64_t slept = 0; slept < delay && (!opts->run || *opts->run); slept += 50) {
            if (opts->waiting)
                opts->waiting();
            sleep_ms(delay - slept < 50 ? delay - slept : 50);
        }
    }
}

sg_pg_t *sg_pg_connect(const sg_pg_opts_t *opts, sg_err_t *err)
{
    sg_pg_t *pg = sg_xcalloc(1, sizeof(*pg));

    pg->opts = *opts;
    sg_rng_seed(&pg->rng, 0);
    pg->conn = connect_retry(&pg->opts, &pg->rng, err);
    if (!pg->conn) {
        free(pg);
        return NULL;
    }
    return pg;
}

/* The session's prepared statements are gone (a new session, or the old
 * one reset): each is prepared again on its next use.  One whose prepare
 * is in the pipeline in progress was sent to the session as it is now;
 * that pipeline's collect settles it (prep_settle()). */
static void stmts_forget(sg_pg_t *pg)
{
    for (int i = 0; i < STMT_CACHE_SLOTS; i++)
        if (pg->stmts[i].state == STMT_READY)
            pg->stmts[i].state = STMT_NONE;
}

void sg_pg_destroy(sg_pg_t *pg)
{
    if (!pg)
        return;
    for (int i = 0; i < STMT_CACHE_SLOTS; i++)
        free(pg->stmts[i].sql);
    free(pg->prep_stmt);
    free(pg->prep_entry);
    free(pg->slots);
    free(pg->slot_stmt);
    PQfinish(pg->conn);
    free(pg);
}

bool sg_pg_ok(const sg_pg_t *pg)
{
    return pg && pg->conn && PQstatus(pg->conn) == CONNECTION_OK;
}

int sg_pg_reconnect(sg_pg_t *pg, sg_err_t *err)
{
    PQfinish(pg->conn);
    stmts_forget(pg);
    pg->conn = connect_retry(&pg->opts, &pg->rng, err);
    return pg->conn ? 0 : -1;
}

static int result_error(sg_pg_t *pg, PGresult *res, sg_err_t *err)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(pg->conn);
    bool bad = PQstatus(pg->conn) != CONNECTION_OK;
    const char *code;
    sg_errclass_t cls = sg_pg_classify(state, bad, &code);
    char text[400];
    size_t n;

    snprintf(text, sizeof(text), "%s", msg && *msg ? msg : "unknown error");
    n = strlen(text);
    while (n > 0 && text[n - 1] == '\n')
        text[--n] = '\0';
    /* Our prepared statements are gone: something reset the session
     * behind our back (DISCARD ALL, as a transaction-pooling pooler does).
     * They are forgotten, so their next use prepares them again.  The reset
     * also dropped the session's advisory locks, LISTENs and settings,
     * which that does not bring back: the error says what to fix. */
    if (strcmp(code, "pg.session_reset") == 0) {
        stmts_forget(pg);
        return sg_err_set(err, cls, code,
                          "the PostgreSQL session was reset behind sagad's back (PostgreSQL %s: "
                          "%s): its prepared statements, advisory locks and LISTENs are gone; "
                          "connect directly or through a pooler in session mode",
                          state, text);
    }
    sg_err_set(err, cls, code, "PostgreSQL %s: %s", state ? state : "connection", text);
    return -1;
}

static bool result_ok(const PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);

    return r && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

/* A statement's result: handed to the caller (or cleared) when it
 * succeeded, else turned into err and cleared. */
static int take_result(sg_pg_t *pg, PGresult *r, sg_pg_res_t **res, sg_err_t *err)
{
    if (!result_ok(r)) {
        result_error(pg, r, err);
        PQclear(r);
        return -1;
    }
    if (res)
        *res = r;
    else
        PQclear(r);
    return 0;
}

int sg_pg_exec(sg_pg_t *pg, const char *sql, int nparams, const char *const *params,
               sg_pg_res_t **res, sg_err_t *err)
{
    if (res)
        *res = NULL;
    return take_result(pg, PQexecParams(pg->conn, sql, nparams, NULL, params, NULL, NULL, 0), res,
                       err);
}

int sg_pg_pipe_begin(sg_pg_t *pg, sg_err_t *err)
{
    if (PQenterPipelineMode(pg->conn) != 1)
        return result_error(pg, NULL, err);
    pg->piping = true;
    pg->synced = false;
    pg->nsent = 0;
    pg->nslots = 0;
    pg->nprep = 0;
    sg_err_clear(&pg->pipe_err);
    return 0;
}

/* The cache entry of sql, added when there is room; NULL when full. */
static stmt_t *stmt_lookup(sg_pg_t *pg, const char *sql, int nparams, int *index)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (const unsigned char *c = (const unsigned char *)sql; *c; c++)
        h = (h ^ *c) * 16777619u;
    for (uint32_t i = h & (STMT_CACHE_SLOTS - 1);; i = (i + 1) & (STMT_CACHE_SLOTS - 1)) {
        stmt_t *e = &pg->stmts[i];
        if (e->sql && e->nparams == nparams && strcmp(e->sql, sql) == 0) {
            *index = (int)i;
            return e;
        }
        if (!e->sql) {
            if (pg->nstmts >= STMT_CACHE_MAX)
                return NULL;
            e->sql = sg_xstrdup(sql);
            e->nparams = nparams;
            e->state = STMT_NONE;
            snprintf(e->name, sizeof(e->name), "sg_%d", pg->nstmts++);
            *index = (int)i;
            return e;
        }
    }
}

/* Sends sql as a named prepared statement (preparing it first when this
 * session has not); 1 sent, 0 not cacheable, -1 send failure. */
static int send_prepared(sg_pg_t *pg, const char *sql, int nparams, const char *const *params)
{
    int index;
    stmt_t *e = stmt_lookup(pg, sql, nparams, &index);

    if (!e)
        return 0;
    if (e->state == STMT_NONE) {
        if (PQsendPrepare(pg->conn, e->name, sql, nparams, NULL) != 1)
            return -1;
        if (pg->nprep == pg->prep_cap) {
            pg->prep_cap = pg->prep_cap ? pg->prep_cap * 2 : 16;
            pg->prep_stmt = sg_xrealloc(pg->prep_stmt, sizeof(int) * (size_t)pg->prep_cap);
            pg->prep_entry = sg_xrealloc(pg->prep_entry, sizeof(int) * (size_t)pg->prep_cap);
        }
        pg->prep_stmt[pg->nprep] = pg->nsent++;
        pg->prep_entry[pg->nprep++] = index;
        e->state = STMT_PENDING;
    }
    return PQsendQueryPrepared(pg->conn, e->name, nparams, params, NULL, NULL, 0) == 1 ? 1 : -1;
}

static int exec_cached(sg_pg_t *pg, const char *sql, int nparams, const char *const *params,
                       sg_pg_res_t **res, sg_err_t *err, bool again)
{
    int index;
    stmt_t *e = stmt_lookup(pg, sql, nparams, &index);
    PGresult *r;
    const char *state;

    if (!e)
        return sg_pg_exec(pg, sql, nparams, params, res, err);
    if (res)
        *res = NULL;
    if (e->state != STMT_READY) {
        if (take_result(pg, PQprepare(pg->conn, e->name, sql, nparams, NULL), NULL, err) < 0)
            return -1;
        e->state = STMT_READY;
    }
    r = PQexecPrepared(pg->conn, e->name, nparams, params, NULL, NULL, 0);
    state = r && !result_ok(r) ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    /* Unusable for good: a table's columns changed under it, as a
     * migration does ("cached plan must not change result type").  It is
     * prepared again under a name not taken (the old one is deallocated)
     * and run at once outside a transaction block; inside one the failure
     * aborted the transaction, so it is reported and the caller's next try
     * prepares it. */
    if (state && strcmp(state, "0A000") == 0) {
        char old[sizeof(e->name)];
        snprintf(old, sizeof(old), "%s", e->name);
        e->state = STMT_NONE;
        snprintf(e->name, sizeof(e->name), "sg_r%d", pg->renamed++);
        if (!again && PQtransactionStatus(pg->conn) == PQTRANS_IDLE) {
            char sql_dealloc[32];
            PQclear(r);
            snprintf(sql_dealloc, sizeof(sql_dealloc), "DEALLOCATE %s", old);
            PQclear(PQexec(pg->conn, sql_dealloc));
            return exec_cached(pg, sql, nparams, params, res, err, true);
        }
    }
    /* Gone (26000): result_error() reports a reset session; the relay
     * starts a new one on that error. */
    return take_result(pg, r, res, err);
}

int sg_pg_exec_cached(sg_pg_t *pg, const char *sql, int nparams, const char *const *params,
                      sg_pg_res_t **res, sg_err_t *err)
{
    return exec_cached(pg, sql, nparams, params, res, err, false);
}

void sg_pg_pipe_send(sg_pg_t *pg, const char *sql, int nparams, const char *const *params,
                     sg_pg_res_t **slot)
{
    int sent;

    if (slot)
        *slot = NULL;
    if (pg->pipe_err.cls != SG_ERRCLASS_NONE)
        return;
    sent = send_prepared(pg, sql, nparams, params);
    if (sent == 0)
        sent = PQsendQueryParams(pg->conn, sql, nparams, NULL, params, NULL, NULL, 0) == 1 ? 1 : -1;
    if (sent < 0) {
        result_error(pg, NULL, &pg->pipe_err);
        return;
    }
    if (slot) {
        if (pg->nslots == pg->slots_cap) {
            pg->slots_cap = pg->slots_cap ? pg->slots_cap * 2 : 64;
            pg->slots = sg_xrealloc(pg->slots, sizeof(*pg->slots) * (size_t)pg->slots_cap);
            pg->slot_stmt = sg_xrealloc(pg->slot_stmt, sizeof(int) * (size_t)pg->slots_cap);
        }
        pg->slots[pg->nslots] = slot;
        pg->slot_stmt[pg->nslots++] = pg->nsent;
    }
    pg->nsent++;
}

/* Settles the prepares of the pipeline that just ended: a prepare whose
 * result was not read OK (aborted by an earlier failure, or the session
 * lost) is sent again next time. */
static void prep_settle(sg_pg_t *pg, const bool *ok)
{
    for (int i = 0; i < pg->nprep; i++) {
        stmt_t *e = &pg->stmts[pg->prep_entry[i]];
        if (e->state == STMT_PENDING)
            e->state = ok[i] ? STMT_READY : STMT_NONE;
    }
    pg->nprep = 0;
}

int sg_pg_pipe_sync(sg_pg_t *pg, sg_err_t *err)
{
    if (!pg->piping || pg->synced)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "pg.query", "no pipeline in progress");
    pg->synced = true;
    /* PQpipelineSync() also flushes what is buffered.  Not taken, there is
     * nothing to read. */
    pg->c_done = PQpipelineSync(pg->conn) != 1;
    if (pg->c_done && pg->pipe_err.cls == SG_ERRCLASS_NONE)
        result_error(pg, NULL, &pg->pipe_err);
    pg->c_stmt = pg->c_slot = pg->c_prep = 0;
    pg->c_rc = pg->pipe_err.cls != SG_ERRCLASS_NONE ? -1 : 0;
    pg->c_err = pg->pipe_err;
    if (pg->pipe_err.cls != SG_ERRCLASS_NONE) {
        *err = pg->pipe_err;
        return -1;
    }
    return 0;
}

int sg_pg_pipe_end(sg_pg_t *pg, sg_err_t *err)
{
    sg_err_t ignored;

    if (!pg->piping || pg->synced)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "pg.query", "no pipeline in progress");
    if (sg_pg_pipe_sync(pg, &ignored) < 0) {
        /* collect reports it */
    }
    return sg_pg_pipe_collect(pg, err);
}

/* Reads the pipeline's answers up to the sync: all of them (block), or
 * those already there.  Results come in statement order, each followed by
 * a NULL; the sync answers with PGRES_PIPELINE_SYNC.  A statement's rows
 * go to its slot; the first failure is kept (the statements after it
 * report PGRES_PIPELINE_ABORTED).  True when done: the sync was read, or
 * the connection is lost. */
static bool pipe_read(sg_pg_t *pg, bool block)
{
    while (!pg->c_done) {
        PGresult *r;
        ExecStatusType st;

        /* A failed read is done too: the blocking read reports it. */
        if (!block && PQconsumeInput(pg->conn) != 1)
            return true;
        if (!block && PQisBusy(pg->conn))
            return false;
        if (!(r = PQgetResult(pg->conn))) {
            if (PQstatus(pg->conn) != CONNECTION_OK) {
                if (pg->c_rc == 0)
                    pg->c_rc = result_error(pg, NULL, &pg->c_err);
                pg->c_done = true;
                break;
            }
            pg->c_stmt++;
            continue;
        }
        st = PQresultStatus(r);
        if (pg->c_prep < pg->nprep && pg->prep_stmt[pg->c_prep] == pg->c_stmt) {
            pg->c_prep_ok[pg->c_prep++] = st == PGRES_COMMAND_OK;
            if (st != PGRES_COMMAND_OK && pg->c_rc == 0)
                pg->c_rc = result_error(pg, r, &pg->c_err);
            PQclear(r);
            continue;
        }
        if (st == PGRES_PIPELINE_SYNC) {
            pg->c_done = true;
        } else if (st == PGRES_TUPLES_OK && pg->c_slot < pg->nslots &&
                   pg->slot_stmt[pg->c_slot] == pg->c_stmt) {
            *pg->slots[pg->c_slot++] = r;
            continue;
        } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && pg->c_rc == 0) {
            pg->c_rc = result_error(pg, r, &pg->c_err);
        }
        if (pg->c_slot < pg->nslots && pg->slot_stmt[pg->c_slot] == pg->c_stmt)
            pg->c_slot++;
        PQclear(r);
    }
    return true;
}

bool sg_pg_pipe_answered(sg_pg_t *pg)
{
    return pg->piping && pg->synced && pipe_read(pg, false);
}

int sg_pg_pipe_collect(sg_pg_t *pg, sg_err_t *err)
{
    int rc;

    if (!pg->piping || !pg->synced)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "pg.query", "no pipeline sent");
    pipe_read(pg, true);
    pg->piping = pg->synced = false;
    rc = pg->c_rc;
    if (rc < 0)
        *err = pg->c_err;
    for (int i = pg->c_prep; i < pg->nprep; i++)
        pg->c_prep_ok[i] = false;
    prep_settle(pg, pg->c_prep_ok);
    if (PQstatus(pg->conn) != CONNECTION_OK)
        stmts_forget(pg);
    if (PQstatus(pg->conn) == CONNECTION_OK && PQexitPipelineMode(pg->conn) != 1 && rc == 0)
        rc = result_error(pg, NULL, err);
    if (rc < 0)
        for (int i = 0; i < pg->nslots; i++) {
            PQclear((PGresult *)*pg->slots[i]);
            *pg->slots[i] = NULL;
        }
    pg->nslots = 0;
    return rc;
}

/* Room for extra more bytes and the terminating NUL. */
static void buf_reserve(sg_pg_buf_t *buf, size_t extra)
{
    size_t cap = buf->cap ? buf->cap : 256;

    if (buf->len + extra + 1 <= buf->cap)
        return;
    while (cap < buf->len + extra + 1)
        cap *= 2;
    buf->data = sg_xrealloc(buf->data, cap);
    buf->cap = cap;
}

void sg_pg_array_item(sg_pg_buf_t *buf, const char *item)
{
    size_t len;
    char *o;

    if (!item) {
        sg_pg_buf_put(buf, "NULL", 4);
        return;
    }
    /* Quoted, with " and backslash escaped, written straight into room for
     * the worst case (the worker sends megabytes of these a second, mostly
     * JSON, where quotes are everywhere). */
    len = strlen(item);
    buf_reserve(buf, 2 * len + 2);
    o = buf->data + buf->len;
    *o++ = '"';
    for (const char *c = item; *c; c++) {
        if (*c == '"' || *c == '\\')
            *o++ = '\\';
        *o++ = *c;
    }
    *o++ = '"';
    *o = '\0';
    buf->len = (size_t)(o - buf->data);
}

void sg_pg_array_literal(sg_pg_buf_t *buf, const char *const *items, size_t n)
{
    sg_pg_buf_putc(buf, '{');
    for (size_t i = 0; i < n; i++) {
        if (i)
            sg_pg_buf_putc(buf, ',');
        sg_pg_array_item(buf, items[i]);
    }
    sg_pg_buf_putc(buf, '}');
}

void sg_pg_buf_put(sg_pg_buf_t *buf, const char *s, size_t n)
{
    buf_reserve(buf, n);
    memcpy(buf->data + buf->len, s, n);
    buf->len += n;
    buf->data[buf->len] = '\0';
}

void sg_pg_buf_putc(sg_pg_buf_t *buf, char c)
{
    sg_pg_buf_put(buf, &c, 1);
}

void sg_pg_buf_puts(sg_pg_buf_t *buf, const char *s)
{
    sg_pg_buf_put(buf, s, strlen(s));
}

void sg_pg_buf_reset(sg_pg_buf_t *buf)
{
    buf->len = 0;
    if (buf->data)
        buf->data[0] = '\0';
}

void sg_pg_buf_free(sg_pg_buf_t *buf)
{
    free(buf->data);
    memset(buf, 0, sizeof(*buf));
}

int sg_pg_exec_script(sg_pg_t *pg, const char *sql, sg_err_t *err)
{
    PGresult *r = PQexec(pg->conn, sql);
    ExecStatusType st = PQresultStatus(r);
    int rc = 0;

    if (!r || (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK))
        rc = result_error(pg, r, err);
    PQclear(r);
    return rc;
}

int sg_pg_begin(sg_pg_t *pg, sg_err_t *err)
{
    return sg_pg_exec(pg, "BEGIN", 0, NULL, NULL, err);
}

int sg_pg_commit(sg_pg_t *pg, sg_err_t *err)
{
    return sg_pg_exec(pg, "COMMIT", 0, NULL, NULL, err);
}

void sg_pg_rollback(sg_pg_t *pg)
{
    sg_err_t err;

    if (PQstatus(pg->conn) != CONNECTION_OK)
        return;
    if (sg_pg_exec(pg, "ROLLBACK", 0, NULL, NULL, &err) < 0)
        sg_log_kv(SG_LOG_WARN, "ROLLBACK failed", "error", err.message, NULL);
}

size_t sg_pg_res_rows(const sg_pg_res_t *res)
{
    return res ? (size_t)PQntuples(res) : 0;
}

const char *sg_pg_res_get(const sg_pg_res_t *res, size_t row, int col)
{
    if (!res || row >= (size_t)PQntuples(res) || col < 0 || col >= PQnfields(res) ||
        PQgetisnull(res, (int)row, col))
        return NULL;
    return PQgetvalue(res, (int)row, col);
}

int64_t sg_pg_res_int(const sg_pg_res_t *res, size_t row, int col, int64_t def)
{
    const char *s = sg_pg_res_get(res, row, col);
    char *end;
    long long v;

    if (!s || !*s)
        return def;
    v = strtoll(s, &end, 10);
    return *end ? def : (int64_t)v;
}

unsigned char *sg_pg_res_bytea(const sg_pg_res_t *res, size_t row, int col, size_t *len)
{
    const char *s = sg_pg_res_get(res, row, col);
    unsigned char *raw, *copy;

    *len = 0;
    if (!s)
        return NULL;
    raw = sg_xcheck(PQunescapeBytea((const unsigned char *)s, len), "PQunescapeBytea");
    /* Hand out plain malloc memory: callers must not need PQfreemem. */
    copy = sg_xmalloc(*len ? *len : 1);
    memcpy(copy, raw, *len);
    PQfreemem(raw);
    return copy;
}

int sg_pg_listen(sg_pg_t *pg, const char *channel, sg_err_t *err)
{
    char sql[128];

    snprintf(sql, sizeof(sql), "LISTEN %s", channel);
    return sg_pg_exec(pg, sql, 0, NULL, NULL, err);
}

static int drain_notifies(PGconn *conn, const char *mark, bool *marked)
{
    PGnotify *n;
    int got = 0;

    while ((n = PQnotifies(conn)) != NULL) {
        got = 1;
        if (mark && marked && n->extra && strcmp(n->extra, mark) == 0)
            *marked = true;
        PQfreemem(n);
    }
    return got;
}

int sg_pg_wait_notify(sg_pg_t *pg, int timeout_ms, const char *mark, bool *marked, sg_err_t *err)
{
    struct pollfd pfd = {PQsocket(pg->conn), POLLIN, 0};
    int rc;

    if (PQconsumeInput(pg->conn) == 0)
        return result_error(pg, NULL, err);
    if (drain_notifies(pg->conn, mark, marked))
        return 1;
    if (pfd.fd < 0)
        return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "pg.connection", "PostgreSQL: no socket");
    rc = poll(&pfd, 1, timeout_ms);
    if (rc <= 0)
        return 0;
    if (PQconsumeInput(pg->conn) == 0)
        return result_error(pg, NULL, err);
    return drain_notifies(pg->conn, mark, marked);
}

int sg_pg_notified(sg_pg_t *pg, const char *mark, bool *marked)
{
    return drain_notifies(pg->conn, mark, marked);
}

int64_t sg_pg_res_affected(const sg_pg_res_t *res)
{
    const char *s = res ? PQcmdTuples((PGresult *)res) : NULL;

    return s && *s ? strtoll(s, NULL, 10) : 0;
}

void sg_pg_res_destroy(sg_pg_res_t *res)
{
    PQclear(res);
}

int sg_pg_socket(const sg_pg_t *pg)
{
    return pg && pg->conn ? PQsocket(pg->conn) : -1;
}

const char *sg_pg_int_text(char buf[24], long long v)
{
    snprintf(buf, 24, "%lld", v);
    return buf;
}
