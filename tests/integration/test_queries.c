/* lib/ops's operator queries called as sagad-gateway calls them: the
 * functions themselves on a connection of the role each header says is
 * enough (sg_saga_query.h, sg_dlq_query.h, sg_relay_query.h), on rows
 * written as the worker writes them.  What a caller relies on is asserted:
 * the rows, the pages, the errors naming the field, and the roles. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_dlq_query.h"
#include "sagad/sg_relay_query.h"
#include "sagad/sg_saga_query.h"
#include "../support/sg_worker_env.h"

TestSuite(queries, .init = sgw_setup, .fini = sgw_teardown, .timeout = 120);

static void fill(void)
{
    cr_assert_eq(
        sgw_q_int(
            "WITH s AS (INSERT INTO sagas (saga_id, name, status, definition, created_at, "
            "updated_at) VALUES ('q-1', 'pay', 'running', '{}', now() - interval '3 hours', "
            "now() - interval '2 hours'), ('q-2', 'pay', 'completed', '{}', now() - interval "
            "'2 hours', now() - interval '1 hour'), ('q-3', 'ship', 'compensated', '{}', now() - "
            "interval '1 hour', now() - interval '1 minute') RETURNING 1), "
            "st AS (INSERT INTO steps (saga_id, idx, name, tool, status) VALUES "
            "('q-1', 0, 'a', 'noop', 'succeeded'), ('q-1', 1, 'b', 'fail', 'failed'), "
            "('q-3', 0, 'a', 'ship', 'compensated') RETURNING 1), "
            "d AS (INSERT INTO dead_letters (error_code, error_class, message, saga_id, step_idx, "
            "step_name, tool, phase, trail, payload) VALUES "
            "('tool.http.503', 'transient', 'down', 'q-1', 1, 'b', 'fail', 'forward', "
            "'[{\"attempt\": 1, \"args\": {\"order\": 12345678901234567890}}]', NULL), "
            "('tool.http.503', 'transient', 'down again', 'q-3', 0, 'a', 'ship', 'forward', "
            "'[]', NULL), "
            "('input.schema.invalid', 'permanent', 'bad', 'q-9', NULL, NULL, NULL, NULL, '[]', "
            "convert_to('{\"v\": 1, \"type\": \"saga.start\"}', 'UTF8')) RETURNING 1) "
            "SELECT (SELECT count(*) FROM s) + (SELECT count(*) FROM st) + "
            "(SELECT count(*) FROM d)"),
        9);
}

static sg_pg_t *as(const char *role)
{
    char dsn[640];

    sgt_role_dsn(dsn, sizeof(dsn), sgw.dsn, role);
    return sgt_db_connect(dsn);
}

/* The saga_id (or id) of every row, space-separated. */
static void keys_of(const sg_json_t *rows, const char *key, char *out, size_t size)
{
    size_t len = 0;

    out[0] = '\0';
    for (const sg_json_t *r = sg_json_first(rows); r && len + 2 < size; r = sg_json_next(r)) {
        char *v = sg_json_print(sg_json_member(r, key));
        len += (size_t)snprintf(out + len, size - len, "%s%s", len ? " " : "", v);
        free(v);
    }
}

Test(queries, a_reader_pages_through_sagas_and_reads_one)
{
    sg_pg_t *pg;
    sg_saga_filter_t f = {0};
    sg_json_t *rows = NULL, *saga = NULL, *tl = NULL;
    sg_err_t err;
    char keys[256];
    bool more;

    fill();
    pg = as("reader");
    f.limit = 2;
    cr_assert_eq(sg_saga_list(pg, &f, &rows, &more, &err), 0, "%s", err.message);
    keys_of(rows, "saga_id", keys, sizeof(keys));
    cr_expect_str_eq(keys, "\"q-3\" \"q-2\"");
    cr_expect(more);
    sg_json_destroy(rows);
    f.before = "q-2";
    cr_assert_eq(sg_saga_list(pg, &f, &rows, &more, &err), 0, "%s", err.message);
    keys_of(rows, "saga_id", keys, sizeof(keys));
    cr_expect_str_eq(keys, "\"q-1\"");
    cr_expect_not(more);
    cr_expect_eq(sgw_jint(sg_json_array_get(rows, 0), "steps_total"), 2);
    sg_json_destroy(rows);

    memset(&f, 0, sizeof(f));
    f.stuck_ms = 30 * 60 * 1000;
    f.since.kind = SG_OPS_WHEN_AT;
    f.since.at = "2000-01-01T00:00:00Z";
    cr_assert_eq(sg_saga_list(pg, &f, &rows, &more, &err), 0, "%s", err.message);
    keys_of(rows, "saga_id", keys, sizeof(keys));
    cr_expect_str_eq(keys, "\"q-1\"", "the one still running, idle 2 hours");
    sg_json_destroy(rows);

    cr_assert_eq(sg_saga_status(pg, "q-1", &saga, &err), 0, "%s", err.message);
    cr_assert_not_null(saga);
    cr_expect_str_eq(sgw_jstr(sg_json_member(saga, "at_step"), "name"), "b");
    cr_expect_eq(sg_json_array_size(sg_json_member(saga, "steps")), 2);
    sg_json_destroy(saga);
    cr_assert_eq(sg_saga_status(pg, "nope", &saga, &err), 0);
    cr_expect_null(saga, "no such saga: no object, no error");

    cr_assert_eq(sg_saga_timeline(pg, "q-1", &tl, &err), 0, "%s", err.message);
    cr_assert_not_null(tl);
    cr_expect_geq(sg_json_array_size(sg_json_member(tl, "events")), 3,
                  "accepted, dead letter, now");
    sg_json_destroy(tl);
    cr_assert_eq(sg_saga_timeline(pg, "q-9", &tl, &err), 0, "%s", err.message);
    cr_expect_not_null(tl, "a dead letter of a saga that never was has a timeline");
    sg_json_destroy(tl);
    sg_pg_destroy(pg);
}

