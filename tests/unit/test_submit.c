/* The worker's decoding and saga.start validation, checked against the
 * same fixtures tests/schemas/check.py runs through an independent JSON
 * Schema validator, plus the rules JSON Schema cannot express. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../worker/worker.h"
#include "unit.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf;

    cr_assert_not_null(fp, "cannot open %s", path);
    buf = malloc(1 << 20);
    cr_assert_not_null(buf);
    *len = fread(buf, 1, (1 << 20) - 1, fp);
    buf[*len] = '\0';
    fclose(fp);
    return buf;
}

static char *write_temp(const char *text)
{
    static char path[64];
    FILE *fp;

    snprintf(path, sizeof(path), "/tmp/sagad-unit-registry-%d.json", (int)getpid());
    fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fputs(text, fp);
    fclose(fp);
    return path;
}

/* A registry of the tools the tests name. */
static sg_registry_t *test_registry(void)
{
    static const char text[] =
        "{\"v\":1,\"tools\":{"
        "\"noop\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":\"read\"},"
        "\"reserve\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"reversible\"},"
        "\"release\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"idempotent\"},"
        "\"charge\":{\"adapter\":\"builtin\",\"target\":\"ledger\",\"side_effect\":\"reversible\","
        "\"compensation\":\"release\",\"args\":{\"type\":\"object\",\"required\":[\"amount\"],"
        "\"properties\":{\"amount\":{\"type\":\"integer\",\"minimum\":1}}}},"
        "\"email\":{\"adapter\":\"builtin\",\"target\":\"noop\",\"side_effect\":\"irreversible\"}"
        "}}";
    sg_config_t *cfg = sg_config_new();
    sg_err_t err;
    sg_registry_t *reg = worker_registry_load(write_temp(text), cfg, &err);

    cr_assert_not_null(reg, "test registry refused: %s", err.message);
    sg_config_destroy(cfg);
    return reg;
}

typedef struct seen_s {
    char all[4096];
    int n;
} seen_t;

static void seen_problem(void *opaque, const char *path, const char *rule)
{
    seen_t *s = opaque;
    size_t len = strlen(s->all);

    snprintf(s->all + len, sizeof(s->all) - len, "%s: %s\n", path, rule);
    s->n++;
}

/* Decodes and validates text; returns the problems (0 = accepted). */
static int submit(const char *text, size_t len, const sg_registry_t *reg, seen_t *seen)
{
    static const sg_json_limits_t lim = SG_JSON_LIMITS_DEFAULT;
    sg_decoded_t dec;
    int n;

    memset(seen, 0, sizeof(*seen));
    sg_submit_decode(text, len, &lim, &dec);
    if (dec.type != SG_CMD_START) {
        seen_problem(seen, "(decode)", dec.err.code[0] ? dec.err.message : "not a saga.start");
        sg_json_destroy(dec.doc);
        return 1;
    }
    n = sg_submit_validate(dec.doc, reg, seen_problem, seen);
    sg_json_destroy(dec.doc);
    return n;
}

/* Every tool name the fixtures use, registered as an idempotent noop. */
static sg_registry_t *fixture_registry(const char *dir)
{
    char text[65536] = "{\"v\":1,\"tools\":{", path[512];
    const char *sub[] = {"valid", "invalid"};
    sg_config_t *cfg = sg_config_new();
    sg_registry_t *reg;
    bool first = true;
    sg_err_t err;

    for (int k = 0; k < 2; k++) {
        DIR *d;
        struct dirent *e;
        snprintf(path, sizeof(path), "%s/%s", dir, sub[k]);
        d = opendir(path);
        cr_assert_not_null(d, "no fixtures in %s", path);
        while ((e = readdir(d))) {
            const char *p;
            char *buf, file[800];
            size_t len;
            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            buf = slurp(file, &len);
            for (p = buf; (p = strstr(p, "\"tool\"")); p += 6) {
                char name[80];
                if (sscanf(p, "\"tool\" : \"%64[A-Za-z0-9._-]\"", name) != 1 &&
                    sscanf(p, "\"tool\": \"%64[A-Za-z0-9._-]\"", name) != 1 &&
                    sscanf(p, "\"tool\":\"%64[A-Za-z0-9._-]\"", name) != 1)
                    continue;
                char quoted[90];
                snprintf(quoted, sizeof(quoted), "\"%s\":", name);
                if (strlen(name) > 64 || strstr(text, quoted))
                    continue;
                snprintf(text + strlen(text), sizeof(text) - strlen(text),
                         "%s\"%s\":{\"adapter\":\"builtin\",\"target\":\"noop\","
                         "\"side_effect\":\"idempotent\"}",
                         first ? "" : ",", name);
                first = false;
            }
            free(buf);
        }
        closedir(d);
    }
    strcat(text, "}}");
    reg = worker_registry_load(write_temp(text), cfg, &err);
    cr_assert_not_null(reg, "fixture registry refused: %s", err.message);
    sg_config_destroy(cfg);
    return reg;
}

