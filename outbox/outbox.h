/* sagad-relay internals: the relay loop and the status report. */
#ifndef SAGAD_OUTBOX_H
#define SAGAD_OUTBOX_H

#include <signal.h>

#include "sagad/sg_cli.h"

/* Advisory lock of shard n: OUTBOX_LOCK_BASE + n, held by the session of
 * the active relay for that shard. */
#define OUTBOX_LOCK_BASE 0x5a6ad0020000LL

/* `sagad-relay run`: publish until SIGTERM.  Returns an exit code. */
int outbox_cmd_run(sg_cli_t *cli, int argc, char **argv);

/* `sagad-relay status`: backlog, cursor and holder of every shard. */
int outbox_cmd_status(sg_cli_t *cli, int argc, char **argv);

#endif
