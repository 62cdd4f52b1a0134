/* sg_table: aligned text tables for people (the CLIs' human output).
 *
 * Cells are shown, never obeyed: control characters and bytes that are
 * not UTF-8 come out as \xHH (sg_text_visible).  Columns are aligned by
 * display width, the columns a terminal gives a character: East Asian
 * wide characters and emoji take two, combining marks none. */
#ifndef SAGAD_TABLE_H
#define SAGAD_TABLE_H

#include <stddef.h>
#include <stdio.h>

typedef struct sg_table_s sg_table_t;

/* The columns a terminal gives the UTF-8 text s (an invalid byte counts
 * as one column, as its \xHH escape would count 4: pass visible text). */
int sg_table_width(const char *s);

/* The longest prefix of s that fits in cols columns, in bytes. */
size_t sg_table_fit(const char *s, int cols);

/* A table of ncols columns (at most 32) under header (copied; NULL: no
 * header line, for label/value pairs).  Aborts on
 * out of memory, like sg_json_new_object. */
sg_table_t *sg_table_new(const char *const *header, int ncols);
/* Adds a row of ncols cells (copied, made visible; NULL shows as "-"). */
void sg_table_add(sg_table_t *t, const char *const *cells);
size_t sg_table_rows(const sg_table_t *t);
/* Writes the header and the rows, two spaces between columns, no space
 * after the last; a cell wider than maxw columns is cut to maxw - 1 and
 * ends in "~". */
void sg_table_print(const sg_table_t *t, FILE *out, int maxw);
/* NULL is a no-op. */
void sg_table_destroy(sg_table_t *t);

#endif
