#!/usr/bin/env bash
# llama.cpp on GGUF files as they are (reference/gen_llamacpp.py, gen_tokens.py, gen_spm_vocab.py, gen_rope_freqs.py, gen_qwen2.py):
# SmolLM2 in llama.cpp's block types, each file's perplexity, Gemma-3's tokenizer vectors, a tiny model with
# rope_freqs, a tiny Qwen2 model.
#
#   reference/llamacpp.sh quants     write SmolLM2 in Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q8_0 with llama.cpp's quantizer
#                                    into $QUANTA_ASSETS/smollm2-quants (make assets-quants; not committed)
#   reference/llamacpp.sh gen        regenerate reference/testdata/llamacpp (perplexities), tokenizer_gemma3, tokenizer_spm,
#                                    llamacpp_rope_freqs and llamacpp_qwen2 in place (then review and commit)
#   reference/llamacpp.sh verify     regenerate into a temp dir and compare byte for byte with the committed sets
#   reference/llamacpp.sh speed ARGS llama.cpp's prompt and decode tokens/s (reference/llamacpp_speed.py ARGS;
#                                    make bench-gguf)
#
# The virtualenv lives in $QUANTA_LLAMACPP_VENV (default ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/llamacpp-ref/venv),
# outside git, from reference/requirements-llamacpp.txt (llama-cpp-python 0.3.36 built from its sdist: CMake, default
# flags, about 10 minutes on 2 idle cores; no torch). Assets come from `make assets`. The perplexities take about 10
# minutes (each file is also scored as llama.cpp's F32 conversion of it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/reference
WORK=${QUANTA_LLAMACPP_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/quanta/llamacpp-ref}
VENV=${QUANTA_LLAMACPP_VENV:-$WORK/venv}
REQ=$HERE/requirements-llamacpp.txt
ASSETS=${QUANTA_ASSETS:-${XDG_CACHE_HOME:-$HOME/.cache}/quanta/assets}
QUANTS=$ASSETS/smollm2-quants
SETS=(llamacpp tokenizer_gemma3 tokenizer_spm llamacpp_rope_freqs llamacpp_qwen2)

# One thread everywhere: float reductions must not depend on the core count (and the machine is shared).
export OMP_NUM_THREADS=1

VENV_NAME=llamacpp-reference
PY_MIN=10 PY_MAX=13
PY_CANDIDATES=(python3.11 python3.12 python3.13 python3)
PY_NEED="Python 3.10-3.13 (set PYTHON=/path/to/python3)"
VENV_INSTALL_NOTE=" (first time: llama.cpp build, ~10 min)"
VENV_PIP_ENV=(CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}")
# ggml's native build (-march=native) runs AMX tiles where the CPU reports them; some virtual
# machines report AMX without enabling it, and its first tilezero then stops llama.cpp with
# SIGILL. Built without AMX, llama.cpp runs its AVX-512 or AVX2 kernels (an explicit -mno-amx-*
# outranks -march=native).
VENV_BUILD=(CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
# shellcheck source=../scripts/venv.sh
source "$ROOT/scripts/venv.sh"

# generate DIR writes both sets into DIR.
generate() {
  local out=$1
  "$VENV/bin/python" "$HERE/gen_llamacpp.py" quants --dir "$QUANTS"
  "$VENV/bin/python" "$HERE/gen_llamacpp.py" perplexity --quants "$QUANTS" --out "$out/llamacpp"
  "$VENV/bin/python" "$HERE/gen_tokens.py" --gguf "$ASSETS/gemma3/gemma-3-270m-q4_k_m.gguf" --no-transformers --chat \
    --out "$out/tokenizer_gemma3"
  "$VENV/bin/python" "$HERE/gen_spm_vocab.py" --gguf "$ASSETS/gemma3/gemma-3-270m-q4_k_m.gguf" --out "$out/tokenizer_spm"
  "$VENV/bin/python" "$HERE/gen_rope_freqs.py" --out "$out/llamacpp_rope_freqs"
  "$VENV/bin/python" "$HERE/gen_qwen2.py" --out "$out/llamacpp_qwen2"
}

cmd=${1:-help}
case "$cmd" in
  quants)
    ensure_venv
    "$VENV/bin/python" "$HERE/gen_llamacpp.py" quants --dir "$QUANTS"
    ;;
  gen)
    ensure_venv
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp"
    for s in "${SETS[@]}"; do
      rm -rf "${HERE:?}/testdata/$s"
      mv "$tmp/$s" "$HERE/testdata/$s"
      echo "$VENV_NAME: wrote reference/testdata/$s ($(du -sh "$HERE/testdata/$s" | cut -f1))"
    done
    ;;
  verify)
    ensure_venv
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp"
    fail=0
    for s in "${SETS[@]}"; do
      if diff -rq "$HERE/testdata/$s" "$tmp/$s"; then
        echo "$VENV_NAME: reference/testdata/$s: $(ls "$HERE/testdata/$s" | wc -l) files identical"
      else
        echo "$VENV_NAME: reference/testdata/$s differs from a fresh run" >&2
        fail=1
      fi
    done
    exit $fail
    ;;
  speed)
    ensure_venv
    shift
    "$VENV/bin/python" "$HERE/llamacpp_speed.py" "$@"
    ;;
  *)
    sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    [ "$cmd" = help ] || exit 2
    ;;
esac
