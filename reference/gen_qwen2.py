#!/usr/bin/env python3
"""llama.cpp's logits of a tiny random Qwen2 model (general.architecture "qwen2").

Usage (reference/llamacpp.sh runs it in its virtualenv; a few seconds):
    python reference/gen_qwen2.py --out reference/testdata/llamacpp_qwen2

Qwen2 (Qwen2, Qwen2.5) is Llama's block with a bias on the q, k and v projections
(blk.N.attn_q.bias, attn_k.bias, attn_v.bias), its rotary embedding rotating the two halves of each
head (llama.cpp's LLAMA_ROPE_TYPE_NEOX: llama.cpp's converter stores q/k rows in Hugging Face's
order, not permuted as for "llama"). This script writes a tiny "qwen2" GGUF (gguf-py) with an
untied output head, its weights defined by the formula of reference/tiny_gguf.py (values:
splitmix64 of crc32(tensor name) and the index, 24 bits, times a power of two, so that the Go test,
models/qwen2 TestLlamaCppQwen2, builds the same bits), runs it with llama.cpp (llama-cpp-python,
logits_all, one thread, a float32 KV cache, no flash attention: float32 all through) on fixed token
ids from an empty context, and stores the ids and the logits of every position, and as a control
the logits of the same file without the three biases of each block (llama.cpp reads them as
optional). index.json records the configuration and the sha256 of each tensor's data, which the Go
test checks against the file it builds. The GGUF itself (about 0.3 MB) is not committed.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
from tiny_gguf import DIM, FFN, HEAD_DIM, KV_HEADS, HEADS, LAYERS, RULE, VOCAB, config, llamacpp_logits, tensor_index, token_ids, values, write_gguf  # noqa: E402

# The model (tiny_gguf): grouped-query attention (2 query heads per key/value head), heads 16 wide,
# an untied output head (as Qwen2.5 7B and larger), Qwen2.5's RoPE base and epsilon.
EPS, BASE = 1e-6, 1000000.0
BIASES = ("attn_q.bias", "attn_k.bias", "attn_v.bias")


def tensors() -> list[tuple[str, np.ndarray]]:
    """The GGUF tensors in the Go test's order, numpy shapes row-major ([out, in] for a kernel)."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    out = [("token_embd.weight", values("token_embd.weight", VOCAB * DIM, 1).reshape(VOCAB, DIM))]
    for i in range(LAYERS):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", values(b + "attn_norm.weight", DIM, 0.5, 1)))
        for name, rows, cols in [("attn_q", q, DIM), ("attn_k", kv, DIM), ("attn_v", kv, DIM)]:
            out.append((b + name + ".weight", values(b + name + ".weight", rows * cols, 0.5).reshape(rows, cols)))
            out.append((b + name + ".bias", values(b + name + ".bias", rows, 1)))
        out.append((b + "attn_output.weight", values(b + "attn_output.weight", DIM * q, 0.5).reshape(DIM, q)))
        out.append((b + "ffn_norm.weight", values(b + "ffn_norm.weight", DIM, 0.5, 1)))
        for name, rows, cols in [("ffn_gate", FFN, DIM), ("ffn_up", FFN, DIM), ("ffn_down", DIM, FFN)]:
            out.append((b + name + ".weight", values(b + name + ".weight", rows * cols, 0.5).reshape(rows, cols)))
    out.append(("output_norm.weight", values("output_norm.weight", DIM, 0.5, 1)))
    out.append(("output.weight", values("output.weight", VOCAB * DIM, 0.5).reshape(VOCAB, DIM)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    ts = tensors()
    ids = token_ids()

    def run(ts, name):
        return llamacpp_logits(lambda path: write_gguf(path, "qwen2", ts, BASE, EPS), name, ids)

    logits = run(ts, "tiny-qwen2.gguf")
    # The control: the same file without the q/k/v biases.
    plain = run([(n, a) for n, a in ts if not n.endswith(BIASES)], "tiny-qwen2-nobias.gguf")
    w = common.Writer(args.out)
    w.json("index", {
        "format": 1,
        "versions": common.versions("llama_cpp_python", "gguf", "numpy"),
        "config": config(EPS, BASE, tied=False),
        "weights": "values(name, n, scale, offset) = offset + scale * ((splitmix64(crc32(name) << 32 | i) >> 40) - 2^23) / 2^24, "
                   "float32; token_embd and the q/k/v biases scale 1; kernels (output.weight included) scale 0.5, stored as "
                   "the GGUF stores them ([out][in], q/k rows in Hugging Face's order); norms scale 0.5 offset 1",
        "tensors": tensor_index(ts),
        "ids": w.npy("ids", np.array(ids, dtype=np.int32)),
        "logits": w.npy("logits", logits),
        "logits_without_biases": w.npy("logits_without_biases", plain),
        "rule": RULE + "logits_without_biases: the same file without the attn_q/attn_k/attn_v biases",
    })
    print(f"qwen2: largest logit {np.abs(logits).max():.4g}, biases move the logits by up to {np.abs(logits - plain).max():.4g}; "
          f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
