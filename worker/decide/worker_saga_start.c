/* What the tool registry says about a command: the decision on saga.start
 * (validation, rejection, the effective steps it is stored with, the fresh
 * saga the loop chains its first step from) and a step's call checked
 * against the registry (tool, args schema).  Part of the pure decision
 * (worker_decide.h): it adds to the outcome, nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_ref.h"
#include "sagad/sg_text.h"
#include "worker_decide.h"

typedef struct problem_list_s {
    sg_json_t *arr;
    char text[400];
    int n;
} problem_list_t;

static void collect_problem(void *opaque, const char *path, const char *rule)
{
    problem_list_t *pl = opaque;
    sg_json_t *p = sg_json_new_object();
    size_t len = strlen(pl->text);

    sg_json_add_str(p, "path", path);
    sg_json_add_str(p, "rule", rule);
    sg_json_append(pl->arr, p);
    if (pl->n++ < 3)
        snprintf(pl->text + len, sizeof(pl->text) - len, "%s%s: %s", len ? "; " : "", path, rule);
}

/* saga.rejected (seq 0: the saga does not exist, or is another one) and a
 * dead letter so the submission can be fixed and replayed. */
static void reject(worker_dc_t *d, problem_list_t *pl, const char *code)
{
    const worker_dcmd_t *cmd = d->cmd;
    const char *sub_id = NULL;
    char id[SG_SAGA_ID_MAX + 64], now[40];
    sg_json_t *ev;
    sg_err_t err;

    sg_json_get_str(cmd->dec->doc, "$", "id", false, &sub_id, NULL);
    snprintf(id, sizeof(id), "evt:%s:rejected:%d:%lld", cmd->dec->saga_id, (int)d->in->partition,
             (long long)cmd->offset);
    sg_time_iso(now, sizeof(now), d->in->now_ms);
    ev = worker_out_message_new("saga.rejected", id, cmd->dec->saga_id);
    sg_json_add_int(ev, "seq", 0);
    sg_json_add_str(ev, "time", now);
    if (sub_id)
        sg_json_add_str(ev, "submission_id", sub_id);
    sg_json_add_str(ev, "error_code", code);
    sg_json_add_str(ev, "error_class", "permanent");
    sg_json_add_str(ev, "message", pl->text);
    sg_json_add_node(ev, "problems", pl->arr);
    pl->arr = NULL;
    worker_out_emit(d, d->rules->topic_events, NULL, ev, 0);
    d->out->stats.rejected++;
    sg_err_set(&err, SG_ERRCLASS_PERMANENT, code, "saga.start rejected: %d problem(s): %s", pl->n,
               pl->text);
    worker_out_dead_letter(d, NULL, -1, false, &err, NULL);
    d->out->decided = "rejected";
}

/* The stored form of call step st (a member of group, with policy, when
 * group is not NULL), appended to out. */
static void effective_step(sg_json_t *out, const sg_json_t *st, const sg_registry_t *reg,
                           const char *group, const char *policy)
{
    const sg_json_t *comp = sg_json_member(st, "compensate");
    const sg_json_t *args = sg_json_member(st, "args");
    const char *name = sg_json_string(sg_json_member(st, "name"));
    const char *tool = sg_json_string(sg_json_member(st, "tool"));
    const sg_tool_t *t = sg_registry_find(reg, tool);
    sg_json_t *e = sg_json_new_object();

    sg_json_add_str(e, "name", name);
    if (group) {
        sg_json_add_str(e, "group", group);
        sg_json_add_str(e, "policy", policy);
    }
    sg_json_add_str(e, "tool", tool);
    sg_json_add_node(e, "args", args ? sg_json_dup(args) : sg_json_new_object());
    if (comp && !sg_json_is_null(comp)) {
        sg_json_t *c = sg_json_dup(comp);
        if (!sg_json_member(c, "args"))
            sg_json_add_node(c, "args", args ? sg_json_dup(args) : sg_json_new_object());
        sg_json_add_node(e, "compensate", c);
    } else if (t && t->compensation) {
        /* The registry's compensating tool, called with the step's args. */
        sg_json_t *c = sg_json_new_object();
        sg_json_add_str(c, "tool", t->compensation);
        sg_json_add_node(c, "args", args ? sg_json_dup(args) : sg_json_new_object());
        sg_json_add_node(e, "compensate", c);
    } else {
        sg_json_add_null(e, "compensate");
    }
    /* The gate: the step's own, and the registry's for its tool. */
    if (sg_json_member(st, "approval") || (t && t->approval_required)) {
        const sg_json_t *ap = sg_json_member(st, "approval");
        sg_json_t *g = ap ? sg_json_dup(ap) : sg_json_new_object();
        if (t && t->approval_required)
            sg_json_add_bool(g, "registry", true);
        sg_json_add_node(e, "approval", g);
    }
    sg_json_append(out, e);
}

