#!/usr/bin/env bash
# Single-node Apache Kafka 3.9.1 (KRaft, combined broker+controller) for local
# runs, tests and benchmarks of sagad.
#
#   deploy/local/kafka.sh start|stop|status|bootstrap
#   deploy/local/kafka.sh client-config PRINCIPAL
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
#
# SAGAD_LOCAL_KAFKA_AUTH=scram makes a broker with authentication and ACLs,
# as production runs it (docs/OPERATIONS.md, "Kafka principals"): the
# client listener takes SASL_PLAINTEXT with SCRAM-SHA-512 only, KRaft's
# StandardAuthorizer refuses what no ACL allows, and one SCRAM user per
# component (worker, relay, producer, operator, keda, and the super user
# admin) is written into the metadata when the storage is formatted.  On
# first start it creates the topics and grants each principal its ACLs.
# Unset (or "none"), the broker is PLAINTEXT and open, as before.  A data
# directory formatted in one mode refuses to start in the other.
# `client-config PRINCIPAL` prints that principal's librdkafka properties
# (key=value lines; kcat -F reads them, sagad takes them as kafka.KEY).
set -euo pipefail

script_dir=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
# shellcheck source=deploy/local/common.sh
. "$script_dir/common.sh"
# client-config takes the principal as a second word; local_init checks
# the verb alone.
principal=
if [[ ${1:-} == client-config && $# -eq 2 ]]; then
    principal=$2
    set -- "$1"
fi
local_init kafka.sh "start|stop|status|bootstrap|client-config" "$@"
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

auth=${SAGAD_LOCAL_KAFKA_AUTH:-none}
case "$auth" in
    none | scram) ;;
    *)
        echo "kafka.sh: SAGAD_LOCAL_KAFKA_AUTH must be none or scram, got '$auth'" >&2
        exit 2
        ;;
esac
auth_marker="$data/sagad-auth"
# The principals of the scram broker.  Their passwords are fixed, like
# pg.sh's roles': the broker binds 127.0.0.1 only, and tests and scripts
# must know them without reading a file of the broker's.
principals="admin worker relay producer operator keda gateway"
scram_mechanism=SCRAM-SHA-512
# The topics of sagad's default config; sagad.internal (topic.internal)
# carries sagad's own commands, published by the relay (only it may write
# it).
topic_commands=sagad.commands
topic_internal=sagad.internal
topic_events=sagad.events
topic_dlq=sagad.dlq
topic_checkpoints=sagad.relay.checkpoints # relay.checkpoint_topic (relay.exactly_once)
worker_group=sagad-worker
gateway_events_group=sagad-gateway-events # gateway/gw_events.c

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

