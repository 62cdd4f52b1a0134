/* sg_sign: HMAC-SHA256 of internal commands and Ed25519 signatures of
 * principals, through OpenSSL's EVP and HMAC one-shot calls. */
#include "sagad/sg_sign.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_text.h"

static const char MAC_TAG[] = "sagad-mac-v1";
static const char AUTH_TAG[] = "sagad-auth-v1";

/* ---- sagad-mac ----------------------------------------------------------- */

static bool mac_id_ok(const char *id, size_t n)
{
    if (n == 0 || n > SG_MAC_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)id[i]) || isdigit((unsigned char)id[i])))
            return false;
    return true;
}

/* The HMAC algorithm, fetched once: a fetch looks it up in OpenSSL's
 * provider tables, which cost more than the MAC of a step command. */
static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
    hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

/* An HMAC-SHA256 context keyed with secret, NULL on failure. */
static EVP_MAC_CTX *keyed_ctx(const unsigned char *secret, size_t len)
{
    OSSL_PARAM params[2];
    EVP_MAC_CTX *ctx;

    pthread_once(&hmac_once, hmac_fetch);
    ctx = hmac_alg ? EVP_MAC_CTX_new(hmac_alg) : NULL;
    params[0] = OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    if (ctx && EVP_MAC_init(ctx, secret, len, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

void sg_mac_keys_clear(sg_mac_keys_t *keys)
{
    for (size_t i = 0; i < keys->n; i++)
        EVP_MAC_CTX_free(keys->keys[i].ctx);
    OPENSSL_cleanse(keys, sizeof(*keys));
    keys->signer = -1;
}

int sg_mac_keys_add(sg_mac_keys_t *keys, const char *id, const void *secret, size_t len,
                    bool signer, sg_err_t *err)
{
    sg_mac_key_t *k;
    char cut[33];

    if (!mac_id_ok(id, strlen(id)))
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.internal_key.invalid",
                          "internal key id \"%s\" must match [a-z0-9]{1,16}",
                          sg_text_copy(cut, sizeof(cut), id));
    if (len < 32 || len > SG_MAC_SECRET_MAX)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.internal_key.invalid",
                          "internal key %s has %zu bytes of secret; it needs 32 to %d", id, len,
                          SG_MAC_SECRET_MAX);
    if (keys->n == SG_MAC_KEYS_MAX)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.internal_key.invalid",
                          "more than %d internal keys are live at once: let the old ones expire",
                          SG_MAC_KEYS_MAX);
    k = &keys->keys[keys->n];
    snprintf(k->id, sizeof(k->id), "%s", id);
    memcpy(k->secret, secret, len);
    k->len = len;
    if (!(k->ctx = keyed_ctx(k->secret, len))) {
        OPENSSL_cleanse(k, sizeof(*k));
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.crypto",
                          "OpenSSL could not make an HMAC-SHA256 context");
    }
    if (signer && keys->signer < 0)
        keys->signer = (int)keys->n;
    keys->n++;
    return 0;
}

