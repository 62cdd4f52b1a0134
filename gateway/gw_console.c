/* The operator console: its files, sign-in and sessions, and the rules of
 * a request a session cookie authenticated (gw_console.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "gw_console.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "sagad/sg_run.h"
#include "sagad/sg_sign.h"

/* No inline script or style anywhere: what an injected string could run
 * is refused by the browser, and the console calls only its own origin. */
#define CSP                                                                                        \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

#define SECRET_CHARS GW_SESSION_SECRET_CHARS

/* ---- the cookie ------------------------------------------------------------ */

/* The session id of the Cookie header into id; false when it has none. */
static bool cookie_id(sg_http_req_t *req, char id[SECRET_CHARS + 1])
{
    const char *c = sg_http_req_header(req, "Cookie");
    size_t nlen = strlen(GW_SESSION_COOKIE);

    while (c && *c) {
        while (*c == ' ' || *c == ';')
            c++;
        if (strncmp(c, GW_SESSION_COOKIE, nlen) == 0 && c[nlen] == '=') {
            size_t n = strcspn(c + nlen + 1, "; ");
            if (n != SECRET_CHARS)
                return false;
            memcpy(id, c + nlen + 1, n);
            id[n] = '\0';
            return true;
        }
        c = strchr(c, ';');
    }
    return false;
}

bool gw_console_session(const gw_t *gw, sg_http_req_t *req, gw_caller_t *caller)
{
    char id[SECRET_CHARS + 1];
    const gw_user_t *user = NULL;

    if (!gw->sessions || !cookie_id(req, id))
        return false;
    if (!gw_session_find(gw->sessions, id, sg_run_now_ms(), false, &user, caller->csrf, NULL))
        return false;
    caller->user = user;
    caller->via = "session";
    return true;
}

/* ---- the rules of a browser's request ----------------------------------------- */

bool gw_console_origin_ok(const gw_t *gw, sg_http_req_t *req, bool *same_origin)
{
    const char *origin = sg_http_req_header(req, "Origin");
    const char *host = sg_http_req_header(req, "Host");
    const char *authority;

    *same_origin = false;
    if (!origin)
        return true;
    for (size_t i = 0; i < gw->norigins; i++)
        if (strcmp(gw->origins[i], origin) == 0)
            return true;
    /* Behind a TLS-terminating proxy the page is https and the gateway
     * plain http: either scheme, unless the gateway speaks TLS itself. */
    if (strncmp(origin, "https://", 8) == 0)
        authority = origin + 8;
    else if (!gw->tls && strncmp(origin, "http://", 7) == 0)
        authority = origin + 7;
    else
        return false;
    *same_origin = host && *host && strcasecmp(authority, host) == 0;
    return *same_origin;
}

static void refuse(sg_http_answer_t *ans, const char *rule, const char *detail)
{
    sg_json_t *extra = sg_json_new_object();

    sg_json_add_str(extra, "rule", rule);
    gw_problem(ans, 403, detail, extra);
}

/* A request that would act for the session's user, from a page of another
 * site: refused whatever it carries. */
static int guard_site(gw_t *gw, sg_http_req_t *req, sg_http_answer_t *ans)
{
    const char *site = sg_http_req_header(req, "Sec-Fetch-Site");
    bool same;

    if (!gw_console_origin_ok(gw, req, &same)) {
        refuse(ans, "console.origin",
               "a console request must come from this gateway's own origin or one of "
               "gateway.allowed_origins (the Origin header)");
        return -1;
    }
    if (site && strcmp(site, "same-origin") && strcmp(site, "none")) {
        refuse(ans, "console.fetch_site",
               "a console request that changes state must be same-origin (Sec-Fetch-Site)");
        return -1;
    }
    return 0;
}

static int guard_csrf(const gw_caller_t *caller, sg_http_req_t *req, sg_http_answer_t *ans)
{
    const char *token = sg_http_req_header(req, "X-CSRF-Token");

    if (!token || strlen(token) != SECRET_CHARS || strlen(caller->csrf) != SECRET_CHARS ||
        !sg_equal_ct(token, caller->csrf, SECRET_CHARS)) {
        refuse(ans, "console.csrf",
               "a console request that changes state must carry the session's CSRF token in "
               "X-CSRF-Token (from POST /console/login or GET /console/session)");
        return -1;
    }
    return 0;
}

