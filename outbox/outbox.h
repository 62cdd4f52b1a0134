/* sagad-relay internals: the relay loop and the status report. */
#ifndef SAGAD_OUTBOX_H
#define SAGAD_OUTBOX_H

#include <signal.h>

#include "sagad/sg_cli.h"

/* The schema the relay needs: 0021 has the functions its shard and janitor
 * locks are taken through (sagad_relay_try_lock, sagad_janitor_try_lock;
 * their keys are the database's own, schemas/sql/0021_least_privilege.sql),
 * 0022 the quarantine of rows the broker refuses, 0023 the internal keys it
 * signs with (schemas/sql/0023_trust.sql). */
#define OUTBOX_SCHEMA_VERSION 23

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
