/* sg_config: defaults, file, environment, and the text of every refusal.
 * The refusal text is what an operator reads at 3am, so it must name the
 * key, the value, where it came from and the rule, and never a secret. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_config.h"
#include "sagad/sg_json.h"
#include "sagad/sg_mask.h"
#include "sagad/sg_retention.h"
#include "unit.h"

static char errstr[1024];

static void write_file(char *path, size_t path_size, const char *text)
{
    int fd;
    size_t len = strlen(text);

    snprintf(path, path_size, "/tmp/sagad-unit-config-XXXXXX");
    fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp failed");
    cr_assert_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
}

/* sg_config_print output as a string; the caller frees it. */
static char *print_config(const sg_config_t *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);

    cr_assert_not_null(fp);
    sg_config_print(cfg, fp);
    fclose(fp);
    return buf;
}

static sg_config_t *config_with(const char *key, const char *value)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_set(cfg, key, value, "test", errstr, sizeof(errstr)), 0, "%s", errstr);
    return cfg;
}

/* ---- the table and its defaults ---- */

Test(config, every_default_parses_as_user_input)
{
    size_t n = 0;
    const sg_config_key_t *t = sg_config_table(&n);
    sg_config_t *cfg = sg_config_new(); /* aborts on a bad default */

    cr_assert_gt(n, 0);
    for (size_t i = 0; i < n; i++) {
        cr_assert_not_null(t[i].doc, "%s: no doc", t[i].key);
        cr_assert_gt(strlen(t[i].doc), 0, "%s: empty doc", t[i].key);
        if (!t[i].def)
            continue;
        cr_assert_eq(sg_config_set(cfg, t[i].key, t[i].def, "test", errstr, sizeof(errstr)), 0,
                     "default of %s refused: %s", t[i].key, errstr);
        if (t[i].type == SG_CONFIG_INT)
            cr_assert_eq(sg_config_int(cfg, t[i].key), strtoll(t[i].def, NULL, 10), "%s", t[i].key);
        else if (t[i].type == SG_CONFIG_STR || t[i].type == SG_CONFIG_ENUM)
            cr_assert_str_eq(sg_config_str(cfg, t[i].key), t[i].def, "%s", t[i].key);
    }
    sg_config_destroy(cfg);
}

Test(config, documented_defaults)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_str_eq(sg_config_str(cfg, "log.level"), "info");
    cr_assert_null(sg_config_str(cfg, "pg.dsn"), "pg.dsn has no default: it is required");
    cr_assert_eq(sg_config_int(cfg, "pg.connect_timeout_ms"), 5000);
    cr_assert_eq(sg_config_int(cfg, "retry.base_ms"), 250);
    cr_assert_eq(sg_config_int(cfg, "retry.cap_ms"), 30000);
    cr_assert_eq(sg_config_int(cfg, "retry.max_attempts"), 5);
    cr_assert_str_eq(sg_config_str(cfg, "topic.commands"), "sagad.commands");
    cr_assert_str_eq(sg_config_str(cfg, "topic.internal"), "sagad.internal");
    cr_assert_str_eq(sg_config_str(cfg, "topic.events"), "sagad.events");
    cr_assert_str_eq(sg_config_str(cfg, "topic.dlq"), "sagad.dlq");
    sg_config_destroy(cfg);
}

Test(config, limit_defaults_match_the_json_parser_defaults)
{
    sg_json_limits_t lim = SG_JSON_LIMITS_DEFAULT;
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_int(cfg, "limits.max_message_bytes"), (int64_t)lim.max_bytes);
    cr_assert_eq(sg_config_int(cfg, "limits.max_json_depth"), lim.max_depth);
    sg_config_destroy(cfg);
}

Test(config, every_key_can_be_set_from_its_environment_variable)
{
    size_t n = 0;
    const sg_config_key_t *t = sg_config_table(&n);

    for (size_t i = 0; i < n; i++) {
        char name[128], var[256], expect[200];
        char *envp[2] = {var, NULL};
        sg_config_t *cfg = sg_config_new();
        char *out;

        sg_config_env_name(t[i].key, name, sizeof(name));
        snprintf(var, sizeof(var), "%s=%s", name, t[i].def ? t[i].def : "x");
        cr_assert_eq(sg_config_load_env(cfg, envp, errstr, sizeof(errstr)), 0, "%s: %s", var,
                     errstr);
        out = print_config(cfg);
        snprintf(expect, sizeof(expect), "%s = ", t[i].key);
        assert_contains(out, expect);
        snprintf(expect, sizeof(expect), "# env %s\n", name);
        assert_contains(out, expect);
        free(out);
        sg_config_destroy(cfg);
    }
}

