/* sg_table: aligned text tables for people (the CLIs' human output), and
 * the cells of the JSON rows the operator queries return (sg_ops.h): the
 * one renderer of sagactl, dlq-tool and sagad-relay status.
 *
 * Cells are shown, never obeyed: control characters and bytes that are
 * not UTF-8 come out as \xHH (sg_text_visible).  Columns are aligned by
 * display width, the columns a terminal gives a character: East Asian
 * Wide and Fullwidth characters and emoji take two, combining marks and
 * zero-width characters none, everything else one.
 *
 * Why a table of ranges of our own and not wcwidth(3): wcwidth answers
 * from the C library's locale data, and only after setlocale() with a
 * UTF-8 locale, which the container image does not have (it has C and
 * POSIX), a cron job's environment may not set, and glibc versions answer
 * differently for the same character.  The output of a command must not
 * depend on where it runs: the same rows give the same bytes in a
 * terminal, a pipe and a test.  The ranges (Unicode's EastAsianWidth W and
 * F, the emoji shown wide by default, and the combining marks) are the
 * ones terminals draw. */
#ifndef SAGAD_TABLE_H
#define SAGAD_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sagad/sg_json.h"

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

/* How a member of a JSON row is shown in a cell. */
typedef enum sg_cell_e {
    SG_CELL_TEXT,    /* a string as it is; a number, true, false, an object or
                        an array as JSON writes it; null or absent: "-" */
    SG_CELL_LINE,    /* TEXT on one line: line breaks and tabs as spaces */
    SG_CELL_TIME,    /* a timestamp in UTC, "2026-11-21 07:49:01" */
    SG_CELL_TIME_MS, /* the same to the millisecond, "2026-11-21 07:49:01.123" */
    SG_CELL_AGE,     /* seconds as an age, "00:04:05" or "2 days 03:04:05" */
} sg_cell_t;

/* A column of a table of JSON rows: its header, the member it shows and
 * how.  key names a member ("status"), a member of a member
 * ("at_step.name"), or several joined by a space ("step step_name"),
 * absent as soon as one of them is. */
typedef struct sg_table_col_s {
    const char *header;
    const char *key;
    sg_cell_t cell;
} sg_table_col_t;

/* The text of key of row shown as cell says (caller frees); NULL when it
 * is null or absent (or key is NULL: a column the caller fills). */
char *sg_table_cell(const sg_json_t *row, const char *key, sg_cell_t cell);

/* A table whose header line is the headers of cols (ending with {NULL}). */
sg_table_t *sg_table_new_cols(const sg_table_col_t *cols);
/* Adds the JSON object row as a line of cols. */
void sg_table_add_json(sg_table_t *t, const sg_table_col_t *cols, const sg_json_t *row);
/* Writes every object of the array rows as a table of cols. */
void sg_table_print_rows(FILE *out, const sg_table_col_t *cols, const sg_json_t *rows, int maxw);

/* A timestamp as PostgreSQL's JSON writes one, in its session's time zone
 * ("2026-11-21T08:49:01.123456+01:00"), into out in UTC, to the second
 * ("2026-11-21 07:49:01") or with ms to the millisecond (cut, not
 * rounded).  false when text is not one (infinity, a year BC): out holds
 * text as it is. */
bool sg_table_time_utc(const char *text, bool ms, char *out, size_t out_size);
/* A number of seconds as an age: "00:04:05", "1 day 00:00:01", "3 days
 * 02:00:00" (whole seconds, cut; "-" before a negative one). */
void sg_table_age(double seconds, char *out, size_t out_size);

#endif
