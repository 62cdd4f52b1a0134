#!/usr/bin/env bash
# make demo: the whole path on local defaults.
#
#   1. private PostgreSQL and Kafka up (deploy/local), migrations, topics;
#   2. the example downstream checkout-svc (examples/checkout) started in
#      the background with faults switched on: shipping answers 503 twice,
#      payment answers 429 with Retry-After: 1 once;
#   3. sagad-relay and sagad-worker started in the background with the
#      checkout tool registry (examples/checkout/tools.json: http tools);
#   4. the example sagas.  Two submitted with `sagactl submit --wait`: one
#      completes despite the faults (retried with the same Idempotency-Key,
#      exit 0) with its output (the charge and booking ids); then email is
#      made to answer 400 and the next one is compensated in reverse order
#      (exit 1), each compensation naming the id it undoes; in both the
#      booking carries the reservation id from the reserve step's result
#      (examples/sagas: {"$from": POINTER}).  A high-value one whose charge
#      waits for a person (its tool needs approval) until `sagactl approve`,
#      and the same again cancelled while it waits (`sagactl cancel`: the
#      reservation is released, the saga ends cancelled).  One that tells
#      the customer by email, SMS and webhook at once (a best_effort
#      parallel group) while SMS answers 400: it completes partial and says
#      which channel failed.  A malformed one:
#      sagactl validate refuses it, and sent anyway (kcat) the worker
#      rejects and dead-letters it with the same problems;
#   5. each saga's events printed by `sagactl watch`, the newest sagas by
#      `sagactl list`, what checkout-svc received (the ids each request
#      carried: the reservation id of the booking, the booking id of the
#      cancel, the charge id of the refund) and the completed saga's output.
#   6. the malformed saga shown by dlq-tool list and show, a partial fix
#      refused, the fix made with dlq-tool edit --set, replayed, completing;
#   7. an agent without an LLM through the gateway's MCP server
#      (examples/agent, on the official MCP SDK for Python, installed into
#      build/mcp-venv from PyPI on first use): it corrects its plan from a
#      refusal, follows a saga to its end and asks its user at an approval.
#
# checkout-svc, the relay and the worker keep running afterwards; `make
# demo-stop` (or `examples/demo.sh stop`) stops them, `make down` stops
# everything.  DEMO_CHECKOUT_PORT (default 8088) moves checkout-svc
# to another port, beside SAGAD_PG_DSN, SAGAD_TOPIC_* and
# SAGAD_WORKER_GROUP_ID (two demos side by side on one machine).
set -euo pipefail
cd "$(dirname "$0")/.."

run=.run/demo
mkdir -p "$run"

