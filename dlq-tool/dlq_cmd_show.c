/* dlq-tool show ID: the whole record, the payload pretty-printed, the
 * attempt trail as a table, and the saga's current state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlq.h"
#include "sagad/sg_text.h"

/* The --json document: the DLQ record plus what happened since. */
static const char show_json_sql[] =
    "SELECT jsonb_build_object('record', sagad_dead_letter_record(d), "
    "'resolved_at', d.resolved_at, 'resolution_reason', d.resolution_reason, "
    "'resolved_by', d.resolved_by, "
    "'revisions', coalesce((SELECT jsonb_agg(jsonb_build_object('revision', v.revision, "
    "  'operator', v.operator, 'reason', v.reason, 'created_at', v.created_at, "
    "  'payload', sagad_utf8(v.payload)) ORDER BY v.revision) FROM dead_letter_revisions v "
    "  WHERE v.dead_letter_id = d.id), '[]'), "
    "'replays', coalesce((SELECT jsonb_agg(jsonb_build_object('id', r.id, 'operator', "
    "  r.operator, 'reason', r.reason, 'created_at', r.created_at, 'action', r.action, "
    "  'new_generation', r.new_generation, 'new_key', r.new_key, 'revision', r.revision, "
    "  'forced', r.forced, 'rerun_from', r.rerun_from, 'kept', r.kept, 'repeats', r.repeats) "
    "  ORDER BY r.id) FROM replays r WHERE r.dead_letter_id = d.id), '[]'), "
    "'steps_at', d.steps_at, "
    "'saga', (SELECT jsonb_build_object('saga_id', s.saga_id, 'name', s.name, 'status', "
    "  s.status, 'generation', s.generation, 'updated_at', s.updated_at, 'steps', "
    "  (SELECT jsonb_agg(jsonb_build_object('step', st.idx, 'name', st.name, 'tool', st.tool, "
    "   'status', st.status, 'attempts', st.attempts, 'comp_attempts', st.comp_attempts, "
    "   'idempotency_key', st.idempotency_key, 'error_code', st.error_code) ORDER BY st.idx) "
    "   FROM steps st WHERE st.saga_id = s.saga_id)) FROM sagas s WHERE s.saga_id = d.saga_id)"
    ")::text FROM dead_letters d WHERE d.id = $1::bigint";

enum {
    H_ID,
    H_STATUS,
    H_CREATED,
    H_CODE,
    H_CLASS,
    H_MESSAGE,
    H_SAGA,
    H_SAGA_NAME,
    H_STEP,
    H_TOOL,
    H_PHASE,
    H_ATTEMPTS,
    H_FIRST,
    H_LAST,
    H_TOPIC,
    H_PART,
    H_OFFSET,
    H_KEY,
    H_TS,
    H_HEADERS,
    H_WORKER,
    H_VERSION,
    H_RESOLVED,
    H_PAYLOAD,
    H_PAYLOAD64,
    H_REVISION,
    H_SAGA_NOW,
    H_NCOLS
};

static const char show_head_sql[] =
    "SELECT d.id, d.status, d.created_at, d.error_code, d.error_class, d.message, d.saga_id, "
    "d.saga_name, d.step_idx || ' (' || d.step_name || ')', d.tool, d.phase, d.attempts, "
    "d.first_failure_at, d.last_failure_at, d.original_topic, d.original_partition, "
    "d.original_offset, coalesce(sagad_utf8(d.original_key), encode(d.original_key, 'base64')), "
    "d.original_timestamp, d.original_headers::text, d.worker_id, d.sagad_version, "
    "CASE WHEN d.resolved_at IS NOT NULL THEN d.resolved_at || ' by ' || "
    "  coalesce(d.resolved_by, '?') || ': ' || coalesce(d.resolution_reason, '') END, "
    "sagad_utf8(p.payload), CASE WHEN sagad_utf8(p.payload) IS NULL "
    "  THEN encode(p.payload, 'base64') END, "
    "CASE WHEN p.revision > 0 THEN 'revision ' || p.revision || ' by ' || p.operator || "
    "  coalesce(' (' || p.reason || ')', '') ELSE 'original' END, "
    "(SELECT s.status || ', generation ' || s.generation || ', updated ' || s.updated_at "
    "  FROM sagas s WHERE s.saga_id = d.saga_id) "
    "FROM dead_letters d CROSS JOIN LATERAL (SELECT * FROM ("
    "  SELECT v.revision, v.payload, v.operator, v.reason FROM dead_letter_revisions v "
    "  WHERE v.dead_letter_id = d.id UNION ALL SELECT 0, d.payload, NULL, NULL) x "
    "  ORDER BY revision DESC LIMIT 1) p WHERE d.id = $1::bigint";

static const char show_trail_sql[] =
    "SELECT e->>'attempt', e->>'started_at', e->>'status', e->>'error_class', e->>'error_code', "
    "e->>'latency_ms', replace(e->>'message', E'\\n', ' ') FROM dead_letters d, "
    "jsonb_array_elements(d.trail) WITH ORDINALITY AS t(e, ord) WHERE d.id = $1::bigint "
    "ORDER BY ord";

static const char show_steps_at_sql[] =
    "SELECT s.step, s.name, s.tool, s.status, s.attempts, s.comp_attempts, s.idempotency_key, "
    "s.error_code FROM dead_letters d, jsonb_to_recordset(d.steps_at) AS s(step int, name text, "
    "tool text, status text, attempts int, comp_attempts int, idempotency_key text, "
    "error_code text) WHERE d.id = $1::bigint ORDER BY s.step";

