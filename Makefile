# quanta: quantized arrays for GoMLX. `make help` lists the targets; README.md explains them.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

# Never let GoMLX download PJRT plugins from GitHub: `make setup` installs them from PyPI.
export GOMLX_NO_AUTO_INSTALL := 1

GO ?= go
# Extra flags for `go test`, e.g. make test GOTEST_FLAGS='-count=1 -v'.
GOTEST_FLAGS ?=

.DEFAULT_GOAL := help

.PHONY: help setup doctor demo vet test test-all bench conformance bench-peer

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## install the XLA CPU PJRT plugin (PyPI wheel) as ~/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so
	@scripts/setup-xla.sh

doctor: ## report the backend quanta runs on (exit 0: XLA; 3: pure-Go fallback)
	$(GO) run ./cmd/quanta doctor

demo: setup ## quantize a weight in every format, run the fused matmul, then a short QAT run
	$(GO) run ./examples/demo
	$(GO) run ./examples/qat -quick

vet: ## go vet ./...
	$(GO) vet ./...

test: setup vet ## run every test on XLA CPU, then again on the pure-Go backend
	GOMLX_BACKEND=xla:cpu $(GO) test $(GOTEST_FLAGS) ./...
	GOMLX_BACKEND=go $(GO) test $(GOTEST_FLAGS) ./...

test-all: export QUANTA_TEST_ALL := 1
test-all: test ## `make test` plus the slow tests (QUANTA_TEST_ALL=1)

bench: setup ## the benchmark table (README): formats vs dense, M=1..2048, K=N=4096, one run
	$(GO) run ./bench -json bench/results/$(or $(BENCH_NAME),xla-cpu-f32).json \
		-markdown bench/results/$(or $(BENCH_NAME),xla-cpu-f32).md $(BENCH_FLAGS)

conformance: ## regenerate the eformer vectors (byte-compared with testdata/) and run the Go conformance suite
	conformance/run.sh gen
	$(GO) test ./conformance/...

bench-peer: setup ## eformer (JAX CPU) vs quanta (XLA CPU) on the same shapes: a table of ratios
	$(GO) run ./conformance/peer
