# sagad: one non-recursive Makefile.  `make help` lists the targets.
#
# Objects go under $(BUILD) (build/ by default; build/asan for the
# sanitizer build), programs under $(BINDIR).

CC       ?= gcc
BUILD    ?= build
BINDIR   ?= bin
SAN      ?=
PKGS     := libpq libcjson libcurl libmicrohttpd libcrypto
TEST_PKGS := criterion

# librdkafka is built from its release source and linked statically
# (deploy/build-librdkafka.sh says why Debian's 2.0.2 will not do).  It
# lives outside build/, so `make clean` keeps it; rm -rf .deps rebuilds it.
RDKAFKA_DIR   ?= .deps/librdkafka
RDKAFKA_STAMP := $(RDKAFKA_DIR)/version
RDKAFKA_LIBS   = $(RDKAFKA_DIR)/lib/librdkafka.a $(shell cat $(RDKAFKA_DIR)/libs 2>/dev/null)

PKG_CFLAGS := -isystem $(RDKAFKA_DIR)/include $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
TEST_CFLAGS := $(shell pkg-config --cflags $(TEST_PKGS) 2>/dev/null)
TEST_LIBS   := $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral -Wno-format-truncation
CFLAGS   ?= -O2 -g
ifeq ($(SAN),1)
CFLAGS   := -O1 -g -fno-omit-frame-pointer
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
endif
ALL_CFLAGS = -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L $(WARN) $(CFLAGS) $(SANFLAGS) \
             -Ilib/include $(PKG_CFLAGS) -MMD -MP
LDLIBS_ALL = $(RDKAFKA_LIBS) $(PKG_LIBS) -lm -lpthread