Test(config, env_name)
{
    char name[64];

    sg_config_env_name("pg.dsn", name, sizeof(name));
    cr_assert_str_eq(name, "SAGAD_PG_DSN");
    sg_config_env_name("pg.connect_timeout_ms", name, sizeof(name));
    cr_assert_str_eq(name, "SAGAD_PG_CONNECT_TIMEOUT_MS");
    sg_config_env_name("limits.max_json_depth", name, sizeof(name));
    cr_assert_str_eq(name, "SAGAD_LIMITS_MAX_JSON_DEPTH");
    sg_config_env_name("pg.dsn", name, 9);
    cr_assert_str_eq(name, "SAGAD_PG", "truncated, still terminated");
}

/* ---- sg_config_set: values and the text of refusals ---- */

Test(config, set_valid_values)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_set(cfg, "retry.max_attempts", "1", "t", errstr, sizeof(errstr)), 0);
    cr_assert_eq(sg_config_int(cfg, "retry.max_attempts"), 1, "min bound is inclusive");
    cr_assert_eq(sg_config_set(cfg, "retry.max_attempts", "1000", "t", errstr, sizeof(errstr)), 0);
    cr_assert_eq(sg_config_int(cfg, "retry.max_attempts"), 1000, "max bound is inclusive");
    cr_assert_eq(sg_config_set(cfg, "log.level", "debug", "t", errstr, sizeof(errstr)), 0);
    cr_assert_str_eq(sg_config_str(cfg, "log.level"), "debug");
    cr_assert_eq(sg_config_set(cfg, "pg.dsn", "host=db", "t", errstr, sizeof(errstr)), 0);
    cr_assert_str_eq(sg_config_str(cfg, "pg.dsn"), "host=db");
    sg_config_destroy(cfg);
}

Test(config, bad_integers_name_key_value_and_range)
{
    static const char *const bad[] = {"-5", "abc", "99999999999999999999999", "600001", "",
                                      "5x", "0"};
    sg_config_t *cfg = sg_config_new();

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char quoted[64];

        errstr[0] = '\0';
        cr_assert_eq(
            sg_config_set(cfg, "pg.connect_timeout_ms", bad[i], "env X", errstr, sizeof(errstr)),
            -1, "\"%s\" accepted", bad[i]);
        assert_contains(errstr, "pg.connect_timeout_ms");
        snprintf(quoted, sizeof(quoted), "\"%s\"", bad[i]);
        assert_contains(errstr, quoted);
        assert_contains(errstr, "must be an integer between 1 and 600000");
        assert_contains(errstr, "env X");
        cr_assert_null(strchr(errstr, '\n'), "one line: %s", errstr);
    }
    cr_assert_eq(sg_config_int(cfg, "pg.connect_timeout_ms"), 5000, "config must be unchanged");
    sg_config_destroy(cfg);
}

Test(config, bad_enum_lists_the_choices)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(
        sg_config_set(cfg, "log.level", "verbose", "file a.conf:2", errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "log.level");
    assert_contains(errstr, "\"verbose\"");
    assert_contains(errstr, "file a.conf:2");
    assert_contains(errstr, "must be one of error|warn|info|debug");
    cr_assert_str_eq(sg_config_str(cfg, "log.level"), "info", "config must be unchanged");
    /* Choices are exact: no prefix or case folding. */
    cr_assert_eq(sg_config_set(cfg, "log.level", "inf", "t", errstr, sizeof(errstr)), -1);
    cr_assert_eq(sg_config_set(cfg, "log.level", "INFO", "t", errstr, sizeof(errstr)), -1);
    cr_assert_eq(sg_config_set(cfg, "log.level", "info|debug", "t", errstr, sizeof(errstr)), -1);
    sg_config_destroy(cfg);
}

