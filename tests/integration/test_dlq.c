/* dlq-tool end to end: dead letters made by the real worker from real
 * Kafka messages, then found, edited, replayed and discarded with the real
 * dlq-tool binary, and the replayed sagas finished by the real worker and
 * relay.  What an operator relies on is asserted: exit codes, stdout and
 * stderr, the dead_letters / replays / outbox rows, the saga's steps and
 * the builtin ledger's calls per idempotency key. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sagad/sg_log.h"
#include "../support/sg_worker_env.h"

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Runs dlq-tool with the test's environment; its exit code, stdout and
 * stderr (kept until the next call). */
static struct {
    char *out, *err;
} R;

static void teardown_run(void)
{
    free(R.out);
    free(R.err);
    R.out = R.err = NULL;
}

static void dlq_fini(void)
{
    teardown_run();
    sgw_teardown();
}

TestSuite(dlq, .init = sgw_setup, .fini = dlq_fini, .timeout = 180);

/* True when "K=V" strings a and b name the same variable. */
static bool same_name(const char *a, const char *b)
{
    size_t n = strcspn(a, "=");

    return strncmp(a, b, n) == 0 && b[n] == '=';
}

/* dlq-tool with the test's environment, where extra (NULL-terminated
 * "K=V" strings, NULL: none) replaces the variables it names. */
static int dlq_env(const char *const *args, const char *const *extra_in)
{
    const char *env[SGW_MAX_ENV + 8], *extra[8] = {sgw.op_env};
    size_t n = 0, k;

    /* dlq-tool runs as the operator role, as in production. */
    for (k = 0; extra_in && extra_in[k] && k + 2 < 8; k++)
        extra[k + 1] = extra_in[k];
    for (size_t i = 0; sgw.env[i]; i++) {
        for (k = 0; extra[k] && !same_name(extra[k], sgw.env[i]); k++)
            ;
        if (!extra[k])
            env[n++] = sgw.env[i];
    }
    for (k = 0; k < 8 && extra[k]; k++)
        env[n++] = extra[k];
    env[n] = NULL;
    free(R.out);
    free(R.err);
    R.out = R.err = NULL;
    return sgt_run("dlq-tool", args, env, &R.out, &R.err);
}

static int dlq(const char *const *args)
{
    return dlq_env(args, NULL);
}

/* Rewrites the registry and starts a worker and relay again (after
 * sgw_pair_stop): the operator's "fix" of a broken tool. */
static void restart_with_tools(const char *extra_tools)
{
    FILE *fp = fopen(sgw.registry, "w");

    cr_assert_not_null(fp);
    fprintf(fp, "{\"v\": 1, \"tools\": {%s%s%s}}\n", SGW_BASE_TOOLS, extra_tools ? "," : "",
            extra_tools ? extra_tools : "");
    fclose(fp);
    sgt_bg_start(&sgw.relay, "sagad-relay", sgw_run_args, sgw.env);
    sgt_bg_start(&sgw.worker, "sagad-worker", sgw_run_args, sgw.env);
}

static long long dead_letter_of(const char *saga_id)
{
    long long id = sgw_q_int("SELECT max(id) FROM dead_letters WHERE saga_id = '%s'", saga_id);

    cr_assert_gt(id, 0, "saga %s has a dead letter", saga_id);
    return id;
}

/* Submits saga_id with an unknown tool and stops the pair once it is
 * dead-lettered: a rejected submission, which edit fixes.  Its id. */
static void rejected_submission(const char *saga_id, char *id, size_t id_size)
{
    sgw_pair_start(NULL, 1, NULL);
    sgw_submit(saga_id, "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();
    snprintf(id, id_size, "%lld", dead_letter_of(saga_id));
}

/* A saga whose third step (index 2) calls a tool that is down until the
 * operator fixes the registry. */
#define FLAKY_DOWN                                                                                 \
    "\"flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "                \
    "\"idempotent\", \"retry\": {\"max_attempts\": 2, \"base_ms\": 10, \"cap_ms\": 20}}"
#define FLAKY_FIXED                                                                                \
    "\"flaky\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "              \
    "\"idempotent\"}"
/* A reversible step "hold" whose compensation release.flaky fails (two
 * attempts), and the registry once on-call fixed it. */
#define RELEASE_DOWN                                                                               \
    "\"hold\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "                 \
    "\"reversible\", \"compensation\": \"release.flaky\"},"                                        \
    "\"release.flaky\": {\"adapter\": \"builtin\", \"target\": \"fail\", \"side_effect\": "        \
    "\"idempotent\", \"compensate_retry\": {\"max_attempts\": 2, \"base_ms\": 10, \"cap_ms\": "    \
    "20}}"
#define RELEASE_FIXED                                                                              \
    "\"hold\": {\"adapter\": \"builtin\", \"target\": \"echo\", \"side_effect\": "                 \
    "\"reversible\", \"compensation\": \"release.flaky\"},"                                        \
    "\"release.flaky\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "      \
    "\"idempotent\"}"
#define THREE_STEPS                                                                                \
    "[{\"name\": \"a\", \"tool\": \"ledger\"}, {\"name\": \"b\", \"tool\": \"ledger\"},"           \
    " {\"name\": \"c\", \"tool\": \"flaky\", \"args\": {\"class\": \"transient\"}}]"

Test(dlq, replay_of_held_saga_resumes_at_failed_step_under_new_key)
{
    char id[32], text[512];

    sgw_pair_start(FLAKY_DOWN, 1, ARGS("SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000"));
    sgw_submit("held-1", THREE_STEPS);
    sgw_wait_status("held-1", "held");
    sgw_pair_stop();
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,succeeded,failed", "held: nothing compensated");
    snprintf(id, sizeof(id), "%lld", dead_letter_of("held-1"));
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT error_code FROM dead_letters WHERE id = %s", id),
        "runtime.budget.attempts_exhausted");

    restart_with_tools(FLAKY_FIXED);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "flaky is fixed", "--operator", "alice")), 0,
                 "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "resume saga held-1 at step 2"), "stdout: %s", R.out);
    cr_expect(strstr(R.out, "new key held-1:2:f:g2"), "stdout: %s", R.out);
    sgw_wait_status("held-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key || '=' || calls, ',' ORDER BY key) FROM "
                                "builtin_ledger WHERE key LIKE 'held-1:%%'"),
                     "held-1:0:f:g1=1,held-1:1:f:g1=1,held-1:2:f:g2=1",
                     "steps 0 and 1 ran once (generation 1); step 2 once under the new key");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,succeeded,succeeded");
    cr_expect_eq(sgw_q_int("SELECT generation FROM sagas WHERE saga_id = 'held-1'"), 2);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx < 2 AND generation = 2"),
                 0, "completed steps are not run again");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', r.operator, r.reason, r.action, "
                                "r.new_generation, r.new_key, d.status) FROM replays r JOIN "
                                "dead_letters d ON d.id = r.dead_letter_id"),
                     "alice|flaky is fixed|resume|2|held-1:2:f:g2|replayed");
}

