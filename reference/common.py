"""Shared helpers of the reference harness: asset paths, deterministic storage, versions.

Every generator writes into one output folder: arrays as ``.npy`` (format 1.0, little endian,
C order, written by ``numpy.save``) and one ``index.json`` (sorted keys, no timestamps), so that
a regeneration on the same machine gives identical bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata as md
import json
import os
import platform
import sys

# No model hub is reachable: make sure no library tries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# bitsandbytes' default backend wraps some functions in torch.compile; keep compilation
# artefacts out of the user's home caches and out of the results.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def assets_dir() -> str:
    """The asset cache filled by scripts/fetch-assets.sh (``make assets``)."""
    d = os.environ.get("QUANTA_ASSETS")
    if not d:
        d = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "quanta", "assets")
    return d


def smollm_gguf() -> str:
    return os.path.join(assets_dir(), "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def minilm_dir() -> str:
    return os.path.join(assets_dir(), "minilm")


GPL3 = "/usr/share/common-licenses/GPL-3"
FASHION_DIR = "/usr/share/datasets/fashion-mnist"


def require(path: str) -> str:
    if not os.path.exists(path):
        sys.exit(f"reference: missing {path} (run `make assets` in the repository root)")
    return path


def set_torch_threads(n: int = 1) -> None:
    """Pin the intra-op thread count: float reductions must not depend on the core count."""
    import torch

    torch.set_num_threads(n)
    torch.set_num_interop_threads(1)


def torch_inference() -> None:
    """Set torch up for a reference run: one intra-op thread (set_torch_threads) and no autograd."""
    import torch

    set_torch_threads(1)
    torch.set_grad_enabled(False)


def versions(*names: str) -> dict:
    out = {"python": platform.python_version()}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return _jsonable(o.tolist())
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    return o


class Writer:
    """Writes ``.npy`` arrays and JSON files into one folder and remembers what it wrote."""

    def __init__(self, out: str):
        self.out = out
        os.makedirs(out, exist_ok=True)
        self.files: list[str] = []
        self._by_content: dict[bytes, str] = {}

    def npy(self, name: str, a, dedupe: bool = True) -> dict:
        """Stores ``a`` as ``name + '.npy'``; returns {file, shape, dtype} for the index.

        With ``dedupe``, an array whose bytes (dtype, shape, values) equal an array already written
        is not written again: the returned entry names the earlier file.
        """
        a = np.ascontiguousarray(np.asarray(a))
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        info = {"shape": list(a.shape), "dtype": a.dtype.name}
        key = hashlib.sha256(repr((a.dtype.str, a.shape)).encode() + a.tobytes()).digest()
        if dedupe and key in self._by_content:
            return dict(info, file=self._by_content[key])
        fname = name + ".npy"
        if fname in self.files:
            raise ValueError(f"duplicate file {fname}")
        path = os.path.join(self.out, fname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, a, allow_pickle=False)
        self.files.append(fname)
        self._by_content.setdefault(key, fname)
        return dict(info, file=fname)

    def json(self, name: str, obj) -> str:
        fname = name if name.endswith(".json") else name + ".json"
        path = os.path.join(self.out, fname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_jsonable(obj), f, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False)
            f.write("\n")
        self.files.append(fname)
        return fname

    def raw(self, name: str, data: bytes) -> str:
        path = os.path.join(self.out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        self.files.append(name)
        return name


def bf16_bits(t) -> np.ndarray:
    """The raw bits of a torch bfloat16 tensor as uint16 (numpy has no bfloat16)."""
    import torch

    return t.detach().contiguous().view(torch.int16).numpy().view(np.uint16)


@contextlib.contextmanager
def weights_transformed(pairs, fn):
    """For the block's duration, the weight of each Linear ``getattr(parent, attr)`` of the
    (parent, attr) pairs is ``fn(weight)``; the weights are restored afterwards."""
    import torch

    pairs = list(pairs)
    saved = []
    with torch.no_grad():
        for parent, attr in pairs:
            lin = getattr(parent, attr)
            saved.append(lin.weight.detach().clone())
            lin.weight.copy_(fn(lin.weight.detach()))
    try:
        yield
    finally:
        with torch.no_grad():
            for (parent, attr), w in zip(pairs, saved):
                getattr(parent, attr).weight.copy_(w)


@contextlib.contextmanager
def modules_replaced(pairs, make):
    """For the block's duration, each module ``getattr(parent, attr)`` of the (parent, attr) pairs
    is ``make(module)``; the modules are put back afterwards."""
    pairs = list(pairs)
    saved = [getattr(p, a) for p, a in pairs]
    for (p, a), lin in zip(pairs, saved):
        setattr(p, a, make(lin))
    try:
        yield
    finally:
        for (p, a), lin in zip(pairs, saved):
            setattr(p, a, lin)
