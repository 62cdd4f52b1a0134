#!/usr/bin/env bash
# Relay fault suite: a broker restart and a PostgreSQL restart while
# sagad-relay publishes and a writer keeps inserting; checks that nothing is
# lost, that every key keeps its order, and that the relay rides it out.
#
#   tests/faults/run.sh [SCENARIO...]   (default: all, in this order:
#                                        broker_restart pg_restart)
#
# It builds nothing: run `make all` first, or use `make test-faults`.
#
# The scenarios stop their services, so they cannot share the ones the
# parallel Criterion tests use. They run one after the other on a PRIVATE
# Kafka (127.0.0.1:29092, controller 29093) and PostgreSQL (127.0.0.1:54339)
# created fresh under .run/faults/ (the Kafka jars are kept between runs) and
# always stopped on exit, failure included. Other ports:
# SAGAD_FAULTS_KAFKA_PORT, SAGAD_FAULTS_KAFKA_CONTROLLER_PORT,
# SAGAD_FAULTS_PG_PORT. Each scenario's relay log, writer log and consumed
# topic stay in .run/faults/logs/<scenario>/.
#
# During pg_restart an idle worker runs beside the relay: both /readyz must
# answer 503 naming PostgreSQL while it is down, and 200 after.
#
# Every step has its own time limit; the suite takes about 1.5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

faults_dir=$repo/.run/faults
logs_dir=$faults_dir/logs
kafka_port=${SAGAD_FAULTS_KAFKA_PORT:-29092}
export SAGAD_LOCAL_KAFKA_DIR=$faults_dir/kafka
export SAGAD_LOCAL_KAFKA_PORT=$kafka_port
export SAGAD_LOCAL_KAFKA_CONTROLLER_PORT=${SAGAD_FAULTS_KAFKA_CONTROLLER_PORT:-29093}
export SAGAD_LOCAL_PG_DIR=$faults_dir/pg
export SAGAD_LOCAL_PG_PORT=${SAGAD_FAULTS_PG_PORT:-54339}
# Read: the relay and the worker refuse SAGAD_ variables they do not know.
unset SAGAD_FAULTS_KAFKA_PORT SAGAD_FAULTS_KAFKA_CONTROLLER_PORT SAGAD_FAULTS_PG_PORT
export PGCONNECT_TIMEOUT=5
# The binaries refuse SAGAD_ variables that name no config key (only
# SAGAD_LOCAL_* and SAGAD_TEST_* are let through): the harnesses' own port
# variables, read above, must not reach them.
for v in $(compgen -v SAGAD_FAULTS_) $(compgen -v SAGAD_BENCH_) $(compgen -v SAGAD_SOAK_); do
    unset "$v"
done

kafka=127.0.0.1:$kafka_port
pg_base=postgresql://sagad:sagad-local-pw@127.0.0.1:$SAGAD_LOCAL_PG_PORT

# Workload of each scenario: ROUNDS x KEYS rows, payload "k<key>:<round>",
# written as ROUNDS x PARTS small transactions of KEYS/PARTS rows.
KEYS=200
ROUNDS=100
PARTS=4
ROWS=$((KEYS * ROUNDS))

relay_pid=
writer_pid=
worker_pid=
scenario=
db=

log() {
    printf '%s faults: %s%s\n' "$(date +%T)" "${scenario:+$scenario: }" "$*"
}

fail() {
    echo "faults: FAIL${scenario:+ ($scenario)}: $*" >&2
    if [[ -n $scenario && -s $logs_dir/$scenario/relay.log ]]; then
        echo "--- last lines of $logs_dir/$scenario/relay.log ---" >&2
        tail -n 25 "$logs_dir/$scenario/relay.log" | cut -c1-400 >&2
    fi
    exit 1
}