stop_bg() {
    local f pid
    for f in "$run"/gateway.pid "$run"/worker.pid "$run"/relay.pid "$run"/checkout.pid; do
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
checkout_port=${DEMO_CHECKOUT_PORT:-8088}
checkout=http://127.0.0.1:$checkout_port
# The registry names 127.0.0.1:8088; another port gets a rewritten copy.
if [ "$checkout_port" = 8088 ]; then
    export SAGAD_WORKER_REGISTRY=examples/checkout/tools.json
else
    sed "s|http://127.0.0.1:8088/|$checkout/|" examples/checkout/tools.json >"$run/tools.json"
    export SAGAD_WORKER_REGISTRY=$run/tools.json
fi

echo
echo "== migrations and topics"
bin/sagad-worker migrate
bin/sagad-worker topics --partitions 3
bin/sagad-worker check-registry >/dev/null

# Who may do what (docs/ARCHITECTURE.md, "Trust boundary"): two
# principals, each with its own Ed25519 key, made once by `sagactl keys
# new`: shop submits sagas (sagactl signs with it by default, ctl.key)
# and may approve, but never what it submitted itself (four eyes);
# finance:demo approves and cancels.  The worker reads the keyring.
echo
echo "== keys and keyring ($run/keys, $run/keyring.json)"
mkdir -p "$run/keys"
chmod 700 "$run/keys"
[ -f "$run/keys/shop.key" ] || bin/sagactl keys new --principal shop --out "$run/keys/shop.key" >/dev/null 2>&1
[ -f "$run/keys/approver.key" ] ||
    bin/sagactl keys new --principal finance:demo --out "$run/keys/approver.key" >/dev/null 2>&1
[ -f "$run/keys/gateway.key" ] ||
    bin/sagactl keys new --principal gateway --out "$run/keys/gateway.key" >/dev/null 2>&1
python3 - "$run" <<'PY'
import json, subprocess, sys
run = sys.argv[1]
def pub(name):
    out = subprocess.run(["bin/sagactl", "keys", "show", "--json", f"{run}/keys/{name}.key"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)
shop, appr, gw = pub("shop"), pub("approver"), pub("gateway")
ring = {"v": 1, "principals": {
    shop["principal"]: {"keys": {shop["key_id"]: shop["public_key"]},
                        "roles": ["submit", "approve"]},
    appr["principal"]: {"keys": {appr["key_id"]: appr["public_key"]},
                        "roles": ["approve", "cancel"]},
    gw["principal"]: {"keys": {gw["key_id"]: gw["public_key"]},
                      "roles": ["submit", "approve", "cancel", "delegate"]}}}
json.dump(ring, open(f"{run}/keyring.json", "w"), indent=2)
print("  shop (submit, approve), finance:demo (approve, cancel),")
print("  gateway (submit, approve, cancel, delegate: it signs for the users it authenticates)")
# The gateway's users: a token each (only its hash in the users file).
users, tokens = {"v": 1, "users": {}}, {}
for name, roles in (("shop", ["submitter", "approver"]), ("ann", ["approver"]),
                    ("oncall", ["operator"])):
    t = json.loads(subprocess.run(["bin/sagad-gateway", "token", "new", "--user", name, "--json"],
                                  check=True, capture_output=True, text=True).stdout)
    users["users"][name] = {"roles": roles, "tokens": [t["hash"]]}
    tokens[name] = t["token"]
json.dump(users, open(f"{run}/gateway-users.json", "w"), indent=2)
for name, token in tokens.items():
    with open(f"{run}/keys/{name}.token", "w") as f:
        f.write(token)
print("  gateway users (%s/gateway-users.json): shop (submitter, approver), ann (approver),"
      " oncall (operator)" % run)
PY
export SAGAD_SECURITY_KEYRING=$run/keyring.json SAGAD_CTL_KEY=$run/keys/shop.key

echo
echo "== checkout-svc on $checkout (log: $run/checkout.log): shipping 503 twice, payment 429 once"
stop_bg
bin/checkout-svc --listen "127.0.0.1:$checkout_port" --fault /shipping/book=503x2 \
    --fault /payment/charge=429x1,retry_after=1 >"$run/checkout.out" 2>>"$run/checkout.log" &
echo $! >"$run/checkout.pid"
for _ in $(seq 1 100); do grep -q listening "$run/checkout.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$run/checkout.out" || { echo "demo: checkout-svc did not start; see $run/checkout.log" >&2; exit 1; }

echo
echo "== relay and worker in the background (logs: $run/relay.log, $run/worker.log)"
# Each serves /metrics, /healthz, /readyz on a free port (two demos, or a
# worker beside a relay, would collide on 9400): see the logs' "http
# endpoint listening" lines.
SAGAD_HTTP_PORT=${SAGAD_HTTP_PORT:-0} bin/sagad-relay run >>"$run/relay.log" 2>&1 &
echo $! >"$run/relay.pid"
SAGAD_HTTP_PORT=${SAGAD_HTTP_PORT:-0} bin/sagad-worker run >>"$run/worker.log" 2>&1 &
echo $! >"$run/worker.pid"
gateway_port=${DEMO_GATEWAY_PORT:-8480}
gateway=http://127.0.0.1:$gateway_port
SAGAD_GATEWAY_PORT=$gateway_port SAGAD_GATEWAY_USERS=$run/gateway-users.json \
    SAGAD_GATEWAY_KEY=$run/keys/gateway.key bin/sagad-gateway run >>"$run/gateway.log" 2>&1 &
echo $! >"$run/gateway.pid"
echo "relay pid $(cat "$run/relay.pid"), worker pid $(cat "$run/worker.pid"), gateway pid $(cat "$run/gateway.pid") on $gateway"
for _ in $(seq 1 100); do curl -fsS "$gateway/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "$gateway/readyz" >/dev/null || { echo "demo: sagad-gateway is not ready; see $run/gateway.log" >&2; exit 1; }

# Unique saga ids per run, so the demo can be run again and again.
suffix=$(date +%s)
ids=()

with_id() { # FILE ID: the saga.start of FILE under saga id ID, one line
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1])); d["saga_id"] = sys.argv[2]; d["id"] = "sub-" + sys.argv[2]
print(json.dumps(d, separators=(",", ":")))' "$1" "$2"
}

