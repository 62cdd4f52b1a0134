
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"

static void out_of_memory(const char *what, size_t size)
{
    /* No logging module here: it may itself need memory. */
    fprintf(stderr, "sagad: out of memory (%s of %zu bytes)\n", what, size);
    abort();
}

void *sg_xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);

    if (!p)
        out_of_memory("malloc", size);
    return p;
}

void *sg_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);

    if (!p)
        out_of_memory("calloc", n * size);
    return p;
}

void *sg_xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);

    if (!q)
        out_of_memory("realloc", size);
    return q;
}

char *sg_xstrdup(const char *s)
{
    char *d = strdup(s);

    if (!d)
        out_of_memory("strdup", strlen(s) + 1);
    return d;
}

char *sg_xstrndup(const char *s, size_t n)
{
    char *d = strndup(s, n);

    if (!d)
        out_of_memory("strndup", n + 1);
    return d;
}

void *sg_xcheck(void *p, const char *what)
{
    if (!p)
        out_of_memory(what, 0);
    return p;
}
