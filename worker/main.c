/* sagad-worker: runs saga steps from Kafka with outcomes stored in
 * PostgreSQL.  The logic lives in worker_*.c. */
#include <stdio.h>

#include "worker.h"

static const sg_cli_cmd_t worker_cmds[] = {
    {"run", worker_cmd_run, "",
     "consume the commands and internal topics and run sagas until SIGTERM", NULL, NULL, false},
    {"check-registry", worker_cmd_check_registry, "[FILE]",
     "check a tool registry file (default: worker.registry) and list its tools", NULL, NULL, false},
    {"topics", worker_cmd_topics, "[--partitions N]",
     "create the commands, internal, events and dead-letter topics when missing (default 6 "
     "partitions)",
     NULL, NULL, false},
    {"migrate", sg_cli_cmd_migrate, "", "apply the database migrations and exit", NULL, NULL,
     false},
    {"states", worker_cmd_states, "",
     "print the Markdown reference of the saga and step state machines (docs/STATES.md)", NULL,
     NULL, true},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {
        "sagad-worker", "worker",
        "Runs saga steps: consumes commands, calls tools, stores outcomes, offsets and the "
        "messages they cause in one PostgreSQL transaction.",
        worker_cmds, sizeof(worker_cmds) / sizeof(worker_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
