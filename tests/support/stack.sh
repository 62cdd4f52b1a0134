# shellcheck shell=bash disable=SC2034,SC2154 # variables shared with the script that sources it
# A stack of its own for a suite that drives sagad from outside
# (tests/api/run.sh, tests/console/run.sh): sourced after `cd` to the
# repository, with `stack` set to the suite's name (it prefixes every
# message and the work directory).
#
#   stack_venv DIR REQS WHAT
#                           $py: the python of a venv at DIR with the pins
#                           of REQS, made again when REQS changed (WHAT
#                           names what it installs, for the message)
#   stack_begin             work directory ($work), clean-up at exit
#                           (every program stopped by pid, newest first;
#                           the database dropped; services this started
#                           stopped; logs kept when the suite failed)
#   stack_services          SAGAD_TEST_PG_URL*, SAGAD_TEST_KAFKA from the
#                           environment (tests/run.sh), else deploy/local's
#                           PostgreSQL and Kafka, started if needed
#   stack_database          a database of its own, unique names: $unique,
#                           $db, $dsn (owner: migrate), $rt_dsn (runtime:
#                           worker, relay), $op_dsn (operator: gateway)
#   stack_keyring BINDIR PY the gateway's delegate key ($work/gateway.key)
#                           and a keyring naming it ($work/keyring.json)
#   stack_users BINDIR PY PREFIX USER:ROLE[,ROLE]...
#                           a users file ($work/users.json), a new token
#                           each, exported as PREFIX_USER (upper case)
#   stack_start NAME ENV... -- PROGRAM ARGS...
#                           a program with ${common[@]} and ENV, stderr
#                           to $work/NAME.log, stopped at exit
#   stack_add PID NAME      a program to stop at exit ($work/NAME.log its log)
#   failed=0                the suite passed (set it last)
#
# A program that does not exit 0 on SIGTERM, or whose log holds a
# sanitizer's report (an ASan build's BINDIR), fails the suite.

stack_venv() { # DIR REQS WHAT
    local dir=$1 reqs=$2
    if ! cmp -s "$reqs" "$dir/.sagad-requirements" 2>/dev/null; then
        command -v python3 >/dev/null || { echo "$stack: python3 is needed (make deps)" >&2; exit 2; }
        echo "$stack: installing $3 into $dir"
        rm -rf "$dir"
        python3 -m venv "$dir" ||
            { echo "$stack: python3 -m venv failed: python3-venv is missing (make deps)" >&2; exit 2; }
        "$dir/bin/pip" install -q --disable-pip-version-check -r "$reqs"
        cp "$reqs" "$dir/.sagad-requirements"
    fi
    py=$dir/bin/python
}

stack_begin() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/sagad-$stack-XXXXXX")
    pids=()
    names=()
    db=
    started_pg=0
    started_kafka=0
    failed=1
    trap stack_cleanup EXIT
    trap 'exit 130' INT TERM
}

stack_add() { # PID NAME
    pids+=("$1")
    names+=("$2")
}

stack_stop_pid() { # PID NAME: SIGTERM, then SIGKILL after 20 s; the exit code
    local pid=$1 i rc=0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "$stack: $2 (pid $pid) still running 20 s after SIGTERM: killed" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || rc=$?
    return $rc
}

# Stops every program, newest first; fails when one did not exit 0 on
# SIGTERM or its log holds a sanitizer's report.
stack_stop_all() {
    local i rc=0 code
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        code=0
        stack_stop_pid "${pids[$i]}" "${names[$i]}" || code=$?
        if [ $code != 0 ]; then
            echo "$stack: ${names[$i]} exited $code on SIGTERM" >&2
            rc=1
        fi
        if grep -q 'ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:' \
            "$work/${names[$i]}.log" 2>/dev/null; then
            echo "$stack: ${names[$i]}: a sanitizer report in $work/${names[$i]}.log" >&2
            rc=1
        fi
    done
    pids=()
    return $rc
}

