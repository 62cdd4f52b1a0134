/* dlq-tool: the on-call operator's view of the dead-letter ledger.  Every
 * command, its options and its `--help` come from the table below. */
#include "dlq.h"

#define FILTER_OPTS                                                                                \
    {"--code", "CODE", "error code, e.g. tool.unknown; a trailing * matches a prefix"},            \
        {"--class", "CLASS", "error class: transient, throttled, timeout, permanent, poison"},     \
        {"--saga", "SAGA_ID", "dead letters of one saga"},                                         \
        {"--tool", "TOOL", "dead letters of steps calling this tool"},                             \
        {"--step", "STEP", "step index or step name"},                                             \
        {"--since", "WHEN", "created at or after: an age (90s, 30m, 2h, 7d) or a timestamp"},      \
        {"--until", "WHEN", "created before: an age (90s, 30m, 2h, 7d) or a timestamp"},           \
    {                                                                                              \
        "--status", "STATUS", "pending, replayed, discarded or any"                                \
    }

static const sg_cli_opt_t list_opts[] = {
    FILTER_OPTS,
    {"--limit", "N", "at most N entries (default 50)"},
    {"--before", "ID", "only entries older than ID (the next page: the last ID shown)"},
    {"--json", NULL, "one JSON object per line"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t groups_opts[] = {
    FILTER_OPTS,
    {"--json", NULL, "one JSON object per line"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t json_opt[] = {
    {"--json", NULL, "machine-readable JSON"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t stats_opts[] = {
    {"--json", NULL, "one JSON object"},
    {"--prometheus", NULL, "Prometheus text format (for a textfile collector)"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t replay_opts[] = {
    FILTER_OPTS,
    {"--reason", "TEXT", "why (required; kept in the replays ledger)"},
    {"--by", "NAME", "who replays (default $USER, else the login name)"},
    {"--operator", "NAME", "deprecated: the old name of --by, still taken"},
    {"--dry-run", NULL, "print what would happen, effects kept and repeated; change nothing"},
    {"--rerun-from", "STEP",
     "one entry: run every step from STEP (index or name) again under new keys, effects that "
     "stand included (listed; confirm, or --yes)"},
    {"--rate", "N/s", "at most N entries per second (also N/m)"},
    {"--limit", "N", "at most N entries"},
    {"--parallel", "N",
     "entries replayed at once, each on its own connection (default 4, at most 32)"},
    {"--yes", NULL,
     "no confirmation for a bulk replay or for --rerun-from's repeated effects (required when "
     "not at a terminal)"},
    {"--force", NULL, "replay an entry already replayed or discarded again"},
    {"--json", NULL, "one JSON object per entry"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t edit_opts[] = {
    {"--set", "PATH=VALUE", "set a member (JSON value, else a string); repeatable"},
    {"--file", "PATH", "the new payload is this file's content (no editor)"},
    {"--reason", "TEXT", "why, kept with the revision"},
    {"--by", "NAME", "who edits (default $USER, else the login name)"},
    {"--operator", "NAME", "deprecated: the old name of --by, still taken"},
    {"--json", NULL,
     "one JSON object: id, outcome (saved, unchanged, refused), revision, "
     "payload, problems"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t discard_opts[] = {
    {"--reason", "TEXT", "why (required)"},
    {"--by", "NAME", "who discards (default $USER, else the login name)"},
    {"--operator", "NAME", "deprecated: the old name of --by, still taken"},
    {"--json", NULL, "one JSON object per entry: id, outcome, released, detail"},
    {NULL, NULL, NULL},
};

static const sg_cli_opt_t tail_opts[] = {
    {"--from-beginning", NULL, "start at the oldest message still in the topic"},
    {"--max", "N", "stop after N entries"},
    {"--json", NULL, "print each record as received"},
    {NULL, NULL, NULL},
};

static const sg_cli_cmd_t dlq_cmds[] = {
    {"list", dlq_cmd_list, "[FILTERS] [--limit N] [--json]", "dead letters, newest first",
     list_opts,
     "Without --status every status is listed.  When there are more, the next page's\n"
     "--before is printed on stderr.  Exit 1 when nothing matches.\n"
     "Example: dlq-tool list --code 'tool.http.*' --status pending --since 2h\n",
     false},
    {"groups", dlq_cmd_groups, "[FILTERS] [--json]",
     "dead letters grouped by error code and tool: counts, first and last seen", groups_opts,
     "One line per error code and tool (no tool: a rejected or undecodable submission),\n"
     "most pending first: pending, replayed, discarded, total, sagas concerned, and when\n"
     "the first and the last entry of the group were written.  Without --status every\n"
     "status counts.  Exit 1 when nothing matches.\n"
     "Example: dlq-tool groups --since 24h\n",
     false},
    {"show", dlq_cmd_show, "ID [--json]",
     "one entry: the record, payload, attempt trail, saga state and replays", json_opt,
     "The payload shown is the latest revision (see edit).\n", false},
    {"stats", dlq_cmd_stats, "[--json | --prometheus]",
     "counts by code and class, pending by age, oldest pending, replays by outcome", stats_opts,
     NULL, false},
    {"replay", dlq_cmd_replay, "ID... | FILTERS  --reason TEXT [options]",
     "re-inject entries, one transaction each, under a new saga generation", replay_opts,
     "Each entry is replayed in one transaction: a replays row, the entry marked\n"
     "replayed, the saga's generation bumped, and the command in the outbox with\n"
     "headers sagad-replay-of and sagad-replay-id.  A step whose effect stands is never\n"
     "called again under a new key unless --rerun-from asks: held or compensated ->\n"
     "steps whose effect stands (succeeded, or skipped by the compensation because it\n"
     "has none) are kept, a step whose outcome is unknown runs again under its old key,\n"
     "every other step runs under the new generation's key; failed -> the failed\n"
     "compensation runs again; no step (a rejected or undecodable submission) -> the\n"
     "payload (latest revision) is submitted again.  Each line lists the effects kept\n"
     "and repeated (--json: kept, repeats).  A saga still running or compensating is\n"
     "refused (exit 3).  A filter selects pending entries unless --status says\n"
     "otherwise, oldest first.  Exit 3 when any entry was refused (already replayed:\n"
     "use --force; repeated effects not confirmed).  docs/DLQ.md has the table.\n"
     "Example: dlq-tool replay 42 --rerun-from charge --dry-run\n",
     false},
    {"edit", dlq_cmd_edit, "ID [--set PATH=VALUE]... | ID --file PATH [--json]",
     "fix a rejected submission's payload ($EDITOR, --set or --file), saved as a new revision",
     edit_opts,
     "The result must pass the worker's saga.start rules and the tool registry\n"
     "(worker.registry); otherwise every problem is printed as `JSON path: rule` and\n"
     "nothing is saved (exit 3).  PATH is like steps[1].tool or input.order.qty.\n"
     "An editor's file that was not saved is kept, and its path printed: fix it and\n"
     "save it with --file.\n"
     "Example: dlq-tool edit 42 --set steps[1].tool=inventory.reserve\n",
     false},
    {"discard", dlq_cmd_discard, "ID... --reason TEXT [--json]",
     "mark entries resolved without replay (kept, not deleted)", discard_opts,
     "Discarding the entry of a held saga releases the hold: the saga compensates.\n", false},
    {"saga", dlq_cmd_saga, "SAGA_ID [--json]",
     "the saga's timeline: attempts, compensations, dead letters, edits, replays", json_opt,
     "The same view as `sagactl show SAGA_ID` (one shared implementation).\n", false},
    {"tail", dlq_cmd_tail, "[--from-beginning] [--max N] [--json]",
     "follow the DLQ topic live, one line per new entry", tail_opts, NULL, false},
    {"migrate", sg_cli_cmd_migrate, "[--json]", "apply the database migrations and exit",
     sg_cli_migrate_opts, NULL, false},
};

int main(int argc, char **argv)
{
    static const sg_cli_app_t app = {"dlq-tool", "dlq-tool",
                                     "Lists, explains and replays dead-lettered sagad messages.",
                                     dlq_cmds, sizeof(dlq_cmds) / sizeof(dlq_cmds[0])};

    return sg_cli_main(&app, argc, argv);
}
