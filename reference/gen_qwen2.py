#!/usr/bin/env python3
"""llama.cpp's logits of a tiny random Qwen2 model (general.architecture "qwen2").

Usage (reference/llamacpp.sh runs it in its virtualenv; a few seconds):
    python reference/gen_qwen2.py --out reference/testdata/llamacpp_qwen2

Qwen2 (Qwen2, Qwen2.5) is Llama's block with a bias on the q, k and v projections
(blk.N.attn_q.bias, attn_k.bias, attn_v.bias), its rotary embedding rotating the two halves of each
head (llama.cpp's LLAMA_ROPE_TYPE_NEOX: llama.cpp's converter stores q/k rows in Hugging Face's
order, not permuted as for "llama"). This script writes a tiny "qwen2" GGUF (gguf-py) with an
untied output head, its weights defined by the formula of reference/gen_rope_freqs.py (values:
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
import hashlib
import os
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import numpy as np  # noqa: E402
from gen_rope_freqs import splitmix64, values  # noqa: E402

# The model: grouped-query attention (2 query heads per key/value head), heads 16 wide, an untied
# output head (as Qwen2.5 7B and larger), Qwen2.5's RoPE base and epsilon.
VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 64, 2, 4, 2, 16, 128
CONTEXT, EPS, BASE = 64, 1e-6, 1000000.0
SEQ = 24
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


def write_gguf(path: str, ts: list[tuple[str, np.ndarray]]) -> None:
    import gguf

    w = gguf.GGUFWriter(path, "qwen2")
    w.add_block_count(LAYERS)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
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

    ts = tensors()
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

    logits = run(ts, "tiny-qwen2.gguf")
    # The control: the same file without the q/k/v biases.
    plain = run([(n, a) for n, a in ts if not n.endswith(BIASES)], "tiny-qwen2-nobias.gguf")
    w = common.Writer(args.out)
    w.json("index", {
        "format": 1,
        "versions": common.versions("llama_cpp_python", "gguf", "numpy"),
        "config": {"vocab_size": VOCAB, "embedding_length": DIM, "block_count": LAYERS, "head_count": HEADS,
                   "head_count_kv": KV_HEADS, "head_dim": HEAD_DIM, "feed_forward_length": FFN, "context_length": CONTEXT,
                   "layer_norm_rms_epsilon": EPS, "rope_freq_base": BASE, "tied_embeddings": False},
        "weights": "values(name, n, scale, offset) = offset + scale * ((splitmix64(crc32(name) << 32 | i) >> 40) - 2^23) / 2^24, "
                   "float32; token_embd and the q/k/v biases scale 1; kernels (output.weight included) scale 0.5, stored as "
                   "the GGUF stores them ([out][in], q/k rows in Hugging Face's order); norms scale 0.5 offset 1",
        "tensors": [{"name": n, "shape": list(a.shape), "sha256": hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()}
                    for n, a in ts],
        "ids": w.npy("ids", np.array(ids, dtype=np.int32)),
        "logits": w.npy("logits", logits),
        "logits_without_biases": w.npy("logits_without_biases", plain),
        "rule": "llama.cpp through llama-cpp-python: Llama(n_ctx=64, n_batch=n_ubatch=24, one thread, logits_all, type_k = type_v "
                "= F32, flash_attn off).eval(ids) from an empty context; logits [24, 64] of every position; "
                "logits_without_biases: the same file without the attn_q/attn_k/attn_v biases",
    })
    print(f"qwen2: largest logit {np.abs(logits).max():.4g}, biases move the logits by up to {np.abs(logits - plain).max():.4g}; "
          f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
