/* Validation of a saga.start's definition (sagad/sg_submit.h): its steps
 * and parallel groups, names, tools and their arguments against the
 * registry, references between steps (sagad/sg_ref.h), approvals, the
 * saga's deadline and budget; each problem reported with its JSON path
 * and the rule it breaks.  Also the warnings and the definition as it
 * is stored. */
#include "sagad/sg_ref.h"
#include "sagad/sg_submit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_schema.h"
#include "sagad/sg_text.h"

/* ---- saga.start validation --------------------------------------------- */

typedef struct problems_s {
    sg_problem_fn fn;
    void *opaque;
    int n;
} problems_t;

static void problem(problems_t *p, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void problem(problems_t *p, const char *path, const char *fmt, ...)
{
    char rule[300];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(rule, sizeof(rule), fmt, ap);
    va_end(ap);
    p->n++;
    if (p->fn)
        p->fn(p->opaque, path, rule);
}

static void schema_problem(void *opaque, const char *path, const char *rule)
{
    problem(opaque, path, "%s", rule);
}

int sg_submit_validate_args(const sg_tool_t *tool, const sg_json_t *args, const char *base,
                            sg_problem_fn fn, void *opaque)
{
    problems_t p = {fn, opaque, 0};

    if (args && !sg_json_is_object(args)) {
        problem(&p, base, "type: expected object");
        return p.n;
    }
    if (tool->args_schema) {
        sg_json_t *empty = args ? NULL : sg_json_new_object();
        int found =
            sg_schema_validate(tool->args_schema, args ? args : empty, base, schema_problem, &p);
        if (found > p.n) /* past the report cap */
            p.n = found;
        sg_json_destroy(empty);
    }
    return p.n;
}

/* A string member: checks presence, type and length; NULL when wrong. */
static const char *str_member(const sg_json_t *obj, const char *base, const char *key,
                              bool required, size_t maxlen, problems_t *p)
{
    const sg_json_t *node = sg_json_member(obj, key);
    char path[256];
    const char *s;

    sg_json_path_key(path, sizeof(path), base, key);
    if (!node) {
        if (required)
            problem(p, path, "required");
        return NULL;
    }
    s = sg_json_string(node);
    if (!s) {
        problem(p, path, "type: expected string, got %s", sg_json_type_name(node));
        return NULL;
    }
    if (sg_utf8_chars(s) == 0 || sg_utf8_chars(s) > maxlen) {
        problem(p, path, "length: 1 to %zu characters", maxlen);
        return NULL;
    }
    return s;
}

static bool only_keys(const sg_json_t *obj, const char *base, const char *const *known,
                      problems_t *p)
{
    bool ok = true;

    for (const sg_json_t *m = sg_json_first(obj); m; m = sg_json_next(m)) {
        size_t i;
        for (i = 0; known[i] && strcmp(known[i], sg_json_key(m)) != 0; i++)
            ;
        if (!known[i]) {
            char path[300];
            sg_json_path_key(path, sizeof(path), base, sg_json_key(m));
            problem(p, path, "additionalProperties: not allowed");
            ok = false;
        }
    }
    return ok;
}

/* RFC 3339 date-time: 2026-11-21T10:00:00Z, fraction and offset allowed. */
static bool datetime_ok(const char *s)
{
    int y, mo, d, h, mi, sec, n = 0;

    if (strlen(s) < 20 || (s[10] != 'T' && s[10] != 't'))
        return false;
    if (sscanf(s, "%4d-%2d-%2d%*1[Tt]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
        n != 19)
        return false;
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || sec > 60)
        return false;
    if (mo == 2 && d == 29 && !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))
        return false;
    if (sec == 60 && !(h == 23 && mi == 59)) /* leap seconds end a UTC day */
        return false;
    s += n;
    if (*s == '.') {
        if (!(s[1] >= '0' && s[1] <= '9'))
            return false;
        for (s++; *s >= '0' && *s <= '9'; s++)
            ;
    }
    if ((*s == 'Z' || *s == 'z') && s[1] == '\0')
        return true;
    return (*s == '+' || *s == '-') && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9' &&
           s[3] == ':' && s[4] >= '0' && s[4] <= '9' && s[5] >= '0' && s[5] <= '9' && s[6] == '\0';
}