Test(dlq, replay_twice_is_refused_and_force_makes_a_new_generation)
{
    char id[32], text[256];

    sgw_pair_start(FLAKY_DOWN, 1, NULL);
    sgw_submit("twice-1", THREE_STEPS);
    sgw_wait_status("twice-1", "compensated");
    snprintf(id, sizeof(id), "%lld", dead_letter_of("twice-1"));

    /* compensated: steps 0 and 1 (ledger, no compensation) were never
     * undone, so they are kept; the saga runs again from step 2 (still
     * failing) */
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "retry", "--operator", "bob")), 0, "%s%s",
                 R.out, R.err);
    cr_expect(strstr(R.out, "run saga twice-1 again from step 2, generation 2"), "%s", R.out);
    sgw_wait_int(2, "SELECT count(*) FROM dead_letters WHERE saga_id = 'twice-1'");
    sgw_wait_status("twice-1", "compensated");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'twice-1:%%:f:g2'"),
                 0, "the kept steps 0 and 1 were not called under the generation-2 key");

    cr_expect_eq(dlq(ARGS("replay", id, "--reason", "again", "--operator", "bob")), 3,
                 "a second replay of the same entry is refused");
    cr_expect(strstr(R.err, "already replayed") && strstr(R.err, "--force"), "stderr: %s", R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays"), 1);
    cr_expect_eq(sgw_q_int("SELECT generation FROM sagas WHERE saga_id = 'twice-1'"), 2);

    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "again", "--operator", "bob", "--force")), 0,
                 "%s%s", R.out, R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays WHERE dead_letter_id = %s", id), 2);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text),
                   "SELECT string_agg(new_generation || ':' || forced, ',' ORDER BY id) "
                   "FROM replays"),
        "2:false,3:true");
    sgw_wait_int(3, "SELECT count(*) FROM dead_letters WHERE saga_id = 'twice-1'");
    sgw_wait_status("twice-1", "compensated");
    cr_expect_eq(sgw_q_int("SELECT generation FROM sagas WHERE saga_id = 'twice-1'"), 3);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'twice-1:%%'"), 2,
                 "steps 0 and 1 applied once each (generation 1), whatever the replays");
    sgw_pair_stop();
}

/* Everything a replay could change, as one text. */
static const char fingerprint_sql[] =
    "SELECT md5(concat((SELECT string_agg(d::text, ',' ORDER BY id) FROM dead_letters d), '|', "
    "(SELECT count(*) FROM replays), '|', (SELECT count(*) FROM outbox), '|', "
    "(SELECT last_value FROM outbox_id_seq), '|', (SELECT last_value FROM replays_id_seq), '|', "
    "(SELECT string_agg(s::text, ',' ORDER BY saga_id) FROM sagas s), '|', "
    "(SELECT string_agg(st::text, ',' ORDER BY saga_id, idx) FROM steps st), '|', "
    "(SELECT count(*) FROM dead_letter_revisions)))";

Test(dlq, dry_run_changes_no_row_and_sends_nothing)
{
    char before[64], after[64], id[32];

    sgw_pair_start(FLAKY_DOWN, 1, NULL);
    sgw_submit("dry-1", THREE_STEPS);
    sgw_produce(sgw.topic_cmd, "dry-bad", "{\"v\": 1, \"type\":", 17);
    sgw_wait_status("dry-1", "compensated");
    sgw_wait_int(2, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("dry-1"));

    sgw_q_text(before, sizeof(before), "%s", fingerprint_sql);
    cr_assert_eq(dlq(ARGS("replay", "--dry-run", id)), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "would replay") && strstr(R.out, "generation 2"), "%s", R.out);
    cr_assert_eq(dlq(ARGS("replay", "--dry-run", "--status", "pending", "--json")), 0, "%s%s",
                 R.out, R.err);
    cr_expect(strstr(R.out, "\"outcome\":\"would_replay\""), "%s", R.out);
    sgw_q_text(after, sizeof(after), "%s", fingerprint_sql);
    cr_expect_str_eq(after, before, "a dry run changes no row and queues no message");
}

Test(dlq, filtered_bulk_replay_replays_exactly_the_matches_within_the_rate)
{
    char text[256];

    sgw_pair_start(NULL, 1, NULL);
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof(key), "mal-%d", i);
        sgw_produce(sgw.topic_cmd, key, "{\"broken", 8);
    }
    for (int i = 0; i < 3; i++) {
        char sid[16];
        snprintf(sid, sizeof(sid), "unk-%d", i);
        sgw_submit(sid, "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    }
    sgw_wait_int(7, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();

    cr_expect_eq(dlq(ARGS("replay", "--code", "input.json.malformed", "--reason", "bulk")), 3,
                 "bulk without --yes and no terminal is refused");
    cr_expect(strstr(R.err, "--yes"), "%s", R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays"), 0);

    cr_assert_eq(dlq(ARGS("replay", "--code", "input.json.malformed", "--reason", "bulk", "--yes",
                          "--rate", "5/s", "--operator", "carol")),
                 0, "%s%s", R.out, R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays r JOIN dead_letters d ON d.id = "
                           "r.dead_letter_id WHERE d.error_code = 'input.json.malformed'"),
                 4);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays"), 4, "nothing else was replayed");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE status = 'pending' AND "
                           "error_code = 'input.schema.invalid'"),
                 3);
    /* 4 entries at 5/s are sent at least 3/5 s apart.  A row's created_at
     * is when the server started its transaction, which may lag the send
     * by a scheduling delay, most for the first; one interval of slack
     * keeps the bound true (without pacing the span is a few ms). */
    {
        long long span =
            sgw_q_int("SELECT (extract(epoch FROM max(created_at) - min(created_at)) * "
                      "1000)::bigint FROM replays");
        cr_expect_geq(span, 400, "replays were paced by --rate: %lld ms apart; %s", span, R.err);
    }
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM outbox WHERE headers->>'sagad-replay-of' IS NOT "
                  "NULL AND headers->>'sagad-replay-id' IS NOT NULL AND convert_from(payload, "
                  "'UTF8') = '{\"broken'"),
        4, "each payload re-submitted byte for byte with its lineage headers");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(DISTINCT action || ':' || operator, ',') FROM "
                                "replays"),
                     "resubmit:carol");
}

Test(dlq, invalid_edit_is_refused_and_a_valid_one_is_replayed_to_completion)
{
    char id[32], before[64], after[64];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("edit-1", "[{\"name\": \"a\", \"tool\": \"ledger\"},"
                         " {\"name\": \"b\", \"tool\": \"inventory.reservee\", \"args\": "
                         "{\"sku\": \"B7\", \"qty\": 2}}]");
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters");
    snprintf(id, sizeof(id), "%lld", dead_letter_of("edit-1"));
    sgw_q_text(before, sizeof(before), "SELECT md5(payload) FROM dead_letters WHERE id = %s", id);

    cr_expect_eq(dlq(ARGS("edit", id, "--set", "steps[1].tool=inventory.reserve", "--set",
                          "steps[1].args.qty=0")),
                 3, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "$.steps[1].args.qty: minimum"), "path and rule: %s", R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions"), 0, "nothing saved");
    cr_expect_eq(dlq(ARGS("edit", id, "--set", "steps[1].tool=no.such")), 3);
    cr_expect(strstr(R.err, "$.steps[1].tool"), "%s", R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions"), 0, "nothing saved");
    sgw_q_text(after, sizeof(after), "SELECT md5(payload) FROM dead_letters WHERE id = %s", id);
    cr_expect_str_eq(after, before, "the stored payload is unchanged");

    cr_assert_eq(dlq(ARGS("edit", id, "--set", "steps[1].tool=inventory.reserve", "--operator",
                          "dave", "--reason", "typo")),
                 0, "%s%s", R.out, R.err);
    cr_expect_eq(sgw_q_int("SELECT revision FROM dead_letter_revisions WHERE dead_letter_id = %s "
                           "AND operator = 'dave'",
                           id),
                 1);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "fixed tool name", "--operator", "dave")), 0,
                 "%s%s", R.out, R.err);
    sgw_wait_status("edit-1", "completed");
    sgw_pair_stop();
    cr_expect_eq(sgw_q_int("SELECT revision FROM replays WHERE dead_letter_id = %s", id), 1,
                 "the replay used the edited revision");
}

/* The editor shows the payload pretty-printed and --set prints it
 * compact: saving it as shown, or setting a member to the value it has,
 * changes nothing and must save nothing (not even be validated). */
