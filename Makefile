# quanta: quantized arrays for GoMLX. `make help` lists the targets; README.md explains them.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

# Never let GoMLX download PJRT plugins from GitHub: `make setup` installs them from PyPI.
export GOMLX_NO_AUTO_INSTALL := 1

GO ?= go
# Extra flags for `go test`, e.g. make test GOTEST_FLAGS='-count=1 -v'.
GOTEST_FLAGS ?=

.DEFAULT_GOAL := help

.PHONY: help setup doctor demo vet test test-all bench

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## install the XLA CPU PJRT plugin (PyPI wheel) as ~/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so
	@scripts/setup-xla.sh

doctor: ## report the backend quanta runs on (exit 0: XLA; 3: pure-Go fallback)
	$(GO) run ./cmd/quanta doctor

demo: setup ## run the end-to-end example on the chosen backend
	$(GO) run ./examples/demo

vet: ## go vet ./...
	$(GO) vet ./...

test: setup vet ## run every test on XLA CPU, then again on the pure-Go backend
	GOMLX_BACKEND=xla:cpu $(GO) test $(GOTEST_FLAGS) ./...
	GOMLX_BACKEND=go $(GO) test $(GOTEST_FLAGS) ./...

test-all: export QUANTA_TEST_ALL := 1
test-all: test ## `make test` plus the slow tests (QUANTA_TEST_ALL=1)

bench: ## run the Go benchmarks (placeholder until the format benchmarks land)
	$(GO) test -run '^$$' -bench . ./...

# ---- Room for later targets (owned by later issues; not defined yet) ------------------------
# conformance:     check quanta against vectors produced by eformer
# bench-peer:      benchmark quanta against eformer/JAX on the same XLA (jaxlib 0.11.2)
# accel-test:      run tpu_tests/ on an accelerator machine
# accel-binaries:  build the test binaries to ship to an accelerator machine
