#!/usr/bin/env bash
# make fuzz: runs each libFuzzer target for SECONDS on its committed seeds
# (tests/fuzz/corpus/TARGET, plus the JSON fixtures of the contract it
# reads), and prints, per target, the executions, their rate and what was
# found.  A finding (crash, leak, undefined behaviour, a broken property,
# a timeout) fails the run; its input is kept under BUILD/artifacts and the
# fuzzer's output under BUILD/logs.
#
#   tests/fuzz/run.sh SECONDS BUILD TARGET...
#
# Every run starts from the committed seeds with the fixed seed 1, not
# from the corpus of an earlier run, so a run of N seconds repeats a
# prefix of a longer one: what passed locally for longer passes in CI.
set -uo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:?usage: tests/fuzz/run.sh SECONDS BUILD TARGET...}
build=${2:?usage: tests/fuzz/run.sh SECONDS BUILD TARGET...}
shift 2
mkdir -p "$build/artifacts" "$build/logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

seeds_of() { # TARGET: the seed directories
    echo "tests/fuzz/corpus/$1"
    case $1 in
    submit) echo tests/fixtures/saga-start/valid tests/fixtures/saga-start/invalid \
        tests/fixtures/step-command/valid tests/fixtures/step-command/invalid ;;
    registry) echo tests/fixtures/tool-registry/valid tests/fixtures/tool-registry/invalid ;;
    esac
}

failed=0
for t in "$@"; do
    work=$build/corpus/$t
    rm -rf "$work"
    mkdir -p "$work"
    # shellcheck disable=SC2046 # one word per directory
    "$build/fuzz_$t" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "$work" $(seeds_of "$t") \
        >"$build/logs/$t.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/logs/$t.log" | head -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$build/logs/$t.log" | head -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$build/logs/$t.log" | head -1)
    corpus=$(find "$work" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        echo "fuzz: $t: ${runs:-?} executions in $seconds s (${rate:-?}/s), corpus $corpus inputs, peak RSS ${rss:-?} MB, no finding"
    else
        failed=1
        echo "fuzz: $t: FINDING after ${runs:-?} executions (exit $rc); input in $build/artifacts/$t-*, log $build/logs/$t.log"
        grep -m 5 -E 'ERROR|SUMMARY|runtime error|deadly signal' "$build/logs/$t.log"
    fi
done
exit $failed
