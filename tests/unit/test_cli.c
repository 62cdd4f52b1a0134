/* The shared front end, seen the way an operator sees it: the real
 * binaries run with a controlled environment, and we check exit codes,
 * stdout, stderr and that secrets never reach either. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_cli.h"
#include "sagad/sg_version.h"
#include "../support/sg_test.h"
#include "unit.h"

static const char *const progs[] = {"sagad-worker", "sagad-relay", "dlq-tool"};
#define NPROGS (sizeof(progs) / sizeof(progs[0]))

typedef struct run_s {
    int status; /* exit code, or 128 + signal */
    char *out;
    char *err;
} run_t;

/* Every captured output, freed by free_runs() after each test, even one
 * that failed an assertion. */
static char *captured[64];
static int ncaptured;

static void free_runs(void)
{
    while (ncaptured > 0)
        free(captured[--ncaptured]);
}

/* Runs prog through the shared test helper and keeps its output for
 * free_runs(). */
static run_t run(const char *prog, const char *const *args, const char *const *env_extra)
{
    run_t r;

    cr_assert_lt(ncaptured + 2, 64);
    r.status = sgt_run(prog, args, env_extra, &r.out, &r.err);
    captured[ncaptured++] = r.out;
    captured[ncaptured++] = r.err;
    return r;
}

static int count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NO_ENV    ((const char *const *)NULL)

static void expect_exit(const run_t *r, const char *prog, int code)
{
    cr_assert_eq(r->status, code, "%s: exit %d, expected %d\nstdout: %s\nstderr: %s", prog,
                 r->status, code, r->out, r->err);
}

/* stderr is exactly one line (a diagnostic, not a log dump or a report). */
static void expect_one_line(const char *prog, const char *text)
{
    cr_assert_eq(count_lines(text), 1, "%s: expected one line, got: %s", prog, text);
    cr_assert_eq(text[strlen(text) - 1], '\n');
}

static void write_file(char *path, size_t path_size, const char *text)
{
    int fd;
    size_t len = strlen(text);

    snprintf(path, path_size, "/tmp/sagad-unit-cli-XXXXXX");
    fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
}

TestSuite(cli, .fini = free_runs, .timeout = 60);

Test(cli, version)
{
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r = run(progs[i], ARGS("--version"), NO_ENV);
        char want[64];

        expect_exit(&r, progs[i], SG_EXIT_OK);
        snprintf(want, sizeof(want), "%s %s\n", progs[i], SAGAD_VERSION);
        cr_assert_str_eq(r.out, want);
        cr_assert_str_eq(SAGAD_VERSION, "0.1.0");
        cr_assert_str_eq(r.err, "");
    }
}

Test(cli, help_lists_commands_on_stdout)
{
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r = run(progs[i], ARGS("--help"), NO_ENV);
        char usage[64];

        expect_exit(&r, progs[i], SG_EXIT_OK);
        snprintf(usage, sizeof(usage), "usage: %s ", progs[i]);
        assert_contains(r.out, usage);
        assert_contains(r.out, "  migrate ");
        assert_contains(r.out, "--print-config");
        assert_contains(r.out, "SAGAD_PG_DSN");
        cr_assert_str_eq(r.err, "");
    }
}

Test(cli, no_command_is_a_usage_error)
{
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r = run(progs[i], NULL, NO_ENV);

        expect_exit(&r, progs[i], SG_EXIT_USAGE);
        assert_contains(r.err, "usage:");
        assert_contains(r.err, "migrate");
        cr_assert_str_eq(r.out, "", "diagnostics go to stderr");
    }
}

Test(cli, unknown_command_is_named)
{
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r = run(progs[i], ARGS("frobnicate"), ARGS("SAGAD_PG_DSN=host=x"));

        expect_exit(&r, progs[i], SG_EXIT_USAGE);
        expect_one_line(progs[i], r.err);
        assert_contains(r.err, "frobnicate");
        assert_contains(r.err, "unknown command");
        cr_assert_str_eq(r.out, "");
    }
}

Test(cli, unknown_option_is_named)
{
    run_t r = run("sagad-worker", ARGS("--frobnicate", "migrate"), NO_ENV);

    expect_exit(&r, "sagad-worker", SG_EXIT_USAGE);
    expect_one_line("sagad-worker", r.err);
    assert_contains(r.err, "--frobnicate");
}