static void check_call(const sg_json_t *obj, const char *base, const sg_registry_t *reg,
                       const sg_tool_t **tool_out, problems_t *p)
{
    const char *tool_name = str_member(obj, base, "tool", true, 64, p);
    const sg_json_t *args = sg_json_member(obj, "args");
    const sg_tool_t *tool = NULL;
    char path[300];

    *tool_out = NULL;
    if (tool_name) {
        tool = sg_registry_find(reg, tool_name);
        sg_json_path_key(path, sizeof(path), base, "tool");
        if (!tool)
            problem(p, path, "unknown tool \"%s\" (not in the tool registry)", tool_name);
    }
    sg_json_path_key(path, sizeof(path), base, "args");
    if (args && !sg_json_is_object(args))
        problem(p, path, "type: expected object, got %s", sg_json_type_name(args));
    else if (tool && !sg_ref_any(args))
        /* With references, the args are checked when the worker has
         * resolved them, before the call (tool.args.invalid). */
        sg_submit_validate_args(tool, args, path, p->fn ? schema_problem : NULL, p);
    *tool_out = tool;
}

/* ---- the saga's names --------------------------------------------------- */

/* One name of the saga: a step's, a group's or a group member's.  They
 * share one namespace: a reference names any of them the same way. */
typedef struct entry_s {
    const char *name;
    int step;   /* its element of $.steps */
    int member; /* its index in the group's parallel (-1: a step or a group) */
    bool group; /* a group's own name */
} entry_t;

/* Every element names itself, a group also each member: at most
 * SG_MAX_STEPS elements and SG_MAX_STEPS calls. */
typedef struct names_s {
    entry_t e[2 * SG_MAX_STEPS];
    size_t n;
} names_t;

static void entry_path(char *out, size_t size, const entry_t *e)
{
    if (e->member < 0)
        snprintf(out, size, "$.steps[%d]", e->step);
    else
        snprintf(out, size, "$.steps[%d].parallel[%d]", e->step, e->member);
}

static const entry_t *find_name(const names_t *nt, const char *name)
{
    for (size_t k = 0; k < nt->n; k++)
        if (strcmp(nt->e[k].name, name) == 0)
            return &nt->e[k];
    return NULL;
}

/* Adds a valid name (base: the path of the object that holds it), or
 * reports that an earlier step, group or member has it already. */
static void add_name(names_t *nt, const entry_t *e, const char *base, problems_t *p)
{
    const entry_t *other;
    char path[300], at[64];

    if (!e->name)
        return;
    if ((other = find_name(nt, e->name))) {
        sg_json_path_key(path, sizeof(path), base, "name");
        entry_path(at, sizeof(at), other);
        problem(p, path,
                "unique: step name \"%s\" is used by %s too (steps, groups and group members "
                "share one namespace)",
                e->name, at);
        return;
    }
    if (nt->n < sizeof(nt->e) / sizeof(nt->e[0]))
        nt->e[nt->n++] = *e;
}

/* ---- references (sagad/sg_ref.h) --------------------------------------- */

/* Which names the references under one node may use: every name of the
 * elements before `before`, and with own, the step or member (of group)
 * whose compensation holds them. */
typedef struct ref_scope_s {
    const names_t *nt;
    int before;
    int group;  /* the args are a member's of this group (-1: a step's) */
    int member; /* that member (-1: a step's) */
    bool own;
    problems_t *p;
} ref_scope_t;

static bool ref_visible(const entry_t *e, const ref_scope_t *sc)
{
    return e->step < sc->before ||
           (sc->own && e->step == sc->before && e->member == sc->member && !e->group);
}

/* Reports what is wrong with a reference (pointer ptr, at path at) to e,
 * a name that exists: one the scope cannot see, or a group's key. */
