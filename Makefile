# osf — `make` builds everything (installing missing Debian packages first),
# `make test` runs every test, `make bench` prints the benchmark table.

SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
CC ?= gcc
BUILD := build
BIN := $(BUILD)/bin

# Debian packages: to build (rdma-core for the verbs transport), and the
# real programs the tests and benchmarks run.
BUILD_DEBS := gcc make libc6-dev libibverbs-dev librdmacm-dev rdma-core \
	ibverbs-utils iproute2 util-linux
TEST_DEBS := curl python3 strace iperf3 redis-server redis-tools nginx-light wrk \
	memcached socat ncat hyperfine sockperf procps psmisc coreutils bash \
	file binutils
DEBS := $(BUILD_DEBS) $(TEST_DEBS)

CFLAGS := -O2 -g -Wall -Wextra -Werror -std=gnu11 -D_GNU_SOURCE \
	-U_FORTIFY_SOURCE -fno-strict-aliasing -pthread
LIB_CFLAGS := $(CFLAGS) -fPIC -fvisibility=hidden

LIB_SRCS := $(wildcard preload/*.c) fdtable/fdtable.c internal/routec/route.c $(wildcard selectmux/*.c) \
	$(wildcard sdp/*.c)
LIB_HDRS := $(wildcard preload/*.h) $(wildcard fdtable/*.h) $(wildcard sdp/*.h) \
	$(wildcard selectmux/*.h) include/osf/qsock.h
GO_SRCS := go.mod $(shell find . -name '*.go' -not -path './build/*') \
	$(wildcard */*.h */*/*.h)
# asyncpreemptoff: no SIGURG; updatemaxprocs/containermaxprocs: the runtime
# keeps no cgroup files open in the program's fd space.
# -w: no DWARF; the library is copied into a memfd by every fork child
# that needs the core, so its size is start-up time (the symbol table
# stays: sigpatch and crash traces need it).
CORE_LDFLAGS := -w -X=runtime.godebugDefault=asyncpreemptoff=1,updatemaxprocs=0,containermaxprocs=0 \
	-extldflags=-Wl,--version-script=$(CURDIR)/preload/core/core.map
TEST_PROGS := $(patsubst tests/progs/%.c,$(BUILD)/tests/%,$(wildcard tests/progs/*.c))

.PHONY: all deps build test unit integration bench clean fmt
all: deps build

# deps installs the Debian packages that are missing (root, or sudo).
deps:
	@missing=$$(for p in $(DEBS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $$missing >/dev/null; \
	fi
	@command -v $(GO) >/dev/null || { echo "Go 1.26 is required (https://go.dev/dl)"; exit 1; }

build: $(BUILD)/libosf.so $(BUILD)/libosfcore.so $(BIN)/osfrun $(BIN)/osfstat \
	$(BIN)/osfperf $(TEST_PROGS)

$(BUILD)/libosf.so: $(LIB_SRCS) $(LIB_HDRS) preload/libosf.map
	@mkdir -p $(BUILD)
	$(CC) $(LIB_CFLAGS) -shared -Wl,--version-script=preload/libosf.map \
		-Wl,-z,now -Wl,-soname,libosf.so -o $@ $(LIB_SRCS) -ldl

$(BUILD)/libosfcore.so: $(GO_SRCS) preload/core/core.map
	@mkdir -p $(BUILD)
	$(GO) build -buildmode=c-shared -trimpath -ldflags='$(CORE_LDFLAGS)' \
		-o $@.tmp ./preload/core
	$(GO) run ./preload/core/sigpatch $@.tmp
	@mv $@.tmp $@ && rm -f $(BUILD)/libosfcore.tmp.h $(BUILD)/libosfcore.h

$(BIN)/osfrun: $(GO_SRCS)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -o $@ ./cmd/osfrun

$(BIN)/osfstat: $(GO_SRCS)
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $@ ./cmd/osfstat

$(BIN)/osfperf: cmd/osfperf/osfperf.c
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) -o $@ $< -lm

$(BUILD)/tests/%: tests/progs/%.c include/osf/qsock.h
	@mkdir -p $(BUILD)/tests
	$(CC) $(CFLAGS) -Iinclude -o $@ $< -lm -ldl

# test runs everything: gofmt and vet, the unit tests, then the integration
# tests (tests/, which move themselves into a fresh network namespace).
test: build
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './build/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted" >&2; exit 1; fi
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

unit: build
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /tests)

integration: build
	$(GO) test -count=1 -timeout 20m -v ./tests/

bench: build
	tests/bench/run.sh

fmt:
	gofmt -w $$(find . -name '*.go' -not -path './build/*')

clean:
	rm -rf $(BUILD)
