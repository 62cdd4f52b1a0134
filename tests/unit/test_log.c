/* sg_log: every line is one JSON object a log pipeline can parse, with
 * the fields that say where a message came from. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_log.h"
#include "unit.h"

static char *log_buf;
static size_t log_len;
static FILE *log_fp;
static cJSON *parsed[64]; /* freed by release(), even after a failed assertion */
static int nparsed;

static void capture(void)
{
    log_fp = open_memstream(&log_buf, &log_len);
    cr_assert_not_null(log_fp);
    sg_log_set_stream(log_fp);
    sg_log_init("worker", SG_LOG_INFO);
}

static void release(void)
{
    for (int i = 0; i < nparsed; i++)
        cJSON_Delete(parsed[i]);
    nparsed = 0;
    sg_log_set_stream(NULL);
    if (log_fp)
        fclose(log_fp);
    free(log_buf);
    log_fp = NULL;
    log_buf = NULL;
    log_len = 0;
}

TestSuite(log, .init = capture, .fini = release);

/* The captured lines, each parsed; n receives the count.  Fails the test
 * on a line that is not one JSON object. */
static cJSON **lines(int *n)
{
    const char *p;

    fflush(log_fp);
    for (p = log_buf; p && *p;) {
        const char *nl = strchr(p, '\n');
        cJSON *line;

        cr_assert_not_null(nl, "line not terminated: %s", p);
        cr_assert_lt(nparsed, 64);
        line = cJSON_ParseWithLength(p, (size_t)(nl - p));
        cr_assert_not_null(line, "not JSON (%zu bytes): %.100s ... %s", (size_t)(nl - p + 1), p,
                           nl - p > 100 ? nl - 100 : p);
        parsed[nparsed++] = line;
        cr_assert(cJSON_IsObject(line), "not an object: %.*s", (int)(nl - p), p);
        p = nl + 1;
    }
    *n = nparsed;
    return parsed;
}

static const char *str_field(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);

    cr_assert(cJSON_IsString(item), "field %s missing or not a string", key);
    return item->valuestring;
}

static double num_field(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);

    cr_assert(cJSON_IsNumber(item), "field %s missing or not a number", key);
    return item->valuedouble;
}

static bool has_field(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key) != NULL;
}

/* 2024-05-01T12:34:56.789Z */
static void check_ts(const char *ts)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";

    cr_assert_eq(strlen(ts), strlen(shape), "ts %s", ts);
    for (size_t i = 0; shape[i]; i++) {
        if (shape[i] == 'd')
            cr_assert(isdigit((unsigned char)ts[i]), "ts %s", ts);
        else
            cr_assert_eq(ts[i], shape[i], "ts %s", ts);
    }
}

Test(log, line_has_base_fields_and_context)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    cJSON **l;
    int n;

    ctx.saga_id = "s-42";
    ctx.step = "charge";
    ctx.attempt = 3;
    ctx.error_code = "tool.http.5xx";
    ctx.topic = "sagad.commands";
    ctx.partition = 2;
    ctx.offset = 1234567890123;
    sg_log(SG_LOG_WARN, &ctx, "step failed after %d ms", 250);
    l = lines(&n);
    cr_assert_eq(n, 1);
    check_ts(str_field(l[0], "ts"));
    cr_assert_str_eq(str_field(l[0], "level"), "warn");
    cr_assert_str_eq(str_field(l[0], "component"), "worker");
    cr_assert_str_eq(str_field(l[0], "msg"), "step failed after 250 ms");
    cr_assert_str_eq(str_field(l[0], "saga_id"), "s-42");
    cr_assert_str_eq(str_field(l[0], "step"), "charge");
    cr_assert_eq(num_field(l[0], "attempt"), 3);
    cr_assert_str_eq(str_field(l[0], "error_code"), "tool.http.5xx");
    cr_assert_str_eq(str_field(l[0], "topic"), "sagad.commands");
    cr_assert_eq(num_field(l[0], "partition"), 2);
    cr_assert_eq(num_field(l[0], "offset"), 1234567890123.0);
    cr_assert_str_eq(l[0]->child->string, "ts", "ts comes first");
}

Test(log, unset_context_fields_are_omitted_and_zero_is_set)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    cJSON **l;
    int n;

    ctx.saga_id = "s-1";
    ctx.attempt = 0;
    ctx.partition = 0;
    ctx.offset = 0;
    sg_log(SG_LOG_INFO, &ctx, "first try");
    sg_log_info("no context");
    l = lines(&n);
    cr_assert_eq(n, 2);
    cr_assert_eq(num_field(l[0], "attempt"), 0);
    cr_assert_eq(num_field(l[0], "partition"), 0);
    cr_assert_eq(num_field(l[0], "offset"), 0);
    cr_assert_not(has_field(l[0], "step"));
    cr_assert_not(has_field(l[0], "topic"));
    cr_assert_not(has_field(l[0], "error_code"));
    cr_assert_str_eq(str_field(l[1], "msg"), "no context");
    cr_assert_str_eq(str_field(l[1], "level"), "info");
    cr_assert_not(has_field(l[1], "saga_id"));
    cr_assert_not(has_field(l[1], "attempt"));
    cr_assert_not(has_field(l[1], "offset"));
}

