/* sagactl internals: one ctl_cmd_<verb>.c per command (or per family of
 * commands reading the same data), sagactl's own helpers in ctl_common.c;
 * what it does as dlq-tool does (options, messages, the connection) is
 * lib/cli's sg_cmd, and what it asks PostgreSQL lib/ops's queries.
 *
 * Exit codes: sg_cli's SG_EXIT_* (0 ok, 1 failed outcome or nothing
 * matched, 2 usage or config, 3 refused, 4 PostgreSQL or Kafka
 * unreachable) and CTL_EXIT_TIMEOUT for a --wait that ran out.  Data goes
 * to stdout, diagnostics to stderr as plain sentences. */
#ifndef SAGAD_CTL_H
#define SAGAD_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_check.h"
#include "sagad/sg_cli.h"
#include "sagad/sg_cmd.h"
#include "sagad/sg_json.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_pg.h"
#include "sagad/sg_registry.h"
#include "sagad/sg_sign.h"
#include "sagad/sg_trust.h"

#define CTL_EXIT_TIMEOUT 124 /* as timeout(1): --wait ran out */

/* What every command holds: its parsed arguments and, once connected,
 * PostgreSQL (cmd), and the config (the loaded one, or for offline
 * commands one read without the checks a connection needs). */
typedef struct ctl_s {
    sg_cmd_t cmd;
    const sg_config_t *cfg;
    sg_config_t *own_cfg; /* offline commands: read here, freed by ctl_close */
} ctl_t;

/* Parses the command's arguments (and reads the config for an offline
 * command); connects to PostgreSQL when connect.  Returns SG_EXIT_OK, or
 * the exit code after saying why on stderr. */
int ctl_open(ctl_t *c, sg_cli_t *cli, int argc, char **argv, bool connect);
/* Frees what ctl_open made and returns rc. */
int ctl_close(ctl_t *c, int rc);

/* Reads FILE, or standard input for "-", whole: at most max bytes (more
 * is refused).  NULL after saying why, with *len SIZE_MAX when the input
 * was too large, 0 when it could not be read.  Caller frees. */
char *ctl_read_input(const ctl_t *c, const char *path, size_t max, size_t *len);

/* The JSON limits of the config (limits.*), as the worker applies them. */
void ctl_limits(const ctl_t *c, sg_json_limits_t *lim);

/* The tool registry of --registry, else worker.registry, read as every
 * front end reads it (sg_registry_load, no adapter hooks).  NULL after
 * saying why. */
sg_registry_t *ctl_registry(const ctl_t *c);

/* The worker's verdict on the saga.start text[0..len) under the config's
 * limits (sg_check_submission): 0 when it would accept it, otherwise the
 * number of problems in p.  Free p with sg_problems_free. */
int ctl_check(const ctl_t *c, const char *text, size_t len, const sg_registry_t *reg,
              sg_problems_t *p);
/* Prints the problems: "PATH: rule" lines, or with json one object
 * {"valid", "code", "problems": [{path, rule}], "warnings": [{path, rule}]};
 * without json the warnings go to stderr, "PATH: warning: ..." lines. */
void ctl_problems_print(const sg_problems_t *p, bool json);

/* A reader of the events topic with a throwaway group that commits
 * nothing.  "Now" is when it is opened, not when it joins its group: it
 * asks where every partition ends and starts there (the rebalance hook
 * gives those offsets), so nothing published in between is missed. */
typedef struct ctl_events_s {
    sg_kafka_t *k;
    const char *topic;
    int64_t *end; /* per partition: where it ended when opened */
    int nparts;
    bool from_beginning;
} ctl_events_t;

/* Opens e at the end of the events topic, or at its oldest message when
 * from_beginning; group names the group's prefix.  SG_EXIT_OK, or an exit
 * code after saying why (Kafka unreachable, no such topic: SG_EXIT_INFRA).
 * ctl_events_close(e) in every case. */
int ctl_events_open(const ctl_t *c, const char *group, bool from_beginning, ctl_events_t *e);
void ctl_events_close(ctl_events_t *e);

/* bytes (at most 16) random bytes as lowercase hex into out (2 * bytes
 * + 1 chars): ids sagactl makes up. */
void ctl_random_hex(char *out, size_t bytes);

/* Produces a command message text[0..len) to topic.commands keyed by key
 * (the saga id), waiting for Kafka's acknowledgement (at most timeout_ms,
 * 30 s per try).  SG_EXIT_OK, or after saying why SG_EXIT_INFRA
 * (SG_EXIT_USAGE when the producer cannot be configured). */
int ctl_produce_command(const ctl_t *c, const char *key, const char *text, size_t len,
                        int64_t timeout_ms);

/* The events that end a saga: completed, compensated, failed, cancelled
 * (and rejected, which ends a submission). */
bool ctl_event_terminal(const char *type);

/* Commands. */
int ctl_cmd_validate(sg_cli_t *cli, int argc, char **argv);
int ctl_cmd_keys(sg_cli_t *cli, int argc, char **argv);
int ctl_cmd_submit(sg_cli_t *cli, int argc, char **argv);
int ctl_cmd_status(sg_cli_t *cli, int argc, char **argv);
int ctl_cmd_show(sg_cli_t *cli, int argc, char **argv);
int ctl_cmd_list(sg_cli_t *cli, int argc, char **argv);
int ctl_cmd_watch(sg_cli_t *cli, int argc, char **argv);
int ctl_cmd_control(sg_cli_t *cli, int argc, char **argv);

#endif
