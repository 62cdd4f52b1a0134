#!/usr/bin/env bash
# make bench: runs the benchmarks against the private PostgreSQL and Kafka
# (started if needed, stopped again if started here).  Figures are printed
# and written under bench/results/; nothing here passes or fails on speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/services.sh
. tests/services.sh
sagad_services_up
build/bench/bench-relay
build/bench/bench-worker
build/bench/bench-http
build/bench/bench-dlq
