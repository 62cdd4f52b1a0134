/* sg_pg_classify: the one place a SQLSTATE becomes retry or give up.  A
 * wrong class either retries a constraint violation forever or
 * dead-letters a saga over a failover. */
#include <criterion/criterion.h>
#include <string.h>

#include "sagad/sg_pg.h"
#include "unit.h"

static void expect(const char *sqlstate, bool conn_bad, sg_errclass_t cls, const char *code)
{
    const char *got = NULL;
    sg_errclass_t c = sg_pg_classify(sqlstate, conn_bad, &got);

    cr_assert_eq(c, cls, "%s (conn_bad=%d): class %s, expected %s", sqlstate ? sqlstate : "NULL",
                 conn_bad, sg_errclass_name(c), sg_errclass_name(cls));
    cr_assert_not_null(got, "%s: no code", sqlstate ? sqlstate : "NULL");
    cr_assert_str_eq(got, code, "%s", sqlstate ? sqlstate : "NULL");
}

Test(pg, connection_exceptions_are_transient)
{
    expect("08006", false, SG_ERRCLASS_TRANSIENT, "pg.connection");
    expect("08001", false, SG_ERRCLASS_TRANSIENT, "pg.connection");
    expect("08003", false, SG_ERRCLASS_TRANSIENT, "pg.connection");
}

Test(pg, serialization_and_deadlock_are_transient)
{
    expect("40001", false, SG_ERRCLASS_TRANSIENT, "pg.serialization");
    expect("40P01", false, SG_ERRCLASS_TRANSIENT, "pg.serialization");
}

Test(pg, shutdown_and_resources_are_transient)
{
    expect("57P01", false, SG_ERRCLASS_TRANSIENT, "pg.unavailable"); /* admin_shutdown */
    expect("57P03", false, SG_ERRCLASS_TRANSIENT, "pg.unavailable"); /* cannot_connect_now */
    expect("53300", false, SG_ERRCLASS_TRANSIENT, "pg.unavailable"); /* too_many_connections */
    expect("53100", false, SG_ERRCLASS_TRANSIENT, "pg.unavailable"); /* disk_full */
}

Test(pg, lock_not_available_is_transient_and_cancel_is_timeout)
{
    expect("55P03", false, SG_ERRCLASS_TRANSIENT, "pg.lock");
    expect("57014", false, SG_ERRCLASS_TIMEOUT, "pg.timeout");
}

Test(pg, constraint_and_data_errors_are_permanent)
{
    expect("23505", false, SG_ERRCLASS_PERMANENT, "pg.constraint"); /* unique_violation */
    expect("23503", false, SG_ERRCLASS_PERMANENT, "pg.constraint"); /* foreign_key */
    expect("22P02", false, SG_ERRCLASS_PERMANENT, "pg.data");       /* invalid text repr */
    expect("22003", false, SG_ERRCLASS_PERMANENT, "pg.data");       /* out of range */
}

Test(pg, other_errors_are_permanent_query_errors)
{
    expect("42601", false, SG_ERRCLASS_PERMANENT, "pg.query"); /* syntax_error */
    expect("42P01", false, SG_ERRCLASS_PERMANENT, "pg.query"); /* undefined_table */
    expect("XX000", false, SG_ERRCLASS_PERMANENT, "pg.query");
    expect("40002", false, SG_ERRCLASS_PERMANENT, "pg.query");
}

Test(pg, missing_sqlstate_or_broken_connection_is_transient_connection)
{
    expect(NULL, false, SG_ERRCLASS_TRANSIENT, "pg.connection");
    expect("", false, SG_ERRCLASS_TRANSIENT, "pg.connection");
    /* A broken connection wins over whatever SQLSTATE came with it. */
    expect("23505", true, SG_ERRCLASS_TRANSIENT, "pg.connection");
    expect("42601", true, SG_ERRCLASS_TRANSIENT, "pg.connection");
}

Test(pg, code_pointer_may_be_null)
{
    cr_assert_eq(sg_pg_classify("40001", false, NULL), SG_ERRCLASS_TRANSIENT);
    cr_assert_eq(sg_pg_classify("23505", false, NULL), SG_ERRCLASS_PERMANENT);
    cr_assert_eq(sg_pg_classify(NULL, true, NULL), SG_ERRCLASS_TRANSIENT);
}

/* sg_pg_array_literal: the array parameters of every set-based statement
 * the worker sends.  A value quoted wrong is a different value in the
 * database, or a statement PostgreSQL refuses. */
Test(pg, array_literal_quotes_every_value_and_spells_null)
{
    const char *items[] = {"plain", "", NULL, "a\"b", "c\\d", "{x,y}", "é \"\\\\\"", "NULL"};
    sg_pg_buf_t b = {0};

    sg_pg_array_literal(&b, items, 8);
    cr_assert_str_eq(b.data, "{\"plain\",\"\",NULL,\"a\\\"b\",\"c\\\\d\",\"{x,y}\","
                             "\"é \\\"\\\\\\\\\\\"\",\"NULL\"}");
    sg_pg_buf_reset(&b);
    sg_pg_array_literal(&b, items, 0);
    cr_assert_str_eq(b.data, "{}");
    sg_pg_buf_free(&b);
}

Test(pg, array_literal_grows_past_its_first_allocation)
{
    char big[3001];
    const char *items[] = {big, big};
    sg_pg_buf_t b = {0};

    for (size_t i = 0; i < 3000; i++)
        big[i] = i % 100 == 99 ? '"' : 'x';
    big[3000] = '\0';
    sg_pg_array_literal(&b, items, 2);
    /* {"…",""…"} : each value 3000 chars plus 30 escapes, quoted. */
    cr_assert_eq(b.len, 2 + 2 * (3000 + 30 + 2) + 1);
    cr_assert_eq(strlen(b.data), b.len);
    cr_assert_eq(b.data[0], '{');
    cr_assert_eq(b.data[b.len - 1], '}');
    cr_assert(strncmp(b.data + 1, "\"xxxxxxxxx", 10) == 0);
    cr_assert(strstr(b.data, "xx\\\"xx") != NULL);
    sg_pg_buf_free(&b);
}
