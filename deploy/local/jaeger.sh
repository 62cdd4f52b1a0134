#!/usr/bin/env bash
# Private Jaeger all-in-one (v2) for the tracing tests and benchmark of sagad.
#
#   deploy/local/jaeger.sh install|start|stop|status|otlp|query
#
# install builds github.com/jaegertracing/jaeger/cmd/jaeger (JAEGER_VERSION,
# default v1.76.0) from the Go module proxy in a throwaway module and keeps
# the binary under ${SAGAD_LOCAL_JAEGER_DIR:-<repo>/.run/jaeger}/bin; start
# installs it when missing. Traces are kept in memory only. It listens on
# 127.0.0.1 only: OTLP/HTTP on ${SAGAD_LOCAL_JAEGER_OTLP_PORT:-46318} (what
# `otlp` prints, the value of otel.endpoint) and the query API on
# ${SAGAD_LOCAL_JAEGER_QUERY_PORT:-46686} (what `query` prints). Start and
# stop are idempotent; the pid is in <dir>/jaeger.pid.
set -euo pipefail

script_dir=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
# shellcheck source=deploy/local/common.sh
. "$script_dir/common.sh"
local_init jaeger.sh "install|start|stop|status|otlp|query" "$@"
repo=$(realpath "$script_dir/../..")

dir=$(realpath -m -- "${SAGAD_LOCAL_JAEGER_DIR:-$repo/.run/jaeger}")
otlp_port=${SAGAD_LOCAL_JAEGER_OTLP_PORT:-46318}
query_port=${SAGAD_LOCAL_JAEGER_QUERY_PORT:-46686}
local_check_port SAGAD_LOCAL_JAEGER_OTLP_PORT "$otlp_port"
local_check_port SAGAD_LOCAL_JAEGER_QUERY_PORT "$query_port"
version=${JAEGER_VERSION:-v1.76.0}
bin="$dir/bin/jaeger-$version"
pid_file="$dir/jaeger.pid"
log_file="$dir/jaeger.log"
start_timeout=60

do_install() {
    [[ -x $bin ]] && return 0
    command -v go >/dev/null || die "go is needed to build Jaeger (https://go.dev/dl/)"
    local mod="$dir/build"
    rm -rf "$mod"
    mkdir -p "$mod" "$dir/bin"
    echo "jaeger.sh: building jaeger $version from the Go module proxy (a few minutes, once)" >&2
    (
        cd "$mod"
        go mod init sagad.local/jaeger-tool >/dev/null 2>&1
        go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$version"
        go build -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
    ) || die "building jaeger $version failed"
    mv "$bin.tmp" "$bin"
    rm -rf "$mod"
}

# The configuration of Jaeger v2 (an OpenTelemetry Collector): an OTLP/HTTP
# receiver, the in-memory store and the query service, each on 127.0.0.1.
write_config() {
    cat >"$dir/config.yaml" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:$query_port
    grpc:
      endpoint: 127.0.0.1:0
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$otlp_port
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
EOF
}

running_pid() {
    local pid
    [[ -f $pid_file ]] || return 1
    pid=$(cat "$pid_file")
    alive "$pid" || return 1
    echo "$pid"
}

do_start() {
    local pid
    if pid=$(running_pid); then
        echo "jaeger.sh: already running (pid $pid, otlp 127.0.0.1:$otlp_port)"
        return 0
    fi
    do_install
    write_config
    rm -f "$pid_file"
    # 9>&-: the start/stop lock must not live on in the server, or the next
    # stop would wait for it until the server exits.
    setsid "$bin" --config "file:$dir/config.yaml" >"$log_file" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$pid_file"
    local t0=$SECONDS
    until curl -fsS -o /dev/null "http://127.0.0.1:$query_port/api/services" 2>/dev/null; do
        alive "$pid" || { rm -f "$pid_file"; tail -20 "$log_file" >&2; die "jaeger exited at start"; }
        ((SECONDS - t0 < start_timeout)) || die "jaeger not ready after ${start_timeout}s (pid $pid left running; use stop)"
        sleep 0.2
    done
    echo "jaeger.sh: started (pid $pid, otlp http://127.0.0.1:$otlp_port, query http://127.0.0.1:$query_port)"
}

do_stop() {
    local pid t0=$SECONDS
    if ! pid=$(running_pid); then
        rm -f "$pid_file"
        echo "jaeger.sh: not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid"; do
        if ((SECONDS - t0 > 20)); then
            kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.1
    done
    rm -f "$pid_file"
    echo "jaeger.sh: stopped (pid $pid)"
}

case $cmd in
    install) local_lock "$dir.lock" 900; do_install ;;
    start) local_lock "$dir.lock" 900; do_start ;;
    stop) local_lock "$dir.lock" 60; do_stop ;;
    status)
        if pid=$(running_pid); then echo "running (pid $pid, otlp 127.0.0.1:$otlp_port, query 127.0.0.1:$query_port)"; else echo "not running"; exit 1; fi ;;
    otlp) echo "http://127.0.0.1:$otlp_port" ;;
    query) echo "http://127.0.0.1:$query_port" ;;
esac
