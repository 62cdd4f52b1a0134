#!/usr/bin/env python3
"""make structure-check: the saga decision stays a pure function.

  tests/structure/pure.py BUILD_DIR

The files of the decision (worker/decide/worker_decide.h) may call only what
cannot reach PostgreSQL, Kafka, the clock, a random source of its own, the
log or the metrics: JSON and text helpers, the registry and submission
checks of lib/, the backoff (its generator comes in), the other pure files
and worker_state.c's tables, and libc's memory, string and formatting
functions (sg_err_agent_action reads the embedded error-code registry,
parsed once: constant data).  Read from the built objects' undefined symbols (nm), so a call
added through any header is seen.  Fails naming the file and the symbol.
"""
import os
import re
import subprocess
import sys

# Files whose symbols the pure ones may use besides each other's:
# worker_state.c holds the status tables (and prints them for `sagad-worker
# states`, which is why it is not itself held to the rule).
PURE_DEPS = ["worker/decide/worker_state.c"]
# Every other file of worker/decide/ is the decision: its folder is the
# rule, so a file added there is checked without a word here.
PURE = sorted(os.path.join("worker/decide", f) for f in os.listdir("worker/decide")
              if f.endswith(".c") and os.path.join("worker/decide", f) not in PURE_DEPS)
ALLOWED = re.compile(
    r"^(sg_json_\w+|sg_ref_\w+|sg_err_set|sg_errclass_name|sg_err_agent_action|sg_registry_find|sg_principal_may_approve|sg_submit_(decode|validate|"
    r"validate_args|definition|is_group)|sg_traceparent_ok|sg_idem_key|sg_time_iso|sg_text_visible(_n)?|sg_utf8_\w+|"
    r"sg_backoff_delay_ms|sg_rng_upto|sg_x(malloc|calloc|realloc|strdup|strndup|check)|"
    r"abort|__assert_fail|__stack_chk_fail|malloc|calloc|realloc|free|strdup|strndup|strlen|"
    r"strcmp|strncmp|strchr|strstr|memcmp|memcpy|memmove|memset|snprintf|vsnprintf|sprintf|"
    r"gmtime_r|__\w+_chk)$")


def nm(obj, *flags):
    res = subprocess.run(["nm", *flags, obj], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in res.stdout.splitlines() if line.strip()]


def obj_of(build, src):
    return os.path.join(build, src[:-2] + ".o")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tests/structure/pure.py BUILD_DIR")
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    build = sys.argv[1]
    own = set()
    for src in PURE + PURE_DEPS:
        own.update(nm(obj_of(build, src), "--defined-only", "-g"))
    problems = []
    for src in PURE:
        for sym in nm(obj_of(build, src), "-u"):
            if sym not in own and not ALLOWED.match(sym):
                problems.append("%s calls %s: the decision is pure (worker/decide/worker_decide.h)"
                                % (src, sym))
    for p in problems:
        print("structure-check: " + p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print("structure-check: ok, the decision's %d files call nothing impure" % len(PURE))


if __name__ == "__main__":
    main()
