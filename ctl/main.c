/* sagactl: one command for producers and on-call to validate, submit,
 * follow, find and (once the worker handles them) cancel and approve
 * sagas.  Every command, its options and its `--help`, man page and
 * shell completion come from the table below. */
#include "ctl.h"

static const sg_cli_opt_t validate_opts[] = {
    {"--registry", "FILE", "the tool registry (default: the config's worker.registry)"},
    {"--json", NULL, "one JSON object: valid, code, problems"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t submit_opts[] = {
    {"--wait", NULL, "follow the events topic until the saga ends; print the outcome"},
    {"--timeout", "DUR", "how long --wait waits (default 5m): 500ms, 90s, 30m, 2h"},
    {"--registry", "FILE", "the tool registry (default: the config's worker.registry)"},
    {"--key", "FILE", "sign it with this key (sagactl keys new; default: the config's ctl.key)"},
    {"--json", NULL, "the submission and the outcome event as JSON lines"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t json_opt[] = {
    {"--json", NULL, "machine-readable JSON"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t list_opts[] = {
    {"--status", "S",
     "running, held, completed, compensating, compensated, failed, cancelling or cancelled"},
    {"--name", "N", "sagas of this name"},
    {"--since", "WHEN", "created at or after: an age (90s, 30m, 2h, 7d) or a timestamp"},
    {"--until", "WHEN", "created before: an age (90s, 30m, 2h, 7d) or a timestamp"},
    {"--stuck", "DUR", "running, compensating or cancelling, with no progress for DUR"},
    {"--limit", "N", "at most N sagas (default 50)"},
    {"--before", "SAGA_ID", "the next page: sagas created before this one"},
    {"--json", NULL, "one JSON object per line"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t watch_opts[] = {
    {"--name", "N", "only sagas of this name"},
    {"--from-beginning", NULL, "start at the oldest event still in the topic"},
    {"--max", "N", "stop after N events"},
    {"--json", NULL, "each event as it came, one per line"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t control_opts[] = {
    {"--reason", "TEXT", "why (required; kept in the saga's history)"},
    {"--by", "NAME", "who asks (default: $USER, else the login name; refused when unknown)"},
    {"--operator", "NAME", "deprecated: the old name of --by, still taken"},
    {"--wait", NULL, "wait for the worker's answer (cancel: then for the saga's end)"},
    {"--timeout", "DUR", "how long --wait waits (default 5m)"},
    {"--key", "FILE", "sign it with this key (sagactl keys new; default: the config's ctl.key)"},
    {"--json", NULL, "print the answering events as they came"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t keys_opts[] = {
    {"--principal", "NAME", "new: the principal the key belongs to, as the keyring names it"},
    {"--key-id", "ID", "new: the key's id within the principal (default k1)"},
    {"--out", "FILE", "new: where the private key is written (mode 0600, never overwritten)"},
    {"--json", NULL, "the public half as one JSON object"},
    {NULL, NULL, NULL},
};

static const sg_cli_cmd_t ctl_cmds[] = {
    {"validate", ctl_cmd_validate, "FILE|- [--registry FILE] [--json]",
     "check a saga.start offline with the worker's rules and the tool registry", validate_opts,
     "Prints every problem as `JSON-path: rule`, the problems the worker's saga.rejected\n"
     "event would carry.  No Kafka or PostgreSQL needed (nor pg.dsn).  A valid saga may\n"
     "get warnings (`JSON-path: warning: ...` on stderr; `warnings` with --json), e.g. a\n"
     "compensation of its own step's result, which a timed-out step does not have.\n"
     "Exit 0 valid (warnings or not), 3 refused, 2 when the file or the registry cannot\n"
     "be read.\n"
     "Example: sagactl validate --registry tools.json order.json\n",
     true},
    {"submit", ctl_cmd_submit, "FILE|- [--wait] [--timeout DUR] [--json]",
     "validate, then produce a saga.start to the commands topic keyed by its saga_id", submit_opts,
     "A file may omit id and saga_id: they are generated and printed.  Nothing is sent\n"
     "when the worker would refuse it (the problems are printed, exit 3).\n"
     "With --wait: exit 0 completed, 1 compensated, failed, cancelled or rejected,\n"
     "4 Kafka unreachable, 124 not finished within --timeout (the saga goes on).\n"
     "Example: sagactl submit --wait --timeout 2m order.json\n",
     true},
    {"status", ctl_cmd_status, "SAGA_ID [--json]",
     "where a saga stands: status, steps done, the step it is at, last progress", json_opt,
     "Exit 1 when there is no such saga.\n", false},
    {"show", ctl_cmd_show, "SAGA_ID [--json]",
     "the saga's timeline: attempts, keys, latencies, errors, compensations, replays, edits",
     json_opt, "`dlq-tool saga SAGA_ID` is the same view.  Exit 1 when there is no such saga.\n",
     false},
    {"list", ctl_cmd_list,
     "[--status S] [--name N] [--since WHEN] [--until WHEN] [--stuck DUR] [--limit N]",
     "sagas, newest first, a page at a time", list_opts,
     "When there are more, the next page's --before is printed on stderr.\n"
     "Exit 1 when no saga matches.\n"
     "Example: sagactl list --stuck 15m      (what on-call asks first)\n",
     false},
    {"watch", ctl_cmd_watch, "[SAGA_ID | --name N] [--from-beginning] [--json]",
     "follow the events topic live, one decoded line per event", watch_opts,
     "Following one saga, watch ends after the saga's last event.  --name knows a saga\n"
     "by its saga.accepted, or for a saga accepted before the watch began, asks\n"
     "PostgreSQL once (pg.dsn; without it such sagas are not shown, and it says so).\n",
     true},
    {"cancel", ctl_cmd_control, "SAGA_ID --reason TEXT [--by NAME] [--wait] [--timeout DUR]",
     "stop a saga: no new call starts, completed steps are compensated", control_opts,
     "Produces saga.cancel to the commands topic keyed by the saga id.  The worker\n"
     "lets a call in flight finish, compensates what stands in reverse, and ends the\n"
     "saga cancelled; a saga that does not exist, has ended or is already\n"
     "compensating is answered with saga.command_refused.  --by and --reason are kept\n"
     "in the saga's history (saga_controls) and its events.\n"
     "Exit 0 sent (with --wait: the saga ended cancelled), 1 refused by the worker or\n"
     "the saga ended failed, 3 refused here (nothing sent), 4 Kafka unreachable,\n"
     "124 no answer within --timeout (the cancel stands).\n"
     "Example: sagactl cancel order-42 --reason \"customer withdrew\" --wait\n",
     true},
    {"approve", ctl_cmd_control, "SAGA_ID STEP --reason TEXT [--by NAME] [--wait] [--timeout DUR]",
     "let a step waiting for approval run", control_opts,
     "Produces saga.approve for STEP (its name, or its index from 0 as events and\n"
     "`sagactl show` give it: each member of a parallel group has its own) of a step\n"
     "awaiting_approval (announced by step.approval_requested): it runs.  Any other step\n"
     "is answered with saga.command_refused.\n"
     "Exit 0 sent (with --wait: approved), 1 refused by the worker, 3 refused here\n"
     "(nothing sent), 4 Kafka unreachable, 124 no answer within --timeout.\n"
     "Example: sagactl approve order-42 charge --reason \"known customer\" --wait\n",
     true},
    {"keys", ctl_cmd_keys, "new --principal NAME --out FILE [--key-id ID] | show FILE",
     "make a principal's Ed25519 key pair; print the keyring entry to register", keys_opts,
     "Control commands (cancel, approve, reject) and submissions of sagas with an\n"
     "approval gate must be signed by a principal of the workers' keyring\n"
     "(security.keyring).  `keys new` writes the private key to --out and prints the\n"
     "principal's keyring entry with the submit role; give it the roles it needs\n"
     "(submit, cancel, approve, and approve_tools to limit what it may approve).\n"
     "`keys show FILE` prints the entry of an existing key again.  Sign with --key FILE\n"
     "or the config's ctl.key.\n"
     "Exit 0 done, 2 bad arguments or the file exists.\n"
     "Example: sagactl keys new --principal finance:bob --out bob.key\n",
     true},
    {"reject", ctl_cmd_control, "SAGA_ID STEP --reason TEXT [--by NAME] [--wait] [--timeout DUR]",
     "refuse a step waiting for approval: the saga compensates", control_opts,
     "Produces saga.reject for STEP (its name, or its index from 0 as events give it)\n"
     "of a step awaiting_approval: it fails without being called and the saga\n"
     "compensates.\n"
     "Exit 0 sent (with --wait: rejected), 1 refused by the worker, 3 refused here\n"
     "(nothing sent), 4 Kafka unreachable, 124 no answer within --timeout.\n",
     true},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {
        "sagactl", "sagactl",
        "Validates, submits, follows and finds sagas: the producer's and on-call's command.",
        ctl_cmds, sizeof(ctl_cmds) / sizeof(ctl_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
