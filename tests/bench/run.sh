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
# a few minutes, 78-165 ms. One short worker bench run (1,000 sagas and
# its 10 s latency phase) is spent on it; its figures are discarded.
echo "bench: warm-up run of bench-worker (not measured)..." >&2
SAGAD_BENCH_SAGAS=1000 build/bench/bench-worker >/dev/null 2>&1 ||
    echo "bench: the warm-up run failed; measuring anyway" >&2
build/bench/bench-relay
build/bench/bench-worker
build/bench/bench-http
build/bench/bench-dlq
