/* Who is asking, and what may they do: the users file, bearer tokens,
 * trusted proxies and per-principal rate limits (gw.h).
 *
 * A token is 32 random bytes; the file keeps only its SHA-256 (a slow
 * password hash buys nothing against a 256-bit secret, and each request
 * would pay it).  A presented token is hashed and compared with every
 * stored hash in constant time. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "gw_console.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_run.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_text.h"

#define USERS_MAX_BYTES (1024 * 1024)
#define TOKEN_PREFIX    "sgw_"
#define HASH_PREFIX     "sha256:"
#define USER_NAME_MAX   64
#define TOKENS_PER_USER 16

static const struct {
    const char *name;
    unsigned perms;
} roles[] = {
    {"reader", GW_P_READ_ALL | GW_P_DLQ_READ},
    {"submitter", GW_P_SUBMIT | GW_P_READ_OWN | GW_P_CANCEL_OWN},
    {"approver", GW_P_READ_ALL | GW_P_APPROVE},
    {"operator", GW_P_READ_ALL | GW_P_DLQ_READ | GW_P_DLQ_WRITE | GW_P_CANCEL_ALL},
    {"admin", GW_P_READ_ALL | GW_P_READ_OWN | GW_P_SUBMIT | GW_P_CANCEL_OWN | GW_P_CANCEL_ALL |
                  GW_P_APPROVE | GW_P_DLQ_READ | GW_P_DLQ_WRITE},
};

static int bad(char *why, size_t why_size, const char *what, const char *path, const char *rule)
{
    snprintf(why, why_size, "%s: %s: %s", what, path, rule);
    return -1;
}

/* A user's name: as a keyring principal's ([A-Za-z0-9._@:-], 1 to 64). */
static bool user_name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > USER_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || (s[i] && strchr("._@:-", s[i]))))
            return false;
    return true;
}

/* "sha256:<64 lowercase hex>" into out. */
static bool hash_parse(const char *s, unsigned char out[32])
{
    if (strncmp(s, HASH_PREFIX, strlen(HASH_PREFIX)) != 0 || strlen(s) != strlen(HASH_PREFIX) + 64)
        return false;
    return sg_hex_decode(s + strlen(HASH_PREFIX), 32, out) == 0;
}

static int parse_user(gw_user_t *u, const char *name, const sg_json_t *o, const char *what,
                      char *why, size_t why_size)
{
    const sg_json_t *r = sg_json_member(o, "roles"), *t = sg_json_member(o, "tokens"),
                    *tools = sg_json_member(o, "approve_tools");
    char path[160], at[200], cut[41]; /* a key cut never inside a character */

    snprintf(path, sizeof(path), "$.users[\"%s\"]", name);
    if (!sg_json_is_object(o))
        return bad(why, why_size, what, path, "type: expected object");
    for (const sg_json_t *m = sg_json_first(o); m; m = sg_json_next(m)) {
        const char *k = sg_json_key(m);
        if (strcmp(k, "roles") && strcmp(k, "tokens") && strcmp(k, "approve_tools")) {
            snprintf(at, sizeof(at), "%s.%s", path, sg_text_copy(cut, sizeof(cut), k));
            return bad(why, why_size, what, at,
                       "additionalProperties: only roles, tokens and approve_tools");
        }
    }
    u->name = sg_xstrdup(name);
    if (!sg_json_is_array(r) || sg_json_array_size(r) == 0)
        return bad(why, why_size, what, path, "required: roles, a non-empty array");
    for (size_t i = 0; i < sg_json_array_size(r); i++) {
        const char *v = sg_json_string(sg_json_array_get(r, i));
        size_t j = 0;
        while (j < sizeof(roles) / sizeof(roles[0]) && (!v || strcmp(v, roles[j].name)))
            j++;
        if (j == sizeof(roles) / sizeof(roles[0])) {
            snprintf(at, sizeof(at), "%s.roles[%zu]", path, i);
            return bad(why, why_size, what, at,
                       "enum: reader, submitter, approver, operator or admin");
        }
        u->perms |= roles[j].perms;
    }
    if (t) {
        if (!sg_json_is_array(t) || sg_json_array_size(t) > TOKENS_PER_USER)
            return bad(why, why_size, what, path, "tokens: an array of at most 16 hashes");
        u->tokens = sg_xcalloc(sg_json_array_size(t) + 1, sizeof(*u->tokens));
        for (size_t i = 0; i < sg_json_array_size(t); i++) {
            const char *v = sg_json_string(sg_json_array_get(t, i));
            if (!v || !hash_parse(v, u->tokens[u->ntokens])) {
                snprintf(at, sizeof(at), "%s.tokens[%zu]", path, i);
                return bad(why, why_size, what, at,
                           "format: \"sha256:\" and 64 lowercase hex digits (sagad-gateway "
                           "token new prints it); never the token itself");
            }
            u->ntokens++;
        }
    }
    if (tools) {
        size_t n = sg_json_array_size(tools);
        if (!sg_json_is_array(tools) || n == 0 || !(u->perms & GW_P_APPROVE))
            return bad(why, why_size, what, path,
                       "approve_tools: a non-empty array of tool names, with the approver role");
        u->approve_tools = sg_xcalloc(n, sizeof(char *));
        for (size_t i = 0; i < n; i++) {
            const char *v = sg_json_string(sg_json_array_get(tools, i));
            if (!v || !*v) {
                snprintf(at, sizeof(at), "%s.approve_tools[%zu]", path, i);
                return bad(why, why_size, what, at, "type: a tool's name");
            }
            u->approve_tools[u->napprove_tools++] = sg_xstrdup(v);
        }
    }
    return 0;
}

