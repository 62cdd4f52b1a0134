#!/usr/bin/env bash
# Single-node Apache Kafka 3.9.1 (KRaft, combined broker+controller) for local
# runs, tests and benchmarks of sagad.
#
#   deploy/local/kafka.sh start|stop|status|bootstrap
#
# The broker jars come from Maven Central (deploy/local/kafka/pom.xml), since
# the Apache download site is not reachable from our machines. Everything it
# writes lives under ${SAGAD_LOCAL_KAFKA_DIR:-<repo>/.run/kafka}. It listens on
# 127.0.0.1 only: ${SAGAD_LOCAL_KAFKA_PORT:-19092} for clients and
# ${SAGAD_LOCAL_KAFKA_CONTROLLER_PORT:-19093} for the KRaft controller.
#
# A second, private broker (tests/faults/run.sh stops and starts its own) is
# one with its own directory and ports; pass the same three variables to
# every command of that instance:
#   SAGAD_LOCAL_KAFKA_DIR=.run/faults/kafka SAGAD_LOCAL_KAFKA_PORT=29092 \
#   SAGAD_LOCAL_KAFKA_CONTROLLER_PORT=29093 deploy/local/kafka.sh start
set -euo pipefail

script_dir=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
# shellcheck source=deploy/local/common.sh
. "$script_dir/common.sh"
local_init kafka.sh "start|stop|status|bootstrap" "$@"
repo=$(realpath "$script_dir/../..")
pom="$script_dir/kafka/pom.xml"
# Made absolute here, so a relative SAGAD_LOCAL_KAFKA_DIR names the same
# broker (the pid check matches its server.properties path) from any cwd.
if [[ -n ${SAGAD_LOCAL_KAFKA_DIR:-} ]]; then
    run_dir=$(realpath -ms -- "$SAGAD_LOCAL_KAFKA_DIR")
else
    run_dir="$repo/.run/kafka"
fi
libs="$run_dir/libs"
data="$run_dir/data"
logs="$run_dir/logs"
props="$run_dir/server.properties"
log4j="$run_dir/log4j.properties"
pid_file="$run_dir/kafka.pid"

kafka_version=3.9.1
kafka_jar="kafka_2.13-$kafka_version.jar"
libs_marker="$libs/.complete-$kafka_version"
start_timeout=120
stop_timeout=30

port=${SAGAD_LOCAL_KAFKA_PORT:-19092}
cport=${SAGAD_LOCAL_KAFKA_CONTROLLER_PORT:-19093}
local_check_port SAGAD_LOCAL_KAFKA_PORT "$port"
local_check_port SAGAD_LOCAL_KAFKA_CONTROLLER_PORT "$cport"
if ((port == cport)); then
    echo "kafka.sh: client and controller ports must differ ($port)" >&2
    exit 2
fi

log_tail() {
    local f
    for f in "$@"; do
        [[ -s $f ]] || continue
        echo "--- last lines of $f ---" >&2
        tail -n 40 "$f" >&2
    done
}

# The pid file's process, only if it is still our broker: a java process
# running kafka.Kafka on our server.properties (guards against pid reuse).
broker_pid() {
    local pid cmdline
    [[ -f $pid_file ]] || return 1
    pid=$(tr -d '[:space:]' <"$pid_file")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    alive "$pid" || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == java ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == *" kafka.Kafka $props"* ]] || return 1
    echo "$pid"
}