static void put_u32(unsigned char *p, size_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* HMAC-SHA256 of tag, topic, key (each length-prefixed) and payload. */
static bool mac_compute(const sg_mac_key_t *k, const char *topic, const void *key, size_t key_len,
                        const void *payload, size_t len, unsigned char out[32])
{
    unsigned char pre[4];
    size_t tlen = strlen(topic), got = 0;
    /* A copy of the keyed context: the key's own blocks are hashed once,
     * when the key is added, not per message. */
    EVP_MAC_CTX *ctx = k->ctx ? EVP_MAC_CTX_dup(k->ctx) : NULL;
    bool ok = ctx && EVP_MAC_update(ctx, (const unsigned char *)MAC_TAG, sizeof(MAC_TAG) - 1) == 1;

    put_u32(pre, tlen);
    ok = ok && EVP_MAC_update(ctx, pre, 4) == 1 &&
         EVP_MAC_update(ctx, (const unsigned char *)topic, tlen) == 1;
    put_u32(pre, key_len);
    ok = ok && EVP_MAC_update(ctx, pre, 4) == 1 &&
         (key_len == 0 || EVP_MAC_update(ctx, key, key_len) == 1) &&
         (len == 0 || EVP_MAC_update(ctx, payload, len) == 1) &&
         EVP_MAC_final(ctx, out, &got, 32) == 1 && got == 32;
    EVP_MAC_CTX_free(ctx);
    return ok;
}

int sg_mac_sign(const sg_mac_keys_t *keys, const char *topic, const void *key, size_t key_len,
                const void *payload, size_t len, char out[SG_MAC_VALUE_MAX])
{
    unsigned char mac[32];
    const sg_mac_key_t *k;
    int off;

    if (keys->signer < 0 || (size_t)keys->signer >= keys->n)
        return -1;
    k = &keys->keys[keys->signer];
    if (!mac_compute(k, topic, key, key_len, payload, len, mac))
        return -1;
    off = snprintf(out, SG_MAC_VALUE_MAX, "v1.%s.", k->id);
    for (int i = 0; i < 32; i++) {
        out[off++] = "0123456789abcdef"[mac[i] >> 4];
        out[off++] = "0123456789abcdef"[mac[i] & 15];
    }
    out[off] = '\0';
    return 0;
}

sg_mac_verdict_t sg_mac_verify(const sg_mac_keys_t *keys, const char *topic, const void *key,
                               size_t key_len, const void *payload, size_t len, const void *value,
                               size_t vlen)
{
    const char *v = value, *dot;
    unsigned char want[32], got[32];
    size_t idlen;

    if (!value)
        return SG_MAC_MISSING;
    if (vlen < 3 + 1 + 1 + 64 || memcmp(v, "v1.", 3) != 0)
        return SG_MAC_MALFORMED;
    dot = memchr(v + 3, '.', vlen - 3);
    if (!dot)
        return SG_MAC_MALFORMED;
    idlen = (size_t)(dot - (v + 3));
    if (!mac_id_ok(v + 3, idlen) || (size_t)(v + vlen - dot - 1) != 64)
        return SG_MAC_MALFORMED;
    if (sg_hex_decode(dot + 1, 32, got) < 0)
        return SG_MAC_MALFORMED;
    for (size_t i = 0; i < keys->n; i++) {
        const sg_mac_key_t *k = &keys->keys[i];

        if (strlen(k->id) != idlen || memcmp(k->id, v + 3, idlen) != 0)
            continue;
        if (!mac_compute(k, topic, key, key_len, payload, len, want))
            return SG_MAC_MISMATCH;
        return CRYPTO_memcmp(want, got, 32) == 0 ? SG_MAC_OK : SG_MAC_MISMATCH;
    }
    return SG_MAC_UNKNOWN_KEY;
}

/* ---- sagad-auth ---------------------------------------------------------- */

int sg_ed25519_keygen(unsigned char pub[SG_ED25519_PUBLIC], unsigned char priv[SG_ED25519_PRIVATE],
                      sg_err_t *err)
{
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    size_t np = SG_ED25519_PUBLIC, nv = SG_ED25519_PRIVATE;
    bool ok = pk && EVP_PKEY_get_raw_public_key(pk, pub, &np) == 1 &&
              EVP_PKEY_get_raw_private_key(pk, priv, &nv) == 1;

    EVP_PKEY_free(pk);
    if (!ok)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.crypto",
                          "OpenSSL could not make an Ed25519 key pair");
    return 0;
}

int sg_ed25519_public(const unsigned char priv[SG_ED25519_PRIVATE],
                      unsigned char pub[SG_ED25519_PUBLIC])
{
    EVP_PKEY *pk = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, priv, SG_ED25519_PRIVATE);
    size_t np = SG_ED25519_PUBLIC;
    int rc = pk && EVP_PKEY_get_raw_public_key(pk, pub, &np) == 1 ? 0 : -1;

    EVP_PKEY_free(pk);
    return rc;
}

unsigned char *sg_auth_message(const char *principal, const char *key_id, int64_t ts,
                               const void *key, size_t key_len, const void *payload, size_t len,
                               size_t *n)
{
    char tsbuf[24];
    const char *parts[] = {AUTH_TAG, principal, key_id, tsbuf};
    size_t total = 4 + key_len + len, off = 0;
    unsigned char *buf;

    snprintf(tsbuf, sizeof(tsbuf), "%" PRId64, ts);
    for (size_t i = 0; i < 4; i++)
        total += 4 + strlen(parts[i]);
    buf = sg_xmalloc(total ? total : 1);
    for (size_t i = 0; i < 4; i++) {
        size_t m = strlen(parts[i]);

        put_u32(buf + off, m);
        memcpy(buf + off + 4, parts[i], m);
        off += 4 + m;
    }
    put_u32(buf + off, key_len);
    if (key_len)
        memcpy(buf + off + 4, key, key_len);
    off += 4 + key_len;
    if (len)
        memcpy(buf + off, payload, len);
    *n = total;
    return buf;
}

void *sg_ed25519_signer_new(const unsigned char priv[SG_ED25519_PRIVATE])
{
    return EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, priv, SG_ED25519_PRIVATE);
}

void sg_ed25519_signer_free(void *signer)
{
    EVP_PKEY_free(signer);
}

