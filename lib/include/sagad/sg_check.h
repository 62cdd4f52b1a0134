/* sg_check: the worker's verdict on a submission, for the front ends
 * (sagactl validate/submit, sagad-gateway's POST /v1/sagas): every
 * problem as a JSON path and a rule, what saga.rejected would carry.
 * The same sg_submit_decode and sg_submit_validate the worker runs. */
#ifndef SAGAD_CHECK_H
#define SAGAD_CHECK_H

#include <stddef.h>

#include "sagad/sg_config.h"
#include "sagad/sg_json.h"
#include "sagad/sg_registry.h"

/* One problem of a submission: its JSON path and rule. */
typedef struct sg_problem_s {
    char *path, *rule;
} sg_problem_t;

typedef struct sg_problems_s {
    sg_problem_t *v;
    size_t n, cap;
    char code[64]; /* the worker's error code of the refusal */
    /* What a valid submission may do that its author likely did not mean
     * (sg_submit_warnings): the worker accepts it all the same. */
    sg_problem_t *w;
    size_t nw, capw;
} sg_problems_t;

/* The JSON limits of the config (limits.*), as the worker applies them. */
void sg_check_limits(const sg_config_t *cfg, sg_json_limits_t *lim);

/* The verdict on the saga.start text[0..len): 0 when the worker would
 * accept it; otherwise the number of problems, listed in p (a message the
 * worker dead-letters undecoded is one problem at "$").  Free p with
 * sg_problems_free in every case. */
int sg_check_submission(const char *text, size_t len, const sg_json_limits_t *lim,
                        const sg_registry_t *reg, sg_problems_t *p);
void sg_problems_free(sg_problems_t *p);

/* [{path, rule}, ...] of a list (caller destroys). */
sg_json_t *sg_problems_json(const sg_problem_t *v, size_t n);

#endif
