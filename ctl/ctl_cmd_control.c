/* sagactl cancel, approve and reject: the control commands saga.cancel,
 * saga.approve and saga.reject (DESIGN.md section 10).
 *
 * cancel sends saga.cancel {v, type, id, saga_id, by, reason} to the
 * commands topic keyed by the saga id (schemas/control-command.schema.json),
 * checked first with the worker's own decoder; with --wait it follows the
 * events topic for the answer: saga.command_refused (why the saga cannot
 * be cancelled), or saga.cancelling and then the saga's terminal event.
 *
 * approve and reject refuse, sending nothing: the worker does not handle
 * approval gates yet (issue 25), and a command it cannot answer would leave
 * the operator waiting on silence.  Their arguments are final. */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "sagad/sg_run.h"
#include "sagad/sg_submit.h"
#include "sagad/sg_text.h"

#define DEFAULT_WAIT_MS (5 * 60 * 1000)

/* The operator: --by, else the login name; NULL when neither is known. */
static const char *operator_name(const ctl_t *c)
{
    const char *v = sg_cli_opt(&c->args, "--by");
    struct passwd *pw;

    if (v && *v)
        return v;
    if ((v = getlogin()) && *v)
        return v;
    pw = getpwuid(getuid());
    return pw && pw->pw_name[0] ? pw->pw_name : NULL;
}

/* The saga.cancel message (caller frees), or NULL after saying why: the
 * worker's decoder refuses it (a saga id of the wrong shape, a reason too
 * long), so nothing would be carried out. */
static char *cancel_message(const ctl_t *c, const char *saga_id, const char *by, const char *reason,
                            char *id, size_t id_size)
{
    sg_json_limits_t lim;
    sg_json_t *m = sg_json_new_object();
    sg_decoded_t dec;
    char hex[17];
    char *text;

    ctl_random_hex(hex, 8);
    snprintf(id, id_size, "cancel-%s", hex);
    sg_json_add_int(m, "v", 1);
    sg_json_add_str(m, "type", "saga.cancel");
    sg_json_add_str(m, "id", id);
    sg_json_add_str(m, "saga_id", saga_id);
    sg_json_add_str(m, "by", by);
    sg_json_add_str(m, "reason", reason);
    text = sg_json_print(m);
    sg_json_destroy(m);
    ctl_limits(c, &lim);
    sg_submit_decode(text, strlen(text), &lim, &dec);
    sg_json_destroy(dec.doc);
    if (dec.type != SG_CMD_CANCEL) {
        ctl_warn(c, "refused, nothing sent: %s", dec.err.message);
        free(text);
        return NULL;
    }
    return text;
}

/* What the event means for this cancel: 0 not ours, 1 accepted (wait on),
 * 2 the end (rc set). */
static int answer(const ctl_t *c, const sg_json_t *ev, const char *raw, size_t len,
                  const char *saga_id, const char *id, bool accepted, int *rc)
{
    const char *type = sg_json_string(sg_json_member(ev, "type"));
    const char *saga = sg_json_string(sg_json_member(ev, "saga_id"));
    const char *cid = sg_json_string(sg_json_member(ev, "command_id"));
    bool mine = cid && strcmp(cid, id) == 0;
    char *vis;

    if (!type || !saga || strcmp(saga, saga_id) != 0)
        return 0;
    vis = sg_text_visible(saga_id, false);
    if (mine && strcmp(type, "saga.command_refused") == 0) {
        const char *msg = sg_json_string(sg_json_member(ev, "message"));
        if (c->json)
            printf("%.*s\n", (int)len, raw);
        else
            printf("saga %s not cancelled: %s\n", vis, msg ? msg : "refused");
        *rc = SG_EXIT_FAIL;
        free(vis);
        return 2;
    }
    if (mine && strcmp(type, "saga.cancelling") == 0) {
        if (c->json)
            printf("%.*s\n", (int)len, raw);
        else
            printf("saga %s cancelling: compensating what it did\n", vis);
        fflush(stdout);
        free(vis);
        return 1;
    }
    if (accepted && ctl_event_terminal(type)) {
        if (c->json)
            printf("%.*s\n", (int)len, raw);
        else
            printf("saga %s %s\n", vis, strchr(type, '.') + 1);
        *rc = strcmp(type, "saga.cancelled") == 0 ? SG_EXIT_OK : SG_EXIT_FAIL;
        free(vis);
        return 2;
    }
    free(vis);
    return 0;
}

