/* sagad-relay: publishes the outbox to Kafka in commit order. */
#include "outbox.h"

static const sg_cli_cmd_t outbox_cmds[] = {
    {"run", outbox_cmd_run, "", "publish the outbox and fire due timers until SIGTERM", NULL, NULL,
     false},
    {"status", outbox_cmd_status, "",
     "backlog, oldest unpublished age, cursor and holder per shard", NULL, NULL, false},
    {"migrate", sg_cli_cmd_migrate, "", "apply the database migrations and exit", NULL, NULL,
     false},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {
        "sagad-relay", "relay",
        "Publishes the PostgreSQL outbox to Kafka in commit order and fires due timers.",
        outbox_cmds, sizeof(outbox_cmds) / sizeof(outbox_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
