/* sg_sign: who wrote a message (docs/ARCHITECTURE.md, "Trust boundary").
 *
 * Two proofs, both over the exact bytes that travel, so that no party has
 * to rebuild a canonical form of JSON:
 *
 *   sagad-mac   an HMAC-SHA256 the relay adds to every message it
 *               publishes, with a secret only sagad's runtime role can read
 *               (table internal_keys).  The worker acts on an internal
 *               command (step.execute, step.compensate, saga.release,
 *               step.approval_timeout) only when it carries a valid one.
 *   sagad-auth  an Ed25519 signature by a principal of the keyring
 *               (sg_keyring.h), on a saga.start or a control command.
 *
 * Both cover, length-prefixed so that no two inputs share their bytes: a
 * domain tag, the topic (sagad-mac) or the time of signing (sagad-auth),
 * the Kafka key and the payload. */
#ifndef SAGAD_SIGN_H
#define SAGAD_SIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_err.h"

#define SG_MAC_HEADER  "sagad-mac"
#define SG_AUTH_HEADER "sagad-auth"

/* ---- sagad-mac: internal commands ---------------------------------------- */

#define SG_MAC_KEYS_MAX   8
#define SG_MAC_ID_MAX     16
#define SG_MAC_SECRET_MAX 64
/* "v1.<id>.<64 hex digits>" and its NUL */
#define SG_MAC_VALUE_MAX (3 + SG_MAC_ID_MAX + 1 + 64 + 1)

typedef struct sg_mac_key_s {
    char id[SG_MAC_ID_MAX + 1];
    unsigned char secret[SG_MAC_SECRET_MAX];
    size_t len;
    void *ctx; /* an HMAC context keyed with it, copied per message */
} sg_mac_key_t;

/* The keys a process accepts, and the one it signs with (signer, -1: none
 * may sign yet).  Loaded from PostgreSQL by sg_trust_keys_load
 * (sg_trust.h), which also says when the first of them expires: a holder
 * reads them again then, so that an expired key is not accepted until the
 * next periodic read. */
typedef struct sg_mac_keys_s {
    sg_mac_key_t keys[SG_MAC_KEYS_MAX];
    size_t n;
    int signer;
    int64_t expires_ms; /* Unix ms of the soonest expires_at among them; 0: none expires */
} sg_mac_keys_t;

/* Adds a key (id: [a-z0-9]{1,16}; 32 to 64 bytes of secret).  Returns -1
 * with err set when either is out of range or the set is full.  A set
 * holds OpenSSL contexts: sg_mac_keys_clear releases them. */
int sg_mac_keys_add(sg_mac_keys_t *keys, const char *id, const void *secret, size_t len,
                    bool signer, sg_err_t *err);

/* Empties a set (secrets wiped, contexts freed); it can be filled again. */
void sg_mac_keys_clear(sg_mac_keys_t *keys);

/* The header value for a message: "v1.<id>.<hex>".  Returns -1 when the
 * set has no signing key. */
int sg_mac_sign(const sg_mac_keys_t *keys, const char *topic, const void *key, size_t key_len,
                const void *payload, size_t len, char out[SG_MAC_VALUE_MAX]);

typedef enum sg_mac_verdict_e {
    SG_MAC_OK,
    SG_MAC_MISSING,     /* no header */
    SG_MAC_MALFORMED,   /* not "v1.<id>.<hex>" */
    SG_MAC_UNKNOWN_KEY, /* a key id this process does not hold (retired, or never ours) */
    SG_MAC_MISMATCH,    /* the bytes were not signed with that key */
} sg_mac_verdict_t;

/* Checks a header value (value/vlen as received; NULL: none) against the
 * message.  Constant time in the MAC's bytes. */
sg_mac_verdict_t sg_mac_verify(const sg_mac_keys_t *keys, const char *topic, const void *key,
                               size_t key_len, const void *payload, size_t len, const void *value,
                               size_t vlen);

/* ---- sagad-auth: principals ------------------------------------------------ */

