/* sagactl watch [ID | --name N]: follows the events topic live, one
 * decoded line per event (--json: the event as it came), like kcat -C.
 * Reads with a throwaway consumer group and commits nothing, so it never
 * disturbs another reader.  Following one saga, it stops after the
 * saga's last event.  --name needs PostgreSQL only for sagas accepted
 * before the watch began (events other than saga.accepted carry no name). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "sagad/sg_saga_query.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"

/* With --name: every saga id met so far and whether it has that name. */
typedef struct seen_s {
    char *saga_id;
    bool match;
} seen_t;

typedef struct follow_s {
    const ctl_t *c;
    const char *saga_id; /* NULL: every saga */
    const char *name;    /* NULL: any name */
    seen_t *seen;
    size_t nseen;
    sg_pg_t *pg; /* where names of sagas accepted before the watch are asked */
    bool no_pg;  /* PostgreSQL not configured or not reachable: not asked */
} follow_t;

static seen_t *find_seen(const follow_t *f, const char *saga)
{
    for (size_t i = 0; i < f->nseen; i++)
        if (strcmp(f->seen[i].saga_id, saga) == 0)
            return &f->seen[i];
    return NULL;
}

static seen_t *add_seen(follow_t *f, const char *saga, bool match)
{
    f->seen = sg_xrealloc(f->seen, (f->nseen + 1) * sizeof(*f->seen));
    f->seen[f->nseen].saga_id = sg_xstrdup(saga);
    f->seen[f->nseen].match = match;
    return &f->seen[f->nseen++];
}

/* The name of a saga accepted before the watch began, from PostgreSQL
 * when pg.dsn is set and reachable (asked once per saga); else false. */
static bool named_in_pg(follow_t *f, const char *saga)
{
    const char *dsn = sg_config_str(f->c->cfg, "pg.dsn"), *name;
    sg_json_t *row = NULL;
    sg_err_t err;
    bool match;

    if (f->no_pg)
        return false;
    if (!f->pg && (!dsn || !*dsn ||
                   !(f->pg = sg_cmd_pg_new(&f->c->cmd, f->c->cfg, SG_PG_ROLE_RUNTIME, &err)))) {
        sg_cmd_warn(&f->c->cmd,
                    "sagas accepted before the watch began are not shown: their names "
                    "are in PostgreSQL, %s",
                    dsn && *dsn ? "which cannot be reached" : "and pg.dsn is not set");
        f->no_pg = true;
        return false;
    }
    if (sg_saga_status(f->pg, saga, &row, &err) < 0) {
        sg_cmd_warn(&f->c->cmd, "cannot ask PostgreSQL for saga names: %s", err.message);
        f->no_pg = true;
        return false;
    }
    name = sg_json_string(sg_json_member(row, "name"));
    match = name && strcmp(name, f->name) == 0;
    sg_json_destroy(row);
    return match;
}

/* Whether ev is one the watch shows.  A saga's name is on its
 * saga.accepted only: the sagas of --name are learnt from it, and a saga
 * first met on a later event is looked up once. */
static bool wanted(follow_t *f, const sg_json_t *ev)
{
    const char *saga = sg_json_string(sg_json_member(ev, "saga_id"));
    const char *type = sg_json_string(sg_json_member(ev, "type"));
    const char *name = sg_json_string(sg_json_member(ev, "name"));
    seen_t *s;

    if (!saga)
        return false;
    if (f->saga_id)
        return strcmp(saga, f->saga_id) == 0;
    if (!f->name)
        return true;
    if ((s = find_seen(f, saga)))
        return s->match;
    if (type && strcmp(type, "saga.accepted") == 0)
        return add_seen(f, saga, name && strcmp(name, f->name) == 0)->match;
    if (type && strcmp(type, "saga.rejected") == 0)
        return false; /* a submission refused: no saga, no name */
    return add_seen(f, saga, named_in_pg(f, saga))->match;
}

static const char *jstr(const sg_json_t *ev, const char *key)
{
    return sg_json_string(sg_json_member(ev, key));
}

