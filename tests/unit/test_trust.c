/* sg_sign and sg_trust: the signatures of the trust boundary.  What a
 * signer produces verifies; any change to what it covers (topic, key,
 * payload, principal, time) does not; a keyring is read as
 * schemas/keyring.schema.json says (the same fixtures). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_sign.h"
#include "sagad/sg_text.h"
#include "sagad/sg_trust.h"
#include "unit.h"

static const unsigned char SECRET[32] = "0123456789abcdef0123456789abcdef";

static void keys_with(sg_mac_keys_t *k, const char *id, bool signer)
{
    sg_err_t err;

    cr_assert_eq(sg_mac_keys_add(k, id, SECRET, sizeof(SECRET), signer, &err), 0, "%s",
                 err.message);
}

Test(trust, a_mac_verifies_and_any_change_to_what_it_covers_does_not)
{
    sg_mac_keys_t k = {.signer = -1}, other = {.signer = -1};
    static const char payload[] = "{\"type\": \"step.execute\"}";
    char mac[SG_MAC_VALUE_MAX], bad[SG_MAC_VALUE_MAX];

    keys_with(&k, "k1", true);
    cr_assert_eq(sg_mac_sign(&k, "cmds", "s1", 2, payload, strlen(payload), mac), 0);
    cr_expect_eq(strlen(mac), 3 + 2 + 1 + 64, "%s", mac);
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s1", 2, payload, strlen(payload), mac, strlen(mac)),
                 SG_MAC_OK);
    cr_expect_eq(sg_mac_verify(&k, "cmds2", "s1", 2, payload, strlen(payload), mac, strlen(mac)),
                 SG_MAC_MISMATCH, "another topic");
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s2", 2, payload, strlen(payload), mac, strlen(mac)),
                 SG_MAC_MISMATCH, "another key");
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s1", 2, payload, strlen(payload) - 1, mac, strlen(mac)),
                 SG_MAC_MISMATCH, "another payload");
    /* the key's bytes and the payload's do not slide into each other */
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s", 1, "1{\"type\": \"step.execute\"}",
                               strlen(payload) + 1, mac, strlen(mac)),
                 SG_MAC_MISMATCH);
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s1", 2, payload, strlen(payload), NULL, 0),
                 SG_MAC_MISSING);
    snprintf(bad, sizeof(bad), "%s", mac);
    bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == '0' ? '1' : '0';
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s1", 2, payload, strlen(payload), bad, strlen(bad)),
                 SG_MAC_MISMATCH, "one digit changed");
    bad[strlen(bad) - 1] = 'G';
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s1", 2, payload, strlen(payload), bad, strlen(bad)),
                 SG_MAC_MALFORMED);
    cr_expect_eq(sg_mac_verify(&k, "cmds", "s1", 2, payload, strlen(payload), "v1.k1.00", 8),
                 SG_MAC_MALFORMED);
    /* a process without the key: unknown, whatever the bytes */
    keys_with(&other, "k2", true);
    cr_expect_eq(sg_mac_verify(&other, "cmds", "s1", 2, payload, strlen(payload), mac, strlen(mac)),
                 SG_MAC_UNKNOWN_KEY);
    sg_mac_keys_clear(&k);
    sg_mac_keys_clear(&other);
}

Test(trust, during_a_rotation_both_keys_verify_and_the_signer_is_the_one_marked)
{
    sg_mac_keys_t k = {.signer = -1}, old = {.signer = -1};
    char mac[SG_MAC_VALUE_MAX];
    sg_err_t err;

    /* newest first, as sg_trust_keys_load reads them: the new key is not
     * signing yet, the old one still is */
    keys_with(&k, "k2", false);
    keys_with(&k, "k1", true);
    cr_assert_eq(sg_mac_sign(&k, "t", "s", 1, "p", 1, mac), 0);
    cr_expect(strncmp(mac, "v1.k1.", 6) == 0, "%s", mac);
    keys_with(&old, "k1", true);
    cr_expect_eq(sg_mac_verify(&old, "t", "s", 1, "p", 1, mac, strlen(mac)), SG_MAC_OK,
                 "a worker that has not read k2 yet verifies it");
    cr_expect_eq(sg_mac_keys_add(&k, "K3", SECRET, 32, false, &err), -1);
    cr_expect_str_eq(err.code, "config.internal_key.invalid");
    cr_expect_eq(sg_mac_keys_add(&k, "k3", SECRET, 16, false, &err), -1, "too short a secret");
    sg_mac_keys_clear(&k);
    sg_mac_keys_clear(&old);
}

