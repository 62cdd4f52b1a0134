/* sg_trust: who may write what (docs/ARCHITECTURE.md, "Trust boundary").
 *
 * The internal keys: the HMAC secrets of sagad-mac (sg_sign.h), kept in
 * PostgreSQL (table internal_keys, readable by sagad_runtime only) so that
 * the worker and the relay share them without a file to distribute, and a
 * rotation is one function call (sagad_internal_key_rotate()).
 *
 * The keyring: a JSON file (security.keyring, schemas/keyring.schema.json)
 * of principals, each with its Ed25519 public keys and roles:
 *
 *   {"v": 1, "principals": {
 *      "shop-agent": {"keys": {"k1": "<base64 of 32 bytes>"}, "roles": ["submit"]},
 *      "finance:bob": {"keys": {...}, "roles": ["approve", "cancel"],
 *                      "approve_tools": ["payment.charge_high"]}}}
 *
 * Roles: submit (a saga.start signed by it is accepted), cancel (saga.cancel),
 * approve (saga.approve and saga.reject, of the tools in approve_tools, or
 * any tool when it is absent), delegate (it may sign for another name,
 * on_behalf_of: the gateway).  Read once at start, like the registry: a
 * bad keyring stops the worker with the path and the rule. */
#ifndef SAGAD_TRUST_H
#define SAGAD_TRUST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_err.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_submit.h"

typedef enum sg_trust_mode_e {
    SG_TRUST_REQUIRE,         /* internal commands must carry a valid sagad-mac */
    SG_TRUST_ACCEPT_UNSIGNED, /* ... or none (a rolling upgrade); a wrong one is refused */
    SG_TRUST_OFF,             /* neither signed nor checked */
} sg_trust_mode_t;

/* security.internal_auth's value; -1 on an unknown one. */
int sg_trust_mode_parse(const char *s, sg_trust_mode_t *out);

/* The commands only sagad writes: step.execute, step.compensate,
 * saga.release, step.approval_timeout. */
bool sg_trust_internal(sg_ctype_t type);

/* Reads the live internal keys (not expired) into keys, which it fills
 * from empty (whatever it held is not released: pass an empty or cleared
 * set); the signer is the newest whose signs_from has come.  On failure
 * keys is left empty.  -1 with err set when the table cannot
 * be read (schema too old: migrate; the role may not read it). */
int sg_trust_keys_load(sg_pg_t *pg, sg_mac_keys_t *keys, sg_err_t *err);

/* ---- the keyring ----------------------------------------------------------- */

enum {
    SG_ROLE_SUBMIT = 1u << 0,
    SG_ROLE_CANCEL = 1u << 1,
    SG_ROLE_APPROVE = 1u << 2,
    /* Signs for the users it authenticated itself (sagad-gateway): a
     * message it signs naming on_behalf_of is decided as that user, with
     * this principal's other roles as the bound of what it may do. */
    SG_ROLE_DELEGATE = 1u << 3,
};

#define SG_PRINCIPAL_KEYS_MAX 8

typedef struct sg_principal_s {
    char name[SG_PRINCIPAL_MAX + 1];
    struct {
        char id[SG_KEY_ID_MAX + 1];
        unsigned char pub[SG_ED25519_PUBLIC];
        void *pkey; /* the key as OpenSSL holds it, made once at load */
    } keys[SG_PRINCIPAL_KEYS_MAX];
    size_t nkeys;
    unsigned roles;
    char **approve_tools; /* NULL: any tool */
    size_t napprove_tools;
} sg_principal_t;

typedef struct sg_keyring_s {
    sg_principal_t *p;
    size_t n;
} sg_keyring_t;

/* Loads and checks the keyring at path.  NULL with err set (its message
 * names the path, the JSON path and the rule). */
sg_keyring_t *sg_keyring_load(const char *path, sg_err_t *err);
/* The same from a JSON text (what the tests and `sagactl keys` use). */
sg_keyring_t *sg_keyring_parse(const char *text, size_t len, const char *what, sg_err_t *err);
void sg_keyring_free(sg_keyring_t *kr);
const sg_principal_t *sg_keyring_find(const sg_keyring_t *kr, const char *name);
bool sg_principal_may_approve(const sg_principal_t *p, const char *tool);

/* Checks a message's sagad-auth header (value, vlen; NULL: none) against
 * the keyring: the principal and key exist, the signature covers the key
 * and payload, and its time is at most max_age_s old (60 s ahead for clock
 * skew).  Returns the principal, or NULL with err set: code
 * input.auth.unsigned, input.auth.malformed, input.auth.unknown_principal,
 * input.auth.bad_signature, input.auth.expired or input.auth.no_keyring (kr NULL). */
const sg_principal_t *sg_keyring_verify(const sg_keyring_t *kr, const void *value, size_t vlen,
                                        const void *key, size_t key_len, const void *payload,
                                        size_t len, int64_t now_s, int64_t max_age_s,
                                        sg_err_t *err);

/* ---- a principal's private key ----------------------------------------- */

/* A private signing key, as `sagactl keys new` writes it (a JSON file:
 * principal, key_id, private_key in base64). */
typedef struct sg_signing_key_s {
    char principal[SG_PRINCIPAL_MAX + 1];
    char key_id[SG_KEY_ID_MAX + 1];
    unsigned char priv[SG_ED25519_PRIVATE];
} sg_signing_key_t;

/* -1 with why set when path cannot be read or is not a key file. */
int sg_signing_key_load(const char *path, sg_signing_key_t *out, char *why, size_t why_size)
    __attribute__((warn_unused_result));

#endif
