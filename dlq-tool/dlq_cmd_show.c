/* dlq-tool show ID: the whole record, the payload pretty-printed, the
 * attempt trail as a table, the saga's steps then and now, and the
 * replays: all of it from one document, sg_dlq_show's, which --json
 * prints as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlq.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_table.h"
#include "sagad/sg_text.h"
#include "sagad/sg_timeline.h"

/* A line "  label  value" for each member present: of the record, of its
 * original (topic, partition, ...) or of the document itself. */
static const struct {
    const char *label, *in, *key;
    sg_cell_t cell;
} fields[] = {
    {"status", "record", "status", SG_CELL_TEXT},
    {"created", "record", "created_at", SG_CELL_TIME_MS},
    {"error", "record", "error_code", SG_CELL_TEXT},
    {"class", "record", "error_class", SG_CELL_TEXT},
    {"message", "record", "message", SG_CELL_TEXT},
    {"agent action", "record", "agent_action", SG_CELL_TEXT},
    {"saga", "record", "saga_id", SG_CELL_TEXT},
    {"saga name", "record", "saga_name", SG_CELL_TEXT},
    {"step", "record", "step step_name", SG_CELL_TEXT},
    {"tool", "record", "tool", SG_CELL_TEXT},
    {"phase", "record", "phase", SG_CELL_TEXT},
    {"attempts", "record", "attempts", SG_CELL_TEXT},
    {"first failure", "record", "first_failure_at", SG_CELL_TIME_MS},
    {"last failure", "record", "last_failure_at", SG_CELL_TIME_MS},
    {"topic", "original", "topic", SG_CELL_TEXT},
    {"partition", "original", "partition", SG_CELL_TEXT},
    {"offset", "original", "offset", SG_CELL_TEXT},
    {"key", "original", "key", SG_CELL_TEXT},
    {"key (base64)", "original", "key_base64", SG_CELL_TEXT},
    {"timestamp", "original", "timestamp", SG_CELL_TIME_MS},
    {"headers", "original", "headers", SG_CELL_TEXT},
    {"worker", "record", "worker_id", SG_CELL_TEXT},
    {"sagad version", "record", "sagad_version", SG_CELL_TEXT},
    {"resolved", "doc", "resolved_at", SG_CELL_TIME_MS},
    {"resolved by", "doc", "resolved_by", SG_CELL_TEXT},
    {"resolution", "doc", "resolution_reason", SG_CELL_TEXT},
    {"saga now", "saga", "status", SG_CELL_TEXT},
    {"generation now", "saga", "generation", SG_CELL_TEXT},
    {"updated", "saga", "updated_at", SG_CELL_TIME_MS},
};

static const sg_table_col_t trail_cols[] = {
    {"ATTEMPT", "attempt", SG_CELL_TEXT}, {"STARTED (UTC)", "started_at", SG_CELL_TIME_MS},
    {"STATUS", "status", SG_CELL_TEXT},   {"CLASS", "error_class", SG_CELL_TEXT},
    {"CODE", "error_code", SG_CELL_TEXT}, {"LATENCY_MS", "latency_ms", SG_CELL_TEXT},
    {"MESSAGE", "message", SG_CELL_LINE}, {NULL, NULL, SG_CELL_TEXT},
};

static const sg_table_col_t replay_cols[] = {
    {"REPLAY", "id", SG_CELL_TEXT},          {"AT (UTC)", "created_at", SG_CELL_TIME},
    {"OPERATOR", "operator", SG_CELL_TEXT},  {"ACTION", "action", SG_CELL_TEXT},
    {"GEN", "new_generation", SG_CELL_TEXT}, {"KEY", "new_key", SG_CELL_TEXT},
    {"KEPT", "kept_steps", SG_CELL_TEXT},    {"REPEATED", "repeated_steps", SG_CELL_TEXT},
    {"REASON", "reason", SG_CELL_LINE},      {NULL, NULL, SG_CELL_TEXT},
};

static void print_fields(const sg_json_t *doc)
{
    const sg_json_t *rec = sg_json_member(doc, "record");

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const char *in = fields[i].in;
        const sg_json_t *o = strcmp(in, "record") == 0     ? rec
                             : strcmp(in, "original") == 0 ? sg_json_member(rec, "original")
                             : strcmp(in, "saga") == 0     ? sg_json_member(doc, "saga")
                                                           : doc;
        char *v = sg_table_cell(o, fields[i].key, fields[i].cell), *shown;

        if (v && *v) {
            /* Producer data: shown, never obeyed. */
            shown = sg_text_visible(v, false);
            printf("  %-14s %s\n", fields[i].label, shown);
            free(shown);
        }
        free(v);
    }
}

/* The payload replay would send: the latest revision, else the original
 * (base64 when it is not UTF-8). */
