/* Database roles as in production (schemas/sql/0013_roles.sql and 0021,
 * the roles deploy/local/pg.sh creates): the owner migrates, the runtime
 * role runs the worker, the relay and the janitor and cannot change the
 * schema nor the operator's ledgers, the operator role runs dlq-tool, whose
 * ledger records session_user beside the declared operator, the reader
 * role reads; a login of no sagad role cannot take sagad's locks;
 * pg.strict_roles refuses a role that may do more. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../support/sg_test.h"
#include "../support/sg_worker_env.h"
#include "sagad/sg_migrate.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_retention.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

TestSuite(roles, .init = sgw_setup, .fini = sgw_teardown);

static char rt_dsn[600], op_dsn[600], rd_dsn[600], st_dsn[600], rt_env[640], op_env[640],
    rd_env[640], owner_env[640];

static void role_dsns(void)
{
    sgt_role_dsn(rt_dsn, sizeof(rt_dsn), sgw.dsn, "runtime");
    sgt_role_dsn(op_dsn, sizeof(op_dsn), sgw.dsn, "operator");
    sgt_role_dsn(rd_dsn, sizeof(rd_dsn), sgw.dsn, "reader");
    sgt_role_dsn(st_dsn, sizeof(st_dsn), sgw.dsn, "stranger");
    snprintf(rd_env, sizeof(rd_env), "SAGAD_PG_DSN=%s", rd_dsn);
    snprintf(rt_env, sizeof(rt_env), "SAGAD_PG_DSN=%s", rt_dsn);
    snprintf(op_env, sizeof(op_env), "SAGAD_PG_DSN=%s", op_dsn);
    snprintf(owner_env, sizeof(owner_env), "SAGAD_PG_DSN=%s", sgw.dsn);
}

/* A statement as role dsn: 0, or -1 with the SQLSTATE-derived error. */
static int exec_as(const char *dsn, const char *sql, sg_err_t *err)
{
    sg_pg_t *pg = sgt_db_connect(dsn);
    int rc = sg_pg_exec(pg, sql, 0, NULL, NULL, err);

    sg_pg_destroy(pg);
    return rc;
}

/* Runs prog with the test's environment and extra (the last value of a
 * name wins); its exit code, stderr in *err. */
static int run_with(const char *prog, const char *const *args, const char *const *extra, char **out,
                    char **err)
{
    const char *env[SGW_MAX_ENV * 2 + 1];
    size_t n = 0;

    for (size_t i = 0; i < sgw.nenv; i++)
        env[n++] = sgw.env[i];
    for (; extra && *extra; extra++)
        env[n++] = *extra;
    env[n] = NULL;
    return sgt_run(prog, args, env, out, err);
}

Test(roles, the_runtime_role_cannot_alter_drop_truncate_or_create)
{
    static const char *const denied[] = {
        "ALTER TABLE sagas ADD COLUMN x integer", "DROP TABLE outbox", "TRUNCATE attempts",
        "CREATE TABLE mine (x integer)",
        "DROP FUNCTION sagad_fence(text, text, integer, bigint, "
        "bigint)",
        "DELETE FROM sagad_schema_migrations", "UPDATE relay_settings SET shards = 2",
        /* the operator's functions are the operator's */
        "SELECT sagad_dlq_discard(1, 'x', 'y')"};
    sg_err_t err;

    role_dsns();
    for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
        cr_expect_eq(exec_as(rt_dsn, denied[i], &err), -1, "the runtime role may: %s", denied[i]);
        cr_expect(strstr(err.message, "must be owner") || strstr(err.message, "permission denied"),
                  "%s: %s", denied[i], err.message);
    }
    /* What it needs it may do. */
    cr_expect_eq(exec_as(rt_dsn,
                         "INSERT INTO sagas (saga_id, name, definition) VALUES ('r', 'n', '{}')",
                         &err),
                 0, "%s", err.message);
    cr_expect_eq(exec_as(rt_dsn, "UPDATE sagas SET status = 'held' WHERE saga_id = 'r'", &err), 0,
                 "%s", err.message);
    /* The operator role reads, and writes nothing directly. */
    cr_expect_eq(exec_as(op_dsn, "SELECT count(*) FROM dead_letters", &err), 0, "%s", err.message);
    cr_expect_eq(exec_as(op_dsn, "UPDATE dead_letters SET status = 'discarded'", &err), -1);
    cr_expect(strstr(err.message, "permission denied"), "%s", err.message);
}