stack_cleanup() {
    local rc=$? n
    trap - EXIT INT TERM
    stack_stop_all || true
    if [ "$failed" = 1 ]; then
        for n in "${names[@]}"; do
            echo "---- $stack: the last lines of $n's log ($work/$n.log)" >&2
            tail -n 40 "$work/$n.log" >&2 || true
        done
    fi
    if [ -n "$db" ]; then
        psql -X -q "$SAGAD_TEST_PG_URL" -v ON_ERROR_STOP=1 \
            -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '$db' AND usename = current_user" \
            -c "DROP DATABASE IF EXISTS $db" >/dev/null || rc=1
    fi
    if [ "$started_kafka" = 1 ]; then deploy/local/kafka.sh stop || rc=1; fi
    if [ "$started_pg" = 1 ]; then deploy/local/pg.sh stop || rc=1; fi
    if [ "$failed" = 0 ]; then rm -rf "$work"; else echo "$stack: logs kept in $work" >&2; fi
    [ $rc != 0 ] || [ "$failed" = 0 ] || rc=1
    exit $rc
}

stack_services() {
    if [ -z "${SAGAD_TEST_PG_URL:-}" ]; then
        if ! deploy/local/pg.sh status >/dev/null 2>&1; then
            started_pg=1
            deploy/local/pg.sh start
        fi
        SAGAD_TEST_PG_URL=$(deploy/local/pg.sh url)
        SAGAD_TEST_PG_URL_RUNTIME=$(deploy/local/pg.sh url-runtime)
        SAGAD_TEST_PG_URL_OPERATOR=$(deploy/local/pg.sh url-operator)
    fi
    if [ -z "${SAGAD_TEST_KAFKA:-}" ]; then
        if ! deploy/local/kafka.sh status >/dev/null 2>&1; then
            started_kafka=1
            deploy/local/kafka.sh start
        fi
        SAGAD_TEST_KAFKA=$(deploy/local/kafka.sh bootstrap)
    fi
}

# The owner's DSN for migrate; each program then logs in as production's
# role for it: worker and relay the runtime role, the gateway the operator.
stack_database() {
    unique=${stack}_$$_$(date +%s)
    db=sgt_$unique
    psql -X -q "$SAGAD_TEST_PG_URL" -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" >/dev/null
    dsn=${SAGAD_TEST_PG_URL%/*}/$db
    rt_dsn=${SAGAD_TEST_PG_URL_RUNTIME%%@*}@${dsn#*@}
    op_dsn=${SAGAD_TEST_PG_URL_OPERATOR%%@*}@${dsn#*@}
}

stack_keyring() { # BINDIR PY
    local pub
    pub=$("$1/sagactl" keys new --principal gateway --out "$work/gateway.key" --json |
        "$2" -c 'import json, sys; print(json.load(sys.stdin)["public_key"])')
    printf '{"v": 1, "principals": {"gateway": {"keys": {"k1": "%s"}, "roles": ["submit", "approve", "cancel", "delegate"]}}}\n' \
        "$pub" > "$work/keyring.json"
}

# The programs ignore SAGAD_TEST_* variables: the tokens reach the
# suite's Python through them.
stack_users() { # BINDIR PY PREFIX USER:ROLE[,ROLE]...
    local bindir=$1 py=$2 prefix=$3 spec u r tok token hash users_json='{"v": 1, "users": {' sep=
    shift 3
    for spec in "$@"; do
        u=${spec%%:*}
        r=${spec#*:}
        tok=$("$bindir/sagad-gateway" token new --user "$u" --json)
        token=$("$py" -c 'import json, sys; print(json.load(sys.stdin)["token"])' <<<"$tok")
        hash=$("$py" -c 'import json, sys; print(json.load(sys.stdin)["hash"])' <<<"$tok")
        export "${prefix}_${u^^}=$token"
        users_json+="$sep\"$u\": {\"roles\": [\"${r//,/\", \"}\"], \"tokens\": [\"$hash\"]}"
        sep=', '
    done
    echo "$users_json}}" > "$work/users.json"
}

stack_start() { # NAME ENV... -- PROGRAM ARGS...
    local name=$1 e=()
    shift
    while [ "$1" != -- ]; do e+=("$1"); shift; done
    shift
    env "${common[@]}" "${e[@]}" "$@" 2> "$work/$name.log" > /dev/null &
    stack_add $! "$name"
}
