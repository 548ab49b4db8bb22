#!/usr/bin/env bash
# setup-xla.sh installs the XLA CPU PJRT plugin where GoMLX looks for it:
#   $HOME/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so
#
# GoMLX's own installer downloads the plugin from GitHub; this one takes it from a pinned
# PyPI wheel, fetched with `python3 -m pip download` into $HOME/.cache/quanta (nothing is
# installed into any site-packages). The wheels are tried in order; the first whose plugin
# loads and runs a graph through GoMLX (`quanta doctor`) is kept.
#
# Idempotent: when the installed plugin's stamp file matches, it returns at once.
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

# verify PLUGIN_PATH: loads the plugin through GoMLX and runs a graph on it.
verify() {
  if ! command -v go >/dev/null; then
    log "go not found: cannot check that $1 loads; keeping it unchecked"
    return 0
  fi
  (cd "${ROOT}" && GOMLX_BACKEND="xla:$1" QUANTA_CPU_DEVICES= go run ./cmd/quanta doctor >/dev/null)
}

# Fast path: installed by this script, with a pinned wheel, unchanged since.
if [[ -z "${QUANTA_SETUP_FORCE:-}" && -f "${DEST}" && -f "${STAMP}" ]]; then
  stamped_spec="$(sed -n 1p "${STAMP}")"
  stamped_id="$(sed -n 2p "${STAMP}")"
  for candidate in "${CANDIDATES[@]}"; do
    if [[ "${candidate%% *}" == "${stamped_spec}" && "$(file_id "${DEST}")" == "${stamped_id}" ]]; then
      log "XLA CPU plugin already installed: ${DEST} (${stamped_spec})"
      exit 0
    fi
  done
fi

# A plugin installed by other means (e.g. GoMLX's installer) is kept if it works.
if [[ -z "${QUANTA_SETUP_FORCE:-}" && -f "${DEST}" && ! -f "${STAMP}" ]]; then
  if verify "${DEST}"; then
    log "keeping the XLA CPU plugin found at ${DEST} (not installed by quanta; QUANTA_SETUP_FORCE=1 replaces it)"
    exit 0
  fi
  log "the plugin at ${DEST} does not load; replacing it"
fi

if ! "${PYTHON}" -m pip --version >/dev/null 2>&1; then
  log "ERROR: '${PYTHON} -m pip' is not available; install pip (or set PYTHON) and rerun 'make setup'"
  exit 1
fi

errors=()
for candidate in "${CANDIDATES[@]}"; do
  spec="${candidate%% *}"
  member="${candidate#* }"
  dir="${CACHE}/${spec}"
  mkdir -p "${dir}"
  log "fetching ${spec} from PyPI (pip download, into ${dir})"
  if ! pip_out="$("${PYTHON}" -m pip download --quiet --no-deps --only-binary=:all: --dest "${dir}" "${spec}" 2>&1)"; then
    errors+=("${spec}: pip download failed: $(echo "${pip_out}" | grep -m1 -i error || echo "${pip_out}" | tail -n1)")
    continue
  fi
  wheel="$(ls -t "${dir}"/*.whl 2>/dev/null | head -n1)"
  if [[ -z "${wheel}" ]]; then
    errors+=("${spec}: no wheel in ${dir} after pip download")
    continue
  fi
  plugin="${dir}/pjrt_c_api_cpu_plugin.so"
  if ! "${PYTHON}" - "${wheel}" "${member}" "${plugin}" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  then
    errors+=("${spec}: ${member} not found in ${wheel}")
    continue
  fi
  mv -f "${plugin}.tmp" "${plugin}"
  chmod 755 "${plugin}"
  log "checking that ${spec}'s plugin loads and runs a graph"
  if ! verify "${plugin}"; then
    errors+=("${spec}: its plugin did not load or run a graph through GoMLX (see the doctor error above)")
    continue
  fi
  mkdir -p "${DEST_DIR}"
  mv -f "${plugin}" "${DEST}.tmp"
  mv -f "${DEST}.tmp" "${DEST}"
  printf '%s\n%s\n' "${spec}" "$(file_id "${DEST}")" >"${STAMP}"
  log "installed ${DEST} from ${spec}"
  exit 0
done

log "ERROR: could not install the XLA CPU PJRT plugin:"
for e in "${errors[@]}"; do log "  - ${e}"; done
log "quanta still runs on GoMLX's pure-Go backend (GOMLX_BACKEND=go), slowly."
exit 1