static void check_ref_name(const entry_t *e, const char *ptr, const char *at, const ref_scope_t *sc)
{
    char where[64], key[100];

    entry_path(where, sizeof(where), e);
    if (sc->group >= 0 && e->step == sc->group && e->member >= 0 && e->member != sc->member) {
        problem(sc->p, at,
                "reference: \"%s\" (%s) runs at the same time, in the same group; a group "
                "member's reference names a step or group before its group",
                e->name, where);
        return;
    }
    if (!ref_visible(e, sc)) {
        problem(sc->p, at,
                "reference: %s \"%s\" (%s) has not run yet here; a reference names an earlier "
                "step%s",
                e->group ? "group" : "step", e->name, where,
                sc->own ? " or the step its compensation undoes" : "");
        return;
    }
    /* Names hold no escapes, so the pointer is exactly this. */
    snprintf(key, sizeof(key), "/steps/%s/key", e->name);
    if (e->group && strcmp(ptr, key) == 0)
        problem(sc->p, at,
                "reference: a group has no key; name a member (\"%s\" is the group %s, whose "
                "result is its manifest)",
                e->name, where);
}

static void check_ref(const sg_json_t *ref, const char *path, const ref_scope_t *sc)
{
    const sg_json_t *ptr = sg_json_member(ref, SG_REF_MEMBER);
    const char *rule, *step;
    const entry_t *e;
    char at[300], name[80];

    if (sg_json_first(ref) != ptr || sg_json_next(ptr)) {
        problem(sc->p, path,
                "additionalProperties: a reference {\"$from\": POINTER} has no other member");
        return;
    }
    sg_json_path_key(at, sizeof(at), path, SG_REF_MEMBER);
    if (!sg_json_string(ptr)) {
        problem(sc->p, at, "type: expected string (a JSON Pointer), got %s",
                sg_json_type_name(ptr));
        return;
    }
    if ((rule = sg_ref_pointer_check(sg_json_string(ptr), name, sizeof(name), &step))) {
        problem(sc->p, at, "%s", rule);
        return;
    }
    if (!step)
        return;
    if (!(e = find_name(sc->nt, step)))
        problem(sc->p, at, "reference: no step of this saga is named \"%s\"", step);
    else
        check_ref_name(e, sg_json_string(ptr), at, sc);
}

static void check_refs(const sg_json_t *node, const char *path, const ref_scope_t *sc)
{
    char sub[300];
    size_t i = 0;

    if (sg_ref_is(node)) {
        check_ref(node, path, sc);
        return;
    }
    if (!sg_json_is_object(node) && !sg_json_is_array(node))
        return;
    for (const sg_json_t *m = sg_json_first(node); m; m = sg_json_next(m), i++) {
        if (sg_json_is_object(node))
            sg_json_path_key(sub, sizeof(sub), path, sg_json_key(m));
        else
            sg_json_path_idx(sub, sizeof(sub), path, i);
        check_refs(m, sub, sc);
    }
}

/* The references of one call step (base: its path): in its args and in
 * its compensation's args, which may also name the step itself. */
static void check_call_refs(const sg_json_t *st, const char *base, ref_scope_t *sc)
{
    const sg_json_t *comp = sg_json_member(st, "compensate"), *node;
    char path[300];

    sc->own = false;
    if ((node = sg_json_member(st, "args"))) {
        sg_json_path_key(path, sizeof(path), base, "args");
        check_refs(node, path, sc);
    }
    if (sg_json_is_object(comp) && (node = sg_json_member(comp, "args"))) {
        sc->own = true;
        snprintf(path, sizeof(path), "%s.compensate.args", base);
        check_refs(node, path, sc);
    }
}

/* Every reference of the saga: in a step's args (the elements before it:
 * steps, groups and their members), in a group member's args (the same
 * before its group, not its siblings, which run at the same time), in a
 * compensation's args (that and the step it undoes), in the output (any
 * name). */
