/* The builtin adapter: tools implemented inside the worker, for examples,
 * tests and benchmarks.
 *
 *   noop    succeeds with no data
 *   echo    succeeds with its args as data
 *   fail    fails with args.class (default permanent) and args.code (default
 *           tool.builtin.fail); with args.times = N only attempts 1..N fail,
 *           with args.generations = N only generations 1..N (a downstream
 *           fixed before an operator's replay);
 *           args.retry_after_ms plays a downstream's Retry-After
 *   sleep   sleeps args.ms (a timeout when that exceeds the tool's timeout)
 *   ledger  applies one effect per idempotency key in builtin_ledger and
 *           counts the calls: what tests use to prove "once per key"
 *   crash   aborts the worker process; refused unless
 *           worker.test_allow_crash is set */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sagad/sg_alloc.h"
#include "sagad/sg_log.h"
#include "../worker.h"

typedef enum builtin_e {
    B_NOOP,
    B_ECHO,
    B_FAIL,
    B_SLEEP,
    B_LEDGER,
    B_CRASH,
} builtin_t;

static const char *const builtin_names[] = {"noop", "echo", "fail", "sleep", "ledger", "crash"};

static int builtin_prepare(sg_tool_t *tool, const sg_json_t *node, const char *base,
                           const sg_config_t *cfg, sg_err_t *err)
{
    char path[300];
    size_t i;

    (void)node;
    sg_json_path_key(path, sizeof(path), base, "target");
    if (!tool->target)
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: a builtin target is a string naming the builtin", path);
    for (i = 0; i < sizeof(builtin_names) / sizeof(builtin_names[0]); i++)
        if (strcmp(tool->target, builtin_names[i]) == 0)
            break;
    if (i == sizeof(builtin_names) / sizeof(builtin_names[0]))
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "config.registry.invalid",
                          "%s: unknown builtin \"%s\" (known: noop, echo, fail, sleep, ledger, "
                          "crash)",
                          path, tool->target);
    if (i == B_CRASH && !sg_config_bool(cfg, "worker.test_allow_crash"))
        return sg_err_set(err, SG_ERRCLASS_PERMANENT, "tool.crash.refused",
                          "%s: builtin \"crash\" aborts the worker: it is refused unless "
                          "worker.test_allow_crash=true (tests only)",
                          path);
    tool->state = (void *)(uintptr_t)i;
    return 0;
}

static void nap_ms(int64_t ms, volatile sig_atomic_t *stop)
{
    /* Sleeps in slices so a hard stop is not held up. */
    while (ms > 0 && !(stop && *stop)) {
        int64_t slice = ms > 50 ? 50 : ms;
        struct timespec ts = {(time_t)(slice / 1000), (long)(slice % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        ms -= slice;
    }
}

static void call_fail(const worker_call_t *call, worker_result_t *out)
{
    const char *cls_name = "permanent", *code = "tool.builtin.fail", *message = NULL;
    int64_t times = -1, generations = -1, retry_after = 0;
    sg_errclass_t cls;

    sg_json_get_str(call->args, "$", "class", false, &cls_name, NULL);
    sg_json_get_str(call->args, "$", "code", false, &code, NULL);
    sg_json_get_str(call->args, "$", "message", false, &message, NULL);
    sg_json_get_int(call->args, "$", "times", false, &times, NULL);
    sg_json_get_int(call->args, "$", "generations", false, &generations, NULL);
    sg_json_get_int(call->args, "$", "retry_after_ms", false, &retry_after, NULL);
    if ((times >= 0 && call->attempt > times) ||
        (generations >= 0 && call->generation > generations)) {
        char buf[64];
        snprintf(buf, sizeof(buf), "{\"attempt\":%d}", call->attempt);
        out->data = sg_xstrdup(buf);
        out->status = WORKER_OK;
        return;
    }
    if (sg_errclass_parse(cls_name, &cls) < 0 || cls == SG_ERRCLASS_NONE)
        cls = SG_ERRCLASS_PERMANENT;
    out->retry_after_ms = retry_after > 0 ? retry_after : 0;
    worker_result_error(out, cls, code, "%s", message ? message : "failed as asked (builtin fail)");
}

static void call_ledger(worker_thread_t *th, const worker_call_t *call, worker_result_t *out)
{
    static const char sql[] =
        "INSERT INTO builtin_ledger (key, args) VALUES ($1, $2::jsonb) "
        "ON CONFLICT (key) DO UPDATE SET calls = builtin_ledger.calls + 1, last_at = now() "
        "RETURNING calls";
    char *args = sg_json_print(call->args);
    const char *params[2] = {call->idem_key, args};
    sg_pg_res_t *res = NULL;
    sg_err_t err;
    char buf[512];

    if (!th->pg || !sg_pg_ok(th->pg)) {
        sg_pg_opts_t opts;
        sg_pg_destroy(th->pg);
        sg_pg_opts_from_config(&opts, th->cfg, "sagad-worker ledger");
        opts.connect_attempts = 1;
        th->pg = sg_pg_connect(&opts, &err);
    }
    if (!th->pg || sg_pg_exec_cached(th->pg, sql, 2, params, &res, &err) < 0) {
        worker_result_error(out, SG_ERRCLASS_TRANSIENT, "tool.ledger.unavailable", "ledger: %s",
                            err.message);
        free(args);
        return;
    }
    snprintf(buf, sizeof(buf), "{\"key\":\"%s\",\"calls\":%s}", call->idem_key,
             sg_pg_res_get(res, 0, 0));
    out->data = sg_xstrdup(buf);
    out->status = WORKER_OK;
    sg_pg_res_destroy(res);
    free(args);
}

static void builtin_call(worker_thread_t *th, const worker_call_t *call, worker_result_t *out)
{
    int64_t ms = 0;

    switch ((builtin_t)(uintptr_t)call->tool->state) {
    case B_NOOP:
        out->status = WORKER_OK;
        break;
    case B_ECHO:
        out->data = sg_json_print(call->args);
        out->status = WORKER_OK;
        break;
    case B_FAIL:
        call_fail(call, out);
        break;
    case B_SLEEP:
        sg_json_get_int(call->args, "$", "ms", false, &ms, NULL);
        if (ms > call->tool->timeout_ms) {
            nap_ms(call->tool->timeout_ms, th->stop);
            worker_result_error(out, SG_ERRCLASS_TIMEOUT, "tool.timeout",
                                "no answer within %lld ms", (long long)call->tool->timeout_ms);
            break;
        }
        nap_ms(ms, th->stop);
        out->status = WORKER_OK;
        break;
    case B_LEDGER:
        call_ledger(th, call, out);
        break;
    case B_CRASH:
        sg_log_kv(SG_LOG_ERROR, "builtin crash: aborting the worker as asked", "saga_id",
                  call->saga_id, "step", call->step_name, NULL);
        abort();
    }
}

const worker_adapter_t worker_builtin_adapter = {
    .name = "builtin", .prepare = builtin_prepare, .call = builtin_call};
