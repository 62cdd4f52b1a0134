/* dlq-tool replay: re-inject dead letters, one transaction per entry.
 *
 * The work of one entry is sagad_dlq_replay() (schemas/sql/0015), called
 * through lib/ops (sg_dlq_replay): one statement, so one transaction, so an entry is either fully
 * replayed (replays row, entry marked, new generation, command in the outbox) or untouched, even
 * when dlq-tool is killed in the middle of a bulk run. The same function decides which steps run
 * again and under which key (docs/DLQ.md, "What a replay does"), and returns the effects it keeps
 * and the ones it repeats, which every line here shows.
 *
 * A bulk run replays --parallel entries at a time, each on a connection of
 * its own: every entry's commit waits for its WAL flush, and concurrent
 * commits share flushes, so this is what makes a large replay fast.  Lines
 * are printed as entries finish, so their order can differ from the IDs'. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dlq.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_run.h"
#include "sagad/sg_table.h"
#include "sagad/sg_text.h"

#define PARALLEL_DEFAULT 4
#define PARALLEL_MAX     32

typedef struct replay_run_s {
    dlq_t *d;
    const char *by, *reason, *internal_topic;
    const char *rerun_from; /* --rerun-from STEP, NULL: none */
    bool dry_run, force, json;
    double rate; /* entries per second, 0: unbounded */
    long parallel;
    long replayed, would, refused, missing;
    /* The bulk run, shared by its threads under lock. */
    pthread_mutex_t lock;
    const int64_t *ids;
    size_t n, next, done;
    uint64_t t0;
    int rc;
} replay_run_t;

/* "N/s", "N/m" or "N" (per second). */
static int parse_rate(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || !(v > 0) || !isfinite(v))
        return -1;
    if (*end == '\0' || strcmp(end, "/s") == 0)
        *out = v;
    else if (strcmp(end, "/m") == 0 || strcmp(end, "/min") == 0)
        *out = v / 60.0;
    else
        return -1;
    return 0;
}

