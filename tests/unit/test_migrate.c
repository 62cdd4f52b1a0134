/* sg_migrate: the embedded list every binary carries.  A gap, a repeat or
 * an empty script would make `migrate` skip or fail a schema step. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "sagad/sg_migrate.h"
#include "unit.h"

/* NNNN_name: four digits equal to the version, '_', then [a-z0-9_]+. */
static void check_name(const sg_migration_t *m)
{
    char digits[8];

    cr_assert_not_null(m->name);
    cr_assert_gt(strlen(m->name), 5, "name %s too short", m->name);
    for (int i = 0; i < 4; i++)
        cr_assert(isdigit((unsigned char)m->name[i]), "name %s must start with NNNN", m->name);
    cr_assert_eq(m->name[4], '_', "name %s must be NNNN_name", m->name);
    for (const char *p = m->name + 5; *p; p++)
        cr_assert(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_',
                  "name %s: unexpected character '%c'", m->name, *p);
    snprintf(digits, sizeof(digits), "%04d", m->version);
    cr_assert_eq(strncmp(m->name, digits, 4), 0, "name %s does not match version %d", m->name,
                 m->version);
}

Test(migrate, list_is_versions_one_to_n)
{
    size_t n = 0;
    const sg_migration_t *m = sg_migrate_list(&n);

    cr_assert_not_null(m);
    cr_assert_geq(n, 1, "no embedded migration");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(m[i].version, (int)i + 1, "migration %zu (%s) has version %d", i, m[i].name,
                     m[i].version);
}

Test(migrate, names_are_numbered_files)
{
    size_t n = 0;
    const sg_migration_t *m = sg_migrate_list(&n);

    for (size_t i = 0; i < n; i++)
        check_name(&m[i]);
    cr_assert_str_eq(m[0].name, "0001_core");
}

Test(migrate, scripts_are_not_empty_and_hold_no_transaction_control)
{
    size_t n = 0;
    const sg_migration_t *m = sg_migrate_list(&n);

    for (size_t i = 0; i < n; i++) {
        const char *p = m[i].sql;

        cr_assert_not_null(p, "%s: no SQL", m[i].name);
        while (*p && isspace((unsigned char)*p))
            p++;
        cr_assert_neq(*p, '\0', "%s: empty SQL", m[i].name);
        /* Each migration runs inside the transaction that records it. */
        assert_not_contains(m[i].sql, "\nBEGIN;");
        assert_not_contains(m[i].sql, "\nCOMMIT;");
    }
    assert_contains(m[0].sql, "CREATE TABLE");
}

Test(migrate, check_list_accepts_the_embedded_list)
{
    char errstr[256] = "";

    cr_assert_eq(sg_migrate_check_list(errstr, sizeof(errstr)), 0, "%s", errstr);
}

Test(migrate, latest_is_the_last_version)
{
    size_t n = 0;
    const sg_migration_t *m = sg_migrate_list(&n);

    cr_assert_eq(sg_migrate_latest(), m[n - 1].version);
    cr_assert_eq(sg_migrate_latest(), (int)n);
}
