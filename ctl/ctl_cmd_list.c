/* sagactl status ID, show ID and list: the sagas as PostgreSQL has them.
 *
 * list pages by keyset, newest first on (created_at, saga_id): a page
 * costs the same at the millionth saga as at the first (index
 * sagas_created, schemas/sql/0010_sagactl_list.sql), and --before SAGA_ID
 * continues where a page ended. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "sagad/sg_table.h"
#include "sagad/sg_timeline.h"

/* The steps of saga s: succeeded / total, and the step it is at. */
#define STEPS_SQL                                                                                  \
    "(SELECT count(*) FILTER (WHERE st.status = 'succeeded') || '/' || count(*) "                  \
    "   FROM steps st WHERE st.saga_id = s.saga_id) AS steps, "                                    \
    "(SELECT format('%s (%s) %s', st.idx, st.name, st.status) FROM steps st "                      \
    "  WHERE st.saga_id = s.saga_id AND st.status NOT IN ('pending', 'succeeded', 'skipped') "     \
    "  ORDER BY st.idx DESC LIMIT 1) AS at_step "

static const char status_sql[] =
    "SELECT s.saga_id, s.name, s.status, s.generation, " STEPS_SQL ", "
    " to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), "
    " to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), "
    " justify_interval(date_trunc('second', now() - s.updated_at))::text, s.seq "
    "FROM sagas s WHERE s.saga_id = $1";

static const char status_json_sql[] =
    "SELECT jsonb_build_object('saga_id', s.saga_id, 'name', s.name, 'status', s.status, "
    " 'generation', s.generation, 'seq', s.seq, 'created_at', s.created_at, "
    " 'updated_at', s.updated_at, 'idle_s', round(extract(epoch FROM now() - s.updated_at), 3), "
    " 'steps', (SELECT jsonb_agg(jsonb_build_object('step', st.idx, 'name', st.name, "
    "   'tool', st.tool, 'status', st.status, 'attempts', st.attempts, "
    "   'error_code', st.error_code) ORDER BY st.idx) FROM steps st "
    "   WHERE st.saga_id = s.saga_id))::text FROM sagas s WHERE s.saga_id = $1";

static int no_saga(const ctl_t *c, const char *id)
{
    ctl_warn(c, "no saga %s", id);
    return SG_EXIT_FAIL;
}

int ctl_cmd_status(sg_cli_t *cli, int argc, char **argv)
{
    static const char *const labels[] = {"saga",     "name",   "status",  "generation",
                                         "steps ok", "now at", "created", "updated"};
    ctl_t c;
    sg_pg_res_t *res = NULL;
    const char *id;
    int rc = ctl_open(&c, cli, argc, argv, true);

    if (rc)
        return ctl_close(&c, rc);
    if (!(id = ctl_one_arg(&c, "saga ID")))
        return ctl_close(&c, SG_EXIT_USAGE);
    if ((rc = ctl_query(&c, c.json ? status_json_sql : status_sql, 1, &id, &res)))
        return ctl_close(&c, rc);
    if (sg_pg_res_rows(res) == 0) {
        rc = no_saga(&c, id);
    } else if (c.json) {
        printf("%s\n", sg_pg_res_get(res, 0, 0));
    } else {
        sg_table_t *t = sg_table_new(NULL, 2);
        char created[64], updated[128];
        for (int i = 0; i < 8; i++) {
            const char *row[2] = {labels[i], sg_pg_res_get(res, 0, i)};
            if (i == 6) {
                snprintf(created, sizeof(created), "%s UTC", row[1]);
                row[1] = created;
            } else if (i == 7) {
                snprintf(updated, sizeof(updated), "%s UTC (%s ago)", row[1],
                         sg_pg_res_get(res, 0, 8));
                row[1] = updated;
            }
            sg_table_add(t, row);
        }
        sg_table_print(t, stdout, 120);
        sg_table_destroy(t);
    }
    sg_pg_res_destroy(res);
    return ctl_close(&c, rc);
}

int ctl_cmd_show(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    sg_err_t err;
    const char *id;
    int found, rc = ctl_open(&c, cli, argc, argv, true);

    if (rc)
        return ctl_close(&c, rc);
    if (!(id = ctl_one_arg(&c, "saga ID")))
        return ctl_close(&c, SG_EXIT_USAGE);
    found = sg_timeline_print(c.pg, id, c.json, stdout, &err);
    if (found < 0) {
        ctl_warn(&c, "query failed: %s [%s]", err.message, err.code);
        rc = SG_EXIT_INFRA;
    } else if (found == 0) {
        ctl_warn(&c, "no saga and no dead letter with saga id %s", id);
        rc = SG_EXIT_FAIL;
    }
    return ctl_close(&c, rc);
}

/* list's WHERE clause from its options, with text parameters. */
typedef struct filter_s {
    char where[1024];
    const char *params[8];
    char own[8][32];
    int n;
} filter_t;

static void filter_add(filter_t *f, const char *fmt, const char *value)
{
    size_t len = strlen(f->where);

    f->params[f->n++] = value;
    len += (size_t)snprintf(f->where + len, sizeof(f->where) - len, "%s",
                            f->where[0] ? " AND " : " WHERE ");
    snprintf(f->where + len, sizeof(f->where) - len, fmt, f->n);
}

