/* dlq-tool stats: counts by error code and class, pending by age, the
 * oldest pending entry, replays by outcome; also as Prometheus text
 * (--prometheus) for a textfile collector or a cron job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlq.h"

static const char by_code_sql[] =
    "SELECT error_code, error_class, count(*) FILTER (WHERE status = 'pending'), "
    "count(*) FILTER (WHERE status = 'replayed'), count(*) FILTER (WHERE status = 'discarded'), "
    "count(*) FROM dead_letters GROUP BY 1, 2 ORDER BY 3 DESC, 6 DESC, 1";

static const char summary_sql[] =
    "SELECT count(*) FILTER (WHERE status = 'pending'), "
    "count(*) FILTER (WHERE status = 'replayed'), count(*) FILTER (WHERE status = 'discarded'), "
    "(SELECT min(id) FROM dead_letters WHERE status = 'pending' AND created_at = "
    "  (SELECT min(created_at) FROM dead_letters WHERE status = 'pending')), "
    "coalesce(floor(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = "
    "  'pending')))::bigint, 0), "
    "to_char(min(created_at) FILTER (WHERE status = 'pending') AT TIME ZONE 'UTC', "
    "  'YYYY-MM-DD HH24:MI:SS') FROM dead_letters";

static const char by_age_sql[] =
    "SELECT b.label, count(d.id) FROM (VALUES (1, '< 1h', interval '0', interval '1 hour'), "
    "(2, '1h - 24h', interval '1 hour', interval '1 day'), "
    "(3, '1d - 7d', interval '1 day', interval '7 days'), "
    "(4, '> 7d', interval '7 days', interval '100 years')) b(ord, label, lo, hi) "
    "LEFT JOIN dead_letters d ON d.status = 'pending' AND now() - d.created_at >= b.lo "
    "AND now() - d.created_at < b.hi GROUP BY b.ord, b.label ORDER BY b.ord";

/* A replay's outcome: what became of the saga it re-injected. */
static const char replays_sql[] =
    "SELECT o, count(*) FROM (SELECT CASE WHEN r.action = 'resubmit' THEN 'resubmitted' "
    "  WHEN s.saga_id IS NULL THEN 'saga_gone' "
    "  WHEN s.generation <> r.new_generation THEN 'superseded' ELSE s.status END AS o "
    "  FROM replays r JOIN dead_letters d ON d.id = r.dead_letter_id "
    "  LEFT JOIN sagas s ON s.saga_id = d.saga_id) x GROUP BY o ORDER BY o";

typedef struct stats_s {
    sg_pg_res_t *by_code, *summary, *by_age, *replays;
} stats_t;

static void label(const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            printf("\\%c", *v);
        else if (*v == '\n')
            printf("\\n");
        else
            putchar(*v);
    }
}

static void prometheus(const stats_t *s)
{
    static const char *const status[] = {"pending", "replayed", "discarded"};
    const sg_pg_res_t *sum = s->summary;

    printf("# HELP sagad_dlq_dead_letters Dead letters in the ledger by error code, class and "
           "status.\n# TYPE sagad_dlq_dead_letters gauge\n");
    for (size_t r = 0; r < sg_pg_res_rows(s->by_code); r++) {
        for (int st = 0; st < 3; st++) {
            printf("sagad_dlq_dead_letters{code=\"");
            label(sg_pg_res_get(s->by_code, r, 0));
            printf("\",class=\"");
            label(sg_pg_res_get(s->by_code, r, 1));
            printf("\",status=\"%s\"} %s\n", status[st], sg_pg_res_get(s->by_code, r, 2 + st));
        }
    }
    printf("# HELP sagad_dlq_pending Dead letters waiting for an operator.\n"
           "# TYPE sagad_dlq_pending gauge\nsagad_dlq_pending %s\n",
           sg_pg_res_get(sum, 0, 0));
    printf("# HELP sagad_dlq_oldest_pending_age_seconds Age of the oldest pending dead letter, 0 "
           "when none is pending.\n# TYPE sagad_dlq_oldest_pending_age_seconds gauge\n"
           "sagad_dlq_oldest_pending_age_seconds %s\n",
           sg_pg_res_get(sum, 0, 4));
    printf("# HELP sagad_dlq_replays Operator replays by outcome (the replayed saga's state "
           "now).\n# TYPE sagad_dlq_replays gauge\n");
    for (size_t r = 0; r < sg_pg_res_rows(s->replays); r++)
        printf("sagad_dlq_replays{outcome=\"%s\"} %s\n", sg_pg_res_get(s->replays, r, 0),
               sg_pg_res_get(s->replays, r, 1));
}

