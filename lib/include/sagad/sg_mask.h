/* sg_mask: the one place secrets are hidden before text leaves the process.
 *
 * sg_mask() copies text with every secret replaced by "****": passwords in
 * URLs (scheme://user:SECRET@host), values of password / secret / token
 * keywords in key=value, key: value and JSON forms ("password=x",
 * "sasl.password = 'x'", "\"client_secret\":\"x\""), Bearer/Basic
 * credentials, and every literal value registered with
 * sg_mask_add_secret() (the configured DSN password, Kafka secrets, the
 * tool registry's header tokens), wherever it appears.  The log writer,
 * --print-config and the error messages of libpq all go through it. */
#ifndef SAGAD_MASK_H
#define SAGAD_MASK_H

#include <stddef.h>

#define SG_MASK             "****"
#define SG_MASK_MIN_LITERAL 4 /* shorter literals are masked by context only */

/* Registers a secret value (copied) to be masked wherever it appears.
 * Values shorter than SG_MASK_MIN_LITERAL, and registrations past the
 * first 64, are ignored (their context patterns still apply).  Safe from
 * any thread; meant for start-up. */
void sg_mask_add_secret(const char *value);

/* Registers the password of a PostgreSQL DSN (URL or key=value form) and
 * of any `password`-like keyword in it. */
void sg_mask_add_dsn(const char *dsn);

/* Copies in to out (always NUL-terminated when out_size > 0, truncated to
 * fit) with every secret replaced by SG_MASK.  Returns the length written. */
size_t sg_mask(const char *in, char *out, size_t out_size);

/* True when a configuration key names a secret (password, secret, token,
 * private key), e.g. "sasl.password", "sasl.oauthbearer.client.secret". */
int sg_mask_key_is_secret(const char *key);

#endif
