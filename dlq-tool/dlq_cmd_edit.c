/* dlq-tool edit ID: a new revision of a dead letter's payload, from
 * $EDITOR, --set PATH=VALUE or --file PATH, saved only when it passes the
 * rules the worker applies to a saga.start (sg_submit_validate, with
 * the tool registry of worker.registry: sg_check_submission, sagactl
 * validate's verdict).  The original payload is never changed: the load
 * and the save are lib/ops's (sg_dlq_payload, sg_dlq_edit).  --json: one
 * object, {id, outcome: saved | unchanged | refused, revision, payload,
 * code, problems}.  An editor's file that was not saved (the edit was refused, or
 * the save failed) is kept, and its path printed: the operator's work is
 * not thrown away, and --file takes it up again. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dlq.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_check.h"
#include "sagad/sg_registry.h"

/* One step of a --set path: a member name or an array index. */
static const char *path_token(const char *p, char *name, size_t name_size, long *idx)
{
    size_t n = 0;

    *idx = -1;
    if (*p == '[') {
        char *end;
        *idx = strtol(p + 1, &end, 10);
        if (end == p + 1 || *end != ']' || *idx < 0)
            return NULL;
        return end + 1;
    }
    while (*p && *p != '.' && *p != '[' && n + 1 < name_size)
        name[n++] = *p++;
    name[n] = '\0';
    return n ? p : NULL;
}

/* Sets doc at path (a.b[2].c, optionally starting with "$.") to value
 * (JSON, or else taken as a string).  Missing objects on the way are
 * made.  -1 with a message in why. */
static int set_path(sg_json_t *doc, const char *path, const char *value, char *why, size_t wsize)
{
    sg_json_t *cur = doc, *val;
    const char *p = path;
    char name[128];
    long idx;

    if (p[0] == '$')
        p += p[1] == '.' ? 2 : 1;
    if (!(val = sg_json_parse(value, strlen(value), NULL, NULL)))
        val = sg_json_new_str(value); /* not JSON: the text itself, as a string */
    for (;;) {
        const char *next = path_token(p, name, sizeof(name), &idx);
        bool last;

        if (!next) {
            snprintf(why, wsize, "%s: bad path at \"%s\" (use a.b[2].c)", path, p);
            goto fail;
        }
        if (*next == '.')
            next++;
        last = *next == '\0';
        if (idx < 0 && !sg_json_is_object(cur)) {
            snprintf(why, wsize, "%s: \"%s\" is not a member of an object", path, name);
            goto fail;
        }
        if (idx >= 0 && !sg_json_is_array(cur)) {
            snprintf(why, wsize, "%s: [%ld] indexes something that is not an array", path, idx);
            goto fail;
        }
        if (last) {
            if (idx < 0) {
                sg_json_set(cur, name, val);
                return 0;
            }
            if (sg_json_set_at(cur, (size_t)idx, val) == 0)
                return 0;
            snprintf(why, wsize, "%s: index %ld is past the end of the array", path, idx);
            goto fail;
        }
        {
            sg_json_t *child = idx >= 0 ? (sg_json_t *)sg_json_array_get(cur, (size_t)idx)
                                        : (sg_json_t *)sg_json_member(cur, name);
            if (!child && idx < 0) {
                child = sg_json_new_object();
                sg_json_add_node(cur, name, child);
            } else if (!child) {
                snprintf(why, wsize, "%s: index %ld is past the end of the array", path, idx);
                goto fail;
            }
            cur = child;
        }
        p = next;
    }
fail:
    sg_json_destroy(val);
    return -1;
}

/* Applies every --set; the new payload text (malloc'd) or NULL. */
static char *apply_sets(dlq_t *d, const char *text, const char *const *sets, size_t nsets)
{
    sg_json_t *doc = text ? sg_json_parse(text, strlen(text), NULL, NULL) : NULL;
    char why[512], *out;

    if (!doc) {
        sg_cmd_warn(d, "the payload is not JSON, so --set cannot apply: edit it with $EDITOR");
        return NULL;
    }
    for (size_t i = 0; i < nsets; i++) {
        const char *eq = strchr(sets[i], '=');
        char path[256];

        if (!eq || eq == sets[i]) {
            sg_cmd_warn(d, "--set %s: must be PATH=VALUE, e.g. steps[1].tool=inventory.reserve",
                        sets[i]);
            sg_json_destroy(doc);
            return NULL;
        }
        snprintf(path, sizeof(path), "%.*s", (int)(eq - sets[i]), sets[i]);
        if (set_path(doc, path, eq + 1, why, sizeof(why)) < 0) {
            sg_cmd_warn(d, "--set %s", why);
            sg_json_destroy(doc);
            return NULL;
        }
    }
    out = sg_json_print(doc);
    sg_json_destroy(doc);
    return out;
}

