/* sg_text: cutting text safely, a leaf every module may use. */
#ifndef SAGAD_TEXT_H
#define SAGAD_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* The longest prefix of the NUL-terminated string s, at most max bytes,
 * that does not end inside a UTF-8 character (also when s itself ends in
 * half of one, as text cut by bytes does): the one way sagad cuts text
 * that may be UTF-8 to fit (PostgreSQL refuses half a character, and a
 * terminal shows garbage).  Other bytes are left as they are. */
size_t sg_utf8_cut(const char *s, size_t max);

/* A copy of s safe to show on a terminal (caller frees): control bytes
 * (newline and tab kept when lines is true), DEL, the C1 controls
 * U+0080-U+009F and bytes that are not UTF-8 become \xHH; other UTF-8
 * is kept.  For people's output only: --json stays exact. */
char *sg_text_visible(const char *s, bool lines);
/* The same for n bytes that may hold NUL (shown as \x00). */
char *sg_text_visible_n(const void *bytes, size_t n, bool lines);

/* Copies s into out (out_size > 0), cut with sg_utf8_cut; returns out. */
char *sg_text_copy(char *out, size_t out_size, const char *s);

#endif
