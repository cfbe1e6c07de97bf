# The README's two commands: `make demo` (the main job) and `make test`.
GO ?= go

.PHONY: setup demo test vet bench

# Install the servers the tests and the demo start (Debian packages).
setup:
	bash scripts/setup.sh

# The main job: compare the backends on local servers it starts itself and
# write the report (text, JSON, HTML with charts) under reports/.
demo: setup
	$(GO) run ./cmd/distlock compare --duration 500ms --repeat 3 \
		--text reports/compare.txt --json reports/compare.json --html reports/compare.html

# Everything CI runs: vet, then every test under the race detector against
# real servers the tests start.
test: setup
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

bench: setup
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...