Test(cli, migrate_without_dsn_names_the_key_in_one_line)
{
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r = run(progs[i], ARGS("migrate"), NO_ENV);

        expect_exit(&r, progs[i], SG_EXIT_USAGE);
        expect_one_line(progs[i], r.err);
        assert_contains(r.err, "pg.dsn");
        assert_contains(r.err, "SAGAD_PG_DSN");
        cr_assert_str_eq(r.out, "");
    }
}

Test(cli, bad_integer_in_env_names_key_and_value)
{
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r =
            run(progs[i], ARGS("migrate"),
                ARGS("SAGAD_PG_DSN=postgresql://u:hunter2@h/db", "SAGAD_PG_CONNECT_TIMEOUT_MS=-5"));

        expect_exit(&r, progs[i], SG_EXIT_USAGE);
        expect_one_line(progs[i], r.err);
        assert_contains(r.err, "pg.connect_timeout_ms");
        assert_contains(r.err, "\"-5\"");
        assert_contains(r.err, "must be an integer between");
        assert_contains(r.err, "SAGAD_PG_CONNECT_TIMEOUT_MS");
        assert_not_contains(r.err, "hunter2");
    }
}

Test(cli, misspelt_environment_variable_is_refused)
{
    run_t r = run("sagad-relay", ARGS("migrate"), ARGS("SAGAD_PG_DNS=host=x"));

    expect_exit(&r, "sagad-relay", SG_EXIT_USAGE);
    expect_one_line("sagad-relay", r.err);
    assert_contains(r.err, "SAGAD_PG_DNS");
}

Test(cli, print_config_masks_the_password)
{
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r = run(progs[i], ARGS("--print-config"),
                      ARGS("SAGAD_PG_DSN=postgresql://u:hunter2@h/db",
                           "SAGAD_KAFKA_SASL_PASSWORD=kafkapw", "SAGAD_LOCAL_PGPORT=5999",
                           "SAGAD_TEST_X=1"));

        expect_exit(&r, progs[i], SG_EXIT_OK);
        assert_contains(r.out, "pg.dsn = postgresql://u:****@h/db  # env SAGAD_PG_DSN\n");
        assert_contains(r.out, "kafka.sasl.password = ****  # env SAGAD_KAFKA_SASL_PASSWORD\n");
        assert_contains(r.out, "log.level = info  # default\n");
        assert_not_contains(r.out, "hunter2");
        assert_not_contains(r.err, "hunter2");
        assert_not_contains(r.out, "kafkapw");
    }
}

Test(cli, config_file_then_env)
{
    char path[64], line[128];
    char cfgvar[96];
    run_t r;

    write_file(path, sizeof(path),
               "# test config\npg.dsn = host=filedb\nlog.level = debug\nretry.max_attempts = 4\n");
    r = run("dlq-tool", ARGS("--config", path, "--print-config"), ARGS("SAGAD_LOG_LEVEL=warn"));
    expect_exit(&r, "dlq-tool", SG_EXIT_OK);
    snprintf(line, sizeof(line), "pg.dsn = host=filedb  # file %s:2\n", path);
    assert_contains(r.out, line);
    snprintf(line, sizeof(line), "retry.max_attempts = 4  # file %s:4\n", path);
    assert_contains(r.out, line);
    assert_contains(r.out, "log.level = warn  # env SAGAD_LOG_LEVEL\n");

    /* SAGAD_CONFIG names the file too. */
    snprintf(cfgvar, sizeof(cfgvar), "SAGAD_CONFIG=%s", path);
    r = run("sagad-worker", ARGS("--print-config"), ARGS(cfgvar));
    expect_exit(&r, "sagad-worker", SG_EXIT_OK);
    assert_contains(r.out, "pg.dsn = host=filedb  # file ");
    unlink(path);
}

Test(cli, config_file_unknown_key_names_file_and_line)
{
    char path[64], where[96];

    write_file(path, sizeof(path), "# test config\nlog.level = debug\nno.such.key = 1\n");
    snprintf(where, sizeof(where), "file %s:3", path);
    for (size_t i = 0; i < NPROGS; i++) {
        run_t r = run(progs[i], ARGS("--config", path, "migrate"), ARGS("SAGAD_PG_DSN=host=x"));

        expect_exit(&r, progs[i], SG_EXIT_USAGE);
        expect_one_line(progs[i], r.err);
        assert_contains(r.err, where);
        assert_contains(r.err, "no.such.key");
    }
    unlink(path);
}