static const char show_steps_sql[] =
    "SELECT st.idx, st.name, st.tool, st.status, st.attempts, st.comp_attempts, "
    "st.idempotency_key, st.error_code FROM dead_letters d JOIN steps st ON st.saga_id = "
    "d.saga_id WHERE d.id = $1::bigint ORDER BY st.idx";

static const char show_replays_sql[] =
    "SELECT r.id, r.created_at, r.operator, r.action, r.new_generation, r.new_key, "
    "(SELECT string_agg(e->>'step', ' ') FROM jsonb_array_elements(r.kept) e), "
    "(SELECT string_agg(e->>'step', ' ') FROM jsonb_array_elements(r.repeats) e), r.reason "
    "FROM replays r WHERE r.dead_letter_id = $1::bigint ORDER BY r.id";

static void kv(const sg_pg_res_t *res, const char *label, int col)
{
    const char *v = sg_pg_res_get(res, 0, col);
    char *shown;

    if (v && *v) {
        shown = sg_text_visible(v, false);
        printf("  %-14s %s\n", label, shown);
        free(shown);
    }
}

static void print_payload(const sg_pg_res_t *res)
{
    const char *text = sg_pg_res_get(res, 0, H_PAYLOAD);
    sg_json_t *doc;

    printf("\npayload (%s):\n", sg_pg_res_get(res, 0, H_REVISION));
    if (!text) {
        printf("  not UTF-8; base64:\n  %s\n", sg_pg_res_get(res, 0, H_PAYLOAD64));
        return;
    }
    doc = sg_json_parse(text, strlen(text), NULL, NULL);
    if (doc) {
        char *pretty = sg_json_print_pretty(doc);
        printf("%s\n", pretty);
        free(pretty);
        sg_json_destroy(doc);
    } else {
        /* Shown, not obeyed: control characters other than line breaks
         * and tabs come out as \xHH (the JSON above is escaped already). */
        char *shown = sg_text_visible(text, true);
        printf("  not JSON, as received:\n%s\n", shown);
        free(shown);
    }
}

/* A section from a query on the entry's id: heading, then a table. */
static int section(dlq_t *d, const char *id, const char *title, const char *sql,
                   const char *const *header, int ncols)
{
    sg_pg_res_t *res;
    int rc = dlq_query(d, sql, 1, &id, &res);

    if (rc)
        return rc;
    if (sg_pg_res_rows(res) > 0) {
        printf("\n%s:\n", title);
        dlq_table(res, header, ncols, 80);
    }
    sg_pg_res_destroy(res);
    return SG_EXIT_OK;
}

static int show_human(dlq_t *d, const char *id)
{
    static const char *const trail_h[] = {"ATTEMPT", "STARTED",    "STATUS", "CLASS",
                                          "CODE",    "LATENCY_MS", "MESSAGE"};
    static const char *const steps_h[] = {"STEP",     "NAME",          "TOOL", "STATUS",
                                          "ATTEMPTS", "COMP_ATTEMPTS", "KEY",  "ERROR"};
    static const char *const replays_h[] = {"REPLAY", "AT",   "OPERATOR", "ACTION", "GEN",
                                            "KEY",    "KEPT", "REPEATED", "REASON"};
    static const struct {
        const char *label;
        int col;
    } fields[] = {
        {"status", H_STATUS},       {"created", H_CREATED},   {"error", H_CODE},
        {"class", H_CLASS},         {"message", H_MESSAGE},   {"saga", H_SAGA},
        {"saga name", H_SAGA_NAME}, {"step", H_STEP},         {"tool", H_TOOL},
        {"phase", H_PHASE},         {"attempts", H_ATTEMPTS}, {"first failure", H_FIRST},
        {"last failure", H_LAST},   {"topic", H_TOPIC},       {"partition", H_PART},
        {"offset", H_OFFSET},       {"key", H_KEY},           {"timestamp", H_TS},
        {"headers", H_HEADERS},     {"worker", H_WORKER},     {"sagad version", H_VERSION},
        {"resolved", H_RESOLVED},   {"saga now", H_SAGA_NOW},
    };
    sg_pg_res_t *res;
    int rc = dlq_query(d, show_head_sql, 1, &id, &res);

    if (rc)
        return rc;
    if (sg_pg_res_rows(res) == 0) {
        sg_pg_res_destroy(res);
        dlq_warn(d, "no dead letter %s", id);
        return SG_EXIT_FAIL;
    }
    printf("dead letter %s\n", sg_pg_res_get(res, 0, H_ID));
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        kv(res, fields[i].label, fields[i].col);
    print_payload(res);
    sg_pg_res_destroy(res);
    if ((rc = section(d, id, "attempt trail", show_trail_sql, trail_h, 7)) ||
        (rc = section(d, id, "saga steps when dead-lettered", show_steps_at_sql, steps_h, 8)) ||
        (rc = section(d, id, "saga steps now", show_steps_sql, steps_h, 8)) ||
        (rc = section(d, id, "replays", show_replays_sql, replays_h, 9)))
        return rc;
    return SG_EXIT_OK;
}

int dlq_cmd_show(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    sg_pg_res_t *res;
    const char *id;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return dlq_close(&d, rc);
    if (!(id = dlq_one_id(&d)))
        return dlq_close(&d, SG_EXIT_USAGE);
    if (!sg_cli_opt(&d.args, "--json")) {
        rc = show_human(&d, id);
    } else if (!(rc = dlq_query(&d, show_json_sql, 1, &id, &res))) {
        if (sg_pg_res_rows(res) == 0) {
            dlq_warn(&d, "no dead letter %s", id);
            rc = SG_EXIT_FAIL;
        } else {
            printf("%s\n", sg_pg_res_get(res, 0, 0));
        }
        sg_pg_res_destroy(res);
    }
    return dlq_close(&d, rc);
}