Test(config, empty_string_refused)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_set(cfg, "topic.events", "", "t", errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "topic.events");
    assert_contains(errstr, "must not be empty");
    cr_assert_str_eq(sg_config_str(cfg, "topic.events"), "sagad.events");
    sg_config_destroy(cfg);
}

Test(config, refused_secret_value_is_not_echoed)
{
    sg_config_t *cfg = config_with("pg.dsn", "postgresql://u:hunter2@h/db");

    cr_assert_eq(sg_config_set(cfg, "pg.dsn", "", "env SAGAD_PG_DSN", errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "pg.dsn = \"****\"");
    assert_contains(errstr, "must not be empty");
    assert_not_contains(errstr, "hunter2");
    cr_assert_str_eq(sg_config_str(cfg, "pg.dsn"), "postgresql://u:hunter2@h/db");
    sg_config_destroy(cfg);
}

Test(config, unknown_key_is_refused)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_set(cfg, "pg.dns", "x", "file a.conf:7", errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "unknown key \"pg.dns\"");
    assert_contains(errstr, "file a.conf:7");
    cr_assert_eq(sg_config_set(cfg, "kafka.", "x", "t", errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "kafka.* needs a property name");
    sg_config_destroy(cfg);
}

/* ---- kafka.* passthrough ---- */

typedef struct collected_s {
    int n;
    char kv[16][128];
} collected_t;

static void collect(void *opaque, const char *key, const char *value)
{
    collected_t *c = opaque;

    cr_assert_lt(c->n, 16);
    snprintf(c->kv[c->n++], sizeof(c->kv[0]), "%s=%s", key, value);
}

Test(config, kafka_keys_pass_through_in_order_later_wins)
{
    sg_config_t *cfg = sg_config_new();
    collected_t c = {0};

    cr_assert_eq(sg_config_set(cfg, "kafka.bootstrap.servers", "a:1", "t", errstr, sizeof(errstr)),
                 0);
    cr_assert_eq(sg_config_set(cfg, "kafka.linger.ms", "5", "t", errstr, sizeof(errstr)), 0);
    cr_assert_eq(sg_config_set(cfg, "kafka.bootstrap.servers", "b:2", "t", errstr, sizeof(errstr)),
                 0);
    sg_config_foreach_kafka(cfg, collect, &c);
    cr_assert_eq(c.n, 2);
    cr_assert_str_eq(c.kv[0], "bootstrap.servers=b:2");
    cr_assert_str_eq(c.kv[1], "linger.ms=5");
    sg_config_destroy(cfg);
}

/* ---- files ---- */

Test(config, file_with_comments_blanks_quotes_and_kafka_keys)
{
    char path[64];
    sg_config_t *cfg = sg_config_new();
    collected_t c = {0};
    char *out, expect[128];

    write_file(path, sizeof(path),
               "# sagad config\n"
               "\n"
               "   \t\n"
               "  # indented comment\n"
               "pg.dsn = \"host=db user=u\"\n"
               "log.level=warn\n"
               "  retry.max_attempts   =   7  \n"
               "kafka.bootstrap.servers = broker:9092\n"
               "kafka.client.id = \"sagad test\"\n"
               "topic.dlq = dead.letters"); /* no final newline */
    cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_assert_str_eq(sg_config_str(cfg, "pg.dsn"), "host=db user=u");
    cr_assert_str_eq(sg_config_str(cfg, "log.level"), "warn");
    cr_assert_eq(sg_config_int(cfg, "retry.max_attempts"), 7);
    cr_assert_str_eq(sg_config_str(cfg, "topic.dlq"), "dead.letters");
    sg_config_foreach_kafka(cfg, collect, &c);
    cr_assert_eq(c.n, 2);
    cr_assert_str_eq(c.kv[0], "bootstrap.servers=broker:9092");
    cr_assert_str_eq(c.kv[1], "client.id=sagad test");
    out = print_config(cfg);
    snprintf(expect, sizeof(expect), "retry.max_attempts = 7  # file %s:7\n", path);
    assert_contains(out, expect);
    snprintf(expect, sizeof(expect), "kafka.client.id = sagad test  # file %s:9\n", path);
    assert_contains(out, expect);
    assert_contains(out, "retry.base_ms = 250  # default\n");
    free(out);
    sg_config_destroy(cfg);
    unlink(path);
}

Test(config, file_unknown_key_names_file_line_and_key)
{
    char path[64], where[96];
    sg_config_t *cfg = sg_config_new();

    write_file(path, sizeof(path), "# comment\nlog.level = debug\nretry.max_atempts = 3\n");
    cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), -1);
    snprintf(where, sizeof(where), "file %s:3", path);
    assert_contains(errstr, where);
    assert_contains(errstr, "\"retry.max_atempts\"");
    assert_contains(errstr, "unknown key");
    unlink(path);
    sg_config_destroy(cfg);
}

