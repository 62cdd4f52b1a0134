#!/usr/bin/env bash
# make demo: the whole path on local defaults.
#
#   1. private PostgreSQL and Kafka up (deploy/local), migrations, topics;
#   2. sagad-relay and sagad-worker started in the background with the
#      example tool registry (examples/tools.json);
#   3. three example sagas submitted to Kafka: one completes, one fails at
#      its third step and is compensated in reverse order, one is malformed
#      and is rejected and dead-lettered;
#   4. each saga's timeline printed from the events topic;
#   5. the malformed saga shown by dlq-tool list and show, fixed with
#      dlq-tool edit --set, replayed, and completing.
#
# The relay and worker keep running afterwards; `make demo-stop` (or
# `examples/demo.sh stop`) stops them, `make down` stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

run=.run/demo
mkdir -p "$run"

stop_bg() {
    local f pid
    for f in "$run"/worker.pid "$run"/relay.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            echo "stopped $(basename "$f" .pid) (pid $pid)"
        fi
        rm -f "$f"
    done
}

if [ "${1:-}" = stop ]; then
    stop_bg
    exit 0
fi

deploy/local/pg.sh start
deploy/local/kafka.sh start

# Local defaults; a pre-set SAGAD_PG_DSN, SAGAD_TOPIC_* or
# SAGAD_WORKER_GROUP_ID runs the demo against another database, topics and
# group (for running two demos side by side on one machine).
SAGAD_PG_DSN=${SAGAD_PG_DSN:-$(deploy/local/pg.sh url)}
bootstrap=$(deploy/local/kafka.sh bootstrap)
export SAGAD_PG_DSN SAGAD_KAFKA_BOOTSTRAP_SERVERS=$bootstrap
topic_commands=${SAGAD_TOPIC_COMMANDS:-sagad.commands}
topic_events=${SAGAD_TOPIC_EVENTS:-sagad.events}
export SAGAD_WORKER_REGISTRY=examples/tools.json

echo
echo "== migrations and topics"
bin/sagad-worker migrate
bin/sagad-worker topics --partitions 3
bin/sagad-worker check-registry >/dev/null

echo
echo "== relay and worker in the background (logs: $run/relay.log, $run/worker.log)"
stop_bg
bin/sagad-relay run >>"$run/relay.log" 2>&1 &
echo $! >"$run/relay.pid"
bin/sagad-worker run >>"$run/worker.log" 2>&1 &
echo $! >"$run/worker.pid"
echo "relay pid $(cat "$run/relay.pid"), worker pid $(cat "$run/worker.pid")"

# Unique saga ids per run, so the demo can be run again and again.
suffix=$(date +%s)
ids=()
echo
echo "== submitting the example sagas"
for f in examples/sagas/checkout-ok.json examples/sagas/checkout-fails.json \
    examples/sagas/malformed.json; do
    id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["saga_id"])' "$f")-$suffix
    ids+=("$id")
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1])); d["saga_id"] = sys.argv[2]; d["id"] = "sub-" + sys.argv[2]
print(json.dumps(d, separators=(",", ":")))' "$f" "$id" |
        kcat -b "$bootstrap" -P -t "$topic_commands" -k "$id"
    echo "  $f -> saga $id"
done

echo
echo "== waiting for the outcomes"
deadline=$((SECONDS + 60))
for id in "${ids[@]}"; do
    while :; do
        state=$(psql "$SAGAD_PG_DSN" -Atc "SELECT coalesce((SELECT status FROM sagas WHERE saga_id = '$id'),
                  (SELECT 'rejected' FROM dead_letters WHERE saga_id = '$id' LIMIT 1), 'pending')")
        case $state in completed | compensated | failed | rejected) break ;; esac
        if [ $SECONDS -ge $deadline ]; then
            echo "demo: saga $id still $state after 60 s; see $run/worker.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "  $id: $state"
done
sleep 1 # the relay publishes the last events

echo
echo "== timelines, from the $topic_events topic"
kcat -b "$bootstrap" -C -t "$topic_events" -e -q -f '%k\t%s\n' |
    python3 -c '
import json, sys
ids = sys.argv[1:]
events = {i: [] for i in ids}
for line in sys.stdin:
    key, _, body = line.rstrip("\n").partition("\t")
    if key in events:
        events[key].append(json.loads(body))
for i in ids:
    print("saga", i)
    for e in sorted(events[i], key=lambda e: e["seq"]):
        what = e.get("step_name", "")
        extra = e.get("error_code", "")
        if e["type"] == "saga.rejected":
            extra = "; ".join(p["path"] + ": " + p["rule"] for p in e["problems"])
        if "run_health" in e:
            h = e["run_health"]
            extra = "ok=%d failed=%d compensated=%d skipped=%d" % (
                h["ok"], h["failed"], h["compensated"], h["skipped"])
        print("  %3d  %-24s %-8s %s" % (e["seq"], e["type"], what, extra))
    print()
' "${ids[@]}"

echo "== dead letters of this run"
psql "$SAGAD_PG_DSN" -c "SELECT id, error_code, saga_id, left(message, 70) AS message
    FROM dead_letters WHERE saga_id LIKE '%-$suffix' ORDER BY id"

# ---- dlq-tool: the malformed saga found, fixed and replayed (issue 6) ----
# Self-contained: needs only ${ids[2]} (the malformed saga), SAGAD_PG_DSN,
# SAGAD_WORKER_REGISTRY and the SAGAD_TOPIC_* variables exported above.
bad=${ids[2]}
echo "== dlq-tool list --saga $bad"
bin/dlq-tool list --saga "$bad"
dl=$(bin/dlq-tool list --saga "$bad" --json --limit 1 |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["id"])')
echo
echo "== dlq-tool show $dl"
bin/dlq-tool show "$dl"
echo
echo "== dlq-tool edit $dl: a partial fix is refused with the path and rule of each problem"
bin/dlq-tool edit "$dl" --set 'steps[1].args.sku=B7' --operator demo || echo "(exit $?: refused, nothing saved)"
echo
echo "== dlq-tool edit $dl --set ...: the whole fix"
bin/dlq-tool edit "$dl" --operator demo --reason "demo: fix the submission" \
    --set 'steps[0].name=reserve' --set 'steps[0].tool=inventory.reserve' \
    --set 'steps[0].args={"sku": "B7", "qty": 1}' \
    --set 'steps[1].name=pack' --set 'steps[1].tool=noop' --set 'steps[1].args={}' \
    --set 'steps[2].name=notify' --set 'steps[2].tool=email.send'
echo
echo "== dlq-tool replay $dl"
bin/dlq-tool replay "$dl" --reason "demo: fixed submission" --operator demo
deadline=$((SECONDS + 60))
until [ "$(psql "$SAGAD_PG_DSN" -Atc "SELECT status FROM sagas WHERE saga_id = '$bad'")" = completed ]; do
    if [ $SECONDS -ge $deadline ]; then
        echo "demo: replayed saga $bad did not complete in 60 s; see $run/worker.log" >&2
        exit 1
    fi
    sleep 0.5
done
echo "  $bad: completed"
echo
echo "== dlq-tool saga $bad"
bin/dlq-tool saga "$bad"
echo
echo "The relay and the worker are still running."
echo "Stop them with: make demo-stop    (and PostgreSQL + Kafka with: make down)"