Test(cli, missing_config_file_is_a_usage_error)
{
    run_t r = run("sagad-worker", ARGS("--config", "/nonexistent/sagad.conf", "migrate"),
                  ARGS("SAGAD_PG_DSN=host=x"));

    expect_exit(&r, "sagad-worker", SG_EXIT_USAGE);
    expect_one_line("sagad-worker", r.err);
    assert_contains(r.err, "/nonexistent/sagad.conf");
}

Test(cli, migrate_with_unreachable_database_exits_infra_without_the_password)
{
    run_t r = run("sagad-worker", ARGS("migrate"),
                  ARGS("SAGAD_PG_DSN=postgresql://u:hunter2@127.0.0.1:1/db",
                       "SAGAD_PG_CONNECT_ATTEMPTS=1", "SAGAD_PG_CONNECT_TIMEOUT_MS=2000"));

    expect_exit(&r, "sagad-worker", SG_EXIT_INFRA);
    assert_contains(r.err, "check pg.dsn / SAGAD_PG_DSN");
    assert_not_contains(r.err, "hunter2");
    cr_assert_str_eq(r.out, "");
}

/* sg_pg_connect promises "Error text never contains the password"; libpq
 * quotes the whole URI in some parse errors. */
Test(cli, migrate_with_malformed_url_never_prints_the_password)
{
    run_t r =
        run("sagad-worker", ARGS("migrate"),
            ARGS("SAGAD_PG_DSN=postgresql://u:hunter2@[::1/db", "SAGAD_PG_CONNECT_ATTEMPTS=1"));

    cr_assert_neq(r.status, SG_EXIT_OK);
    assert_not_contains(r.err, "hunter2");
    assert_not_contains(r.out, "hunter2");
}

/* `COMMAND --help` is generated from the command table, for every binary,
 * without a config (no pg.dsn needed). */
Test(cli, command_help_is_generated_from_the_table)
{
    run_t r = run("dlq-tool", ARGS("replay", "--help"), NO_ENV);

    expect_exit(&r, "dlq-tool", SG_EXIT_OK);
    assert_contains(r.out, "usage: dlq-tool [--config FILE] replay");
    assert_contains(r.out, "--rate N/s");
    assert_contains(r.out, "--dry-run");
    assert_contains(r.out, "3 refused for safety");
    r = run("sagad-worker", ARGS("topics", "--help"), NO_ENV);
    expect_exit(&r, "sagad-worker", SG_EXIT_OK);
    assert_contains(r.out, "topics [--partitions N]");
}

Test(cli, unknown_option_of_a_command_is_a_usage_error_naming_it)
{
    run_t r = run("dlq-tool", ARGS("list", "--colour", "red"),
                  ARGS("SAGAD_PG_DSN=postgresql://u@127.0.0.1:1/db"));

    expect_exit(&r, "dlq-tool", SG_EXIT_USAGE);
    assert_contains(r.err, "unknown option --colour");
    assert_contains(r.err, "dlq-tool list --help");
    cr_assert_str_eq(r.out, "");
}

/* --config FILE after the command is the global option (issue 37 item 4):
 * the file named there is the one read. */
Test(cli, config_after_the_command_is_read)
{
    run_t r = run("dlq-tool", ARGS("stats", "--config", "/nonexistent/sagad.conf"), NO_ENV);

    expect_exit(&r, "dlq-tool", SG_EXIT_USAGE);
    assert_contains(r.err, "/nonexistent/sagad.conf");
    r = run("dlq-tool", ARGS("stats", "--config=/nonexistent/other.conf"), NO_ENV);
    expect_exit(&r, "dlq-tool", SG_EXIT_USAGE);
    assert_contains(r.err, "/nonexistent/other.conf");
}

/* --json, before or after the command, is refused by a command that has no
 * JSON output, naming the option, before anything is done. */
Test(cli, json_is_refused_by_a_command_without_json_output)
{
    run_t r = run("sagad-worker", ARGS("run", "--json"), NO_ENV);

    expect_exit(&r, "sagad-worker", SG_EXIT_USAGE);
    assert_contains(r.err, "sagad-worker run: --json: this command has no JSON output");
    r = run("sagad-relay", ARGS("--json", "run"), NO_ENV);
    expect_exit(&r, "sagad-relay", SG_EXIT_USAGE);
    assert_contains(r.err, "sagad-relay run: --json");
    cr_assert_str_eq(r.out, "");
}
