/* sg_text: cutting text safely, a leaf every module may use. */
#ifndef SAGAD_TEXT_H
#define SAGAD_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* The length of s in Unicode code points, s being valid UTF-8 (each
 * byte that does not continue a character starts one): what a schema's
 * maxLength counts. */
size_t sg_utf8_chars(const char *s);

/* True when bytes[0..n) is well-formed UTF-8 without a NUL byte (no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
bool sg_utf8_valid(const void *bytes, size_t n);

/* Bytes as text that PostgreSQL and JSON can hold, without loss (caller
 * frees): the bytes themselves when they are valid UTF-8 without NUL and
 * do not start with "base64:", else "base64:" and the bytes in standard
 * padded base64 (RFC 4648).  A reader tells the two apart by the prefix.
 * Used for Kafka headers in dead letters and for a tool's answer that is
 * not JSON. */
char *sg_text_or_base64(const void *bytes, size_t n);

/* n bytes in standard padded base64, RFC 4648 (caller frees). */
char *sg_base64(const void *bytes, size_t n);
/* "base64:" and n bytes in standard padded base64 (caller frees). */
char *sg_base64_tagged(const void *bytes, size_t n);

/* Decodes 2n lowercase hex digits at s into the n bytes of out; -1 (out
 * then undefined) at the first byte that is not 0-9 or a-f, a NUL
 * included, so s needs no length check beyond its terminator.  The one
 * hex decoder of sagad: trace ids, the users file's hashes, message MACs. */
int sg_hex_decode(const char *s, size_t n, unsigned char *out);

/* ms (Unix time in milliseconds) as UTC text with milliseconds,
 * 2026-11-30T02:40:01.123Z, into out; returns out.  The one way sagad
 * writes a time: its log lines, its events' times. */
char *sg_time_iso(char *out, size_t out_size, int64_t ms);

/* Copies s into out (out_size > 0), cut with sg_utf8_cut; returns out. */
char *sg_text_copy(char *out, size_t out_size, const char *s);

#endif