static int filter_age(const ctl_t *c, filter_t *f, const char *opt, const char *fmt)
{
    int64_t ms;

    if (!sg_cli_opt(&c->args, opt))
        return 0;
    if (ctl_opt_duration(c, opt, 0, &ms) < 0)
        return -1;
    snprintf(f->own[f->n], sizeof(f->own[0]), "%lld milliseconds", (long long)ms);
    filter_add(f, fmt, f->own[f->n]);
    return 0;
}

static int filter_build(const ctl_t *c, filter_t *f)
{
    static const char *const statuses[] = {"running",      "held",        "completed",
                                           "compensating", "compensated", "failed",
                                           "cancelling",   "cancelled",   NULL};
    const char *v;

    memset(f, 0, sizeof(*f));
    if ((v = sg_cli_opt(&c->args, "--status"))) {
        size_t i = 0;
        while (statuses[i] && strcmp(statuses[i], v) != 0)
            i++;
        if (!statuses[i]) {
            ctl_warn(c,
                     "--status %s: must be running, held, completed, compensating, "
                     "compensated, failed, cancelling or cancelled",
                     v);
            return -1;
        }
        filter_add(f, "s.status = $%d", v);
    }
    if ((v = sg_cli_opt(&c->args, "--name")))
        filter_add(f, "s.name = $%d", v);
    if (filter_age(c, f, "--since", "s.created_at >= now() - $%d::interval") < 0)
        return -1;
    /* Stuck: still in progress, and its row (every step's outcome, every
     * status change moves updated_at) unchanged for that long. */
    if (filter_age(c, f, "--stuck",
                   "s.status IN ('running', 'compensating', 'cancelling') AND "
                   "s.updated_at < now() - $%d::interval") < 0)
        return -1;
    if ((v = sg_cli_opt(&c->args, "--before")))
        filter_add(f,
                   "(s.created_at, s.saga_id) < (SELECT created_at, saga_id FROM sagas "
                   "WHERE saga_id = $%d)",
                   v);
    return 0;
}

static int before_exists(ctl_t *c)
{
    const char *v = sg_cli_opt(&c->args, "--before");
    sg_pg_res_t *res = NULL;
    int rc;

    if (!v)
        return SG_EXIT_OK;
    if ((rc = ctl_query(c, "SELECT 1 FROM sagas WHERE saga_id = $1", 1, &v, &res)))
        return rc;
    if (sg_pg_res_rows(res) == 0) {
        ctl_warn(c, "--before %s: no such saga (it names the last saga of the previous page)", v);
        rc = SG_EXIT_USAGE;
    }
    sg_pg_res_destroy(res);
    return rc;
}

static void print_page(const ctl_t *c, const sg_pg_res_t *res, size_t rows)
{
    static const char *const header[] = {"SAGA_ID", "NAME",          "STATUS", "STEPS OK",
                                         "NOW AT",  "CREATED (UTC)", "UPDATED"};
    sg_table_t *t;

    if (c->json) {
        for (size_t r = 0; r < rows; r++)
            printf("%s\n", sg_pg_res_get(res, r, 7));
        return;
    }
    t = sg_table_new(header, 7);
    for (size_t r = 0; r < rows; r++) {
        const char *row[7];
        for (int i = 0; i < 7; i++)
            row[i] = sg_pg_res_get(res, r, i);
        sg_table_add(t, row);
    }
    sg_table_print(t, stdout, 60);
    sg_table_destroy(t);
}

int ctl_cmd_list(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    filter_t f;
    sg_pg_res_t *res = NULL;
    char sql[4096];
    long n;
    size_t rows;
    int rc = ctl_open(&c, cli, argc, argv, true);

    if (rc)
        return ctl_close(&c, rc);
    if (c.args.npos) {
        ctl_warn(&c, "takes no arguments, only options (try sagactl list --help)");
        return ctl_close(&c, SG_EXIT_USAGE);
    }
    if (ctl_opt_long(&c, "--limit", 50, 10000, &n) < 0 || filter_build(&c, &f) < 0)
        return ctl_close(&c, SG_EXIT_USAGE);
    if ((rc = before_exists(&c)))
        return ctl_close(&c, rc);
    /* One more row than asked says whether there is a next page; the
     * per-saga columns are computed for the page only. */
    f.params[f.n++] = SG_PG_INT(n + 1);
    snprintf(sql, sizeof(sql),
             "SELECT s.saga_id, s.name, s.status, %s, "
             " to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), "
             " justify_interval(date_trunc('second', now() - s.updated_at))::text || ' ago', "
             " jsonb_build_object('saga_id', s.saga_id, 'name', s.name, 'status', s.status, "
             "  'created_at', s.created_at, 'updated_at', s.updated_at, 'generation', "
             "  s.generation, 'idle_s', round(extract(epoch FROM now() - s.updated_at), 3))::text "
             "FROM (SELECT * FROM sagas s%s ORDER BY s.created_at DESC, s.saga_id DESC "
             "LIMIT $%d::int) s ORDER BY s.created_at DESC, s.saga_id DESC",
             STEPS_SQL, f.where, f.n);
    if ((rc = ctl_query(&c, sql, f.n, f.params, &res)))
        return ctl_close(&c, rc);
    rows = sg_pg_res_rows(res);
    if (rows == 0) {
        ctl_warn(&c, "no saga matches");
        rc = SG_EXIT_FAIL;
    } else {
        print_page(&c, res, rows > (size_t)n ? (size_t)n : rows);
        if (rows > (size_t)n)
            fprintf(stderr, "more: add --before %s for the next page\n",
                    sg_pg_res_get(res, (size_t)n - 1, 0));
    }
    sg_pg_res_destroy(res);
    return ctl_close(&c, rc);
}