Test(config, file_malformed_line)
{
    static const char *const bad[] = {"log.level debug\n", "= value\n", "   =\n"};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char path[64], text[128], where[96];
        sg_config_t *cfg = sg_config_new();

        snprintf(text, sizeof(text), "retry.max_attempts = 2\n%s", bad[i]);
        write_file(path, sizeof(path), text);
        cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), -1, "line %s", bad[i]);
        snprintf(where, sizeof(where), "file %s:2", path);
        assert_contains(errstr, where);
        assert_contains(errstr, "expected `key = value`");
        unlink(path);
        sg_config_destroy(cfg);
    }
}

Test(config, file_bad_value_names_file_line_key_value_rule)
{
    char path[64], where[96];
    sg_config_t *cfg = sg_config_new();

    write_file(path, sizeof(path), "\n\nretry.cap_ms = soon\n");
    cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), -1);
    snprintf(where, sizeof(where), "file %s:3", path);
    assert_contains(errstr, where);
    assert_contains(errstr, "retry.cap_ms = \"soon\"");
    assert_contains(errstr, "must be an integer between 1 and 86400000");
    unlink(path);
    sg_config_destroy(cfg);
}

Test(config, missing_file_names_it)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_load_file(cfg, "/nonexistent/sagad.conf", errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "/nonexistent/sagad.conf");
    assert_contains(errstr, "No such file");
    sg_config_destroy(cfg);
}

Test(config, file_line_too_long)
{
    char path[64], *text = malloc(6000);
    sg_config_t *cfg = sg_config_new();

    memcpy(text, "topic.dlq = ", 12);
    memset(text + 12, 'a', 5000);
    strcpy(text + 5012, "\n");
    write_file(path, sizeof(path), text);
    cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "line longer than");
    cr_assert_str_eq(sg_config_str(cfg, "topic.dlq"), "sagad.dlq");
    free(text);
    unlink(path);
    sg_config_destroy(cfg);
}

/* ---- environment ---- */