# Port of the PLAINTEXT listener the running broker was started with.
running_port() {
    local p
    p=$(sed -n 's/^advertised\.listeners=PLAINTEXT:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$props" 2>/dev/null)
    echo "${p:-$port}"
}

ensure_libs() {
    if [[ -f $libs_marker && -f $libs/$kafka_jar ]]; then
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    echo "kafka.sh: fetching Kafka $kafka_version jars from Maven Central into $libs"
    # Start clean so jars of an older Kafka never share the classpath.
    rm -rf "$libs"
    mkdir -p "$libs"
    if ! mvn -q -B -f "$pom" -Dkafka.libs.dir="$libs" \
        dependency:copy-dependencies >"$run_dir/mvn.log" 2>&1; then
        log_tail "$run_dir/mvn.log"
        die "maven failed (log: $run_dir/mvn.log)"
    fi
    [[ -f $libs/$kafka_jar ]] || die "maven finished but $kafka_jar is missing from $libs"
    touch "$libs_marker"
}

write_config() {
    # Rewritten on every start so port changes apply; the data dir keeps the
    # cluster id, so this is safe for an already formatted node.
    cat >"$props" <<EOF
# Managed by deploy/local/kafka.sh; rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
# Few internal partitions: one node, and far less startup work.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
# Tests start consumers one by one; don't make each group wait 3 s.
group.initial.rebalance.delay.ms=0
EOF

    cat >"$log4j" <<EOF
# Managed by deploy/local/kafka.sh; rewritten on every start.
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$logs/server.log
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n

# Per-request, per-partition and config dumps drown the useful lines.
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.network.RequestChannel\$=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.authorizer.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.org.apache.kafka.storage.internals.log=WARN
log4j.logger.kafka.log.UnifiedLog=WARN
log4j.logger.kafka.log.LogManager=WARN
log4j.logger.org.apache.kafka.common.config.AbstractConfig=WARN
log4j.logger.kafka.server.KafkaConfig=WARN
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.zookeeper=WARN
EOF
}

java_cmd() {
    java -cp "$libs/*" -Dlog4j.configuration="file:$log4j" "$@"
}

format_storage() {
    local id
    [[ -f $data/meta.properties ]] && return 0
    echo "kafka.sh: formatting KRaft storage in $data"
    mkdir -p "$data"
    id=$(java_cmd -Xmx256m kafka.tools.StorageTool random-uuid 2>>"$logs/format.log") ||
        { log_tail "$logs/format.log"; die "StorageTool random-uuid failed"; }
    java_cmd -Xmx256m kafka.tools.StorageTool format -t "$id" -c "$props" \
        >>"$logs/format.log" 2>&1 ||
        { log_tail "$logs/format.log"; die "StorageTool format failed"; }
}

port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Ready = the broker announced itself AND a real client gets metadata back
# listing it, so callers can produce right away.
ready() {
    local meta
    grep -q 'Kafka Server started' "$logs/server.log" 2>/dev/null || return 1
    meta=$(kcat -b "127.0.0.1:$port" -L -m 5 2>/dev/null) || return 1
    [[ $meta == *"broker 1 at 127.0.0.1:$port"* ]]
}

do_start() {
    local pid deadline t0
    if pid=$(broker_pid); then
        echo "kafka.sh: already running (pid $pid, bootstrap 127.0.0.1:$(running_port))"
        return 0
    fi
    command -v java >/dev/null || die "java not found (apt-get install openjdk-17-jre-headless)"
    command -v kcat >/dev/null || die "kcat not found (apt-get install kcat)"
    rm -f "$pid_file"
    mkdir -p "$run_dir" "$logs"
    local p
    for p in "$port" "$cport"; do
        if port_busy "$p"; then
            die "port $p on 127.0.0.1 is already in use (set SAGAD_LOCAL_KAFKA_PORT / SAGAD_LOCAL_KAFKA_CONTROLLER_PORT)"
        fi
    done
    ensure_libs
    write_config
    format_storage

    # Keep the previous run's log aside so the readiness grep below cannot
    # match an old "Kafka Server started" line.
    if [[ -f $logs/server.log ]]; then mv -f "$logs/server.log" "$logs/server.log.1"; fi
    t0=$SECONDS
    # setsid: own session, so a Ctrl-C or a CI step's process-group kill aimed
    # at the caller does not take the broker down. 9>&-: not holding our lock.
    setsid java -Xms512m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true \
        -Dkafka.logs.dir="$logs" -Dlog4j.configuration="file:$log4j" \
        -cp "$libs/*" kafka.Kafka "$props" \
        </dev/null >"$logs/kafka.out" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$pid_file"

    deadline=$((SECONDS + start_timeout))
    until ready; do
        if ! alive "$pid"; then
            rm -f "$pid_file"
            log_tail "$logs/kafka.out" "$logs/server.log"
            die "broker exited during startup"
        fi
        if ((SECONDS >= deadline)); then
            log_tail "$logs/kafka.out" "$logs/server.log"
            die "broker not ready on 127.0.0.1:$port after ${start_timeout}s (pid $pid left running; use stop)"
        fi
        sleep 0.5
    done
    echo "kafka.sh: started (pid $pid, bootstrap 127.0.0.1:$port, ready in $((SECONDS - t0))s)"
}

do_stop() {
    local pid deadline
    if ! pid=$(broker_pid); then
        rm -f "$pid_file"
        echo "kafka.sh: not running"
        return 0
    fi
    # SIGTERM = controlled shutdown: logs flushed, clean shutdown marker
    # written, so the next start skips log recovery.
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + stop_timeout))
    while alive "$pid"; do
        if ((SECONDS >= deadline)); then
            echo "kafka.sh: broker pid $pid ignored SIGTERM for ${stop_timeout}s; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
            sleep 1
            ! alive "$pid" || die "broker pid $pid survived SIGKILL"
            break
        fi
        sleep 0.2
    done
    rm -f "$pid_file"
    echo "kafka.sh: stopped"
}

do_status() {
    local pid
    if pid=$(broker_pid); then
        echo "running (pid $pid, bootstrap 127.0.0.1:$(running_port))"
    else
        echo "stopped"
        exit 3
    fi
}

do_bootstrap() {
    local p=$port
    # A running broker's own port wins over the environment's.
    if broker_pid >/dev/null; then p=$(running_port); fi
    echo "127.0.0.1:$p"
}

case "$cmd" in
    start) local_lock "$run_dir/kafka.lock" 300; do_start ;;
    stop) local_lock "$run_dir/kafka.lock" 300; do_stop ;;
    status) do_status ;;
    bootstrap) do_bootstrap ;;
esac
