#!/usr/bin/env bash
# The operator console in a real browser (issue 38, docs/CONSOLE.md):
# headless Chromium (Debian's `chromium`, make deps) driven by Playwright for
# Python against a real stack: PostgreSQL, Kafka, sagad-worker, sagad-relay
# and two sagad-gateways on the same database, one of them read-only.
#
#   tests/console/run.sh [BINDIR]          (BINDIR: bin by default)
#
# The stack: a database (migrated), topics with unique names, a keyring
# whose principal `gateway` has the delegate role, a users file (shop a
# submitter, ann an approver, agent a submitter and approver, oncall an
# operator), builtin tools (payment.charge_high gated by an approval).
# Seeded: a saga of shop waiting for an approval, one of agent waiting too,
# a saga held by its dead-lettered step (it fails until replayed), and a
# dead letter of a saga naming no registered tool (produced straight to the
# commands topic as a producer that did not check would).
#
# tests/console/test_console.py then signs in as each user and walks every
# page (tests/console/test_console.py says what it checks); axe-core checks
# each page for serious or critical violations; screenshots of every page
# go to build/console-shots/.
#
# tests/run.sh runs it after the API tests, with the integration tests'
# PostgreSQL and Kafka (SAGAD_TEST_PG_URL*, SAGAD_TEST_KAFKA); without them
# it starts deploy/local's and stops them again.  Every process it starts
# is stopped by pid at exit; the database is dropped.  Python packages:
# pinned in tests/console/requirements.txt, installed into
# build/console-venv when that file changed.
set -euo pipefail
cd "$(dirname "$0")/../.."

bindir=${1:-bin}
venv=$PWD/build/console-venv
chromium=${SAGAD_TEST_CHROMIUM:-$(command -v chromium || true)}
for p in sagad-worker sagad-relay sagad-gateway sagactl; do
    [ -x "$bindir/$p" ] || { echo "console: $bindir/$p not built (make all)" >&2; exit 2; }
done
[ -n "$chromium" ] || { echo "console: chromium is not installed (make deps)" >&2; exit 2; }
command -v kcat >/dev/null || { echo "console: kcat is not installed (make deps)" >&2; exit 2; }

stack=console
# shellcheck source=tests/support/stack.sh
. tests/support/stack.sh
stack_venv "$venv" tests/console/requirements.txt "Playwright and axe-core"

stack_begin
stack_services
stack_database
topic_cmd=sgt_${unique}_cmd

common=(
    SAGAD_KAFKA_BOOTSTRAP_SERVERS="$SAGAD_TEST_KAFKA"
    SAGAD_TOPIC_COMMANDS="$topic_cmd"
    SAGAD_TOPIC_INTERNAL="sgt_${unique}_int"
    SAGAD_TOPIC_EVENTS="sgt_${unique}_ev"
    SAGAD_TOPIC_DLQ="sgt_${unique}_dlq"
    SAGAD_WORKER_REGISTRY="$work/tools.json"
    SAGAD_HTTP_PORT=0
    SAGAD_LOG_LEVEL=info
)

cat > "$work/tools.json" <<'JSON'
{"v": 1, "tools": {
  "noop": {"adapter": "builtin", "target": "noop", "side_effect": "read"},
  "echo": {"adapter": "builtin", "target": "echo", "side_effect": "idempotent",
           "description": "answers with its args"},
  "ledger": {"adapter": "builtin", "target": "ledger", "side_effect": "idempotent"},
  "ship.book": {"adapter": "builtin", "target": "fail", "side_effect": "idempotent",
    "description": "fails (poison) until the saga's first replay"},
  "payment.charge_high": {"adapter": "builtin", "target": "ledger", "side_effect": "idempotent",
    "approval": "required", "description": "a charge a person approves first"},
  "stock.check": {"adapter": "http", "target": "http://127.0.0.1:1/stock", "side_effect": "read",
    "timeout_ms": 2000, "breaker": {"failure_threshold": 2, "cooldown_ms": 1800000},
    "retry": {"max_attempts": 10, "base_ms": 10, "cap_ms": 20},
    "description": "a downstream that refuses every connection: its circuit opens"}
}}
JSON