# lib/: infra/ (memory, text, JSON, logs, config, PostgreSQL, Kafka, HTTP,
# metrics, traces), contract/ (the submission contract: messages, args
# schemas, the tool registry, references), cli/ (the command lines'
# helpers), ops/ (migrations, retention); public headers in lib/include/sagad/.
LIB_SRCS := $(wildcard lib/*/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/gen/sg_migrations.o $(BUILD)/gen/sg_error_codes.o
LIBSAGAD := $(BUILD)/libsagad.a
MIGRATIONS := $(sort $(wildcard schemas/sql/*.sql))

# The binaries the container image ships (deploy/Dockerfile), then the
# example service the tests and the demo use.
SAGAD_PROGS := $(BINDIR)/sagad-worker $(BINDIR)/sagad-relay $(BINDIR)/dlq-tool $(BINDIR)/sagactl \
               $(BINDIR)/sagad-gateway
PROGS := $(SAGAD_PROGS) $(BINDIR)/checkout-svc
# worker/: main.c and worker.h, then its parts (docs/ARCHITECTURE.md, "Layout"):
# loop/ (consume, queue, transact, chain, run), decide/ (the pure decision),
# apply/ (the decision's effects into PostgreSQL, traces), tools/ (the pool
# and the adapters).
WORKER_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard worker/*.c worker/*/*.c))
RELAY_OBJS  := $(patsubst %.c,$(BUILD)/%.o,$(wildcard outbox/*.c))
DLQ_OBJS    := $(patsubst %.c,$(BUILD)/%.o,$(wildcard dlq-tool/*.c))
CTL_OBJS    := $(patsubst %.c,$(BUILD)/%.o,$(wildcard ctl/*.c))
GW_OBJS     := $(patsubst %.c,$(BUILD)/%.o,$(wildcard gateway/*.c))
# The example downstream service of the tests, the demo and the benchmark.
CHECKOUT_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard examples/checkout/*.c))
MHD_CFLAGS := $(shell pkg-config --cflags libmicrohttpd 2>/dev/null)
MHD_LIBS   := $(shell pkg-config --libs libmicrohttpd 2>/dev/null)

UNIT_SRCS := $(wildcard tests/unit/*.c)
INT_SRCS  := $(wildcard tests/integration/*.c)
UNIT_TEST := $(BUILD)/tests/unit-tests
INT_TEST  := $(BUILD)/tests/integration-tests
TEST_HELPER_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/support/*.c))

# Debian packages the build needs (also all the image's builder stage
# installs, deploy/Dockerfile: make deps-build; g++ only because
# librdkafka's configure insists on a C++ compiler), then those the tests
# and the local services need.
BUILD_DEB_PKGS := gcc g++ make pkg-config curl ca-certificates libssl-dev zlib1g-dev libzstd-dev \
                  libpq-dev libcjson-dev libcurl4-openssl-dev libmicrohttpd-dev
DEB_PKGS := $(BUILD_DEB_PKGS) procps libcriterion-dev postgresql openjdk-17-jre-headless maven \
            kcat clang-format python3-jsonschema python3-venv gdb clang-14 libclang-rt-14-dev zsh \
            chromium

# The entry targets (below) install the packages before they build.
ENTRY_GOALS := demo test bench soak up test-unit test-integration test-asan test-faults fuzz test-api

# A build without its packages stops here, naming the Debian packages and
# what to type, not later with a compiler's "cJSON.h: No such file".  The
# pkg-config modules the build reads, each with the package that has it
# (librdkafka's own build needs openssl, zlib and libzstd); criterion only
# for the test binaries.  Checked only when a goal builds something.
BUILD_PC_DEBS := libpq:libpq-dev libcjson:libcjson-dev libcurl:libcurl4-openssl-dev \
                 libmicrohttpd:libmicrohttpd-dev openssl:libssl-dev zlib:zlib1g-dev libzstd:libzstd-dev
TEST_PC_DEBS  := criterion:libcriterion-dev
NO_BUILD_GOALS := help deps deps-build down demo-stop clean format format-check schemas-check
ifneq ($(DEPS_DONE),1)
NO_BUILD_GOALS += $(ENTRY_GOALS)
endif
BUILD_GOALS := $(filter-out $(NO_BUILD_GOALS),$(or $(MAKECMDGOALS),all))
ifneq ($(BUILD_GOALS),)
CHECK_PC_DEBS := $(BUILD_PC_DEBS) $(if $(filter test% tests %-tests,$(BUILD_GOALS)),$(TEST_PC_DEBS))
PKG_MISSING := $(shell command -v pkg-config >/dev/null || echo pkg-config; \
                 for m in $(CHECK_PC_DEBS); do pkg-config --exists $${m%%:*} 2>/dev/null || echo $${m#*:}; done)
ifneq ($(strip $(PKG_MISSING)),)
$(error missing Debian packages: $(strip $(PKG_MISSING)). Run 'make deps' (as root, or with sudo) to install them, or begin with 'make demo' or 'make test', which install them first)
endif
endif


.PHONY: docs docs-check bench soak schemas-check structure-check image-check k8s-check fuzz fuzz-build
.PHONY: all help deps deps-build up down demo demo-stop test test-unit test-integration test-asan test-faults test-api tests \
        format format-check clean

all: $(LIBSAGAD) $(PROGS)

help:
	@echo "make            build build/libsagad.a and bin/{sagad-worker,sagad-relay,dlq-tool,sagactl,sagad-gateway,checkout-svc}"
	@echo "make deps       install the Debian packages needed (no-op when present; demo, test, bench, up and test-* run it first)"
	@echo "make up / down  start / stop the private PostgreSQL and Kafka under .run/"
	@echo "make demo       services, checkout-svc, relay and worker up; the example sagas run end to end (retried, compensated, approved, cancelled, malformed)"
	@echo "make demo-stop  stop the demo's checkout-svc, relay and worker"
	@echo "make test       unit + integration tests, then again under ASan/UBSan, the docs, schema, image and k8s checks, then the fault suite"
	@echo "make test-asan  only the sanitizer run"
	@echo "make test-faults  relay under broker and PostgreSQL restarts (private services)"
	@echo "make test-api   the gateway's API against schemas/openapi.yaml (Schemathesis; make test runs it too)"
	@echo "make fuzz       each libFuzzer target for FUZZ_SECONDS (default 180): executions/s and findings"
	@echo "make bench      relay, worker, http-tool, dlq-tool, sagactl and gateway figures beside their raw floors"
	@echo "make soak       sagas at a steady rate with horizons of minutes for SOAK_SECONDS (default 1200): table sizes, RSS, p99 each minute"
	@echo "make format-check  check .clang-format conformance"
	@echo "make schemas-check schemas/, their fixtures and the error-code registry vs the C sources"
	@echo "make structure-check  no call or include cycle among the C files, no program including another's, private headers kept private, the saga decision pure"
	@echo "make docs       regenerate docs/CONFIGURATION.md, deploy/sagad.sample.conf, docs/METRICS.md, docs/STATES.md,"
	@echo "                and each program's man page (docs/man) and bash/zsh completions (docs/completion)"
	@echo "make image-check  deploy/Dockerfile's runtime packages cover what the binaries load"
	@echo "make k8s-check  render deploy/k8s and validate it offline (schemas, config, probes, security)"

# Every object depends on the librdkafka build: its header, and a new
# version rebuilds everything.
$(RDKAFKA_STAMP): deploy/build-librdkafka.sh
	deploy/build-librdkafka.sh $(RDKAFKA_DIR)
	touch $@

$(BUILD)/%.o: %.c $(RDKAFKA_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(EXTRA_CFLAGS) -c -o $@ $<

# The names of the migrations, rewritten only when they change: a removed
# or renamed migration touches no file that is left, yet the embedded list
# must be built again without it.  Checked whenever the embedded list is
# (FORCE); make sees its time unchanged when nothing was rewritten.
MIGRATIONS_LIST := $(BUILD)/gen/migrations.list
$(MIGRATIONS_LIST): FORCE
	@mkdir -p $(dir $@)
	@echo '$(MIGRATIONS)' | cmp -s - $@ || echo '$(MIGRATIONS)' > $@
.PHONY: FORCE
FORCE:

$(BUILD)/gen/sg_migrations.c: $(MIGRATIONS) $(MIGRATIONS_LIST) schemas/embed-sql.sh
	@mkdir -p $(dir $@)
	sh schemas/embed-sql.sh $@ $(MIGRATIONS)

$(BUILD)/gen/sg_migrations.o: $(BUILD)/gen/sg_migrations.c $(RDKAFKA_STAMP)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The error-code registry, for the default agent_action of each code
# (lib/infra/sg_err_action.c).
$(BUILD)/gen/sg_error_codes.c: schemas/error_codes.json schemas/embed-json.sh
	@mkdir -p $(dir $@)
	sh schemas/embed-json.sh $@ sg_error_codes_json schemas/error_codes.json

$(BUILD)/gen/sg_error_codes.o: $(BUILD)/gen/sg_error_codes.c $(RDKAFKA_STAMP)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The JSON Schemas sagad-gateway's MCP server offers as resources
# (gateway/gw_mcp_resources.c): what a saga is, what an event is.
GW_GEN_OBJS := $(BUILD)/gen/gw_schema_saga_start.o $(BUILD)/gen/gw_schema_event.o
$(BUILD)/gen/gw_schema_saga_start.c: schemas/saga-start.schema.json schemas/embed-json.sh
	@mkdir -p $(dir $@)
	sh schemas/embed-json.sh $@ gw_schema_saga_start schemas/saga-start.schema.json

$(BUILD)/gen/gw_schema_event.c: schemas/event.schema.json schemas/embed-json.sh
	@mkdir -p $(dir $@)
	sh schemas/embed-json.sh $@ gw_schema_event schemas/event.schema.json

$(BUILD)/gen/gw_schema_%.o: $(BUILD)/gen/gw_schema_%.c $(RDKAFKA_STAMP)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The operator console (console/, docs/CONSOLE.md): its files built into
# sagad-gateway (gateway/gw_console.c serves them), so the binary needs no
# file at run time.  The list of names is rewritten only when it changes,
# as the migrations' is: a removed file must leave the binary too.
CONSOLE_FILES := $(sort $(wildcard console/*.html console/assets/*))
CONSOLE_LIST  := $(BUILD)/gen/console.list
GW_GEN_OBJS   += $(BUILD)/gen/gw_console_files.o
$(CONSOLE_LIST): FORCE
	@mkdir -p $(dir $@)
	@echo '$(CONSOLE_FILES)' | cmp -s - $@ || echo '$(CONSOLE_FILES)' > $@

$(BUILD)/gen/gw_console_files.c: $(CONSOLE_FILES) $(CONSOLE_LIST) console/embed.sh
	@mkdir -p $(dir $@)
	sh console/embed.sh $@ $(CONSOLE_FILES)

$(BUILD)/gen/gw_console_files.o: $(BUILD)/gen/gw_console_files.c $(RDKAFKA_STAMP)
	$(CC) $(ALL_CFLAGS) -Igateway -c -o $@ $<

$(LIBSAGAD): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BINDIR)/sagad-worker: $(WORKER_OBJS) $(LIBSAGAD)
$(BINDIR)/sagad-relay: $(RELAY_OBJS) $(LIBSAGAD)
# dlq-tool checks edited submissions with the worker's own rules, which
# live in lib/ (sg_submit, sg_registry): it links no adapter of the worker.
$(BINDIR)/dlq-tool: $(DLQ_OBJS) $(LIBSAGAD)
# sagactl, like dlq-tool, checks with lib/'s rules and links no worker code.
$(BINDIR)/sagactl: $(CTL_OBJS) $(LIBSAGAD)
# sagad-gateway, like sagactl, checks submissions with lib/'s rules; it
# speaks HTTP through lib/'s sg_http (libmicrohttpd).
$(BINDIR)/sagad-gateway: $(GW_OBJS) $(GW_GEN_OBJS) $(LIBSAGAD)
$(BINDIR)/checkout-svc: $(CHECKOUT_OBJS) $(LIBSAGAD)
$(CHECKOUT_OBJS): EXTRA_CFLAGS := $(MHD_CFLAGS)
$(BINDIR)/checkout-svc: EXTRA_LIBS := $(MHD_LIBS)
$(PROGS):
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) -o $@ $^ $(EXTRA_LIBS) $(LDLIBS_ALL)

# Criterion runners: one binary per kind, linking the real library.
$(BUILD)/tests/%.o: tests/%.c $(RDKAFKA_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TEST_CFLAGS) -c -o $@ $<

# Unit tests link the worker's and the gateway's modules too (not their mains).
$(UNIT_TEST): $(UNIT_SRCS:%.c=$(BUILD)/%.o) $(TEST_HELPER_OBJS) $(filter-out %/main.o,$(WORKER_OBJS)) \
              $(filter-out %/main.o,$(GW_OBJS)) $(GW_GEN_OBJS) $(LIBSAGAD)
	$(CC) $(CFLAGS) $(SANFLAGS) -o $@ $^ $(TEST_LIBS) $(LDLIBS_ALL)

# Integration tests link them too: they run the worker's statements.
$(INT_TEST): $(INT_SRCS:%.c=$(BUILD)/%.o) $(TEST_HELPER_OBJS) $(filter-out %/main.o,$(WORKER_OBJS)) $(LIBSAGAD)
	$(CC) $(CFLAGS) $(SANFLAGS) -o $@ $^ $(TEST_LIBS) $(LDLIBS_ALL)

tests: all $(UNIT_TEST) $(INT_TEST)

# sagad-model: a bounded model checker over the saga decision
# (tests/model/README.md), linked like the unit tests.  tests/run.sh runs
# it bounded after the unit tests; check-model explores deeper (minutes).
MODEL_CHECK := $(BUILD)/tests/model-check
MODEL_KNOWN := tests/model/known-failing.txt
$(MODEL_CHECK): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/model/*.c)) $(filter-out %/main.o,$(WORKER_OBJS)) $(LIBSAGAD)
	$(CC) $(CFLAGS) $(SANFLAGS) -o $@ $^ $(LDLIBS_ALL)
tests: $(MODEL_CHECK)

check-model: $(MODEL_CHECK)
	$(MODEL_CHECK) --check-cases tests/model/cases --known $(MODEL_KNOWN)
	$(MODEL_CHECK) --depth 24 --max-seconds 300 --redeliveries 2 --known $(MODEL_KNOWN)
.PHONY: check-model

BENCH_RELAY := $(BUILD)/bench/bench-relay

$(BUILD)/bench/%.o: tests/bench/%.c $(RDKAFKA_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

BENCH_WORKER := $(BUILD)/bench/bench-worker
BENCH_DLQ := $(BUILD)/bench/bench-dlq
BENCH_CTL := $(BUILD)/bench/bench-ctl

$(BENCH_RELAY): $(BUILD)/bench/bench_relay.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

# The worker's SQL floor runs the worker's own load statement.
$(BENCH_WORKER): $(BUILD)/bench/bench_worker.o $(BUILD)/bench/bench_util.o $(filter-out %/main.o,$(WORKER_OBJS)) $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BENCH_DLQ): $(BUILD)/bench/bench_dlq.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BENCH_CTL): $(BUILD)/bench/bench_ctl.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

BENCH_HTTP := $(BUILD)/bench/bench-http
BENCH_FLOOD := $(BUILD)/bench/bench-flood

$(BENCH_FLOOD): $(BUILD)/bench/bench_flood.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

BENCH_SOAK := $(BUILD)/bench/bench-soak
BENCH_SIGN := $(BUILD)/bench/bench-sign

$(BENCH_SIGN): $(BUILD)/bench/bench_sign.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BENCH_SOAK): $(BUILD)/bench/bench_soak.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

$(BENCH_HTTP): $(BUILD)/bench/bench_http.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

# sagad-gateway's API beside Kafka, libpq and LISTEN/NOTIFY floors; its
# clients are libcurl easy handles, one keep-alive connection each.
BENCH_GATEWAY := $(BUILD)/bench/bench-gateway

$(BENCH_GATEWAY): $(BUILD)/bench/bench_gateway.o $(BUILD)/bench/bench_util.o $(LIBSAGAD)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_ALL)

# The trace backend of the tracing tests and benchmark is not one of them:
# tests/services.sh builds it from the Go module proxy when it first starts
# it (deploy/local/jaeger.sh; needs go), so `make demo` does not need go.
deps:
	deploy/deps.sh $(DEB_PKGS)

deps-build:
	deploy/deps.sh $(BUILD_DEB_PKGS)

down:
	examples/demo.sh stop
	deploy/local/kafka.sh stop
	deploy/local/pg.sh stop
	deploy/local/jaeger.sh stop

# The entry targets (ENTRY_GOALS): what a person types first.  Each
# installs the Debian packages (make deps), then runs itself again in a
# make of its own with DEPS_DONE=1 (not a SAGAD_ name: make exports it to
# the recipes, and the binaries refuse SAGAD_ variables they do not know):
# that make parses this file afresh,
# so the pkg-config flags above are read after the packages are there (a
# make that installs and builds in one parse compiles with empty flags).

ifneq ($(DEPS_DONE),1)
$(ENTRY_GOALS): deps
	@$(MAKE) --no-print-directory DEPS_DONE=1 $@
else
demo: all
	examples/demo.sh

up:
	deploy/local/pg.sh start
	deploy/local/kafka.sh start

# test: the format and generated-docs checks, unit tests, integration tests
# against the local services (started if needed and stopped again only if
# this run started them), then the same tests built with AddressSanitizer
# and UBSan, then the fault suite, then each fuzz target for 60 s.
test: tests format-check structure-check docs-check schemas-check image-check k8s-check
	$(MAKE) --no-print-directory BUILD=build/asan BINDIR=build/asan/bin SAN=1 tests
	tests/run.sh $(BUILD) build/asan
	tests/faults/run.sh
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=60

test-unit: tests
	$(UNIT_TEST)

test-integration: tests
	tests/run.sh --only-integration $(BUILD)

test-asan:
	$(MAKE) --no-print-directory BUILD=build/asan BINDIR=build/asan/bin SAN=1 tests
	tests/run.sh build/asan

# test-faults: stops and starts a broker and a database under a running
# relay, so it runs serially on its own private Kafka and PostgreSQL.
test-faults: all
	tests/faults/run.sh

# test-api: sagad-gateway against its contract, schemas/openapi.yaml
# (tests/api/run.sh: a stack of its own, Schemathesis and a few hand-written
# checks); tests/run.sh runs it after the integration tests, so make test
# does.  Starts the local PostgreSQL and Kafka when tests/run.sh has not.
test-api: all
	tests/api/run.sh $(BINDIR)

# bench: throughput and latency beside the raw floors (not a test).
bench: all $(BENCH_RELAY) $(BENCH_WORKER) $(BENCH_HTTP) $(BENCH_DLQ) $(BENCH_FLOOD) $(BENCH_CTL) $(BENCH_SIGN) \
       $(BENCH_GATEWAY)
	tests/bench/run.sh

# soak: the tables plateau under a steady load with short horizons
# (SOAK_SECONDS, default 1200; not part of make test).
soak: all $(BENCH_SOAK)
	tests/bench/soak.sh

fuzz: fuzz-build
	tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_DIR) $(FUZZ_TARGETS)
endif

demo-stop:
	examples/demo.sh stop

# fuzz: libFuzzer targets (clang, with ASan and UBSan) for every decoder a
# producer or a downstream reaches: command messages and saga.start
# validation, the tool registry, args schemas, a tool's answer, the
# signature headers and the keyring (fuzz_auth), how an HTTP answer is
# classified, what sagad-gateway decodes from a client (fuzz_gateway:
# routes, submissions, the users file) and its MCP server's JSON-RPC
# (fuzz_mcp: a message, its era and method, the answer) and what the WAL
# relay decodes from its replication stream (fuzz_wal: CopyData, pgoutput,
# the outbox frame, sg_walmsg.c).  Each runs
# FUZZ_SECONDS (default 180) from its committed seeds (tests/fuzz/run.sh);
# make test runs them 60 s each.
FUZZ_CC      ?= clang-14
FUZZ_SECONDS ?= 180
FUZZ_DIR     := build/fuzz
FUZZ_TARGETS := submit registry schema result http ref auth gateway mcp wal
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS   = -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -g -O1 $(FUZZ_SAN) \
                -Ilib/include $(PKG_CFLAGS) -MMD -MP
FUZZ_LIB_OBJS := $(LIB_SRCS:%.c=$(FUZZ_DIR)/%.o) $(FUZZ_DIR)/worker/tools/worker_call.o \
                 $(FUZZ_DIR)/worker/tools/worker_http_answer.o \
                 $(patsubst %.c,$(FUZZ_DIR)/%.o,$(filter-out gateway/main.c,$(wildcard gateway/*.c))) \
                 $(FUZZ_DIR)/gen/sg_error_codes.o $(FUZZ_DIR)/gen/sg_migrations.o \
                 $(FUZZ_DIR)/gen/gw_schema_saga_start.o $(FUZZ_DIR)/gen/gw_schema_event.o \
                 $(FUZZ_DIR)/gen/gw_console_files.o
$(FUZZ_DIR)/gen/gw_console_files.o: FUZZ_CFLAGS += -Igateway

$(FUZZ_DIR)/%.o: %.c $(RDKAFKA_STAMP)
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz: $(FUZZ_CC) not found: make deps installs clang-14 and libclang-rt-14-dev" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_DIR)/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_DIR)/libfuzzsagad.a: $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_DIR)/libfuzzsagad.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_DIR)/libfuzzsagad.a $(LDLIBS_ALL)

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)

# The config reference, the sample config file and the metrics reference
# are generated from the config table and the metrics catalog; docs-check
# fails when a committed copy is stale, or when a relative link in a
# Markdown file points to no file or no heading.
GEN_DOCS := docs/CONFIGURATION.md:--config-reference deploy/sagad.sample.conf:--config-sample \
            docs/METRICS.md:--metrics-reference docs/STATES.md:states

# Each shipped program's man page and bash and zsh completions come from
# its command table, as its --help does (PROG --man, PROG --completion
# SHELL); tests/docs/cli_docs.py checks the three say the same.
CLI_PROGS := sagactl dlq-tool sagad-worker sagad-relay sagad-gateway
CLI_DOCS = $(foreach p,$(CLI_PROGS),docs/man/$(p).1:$(p):--man \
             docs/completion/$(p).bash:$(p):--completion:bash docs/completion/_$(p):$(p):--completion:zsh)

docs: $(SAGAD_PROGS)
	@for d in $(GEN_DOCS); do \
	  $(BINDIR)/sagad-worker $${d#*:} > $${d%%:*} && echo "wrote $${d%%:*}" || exit 1; \
	done
	@mkdir -p docs/man docs/completion
	@for d in $(CLI_DOCS); do \
	  f=$${d%%:*}; a=$${d#*:}; \
	  $(BINDIR)/$$(echo $$a | tr ':' ' ') > $$f && echo "wrote $$f" || exit 1; \
	done

docs-check: $(SAGAD_PROGS)
	@for d in $(GEN_DOCS); do \
	  $(BINDIR)/sagad-worker $${d#*:} | diff -u $${d%%:*} - \
	    || { echo "$${d%%:*} is stale: run make docs"; exit 1; }; \
	done
	@for d in $(CLI_DOCS); do \
	  f=$${d%%:*}; a=$${d#*:}; \
	  $(BINDIR)/$$(echo $$a | tr ':' ' ') | diff -u $$f - >/dev/null \
	    || { echo "$$f is stale: run make docs"; exit 1; }; \
	done
	$(CHECK_PYTHON) tests/docs/cli_docs.py $(BINDIR) $(CLI_PROGS)
	$(CHECK_PYTHON) tests/docs/links.py

# The checks run Debian's python3 where there is one: python3-jsonschema
# (make deps) is installed for it, not for a pyenv python3 ahead on PATH.
CHECK_PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)

# structure-check: no call cycle among the C files (read from the built
# objects with nm), no include cycle, no program including another's files,
# no private header (worker/loop/worker_loop_int.h) included outside its files;
# the saga decision's files call nothing that does I/O (pure.py).
structure-check: all
	$(CHECK_PYTHON) tests/structure/check.py $(BUILD)
	$(CHECK_PYTHON) tests/structure/pure.py $(BUILD)

# The JSON contracts, checked by an independent validator (Python
# jsonschema): schemas, fixtures, and every error code in the C sources
# registered in schemas/error_codes.json.
schemas-check:
	$(CHECK_PYTHON) tests/schemas/check.py

# image-check: deploy/Dockerfile's runtime packages cover every library the
# built binaries load (ldd + dpkg -S), without a container engine.
image-check: all
	tests/deploy/run.sh $(BINDIR)

# k8s-check: render deploy/k8s with kustomize and validate it offline (API
# schemas, config keys, probes, grace period, security context); installs
# its pinned tools into build/tools and tests/k8s/node_modules first.
k8s-check: all
	tests/k8s/run.sh $(BINDIR)

FORMAT_SRCS = $(shell git ls-files '*.c' '*.h' 2>/dev/null)

format:
	clang-format -i $(FORMAT_SRCS)

format-check:
	@command -v clang-format >/dev/null || { echo "format-check: clang-format not found: 'make deps' installs it" >&2; exit 1; }
	clang-format --dry-run -Werror $(FORMAT_SRCS)

clean:
	rm -rf build bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
