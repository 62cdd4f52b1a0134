/* The console's session table (gateway/gw_session.c) on a clock the test
 * turns: a session is found by its cookie id only, ends when idle or old
 * whichever comes first, ends on logout, and a full table gives up the
 * session used least recently; ids and CSRF tokens are random. */
#include <criterion/criterion.h>
#include <string.h>

#include "../../gateway/gw_console.h"

#define IDLE 1000
#define MAX  5000

static gw_user_t ann = {.name = "ann"}, bob = {.name = "bob"};

typedef struct made_s {
    char id[GW_SESSION_SECRET_CHARS + 1], csrf[GW_SESSION_SECRET_CHARS + 1];
} made_t;

static made_t add(gw_sessions_t *s, const gw_user_t *u, uint64_t now)
{
    made_t m;

    cr_assert(gw_session_add(s, u, now, m.id, m.csrf));
    return m;
}

/* The user of id at now, NULL when there is no live session. */
static const gw_user_t *who(gw_sessions_t *s, const char *id, uint64_t now, char *csrf)
{
    const gw_user_t *u = NULL;
    char c[GW_SESSION_SECRET_CHARS + 1];

    if (!gw_session_find(s, id, now, false, &u, csrf ? csrf : c, NULL))
        return NULL;
    return u;
}

Test(session, ids_and_csrf_tokens_are_random_base64url_of_43_characters)
{
    gw_sessions_t *s = gw_sessions_new(8, IDLE, MAX);
    made_t a = add(s, &ann, 0), b = add(s, &ann, 0);

    cr_assert_eq(strlen(a.id), 43);
    cr_assert_eq(strlen(a.csrf), 43);
    cr_assert_eq(strspn(a.id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
                 43);
    cr_assert_str_neq(a.id, b.id);
    cr_assert_str_neq(a.id, a.csrf);
    cr_assert_str_neq(a.csrf, b.csrf);
    gw_sessions_free(s);
    gw_sessions_free(NULL);
}

Test(session, found_by_its_id_only_with_its_own_csrf_token)
{
    gw_sessions_t *s = gw_sessions_new(8, IDLE, MAX);
    made_t a = add(s, &ann, 0), b = add(s, &bob, 0);
    char csrf[GW_SESSION_SECRET_CHARS + 1];
    char wrong[GW_SESSION_SECRET_CHARS + 1];

    cr_assert_eq(who(s, a.id, 10, csrf), &ann);
    cr_assert_str_eq(csrf, a.csrf);
    cr_assert_eq(who(s, b.id, 10, csrf), &bob);
    cr_assert_str_eq(csrf, b.csrf);
    /* The CSRF token is no cookie, and a changed id finds nothing. */
    cr_assert_null(who(s, a.csrf, 10, NULL));
    memcpy(wrong, a.id, sizeof(wrong));
    wrong[0] = wrong[0] == 'A' ? 'B' : 'A';
    cr_assert_null(who(s, wrong, 10, NULL));
    gw_sessions_free(s);
}

Test(session, idle_ends_it_and_use_keeps_it_until_the_absolute_limit)
{
    gw_sessions_t *s = gw_sessions_new(8, IDLE, MAX);
    made_t a = add(s, &ann, 0), b = add(s, &bob, 0);
    const gw_user_t *u;
    char csrf[GW_SESSION_SECRET_CHARS + 1];
    uint64_t expires = 0;

    /* ann is used every 900 ms: alive past IDLE, up to MAX, not after. */
    for (uint64_t t = 900; t <= MAX; t += 900)
        cr_assert_eq(who(s, a.id, t, NULL), &ann, "at %llu ms", (unsigned long long)t);
    cr_assert(gw_session_find(s, a.id, 4900, false, &u, csrf, &expires));
    cr_assert_eq(expires, MAX, "the absolute limit comes before the idle one");
    cr_assert_null(who(s, a.id, MAX + 1, NULL));
    /* bob, unused since 0, ended at IDLE; asking later does not revive it. */
    cr_assert_null(who(s, b.id, IDLE + 1, NULL));
    cr_assert_null(who(s, b.id, 0, NULL));
    gw_sessions_free(s);
}

Test(session, logout_drops_it)
{
    gw_sessions_t *s = gw_sessions_new(8, IDLE, MAX);
    made_t a = add(s, &ann, 0);
    const gw_user_t *u;
    char csrf[GW_SESSION_SECRET_CHARS + 1];

    cr_assert(gw_session_find(s, a.id, 1, true, &u, csrf, NULL));
    cr_assert_null(who(s, a.id, 2, NULL));
    gw_sessions_free(s);
}

Test(session, a_full_table_gives_up_the_session_used_least_recently)
{
    gw_sessions_t *s = gw_sessions_new(2, IDLE, MAX);
    made_t a = add(s, &ann, 0), b = add(s, &bob, 10), c;

    cr_assert_eq(who(s, a.id, 20, NULL), &ann); /* ann used last: bob goes */
    c = add(s, &ann, 30);
    cr_assert_null(who(s, b.id, 40, NULL));
    cr_assert_eq(who(s, a.id, 40, NULL), &ann);
    cr_assert_eq(who(s, c.id, 40, NULL), &ann);
    /* An expired session's slot is taken first, whoever was used last. */
    c = add(s, &bob, 40 + IDLE + 1);
    cr_assert_eq(who(s, c.id, 40 + IDLE + 2, NULL), &bob);
    gw_sessions_free(s);
}
