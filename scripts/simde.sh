#!/usr/bin/env bash
# simde.sh prints the include folder of SIMDe 0.8.2 (portable implementations of the x86 SIMD
# intrinsics), fetched once from the pinned PyPI wheel cmeel-simde==0.8.2 into
# ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/simde. `make test` builds the AVX-512 kernels over it
# (internal/cpukernels, build tag qk_simde), so that path is tested on CPUs without AVX-512 too.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/quanta/simde"
SPEC="cmeel-simde==0.8.2"
WHEEL="cmeel_simde-0.8.2-0-py3-none-any.whl"
SHA=e44917e0dbcd62cb841a9232a06087e74583c5e8366831ea9390400fcc8f50bb
INCLUDE="${DIR}/cmeel.prefix/include"

if [[ -f "${INCLUDE}/simde/x86/avx512.h" && -f "${DIR}/.ok" ]]; then
  echo "${INCLUDE}"
  exit 0
fi
mkdir -p "${DIR}"
tmp="$(mktemp -d "${DIR}/run.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
"${PYTHON}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "${tmp}" "${SPEC}" >&2
if [[ "$(sha256sum "${tmp}/${WHEEL}" | cut -d' ' -f1)" != "${SHA}" ]]; then
  echo "simde.sh: ${WHEEL} does not have the pinned sha256 ${SHA}" >&2
  exit 1
fi
(cd "${tmp}" && unzip -q -o "${WHEEL}" 'cmeel.prefix/include/*' && rm -rf "${DIR}/cmeel.prefix" && mv cmeel.prefix "${DIR}/")
touch "${DIR}/.ok"
echo "${INCLUDE}"
