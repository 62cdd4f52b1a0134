/* sagad-relay: publishes the outbox to Kafka in commit order. */
#include "outbox.h"

static const sg_cli_opt_t status_opts[] = {
    {"--json", NULL,
     "one JSON object per shard: shard, held, holder, heartbeat_age_s, cursor, published, "
     "backlog, oldest_age_s, blocked_ms"},
    {NULL, NULL, NULL},
};

static const sg_cli_cmd_t outbox_cmds[] = {
    {"run", outbox_cmd_run, "", "publish the outbox and fire due timers until SIGTERM", NULL, NULL,
     false},
    {"status", outbox_cmd_status, "[--json]",
     "backlog, oldest unpublished age, cursor and holder per shard", status_opts,
     "Needs no more than the read-only role (sagad_reader).  Exit 4 when PostgreSQL cannot\n"
     "be reached or the schema is not migrated.\n",
     false},
    {"migrate", sg_cli_cmd_migrate, "[--json]", "apply the database migrations and exit",
     sg_cli_migrate_opts, NULL, false},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {
        "sagad-relay", "relay",
        "Publishes the PostgreSQL outbox to Kafka in commit order and fires due timers.",
        outbox_cmds, sizeof(outbox_cmds) / sizeof(outbox_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