static void sleep_until_ms(uint64_t t)
{
    uint64_t now = sg_run_now_ms();

    if (t > now) {
        struct timespec ts = {(time_t)((t - now) / 1000), (long)((t - now) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* A string member of a plan element, "?" when absent. */
static const char *plan_str(const sg_json_t *e, const char *key)
{
    const char *v = sg_json_string(sg_json_member(e, key));

    return v ? v : "?";
}

/* One line per element of a plan list (kept or repeats of a replay's
 * result): the step, its tool, what stands and what happens to it.  Step
 * names and keys (their saga_id) are producer data: shown with control
 * characters escaped. */
static void print_effects(FILE *out, const char *label, const sg_json_t *list)
{
    for (const sg_json_t *e = sg_json_first(list); e; e = sg_json_next(e)) {
        const char *old_key_raw = sg_json_string(sg_json_member(e, "old_key"));
        const char *key_raw = sg_json_string(sg_json_member(e, "key"));
        double idx = -1;
        char *name = sg_text_visible(plan_str(e, "name"), false);
        char *tool = sg_text_visible(plan_str(e, "tool"), false);
        char *key = key_raw ? sg_text_visible(key_raw, false) : NULL;
        char *old_key = old_key_raw ? sg_text_visible(old_key_raw, false) : NULL;

        sg_json_number(sg_json_member(e, "step"), &idx);
        fprintf(out, "  %s: step %d %s (%s), %s, effect %s: %s%s%s%s%s\n", label, (int)idx, name,
                tool, plan_str(e, "status"), plan_str(e, "effect"), plan_str(e, "how"),
                key ? "; key " : "", key ? key : "", old_key ? ", was " : "",
                old_key ? old_key : "");
        free(name);
        free(tool);
        free(key);
        free(old_key);
    }
}

/* A member of a replay's result, "" when absent. */
static const char *res_str(const sg_json_t *r, const char *key)
{
    const char *v = sg_json_string(sg_json_member(r, key));

    return v ? v : "";
}

/* "; new key K" when the result names one. */
static void new_key(const sg_json_t *r, char *out, size_t size)
{
    const char *key = sg_json_string(sg_json_member(r, "new_key"));

    snprintf(out, size, "%s%s", key ? "; new key " : "", key ? key : "");
}

static void report(replay_run_t *run, int64_t id, const sg_json_t *r)
{
    const char *outcome = res_str(r, "outcome"), *detail = res_str(r, "detail");
    char key[300];

    new_key(r, key, sizeof(key));
    if (run->json)
        sg_cmd_print_json(r);
    if (strcmp(outcome, "replayed") == 0) {
        run->replayed++;
        if (!run->json) {
            char *replay = sg_table_cell(r, "replay_id", SG_CELL_TEXT);
            printf("replayed %lld (replay %s): %s%s\n", (long long)id, replay ? replay : "?",
                   detail, key);
            print_effects(stdout, "repeated", sg_json_member(r, "repeats"));
            print_effects(stdout, "kept", sg_json_member(r, "kept"));
            free(replay);
        }
    } else if (strcmp(outcome, "would_replay") == 0) {
        run->would++;
        if (!run->json) {
            printf("would replay %lld: %s%s (dry run: nothing changed)\n", (long long)id, detail,
                   key);
            print_effects(stdout, "would repeat", sg_json_member(r, "repeats"));
            print_effects(stdout, "kept", sg_json_member(r, "kept"));
        }
    } else if (strcmp(outcome, "refused") == 0) {
        run->refused++;
        sg_cmd_warn(run->d, "%lld refused: %s", (long long)id, detail);
    } else {
        run->missing++;
        sg_cmd_warn(run->d, "%s", detail);
    }
}

/* The request of entry id under the run's options. */
static sg_dlq_replay_req_t request(const replay_run_t *run, int64_t id, bool dry_run)
{
    return (sg_dlq_replay_req_t){
        id, run->by, run->reason, run->force, dry_run, run->internal_topic, run->rerun_from};
}

/* Replays one entry on pg; the caller holds no lock. */
static int replay_one(replay_run_t *run, sg_pg_t *pg, int64_t id)
{
    sg_dlq_replay_req_t req = request(run, id, run->dry_run);
    sg_json_t *r = NULL;
    sg_err_t err;
    int rc = SG_EXIT_OK;

    if (sg_dlq_replay(pg, &req, &r, &err) < 0) {
        pthread_mutex_lock(&run->lock);
        rc = sg_cmd_fail(run->d, "replay failed", &err);
        pthread_mutex_unlock(&run->lock);
        return rc;
    }
    pthread_mutex_lock(&run->lock);
    report(run, id, r);
    fflush(stdout);
    run->done++;
    pthread_mutex_unlock(&run->lock);
    sg_json_destroy(r);
    return SG_EXIT_OK;
}

/* "y" typed at a terminal after the question; false (said why) else. */
static bool ask(dlq_t *d, const char *question)
{
    char line[16];

    fprintf(stderr, "%s [y/N] ", question);
    if (!fgets(line, sizeof(line), stdin) || (line[0] != 'y' && line[0] != 'Y')) {
        sg_cmd_warn(d, "not confirmed: nothing replayed");
        return false;
    }
    return true;
}

/* A bulk replay goes ahead on --yes, or on "y" typed at a terminal.  It
 * never calls an effect that stands under a new key (no --rerun-from in
 * bulk); --dry-run lists what each entry keeps. */
static bool confirmed(dlq_t *d, size_t n)
{
    char question[160];

    if (sg_cli_opt(&d->args, "--yes"))
        return true;
    if (!isatty(STDIN_FILENO)) {
        sg_cmd_warn(d, "a bulk replay of %zu entries needs --yes when not run at a terminal", n);
        return false;
    }
    snprintf(question, sizeof(question),
             "replay %zu dead letters (effects that stand are kept; --dry-run lists them)?", n);
    return ask(d, question);
}

/* --rerun-from may call effects that stand again under new keys: before
 * anything is written the operator is shown which, and what is kept (the
 * plan of a dry run of the same entry, on stderr), and confirms them with
 * --yes or "y" at a terminal.  Returns SG_EXIT_OK to go on, else the exit
 * code after saying why.  An entry the dry run refuses goes on: the
 * replay reports it. */
static int confirm_repeats(replay_run_t *run, int64_t id)
{
    sg_dlq_replay_req_t req = request(run, id, true);
    const sg_json_t *repeats;
    sg_json_t *r = NULL;
    char question[160];
    sg_err_t err;

    if (sg_dlq_replay(run->d->pg, &req, &r, &err) < 0)
        return sg_cmd_fail(run->d, "replay failed", &err);
    repeats = sg_json_member(r, "repeats");
    if (strcmp(res_str(r, "outcome"), "would_replay") != 0 || sg_json_array_size(repeats) == 0) {
        sg_json_destroy(r);
        return SG_EXIT_OK;
    }
    fprintf(stderr, "%s %s: --rerun-from %s calls these effects again, under new keys:\n",
            run->d->cli->prog, run->d->cli->cmd->name, run->rerun_from);
    print_effects(stderr, "will repeat", repeats);
    print_effects(stderr, "kept", sg_json_member(r, "kept"));
    sg_json_destroy(r);
    if (sg_cli_opt(&run->d->args, "--yes"))
        return SG_EXIT_OK;
    if (!isatty(STDIN_FILENO)) {
        sg_cmd_warn(run->d, "repeating the effects above needs --yes when not run at a terminal "
                            "(nothing replayed)");
        return SG_EXIT_REFUSED;
    }
    snprintf(question, sizeof(question), "replay dead letter %lld and repeat these effects?",
             (long long)id);
    return ask(run->d, question) ? SG_EXIT_OK : SG_EXIT_REFUSED;
}

/* Takes the next entry and replays it, until none are left, a stop
 * signal came, or an entry failed (the others in flight still finish).
 * Entry i starts no earlier than its --rate slot. */
static void replay_on(replay_run_t *run, sg_pg_t *pg)
{
    for (;;) {
        size_t i;
        pthread_mutex_lock(&run->lock);
        if (run->rc != SG_EXIT_OK || !sg_run_running || run->next >= run->n) {
            pthread_mutex_unlock(&run->lock);
            return;
        }
        i = run->next++;
        pthread_mutex_unlock(&run->lock);
        if (run->rate > 0)
            sleep_until_ms(run->t0 + (uint64_t)llround((double)i * 1000.0 / run->rate));
        if (!sg_run_running)
            return;
        {
            int rc = replay_one(run, pg, run->ids[i]);
            if (rc) {
                pthread_mutex_lock(&run->lock);
                if (run->rc == SG_EXIT_OK)
                    run->rc = rc;
                pthread_mutex_unlock(&run->lock);
                return;
            }
        }
    }
}

typedef struct replay_thread_s {
    replay_run_t *run;
    sg_pg_t *pg;
    pthread_t tid;
} replay_thread_t;

static void *replay_thread(void *arg)
{
    replay_thread_t *t = arg;

    replay_on(t->run, t->pg);
    return NULL;
}

static int replay_all(replay_run_t *run, const int64_t *ids, size_t n)
{
    size_t nthreads = n < (size_t)run->parallel ? n : (size_t)run->parallel, started = 0;
    replay_thread_t *threads = sg_xcalloc(nthreads, sizeof(*threads));

    sg_run_trap_signals();
    pthread_mutex_init(&run->lock, NULL);
    run->ids = ids;
    run->n = n;
    run->t0 = sg_run_now_ms();
    /* The command's own connection runs in this thread; the others get
     * one each.  One that cannot connect only means fewer at a time. */
    for (size_t i = 1; i < nthreads; i++) {
        sg_err_t err;
        threads[i].run = run;
        if (!(threads[i].pg = dlq_connect(run->d, &err))) {
            sg_cmd_warn(run->d, "replaying with %zu connections: %s", i, err.message);
            break;
        }
        if (pthread_create(&threads[i].tid, NULL, replay_thread, &threads[i]) != 0) {
            sg_pg_destroy(threads[i].pg);
            threads[i].pg = NULL;
            break;
        }
        started = i;
    }
    replay_on(run, run->d->pg);
    for (size_t i = 1; i <= started; i++) {
        pthread_join(threads[i].tid, NULL);
        sg_pg_destroy(threads[i].pg);
    }
    free(threads);
    pthread_mutex_destroy(&run->lock);
    if (run->done < n)
        sg_cmd_warn(run->d, "stopped after %zu of %zu entries; the rest are untouched", run->done,
                    n);
    return run->rc;
}

/* The entries: the IDs given, or those the filter options select
 * (pending ones unless --status says otherwise, oldest first).  *ids
 * malloc'd; an exit code after saying why. */
static int entries(dlq_t *d, long limit, int64_t **ids, size_t *n)
{
    sg_dlq_filter_t f;
    sg_err_t err;
    bool any;
    int bad = dlq_filter(d, &f, "pending", &any);

    *ids = NULL;
    *n = 0;
    if (d->args.npos > 0) {
        if (bad < 0 || any) {
            sg_cmd_warn(d, "give IDs or filter options, not both");
            return SG_EXIT_USAGE;
        }
        if (dlq_ids(d, ids) < 0)
            return SG_EXIT_USAGE;
        *n = d->args.npos < (size_t)limit ? d->args.npos : (size_t)limit;
        return SG_EXIT_OK;
    }
    if (bad < 0)
        return SG_EXIT_USAGE;
    if (!any) {
        sg_cmd_warn(d, "give IDs or at least one filter option (--status pending selects "
                       "every pending entry)");
        return SG_EXIT_USAGE;
    }
    f.limit = limit;
    if (sg_dlq_ids(d->pg, &f, ids, n, &err) < 0)
        return sg_cmd_fail(d, "query failed", &err);
    return SG_EXIT_OK;
}

/* The run's options; an exit code after naming a bad one. */
static int options(dlq_t *d, replay_run_t *run, long *limit)
{
    const char *rate;

    memset(run, 0, sizeof(*run));
    run->d = d;
    run->by = dlq_by(d);
    run->reason = sg_cli_opt(&d->args, "--reason");
    run->dry_run = sg_cli_opt(&d->args, "--dry-run") != NULL;
    run->force = sg_cli_opt(&d->args, "--force") != NULL;
    run->json = d->json;
    /* The step command of a replay is sagad's own: the internal topic (a
     * resubmission goes back to its original topic). */
    run->internal_topic = sg_config_str(d->cli->cfg, "topic.internal");
    run->rerun_from = sg_cli_opt(&d->args, "--rerun-from");
    if (run->rerun_from && (d->args.npos != 1 || !*run->rerun_from)) {
        sg_cmd_warn(d, "--rerun-from STEP replays one dead letter: give its ID and a step index "
                       "or name (steps differ from saga to saga)");
        return SG_EXIT_USAGE;
    }
    if ((rate = sg_cli_opt(&d->args, "--rate")) && parse_rate(rate, &run->rate) < 0) {
        sg_cmd_warn(d, "--rate %s: must be N/s, N/m or N (entries per second), N > 0", rate);
        return SG_EXIT_USAGE;
    }
    if (!run->dry_run && (!run->reason || !*run->reason)) {
        sg_cmd_warn(d, "--reason is required: say why (it is kept in the replays ledger)");
        return SG_EXIT_USAGE;
    }
    if (sg_cmd_opt_long(d, "--limit", 1000000000L, 1000000000L, limit) < 0 ||
        sg_cmd_opt_long(d, "--parallel", PARALLEL_DEFAULT, PARALLEL_MAX, &run->parallel) < 0)
        return SG_EXIT_USAGE;
    return SG_EXIT_OK;
}

int dlq_cmd_replay(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    replay_run_t run;
    int64_t *ids = NULL;
    size_t n = 0;
    long limit;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc || (rc = options(&d, &run, &limit)) || (rc = entries(&d, limit, &ids, &n))) {
        free(ids);
        return sg_cmd_close(&d, rc);
    }
    if (n == 0) {
        fprintf(stderr, "no dead letters match\n");
        rc = SG_EXIT_FAIL;
    } else if ((d.args.npos == 0 || n > 1) && !run.dry_run && !confirmed(&d, n)) {
        rc = SG_EXIT_REFUSED;
    } else if (run.rerun_from && !run.dry_run && (rc = confirm_repeats(&run, ids[0]))) {
        /* said why */
    } else if (!(rc = replay_all(&run, ids, n))) {
        fprintf(stderr, "%s %ld, refused %ld, not found %ld\n",
                run.dry_run ? "would replay" : "replayed", run.dry_run ? run.would : run.replayed,
                run.refused, run.missing);
        if (run.refused)
            rc = SG_EXIT_REFUSED;
        else if (run.replayed + run.would == 0)
            rc = SG_EXIT_FAIL;
    }
    free(ids);
    return sg_cmd_close(&d, rc);
}
