/* sg_text: cutting text safely, a leaf every module may use. */
#ifndef SAGAD_TEXT_H
#define SAGAD_TEXT_H

#include <stddef.h>

/* The longest prefix of the NUL-terminated string s, at most max bytes,
 * that does not end inside a UTF-8 character (also when s itself ends in
 * half of one, as text cut by bytes does): the one way sagad cuts text
 * that may be UTF-8 to fit (PostgreSQL refuses half a character, and a
 * terminal shows garbage).  Other bytes are left as they are. */
size_t sg_utf8_cut(const char *s, size_t max);

/* Copies s into out (out_size > 0), cut with sg_utf8_cut; returns out. */
char *sg_text_copy(char *out, size_t out_size, const char *s);

#endif
