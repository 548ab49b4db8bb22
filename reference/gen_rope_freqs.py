#!/usr/bin/env python3
"""llama.cpp's logits of a tiny random Llama model with Llama 3.1's rope_freqs tensor.

Usage (reference/llamacpp.sh runs it in its virtualenv; a few seconds):
    python reference/gen_rope_freqs.py --out reference/testdata/llamacpp_rope_freqs

Llama 3.1 and later files carry ``rope_freqs.weight``: one float32 per rotary pair (head_dim/2),
the factors by which llama.cpp divides each pair's frequency (ggml's rope with freq_factors:
angle_i = pos * base^(-2i/head_dim) / factor_i), computed by llama.cpp's converter from the "llama3"
rope scaling of the Hugging Face config (conversion/llama.py, LlamaModel.generate_extra_tensors;
reproduced in llama3_factors). This script writes a tiny "llama" GGUF with such a tensor (gguf-py),
its weights defined by a formula that the Go test (models/llama, TestLlamaCppRoPEFreqs) computes to
the same bits (values: splitmix64 of crc32(tensor name) and the index, 24 bits, times a power of two,
so every float operation is exact), runs it with llama.cpp (llama-cpp-python, logits_all, one thread,
a float32 KV cache, no flash attention: float32 all through) on fixed token ids from an empty context,
and stores the ids, the factors and the logits of every position, and as a control the logits of the
same file without rope_freqs. index.json records the configuration and the sha256 of each tensor's
data, which the Go test checks against the file it builds. The GGUF itself (about 0.3 MB) is not committed.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
from tiny_gguf import DIM, FFN, HEAD_DIM, KV_HEADS, HEADS, LAYERS, RULE, VOCAB, config, llamacpp_logits, tensor_index, token_ids, values, write_gguf  # noqa: E402

# The model (tiny_gguf): grouped-query attention (2 query heads per key/value head), heads 16 wide
# (8 rotary pairs), tied embeddings as Llama 3.2 1B/3B.
EPS, BASE = 1e-5, 10000.0
# Llama 3.1's rope_scaling, its original context shortened to 32 so that the factors of this head
# width are not all 1 or all `factor`: pairs with wavelengths below 32/4 keep theirs (1), above 32
# are divided by 8, the one in between smoothly.
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}


def llama3_factors(base: float, dim: int, p: dict) -> np.ndarray:
    """llama.cpp's converter (conversion/llama.py, LlamaModel.generate_extra_tensors) for rope_type
    "llama3", in numpy float32 where it uses torch float32."""
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor, low, high, old = p["factor"], p["low_freq_factor"], p["high_freq_factor"], p["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def tensors(factors: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The GGUF tensors in the Go test's order, numpy shapes row-major ([out, in] for a kernel)."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    out = [("token_embd.weight", values("token_embd.weight", VOCAB * DIM, 1).reshape(VOCAB, DIM)),
           ("rope_freqs.weight", factors)]
    for i in range(LAYERS):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", values(b + "attn_norm.weight", DIM, 0.5, 1)))
        for name, rows, cols in [("attn_q", q, DIM), ("attn_k", kv, DIM), ("attn_v", kv, DIM), ("attn_output", DIM, q)]:
            out.append((b + name + ".weight", values(b + name + ".weight", rows * cols, 0.5).reshape(rows, cols)))
        out.append((b + "ffn_norm.weight", values(b + "ffn_norm.weight", DIM, 0.5, 1)))
        for name, rows, cols in [("ffn_gate", FFN, DIM), ("ffn_up", FFN, DIM), ("ffn_down", DIM, FFN)]:
            out.append((b + name + ".weight", values(b + name + ".weight", rows * cols, 0.5).reshape(rows, cols)))
    out.append(("output_norm.weight", values("output_norm.weight", DIM, 0.5, 1)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    factors = llama3_factors(BASE, HEAD_DIM, LLAMA3)
    ts = tensors(factors)
    ids = token_ids()

    def run(ts, name):
        return llamacpp_logits(lambda path: write_gguf(path, "llama", ts, BASE, EPS, rope_dims=HEAD_DIM), name, ids)

    logits = run(ts, "tiny-llama31.gguf")
    # The control: the same file without rope_freqs (plain RoPE, as Llama 2).
    plain = run([(n, a) for n, a in ts if n != "rope_freqs.weight"], "tiny-llama.gguf")
    w = common.Writer(args.out)
    w.json("index", {
        "format": 1,
        "versions": common.versions("llama_cpp_python", "gguf", "numpy"),
        "config": config(EPS, BASE, tied=True),
        "rope_scaling": LLAMA3,
        "weights": "values(name, n, scale, offset) = offset + scale * ((splitmix64(crc32(name) << 32 | i) >> 40) - 2^23) / 2^24, "
                   "float32; token_embd scale 1; kernels scale 0.5, stored as the GGUF stores them ([out][in], q/k rows in "
                   "llama.cpp's converter order); norms scale 0.5 offset 1",
        "tensors": tensor_index(ts),
        "ids": w.npy("ids", np.array(ids, dtype=np.int32)),
        "rope_freqs": w.npy("rope_freqs", factors),
        "logits": w.npy("logits", logits),
        "logits_without_rope_freqs": w.npy("logits_without_rope_freqs", plain),
        "rule": RULE + "logits_without_rope_freqs: the same file without the rope_freqs tensor",
    })
    print(f"rope_freqs: factors {factors.tolist()}; wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