/* The JSON path the fixture's EXPECT line names (its JSON Pointer
 * "#/steps/0/args" as "$.steps[0].args"); false when it has no line. */
static bool expected_path(const char *dir, const char *name, char *out, size_t size)
{
    char file[600], line[512], fname[200], keyword[64], pointer[200];
    bool found = false;
    FILE *fp;

    snprintf(file, sizeof(file), "%s/invalid/EXPECT", dir);
    fp = fopen(file, "r");
    cr_assert_not_null(fp, "no %s", file);
    while (!found && fgets(line, sizeof(line), fp))
        found = line[0] != ';' && sscanf(line, "%199s %63s %199s", fname, keyword, pointer) == 3 &&
                strcmp(fname, name) == 0;
    fclose(fp);
    if (!found)
        return false;
    snprintf(out, size, "$");
    for (char *tok = strtok(pointer + 1, "/"); tok; tok = strtok(NULL, "/")) {
        size_t len = strlen(out);
        if (tok[strspn(tok, "0123456789")] == '\0')
            snprintf(out + len, size - len, "[%s]", tok);
        else
            snprintf(out + len, size - len, ".%s", tok);
    }
    return true;
}

static void each_fixture(const char *dir, bool valid, const sg_registry_t *reg)
{
    char path[512], file[800];
    DIR *d;
    struct dirent *e;
    int count = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, valid ? "valid" : "invalid");
    d = opendir(path);
    cr_assert_not_null(d);
    while ((e = readdir(d))) {
        seen_t seen;
        size_t len;
        char *buf;
        int n;
        if (!strstr(e->d_name, ".json"))
            continue;
        snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
        buf = slurp(file, &len);
        n = submit(buf, len, reg, &seen);
        if (valid)
            cr_expect_eq(n, 0, "%s is valid by the JSON Schema but the worker refuses it:\n%s",
                         file, seen.all);
        else {
            char want[256];
            cr_expect_gt(n, 0, "%s is invalid by the JSON Schema but the worker accepts it", file);
            /* Refused for the right reason: a problem at the path the
             * independent validator names. */
            cr_assert(expected_path(dir, e->d_name, want, sizeof(want)), "%s: no EXPECT line",
                      file);
            cr_expect(strstr(seen.all, want) != NULL, "%s: expected a problem at %s, got:\n%s",
                      file, want, seen.all);
        }
        free(buf);
        count++;
    }
    closedir(d);
    cr_assert_gt(count, 0, "no fixtures in %s", path);
}

Test(submit, agrees_with_the_json_schema_fixtures)
{
    sg_registry_t *reg = fixture_registry("tests/fixtures/saga-start");

    each_fixture("tests/fixtures/saga-start", true, reg);
    each_fixture("tests/fixtures/saga-start", false, reg);
    sg_registry_destroy(reg);
}

Test(submit, step_command_fixtures_decode_as_the_schema_says)
{
    static const sg_json_limits_t lim = SG_JSON_LIMITS_DEFAULT;
    const char *sub[] = {"valid", "invalid"};

    for (int k = 0; k < 2; k++) {
        char path[256], file[800];
        DIR *d;
        struct dirent *e;
        snprintf(path, sizeof(path), "tests/fixtures/step-command/%s", sub[k]);
        d = opendir(path);
        cr_assert_not_null(d);
        while ((e = readdir(d))) {
            sg_decoded_t dec;
            size_t len;
            char *buf;
            bool ok;
            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            buf = slurp(file, &len);
            sg_submit_decode(buf, len, &lim, &dec);
            ok = dec.type == SG_CMD_EXECUTE || dec.type == SG_CMD_COMPENSATE ||
                 dec.type == SG_CMD_RELEASE || dec.type == SG_CMD_APPROVAL_TIMEOUT;
            cr_expect_eq(ok, k == 0, "%s: worker decodes it as %s", file,
                         ok ? "a command" : dec.err.message);
            sg_json_destroy(dec.doc);
            free(buf);
        }
        closedir(d);
    }
}

/* The control commands (schemas/control-command.schema.json): a valid
 * fixture decodes as saga.cancel with its by and reason, an invalid one is
 * undecodable with an error at the path the independent checker names. */
