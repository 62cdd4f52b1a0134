/* sg_trust: the internal keys and the keyring (sg_trust.h). */
#include "sagad/sg_trust.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_json.h"
#include "sagad/sg_text.h"

#define CLOCK_SKEW_S      60
#define KEYRING_MAX_BYTES (1024 * 1024)

int sg_trust_mode_parse(const char *s, sg_trust_mode_t *out)
{
    if (strcmp(s, "require") == 0)
        *out = SG_TRUST_REQUIRE;
    else if (strcmp(s, "accept_unsigned") == 0)
        *out = SG_TRUST_ACCEPT_UNSIGNED;
    else if (strcmp(s, "off") == 0)
        *out = SG_TRUST_OFF;
    else
        return -1;
    return 0;
}

bool sg_trust_internal(sg_ctype_t type)
{
    return type == SG_CMD_EXECUTE || type == SG_CMD_COMPENSATE || type == SG_CMD_RELEASE ||
           type == SG_CMD_APPROVAL_TIMEOUT;
}

int sg_trust_keys_load(sg_pg_t *pg, sg_mac_keys_t *keys, sg_err_t *err)
{
    sg_pg_res_t *res = NULL;
    size_t rows;

    memset(keys, 0, sizeof(*keys));
    keys->signer = -1;
    /* Newest first: the first that may sign is the signer. */
    if (sg_pg_exec(pg,
                   "SELECT id, secret, signs_from <= now(), "
                   "(extract(epoch FROM expires_at) * 1000)::bigint FROM internal_keys "
                   "WHERE expires_at IS NULL OR expires_at > now() "
                   "ORDER BY signs_from DESC, id DESC",
                   0, NULL, &res, err) < 0) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.internal_keys",
                   "cannot read the internal keys (table internal_keys): %s; run `migrate` "
                   "(schema 23 or later), and connect as a member of sagad_runtime",
                   err->message);
        return -1;
    }
    rows = sg_pg_res_rows(res);
    for (size_t i = 0; i < rows && keys->n < SG_MAC_KEYS_MAX; i++) {
        size_t len = 0;
        unsigned char *secret = sg_pg_res_bytea(res, i, 1, &len);
        const char *signs = sg_pg_res_get(res, i, 2);
        int rc = sg_mac_keys_add(keys, sg_pg_res_get(res, i, 0), secret, len,
                                 signs && signs[0] == 't', err);
        const char *expires = sg_pg_res_get(res, i, 3);
        int64_t at = expires && *expires ? strtoll(expires, NULL, 10) : 0;

        if (at > 0 && (!keys->expires_ms || at < keys->expires_ms))
            keys->expires_ms = at;

        if (secret)
            memset(secret, 0, len);
        free(secret);
        if (rc < 0) {
            sg_pg_res_destroy(res);
            sg_mac_keys_clear(keys);
            return -1;
        }
    }
    sg_pg_res_destroy(res);
    return 0;
}

/* ---- the keyring ----------------------------------------------------------- */

void sg_keyring_free(sg_keyring_t *kr)
{
    if (!kr)
        return;
    for (size_t i = 0; i < kr->n; i++) {
        for (size_t j = 0; j < kr->p[i].nkeys; j++)
            sg_ed25519_key_free(kr->p[i].keys[j].pkey);
        for (size_t j = 0; j < kr->p[i].napprove_tools; j++)
            free(kr->p[i].approve_tools[j]);
        free(kr->p[i].approve_tools);
    }
    free(kr->p);
    free(kr);
}

static bool name_ok(const char *s, size_t max, const char *extra)
{
    size_t n = strlen(s);

    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(c < 128 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                          (c >= '0' && c <= '9') || (c && strchr(extra, c)))))
            return false;
    }
    return true;
}

static int bad(sg_err_t *err, const char *what, const char *path, const char *rule)
{
    return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.keyring.invalid", "%s: %s: %s", what,
                      path, rule);
}