/* The worker and the relay run a saga as the runtime role with strict
 * roles on, and the janitor's pass removes rows as that role. */
Test(roles, worker_relay_and_janitor_run_as_the_runtime_role_with_strict_roles)
{
    const char *extra[] = {rt_env, "SAGAD_PG_STRICT_ROLES=on", NULL};
    sg_retention_opts_t opts = {60, 60, 100, 0, NULL};
    int64_t removed[SG_RET__COUNT] = {0};
    sg_pg_t *rt;
    sg_err_t err;

    role_dsns();
    sgw_world_start(NULL, 1, NULL);
    sgw_start(&sgw.relay, "sagad-relay", extra);
    sgw_start(&sgw.worker, "sagad-worker", extra);
    sgw_submit("as-runtime", "[{\"name\": \"a\", \"tool\": \"ledger\"}, {\"name\": \"b\", "
                             "\"tool\": \"noop\"}]");
    sgw_wait_status("as-runtime", "completed");
    sgw_event_wait("as-runtime", "saga.completed");
    sgw_pair_stop();
    cr_expect(strstr(sgw.worker.err, "\"msg\":\"database role\",\"current_user\":\"sagad_app\"") !=
                  NULL,
              "the worker logs its role: %s", sgt_bg_tail(&sgw.worker));
    cr_expect(strstr(sgw.relay.err, "\"beyond_its_needs\":\"nothing\"") != NULL, "%s",
              sgt_bg_tail(&sgw.relay));

    cr_assert_eq(sg_pg_exec(sgw.pg,
                            "UPDATE sagas SET updated_at = now() - interval '1 hour' "
                            "WHERE saga_id = 'as-runtime'",
                            0, NULL, NULL, &err),
                 0, "%s", err.message);
    rt = sgt_db_connect(rt_dsn);
    cr_assert_eq(sg_retention_pass(rt, &opts, removed, &err), 0, "%s", err.message);
    sg_pg_destroy(rt);
    cr_expect_eq(removed[SG_RET_SAGAS], 1);
    cr_expect_eq(removed[SG_RET_ATTEMPTS], 2);
    cr_expect_eq(removed[SG_RET_BUILTIN_LEDGER], 0, "its ledger row is younger than the horizon");
}

/* With pg.strict_roles on, the owner is refused for every binary but
 * migrate; off (the default), it runs and the role is logged. */
Test(roles, strict_roles_refuses_a_role_that_may_do_more)
{
    const char *strict[] = {owner_env, "SAGAD_PG_STRICT_ROLES=on", NULL};
    const char *op_strict[] = {op_env, "SAGAD_PG_STRICT_ROLES=on", NULL};
    char *err = NULL;

    role_dsns();
    cr_expect_eq(run_with("dlq-tool", ARGS("stats"), strict, NULL, &err), 4);
    cr_expect(strstr(err, "database role sagad may do more than the operator role needs (owns "
                          "the tables (ALTER, DROP)") != NULL,
              "%s", err);
    free(err);
    cr_expect_eq(run_with("dlq-tool", ARGS("stats"), op_strict, NULL, &err), 0, "%s", err);
    free(err);
    cr_expect_eq(run_with("sagad-worker", ARGS("migrate"), strict, NULL, &err), 0,
                 "migrate is the owner's: %s", err);
    free(err);
    sgw_world_start(NULL, 1, NULL);
    cr_expect_eq(run_with("sagad-relay", ARGS("run"), strict, NULL, &err), 1);
    cr_expect(strstr(err, "runtime.role.too_powerful") != NULL, "%s", err);
    cr_expect(strstr(err, "may do more than the runtime role needs") != NULL, "%s", err);
    free(err);
    cr_expect_eq(run_with("sagad-worker", ARGS("run"), strict, NULL, &err), 1);
    cr_expect(strstr(err, "may do more than the runtime role needs") != NULL, "%s", err);
    free(err);
}

/* dlq-tool as the operator role: the edit, the replay and the discard go
 * through the functions, and the ledger holds both the declared operator
 * and the session's role. */