/* TIME  SAGA  #SEQ  TYPE  details: the step, the status, the error. */
static void print_line(const sg_json_t *ev)
{
    char detail[512] = "", *line, *vis;
    double seq = 0, step = -1;
    size_t len;
    const char *v;

    sg_json_number(sg_json_member(ev, "seq"), &seq);
    if (sg_json_number(sg_json_member(ev, "step"), &step))
        snprintf(detail, sizeof(detail), "  step %.0f (%s)", step,
                 jstr(ev, "step_name") ? jstr(ev, "step_name") : "?");
    if ((v = jstr(ev, "group"))) { /* a member's event, or group.finished */
        len = strlen(detail);
        snprintf(detail + len, sizeof(detail) - len, "  group %s", v);
    }
    if ((v = jstr(ev, "name"))) {
        len = strlen(detail);
        snprintf(detail + len, sizeof(detail) - len, "  %s", v);
    }
    if ((v = jstr(ev, "status"))) {
        len = strlen(detail);
        snprintf(detail + len, sizeof(detail) - len, "  %s", v);
    }
    if ((v = jstr(ev, "error_code"))) {
        len = strlen(detail);
        snprintf(detail + len, sizeof(detail) - len, "  %s", v);
    }
    len = strlen(jstr(ev, "saga_id")) + strlen(detail) + 200;
    line = sg_xmalloc(len);
    snprintf(line, len, "%s  %s  #%.0f  %s%s", jstr(ev, "time") ? jstr(ev, "time") : "-",
             jstr(ev, "saga_id"), seq, jstr(ev, "type") ? jstr(ev, "type") : "?", detail);
    vis = sg_text_visible(line, false);
    printf("%s\n", vis);
    free(vis);
    free(line);
}

/* Shows one message; true when it was the followed saga's last event. */
static bool show(const ctl_t *c, follow_t *f, const sg_kafka_msg_t *msg, long *seen)
{
    size_t len;
    const char *payload = sg_kafka_msg_payload(msg, &len);
    sg_json_t *ev = payload ? sg_json_parse(payload, len, NULL, NULL) : NULL;
    bool last = false;

    if (ev && wanted(f, ev)) {
        if (c->cmd.json)
            printf("%.*s\n", (int)len, payload);
        else
            print_line(ev);
        fflush(stdout);
        (*seen)++;
        last = f->saga_id && ctl_event_terminal(jstr(ev, "type"));
    }
    sg_json_destroy(ev);
    return last;
}

static int follow(ctl_t *c, follow_t *f, long max)
{
    ctl_events_t e;
    sg_err_t err;
    long seen = 0;
    int rc = ctl_events_open(c, "sagactl-watch",
                             sg_cli_opt(&c->cmd.args, "--from-beginning") != NULL, &e);

    if (rc) {
        ctl_events_close(&e);
        return rc;
    }
    if (isatty(2))
        fprintf(stderr, "following %s (Ctrl-C stops)\n", e.topic);
    sg_run_trap_signals();
    while (sg_run_running && (max == 0 || seen < max)) {
        sg_kafka_msg_t *msg;
        int got = sg_kafka_consume(e.k, 200, &msg, &err);
        bool last = false;

        if (got < 0 && (err.fatal || sg_kafka_fatal(e.k))) {
            sg_cmd_warn(&c->cmd, "lost %s: %s", e.topic, err.message);
            rc = SG_EXIT_INFRA;
            break;
        }
        if (got == 1) {
            last = show(c, f, msg, &seen);
            sg_kafka_msg_destroy(msg);
        }
        if (last)
            break;
    }
    ctl_events_close(&e);
    return rc;
}

int ctl_cmd_watch(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    follow_t f = {0};
    long max;
    int rc = ctl_open(&c, cli, argc, argv, false);

    if (rc)
        return ctl_close(&c, rc);
    f.name = sg_cli_opt(&c.cmd.args, "--name");
    if (c.cmd.args.npos > 1 || (c.cmd.args.npos == 1 && f.name)) {
        sg_cmd_warn(&c.cmd, "follows one saga ID, or the sagas of one --name, or every saga");
        return ctl_close(&c, SG_EXIT_USAGE);
    }
    if (sg_cmd_opt_long(&c.cmd, "--max", 0, 1000000000L, &max) < 0)
        return ctl_close(&c, SG_EXIT_USAGE);
    f.c = &c;
    f.saga_id = c.cmd.args.npos ? c.cmd.args.pos[0] : NULL;
    rc = follow(&c, &f, max);
    for (size_t i = 0; i < f.nseen; i++)
        free(f.seen[i].saga_id);
    free(f.seen);
    sg_pg_destroy(f.pg);
    return ctl_close(&c, rc);
}