int gw_console_guard(gw_t *gw, sg_http_req_t *req, const gw_caller_t *caller, sg_http_answer_t *ans)
{
    const char *method = sg_http_req_method(req);

    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 || strcmp(method, "OPTIONS") == 0)
        return 0;
    if (guard_site(gw, req, ans) < 0 || guard_csrf(caller, req, ans) < 0)
        return -1;
    if (gw->console_read_only) {
        refuse(ans, "console.read_only",
               "the console is read-only on this gateway (console.read_only): use the API with "
               "a bearer token, or sagactl and dlq-tool");
        return -1;
    }
    return 0;
}

/* ---- answers ---------------------------------------------------------------- */

static void security_headers(sg_http_answer_t *ans)
{
    sg_http_answer_header(ans, "Content-Security-Policy", CSP);
    sg_http_answer_header(ans, "X-Content-Type-Options", "nosniff");
    sg_http_answer_header(ans, "Referrer-Policy", "no-referrer");
    sg_http_answer_header(ans, "X-Frame-Options", "DENY");
}

static void set_cookie(const gw_t *gw, sg_http_answer_t *ans, const char *id)
{
    char v[256];

    /* Secure: browsers keep it on http://127.0.0.1 and localhost too. */
    if (id)
        snprintf(v, sizeof(v), "%s=%s; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=%lld",
                 GW_SESSION_COOKIE, id,
                 (long long)(sg_config_int(gw->cfg, "console.session_max_ms") / 1000));
    else
        snprintf(v, sizeof(v), "%s=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0",
                 GW_SESSION_COOKIE);
    sg_http_answer_header(ans, "Set-Cookie", v);
}

