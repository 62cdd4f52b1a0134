/* sagad-relay internals: the relay loop and the status report. */
#ifndef SAGAD_OUTBOX_H
#define SAGAD_OUTBOX_H

#include <signal.h>

#include "sagad/sg_cli.h"

/* Advisory lock of shard n: OUTBOX_LOCK_BASE + n, held by the session of
 * the active relay for that shard. */
#define OUTBOX_LOCK_BASE 0x5a6ad0020000LL

/* Advisory lock of the janitor, held by the janitor session of the one
 * relay that removes expired rows (outbox_janitor.c). */
#define OUTBOX_JANITOR_LOCK 0x5a6ad0030000LL

typedef struct outbox_janitor_s outbox_janitor_t;

/* Starts the janitor thread (NULL when retention.janitor is off or the
 * thread cannot start, logged).  It runs while sg_run_running is set;
 * cfg must outlive it. */
outbox_janitor_t *outbox_janitor_start(const sg_config_t *cfg);
/* Waits for the thread to end (clear sg_run_running first); NULL: no-op. */
void outbox_janitor_stop(outbox_janitor_t *j);

/* `sagad-relay run`: publish until SIGTERM.  Returns an exit code. */
int outbox_cmd_run(sg_cli_t *cli, int argc, char **argv);

/* `sagad-relay status`: backlog, cursor and holder of every shard. */
int outbox_cmd_status(sg_cli_t *cli, int argc, char **argv);

#endif