# Alive and not a zombie (an exited child stays a zombie until reaped).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# Polls "$@" every 0.2 s until it succeeds; fails after $2 seconds.
wait_until() {
    local what=$1 deadline=$((SECONDS + $2))
    shift 2
    until "$@"; do
        ((SECONDS < deadline)) || fail "timed out waiting for: $what"
        sleep 0.2
    done
}

psql_db() {
    local db=$1
    shift
    timeout 20 psql -X -q -At -v ON_ERROR_STOP=1 "$pg_base/$db" "$@"
}

sql() {
    psql_db "$1" -c "$2"
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $writer_pid ]] && alive "$writer_pid"; then kill -TERM "$writer_pid" || true; fi
    if [[ -n $relay_pid ]] && alive "$relay_pid"; then kill -KILL "$relay_pid" || true; fi
    if [[ -n $worker_pid ]] && alive "$worker_pid"; then kill -KILL "$worker_pid" || true; fi
    timeout 60 deploy/local/kafka.sh stop || rc=1
    timeout 90 deploy/local/pg.sh stop || rc=1
    if ((rc == 0)); then
        log "all scenarios passed in ${SECONDS}s"
    else
        echo "faults: FAILED after ${SECONDS}s (logs: $logs_dir)" >&2
    fi
    exit $rc
}

# A fresh private Kafka and PostgreSQL; a previous run's leftovers (one
# killed before its cleanup) are stopped and wiped first.
services_up() {
    local pg_dir
    timeout 60 deploy/local/kafka.sh stop >/dev/null
    timeout 90 deploy/local/pg.sh stop >/dev/null
    rm -rf "$faults_dir/kafka/data" "$faults_dir/kafka/logs" "$logs_dir"
    # pg.sh may have made .run/faults/pg a symlink into /var/tmp.
    if [[ -L $faults_dir/pg ]]; then
        pg_dir=$(realpath -m "$faults_dir/pg")
        [[ $pg_dir == /var/tmp/sagad-pg-* ]] && rm -rf "$pg_dir"
    fi
    rm -rf "$faults_dir/pg"
    mkdir -p "$logs_dir"
    timeout 150 deploy/local/kafka.sh start
    timeout 90 deploy/local/pg.sh start
}

# Writes the workload into $db: round r inserts "k<key>:<r>" for every key,
# as PARTS transactions.  A transaction that fails (the database is down) is
# retried; it is idempotent (fault_writes records it in the same statement),
# so a COMMIT whose outcome was lost cannot insert its rows twice.
writer() {
    local db=$1 topic=$2 per=$((KEYS / PARTS)) failed=0
    local deadline=$((SECONDS + 150)) r p stmt
    for ((r = 0; r < ROUNDS; r++)); do
        for ((p = 0; p < PARTS; p++)); do
            stmt="WITH w AS (INSERT INTO fault_writes VALUES ($r, $p) ON CONFLICT DO NOTHING
                  RETURNING 1)
                  INSERT INTO outbox (topic, key, payload)
                  SELECT '$topic', convert_to('k' || k, 'UTF8'),
                         convert_to('k' || k || ':' || $r, 'UTF8')
                  FROM w, generate_series($((p * per)), $((p * per + per - 1))) AS k ORDER BY k"
            until timeout 10 psql -X -q -v ON_ERROR_STOP=1 "$pg_base/$db" -c "$stmt" \
                2>>"$logs_dir/$scenario/writer-errors.log"; do
                failed=$((failed + 1))
                if ((SECONDS >= deadline)); then
                    echo "writer: gave up at round $r part $p after $failed failed attempts"
                    return 1
                fi
                sleep 0.2
            done
        done
    done
    echo "writer: $((ROUNDS * PARTS)) transactions, $ROWS rows, $failed failed attempts"
}

published() {
    sql "$1" "SELECT coalesce(sum(published), 0) FROM relay_cursors"
}

published_at_least() {
    (($(published "$1") >= $2))
}

