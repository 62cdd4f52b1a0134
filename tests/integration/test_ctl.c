/* sagactl end to end: the real binary against the real worker, relay,
 * Kafka and PostgreSQL of each test.  What a producer or on-call relies on
 * is asserted: exit codes, the lines on stdout, the rows, and that
 * sagactl's verdict on a submission is the worker's own. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sagad/sg_registry.h"
#include "sagad/sg_submit.h"
#include "../support/sg_worker_env.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static struct {
    char *out, *err;
    char files[8][128];
    int nfiles;
} R;

static void ctl_fini(void)
{
    free(R.out);
    free(R.err);
    for (int i = 0; i < R.nfiles; i++)
        unlink(R.files[i]);
    memset(&R, 0, sizeof(R));
    sgw_teardown();
}

TestSuite(ctl, .init = sgw_setup, .fini = ctl_fini, .timeout = 200);

/* sagactl with the test's environment plus extra ("K=V", NULL-terminated,
 * later wins); its exit code, stdout and stderr in R. */
static int ctl_env(const char *const *args, const char *const *extra)
{
    const char *env[SGW_MAX_ENV + 8];
    size_t n = 0;

    for (size_t i = 0; sgw.env[i]; i++)
        env[n++] = sgw.env[i];
    for (size_t k = 0; extra && extra[k] && k < 8; k++)
        env[n++] = extra[k];
    env[n] = NULL;
    free(R.out);
    free(R.err);
    R.out = R.err = NULL;
    return sgt_run("sagactl", args, env, &R.out, &R.err);
}

static int ctl(const char *const *args)
{
    return ctl_env(args, NULL);
}

