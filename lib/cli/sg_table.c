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

/* ---- JSON rows ----------------------------------------------------------- */

/* Days since 1970-01-01 of a date of the proleptic Gregorian calendar
 * (the civil-from-days inverse): no time zone and no libc involved. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int *y, int *m, int *d)
{
    int64_t era, doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

/* The zone offset at p: "+HH", "+HH:MM" or "+HH:MM:SS" (or "-"), then the
 * end; seconds east of UTC, or false. */
static bool zone_offset(const char *p, int64_t *east)
{
    int h = 0, mi = 0, se = 0, n = 0;
    int sign = *p == '+' ? 1 : *p == '-' ? -1 : 0;

    if (!sign || sscanf(p + 1, "%2d%n", &h, &n) != 1 || n != 2)
        return false;
    p += 3;
    if (*p == ':' && (sscanf(p + 1, "%2d%n", &mi, &n) != 1 || n != 2))
        return false;
    if (*p == ':')
        p += 3;
    if (*p == ':' && (sscanf(p + 1, "%2d%n", &se, &n) != 1 || n != 2))
        return false;
    if (*p == ':')
        p += 3;
    *east = sign * (h * 3600 + mi * 60 + se);
    return *p == '\0';
}

bool sg_table_time_utc(const char *text, bool ms, char *out, size_t out_size)
{
    int y, mo, d, h, mi, se, n = 0, milli = 0, digits = 0;
    const char *p;
    int64_t east, t;

    if (sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &se, &n) != 6 || n != 19) {
        snprintf(out, out_size, "%s", text);
        return false;
    }
    p = text + n;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            if (digits++ < 3)
                milli = milli * 10 + (*p - '0');
    for (; digits < 3; digits++)
        milli *= 10; /* ".5" is 500 ms */
    if (!zone_offset(p, &east)) {
        snprintf(out, out_size, "%s", text);
        return false;
    }
    t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - east;
    civil_from_days(t >= 0 ? t / 86400 : (t - 86399) / 86400, &y, &mo, &d);
    t = ((t % 86400) + 86400) % 86400;
    if (ms)
        snprintf(out, out_size, "%04d-%02d-%02d %02d:%02d:%02d.%03d", y, mo, d, (int)(t / 3600),
                 (int)(t / 60 % 60), (int)(t % 60), milli);
    else
        snprintf(out, out_size, "%04d-%02d-%02d %02d:%02d:%02d", y, mo, d, (int)(t / 3600),
                 (int)(t / 60 % 60), (int)(t % 60));
    return true;
}

void sg_table_age(double seconds, char *out, size_t out_size)
{
    bool neg = seconds < 0;
    int64_t s = (int64_t)(neg ? -seconds : seconds), days = s / 86400;
    char hms[32];

    snprintf(hms, sizeof(hms), "%02d:%02d:%02d", (int)(s / 3600 % 24), (int)(s / 60 % 60),
             (int)(s % 60));
    if (days)
        snprintf(out, out_size, "%s%lld day%s %s", neg ? "-" : "", (long long)days,
                 days == 1 ? "" : "s", hms);
    else
        snprintf(out, out_size, "%s%s", neg ? "-" : "", hms);
}

/* The member at path "a" or "a.b" of row; NULL when absent. */
static const sg_json_t *member_at(const sg_json_t *row, const char *path, size_t len)
{
    const char *dot = memchr(path, '.', len);
    char name[64];
    size_t n = dot ? (size_t)(dot - path) : len;

    if (n >= sizeof(name))
        return NULL;
    memcpy(name, path, n);
    name[n] = '\0';
    row = sg_json_member(row, name);
    return dot && row ? member_at(row, dot + 1, len - n - 1) : row;
}

/* One member's text as cell says; NULL for null or absent. */
static char *one_cell(const sg_json_t *v, sg_cell_t cell)
{
    const char *str = sg_json_string(v);
    char buf[64], *text;
    double num;

    if (!v || sg_json_is_null(v))
        return NULL;
    if ((cell == SG_CELL_TIME || cell == SG_CELL_TIME_MS) && str) {
        sg_table_time_utc(str, cell == SG_CELL_TIME_MS, buf, sizeof(buf));
        return sg_xstrdup(str && strlen(str) >= sizeof(buf) ? str : buf);
    }
    if (cell == SG_CELL_AGE && sg_json_number(v, &num)) {
        sg_table_age(num, buf, sizeof(buf));
        return sg_xstrdup(buf);
    }
    text = str ? sg_xstrdup(str) : sg_json_print(v);
    for (char *p = text; cell == SG_CELL_LINE && *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    return text;
}

char *sg_table_cell(const sg_json_t *row, const char *key, sg_cell_t cell)
{
    char *joined = NULL;

    while (key && *key) {
        size_t n = strcspn(key, " ");
        char *part = one_cell(member_at(row, key, n), cell);

        if (!part) {
            free(joined);
            return NULL;
        }
        if (joined) {
            size_t len = strlen(joined);
            joined = sg_xrealloc(joined, len + strlen(part) + 2);
            joined[len] = ' ';
            strcpy(joined + len + 1, part);
            free(part);
        } else {
            joined = part;
        }
        key += n + (key[n] == ' ');
    }
    return joined;
}

sg_table_t *sg_table_new_cols(const sg_table_col_t *cols)
{
    const char *header[MAX_COLS];
    int n = 0;

    while (cols[n].header && n < MAX_COLS) {
        header[n] = cols[n].header;
        n++;
    }
    return sg_table_new(header, n);
}

void sg_table_add_json(sg_table_t *t, const sg_table_col_t *cols, const sg_json_t *row)
{
    char *cells[MAX_COLS];

    for (int c = 0; c < t->ncols; c++)
        cells[c] = sg_table_cell(row, cols[c].key, cols[c].cell);
    sg_table_add(t, (const char *const *)cells);
    for (int c = 0; c < t->ncols; c++)
        free(cells[c]);
}

void sg_table_print_rows(FILE *out, const sg_table_col_t *cols, const sg_json_t *rows, int maxw)
{
    sg_table_t *t = sg_table_new_cols(cols);

    for (const sg_json_t *r = sg_json_first(rows); r; r = sg_json_next(r))
        sg_table_add_json(t, cols, r);
    sg_table_print(t, out, maxw);
    sg_table_destroy(t);
}