env SAGAD_PG_DSN="$dsn" "${common[@]}" "$bindir/sagad-worker" migrate > "$work/migrate.log" 2>&1 ||
    { cat "$work/migrate.log" >&2; exit 1; }
env SAGAD_PG_DSN="$dsn" "${common[@]}" "$bindir/sagad-worker" topics --partitions 1 > "$work/topics.log" 2>&1 ||
    { cat "$work/topics.log" >&2; exit 1; }

stack_keyring "$bindir" "$py"

stack_users "$bindir" "$py" SAGAD_TEST_CONSOLE_TOKEN shop:submitter ann:approver \
    agent:submitter,approver oncall:operator

stack_start relay SAGAD_PG_DSN="$rt_dsn" SAGAD_RELAY_POLL_INTERVAL_MS=50 -- "$bindir/sagad-relay" run
# A saga whose step is dead-lettered is held (not compensated) for ten
# minutes, so the console's replay can finish it.
stack_start worker SAGAD_PG_DSN="$rt_dsn" SAGAD_WORKER_GROUP_ID="sgt_${unique}_worker" \
    SAGAD_WORKER_DEAD_LETTER_HOLD_MS=600000 \
    SAGAD_SECURITY_KEYRING="$work/keyring.json" -- "$bindir/sagad-worker" run
gw_env=(SAGAD_PG_DSN="$op_dsn" SAGAD_GATEWAY_PORT=0 SAGAD_GATEWAY_USERS="$work/users.json"
    SAGAD_GATEWAY_KEY="$work/gateway.key" SAGAD_GATEWAY_WAIT_MAX_MS=5000)
stack_start gateway "${gw_env[@]}" -- "$bindir/sagad-gateway" run
stack_start gateway-ro "${gw_env[@]}" SAGAD_CONSOLE_READ_ONLY=true -- "$bindir/sagad-gateway" run

port_of() { # NAME: the port the gateway logged
    local port='' i
    for ((i = 0; i < 300; i++)); do
        port=$(grep -o '"msg":"gateway listening".*' "$work/$1.log" 2>/dev/null |
            grep -o '"port":"[0-9]*"' | grep -o '[0-9]\+' || true)
        [ -z "$port" ] || break
        sleep 0.1
    done
    [ -n "$port" ] || { echo "console: $1 logged no port within 30 s" >&2; exit 1; }
    for ((i = 0; i < 300; i++)); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" != 200 ] || break
        sleep 0.1
    done
    echo "$port"
}
base=http://127.0.0.1:$(port_of gateway)
base_ro=http://127.0.0.1:$(port_of gateway-ro)
curl -sf -o /dev/null "$base/readyz" || { echo "console: $base/readyz is not 200" >&2; exit 1; }
curl -sf -o /dev/null "$base_ro/readyz" || { echo "console: $base_ro/readyz is not 200" >&2; exit 1; }
export SAGAD_TEST_CONSOLE_URL=$base SAGAD_TEST_CONSOLE_URL_RO=$base_ro
echo "console: sagad-gateway on $base, read-only on $base_ro (database $db)"

