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
import hashlib
import math
import os
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402

# The model: grouped-query attention (2 query heads per key/value head), heads 16 wide (8 rotary
# pairs), tied embeddings as Llama 3.2 1B/3B.
VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 64, 2, 4, 2, 16, 128
CONTEXT, EPS, BASE = 64, 1e-5, 10000.0
# Llama 3.1's rope_scaling, its original context shortened to 32 so that the factors of this head
# width are not all 1 or all `factor`: pairs with wavelengths below 32/4 keep theirs (1), above 32
# are divided by 8, the one in between smoothly.
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
SEQ = 24
M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def values(name: str, n: int, scale: float, offset: float = 0.0) -> np.ndarray:
    """n float32 values offset + scale * u, u = (top 24 bits of splitmix64(crc32(name) << 32 | i)
    - 2^23) / 2^24 in [-0.5, 0.5); scale a power of two, so every value is exact."""
    seed = zlib.crc32(name.encode()) << 32
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        u = ((splitmix64(seed | i) >> 40) - (1 << 23)) / float(1 << 24)
        out[i] = np.float32(offset + scale * u)
    return out


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


def write_gguf(path: str, ts: list[tuple[str, np.ndarray]]) -> None:
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(BASE)
    w.add_layer_norm_rms_eps(EPS)
    w.add_vocab_size(VOCAB)
    # llama.cpp needs a vocabulary of VOCAB tokens (its tables are sized by it); the text is unused.
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>", "<0x0A>"] + [f"t{i}" for i in range(4, VOCAB)])
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types([2, 3, 3, 6] + [1] * (VOCAB - 4))
    for name, a in ts:
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from llama_cpp import GGML_TYPE_F32, Llama

    factors = llama3_factors(BASE, HEAD_DIM, LLAMA3)
    ts = tensors(factors)
    ids = [int(splitmix64(zlib.crc32(b"ids") << 32 | i) % VOCAB) for i in range(SEQ)]
    def run(ts, name):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, name)
            write_gguf(path, ts)
            llm = Llama(path, n_ctx=CONTEXT, n_batch=SEQ, n_ubatch=SEQ, n_threads=1, n_threads_batch=1, logits_all=True,
                        type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False, verbose=False)
            llm.eval(ids)
            logits = np.array(llm.scores[:SEQ], dtype=np.float32)
            del llm
        return logits

    logits = run(ts, "tiny-llama31.gguf")
    # The control: the same file without rope_freqs (plain RoPE, as Llama 2).
    plain = run([(n, a) for n, a in ts if n != "rope_freqs.weight"], "tiny-llama.gguf")
    w = common.Writer(args.out)
    w.json("index", {
        "format": 1,
        "versions": common.versions("llama_cpp_python", "gguf", "numpy"),
        "config": {"vocab_size": VOCAB, "embedding_length": DIM, "block_count": LAYERS, "head_count": HEADS,
                   "head_count_kv": KV_HEADS, "head_dim": HEAD_DIM, "feed_forward_length": FFN, "context_length": CONTEXT,
                   "layer_norm_rms_epsilon": EPS, "rope_freq_base": BASE, "tied_embeddings": True},
        "rope_scaling": LLAMA3,
        "weights": "values(name, n, scale, offset) = offset + scale * ((splitmix64(crc32(name) << 32 | i) >> 40) - 2^23) / 2^24, "
                   "float32; token_embd scale 1; kernels scale 0.5, stored as the GGUF stores them ([out][in], q/k rows in "
                   "llama.cpp's converter order); norms scale 0.5 offset 1",
        "tensors": [{"name": n, "shape": list(a.shape), "sha256": hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()}
                    for n, a in ts],
        "ids": w.npy("ids", np.array(ids, dtype=np.int32)),
        "rope_freqs": w.npy("rope_freqs", factors),
        "logits": w.npy("logits", logits),
        "logits_without_rope_freqs": w.npy("logits_without_rope_freqs", plain),
        "rule": "llama.cpp through llama-cpp-python: Llama(n_ctx=64, n_batch=n_ubatch=24, one thread, logits_all, type_k = type_v "
                "= F32, flash_attn off).eval(ids) from an empty context; logits [24, 64] of every position; "
                "logits_without_rope_freqs: the same file without the rope_freqs tensor",
    })
    print(f"rope_freqs: factors {factors.tolist()}; wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