submit_wait() { # FILE WANT_EXIT: sagactl submit --wait under a fresh saga id
    local f=$1 want=$2 id rc=0
    id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["saga_id"])' "$f")-$suffix
    ids+=("$id")
    echo "\$ sagactl submit --wait --timeout 60s $f   (as saga $id)"
    with_id "$f" "$id" | bin/sagactl submit --wait --timeout 60s - || rc=$?
    if [ "$rc" != "$want" ]; then
        echo "demo: sagactl submit exited $rc, not $want; see $run/worker.log" >&2
        exit 1
    fi
    echo "  (exit $rc)"
}

echo
echo "== submitting the example sagas with sagactl"
submit_wait examples/sagas/checkout-ok.json 0
echo "  (email now answers 400)"
curl -fsS -X POST "$checkout/_admin/faults" \
    -d '{"path": "/email/send", "status": 400}' >/dev/null
submit_wait examples/sagas/checkout-fails.json 1

# A charge above the limit: the registry says payment.charge_high needs a
# person's approval, so the saga waits (step.approval_requested) until the
# demo approves it; the same saga submitted again is cancelled while it
# waits, and its reservation is released.
wait_step() { # SAGA STEP STATUS: polls the step's status (60 s at most)
    local deadline=$((SECONDS + 60))
    until [ "$(psql "$SAGAD_PG_DSN" -Atc "SELECT status FROM steps WHERE saga_id = '$1' AND name = '$2'")" = "$3" ]; do
        if [ $SECONDS -ge $deadline ]; then
            echo "demo: step $2 of saga $1 is not $3 after 60 s; see $run/worker.log" >&2
            exit 1
        fi
        sleep 0.2
    done
}
high=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["saga_id"])' \
    examples/sagas/checkout-approval.json)-$suffix
ids+=("$high" "$high-withdrawn")
echo
echo "\$ sagactl submit examples/sagas/checkout-approval.json   (as saga $high; no --wait)"
with_id examples/sagas/checkout-approval.json "$high" | bin/sagactl submit -
wait_step "$high" charge awaiting_approval
echo "  step charge is awaiting_approval (step.approval_requested carries the packet)"
# Four eyes: shop submitted it, so shop's approval is refused.
echo "\$ sagactl approve $high charge --by shop --reason \"my own order\" --wait   (signed by shop)"
rc=0
bin/sagactl approve "$high" charge --by shop --reason "my own order" --wait || rc=$?
if [ "$rc" != 1 ]; then
    echo "demo: approving with the submitter's key exited $rc, not 1 (refused); see $run/worker.log" >&2
    exit 1
