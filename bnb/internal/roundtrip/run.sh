#!/usr/bin/env bash
# The bitsandbytes <-> quanta round trip, both directions, with the reference virtualenv
# ($QUANTA_TORCH_VENV, default ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/venvs/ref-torch: torch + bitsandbytes 0.50.2 + safetensors).
# Never run in CI. Usage: bnb/internal/roundtrip/run.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../../.."
venv="${QUANTA_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/quanta/venvs/ref-torch}"
dir="${1:-$(mktemp -d)}"
mkdir -p "$dir"
export OMP_NUM_THREADS=1 TORCHDYNAMO_DISABLE=1 GOMLX_NO_AUTO_INSTALL=1
"$venv/bin/python" bnb/internal/roundtrip/roundtrip.py make "$dir"
go run ./bnb/internal/roundtrip -write "$dir"
go run ./bnb/internal/roundtrip -read "$dir"
"$venv/bin/python" bnb/internal/roundtrip/roundtrip.py check "$dir"
