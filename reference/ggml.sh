#!/usr/bin/env bash
# Reference vectors for the GGML block types (packages gguf and ggml) from ggml itself: gguf-py and
# ggml's C reference quantizers and dequantizers (reference/gen_ggml.py).
#
#   reference/ggml.sh gen        regenerate reference/testdata/ggml in place (then review and commit)
#   reference/ggml.sh verify     regenerate into a temp dir and compare byte for byte with reference/testdata/ggml
#   reference/ggml.sh lib        only build the ggml library (prints its path)
#
# Everything lives in $QUANTA_GGML_REF (default ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/ggml-ref), outside
# git: a virtualenv from reference/requirements-ggml.txt, and libggml-base built with CMake from the
# llama-cpp-python 0.3.36 sdist (pip download, sha256-pinned; Release, GGML_NATIVE=OFF: the reference
# code is compiled for baseline x86-64, as ggml-base always is; about 20 s on 2 cores). The tensor
# digests need the assets of `make assets` (SmolLM2 Q4_1, Gemma-3 Q4_K_M).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/reference
WORK=${QUANTA_GGML_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/quanta/ggml-ref}
VENV=${QUANTA_GGML_VENV:-$WORK/venv}
REQ=$HERE/requirements-ggml.txt
TESTDATA=$HERE/testdata/ggml
ASSETS=${QUANTA_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/quanta/assets}
SDIST=llama_cpp_python-0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

VENV_NAME=ggml-reference
PY_MIN=10 PY_MAX=13
PY_CANDIDATES=(python3.11 python3.12 python3.13 python3)
PY_NEED="Python 3.10-3.13 (set PYTHON=/path/to/python3)"
# shellcheck source=../scripts/venv.sh
source "$ROOT/scripts/venv.sh"

# build_lib prints the path of libggml-base, building it first if needed.
build_lib() {
  local lib=$WORK/build/bin/libggml-base.so tarball=$WORK/sdist/$SDIST.tar.gz
  if [ -f "$lib" ]; then echo "$lib"; return 0; fi
  if [ ! -f "$tarball" ]; then
    "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      "llama-cpp-python==${SDIST#llama_cpp_python-}" -d "$WORK/sdist" >&2
  fi
  [ "$(sha256sum "$tarball" | cut -d' ' -f1)" = "$SDIST_SHA256" ] ||
    { echo "$VENV_NAME: $tarball does not have the pinned sha256 $SDIST_SHA256" >&2; return 1; }
  rm -rf "${WORK:?}/src" "$WORK/build"
  mkdir -p "$WORK/src"
  tar -xzf "$tarball" -C "$WORK/src"
  cmake -S "$WORK/src/$SDIST/vendor/llama.cpp" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >"$WORK/build.log" 2>&1 &&
    cmake --build "$WORK/build" --target ggml-base -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" >>"$WORK/build.log" 2>&1 ||
    { echo "$VENV_NAME: building ggml failed; see $WORK/build.log" >&2; return 1; }
  echo "$lib"
}

# generate DIR writes the vectors and the tensor digests of the assets into DIR.
generate() {
  local out=$1 lib
  lib=$(build_lib)
  "$VENV/bin/python" "$HERE/gen_ggml.py" vectors --lib "$lib" --out "$out"
  "$VENV/bin/python" "$HERE/gen_ggml.py" digests --lib "$lib" --out "$out/smollm2_tensors.json" \
    --gguf "$ASSETS/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  "$VENV/bin/python" "$HERE/gen_ggml.py" digests --lib "$lib" --out "$out/gemma3_tensors.json" \
    --gguf "$ASSETS/gemma3/gemma-3-270m-q4_k_m.gguf"
}

cmd=${1:-help}
case "$cmd" in
  lib)
    ensure_venv
    build_lib
    ;;
  gen)
    ensure_venv
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp/ggml"
    rm -rf "$TESTDATA"
    mv "$tmp/ggml" "$TESTDATA"
    echo "$VENV_NAME: wrote reference/testdata/ggml ($(du -sh "$TESTDATA" | cut -f1))"
    ;;
  verify)
    ensure_venv
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp/ggml"
    if diff -rq "$TESTDATA" "$tmp/ggml"; then
      echo "$VENV_NAME: $(ls "$TESTDATA" | wc -l) files identical"
    else
      echo "$VENV_NAME: reference/testdata/ggml differs from a fresh run" >&2
      exit 1
    fi
    ;;
  *)
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    [ "$cmd" = help ] || exit 2
    ;;
esac