static sg_keyring_t *ring_for(const unsigned char pub[32], const char *roles)
{
    char text[512], *b64 = sg_base64(pub, 32);
    sg_err_t err;
    sg_keyring_t *kr;

    snprintf(text, sizeof(text),
             "{\"v\": 1, \"principals\": {\"bob\": {\"keys\": {\"k1\": \"%s\"}, %s}}}", b64, roles);
    free(b64);
    kr = sg_keyring_parse(text, strlen(text), "test", &err);
    cr_assert_not_null(kr, "%s", err.message);
    return kr;
}

Test(trust, a_signature_verifies_once_and_nothing_it_covers_can_change)
{
    unsigned char pub[32], priv[32];
    static const char msg[] = "{\"type\": \"saga.approve\", \"saga_id\": \"s1\"}";
    const sg_principal_t *p;
    sg_keyring_t *kr;
    char *auth, *forged;
    sg_err_t err;

    cr_assert_eq(sg_ed25519_keygen(pub, priv, &err), 0);
    kr = ring_for(pub, "\"roles\": [\"approve\"], \"approve_tools\": [\"bank.charge\"]");
    auth = sg_auth_sign(priv, "bob", "k1", 1000000, "s1", 2, msg, strlen(msg), &err);
    cr_assert_not_null(auth);
    p = sg_keyring_verify(kr, auth, strlen(auth), "s1", 2, msg, strlen(msg), 1000100, 900, &err);
    cr_assert_not_null(p, "%s", err.message);
    cr_expect_str_eq(p->name, "bob");
    cr_expect(sg_principal_may_approve(p, "bank.charge"));
    cr_expect(!sg_principal_may_approve(p, "noop"), "approve_tools limits it");

    cr_expect_null(
        sg_keyring_verify(kr, auth, strlen(auth), "s2", 2, msg, strlen(msg), 1000100, 900, &err),
        "another saga's key");
    cr_expect_str_eq(err.code, "input.auth.bad_signature");
    cr_expect_null(sg_keyring_verify(kr, auth, strlen(auth), "s1", 2, msg, strlen(msg) - 1, 1000100,
                                     900, &err));
    cr_expect_str_eq(err.code, "input.auth.bad_signature");
    cr_expect_null(
        sg_keyring_verify(kr, auth, strlen(auth), "s1", 2, msg, strlen(msg), 1001000, 900, &err),
        "a thousand seconds later");
    cr_expect_str_eq(err.code, "input.auth.expired");
    cr_expect_null(
        sg_keyring_verify(kr, auth, strlen(auth), "s1", 2, msg, strlen(msg), 999900, 900, &err),
        "100 s in the future");
    cr_expect_str_eq(err.code, "input.auth.expired");
    /* the time in the header is covered too */
    forged = strdup(auth);
    memcpy(strstr(forged, "1000000"), "1000050", 7);
    cr_expect_null(sg_keyring_verify(kr, forged, strlen(forged), "s1", 2, msg, strlen(msg), 1000100,
                                     900, &err));
    cr_expect_str_eq(err.code, "input.auth.bad_signature");
    free(forged);
    /* another principal's name on bob's signature */
    forged = sg_auth_sign(priv, "eve", "k1", 1000000, "s1", 2, msg, strlen(msg), &err);
    cr_expect_null(sg_keyring_verify(kr, forged, strlen(forged), "s1", 2, msg, strlen(msg), 1000100,
                                     900, &err));
    cr_expect_str_eq(err.code, "input.auth.unknown_principal");
    free(forged);
    cr_expect_null(sg_keyring_verify(kr, NULL, 0, "s1", 2, msg, strlen(msg), 1000100, 900, &err));
    cr_expect_str_eq(err.code, "input.auth.unsigned");
    cr_expect_null(
        sg_keyring_verify(kr, "v1 bob k1 x y", 13, "s1", 2, msg, strlen(msg), 1000100, 900, &err));
    cr_expect_str_eq(err.code, "input.auth.malformed");
    cr_expect_null(
        sg_keyring_verify(NULL, auth, strlen(auth), "s1", 2, msg, strlen(msg), 1000100, 900, &err));
    cr_expect_str_eq(err.code, "input.auth.no_keyring");
    free(auth);
    sg_keyring_free(kr);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf = calloc(1, 65536);

    cr_assert_not_null(fp, "%s", path);
    *len = fread(buf, 1, 65535, fp);
    fclose(fp);
    return buf;
}

