"""What the tiny random-model references share (gen_rope_freqs.py, gen_qwen2.py): the weight
formula the Go tests repeat bit for bit, the GGUF writer, the fixed token ids, llama.cpp's float32
run and the per-tensor index.

Weights: values(name, n, scale, offset) = offset + scale * u, u = (the top 24 bits of
splitmix64(crc32(name) << 32 | i) - 2^23) / 2^24 in [-0.5, 0.5); the scale a power of two, so every
value is exact (internal/decodertest.FormulaValues is the Go side).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zlib

import numpy as np

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 64, 2, 4, 2, 16, 128
CONTEXT, SEQ = 64, 24
M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def values(name: str, n: int, scale: float, offset: float = 0.0) -> np.ndarray:
    """n float32 values of the formula above."""
    seed = zlib.crc32(name.encode()) << 32
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        u = ((splitmix64(seed | i) >> 40) - (1 << 23)) / float(1 << 24)
        out[i] = np.float32(offset + scale * u)
    return out


def token_ids() -> list[int]:
    """The SEQ fixed token ids every set runs."""
    return [int(splitmix64(zlib.crc32(b"ids") << 32 | i) % VOCAB) for i in range(SEQ)]


def write_gguf(path: str, arch: str, ts: list[tuple[str, np.ndarray]], base: float, eps: float, rope_dims: int | None = None) -> None:
    """A GGUF of architecture arch with the model's configuration and the tensors ts (gguf-py)."""
    import gguf

    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(LAYERS)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    if rope_dims is not None:
        w.add_rope_dimension_count(rope_dims)
    w.add_rope_freq_base(base)
    w.add_layer_norm_rms_eps(eps)
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


def llamacpp_logits(write, name: str, ids: list[int]) -> np.ndarray:
    """llama.cpp's logits [SEQ, VOCAB] of every position of ids from an empty context, on the GGUF
    write(path) writes: one thread, logits_all, a float32 KV cache, no flash attention."""
    from llama_cpp import GGML_TYPE_F32, Llama

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        write(path)
        llm = Llama(path, n_ctx=CONTEXT, n_batch=SEQ, n_ubatch=SEQ, n_threads=1, n_threads_batch=1, logits_all=True,
                    type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False, verbose=False)
        llm.eval(ids)
        logits = np.array(llm.scores[:SEQ], dtype=np.float32)
        del llm
    return logits


def config(eps: float, base: float, tied: bool) -> dict:
    """The index's configuration, the keys the Go tests read."""
    return {"vocab_size": VOCAB, "embedding_length": DIM, "block_count": LAYERS, "head_count": HEADS,
            "head_count_kv": KV_HEADS, "head_dim": HEAD_DIM, "feed_forward_length": FFN, "context_length": CONTEXT,
            "layer_norm_rms_epsilon": eps, "rope_freq_base": base, "tied_embeddings": tied}


def tensor_index(ts: list[tuple[str, np.ndarray]]) -> list[dict]:
    """Each tensor's name, shape and the sha256 of its float32 little-endian data."""
    return [{"name": n, "shape": list(a.shape), "sha256": hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()}
            for n, a in ts]


RULE = ("llama.cpp through llama-cpp-python: Llama(n_ctx=64, n_batch=n_ubatch=24, one thread, logits_all, type_k = type_v "
        "= F32, flash_attn off).eval(ids) from an empty context; logits [24, 64] of every position; ")
