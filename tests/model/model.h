/* sagad-model: a bounded model checker over the saga decision
 * (worker_decide(), worker/decide/worker_decide.h).  tests/model/README.md says
 * what is modelled and what is not. */
#ifndef SAGAD_TESTS_MODEL_H
#define SAGAD_TESTS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../../worker/decide/worker_decide.h"

#define M_STEPS 4  /* steps of a shape at most */
#define M_MSGS  10 /* messages in flight at most */
#define M_CALLS 3  /* calls in flight at most */
#define M_ATT   4  /* attempts of a phase at most (1..3) */
#define M_RING  3  /* decided messages a crash may redeliver */

/* ---- shapes (shapes.c) -------------------------------------------------- */

/* What a call of a step may answer, as a bit set. */
enum { O_OK = 1, O_PERM = 2, O_TRANS = 4, O_TIMEOUT = 8 };
#define O_ALL (O_OK | O_PERM | O_TRANS | O_TIMEOUT)

/* Controls the environment may inject into a shape. */
enum { C_CANCEL = 1, C_APPROVE = 2, C_REJECT = 4 };

typedef struct mstep_def_s {
    const char *name, *tool, *args, *comp; /* comp: the step's compensate JSON, NULL: none */
    const char *group;                     /* NULL: not a member */
    worker_policy_t policy;
    const char *approval; /* the gate's JSON, NULL: none */
    bool reversible;      /* its effect must be undone when the saga is */
    int fwd_outcomes, comp_outcomes;
} mstep_def_t;

typedef struct shape_s {
    const char *name, *what;
    int nsteps;
    mstep_def_t steps[M_STEPS];
    int64_t retry_budget; /* the saga's retry_budget_ms, -1: none */
    bool results_flow;
    int controls; /* C_* */
    int gate;     /* the gated step approve/reject name, -1: none */
} shape_t;

extern const shape_t model_shapes[];
extern const int model_nshapes;
const shape_t *model_shape(const char *name);

/* ---- the state ------------------------------------------------------------ */

/* A message in flight.  Its type: */
enum { MT_EXEC, MT_COMP, MT_GATE_TIMEOUT, MT_RELEASE, MT_CANCEL, MT_APPROVE, MT_REJECT };
typedef struct mmsg_s {
    uint8_t type, step, attempt, gen;
} mmsg_t;

typedef struct mcall_s {
    uint8_t step, comp, attempt, gen, detach;
} mcall_t;

typedef struct mstep_s {
    uint8_t status, attempts, comp_attempts, calling;
    uint8_t effect;     /* done_effect: 0 none, 1 known, 2 possible */
    uint8_t has_result; /* done_result set */
    uint8_t has_key;    /* forward_key set */
    uint8_t err;        /* error_code, interned (model.c) */
    int32_t done_seq;
} mstep_t;

/* Everything the next decisions depend on: the saga's rows, the messages
 * and calls in flight, the attempt rows, and what the world knows.  Kept
 * zeroed where unused, so that it hashes as bytes. */
typedef struct mstate_s {
    /* the saga's rows */
    uint8_t status, gen, pad0[2];
    int32_t seq, retry_spent;
    mstep_t st[M_STEPS];
    /* in flight: sorted, so that a multiset has one form */
    uint8_t nmsg, ncall, nring, pad1;
    mmsg_t msg[M_MSGS];
    mcall_t call[M_CALLS];
    mmsg_t ring[M_RING]; /* the last decided messages, newest first */
    /* attempt rows per (step, phase, attempt): unfinished, interrupted, finished */
    uint8_t rows[M_STEPS][2][M_ATT][3];
    /* the world */
    uint8_t fwd_issued[M_STEPS];   /* a forward call of it was made */
    uint8_t fwd_applied[M_STEPS];  /* its downstream's ledger holds its effect */
    uint8_t comp_applied[M_STEPS]; /* ...and the undo of it */
    uint8_t comp_starts[M_STEPS];  /* times its compensation began */
    uint8_t approvals[M_STEPS];    /* step.approved / step.rejected events */
    uint8_t injected[3];           /* controls sent: cancel, approve, reject */
    uint8_t answers[3];            /* ...and their answers (control rows) */
    uint8_t accepted[3];           /* ...of which accepted */
    uint8_t redeliveries, crashes, fwd_retries, pad2;
} mstate_t;

#endif