Test(dlq, edit_that_changes_nothing_saves_nothing)
{
    /* The editor saves the file as it was shown. */
    const char *editor[] = {"EDITOR=true", NULL};
    char id[32];

    rejected_submission("same-1", id, sizeof(id));
    cr_expect_eq(dlq_env(ARGS("edit", id), editor), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "no change: nothing saved"), "%s", R.err);
    cr_expect_eq(dlq(ARGS("edit", id, "--set", "steps[0].name=a")), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "no change: nothing saved"), "%s", R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions"), 0, "nothing saved");
}

/* The registry is read before the editor opens (an edit that cannot be
 * checked would be lost), and the editor's file goes under $TMPDIR. */
Test(dlq, edit_checks_the_registry_first_and_uses_tmpdir)
{
    char id[32], marker[256], editor[300], tmpdir[300];
    const char *no_registry[] = {editor, "SAGAD_WORKER_REGISTRY=/nonexistent/tools.json", NULL};
    const char *bad_tmpdir[] = {editor, tmpdir, NULL};

    rejected_submission("tmp-1", id, sizeof(id));
    sgt_unique(marker, sizeof(marker), "/tmp/sagad-edit-marker");
    /* The editor leaves a marker, then "saves" the file unchanged. */
    snprintf(editor, sizeof(editor), "EDITOR=touch %s", marker);
    snprintf(tmpdir, sizeof(tmpdir), "TMPDIR=%s/missing", marker);

    cr_expect_eq(dlq_env(ARGS("edit", id), no_registry), 2, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "cannot check the tool registry") != NULL, "%s", R.err);
    cr_expect_neq(access(marker, F_OK), 0, "the editor was opened before the registry was read");

    cr_expect_eq(dlq_env(ARGS("edit", id), bad_tmpdir), 1, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "cannot make a temporary file in") != NULL &&
                  strstr(R.err, "/missing (TMPDIR)") != NULL,
              "%s", R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions"), 0, "nothing saved");
    unlink(marker);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");

    cr_assert(fp, "cannot write %s", path);
    fputs(text, fp);
    fclose(fp);
}

/* An edit the rules refuse keeps the editor's file, and says how to save
 * it once fixed; --file saves it.  An editor's file is removed once its
 * edit is saved or changed nothing. */
Test(dlq, refused_editor_edit_is_kept_and_saved_with_file)
{
    static const char bad[] = "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-draft-1\", "
                              "\"saga_id\": \"draft-1\", \"name\": \"t\", \"steps\": "
                              "[{\"name\": \"a\", \"tool\": \"still.no.such\"}]}\n";
    static const char good[] = "{\"v\": 1, \"type\": \"saga.start\", \"id\": \"sub-draft-1\", "
                               "\"saga_id\": \"draft-1\", \"name\": \"t\", \"steps\": "
                               "[{\"name\": \"a\", \"tool\": \"ledger\"}]}\n";
    char id[32], src[256], dir[256], editor[300], tmpdir[300], draft[512] = "", hint[700];
    char text[512];
    const char *env[] = {editor, tmpdir, NULL};
    const char *p;
    FILE *fp;

    rejected_submission("draft-1", id, sizeof(id));
    sgt_unique(src, sizeof(src), "/tmp/sagad-draft-src");
    sgt_unique(dir, sizeof(dir), "/tmp/sagad-draft-dir");
    cr_assert_eq(mkdir(dir, 0700), 0);
    write_text(src, bad);
    /* The editor "types" the bad payload over the file it is given. */
    snprintf(editor, sizeof(editor), "EDITOR=cp %s", src);
    snprintf(tmpdir, sizeof(tmpdir), "TMPDIR=%s", dir);

    cr_expect_eq(dlq_env(ARGS("edit", id), env), 3, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "$.steps[0].tool") != NULL, "the problem: %s", R.err);
    cr_assert((p = strstr(R.err, "your edit is kept in ")) != NULL, "%s", R.err);
    sscanf(p + strlen("your edit is kept in "), "%511[^:]", draft);
    cr_expect(strncmp(draft, dir, strlen(dir)) == 0, "the file is under TMPDIR: %s", draft);
    cr_assert((fp = fopen(draft, "r")) != NULL, "the edit's file was removed: %s", draft);
    text[fread(text, 1, sizeof(text) - 1, fp)] = '\0';
    fclose(fp);
    cr_expect_str_eq(text, bad, "the file holds the refused edit");
    snprintf(hint, sizeof(hint), "dlq-tool edit %s --file %s", id, draft);
    cr_expect(strstr(R.err, hint) != NULL, "how to go on: %s", R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions"), 0, "nothing saved");

    /* The operator fixes the kept file and saves it. */
    write_text(draft, good);
    cr_expect_eq(dlq(ARGS("edit", id, "--file", draft, "--set", "name=x")), 2, "%s%s", R.out,
                 R.err);
    cr_expect(strstr(R.err, "--file and --set") != NULL, "%s", R.err);
    cr_expect_eq(dlq(ARGS("edit", id, "--file", "/nonexistent/edit.json")), 2, "%s%s", R.out,
                 R.err);
    cr_expect(strstr(R.err, "cannot read /nonexistent/edit.json (--file)") != NULL, "%s", R.err);
    cr_assert_eq(dlq(ARGS("edit", id, "--file", draft, "--reason", "kept edit")), 0, "%s%s", R.out,
                 R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letter_revisions WHERE dead_letter_id = %s "
                           "AND reason = 'kept edit' AND convert_from(payload, 'UTF8') LIKE "
                           "'%%\"tool\": \"ledger\"%%'",
                           id),
                 1, "saved from the file");
    unlink(draft);

    /* The same payload again through the editor: no change, and no file
     * left behind. */
    write_text(src, good);
    cr_expect_eq(dlq_env(ARGS("edit", id), env), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "no change: nothing saved") != NULL, "%s", R.err);
    cr_expect_eq(rmdir(dir), 0, "the editor's file was left in %s", dir);
    unlink(src);
}

Test(dlq, compensation_exhausted_entry_replays_the_compensation)
{
    char id[32], text[256];

    sgw_pair_start(RELEASE_DOWN, 1, NULL);
    sgw_submit("comp-1", "[{\"name\": \"first\", \"tool\": \"ledger.reversible\"},"
                         " {\"name\": \"second\", \"tool\": \"hold\", \"args\": {\"class\": "
                         "\"transient\"}},"
                         " {\"name\": \"third\", \"tool\": \"fail\"}]");
    sgw_wait_status("comp-1", "failed");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("comp-1"));

    cr_expect_eq(dlq(ARGS("replay", id, "--rerun-from", "first", "--reason", "x")), 3);
    cr_expect(strstr(R.err, "--rerun-from: saga comp-1 is failed") &&
                  strstr(R.err, "replay it without --rerun-from"),
              "%s", R.err);

    restart_with_tools(RELEASE_FIXED);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "release endpoint back", "--operator", "eve")),
                 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "compensate step 1 of saga comp-1 again, generation 2"), "%s", R.out);
    cr_expect(strstr(R.out, "kept: step 1 second (hold), compensation_failed, effect stands: its "
                            "compensation runs again under the new key; key comp-1:1:c:g2") &&
                  strstr(R.out, "kept: step 0 first (ledger.reversible), succeeded, effect "
                                "stands: not called forward again"),
              "%s", R.out);
    sgw_wait_status("comp-1", "compensated");
    sgw_pair_stop();
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE phase = 'forward' AND "
                           "generation = 2"),
                 0, "no forward step is called again");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM builtin_ledger WHERE key LIKE 'comp-1:%%:f:%%'"),
                 1, "the one forward effect (step 0) applied once");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key || '=' || calls, ',' ORDER BY key) FROM "
                                "builtin_ledger WHERE key LIKE 'comp-1:%%:c:%%'"),
                     "comp-1:0:c:g2=1,comp-1:1:c:g2=1",
                     "the failed compensation re-ran under the new key, then the one below");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,compensated,failed");
}

