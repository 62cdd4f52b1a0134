/* Decoding of command messages: the envelope every command shares, its
 * type's members, the key it came with; idempotency keys and
 * traceparent (sagad/sg_submit.h).  A saga.start's definition is checked
 * by sg_submit_validate.c. */
#include "sagad/sg_submit.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_text.h"

static bool id_char(char c)
{
    return c == '.' || c == '_' || c == '-' || c == ':' || (c >= '0' && c <= '9') ||
           (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool sg_saga_id_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > SG_SAGA_ID_MAX)
        return false;
    for (; *s; s++)
        if (!id_char(*s))
            return false;
    return true;
}

/* A required string member of 1 to max code points; false (err set, naming
 * the field and the rule) otherwise. */
static bool text_member(const sg_json_t *doc, const char *key, size_t max, const char **out,
                        sg_err_t *err)
{
    if (sg_json_get_str(doc, "$", key, true, out, err) < 0)
        return false;
    if (!**out || sg_utf8_chars(*out) > max) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                   "$.%s: length: 1 to %zu characters", key, max);
        return false;
    }
    return true;
}

/* A control command (v, type and saga_id checked already), type one of
 * SG_CMD_CANCEL {v, type, id, saga_id, by, reason}, SG_CMD_APPROVE and
 * SG_CMD_REJECT (the same and step: its index, or its name): that type, or
 * poison with err set. */
static void decode_control(sg_decoded_t *out, sg_ctype_t type, const char *name)
{
    static const char *const known[] = {"v",      "type",         "id",   "saga_id",   "by",
                                        "reason", "on_behalf_of", "step", "generation"};
    const size_t nknown = type == SG_CMD_CANCEL ? 7 : 9;
    const char *id = NULL, *by = NULL, *reason = NULL, *obo = NULL;
    const sg_json_t *step;
    sg_err_t *err = &out->err;

    for (const sg_json_t *m = sg_json_first(out->doc); m; m = sg_json_next(m)) {
        size_t i;
        for (i = 0; i < nknown && strcmp(sg_json_key(m), known[i]); i++)
            ;
        if (i == nknown) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                       "$.%.*s: additionalProperties: not allowed in a %s command",
                       (int)sg_utf8_cut(sg_json_key(m), 64), sg_json_key(m), name);
            return;
        }
    }
    if (!text_member(out->doc, "id", 128, &id, err) ||
        !text_member(out->doc, "by", SG_CONTROL_BY_MAX, &by, err) ||
        !text_member(out->doc, "reason", SG_CONTROL_REASON_MAX, &reason, err) ||
        (sg_json_member(out->doc, "on_behalf_of") &&
         !text_member(out->doc, "on_behalf_of", SG_ON_BEHALF_OF_MAX, &obo, err)))
        return;
    out->step = -1;
    if (type != SG_CMD_CANCEL) {
        step = sg_json_member(out->doc, "step");
        if (!step) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.required", "$.step: required");
            return;
        }
        if (sg_json_string(step)) {
            if (!text_member(out->doc, "step", 64, &out->step_name, err))
                return;
        } else {
            int64_t idx;
            if (sg_json_get_int(out->doc, "$", "step", true, &idx, err) < 0)
                return;
            if (idx < 0 || idx >= SG_MAX_STEPS) {
                sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                           "$.step: range: a step index 0-%d, or the step's name",
                           SG_MAX_STEPS - 1);
                return;
            }
            out->step = (int)idx;
        }
        /* The step's generation, when the sender binds its decision to it
         * (sagactl does): a gate of a later generation is not decided by
         * it.  0: not given. */
        if (sg_json_member(out->doc, "generation")) {
            int64_t g;
            if (sg_json_get_int(out->doc, "$", "generation", true, &g, err) < 0)
                return;
            if (g < 1 || g > INT_MAX) {
                sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                           "$.generation: range: 1 or more");
                return;
            }
            out->generation = (int)g;
        }
    }
    out->type = type;
    out->by = by;
    out->reason = reason;
    out->on_behalf_of = obo;
}

void sg_submit_check_key(sg_decoded_t *dec, const void *key, size_t key_len)
{
    size_t n = strlen(dec->saga_id);
    char *shown;

    if (dec->type == SG_CMD_POISON || (key && key_len == n && memcmp(key, dec->saga_id, n) == 0))
        return;
    /* The key as printable text, cut short: it is the producer's. */
    shown = key && key_len ? sg_text_visible_n(key, key_len < 64 ? key_len : 64, false) : NULL;
    dec->type = SG_CMD_POISON;
    sg_err_set(&dec->err, SG_ERRCLASS_POISON, "input.key.mismatch",
               "the message's Kafka key %s%s%s is not its saga_id \"%s\": every command of a saga "
               "must be keyed by its saga_id (that keeps them in order on one partition); send it "
               "again keyed by \"%s\"",
               shown ? "\"" : "", shown ? shown : "(none)", shown ? "\"" : "", dec->saga_id,
               dec->saga_id);
    free(shown);
}