/* The steps a saga is stored with: one per call, a parallel group's
 * members in its place, each naming the group and its policy; the
 * registry's compensation and approval gate filled in. */
static char *effective_steps(const sg_json_t *doc, const sg_registry_t *reg)
{
    const sg_json_t *steps = sg_json_member(doc, "steps");
    sg_json_t *out = sg_json_new_array();
    char *text;

    for (size_t i = 0; i < sg_json_array_size(steps); i++) {
        const sg_json_t *st = sg_json_array_get(steps, i),
                        *members = sg_json_member(st, "parallel");
        if (!members) {
            effective_step(out, st, reg, NULL, NULL);
            continue;
        }
        for (size_t j = 0; j < sg_json_array_size(members); j++)
            effective_step(out, sg_json_array_get(members, j), reg,
                           sg_json_string(sg_json_member(st, "name")),
                           sg_json_string(sg_json_member(st, "policy")));
    }
    text = sg_json_print(out);
    sg_json_destroy(out);
    return text;
}

static void random_traceparent(sg_rng_t *rng, char *out, size_t size)
{
    uint64_t a = sg_rng_upto(rng, UINT64_MAX), b = sg_rng_upto(rng, UINT64_MAX),
             c = sg_rng_upto(rng, UINT64_MAX);

    snprintf(out, size, "00-%016llx%016llx-%016llx-01", (unsigned long long)a,
             (unsigned long long)(b | 1), (unsigned long long)(c | 1));
}

/* The saga's traceparent: the producer's, or a new one when it sent none
 * or one that is not W3C trace context.  That one is never stored or sent
 * on (CR or LF in it would add headers to every call of the saga):
 * replaced, and said so, with what came escaped. */
static void traceparent(worker_dc_t *d, char *tp, size_t size)
{
    const char *h = d->in->traceparent;
    size_t hlen = d->in->traceparent_len;
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    char *seen;

    if (sg_traceparent_ok(h, hlen)) {
        snprintf(tp, size, "%.*s", (int)hlen, h);
        return;
    }
    random_traceparent(d->in->rng, tp, size);
    if (!h)
        return;
    seen = sg_text_visible_n(h, hlen < 64 ? hlen : 64, false);
    ctx.saga_id = d->cmd->dec->saga_id;
    worker_out_log(d, SG_LOG_WARN, &ctx,
                   "traceparent header is not W3C trace context (%zu bytes: %s%s); the saga gets "
                   "a new one: %s",
                   hlen, seen, hlen > 64 ? "..." : "", tp);
    free(seen);
}

/* Keeps text (malloc'd) with f; returns it. */
static const char *fresh_keep(worker_fresh_t *f, char *text)
{
    if (!text || f->ntexts == sizeof(f->texts) / sizeof(f->texts[0]))
        abort();
    return f->texts[f->ntexts++] = text;
}

/* The steps of a new saga from the effective steps it was inserted with
 * (steps_text, see effective_steps), as the load would read them back:
 * pending, never attempted. */
static bool fresh_steps(worker_fresh_t *f, const char *steps_text)
{
    size_t n;

    f->steps = sg_json_parse(steps_text, strlen(steps_text), NULL, NULL);
    n = sg_json_array_size(f->steps);
    if (!f->steps || n == 0 || n > SG_MAX_STEPS)
        return false;
    for (size_t i = 0; i < n; i++) {
        const sg_json_t *e = sg_json_array_get(f->steps, i),
                        *comp = sg_json_member(e, "compensate");
        worker_step_t *st = &f->saga.steps[i];

        st->idx = (int)i;
        st->name = sg_json_string(sg_json_member(e, "name"));
        st->tool = sg_json_string(sg_json_member(e, "tool"));
        st->args = fresh_keep(f, sg_json_print(sg_json_member(e, "args")));
        st->comp = comp && !sg_json_is_null(comp) ? fresh_keep(f, sg_json_print(comp)) : NULL;
        if (sg_json_member(e, "approval"))
            st->approval = fresh_keep(f, sg_json_print(sg_json_member(e, "approval")));
        st->group = sg_json_string(sg_json_member(e, "group"));
        st->policy = worker_policy_parse(sg_json_string(sg_json_member(e, "policy")));
        st->status = WORKER_STEP_PENDING;
    }
    f->saga.nsteps = (int)n;
    return true;
}