Test(log, kv_fields)
{
    cJSON **l;
    int n;

    sg_log_kv(SG_LOG_ERROR, "ready", "port", "9464", "topic", "sagad.events", "empty", NULL, NULL);
    l = lines(&n);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(str_field(l[0], "level"), "error");
    cr_assert_str_eq(str_field(l[0], "msg"), "ready");
    cr_assert_str_eq(str_field(l[0], "port"), "9464");
    cr_assert_str_eq(str_field(l[0], "topic"), "sagad.events");
    cr_assert_str_eq(str_field(l[0], "empty"), "", "a NULL value is written as \"\"");
}

Test(log, debug_is_filtered_at_info)
{
    int evaluated = 0;
    cJSON **l;
    int n;

    sg_log_debug("hidden %d", ++evaluated);
    sg_log_kv(SG_LOG_DEBUG, "hidden kv", "k", "v", NULL);
    sg_log_info("shown");
    l = lines(&n);
    cr_assert_eq(n, 1, "only the info line: %s", log_buf);
    cr_assert_str_eq(str_field(l[0], "msg"), "shown");
    cr_assert_eq(evaluated, 0, "a filtered call must not evaluate its arguments");
}

Test(log, levels_follow_the_threshold)
{
    cJSON **l;
    int n;

    sg_log_init("relay", SG_LOG_ERROR);
    sg_log_warn("no");
    sg_log_info("no");
    sg_log_error("yes");
    sg_log_init("relay", SG_LOG_DEBUG);
    sg_log_debug("dbg");
    sg_log_kv(SG_LOG_DEBUG, "dbg kv", NULL);
    l = lines(&n);
    cr_assert_eq(n, 3, "%s", log_buf);
    cr_assert_str_eq(str_field(l[0], "msg"), "yes");
    cr_assert_str_eq(str_field(l[0], "component"), "relay");
    cr_assert_str_eq(str_field(l[1], "level"), "debug");
    cr_assert_str_eq(str_field(l[2], "msg"), "dbg kv");
}

Test(log, quotes_newlines_and_control_bytes_are_escaped)
{
    const char *nasty = "say \"hi\"\n\tback\\slash\r\x01\x1f end";
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    cJSON **l;
    int n;

    ctx.saga_id = nasty;
    sg_log(SG_LOG_INFO, &ctx, "%s", nasty);
    sg_log_kv(SG_LOG_INFO, nasty, "detail", nasty, NULL);
    l = lines(&n);
    cr_assert_eq(n, 2, "a newline in a value must not split the line");
    cr_assert_str_eq(str_field(l[0], "msg"), nasty);
    cr_assert_str_eq(str_field(l[0], "saga_id"), nasty);
    cr_assert_str_eq(str_field(l[1], "msg"), nasty);
    cr_assert_str_eq(str_field(l[1], "detail"), nasty);
}

/* Error text from a downstream (an HTTP body, a libpq message) can be
 * long; the line is cut, but it must still be one JSON object. */
Test(log, long_value_still_gives_one_json_line)
{
    static char value[10001];
    cJSON **l;
    int n;

    memset(value, 'a', sizeof(value) - 1);
    sg_log_kv(SG_LOG_ERROR, "tool failed", "body", value, "after", "x", NULL);
    l = lines(&n);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(str_field(l[0], "msg"), "tool failed");
}

Test(log, long_escaped_message_still_gives_one_json_line)
{
    char msg[4096]; /* the longest message sg_log_write formats */
    cJSON **l;
    int n;

    memset(msg, '"', sizeof(msg) - 1);
    msg[sizeof(msg) - 1] = '\0';
    sg_log_error("%s", msg);
    l = lines(&n);
    cr_assert_eq(n, 1);
    cr_assert_eq(strlen(str_field(l[0], "msg")), sizeof(msg) - 1, "message cut");
}

Test(log, level_names_parse)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};

    for (int i = 0; i < 4; i++) {
        sg_log_level_t lv = SG_LOG_INFO;

        cr_assert_eq(sg_log_level_parse(names[i], &lv), 0, "%s", names[i]);
        cr_assert_eq(lv, (sg_log_level_t)i, "%s", names[i]);
        cr_assert_str_eq(sg_log_level_name(lv), names[i]);
    }
    cr_assert_str_eq(sg_log_level_name((sg_log_level_t)9), "unknown");
}

Test(log, unknown_level_names_are_refused)
{
    sg_log_level_t lv = SG_LOG_WARN;

    cr_assert_eq(sg_log_level_parse("verbose", &lv), -1);
    cr_assert_eq(sg_log_level_parse("INFO", &lv), -1);
    cr_assert_eq(sg_log_level_parse("", &lv), -1);
    cr_assert_eq(sg_log_level_parse("warning", &lv), -1);
    cr_assert_eq(lv, SG_LOG_WARN, "a failed parse must not write *out");
}