static int parse_principal(sg_principal_t *p, const sg_json_t *node, const char *what,
                           sg_err_t *err)
{
    char path[200];
    const sg_json_t *keys = sg_json_member(node, "keys");
    const sg_json_t *roles = sg_json_member(node, "roles");
    const sg_json_t *tools = sg_json_member(node, "approve_tools");

    snprintf(path, sizeof(path), "$.principals.%s", p->name);
    if (!sg_json_is_object(node))
        return bad(err, what, path, "type: a principal is an object");
    for (const sg_json_t *m = sg_json_first(node); m; m = sg_json_next(m))
        if (strcmp(sg_json_key(m), "keys") && strcmp(sg_json_key(m), "roles") &&
            strcmp(sg_json_key(m), "approve_tools") && strcmp(sg_json_key(m), "description")) {
            char at[260], cut[41];
            snprintf(at, sizeof(at), "%s.%s", path, sg_text_copy(cut, sizeof(cut), sg_json_key(m)));
            return bad(err, what, at,
                       "additionalProperties: a principal has keys, roles, approve_tools, "
                       "description");
        }
    if (!sg_json_is_object(keys) || !sg_json_first(keys))
        return bad(err, what, path, "required: keys, an object of key id to public key");
    for (const sg_json_t *k = sg_json_first(keys); k; k = sg_json_next(k)) {
        const char *b64 = sg_json_string(k);
        char at[260], cut[41];

        snprintf(at, sizeof(at), "%s.keys.%s", path,
                 sg_text_copy(cut, sizeof(cut), sg_json_key(k)));
        if (p->nkeys == SG_PRINCIPAL_KEYS_MAX)
            return bad(err, what, at, "maxProperties: at most 8 keys a principal");
        if (!name_ok(sg_json_key(k), SG_KEY_ID_MAX, "._-"))
            return bad(err, what, at, "pattern: a key id is [A-Za-z0-9._-]{1,32}");
        if (!b64 ||
            sg_base64_decode_exact(b64, strlen(b64), p->keys[p->nkeys].pub, SG_ED25519_PUBLIC) < 0)
            return bad(err, what, at,
                       "format: an Ed25519 public key, 32 bytes in standard base64 (what "
                       "`sagactl keys new` prints)");
        snprintf(p->keys[p->nkeys].id, sizeof(p->keys[p->nkeys].id), "%s", sg_json_key(k));
        if (!(p->keys[p->nkeys].pkey = sg_ed25519_key_new(p->keys[p->nkeys].pub)))
            return bad(err, what, at, "format: not a valid Ed25519 public key");
        p->nkeys++;
    }
    if (!sg_json_is_array(roles) || sg_json_array_size(roles) == 0)
        return bad(err, what, path, "required: roles, a non-empty array");
    for (size_t i = 0; i < sg_json_array_size(roles); i++) {
        const char *r = sg_json_string(sg_json_array_get(roles, i));
        char at[260];

        snprintf(at, sizeof(at), "%s.roles[%zu]", path, i);
        if (r && strcmp(r, "submit") == 0)
            p->roles |= SG_ROLE_SUBMIT;
        else if (r && strcmp(r, "cancel") == 0)
            p->roles |= SG_ROLE_CANCEL;
        else if (r && strcmp(r, "approve") == 0)
            p->roles |= SG_ROLE_APPROVE;
        else if (r && strcmp(r, "delegate") == 0)
            p->roles |= SG_ROLE_DELEGATE;
        else
            return bad(err, what, at, "enum: submit, cancel, approve or delegate");
    }
    if (tools) {
        size_t n = sg_json_array_size(tools);
        if (!sg_json_is_array(tools) || n == 0 || !(p->roles & SG_ROLE_APPROVE))
            return bad(err, what, path,
                       "approve_tools: a non-empty array of tool names, with the approve role");
        p->approve_tools = sg_xcalloc(n, sizeof(char *));
        for (size_t i = 0; i < n; i++) {
            const char *t = sg_json_string(sg_json_array_get(tools, i));
            char at[260];

            snprintf(at, sizeof(at), "%s.approve_tools[%zu]", path, i);
            if (!t || !*t || strlen(t) > 128)
                return bad(err, what, at, "type: a tool name");
            p->approve_tools[p->napprove_tools++] = sg_xstrdup(t);
        }
    }
    return 0;
}

