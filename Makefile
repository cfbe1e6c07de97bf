# The README's two commands: `make demo` (the main job) and `make test`.
GO ?= go

.PHONY: setup demo faults test bench

# Install the servers the tests and the demo start (Debian packages).
setup:
	bash scripts/setup.sh

# The main job: run the short fault matrix, then compare the backends on
# local servers it starts itself, declared guarantees beside measurements
# and fault rows, in one report (text, JSON, HTML with charts) under reports/.
# A failed fault cell still yields its rows (marked FAIL) in the report.
demo: setup
	-$(MAKE) faults
	$(GO) run ./cmd/distlock compare --duration 500ms --repeat 3 --faults reports/faults.json \
		--text reports/compare.txt --json reports/compare.json --html reports/compare.html

# Fault-matrix rows for compare (the short matrix, about 2 minutes).
faults: setup
	FAULTS_JSON=reports/faults.json $(GO) test ./internal/faults -run Matrix -count=1

# Everything CI runs: vet, then every test under the race detector against
# real servers the tests start.
test: setup
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

bench: setup
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...