/* Where the command's message was read: "<partition>:<offset>", or "". */
static void origin_of(const worker_dc_t *d, char *out, size_t size)
{
    if (d->in->partition < 0 || d->cmd->offset < 0)
        out[0] = '\0';
    else
        snprintf(out, size, "%d:%lld", (int)d->in->partition, (long long)d->cmd->offset);
}

/* The same submission again changes nothing, but a producer that sends it
 * again is asking where its saga stands, so it is answered: saga.duplicate,
 * with the saga's status, the id of the message answered and, once the
 * saga is finished, its run_health. */
static void answer_duplicate(worker_dc_t *d, worker_saga_t *saga)
{
    sg_json_t *b = sg_json_new_object();
    const char *id = sg_json_string(sg_json_member(d->cmd->dec->doc, "id"));

    sg_json_add_str(b, "status", worker_saga_status_name(saga->status));
    if (id)
        sg_json_add_str(b, "submission_id", id);
    if (worker_saga_finished(saga->status))
        sg_json_add_node(b, "run_health", worker_run_health(saga));
    if (saga->status == WORKER_SAGA_COMPLETED && saga->stored_output)
        sg_json_add_raw(b, "output", saga->stored_output);
    worker_out_event(d, saga, "saga.duplicate", b);
    worker_out_rows(d, saga);
    worker_out_ignored(d, "duplicate saga.start answered with saga.duplicate",
                       "the saga exists with the same definition");
}

/* Whether a step of the submission, a parallel group's member included,
 * waits at an approval gate: its own, or its tool's. */
static bool has_gate(const sg_json_t *doc, const sg_registry_t *reg)
{
    const sg_json_t *steps = sg_json_member(doc, "steps");

    for (size_t i = 0; i < sg_json_array_size(steps); i++) {
        const sg_json_t *st = sg_json_array_get(steps, i),
                        *members = sg_json_member(st, "parallel");
        size_t n = members ? sg_json_array_size(members) : 1;

        for (size_t j = 0; j < n; j++) {
            const sg_json_t *call = members ? sg_json_array_get(members, j) : st;
            const char *tool = sg_json_string(sg_json_member(call, "tool"));
            const sg_tool_t *t = tool ? sg_registry_find(reg, tool) : NULL;
            if (sg_json_member(call, "approval") || (t && t->approval_required))
                return true;
        }
    }
    return false;
}

/* Who may start a saga (docs/ARCHITECTURE.md, "Trust boundary"): a
 * submission that carries a signature must verify and come from a
 * principal with the submit role; one with an approval gate (four eyes
 * needs its submitter) or, with security.signed_submissions = all, any
 * must be signed.  Adds the problem and returns its code when not. */
static const char *signer_refused(worker_dc_t *d, problem_list_t *pl)
{
    const sg_decoded_t *dec = d->cmd->dec;
    char rule[300];

    if (dec->auth.code[0]) {
        snprintf(rule, sizeof(rule), "signature: %s", dec->auth.message);
        collect_problem(pl, "$", rule);
        return dec->auth.code;
    }
    if (!dec->who && (d->rules->signed_all || has_gate(dec->doc, d->rules->reg))) {
        collect_problem(pl, "$",
                        d->rules->signed_all
                            ? "signature: security.signed_submissions is all, and this saga.start "
                              "has no sagad-auth signature: sign it with a key of a principal "
                              "with the submit role"
                            : "signature: a saga with an approval gate must be signed by its "
                              "submitter (four eyes: the approver must be someone else); sign "
                              "it with a key of a principal with the submit role");
        return "input.auth.unsigned";
    }
    if (dec->who && !(dec->who->roles & SG_ROLE_SUBMIT)) {
        snprintf(rule, sizeof(rule), "signature: %s does not have the submit role in the keyring",
                 dec->who->name);
        collect_problem(pl, "$", rule);
        return "input.auth.forbidden";
    }
    return NULL;
}

