#!/usr/bin/env bash
# run-on-device.sh OUTDIR: quanta's accelerator run, on a machine with a GPU (or a TPU), no Go
# toolchain and no network, in one go of at most DEVICE_BUDGET_S seconds (450 by default). It
# expects what `make accel-binaries` builds next to it (accel-binaries/: quanta.gz, bench.gz,
# tpu_tests.test.gz, the bitsandbytes wheel, bnb_bench.py), or in ../accel-binaries when it runs
# from the repository's tpu_tests/, and the accelerator's PJRT plugin installed by a Python wheel
# (jax-cuda13-pjrt, jax-cuda12-pjrt or libtpu), which the binaries find themselves. It writes into
# OUTDIR:
#   summary.txt     one line per step: its exit status and seconds (or why it was skipped)
#   plugins.txt     python, the plugin wheels, the NVIDIA wheels (libdevice, ptxas), glibc, devices
#   doctor.txt      `quanta doctor`: backend, plugin and PJRT API, XLA_FLAGS, devices, memory
#   device.txt      nvidia-smi's description of the GPU (name, memory, clocks, driver)
#   tests.txt       the accelerator suite, verbose (each format's strategies at 1 and 32 rows)
#   call.txt        BenchmarkAcceleratorCall: a call's own cost against its products', and the
#                   cost of copying a result to the host
#   hlo/M<m>/       XLA's HLO of each format's product (Auto) at M = 1, 8, 64 on 4096x4096 weights
#                   with bfloat16 activations, before and after optimization (hlo/M64-gemm-v2/: at
#                   M = 64 under --xla_gpu_experimental_gemm_fusion_v2=true); hlo/summary.md: per
#                   module, its Triton GEMMs, cuBLAS calls, reductions and weight-sized temporaries
#   bench.md/.json  quanta's formats against dense bfloat16 in the same run, bfloat16 activations,
#                   4096x4096, 4096x11008, 11008x4096 and 8192x8192 at M = 1, 16, 256, the stored
#                   bytes per second against the device's peak (bench.txt: its log, cell by cell)
#   forms.md/.json  each GPU formulation forced (reduction and GEMM forms) on 4096x4096;
#                   forms-gemm-v2.*: the GEMM forms under --xla_gpu_experimental_gemm_fusion_v2
#   bnb.md/.json    bitsandbytes' NF4 beside dense bfloat16 (PyTorch), the same shapes and rows
#   all.tgz         all of the above in one archive
# Without an accelerator the steps that need one are skipped, each with a line saying so.
# STEPS (comma-separated; default all) picks among plugins, device, tests, call, hlo, bench, bnb
# and forms, for a second run on what the first left out; doctor always runs. BENCH_SHAPES and
# BENCH_FORMATS override the bench's shapes (KxN,...) and formats (those of bench -formats).
# DRY_RUN=1 runs every step on whatever backend starts (XLA CPU), with tiny shapes and times: a
# check of the script itself. Exit status: 0 when doctor and the suite pass; 1 when either fails;
# 2 on a usage error or missing binaries. Benchmarks, dumps and bitsandbytes are recorded in
# summary.txt only.
set -uo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
start=$SECONDS
budget=${DEVICE_BUDGET_S:-450}
dry=${DRY_RUN:-0}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

# step NAME SECONDS COMMAND...: runs COMMAND for at most SECONDS, or what is left of the budget
# (less a reserve for the steps' bookkeeping), and records its exit status (124: timed out).
step() {
	local name=$1 limit=$2
	shift 2
	if [[ $name != doctor && ,${STEPS:-$name}, != *,${name%% *},* ]]; then
		note "$name: skipped: not in STEPS=$STEPS"
		return 98
	fi
	local left=$((budget - (SECONDS - start) - 10))
	((left < limit)) && limit=$left
	if ((limit < 5)); then
		note "$name: skipped: out of time (budget ${budget}s)"
		return 99
	fi
	local t0=$SECONDS code
	timeout -k 5 "$limit" "$@"
	code=$?
	note "$name: exit $code in $((SECONDS - t0))s (limit ${limit}s)"
	return $code
}