Test(queries, a_bad_filter_value_is_named_by_its_field)
{
    sg_pg_t *pg = as("reader");
    sg_saga_filter_t f = {0};
    sg_dlq_filter_t d = {0};
    sg_json_t *rows = NULL;
    sg_err_t err;
    bool more;

    f.status = "sleeping";
    cr_expect_eq(sg_saga_list(pg, &f, &rows, &more, &err), -1);
    cr_expect_str_eq(err.code, "input.schema.invalid");
    cr_expect(strncmp(err.message, "status sleeping: must be", 24) == 0, "%s", err.message);
    memset(&f, 0, sizeof(f));
    f.before = "nope";
    cr_expect_eq(sg_saga_list(pg, &f, &rows, &more, &err), -1);
    cr_expect(strncmp(err.message, "before nope: no such saga", 25) == 0, "%s", err.message);
    memset(&f, 0, sizeof(f));
    f.until.kind = SG_OPS_WHEN_AT;
    f.until.at = "yesterday-ish";
    cr_expect_eq(sg_saga_list(pg, &f, &rows, &more, &err), -1);
    cr_expect_str_eq(err.code, "input.schema.invalid");
    cr_expect(strncmp(err.message, "until yesterday-ish: not an age", 31) == 0, "%s", err.message);
    d.error_class = "bogus";
    cr_expect_eq(sg_dlq_list(pg, &d, &rows, &more, &err), -1);
    cr_expect(strncmp(err.message, "class bogus: must be", 20) == 0, "%s", err.message);
    memset(&d, 0, sizeof(d));
    d.since.kind = SG_OPS_WHEN_AT;
    d.since.at = "soon";
    cr_expect_eq(sg_dlq_groups(pg, &d, &rows, &err), -1);
    cr_expect(strncmp(err.message, "since soon: not an age", 22) == 0, "%s", err.message);
    cr_expect_null(rows);
    sg_pg_destroy(pg);
}

