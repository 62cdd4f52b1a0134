#!/usr/bin/env bash
# Private PostgreSQL 15 cluster for local runs, tests and benchmarks of sagad.
#
#   deploy/local/pg.sh start|stop|status|url|url-runtime|url-operator|url-reader|url-stranger|url-relay
#
# The cluster lives under ${SAGAD_LOCAL_PG_DIR:-<repo>/.run/pg} (or, when the
# postgres user cannot reach that directory, under /var/tmp/sagad-pg-<hash>
# with the directory's path a symlink to it). It listens on
# 127.0.0.1:${SAGAD_LOCAL_PG_PORT:-54329} only and keeps fsync and
# synchronous_commit on, because sagad's numbers must be for the durable case.
#
# A second, private cluster (tests/faults/run.sh stops and starts its own) is
# one with its own directory and port; pass both variables to every command
# of that instance:
#   SAGAD_LOCAL_PG_DIR=.run/faults/pg SAGAD_LOCAL_PG_PORT=54339 deploy/local/pg.sh start
set -euo pipefail

script_dir=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
# shellcheck source=deploy/local/common.sh
. "$script_dir/common.sh"
local_init pg.sh "start|stop|status|url|url-runtime|url-operator|url-reader|url-stranger|url-relay" "$@"
repo=$(realpath "$script_dir/../..")
# link: where the cluster directory (or the symlink to it) is; run_dir: its
# parent, which holds the start/stop lock <name>.lock. Made absolute before
# the cd below, so a relative SAGAD_LOCAL_PG_DIR works from any cwd; -s
# keeps a symlink to the /var/tmp fallback a symlink.
if [[ -n ${SAGAD_LOCAL_PG_DIR:-} ]]; then
    link=$(realpath -ms -- "$SAGAD_LOCAL_PG_DIR")
    run_dir=$(dirname "$link")
    hash_key=$link
else
    run_dir="$repo/.run"
    link="$run_dir/pg"
    hash_key=$repo
fi
lock_file="$run_dir/${link##*/}.lock"

port=${SAGAD_LOCAL_PG_PORT:-54329}
local_check_port SAGAD_LOCAL_PG_PORT "$port"
pg_bin=${SAGAD_PG_BIN:-/usr/lib/postgresql/15/bin}
start_timeout=60

# Every path below is absolute; leaving the caller's cwd avoids "could not
# change directory" noise when postgres cannot enter it (700 CI clones).
cd /

# PostgreSQL refuses to run as root, so root drops to the postgres user; any
# other user (including postgres itself) owns and runs the cluster directly.
if ((EUID == 0)); then
    owner=postgres
    as_owner=(runuser -u postgres --)
else
    owner=$(id -un)
    as_owner=()
fi

# Short, stable id per checkout (per directory for a private cluster) so two
# clones or two instances never share a fallback cluster.
dir_hash() {
    printf '%s' "$hash_key" | sha256sum | cut -c1-10
}

fallback_dir() {
    echo "/var/tmp/sagad-pg-$(dir_hash)"
}

# Resolve (without creating anything) where the cluster directory is.
existing_cluster() {
    if [[ -L $link ]]; then
        realpath -m "$link"
    elif [[ -d $link ]]; then
        realpath "$link"
    else
        return 1
    fi
}

make_owned_dir() {
    local dir=$1
    mkdir -p "$dir"
    if ((EUID == 0)); then chown "$owner:" "$dir"; fi
    chmod 700 "$dir"
}