static void check_all_refs(const sg_json_t *doc, const sg_json_t *steps, const names_t *nt,
                           problems_t *p)
{
    ref_scope_t sc = {nt, 0, -1, -1, false, p};
    const size_t nsteps = sg_json_array_size(steps);
    const sg_json_t *node;
    char base[64];

    for (size_t i = 0; i < nsteps; i++) {
        const sg_json_t *st = sg_json_array_get(steps, i), *members;
        sc.before = (int)i;
        sg_json_path_idx(base, sizeof(base), "$.steps", i);
        if (!sg_json_is_object(st))
            continue;
        if (!sg_submit_is_group(st)) {
            sc.group = sc.member = -1;
            check_call_refs(st, base, &sc);
            continue;
        }
        members = sg_json_member(st, "parallel");
        sc.group = (int)i;
        for (size_t j = 0; sg_json_is_array(members) && j < sg_json_array_size(members); j++) {
            const sg_json_t *m = sg_json_array_get(members, j);
            char mbase[96];
            if (!sg_json_is_object(m) || sg_submit_is_group(m))
                continue;
            snprintf(mbase, sizeof(mbase), "%s.parallel[%zu]", base, j);
            sc.member = (int)j;
            check_call_refs(m, mbase, &sc);
        }
    }
    if ((node = sg_json_member(doc, "output"))) {
        sc.before = (int)nsteps;
        sc.group = sc.member = -1;
        sc.own = false;
        check_refs(node, "$.output", &sc);
    }
}

/* A step's approval gate: {"timeout_ms": 1000..604800000, "reason":
 * 1..1024 characters}, both optional. */
static void check_approval(const sg_json_t *st, const char *base, problems_t *p)
{
    static const char *const keys[] = {"timeout_ms", "reason", NULL};
    const sg_json_t *ap = sg_json_member(st, "approval"), *node;
    char path[128];

    if (!ap)
        return;
    sg_json_path_key(path, sizeof(path), base, "approval");
    if (!sg_json_is_object(ap)) {
        problem(p, path, "type: expected object, got %s", sg_json_type_name(ap));
        return;
    }
    only_keys(ap, path, keys, p);
    if ((node = sg_json_member(ap, "timeout_ms"))) {
        char tpath[160];
        int64_t v;
        snprintf(tpath, sizeof(tpath), "%s.timeout_ms", path);
        if (sg_json_get_int(ap, path, "timeout_ms", true, &v, NULL) < 0)
            problem(p, tpath, "type: expected integer");
        else if (v < SG_APPROVAL_TIMEOUT_MIN || v > SG_APPROVAL_TIMEOUT_MAX)
            problem(p, tpath, "range: %d to %d", SG_APPROVAL_TIMEOUT_MIN, SG_APPROVAL_TIMEOUT_MAX);
    }
    str_member(ap, path, "reason", false, SG_CONTROL_REASON_MAX, p);
}

/* ---- steps and groups ---------------------------------------------------- */

int sg_submit_policy_parse(const char *s, sg_group_policy_t *out)
{
    static const char *const names[] = {"all_or_nothing", "best_effort", "fail_fast"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (sg_group_policy_t)i;
            return 0;
        }
    return -1;
}

bool sg_submit_is_group(const sg_json_t *step)
{
    return sg_json_is_object(step) && sg_json_member(step, "parallel") != NULL;
}

/* The effects of one element of $.steps: a group's are its members'. */
typedef struct elem_s {
    bool reversible, irreversible;
} elem_t;

/* A step's or group's name: valid, or NULL with the problem reported. */
static const char *name_member(const sg_json_t *obj, const char *base, problems_t *p)
{
    const char *name = str_member(obj, base, "name", true, 64, p);
    char path[300];

    if (name && !sg_name_ok(name)) {
        sg_json_path_key(path, sizeof(path), base, "name");
        problem(p, path, "pattern: 1-64 characters of A-Z a-z 0-9 . _ -");
        return NULL;
    }
    return name;
}

/* One call step (a step of the saga or a group's member, at base): its
 * keys, call, approval and compensation.  Returns its valid name or NULL;
 * *effect is its tool's (read when the tool is unknown). */