Test(roles, the_dlq_ledger_records_session_user_beside_the_operator)
{
    const char *op[] = {op_env, "SAGAD_PG_STRICT_ROLES=on", NULL};
    char id[32], id2[32], *err = NULL;

    role_dsns();
    sgw_world_start(NULL, 1, NULL);
    sgw_start(&sgw.relay, "sagad-relay", ARGS(rt_env));
    sgw_start(&sgw.worker, "sagad-worker", ARGS(rt_env));
    sgw_submit("r-1", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    sgw_submit("r-2", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    sgw_wait_int(2, "SELECT count(*) FROM dead_letters");
    snprintf(id, sizeof(id), "%lld",
             sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = 'r-1'"));
    snprintf(id2, sizeof(id2), "%lld",
             sgw_q_int("SELECT id FROM dead_letters WHERE saga_id = 'r-2'"));

    cr_assert_eq(run_with("dlq-tool",
                          ARGS("edit", id, "--set", "steps[0].tool=noop", "--reason", "tool name",
                               "--operator", "alice"),
                          op, NULL, &err),
                 0, "%s", err);
    free(err);
    cr_assert_eq(run_with("dlq-tool",
                          ARGS("replay", id, "--reason", "fixed", "--operator", "alice"), op, NULL,
                          &err),
                 0, "%s", err);
    free(err);
    cr_assert_eq(run_with("dlq-tool",
                          ARGS("discard", id2, "--reason", "not ours", "--operator", "bob"), op,
                          NULL, &err),
                 0, "%s", err);
    free(err);
    sgw_wait_status("r-1", "completed");
    sgw_pair_stop();

    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions WHERE dead_letter_id = %s "
                           "AND operator = 'alice' AND session_user_name = 'sagad_op'",
                           id),
                 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays WHERE dead_letter_id = %s AND operator = "
                           "'alice' AND session_user_name = 'sagad_op'",
                           id),
                 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE id = %s AND resolved_by = "
                           "'alice' AND resolved_session_user = 'sagad_op'",
                           id),
                 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE id = %s AND status = "
                           "'discarded' AND resolved_by = 'bob' AND resolved_session_user = "
                           "'sagad_op'",
                           id2),
                 1);
}

/* A login that may create temporary tables (the operator role, as every
 * role by default) shadows dead_letters with one of its own, then calls
 * sagad_dlq_replay(), which runs with the owner's rights: the function
 * must read sagad's table, not the shadow, so what it publishes is the
 * real entry's payload to its real topic (issue 36 item 5: pg_temp was
 * searched first, and the shadow's topic and payload went out). */
Test(roles, a_temporary_table_cannot_shadow_what_a_security_definer_function_reads)
{
    char sql[1024], text[512];
    long long id;
    sg_pg_t *pg;
    sg_err_t err;

    role_dsns();
    sgw_world_start(NULL, 1, NULL);
    id =
        sgt_query_intf(sgw.pg, "INSERT INTO dead_letters (error_code, error_class, original_topic, "
                               "original_key, payload) VALUES ('input.json.malformed', 'poison', "
                               "'real.commands', 'k', convert_to('{\"real\": true}', 'UTF8')) "
                               "RETURNING id");
    pg = sgt_db_connect(op_dsn);
    cr_assert_eq(sg_pg_exec(pg,
                            "CREATE TEMPORARY TABLE dead_letters AS SELECT * FROM "
                            "public.dead_letters WITH NO DATA",
                            0, NULL, NULL, &err),
                 0, "the operator may create a temporary table: %s", err.message);
    snprintf(sql, sizeof(sql),
             "INSERT INTO pg_temp.dead_letters (id, status, error_code, error_class, "
             "original_topic, original_key, payload, created_at) VALUES (%lld, 'pending', 'x', "
             "'poison', 'evil.topic', 'k', convert_to('{\"evil\": true}', 'UTF8'), now())",
             id);
    cr_assert_eq(sg_pg_exec(pg, sql, 0, NULL, NULL, &err), 0, "%s", err.message);
    snprintf(sql, sizeof(sql),
             "SELECT outcome FROM sagad_dlq_replay(%lld, 'mallory', 'shadowed', false, true, "
             "'cmds', NULL)",
             id);
    cr_expect_eq(sg_pg_exec(pg, sql, 0, NULL, NULL, &err), 0, "%s", err.message);
    sg_pg_destroy(pg);

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT topic || ' ' || convert_from(payload, 'UTF8') FROM outbox "
                                "ORDER BY id DESC LIMIT 1"),
                     "real.commands {\"real\": true}",
                     "the real entry was replayed, not the shadow");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM outbox WHERE topic = 'evil.topic'"), 0);
}