gw_users_t *gw_users_parse(const char *text, size_t len, const char *what, char *why,
                           size_t why_size)
{
    sg_err_t err;
    sg_json_t *doc = sg_json_parse(text, len, NULL, &err);
    const sg_json_t *users;
    gw_users_t *u;
    int64_t v;

    if (!doc) {
        snprintf(why, why_size, "%s: not JSON: %s", what, err.message);
        return NULL;
    }
    u = sg_xcalloc(1, sizeof(*u));
    users = sg_json_member(doc, "users");
    if (!sg_json_is_object(doc) || sg_json_get_int(doc, "$", "v", true, &v, &err) < 0 || v != 1) {
        bad(why, why_size, what, "$.v", "required: 1");
        goto fail;
    }
    for (const sg_json_t *m = sg_json_first(doc); m; m = sg_json_next(m)) {
        if (strcmp(sg_json_key(m), "v") != 0 && strcmp(sg_json_key(m), "users") != 0) {
            bad(why, why_size, what, "$", "additionalProperties: only v and users");
            goto fail;
        }
    }
    if (!sg_json_is_object(users)) {
        bad(why, why_size, what, "$.users", "required: an object of users by name");
        goto fail;
    }
    for (const sg_json_t *m = sg_json_first(users); m; m = sg_json_next(m))
        u->n++;
    u->v = sg_xcalloc(u->n ? u->n : 1, sizeof(*u->v));
    u->n = 0;
    for (const sg_json_t *m = sg_json_first(users); m; m = sg_json_next(m)) {
        if (!user_name_ok(sg_json_key(m))) {
            char at[120], cut[65];
            snprintf(at, sizeof(at), "$.users[\"%s\"]",
                     sg_text_copy(cut, sizeof(cut), sg_json_key(m)));
            bad(why, why_size, what, at, "propertyNames: [A-Za-z0-9._@:-], 1 to 64 characters");
            goto fail;
        }
        if (parse_user(&u->v[u->n++], sg_json_key(m), m, what, why, why_size) < 0)
            goto fail;
    }
    sg_json_destroy(doc);
    return u;
fail:
    sg_json_destroy(doc);
    gw_users_free(u);
    return NULL;
}

gw_users_t *gw_users_load(const char *path, char *why, size_t why_size)
{
    FILE *fp = fopen(path, "rb");
    char *buf;
    size_t n;
    gw_users_t *u;

    if (!fp) {
        snprintf(why, why_size, "cannot open the users file %s (gateway.users): %s", path,
                 strerror(errno));
        return NULL;
    }
    buf = sg_xmalloc(USERS_MAX_BYTES + 1);
    n = fread(buf, 1, USERS_MAX_BYTES + 1, fp);
    fclose(fp);
    if (n > USERS_MAX_BYTES) {
        snprintf(why, why_size, "%s: over %d bytes", path, USERS_MAX_BYTES);
        free(buf);
        return NULL;
    }
    u = gw_users_parse(buf, n, path, why, why_size);
    free(buf);
    return u;
}

void gw_users_free(gw_users_t *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->n; i++) {
        free(u->v[i].name);
        for (size_t j = 0; j < u->v[i].napprove_tools; j++)
            free(u->v[i].approve_tools[j]);
        free(u->v[i].approve_tools);
        free(u->v[i].tokens);
    }
    free(u->v);
    free(u);
}

bool gw_user_may_approve(const gw_user_t *u, const char *tool)
{
    if (!(u->perms & GW_P_APPROVE))
        return false;
    if (!u->approve_tools)
        return true;
    for (size_t i = 0; i < u->napprove_tools; i++)
        if (tool && strcmp(u->approve_tools[i], tool) == 0)
            return true;
    return false;
}

void gw_token_hash_text(const char *token, char hash[72])
{
    unsigned char h[32];

    sg_sha256(token, strlen(token), h);
    memcpy(hash, HASH_PREFIX, strlen(HASH_PREFIX));
    for (size_t i = 0; i < 32; i++)
        snprintf(hash + strlen(HASH_PREFIX) + 2 * i, 3, "%02x", h[i]);
}

