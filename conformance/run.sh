#!/usr/bin/env bash
# Reference harness for the eformer conformance vectors.
#
#   conformance/run.sh gen            regenerate the vectors into a temp dir and compare them byte for
#                                     byte with conformance/testdata/ (fails listing the differing files)
#   conformance/run.sh update         regenerate conformance/testdata/ in place
#   conformance/run.sh bench OUT.json time eformer on JAX CPU (conformance/bench_peer.py), JSON to OUT.json
#                                     (extra arguments are passed to bench_peer.py)
#   conformance/run.sh venv           only create/refresh the virtualenv
#
# The virtualenv lives in .venv-ref/ at the repository root (override with QUANTA_REF_VENV); it is created
# from conformance/requirements.txt and reused while that file is unchanged. jax 0.11.2 needs Python >= 3.12:
# set PYTHON to choose the interpreter, otherwise python3.13/python3.12/python3 on PATH or a pyenv 3.12/3.13
# install is used.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/conformance
VENV=${QUANTA_REF_VENV:-$ROOT/.venv-ref}
REQ=$HERE/requirements.txt
TESTDATA=$HERE/testdata

py_ok() { "$1" -c 'import sys; sys.exit(0 if (3, 12) <= sys.version_info[:2] < (3, 14) else 1)' 2>/dev/null; }

find_python() {
  local c
  for c in ${PYTHON:-} python3.12 python3.13 python3 "$HOME"/.pyenv/versions/3.12*/bin/python3 \
           "$HOME"/.pyenv/versions/3.13*/bin/python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && py_ok "$c"; then command -v "$c"; return 0; fi
  done
  echo "conformance: need Python 3.12 or 3.13 for jax 0.11.2 (set PYTHON=/path/to/python3.12)" >&2
  return 1
}

ensure_venv() {
  local stamp=$VENV/.quanta-requirements want py
  want=$(sha256sum "$REQ" | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    return 0
  fi
  if ! { [ -x "$VENV/bin/python" ] && py_ok "$VENV/bin/python"; }; then
    py=$(find_python)
    echo "conformance: creating $VENV with $py" >&2
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
  fi
  echo "conformance: installing conformance/requirements.txt into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$REQ"
  echo '*' >"$VENV/.gitignore"
  echo "$want" >"$stamp"
}

generate() { # $1 = output dir (absent or empty)
  "$VENV/bin/python" "$HERE/gen_vectors.py" --out "$1"
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
    if [ ! -d "$TESTDATA" ]; then
      echo "conformance: $TESTDATA does not exist; run: conformance/run.sh update" >&2
      exit 1
    fi
    if ! diff -rq "$TESTDATA" "$tmp/testdata" >"$tmp/diff.txt"; then
      echo "conformance: regenerated vectors differ from the committed conformance/testdata/:" >&2
      sed -e "s#$tmp/testdata#<regenerated>#g" -e "s#$TESTDATA#conformance/testdata#g" "$tmp/diff.txt" >&2
      echo "conformance: $(wc -l <"$tmp/diff.txt") difference(s); if intended, run: conformance/run.sh update" >&2
      exit 1
    fi
    echo "conformance: $(ls "$TESTDATA" | wc -l) files identical to conformance/testdata/"
    ;;
  update)
    ensure_venv
    tmp=$(mktemp -d "$HERE/.testdata.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    generate "$tmp/testdata"
    rm -rf "$TESTDATA"
    mv "$tmp/testdata" "$TESTDATA"
    echo "conformance: wrote $TESTDATA"
    ;;
  bench)
    ensure_venv
    "$VENV/bin/python" "$HERE/bench_peer.py" "$@"
    ;;
  *)
    echo "usage: $0 gen|update|bench OUT.json [args]|venv" >&2
    exit 2
    ;;
esac
