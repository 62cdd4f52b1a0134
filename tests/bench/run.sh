#!/usr/bin/env bash
# make bench: runs the benchmarks against a PostgreSQL and a Kafka of their
# own under .run/bench/ (ports 54349, 29192/29193; SAGAD_BENCH_*_PORT to
# change them), with a Kafka whose data is wiped first: a broker that kept
# the thousands of topics tests leave behind spends a core on them, which
# would be measured too.  Both are stopped at the end.  Figures are printed
# and written under bench/results/; nothing here passes or fails on speed.
set -euo pipefail
cd "$(dirname "$0")/../.."

bench_dir=$PWD/.run/bench
export SAGAD_LOCAL_PG_DIR=$bench_dir/pg
export SAGAD_LOCAL_PG_PORT=${SAGAD_BENCH_PG_PORT:-54349}
export SAGAD_LOCAL_KAFKA_DIR=$bench_dir/kafka
export SAGAD_LOCAL_KAFKA_PORT=${SAGAD_BENCH_KAFKA_PORT:-29192}
export SAGAD_LOCAL_KAFKA_CONTROLLER_PORT=${SAGAD_BENCH_KAFKA_CONTROLLER_PORT:-29193}

timeout 60 deploy/local/kafka.sh stop >/dev/null 2>&1 || true
rm -rf "$bench_dir/kafka/data" "$bench_dir/kafka/logs"

# shellcheck source=tests/services.sh
. tests/services.sh
sagad_services_up
# Warm-up, not measured: a broker just started runs its first minutes of
# load through the JVM's compilers. Right after a start, the worker
# bench's p99 measured 387-531 ms; the same code on a broker that had run
# a few minutes, 78-165 ms. One short warm-up run was not enough: over
# consecutive worker bench runs on a new broker, the broker took 97%,
# 65%, 51%, 50%, 50% and 50% of a core for the same load, and its JIT
# compiler threads 2.8 s, 0.5 s, 0.3 s, 0.4 s and 0.2 s of CPU per run
# after the first. So worker bench runs are spent on it until one leaves
# the compilers under a second of CPU (at most 4 runs); their figures are
# discarded.
kafka_pid=$(cat "$SAGAD_LOCAL_KAFKA_DIR/kafka.pid" 2>/dev/null || echo 0)
# CPU ticks (1/100 s) the broker's JIT compiler threads have used so far.
jit_ticks() {
    local t comm stat sum=0
    local -a f
    for t in /proc/"$kafka_pid"/task/*; do
        read -r comm <"$t/comm" 2>/dev/null || continue
        case $comm in
        C1\ Compiler* | C2\ Compiler*)
            # fields 14 and 15 of stat: utime and stime (comm has spaces,
            # so count from the end of its parenthesis: field 3 is f[0])
            read -r stat <"$t/stat" 2>/dev/null || continue
            read -ra f <<<"${stat##*) }"
            sum=$((sum + f[11] + f[12])) ;;
        esac
    done
    echo "$sum"
}
for run in 1 2 3 4; do
    before=$(jit_ticks)
    echo "bench: warm-up run $run of bench-worker (not measured)..." >&2
    SAGAD_BENCH_REF_ROUNDS=0 SAGAD_BENCH_GROUP=0 build/bench/bench-worker >/dev/null 2>&1 ||
        echo "bench: the warm-up run failed; measuring anyway" >&2
    spent=$(($(jit_ticks) - before))
    echo "bench: the broker's JIT compilers used $((spent / 100)).$(printf %02d $((spent % 100))) s of CPU in it" >&2
    ((spent >= 100)) || break
done
build/bench/bench-relay
build/bench/bench-worker
# The same with tracing on: every saga sampled, spans exported over OTLP/HTTP
# to the real Jaeger services.sh started (bench/results/worker-otel.json).
# (The references comparison and the group case run in the first only.)
SAGAD_BENCH_REF_ROUNDS=0 SAGAD_BENCH_GROUP=0 SAGAD_BENCH_OTEL_ENDPOINT=$SAGAD_TEST_JAEGER_OTLP build/bench/bench-worker
# And with the collector down (nothing listens on port 9): every export
# fails, spans are dropped and counted, the worker must not slow down
# (bench/results/worker-otel-down.json).
SAGAD_BENCH_REF_ROUNDS=0 SAGAD_BENCH_GROUP=0 SAGAD_BENCH_OTEL_ENDPOINT=http://127.0.0.1:9 \
    SAGAD_BENCH_RESULT=bench/results/worker-otel-down.json build/bench/bench-worker
build/bench/bench-http
build/bench/bench-dlq
build/bench/bench-ctl
build/bench/bench-flood
build/bench/bench-sign
build/bench/bench-gateway