# The binaries, unpacked outside OUTDIR (whatever is under OUTDIR travels back).
src=$here
if [[ ! -f $src/tpu_tests.test.gz && -f $here/../accel-binaries/tpu_tests.test.gz ]]; then
	src=$(cd "$here/../accel-binaries" && pwd)
fi
bin=$(mktemp -d "${TMPDIR:-/tmp}/quanta-accel.XXXXXX") || exit 2
trap 'rm -rf "$bin"' EXIT
for b in quanta bench tpu_tests.test; do
	if [[ ! -f $src/$b.gz ]]; then
		echo "run-on-device.sh: $src/$b.gz missing: build it with make accel-binaries" >&2
		exit 2
	fi
	if command -v gzip >/dev/null; then
		gzip -dc "$src/$b.gz" >"$bin/$b"
	else
		python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$src/$b.gz" "$bin/$b"
	fi || exit 2
	chmod +x "$bin/$b"
done
export GOMLX_NO_AUTO_INSTALL=1
status=0

# What is installed, for the record (the binaries search the same places themselves).
inventory() {
	echo "# python3: $(command -v python3 || echo none)"
	if command -v python3 >/dev/null; then
		python3 - <<'PY'
import glob, os, subprocess, sys
print("# " + sys.version.replace("\n", " "))
seen = set()
for d in sys.path:
    for pattern in ("jax_plugins/xla_cuda*/xla_cuda_plugin.so", "libtpu/libtpu.so", "*.dist-info"):
        for f in sorted(glob.glob(os.path.join(d, pattern))):
            base = os.path.basename(f)
            if f in seen or (pattern == "*.dist-info" and not base.lower().startswith(("jax", "nvidia", "torch", "bitsandbytes", "numpy", "triton"))):
                continue
            seen.add(f)
            print(f)
    nvidia = os.path.join(d, "nvidia")
    if os.path.isdir(nvidia) and nvidia not in seen:
        seen.add(nvidia)
        print("# " + nvidia + ": " + " ".join(sorted(os.listdir(nvidia))))
        for f in sorted(glob.glob(os.path.join(nvidia, "*", "nvvm", "libdevice", "*")) + glob.glob(os.path.join(nvidia, "*", "bin", "ptxas"))):
            print(f)
for plugin in sorted(f for f in seen if f.endswith("xla_cuda_plugin.so")):
    data = open(plugin, "rb").read()
    for flag in (b"xla_gpu_experimental_enable_subchannel_dequantisation_fusion", b"xla_gpu_experimental_gemm_fusion_v2"):
        print(f"# {plugin}: {flag.decode()} {'known' if flag in data else 'unknown'}")
PY
	fi
	echo "# PJRT_PLUGIN_LIBRARY_PATH=${PJRT_PLUGIN_LIBRARY_PATH:-}"
	echo "# $(ldd --version 2>&1 | head -1)"
	ls /dev/nvidia* /dev/accel* /dev/vfio/* 2>/dev/null
	if command -v nvidia-smi >/dev/null; then
		nvidia-smi
	fi
	true
}
step plugins 60 bash -c "$(declare -f inventory); inventory" >"$out/plugins.txt" 2>&1

# quanta doctor: 0 on XLA, 3 on the pure-Go fallback (no plugin at all), 1 on failure.
step doctor 90 "$bin/quanta" doctor >"$out/doctor.txt" 2>&1
code=$?
if [[ $code -ne 0 && $code -ne 3 ]]; then
	status=1
fi
cat "$out/doctor.txt"
accelerator=no
if grep -qE '^accelerator: ' "$out/doctor.txt"; then
	accelerator=yes
fi

gpu=""
if command -v nvidia-smi >/dev/null; then
	step device 30 nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,clocks.max.sm,driver_version,pcie.link.gen.max \
		--format=csv >"$out/device.txt" 2>&1
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
else
	note "device: skipped: no nvidia-smi"
fi
# Peak memory bandwidth (GB/s) of the GPUs quanta is measured on, from their data sheets; PEAK_GBPS
# overrides; unknown (0): the bench judges by the read bandwidth it measures.
case "$gpu" in
*H200*) peak=4800 ;;
*H100*NVL*) peak=3900 ;;
*H100*PCIe*) peak=2000 ;;
*H100*) peak=3350 ;;
*A100*80GB*PCIe*) peak=1935 ;;
*A100*PCIE*40GB*) peak=1555 ;;
*A100*) peak=2039 ;;
*) peak=0 ;;
esac
peak=${PEAK_GBPS:-$peak}
note "device: ${gpu:-no NVIDIA GPU}; peak bandwidth ${peak} GB/s"

# The suite (it skips without an accelerator unless QUANTA_ACCEL_ANY=1, which DRY_RUN sets).
any=0
[[ $dry == 1 ]] && any=1
QUANTA_ACCEL_ANY=$any step tests 150 "$bin/tpu_tests.test" -test.v -test.count=1 -test.timeout=20m >"$out/tests.txt" 2>&1
code=$?
if [[ $code -ne 0 && $code -ne 98 ]]; then
	status=1
fi
grep -E '^(--- |ok|PASS|FAIL)|no accelerator' "$out/tests.txt" | head -40
if [[ $accelerator == yes ]]; then
	step call 60 "$bin/tpu_tests.test" -test.run '^$' -test.bench AcceleratorCall -test.benchtime 1s >"$out/call.txt" 2>&1
fi

# The sizes of the measurements; DRY_RUN shrinks them to check the steps themselves.
shapes=${BENCH_SHAPES:-4096x4096,4096x11008,8192x8192}
hlo_shape=4096x4096
rows=1,16,256
stream=$((128 << 20))
mintime=200ms
layers=2048
if [[ $dry == 1 ]]; then
	shapes=256x512
	hlo_shape=256x512
	rows=1,16
	stream=$((1 << 20))
	mintime=5ms
	layers=4
fi
gemm_v2=--xla_gpu_experimental_gemm_fusion_v2=true
if [[ $accelerator == no && $dry != 1 ]]; then
	note "hlo, bench, forms, bnb: skipped: no accelerator (DRY_RUN=1 runs them anyway)"
	exit $status
fi

# The HLO of each format's product, one cell per M, timed just once.
mkdir -p "$out/hlo"
hlo() { # hlo DIR M [XLA flags...]: bench's products, dumped
	local dir=$1 m=$2
	shift 2
	# Only the products' programs (implicitarray's), as HLO text.
	XLA_FLAGS="${XLA_FLAGS:-} $* --xla_dump_to=$out/hlo/$dir --xla_dump_hlo_as_text --xla_dump_hlo_module_re=^implicit" \
		"$bin/bench" -dtype bfloat16 -shapes "$hlo_shape" -m "$m" -contexts add -formats nf4,int8,ternary,binary1,q4_0,q8_0,q4_k,q6_k \
		-stream-bytes 1 -max-layers 2 -min-time 1ms
	local code=$?
	find "$out/hlo/$dir" -type f ! -name '*optimizations.txt' -delete 2>/dev/null
	return $code
}
for m in 1 8 64; do
	step "hlo M=$m" 45 bash -c "$(declare -f hlo); out='$out' bin='$bin' hlo_shape='$hlo_shape' hlo M$m $m" >>"$out/hlo/hlo.txt" 2>&1
done
step "hlo M=64 gemm-v2" 45 bash -c "$(declare -f hlo); out='$out' bin='$bin' hlo_shape='$hlo_shape' hlo M64-gemm-v2 64 $gemm_v2" \
	>>"$out/hlo/hlo.txt" 2>&1
summarize() { # summarize DIR...: per optimized module, what XLA made of the products
	python3 - "$@" <<'PY'
import glob, os, re, sys
print("| dump | parameters | Triton GEMMs | cuBLAS calls | reduction fusions | loop fusions | float temporaries >= 1M elements |")
print("|---|---|---|---|---|---|---|")
for d in sys.argv[1:]:
    for f in sorted(glob.glob(os.path.join(d, "*after_optimizations.txt"))):
        text = open(f).read()
        entry = text.split("\nENTRY ", 1)[-1]
        triton = len(re.findall(r'"kind":"__triton[a-z_]*gemm[a-z_]*"', text))
        cublas = len(re.findall(r'custom_call_target="__cublas', text))
        reductions = len(re.findall(r"kind=kInput", entry))
        loops = len(re.findall(r"kind=kLoop", entry))
        temps = []
        for m in re.finditer(r"%(\S+) = (bf16|f32|f16)\[([\d,]+)\]\S* (fusion|convert|multiply|copy)\(", entry):
            n = 1
            for v in m.group(3).split(","):
                n *= int(v)
            if n >= 1 << 20:
                temps.append(f"{m.group(2)}[{m.group(3)}] {m.group(4)}")
        layout = re.search(r"entry_computation_layout=\{\((.*?)\)->", text)
        params = re.sub(r"\{[\d,]*\}", "", layout.group(1)) if layout else os.path.basename(f)
        print(f"| {os.path.basename(d)} | {params} | {triton} | {cublas} | {reductions} | {loops} | {', '.join(temps) or '-'} |")
PY
}
if command -v python3 >/dev/null; then
	step "hlo summary" 30 bash -c "$(declare -f summarize); summarize $out/hlo/M*" >"$out/hlo/summary.md" 2>&1
fi

# The benchmark: every format against dense bfloat16 in the same run, stored bytes per second
# against the peak.
step bench 300 "$bin/bench" -dtype bfloat16 -peak-gbps "$peak" -contexts add -shapes "$shapes" -m "$rows" \
	${BENCH_FORMATS:+-formats "$BENCH_FORMATS"} -stream-bytes "$stream" -max-layers "$layers" -min-time "$mintime" -json "$out/bench.json" -markdown "$out/bench.md" >"$out/bench.txt" 2>&1
[[ -f $out/bench.md ]] && cat "$out/bench.md"

# bitsandbytes' NF4 beside dense bfloat16 in PyTorch, from the wheel that travelled with the binaries.
wheel=$(ls "$src"/bitsandbytes-*.whl 2>/dev/null | head -1)
if [[ -z $wheel ]]; then
	note "bnb: skipped: no bitsandbytes wheel in $src"
elif ! command -v python3 >/dev/null; then
	note "bnb: skipped: no python3"
else
	bnb_args=(--peak-gbps "$peak" --json "$out/bnb.json" --markdown "$out/bnb.md")
	if [[ $dry == 1 ]]; then
		bnb_args+=(--shapes "$shapes" --m "$rows" --stream-mib 1 --min-time 0.005)
	fi
	step "bnb install" 60 python3 -m pip install --quiet --no-deps --no-index --target "$bin/site" "$wheel" >"$out/bnb.txt" 2>&1 &&
		PYTHONPATH="$bin/site${PYTHONPATH:+:$PYTHONPATH}" step bnb 75 python3 "$src/bnb_bench.py" "${bnb_args[@]}" >>"$out/bnb.txt" 2>&1
	[[ -f $out/bnb.md ]] && cat "$out/bnb.md"
fi

# Each GPU formulation forced, on one shape: the reductions against the GEMM forms at each M.
forms=nf4@mul-reduce,nf4@prologue-dot,int8@mul-reduce,int8@prologue-dot,ternary@sliced-sum,ternary@prologue-dot,ternary@codes-dot,binary1@sliced-sum,binary1@prologue-dot
step forms 75 "$bin/bench" -dtype bfloat16 -peak-gbps "$peak" -contexts add -shapes "$hlo_shape" -m "$rows" -formats "$forms" \
	-stream-bytes "$stream" -max-layers "$layers" -min-time "$mintime" -json "$out/forms.json" -markdown "$out/forms.md" >"$out/forms.txt" 2>&1
XLA_FLAGS="${XLA_FLAGS:-} $gemm_v2" step "forms gemm-v2" 45 "$bin/bench" -dtype bfloat16 -peak-gbps "$peak" -contexts add \
	-shapes "$hlo_shape" -m "${rows#1,}" -formats nf4@prologue-dot,int8@prologue-dot,ternary@prologue-dot \
	-stream-bytes "$stream" -max-layers "$layers" -min-time "$mintime" -json "$out/forms-gemm-v2.json" -markdown "$out/forms-gemm-v2.md" \
	>"$out/forms-gemm-v2.txt" 2>&1
note "total: $((SECONDS - start))s of ${budget}s"
# Everything in one file too, for transports that bring back only a few files.
tar -czf "$out.tgz" -C "$out" . && mv "$out.tgz" "$out/all.tgz"
exit $status