/* A compensation whose attempts timed out may have taken effect (the
 * refund went through, its answer did not): replayed, it runs under its
 * OLD key, so the downstream answers from its record instead of paying a
 * second refund under a new one (issue 35 item 1).  The plan and the
 * replays row say so; the compensation below it, which never ran, gets the
 * new generation's key. */
Test(dlq, replay_of_a_compensation_that_may_have_run_keeps_its_key)
{
    char id[32], text[256];

    sgw_pair_start(RELEASE_DOWN, 1, NULL);
    sgw_submit("tk-1", "[{\"name\": \"first\", \"tool\": \"ledger.reversible\"},"
                       " {\"name\": \"second\", \"tool\": \"hold\", \"args\": {\"class\": "
                       "\"timeout\"}},"
                       " {\"name\": \"third\", \"tool\": \"fail\"}]");
    sgw_wait_status("tk-1", "failed");
    sgw_pair_stop();
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(idempotency_key || '=' || status, ',' ORDER BY "
                                "id) FROM attempts WHERE phase = 'compensate'"),
                     "tk-1:1:c:g1=timeout,tk-1:1:c:g1=timeout");
    cr_expect_eq(sgw_q_int("SELECT comp_key_generation FROM steps WHERE idx = 1"), 1,
                 "its key is kept: an attempt may have taken effect");
    snprintf(id, sizeof(id), "%lld", dead_letter_of("tk-1"));

    cr_assert_eq(dlq(ARGS("replay", id, "--dry-run")), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "its compensation runs again under its old key (an attempt may have "
                            "taken effect); key tk-1:1:c:g1"),
              "the dry run names the old key: %s", R.out);
    restart_with_tools(RELEASE_FIXED);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "release endpoint back")), 0, "%s%s", R.out,
                 R.err);
    cr_expect(strstr(R.out, "under its old key tk-1:1:c:g1, generation 2"), "%s", R.out);
    sgw_wait_status("tk-1", "compensated");
    sgw_pair_stop();
    cr_expect_str_eq(sgw_q_text(text, sizeof(text), "SELECT new_key FROM replays"), "tk-1:1:c:g1",
                     "the replays row names the key used");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(key || '=' || calls, ',' ORDER BY key) FROM "
                                "builtin_ledger WHERE key LIKE 'tk-1:%%:c:%%'"),
                     "tk-1:0:c:g2=1,tk-1:1:c:g1=1",
                     "the compensation that may have run kept its key; the one below is new");
}

/* A saga that failed while it was being cancelled (its compensation ran
 * out of attempts) is replayed: the compensation runs again and the saga
 * ends cancelled, as the cancel asked, not compensated (issue 35 item 7). */
Test(dlq, replay_of_a_cancelled_saga_whose_compensation_failed_ends_cancelled)
{
    static const char cancel[] = "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"cx-1\", "
                                 "\"saga_id\": \"cxr-1\", \"by\": \"ops\", \"reason\": \"r\"}";
    char id[32], text[256];

    sgw_pair_start(RELEASE_DOWN, 1, NULL);
    sgw_submit("cxr-1", "[{\"name\": \"first\", \"tool\": \"hold\", \"args\": {\"class\": "
                        "\"transient\"}},"
                        " {\"name\": \"second\", \"tool\": \"ledger\", \"approval\": "
                        "{\"timeout_ms\": 600000}}]");
    sgw_event_wait("cxr-1", "step.approval_requested");
    sgw_produce_signed("ann", 0, "cxr-1", cancel, strlen(cancel));
    sgw_wait_status("cxr-1", "failed");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("cxr-1"));

    restart_with_tools(RELEASE_FIXED);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "release endpoint back")), 0, "%s%s", R.out,
                 R.err);
    cr_expect(strstr(R.out, "it was cancelled: it ends cancelled"), "%s", R.out);
    sgw_wait_status("cxr-1", "cancelled");
    sgw_event_wait("cxr-1", "saga.cancelled");
    sgw_pair_stop();
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,skipped");
}

/* A dead letter keeps the saga's steps as they stood when it was written:
 * `dlq-tool show` prints them beside the saga's steps now, which a cancel
 * has changed since (issue 35 item 7: only the present state was shown).
 * The DLQ record carries them too. */
Test(dlq, show_prints_the_steps_as_they_stood_when_dead_lettered)
{
    static const char *const env[] = {"SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000", NULL};
    static const char cancel[] = "{\"v\": 1, \"type\": \"saga.cancel\", \"id\": \"cx-9\", "
                                 "\"saga_id\": \"snap-1\", \"by\": \"ops\", \"reason\": \"r\"}";
    char id[32], text[512];
    const char *then, *now;

    sgw_pair_start(NULL, 1, env);
    sgw_submit("snap-1", "[{\"name\": \"reserve\", \"tool\": \"ledger.reversible\"},"
                         " {\"name\": \"charge\", \"tool\": \"fail\", \"args\": {\"class\": "
                         "\"poison\", \"code\": \"bank.garbled\"}}]");
    sgw_wait_status("snap-1", "held");
    sgw_produce_signed("ann", 0, "snap-1", cancel, strlen(cancel));
    sgw_wait_status("snap-1", "cancelled");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("snap-1"));

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg((e->>'step') || '=' || (e->>'status'), ',') "
                                "FROM dead_letters d, jsonb_array_elements(d.steps_at) e"),
                     "0=succeeded,1=failed", "the steps when the dead letter was written");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT jsonb_array_length(sagad_dead_letter_record(d) -> "
                                "'steps_at')::text FROM dead_letters d"),
                     "2", "and in its DLQ record");
    cr_assert_eq(dlq(ARGS("show", id)), 0, "%s%s", R.out, R.err);
    then = strstr(R.out, "saga steps when dead-lettered:");
    now = strstr(R.out, "saga steps now:");
    cr_assert(then && now && then < now, "both sections, in order: %s", R.out);
    cr_expect(strstr(then, "succeeded") && strstr(then, "failed") &&
                  (!strstr(then, "compensated") || strstr(then, "compensated") > now),
              "then: succeeded and failed: %s", R.out);
    cr_expect(strstr(now, "compensated") != NULL, "now: compensated by the cancel: %s", R.out);
    cr_assert_eq(dlq(ARGS("show", id, "--json")), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "\"steps_at\":[") != NULL, "%s", R.out);
}

