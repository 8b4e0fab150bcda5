# fleetsync: `make demo` syncs an embedded fleetsim into a local ClickHouse
# (bin/fleetsync-demo running the product's bin/fleetsync sync),
# `make test` runs every test (it starts the ClickHouse it needs).
GO       ?= go
PKGS     ?= ./...
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
# A count of inputs, not a duration: go1.26's fuzz coordinator can fail a
# duration-bounded run with "context deadline exceeded" when the deadline
# lands while a worker is busy (go.dev/issue/75804), which fails CI on a
# loaded machine with no input found. A count has no deadline to race.
FUZZTIME ?= 50000x

.PHONY: all build demo test test-unit test-race test-e2e test-cpu test-wait test-deploy fuzz lint bench soak test-faults test-cluster test-cluster-race test-cluster-e2e deps clean mutate

all: build

# Static binaries (CGO off) so deploy/Dockerfile can copy them into distroless.
# Only bin/fleetsync is the product; fleetsync-demo and fleetsim are for trying
# it out (the demo runs the fleetsync beside it).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/fleetsync ./cmd/fleetsync
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/fleetsync-demo ./cmd/fleetsync-demo
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/fleetsim ./cmd/fleetsim

# Installs Debian's ClickHouse when it is missing (needs root), then runs the demo.
deps:
	@command -v clickhouse-server >/dev/null 2>&1 || { \
	  echo "installing Debian's clickhouse-server (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clickhouse-server clickhouse-client; }

demo: deps build
	./bin/fleetsync-demo

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# -race where it finds something: the engine, its loaders and committer,
# the clients and adapters (TestSimulation runs 200 of its seeds there),
# then all 2,000 fixed seeds without it (test-race). The end-to-end
# packages (cmd/...) wait on services far more than they compute: they run
# without it, their long tests four at a time (cmd/fleetsync/harness_test.go),
# beside the first group (test-e2e): `make test` runs the CPU-bound group
# (then the fuzz targets) and the waiting one (then deploy's) at once.
RACE_PKGS = $(shell $(GO) list $(PKGS) | grep -v '/cmd/')
E2E_PKGS  = $(shell $(GO) list $(PKGS) | grep '/cmd/')
# The 2,000 seeds are asked for through FLEETSYNC_SIM_SEEDS, the way
# make mutate passes them, so a break there fails here and not an hour
# into a mutation run.
test-race:
	$(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)
	FLEETSYNC_SIM_SEEDS=2000 $(GO) test -count=1 -timeout 5m -run 'TestSimulation$$' ./pipeline

# 20 min, as the fault suite's: the group shares the two cores with
# test-race, so cmd/fleetsync takes about 5 min of it (4 alone).
test-e2e:
	$(GO) test -count=1 -timeout 20m -parallel 4 $(E2E_PKGS)

test-unit: test-race test-e2e

test-deploy:
	cd deploy && $(GO) test -count=1 ./...

# Every fuzz target runs briefly (FUZZTIME inputs each); `go test -fuzz` takes one target at a time.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "fuzz $$pkg $$t ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

test: lint
	$(MAKE) -j2 test-cpu test-wait

test-cpu: test-race fuzz
test-wait: test-e2e test-deploy

test-faults:
	FLEETSYNC_FAULTS_HEAVY=1 $(GO) test -race -count=1 -timeout 20m -run 'Fault|Kill|Overlap|Sigterm' ./pipeline/...
	FLEETSYNC_FAULTS_HEAVY=1 $(GO) test -count=1 -timeout 20m -parallel 4 -run 'Fault|Kill|Overlap|Sigterm' ./cmd/...

# The tests against a local ClickHouse cluster (ZooKeeper and 2 shards x 2
# replicas, ~450 MB): build tag cluster, names starting TestCluster, so
# `make test` does not run them.
# The adapter's under -race and the end-to-end ones without it (as in
# test-unit), both at once: the second waits on the cluster, not the CPU.
test-cluster:
	$(MAKE) -j2 test-cluster-race test-cluster-e2e

test-cluster-race:
	$(GO) test -race -count=1 -tags cluster -timeout 20m -run '^TestCluster' $(RACE_PKGS)

test-cluster-e2e:
	$(GO) test -count=1 -tags cluster -timeout 20m -run '^TestCluster' $(E2E_PKGS)

# The deterministic simulation of the whole sync (pipeline/sim_test.go) over
# SEEDS fresh seeds from a random first one; make test runs 2000 fixed ones.
# A failure prints the command that replays it.
SEEDS ?= 100000
soak:
	$(GO) test ./pipeline -count=1 -timeout 0 -run 'TestSimulation$$' -sim.seeds $(SEEDS) -sim.base -1 -v

# Mutation testing (issue 35) of the code that decides windows, marks, cut
# frames and commits, with gremlins (installed at its pinned version if
# missing): pipeline's files against its tests and 300 simulation seeds, then
# load/clickhouse/rollup.go against the rollup tests (a second, slower run).
# Prints the score per file; fails below MUTATE_MIN (85) %. See .ci/mutate.
MUTATE ?= pipeline analyst clickhouse
mutate:
	.ci/mutate $(MUTATE)

bench: deps build
	$(GO) run ./cmd/fleetbench -out docs/benchmarks.md

clean:
	rm -rf bin .demo
