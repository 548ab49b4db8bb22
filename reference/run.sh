#!/usr/bin/env bash
# Reference harness: vectors from the real reference libraries (transformers/PyTorch, bitsandbytes,
# llama.cpp) for quanta's real-model, bitsandbytes and QAT checks.
#
#   reference/run.sh venv                 create/refresh the virtualenv only
#   reference/run.sh gen SET...           regenerate reference/testdata/SET in place (then review and commit)
#   reference/run.sh verify [SET...]      regenerate into a temp dir and compare byte for byte with
#                                         reference/testdata/SET (default: tokenizer bnb minilm smollm2)
#   reference/run.sh load FILE.safetensors OUT.npy [args]   reference/bnb_load.py (a bnb layer from a file)
#   reference/run.sh speed [args]         reference/llamacpp_speed.py (llama.cpp tok/s; run on a quiet machine)
#   reference/run.sh py SCRIPT [args]     run any script with the venv's python
#
# SETs: tokenizer (llama.cpp ids, ~10 s), bnb (~45 s), minilm (~40 s), smollm2 (~4 min), fmnist (~7 min,
# trains a model). The virtualenv lives in $QUANTA_TORCH_VENV (default ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/venvs/ref-torch), outside
# git; it is created from reference/requirements.txt on first use (about 5 GB download plus a
# 6-minute llama.cpp build) and reused while that file is unchanged. Assets come from `make assets`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/reference
VENV=${QUANTA_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quanta/venvs/ref-torch}
REQ=$HERE/requirements.txt
TESTDATA=$HERE/testdata
DEFAULT_VERIFY=(tokenizer bnb minilm smollm2)

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TORCHDYNAMO_DISABLE=1
# One thread everywhere: float reductions must not depend on the core count (and the machine is shared).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

VENV_NAME=reference
PY_MIN=11 PY_MAX=13
PY_CANDIDATES=(python3.11 python3.12 python3.13 python3 "$HOME"/.pyenv/versions/3.11*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3)
PY_NEED="Python 3.11-3.13 (set PYTHON=/path/to/python3)"
VENV_INSTALL_NOTE=" (first time: ~5 GB, llama.cpp build ~6 min)"
VENV_PIP_ENV=(CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}")
# shellcheck source=../scripts/venv.sh
source "$ROOT/scripts/venv.sh"

generate() { # $1 = set, $2 = output dir
  local s=$1 out=$2
  case "$s" in
    tokenizer) "$VENV/bin/python" "$HERE/gen_tokens.py" --out "$out" ;;
    bnb) "$VENV/bin/python" "$HERE/gen_bnb.py" --out "$out" ;;
    minilm) "$VENV/bin/python" "$HERE/gen_minilm.py" --out "$out" ;;
    smollm2) "$VENV/bin/python" "$HERE/gen_smollm.py" --out "$out" ;;
    fmnist) "$VENV/bin/python" "$HERE/fashion_mnist.py" --out "$out" ;;
    *) echo "reference: unknown set '$s' (tokenizer bnb minilm smollm2 fmnist)" >&2; return 2 ;;
  esac
}

cmd=${1:-help}
shift || true
case "$cmd" in
  venv)
    ensure_venv
    ;;
  gen)
    [ $# -gt 0 ] || { echo "usage: $0 gen SET..." >&2; exit 2; }
    ensure_venv
    for s in "$@"; do
      tmp=$(mktemp -d "$HERE/.testdata.tmp.XXXXXX")
      trap 'rm -rf "$tmp"' EXIT
      generate "$s" "$tmp/$s"
      mkdir -p "$TESTDATA"
      rm -rf "${TESTDATA:?}/$s"
      mv "$tmp/$s" "$TESTDATA/$s"
      rm -rf "$tmp"
      echo "reference: wrote reference/testdata/$s ($(du -sh "$TESTDATA/$s" | cut -f1))"
    done
    ;;
  verify)
    ensure_venv
    [ $# -gt 0 ] || set -- "${DEFAULT_VERIFY[@]}"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fail=0
    for s in "$@"; do
      generate "$s" "$tmp/$s"
      if [ ! -d "$TESTDATA/$s" ]; then
        echo "reference: reference/testdata/$s does not exist; run: reference/run.sh gen $s" >&2
        fail=1; continue
      fi
      if ! diff -rq "$TESTDATA/$s" "$tmp/$s" >"$tmp/diff.txt"; then
        sed -e "s#$tmp/#<regenerated>/#g" -e "s#$TESTDATA/#reference/testdata/#g" "$tmp/diff.txt" >&2
        echo "reference: $s: $(wc -l <"$tmp/diff.txt") difference(s)" >&2
        fail=1
      else
        echo "reference: $s: $(ls "$TESTDATA/$s" | wc -l) files identical"
      fi
    done
    exit $fail
    ;;
  load)
    ensure_venv
    "$VENV/bin/python" "$HERE/bnb_load.py" "$@"
    ;;
  speed)
    ensure_venv
    unset OMP_NUM_THREADS MKL_NUM_THREADS
    "$VENV/bin/python" "$HERE/llamacpp_speed.py" "$@"
    ;;
  py)
    ensure_venv
    "$VENV/bin/python" "$@"
    ;;
  *)
    sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    [ "$cmd" = help ] || exit 2
    ;;
esac