Test(trust, keyrings_are_read_as_the_schema_says)
{
    static const char *const kinds[] = {"valid", "invalid"};

    for (int k = 0; k < 2; k++) {
        char dir[128];
        DIR *d;
        struct dirent *e;
        int n = 0;

        snprintf(dir, sizeof(dir), "tests/fixtures/keyring/%s", kinds[k]);
        cr_assert_not_null(d = opendir(dir), "%s", dir);
        while ((e = readdir(d))) {
            char path[400];
            size_t len;
            char *text;
            sg_keyring_t *kr;
            sg_err_t err;

            if (!strstr(e->d_name, ".json"))
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            text = slurp(path, &len);
            kr = sg_keyring_parse(text, len, path, &err);
            if (k == 0)
                cr_expect_not_null(kr, "%s: %s", path, err.message);
            else
                cr_expect_null(kr, "%s was accepted", path);
            if (!kr) {
                assert_contains(err.message, path);
                /* a name quoted in the error is cut before a character,
                 * never inside one: log shippers refuse a broken line */
                cr_expect(sg_utf8_valid(err.message, strlen(err.message)), "%s: not UTF-8: %s",
                          path, err.message);
            }
            sg_keyring_free(kr);
            free(text);
            n++;
        }
        closedir(d);
        cr_expect_gt(n, 0);
    }
}

/* Found by fuzz_auth: NUL bytes inside the principal were taken for one of
 * its allowed punctuation characters (strchr() finds the terminator), so
 * "\0\0shop" parsed as the empty principal. */
Test(trust, a_header_with_nul_bytes_in_a_name_is_malformed)
{
    static const char v[] = "v1 \0\0shop k1 100 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gIS"
                            "IjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw==";
    static const char w[] = "v1 shop k\0 100 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUm"
                            "JygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw==";
    static const char ok[] = "v1 shop k1 100 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUm"
                             "JygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw==";
    sg_auth_t a;

    cr_expect_eq(sg_auth_parse(v, sizeof(v) - 1, &a), -1);
    cr_expect_eq(sg_auth_parse(w, sizeof(w) - 1, &a), -1);
    cr_assert_eq(sg_auth_parse(ok, sizeof(ok) - 1, &a), 0);
    cr_expect_str_eq(a.principal, "shop");
    cr_expect_eq(a.ts, 100);
}

Test(trust, base64_of_an_exact_length_only)
{
    unsigned char out[4];

    cr_expect_eq(sg_base64_decode_exact("AAECAw==", 8, out, 4), 0);
    cr_expect_eq(out[3], 3);
    cr_expect_eq(sg_base64_decode_exact("AAECAw=", 7, out, 4), -1);
    cr_expect_eq(sg_base64_decode_exact("AAECAwQ=", 8, out, 4), -1, "five bytes");
    cr_expect_eq(sg_base64_decode_exact("AAEC=w==", 8, out, 4), -1, "padding inside");
    cr_expect_eq(sg_base64_decode_exact("AA-CAw==", 8, out, 4), -1, "not the standard alphabet");
}