char *sg_auth_sign_with(void *signer, const char *principal, const char *key_id, int64_t ts,
                        const void *key, size_t key_len, const void *payload, size_t len,
                        sg_err_t *err)
{
    size_t n, siglen = SG_ED25519_SIG;
    unsigned char *msg = sg_auth_message(principal, key_id, ts, key, key_len, payload, len, &n);
    unsigned char sig[SG_ED25519_SIG];
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    char *b64 = NULL, *out = NULL;
    bool ok = signer && md && EVP_DigestSignInit(md, NULL, NULL, NULL, signer) == 1 &&
              EVP_DigestSign(md, sig, &siglen, msg, n) == 1 && siglen == SG_ED25519_SIG;

    EVP_MD_CTX_free(md);
    free(msg);
    if (!ok) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "runtime.crypto", "OpenSSL could not sign");
        return NULL;
    }
    b64 = sg_base64(sig, sizeof(sig));
    n = strlen(principal) + strlen(key_id) + strlen(b64) + 32;
    out = sg_xmalloc(n);
    snprintf(out, n, "v1 %s %s %" PRId64 " %s", principal, key_id, ts, b64);
    free(b64);
    return out;
}

char *sg_auth_sign(const unsigned char priv[SG_ED25519_PRIVATE], const char *principal,
                   const char *key_id, int64_t ts, const void *key, size_t key_len,
                   const void *payload, size_t len, sg_err_t *err)
{
    void *signer = sg_ed25519_signer_new(priv);
    char *out = sg_auth_sign_with(signer, principal, key_id, ts, key, key_len, payload, len, err);

    sg_ed25519_signer_free(signer);
    return out;
}

void *sg_ed25519_key_new(const unsigned char pub[SG_ED25519_PUBLIC])
{
    return EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, SG_ED25519_PUBLIC);
}

void sg_ed25519_key_free(void *key)
{
    EVP_PKEY_free(key);
}

bool sg_ed25519_verify_key(void *key, const unsigned char *msg, size_t n,
                           const unsigned char sig[SG_ED25519_SIG])
{
    EVP_MD_CTX *md = key ? EVP_MD_CTX_new() : NULL;
    bool ok = md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, key) == 1 &&
              EVP_DigestVerify(md, sig, SG_ED25519_SIG, msg, n) == 1;

    EVP_MD_CTX_free(md);
    return ok;
}

static int b64val(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int sg_base64_decode_exact(const char *s, size_t slen, unsigned char *out, size_t want)
{
    size_t need = (want + 2) / 3 * 4, o = 0;
    uint32_t acc = 0;
    int bits = 0;

    if (slen != need)
        return -1;
    for (size_t i = 0; i < slen; i++) {
        int v;

        if (s[i] == '=') {
            /* Padding only at the end, only as much as want leaves. */
            for (size_t j = i; j < slen; j++)
                if (s[j] != '=')
                    return -1;
            if (slen - i != (3 - want % 3) % 3)
                return -1;
            break;
        }
        if ((v = b64val((unsigned char)s[i])) < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == want)
                return -1;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    return o == want ? 0 : -1;
}

static bool chars_ok(const char *s, size_t n, size_t max, const char *extra)
{
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        /* strchr() finds the terminator too: a NUL byte is no "extra" */
        if (!isalnum((unsigned char)s[i]) && (s[i] == '\0' || !strchr(extra, s[i])))
            return false;
    return true;
}

int sg_auth_parse(const void *value, size_t vlen, sg_auth_t *out)
{
    const char *v = value, *end = v + vlen, *f[5];
    size_t flen[5], nf = 0;
    char tsbuf[24], *tsend;

    memset(out, 0, sizeof(*out));
    if (!value)
        return -1;
    for (const char *p = v; p < end && nf < 5;) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));

        f[nf] = p;
        flen[nf] = (size_t)((sp ? sp : end) - p);
        nf++;
        if (!sp)
            break;
        if (nf == 5)
            return -1; /* a sixth field */
        p = sp + 1;
    }
    if (nf != 5 || flen[0] != 2 || memcmp(f[0], "v1", 2) != 0 ||
        !chars_ok(f[1], flen[1], SG_PRINCIPAL_MAX, "._@:-") ||
        !chars_ok(f[2], flen[2], SG_KEY_ID_MAX, "._-") || flen[3] == 0 || flen[3] > 19)
        return -1;
    memcpy(out->principal, f[1], flen[1]);
    memcpy(out->key_id, f[2], flen[2]);
    memcpy(tsbuf, f[3], flen[3]);
    tsbuf[flen[3]] = '\0';
    for (size_t i = 0; i < flen[3]; i++)
        if (!isdigit((unsigned char)tsbuf[i]))
            return -1;
    out->ts = strtoll(tsbuf, &tsend, 10);
    return sg_base64_decode_exact(f[4], flen[4], out->sig, SG_ED25519_SIG);
}

/* ---- hashes and random bytes (sagad-gateway's tokens) ----------------- */

void sg_sha256(const void *data, size_t len, unsigned char out[32])
{
    unsigned int n = 32;

    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1)
        abort(); /* only on allocation failure, which aborts everywhere in sagad */
}

int sg_random_bytes(void *out, size_t len)
{
    return RAND_bytes(out, (int)len) == 1 ? 0 : -1;
}

bool sg_equal_ct(const void *a, const void *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}
