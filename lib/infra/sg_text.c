#include "sagad/sg_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"

size_t sg_utf8_chars(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

size_t sg_utf8_cut(const char *s, size_t max)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t len = strnlen(s, max), j = len, need;

    /* The last character's first byte, at most 3 bytes back; if that
     * character needs more bytes than are left, it ends the prefix.  This
     * also trims a string that was already cut by bytes (vsnprintf). */
    while (j > 0 && len - j < 4 && (u[j - 1] & 0xc0) == 0x80)
        j--;
    if (j == 0 || (u[j - 1] & 0x80) == 0)
        return len; /* ASCII last, or no lead byte found: nothing to trim */
    j--;            /* u[j] is the lead byte */
    need = (u[j] & 0xe0) == 0xc0 ? 2 : (u[j] & 0xf0) == 0xe0 ? 3 : (u[j] & 0xf8) == 0xf0 ? 4 : 1;
    return len - j < need ? j : len;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int sg_hex_decode(const char *s, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        /* The low digit is not read past a bad (or NUL) high one. */
        int hi = hex_digit(s[2 * i]), lo = hi < 0 ? -1 : hex_digit(s[2 * i + 1]);

        if (lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

char *sg_text_copy(char *out, size_t out_size, const char *s)
{
    size_t n = sg_utf8_cut(s, out_size - 1);

    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

/* Length of the valid UTF-8 character at u (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *u, size_t n)
{
    size_t len = u[0] < 0x80             ? 1
                 : (u[0] & 0xe0) == 0xc0 ? 2
                 : (u[0] & 0xf0) == 0xe0 ? 3
                 : (u[0] & 0xf8) == 0xf0 ? 4
                                         : 0;
    uint32_t cp;

    if (len == 0 || len > n)
        return 0;
    cp = len == 1 ? u[0] : u[0] & (0x7f >> len);
    for (size_t k = 1; k < len; k++) {
        if ((u[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (u[k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0; /* overlong, out of range, surrogate */
    return len;
}

bool sg_utf8_valid(const void *bytes, size_t n)
{
    const unsigned char *u = bytes;

    for (size_t i = 0, len; i < n; i += len)
        if (u[i] == 0 || (len = utf8_len(u + i, n - i)) == 0)
            return false;
    return true;
}

char *sg_base64(const void *bytes, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = bytes;
    char *out = sg_xmalloc(4 * ((n + 2) / 3) + 1), *o = out;

    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

char *sg_base64_tagged(const void *bytes, size_t n)
{
    char *b = sg_base64(bytes, n), *out = sg_xmalloc(strlen(b) + 8);

    memcpy(out, "base64:", 7);
    strcpy(out + 7, b);
    free(b);
    return out;
}

char *sg_text_or_base64(const void *bytes, size_t n)
{
    char *out;

    if (!sg_utf8_valid(bytes, n) || (n >= 7 && memcmp(bytes, "base64:", 7) == 0))
        return sg_base64_tagged(bytes, n);
    out = sg_xmalloc(n + 1);
    memcpy(out, bytes, n);
    out[n] = '\0';
    return out;
}

char *sg_text_visible(const char *s, bool lines)
{
    return sg_text_visible_n(s, strlen(s), lines);
}

char *sg_text_visible_n(const void *bytes, size_t n, bool lines)
{
    const unsigned char *u = bytes;
    size_t o = 0;
    char *out = sg_xmalloc(4 * n + 1);

    for (size_t i = 0; i < n;) {
        size_t len = utf8_len(u + i, n - i);
        bool c1 = len == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0;
        bool ctl =
            len == 1 && (u[i] < 0x20 || u[i] == 0x7f) && !(lines && (u[i] == '\n' || u[i] == '\t'));

        if (len == 0 || ctl || c1) {
            for (size_t k = 0; k < (len ? len : 1); k++)
                o += (size_t)sprintf(out + o, "\\x%02x", u[i + k]);
            i += len ? len : 1;
        } else {
            memcpy(out + o, u + i, len);
            o += len;
            i += len;
        }
    }
    out[o] = '\0';
    return out;
}

char *sg_time_iso(char *out, size_t out_size, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    snprintf(out, out_size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
    return out;
}