/* sagad_dlq_edit, open to any login with the operator role, stores only
 * a JSON object as a revision (issue 36 item 5: any text was stored, for
 * a replay to publish). */
Test(roles, a_revision_of_a_payload_is_a_json_object_in_sql_too)
{
    static const char *const refused[] = {"42", "\"a string\"", "[1, 2]", "not json", "null"};
    char sql[512];
    long long id;
    sg_pg_t *pg;
    sg_err_t err;

    role_dsns();
    sgw_world_start(NULL, 1, NULL);
    id = sgt_query_intf(sgw.pg, "INSERT INTO dead_letters (error_code, error_class, payload) "
                                "VALUES ('input.json.malformed', 'poison', 'x') RETURNING id");
    pg = sgt_db_connect(op_dsn);
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        snprintf(sql, sizeof(sql), "SELECT sagad_dlq_edit(%lld, '%s', 'op', 'r')", id, refused[i]);
        cr_expect_eq(sg_pg_exec(pg, sql, 0, NULL, NULL, &err), -1, "stored: %s", refused[i]);
        cr_expect(strstr(err.message, "payload: ") != NULL, "%s: %s", refused[i], err.message);
    }
    snprintf(sql, sizeof(sql), "SELECT sagad_dlq_edit(%lld, '{\"v\": 1}', 'op', 'r')", id);
    cr_expect_eq(sg_pg_exec(pg, sql, 0, NULL, NULL, &err), 0, "%s", err.message);
    sg_pg_destroy(pg);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions"), 1, "only the object");
}

/* Denied for the login of dsn: each statement fails with "permission
 * denied". */
static void expect_denied(const char *who, const char *dsn, const char *const *sql, size_t n)
{
    sg_err_t err;

    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(exec_as(dsn, sql[i], &err), -1, "the %s may: %s", who, sql[i]);
        cr_expect(strstr(err.message, "permission denied") != NULL, "%s: %s", sql[i], err.message);
    }
}

/* A saga with a control row, a handled dead letter naming it with a
 * revision and a replay, all older than any horizon (issue 36 item 5:
 * the ledgers a runtime login must not rewrite). */
static void ledger_rows(void)
{
    long long id;

    sgt_query_intf(sgw.pg, "INSERT INTO sagas (saga_id, name, status, definition, updated_at) "
                           "VALUES ('led', 'n', 'completed', '{}', now() - interval '2 hours') "
                           "RETURNING 1");
    sgt_query_intf(sgw.pg, "INSERT INTO saga_controls (saga_id, command, command_id, "
                           "requested_by, reason, outcome) VALUES ('led', 'saga.cancel', 'c1', "
                           "'alice', 'r', 'refused') RETURNING 1");
    id = sgt_query_intf(sgw.pg, "INSERT INTO dead_letters (status, error_code, error_class, "
                                "payload, resolved_at) VALUES ('discarded', 'x', 'poison', "
                                "'{}', now() - interval '2 hours') RETURNING id");
    sgt_query_intf(sgw.pg,
                   "INSERT INTO dead_letter_revisions (dead_letter_id, revision, payload, "
                   "operator, reason) VALUES (%lld, 1, '{}', 'alice', 'r') RETURNING 1",
                   id);
    sgt_query_intf(sgw.pg,
                   "INSERT INTO replays (dead_letter_id, operator, reason, action, new_generation) "
                   "VALUES (%lld, 'alice', 'r', 'resume', 2) RETURNING 1",
                   id);
}

/* The operator's ledgers and the control history are append-only for the
 * runtime role; deleting the saga (whose deletion cascades into its
 * control history) is refused too; the janitor still removes them as
 * retention's rule allows, through the owner's functions. */
