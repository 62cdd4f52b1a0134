/* sagactl keys new|show: a principal's Ed25519 key pair.  `new` writes the
 * private half to a file only its owner may read (never over an existing
 * one) and prints the public half as the keyring entry to register;
 * `show` prints the entry of an existing key file again.  Offline: no
 * Kafka, no PostgreSQL. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "sagad/sg_text.h"

/* The keyring entry of a principal with one key, on stdout. */
static void print_entry(const ctl_t *c, const char *principal, const char *key_id,
                        const unsigned char pub[SG_ED25519_PUBLIC], const char *path)
{
    char *b64 = sg_base64(pub, SG_ED25519_PUBLIC);

    if (c->cmd.json) {
        /* the path is the user's: escaped as JSON, not pasted in */
        sg_json_t *o = sg_json_new_object();
        char *text;

        sg_json_add_str(o, "principal", principal);
        sg_json_add_str(o, "key_id", key_id);
        sg_json_add_str(o, "public_key", b64);
        sg_json_add_str(o, "file", path);
        text = sg_json_print(o);
        printf("%s\n", text);
        free(text);
        sg_json_destroy(o);
    } else
        printf("\"%s\": {\"keys\": {\"%s\": \"%s\"}, \"roles\": [\"submit\"]}\n", principal, key_id,
               b64);
    free(b64);
}

static bool name_ok(const char *s, size_t max, const char *extra)
{
    size_t n = strlen(s);

    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              (ch && strchr(extra, ch))))
            return false;
    }
    return true;
}

static int keys_new(ctl_t *c)
{
    const char *principal = sg_cli_opt(&c->cmd.args, "--principal");
    const char *key_id = sg_cli_opt(&c->cmd.args, "--key-id");
    const char *path = sg_cli_opt(&c->cmd.args, "--out");
    unsigned char pub[SG_ED25519_PUBLIC], priv[SG_ED25519_PRIVATE];
    char *b64;
    sg_err_t err;
    FILE *fp;
    int fd;

    if (!key_id)
        key_id = "k1";
    if (!principal || !name_ok(principal, SG_PRINCIPAL_MAX, "._@:-")) {
        sg_cmd_warn(&c->cmd, "--principal NAME is required: [A-Za-z0-9._@:-]{1,64}, the name the "
                             "keyring will know it by");
        return SG_EXIT_USAGE;
    }
    if (!name_ok(key_id, SG_KEY_ID_MAX, "._-")) {
        sg_cmd_warn(&c->cmd, "--key-id must match [A-Za-z0-9._-]{1,32}");
        return SG_EXIT_USAGE;
    }
    if (!path) {
        sg_cmd_warn(&c->cmd, "--out FILE is required: where the private key goes (mode 0600)");
        return SG_EXIT_USAGE;
    }
    if (sg_ed25519_keygen(pub, priv, &err) < 0) {
        sg_cmd_warn(&c->cmd, "%s", err.message);
        return SG_EXIT_FAIL;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        sg_cmd_warn(&c->cmd, "cannot create %s: %s%s", path, strerror(errno),
                    errno == EEXIST ? " (a key is never overwritten: choose another file)" : "");
        memset(priv, 0, sizeof(priv));
        return SG_EXIT_USAGE;
    }
    fp = fdopen(fd, "w");
    b64 = sg_base64(priv, sizeof(priv));
    memset(priv, 0, sizeof(priv));
    fprintf(fp, "{\"principal\": \"%s\", \"key_id\": \"%s\", \"private_key\": \"%s\"}\n", principal,
            key_id, b64);
    memset(b64, 0, strlen(b64));
    free(b64);
    if (fclose(fp) != 0) {
        sg_cmd_warn(&c->cmd, "cannot write %s: %s", path, strerror(errno));
        return SG_EXIT_FAIL;
    }
    print_entry(c, principal, key_id, pub, path);
    if (!c->cmd.json)
        fprintf(stderr,
                "%s: private key written to %s (keep it secret); add the line above to the "
                "keyring's \"principals\" with the roles it needs (submit, cancel, approve)\n",
                c->cmd.cli->prog, path);
    return SG_EXIT_OK;
}

static int keys_show(ctl_t *c)
{
    const char *path = c->cmd.args.npos == 2 ? c->cmd.args.pos[1] : NULL;
    unsigned char pub[SG_ED25519_PUBLIC];
    char why[512];
    sg_signing_key_t k;

    if (!path) {
        sg_cmd_warn(&c->cmd, "show needs the key FILE");
        return SG_EXIT_USAGE;
    }
    if (sg_signing_key_load(path, &k, why, sizeof(why)) < 0) {
        sg_cmd_warn(&c->cmd, "%s", why);
        return SG_EXIT_USAGE;
    }
    if (sg_ed25519_public(k.priv, pub) < 0) {
        memset(&k, 0, sizeof(k));
        sg_cmd_warn(&c->cmd, "%s: not an Ed25519 private key", path);
        return SG_EXIT_USAGE;
    }
    memset(k.priv, 0, sizeof(k.priv));
    print_entry(c, k.principal, k.key_id, pub, path);
    return SG_EXIT_OK;
}

int ctl_cmd_keys(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    int rc = ctl_open(&c, cli, argc, argv, false);

    if (rc)
        return ctl_close(&c, rc);
    if (c.cmd.args.npos >= 1 && strcmp(c.cmd.args.pos[0], "new") == 0 && c.cmd.args.npos == 1)
        rc = keys_new(&c);
    else if (c.cmd.args.npos >= 1 && strcmp(c.cmd.args.pos[0], "show") == 0)
        rc = keys_show(&c);
    else {
        sg_cmd_warn(&c.cmd, "needs new or show (try %s keys --help)", cli->prog);
        rc = SG_EXIT_USAGE;
    }
    return ctl_close(&c, rc);
}
