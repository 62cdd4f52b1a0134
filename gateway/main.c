/* sagad-gateway: one authenticated HTTP front door for producers,
 * approvers, on-call and agents (docs/GATEWAY.md).  Every command, its
 * options, its `--help`, man page and completion come from the table
 * below. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

int gw_cmd_run(sg_cli_t *cli, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return gw_serve(cli);
}

static const sg_cli_opt_t token_opts[] = {
    {"--user", "NAME", "the user the token is for, as the users file names it"},
    {"--json", NULL, "token and hash as one JSON object"},
    {NULL, NULL, NULL},
};

int gw_cmd_token(sg_cli_t *cli, int argc, char **argv)
{
    sg_cli_args_t args;
    const char *user;
    char token[48], hash[72];

    if (sg_cli_parse(cli, argc, argv, &args) < 0)
        return SG_EXIT_USAGE;
    user = sg_cli_opt(&args, "--user");
    if (args.npos != 1 || strcmp(args.pos[0], "new") != 0 || !user || !*user) {
        fprintf(stderr, "%s token: usage: %s token new --user NAME [--json]\n", cli->prog,
                cli->prog);
        sg_cli_args_free(&args);
        return SG_EXIT_USAGE;
    }
    gw_token_new(token, hash);
    if (sg_cli_opt(&args, "--json")) {
        sg_json_t *doc = sg_json_new_object();
        char *text;
        sg_json_add_str(doc, "user", user);
        sg_json_add_str(doc, "token", token);
        sg_json_add_str(doc, "hash", hash);
        text = sg_json_print(doc);
        printf("%s\n", text);
        sg_json_destroy(doc);
        free(text);
    } else {
        printf("token (give it to %s; it is not stored anywhere):\n  %s\n"
               "hash (add it to the user's \"tokens\" in the users file, gateway.users):\n  %s\n",
               user, token, hash);
    }
    memset(token, 0, sizeof(token));
    sg_cli_args_free(&args);
    return SG_EXIT_OK;
}

static const sg_cli_opt_t mcp_opts[] = {
    {"--stdio", NULL, "speak MCP on stdin and stdout (the only transport of this command)"},
    {NULL, NULL, NULL},
};

static const sg_cli_cmd_t gw_cmds[] = {
    {"run", gw_cmd_run, "", "serve the API until SIGTERM", NULL,
     "Listens on gateway.bind:gateway.port (127.0.0.1:8480 by default): the API under /v1\n"
     "(schemas/openapi.yaml), /healthz, /readyz and /metrics.  Reads PostgreSQL (pg.dsn,\n"
     "a login in role sagad_operator) and produces to topic.commands.  Users, their roles\n"
     "and hashed tokens come from gateway.users; submissions and controls are signed with\n"
     "gateway.key for the user who asked (a delegate principal of the workers' keyring).\n"
     "SIGTERM: no new connection, then exit 0.\n"
     "Exit 2 bad configuration (users file, key, address), 4 PostgreSQL unreachable.\n",
     false},
    {"token", gw_cmd_token, "new --user NAME [--json]",
     "make a bearer token and the hash the users file keeps", token_opts,
     "Prints a new random token once, and the line to add to the user's \"tokens\" in\n"
     "the users file (gateway.users): the file keeps only the token's SHA-256.  Give the\n"
     "token to its user (Authorization: Bearer TOKEN); revoke it by removing the hash\n"
     "and restarting the gateway.\n"
     "Example: sagad-gateway token new --user finance:ann\n",
     true},
    {"mcp", gw_cmd_mcp, "--stdio", "serve MCP to a local agent on stdin and stdout", mcp_opts,
     "For an agent runtime that starts its MCP servers as processes (docs/AGENTS.md):\n"
     "newline-delimited JSON-RPC on stdin and stdout, logs on stderr only.  Speaks MCP\n"
     "2026-07-28 (server/discover, _meta on every request) and the initialize handshake\n"
     "of 2025-06-18 and 2025-11-25; tools to list the registry, validate, submit, read,\n"
     "wait for, list and cancel sagas and explain error codes (approve_step and\n"
     "reject_step with mcp.approvals).  Acts as the user of the bearer token in\n"
     "mcp.token (SAGAD_MCP_TOKEN), with that user's roles; needs what `run` needs\n"
     "(gateway.users, gateway.key, worker.registry, pg.dsn, Kafka) but no port.  Over\n"
     "HTTP the same server is POST /mcp of `run`.  Ends at the end of stdin or SIGTERM.\n"
     "Exit 2 bad configuration or unknown token, 4 PostgreSQL unreachable.\n",
     false},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {"sagad-gateway", "gateway",
                                     "Serves sagad's authenticated HTTP API (submit, follow, "
                                     "approve, cancel, dead letters) and MCP.",
                                     gw_cmds, sizeof(gw_cmds) / sizeof(gw_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