sg_keyring_t *sg_keyring_parse(const char *text, size_t len, const char *what, sg_err_t *err)
{
    sg_json_limits_t lim = {.max_bytes = KEYRING_MAX_BYTES, .max_depth = 8, .max_nodes = 200000};
    sg_json_t *doc = sg_json_parse(text, len, &lim, err);
    const sg_json_t *ps, *v;
    sg_keyring_t *kr;
    size_t n = 0;

    if (!doc) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.keyring.invalid", "%s: %s", what,
                   err->message);
        return NULL;
    }
    kr = sg_xcalloc(1, sizeof(*kr));
    if (!sg_json_is_object(doc)) {
        bad(err, what, "$", "type: a keyring is an object");
        goto fail;
    }
    v = sg_json_member(doc, "v");
    ps = sg_json_member(doc, "principals");
    for (const sg_json_t *m = sg_json_first(doc); m; m = sg_json_next(m))
        if (strcmp(sg_json_key(m), "v") && strcmp(sg_json_key(m), "principals")) {
            bad(err, what, "$", "additionalProperties: a keyring has v and principals");
            goto fail;
        }
    {
        double dv = 0;
        if (!v || !sg_json_number(v, &dv) || dv != 1) {
            bad(err, what, "$.v", "const: 1");
            goto fail;
        }
    }
    if (!sg_json_is_object(ps)) {
        bad(err, what, "$.principals", "required: an object of principal name to principal");
        goto fail;
    }
    for (const sg_json_t *m = sg_json_first(ps); m; m = sg_json_next(m))
        n++;
    kr->p = sg_xcalloc(n ? n : 1, sizeof(*kr->p));
    for (const sg_json_t *m = sg_json_first(ps); m; m = sg_json_next(m)) {
        sg_principal_t *p = &kr->p[kr->n++];

        if (!name_ok(sg_json_key(m), SG_PRINCIPAL_MAX, "._@:-")) {
            char at[120], cut[65];
            snprintf(at, sizeof(at), "$.principals.%s",
                     sg_text_copy(cut, sizeof(cut), sg_json_key(m)));
            bad(err, what, at, "pattern: a principal is [A-Za-z0-9._@:-]{1,64}");
            goto fail;
        }
        snprintf(p->name, sizeof(p->name), "%s", sg_json_key(m));
        if (parse_principal(p, m, what, err) < 0)
            goto fail;
    }
    sg_json_destroy(doc);
    return kr;
fail:
    sg_json_destroy(doc);
    sg_keyring_free(kr);
    return NULL;
}

sg_keyring_t *sg_keyring_load(const char *path, sg_err_t *err)
{
    FILE *fp = fopen(path, "rb");
    char *buf;
    size_t len;
    sg_keyring_t *kr;

    if (!fp) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.keyring.invalid",
                   "cannot open the keyring %s (security.keyring): %s", path, strerror(errno));
        return NULL;
    }
    buf = sg_xmalloc(KEYRING_MAX_BYTES + 1);
    len = fread(buf, 1, KEYRING_MAX_BYTES + 1, fp);
    fclose(fp);
    if (len > KEYRING_MAX_BYTES) {
        free(buf);
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.keyring.invalid",
                   "the keyring %s is larger than 1 MiB", path);
        return NULL;
    }
    kr = sg_keyring_parse(buf, len, path, err);
    free(buf);
    return kr;
}

const sg_principal_t *sg_keyring_find(const sg_keyring_t *kr, const char *name)
{
    for (size_t i = 0; kr && i < kr->n; i++)
        if (strcmp(kr->p[i].name, name) == 0)
            return &kr->p[i];
    return NULL;
}

