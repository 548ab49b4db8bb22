"""llama.cpp helpers (llama-cpp-python): GGUF type conversion and per-token NLL on fixed windows."""

from __future__ import annotations

import ctypes
import os

import numpy as np

import common

# Output types made from the shipped Q4_1 GGUF by llama.cpp's own quantizer. Converting from an
# already-quantized model (allow_requantize) dequantizes first: F32 is exactly the Q4_1/Q8_0 values,
# Q8_0 and Q4_0 are re-quantizations of them (fine for timing, not for quality claims).
FTYPES = {"F32": "LLAMA_FTYPE_ALL_F32", "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
          "Q4_1": "LLAMA_FTYPE_MOSTLY_Q4_1"}


def cache_dir() -> str:
    d = os.environ.get("QUANTA_REF_CACHE") or os.path.join(common.assets_dir(), "reference-cache")
    os.makedirs(d, exist_ok=True)
    return d


def gguf_of_type(t: str, nthread: int = 2) -> str:
    """Path of the SmolLM2 GGUF in type t ("Q4_1" is the shipped file); others are made once and cached
    (outside git) with ``llama_cpp.llama_model_quantize``."""
    src = common.require(common.smollm_gguf())
    if t == "Q4_1":
        return src
    dst = os.path.join(cache_dir(), f"SmolLM2-135M-Instruct.{t}.gguf")
    if not os.path.exists(dst):
        quantize(src, dst, FTYPES[t], nthread)
    return dst


def quantize(src: str, dst: str, ftype: str, nthread: int = 1) -> None:
    """Writes dst, the GGUF src converted to llama.cpp file type ftype (a ``LLAMA_FTYPE_*`` name)
    by ``llama_cpp.llama_model_quantize``, re-quantizing quantized tensors (allow_requantize)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = nthread
    params.ftype = getattr(llama_cpp, ftype)
    params.allow_requantize = True
    tmp = dst + ".tmp"
    rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {src} -> {ftype} failed with {rc}")
    os.replace(tmp, dst)


def window_nll(path: str, windows: list[tuple[list[int], int]], n_threads: int = 1) -> np.ndarray:
    """NLL (float64) of each window's next-token predictions, leading `drop` ones skipped, with llama.cpp."""
    from llama_cpp import Llama

    n_ctx = max(len(w) for w, _ in windows)
    llm = Llama(path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                logits_all=True, verbose=False)
    out = []
    for win, drop in windows:
        llm.reset()  # n_tokens = 0: eval() then drops the whole KV cache first
        llm.eval(win)
        logits = np.array(llm.scores[: len(win)], dtype=np.float64)
        m = logits[:-1].max(axis=1)
        lse = m + np.log(np.exp(logits[:-1] - m[:, None]).sum(axis=1))
        nll = lse - logits[np.arange(len(win) - 1), win[1:]]
        out.append(nll[drop:])
    return np.concatenate(out)
