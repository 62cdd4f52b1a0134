# shellcheck shell=bash
# Sourced by tests/run.sh and tests/bench/run.sh: bring the private
# PostgreSQL, Kafka and Jaeger (the trace backend of the tracing tests and
# benchmark) up if they are not running, export their addresses, and on
# exit stop only what was started here.
sagad_started_pg=0
sagad_started_kafka=0
sagad_started_jaeger=0
sagad_started_kafka_acl=0

# The second broker of the integration tests: SASL/SCRAM with ACLs
# (deploy/local/kafka.sh with SAGAD_LOCAL_KAFKA_AUTH=scram), for
# tests/integration/test_acl.c.  Its own directory and ports (39292/39293,
# or SAGAD_TEST_KAFKA_ACL_PORT and SAGAD_TEST_KAFKA_ACL_CONTROLLER_PORT).
sagad_acl_dir=$PWD/.run/test/kafka-acl
sagad_acl_kafka() {
    SAGAD_LOCAL_KAFKA_DIR=$sagad_acl_dir \
        SAGAD_LOCAL_KAFKA_PORT=${SAGAD_TEST_KAFKA_ACL_PORT:-39292} \
        SAGAD_LOCAL_KAFKA_CONTROLLER_PORT=${SAGAD_TEST_KAFKA_ACL_CONTROLLER_PORT:-39293} \
        SAGAD_LOCAL_KAFKA_AUTH=scram deploy/local/kafka.sh "$@"
}

sagad_services_cleanup() {
    local rc=$?
    if [ $sagad_started_jaeger = 1 ]; then deploy/local/jaeger.sh stop || rc=1; fi
    if [ $sagad_started_kafka_acl = 1 ]; then sagad_acl_kafka stop || rc=1; fi
    if [ $sagad_started_kafka = 1 ]; then deploy/local/kafka.sh stop || rc=1; fi
    if [ $sagad_started_pg = 1 ]; then deploy/local/pg.sh stop || rc=1; fi
    exit $rc
}

sagad_services_up() {
    trap sagad_services_cleanup EXIT
    if ! deploy/local/pg.sh status >/dev/null 2>&1; then
        sagad_started_pg=1
        deploy/local/pg.sh start
    fi
    if ! deploy/local/kafka.sh status >/dev/null 2>&1; then
        sagad_started_kafka=1
        deploy/local/kafka.sh start
    fi
    # Built from the Go module proxy on first use (deploy/local/jaeger.sh).
    if ! deploy/local/jaeger.sh status >/dev/null 2>&1; then
        sagad_started_jaeger=1
        deploy/local/jaeger.sh start
    fi
    SAGAD_TEST_JAEGER_OTLP=$(deploy/local/jaeger.sh otlp)
    SAGAD_TEST_JAEGER_QUERY=$(deploy/local/jaeger.sh query)
    export SAGAD_TEST_JAEGER_OTLP SAGAD_TEST_JAEGER_QUERY
    SAGAD_TEST_PG_URL=$(deploy/local/pg.sh url)
    SAGAD_TEST_PG_URL_RUNTIME=$(deploy/local/pg.sh url-runtime)
    SAGAD_TEST_PG_URL_OPERATOR=$(deploy/local/pg.sh url-operator)
    SAGAD_TEST_PG_URL_READER=$(deploy/local/pg.sh url-reader)
    SAGAD_TEST_PG_URL_STRANGER=$(deploy/local/pg.sh url-stranger)
    SAGAD_TEST_PG_URL_RELAY=$(deploy/local/pg.sh url-relay)
    SAGAD_TEST_KAFKA=$(deploy/local/kafka.sh bootstrap)
    export SAGAD_TEST_PG_URL SAGAD_TEST_PG_URL_RUNTIME SAGAD_TEST_PG_URL_OPERATOR \
        SAGAD_TEST_PG_URL_READER SAGAD_TEST_PG_URL_STRANGER SAGAD_TEST_PG_URL_RELAY SAGAD_TEST_KAFKA
}

# Brings the SASL/ACL broker up (after sagad_services_up, whose exit trap
# stops it again if started here) with data wiped when it starts, and
# exports SAGAD_TEST_KAFKA_ACL: a directory with each principal's client
# config, PRINCIPAL.properties, as `kafka.sh client-config` prints it.
sagad_acl_kafka_up() {
    local p clients=$sagad_acl_dir/clients
    if ! sagad_acl_kafka status >/dev/null 2>&1; then
        rm -rf "$sagad_acl_dir/data" "$sagad_acl_dir/logs"
        sagad_started_kafka_acl=1
        sagad_acl_kafka start
    fi
    mkdir -p "$clients"
    for p in admin worker relay producer operator keda gateway; do
        sagad_acl_kafka client-config "$p" > "$clients/$p.properties"
    done
    SAGAD_TEST_KAFKA_ACL=$clients
    export SAGAD_TEST_KAFKA_ACL
}