Test(log, escape_function_truncates_on_escape_boundaries)
{
    char out[16];

    cr_assert_eq(sg_log_json_escape(out, sizeof(out), "a\"b\\c\n"), 9);
    cr_assert_str_eq(out, "a\\\"b\\\\c\\n");
    cr_assert_eq(sg_log_json_escape(out, sizeof(out), "\x01"), 6);
    cr_assert_str_eq(out, "\\u0001");
    cr_assert_eq(sg_log_json_escape(out, 5, "abcdefgh"), 4);
    cr_assert_str_eq(out, "abcd");
    /* No half escape: a lone backslash would break the JSON string. */
    cr_assert_eq(sg_log_json_escape(out, 2, "\"x"), 0);
    cr_assert_str_eq(out, "");
    cr_assert_eq(sg_log_json_escape(out, 4, "a\x02"), 1);
    cr_assert_str_eq(out, "a");
    out[0] = 'z';
    cr_assert_eq(sg_log_json_escape(out, 0, "abc"), 0);
    cr_assert_eq(out[0], 'z', "out_size 0 writes nothing");
}

/* A cut never leaves half a character: a line with a broken UTF-8
 * sequence is thrown away whole by log shippers. */
Test(log, escape_function_never_cuts_a_utf8_sequence)
{
    char out[16];

    /* é is 2 bytes, € 3, 😀 4: room for "a" and part of each. */
    cr_expect_eq(sg_log_json_escape(out, 3, "a\xc3\xa9"), 1);
    cr_expect_str_eq(out, "a");
    cr_expect_eq(sg_log_json_escape(out, 4, "a\xe2\x82\xac"), 1);
    cr_expect_str_eq(out, "a");
    cr_expect_eq(sg_log_json_escape(out, 5, "a\xf0\x9f\x98\x80"), 1);
    cr_expect_str_eq(out, "a");
    /* Whole ones stay, and so does the text before a cut one. */
    cr_expect_eq(sg_log_json_escape(out, 6, "\xf0\x9f\x98\x80\xc3\xa9"), 4);
    cr_expect_str_eq(out, "\xf0\x9f\x98\x80");
    cr_expect_eq(sg_log_json_escape(out, sizeof(out), "x\xe2\x82\xac"), 4);
    cr_expect_str_eq(out, "x\xe2\x82\xac");
    /* Text already cut before it came here loses its broken tail too. */
    cr_expect_eq(sg_log_json_escape(out, sizeof(out), "ok\xe2\x82"), 2);
    cr_expect_str_eq(out, "ok");
}

Test(log, long_component_is_cut_not_overflowed)
{
    cJSON **l;
    int n;

    sg_log_init("a-component-name-much-longer-than-thirty-two-bytes", SG_LOG_INFO);
    sg_log_info("x");
    l = lines(&n);
    cr_assert_eq(n, 1);
    cr_assert_eq(strncmp(str_field(l[0], "component"), "a-component-name", 16), 0);
}

/* With tracing on, lines about a saga carry its trace context: given as
 * ids, or taken from a W3C traceparent. */
Test(log, trace_context_from_ids_or_a_traceparent)
{
    sg_log_ctx_t a = SG_LOG_CTX_INIT, b = SG_LOG_CTX_INIT, c = SG_LOG_CTX_INIT;
    cJSON **l;
    int n;

    a.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    a.span_id = "00f067aa0ba902b7";
    b.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    c.traceparent = "not a traceparent";
    sg_log(SG_LOG_INFO, &a, "a");
    sg_log(SG_LOG_INFO, &b, "b");
    sg_log(SG_LOG_INFO, &c, "c");
    l = lines(&n);
    cr_assert_eq(n, 3);
    for (int i = 0; i < 2; i++) {
        cr_expect_str_eq(str_field(l[i], "trace_id"), "4bf92f3577b34da6a3ce929d0e0e4736");
        cr_expect_str_eq(str_field(l[i], "span_id"), "00f067aa0ba902b7");
    }
    cr_expect_null(cJSON_GetObjectItem(l[2], "trace_id"));
}

/* A record logged whole (a dead letter's envelope) is one JSON member,
 * masked like every field. */
Test(log, a_json_member_is_kept_whole_and_masked)
{
    sg_log_ctx_t ctx = SG_LOG_CTX_INIT;
    cJSON **l, *env;
    int n;

    ctx.saga_id = "s-1";
    sg_log_json(SG_LOG_WARN, &ctx, "dead-lettered", "dead_letter",
                "{\"error_code\":\"x.y\",\"payload\":\"pay password=hunter2xyz\"}");
    l = lines(&n);
    cr_assert_eq(n, 1);
    env = cJSON_GetObjectItem(l[0], "dead_letter");
    cr_assert(cJSON_IsObject(env), "an object, not a string");
    cr_expect_str_eq(cJSON_GetObjectItem(env, "error_code")->valuestring, "x.y");
    cr_expect_str_eq(cJSON_GetObjectItem(env, "payload")->valuestring, "pay password=****");
    cr_expect_str_eq(str_field(l[0], "saga_id"), "s-1");
}