static void iso_time(uint64_t wall_ms, char out[32])
{
    time_t t = (time_t)(wall_ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* What the page needs to know of its session: who, may do what, its CSRF
 * token, whether the console is read-only, when it ends. */
static void session_answer(gw_t *gw, sg_http_answer_t *ans, unsigned status, const gw_user_t *user,
                           const char *csrf, uint64_t expires_in_ms)
{
    static const struct {
        unsigned bit;
        const char *name;
    } perms[] = {{GW_P_READ_ALL, "read_all"},
                 {GW_P_READ_OWN, "read_own"},
                 {GW_P_SUBMIT, "submit"},
                 {GW_P_CANCEL_OWN, "cancel_own"},
                 {GW_P_CANCEL_ALL, "cancel_all"},
                 {GW_P_APPROVE, "approve"},
                 {GW_P_DLQ_READ, "dead_letters_read"},
                 {GW_P_DLQ_WRITE, "dead_letters_write"}};
    sg_json_t *doc = sg_json_new_object(), *may = sg_json_new_array();
    char when[32];

    sg_json_add_str(doc, "user", user->name);
    for (size_t i = 0; i < sizeof(perms) / sizeof(perms[0]); i++)
        if (user->perms & perms[i].bit)
            sg_json_append(may, sg_json_new_str(perms[i].name));
    sg_json_add_node(doc, "may", may);
    sg_json_add_str(doc, "csrf_token", csrf);
    sg_json_add_bool(doc, "read_only", gw->console_read_only);
    iso_time((uint64_t)time(NULL) * 1000 + expires_in_ms, when);
    sg_json_add_str(doc, "expires_at", when);
    gw_json(ans, status, doc);
    sg_http_answer_header(ans, "Cache-Control", "no-store");
}

/* The token of a sign-in: JSON {"token": "..."} or a form's token=...;
 * into out, false when there is none. */
static bool login_token(sg_http_req_t *req, char *out, size_t size)
{
    const char *type = sg_http_req_header(req, "Content-Type");
    size_t len;
    const char *body = sg_http_req_body(req, &len);

    out[0] = '\0';
    if (!body || !len)
        return false;
    if (type && strncasecmp(type, "application/x-www-form-urlencoded", 33) == 0) {
        /* A token is base64url: nothing in it is percent-encoded. */
        for (const char *p = body; p && p < body + len;) {
            const char *amp = memchr(p, '&', (size_t)(body + len - p));
            size_t n = amp ? (size_t)(amp - p) : (size_t)(body + len - p);
            if (n > 6 && strncmp(p, "token=", 6) == 0 && n - 6 < size) {
                memcpy(out, p + 6, n - 6);
                out[n - 6] = '\0';
                return true;
            }
            p = amp ? amp + 1 : NULL;
        }
        return false;
    }
    {
        sg_json_t *doc = sg_json_parse(body, len, NULL, NULL);
        const char *t = sg_json_string(sg_json_member(doc, "token"));
        bool ok = t && strlen(t) < size;
        if (ok)
            snprintf(out, size, "%s", t);
        sg_json_destroy(doc);
        return ok;
    }
}

/* Behind an authenticating proxy the person signed in there: the user
 * its header names, from a trusted proxy only (gw_authenticate's rule);
 * NULL otherwise. */
static const gw_user_t *proxied_user(const gw_t *gw, sg_http_req_t *req)
{
    gw_caller_t caller;
    char detail[256];

    if (!sg_http_req_header(req, sg_config_str(gw->cfg, "gateway.proxy_header")) ||
        gw_authenticate(gw, req, &caller, detail, sizeof(detail)) < 0 ||
        strcmp(caller.via, "proxy") != 0)
        return NULL;
    return caller.user;
}

static void login(gw_t *gw, sg_http_req_t *req, sg_http_answer_t *ans)
{
    const char *type = sg_http_req_header(req, "Content-Type");
    bool form = type && strncasecmp(type, "application/x-www-form-urlencoded", 33) == 0;
    char token[256], id[SECRET_CHARS + 1], csrf[SECRET_CHARS + 1], who[96];
    const gw_user_t *user;
    int retry_after;

    /* A sign-in posted by another site's page would sign the victim's
     * browser in as the attacker (login CSRF). */
    if (guard_site(gw, req, ans) < 0)
        return;
    snprintf(who, sizeof(who), "login:%s", sg_http_req_peer(req));
    if (!gw_limiter_take(gw->limiter, who, &retry_after)) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after > 0 ? retry_after : 1);
        gw_problem(ans, 429, "too many sign-ins from this address (gateway.rate_per_s)", NULL);
        sg_http_answer_header(ans, "Retry-After", ra);
        return;
    }
    if (login_token(req, token, sizeof(token))) {
        user = gw_user_by_token(gw->users, token);
        memset(token, 0, sizeof(token));
        if (!user) {
            gw_problem(ans, 401, "the token is not known to this gateway", NULL);
            return;
        }
    } else if (!(user = proxied_user(gw, req))) {
        gw_problem(ans, 400,
                   "send the token: JSON {\"token\": \"sgw_...\"} or a form's token= (or sign in "
                   "through the trusted proxy, gateway.trusted_proxies)",
                   NULL);
        return;
    }
    if (!gw_session_add(gw->sessions, user, sg_run_now_ms(), id, csrf)) {
        gw_problem(ans, 503, "no random source: no session can be made", NULL);
        return;
    }
    sg_log_kv(SG_LOG_INFO, "console sign-in", "principal", user->name, "peer",
              sg_http_req_peer(req), NULL);
    if (form) {
        /* A plain form (no script): back to the console, which asks
         * GET /console/session for its CSRF token. */
        ans->status = 303;
        ans->type = "text/plain; charset=utf-8";
        sg_http_answer_header(ans, "Location", "/");
    } else {
        int64_t idle = sg_config_int(gw->cfg, "console.session_idle_ms"),
                max = sg_config_int(gw->cfg, "console.session_max_ms");
        session_answer(gw, ans, 200, user, csrf, (uint64_t)(idle < max ? idle : max));
    }
    set_cookie(gw, ans, id);
    memset(id, 0, sizeof(id));
}