Test(config, env_overrides_file_and_maps_kafka_names)
{
    char path[64];
    char *envp[] = {"HOME=/root",
                    "SAGAD_PG_DSN=host=envdb",
                    "SAGAD_RETRY_MAX_ATTEMPTS=9",
                    "SAGAD_KAFKA_BOOTSTRAP_SERVERS=h:1",
                    "SAGAD_KAFKA_SOME__UNDER=1",
                    "SAGAD_KAFKA_SASL_PASSWORD=pw",
                    NULL};
    sg_config_t *cfg = sg_config_new();
    collected_t c = {0};

    write_file(path, sizeof(path),
               "pg.dsn = host=filedb\nretry.max_attempts = 3\nlog.level = warn\n"
               "kafka.bootstrap.servers = file:1\n");
    cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_assert_eq(sg_config_load_env(cfg, envp, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_assert_str_eq(sg_config_str(cfg, "pg.dsn"), "host=envdb");
    cr_assert_eq(sg_config_int(cfg, "retry.max_attempts"), 9);
    cr_assert_str_eq(sg_config_str(cfg, "log.level"), "warn", "file value kept");
    sg_config_foreach_kafka(cfg, collect, &c);
    cr_assert_eq(c.n, 3);
    cr_assert_str_eq(c.kv[0], "bootstrap.servers=h:1");
    cr_assert_str_eq(c.kv[1], "some_under=1");
    cr_assert_str_eq(c.kv[2], "sasl.password=pw");
    unlink(path);
    sg_config_destroy(cfg);
}

Test(config, env_skips_non_config_sagad_names)
{
    char *envp[] = {"SAGAD_CONFIG=/etc/sagad.conf",
                    "SAGAD_LOCAL_PGPORT=5999",
                    "SAGAD_TEST_BIN_DIR=bin",
                    "PATH=/usr/bin",
                    "SAGAD_NO_EQUALS_SIGN",
                    "sagad_pg_dsn=lower",
                    NULL};
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_load_env(cfg, envp, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_assert_null(sg_config_str(cfg, "pg.dsn"));
    cr_assert_eq(sg_config_load_env(cfg, NULL, errstr, sizeof(errstr)), 0);
    sg_config_destroy(cfg);
}

Test(config, env_unknown_sagad_variable_is_an_error)
{
    char *envp[] = {"SAGAD_PG_DNS=host=x", NULL};
    char *envp2[] = {"SAGAD_X=1", NULL};
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_load_env(cfg, envp, errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "SAGAD_PG_DNS");
    assert_contains(errstr, "unknown environment variable");
    cr_assert_eq(sg_config_load_env(cfg, envp2, errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "SAGAD_X");
    sg_config_destroy(cfg);
}

Test(config, env_bad_value_names_variable_key_value_and_rule)
{
    char *envp[] = {"SAGAD_PG_CONNECT_TIMEOUT_MS=-5", NULL};
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_load_env(cfg, envp, errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "pg.connect_timeout_ms");
    assert_contains(errstr, "\"-5\"");
    assert_contains(errstr, "env SAGAD_PG_CONNECT_TIMEOUT_MS");
    assert_contains(errstr, "must be an integer between");
    sg_config_destroy(cfg);
}

/* ---- required keys ---- */

Test(config, check_names_missing_required_key_and_its_variable)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "pg.dsn");
    assert_contains(errstr, "SAGAD_PG_DSN");
    assert_contains(errstr, "required");
    cr_assert_eq(sg_config_set(cfg, "pg.dsn", "host=x", "t", errstr, sizeof(errstr)), 0);
    cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), 0, "%s", errstr);
    sg_config_destroy(cfg);
}

/* limits.max_outgoing_bytes stays below what the producer accepts: a
 * message between the two would be refused and quarantined. */
Test(config, check_keeps_the_outgoing_cap_below_the_producers_limit)
{
    sg_config_t *cfg = sg_config_new();

    cr_assert_eq(sg_config_set(cfg, "pg.dsn", "host=x", "t", errstr, sizeof(errstr)), 0);
    cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), 0, "900000 < 1000000: %s", errstr);
    cr_assert_eq(
        sg_config_set(cfg, "kafka.message.max.bytes", "800000", "t", errstr, sizeof(errstr)), 0,
        "%s", errstr);
    cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), -1);
    assert_contains(errstr, "limits.max_outgoing_bytes (900000) must be below the producer's "
                            "kafka.message.max.bytes (800000)");
    cr_assert_eq(
        sg_config_set(cfg, "limits.max_outgoing_bytes", "700000", "t", errstr, sizeof(errstr)), 0,
        "%s", errstr);
    cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), 0, "%s", errstr);
    sg_config_destroy(cfg);
}

/* topic.internal is the relay's alone: a name another topic has is
 * refused, with both keys named. */
Test(config, check_refuses_an_internal_topic_shared_with_another)
{
    static const char *const others[] = {"topic.commands", "topic.events", "topic.dlq"};

    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        sg_config_t *cfg = sg_config_new();

        cr_assert_eq(sg_config_set(cfg, "pg.dsn", "host=x", "t", errstr, sizeof(errstr)), 0);
        cr_assert_eq(sg_config_set(cfg, others[i], "sagad.internal", "t", errstr, sizeof(errstr)),
                     0, "%s", errstr);
        cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), -1, "%s", others[i]);
        assert_contains(errstr, "topic.internal (sagad.internal) must differ from");
        assert_contains(errstr, others[i]);
        cr_assert_eq(
            sg_config_set(cfg, "topic.internal", "own.internal", "t", errstr, sizeof(errstr)), 0,
            "%s", errstr);
        cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), 0, "%s", errstr);
        sg_config_destroy(cfg);
    }
}

/* ---- secrets in output ---- */

static void expect_masked(const char *dsn, const char *shown, const char *secret)
{
    char out[512];

    sg_mask(dsn, out, sizeof(out));
    cr_assert_str_eq(out, shown, "masking %s", dsn);
    assert_not_contains(out, secret);
}