# Port of the client listener the running broker was started with.
running_port() {
    local p
    p=$(sed -n 's/^advertised\.listeners=[A-Z_]*:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$props" 2>/dev/null)
    echo "${p:-$port}"
}

# The password of a principal of the scram broker; exits 2 for a name
# that is not one.
password_of() {
    [[ " $principals " == *" $1 "* ]] ||
        { echo "kafka.sh: no principal '$1' (one of: $principals)" >&2; exit 2; }
    echo "$1-local-pw"
}

# The librdkafka properties of principal $2 on this broker at port $1, one
# key=value a line (kcat -F reads them).
client_props() {
    echo "bootstrap.servers=127.0.0.1:$1"
    [[ $auth == scram ]] || return 0
    echo "security.protocol=SASL_PLAINTEXT"
    echo "sasl.mechanisms=$scram_mechanism"
    echo "sasl.username=$2"
    echo "sasl.password=$(password_of "$2")"
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

# The listeners, and with auth=scram the SASL and authorizer settings.
listener_config() {
    local admin_pw
    if [[ $auth == none ]]; then
        cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
        return 0
    fi
    admin_pw=$(password_of admin)
    # The controller listener authenticates too (no anonymous super user):
    # with PLAIN, since SCRAM credentials live in the metadata log that the
    # controller serves, and KRaft does not take SCRAM there.  The broker
    # half of this node logs in to both listeners as admin.
    cat <<EOF
listeners=SASL_PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
listener.name.sasl_plaintext.sasl.enabled.mechanisms=$scram_mechanism
sasl.mechanism.inter.broker.protocol=$scram_mechanism
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
listener.name.controller.sasl.enabled.mechanisms=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin_pw" user_admin="$admin_pw";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false
EOF
}

write_config() {
    # Rewritten on every start so port changes apply; the data dir keeps the
    # cluster id, so this is safe for an already formatted node.
    cat >"$props" <<EOF
# Managed by deploy/local/kafka.sh; rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
$(listener_config)
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
    # StorageTool's --add-scram (KIP-900) writes each principal's SCRAM
    # credential into the metadata, there before any client connects.
    echo "kafka.sh: formatting KRaft storage in $data (auth $auth)"
    mkdir -p "$data"
    id=$(java_cmd -Xmx256m kafka.tools.StorageTool random-uuid 2>>"$logs/format.log") ||
        { log_tail "$logs/format.log"; die "StorageTool random-uuid failed"; }
    local scram=() p
    if [[ $auth == scram ]]; then
        for p in $principals; do
            scram+=(--add-scram "$scram_mechanism=[name=$p,password=$(password_of "$p")]")
        done
    fi
    java_cmd -Xmx256m kafka.tools.StorageTool format -t "$id" -c "$props" "${scram[@]}" \
        >>"$logs/format.log" 2>&1 ||
        { log_tail "$logs/format.log"; die "StorageTool format failed"; }
    echo "$auth" >"$auth_marker"
}

# A data directory keeps the mode it was formatted in (its SCRAM users, or
# none); one made before the marker existed is a broker without auth.
check_auth_mode() {
    local had=none
    [[ -f $data/meta.properties ]] || return 0
    [[ -f $auth_marker ]] && had=$(<"$auth_marker")
    [[ $had == "$auth" ]] ||
        die "$data was formatted with SAGAD_LOCAL_KAFKA_AUTH=$had, not $auth: start it so, or stop it and remove $data"
}

# kcat as principal $1 (ignored without auth) on our port.
kcat_as() {
    local who=$1 conf
    shift
    conf=$(client_props "$port" "$who")
    kcat -F <(echo "$conf") "$@"
}

# kafka-acls.sh: the AclCommand of the broker's jar, as admin.
acls() {
    java_cmd -Xmx128m -XX:TieredStopAtLevel=1 kafka.admin.AclCommand \
        --bootstrap-server "127.0.0.1:$port" --command-config "$run_dir/admin.properties" "$@" \
        >>"$logs/setup.log" 2>&1 ||
        { log_tail "$logs/setup.log"; die "kafka-acls $* failed"; }
}

# The scram broker's topics and ACLs, once per formatted data directory
# (both live in the metadata log).  Each principal gets what its component
# does, and no more (docs/OPERATIONS.md, "Kafka principals"):
#   worker    reads commands and internal in its group; never produces
#             (topics are created by admin, here or with sagad-worker topics)
#   relay     writes the four topics (idempotent: Write implies it)
#   producer  writes commands only; reads events in groups app.* and
#             sagactl-* (sagactl submit --wait)
#   operator  reads dlq and events in groups sagactl-* and dlq-tool-*
#   keda      describes the worker group and its two topics (lag)
#   gateway   writes commands (submissions and signed controls); reads
#             events (its event streams, assigned, group sagad-gateway-events)
# A data directory formatted before the gateway principal existed has no
# SCRAM credential for it: stop the broker and remove its data to get one.
setup_scram() {
    # -4: the exactly-once relay's grants; a broker set up by -1 to -3 gets
    # the grants again (adding an ACL that is there already changes nothing).
    local done_marker=$data/sagad-acls-4 t
    [[ $auth == scram && ! -f $done_marker ]] || return 0
    echo "kafka.sh: creating topics and granting ACLs"
    local admin_pw
    admin_pw=$(password_of admin)
    cat >"$run_dir/admin.properties" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=$scram_mechanism
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
EOF
    # The assembled broker has no kafka-topics (kafka-tools is not among
    # its jars): admin's metadata request for a missing topic creates it
    # with the broker's defaults, as only a principal allowed Create can.
    for t in "$topic_commands" "$topic_internal" "$topic_events" "$topic_dlq" "$topic_checkpoints"; do
        kcat_as admin -L -t "$t" -X allow.auto.create.topics=true -m 10 >/dev/null 2>>"$logs/setup.log" ||
            die "cannot create topic $t"
    done
    acls --add --allow-principal User:worker --operation Read --operation Describe \
        --topic "$topic_commands" --topic "$topic_internal" --group "$worker_group"
    acls --add --allow-principal User:relay --operation Write --operation Describe \
        --topic "$topic_commands" --topic "$topic_internal" --topic "$topic_events" --topic "$topic_dlq"
    # relay.exactly_once: its transactional ids, its checkpoints (written
    # in its transactions, read back when it takes the slot, through a
    # group librdkafka looks up the coordinator of)
    acls --add --allow-principal User:relay --operation Write --operation Describe \
        --resource-pattern-type prefixed --transactional-id sagad-relay.
    acls --add --allow-principal User:relay --operation Read --operation Write --operation Describe \
        --topic "$topic_checkpoints"
    acls --add --allow-principal User:relay --operation Read --group sagad-relay-checkpoints
    acls --add --allow-principal User:producer --operation Write --operation Describe \
        --topic "$topic_commands"
    acls --add --allow-principal User:producer --operation Read --operation Describe \
        --topic "$topic_events"
    acls --add --allow-principal User:producer --operation Read \
        --resource-pattern-type prefixed --group app. --group sagactl-
    acls --add --allow-principal User:operator --operation Read --operation Describe \
        --topic "$topic_dlq" --topic "$topic_events"
    acls --add --allow-principal User:operator --operation Read \
        --resource-pattern-type prefixed --group sagactl- --group dlq-tool-
    acls --add --allow-principal User:keda --operation Describe \
        --topic "$topic_commands" --topic "$topic_internal" --group "$worker_group"
    acls --add --allow-principal User:gateway --operation Write --operation Describe \
        --topic "$topic_commands"
    acls --add --allow-principal User:gateway --operation Read --operation Describe \
        --topic "$topic_events"
    acls --add --allow-principal User:gateway --operation Read --group "$gateway_events_group"
    touch "$done_marker"
}

port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Ready = the broker announced itself AND a real client gets metadata back
# listing it, so callers can produce right away.
ready() {
    local meta
    grep -q 'Kafka Server started' "$logs/server.log" 2>/dev/null || return 1
    meta=$(kcat_as admin -L -m 5 2>/dev/null) || return 1
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
    check_auth_mode
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
    setup_scram
    echo "kafka.sh: started (pid $pid, bootstrap 127.0.0.1:$port, auth $auth, ready in $((SECONDS - t0))s)"
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

# The librdkafka properties of a principal; without auth only the
# bootstrap (every principal is anonymous there).
do_client_config() {
    local p=$port
    [[ -n $principal ]] || { echo "usage: kafka.sh client-config PRINCIPAL" >&2; exit 2; }
    password_of "$principal" >/dev/null
    # A formatted broker answers in the mode it was made in, whatever the
    # environment says now.
    [[ -f $auth_marker ]] && auth=$(<"$auth_marker")
    if broker_pid >/dev/null; then p=$(running_port); fi
    client_props "$p" "$principal"
}

case "$cmd" in
    start) local_lock "$run_dir/kafka.lock" 300; do_start ;;
    stop) local_lock "$run_dir/kafka.lock" 300; do_stop ;;
    status) do_status ;;
    bootstrap) do_bootstrap ;;
    client-config) do_client_config ;;
esac