fi
echo "  (exit 1: refused, input.auth.self_approval; the charge still waits)"
echo "\$ sagactl approve $high charge --key $run/keys/approver.key --by demo --reason \"known customer\" --wait"
bin/sagactl approve "$high" charge --key "$run/keys/approver.key" --by demo --reason "known customer" --wait
wait_step "$high" ship succeeded
echo "  (the charge ran, then the shipment: saga $(bin/sagactl status "$high" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])'))"
echo "\$ sagactl show $high | grep verified   (who submitted, who decided)"
bin/sagactl show "$high" | grep verified
echo
echo "\$ sagactl submit examples/sagas/checkout-approval.json   (as saga $high-withdrawn)"
with_id examples/sagas/checkout-approval.json "$high-withdrawn" | bin/sagactl submit -
wait_step "$high-withdrawn" charge awaiting_approval
echo "\$ sagactl cancel $high-withdrawn --key $run/keys/approver.key --by demo --reason \"customer withdrew the order\" --wait"
rc=0
bin/sagactl cancel "$high-withdrawn" --key "$run/keys/approver.key" --by demo \
    --reason "customer withdrew the order" --wait || rc=$?
if [ "$rc" != 0 ]; then
    echo "demo: sagactl cancel exited $rc, not 0; see $run/worker.log" >&2
    exit 1
fi

# The same approval over HTTP (issue 37): the shop's token submits through
# sagad-gateway, which signs for it; the shop cannot approve its own order
# (403), ann's token can; the long poll answers when the saga ends.
echo
echo "== the same through sagad-gateway ($gateway), with two tokens"
shop_token=$(cat "$run/keys/shop.token")
ann_token=$(cat "$run/keys/ann.token")
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("saga_id"); d.pop("id")
print(json.dumps(d))' examples/sagas/checkout-approval.json >"$run/http-order.json"
echo "\$ curl -X POST $gateway/v1/sagas -H 'Authorization: Bearer \$SHOP' -H 'Idempotency-Key: order-$suffix' -d @order.json"
answer=$(curl -sS -X POST "$gateway/v1/sagas" -H "Authorization: Bearer $shop_token" \
    -H "Content-Type: application/json" -H "Idempotency-Key: order-$suffix" --data @"$run/http-order.json")
