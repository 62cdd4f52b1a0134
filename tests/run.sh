#!/usr/bin/env bash
# Runs the Criterion test binaries of one or more builds.
#
#   tests/run.sh [--only-integration] BUILD_DIR...
#
# Unit tests run first (no services).  Integration tests need the private
# PostgreSQL of deploy/local, a Kafka of their own (below), a second one
# with SASL/SCRAM and ACLs (test_acl.c; tests/services.sh) and the Jaeger
# of deploy/local/jaeger.sh (the tracing tests read their traces back from
# it): they are started when not running and stopped again at the end only
# if this script started them, so a developer's running services are left
# as they were.
set -euo pipefail
cd "$(dirname "$0")/.."

only_integration=0
if [ "${1:-}" = --only-integration ]; then
    only_integration=1
    shift
fi
[ $# -gt 0 ] || { echo "usage: tests/run.sh [--only-integration] BUILD_DIR..." >&2; exit 2; }

# Sanitizer builds: fail on the first report, with stacks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
# Criterion: bound every test so a hang fails instead of eating CI's time.
criterion_args=(--timeout 240)

# Runs one Criterion binary with a TAP report beside its normal output, and
# on failure repeats the failing tests' names and messages at the very end,
# where a truncated CI log still shows them (Criterion prints failures in
# the order tests finish, often screens above the summary).
run_criterion() {
    local tap rc=0
    tap=$(mktemp)
    "$@" "${criterion_args[@]}" --tap="$tap" || rc=$?
    if [ $rc != 0 ]; then
        echo "== failed in $1 (exit $rc):"
        awk '/^not ok/ { show = 1; print; next }
             show && /^  / { print; next }
             { show = 0 }' "$tap"
    fi
    rm -f "$tap"
    return $rc
}

bindir_of() {
    if [ "$1" = build ]; then echo bin; else echo "$1/bin"; fi
}

if [ $only_integration = 0 ]; then
    for b in "$@"; do
        echo "== unit tests ($b)"
        SAGAD_TEST_BIN_DIR=$(bindir_of "$b") run_criterion "$b/tests/unit-tests"
        echo "== model check ($b)"
        tests/model/run.sh "$b"
    done
fi

# Kafka of their own: every test makes uniquely named topics and leaves
# them behind, and on the broker of `make up` and `make demo` they piled
# up, run after run, to 15,000 partitions, which that broker then took
# over two minutes to load at start (longer than kafka.sh waits).  The
# tests' broker lives under .run/test/kafka (ports 39092/39093, or
# SAGAD_TEST_KAFKA_PORT and SAGAD_TEST_KAFKA_CONTROLLER_PORT), and its data
# is wiped whenever this script starts it.  PostgreSQL is shared: each
# test drops the database it made.
export SAGAD_LOCAL_KAFKA_DIR=$PWD/.run/test/kafka
export SAGAD_LOCAL_KAFKA_PORT=${SAGAD_TEST_KAFKA_PORT:-39092}
export SAGAD_LOCAL_KAFKA_CONTROLLER_PORT=${SAGAD_TEST_KAFKA_CONTROLLER_PORT:-39093}
if ! deploy/local/kafka.sh status >/dev/null 2>&1; then
    rm -rf "$SAGAD_LOCAL_KAFKA_DIR/data" "$SAGAD_LOCAL_KAFKA_DIR/logs"
fi

# shellcheck source=tests/services.sh
. tests/services.sh
sagad_services_up
sagad_acl_kafka_up

for b in "$@"; do
    echo "== integration tests ($b)"
    SAGAD_TEST_BIN_DIR=$(bindir_of "$b") run_criterion "$b/tests/integration-tests"
done

# ---- the gateway from outside: its HTTP API and the console -----------------
# tests/api/run.sh (the API against schemas/openapi.yaml: Schemathesis and
# a few hand-written checks) and tests/console/run.sh (the console in
# headless Chromium: Playwright and axe-core), each on a stack of its own
# over the services above: once, with the first build that is not a
# sanitizer build (the sanitizer build ran the same gateway code through
# test_gateway.c and test_console.c).  Their venvs are made on first use.
for b in "$@"; do
    case $b in
    */asan) continue ;;
    esac
    echo "== API contract tests ($b)"
    tests/api/run.sh "$(bindir_of "$b")"
    echo "== console browser tests ($b)"
    tests/console/run.sh "$(bindir_of "$b")"
    break
done

# The MCP server under the official Python SDKs (both majors, stdio and
# HTTP): the plain build only, the first given; the sanitizer build already
# ran the same server code through test_mcp.c's own suite.  Its venvs are
# made on first use (tests/mcp/run.sh).
tests/mcp/run.sh "$1"
