/* sg_check: the worker's verdict on a submission (sg_check.h). */
#include "sagad/sg_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_submit.h"

void sg_check_limits(const sg_config_t *cfg, sg_json_limits_t *lim)
{
    lim->max_bytes = (size_t)sg_config_int(cfg, "limits.max_message_bytes");
    lim->max_depth = (int)sg_config_int(cfg, "limits.max_json_depth");
    lim->max_nodes = (long)sg_config_int(cfg, "limits.max_json_nodes");
}

static void list_add(sg_problem_t **v, size_t *n, size_t *cap, const char *path, const char *rule)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        *v = sg_xrealloc(*v, *cap * sizeof(**v));
    }
    (*v)[*n].path = sg_xstrdup(path);
    (*v)[*n].rule = sg_xstrdup(rule);
    (*n)++;
}

static void list_free(sg_problem_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].path);
        free(v[i].rule);
    }
    free(v);
}

static void add_problem(void *opaque, const char *path, const char *rule)
{
    sg_problems_t *p = opaque;

    list_add(&p->v, &p->n, &p->cap, path, rule);
}

static void add_warning(void *opaque, const char *path, const char *rule)
{
    sg_problems_t *p = opaque;

    list_add(&p->w, &p->nw, &p->capw, path, rule);
}

int sg_check_submission(const char *text, size_t len, const sg_json_limits_t *lim,
                        const sg_registry_t *reg, sg_problems_t *p)
{
    sg_decoded_t dec;

    memset(p, 0, sizeof(*p));
    sg_submit_decode(text, len, lim, &dec);
    if (dec.type == SG_CMD_POISON) {
        /* The worker dead-letters it as it came, with this code. */
        const char *sep = strstr(dec.err.message, ": ");
        char path[256];

        snprintf(p->code, sizeof(p->code), "%s", dec.err.code);
        /* "$.type: rule" as path and rule; a message without a path
         * (malformed JSON) is a problem of the whole document. */
        if (dec.err.message[0] == '$' && sep && (size_t)(sep - dec.err.message) < sizeof(path)) {
            snprintf(path, sizeof(path), "%.*s", (int)(sep - dec.err.message), dec.err.message);
            add_problem(p, path, sep + 2);
        } else {
            add_problem(p, "$", dec.err.message);
        }
    } else if (dec.type != SG_CMD_START) {
        snprintf(p->code, sizeof(p->code), "%s", "input.schema.invalid");
        add_problem(p, "$.type", "a submission is a saga.start");
    } else if (sg_submit_validate(dec.doc, reg, add_problem, p) > 0) {
        snprintf(p->code, sizeof(p->code), "%s", "input.schema.invalid");
    } else {
        sg_submit_warnings(dec.doc, add_warning, p);
    }
    sg_json_destroy(dec.doc);
    return (int)p->n;
}

void sg_problems_free(sg_problems_t *p)
{
    list_free(p->v, p->n);
    list_free(p->w, p->nw);
    memset(p, 0, sizeof(*p));
}

/* [{path, rule}, ...] of a list. */
sg_json_t *sg_problems_json(const sg_problem_t *v, size_t n)
{
    sg_json_t *arr = sg_json_new_array();

    for (size_t i = 0; i < n; i++) {
        sg_json_t *o = sg_json_new_object();
        sg_json_add_str(o, "path", v[i].path);
        sg_json_add_str(o, "rule", v[i].rule);
        sg_json_append(arr, o);
    }
    return arr;
}