static void print_payload(const sg_json_t *doc)
{
    const sg_json_t *rec = sg_json_member(doc, "record"), *revs = sg_json_member(doc, "revisions");
    size_t nrev = sg_json_array_size(revs);
    const sg_json_t *latest = nrev ? sg_json_array_get(revs, nrev - 1) : NULL;
    const char *text = sg_json_string(sg_json_member(latest ? latest : rec, "payload"));
    sg_json_t *parsed;

    if (latest) {
        char *which = sg_table_cell(latest, "revision", SG_CELL_TEXT);
        char *by = sg_text_visible(sg_json_string(sg_json_member(latest, "operator")), false);
        printf("\npayload (revision %s by %s):\n", which ? which : "?", by);
        free(which);
        free(by);
    } else {
        printf("\npayload (original):\n");
    }
    if (!text) {
        const char *b64 = sg_json_string(sg_json_member(rec, "payload_base64"));
        printf("  not UTF-8; base64:\n  %s\n", b64 ? b64 : "(not kept)");
        return;
    }
    if ((parsed = sg_json_parse_exact(text, strlen(text), NULL))) {
        char *pretty = sg_json_print_pretty(parsed);
        printf("%s\n", pretty);
        free(pretty);
        sg_json_destroy(parsed);
    } else {
        /* Shown, not obeyed: control characters other than line breaks
         * and tabs come out as \xHH (the JSON above is escaped already). */
        char *shown = sg_text_visible(text, true);
        printf("  not JSON, as received:\n%s\n", shown);
        free(shown);
    }
}

/* "1 2 3": the steps of a replay's plan list; NULL when it is empty. */
static char *plan_steps(const sg_json_t *list)
{
    size_t cap = 24 * sg_json_array_size(list) + 1, len = 0;
    char *out;

    if (sg_json_array_size(list) == 0)
        return NULL;
    out = sg_xcalloc(1, cap);
    for (const sg_json_t *e = sg_json_first(list); e; e = sg_json_next(e)) {
        char *step = sg_table_cell(e, "step", SG_CELL_TEXT);
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? " " : "", step ? step : "?");
        free(step);
    }
    return out;
}

static void print_replays(const sg_json_t *replays)
{
    sg_table_t *t = sg_table_new_cols(replay_cols);

    for (const sg_json_t *r = sg_json_first(replays); r; r = sg_json_next(r)) {
        sg_json_t *row = sg_json_dup(r);
        char *kept = plan_steps(sg_json_member(r, "kept"));
        char *rep = plan_steps(sg_json_member(r, "repeats"));

        if (kept)
            sg_json_add_str(row, "kept_steps", kept);
        if (rep)
            sg_json_add_str(row, "repeated_steps", rep);
        sg_table_add_json(t, replay_cols, row);
        sg_json_destroy(row);
        free(kept);
        free(rep);
    }
    printf("\nreplays:\n");
    sg_table_print(t, stdout, 80);
    sg_table_destroy(t);
}

/* A heading and a table, when rows has any. */
static void section(const char *title, const sg_table_col_t *cols, const sg_json_t *rows)
{
    if (sg_json_array_size(rows) == 0)
        return;
    printf("\n%s:\n", title);
    sg_table_print_rows(stdout, cols, rows, 80);
}

static void show_human(const sg_json_t *doc)
{
    const sg_json_t *rec = sg_json_member(doc, "record");
    char *id = sg_table_cell(rec, "id", SG_CELL_TEXT);

    printf("dead letter %s (times in UTC)\n", id ? id : "?");
    free(id);
    print_fields(doc);
    print_payload(doc);
    section("attempt trail", trail_cols, sg_json_member(rec, "trail"));
    section("saga steps when dead-lettered", sg_timeline_step_cols,
            sg_json_member(doc, "steps_at"));
    section("saga steps now", sg_timeline_step_cols,
            sg_json_member(sg_json_member(doc, "saga"), "steps"));
    if (sg_json_array_size(sg_json_member(doc, "replays")))
        print_replays(sg_json_member(doc, "replays"));
}

int dlq_cmd_show(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    sg_json_t *doc = NULL;
    sg_err_t err;
    int64_t id;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return sg_cmd_close(&d, rc);
    if (dlq_one_id(&d, &id) < 0)
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    if (sg_dlq_show(d.pg, id, &doc, &err) < 0) {
        rc = sg_cmd_fail(&d, "query failed", &err);
    } else if (!doc) {
        sg_cmd_warn(&d, "no dead letter %lld", (long long)id);
        rc = SG_EXIT_FAIL;
    } else if (d.json) {
        sg_cmd_print_json(doc);
    } else {
        show_human(doc);
    }
    sg_json_destroy(doc);
    return sg_cmd_close(&d, rc);
}