#define SG_ED25519_PUBLIC  32
#define SG_ED25519_PRIVATE 32
#define SG_ED25519_SIG     64
#define SG_PRINCIPAL_MAX   64
#define SG_KEY_ID_MAX      32

/* A fresh key pair (raw bytes).  Returns -1 with err set when the
 * library's random source fails. */
int sg_ed25519_keygen(unsigned char pub[SG_ED25519_PUBLIC], unsigned char priv[SG_ED25519_PRIVATE],
                      sg_err_t *err);
/* The public half of a private key. */
int sg_ed25519_public(const unsigned char priv[SG_ED25519_PRIVATE],
                      unsigned char pub[SG_ED25519_PUBLIC]);

/* The bytes a sagad-auth signature covers, into a malloc'd buffer (*n its
 * length): domain tag, principal, key id, time (Unix seconds), Kafka key
 * and payload, each but the last length-prefixed. */
unsigned char *sg_auth_message(const char *principal, const char *key_id, int64_t ts,
                               const void *key, size_t key_len, const void *payload, size_t len,
                               size_t *n);

/* The header value "v1 <principal> <key id> <ts> <base64 signature>"
 * (caller frees), NULL with err set on failure. */
/* A private key made once for many signatures (importing it derives the
 * public half, half the cost of a signature): NULL when OpenSSL refuses
 * it.  Free with sg_ed25519_signer_free (NULL: no-op). */
void *sg_ed25519_signer_new(const unsigned char priv[SG_ED25519_PRIVATE]);
void sg_ed25519_signer_free(void *signer);
/* sg_auth_sign with a signer of sg_ed25519_signer_new; thread-safe. */
char *sg_auth_sign_with(void *signer, const char *principal, const char *key_id, int64_t ts,
                        const void *key, size_t key_len, const void *payload, size_t len,
                        sg_err_t *err);
char *sg_auth_sign(const unsigned char priv[SG_ED25519_PRIVATE], const char *principal,
                   const char *key_id, int64_t ts, const void *key, size_t key_len,
                   const void *payload, size_t len, sg_err_t *err);

/* A sagad-auth header value taken apart (no check of the signature). */
typedef struct sg_auth_s {
    char principal[SG_PRINCIPAL_MAX + 1];
    char key_id[SG_KEY_ID_MAX + 1];
    int64_t ts;
    unsigned char sig[SG_ED25519_SIG];
} sg_auth_t;

/* Returns -1 when the value is not "v1 <principal> <key id> <ts> <sig>"
 * (principal [A-Za-z0-9._@:-]{1,64}, key id [A-Za-z0-9._-]{1,32}, ts a
 * decimal, sig 64 bytes in base64). */
int sg_auth_parse(const void *value, size_t vlen, sg_auth_t *out);

/* A public key in OpenSSL's form, made once (a check that made it each
 * time spent as much on that as on the check itself); sg_ed25519_key_free
 * releases it.  NULL: pub is not a valid key.  sg_ed25519_verify_key:
 * true when sig is the key's signature of the message. */
void *sg_ed25519_key_new(const unsigned char pub[SG_ED25519_PUBLIC]);
void sg_ed25519_key_free(void *key);
bool sg_ed25519_verify_key(void *key, const unsigned char *msg, size_t n,
                           const unsigned char sig[SG_ED25519_SIG]);

/* Standard base64 (padded) of exactly want bytes into out; -1 otherwise. */
int sg_base64_decode_exact(const char *s, size_t slen, unsigned char *out, size_t want);

/* ---- hashes and random bytes ------------------------------------------- */

/* SHA-256 of data[0..len). */
void sg_sha256(const void *data, size_t len, unsigned char out[32]);
/* len bytes from the operating system's random source; -1 when it fails. */
int sg_random_bytes(void *out, size_t len) __attribute__((warn_unused_result));
/* a[0..len) == b[0..len), in a time that does not depend on where they differ. */
bool sg_equal_ct(const void *a, const void *b, size_t len);

#endif