Test(roles, the_runtime_role_cannot_rewrite_the_ledgers_and_retention_still_removes_them)
{
    static const char *const denied[] = {
        "DELETE FROM replays",
        "UPDATE replays SET operator = 'mallory'",
        "TRUNCATE replays",
        "INSERT INTO replays (dead_letter_id, operator, reason, action, new_generation) SELECT id, "
        "'m', 'r', 'resume', 9 FROM dead_letters",
        "DELETE FROM dead_letter_revisions",
        "UPDATE dead_letter_revisions SET operator = 'mallory'",
        "TRUNCATE dead_letter_revisions",
        "DELETE FROM saga_controls",
        "UPDATE saga_controls SET requested_by = 'mallory'",
        "TRUNCATE saga_controls",
        "DELETE FROM sagas WHERE saga_id = 'led'",
        "DELETE FROM dead_letters",
        "DELETE FROM steps",
        "DELETE FROM attempts",
    };
    sg_retention_opts_t opts = {60, 60, 100, 0, NULL};
    int64_t removed[SG_RET__COUNT] = {0};
    sg_pg_t *rt;
    sg_err_t err;

    role_dsns();
    ledger_rows();
    expect_denied("runtime role", rt_dsn, denied, sizeof(denied) / sizeof(denied[0]));
    /* the worker writes the control history */
    cr_expect_eq(exec_as(rt_dsn,
                         "INSERT INTO saga_controls (saga_id, command, command_id, requested_by, "
                         "reason, outcome) VALUES ('led', 'saga.approve', 'c2', 'bob', 'r', "
                         "'refused')",
                         &err),
                 0, "%s", err.message);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays WHERE operator = 'alice'"), 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions WHERE operator = 'alice'"),
                 1);

    rt = sgt_db_connect(rt_dsn);
    cr_assert_eq(sg_retention_pass(rt, &opts, removed, &err), 0, "%s", err.message);
    sg_pg_destroy(rt);
    cr_expect_eq(removed[SG_RET_DEAD_LETTERS], 1);
    cr_expect_eq(removed[SG_RET_REPLAYS], 1);
    cr_expect_eq(removed[SG_RET_REVISIONS], 1);
    cr_expect_eq(removed[SG_RET_SAGAS], 1);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM saga_controls"), 0, "gone with their saga");
}

/* Only the runtime role takes sagad's locks; their keys are the
 * database's own, so a login that takes the fixed numbers of schema 20
 * holds up nothing; a session of a role that could be a relay (of schema
 * 20 during an upgrade) holding the fixed key keeps the shard from a
 * relay of 21; one shard, one holder. */
Test(roles, only_the_runtime_role_takes_the_locks_and_a_stranger_cannot_block_them)
{
    static const char *const calls[] = {
        "SELECT sagad_relay_try_lock(0)", "SELECT sagad_relay_unlock(0)",
        "SELECT sagad_janitor_try_lock()", "SELECT sagad_lock_key('relay', 0)",
        "SELECT * FROM sagad_lock_salt"};
    sg_pg_t *st, *rt, *rt2;
    sg_err_t err;

    role_dsns();
    expect_denied("stranger", st_dsn, calls, sizeof(calls) / sizeof(calls[0]));
    expect_denied("operator role", op_dsn, calls, sizeof(calls) / sizeof(calls[0]));
    expect_denied("reader role", rd_dsn, calls, sizeof(calls) / sizeof(calls[0]));

    /* A stranger holds the fixed keys of shard 0 and of the janitor. */
    st = sgt_db_connect(st_dsn);
    cr_assert_eq(sg_pg_exec(st,
                            "SELECT pg_advisory_lock(x'5a6ad0020000'::bigint), "
                            "pg_advisory_lock(x'5a6ad0030000'::bigint)",
                            0, NULL, NULL, &err),
                 0, "%s", err.message);
    rt = sgt_db_connect(rt_dsn);
    rt2 = sgt_db_connect(rt_dsn);
    cr_expect_eq(sgt_query_int(rt, "SELECT sagad_relay_try_lock(0)::int"), 1,
                 "a stranger's lock on the fixed key holds up no relay");
    cr_expect_eq(sgt_query_int(rt, "SELECT sagad_janitor_try_lock()::int"), 1);
    cr_expect_eq(sgt_query_int(rt2, "SELECT sagad_relay_try_lock(0)::int"), 0, "one holder");
    cr_expect_eq(sgt_query_int(rt2, "SELECT sagad_janitor_try_lock()::int"), 0, "one janitor");
    cr_expect_eq(sgt_query_int(rt2, "SELECT count(*) FROM sagad_relay_locks() WHERE held"), 1);
    sg_pg_destroy(st);

    /* rt2 as a relay of schema 20: the fixed key of shard 1 keeps it from
     * rt; and what rt releases, rt2 takes. */
    cr_assert_eq(sg_pg_exec(rt2, "SELECT pg_advisory_lock(x'5a6ad0020000'::bigint + 1)", 0, NULL,
                            NULL, &err),
                 0, "%s", err.message);
    cr_expect_eq(sgt_query_int(rt, "SELECT sagad_relay_try_lock(1)::int"), 0,
                 "a relay of schema 20 holds shard 1");
    cr_expect_eq(sgt_query_int(rt, "SELECT sagad_relay_unlock(0)::int"), 1);
    cr_expect_eq(sgt_query_int(rt2, "SELECT sagad_relay_try_lock(0)::int"), 1);
    sg_pg_destroy(rt);
    sg_pg_destroy(rt2);
}

