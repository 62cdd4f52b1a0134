# Sourced by tests/run.sh and tests/bench/run.sh: bring the private
# PostgreSQL, Kafka and Jaeger (the trace backend of the tracing tests and
# benchmark) up if they are not running, export their addresses, and on
# exit stop only what was started here.
sagad_started_pg=0
sagad_started_kafka=0
sagad_started_jaeger=0

sagad_services_cleanup() {
    local rc=$?
    if [ $sagad_started_jaeger = 1 ]; then deploy/local/jaeger.sh stop || rc=1; fi
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
    SAGAD_TEST_KAFKA=$(deploy/local/kafka.sh bootstrap)
    export SAGAD_TEST_PG_URL SAGAD_TEST_PG_URL_RUNTIME SAGAD_TEST_PG_URL_OPERATOR \
        SAGAD_TEST_PG_URL_READER SAGAD_TEST_PG_URL_STRANGER SAGAD_TEST_KAFKA
}