/* A file of the test's (removed at the end) holding text; its path. */
static const char *temp_file(const char *text)
{
    char *path = R.files[R.nfiles++];
    FILE *fp;

    cr_assert_leq(R.nfiles, 8);
    snprintf(path, sizeof(R.files[0]), "/tmp/sagactl-test-%d-%d.json", (int)getpid(), R.nfiles);
    fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fputs(text, fp);
    fclose(fp);
    return path;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf;
    long n;

    cr_assert_not_null(fp, "cannot read %s", path);
    fseek(fp, 0, SEEK_END);
    n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
    buf[n] = '\0';
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

/* ---- validate: the worker's verdict, offline ---- */

/* Every tool the fixtures name, registered (builtin noop): a registry
 * in which only the contract's rules can fail. */
static const char *fixture_registry(void)
{
    static const char *const dirs[] = {"tests/fixtures/saga-start/valid",
                                       "tests/fixtures/saga-start/invalid"};
    char *text = calloc(1, 1 << 16);
    const char *path;
    int ntools = 0;

    strcpy(text, "{\"v\": 1, \"tools\": {");
    for (int k = 0; k < 2; k++) {
        DIR *d = opendir(dirs[k]);
        struct dirent *e;
        cr_assert_not_null(d);
        while ((e = readdir(d))) {
            char file[600], *buf, *p;
            size_t len;
            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(file, sizeof(file), "%s/%s", dirs[k], e->d_name);
            buf = slurp(file, &len);
            for (p = buf; (p = strstr(p, "\"tool\"")); p++) {
                char name[70] = "", quoted[80];
                const char *q = p + 6;
                while (*q == ' ' || *q == ':')
                    q++;
                if (sscanf(q, "\"%65[A-Za-z0-9._-]\"", name) != 1 || strlen(name) > 64)
                    continue;
                snprintf(quoted, sizeof(quoted), "\"%s\":", name);
                if (strstr(text, quoted))
                    continue;
                snprintf(text + strlen(text), (1 << 16) - strlen(text),
                         "%s%s {\"adapter\": \"builtin\", \"target\": \"noop\", "
                         "\"side_effect\": \"idempotent\"}",
                         ntools++ ? ", " : "", quoted);
            }
            free(buf);
        }
        closedir(d);
    }
    strcat(text, "}}");
    path = temp_file(text);
    free(text);
    return path;
}

/* Appends "path: rule" to the 8192-byte buffer o. */
static void add_line(void *o, const char *path, const char *rule)
{
    char *out = o;
    size_t len = strlen(out);

    snprintf(out + len, 8192 - len, "%s: %s\n", path, rule);
}

/* The C validator's verdict on text, as sagactl validate --json prints it
 * would be: the problems as "path: rule" lines ("" when valid). */
static void c_verdict(const char *text, size_t len, const sg_registry_t *reg, char *out,
                      size_t size)
{
    static const sg_json_limits_t lim = SG_JSON_LIMITS_DEFAULT;
    sg_decoded_t dec;

    out[0] = '\0';
    sg_submit_decode(text, len, &lim, &dec);
    if (dec.type == SG_CMD_POISON)
        snprintf(out, size, "%s%s\n", dec.err.message[0] == '$' ? "" : "$: ", dec.err.message);
    else if (dec.type != SG_CMD_START)
        snprintf(out, size, "$.type: a submission is a saga.start\n");
    else
        sg_submit_validate(dec.doc, reg, add_line, out);
    sg_json_destroy(dec.doc);
}

/* sagactl's problems (from --json) as "path: rule" lines. */
static void ctl_verdict(const char *json_line, char *out, size_t size)
{
    sg_json_t *doc = sg_json_parse(json_line, strlen(json_line), NULL, NULL);

    cr_assert_not_null(doc, "not one JSON object: %s", json_line);
    out[0] = '\0';
    for (const sg_json_t *p = sg_json_first(sg_json_member(doc, "problems")); p;
         p = sg_json_next(p)) {
        size_t len = strlen(out);
        snprintf(out + len, size - len, "%s: %s\n", sgw_jstr(p, "path"), sgw_jstr(p, "rule"));
    }
    sg_json_destroy(doc);
}

Test(ctl, validate_gives_the_c_validators_verdict_on_every_fixture)
{
    static const char *const dirs[] = {"tests/fixtures/saga-start/valid",
                                       "tests/fixtures/saga-start/invalid"};
    const char *regpath = fixture_registry();
    sg_config_t *cfg = sg_config_new();
    sg_err_t err;
    sg_registry_t *reg = sg_registry_load(regpath, cfg, NULL, &err);
    int count[2] = {0, 0};

    cr_assert_not_null(reg, "%s", err.message);
    for (int k = 0; k < 2; k++) {
        DIR *d = opendir(dirs[k]);
        struct dirent *e;
        while ((e = readdir(d))) {
            char file[600], want[8192], got[8192];
            size_t len;
            char *text;
            int rc;
            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(file, sizeof(file), "%s/%s", dirs[k], e->d_name);
            text = slurp(file, &len);
            c_verdict(text, len, reg, want, sizeof(want));
            rc = ctl(ARGS("validate", "--json", "--registry", regpath, file));
            ctl_verdict(R.out, got, sizeof(got));
            cr_expect_eq(rc, want[0] ? 3 : 0, "%s: exit %d, stderr %s", file, rc, R.err);
            cr_expect_str_eq(got, want, "%s: sagactl and the C validator disagree", file);
            /* The fixtures say which are valid: both agree with them. */
            cr_expect_eq(want[0] != '\0', k == 1, "%s: verdict %s", file, want);
            /* The human form is the same lines. */
            rc = ctl(ARGS("validate", "--registry", regpath, file));
            cr_expect_str_eq(R.out, want, "%s: human output", file);
            free(text);
            count[k]++;
        }
        closedir(d);
    }
    cr_expect_gt(count[0], 10);
    cr_expect_gt(count[1], 40);
    sg_registry_destroy(reg);
    sg_config_destroy(cfg);
}

/* A valid saga whose compensation references its own step's result is
 * accepted (exit 0) with a warning that names the path and the idiom
 * that works: on stderr, or in --json's warnings (issue 35 item 7). */
Test(ctl, validate_warns_of_a_compensation_of_its_own_steps_result)
{
    static const char doc[] =
        "{\"v\":1,\"type\":\"saga.start\",\"id\":\"s1\",\"saga_id\":\"w-1\",\"name\":\"t\","
        "\"steps\":[{\"name\":\"charge\",\"tool\":\"payment.charge\",\"args\":"
        "{\"amount_cents\":5},\"compensate\":{\"tool\":\"payment.refund\",\"args\":"
        "{\"charge_id\":{\"$from\":\"/steps/charge/result/charge_id\"}}}}]}";
    char file[256];
    FILE *fp;
    sg_json_t *out;
    const sg_json_t *w;

    snprintf(file, sizeof(file), "%s/warn.json", sgw.dir);
    cr_assert_not_null(fp = fopen(file, "w"));
    fputs(doc, fp);
    fclose(fp);
    cr_expect_eq(ctl(ARGS("validate", "--registry", "examples/checkout/tools.json", file)), 0, "%s",
                 R.err);
    cr_expect_str_eq(R.out, "", "nothing on stdout: the saga is valid");
    cr_expect(strstr(R.err, "$.steps[0].compensate.args: warning: references "
                            "/steps/charge/result") &&
                  strstr(R.err, "reference /steps/charge/key instead"),
              "%s", R.err);
    cr_expect_eq(
        ctl(ARGS("validate", "--json", "--registry", "examples/checkout/tools.json", file)), 0);
    out = sg_json_parse(R.out, strlen(R.out), NULL, NULL);
    cr_assert_not_null(out, "%s", R.out);
    w = sg_json_member(out, "warnings");
    cr_expect_eq(sg_json_array_size(w), 1);
    cr_expect_str_eq(sgw_jstr(sg_json_array_get(w, 0), "path"), "$.steps[0].compensate.args");
    sg_json_destroy(out);
}

/* The problems of the worker's saga.rejected for the same bytes are
 * sagactl's: a registry problem (unknown tool), an args-schema problem
 * and contract problems, on the real worker. */
Test(ctl, validate_problems_are_those_of_the_workers_saga_rejected)
{
    static const char *const bodies[] = {
        "\"steps\": [{\"name\": \"a\", \"tool\": \"no.such.tool\"}]",
        "\"steps\": [{\"name\": \"a\", \"tool\": \"inventory.reserve\", \"args\": {\"sku\": \"\", "
        "\"qty\": 0}}]",
        "\"steps\": [{\"name\": \"a b\", \"tool\": \"noop\", \"extra\": 1}], \"deadline\": null",
        "\"steps\": [{\"name\": \"x\", \"tool\": \"email.send\"}, {\"name\": \"y\", \"tool\": "
        "\"ledger.reversible\"}]",
    };
    sgw_pair_start(NULL, 1, NULL);
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        char text[1024], saga[64], want[8192], got[8192];
        const sg_json_t *ev;
        char *printed;
        snprintf(saga, sizeof(saga), "ctl-rej-%zu", i);
        snprintf(text, sizeof(text),
                 "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"m-%zu\", \"saga_id\": \"%s\", "
                 "\"name\": \"rej\", %s}",
                 i, saga, bodies[i]);
        cr_assert_eq(ctl(ARGS("validate", "--json", temp_file(text))), 3, "%s", R.err);
        ctl_verdict(R.out, got, sizeof(got));
        R.nfiles--; /* the same slot for the next body */
        unlink(R.files[R.nfiles]);
        sgw_produce(sgw.topic_cmd, saga, text, strlen(text));
        ev = sgw_event_wait(saga, "saga.rejected");
        printed = sg_json_print(ev);
        ctl_verdict(printed, want, sizeof(want));
        free(printed);
        cr_expect_str_eq(got, want, "saga %s: sagactl says\n%sthe worker rejected with\n%s", saga,
                         got, want);
        cr_expect_neq(want[0], '\0');
    }
    sgw_pair_stop();
}

