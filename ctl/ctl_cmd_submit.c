/* sagactl submit FILE|- [--wait] [--timeout DUR]: checks a saga.start with
 * the worker's rules, produces it to the commands topic keyed by its
 * saga_id (librdkafka's idempotent producer, acks=all), and with --wait
 * follows the events topic until the saga ends.
 *
 * The wait cannot miss the outcome however fast the worker is: its
 * consumer is positioned before producing (ctl_events_open), so every
 * event written after the submission is seen. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"

#define DEFAULT_WAIT_MS (5 * 60 * 1000)

typedef struct submission_s {
    char *text; /* what is produced */
    size_t len;
    char saga_id[160], id[160];
    bool generated; /* saga_id or id was made here */
} submission_t;

/* text with "key":"val" added as the object's first member: written into
 * the bytes rather than printed again from a parse, so every other byte
 * (a number cJSON would round, the order of members) is sent as it came.
 * text is a JSON object (checked by the caller).  Caller frees. */
static char *add_member(const char *text, size_t len, const char *key, const char *val,
                        size_t *out_len)
{
    size_t brace = strspn(text, " \t\r\n"), rest = brace + 1, n;
    bool empty;
    char *out;

    while (rest < len && strchr(" \t\r\n", text[rest]))
        rest++;
    empty = rest < len && text[rest] == '}';
    n = len + strlen(key) + strlen(val) + 8;
    out = sg_xmalloc(n);
    *out_len = (size_t)snprintf(out, n, "%.*s\"%s\":\"%s\"%s%.*s", (int)(brace + 1), text, key, val,
                                empty ? "" : ",", (int)(len - brace - 1), text + brace + 1);
    return out;
}

/* Gives the document the ids it lacks (or keeps the producer's bytes
 * whole when it has both, or is not a JSON object: the check says why). */
static void fill_ids(const ctl_t *c, char *text, size_t len, submission_t *s)
{
    static const char *const keys[] = {"saga_id", "id"};
    sg_json_limits_t lim;
    sg_json_t *doc;

    memset(s, 0, sizeof(*s));
    s->text = text;
    s->len = len;
    ctl_limits(c, &lim);
    if (!(doc = sg_json_parse(text, len, &lim, NULL)) || !sg_json_is_object(doc)) {
        sg_json_destroy(doc);
        return;
    }
    for (int i = 0; i < 2; i++) {
        char *out = i == 0 ? s->saga_id : s->id, hex[33];
        const sg_json_t *m = sg_json_member(doc, keys[i]);

        if (m) {
            snprintf(out, sizeof(s->id), "%s", sg_json_string(m) ? sg_json_string(m) : "");
            continue;
        }
        ctl_random_hex(hex, 8);
        snprintf(out, sizeof(s->id), "%s-%s", i == 0 ? "saga" : "msg", hex);
        text = add_member(s->text, s->len, keys[i], out, &len);
        free(s->text);
        s->text = text;
        s->len = len;
        s->generated = true;
    }
    sg_json_destroy(doc);
}

static void print_submitted(const ctl_t *c, const submission_t *s)
{
    const char *topic = sg_config_str(c->cfg, "topic.commands");

    if (c->cmd.json) {
        sg_json_t *o = sg_json_new_object();
        char *t;
        sg_json_add_str(o, "saga_id", s->saga_id);
        sg_json_add_str(o, "id", s->id);
        sg_json_add_str(o, "topic", topic);
        t = sg_json_print(o);
        printf("%s\n", t);
        free(t);
        sg_json_destroy(o);
    } else {
        char *sid = sg_text_visible(s->saga_id, false), *id = sg_text_visible(s->id, false);
        printf("submitted saga %s (message %s) to %s\n", sid, id, topic);
        free(sid);
        free(id);
    }
    fflush(stdout);
}

