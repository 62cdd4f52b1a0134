#include "sagad/sg_alloc.h"
#include "sagad/sg_table.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_text.h"

#define MAX_COLS 32

struct sg_table_s {
    int ncols;
    bool header;
    char **cells; /* header first, then rows, ncols each */
    size_t rows, cap;
};

typedef struct range_s {
    uint32_t lo, hi;
} range_t;

/* Characters a terminal draws in no column: combining marks, zero-width
 * joiners and spaces, variation selectors. */
static const range_t zero_width[] = {
    {0x0300, 0x036F},   {0x0483, 0x0489},   {0x0591, 0x05BD}, {0x0610, 0x061A}, {0x064B, 0x065F},
    {0x0E31, 0x0E31},   {0x0E34, 0x0E3A},   {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x200B, 0x200F},
    {0x2060, 0x2064},   {0x20D0, 0x20FF},   {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF},
    {0x1F3FB, 0x1F3FF}, {0xE0000, 0xE0FFF},
};

/* East Asian Wide and Fullwidth (Unicode's EastAsianWidth W and F), and
 * the emoji blocks shown in emoji presentation by default. */
static const range_t wide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},
    {0x23F0, 0x23F0},   {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x267F, 0x267F},   {0x2693, 0x2693},   {0x26A1, 0x26A1},
    {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},   {0x26CE, 0x26CE},
    {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F3},   {0x26F5, 0x26F5},
    {0x26FA, 0x26FA},   {0x26FD, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},
    {0x2728, 0x2728},   {0x274C, 0x274C},   {0x274E, 0x274E},   {0x2753, 0x2755},
    {0x2757, 0x2757},   {0x2795, 0x2797},   {0x27B0, 0x27B0},   {0x27BF, 0x27BF},
    {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},   {0x2B55, 0x2B55},   {0x2E80, 0x303E},
    {0x3041, 0x33FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
    {0xA960, 0xA97F},   {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE10, 0xFE19},
    {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x16FE0, 0x16FE4},
    {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF}, {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF},
    {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F200, 0x1F202}, {0x1F210, 0x1F23B},
    {0x1F240, 0x1F248}, {0x1F250, 0x1F251}, {0x1F260, 0x1F265}, {0x1F300, 0x1F320},
    {0x1F32D, 0x1F335}, {0x1F337, 0x1F37C}, {0x1F37E, 0x1F393}, {0x1F3A0, 0x1F3CA},
    {0x1F3CF, 0x1F3D3}, {0x1F3E0, 0x1F3F0}, {0x1F3F4, 0x1F3F4}, {0x1F3F8, 0x1F43E},
    {0x1F440, 0x1F440}, {0x1F442, 0x1F4FC}, {0x1F4FF, 0x1F53D}, {0x1F54B, 0x1F54E},
    {0x1F550, 0x1F567}, {0x1F57A, 0x1F57A}, {0x1F595, 0x1F596}, {0x1F5A4, 0x1F5A4},
    {0x1F5FB, 0x1F64F}, {0x1F680, 0x1F6C5}, {0x1F6CC, 0x1F6CC}, {0x1F6D0, 0x1F6D2},
    {0x1F6D5, 0x1F6D7}, {0x1F6EB, 0x1F6EC}, {0x1F6F4, 0x1F6FC}, {0x1F7E0, 0x1F7EB},
    {0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945}, {0x1F947, 0x1F9FF}, {0x1FA70, 0x1FAFF},
    {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

static bool in(const range_t *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* Decodes one character at s: its code point and its length in bytes
 * (a byte that does not start a well-formed character is one character
 * of its own). */
static size_t decode(const unsigned char *s, uint32_t *cp)
{
    size_t n = *s < 0x80 ? 1 : *s >= 0xF0 ? 4 : *s >= 0xE0 ? 3 : *s >= 0xC2 ? 2 : 0;

    if (n <= 1) {
        *cp = *s;
        return 1;
    }
    *cp = *s & (0xFF >> (n + 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = *s;
            return 1;
        }
        *cp = (*cp << 6) | (s[i] & 0x3F);
    }
    return n;
}

static int char_width(uint32_t cp)
{
    if (cp < 0x300)
        return 1;
    if (in(zero_width, sizeof(zero_width) / sizeof(zero_width[0]), cp))
        return 0;
    return in(wide, sizeof(wide) / sizeof(wide[0]), cp) ? 2 : 1;
}

int sg_table_width(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    int w = 0;

    while (*p) {
        uint32_t cp;
        p += decode(p, &cp);
        w += char_width(cp);
    }
    return w;
}

size_t sg_table_fit(const char *s, int cols)
{
    const unsigned char *p = (const unsigned char *)s;
    int w = 0;

    while (*p) {
        uint32_t cp;
        size_t n = decode(p, &cp);
        int cw = char_width(cp);
        if (w + cw > cols)
            break;
        w += cw;
        p += n;
    }
    return (size_t)(p - (const unsigned char *)s);
}

static void push(sg_table_t *t, const char *const *cells)
{
    if (t->rows + 1 > t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->cells = sg_xrealloc(t->cells, t->cap * (size_t)t->ncols * sizeof(*t->cells));
    }
    for (int c = 0; c < t->ncols; c++) {
        char *v = sg_text_visible(cells[c] ? cells[c] : "-", false);
        t->cells[t->rows * (size_t)t->ncols + (size_t)c] = v;
    }
    t->rows++;
}

sg_table_t *sg_table_new(const char *const *header, int ncols)
{
    sg_table_t *t = sg_xcalloc(1, sizeof(*t));

    t->ncols = ncols > MAX_COLS ? MAX_COLS : ncols;
    t->header = header != NULL;
    if (header)
        push(t, header);
    return t;
}

void sg_table_add(sg_table_t *t, const char *const *cells)
{
    push(t, cells);
}

size_t sg_table_rows(const sg_table_t *t)
{
    return t->rows - (t->header ? 1 : 0);
}

static void print_cell(FILE *out, const char *s, int width, int maxw, bool last)
{
    int w = sg_table_width(s);

    if (w > maxw) {
        size_t n = sg_table_fit(s, maxw - 1);
        fprintf(out, "%.*s~", (int)n, s);
        w = sg_table_width(s) - sg_table_width(s + n) + 1;
    } else {
        fputs(s, out);
    }
    if (!last)
        fprintf(out, "%*s", width - w + 2, "");
}

void sg_table_print(const sg_table_t *t, FILE *out, int maxw)
{
    int width[MAX_COLS];

    for (int c = 0; c < t->ncols; c++) {
        width[c] = 0;
        for (size_t r = 0; r < t->rows; r++) {
            int w = sg_table_width(t->cells[r * (size_t)t->ncols + (size_t)c]);
            if (w > width[c])
                width[c] = w;
        }
        if (width[c] > maxw)
            width[c] = maxw;
    }
    for (size_t r = 0; r < t->rows; r++) {
        for (int c = 0; c < t->ncols; c++)
            print_cell(out, t->cells[r * (size_t)t->ncols + (size_t)c], width[c], maxw,
                       c == t->ncols - 1);
        fputc('\n', out);
    }
}

void sg_table_destroy(sg_table_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->rows * (size_t)t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}