/* ---- submit ---- */

static const char *saga_file(const char *name, const char *steps)
{
    char text[2048];

    /* No id and no saga_id: sagactl makes them. */
    snprintf(text, sizeof(text),
             "{\"v\": 1, \"type\": \"saga.start\", \"name\": \"%s\", "
             "\"steps\": %s}",
             name, steps);
    return temp_file(text);
}

/* The saga_id sagactl printed ("submitted saga ID (message ...)"). */
static void submitted_id(char *out, size_t size)
{
    const char *p = strstr(R.out, "submitted saga ");

    cr_assert_not_null(p, "no submission line in:\n%s", R.out);
    cr_assert_eq(sscanf(p, "submitted saga %63s", out), 1);
    (void)size;
}

Test(ctl, submit_wait_completes_with_exit_0)
{
    char saga[64];
    char status[32];
    int rc;

    sgw_pair_start(NULL, 1, NULL);
    rc = ctl(ARGS("submit", "--wait", "--timeout", "60s",
                  saga_file("ctl-ok", "[{\"name\": \"a\", \"tool\": \"noop\"}, {\"name\": \"b\", "
                                      "\"tool\": \"echo\", \"args\": {\"x\": 1.50}}]")));
    cr_assert_eq(rc, 0, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    submitted_id(saga, sizeof(saga));
    cr_expect(strncmp(saga, "saga-", 5) == 0, "generated id %s", saga);
    {
        /* The generated ids are written into the producer's bytes: the
         * rest goes out as it was written (1.50, not 1.5). */
        sgw_reader_t r = {0};
        sgw_reader_open(&r, sgw.topic_cmd);
        sgw_reader_wait_count(&r, 1);
        cr_expect(strstr(r.v[0].raw, "\"saga_id\":\"saga-") != NULL, "%s", r.v[0].raw);
        cr_expect(strstr(r.v[0].raw, "\"args\": {\"x\": 1.50}") != NULL, "%s", r.v[0].raw);
        cr_expect_str_eq(r.v[0].key, saga);
        sgw_reader_close(&r);
    }
    cr_expect(strstr(R.out, "completed: 2 of 2 steps ok") != NULL, "%s", R.out);
    sgw_q_text(status, sizeof(status), "SELECT status FROM sagas WHERE saga_id = '%s'", saga);
    cr_expect_str_eq(status, "completed");

    /* status, show, and dlq-tool saga as show's alias */
    cr_expect_eq(ctl(ARGS("status", saga)), 0, "%s", R.err);
    cr_expect(strstr(R.out, "completed") && strstr(R.out, "ctl-ok"), "%s", R.out);
    cr_expect_eq(ctl(ARGS("status", "--json", saga)), 0);
    cr_expect(strstr(R.out, "\"status\":\"completed\""), "%s", R.out);
    cr_expect_eq(ctl(ARGS("status", "no-such-saga")), 1);
    cr_expect_eq(ctl(ARGS("show", saga)), 0, "%s", R.err);
    {
        char *show = strdup(R.out);
        char *dlq_out = NULL;
        cr_expect(strstr(show, "attempt") && strstr(show, "step 1 (b)"), "%s", show);
        cr_expect_eq(sgt_run("dlq-tool", ARGS("saga", saga), sgw.env, &dlq_out, NULL), 0);
        /* The same view, but for the "now" line's clock. */
        cr_expect_str_eq(dlq_out, show, "dlq-tool saga differs from sagactl show");
        free(dlq_out);
        free(show);
    }

    /* watch: the saga's events, in order, then it stops by itself */
    cr_expect_eq(ctl(ARGS("watch", saga, "--from-beginning", "--json")), 0, "%s", R.err);
    {
        const char *types[] = {"saga.accepted", "step.succeeded", "step.succeeded",
                               "saga.completed"};
        char *line = R.out;
        for (int i = 0; i < 4; i++) {
            char *nl = strchr(line, '\n');
            sg_json_t *ev;
            cr_assert_not_null(nl, "event %d missing:\n%s", i + 1, R.out);
            ev = sg_json_parse(line, (size_t)(nl - line), NULL, NULL);
            cr_assert_not_null(ev);
            cr_expect_str_eq(sgw_jstr(ev, "type"), types[i]);
            cr_expect_eq(sgw_jint(ev, "seq"), i + 1);
            sg_json_destroy(ev);
            line = nl + 1;
        }
        cr_expect_str_eq(line, "", "more than the saga's events:\n%s", line);
    }
    cr_expect_eq(ctl(ARGS("watch", saga, "--from-beginning")), 0, "%s", R.err);
    cr_expect(strstr(R.out, "#1  saga.accepted  ctl-ok") != NULL, "%s", R.out);
    cr_expect(strstr(R.out, "#4  saga.completed  completed") != NULL, "%s", R.out);
    sgw_pair_stop();
}

Test(ctl, submit_wait_compensates_with_exit_1)
{
    char saga[64];
    int rc;

    sgw_pair_start(NULL, 1, NULL);
    rc = ctl(ARGS("submit", "--wait", "--timeout", "60s",
                  saga_file("ctl-comp", "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"}, "
                                        "{\"name\": \"boom\", \"tool\": \"fail\"}]")));
    cr_assert_eq(rc, 1, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    submitted_id(saga, sizeof(saga));
    cr_expect(strstr(R.out, "compensated: step 1 (boom) failed") != NULL, "%s", R.out);
    cr_expect(strstr(R.out, "1 step compensated") != NULL, "%s", R.out);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM sagas WHERE saga_id = '%s' AND status = "
                           "'compensated'",
                           saga),
                 1);
    /* --json: the submission, then the terminal event as it came */
    rc = ctl(ARGS("submit", "--json", "--wait", "--timeout", "60s",
                  saga_file("ctl-comp", "[{\"name\": \"boom\", \"tool\": \"fail\"}]")));
    cr_expect_eq(rc, 1, "%s", R.err);
    cr_expect(strstr(R.out, "\"type\":\"saga.compensated\"") != NULL, "%s", R.out);
    sgw_pair_stop();
}

