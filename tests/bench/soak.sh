#!/usr/bin/env bash
# make soak: sagas at a steady rate through the real worker and relay for
# SOAK_SECONDS (default 1200), with horizons of SOAK_HORIZON_S (default
# 120), printing every minute each table's rows, sizes and dead tuples, the
# worker's and the relay's RSS, throughput and p99 (tests/bench/bench_soak.c).
# Not part of make test.  Its PostgreSQL and Kafka live under .run/soak/,
# on ports SAGAD_SOAK_PG_PORT, SAGAD_SOAK_KAFKA_PORT and
# SAGAD_SOAK_KAFKA_CONTROLLER_PORT (else the SAGAD_BENCH_* ones, else
# 54359, 29292, 29293); Kafka's data is wiped first, and both are stopped
# at the end if this script started them.
set -euo pipefail
cd "$(dirname "$0")/../.."

soak_dir=$PWD/.run/soak
export SAGAD_LOCAL_PG_DIR=$soak_dir/pg
export SAGAD_LOCAL_PG_PORT=${SAGAD_SOAK_PG_PORT:-${SAGAD_BENCH_PG_PORT:-54359}}
export SAGAD_LOCAL_KAFKA_DIR=$soak_dir/kafka
export SAGAD_LOCAL_KAFKA_PORT=${SAGAD_SOAK_KAFKA_PORT:-${SAGAD_BENCH_KAFKA_PORT:-29292}}
export SAGAD_LOCAL_KAFKA_CONTROLLER_PORT=${SAGAD_SOAK_KAFKA_CONTROLLER_PORT:-${SAGAD_BENCH_KAFKA_CONTROLLER_PORT:-29293}}

timeout 60 deploy/local/kafka.sh stop >/dev/null 2>&1 || true
rm -rf "$soak_dir/kafka/data" "$soak_dir/kafka/logs"

# shellcheck source=tests/services.sh
. tests/services.sh
sagad_services_up
build/bench/bench-soak
