#!/usr/bin/env bash
# make demo: brings up the private PostgreSQL and Kafka, applies the
# migrations with the real binary, runs sagad-relay on a few outbox rows and
# a timer, and shows what is running.  The worker and relay join this demo as they are built.
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
echo "== relay: outbox rows and a timer reach Kafka in commit order"
topic=sagad.demo.$(date +%s)
bin/sagad-relay run 2>.run/demo-relay.log &
relay=$!
trap 'kill $relay 2>/dev/null || true' EXIT
psql -q "$SAGAD_PG_DSN" <<SQL
INSERT INTO timers (due_at, topic, key, payload)
    VALUES (now() + interval '2 seconds', '$topic', 'saga-1', convert_to('{"demo":"timer, due 2 s later"}', 'UTF8'));
BEGIN;
INSERT INTO outbox (topic, key, payload) VALUES ('$topic', 'saga-1', convert_to('{"demo":"first commit"}', 'UTF8'));
COMMIT;
INSERT INTO outbox (topic, key, payload) VALUES ('$topic', 'saga-2', convert_to('{"demo":"second commit"}', 'UTF8'));
SQL
sleep 3
kcat -b "$bootstrap" -C -t "$topic" -e -q -f '  offset %o key %k: %s\n'
echo
bin/sagad-relay status
kill -TERM $relay
wait $relay || true
trap - EXIT

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