/* An existing saga: the same submission again, or a conflicting one.  A
 * new one: the problems of its document, if any, then its signer. */
static bool refused(worker_dc_t *d, worker_saga_t *existing)
{
    problem_list_t pl = {sg_json_new_array(), "", 0};
    const char *code;
    bool no = true;

    if (existing && existing->same_definition) {
        char here[40];
        origin_of(d, here, sizeof(here));
        if (existing->origin && strcmp(existing->origin, here) == 0)
            /* The very message that started it, read again after its
             * partition changed hands: nobody asked anything. */
            worker_out_stale(d, "saga.start read again at the offset that started the saga");
        else
            answer_duplicate(d, existing);
    } else if (existing) {
        collect_problem(&pl, "$.saga_id",
                        "unique: this saga_id is already used with a different definition");
        reject(d, &pl, "input.saga.conflict");
    } else if (sg_submit_validate(d->cmd->dec->doc, d->rules->reg, collect_problem, &pl) > 0) {
        reject(d, &pl, "input.schema.invalid");
    } else if ((code = signer_refused(d, &pl))) {
        reject(d, &pl, code);
    } else {
        no = false;
    }
    sg_json_destroy(pl.arr);
    return no;
}

/* The saga row and its steps, from the submission. */
static worker_op_t *saga_row(worker_dc_t *d, worker_fresh_t *fresh, char *tp)
{
    const sg_json_t *doc = d->cmd->dec->doc, *input, *meta;
    worker_op_t *op = worker_out_op(d, WORKER_OP_SAGA_NEW, d->cmd->dec->saga_id);

    op->u.saga_new.definition = d->cmd->definition;
    if (!op->u.saga_new.definition)
        op->u.saga_new.definition = op->u.saga_new.def_owned = sg_submit_definition(doc);
    op->u.saga_new.steps = effective_steps(doc, d->rules->reg);
    origin_of(d, op->u.saga_new.origin, sizeof(op->u.saga_new.origin));
    op->u.saga_new.submitted_by = d->cmd->dec->as;
    sg_json_get_str(doc, "$", "name", true, &op->u.saga_new.name, NULL);
    sg_json_get_str(doc, "$", "deadline", false, &op->u.saga_new.deadline, NULL);
    if ((input = sg_json_member(doc, "input")))
        op->u.saga_new.input = fresh_keep(fresh, sg_json_print(input));
    if ((meta = sg_json_member(doc, "metadata"))) {
        op->u.saga_new.metadata = sg_json_print(meta);
        fresh->saga.metadata = fresh_keep(fresh, sg_json_print(meta)); /* an approval packet's */
    }
    op->u.saga_new.retry_budget_ms = -1;
    if (sg_json_member(doc, "retry_budget_ms"))
        sg_json_get_int(doc, "$", "retry_budget_ms", true, &op->u.saga_new.retry_budget_ms, NULL);
    op->u.saga_new.traceparent = fresh_keep(fresh, tp);
    return op;
}

void worker_decide_start(worker_dc_t *d, worker_saga_t *existing)
{
    const worker_dcmd_t *cmd = d->cmd;
    worker_fresh_t *fresh;
    worker_saga_t *saga;
    worker_op_t *row;
    char tp[64] = "";
    char *tp_kept;
    const sg_json_t *first;
    bool chain;

    if (refused(d, existing))
        return;
    fresh = sg_xcalloc(1, sizeof(*fresh));
    d->out->fresh = fresh;
    traceparent(d, tp, sizeof(tp));
    tp_kept = sg_xstrdup(tp);
    row = saga_row(d, fresh, tp_kept);
    /* A fresh saga, as the rows just written say. */
    saga = &fresh->saga;
    saga->saga_id = cmd->dec->saga_id;
    saga->name = row->u.saga_new.name;
    saga->traceparent = row->u.saga_new.traceparent;
    saga->input = row->u.saga_new.input;
    saga->submitted_by = row->u.saga_new.submitted_by;
    saga->generation = 1;
    saga->retry_budget = row->u.saga_new.retry_budget_ms;
    saga->status = saga->status_written = WORKER_SAGA_RUNNING;
    {
        sg_json_t *b = sg_json_new_object();
        sg_json_add_str(b, "name", saga->name);
        if (row->u.saga_new.submitted_by)
            sg_json_add_str(b, "submitted_by", row->u.saga_new.submitted_by);
        if (cmd->dec->who && strcmp(cmd->dec->who->name, cmd->dec->as) != 0)
            sg_json_add_str(b, "submitted_via", cmd->dec->who->name);
        sg_json_add_int(b, "steps",
                        (int64_t)sg_json_array_size(sg_json_member(cmd->dec->doc, "steps")));
        worker_out_event(d, saga, "saga.accepted", b);
    }
    /* The steps too, as a load would return them, when the loop may chain
     * the first step (not with a deadline: whether it passed is
     * PostgreSQL's clock's to say, in the next transaction), or when the
     * first step is a group, whose members all run at once. */
    chain = d->rules->chain && !row->u.saga_new.deadline;
    first = sg_json_array_get(sg_json_member(cmd->dec->doc, "steps"), 0);
    if ((chain || sg_submit_is_group(first)) && fresh_steps(fresh, row->u.saga_new.steps)) {
        worker_out_run_step(d, saga, 0);
        d->out->keep_fresh = chain;
        if (!chain)
            d->out->nmembers = 0; /* the members' messages decide them */
    } else {
        worker_out_command(d, saga, 0, false, 1, 0);
    }
    saga->dirty = true;
    worker_out_rows(d, saga);
    d->out->stats.started++;
    worker_out_count(d, SG_M_SAGAS_STARTED, NULL);
}

