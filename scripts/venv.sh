# Sourced by conformance/run.sh and reference/run.sh: finds a Python in a version range and keeps a
# virtualenv in step with a requirements file (reused while the file's hash is unchanged).
#
# The caller sets, before calling ensure_venv:
#   ROOT            the repository root
#   VENV_NAME       the prefix of the messages (conformance, reference)
#   VENV, REQ       the virtualenv folder and the requirements file
#   PY_MIN, PY_MAX  the accepted Python versions 3.PY_MIN to 3.PY_MAX
#   PY_CANDIDATES   an array of interpreters to try after $PYTHON
#   PY_NEED         what the error says is needed when none fits
# and may set VENV_INSTALL_NOTE (added to the install message), VENV_PIP_ENV (an array of VAR=value
# for pip) and VENV_BUILD (an array of VAR=value, the build options of packages built from source,
# also passed to pip: part of what the virtualenv is kept in step with, and never served from
# pip's cache of wheels built with other options).

py_ok() { "$1" -c "import sys; sys.exit(0 if (3, $PY_MIN) <= sys.version_info[:2] < (3, $((PY_MAX + 1))) else 1)" 2>/dev/null; }

find_python() {
  local c
  for c in ${PYTHON:-} "${PY_CANDIDATES[@]}"; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && py_ok "$c"; then command -v "$c"; return 0; fi
  done
  echo "$VENV_NAME: need $PY_NEED" >&2
  return 1
}

ensure_venv() {
  local stamp=$VENV/.quanta-requirements want py
  local -a fresh=()
  if [ -n "${VENV_BUILD[*]:-}" ]; then
    fresh=(--no-cache-dir --force-reinstall)
  fi
  want=$({ cat "$REQ"; if [ ${#fresh[@]} -gt 0 ]; then printf '%s\n' "${VENV_BUILD[@]}"; fi; } | sha256sum | cut -d' ' -f1)
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    return 0
  fi
  if ! { [ -x "$VENV/bin/python" ] && py_ok "$VENV/bin/python"; }; then
    py=$(find_python)
    echo "$VENV_NAME: creating $VENV with $py" >&2
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$py" -m venv "$VENV"
  fi
  echo "$VENV_NAME: installing ${REQ#"$ROOT"/} into $VENV${VENV_INSTALL_NOTE:-}" >&2
  env ${VENV_PIP_ENV[@]+"${VENV_PIP_ENV[@]}"} ${VENV_BUILD[@]+"${VENV_BUILD[@]}"} \
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps ${fresh[@]+"${fresh[@]}"} -r "$REQ"
  echo "$want" >"$stamp"
}
