# Sluice: `make run` starts a node on the embedded default with demo data,
# `make test` runs every test. Only Go is needed.
GO      ?= go
# Execution counts, not durations: a duration -fuzztime can fail spuriously with
# "context deadline exceeded" on Go 1.26 (golang/go#75804, fixed in Go 1.27).
# 50000 executions keep each target to seconds (the slowest, parsers built on sonic,
# run ~3k execs/s instrumented) so CI stays bounded as targets are added; run
# `make fuzz FUZZTIME=2000000x` for a deeper search.
FUZZTIME ?= 50000x
# Minimizing a new interesting input may take 60 s by default, with no executions
# counted meanwhile (FuzzAPI in CI: a minute at "0/sec"); 1000 tries keep it short.
FUZZMINIMIZE ?= 1000x

.PHONY: build run test test-short test-reliability fuzz bench load soak vet fmt clean services

build:
	$(GO) build -o bin/sluice ./cmd/sluice
	$(GO) build -o bin/sluice-load ./cmd/sluice-load

run: build
	SLUICE_DEMO=true ./bin/sluice

# vet, formatting, the race-enabled test suite, then a short run of every fuzz target.
# apitest alone takes about 6 minutes under -race on a 2-core machine and past 10 (go
# test's default limit per package) while the other packages run beside it.
test: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) fuzz

# The crash and outage tests alone: kill -9 of the real binary under load from the
# load generator (embedded and ClickHouse + Redis), kill -9 with points only in the
# spool, and ClickHouse cut off under load. `make test` (and so CI) runs them too;
# with services: eval "$$(scripts/services.sh)" && SLUICE_REQUIRE_SERVICES=1 make test-reliability
test-reliability:
	$(GO) test -count=1 -v -run 'Reliability|Kill9|ClickHouseOutage|RedisRestart' ./apitest/

test-short:
	$(GO) test -count=1 ./...

# Each fuzz target runs FUZZTIME executions; crashers land in testdata/fuzz and become seeds.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg || exit 1; \
	  done; \
	done

# Installs (Debian, as root) and starts ClickHouse and Redis on loopback for the
# integration tests; then: eval "$$(scripts/services.sh)" && make test
services:
	@scripts/services.sh

# The micro-benchmarks beside the code, then the end-to-end harness (bench/README.md):
# about 2.5 minutes. With CLICKHOUSE_ADDR and REDIS_ADDR set (eval "$$(scripts/services.sh)")
# the harness adds Sluice on ClickHouse + Redis. BENCH_FLAGS="-duration 3s" for a quick look.
BENCH_FLAGS ?= -duration 10s -warmup 1s -connections 64
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./codec/ ./storage/... ./ingest/ ./bench/
	$(GO) run ./cmd/sluice-bench $(BENCH_FLAGS)

# A fleet of 100 devices at 1000 requests/s for 30 s against a running node (make run
# in another terminal), reports in load.json and load.html (loadtest/README.md).
# LOAD_FLAGS="-url https://... -tokens tokens.txt -rate 0" to point it elsewhere.
LOAD_FLAGS ?= -url http://localhost:8080 -user tenant@thingsboard.org -password tenant \
	-devices 100 -rate 1000 -connections 64 -duration 30s -profile meter -cleanup -json load.json -html load.html
load:
	$(GO) run ./cmd/sluice-load $(LOAD_FLAGS)

# Soak (issue #8): the node on the embedded default, 30 minutes at half of the peak
# rate measured first; fails when RSS or goroutines grow 10% or more after the
# warm-up, a request fails or the node dies. Prints the bench/RESULTS.md section.
SOAK_DURATION ?= 30m
soak: build
	$(GO) run ./cmd/sluice-soak -binary bin/sluice -duration $(SOAK_DURATION) -json bin/soak.json $(SOAK_FLAGS)

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin data
