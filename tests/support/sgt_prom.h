/* A strict parser of the Prometheus text format 0.0.4 for the tests, and a
 * tiny HTTP GET.  Strict: every line must be a HELP or TYPE comment or a
 * valid sample of a declared family; names, label syntax and escapes are
 * checked; a histogram's buckets must be cumulative with le="+Inf" equal
 * to _count; a series may not appear twice. */
#ifndef SAGAD_TEST_PROM_H
#define SAGAD_TEST_PROM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sgt_sample_s {
    char *name;   /* e.g. sagad_steps_total, sagad_x_bucket */
    char *labels; /* canonical: a="x",b="y" (unescaped values), "" when none */
    double value;
} sgt_sample_t;

typedef struct sgt_prom_s {
    sgt_sample_t *v;
    size_t n, cap;
    size_t families; /* TYPE lines */
} sgt_prom_t;

/* Parses text into out.  Returns 0, or -1 with err naming the line and the
 * rule it breaks. */
int sgt_prom_parse(const char *text, sgt_prom_t *out, char *err, size_t err_size);
void sgt_prom_free(sgt_prom_t *p);

/* The sample's value, or def when there is no such sample. */
double sgt_prom_get(const sgt_prom_t *p, const char *name, const char *labels, double def);

/* GET http://127.0.0.1:port/path: returns the status (-1 when the request
 * failed) and the body (malloc'd, caller frees) in *body. */
int sgt_http_get(int port, const char *path, char **body);

#endif