static const char *check_step(const sg_json_t *st, const char *base, const sg_registry_t *reg,
                              sg_effect_t *effect, problems_t *p)
{
    static const char *const step_keys[] = {"name", "tool", "args", "compensate", "approval", NULL};
    static const char *const comp_keys[] = {"tool", "args", NULL};
    const sg_json_t *comp = sg_json_member(st, "compensate");
    const sg_tool_t *tool = NULL, *ctool = NULL;
    const char *name;
    char path[300];

    only_keys(st, base, step_keys, p);
    name = name_member(st, base, p);
    check_call(st, base, reg, &tool, p);
    check_approval(st, base, p);
    sg_json_path_key(path, sizeof(path), base, "compensate");
    if (comp && !sg_json_is_null(comp)) {
        if (!sg_json_is_object(comp)) {
            problem(p, path, "type: expected object or null, got %s", sg_json_type_name(comp));
        } else {
            only_keys(comp, path, comp_keys, p);
            check_call(comp, path, reg, &ctool, p);
            /* A compensation runs when the saga fails or is cancelled, with
             * no approval gate: a gated tool named here would run without
             * the person its registry entry requires (issue 36 item 3). */
            if (ctool && ctool->approval_required) {
                char tpath[320];
                sg_json_path_key(tpath, sizeof(tpath), path, "tool");
                problem(p, tpath,
                        "approval: tool \"%s\" requires a person's approval (registry "
                        "\"approval\": \"required\"), and a compensation runs without one: it "
                        "cannot be a compensation",
                        ctool->name);
            }
        }
    }
    *effect = tool ? tool->effect : SG_EFFECT_READ;
    if (tool && tool->effect == SG_EFFECT_REVERSIBLE && (!comp || sg_json_is_null(comp)) &&
        !tool->compensation)
        problem(p, path,
                "required: tool \"%s\" is reversible, so the step must name its compensation",
                tool->name);
    return name;
}

/* A group member at base, the j-th of group i: a call step, not a group. */
static void check_member(const sg_json_t *m, const char *base, int i, int j,
                         const sg_registry_t *reg, names_t *nt, elem_t *el, int *irreversible,
                         problems_t *p)
{
    sg_effect_t effect;
    entry_t e = {NULL, i, j, false};

    if (!sg_json_is_object(m)) {
        problem(p, base, "type: expected object, got %s", sg_json_type_name(m));
        return;
    }
    if (sg_submit_is_group(m)) {
        problem(p, base, "nesting: a group member is a call step; groups do not nest");
        return;
    }
    e.name = check_step(m, base, reg, &effect, p);
    add_name(nt, &e, base, p);
    if (effect == SG_EFFECT_REVERSIBLE)
        el->reversible = true;
    if (effect == SG_EFFECT_IRREVERSIBLE && !el->irreversible) {
        el->irreversible = true;
        *irreversible = j;
    }
}

/* A parallel group, the i-th element of $.steps: {name, parallel, policy}.
 * An irreversible member needs best_effort: under the other policies a
 * failed member makes the saga compensate its siblings, and the
 * irreversible one's effect would stay. */
static void check_group(const sg_json_t *g, const char *base, int i, const sg_registry_t *reg,
                        names_t *nt, elem_t *el, problems_t *p)
{
    static const char *const group_keys[] = {"name", "parallel", "policy", NULL};
    const sg_json_t *members = sg_json_member(g, "parallel");
    const char *policy_name;
    entry_t e = {NULL, i, -1, true};
    sg_group_policy_t policy = SG_GROUP_BEST_EFFORT;
    bool policy_ok = false;
    int irreversible = -1;
    char path[300];

    only_keys(g, base, group_keys, p);
    e.name = name_member(g, base, p);
    add_name(nt, &e, base, p);
    sg_json_path_key(path, sizeof(path), base, "policy");
    if ((policy_name = str_member(g, base, "policy", true, 64, p))) {
        policy_ok = sg_submit_policy_parse(policy_name, &policy) == 0;
        if (!policy_ok)
            problem(p, path, "enum: all_or_nothing, best_effort or fail_fast");
    }
    sg_json_path_key(path, sizeof(path), base, "parallel");
    if (!sg_json_is_array(members)) {
        problem(p, path, "type: expected array, got %s", sg_json_type_name(members));
        return;
    }
    if (sg_json_array_size(members) == 0)
        problem(p, path, "minItems: at least one member");
    else if (sg_json_array_size(members) > SG_GROUP_MAX_MEMBERS)
        problem(p, path, "maxItems: at most %d members", SG_GROUP_MAX_MEMBERS);
    for (size_t j = 0; j < sg_json_array_size(members); j++) {
        char mbase[96];
        snprintf(mbase, sizeof(mbase), "%s.parallel[%zu]", base, j);
        check_member(sg_json_array_get(members, j), mbase, i, (int)j, reg, nt, el, &irreversible,
                     p);
    }
    if (irreversible >= 0 && policy_ok && policy != SG_GROUP_BEST_EFFORT) {
        sg_json_path_key(path, sizeof(path), base, "policy");
        problem(p, path,
                "policy: a group with an irreversible member (%s.parallel[%d]) must be "
                "best_effort: with all_or_nothing or fail_fast, a failed member would leave the "
                "irreversible effect of another standing while the saga compensates",
                base, irreversible);
    }
}