Test(dlq, discard_hides_entry_from_pending_and_json_has_documented_fields)
{
    static const char *const fields[] = {"id",
                                         "status",
                                         "created_at",
                                         "error_code",
                                         "error_class",
                                         "message",
                                         "saga_id",
                                         "saga_name",
                                         "step",
                                         "step_name",
                                         "tool",
                                         "phase",
                                         "attempts",
                                         "original_topic",
                                         "first_failure_at",
                                         "last_failure_at",
                                         "resolved_at",
                                         "revisions",
                                         "replays"};
    char id[32];
    sg_json_t *doc;
    char *nl;

    rejected_submission("disc-1", id, sizeof(id));

    cr_assert_eq(dlq(ARGS("list", "--status", "pending", "--json")), 0, "%s", R.err);
    nl = strchr(R.out, '\n');
    cr_assert_not_null(nl, "one JSON object per line");
    doc = sg_json_parse(R.out, (size_t)(nl - R.out), NULL, NULL);
    cr_assert_not_null(doc, "the line parses: %s", R.out);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        cr_expect_not_null(sg_json_member(doc, fields[i]), "--json has \"%s\": %s", fields[i],
                           R.out);
    cr_expect_eq(sgw_jint(doc, "id"), atoll(id));
    cr_expect_str_eq(sgw_jstr(doc, "error_code"), "input.schema.invalid");
    cr_expect_str_eq(sgw_jstr(doc, "saga_id"), "disc-1");
    sg_json_destroy(doc);

    cr_expect_eq(dlq(ARGS("discard", id)), 2, "--reason is required");
    cr_expect(strstr(R.err, "needs IDs and --reason"), "%s", R.err);
    cr_assert_eq(dlq(ARGS("discard", id, "--reason", "test traffic", "--operator", "frank")), 0,
                 "%s", R.err);
    cr_expect_eq(dlq(ARGS("list", "--status", "pending")), 1, "nothing pending: exit 1");
    cr_expect(strstr(R.err, "no dead letters match"), "%s", R.err);
    cr_expect_eq(dlq(ARGS("list", "--status", "discarded", "--json")), 0);
    cr_expect(strstr(R.out, "\"status\":\"discarded\""), "%s", R.out);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE resolved_by = 'frank' AND "
                           "resolution_reason = 'test traffic'"),
                 1, "kept, not deleted, with who and why");
    cr_expect_eq(dlq(ARGS("replay", id, "--reason", "x")), 3, "a discarded entry needs --force");
    cr_expect(strstr(R.err, "is already discarded; --force replays it again"), "%s", R.err);

    cr_assert_eq(dlq(ARGS("show", id, "--json")), 0, "%s", R.err);
    doc = sg_json_parse(R.out, strlen(R.out), NULL, NULL);
    cr_assert_not_null(doc, "show --json parses");
    cr_expect(strstr(sgw_jstr(sg_json_member(doc, "record"), "payload"), "no.such.tool"),
              "the record carries the payload: %s", R.out);
    cr_expect_str_eq(sgw_jstr(doc, "resolved_by"), "frank");
    sg_json_destroy(doc);
    cr_expect_eq(dlq(ARGS("show", "999999")), 1, "unknown ID: exit 1");
    cr_expect(strstr(R.err, "no dead letter 999999"), "%s", R.err);
    cr_expect_eq(dlq(ARGS("list", "--class", "bogus")), 2, "bad option value: exit 2");
    cr_expect(strstr(R.err, "--class bogus"), "%s", R.err);
}

#define KILL_ENTRIES 30

Test(dlq, killed_mid_bulk_replay_leaves_each_entry_whole_or_untouched)
{
    sgt_bg_t tool;
    long long replays;
    int rc;

    sgw_pair_start(NULL, 1, NULL);
    for (int i = 0; i < KILL_ENTRIES; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k-%d", i);
        sgw_produce(sgw.topic_cmd, key, "not json", 8);
    }
    sgw_wait_int(KILL_ENTRIES, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop(); /* no relay: the outbox rows of the replays stay to be checked */

    memset(&tool, 0, sizeof(tool));
    {
        const char *env[SGW_MAX_ENV + 2];
        size_t n = 0;

        for (; sgw.env[n]; n++)
            env[n] = sgw.env[n];
        env[n++] = sgw.op_env; /* the operator role, the later name wins */
        env[n] = NULL;
        sgt_bg_start(
            &tool, "dlq-tool",
            ARGS("replay", "--status", "pending", "--reason", "bulk", "--yes", "--rate", "10/s"),
            env);
    }
    {
        double deadline = sgt_now_s() + SGW_WAIT_S;
        while (sgw_q_int("SELECT count(*) FROM replays") < 5 && sgt_now_s() < deadline &&
               !sgt_bg_done(&tool))
            usleep(20000);
    }
    sgt_bg_signal(&tool, SIGKILL);
    rc = sgt_bg_join(&tool, -1);
    cr_expect_eq(rc, 128 + SIGKILL, "killed mid-run, exit %d: %s", rc, sgt_bg_tail(&tool));
    sgt_bg_free(&tool);

    replays = sgw_q_int("SELECT count(*) FROM replays");
    cr_expect(replays >= 5 && replays < KILL_ENTRIES, "killed part-way: %lld replays", replays);
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM dead_letters d WHERE "
                  "(d.status = 'replayed') <> EXISTS (SELECT 1 FROM replays r WHERE "
                  "r.dead_letter_id = d.id) OR "
                  "(d.status = 'replayed') <> EXISTS (SELECT 1 FROM outbox o WHERE "
                  "o.headers->>'sagad-replay-of' = d.id::text AND "
                  "o.headers->>'sagad-replay-id' = (SELECT r.id::text FROM replays r WHERE "
                  "r.dead_letter_id = d.id))"),
        0, "every entry is replayed with its ledger row and message, or untouched");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM dead_letters WHERE status = 'replayed'"), replays);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM outbox WHERE headers ? 'sagad-replay-of'"),
                 replays);

    /* the rest can be replayed afterwards, and only the rest */
    cr_assert_eq(dlq(ARGS("replay", "--status", "pending", "--reason", "bulk", "--yes")), 0, "%s",
                 R.err);
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM replays"), KILL_ENTRIES);
    cr_expect_eq(sgw_q_int("SELECT count(DISTINCT dead_letter_id) FROM replays"), KILL_ENTRIES);
}

/* Producer data reached the operator's terminal raw: an escape sequence in
 * a key or a message could repaint it.  People's output shows control
 * characters as \xHH; --json stays exact. */
Test(dlq, control_characters_from_producers_are_shown_not_obeyed)
{
    static const char payload[] =
        "{\"v\": 1, \"type\": \"x\\u001b[31m\", \"id\": \"i-1\", \"saga_id\": \"esc-1\"}";
    char id[32];

    sgw_pair_start(NULL, 1, NULL);
    sgw_produce(sgw.topic_cmd, "esc\x1b[2J", payload, strlen(payload));
    sgw_wait_int(1, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("esc-1"));

    cr_assert_eq(dlq(ARGS("list")), 0, "%s", R.err);
    cr_expect_null(strchr(R.out, 0x1b), "a raw ESC reached the terminal: %s", R.out);
    cr_expect(strstr(R.out, "x\\x1b[31m"), "the message shows it escaped: %s", R.out);
    cr_assert_eq(dlq(ARGS("show", id)), 0, "%s", R.err);
    cr_expect_null(strchr(R.out, 0x1b), "a raw ESC reached the terminal: %s", R.out);
    cr_expect(strstr(R.out, "esc\\x1b[2J"), "the key shows it escaped: %s", R.out);
    cr_assert_eq(dlq(ARGS("list", "--json")), 0, "%s", R.err);
    cr_expect(strstr(R.out, "x\\u001b[31m"), "--json keeps it exact (JSON-escaped): %s", R.out);
}

/* ---- what a replay calls again (docs/DLQ.md, "What a replay does") ---- */

/* An effect no compensation undoes, one ledger row per key. */
#define MAIL_TOOL                                                                                  \
    "\"mail\": {\"adapter\": \"builtin\", \"target\": \"ledger\", \"side_effect\": "               \
    "\"irreversible\"}"

/* The ledger's rows of a saga, "key=calls,..." by key: one row is one
 * effect, calls the times it was asked for under that key. */
static const char *ledger_of(char *out, size_t size, const char *saga_id)
{
    return sgw_q_text(out, size,
                      "SELECT string_agg(key || '=' || calls, ',' ORDER BY key) FROM "
                      "builtin_ledger WHERE key LIKE '%s:%%'",
                      saga_id);
}

/* The step numbers of a plan list (kept, repeats) of the first --json
 * line of R.out, as "1,2" ("" for an empty list). */
static const char *plan_steps(const char *member, char *out, size_t size)
{
    char *nl = strchr(R.out, '\n');
    const sg_json_t *arr;
    sg_json_t *doc;
    size_t len = 0;

    cr_assert_not_null(nl, "one JSON object per line: %s", R.out);
    doc = sg_json_parse(R.out, (size_t)(nl - R.out), NULL, NULL);
    cr_assert_not_null(doc, "the line parses: %s", R.out);
    arr = sg_json_member(doc, member);
    cr_assert(arr && sg_json_is_array(arr), "--json has the list \"%s\": %s", member, R.out);
    out[0] = '\0';
    for (size_t i = 0; i < sg_json_array_size(arr) && len + 12 < size; i++) {
        double v = -1;
        sg_json_number(sg_json_member(sg_json_array_get(arr, i), "step"), &v);
        len += (size_t)snprintf(out + len, size - len, "%s%d", i ? "," : "", (int)v);
    }
    sg_json_destroy(doc);
    return out;
}

