/* The fixture of the saga decision's tests (saga_fixture.c). */
#ifndef SAGAD_TESTS_SAGA_FIXTURE_H
#define SAGAD_TESTS_SAGA_FIXTURE_H

#include "../../worker/decide/worker_decide.h"

/* 2026-01-01T00:00:00Z */
#define NOW_MS 1767225600000LL
#define TP     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

/* The saga of every case has four steps: hold (reserve, compensated by
 * release), note (noop, nothing to undo), pay (charge, compensated by
 * release), mail (email, irreversible). */
#define NSTEPS 4

typedef struct fx_s {
    sg_registry_t *reg;
    sg_policy_t retry, comp_retry;
    sg_json_limits_t limits;
    worker_rules_t rules;
    sg_rng_t rng;
    worker_input_t in;
    /* The command the decision sees (cmd, its seam) and what it points to. */
    sg_decoded_t dec;
    worker_result_t result;
    worker_call_t call;
    worker_dcmd_t cmd;
    worker_saga_t saga;
    worker_outcome_t out;
} fx_t;

/* Status letters: p pending, r running, s succeeded, f failed, u unknown,
 * c compensating, C compensated, x compensation_failed, k skipped, a
 * awaiting_approval, A approved; for the saga: R running, H held, D
 * completed, c compensating, C compensated, F failed, N cancelling, X
 * cancelled. */
extern const char fx_step_letters[], fx_saga_letters[];
worker_step_status_t fx_step_status(char l);
worker_saga_status_t fx_saga_status(char l);

void fx_init(fx_t *fx);
void fx_fini(fx_t *fx);
/* The saga as a load returns it: statuses, attempts (forward, compensate)
 * per step (NULL: none). */
void fx_saga(fx_t *fx, char saga, const char *st, const int *att, const int *catt);
void fx_command(fx_t *fx, sg_ctype_t type, int step, int attempt, int generation);
/* saga.cancel {id c-1, by ops, reason withdrawn} of order-1. */
void fx_cancel(fx_t *fx);
/* saga.approve / saga.reject (type) of step {id a-1, by bob, reason checked}. */
void fx_decision(fx_t *fx, sg_ctype_t type, int step);
/* A call of step that returned: ok, or an error of cls. */
void fx_returned(fx_t *fx, bool comp, int step, int attempt, worker_status_t status,
                 sg_errclass_t cls, bool retriable);
void fx_decide(fx_t *fx, bool with_saga);

/* The ordered effects that leave the transaction: message types (a timer
 * as @type), dead letters (DL), interrupted attempts (INT), attempt rows
 * (ATT), new sagas (NEW). */
void fx_effects(const worker_outcome_t *out, char *buf, size_t size);
/* The step statuses of the rows written ('-': none), the saga row's. */
void fx_rows(const worker_outcome_t *out, char *st, char *saga);
const worker_op_t *fx_nth_op(const worker_outcome_t *out, worker_op_kind_t kind, int n);
/* The first message of type. */
const worker_op_t *fx_message(const worker_outcome_t *out, const char *type);
/* The outcome label of commands_consumed ("-" when not counted). */
const char *fx_consumed(const worker_outcome_t *out);
bool fx_counted(const worker_outcome_t *out, sg_metric_id_t id, const char *label);
bool fx_logged(const worker_outcome_t *out, const char *needle);

#endif