/* "step 1 (charge) failed tool.http.503" from a run_health block. */
static void describe_failure(const sg_json_t *ev, char *out, size_t size)
{
    const sg_json_t *rh = sg_json_member(ev, "run_health");
    const sg_json_t *bf = sg_json_member(rh, "blocking_failure");
    const char *name = sg_json_string(sg_json_member(bf, "step_name"));
    const char *status = sg_json_string(sg_json_member(bf, "status"));
    const char *code = sg_json_string(sg_json_member(bf, "error_code"));
    double idx = -1, comp = 0;

    out[0] = '\0';
    sg_json_number(sg_json_member(rh, "compensated"), &comp);
    if (!name)
        return;
    sg_json_number(sg_json_member(bf, "step"), &idx);
    snprintf(out, size, ": step %.0f (%s) %s%s%s; %.0f step%s compensated", idx, name,
             status ? status : "failed", code ? " " : "", code ? code : "", comp,
             comp == 1 ? "" : "s");
}

/* The status a saga.duplicate answers with, when the saga is finished. */
static const char *duplicate_done(const sg_json_t *ev)
{
    const char *st = sg_json_string(sg_json_member(ev, "status"));
    static const char *const done[] = {"completed", "compensated", "failed", "cancelled"};

    for (size_t i = 0; st && i < sizeof(done) / sizeof(done[0]); i++)
        if (strcmp(st, done[i]) == 0)
            return st;
    return NULL;
}

/* Prints the outcome event; its exit code. */
static int print_outcome(const ctl_t *c, const sg_json_t *ev, const char *raw, size_t len)
{
    const char *type = sg_json_string(sg_json_member(ev, "type"));
    const char *status = strchr(type, '.') + 1;
    bool again = strcmp(type, "saga.duplicate") == 0;

    if (again) /* the saga was submitted before and is finished */
        status = duplicate_done(ev);
    const sg_json_t *output = sg_json_member(ev, "output");
    char *sid = sg_text_visible(sg_json_string(sg_json_member(ev, "saga_id")), false);
    char detail[512] = "";

    if (c->cmd.json) {
        printf("%.*s\n", (int)len, raw);
    } else if (strcmp(type, "saga.rejected") == 0) {
        const sg_json_t *probs = sg_json_member(ev, "problems");
        const char *code = sg_json_string(sg_json_member(ev, "error_code"));
        printf("saga %s rejected (%s)\n", sid, code ? code : "?");
        for (const sg_json_t *p = sg_json_first(probs); p; p = sg_json_next(p)) {
            char *path = sg_text_visible(sg_json_string(sg_json_member(p, "path")), false);
            char *rule = sg_text_visible(sg_json_string(sg_json_member(p, "rule")), false);
            printf("  %s: %s\n", path, rule);
            free(path);
            free(rule);
        }
    } else {
        const sg_json_t *rh = sg_json_member(ev, "run_health");
        double ok = 0, total = 0;
        sg_json_number(sg_json_member(rh, "ok"), &ok);
        sg_json_number(sg_json_member(rh, "steps_total"), &total);
        if (strcmp(status, "completed") == 0)
            snprintf(detail, sizeof(detail), ": %.0f of %.0f steps ok", ok, total);
        else
            describe_failure(ev, detail, sizeof(detail));
        printf("saga %s %s%s%s\n", sid, status, detail,
               again ? " (submitted before; this submission changed nothing)" : "");
        if (output) {
            char *o = sg_json_print(output), *vis = sg_text_visible(o, false);
            printf("output: %s\n", vis);
            free(o);
            free(vis);
        }
    }
    free(sid);
    fflush(stdout);
    return strcmp(status, "completed") == 0 ? SG_EXIT_OK : SG_EXIT_FAIL;
}

/* The event ends this submission: a terminal event of the saga, or the
 * rejection of this very message (another submission with the same
 * saga_id may be rejected too). */
static bool ends(const sg_json_t *ev, const submission_t *s)
{
    const char *type = sg_json_string(sg_json_member(ev, "type"));
    const char *saga = sg_json_string(sg_json_member(ev, "saga_id"));
    const char *sub = sg_json_string(sg_json_member(ev, "submission_id"));

    if (!saga || strcmp(saga, s->saga_id) != 0)
        return false;
    /* The answer to this very submission sent again: it ends the wait
     * when the saga is finished; else its terminal event will. */
    if (type && strcmp(type, "saga.duplicate") == 0)
        return sub && strcmp(sub, s->id) == 0 && duplicate_done(ev);
    if (!ctl_event_terminal(type))
        return false;
    return strcmp(type, "saga.rejected") != 0 || !sub || strcmp(sub, s->id) == 0;
}

