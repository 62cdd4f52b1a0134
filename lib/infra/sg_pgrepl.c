/* A logical replication session (sg_pgrepl.h).  The stream's messages are
 * decoded by sg_walmsg.c; this file only moves them. */
#include "sagad/sg_pgrepl.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_mask.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_run.h"
#include "sagad/sg_walmsg.h"

struct sg_pgrepl_s {
    PGconn *conn;
    char *buf; /* the last CopyData message, PQfreemem'd on the next read */
};

int64_t sg_pgrepl_now_us(void)
{
    /* 946684800: seconds from 1970-01-01 to 2000-01-01 */
    return sg_run_wall_ns() / 1000 - 946684800LL * 1000000LL;
}

static int fail_conn(sg_pgrepl_t *rp, const char *what, sg_err_t *err)
{
    char text[512];

    sg_mask(rp && rp->conn ? PQerrorMessage(rp->conn) : "out of memory", text, sizeof(text));
    text[strcspn(text, "\n")] = '\0';
    return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "pg.connection", "%s: %s", what, text);
}

static int fail_res(PGresult *res, const char *what, sg_err_t *err)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *code = "pg.replication";
    sg_errclass_t cls = sg_pg_classify(state, false, &code);
    char text[512];

    sg_mask(msg ? msg : "no message", text, sizeof(text));
    if (state && strcmp(state, "55006") == 0) { /* object_in_use: the slot is streamed */
        code = "pg.slot_busy";
        cls = SG_ERRCLASS_TRANSIENT;
    } else if (state && (strcmp(state, "42704") == 0 || strcmp(state, "42501") == 0 ||
                         strcmp(state, "55000") == 0)) {
        /* undefined_object (no such slot or publication), insufficient
         * privilege (no REPLICATION), object_not_in_prerequisite_state
         * (wal_level): waiting does not fix them */
        code = "pg.replication";
        cls = SG_ERRCLASS_PERMANENT;
    }
    sg_err_set(err, cls, code, "%s: %s (SQLSTATE %s)", what, text, state ? state : "none");
    PQclear(res);
    return -1;
}

sg_pgrepl_t *sg_pgrepl_connect(const char *dsn, const char *appname, int wal_sender_timeout_ms,
                               sg_err_t *err)
{
    char options[64];
    const char *keys[] = {"dbname",  "replication",     "application_name",
                          "options", "connect_timeout", NULL};
    const char *vals[] = {dsn, "database", appname, options, "10", NULL};
    sg_pgrepl_t *rp = sg_xcalloc(1, sizeof(*rp));

    snprintf(options, sizeof(options), "-c wal_sender_timeout=%d", wal_sender_timeout_ms);
    rp->conn = PQconnectdbParams(keys, vals, 1);
    if (!rp->conn || PQstatus(rp->conn) != CONNECTION_OK) {
        fail_conn(rp, "replication session", err);
        if (strstr(err->message, "password authentication failed") ||
            strstr(err->message, "does not exist") || strstr(err->message, "no pg_hba.conf") ||
            strstr(err->message, "must have replication") ||
            strstr(err->message, "must be superuser or replication"))
            err->cls = SG_ERRCLASS_PERMANENT;
        sg_pgrepl_close(rp);
        return NULL;
    }
    return rp;
}

void sg_pgrepl_close(sg_pgrepl_t *rp)
{
    if (!rp)
        return;
    if (rp->buf)
        PQfreemem(rp->buf);
    PQfinish(rp->conn);
    free(rp);
}

int sg_pgrepl_pid(const sg_pgrepl_t *rp)
{
    return PQbackendPID(rp->conn);
}

/* A slot name is sent inside a command, so only what PostgreSQL allows in
 * one: lower-case letters, digits and underscores, at most 63. */
static int check_name(const char *what, const char *name, sg_err_t *err)
{
    size_t n = strlen(name);

    if (n == 0 || n > 63 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.config.invalid",
                          "%s \"%s\": must be 1-63 lower-case letters, digits or underscores", what,
                          name);
    return 0;
}

int sg_pgrepl_identify(sg_pgrepl_t *rp, char *history, size_t size, sg_err_t *err)
{
    PGresult *res = PQexec(rp->conn, "IDENTIFY_SYSTEM");

    if (!res)
        return fail_conn(rp, "IDENTIFY_SYSTEM", err);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) < 4)
        return fail_res(res, "IDENTIFY_SYSTEM", err);
    /* systemid, timeline, xlogpos, dbname */
    snprintf(history, size, "%s/%s/%s", PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
             PQgetvalue(res, 0, 3));
    PQclear(res);
    return 0;
}

