/* dlq-tool edit ID: a new revision of a dead letter's payload, from
 * $EDITOR, --set PATH=VALUE or --file PATH, saved only when it passes the
 * rules the worker applies to a saga.start (sg_submit_validate, with
 * the tool registry of worker.registry).  The original payload is never
 * changed.  An editor's file that was not saved (the edit was refused, or
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
#include "sagad/sg_registry.h"
#include "sagad/sg_submit.h"

static const char load_sql[] =
    "SELECT d.step_idx, d.status, sagad_utf8(p.payload), p.revision FROM dead_letters d "
    "CROSS JOIN LATERAL (SELECT * FROM (SELECT v.revision, v.payload FROM dead_letter_revisions v "
    "  WHERE v.dead_letter_id = d.id UNION ALL SELECT 0, d.payload) x "
    "  ORDER BY revision DESC LIMIT 1) p WHERE d.id = $1::bigint";

/* Through the function (0013): an operator role writes the ledger only
 * there, and the revision records its session_user.  No row: no such
 * dead letter. */
static const char save_sql[] =
    "SELECT r FROM sagad_dlq_edit($1::bigint, $2, $3, $4) r WHERE r IS NOT NULL";

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
        dlq_warn(d, "the payload is not JSON, so --set cannot apply: edit it with $EDITOR");
        return NULL;
    }
    for (size_t i = 0; i < nsets; i++) {
        const char *eq = strchr(sets[i], '=');
        char path[256];

        if (!eq || eq == sets[i]) {
            dlq_warn(d, "--set %s: must be PATH=VALUE, e.g. steps[1].tool=inventory.reserve",
                     sets[i]);
            sg_json_destroy(doc);
            return NULL;
        }
        snprintf(path, sizeof(path), "%.*s", (int)(eq - sets[i]), sets[i]);
        if (set_path(doc, path, eq + 1, why, sizeof(why)) < 0) {
            dlq_warn(d, "--set %s", why);
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
        dlq_warn(d, "cannot make a temporary file in %s (TMPDIR): %s", tmp, strerror(errno));
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
        dlq_warn(d, "the editor failed: nothing saved");
    else if (!(out = trim_end(read_file(path))))
        dlq_warn(d, "cannot read the edited file %s: %s", path, strerror(errno));
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
        dlq_warn(d, "cannot read %s (--file): %s", path, strerror(errno));
    return text;
}

static void print_problem(void *opaque, const char *path, const char *rule)
{
    (void)opaque;
    fprintf(stderr, "  %s: %s\n", path, rule);
}

/* The worker's rules: decodable, a saga.start, valid against the
 * contract and the registry.  0 when valid; an exit code after listing
 * every problem. */
static int validate(dlq_t *d, const sg_registry_t *reg, const char *text)
{
    const sg_config_t *cfg = d->cli->cfg;
    sg_json_limits_t lim = {(size_t)sg_config_int(cfg, "limits.max_message_bytes"),
                            (int)sg_config_int(cfg, "limits.max_json_depth"),
                            (long)sg_config_int(cfg, "limits.max_json_nodes")};
    sg_decoded_t dec;
    int problems;

    sg_submit_decode(text, strlen(text), &lim, &dec);
    if (dec.type == SG_CMD_POISON) {
        dlq_warn(d, "refused, nothing saved: the payload cannot be decoded [%s]", dec.err.code);
        fprintf(stderr, "  %s\n", dec.err.message);
        sg_json_destroy(dec.doc);
        return SG_EXIT_REFUSED;
    }
    if (dec.type != SG_CMD_START) {
        dlq_warn(d, "refused, nothing saved: $.type: only a saga.start is edited");
        sg_json_destroy(dec.doc);
        return SG_EXIT_REFUSED;
    }
    problems = sg_submit_validate(dec.doc, reg, print_problem, NULL);
    if (problems > 0)
        dlq_warn(d, "refused, nothing saved: %d problem%s above (JSON path: rule)", problems,
                 problems == 1 ? "" : "s");
    sg_json_destroy(dec.doc);
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

static int edit(dlq_t *d, const char *id)
{
    const char *const *sets;
    size_t nsets = sg_cli_opt_all(&d->args, "--set", &sets);
    const char *file = sg_cli_opt(&d->args, "--file");
    sg_pg_res_t *res;
    char *text = NULL, draft[512] = "";
    sg_registry_t *reg = NULL;
    sg_err_t err;
    int rc;

    if (file && nsets) {
        dlq_warn(d, "--file and --set: give one (the payload comes from a file, or is changed "
                    "member by member)");
        return SG_EXIT_USAGE;
    }
    if ((rc = dlq_query(d, load_sql, 1, &id, &res)))
        return rc;
    if (sg_pg_res_rows(res) == 0) {
        dlq_warn(d, "no dead letter %s", id);
        rc = SG_EXIT_FAIL;
    } else if (sg_pg_res_get(res, 0, 0)) {
        dlq_warn(d,
                 "dead letter %s is a step's (step %s): its command is rebuilt by replay, "
                 "so there is no payload to edit; fix the tool or registry and replay",
                 id, sg_pg_res_get(res, 0, 0));
        rc = SG_EXIT_REFUSED;
    } else if (!(reg = sg_registry_load(sg_config_str(d->cli->cfg, "worker.registry"), d->cli->cfg,
                                        NULL, &err))) {
        /* Read before the editor opens: a registry that cannot be read
         * must not cost the operator an edit that then cannot be checked. */
        dlq_warn(d, "cannot check the tool registry: %s (worker.registry)", err.message);
        rc = SG_EXIT_USAGE;
    } else {
        const char *cur = sg_pg_res_get(res, 0, 2);
        text = nsets  ? apply_sets(d, cur, sets, nsets)
               : file ? from_file(d, file)
                      : run_editor(d, cur, draft, sizeof(draft));
        if (!text)
            rc = nsets || file ? SG_EXIT_USAGE : SG_EXIT_FAIL;
        else if (unchanged(cur, text))
            fprintf(stderr, "no change: nothing saved\n");
        else if (!(rc = validate(d, reg, text))) {
            const char *params[] = {id, text, dlq_operator(d), sg_cli_opt(&d->args, "--reason")};
            sg_pg_res_t *saved;
            if (!(rc = dlq_query(d, save_sql, 4, params, &saved))) {
                printf("dead letter %s: saved revision %s (replay uses it)\n", id,
                       sg_pg_res_get(saved, 0, 0));
                printf("%s\n", text);
                sg_pg_res_destroy(saved);
            }
        }
    }
    if (draft[0] && rc != SG_EXIT_OK)
        fprintf(stderr,
                "your edit is kept in %s: fix it there, then save it with\n"
                "  dlq-tool edit %s --file %s\n",
                draft, id, draft);
    else if (draft[0])
        unlink(draft);
    free(text);
    sg_pg_res_destroy(res);
    sg_registry_destroy(reg);
    return rc;
}

int dlq_cmd_edit(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    const char *id;
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return dlq_close(&d, rc);
    if (!(id = dlq_one_id(&d)))
        return dlq_close(&d, SG_EXIT_USAGE);
    return dlq_close(&d, edit(&d, id));
}