/* A JSON text as loaded, parsed; NULL for NULL (or, never expected, for
 * text PostgreSQL's jsonb would not have given). */
static sg_json_t *parse_text(const char *text)
{
    return text ? sg_json_parse(text, strlen(text), NULL, NULL) : NULL;
}

/* The forward idempotency key of step st: as its last forward attempt
 * stored it, else as its next one would make it. */
static const char *forward_key(const worker_saga_t *saga, const worker_step_t *st, char *buf,
                               size_t size)
{
    if (st->forward_key)
        return st->forward_key;
    sg_idem_key(buf, size, saga->saga_id, st->idx, false, worker_key_generation(saga, st, false));
    return buf;
}

sg_ref_budget_t worker_ref_budget(const worker_rules_t *rules)
{
    sg_ref_budget_t b = {0, 0};

    if (rules->limits) {
        b.max_bytes = rules->limits->max_bytes * SG_REF_BUDGET_FACTOR;
        b.max_nodes = rules->limits->max_nodes * SG_REF_BUDGET_FACTOR;
    }
    return b;
}

int worker_key_generation(const worker_saga_t *saga, const worker_step_t *st, bool compensate)
{
    int kept = compensate ? st->comp_key_generation : st->key_generation;

    return kept > 0 ? kept : saga->generation;
}

sg_json_t *worker_saga_context(const worker_saga_t *saga)
{
    sg_json_t *ctx = sg_json_new_object(), *steps = sg_json_new_object(), *input;

    input = parse_text(saga->input);
    if (input)
        sg_json_add_node(ctx, "input", input);
    else
        sg_json_add_null(ctx, "input");
    for (int i = 0; i < saga->nsteps; i++) {
        const worker_step_t *st = &saga->steps[i];
        sg_json_t *e, *result = parse_text(st->done_result);
        if (!result && !st->forward_key)
            continue; /* never ran: nothing to name */
        e = sg_json_new_object();
        if (result)
            sg_json_add_node(e, "result", result);
        if (st->forward_key)
            sg_json_add_str(e, "key", st->forward_key);
        sg_json_add_node(steps, st->name, e);
    }
    /* A group's result is its manifest, once every member has ended. */
    for (int i = 0; i < saga->nsteps; i++) {
        int last;
        sg_json_t *e;
        if (!saga->steps[i].group)
            continue;
        last = worker_group_last(saga, i);
        if (worker_group_open(saga, i, last) == 0) {
            e = sg_json_new_object();
            sg_json_add_node(e, "result", worker_group_manifest(saga, i, last));
            sg_json_add_node(steps, saga->steps[i].group, e);
        }
        i = last;
    }
    sg_json_add_node(ctx, "steps", steps);
    return ctx;
}

/* A compensation's view of the step it undoes: its result, its forward
 * key and whether its effect is known or only possible. */
