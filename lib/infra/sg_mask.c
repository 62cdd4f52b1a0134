#define _GNU_SOURCE /* strcasestr */
#include "sagad/sg_mask.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_SECRETS 64
#define MAX_SPANS   64

/* Append-only: a reader sees a slot only after its count was published. */
static char *secrets[MAX_SECRETS];
static atomic_size_t nsecrets;
static pthread_mutex_t secrets_mu = PTHREAD_MUTEX_INITIALIZER;

/* Keywords whose value is a secret, matched case-insensitively. */
static const char *const secret_words[] = {"password", "passwd", "secret", "token",
                                           "key.pem",  "apikey", "api_key"};

void sg_mask_add_secret(const char *value)
{
    size_t n;

    if (!value || strlen(value) < SG_MASK_MIN_LITERAL)
        return;
    pthread_mutex_lock(&secrets_mu);
    n = atomic_load(&nsecrets);
    for (size_t i = 0; i < n; i++)
        if (strcmp(secrets[i], value) == 0)
            goto out;
    if (n < MAX_SECRETS && (secrets[n] = strdup(value)) != NULL)
        atomic_store(&nsecrets, n + 1);
out:
    pthread_mutex_unlock(&secrets_mu);
}

int sg_mask_key_is_secret(const char *key)
{
    for (size_t i = 0; i < sizeof(secret_words) / sizeof(secret_words[0]); i++)
        if (strcasestr(key, secret_words[i]))
            return 1;
    return 0;
}

typedef struct span_s {
    size_t from, to;
} span_t;

typedef struct spans_s {
    span_t v[MAX_SPANS];
    size_t n;
    size_t cut; /* past MAX_SPANS: everything from here on is masked */
} spans_t;

static void span_add(spans_t *s, size_t from, size_t to)
{
    if (to <= from)
        return;
    if (s->n == MAX_SPANS) {
        /* Too many to track: hide the rest rather than risk a leak. */
        if (from < s->cut)
            s->cut = from;
        return;
    }
    s->v[s->n].from = from;
    s->v[s->n].to = to;
    s->n++;
}

/* scheme://user:SECRET@host: the span of SECRET for each URL in s.  The
 * userinfo ends at the authority's last '@': a password with an '@' of
 * its own (not percent-encoded, as people write them) is hidden whole. */
static void find_userinfo(const char *s, spans_t *out)
{
    for (const char *p = strstr(s, "://"); p; p = strstr(p + 3, "://")) {
        const char *user = p + 3, *at = NULL, *colon;
        size_t len = strcspn(user, "/?# \t\n\"'");

        for (const char *q = user; q < user + len; q++)
            if (*q == '@')
                at = q;
        if (!at)
            continue;
        colon = memchr(user, ':', (size_t)(at - user));
        if (colon)
            span_add(out, (size_t)(colon + 1 - s), (size_t)(at - s));
    }
}

/* End of a value starting at v: a quoted string (with backslash escapes)
 * or a run up to a separator. */
static const char *value_end(const char *v)
{
    if (*v == '\'' || *v == '"') {
        char q = *v;
        for (v++; *v && *v != q; v++)
            if (*v == '\\' && v[1])
                v++;
        return *v ? v + 1 : v;
    }
    return v + strcspn(v, " \t\r\n&,;\"'}");
}

/* KEYWORD[name chars]["] *(=|:) *VALUE: the span of VALUE. */
static void find_keyword(const char *s, const char *word, spans_t *out)
{
    size_t wlen = strlen(word);

    for (const char *p = strcasestr(s, word); p; p = strcasestr(p + 1, word)) {
        const char *v = p + wlen, *end;

        v += strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-");
        if (*v == '"')
            v++;
        v += strspn(v, " ");
        if (*v != '=' && *v != ':')
            continue;
        v++;
        v += strspn(v, " ");
        end = value_end(v);
        span_add(out, (size_t)(v - s), (size_t)(end - s));
    }
}

/* "Bearer X", "Basic X": the span of X. */
static void find_scheme_token(const char *s, const char *scheme, spans_t *out)
{
    size_t len = strlen(scheme);

    for (const char *p = strcasestr(s, scheme); p; p = strcasestr(p + 1, scheme)) {
        const char *v = p + len;

        if (p > s && isalnum((unsigned char)p[-1]))
            continue;
        span_add(out, (size_t)(v - s), (size_t)(value_end(v) - s));
    }
}

static void find_literals(const char *s, spans_t *out)
{
    size_t n = atomic_load(&nsecrets);

    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(secrets[i]);
        for (const char *p = strstr(s, secrets[i]); p; p = strstr(p + len, secrets[i]))
            span_add(out, (size_t)(p - s), (size_t)(p - s) + len);
    }
}

static int cmp_span(const void *a, const void *b)
{
    const span_t *x = a, *y = b;

    return x->from < y->from ? -1 : x->from > y->from;
}

/* Appends len bytes of src to out at *n, leaving room for the NUL. */
static void put(char *out, size_t out_size, size_t *n, const char *src, size_t len)
{
    if (*n + len >= out_size)
        len = out_size - 1 - *n;
    memcpy(out + *n, src, len);
    *n += len;
}

size_t sg_mask(const char *in, char *out, size_t out_size)
{
    spans_t spans;
    size_t n = 0, pos = 0, len = strlen(in);

    if (out_size == 0)
        return 0;
    spans.n = 0;
    spans.cut = len;
    find_literals(in, &spans);
    find_userinfo(in, &spans);
    for (size_t i = 0; i < sizeof(secret_words) / sizeof(secret_words[0]); i++)
        find_keyword(in, secret_words[i], &spans);
    find_scheme_token(in, "bearer ", &spans);
    find_scheme_token(in, "basic ", &spans);
    qsort(spans.v, spans.n, sizeof(spans.v[0]), cmp_span);
    for (size_t i = 0; i < spans.n && spans.v[i].from < spans.cut; i++) {
        span_t sp = spans.v[i];
        if (sp.to <= pos)
            continue; /* inside a span already masked */
        if (sp.from > pos)
            put(out, out_size, &n, in + pos, sp.from - pos);
        put(out, out_size, &n, SG_MASK, strlen(SG_MASK));
        pos = sp.to;
    }
    if (pos < spans.cut)
        put(out, out_size, &n, in + pos, spans.cut - pos);
    if (spans.cut < len && (pos < len))
        put(out, out_size, &n, SG_MASK, strlen(SG_MASK));
    out[n] = '\0';
    return n;
}

/* The spans find_keyword and find_userinfo see in a DSN are its secrets. */
void sg_mask_add_dsn(const char *dsn)
{
    spans_t spans;
    char buf[1024];

    spans.n = 0;
    spans.cut = strlen(dsn);
    find_userinfo(dsn, &spans);
    find_keyword(dsn, "password", &spans);
    for (size_t i = 0; i < spans.n; i++) {
        size_t from = spans.v[i].from, to = spans.v[i].to;
        /* A quoted value is known by its inside too. */
        if (to - from >= 2 && (dsn[from] == '\'' || dsn[from] == '"')) {
            from++;
            to--;
        }
        if (to - from < sizeof(buf)) {
            memcpy(buf, dsn + from, to - from);
            buf[to - from] = '\0';
            sg_mask_add_secret(buf);
        }
    }
}
