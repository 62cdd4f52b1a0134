#!/usr/bin/env bash
# Relay fault suite: a broker restart and a PostgreSQL restart while
# sagad-relay publishes and a writer keeps inserting; checks that nothing is
# lost, that every key keeps its order, and that the relay rides it out.
#
#   tests/faults/run.sh [SCENARIO...]   (default: all, in this order:
#                                        broker_restart pg_restart wal_broker_restart
#                                        wal_pg_restart wal_kill9 wal_open_txn wal_big_txn
#                                        wal_eos_kill9 wal_eos_big_txn wal_failover
#                                        wal_eos_failover wal_lag_failover)
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
# The wal_* scenarios run the same checks against the WAL source
# (relay.source = wal), plus a kill -9 with a standby, a transaction held
# open 20 s beside the writer, and one transaction of 100,000 messages.
# The wal_eos_* scenarios are two of them again with relay.exactly_once:
# there a read_committed consumer must see no duplicate at all.
# wal_failover promotes a streaming standby of the primary (port
# SAGAD_FAULTS_STANDBY_PORT, default 54340) after a crash of the primary
# while the writer runs; it checks what docs/RELAY.md ("Failover") says
# is kept and what may be lost; wal_eos_failover the same with
# relay.exactly_once; wal_lag_failover the same with the relay held back
# (SIGSTOP) for 2 s before the crash, so that the loss docs/RELAY.md
# describes happens: it must, bounded as it says, and named in the
# relay's log.
#
# Every step has its own time limit; the suite takes about 5 to 7 minutes.
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
standby_port=${SAGAD_FAULTS_STANDBY_PORT:-54340}
# Read: the relay and the worker refuse SAGAD_ variables they do not know.
unset SAGAD_FAULTS_KAFKA_PORT SAGAD_FAULTS_KAFKA_CONTROLLER_PORT SAGAD_FAULTS_PG_PORT \
    SAGAD_FAULTS_STANDBY_PORT
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
    if [[ -n ${standby_pid:-} ]] && alive "$standby_pid"; then kill -KILL "$standby_pid" || true; fi
    pg_standby_stop
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
            [[ ${WRITER_PAUSE:-0} == 0 ]] || sleep "$WRITER_PAUSE"
            until timeout 10 psql -X -q -v ON_ERROR_STOP=1 "${writer_url:-$pg_base/$db}" -c "$stmt" \
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


# ---- the WAL source (relay.source = wal; docs/RELAY.md "The WAL source") ----
#
# The same workload, published from the WAL through a replication slot.
# Progress is read from the topic itself (the WAL source keeps no cursor
# row): distinct payloads consumed so far.  Every scenario ends with the
# same topic check (nothing lost, per-key order, duplicates only as
# replays of an unconfirmed stretch, counted in its summary line).

relay_base=postgresql://sagad_relay:relay-local-pw@127.0.0.1:$SAGAD_LOCAL_PG_PORT
standby_pid=
eos_env=() # relay.exactly_once and its checkpoint topic, in the wal_eos_* scenarios

# With $1 = eos: the scenario's relays run with relay.exactly_once and a
# checkpoint topic of the scenario's own, made as an operator makes it
# (sagad-worker topics); else without.
use_eos() {
    eos_env=()
    [[ ${1:-} == eos ]] || return 0
    local ck=faults.$scenario.checkpoints
    SAGAD_PG_DSN=$pg_base/$db SAGAD_KAFKA_BOOTSTRAP_SERVERS="$kafka" SAGAD_RELAY_CHECKPOINT_TOPIC=$ck \
        timeout 60 bin/sagad-worker topics --partitions 1 >"$logs_dir/$scenario/topics.log" 2>&1 ||
        fail "could not create $ck: $(tail -n 3 "$logs_dir/$scenario/topics.log")"
    eos_env=(SAGAD_RELAY_EXACTLY_ONCE=true SAGAD_RELAY_CHECKPOINT_TOPIC="$ck")
}

