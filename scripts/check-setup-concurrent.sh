#!/usr/bin/env bash
# check-setup-concurrent.sh runs scripts/setup-xla.sh from two clones at once, as one user with an
# empty cache would (a fresh HOME under a temporary folder), and checks that both runs succeed,
# that the preferred plugin is installed, and that quanta's kernels register with it. It fetches
# the wheel from PyPI: run it by hand or from `make check-setup`, not from `make test`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
export HOME="${WORK}/home" XDG_CACHE_HOME= GOMLX_NO_AUTO_INSTALL=1
export GOPATH="$(go env GOPATH)" GOMODCACHE="$(go env GOMODCACHE)" GOCACHE="$(go env GOCACHE)"
mkdir -p "${HOME}"
for clone in a b; do
  git -C "${ROOT}" worktree add --quiet --detach "${WORK}/${clone}" HEAD
done
trap 'git -C "${ROOT}" worktree remove --force "${WORK}/a"; git -C "${ROOT}" worktree remove --force "${WORK}/b"; rm -rf "${WORK}"' EXIT

"${WORK}/a/scripts/setup-xla.sh" >"${WORK}/a.log" 2>&1 & pa=$!
"${WORK}/b/scripts/setup-xla.sh" >"${WORK}/b.log" 2>&1 & pb=$!
status=0
wait "${pa}" || { echo "check-setup: the first clone's setup failed:"; cat "${WORK}/a.log"; status=1; }
wait "${pb}" || { echo "check-setup: the second clone's setup failed:"; cat "${WORK}/b.log"; status=1; }
for clone in a b; do
  if grep -q WARNING "${WORK}/${clone}.log"; then
    echo "check-setup: clone ${clone} warned:"; cat "${WORK}/${clone}.log"; status=1
  fi
done
stamp="${HOME}/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so.quanta-stamp"
preferred="$(grep -m1 -o '"lammps-jax-pjrt-cpu==[^ ]*' "${ROOT}/scripts/setup-xla.sh" | tr -d '"')"
if [[ "$(sed -n 1p "${stamp}" 2>/dev/null)" != "${preferred}" ]]; then
  echo "check-setup: installed $(sed -n 1p "${stamp}" 2>/dev/null || echo nothing), want ${preferred}"; status=1
fi
for clone in a b; do
  if ! (cd "${WORK}/${clone}" && go run ./cmd/quanta doctor) >"${WORK}/${clone}.doctor" 2>&1 ||
    ! grep -q '^kernels: .* registered' "${WORK}/${clone}.doctor"; then
    echo "check-setup: clone ${clone}: no kernels after setup:"; cat "${WORK}/${clone}.doctor"; status=1
  fi
done
if [[ ${status} == 0 ]]; then
  echo "check-setup: both clones' setups succeeded at once; ${preferred} installed, kernels registered"
  sed 's/^/  a: /' "${WORK}/a.log"; sed 's/^/  b: /' "${WORK}/b.log"
fi
exit ${status}