/* The calls steps holds: a step is one, a group one per member (a group
 * without members counts one, so elements never outnumber calls). */
static size_t count_calls(const sg_json_t *steps)
{
    size_t n = 0;

    for (size_t i = 0; i < sg_json_array_size(steps); i++) {
        const sg_json_t *st = sg_json_array_get(steps, i);
        const sg_json_t *members = sg_submit_is_group(st) ? sg_json_member(st, "parallel") : NULL;
        size_t k = sg_json_is_array(members) ? sg_json_array_size(members) : 1;
        n += k ? k : 1;
    }
    return n;
}

/* Irreversible effects come last: no reversible step or group after a
 * step or group with an irreversible call.  A group both reversible and
 * irreversible is not compared with itself (its policy is refused). */
static void check_order(const elem_t *el, size_t nsteps, const sg_json_t *steps, problems_t *p)
{
    for (size_t i = 0; i < nsteps; i++) {
        char path[64];
        size_t k;
        if (!el[i].irreversible)
            continue;
        for (k = nsteps - 1; k > i && !el[k].reversible; k--)
            ;
        if (k == i)
            continue;
        sg_json_path_idx(path, sizeof(path), "$.steps", i);
        if (sg_submit_is_group(sg_json_array_get(steps, i)))
            problem(p, path,
                    "order: a group with an irreversible member must come after every "
                    "reversible step or group ($.steps[%zu] is reversible)",
                    k);
        else
            problem(p, path,
                    "order: an irreversible step must come after every reversible step "
                    "($.steps[%zu] is reversible)",
                    k);
    }
}

/* The members of saga.start but steps: problems reported to p. */
static void check_top(const sg_json_t *doc, problems_t *p)
{
    static const char *const top_keys[] = {
        "v",      "type",         "id",       "saga_id",         "name",
        "steps",  "input",        "deadline", "retry_budget_ms", "metadata",
        "output", "on_behalf_of", NULL};
    const sg_json_t *node;

    only_keys(doc, "$", top_keys, p);
    str_member(doc, "$", "id", true, 128, p);
    str_member(doc, "$", "name", true, 128, p);
    str_member(doc, "$", "on_behalf_of", false, SG_ON_BEHALF_OF_MAX, p);
    if ((node = sg_json_member(doc, "deadline"))) {
        if (!sg_json_string(node) || !datetime_ok(sg_json_string(node)))
            problem(p, "$.deadline", "format: RFC 3339 date-time (2026-11-21T10:00:00Z)");
    }
    if ((node = sg_json_member(doc, "retry_budget_ms"))) {
        int64_t v;
        if (sg_json_get_int(doc, "$", "retry_budget_ms", true, &v, NULL) < 0)
            problem(p, "$.retry_budget_ms", "type: expected integer");
        else if (v < 0 || v > 86400000)
            problem(p, "$.retry_budget_ms", "range: 0 to 86400000");
    }
    if ((node = sg_json_member(doc, "metadata")) && !sg_json_is_object(node))
        problem(p, "$.metadata", "type: expected object, got %s", sg_json_type_name(node));
}

/* Does the reference name step opaque's result (/steps/NAME/result or
 * below), not its key?  The pointer's shape is checked already: a step's
 * name holds no escapes, and what follows it is /key or /result... */
static bool names_own_result(void *opaque, const char *step, const char *pointer)
{
    return strcmp(step, opaque) == 0 && strcmp(pointer + 7 + strlen(step), "/key") != 0;
}