# The seeds: two sagas waiting for a person (shop's, agent's) and a dead
# letter.
submit() { # USER SAGA_ID
    local var=SAGAD_TEST_CONSOLE_TOKEN_${1^^}
    curl -sS -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer ${!var}" \
        -H 'Content-Type: application/json' --data "{\"v\": 1, \"type\": \"saga.start\",
          \"saga_id\": \"$2\", \"name\": \"refund-$1\", \"steps\": [
            {\"name\": \"quote\", \"tool\": \"echo\", \"args\": {\"amount_cents\": 125000, \"api_key\": \"not-shown\"}},
            {\"name\": \"charge\", \"tool\": \"payment.charge_high\", \"args\": {\"amount_cents\": 125000},
             \"approval\": {\"reason\": \"over 1,000 EUR\"}}]}" "$base/v1/sagas"
}
export SAGAD_TEST_CONSOLE_SAGA_SHOP=console-shop-$$ SAGAD_TEST_CONSOLE_SAGA_AGENT=console-agent-$$
submit shop "$SAGAD_TEST_CONSOLE_SAGA_SHOP" | grep -q 202 || { echo "console: seeding shop's saga failed" >&2; exit 1; }
submit agent "$SAGAD_TEST_CONSOLE_SAGA_AGENT" | grep -q 202 || { echo "console: seeding agent's saga failed" >&2; exit 1; }
export SAGAD_TEST_CONSOLE_SAGA_FAIL=console-ship-$$
curl -sS -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $SAGAD_TEST_CONSOLE_TOKEN_SHOP" \
    -H 'Content-Type: application/json' --data "{\"v\": 1, \"type\": \"saga.start\",
      \"saga_id\": \"$SAGAD_TEST_CONSOLE_SAGA_FAIL\", \"name\": \"ship-order\", \"steps\": [
        {\"name\": \"reserve\", \"tool\": \"ledger\", \"args\": {\"sku\": \"B7\"}},
        {\"name\": \"ship\", \"tool\": \"ship.book\", \"args\": {\"class\": \"poison\",
         \"code\": \"downstream.garbled\", \"generations\": 1}}]}" "$base/v1/sagas" | grep -q 202 ||
    { echo "console: seeding the failing saga failed" >&2; exit 1; }
# A saga whose downstream is down: two refused connections open the
# circuit of stock.check, then it waits for the cool-down (30 min, within
# its own retry budget), running.
export SAGAD_TEST_CONSOLE_SAGA_DOWN=console-stock-$$
curl -sS -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $SAGAD_TEST_CONSOLE_TOKEN_SHOP" \
    -H 'Content-Type: application/json' --data "{\"v\": 1, \"type\": \"saga.start\",
      \"saga_id\": \"$SAGAD_TEST_CONSOLE_SAGA_DOWN\", \"name\": \"stock\", \"retry_budget_ms\": 86400000,
      \"steps\": [{\"name\": \"check\", \"tool\": \"stock.check\"}]}" "$base/v1/sagas" | grep -q 202 ||
    { echo "console: seeding the saga of a downstream that is down failed" >&2; exit 1; }
printf '%s' '{"v": 1, "type": "saga.start", "saga_id": "console-poison-'$$'", "id": "p", "name": "import", "steps": [{"name": "a", "tool": "no.such.tool"}]}' |
    kcat -P -b "$SAGAD_TEST_KAFKA" -t "$topic_cmd" -k "console-poison-$$"
for s in "$SAGAD_TEST_CONSOLE_SAGA_SHOP" "$SAGAD_TEST_CONSOLE_SAGA_AGENT"; do
    for ((i = 0; i < 30; i++)); do
        if curl -sS -H "Authorization: Bearer $SAGAD_TEST_CONSOLE_TOKEN_ANN" \
            "$base/v1/sagas/$s/wait?timeout=2s" | grep -q '"status": *"awaiting_approval"'; then
            break
        fi
    done
done
for ((i = 0; i < 150; i++)); do
    n=$(psql -X -qtA "$dsn" -c "SELECT count(*) FROM dead_letters" 2>/dev/null || echo 0)
    [ "$n" -lt 2 ] || break
    sleep 0.2
done
[ "$n" = 2 ] || { echo "console: want 2 dead letters (the poison message, the held saga), got $n" >&2; exit 1; }

mkdir -p build/console-shots
echo "== console: tests/console/test_console.py (Chromium $("$chromium" --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -n 1))"
started=$(date +%s)
SAGAD_TEST_CHROMIUM=$chromium SAGAD_TEST_CONSOLE_SHOTS=$PWD/build/console-shots \
    "$py" tests/console/test_console.py
echo "console: the browser suite took $(($(date +%s) - started)) s; screenshots in build/console-shots/"
stack_stop_all
failed=0
