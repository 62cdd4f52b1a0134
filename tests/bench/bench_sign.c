/* bench-sign: what the trust boundary costs per message, beside its floor.
 *
 *   relay   sagad-mac of a step command (HMAC-SHA256, as the relay signs
 *           every message it publishes), and its check (the worker);
 *   client  sagad-auth of a saga.start (Ed25519, as sagactl signs), and
 *           its check against the keyring (the worker, once per signed
 *           saga.start or control command);
 *   floor   SHA-256 of the same bytes through the same OpenSSL EVP calls:
 *           a hash can not be cheaper than the one inside the HMAC.
 *
 * No services.  Prints one line per operation (microseconds per message,
 * messages per second of one core) and writes bench/results/sign.json
 * (SAGAD_BENCH_RESULT overrides). */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_text.h"
#include "sagad/sg_trust.h"

#define ROUNDS_FAST 200000
#define ROUNDS_SLOW 5000

typedef struct row_s {
    const char *name;
    double us;
} row_t;

static double per_op_us(double t0, int n)
{
    return (now_s() - t0) * 1e6 / n;
}

int main(void)
{
    static const char step[] =
        "{\"v\":1,\"type\":\"step.execute\",\"id\":\"cmd:order-000042:1:f:g1:a1\","
        "\"saga_id\":\"order-000042\",\"step\":1,\"attempt\":1,"
        "\"generation\":1}";
    const char *result = getenv("SAGAD_BENCH_RESULT");
    unsigned char secret[32], pub[32], priv[32], digest[32];
    char start[2048], mac[SG_MAC_VALUE_MAX], ring[256], *b64;
    sg_mac_keys_t keys = {.signer = -1};
    sg_keyring_t *kr;
    sg_err_t err;
    row_t rows[5];
    size_t nrows = 0, slen;
    double t0;
    char *auth = NULL;
    volatile unsigned sink = 0;
    FILE *fp;

    memset(secret, 7, sizeof(secret));
    if (sg_mac_keys_add(&keys, "k1", secret, sizeof(secret), true, &err) < 0)
        die("keys", err.message);
    if (sg_ed25519_keygen(pub, priv, &err) < 0)
        die("keygen", err.message);
    b64 = sg_base64(pub, 32);
    snprintf(ring, sizeof(ring),
             "{\"v\": 1, \"principals\": {\"shop\": {\"keys\": {\"k1\": \"%s\"}, \"roles\": "
             "[\"submit\"]}}}",
             b64);
    free(b64);
    if (!(kr = sg_keyring_parse(ring, strlen(ring), "bench", &err)))
        die("keyring", err.message);
    /* A 2 KB saga.start: three steps and an input, as the demo's. */
    slen = (size_t)snprintf(start, sizeof(start),
                            "{\"v\":1,\"type\":\"saga.start\",\"id\":\"sub-1\",\"saga_id\":"
                            "\"order-000042\",\"name\":\"checkout\",\"input\":{\"note\":\"%0*d\"},"
                            "\"steps\":[{\"name\":\"reserve\",\"tool\":\"inventory.reserve\"},"
                            "{\"name\":\"charge\",\"tool\":\"payment.charge\"},"
                            "{\"name\":\"ship\",\"tool\":\"shipping.book\"}]}",
                            1700, 0);

    t0 = now_s();
    for (int i = 0; i < ROUNDS_FAST; i++) {
        unsigned int n = 0;
        EVP_Digest(step, sizeof(step) - 1, digest, &n, EVP_sha256(), NULL);
        sink += digest[0];
    }
    rows[nrows++] = (row_t){"floor: SHA-256 of a step command", per_op_us(t0, ROUNDS_FAST)};
    t0 = now_s();
    for (int i = 0; i < ROUNDS_FAST; i++) {
        sg_mac_sign(&keys, "sagad.internal", "order-000042", 12, step, sizeof(step) - 1, mac);
        sink += (unsigned)mac[8];
    }
    rows[nrows++] = (row_t){"relay: sagad-mac of a step command", per_op_us(t0, ROUNDS_FAST)};
    t0 = now_s();
    for (int i = 0; i < ROUNDS_FAST; i++)
        sink += sg_mac_verify(&keys, "sagad.internal", "order-000042", 12, step, sizeof(step) - 1,
                              mac, strlen(mac)) == SG_MAC_OK;
    rows[nrows++] = (row_t){"worker: its check", per_op_us(t0, ROUNDS_FAST)};
    t0 = now_s();
    for (int i = 0; i < ROUNDS_SLOW; i++) {
        free(auth);
        auth = sg_auth_sign(priv, "shop", "k1", 1764300000, "order-000042", 12, start, slen, &err);
    }
    rows[nrows++] = (row_t){"client: sagad-auth of a 2 KB saga.start", per_op_us(t0, ROUNDS_SLOW)};
    t0 = now_s();
    for (int i = 0; i < ROUNDS_SLOW; i++)
        sink += sg_keyring_verify(kr, auth, strlen(auth), "order-000042", 12, start, slen,
                                  1764300000, 900, &err) != NULL;
    rows[nrows++] = (row_t){"worker: its check against the keyring", per_op_us(t0, ROUNDS_SLOW)};

    printf("bench-sign: the trust boundary's cost per message (one core, no services)\n");
    for (size_t i = 0; i < nrows; i++)
        printf("  %-42s %8.2f us  %10.0f msg/s\n", rows[i].name, rows[i].us, 1e6 / rows[i].us);
    if (!(fp = fopen(result ? result : "bench/results/sign.json", "w")))
        die("result", "cannot write the result file");
    fprintf(fp, "{\"bench\": \"sign\"");
    fprintf(fp, ", \"sha256_floor_us\": %.3f, \"mac_sign_us\": %.3f, \"mac_verify_us\": %.3f",
            rows[0].us, rows[1].us, rows[2].us);
    fprintf(fp, ", \"ed25519_sign_us\": %.3f, \"ed25519_verify_us\": %.3f}\n", rows[3].us,
            rows[4].us);
    fclose(fp);
    free(auth);
    sg_keyring_free(kr);
    sg_mac_keys_clear(&keys);
    return sink == 0xffffffffu; /* keeps the loops from being optimised away */
}
