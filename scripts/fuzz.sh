#!/usr/bin/env bash
# fuzz.sh runs each fuzz target of the file and configuration readers for FUZZTIME under a memory
# limit, and fails on a crash, a panic, a failed check, or memory beyond the limit (`make fuzz`;
# docs/testing.md).
#
# Three guards, from the finest:
#   - every target checks that one input allocates at most 64 bytes per input byte plus 32 MiB
#     (testutil.AllocatesAtMost: runtime.MemStats.TotalAlloc, freed or not, touched or not);
#   - each process (the coordinator and its fuzz workers, child processes) runs under an
#     address-space limit, FUZZ_AS (prlimit --as, inherited by the workers): an allocation beyond it
#     fails, the worker dies with "out of memory", and Go's fuzzer reports the input as a crasher;
#     the Go runtime and the cgo libraries of the heavier test binaries reserve about 2.2 GiB of
#     address space before any input, hence the default of 3 GiB;
#   - the resident memory of each process is sampled every 0.2 s: beyond FUZZ_RSS_MB the run is
#     stopped and fails.
#
# A crasher is written by Go to the package's testdata/fuzz/<target>/, where `make test` then runs
# it as a seed. The corpus grows in Go's fuzz cache ($(go env GOCACHE)/fuzz), shared with
# `go test -fuzz`. Environment: GO (default go), FUZZTIME (default 20s), FUZZ_AS (default 3G),
# FUZZ_RSS_MB (default 1024), FUZZ_TARGETS (default: all, "package:Target ...").
set -euo pipefail

GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-20s}"
FUZZ_AS="${FUZZ_AS:-3G}"
FUZZ_RSS_MB="${FUZZ_RSS_MB:-1024}"
FUZZ_TARGETS="${FUZZ_TARGETS:-gguf:FuzzRead models/llama:FuzzLoadGGUF models/gemma3:FuzzLoadGGUF models/qwen2:FuzzLoadGGUF safetensors:FuzzRead models/minilm:FuzzLoadSafetensors bnb:FuzzReadLayers qlayers:FuzzLoadAdapters tokenizer:FuzzBPE tokenizer:FuzzWordPiece}"

cd "$(dirname "$0")/.."
root="$PWD"
module="$("$GO" list -m)"
cache="$("$GO" env GOCACHE)/fuzz/$module"
work="$(mktemp -d "${TMPDIR:-/tmp}/quanta-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log() { echo "fuzz: $*" >&2; }

# descendants prints the process ids below pid, children first.
descendants() {
  local child
  for child in $(pgrep -P "$1" || true); do
    echo "$child"
    descendants "$child"
  done
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

failed=()
summary=()
for target in $FUZZ_TARGETS; do
  pkg="${target%%:*}"
  name="${target##*:}"
  bin="$work/${pkg//\//_}.test"
  if [[ ! -x "$bin" ]]; then
    log "building ./$pkg"
    "$GO" test -c -fuzz=. -o "$bin" "./$pkg" # -fuzz: built with the fuzzer's coverage instrumentation
  fi
  out="$work/$name.${pkg//\//_}.log"
  crashers="$root/$pkg/testdata/fuzz/$name"
  before="$(ls "$crashers" 2>/dev/null || true)"
  log "$pkg $name for $FUZZTIME (address space $FUZZ_AS, resident ${FUZZ_RSS_MB} MiB a process)"
  start=$(date +%s)
  (cd "$root/$pkg" && exec prlimit --as="$(numfmt --from=iec "$FUZZ_AS")" -- "$bin" -test.run='^$' -test.fuzz="^${name}\$" \
    -test.fuzztime="$FUZZTIME" -test.fuzzminimizetime=0 -test.fuzzcachedir="$cache/$pkg") >"$out" 2>&1 &
  pid=$!
  peak=0
  over=""
  while kill -0 "$pid" 2>/dev/null; do
    for p in "$pid" $(descendants "$pid"); do
      rss=$(rss_kb "$p")
      ((rss > peak)) && peak=$rss
      if ((rss > FUZZ_RSS_MB * 1024)) && [[ -z "$over" ]]; then
        over="process $p resident at $((rss / 1024)) MiB, over the limit of $FUZZ_RSS_MB MiB"
        for q in $(descendants "$pid") "$pid"; do kill "$q" 2>/dev/null || true; done
      fi
    done
    sleep 0.2
  done
  rc=0
  wait "$pid" || rc=$?
  seconds=$(($(date +%s) - start))
  execs=$(grep -o 'execs: [0-9]*' "$out" | tail -1 | grep -o '[0-9]*' || echo 0)
  line="$(printf '%-14s %-22s %4ss %9s execs  peak RSS %4d MiB' "$pkg" "$name" "$seconds" "${execs:-0}" "$((peak / 1024))")"
  # Go 1.26's coordinator can fail a run that found nothing with a bare "context deadline exceeded"
  # when -fuzztime ends while a worker is mid-call (go.dev/issue/75804, fixed in Go 1.27): a run
  # that ends so, wrote no failing input and logged no other failure passes, with a note.
  if [[ $rc -ne 0 && -z "$over" && "$(ls "$crashers" 2>/dev/null || true)" == "$before" ]] &&
    grep -q '^    context deadline exceeded$' "$out" && ! grep -q 'Failing input written' "$out" &&
    [[ $(grep -c '^--- FAIL\|^    --- FAIL' "$out") -eq 1 ]]; then
    rc=0
    line_note="  (ended by Go's fuzztime race, go.dev/issue/75804: nothing found)"
  else
    line_note=""
  fi
  if [[ -n "$over" || $rc -ne 0 ]]; then
    failed+=("$pkg:$name")
    line+="  FAILED${over:+: $over}"
    log "$pkg $name failed (exit $rc${over:+; $over}):"
    tail -40 "$out" >&2
  fi
  summary+=("$line$line_note")
done

echo "make fuzz: FUZZTIME=$FUZZTIME, FUZZ_AS=$FUZZ_AS, FUZZ_RSS_MB=$FUZZ_RSS_MB"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]} > 0)); then
  echo "make fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