static void human(const stats_t *s)
{
    static const char *const code_h[] = {"CODE",     "CLASS",     "PENDING",
                                         "REPLAYED", "DISCARDED", "TOTAL"};
    static const char *const age_h[] = {"PENDING AGE", "COUNT"};
    static const char *const rep_h[] = {"REPLAY OUTCOME", "COUNT"};
    const sg_pg_res_t *sum = s->summary;

    printf("pending %s, replayed %s, discarded %s\n", sg_pg_res_get(sum, 0, 0),
           sg_pg_res_get(sum, 0, 1), sg_pg_res_get(sum, 0, 2));
    if (sg_pg_res_get(sum, 0, 3))
        printf("oldest pending: %s, created %s UTC, %s s old\n", sg_pg_res_get(sum, 0, 3),
               sg_pg_res_get(sum, 0, 5), sg_pg_res_get(sum, 0, 4));
    printf("\n");
    dlq_table(s->by_code, code_h, 6, 60);
    printf("\n");
    dlq_table(s->by_age, age_h, 2, 60);
    printf("\n");
    dlq_table(s->replays, rep_h, 2, 60);
}

static void json(const stats_t *s)
{
    sg_json_t *o = sg_json_new_object(), *codes = sg_json_new_array(), *ages = sg_json_new_object(),
              *reps = sg_json_new_object();
    const sg_pg_res_t *sum = s->summary;
    char *text;

    sg_json_add_int(o, "pending", sg_pg_res_int(sum, 0, 0, 0));
    sg_json_add_int(o, "replayed", sg_pg_res_int(sum, 0, 1, 0));
    sg_json_add_int(o, "discarded", sg_pg_res_int(sum, 0, 2, 0));
    if (sg_pg_res_get(sum, 0, 3))
        sg_json_add_int(o, "oldest_pending_id", sg_pg_res_int(sum, 0, 3, 0));
    else
        sg_json_add_null(o, "oldest_pending_id");
    sg_json_add_int(o, "oldest_pending_age_s", sg_pg_res_int(sum, 0, 4, 0));
    for (size_t r = 0; r < sg_pg_res_rows(s->by_code); r++) {
        sg_json_t *c = sg_json_new_object();
        sg_json_add_str(c, "error_code", sg_pg_res_get(s->by_code, r, 0));
        sg_json_add_str(c, "error_class", sg_pg_res_get(s->by_code, r, 1));
        sg_json_add_int(c, "pending", sg_pg_res_int(s->by_code, r, 2, 0));
        sg_json_add_int(c, "replayed", sg_pg_res_int(s->by_code, r, 3, 0));
        sg_json_add_int(c, "discarded", sg_pg_res_int(s->by_code, r, 4, 0));
        sg_json_add_int(c, "total", sg_pg_res_int(s->by_code, r, 5, 0));
        sg_json_append(codes, c);
    }
    sg_json_add_node(o, "by_code", codes);
    for (size_t r = 0; r < sg_pg_res_rows(s->by_age); r++)
        sg_json_add_int(ages, sg_pg_res_get(s->by_age, r, 0), sg_pg_res_int(s->by_age, r, 1, 0));
    sg_json_add_node(o, "pending_by_age", ages);
    for (size_t r = 0; r < sg_pg_res_rows(s->replays); r++)
        sg_json_add_int(reps, sg_pg_res_get(s->replays, r, 0), sg_pg_res_int(s->replays, r, 1, 0));
    sg_json_add_node(o, "replays_by_outcome", reps);
    text = sg_json_print(o);
    printf("%s\n", text);
    free(text);
    sg_json_destroy(o);
}

int dlq_cmd_stats(sg_cli_t *cli, int argc, char **argv)
{
    dlq_t d;
    stats_t s = {NULL, NULL, NULL, NULL};
    int rc = dlq_open(&d, cli, argc, argv, true);

    if (rc)
        return dlq_close(&d, rc);
    if (d.args.npos) {
        dlq_warn(&d, "takes no arguments (try dlq-tool stats --help)");
        return dlq_close(&d, SG_EXIT_USAGE);
    }
    if (!(rc = dlq_query(&d, by_code_sql, 0, NULL, &s.by_code)) &&
        !(rc = dlq_query(&d, summary_sql, 0, NULL, &s.summary)) &&
        !(rc = dlq_query(&d, by_age_sql, 0, NULL, &s.by_age)) &&
        !(rc = dlq_query(&d, replays_sql, 0, NULL, &s.replays))) {
        if (sg_cli_opt(&d.args, "--prometheus"))
            prometheus(&s);
        else if (sg_cli_opt(&d.args, "--json"))
            json(&s);
        else
            human(&s);
    }
    sg_pg_res_destroy(s.by_code);
    sg_pg_res_destroy(s.summary);
    sg_pg_res_destroy(s.by_age);
    sg_pg_res_destroy(s.replays);
    return dlq_close(&d, rc);
}
