/* sagactl validate FILE|-: the worker's verdict on a saga.start, offline.
 * The rules are the worker's own (lib/contract/sg_submit_validate.c, lib/contract/sg_registry.c),
 * so what this accepts the worker accepts, and what it refuses comes with
 * the problems the worker's saga.rejected event would carry. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

int ctl_cmd_validate(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    sg_problems_t p;
    sg_registry_t *reg = NULL;
    const char *path;
    char *text = NULL;
    size_t len;
    int rc = ctl_open(&c, cli, argc, argv, false);

    if (rc)
        return ctl_close(&c, rc);
    if (!(path = sg_cmd_one_arg(&c.cmd, "FILE (or - for standard input)")))
        return ctl_close(&c, SG_EXIT_USAGE);
    if (!(reg = ctl_registry(&c)))
        return ctl_close(&c, SG_EXIT_USAGE);
    if (!(text = ctl_read_input(&c, path, (size_t)sg_config_int(c.cfg, "limits.max_message_bytes"),
                                &len))) {
        sg_registry_destroy(reg);
        return ctl_close(&c, len == SIZE_MAX ? SG_EXIT_REFUSED : SG_EXIT_USAGE);
    }
    ctl_check(&c, text, len, reg, &p);
    ctl_problems_print(&p, c.cmd.json);
    if (p.n) {
        sg_cmd_warn(&c.cmd, "%s would be refused (%s): %zu problem%s",
                    strcmp(path, "-") == 0 ? "standard input" : path, p.code, p.n,
                    p.n == 1 ? "" : "s");
        rc = SG_EXIT_REFUSED;
    } else if (!c.cmd.json) {
        fprintf(stderr, "%s: valid against %s\n", strcmp(path, "-") == 0 ? "standard input" : path,
                reg->path);
    }
    sg_problems_free(&p);
    free(text);
    sg_registry_destroy(reg);
    return ctl_close(&c, rc);
}