static int wait_outcome(const ctl_t *c, ctl_events_t *w, const submission_t *s,
                        uint64_t deadline_ms)
{
    sg_err_t err;

    if (isatty(2))
        fprintf(stderr, "waiting for the outcome on %s (Ctrl-C stops waiting)\n", w->topic);
    while (sg_run_running && sg_run_now_ms() < deadline_ms) {
        sg_kafka_msg_t *msg;
        int got = sg_kafka_consume(w->k, 200, &msg, &err);

        if (got < 0 && (err.fatal || sg_kafka_fatal(w->k))) {
            sg_cmd_warn(&c->cmd, "lost %s: %s", w->topic, err.message);
            return SG_EXIT_INFRA;
        }
        if (got == 1) {
            size_t len;
            const char *payload = sg_kafka_msg_payload(msg, &len);
            sg_json_t *ev = payload ? sg_json_parse(payload, len, NULL, NULL) : NULL;
            int rc = -1;
            if (ev && ends(ev, s))
                rc = print_outcome(c, ev, payload, len);
            sg_json_destroy(ev);
            sg_kafka_msg_destroy(msg);
            if (rc >= 0)
                return rc;
        }
    }
    sg_cmd_warn(&c->cmd, "saga %s has not finished in time; it goes on (sagactl status %s)",
                s->saga_id, s->saga_id);
    return CTL_EXIT_TIMEOUT;
}

static int submit(ctl_t *c, const sg_registry_t *reg, char *text, size_t len)
{
    bool wait = sg_cli_opt(&c->cmd.args, "--wait") != NULL;
    uint64_t started = sg_run_now_ms();
    sg_problems_t p;
    submission_t s;
    ctl_events_t w = {0};
    int64_t timeout_ms;
    int rc;

    if (sg_cmd_opt_duration(&c->cmd, "--timeout", DEFAULT_WAIT_MS, &timeout_ms) < 0) {
        free(text);
        return SG_EXIT_USAGE;
    }
    fill_ids(c, text, len, &s);
    if (ctl_check(c, s.text, s.len, reg, &p) > 0) {
        ctl_problems_print(&p, c->cmd.json);
        sg_cmd_warn(&c->cmd, "refused, nothing sent (%s): %zu problem%s", p.code, p.n,
                    p.n == 1 ? "" : "s");
        sg_problems_free(&p);
        free(s.text);
        return SG_EXIT_REFUSED;
    }
    if (p.nw && !c->cmd.json)
        ctl_problems_print(&p, false); /* the warnings, on stderr */
    sg_problems_free(&p);
    sg_run_trap_signals();
    if ((!wait || !(rc = ctl_events_open(c, "sagactl-wait", false, &w))) &&
        !(rc = ctl_produce_command(c, s.saga_id, s.text, s.len, timeout_ms))) {
        print_submitted(c, &s);
        if (wait)
            rc = wait_outcome(c, &w, &s, started + (uint64_t)timeout_ms);
    }
    ctl_events_close(&w);
    free(s.text);
    return rc;
}

int ctl_cmd_submit(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    sg_registry_t *reg;
    const char *path;
    char *text;
    size_t len;
    int rc = ctl_open(&c, cli, argc, argv, false);

    if (rc)
        return ctl_close(&c, rc);
    if (!(path = sg_cmd_one_arg(&c.cmd, "FILE (or - for standard input)")))
        return ctl_close(&c, SG_EXIT_USAGE);
    if (!(reg = ctl_registry(&c)))
        return ctl_close(&c, SG_EXIT_USAGE);
    text = ctl_read_input(&c, path, (size_t)sg_config_int(c.cfg, "limits.max_message_bytes"), &len);
    rc = text ? submit(&c, reg, text, len) : len == SIZE_MAX ? SG_EXIT_REFUSED : SG_EXIT_USAGE;
    sg_registry_destroy(reg);
    return ctl_close(&c, rc);
}
