/* sagad-worker: consumes step commands and records their outcomes. */
#include "sagad/sg_cli.h"

static const sg_cli_cmd_t worker_cmds[] = {
    {"migrate", sg_cli_cmd_migrate, "", "apply the database migrations and exit"},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {
        "sagad-worker", "worker",
        "Consumes saga commands from Kafka and records each outcome in PostgreSQL.", worker_cmds,
        sizeof(worker_cmds) / sizeof(worker_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
