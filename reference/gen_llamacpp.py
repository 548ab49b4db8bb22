#!/usr/bin/env python3
"""llama.cpp on GGUF files as they are: SmolLM2 in llama.cpp's block types, perplexities, Gemma-3 ids.

Usage (reference/llamacpp.sh runs these in its virtualenv):
    python reference/gen_llamacpp.py quants --dir ~/.cache/quanta/assets/smollm2-quants
    python reference/gen_llamacpp.py perplexity --quants ~/.cache/quanta/assets/smollm2-quants --out reference/testdata/llamacpp

``quants`` writes SmolLM2-135M-Instruct in Q4_0, Q4_K_M, Q5_K_M, Q6_K and Q8_0 with llama.cpp's own
quantizer (``llama_cpp.llama_model_quantize``, no importance matrix). The source is the Q4_1 file of
``make assets``: llama.cpp re-quantizes it with ``allow_requantize``, i.e. from its dequantized values
(no F32 or F16 original is reachable here). The files are therefore not the quality a quantization of
the original weights would give; they are real llama.cpp files of each type, which is what the
comparison needs: quanta and llama.cpp run identical files. Not committed (tens of MB each).

``perplexity`` scores each file with llama.cpp (llama-cpp-python, ``logits_all``) on fixed token ids and
windows, the protocol of models.StridedWindows and reference/gen_smollm.py: the first 1024 ids, windows
[0, 513) and [512, 1024) each from an empty context, 1023 predictions, NLL = -log_softmax(float64(logits))
[target], perplexity = exp(mean NLL). The ids:

* SmolLM2 files: reference/testdata/smollm2/eval_ids.npy (llama.cpp's tokenization of GPL-3, no BOS: the
  vocabulary adds none);
* Gemma-3: llama.cpp's tokenization of GPL-3 with the vocabulary's BOS (``add_bos_token`` is true, as
  Gemma is run), the first 1024 ids, written to gemma3_eval_ids.npy.

For each file it also scores the same file converted to F32 by llama.cpp (``LLAMA_FTYPE_ALL_F32`` with
``allow_requantize``: the dequantized values, exactly), written to a temporary file: llama.cpp's
quantized products quantize the activations to 8 bits (Q8_0, Q8_1 or Q8_K blocks, by type) where an F32
product does not, and the pair shows what that costs on each type. Each result has both windows'
perplexities too (a test may score one window). For Gemma-3 the F32 run's 20 largest logits at a few
positions of the first window (gemma3_f32_w0_top20_{ids,logits}.npy; position 512 is the one whose
sliding-window layers no longer see position 0), and llama.cpp's greedy tokens for two prompts on the
file itself (GREEDY_PROMPTS, BOS added, special tokens parsed). Everything runs on one thread.

``rescore`` scores the files of a committed index again with the llama.cpp of the running virtualenv
(the same ids, windows and rule) and prints each perplexity beside the committed one: how much
llama.cpp's own figure moves from one build to another (e.g. a virtualenv whose llama-cpp-python was
built with ``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF ..."`` (reference/README.md) against a native AVX-512 build).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
from llamacpp_util import quantize  # noqa: E402
import numpy as np  # noqa: E402

N_IDS, WINDOW, STRIDE = 1024, 513, 512
# Prompts whose greedy continuations (GREEDY_TOKENS tokens) llama.cpp's run of the Gemma-3 file gives.
GREEDY_PROMPTS = ["<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n", "The capital of France is"]
GREEDY_TOKENS = 8
# Positions of the first window whose top-20 logits are recorded (Gemma-3, F32 run).
TOP_POSITIONS = [0, 1, 2, 63, 255, 511, 512]

# The SmolLM2 files made by `quants`: name suffix -> llama.cpp file type.
QUANTS = {"Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "Q5_K_M": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
          "Q6_K": "LLAMA_FTYPE_MOSTLY_Q6_K", "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def gemma_gguf() -> str:
    return os.path.join(common.assets_dir(), "gemma3", "gemma-3-270m-q4_k_m.gguf")


def quant_path(d: str, t: str) -> str:
    return os.path.join(d, f"SmolLM2-135M-Instruct.{t}.gguf")


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tensor_types(path: str) -> dict:
    from gguf import GGUFReader

    counts: dict[str, int] = {}
    for t in GGUFReader(path).tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return dict(sorted(counts.items()))


def windows(ids: list[int]) -> list[tuple[list[int], int]]:
    """(window ids, leading predictions to drop): [0, 513) and [512, 1024), as models.StridedWindows."""
    return [(ids[0:WINDOW], 0), (ids[STRIDE:N_IDS], 0)]


def window_nll(path: str, wins: list[tuple[list[int], int]], top=None) -> list[np.ndarray]:
    """Each window's NLLs; with top (a dict), the first window's top-20 logits at TOP_POSITIONS go into it."""
    from llama_cpp import Llama

    n_ctx = max(len(w) for w, _ in wins)
    llm = Llama(path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False)
    out = []
    for k, (win, drop) in enumerate(wins):
        llm.reset()
        llm.eval(win)
        scores = np.array(llm.scores[: len(win)], dtype=np.float32)
        if top is not None and k == 0:
            rows = scores[TOP_POSITIONS]
            ids = np.argsort(-rows, axis=1, kind="stable")[:, :20]
            top["ids"], top["logits"] = ids.astype(np.int32), np.take_along_axis(rows, ids, axis=1)
        logits = scores.astype(np.float64)
        m = logits[:-1].max(axis=1)
        lse = m + np.log(np.exp(logits[:-1] - m[:, None]).sum(axis=1))
        out.append((lse - logits[np.arange(len(win) - 1), win[1:]])[drop:])
    del llm
    return out


def greedy(path: str) -> list[dict]:
    from llama_cpp import Llama

    llm = Llama(path, n_ctx=128, n_batch=128, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False)
    out = []
    for prompt in GREEDY_PROMPTS:
        ids = [int(i) for i in llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)]
        llm.reset()
        llm.eval(ids)
        gen = []
        for _ in range(GREEDY_TOKENS):
            nxt = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1])))
            gen.append(nxt)
            llm.eval([nxt])
        out.append({"prompt": prompt, "prompt_ids": ids, "ids": gen, "text": llm.detokenize(gen).decode("utf-8", errors="replace")})
    del llm
    return out


def figures(nlls: list[np.ndarray]) -> dict:
    nll = np.concatenate(nlls)
    return {"perplexity": float(np.exp(nll.mean())), "mean_nll": float(nll.mean()),
            "window_perplexities": [float(np.exp(n.mean())) for n in nlls]}


def score(path: str, ids: list[int], log, top=None) -> dict:
    nlls = window_nll(path, windows(ids))
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        quantize(path, f32, "LLAMA_FTYPE_ALL_F32")
        nlls32 = window_nll(f32, windows(ids), top)
    diff = np.abs(np.concatenate(nlls) - np.concatenate(nlls32)).max()
    r = dict(figures(nlls), file=os.path.basename(path), sha256=sha256(path), bytes=os.path.getsize(path),
             tensor_types=tensor_types(path), n=sum(len(n) for n in nlls),
             f32_dequantized=dict(figures(nlls32), max_abs_nll_diff=float(diff)))
    log(f"{r['file']}: perplexity {r['perplexity']:.4f}; its F32 dequantization {r['f32_dequantized']['perplexity']:.4f}")
    return r


def cmd_quants(args) -> None:
    src = common.require(common.smollm_gguf())
    os.makedirs(args.dir, exist_ok=True)
    for t, ftype in QUANTS.items():
        dst = quant_path(args.dir, t)
        if os.path.exists(dst) and not args.force:
            print(f"llamacpp: {dst} exists", file=sys.stderr)
            continue
        quantize(src, dst, ftype, nthread=args.threads)
        print(f"llamacpp: wrote {dst} ({os.path.getsize(dst) / 1e6:.1f} MB)", file=sys.stderr)


def cmd_perplexity(args) -> None:
    from llama_cpp import Llama

    def log(*a):
        print("llamacpp:", *a, file=sys.stderr, flush=True)

    w = common.Writer(args.out)
    smol_ids = [int(i) for i in np.load(os.path.join(common.HERE, "testdata", "smollm2", "eval_ids.npy"))]
    assert len(smol_ids) == N_IDS
    gemma = common.require(gemma_gguf())
    text = open(common.require(common.GPL3), "rb").read()
    vocab = Llama(gemma, vocab_only=True, verbose=False)
    gemma_ids = [int(i) for i in vocab.tokenize(text, add_bos=True, special=False)][:N_IDS]
    del vocab
    ids_info = w.npy("gemma3_eval_ids", np.array(gemma_ids, dtype=np.int32))

    files = {}
    smollm = {"Q4_1": common.require(common.smollm_gguf())}
    for t in QUANTS:
        smollm[t] = common.require(quant_path(args.quants, t))
    for t, path in smollm.items():
        files["smollm2/" + t] = dict(score(path, smol_ids, log), model="smollm2", type=t, ids="smollm2/eval_ids.npy")
    top: dict = {}
    files["gemma3/Q4_K_M"] = dict(score(gemma, gemma_ids, log, top), model="gemma3", type="Q4_K_M", ids=ids_info["file"])
    files["gemma3/Q4_K_M"]["f32_dequantized"]["window0_top20"] = {
        "positions": TOP_POSITIONS, "ids": w.npy("gemma3_f32_w0_top20_ids", top["ids"]),
        "logits": w.npy("gemma3_f32_w0_top20_logits", top["logits"]),
        "def": "the F32 run's logits at the window-0 positions, the 20 largest per position in decreasing order"}
    files["gemma3/Q4_K_M"]["greedy"] = greedy(gemma)

    def digest(ids):
        return hashlib.sha256(np.array(ids, dtype="<i4").tobytes()).hexdigest()

    w.json("index", {
        "format": 1,
        "versions": common.versions("llama_cpp_python", "gguf", "numpy"),
        "rule": "first 1024 ids; windows [0, 513) and [512, 1024), each from an empty context (models.StridedWindows(1024, 513, "
                "512)); 1023 predictions; NLL = -log_softmax(float64(logits))[target]; perplexity = exp(mean NLL); llama.cpp "
                "through llama-cpp-python, logits_all, n_ctx = n_batch = n_ubatch = 513, one thread, default KV cache (F16)",
        "ids": {
            "smollm2": {"file": "smollm2/eval_ids.npy", "sha256_int32": digest(smol_ids),
                        "source": "llama.cpp's tokenization of GPL-3, no BOS (reference/gen_smollm.py)"},
            "gemma3": dict(ids_info, sha256_int32=digest(gemma_ids),
                           source=f"llama.cpp's tokenization of {common.GPL3} with the vocabulary's BOS "
                                  "(Llama.tokenize(text, add_bos=True, special=False)), first 1024 ids"),
        },
        "quants": {"source": os.path.basename(smollm["Q4_1"]),
                   "how": "llama_cpp.llama_model_quantize(src, dst, ftype, allow_requantize=True): re-quantized from the Q4_1 "
                          "file's dequantized values, no importance matrix", "ftypes": QUANTS},
        "f32_dequantized": "the same file converted by llama_model_quantize(LLAMA_FTYPE_ALL_F32, allow_requantize): its values "
                           "exactly, run with llama.cpp's F32 products (no 8-bit quantization of the activations)",
        "files": files,
    })


def cmd_rescore(args) -> None:
    from llama_cpp import llama_print_system_info

    print("llamacpp:", llama_print_system_info().decode().strip(), file=sys.stderr)
    index = json.load(open(os.path.join(args.index, "index.json")))
    for key, ref in sorted(index["files"].items()):
        path = common.require(gemma_gguf() if ref["model"] == "gemma3" else
                              common.smollm_gguf() if ref["type"] == "Q4_1" else quant_path(args.quants, ref["type"]))
        if sha256(path) != ref["sha256"]:
            print(f"{key}: {path} is not the file the index scored; skipped")
            continue
        ids_file = ref["ids"] if ref["model"] == "gemma3" else os.path.join("..", ref["ids"])
        ids = [int(i) for i in np.load(os.path.join(args.index, ids_file))]
        ppl = figures(window_nll(path, windows(ids)))["perplexity"]
        print(f"{key}: {ppl:.4f}, the index {ref['perplexity']:.4f} ({100 * (ppl / ref['perplexity'] - 1):+.3f} %)",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quants")
    q.add_argument("--dir", required=True)
    q.add_argument("--threads", type=int, default=2)
    q.add_argument("--force", action="store_true")
    p = sub.add_parser("perplexity")
    p.add_argument("--quants", required=True)
    p.add_argument("--out", required=True)
    r = sub.add_parser("rescore")
    r.add_argument("--quants", required=True)
    r.add_argument("--index", default=os.path.join(common.HERE, "testdata", "llamacpp"))
    args = ap.parse_args()
    {"quants": cmd_quants, "perplexity": cmd_perplexity, "rescore": cmd_rescore}[args.cmd](args)


if __name__ == "__main__":
    main()