static char *read_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (!fp)
        return NULL;
    do {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = sg_xrealloc(buf, cap);
        }
        n = fread(buf + len, 1, cap - len - 1, fp);
        len += n;
    } while (n > 0);
    fclose(fp);
    buf[len] = '\0';
    return buf;
}

/* Trailing newlines and spaces are not part of a payload. */
static char *trim_end(char *text)
{
    for (size_t n = text ? strlen(text) : 0; n > 0 && isspace((unsigned char)text[n - 1]);)
        text[--n] = '\0';
    return text;
}

/* Opens the payload (pretty when JSON) in $VISUAL / $EDITOR / vi, in a
 * file under $TMPDIR (/tmp without it); the edited text, its file left in
 * path for the caller to remove or keep, or NULL (no file left). */
static char *run_editor(dlq_t *d, const char *text, char *path, size_t path_size)
{
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int fd, status;
    sg_json_t *doc = text ? sg_json_parse(text, strlen(text), NULL, NULL) : NULL;
    char *pretty = doc ? sg_json_print_pretty(doc) : NULL, *out = NULL;
    FILE *fp;
    pid_t pid;

    sg_json_destroy(doc);
    snprintf(path, path_size, "%s/dlq-edit-XXXXXX", tmp);
    fd = mkstemp(path);
    if (fd < 0 || !(fp = fdopen(fd, "w"))) {
        sg_cmd_warn(d, "cannot make a temporary file in %s (TMPDIR): %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        path[0] = '\0';
        free(pretty);
        return NULL;
    }
    fprintf(fp, "%s\n", pretty ? pretty : text ? text : "");
    fclose(fp);
    free(pretty);
    if (!getenv("EDITOR") && !getenv("VISUAL"))
        setenv("EDITOR", "vi", 0);
    if ((pid = fork()) == 0) {
        execl("/bin/sh", "sh", "-c", "${VISUAL:-$EDITOR} \"$1\"", "sh", path, (char *)NULL);
        _exit(127);
    }
    /* An editor that exits non-zero (vi's :cq) abandons the edit. */
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        sg_cmd_warn(d, "the editor failed: nothing saved");
    else if (!(out = trim_end(read_file(path))))
        sg_cmd_warn(d, "cannot read the edited file %s: %s", path, strerror(errno));
    if (!out) {
        unlink(path);
        path[0] = '\0';
    }
    return out;
}

/* The payload of --file PATH, or NULL after saying why. */
static char *from_file(dlq_t *d, const char *path)
{
    char *text = trim_end(read_file(path));

    if (!text)
        sg_cmd_warn(d, "cannot read %s (--file): %s", path, strerror(errno));
    return text;
}

/* The outcome of an edit as one JSON object (--json); payload, when
 * given, is the saved text (a JSON object, checked). */
static void print_outcome(int64_t id, const char *outcome, const sg_json_t *saved,
                          const char *payload, const sg_problems_t *p)
{
    sg_json_t *o = sg_json_new_object();

    sg_json_add_int(o, "id", id);
    sg_json_add_str(o, "outcome", outcome);
    if (saved)
        sg_json_add_node(o, "revision", sg_json_dup(sg_json_member(saved, "revision")));
    if (payload)
        sg_json_add_raw(o, "payload", payload);
    if (p) {
        sg_json_add_str(o, "code", p->code);
        sg_json_add_node(o, "problems", sg_problems_json(p->v, p->n));
    }
    sg_cmd_print_json(o);
    sg_json_destroy(o);
}

/* The worker's verdict on text (sg_check_submission, as sagactl validate
 * gives it): 0 when valid; an exit code after listing every problem. */
static int validate(dlq_t *d, int64_t id, const sg_registry_t *reg, const char *text)
{
    sg_json_limits_t lim;
    sg_problems_t p;
    int problems;

    sg_check_limits(d->cli->cfg, &lim);
    problems = sg_check_submission(text, strlen(text), &lim, reg, &p);
    if (problems > 0) {
        if (d->json)
            print_outcome(id, "refused", NULL, NULL, &p);
        else
            for (size_t i = 0; i < p.n; i++)
                fprintf(stderr, "  %s: %s\n", p.v[i].path, p.v[i].rule);
        sg_cmd_warn(d, "refused, nothing saved: %d problem%s %s (JSON path: rule)", problems,
                    problems == 1 ? "" : "s", d->json ? "in the JSON" : "above");
    }
    sg_problems_free(&p);
    return problems > 0 ? SG_EXIT_REFUSED : SG_EXIT_OK;
}

/* True when text says what cur says: the same bytes, or the same JSON value
 * (the editor shows the payload pretty-printed and --set prints it
 * compact, so the text alone differs even when nothing was changed). */
static bool unchanged(const char *cur, const char *text)
{
    sg_json_t *a, *b;
    bool same;

    if (!cur)
        return false;
    if (strcmp(cur, text) == 0)
        return true;
    a = sg_json_parse(cur, strlen(cur), NULL, NULL);
    b = a ? sg_json_parse(text, strlen(text), NULL, NULL) : NULL;
    same = sg_json_equal(a, b);
    sg_json_destroy(a);
    sg_json_destroy(b);
    return same;
}

/* Saves text as the entry's next revision and says so. */
static int save(dlq_t *d, int64_t id, const char *text)
{
    sg_json_t *saved = NULL;
    sg_err_t err;
    int rc = SG_EXIT_OK;

    if (sg_dlq_edit(d->pg, id, text, dlq_by(d), sg_cli_opt(&d->args, "--reason"), &saved, &err) <
        0) {
        rc = sg_cmd_fail(d, "save failed", &err);
    } else if (!saved) {
        sg_cmd_warn(d, "no dead letter %lld", (long long)id); /* gone meanwhile */
        rc = SG_EXIT_FAIL;
    } else if (d->json) {
        print_outcome(id, "saved", saved, text, NULL);
    } else {
        char *rev = sg_json_print(sg_json_member(saved, "revision"));
        printf("dead letter %lld: saved revision %s (replay uses it)\n%s\n", (long long)id, rev,
               text);
        free(rev);
    }
    sg_json_destroy(saved);
    return rc;
}

/* The edited text: from --set, --file or the editor (draft: its file). */
static char *edited(dlq_t *d, const char *cur, char *draft, size_t draft_size)
{
    const char *const *sets;
    size_t nsets = sg_cli_opt_all(&d->args, "--set", &sets);
    const char *file = sg_cli_opt(&d->args, "--file");

    return nsets  ? apply_sets(d, cur, sets, nsets)
           : file ? from_file(d, file)
                  : run_editor(d, cur, draft, draft_size);
}

static int edit(dlq_t *d, int64_t id)
{
    const char *const *sets;
    size_t nsets = sg_cli_opt_all(&d->args, "--set", &sets);
    const char *file = sg_cli_opt(&d->args, "--file"), *cur;
    sg_json_t *entry = NULL;
    char *text = NULL, draft[512] = "";
    sg_registry_t *reg = NULL;
    sg_err_t err;
    int rc = SG_EXIT_OK;

    if (file && nsets) {
        sg_cmd_warn(d, "--file and --set: give one (the payload comes from a file, or is "
                       "changed member by member)");
        return SG_EXIT_USAGE;
    }
    if (sg_dlq_payload(d->pg, id, &entry, &err) < 0)
        return sg_cmd_fail(d, "query failed", &err);
    cur = sg_json_string(sg_json_member(entry, "payload"));
    if (!entry) {
        sg_cmd_warn(d, "no dead letter %lld", (long long)id);
        rc = SG_EXIT_FAIL;
    } else if (!sg_json_is_null(sg_json_member(entry, "step"))) {
        char *step = sg_json_print(sg_json_member(entry, "step"));
        sg_cmd_warn(d,
                    "dead letter %lld is a step's (step %s): its command is rebuilt by replay, "
                    "so there is no payload to edit; fix the tool or registry and replay",
                    (long long)id, step);
        free(step);
        rc = SG_EXIT_REFUSED;
    } else if (!(reg = sg_registry_load(sg_config_str(d->cli->cfg, "worker.registry"), d->cli->cfg,
                                        NULL, &err))) {
        /* Read before the editor opens: a registry that cannot be read
         * must not cost the operator an edit that then cannot be checked. */
        sg_cmd_warn(d, "cannot check the tool registry: %s (worker.registry)", err.message);
        rc = SG_EXIT_USAGE;
    } else if (!(text = edited(d, cur, draft, sizeof(draft)))) {
        rc = nsets || file ? SG_EXIT_USAGE : SG_EXIT_FAIL;
    } else if (unchanged(cur, text)) {
        fprintf(stderr, "no change: nothing saved\n");
        if (d->json)
            print_outcome(id, "unchanged", NULL, NULL, NULL);
    } else if (!(rc = validate(d, id, reg, text))) {
        rc = save(d, id, text);
    }
    if (draft[0] && rc != SG_EXIT_OK)
        fprintf(stderr,
                "your edit is kept in %s: fix it there, then save it with\n"
                "  dlq-tool edit %lld --file %s\n",
                draft, (long long)id, draft);
    else if (draft[0])
        unlink(draft);
    free(text);
    sg_json_destroy(entry);
    sg_registry_destroy(reg);
    return rc;
}

int dlq_cmd_edit(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    int64_t id;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return sg_cmd_close(&d, rc);
    if (dlq_one_id(&d, &id) < 0)
        return sg_cmd_close(&d, SG_EXIT_USAGE);
    return sg_cmd_close(&d, edit(&d, id));
}