/* The warning of one call step at base. */
static int warn_step(const sg_json_t *st, const char *base, sg_problem_fn fn, void *opaque)
{
    const sg_json_t *args = sg_json_member(sg_json_member(st, "compensate"), "args");
    const char *name = sg_json_string(sg_json_member(st, "name"));
    char path[256], text[640], found[72];

    if (!name || !args ||
        !sg_ref_find_step(args, names_own_result, (void *)name, found, sizeof(found)))
        return 0;
    snprintf(path, sizeof(path), "%s.compensate.args", base);
    snprintf(text, sizeof(text),
             "warning: references /steps/%s/result, its own step's result, which does not exist "
             "when that step timed out (outcome unknown): the compensation would then fail with "
             "input.ref.unresolved and the saga with it; reference /steps/%s/key instead (there "
             "once the step was called), or read forward.idempotency_key from the compensation's "
             "request",
             name, name);
    fn(opaque, path, text);
    return 1;
}

int sg_submit_warnings(const sg_json_t *doc, sg_problem_fn fn, void *opaque)
{
    const sg_json_t *steps = sg_json_member(doc, "steps");
    int n = 0;
    size_t i = 0;

    if (!sg_json_is_array(steps))
        return 0;
    for (const sg_json_t *st = sg_json_first(steps); st; st = sg_json_next(st), i++) {
        const sg_json_t *members = sg_json_member(st, "parallel");
        char base[64];
        snprintf(base, sizeof(base), "$.steps[%zu]", i);
        if (sg_json_is_array(members)) {
            size_t j = 0;
            for (const sg_json_t *m = sg_json_first(members); m; m = sg_json_next(m), j++) {
                char mb[96];
                snprintf(mb, sizeof(mb), "%s.parallel[%zu]", base, j);
                n += warn_step(m, mb, fn, opaque);
            }
        } else {
            n += warn_step(st, base, fn, opaque);
        }
    }
    return n;
}

int sg_submit_validate(const sg_json_t *doc, const sg_registry_t *reg, sg_problem_fn fn,
                       void *opaque)
{
    problems_t p = {fn, opaque, 0};
    const sg_json_t *steps = sg_json_member(doc, "steps");
    elem_t el[SG_MAX_STEPS];
    names_t nt = {.n = 0};
    size_t nsteps;

    check_top(doc, &p);
    if (!steps) {
        problem(&p, "$.steps", "required");
        return p.n;
    }
    if (!sg_json_is_array(steps)) {
        problem(&p, "$.steps", "type: expected array, got %s", sg_json_type_name(steps));
        return p.n;
    }
    if (sg_json_array_size(steps) == 0) {
        problem(&p, "$.steps", "minItems: at least one step");
        return p.n;
    }
    if (count_calls(steps) > SG_MAX_STEPS) {
        problem(&p, "$.steps", "maxItems: at most %d calls (steps and group members)",
                SG_MAX_STEPS);
        return p.n;
    }
    nsteps = sg_json_array_size(steps);
    for (size_t i = 0; i < nsteps; i++) {
        const sg_json_t *st = sg_json_array_get(steps, i);
        entry_t e = {NULL, (int)i, -1, false};
        sg_effect_t effect;
        char base[64];

        el[i].reversible = el[i].irreversible = false;
        sg_json_path_idx(base, sizeof(base), "$.steps", i);
        if (!sg_json_is_object(st)) {
            problem(&p, base, "type: expected object, got %s", sg_json_type_name(st));
            continue;
        }
        if (sg_submit_is_group(st)) {
            check_group(st, base, (int)i, reg, &nt, &el[i], &p);
            continue;
        }
        e.name = check_step(st, base, reg, &effect, &p);
        add_name(&nt, &e, base, &p);
        el[i].reversible = effect == SG_EFFECT_REVERSIBLE;
        el[i].irreversible = effect == SG_EFFECT_IRREVERSIBLE;
    }
    check_all_refs(doc, steps, &nt, &p);
    check_order(el, nsteps, steps, &p);
    return p.n;
}

char *sg_submit_definition(const sg_json_t *doc)
{
    static const char *const keys[] = {"name",     "steps", "input", "deadline", "retry_budget_ms",
                                       "metadata", "output"};
    sg_json_t *def = sg_json_new_object();
    char *text;

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const sg_json_t *node = sg_json_member(doc, keys[i]);
        if (node)
            sg_json_add_node(def, keys[i], sg_json_dup(node));
    }
    text = sg_json_print(def);
    sg_json_destroy(def);
    return text;
}
