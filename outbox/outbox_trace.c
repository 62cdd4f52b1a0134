/* The relays' publish spans: with tracing on, one producer span per
 * sampled saga per batch, over every row of that saga in the batch
 * whatever its topic, from the batch's read to its last acknowledgement,
 * a child of the saga's span in the trace of the rows' traceparent.  Both
 * sources build them here from the rows they published.
 *
 * Until 2026-11-28 it was a span per row, then until 2026-11-29 one per
 * run of a saga's rows to one topic; a worker's transaction writes a
 * step's event and the next step's command to two topics, so that was two
 * spans where one tells the same: the rows of a batch share their start
 * and end. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox.h"
#include "sagad/sg_alloc.h"

/* A sampled row, for its saga's span. */
typedef struct pub_row_s {
    size_t i; /* the row in the batch */
    sg_trace_id_t trace;
    char *saga;
    const char *type, *topic, *id;
} pub_row_t;

/* A saga's rows together, each trace apart, in the batch's order. */
static int pub_row_cmp(const void *a, const void *b)
{
    const pub_row_t *x = a, *y = b;
    int c = strcmp(x->saga, y->saga);

    if (c == 0)
        c = memcmp(&x->trace, &y->trace, sizeof(x->trace));
    return c != 0 ? c : (x->i > y->i) - (x->i < y->i);
}

/* Appends ",text" (text alone when buf is empty) while it fits. */
static void list_add(char *buf, size_t size, const char *text)
{
    size_t used = strlen(buf);

    snprintf(buf + used, size - used, "%s%s", used ? "," : "", text);
}

/* The span of one saga's rows g[0..n) of a batch: "publish <topic>" with
 * messaging.destination.name when they go to one topic; "publish" with
 * sagad.destinations (the topics in order) when to several, since the
 * conventions set a batch's destination only when all its messages share
 * it.  One message names its type; several their count and types. */
static sg_span_t *pub_span(const pub_row_t *g, size_t n, int64_t start, int64_t end)
{
    char name[300], idtext[96], types[512] = "", topics[512] = "";
    bool one_topic = true;
    sg_span_t *span;

    for (size_t k = 0; k < n; k++) {
        bool seen = false;

        list_add(types, sizeof(types), g[k].type);
        for (size_t j = 0; j < k && !seen; j++)
            seen = strcmp(g[j].topic, g[k].topic) == 0;
        if (!seen)
            list_add(topics, sizeof(topics), g[k].topic);
        one_topic = one_topic && strcmp(g[k].topic, g[0].topic) == 0;
    }
    if (one_topic)
        snprintf(name, sizeof(name), "publish %s", g[0].topic);
    else
        snprintf(name, sizeof(name), "publish");
    /* the id of the saga's first row in the batch */
    snprintf(idtext, sizeof(idtext), "publish|%s", g[0].id);
    span = sg_span_new(&g[0].trace, sg_otel_id64(idtext), sg_otel_saga_span_id(g[0].saga), name,
                       SG_SPAN_PRODUCER, start, end);
    sg_span_str(span, "messaging.system", "kafka");
    if (one_topic)
        sg_span_str(span, "messaging.destination.name", g[0].topic);
    else
        sg_span_str(span, "sagad.destinations", topics);
    sg_span_str(span, "messaging.operation.type", "send");
    sg_span_str(span, "sagad.saga_id", g[0].saga);
    if (n == 1) {
        sg_span_str(span, "sagad.message_type", types);
    } else {
        sg_span_int(span, "messaging.batch.message_count", (int64_t)n);
        sg_span_str(span, "sagad.message_types", types);
    }
    return span;
}

void outbox_trace_batch(sg_otel_t *otel, const outbox_trace_row_t *in, size_t n, int64_t start,
                        int64_t end)
{
    sg_span_list_t spans = {0}; /* handed over at once: one lock a batch, not one a row */
    pub_row_t *rows;
    size_t m = 0;

    if (!otel || n == 0)
        return;
    rows = sg_xcalloc(n, sizeof(*rows));
    for (size_t i = 0; i < n; i++) {
        const outbox_trace_row_t *r = &in[i];
        pub_row_t *row = &rows[m];
        uint64_t parent;

        /* the key is the saga id: a span's parent is named by it */
        if (r->hint && r->key && r->key_len < 256 && memchr(r->key, '\0', r->key_len) == NULL &&
            sg_otel_parse_traceparent(r->hint->traceparent, &row->trace, &parent, NULL) == 0 &&
            sg_otel_sampled(otel, &row->trace)) {
            row->i = i;
            row->saga = sg_xstrndup((const char *)r->key, r->key_len);
            row->type = r->hint->type;
            row->topic = r->topic;
            row->id = r->id;
            m++;
        }
    }
    qsort(rows, m, sizeof(*rows), pub_row_cmp);
    for (size_t a = 0, b; a < m; a = b) {
        for (b = a + 1; b < m && strcmp(rows[a].saga, rows[b].saga) == 0 &&
                        memcmp(&rows[a].trace, &rows[b].trace, sizeof(rows[a].trace)) == 0;
             b++)
            ;
        sg_span_list_add(&spans, pub_span(&rows[a], b - a, start, end));
    }
    for (size_t k = 0; k < m; k++)
        free(rows[k].saga);
    free(rows);
    sg_otel_submit_list(otel, &spans);
}
