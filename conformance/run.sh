#!/usr/bin/env bash
# Reference harness for the eformer conformance vectors.
#
#   conformance/run.sh gen            regenerate the vectors and the randomized sample into a temp dir and
#                                     compare them byte for byte with conformance/testdata/ and
#                                     conformance/testdata-random/ (fails listing the differing files)
#   conformance/run.sh update         regenerate conformance/testdata/ and conformance/testdata-random/ in place
#   conformance/run.sh random N SEED [DIR]
#                                     N randomized cases from eformer (conformance/gen_random.py, seed SEED)
#                                     into DIR (default: a temp dir, removed after), then the Go comparison
#                                     (go run ./conformance/randomrun) on the backend GOMLX_BACKEND selects
#   conformance/run.sh bench OUT.json time eformer on JAX CPU (conformance/bench_peer.py), JSON to OUT.json
#                                     (extra arguments are passed to bench_peer.py)
#   conformance/run.sh venv           only create/refresh the virtualenv
#
# The virtualenv lives in ${XDG_CACHE_HOME:-~/.cache}/quanta/venvs/eformer (override with
# QUANTA_REF_VENV); it is created from conformance/requirements.txt and reused while that file is unchanged. jax 0.11.2 needs Python >= 3.12:
# set PYTHON to choose the interpreter, otherwise python3.13/python3.12/python3 on PATH or a pyenv 3.12/3.13
# install is used.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/conformance
VENV=${QUANTA_REF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quanta/venvs/eformer}
REQ=$HERE/requirements.txt
TESTDATA=$HERE/testdata

VENV_NAME=conformance
PY_MIN=12 PY_MAX=13
PY_CANDIDATES=(python3.12 python3.13 python3 "$HOME"/.pyenv/versions/3.12*/bin/python3 "$HOME"/.pyenv/versions/3.13*/bin/python3)
PY_NEED="Python 3.12 or 3.13 for jax 0.11.2 (set PYTHON=/path/to/python3.12)"
# shellcheck source=../scripts/venv.sh
source "$ROOT/scripts/venv.sh"

generate() { # $1 = output dir (absent or empty)
  "$VENV/bin/python" "$HERE/gen_vectors.py" --out "$1"
}

# The committed randomized sample: small inputs, few shapes, so `go test ./conformance/` stays quick.
SAMPLE_ARGS=(--n 300 --seed 101 --max-elements 1024 --pool 80)

generate_sample() { # $1 = output dir (absent or empty)
  "$VENV/bin/python" "$HERE/gen_random.py" "${SAMPLE_ARGS[@]}" --out "$1"
}

cmd=${1:-gen}
shift || true
case "$cmd" in
  venv)
    ensure_venv
    ;;
  gen)
    ensure_venv
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp/testdata"
    generate_sample "$tmp/testdata-random"
    for d in testdata testdata-random; do
      if [ ! -d "$HERE/$d" ]; then
        echo "conformance: $HERE/$d does not exist; run: conformance/run.sh update" >&2
        exit 1
      fi
    done
    if ! { diff -rq "$TESTDATA" "$tmp/testdata" && diff -rq "$HERE/testdata-random" "$tmp/testdata-random"; } >"$tmp/diff.txt"; then
      echo "conformance: regenerated vectors differ from the committed ones:" >&2
      sed -e "s#$tmp/#<regenerated>/#g" -e "s#$HERE/#conformance/#g" "$tmp/diff.txt" >&2
      echo "conformance: $(wc -l <"$tmp/diff.txt") difference(s); if intended, run: conformance/run.sh update" >&2
      exit 1
    fi
    echo "conformance: $(ls "$TESTDATA" | wc -l) files identical to conformance/testdata/, $(ls "$HERE/testdata-random" | wc -l) to conformance/testdata-random/"
    ;;
  update)
    ensure_venv
    tmp=$(mktemp -d "$HERE/.testdata.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp/testdata"
    generate_sample "$tmp/testdata-random"
    rm -rf "$TESTDATA" "$HERE/testdata-random"
    mv "$tmp/testdata" "$TESTDATA"
    mv "$tmp/testdata-random" "$HERE/testdata-random"
    echo "conformance: wrote $TESTDATA and $HERE/testdata-random"
    ;;
  random)
    n=${1:?usage: $0 random N SEED [DIR]}
    seed=${2:?usage: $0 random N SEED [DIR]}
    ensure_venv
    if [ -n "${3:-}" ]; then
      out=$3
      # The comparison runs from the repository root: a relative DIR is the caller's.
      case $out in /*) ;; *) out=$PWD/$out ;; esac
    else
      out=$(mktemp -d)/random
      trap 'rm -rf "$(dirname "$out")"' EXIT
    fi
    "$VENV/bin/python" "$HERE/gen_random.py" --n "$n" --seed "$seed" --out "$out"
    (cd "$ROOT" && go run ./conformance/randomrun -dir "$out")
    ;;
  bench)
    ensure_venv
    "$VENV/bin/python" "$HERE/bench_peer.py" "$@"
    ;;
  *)
    echo "usage: $0 gen|update|random N SEED [DIR]|bench OUT.json [args]|venv" >&2
    exit 2
    ;;
esac