/* Step 0 is undone by its compensation, step 1 (irreversible) is only
 * passed over: its effect stands; step 2 fails until the tool is fixed. */
#define UNDO_STEPS                                                                                 \
    "[{\"name\": \"hold\", \"tool\": \"ledger.reversible\"}, {\"name\": \"mail\", \"tool\": "      \
    "\"mail\"}, {\"name\": \"ship\", \"tool\": \"flaky\", \"args\": {\"class\": \"transient\"}}]"

Test(dlq, replay_of_compensated_saga_does_not_call_a_standing_effect_again)
{
    char id[32], text[512];

    sgw_pair_start(FLAKY_DOWN "," MAIL_TOOL, 1, NULL);
    sgw_submit("undo-1", UNDO_STEPS);
    sgw_wait_status("undo-1", "compensated");
    sgw_pair_stop();
    cr_assert_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "compensated,skipped,failed", "step 0 undone, step 1's mail sent and never undone");
    snprintf(id, sizeof(id), "%lld", dead_letter_of("undo-1"));

    cr_assert_eq(dlq(ARGS("replay", id, "--dry-run", "--json")), 0, "%s%s", R.out, R.err);
    cr_expect_str_eq(plan_steps("kept", text, sizeof(text)), "1", "%s", R.out);
    cr_expect_str_eq(plan_steps("repeats", text, sizeof(text)), "", "%s", R.out);
    cr_assert_eq(dlq(ARGS("replay", id, "--dry-run")), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "kept: step 1 mail (mail), skipped, effect stands: not called again; "
                            "key undo-1:1:f:g1"),
              "the dry run lists the kept effect: %s", R.out);

    restart_with_tools(FLAKY_FIXED "," MAIL_TOOL);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "shipping fixed", "--operator", "hal")), 0,
                 "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "run saga undo-1 again from step 0, generation 2; 1 kept, 0 repeated"),
              "%s", R.out);
    sgw_wait_status("undo-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(ledger_of(text, sizeof(text), "undo-1"),
                     "undo-1:0:c:g1=1,undo-1:0:f:g1=1,undo-1:0:f:g2=1,undo-1:1:f:g1=1,"
                     "undo-1:2:f:g2=1",
                     "step 0 undone then done again, the mail sent once, step 2 done once");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,succeeded,succeeded");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx = 1 AND generation = 2"),
                 0, "the kept step was not called");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM steps WHERE idx = 1 AND result IS NOT NULL AND "
                           "idempotency_key = 'undo-1:1:f:g1'"),
                 1, "the kept step keeps its result and key");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', action, kept->0->>'step', "
                                "jsonb_array_length(repeats), rerun_from) FROM replays"),
                     "rerun|1|0", "the replays row records what was kept");
}

Test(dlq, replay_of_held_saga_whose_step_is_unknown_calls_it_under_its_old_key)
{
    char id[32], text[512];

    sgw_pair_start(FLAKY_DOWN, 1, ARGS("SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000"));
    sgw_submit("unk-1", THREE_STEPS);
    sgw_wait_status("unk-1", "held");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("unk-1"));
    /* The worker ends a step whose last attempt may have taken effect (a
     * timeout, a crash loop) unknown; so does this test, and records the
     * effect the downstream applied under the step's key. */
    cr_assert_eq(sgw_q_int("WITH u AS (UPDATE steps SET status = 'unknown' WHERE saga_id = "
                           "'unk-1' AND idx = 2 AND idempotency_key = 'unk-1:2:f:g1' "
                           "RETURNING 1) SELECT count(*) FROM u"),
                 1);
    cr_assert_eq(sgw_q_int("WITH i AS (INSERT INTO builtin_ledger (key) VALUES "
                           "('unk-1:2:f:g1') RETURNING 1) SELECT count(*) FROM i"),
                 1);

    restart_with_tools(FLAKY_FIXED);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "flaky is fixed")), 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "resume saga unk-1 at step 2, generation 2") &&
                  strstr(R.out, "new key unk-1:2:f:g1"),
              "the step runs again under its old key: %s", R.out);
    cr_expect(strstr(R.out,
                     "kept: step 2 c (flaky), unknown, effect possible: called again under its old "
                     "key; key unk-1:2:f:g1"),
              "%s", R.out);
    sgw_wait_status("unk-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(ledger_of(text, sizeof(text), "unk-1"),
                     "unk-1:0:f:g1=1,unk-1:1:f:g1=1,unk-1:2:f:g1=2",
                     "step 2 asked again under its old key: one effect, no new key");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(DISTINCT idempotency_key, ',') FROM attempts "
                                "WHERE step_idx = 2 AND generation = 2"),
                     "unk-1:2:f:g1");
    cr_expect_eq(sgw_q_int("SELECT count(*) FROM attempts WHERE step_idx < 2 AND generation = 2"),
                 0, "completed steps are not run again");
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,succeeded,succeeded");
}

/* A charge that timed out: the step whose outcome is unknown, which no
 * compensation undid, is called again under the key it was called with,
 * so the downstream's record answers; the standing mail is not sent again;
 * the undone step 0 runs under the new key. */
Test(dlq, replay_of_compensated_saga_calls_an_unknown_step_under_its_old_key)
{
    char id[32], text[512];

    sgw_pair_start(FLAKY_DOWN "," MAIL_TOOL, 1, NULL);
    sgw_submit("undo-2", UNDO_STEPS);
    sgw_wait_status("undo-2", "compensated");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("undo-2"));
    /* As the worker leaves a step whose last attempt may have taken effect
     * and that has no compensation; the downstream did apply it. */
    cr_assert_eq(sgw_q_int("WITH u AS (UPDATE steps SET status = 'unknown' WHERE saga_id = "
                           "'undo-2' AND idx = 2 AND status = 'failed' AND idempotency_key = "
                           "'undo-2:2:f:g1' RETURNING 1) SELECT count(*) FROM u"),
                 1);
    cr_assert_eq(sgw_q_int("WITH i AS (INSERT INTO builtin_ledger (key) VALUES "
                           "('undo-2:2:f:g1') RETURNING 1) SELECT count(*) FROM i"),
                 1);

    cr_assert_eq(dlq(ARGS("replay", id, "--dry-run", "--json")), 0, "%s%s", R.out, R.err);
    cr_expect_str_eq(plan_steps("kept", text, sizeof(text)), "1,2", "%s", R.out);
    cr_expect_str_eq(plan_steps("repeats", text, sizeof(text)), "", "%s", R.out);

    restart_with_tools(FLAKY_FIXED "," MAIL_TOOL);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "shipping fixed")), 0, "%s%s", R.out, R.err);
    cr_expect(
        strstr(R.out,
               "kept: step 2 ship (flaky), unknown, effect possible: called again under its old "
               "key; key undo-2:2:f:g1"),
        "%s", R.out);
    sgw_wait_status("undo-2", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(ledger_of(text, sizeof(text), "undo-2"),
                     "undo-2:0:c:g1=1,undo-2:0:f:g1=1,undo-2:0:f:g2=1,undo-2:1:f:g1=1,"
                     "undo-2:2:f:g1=2",
                     "step 2 asked again under its old key: one effect, no new key");
    cr_expect_eq(sgw_q_int("SELECT key_generation FROM steps WHERE idx = 2"), 1);
    cr_expect_str_eq(
        sgw_q_text(text, sizeof(text), "SELECT string_agg(status, ',' ORDER BY idx) FROM steps"),
        "succeeded,succeeded,succeeded");
}

/* How each step's effect is read (sagad_step_effect), on rows written as
 * the worker leaves them: a skipped step is told apart by its key and its
 * last forward attempt; an unknown step's old key is the one it was
 * called with.  No worker: the plan of a dry run is the subject. */