/* The outbox's source (migrations 0026 and 0027): switching it, which
 * also enables or disables the outbox's trigger, writing the WAL
 * heartbeat and the worker's messages by sagad_outbox_write (0028: into
 * the WAL when that is the route, so it signs for whoever calls it) are
 * the runtime role's alone; the steps waiting for a person are written by
 * the triggers of steps only.  Each refusal is PostgreSQL's, for the real
 * login. */
Test(roles, only_the_runtime_role_switches_the_outbox_source_and_no_login_writes_steps_waiting)
{
    static const char *const calls[] = {
        "SELECT sagad_outbox_to_table()",
        "SELECT sagad_outbox_to_wal('sagad_relay')",
        "SELECT sagad_outbox_wal_heartbeat()",
        "SELECT sagad_outbox_write(ARRAY['roles-w'], ARRAY['k'], ARRAY['{}'::jsonb], ARRAY['x'])",
        "INSERT INTO steps_waiting (saga_id, idx) VALUES ('x', 0)",
        "DELETE FROM steps_waiting"};
    static const char *const writes[] = {"INSERT INTO steps_waiting (saga_id, idx) VALUES ('x', 0)",
                                         "DELETE FROM steps_waiting"};
    sg_err_t err;

    role_dsns();
    expect_denied("stranger", st_dsn, calls, sizeof(calls) / sizeof(calls[0]));
    expect_denied("operator role", op_dsn, calls, sizeof(calls) / sizeof(calls[0]));
    expect_denied("reader role", rd_dsn, calls, sizeof(calls) / sizeof(calls[0]));
    expect_denied("runtime role", rt_dsn, writes, sizeof(writes) / sizeof(writes[0]));
    cr_expect_eq(exec_as(rt_dsn, "SELECT sagad_outbox_to_table()", &err), 0, "%s", err.message);
    cr_expect_eq(sgt_query_int(sgw.pg, "SELECT count(*) FROM pg_trigger WHERE tgname = "
                                       "'outbox_emit' AND tgenabled = 'D'"),
                 1, "the runtime role switched to the table: the WAL trigger is off");
    cr_expect_eq(exec_as(rt_dsn,
                         "SELECT sagad_outbox_write(ARRAY['roles-w'], ARRAY['k'], "
                         "ARRAY['{}'::jsonb], ARRAY['x'])",
                         &err),
                 0, "the runtime role writes the worker's messages: %s", err.message);
    cr_expect_eq(sgt_query_int(sgw.pg, "SELECT count(*) FROM outbox WHERE topic = 'roles-w'"), 1,
                 "and with the table as the route, they are its rows: %s", err.message);
    cr_expect_eq(exec_as(rd_dsn, "SELECT count(*) FROM steps_waiting", &err), 0,
                 "the reader reads the approvals' list: %s", err.message);
}