bool sg_principal_may_approve(const sg_principal_t *p, const char *tool)
{
    if (!(p->roles & SG_ROLE_APPROVE))
        return false;
    if (!p->approve_tools)
        return true;
    for (size_t i = 0; i < p->napprove_tools; i++)
        if (tool && strcmp(p->approve_tools[i], tool) == 0)
            return true;
    return false;
}

const sg_principal_t *sg_keyring_verify(const sg_keyring_t *kr, const void *value, size_t vlen,
                                        const void *key, size_t key_len, const void *payload,
                                        size_t len, int64_t now_s, int64_t max_age_s, sg_err_t *err)
{
    sg_auth_t a;
    const sg_principal_t *p;
    unsigned char *msg;
    size_t n;
    bool ok = false;

    if (!kr) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.auth.no_keyring",
                   "this worker has no keyring (security.keyring), so no principal can be "
                   "verified; register keys (docs/OPERATIONS.md, \"Keys and principals\")");
        return NULL;
    }
    if (!value) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.auth.unsigned",
                   "the message has no sagad-auth header: sign it with a registered key "
                   "(sagactl --key, or docs/ARCHITECTURE.md, \"Trust boundary\")");
        return NULL;
    }
    if (sg_auth_parse(value, vlen, &a) < 0) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.auth.malformed",
                   "the sagad-auth header is not \"v1 <principal> <key id> <unix time> "
                   "<base64 Ed25519 signature>\"");
        return NULL;
    }
    if (!(p = sg_keyring_find(kr, a.principal))) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.auth.unknown_principal",
                   "principal %s is not in the keyring", a.principal);
        return NULL;
    }
    if (a.ts < now_s - max_age_s || a.ts > now_s + CLOCK_SKEW_S) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.auth.expired",
                   "the signature of %s was made at %lld, %lld s from now; at most %lld s old "
                   "(security.signature_max_age_s) and 60 s ahead are accepted: sign it again",
                   a.principal, (long long)a.ts, (long long)(a.ts - now_s), (long long)max_age_s);
        return NULL;
    }
    msg = sg_auth_message(a.principal, a.key_id, a.ts, key, key_len, payload, len, &n);
    for (size_t i = 0; i < p->nkeys && !ok; i++)
        if (strcmp(p->keys[i].id, a.key_id) == 0)
            ok = sg_ed25519_verify_key(p->keys[i].pkey, msg, n, a.sig);
    free(msg);
    if (!ok) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.auth.bad_signature",
                   "the signature does not verify with key %s of principal %s (unknown key id, "
                   "or the message or its key changed after signing)",
                   a.key_id, a.principal);
        return NULL;
    }
    return p;
}

int sg_signing_key_load(const char *path, sg_signing_key_t *out, char *why, size_t why_size)
{
    char buf[4096];
    FILE *fp = fopen(path, "rb");
    size_t n;
    sg_json_t *doc;
    const char *principal, *key_id, *priv;
    sg_err_t err;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (!fp) {
        snprintf(why, why_size, "cannot open the key %s: %s", path, strerror(errno));
        return -1;
    }
    n = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    doc = sg_json_parse(buf, n, NULL, &err);
    principal = sg_json_string(sg_json_member(doc, "principal"));
    key_id = sg_json_string(sg_json_member(doc, "key_id"));
    priv = sg_json_string(sg_json_member(doc, "private_key"));
    if (!doc || !principal || !key_id || !priv || strlen(principal) > SG_PRINCIPAL_MAX ||
        strlen(key_id) > SG_KEY_ID_MAX ||
        sg_base64_decode_exact(priv, strlen(priv), out->priv, SG_ED25519_PRIVATE) < 0) {
        snprintf(why, why_size,
                 "%s is not a sagad key file ({\"principal\", \"key_id\", \"private_key\"}, "
                 "as `sagactl keys new` writes it)",
                 path);
    } else {
        snprintf(out->principal, sizeof(out->principal), "%s", principal);
        snprintf(out->key_id, sizeof(out->key_id), "%s", key_id);
        rc = 0;
    }
    memset(buf, 0, sizeof(buf));
    sg_json_destroy(doc);
    return rc;
}
