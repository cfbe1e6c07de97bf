# The README's commands: `make test` (what CI runs), `make demo`, `make bench-peers`, `make soak`.
#
# Five modules: the library (go.mod at the root), the etcd backend (etcd/:
# etcd's client brings Prometheus and gRPC middleware), package all (all/:
# every backend), the examples (examples/) and the tools (cmd/: the
# distlock command, the fault harness cmd/internal/faults and their heavy
# dependencies). The root's go.work makes them build and test against each
# other in this tree. `go ... ./...` covers one module only, so every target
# that means "all packages" runs in each module root (MODULES). Every module
# but cmd has replaces to its siblings, so its go.mod is checked with the
# workspace off (cmd has none: `go install …/cmd/distlock@v` refuses them).
GO ?= go
MODULES := . etcd all examples cmd
TIDY_MODULES := . etcd all examples

.PHONY: setup demo faults test bench

# Install the servers the tests and the demo start (Debian packages), and
# build the etcd they run (scripts/etcd-server: once, then cached).
setup:
	bash scripts/setup.sh

# The main job: run the short fault matrix, then compare the backends on
# local servers it starts itself, declared guarantees beside measurements
# and fault rows, in one report (text, JSON, HTML with charts) under reports/.
# A failed fault cell still yields its rows (marked FAIL) in the report.
# It says up front what it installs and how long it takes, then prints a
# line per phase and per finished fault-matrix cell, with the elapsed time.
demo:
	@echo "demo: installs (once, if missing) the Debian packages redis-server, etcd-server, zookeeper,"
	@echo "demo:   postgresql, default-jre-headless (scripts/setup.sh) and builds etcd from Go modules;"
	@echo "demo: then the short fault matrix (~2 min) and compare (~2 min): ~5 min on 2 cores after setup"
	@echo "demo: [setup]"; $(MAKE) --no-print-directory setup
	@echo "demo: [fault matrix]"; $(MAKE) --no-print-directory faults || echo "demo: fault matrix had failures (shown as FAIL rows)"
	@echo "demo: [compare]"
	$(GO) run ./cmd/distlock compare --duration 500ms --repeat 3 --faults reports/faults.json \
		--text reports/compare.txt --json reports/compare.json --html reports/compare.html

# Fault-matrix rows for compare (the short matrix, about 2.5 minutes). The
# cells run in parallel, so their --- PASS lines only come at the end: awk
# turns go test -v's streamed lines into progress instead (a backend
# starting, a cell's row logged as it ends), with the elapsed time.
faults: setup
	bash -o pipefail -c 'FAULTS_JSON=reports/faults.json $(GO) test ./cmd/internal/faults -run Matrix -count=1 -v 2>&1 | \
		awk -f scripts/faults-progress.awk -v t0="$$(date +%s)"'

# Everything CI runs: gofmt; each go.mod lists exactly what its packages
# and their tests import, so the library's has no tool's dependency (a diff:
# run `GOWORK=off go mod tidy` there); vet, then every test under the race
# detector against real servers the tests start, in every module. The
# library's packages mostly wait on their servers' TTLs, so three of them run
# at once (-p 3; the default is one per core; 4 overloaded 2 cores enough to
# delay a Redlock loss notice past its test's bound); the tools' module keeps the
# default, as its fault harness times schedules closely.
test: setup
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	for m in $(TIDY_MODULES); do (cd $$m && GOWORK=off $(GO) mod tidy -diff) || exit 1; done
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	$(MAKE) --no-print-directory complexity
	for m in $(MODULES); do p=2; [ $$m = . ] && p=3; (cd $$m && $(GO) test -race -count=1 -timeout 15m -p $$p ./...) || exit 1; done

# Every library function at cyclomatic complexity 15 or less (gocyclo, a
# tool of the cmd module): the tools, examples and test helpers are not
# library code.
.PHONY: complexity
complexity:
	cd cmd && $(GO) tool gocyclo -over 15 -ignore '_test\.go$$|^\.\./(cmd|examples|internal/testserver|internal/testutil)/' ..

bench: setup
	for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchtime 2s ./...) || exit 1; done

# The README's screenshot of the compare report (docs/compare.png), rendered
# by a real browser: headless chromium (Debian: apt-get install chromium). A
# short compare run writes reports/compare.html (with the fault rows when
# reports/faults.json exists: make faults); TestReportInChromium then loads it
# at 1280 and 760 px wide, fails (and so fails the target) when the page is
# wider than the window (wide tables must scroll in their own box), and writes
# the screenshot, 1280 px wide, down to the end of the charts
# (REPORT_PNG_HEIGHT=charts; a number of pixels, or empty for the whole page).
.PHONY: report-screenshot
REPORT_PNG_HEIGHT ?= charts
report-screenshot: setup
	$(GO) run ./cmd/distlock compare --duration 500ms --repeat 3 --html reports/compare.html
	cd cmd && REPORT_HTML=$(CURDIR)/reports/compare.html REPORT_PNG=$(CURDIR)/docs/compare.png \
		REPORT_PNG_HEIGHT=$(REPORT_PNG_HEIGHT) $(GO) test ./distlock -run '^TestReportInChromium$$' -count=1 -v

# The fault harness's mutation checks (#14): each known bug put back behind
# internal/mutation (a worker built with -tags distlock_mutations), and the
# randomized harness must catch it; -mutations.control reruns each seed
# without the mutation, which must run clean. About 5-8 minutes.
.PHONY: mutations soak
mutations: setup
	FAULTS_MUTATIONS=1 $(GO) test ./cmd/internal/faults -run '^TestMutations$$' -mutations.control -count=1 -v -timeout 30m

# The randomized fault schedule on every backend for SOAK_DURATION (not in
# CI); rows (guarded ops, faults by kind, violations by rule, worst
# loss-notice delay, worst recovery) go to SOAK_JSON (reports/soak.json).
SOAK_DURATION ?= 30m
soak: setup
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test ./cmd/internal/faults -run '^TestSoak$$' -parallel 8 -count=1 -v -timeout 0

# The peer benchmark (#15), not part of CI: each backend against the library
# a user would pick instead (redis, and redis with fair=true, vs
# bsm/redislock, redlock vs go-redsync/redsync on the same 5 nodes, etcd vs
# concurrency.Mutex, zookeeper vs go-zookeeper's zk.Lock) on loopback
# servers it starts itself,
# the two sides interleaved run by run; prints medians and ratios, and writes
# reports/peers.json. PEERBENCH_FLAGS="--duration 1s --runs 5 --only redis,zk".
.PHONY: bench-peers
PEERBENCH_FLAGS ?= --duration 2s --runs 3
bench-peers: setup
	mkdir -p reports
	$(GO) run ./cmd/internal/peerbench $(PEERBENCH_FLAGS) --json reports/peers.json