/* The reader role runs sagactl's reads and writes nothing: no outbox row,
 * no replay, no change of a saga. */
Test(roles, the_reader_role_reads_with_sagactl_and_writes_nothing)
{
    static const char *const denied[] = {
        "INSERT INTO outbox (topic, key, payload) VALUES ('t', 'k', 'x')",
        "UPDATE sagas SET status = 'failed'",
        "DELETE FROM sagas",
        "INSERT INTO saga_controls (saga_id, command, command_id, requested_by, reason, outcome) "
        "VALUES ('led', 'saga.cancel', 'c', 'm', 'r', 'accepted')",
        "SELECT * FROM sagad_dlq_replay(1, 'm', 'r', true, true, 't', NULL)",
        "SELECT sagad_dlq_discard(1, 'm', 'r')",
        "SELECT sagad_dlq_edit(1, '{}', 'm', 'r')",
        "SELECT * FROM sagad_retention_sagas(0, 100)",
        "SELECT * FROM consumer_offsets",
    };
    const char *rd[] = {rd_env, "SAGAD_PG_STRICT_ROLES=on", NULL};
    char *out = NULL, *err = NULL, text[512];

    role_dsns();
    ledger_rows();
    expect_denied("reader role", rd_dsn, denied, sizeof(denied) / sizeof(denied[0]));
    /* Nothing else, as the catalog says: no right but SELECT on a table or
     * a sequence, no SECURITY DEFINER function but the lock report. */
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT coalesce(string_agg(c.relname, ' '), 'none') FROM pg_class "
                                "c WHERE c.relnamespace = current_schema()::regnamespace AND "
                                "((c.relkind IN ('r', 'p') AND has_table_privilege('sagad_reader', "
                                "c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')) "
                                "OR (c.relkind = 'S' AND has_sequence_privilege('sagad_reader', "
                                "c.oid, 'USAGE, UPDATE')))"),
                     "none");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(p.proname, ' ') FROM pg_proc p WHERE "
                                "p.pronamespace = current_schema()::regnamespace AND p.prosecdef "
                                "AND has_function_privilege('sagad_reader', p.oid, 'EXECUTE')"),
                     "sagad_relay_locks");
    cr_expect_eq(run_with("sagactl", ARGS("list"), rd, &out, &err), 0, "%s", err);
    cr_expect(strstr(out, "led") != NULL, "%s", out);
    free(out);
    free(err);
    cr_expect_eq(run_with("sagactl", ARGS("status", "led"), rd, &out, &err), 0, "%s", err);
    cr_expect(strstr(out, "completed") != NULL, "%s", out);
    free(out);
    free(err);
    cr_expect_eq(run_with("sagactl", ARGS("show", "led"), rd, &out, &err), 0, "%s", err);
    cr_expect(strstr(out, "saga.cancel") != NULL, "the control history: %s", out);
    free(out);
    free(err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM outbox"), 0);
}

/* The internal keys sign every step command the worker acts on: only the
 * runtime role (worker, relay) reads them; the operator, who reads every
 * other table, the reader and a stranger are refused by PostgreSQL, and
 * none but the owner may rotate them. */
Test(roles, only_the_runtime_role_reads_the_internal_keys)
{
    const char *const refused[] = {op_dsn, rd_dsn, st_dsn, rt_dsn};
    const char *const names[] = {"operator", "reader", "stranger", "runtime"};
    sg_err_t err;

    role_dsns();
    cr_expect_eq(exec_as(rt_dsn, "SELECT id, secret FROM internal_keys", &err), 0, "%s",
                 err.message);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(exec_as(refused[i], "SELECT secret FROM internal_keys", &err), -1,
                     "the %s login read the internal keys", names[i]);
        cr_expect(strstr(err.message, "permission denied") != NULL, "%s: %s", names[i],
                  err.message);
    }
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(exec_as(refused[i], "SELECT sagad_internal_key_rotate()", &err), -1,
                     "the %s login rotated the internal keys", names[i]);
        cr_expect(strstr(err.message, "permission denied") != NULL, "%s: %s", names[i],
                  err.message);
    }
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM internal_keys"), 1, "no key was added");
}

