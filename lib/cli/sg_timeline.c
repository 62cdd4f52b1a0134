#include "sagad/sg_timeline.h"

#include <stdlib.h>

#include "sagad/sg_text.h"

const sg_table_col_t sg_timeline_step_cols[] = {
    {"STEP", "step", SG_CELL_TEXT},
    {"NAME", "name", SG_CELL_TEXT},
    {"TOOL", "tool", SG_CELL_TEXT},
    {"STATUS", "status", SG_CELL_TEXT},
    {"ATTEMPTS", "attempts", SG_CELL_TEXT},
    {"COMP_ATTEMPTS", "comp_attempts", SG_CELL_TEXT},
    {"KEY", "idempotency_key", SG_CELL_TEXT},
    {"ERROR", "error_code", SG_CELL_TEXT},
    {NULL, NULL, SG_CELL_TEXT},
};

void sg_timeline_print(const sg_json_t *timeline, bool json, FILE *out)
{
    static const sg_table_col_t event_cols[] = {
        {"TIME (UTC)", "time", SG_CELL_TIME_MS},
        {"WHAT", "kind", SG_CELL_TEXT},
        {"DETAIL", "detail", SG_CELL_TEXT},
        {NULL, NULL, SG_CELL_TEXT},
    };
    const sg_json_t *events = sg_json_member(timeline, "events");
    const sg_json_t *steps = sg_json_member(timeline, "steps");
    const char *raw = sg_json_string(sg_json_member(timeline, "saga_id"));
    char *id;

    if (json) {
        for (const sg_json_t *e = sg_json_first(events); e; e = sg_json_next(e)) {
            char *text = sg_json_print(e);
            fprintf(out, "%s\n", text);
            free(text);
        }
        return;
    }
    id = sg_text_visible(raw ? raw : "?", false); /* a producer's id: shown, not obeyed */
    fprintf(out, "saga %s\n\n", id);
    free(id);
    sg_table_print_rows(out, event_cols, events, 120);
    if (sg_json_array_size(steps)) {
        fprintf(out, "\nsteps now:\n");
        sg_table_print_rows(out, sg_timeline_step_cols, steps, 80);
    }
}
