/* libFuzzer target: the two signature headers a producer controls, and a
 * keyring text.  The input is split at its first two newlines: a sagad-auth
 * value, a sagad-mac value, and a keyring.  Properties: parsing never reads
 * past the value, a parsed principal and key id keep to their alphabets
 * and lengths, a made-up MAC never verifies, a keyring that parses has
 * principals with at least one key and one role, and a signature checked
 * against it is refused (the fuzzer cannot sign). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_sign.h"
#include "sagad/sg_trust.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned char secret[32] = {1, 2, 3};
    const char *text = (const char *)data, *nl1, *nl2;
    sg_mac_keys_t keys = {.signer = -1};
    sg_keyring_t *kr;
    sg_auth_t a;
    sg_err_t err;

    if (!(nl1 = memchr(text, '\n', size)) ||
        !(nl2 = memchr(nl1 + 1, '\n', size - (size_t)(nl1 + 1 - text))))
        return 0;
    if (sg_auth_parse(text, (size_t)(nl1 - text), &a) == 0) {
        if (!a.principal[0] || strlen(a.principal) > SG_PRINCIPAL_MAX || !a.key_id[0] ||
            strlen(a.key_id) > SG_KEY_ID_MAX || strchr(a.principal, ' '))
            abort();
    }
    if (sg_mac_keys_add(&keys, "k1", secret, sizeof(secret), true, &err) < 0)
        abort();
    if (sg_mac_verify(&keys, "t", "k", 1, "p", 1, nl1 + 1, (size_t)(nl2 - nl1 - 1)) == SG_MAC_OK)
        abort(); /* a forgery verified */
    kr = sg_keyring_parse(nl2 + 1, size - (size_t)(nl2 + 1 - text), "fuzz", &err);
    if (kr) {
        for (size_t i = 0; i < kr->n; i++)
            if (kr->p[i].nkeys == 0 || kr->p[i].roles == 0)
                abort();
        if (sg_keyring_verify(kr, text, (size_t)(nl1 - text), "k", 1, "p", 1, a.ts, 900, &err))
            abort();
        sg_keyring_free(kr);
    }
    sg_mac_keys_clear(&keys);
    return 0;
}