Test(dlq, replay_reads_each_steps_effect_from_its_status_and_last_attempt)
{
    char text[512];

    sgw_world_start(NULL, 1, NULL);
    cr_assert_eq(
        sgw_q_int(
            "WITH g AS (INSERT INTO sagas (saga_id, name, status, definition, generation) "
            "VALUES ('eff-1', 't', 'compensated', '{}', 3), ('eff-2', 't', 'compensated', '{}', "
            "1) RETURNING 1), s AS (INSERT INTO steps (saga_id, idx, name, tool, status, "
            "idempotency_key, result) SELECT 'eff-1', i, 's' || i, 'ledger', st, k, NULL FROM "
            "(VALUES (0, 'skipped', NULL), (1, 'skipped', 'eff-1:1:f:g3'), (2, 'skipped', "
            "'eff-1:2:f:g3'), (3, 'compensated', 'eff-1:3:f:g3'), (4, 'failed', 'eff-1:4:f:g3'), "
            "(5, 'unknown', 'eff-1:5:f:g2'), (6, 'succeeded', 'eff-1:6:f:g3')) v(i, st, k) "
            "UNION ALL SELECT 'eff-2', 0, 'only', 'mail', 'skipped', 'eff-2:0:f:g1', '{}'::jsonb "
            "RETURNING 1) SELECT (SELECT count(*) FROM g) + (SELECT count(*) FROM s)"),
        10);
    /* The sagas' steps exist: their attempts, then a dead letter each. */
    cr_assert_eq(sgw_q_int("WITH a AS (INSERT INTO attempts (saga_id, step_idx, phase, "
                           "generation, attempt, idempotency_key, status) VALUES "
                           "('eff-1', 1, 'forward', 3, 1, 'eff-1:1:f:g3', 'ok'), "
                           "('eff-1', 2, 'forward', 3, 1, 'eff-1:2:f:g3', 'timeout'), "
                           "('eff-1', 4, 'forward', 3, 1, 'eff-1:4:f:g3', 'error') RETURNING 1), "
                           "d AS (INSERT INTO dead_letters (error_code, error_class, saga_id, "
                           "step_idx, phase) VALUES ('tool.x', 'poison', 'eff-1', 4, 'forward'), "
                           "('tool.x', 'poison', 'eff-2', 0, 'forward') RETURNING 1) "
                           "SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM d)"),
                 5);

    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT string_agg(idx || '=' || sagad_step_effect(st), ',' "
                                "ORDER BY idx) FROM steps st WHERE saga_id = 'eff-1'"),
                     "0=none,1=stands,2=possible,3=undone,4=none,5=possible,6=stands",
                     "never ran, ran ok, may have run, undone, failed, unknown, succeeded");
    cr_assert_eq(dlq(ARGS("replay", "--saga", "eff-1", "--dry-run", "--json")), 0, "%s%s", R.out,
                 R.err);
    cr_expect_str_eq(plan_steps("kept", text, sizeof(text)), "1,2,5,6", "%s", R.out);
    cr_expect_str_eq(plan_steps("repeats", text, sizeof(text)), "", "%s", R.out);
    cr_expect(strstr(R.out, "\"key\":\"eff-1:5:f:g2\"") && strstr(R.out, "\"key\":"
                                                                         "\"eff-1:2:f:g3\""),
              "may-have-run steps keep the keys they were called with: %s", R.out);
    cr_expect(strstr(R.out, "\"step\":0,") && strstr(R.out, "\"new_key\":\"eff-1:0:f:g4\""),
              "the first step that runs again is step 0, under the new key: %s", R.out);

    cr_expect_eq(dlq(ARGS("replay", "--saga", "eff-2", "--dry-run")), 3, "%s%s", R.out, R.err);
    cr_expect(strstr(R.err, "saga eff-2: every step's effect stands, nothing would run again; "
                            "discard the entry, or name the step to repeat with --rerun-from"),
              "%s", R.err);
}

/* Steps 0 (idempotent) and 1 (irreversible) stand after the compensation;
 * step 2 fails until the tool is fixed. */
#define STAND_STEPS                                                                                \
    "[{\"name\": \"note\", \"tool\": \"ledger\"}, {\"name\": \"mail\", \"tool\": \"mail\"},"       \
    " {\"name\": \"ship\", \"tool\": \"flaky\", \"args\": {\"class\": \"transient\"}}]"

Test(dlq, rerun_from_repeats_exactly_the_listed_effects_once_confirmed)
{
    char id[32], text[512], before[64], after[64];

    sgw_pair_start(FLAKY_DOWN "," MAIL_TOOL, 1, NULL);
    sgw_submit("again-1", STAND_STEPS);
    sgw_wait_status("again-1", "compensated");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("again-1"));

    cr_expect_eq(dlq(ARGS("replay", id, id, "--rerun-from", "mail", "--reason", "x")), 2);
    cr_expect(strstr(R.err, "--rerun-from STEP replays one dead letter"), "%s", R.err);
    cr_expect_eq(dlq(ARGS("replay", id, "--rerun-from", "nope", "--reason", "x")), 3);
    cr_expect(strstr(R.err, "--rerun-from nope: saga again-1 has no such step (its steps: 0 note, "
                            "1 mail, 2 ship)"),
              "%s", R.err);

    cr_assert_eq(dlq(ARGS("replay", id, "--rerun-from", "mail", "--dry-run", "--json")), 0, "%s%s",
                 R.out, R.err);
    cr_expect_str_eq(plan_steps("repeats", text, sizeof(text)), "1", "%s", R.out);
    cr_expect_str_eq(plan_steps("kept", text, sizeof(text)), "0", "%s", R.out);
    cr_assert_eq(dlq(ARGS("replay", id, "--rerun-from", "1", "--dry-run")), 0, "%s%s", R.out,
                 R.err);
    cr_expect(strstr(R.out, "would repeat: step 1 mail (mail), skipped, effect stands: called "
                            "again under a new key (--rerun-from); key again-1:1:f:g2, was "
                            "again-1:1:f:g1"),
              "%s", R.out);
    cr_expect(strstr(R.out, "kept: step 0 note (ledger)"), "%s", R.out);

    /* Not confirmed (no --yes, no terminal): the list, and nothing done. */
    sgw_q_text(before, sizeof(before), "%s", fingerprint_sql);
    cr_expect_eq(dlq(ARGS("replay", id, "--rerun-from", "mail", "--reason", "resend")), 3, "%s%s",
                 R.out, R.err);
    cr_expect(strstr(R.err, "will repeat: step 1 mail (mail)") &&
                  strstr(R.err, "kept: step 0 note (ledger)") && strstr(R.err, "--yes"),
              "%s", R.err);
    sgw_q_text(after, sizeof(after), "%s", fingerprint_sql);
    cr_expect_str_eq(after, before, "an unconfirmed repeat changes nothing");

    restart_with_tools(FLAKY_FIXED "," MAIL_TOOL);
    cr_assert_eq(dlq(ARGS("replay", id, "--rerun-from", "mail", "--reason", "resend", "--yes",
                          "--operator", "ida")),
                 0, "%s%s", R.out, R.err);
    cr_expect(strstr(R.out, "repeated: step 1 mail (mail)"), "%s", R.out);
    sgw_wait_status("again-1", "completed");
    sgw_pair_stop();

    cr_expect_str_eq(ledger_of(text, sizeof(text), "again-1"),
                     "again-1:0:f:g1=1,again-1:1:f:g1=1,again-1:1:f:g2=1,again-1:2:f:g2=1",
                     "the mail, listed, was sent again; the note, kept, was not");
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT concat_ws('|', operator, action, rerun_from, "
                                "repeats->0->>'step', jsonb_array_length(repeats)) FROM replays"),
                     "ida|rerun|1|1|1", "the replays row records who asked to repeat what");
    cr_assert_eq(dlq(ARGS("saga", "again-1")), 0, "%s", R.err);
    cr_expect(strstr(R.out, "by ida: rerun, generation 2, key again-1:1:f:g2, kept steps 0, "
                            "REPEATED steps 1 (--rerun-from 1)"),
              "the timeline says what was repeated: %s", R.out);
}