Test(queries, a_reader_finds_and_reads_dead_letters_numbers_as_stored)
{
    sg_pg_t *pg;
    sg_dlq_filter_t f = {0};
    sg_json_t *rows = NULL, *doc = NULL, *stats = NULL;
    sg_err_t err;
    char keys[256], *text;
    int64_t *ids = NULL, first;
    size_t n = 0;
    bool more;

    fill();
    pg = as("reader");
    first = sgw_q_int("SELECT min(id) FROM dead_letters");
    f.code = "tool.*";
    cr_assert_eq(sg_dlq_list(pg, &f, &rows, &more, &err), 0, "%s", err.message);
    cr_expect_eq(sg_json_array_size(rows), 2, "tool.http.503 twice, newest first");
    cr_expect_eq(sgw_jint(sg_json_array_get(rows, 0), "id"), first + 1);
    sg_json_destroy(rows);
    f.limit = 1;
    cr_assert_eq(sg_dlq_ids(pg, &f, &ids, &n, &err), 0, "%s", err.message);
    cr_expect_eq(n, 1);
    cr_expect_eq(ids[0], first, "oldest first, for a bulk replay");
    free(ids);

    memset(&f, 0, sizeof(f));
    cr_assert_eq(sg_dlq_groups(pg, &f, &rows, &err), 0, "%s", err.message);
    keys_of(rows, "tool", keys, sizeof(keys));
    cr_expect_str_eq(keys, "null \"fail\" \"ship\"", "equal counts and times: by code, then tool");
    cr_expect_eq(sgw_jint(sg_json_array_get(rows, 0), "pending"), 1);
    cr_expect_str_neq(sgw_jstr(sg_json_array_get(rows, 0), "first_seen"), "");
    sg_json_destroy(rows);

    cr_assert_eq(sg_dlq_show(pg, first, &doc, &err), 0, "%s", err.message);
    cr_assert_not_null(doc);
    text = sg_json_print(doc);
    cr_expect(strstr(text, "\"order\":12345678901234567890") != NULL,
              "a number of the trail as stored, not as a double: %s", text);
    free(text);
    sg_json_destroy(doc);
    cr_assert_eq(sg_dlq_show(pg, 999999, &doc, &err), 0);
    cr_expect_null(doc);

    cr_assert_eq(sg_dlq_stats(pg, &stats, &err), 0, "%s", err.message);
    cr_expect_eq(sgw_jint(stats, "pending"), 3);
    cr_expect_eq(sgw_jint(sg_json_member(stats, "pending_by_age"), "< 1h"), 3);
    sg_json_destroy(stats);

    cr_assert_eq(sg_relay_status(pg, &rows, &err), 0, "%s", err.message);
    cr_expect_geq(sg_json_array_size(rows), 1);
    sg_json_destroy(rows);
    sg_pg_destroy(pg);
}

/* Replay, discard and edit are the operator's: a reader is refused by
 * PostgreSQL, an operator login acts, and the ledger names both. */
Test(queries, only_an_operator_replays_discards_and_edits)
{
    sg_pg_t *rd, *op;
    sg_json_t *r = NULL;
    sg_err_t err;
    int64_t rejected, step;
    sg_dlq_replay_req_t req = {0};
    char text[256];

    fill();
    rejected = sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = 'q-9'");
    step = sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = 'q-3'");
    rd = as("reader");
    cr_expect_eq(sg_dlq_discard(rd, rejected, "gw", "noise", &r, &err), -1);
    cr_expect_str_eq(err.code, "pg.query", "%s", err.message);
    cr_expect_eq(sg_dlq_edit(rd, rejected, "{}", "gw", NULL, &r, &err), -1);
    sg_pg_destroy(rd);

    op = as("operator");
    cr_assert_eq(sg_dlq_payload(op, rejected, &r, &err), 0, "%s", err.message);
    cr_expect(sg_json_is_null(sg_json_member(r, "step")), "a rejected submission");
    cr_expect_eq(sgw_jint(r, "revision"), 0);
    sg_json_destroy(r);
    cr_assert_eq(sg_dlq_edit(op, rejected,
                             "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"x\", \"saga_id\": "
                             "\"q-9\", \"name\": \"n\", \"steps\": [{\"name\": \"a\", \"tool\": "
                             "\"noop\"}]}",
                             "gw:ann", "fixed", &r, &err),
                 0, "%s", err.message);
    cr_expect_eq(sgw_jint(r, "revision"), 1);
    sg_json_destroy(r);

    req.id = step;
    req.by = "gw:ann";
    req.dry_run = true;
    req.internal_topic = sgw.topic_int;
    cr_assert_eq(sg_dlq_replay(op, &req, &r, &err), 0, "%s", err.message);
    cr_expect_str_eq(sgw_jstr(r, "outcome"), "would_replay", "%s", sgw_jstr(r, "detail"));
    cr_expect_eq(sgw_jint(r, "id"), step);
    sg_json_destroy(r);
    req.dry_run = false;
    cr_expect_eq(sg_dlq_replay(op, &req, &r, &err), -1, "no reason");
    cr_expect(strncmp(err.message, "reason: required", 16) == 0, "%s", err.message);

    cr_assert_eq(sg_dlq_discard(op, rejected, "gw:ann", "noise", &r, &err), 0, "%s", err.message);
    cr_expect_str_eq(sgw_jstr(r, "outcome"), "discarded");
    sg_json_destroy(r);
    cr_assert_eq(sg_dlq_discard(op, rejected, "gw:ann", "again", &r, &err), 0, "%s", err.message);
    cr_expect_str_eq(sgw_jstr(r, "outcome"), "refused", "already discarded");
    sg_json_destroy(r);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT resolved_by || '|' || (SELECT operator FROM "
                                "dead_letter_revisions) FROM dead_letters WHERE id = %lld",
                                (long long)rejected),
                     "gw:ann|gw:ann");
    sg_pg_destroy(op);
}
