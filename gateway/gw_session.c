/* The console's session table (gw_console.h): bounded, in memory, each
 * session over when idle or old.  The clock is the caller's (now), so the
 * unit tests drive expiry in milliseconds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_console.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_sign.h"

/* What a session needs and nothing more: the user, the CSRF token, its
 * times.  The cookie's id is kept as its SHA-256, so the table (a core
 * dump) holds no usable cookie. */
typedef struct session_s {
    bool used;
    unsigned char id_hash[32];
    const gw_user_t *user;
    char csrf[GW_SESSION_SECRET_CHARS + 1];
    uint64_t created_ms, last_ms;
} session_t;

struct gw_sessions_s {
    pthread_mutex_t mu;
    session_t *v;
    size_t max;
    uint64_t idle_ms, max_ms;
};

gw_sessions_t *gw_sessions_new(size_t max, int64_t idle_ms, int64_t max_ms)
{
    gw_sessions_t *s = sg_xcalloc(1, sizeof(*s));

    pthread_mutex_init(&s->mu, NULL);
    s->v = sg_xcalloc(max, sizeof(*s->v));
    s->max = max;
    s->idle_ms = (uint64_t)idle_ms;
    s->max_ms = (uint64_t)max_ms;
    return s;
}

void gw_sessions_free(gw_sessions_t *s)
{
    if (!s)
        return;
    memset(s->v, 0, s->max * sizeof(*s->v));
    free(s->v);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* nchars of base64url from the random source; false when there is none. */
static bool random_text(char *out, size_t nchars)
{
    static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char r[64];

    if (nchars > sizeof(r) || sg_random_bytes(r, nchars) < 0)
        return false;
    /* One byte a character, 6 of its bits: 258 bits for 43 characters. */
    for (size_t i = 0; i < nchars; i++)
        out[i] = b64url[r[i] & 63u];
    out[nchars] = '\0';
    memset(r, 0, sizeof(r));
    return true;
}

static bool expired(const gw_sessions_t *s, const session_t *e, uint64_t now)
{
    return now - e->last_ms > s->idle_ms || now - e->created_ms > s->max_ms;
}

bool gw_session_add(gw_sessions_t *s, const gw_user_t *user, uint64_t now,
                    char id[GW_SESSION_SECRET_CHARS + 1], char csrf[GW_SESSION_SECRET_CHARS + 1])
{
    session_t *slot = NULL;

    if (!random_text(id, GW_SESSION_SECRET_CHARS) || !random_text(csrf, GW_SESSION_SECRET_CHARS))
        return false;
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->max; i++) {
        session_t *e = &s->v[i];
        if (!e->used || expired(s, e, now)) {
            slot = e;
            break;
        }
        if (!slot || e->last_ms < slot->last_ms)
            slot = e;
    }
    if (!slot) { /* max is at least 1 (console.max_sessions) */
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    memset(slot, 0, sizeof(*slot));
    slot->used = true;
    sg_sha256(id, strlen(id), slot->id_hash);
    slot->user = user;
    snprintf(slot->csrf, sizeof(slot->csrf), "%s", csrf);
    slot->created_ms = slot->last_ms = now;
    pthread_mutex_unlock(&s->mu);
    return true;
}

bool gw_session_find(gw_sessions_t *s, const char *id, uint64_t now, bool drop,
                     const gw_user_t **user, char csrf[GW_SESSION_SECRET_CHARS + 1],
                     uint64_t *expires_ms)
{
    unsigned char h[32];
    session_t *found = NULL;

    sg_sha256(id, strlen(id), h);
    pthread_mutex_lock(&s->mu);
    /* Every slot is compared, so the time says nothing of where it is. */
    for (size_t i = 0; i < s->max; i++)
        if (sg_equal_ct(s->v[i].id_hash, h, 32) && s->v[i].used && !found)
            found = &s->v[i];
    if (found && expired(s, found, now)) {
        memset(found, 0, sizeof(*found));
        found = NULL;
    }
    if (found) {
        *user = found->user;
        snprintf(csrf, GW_SESSION_SECRET_CHARS + 1, "%s", found->csrf);
        found->last_ms = now;
        if (expires_ms) {
            uint64_t idle = now + s->idle_ms, abs = found->created_ms + s->max_ms;
            *expires_ms = idle < abs ? idle : abs;
        }
        if (drop)
            memset(found, 0, sizeof(*found));
    }
    pthread_mutex_unlock(&s->mu);
    return found != NULL;
}
