#!/usr/bin/env bash
# run-on-device.sh OUTDIR: runs quanta's accelerator suite and benchmark on a machine with a GPU or
# a TPU, no Go toolchain and no network. It expects the binaries of `make accel-binaries` next to
# it (accel-binaries/: quanta, tpu_tests.test, bench) and the accelerator's PJRT plugin installed
# by a Python wheel (jax-cuda13-pjrt, jax-cuda12-pjrt or libtpu), which the binaries find
# themselves (package runtime). It writes into OUTDIR:
#   plugins.txt    the plugin files found in python's site-packages
#   doctor.txt     `quanta doctor` (backend, plugin version, devices, memory)
#   tests.txt      the suite, verbose (go test -v output)
#   hlo/M*/       XLA's optimized HLO of every format's product at M = 1, 8, 64 (two 4096x4096
#                  weights, bfloat16 activations; hlo.txt: the run's output)
#   bench.md/.json the benchmark table, bfloat16 activations, on 4096x4096, 4096x11008 (and
#                  11008x4096 in the add context), 8192x8192 at M = 1, 16, 256 (bench.txt: its output)
#   summary.txt    one line per step with its exit status
# Exit status: 0 when doctor and the suite pass (the suite skips without an accelerator); 1 when
# either fails; 2 on a usage error. A failing benchmark is recorded in summary.txt only.
# BENCH_FLAGS adds flags to the benchmark, e.g. BENCH_FLAGS='-min-time 1s' (later flags win);
# SKIP_BENCH=1 skips the dumps and the benchmark.
set -uo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
out=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)

# The binaries sit next to this script (accel-binaries/), or in ../accel-binaries when the script
# runs from the repository's tpu_tests/.
bin=$here
if [[ ! -x $bin/tpu_tests.test && -x $here/../accel-binaries/tpu_tests.test ]]; then
	bin=$(cd "$here/../accel-binaries" && pwd)
fi
for b in quanta tpu_tests.test bench; do
	if [[ ! -x $bin/$b ]]; then
		echo "run-on-device.sh: $bin/$b missing: build it with make accel-binaries" >&2
		exit 2
	fi
done

export GOMLX_NO_AUTO_INSTALL=1
summary=$out/summary.txt
: >"$summary"
status=0
step() { # step NAME EXIT_CODE
	echo "$1: exit $2" | tee -a "$summary"
}

# What is installed, for the record (the binaries search the same places themselves).
{
	echo "# python3: $(command -v python3 || echo none)"
	if command -v python3 >/dev/null; then
		python3 - <<'PY'
import glob, os, sys
seen = set()
for d in sys.path:
    for f in glob.glob(os.path.join(d, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so")) + glob.glob(os.path.join(d, "libtpu", "libtpu.so")):
        if f not in seen:
            seen.add(f)
            print(f)
PY
	fi
	echo "# PJRT_PLUGIN_LIBRARY_PATH=${PJRT_PLUGIN_LIBRARY_PATH:-}"
	ls /dev/nvidia* /dev/accel* /dev/vfio/* 2>/dev/null
	command -v nvidia-smi >/dev/null && nvidia-smi
} >"$out/plugins.txt" 2>&1

# quanta doctor: 0 on XLA, 3 on the pure-Go fallback (no plugin at all), 1 on failure.
"$bin/quanta" doctor >"$out/doctor.txt" 2>&1
code=$?
step doctor "$code"
if [[ $code -ne 0 && $code -ne 3 ]]; then
	status=1
fi
cat "$out/doctor.txt"

"$bin/tpu_tests.test" -test.v -test.count=1 -test.timeout=20m >"$out/tests.txt" 2>&1
code=$?
step tests "$code"
if [[ $code -ne 0 ]]; then
	status=1
fi
grep -E '^(--- |ok|PASS|FAIL)|no accelerator' "$out/tests.txt" | head -60

accelerator=no
if grep -qE '^accelerator: ' "$out/doctor.txt"; then
	accelerator=yes
fi
if [[ ${SKIP_BENCH:-0} == 1 ]]; then
	echo "bench: skipped: SKIP_BENCH=1" | tee -a "$summary"
elif [[ $accelerator == no ]]; then
	echo "bench: skipped: no accelerator" | tee -a "$summary"
else
	# Peak memory bandwidth of the known GPUs (GB/s), for the achieved-bandwidth table; PEAK_GBPS overrides.
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
	case "$gpu" in
	*H200*) peak=4800 ;;
	*H100*) peak=3350 ;;
	*A100*) peak=2039 ;;
	*) peak=0 ;;
	esac
	peak=${PEAK_GBPS:-$peak}
	# The optimized HLO of each format's product, one weight per M, timed just once.
	for m in 1 8 64; do
		XLA_FLAGS="${XLA_FLAGS:-} --xla_dump_to=$out/hlo/M$m --xla_dump_hlo_as_text" "$bin/bench" -dtype bfloat16 \
			-shapes 4096x4096 -m "$m" -contexts chain -stream-bytes 1 -max-layers 2 -min-time 1ms >>"$out/hlo.txt" 2>&1
		step "hlo M=$m" $?
	done
	# shellcheck disable=SC2086 # BENCH_FLAGS is split into flags on purpose.
	"$bin/bench" -dtype bfloat16 -peak-gbps "$peak" -shapes 4096x4096,4096x11008,8192x8192 -m 1,16,256 \
		-json "$out/bench.json" -markdown "$out/bench.md" ${BENCH_FLAGS:-} >"$out/bench.txt" 2>&1
	code=$?
	step bench "$code"
	[[ -f $out/bench.md ]] && cat "$out/bench.md"
fi
exit $status