Test(config, mask_dsn_url_form)
{
    expect_masked("postgresql://u:hunter2@h/db", "postgresql://u:****@h/db", "hunter2");
    expect_masked("postgres://u:p%40ss@h:5432/db?sslmode=require",
                  "postgres://u:****@h:5432/db?sslmode=require", "p%40ss");
    expect_masked("postgresql://h/db?user=u&password=s3cret&sslmode=require",
                  "postgresql://h/db?user=u&password=****&sslmode=require", "s3cret");
}

Test(config, mask_dsn_key_value_form)
{
    expect_masked("host=x password=s3cret user=u", "host=x password=**** user=u", "s3cret");
    expect_masked("host=x password='a b' user=u", "host=x password=**** user=u", "a b");
    expect_masked("password='it\\'s' host=x", "password=**** host=x", "it\\'s");
    expect_masked("host=x password=s3cret", "host=x password=****", "s3cret");
}

Test(config, mask_dsn_without_password_is_unchanged)
{
    static const char *const dsns[] = {"host=db user=u dbname=sagad", "postgresql://u@h:5432/db",
                                       "postgresql://h/db", "postgresql:///db?host=/tmp"};
    char out[256];

    for (size_t i = 0; i < sizeof(dsns) / sizeof(dsns[0]); i++) {
        sg_mask(dsns[i], out, sizeof(out));
        cr_assert_str_eq(out, dsns[i]);
    }
}

/* libpq accepts spaces around '=' in key=value strings ("Spaces around the
 * equal sign are optional"), so this is a DSN users write. */
Test(config, mask_dsn_key_value_with_spaces_around_equals)
{
    char out[256];

    sg_mask("host=x password = s3cret user=u", out, sizeof(out));
    assert_not_contains(out, "s3cret");
}

/* sslpassword (the client key passphrase) is also a libpq keyword; a DSN
 * holding both must hide both. */
Test(config, mask_dsn_hides_every_password_keyword)
{
    char out[256];

    sg_mask("host=x sslpassword=k3y password=s3cret", out, sizeof(out));
    assert_not_contains(out, "k3y");
    assert_not_contains(out, "s3cret");
}

Test(config, print_masks_dsn_password_in_both_forms)
{
    static const struct {
        const char *dsn, *shown, *secret;
    } cases[] = {
        {"postgresql://u:hunter2@h/db", "pg.dsn = postgresql://u:****@h/db  # test\n", "hunter2"},
        {"host=x password=s3cret user=u", "pg.dsn = host=x password=**** user=u  # test\n",
         "s3cret"},
        {"host=x password='a b'", "pg.dsn = host=x password=****  # test\n", "'a b'"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_config_t *cfg = config_with("pg.dsn", cases[i].dsn);
        char *out = print_config(cfg);

        assert_contains(out, cases[i].shown);
        assert_not_contains(out, cases[i].secret);
        free(out);
        sg_config_destroy(cfg);
    }
}

Test(config, print_masks_kafka_secrets)
{
    sg_config_t *cfg = config_with("kafka.sasl.password", "kpass1");
    char *out;

    cr_assert_eq(
        sg_config_set(cfg, "kafka.ssl.key.password", "kpass2", "t", errstr, sizeof(errstr)), 0);
    cr_assert_eq(sg_config_set(cfg, "kafka.sasl.oauthbearer.client.secret", "kpass3", "t", errstr,
                               sizeof(errstr)),
                 0);
    cr_assert_eq(sg_config_set(cfg, "kafka.sasl.username", "alice", "t", errstr, sizeof(errstr)),
                 0);
    out = print_config(cfg);
    assert_contains(out, "kafka.sasl.password = ****  # test\n");
    assert_contains(out, "kafka.ssl.key.password = ****");
    assert_contains(out, "kafka.sasl.oauthbearer.client.secret = ****");
    assert_contains(out, "kafka.sasl.username = alice  # t\n");
    assert_not_contains(out, "kpass");
    free(out);
    sg_config_destroy(cfg);
}

Test(config, print_lists_every_key_with_origin)
{
    size_t n = 0;
    const sg_config_key_t *t = sg_config_table(&n);
    sg_config_t *cfg = sg_config_new();
    char *out = print_config(cfg);
    int lines = 0;

    for (const char *p = out; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, (int)n, "one line per key");
    for (size_t i = 0; i < n; i++) {
        char line[160];

        if (t[i].def)
            snprintf(line, sizeof(line), "%s = %s  # default\n", t[i].key, t[i].def);
        else
            snprintf(line, sizeof(line), "%s = (unset, required)", t[i].key);
        assert_contains(out, line);
    }
    free(out);
    sg_config_destroy(cfg);
}

/* ---- the generated sample file ---- */

static char *sample_text(void)
{
    char *sample = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&sample, &len);

    cr_assert_not_null(fp);
    sg_config_write_sample(fp);
    fclose(fp);
    return sample;
}