# The duplicates check_topic.py's summary ($1) counts (empty if none
# is printed).
duplicates_in() {
    sed -nE 's/.* ([0-9]+) duplicates .*/\1/p' "$1"
}

# With exactly once, the check's summary ($1) must count no duplicate.
no_duplicates_if_eos() {
    ((${#eos_env[@]})) || return 0
    local dups
    dups=$(duplicates_in "$1")
    [[ $dups == 0 ]] || fail "exactly once, yet ${dups:-an unknown number of} duplicates: $(cat "$1")"
    log "exactly once: no duplicates"
}

# Distinct messages in $1 (duplicates counted once).  kcat waits for a
# topic that does not exist yet: the timeout makes that a 0.
consumed() {
    timeout 8 kcat -C -b "$kafka" -t "$1" -o beginning -e -q -f '%s\n' 2>/dev/null |
        sort -u | wc -l
}

writes_at_least() {
    (($(sql "$db" "SELECT count(*) FROM fault_writes") >= $1))
}

consumed_at_least() {
    (($(consumed "$1") >= $2))
}

# Starts a WAL relay on $db into $1 (a log file); prints nothing, sets
# the pid in $started_pid.
start_wal_relay() {
    env SAGAD_PG_DSN="$relay_base/$db" SAGAD_KAFKA_BOOTSTRAP_SERVERS="$kafka" \
        SAGAD_RELAY_SOURCE=wal SAGAD_RELAY_SLOT="faults_$scenario" SAGAD_LOG_LEVEL=info \
        SAGAD_HTTP_PORT=0 SAGAD_RELAY_STANDBY_POLL_MS=200 SAGAD_RETENTION_JANITOR=false \
        "${wal_env[@]}" "${eos_env[@]}" bin/sagad-relay run 2>"$1" &
    started_pid=$!
}

# The walsender streaming from the scenario's slot (empty when none).
slot_holder() {
    psql_db "$db" -c "SELECT active_pid FROM pg_replication_slots
                      WHERE slot_name = 'faults_$scenario'" 2>/dev/null
}

# Drops the scenario's slot as the relay's login (which may).  A relay that
# just exited can leave its walsender on its way out for a moment, and an
# active slot cannot be dropped: that walsender is ended and the drop tried
# again, for up to 10 s.
drop_slot() {
    local i
    for i in $(seq 1 50); do
        timeout 20 psql -X -q -At -v ON_ERROR_STOP=1 "$relay_base/$db" \
            -c "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
                WHERE slot_name = 'faults_$scenario' AND active_pid IS NOT NULL" \
            -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
                WHERE slot_name = 'faults_$scenario'" >/dev/null 2>"$dir/drop_slot.err" && return 0
        sleep 0.2
    done
    fail "could not drop the slot faults_$scenario: $(cat "$dir/drop_slot.err")"
}

# The WAL written since the slot's confirmed position, in bytes.
slot_lag() {
    psql_db "$db" -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
                      FROM pg_replication_slots WHERE slot_name = 'faults_$scenario'"
}

# wal_broker_restart: Kafka stopped ~10 s while the writer runs; the
# batch in flight fails, the stream is dropped and read again from the
# confirmed position.
wal_fault_broker() {
    local before lag
    before=$(relay_log_lines)
    deploy/local/kafka.sh stop
    outage 10
    lag=$(slot_lag)
    ((lag > 0)) || fail "no WAL waited during the outage: the fault missed the writer"
    timeout 150 deploy/local/kafka.sh start
    log "broker back; $lag bytes of WAL were waiting"
    relay_must_live "after the broker came back"
    relay_log_since "$before" '"error_code":"kafka.' '"to":"backoff","why":"publish"' ||
        fail "relay did not log a failed delivery, then its move to backoff"
    wait_until "streaming again after the broker restart" 60 \
        relay_log_since "$before" '"to":"backoff","why":"publish"' '"msg":"streaming from the replication slot"'
}

# wal_pg_restart: PostgreSQL stopped ~8 s (immediate, as a crash would)
# while the writer runs; both sessions die with it.
wal_fault_pg() {
    local before
    before=$(relay_log_lines)
    local pm
    pm=$(deploy/local/pg.sh status | sed -nE 's/^running \(pid ([0-9]+),.*/\1/p')
    [[ -n $pm ]] || fail "no postmaster pid from pg.sh status"
    kill -QUIT "$pm" # immediate shutdown: no checkpoint, crash recovery at the next start
    wait_until "PostgreSQL down" 30 eval '! alive "$pm"'
    outage 8
    timeout 90 deploy/local/pg.sh start
    log "database back"
    relay_must_live "after the database came back"
    relay_log_since "$before" '"error_code":"pg.' '"to":"backoff"' ||
        fail "relay did not log a lost PostgreSQL session then its move to backoff"
    wait_until "streaming again after the restart" 60 \
        relay_log_since "$before" '"to":"backoff"' '"msg":"streaming from the replication slot"'
}

# wal_kill9: a standby beside the relay; kill -9 of the relay mid-stream;
# the standby takes the slot within seconds.
wal_fault_kill9() {
    local old t0
    old=$(slot_holder)
    kill -KILL "$relay_pid"
    wait "$relay_pid" 2>/dev/null || true
    t0=$SECONDS
    relay_pid=$standby_pid
    standby_pid=
    wait_until "the standby streams from the slot" 15 \
        relay_log_has_in "$logs_dir/$scenario/standby.log" '"msg":"streaming from the replication slot"'
    log "standby took over in $((SECONDS - t0)) s (walsender $old -> $(slot_holder))"
    cp "$logs_dir/$scenario/standby.log" "$logs_dir/$scenario/relay.log.standby"
}

relay_log_has_in() {
    grep -q -- "$2" "$1"
}

# wal_open_txn: a transaction holding one message (on a topic of its own)
# open for 20 s, begun before the writer: the writer's thousands commit
# after it began and are published meanwhile, and its message once it
# commits.  (The table source holds every one of them back.)
open_txn_begin() {
    held_log=$logs_dir/$scenario/held.log
    timeout 60 psql -X -q -v ON_ERROR_STOP=1 "$pg_base/$db" >"$held_log" 2>&1 <<SQL &
BEGIN;
INSERT INTO outbox (topic, key, payload) VALUES ('$topic.held', 'held', 'held');
SELECT pg_sleep(20);
COMMIT;
SQL
    held_pid=$!
    # its INSERT is in before the writer's first transaction begins
    wait_until "the held transaction's row" 10 eval \
        "[[ \$(psql_db \"\$db\" -c \"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(20)%'\") == 1 ]]"
}

wal_fault_open_txn() {
    wait_until "the writer's rows published while a transaction is open" 60 \
        consumed_at_least "$topic" $((ROWS / 2))
    alive "$held_pid" || fail "the open transaction ended before half the rows were published"
    log "$(consumed "$topic") published while a transaction begun before them stayed open"
    wait "$held_pid" || fail "the open transaction failed: $(cat "$held_log")"
    wait_until "the held message published once it committed" 30 consumed_at_least "$topic.held" 1
}

run_wal_scenario() {
    # Half the table scenarios' rounds (the writer takes about 20 s): the
    # faults strike in the first seconds, and make test has a time budget.
    # The writer pauses 50 ms between transactions (about 15 s in all):
    # the WAL relay keeps up with it, and on a fast machine an unpaused
    # writer was done before the fault struck (CI, de713f1).
    local fault=$1 dir rc=0 t0=$SECONDS ROUNDS=50 WRITER_PAUSE=0.05
    local ROWS=$((KEYS * ROUNDS))
    scenario=wal_${2:+$2_}${fault#wal_fault_}
    db=faults_$scenario
    topic=faults.$scenario
    dir=$logs_dir/$scenario
    wal_env=(SAGAD_RELAY_DELIVERY_TIMEOUT_MS=3000)
    mkdir -p "$dir"
    log "database $db, topic $topic, $ROWS rows over $KEYS keys, WAL source"
    sql sagad "CREATE DATABASE $db"
    SAGAD_PG_DSN=$pg_base/$db timeout 30 bin/sagad-relay migrate >"$dir/migrate.log" 2>&1 ||
        fail "migrate failed: $(cat "$dir/migrate.log")"
    sql "$db" "CREATE TABLE fault_writes (round int, part int, PRIMARY KEY (round, part))"
    use_eos "${2:-}"
    start_wal_relay "$dir/relay.log"
    relay_pid=$started_pid
    wait_until "relay streaming" 30 relay_log_has '"msg":"streaming from the replication slot"'
    if [[ $fault == wal_fault_kill9 ]]; then
        start_wal_relay "$dir/standby.log"
        standby_pid=$started_pid
    fi
    # One message through first: a new broker's producer waits seconds for
    # its idempotence id, longer than the writer takes.
    sql "$db" "INSERT INTO outbox (topic, key, payload) VALUES ('$topic.warm', 'w', 'w')"
    wait_until "a first message published" 60 consumed_at_least "$topic.warm" 1
    if [[ $fault == wal_fault_open_txn ]]; then open_txn_begin; fi
    writer "$db" "$topic" >"$dir/writer.log" 2>&1 &
    writer_pid=$!
    # The fault strikes once 20 of the writer's transactions committed
    # (counted in the database: asking the topic takes seconds).
    wait_until "first transactions written" 60 writes_at_least 20
    alive "$writer_pid" || fail "the writer finished before the fault: make the workload longer"
    log "fault at $(consumed "$topic") of $ROWS rows published"
    "$fault"

    wait "$writer_pid" || rc=$?
    writer_pid=
    ((rc == 0)) || fail "writer failed: $(tail -n 3 "$dir/writer.log")"
    log "$(cat "$dir/writer.log")"
    relay_must_live "after the fault"
    wait_until "every row published" 120 consumed_at_least "$topic" "$ROWS"
    [[ $(sql "$db" "SELECT count(*) FROM outbox") == 0 ]] || fail "rows left in the outbox table"
    stop_relay
    if [[ -n $standby_pid ]]; then kill -TERM "$standby_pid"; wait "$standby_pid" || true; standby_pid=; fi
    drop_slot
    timeout 60 kcat -C -b "$kafka" -t "$topic" -o beginning -e -q -X isolation.level=read_committed \
        -f '%p\t%o\t%k\t%s\n' >"$dir/topic.tsv" || fail "kcat could not read $topic"
    python3 tests/faults/check_topic.py --keys "$KEYS" --per-key "$ROUNDS" "$dir/topic.tsv" \
        >"$dir/check.log" || fail "topic check failed (consumed: $dir/topic.tsv): $(cat "$dir/check.log")"
    cat "$dir/check.log"
    no_duplicates_if_eos "$dir/check.log"
    eos_env=()
    log "passed in $((SECONDS - t0))s"
    scenario=
}

# wal_big_txn: one transaction of 100,000 messages, more than one batch
# (relay.wal_batch_size 5,000): the first relay aborts right after its first
# batch's acks (the relay.after_ack failpoint), so it confirms nothing
# inside the transaction; the next one publishes the whole transaction
# again: that batch's messages come twice, nothing is lost.  With $1 =
# eos (relay.exactly_once) the next one skips that batch: no duplicate.
run_wal_big_txn() {
    local dir rc=0 t0=$SECONDS n=100000 keys=1000 per=100
    scenario=wal_${1:+$1_}big_txn
    db=faults_$scenario
    topic=faults.$scenario
    dir=$logs_dir/$scenario
    wal_env=(SAGAD_RELAY_WAL_BATCH_SIZE=5000)
    mkdir -p "$dir"
    log "database $db, topic $topic, $n messages in one transaction, WAL source"
    sql sagad "CREATE DATABASE $db"
    SAGAD_PG_DSN=$pg_base/$db timeout 30 bin/sagad-relay migrate >"$dir/migrate.log" 2>&1 ||
        fail "migrate failed: $(cat "$dir/migrate.log")"
    use_eos "${1:-}"
    sql "$db" "INSERT INTO outbox (topic, key, payload) VALUES ('$topic.warm', 'w', 'w')"
    wal_env=(SAGAD_RELAY_WAL_BATCH_SIZE=5000 SAGAD_TEST_FAILPOINT=relay.after_ack)
    start_wal_relay "$dir/relay.log"
    relay_pid=$started_pid
    wait_until "relay streaming" 30 relay_log_has '"msg":"streaming from the replication slot"'
    wait_until "the warm-up message's batch" 60 consumed_at_least "$topic.warm" 1
    # that batch aborted the relay at the failpoint; the next one starts clean
    wait "$relay_pid" 2>/dev/null || true
    wal_env=(SAGAD_RELAY_WAL_BATCH_SIZE=5000)
    start_wal_relay "$dir/relay1.log"
    relay_pid=$started_pid
    wait_until "relay streaming" 30 relay_log_has_in "$dir/relay1.log" '"msg":"streaming from the replication slot"'
    kill -TERM "$relay_pid"
    wait "$relay_pid" || fail "the second relay did not stop cleanly"
    sql "$db" "INSERT INTO outbox (topic, key, payload)
               SELECT '$topic', convert_to('k' || k, 'UTF8'), convert_to('k' || k || ':' || s, 'UTF8')
               FROM generate_series(0, $((per - 1))) s, generate_series(0, $((keys - 1))) k
               ORDER BY s, k"
    wal_env=(SAGAD_RELAY_WAL_BATCH_SIZE=5000 SAGAD_TEST_FAILPOINT=relay.after_ack)
    start_wal_relay "$dir/relay-crash.log"
    relay_pid=$started_pid
    wait "$relay_pid" 2>/dev/null || true
    relay_pid=
    grep -q "failpoint relay.after_ack" "$dir/relay-crash.log" ||
        fail "the relay did not stop at the failpoint: $(tail -n 3 "$dir/relay-crash.log")"
    log "relay aborted after its first batch's acks: $(consumed "$topic") of $n published, slot lag $(slot_lag) bytes"
    (($(slot_lag) > 0)) || fail "the slot confirmed a position inside the transaction"
    wal_env=(SAGAD_RELAY_WAL_BATCH_SIZE=5000)
    start_wal_relay "$dir/relay2.log"
    relay_pid=$started_pid
    wait_until "every message published" 120 consumed_at_least "$topic" "$n"
    stop_relay
    drop_slot
    timeout 60 kcat -C -b "$kafka" -t "$topic" -o beginning -e -q -X isolation.level=read_committed \
        -f '%p\t%o\t%k\t%s\n' >"$dir/topic.tsv" || fail "kcat could not read $topic"
    python3 tests/faults/check_topic.py --keys "$keys" --per-key "$per" "$dir/topic.tsv" \
        >"$dir/check.log" || fail "topic check failed (consumed: $dir/topic.tsv): $(cat "$dir/check.log")"
    cat "$dir/check.log"
    # The aborted relay's one batch (at most relay.wal_batch_size, fewer
    # when the stream paused) came twice, and nothing else did; with
    # exactly once, the next relay skipped it.
    local dups
    dups=$(duplicates_in "$dir/check.log")
    if ((${#eos_env[@]})); then
        no_duplicates_if_eos "$dir/check.log"
        grep -q "skipped the messages the checkpoint says are in Kafka" "$dir/relay2.log" ||
            fail "the relay after the crash did not skip the committed batch"
    else
        ((dups >= 1 && dups <= 5000)) ||
            fail "expected 1 to 5,000 duplicates (the aborted batch), got ${dups:-none}"
    fi
    eos_env=()
    log "passed in $((SECONDS - t0))s"
    scenario=
}

# ---- wal_failover: a standby promoted after the primary crashed ----------
#
# PostgreSQL 15 does not copy a logical slot to its standbys, so the
# promoted standby has none (docs/RELAY.md, "Failover").  What must hold:
# the relay, on a DSN naming both servers, rides it out (it finds the
# slot gone, logs the loss, makes the slot again); every message of a
# transaction committed on the new primary is published, in order per
# key; none is left in the outbox table.  What may happen, counted: the
# messages of transactions the new primary has but the old relay had not
# confirmed are lost, and messages the old primary published but never
# sent to its standby (asynchronous replication) are published for rows
# the new primary does not have.

pg_bin=${SAGAD_PG_BIN:-/usr/lib/postgresql/15/bin}
standby_data=
# As deploy/local/pg.sh runs its clusters: root as the postgres user,
# anyone else as themselves; the clusters' superuser is postgres either way.
if ((EUID == 0)); then
    pg_owner=postgres
    as_pg_owner=(runuser -u postgres --)
else
    pg_owner=$(id -un)
    as_pg_owner=()
fi

# The primary's cluster directory (deploy/local/pg.sh's, a symlink
# followed): its data/, and its socket.
primary_dir() {
    realpath -- "$SAGAD_LOCAL_PG_DIR"
}

# psql as the cluster's owner on the primary's socket.
primary_admin() {
    timeout 20 "${as_pg_owner[@]}" psql -X -q -At -h "$(primary_dir)" -p "$SAGAD_LOCAL_PG_PORT" \
        -U postgres -d postgres "$@"
}

# A streaming standby of the primary in a directory the postgres user
# owns, listening on 127.0.0.1:$standby_port.
pg_standby_start() {
    local sock data
    sock=$(primary_dir)
    data=$sock/data
    # base backups over the primary's own socket only, for this scenario
    "${as_pg_owner[@]}" sh -c "grep -q '^local replication' '$data/pg_hba.conf' ||
        echo 'local replication postgres trust' >> '$data/pg_hba.conf'"
    primary_admin -c "SELECT pg_reload_conf()" >/dev/null
    standby_data=$(mktemp -d /var/tmp/sagad-faults-standby.XXXXXX)
    chown "$pg_owner" "$standby_data"
    chmod 700 "$standby_data"
    timeout 120 "${as_pg_owner[@]}" "$pg_bin/pg_basebackup" -h "$sock" -p "$SAGAD_LOCAL_PG_PORT" \
        -U postgres -D "$standby_data" -R -X stream -c fast >"$logs_dir/$scenario/basebackup.log" 2>&1 ||
        fail "pg_basebackup failed: $(tail -n 3 "$logs_dir/$scenario/basebackup.log")"
    "${as_pg_owner[@]}" sh -c "printf '%s\n' \"port = $standby_port\" \"unix_socket_directories = ''\" \
        \"listen_addresses = '127.0.0.1'\" >> '$standby_data/postgresql.auto.conf'"
    timeout 90 "${as_pg_owner[@]}" "$pg_bin/pg_ctl" start -w -t 60 -D "$standby_data" \
        -l "$standby_data/log" -s || fail "the standby did not start: $(tail -n 5 "$standby_data/log")"
    wait_until "the standby streams from the primary" 30 eval \
        "[[ \$(primary_admin -c \"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'\") == 1 ]]"
}

pg_standby_stop() {
    [[ -n $standby_data && -d $standby_data ]] || return 0
    timeout 60 "${as_pg_owner[@]}" "$pg_bin/pg_ctl" stop -D "$standby_data" -m immediate -w -s \
        >/dev/null 2>&1 || true
    cp "$standby_data/log" "$logs_dir/standby-postgres.log" 2>/dev/null || true
    rm -rf "$standby_data"
    standby_data=
}

# wal_failover, wal_eos_failover ($1 = eos) and wal_lag_failover ($1 =
# lag: the relay is held back (SIGSTOP) for 2 s while the writer goes on,
# and the primary crashes then, so that what it committed in those 2 s is
# lost; the relay resumes once the standby is promoted).
run_wal_failover() {
    local dir rc=0 t0=$SECONDS ROUNDS=50 WRITER_PAUSE=0.05 pm both new_pg lag=() line
    local ROWS=$((KEYS * ROUNDS))
    [[ ${1:-} != lag ]] || lag=(--expect-lost)
    scenario=wal_${1:+$1_}failover
    db=faults_$scenario
    topic=faults.$scenario
    dir=$logs_dir/$scenario
    mkdir -p "$dir"
    log "database $db, topic $topic, $ROWS rows over $KEYS keys, WAL source, a standby promoted"
    sql sagad "CREATE DATABASE $db"
    SAGAD_PG_DSN=$pg_base/$db timeout 30 bin/sagad-relay migrate >"$dir/migrate.log" 2>&1 ||
        fail "migrate failed: $(cat "$dir/migrate.log")"
    # Which server committed each of the writer's transactions.
    sql "$db" "CREATE TABLE fault_writes (round int, part int, port int DEFAULT inet_server_port(),
               PRIMARY KEY (round, part))"
    use_eos "${1:-}"
    pg_standby_start
    # Both servers, the one that takes writes first: what an operator's DSN
    # names when a failover may move the primary.
    both="127.0.0.1:$SAGAD_LOCAL_PG_PORT,127.0.0.1:$standby_port/$db?target_session_attrs=read-write"
    new_pg=postgresql://sagad:sagad-local-pw@127.0.0.1:$standby_port/$db
    wal_env=(SAGAD_RELAY_DELIVERY_TIMEOUT_MS=3000
        "SAGAD_PG_DSN=postgresql://sagad_relay:relay-local-pw@$both")
    start_wal_relay "$dir/relay.log"
    relay_pid=$started_pid
    wait_until "relay streaming" 30 relay_log_has '"msg":"streaming from the replication slot"'
    sql "$db" "INSERT INTO outbox (topic, key, payload) VALUES ('$topic.warm', 'w', 'w')"
    wait_until "a first message published" 60 consumed_at_least "$topic.warm" 1
    writer_url=postgresql://sagad:sagad-local-pw@$both writer "$db" "$topic" >"$dir/writer.log" 2>&1 &
    writer_pid=$!
    wait_until "first transactions written" 60 writes_at_least 20
    alive "$writer_pid" || fail "the writer finished before the fault: make the workload longer"
    if ((${#lag[@]})); then
        kill -STOP "$relay_pid"
        sleep 2
        log "relay held back 2 s: $(sql "$db" "SELECT count(*) FROM fault_writes") transactions written"
    fi
    log "fault at $(consumed "$topic") of $ROWS rows published"

    pm=$(deploy/local/pg.sh status | sed -nE 's/^running \(pid ([0-9]+),.*/\1/p')
    [[ -n $pm ]] || fail "no postmaster pid from pg.sh status"
    kill -QUIT "$pm" # the primary crashes: immediate shutdown
    wait_until "the primary down" 30 eval '! alive "$pm"'
    timeout 60 "${as_pg_owner[@]}" "$pg_bin/pg_ctl" promote -w -t 50 -D "$standby_data" -s ||
        fail "the standby was not promoted: $(tail -n 5 "$standby_data/log")"
    log "standby promoted (port $standby_port)"
    ((${#lag[@]} == 0)) || kill -CONT "$relay_pid"

    wait "$writer_pid" || rc=$?
    writer_pid=
    ((rc == 0)) || fail "writer failed: $(tail -n 3 "$dir/writer.log")"
    log "$(cat "$dir/writer.log")"
    relay_must_live "after the failover"
    relay_log_has 'the WAL source'"'"'s slot is gone' ||
        fail "the relay did not log the slot's loss on the new primary"
    # The relay that rode the failover out names where what it published
    # ends, and when it confirmed that.
    line=$(grep 'slot is gone' "$dir/relay.log" | head -n 1)
    [[ $line =~ \"published_through\":\"[0-9A-F]+/[0-9A-F]+\",\"published_through_at\":\"20[0-9-]+T ]] ||
        fail "the loss report does not name the position published through: $line"
    wait_until "streaming from the new primary's slot" 60 eval \
        "[[ \$(grep -c '\"msg\":\"streaming from the replication slot\"' '$dir/relay.log') -ge 2 ]]"
    timeout 20 psql -X -q -At "$new_pg" -c "SELECT round, part, port FROM fault_writes" \
        >"$dir/committed.tsv" || fail "could not read fault_writes on the new primary"
    # Until every message the new primary committed after the failover is
    # published (at most 120 s); the check after the relay stops says
    # what is missing, if anything.
    local deadline=$((SECONDS + 120))
    until python3 tests/faults/check_failover.py --keys "$KEYS" --parts "$PARTS" \
        --new-port "$standby_port" "${lag[@]}" --quiet "$dir/committed.tsv" <(timeout 8 kcat -C -b "$kafka" \
            -t "$topic" -o beginning -e -q -X isolation.level=read_committed -f '%p\t%o\t%k\t%s\n'); do
        ((SECONDS < deadline)) || break
        sleep 1
    done
    [[ $(timeout 20 psql -X -q -At "$new_pg" -c "SELECT count(*) FROM outbox") == 0 ]] ||
        fail "rows left in the new primary's outbox table"
    stop_relay
    timeout 60 kcat -C -b "$kafka" -t "$topic" -o beginning -e -q -X isolation.level=read_committed \
        -f '%p\t%o\t%k\t%s\n' >"$dir/topic.tsv" || fail "kcat could not read $topic"
    python3 tests/faults/check_failover.py --keys "$KEYS" --parts "$PARTS" --new-port "$standby_port" \
        "${lag[@]}" "$dir/committed.tsv" "$dir/topic.tsv" >"$dir/check.log" ||
        fail "failover check failed: $(cat "$dir/check.log")"
    cat "$dir/check.log"
    if ((${#eos_env[@]})); then
        # The promoted standby is on a new timeline: the checkpoint of the
        # old one is not skipped by (docs/RELAY.md, "Exactly once").
        relay_log_has 'exactly once: the last checkpoint was written on another WAL history' ||
            fail "with exactly once, the relay did not notice the checkpoint's other WAL history"
    fi
    eos_env=()
    pg_standby_stop
    # The old primary back for any scenario after this one (it restarts
    # on its own timeline; nothing here reads it again).
    timeout 90 deploy/local/pg.sh start
    log "passed in $((SECONDS - t0))s"
    scenario=
}

for tool in kcat psql python3 timeout; do
    command -v "$tool" >/dev/null || fail "$tool not found (make deps)"
done
[[ -x bin/sagad-relay ]] || fail "bin/sagad-relay not built: run make all first"

selected=("$@")
all=(broker_restart pg_restart wal_broker_restart wal_pg_restart wal_kill9 wal_open_txn wal_big_txn
    wal_eos_kill9 wal_eos_big_txn wal_failover wal_eos_failover wal_lag_failover)
((${#selected[@]})) || selected=("${all[@]}")
for s in "${selected[@]}"; do
    case " ${all[*]} " in
        *" $s "*) ;;
        *) echo "usage: tests/faults/run.sh [${all[*]// /|}]..." >&2; exit 2 ;;
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
        wal_broker_restart) run_wal_scenario wal_fault_broker ;;
        wal_pg_restart) run_wal_scenario wal_fault_pg ;;
        wal_kill9) run_wal_scenario wal_fault_kill9 ;;
        wal_open_txn) run_wal_scenario wal_fault_open_txn ;;
        wal_big_txn) run_wal_big_txn ;;
        wal_eos_kill9) run_wal_scenario wal_fault_kill9 eos ;;
        wal_eos_big_txn) run_wal_big_txn eos ;;
        wal_failover) run_wal_failover ;;
        wal_eos_failover) run_wal_failover eos ;;
        wal_lag_failover) run_wal_failover lag ;;
    esac
done
