/* dlq-tool tail: follows the DLQ topic live, one line per new entry.
 * Reads with a throwaway consumer group and commits nothing, so it never
 * disturbs another reader of the topic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_kafka.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"
#include "dlq.h"

static const char *jstr(const sg_json_t *doc, const char *key)
{
    const char *s = sg_json_string(sg_json_member(doc, key));

    return s ? s : "-";
}

static void print_entry(const sg_kafka_msg_t *msg, bool json)
{
    size_t len;
    const char *payload = sg_kafka_msg_payload(msg, &len);
    sg_json_t *doc;
    double id = 0;

    if (!payload)
        return;
    if (json) {
        printf("%.*s\n", (int)len, payload);
    } else if (!(doc = sg_json_parse(payload, len, NULL, NULL))) {
        printf("offset %lld: not a dead-letter record (%zu bytes)\n",
               (long long)sg_kafka_msg_offset(msg), len);
    } else {
        char *saga = sg_text_visible(jstr(doc, "saga_id"), false),
             *step = sg_text_visible(jstr(doc, "step_name"), false),
             *text = sg_text_visible(jstr(doc, "message"), false);
        sg_json_number(sg_json_member(doc, "id"), &id);
        printf("%s  #%.0f  %s (%s)  saga %s  step %s  %s\n", jstr(doc, "created_at"), id,
               jstr(doc, "error_code"), jstr(doc, "error_class"), saga, step, text);
        free(saga);
        free(step);
        free(text);
        sg_json_destroy(doc);
    }
    fflush(stdout);
}

int dlq_cmd_tail(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    char group[96], errstr[512];
    const char *props[] = {"group.id", group, "auto.offset.reset", "latest", "enable.auto.commit",
                           "false",    NULL};
    const char *topic;
    sg_kafka_t *k;
    sg_err_t err;
    long max, seen = 0;
    bool json;
    int rc = dlq_open(&d, cli, argc, argv, false);

    if (rc)
        return sg_cmd_close(&d, rc);
    if (d.args.npos || sg_cmd_opt_long(&d, "--max", 0, 1000000000L, &max) < 0) {
        if (d.args.npos)
            sg_cmd_warn(&d, "takes no arguments (try dlq-tool tail --help)");
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    }
    json = d.json;
    if (sg_cli_opt(&d.args, "--from-beginning"))
        props[3] = "earliest";
    snprintf(group, sizeof(group), "dlq-tool-tail-%ld-%ld", (long)getpid(), (long)sg_run_now_ms());
    topic = sg_config_str(cli->cfg, "topic.dlq");
    if (!(k = sg_kafka_new(cli->cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr)))) {
        sg_cmd_warn(&d, "%s", errstr);
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    }
    if (sg_kafka_subscribe(k, &topic, 1, &err) < 0) {
        sg_cmd_warn(&d, "subscribe to %s: %s", topic, err.message);
        sg_kafka_destroy(k);
        return sg_cmd_close(&d, SG_EXIT_INFRA);
    }
    fprintf(stderr, "following %s (Ctrl-C stops)\n", topic);
    sg_run_trap_signals();
    while (sg_run_running && (max == 0 || seen < max)) {
        sg_kafka_msg_t *msg;
        int got = sg_kafka_consume(k, 200, &msg, &err);

        if (got < 0 && (err.fatal || sg_kafka_fatal(k))) {
            sg_cmd_warn(&d, "%s", err.message);
            rc = SG_EXIT_INFRA;
            break;
        }
        if (got == 1) {
            print_entry(msg, json);
            seen++;
            sg_kafka_msg_destroy(msg);
        }
    }
    sg_kafka_destroy(k);
    return sg_cmd_close(&d, rc);
}