/* The same submission sent again (the same file: the same id, saga_id and
 * definition) is answered by the worker with saga.duplicate; for a saga
 * that finished, submit --wait exits with its outcome at once instead of
 * waiting for a terminal event that will never come again. */
Test(ctl, submitting_a_finished_saga_again_is_answered_with_its_outcome)
{
    const char *file =
        temp_file("{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-ctl-again\", "
                  "\"saga_id\": \"ctl-again\", \"name\": \"again\", \"steps\": [{\"name\": "
                  "\"a\", \"tool\": \"noop\"}]}");
    const sg_json_t *ev;
    int rc;

    sgw_pair_start(NULL, 1, NULL);
    rc = ctl(ARGS("submit", "--wait", "--timeout", "60s", file));
    cr_assert_eq(rc, 0, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    rc = ctl(ARGS("submit", "--wait", "--timeout", "30s", file));
    cr_expect_eq(rc, 0, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    cr_expect(strstr(R.out, "saga ctl-again completed: 1 of 1 steps ok (submitted before") != NULL,
              "%s", R.out);
    ev = sgw_event_wait("ctl-again", "saga.duplicate");
    cr_expect_str_eq(sgw_jstr(ev, "status"), "completed");
    cr_expect_str_eq(sgw_jstr(ev, "submission_id"), "sub-ctl-again");
    cr_expect_not_null(sg_json_member(ev, "run_health"), "a finished saga's run_health");
    cr_expect_eq(sgw_q_int("SELECT seq FROM sagas WHERE saga_id = 'ctl-again'"), 4,
                 "accepted 1, succeeded 2, completed 3, duplicate 4");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM steps WHERE saga_id = 'ctl-again'"), 1);
    sgw_pair_stop();
}

Test(ctl, submit_wait_times_out_with_exit_124)
{
    double t0 = sgt_now_s();
    int rc;

    sgw_pair_start(NULL, 1, NULL);
    rc = ctl(ARGS("submit", "--wait", "--timeout", "2s",
                  saga_file("ctl-slow", "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": "
                                        "{\"ms\": 6000}}]")));
    cr_expect_eq(rc, 124, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    cr_expect(strstr(R.err, "has not finished in time") != NULL, "%s", R.err);
    cr_expect_lt(sgt_now_s() - t0, 30);
    sgw_pair_stop();
}

Test(ctl, submit_refuses_what_the_worker_would_reject_and_sends_nothing)
{
    int rc;

    sgw_world_start(NULL, 1, NULL);
    rc = ctl(ARGS("submit", "--wait", "--timeout", "5s",
                  saga_file("ctl-bad", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]")));
    cr_expect_eq(rc, 3, "exit %d: %s", rc, R.err);
    cr_expect(strstr(R.out, "$.steps[0].tool: ") != NULL, "%s", R.out);
    cr_expect(strstr(R.err, "nothing sent") != NULL, "%s", R.err);
    sgw_reader_t r = {0};
    sgw_reader_open(&r, sgw.topic_cmd);
    sgw_reader_poll(&r, 2000);
    cr_expect_eq(r.n, 0, "something was produced");
    sgw_reader_close(&r);
}

Test(ctl, submit_to_an_unreachable_kafka_exits_4)
{
    int rc;

    sgw_world_start(NULL, 1, NULL);
    rc = ctl_env(ARGS("submit", "--wait", "--timeout", "20s",
                      saga_file("ctl-x", "[{\"name\": \"a\", \"tool\": \"noop\"}]")),
                 ARGS("SAGAD_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1"));

    cr_expect_eq(rc, 4, "exit %d: %s", rc, R.err);
    cr_expect(strstr(R.err, "Kafka unreachable") != NULL, "%s", R.err);
}

/* ---- list ---- */

/* Saga rows as the worker writes them, at chosen times. */
static void insert_saga(const char *id, const char *name, const char *status, const char *created,
                        const char *updated)
{
    sgw_q_int("WITH i AS (INSERT INTO sagas (saga_id, name, status, definition, created_at, "
              "updated_at) VALUES ('%s', '%s', '%s', '{}', now() - interval '%s', "
              "now() - interval '%s') RETURNING 1) SELECT count(*) FROM i",
              id, name, status, created, updated);
}

/* The saga_id of every --json line of R.out, space-separated. */
static void ids_of(char *out, size_t size)
{
    out[0] = '\0';
    for (char *line = R.out; line && *line;) {
        char *nl = strchr(line, '\n');
        sg_json_t *o = sg_json_parse(line, nl ? (size_t)(nl - line) : strlen(line), NULL, NULL);
        size_t len = strlen(out);
        cr_assert_not_null(o, "not JSON: %s", line);
        snprintf(out + len, size - len, "%s%s", len ? " " : "", sgw_jstr(o, "saga_id"));
        sg_json_destroy(o);
        line = nl ? nl + 1 : NULL;
    }
}

Test(ctl, list_stuck_finds_exactly_the_stalled_sagas)
{
    char ids[1024];

    insert_saga("stalled-1", "pay", "running", "3 hours", "2 hours");
    insert_saga("stalled-2", "ship", "compensating", "2 hours", "1 hour");
    insert_saga("stalled-3", "pay", "running", "90 minutes", "40 minutes");
    insert_saga("busy-1", "pay", "running", "150 minutes", "10 seconds");
    insert_saga("busy-2", "ship", "compensating", "1 hour", "1 minute");
    insert_saga("done-1", "pay", "completed", "5 hours", "4 hours");
    insert_saga("done-2", "pay", "compensated", "5 hours", "4 hours");
    insert_saga("done-3", "pay", "failed", "5 hours", "4 hours");

    cr_assert_eq(ctl(ARGS("list", "--stuck", "30m", "--json")), 0, "%s", R.err);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "stalled-3 stalled-2 stalled-1");
    cr_assert_eq(ctl(ARGS("list", "--stuck", "90m", "--json")), 0, "%s", R.err);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "stalled-1");
    cr_expect_eq(ctl(ARGS("list", "--stuck", "1d")), 1, "nothing is stuck that long");
    cr_expect(strstr(R.err, "no saga matches") != NULL, "%s", R.err);
    cr_assert_eq(ctl(ARGS("list", "--stuck", "30m", "--name", "pay", "--json")), 0);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "stalled-3 stalled-1");

    /* Every saga newest first, in pages of 3 joined by --before. */
    cr_assert_eq(ctl(ARGS("list", "--limit", "3", "--json")), 0);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "busy-2 stalled-3 stalled-2");
    cr_expect(strstr(R.err, "--before stalled-2") != NULL, "%s", R.err);
    cr_assert_eq(ctl(ARGS("list", "--limit", "3", "--before", "stalled-2", "--json")), 0);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "busy-1 stalled-1 done-3");
    cr_assert_eq(ctl(ARGS("list", "--limit", "3", "--before", "done-3", "--json")), 0);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "done-2 done-1");
    cr_expect(strstr(R.err, "--before") == NULL, "a last page says nothing more: %s", R.err);
    cr_expect_eq(ctl(ARGS("list", "--before", "nope")), 2);
    cr_expect_eq(ctl(ARGS("list", "--status", "sleeping")), 2);
    cr_expect_eq(ctl(ARGS("list", "--stuck", "soon")), 2);

    /* The table: a header and one line per saga, aligned. */
    cr_assert_eq(ctl(ARGS("list", "--status", "completed")), 0);
    cr_expect(strncmp(R.out, "SAGA_ID  NAME  STATUS     STEPS OK", 34) == 0, "%s", R.out);
    cr_expect(strstr(R.out, "\ndone-1   pay   completed  0/0") != NULL, "%s", R.out);
}

