#!/usr/bin/env bash
# accel-binaries.sh builds into accel-binaries/ everything tpu_tests/run-on-device.sh needs on an
# accelerator machine that has no Go toolchain and no network (its Python with PyTorch and JAX's
# accelerator plugin is there already):
#   quanta.gz, bench.gz, tpu_tests.test.gz  the commands and the accelerator suite, x86-64 Linux,
#                                          cgo, stripped, gzip-compressed (the script unpacks them)
#   bitsandbytes-<v>-...whl                bitsandbytes for the side-by-side NF4 figure, the PyPI
#                                          wheel with only its CUDA 13 library (the machines'
#                                          PyTorch is built for CUDA 13.0)
#   run-on-device.sh, bnb_bench.py         the device script and its bitsandbytes benchmark
# and fails when the folder exceeds ACCEL_MAX_MIB (it travels to the machine with the working tree,
# 64 MiB in all). The bitsandbytes wheel is fetched once with `pip download` into the cache.
# Environment: GO (default go), PYTHON (default python3), ACCEL_MAX_MIB (default 48).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GO="${GO:-go}"
PYTHON="${PYTHON:-python3}"
MAX_MIB="${ACCEL_MAX_MIB:-48}"
OUT="${ROOT}/accel-binaries"
BNB_VERSION=0.50.2
BNB_WHEEL="bitsandbytes-${BNB_VERSION}-py3-none-manylinux_2_24_x86_64.whl"
BNB_KEEP="bitsandbytes/libbitsandbytes_cuda130.so"
CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/quanta/wheels"

log() { echo "accel-binaries: $*" >&2; }

rm -rf "${OUT}"
mkdir -p "${OUT}"
build="$(mktemp -d)"
trap 'rm -rf "${build}"' EXIT
cd "${ROOT}"
export GOOS=linux GOARCH=amd64 CGO_ENABLED=1
"${GO}" test -c -ldflags='-s -w' -o "${build}/tpu_tests.test" ./tpu_tests
"${GO}" build -ldflags='-s -w' -o "${build}/bench" ./bench
"${GO}" build -ldflags='-s -w' -o "${build}/quanta" ./cmd/quanta
for b in tpu_tests.test bench quanta; do
	gzip -9 -n -c "${build}/${b}" >"${OUT}/${b}.gz"
done

if [[ ! -f "${CACHE}/${BNB_WHEEL}" ]]; then
	mkdir -p "${CACHE}"
	log "fetching bitsandbytes==${BNB_VERSION} (pip download, into ${CACHE})"
	"${PYTHON}" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_24_x86_64 \
		--python-version 3.12 --implementation cp --dest "${CACHE}" "bitsandbytes==${BNB_VERSION}"
fi
# The wheel without the libraries of other CUDA, ROCm and XPU versions; RECORD lists what stays.
"${PYTHON}" - "${CACHE}/${BNB_WHEEL}" "${OUT}/${BNB_WHEEL}" "${BNB_KEEP}" <<'PY'
import re, sys, zipfile
src, dst, keep = sys.argv[1:]
drop = lambda name: re.fullmatch(r"bitsandbytes/libbitsandbytes_\w+\.(so|dll|dylib)", name) and name != keep
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    names = zin.namelist()
    if keep not in names:
        sys.exit(f"{keep} not in {src}")
    for name in names:
        if drop(name):
            continue
        data = zin.read(name)
        if name.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(l for l in lines if not drop(l.split(",", 1)[0])).encode()
        zout.writestr(zin.getinfo(name), data)
PY
cp tpu_tests/run-on-device.sh tpu_tests/bnb_bench.py "${OUT}/"

du -ah "${OUT}" | sort -h
total=$(du -sm "${OUT}" | cut -f1)
if ((total > MAX_MIB)); then
	log "ERROR: ${OUT} holds ${total} MiB, more than ${MAX_MIB} MiB"
	exit 1
fi
log "${OUT}: ${total} MiB (limit ${MAX_MIB} MiB)"
