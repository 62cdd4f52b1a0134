/* dlq-tool: the on-call operator's view of the dead-letter ledger. */
#include "sagad/sg_cli.h"

static const sg_cli_cmd_t dlq_cmds[] = {
    {"migrate", sg_cli_cmd_migrate, "", "apply the database migrations and exit"},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {"dlq-tool", "dlq-tool",
                                     "Lists, explains and replays dead-lettered sagad messages.",
                                     dlq_cmds, sizeof(dlq_cmds) / sizeof(dlq_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