Test(dlq, every_subcommand_has_generated_help_and_usage_errors_exit_2)
{
    static const char *const cmds[] = {"list", "show",    "stats", "replay",
                                       "edit", "discard", "saga",  "tail"};

    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cr_expect_eq(dlq(ARGS(cmds[i], "--help")), 0, "%s --help", cmds[i]);
        cr_expect(strstr(R.out, "usage: dlq-tool") && strstr(R.out, cmds[i]) &&
                      strstr(R.out, "3 refused for safety"),
                  "%s --help: %s", cmds[i], R.out);
    }
    cr_expect_eq(dlq(ARGS("replay", "--bogus")), 2);
    cr_expect(strstr(R.err, "unknown option --bogus"), "%s", R.err);
    cr_expect_eq(dlq(ARGS("replay", "1")), 2, "--reason is required");
    cr_expect(strstr(R.err, "--reason is required"), "%s", R.err);
    cr_expect_eq(dlq(ARGS("replay", "1", "--reason", "x", "--rate", "fast")), 2);
    cr_expect(strstr(R.err, "--rate fast: must be N/s"), "%s", R.err);
}

/* ---- one family of command lines (issue 37 item 4) ---- */

/* The first line of R.out as a JSON object (the caller destroys it). */
static sg_json_t *first_json_line(void)
{
    char *nl = strchr(R.out, '\n');
    sg_json_t *doc;

    cr_assert_not_null(nl, "one JSON object per line: %s", R.out);
    doc = sg_json_parse(R.out, (size_t)(nl - R.out), NULL, NULL);
    cr_assert_not_null(doc, "the line parses: %s", R.out);
    return doc;
}

/* edit --json and discard --json answer with one object each: what was
 * saved, refused (with every problem) or left unchanged; what became of
 * each entry. */
Test(dlq, edit_and_discard_answer_in_json)
{
    char id1[32], id2[32], text[512];
    const sg_json_t *problems;
    sg_json_t *doc;

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("js-1", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    sgw_submit("js-2", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    sgw_wait_int(2, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();
    snprintf(id1, sizeof(id1), "%lld", dead_letter_of("js-1"));
    snprintf(id2, sizeof(id2), "%lld", dead_letter_of("js-2"));

    cr_assert_eq(dlq(ARGS("edit", id1, "--set", "steps[0].tool=still.unknown", "--json")), 3,
                 "%s%s", R.out, R.err);
    doc = first_json_line();
    cr_expect_eq(sgw_jint(doc, "id"), atoll(id1));
    cr_expect_str_eq(sgw_jstr(doc, "outcome"), "refused");
    cr_expect_str_eq(sgw_jstr(doc, "code"), "input.schema.invalid");
    problems = sg_json_member(doc, "problems");
    cr_expect_geq(sg_json_array_size(problems), 1, "%s", R.out);
    cr_expect_str_eq(sgw_jstr(sg_json_array_get(problems, 0), "path"), "$.steps[0].tool", "%s",
                     R.out);
    sg_json_destroy(doc);
    cr_expect(strstr(R.err, "refused, nothing saved"), "%s", R.err);

    cr_assert_eq(dlq(ARGS("edit", id1, "--set", "steps[0].name=a", "--json")), 0, "%s", R.err);
    doc = first_json_line();
    cr_expect_str_eq(sgw_jstr(doc, "outcome"), "unchanged", "%s", R.out);
    sg_json_destroy(doc);

    cr_assert_eq(dlq(ARGS("--json", "edit", id1, "--set", "steps[0].tool=noop", "--reason", "typo",
                          "--by", "erin")),
                 0, "%s", R.err);
    doc = first_json_line();
    cr_expect_str_eq(sgw_jstr(doc, "outcome"), "saved", "%s", R.out);
    cr_expect_eq(sgw_jint(doc, "revision"), 1, "%s", R.out);
    cr_expect_str_eq(
        sgw_jstr(sg_json_array_get(sg_json_member(sg_json_member(doc, "payload"), "steps"), 0),
                 "tool"),
        "noop", "the saved payload, as an object: %s", R.out);
    sg_json_destroy(doc);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT operator || '|' || reason FROM dead_letter_revisions "
                                "WHERE dead_letter_id = %s",
                                id1),
                     "erin|typo");

    cr_assert_eq(dlq(ARGS("discard", id1, id2, "--reason", "test traffic", "--json")), 0, "%s",
                 R.err);
    {
        char *second = strchr(R.out, '\n');
        sg_json_t *b;
        doc = first_json_line();
        cr_assert_not_null(second);
        b = sg_json_parse(second + 1, strcspn(second + 1, "\n"), NULL, NULL);
        cr_assert_not_null(b, "a second line: %s", R.out);
        cr_expect_eq(sgw_jint(doc, "id"), atoll(id1));
        cr_expect_eq(sgw_jint(b, "id"), atoll(id2));
        cr_expect_str_eq(sgw_jstr(doc, "outcome"), "discarded", "%s", R.out);
        cr_expect_str_eq(sgw_jstr(b, "outcome"), "discarded", "%s", R.out);
        cr_expect(sg_json_member(doc, "released") != NULL, "%s", R.out);
        sg_json_destroy(b);
        sg_json_destroy(doc);
    }
    cr_expect_eq(dlq(ARGS("discard", id1, "--reason", "again", "--json")), 3, "%s", R.err);
    doc = first_json_line();
    cr_expect_str_eq(sgw_jstr(doc, "outcome"), "refused", "%s", R.out);
    sg_json_destroy(doc);
}

/* --by names who acts; --operator, its old name, still works (and says it
 * is deprecated), for replay, edit and discard alike. */
Test(dlq, operator_is_a_deprecated_alias_of_by)
{
    char id[32], id2[32], text[256];

    sgw_pair_start(NULL, 1, NULL);
    sgw_submit("by-1", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    sgw_submit("by-2", "[{\"name\": \"a\", \"tool\": \"no.such.tool\"}]");
    sgw_wait_int(2, "SELECT count(*) FROM dead_letters");
    sgw_pair_stop();
    snprintf(id, sizeof(id), "%lld", dead_letter_of("by-1"));
    snprintf(id2, sizeof(id2), "%lld", dead_letter_of("by-2"));
    cr_assert_eq(dlq(ARGS("edit", id, "--set", "steps[0].tool=noop", "--operator", "olga")), 0,
                 "%s", R.err);
    cr_expect(strstr(R.err, "--operator is deprecated, use --by"), "%s", R.err);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "fixed", "--operator", "olga")), 0, "%s",
                 R.err);
    cr_expect(strstr(R.err, "--operator is deprecated, use --by"), "%s", R.err);
    cr_assert_eq(dlq(ARGS("replay", id, "--reason", "again", "--force", "--by", "bert")), 0, "%s",
                 R.err);
    cr_expect(strstr(R.err, "deprecated") == NULL, "%s", R.err);
    cr_expect_str_eq(sgw_q_text(text, sizeof(text),
                                "SELECT (SELECT string_agg(operator, ',' ORDER BY id) FROM "
                                "replays) || '|' || (SELECT operator FROM dead_letter_revisions)"),
                     "olga,bert|olga", "who replayed and who edited, by either name");
    cr_assert_eq(dlq(ARGS("discard", id2, "--reason", "noise", "--operator", "olga")), 0, "%s",
                 R.err);
    cr_expect_eq(
        sgw_q_int("SELECT count(*) FROM dead_letters WHERE saga_id = 'by-2' AND resolved_by = "
                  "'olga'"),
        1);
}