outbox_drained() {
    [[ $(sql "$1" "SELECT count(*) FROM outbox") == 0 ]] && (($(published "$1") >= ROWS))
}

relay_log_has() {
    grep -q -- "$1" "$logs_dir/$scenario/relay.log"
}

# The relay log from line $1 on has "$2", and after it "$3".
relay_log_since() {
    awk -v from="$1" -v a="$2" -v b="$3" '
        NR > from && !seen_a && index($0, a) { seen_a = 1; next }
        seen_a && index($0, b) { found = 1; exit }
        END { exit !found }' "$logs_dir/$scenario/relay.log"
}

relay_log_lines() {
    wc -l <"$logs_dir/$scenario/relay.log"
}

stop_relay() {
    local rc=0 deadline=$((SECONDS + 30))
    kill -TERM "$relay_pid"
    while alive "$relay_pid"; do
        if ((SECONDS >= deadline)); then
            kill -KILL "$relay_pid"
            break
        fi
        sleep 0.2
    done
    wait "$relay_pid" || rc=$?
    relay_pid=
    ((rc == 0)) || fail "sagad-relay exited $rc on SIGTERM, expected 0"
}

# Fails, with the exit code, when the relay is no longer running.
relay_must_live() {
    local rc=0
    alive "$relay_pid" && return 0
    wait "$relay_pid" || rc=$?
    relay_pid=
    # The relay stops with 0 only when asked to (SIGTERM/SIGINT): then some
    # process outside the suite signalled it, which is not a relay failure
    # but still voids the scenario.
    ((rc != 0)) || fail "sagad-relay exited with code 0 $1: it was sent SIGTERM/SIGINT"
    fail "sagad-relay exited with code $rc $1; it must ride out the outage"
}

# Sleeps $1 seconds, failing at once if the relay exits meanwhile.
outage() {
    local end=$((SECONDS + $1))
    while ((SECONDS < end)); do
        relay_must_live "during the outage"
        sleep 0.5
    done
}

# The fault of broker_restart: Kafka stopped ~10 s while the writer runs.
# delivery_timeout_ms (3 s) is below the outage, so batches really fail and
# are sent again from the cursor, which is the path under test.
fault_broker() {
    local before backlog
    before=$(relay_log_lines)
    deploy/local/kafka.sh stop
    outage 10
    backlog=$(sql "$db" "SELECT count(*) FROM outbox")
    ((backlog > 0)) || fail "no rows waited during the outage: the fault missed the writer"
    timeout 150 deploy/local/kafka.sh start
    log "broker back; $backlog rows were waiting"
    relay_must_live "after the broker came back"
    wait_until "outbox drained after the broker restart" 120 outbox_drained "$db"
    relay_log_since "$before" '"error_code":"kafka.' '"to":"backoff","why":"publish"' ||
        fail "relay did not log a failed delivery, then its move to backoff"
    relay_log_since "$before" '"to":"backoff","why":"publish"' '"to":"active","why":"retry"' ||
        fail "relay did not log its return to active after the backoff"
}

# The port of a process's /metrics, /healthz, /readyz endpoint, from its
# "http endpoint listening" log line (both run with http.port 0).
endpoint_port() {
    local line
    line=$(grep -o '"msg":"http endpoint listening","addr":"127.0.0.1:[0-9]*"' "$1" | head -n 1)
    [[ -n $line ]] || fail "no endpoint address in $1"
    echo "${line##*:}" | tr -d '"'
}

# GET http://127.0.0.1:$1$2: prints the status and the body on one line.
http_get() {
    python3 - "$1" "$2" <<'PY'
import sys, urllib.error, urllib.request
try:
    r = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=5)
    print(r.status, r.read().decode().replace("\n", " | "))
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().replace("\n", " | "))
except Exception as e:
    print(0, e)
PY
}

# /readyz of port $1 answers status $2 with $3 in its body.
readyz_is() {
    local out
    out=$(http_get "$1" /readyz)
    [[ $out == "$2 "* && $out == *"$3"* ]]
}

