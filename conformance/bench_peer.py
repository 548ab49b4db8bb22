#!/usr/bin/env python3
"""Peer benchmark: eformer's quantized matmul on JAX CPU.

Times ``jax.jit(implicit(chain))`` for NF4, int8 and ternary (Array1B) weights, and the same chain of dense
float32 weights, where ``chain(x, ws)`` applies ``y = (y @ w).astype(x.dtype)`` for every weight of ``ws``:
the same measurement as quanta's ``go run ./bench`` (bench/main.go), at the same shapes (M = 1, 8, 64, 512,
2048; K = N = 4096) so that ``conformance/peer`` can divide one by the other.

Like bench/main.go, each call chains L layers with distinct K x N weights (8 for M < 512, so decode-size
products stream their weights from memory as a model does each token; 2 for M >= 512, which is compute-bound)
and the reported time is per layer (call time / L). The weights are N(0, 1/K) so chained activations stay O(1).
Each call takes x from the host and returns the result to the host (``np.asarray``), as quanta's harness does.
The ``astype`` keeps the activations float32 after eformer's int8 product, which returns bfloat16.
Each point: compile, warm up once, then time calls and report the median (and min) per layer, in seconds.

Usage:
    python conformance/bench_peer.py OUT.json [--m 1,8,64,512,2048] [--k 4096] [--n 4096]
        [--formats nf4,int8,ternary,dense] [--layers 8] [--layers-large 2] [--reps 20] [--budget 5]
        [--block-size 64]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WARN_ON_MATTER", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from eformer.jaximus import implicit  # noqa: E402
from eformer.ops.quantization import Array8B, ArrayNF4, quantize  # noqa: E402


def make_weights(fmt: str, k: int, n: int, stack: int, block_size: int):
    ws = []
    for i in range(stack):
        key = jax.random.PRNGKey(1000 + i)
        w = jax.random.normal(key, (k, n), jnp.float32) / np.sqrt(k)
        if fmt == "dense":
            q = w
        elif fmt == "nf4":
            q = ArrayNF4.quantize(w, block_size=block_size)
        elif fmt == "int8":
            q = Array8B.quantize(w)  # default axis (-1,): scale (K, 1)
        elif fmt == "ternary":
            q = quantize(w, dtype="ternary")  # Array1B, materializes as int8
        else:
            raise ValueError(fmt)
        jax.block_until_ready(jax.tree_util.tree_leaves(q))
        ws.append(q)
        del w
    return ws


def weight_bytes(q) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(q)))


def chain(x, ws):
    y = x
    for w in ws:
        y = (y @ w).astype(x.dtype)
    return y


def bench_point(fn, x, ws, reps: int, budget: float, min_reps: int = 3):
    """Times fn(x, ws) from host x to host result; returns the call times in seconds."""
    np.asarray(fn(x, ws))  # compile + warm up
    times = []
    start = time.perf_counter()
    while len(times) < reps and (len(times) < min_reps or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        np.asarray(fn(x, ws))
        times.append(time.perf_counter() - t0)
    return times


def main():
    ap = argparse.ArgumentParser(description="eformer peer benchmark on JAX CPU")
    ap.add_argument("out", help="output JSON path")
    ap.add_argument("--m", default="1,8,64,512,2048")
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--formats", default="nf4,int8,ternary,dense")
    ap.add_argument("--layers", type=int, default=8, help="layers chained for M < 512 (weights streamed from memory)")
    ap.add_argument("--layers-large", type=int, default=2, help="layers chained for M >= 512 (compute-bound)")
    ap.add_argument("--reps", type=int, default=20, help="max timed calls per point")
    ap.add_argument("--budget", type=float, default=5.0, help="seconds per point after 3 timed calls")
    ap.add_argument("--block-size", type=int, default=64, help="NF4 block size")
    args = ap.parse_args()

    ms = [int(v) for v in args.m.split(",") if v]
    formats = [f for f in args.formats.split(",") if f]
    if args.k != args.n:
        sys.exit("bench_peer: chaining layers needs K == N")
    fn = jax.jit(implicit(chain))
    stack = max(args.layers, args.layers_large)

    results = []
    for fmt in formats:
        t0 = time.perf_counter()
        ws = make_weights(fmt, args.k, args.n, stack, args.block_size)
        print(f"[{fmt}] {stack} weights quantized in {time.perf_counter() - t0:.1f}s, "
              f"{weight_bytes(ws[0]) / 2**20:.2f} MiB each", file=sys.stderr, flush=True)
        for m in ms:
            layers = args.layers if m < 512 else args.layers_large
            x = np.asarray(jax.random.normal(jax.random.PRNGKey(m), (m, args.k), jnp.float32))
            times = bench_point(fn, x, ws[:layers], args.reps, args.budget)
            per_layer = [t / layers for t in times]
            med = statistics.median(per_layer)
            results.append({
                "format": fmt, "M": m, "K": args.k, "N": args.n, "layers": layers,
                "median_s": med, "min_s": min(per_layer), "reps": len(times), "call_times_s": times,
                "x_dtype": "float32", "weight_bytes": weight_bytes(ws[0]),
            })
            print(f"[{fmt}] M={m:5d} median {med * 1e3:9.3f} ms/layer  min {min(per_layer) * 1e3:9.3f} ms/layer  "
                  f"({len(times)} calls of {layers} layers)", file=sys.stderr, flush=True)
        del ws

    doc = {
        "tool": "conformance/bench_peer.py",
        "what": "jax.jit(implicit(chain)) in eformer, chain = y = (y @ w).astype(x.dtype) over L distinct weights; "
                "times are per layer (median_s, min_s), host x in, host result out",
        "versions": {p: md.version(p) for p in ("eformer", "jax", "jaxlib", "numpy")},
        "device": str(jax.devices()[0]),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "processor": platform.processor()},
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "config": {"M": ms, "K": args.k, "N": args.n, "formats": formats, "layers": args.layers,
                   "layers_large": args.layers_large,
                   "max_reps": args.reps, "budget_s": args.budget, "nf4_block_size": args.block_size,
                   "int8_axis": [-1], "ternary": "quantize(w, dtype='ternary') -> Array1B (int8 materialize)"},
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
