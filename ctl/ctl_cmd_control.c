/* sagactl cancel, approve and reject: the control commands saga.cancel,
 * saga.approve and saga.reject (DESIGN.md section 10).
 *
 * Each sends its command {v, type, id, saga_id, [step,] by, reason} to the
 * commands topic keyed by the saga id (schemas/control-command.schema.json),
 * checked first with the worker's own decoder; with --wait it follows the
 * events topic for the answer to that command's id: saga.command_refused
 * (why it cannot be carried out), step.approved / step.rejected, or
 * saga.cancelling and then the saga's terminal event. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "sagad/sg_run.h"
#include "sagad/sg_submit.h"
#include "sagad/sg_text.h"

#define DEFAULT_WAIT_MS (5 * 60 * 1000)

/* The command's message (caller frees), or NULL after saying why: the
 * worker's decoder refuses it (a saga id of the wrong shape, a reason too
 * long), so nothing would be carried out.  step (approve, reject): all
 * digits is an index, else a name. */
static char *control_message(const ctl_t *c, const char *verb, const char *saga_id,
                             const char *step, const char *by, const char *reason, char *id,
                             size_t id_size)
{
    sg_json_limits_t lim;
    sg_json_t *m = sg_json_new_object();
    sg_decoded_t dec;
    char hex[17], type[32];
    char *text;

    ctl_random_hex(hex, 8);
    snprintf(id, id_size, "%s-%s", verb, hex);
    snprintf(type, sizeof(type), "saga.%s", verb);
    sg_json_add_int(m, "v", 1);
    sg_json_add_str(m, "type", type);
    sg_json_add_str(m, "id", id);
    sg_json_add_str(m, "saga_id", saga_id);
    if (step && *step && strspn(step, "0123456789") == strlen(step) && strlen(step) < 6)
        sg_json_add_int(m, "step", atoi(step));
    else if (step)
        sg_json_add_str(m, "step", step);
    sg_json_add_str(m, "by", by);
    sg_json_add_str(m, "reason", reason);
    text = sg_json_print(m);
    sg_json_destroy(m);
    ctl_limits(c, &lim);
    sg_submit_decode(text, strlen(text), &lim, &dec);
    sg_json_destroy(dec.doc);
    if (dec.type != SG_CMD_CANCEL && dec.type != SG_CMD_APPROVE && dec.type != SG_CMD_REJECT) {
        sg_cmd_warn(&c->cmd, "refused, nothing sent: %s", dec.err.message);
        free(text);
        return NULL;
    }
    return text;
}

/* What the event means for this command: 0 not ours, 1 a cancel accepted
 * (wait on for the saga's end), 2 the end (rc set). */
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
        if (c->cmd.json)
            printf("%.*s\n", (int)len, raw);
        else
            printf("saga %s: refused: %s\n", vis, msg ? msg : "?");
        *rc = SG_EXIT_FAIL;
        free(vis);
        return 2;
    }
    if (mine && (strcmp(type, "step.approved") == 0 || strcmp(type, "step.rejected") == 0)) {
        const char *name = sg_json_string(sg_json_member(ev, "step_name"));
        if (c->cmd.json)
            printf("%.*s\n", (int)len, raw);
        else
            printf("saga %s step %s %s\n", vis, name ? name : "?", strchr(type, '.') + 1);
        *rc = SG_EXIT_OK;
        free(vis);
        return 2;
    }
    if (mine && strcmp(type, "saga.cancelling") == 0) {
        if (c->cmd.json)
            printf("%.*s\n", (int)len, raw);
        else
            printf("saga %s cancelling: compensating what it did\n", vis);
        fflush(stdout);
        free(vis);
        return 1;
    }
    if (accepted && ctl_event_terminal(type)) {
        if (c->cmd.json)
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
            sg_cmd_warn(&c->cmd, "lost %s: %s", w->topic, err.message);
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
    sg_cmd_warn(&c->cmd, "no %s within --timeout; the command stands (sagactl status %s)",
                accepted ? "end of the cancelled saga" : "answer", saga_id);
    return CTL_EXIT_TIMEOUT;
}

static int send_control(ctl_t *c, const char *verb, const char *saga_id, const char *step,
                        const char *by, const char *reason)
{
    bool wait = sg_cli_opt(&c->cmd.args, "--wait") != NULL;
    uint64_t started = sg_run_now_ms();
    ctl_events_t w = {0};
    int64_t timeout_ms;
    char id[80], *text;
    int rc;

    if (sg_cmd_opt_duration(&c->cmd, "--timeout", DEFAULT_WAIT_MS, &timeout_ms) < 0)
        return SG_EXIT_USAGE;
    if (!(text = control_message(c, verb, saga_id, step, by, reason, id, sizeof(id))))
        return SG_EXIT_REFUSED;
    sg_run_trap_signals();
    if ((!wait || !(rc = ctl_events_open(c, "sagactl-wait", false, &w))) &&
        !(rc = ctl_produce_command(c, saga_id, text, strlen(text), timeout_ms))) {
        char *vis = sg_text_visible(saga_id, false);
        if (!c->cmd.json)
            printf("sent saga.%s %s for saga %s to %s\n", verb, id, vis,
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
    reason = sg_cli_opt(&c.cmd.args, "--reason");
    if (c.cmd.args.npos != want || !reason || !*reason) {
        sg_cmd_warn(&c.cmd, "needs %s and --reason TEXT (try sagactl %s --help)",
                    want == 1 ? "a saga ID" : "a saga ID, a STEP", verb);
        return ctl_close(&c, SG_EXIT_USAGE);
    }
    if (!(by = sg_cmd_by(&c.cmd))) {
        sg_cmd_warn(&c.cmd, "who is asking? no --by, no $USER and no login name: refused");
        return ctl_close(&c, SG_EXIT_REFUSED);
    }
    return ctl_close(&c, send_control(&c, verb, c.cmd.args.pos[0],
                                      want == 2 ? c.cmd.args.pos[1] : NULL, by, reason));
}