Test(submit, control_command_fixtures_decode_as_the_schema_says)
{
    static const sg_json_limits_t lim = SG_JSON_LIMITS_DEFAULT;
    static const char dir[] = "tests/fixtures/control-command";
    const char *sub[] = {"valid", "invalid"};
    int count = 0;

    for (int k = 0; k < 2; k++) {
        char path[256], file[800], want[256];
        DIR *d;
        struct dirent *e;
        snprintf(path, sizeof(path), "%s/%s", dir, sub[k]);
        d = opendir(path);
        cr_assert_not_null(d);
        while ((e = readdir(d))) {
            sg_decoded_t dec;
            size_t len;
            char *buf;
            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            buf = slurp(file, &len);
            sg_submit_decode(buf, len, &lim, &dec);
            if (k == 0) {
                bool control = dec.type == SG_CMD_CANCEL || dec.type == SG_CMD_APPROVE ||
                               dec.type == SG_CMD_REJECT;
                cr_expect(control, "%s: worker refuses it: %s", file, dec.err.message);
                cr_expect(dec.by && dec.reason && *dec.by && *dec.reason, "%s: by, reason", file);
                cr_expect(dec.type == SG_CMD_CANCEL || dec.step_name || dec.step >= 0,
                          "%s: names its step", file);
            } else {
                cr_expect_eq(dec.type, SG_CMD_POISON, "%s: worker accepts it", file);
                cr_assert(expected_path(dir, e->d_name, want, sizeof(want)), "%s: no EXPECT line",
                          file);
                cr_expect(strstr(dec.err.message, want) != NULL, "%s: expected an error at %s: %s",
                          file, want, dec.err.message);
            }
            sg_json_destroy(dec.doc);
            free(buf);
            count++;
        }
        closedir(d);
    }
    cr_assert_gt(count, 2);
}

Test(submit, registry_fixtures_load_as_the_schema_says)
{
    const char *sub[] = {"valid", "invalid"};
    sg_config_t *cfg = sg_config_new();

    for (int k = 0; k < 2; k++) {
        char path[256], file[800];
        DIR *d;
        struct dirent *e;
        snprintf(path, sizeof(path), "tests/fixtures/tool-registry/%s", sub[k]);
        d = opendir(path);
        cr_assert_not_null(d);
        while ((e = readdir(d))) {
            sg_registry_t *reg;
            sg_err_t err;
            size_t len;
            char *buf;
            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
            buf = slurp(file, &len);
            reg = worker_registry_load(file, cfg, &err);
            if (k == 1)
                cr_expect_null(reg, "%s is invalid by the JSON Schema but the worker loads it",
                               file);
            else
                cr_expect_not_null(reg, "%s is valid by the JSON Schema but refused: %s", file,
                                   err.message);
            sg_registry_destroy(reg);
            free(buf);
        }
        closedir(d);
    }
    sg_config_destroy(cfg);
}

#define START(steps)                                                                               \
    "{\"v\":1,\"type\":\"saga.start\",\"id\":\"s1\",\"saga_id\":\"order-1\",\"name\":\"n\","       \
    "\"steps\":" steps "}"