echo "  $answer"
http_id=$(echo "$answer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["saga_id"])')
ids+=("$http_id")
echo "\$ curl '$gateway/v1/sagas/$http_id/wait?timeout=30s' -H 'Authorization: Bearer \$SHOP'"
curl -sS "$gateway/v1/sagas/$http_id/wait?timeout=30s" -H "Authorization: Bearer $shop_token" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("  status %s: %s" % (d["status"], d["agent_action"]))'
echo "\$ curl -X POST $gateway/v1/sagas/$http_id/steps/charge/approve -H 'Authorization: Bearer \$SHOP' -d '{\"reason\": \"my own order\"}'"
code=$(curl -sS -o "$run/http-answer.json" -w '%{http_code}' -X POST \
    "$gateway/v1/sagas/$http_id/steps/charge/approve" -H "Authorization: Bearer $shop_token" \
    -d '{"reason": "my own order"}')
echo "  $code: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["detail"])' "$run/http-answer.json")"
[ "$code" = 403 ] || { echo "demo: the shop approved its own order over HTTP ($code)" >&2; exit 1; }
echo "\$ curl -X POST $gateway/v1/sagas/$http_id/steps/charge/approve -H 'Authorization: Bearer \$ANN' -d '{\"reason\": \"known customer\"}'"
echo "  $(curl -fsS -X POST "$gateway/v1/sagas/$http_id/steps/charge/approve" \
    -H "Authorization: Bearer $ann_token" -d '{"reason": "known customer"}')"
outcome=$(curl -sS "$gateway/v1/sagas/$http_id/wait?timeout=60s" -H "Authorization: Bearer $shop_token" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["status"], d["submitted_by"])')
echo "  the long poll answers: status ${outcome% *}, submitted by ${outcome#* } (signed for it by the gateway)"
[ "${outcome% *}" = ok ] || { echo "demo: the HTTP saga ended ${outcome% *}; see $run/worker.log" >&2; exit 1; }
psql "$SAGAD_PG_DSN" -Atc "SELECT '  approved by ' || principal || ' (' || outcome || ')' FROM saga_controls
    WHERE saga_id = '$http_id' AND command = 'saga.approve' AND outcome = 'accepted'"

# A parallel group: the order shipped, the customer is told by email, SMS
# and webhook at once (best_effort).  SMS answers 400: the saga still
# completes, partial, and says which channel failed.
echo
echo "  (email answers again; SMS now answers 400)"
curl -fsS -X DELETE "$checkout/_admin/faults" >/dev/null
curl -fsS -X POST "$checkout/_admin/faults" -d '{"path": "/sms/send", "status": 400}' >/dev/null
submit_wait examples/sagas/checkout-notify.json 0
notified=${ids[${#ids[@]} - 1]}
echo "  the notify group, member by member (steps.grp = 'notify'):"
psql "$SAGAD_PG_DSN" -Atc "SELECT '    ' || name || ': ' || status || coalesce(' ' || error_code, '')
    FROM steps WHERE saga_id = '$notified' AND grp = 'notify' ORDER BY idx"
bin/sagactl watch "$notified" --from-beginning --json | python3 -c '
import json, sys
for line in sys.stdin:
    ev = json.loads(line)
    if ev.get("type") == "group.finished":
        print("  group.finished: %s, %s" % (ev["group"], ev["status"]))
    if ev.get("type") == "saga.completed":
        print("  saga.completed, partial: %s; output %s" % (
            ", ".join(p["step_name"] + " " + p.get("error_code", "") for p in ev.get("partial", [])),
            json.dumps(ev.get("output"))))
'

# The malformed submission: sagactl checks it with the worker's own rules
# and sends nothing.  A producer that does not check (kcat here) gets the
# same problems back from the worker as saga.rejected, and a dead letter
# that dlq-tool fixes below.
bad=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["saga_id"])' \
    examples/sagas/malformed.json)-$suffix
ids+=("$bad")
echo
echo "\$ sagactl validate examples/sagas/malformed.json"
bin/sagactl validate examples/sagas/malformed.json || echo "  (exit $?: refused; sagactl submit sends nothing)"
echo "  sent anyway with kcat, as saga $bad"
with_id examples/sagas/malformed.json "$bad" | kcat -b "$bootstrap" -P -t "$topic_commands" -k "$bad"
deadline=$((SECONDS + 60))
until [ -n "$(psql "$SAGAD_PG_DSN" -Atc "SELECT 1 FROM dead_letters WHERE saga_id = '$bad' LIMIT 1")" ]; do
    if [ $SECONDS -ge $deadline ]; then
        echo "demo: saga $bad not rejected in 60 s; see $run/worker.log" >&2
        exit 1
    fi
    sleep 0.5
done
sleep 1 # the relay publishes the last events

echo
echo "== timelines, from the $topic_events topic: sagactl watch ID --from-beginning"
for id in "${ids[@]}"; do
    bin/sagactl watch "$id" --from-beginning
    echo
done

echo "== sagactl list --since 10m"
bin/sagactl list --since 10m --limit 5 || true
echo

echo "== what checkout-svc received, from $checkout/_admin/requests"
echo "   (seq, path, status, the id its answer issued, Idempotency-Key, the id it carried and where from)"
curl -fsS "$checkout/_admin/requests" | python3 -c '
import json, sys
ids = sys.argv[1:]
names = {"/shipping/book": "reservation_id", "/payment/refund": "charge_id",
         "/shipping/cancel": "booking_id", "/inventory/release": "reservation_id"}
issued_at = {}
for r in json.load(sys.stdin)["requests"]:
    key = r.get("idempotency_key") or ""
    if not any(key.startswith(i + ":") for i in ids):
        continue
    carried = ""
    if r.get("ref_id"):
        origin = issued_at.get(r["ref_id"])
        carried = "%s %s (%s)%s" % (names.get(r["path"], "id"), r["ref_id"], r["ref_from"],
                                    ", issued at #%d" % origin if origin else ", never issued")
    if r.get("issued_id") and not r.get("replayed"):
        issued_at[r["issued_id"]] = r["seq"]
    print("  #%-3d %-19s %s  %-10s  %-33s %s" % (r["seq"], r["path"], r["status"],
          r.get("issued_id") or "-", key, carried))
' "${ids[@]}"
echo

echo "== the output of the completed saga ${ids[0]}, from its saga.completed event"
bin/sagactl watch "${ids[0]}" --from-beginning --json | python3 -c '
import json, sys
for line in sys.stdin:
    ev = json.loads(line)
    if ev.get("type") == "saga.completed":
        print("  " + json.dumps(ev.get("output")))
'
echo

echo "== dead letters of this run"
psql "$SAGAD_PG_DSN" -c "SELECT id, error_code, saga_id, left(message, 70) AS message
    FROM dead_letters WHERE saga_id LIKE '%-$suffix' ORDER BY id"

# ---- dlq-tool: the malformed saga found, fixed and replayed (issue 6) ----
# Self-contained: needs only $bad (the malformed saga), SAGAD_PG_DSN,
# SAGAD_WORKER_REGISTRY and the SAGAD_TOPIC_* variables exported above.
# The fix uses no email step: email.send answers 400 by now.
echo "== dlq-tool list --saga $bad"
bin/dlq-tool list --saga "$bad"
dl=$(bin/dlq-tool list --saga "$bad" --json --limit 1 |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["id"])')
echo
echo "== dlq-tool show $dl"
bin/dlq-tool show "$dl"
echo
echo "== dlq-tool edit $dl: a partial fix is refused with the path and rule of each problem"
bin/dlq-tool edit "$dl" --set 'steps[1].args.sku=B7' --by demo || echo "(exit $?: refused, nothing saved)"
echo
echo "== dlq-tool edit $dl --set ...: the whole fix"
bin/dlq-tool edit "$dl" --by demo --reason "demo: fix the submission" \
    --set 'steps[0].name=reserve' --set 'steps[0].tool=inventory.reserve' \
    --set 'steps[0].args={"sku": "B7", "qty": 1}' \
    --set 'steps[1].name=charge' --set 'steps[1].tool=payment.charge' \
    --set 'steps[1].args={"amount_cents": 1999}' \
    --set 'steps[2].name=ship' --set 'steps[2].tool=shipping.book' \
    --set 'steps[2].args={"reservation_id": {"$from": "/steps/reserve/result/reservation_id"}}'
echo
echo "== dlq-tool replay $dl"
bin/dlq-tool replay "$dl" --reason "demo: fixed submission" --by demo
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
echo "== sagactl show $bad   (also: dlq-tool saga $bad)"
bin/sagactl show "$bad"

# An agent without an LLM, through the MCP server on the gateway: it
# corrects its plan from a refusal's errors and agent_action, follows a
# saga to its end, and asks its user (ann approves) at an approval.
echo
echo "== an agent through MCP: examples/agent/run.sh $gateway .run/demo/keys/shop.token .run/demo/keys/ann.token"
echo "   (the official MCP SDK for Python, installed from PyPI into build/mcp-venv/sdk2 on first use)"
curl -fsS -X DELETE "$checkout/_admin/faults" >/dev/null
examples/agent/run.sh "$gateway" "$run/keys/shop.token" "$run/keys/ann.token" ||
    { echo "demo: the example agent failed (above); see $run/gateway.log" >&2; exit 1; }

echo
echo "== the operator console (docs/CONSOLE.md): open $gateway/ in a browser"
echo "  sign in with a token of .run/demo/keys/: oncall (operator) $(cat "$run/keys/oncall.token")"
echo "  or ann (approver) $(cat "$run/keys/ann.token")"
echo
echo "checkout-svc, the relay, the worker and sagad-gateway are still running."
echo "Stop them with: make demo-stop    (and PostgreSQL + Kafka with: make down)"
