/* sagactl cancel, approve and reject: the control commands saga.cancel,
 * saga.approve and saga.reject (DESIGN.md section 10).  The worker does
 * not handle them yet (issue 25), so these refuse, sending nothing: a
 * command the worker cannot answer would leave the operator waiting on
 * silence.  Their arguments are final, so scripts can be written now. */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

/* The operator: --by, else the login name; NULL when neither is known. */
static const char *operator_name(const ctl_t *c)
{
    const char *v = sg_cli_opt(&c->args, "--by");
    struct passwd *pw;

    if (v && *v)
        return v;
    if ((v = getlogin()) && *v)
        return v;
    pw = getpwuid(getuid());
    return pw && pw->pw_name[0] ? pw->pw_name : NULL;
}

int ctl_cmd_control(sg_cli_t *cli, int argc, char **argv)
{
    ctl_t c;
    const char *verb = cli->cmd->name;
    size_t want = strcmp(verb, "cancel") == 0 ? 1 : 2;
    const char *reason;
    int rc = ctl_open(&c, cli, argc, argv, false);

    if (rc)
        return ctl_close(&c, rc);
    reason = sg_cli_opt(&c.args, "--reason");
    if (c.args.npos != want || !reason || !*reason) {
        ctl_warn(&c, "needs %s and --reason TEXT (try sagactl %s --help)",
                 want == 1 ? "a saga ID" : "a saga ID, a STEP", verb);
        return ctl_close(&c, SG_EXIT_USAGE);
    }
    if (!operator_name(&c)) {
        ctl_warn(&c, "who is asking? no --by and no login name: refused");
        return ctl_close(&c, SG_EXIT_REFUSED);
    }
    ctl_warn(&c,
             "not available yet: the worker does not handle saga.%s (issue 25), so nothing "
             "was sent to saga %s",
             strcmp(verb, "cancel") == 0 ? "cancel" : verb, c.args.pos[0]);
    return ctl_close(&c, SG_EXIT_REFUSED);
}