Test(submit, rules_json_schema_cannot_say_are_reported_with_paths)
{
    sg_registry_t *reg = test_registry();
    seen_t seen;
    const char *dup =
        START("[{\"name\":\"a\",\"tool\":\"noop\"},{\"name\":\"a\",\"tool\":\"noop\"}]");
    const char *unknown = START("[{\"name\":\"a\",\"tool\":\"teleport\"}]");
    const char *noncomp = START("[{\"name\":\"a\",\"tool\":\"reserve\"}]");
    const char *order = START("[{\"name\":\"mail\",\"tool\":\"email\"},"
                              "{\"name\":\"pay\",\"tool\":\"charge\",\"args\":{\"amount\":5}}]");
    const char *args = START("[{\"name\":\"pay\",\"tool\":\"charge\",\"args\":{\"amount\":0}}]");
    const char *ok = START("[{\"name\":\"hold\",\"tool\":\"reserve\",\"compensate\":"
                           "{\"tool\":\"release\"}},{\"name\":\"pay\",\"tool\":\"charge\","
                           "\"args\":{\"amount\":5}},{\"name\":\"mail\",\"tool\":\"email\"}]");

    cr_expect_eq(submit(dup, strlen(dup), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[1].name: unique");
    cr_expect_eq(submit(unknown, strlen(unknown), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[0].tool: unknown tool \"teleport\"");
    cr_expect_eq(submit(noncomp, strlen(noncomp), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[0].compensate: required: tool \"reserve\" is reversible");
    cr_expect_eq(submit(order, strlen(order), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[0]: order: an irreversible step must come after");
    cr_expect_eq(submit(args, strlen(args), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[0].args.amount: minimum: 1");
    /* The registry's compensation (charge -> release) counts; irreversible
     * last is fine. */
    cr_expect_eq(submit(ok, strlen(ok), reg, &seen), 0, "%s", seen.all);
    sg_registry_destroy(reg);
}

/* What a reference may name (JSON Schema checks only its shape). */
Test(submit, a_reference_names_an_earlier_step_or_the_one_its_compensation_undoes)
{
    sg_registry_t *reg = test_registry();
    seen_t seen;
    const char *later = START("[{\"name\":\"a\",\"tool\":\"noop\",\"args\":{\"x\":{\"$from\":"
                              "\"/steps/b/result/id\"}}},{\"name\":\"b\",\"tool\":\"noop\"}]");
    const char *self = START("[{\"name\":\"a\",\"tool\":\"noop\",\"args\":{\"x\":{\"$from\":"
                             "\"/steps/a/key\"}}}]");
    const char *ghost = START("[{\"name\":\"a\",\"tool\":\"noop\",\"args\":{\"x\":[{\"$from\":"
                              "\"/steps/zz/result\"}]}}]");
    const char *comp_later =
        START("[{\"name\":\"a\",\"tool\":\"reserve\",\"compensate\":{\"tool\":\"release\","
              "\"args\":{\"id\":{\"$from\":\"/steps/b/result/id\"}}}},{\"name\":\"b\","
              "\"tool\":\"noop\"}]");
    /* A reference in args is checked against the tool's args schema only
     * once resolved: amount is not an integer here, and that is fine. */
    const char *ok = "{\"v\":1,\"type\":\"saga.start\",\"id\":\"m\",\"saga_id\":\"s\","
                     "\"name\":\"n\",\"steps\":[{\"name\":\"hold\",\"tool\":\"reserve\","
                     "\"compensate\":{\"tool\":\"release\",\"args\":{\"id\":{\"$from\":"
                     "\"/steps/hold/result/id\"},\"key\":{\"$from\":\"/steps/hold/key\"}}}},"
                     "{\"name\":\"pay\",\"tool\":\"charge\",\"args\":{\"amount\":{\"$from\":"
                     "\"/steps/hold/result/total\"}}}],\"output\":{\"paid\":{\"$from\":"
                     "\"/steps/pay/result\"},\"in\":{\"$from\":\"/input\"}}}";
    const char *out_ghost = "{\"v\":1,\"type\":\"saga.start\",\"id\":\"m\",\"saga_id\":\"s\","
                            "\"name\":\"n\",\"steps\":[{\"name\":\"a\",\"tool\":\"noop\"}],"
                            "\"output\":{\"$from\":\"/steps/b/key\"}}";

    cr_expect_eq(submit(later, strlen(later), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[0].args.x.$from: reference: step \"b\" ($.steps[1]) has "
                              "not run yet here; a reference names an earlier step\n");
    cr_expect_eq(submit(self, strlen(self), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[0].args.x.$from: reference: step \"a\" ($.steps[0])");
    cr_expect_eq(submit(ghost, strlen(ghost), reg, &seen), 1);
    assert_contains(seen.all,
                    "$.steps[0].args.x[0].$from: reference: no step of this saga is named \"zz\"");
    cr_expect_eq(submit(comp_later, strlen(comp_later), reg, &seen), 1);
    assert_contains(seen.all, "$.steps[0].compensate.args.id.$from: reference: step \"b\" "
                              "($.steps[1]) has not run yet here; a reference names an earlier "
                              "step or the step its compensation undoes");
    cr_expect_eq(submit(ok, strlen(ok), reg, &seen), 0, "%s", seen.all);
    cr_expect_eq(submit(out_ghost, strlen(out_ghost), reg, &seen), 1);
    assert_contains(seen.all, "$.output.$from: reference: no step of this saga is named \"b\"");
    sg_registry_destroy(reg);
}

Test(submit, every_problem_is_reported_not_just_the_first)
{
    sg_registry_t *reg = test_registry();
    const char *text = START("[{\"name\":\"a b\",\"tool\":\"teleport\",\"extra\":1},"
                             "{\"name\":\"x\",\"tool\":\"charge\",\"args\":{}}]");
    seen_t seen;

    cr_expect_eq(submit(text, strlen(text), reg, &seen), 4, "%s", seen.all);
    assert_contains(seen.all, "$.steps[0].extra: additionalProperties");
    assert_contains(seen.all, "$.steps[0].name: pattern");
    assert_contains(seen.all, "$.steps[0].tool: unknown tool");
    assert_contains(seen.all, "$.steps[1].args.amount: required");
    sg_registry_destroy(reg);
}

Test(submit, undecodable_commands_come_back_as_poison_with_a_code)
{
    static const sg_json_limits_t lim = {64, 8, 0};
    const struct {
        const char *text;
        const char *code;
    } cases[] = {
        {"{\"v\":1,", "input.json.malformed"},
        {"\"\xff\xfe\"", "input.utf8.invalid"},
        {"[[[[[[[[[[[[1]]]]]]]]]]]]", "input.json.too_deep"},
        {"{\"v\":1,\"type\":\"saga.start\",\"saga_id\":"
         "\"0123456789012345678901234567890123456789\"}",
         "input.too_large"},
        {"{\"v\":1,\"type\":\"saga.stop\",\"saga_id\":\"a\"}", "input.message.unknown_type"},
        {"{\"v\":1,\"type\":\"step.execute\",\"saga_id\":\"a\",\"step\":0}",
         "input.schema.required"},
        {"{\"v\":1,\"type\":\"step.execute\",\"saga_id\":\"a b\"}", "input.schema.invalid"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_decoded_t dec;
        sg_submit_decode(cases[i].text, strlen(cases[i].text), &lim, &dec);
        cr_expect_eq(dec.type, SG_CMD_POISON, "case %zu decoded", i);
        cr_expect_str_eq(dec.err.code, cases[i].code, "case %zu: %s", i, dec.err.message);
        sg_json_destroy(dec.doc);
    }
}

Test(submit, idempotency_key_changes_with_phase_and_generation_only)
{
    char a[128], b[128], c[128];

    sg_idem_key(a, sizeof(a), "order-1", 2, false, 1);
    sg_idem_key(b, sizeof(b), "order-1", 2, true, 1);
    sg_idem_key(c, sizeof(c), "order-1", 2, false, 2);
    cr_expect_str_eq(a, "order-1:2:f:g1");
    cr_expect_str_neq(a, b);
    cr_expect_str_neq(a, c);
}

Test(submit, only_a_w3c_traceparent_is_kept)
{
    static const char *const good[] = {
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09",
    };
    static const char *const bad[] = {
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  /* upper case */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  /* trace id zero */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  /* parent id zero */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  /* version ff */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",   /* 54 bytes */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011", /* 56 bytes */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7\r\nX-Evil: yes1-01", /* 55 bytes */
        "",
    };

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_expect(sg_traceparent_ok(good[i], strlen(good[i])), "refused: %s", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect(!sg_traceparent_ok(bad[i], strlen(bad[i])), "kept: %s", bad[i]);
    cr_expect(!sg_traceparent_ok(NULL, 55));
}

/* ---- parallel groups: the rules JSON Schema cannot say ---- */

/* Validates a saga.start whose steps (and output, unless NULL) are written
 * with ' for " to stay readable; returns the problems. */
static int submit_groups(const char *steps, const char *output, const sg_registry_t *reg,
                         seen_t *seen)
{
    char text[16384];
    int n;

    n = snprintf(text, sizeof(text),
                 "{'v':1,'type':'saga.start','id':'s1','saga_id':'order-1','name':'n',"
                 "'steps':%s%s%s}",
                 steps, output ? ",'output':" : "", output ? output : "");
    cr_assert(n > 0 && (size_t)n < sizeof(text));
    for (char *c = text; *c; c++)
        if (*c == '\'')
            *c = '"';
    return submit(text, strlen(text), reg, seen);
}

Test(submit, steps_groups_and_members_share_one_namespace)
{
    sg_registry_t *reg = test_registry();
    seen_t seen;

    cr_expect_eq(submit_groups("[{'name':'a','tool':'noop'},{'name':'g','policy':'best_effort',"
                               "'parallel':[{'name':'a','tool':'noop'}]}]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[1].parallel[0].name: unique: step name \"a\" is used by "
                               "$.steps[0] too (steps, groups and group members share one "
                               "namespace)\n");
    cr_expect_eq(submit_groups("[{'name':'g','policy':'best_effort','parallel':[{'name':'x',"
                               "'tool':'noop'}]},{'name':'h','policy':'best_effort','parallel':"
                               "[{'name':'x','tool':'noop'}]}]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    assert_contains(seen.all, "$.steps[1].parallel[0].name: unique: step name \"x\" is used by "
                              "$.steps[0].parallel[0] too");
    /* A group's own name counts too, against its members and later steps. */
    cr_expect_eq(submit_groups("[{'name':'g','policy':'fail_fast','parallel':[{'name':'g',"
                               "'tool':'noop'}]},{'name':'g','tool':'noop'}]",
                               NULL, reg, &seen),
                 2, "%s", seen.all);
    assert_contains(seen.all, "$.steps[0].parallel[0].name: unique: step name \"g\" is used by "
                              "$.steps[0] too");
    assert_contains(seen.all, "$.steps[1].name: unique: step name \"g\" is used by $.steps[0] "
                              "too");
    sg_registry_destroy(reg);
}

/* n groups of m noop members, then k noop steps, into out. */
static void many_calls(char *out, size_t size, int n, int m, int k)
{
    size_t len = 0;

    len += (size_t)snprintf(out + len, size - len, "[");
    for (int g = 0; g < n; g++) {
        len += (size_t)snprintf(out + len, size - len,
                                "%s{'name':'g%d','policy':'best_effort','parallel':[", g ? "," : "",
                                g);
        for (int j = 0; j < m; j++)
            len += (size_t)snprintf(out + len, size - len, "%s{'name':'g%d-%d','tool':'noop'}",
                                    j ? "," : "", g, j);
        len += (size_t)snprintf(out + len, size - len, "]}");
    }
    for (int i = 0; i < k; i++)
        len += (size_t)snprintf(out + len, size - len, "%s{'name':'s%d','tool':'noop'}",
                                n || i ? "," : "", i);
    snprintf(out + len, size - len, "]");
    cr_assert_lt(len + 1, size);
}

/* The worker keeps one row per call: members count, groups do not. */
Test(submit, at_most_64_calls_counting_every_member)
{
    sg_registry_t *reg = test_registry();
    char steps[12000];
    seen_t seen;

    many_calls(steps, sizeof(steps), 4, 16, 0); /* 64 calls in 4 elements */
    cr_expect_eq(submit_groups(steps, NULL, reg, &seen), 0, "%s", seen.all);
    many_calls(steps, sizeof(steps), 4, 15, 4); /* 64 calls in 8 elements */
    cr_expect_eq(submit_groups(steps, NULL, reg, &seen), 0, "%s", seen.all);
    many_calls(steps, sizeof(steps), 5, 13, 0); /* 65 calls in 5 elements */
    cr_expect_eq(submit_groups(steps, NULL, reg, &seen), 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps: maxItems: at most 64 calls (steps and group members)\n");
    many_calls(steps, sizeof(steps), 1, 2, 63); /* 65 calls in 64 elements */
    cr_expect_eq(submit_groups(steps, NULL, reg, &seen), 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps: maxItems: at most 64 calls (steps and group members)\n");
    sg_registry_destroy(reg);
}

#define GROUP_AB(a_args, b_args)                                                                   \
    "{'name':'g','policy':'all_or_nothing','parallel':[{'name':'a','tool':'noop','args':" a_args   \
    "},{'name':'b','tool':'noop','args':" b_args "}]}"

Test(submit, a_member_references_what_ran_before_its_group_never_a_sibling)
{
    sg_registry_t *reg = test_registry();
    seen_t seen;

    cr_expect_eq(submit_groups("[" GROUP_AB("{'x':{'$from':'/steps/b/result'}}", "{}") "]", NULL,
                               reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all,
                     "$.steps[0].parallel[0].args.x.$from: reference: \"b\" "
                     "($.steps[0].parallel[1]) runs at the same time, in the same group; a group "
                     "member's reference names a step or group before its group\n");
    /* Nor its own group, which has not finished. */
    cr_expect_eq(submit_groups("[" GROUP_AB("{}", "{'x':{'$from':'/steps/g/result'}}") "]", NULL,
                               reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[0].parallel[1].args.x.$from: reference: group \"g\" "
                               "($.steps[0]) has not run yet here; a reference names an earlier "
                               "step\n");
    /* A step before the group cannot name a member. */
    cr_expect_eq(submit_groups("[{'name':'s','tool':'noop','args':{'x':{'$from':'/steps/a/key'}}},"
                               "" GROUP_AB("{}", "{}") "]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[0].args.x.$from: reference: step \"a\" "
                               "($.steps[1].parallel[0]) has not run yet here; a reference names "
                               "an earlier step\n");
    /* A member's compensation may name the member itself, not a sibling. */
    cr_expect_eq(submit_groups("[{'name':'g','policy':'fail_fast','parallel':[{'name':'a','tool':"
                               "'reserve','compensate':{'tool':'release','args':{'me':{'$from':"
                               "'/steps/a/result/id'},'k':{'$from':'/steps/a/key'},'sib':{'$from':"
                               "'/steps/b/key'}}}},{'name':'b','tool':'noop'}]}]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[0].parallel[0].compensate.args.sib.$from: reference: "
                               "\"b\" ($.steps[0].parallel[1]) runs at the same time, in the same "
                               "group; a group member's reference names a step or group before "
                               "its group\n");
    /* Earlier steps, groups and members are all in scope. */
    cr_expect_eq(submit_groups("[{'name':'s','tool':'noop'},{'name':'h','policy':'best_effort',"
                               "'parallel':[{'name':'c','tool':'noop'}]}," GROUP_AB(
                                   "{'s':{'$from':'/steps/s/key'},'h':{'$from':'/steps/h/result'},"
                                   "'c':{'$from':'/steps/c/key'}}",
                                   "{'c':{'$from':'/steps/c/result/x'}}") "]",
                               NULL, reg, &seen),
                 0, "%s", seen.all);
    sg_registry_destroy(reg);
}

Test(submit, a_group_is_referenced_by_its_manifest_never_a_key)
{
    sg_registry_t *reg = test_registry();
    seen_t seen;

    cr_expect_eq(submit_groups("[" GROUP_AB("{}", "{}") ",{'name':'s','tool':'noop','args':"
                                                        "{'x':{'$from':'/steps/g/key'}}}]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[1].args.x.$from: reference: a group has no key; name a "
                               "member (\"g\" is the group $.steps[0], whose result is its "
                               "manifest)\n");
    cr_expect_eq(
        submit_groups("[" GROUP_AB("{}", "{}") "]", "{'k':{'$from':'/steps/g/key'}}", reg, &seen),
        1, "%s", seen.all);
    assert_contains(seen.all, "$.output.k.$from: reference: a group has no key; name a member");
    /* Its manifest, a member's result and key, from a later step and the
     * output. */
    cr_expect_eq(
        submit_groups("[" GROUP_AB("{}", "{}") ",{'name':'s','tool':'noop','args':{'m':"
                                               "{'$from':'/steps/g/result'},'a':{'$from':"
                                               "'/steps/a/result/id'},'b':{'$from':'/steps/"
                                               "b/key'}}}]",
                      "{'g':{'$from':'/steps/g/result/members'},'a':{'$from':'/steps/a/"
                      "key'}}",
                      reg, &seen),
        0, "%s", seen.all);
    sg_registry_destroy(reg);
}

Test(submit, a_group_with_an_irreversible_member_is_best_effort_and_comes_last)
{
    sg_registry_t *reg = test_registry();
    seen_t seen;
    static const char *const strict[] = {"all_or_nothing", "fail_fast"};
    char steps[512];

    for (size_t i = 0; i < 2; i++) {
        snprintf(steps, sizeof(steps),
                 "[{'name':'g','policy':'%s','parallel':[{'name':'a','tool':'noop'},{'name':'m',"
                 "'tool':'email'}]}]",
                 strict[i]);
        cr_expect_eq(submit_groups(steps, NULL, reg, &seen), 1, "%s", seen.all);
        cr_expect_str_eq(seen.all,
                         "$.steps[0].policy: policy: a group with an irreversible member "
                         "($.steps[0].parallel[1]) must be best_effort: with all_or_nothing or "
                         "fail_fast, a failed member would leave the irreversible effect of "
                         "another standing while the saga compensates\n");
    }
    /* best_effort, but a reversible step after it. */
    cr_expect_eq(submit_groups("[{'name':'g','policy':'best_effort','parallel':[{'name':'m','tool':"
                               "'email'}]},{'name':'pay','tool':'charge','args':{'amount':5}}]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[0]: order: a group with an irreversible member must come "
                               "after every reversible step or group ($.steps[1] is "
                               "reversible)\n");
    /* A group with a reversible member after an irreversible step. */
    cr_expect_eq(submit_groups("[{'name':'m','tool':'email'},{'name':'g','policy':'fail_fast',"
                               "'parallel':[{'name':'pay','tool':'charge','args':{'amount':5}}]}]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[0]: order: an irreversible step must come after every "
                               "reversible step ($.steps[1] is reversible)\n");
    /* A reversible member needs its compensation like a step. */
    cr_expect_eq(submit_groups("[{'name':'g','policy':'fail_fast','parallel':[{'name':'h','tool':"
                               "'reserve'}]}]",
                               NULL, reg, &seen),
                 1, "%s", seen.all);
    cr_expect_str_eq(seen.all, "$.steps[0].parallel[0].compensate: required: tool \"reserve\" is "
                               "reversible, so the step must name its compensation\n");
    /* Reversible first, then the irreversible group, best_effort (a group
     * both reversible and irreversible is not compared with itself), then
     * steps without effects to undo. */
    cr_expect_eq(submit_groups("[{'name':'h','tool':'reserve','compensate':{'tool':'release'}},"
                               "{'name':'g','policy':'best_effort','parallel':[{'name':'m','tool':"
                               "'email'},{'name':'pay','tool':'charge','args':{'amount':5}}]},"
                               "{'name':'r','tool':'noop'}]",
                               NULL, reg, &seen),
                 0, "%s", seen.all);
    sg_registry_destroy(reg);
}

/* A command keyed by anything but its saga_id is poison (issue 35 item
 * 7): a mis-keyed cancel lands on another partition, where a call of its
 * saga may be in flight, and one for a saga that does not exist would be
 * answered where nobody listens.  The key is named, printable. */
Test(submit, a_command_not_keyed_by_its_saga_id_is_poison)
{
    static const char cancel[] = "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"c-1\", "
                                 "\"saga_id\": \"order-7\", \"by\": \"ops\", \"reason\": \"r\"}";
    static const struct {
        const char *key;
        size_t len;
        const char *shown; /* NULL: accepted */
    } cases[] = {
        {"order-7", 7, NULL},
        {"order-70", 8, "Kafka key \"order-70\" is not its saga_id \"order-7\""},
        {"order-", 6, "\"order-\""},
        {NULL, 0, "Kafka key (none) is not"},
        {"", 0, "Kafka key (none) is not"},
        {"o\x1b[2J", 5, "\"o\\x1b[2J\""},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sg_decoded_t dec;
        sg_submit_decode(cancel, strlen(cancel), NULL, &dec);
        cr_assert_eq(dec.type, SG_CMD_CANCEL);
        sg_submit_check_key(&dec, cases[i].key, cases[i].len);
        if (!cases[i].shown) {
            cr_expect_eq(dec.type, SG_CMD_CANCEL, "keyed by its saga_id: kept");
        } else {
            cr_expect_eq(dec.type, SG_CMD_POISON, "case %zu", i);
            cr_expect_str_eq(dec.err.code, "input.key.mismatch");
            cr_expect_eq(dec.err.cls, SG_ERRCLASS_POISON);
            cr_expect(strstr(dec.err.message, cases[i].shown) != NULL, "%s", dec.err.message);
            cr_expect_str_eq(dec.saga_id, "order-7", "kept for its dead letter");
        }
        sg_json_destroy(dec.doc);
    }
}

static void collect(void *opaque, const char *path, const char *rule)
{
    char *out = opaque;
    size_t n = strlen(out);

    snprintf(out + n, 1024 - n, "%s%s|%s", n ? ";" : "", path,
             strstr(rule, "warning: ") ? "w" : "?");
}

/* A compensation that references its own step's result can never run
 * when that step timed out (no result): a valid saga, but warned about,
 * at the compensation's args; a reference to its key, or to another
 * step's result, is not warned about (issue 35 item 7). */
Test(submit, a_compensation_of_its_own_steps_result_is_warned_about)
{
    static const char doc[] =
        "{\"v\": 1, \"type\": \"saga.start\", \"saga_id\": \"w\", \"name\": \"t\", \"steps\": ["
        " {\"name\": \"hold\", \"tool\": \"t\", \"compensate\": {\"tool\": \"u\", \"args\": "
        "  {\"id\": {\"$from\": \"/steps/hold/key\"}}}},"
        " {\"name\": \"pay\", \"tool\": \"t\", \"compensate\": {\"tool\": \"u\", \"args\": "
        "  {\"x\": [{\"id\": {\"$from\": \"/steps/pay/result/charge_id\"}}]}}},"
        " {\"name\": \"g\", \"policy\": \"best_effort\", \"parallel\": ["
        "  {\"name\": \"m\", \"tool\": \"t\", \"compensate\": {\"tool\": \"u\", \"args\": "
        "   {\"id\": {\"$from\": \"/steps/m/result\"}, \"p\": {\"$from\": "
        "\"/steps/pay/result\"}}}},"
        "  {\"name\": \"mm\", \"tool\": \"t\", \"compensate\": {\"tool\": \"u\", \"args\": "
        "   {\"id\": {\"$from\": \"/steps/m/result\"}, \"k\": {\"$from\": "
        "\"/steps/mmx/result\"}}}}]}]}";
    char got[1024] = "";
    sg_json_t *root = sg_json_parse(doc, strlen(doc), NULL, NULL);

    cr_assert_not_null(root);
    cr_expect_eq(sg_submit_warnings(root, collect, got), 2);
    cr_expect_str_eq(got, "$.steps[1].compensate.args|w;$.steps[2].parallel[0].compensate.args|w");
    sg_json_destroy(root);
}

/* A tool that requires approval cannot be a compensation: a compensation
 * runs when the saga fails or is cancelled, with no gate, so naming the
 * gated charge there ran it without the person its registry entry
 * requires (issue 36 item 3).  Refused in a submission at its path, and
 * in a registry as a tool's default compensation. */
Test(submit, a_gated_tool_cannot_be_a_compensation)
{
    static const char reg_text[] =
        "{\"v\":1,\"tools\":{"
        "\"reserve\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"idempotent\"},"
        "\"charge_high\":{\"adapter\":\"builtin\",\"target\":\"ledger\",\"side_effect\":"
        "\"idempotent\",\"approval\":\"required\"}}}";
    static const char bad_reg[] =
        "{\"v\":1,\"tools\":{"
        "\"hold\":{\"adapter\":\"builtin\",\"target\":\"echo\",\"side_effect\":\"reversible\","
        "\"compensation\":\"charge_high\"},"
        "\"charge_high\":{\"adapter\":\"builtin\",\"target\":\"ledger\",\"side_effect\":"
        "\"idempotent\",\"approval\":\"required\"}}}";
    static const char start[] =
        "{\"v\":1,\"type\":\"saga.start\",\"id\":\"s\",\"saga_id\":\"b-1\",\"name\":\"t\","
        "\"steps\":[{\"name\":\"r\",\"tool\":\"reserve\",\"compensate\":{\"tool\":\"charge_high\","
        "\"args\":{\"amount\":999999}}}]}";
    sg_config_t *cfg = sg_config_new();
    sg_err_t err;
    sg_registry_t *reg = worker_registry_load(write_temp(reg_text), cfg, &err);
    seen_t seen;

    cr_assert_not_null(reg, "%s", err.message);
    cr_expect_eq(submit(start, strlen(start), reg, &seen), 1, "%s", seen.all);
    cr_expect(strstr(seen.all, "$.steps[0].compensate.tool: approval: tool \"charge_high\" "
                               "requires a person's approval") != NULL,
              "%s", seen.all);
    sg_registry_destroy(reg);

    cr_expect_null(worker_registry_load(write_temp(bad_reg), cfg, &err), "a gated default");
    cr_expect(strstr(err.message, "$.tools.hold.compensation") &&
                  strstr(err.message, "requires approval"),
              "%s", err.message);
    sg_config_destroy(cfg);
}
