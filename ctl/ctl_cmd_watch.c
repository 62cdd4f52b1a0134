/* sagactl watch [ID | --name N]: follows the events topic live, one
 * decoded line per event (--json: the event as it came), like kcat -C.
 * Reads with a throwaway consumer group and commits nothing, so it never
 * disturbs another reader.  Following one saga, it stops after the
 * saga's last event. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"

typedef struct follow_s {
    const char *saga_id; /* NULL: every saga */
    const char *name;    /* NULL: any name */
    char **ids;          /* with name: the sagas seen accepted under it */
    size_t nids;
} follow_t;

static bool known(const follow_t *f, const char *saga)
{
    for (size_t i = 0; i < f->nids; i++)
        if (strcmp(f->ids[i], saga) == 0)
            return true;
    return false;
}

/* Whether ev is one the watch shows; learns the sagas of --name from
 * their saga.accepted (the only event that carries the name). */
static bool wanted(follow_t *f, const sg_json_t *ev)
{
    const char *saga = sg_json_string(sg_json_member(ev, "saga_id"));
    const char *type = sg_json_string(sg_json_member(ev, "type"));
    const char *name = sg_json_string(sg_json_member(ev, "name"));

    if (!saga)
        return false;
    if (f->saga_id)
        return strcmp(saga, f->saga_id) == 0;
    if (!f->name)
        return true;
    if (type && strcmp(type, "saga.accepted") == 0 && name && strcmp(name, f->name) == 0 &&
        !known(f, saga)) {
        if (!(f->ids = realloc(f->ids, (f->nids + 1) * sizeof(*f->ids))) ||
            !(f->ids[f->nids] = strdup(saga)))
            abort();
        f->nids++;
    }
    return known(f, saga);
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
    if (!(line = malloc(len)))
        abort();
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
        if (c->json)
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
    char group[96], errstr[512];
    const char *props[] = {"group.id", group, "auto.offset.reset", "latest", NULL};
    const char *topic = sg_config_str(c->cfg, "topic.events");
    sg_kafka_t *k;
    sg_err_t err;
    long seen = 0;
    int rc = SG_EXIT_OK;

    if (sg_cli_opt(&c->args, "--from-beginning"))
        props[3] = "earliest";
    snprintf(group, sizeof(group), "sagactl-watch-%ld-%llu", (long)getpid(),
             (unsigned long long)sg_run_now_ms());
    if (!(k = sg_kafka_new(c->cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr)))) {
        ctl_warn(c, "%s", errstr);
        return SG_EXIT_USAGE;
    }
    if (sg_kafka_partition_count(k, topic, 10000) <= 0) {
        ctl_warn(c, "cannot read the events topic %s: Kafka unreachable or no such topic", topic);
        sg_kafka_destroy(k);
        return SG_EXIT_INFRA;
    }
    if (sg_kafka_subscribe(k, &topic, 1, &err) < 0) {
        ctl_warn(c, "cannot follow %s: %s", topic, err.message);
        sg_kafka_destroy(k);
        return SG_EXIT_INFRA;
    }
    if (isatty(2))
        fprintf(stderr, "following %s (Ctrl-C stops)\n", topic);
    sg_run_trap_signals();
    while (sg_run_running && (max == 0 || seen < max)) {
        sg_kafka_msg_t *msg;
        int got = sg_kafka_consume(k, 200, &msg, &err);
        bool last = false;

        if (got < 0 && (err.fatal || sg_kafka_fatal(k))) {
            ctl_warn(c, "lost %s: %s", topic, err.message);
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
    sg_kafka_destroy(k);
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
    f.name = sg_cli_opt(&c.args, "--name");
    if (c.args.npos > 1 || (c.args.npos == 1 && f.name)) {
        ctl_warn(&c, "follows one saga ID, or the sagas of one --name, or every saga");
        return ctl_close(&c, SG_EXIT_USAGE);
    }
    if (ctl_opt_long(&c, "--max", 0, 1000000000L, &max) < 0)
        return ctl_close(&c, SG_EXIT_USAGE);
    f.saga_id = c.args.npos ? c.args.pos[0] : NULL;
    rc = follow(&c, &f, max);
    for (size_t i = 0; i < f.nids; i++)
        free(f.ids[i]);
    free(f.ids);
    return ctl_close(&c, rc);
}
