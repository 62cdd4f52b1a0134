/* `sagad-relay status`: what an operator asks first when events are late,
 * asked through lib/ops (sg_relay_status) and shown as a table or, with
 * --json, one object per shard. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "outbox.h"
#include "sagad/sg_cmd.h"
#include "sagad/sg_relay_query.h"
#include "sagad/sg_table.h"

static void status_table(const sg_json_t *rows)
{
    static const sg_table_col_t cols[] = {
        {"shard", "shard", SG_CELL_TEXT},
        {"holder", "holder", SG_CELL_TEXT},
        {"heartbeat", "heartbeat_age_s", SG_CELL_TEXT},
        {"cursor(tx/id)", NULL, SG_CELL_TEXT},
        {"published", "published", SG_CELL_TEXT},
        {"backlog", "backlog", SG_CELL_TEXT},
        {"oldest_s", "oldest_age_s", SG_CELL_TEXT},
        {"blocked_ms", "blocked_ms", SG_CELL_TEXT},
        {"lock", NULL, SG_CELL_TEXT},
        {NULL, NULL, SG_CELL_TEXT},
    };
    sg_table_t *t = sg_table_new_cols(cols);

    for (const sg_json_t *r = sg_json_first(rows); r; r = sg_json_next(r)) {
        char *cells[9], cursor[64], *tx = sg_table_cell(r, "cursor.tx", SG_CELL_TEXT);
        char *id = sg_table_cell(r, "cursor.id", SG_CELL_TEXT);
        bool held = false;

        for (int c = 0; c < 9; c++)
            cells[c] = cols[c].key ? sg_table_cell(r, cols[c].key, cols[c].cell) : NULL;
        snprintf(cursor, sizeof(cursor), "%s/%s", tx ? tx : "0", id ? id : "0");
        cells[3] = cursor;
        /* A shard nobody holds publishes nothing: shouted. */
        (void)sg_json_get_bool(r, "$", "held", false, &held, NULL);
        cells[8] = held ? "held" : "FREE";
        sg_table_add(t, (const char *const *)cells);
        for (int c = 0; c < 9; c++)
            if (c != 3 && c != 8)
                free(cells[c]);
        free(tx);
        free(id);
    }
    sg_table_print(t, stdout, 60);
    sg_table_destroy(t);
}

/* The WAL source, above the shards (which it no longer fills). */
static void wal_table(const sg_json_t *rows)
{
    static const sg_table_col_t cols[] = {
        {"source", "source", SG_CELL_TEXT},
        {"slot", "slot", SG_CELL_TEXT},
        {"holder", "holder", SG_CELL_TEXT},
        {"confirmed", "confirmed_lsn", SG_CELL_TEXT},
        {"lag_bytes", "lag_bytes", SG_CELL_TEXT},
        {"retained_bytes", "retained_bytes", SG_CELL_TEXT},
        {"table_rows", "table_rows", SG_CELL_TEXT},
        {"slot_state", NULL, SG_CELL_TEXT},
        {NULL, NULL, SG_CELL_TEXT},
    };
    sg_table_t *t = sg_table_new_cols(cols);

    for (const sg_json_t *r = sg_json_first(rows); r; r = sg_json_next(r)) {
        char *cells[8];
        bool active = false, exists = false;

        for (int c = 0; c < 7; c++)
            cells[c] = sg_table_cell(r, cols[c].key, cols[c].cell);
        (void)sg_json_get_bool(r, "$", "active", false, &active, NULL);
        (void)sg_json_get_bool(r, "$", "slot_exists", false, &exists, NULL);
        /* No relay streaming, or no slot at all: shouted, as a FREE shard. */
        cells[7] = active ? "streamed" : exists ? "NOT STREAMED" : "MISSING";
        sg_table_add(t, (const char *const *)cells);
        for (int c = 0; c < 7; c++)
            free(cells[c]);
    }
    sg_table_print(t, stdout, 60);
    sg_table_destroy(t);
}

int outbox_cmd_status(sg_cli_t *cli, int argc, char **argv)
{
    sg_cmd_t c;
    sg_json_t *rows = NULL, *wal = NULL;
    sg_err_t err;
    int rc = sg_cmd_open(&c, cli, argc, argv);

    if (rc || (rc = sg_cmd_no_args(&c) < 0 ? SG_EXIT_USAGE : SG_EXIT_OK) ||
        (rc = sg_cmd_connect(&c, cli->cfg, SG_PG_ROLE_RUNTIME)))
        return sg_cmd_close(&c, rc);
    if (sg_relay_status(c.pg, &rows, &err) < 0 || sg_relay_wal_status(c.pg, &wal, &err) < 0) {
        sg_cmd_warn(&c, "%s (has `sagad-relay migrate` run?)", err.message);
        rc = SG_EXIT_INFRA;
    } else if (c.json) {
        /* the WAL source's object first (it has "source"), then the shards */
        for (const sg_json_t *r = sg_json_first(wal); r; r = sg_json_next(r))
            sg_cmd_print_json(r);
        for (const sg_json_t *r = sg_json_first(rows); r; r = sg_json_next(r))
            sg_cmd_print_json(r);
    } else {
        if (sg_json_first(wal)) {
            wal_table(wal);
            fputc('\n', stdout);
        }
        status_table(rows);
    }
    sg_json_destroy(rows);
    sg_json_destroy(wal);
    return sg_cmd_close(&c, rc);
}
