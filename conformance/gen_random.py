#!/usr/bin/env python3
"""Randomized differential cases for quanta's quantizers, produced by eformer itself.

Draws N seeded random inputs and runs **eformer's own code** on each, called as gen_vectors.py
calls it (eagerly: ``ArrayNF4.quantize``, ``Array8B.quantize``, ``quantize(x, dtype=...)``), then
writes the inputs and eformer's outputs for the Go side (``go run ./conformance/randomrun``, and
the committed sample that ``go test ./conformance/`` checks) to compare bit for bit.

Usage:
    python conformance/gen_random.py --n 5000 --seed 1 --out DIR [--max-elements 20000] [--pool 240]

Inputs: formats NF4 (any even block size, also longer than the last axis), int8 (any non-empty
set of axes, negative ones included, or the default), binary and ternary; dtypes float32,
bfloat16, float16; ranks 1-4 with ragged dimensions; distributions with heavy tails, outliers,
zeros and -0, constants, subnormals, huge values, rows of wildly different scales, a few
non-finite values; and placements that probe the rounding: values on the NF4 codebook midpoints
(and their neighbours) of the block's absmax, int8 values at exact .5 ties of eformer's own scale,
ternary values at eformer's own threshold.

Speed: XLA compiles every eager op per shape, so the shapes come from a pool of ``--pool``
templates (format, dtype, shape, block size or axes) drawn once from the seed; each case draws a
template and fresh data. The pool differs from seed to seed.

Output (DIR, created, must be empty):
    cases.jsonl   one JSON object per line: first a header (format, seed, n, versions, codebook),
                  then one line per case: id, kind, dtype, shape, dist, placement, params, arrays
                  (name -> offset, length, shape, dtype, stored_dtype into arrays.bin), and error
                  (what eformer raised) if it raised.
    arrays.bin    the arrays, each a .npy v1.0 file (bfloat16 stored as its uint16 bits, as in
                  gen_vectors.py), concatenated.
Output is deterministic for a given seed, N and options.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import io
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
os.environ.setdefault("WARN_ON_MATTER", "false")

import jax  # noqa: E402,F401
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from eformer.ops.quantization import Array8B, ArrayNF4, quantize  # noqa: E402

from common import NF4_CODEBOOK  # noqa: E402

BF16 = ml_dtypes.bfloat16
DTYPES = {"float32": np.float32, "bfloat16": BF16, "float16": np.float16}
MIDPOINTS = (NF4_CODEBOOK[:-1].astype(np.float64) + NF4_CODEBOOK[1:]) / 2

# Largest finite value and smallest normal of each dtype.
MAX = {"float32": 3.4028234663852886e38, "bfloat16": 3.3895313892515355e38, "float16": 65504.0}
TINY = {"float32": 2.0**-126, "bfloat16": 2.0**-126, "float16": 2.0**-14}
SUBNORMAL_MIN = {"float32": 2.0**-149, "bfloat16": 2.0**-133, "float16": 2.0**-24}

KINDS = ["nf4", "int8", "binary", "ternary"]
KIND_WEIGHTS = [0.35, 0.3, 0.12, 0.23]
DISTS = ["normal", "heavy", "outliers", "sparse", "constant", "subnormal", "huge", "rowscales", "uniform",
         "integers", "tiny", "nonfinite"]
DIST_WEIGHTS = [0.2, 0.12, 0.1, 0.1, 0.05, 0.07, 0.06, 0.1, 0.07, 0.04, 0.05, 0.04]


# --------------------------------------------------------------------------------------------
# Templates: the shapes (and static parameters) eformer compiles for.


def random_dim(rng) -> int:
    r = rng.random()
    if r < 0.15:
        return 1
    if r < 0.75:
        return int(rng.integers(2, 24))
    if r < 0.95:
        return int(rng.integers(24, 130))
    return int(rng.integers(130, 700))


def random_shape(rng, kind: str, max_elements: int) -> list[int]:
    while True:
        rank = int(rng.choice([1, 2, 3, 4], p=[0.2, 0.45, 0.2, 0.15]))
        dims = [random_dim(rng) for _ in range(rank)]
        if kind in ("binary", "ternary"):
            dims[0] = 4 * max(1, int(np.ceil(dims[0] / 4)))
        if int(np.prod(dims)) <= max_elements:
            return dims


def max_block_size(dim: int) -> int:
    # nf4.MaxBlockSize: the last axis rounded up to even, or the default 64.
    return max(dim + dim % 2, 64)


def random_template(rng, max_elements: int) -> dict:
    kind = str(rng.choice(KINDS, p=KIND_WEIGHTS))
    dtype = str(rng.choice(list(DTYPES)))
    shape = random_shape(rng, kind, max_elements)
    params: dict = {}
    if kind == "nf4":
        last = shape[-1]
        top = max_block_size(last)
        if rng.random() < 0.05:
            bs = 2 * int(rng.integers(top // 2 + 1, top // 2 + 40))  # longer than quanta accepts
        elif rng.random() < 0.3:
            bs = int(rng.choice([16, 32, 64, 128, 256]))
            bs = min(bs, top)
        else:
            bs = 2 * int(rng.integers(1, top // 2 + 1))
        params["block_size"] = bs
    elif kind == "int8":
        rank = len(shape)
        if rng.random() < 0.2:
            params["axis"] = None
        else:
            k = int(rng.integers(1, rank + 1))
            axes = [int(a) for a in rng.choice(rank, size=k, replace=False)]
            axes = [a - rank if rng.random() < 0.4 else a for a in axes]
            params["axis"] = axes
    return {"kind": kind, "dtype": dtype, "shape": shape, "params": params}


# --------------------------------------------------------------------------------------------
# Data


def log_uniform(rng, lo: float, hi: float, size=None):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size))


def draw(rng, dist: str, shape: list[int], dtype: str) -> np.ndarray:
    n = int(np.prod(shape))
    top, tiny = MAX[dtype], TINY[dtype]
    sigma = float(log_uniform(rng, 1e-3, 1e3)) if dtype != "float16" else float(log_uniform(rng, 1e-2, 1e2))
    if dist == "normal":
        x = rng.standard_normal(n) * sigma
    elif dist == "heavy":
        x = rng.standard_t(int(rng.integers(1, 4)), n) * sigma
    elif dist == "outliers":
        x = rng.standard_normal(n) * sigma
        k = max(1, n // 200)
        idx = rng.integers(0, n, k)
        x[idx] *= log_uniform(rng, 1e2, 1e6 if dtype != "float16" else 1e3, k)
    elif dist == "sparse":
        x = rng.standard_normal(n) * sigma
        x[rng.random(n) < rng.uniform(0.5, 0.97)] = 0.0
        x[rng.random(n) < 0.1] = -0.0
    elif dist == "constant":
        c = float(rng.standard_normal() * sigma)
        x = np.full(n, c)
        if rng.random() < 0.5 and len(shape) >= 2:  # constant rows of different values
            rows = x.reshape(-1, shape[-1])
            rows[:] = (rng.standard_normal(rows.shape[0]) * sigma)[:, None]
            x = rows.reshape(-1)
    elif dist == "subnormal":
        lo = SUBNORMAL_MIN[dtype]
        x = log_uniform(rng, lo, tiny, n) * rng.choice([-1.0, 1.0], n)
        if rng.random() < 0.5:  # mixed with normal values
            m = rng.random(n) < 0.3
            x[m] = rng.standard_normal(int(m.sum())) * tiny * float(log_uniform(rng, 1, 1e6))
    elif dist == "huge":
        x = log_uniform(rng, top / 1e4, top, n) * rng.choice([-1.0, 1.0], n)
    elif dist == "rowscales":
        x = rng.standard_normal(n)
        rows = x.reshape(-1, shape[-1])
        lo, hi = (-30, 30) if dtype != "float16" else (-6, 4)
        rows *= (10.0 ** rng.uniform(lo, hi, rows.shape[0]))[:, None]
        x = rows.reshape(-1)
    elif dist == "uniform":
        x = rng.uniform(-sigma, sigma, n)
    elif dist == "integers":
        x = rng.integers(-8, 9, n).astype(np.float64)
    elif dist == "tiny":
        scale = 1e-30 if dtype != "float16" else 1e-4
        x = rng.standard_normal(n) * scale
    elif dist == "nonfinite":
        x = rng.standard_normal(n) * sigma
        x[int(rng.integers(0, n))] = float(rng.choice([np.nan, np.inf, -np.inf]))
    else:
        raise ValueError(dist)
    with np.errstate(over="ignore"):
        x = np.where(np.isfinite(x), np.clip(x, -top, top), x)
    return x.astype(DTYPES[dtype]).reshape(shape)


def _as(v, dtype: str):
    return np.asarray(v, np.float64).astype(DTYPES[dtype])


def place_nf4(rng, x: np.ndarray, bs: int, dtype: str) -> np.ndarray:
    """Values on (and one or two ulps around) the codebook midpoints of their block's absmax."""
    flat = x.reshape(-1, x.shape[-1])
    rows, last = flat.shape
    nb = -(-last // bs)
    for _ in range(int(rng.integers(1, 6))):
        r, b = int(rng.integers(rows)), int(rng.integers(nb))
        lo, hi = b * bs, min((b + 1) * bs, last)
        if hi - lo < 2:
            continue
        block = flat[r, lo:hi]
        amax = float(np.max(np.abs(block.astype(np.float64))))
        if not np.isfinite(amax) or amax == 0:
            amax = float(_as(log_uniform(rng, 1e-3, 1e3), dtype))
            block[0] = _as(amax, dtype)
        for j in range(lo, hi):
            if abs(float(flat[r, j])) == amax:
                continue
            if rng.random() < 0.7:
                m = float(rng.choice(MIDPOINTS)) * amax
                v = _as(m, dtype)
                for _ in range(int(rng.integers(-2, 3))):
                    v = np.nextafter(v, _as(np.inf, dtype)) if rng.random() < 0.5 else np.nextafter(v, _as(-np.inf, dtype))
                if abs(float(v)) <= amax:
                    flat[r, j] = v
    return flat.reshape(x.shape)


def place_int8(rng, x: np.ndarray, axis, dtype: str) -> np.ndarray:
    """Values at exact .5 ties of eformer's own scale (and one ulp around)."""
    q = Array8B.quantize(jnp.asarray(x), axis=tuple(axis) if axis is not None else None)
    scale = np.broadcast_to(np.asarray(q.scale).astype(np.float64), x.shape)
    amax_mask = np.zeros(x.shape, bool)
    ax = tuple(a % x.ndim for a in (axis if axis is not None else [-1]))
    amax = np.max(np.abs(x.astype(np.float64)), axis=ax, keepdims=True)
    amax_mask |= np.abs(x.astype(np.float64)) == amax
    flat, sflat, mflat = x.reshape(-1), scale.reshape(-1), amax_mask.reshape(-1)
    ambig = np.broadcast_to(amax, x.shape).reshape(-1)
    for i in rng.choice(flat.size, size=min(flat.size, int(rng.integers(1, 24))), replace=False):
        if mflat[i] or not np.isfinite(sflat[i]) or not np.isfinite(ambig[i]):
            continue
        k = int(rng.integers(0, 127))
        v = _as((k + 0.5) * sflat[i] * float(rng.choice([-1.0, 1.0])), dtype)
        if rng.random() < 0.3:
            v = np.nextafter(v, _as(np.inf if rng.random() < 0.5 else -np.inf, dtype))
        if np.isfinite(v) and abs(float(v)) < ambig[i]:
            flat[i] = v
    return flat.reshape(x.shape)


def place_ternary(rng, x: np.ndarray, dtype: str) -> np.ndarray:
    """Values at eformer's own threshold 0.5·std(x), iterated until it no longer moves."""
    flat = x.reshape(-1)
    if flat.size < 3:
        return x
    idx = rng.choice(flat.size, size=min(flat.size - 1, int(rng.integers(1, 5))), replace=False)
    for _ in range(8):
        t = np.asarray(0.5 * jnp.std(jnp.asarray(flat)))
        if not np.isfinite(t):
            break
        before = flat.copy()
        for n, i in enumerate(idx):
            flat[i] = t if n % 2 == 0 else -t
        if np.array_equal(before.view(np.uint8), flat.view(np.uint8)):
            break
    return flat.reshape(x.shape)


def place_binary(rng, x: np.ndarray, dtype: str) -> np.ndarray:
    flat = x.reshape(-1)
    for i in rng.choice(flat.size, size=min(flat.size, int(rng.integers(1, 6))), replace=False):
        flat[i] = _as(float(rng.choice([0.0, -0.0, -SUBNORMAL_MIN[dtype], SUBNORMAL_MIN[dtype], -TINY[dtype] / 2])), dtype)
    return flat.reshape(x.shape)


# --------------------------------------------------------------------------------------------
# Output


class Out:
    def __init__(self, out: str):
        os.makedirs(out, exist_ok=True)
        if os.listdir(out):
            sys.exit(f"gen_random: output directory {out} is not empty")
        self.cases = open(os.path.join(out, "cases.jsonl"), "w")
        self.arrays = open(os.path.join(out, "arrays.bin"), "wb")
        self.offset = 0

    def array(self, a) -> dict:
        a = np.asarray(a)
        logical = "bfloat16" if a.dtype == BF16 else np.dtype(a.dtype).name
        stored = a.view(np.uint16) if a.dtype == BF16 else a
        stored = np.ascontiguousarray(stored)
        buf = io.BytesIO()
        np.lib.format.write_array(buf, stored, version=(1, 0), allow_pickle=False)
        data = buf.getvalue()
        self.arrays.write(data)
        ref = {"offset": self.offset, "length": len(data), "shape": list(a.shape), "dtype": logical,
               "stored_dtype": stored.dtype.name}
        self.offset += len(data)
        return ref

    def line(self, obj: dict):
        self.cases.write(json.dumps(obj, sort_keys=True) + "\n")

    def close(self):
        self.cases.close()
        self.arrays.close()


def run_case(rng, tpl: dict, case_id: str) -> tuple[dict, dict]:
    kind, dtype, shape, params = tpl["kind"], tpl["dtype"], tpl["shape"], tpl["params"]
    dist = str(rng.choice(DISTS, p=DIST_WEIGHTS))
    x = draw(rng, dist, shape, dtype)
    placement = None
    finite = bool(np.all(np.isfinite(x.astype(np.float64))))
    if finite and rng.random() < 0.6:
        placement = {"nf4": "midpoints", "int8": "ties", "binary": "signs", "ternary": "threshold"}[kind]
        if kind == "nf4":
            x = place_nf4(rng, x, params["block_size"], dtype)
        elif kind == "int8":
            x = place_int8(rng, x, params["axis"], dtype)
        elif kind == "binary":
            x = place_binary(rng, x, dtype)
        else:
            x = place_ternary(rng, x, dtype)
    outputs: dict = {}
    error = None
    try:
        if kind == "nf4":
            q = ArrayNF4.quantize(jnp.asarray(x), block_size=params["block_size"])
            outputs = {"packed": q.packed, "absmax": q.absmax}
        elif kind == "int8":
            axis = params["axis"]
            q = Array8B.quantize(jnp.asarray(x), **({} if axis is None else {"axis": tuple(axis)}))
            outputs = {"weight": q.weight, "scale": q.scale}
        else:
            q = quantize(jnp.asarray(x), dtype=kind)
            outputs = {"weight": q.weight}
            if kind == "ternary":
                # eformer's expression, recomputed: the threshold it compared against.
                outputs["threshold"] = np.asarray(0.5 * jnp.std(jnp.asarray(x))).reshape(1)
    except Exception as e:  # noqa: BLE001 - recording whatever eformer raises
        error = {"type": type(e).__name__, "message": str(e).strip().splitlines()[0][:300]}
    meta = {"id": case_id, "kind": kind, "dtype": dtype, "shape": shape, "dist": dist, "placement": placement,
            "params": params}
    if error:
        meta["error"] = error
    arrays = {"x": x}
    arrays.update({k: np.asarray(v) for k, v in outputs.items()})
    return meta, arrays


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, required=True, help="number of cases")
    ap.add_argument("--seed", type=int, required=True, help="seed of the pool and of every case")
    ap.add_argument("--out", required=True, help="output directory (must be empty or absent)")
    ap.add_argument("--max-elements", type=int, default=20000, help="largest input size")
    ap.add_argument("--pool", type=int, default=240, help="number of shape templates")
    args = ap.parse_args()
    start = time.time()
    pool_rng = np.random.default_rng([args.seed, 0])
    pool = [random_template(pool_rng, args.max_elements) for _ in range(args.pool)]
    out = Out(args.out)
    out.line({
        "format": "quanta-random-1", "generator": "conformance/gen_random.py", "seed": args.seed, "n": args.n,
        "pool": args.pool, "max_elements": args.max_elements,
        "versions": {p: md.version(p) for p in ("eformer", "jax", "jaxlib", "numpy", "ml_dtypes")},
        "nf4_codebook": [float(v) for v in NF4_CODEBOOK],
    })
    counts: dict[str, int] = {}
    for i in range(args.n):
        rng = np.random.default_rng([args.seed, 1, i])
        tpl = pool[int(rng.integers(len(pool)))]
        meta, arrays = run_case(rng, tpl, f"s{args.seed}_{i}")
        meta["arrays"] = {k: out.array(v) for k, v in arrays.items()}
        out.line(meta)
        counts[meta["kind"]] = counts.get(meta["kind"], 0) + 1
        if (i + 1) % 500 == 0:
            print(f"gen_random: {i + 1}/{args.n} cases, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    out.close()
    print(f"gen_random: {args.n} cases {dict(sorted(counts.items()))}, seed {args.seed} -> {args.out} "
          f"({out.offset / 2**20:.1f} MiB, {time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