/* The sample with every `#key = value` line uncommented; a required key
 * (shown without a value) gets required_value. */
static char *sample_uncommented(const char *required_value)
{
    char *sample = sample_text(), *buf = NULL;
    size_t blen = 0;
    FILE *out = open_memstream(&buf, &blen);

    for (char *line = strtok(sample, "\n"); line; line = strtok(NULL, "\n")) {
        bool setting = line[0] == '#' && line[1] >= 'a' && line[1] <= 'z' && strchr(line, '=');
        size_t len = strlen(line);

        if (!setting)
            fprintf(out, "%s\n", line);
        else if (line[len - 1] == '=')
            fprintf(out, "%s %s\n", line + 1, required_value);
        else
            fprintf(out, "%s\n", line + 1);
    }
    fclose(out);
    free(sample);
    return buf;
}

Test(config, sample_file_as_shipped_sets_nothing)
{
    char path[64];
    sg_config_t *cfg = sg_config_new();
    char *sample = sample_text(), *out;

    write_file(path, sizeof(path), sample);
    free(sample);
    cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), 0, "%s", errstr);
    out = print_config(cfg);
    cr_expect_null(strstr(out, "# file "), "every line is commented out: %s", out);
    free(out);
    sg_config_destroy(cfg);
    unlink(path);
}

Test(config, sample_file_uncommented_loads_every_key_at_its_default)
{
    char path[64], expect[256];
    char *text = sample_uncommented("host=db");
    sg_config_t *cfg = sg_config_new();
    size_t n;
    const sg_config_key_t *table = sg_config_table(&n);
    collected_t c = {0};
    char *out;

    write_file(path, sizeof(path), text);
    cr_assert_eq(sg_config_load_file(cfg, path, errstr, sizeof(errstr)), 0, "%s", errstr);
    cr_assert_eq(sg_config_check(cfg, errstr, sizeof(errstr)), 0, "%s", errstr);
    out = print_config(cfg);
    for (size_t i = 0; i < n; i++) {
        snprintf(expect, sizeof(expect), "%s = %s  # file %s:", table[i].key,
                 table[i].def ? table[i].def : "host=db", path);
        assert_contains(out, expect);
    }
    sg_config_foreach_kafka(cfg, collect, &c);
    cr_assert_eq(c.n, 1);
    cr_assert_str_eq(c.kv[0], "bootstrap.servers=localhost:9092");
    free(out);
    free(text);
    sg_config_destroy(cfg);
    unlink(path);
}

/* The default horizons agree with each other; moving one alone is refused
 * with both keys named, moving them together is not. */
Test(config, horizons_are_checked_against_each_other)
{
    sg_config_t *cfg = sg_config_new();
    char why[512];

    cr_assert_eq(sg_retention_check(cfg, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(sg_config_set(cfg, "retention.sagas_s", "600", "test", why, sizeof(why)), 0);
    cr_expect_eq(sg_retention_check(cfg, why, sizeof(why)), -1);
    cr_expect(strstr(why, "retention.dedup_window_s") && strstr(why, "retention.sagas_s"), "%s",
              why);
    cr_assert_eq(sg_config_set(cfg, "retention.dedup_window_s", "600", "test", why, sizeof(why)),
                 0);
    cr_expect_eq(sg_retention_check(cfg, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(sg_config_set(cfg, "retention.dead_letters_s", "599", "test", why, sizeof(why)),
                 0);
    cr_expect_eq(sg_retention_check(cfg, why, sizeof(why)), -1);
    cr_expect(strstr(why, "retention.dead_letters_s") && strstr(why, "retention.sagas_s"), "%s",
              why);
    sg_config_destroy(cfg);
}