# A worker beside the relay during pg_restart, idle on its own topic: its
# /readyz must fail while PostgreSQL is down and recover after, like the
# relay's.
start_worker() {
    local dir=$logs_dir/$scenario
    printf '{"v": 1, "tools": {"noop": {"adapter": "builtin", "target": "noop", %s}}}\n' \
        '"side_effect": "read"' >"$dir/tools.json"
    export SAGAD_TOPIC_COMMANDS=faults.$scenario.commands SAGAD_TOPIC_EVENTS=faults.$scenario.events
    export SAGAD_TOPIC_INTERNAL=faults.$scenario.internal SAGAD_TOPIC_DLQ=faults.$scenario.dlq
    SAGAD_PG_DSN=$pg_base/$db SAGAD_KAFKA_BOOTSTRAP_SERVERS=$kafka timeout 60 \
        bin/sagad-worker topics --partitions 2 >"$dir/topics.log" 2>&1 ||
        fail "worker topics failed: $(cat "$dir/topics.log")"
    env SAGAD_PG_DSN="$pg_base/$db" SAGAD_KAFKA_BOOTSTRAP_SERVERS="$kafka" \
        SAGAD_WORKER_REGISTRY="$dir/tools.json" SAGAD_WORKER_GROUP_ID=faults-$scenario \
        SAGAD_HTTP_PORT=0 bin/sagad-worker run 2>"$dir/worker.log" &
    worker_pid=$!
    unset SAGAD_TOPIC_COMMANDS SAGAD_TOPIC_INTERNAL SAGAD_TOPIC_EVENTS SAGAD_TOPIC_DLQ
}

stop_worker() {
    local rc=0
    kill -TERM "$worker_pid"
    wait "$worker_pid" || rc=$?
    worker_pid=
    ((rc == 0)) || fail "sagad-worker exited $rc on SIGTERM, expected 0"
}

# The fault of pg_restart: PostgreSQL stopped ~8 s while the writer runs;
# the relay's session (and its shard lock) dies with it.  Both /readyz
# answer 503 naming PostgreSQL during the outage and 200 after it.
fault_pg() {
    local before rport wport t0
    before=$(relay_log_lines)
    rport=$(endpoint_port "$logs_dir/$scenario/relay.log")
    wport=$(endpoint_port "$logs_dir/$scenario/worker.log")
    wait_until "relay /readyz 200 before the fault" 30 readyz_is "$rport" 200 ok
    wait_until "worker /readyz 200 before the fault" 30 readyz_is "$wport" 200 ok
    t0=$SECONDS
    deploy/local/pg.sh stop
    wait_until "relay /readyz 503 naming postgresql" 20 readyz_is "$rport" 503 postgresql
    wait_until "worker /readyz 503 naming postgresql" 20 readyz_is "$wport" 503 postgresql
    log "both /readyz answer 503 while the database is down: $(http_get "$wport" /readyz)"
    outage $((8 - (SECONDS - t0) > 0 ? 8 - (SECONDS - t0) : 1))
    timeout 90 deploy/local/pg.sh start
    log "database back"
    wait_until "relay /readyz 200 after the restart" 60 readyz_is "$rport" 200 ok
    wait_until "worker /readyz 200 after the restart" 60 readyz_is "$wport" 200 ok
    [[ $(http_get "$wport" /healthz) == "200 ok"* ]] || fail "worker /healthz not 200 after the restart"
    relay_must_live "after the database came back"
    wait_until "outbox drained after the database restart" 120 outbox_drained "$db"
    relay_log_since "$before" '"error_code":"pg.' '"to":"backoff"' ||
        fail "relay did not log a lost PostgreSQL connection then its move to backoff"
    relay_log_since "$before" '"to":"connecting","why":"retry"' '"to":"standby","why":"connected"' ||
        fail "relay did not log reconnecting after the restart"
    relay_log_since "$before" '"to":"standby","why":"connected"' '"msg":"took over shard"' ||
        fail "relay did not log taking its shard again after the restart"
    [[ $(sql "$db" "SELECT holder FROM relay_cursors WHERE shard = 0") == *":$relay_pid" ]] ||
        fail "the shard's holder is not the relay that rode out the restart"
}