# Find or create the cluster directory; prints its real path.
ensure_cluster() {
    local dir fb
    mkdir -p "$run_dir"
    fb=$(fallback_dir)
    if [[ -L $link ]]; then
        dir=$(realpath -m "$link")
        # A copied checkout may carry a symlink to another checkout's cluster.
        if [[ $dir != "$fb" ]]; then
            rm -f "$link"
            ln -s "$fb" "$link"
            dir=$fb
        fi
        [[ -d $dir ]] || make_owned_dir "$dir"
    elif [[ -d $link ]]; then
        dir=$(realpath "$link")
    else
        dir=$link
        # The owner must traverse every parent of the cluster, and the socket
        # path must fit in sun_path (107 bytes); otherwise live in /var/tmp.
        if ! "${as_owner[@]}" test -x "$run_dir" ||
            ((${#dir} + ${#port} + 12 > 100)); then
            dir=$fb
            make_owned_dir "$dir"
            ln -s "$dir" "$link"
        else
            make_owned_dir "$dir"
        fi
    fi
    "${as_owner[@]}" test -w "$dir" ||
        die "cluster dir $dir is not writable by $owner; remove $link and retry"
    echo "$dir"
}

# postmaster.pid line 1 = pid, line 4 = port (see PostgreSQL's pidfile.h).
pidfile_field() {
    local file=$1 line=$2
    sed -n "${line}p" "$file" 2>/dev/null | tr -d '[:space:]'
}

# Prints "pid port" of a live postmaster for this cluster, or fails.
running_postmaster() {
    local dir pidf pid pport
    dir=$(existing_cluster) || return 1
    pidf="$dir/data/postmaster.pid"
    [[ -f $pidf ]] || return 1
    pid=$(pidfile_field "$pidf" 1)
    pport=$(pidfile_field "$pidf" 4)
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    alive "$pid" || return 1
    # Guard against a stale pid file whose pid was reused by something else.
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == postgres ]] || return 1
    echo "$pid $pport"
}

write_config() {
    local dir=$1 data="$1/data"
    # Rewritten on every start so a changed port takes effect; postgresql.conf
    # only includes it (appended once by init_cluster).
    "${as_owner[@]}" tee "$data/sagad-local.conf" >/dev/null <<EOF
# Managed by deploy/local/pg.sh; rewritten on every start.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
shared_buffers = 128MB
# Durability stays on: sagad's benchmarks measure the durable case.
fsync = on
synchronous_commit = on
full_page_writes = on
# Checkpoints by time, not by WAL volume: with the default max_wal_size
# (1GB) the benchmarks' write bursts checkpointed every 26 s, and a
# checkpoint's full-page images in the WAL slow every commit after it.
# Any write-heavy install raises it the same way.
max_wal_size = 4GB
checkpoint_timeout = 15min
# The WAL relay (relay.source = wal, docs/RELAY.md) decodes the outbox's
# messages from the WAL through a logical replication slot.
wal_level = logical
max_wal_senders = 20
max_replication_slots = 20
password_encryption = 'scram-sha-256'
log_line_prefix = '%m [%p] %q%u@%d '
EOF
    "${as_owner[@]}" tee "$data/pg_hba.conf" >/dev/null <<'EOF'
# Managed by deploy/local/pg.sh: trust only the private unix socket, passwords
# for TCP, and TCP only from loopback.
local   all   all                  trust
host    all   all   127.0.0.1/32   scram-sha-256
EOF
}

init_cluster() {
    local dir=$1
    echo "pg.sh: initdb in $dir/data"
    # C collation with UTF8 encoding: deterministic and independent of which
    # locales the machine happens to have generated.
    "${as_owner[@]}" "$pg_bin/initdb" -D "$dir/data" -U postgres -E UTF8 \
        --locale=C --auth-local=trust --auth-host=scram-sha-256 \
        >"$dir/initdb.log" 2>&1 || {
        tail -n 20 "$dir/initdb.log" >&2
        die "initdb failed (log: $dir/initdb.log)"
    }
    echo "include 'sagad-local.conf'" | "${as_owner[@]}" tee -a "$dir/data/postgresql.conf" >/dev/null
}

# Idempotent: safe on every start, and repairs a half-finished first start.
bootstrap_roles() {
    local dir=$1 psql
    psql=("${as_owner[@]}" "$pg_bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres)
    "${psql[@]}" -d postgres <<'EOF' >/dev/null
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad') THEN
    CREATE ROLE sagad LOGIN CREATEDB;
  END IF;
  -- Set on every start: clusters made before the password changed (it was
  -- 'sagad', which the log masking then hid inside every topic name,
  -- "****.commands") get the current one.
  ALTER ROLE sagad PASSWORD 'sagad-local-pw';
  -- The roles of production (schemas/sql/0013_roles.sql, docs/OPERATIONS.md
  -- "Database roles"): sagad above owns the schema and runs migrate;
  -- sagad_app (worker, relay), sagad_op (dlq-tool) and sagad_ro (sagactl's
  -- reads, dashboards) log in as members of the group roles the migrations
  -- grant to; sagad_stranger is a login of none of them (the tests check
  -- what a foreign login of the database cannot do).
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_runtime') THEN
    CREATE ROLE sagad_runtime NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_operator') THEN
    CREATE ROLE sagad_operator NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_reader') THEN
    CREATE ROLE sagad_reader NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_app') THEN
    CREATE ROLE sagad_app LOGIN IN ROLE sagad_runtime;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_op') THEN
    CREATE ROLE sagad_op LOGIN IN ROLE sagad_operator;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_ro') THEN
    CREATE ROLE sagad_ro LOGIN IN ROLE sagad_reader;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_stranger') THEN
    CREATE ROLE sagad_stranger LOGIN;
  END IF;
  -- The WAL relay's login: the runtime role's rights, and REPLICATION for
  -- its slot (the worker's login has no REPLICATION).  pg_hba.conf has no
  -- `replication` line, so it may stream logical decoding of its database
  -- and never the physical WAL of the cluster.
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_relay') THEN
    CREATE ROLE sagad_relay LOGIN REPLICATION IN ROLE sagad_runtime;
  END IF;
  ALTER ROLE sagad_relay PASSWORD 'relay-local-pw';
  ALTER ROLE sagad_app PASSWORD 'app-local-pw';
  ALTER ROLE sagad_op PASSWORD 'op-local-pw';
  ALTER ROLE sagad_ro PASSWORD 'ro-local-pw';
  ALTER ROLE sagad_stranger PASSWORD 'stranger-local-pw';
END
$$;
EOF
    # Only sagad's owner may write a logical decoding message: with the
    # stock EXECUTE for PUBLIC, any login could write one the WAL relay
    # would sign and publish (schemas/sql/0026_wal_outbox.sql; the relay
    # refuses to start until this is done).  In template1 first, so every
    # database made later (the tests' own) inherits it.
    local emit_acl="REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, bytea),
        pg_logical_emit_message(boolean, text, text) FROM PUBLIC;
      GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, bytea),
        pg_logical_emit_message(boolean, text, text) TO sagad;"
    "${psql[@]}" -d template1 -c "$emit_acl" >/dev/null
    # CREATE DATABASE cannot run inside DO, so test first.
    if [[ $("${psql[@]}" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'sagad'") != 1 ]]; then
        "${psql[@]}" -d postgres -c 'CREATE DATABASE sagad OWNER sagad'
    fi
    "${psql[@]}" -d sagad -c "$emit_acl" >/dev/null
}

log_tail() {
    local log=$1
    if [[ -f $log ]]; then
        echo "--- last lines of $log ---" >&2
        tail -n 30 "$log" >&2
    fi
}

do_start() {
    local dir data log running deadline
    if running=$(running_postmaster); then
        echo "pg.sh: already running (pid ${running% *}, port ${running#* })"
        [[ ${running#* } == "$port" ]] ||
            echo "pg.sh: warning: running on port ${running#* }, not SAGAD_LOCAL_PG_PORT=$port" >&2
        return 0
    fi
    # Fail fast with a clear message rather than a postmaster log complaint.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port on 127.0.0.1 is already in use (set SAGAD_LOCAL_PG_PORT)"
    fi

    dir=$(ensure_cluster)
    data="$dir/data"
    log="$dir/postgres.log"
    [[ -f $data/PG_VERSION ]] || init_cluster "$dir"
    write_config "$dir"

    # pg_ctl -w notices a postmaster that dies during startup (bad config,
    # shared memory) instead of letting us poll a corpse for the whole timeout.
    deadline=$((SECONDS + start_timeout))
    # 9>&-: the postmaster must not inherit our lock fd, or it would hold
    # the lock for its whole life and block every later start/stop.
    "${as_owner[@]}" "$pg_bin/pg_ctl" start -w -t "$start_timeout" -D "$data" -l "$log" -s 9>&- ||
        { log_tail "$log"; die "pg_ctl start failed"; }
    # Ready means the TCP listener sagad uses answers, not just the pid file.
    until "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do
        if ((SECONDS >= deadline)); then
            log_tail "$log"
            die "server not ready on 127.0.0.1:$port after ${start_timeout}s"
        fi
        sleep 0.2
    done
    bootstrap_roles "$dir"
    running=$(running_postmaster) || die "server answered but postmaster.pid is unreadable"
    echo "pg.sh: started (pid ${running% *}, port $port, data $data)"
}

do_stop() {
    local dir data running pid deadline
    if ! running=$(running_postmaster); then
        echo "pg.sh: not running"
        return 0
    fi
    pid=${running% *}
    dir=$(existing_cluster)
    data="$dir/data"
    # fast = roll back sessions and checkpoint; no crash recovery next start.
    "${as_owner[@]}" "$pg_bin/pg_ctl" stop -D "$data" -m fast -w -t 60 -s ||
        echo "pg.sh: pg_ctl stop reported failure; checking the process" >&2
    # pg_ctl returns when postmaster.pid is gone; make sure the process is too.
    deadline=$((SECONDS + 10))
    while alive "$pid"; do
        ((SECONDS < deadline)) || die "postmaster pid $pid is still alive after stop"
        sleep 0.2
    done
    echo "pg.sh: stopped"
}

do_status() {
    local running
    if running=$(running_postmaster); then
        echo "running (pid ${running% *}, port ${running#* })"
    else
        echo "stopped"
        exit 3
    fi
}

# url: the owner (migrate, and the tests' own setup); url-runtime: the
# worker's and relay's role; url-operator: dlq-tool's; url-reader: the
# read-only role's (sagactl list/status/show, dashboards); url-stranger: a
# login of no sagad role; url-relay: the WAL relay's (runtime + REPLICATION).
do_url() {
    local running p=$port user=$1
    # A running cluster's own port wins over the environment's.
    if running=$(running_postmaster); then p=${running#* }; fi
    echo "postgresql://$user@127.0.0.1:$p/sagad"
}

case "$cmd" in
    start) local_lock "$lock_file" 120; do_start ;;
    stop) local_lock "$lock_file" 120; do_stop ;;
    status) do_status ;;
    url) do_url sagad:sagad-local-pw ;;
    url-runtime) do_url sagad_app:app-local-pw ;;
    url-operator) do_url sagad_op:op-local-pw ;;
    url-reader) do_url sagad_ro:ro-local-pw ;;
    url-stranger) do_url sagad_stranger:stranger-local-pw ;;
    url-relay) do_url sagad_relay:relay-local-pw ;;
esac