/* The roles' rights are rows of sagad_grants (migration 0029), applied by
 * every migrate: a row that is not a plain grant is refused, no sagad
 * login may write the table, and a row the owner adds takes effect at the
 * next migrate, for that role only. */
Test(roles, a_grant_is_a_row_of_sagad_grants_applied_at_the_next_migrate)
{
    static const char *const smuggled[] = {
        "INSERT INTO sagad_grants VALUES (3500, 'sagad_reader', 'GRANT', "
        "'SELECT; DROP TABLE sagas', 'TABLE extra', 't')",
        "INSERT INTO sagad_grants VALUES (3500, 'sagad_reader', 'GRANT', 'SELECT', "
        "'TABLE extra; DROP TABLE sagas', 't')",
        "INSERT INTO sagad_grants VALUES (3500, 'sagad_reader', 'GRANT', 'SELECT', "
        "'FUNCTION f() TO PUBLIC', 't')",
        "INSERT INTO sagad_grants VALUES (3500, 'public', 'GRANT', 'SELECT', 'TABLE extra', 't')",
        "INSERT INTO sagad_grants VALUES (3500, 'sagad_reader', 'GRANT', 'INSERT', "
        "'TABLE sagad_grants', 't')"};
    const char *logins[] = {rt_dsn, op_dsn, rd_dsn, st_dsn};
    sg_pg_t *owner;
    sg_err_t err;
    int from = 0, to = 0;

    role_dsns();
    owner = sgt_db_connect(sgw.dsn);
    for (size_t i = 0; i < sizeof(smuggled) / sizeof(smuggled[0]); i++) {
        cr_expect_eq(sg_pg_exec(owner, smuggled[i], 0, NULL, NULL, &err), -1, "taken: %s",
                     smuggled[i]);
        cr_expect_neq(strstr(err.message, "check constraint"), NULL, "%s", err.message);
    }
    for (size_t i = 0; i < sizeof(logins) / sizeof(logins[0]); i++) {
        cr_expect_eq(exec_as(logins[i],
                             "INSERT INTO sagad_grants VALUES (3500, 'sagad_reader', 'GRANT', "
                             "'SELECT', 'TABLE sagad_lock_salt', 't')",
                             &err),
                     -1, "login %zu wrote sagad_grants", i);
        cr_expect_neq(strstr(err.message, "permission denied"), NULL, "%s", err.message);
    }
    /* a name is sagad's own: pg_catalog's function is not reached */
    cr_assert_eq(sg_pg_exec(owner,
                            "INSERT INTO sagad_grants VALUES (3400, 'sagad_reader', 'GRANT', "
                            "'EXECUTE', 'FUNCTION pg_read_file(text)', 'test')",
                            0, NULL, NULL, &err),
                 0, "%s", err.message);
    cr_expect_eq(sg_migrate_run(owner, &from, &to, &err), -1, "pg_read_file granted");
    cr_expect_neq(strstr(err.message, "does not exist"), NULL, "%s", err.message);
    cr_expect_eq(exec_as(rd_dsn, "SELECT pg_read_file('PG_VERSION')", &err), -1,
                 "the reader reads files");
    cr_assert_eq(
        sg_pg_exec(owner, "DELETE FROM sagad_grants WHERE ord = 3400", 0, NULL, NULL, &err), 0,
        "%s", err.message);
    cr_assert_eq(sg_pg_exec(owner, "CREATE TABLE extra (x integer)", 0, NULL, NULL, &err), 0, "%s",
                 err.message);
    cr_expect_eq(exec_as(rd_dsn, "SELECT * FROM extra", &err), -1, "read before its grant");
    cr_assert_eq(sg_pg_exec(owner,
                            "INSERT INTO sagad_grants VALUES (3500, 'sagad_reader', 'GRANT', "
                            "'SELECT', 'TABLE extra', 'test')",
                            0, NULL, NULL, &err),
                 0, "%s", err.message);
    cr_assert_eq(sg_migrate_run(owner, &from, &to, &err), 0, "%s", err.message);
    cr_expect_eq(exec_as(rd_dsn, "SELECT * FROM extra", &err), 0, "the reader: %s", err.message);
    cr_expect_eq(exec_as(rt_dsn, "SELECT * FROM extra", &err), -1, "the runtime role may read it");
    sg_pg_destroy(owner);
}
