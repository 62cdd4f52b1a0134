#!/usr/bin/env bash
# make demo: brings up the private PostgreSQL and Kafka, applies the
# migrations with the real binary and shows what is running.  The worker and relay join this demo as they are built.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/local/pg.sh start
deploy/local/kafka.sh start

SAGAD_PG_DSN=$(deploy/local/pg.sh url)
bootstrap=$(deploy/local/kafka.sh bootstrap)
export SAGAD_PG_DSN SAGAD_KAFKA_BOOTSTRAP_SERVERS=$bootstrap

echo
echo "== migrations"
bin/sagad-worker migrate

echo
echo "== effective worker config (secrets masked)"
bin/sagad-worker --print-config

echo
echo "== what is running"
deploy/local/pg.sh status
deploy/local/kafka.sh status
echo "tables:"
psql "$SAGAD_PG_DSN" -Atc "SELECT '  ' || tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
echo
echo "Stop everything with: make down"
