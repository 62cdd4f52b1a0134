/* Parallel groups as the decisions see them (docs/WORKER.md, "Parallel
 * groups"): a group's members are consecutive step rows naming it, so a
 * group is a span [first, last] of the saga's steps.  This file answers
 * questions about a span (where it starts and ends, how far its members
 * got, what its manifest says, which member is undone next); the
 * decisions that act on the answers are worker_saga.c's.  Pure, and calls
 * nothing of the other decision files. */
#include <string.h>

#include "worker_decide.h"

int worker_group_first(const worker_saga_t *saga, int idx)
{
    const char *g = saga->steps[idx].group;

    while (g && idx > 0 && saga->steps[idx - 1].group && strcmp(saga->steps[idx - 1].group, g) == 0)
        idx--;
    return idx;
}

int worker_group_last(const worker_saga_t *saga, int idx)
{
    const char *g = saga->steps[idx].group;

    while (g && idx + 1 < saga->nsteps && saga->steps[idx + 1].group &&
           strcmp(saga->steps[idx + 1].group, g) == 0)
        idx++;
    return idx;
}

/* Has the member's forward part ended (it will not be called again)? */
static bool member_ended(worker_step_status_t s)
{
    return s != WORKER_STEP_PENDING && s != WORKER_STEP_RUNNING &&
           s != WORKER_STEP_AWAITING_APPROVAL && s != WORKER_STEP_APPROVED;
}

/* Did the member's forward call succeed (whatever was done since)? */
static bool member_succeeded(const worker_step_t *st)
{
    return st->status == WORKER_STEP_SUCCEEDED ||
           ((st->status == WORKER_STEP_COMPENSATING || st->status == WORKER_STEP_COMPENSATED ||
             st->status == WORKER_STEP_COMPENSATION_FAILED) &&
            st->done_effect && strcmp(st->done_effect, "known") == 0);
}

int worker_group_open(const worker_saga_t *saga, int first, int last)
{
    int open = 0;

    for (int i = first; i <= last; i++)
        open += !member_ended(saga->steps[i].status);
    return open;
}

bool worker_group_failed(const worker_saga_t *saga, int first, int last)
{
    for (int i = first; i <= last; i++)
        if (!member_succeeded(&saga->steps[i]))
            return true;
    return false;
}

const char *worker_group_status(const worker_saga_t *saga, int first, int last)
{
    int ok = 0, n = last - first + 1;

    for (int i = first; i <= last; i++)
        ok += member_succeeded(&saga->steps[i]);
    if (ok == n)
        return "ok";
    /* A failed all_or_nothing or fail_fast group is undone whole. */
    if (ok == 0 || saga->steps[first].policy != WORKER_POLICY_BEST_EFFORT)
        return "error";
    return "partial";
}

sg_json_t *worker_group_manifest(const worker_saga_t *saga, int first, int last)
{
    sg_json_t *m = sg_json_new_object(), *members = sg_json_new_object();

    sg_json_add_str(m, "group", saga->steps[first].group);
    sg_json_add_str(m, "policy", worker_policy_name(saga->steps[first].policy));
    sg_json_add_str(m, "status", worker_group_status(saga, first, last));
    for (int i = first; i <= last; i++) {
        const worker_step_t *st = &saga->steps[i];
        sg_json_t *e = sg_json_new_object(), *result = NULL;
        bool ok = member_succeeded(st);

        sg_json_add_str(e, "status", ok ? "succeeded" : worker_step_status_name(st->status));
        if (!ok && st->error_code[0])
            sg_json_add_str(e, "error_code", st->error_code);
        else
            sg_json_add_null(e, "error_code");
        if (ok && st->done_result)
            result = sg_json_parse(st->done_result, strlen(st->done_result), NULL, NULL);
        if (result)
            sg_json_add_node(e, "result", result);
        else
            sg_json_add_null(e, "result");
        sg_json_add_node(members, st->name, e);
    }
    sg_json_add_node(m, "members", members);
    return m;
}

int worker_group_next_undo(const worker_saga_t *saga, int first, int last, const bool *passed)
{
    int best = -1;

    for (int i = first; i <= last; i++) {
        const worker_step_t *st = &saga->steps[i];
        if (passed[i] || (st->status != WORKER_STEP_SUCCEEDED && st->status != WORKER_STEP_UNKNOWN))
            continue;
        /* The latest first; equal (never both set) by index, the later. */
        if (best < 0 || st->done_seq >= saga->steps[best].done_seq)
            best = i;
    }
    return best;
}
