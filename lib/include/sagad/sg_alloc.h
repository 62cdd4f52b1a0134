/* sg_alloc: allocation that cannot fail.  sagad does not try to go on
 * without memory: a worker that cannot allocate a command or a statement
 * has no safe partial result, and Kubernetes restarts it.  So every
 * allocation goes through these, which print what was asked to stderr and
 * abort() when the C library says no; callers never check. */
#ifndef SAGAD_ALLOC_H
#define SAGAD_ALLOC_H

#include <stddef.h>

void *sg_xmalloc(size_t size);
void *sg_xcalloc(size_t n, size_t size);
void *sg_xrealloc(void *p, size_t size);
char *sg_xstrdup(const char *s);
char *sg_xstrndup(const char *s, size_t n);
/* For a library's own allocator that returned p: p, or the abort. */
void *sg_xcheck(void *p, const char *what);

#endif
