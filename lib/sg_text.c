#include "sagad/sg_text.h"

#include <string.h>

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

char *sg_text_copy(char *out, size_t out_size, const char *s)
{
    size_t n = sg_utf8_cut(s, out_size - 1);

    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}