static sg_json_t *forward_of(const worker_saga_t *saga, const worker_step_t *st)
{
    sg_json_t *f = sg_json_new_object(), *result = parse_text(st->done_result);
    char key[256];

    if (result)
        sg_json_add_node(f, "result", result);
    else
        sg_json_add_null(f, "result");
    sg_json_add_str(f, "idempotency_key", forward_key(saga, st, key, sizeof(key)));
    sg_json_add_str(f, "effect", st->done_effect ? st->done_effect : "known");
    return f;
}

/* Does the reference name a step of the saga that did not succeed?  (A
 * group's name is no step: its manifest is there whatever happened.) */
static bool not_succeeded(void *opaque, const char *name, const char *pointer)
{
    const worker_saga_t *saga = opaque;

    (void)pointer;
    for (int i = 0; i < saga->nsteps; i++)
        if (strcmp(saga->steps[i].name, name) == 0)
            return saga->steps[i].status != WORKER_STEP_SUCCEEDED;
    return false;
}

bool worker_prepare_call(worker_dc_t *d, const worker_saga_t *saga, const worker_step_t *st,
                         bool compensate, sg_err_t *err)
{
    const char *tool_name = st->tool, *args_text = st->args;
    sg_json_t *comp = NULL, *args = NULL;
    const sg_tool_t *tool;
    problem_list_t pl = {NULL, "", 0};
    worker_call_t *call = &d->out->call;
    char key[256];

    if (compensate) {
        comp = st->comp ? sg_json_parse(st->comp, strlen(st->comp), NULL, NULL) : NULL;
        tool_name = comp ? sg_json_string(sg_json_member(comp, "tool")) : NULL;
        args =
            comp && sg_json_member(comp, "args") ? sg_json_dup(sg_json_member(comp, "args")) : NULL;
    } else if (args_text) {
        args = sg_json_parse(args_text, strlen(args_text), NULL, NULL);
    }
    if (!args)
        args = sg_json_new_object();
    /* A forward call that depends on a step that did not succeed (a
     * best_effort member) is not made: the step is skipped (the caller
     * sees the code), before anything else could fail it. */
    if (!compensate) {
        char dep[72];
        if (sg_ref_find_step(args, not_succeeded, (void *)saga, dep, sizeof(dep))) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.skipped_dependency_failed",
                       "step %s references step %s, which did not succeed", st->name, dep);
            goto fail;
        }
    }
    tool = tool_name ? sg_registry_find(d->rules->reg, tool_name) : NULL;
    if (tool && sg_ref_any(args)) {
        sg_json_t *ctx = worker_saga_context(saga), *resolved;
        char base[64];
        snprintf(base, sizeof(base), "$.steps[%d].%sargs", st->idx,
                 compensate ? "compensate." : "");
        sg_ref_budget_t budget = worker_ref_budget(d->rules);
        resolved = sg_ref_resolve(args, ctx, base, &budget, err);
        sg_json_destroy(ctx);
        if (!resolved)
            goto fail;
        sg_json_destroy(args);
        args = resolved;
        call->resolved = true;
    }
    if (!tool) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "tool.unknown",
                   "tool \"%s\" is not in the tool registry %s", tool_name ? tool_name : "(none)",
                   d->rules->reg->path);
        goto fail;
    }
    pl.arr = sg_json_new_array();
    if (sg_submit_validate_args(tool, args, "$.args", collect_problem, &pl) > 0) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "tool.args.invalid", "args of tool %s: %s",
                   tool->name, pl.text);
        goto fail;
    }
    sg_json_destroy(pl.arr);
    sg_json_destroy(comp);
    /* A call uses the key of the generation whose effect may stand, if
     * there is one (worker_key_generation). */
    sg_idem_key(key, sizeof(key), saga->saga_id, st->idx, compensate,
                worker_key_generation(saga, st, compensate));
    call->tool = tool;
    call->saga_id = strdup(saga->saga_id);
    call->step_name = strdup(st->name);
    call->step_idx = st->idx;
    call->compensate = compensate;
    call->attempt = d->cmd->dec->attempt;
    call->generation = saga->generation;
    call->idem_key = strdup(key);
    call->traceparent = saga->traceparent ? strdup(saga->traceparent) : NULL;
    call->args = args;
    call->input = parse_text(saga->input);
    call->forward = compensate ? forward_of(saga, st) : NULL;
    return true;
fail:
    call->resolved = false;
    sg_json_destroy(pl.arr);
    sg_json_destroy(comp);
    sg_json_destroy(args);
    return false;
}