static int wait_answer(const ctl_t *c, ctl_events_t *w, const char *saga_id, const char *id,
                       uint64_t deadline_ms)
{
    bool accepted = false;
    sg_err_t err;

    while (sg_run_running && sg_run_now_ms() < deadline_ms) {
        sg_kafka_msg_t *msg;
        int got = sg_kafka_consume(w->k, 200, &msg, &err), rc = -1;

        if (got < 0 && (err.fatal || sg_kafka_fatal(w->k))) {
            ctl_warn(c, "lost %s: %s", w->topic, err.message);
            return SG_EXIT_INFRA;
        }
        if (got == 1) {
            size_t len;
            const char *payload = sg_kafka_msg_payload(msg, &len);
            sg_json_t *ev = payload ? sg_json_parse(payload, len, NULL, NULL) : NULL;
            int what = ev ? answer(c, ev, payload, len, saga_id, id, accepted, &rc) : 0;
            sg_json_destroy(ev);
            sg_kafka_msg_destroy(msg);
            if (what == 2)
                return rc;
            accepted = accepted || what == 1;
        }
    }
    ctl_warn(c, "no %s within --timeout; the cancel stands (sagactl status %s)",
             accepted ? "end of the cancelled saga" : "answer", saga_id);
    return CTL_EXIT_TIMEOUT;
}

static int cancel(ctl_t *c, const char *saga_id, const char *by, const char *reason)
{
    bool wait = sg_cli_opt(&c->args, "--wait") != NULL;
    uint64_t started = sg_run_now_ms();
    ctl_events_t w = {0};
    int64_t timeout_ms;
    char id[64], *text;
    int rc;

    if (ctl_opt_duration(c, "--timeout", DEFAULT_WAIT_MS, &timeout_ms) < 0)
        return SG_EXIT_USAGE;
    if (!(text = cancel_message(c, saga_id, by, reason, id, sizeof(id))))
        return SG_EXIT_REFUSED;
    sg_run_trap_signals();
    if ((!wait || !(rc = ctl_events_open(c, "sagactl-wait", false, &w))) &&
        !(rc = ctl_produce_command(c, saga_id, text, strlen(text), timeout_ms))) {
        char *vis = sg_text_visible(saga_id, false);
        if (!c->json)
            printf("sent saga.cancel %s for saga %s to %s\n", id, vis,
                   sg_config_str(c->cfg, "topic.commands"));
        fflush(stdout);
        free(vis);
        if (wait)
            rc = wait_answer(c, &w, saga_id, id, started + (uint64_t)timeout_ms);
    }
    ctl_events_close(&w);
    free(text);
    return rc;
}

int ctl_cmd_control(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    const char *verb = cli->cmd->name, *by;
    size_t want = strcmp(verb, "cancel") == 0 ? 1 : 2;
    const char *reason;
    int rc = ctl_open(&c, cli, argc, argv, false);

    if (rc)
        return ctl_close(&c, rc);
    reason = sg_cli_opt(&c.args, "--reason");
    if (c.args.npos != want || !reason || !*reason) {
        ctl_warn(&c, "needs %s and --reason TEXT (try sagactl %s --help)",
                 want == 1 ? "a saga ID" : "a saga ID, a STEP", verb);
        return ctl_close(&c, SG_EXIT_USAGE);
    }
    if (!(by = operator_name(&c))) {
        ctl_warn(&c, "who is asking? no --by and no login name: refused");
        return ctl_close(&c, SG_EXIT_REFUSED);
    }
    if (want == 1)
        return ctl_close(&c, cancel(&c, c.args.pos[0], by, reason));
    ctl_warn(&c,
             "not available yet: the worker does not handle saga.%s (approval gates, issue 25), "
             "so nothing was sent to saga %s",
             verb, c.args.pos[0]);
    return ctl_close(&c, SG_EXIT_REFUSED);
}