int sg_pgrepl_create_slot(sg_pgrepl_t *rp, const char *slot, bool *created, sg_err_t *err)
{
    char sql[160];
    PGresult *res;
    const char *state;

    *created = false;
    if (check_name("relay.slot", slot, err) < 0)
        return -1;
    snprintf(sql, sizeof(sql), "CREATE_REPLICATION_SLOT %s LOGICAL pgoutput NOEXPORT_SNAPSHOT",
             slot);
    res = PQexec(rp->conn, sql);
    if (!res)
        return fail_conn(rp, "CREATE_REPLICATION_SLOT", err);
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        PQclear(res);
        *created = true;
        return 0;
    }
    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (state && strcmp(state, "42710") == 0) { /* duplicate_object: it exists */
        PQclear(res);
        return 0;
    }
    return fail_res(res, "CREATE_REPLICATION_SLOT", err);
}

int sg_pgrepl_drop_slot(sg_pgrepl_t *rp, const char *slot, sg_err_t *err)
{
    char sql[128];
    PGresult *res;
    const char *state;

    if (check_name("relay.slot", slot, err) < 0)
        return -1;
    snprintf(sql, sizeof(sql), "DROP_REPLICATION_SLOT %s", slot);
    res = PQexec(rp->conn, sql);
    if (!res)
        return fail_conn(rp, "DROP_REPLICATION_SLOT", err);
    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (PQresultStatus(res) == PGRES_COMMAND_OK || (state && strcmp(state, "42704") == 0)) {
        PQclear(res);
        return 0;
    }
    return fail_res(res, "DROP_REPLICATION_SLOT", err);
}

int sg_pgrepl_start(sg_pgrepl_t *rp, const char *slot, const char *publication, sg_err_t *err)
{
    char sql[320];
    PGresult *res;

    if (check_name("relay.slot", slot, err) < 0 || check_name("publication", publication, err) < 0)
        return -1;
    snprintf(sql, sizeof(sql),
             "START_REPLICATION SLOT %s LOGICAL 0/0 (proto_version '1', publication_names '%s', "
             "messages 'true')",
             slot, publication);
    res = PQexec(rp->conn, sql);
    if (!res)
        return fail_conn(rp, "START_REPLICATION", err);
    if (PQresultStatus(res) != PGRES_COPY_BOTH)
        return fail_res(res, "START_REPLICATION", err);
    PQclear(res);
    return 0;
}

/* The stream ended: the server's reason is in the result that follows. */
static int stream_ended(sg_pgrepl_t *rp, sg_err_t *err)
{
    PGresult *res = PQgetResult(rp->conn);

    if (res && PQresultStatus(res) == PGRES_FATAL_ERROR)
        return fail_res(res, "replication stream", err);
    PQclear(res);
    return fail_conn(rp, "replication stream ended", err);
}

int sg_pgrepl_read(sg_pgrepl_t *rp, int timeout_ms, const unsigned char **buf, size_t *len,
                   sg_err_t *err)
{
    int n;

    if (rp->buf) {
        PQfreemem(rp->buf);
        rp->buf = NULL;
    }
    for (;;) {
        n = PQgetCopyData(rp->conn, &rp->buf, 1);
        if (n > 0) {
            *buf = (const unsigned char *)rp->buf;
            *len = (size_t)n;
            return 1;
        }
        if (n == -1)
            return stream_ended(rp, err);
        if (n == -2)
            return fail_conn(rp, "replication stream", err);
        if (timeout_ms <= 0)
            return 0;
        {
            struct pollfd pfd = {.fd = PQsocket(rp->conn), .events = POLLIN};
            int rc = poll(&pfd, 1, timeout_ms);

            if (rc < 0 && errno != EINTR)
                return sg_err_set(err, SG_ERRCLASS_TRANSIENT, "pg.connection", "poll: %s",
                                  strerror(errno));
            if (rc <= 0)
                return 0;
        }
        if (!PQconsumeInput(rp->conn))
            return fail_conn(rp, "replication stream", err);
        timeout_ms = 0; /* what came is read now; no second wait */
    }
}

int sg_pgrepl_confirm(sg_pgrepl_t *rp, uint64_t lsn, sg_err_t *err)
{
    unsigned char msg[SG_WAL_STATUS_LEN];

    sg_wal_status_encode(msg, lsn, sg_pgrepl_now_us(), false);
    if (PQputCopyData(rp->conn, (const char *)msg, sizeof(msg)) != 1 || PQflush(rp->conn) != 0)
        return fail_conn(rp, "standby status update", err);
    return 0;
}