void gw_token_new(char token[48], char hash[72])
{
    static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char r[33];
    size_t o = strlen(TOKEN_PREFIX);

    if (sg_random_bytes(r, sizeof(r)) < 0)
        abort(); /* no random source: no token may be made */
    memcpy(token, TOKEN_PREFIX, o);
    /* 264 bits, 6 at a time: 44 characters; the first 43 are kept. */
    for (size_t i = 0; i < 43; i++) {
        size_t bit = i * 6;
        unsigned v = (unsigned)((r[bit / 8] << 8 | r[bit / 8 + 1]) >> (10 - bit % 8)) & 63u;
        token[o++] = b64url[v];
    }
    token[o] = '\0';
    gw_token_hash_text(token, hash);
}

const gw_user_t *gw_user_by_token(const gw_users_t *users, const char *token)
{
    const gw_user_t *found = NULL;
    unsigned char h[32];

    sg_sha256(token, strlen(token), h);
    /* Every stored hash is compared, whatever matched, so the time taken
     * says nothing of which user or how many there are before it. */
    for (size_t i = 0; users && i < users->n; i++)
        for (size_t j = 0; j < users->v[i].ntokens; j++)
            if (sg_equal_ct(users->v[i].tokens[j], h, 32) && !found)
                found = &users->v[i];
    return found;
}

static const gw_user_t *by_name(const gw_users_t *users, const char *name)
{
    for (size_t i = 0; users && i < users->n; i++)
        if (strcmp(users->v[i].name, name) == 0)
            return &users->v[i];
    return NULL;
}

int gw_authenticate(const gw_t *gw, sg_http_req_t *req, gw_caller_t *caller, char *detail,
                    size_t detail_size)
{
    const char *auth = sg_http_req_header(req, "Authorization");
    const char *proxied = sg_http_req_header(req, sg_config_str(gw->cfg, "gateway.proxy_header"));
    const char *peer = sg_http_req_peer(req);

    memset(caller, 0, sizeof(*caller));
    if (proxied) {
        bool trusted = false;
        for (size_t i = 0; i < gw->nproxies; i++)
            trusted = trusted || strcmp(gw->proxies[i], peer) == 0;
        if (trusted) {
            if (!(caller->user = by_name(gw->users, proxied))) {
                snprintf(detail, detail_size,
                         "the proxy authenticated a user the gateway does not know: add it to "
                         "the users file (gateway.users) with its roles");
                return -1;
            }
            caller->via = "proxy";
            return 0;
        }
        /* From anyone else the header is a claim, not an identity: it is
         * ignored, and the request must carry a token of its own. */
    }
    /* A browser's console session, when it carries no token: the rules
     * of such a request (CSRF, Origin, read-only) are gw_console_guard's. */
    if (!auth && gw_console_session(gw, req, caller))
        return 0;
    if (!auth || strncasecmp(auth, "Bearer ", 7) != 0) {
        snprintf(detail, detail_size,
                 "authentication required: send Authorization: Bearer <token> (a token of the "
                 "users file, gateway.users)");
        return -1;
    }
    auth += 7;
    while (*auth == ' ')
        auth++;
    if (!(caller->user = gw_user_by_token(gw->users, auth))) {
        snprintf(detail, detail_size, "the bearer token is not known to this gateway");
        return -1;
    }
    caller->via = "token";
    return 0;
}

/* ---- rate limits ----------------------------------------------------------- */

#define LIMITER_SLOTS 1024

typedef struct bucket_s {
    char who[USER_NAME_MAX + 1];
    double tokens;
    uint64_t at_ms;
} bucket_t;

struct gw_limiter_s {
    pthread_mutex_t mu;
    double per_s, burst;
    bucket_t slots[LIMITER_SLOTS];
};

gw_limiter_t *gw_limiter_new(double per_s, double burst)
{
    gw_limiter_t *l = sg_xcalloc(1, sizeof(*l));

    pthread_mutex_init(&l->mu, NULL);
    l->per_s = per_s;
    l->burst = burst;
    return l;
}

void gw_limiter_free(gw_limiter_t *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->mu);
    free(l);
}

bool gw_limiter_take(gw_limiter_t *l, const char *who, int *retry_after_s)
{
    uint64_t now = sg_run_now_ms(), h = 1469598103934665603ull;
    bucket_t *b = NULL;
    bool ok;

    for (const char *p = who; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    pthread_mutex_lock(&l->mu);
    /* Open addressing over a fixed table: the users are the users file's,
     * a bounded set; a full table shares the last slot probed. */
    for (size_t i = 0; i < LIMITER_SLOTS; i++) {
        b = &l->slots[(h + i) % LIMITER_SLOTS];
        if (!b->who[0] || strcmp(b->who, who) == 0)
            break;
    }
    if (!b->who[0] || strcmp(b->who, who) != 0) {
        snprintf(b->who, sizeof(b->who), "%s", who);
        b->tokens = l->burst;
        b->at_ms = now;
    }
    b->tokens += (double)(now - b->at_ms) * l->per_s / 1000.0;
    if (b->tokens > l->burst)
        b->tokens = l->burst;
    b->at_ms = now;
    ok = b->tokens >= 1.0;
    if (ok)
        b->tokens -= 1.0;
    else
        *retry_after_s = (int)ceil((1.0 - b->tokens) / l->per_s);
    pthread_mutex_unlock(&l->mu);
    return ok;
}