static void logout(gw_t *gw, sg_http_req_t *req, sg_http_answer_t *ans)
{
    gw_caller_t caller = {0};
    char id[SECRET_CHARS + 1];
    const gw_user_t *user;
    char csrf[SECRET_CHARS + 1];

    if (!gw_console_session(gw, req, &caller)) {
        gw_problem(ans, 401, "no console session to end", NULL);
        set_cookie(gw, ans, NULL);
        return;
    }
    if (guard_site(gw, req, ans) < 0 || guard_csrf(&caller, req, ans) < 0)
        return;
    if (cookie_id(req, id))
        (void)gw_session_find(gw->sessions, id, sg_run_now_ms(), true, &user, csrf, NULL);
    sg_log_kv(SG_LOG_INFO, "console sign-out", "principal", caller.user->name, NULL);
    ans->status = 204;
    ans->type = "text/plain; charset=utf-8";
    set_cookie(gw, ans, NULL);
}

static void session(gw_t *gw, sg_http_req_t *req, sg_http_answer_t *ans)
{
    char id[SECRET_CHARS + 1], csrf[SECRET_CHARS + 1];
    const gw_user_t *user = NULL;
    uint64_t expires_ms = 0;

    if (!cookie_id(req, id) ||
        !gw_session_find(gw->sessions, id, sg_run_now_ms(), false, &user, csrf, &expires_ms)) {
        gw_problem(ans, 401, "no console session: sign in (POST /console/login)", NULL);
        sg_http_answer_header(ans, "Cache-Control", "no-store");
        return;
    }
    session_answer(gw, ans, 200, user, csrf, expires_ms - sg_run_now_ms());
}

/* One of the embedded files, with its ETag; 304 when the browser has it. */
static void file(sg_http_req_t *req, const gw_console_file_t *f, sg_http_answer_t *ans)
{
    const char *inm = sg_http_req_header(req, "If-None-Match");

    sg_http_answer_header(ans, "ETag", f->etag);
    /* The page asks again each time (no-cache) and gets a 304 when nothing
     * changed: a new binary's files are seen at once. */
    sg_http_answer_header(ans, "Cache-Control", "no-cache");
    ans->type = f->type;
    if (inm && strstr(inm, f->etag)) {
        ans->status = 304;
        return;
    }
    ans->status = 200;
    ans->body = sg_xmalloc(f->len + 1);
    memcpy(ans->body, f->data, f->len);
    ans->len = f->len;
}

static const gw_console_file_t *file_of(const char *path)
{
    if (strcmp(path, "/") == 0)
        path = "/index.html";
    for (size_t i = 0; i < gw_console_nfiles; i++)
        if (strcmp(gw_console_files[i].path, path) == 0)
            return &gw_console_files[i];
    return NULL;
}

static void method_not_allowed(sg_http_answer_t *ans, const char *allow)
{
    gw_problem(ans, 405, "this path does not take that method: see Allow", NULL);
    sg_http_answer_header(ans, "Allow", allow);
}

bool gw_console_serve(gw_t *gw, sg_http_req_t *req, sg_http_answer_t *ans, const char **label)
{
    const char *path = sg_http_req_path(req), *method = sg_http_req_method(req);
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    bool post = strcmp(method, "POST") == 0;
    const gw_console_file_t *f;

    if (!gw->sessions)
        return false;
    if (strcmp(path, "/console/login") == 0) {
        *label = "/console/login";
        post ? login(gw, req, ans) : method_not_allowed(ans, "POST");
    } else if (strcmp(path, "/console/logout") == 0) {
        *label = "/console/logout";
        post ? logout(gw, req, ans) : method_not_allowed(ans, "POST");
    } else if (strcmp(path, "/console/session") == 0) {
        *label = "/console/session";
        get ? session(gw, req, ans) : method_not_allowed(ans, "GET, HEAD");
    } else if (strcmp(path, "/") == 0 || strncmp(path, "/assets/", 8) == 0) {
        /* One label for the files: the metrics' series stay few. */
        *label = "/assets/{file}";
        if (!(f = file_of(path)))
            gw_problem(ans, 404, "no such file of the console", NULL);
        else if (!get)
            method_not_allowed(ans, "GET, HEAD");
        else
            file(req, f, ans);
    } else {
        return false;
    }
    security_headers(ans);
    return true;
}