# One scenario: fresh database and topic, relay and writer running, the
# fault once part of the rows is published, then the checks.
run_scenario() {
    local fault=$1 dir rc=0 t0=$SECONDS
    shift
    scenario=${fault#fault_}_restart
    db=faults_${fault#fault_}
    local topic=faults.$scenario
    dir=$logs_dir/$scenario
    mkdir -p "$dir"
    log "database $db, topic $topic, $ROWS rows over $KEYS keys"
    sql sagad "CREATE DATABASE $db"
    SAGAD_PG_DSN=$pg_base/$db timeout 30 bin/sagad-relay migrate >"$dir/migrate.log" 2>&1 ||
        fail "migrate failed: $(cat "$dir/migrate.log")"
    sql "$db" "CREATE TABLE fault_writes (round int, part int, PRIMARY KEY (round, part))"

    env SAGAD_PG_DSN="$pg_base/$db" SAGAD_KAFKA_BOOTSTRAP_SERVERS="$kafka" \
        SAGAD_LOG_LEVEL=info SAGAD_HTTP_PORT=0 "$@" bin/sagad-relay run 2>"$dir/relay.log" &
    relay_pid=$!
    wait_until "relay active" 30 relay_log_has '"msg":"took over shard"'
    if [[ $fault == fault_pg ]]; then start_worker; fi
    writer "$db" "$topic" >"$dir/writer.log" 2>&1 &
    writer_pid=$!
    # The fault strikes mid-stream: some rows published, the writer busy.
    wait_until "first rows published" 60 published_at_least "$db" 2000
    alive "$writer_pid" || fail "the writer finished before the fault: make the workload longer"
    log "fault at $(published "$db") of $ROWS rows published"
    "$fault"

    wait "$writer_pid" || rc=$?
    writer_pid=
    ((rc == 0)) || fail "writer failed: $(tail -n 3 "$dir/writer.log")"
    log "$(cat "$dir/writer.log")"
    relay_must_live "after the outage"
    [[ $(published "$db") == "$ROWS" ]] ||
        fail "relay_cursors.published is $(published "$db"), expected $ROWS (each row passed once)"
    stop_relay
    if [[ -n $worker_pid ]]; then stop_worker; fi

    timeout 60 kcat -C -b "$kafka" -t "$topic" -o beginning -e -q \
        -f '%p\t%o\t%k\t%s\n' >"$dir/topic.tsv" || fail "kcat could not read $topic"
    python3 tests/faults/check_topic.py --keys "$KEYS" --per-key "$ROUNDS" "$dir/topic.tsv" ||
        fail "topic check failed (consumed: $dir/topic.tsv)"
    log "passed in $((SECONDS - t0))s"
    scenario=
}

for tool in kcat psql python3 timeout; do
    command -v "$tool" >/dev/null || fail "$tool not found (make deps)"
done
[[ -x bin/sagad-relay ]] || fail "bin/sagad-relay not built: run make all first"

selected=("$@")
((${#selected[@]})) || selected=(broker_restart pg_restart)
for s in "${selected[@]}"; do
    case $s in
        broker_restart | pg_restart) ;;
        *) echo "usage: tests/faults/run.sh [broker_restart|pg_restart]..." >&2; exit 2 ;;
    esac
done

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
services_up

for s in "${selected[@]}"; do
    case $s in
        broker_restart) run_scenario fault_broker SAGAD_RELAY_DELIVERY_TIMEOUT_MS=3000 ;;
        pg_restart) run_scenario fault_pg ;;
    esac
done