void sg_submit_decode(const void *payload, size_t len, const sg_json_limits_t *lim,
                      sg_decoded_t *out)
{
    const char *type = NULL, *saga_id = NULL;
    int64_t v = 0, step = 0, attempt = 0, gen = 0;
    bool release = false, gate = false;
    sg_err_t *err = &out->err;

    memset(out, 0, sizeof(*out));
    out->type = SG_CMD_POISON;
    out->doc = sg_json_parse_counted(payload, len, lim, err, &out->nodes);
    if (!out->doc)
        out->nodes = 0;
    if (!out->doc || sg_json_exact_numbers(out->doc, err) < 0)
        return;
    if (!sg_json_is_object(out->doc)) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.type", "$: must be an object, got %s",
                   sg_json_type_name(out->doc));
        return;
    }
    if (sg_json_get_int(out->doc, "$", "v", true, &v, err) < 0 ||
        sg_json_get_str(out->doc, "$", "type", true, &type, err) < 0 ||
        sg_json_get_str(out->doc, "$", "saga_id", true, &saga_id, err) < 0)
        goto poison;
    if (v != 1) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                   "$.v: must be 1 (message format version), got %lld", (long long)v);
        return;
    }
    if (!sg_saga_id_ok(saga_id)) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                   "$.saga_id: must be 1-128 characters of A-Z a-z 0-9 . _ : -");
        return;
    }
    snprintf(out->saga_id, sizeof(out->saga_id), "%s", saga_id);
    if (strcmp(type, "saga.start") == 0) {
        out->type = SG_CMD_START;
        return;
    }
    if (strcmp(type, "saga.cancel") == 0 || strcmp(type, "saga.approve") == 0 ||
        strcmp(type, "saga.reject") == 0) {
        decode_control(out,
                       type[5] == 'c'   ? SG_CMD_CANCEL
                       : type[5] == 'a' ? SG_CMD_APPROVE
                                        : SG_CMD_REJECT,
                       type);
        return;
    }
    if (strcmp(type, "saga.release") == 0) {
        release = true;
    } else if (strcmp(type, "step.approval_timeout") == 0) {
        gate = true;
    } else if (strcmp(type, "step.execute") != 0 && strcmp(type, "step.compensate") != 0) {
        sg_err_set(err, SG_ERRCLASS_POISON, "input.message.unknown_type",
                   "$.type: \"%.*s\" is not a command (saga.start, step.execute, "
                   "step.compensate, saga.release, step.approval_timeout, saga.cancel, "
                   "saga.approve, saga.reject)",
                   (int)sg_utf8_cut(type, 64), type);
        return;
    }
    {
        /* saga.release has no step and attempt (the first 5 names),
         * step.approval_timeout no attempt (the first 6). */
        static const char *const known[] = {"v",          "type", "id",     "saga_id",
                                            "generation", "step", "attempt"};
        const size_t nknown = release ? 5 : gate ? 6 : 7;
        const char *id = NULL;
        for (const sg_json_t *m = sg_json_first(out->doc); m; m = sg_json_next(m)) {
            size_t i;
            for (i = 0; i < nknown && strcmp(sg_json_key(m), known[i]) != 0; i++)
                ;
            if (i == nknown) {
                sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                           "$.%.*s: additionalProperties: not allowed in a %s command",
                           (int)sg_utf8_cut(sg_json_key(m), 64), sg_json_key(m),
                           release ? "saga.release"
                           : gate  ? "step.approval_timeout"
                                   : "step");
                return;
            }
        }
        if (sg_json_get_str(out->doc, "$", "id", true, &id, err) < 0)
            return;
        if (!*id || sg_utf8_chars(id) > 128) {
            sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                       "$.id: length: 1 to 128 characters");
            return;
        }
    }
    if ((!release && sg_json_get_int(out->doc, "$", "step", true, &step, err) < 0) ||
        (!release && !gate && sg_json_get_int(out->doc, "$", "attempt", true, &attempt, err) < 0) ||
        sg_json_get_int(out->doc, "$", "generation", true, &gen, err) < 0)
        goto poison;
    if (release || gate)
        attempt = 1;
    if (step < 0 || step >= SG_MAX_STEPS || attempt < 1 || attempt > 1000000 || gen < 1 ||
        gen > 1000000) {
        sg_err_set(err, SG_ERRCLASS_PERMANENT, "input.schema.invalid",
                   "$: step must be 0-%d, attempt and generation 1-1000000", SG_MAX_STEPS - 1);
        return;
    }
    out->type = release          ? SG_CMD_RELEASE
                : gate           ? SG_CMD_APPROVAL_TIMEOUT
                : type[5] == 'e' ? SG_CMD_EXECUTE
                                 : SG_CMD_COMPENSATE;
    out->step = (int)step;
    out->attempt = (int)attempt;
    out->generation = (int)gen;
    return;
poison:
    /* The getters' class (permanent) stays: the loop dead-letters every
     * undecodable command whatever its class. */
    return;
}

void sg_idem_key(char *out, size_t out_size, const char *saga_id, int step, bool compensate,
                 int generation)
{
    snprintf(out, out_size, "%s:%d:%s:g%d", saga_id, step, compensate ? "c" : "f", generation);
}

static bool lower_hex(const char *s, size_t n, bool *all_zero)
{
    *all_zero = true;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
        if (s[i] != '0')
            *all_zero = false;
    }
    return true;
}

bool sg_traceparent_ok(const void *value, size_t len)
{
    const char *s = value;
    bool zero;

    if (!s || len != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-')
        return false;
    if (!lower_hex(s, 2, &zero) || (s[0] == 'f' && s[1] == 'f'))
        return false;
    if (!lower_hex(s + 3, 32, &zero) || zero) /* trace id */
        return false;
    if (!lower_hex(s + 36, 16, &zero) || zero) /* parent id */
        return false;
    return lower_hex(s + 53, 2, &zero);
}