/* ---- control commands ---- */

/* cancel sends saga.cancel and with --wait follows the answer to the end:
 * exit 0 once the saga is cancelled, 1 when the worker refuses (a finished
 * or unknown saga), 3 when it would refuse it undecoded (nothing sent).
 * approve and reject send theirs and wait for step.approved /
 * step.rejected, or the refusal. */
Test(ctl, cancel_sends_saga_cancel_and_waits_for_the_answer)
{
    static const char *const env[] = {"SAGAD_RETRY_BUDGET_MS=0", NULL};
    static const char tools[] =
        "\"flaky.reversible\": {\"adapter\": \"builtin\", \"target\": \"fail\", "
        "\"side_effect\": \"reversible\", \"compensation\": \"ledger\"}";
    char text[256];
    int rc;

    sgw_pair_start(tools, 1, env);
    sgw_submit("ctl-cxl",
               "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"flaky.reversible\", \"args\": {\"class\": "
               "\"transient\", \"retry_after_ms\": 3600000}}]");
    sgw_event_wait("ctl-cxl", "step.retry_scheduled");
    rc = ctl(ARGS("cancel", "ctl-cxl", "--reason", "customer asked", "--by", "ann", "--key",
                  sgw_key_path("ann"), "--wait", "--timeout", "60s"));
    cr_expect_eq(rc, 0, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    cr_expect(strstr(R.out, "saga ctl-cxl cancelling") && strstr(R.out, "saga ctl-cxl cancelled"),
              "%s", R.out);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT status FROM sagas"), "cancelled");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT requested_by || '|' || reason FROM saga_controls"),
        "ann|customer asked");
    /* The saga's history, where on-call looks. */
    cr_expect_eq(ctl(ARGS("show", "ctl-cxl")), 0, "%s", R.err);
    cr_expect(strstr(R.out, "saga.cancel") &&
                  strstr(R.out, "accepted by ann (verified): customer asked"),
              "%s", R.out);

    rc = ctl(ARGS("cancel", "ctl-cxl", "--reason", "again", "--by", "ann", "--key",
                  sgw_key_path("ann"), "--wait", "--timeout", "60s"));
    cr_expect_eq(rc, 1, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    cr_expect(strstr(R.out, "refused") && strstr(R.out, "which is cancelled"), "%s", R.out);
    rc = ctl(ARGS("cancel", "ctl-ghost", "--reason", "typo", "--by", "ann", "--key",
                  sgw_key_path("ann"), "--wait", "--timeout", "60s"));
    cr_expect_eq(rc, 1, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    cr_expect(strstr(R.out, "does not exist"), "%s", R.out);

    /* approve, reject: a gated step */
    sgw_submit("ctl-gate",
               "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 1}},"
               " {\"name\": \"charge\", \"tool\": \"ledger.reversible\", \"args\": {\"n\": 2}, "
               "\"approval\": {\"timeout_ms\": 600000}}]");
    sgw_event_wait("ctl-gate", "step.approval_requested");
    rc = ctl(ARGS("approve", "ctl-gate", "hold", "--reason", "ok", "--by", "ann", "--key",
                  sgw_key_path("ann"), "--wait", "--timeout", "60s"));
    cr_expect_eq(rc, 1, "not waiting: exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    cr_expect(strstr(R.out, "refused") && strstr(R.out, "only a step awaiting_approval"), "%s",
              R.out);
    rc = ctl(ARGS("approve", "ctl-gate", "1", "--reason", "ok", "--by", "ann", "--key",
                  sgw_key_path("ann"), "--wait", "--timeout", "60s"));
    cr_expect_eq(rc, 0, "exit %d\nstdout %s\nstderr %s", rc, R.out, R.err);
    cr_expect(strstr(R.out, "saga ctl-gate step charge approved"), "%s", R.out);
    sgw_wait_status("ctl-gate", "completed");
    sgw_pair_stop();

    cr_expect_eq(
        ctl(ARGS("cancel", "bad id", "--reason", "x", "--by", "ann", "--key", sgw_key_path("ann"))),
        3);
    cr_expect(strstr(R.err, "$.saga_id") && strstr(R.err, "nothing sent"), "%s", R.err);
    cr_expect_eq(ctl(ARGS("approve", "s1", "charge", "--reason", "", "--by", "ann", "--key",
                          sgw_key_path("ann"))),
                 2);
    cr_expect_eq(ctl(ARGS("cancel", "s1")), 2, "--reason is required");
    cr_expect_eq(ctl(ARGS("approve", "s1", "--reason", "x")), 2, "STEP is required");
}

/* ---- watch --name ---- */

/* A saga of that name accepted before the watch began is known by asking
 * PostgreSQL (its later events carry no name); another name is not shown. */
Test(ctl, watch_name_shows_its_sagas_also_those_accepted_before_it_began)
{
    sgt_bg_t w = {0};
    const char *line;
    int rc;

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("other-1", "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": {\"ms\": 7000}}, "
                          "{\"name\": \"after\", \"tool\": \"noop\"}]");
    rc = ctl(
        ARGS("submit", saga_file("ctl-named", "[{\"name\": \"nap\", \"tool\": \"sleep\", \"args\": "
                                              "{\"ms\": 7000}}, {\"name\": \"after\", \"tool\": "
                                              "\"noop\"}]")));
    cr_assert_eq(rc, 0, "%s", R.err);
    sgw_event_wait("other-1", "saga.accepted");
    /* Both sagas are asleep in their first step; the watch begins now,
     * after their saga.accepted. */
    sgt_bg_start(&w, "sagactl", ARGS("watch", "--name", "ctl-named", "--max", "3"), sgw.env);
    rc = sgt_bg_join(&w, 60);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, w.err);
    line = w.out;
    cr_expect(strstr(line, "#2  step.succeeded  step 0 (nap)") != NULL, "%s", w.out);
    cr_expect(strstr(line, "#3  step.succeeded  step 1 (after)") != NULL, "%s", w.out);
    cr_expect(strstr(line, "#4  saga.completed") != NULL, "%s", w.out);
    cr_expect(strstr(line, "other-1") == NULL, "another saga's events:\n%s", w.out);
    sgt_bg_free(&w);
    sgw_pair_stop();
}

/* ---- one family of command lines (issue 37 item 4) ---- */

/* sagactl with the test's environment but for SAGAD_PG_DSN: the database
 * is named by a config file only, so a command reaches it only when its
 * --config was read. */
static int ctl_no_dsn(const char *const *args)
{
    const char *env[SGW_MAX_ENV + 1];
    size_t n = 0;

    for (size_t i = 0; sgw.env[i]; i++)
        if (strncmp(sgw.env[i], "SAGAD_PG_DSN=", 13) != 0)
            env[n++] = sgw.env[i];
    env[n] = NULL;
    free(R.out);
    free(R.err);
    R.out = R.err = NULL;
    return sgt_run("sagactl", args, env, &R.out, &R.err);
}

/* --config FILE and --json are global options: before the command or
 * after it, as the operator types them; an option's own value that looks
 * like one is still that option's value. */
Test(ctl, global_options_work_after_the_command)
{
    char conf_text[700], conf_eq[300], ids[256];
    const char *conf;

    insert_saga("flag-1", "pay", "running", "1 hour", "1 minute");
    snprintf(conf_text, sizeof(conf_text), "pg.dsn = %s\n", sgw.dsn);
    conf = temp_file(conf_text);
    snprintf(conf_eq, sizeof(conf_eq), "--config=%s", conf);

    cr_expect_eq(ctl_no_dsn(ARGS("list", "--json")), 2, "no pg.dsn anywhere: %s", R.err);
    cr_expect(strstr(R.err, "pg.dsn") != NULL, "%s", R.err);

    cr_assert_eq(ctl_no_dsn(ARGS("list", "--config", conf, "--json")), 0, "%s", R.err);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "flag-1", "--config and --json after the command: %s", R.out);
    cr_assert_eq(ctl_no_dsn(ARGS("--json", "list", conf_eq)), 0, "%s", R.err);
    ids_of(ids, sizeof(ids));
    cr_expect_str_eq(ids, "flag-1", "--json before, --config=FILE after: %s", R.out);
    cr_assert_eq(ctl_no_dsn(ARGS("--config", conf, "status", "flag-1")), 0, "%s", R.err);
    cr_expect(strncmp(R.out, "saga ", 5) == 0, "without --json, the table: %s", R.out);
    cr_assert_eq(ctl_no_dsn(ARGS("status", "flag-1", "--config", conf, "--json")), 0, "%s", R.err);
    cr_expect(strstr(R.out, "\"saga_id\":\"flag-1\"") != NULL, "%s", R.out);

    /* "--config" as --name's value is a name; the next --config is the
     * global option: no saga has that name (exit 1, not a usage error). */
    cr_expect_eq(ctl_no_dsn(ARGS("list", "--name", "--config", "--config", conf)), 1, "%s%s", R.out,
                 R.err);
    cr_expect(strstr(R.err, "no saga matches") != NULL, "%s", R.err);
    /* After "--", nothing is an option. */
    cr_expect_eq(ctl_no_dsn(ARGS("status", "--", "--config", conf)), 2, "%s", R.err);
}
